#!/usr/bin/env bash
# tests/cli/test_paysign.sh BUILD_DIR: payments signed as the shop's payment
# service signs them (issue #55 §2): `seckillctl payment sign`, and the
# openssl recipe of docs/api.md ("7. Payments"), which must make the very
# same line; the MAC is checked here with python3's hmac, not with seckill's
# code. Needs no running stack: a minimal configuration and keys of its own.
# Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_paysign.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP python3 is needed to check the MACs"; exit 0; }

CTL=$BUILD/seckillctl
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

(umask 077; openssl rand -hex 32 >"$T/payment-key"; openssl rand -hex 32 >"$T/other-key")
# cfg FILE KEYS: a minimal configuration with kafka.payment_keys = KEYS.
cfg() {
    cat >"$1" <<CFG
kafka = { brokers = "127.0.0.1:19092"; payment_key_dir = "$T"; payment_keys = [ $2 ]; };
postgres = { dbname = "seckill"; admin_user = "admin"; };
CFG
}
cfg "$T/seckill.cfg" '"p1:payment-key", "p0:other-key"'
cfg "$T/nokey.cfg" ''

# mac_ok LINE KEYFILE: the line's sig is p1:HMAC-SHA256 of the payment's
# text under the file's bytes, a trailing newline excluded.
mac_ok() {
    python3 -c '
import hashlib, hmac, json, sys
line, path = sys.argv[1], sys.argv[2]
key = open(path, "rb").read()
key = key[:-1] if key.endswith(b"\n") else key
p = json.loads(line.split("|", 1)[-1])
text = "seckill-payment-v1\n%s\n%d\n%d\n%s\n" % (p["order_id"], p["user_id"], p["paid_at_ms"], p["ref"])
want = "p1:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
sys.exit(0 if p["sig"] == want else 1)' "$1" "$2"
}

A='{"v":1,"order_id":"7340033","user_id":1001,"paid_at_ms":1795254835830,"ref":"psp-tx-8812"}'
B='{"ref":"b.2:X_y","paid_at_ms":2,"user_id":9,"order_id":"5","v":1,"sig":"p9:00","extra":[1]}'

run "$CTL" -c "$T/seckill.cfg" payment sign < <(printf '%s\n\n%s\n' "$A" "$B")
is "payment sign exits 0" "$rc" 0
is "payment sign writes a line per payment (the blank one skipped)" "$(wc -l <"$T/out")" 2
is "each line is the payment as it came, re-encoded, with its sig last" \
    "$(sed -n 2p "$T/out" | sed 's/"sig":"p1:[0-9a-f]\{64\}"/"sig":"p1:MAC"/')" \
    '{"v":1,"order_id":"5","user_id":9,"paid_at_ms":2,"ref":"b.2:X_y","sig":"p1:MAC"}'
for i in 1 2; do
    line=$(sed -n "${i}p" "$T/out")
    if mac_ok "$line" "$T/payment-key"; then pass "line $i: signed by the first key (p1), a sig already there replaced"
    else fail "line $i: signed by the first key (p1)" "$line"; fi
done

run "$CTL" -c "$T/seckill.cfg" payment sign --key-separator '|' < <(printf '%s\n' "$A")
is "--key-separator: the line begins with its Kafka key, the user id" "$(cut -d'|' -f1 "$T/out")" 1001
ctl_line=$(cat "$T/out")

# The recipe of docs/api.md, run as it is written: kcat stands in for the
# broker (it prints what it would publish).
recipe=$(awk '/<!-- paysign-example/ { want = 1; next } want && /^```sh/ { on = 1; next }
              on && /^```/ { exit } on { print }' docs/api.md)
if [ -n "$recipe" ]; then pass "docs/api.md has the openssl recipe"; else fail "docs/api.md has the openssl recipe"; fi
kcat() { cat; }
export -f kcat
run env PAYMENT_KEY="$T/payment-key" BROKERS=127.0.0.1:19092 bash -c "$recipe"
is "the recipe exits 0" "$rc" 0
is "the recipe makes the line seckillctl payment sign makes" "$(cat "$T/out")" "$ctl_line"
if mac_ok "$(cat "$T/out")" "$T/payment-key"; then pass "the recipe's MAC checks out (python3 hmac)"
else fail "the recipe's MAC checks out (python3 hmac)" "$(cat "$T/out")"; fi

# Bad input: said with its line number, the good lines still signed, exit 1.
run "$CTL" -c "$T/seckill.cfg" payment sign < <(printf '%s\n%s\n%s\n' "$A" '{"v":1,"order_id":"x"}' "$A")
is "a line that is not a payment: exit 1" "$rc" 1
is "the good lines around it are still signed" "$(grep -c '"sig":"p1:' "$T/out")" 2
if grep -qF 'stdin line 2: not a payment: "order_id" is not a positive 64-bit integer' "$T/err"; then
    pass "the bad line is named with its number and why"
else
    fail "the bad line is named with its number and why" "$(run_diag)"
fi
run "$CTL" -c "$T/nokey.cfg" payment sign < <(printf '%s\n' "$A")
if [ "$rc" -eq 1 ] && [ ! -s "$T/out" ] && grep -qF 'kafka.payment_keys is empty' "$T/err"; then
    pass "no payment key: exit 1, nothing written, the setting named"
else
    fail "no payment key: exit 1, nothing written, the setting named" "$(run_diag)"
fi
run "$CTL" -c "$T/seckill.cfg" payment sign --key-separator 7 < <(printf '%s\n' "$A")
is "a separator with a digit is refused (exit 2)" "$rc" 2
run "$CTL" -c "$T/seckill.cfg" payment frobnicate
is "an unknown payment command: exit 2" "$rc" 2

echo "1..$n"
[ "$failed" -eq 0 ]
