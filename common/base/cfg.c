#include "cfg.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfglit.h"
#include "log.h"
#include "netaddr.h"
#include "secret.h"
#include "util.h"

struct cfg_def {
    const char *path;
    enum cfg_type type;
    size_t off;
    long long min, max;
    long long idef;
    const char *sdef;
    unsigned flags;
    const char *help;
};

static const struct cfg_def cfg_defs[] = {
#define CFG_DEF(path, type, member, min, max, idef, sdef, flags, help) \
    { path, type, offsetof(struct cfg, member), min, max, idef, sdef, flags, help },
    CFG_SETTINGS(CFG_DEF)
#undef CFG_DEF
};

#define FIELD(c, d, T) ((T *)((char *)(c) + (d)->off))
#define CFIELD(c, d, T) ((const T *)((const char *)(c) + (d)->off))

static const char *const logfmt_names[] = { "plain", "json" };
static const char *const role_names[CFG_ROLES] = { "producer", "consumer", "admin" };

static enum cfg_role role_self = CFG_ROLE_ADMIN;
static unsigned role_mask;

void cfg_role_set(enum cfg_role self, unsigned secrets_mask)
{
    role_self = self;
    role_mask = secrets_mask;
}

enum cfg_role cfg_role_self(void)
{
    return role_self;
}

const char *cfg_role_name(enum cfg_role r)
{
    return (unsigned)r < CFG_ROLES ? role_names[r] : "?";
}

int cfg_kafka_sasl(const struct cfg *c)
{
    return strncmp(c->kafka.security_protocol, "sasl_", 5) == 0;
}
static const char *const auth_names[] = { "none", "jwt" };

/* The index of name in names[0..n), or -1. */
static int name_index(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *src_file(const config_setting_t *s, const char *path)
{
    const char *f = config_setting_source_file(s);
    return f ? f : path;
}

static int src_line(const config_setting_t *s)
{
    return (int)config_setting_source_line(s);
}

static const struct cfg_def *def_find(const char *path)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++)
        if (strcmp(cfg_defs[i].path, path) == 0)
            return &cfg_defs[i];
    return NULL;
}

struct cfg_range cfg_range_at(size_t offset)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++)
        if (cfg_defs[i].off == offset && cfg_defs[i].type == CFG_INT)
            return (struct cfg_range){ cfg_defs[i].min, cfg_defs[i].max };
    /* Only CFG_RANGE calls this, with an int member of struct cfg: one that
     * is no CFG_INT setting is a mistake in the code, not a state to go on in. */
    log_error("internal: the member at offset %zu of struct cfg is no integer setting", offset);
    abort();
}

static bool section_known(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++)
        if (strncmp(cfg_defs[i].path, name, n) == 0 && cfg_defs[i].path[n] == '.')
            return true;
    return false;
}

/* Settings renamed since a release, each with its new name and why: a file
 * that still names one is refused with the way out, rather than as a
 * misspelling (or, worse, read with another meaning). */
static const struct {
    const char *was, *now, *why;
} cfg_renamed[] = {
    { "producer.request_head_timeout_s", "producer.request_timeout_s",
      "it bounds the whole request now, head and body (issue #55)" },
};

/* The unknown setting full in s: refused, as renamed when it was. -1. */
static int refuse_unknown(const config_setting_t *s, const char *full, const char *path, char *err,
                          size_t errlen)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_renamed); i++)
        if (strcmp(cfg_renamed[i].was, full) == 0) {
            seterr(err, errlen, "%s:%d: '%s' is now '%s' (%s): rename it", src_file(s, path), src_line(s),
                   full, cfg_renamed[i].now, cfg_renamed[i].why);
            return -1;
        }
    seterr(err, errlen, "%s:%d: unknown setting '%s'", src_file(s, path), src_line(s), full);
    return -1;
}

/* A misspelt setting would otherwise silently fall back to its default. */
static int check_unknown(config_t *lc, const char *path, char *err, size_t errlen)
{
    config_setting_t *root = config_root_setting(lc);
    for (int i = 0; i < config_setting_length(root); i++) {
        config_setting_t *sec = config_setting_get_elem(root, (unsigned)i);
        const char *sname = config_setting_name(sec);
        if (!section_known(sname) || config_setting_type(sec) != CONFIG_TYPE_GROUP) {
            seterr(err, errlen, "%s:%d: unknown section '%s'", src_file(sec, path),
                   src_line(sec), sname);
            return -1;
        }
        for (int j = 0; j < config_setting_length(sec); j++) {
            config_setting_t *s = config_setting_get_elem(sec, (unsigned)j);
            char full[256];
            snprintf(full, sizeof(full), "%s.%s", sname, config_setting_name(s));
            if (def_find(full) == NULL)
                return refuse_unknown(s, full, path, err, errlen);
        }
    }
    return 0;
}

static int load_props(const config_setting_t *s, const struct cfg_def *d, const char *path,
                      struct cfg_props *out, char *err, size_t errlen)
{
    int type = config_setting_type(s);
    int line = src_line(s);
    const char *file = src_file(s, path);
    rd_kafka_conf_t *probe = NULL;
    char kerr[256];

    if (type != CONFIG_TYPE_ARRAY && type != CONFIG_TYPE_LIST) {
        seterr(err, errlen, "%s:%d: '%s' must be an array of \"name=value\" strings", file, line, d->path);
        return -1;
    }
    size_t n = (size_t)config_setting_length(s);
    out->keys = calloc(n + 1, sizeof(char *));
    out->values = calloc(n + 1, sizeof(char *));
    if (out->keys == NULL || out->values == NULL)
        goto oom;
    /* Validate against librdkafka now, so that `-t` catches a typo in a
     * property name instead of the daemon failing at start. */
    probe = rd_kafka_conf_new();
    for (size_t i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *kv = config_setting_get_string(e);
        const char *eq = kv ? strchr(kv, '=') : NULL;
        int eline = src_line(e) ? src_line(e) : line;
        if (eq == NULL || eq == kv) {
            seterr(err, errlen, "%s:%d: '%s' element %zu must be a \"name=value\" string", file, eline,
                   d->path, i + 1);
            goto fail;
        }
        out->keys[i] = strndup(kv, (size_t)(eq - kv));
        out->values[i] = strdup(eq + 1);
        out->n = i + 1;
        if (out->keys[i] == NULL || out->values[i] == NULL)
            goto oom;
        if (rd_kafka_conf_set(probe, out->keys[i], out->values[i], kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK) {
            seterr(err, errlen, "%s:%d: '%s': %s", file, eline, d->path, kerr);
            goto fail;
        }
    }
    rd_kafka_conf_destroy(probe);
    return 0;
oom:
    seterr(err, errlen, "%s: out of memory", path);
fail:
    if (probe)
        rd_kafka_conf_destroy(probe);
    return -1;
}

static int load_list(const config_setting_t *s, const struct cfg_def *d, const char *path,
                     struct cfg_list *out, char *err, size_t errlen)
{
    int type = config_setting_type(s);
    const char *file = src_file(s, path);
    if (type != CONFIG_TYPE_ARRAY && type != CONFIG_TYPE_LIST) {
        seterr(err, errlen, "%s:%d: '%s' must be an array of strings", file, src_line(s), d->path);
        return -1;
    }
    size_t n = (size_t)config_setting_length(s);
    if (!(out->v = calloc(n + 1, sizeof(char *)))) {
        seterr(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *v = config_setting_get_string(e);
        if (!v) {
            seterr(err, errlen, "%s:%d: '%s' element %zu must be a string", file,
                   src_line(e) ? src_line(e) : src_line(s), d->path, i + 1);
            return -1;
        }
        if (!(out->v[i] = strdup(v))) {
            seterr(err, errlen, "%s: out of memory", path);
            return -1;
        }
        out->n = i + 1;
    }
    return 0;
}

/* A relative path is taken from the folder of the file that sets it, so a
 * daemon started from / (systemd) finds what the file names beside it. */
static char *abs_path(const char *value, const char *file)
{
    const char *slash = strrchr(file, '/');
    char *dir = NULL, *out = NULL, *rel;
    if (value[0] == '/')
        return strdup(value);
    if (!(rel = slash ? strndup(file, (size_t)(slash - file) + (slash == file)) : strdup(".")))
        return NULL;
    dir = realpath(rel, NULL);
    free(rel);
    if (dir && asprintf(&out, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, value) < 0)
        out = NULL;
    free(dir);
    return out;
}

/* The number of comma-separated ports in s, each a plain decimal in
 * [min, max]; -1 when one is not. */
static int ports_count(const char *s, long long min, long long max)
{
    int n = 0;
    for (;;) {
        long long v = 0;
        const char *p = s;
        while (*p >= '0' && *p <= '9' && v <= max)
            v = v * 10 + (*p++ - '0');
        if (p == s || v < min || v > max || (*p != ',' && *p != '\0'))
            return -1;
        n++;
        if (*p == '\0')
            return n;
        s = p + 1;
    }
}

/* The number of comma-separated entries in a libpq host list. */
static int hosts_count(const char *s)
{
    int n = 1;
    for (; *s; s++)
        n += *s == ',';
    return n;
}

/* A Sentinel address "host:port", port in [1, 65535]. */
static bool sentinel_addr_ok(const char *s)
{
    const char *colon = strrchr(s, ':');
    return colon && colon != s && ports_count(colon + 1, 1, 65535) == 1;
}

static const char *const session_attrs[] = { "any",     "read-write", "read-only",
                                             "primary", "standby",    "prefer-standby" };

/* libconfig 1.5 (Debian's) keeps a decimal or hex literal without the L
 * suffix in 32 bits, wrapping what does not fit: redis.port = 4294983675
 * would be taken as 16379, and an overlong literal as -1. So an integer's
 * value is its literal's, read again where libconfig parsed it (cfglit.h),
 * in 64 bits; one that does not fit even there is refused as written, and
 * so is a literal that cannot be found for certain. 0 and *v, or -1 with
 * err. */
static int literal_int(const config_setting_t *s, const struct cfg_def *d, const char *path, long long *v,
                       char *err, size_t errlen)
{
    char lit[128], *end;
    if (cfglit_find(src_file(s, path), src_line(s), d->path, lit, sizeof(lit), err, errlen) != 0)
        return -1;
    const char *digits = lit + (lit[0] == '-' || lit[0] == '+');
    int base = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') ? 16 : 10;
    errno = 0;
    long long n = strtoll(lit, &end, base);
    if (errno == ERANGE) {
        seterr(err, errlen, "%s:%d: '%s' = %s is out of range [%lld, %lld]", src_file(s, path), src_line(s),
               d->path, lit, d->min, d->max);
        return -1;
    }
    /* what libconfig took for an integer: digits, then L or LL for int64 */
    if (end == lit || (strcmp(end, "") != 0 && strcmp(end, "L") != 0 && strcmp(end, "LL") != 0)) {
        seterr(err, errlen, "%s:%d: '%s' = %s: cannot read it as an integer to check it", src_file(s, path),
               src_line(s), d->path, lit);
        return -1;
    }
    *v = n;
    return 0;
}

/* An integer setting the file sets, checked against its range. */
static int load_int(const config_setting_t *s, const struct cfg_def *d, const char *path, int *out, char *err,
                    size_t errlen)
{
    int t = config_setting_type(s);
    long long v;
    if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) {
        seterr(err, errlen, "%s:%d: '%s' must be an integer", src_file(s, path), src_line(s), d->path);
        return -1;
    }
    if (literal_int(s, d, path, &v, err, errlen) != 0)
        return -1;
    if (v < d->min || v > d->max) {
        seterr(err, errlen, "%s:%d: '%s' = %lld is out of range [%lld, %lld]", src_file(s, path),
               src_line(s), d->path, v, d->min, d->max);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int load_bool(const config_setting_t *s, const struct cfg_def *d, const char *path, int *out,
                     char *err, size_t errlen)
{
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
        seterr(err, errlen, "%s:%d: '%s' must be true or false", src_file(s, path), src_line(s), d->path);
        return -1;
    }
    *out = config_setting_get_bool(s) ? 1 : 0;
    return 0;
}

/* The text of a setting the file sets, for the types stored from text: a
 * string, or for CFG_PORTS also a bare integer (printed into buf). NULL
 * with err when it is neither, or empty where it is required. */
static const char *setting_text(const config_setting_t *s, const struct cfg_def *d, const char *path,
                                char *buf, size_t buflen, char *err, size_t errlen)
{
    int t = config_setting_type(s);
    if (d->type == CFG_PORTS && t != CONFIG_TYPE_STRING) {
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) {
            seterr(err, errlen, "%s:%d: '%s' must be a port or a string of ports \"p1,p2\"",
                   src_file(s, path), src_line(s), d->path);
            return NULL;
        }
        long long v;
        if (literal_int(s, d, path, &v, err, errlen) != 0)
            return NULL;
        snprintf(buf, buflen, "%lld", v);
        return buf;
    }
    if (t != CONFIG_TYPE_STRING) {
        seterr(err, errlen, "%s:%d: '%s' must be a string", src_file(s, path), src_line(s), d->path);
        return NULL;
    }
    const char *sval = config_setting_get_string(s);
    if ((d->flags & CFG_REQUIRED) && *sval == '\0') {
        seterr(err, errlen, "%s:%d: '%s' must not be empty", src_file(s, path), src_line(s), d->path);
        return NULL;
    }
    return sval;
}

/* A path setting's value as stored: "" stays "" (not set: libpq's default
 * for postgres.sslrootcert, no password file); a bare password file name
 * under systemd is the credential of that name; anything else is resolved
 * against the folder of the file that sets it. NULL when it cannot be. */
static char *setting_path(enum cfg_type type, const char *sval, const char *file)
{
    char *v = NULL;
    if (*sval == '\0')
        return strdup("");
    if (type == CFG_PWFILE)
        v = secret_credential_path(sval);
    return v ? v : abs_path(sval, file);
}

/* Check sval (set at file:line, or a default when line is 0) against d's
 * type and store it in c. */
static int store_text(const struct cfg_def *d, const char *sval, const char *file, int line, const char *path,
                      struct cfg *c, char *err, size_t errlen)
{
    switch (d->type) {
    case CFG_STR:
        if ((*FIELD(c, d, char *) = strdup(sval)) == NULL) {
            seterr(err, errlen, "%s: out of memory", path);
            return -1;
        }
        return 0;
    case CFG_LEVEL: {
        int l = log_level_parse(sval);
        if (l < 0) {
            seterr(err, errlen, "%s:%d: '%s' must be one of error, warning, notice, info, debug", file, line,
                   d->path);
            return -1;
        }
        *FIELD(c, d, int) = l;
        return 0;
    }
    case CFG_PATH:
    case CFG_PWFILE:
        if (!(*FIELD(c, d, char *) = setting_path(d->type, sval, file))) {
            seterr(err, errlen, "%s:%d: '%s': cannot resolve '%s' against the file's folder", file, line,
                   d->path, sval);
            return -1;
        }
        return 0;
    case CFG_LOGFMT:
        if ((*FIELD(c, d, int) = name_index(logfmt_names, ARRAY_SIZE(logfmt_names), sval)) >= 0)
            return 0;
        seterr(err, errlen, "%s:%d: '%s' must be \"plain\" or \"json\"", file, line, d->path);
        return -1;
    case CFG_AUTH:
        if ((*FIELD(c, d, int) = name_index(auth_names, ARRAY_SIZE(auth_names), sval)) >= 0)
            return 0;
        seterr(err, errlen, "%s:%d: '%s' must be \"none\" or \"jwt\"", file, line, d->path);
        return -1;
    case CFG_PORTS:
        if (ports_count(sval, d->min, d->max) < 1) {
            seterr(err, errlen,
                   "%s:%d: '%s' = \"%s\": each port must be an integer in [%lld, %lld], comma-separated",
                   file, line, d->path, sval, d->min, d->max);
            return -1;
        }
        if ((*FIELD(c, d, char *) = strdup(sval)) == NULL) {
            seterr(err, errlen, "%s: out of memory", path);
            return -1;
        }
        return 0;
    default:
        seterr(err, errlen, "%s: internal: bad type for '%s'", path, d->path);
        return -1;
    }
}

/* One setting from the file, or its default when the file leaves it out:
 * integers, lists and properties are stored as read; the other types are
 * read as text first, then checked and stored by type (store_text), so a
 * default goes through the same checks as a value from the file. */
static int load_one(config_t *lc, const struct cfg_def *d, const char *path, struct cfg *c, char *err,
                    size_t errlen)
{
    config_setting_t *s = config_lookup(lc, d->path);
    const char *sval = NULL;
    char portbuf[24];

    if (s == NULL) {
        if (d->flags & CFG_REQUIRED) {
            seterr(err, errlen, "%s: missing required setting '%s'", path, d->path);
            return -1;
        }
        switch (d->type) {
        case CFG_INT:
        case CFG_BOOL:
            *FIELD(c, d, int) = (int)d->idef;
            return 0;
        case CFG_PROPS:
        case CFG_LIST:
            return 0;
        default:
            sval = d->sdef;
            break;
        }
    } else if (d->type == CFG_INT) {
        return load_int(s, d, path, FIELD(c, d, int), err, errlen);
    } else if (d->type == CFG_BOOL) {
        return load_bool(s, d, path, FIELD(c, d, int), err, errlen);
    } else if (d->type == CFG_PROPS) {
        return load_props(s, d, path, FIELD(c, d, struct cfg_props), err, errlen);
    } else if (d->type == CFG_LIST) {
        return load_list(s, d, path, FIELD(c, d, struct cfg_list), err, errlen);
    } else if (!(sval = setting_text(s, d, path, portbuf, sizeof(portbuf), err, errlen))) {
        return -1;
    }
    return store_text(d, sval, s ? src_file(s, path) : path, s ? src_line(s) : 0, path, c, err, errlen);
}

/* What kconf passes to librdkafka as security.protocol and sasl.mechanisms:
 * the ones the stack and the tests exercise (GSSAPI, OAUTHBEARER need
 * settings of their own). */
static const char *const kafka_protocols[] = { "plaintext", "ssl", "sasl_plaintext", "sasl_ssl" };
static const char *const kafka_mechanisms[] = { "SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN" };

/* The front door's settings (producer/ratelimit.h): a header believed from
 * nobody, or proxies whose header is never read, is a configuration that
 * does not do what its author meant. */
static int check_front(const struct cfg *c, char *err, size_t errlen)
{
    struct na_net n;
    const char *h = c->producer.client_address_header;
    for (size_t i = 0; i < c->producer.trusted_proxies.n; i++)
        if (na_net_parse(c->producer.trusted_proxies.v[i], &n) != 0) {
            seterr(err, errlen,
                   "%s: 'producer.trusted_proxies' entry \"%s\" is not an address or "
                   "\"ADDR/BITS\"",
                   cfg_where(c, "producer.trusted_proxies"), c->producer.trusted_proxies.v[i]);
            return -1;
        }
    for (size_t i = 0; h[i]; i++)
        if (!(isalnum((unsigned char)h[i]) || strchr("!#$%&'*+-.^_`|~", h[i]))) {
            seterr(err, errlen, "%s: 'producer.client_address_header' \"%s\" is not a header name",
                   cfg_where(c, "producer.client_address_header"), h);
            return -1;
        }
    if (!h[0] != !c->producer.trusted_proxies.n) {
        seterr(err, errlen, "%s: 'producer.client_address_header' and 'producer.trusted_proxies' go "
               "together: the header is believed only from the proxies",
               cfg_where(c, h[0] ? "producer.client_address_header" : "producer.trusted_proxies"));
        return -1;
    }
    return 0;
}

/* The listeners bind an IPv4 address (httpd.h, producer/ingress.c): "::1" or
 * a host name would pass here and fail at start, so -t refuses them now. */
static int check_listen(const struct cfg *c, char *err, size_t errlen)
{
    static const char *const names[] = { "producer.listen", "producer.metrics_listen",
                                         "consumer.metrics_listen" };
    const char *vals[] = { c->producer.listen, c->producer.metrics_listen, c->consumer.metrics_listen };
    struct in_addr a;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (inet_pton(AF_INET, vals[i], &a) != 1) {
            seterr(err, errlen, "%s: '%s' = \"%s\" is not an IPv4 address (a.b.c.d: the listeners bind "
                   "IPv4 only; for all interfaces, 0.0.0.0)", cfg_where(c, names[i]), names[i], vals[i]);
            return -1;
        }
    return 0;
}

/* The topics are three: a message dead-lettered onto the topic it came from
 * would come back to the consumer for ever, and an order read as a payment
 * (or the reverse) would only ever be dead-lettered. 0, or -1 with err. */
static int check_topics(const struct cfg *c, char *err, size_t errlen)
{
    if (strcmp(c->kafka.dlq_topic, c->kafka.topic) == 0) {
        seterr(err, errlen, "%s: 'kafka.dlq_topic' is 'kafka.topic' (\"%s\"): a message dead-lettered there "
               "would come back to the consumer for ever", cfg_where(c, "kafka.dlq_topic"), c->kafka.topic);
        return -1;
    }
    if (strcmp(c->kafka.payments_topic, c->kafka.topic) == 0 ||
        strcmp(c->kafka.payments_topic, c->kafka.dlq_topic) == 0) {
        bool orders = strcmp(c->kafka.payments_topic, c->kafka.topic) == 0;
        seterr(err, errlen, "%s: 'kafka.payments_topic' is '%s' (\"%s\"): payments need a topic of their own",
               cfg_where(c, "kafka.payments_topic"), orders ? "kafka.topic" : "kafka.dlq_topic",
               c->kafka.payments_topic);
        return -1;
    }
    return 0;
}

/* Rules that span settings. */
static int check_cross(const struct cfg *c, const char *path, char *err, size_t errlen)
{
    for (size_t i = 0; i < c->redis.sentinels.n; i++)
        if (!sentinel_addr_ok(c->redis.sentinels.v[i])) {
            seterr(err, errlen, "%s: 'redis.sentinels' entry \"%s\" is not \"host:port\"", path,
                   c->redis.sentinels.v[i]);
            return -1;
        }
    for (size_t i = 0; i < c->redis.cluster_nodes.n; i++)
        if (!sentinel_addr_ok(c->redis.cluster_nodes.v[i])) {
            seterr(err, errlen, "%s: 'redis.cluster_nodes' entry \"%s\" is not \"host:port\"",
                   cfg_where(c, "redis.cluster_nodes"), c->redis.cluster_nodes.v[i]);
            return -1;
        }
    if (c->redis.cluster_nodes.n > 0 && c->redis.sentinels.n > 0) {
        seterr(err, errlen,
               "%s: 'redis.cluster_nodes' and 'redis.sentinels' exclude each other: a Cluster fails "
               "over by itself",
               cfg_where(c, "redis.cluster_nodes"));
        return -1;
    }
    if (c->redis.cluster_nodes.n > 0 && c->redis.db != 0) {
        seterr(err, errlen,
               "%s: 'redis.db' must be 0 with 'redis.cluster_nodes': a Cluster has no other database",
               cfg_where(c, "redis.db"));
        return -1;
    }
    if (c->redis.sentinels.n > 0 && c->redis.master_name[0] == '\0') {
        seterr(err, errlen,
               "%s: 'redis.sentinels' needs 'redis.master_name' (the name the Sentinels monitor)", path);
        return -1;
    }
    if (c->redis.min_replicas_ack > 0 && c->redis.wait_timeout_ms >= c->redis.command_timeout_ms) {
        seterr(err, errlen,
               "%s: 'redis.wait_timeout_ms' (%d) must be below 'redis.command_timeout_ms' (%d): WAIT "
               "is one of the round trip's commands",
               path, c->redis.wait_timeout_ms, c->redis.command_timeout_ms);
        return -1;
    }
    int nports = ports_count(c->postgres.port, 1, 65535), nhosts = hosts_count(c->postgres.host);
    if (nports != 1 && nports != nhosts) {
        seterr(err, errlen,
               "%s: 'postgres.port' names %d ports for %d hosts in 'postgres.host' (give one, or one "
               "per host)",
               path, nports, nhosts);
        return -1;
    }
    if (name_index(session_attrs, ARRAY_SIZE(session_attrs), c->postgres.target_session_attrs) < 0) {
        seterr(err, errlen, "%s: 'postgres.target_session_attrs' must be one of any, read-write, read-only, "
               "primary, standby, prefer-standby", path);
        return -1;
    }
    if (name_index(kafka_protocols, ARRAY_SIZE(kafka_protocols), c->kafka.security_protocol) < 0) {
        seterr(err, errlen,
               "%s: 'kafka.security_protocol' must be one of plaintext, ssl, sasl_plaintext, sasl_ssl", path);
        return -1;
    }
    if (name_index(kafka_mechanisms, ARRAY_SIZE(kafka_mechanisms), c->kafka.sasl_mechanism) < 0) {
        seterr(err, errlen, "%s: 'kafka.sasl_mechanism' must be one of SCRAM-SHA-512, SCRAM-SHA-256, PLAIN",
               path);
        return -1;
    }
    if (check_topics(c, err, errlen) != 0)
        return -1;
    if (c->lock.backoff_base_ms > c->lock.backoff_cap_ms) {
        seterr(err, errlen, "%s: 'lock.backoff_base_ms' (%d) must not exceed 'lock.backoff_cap_ms' (%d)",
               path, c->lock.backoff_base_ms, c->lock.backoff_cap_ms);
        return -1;
    }
    if (check_listen(c, err, errlen) != 0)
        return -1;
    return check_front(c, err, errlen);
}

int cfg_addr_loopback(const char *addr)
{
    unsigned char a[sizeof(struct in6_addr)];
    if (strcmp(addr, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, addr, a) == 1)
        return a[0] == 127;
    if (inet_pton(AF_INET6, addr, a) != 1)
        return 0; /* a host name, "", "*": whatever it binds, not known to be loopback */
    struct in6_addr v6;
    memcpy(&v6, a, sizeof(v6));
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && a[12] == 127);
}

/* A CA file a TLS setting names: readable now, so that -t (ExecStartPre)
 * catches a missing one, not the first connection. 0, or -1 with err. */
static int ca_readable(const struct cfg *c, const char *setting, const char *file, char *err, size_t errlen)
{
    struct stat st;
    if (stat(file, &st) != 0 || access(file, R_OK) != 0) {
        seterr(err, errlen, "%s: '%s': %s: cannot read: %s", cfg_where(c, setting), setting, file,
               strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: '%s': %s: not a regular file", cfg_where(c, setting), setting, file);
        return -1;
    }
    return 0;
}

/* What a production configuration must not get wrong, each error at the
 * line of the setting to change: a server certificate checked against no
 * CA, a CA file that is not there, and a producer that believes any
 * client's user_id where clients beyond this host can reach it. */
static int check_trust(const struct cfg *c, char *err, size_t errlen)
{
    const char *mode = c->postgres.sslmode;
    bool verify = strcmp(mode, "verify-ca") == 0 || strcmp(mode, "verify-full") == 0;
    if (verify && *c->postgres.sslrootcert == '\0') {
        seterr(err, errlen, "%s: 'postgres.sslmode' = \"%s\" checks the server's certificate against a CA: "
               "name its file in 'postgres.sslrootcert'", cfg_where(c, "postgres.sslmode"), mode);
        return -1;
    }
    if (*c->postgres.sslrootcert && strcmp(mode, "disable") != 0 &&
        ca_readable(c, "postgres.sslrootcert", c->postgres.sslrootcert, err, errlen) != 0)
        return -1;
    bool tls = strcmp(c->kafka.security_protocol, "ssl") == 0 ||
               strcmp(c->kafka.security_protocol, "sasl_ssl") == 0;
    if (tls && *c->kafka.ssl_ca_file &&
        ca_readable(c, "kafka.ssl_ca_file", c->kafka.ssl_ca_file, err, errlen) != 0)
        return -1;
    if (role_self == CFG_ROLE_PRODUCER && c->producer.auth == CFG_AUTH_NONE &&
        !c->producer.allow_insecure_auth && !cfg_addr_loopback(c->producer.listen)) {
        seterr(err, errlen, "%s: 'producer.auth' = \"none\" believes the user_id any client sends, and "
               "'producer.listen' = \"%s\" is not loopback: set auth = \"jwt\", listen on 127.0.0.1, or "
               "(a trial behind a front that authenticates) 'producer.allow_insecure_auth' = true",
               cfg_where(c, "producer.auth"), c->producer.listen);
        return -1;
    }
    return 0;
}

/* Read one engine's password files (pw, files: that engine's arrays) of the
 * roles asked for. An error names the setting and where it is set, and the
 * file; never the content. */
static int load_engine_secrets(config_t *lc, const char *path, const char *engine,
                               char *const files[CFG_ROLES], struct secret *pw[CFG_ROLES], char *err,
                               size_t errlen)
{
    for (int r = 0; r < CFG_ROLES; r++) {
        char setting[64], ferr[512];
        const char *f = files[r];
        if (r != (int)role_self && !(role_mask & CFG_ROLE_BIT(r)))
            continue;
        if (*f == '\0') {
            if (secret_empty(&pw[r]) != 0) {
                seterr(err, errlen, "%s: out of memory", path);
                return -1;
            }
            continue;
        }
        if (secret_read(f, &pw[r], ferr, sizeof(ferr)) != 0) {
            snprintf(setting, sizeof(setting), "%s.%s_password_file", engine, role_names[r]);
            const config_setting_t *s = config_lookup(lc, setting);
            seterr(err, errlen, "%s:%d: '%s': %s", s ? src_file(s, path) : path, s ? src_line(s) : 0, setting,
                   ferr);
            return -1;
        }
    }
    return 0;
}

static int load_secrets(config_t *lc, const char *path, struct cfg *c, char *err, size_t errlen)
{
    if (load_engine_secrets(lc, path, "postgres", c->postgres.password_file, c->postgres.password, err,
                            errlen) != 0 ||
        load_engine_secrets(lc, path, "redis", c->redis.password_file, c->redis.password, err, errlen) != 0 ||
        load_engine_secrets(lc, path, "kafka", c->kafka.password_file, c->kafka.password, err, errlen) != 0)
        return -1;
    /* SASL without a password would only fail later, at every connection. */
    if (cfg_kafka_sasl(c) && *c->kafka.password_file[role_self] == '\0') {
        char setting[64];
        snprintf(setting, sizeof(setting), "kafka.%s_password_file", role_names[role_self]);
        const config_setting_t *s = config_lookup(lc, "kafka.security_protocol");
        seterr(err, errlen, "%s:%d: '%s' is required with 'kafka.security_protocol' %s",
               s ? src_file(s, path) : path, s ? src_line(s) : 0, setting, c->kafka.security_protocol);
        return -1;
    }
    return 0;
}

/* Where each setting is set, for cfg_where: "file:line", or path alone for
 * one the file leaves out. 0, or -1 (out of memory). */
static int record_where(config_t *lc, const char *path, struct cfg *c)
{
    if (!(c->where = calloc(ARRAY_SIZE(cfg_defs), sizeof(char *))))
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++) {
        const config_setting_t *s = config_lookup(lc, cfg_defs[i].path);
        int n = s ? asprintf(&c->where[i], "%s:%d", src_file(s, path), src_line(s))
                  : ((c->where[i] = strdup(path)) ? 0 : -1);
        if (n < 0) {
            c->where[i] = NULL;
            return -1;
        }
    }
    return 0;
}

const char *cfg_where(const struct cfg *c, const char *setting)
{
    for (size_t i = 0; c->where && i < ARRAY_SIZE(cfg_defs); i++)
        if (strcmp(cfg_defs[i].path, setting) == 0)
            return c->where[i] ? c->where[i] : "(configuration)";
    return "(configuration)";
}

int cfg_load(const char *path, struct cfg *out, char *err, size_t errlen)
{
    config_t lc;
    struct cfg c;
    memset(&c, 0, sizeof(c));
    config_init(&lc);

    /* Open it ourselves: libconfig does not keep errno, and would happily
     * "read" a directory. */
    FILE *f = fopen(path, "r");
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: cannot read: %s", path, f == NULL ? strerror(errno) : "not a regular file");
        if (f)
            fclose(f);
        goto fail;
    }
    int read_ok = config_read(&lc, f);
    fclose(f);
    if (!read_ok) {
        seterr(err, errlen, "%s:%d: %s", config_error_file(&lc) ? config_error_file(&lc) : path,
               config_error_line(&lc), config_error_text(&lc));
        goto fail;
    }
    if (check_unknown(&lc, path, err, errlen) != 0)
        goto fail;
    if (record_where(&lc, path, &c) != 0) {
        seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++)
        if (load_one(&lc, &cfg_defs[i], path, &c, err, errlen) != 0)
            goto fail;
    if (check_cross(&c, path, err, errlen) != 0 || check_trust(&c, err, errlen) != 0)
        goto fail;
    if (load_secrets(&lc, path, &c, err, errlen) != 0)
        goto fail;

    config_destroy(&lc);
    *out = c;
    return 0;
fail:
    config_destroy(&lc);
    cfg_free(&c);
    return -1;
}

static void props_free(struct cfg_props *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->keys[i]);
        free(p->values[i]);
    }
    free(p->keys);
    free(p->values);
    memset(p, 0, sizeof(*p));
}

static void list_free(struct cfg_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

void cfg_free(struct cfg *c)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++) {
        const struct cfg_def *d = &cfg_defs[i];
        if (d->type == CFG_STR || d->type == CFG_PATH || d->type == CFG_PORTS || d->type == CFG_PWFILE) {
            free(*FIELD(c, d, char *));
            *FIELD(c, d, char *) = NULL;
        } else if (d->type == CFG_PROPS) {
            props_free(FIELD(c, d, struct cfg_props));
        } else if (d->type == CFG_LIST) {
            list_free(FIELD(c, d, struct cfg_list));
        }
    }
    for (size_t i = 0; c->where && i < ARRAY_SIZE(cfg_defs); i++)
        free(c->where[i]);
    free(c->where);
    c->where = NULL;
    for (int r = 0; r < CFG_ROLES; r++) {
        secret_free(c->postgres.password[r]);
        c->postgres.password[r] = NULL;
        secret_free(c->redis.password[r]);
        c->redis.password[r] = NULL;
        secret_free(c->kafka.password[r]);
        c->kafka.password[r] = NULL;
    }
}

static bool props_equal(const struct cfg_props *a, const struct cfg_props *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->keys[i], b->keys[i]) != 0 || strcmp(a->values[i], b->values[i]) != 0)
            return false;
    return true;
}

static bool list_equal(const struct cfg_list *a, const struct cfg_list *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]) != 0)
            return false;
    return true;
}

static bool def_equal(const struct cfg_def *d, const struct cfg *a, const struct cfg *b)
{
    switch (d->type) {
    case CFG_STR:
    case CFG_PATH:
    case CFG_PORTS:
    case CFG_PWFILE:
        return strcmp(*CFIELD(a, d, char *), *CFIELD(b, d, char *)) == 0;
    case CFG_LIST:
        return list_equal(CFIELD(a, d, struct cfg_list), CFIELD(b, d, struct cfg_list));
    case CFG_PROPS:
        return props_equal(CFIELD(a, d, struct cfg_props), CFIELD(b, d, struct cfg_props));
    default:
        return *CFIELD(a, d, int) == *CFIELD(b, d, int);
    }
}

int cfg_reload_check(const struct cfg *old, const struct cfg *new, char *err, size_t errlen)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++) {
        const struct cfg_def *d = &cfg_defs[i];
        if (!(d->flags & (CFG_RELOAD | CFG_SWAP)) && !def_equal(d, old, new)) {
            seterr(err, errlen, "'%s' cannot change on reload; restart the daemon to apply it", d->path);
            return -1;
        }
    }
    return 0;
}

static size_t def_size(const struct cfg_def *d)
{
    switch (d->type) {
    case CFG_STR:
    case CFG_PATH:
    case CFG_PORTS:
    case CFG_PWFILE: return sizeof(char *);
    case CFG_LIST: return sizeof(struct cfg_list);
    case CFG_PROPS: return sizeof(struct cfg_props);
    default: return sizeof(int);
    }
}

void cfg_apply_reload(struct cfg *cur, struct cfg *new)
{
    /* The places of the file now running (new frees the old ones). */
    char **w = cur->where;
    cur->where = new->where;
    new->where = w;
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++) {
        const struct cfg_def *d = &cfg_defs[i];
        /* Swapped, not copied: new then owns (and frees) the old value. */
        if (d->flags & CFG_SWAP) {
            char tmp[sizeof(struct cfg_props)];
            size_t n = def_size(d);
            memcpy(tmp, FIELD(cur, d, char), n);
            memcpy(FIELD(cur, d, char), FIELD(new, d, char), n);
            memcpy(FIELD(new, d, char), tmp, n);
            continue;
        }
        /* Reloadable settings are all int-like (checked by the test suite),
         * so each is one atomic store that worker threads read with CFG_GET. */
        if ((d->flags & CFG_RELOAD) && def_size(d) == sizeof(int))
            __atomic_store_n(FIELD(cur, d, int), *CFIELD(new, d, int), __ATOMIC_RELAXED);
    }
    /* The passwords are read by threads that connect (consumer workers)
     * while this runs: copied in under each secret's lock, never swapped, so
     * a pointer a thread holds stays valid. New connections use the new
     * password; open ones are left alone (the server keeps an authenticated
     * session after ALTER ROLE ... PASSWORD) and drain on their own. */
    for (int r = 0; r < CFG_ROLES; r++) {
        if (cur->postgres.password[r] && new->postgres.password[r])
            secret_replace(cur->postgres.password[r], new->postgres.password[r]);
        /* Redis too: an ACL user's open connections stay authenticated after
         * ACL SETUSER ... resetpass (until CLIENT KILL USER or a break). */
        if (cur->redis.password[r] && new->redis.password[r])
            secret_replace(cur->redis.password[r], new->redis.password[r]);
        /* Kafka: librdkafka holds its own copy; kconf_rotate hands it the
         * new one after this. Brokers keep authenticated connections. */
        if (cur->kafka.password[r] && new->kafka.password[r])
            secret_replace(cur->kafka.password[r], new->kafka.password[r]);
    }
}

int cfg_reloadable_scalar_only(void)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++)
        if ((cfg_defs[i].flags & CFG_RELOAD) && def_size(&cfg_defs[i]) != sizeof(int))
            return 0;
    return 1;
}

static void cfg_print(const struct cfg *c, FILE *f, bool mask);

void cfg_dump(const struct cfg *c, FILE *f) { cfg_print(c, f, true); }
void cfg_write(const struct cfg *c, FILE *f) { cfg_print(c, f, false); }

static void cfg_print(const struct cfg *c, FILE *f, bool mask)
{
    const char *section = "";
    size_t seclen = 0;
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++) {
        const struct cfg_def *d = &cfg_defs[i];
        const char *dot = strchr(d->path, '.');
        if ((size_t)(dot - d->path) != seclen || strncmp(section, d->path, seclen) != 0) {
            if (seclen)
                fputs("};\n", f);
            section = d->path;
            seclen = (size_t)(dot - d->path);
            fprintf(f, "%.*s = {\n", (int)seclen, section);
        }
        fprintf(f, "  %s = ", dot + 1);
        switch (d->type) {
        case CFG_INT:
            fprintf(f, "%d;\n", *CFIELD(c, d, int));
            break;
        case CFG_PORTS: {
            const char *v = *CFIELD(c, d, char *);
            fprintf(f, strchr(v, ',') ? "\"%s\";\n" : "%s;\n", v);
            break;
        }
        case CFG_STR:
        case CFG_PATH:
        case CFG_PWFILE: { /* a password file's path, never its content */
            const char *v = *CFIELD(c, d, char *);
            fprintf(f, "\"%s\";\n", mask && (d->flags & CFG_SECRET) && *v ? "********" : v);
            break;
        }
        case CFG_LEVEL:
            fprintf(f, "\"%s\";\n", log_level_name((enum log_level)*CFIELD(c, d, int)));
            break;
        case CFG_LOGFMT:
            fprintf(f, "\"%s\";\n", logfmt_names[*CFIELD(c, d, int)]);
            break;
        case CFG_AUTH:
            fprintf(f, "\"%s\";\n", auth_names[*CFIELD(c, d, int)]);
            break;
        case CFG_BOOL:
            fprintf(f, "%s;\n", *CFIELD(c, d, int) ? "true" : "false");
            break;
        case CFG_LIST: {
            const struct cfg_list *l = CFIELD(c, d, struct cfg_list);
            fputs("[", f);
            for (size_t k = 0; k < l->n; k++)
                fprintf(f, "%s\"%s\"", k ? ", " : " ", l->v[k]);
            fputs(l->n ? " ];\n" : "];\n", f);
            break;
        }
        case CFG_PROPS: {
            const struct cfg_props *p = CFIELD(c, d, struct cfg_props);
            fputs("[", f);
            for (size_t k = 0; k < p->n; k++) {
                /* sasl.password, ssl.key.password and friends */
                bool secret = mask && (strstr(p->keys[k], "password") || strstr(p->keys[k], "secret"));
                fprintf(f, "%s\"%s=%s\"", k ? ", " : " ", p->keys[k], secret ? "********" : p->values[k]);
            }
            fputs(p->n ? " ];\n" : "];\n", f);
            break;
        }
        }
    }
    if (seclen)
        fputs("};\n", f);
}

/* --- the reference (seckillctl config reference) ------------------------------ */

/* Markdown-safe: help strings name keys like <prefix>:{item:ID}. */
static void md_text(const char *s, FILE *f)
{
    for (; *s; s++) {
        if (*s == '<' || *s == '>' || *s == '|' || *s == '*')
            fputc('\\', f);
        fputc(*s, f);
    }
}

static const char *type_name(const struct cfg_def *d)
{
    switch (d->type) {
    case CFG_INT: return "integer";
    case CFG_STR: return "string";
    case CFG_PATH: return "path";
    case CFG_PWFILE: return "password file";
    case CFG_PORTS: return "port or \"p1,p2\"";
    case CFG_LIST: return "list of strings";
    case CFG_PROPS: return "list of \"name=value\"";
    case CFG_LEVEL:
    case CFG_LOGFMT:
    case CFG_AUTH: return "keyword";
    case CFG_BOOL: return "boolean";
    }
    return "?";
}

static void ref_default(const struct cfg_def *d, FILE *f)
{
    if (d->flags & CFG_REQUIRED)
        fputs("*required*", f);
    else if (d->type == CFG_INT)
        fprintf(f, "`%lld`", d->idef);
    else if (d->type == CFG_BOOL)
        fputs(d->idef ? "`true`" : "`false`", f);
    else if (d->type == CFG_LIST || d->type == CFG_PROPS)
        fputs("`[]`", f);
    else
        fprintf(f, "`\"%s\"`", d->sdef ? d->sdef : "");
}

static void ref_range(const struct cfg_def *d, FILE *f)
{
    switch (d->type) {
    case CFG_INT:
    case CFG_PORTS: fprintf(f, "%lld – %lld", d->min, d->max); break;
    case CFG_LEVEL:
        for (int l = LOG_LVL_ERROR; l <= LOG_LVL_DEBUG; l++)
            fprintf(f, "%s`%s`", l > LOG_LVL_ERROR ? ", " : "", log_level_name((enum log_level)l));
        break;
    case CFG_LOGFMT:
        for (size_t k = 0; k < ARRAY_SIZE(logfmt_names); k++)
            fprintf(f, "%s`%s`", k ? ", " : "", logfmt_names[k]);
        break;
    case CFG_AUTH:
        for (size_t k = 0; k < ARRAY_SIZE(auth_names); k++)
            fprintf(f, "%s`%s`", k ? ", " : "", auth_names[k]);
        break;
    case CFG_BOOL: fputs("`true`, `false`", f); break;
    default: break;
    }
}

static const char ref_intro[] =
    "# Configuration reference\n"
    "\n"
    "<!-- Generated by `seckillctl config reference` from CFG_SETTINGS in common/base/cfg.h: do not edit.\n"
    "     Regenerate with `build/seckillctl config reference > docs/configuration.md`;\n"
    "     tests/cli/test_docs.sh fails while the two differ. -->\n"
    "\n"
    "Every binary reads one [libconfig](https://hyperrealm.github.io/libconfig/) file: `-c FILE`,\n"
    "default `/etc/seckill/seckill.cfg`. `config/seckill.cfg` is the development one and points at\n"
    "the local stack. Every setting is declared once, in `CFG_SETTINGS` in `common/base/cfg.h`, and this\n"
    "page is printed from that table by `seckillctl config reference`.\n"
    "\n"
    "Loading validates everything and fails with `file:line: message`; an unknown section or\n"
    "setting is an error, not a silent default. `-t` (`--check-config`) checks a file and exits\n"
    "(the producer's `-t` also loads the keys `jwt.keys` names):\n"
    "\n"
    "```\n"
    "$ build/seckillctl -c bad.cfg -t\n"
    "seckillctl: bad.cfg:3: 'redis.port' = 70000 is out of range [1, 65535]\n"
    "seckillctl: bad.cfg:3: unknown setting 'redis.prot'\n"
    "seckillctl: bad.cfg:2: 'kafka.properties': No such configuration property: \"linger.mss\"\n"
    "seckillctl: bad.cfg: missing required setting 'kafka.brokers'\n"
    "```\n"
    "\n"
    "The **SIGHUP** column: *reload* settings take effect on `systemctl reload` (SIGHUP) in a\n"
    "running daemon; *reload, checked* ones are rebuilt by the module that owns them (the\n"
    "producer's token keys and claims checks), which refuses a broken file and keeps the old\n"
    "values; *restart* ones need a restart, and a reload that changes one is refused with the\n"
    "reason logged while the daemon runs on with the old file. **Secret** settings are never\n"
    "printed or logged (`seckillctl config show` masks them), nor are librdkafka properties whose\n"
    "name contains `password` or `secret`. Relative paths are resolved against the folder of the\n"
    "file that sets them.\n"
    "\n"
    "Each program connects to PostgreSQL as its own role (`postgres.<role>_user`) and to Redis as its\n"
    "own ACL user (`redis.<role>_user`); the grants and ACLs are in [security.md](security.md). A\n"
    "**password file** holds that role's password and nothing else\n"
    "(one trailing newline is dropped); it must be mode 0600 or 0400, and is read when the file is\n"
    "loaded (`-t` checks it) and again on SIGHUP: a broken one refuses the reload. A program reads\n"
    "only its own role's file. A bare name (no `/`) is a systemd credential when\n"
    "`$CREDENTIALS_DIRECTORY` is set (`LoadCredential=`). `config show` prints the path, never the\n"
    "content.\n";

void cfg_reference(FILE *f)
{
    const char *section = "";
    size_t seclen = 0;
    fputs(ref_intro, f);
    for (size_t i = 0; i < ARRAY_SIZE(cfg_defs); i++) {
        const struct cfg_def *d = &cfg_defs[i];
        const char *dot = strchr(d->path, '.');
        if ((size_t)(dot - d->path) != seclen || strncmp(section, d->path, seclen) != 0) {
            section = d->path;
            seclen = (size_t)(dot - d->path);
            fprintf(f, "\n## %.*s\n\n", (int)seclen, section);
            fputs("| setting | type | default | range / values | SIGHUP | secret | description |\n"
                  "|---|---|---|---|---|---|---|\n",
                  f);
        }
        fprintf(f, "| `%s` | %s | ", d->path, type_name(d));
        ref_default(d, f);
        fputs(" | ", f);
        ref_range(d, f);
        fprintf(f, " | %s | %s | ",
                (d->flags & CFG_SWAP)     ? "reload, checked"
                : (d->flags & CFG_RELOAD) ? "reload"
                                          : "restart",
                (d->flags & CFG_SECRET) ? "yes" : "");
        md_text(d->help, f);
        fputs(" |\n", f);
    }
}

const char *cfg_help(size_t i, const char **path)
{
    if (i >= ARRAY_SIZE(cfg_defs))
        return NULL;
    if (path)
        *path = cfg_defs[i].path;
    return cfg_defs[i].help;
}
