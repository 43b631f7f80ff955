#!/usr/bin/env bash
# tests/cli/test_watch.sh BUILD_DIR: seckillctl watch against a running sale.
# What it prints must agree with Redis (stock, buyers, pending), PostgreSQL
# (persisted, refused), Kafka's own view of the group's committed offsets
# (lag per partition) and the daemons' /healthz; its rates must be the
# changes between its lines; on a terminal it redraws a table; and it sends
# Redis nothing but reads. Own items, topic, group and key prefix, removed at
# the end. An item with a waiting room: watch shows its room as `seckillctl
# queue status` and Redis hold it (waiting, pre-queue, serving number,
# admissions outstanding, rate, admitted and abandoned a second, paused).
# Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_watch.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
TAG=watch$$
PREFIX=sktest-$TAG
TOPIC=sktest.watch.$$
GROUP=sktest-$TAG
ITEM=$((940000000000 + $$ * 2))
ITEM2=$((ITEM + 1))
ITEM3=$((ITEM + 2))   # its orders after the sale written straight into PostgreSQL
ITEMQ=$((960000000000 + $$))   # with a waiting room (issue #58)
STOCK=10
STOCK2=6
BUYERS=30
REDIS=(scripts/stack redis-cli)   # as the stack's own Redis user (MONITOR, fixtures)
export PGPASSFILE=${SECKILL_STACK_DIR:-$ROOT/.stack}/pgpass
PSQL=(psql -X -q -t -A -h 127.0.0.1 -p 15432 -U admin -d seckill)
prod_pid= cons_pid= mon_pid=

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

stop() { [ -n "$1" ] && kill -TERM "$1" 2>/dev/null && wait "$1" 2>/dev/null; }
cleanup() {
    stop "$prod_pid"; stop "$cons_pid"
    [ -n "$mon_pid" ] && kill "$mon_pid" 2>/dev/null
    "${REDIS[@]}" --scan --pattern "$PREFIX:*" | xargs -r "${REDIS[@]}" del >/dev/null
    "${PSQL[@]}" -c "DELETE FROM late_payments WHERE ref = '$TAG'" >/dev/null 2>&1
    "${PSQL[@]}" -c "DELETE FROM order_returns WHERE item_id IN ($ITEM, $ITEM2, $ITEM3, $ITEMQ);
                     DELETE FROM orders WHERE item_id IN ($ITEM, $ITEM2, $ITEM3, $ITEMQ);
                     DELETE FROM order_rejections WHERE item_id IN ($ITEM, $ITEM2, $ITEM3, $ITEMQ);
                     DELETE FROM items WHERE item_id IN ($ITEM, $ITEM2, $ITEM3, $ITEMQ)" >/dev/null 2>&1
    scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

# field LINE KEY [NTH]: the value of the NTH (1st) KEY=value pair of a line.
field() {
    printf '%s\n' "$1" | tr ' ' '\n' | awk -F= -v k="$2" -v n="${3:-1}" '$1 == k && ++seen == n { print substr($0, length(k) + 2); exit }'
}
# item_field LINE ITEM KEY: KEY of that item's group on the line.
item_field() {
    printf '%s\n' "$1" | tr ' ' '\n' |
        awk -F= -v id="$2" -v k="$3" '$1 == "item" { cur = $2 } cur == id && $1 == k { print $2; exit }'
}
buy() { # buy ITEM USER: the HTTP status
    curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"user_id\": $2, \"item_id\": $1}" "http://127.0.0.1:$PPORT/api/v1/seckill"
}
persisted_is() { [ "$("${PSQL[@]}" -c "SELECT count(*) FROM orders WHERE item_id = $1")" = "$2" ]; }
WATCH=("$BUILD/seckillctl" -c "$T/seckill.cfg" watch)

echo "1..35"

scripts/stack up >"$T/stack.log" 2>&1 || { echo "Bail out! scripts/stack up failed: $(tail -n 3 "$T/stack.log")"; exit 1; }
scripts/stack topic create "$TOPIC" >/dev/null 2>&1 || { echo "Bail out! cannot create topic $TOPIC"; exit 1; }
read -r PPORT OPORT CPORT < <(free_ports 3)
sed -e "s/key_prefix = \"seckill\"/key_prefix = \"$PREFIX\"/" \
    -e "s/topic = \"seckill.orders\";/topic = \"$TOPIC\";/" \
    -e "s/^  port = 8080;/  port = $PPORT;/" \
    -e "s/metrics_port = 9099;/metrics_port = $OPORT;/" \
    -e "s/metrics_port = 9101;/metrics_port = $CPORT;/" \
    -e "s/group_id = \"seckill-consumer\";/group_id = \"$GROUP\";/" \
    -e "s|\"\.\./\.stack/|\"${SECKILL_STACK_DIR:-$ROOT/.stack}/|" \
    -e "s|key_dir = \"dev-keys\";|key_dir = \"$ROOT/config/dev-keys\";|" config/seckill.cfg >"$T/seckill.cfg"
for i in "$ITEM:$STOCK" "$ITEM2:$STOCK2"; do
    "$BUILD/seckillctl" -c "$T/seckill.cfg" item create --id "${i%:*}" --stock "${i#*:}" --name watch >/dev/null 2>"$T/item.err" ||
        { echo "Bail out! item create: $(cat "$T/item.err")"; exit 1; }
done
"$BUILD/seckill-producer" -c "$T/seckill.cfg" 2>"$T/producer.log" & prod_pid=$!
"$BUILD/seckill-consumer" -c "$T/seckill.cfg" 2>"$T/consumer.log" & cons_pid=$!
until_ok 60 curl -sf -o /dev/null "http://127.0.0.1:$PPORT/healthz" || { echo "Bail out! producer not healthy: $(tail -n 3 "$T/producer.log")"; exit 1; }
until_ok 60 curl -sf -o /dev/null "http://127.0.0.1:$CPORT/healthz" || { echo "Bail out! consumer not healthy: $(tail -n 3 "$T/consumer.log")"; exit 1; }

# --- a sale of ITEM, every accepted order persisted, both daemons up ---------
accepted=0
for u in $(seq 1 $BUYERS); do [ "$(buy "$ITEM" $((ITEM % 100000 * 100 + u)))" = 202 ] && accepted=$((accepted + 1)); done
is "the buyers got exactly the stock accepted" "$accepted" "$STOCK"
if until_ok 60 persisted_is "$ITEM" "$accepted"; then pass "the consumer persisted the sale"
else fail "the consumer persisted the sale" "$(tail -n 5 "$T/consumer.log")"; fi

run "${WATCH[@]}" --count 1 --item "$ITEM" --item "$ITEM2"
line=$(tail -n 1 "$T/out")
if [ "$rc" = 0 ] && [ "$(wc -l <"$T/out")" = 1 ]; then pass "watch --count 1, not on a terminal: exactly one line"
else fail "watch --count 1: one line" "$(run_diag)"; fi
is "both daemons up (their /healthz)" "$(field "$line" producers_up) $(field "$line" consumers_up)" "1/1 1/1"
is "stock = Redis's stock key" "$(item_field "$line" "$ITEM" stock)" "$("${REDIS[@]}" get "$PREFIX:{item:$ITEM}:stock")"
is "accepted = Redis's buyers = what the buyers were told" \
    "$(item_field "$line" "$ITEM" accepted) $("${REDIS[@]}" scard "$PREFIX:{item:$ITEM}:buyers")" "$accepted $accepted"
is "pending = Redis's pending orders (none left)" "$(item_field "$line" "$ITEM" pending)" \
    "$("${REDIS[@]}" hlen "$PREFIX:{item:$ITEM}:pending")"
is "persisted and refused = PostgreSQL's rows" \
    "$(item_field "$line" "$ITEM" persisted) $(item_field "$line" "$ITEM" refused)" \
    "$("${PSQL[@]}" -c "SELECT (SELECT count(*) FROM orders WHERE item_id = $ITEM) || ' ' ||
                              (SELECT count(*) FROM order_rejections WHERE item_id = $ITEM)")"

# --- the consumer stopped: orders for ITEM2 wait on the topic ------------------
stop "$cons_pid"; cons_pid=
# Rates: watch runs while buyers of ITEM2 arrive; each line's rate must be
# the change in its counts since the line before, per second of its clock.
"${WATCH[@]}" --count 4 --interval 500 --item "$ITEM2" >"$T/rates" 2>"$T/rates.err" & wpid=$!
until_ok 30 test -s "$T/rates"
accepted2=0
for u in $(seq 1 $STOCK2); do [ "$(buy "$ITEM2" $((ITEM2 % 100000 * 100 + u)))" = 202 ] && accepted2=$((accepted2 + 1)); done
wait "$wpid"
is "four lines, one per refresh" "$(wc -l <"$T/rates")" 4
bad=$(awk '
    function v(k,   i, a) { for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) return a[2] } return "" }
    function ms(ts,   a) { split(substr(ts, 12, 12), a, "[:.]"); return ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4] }
    { t = ms(v("ts")); acc = v("accepted"); r = v("accepted_per_s")
      if (NR > 1) {
          want = (acc - pacc) * 1000 / (t - pt)
          d = r - want; if (d < 0) d = -d
          # the line stamps its wall clock, the rate uses the monotonic one
          if (d > 0.15 * (want < 0 ? -want : want) + 0.5) printf "line %d: accepted_per_s %s, counts say %.1f; ", NR, r, want
      } else if (r != "-") printf "line 1 has a rate (%s) with nothing before it; ", r
      pt = t; pacc = acc }' "$T/rates")
is "each rate is the change since the line before" "$bad" ""
first=$(head -n 1 "$T/rates") last=$(tail -n 1 "$T/rates")
is "the lines saw the $STOCK2 new orders arrive" \
    "$(( $(field "$last" accepted) - $(field "$first" accepted) ))" "$accepted2"

run "${WATCH[@]}" --count 1 --item "$ITEM2"
line=$(tail -n 1 "$T/out")
is "the stopped consumer is down, the producer up" "$(field "$line" producers_up) $(field "$line" consumers_up)" "1/1 0/1"
is "ITEM2: accepted and pending = Redis, persisted 0" \
    "$(item_field "$line" "$ITEM2" accepted) $(item_field "$line" "$ITEM2" pending) $(item_field "$line" "$ITEM2" persisted)" \
    "$("${REDIS[@]}" scard "$PREFIX:{item:$ITEM2}:buyers") $("${REDIS[@]}" hlen "$PREFIX:{item:$ITEM2}:pending") 0"
# Kafka's own tool: committed offset and lag per partition. A partition the
# group never committed on is all lag (the topic is new: from offset 0).
scripts/stack group describe "$GROUP" >"$T/group" 2>&1
want=$(for p in 0 1 2 3 4 5; do
    awk -v t="$TOPIC" -v p=$p '$2 == t && $3 == p { print ($6 == "-" ? $5 : $6); found = 1 } END { if (!found) print "?" }' "$T/group"
done | paste -sd, -)
if [ "${want#*\?}" != "$want" ]; then   # partitions the tool did not list: their end offsets
    want=$(for p in 0 1 2 3 4 5; do
        l=$(awk -v t="$TOPIC" -v p=$p '$2 == t && $3 == p { print ($6 == "-" ? $5 : $6) }' "$T/group")
        [ -n "$l" ] && echo "$l" || scripts/stack kcat admin -Q -t "$TOPIC:$p:-1" 2>/dev/null | awk '{ print $NF }'
    done | paste -sd, -)
fi
is "lag per partition = Kafka's ConsumerGroupCommand" "$(field "$line" lag_partitions)" "$want"
is "total lag = the unconsumed orders" "$(field "$line" lag)" "$accepted2"

# --- after the sale: ITEM3's orders in every state -------------------------------
# 2 waiting for their payment, 1 paid, 2 expired (one unit back in Redis, one
# waiting), 1 cancelled (back), and a payment that came after an expiry.
"$BUILD/seckillctl" -c "$T/seckill.cfg" item create --id "$ITEM3" --stock 8 --pay-within 60 --name watch >/dev/null 2>&1
"${PSQL[@]}" -c "INSERT INTO orders (order_id, user_id, item_id, reserved_at, fence, status, pay_by, status_changed_at)
     SELECT $ITEM3 * 10 + g, 9000 + g, $ITEM3, now(), 1, s, now() + interval '60 seconds',
            CASE WHEN s = 'pending_payment' THEN NULL ELSE now() END
       FROM unnest(ARRAY['pending_payment', 'pending_payment', 'paid', 'expired', 'expired', 'cancelled'])
            WITH ORDINALITY AS t (s, g);
     INSERT INTO order_returns (order_id, item_id, user_id, reason, done_at, next_try_at)
     VALUES ($ITEM3 * 10 + 4, $ITEM3, 9004, 'expired', now(), now()),
            ($ITEM3 * 10 + 5, $ITEM3, 9005, 'expired', NULL, now() + interval '1 hour'),
            ($ITEM3 * 10 + 6, $ITEM3, 9006, 'cancelled', now(), now())" >/dev/null
late=0
if [ "$("${PSQL[@]}" -c "SELECT to_regclass('late_payments') IS NOT NULL")" = t ]; then
    "${PSQL[@]}" -c "INSERT INTO late_payments (order_id, user_id, paid_at, ref, status_then)
                     VALUES ($ITEM3 * 10 + 4, 9004, now(), '$TAG', 'expired')" >/dev/null && late=1
fi
run "${WATCH[@]}" --count 1 --item "$ITEM3"
line=$(tail -n 1 "$T/out")
got=""
for k in pending_payment paid expired cancelled returned returns_waiting late_payments; do
    got="$got $k=$(item_field "$line" "$ITEM3" "$k")"
done
is "after the sale: pending payment, paid, expired, cancelled, returned, waiting, late payments = PostgreSQL" \
    "$got" " pending_payment=2 paid=1 expired=2 cancelled=1 returned=2 returns_waiting=1 late_payments=$late"
is "after the sale: the pairs come after the item's earlier ones (persisted counts every order)" \
    "$(item_field "$line" "$ITEM3" persisted)" 6

# --- a waiting room: watch says what queue status and Redis say ----------------
# 6 buyers join before the opening, the room is paused, 2 join after it;
# then it is resumed while watch runs: 6 admitted (5 units, 10 % margin).
QKEY="$PREFIX:{item:$ITEMQ}:queue"
QCTL=("$BUILD/seckillctl" -c "$T/seckill.cfg" queue)
join() { curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Length: 0' \
    "http://127.0.0.1:$PPORT/api/v1/queue/$ITEMQ?user_id=$1"; }
qfield_is() { [ "$("${REDIS[@]}" hget "$QKEY" "$1")" = "$2" ]; }
now=$(date +%s%3N)
"$BUILD/seckillctl" -c "$T/seckill.cfg" item create --id "$ITEMQ" --stock 5 --name watch \
    --starts-at $((now + 3000)) --queue-opens-at $((now - 1000)) >/dev/null 2>"$T/item.err" ||
    { echo "Bail out! item create --queue-opens-at: $(cat "$T/item.err")"; exit 1; }
"${QCTL[@]}" pause --item "$ITEMQ" >/dev/null
joined=""
for u in 1 2 3 4 5 6; do joined="$joined$(join $((ITEMQ % 100000 * 100 + u)))"; done
run "${WATCH[@]}" --count 1 --item "$ITEMQ"
line=$(tail -n 1 "$T/out")
is "before the opening: 6 joined, watch shows them in the pre-queue, none in the line, paused" \
    "$joined $(item_field "$line" "$ITEMQ" queue_prequeue) $(item_field "$line" "$ITEMQ" queue_waiting) $(item_field "$line" "$ITEMQ" queue_paused)" \
    "200200200200200200 6 0 1"
if until_ok 15 qfield_is shuffled 1; then pass "the room opened (the pre-queue shuffled into the line)"
else fail "the room opened" "$("${QCTL[@]}" status --item "$ITEMQ" 2>&1)"; fi
for u in 7 8; do join $((ITEMQ % 100000 * 100 + u)) >/dev/null; done
until_ok 10 qfield_is waiting 8
run "${WATCH[@]}" --count 1 --item "$ITEMQ"
line=$(tail -n 1 "$T/out")
got=""
for k in queue_waiting queue_prequeue queue_serving queue_admissions_outstanding queue_paused; do
    got="$got $k=$(item_field "$line" "$ITEMQ" "$k")"
done
is "paused after the opening: waiting, pre-queue, serving, outstanding, paused = Redis's" "$got" \
    " queue_waiting=$("${REDIS[@]}" hget "$QKEY" waiting) queue_prequeue=$("${REDIS[@]}" scard "$QKEY:pre") queue_serving=0 queue_admissions_outstanding=$("${REDIS[@]}" zcard "$QKEY:adm") queue_paused=1"
is "... which are 8 waiting, nobody called" "$(item_field "$line" "$ITEMQ" queue_waiting) $(item_field "$line" "$ITEMQ" queue_admissions_outstanding)" "8 0"
# resumed while watch runs: the line after it saw the 6 admissions, at the
# rate its counts say
"${WATCH[@]}" --count 3 --interval 1000 --item "$ITEMQ" >"$T/qrates" 2>"$T/qrates.err" & wpid=$!
until_ok 30 test -s "$T/qrates"
"${QCTL[@]}" resume --item "$ITEMQ" >/dev/null
wait "$wpid"
bad=$(awk '
    function v(k,   i, a) { for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) return a[2] } return "" }
    function ms(ts,   a) { split(substr(ts, 12, 12), a, "[:.]"); return ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4] }
    { t = ms(v("ts")); sv = v("queue_serving"); r = v("queue_admitted_per_s"); ab = v("queue_abandoned_per_s")
      if (NR > 1) {
          want = (sv - psv) * 1000 / (t - pt)
          d = r - want; if (d < 0) d = -d
          if (d > 0.15 * want + 0.5) printf "line %d: queue_admitted_per_s %s, serving says %.1f; ", NR, r, want
          if (ab != "0.0") printf "line %d: queue_abandoned_per_s %s (all of them asked lately); ", NR, ab
      } else if (r != "-") printf "line 1 has a rate (%s) with nothing before it; ", r
      pt = t; psv = sv }' "$T/qrates")
is "admitted/s and abandoned/s are the changes since the line before" "$bad" ""
last=$(tail -n 1 "$T/qrates")
is "resumed: 6 admitted (5 units + 10 %), 2 waiting, not paused" \
    "$(item_field "$last" "$ITEMQ" queue_serving) $(item_field "$last" "$ITEMQ" queue_admissions_outstanding) $(item_field "$last" "$ITEMQ" queue_waiting) $(item_field "$last" "$ITEMQ" queue_paused)" \
    "6 6 2 0"
is "... as Redis holds it" "$(item_field "$last" "$ITEMQ" queue_serving) $(item_field "$last" "$ITEMQ" queue_admissions_outstanding)" \
    "$("${REDIS[@]}" hget "$QKEY" serving) $("${REDIS[@]}" zcard "$QKEY:adm")"
rate=$(item_field "$last" "$ITEMQ" queue_rate_per_s)
want=$("${REDIS[@]}" hget "$QKEY" rate_milli)
if awk -v r="$rate" -v m="$want" 'BEGIN { d = r - m / 1000; exit !(r != "" && d < 0.05 + m / 1000 * 0.5 && -d < 0.05 + m / 1000 * 0.5) }'; then
    pass "queue_rate_per_s is the measured rate the steps store ($rate/s, Redis ${want}/1000)"
else fail "queue_rate_per_s is the measured rate" "watch: $rate, rate_milli: $want"; fi
run "${QCTL[@]}" status --item "$ITEMQ"
if [ "$rc" = 0 ] && grep -q "line         8 places, serving 6 (admitted 6, passed over 0), waiting 2" "$T/out" &&
   grep -q "admissions   outstanding 6, spent 0" "$T/out" && grep -q "stock        5, pending 0" "$T/out" &&
   grep -q "; admitting" "$T/out"; then pass "queue status says the same, from the same reader"
else fail "queue status says the same" "$(run_diag)"; fi
run "${WATCH[@]}" --count 1 --item "$ITEM" --item "$ITEMQ"
line=$(tail -n 1 "$T/out")
is "an item without a room has no queue pairs, beside one that has" \
    "$(item_field "$line" "$ITEM" queue_waiting)/$(item_field "$line" "$ITEMQ" queue_waiting)" "/2"


stop "$prod_pid"; prod_pid=
"${REDIS[@]}" monitor >"$T/monitor" 2>&1 & mon_pid=$!
until_ok 10 grep -q OK "$T/monitor"
run "${WATCH[@]}" --count 2 --interval 200
"${REDIS[@]}" ping >/dev/null   # a last command, so MONITOR has shown everything before it
until_ok 10 grep -q '"ping"' "$T/monitor"
kill "$mon_pid"; mon_pid=
cmds=$(grep -o '\] "[a-zA-Z]*"' "$T/monitor" | tr -d '"]' | tr a-z A-Z | sort -u | tr -d ' ' | paste -sd' ' -)
writes=$(printf '%s\n' $cmds | grep -vxE 'GET|HGET|HLEN|SCARD|SMEMBERS|HGETALL|ZCARD|PING|ROLE|AUTH|SELECT|CLIENT|INFO' | paste -sd' ' -)
if [ "$rc" = 0 ] && [ -n "$cmds" ]; then pass "watch ran with both daemons gone (commands seen: $cmds)"
else fail "watch with the daemons gone" "$(run_diag)" "monitor saw: $cmds"; fi
is "watch sends Redis only reads" "$writes" ""
is "... the waiting room's among them (HGETALL, ZCARD)" "$(printf '%s\n' $cmds | grep -cxE 'HGETALL|ZCARD')" 2
is "no daemon up, and said so" "$(field "$(tail -n 1 "$T/out")" producers_up) $(field "$(tail -n 1 "$T/out")" consumers_up)" "0/1 0/1"

# --- on a terminal: a table redrawn in place -------------------------------------
script -qec "$(printf '%q ' "${WATCH[@]}" --count 2 --interval 200 --item "$ITEM" --item "$ITEM2" --item "$ITEM3" --item "$ITEMQ")" /dev/null >"$T/tty" 2>&1
clears=$(grep -o $'\033\[H\033\[2J' "$T/tty" | wc -l)
is "on a terminal: the screen is redrawn once per refresh" "$clears" 2
if grep -q 'ITEM .*STOCK .*ACCEPTED .*PENDING .*PERSISTED .*REFUSED' "$T/tty" &&
   grep -qE "^$ITEM +[0-9]+ +$STOCK +0 +$STOCK +0 " <(tr -d '\r' <"$T/tty") &&
   grep -q "PARTITION .*END .*COMMITTED .*LAG" "$T/tty"; then
    pass "on a terminal: the item table and the partition table"
else fail "on a terminal: the tables" "$(tr -d '\r' <"$T/tty" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | tail -n 20)"; fi
if grep -q 'AFTER SALE .*TO PAY .*PAID .*EXPIRED .*CANCELLED .*RETURNED .*RET-WAIT .*LATE-PAID' "$T/tty" &&
   grep -qE "^$ITEM3 +2 +1 +2 +1 +2 +1 +$late\$" <(tr -d '\r' <"$T/tty"); then
    pass "on a terminal: the table after the sale"
else fail "on a terminal: the table after the sale" "$(tr -d '\r' <"$T/tty" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | tail -n 20)"; fi
if grep -q 'WAITING ROOM .*WAITING .*PRE-QUEUE .*SERVING .*ADM-OUT .*RATE/s .*ADMIT/s .*ABANDON/s .*PAUSED' "$T/tty" &&
   grep -qE "^$ITEMQ +2 +0 +6 +6 +[0-9.]+ +[-0-9.]+ +[-0-9.]+ +no\$" <(tr -d '\r' <"$T/tty") &&
   ! grep -qE "^$ITEM +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[-0-9.]+ +[-0-9.]+ +[-0-9.]+ +(yes|no)\$" <(tr -d '\r' <"$T/tty"); then
    pass "on a terminal: the waiting room's table, the room's item only"
else fail "on a terminal: the waiting room's table" "$(tr -d '\r' <"$T/tty" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | tail -n 24)"; fi
exit $((failed > 0))
