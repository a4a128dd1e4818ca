/*
 * dev_batch.h - a graph batch on a backend's device as the model's bound
 * steps read it (models/model.h mp_dev_batch: the graph arrays, targets and
 * mask), for the tests and benchmarks that drive mp_model_step_bound
 * directly (tests/test_gpu_ops.c, bench/gpu_ops.c).  Header-only (static
 * functions): its users are separate programs.
 */
#ifndef MP_TEST_DEV_BATCH_H
#define MP_TEST_DEV_BATCH_H

#include "backend/ops.h"
#include "models/model.h"

#include <math.h>
#include <string.h>

typedef struct {
    mp_backend  *b;
    mp_dev_batch bt;
    void        *buf[10];
} dev_batch;

static void dev_batch_free(dev_batch *d)
{
    for (int i = 0; d->b && i < 10; i++)
        d->b->free(d->b, d->buf[i]);
    memset(d, 0, sizeof *d);
}

/* g's arrays on b; targets [n_mols x n_tasks] host floats (NaN: missing)
 * become the target array (the element type, 0 where missing) and the mask.
 * Fails with the message set (nothing left to free). */
static mp_status dev_batch_make(dev_batch *d, mp_backend *b, const mp_graphs *g,
                                const float *targets, int n_tasks)
{
    memset(d, 0, sizeof *d);
    d->b = b;
    const size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges, M = (size_t)g->n_mols;
    const size_t T = M * (size_t)n_tasks;
    unsigned char *tg = mp_malloc((T + 1) * b->esize);
    uint8_t *mask = mp_malloc(T + 1);
    mp_status st = tg && mask ? MP_OK : mp_error_set(MP_ERR_NOMEM, "dev batch: out of memory");
    for (size_t i = 0; st == MP_OK && i < T; i++) {
        mask[i] = !isnan(targets[i]);
        double v = mask[i] ? targets[i] : 0.0;
        if (b->esize == sizeof(double))
            ((double *)tg)[i] = v;
        else
            ((float *)tg)[i] = (float)v;
    }
    const void *src[10] = { g->atom_hot, g->atom_mass, g->bond_hot, g->edge_src, g->edge_dst,
                            g->in_start, g->in_edge, g->mol_atom, mask, tg };
    const size_t bytes[10] = { A * MP_ATOM_MAX_HOT * 2, A * 4, E / 2 * MP_BOND_MAX_HOT, E * 4,
                               E * 4, (A + 1) * 4, E * 4, (M + 1) * 4, T, T * b->esize };
    for (int i = 0; i < 10 && st == MP_OK; i++) {
        if (!(d->buf[i] = b->alloc(b, bytes[i] ? bytes[i] : 1)))
            st = mp_error_set(MP_ERR_NOMEM, "dev batch: %s", mp_error_message());
        else if (bytes[i])
            st = b->upload(b, d->buf[i], src[i], bytes[i]);
    }
    mp_free(tg);
    mp_free(mask);
    if (st != MP_OK) {
        dev_batch_free(d);
        return st;
    }
    void **p = d->buf;
    d->bt = (mp_dev_batch){ g->n_mols, g->n_atoms, g->n_edges, p[0], p[1], p[2], p[3], p[4], p[5],
                            p[6], p[7], NULL, p[9], p[8], NULL, NULL };
    return MP_OK;
}

#endif /* MP_TEST_DEV_BATCH_H */
