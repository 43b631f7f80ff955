# tests/tap.sh: the TAP helpers the shell tests share (sourced; they set $T,
# a scratch folder, first). tests/run adds up the "ok" and "not ok" lines.

n=0 failed=0
diag() { sed 's/^/# /'; }
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift
    local m; for m in "$@"; do printf '%s\n' "$m" | diag; done
}
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
# is DESC GOT WANT
is() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "got:  '$2'" "want: '$3'"; fi; }

# run CMD...: stdout in $T/out, stderr in $T/err, status in $rc.
rc=0
run() { "$@" >"$T/out" 2>"$T/err"; rc=$?; }
run_diag() {
    printf 'command: %s\nexit: %s\n' "$*" "$rc"
    [ -s "$T/out" ] && { echo "stdout:"; head -n 20 "$T/out"; }
    [ -s "$T/err" ] && { echo "stderr:"; head -n 20 "$T/err"; }
}

# free_ports N: N distinct TCP ports on 127.0.0.1 that nothing listens on
# now, on one line. Asked together: ports asked one at a time may repeat,
# as each is free again once its asker exits.
free_ports() {
    python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}
# until_ok DEADLINE_S CMD...: run CMD until it succeeds (0) or DEADLINE_S
# seconds pass (1).
until_ok() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.2; done
}
