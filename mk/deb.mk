# The Debian package (issue #18), built by Debian's own tools from debian/.
#
#   make deb   build $(BUILD)/seckill_<version>_<arch>.deb and check it with
#              lintian: any error fails, warnings are printed
#
# Not part of make all; tests/cli/test_deb.sh runs it, installs the package,
# checks it and purges it. dpkg-buildpackage writes its results into the
# parent folder of the tree it builds and runs `debian/rules clean` in it, so
# it builds a copy, $(DEB_DIR)/src: the results land in $(DEB_DIR) (the
# .changes, .buildinfo and the -dbgsym package stay there), never in the
# source tree or beside it. The toolchain and the Build-Depends are installed
# when missing (as root), like mk/docs.mk installs scdoc.

DEB_DIR     ?= $(BUILD)/deb
DEB_JOBS    ?= $(shell nproc 2>/dev/null || echo 1)
DEB_TOOLS   := dpkg-buildpackage:dpkg-dev dh:debhelper lintian:lintian fakeroot:fakeroot
# Another apt or dpkg (scripts/stack up installing packages) holds the lock
# for a while: wait for it instead of failing.
DEB_APT     := apt-get -o DPkg::Lock::Timeout=300 -y -qq --no-install-recommends

.PHONY: deb deb-toolchain

deb-toolchain:
	@mkdir -p $(DEB_DIR)
	@need=; for t in $(DEB_TOOLS); do command -v $${t%%:*} >/dev/null 2>&1 || need="$$need $${t#*:}"; done; \
	if [ -n "$$need" ]; then \
	    [ "$$(id -u)" -eq 0 ] || { echo "deb: missing$$need (run as root, or: sudo apt-get install$$need)" >&2; exit 1; }; \
	    echo "deb: installing$$need"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    { apt-get update -qq && $(DEB_APT) install $$need; } >$(DEB_DIR)/apt.log 2>&1 \
	        || { tail -n 20 $(DEB_DIR)/apt.log >&2; echo "deb: apt-get install failed" >&2; exit 1; }; \
	fi

# The package's version is debian/changelog's; it must be the programs' own
# (common/base/version.h), or `dpkg -s seckill` and `seckill-producer --version`
# would disagree.
deb: deb-toolchain
	@v=$$(sed -n 's/^#define SECKILL_VERSION "\(.*\)"$$/\1/p' common/base/version.h); \
	d=$$(dpkg-parsechangelog -S Version); \
	[ "$$v" = "$$d" ] || { echo "deb: debian/changelog is at $$d, common/base/version.h at $$v: add a changelog entry (dch -v $$v)" >&2; exit 1; }
	@rm -rf $(DEB_DIR)/src $(DEB_DIR)/*.deb $(BUILD)/seckill_*.deb $(DEB_DIR)/*.changes $(DEB_DIR)/*.buildinfo
	@mkdir -p $(DEB_DIR)/src
	@# The working tree as it is (uncommitted edits included, like make), less
	@# the builds, the local stack's state and git's files.
	tar -cf - --exclude=./build --exclude=./.stack --exclude=./.git . | tar -xf - -C $(DEB_DIR)/src
	@cd $(DEB_DIR)/src && if ! dpkg-checkbuilddeps >/dev/null 2>&1; then \
	    [ "$$(id -u)" -eq 0 ] || { dpkg-checkbuilddeps; echo "deb: Build-Depends missing (run as root, or: sudo apt-get build-dep ./)" >&2; exit 1; }; \
	    echo "deb: installing the Build-Depends"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    { apt-get update -qq && $(DEB_APT) build-dep ./; } >../apt-build-dep.log 2>&1 \
	        || { tail -n 20 ../apt-build-dep.log >&2; echo "deb: apt-get build-dep failed" >&2; exit 1; }; \
	fi
	@echo "deb: dpkg-buildpackage -us -uc -b -J$(DEB_JOBS) (log $(DEB_DIR)/build.log)"
	@cd $(DEB_DIR)/src && dpkg-buildpackage -us -uc -b -J$(DEB_JOBS) >../build.log 2>&1 \
	    || { tail -n 40 ../build.log >&2; echo "deb: dpkg-buildpackage failed, see $(DEB_DIR)/build.log" >&2; exit 1; }
	@deb=$$(cd $(DEB_DIR) && ls seckill_*.deb) && cp $(DEB_DIR)/$$deb $(BUILD)/$$deb && rm -rf $(DEB_DIR)/src && \
	echo "deb: $(BUILD)/$$deb; lintian:" && \
	lintian --fail-on error $(BUILD)/$$deb; rc=$$?; \
	[ $$rc -eq 0 ] || echo "deb: lintian found errors (exit $$rc)" >&2; exit $$rc
