/*
 * alloc.c - the one allocation hook.  Counts live blocks (for leak tests) and
 * can be told to fail the Nth allocation (for out-of-memory tests).
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

static long live_blocks;          /* updated atomically: OpenMP threads allocate */
static long fail_countdown = -1;  /* < 0: never fail */

static int should_fail(void)
{
    long c = __atomic_load_n(&fail_countdown, __ATOMIC_RELAXED);
    if (c < 0)
        return 0;
    /* Exactly one allocation fails; the counter then reads -1 (disarmed). */
    return __atomic_sub_fetch(&fail_countdown, 1, __ATOMIC_RELAXED) == -1;
}

void *mp_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    void *p = malloc(n ? n : 1);
    if (p)
        __atomic_add_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
    return p;
}

void *mp_calloc(size_t count, size_t size)
{
    if (should_fail())
        return NULL;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (p)
        __atomic_add_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
    return p;
}

void *mp_realloc(void *p, size_t n)
{
    if (!p)
        return mp_malloc(n);
    if (should_fail())
        return NULL;
    return realloc(p, n ? n : 1);
}

void mp_free(void *p)
{
    if (!p)
        return;
    __atomic_sub_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
    free(p);
}

char *mp_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = mp_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

long mp_alloc_live(void) { return __atomic_load_n(&live_blocks, __ATOMIC_RELAXED); }

void mp_alloc_fail_after(long n)
{
    __atomic_store_n(&fail_countdown, n < 0 ? -1 : n, __ATOMIC_RELAXED);
}
