#!/usr/bin/env bash
# tests/cli/test_demo_chart.sh [BUILD_DIR]: the demo's picture without the
# stack. scripts/demo-chart is fed samples built here from known counters and
# its derived table is checked number by number (per-step counts, rates over
# each step's measured length, the histogram p99 per step, none for a step
# without answers), the PNG is a real PNG of the right size, and malformed
# samples are refused with the line at fault. scripts/demo-sampler reads the
# committed /metrics of real daemons (tests/cli/fixtures/*.metrics, captured
# from a producer and a consumer after 9 requests and 3 orders) through
# file:// URLs. Needs gnuplot (demo-chart installs gnuplot-nox as root).
# Speaks TAP.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
CHART=scripts/demo-chart
SAMPLER=scripts/demo-sampler
FIX=tests/cli/fixtures
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..21"

# --- synthetic samples ------------------------------------------------------
# The columns scripts/demo-sampler writes (a subset of the outcomes; all the
# buckets of common/base/metrics.c). Bucket counts below are per step, made
# cumulative here as the exposition has them.
LES=(0.0001 0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 +Inf)
OUTCOMES=(accepted duplicate sold_out ended overloaded unavailable bad_request)
header() {
    local h=t_ms o l
    for o in "${OUTCOMES[@]}"; do h+=$'\t'req_$o; done
    for l in "${LES[@]}"; do h+=$'\t'lat_le_$l; done
    printf '%s\tpersisted\n' "$h"
}
# row T_MS "OUTCOME COUNTS (cumulative)" "PER-BUCKET COUNTS (cumulative over time, not over le)" PERSISTED
row() {
    local line=$1 c=0 b
    line+=$'\t'${2// /$'\t'}
    for b in $3; do c=$((c + b)); line+=$'\t'$c; done
    printf '%s\t%s\n' "$line" "$4"
}
# Counters are cumulative over time: each row is the previous plus the step.
#   step 1: 100 ms, 100 answers: 40 202, 5 409, 30+5 410, 10 429, 6+4 other;
#           latencies 50 <=0.1 ms, 20 <=0.25, 10 <=0.5, 10 <=1, 5 <=2.5,
#           3 <=5, 1 <=10, 1 <=25: the 99th of 100 is in the 10 ms bucket.
#   step 2: 200 ms, 200 answers: 10 202, 190 410; 197 <=0.25 ms, 3 <=50 ms:
#           the 198th of 200 is in the 50 ms bucket. Rates are per 200 ms.
#   step 3: 100.8 ms, nothing answered: no p99.
#   step 4: 100 ms, one 429 slower than the last bound (10 s): p99 inf.
{
    echo "# seckill demo-sampler: synthetic (tests/cli/test_demo_chart.sh)"
    header
    row 1000000.000 "0 0 0 0 0 0 0"       "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"      0
    row 1000100.000 "40 5 30 5 10 6 4"    "50 20 10 10 5 3 1 1 0 0 0 0 0 0 0 0 0"  25
    row 1000300.000 "50 5 220 5 10 6 4"   "50 217 10 10 5 3 1 1 3 0 0 0 0 0 0 0 0" 50
    row 1000400.800 "50 5 220 5 10 6 4"   "50 217 10 10 5 3 1 1 3 0 0 0 0 0 0 0 0" 50
    row 1000500.800 "50 5 220 5 11 6 4"   "50 217 10 10 5 3 1 1 3 0 0 0 0 0 0 0 1" 50
} >"$T/good.tsv"

run "$CHART" --start-ms 1000050 --stock 50 --title "test" --table "$T/table.tsv" "$T/good.tsv" "$T/good.png"
if [ "$rc" -eq 0 ] && grep -q '^demo-chart: 4 steps (mean 125.2 ms): 301 requests (202 50, 409 5, 410 225, 429 11, other 10), 50 persisted; p99 per step 10-50 ms, 1 beyond 10 s -> ' "$T/out"; then
    pass "demo-chart draws the synthetic sale and prints its totals"
else
    fail "demo-chart draws the synthetic sale and prints its totals" "$(run_diag "$CHART" "$T/good.tsv")"
fi

# The columns checked: t_s dt_ms requests accepted duplicate gone overloaded
# other persisted requests_per_s accepted_per_s gone_per_s persisted_per_s
# accepted_cum persisted_cum answered p99_ms.
step() {
    awk -F'\t' -v n="$1" 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
        NR == n + 1 {print $c["t_s"], $c["dt_ms"], $c["requests"], $c["accepted"], $c["duplicate"], $c["gone"],
                     $c["overloaded"], $c["other"], $c["persisted"], $c["requests_per_s"], $c["accepted_per_s"],
                     $c["gone_per_s"], $c["persisted_per_s"], $c["accepted_cum"], $c["persisted_cum"], $c["answered"],
                     $c["p99_ms"]}' "$T/table.tsv" 2>/dev/null
}
is "step 1: counts by answer, rates per second, p99 in the 10 ms bucket" "$(step 1)" \
    "0.050 100.000 100 40 5 35 10 10 25 1000.0 400.0 350.0 250.0 40 25 100 10"
is "step 2 (200 ms): rates over its measured length, p99 in the 50 ms bucket" "$(step 2)" \
    "0.250 200.000 200 10 0 190 0 0 25 1000.0 50.0 950.0 125.0 50 50 200 50"
is "step 3: no answer, no p99" "$(step 3)" "0.351 100.800 0 0 0 0 0 0 0 0.0 0.0 0.0 0.0 50 50 0 -"
is "step 4: an answer beyond the last bucket has p99 inf" "$(step 4)" "0.451 100.000 1 0 0 0 1 0 0 10.0 0.0 0.0 0.0 50 50 1 inf"
is "the steps' accepted and persisted add up to the last counters (50, 50)" \
    "$(awk -F'\t' 'NR > 1 {a += $4; p += $9} END {print a, p}' "$T/table.tsv" 2>/dev/null)" "50 50"

# A PNG: its signature, then IHDR's width and height (big-endian).
sig=$(od -An -tx1 -N8 "$T/good.png" 2>/dev/null | tr -d ' \n')
dims=$(od -An -tu1 -j16 -N8 "$T/good.png" 2>/dev/null |
    awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 "x" $5 * 16777216 + $6 * 65536 + $7 * 256 + $8}')
is "the chart is a PNG of 1200x1000" "$sig $dims" "89504e470d0a1a0a 1200x1000"
size=$(stat -c %s "$T/good.png" 2>/dev/null || echo 0)
if [ "$size" -gt 30000 ]; then pass "the PNG has content ($size bytes)"; else fail "the PNG has content" "$size bytes"; fi

# --- a sale behind a waiting room (issue #58) ---------------------------------------
# The q_ columns (gauges as they stand, counters cumulative) and the room's
# joins and asks (req_queue), every answer in the first bucket:
#   step 1: 500 joins; 500 waiting.
#   step 2: 200 asks, 20 202s, 1 refused admission (other); 440 waiting,
#           60 places called, 60 admitted, 40 outstanding, the rate 600/s.
#   step 3: 200 asks, 30 202s, 10 410s; the line called, sold out told.
{
    echo "# seckill demo-sampler: synthetic, a waiting room (tests/cli/test_demo_chart.sh)"
    h=t_ms$'\t'req_accepted$'\t'req_sold_out$'\t'req_queue$'\t'req_admission_refused
    for l in "${LES[@]}"; do h+=$'\t'lat_le_$l; done
    printf '%s\tpersisted\tq_waiting\tq_serving\tq_outstanding\tq_rate\tq_admitted\tq_told_sold_out\n' "$h"
    room_row() { # T_MS ACC SOLD_OUT QUEUE REFUSED PERSISTED WAITING SERVING OUTSTANDING RATE ADMITTED TOLD
        local n=$(($2 + $3 + $4 + $5)) line="$1"$'\t'$2$'\t'$3$'\t'$4$'\t'$5 l
        for l in "${LES[@]}"; do line+=$'\t'$n; done
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$line" "$6" "$7" "$8" "$9" "${10}" "${11}" "${12}"
    }
    room_row 2000000.000 0 0 0 0 0 0 0 0 0 0 0
    room_row 2000100.000 0 0 500 0 0 500 0 0 0 0 0
    room_row 2000200.000 20 0 700 1 10 440 60 40 600 60 0
    room_row 2000300.000 50 10 900 1 50 0 500 0 600 66 30
} >"$T/room.tsv"
run "$CHART" --start-ms 2000100 --stock 50 --table "$T/room-table.tsv" "$T/room.tsv" "$T/room.png"
if [ "$rc" -eq 0 ] && grep -q '^demo-chart: 3 steps (mean 100.0 ms): 961 requests (202 50, 409 0, 410 10, 429 0, other 1, waiting room 900), 50 persisted;' "$T/out"; then
    pass "demo-chart draws a sale behind a waiting room, its joins and asks apart"
else
    fail "demo-chart draws a sale behind a waiting room, its joins and asks apart" "$(run_diag "$CHART" "$T/room.tsv")"
fi
# step 2's row: requests accepted other queue queue_per_s q_waiting q_serving q_admitted_cum q_outstanding q_rate
is "a room's step: its asks apart from other, the line and the admissions at its end" \
    "$(awk -F'\t' 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
        NR == 3 {print $c["requests"], $c["accepted"], $c["other"], $c["queue"], $c["queue_per_s"], $c["q_waiting"],
                       $c["q_serving"], $c["q_admitted_cum"], $c["q_outstanding"], $c["q_rate"]}' "$T/room-table.tsv" 2>/dev/null)" \
    "221 20 1 200 2000.0 440 60 60 40 600"
dims=$(od -An -tu1 -j16 -N8 "$T/room.png" 2>/dev/null |
    awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 "x" $5 * 16777216 + $6 * 65536 + $7 * 256 + $8}')
is "with a waiting room the chart has its fourth panel (1200x1300)" "$dims" "1200x1300"

# --- malformed samples --------------------------------------------------------
# refused DESC FILE LINE_TEXT: demo-chart exits 1, names the file and what is
# wrong on stderr, and writes no PNG.
refused() {
    local desc=$1 file=$2 want=$3 why=
    rm -f "$T/bad.png"
    run "$CHART" "$file" "$T/bad.png"
    [ "$rc" -eq 1 ] || why="exit status $rc, want 1"
    grep -qF -- "$want" "$T/err" || why="${why:+$why; }stderr lacks '$want'"
    [ -e "$T/bad.png" ] && why="${why:+$why; }a PNG was written"
    if [ -z "$why" ]; then pass "$desc"; else fail "$desc" "$why" "$(run_diag "$CHART" "$file")"; fi
}
sed '4s/\t25$/\tx25/' "$T/good.tsv" >"$T/nan.tsv"
refused "a count that is not a number is refused with its line" "$T/nan.tsv" "nan.tsv line 4: \"x25\" in column"
sed '5s/^1000300.000/1000100.000/' "$T/good.tsv" >"$T/time.tsv"
refused "a step whose time does not advance is refused" "$T/time.tsv" "time.tsv line 5: time does not advance"
sed '6s/\t50$/\t49/' "$T/good.tsv" >"$T/down.tsv"
refused "a counter that goes down is refused" "$T/down.tsv" "down.tsv line 6: counter in column"
sed '2s/\tlat_le_+Inf//; 3,$s/\t[0-9]*\t\([0-9]*\)$/\t\1/' "$T/good.tsv" >"$T/noinf.tsv"
refused "samples without the +Inf bucket are refused" "$T/noinf.tsv" "no lat_le_* buckets ending with lat_le_+Inf"
head -n 3 "$T/good.tsv" >"$T/one.tsv"
refused "a single sample (no step) is refused" "$T/one.tsv" "1 sample rows, at least two are needed"

# --- the sampler on real /metrics ----------------------------------------------
# The stop file exists from the start: one scrape, the final one.
: >"$T/stop"
run "$SAMPLER" "$T/stop" "$T/real.tsv" "file://$ROOT/$FIX/producer.metrics" "file://$ROOT/$FIX/consumer.metrics"
got=$(awk -F'\t' '/^#/ {next} !h {for (i = 1; i <= NF; i++) c[$i] = i; h = 1; next}
    {print NF, $c["req_accepted"], $c["req_duplicate"], $c["req_sold_out"], $c["req_unknown_item"], $c["req_bad_request"],
     $c["lat_le_0.0001"], $c["lat_le_0.025"], $c["lat_le_+Inf"], $c["acc_le_0.01"], $c["acc_le_0.025"], $c["acc_le_+Inf"],
     $c["persisted"]}' "$T/real.tsv" 2>/dev/null)
# 1 + 18 outcomes + 17 buckets of every request + 17 of the 202s + persisted + 7 of the
# waiting room = 61 columns.
if [ "$rc" -eq 0 ] && [ "$got" = "61 3 1 3 1 1 3 8 9 0 2 3 3" ]; then
    pass "demo-sampler reads a real producer's and consumer's /metrics"
else
    fail "demo-sampler reads a real producer's and consumer's /metrics" "got: '$got'" \
        "want: '61 3 1 3 1 1 3 8 9 0 2 3 3'" "$(run_diag "$SAMPLER")"
fi
is "demo-sampler reads the waiting room's gauges and counters (q_ columns)" \
    "$(sed -n 2p "$T/real.tsv" 2>/dev/null | tr '\t' '\n' | grep '^q_' | sort | tr '\n' ' ')" \
    "q_admitted q_asks_local q_outstanding q_rate q_serving q_told_sold_out q_waiting "

# The fixture is still what the daemons serve: its outcomes are those of
# PM_METRICS and its buckets those of common/base/metrics.c (recapture it if not:
# curl -s 127.0.0.1:9099/metrics, 127.0.0.1:9101/metrics).
fix_out=$(sed -n 's/^seckill_producer_requests_total{outcome="\([a-z_]*\)"}.*/\1/p' "$FIX/producer.metrics" | sort | tr '\n' ' ')
src_out=$(grep -o 'PM_REQ, "counter", "outcome=\\"[a-z_]*' producer/pmetrics.h | sed 's/.*"//' | sort | tr '\n' ' ')
fix_le=$(sed -n 's/^seckill_producer_request_duration_seconds_bucket{le="\([^"]*\)"}.*/\1/p' "$FIX/producer.metrics" | tr '\n' ' ')
src_le=$(sed -n '/bucket_us\[METRICS_HIST_BUCKETS\] = {/,/};/{/= {/d; p}' common/base/metrics.c | grep -oE '[0-9]+' |
    awk '{printf "%g ", $1 / 1e6} END {print "+Inf "}')
if [ -n "$src_out" ] && [ "$fix_out" = "$src_out" ] && [ "$fix_le" = "$src_le" ]; then
    pass "the /metrics fixture has the outcomes of producer/pmetrics.h and the buckets of common/base/metrics.c"
else
    fail "the /metrics fixture matches the daemons' declarations" "fixture outcomes: $fix_out" "pmetrics.h:        $src_out" \
        "fixture buckets: $fix_le" "metrics.c:       $src_le"
fi

# The series the sampler reads are served by the daemons (a rename would
# leave every scrape incomplete).
missing=
for m in seckill_producer_requests_total seckill_producer_request_duration_seconds \
    seckill_producer_accepted_duration_seconds seckill_consumer_persisted_total seckill_producer_queue_waiting \
    seckill_producer_queue_serving seckill_producer_queue_admissions_outstanding \
    seckill_producer_queue_admission_rate seckill_producer_queue_admitted_total \
    seckill_producer_queue_told_sold_out_total seckill_producer_queue_asks_local_total; do
    grep -qF "\"$m\"" producer/*.[ch] consumer/*.[ch] || missing+="$m "
    grep -qF "$m" "$SAMPLER" || missing+="($m not in the sampler) "
done
is "the metric names the sampler reads are declared by the daemons" "$missing" ""

# A consumer that does not answer: no complete scrape, exit 1.
run "$SAMPLER" "$T/stop" "$T/half.tsv" "file://$ROOT/$FIX/producer.metrics" "file://$T/absent.metrics"
if [ "$rc" -eq 1 ] && grep -q 'no complete scrape' "$T/err" && ! grep -qv '^#' "$T/half.tsv"; then
    pass "demo-sampler without a complete scrape writes no row and exits 1"
else
    fail "demo-sampler without a complete scrape writes no row and exits 1" "$(run_diag "$SAMPLER")"
fi

exit $((failed > 0))
