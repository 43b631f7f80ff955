#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static int64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t util_mono_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

int64_t util_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
int64_t util_wall_ms(void) { return clock_ms(CLOCK_REALTIME); }

int util_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(cv, &ca) == 0 ? 0 : -1;
    pthread_condattr_destroy(&ca);
    return rc;
}

struct timeval util_timeval_ms(int64_t ms)
{
    struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
    return tv;
}

struct timespec util_deadline_ts(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void util_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

int util_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

size_t util_sort_unique_i64(int64_t *v, size_t n)
{
    size_t k = 0;
    if (n == 0)
        return 0; /* qsort wants a valid pointer even for no elements */
    qsort(v, n, sizeof(*v), util_cmp_i64);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

int util_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    /* strtoll accepts leading spaces and '+'; a number on a command line or
     * in a message must be exactly digits. */
    const char *p = s;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

void *util_memdup(const void *b, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, b, n);
    return d;
}

size_t util_i64_text(char *out, int64_t v)
{
    char rev[UTIL_I64_CHARS];
    size_t n = 0, len = 0;
    /* In unsigned arithmetic, so that INT64_MIN's magnitude fits. */
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        rev[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        out[len++] = '-';
    while (n > 0)
        out[len++] = rev[--n];
    out[len] = '\0';
    return len;
}

int util_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void util_hex(char *out, const unsigned char *bytes, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[bytes[i] >> 4];
        out[2 * i + 1] = hex[bytes[i] & 0xf];
    }
    out[2 * n] = '\0';
}

int util_random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof(raw) || util_random_bytes(raw, nbytes) != 0)
        return -1;
    util_hex(out, raw, nbytes);
    return 0;
}

uint64_t util_rand_below(uint64_t n)
{
    /* xorshift64*: statistically fine for jitter, no locks, no syscalls. */
    static _Thread_local uint64_t state;
    if (state == 0 && (util_random_bytes(&state, sizeof(state)) != 0 || state == 0))
        state = (uint64_t)util_mono_ms() | 1;
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return n ? (state * 0x2545F4914F6CDD1DULL) % n : 0;
}

int64_t util_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms)
{
    int64_t ceiling = base_ms;
    for (int i = 0; i < attempt && ceiling < cap_ms; i++)
        ceiling *= 2;
    if (ceiling > cap_ms)
        ceiling = cap_ms;
    return (int64_t)util_rand_below((uint64_t)ceiling + 1);
}

int util_read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (f == NULL)
        return -1;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (nb == NULL)
                goto fail;
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) {
            if (ferror(f))
                goto fail;
            break;
        }
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return 0;
fail:
    free(buf);
    fclose(f);
    return -1;
}

/* n decimal digits at *p into *out; advances p. 0 or -1. */
static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if ((*p)[i] < '0' || (*p)[i] > '9')
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

int util_parse_time_ms(const char *s, int64_t *out_ms)
{
    struct tm tm = { 0 }, back;
    int y, mo, d, h, mi, sec, ms = 0, zh = 0, zm = 0, sign = 0;
    const char *p = s;
    if (!s || !*s)
        return -1;
    /* All digits: already epoch milliseconds. */
    if (strspn(s, "0123456789") == strlen(s))
        return util_parse_i64(s, 0, INT64_C(253402300799999), out_ms);
    if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' || digits(&p, 2, &d) ||
        (*p != 'T' && *p != 't' && *p != ' ') || !*p++ || digits(&p, 2, &h) || *p++ != ':' ||
        digits(&p, 2, &mi) || *p++ != ':' || digits(&p, 2, &sec))
        return -1;
    if (*p == '.') {
        /* Milliseconds; finer digits are allowed and dropped. */
        int n = 0;
        p++;
        while (*p >= '0' && *p <= '9') {
            if (n < 3)
                ms = ms * 10 + (*p - '0');
            n++;
            p++;
        }
        if (n == 0)
            return -1;
        for (; n < 3; n++)
            ms *= 10;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '-' ? -1 : 1;
        if (digits(&p, 2, &zh))
            return -1;
        if (*p == ':')
            p++;
        if (digits(&p, 2, &zm) || zh > 23 || zm > 59)
            return -1;
    }
    if (*p != '\0' || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59)
        return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    /* timegm normalises 31 February into March: refuse dates that moved. */
    if (t == (time_t)-1 || !gmtime_r(&t, &back) || back.tm_mday != d || back.tm_mon != mo - 1)
        return -1;
    int64_t v = ((int64_t)t - (int64_t)sign * (zh * 3600 + zm * 60)) * 1000 + ms;
    if (v < 0)
        return -1;
    *out_ms = v;
    return 0;
}

void util_format_time_ms(int64_t ms, char *buf, size_t len)
{
    struct tm tm;
    time_t t = (time_t)(ms / 1000);
    if (!gmtime_r(&t, &tm)) {
        snprintf(buf, len, "%lld ms", (long long)ms);
        return;
    }
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}
