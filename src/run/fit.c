/*
 * fit.c - one ensemble member's training (fit.h): the epoch loop over a
 * batch source, Chemprop v1's loop (REFERENCE.md 2.4-2.7): shuffled batches,
 * Adam on the Noam schedule, the best validation epoch kept.
 */
#include "run/fit.h"

#include "core/dist.h"
#include "models/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MP_STREAM_SHUFFLE 201    /* mp_rng stream for the epoch order */

/* ===================================================================== */
/* Scoring                                                                */
/* ===================================================================== */

mp_status mp_fit_score(const mp_dataset *d, const int32_t *mols, int32_t n, const double *pred,
                       mp_metric metric, int classification, double *per_task,
                       mp_score_status *why, double *mean, size_t *n_skipped)
{
    return mp_fit_score_labels(d, NULL, mols, n, pred, metric, classification, per_task, why,
                               mean, n_skipped);
}

mp_status mp_fit_score_labels(const mp_dataset *d, const mp_labels *labels, const int32_t *mols,
                              int32_t n, const double *pred, mp_metric metric,
                              int classification, double *per_task, mp_score_status *why,
                              double *mean, size_t *n_skipped)
{
    size_t t = d->n_tasks;
    double *target = mp_malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * t);
    if (!target)
        return mp_error_set(MP_ERR_NOMEM, "out of memory scoring %d molecules", n);
    if (labels)
        mp_labels_fill_rows(labels, mols, (size_t)(n > 0 ? n : 0), target);
    for (int32_t i = 0; i < n && !labels; i++)
        memcpy(target + (size_t)i * t, d->targets + (size_t)mols[i] * t, t * sizeof(double));
    mp_status st = mp_metric_tasks(metric, classification, pred, target, (size_t)n, t,
                                   per_task, why, mean, n_skipped);
    mp_free(target);
    return st;
}

mp_status mp_fit_score_multiclass(const mp_dataset *d, const int32_t *mols, int32_t n,
                                  const double *prob, int n_classes, double *per_task,
                                  double *mean)
{
    size_t T = d->n_tasks, C = (size_t)n_classes;
    double sum = 0;
    int scored = 0;
    for (size_t t = 0; t < T; t++) {
        size_t right = 0, seen = 0;
        for (int32_t i = 0; i < n; i++) {
            double y = d->targets[(size_t)mols[i] * T + t];
            const double *p = prob + ((size_t)i * T + t) * C;
            if (isnan(y) || isnan(p[0]))
                continue;
            size_t best = 0;
            for (size_t c = 1; c < C; c++)
                best = p[c] > p[best] ? c : best;
            right += (double)best == y;
            seen++;
        }
        per_task[t] = seen ? (double)right / (double)seen : NAN;
        if (seen) {
            sum += per_task[t];
            scored++;
        }
    }
    *mean = scored ? sum / scored : NAN;
    return MP_OK;
}

static int better(mp_metric m, double now, double best)
{
    if (isnan(now))
        return 0;
    if (isnan(best))
        return 1;
    return mp_metric_higher_is_better(m) ? now > best : now < best;
}

/* ===================================================================== */
/* Setting up                                                             */
/* ===================================================================== */

int32_t mp_fit_eval_batch(const mp_model_config *c, const mp_graphs *g, int32_t batch,
                          int32_t eval, int share)
{
    if (c->kind == MP_MODEL_FFN || !g || g->n_mols <= 0)
        return eval;
    double per_mol = 4.0 * c->hidden * ((2.0 * c->depth + 3) * g->n_edges + 5.0 * g->n_atoms) /
                     g->n_mols;
    double budget = 8.0 * 1073741824.0 / (share > 1 ? share : 1);
    while (eval / 2 >= batch && eval * per_mol > budget)
        eval /= 2;
    return eval;
}

mp_status mp_fit_reserve(const mp_fit_ctx *c, int k)
{
    const mp_batch_data *b = &c->batches;
    mp_model *m = c->e->members[k];
    int32_t bs = b->batch_size, mm = bs > c->eval_batch ? bs : c->eval_batch;
    if (!b->graphs)
        return mp_model_reserve(m, mm, 0, 0);
    int32_t ma, me, va = 0, ve = 0;
    mp_graphs_batch_bounds(&b->f->g, b->train, b->n_train, bs, &ma, &me);
    if (c->n_val > 0)
        mp_graphs_batch_bounds(&b->f->g, c->val, c->n_val, c->eval_batch, &va, &ve);
    return mp_model_reserve(m, mm, ma > va ? ma : va, me > ve ? me : ve);
}

mp_status mp_fit_open_source(const mp_fit_ctx *c, int k, mp_batch_source **out)
{
    const mp_train_opts *o = c->o;
    mp_backend *dev = c->e->backend;
    mp_model *m = c->e->members[k];
    int resident = o->resident < 0 ? !dev->host_memory : o->resident;
    /* MPI ranks: each a slice of every batch, with host batches on any
     * backend (the gradients summed on the GPUs with NCCL where built) */
    if (mp_dist_size() > 1) {
        if (o->resident > 0)
            return mp_error_set(MP_ERR_ARG, "training over %d MPI ranks runs host batches: "
                                "the device-resident source does not run over ranks yet "
                                "(leave --resident at auto)", mp_dist_size());
        return mp_batch_source_dist(out, m, &c->batches);
    }
    /* the resident slots carry no sample weights or inequality flags, and
     * their padding molecules would enter batch norm's batch statistics:
     * the host source steps those runs (on any backend) */
    if (c->batches.weights || c->batches.ineq || c->e->cfg.batch_norm) {
        if (o->resident == 1)
            return mp_error_set(MP_ERR_ARG, "--resident on: sample weights, inequality labels "
                                "and batch norm train with the host loop (--resident off or "
                                "auto)");
        resident = 0;
    }
    if (!resident)
        return mp_batch_source_host(out, m, &c->batches);
    /* replayed from a capture where the backend can record one (dropout
     * keys are read from device memory, so a replay drops as the host
     * loop would) */
    mp_resident_source_opts ro = {
        .use_graph = o->graph != 0 && dev->capture_begin != NULL,
        .n_classes = o->slot_classes,
    };
    return mp_batch_source_resident(out, m, &c->batches, &ro);
}

/* ===================================================================== */
/* The loop                                                               */
/* ===================================================================== */

/* One member's training state. */
typedef struct {
    const mp_fit_ctx *c;
    int              k;
    mp_model        *m;
    mp_batch_source *src;
    mp_rng           rng;        /* the epoch order's stream          */
    mp_noam          noam;
    size_t          *order;      /* n_train                           */
    size_t          *pos, *neg;  /* class balance: the two lists      */
    double          *lrs;        /* per step of the coming epoch      */
    double          *losses;     /* per step of the finished epoch    */
    float           *best;       /* the best epoch's parameters       */
    double          *valpred;    /* n_val x n_tasks                   */
    double          *per_task;
    mp_score_status *why;
    double           best_score;
    int              best_epoch;
} member;

void mp_fit_state_free(mp_fit_state *s)
{
    mp_free(s->order);
    mp_free(s->lrs);
    mp_free(s->best);
    mp_free(s->source);
    mp_free(s->balance);
    mp_model_state_free(&s->model);
    memset(s, 0, sizeof *s);
}

static void member_free(member *mb)
{
    mp_free(mb->order);
    mp_free(mb->pos);
    mp_free(mb->neg);
    mp_free(mb->lrs);
    mp_free(mb->losses);
    mp_free(mb->best);
    mp_free(mb->valpred);
    mp_free(mb->per_task);
    mp_free(mb->why);
}

static mp_status member_alloc(member *mb, const mp_fit_ctx *c, int k)
{
    const mp_batch_data *b = &c->batches;
    size_t t = b->n_tasks, n_steps = (size_t)mp_batch_data_steps(b);
    memset(mb, 0, sizeof *mb);
    mb->c = c;
    mb->k = k;
    mb->m = c->e->members[k];
    mb->order = mp_malloc(sizeof(size_t) * (size_t)b->n_train);
    mb->lrs = mp_malloc(sizeof(double) * n_steps);
    mb->losses = mp_malloc(sizeof(double) * n_steps);
    mb->best = mp_malloc(sizeof(float) * mp_model_n_params(mb->m));
    mb->valpred = mp_malloc(sizeof(double) * (size_t)(c->n_val > 0 ? c->n_val : 1) * t *
                            (size_t)(c->multiclass > 0 ? c->multiclass : 1));
    mb->per_task = mp_malloc(sizeof(double) * t);
    mb->why = mp_malloc(sizeof(mp_score_status) * t);
    if (c->pos) {
        mb->pos = mp_malloc(sizeof(size_t) * (size_t)(c->n_pos + 1));
        mb->neg = mp_malloc(sizeof(size_t) * (size_t)(c->n_neg + 1));
    }
    if (!mb->order || !mb->lrs || !mb->losses || !mb->best || !mb->valpred || !mb->per_task ||
        !mb->why || (c->pos && (!mb->pos || !mb->neg)))
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
    return MP_OK;
}

/* The member's streams and schedule at their start, the initial weights as
 * the best so far, and the first epoch prepared. */
static mp_status next_epoch(member *mb);

static mp_status member_start(member *mb)
{
    const mp_train_opts *o = mb->c->o;
    const mp_batch_data *b = &mb->c->batches;
    mp_rng_seed(&mb->rng, o->seed + (uint64_t)mb->k, MP_STREAM_SHUFFLE);
    mp_status st = mp_noam_init(&mb->noam, o->warmup_epochs, o->epochs,
                                (size_t)mp_batch_data_epoch(b), (size_t)b->batch_size,
                                o->init_lr, o->max_lr, o->final_lr);
    if (st)
        return st;
    for (int32_t i = 0; i < b->n_train; i++)
        mb->order[i] = (size_t)b->train[i];
    for (int32_t i = 0; mb->pos && i < mb->c->n_pos; i++)
        mb->pos[i] = (size_t)mb->c->pos[i];
    for (int32_t i = 0; mb->pos && i < mb->c->n_neg; i++)
        mb->neg[i] = (size_t)mb->c->neg[i];
    /* As Chemprop saves the model before the first epoch: if no epoch ever
     * scores (a NaN validation metric), the initial weights are kept. */
    mb->best_score = NAN;
    mb->best_epoch = 0;
    if ((st = mp_model_get_params(mb->m, mb->best)))
        return st;
    mb->src->progress = mb->c->progress;
    return next_epoch(mb);
}

/* The member's state after `epoch` as a checkpoint sees it: views of the
 * loop's own arrays, the model's and the source's state copied. */
static mp_status member_checkpoint(member *mb, int epoch)
{
    const mp_fit_ctx *c = mb->c;
    mp_fit_state s;
    memset(&s, 0, sizeof s);
    s.k = mb->k;
    s.epoch = epoch;
    s.rng = mb->rng;
    s.noam = mb->noam;
    s.prepared = epoch < c->o->epochs;
    s.n_train = c->batches.n_train;
    s.n_steps = mb->src->n_steps;
    s.order = mb->order;
    s.lrs = mb->lrs;
    s.n_params = mp_model_n_params(mb->m);
    s.best = mb->best;
    s.best_score = mb->best_score;
    s.best_epoch = mb->best_epoch;
    size_t *balance = NULL;
    if (mb->pos) {
        /* the two lists side by side, as the file keeps them */
        s.n_balance = c->n_pos + c->n_neg;
        if (!(balance = mp_malloc(sizeof(size_t) * (size_t)s.n_balance)))
            return mp_error_set(MP_ERR_NOMEM, "out of memory writing a checkpoint");
        memcpy(balance, mb->pos, sizeof(size_t) * (size_t)c->n_pos);
        memcpy(balance + c->n_pos, mb->neg, sizeof(size_t) * (size_t)c->n_neg);
        s.balance = balance;
    }
    mp_status st = mp_model_state_get(mb->m, &s.model);
    if (st == MP_OK)
        st = mp_batch_source_state_get(mb->src, &s.source, &s.n_source);
    if (st == MP_OK)
        st = c->checkpoint(c->checkpoint_arg, &s);
    mp_model_state_free(&s.model);
    mp_free(s.source);
    mp_free(balance);
    return st;
}

static int cmp_sz(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* order[0..n) is a permutation of the training rows (a checkpoint's order
 * indexes the store: a damaged one must not read outside it). */
static int is_train_order(const mp_batch_data *b, const size_t *order)
{
    size_t n = (size_t)b->n_train;
    size_t *x = mp_malloc(sizeof(size_t) * (n ? 2 * n : 1));
    if (!x)
        return -1;
    size_t *y = x + n;
    memcpy(x, order, sizeof(size_t) * n);
    for (size_t i = 0; i < n; i++)
        y[i] = (size_t)b->train[i];
    qsort(x, n, sizeof *x, cmp_sz);
    qsort(y, n, sizeof *y, cmp_sz);
    int same = n == 0 || memcmp(x, y, sizeof(size_t) * n) == 0;
    mp_free(x);
    return same;
}

/* Every entry of order[0..n_train) is a training row: a class-balanced
 * epoch's order (its lists interleaved over the first n_epoch entries, the
 * rest left from before) is not a permutation, but it indexes the store
 * only through training rows.  -1: out of memory. */
static int is_train_rows(const mp_batch_data *b, const size_t *order)
{
    size_t n = (size_t)b->n_train;
    size_t *y = mp_malloc(sizeof(size_t) * (n ? n : 1));
    if (!y)
        return -1;
    for (size_t i = 0; i < n; i++)
        y[i] = (size_t)b->train[i];
    qsort(y, n, sizeof *y, cmp_sz);
    int ok = 1;
    for (size_t i = 0; ok && i < n; i++)
        ok = bsearch(&order[i], y, n, sizeof *y, cmp_sz) != NULL;
    mp_free(y);
    return ok;
}

/* list[0..n) holds the rows of want[0..n) in some order. */
static int same_rows(const size_t *list, const int32_t *want, int32_t n)
{
    size_t *x = mp_malloc(sizeof(size_t) * (n ? 2 * (size_t)n : 1));
    if (!x)
        return -1;
    size_t *y = x + n;
    memcpy(x, list, sizeof(size_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++)
        y[i] = (size_t)want[i];
    qsort(x, (size_t)n, sizeof *x, cmp_sz);
    qsort(y, (size_t)n, sizeof *y, cmp_sz);
    int same = n == 0 || memcmp(x, y, sizeof(size_t) * (size_t)n) == 0;
    mp_free(x);
    return same;
}

/* A class-balanced member takes its two lists from the checkpoint (as the
 * interrupted run's shuffles left them); a checkpoint without them (one
 * written before they were kept) cannot continue the run bit for bit and
 * is refused. */
static mp_status balance_resume(member *mb, const mp_fit_state *s)
{
    const mp_fit_ctx *c = mb->c;
    if (!mb->pos) {
        if (s->n_balance)
            return mp_error_set(MP_ERR_FORMAT, "checkpoint of member %d holds class-balance "
                                "lists; this run is not class-balanced", s->k);
        return MP_OK;
    }
    if (!s->balance || s->n_balance != c->n_pos + c->n_neg)
        return mp_error_set(MP_ERR_FORMAT, "checkpoint of member %d has no class-balance lists "
                            "for this --class-balance run (%d positives, %d negatives); it was "
                            "written by an older molprop and cannot resume the run bit for bit",
                            s->k, (int)c->n_pos, (int)c->n_neg);
    int a = same_rows(s->balance, c->pos, c->n_pos);
    int b = a > 0 ? same_rows(s->balance + c->n_pos, c->neg, c->n_neg) : a;
    if (a < 0 || b < 0)
        return mp_error_set(MP_ERR_NOMEM, "out of memory resuming");
    if (!a || !b)
        return mp_error_set(MP_ERR_FORMAT, "checkpoint of member %d: its class-balance lists "
                            "are not this run's positive and negative training rows", s->k);
    memcpy(mb->pos, s->balance, sizeof(size_t) * (size_t)c->n_pos);
    memcpy(mb->neg, s->balance + c->n_pos, sizeof(size_t) * (size_t)c->n_neg);
    return MP_OK;
}

/* The member where a checkpoint left it: its streams, schedule, best so
 * far, model and source, and the epoch after the checkpoint prepared as
 * the interrupted run had prepared it. */
static mp_status member_resume(member *mb, const mp_fit_state *s)
{
    const mp_fit_ctx *c = mb->c;
    if (s->n_train != c->batches.n_train || s->n_steps != mb->src->n_steps ||
        s->n_params != mp_model_n_params(mb->m) || s->epoch < 1 || s->epoch > c->o->epochs)
        return mp_error_set(MP_ERR_FORMAT, "checkpoint of member %d does not fit this run "
                            "(%d training molecules, %d steps, %zu parameters, epoch %d)",
                            s->k, (int)s->n_train, (int)s->n_steps, s->n_params, s->epoch);
    mp_status st_bal;
    int perm = !s->prepared ? 1 : mb->pos ? is_train_rows(&c->batches, s->order)
                                          : is_train_order(&c->batches, s->order);
    if (perm < 0)
        return mp_error_set(MP_ERR_NOMEM, "out of memory resuming");
    if (!perm)
        return mp_error_set(MP_ERR_FORMAT, "checkpoint of member %d: its epoch order is not "
                            "an order of this run's training set", s->k);
    if ((st_bal = balance_resume(mb, s)))
        return st_bal;
    mb->rng = s->rng;
    mb->noam = s->noam;
    memcpy(mb->order, s->order, sizeof(size_t) * (size_t)s->n_train);
    memcpy(mb->lrs, s->lrs, sizeof(double) * (size_t)s->n_steps);
    memcpy(mb->best, s->best, sizeof(float) * s->n_params);
    mb->best_score = s->best_score;
    mb->best_epoch = s->best_epoch;
    mp_status st;
    if ((st = mp_model_state_set(mb->m, &s->model)) ||
        (st = mp_batch_source_state_set(mb->src, s->source, s->n_source)))
        return st;
    mb->src->progress = c->progress;
    return s->prepared ? mp_batch_source_prepare(mb->src, mb->order, mb->lrs) : MP_OK;
}

/* The coming epoch: a new order from the member's stream, its steps' rates
 * from the schedule, handed to the source. */
static mp_status next_epoch(member *mb)
{
    const mp_fit_ctx *c = mb->c;
    if (mb->pos) {
        /* class balance: both lists shuffled, then interleaved */
        int32_t half = mp_batch_data_epoch(&c->batches) / 2;
        mp_rng_shuffle(&mb->rng, mb->pos, (size_t)c->n_pos);
        mp_rng_shuffle(&mb->rng, mb->neg, (size_t)c->n_neg);
        for (int32_t i = 0; i < half; i++) {
            mb->order[2 * i] = mb->pos[i];
            mb->order[2 * i + 1] = mb->neg[i];
        }
    } else {
        mp_rng_shuffle(&mb->rng, mb->order, (size_t)c->batches.n_train);
    }
    for (int32_t s = 0; s < mb->src->n_steps; s++) {
        mb->lrs[s] = mb->noam.lr;
        mp_noam_step(&mb->noam);
    }
    return mp_batch_source_prepare(mb->src, mb->order, mb->lrs);
}

/* Runs the prepared epoch and, while the source runs it, prepares the next
 * (none after the last); *loss: the mean of its steps' losses.  t[0..2]:
 * when the launch returned, when the next epoch was prepared, when the
 * steps were done. */
static mp_status run_epoch(member *mb, int epoch, double *loss, double *t)
{
    mp_status st = mp_batch_source_launch(mb->src);
    if (st)
        return st;
    t[0] = mp_time_now();
    if (epoch < mb->c->o->epochs && (st = next_epoch(mb))) {
        mp_batch_source_finish(mb->src, mb->losses);   /* drain it, keep the first error */
        return st;
    }
    t[1] = mp_time_now();
    if ((st = mp_batch_source_finish(mb->src, mb->losses)))
        return st;
    t[2] = mp_time_now();
    double sum = 0;
    for (int32_t s = 0; s < mb->src->n_steps; s++)
        sum += mb->losses[s];
    *loss = mb->src->n_steps ? sum / mb->src->n_steps : NAN;
    return MP_OK;
}

/* The member's validation score (NaN without a validation set). */
static mp_status validate(member *mb, double *val_mean)
{
    const mp_fit_ctx *c = mb->c;
    size_t skipped = 0;
    *val_mean = NAN;
    if (c->n_val <= 0)
        return MP_OK;
    mp_status st = c->multiclass
                   ? mp_ensemble_predict_values(c->e, c->batches.f, c->val, c->n_val, mb->k, 1,
                                                c->eval_batch, mb->valpred, NULL)
                   : mp_ensemble_predict(c->e, c->batches.f, c->val, c->n_val, mb->k, 1,
                                         c->eval_batch, mb->valpred, NULL);
    if (st)
        return st;
    if (c->multiclass)
        return mp_fit_score_multiclass(c->d, c->val, c->n_val, mb->valpred, c->multiclass,
                                       mb->per_task, val_mean);
    return mp_fit_score_labels(c->d, c->batches.labels, c->val, c->n_val, mb->valpred, c->metric,
                               c->classification, mb->per_task, mb->why, val_mean, &skipped);
}

/* Where epoch `epoch`'s time went (t0: its start; t: as run_epoch's; tv:
 * the validation's end), on stderr. */
static void profile_line(const member *mb, int epoch, double t0, const double *t, double tv)
{
    fprintf(stderr, "profile epoch %d: train loop %.3f s (the next epoch's prepare %.3f s, "
            "during the steps), validation %.3f s", epoch, t[2] - t0, t[1] - t[0], tv - t[2]);
    mb->src->ops->profile(mb->src, epoch, stderr);
}

static mp_status cancelled(const mp_fit_ctx *c)
{
    if (c->cancel && __atomic_load_n(c->cancel, __ATOMIC_ACQUIRE))
        return mp_error_set(MP_ERR_INTERRUPTED, "stopped: another ensemble member failed");
    return MP_OK;
}

/* Chemprop v2's early stopping: after `epoch`, `patience` epochs in a row
 * brought no better validation score (before the last epoch). */
static int patience_out(const mp_fit_ctx *c, int epoch, int best_epoch)
{
    const mp_train_opts *o = c->o;
    return o->patience > 0 && c->n_val > 0 && epoch - best_epoch >= o->patience &&
           epoch < o->epochs;
}

mp_status mp_fit_member(const mp_fit_ctx *c, int k, mp_batch_source *src, int *best_epoch)
{
    const mp_train_opts *o = c->o;
    member mb;
    mp_status st = member_alloc(&mb, c, k);
    mb.src = src;
    if (st == MP_OK)
        st = mp_fit_reserve(c, k);
    if (st == MP_OK && !src)
        st = mp_fit_open_source(c, k, &mb.src);
    const mp_fit_state *rs = c->resume && c->resume->k == k ? c->resume : NULL;
    if (st == MP_OK)
        st = rs ? member_resume(&mb, rs) : member_start(&mb);
    int from = rs ? rs->epoch + 1 : 1, stop = c->stop_after;
    if (rs && patience_out(c, rs->epoch, mb.best_epoch))
        from = o->epochs + 1;   /* its patience had run out at the checkpoint: done */
    else if (rs && stop > 0 && rs->epoch >= stop) {
        from = o->epochs + 1;   /* already where it is to stop */
        if (c->stopped)
            c->stopped[k] = 1;
    }
    for (int epoch = from; st == MP_OK && epoch <= o->epochs; epoch++) {
        double loss, val_mean, t[3], t0 = mp_time_now();
        if ((st = mp_interrupt_poll()) || (st = cancelled(c)) ||
            (st = run_epoch(&mb, epoch, &loss, t)) ||
            (st = validate(&mb, &val_mean)))
            break;
        if (o->profile)
            profile_line(&mb, epoch, t0, t, mp_time_now());
        if (better(c->multiclass ? MP_METRIC_ACCURACY : c->metric, val_mean, mb.best_score) || (c->n_val == 0 && epoch == o->epochs)) {
            mb.best_score = val_mean;
            mb.best_epoch = epoch;
            if ((st = mp_model_get_params(mb.m, mb.best)))
                break;
        }
        if (c->progress)
            mp_progress_epoch_end(c->progress, epoch - 1, loss,
                                  c->multiclass ? "accuracy" : mp_metric_name(c->metric),
                                  val_mean);
        if (o->on_epoch)
            o->on_epoch(o->on_epoch_arg, k, epoch, loss, val_mean);
        int ck = (c->checkpoint_every > 0 && epoch % c->checkpoint_every == 0) ||
                 (stop > 0 && epoch == stop);
        if (c->checkpoint && ck && (st = member_checkpoint(&mb, epoch)))
            break;
        if (patience_out(c, epoch, mb.best_epoch)) {
            if (c->progress)
                mp_progress_message(c->progress, "early stopping after epoch %d: no better "
                                    "validation score in %d epochs (best: epoch %d)", epoch,
                                    o->patience, mb.best_epoch);
            break;
        }
        if (stop > 0 && epoch == stop) {   /* resumable from the checkpoint just made */
            if (c->stopped)
                c->stopped[k] = 1;
            break;
        }
    }
    if (st == MP_OK) {
        st = mp_model_set_params(mb.m, mb.best);
        *best_epoch = mb.best_epoch;
    }
    if (mb.src != src)
        mp_batch_source_free(mb.src);
    member_free(&mb);
    return st;
}
