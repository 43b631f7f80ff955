#!/usr/bin/env bash
# bench/bucketcap.sh: one hot item's reservation capacity on the stack's
# Redis Cluster, its stock in one slot (K = 1, today's layout) and in three
# buckets on the three primaries (K = 3; issue #57, common/sale/bucket.h),
# by each primary's own CPU: build/bench/bucketcap says how, and proves each
# run took the reservation's branch on every call. Two runs, each with both
# layouts' batches interleaved, so each ratio has its floor from the same
# seconds.
# Needs `scripts/stack up --cluster` and build/bench/bucketcap. Prints "key
# value" lines: each run's figures (bucketcap_runN_kK_*), then per run the
# capacity of K = 3 over K = 1, the bucket's CPU per reservation over the
# unbucketed one's, and the busiest primary's share, as "min max" ranges.
#   BUCKETCAP_CALLS (200000): buys per run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CALLS=${BUCKETCAP_CALLS:-200000}
PREFIX=benchbk$$
T=$(mktemp -d)
PORTS=$(scripts/stack redis-cli -p 16401 CLUSTER NODES |
    awk '$3 ~ /master/ && $3 !~ /fail/ && NF >= 9 {split($2, a, ":"); split(a[2], b, "@"); print b[1]}' | sort -n | xargs)
[ -n "$PORTS" ] || { echo "bucketcap: no Cluster primaries answer (scripts/stack up --cluster)" >&2; exit 1; }
cleanup() {
    UNLINK_PORTS=$PORTS bench/unlink-keys "$PREFIX:*" || true
    rm -rf "$T"
}
trap cleanup EXIT
sed -e "s/key_prefix = \"seckill\"/key_prefix = \"$PREFIX\"/" \
    -e "s|\"\\.\\./\\.stack/|\"${SECKILL_STACK_DIR:-$ROOT/.stack}/|" \
    -e "s|key_dir = \"dev-keys\"|key_dir = \"$ROOT/config/dev-keys\"|" config/seckill-cluster.cfg >"$T/cfg"
# A first, shorter run not counted: the first run after the Cluster came up
# (or failed over) was the slowest by 15-20 % in every pair here.
build/bench/bucketcap "$T/cfg" 900000 3 $((CALLS / 4)) >/dev/null
for run in 1 2; do
    build/bench/bucketcap "$T/cfg" $((900000 + run * 10)) 3 "$CALLS" |
        sed "s/^bucketcap_/bucketcap_run${run}_/" | tee -a "$T/all"
done
fig() { awk -v k="$1" '$1 == k {print $2; exit}' "$T/all"; }
# range NAME EXPR: EXPR over each run's figures (a, b: K = 1's and K = 3's), "min max"
range() {
    local name=$1 what=$2 v1 v2
    v1=$(awk -v a="$(fig "bucketcap_run1_k1_$what")" -v b="$(fig "bucketcap_run1_k3_$what")" "BEGIN {printf \"%.2f\", $3}")
    v2=$(awk -v a="$(fig "bucketcap_run2_k1_$what")" -v b="$(fig "bucketcap_run2_k3_$what")" "BEGIN {printf \"%.2f\", $3}")
    awk -v n="$name" -v x="$v1" -v y="$v2" 'BEGIN {printf "%s %s %s\n", n, (x < y ? x : y), (x < y ? y : x)}'
}
range bucketcap_capacity_k3_over_k1 capacity_per_cpu_s 'b / a'
range bucketcap_cpu_per_reservation_k3_over_k1 cpu_us_per_reservation 'b / a'
range bucketcap_k3_max_share max_share 'b'
