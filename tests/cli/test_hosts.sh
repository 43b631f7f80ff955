#!/usr/bin/env bash
# tests/cli/test_hosts.sh BUILD_DIR: scripts/hosts, the hosts on one machine
# that the nemesis (issue #32) cuts apart. Three hosts in namespaces of their
# own, in a subnet that the machine's own namespace does not have; a cut
# both ways and one way, random loss, heal, and down leaving nothing behind.
# Reachability is a TCP connect with a one-second timeout to a listener on
# the other host (a SYN that vanishes times out; one that arrives connects).
# publish: a port of one host's loopback answers on 127.0.0.1 of another, its
# peer seen as 127.0.0.1, and a cut still cuts it.
# Speaks TAP. Needs root. (BUILD_DIR is unused.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
T=$(mktemp -d)
export SECKILL_HOSTS_STATE=$T/hosts
# (a run beside another one on the machine sets its own)
PFX=${SECKILL_HOSTS_PREFIX:-sknem}
NET=${SECKILL_HOSTS_SUBNET:-10.231.0}
H=scripts/hosts
pids=()

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    $H down >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

LISTEN='import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen(64)
while True:
    c, _ = s.accept(); c.close()'
CONNECT='import socket, sys
socket.create_connection((sys.argv[1], 7000), timeout=1).close()'
SEND='import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])): s.sendto(b"x", (sys.argv[1], 7001))'

# reaches A B: A connects to B's listener
reaches() { $H exec "$1" python3 -c "$CONNECT" "$($H addr "$2")" 2>/dev/null; }
# state A B: "yes" or "no"
state() { if reaches "$1" "$2"; then echo yes; else echo no; fi; }
# dropped A B: packets from A that B's rule dropped so far
dropped() { $H exec "$2" nft list chain inet "$PFX" "from_$1" 2>/dev/null | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'; }

# A listener on 127.0.0.1:7002 that answers each connection with its peer's address
PEER='import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7002)); s.listen(64)
while True:
    c, a = s.accept(); c.sendall(a[0].encode()); c.close()'
ASK='import socket
c = socket.create_connection(("127.0.0.1", 7002), timeout=1); print(c.recv(64).decode())'
asks() { $H exec "$1" python3 -c "$ASK" 2>/dev/null || echo none; }

echo "1..13"

run $H up a b c
if [ $rc -ne 0 ]; then fail "scripts/hosts up a b c" "$(run_diag $H up a b c)"; echo "Bail out! no hosts"; exit 1; fi
for h in a b c; do
    $H exec "$h" python3 -c "$LISTEN" "$($H addr "$h")" & pids+=($!)
done
is "three hosts, each with an address of the test subnet" "$($H list | awk '{ print $2 }' | tr '\n' ' ')" \
    "$NET.11 $NET.12 $NET.13 "
is "the subnet exists only inside the hosts" "$(ip -4 addr show | grep -cF " $NET.")" 0

if until_ok 10 reaches a b && until_ok 10 reaches b c; then pass "a reaches b, b reaches c"
else fail "a reaches b, b reaches c" "a->b $(state a b), b->c $(state b c)"; fi

$H cut a b
is "cut a b: a->b, b->a lost; a->c, c->b kept" "$(state a b) $(state b a) $(state a c) $(state c b)" "no no yes yes"
is "what a sent to b was dropped where b receives it" "$([ "$(dropped a b)" -ge 1 ] && echo ok)" ok

$H heal a b
is "heal a b: a->b and b->a again" "$(state a b) $(state b a)" "yes yes"

# One way: a's SYN to b vanishes; b's SYN reaches a, but a's answer to it
# vanishes too, so TCP fails both ways: the rules tell the two apart.
$H cut a b --oneway
before_ab=$(dropped a b)
state b a >/dev/null
is "cut a b --oneway: b's packets reach a (b drops only a's answers), a drops nothing from b" \
    "$([ "$(dropped a b)" -gt "$before_ab" ] && echo answers-dropped) $(dropped b a | grep -c .)" "answers-dropped 0"
$H heal

# Random loss: 400 datagrams from a to b, about half dropped (outside 120-280
# with a chance below one in a billion).
$H loss a b 50
$H exec a python3 -c "$SEND" "$($H addr b)" 400
lost=$(dropped a b)
is "loss a b 50: $lost of 400 dropped" "$([ "$lost" -ge 120 ] && [ "$lost" -le 280 ] && echo about-half)" about-half

run $H loss a b 0
bad=$rc
run $H cut a nosuch
bad="$bad $rc $(grep -c "no host 'nosuch'" "$T/err")"
run $H up Bad
is "bad input refused: loss 0, an unknown host, a bad name" "$bad $rc" "1 1 1 1"

$H heal

# publish: c's loopback port 7002 answers on 127.0.0.1 of a (and b), and c
# sees the peer as 127.0.0.1, as on one machine.
$H exec c python3 -c "$PEER" & pids+=($!)
run $H publish c 7002
if [ $rc -eq 0 ] && until_ok 10 bash -c "[ \"\$($H exec a python3 -c '$ASK' 2>/dev/null)\" = 127.0.0.1 ]"; then
    pass "publish c 7002: a reaches c's 127.0.0.1:7002 at its own 127.0.0.1:7002, seen from 127.0.0.1"
else fail "publish c 7002: a reaches c's 127.0.0.1:7002" "$(run_diag $H publish c 7002)" "a asks: $(asks a)"; fi
$H cut a c
is "publish: cut a c cuts it too (b still reaches it)" "$(asks a) $(asks b)" "none 127.0.0.1"
$H heal
run $H publish b 7002
is "publish: one port, one host (b cannot take c's 7002)" "$rc $(grep -c 'published by another host' "$T/err")" "1 1"

for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
pids=()
$H down
is "down: no namespace of ours is left" "$(ip netns list | grep -c "^$PFX-")" 0

[ "$failed" -eq 0 ]
