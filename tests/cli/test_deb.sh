#!/usr/bin/env bash
# tests/cli/test_deb.sh BUILD_DIR: the Debian package. Builds it (make deb:
# dpkg-buildpackage, then lintian, which must find no error), installs it
# with dpkg, checks that every file is where the systemd units expect it,
# that each daemon runs as a user of its own that cannot read the other's
# credentials, that the shipped configuration is a production one (-t
# refuses it, at the line to act on, until its CA file and key are there;
# then both daemons accept it, as root and as their users, as ExecStartPre
# runs it), then purges it and checks that the machine is as it was. Needs
# root (skipped otherwise) and no running stack. Speaks TAP.
#
# It refuses, without touching anything, when dpkg already knows a seckill
# package (installed, or removed with its configuration kept) or when a file
# of the package is already there: purging at the end would delete someone's
# installation or files. BUILD_DIR is not used: the package is built from
# the tree, in build/deb (mk/deb.mk).
#
# "As it was": no file of the package left, /etc/seckill gone, dpkg knows no
# seckill, no statoverride or systemd state left. The users
# (seckill-producer, seckill-consumer) and group seckill are the exception
# Debian makes: a purge keeps the system users a package created (files they
# own may remain elsewhere, and a uid given to another user later would own
# them). The test checks that the purge kept them, then removes those that
# were not there before, since it was the test that caused them.
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
VERSION=$(sed -n 's/^#define SECKILL_VERSION "\(.*\)"$/\1/p' common/base/version.h)
DEB=build/${PKG}_${VERSION}_$(dpkg --print-architecture).deb
BINS="seckill-producer seckill-consumer seckillctl"
export DEBIAN_FRONTEND=noninteractive

USERS="seckill-producer seckill-consumer"
pkg_status() { dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null; }
known() { local s; s=$(pkg_status); [ -n "$s" ] && [ "$s" != not-installed ]; }
has_user() { getent passwd "$1" >/dev/null; }
has_group() { getent group "$1" >/dev/null; }
# The users and groups the package makes that exist now, one per line
# ("user NAME", "group NAME").
accounts() {
    local u
    for u in $USERS; do
        if has_user "$u"; then echo "user $u"; fi
        if has_group "$u"; then echo "group $u"; fi
    done
    if has_group seckill; then echo "group seckill"; fi
}
# drop_accounts: remove those the test caused (not in $T/accounts.before),
# the users before the groups.
drop_accounts() {
    local kind name
    while read -r kind name; do
        grep -qx "$kind $name" "$T/accounts.before" && continue
        if [ "$kind" = user ]; then userdel "$name" >/dev/null 2>&1; fi
    done < <(accounts)
    while read -r kind name; do
        grep -qx "$kind $name" "$T/accounts.before" && continue
        if [ "$kind" = group ]; then groupdel "$name" >/dev/null 2>&1; fi
    done < <(accounts)
}

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

INSTALLED=0 CREDS_P= CREDS_C=
cleanup() {
    # A run that failed half-way still leaves the machine as it found it.
    if [ "$INSTALLED" -eq 1 ]; then rm -f /etc/seckill/tls/ca.crt /etc/seckill/jwt/login.pub.pem; fi
    if [ "$INSTALLED" -eq 1 ] && known; then dpkg_ --purge "$PKG"; fi
    if [ "$INSTALLED" -eq 1 ]; then drop_accounts; fi
    rm -rf "$T" ${CREDS_P:+"$CREDS_P"} ${CREDS_C:+"$CREDS_C"}
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
is "the package's version is common/base/version.h's" "$(dpkg-deb -f "$DEB" Version)" "$VERSION"

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
accounts >"$T/accounts.before"
for u in $USERS; do getent passwd "$u"; done >"$T/users.before"
dpkg-statoverride --list '/etc/seckill*' >"$T/override.before"
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

# One user per daemon (issue #34): a producer taken over must not read the
# consumer's credentials, which systemd hands to the consumer's user alone.
SYSU=/usr/lib/sysusers.d/seckill.conf
ok_if "sysusers entry $SYSU: a user per daemon, both in group seckill" "$(cat "$SYSU" 2>&1)" \
    sh -c "grep -q '^u seckill-producer ' $SYSU && grep -q '^u seckill-consumer ' $SYSU &&
           grep -q '^m seckill-producer seckill' $SYSU && grep -q '^m seckill-consumer seckill' $SYSU"
for u in $USERS; do
    IFS=: read -r _ _ uid _ _ _ shell < <(getent passwd "$u")
    if has_user "$u" && [ "${uid:-1000}" -lt 1000 ] && [ "${shell##*/}" = nologin ]; then
        pass "the $u system user exists (uid $uid, no login)"
    else
        fail "the $u system user exists (system uid, nologin)" "getent: '$(getent passwd "$u")'"
    fi
    is "$u's groups: its own and seckill" "$(id -Gn "$u" 2>&1 | tr ' ' '\n' | sort | tr '\n' ' ')" \
        "$(printf '%s\n' "$u" seckill | sort | tr '\n' ' ')"
done
for b in producer consumer; do
    u=seckill-$b.service
    [ "$b" = consumer ] && u=seckill-consumer@.service
    is "$u runs as seckill-$b, with group seckill beside" \
        "$(grep -E '^(User|Group|SupplementaryGroups)=' "$UNITDIR/$u" | tr '\n' ' ')" \
        "User=seckill-$b Group=seckill-$b SupplementaryGroups=seckill "
    is "$u loads only seckill-$b's own credentials and the order key (the consumer's: the payment key; the producer's: the admission key)" \
        "$(grep '^LoadCredential=' "$UNITDIR/$u" | grep -v ":/etc/seckill/secrets/[a-z]*-$b\$" |
            grep -v '^LoadCredential=order-key:/etc/seckill/secrets/order-key$' |
            if [ "$b" = consumer ]; then
                grep -v '^LoadCredential=payment-key:/etc/seckill/secrets/payment-key$'
            else grep -v '^LoadCredential=admission-key:/etc/seckill/secrets/admission-key$'; fi)" ""
    is "$u loads the order key" "$(grep -c '^LoadCredential=order-key:' "$UNITDIR/$u")" 1
    # The payment key: the consumer checks payments with it; the producer
    # has no use for it.
    is "$u loads the payment key if it is the consumer's" "$(grep -c '^LoadCredential=payment-key:' "$UNITDIR/$u")" \
        "$([ "$b" = consumer ] && echo 1 || echo 0)"
    # The admission key: the producers sign and check admissions with it;
    # the consumer never sees one.
    is "$u loads the admission key if it is the producer's" \
        "$(grep -c '^LoadCredential=admission-key:' "$UNITDIR/$u")" "$([ "$b" = producer ] && echo 1 || echo 0)"
done

conffiles=$(dpkg-query -W -f='${Conffiles}\n' "$PKG" | awk 'NF {print $1}' | sort | tr '\n' ' ')
is "conffiles" "$conffiles" "/etc/seckill/prometheus/seckill-rules.yml $CFG "
# Both daemons read it (group seckill); nobody else may.
is "$CFG is root:seckill 0640" "$(stat -c '%U:%G %a' "$CFG" 2>&1)" "root:seckill 640"
is "/etc/seckill/secrets is root's alone (0700; dh_fixperms made it 0755)" \
    "$(stat -c '%U:%G %a' /etc/seckill/secrets 2>&1)" "root:root 700"
is "/etc/seckill/jwt is the producer's (root:seckill-producer 0750)" \
    "$(stat -c '%U:%G %a' /etc/seckill/jwt 2>&1)" "root:seckill-producer 750"
ok_if "$CFG names no development key" "the public development key must not ship as a live key" \
    sh -c "! grep -q 'DEV-ONLY' '$CFG' && ! ls -R /etc/seckill | grep -q DEV-ONLY"

# The shipped configuration is a production one (issue #34): -t refuses it,
# at the line of the setting, until the CA file and the login service's key
# it names are there.
cline=$(grep -n '^ *sslrootcert = ' "$CFG" | cut -d: -f1)
kline=$(grep -n '^ *keys = ' "$CFG" | cut -d: -f1)
run /usr/bin/seckill-producer -t -c "$CFG"
if [ "$rc" -ne 0 ] && grep -qF "$CFG:$cline: 'postgres.sslrootcert': /etc/seckill/tls/ca.crt: cannot read" "$T/err"; then
    pass "seckill-producer -t refuses the shipped configuration without its CA file, at $CFG:$cline"
else
    fail "seckill-producer -t refuses the shipped configuration without its CA file, at $CFG:$cline" \
        "$(run_diag seckill-producer -t)"
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=test-ca \
    -keyout "$T/ca.key" -out /etc/seckill/tls/ca.crt >/dev/null 2>&1
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$T/login.pem" 2>/dev/null

# The units hand each daemon its PostgreSQL, Redis and Kafka passwords as
# systemd credentials (LoadCredential=, CREDENTIALS_DIRECTORY): the same
# here, with made-up passwords, in a folder per daemon that only its own
# user may read, as systemd makes them.
CREDS_P=$(mktemp -d /tmp/seckill-creds-p-XXXXXX)
CREDS_C=$(mktemp -d /tmp/seckill-creds-c-XXXXXX)
for e in pg redis kafka; do
    printf 'not-a-real-password\n' >"$CREDS_P/$e-producer"
    printf 'not-a-real-password\n' >"$CREDS_C/$e-consumer"
done
# The order key both daemons hold (kafka.order_keys), at least 32 bytes.
openssl rand -hex 32 | tee "$CREDS_P/order-key" >"$CREDS_C/order-key"
# The payment key the consumer holds (kafka.payment_keys).
openssl rand -hex 32 >"$CREDS_C/payment-key"
# The admission key the producer holds (producer.admission_keys).
openssl rand -hex 32 >"$CREDS_P/admission-key"
chmod 400 "$CREDS_P"/* "$CREDS_C"/*
chmod 500 "$CREDS_P" "$CREDS_C"
chown -R seckill-producer: "$CREDS_P"
chown -R seckill-consumer: "$CREDS_C"
run env CREDENTIALS_DIRECTORY="$CREDS_P" /usr/bin/seckill-producer -t -c "$CFG"
if [ "$rc" -ne 0 ] && grep -qF "$CFG:$kline: " "$T/err" && grep -qF "/etc/seckill/jwt/login.pub.pem: cannot read" "$T/err"; then
    pass "seckill-producer -t refuses it without the key jwt.keys names, at $CFG:$kline"
else
    fail "seckill-producer -t refuses it without the key jwt.keys names, at $CFG:$kline" "$(run_diag seckill-producer -t)"
fi
# A private key is refused (it would let the producer mint tokens); the
# public one is what it takes.
cp "$T/login.pem" /etc/seckill/jwt/login.pub.pem
run env CREDENTIALS_DIRECTORY="$CREDS_P" /usr/bin/seckill-producer -t -c "$CFG"
if [ "$rc" -ne 0 ] && grep -qF "a private key, and the producer takes public keys only" "$T/err"; then
    pass "seckill-producer -t refuses a private key in jwt.keys"
else
    fail "seckill-producer -t refuses a private key in jwt.keys" "$(run_diag seckill-producer -t)"
fi
openssl pkey -in "$T/login.pem" -pubout -out /etc/seckill/jwt/login.pub.pem 2>/dev/null
chmod 644 /etc/seckill/jwt/login.pub.pem
for b in seckill-producer seckill-consumer; do
    if [ "$b" = seckill-producer ]; then creds=$CREDS_P; else creds=$CREDS_C; fi
    run env CREDENTIALS_DIRECTORY="$creds" "/usr/bin/$b" -t -c "$CFG"
    if [ "$rc" -eq 0 ]; then pass "$b -t -c $CFG (its CA file and key there)"; else fail "$b -t -c $CFG" "$(run_diag "$b" -t -c "$CFG")"; fi
    # As the units run it: User=$b.
    run runuser -u "$b" -- env CREDENTIALS_DIRECTORY="$creds" "/usr/bin/$b" -t -c "$CFG"
    if [ "$rc" -eq 0 ]; then
        pass "$b -t as the $b user (ExecStartPre)"
    else
        fail "$b -t as the $b user (ExecStartPre)" "$(run_diag runuser -u "$b" -- "$b" -t)"
    fi
done
# What one daemon's user may not: the other's credentials, the other's
# keys, the password files themselves.
# denied DESC USER CMD...: CMD as USER fails with "Permission denied".
denied() {
    local desc=$1 u=$2
    shift 2
    run runuser -u "$u" -- "$@"
    if [ "$rc" -ne 0 ] && grep -qi 'permission denied' "$T/err"; then pass "$desc"; else fail "$desc" "$(run_diag "$@")"; fi
}
denied "the producer's user cannot read the consumer's credentials" seckill-producer cat "$CREDS_C/pg-consumer"
denied "seckill-consumer run as the producer's user cannot load the consumer's credentials" seckill-producer \
    env CREDENTIALS_DIRECTORY="$CREDS_C" /usr/bin/seckill-consumer -t -c "$CFG"
denied "the consumer's user cannot read the producer's credentials" seckill-consumer cat "$CREDS_P/kafka-producer"
denied "the consumer's user cannot list the producer's keys (/etc/seckill/jwt)" seckill-consumer ls /etc/seckill/jwt
for u in $USERS; do
    denied "$u cannot list /etc/seckill/secrets" "$u" ls /etc/seckill/secrets
done
rm -rf "$CREDS_P" "$CREDS_C" /etc/seckill/tls/ca.crt /etc/seckill/jwt/login.pub.pem
CREDS_P= CREDS_C=
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
is "statoverrides under /etc/seckill as before" "$(dpkg-statoverride --list '/etc/seckill*')" "$(cat "$T/override.before")"
is "no systemd state of the package left" \
    "$(find /etc/systemd /var/lib/systemd -name '*seckill*' 2>/dev/null | sort)" "$(cat "$T/systemd.before")"
ok_if "the purge keeps the system users and group it created (Debian's convention)" "$(accounts)" \
    sh -c 'getent passwd seckill-producer && getent passwd seckill-consumer && getent group seckill'
if [ -s "$T/users.before" ]; then
    is "the users there before are unchanged" "$(for u in $USERS; do getent passwd "$u"; done | grep -xFf "$T/users.before")" \
        "$(cat "$T/users.before")"
fi
drop_accounts
is "the test removed the users and groups it caused: those left were there before" "$(accounts)" \
    "$(cat "$T/accounts.before")"
INSTALLED=0

echo "1..$n"
[ "$failed" -eq 0 ]
