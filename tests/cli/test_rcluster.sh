#!/usr/bin/env bash
# tests/cli/test_rcluster.sh BUILD_DIR: the local Redis Cluster of the stack
# (scripts/stack up --cluster, issue #31 §3). Six nodes in cluster mode, all
# 16384 slots served, a replica linked to every primary; the item keys of a
# sale spread over all three primaries; the stack's ACL users, and no one as
# default; a primary SIGKILLed is replaced by its replica (the Cluster's own
# failover) with an acknowledged write kept, and comes back as a replica;
# status counts a node that is down; down --cluster stops the Cluster only.
# Speaks TAP. (BUILD_DIR is unused: the stack's own commands are tested.)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STATE=${SECKILL_STACK_DIR:-$ROOT/.stack}
T=$(mktemp -d)
KEY="sktest-rc$$:{item:$$}:stock"
PORTS=(16401 16402 16403 16404 16405 16406)

# shellcheck source=../tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tap.sh"

cleanup() {
    scripts/stack down --cluster >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

# rc PORT ARGS...: redis-cli on a node as the user stack (as scripts/stack does)
rc() { local p=$1; shift; REDISCLI_AUTH=$(cat "$STATE/secrets/redis-stack") redis-cli --user stack -p "$p" "$@" 2>&1 | tr -d '\r'; }
info_field() { rc "$1" CLUSTER INFO | sed -n "s/^$2://p"; }
role_of() { rc "$1" ROLE | sed -n 1p; }
# owner SLOT: the port of the primary that serves SLOT (CLUSTER SLOTS, which
# lists per range: start, end, then the primary's ip, port, id, then replicas)
owner() {
    rc 16401 --no-raw CLUSTER SLOTS | awk -v s="$1" '
        /^[0-9]+\) 1\) \(integer\)/ { lo = $NF; want = 0; next }
        /^   2\) \(integer\)/ { hi = $NF; want = (s >= lo && s <= hi); next }
        want && /^   3\) 1\)/ { getline; sub(/.*\(integer\) /, ""); print; exit }'
}
promoted() { [ "$(role_of "$1")" = master ]; }
replica_of() { [ "$(role_of "$1")" = slave ] && [ "$(rc "$1" INFO replication | sed -n 's/^master_port://p')" = "$2" ] &&
               [ "$(rc "$1" INFO replication | sed -n 's/^master_link_status://p')" = up ]; }

echo "1..13"

run scripts/stack up --cluster
if [ $rc -eq 0 ]; then pass "scripts/stack up --cluster"
else fail "scripts/stack up --cluster" "$(run_diag scripts/stack up --cluster)"; echo "Bail out! no cluster"; exit 1; fi

# 2: every node sees the whole cluster
bad=
for p in "${PORTS[@]}"; do
    s="$(info_field "$p" cluster_state) $(info_field "$p" cluster_slots_ok) $(info_field "$p" cluster_known_nodes)"
    [ "$s" = "ok 16384 6" ] || bad="$bad $p:[$s]"
done
is "every node: state ok, 16384 slots served, 6 nodes known" "${bad:-none}" none

# 3: three primaries, each with a replica whose link is up
mapfile -t P < <(for p in "${PORTS[@]}"; do [ "$(role_of "$p")" = master ] && echo "$p"; done)
linked=0
for p in "${P[@]}"; do
    rc "$p" INFO replication | grep -q '^slave0:.*state=online' && linked=$((linked + 1))
done
is "three primaries, each with a replica online" "${#P[@]} $linked" "3 3"

# the project's functions on every node (loaded on each primary, replicated)
have_lib() { [ "$(rc "$1" FUNCTION LIST LIBRARYNAME seckill_producer | grep -c '^seckill_producer$')" = 1 ]; }
all_have_lib() { local p; for p in "${PORTS[@]}"; do have_lib "$p" || return 1; done; }
if until_ok 10 all_have_lib; then pass "the function library seckill_producer is on all six nodes"
else fail "the function library seckill_producer is on all six nodes" \
    "$(for p in "${PORTS[@]}"; do have_lib "$p" && echo "$p has it" || echo "$p lacks it"; done)"; fi

# 4: the keys of a sale's items land on every primary (the hash tag {item:ID}
# is what CLUSTER KEYSLOT hashes)
owners=$(for i in $(seq 1 30); do owner "$(rc 16401 CLUSTER KEYSLOT "seckill:{item:$i}:stock")"; done | sort -u | tr '\n' ' ')
is "30 items' stock keys are served by all three primaries" "$(echo "$owners" | wc -w)" 3
same=$(rc 16401 CLUSTER KEYSLOT "seckill:{item:7}:stock")-$(rc 16401 CLUSTER KEYSLOT "seckill:{item:7}:buyers")
is "an item's keys share one slot" "${same%-*}" "${same#*-}"

# 6: the same ACL users as the standalone Redis; no one gets in as default
run redis-cli -p 16401 PING
is "a client without a user is refused" "$(grep -c NOAUTH "$T/out")" 1
who=$(REDISCLI_AUTH=$(cat "$STATE/secrets/redis-producer") redis-cli --user producer -p 16402 PING 2>/dev/null | tr -d '\r')
who=$who/$(REDISCLI_AUTH=$(cat "$STATE/secrets/redis-producer") redis-cli --user producer -p 16402 FLUSHALL 2>/dev/null | cut -c1-6)
is "the producer's ACL user logs in on a node, with its own rights only" "$who" PONG/NOPERM

# 8: an acknowledged write survives its primary's SIGKILL: the replica is promoted
slot=$(rc 16401 CLUSTER KEYSLOT "$KEY")
victim=$(owner "$slot")
rc "$victim" SET "$KEY" 42 >/dev/null
acks=$(rc "$victim" WAIT 1 5000)
successor=
for p in "${PORTS[@]}"; do replica_of "$p" "$victim" && successor=$p; done
vn=$((victim - 16400))
t0=$(date +%s%3N)
scripts/stack kill "rcluster-$vn" >/dev/null 2>&1
if [ -n "$successor" ] && until_ok 30 promoted "$successor"; then
    took=$(($(date +%s%3N) - t0))
    pass "rcluster-$vn (127.0.0.1:$victim) killed: its replica 127.0.0.1:$successor was promoted in $took ms"
else
    fail "the replica of a killed primary is promoted" "victim $victim successor '${successor}' acks '$acks'"
fi
is "the write acknowledged by a replica (WAIT 1) is on the promoted one" "$acks $(rc "${successor:-16401}" GET "$KEY")" "1 42"

# 10: the old primary comes back as the new one's replica; status counts nodes
run scripts/stack start "rcluster-$vn"
if [ $rc -eq 0 ] && until_ok 30 replica_of "$victim" "${successor:-0}"; then
    pass "start rcluster-$vn: it rejoins as a replica of 127.0.0.1:$successor"
else fail "a restarted old primary rejoins as a replica" "$(run_diag scripts/stack start "rcluster-$vn")" "role $(role_of "$victim")"; fi
scripts/stack stop "rcluster-$vn" >/dev/null 2>&1
run scripts/stack status --cluster
down_rc=$rc down_line=$(grep -c "rcluster-$vn down" "$T/out")
scripts/stack start "rcluster-$vn" >/dev/null 2>&1
run scripts/stack status --cluster
is "status --cluster: 1 with a node down, 0 when all run" "$down_rc $down_line $rc" "1 1 0"
rc "$successor" DEL "$KEY" >/dev/null

# 12: down --cluster stops the Cluster and leaves the plain Redis running
run scripts/stack down --cluster
up=0; for p in "${PORTS[@]}"; do [ "$(rc "$p" PING)" = PONG ] && up=$((up + 1)); done
is "down --cluster: no node answers, the plain Redis still does" "$rc $up $(rc 16379 PING)" "0 0 PONG"

[ "$failed" -eq 0 ]
