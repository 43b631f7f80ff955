/*
 * tests/nemesis/cndskew.c: C11's cnd_timedwait for a process whose wall clock
 * libfaketime skews (the nemesis' clock faults, issue #32). Preloaded before
 * libfaketime: LD_PRELOAD=cndskew.so:libfaketimeMT.so.1.
 *
 * Why: librdkafka waits with cnd_timedwait, on a deadline it computes from
 * the wall clock (timespec_get), which libfaketime skews; glibc's
 * cnd_timedwait hands it to the kernel, which knows only the true clock.
 * libfaketime (0.9.10) mends pthread_cond_timedwait that way, not C11's
 * cnd_timedwait: with the clock 139 s behind, every librdkafka wait ended at
 * once and its threads "did not initialize within 60 seconds"; ahead, every
 * wait would last the skew longer. A host whose clock is really wrong has no
 * such trouble (the kernel and the program agree), so this restores that: the
 * deadline is moved by the skew, the true clock read by a system call, which
 * libfaketime does not see.
 */
#include <dlfcn.h>
#include <sys/syscall.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

int cnd_timedwait(cnd_t *restrict cond, mtx_t *restrict mtx, const struct timespec *restrict deadline);

typedef int (*cnd_timedwait_fn)(cnd_t *restrict, mtx_t *restrict, const struct timespec *restrict);

int cnd_timedwait(cnd_t *restrict cond, mtx_t *restrict mtx, const struct timespec *restrict deadline)
{
    static cnd_timedwait_fn real;
    struct timespec skewed, truth, moved;
    long long ns;

    if (real == NULL) {
        /* (a benign race: every thread stores the same address) */
        real = (cnd_timedwait_fn)dlsym(RTLD_NEXT, "cnd_timedwait");
        if (real == NULL)
            return thrd_error;
    }
    /* the program's clock (libfaketime's answer) and the kernel's */
    if (clock_gettime(CLOCK_REALTIME, &skewed) != 0 || syscall(SYS_clock_gettime, CLOCK_REALTIME, &truth) != 0)
        return real(cond, mtx, deadline);
    ns = (long long)(deadline->tv_sec - skewed.tv_sec + truth.tv_sec) * 1000000000LL + deadline->tv_nsec -
         skewed.tv_nsec + truth.tv_nsec;
    if (ns < 0)
        ns = 0;
    moved.tv_sec = (time_t)(ns / 1000000000LL);
    moved.tv_nsec = (long)(ns % 1000000000LL);
    return real(cond, mtx, &moved);
}
