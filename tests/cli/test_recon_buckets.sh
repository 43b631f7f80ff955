#!/usr/bin/env bash
# tests/cli/test_recon_buckets.sh BUILD_DIR: seckillctl reconcile over an
# item's buckets (issue #57, ctl/reconcile.h): the Redis stock is every
# slot's (the item's own, the reserve, and each bucket's) plus the units in
# flight between them (a transfer whose receiving half is missing,
# common/sale/xfer.h); a bucket's reservations, buyers and statuses count as
# the item's own, and --fix repairs them in the bucket's slot; a half
# transfer is reported and finished by --fix; a unit put in a bucket by hand
# is found (and lowered, the reserve first). The sale is made by hand with
# the Redis functions the programs call: transfers (seckill_xfer_out,
# seckill_xfer_in), buys in the buyer's bucket (seckill_reserve), orders
# persisted in PostgreSQL and settled in the bucket (seckill_settle). On
# the stack's one Redis (salts 0, 1, 2). Needs the stack (scripts/stack
# up). TAP.
set -u

BUILD=${1:?usage: tests/cli/test_recon_buckets.sh BUILD_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
CTL=$BUILD/seckillctl
T=$(mktemp -d)
UNIQ=$(date +%s%N)
ITEM=$(( (UNIQ / 1000 % 1000000000000) * 1000000 + ($$ % 100000) * 10 + 5 ))
ORDER=$(( ITEM % 1000000000 * 1000 )) # this item's order ids: ORDER + n
RUN=x$$y$UNIQ                         # this run's transfer ids: unique across runs
PREFIX=seckill # redis.key_prefix in config/seckill.cfg

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

rcli() { scripts/stack redis-cli "$@" 2>/dev/null; }
sql() { scripts/stack psql -d seckill -qtA -c "$1" 2>/dev/null; }
# tag SALT: the hash tag of the item's bucket (SALT "": the item's own slot).
tag() { echo "$PREFIX:{item:$ITEM${1:+:$1}}"; }
keys() {
    local k p out=""; k=$(tag "${1:-}")
    for p in stock buyers pending unpub window orders changes returned xout xin; do out="$out $k:$p"; done
    echo "$out"
}
cleanup() {
    local s
    for s in "" 0 1 2; do
        # shellcheck disable=SC2046
        rcli DEL $(keys "$s") >/dev/null
    done
    rcli SREM "$PREFIX:items" "$ITEM" >/dev/null
    sql "DELETE FROM orders WHERE item_id = $ITEM; DELETE FROM items WHERE item_id = $ITEM" >/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
sed -e "s|\"\\.\\./\\.stack/|\"$ROOT/.stack/|" -e "s|key_dir = \"dev-keys\"|key_dir = \"$ROOT/config/dev-keys\"|" \
    config/seckill.cfg >"$T/seckill.cfg"
ctl() { "$CTL" -c "$T/seckill.cfg" "$@"; }

# users K: the first user id from 1001 on in each of K buckets, in bucket
# order (bucket_of, common/sale/bucket.c).
users() { python3 tests/cli/bucket_of.py "$1" --first 1001; }
# xout SALT UNITS ID: a transfer's giving half, from the item's own slot to
# bucket SALT (keeping nothing back); xin SALT UNITS ID: its receiving half.
xout() { local h; h=$(tag); rcli FCALL seckill_xfer_out 2 "$h:stock" "$h:xout" "$3" "$1" "$2" 0 >/dev/null; }
xin() { local b; b=$(tag "$1"); rcli FCALL seckill_xfer_in 3 "$b:stock" "$b:xin" "$b:orders" "$3" "$2" >/dev/null; }
# reserve USER SALT N: order ORDER+N of USER reserved in bucket SALT as the
# producer reserves, and acknowledged by Kafka (no longer unpublished).
reserve() {
    local k now oid=$((ORDER + $3)); k=$(tag "$2"); now=$(date +%s%3N)
    rcli FCALL seckill_reserve 6 "$k:stock" "$k:buyers" "$k:pending" "$k:unpub" "$k:window" "$k:orders" "$1" \
        "$oid" "{\"v\":1,\"order_id\":\"$oid\",\"user_id\":$1,\"item_id\":$ITEM,\"qty\":1,\"reserved_at_ms\":$now}" \
        "$now" >/dev/null
    rcli ZREM "$k:unpub" "$oid" >/dev/null
}
# persist USER N: the consumer's insert of order ORDER+N, its unit taken from stock_left.
persist() {
    sql "BEGIN; INSERT INTO orders (order_id, user_id, item_id, reserved_at, fence)
         VALUES ($((ORDER + $2)), $1, $ITEM, now(), 1);
         UPDATE items SET stock_left = stock_left - 1 WHERE item_id = $ITEM; COMMIT" >/dev/null
}
# settle USER SALT N: the consumer's clearing of the reservation, in the bucket.
settle() {
    local k; k=$(tag "$2")
    rcli FCALL seckill_settle 4 "$k:pending" "$k:unpub" "$k:orders" "$k:stock" "$(date +%s%3N)" \
        "$((ORDER + $3))" "$1" c "$(date +%s%3N)" "" >/dev/null
}
# stocks: the Redis stock of the item's own slot, then of each bucket.
stocks() {
    local s out; out=$(rcli GET "$(tag):stock")
    for s in "$S0" "$S1" "$S2"; do out="$out $(rcli GET "$(tag "$s"):stock")"; done
    echo "$out"
}
# row: the item's row of the last run's report, its columns from total to state.
row() { awk -v i="$ITEM" '$1 == i { $1 = ""; print substr($0, 2) }' "$T/out"; }

echo "1..12"

run ctl item create --id "$ITEM" --stock 9 --buckets 3
read -r S0 S1 S2 <<<"$(sql "SELECT array_to_string(bucket_salts, ' ') FROM items WHERE item_id = $ITEM")"
read -r U0 U1 U2 <<<"$(users 3)"
is "create --buckets 3: exit 0, three salts" "$rc ${S0:-?} ${S1:-?} ${S2:-?}" "0 0 1 2"

# The reserve hands 2 units to each bucket, both halves of each transfer.
for s in "$S0" "$S1" "$S2"; do
    xout "$s" 2 "$RUN-$s" && xin "$s" 2 "$RUN-$s"
done
run ctl reconcile --item "$ITEM"
is "the stock in the buckets: clean (exit 0), Redis stock 9 over the four slots, none in flight" \
    "$rc $(stocks) | $(row) | $(grep -c "own slot 3, in its 3 buckets 2 2 2; 0 units in flight" "$T/out")" \
    "0 3 2 2 2 | 9 9 0 0 9 match 0 0 ok | 1"

# A sale in the buckets: U0's order persisted and settled in bucket 0, U1's
# reservation in bucket 1 not persisted yet.
reserve "$U0" "$S0" 1 && persist "$U0" 1 && settle "$U0" "$S0" 1
reserve "$U1" "$S1" 2
run ctl reconcile --item "$ITEM"
is "a bucket's order and a bucket's reservation: clean (exit 0), sold 1 and reserved 1 counted, buyers match" \
    "$rc $(stocks) | $(row)" "0 3 1 1 2 | 9 7 1 1 8 match 0 0 ok"

# The consumer persisted U2's order and died before clearing its
# reservation in bucket 2: found, and --fix clears it there, and sets the
# buyer's status there.
reserve "$U2" "$S2" 3 && persist "$U2" 3
run ctl reconcile --item "$ITEM"
is "a persisted order's reservation left in bucket 2: exit 1, said (and its stale status)" \
    "$rc $(grep -c '1 reservations are persisted already' "$T/out") $(grep -c '1 settled orders show another status' "$T/out")" \
    "1 1 1"
ctl reconcile --item "$ITEM" --fix >"$T/fix" 2>&1
run ctl reconcile --item "$ITEM"
is "--fix drops it in bucket 2 and sets the status there: then clean" \
    "$(rcli HEXISTS "$(tag "$S2"):pending" "$((ORDER + 3))") $(rcli HGET "$(tag "$S2"):orders" "o:$((ORDER + 3))" | cut -d'|' -f1-2) $rc" \
    "0 $U2|c 0"

# A transfer half done: the reserve gave 2 units to bucket 1 (its record in
# the reserve's :xout), bucket 1 never received them.
xout "$S1" 2 "$RUN-half"
before=$(rcli GET "$(tag "$S1"):stock")
run ctl reconcile --item "$ITEM"
is "a half transfer: exit 1, 2 units in flight said and counted (no stock mismatch)" \
    "$rc $(grep -c 'own slot 1, in its 3 buckets 1 1 1; 2 units in flight' "$T/out") $(grep -c ': 2 units in flight between its slots' "$T/out") $(grep -c 'stock_total' "$T/out")" \
    "1 1 1 0"
run ctl reconcile --item "$ITEM" --fix
is "--fix finishes it: said, bucket 1's stock grows by 2, its receiving half recorded" \
    "$(grep -c 'finished 1 transfers' "$T/out") $before $(rcli GET "$(tag "$S1"):stock") $(rcli HGET "$(tag "$S1"):xin" "$RUN-half")" \
    "1 1 3 2"
run ctl reconcile --item "$ITEM"
is "after --fix: clean, none in flight" "$rc $(grep -c '; 0 units in flight' "$T/out")" "0 1"

# A unit put in bucket 0's stock by hand: one unit more than the orders leave.
rcli INCR "$(tag "$S0"):stock" >/dev/null
run ctl reconcile --item "$ITEM"
is "a unit added by hand to a bucket: exit 1, the stock mismatch said (+1 units)" \
    "$rc $(grep -c 'stock_total 9 != Redis stock 7 + reserved 1 + sold 2 + returning 0 (+1 units)' "$T/out")" "1 1"
run ctl reconcile --item "$ITEM" --fix
is "--fix lowers the reserve by it, then clean" \
    "$(grep -c 'Redis stock in its own slot 1 -> 0' "$T/out") $(stocks) $rc" "1 0 2 3 1 0"

# Bucket 0 lost its buyer U0 (whose order is persisted): found, and --fix
# adds them to bucket 0's set, not the item's own.
rcli SREM "$(tag "$S0"):buyers" "$U0" >/dev/null
run ctl reconcile --item "$ITEM"
is "a buyer missing from their bucket's set: exit 1, said" \
    "$rc $(grep -c '1 users with an order or reservation are missing' "$T/out")" "1 1"
ctl reconcile --item "$ITEM" --fix >"$T/fix" 2>&1
run ctl reconcile --item "$ITEM"
is "--fix adds them to bucket 0's set, not the item's own: then clean" \
    "$(rcli SISMEMBER "$(tag "$S0"):buyers" "$U0") $(rcli SCARD "$(tag):buyers") $rc" "1 0 0"
