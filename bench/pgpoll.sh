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
    printf '%s\n' "$1" >&"${PGPOLL[1]}" || return 1
    IFS=' ' read -t 30 -r -a PGPOLL_ROW <&"${PGPOLL[0]}" || return 1
    [ "${#PGPOLL_ROW[@]}" -gt 0 ] || return 1
    for f in "${PGPOLL_ROW[@]}"; do
        [[ $f =~ ^-?[0-9]+$ ]] || { echo "pgpoll: ${PGPOLL_ROW[*]}" >&2; return 1; }
    done
}

pgpoll_close() {
    [ -n "${PGPOLL_PID:-}" ] || return 0
    printf '\\q\n' >&"${PGPOLL[1]}" 2>/dev/null || true
    wait "$PGPOLL_PID" 2>/dev/null || true
}
