# bench/cpu.sh (sourced): CPU per operation from the kernel's and Redis's own
# counters. A rate moves 10-30 % between runs on two shared cores; the CPU an
# operation costs each process moves far less, and says where a figure goes.
#
#   cpu_mark NAME PID...     remember each PID's CPU, the machine's, Redis's INFO
#   cpu_split NAME OPS PREFIX PID_LABEL...
#                            print "PREFIX_LABEL us" per process label, then
#                            _other (the machine less those) and the Redis
#                            views, each per operation over the marked window
#
# Needs STACK_RCLI (a redis-cli command line for the stack's Redis, as an
# array) and CPU_T (a scratch folder). The process figures are
# utime+stime from /proc/PID/stat (all threads of the process); "other" is
# the machine's busy time from /proc/stat (user, nice, system, irq, softirq,
# steal) less the processes named. Redis's own view is INFO's
# used_cpu_user+used_cpu_sys (its whole process: the event loop, reading and
# writing sockets, every command) and INFO commandstats (each command's calls
# and time; a script's time includes the commands it runs, which are also
# listed under their own names).

CPU_TCK=$(getconf CLK_TCK)

# proc_cpu_us PID: the process's user+system CPU so far, in us (0 once gone).
proc_cpu_us() {
    awk -v t="$CPU_TCK" '{sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) * 1e6 / t}' "/proc/$1/stat" 2>/dev/null ||
        echo 0
}
# proc_preempted PID: how often the process was switched out against its
# will so far (nonvoluntary_ctxt_switches of its main thread, where Redis
# runs its commands). Redis times a command in wall-clock time: a command preempted
# half-way counts the wait too, so this says how far commandstats' times are
# from CPU.
proc_preempted() {
    awk '$1 == "nonvoluntary_ctxt_switches:" {print $2; f = 1} END {if (!f) print 0}' "/proc/$1/status" 2>/dev/null ||
        echo 0
}
# machine_cpu_us: every core's busy time so far, in us.
machine_cpu_us() {
    awk -v t="$CPU_TCK" '$1 == "cpu" {printf "%.0f", ($2 + $3 + $4 + $7 + $8 + $9) * 1e6 / t; exit}' /proc/stat
}
# redis_info FILE: INFO cpu, stats and commandstats, as "key value" lines
# (cmdstat_X_calls, cmdstat_X_usec, used_cpu_us, keyspace_hits ...).
redis_info() {
    "${STACK_RCLI[@]}" INFO everything | tr -d '\r' | awk -F: '
        /^cmdstat_/ { n = split($2, kv, ","); for (i = 1; i <= n; i++) { split(kv[i], p, "=");
                      if (p[1] == "calls" || p[1] == "usec") print $1 "_" p[1], p[2] } }
        $1 == "used_cpu_user" { u = $2 } $1 == "used_cpu_sys" { s = $2 }
        $1 == "keyspace_hits" || $1 == "keyspace_misses" { print $1, $2 }
        END { printf "used_cpu_us %.0f\n", (u + s) * 1e6 }' >"$1"
}
# redis_delta A B KEY: B's KEY less A's (0 when absent).
redis_delta() {
    awk -v k="$3" 'FNR == NR && $1 == k {a = $2} FNR != NR && $1 == k {b = $2} END {printf "%.0f", b - a}' "$1" "$2"
}

cpu_mark() {
    local name=$1 p
    shift
    : >"$CPU_T/$name.procs"
    for p in "$@"; do echo "$p $(proc_cpu_us "$p") $(proc_preempted "$p")" >>"$CPU_T/$name.procs"; done
    machine_cpu_us >"$CPU_T/$name.machine"
    redis_info "$CPU_T/$name.redis"
}

# cpu_split A B OPS PREFIX LABEL... (one label per PID given to cpu_mark, in
# order; a process measured another way is passed as EXTRA_LABEL and
# EXTRA_US in the environment: wrk, which is gone by the end mark). Also
# "preempted_per_1000_OP_LABEL": each process's involuntary switches per
# 1,000 operations (OP: PREFIX less cpu_us_per_).
cpu_split() {
    local a=$1 b=$2 ops=$3 prefix=$4 i=0 named=0 us label pid
    shift 4
    local labels=("$@")
    while read -r pid us sw; do
        label=${labels[i]}
        i=$((i + 1))
        us=$(($(awk -v p="$pid" '$1 == p {print $2}' "$CPU_T/$b.procs") - us))
        sw=$(($(awk -v p="$pid" '$1 == p {print $3}' "$CPU_T/$b.procs") - sw))
        named=$((named + us))
        awk -v l="$label" -v u="$us" -v n="$ops" -v p="$prefix" 'BEGIN {printf "%s_%s %.1f\n", p, l, n ? u / n : 0}'
        awk -v l="$label" -v s="$sw" -v n="$ops" -v p="${prefix#cpu_us_per_}" \
            'BEGIN {printf "preempted_per_1000_%s_%s %.2f\n", p, l, n ? s * 1000 / n : 0}'
    done <"$CPU_T/$a.procs"
    if [ -n "${EXTRA_LABEL:-}" ]; then
        named=$((named + EXTRA_US))
        awk -v l="$EXTRA_LABEL" -v u="$EXTRA_US" -v n="$ops" -v p="$prefix" 'BEGIN {printf "%s_%s %.1f\n", p, l, n ? u / n : 0}'
    fi
    us=$(($(cat "$CPU_T/$b.machine") - $(cat "$CPU_T/$a.machine")))
    awk -v u="$((us - named))" -v n="$ops" -v p="$prefix" 'BEGIN {printf "%s_other %.1f\n", p, n ? u / n : 0}'
    awk -v u="$us" -v n="$ops" -v p="$prefix" 'BEGIN {printf "%s_machine %.1f\n", p, n ? u / n : 0}'
}

# redis_per_op A B OPS NAME: "NAME us", Redis's CPU per operation, then
# "NAME_cmd COMMAND calls C us U" for every command that ran in the window:
# its calls and its time (commandstats, wall-clock) per operation.
redis_per_op() {
    local a=$CPU_T/$1.redis b=$CPU_T/$2.redis ops=$3 name=$4
    awk -v n="$ops" -v p="$name" '
        FNR == NR {a[$1] = $2; next}
        {d[$1] = $2 - a[$1]}
        END {
            if (n <= 0) n = 1
            printf "%s %.2f\n", p, d["used_cpu_us"] / n
            for (k in d) if (k ~ /_calls$/ && d[k] > 0) {
                c = substr(k, 9, length(k) - 14)
                printf "%s_cmd %s calls %.3f us %.2f\n", p, c, d[k] / n, d["cmdstat_" c "_usec"] / n
            }
        }' "$a" "$b" | sort
}

# tree_cpu_us PID: the CPU of a process and of every child it has had so far,
# in us: its own utime+stime, the cutime+cstime of the children it reaped
# (the kernel adds a child's time there when it is waited for), and each live
# child's utime+stime. For PostgreSQL's postmaster this is every backend,
# including those whose connection closed in between. A child reaped while
# this reads counts in neither its own file nor its parent's, or in both
# (backends exit as a client such as pgbench disconnects, and a read right
# after one lost a whole backend's CPU): the children are read first, the
# parent after, and all again until no child went away meanwhile.
tree_cpu_us() {
    local kids after total k gone tries=0
    while :; do
        kids=$(tree_children "$1")
        total=$({ for k in $kids; do awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$k/stat" 2>/dev/null || true; done
                  awk '{sub(/^.*\) /, ""); print $12 + $13 + $14 + $15}' "/proc/$1/stat" 2>/dev/null; } |
                awk -v t="$CPU_TCK" '{s += $1} END {printf "%.0f", s * 1e6 / t}')
        after=" $(tree_children "$1" | tr '\n' ' ') "
        gone=
        for k in $kids; do [[ $after == *" $k "* ]] || gone=1; done
        tries=$((tries + 1))
        [ -z "$gone" ] || [ $tries -ge 100 ] && break
    done
    echo "$total"
}
# tree_children PID: its children's pids, one per line (zombies included).
tree_children() { cat "/proc/$1/task/"*/children 2>/dev/null | tr ' ' '\n' | grep . || true; }
# pg_cpu_us: the stack's PostgreSQL (every process of its cluster), in us.
pg_cpu_us() { tree_cpu_us "$(head -1 "${SECKILL_STACK_DIR:-$ROOT/.stack}/pg/data/postmaster.pid")"; }
