#!/usr/bin/env bash
# tests/cli/test_sale_lua.sh [BUILD_DIR]: bench/sale.lua, the flash sale's
# load, against a stub HTTP server (no stack). wrk makes its threads one after
# another and starts each at once; the script holds every thread's first
# request until every thread has read its tokens (its start line). Here the
# tokens are many (200,000: the second thread reads for tens of ms) and the
# stub, on its first request, looks for every thread's "tokens read" mark:
# without the start line the first thread sends while the second still reads.
# Also: each request carries a token of the file, wrk stops on SIGINT (a
# sleep through os.execute would undo wrk's handler) and leaves no mark
# behind. Needs wrk and python3. Speaks TAP. (BUILD_DIR is unused.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
stub=
trap '[ -z "$stub" ] || kill "$stub" 2>/dev/null; rm -rf "$T"' EXIT

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

echo "1..5"

USERS=200000
awk -v n=$USERS 'BEGIN {for (i = 1; i <= n; i++) printf "tok%07d.x\n", i}' >"$T/tokens"
read -r PORT < <(free_ports 1)

# The stub: answers 202 to every POST; on the first, writes which of the two
# threads' marks exist then; counts requests and bad tokens.
python3 - "$PORT" "$T/tokens" "$T/stub" <<'PY' 2>"$T/stub.err" & stub=$!
import http.server, os, re, sys, threading
port, tokens, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
seen = {"n": 0, "bad": 0}
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock:
            if seen["n"] == 0:
                marks = [os.path.exists("%s.ready.%d" % (tokens, k)) for k in (1, 2)]
                open(out + ".first", "w").write(" ".join("yes" if m else "no" for m in marks) + "\n")
            seen["n"] += 1
            if not re.fullmatch(r"Bearer tok\d{7}\.x", self.headers.get("Authorization", "")):
                seen["bad"] += 1
            open(out + ".count", "w").write("%d %d\n" % (seen["n"], seen["bad"]))
        self.send_response(202)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
until_ok 10 python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])))' "$PORT" 2>/dev/null ||
    { echo "Bail out! the stub server did not listen on $PORT"; exit 1; }

ITEM=7 USERS=$USERS REQUESTS=200 THREADS=2 TOKENS=$T/tokens \
    wrk -t2 -c4 -d60s -s bench/sale.lua "http://127.0.0.1:$PORT" >"$T/wrk.out" 2>"$T/wrk.err" & wrk=$!
answered_all() { [ "$(cut -d' ' -f1 "$T/stub.count" 2>/dev/null)" -ge 200 ] 2>/dev/null; }
until_ok 30 answered_all || true
kill -INT $wrk 2>/dev/null
# wrk ends on SIGINT (it would otherwise sleep out its 60 s): wait with a deadline.
ended=no
until_ok 10 bash -c "! kill -0 $wrk 2>/dev/null" && ended=yes
[ $ended = yes ] || kill -9 $wrk 2>/dev/null
wait $wrk 2>/dev/null

is "the first request came after both threads read their tokens" "$(cat "$T/stub.first" 2>/dev/null)" "yes yes"
is "every request carried a token of the file" "$(cut -d' ' -f2 "$T/stub.count" 2>/dev/null)" 0
is "wrk ended on SIGINT" "$ended" yes
# The stub counts a request before it answers, and SIGINT can come while
# each of wrk's 4 connections waits for its answer: wrk counts n - 4 to n.
answered=$(cut -d' ' -f1 "$T/stub.count" 2>/dev/null)
is "wrk printed its 202s (the stub answered ${answered:-none})" \
    "$(awk -v n="${answered:-0}" '$1 == "status" && $2 == 202 {print ($3 >= n - 4 && $3 <= n) ? "yes" : $3}' "$T/wrk.out")" yes
is "no mark left beside the tokens" "$(ls "$T" | grep -c '^tokens\.ready')" 0

[ "$failed" -eq 0 ]
