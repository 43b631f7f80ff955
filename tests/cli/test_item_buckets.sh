#!/usr/bin/env bash
# tests/cli/test_item_buckets.sh BUILD_DIR: an item's buckets as seckillctl
# makes and keeps them (issue #57, ctl/itembk.h): item create --buckets K
# places K salts, writes them to the database (items.bucket_salts, migration
# 019, whose CHECK refuses what seckillctl never writes) and names them in
# the item's window hash; each bucket is loaded empty with a copy of the
# item's window, which item pause and resume, reconcile --fix and item load
# keep; reconcile finds Redis naming other buckets or a bucket's window gone
# astray, and --fix puts them back; the units stay in the item's own slot;
# item show lists the buckets;
# the sweeper claims a bucket's stale reservation as the item's own, and
# finishes a transfer between slots left half done;
# a bucket holding buyers of an earlier sale refuses a new create; the
# options are checked. On the stack's one Redis (one primary: salts 0, 1, 2);
# the Redis Cluster's placement is tests/it/test_producer_cluster.c's. Needs
# the stack (scripts/stack up). TAP.
set -u

BUILD=${1:?usage: tests/cli/test_item_buckets.sh BUILD_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
CTL=$BUILD/seckillctl
T=$(mktemp -d)
UNIQ=$(date +%s%N)
ITEM=$(( (UNIQ / 1000 % 1000000000000) * 1000000 + ($$ % 100000) * 10 + 7 ))
PREFIX=seckill # redis.key_prefix in config/seckill.cfg
# A topic of its own: item load checks that no order of the item is still on
# the configuration's topic, unconsumed (the stack's may hold others' orders).
TOPIC=seckill.test.buckets.$$

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

rcli() { scripts/stack redis-cli "$@" 2>/dev/null; }
sql() { scripts/stack psql -d seckill -qtA -c "$1" 2>/dev/null; }
# tag SALT: the hash tag of the item's bucket (SALT "": the item's own slot).
tag() { echo "$PREFIX:{item:$ITEM${1:+:$1}}"; }
keys() {
    local k
    k=$(tag "${1:-}")
    echo "$k:stock $k:buyers $k:pending $k:unpub $k:window $k:orders $k:changes $k:xout $k:xin $k:returned"
}
ITEM2=$((ITEM + 1))
cleanup() {
    local s
    for s in "" 0 1 2; do
        # shellcheck disable=SC2046
        rcli DEL $(keys "$s") $(ITEM=$ITEM2 keys "$s") >/dev/null
    done
    rcli SREM "$PREFIX:items" "$ITEM" "$ITEM2" >/dev/null
    sql "DELETE FROM orders WHERE item_id IN ($ITEM, $ITEM2)" >/dev/null
    sql "DELETE FROM items WHERE item_id IN ($ITEM, $ITEM2)" >/dev/null
    scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
sed -e "s|\"\\.\\./\\.stack/|\"$ROOT/.stack/|" -e "s|key_dir = \"dev-keys\"|key_dir = \"$ROOT/config/dev-keys\"|" \
    -e "s|topic = \"seckill.orders\";|topic = \"$TOPIC\";|" config/seckill.cfg >"$T/seckill.cfg"
scripts/stack topic create "$TOPIC" 1 >/dev/null
ctl() { "$CTL" -c "$T/seckill.cfg" "$@"; }
# window SALT: the bucket's window hash, its fields sorted, one line.
window() { rcli HGETALL "$(tag "${1:-}"):window" | paste - - | sort | tr '\t\n' '= '; }
# copies: "same" for each bucket whose window is the item's but for the
# field that names the buckets.
copies() {
    local home s out=""
    home=$(rcli HGETALL "$(tag):window" | paste - - | grep -v '^buckets' | sort | tr '\t\n' '= ')
    for s in 0 1 2; do
        if [ "$(window "$s")" = "$home" ] && [ -n "$home" ]; then out="$out same"; else out="$out other"; fi
    done
    echo "${out# }"
}

echo "1..28"

for bad in 0 17 x; do
    run ctl item create --id "$ITEM" --stock 9 --buckets "$bad"
    is "--buckets $bad: exit 2, said" "$rc $(grep -c -- '--buckets' "$T/err")" "2 1"
done
now=$(date +%s%3N)
run ctl item create --id "$ITEM" --stock 9 --buckets 3 --starts-at $((now + 60000)) --queue-opens-at "$now"
is "--buckets with a waiting room: exit 2, said why" "$rc $(grep -c 'waiting room in front of buckets' "$T/err")" "2 1"
is "nothing was created" "$(sql "SELECT count(*) FROM items WHERE item_id = $ITEM")" "0"

# A payment window with buckets (an order's payment, cancel and expiry in
# its buyer's bucket, its unit back to the reserve: tests/it/test_cancel.c).
run ctl item create --id "$ITEM2" --stock 9 --buckets 3 --pay-within 60
is "--buckets with a payment window: exit 0, in 3 buckets, to be paid within 60 s" \
    "$rc $(grep -c 'in 3 buckets' "$T/out") $(grep -c 'to be paid within 60 s' "$T/out") $(sql "SELECT pay_within_s FROM items WHERE item_id = $ITEM2")" \
    "0 1 1 60"

starts=$((now - 1000)) ends=$((now + 3600000))
run ctl item create --id "$ITEM" --stock 9 --buckets 3 --starts-at "$starts" --ends-at "$ends"
is "create --buckets 3: exit 0, the salts said" "$rc $(grep -c 'created: 9 units in 3 buckets (salts 0,1,2)' "$T/out")" "0 1"
is "the database holds the salts" "$(sql "SELECT bucket_salts FROM items WHERE item_id = $ITEM")" "{0,1,2}"
is "Redis: the item's window names them; its own slot holds the 9 units, each bucket 0" \
    "$(rcli HGET "$(tag):window" buckets) $(rcli GET "$(tag):stock") $(rcli GET "$(tag 0):stock") $(rcli GET "$(tag 1):stock") $(rcli GET "$(tag 2):stock")" \
    "0,1,2 9 0 0 0"
is "each bucket has the item's window (the sale's), not the buckets' names" \
    "$(copies) $(window 1)" "same same same ends_ms=$ends starts_ms=$starts "

ctl item pause --id "$ITEM" >/dev/null
p=$(copies) f=$(rcli HGET "$(tag 2):window" paused)
ctl item resume --id "$ITEM" >/dev/null
is "item pause reaches each bucket's window, item resume too" \
    "$p $f $(copies) $(rcli HEXISTS "$(tag 2):window" paused)" "same same same 1 same same same 0"

# A window Redis got wrong: reconcile --fix sets the item's, and the copies.
rcli HSET "$(tag):window" starts_ms 1 >/dev/null
rcli HSET "$(tag 1):window" starts_ms 1 >/dev/null
ctl reconcile --item "$ITEM" --fix >/dev/null 2>&1
is "reconcile --fix: the item's window and each bucket's copy are the database's again" \
    "$(rcli HGET "$(tag):window" starts_ms) $(copies)" "$starts same same same"

# Redis naming other buckets than the database, and a bucket's copy gone
# astray: reconcile says both, --fix puts them back.
rcli HSET "$(tag):window" buckets 0,1 >/dev/null
rcli HSET "$(tag 2):window" starts_ms 5 >/dev/null
run ctl reconcile --item "$ITEM"
said="$rc $(grep -c "Redis names the buckets '0,1', the database '0,1,2'" "$T/out") $(grep -c "1 buckets' windows differ" "$T/out")"
ctl reconcile --item "$ITEM" --fix >/dev/null 2>&1
run ctl reconcile --item "$ITEM"
is "reconcile: Redis's names of the buckets and a stray copy found (exit 1), fixed by --fix (then clean)" \
    "$said $(rcli HGET "$(tag):window" buckets) $(copies) $rc" "1 1 1 0,1,2 same same same 0"

run ctl item show "$ITEM"
is "item show: the buckets, on the one primary, Redis naming the same; the units over every slot" \
    "$(grep -c 'buckets    3 (salts 0,1,2), on 1 of 1 primaries; Redis names 0,1,2$' "$T/out") $(grep -cE 'bucket [0-2] +salt [0-2] on .*: stock 0, buyers 0, window the item.s$' "$T/out") $(grep -c 'all slots  stock 9 (the reserve 9, the buckets 0), buyers 0$' "$T/out")" \
    "1 3 1"

# Units in a bucket (4 moved there by hand, as a refill does, with its
# records at both ends): item show and watch count them with the reserve's,
# and watch shows each slot's, the transfer given and received.
rcli DECRBY "$(tag):stock" 4 >/dev/null
rcli INCRBY "$(tag 1):stock" 4 >/dev/null
rcli HSET "$(tag):xout" by-hand 1:4 >/dev/null
rcli HSET "$(tag 1):xin" by-hand 4 >/dev/null
run ctl item show "$ITEM"
shown=$(grep -c 'all slots  stock 9 (the reserve 5, the buckets 4), buyers 0$' "$T/out")
run ctl watch --item "$ITEM" --count 1 --interval 100
is "units in a bucket: item show and watch count every slot's" "$shown $(grep -o ' stock=[0-9]*' "$T/out")" "1  stock=9"
is "watch: each slot's units, buyers and transfers, the reserve first" \
    "$(grep -oE ' slot_(stock|buyers|transfers_out|transfers_in)=[0-9,]*' "$T/out" | tr -d '\n')" \
    " slot_stock=5,0,4,0 slot_buyers=0,0,0,0 slot_transfers_out=1,0,0,0 slot_transfers_in=0,0,1,0"
rcli INCRBY "$(tag):stock" 4 >/dev/null
rcli DECRBY "$(tag 1):stock" 4 >/dev/null
rcli DEL "$(tag):xout" "$(tag 1):xin" >/dev/null

# Redis lost everything of the item: item load restores the buckets.
for s in "" 0 1 2; do
    # shellcheck disable=SC2046
    rcli DEL $(keys "$s") >/dev/null
done
run ctl item load --id "$ITEM" --wait-ms 0
is "item load: exit 0; the item's window names the buckets, the units in its own slot, each bucket empty" \
    "$rc $(rcli HGET "$(tag):window" buckets) $(rcli GET "$(tag):stock") $(rcli GET "$(tag 0):stock")$(rcli GET "$(tag 2):stock")" \
    "0 0,1,2 9 00"
is "item load: each bucket has the item's window again" "$(copies)" "same same same"

# The sweeper walks the buckets: a reservation Kafka never acknowledged in
# bucket 1 (a unit put there by hand, reserved as the producer reserves) is
# claimed and published by seckillctl sweep, as one in the item's own slot.
k1=$(tag 1) now=$(date +%s%3N) order=$((ITEM % 1000000000 * 1000 + 1))
rcli SET "$k1:stock" 1 >/dev/null
rcli FCALL seckill_reserve 6 "$k1:stock" "$k1:buyers" "$k1:pending" "$k1:unpub" "$k1:window" "$k1:orders" 4242 \
    "$order" "{\"v\":1,\"order_id\":\"$order\",\"user_id\":4242,\"item_id\":$ITEM,\"qty\":1,\"reserved_at_ms\":$now}" \
    "$now" >/dev/null
before=$(rcli ZCARD "$k1:unpub")
run ctl sweep --age-ms 0
# (the stack's other items are swept too: the counts are at least ours)
is "sweep: bucket 1's reservation claimed and re-published (no longer unpublished), the buckets swept" \
    "$rc $before $(rcli ZCARD "$k1:unpub") $(grep -cE 'claimed [1-9][0-9]*, re-published [1-9]' "$T/out") $(grep -cE '^buckets ([3-9]|[1-9][0-9]+) swept' "$T/out")" \
    "0 1 0 1 1"
rcli HSET "$(tag):window" buckets 'not,salts' >/dev/null
run ctl sweep --age-ms 0
is "sweep: a window naming buckets seckillctl never writes is counted, the item's own slot still swept" \
    "$rc $(grep -c '^items [1-9][0-9]*  pending' "$T/out") $(grep -c 'never writes: 1;' "$T/out")" "0 1 1"
rcli HSET "$(tag):window" buckets 0,1,2 >/dev/null

# A refill left half done (3 units given by the reserve to bucket 2, its
# producer gone before the receiving half): the sweeper finishes it, and
# the units are on sale in bucket 2.
rcli DECRBY "$(tag):stock" 3 >/dev/null
rcli HSET "$(tag):xout" left-half-done 2:3 >/dev/null
run ctl sweep --age-ms 0
is "sweep: a transfer left half done finished (the units in bucket 2, its record there), and said" \
    "$rc $(rcli GET "$(tag):stock") $(rcli GET "$(tag 2):stock") $(rcli HGET "$(tag 2):xin" left-half-done) $(grep -cE 'found half done and finished: [1-9]' "$T/out")" \
    "0 6 3 3 1"
rcli INCRBY "$(tag):stock" 3 >/dev/null
rcli SET "$(tag 2):stock" 0 >/dev/null
rcli DEL "$(tag):xout" "$(tag 2):xin" >/dev/null
rcli DEL "$k1:pending" "$k1:orders" >/dev/null
rcli SET "$k1:stock" 0 >/dev/null

# A bucket holding a buyer of this sale: a new create would sell their unit twice.
rcli SADD "$(tag 1):buyers" 4242 >/dev/null
run ctl item create --id "$ITEM" --stock 9 --buckets 3
is "create over a bucket with buyers: exit 1, says which" "$rc $(grep -c 'bucket 1 (salt 1) has buyers' "$T/err")" "1 1"
rcli DEL "$(tag 1):buyers" >/dev/null
# A buyer in the item's own slot: refused before any bucket is touched.
rcli SADD "$(tag):buyers" 4243 >/dev/null
run ctl item create --id "$ITEM" --stock 9 --buckets 3
is "create over the item's own slot with buyers: exit 1, says so, every bucket's window as it was" \
    "$rc $(grep -c 'its own slot has buyers' "$T/err") $(copies)" "1 1 same same same"
rcli SREM "$(tag):buyers" 4243 >/dev/null

run ctl item create --id "$ITEM" --stock 4
is "created again without buckets: the database and the window name none" \
    "$rc $(sql "SELECT bucket_salts FROM items WHERE item_id = $ITEM") $(rcli HEXISTS "$(tag):window" buckets)" "0 {} 0"

# What seckillctl never writes, the database refuses (migration 019).
is "the CHECK refuses one bucket, a negative salt, one past the last try, a NULL" \
    "$(for a in "'{5}'" "'{1,-1}'" "'{1,4096}'" "'{1,NULL}'"; do
        sql "UPDATE items SET bucket_salts = $a WHERE item_id = $ITEM" >/dev/null || printf r; done)" "rrrr"

# Redis lost a bucketed item whose buyers bought in their buckets: item load
# puts each buyer's mark and status back in their own bucket (where their
# next buy is checked), the units not sold in the item's own slot.
# bucket_of USER K: common/sale/bucket.c's bucket_of.
bucket_of() { python3 tests/cli/bucket_of.py "$2" "$1"; }
ctl item create --id "$ITEM" --stock 9 --buckets 3 --starts-at "$starts" --ends-at "$ends" >/dev/null 2>&1
# (the sweep above published an order no consumer reads: item load would wait for it)
scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
scripts/stack topic create "$TOPIC" 1 >/dev/null
users=() u=5000
for b in 0 1 2; do
    while [ "$(bucket_of "$u" 3)" != "$b" ]; do u=$((u + 1)); done
    users+=("$u")
    sql "BEGIN; INSERT INTO orders (order_id, user_id, item_id, reserved_at, fence)
         VALUES ($((ITEM % 1000000000 * 1000 + 10 + b)), $u, $ITEM, now(), 1);
         UPDATE items SET stock_left = stock_left - 1 WHERE item_id = $ITEM; COMMIT" >/dev/null
    u=$((u + 1))
done
for s in "" 0 1 2; do
    # shellcheck disable=SC2046
    rcli DEL $(keys "$s") "$(tag "$s"):returned" >/dev/null
done
rcli SREM "$PREFIX:items" "$ITEM" >/dev/null
run ctl item load --id "$ITEM" --wait-ms 0
is "item load of a sale in buckets: exit 0, 3 buyers; the reserve holds the 6 units left, each bucket none" \
    "$rc $(grep -c 'stock 6, 3 buyers (3 of 9 sold)' "$T/out") $(rcli GET "$(tag):stock") $(rcli GET "$(tag 0):stock")$(rcli GET "$(tag 1):stock")$(rcli GET "$(tag 2):stock")" \
    "0 1 6 000"
marks=""
for b in 0 1 2; do
    marks="$marks $(rcli SISMEMBER "$(tag "$b"):buyers" "${users[$b]}")$(rcli HEXISTS "$(tag "$b"):orders" "u:${users[$b]}")"
done
run ctl item show "$ITEM"
is "item show after it: 6 units over the slots (all in the reserve), 3 buyers in the buckets" \
    "$(grep -c 'all slots  stock 6 (the reserve 6, the buckets 0), buyers 3$' "$T/out")" "1"
is "each buyer's mark and status back in their own bucket, none in the item's own slot" \
    "${marks# } $(rcli SCARD "$(tag):buyers") $(copies)" "11 11 11 0 same same same"

