#!/usr/bin/env bash
# tests/cli/test_cluster_sale.sh BUILD_DIR: a sale of many items on the
# stack's Redis Cluster (issue #31 §4): the producer, the consumer and
# seckillctl with config/seckill-cluster.cfg (as the shipped file sets them),
# bench/zipf's sale at a small size (ZIPF_ITEMS items, Zipf popularity, each
# buyer with a token). The items' keys land on all three primaries, checked
# twice: from the nodes' own CLUSTER KEYSLOT and slot map, and from each
# primary's own count of the function calls it ran during the sale; then
# zipf's checks (nothing oversold, lost, duplicated, unanswered; PostgreSQL's
# stock and Redis agree; seckillctl reconcile clean over every item) all 0.
# Speaks TAP. (BUILD_DIR is unused: bench/zipf runs build/'s binaries.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STATE=${SECKILL_STACK_DIR:-$ROOT/.stack}
T=$(mktemp -d)
ITEMS=${SECKILL_CLUSTER_SALE_ITEMS:-30}

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

cleanup() {
    scripts/stack down --cluster >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

rc() { local p=$1; shift; REDISCLI_AUTH=$(cat "$STATE/secrets/redis-stack") redis-cli --user stack -p "$p" "$@" 2>&1 | tr -d '\r'; }
# The primary that serves SLOT, from CLUSTER SHARDS-less CLUSTER SLOTS (raw:
# start, end, then ip, port, id of the primary, then the replicas')
owner() {
    rc 16401 --no-raw CLUSTER SLOTS | awk -v s="$1" '
        /^[0-9]+\) 1\) \(integer\)/ { lo = $NF; want = 0; next }
        /^   2\) \(integer\)/ { hi = $NF; want = (s >= lo && s <= hi); next }
        want && /^   3\) 1\)/ { getline; sub(/.*\(integer\) /, ""); print; exit }'
}
fig() { awk -v k="$1" '$1==k {print $2; exit}' "$T/zipf"; }

echo "1..5"

run scripts/stack up --cluster
if [ $rc -eq 0 ]; then pass "scripts/stack up --cluster"
else fail "scripts/stack up --cluster" "$(run_diag scripts/stack up --cluster)"; echo "Bail out! no cluster"; exit 1; fi

ZIPF_CONFIG=config/seckill-cluster.cfg ZIPF_ITEMS=$ITEMS ZIPF_REQUESTS=6000 ZIPF_USERS=3000 ZIPF_CONNS=16 \
    ZIPF_STOCK=20 ZIPF_DEADLINE_S=120 ZIPF_KEEP=1 bench/zipf >"$T/zipf" 2>"$T/zipf.err"
zrc=$?
if [ $zrc -eq 0 ]; then pass "a $ITEMS-item sale on the Cluster passes every check of bench/zipf"
else fail "a $ITEMS-item sale on the Cluster passes every check of bench/zipf" "exit $zrc" "$(tail -n 30 "$T/zipf.err")" "$(cat "$T/zipf")"; fi

is "oversold, lost, duplicates, unanswered, reconcile mismatches" \
    "$(fig zipf_oversold) $(fig zipf_lost) $(fig zipf_duplicates) $(fig zipf_unanswered) $(fig zipf_reconcile_mismatch)" \
    "0 0 0 0 0"

# The run's items and prefix, kept (ZIPF_KEEP) for these checks: zipf said them.
prefix=$(sed -n 's/.*keys \([^ ]*\):\*,.*/\1/p' "$T/zipf.err" | head -1)
lo=$(sed -n 's/.*kept: items \([0-9]*\)-\([0-9]*\),.*/\1/p' "$T/zipf.err" | head -1)
owners=
if [ -n "$prefix" ] && [ -n "$lo" ]; then
    for ((i = lo; i < lo + ITEMS; i++)); do
        slot=$(rc 16401 CLUSTER KEYSLOT "$prefix:{item:$i}:stock")
        p=$(owner "$slot")
        [ "$(rc "$p" EXISTS "$prefix:{item:$i}:stock")" = 1 ] && owners="$owners $p"
    done
fi
is "the items' stock keys live on three primaries, each where CLUSTER KEYSLOT and the slot map say" \
    "$(echo $owners | tr ' ' '\n' | sort -u | wc -l) $(echo $owners | wc -w)" "3 $ITEMS"

shards=$(awk '$1 == "zipf_shard_fcalls" && $3 > 0' "$T/zipf" | wc -l)
is "every primary ran function calls of the sale (its own INFO commandstats)" "$shards" 3

# The demo's whole sale of one item in three buckets on the same Cluster
# (SECKILL_DEMO_CLUSTER, SECKILL_DEMO_BUCKETS: bench/clustersale's sale at a
# small size): every unit sold, none left in any slot, nothing oversold,
# lost or duplicated (the demo's own checks, its exit status).
run env SECKILL_DEMO_CLUSTER=1 SECKILL_DEMO_BUCKETS=3 SECKILL_DEMO_STOCK=400 SECKILL_DEMO_REQUESTS=4000 \
    SECKILL_DEMO_USERS=2000 SECKILL_DEMO_CONNS=20 SECKILL_DEMO_PORTS="$(free_ports 3)" SECKILL_DEMO_OUT="$T" \
    SECKILL_DEMO_PAY_WITHIN=0 scripts/demo
if [ "$rc" -eq 0 ]; then pass "the demo's sale of an item in three buckets on the Cluster checks out (exit 0)"; else
    fail "the demo's sale of an item in three buckets on the Cluster checks out (exit 0)" "$(tail -n 40 "$T/out")"; fi
is "the item was made in three buckets, and its 400 units sold, none left in any slot" \
    "$(grep -c 'units in 3 buckets' "$T/out") $(grep -o 'sold (accepted) [0-9]* of [0-9]*; Redis stock left [0-9-]*' "$T/out")" \
    "1 sold (accepted) 400 of 400; Redis stock left 0"

# Clean what ZIPF_KEEP kept: the items' rows, orders and keys, the users'
# fences, the topic and zipf's files.
kept=$(grep 'kept: items' "$T/zipf.err" | head -1)
if [ -n "$prefix" ] && [ -n "$lo" ]; then
    hi=$((lo + ITEMS - 1))
    read -r ulo uhi < <(echo "$kept" | sed -n 's/.*users \([0-9]*\)-\([0-9]*\),.*/\1 \2/p')
    PGPASSFILE=$STATE/pgpass psql -X -q -h 127.0.0.1 -p 15432 -U admin -d seckill -c "BEGIN;
        DELETE FROM orders WHERE item_id BETWEEN $lo AND $hi;
        DELETE FROM order_rejections WHERE item_id BETWEEN $lo AND $hi;
        DELETE FROM items WHERE item_id BETWEEN $lo AND $hi;
        DELETE FROM user_fences WHERE user_id BETWEEN ${ulo:-0} AND ${uhi:-0};
        COMMIT" >/dev/null 2>&1
    topic=$(echo "$kept" | sed -n 's/.*topic \([^ ,]*\),.*/\1/p')
    [ -n "$topic" ] && scripts/stack topic delete "$topic" >/dev/null 2>&1
    files=$(echo "$kept" | sed -n 's/.*files \(\/tmp\/seckill-zipf-[A-Za-z0-9]*\)$/\1/p')
    [ -n "$files" ] && rm -rf "$files"
    ports=$(rc 16401 CLUSTER NODES | awk '$3 ~ /master/ {split($2, a, ":"); split(a[2], b, "@"); print b[1]}' | xargs)
    UNLINK_PORTS=$ports bench/unlink-keys "$prefix:*" >/dev/null 2>&1
fi
