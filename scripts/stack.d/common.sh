# shellcheck shell=bash
# scripts/stack.d/common.sh: the helpers every engine's part uses: say/die,
# installing the Debian packages, waiting for a service, pid files (stop, kill),
# the password files in .stack/secrets and the development CA in .stack/tls
# (PostgreSQL and Kafka share it).
# Sourced by scripts/stack (first of the parts); needs its settings (STATE,
# DEADLINE_S, PACKAGES) and set -euo pipefail.

say()  { printf 'stack: %s\n' "$*"; }
die()  { printf 'stack: error: %s\n' "$*" >&2; exit 1; }

# --- packages ---------------------------------------------------------------

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    # Inside the hosts of scripts/hosts (the nemesis runs `up --ha` there) no
    # package server answers: apt-get would only fail, late and obscurely. The
    # packages come from a plain `up` on the machine, before any host exists.
    if in_a_host; then
        die "missing Debian packages: ${missing[*]}; this runs inside a network namespace" \
            "(scripts/hosts), where apt-get cannot reach a package server: run scripts/stack up" \
            "outside the namespaces first (as root; it installs them all)"
    fi
    [ "$(id -u)" -eq 0 ] || die "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # The postgresql package starts a system cluster on 5432; we leave it be
    # and run our own on $PG_PORT.
    apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >"$STATE/apt.log" 2>&1 \
        || { tail -n 20 "$STATE/apt.log" >&2; die "apt-get install failed"; }
}

# in_a_host: this shell runs in a host of scripts/hosts. The nemesis says so
# through $SECKILL_STACK_HOSTS; `ip netns identify` also catches a hand-run
# `scripts/hosts exec HOST scripts/stack up` (it names the namespace this
# process is in when /run/netns lists it, the machine's own is not listed).
in_a_host() {
    [ -n "${SECKILL_STACK_HOSTS:-}" ] || [ -n "$(ip netns identify 2>/dev/null)" ]
}

# --- helpers ----------------------------------------------------------------

# in_host SERVICE PROGRAM ARGS...: exec PROGRAM (not a shell function) in
# place of this shell; inside SERVICE's host when $SECKILL_STACK_HOSTS names
# one ("SERVICE=HOST ...", hosts of scripts/hosts: the nemesis, issue #32),
# else right here. The engine still binds and dials 127.0.0.1: scripts/hosts
# publish carries each port to its host. Call it in a subshell,
# ( in_host redis setsid nohup redis-server ... ) &, so $! is the engine's pid.
in_host() {
    local svc=$1 kv h=; shift
    for kv in ${SECKILL_STACK_HOSTS:-}; do [ "${kv%%=*}" = "$svc" ] && h=${kv#*=}; done
    [ -n "$h" ] || exec "$@"
    exec "$ROOT/scripts/hosts" exec "$h" "$@"
}

# wait_for DESCRIPTION LOGFILE PIDFILE CMD...: run CMD until it succeeds or the
# deadline passes; fail early (with the log) if the process died meanwhile.
# With a PIDFILE, success also needs that process alive: a service on the same
# port that is not ours (a leftover from another checkout) must not pass.
wait_for() {
    local what=$1 log=$2 pidfile=$3; shift 3
    local end=$((SECONDS + DEADLINE_S))
    until "$@" >/dev/null 2>&1 && { [ -z "$pidfile" ] || pid_alive "$pidfile"; }; do
        if [ -n "$pidfile" ] && ! pid_alive "$pidfile"; then
            fail_with_log "$what exited during start-up" "$log"
        fi
        [ $SECONDS -lt $end ] || fail_with_log "$what did not answer within ${DEADLINE_S}s" "$log"
        sleep 0.2
    done
}

fail_with_log() {
    printf 'stack: error: %s; last lines of %s:\n' "$1" "$2" >&2
    tail -n 30 "$2" >&2 2>/dev/null || true
    exit 1
}

pid_of()    { [ -s "$1" ] && head -n 1 "$1" 2>/dev/null; }
pid_alive() { local p; p=$(pid_of "$1") && [ -n "$p" ] && pid_running "$p"; }
# pid_running PID: alive and not a zombie (one that exited and waits to be
# reaped: the reaper of orphans may take a couple of seconds)
pid_running() {
    local st
    kill -0 "$1" 2>/dev/null || return 1
    { st=$(</proc/"$1"/stat); } 2>/dev/null || return 0
    st=${st##*) }
    [ "${st%% *}" != Z ]
}

# poll SECONDS CMD...: like wait_for, but a timeout is no error: returns 1.
poll() {
    local end=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.2
    done
}

# Wall-clock milliseconds, and "1.234 s" since such a start.
now_ms()  { date +%s%3N; }
took()    { local ms=$(($(now_ms) - $1)); printf '%d.%03d s' $((ms / 1000)) $((ms % 1000)); }
# "rss 12.3 MB" of a pid (empty when it is gone)
rss_of()  { local kb; kb=$(ps -o rss= -p "$1" 2>/dev/null | tr -d ' ') && [ -n "$kb" ] \
                && printf 'rss %d.%d MB' $((kb / 1024)) $((kb % 1024 * 10 / 1024)); }

# stop_pidfile NAME PIDFILE: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pidfile() {
    local name=$1 pidfile=$2 pid end killed=
    if ! pid_alive "$pidfile"; then rm -f "$pidfile"; return 0; fi
    pid=$(pid_of "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    end=$((SECONDS + 30))
    while pid_running "$pid"; do
        if [ -z "$killed" ] && [ $SECONDS -ge $end ]; then
            say "$name did not stop in 30s, killing"
            kill -KILL "$pid" 2>/dev/null || true
            killed=1
        fi
        sleep 0.1
    done
    rm -f "$pidfile"
    say "$name stopped"
}

# kill_pidfile NAME PIDFILE: SIGKILL (a crash), wait until the process is gone.
kill_pidfile() {
    local name=$1 pidfile=$2 pid end
    if ! pid_alive "$pidfile"; then rm -f "$pidfile"; say "$name not running"; return 0; fi
    pid=$(pid_of "$pidfile")
    kill -KILL "$pid" 2>/dev/null || true
    end=$((SECONDS + 10))
    while pid_running "$pid"; do
        [ $SECONDS -lt $end ] || die "$name (pid $pid) survived SIGKILL"
        sleep 0.1
    done
    rm -f "$pidfile"
    say "$name killed (pid $pid)"
}

# --- password files and the development CA (Redis, PostgreSQL, Kafka) -------

SECRETS_DIR=$STATE/secrets

# stack_secrets PREFIX SERVICE KIND NAME...: the password files
# $SECRETS_DIR/PREFIX-NAME (folder 0700, files 0600), each made once, a random
# 32 characters or more; SERVICE and KIND ("user", "role") for the message.
stack_secrets() {
    local prefix=$1 service=$2 kind=$3 n pw f; shift 3
    (umask 077; mkdir -p "$SECRETS_DIR")
    chmod 700 "$SECRETS_DIR"
    for n in "$@"; do
        f=$SECRETS_DIR/$prefix-$n
        if [ ! -s "$f" ]; then
            pw=$(openssl rand -base64 32 | tr -d '/+=\n')
            [ ${#pw} -ge 32 ] || die "openssl rand gave no password"
            (umask 077; printf '%s\n' "$pw" >"$f.new")
            mv "$f.new" "$f"
            say "$service: a password for $kind $n in $f"
        fi
        chmod 600 "$f"
    done
}

# tls_ca: the development CA in $TLS_DIR (see pg_tls and kafka_tls).
TLS_DIR=$STATE/tls
tls_ca() {
    local log=$TLS_DIR/openssl.log
    (umask 077; mkdir -p "$TLS_DIR")
    if [ ! -s "$TLS_DIR/ca.crt" ] || [ ! -s "$TLS_DIR/ca.key" ]; then
        (umask 077; openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
            -subj "/CN=seckill development CA" -keyout "$TLS_DIR/ca.key" -out "$TLS_DIR/ca.crt" >"$log" 2>&1) \
            || fail_with_log "openssl could not make the development CA" "$log"
        rm -f "$TLS_DIR/server.crt" "$TLS_DIR/kafka.crt"
        say "a development CA in $TLS_DIR/ca.crt (key ca.key, mode 0600)"
    fi
    chmod 644 "$TLS_DIR/ca.crt"
}
# tls_cert_ok NAME: $TLS_DIR/NAME.crt exists, the CA signed it and it is good
# for at least another day.
tls_cert_ok() {
    [ -s "$TLS_DIR/$1.crt" ] && openssl verify -CAfile "$TLS_DIR/ca.crt" "$TLS_DIR/$1.crt" >/dev/null 2>&1 \
        && openssl x509 -checkend 86400 -noout -in "$TLS_DIR/$1.crt" >/dev/null 2>&1
}
