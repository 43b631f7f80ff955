# tests/nemesis/checks.sh: what tests/cli/test_nemesis.sh and
# test_nemesis_cluster.sh share, sourced after tests/tap.sh (which needs $T):
# a run of scripts/nemesis against the release build (the clock faults
# preload libfaketime, which ASan refuses to follow), its verdict, its
# summary line, and the checks that nothing it made is left. The caller sets
# ROOT (and is in it), T, SECKILL_HOSTS_STATE ($T/hosts) and PFX.

# nemesis_run WHAT ARGS...: scripts/nemesis ARGS, its output in $T/out and
# its report in $T/nemesis.json; passes when it exits 0 (nothing broken).
nemesis_run() {
    local what=$1 st
    shift
    scripts/nemesis "$@" --build build --json "$T/nemesis.json" >"$T/out" 2>&1
    st=$?
    if [ $st -eq 0 ]; then pass "$what: exit 0, nothing broken"
    else fail "$what: exit 0, nothing broken (exit $st)" "$(tail -n 40 "$T/out")"; fi
}

# nemesis_summary FAULTS: the run's last line says every harm is 0 and
# reconcile clean; FAULTS, a regular expression, is what its faults'
# parentheses must hold.
nemesis_summary() {
    local line re
    line=$(tail -n 1 "$T/out")
    re='^nemesis: seed [0-9]+, [0-9]+ faults \('"$1"'\), accepted [0-9]+, persisted [0-9]+, lost 0, duplicated 0, oversold 0, unexpected 0, info [0-9]+, recovered [0-9]+, payments [0-9]+, cancels [0-9]+, expired [0-9]+, returned twice 0, not returned 0, payments lost 0, paid resold 0, refused brought back 0, paid late by the burst 0, reconcile clean$'
    if [[ $line =~ $re ]]; then pass "the summary line: $line"
    else fail "the summary line" "got: $line"; fi
}

# nemesis_nothing_left: no namespace of the run, and no state or engine of
# it (the hosts' files, the stack's folder and processes: PostgreSQL and
# Kafka name their folder in their command line).
nemesis_nothing_left() {
    is "no namespace of the run is left" "$(ip netns list | grep -c "^$PFX-")" 0
    is "no state or engine of the run is left (hosts' files, the stack's folder and processes)" \
        "$(ls "$SECKILL_HOSTS_STATE" "$SECKILL_HOSTS_STATE.ports" .stack/nemesis 2>/dev/null | wc -l) $(pgrep -fc -- "$ROOT/.stack/nemesis/")" "0 0"
}
