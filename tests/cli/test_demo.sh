#!/usr/bin/env bash
# tests/cli/test_demo.sh BUILD_DIR: make demo, small, on the running stack
# with BUILD_DIR's binaries: a flash sale of 60 units, 3,000 requests from
# 1,500 users. The demo checks its own result and says so in its exit status
# (nothing oversold, lost or sold twice, the whole stock sold, an owner sees
# the order and a stranger does not, the chart's steps add up to the sale,
# and after the sale (a 3 s payment window here) the payers' orders are
# paid, the others expire and their units sell again and are paid: every
# unit paid, each unpaid one given back once, nothing late, no stock left);
# here the figures it writes as JSON are checked once more, the chart is a
# PNG, and the demo's own topic is gone afterwards. A demo that cannot use
# the stack (its Kafka topic and group outside the ACLs, a port taken) fails
# here, not on a reader's first try. Free ports, output in a scratch folder.
# Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_demo.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
STOCK=60

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..7"

demo_topics() { scripts/stack kcat admin -L -q 2>/dev/null | sed -nE 's/.*topic "(seckill\.demo(pay)?\.[^"]+)".*/\1/p' | sort; }
demo_topics >"$T/topics.before"
mkdir -p "$T/art"
run env SECKILL_DEMO_STOCK=$STOCK SECKILL_DEMO_REQUESTS=3000 SECKILL_DEMO_USERS=1500 SECKILL_DEMO_CONNS=20 \
    SECKILL_DEMO_PORTS="$(free_ports 3)" SECKILL_DEMO_BUILD="$BUILD" SECKILL_DEMO_OUT="$T/art" \
    SECKILL_DEMO_JSON="$T/sale.json" SECKILL_DEMO_PAY_WITHIN=3 scripts/demo
if [ "$rc" -eq 0 ]; then pass "the demo's sale checks out (exit 0)"; else
    fail "the demo's sale checks out (exit 0)" "$(run_diag scripts/demo)" "$(tail -n 40 "$T/out")"; fi

# The life after the sale, as scripts/demo-after saw it: 48 of 60 paid at
# first, 12 expired and given back, then sold again and paid.
after() { sed -n '/^== after the sale/,/^== /p' "$T/out"; }
is "after the sale: every unit paid, each unpaid one back on sale once" \
    "$(after | grep -c 'every unit paid, each unpaid one back on sale once: yes')" 1
is "after the sale: 60 paid, 12 expired, 12 returns, 12 given back in Redis" \
    "$(after | grep -oE 'units: [0-9]+ paid of [0-9]+; [0-9]+ expired, [0-9]+ returns, [0-9]+ given back')" \
    "units: 60 paid of 60; 12 expired, 12 returns, 12 given back"

jnum() { sed -nE "s/.*\"$1\": ([0-9.]+).*/\1/p" "$T/sale.json" 2>/dev/null; }
is "the whole stock accepted (JSON)" "$(jnum sale_accepted)/$(jnum sale_stock)" "$STOCK/$STOCK"
is "nothing oversold, lost or sold twice (JSON)" "$(jnum oversold) $(jnum lost) $(jnum duplicates)" "0 0 0"
is "the chart is a PNG" "$(head -c 8 "$T/art/demo-sale.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" 89504e470d0a1a0a
demo_topics >"$T/topics.after"
is "no demo topic left behind" "$(comm -13 "$T/topics.before" "$T/topics.after")" ""

[ "$failed" -eq 0 ]
