# Man pages, from scdoc sources in man/ (scdoc: a tiny Debian package that
# turns a Markdown-like text into roff).
#
#   make man           build $(BUILD)/man/seckill-producer.8, seckill-consumer.8, seckillctl.8
#   make install-man   install them into $(MANDIR)/man8 (make install runs it)
#
# Not part of make all or make test. scdoc is installed when missing (as root),
# like mk/fuzz.mk installs clang. docs/configuration.md is not built here: it is
# committed, checked against `seckillctl config reference` by tests/cli/test_docs.sh.

SCDOC     ?= scdoc
MANDIR    ?= $(PREFIX)/share/man
MAN_SRC   := $(wildcard man/*.scd)
MAN_PAGES := $(MAN_SRC:man/%.scd=$(BUILD)/man/%)

.PHONY: man install-man man-toolchain

man: $(MAN_PAGES)

man-toolchain:
	@if ! command -v $(SCDOC) >/dev/null 2>&1; then \
	    [ "$$(id -u)" -eq 0 ] || { echo "man: $(SCDOC) is missing (run as root, or: sudo apt-get install scdoc)" >&2; exit 1; }; \
	    echo "man: installing scdoc"; \
	    mkdir -p $(BUILD)/man; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends scdoc; } >$(BUILD)/man/apt.log 2>&1 \
	        || { tail -n 20 $(BUILD)/man/apt.log >&2; echo "man: apt-get install scdoc failed" >&2; exit 1; }; \
	    command -v $(SCDOC) >/dev/null 2>&1 || { echo "man: $(SCDOC) still missing" >&2; exit 1; }; \
	fi

# Through a temporary file: a page scdoc refuses leaves no empty target behind.
$(BUILD)/man/%: man/%.scd mk/docs.mk | man-toolchain
	@mkdir -p $(dir $@)
	$(SCDOC) <$< >$@.tmp && mv $@.tmp $@

install-man: man
	install -d $(DESTDIR)$(MANDIR)/man8
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man8/
