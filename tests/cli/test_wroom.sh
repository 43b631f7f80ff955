#!/usr/bin/env bash
# tests/cli/test_wroom.sh BUILD_DIR: the waiting room's bench without the
# stack. BUILD_DIR/bench/wroomload (make tests builds it) against a room that
# is not seckill's (tests/cli/fixtures/wroom/fakeroom.py: the API of
# docs/api.md's waiting room, keeping score of what a buyer does wrong):
# every buyer joins on the schedule, before the opening and after, asks again
# no sooner than the answer said, joins again when passed over, buys with its
# own admission and nothing else, and ends bought or told sold out; the rows
# it writes say so, and its fixed-rate mode keeps its rate. Then the
# arithmetic bench/wroom turns those rows into figures with: Spearman's rho,
# the fairness of a line, the sold-out switch, whether the generator kept its
# schedule. The sale itself is make bench's. Needs python3. Speaks TAP.
set -u

BUILD_ARG=${1:?usage: tests/cli/test_wroom.sh BUILD_DIR}
BUILD=$(cd "$BUILD_ARG" 2>/dev/null && pwd) || { echo "Bail out! no build dir $BUILD_ARG"; exit 1; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
fake=
trap '[ -n "$fake" ] && kill "$fake" 2>/dev/null; rm -rf "$T"' EXIT
LOAD=$BUILD/bench/wroomload
STOCK=100 BUYERS=400 LATE=40

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..15"
[ -x "$LOAD" ] || { echo "Bail out! no $LOAD (make tests builds it)"; exit 1; }

seq 1 1000 | sed 's/^/tok/' >"$T/tokens"
PORT=$(free_ports 1)
# The joins begin 3 s from now (the fake's start before them, on a busy
# machine too); admitted at 60/s, the room sells out after the late ones
# joined (in the 1 s after the opening).
STARTS=$(($(date +%s%3N) + 5000))
python3 tests/cli/fixtures/wroom/fakeroom.py "$PORT" 77 "$STARTS" "$STOCK" 60 0.7 "$T/ready" 2>"$T/fake.err" &
fake=$!
until_ok 10 test -e "$T/ready" || { echo "Bail out! the fake room did not start: $(cat "$T/fake.err")"; exit 1; }
mkdir -p "$T/room"
run "$LOAD" sale --port "$PORT" --item 77 --tokens "$T/tokens" --buyers $BUYERS --late $LATE --join-s 2 --late-s 1 \
    --starts-ms "$STARTS" --conns 10 --deadline-s 30 --out "$T/room"
cp "$T/out" "$T/sale.out" 2>/dev/null
k() { awk -v k="$1" '$1 == k {print $2}' "$T/sale.out"; }
is "the sale ran to its end: every buyer bought ($STOCK) or was told sold out, none unfinished" \
    "$rc $(k wroomload_done_bought) $(k wroomload_done_sold_out) $(k wroomload_done_unfinished) $(k wroomload_done_gave_up)" \
    "0 $STOCK $((BUYERS + LATE - STOCK)) 0 0"
score=$(curl -s "http://127.0.0.1:$PORT/stats")
sc() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$score" "$1" 2>/dev/null; }
is "no buyer asked again sooner than its poll_after_s" "$(sc early)" 0
is "no buy without its own admission; the room sold its stock" "$(sc buys_without) $(sc sold)" "0 $STOCK"
if [ "$(sc none_given)" -ge 1 ] 2>/dev/null && [ "$(sc rejoined)" = "$(sc none_given)" ]; then
    pass "each buyer passed over joined again ($(sc none_given))"
else
    fail "each buyer passed over joined again" "passed over $(sc none_given), joined again $(sc rejoined)"
fi
is "the room's answers are the buyers' counts (joins, asks, buys, sold out told)" \
    "$(sc joins) $(sc asks) $(sc buys) $(sc told_sold_out)" \
    "$(k wroomload_join_sent) $(k wroomload_poll_sent) $(k wroomload_buy_sent) $(awk '$1 == "wroomload_answer" && $2 != "buy" && $3 == 200 && $4 == "sold_out" {n += $5} END {print n + 0}' "$T/sale.out")"

# The rows: each buyer's join (before the opening: no place), its admission
# and its place (the token's nonce) when it bought; each buy.
read -r rows pre late bought ok_bought < <(awk -F'\t' 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    {n++; p += $c["join_pos"] == -1; l += $c["join_pos"] > 0}
    $c["done"] == "bought" {b++; a += $c["adm_ans"] >= $c["join_ans"] && $c["join_ans"] > 0 && $c["nonce"] >= 0}
    END {print n + 0, p + 0, l + 0, b + 0, a + 0}' "$T/room/buyers.tsv" 2>/dev/null || echo "- - - - -")
is "buyers.tsv: $BUYERS joined before the opening, $LATE after; each who bought was admitted, with a place" \
    "$rows $pre $late $bought $ok_bought" "$((BUYERS + LATE)) $BUYERS $LATE $STOCK $STOCK"
is "buys.tsv: $STOCK accepted, each buy sent when due or later" \
    "$(awk -F'\t' 'NR > 1 {a += $5 == 202; e += $3 < $2} END {print a + 0, e + 0}' "$T/room/buys.tsv" 2>/dev/null)" "$STOCK 0"
# Offered: the 400 joins over the 2 s window less its last 0.2 s (the last
# join is due 0.2 s before the opening): 222/s.
is "the joins left at the rate offered (222/s)" \
    "$(awk -v o="$(k wroomload_join_offered_per_s)" -v a="$(k wroomload_join_achieved_per_s)" \
        'BEGIN {print (o == 222 && a >= 0.95 * o && a <= 1.05 * o) ? "yes" : "no: " a " of " o}')" yes

run "$LOAD" rate --port "$PORT" --item 77 --tokens "$T/tokens" --first 501 --count 300 --per-s 300 --kind poll \
    --prefix r
r() { awk -v k="$1" '$1 == k {print $2}' "$T/out"; }
is "rate mode: 300 asks at 300/s, all answered (sold out by then)" \
    "$rc $(r r_unanswered) $(grep -c '^r_answer poll 200 sold_out 300$' "$T/out") $(awk -v a="$(r r_achieved_per_s)" \
        'BEGIN {print (a >= 285 && a <= 315) ? "rate-kept" : "rate " a}')" "0 0 1 rate-kept"

# bench/wroom's arithmetic.
python3 - <<'PY'
import importlib.machinery, importlib.util, random, sys
sys.dont_write_bytecode = True
loader = importlib.machinery.SourceFileLoader("wroom", "bench/wroom")
spec = importlib.util.spec_from_loader("wroom", loader)
wr = importlib.util.module_from_spec(spec)
loader.exec_module(wr)
sys.path.insert(0, "tests")
from tap import Tap  # noqa: E402
tap = Tap(first=9)

check = tap.check


# Spearman: the same order 1, the reverse -1, a known case (d^2 = 2 of n = 4: 1 - 12/60).
check("spearman: same order, reverse, one swap", (wr.spearman([1, 2, 3, 4], [10, 20, 30, 40]),
      wr.spearman([1, 2, 3, 4], [4, 3, 2, 1]), wr.spearman([1, 2, 3, 4], [1, 3, 2, 4])), (1.0, -1.0, 0.8))


def buyer(user, pos, sent, adm=0, nonce=-1, soldout=0, live=0):
    return {"user": user, "join_pos": pos, "join_sent": sent, "join_ans": sent + 1, "adm_ans": adm,
            "nonce": nonce, "soldout_ans": soldout, "last_live_ans": live}


# 2,000 before the opening placed at random, 1,000 admitted in the line's
# order; 500 after it placed by arrival.
rnd = random.Random(58)
order = list(range(1, 2001))
rnd.shuffle(order)
rank = {u: i + 1 for i, u in enumerate(order)}
rank.update({2000 + i: 2001 + i for i in range(1, 501)})
buyers = [buyer(u, -1, u, adm=5 if rank[u] <= 1000 else 0, nonce=rank[u] * 7 if rank[u] <= 1000 else -1)
          for u in range(1, 2001)]
buyers += [buyer(2000 + i, 3000 + i, 10000 + i) for i in range(1, 501)]
f = wr.fairness(buyers, rank, 1000)
check("fairness: the shuffled ones near 0, the later ones 1, 1,000 admitted in the line's order",
      (abs(f["fair_pre_rho"]) < 0.1, f["fair_pre_n"], f["fair_late_rho"], f["fair_late_n"], f["admitted"],
       f["admitted_in_line_order"]), (True, 1000, 1.0, 500, 1000, 1))
# An admitted place whose buyer never heard it (told sold out first) breaks
# nothing; one heard past the places the producer admitted does.
mid = next(b for b in buyers if rank[b["user"]] == 500)
mid["adm_ans"], mid["nonce"] = 0, -1
check("fairness: a place admitted but not heard is in order; one heard past those admitted is not",
      (wr.fairness(buyers, rank, 1000)["admitted_in_line_order"], wr.fairness(buyers, rank, 999)["admitted_in_line_order"]),
      (1, 0))
# An admission out of the line's order is seen.
buyers[0]["adm_ans"], buyers[0]["nonce"] = 5, 1
check("fairness: an admission out of the line's order is seen",
      wr.fairness(buyers, rank, 1000)["admitted_in_line_order"], 0 if rank[1] > 1 else 1)
# Sold out: the last 202 at 10 s; the last answer other than sold out 0.25 s
# later; waiters heard it 0.5 and 2 s after it.
buys = [{"http": "202", "ans": "9000000"}, {"http": "202", "ans": "10000000"}, {"http": "410", "ans": "11000000"}]
tb = [buyer(1, -1, 1000000, soldout=10500000, live=10250000), buyer(2, -1, 1000000, soldout=12000000, live=9000000),
      buyer(3, -1, 11000000, soldout=11000001)]
check("sold out: the switch 0.25 s after the last 202, heard within 2 s (a later joiner not counted)",
      wr.sold_out_told(tb, buys), {"soldout_switch_s": 0.25, "soldout_heard_p99_s": 2.0, "soldout_heard_max_s": 2.0})
kept = wr.loadgen_figures({"wroomload_join_offered_per_s": "10000", "wroomload_join_achieved_per_s": "9900",
                           "wroomload_join_late_p99_ms": "1.5", "wroomload_poll_late_p99_ms": "2",
                           "wroomload_buy_late_p99_ms": "0.1"})["loadgen_kept_schedule"]
behind = wr.loadgen_figures({"wroomload_join_offered_per_s": "10000", "wroomload_join_achieved_per_s": "9000",
                             "wroomload_join_late_p99_ms": "1.5"})["loadgen_kept_schedule"]
late = wr.loadgen_figures({"wroomload_join_offered_per_s": "10000", "wroomload_join_achieved_per_s": "10000",
                           "wroomload_poll_late_p99_ms": "25"})["loadgen_kept_schedule"]
check("the generator kept its schedule; behind on the joins' rate; late on the asks", (kept, behind, late), (1, 0, 0))
sys.exit(tap.status())
PY
[ $? -eq 0 ] && [ "$failed" -eq 0 ]
