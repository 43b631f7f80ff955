#!/usr/bin/env bash
# tests/cli/test_sweep_wait.sh BUILD_DIR: with redis.min_replicas_ack, the
# sweeper publishes a stale reservation only once that many replicas hold it
# (WAIT after its claim), as the producer's own 202 does. The nemesis found
# why (issue #32, seed 1107403330): a primary cut off with the producer
# published reservations that the failover then erased from Redis, and their
# units were sold twice: 5 buyers told 202 got no order. The plain stack's
# Redis has no replica: with min_replicas_ack 1, `seckillctl sweep` publishes
# nothing, says why and leaves the reservation for the next pass; with 0 it
# publishes it. The same holds for an operator's change to a waiting room
# (seckillctl queue pause): not confirmed, it exits 1 and says why. On a
# scratch topic. Needs the stack (scripts/stack up). TAP.
set -u

BUILD=${1:?usage: tests/cli/test_sweep_wait.sh BUILD_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
CTL=$BUILD/seckillctl
T=$(mktemp -d)
UNIQ=$(date +%s%N)
ITEM=$(( (UNIQ / 1000 % 1000000000000) * 1000000 + ($$ % 100000) * 10 + 7 ))
ORDER=$ITEM
USER_ID=4242
TOPIC=seckill.test.sweepwait.$$
PREFIX=seckill # redis.key_prefix in config/seckill.cfg
K="$PREFIX:{item:$ITEM}"
QITEM=$((ITEM + 1))
QK="$PREFIX:{item:$QITEM}"

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

rcli() { scripts/stack redis-cli "$@" 2>/dev/null; }
cleanup() {
    rcli DEL "$K:stock" "$K:buyers" "$K:pending" "$K:unpub" "$K:window" "$K:orders" >/dev/null
    rcli DEL "$QK:stock" "$QK:buyers" "$QK:pending" "$QK:unpub" "$QK:window" "$QK:orders" "$QK:queue" >/dev/null
    rcli SREM "$PREFIX:items" "$ITEM" "$QITEM" >/dev/null
    scripts/stack psql -d seckill -q -c "DELETE FROM items WHERE item_id IN ($ITEM, $QITEM)" >/dev/null 2>&1
    scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

# mkcfg FILE ACKS: config/seckill.cfg with its paths made absolute, the
# scratch topic, and redis.min_replicas_ack ACKS (WAIT up to 300 ms)
mkcfg() {
    sed -e "s|\"\\.\\./\\.stack/|\"$ROOT/.stack/|" -e "s|key_dir = \"dev-keys\"|key_dir = \"$ROOT/config/dev-keys\"|" \
        -e "s|topic = \"seckill.orders\";|topic = \"$TOPIC\";|" \
        -e "s|^redis = {|redis = {\n  min_replicas_ack = $2;\n  wait_timeout_ms = 300;|" config/seckill.cfg >"$1"
}

echo "1..5"

mkcfg "$T/wait1.cfg" 1
mkcfg "$T/wait0.cfg" 0
scripts/stack topic create "$TOPIC" 1 >/dev/null
"$CTL" -c "$T/wait0.cfg" item create --id "$ITEM" --stock 5 >/dev/null
# A reservation Kafka never acknowledged, as a producer that died would leave it.
now=$(date +%s%3N)
msg="{\"v\":1,\"order_id\":\"$ORDER\",\"user_id\":$USER_ID,\"item_id\":$ITEM,\"qty\":1,\"reserved_at_ms\":$now}"
rcli FCALL seckill_reserve 6 "$K:stock" "$K:buyers" "$K:pending" "$K:unpub" "$K:window" "$K:orders" \
    "$USER_ID" "$ORDER" "$msg" "$now" >/dev/null
is "a reservation left unpublished" "$(rcli ZCARD "$K:unpub") $(rcli GET "$K:stock")" "1 4"

run "$CTL" -c "$T/wait1.cfg" sweep --age-ms 0
is "min_replicas_ack 1, no replica: sweep publishes nothing, exit 1, and says why" \
    "$rc $(grep -c 'WAIT 1: fewer replicas hold the claimed reservations' "$T/err")" "1 1"
is "the reservation is still unpublished, its unit still taken" "$(rcli ZCARD "$K:unpub") $(rcli GET "$K:stock")" "1 4"

run "$CTL" -c "$T/wait0.cfg" sweep --age-ms 0
is "min_replicas_ack 0: published (exit 0, nothing unpublished)" \
    "$rc $(grep -c 're-published 1,' "$T/out") $(rcli ZCARD "$K:unpub")" "0 1 0"

later=$(( $(date +%s%3N) + 3600000 ))
"$CTL" -c "$T/wait0.cfg" item create --id "$QITEM" --stock 5 --starts-at "$later" --queue-opens-at "$now" >/dev/null
run "$CTL" -c "$T/wait1.cfg" queue pause --item "$QITEM"
is "min_replicas_ack 1, no replica: queue pause exits 1 and says why" \
    "$rc $(grep -c "setting the room's paused: fewer than 1 replicas confirmed it" "$T/err")" "1 1"

[ "$failed" -eq 0 ]
