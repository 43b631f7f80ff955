#!/usr/bin/env bash
# tests/cli/test_deb.sh BUILD_DIR: the Debian package. Builds it (make deb:
# dpkg-buildpackage, then lintian, which must find no error), installs it
# with dpkg, checks that every file is where the systemd units expect it and
# that both daemons accept the shipped configuration (-t, as root and as the
# seckill user, as ExecStartPre runs it), then purges it and checks that the
# machine is as it was. Needs root (skipped otherwise) and no running stack.
# Speaks TAP.
#
# It refuses, without touching anything, when dpkg already knows a seckill
# package (installed, or removed with its configuration kept) or when a file
# of the package is already there: purging at the end would delete someone's
# installation or files. BUILD_DIR is not used: the package is built from
# the tree, in build/deb (mk/deb.mk).
#
# "As it was": no file of the package left, /etc/seckill gone, dpkg knows no
# seckill, no statoverride or systemd state left. The seckill user is the
# exception Debian makes: a purge keeps the system users a package created
# (files they own may remain elsewhere, and a uid given to another user later
# would own them). The test checks that the purge kept it, then removes it
# itself when it was not there before, since it was the test that caused it.
set -u

: "${1:?usage: tests/cli/test_deb.sh BUILD_DIR}"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

T=$(mktemp -d)
# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

if [ "$(id -u)" -ne 0 ]; then
    echo "1..1"
    skip "the Debian package installs, works and purges" "not root: dpkg -i and --purge need root"
    rm -rf "$T"
    exit 0
fi

PKG=seckill
CFG=/etc/seckill/seckill.cfg
UNITDIR=/lib/systemd/system
VERSION=$(sed -n 's/^#define SECKILL_VERSION "\(.*\)"$/\1/p' common/version.h)
DEB=build/${PKG}_${VERSION}_$(dpkg --print-architecture).deb
BINS="seckill-producer seckill-consumer seckillctl"
export DEBIAN_FRONTEND=noninteractive

pkg_status() { dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null; }
known() { local s; s=$(pkg_status); [ -n "$s" ] && [ "$s" != not-installed ]; }
has_user() { getent passwd seckill >/dev/null; }
has_group() { getent group seckill >/dev/null; }

# dpkg, waiting out another dpkg or apt (scripts/stack up installing
# packages) that holds its lock.
dpkg_() {
    local end=$((SECONDS + 300))
    while :; do
        run dpkg "$@"
        if [ "$rc" -ne 0 ] && grep -qiE 'lock was locked|database is locked|frontend lock' "$T/err" &&
            [ $SECONDS -lt $end ]; then
            sleep 2
            continue
        fi
        return
    done
}

INSTALLED=0 USER_BEFORE=0 GROUP_BEFORE=0
cleanup() {
    # A run that failed half-way still leaves the machine as it found it.
    if [ "$INSTALLED" -eq 1 ] && known; then dpkg_ --purge "$PKG"; fi
    if [ "$INSTALLED" -eq 1 ]; then
        if [ "$USER_BEFORE" -eq 0 ] && has_user; then userdel seckill >/dev/null 2>&1; fi
        if [ "$GROUP_BEFORE" -eq 0 ] && has_group; then groupdel seckill >/dev/null 2>&1; fi
    fi
    rm -rf "$T"
}
trap cleanup EXIT

if known; then
    echo "1..1"
    fail "no $PKG package on this machine before the test" \
        "dpkg knows $PKG (status: $(pkg_status)): this test installs and purges the package and will not" \
        "touch an installation it did not make. Purge it first (dpkg --purge $PKG) or run the test elsewhere."
    exit 1
fi

# --- make deb -----------------------------------------------------------------

# What the build must not change: the tree's state in git and the parent
# folder, where dpkg-buildpackage writes its results when run in place.
tree_state() {
    if command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1; then
        git status --porcelain --untracked-files=all
    fi
    local f
    for f in "$ROOT"/../*.deb "$ROOT"/../*.ddeb "$ROOT"/../*.changes "$ROOT"/../*.buildinfo; do
        if [ -e "$f" ]; then echo "$f"; fi
    done
}
tree_state >"$T/tree.before"
start=$SECONDS
# Our own make, not a sub-make of make test's (whose variables would follow).
run env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory deb BUILD=build
build_s=$((SECONDS - start))
if [ "$rc" -eq 0 ] && [ -f "$DEB" ]; then
    pass "make deb builds $DEB in ${build_s}s, lintian finds no error"
    grep -E '^[EWIPX]: ' "$T/out" "$T/err" | sed 's/^[^:]*://' | sed 's/^/lintian: /' | diag
else
    fail "make deb builds $DEB, lintian finds no error" "$(run_diag make deb)" "$(tail -n 20 "$T/err")"
    echo "Bail out! no package to install"
    exit 1
fi
tree_state >"$T/tree.after"
if diff "$T/tree.before" "$T/tree.after" >"$T/diff"; then
    pass "make deb leaves the source tree and its parent folder as they were"
else
    fail "make deb leaves the source tree and its parent folder as they were" "$(cat "$T/diff")"
fi
is "the package's version is common/version.h's" "$(dpkg-deb -f "$DEB" Version)" "$VERSION"

# Every path in the package: a file must not exist yet (the purge would take
# it away); a folder may (/usr/bin), and must exist after the purge exactly
# when it existed before.
dpkg-deb --fsys-tarfile "$DEB" | tar -t | sed 's|^\./|/|; s|/$||' | grep -v '^\.\?$' | sort >"$T/paths"
: >"$T/exists.before"
while read -r p; do
    if [ -e "$p" ] || [ -L "$p" ]; then echo "$p" >>"$T/exists.before"; fi
done <"$T/paths"
clash=$(while read -r p; do [ -d "$p" ] || echo "$p"; done <"$T/exists.before")
if [ -n "$clash" ]; then
    fail "none of the package's files is on this machine before the test" \
        "already there (make install PREFIX=/usr?); the test will not overwrite or purge them:" "$clash"
    echo "1..$n"
    exit 1
fi
pass "none of the package's $(grep -c . "$T/paths") paths but shared folders exists before the install"
has_user && USER_BEFORE=1
has_group && GROUP_BEFORE=1
getent passwd seckill >"$T/user.before"
dpkg-statoverride --list "$CFG" >"$T/override.before"
find /etc/systemd /var/lib/systemd -name '*seckill*' 2>/dev/null | sort >"$T/systemd.before"

# --- install ------------------------------------------------------------------

INSTALLED=1
dpkg_ -i "$DEB"
if [ "$rc" -eq 0 ]; then
    pass "dpkg -i $DEB"
else
    fail "dpkg -i $DEB" "$(run_diag dpkg -i "$DEB")"
fi
is "dpkg: $PKG installed, version $VERSION" \
    "$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$PKG" 2>/dev/null | tr -s ' ')" "ii $VERSION"

# ok_if DESC WHY CMD...: pass when CMD succeeds, else fail with WHY.
ok_if() {
    local desc=$1 why=$2
    shift 2
    if "$@" >/dev/null 2>&1; then pass "$desc"; else fail "$desc" "$why"; fi
}

for b in $BINS; do
    run "/usr/bin/$b" --version
    is "/usr/bin/$b --version" "$(cat "$T/out")" "$b $VERSION"
done

# The units name the programs and the configuration by absolute path: each
# must be there (the paths make install filled in with PREFIX and SYSCONFDIR).
for u in seckill-producer.service seckill-consumer@.service; do
    f=$UNITDIR/$u
    if [ ! -f "$f" ]; then
        fail "$f is installed" "missing"
        continue
    fi
    missing=
    while read -r p; do
        [ -e "$p" ] || missing="$missing $p"
    done < <(sed -n 's/^Exec[A-Za-z]*=[-+!@:]*//p; s|^Documentation=file://||p' "$f" |
        grep -oE '(^| )/[^ ]+' | tr -d ' ' | sort -u)
    is "$f: every path its Exec and Documentation lines name exists" "${missing# }" ""
done
if command -v systemd-analyze >/dev/null 2>&1; then
    cp "$UNITDIR/seckill-consumer@.service" "$T/seckill-consumer@1.service"
    run systemd-analyze verify "$UNITDIR/seckill-producer.service" "$T/seckill-consumer@1.service"
    if [ "$rc" -eq 0 ]; then
        pass "systemd-analyze verify accepts the installed units"
    else
        fail "systemd-analyze verify accepts the installed units" "$(run_diag systemd-analyze verify)"
    fi
else
    skip "systemd-analyze verify accepts the installed units" "no systemd-analyze here"
fi
wants=$(find /etc/systemd/system -name 'seckill*' 2>/dev/null)
is "nothing enabled (no seckill link under /etc/systemd/system)" "$wants" ""

ok_if "sysusers entry /usr/lib/sysusers.d/seckill.conf" "missing" \
    grep -q '^u seckill ' /usr/lib/sysusers.d/seckill.conf
IFS=: read -r _ _ uid _ _ _ shell < <(getent passwd seckill)
if has_user && [ "${uid:-1000}" -lt 1000 ] && [ "${shell##*/}" = nologin ]; then
    pass "the seckill system user exists (uid $uid, no login)"
else
    fail "the seckill system user exists (system uid, nologin)" "getent: '$(getent passwd seckill)'"
fi

conffiles=$(dpkg-query -W -f='${Conffiles}\n' "$PKG" | awk 'NF {print $1}' | sort | tr '\n' ' ')
is "conffiles" "$conffiles" "/etc/seckill/prometheus/seckill-rules.yml $CFG "
# The daemons read it as seckill; nobody else may (it holds passwords).
is "$CFG is root:seckill 0640" "$(stat -c '%U:%G %a' "$CFG" 2>&1)" "root:seckill 640"
ok_if "$CFG names no development key" "the public development key must not ship as a live key" \
    sh -c "! grep -q 'DEV-ONLY' '$CFG' && ! ls -R /etc/seckill | grep -q DEV-ONLY"

# The units hand each daemon its PostgreSQL, Redis and Kafka passwords as a systemd
# credential (LoadCredential=pg-producer:..., redis-producer:..., kafka-producer:...,
# CREDENTIALS_DIRECTORY): the same here, with made-up passwords, in a folder only seckill
# reads, as systemd makes it.
CREDS=$(mktemp -d /tmp/seckill-creds-XXXXXX)
for r in pg-producer pg-consumer redis-producer redis-consumer kafka-producer kafka-consumer; do printf 'not-a-real-password\n' >"$CREDS/$r"; done
chmod 400 "$CREDS"/*; chmod 500 "$CREDS"; chown -R seckill: "$CREDS"
export CREDENTIALS_DIRECTORY=$CREDS
for b in seckill-producer seckill-consumer; do
    run "/usr/bin/$b" -t -c "$CFG"
    if [ "$rc" -eq 0 ]; then pass "$b -t -c $CFG"; else fail "$b -t -c $CFG" "$(run_diag "$b" -t -c "$CFG")"; fi
    # As the units run it: User=seckill.
    run runuser -u seckill -- env CREDENTIALS_DIRECTORY="$CREDS" "/usr/bin/$b" -t -c "$CFG"
    if [ "$rc" -eq 0 ]; then
        pass "$b -t as the seckill user (ExecStartPre)"
    else
        fail "$b -t as the seckill user (ExecStartPre)" "$(run_diag runuser -u seckill -- "$b" -t)"
    fi
done
unset CREDENTIALS_DIRECTORY
rm -rf "$CREDS"
run runuser -u nobody -- /usr/bin/seckill-producer -t -c "$CFG"
if [ "$rc" -ne 0 ] && grep -qi 'permission denied' "$T/err"; then
    pass "another user cannot read $CFG"
else
    fail "another user cannot read $CFG" "$(run_diag runuser -u nobody -- seckill-producer -t)"
fi

# The migrations and migrate, which finds them beside itself.
mdir=/usr/share/seckill/sql/migrations
bad=
for f in sql/migrations/*.sql; do cmp -s "$f" "$mdir/$(basename "$f")" || bad="$bad $(basename "$f")"; done
is "every migration in $mdir" "${bad# }" ""
ok_if "/usr/share/seckill/sql/migrate is an executable bash script" "missing, not executable or broken" \
    sh -c 'test -x /usr/share/seckill/sql/migrate && bash -n /usr/share/seckill/sql/migrate'

bad=
for b in $BINS; do
    zcat "/usr/share/man/man8/$b.8.gz" 2>/dev/null | grep -q '^\.TH' || bad="$bad $b.8.gz"
done
is "man pages in /usr/share/man/man8" "${bad# }" ""
bad=
for f in README.md docs/*.md; do cmp -s "$f" "/usr/share/doc/seckill/$f" || bad="$bad $f"; done
for f in copyright changelog.gz; do [ -s "/usr/share/doc/seckill/$f" ] || bad="$bad $f"; done
is "documents in /usr/share/doc/seckill (README, docs/*.md uncompressed, copyright, changelog)" "${bad# }" ""
ok_if "Prometheus rules /etc/seckill/prometheus/seckill-rules.yml" "missing or not the tree's" \
    cmp -s config/prometheus/seckill-rules.yml /etc/seckill/prometheus/seckill-rules.yml

# --- purge --------------------------------------------------------------------

dpkg_ --purge "$PKG"
if [ "$rc" -eq 0 ]; then pass "dpkg --purge $PKG"; else fail "dpkg --purge $PKG" "$(run_diag dpkg --purge "$PKG")"; fi
is "dpkg knows no $PKG any more" "$(pkg_status)" ""
: >"$T/exists.after"
while read -r p; do
    if [ -e "$p" ] || [ -L "$p" ]; then echo "$p" >>"$T/exists.after"; fi
done <"$T/paths"
if diff "$T/exists.before" "$T/exists.after" >"$T/diff"; then
    pass "no path of the package left but the shared folders that were there"
else
    fail "no path of the package left" "$(cat "$T/diff")"
fi
if grep -qx /etc/seckill "$T/exists.before"; then
    skip "/etc/seckill gone" "it was there before the test"
else
    ok_if "/etc/seckill gone" "still there: $(find /etc/seckill 2>&1 | tr '\n' ' ')" test ! -e /etc/seckill
fi
is "statoverride of $CFG as before" "$(dpkg-statoverride --list "$CFG")" "$(cat "$T/override.before")"
is "no systemd state of the package left" \
    "$(find /etc/systemd /var/lib/systemd -name '*seckill*' 2>/dev/null | sort)" "$(cat "$T/systemd.before")"
if [ "$USER_BEFORE" -eq 1 ]; then
    is "the seckill user, there before, is unchanged" "$(getent passwd seckill)" "$(cat "$T/user.before")"
else
    ok_if "the purge keeps the seckill system user it created (Debian's convention)" "it is gone" has_user
    userdel seckill >/dev/null 2>&1
    if [ "$GROUP_BEFORE" -eq 0 ] && has_group; then groupdel seckill >/dev/null 2>&1; fi
    ok_if "the test removed the user and group it caused: none left" "$(getent passwd seckill; getent group seckill)" \
        sh -c '! getent passwd seckill && ! getent group seckill'
fi
INSTALLED=0

echo "1..$n"
[ "$failed" -eq 0 ]
