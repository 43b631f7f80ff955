#!/usr/bin/env bash
# tests/cli/test_cli.sh BUILD_DIR: the command-line behaviour of
# seckillctl, seckill-producer and seckill-consumer, and of scripts/stack,
# against the running local stack (scripts/stack up). Speaks TAP.
#
# Repeatable: every item id, order id and lock name is unique to the run, and
# whatever the run creates in Redis and PostgreSQL is removed on exit.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_cli.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
# psql and pgbench log in as admin with the password the stack generated
export PGPASSFILE=${SECKILL_STACK_DIR:-$ROOT/.stack}/pgpass

CTL=$BUILD/seckillctl
CFG=config/seckill.cfg
STACK_DIR=${SECKILL_STACK_DIR:-$ROOT/.stack}
REDIS_PORT=16379
KEY_PREFIX=seckill # redis.key_prefix in $CFG

rcli() { scripts/stack redis-cli -p "$REDIS_PORT" --no-raw "$@" 2>&1 | sed 's/^(integer) //; s/^"\(.*\)"$/\1/'; }
sql() { psql -h 127.0.0.1 -p 15432 -U admin -d seckill -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }

T=$(mktemp -d)
UNIQ=$(date +%s%N)
# Positive, below 2^62, unique per run: microseconds (mod ~11 days), pid, slot.
ID_BASE=$(( (UNIQ / 1000 % 1000000000000) * 1000000 + ($$ % 100000) * 10 ))
ITEM1=$((ID_BASE + 1))  # created, recreated, then gets an order
ITEM2=$((ID_BASE + 2))  # has a buyer in Redis only
ITEM3=$((ID_BASE + 3))  # has a pending reservation in Redis only
ITEM4=$((ID_BASE + 4))  # created with a sale window
ORDER1=$((ID_BASE + 1))
LOCK1=cli-$$-$UNIQ-seq
LOCK2=cli-$$-$UNIQ-busy
BG_PID=

cleanup() {
    # Let a background lock holder finish, then stop it if it is still there.
    touch "$T/release" 2>/dev/null
    if [ -n "$BG_PID" ] && kill -0 "$BG_PID" 2>/dev/null; then
        local end=$((SECONDS + 5))
        while kill -0 "$BG_PID" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.05; done
        kill "$BG_PID" 2>/dev/null
    fi
    sql "DELETE FROM late_payments WHERE order_id BETWEEN $((ID_BASE + 100)) AND $((ID_BASE + 199))" >/dev/null 2>&1
    sql "DELETE FROM order_returns WHERE item_id IN ($ITEM1, $ITEM2, $ITEM3, $ITEM4);
         DELETE FROM orders WHERE item_id IN ($ITEM1, $ITEM2, $ITEM3, $ITEM4);
         DELETE FROM items WHERE item_id IN ($ITEM1, $ITEM2, $ITEM3, $ITEM4);" >/dev/null 2>&1
    local id n keys=()
    for id in "$ITEM1" "$ITEM2" "$ITEM3" "$ITEM4"; do
        for n in stock buyers pending unpub window orders; do keys+=("$KEY_PREFIX:{item:$id}:$n"); done
    done
    scripts/stack redis-cli -p "$REDIS_PORT" DEL "${keys[@]}" >/dev/null 2>&1
    # A lock is a field of its group's hash, which other locks share: lock
    # show names both, and only the field goes.
    local k
    for n in "$LOCK1" "$LOCK2"; do
        k=$("$CTL" -c "$CFG" lock show "$n" 2>/dev/null | sed -n 's/^key: *//p')
        [ -n "$k" ] && scripts/stack redis-cli -p "$REDIS_PORT" HDEL "$k" "$n" >/dev/null 2>&1
    done
    rm -rf "$T"
}
trap cleanup EXIT

# --- TAP helpers --------------------------------------------------------------

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

# expect DESC WANT STREAM [SUBSTR...] -- CMD...
#   WANT: the exit status, or "nz" for any non-zero one.
#   STREAM: out, err or any: where every SUBSTR (fixed strings) must appear.
expect() {
    local desc=$1 want=$2 stream=$3 subs=() why=""
    shift 3
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do subs+=("$1"); shift; done
    shift
    local cmd=("$@")
    run "${cmd[@]}"
    if [ "$want" = nz ]; then
        [ "$rc" -ne 0 ] || why="exit status 0, want non-zero"
    elif [ "$rc" -ne "$want" ]; then
        why="exit status $rc, want $want"
    fi
    local files s
    case $stream in
        out) files=("$T/out") ;;
        err) files=("$T/err") ;;
        *) files=("$T/out" "$T/err") ;;
    esac
    for s in "${subs[@]+"${subs[@]}"}"; do
        cat "${files[@]}" | grep -qF -- "$s" || why="${why:+$why; }std$stream lacks '$s'"
    done
    if [ -z "$why" ]; then pass "$desc"; else fail "$desc" "$why" "$(run_diag "${cmd[@]}")"; fi
}
# check DESC CMD...: CMD exits 0.
check() { local d=$1; shift; expect "$d" 0 any -- "$@"; }
# check_out DESC SUBSTR CMD...: CMD exits 0 and prints SUBSTR on stdout.
check_out() { local d=$1 s=$2; shift 2; expect "$d" 0 out "$s" -- "$@"; }
# ok_if DESC DIAG CONDITION...: CONDITION (a command, usually [ ... ]) succeeds.
ok_if() { local d=$1 m=$2; shift 2; if "$@"; then pass "$d"; else fail "$d" "$m"; fi; }
posint() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
# greater A B: both positive integers and A > B.
greater() { posint "$1" && posint "$2" && [ "$1" -gt "$2" ]; }
alive() { kill -0 "$1" 2>/dev/null; }
eq_posint() { posint "$1" && [ "$1" = "$2" ]; }
# lacks DESC FILE SUBSTR: FILE does not contain SUBSTR.
lacks() {
    if grep -qF -- "$3" "$2"; then fail "$1" "found '$3' in:" "$(head -n 40 "$2")"; else pass "$1"; fi
}

# poll SECONDS CMD...: run CMD until it succeeds or the deadline passes.
poll() {
    local end=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.05
    done
}

# --- 1, 2: --version, --help, unknown option, -t -----------------------------

for prog in seckillctl seckill-producer seckill-consumer; do
    bin=$BUILD/$prog
    if [ ! -x "$bin" ]; then
        fail "$prog exists in $BUILD_ARG" "missing $bin"
        continue
    fi
    expect "$prog --version exits 0 and prints '$prog 0.1.0'" 0 out "$prog 0.1.0" -- "$bin" --version
    is "$prog --version prints exactly one line" "$(cat "$T/out")" "$prog 0.1.0"
    check_out "$prog --help exits 0 and prints usage" "usage: $prog" "$bin" --help
    expect "$prog with an unknown option exits 2" 2 err "--bogus-option" -- "$bin" --bogus-option
    expect "$prog -t -c $CFG exits 0 and says valid" 0 out "$CFG is valid" -- "$bin" -t -c "$CFG"
done

# --- 3: broken configurations --------------------------------------------------

# A minimal valid configuration, with a placeholder line for one defect.
# mkcfg FILE [DEFECT]: write it; DEFECT (may be empty) goes on line $DEFECT_LINE.
DEFECT_LINE=5
# The order key the producer and the consumer require (kafka.order_keys),
# the payment key the consumer requires (kafka.payment_keys) and the
# admission key the producer requires (producer.admission_keys).
(umask 077; openssl rand -hex 32 >"$T/order-key"; openssl rand -hex 32 >"$T/payment-key"
 openssl rand -hex 32 >"$T/admission-key")
# The producer's admission key goes into the defect's producer group when it
# has one (a group may appear once).
mkcfg() {
    local defect=${2:-} adm="admission_keys = [ \"a1:$T/admission-key\" ];"
    {
        echo '# minimal configuration for test_cli.sh'
        echo 'kafka = {'
        echo "  brokers = \"127.0.0.1:19092\"; order_keys = [ \"k1:$T/order-key\" ]; payment_keys = [ \"p1:$T/payment-key\" ];"
        echo '};'
        echo "${defect/producer = \{/producer = \{ $adm}"
        echo 'postgres = {'
        echo '  dbname = "seckill";'
        echo '  admin_user = "admin";'
        echo '};'
        [[ $defect == *"producer = {"* ]] || echo "producer = { $adm };"
    } >"$1"
}

mkcfg "$T/valid.cfg"
expect "the minimal configuration is valid (base of the broken ones)" 0 out "is valid" -- \
    "$CTL" -t -c "$T/valid.cfg"

# #45 §1: the producer signs each order and the consumer checks it; neither
# starts without a key, seckillctl needs none.
sed 's/ order_keys = [^;]*;/ order_keys = [ ];/' "$T/valid.cfg" >"$T/nokey.cfg"
for b in seckill-producer seckill-consumer; do
    expect "$b -t refuses an empty kafka.order_keys" 1 err "kafka.order_keys is empty" -- \
        "$BUILD/$b" -t -c "$T/nokey.cfg"
    expect "$b -t takes the minimal configuration with its order key" 0 out "is valid" -- \
        "$BUILD/$b" -t -c "$T/valid.cfg"
done
expect "seckillctl needs no order key" 0 out "is valid" -- "$CTL" -t -c "$T/nokey.cfg"
(umask 077; printf 'short\n' >"$T/short-key")
sed "s| order_keys = [^;]*;| order_keys = [ \"k1:$T/order-key\", \"k0:$T/short-key\" ];|" "$T/valid.cfg" >"$T/shortkey.cfg"
expect "seckill-consumer -t refuses a short order key, naming the entry" 1 err \
    "$T/shortkey.cfg:3: kafka.order_keys entry 'k0:$T/short-key'" "at least 32 wanted" -- \
    "$BUILD/seckill-consumer" -t -c "$T/shortkey.cfg"
# #55 §2: the consumer checks each payment's MAC: it does not start without
# a payment key; the producer has no use for one, seckillctl needs one only
# to sign (payment sign).
sed 's/ payment_keys = [^;]*;/ payment_keys = [ ];/' "$T/valid.cfg" >"$T/nopaykey.cfg"
expect "seckill-consumer -t refuses an empty kafka.payment_keys" 1 err "kafka.payment_keys is empty" -- \
    "$BUILD/seckill-consumer" -t -c "$T/nopaykey.cfg"
expect "seckill-producer needs no payment key" 0 out "is valid" -- "$BUILD/seckill-producer" -t -c "$T/nopaykey.cfg"
expect "seckillctl needs no payment key" 0 out "is valid" -- "$CTL" -t -c "$T/nopaykey.cfg"
# #58: the producer signs and checks the waiting room's admissions: it does
# not start without an admission key; the consumer and seckillctl need none.
sed 's/ admission_keys = [^;]*;/ admission_keys = [ ];/' "$T/valid.cfg" >"$T/noadmkey.cfg"
expect "seckill-producer -t refuses an empty producer.admission_keys" 1 err "producer.admission_keys is empty" -- \
    "$BUILD/seckill-producer" -t -c "$T/noadmkey.cfg"
expect "seckill-consumer needs no admission key" 0 out "is valid" -- "$BUILD/seckill-consumer" -t -c "$T/noadmkey.cfg"
expect "seckillctl needs no admission key" 0 out "is valid" -- "$CTL" -t -c "$T/noadmkey.cfg"
sed "s| payment_keys = [^;]*;| payment_keys = [ \"p1:$T/payment-key\", \"p0:$T/short-key\" ];|" "$T/valid.cfg" \
    >"$T/shortpaykey.cfg"
expect "seckill-consumer -t refuses a short payment key, naming the entry" 1 err \
    "$T/shortpaykey.cfg:3: kafka.payment_keys entry 'p0:$T/short-key'" "at least 32 wanted" -- \
    "$BUILD/seckill-consumer" -t -c "$T/shortpaykey.cfg"

mkcfg "$T/syntax.cfg" 'redis = { port = ; };'
expect "syntax error: exit 1, error at syntax.cfg:$DEFECT_LINE:" 1 err "$T/syntax.cfg:$DEFECT_LINE:" -- \
    "$CTL" -t -c "$T/syntax.cfg"

mkcfg "$T/range.cfg" 'redis = { port = 70000; };'
expect "redis.port = 70000: exit 1, file:line and the setting named" 1 err \
    "$T/range.cfg:$DEFECT_LINE:" "redis.port" "out of range" -- "$CTL" -t -c "$T/range.cfg"

mkcfg "$T/unknown.cfg" 'redis = { prot = 6379; };'
expect "misspelt redis.prot: exit 1, unknown setting at file:line" 1 err \
    "$T/unknown.cfg:$DEFECT_LINE: unknown setting 'redis.prot'" -- "$CTL" -t -c "$T/unknown.cfg"

mkcfg "$T/section.cfg" 'reddis = { port = 6379; };'
expect "misspelt section: exit 1, unknown section at file:line" 1 err \
    "$T/section.cfg:$DEFECT_LINE: unknown section 'reddis'" -- "$CTL" -t -c "$T/section.cfg"

mkcfg "$T/missing.cfg"
sed -i '/brokers/d' "$T/missing.cfg"
expect "missing kafka.brokers: exit 1, the setting and the file named" 1 err \
    "$T/missing.cfg" "kafka.brokers" -- "$CTL" -t -c "$T/missing.cfg"

mkcfg "$T/type.cfg" 'redis = { port = "x"; };'
expect "redis.port = \"x\": exit 1, must be an integer at file:line" 1 err \
    "$T/type.cfg:$DEFECT_LINE:" "'redis.port' must be an integer" -- "$CTL" -t -c "$T/type.cfg"

mkcfg "$T/kprop.cfg"
sed -i 's/^  brokers = .*/&\n  properties = [ "linger.mss=5" ];/' "$T/kprop.cfg"
kline=$(grep -n 'linger.mss' "$T/kprop.cfg" | cut -d: -f1)
expect "kafka.properties linger.mss=5: exit 1, the property named at file:line" 1 err \
    "$T/kprop.cfg:$kline:" "linger.mss" -- "$CTL" -t -c "$T/kprop.cfg"

expect "missing configuration file: exit 1, the path named" 1 err "$T/no-such.cfg" -- \
    "$CTL" -t -c "$T/no-such.cfg"

# -t also loads the producer's keys with auth = "jwt" (the unit's ExecStartPre).
mkcfg "$T/jwt.cfg" 'producer = { auth = "jwt"; }; jwt = { key_dir = "keys"; keys = [ "k1:HS256:k1.secret" ]; };'
expect "producer -t, jwt key file missing: exit 1, entry and file named" 1 err \
    "'k1:HS256:k1.secret'" "$T/keys/k1.secret" -- "$BUILD/seckill-producer" -t -c "$T/jwt.cfg"
mkdir -p "$T/keys" && (umask 077 && head -c 16 /dev/urandom | base64 >"$T/keys/k1.secret")
expect "producer -t, jwt secret too short: exit 1" 1 err "k1.secret" -- "$BUILD/seckill-producer" -t -c "$T/jwt.cfg"
head -c 48 /dev/urandom | base64 >"$T/keys/k1.secret"
expect "producer -t, jwt key file fine (key_dir relative to the file): exit 0" 0 out "is valid" -- \
    "$BUILD/seckill-producer" -t -c "$T/jwt.cfg"
kline=$(grep -nE '(^|[ {;])keys = ' "$T/jwt.cfg" | cut -d: -f1)
chmod 644 "$T/keys/k1.secret"
expect "producer -t, HS256 secret others may read (0644): exit 1, file:line of jwt.keys, the mode" 1 err \
    "$T/jwt.cfg:$kline: " "key id 'k1'" "mode 0644" -- "$BUILD/seckill-producer" -t -c "$T/jwt.cfg"
chmod 400 "$T/keys/k1.secret"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$T/keys/es.pem" 2>/dev/null
openssl pkey -in "$T/keys/es.pem" -pubout -out "$T/keys/es.pub.pem" 2>/dev/null
mkcfg "$T/priv.cfg" 'producer = { auth = "jwt"; }; jwt = { key_dir = "keys"; keys = [ "es:ES256:es.pem" ]; };'
expect "producer -t, a private ES256 key: exit 1, refused at file:line, kid and file named" 1 err \
    "$T/priv.cfg:$kline: " "key id 'es'" "$T/keys/es.pem" "a private key" "signing stays with seckillctl" -- \
    "$BUILD/seckill-producer" -t -c "$T/priv.cfg"
expect "seckillctl token issue signs with that private key" 0 out "eyJ" -- \
    "$CTL" -c "$T/priv.cfg" token issue --user 7
sed -i 's/es:ES256:es.pem/es:ES256:es.pub.pem/' "$T/priv.cfg"
expect "producer -t, its public key: exit 0" 0 out "is valid" -- "$BUILD/seckill-producer" -t -c "$T/priv.cfg"

# auth = "none" believes any client's user_id: the producer refuses it on a
# listener beyond loopback unless producer.allow_insecure_auth says so, and
# then warns at every start.
mkcfg "$T/open.cfg" 'producer = { listen = "0.0.0.0"; port = 18099; auth = "none"; };'
expect "producer -t, auth none on 0.0.0.0: exit 1, at file:line, says what to do" 1 err \
    "$T/open.cfg:$DEFECT_LINE: 'producer.auth' = \"none\"" "is not loopback" "allow_insecure_auth" -- \
    "$BUILD/seckill-producer" -t -c "$T/open.cfg"
expect "seckillctl is not the producer: the same file is valid to it" 0 out "is valid" -- "$CTL" -t -c "$T/open.cfg"
mkcfg "$T/lo.cfg" "producer = { listen = \"127.0.0.2\"; auth = \"none\"; };"
expect "producer -t, auth none on loopback 127.0.0.2: exit 0" 0 out "is valid" -- \
    "$BUILD/seckill-producer" -t -c "$T/lo.cfg"
# The listeners bind IPv4 only: -t refuses what start would (issue 45 §5).
for a in ::1 localhost; do
    mkcfg "$T/lo.cfg" "producer = { listen = \"$a\"; auth = \"none\"; };"
    expect "producer -t, listen $a: exit 1, not an IPv4 address, at file:line" 1 err \
        "$T/lo.cfg:$DEFECT_LINE: 'producer.listen' = \"$a\" is not an IPv4 address" -- \
        "$BUILD/seckill-producer" -t -c "$T/lo.cfg"
done
mkcfg "$T/open.cfg" 'producer = { listen = "0.0.0.0"; port = 18099; auth = "none"; allow_insecure_auth = true; };'
expect "producer -t, the same with allow_insecure_auth = true: exit 0" 0 out "is valid" -- \
    "$BUILD/seckill-producer" -t -c "$T/open.cfg"
"$BUILD/seckill-producer" -c "$T/open.cfg" 2>"$T/open.log" &
open_pid=$!
if poll 20 grep -q 'not loopback (producer.allow_insecure_auth)' "$T/open.log"; then
    pass "the producer started so warns that anyone may buy as any user_id"
else
    fail "the producer started so warns that anyone may buy as any user_id" "$(head -n 20 "$T/open.log")"
fi
kill "$open_pid" 2>/dev/null; wait "$open_pid" 2>/dev/null

# The package's configuration is a production one: -t fails, at the line
# of the setting, until the CA file and the login service's key it names are
# there (test_deb.sh checks the same on the installed package).
sed -e 's|"/etc/seckill/tls/ca.crt"|"tls/ca.crt"|' -e 's|order_key_dir = "/etc/seckill/secrets"|order_key_dir = "."|' \
    -e 's|admission_key_dir = "/etc/seckill/secrets"|admission_key_dir = "."|' debian/seckill.cfg >"$T/pkg.cfg"
mkdir -p "$T/tls" "$T/jwt"
for pw in pg-producer redis-producer kafka-producer; do (umask 077 && echo not-a-real-password >"$T/$pw"); done
cline=$(grep -n 'sslrootcert = ' "$T/pkg.cfg" | cut -d: -f1)
expect "the package's config, no CA file: producer -t exit 1 at file:line of postgres.sslrootcert" 1 err \
    "$T/pkg.cfg:$cline: 'postgres.sslrootcert': $T/tls/ca.crt: cannot read" -- \
    "$BUILD/seckill-producer" -t -c "$T/pkg.cfg"
cp "$STACK_DIR/tls/ca.crt" "$T/tls/ca.crt"
kline=$(grep -nE '(^|[ {;])keys = ' "$T/pkg.cfg" | cut -d: -f1)
expect "the package's config, no key: producer -t exit 1 at file:line of jwt.keys" 1 err \
    "$T/pkg.cfg:$kline: " "$T/jwt/login.pub.pem: cannot read" -- "$BUILD/seckill-producer" -t -c "$T/pkg.cfg"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$T/login.pem" 2>/dev/null
openssl pkey -in "$T/login.pem" -pubout -out "$T/jwt/login.pub.pem" 2>/dev/null
expect "the package's config with its CA file and key: producer -t exit 0" 0 out "is valid" -- \
    "$BUILD/seckill-producer" -t -c "$T/pkg.cfg"
sed -i 's/sslmode = "verify-full";/sslmode = "verify-ca";/; s|sslrootcert = "tls/ca.crt";|sslrootcert = "";|' "$T/pkg.cfg"
mline=$(grep -n 'sslmode = ' "$T/pkg.cfg" | cut -d: -f1)
expect "sslmode verify-ca without sslrootcert: -t exit 1 at file:line of postgres.sslmode" 1 err \
    "$T/pkg.cfg:$mline: 'postgres.sslmode' = \"verify-ca\"" "postgres.sslrootcert" -- \
    "$BUILD/seckill-producer" -t -c "$T/pkg.cfg"
expect "configuration path is a folder: exit 1, says it is not a regular file" 1 err "$T: cannot read: not a regular file" -- "$CTL" -t -c "$T"
if [ "$(id -u)" -ne 0 ]; then
    cp "$T/valid.cfg" "$T/unreadable.cfg" && chmod 000 "$T/unreadable.cfg"
    expect "unreadable configuration file: exit 1, the path named" 1 err "$T/unreadable.cfg" -- \
        "$CTL" -t -c "$T/unreadable.cfg"
else
    skip "unreadable configuration file: exit 1, the path named" "root reads any file"
fi
for prog in seckill-producer seckill-consumer; do
    expect "$prog reports a broken configuration at file:line too" 1 err \
        "$T/range.cfg:$DEFECT_LINE:" "redis.port" -- "$BUILD/$prog" -t -c "$T/range.cfg"
done

expect "seckill-consumer -i takes an instance number" 0 out "is valid" -- "$BUILD/seckill-consumer" -i 2 -t -c "$CFG"
expect "seckill-consumer -i refuses a non-number" 2 err "--instance takes a number" -- "$BUILD/seckill-consumer" -i two -t -c "$CFG"
expect "seckill-producer has no -i" 2 err "--instance is not an option" -- "$BUILD/seckill-producer" -i 2 -t -c "$CFG"

# --- 3b: install and the systemd units ---------------------------------------

# Install from this very build: with the sanitizer flags when it is the sanitizer build.
SAN_FLAG=; if nm -D "$CTL" 2>/dev/null | grep -q __asan_init; then SAN_FLAG=SAN=1; fi
expect "make install into DESTDIR with a PREFIX exits 0" 0 any -- \
    make --no-print-directory -s BUILD="$BUILD_ARG" $SAN_FLAG install DESTDIR="$T/inst" PREFIX=/opt/sk SYSCONFDIR=/etc
for u in seckill-producer.service seckill-consumer@.service; do
    ok_if "install puts $u in PREFIX/lib/systemd/system" "missing" test -f "$T/inst/opt/sk/lib/systemd/system/$u"
    ok_if "$u names the installed binary and config" "$(grep ExecStart= "$T/inst/opt/sk/lib/systemd/system/$u" 2>&1)" \
        grep -q "^ExecStart=/opt/sk/bin/seckill-[a-z]* -c /etc/seckill/seckill.cfg" "$T/inst/opt/sk/lib/systemd/system/$u"
    ok_if "$u is Type=notify with a watchdog and a stop timeout" "lacks a setting" \
        sh -c "grep -q '^Type=notify' '$T/inst/opt/sk/lib/systemd/system/$u' && grep -q '^WatchdogSec=' '$T/inst/opt/sk/lib/systemd/system/$u' && grep -q '^TimeoutStopSec=' '$T/inst/opt/sk/lib/systemd/system/$u'"
done
ok_if "install puts the sysusers entry for the seckill user" "missing" test -f "$T/inst/opt/sk/lib/sysusers.d/seckill.conf"
# The configuration names the keys as the units hand them over (bare names:
# systemd credentials), not the stack's files.
for k in 'order_keys = [ "k1:order-key" ];' 'payment_keys = [ "p1:payment-key" ];' \
    'order_key_dir = "/etc/seckill/secrets";' 'payment_key_dir = "/etc/seckill/secrets";' \
    'admission_keys = [ "a1:admission-key" ];' 'admission_key_dir = "/etc/seckill/secrets";'; do
    ok_if "the installed configuration says $k" "$(grep -n 'key' "$T/inst/etc/seckill/seckill.cfg" 2>&1)" \
        grep -qF "$k" "$T/inst/etc/seckill/seckill.cfg"
done
ok_if "the consumer's unit loads the payment key" "missing" \
    grep -qx 'LoadCredential=payment-key:/etc/seckill/secrets/payment-key' \
    "$T/inst/opt/sk/lib/systemd/system/seckill-consumer@.service"
ok_if "the producer's unit loads the admission key" "missing" \
    grep -qx 'LoadCredential=admission-key:/etc/seckill/secrets/admission-key' \
    "$T/inst/opt/sk/lib/systemd/system/seckill-producer.service"
if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$T/units"
    for u in seckill-producer.service seckill-consumer@.service; do
        sed -e "s|@BINDIR@|$BUILD|g; s|@SYSCONFDIR@|/etc|g; s|@DOCDIR@|/usr/share/doc/seckill|g" \
            "config/systemd/$u.in" >"$T/units/$u"
    done
    cp "$T/units/seckill-consumer@.service" "$T/units/seckill-consumer@1.service"
    expect "systemd-analyze verify accepts both units" 0 any -- \
        systemd-analyze verify "$T/units/seckill-producer.service" "$T/units/seckill-consumer@1.service"
else
    skip "systemd-analyze verify accepts both units" "no systemd-analyze here"
fi

# --- 4: config show masks secrets ---------------------------------------------

printf 'hunter2-secret\n' >"$T/redis-admin.pw"; chmod 600 "$T/redis-admin.pw"
mkcfg "$T/secret.cfg" "redis = { admin_password_file = \"$T/redis-admin.pw\"; };"
printf 'pg-s3cret-pw\n' >"$T/pg-admin.pw"; chmod 600 "$T/pg-admin.pw"
sed -i "s|^  admin_user = .*|&\n  admin_password_file = \"$T/pg-admin.pw\";|" "$T/secret.cfg"
check_out "config show exits 0 and prints the settings" "port = 6379;" "$CTL" -c "$T/secret.cfg" config show
cp "$T/out" "$T/show.out"
cat "$T/err" >>"$T/show.out"
lacks "config show does not print the content of redis.admin_password_file" "$T/show.out" "hunter2-secret"
lacks "config show does not print the content of postgres.admin_password_file" "$T/show.out" "pg-s3cret-pw"
ok_if "config show prints the path of postgres.admin_password_file" "$(cat "$T/show.out")" \
    grep -qF "admin_password_file = \"$T/pg-admin.pw\";" "$T/show.out"
chmod 644 "$T/pg-admin.pw"
expect "a password file others can read: exit 1, the setting and file:line named, never the content" 1 err \
    "secret.cfg:$((DEFECT_LINE + 4)): 'postgres.admin_password_file': $T/pg-admin.pw: group or others may access it (mode 0644)" -- \
    "$CTL" -t -c "$T/secret.cfg"
lacks "the refusal does not print the password" "$T/err" "pg-s3cret-pw"
ok_if "config show prints the path of redis.admin_password_file" "$(cat "$T/show.out")" \
    grep -qF "admin_password_file = \"$T/redis-admin.pw\";" "$T/show.out"

# --- 5: item create -----------------------------------------------------------

stock_redis() { rcli GET "$KEY_PREFIX:{item:$1}:stock"; }
stock_pg() { sql "SELECT stock_total, stock_left FROM items WHERE item_id=$1" 2>&1; }

check_out "item create --id $ITEM1 --stock 50 succeeds" "created" \
    "$CTL" -c "$CFG" item create --id "$ITEM1" --stock 50 --name x
is "item $ITEM1: Redis stock is 50" "$(stock_redis "$ITEM1")" 50
is "item $ITEM1: PostgreSQL stock_total|stock_left is 50|50" "$(stock_pg "$ITEM1")" "50|50"

check_out "item create again with --stock 60 (no orders yet) succeeds" "created" \
    "$CTL" -c "$CFG" item create --id "$ITEM1" --stock 60 --name x
is "item $ITEM1: Redis stock is 60" "$(stock_redis "$ITEM1")" 60
is "item $ITEM1: PostgreSQL stock is 60|60" "$(stock_pg "$ITEM1")" "60|60"

if sql "INSERT INTO orders(order_id,user_id,item_id,reserved_at,fence) VALUES ($ORDER1, 1, $ITEM1, now(), 1)" \
    >"$T/sql.err" 2>&1; then
    pass "an order for item $ITEM1 is inserted"
else
    fail "an order for item $ITEM1 is inserted" "$(cat "$T/sql.err")"
fi
expect "item create on an item with orders fails and mentions orders" nz err "orders" -- \
    "$CTL" -c "$CFG" item create --id "$ITEM1" --stock 70 --name x
is "item $ITEM1 with orders: Redis stock stays 60" "$(stock_redis "$ITEM1")" 60
is "item $ITEM1 with orders: PostgreSQL stock stays 60|60" "$(stock_pg "$ITEM1")" "60|60"

rcli SADD "$KEY_PREFIX:{item:$ITEM2}:buyers" 42 >/dev/null
expect "item create on an item with buyers in Redis fails and mentions buyers" nz err "buyers" -- \
    "$CTL" -c "$CFG" item create --id "$ITEM2" --stock 10 --name y
is "item $ITEM2 refused: no Redis stock was set" "$(stock_redis "$ITEM2")" "(nil)"
is "item $ITEM2 refused: the PostgreSQL row was rolled back" "$(stock_pg "$ITEM2")" ""

rcli HSET "$KEY_PREFIX:{item:$ITEM3}:pending" 42 "reserved" >/dev/null
expect "item create on an item with a pending reservation fails and says so" nz err \
    "pending reservations" -- "$CTL" -c "$CFG" item create --id "$ITEM3" --stock 10 --name z
is "item $ITEM3 refused: no Redis stock was set" "$(stock_redis "$ITEM3")" "(nil)"
is "item $ITEM3 refused: the PostgreSQL row was rolled back" "$(stock_pg "$ITEM3")" ""

for bad in "--id 0" "--id -5" "--id abc" "--id 9223372036854775808"; do
    # shellcheck disable=SC2086
    expect "item create $bad exits 2 and names --id" 2 err "--id" -- \
        "$CTL" -c "$CFG" item create $bad --stock 5
done
for bad in "--stock -1" "--stock 1x" "--stock 2147483648"; do
    # shellcheck disable=SC2086
    expect "item create $bad exits 2 and names --stock" 2 err "--stock" -- \
        "$CTL" -c "$CFG" item create --id "$ITEM2" $bad
done
expect "item create without --stock exits 2" 2 err "usage:" -- "$CTL" -c "$CFG" item create --id "$ITEM2"
for bad in "--starts-at yesterday" "--starts-at 2026-02-30T10:00:00Z" "--ends-at 12x" "--ends-at -5"; do
    # shellcheck disable=SC2086
    expect "item create $bad exits 2 and names the option" 2 err "${bad%% *}" -- \
        "$CTL" -c "$CFG" item create --id "$ITEM2" --stock 5 $bad
done
expect "item create with --ends-at before --starts-at exits 2" 2 err "after --starts-at" -- \
    "$CTL" -c "$CFG" item create --id "$ITEM2" --stock 5 --starts-at 2026-11-21T10:00:00Z \
    --ends-at 2026-11-21T09:00:00Z
is "item $ITEM2: the refused creations wrote nothing to PostgreSQL" "$(stock_pg "$ITEM2")" ""

# A window: stored in PostgreSQL (ms precision) and in Redis with the stock.
check_out "item create --starts-at/--ends-at succeeds and prints the window" \
    "on sale from 2031-01-02T03:04:05.000Z until 2031-01-02T04:00:00.000Z" \
    "$CTL" -c "$CFG" item create --id "$ITEM4" --stock 7 --starts-at 2031-01-02T03:04:05Z \
    --ends-at 1925092800000
is "item $ITEM4: PostgreSQL window" \
    "$(sql "SELECT (extract(epoch FROM starts_at) * 1000)::bigint, (extract(epoch FROM ends_at) * 1000)::bigint FROM items WHERE item_id=$ITEM4")" \
    "1925089445000|1925092800000"
is "item $ITEM4: Redis window" "$(rcli HGET "$KEY_PREFIX:{item:$ITEM4}:window" starts_ms) $(rcli HGET "$KEY_PREFIX:{item:$ITEM4}:window" ends_ms)" \
    "1925089445000 1925092800000"
check_out "item show prints the window, not started by Redis's clock" "not started by Redis's clock" \
    "$CTL" -c "$CFG" item show "$ITEM4"
ok_if "item show prints the database and Redis stock" "$(cat "$T/out")" \
    grep -q "stock_total 7, stock_left 7, sold 0, refused 0" "$T/out"
ok_if "item show prints Redis's stock" "$(cat "$T/out")" grep -q "redis      stock 7, pending 0" "$T/out"
ok_if "item show says an item without --pay-within has no payment step" "$(cat "$T/out")" \
    grep -q "payment    none: an order is final once persisted" "$T/out"
is "item $ITEM4: no --pay-within stores 0 (no payment step)" \
    "$(sql "SELECT pay_within_s FROM items WHERE item_id=$ITEM4")" "0"
is "item $ITEM4: no --pay-within, no pay_within_s in Redis's window hash (it holds the window)" \
    "$(rcli HEXISTS "$KEY_PREFIX:{item:$ITEM4}:window" pay_within_s) $(rcli HEXISTS "$KEY_PREFIX:{item:$ITEM4}:window" starts_ms)" "0 1"

# A payment window (issue #44): kept in the items row, where the consumer reads
# it as it persists an order; item show prints it. (item load changes nothing in
# the database: test_orderlife runs a sale on such an item.)
for bad in "--pay-within -1" "--pay-within 604801" "--pay-within 1.5" "--pay-within x"; do
    # shellcheck disable=SC2086
    expect "item create $bad exits 2 and names --pay-within" 2 err "--pay-within" -- \
        "$CTL" -c "$CFG" item create --id "$ITEM4" --stock 7 $bad
done
is "item $ITEM4: the refused --pay-within wrote nothing" "$(sql "SELECT pay_within_s FROM items WHERE item_id=$ITEM4")" "0"
check_out "item create --pay-within 90 succeeds and says so" "7 units, to be paid within 90 s" \
    "$CTL" -c "$CFG" item create --id "$ITEM4" --stock 7 --pay-within 90
is "item $ITEM4: PostgreSQL pay_within_s" "$(sql "SELECT pay_within_s FROM items WHERE item_id=$ITEM4")" "90"
# and in Redis, where a buyer's cancel reads it (producer/cancel.h)
is "item $ITEM4: Redis window pay_within_s" "$(rcli HGET "$KEY_PREFIX:{item:$ITEM4}:window" pay_within_s)" "90"
check_out "item show prints the payment window and the orders by status" \
    "payment    within 90 s: pending 0, expired 0, returns not yet in Redis 0" \
    "$CTL" -c "$CFG" item show "$ITEM4"
expect "item load takes no --pay-within (it changes nothing in the database)" 2 err "usage:" -- \
    "$CTL" -c "$CFG" item load --id "$ITEM4" --pay-within 5

# The states after the sale in inspect (issue #44): orders of ITEM4 as the
# consumer leaves them (2 waiting for their payment, 1 paid, 2 expired, one of
# whose units Redis does not have back yet, 1 cancelled), stock_left counting
# the 3 that hold a unit, and a payment that came after its order expired.
# The open return's next try is an hour away: a consumer of the shared
# database (whatever its key prefix) would send it, and mark it done, at once.
o=$((ID_BASE + 100))
sql "INSERT INTO orders (order_id, user_id, item_id, reserved_at, fence, status, pay_by, status_changed_at)
     SELECT $o + g, 7000 + g, $ITEM4, now(), 1, s, now() + interval '90 seconds',
            CASE WHEN s = 'pending_payment' THEN NULL ELSE now() END
       FROM unnest(ARRAY['pending_payment', 'pending_payment', 'paid', 'expired', 'expired', 'cancelled'])
            WITH ORDINALITY AS t (s, g);
     INSERT INTO order_returns (order_id, item_id, user_id, reason, done_at, next_try_at)
     VALUES ($o + 4, $ITEM4, 7004, 'expired', now(), now()),
            ($o + 5, $ITEM4, 7005, 'expired', NULL, now() + interval '1 hour'),
            ($o + 6, $ITEM4, 7006, 'cancelled', now(), now());
     UPDATE items SET stock_left = 4 WHERE item_id = $ITEM4" >/dev/null
late=$(sql "SELECT to_regclass('late_payments') IS NOT NULL")
[ "$late" = t ] && sql "INSERT INTO late_payments (order_id, user_id, paid_at, ref, status_then)
                       VALUES ($o + 4, 7004, now(), 'cli-$$', 'expired')" >/dev/null
check "inspect --item exits 0: no stock mismatch, no user with two live orders" \
    "$CTL" -c "$CFG" inspect --item "$ITEM4"
ok_if "inspect: the orders after the sale per item (pending, overdue, paid, expired, cancelled, final, returned)" \
    "$(cat "$T/out")" grep -qE "^  $ITEM4 +90 +2 +0 +1 +2 +1 +0 +2 +1\$" "$T/out"
ok_if "inspect: sold counts only the orders holding a unit (no stock mismatch after expiries)" \
    "$(cat "$T/out")" grep -qE "^  $ITEM4 .* 7 +3 +4 +4\$" "$T/out"
if [ "$late" = t ]; then
    ok_if "inspect: the late payment, per item and what its order was then" "$(cat "$T/out")" \
        grep -qE "^  $ITEM4  expired +1 " "$T/out"
else
    ok_if "inspect: no late_payments table (before migration 009) is said, not an error" "$(cat "$T/out")" \
        grep -q "no late_payments table" "$T/out"
fi
check_out "item show: sold counts the orders holding a unit; the payment line the states" \
    "payment    within 90 s: pending 2, expired 2, returns not yet in Redis 1, paid 1, cancelled 1" \
    "$CTL" -c "$CFG" item show "$ITEM4"
ok_if "item show: sold 3 (2 pending and 1 paid; the expired and cancelled gave theirs back)" "$(cat "$T/out")" \
    grep -q "stock_total 7, stock_left 4, sold 3, refused 0" "$T/out"
is "inspect_order_states: an expired order, its return not yet in Redis" \
    "$(sql "SELECT status, return_reason, in_redis_at IS NULL FROM inspect_order_states WHERE order_id = $o + 5")" \
    "expired|expired|t"

expect "item show of an unknown item exits 1" 1 out "not in the database" -- "$CTL" -c "$CFG" item show 999999999999
expect "item show with a bad id exits 2" 2 err "ID must be" -- "$CTL" -c "$CFG" item show 0x10

# --- 6: lock run: exit status, fence, release ----------------------------------

show_field() { sed -n "s/^$1: *//p" "$T/out"; }

expect "lock run -- sh -c 'exit 7' exits 7" 7 any -- \
    "$CTL" -c "$CFG" lock run --name "$LOCK1" -- sh -c 'echo "$SECKILL_FENCE" >"$0"; exit 7' "$T/fence1"
fence1=$(cat "$T/fence1" 2>/dev/null)
ok_if "the command sees SECKILL_FENCE, a positive integer" "SECKILL_FENCE='$fence1'" posint "$fence1"
check "a second lock run on the same name succeeds" \
    "$CTL" -c "$CFG" lock run --name "$LOCK1" -- sh -c 'echo "$SECKILL_FENCE" >"$0"; echo "$SECKILL_LOCK" >"$0.name"' "$T/fence2"
fence2=$(cat "$T/fence2" 2>/dev/null)
ok_if "the second run sees a strictly larger fence" "first '$fence1', second '$fence2'" \
    greater "$fence2" "$fence1"
is "the command sees SECKILL_LOCK, the lock name" "$(cat "$T/fence2.name" 2>/dev/null)" "$LOCK1"
check_out "after the runs lock show says held: no" "held:       no" "$CTL" -c "$CFG" lock show "$LOCK1"
last_fence=$(show_field last_fence)
ok_if "lock show reports the last fence handed out (in the name's group)" \
    "last_fence '$last_fence', second run '$fence2'" eq_posint "$last_fence" "$fence2"
lock1_key=$(show_field key)
ok_if "lock show names the hash of the lock's group" "key '$lock1_key'" \
    test "$lock1_key" != "${lock1_key#"$KEY_PREFIX:lock:{lk:"}"
is "lock show names the lock's field in it" "$(show_field field)" "$LOCK1"
is "after the runs the field $LOCK1 of $lock1_key does not exist" "$(rcli HEXISTS "$lock1_key" "$LOCK1")" 0

# --- 7: a held lock is not acquired twice ---------------------------------------

# The holder waits (20 s deadline) for $T/release; it records its fence first.
"$CTL" -c "$CFG" lock run --name "$LOCK2" --ttl-ms 5000 -- sh -c '
    echo "$SECKILL_FENCE" >"$0/holder.fence"
    end=$(( $(date +%s) + 20 ))
    while [ ! -e "$0/release" ]; do
        [ "$(date +%s)" -lt "$end" ] || exit 3
        sleep 0.05
    done' "$T" >"$T/bg.out" 2>"$T/bg.err" &
BG_PID=$!

held_yes() { "$CTL" -c "$CFG" lock show "$LOCK2" 2>/dev/null | grep -qF "held:       yes"; }
if poll 15 held_yes; then
    pass "a background lock run holds $LOCK2 (lock show says held: yes)"
else
    fail "a background lock run holds $LOCK2 (lock show says held: yes)" \
        "not held within 15 s" "$(cat "$T/bg.out" "$T/bg.err")"
fi

expect "a second lock run --wait-ms 0 on the held lock exits 75" 75 err "held by another owner" -- \
    "$CTL" -c "$CFG" lock run --name "$LOCK2" --wait-ms 0 -- touch "$T/marker"
ok_if "the second lock run did not run its command" "$T/marker exists" [ ! -e "$T/marker" ]
ok_if "the holder is still running while the lock is held" "$(cat "$T/bg.out" "$T/bg.err")" \
    alive "$BG_PID"

run "$CTL" -c "$CFG" lock show "$LOCK2"
holder_fence=$(cat "$T/holder.fence" 2>/dev/null)
owner=$(show_field owner)
ttl=$(show_field ttl_ms)
fence=$(show_field fence)
ok_if "lock show exits 0 and prints the owner" "$(run_diag "$CTL" lock show "$LOCK2")" \
    test "$rc" -eq 0 -a -n "$owner"
ok_if "lock show prints a ttl_ms in (0, 5000]" "ttl_ms '$ttl'" greater 5001 "$ttl"
ok_if "lock show prints the holder's fence" "show '$fence', holder SECKILL_FENCE '$holder_fence'" \
    eq_posint "$fence" "$holder_fence"

touch "$T/release"
bg_rc=0
wait "$BG_PID" || bg_rc=$?
BG_PID=
if [ "$bg_rc" -eq 0 ]; then
    pass "the holder finishes with exit 0 once released"
else
    fail "the holder finishes with exit 0 once released" "exit $bg_rc" "$(cat "$T/bg.out" "$T/bg.err")"
fi
check_out "after the holder finished lock show says held: no" "held:       no" \
    "$CTL" -c "$CFG" lock show "$LOCK2"

# --- 8: lock run argument errors ---------------------------------------------------

rm -f "$T/marker"
expect "lock run --ttl-ms abc exits 2" 2 err "--ttl-ms" -- \
    "$CTL" -c "$CFG" lock run --name "$LOCK1" --ttl-ms abc -- touch "$T/marker"
expect "lock run --ttl-ms above lock.ttl_ms's range (600000) exits 2" 2 err "[100, 600000]" -- \
    "$CTL" -c "$CFG" lock run --name "$LOCK1" --ttl-ms 600001 -- touch "$T/marker"
expect "lock run --wait-ms -1 exits 2" 2 err "--wait-ms" -- \
    "$CTL" -c "$CFG" lock run --name "$LOCK1" --wait-ms -1 -- touch "$T/marker"
expect "lock run --name 'a{b}' exits 2" 2 err "invalid lock name" -- \
    "$CTL" -c "$CFG" lock run --name 'a{b}' -- touch "$T/marker"
expect "lock run without a command exits 2" 2 err "usage:" -- "$CTL" -c "$CFG" lock run --name "$LOCK1"
ok_if "no rejected lock run ran its command" "$T/marker exists" [ ! -e "$T/marker" ]

# --- 9: scripts/stack ----------------------------------------------------------------

expect "scripts/stack status exits 0" 0 out -- scripts/stack status
for svc in redis postgres kafka; do
    ok_if "scripts/stack status says $svc is running" "$(cat "$T/out")" \
        grep -qE "^stack: $svc +running" "$T/out"
done

pidfiles=("$STACK_DIR/redis/redis.pid" "$STACK_DIR/kafka/kafka.pid" "$STACK_DIR/pg/data/postmaster.pid")
before=$(head -q -n 1 "${pidfiles[@]}" 2>&1)
expect "scripts/stack up again exits 0" 0 any "all services up" -- scripts/stack up
cat "$T/out" "$T/err" >"$T/up.out"
for word in initdb formatted installing resolving started; do
    lacks "scripts/stack up again does not say '$word'" "$T/up.out" "$word"
done
after=$(head -q -n 1 "${pidfiles[@]}" 2>&1)
is "scripts/stack up again leaves the redis, kafka and postgres pids unchanged" "$after" "$before"

# down --ha with no HA process running: nothing to fail back from, so it
# starts nothing (a failback would start the replica, the sentinels and the
# standby, or the primaries of a stack that is down) and stops nothing.
# (A developer's HA processes are left alone: those checks are skipped.)
if scripts/stack status --ha 2>&1 | grep -qE '^stack: (redis-replica|sentinel-[0-9]|pg-standby) +running'; then
    for i in 1 2 3 4 5 6; do skip "scripts/stack down --ha with no HA process ($i)" "HA processes run"; done
else
    expect "scripts/stack down --ha with no HA process exits 0" 0 any "no HA process runs" -- scripts/stack down --ha
    cat "$T/out" "$T/err" >"$T/downha.out"
    for word in sentinel-1 redis-replica pg-standby failback; do
        lacks "scripts/stack down --ha with no HA process does not say '$word'" "$T/downha.out" "$word"
    done
    after=$(head -q -n 1 "${pidfiles[@]}" 2>&1)
    is "scripts/stack down --ha with no HA process leaves the redis, kafka and postgres pids unchanged" "$after" "$before"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
