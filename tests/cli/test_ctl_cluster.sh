#!/usr/bin/env bash
# tests/cli/test_ctl_cluster.sh BUILD_DIR: seckillctl on the stack's Redis
# Cluster (scripts/stack up --cluster, config/seckill-cluster.cfg; issue #31).
# The Redis functions loaded and checked on every primary, and a primary whose
# library was deleted named by its address, by `functions check` and by the
# consumer's start check; items whose keys land on all three primaries
# created, shown, reconciled (clean; a wrong stock found on its own shard and
# fixed there), their stock changed live and a sale paused on its shard,
# listed by watch and the sweep, and rebuilt by `item load` after their keys
# were lost; an item's three buckets placed one per primary and paused there,
# and two on one primary counted crowded by the sweeper. Own key prefix, topic, group and items, removed
# at the end; the Cluster is stopped at the end. Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_ctl_cluster.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STATE=${SECKILL_STACK_DIR:-$ROOT/.stack}
T=$(mktemp -d)
TAG=ctlcl$$
PREFIX=sktest-$TAG
TOPIC=sktest.ctlcl.$$
GROUP=sktest-$TAG
BASE=$((950000000000 + $$ * 100))
PORTS=(16401 16402 16403 16404 16405 16406)
export PGPASSFILE=$STATE/pgpass
PSQL=(psql -X -q -t -A -h 127.0.0.1 -p 15432 -U admin -d seckill)
CTL=("$BUILD/seckillctl" -c "$T/seckill.cfg")
ITEMS=() OWNERS=()

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

# rc PORT ARGS...: redis-cli on one node, no redirection followed, as the
# stack's own user (as scripts/stack does)
rc() { local p=$1; shift; REDISCLI_AUTH=$(cat "$STATE/secrets/redis-stack") redis-cli --user stack -p "$p" "$@" 2>&1 | tr -d '\r'; }
primaries() { for p in "${PORTS[@]}"; do [ "$(rc "$p" ROLE | sed -n 1p)" = master ] && echo "$p"; done; }
# owner KEY: the port of the primary that holds KEY (its answer to GET is no
# MOVED: every other primary redirects)
owner() { local p; for p in $(primaries); do rc "$p" GET "$1" | grep -q '^MOVED' || { echo "$p"; return; }; done; }

cleanup() {
    [ -s "$T/seckill.cfg" ] && "${CTL[@]}" functions load >/dev/null 2>&1   # never leave a shard without them
    for p in $(primaries); do
        rc "$p" --scan --pattern "$PREFIX:*" | while read -r k; do rc "$p" DEL "$k" >/dev/null; done
    done
    if [ ${#ITEMS[@]} -gt 0 ]; then
        ids=$(IFS=,; echo "${ITEMS[*]}")
        "${PSQL[@]}" -c "DELETE FROM orders WHERE item_id IN ($ids); DELETE FROM order_rejections WHERE item_id IN ($ids);
                         DELETE FROM items WHERE item_id IN ($ids)" >/dev/null 2>&1
    fi
    scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
    scripts/stack down --cluster >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

echo "1..23"

scripts/stack up >"$T/stack.log" 2>&1 || { echo "Bail out! scripts/stack up failed: $(tail -n 3 "$T/stack.log")"; exit 1; }
scripts/stack up --cluster >"$T/stack.log" 2>&1 || { echo "Bail out! scripts/stack up --cluster failed: $(tail -n 3 "$T/stack.log")"; exit 1; }
scripts/stack topic create "$TOPIC" >/dev/null 2>&1 || { echo "Bail out! cannot create topic $TOPIC"; exit 1; }
# A short delivery window: item load waits 2 x message.timeout.ms + 2 s.
sed -e "s/key_prefix = \"seckill\"/key_prefix = \"$PREFIX\"/" \
    -e "s/topic = \"seckill.orders\";/topic = \"$TOPIC\";/" \
    -e "s/group_id = \"seckill-consumer\";/group_id = \"$GROUP\";/" \
    -e "s/producer_properties = \[ /producer_properties = [ \"message.timeout.ms=1000\", /" \
    -e "s|\"\.\./\.stack/|\"$STATE/|" \
    -e "s|key_dir = \"dev-keys\";|key_dir = \"$ROOT/config/dev-keys\";|" config/seckill-cluster.cfg >"$T/seckill.cfg"
mapfile -t P < <(primaries)
[ ${#P[@]} = 3 ] || { echo "Bail out! the Cluster has ${#P[@]} primaries, not 3"; exit 1; }

# --- the functions on every primary -------------------------------------------
n_on() { grep -c "on 127.0.0.1:$2\$" "$1"; }
run "${CTL[@]}" functions load
is "functions load: exit 0, the 5 libraries on each of the 3 primaries" \
    "$rc $(grep -c ': loaded version' "$T/out") $(n_on "$T/out" "${P[0]}") $(n_on "$T/out" "${P[1]}") $(n_on "$T/out" "${P[2]}")" \
    "0 15 5 5 5"
run "${CTL[@]}" functions check
is "functions check: exit 0, ok on each primary" "$rc $(grep -c ': ok (version' "$T/out")" "0 15"

# A shard loses a library (FUNCTION DELETE, replicated to its replica): named.
VICTIM=${P[1]}
rc "$VICTIM" FUNCTION DELETE seckill_ctl >/dev/null
run "${CTL[@]}" functions check
if [ "$rc" = 1 ] && grep -q "^seckillctl on 127.0.0.1:$VICTIM: the function library seckill_ctl is not loaded" "$T/err" &&
   [ "$(grep -c ': ok (version' "$T/out")" = 14 ] && ! grep -q "seckill_ctl: ok .* on 127.0.0.1:$VICTIM" "$T/out"; then
    pass "functions check: exit 1, the primary without seckill_ctl named by its address, the 14 others ok"
else fail "functions check names the primary without seckill_ctl ($VICTIM)" "$(run_diag)"; fi

# The consumer's start check visits every primary too: it refuses to start.
rc "${P[2]}" FUNCTION DELETE seckill_consumer >/dev/null
run timeout 30 "$BUILD/seckill-consumer" -c "$T/seckill.cfg"
if [ "$rc" != 0 ] && [ "$rc" != 124 ] &&
   grep -q "refusing to start: on 127.0.0.1:${P[2]}: the function library seckill_consumer is not loaded" "$T/err"; then
    pass "the consumer refuses to start, naming the primary without seckill_consumer (exit $rc)"
else fail "the consumer's start check names the primary without seckill_consumer (${P[2]})" "$(run_diag)"; fi

run "${CTL[@]}" functions load
is "functions load puts them back: 2 libraries loaded where none were" \
    "$rc $(grep -c '(none before)' "$T/out") $(grep -c "seckill_ctl: loaded version [0-9]* (none before) on 127.0.0.1:$VICTIM" "$T/out")" \
    "0 2 1"
run "${CTL[@]}" functions check
is "functions check: all ok again" "$rc $(grep -c ': ok (version' "$T/out")" "0 15"

# --- items on all three primaries ------------------------------------------------
declare -A seen=()
for i in $(seq 0 99); do
    id=$((BASE + i)) o=$(owner "$PREFIX:{item:$((BASE + i))}:stock")
    [ -n "$o" ] && [ -z "${seen[$o]:-}" ] || continue
    seen[$o]=1 ITEMS+=("$id") OWNERS+=("$o")
    [ ${#ITEMS[@]} = 3 ] && break
done
[ ${#ITEMS[@]} = 3 ] || { echo "Bail out! no items on all three primaries: ${OWNERS[*]}"; exit 1; }

created=0 held=0
for k in 0 1 2; do
    "${CTL[@]}" item create --id "${ITEMS[$k]}" --stock $((5 + k)) --name ctlcl >/dev/null 2>>"$T/create.err" &&
        created=$((created + 1))
    [ "$(rc "${OWNERS[$k]}" GET "$PREFIX:{item:${ITEMS[$k]}}:stock")" = $((5 + k)) ] && held=$((held + 1))
done
is "item create: 3 items, each one's stock on its own primary (${OWNERS[*]})" "$created $held" "3 3"

shown=0
for k in 0 1 2; do
    "${CTL[@]}" item show "${ITEMS[$k]}" >"$T/show" 2>&1 &&
        grep -q "redis      stock $((5 + k)), pending 0, unpublished 0, buyers 0" "$T/show" &&
        grep -q "open by Redis's clock" "$T/show" && shown=$((shown + 1))
done
is "item show: each item's Redis stock and window, read on its shard" "$shown" 3

recon() { "${CTL[@]}" reconcile --item "$1" >"$T/recon" 2>&1; }
clean=0
for id in "${ITEMS[@]}"; do recon "$id" && grep -q '0 mismatches' "$T/recon" && clean=$((clean + 1)); done
is "reconcile: the three items clean" "$clean" 3

# A wrong stock on the third primary: found there, and fixed there.
rc "${OWNERS[2]}" SET "$PREFIX:{item:${ITEMS[2]}}:stock" 9 >/dev/null
run "${CTL[@]}" reconcile --item "${ITEMS[2]}"
is "reconcile: an extra 2 units on ${OWNERS[2]} found (exit 1)" "$rc $(grep -c '(+2 units)' "$T/out")" "1 1"
run "${CTL[@]}" reconcile --item "${ITEMS[2]}" --fix
is "reconcile --fix: the stock lowered on its primary" \
    "$(grep -c 'Redis stock 9 -> 7' "$T/out") $(rc "${OWNERS[2]}" GET "$PREFIX:{item:${ITEMS[2]}}:stock")" "1 7"

# --- live stock changes and a pause, each on the item's own shard (issue #57) ----
changed=0
for k in 0 1 2; do
    st() { rc "${OWNERS[$k]}" GET "$PREFIX:{item:${ITEMS[$k]}}:stock"; }
    "${CTL[@]}" item add-stock --id "${ITEMS[$k]}" --units 3 --change-id "$TAG-a$k" >/dev/null 2>&1 &&
        [ "$(st)" = $((8 + k)) ] &&
        "${CTL[@]}" item add-stock --id "${ITEMS[$k]}" --units 3 --change-id "$TAG-a$k" >/dev/null 2>&1 &&
        [ "$(st)" = $((8 + k)) ] &&
        "${CTL[@]}" item withdraw --id "${ITEMS[$k]}" --units 3 --change-id "$TAG-w$k" >/dev/null 2>&1 &&
        [ "$(st)" = $((5 + k)) ] && [ "$(rc "${OWNERS[$k]}" HLEN "$PREFIX:{item:${ITEMS[$k]}}:changes")" = 2 ] &&
        recon "${ITEMS[$k]}" && changed=$((changed + 1))
done
is "item add-stock (twice, one id) and withdraw: each item's stock moved once on its primary, reconcile clean" \
    "$changed" 3
run "${CTL[@]}" item pause --id "${ITEMS[1]}"
paused=$(rc "${OWNERS[1]}" HGET "$PREFIX:{item:${ITEMS[1]}}:window" paused)
shown=$("${CTL[@]}" item show "${ITEMS[1]}" | grep -c PAUSED)
"${CTL[@]}" item resume --id "${ITEMS[1]}" >/dev/null 2>&1
is "item pause, show, resume on the item's primary" \
    "$rc $paused $shown $(rc "${OWNERS[1]}" HEXISTS "$PREFIX:{item:${ITEMS[1]}}:window" paused)" "0 1 1 0"

# --- watch and sweep: every item, wherever it lives ------------------------------
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n 1; }
# item_field LINE ITEM NAME: NAME of ITEM on a watch line (item=ID stock=...)
item_field() { tr ' ' '\n' <<<"$1" | sed -n "/^item=$2\$/,/^item=/p" | sed -n "s/^$3=//p" | head -n 1; }
run "${CTL[@]}" watch --count 1
line=$(tail -n 1 "$T/out")
is "watch (no --item): redis up, the 3 items of the registry" "$rc $(field "$line" redis) $(field "$line" items)" "0 up 3"
got= want=
for k in 0 1 2; do
    got="$got $(item_field "$line" "${ITEMS[$k]}" stock)"
    want="$want $(rc "${OWNERS[$k]}" GET "$PREFIX:{item:${ITEMS[$k]}}:stock")"
done
is "watch: each item's stock is its primary's" "$got" "$want"
run "${CTL[@]}" sweep
is "sweep: the 3 items, nothing pending" "$rc $(grep -c '^items 3  pending 0' "$T/out")" "0 1"

# --- Redis lost the items: item load rebuilds each on its own shard ------------
for k in 0 1 2; do
    for part in stock buyers pending unpub window orders; do
        rc "${OWNERS[$k]}" DEL "$PREFIX:{item:${ITEMS[$k]}}:$part" >/dev/null
    done
done
run "${CTL[@]}" reconcile --item "${ITEMS[0]}"
is "reconcile: the lost item is found without stock" "$rc $(grep -c 'Redis holds no stock' "$T/out")" "1 1"
rebuilt=0 back=0
for k in 0 1 2; do
    "${CTL[@]}" item load --id "${ITEMS[$k]}" --wait-ms 20000 >"$T/load" 2>&1 &&
        grep -q "item ${ITEMS[$k]}: rebuilt: stock $((5 + k))" "$T/load" && rebuilt=$((rebuilt + 1))
    [ "$(rc "${OWNERS[$k]}" GET "$PREFIX:{item:${ITEMS[$k]}}:stock")" = $((5 + k)) ] && back=$((back + 1))
done
is "item load: the 3 items rebuilt, each stock back on its primary" "$rebuilt $back" "3 3"
clean=0
for id in "${ITEMS[@]}"; do recon "$id" && grep -q '0 mismatches' "$T/recon" && clean=$((clean + 1)); done
is "reconcile after the rebuild: the three items clean" "$clean" 3
run "${CTL[@]}" item load --id "${ITEMS[1]}"
is "item load of an item Redis holds: refused, nothing done" "$rc $(grep -c 'Redis still holds it' "$T/out")" "1 1"

# --- an item in buckets (issue #57, ctl/itembk.h): one on each primary -------------
BK=$((BASE + 90))
ITEMS+=("$BK")
run "${CTL[@]}" item create --id "$BK" --stock 6 --buckets 3
salts=$(sed -nE 's/.*in 3 buckets \(salts ([0-9,]+)\).*/\1/p' "$T/out")
owners=$(for s in ${salts//,/ }; do owner "$PREFIX:{item:$BK:$s}:stock"; done | sort -u | wc -l)
"${CTL[@]}" item pause --id "$BK" >/dev/null
paused=$(for s in ${salts//,/ }; do
    rc "$(owner "$PREFIX:{item:$BK:$s}:window")" HGET "$PREFIX:{item:$BK:$s}:window" paused; done | tr -d '\n')
run "${CTL[@]}" item show "$BK"
is "item create --buckets 3: the buckets on the 3 primaries, each paused on its own; item show says so" \
    "$(grep -c 'buckets    3 (salts .*), on 3 of 3 primaries; Redis names' "$T/out") $owners $paused" "1 3 111"

# Two of its buckets on one primary (what a reshard can do): the sweeper
# counts the item crowded. The window named by hand, then put back.
first=$(owner "$PREFIX:{item:$BK:0}:stock") twin=""
for s in $(seq 1 64); do [ "$(owner "$PREFIX:{item:$BK:$s}:stock")" = "$first" ] && { twin=$s; break; }; done
win=$PREFIX:{item:$BK}:window
rc "$(owner "$win")" HSET "$win" buckets "0,$twin" >/dev/null
run "${CTL[@]}" sweep --age-ms 0
crowded=$(grep -c 'another could take: 1;' "$T/out")
rc "$(owner "$win")" HSET "$win" buckets "$salts" >/dev/null
run "${CTL[@]}" sweep --age-ms 0
is "sweep: two buckets on one primary counted crowded (salts 0,$twin), the placed ones not" \
    "$crowded $(grep -c 'another could take: 0;' "$T/out")" "1 1"

# --- one Redis: the same commands, no address on the lines -------------------------
sed -e '/cluster_nodes = /d' -e 's/min_replicas_ack = 1;/min_replicas_ack = 0;/' \
    -e 's/^  db = 0;/  host = "127.0.0.1"; port = 16379; db = 0;/' "$T/seckill.cfg" >"$T/single.cfg"
run "$BUILD/seckillctl" -c "$T/single.cfg" functions check
is "functions check on one Redis: 5 lines, no address" "$rc $(grep -c ': ok (version [0-9]* or newer)$' "$T/out")" "0 5"

[ "$failed" -eq 0 ]
