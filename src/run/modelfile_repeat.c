/*
 * modelfile_repeat.c - the check that no two tensors of a model file share
 * a block and a name (run/modelfile.h), sorted, so a hostile file of a
 * million tensors is checked in a second rather than days.
 */
#define _GNU_SOURCE   /* qsort_r */
#include "run/modelfile.h"

#include <stdlib.h>
#include <string.h>

static int cmp_tensor(const void *a, const void *b, void *ctx)
{
    const mp_tensor *t = ctx;
    const mp_tensor *x = &t[*(const size_t *)a], *y = &t[*(const size_t *)b];
    if (x->block != y->block)
        return x->block < y->block ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* 1 when two of t[0..n) have the same block and name (the first such pair
 * in sorted order into *dup), 0 when none, -1 out of memory.  Sorted, so a
 * file of a million tensors is checked in a second, not in days. */
int mp_tensors_find_repeat(const mp_tensor *t, size_t n, size_t *dup)
{
    if (n < 2)
        return 0;
    size_t *ix = mp_malloc(sizeof(size_t) * n);
    if (!ix)
        return -1;
    for (size_t i = 0; i < n; i++)
        ix[i] = i;
    qsort_r(ix, n, sizeof *ix, cmp_tensor, (void *)t);
    int found = 0;
    for (size_t i = 1; i < n && !found; i++)
        if (cmp_tensor(&ix[i - 1], &ix[i], (void *)t) == 0) {
            *dup = ix[i];
            found = 1;
        }
    mp_free(ix);
    return found;
}
