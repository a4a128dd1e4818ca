/*
 * batches_resident.c - the device-resident batch source (batches.h over
 * resident.h): prepare plans the epoch's batches into slot size classes and
 * packs every slot on the host, in parallel; launch uploads the epoch and
 * queues its steps (one captured CUDA graph per class where the backend can);
 * finish waits and reads back the losses.  The loop prepares the next epoch
 * between launch and finish, so the packing overlaps the device's steps.
 */
#include "run/batches.h"

#include "run/resident.h"

#include <omp.h>
#include <string.h>

typedef struct {
    mp_batch_source      base;
    const mp_batch_data *d;
    mp_resident         *res;
    const double        *lrs;      /* the prepared epoch's (the caller's)         */
    int                  n_threads;
    int32_t             *mols;     /* n_threads x batch_size                      */
    float               *tgt;      /* n_threads x batch_size x n_tasks            */
    float               *extra;    /* n_threads x batch_size x feat_dim           */
    int32_t             *atoms;    /* per batch of the epoch: its atoms and edges */
    int32_t             *edges;    /*   (the plan of its slots)                   */
} resident_source;

/* Packs slot s of the epoch in `order` with the buffers of thread `tid`. */
static mp_status pack_slot(resident_source *r, const size_t *order, int32_t s, int tid)
{
    const mp_batch_data *d = r->d;
    size_t bs = (size_t)d->batch_size;
    int32_t *mols = r->mols + (size_t)tid * bs;
    float *tgt = r->tgt + (size_t)tid * bs * d->n_tasks;
    float *extra = d->feat_dim ? r->extra + (size_t)tid * bs * (size_t)d->feat_dim : NULL;
    int32_t n = mp_batch_data_fill(d, order, s, mols, tgt, extra);
    return mp_resident_pack(r->res, s, d->graphs ? &d->f->g : NULL, mols, n, tgt, extra);
}

/* Each batch's atoms and edges (D-MPNN), for the plan. */
static void batch_sizes(resident_source *r, const size_t *order)
{
    const mp_batch_data *d = r->d;
    const mp_graphs *g = &d->f->g;
    for (int32_t s = 0; s < r->base.n_steps; s++) {
        int32_t b0 = s * d->batch_size;
        int32_t n_ep = mp_batch_data_epoch(d);
        int32_t b1 = n_ep - b0 < d->batch_size ? n_ep : b0 + d->batch_size;
        int64_t na = 0, ne = 0;
        for (int32_t i = b0; i < b1; i++) {
            size_t k = order[i];
            na += g->mol_atom[k + 1] - g->mol_atom[k];
            ne += g->mol_edge[k + 1] - g->mol_edge[k];
        }
        /* a batch past int32 fails the plan (the largest slot is int32) */
        r->atoms[s] = na < INT32_MAX ? (int32_t)na : INT32_MAX;
        r->edges[s] = ne < INT32_MAX ? (int32_t)ne : INT32_MAX;
    }
}

/* Plans the epoch's slots from its batches' sizes (each batch in the
 * smallest slot class that holds it), then packs every slot, in parallel; on
 * a failure the first failing slot is packed again on this thread, for its
 * message. */
static mp_status res_prepare(mp_batch_source *s, const size_t *order, const double *lrs)
{
    resident_source *r = (resident_source *)s;
    int32_t n_steps = s->n_steps;
    if (r->d->graphs)
        batch_sizes(r, order);
    mp_status st = mp_resident_plan(r->res, n_steps, r->d->graphs ? r->atoms : NULL,
                                    r->d->graphs ? r->edges : NULL);
    if (st != MP_OK)
        return st;
    r->lrs = lrs;
    int32_t bad = INT32_MAX;
#pragma omp parallel for num_threads(r->n_threads) schedule(dynamic, 4)
    for (int32_t i = 0; i < n_steps; i++) {
        if (pack_slot(r, order, i, omp_get_thread_num()) != MP_OK) {
#pragma omp critical(mp_pack_epoch)
            if (i < bad)
                bad = i;
        }
    }
    if (bad == INT32_MAX)
        return MP_OK;
    st = pack_slot(r, order, bad, 0);
    return st != MP_OK ? st : mp_error_set(MP_ERR_INTERNAL, "packing batch %d failed", (int)bad);
}

static mp_status res_launch(mp_batch_source *s)
{
    resident_source *r = (resident_source *)s;
    return mp_resident_launch(r->res, s->n_steps, r->lrs);
}

static mp_status res_finish(mp_batch_source *s, double *losses)
{
    resident_source *r = (resident_source *)s;
    mp_status st = mp_resident_finish(r->res, losses);
    for (int32_t i = 0; st == MP_OK && s->progress && i < s->n_steps; i++)
        mp_progress_step(s->progress, losses[i]);
    return st;
}

static void res_profile(const mp_batch_source *s, int epoch, FILE *fp)
{
    const resident_source *r = (const resident_source *)s;
    double up = 0, run = 0, real = 0, padded = 0;
    mp_resident_times(r->res, &up, &run);
    mp_resident_padding(r->res, &real, &padded);
    fprintf(fp, "; resident: upload %.3f s, steps %.3f s", up, run);
    if (real > 0)
        fprintf(fp, ", %d slot classes, padded/real edges %.2f",
                (int)mp_resident_n_classes(r->res), padded / real);
    fputc('\n', fp);
    for (int32_t q = 0; epoch == 1 && q < mp_resident_n_classes(r->res); q++) {
        int32_t fa, fe, cm, ca, ce;
        mp_resident_class_caps(r->res, q, &fa, &fe, &cm, &ca, &ce);
        fprintf(fp, "profile slot class %d: up to %d atoms, %d edges (padded %d molecules, %d "
                "atoms, %d edges)\n", (int)q, (int)fa, (int)fe, (int)cm, (int)ca, (int)ce);
    }
}

static void res_free(mp_batch_source *s)
{
    resident_source *r = (resident_source *)s;
    mp_resident_free(r->res);
    mp_free(r->mols);
    mp_free(r->tgt);
    mp_free(r->extra);
    mp_free(r->atoms);
    mp_free(r->edges);
    mp_free(r);
}

/* The slot classes: n, then n pairs (fit_atoms, fit_edges). */
static mp_status res_state_get(const mp_batch_source *s, uint32_t **out, size_t *n)
{
    const resident_source *r = (const resident_source *)s;
    int32_t nc = mp_resident_n_classes(r->res);
    uint32_t *w = mp_malloc(sizeof(uint32_t) * (1 + 2 * (size_t)nc));
    if (!w)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    w[0] = (uint32_t)nc;
    for (int32_t k = 0; k < nc; k++) {
        int32_t fa, fe, cm, ca, ce;
        mp_resident_class_caps(r->res, k, &fa, &fe, &cm, &ca, &ce);
        w[1 + 2 * k] = (uint32_t)fa;
        w[2 + 2 * k] = (uint32_t)fe;
    }
    *out = w;
    *n = 1 + 2 * (size_t)nc;
    return MP_OK;
}

static mp_status res_state_set(mp_batch_source *s, const uint32_t *w, size_t n)
{
    resident_source *r = (resident_source *)s;
    if (n < 3 || w[0] < 1 || w[0] > MP_RESIDENT_MAX_CLASSES || n != 1 + 2 * (size_t)w[0])
        return mp_error_set(MP_ERR_ARG, "batch source 'resident': %zu state words are not "
                            "its slot classes", n);
    int32_t fa[MP_RESIDENT_MAX_CLASSES], fe[MP_RESIDENT_MAX_CLASSES], nc = (int32_t)w[0];
    for (int32_t k = 0; k < nc; k++) {
        fa[k] = (int32_t)w[1 + 2 * k];
        fe[k] = (int32_t)w[2 + 2 * k];
    }
    return mp_resident_set_classes(r->res, nc, fa, fe);
}

static const mp_batch_source_ops resident_ops = {
    "resident", res_prepare, res_launch, res_finish, res_profile, res_free,
    res_state_get, res_state_set,
};

/* The per-thread packing buffers and the plan's sizes. */
static mp_status res_buffers(resident_source *r)
{
    const mp_batch_data *d = r->d;
    size_t n = (size_t)r->n_threads * (size_t)d->batch_size, dim = (size_t)d->feat_dim;
    r->mols = mp_malloc(sizeof(int32_t) * n);
    r->tgt = mp_malloc(sizeof(float) * n * d->n_tasks);
    r->extra = dim ? mp_malloc(sizeof(float) * n * dim) : NULL;
    r->atoms = mp_malloc(sizeof(int32_t) * (size_t)r->base.n_steps);
    r->edges = mp_malloc(sizeof(int32_t) * (size_t)r->base.n_steps);
    if (!r->mols || !r->tgt || (dim && !r->extra) || !r->atoms || !r->edges)
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    return MP_OK;
}

mp_status mp_batch_source_resident(mp_batch_source **out, mp_model *m, const mp_batch_data *d,
                                   const mp_resident_source_opts *o)
{
    *out = NULL;
    if (o->n_classes < 1 || o->n_classes > MP_RESIDENT_MAX_CLASSES)
        return mp_error_set(MP_ERR_ARG, "resident training: %d slot classes (1 to %d)",
                            (int)o->n_classes, MP_RESIDENT_MAX_CLASSES);
    resident_source *r = mp_calloc(1, sizeof *r);
    if (!r)
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    r->base.ops = &resident_ops;
    r->base.m = m;
    r->base.n_steps = mp_batch_data_steps(d);
    r->d = d;
    int nth = o->threads > 0 ? o->threads : mp_threads_get();
    r->n_threads = nth < 1 ? 1 : nth > r->base.n_steps ? (int)r->base.n_steps : nth;
    mp_resident_opts ro = { .batch_size = d->batch_size, .max_batches = r->base.n_steps,
                            .use_graph = o->use_graph, .n_classes = o->n_classes };
    if (d->graphs)
        mp_graphs_batch_bounds(&d->f->g, d->train, d->n_train, d->batch_size, &ro.cap_atoms,
                               &ro.cap_edges);
    mp_status st = res_buffers(r);
    if (st == MP_OK)
        st = mp_resident_create(&r->res, m, &ro);
    if (st != MP_OK) {
        res_free(&r->base);
        return st;
    }
    *out = &r->base;
    return MP_OK;
}
