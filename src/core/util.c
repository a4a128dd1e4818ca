/*
 * util.c - clock, thread count, mp_exit, CRC-32, strings and the growable buffer
 * (atomic file output is io.c).
 */
#include "core.h"
#include "dist.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

double mp_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ===================================================================== */
/* Threads                                                                */
/* ===================================================================== */

static int n_threads_set;
/* A thread's own count (mp_threads_set_local, mp_threads_follow): the
 * concurrent ensemble members each run on a share of --threads
 * (run/members.c); NULL: none. */
static _Thread_local int n_threads_own;
static _Thread_local const int *n_threads_local;

void mp_threads_set(int n)
{
    n_threads_set = n > 0 ? n : 0;
#ifdef _OPENMP
    if (n > 0)
        omp_set_num_threads(n);
#endif
}

void mp_threads_set_local(int n)
{
    n_threads_own = n > 0 ? n : 0;
    n_threads_local = n > 0 ? &n_threads_own : NULL;
}

void mp_threads_follow(const int *n) { n_threads_local = n; }

int mp_threads_get(void)
{
    int local = n_threads_local ? __atomic_load_n(n_threads_local, __ATOMIC_RELAXED) : 0;
    if (local > 0)
        return local;
    if (n_threads_set > 0)
        return n_threads_set;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ===================================================================== */
/* Exit                                                                   */
/* ===================================================================== */

static int skip_teardown;

void mp_exit_skip_teardown(void) { skip_teardown = 1; }

void mp_exit(int status)
{
    if (!skip_teardown)
        exit(status);
    mp_dist_finalize();   /* the one exit handler of ours that must run */
    fflush(NULL);
    _exit(status);
}

/* ===================================================================== */
/* Checksums and strings                                                  */
/* ===================================================================== */

uint32_t mp_crc32(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {   /* zlib takes uInt lengths */
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

int mp_strcaseeq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

/* ===================================================================== */
/* Growable buffer                                                        */
/* ===================================================================== */

mp_status mp_buf_reserve(mp_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return MP_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = mp_realloc(b->data, cap);
    if (!d)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (buffer of %zu bytes)", cap);
    b->data = d;
    b->cap = cap;
    return MP_OK;
}

mp_status mp_buf_append(mp_buf *b, const void *p, size_t n)
{
    mp_status st = mp_buf_reserve(b, n);
    if (st)
        return st;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return MP_OK;
}

mp_status mp_buf_printf(mp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return mp_error_set(MP_ERR_INTERNAL, "bad format string");
    mp_status st = mp_buf_reserve(b, (size_t)n);
    if (st)
        return st;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return MP_OK;
}

void mp_buf_free(mp_buf *b)
{
    mp_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ===================================================================== */
/* Summation                                                              */
/* ===================================================================== */

/*
 * np.add.reduce over a contiguous float64 array: blocks of up to 128 summed
 * with eight accumulators, larger ranges split in two at a multiple of 8.
 * Matching it makes our sums (and so our metrics) identical to sklearn's,
 * not merely close.
 */
double mp_pairwise_sum(const double *a, size_t n)
{
    if (n < 8) {
        double res = -0.0;
        for (size_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        size_t i;
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return mp_pairwise_sum(a, n2) + mp_pairwise_sum(a + n2, n - n2);
}
