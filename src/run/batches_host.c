/*
 * batches_host.c - the batch source seam (batches.h): the training batches'
 * contents, the checked protocol every source goes through, and the host
 * source, which issues every step from the host on any backend.
 */
#include "run/batches.h"

#include "run/ensemble.h"

#include <string.h>

/* ===================================================================== */
/* Batches                                                                */
/* ===================================================================== */

int32_t mp_batch_data_epoch(const mp_batch_data *d)
{
    return d->n_epoch > 0 ? d->n_epoch : d->n_train;
}

int32_t mp_batch_data_steps(const mp_batch_data *d)
{
    return (int32_t)((mp_batch_data_epoch(d) + (int64_t)d->batch_size - 1) / d->batch_size);
}

int32_t mp_batch_data_fill(const mp_batch_data *d, const size_t *order, int32_t s,
                           int32_t *mols, float *tgt, float *extra)
{
    int32_t bs = d->batch_size, b0 = s * bs, ne = mp_batch_data_epoch(d);
    int32_t n = ne - b0 < bs ? ne - b0 : bs;
    size_t t = d->n_tasks;
    for (int32_t i = 0; i < n; i++) {
        mols[i] = (int32_t)order[b0 + i];
        if (!d->labels)
            memcpy(tgt + (size_t)i * t, d->targets + (size_t)mols[i] * t, t * sizeof(float));
    }
    if (d->labels)
        mp_labels_fill_rows_f32(d->labels, mols, (size_t)n, tgt);
    if (d->feat_dim > 0) {
        mp_feature_set_fill_scaled(d->features, d->f, mols, n, d->feature_scaler, extra);
    }
    return n;
}

/* ===================================================================== */
/* The protocol                                                           */
/* ===================================================================== */

static mp_status out_of_turn(const mp_batch_source *s, const char *call)
{
    return mp_error_set(MP_ERR_ARG, "batch source '%s': %s with %s and %s", s->ops->name, call,
                        s->prepared ? "an epoch prepared" : "no epoch prepared",
                        s->launched ? "one launched" : "none launched");
}

mp_status mp_batch_source_prepare(mp_batch_source *s, const size_t *order, const double *lrs)
{
    if (s->prepared)
        return out_of_turn(s, "prepare");
    mp_status st = s->ops->prepare(s, order, lrs);
    s->prepared = st == MP_OK;
    return st;
}

mp_status mp_batch_source_launch(mp_batch_source *s)
{
    if (!s->prepared || s->launched)
        return out_of_turn(s, "launch");
    s->prepared = 0;
    mp_status st = s->ops->launch(s);
    s->launched = st == MP_OK;
    return st;
}

mp_status mp_batch_source_finish(mp_batch_source *s, double *losses)
{
    if (!s->launched)
        return out_of_turn(s, "finish");
    s->launched = 0;
    return s->ops->finish(s, losses);
}

mp_status mp_batch_source_state_get(const mp_batch_source *s, uint32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    return s->ops->state_get ? s->ops->state_get(s, out, n) : MP_OK;
}

mp_status mp_batch_source_state_set(mp_batch_source *s, const uint32_t *w, size_t n)
{
    if (s->ops->state_set)
        return s->ops->state_set(s, w, n);
    return n == 0 ? MP_OK
                  : mp_error_set(MP_ERR_ARG, "batch source '%s' keeps no state, given %zu words",
                                 s->ops->name, n);
}

void mp_batch_source_free(mp_batch_source *s)
{
    if (s)
        s->ops->free(s);
}

/* ===================================================================== */
/* The host source                                                        */
/* ===================================================================== */

typedef struct {
    mp_batch_source      base;
    const mp_batch_data *d;
    const size_t        *order;    /* the prepared epoch (the caller's)   */
    const double        *lrs;
    int32_t             *mols;     /* one batch: batch_size              */
    float               *tgt;      /*   x n_tasks                        */
    float               *extra;    /*   x feat_dim (NULL: none)          */
    float               *w;        /*   sample weights (NULL: none)      */
    uint8_t             *ineq;     /*   x n_tasks flags (NULL: none)     */
    double              *losses;   /* the launched epoch's, n_steps      */
    mp_graphs            batch;    /* the selected graphs (D-MPNN)       */
} host_source;

static mp_status host_prepare(mp_batch_source *s, const size_t *order, const double *lrs)
{
    host_source *h = (host_source *)s;
    h->order = order;
    h->lrs = lrs;
    return MP_OK;
}

/* One step: the batch's graphs selected, forward, loss and backward, Adam. */
static mp_status host_step(host_source *h, int32_t s, double *loss)
{
    const mp_batch_data *d = h->d;
    mp_model *m = h->base.m;
    int32_t n = mp_batch_data_fill(d, h->order, s, h->mols, h->tgt, h->extra);
    mp_status st;
    if (d->graphs && (st = mp_graphs_select(&h->batch, &d->f->g, h->mols, n)))
        return st;
    size_t t = d->n_tasks;
    for (int32_t i = 0; h->w && i < n; i++)
        h->w[i] = d->weights[h->mols[i]];
    for (int32_t i = 0; h->ineq && i < n; i++)
        memcpy(h->ineq + (size_t)i * t, d->ineq + (size_t)h->mols[i] * t, t);
    mp_model_zero_grad(m);
    if ((st = mp_model_forward(m, d->graphs ? &h->batch : NULL, h->extra, n, 1, NULL)) ||
        (st = mp_model_loss_backward_ex(m, h->tgt, h->w, h->ineq, loss)) ||
        (st = mp_model_adam_step(m, h->lrs[s])))
        return st;
    return MP_OK;
}

/* The whole epoch runs here: the next one may be prepared on return. */
static mp_status host_launch(mp_batch_source *s)
{
    host_source *h = (host_source *)s;
    for (int32_t i = 0; i < s->n_steps; i++) {
        mp_status st = host_step(h, i, &h->losses[i]);
        if (st)
            return st;
        if (s->progress)
            mp_progress_step(s->progress, h->losses[i]);
        if ((st = mp_interrupt_poll()))   /* a stop request, between two steps */
            return st;
    }
    return MP_OK;
}

static mp_status host_finish(mp_batch_source *s, double *losses)
{
    host_source *h = (host_source *)s;
    memcpy(losses, h->losses, sizeof(double) * (size_t)s->n_steps);
    return MP_OK;
}

static void host_profile(const mp_batch_source *s, int epoch, FILE *fp)
{
    fprintf(fp, "; host loop (the steps are the train loop)\n");
}

static void host_free(mp_batch_source *s)
{
    host_source *h = (host_source *)s;
    mp_graphs_free(&h->batch);
    mp_free(h->mols);
    mp_free(h->tgt);
    mp_free(h->extra);
    mp_free(h->w);
    mp_free(h->ineq);
    mp_free(h->losses);
    mp_free(h);
}

static const mp_batch_source_ops host_ops = {
    "host", host_prepare, host_launch, host_finish, host_profile, host_free, NULL, NULL,
};

mp_status mp_batch_source_host(mp_batch_source **out, mp_model *m, const mp_batch_data *d)
{
    *out = NULL;
    host_source *h = mp_calloc(1, sizeof *h);
    if (!h)
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    h->base.ops = &host_ops;
    h->base.m = m;
    h->base.n_steps = mp_batch_data_steps(d);
    h->d = d;
    size_t bs = (size_t)d->batch_size;
    h->mols = mp_malloc(sizeof(int32_t) * bs);
    h->tgt = mp_malloc(sizeof(float) * bs * d->n_tasks);
    h->extra = d->feat_dim ? mp_malloc(sizeof(float) * bs * (size_t)d->feat_dim) : NULL;
    h->losses = mp_malloc(sizeof(double) * ((size_t)h->base.n_steps + 1));
    h->w = d->weights ? mp_malloc(sizeof(float) * bs) : NULL;
    h->ineq = d->ineq ? mp_malloc(bs * d->n_tasks + 1) : NULL;
    if (!h->mols || !h->tgt || (d->feat_dim && !h->extra) || !h->losses ||
        (d->weights && !h->w) || (d->ineq && !h->ineq)) {
        host_free(&h->base);
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    }
    *out = &h->base;
    return MP_OK;
}
