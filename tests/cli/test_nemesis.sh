#!/usr/bin/env bash
# tests/cli/test_nemesis.sh BUILD_DIR: the nemesis (issue #32) on a short
# fixed schedule: seed 32, 60 s, every kind of fault at least once, against
# the release build (build/, which make test builds too: the clock faults
# preload libfaketime, which ASan refuses to follow). Checks that the run
# completed with nothing broken, the summary line, build/nemesis.json (every
# kind of fault; payments, cancels and expiries all happened, with the
# nemesis' default 4 s payment window), and that nothing it made is left:
# no namespace, no rule file, no engine.
# Speaks TAP. Needs root. About 4 to 6 minutes here, most of it the HA stack's start
# in the hosts. (BUILD_DIR is unused.)
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

# Seed 32 draws every kind of fault in 60 s. The seed that found bugs while
# the nemesis was built, 1107403330, needs 300 s, too long for make test: its
# regression tests are tests/cli/test_sweep_wait.sh, test_consumer's
# test_settle_waits_for_replicas and test_uncleared_offset_waits
# (docs/testing.md, "What the nemesis found"); make nemesis SEED=1107403330
# SECONDS=300 runs it again.
SEED=32

echo "1..8"

nemesis_run "seed $SEED, 60 s" --seed $SEED --seconds 60
nemesis_summary 'partitions [0-9]+, netem [0-9]+, pauses [0-9]+, clocks [0-9]+, kills [0-9]+'

kinds=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join(k for k, v in sorted(r["faults"].items()) if v >= 1), r["accepted"] > 0 and r["persisted"] >= r["accepted"])' \
    "$T/nemesis.json" 2>&1)
is "every kind of fault ran, and buyers were accepted and persisted" "$kinds" "clocks kills netem partitions pauses True"

# After the sale: each of its ways happened, so the zeros of the line were
# counted over something, and a unit given back was bought again (an item
# with more orders than stock).
after=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["payments"] > 0, r["paid"] > 0, r["cancels"] > 0, r["cancelled"] > 0, r["expired"] > 0,
      any(v["orders"] > v["stock"] for v in r["per_item"].values()))' "$T/nemesis.json" 2>&1)
is "payments paid, cancels applied, orders expired, and returned units sold again" "$after" \
    "True True True True True True"

# Issue #55, item 7: mid-run, both topics replayed and a burst of payments for unknown ids.
replays=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
k = {e["kind"]: e for e in r["schedule"]}
print(r["burst"], k.get("replays", {}).get("orders_replay_exit"), k.get("replays", {}).get("payments_replayed", 0) > 0)' \
    "$T/nemesis.json" 2>&1)
is "the orders topic replayed (exit 0), the payments published again, the burst sent" "$replays" "True 0 True"

is "the schedule was printed as it went (a line per fault, a heal after each)" \
    "$([ "$(grep -c '] heal (' "$T/out")" -ge 5 ] && grep -q '] partition ' "$T/out" && echo printed)" printed

nemesis_nothing_left

[ "$failed" -eq 0 ]
