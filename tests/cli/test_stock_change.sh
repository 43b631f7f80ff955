#!/usr/bin/env bash
# tests/cli/test_stock_change.sh BUILD_DIR: live stock changes (issue #57,
# ctl/stockchg.h): seckillctl item add-stock and item withdraw move the
# stock in PostgreSQL and Redis once per change id; withdraw takes only units
# no one holds, also while buyers reserve at the same time; a change applied
# at one end only (what a crash between the halves leaves) is reported by
# reconcile, which counts its units, and finished by the same command or by
# reconcile --fix; item load restores Redis' record of the changes, item
# create forgets them. item pause stops the sale (seckill_reserve answers
# -10: 503 paused), reconcile --fix restores a pause Redis lost (and sets a
# wrong window in one call, the pause and the payment window kept), item resume
# sells again (the producer's answers: tests/it/test_producer.c). Buyers
# reserve through seckill_reserve itself, as the producer calls it. Needs
# the stack (scripts/stack up). TAP.
set -u

BUILD=${1:?usage: tests/cli/test_stock_change.sh BUILD_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
CTL=$BUILD/seckillctl
T=$(mktemp -d)
UNIQ=$(date +%s%N)
ITEM=$(( (UNIQ / 1000 % 1000000000000) * 1000000 + ($$ % 100000) * 10 + 3 ))
HALF=$((ITEM + 1))   # the half-applied changes, without reservations
RACE=$((ITEM + 2))   # withdraw racing buyers
PREFIX=seckill # redis.key_prefix in config/seckill.cfg
RUN=c$$x$UNIQ       # this run's change ids: unique across runs
# A topic of its own: item load checks that no order of the item is still on
# the configuration's topic, unconsumed (the stack's may hold others' orders).
TOPIC=seckill.test.stockchg.$$

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

rcli() { scripts/stack redis-cli "$@" 2>/dev/null; }
sql() { scripts/stack psql -d seckill -qtA -c "$1" 2>/dev/null; }
keys() { local k="$PREFIX:{item:$1}"; echo "$k:stock $k:buyers $k:pending $k:unpub $k:window $k:orders $k:changes"; }
cleanup() {
    local i
    for i in "$ITEM" "$HALF" "$RACE"; do
        # shellcheck disable=SC2046
        rcli DEL $(keys "$i") >/dev/null
        rcli SREM "$PREFIX:items" "$i" >/dev/null
        sql "DELETE FROM item_stock_changes WHERE item_id = $i; DELETE FROM items WHERE item_id = $i" >/dev/null
    done
    scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
sed -e "s|\"\\.\\./\\.stack/|\"$ROOT/.stack/|" -e "s|key_dir = \"dev-keys\"|key_dir = \"$ROOT/config/dev-keys\"|" \
    -e "s|topic = \"seckill.orders\";|topic = \"$TOPIC\";|" config/seckill.cfg >"$T/seckill.cfg"
scripts/stack topic create "$TOPIC" 1 >/dev/null
ctl() { "$CTL" -c "$T/seckill.cfg" "$@"; }
# stock ITEM: "Redis PostgreSQL-total PostgreSQL-left audit-rows"
stock() {
    echo "$(rcli GET "$PREFIX:{item:$1}:stock") $(sql "SELECT stock_total || ' ' || stock_left FROM items WHERE item_id = $1") $(sql "SELECT count(*) FROM item_stock_changes WHERE item_id = $1")"
}
# reserve ITEM USER: one buyer's reservation, as the producer makes it.
reserve() {
    local k="$PREFIX:{item:$1}" now order=$(( $1 % 1000000000 * 1000 + $2 ))
    now=$(date +%s%3N)
    rcli FCALL seckill_reserve 6 "$k:stock" "$k:buyers" "$k:pending" "$k:unpub" "$k:window" "$k:orders" "$2" \
        "$order" "{\"v\":1,\"order_id\":\"$order\",\"user_id\":$2,\"item_id\":$1,\"qty\":1,\"reserved_at_ms\":$now}" "$now"
}

echo "1..23"

ctl item create --id "$ITEM" --stock 5 >/dev/null
run ctl item add-stock --id "$ITEM" --units 3 --change-id "$RUN-a1"
is "add-stock: exit 0, says so" "$rc $(grep -c "3 units added (change $RUN-a1); Redis stock now 8" "$T/out")" "0 1"
is "add-stock: Redis 8, stock_total 8, stock_left 8, one audit row" "$(stock "$ITEM")" "8 8 8 1"
is "the audit row says who (seckillctl's role, postgres.admin_user) and how much" \
    "$(sql "SELECT units || ' ' || made_by FROM item_stock_changes WHERE change_id = '$RUN-a1'")" "3 admin"

run ctl item add-stock --id "$ITEM" --units 3 --change-id "$RUN-a1"
is "the same change again: exit 0, applied before, nothing moves" \
    "$rc $(grep -c 'units added before' "$T/out") $(stock "$ITEM")" "0 1 8 8 8 1"
run ctl item add-stock --id "$ITEM" --units 4 --change-id "$RUN-a1"
is "the id with other units: exit 1, says so, nothing moves" \
    "$rc $(grep -c 'for another item or other units' "$T/err") $(stock "$ITEM")" "1 1 8 8 8 1"

run ctl item add-stock --id "$ITEM" --units 2
id=$(sed -n 's/^change \(chg-[0-9a-f]*\)$/\1/p' "$T/out")
is "without --change-id one is made and printed first" "$rc ${id:+made} $(stock "$ITEM")" "0 made 10 10 10 2"

for u in 1 2 3 4 5 6; do reserve "$ITEM" "$u" >/dev/null; done
run ctl item withdraw --id "$ITEM" --units 5 --change-id "$RUN-w1"
is "withdraw more than is free: exit 1, says how many are, nothing moves" \
    "$rc $(grep -c 'only 4 units are free in Redis' "$T/err") $(stock "$ITEM")" "1 1 4 10 10 2"
run ctl item withdraw --id "$ITEM" --units 4 --change-id "$RUN-w1"
is "withdraw what is free: Redis 0, stock_total and stock_left 6, a third row" \
    "$rc $(stock "$ITEM")" "0 0 6 6 3"
is "the reservations keep their units" "$(rcli HLEN "$PREFIX:{item:$ITEM}:pending")" "6"
is "item show: three changes, 5 units added, 4 withdrawn, the last named" \
    "$(ctl item show "$ITEM" | grep -c "changes    3: 5 units added, 4 withdrawn; the last $RUN-w1 (-4) at .* by admin")" "1"

# What a crash between the halves leaves, each way: an addition in
# PostgreSQL only, a withdrawal in Redis only.
ctl item create --id "$HALF" --stock 10 >/dev/null
sql "$(sed -e "s/\$1::text/'$RUN-h1'::text/g; s/\$2::bigint/$HALF::bigint/g; s/\$3::bigint/5::bigint/g" \
       ctl/sql/stock_change.sql)" >/dev/null
k="$PREFIX:{item:$HALF}"
rcli FCALL seckill_stock_change 3 "$k:stock" "$k:changes" "$k:orders" "$RUN-h2" -3 >/dev/null
is "halves: PostgreSQL +5 only, Redis -3 only" "$(stock "$HALF")" "7 15 15 1"
run ctl reconcile --item "$HALF"
is "reconcile: exit 1, each half named, its units counted (no stock mismatch)" \
    "$rc $(grep -c "$RUN-h1 (+5 units) is applied in PostgreSQL only" "$T/out") $(grep -c "$RUN-h2 (-3 units) is applied in Redis only" "$T/out") $(grep -c 'stock_total' "$T/out")" \
    "1 1 1 0"
run ctl item add-stock --id "$HALF" --units 5 --change-id "$RUN-h1"
is "the same command finishes the addition in Redis" "$rc $(stock "$HALF")" "0 12 15 15 1"
run ctl reconcile --item "$HALF" --fix
is "reconcile --fix finishes the withdrawal in PostgreSQL, then all is clean" \
    "$rc $(grep -c "fixed: item $HALF: stock change $RUN-h2 (-3 units) in PostgreSQL" "$T/out") $(stock "$HALF") $(tail -n 1 "$T/out")" \
    "0 1 12 12 12 2 1 items checked, 0 mismatches"

# Redis loses the item: item load restores the stock from the database and
# the record of the changes, so the same change again is still applied once.
# shellcheck disable=SC2046
rcli DEL $(keys "$HALF") >/dev/null
run ctl item load --id "$HALF" --wait-ms 0
is "item load restores the record: the changes again move nothing" \
    "$(rcli HLEN "$k:changes") $(ctl item add-stock --id "$HALF" --units 5 --change-id "$RUN-h1" 2>&1 | grep -c 'added before') $(stock "$HALF")" \
    "2 1 12 12 12 2"
ctl item create --id "$HALF" --stock 4 >/dev/null
is "item create (a new sale, no orders) forgets the changes at both ends" \
    "$(rcli EXISTS "$k:changes") $(stock "$HALF")" "0 4 4 4 0"

# Withdraw while 40 buyers reserve at once: no unit is both withdrawn and
# reserved, and Redis never goes below zero.
ctl item create --id "$RACE" --stock 50 >/dev/null
for u in $(seq 1 40); do reserve "$RACE" "$u" >"$T/r.$u" & done
w=0
for i in 1 2 3 4 5; do
    ctl item withdraw --id "$RACE" --units 4 --change-id "$RUN-r$i" >/dev/null 2>&1 && w=$((w + 4))
done
wait
held=$(rcli HLEN "$PREFIX:{item:$RACE}:pending")
left=$(rcli GET "$PREFIX:{item:$RACE}:stock")
is "racing: reserved + withdrawn + Redis stock = 50, none below zero" \
    "$((held + w + left)) $([ "$left" -ge 0 ] && echo nonneg)" "50 nonneg"
is "racing: PostgreSQL's stock_total is 50 less what was withdrawn" \
    "$(sql "SELECT stock_total FROM items WHERE item_id = $RACE")" "$((50 - w))"

# Paused: nobody new reserves, in Redis' own answer; the database and Redis
# agree (reconcile), and a pause Redis lost comes back with --fix.
ctl item create --id "$HALF" --stock 4 --pay-within 600 >/dev/null
run ctl item pause --id "$HALF"
is "item pause: exit 0, seckill_reserve answers -10, nothing reserved" \
    "$rc $(reserve "$HALF" 7) $(rcli GET "$k:stock")" "0 -10 4"
is "item show says paused (database) and PAUSED (Redis); reconcile finds they agree" \
    "$(ctl item show "$HALF" | grep -c 'refused 0, paused$\|PAUSED') $(ctl reconcile --item "$HALF" >/dev/null; echo $?)" \
    "2 0"
rcli HDEL "$k:window" paused >/dev/null
run ctl reconcile --item "$HALF" --fix
is "a pause Redis lost: reconcile says so and --fix restores it" \
    "$(grep -c 'paused in the database' "$T/out") $(rcli HGET "$k:window" paused) $(tail -n 1 "$T/out")" \
    "1 1 1 items checked, 0 mismatches"
rcli HSET "$k:window" ends_ms 1 queue_opens_ms 5 >/dev/null
run ctl reconcile --item "$HALF" --fix
is "a window Redis got wrong: --fix sets it anew, the pause and the payment window kept" \
    "$(rcli HGETALL "$k:window" | paste -sd' ' | tr ' ' '\n' | paste -d= - - | sort | paste -sd' ')" \
    "paused=1 pay_within_s=600"
run ctl item resume --id "$HALF"
is "item resume: exit 0, a buyer reserves again" "$rc $(reserve "$HALF" 7) $(rcli GET "$k:stock")" "0 1 3"
run ctl item pause --id $((ITEM + 9))
is "item pause of an item not in the database: exit 1, says so" \
    "$rc $(grep -c 'not in the database' "$T/err")" "1 1"

[ "$failed" -eq 0 ]
