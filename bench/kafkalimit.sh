#!/usr/bin/env bash
# bench/kafkalimit.sh: Kafka's own idempotent acks=all produce limit for our
# orders (build/bench/kafkalimit) on a fresh topic with seckill.orders'
# partitions, deleted at the end: the bench's messages never reach a
# consumer group that reads seckill.orders. Prints "key value" lines.
#   BENCH_SECONDS (10): the length of each of its runs
#   bench/kafkalimit.sh [INFLIGHT...]: other bounds on messages in flight
#   than the two default runs (build/bench/kafkalimit says which)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SECS=${BENCH_SECONDS:-10}
TOPIC=bench.kafkalimit.$$-$RANDOM
# The orders topic's partition count, so the limit is for the same spread
# (scripts/stack makes it with 6; asked, not assumed).
PARTS=$(scripts/stack kcat admin -L -t seckill.orders -m 3 -q 2>/dev/null |
    sed -nE 's/.*topic "seckill.orders" with ([0-9]+) partitions.*/\1/p' | head -1)
PARTS=${PARTS:-6}
cleanup() { scripts/stack topic delete "$TOPIC" >/dev/null 2>&1 || true; }
trap cleanup EXIT
scripts/stack topic create "$TOPIC" "$PARTS" >/dev/null
echo "kafka_limit_partitions $PARTS"
# The broker's CPU per message at the limit: the floor the whole sale's
# broker is measured against (bench/wholesale).
CPU_T=$(mktemp -d)
. bench/cpu.sh
broker=$(cat "${SECKILL_STACK_DIR:-$ROOT/.stack}/kafka/kafka.pid")
cpu0=$(proc_cpu_us "$broker")
build/bench/kafkalimit config/seckill.cfg "$TOPIC" "$SECS" "$@" | tee "$CPU_T/out"
cpu1=$(proc_cpu_us "$broker")
awk -v u=$((cpu1 - cpu0)) '$1 ~ /_sent$/ {n += $2} END {printf "kafka_limit_broker_cpu_us_per_msg %.2f\n", n ? u / n : 0}' "$CPU_T/out"
rm -rf "$CPU_T"
