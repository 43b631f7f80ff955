# shellcheck shell=bash disable=SC2086
# scripts/stack.d/kafka-security.sh: Kafka's TLS and SASL SCRAM: the brokers'
# certificate, the SCRAM users and their client settings, the listeners, the
# ACLs per program, the kafka-user and kcat commands.
# Sourced by scripts/stack; needs its settings (STATE, KAFKA_PORT,
# KAFKA_CONTROLLER_PORT, the topics), common.sh (stack_secrets, tls_ca) and
# kafka.sh (kafka_java, the K_* variables of use_kafka / use_kafka3).
# (SC2086 is off: the unquoted ports and names, $REDIS_PORT and the like, are
# settings of scripts/stack, fixed and without spaces, which shellcheck cannot
# see from here.)

# --- Kafka security ------------------------------------------------------------
# Clients reach a broker on one listener, CLIENT: TLS (a certificate the
# stack's CA signs for 127.0.0.1; librdkafka checks the name), then SASL
# SCRAM-SHA-512 as a user of their own. The brokers talk to each other on
# that listener too, as user broker. The controllers' listener takes TLS with
# a client certificate instead (SCRAM cannot serve there: its credentials
# live in the metadata the controllers serve), so the broker is
# User:CN=kafka-broker to them. The StandardAuthorizer allows what the ACLs
# below grant and nothing else; broker, stack and the certificate's name are
# super users. docs/security.md has the table. payment is not a program of
# ours: it stands for the shop's payment service, which publishes payments
# (kafka.payments_topic) and may do nothing else (issue #44).
KAFKA_USERS=(broker stack producer consumer admin payment)
# The users every storage formatted before kafka_scram_users existed has
# (their credentials came with the format, or with kafka_scram_upgrade).
KAFKA_USERS_FIRST=(broker stack producer consumer admin)
KAFKA_SCRAM=SCRAM-SHA-512
KAFKA_CERT_CN=kafka-broker
# Client settings for the stack's own tools, one pair per user (mode 0600):
# USER.properties for the Java tools (--command-config), USER.kcat for kcat -F.
KAFKA_CLIENTS=$STATE/kafka-clients
# Bump when kafka_acls grants something new: `up` applies the ACLs again.
# v4: the payment user, and the consumer's read of the payments topic.
# v5: make demo's payments topics (seckill.demopay.), for payment and consumer.
KAFKA_ACL_VERSION=5

kafka_password() { cat "$SECRETS_DIR/kafka-$1"; }

kafka_secrets() {
    stack_secrets kafka kafka user "${KAFKA_USERS[@]}"; mac_key order-key-1 orders; mac_key payment-key-1 payments
    # The waiting room's admissions (admission-key-1: the producers sign and
    # check them; producer.admission_keys): not Kafka's either, made here
    # with the other MAC keys.
    mac_key admission-key-1 admissions
}

# mac_key NAME WHAT: a key MACs are made with, not a Kafka password: a stolen
# topic password must be able to forge neither orders (order-key-1: the
# producers sign, the consumers check; kafka.order_keys) nor payments
# (payment-key-1: the shop's payment service signs, the consumers check;
# kafka.payment_keys; docs/security.md). 32 random bytes as 64 hex digits
# (a text file: no trailing byte that looks like a newline), made once.
mac_key() {
    local f=$SECRETS_DIR/$1
    (umask 077; mkdir -p "$SECRETS_DIR")
    if [ ! -s "$f" ]; then
        (umask 077; openssl rand -hex 32 >"$f.new")
        mv "$f.new" "$f"
        say "$2: a signing key in $f"
    fi
    chmod 600 "$f"
}

# kafka_tls: the brokers' certificate (made again when missing, not signed by
# the CA or expiring within a day): for 127.0.0.1 and localhost as a server,
# and as CN=kafka-broker a client of the controllers. Kafka reads key and
# chain from one PEM file (PKCS#8 key, unencrypted, mode 0600).
kafka_tls() {
    local log=$TLS_DIR/openssl.log
    tls_ca
    if ! tls_cert_ok kafka || [ ! -s "$TLS_DIR/kafka.pem" ]; then
        (umask 077
         openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$KAFKA_CERT_CN" \
             -keyout "$TLS_DIR/kafka.key" -out "$TLS_DIR/kafka.csr" >"$log" 2>&1 \
         && printf 'subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth, clientAuth\n' \
             >"$TLS_DIR/kafka.ext" \
         && openssl x509 -req -in "$TLS_DIR/kafka.csr" -CA "$TLS_DIR/ca.crt" -CAkey "$TLS_DIR/ca.key" \
             -CAcreateserial -days 825 -extfile "$TLS_DIR/kafka.ext" -out "$TLS_DIR/kafka.crt" >>"$log" 2>&1 \
         && openssl pkcs8 -topk8 -nocrypt -in "$TLS_DIR/kafka.key" -out "$TLS_DIR/kafka.pem.new" >>"$log" 2>&1 \
         && cat "$TLS_DIR/kafka.crt" "$TLS_DIR/ca.crt" >>"$TLS_DIR/kafka.pem.new" \
         && mv "$TLS_DIR/kafka.pem.new" "$TLS_DIR/kafka.pem") \
            || fail_with_log "openssl could not make the Kafka certificate" "$log"
        rm -f "$TLS_DIR/kafka.csr"
        chmod 644 "$TLS_DIR/kafka.crt"
        say "kafka: a broker certificate for 127.0.0.1, localhost in $TLS_DIR/kafka.crt"
    fi
}

# kafka_clients: the client settings of each user but broker, rewritten on
# every up (a password file may have been rotated).
kafka_clients() {
    local u pw
    (umask 077; mkdir -p "$KAFKA_CLIENTS")
    for u in "${KAFKA_USERS[@]}"; do
        [ "$u" = broker ] && continue
        pw=$(kafka_password "$u")
        (umask 077
         cat >"$KAFKA_CLIENTS/$u.properties.new" <<EOP
security.protocol=SASL_SSL
sasl.mechanism=$KAFKA_SCRAM
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$u" password="$pw";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
EOP
         cat >"$KAFKA_CLIENTS/$u.kcat.new" <<EOP
security.protocol=sasl_ssl
sasl.mechanisms=$KAFKA_SCRAM
sasl.username=$u
sasl.password=$pw
ssl.ca.location=$TLS_DIR/ca.crt
EOP
        )
        mv "$KAFKA_CLIENTS/$u.properties.new" "$KAFKA_CLIENTS/$u.properties"
        mv "$KAFKA_CLIENTS/$u.kcat.new" "$KAFKA_CLIENTS/$u.kcat"
    done
}

# kafka_listener_props PORT CONTROLLER_PORT: the listeners and security part of
# a node's server.properties (the file is 0600: it holds broker's password).
kafka_listener_props() {
    cat <<EOP
listeners=CLIENT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$2
advertised.listeners=CLIENT://127.0.0.1:$1
controller.listener.names=CONTROLLER
listener.security.protocol.map=CLIENT:SASL_SSL,CONTROLLER:SSL
inter.broker.listener.name=CLIENT
sasl.enabled.mechanisms=$KAFKA_SCRAM
sasl.mechanism.inter.broker.protocol=$KAFKA_SCRAM
listener.name.client.${KAFKA_SCRAM,,}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="$(kafka_password broker)";
listener.name.controller.ssl.client.auth=required
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/kafka.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:broker;User:stack;User:CN=$KAFKA_CERT_CN
EOP
}

# kafka_java_args FILE MAIN ARGS...: run the Kafka tool MAIN with ARGS, then
# the lines of FILE (mode 0600, one argument per line), which may hold
# passwords: the Java launcher reads them from the file (java @FILE), so they
# never show in ps. FILE is removed.
kafka_java_args() {
    local file=$1 main=$2 rc=0; shift 2
    (umask 077; { printf '%s\n' "$main"; printf "'%s'\n" "$@"; cat "$file"; } >"$file.args")
    rm -f "$file"
    java -Xms128m -Xmx"$KAFKA_HEAP" -Djava.awt.headless=true -Dlog4j.configuration="file:$K_LOG4J" \
        -cp "$KAFKA_DIR/libs/*" @"$file.args" || rc=$?
    rm -f "$file.args"
    return $rc
}

# kafka_scram_format DIR CLUSTER_ID: format DIR/data with every user's SCRAM
# credential in the first metadata (KIP-900): the brokers need broker's
# before they can talk to each other.
kafka_scram_format() {
    local u f=$1/format.secret
    (umask 077
     for u in "${KAFKA_USERS[@]}"; do
         printf -- "--add-scram\n'%s=[name=%s,password=\"%s\"]'\n" "$KAFKA_SCRAM" "$u" "$(kafka_password "$u")"
     done >"$f")
    kafka_java_args "$f" kafka.tools.StorageTool format -t "$2" -c "$1/server.properties" \
        >"$1/format.log" 2>&1 || fail_with_log "kafka storage format failed" "$1/format.log"
    touch "$1/scram.done"
    printf '%s\n' "${KAFKA_USERS[@]}" >"$K_DIR/scram.users"
}

# kafka_scram_user NAME: NAME's SCRAM credential (its password file's), set
# on the running Kafka chosen by use_kafka/use_kafka3, as user stack.
kafka_scram_user() {
    local f=$K_DIR/user.secret
    (umask 077; printf -- "--add-config\n'%s=[password=%s]'\n" "$KAFKA_SCRAM" "$(kafka_password "$1")" >"$f")
    kafka_java_args "$f" kafka.admin.ConfigCommand --bootstrap-server "$K_BOOTSTRAP" \
        --command-config "$KAFKA_CLIENTS/stack.properties" --alter --entity-type users \
        --entity-name "$1" >>"$K_DIR/users.log" 2>&1 \
        || fail_with_log "kafka: adding user $1 failed" "$K_DIR/users.log"
}

# kafka_scram_users: a user of KAFKA_USERS that a storage formatted before it
# lacks (payment came after the others) gets its credential on the running
# Kafka; $K_DIR/scram.users lists those that have one.
kafka_scram_users() {
    local u list=$K_DIR/scram.users
    [ -s "$list" ] || printf '%s\n' "${KAFKA_USERS_FIRST[@]}" >"$list"
    for u in "${KAFKA_USERS[@]}"; do
        grep -qx "$u" "$list" && continue
        kafka_scram_user "$u"
        echo "$u" >>"$list"
        say "kafka: user $u added (SCRAM credential from $SECRETS_DIR/kafka-$u)"
    done
}

# kafka_scram_upgrade: the single node's storage was formatted before the
# stack had Kafka users (no scram.done): start it once more as it was then,
# plaintext, add the users' credentials, stop it. Its topics are kept.
kafka_scram_upgrade() {
    local u f=$KAFKA_DIR/scram.secret
    say "kafka: storage older than its users; adding them (one start on the old plaintext listener)"
    (umask 077; kafka_single_props >"$KAFKA_DIR/plain.properties")
    cat >>"$KAFKA_DIR/plain.properties" <<EOP
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
EOP
    setsid nohup java -Xms128m -Xmx"$KAFKA_HEAP" -XX:+UseG1GC -Djava.awt.headless=true \
        -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" \
        -cp "$KAFKA_DIR/libs/*" kafka.Kafka "$KAFKA_DIR/plain.properties" \
        >"$KAFKA_DIR/stdout.log" 2>&1 </dev/null &
    echo $! >"$KAFKA_DIR/kafka.pid"
    wait_for "kafka (plaintext, for the upgrade)" "$KAFKA_DIR/kafka.log" "$KAFKA_DIR/kafka.pid" \
        eval "kcat -b 127.0.0.1:$KAFKA_PORT -L -m 3 -q | grep -q 'broker 1 at'"
    for u in "${KAFKA_USERS[@]}"; do
        (umask 077; printf -- "--add-config\n'%s=[password=%s]'\n" "$KAFKA_SCRAM" "$(kafka_password "$u")" >"$f")
        kafka_java_args "$f" kafka.admin.ConfigCommand --bootstrap-server 127.0.0.1:$KAFKA_PORT \
            --alter --entity-type users --entity-name "$u" >>"$KAFKA_DIR/upgrade.log" 2>&1 \
            || fail_with_log "kafka: adding user $u failed" "$KAFKA_DIR/upgrade.log"
    done
    stop_pidfile kafka "$KAFKA_DIR/kafka.pid"
    rm -f "$KAFKA_DIR/plain.properties"
    touch "$KAFKA_DIR/scram.done"
}

# kafka_acl ARGS...: one AclCommand as user stack, $ACL_OP (--add, or
# --remove to take back the same grants).
ACL_OP=--add
kafka_acl() {
    kafka_java kafka.admin.AclCommand --bootstrap-server "$K_BOOTSTRAP" \
        --command-config "$KAFKA_CLIENTS/stack.properties" "$ACL_OP" --force "$@" >>"$K_DIR/acls.log" 2>&1 \
        || fail_with_log "kafka: AclCommand $ACL_OP failed" "$K_DIR/acls.log"
}

# kafka_role_acls ROLE PRINCIPAL: grant PRINCIPAL what program ROLE may do
# (docs/security.md). The production names (seckill.orders,
# seckill.orders.dlq, seckill.payments, group seckill-consumer and its
# .replay and .payments) are literal; the prefixes sktest, bench. and bench are
# the tests' and benchmarks' scratch topics and groups, seckill.demo. and
# seckill-demo- make demo's (a topic and a group per run), and
# sktest.payments. and seckill.demopay. the payment tests' and make demo's
# payments topics, granted in the dev stack only.
kafka_role_acls() {
    local p=User:$2
    case $1 in
        producer) # publish orders (idempotently: Write on a topic implies it)
            kafka_acl --allow-principal "$p" --operation Write --operation Describe --topic "$ORDERS_TOPIC"
            kafka_acl --allow-principal "$p" --operation Write --operation Describe \
                --resource-pattern-type prefixed --topic sktest --topic bench. --topic seckill.demo. ;;
        consumer) # read orders and payments in its groups, write dead letters
            kafka_acl --allow-principal "$p" --operation Read --operation Describe --topic "$ORDERS_TOPIC"
            kafka_acl --allow-principal "$p" --operation Read --operation Describe --topic "$PAYMENTS_TOPIC"
            kafka_acl --allow-principal "$p" --operation Write --operation Describe --topic "$DLQ_TOPIC"
            kafka_acl --allow-principal "$p" --operation Read --operation Describe \
                --resource-pattern-type prefixed --group seckill-consumer --group sktest --group bench \
                --group seckill-demo-
            kafka_acl --allow-principal "$p" --operation Read --operation Write --operation Describe \
                --resource-pattern-type prefixed --topic sktest --topic bench.
            kafka_acl --allow-principal "$p" --operation Read --operation Describe \
                --resource-pattern-type prefixed --topic seckill.demo. --topic seckill.demopay. ;;
        admin) # seckillctl (inspect, rebuild, watch), the tools, the tests' and
               # benchmarks' own clients, on the project's names only: topics
               # seckill. (the orders, their dead letters, make demo's), groups
               # seckill- (the consumers', their .replay, make demo's), and
               # the dev stack's scratch prefixes. Creating a topic is granted
               # per topic, never on the cluster (which would allow any
               # name); no Alter: not ACLs, users, partitions or configs
            kafka_acl --allow-principal "$p" --operation Read --operation Write --operation Create \
                --operation Delete --operation Describe --operation DescribeConfigs \
                --resource-pattern-type prefixed --topic seckill. --topic sktest --topic bench.
            kafka_acl --allow-principal "$p" --operation Read --operation Describe --operation Delete \
                --resource-pattern-type prefixed --group seckill- --group sktest --group bench
            kafka_acl --allow-principal "$p" --operation Describe --operation DescribeConfigs \
                --operation IdempotentWrite --cluster ;;
        payment) # the shop's payment service: publish payments (idempotently:
                 # Write implies it), on the payments topic only
            kafka_acl --allow-principal "$p" --operation Write --operation Describe --topic "$PAYMENTS_TOPIC"
            kafka_acl --allow-principal "$p" --operation Write --operation Describe \
                --resource-pattern-type prefixed --topic sktest.payments. --topic seckill.demopay. ;;
        *) die "no Kafka role $1 (producer, consumer, admin, payment)" ;;
    esac
}

# kafka_acls: each program's grants, applied when the Kafka chosen by
# use_kafka/use_kafka3 has not had this version of them yet. Before v3 admin
# had All on every topic and group and Create on the cluster: taken back
# (removing a grant that is not there is no error).
kafka_acls() {
    local mark=$K_DIR/acls.v$KAFKA_ACL_VERSION r
    [ -f "$mark" ] && return 0
    : >"$K_DIR/acls.log"
    ACL_OP=--remove kafka_acl --allow-principal User:admin --operation All --topic '*' --group '*'
    ACL_OP=--remove kafka_acl --allow-principal User:admin --operation Create --cluster
    for r in producer consumer admin payment; do kafka_role_acls "$r" "$r"; done
    touch "$mark"
    say "kafka: ACLs v$KAFKA_ACL_VERSION for producer, consumer, admin and payment"
}

# kafka_user_cmd set NAME FILE [ROLE] | delete NAME [ROLE]: a SCRAM user of
# the single node beside the stack's own (tests: a password rotated while a
# program runs): set gives NAME the password in FILE (mode 0600) and, with
# ROLE, that program's grants; delete removes the user and those grants.
kafka_user_cmd() {
    local op=${1:-} name=${2:-} f
    [[ $name =~ ^[a-z][a-z0-9._-]*$ ]] && [[ " ${KAFKA_USERS[*]} " != *" $name "* ]] \
        || { echo "usage: scripts/stack kafka-user set NAME FILE [ROLE] | delete NAME (not a stack user)" >&2; exit 2; }
    f=$KAFKA_DIR/user.secret
    : >"$K_DIR/acls.log"
    case $op in
        set) [ -r "${3:-}" ] || die "kafka-user set: cannot read the password file ${3:-}"
             (umask 077; printf -- "--add-config\n'%s=[password=%s]'\n" "$KAFKA_SCRAM" "$(head -n 1 "$3")" >"$f")
             kafka_java_args "$f" kafka.admin.ConfigCommand --bootstrap-server "$K_BOOTSTRAP" \
                 --command-config "$KAFKA_CLIENTS/stack.properties" --alter --entity-type users \
                 --entity-name "$name" >>"$K_DIR/acls.log" 2>&1 \
                 || fail_with_log "kafka: setting user $name failed" "$K_DIR/acls.log"
             [ -z "${4:-}" ] || kafka_role_acls "$4" "$name" ;;
        delete)
             kafka_java kafka.admin.ConfigCommand --bootstrap-server "$K_BOOTSTRAP" \
                 --command-config "$KAFKA_CLIENTS/stack.properties" --alter --entity-type users \
                 --entity-name "$name" --delete-config "$KAFKA_SCRAM" >>"$K_DIR/acls.log" 2>&1 \
                 || fail_with_log "kafka: deleting user $name failed" "$K_DIR/acls.log"
             [ -z "${3:-}" ] || ACL_OP=--remove kafka_role_acls "$3" "$name" ;;
        *) echo "usage: scripts/stack kafka-user set NAME FILE [ROLE] | delete NAME [ROLE]" >&2; exit 2 ;;
    esac
}

# kcat_as USER ARGS...: kcat as Kafka user USER (its settings file).
kcat_as() { local u=$1; shift; kcat -F "$KAFKA_CLIENTS/$u.kcat" "$@"; }

# kcat [USER] [KCAT ARGS]: kcat as Kafka user USER (producer, consumer,
# admin, payment, stack; default admin) over TLS and SCRAM, its settings (password
# included) from a file of mode 0600, never the command line; -b defaults to
# the single node (a later -b wins).
kcat_cmd() {
    local u=admin
    if [ $# -gt 0 ] && [[ " ${KAFKA_USERS[*]} " == *" $1 "* ]] && [ "$1" != broker ]; then u=$1; shift; fi
    [ -s "$KAFKA_CLIENTS/$u.kcat" ] || die "no Kafka settings for user $u in $KAFKA_CLIENTS (scripts/stack up makes them)"
    # kcat reads -F when it meets it and says so unless -q came first: a -q
    # anywhere goes first, so a quiet call is quiet.
    local q=() a
    for a in "$@"; do [ "$a" = -q ] && q=(-q); done
    exec kcat "${q[@]}" -F "$KAFKA_CLIENTS/$u.kcat" -b 127.0.0.1:$KAFKA_PORT "$@"
}
