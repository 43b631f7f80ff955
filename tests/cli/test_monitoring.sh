#!/usr/bin/env bash
# tests/cli/test_monitoring.sh BUILD_DIR: a short sale with a real
# Prometheus watching (scripts/stack up --monitoring). Both daemons are
# scraped as targets of their jobs, Prometheus says they are up, and a query
# of accepted orders matches what the buyers were told, as does the
# consumer's persisted count. Own item, topic, group and key prefix, removed
# at the end. Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_monitoring.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
# psql and pgbench log in as admin with the password the stack generated
export PGPASSFILE=${SECKILL_STACK_DIR:-$ROOT/.stack}/pgpass
STATE=${SECKILL_STACK_DIR:-$ROOT/.stack}
PROM=http://127.0.0.1:19090
T=$(mktemp -d)
TAG=mon$$
PREFIX=sktest-$TAG
TOPIC=sktest.monitoring.$$
ITEM=$((930000000000 + $$))
STOCK=10
BUYERS=30
prod_pid= cons_pid=

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

cleanup() {
    [ -n "$prod_pid" ] && kill -TERM "$prod_pid" 2>/dev/null && wait "$prod_pid" 2>/dev/null
    [ -n "$cons_pid" ] && kill -TERM "$cons_pid" 2>/dev/null && wait "$cons_pid" 2>/dev/null
    rm -f "$STATE/prometheus/targets/producer-$TAG.json" "$STATE/prometheus/targets/consumer-$TAG.json"
    scripts/stack redis-cli --scan --pattern "$PREFIX:*" | xargs -r scripts/stack redis-cli del >/dev/null
    psql -X -q -h 127.0.0.1 -p 15432 -U admin -d seckill \
        -c "DELETE FROM orders WHERE item_id = $ITEM; DELETE FROM items WHERE item_id = $ITEM" >/dev/null 2>&1
    scripts/stack topic delete "$TOPIC" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

# The value of a PromQL query's first sample ("" if none).
prom_value() {
    curl -sf --data-urlencode "query=$1" "$PROM/api/v1/query" |
        jq -r '.data.result[0].value[1] // empty' 2>/dev/null
}
target_up() {
    curl -sf "$PROM/api/v1/targets" |
        jq -e --arg i "$2" --arg j "$1" '.data.activeTargets[] | select(.labels.job == $j and .labels.instance == $i and .health == "up")' >/dev/null
}
query_is() { [ "$(prom_value "$1")" = "$2" ]; }

echo "1..5"

if ! scripts/stack up --monitoring >"$T/stack.log" 2>&1; then
    echo "Bail out! scripts/stack up --monitoring failed: $(tail -n 5 "$T/stack.log" | tr '\n' ' ')"
    exit 1
fi
command -v jq >/dev/null || { echo "Bail out! jq is missing"; exit 1; }
scripts/stack topic create "$TOPIC" >/dev/null 2>&1 || { echo "Bail out! cannot create topic $TOPIC"; exit 1; }

read -r PPORT OPORT CPORT < <(free_ports 3)
sed -e "s/key_prefix = \"seckill\"/key_prefix = \"$PREFIX\"/" \
    -e "s/topic = \"seckill.orders\";/topic = \"$TOPIC\";/" \
    -e "s/^  port = 8080;/  port = $PPORT;/" \
    -e "s/metrics_port = 9099;/metrics_port = $OPORT;/" \
    -e "s/metrics_port = 9101;/metrics_port = $CPORT;/" \
    -e "s/group_id = \"seckill-consumer\";/group_id = \"sktest-$TAG\";/" \
    -e "s|\"\.\./\.stack/|\"${SECKILL_STACK_DIR:-$ROOT/.stack}/|" -e "s|key_dir = \"dev-keys\";|key_dir = \"$ROOT/config/dev-keys\";|" config/seckill.cfg >"$T/seckill.cfg"
"$BUILD/seckillctl" -c "$T/seckill.cfg" item create --id "$ITEM" --stock "$STOCK" --name monitoring >/dev/null 2>"$T/item.err" ||
    { echo "Bail out! item create: $(cat "$T/item.err")"; exit 1; }
"$BUILD/seckill-producer" -c "$T/seckill.cfg" 2>"$T/producer.log" &
prod_pid=$!
"$BUILD/seckill-consumer" -c "$T/seckill.cfg" 2>"$T/consumer.log" &
cons_pid=$!
# The producer is scraped on its operator listener, not the buyers' port.
echo "[{\"targets\": [\"127.0.0.1:$OPORT\"]}]" >"$STATE/prometheus/targets/producer-$TAG.json"
echo "[{\"targets\": [\"127.0.0.1:$CPORT\"]}]" >"$STATE/prometheus/targets/consumer-$TAG.json"
until_ok 60 curl -sf -o /dev/null "http://127.0.0.1:$PPORT/healthz" || { echo "Bail out! producer not healthy: $(tail -n 3 "$T/producer.log")"; exit 1; }

if until_ok 30 target_up seckill-producer "127.0.0.1:$OPORT"; then pass "Prometheus scrapes the producer (job seckill-producer, up)"
else fail "Prometheus scrapes the producer" "$(curl -s "$PROM/api/v1/targets" | head -c 800)"; fi
if until_ok 60 target_up seckill-consumer "127.0.0.1:$CPORT"; then pass "Prometheus scrapes the consumer (job seckill-consumer, up)"
else fail "Prometheus scrapes the consumer" "$(curl -s "$PROM/api/v1/targets" | head -c 800)" "$(tail -n 5 "$T/consumer.log")"; fi

accepted=0
for u in $(seq 1 $BUYERS); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"user_id\": $((ITEM % 1000000 * 100 + u)), \"item_id\": $ITEM}" "http://127.0.0.1:$PPORT/api/v1/seckill")
    [ "$code" = 202 ] && accepted=$((accepted + 1))
done
is "the buyers got exactly the stock accepted" "$accepted" "$STOCK"

q="sum(seckill_producer_requests_total{job=\"seckill-producer\", instance=\"127.0.0.1:$OPORT\", outcome=\"accepted\"})"
if until_ok 30 query_is "$q" "$accepted"; then pass "Prometheus: accepted orders = $accepted"
else fail "Prometheus: accepted orders" "query: $q" "got: '$(prom_value "$q")', want: '$accepted'"; fi
q="sum(seckill_consumer_persisted_total{job=\"seckill-consumer\", instance=\"127.0.0.1:$CPORT\"})"
if until_ok 60 query_is "$q" "$accepted"; then pass "Prometheus: persisted orders = $accepted"
else fail "Prometheus: persisted orders" "query: $q" "got: '$(prom_value "$q")', want: '$accepted'" "$(tail -n 5 "$T/consumer.log")"; fi
exit $((failed > 0))
