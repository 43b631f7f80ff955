#!/usr/bin/env bash
# tests/cli/test_demo_queue.sh BUILD_DIR: make demo behind a waiting room
# (SECKILL_DEMO_QUEUE=1, issue #58), small, on the running stack with
# BUILD_DIR's binaries (bench/wroomload among them: make tests builds it): 60
# units, 1,500 buyers joining in the 2 s before the opening, 100 in the 2 s
# after, over 20 connections, the producer's queue_abandon_s at 3 s (so each
# waiter asks again within a second: a short run). The demo checks its own
# result (nothing oversold, lost or sold twice, the whole stock sold, the
# line's order holds against its seed, every buyer joined and finished,
# admitted at least the stock, waiters told sold out); here the JSON it
# writes, the line it audited, what each buyer did and the chart's samples
# are checked once more. Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_demo_queue.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
STOCK=60 USERS=1500 LATE=100

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..9"

demo_topics() { scripts/stack kcat admin -L -q 2>/dev/null | sed -nE 's/.*topic "(seckill\.demo(pay)?\.[^"]+)".*/\1/p' | sort; }
demo_topics >"$T/topics.before"
mkdir -p "$T/art"
run env SECKILL_DEMO_QUEUE=1 SECKILL_DEMO_STOCK=$STOCK SECKILL_DEMO_USERS=$USERS SECKILL_DEMO_LATE=$LATE \
    SECKILL_DEMO_JOIN_S=2 SECKILL_DEMO_LATE_S=2 SECKILL_DEMO_CONNS=20 SECKILL_DEMO_QUEUE_ABANDON_S=3 \
    SECKILL_DEMO_PORTS="$(free_ports 3)" SECKILL_DEMO_BUILD="$BUILD" SECKILL_DEMO_OUT="$T/art" \
    SECKILL_DEMO_JSON="$T/sale.json" scripts/demo
if [ "$rc" -eq 0 ]; then pass "the demo's sale behind a waiting room checks out (exit 0)"; else
    fail "the demo's sale behind a waiting room checks out (exit 0)" "$(run_diag scripts/demo)" \
        "$(tail -n 50 "$T/out")"; fi

jnum() { sed -nE "s/.*\"$1\": (-?[0-9.]+).*/\1/p" "$T/sale.json" 2>/dev/null; }
is "the whole stock accepted, nothing oversold, lost or sold twice (JSON)" \
    "$(jnum sale_accepted)/$(jnum sale_stock) $(jnum oversold) $(jnum lost) $(jnum duplicates)" "$STOCK/$STOCK 0 0 0"
# The room's own figures: the item had one, the producer admitted at least
# the stock and told waiters sold out, every buyer finished, the audit held.
got=$(jnum queue)/$(jnum queue_unfinished)/$(jnum queue_audit_holds)
adm=$(jnum queue_admitted) told=$(jnum queue_told_sold_out)
if [ "$got" = 1/0/1 ] && [ "${adm:-0}" -ge "$STOCK" ] && [ "${told:-0}" -gt 0 ]; then
    pass "a waiting room: admitted $adm >= $STOCK, told sold out $told times, no buyer unfinished, the audit held"
else
    fail "a waiting room: admitted >= the stock, sold out told, no buyer unfinished, the audit held" \
        "queue/unfinished/audit: $got (want 1/0/1); admitted ${adm:-?}; told sold out ${told:-?}"
fi

# The line as seckillctl queue audit recomputed it from the stored seed:
# every buyer placed once, the ones before the opening shuffled, then the
# later ones by arrival.
is "the audited line: $USERS shuffled at the opening, then $LATE later joiners, the order holds" \
    "$(tail -n 1 "$T/art/demo-room-line.txt" 2>/dev/null)" \
    "audit: $((USERS + LATE)) places: $USERS shuffled at the opening, each where SHA-1(seed ':' user) puts it, then $LATE later joiners by arrival; the order holds"

# Each buyer (bench/wroomload's rows): those before the opening were told
# no place (every place equal), the later ones a place behind them or, once
# the stock was gone, sold out at the door; every buyer who bought had been
# admitted first, with a place in the line.
read -r pre late bought bought_adm < <(awk -F'\t' 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    {p += $c["join_pos"] == -1; l += $c["join_pos"] > 0 || $c["join_pos"] == -3}
    $c["done"] == "bought" {b++; a += $c["adm_ans"] > 0 && $c["nonce"] >= 0}
    END {print p + 0, l + 0, b + 0, a + 0}' "$T/art/demo-room-buyers.tsv" 2>/dev/null || echo "- - - -")
is "the buyers: $USERS joined before the opening, $LATE after (a place, or sold out at the door); $STOCK bought, each admitted first" \
    "$pre $late $bought $bought_adm" "$USERS $LATE $STOCK $STOCK"
# Every buy call carried its admission and every 202 is one of the stock.
is "the buy calls: $STOCK accepted, none refused for its admission" \
    "$(awk -F'\t' 'NR > 1 {a += $5 == 202; r += $6 ~ /^admission_refused/} END {print a + 0, r + 0}' \
        "$T/art/demo-room-buys.tsv" 2>/dev/null)" "$STOCK 0"

# The chart's samples show the room: all the buyers waiting before the
# opening, the admissions reaching the stock. The producer's gauge counts the
# waiters of every item it watches, so what a used stack's earlier rooms
# left is taken off: the fewest it counted before its most.
read -r waiting admitted < <(awk -F'\t' '/^#/ {next} !h {for (i = 1; i <= NF; i++) c[$i] = i; h = 1; next}
    {q = $c["q_waiting"] + 0; if (n++ == 0 || q < low) low = q
     if (q > w) {w = q; base = low}; a = $c["q_admitted"]} END {print w - base, a + 0}' \
    "$T/art/demo-sale.tsv" 2>/dev/null || echo "- -")
if [ "${waiting:-0}" -ge "$USERS" ] 2>/dev/null && [ "${admitted:-0}" -ge "$STOCK" ] 2>/dev/null; then
    pass "the samples show the room: $waiting waiting at most, $admitted admitted"
else
    fail "the samples show the room (waiting >= $USERS at most, admitted >= $STOCK)" \
        "waiting at most '${waiting:-}', admitted '${admitted:-}'"
fi
dims=$(od -An -tu1 -j16 -N8 "$T/art/demo-sale.png" 2>/dev/null |
    awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 "x" $5 * 16777216 + $6 * 65536 + $7 * 256 + $8}')
is "the chart has the waiting room's panel (1200x1300)" "$dims" "1200x1300"
demo_topics >"$T/topics.after"
is "no demo topic left behind" "$(comm -13 "$T/topics.before" "$T/topics.after")" ""

[ "$failed" -eq 0 ]
