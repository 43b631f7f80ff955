# shellcheck shell=bash
# bench/pgpoll.sh, sourced by the benches: one psql session for the queries
# a bench repeats while it waits for the consumer.
#
# A psql per check costs a connection and a SCRAM handshake on both sides
# (PBKDF2, 4096 rounds each); five or ten checks a second took CPU from the
# drain being measured, on the same two cores. A check should also cost the
# same at any point of the wait: count the rows at the end, not meanwhile.
#
#   pgpoll_open CMD...   start the session (psql with -t -A -F ' ')
#   pgpoll SQL           run SQL, one row; its fields in PGPOLL_ROW; fails
#                        when no row of plain numbers came back within 30 s
#   pgpoll_close         end it

pgpoll_open() {
    coproc PGPOLL { "$@" 2>&1; }
}

pgpoll() {
    local f
    printf '%s\n' "$1" 1>&"${PGPOLL[1]}" || return 1
    IFS=' ' read -t 30 -r -a PGPOLL_ROW <&"${PGPOLL[0]}" || return 1
    [ "${#PGPOLL_ROW[@]}" -gt 0 ] || return 1
    for f in "${PGPOLL_ROW[@]}"; do
        [[ $f =~ ^-?[0-9]+$ ]] || { echo "pgpoll: ${PGPOLL_ROW[*]}" >&2; return 1; }
    done
}

pgpoll_close() {
    # End of input ends the session (psql, or whatever CMD was); the fd is
    # unset once bash has reaped the session, and then there is nothing to do.
    [ -n "${PGPOLL_PID:-}" ] && [ -n "${PGPOLL[1]:-}" ] || return 0
    local pid=$PGPOLL_PID fd=${PGPOLL[1]}
    exec {fd}>&-
    wait "$pid" 2>/dev/null || true
}
