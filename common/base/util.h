/* util: clocks, strict number parsing, sorting ids, randomness. */
#ifndef SECKILL_UTIL_H
#define SECKILL_UTIL_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Milliseconds on CLOCK_MONOTONIC: for leases, deadlines and backoff, which
 * must not jump when the wall clock is stepped. */
int64_t util_mono_ms(void);
/* Microseconds on CLOCK_MONOTONIC: for request timings, and for ordering a
 * request against a Redis reply (producer/winners.h). */
int64_t util_mono_us(void);
/* Milliseconds since the epoch: only for timestamps that leave the process. */
int64_t util_wall_ms(void);
/* A condition variable whose timed waits run on CLOCK_MONOTONIC, so a wall
 * clock step neither stretches nor cuts them. 0 or -1. */
int util_cond_init_mono(pthread_cond_t *cv);
/* The CLOCK_MONOTONIC time ms from now, as pthread_cond_timedwait wants it
 * for a condition variable from util_cond_init_mono. */
struct timespec util_deadline_ts(int64_t ms);
/* ms as a struct timeval (hiredis's connect and command timeouts). */
struct timeval util_timeval_ms(int64_t ms);
/* Sleep for ms milliseconds, resuming after signals. */
void util_sleep_ms(int64_t ms);

/* Parse all of s as a base-10 integer in [min, max]. Rejects empty strings,
 * signs where min >= 0, leading/trailing junk and overflow. 0 or -1. */
int util_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* v in base 10 into out (at least UTIL_I64_CHARS bytes), NUL-terminated;
 * its length. What snprintf("%" PRId64) writes, at a fraction of the cost:
 * the payments thread formats a dozen numbers per payment. */
#define UTIL_I64_CHARS 21
size_t util_i64_text(char *out, int64_t v);

/* A point in time given by an operator: milliseconds since the epoch
 * ("1763719200000"), or ISO 8601 "2026-11-21T10:00:00[.123][Z|+01:00|+0100]"
 * (also with a space for the T; UTC when no zone is given). Into *out_ms,
 * 0 or -1. */
int util_parse_time_ms(const char *s, int64_t *out_ms);
/* ms since the epoch as "2026-11-21T10:00:00.123Z". */
void util_format_time_ms(int64_t ms, char *buf, size_t len);

static inline int64_t util_max_i64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* A copy of n bytes of b (malloc'd, the caller's to free; n may be 0), or
 * NULL out of memory. */
void *util_memdup(const void *b, size_t n);

/* qsort's and bsearch's comparison of two int64_t. */
int util_cmp_i64(const void *a, const void *b);
/* Sort v[0..n) ascending and drop the repeats: the distinct values come
 * first, in order. How many there are. */
size_t util_sort_unique_i64(int64_t *v, size_t n);

/* Fill buf with len bytes from the kernel's CSPRNG. 0 or -1. */
int util_random_bytes(void *buf, size_t len);
/* The n bytes as 2*n lowercase hex characters plus NUL into out. */
void util_hex(char *out, const unsigned char *bytes, size_t n);
/* 2*nbytes lowercase hex characters of randomness plus NUL into out. */
int util_random_hex(char *out, size_t nbytes);
/* Uniform in [0, n) from a cheap per-thread generator seeded from the CSPRNG:
 * for jitter, never for tokens. */
uint64_t util_rand_below(uint64_t n);

/* Full-jitter exponential backoff: a random delay in [0, min(cap, base*2^attempt)]. */
int64_t util_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms);

/* Read a whole file into a NUL-terminated heap buffer. 0 or -1 (errno set). */
int util_read_file(const char *path, char **out, size_t *len);

#endif
