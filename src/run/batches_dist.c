/*
 * batches_dist.c - the data-parallel batch source (batches.h): each of the
 * K MPI ranks (core/dist.h) holds a copy of the model and of the data, runs
 * the same epochs (same order, same rates), and computes its slice of every
 * batch; the gradients are summed over the ranks in rank order, so every
 * rank takes the same Adam step and the copies stay equal bit for bit.
 *
 * The batch loss is Chemprop's sum(l * mask) / sum(mask) over the whole
 * batch (model.h).  Rank r's backward gives grad(S_r) / C_r for its slice
 * (S_r its sum of losses, C_r its labels present), so the batch's gradient
 * is sum_r (C_r / C) * rank r's, C = sum_r C_r, and its loss likewise.
 * Every rank counts every slice's labels itself (all hold the targets), so
 * a step costs two collectives: the gradients and the loss.  The gradients
 * stay on the device where the backend sums over ranks itself (cuda built
 * with NCCL: ops.h rank_sum), else they go through the host and MPI.
 *
 * Against one process on the same global batch: the same numbers but for
 * rounding (sums split in K pieces and re-weighted; the BLAS blocking of
 * smaller products), ~1e-7 relative per step (tests/test_dist.c).  Dropout
 * masks are drawn per rank for its slice, so with dropout > 0 a run is
 * deterministic for K but not that of one process.  What is taken over
 * the whole batch does not split into slices: batch norm's statistics, the
 * rmse and mcc losses; those are refused over K > 1 ranks.  Sample weights
 * and task weights multiply the pairs' losses and split as they do; the
 * gradient clip (mp_model_adam_step) sees the summed gradient, as one
 * process's.
 */
#include "run/batches.h"

#include "core/dist.h"
#include "models/model_impl.h"

#include <math.h>
#include <string.h>

typedef struct {
    mp_batch_source      base;
    const mp_batch_data *d;
    const size_t        *order;
    const double        *lrs;
    int                  rank, size;
    int32_t             *mols;     /* the whole batch: batch_size        */
    float               *tgt;      /*   x n_tasks                        */
    float               *extra;    /*   x feat_dim (NULL: none)          */
    float               *sw;       /*   sample weights (NULL: none)      */
    uint8_t             *ineq;     /*   x n_tasks flags (NULL: none)     */
    float               *grads;    /* n_params                           */
    float               *scratch;  /* n_params x size (the gather)       */
    float               *w;        /* size: each rank's share of the labels */
    double              *losses;   /* the launched epoch's, n_steps      */
    mp_graphs            batch;    /* this rank's slice (D-MPNN)         */
} dist_source;

/* The labels present in rows [lo, hi) of tgt. */
static size_t labels_in(const float *tgt, size_t t, int32_t lo, int32_t hi)
{
    size_t c = 0;
    for (size_t i = (size_t)lo * t; i < (size_t)hi * t; i++)
        c += !isnan(tgt[i]);
    return c;
}

static mp_status dist_prepare(mp_batch_source *s, const size_t *order, const double *lrs)
{
    dist_source *h = (dist_source *)s;
    h->order = order;
    h->lrs = lrs;
    return MP_OK;
}

/* One step: this rank's slice forward and backward, the weighted gradients
 * summed over the ranks, Adam on every rank. */
static mp_status dist_step(dist_source *h, int32_t s, double *loss)
{
    const mp_batch_data *d = h->d;
    mp_model *m = h->base.m;
    size_t t = d->n_tasks, np = mp_model_n_params(m);
    int32_t n = mp_batch_data_fill(d, h->order, s, h->mols, h->tgt, h->extra);
    for (int32_t i = 0; h->sw && i < n; i++)
        h->sw[i] = d->weights[h->mols[i]];
    for (int32_t i = 0; h->ineq && i < n; i++)
        memcpy(h->ineq + (size_t)i * t, d->ineq + (size_t)h->mols[i] * t, t);
    int32_t lo = (int32_t)((int64_t)n * h->rank / h->size);
    int32_t hi = (int32_t)((int64_t)n * (h->rank + 1) / h->size);
    size_t all = labels_in(h->tgt, t, 0, n), mine = labels_in(h->tgt, t, lo, hi);
    double part = 0;   /* this rank's S_r = loss_r * C_r */
    mp_status st = MP_OK;
    mp_model_zero_grad(m);
    if (hi > lo) {
        double l = 0;
        if (d->graphs && (st = mp_graphs_select(&h->batch, &d->f->g, h->mols + lo, hi - lo)))
            return st;
        const float *x = h->extra ? h->extra + (size_t)lo * (size_t)d->feat_dim : NULL;
        if ((st = mp_model_forward(m, d->graphs ? &h->batch : NULL, x, hi - lo, 1, NULL)) ||
            (st = mp_model_loss_backward_ex(m, h->tgt + (size_t)lo * t, h->sw ? h->sw + lo : NULL,
                                            h->ineq ? h->ineq + (size_t)lo * t : NULL, &l)))
            return st;
        part = l * (double)mine;
    } else {
        /* an empty slice (a last batch smaller than the ranks): its dropout
         * keys drawn all the same, so every rank's stream stays where rank
         * 0's is (a checkpoint holds rank 0's, restored on every rank) */
        for (int k = mp_model_drop_layers(m); k > 0; k--)
            (void)mp_rng_u64(&m->drop_rng);
    }
    /* every rank's weight C_r / C, counted here from the batch's targets */
    for (int r = 0; r < h->size; r++) {
        int32_t a = (int32_t)((int64_t)n * r / h->size), z = (int32_t)((int64_t)n * (r + 1) / h->size);
        h->w[r] = all ? (float)((double)labels_in(h->tgt, t, a, z) / (double)all) : 0.0f;
    }
    int on_device = 0;
    if ((st = mp_model_rank_sum_grads(m, h->w, &on_device)))   /* NCCL (cuda) */
        return st;
    if (!on_device && ((st = mp_model_get_grads(m, h->grads)) ||
                       (st = mp_dist_sum_float(h->grads, np, h->w, h->scratch)) ||
                       (st = mp_model_set_grads(m, h->grads))))
        return st;
    if ((st = mp_dist_sum_double(&part, 1)) || (st = mp_model_adam_step(m, h->lrs[s])))
        return st;
    *loss = all ? part / (double)all : 0.0;
    return MP_OK;
}

static mp_status dist_launch(mp_batch_source *s)
{
    dist_source *h = (dist_source *)s;
    for (int32_t i = 0; i < s->n_steps; i++) {
        mp_status st = dist_step(h, i, &h->losses[i]);
        mp_status stop = st ? MP_OK : mp_interrupt_poll();
        /* a rank that fails (or is asked to stop) takes the others with it:
         * they would wait for its gradients forever */
        if (!mp_dist_all_ok(st == MP_OK && stop == MP_OK))
            return st ? st : stop ? stop : mp_error_set(MP_ERR_IO, "rank %d of %d: another "
                                                        "rank failed (its message says why)",
                                                        h->rank, h->size);
        if (s->progress)
            mp_progress_step(s->progress, h->losses[i]);
    }
    return MP_OK;
}

static mp_status dist_finish(mp_batch_source *s, double *losses)
{
    dist_source *h = (dist_source *)s;
    memcpy(losses, h->losses, sizeof(double) * (size_t)s->n_steps);
    return MP_OK;
}

static void dist_profile(const mp_batch_source *s, int epoch, FILE *fp)
{
    const dist_source *h = (const dist_source *)s;
    fprintf(fp, "; data-parallel host loop, rank %d of %d\n", h->rank, h->size);
}

static void dist_free(mp_batch_source *s)
{
    dist_source *h = (dist_source *)s;
    mp_graphs_free(&h->batch);
    mp_free(h->mols);
    mp_free(h->tgt);
    mp_free(h->extra);
    mp_free(h->sw);
    mp_free(h->ineq);
    mp_free(h->grads);
    mp_free(h->scratch);
    mp_free(h->w);
    mp_free(h->losses);
    mp_free(h);
}

static const mp_batch_source_ops dist_ops = {
    "dist", dist_prepare, dist_launch, dist_finish, dist_profile, dist_free, NULL, NULL,
};

mp_status mp_batch_source_dist(mp_batch_source **out, mp_model *m, const mp_batch_data *d)
{
    *out = NULL;
    /* what does not split into per-slice sums over the labelled pairs */
    const mp_model_config *cfg = mp_model_get_config(m);
    mp_loss_kind loss = mp_model_loss(cfg);
    if (mp_dist_size() > 1 && (cfg->batch_norm || loss == MP_LOSS_RMSE ||
                               loss == MP_LOSS_BOUNDED_RMSE || loss == MP_LOSS_BINARY_MCC ||
                               loss == MP_LOSS_MULTICLASS_MCC))
        return mp_error_set(MP_ERR_ARG, "training over %d MPI ranks splits every batch: %s "
                            "is taken over the whole batch and does not split (train it in "
                            "one process)", mp_dist_size(),
                            cfg->batch_norm ? "batch norm" : "this loss (rmse / mcc)");
    dist_source *h = mp_calloc(1, sizeof *h);
    if (!h)
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    h->base.ops = &dist_ops;
    h->base.m = m;
    h->base.n_steps = mp_batch_data_steps(d);
    h->d = d;
    h->rank = mp_dist_rank();
    h->size = mp_dist_size();
    size_t bs = (size_t)d->batch_size, np = mp_model_n_params(m);
    h->mols = mp_malloc(sizeof(int32_t) * bs);
    h->tgt = mp_malloc(sizeof(float) * bs * d->n_tasks);
    h->extra = d->feat_dim ? mp_malloc(sizeof(float) * bs * (size_t)d->feat_dim) : NULL;
    h->grads = mp_malloc(sizeof(float) * (np ? np : 1));
    h->scratch = mp_malloc(sizeof(float) * (np ? np : 1) * (size_t)h->size);
    h->w = mp_malloc(sizeof(float) * (size_t)h->size);
    h->sw = d->weights ? mp_malloc(sizeof(float) * bs) : NULL;
    h->ineq = d->ineq ? mp_malloc(bs * d->n_tasks + 1) : NULL;
    h->losses = mp_malloc(sizeof(double) * ((size_t)h->base.n_steps + 1));
    if (!h->mols || !h->tgt || (d->feat_dim && !h->extra) || !h->grads || !h->scratch ||
        !h->w || !h->losses || (d->weights && !h->sw) || (d->ineq && !h->ineq)) {
        dist_free(&h->base);
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    }
    *out = &h->base;
    return MP_OK;
}
