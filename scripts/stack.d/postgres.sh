# shellcheck shell=bash disable=SC2086
# scripts/stack.d/postgres.sh: the PostgreSQL primary on 15432 (initdb, start,
# stop, TLS, pg_hba), its settings for a standby and pg_rewind, the
# synchronous_standby_names switch, the three login roles and their passwords
# (issue #19), the psql command.
# Sourced by scripts/stack; needs its settings (ROOT, STATE, PG_PORT,
# PG_STANDBY_PORT, PG_STANDBY_NAME, DEADLINE_S) and common.sh (stack_secrets,
# tls_ca).
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# --- PostgreSQL -------------------------------------------------------------

# initdb and postgres refuse to run as root: as root we run them as the
# 'postgres' user the Debian package creates. That user must be able to reach
# the data folder; when the checkout sits under a private folder (mktemp -d is
# mode 0700) the cluster lives in /var/tmp and .stack/pg links to it.
PG_LINK=$STATE/pg
pg_user() { if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi; }
# (from /, so tools run as postgres do not complain about a private cwd)
as_pg()   { if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
# as_pg_in SERVICE CMD...: as_pg, inside SERVICE's host (in_host): what starts a server
as_pg_in() {
    local svc=$1; shift
    if [ "$(id -u)" -eq 0 ]; then (cd / && in_host "$svc" runuser -u postgres -- "$@"); else (in_host "$svc" "$@"); fi
}
pg_bin()  { local v; v=$(ls /usr/lib/postgresql | sort -n | tail -n 1); echo "/usr/lib/postgresql/$v/bin/$1"; }

# Prints the real folder (never the link: postgres cannot walk through a
# private parent to follow it).
pg_home() {
    if [ -e "$PG_LINK" ]; then readlink -f "$PG_LINK"; return; fi
    mkdir -p "$PG_LINK"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$PG_LINK"
        if ! runuser -u postgres -- test -w "$PG_LINK"; then
            rmdir "$PG_LINK"
            local alt
            # (a stack in a state folder of its own, SECKILL_STACK_DIR, gets a
            # folder of its own too: the nemesis' beside the checkout's)
            alt=/var/tmp/seckill-pg-$(printf '%s' "$ROOT${SECKILL_STACK_DIR:+:$STATE}" | sha1sum | cut -c1-12)
            mkdir -p "$alt" && chown postgres: "$alt" && chmod 700 "$alt"
            ln -s "$alt" "$PG_LINK"
        fi
    fi
    readlink -f "$PG_LINK"
}

pg_ready_on() { "$(pg_bin pg_isready)" -h 127.0.0.1 -p "$1" -q; }
pg_ready()    { pg_ready_on $PG_PORT; }
# psql_on PORT ARGS...: psql as the superuser, through the Unix socket in the
# state folder (pg_hba.conf lets the superuser in there only, by peer)
psql_on()     { local port=$1; shift; as_pg "$(pg_bin psql)" -h "$(readlink -f "$PG_LINK")" -p "$port" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_su()     { psql_on $PG_PORT "$@"; }
# pg_q PORT SQL: one value
pg_q()        { psql_on "$1" -d postgres -tAc "$2" 2>/dev/null; }
pg_is_primary_on() { [ "$(pg_q "$1" 'SELECT pg_is_in_recovery()')" = f ]; }
# pg_streaming PORT NAME: the server on PORT sends its WAL to NAME (an application_name)
pg_streaming() { [ "$(pg_q "$1" "SELECT state FROM pg_stat_replication WHERE application_name = '$2'")" = streaming ]; }
# pg_replayed PORT LSN: the standby on PORT has replayed up to LSN
pg_replayed()  { [ "$(pg_q "$1" "SELECT pg_last_wal_replay_lsn() >= '$2'::pg_lsn")" = t ]; }
# pg_control DATA FIELD: one line of pg_controldata
pg_control()   { as_pg env LC_ALL=C "$(pg_bin pg_controldata)" -D "$1" 2>/dev/null | sed -n "s/^$2: *//p"; }
# pg_timeline DATA: the newest timeline DATA knows (pg_control, or a history
# file a promotion wrote and no checkpoint has recorded yet)
pg_timeline() {
    local t h n
    t=$(pg_control "$1" "Latest checkpoint's TimeLineID"); t=${t:-0}
    for h in "$1"/pg_wal/*.history; do
        [ -e "$h" ] || continue
        n=$((16#$(basename "$h" .history)))
        [ "$n" -le "$t" ] || t=$n
    done
    echo "$t"
}

# Start options. wal_log_hints: pg_rewind needs it on its target (failback);
# wal_keep_size: WAL a standby that was away for a while still finds. The
# standby runs with both as well: it becomes a primary after a promotion, and a
# pg_rewind target in the failback. cluster_name is the walreceiver's
# application_name (synchronous_standby_names matches it).
# wal_retrieve_retry_interval: a standby whose primary restarted reconnects
# within 1 s, not 5 (the primary's commits wait for it meanwhile).
# (these two also in postgresql.auto.conf, see pg_start_primary)
PG_FILE_SETTINGS=(wal_log_hints=on wal_keep_size=256MB)
# TLS (both servers share the certificate: same address) and SCRAM.
# pg_stat_statements: each statement's calls and time, which bench/wholesale
# counts per sold order (it ships with the server package).
pg_opts_common() {
    echo "-c ssl=on -c ssl_cert_file=$1/tls/server.crt -c ssl_key_file=$1/tls/server.key" \
         "-c password_encryption=scram-sha-256 -c shared_preload_libraries=pg_stat_statements"
}
pg_opts_primary() {
    echo "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $1 -c max_connections=200 -c fsync=on" \
         "-c wal_log_hints=on -c wal_keep_size=256MB $(pg_opts_common "$1")"
}
pg_opts_standby() {
    echo "-p $PG_STANDBY_PORT -c listen_addresses=127.0.0.1 -k $1 -c max_connections=200 -c fsync=on" \
         "-c hot_standby=on -c cluster_name=$PG_STANDBY_NAME -c wal_log_hints=on -c wal_keep_size=256MB" \
         "-c wal_retrieve_retry_interval=1s $(pg_opts_common "$1")"
}

# pg_start DATA LOG OPTIONS NAME
pg_start() {
    pg_write_hba "$1"
    as_pg_in "$4" "$(pg_bin pg_ctl)" -D "$1" -l "$2" -w -t "$DEADLINE_S" -o "$3" start >/dev/null \
        || fail_with_log "$4 failed to start" "$2"
}
# pg_stop DATA MODE NAME: fast (a clean shutdown) or immediate (a crash)
pg_stop() {
    if [ ! -e "$1/PG_VERSION" ] || ! pid_alive "$1/postmaster.pid"; then
        [ "$2" = immediate ] && say "$3 not running"
        return 0
    fi
    as_pg "$(pg_bin pg_ctl)" -D "$1" -m "$2" -w -t "$DEADLINE_S" stop >/dev/null || die "$3: pg_ctl stop -m $2 failed"
    if [ "$2" = immediate ]; then say "$3 killed (pg_ctl stop -m immediate)"; else say "$3 stopped"; fi
}

# pg_state PORT DATA: primary | standby | down
pg_state() {
    local r=
    if pid_alive "$2/postmaster.pid" && pg_ready_on "$1"; then r=$(pg_q "$1" 'SELECT pg_is_in_recovery()'); fi
    case $r in f) echo primary ;; t) echo standby ;; *) echo down ;; esac
}

# pg_ha_primary: which PostgreSQL holds the primary role: 15432 (home), or
# 15433 after a promotion. A running server answers for itself (both running as
# primaries: 15433, the promoted one, wins); stopped ones are judged by their
# files: standby.signal, then the newer timeline.
pg_ha_primary() {
    local home data sb a b
    home=$(readlink -f "$PG_LINK"); data=$home/data; sb=$home/standby
    if [ ! -s "$sb/PG_VERSION" ]; then echo $PG_PORT; return 0; fi
    a=$(pg_state $PG_PORT "$data"); b=$(pg_state $PG_STANDBY_PORT "$sb")
    if [ "$b" = primary ]; then echo $PG_STANDBY_PORT; return 0; fi
    if [ "$a" = primary ]; then echo $PG_PORT; return 0; fi
    if [ ! -e "$sb/standby.signal" ] && [ "$b" = down ] \
        && { [ -e "$data/standby.signal" ] || [ "$(pg_timeline "$sb")" -gt "$(pg_timeline "$data")" ]; }; then
        echo $PG_STANDBY_PORT
    else
        echo $PG_PORT
    fi
}

# synchronous_standby_names on 15432: 'seckill_standby' while the standby
# streams, empty otherwise (else every commit waits for it forever).
pg_sync_is_on()  { [ "$(pg_q $PG_PORT "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$PG_STANDBY_NAME'")" = sync ]; }
pg_sync_is_off() { local v; v=$(psql_on $PG_PORT -d postgres -tAc 'SHOW synchronous_standby_names') && [ -z "$v" ]; }
pg_sync_set() {
    if [ "$(pg_q $PG_PORT 'SHOW synchronous_standby_names')" != "$PG_STANDBY_NAME" ]; then
        psql_su -d postgres -c "ALTER SYSTEM SET synchronous_standby_names = '$PG_STANDBY_NAME'" \
            -c 'SELECT pg_reload_conf()' >/dev/null
        say "postgres: synchronous_standby_names = '$PG_STANDBY_NAME'"
    fi
    wait_for "postgres (synchronous replication to $PG_STANDBY_NAME)" "$(pg_home)/postgres.log" "" pg_sync_is_on
}
# pg_sync_clear WHY: on 15432, when it answers as a primary
pg_sync_clear() {
    local data; data=$(readlink -f "$PG_LINK")/data
    pid_alive "$data/postmaster.pid" && pg_ready && pg_is_primary_on $PG_PORT || return 0
    [ -n "$(pg_q $PG_PORT 'SHOW synchronous_standby_names')" ] || return 0
    psql_su -d postgres -c 'ALTER SYSTEM RESET synchronous_standby_names' -c 'SELECT pg_reload_conf()' >/dev/null
    wait_for "postgres (synchronous_standby_names cleared)" "$(readlink -f "$PG_LINK")/postgres.log" "" pg_sync_is_off
    say "postgres: synchronous_standby_names cleared ($1)"
}
# pg_sync_fix: on when the standby runs and streams, else cleared.
pg_sync_fix() {
    local sb; sb=$(pg_home)/standby
    if pid_alive "$sb/postmaster.pid" && [ -e "$sb/standby.signal" ]; then
        if poll 30 pg_streaming $PG_PORT "$PG_STANDBY_NAME"; then pg_sync_set; return 0; fi
        say "pg-standby runs but does not stream from 127.0.0.1:$PG_PORT"
    fi
    pg_sync_clear "no standby streams"
}

# --- PostgreSQL roles, passwords, pg_hba (issue #19) --------------------------
#
# One login role per program (producer, consumer, admin; admin owns the
# database and the schema), each with a random password generated on the
# first `up` into .stack/secrets/pg-<role> (mode 0600, folder 0700) and
# stored SCRAM-SHA-256; .stack/pgpass holds all three for psql
# (PGPASSFILE=.stack/pgpass psql -h 127.0.0.1 -p 15432 -U admin -d seckill).
# pg_hba.conf: TCP by password only; the stack's own superuser through the
# Unix socket in the state folder, by peer (pg_ident map "stack": the OS user
# this script runs postgres as). A stack from before (one role seckill owning
# everything, trust) is upgraded in place by `up`: ownership to admin, role
# seckill dropped, pg_hba.conf rewritten; no data is lost.
PGPASS=$STATE/pgpass
PG_ROLES=(producer consumer admin)

# pg_secrets: the password files (made once) and the pgpass file (rewritten).
pg_secrets() {
    local r pw
    stack_secrets pg postgres role "${PG_ROLES[@]}"
    (umask 077
     for r in "${PG_ROLES[@]}"; do
         pw=$(<"$SECRETS_DIR/pg-$r")
         printf '127.0.0.1:*:*:%s:%s\nlocalhost:*:*:%s:%s\n' "$r" "$pw" "$r" "$pw"
     done >"$PGPASS.new")
    mv "$PGPASS.new" "$PGPASS"
}

# pg_tls: the development CA (made once; its key stays in .stack/tls, mode
# 0600) and a server certificate it signs for 127.0.0.1 and localhost (made
# again when missing, not signed by the CA or expiring within a day), copied
# where postgres reads it (the key must be its own, 0600). Clients verify it
# with sslmode=verify-full against .stack/tls/ca.crt (postgres.sslrootcert).
pg_tls() {
    local home=$1 log=$STATE/tls/openssl.log
    tls_ca
    if ! tls_cert_ok server; then
        (umask 077
         openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
             -keyout "$TLS_DIR/server.key" -out "$TLS_DIR/server.csr" >"$log" 2>&1 \
         && printf 'subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth\n' >"$TLS_DIR/server.ext" \
         && openssl x509 -req -in "$TLS_DIR/server.csr" -CA "$TLS_DIR/ca.crt" -CAkey "$TLS_DIR/ca.key" \
             -CAcreateserial -days 825 -extfile "$TLS_DIR/server.ext" -out "$TLS_DIR/server.crt" >>"$log" 2>&1) \
            || fail_with_log "openssl could not make the server certificate" "$log"
        rm -f "$TLS_DIR/server.csr"
        say "postgres: a server certificate for 127.0.0.1, localhost in $TLS_DIR/server.crt"
    fi
    chmod 644 "$TLS_DIR/ca.crt" "$TLS_DIR/server.crt"
    as_pg mkdir -p -m 700 "$home/tls"
    if ! cmp -s "$TLS_DIR/server.crt" "$home/tls/server.crt" 2>/dev/null; then
        # shellcheck disable=SC2016  # ($1 is the inner shell's)
        as_pg sh -c 'umask 077; cat >"$1.new" && mv "$1.new" "$1"' sh "$home/tls/server.key" <"$TLS_DIR/server.key"
        # shellcheck disable=SC2016
        as_pg sh -c 'umask 022; cat >"$1.new" && mv "$1.new" "$1"' sh "$home/tls/server.crt" <"$TLS_DIR/server.crt"
    fi
}

# pg_write_hba DATA: pg_hba.conf and pg_ident.conf of a cluster (both
# rewritten on every up and after a base backup or a rewind).
pg_write_hba() {
    as_pg tee "$1/pg_hba.conf" >/dev/null <<EOH
# Written by scripts/stack (again on every up: edits here are lost).
# The stack's superuser: the Unix socket in the state folder only, by peer,
# as the OS user the stack runs postgres as (map "stack" in pg_ident.conf);
# replication (pg_basebackup, the standby, pg_rewind) goes the same way.
local  all          postgres                 peer map=stack
local  replication  postgres                 peer map=stack
# Everyone else: TCP over TLS with a SCRAM-SHA-256 password, nothing without
# either (no line matches a plain TCP connection: it is refused).
hostssl  all        all       127.0.0.1/32   scram-sha-256
hostssl  all        all       ::1/128        scram-sha-256
EOH
    as_pg tee "$1/pg_ident.conf" >/dev/null <<EOI
# Written by scripts/stack: the OS user that runs the stack's tools is postgres.
stack  $(pg_user)  postgres
EOI
}

# pg_roles: the three login roles with the passwords of the files, the
# database owned by admin; a stack of the old layout (role seckill) upgraded.
# Passwords go on psql's stdin (printf is a builtin): never in a command line
# that ps shows.
pg_roles() {
    local r
    {
        echo "SET password_encryption = 'scram-sha-256';"
        for r in "${PG_ROLES[@]}"; do
            printf "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s') THEN CREATE ROLE %s LOGIN; END IF; END \$\$;\n" "$r" "$r"
            printf "ALTER ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD '%s';\n" "$r" "$(<"$SECRETS_DIR/pg-$r")"
        done
    } | psql_su -d postgres -f - >/dev/null
    if [ -z "$(pg_q $PG_PORT "SELECT 1 FROM pg_database WHERE datname = 'seckill'")" ]; then
        psql_su -d postgres -c "CREATE DATABASE seckill OWNER admin"
    fi
    if [ -n "$(pg_q $PG_PORT "SELECT 1 FROM pg_roles WHERE rolname = 'seckill'")" ]; then
        # REASSIGN OWNED covers the database itself (a shared object) too.
        say "postgres: upgrading a stack of the old layout: role seckill's objects to admin, role seckill dropped"
        psql_su -d seckill -c 'REASSIGN OWNED BY seckill TO admin' -c 'DROP OWNED BY seckill' >/dev/null
        psql_su -d postgres -c 'REASSIGN OWNED BY seckill TO admin' -c 'DROP OWNED BY seckill' \
            -c 'DROP ROLE seckill' >/dev/null
    fi
    psql_su -d postgres -c 'ALTER DATABASE seckill OWNER TO admin' >/dev/null
    # The operator may end a stuck session of the programs (not a
    # superuser's): the tests force reconnections this way.
    psql_su -d postgres -c 'SET client_min_messages = warning' -c 'GRANT pg_signal_backend TO admin' >/dev/null
}

# pg_start_primary: 15432 runs as the primary (initdb the first time); never
# while 15433 holds that role. Options as pg_opts_primary.
pg_start_primary() {
    local home data opts
    home=$(pg_home); data=$home/data; opts=$(pg_opts_primary "$home")
    pg_tls "$home"
    if [ ! -s "$data/PG_VERSION" ]; then
        say "initdb $data"
        as_pg "$(pg_bin initdb)" -D "$data" -U postgres --auth-local=peer --auth-host=reject -E UTF8 \
            --locale=C.UTF-8 >"$home/initdb.log" 2>&1 || fail_with_log "initdb failed" "$home/initdb.log"
    fi
    pg_write_hba "$data"
    if [ "$(pg_ha_primary)" = $PG_STANDBY_PORT ]; then
        die "pg-standby (127.0.0.1:$PG_STANDBY_PORT) was promoted and is the primary; postgres (127.0.0.1:$PG_PORT) is not started as a second primary: run scripts/stack failback"
    fi
    if ! pid_alive "$data/postmaster.pid"; then
        pg_start "$data" "$home/postgres.log" "$opts" postgres
    fi
    wait_for "postgres" "$home/postgres.log" "$data/postmaster.pid" pg_ready
    # (a running one reads the files written above: an old stack's trust ends here)
    as_pg "$(pg_bin pg_ctl)" -D "$data" reload >/dev/null
    pg_is_primary_on $PG_PORT \
        || die "postgres (127.0.0.1:$PG_PORT) runs as a standby (an interrupted failback?): run scripts/stack failback"
    # In the files too: pg_rewind recovers a crashed target in single-user
    # mode, without our options (it would record wal_log_hints off, and its
    # checkpoint would recycle the WAL pg_rewind then reads).
    local kv
    for kv in "${PG_FILE_SETTINGS[@]}"; do
        grep -Fxq "${kv%%=*} = '${kv#*=}'" "$data/postgresql.auto.conf" \
            || psql_su -d postgres -c "ALTER SYSTEM SET ${kv%%=*} = '${kv#*=}'" >/dev/null
    done
    if [ "$(pg_q $PG_PORT 'SHOW wal_log_hints')" != on ] || [ "$(pg_q $PG_PORT 'SHOW ssl')" != on ] ||
       [ "$(pg_q $PG_PORT 'SHOW shared_preload_libraries')" != pg_stat_statements ]; then
        say "postgres runs without wal_log_hints=on (pg_rewind needs it for a failback), TLS or pg_stat_statements: restarting it"
        as_pg_in postgres "$(pg_bin pg_ctl)" -D "$data" -l "$home/postgres.log" -w -t "$DEADLINE_S" -m fast -o "$opts" \
            restart >/dev/null || fail_with_log "postgres failed to restart" "$home/postgres.log"
        wait_for "postgres" "$home/postgres.log" "$data/postmaster.pid" pg_ready
    fi
    pg_sync_fix
}

pg_up() {
    pg_secrets
    pg_start_primary
    # Roles and database for the application, then the schema (as admin,
    # by password over TCP like any client).
    pg_roles
    # In a schema of its own: the migrations revoke every function in public
    # from PUBLIC, which only an extension's owner may do for its functions.
    psql_su -d seckill -q >/dev/null <<'SQL'
CREATE SCHEMA IF NOT EXISTS pgss;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements') THEN
        CREATE EXTENSION pg_stat_statements SCHEMA pgss;
    ELSIF (SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_stat_statements') <> 'pgss' THEN
        ALTER EXTENSION pg_stat_statements SET SCHEMA pgss;
    END IF;
END $$;
GRANT USAGE ON SCHEMA pgss TO admin;
SQL
    PGPASSFILE=$PGPASS "$ROOT/scripts/migrate" -h 127.0.0.1 -p $PG_PORT -U admin -d seckill
    say "postgres up on 127.0.0.1:$PG_PORT (database seckill; roles producer, consumer, admin; passwords in $SECRETS_DIR, PGPASSFILE=$PGPASS)"
}

stop_postgres() { pg_stop "$(readlink -f "$PG_LINK")/data" fast postgres; }
kill_postgres() { pg_stop "$(readlink -f "$PG_LINK")/data" immediate postgres; }

# pg_role_note PORT: the role part of a status line (cmd_status).
pg_role_note() {
    local sync
    case $(pg_q "$1" 'SELECT pg_is_in_recovery()') in
        f) sync=$(pg_q "$1" 'SHOW synchronous_standby_names') || sync=
           [ -z "$sync" ] || sync=", synchronous_standby_names '$sync'"
           echo "role primary$sync" ;;
        t) echo "role standby, $(pg_q "$1" "SELECT coalesce((SELECT status || ' from port ' || sender_port FROM pg_stat_wal_receiver), 'no wal receiver')")" ;;
        *) echo "role unknown" ;;
    esac
}
