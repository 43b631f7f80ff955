/* cfg: the configuration file (libconfig), validated once, with errors that
 * point at file:line.
 *
 * Every setting is declared once, in CFG_SETTINGS below: its path, type,
 * range, default and whether a running daemon may change it on reload. */
#ifndef SECKILL_CFG_H
#define SECKILL_CFG_H

#include <stddef.h>
#include <stdio.h>

struct secret;

/* Who a program is to the databases: each connects with its own role's
 * credentials (postgres.<role>_user, postgres.<role>_password_file;
 * redis.<role>_user, redis.<role>_password_file; kafka.<role>_user,
 * kafka.<role>_password_file) and is granted exactly
 * what that role needs (docs/security.md). */
enum cfg_role {
    CFG_ROLE_PRODUCER, /* seckill-producer */
    CFG_ROLE_CONSUMER, /* seckill-consumer, its --replay included */
    CFG_ROLE_ADMIN,    /* seckillctl, the bench and test tools' own SQL */
    CFG_ROLES
};
#define CFG_ROLE_BIT(r) (1u << (r))

/* A list of strings (jwt.keys, jwt.algorithms). */
struct cfg_list {
    char **v;
    size_t n;
};

/* Raw librdkafka properties passed through: "name=value" strings. */
struct cfg_props {
    char **keys;
    char **values;
    size_t n;
};

struct cfg {
    struct {
        char *host;
        int port;
        char *user[CFG_ROLES];          /* per enum cfg_role: the ACL user */
        char *password_file[CFG_ROLES]; /* absolute, or "" for none */
        /* As postgres.password: read at load for the roles cfg_role_set
         * asked for (NULL for the others). Not settings: never printed. */
        struct secret *password[CFG_ROLES];
        int db;
        int connect_timeout_ms;
        int command_timeout_ms;
        char *key_prefix;
        struct cfg_list sentinels; /* "host:port"; empty: redis.host is the primary */
        struct cfg_list cluster_nodes; /* "host:port" seeds of a Redis Cluster; empty: no Cluster */
        char *master_name;
        int min_replicas_ack;
        int wait_timeout_ms;
    } redis;
    struct {
        char *brokers;
        char *topic;
        char *dlq_topic;
        char *payments_topic;
        struct cfg_props properties;          /* both clients */
        struct cfg_props producer_properties; /* producer only */
        struct cfg_props consumer_properties; /* consumer only */
        char *security_protocol;              /* plaintext, ssl, sasl_plaintext, sasl_ssl */
        char *sasl_mechanism;
        char *user[CFG_ROLES];          /* per enum cfg_role: the SCRAM user */
        char *password_file[CFG_ROLES]; /* absolute, or "" for none */
        /* As postgres.password (librdkafka keeps its own copy for its
         * clients' lifetime). Not settings: never printed. */
        struct secret *password[CFG_ROLES];
        char *ssl_ca_file; /* absolute, or "" for librdkafka's default */
        char *order_key_dir;        /* absolute: resolved against the file's folder */
        struct cfg_list order_keys; /* "KID:FILE", FILE under order_key_dir */
        char *payment_key_dir;        /* absolute: resolved against the file's folder */
        struct cfg_list payment_keys; /* "KID:FILE", FILE under payment_key_dir */
    } kafka;
    struct {
        char *host;  /* one host, or "a,b,..." (libpq multi-host) */
        char *port;  /* "5432", or one port per host: "5432,5433" */
        char *dbname;
        char *user[CFG_ROLES];          /* per enum cfg_role */
        char *password_file[CFG_ROLES]; /* absolute, or "" for none */
        /* The passwords the files hold, read at load for the roles
         * cfg_role_set asked for (NULL for the others): an empty secret
         * when the file setting is empty. Not settings: never printed. */
        struct secret *password[CFG_ROLES];
        int connect_timeout_s;
        char *sslmode;
        char *sslrootcert; /* absolute, or "" for libpq's default */
        char *target_session_attrs;
    } postgres;
    struct {
        char *listen;
        int port;
        char *metrics_listen;
        int metrics_port;
        int max_connections;
        int max_inflight;
        int connection_timeout_s;
        int request_timeout_s;
        int body_limit;
        int sweep_age_ms;
        int sweep_interval_ms;
        int drain_timeout_ms;
        int auth; /* enum cfg_auth */
        int allow_insecure_auth; /* boolean */
        int status_ttl_s;
        int soldout_refresh_ms;
        int soldout_max_buyers;
        int max_connections_per_address;
        int address_rate_per_s;
        int address_burst;
        int buyer_rate_per_s;
        int buyer_burst;
        char *client_address_header;  /* "": the TCP peer is the client */
        struct cfg_list trusted_proxies; /* "ADDR" or "ADDR/BITS" */
        int winners_max;
        char *admission_key_dir;        /* absolute: resolved against the file's folder */
        struct cfg_list admission_keys; /* "KID:FILE", FILE under admission_key_dir */
        int queue_rate_per_s;
        int queue_p99_target_ms;
        int queue_backlog_max;
        int queue_token_life_s;
        int queue_abandon_s;
        int queue_margin_pct;
    } producer;
    struct {
        char *group_id;
        char *instance_id;
        int workers;
        int batch_size;
        int batch_linger_ms;
        int max_pending;
        char *metrics_listen;
        int metrics_port;
        int drain_timeout_ms;
        int expire_interval_ms;
        int expire_batch;
        int return_backoff_cap_ms;
        int payment_wait_ms;
        int payment_wait_max;
    } consumer;
    struct {
        int rebuy_after_cancel; /* boolean */
    } sale;
    struct {
        int ttl_ms;
        int wait_ms;
        int backoff_base_ms;
        int backoff_cap_ms;
    } lock;
    struct {
        char *key_dir;            /* absolute: resolved against the file's folder */
        struct cfg_list keys;     /* "KID:ALG:FILE", FILE under key_dir */
        struct cfg_list algorithms;
        char *issuer;
        char *audience;
        int leeway_s;
        int max_token_bytes;
        int cache_entries;
        char *signing_key;
    } jwt;
    struct {
        int level;  /* enum log_level */
        int format; /* enum log_format */
    } logging;
    /* Per CFG_SETTINGS entry, where the loaded file set it ("file:line"),
     * or the file alone for a default (cfg_where). Not a setting. */
    char **where;
};

enum cfg_type {
    CFG_INT,    /* int, checked against [min, max] */
    CFG_STR,    /* heap string */
    CFG_LEVEL,  /* log level name -> enum log_level */
    CFG_LOGFMT, /* "plain" | "json" -> enum log_format */
    CFG_PROPS,  /* array of "name=value" librdkafka properties */
    CFG_LIST,   /* array of strings */
    CFG_PATH,   /* heap string, a path: a relative one is made absolute
                 * against the folder of the file that sets it */
    CFG_AUTH,   /* "none" | "jwt" -> enum cfg_auth */
    CFG_PORTS,  /* heap string: one port (an integer or a string), or a
                 * comma-separated list of them, each in [min, max] */
    CFG_PWFILE, /* heap string, a password file: "" none; a bare name is
                 * $CREDENTIALS_DIRECTORY/name when that is set (systemd
                 * LoadCredential=), else resolved as a CFG_PATH */
    CFG_BOOL,   /* true | false -> int 1 | 0 (default: int default) */
};

enum cfg_auth {
    CFG_AUTH_NONE, /* the body's user_id is believed: development only */
    CFG_AUTH_JWT,  /* the buyer is the verified token's sub */
};

/* Flags of a setting. */
#define CFG_REQUIRED 0x1u /* no default: the file must set it */
#define CFG_RELOAD 0x2u   /* a running daemon applies a new value on SIGHUP */
#define CFG_SECRET 0x4u   /* never printed, never logged */
/* Reloadable, but not by a plain store: the module that owns the setting
 * builds its new state from the reloaded file (and may refuse it) before
 * cfg_apply_reload swaps the value in. Only the main thread reads these. */
#define CFG_SWAP 0x8u

/* One setting per entry, laid out by hand. */
/* clang-format off */
/* X(path, type, member, min, max, int default, string default, flags, help)
 * help: a one-line description for `seckillctl config reference`. */
#define CFG_SETTINGS(X)                                                                                     \
    X("redis.host", CFG_STR, redis.host, 0, 0, 0, "127.0.0.1", 0, "Redis server host name or address")      \
    X("redis.port", CFG_INT, redis.port, 1, 65535, 6379, NULL, 0, "Redis server TCP port")                  \
    X("redis.producer_user", CFG_STR, redis.user[CFG_ROLE_PRODUCER], 0, 0, 0, "producer", 0,                \
      "Redis ACL user of seckill-producer (AUTH user password)")                                            \
    X("redis.producer_password_file", CFG_PWFILE, redis.password_file[CFG_ROLE_PRODUCER], 0, 0, 0, "",      \
      CFG_SWAP, "file holding the producer user's Redis password (mode 0600); empty: no AUTH")              \
    X("redis.consumer_user", CFG_STR, redis.user[CFG_ROLE_CONSUMER], 0, 0, 0, "consumer", 0,                \
      "Redis ACL user of seckill-consumer")                                                                 \
    X("redis.consumer_password_file", CFG_PWFILE, redis.password_file[CFG_ROLE_CONSUMER], 0, 0, 0, "",       \
      CFG_SWAP, "file holding the consumer user's Redis password (mode 0600); empty: no AUTH")              \
    X("redis.admin_user", CFG_STR, redis.user[CFG_ROLE_ADMIN], 0, 0, 0, "admin", 0,                         \
      "Redis ACL user of seckillctl and the tools")                                                         \
    X("redis.admin_password_file", CFG_PWFILE, redis.password_file[CFG_ROLE_ADMIN], 0, 0, 0, "",             \
      CFG_SWAP, "file holding the admin user's Redis password (mode 0600); empty: no AUTH")                 \
    X("redis.db", CFG_INT, redis.db, 0, 15, 0, NULL, 0, "Redis logical database number (SELECT)")           \
    X("redis.connect_timeout_ms", CFG_INT, redis.connect_timeout_ms, 1, 60000, 1000, NULL, 0,               \
      "deadline to connect to Redis")                                                                       \
    X("redis.command_timeout_ms", CFG_INT, redis.command_timeout_ms, 1, 60000, 2000, NULL, 0,               \
      "deadline for one Redis command or pipelined round trip")                                             \
    X("redis.key_prefix", CFG_STR, redis.key_prefix, 0, 0, 0, "seckill", 0,                                 \
      "first part of every key: <prefix>:{item:ID}:stock, <prefix>:lock:{lk:G} ...")                   \
    X("redis.sentinels", CFG_LIST, redis.sentinels, 0, 0, 0, NULL, 0,                                       \
      "Sentinels, \"host:port\", asked for the primary (redis.host/port unused); empty: no Sentinel")       \
    X("redis.master_name", CFG_STR, redis.master_name, 0, 0, 0, "", 0,                                      \
      "the primary's name at the Sentinels (sentinel monitor NAME ...); required with redis.sentinels")     \
    X("redis.cluster_nodes", CFG_LIST, redis.cluster_nodes, 0, 0, 0, NULL, 0,                               \
      "nodes of a Redis Cluster, \"host:port\", asked for its slot map (redis.host/port/db and "           \
      "redis.sentinels unused); empty: no Cluster")                                                         \
    X("redis.min_replicas_ack", CFG_INT, redis.min_replicas_ack, 0, 16, 0, NULL, CFG_RELOAD,                \
      "replicas that must hold a reservation (WAIT) before 202; 0: answer on the primary's word")           \
    X("redis.wait_timeout_ms", CFG_INT, redis.wait_timeout_ms, 1, 60000, 1000, NULL, CFG_RELOAD,            \
      "how long WAIT may take for redis.min_replicas_ack; past it the order is refused (503)")              \
    X("kafka.brokers", CFG_STR, kafka.brokers, 0, 0, 0, NULL, CFG_REQUIRED,                                 \
      "bootstrap brokers, \"host:port[,host:port...]\" (bootstrap.servers)")                                \
    X("kafka.topic", CFG_STR, kafka.topic, 0, 0, 0, "seckill.orders", 0,                                    \
      "the orders topic: producers write it, consumers read it")                                            \
    X("kafka.dlq_topic", CFG_STR, kafka.dlq_topic, 0, 0, 0, "seckill.orders.dlq", 0,                        \
      "dead-letter topic for messages the consumer cannot decode or validate")                              \
    X("kafka.payments_topic", CFG_STR, kafka.payments_topic, 0, 0, 0, "seckill.payments", 0,                \
      "the payments topic: the shop's payment service writes it (key: the user id), consumers read it "     \
      "in the group <consumer.group_id>.payments")                                                          \
    X("kafka.properties", CFG_PROPS, kafka.properties, 0, 0, 0, NULL, 0,                                    \
      "raw librdkafka properties, \"name=value\", for both clients; checked at load")                       \
    X("kafka.producer_properties", CFG_PROPS, kafka.producer_properties, 0, 0, 0, NULL, 0,                  \
      "raw librdkafka properties for Kafka producers only (orders, dead letters), over kafka.properties")   \
    X("kafka.consumer_properties", CFG_PROPS, kafka.consumer_properties, 0, 0, 0, NULL, 0,                  \
      "raw librdkafka properties for Kafka consumers only (the consumer, replay), over kafka.properties")   \
    X("kafka.security_protocol", CFG_STR, kafka.security_protocol, 0, 0, 0, "plaintext", 0,                 \
      "how clients reach the brokers: plaintext, ssl, sasl_plaintext or sasl_ssl (TLS, then SASL)")        \
    X("kafka.sasl_mechanism", CFG_STR, kafka.sasl_mechanism, 0, 0, 0, "SCRAM-SHA-512", 0,                    \
      "SASL mechanism with sasl_*: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN")                                  \
    X("kafka.producer_user", CFG_STR, kafka.user[CFG_ROLE_PRODUCER], 0, 0, 0, "producer", 0,                \
      "SASL user of seckill-producer (writes kafka.topic)")                                                 \
    X("kafka.producer_password_file", CFG_PWFILE, kafka.password_file[CFG_ROLE_PRODUCER], 0, 0, 0, "",      \
      CFG_SWAP, "file holding the producer user's Kafka password (mode 0600); required with sasl_*")        \
    X("kafka.consumer_user", CFG_STR, kafka.user[CFG_ROLE_CONSUMER], 0, 0, 0, "consumer", 0,                \
      "SASL user of seckill-consumer (reads kafka.topic in its group, writes kafka.dlq_topic)")             \
    X("kafka.consumer_password_file", CFG_PWFILE, kafka.password_file[CFG_ROLE_CONSUMER], 0, 0, 0, "",      \
      CFG_SWAP, "file holding the consumer user's Kafka password (mode 0600); required with sasl_*")        \
    X("kafka.admin_user", CFG_STR, kafka.user[CFG_ROLE_ADMIN], 0, 0, 0, "admin", 0,                         \
      "SASL user of seckillctl and the tools")                                                              \
    X("kafka.admin_password_file", CFG_PWFILE, kafka.password_file[CFG_ROLE_ADMIN], 0, 0, 0, "", CFG_SWAP,  \
      "file holding the admin user's Kafka password (mode 0600); required with sasl_*")                     \
    X("kafka.ssl_ca_file", CFG_PATH, kafka.ssl_ca_file, 0, 0, 0, "", 0,                                     \
      "CA certificate(s) the brokers' certificates must chain to (ssl, sasl_ssl); empty: the system's")     \
    X("kafka.order_key_dir", CFG_PATH, kafka.order_key_dir, 0, 0, 0, ".", CFG_SWAP,                        \
      "folder of the order key files; relative: to the configuration file's folder")                        \
    X("kafka.order_keys", CFG_LIST, kafka.order_keys, 0, 0, 0, NULL, CFG_SWAP,                              \
      "order MAC keys, \"KID:FILE\" (FILE under kafka.order_key_dir; a bare name: a systemd credential): "  \
      "the first signs, all verify; required by the producer and the consumer")                            \
    X("kafka.payment_key_dir", CFG_PATH, kafka.payment_key_dir, 0, 0, 0, ".", CFG_SWAP,                    \
      "folder of the payment key files; relative: to the configuration file's folder")                      \
    X("kafka.payment_keys", CFG_LIST, kafka.payment_keys, 0, 0, 0, NULL, CFG_SWAP,                          \
      "payment MAC keys, \"KID:FILE\" (FILE under kafka.payment_key_dir; a bare name: a systemd "           \
      "credential): the first signs (seckillctl payment sign), all verify; required by the consumer")       \
    X("postgres.host", CFG_STR, postgres.host, 0, 0, 0, "127.0.0.1", 0,                                     \
      "PostgreSQL host name, address or socket folder; \"a,b\": tried in turn (libpq multi-host)")          \
    X("postgres.port", CFG_PORTS, postgres.port, 1, 65535, 0, "5432", 0,                                    \
      "PostgreSQL TCP port, or \"p1,p2\": one per postgres.host entry")                                     \
    X("postgres.dbname", CFG_STR, postgres.dbname, 0, 0, 0, NULL, CFG_REQUIRED, "database name")            \
    X("postgres.producer_user", CFG_STR, postgres.user[CFG_ROLE_PRODUCER], 0, 0, 0, "producer", 0,          \
      "role seckill-producer connects as (order id blocks)")                                                \
    X("postgres.producer_password_file", CFG_PWFILE, postgres.password_file[CFG_ROLE_PRODUCER], 0, 0, 0, "", \
      CFG_SWAP, "file holding the producer role's password (mode 0600); bare name: a systemd credential")   \
    X("postgres.consumer_user", CFG_STR, postgres.user[CFG_ROLE_CONSUMER], 0, 0, 0, "consumer", 0,          \
      "role seckill-consumer connects as (persists orders, also --replay)")                                 \
    X("postgres.consumer_password_file", CFG_PWFILE, postgres.password_file[CFG_ROLE_CONSUMER], 0, 0, 0, "", \
      CFG_SWAP, "file holding the consumer role's password (mode 0600); bare name: a systemd credential")   \
    X("postgres.admin_user", CFG_STR, postgres.user[CFG_ROLE_ADMIN], 0, 0, 0, "admin", 0,                   \
      "role seckillctl connects as (owns the schema: migrations, items, reconcile, inspect)")               \
    X("postgres.admin_password_file", CFG_PWFILE, postgres.password_file[CFG_ROLE_ADMIN], 0, 0, 0, "",      \
      CFG_SWAP, "file holding the admin role's password (mode 0600); empty: none (trust, peer, .pgpass)")   \
    X("postgres.connect_timeout_s", CFG_INT, postgres.connect_timeout_s, 1, 600, 5, NULL, 0,                \
      "deadline to connect to PostgreSQL (libpq connect_timeout)")                                          \
    X("postgres.sslmode", CFG_STR, postgres.sslmode, 0, 0, 0, "prefer", 0,                                  \
      "libpq sslmode: disable, allow, prefer, require, verify-ca, verify-full")                             \
    X("postgres.sslrootcert", CFG_PATH, postgres.sslrootcert, 0, 0, 0, "", 0,                               \
      "CA certificate(s) the server's certificate must chain to (verify-ca, verify-full); empty: libpq's")  \
    X("postgres.target_session_attrs", CFG_STR, postgres.target_session_attrs, 0, 0, 0, "read-write", 0,    \
      "which of the hosts to use (libpq): read-write follows a promotion; any, primary, standby ...")       \
    X("producer.listen", CFG_STR, producer.listen, 0, 0, 0, "127.0.0.1", 0,                                 \
      "address the producer's HTTP server for the buyers binds")                                          \
    X("producer.port", CFG_INT, producer.port, 1, 65535, 8080, NULL, 0,                                     \
      "the producer's HTTP port for the buyers (API, /healthz)")                                            \
    X("producer.metrics_listen", CFG_STR, producer.metrics_listen, 0, 0, 0, "127.0.0.1", 0,                 \
      "address the producer's operator listener (/metrics, /healthz) binds; not the buyers' network")       \
    X("producer.metrics_port", CFG_INT, producer.metrics_port, 0, 65535, 9099, NULL, 0,                     \
      "port of the producer's /metrics and /healthz for operators; 0: off")                                 \
    X("producer.max_connections", CFG_INT, producer.max_connections, 1, 1000000, 4096, NULL, 0,             \
      "open HTTP connections at most; beyond it new ones are not accepted")                                 \
    X("producer.max_inflight", CFG_INT, producer.max_inflight, 1, 10000000, 20000, NULL, CFG_RELOAD,        \
      "order requests in flight at once; beyond it 429 overloaded")                                         \
    X("producer.connection_timeout_s", CFG_INT, producer.connection_timeout_s, 1, 3600, 30, NULL, 0,        \
      "an idle or slow connection is closed after this long")                                               \
    X("producer.request_timeout_s", CFG_INT, producer.request_timeout_s, 1, 3600, 5, NULL, CFG_RELOAD,      \
      "a connection is closed if a whole request, head and body, has not come this long after its accept "  \
      "or its previous answer, whatever trickles in")                                                       \
    X("producer.body_limit", CFG_INT, producer.body_limit, 64, 65536, 1024, NULL, 0,                        \
      "largest request body accepted, in bytes; larger: 400")                                               \
    X("producer.sweep_age_ms", CFG_INT, producer.sweep_age_ms, 1000, 86400000, 30000, NULL, CFG_RELOAD,     \
      "a reservation unpublished this long is re-published by the sweeper")                                 \
    X("producer.sweep_interval_ms", CFG_INT, producer.sweep_interval_ms, 100, 3600000, 5000, NULL,          \
      CFG_RELOAD,                                                                                           \
      "how often the sweeper runs")                                                                         \
    X("producer.drain_timeout_ms", CFG_INT, producer.drain_timeout_ms, 0, 600000, 30000, NULL, CFG_RELOAD,  \
      "on SIGTERM, how long in-flight orders may take to finish")                                           \
    X("producer.auth", CFG_AUTH, producer.auth, 0, 0, 0, "none", 0,                                         \
      "who the buyer is: none (the body's user_id, development) or jwt (bearer token's sub)")               \
    X("producer.allow_insecure_auth", CFG_BOOL, producer.allow_insecure_auth, 0, 1, 0, NULL, 0,             \
      "let auth = none listen beyond loopback (anyone buys as any user_id; warned at every start)")          \
    X("producer.status_ttl_s", CFG_INT, producer.status_ttl_s, 60, 31536000, 604800, NULL, CFG_RELOAD,      \
      "how long Redis keeps an order's status for the status calls")                                        \
    X("producer.soldout_refresh_ms", CFG_INT, producer.soldout_refresh_ms, 10, 60000, 100, NULL,            \
      CFG_RELOAD,                                                                                           \
      "how often sold-out items and remembered winners are checked in Redis: "                              \
      "how long a unit back is missed")                                                                     \
    X("producer.soldout_max_buyers", CFG_INT, producer.soldout_max_buyers, 0, 100000000, 1000000, NULL,     \
      CFG_RELOAD,                                                                                           \
      "buyers of an item copied at most to answer its sold-out requests locally; 0: always ask Redis")      \
    X("producer.max_connections_per_address", CFG_INT, producer.max_connections_per_address, 0,             \
      1000000, 64,                                                                                          \
      NULL, CFG_RELOAD,                                                                                     \
      "open connections one client address may hold; beyond, new ones are closed; 0: no cap")              \
    X("producer.address_rate_per_s", CFG_INT, producer.address_rate_per_s, 0, 1000000, 100, NULL,           \
      CFG_RELOAD,                                                                                           \
      "API requests per second one client address may send (GCRA); beyond, 429; 0: no limit")              \
    X("producer.address_burst", CFG_INT, producer.address_burst, 1, 1000000, 200, NULL, CFG_RELOAD,          \
      "API requests one client address may send at once, beyond producer.address_rate_per_s")              \
    X("producer.buyer_rate_per_s", CFG_INT, producer.buyer_rate_per_s, 0, 1000000, 5, NULL, CFG_RELOAD,      \
      "API requests per second one buyer (a verified token's sub) may send; beyond, 429; 0: no limit")      \
    X("producer.buyer_burst", CFG_INT, producer.buyer_burst, 1, 1000000, 10, NULL, CFG_RELOAD,               \
      "API requests one buyer may send at once, beyond producer.buyer_rate_per_s")                          \
    X("producer.client_address_header", CFG_STR, producer.client_address_header, 0, 0, 0, "", 0,           \
      "header naming the client behind a trusted proxy (X-Forwarded-For); "                                 \
      "empty: the TCP peer is the client")                                                                  \
    X("producer.trusted_proxies", CFG_LIST, producer.trusted_proxies, 0, 0, 0, NULL, 0,                     \
      "\"ADDR\" or \"ADDR/BITS\": peers whose producer.client_address_header is believed (load balancers)")  \
    X("producer.winners_max", CFG_INT, producer.winners_max, 0, 100000000, 262144, NULL, 0,                 \
      "buyers remembered holding a unit, answered 409 without asking Redis; 0: always ask Redis")          \
    X("producer.admission_key_dir", CFG_PATH, producer.admission_key_dir, 0, 0, 0, ".", CFG_SWAP,           \
      "folder of the admission key files; relative: to the configuration file's folder")                    \
    X("producer.admission_keys", CFG_LIST, producer.admission_keys, 0, 0, 0, NULL, CFG_SWAP,                \
      "waiting room admission MAC keys, \"KID:FILE\" (FILE under producer.admission_key_dir; a bare "       \
      "name: a systemd credential): the first signs, all verify; required by the producer")                \
    X("producer.queue_rate_per_s", CFG_INT, producer.queue_rate_per_s, 1, 1000000, 2000, NULL, CFG_RELOAD,  \
      "waiting room: most buyers admitted per second per item (seckillctl queue rate sets one per item); "  \
      "under it the rate follows producer.queue_p99_target_ms and producer.queue_backlog_max")              \
    X("producer.queue_p99_target_ms", CFG_INT, producer.queue_p99_target_ms, 1, 60000, 15, NULL,            \
      CFG_RELOAD, "waiting room: the accepted buys' p99 the admission rate aims under; above it, it slows") \
    X("producer.queue_backlog_max", CFG_INT, producer.queue_backlog_max, 1, 100000000, 5000, NULL,          \
      CFG_RELOAD, "waiting room: an item's reservations not yet persisted (its pending) above which "      \
      "admission slows")                                                                                   \
    X("producer.queue_token_life_s", CFG_INT, producer.queue_token_life_s, 1, 86400, 60, NULL, CFG_RELOAD,  \
      "waiting room: how long an admission lasts; unused, its slot goes to the next in line")              \
    X("producer.queue_abandon_s", CFG_INT, producer.queue_abandon_s, 1, 86400, 30, NULL, CFG_RELOAD,        \
      "waiting room: a waiter who has not asked for this long is passed over when their turn comes")        \
    X("producer.queue_margin_pct", CFG_INT, producer.queue_margin_pct, 0, 1000, 10, NULL, CFG_RELOAD,       \
      "waiting room: admissions outstanding at most, beyond the units left, in percent of them")          \
    X("consumer.group_id", CFG_STR, consumer.group_id, 0, 0, 0, "seckill-consumer", 0,                      \
      "Kafka consumer group of the consumers (replay uses <group_id>.replay)")                              \
    X("consumer.instance_id", CFG_STR, consumer.instance_id, 0, 0, 0, "", 0,                                \
      "static membership (group.instance.id) when set; -i N appends -N")                                    \
    X("consumer.workers", CFG_INT, consumer.workers, 1, 256, 2, NULL, 0,                                    \
      "worker threads; each persists its own users' orders (fewer make larger batches: 2 on 2 cores)")      \
    X("consumer.batch_size", CFG_INT, consumer.batch_size, 1, 10000, 500, NULL, CFG_RELOAD,                 \
      "most orders a worker persists in one transaction")                                                   \
    X("consumer.batch_linger_ms", CFG_INT, consumer.batch_linger_ms, 0, 10000, 50, NULL, CFG_RELOAD,         \
      "how long a worker waits to fill a batch")                                                            \
    X("consumer.max_pending", CFG_INT, consumer.max_pending, 1, 10000000, 20000, NULL, CFG_RELOAD,          \
      "unsettled messages in the workers at most; beyond, no more are taken from Kafka's queue")            \
    X("consumer.metrics_listen", CFG_STR, consumer.metrics_listen, 0, 0, 0, "127.0.0.1", 0,                 \
      "address the consumer's /metrics and /healthz bind")                                                  \
    X("consumer.metrics_port", CFG_INT, consumer.metrics_port, 0, 65535, 9101, NULL, 0,                     \
      "port of the consumer's /metrics and /healthz (+ N with -i N); 0: off")                               \
    X("consumer.drain_timeout_ms", CFG_INT, consumer.drain_timeout_ms, 0, 600000, 30000, NULL, CFG_RELOAD,  \
      "on SIGTERM or revoke, how long in-flight batches may take to finish")                                \
    X("consumer.expire_interval_ms", CFG_INT, consumer.expire_interval_ms, 50, 600000, 1000, NULL,          \
      CFG_RELOAD, "how often a consumer expires orders past their payment window and retries the units "    \
      "Redis does not have back yet (a full batch goes on at once)")                                       \
    X("consumer.expire_batch", CFG_INT, consumer.expire_batch, 1, 10000, 1000, NULL, CFG_RELOAD,            \
      "most orders expired in one transaction, and most returns sent to Redis in one round trip")          \
    X("consumer.return_backoff_cap_ms", CFG_INT, consumer.return_backoff_cap_ms, 100, 3600000, 30000, NULL, \
      CFG_RELOAD, "longest wait between two tries of a unit's return to Redis (doubling from 100 ms)")      \
    X("consumer.payment_wait_ms", CFG_INT, consumer.payment_wait_ms, 1000, 86400000, 300000, NULL,          \
      CFG_RELOAD, "how long a payment for an order not yet in PostgreSQL is retried (its offset held) "     \
      "before it is dead-lettered as \"order unknown\"")                                                   \
    X("consumer.payment_wait_max", CFG_INT, consumer.payment_wait_max, 100, 10000000, 50000, NULL,          \
      CFG_RELOAD, "most payments that wait for their orders at once (and 64 MiB of their messages); past "  \
      "it the one that has waited longest is dead-lettered as \"waiting set full\"")                         \
    X("lock.ttl_ms", CFG_INT, lock.ttl_ms, 100, 600000, 10000, NULL, 0,                                     \
      "lease of a distributed lock, renewed every ttl/3 while held (lock run's default --ttl-ms)")          \
    X("lock.wait_ms", CFG_INT, lock.wait_ms, 0, 600000, 5000, NULL, CFG_RELOAD,                             \
      "how long to wait for a lock (consumer workers; lock run's default --wait-ms)")                       \
    X("lock.backoff_base_ms", CFG_INT, lock.backoff_base_ms, 1, 10000, 5, NULL, CFG_RELOAD,                 \
      "first backoff between lock attempts (full-jitter exponential)")                                      \
    X("lock.backoff_cap_ms", CFG_INT, lock.backoff_cap_ms, 1, 60000, 200, NULL, CFG_RELOAD,                 \
      "longest backoff between lock attempts")                                                              \
    X("sale.rebuy_after_cancel", CFG_BOOL, sale.rebuy_after_cancel, 0, 1, 1, NULL, CFG_RELOAD,              \
      "a buyer whose order expired (or was cancelled) may buy the item again: the unit's return "          \
      "takes their one-per-user mark away in Redis")                                                       \
    X("jwt.key_dir", CFG_PATH, jwt.key_dir, 0, 0, 0, ".", CFG_SWAP,                                         \
      "folder of the key files; relative: to the configuration file's folder")                              \
    X("jwt.keys", CFG_LIST, jwt.keys, 0, 0, 0, NULL, CFG_SWAP,                                              \
      "verification keys, \"KID:ALG:FILE\" (FILE under jwt.key_dir)")                                       \
    X("jwt.algorithms", CFG_LIST, jwt.algorithms, 0, 0, 0, NULL, CFG_SWAP,                                  \
      "algorithms accepted (HS256, RS256, ES256); empty: those of jwt.keys")                                \
    X("jwt.issuer", CFG_STR, jwt.issuer, 0, 0, 0, "", CFG_SWAP, "required iss claim; empty: not checked")   \
    X("jwt.audience", CFG_STR, jwt.audience, 0, 0, 0, "", CFG_SWAP,                                         \
      "required aud claim; empty: not checked")                                                             \
    X("jwt.leeway_s", CFG_INT, jwt.leeway_s, 0, 300, 30, NULL, CFG_SWAP,                                    \
      "clock skew allowed on exp and nbf")                                                                  \
    X("jwt.max_token_bytes", CFG_INT, jwt.max_token_bytes, 128, 16384, 4096, NULL, CFG_SWAP,                \
      "longest bearer token accepted")                                                                      \
    X("jwt.cache_entries", CFG_INT, jwt.cache_entries, 0, 1048576, 65536, NULL, 0,                          \
      "verified tokens remembered until they expire; 0: no cache")                                          \
    X("jwt.signing_key", CFG_STR, jwt.signing_key, 0, 0, 0, "", 0,                                          \
      "kid that seckillctl token issue signs with; empty: the first key that can sign")                     \
    X("logging.level", CFG_LEVEL, logging.level, 0, 0, 0, "info", CFG_RELOAD,                               \
      "least severe level logged: error, warning, notice, info, debug")                                     \
    X("logging.format", CFG_LOGFMT, logging.format, 0, 0, 0, "plain", 0,                                    \
      "plain (priority prefix for journald) or json (one object per line)")
/* clang-format on */

/* The role this program connects as (pgconn_open), and the roles whose
 * password files cfg_load reads (a mask of CFG_ROLE_BIT; the program's own
 * role is always read). Call before the first cfg_load; default: admin,
 * reading admin's file only. A program reads no other role's secret: in
 * production it is given only its own (LoadCredential=). */
void cfg_role_set(enum cfg_role self, unsigned secrets_mask);
enum cfg_role cfg_role_self(void);
/* "producer", "consumer", "admin". */
const char *cfg_role_name(enum cfg_role r);
/* kafka.security_protocol is sasl_*: clients authenticate with a user and
 * password (kafka.<role>_user, kafka.<role>_password_file). */
int cfg_kafka_sasl(const struct cfg *c);

/* Load and validate path into *out (which the caller zeroes or reuses after
 * cfg_free). On failure returns -1, leaves *out empty and writes
 * "file:line: message" into err. Beyond each setting's own checks: a CA file
 * named (postgres.sslrootcert; kafka.ssl_ca_file with TLS) must be readable,
 * verify-ca and verify-full need postgres.sslrootcert, and for the producer
 * (cfg_role_set) auth = "none" is refused on a listener that is not loopback
 * unless producer.allow_insecure_auth says so. */
int cfg_load(const char *path, struct cfg *out, char *err, size_t errlen);

/* Where the loaded c sets setting (a CFG_SETTINGS path): "file:line", or
 * the file alone when it takes its default; "(configuration)" for a cfg not
 * loaded from a file. For errors found after loading (the producer's key
 * files), which point at the file and line like the others. */
const char *cfg_where(const struct cfg *c, const char *setting);

/* 1 when addr (producer.listen) is a loopback address: 127.0.0.0/8, ::1,
 * ::ffff:127.x.y.z, or "localhost". */
int cfg_addr_loopback(const char *addr);
void cfg_free(struct cfg *c);

/* 0 when every setting that differs between old and new is reloadable;
 * otherwise -1 and err names the first one that is not. */
int cfg_reload_check(const struct cfg *old, const struct cfg *new, char *err, size_t errlen);

/* Copy every reloadable setting from new into the running cur, and swap the
 * CFG_SWAP ones (new then holds the old values for cfg_free). Call only
 * after cfg_reload_check() passed. */
void cfg_apply_reload(struct cfg *cur, struct cfg *new);
/* 1 when every reloadable setting is a scalar (cfg_apply_reload relies on it). */
int cfg_reloadable_scalar_only(void);

/* The range [min, max] CFG_SETTINGS declares for an integer setting, so
 * code that needs a bound (a buffer sized for the largest batch a reload may
 * ask for, a command-line option with the same limits) takes it from the
 * one table. */
struct cfg_range {
    long long min, max;
};
/* The range of the integer setting stored in member, named as in
 * CFG_SETTINGS: CFG_RANGE(consumer.batch_size).max. A member struct cfg
 * does not have, or one that is not an int, does not compile (offsetof, and
 * _Generic with no association for other types); an int member whose setting
 * has no range (logging.level, logging.format, producer.auth) aborts at the
 * first call, logged. */
#define CFG_RANGE(member) \
    cfg_range_at(offsetof(struct cfg, member) + 0 * sizeof(_Generic(((struct cfg *)0)->member, int: 1)))
struct cfg_range cfg_range_at(size_t offset);

/* Read a reloadable setting from another thread than the one reloading. */
#define CFG_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/* Print the effective configuration in libconfig syntax, secrets masked. */
void cfg_dump(const struct cfg *c, FILE *f);
/* The same with secrets in clear: a file cfg_load() reads back identically
 * (for tests and tools that hand a modified configuration to a daemon). */
void cfg_write(const struct cfg *c, FILE *f);

/* Print the reference of every setting in Markdown (docs/configuration.md):
 * per section a table of type, default, range or values, reload, secret and
 * help, after an introduction. Needs no loaded configuration. */
void cfg_reference(FILE *f);
/* The help of the i-th setting (and its path in *path), or NULL past the last. */
const char *cfg_help(size_t i, const char **path);

#endif
