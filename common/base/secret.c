#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole object lives in its own mapping: the lock and the length with
 * the bytes, so nothing of it sits in the heap a core dump would show. */
struct secret {
    pthread_mutex_t mu;
    size_t len;
    size_t mapped; /* bytes of the mapping */
    char buf[SECRET_MAX + 3]; /* the file's bytes with a "\r\n", then NUL */
};

static struct secret *secret_alloc(void)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t n = sizeof(struct secret);
    if (page > 0)
        n = (n + (size_t)page - 1) / (size_t)page * (size_t)page;
    struct secret *s = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        return NULL;
    /* Out of core dumps; not swapped when the memlock limit allows (an
     * unprivileged service may have none left: the dump exclusion is what
     * matters, so a failed mlock is no error). */
    (void)madvise(s, n, MADV_DONTDUMP);
    (void)mlock(s, n);
    s->mapped = n;
    s->len = 0;
    s->buf[0] = '\0';
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        munmap(s, n);
        return NULL;
    }
    return s;
}

void secret_free(struct secret *s)
{
    if (!s)
        return;
    size_t n = s->mapped;
    pthread_mutex_destroy(&s->mu);
    explicit_bzero(s, n);
    munlock(s, n);
    munmap(s, n);
}

int secret_empty(struct secret **out)
{
    return (*out = secret_alloc()) ? 0 : -1;
}

/* What fd (path) must be before a byte of it is read: a regular file that
 * no one else may read, small enough for a password (what: "password",
 * "key"). 0, or -1 with err. */
static int check_file(int fd, const char *path, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    /* As libpq refuses a .pgpass others can read: a readable password file
     * is a leak already, and saying so beats using it. */
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen, "%s: group or others may access it (mode %04o); it must be 0600 or 0400",
                 path, (unsigned)(st.st_mode & 07777));
        return -1;
    }
    if (st.st_size > SECRET_MAX + 2) {
        snprintf(err, errlen, "%s: larger than %d bytes: not a %s file", path, SECRET_MAX, what);
        return -1;
    }
    return 0;
}

/* Read fd to its end into s->buf (the size may have changed since fstat):
 * one byte more than fits says it is too large. 0 and *got, or -1 with err. */
static int read_all(int fd, const char *path, const char *what, struct secret *s, size_t *got, char *err,
                    size_t errlen)
{
    *got = 0;
    for (;;) {
        size_t room = sizeof(s->buf) - 1 - *got;
        if (room == 0) {
            snprintf(err, errlen, "%s: larger than %d bytes: not a %s file", path, SECRET_MAX, what);
            return -1;
        }
        ssize_t r = read(fd, s->buf + *got, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            return -1;
        }
        if (r == 0)
            return 0;
        *got += (size_t)r;
    }
}

/* The password in the got bytes read: without the newline an editor or
 * `echo` adds, neither empty nor (unless binary: a key's random bytes)
 * holding a NUL. 0 with s->len set and the rest of s->buf cleared, or -1
 * with err. */
static int take_password(struct secret *s, size_t got, const char *path, bool binary, char *err,
                         size_t errlen)
{
    const char *what = binary ? "key" : "password";
    if (got && s->buf[got - 1] == '\n')
        got--;
    if (got && s->buf[got - 1] == '\r')
        got--;
    if (got > SECRET_MAX) {
        snprintf(err, errlen, "%s: larger than %d bytes: not a %s file", path, SECRET_MAX, what);
        return -1;
    }
    if (got == 0) {
        snprintf(err, errlen, "%s: empty: no %s in it", path, what);
        return -1;
    }
    if (!binary && memchr(s->buf, '\0', got)) {
        snprintf(err, errlen, "%s: contains a NUL byte: not a password file", path);
        return -1;
    }
    explicit_bzero(s->buf + got, sizeof(s->buf) - got);
    s->len = got;
    return 0;
}

static int read_file(const char *path, bool binary, struct secret **out, char *err, size_t errlen)
{
    const char *what = binary ? "key" : "password";
    struct secret *s = NULL;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    if (check_file(fd, path, what, err, errlen) != 0)
        goto fail;
    if (!(s = secret_alloc())) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (read_all(fd, path, what, s, &got, err, errlen) != 0)
        goto fail;
    close(fd);
    fd = -1;
    if (take_password(s, got, path, binary, err, errlen) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    secret_free(s);
    return -1;
}

int secret_read(const char *path, struct secret **out, char *err, size_t errlen)
{
    return read_file(path, false, out, err, errlen);
}

int secret_read_key(const char *path, struct secret **out, char *err, size_t errlen)
{
    return read_file(path, true, out, err, errlen);
}

struct secret *secret_dup(struct secret *s)
{
    struct secret *d = secret_alloc();
    if (!d)
        return NULL;
    pthread_mutex_lock(&s->mu);
    memcpy(d->buf, s->buf, s->len + 1);
    d->len = s->len;
    pthread_mutex_unlock(&s->mu);
    return d;
}

void secret_replace(struct secret *dst, const struct secret *src)
{
    pthread_mutex_lock(&dst->mu);
    explicit_bzero(dst->buf, sizeof(dst->buf));
    memcpy(dst->buf, src->buf, src->len + 1);
    dst->len = src->len;
    pthread_mutex_unlock(&dst->mu);
}

const char *secret_str(const struct secret *s)
{
    return s->buf;
}

size_t secret_len(const struct secret *s)
{
    return s->len;
}

char *secret_credential_path(const char *value)
{
    const char *dir = getenv("CREDENTIALS_DIRECTORY");
    char *out = NULL;
    if (!dir || !*dir || !*value || strchr(value, '/'))
        return NULL;
    if (asprintf(&out, "%s/%s", dir, value) < 0)
        return NULL;
    return out;
}
