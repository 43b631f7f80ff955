#!/usr/bin/env bash
# tests/cli/test_nemesis_cluster.sh BUILD_DIR: the nemesis (issue #32) on
# the stack's Redis Cluster with every item in three buckets (issue #57):
# scripts/nemesis --cluster --buckets 3, seed 1 for 60 s, whose schedule
# strikes the Cluster's primaries three ways (a split brain: a primary and
# the producer cut from every other node; a primary killed, back as a
# replica; a primary paused past its failover) beside a clock skew and one
# way loss, against the release build (as tests/cli/test_nemesis.sh: the
# clock faults preload libfaketime, which ASan refuses to follow). Checks
# that the run completed with nothing broken (lost, duplicated, oversold,
# returned twice, not returned 0; every slot's stock against stock_left;
# reconcile clean), that the buckets sat on three primaries, that those
# faults ran, and that nothing it made is left.
# Speaks TAP. Needs root. About 4 minutes here. (BUILD_DIR is unused.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
export SECKILL_HOSTS_STATE=$T/hosts
PFX=${SECKILL_HOSTS_PREFIX:-sknemesis}
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"
# shellcheck source=../nemesis/checks.sh
. "$(dirname "${BASH_SOURCE[0]}")/../nemesis/checks.sh"

# Seed 1 draws, in 60 s on the Cluster: clocks, loss on the split brain's
# link, the split brain, a primary killed, a primary paused (the order the
# seed gives; which primary is the Cluster's then).
SEED=1

echo "1..7"

nemesis_run "seed $SEED, 60 s, the Cluster, three buckets" --seed $SEED --seconds 60 --buckets 3 --cluster
nemesis_summary '.*'

is "the stack ran the Cluster in hosts of its own, the first item's three buckets on three primaries" \
    "$(grep -c 'scripts/stack up --ha --brokers 3 --cluster in them' "$T/out") $(grep -c 'item 910001: buckets 3 (salts [0-9,]*), on 3 of 3 primaries' "$T/out")" \
    "1 1"

is "the Cluster's primaries were struck: split brain, kill, pause" \
    "$(grep -c '] partition redis-split-brain: cut rc[1-6] prod | ' "$T/out") $(grep -c '] kill rcluster-[1-6] (scripts/stack kill)' "$T/out") $(grep -c '] pause redis-primary' "$T/out")" \
    "1 1 1"

# Every item's Redis stock (the sum over its slots) is its stock_left.
is "every item's slots hold its stock_left, and some units were sold back after returns" \
    "$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["per_item"]
print(all(v["redis"] == v["stock_left"] for v in r.values()), any(v["orders"] > v["stock"] for v in r.values()))' \
        "$T/nemesis.json" 2>&1)" "True True"

nemesis_nothing_left

[ "$failed" -eq 0 ]
