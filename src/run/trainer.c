/*
 * trainer.c - `molprop train` as a library call: CSV -> features -> split ->
 * scaled targets/features -> Adam + Noam over shuffled batches, one ensemble
 * member at a time -> best validation epoch -> test metrics -> model.mpm and
 * metrics.json.  Chemprop v1's loop (REFERENCE.md 2.4-2.7, 3.6).
 */
#include "run/trainer.h"

#include "core/progress.h"
#include "data/registry.h"
#include "run/resident.h"
#include "models/schedule.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#define EVAL_BATCH 256           /* inference batch for validation/test      */
#define EVAL_BATCH_GPU 4096      /* the same on a device backend             */
#define MP_STREAM_SHUFFLE 201    /* mp_rng stream for the epoch order         */
#define MAX_REPORTED_INVALID 20
#define SLOT_CLASSES 4           /* resident slot size classes (D-MPNN)       */

mp_train_opts mp_train_opts_default(void)
{
    mp_train_opts o;
    memset(&o, 0, sizeof o);
    o.task = -1;
    o.model = MP_MODEL_DMPNN;
    o.layout = MP_ATOM_V1;
    o.split = mp_split_opts_default();
    o.epochs = 30;
    o.batch_size = 50;
    o.warmup_epochs = 2.0;
    o.init_lr = 1e-4;
    o.max_lr = 1e-3;
    o.final_lr = 1e-4;
    o.hidden = 300;
    o.depth = 3;
    o.ffn_layers = 2;
    o.ffn_hidden = 0;
    o.dropout = 0.0;
    o.aggregation = MP_AGG_MEAN;
    o.ensemble_size = 1;
    o.seed = 0;
    o.backend = "cpu";
    o.resident = -1;
    o.graph = -1;
    return o;
}

void mp_train_result_free(mp_train_result *r)
{
    mp_free(r->val_per_task);
    mp_free(r->test_per_task);
    mp_free(r->best_epoch);
    memset(r, 0, sizeof *r);
}

/* ===================================================================== */
/* Choices made from the data                                            */
/* ===================================================================== */

static int labels_all_binary(const mp_dataset *d)
{
    size_t n = d->n_rows * d->n_tasks, seen = 0;
    for (size_t i = 0; i < n; i++) {
        double v = d->targets[i];
        if (isnan(v))
            continue;
        if (v != 0.0 && v != 1.0)
            return 0;
        seen++;
    }
    return seen > 0;
}

/* --task, else the registry entry of this file, else 0/1 labels mean
 * classification.  Says which on stderr. */
static mp_status choose_task(const mp_train_opts *o, const mp_dataset *d, mp_task_type *out)
{
    if (o->task >= 0) {
        *out = (mp_task_type)o->task;
        if (!o->quiet)
            fprintf(stderr, "task type: %s (--task)\n", mp_task_type_name(*out));
        return MP_OK;
    }
    mp_registry *reg = NULL;
    if (mp_registry_load(&reg, NULL) == MP_OK) {
        const mp_dataset_info *info = mp_registry_find_file(reg, o->data_path);
        if (info) {
            *out = info->task_type;
            if (!o->quiet)
                fprintf(stderr, "task type: %s (registry entry '%s')\n",
                        mp_task_type_name(*out), info->name);
            mp_registry_free(reg);
            return MP_OK;
        }
        mp_registry_free(reg);
    }
    mp_error_clear();
    *out = labels_all_binary(d) ? MP_TASK_CLASSIFICATION : MP_TASK_REGRESSION;
    if (!o->quiet)
        fprintf(stderr, "task type: %s (%s; use --task to choose)\n", mp_task_type_name(*out),
                *out == MP_TASK_CLASSIFICATION ? "every label is 0 or 1"
                                               : "labels are not all 0/1");
    return MP_OK;
}

static mp_status check_opts(const mp_train_opts *o)
{
    if (!o->data_path)
        return mp_error_set(MP_ERR_ARG, "no data file given (--data)");
    if (o->epochs < 1 || o->batch_size < 1 || o->ensemble_size < 1 || o->hidden < 1 ||
        o->depth < 1 || o->ffn_layers < 1 || o->ffn_hidden < 0)
        return mp_error_set(MP_ERR_ARG, "epochs, batch size, ensemble size, hidden size, "
                                        "depth and FFN layers must be at least 1");
    if (!(o->dropout >= 0.0 && o->dropout < 1.0))
        return mp_error_set(MP_ERR_ARG, "dropout must be in [0, 1), got %g", o->dropout);
    if (!(o->init_lr > 0 && o->max_lr > 0 && o->final_lr > 0) || !(o->warmup_epochs >= 0))
        return mp_error_set(MP_ERR_ARG, "learning rates must be positive and warm-up >= 0");
    if (o->model == MP_MODEL_FFN && o->features == 0)
        return mp_error_set(MP_ERR_ARG, "--model ffn trains on molecule features only: "
                                        "give --features (morgan, morgan-count, rdkit2d)");
    return MP_OK;
}

/* ===================================================================== */
/* Scoring                                                               */
/* ===================================================================== */

/* Metric of predictions pred[n x t] against the dataset rows `mols`. */
static mp_status score_rows(const mp_dataset *d, const int32_t *mols, int32_t n,
                            const double *pred, mp_metric metric, int classification,
                            double *per_task, mp_score_status *why, double *mean,
                            size_t *n_skipped)
{
    size_t t = d->n_tasks;
    double *target = mp_malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * t);
    if (!target)
        return mp_error_set(MP_ERR_NOMEM, "out of memory scoring %d molecules", n);
    for (int32_t i = 0; i < n; i++)
        memcpy(target + (size_t)i * t, d->targets + (size_t)mols[i] * t, t * sizeof(double));
    mp_status st = mp_metric_tasks(metric, classification, pred, target, (size_t)n, t,
                                   per_task, why, mean, n_skipped);
    mp_free(target);
    return st;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
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
/* One ensemble member                                                   */
/* ===================================================================== */

typedef struct {
    const mp_train_opts *o;
    const mp_dataset    *d;
    const mp_features   *f;
    mp_ensemble         *e;
    const float         *targets_scaled;  /* n_rows x n_tasks, NaN missing */
    const int32_t       *train, *val;
    int32_t              n_train, n_val;
    mp_metric            metric;
    int                  classification;
    int                  feat_dim;
    int32_t              eval_batch;
    mp_progress         *progress;
} train_ctx;

/* Per-thread buffers for packing an epoch's slots in parallel. */
typedef struct {
    int      n;
    int32_t *mols;      /* n x batch_size           */
    float   *tgt;       /* n x batch_size x tasks   */
    float   *extra;     /* n x batch_size x feat_dim */
    int32_t *atoms;     /* per batch of the epoch: its atoms and edges */
    int32_t *edges;     /*   (the plan of its slots)                   */
} pack_bufs;

static void pack_bufs_free(pack_bufs *p)
{
    if (!p)
        return;
    mp_free(p->mols);
    mp_free(p->tgt);
    mp_free(p->extra);
    mp_free(p->atoms);
    mp_free(p->edges);
    mp_free(p);
}

static pack_bufs *pack_bufs_new(int n, int32_t bs, size_t t, int dim, int32_t n_steps)
{
    pack_bufs *p = mp_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    p->mols = mp_malloc(sizeof(int32_t) * (size_t)n * (size_t)bs);
    p->tgt = mp_malloc(sizeof(float) * (size_t)n * (size_t)bs * t);
    p->extra = dim ? mp_malloc(sizeof(float) * (size_t)n * (size_t)bs * (size_t)dim) : NULL;
    p->atoms = mp_malloc(sizeof(int32_t) * (size_t)n_steps);
    p->edges = mp_malloc(sizeof(int32_t) * (size_t)n_steps);
    if (!p->mols || !p->tgt || (dim && !p->extra) || !p->atoms || !p->edges) {
        pack_bufs_free(p);
        return NULL;
    }
    return p;
}

/* Packs slot s of the epoch in `order` (batch s = order[s*bs ...]) with the
 * buffers of thread `tid`. */
static mp_status pack_slot(const train_ctx *c, mp_resident *res, const size_t *order, int32_t s,
                           pack_bufs *pk, int tid)
{
    const mp_train_opts *o = c->o;
    int32_t bs = o->batch_size, b0 = s * bs;
    int32_t n = c->n_train - b0 < bs ? c->n_train - b0 : bs;
    size_t t = c->d->n_tasks;
    int32_t *mols = pk->mols + (size_t)tid * (size_t)bs;
    float *tgt = pk->tgt + (size_t)tid * (size_t)bs * t;
    float *extra = c->feat_dim ? pk->extra + (size_t)tid * (size_t)bs * (size_t)c->feat_dim
                               : NULL;
    for (int32_t i = 0; i < n; i++) {
        mols[i] = (int32_t)order[b0 + i];
        memcpy(tgt + (size_t)i * t, c->targets_scaled + (size_t)mols[i] * t, t * sizeof(float));
    }
    if (extra) {
        mp_feature_set_fill(c->e->features, c->f, mols, n, extra);
        mp_scaler_transform_f32(&c->e->feature_scaler, extra, (size_t)n);
    }
    return mp_resident_pack(res, s, o->model == MP_MODEL_DMPNN ? &c->f->g : NULL, mols, n, tgt,
                            extra);
}

/* Shuffles the next epoch (the host loop's RNG use), takes its learning
 * rates from the schedule and packs its slots. */
static mp_status pack_epoch(const train_ctx *c, mp_resident *res, const size_t *order,
                            int32_t n_steps, pack_bufs *pk);

static mp_status prepare_epoch(const train_ctx *c, mp_resident *res, mp_rng *rng, size_t *order,
                               mp_noam *noam, double *lrs, int32_t n_steps, pack_bufs *pk)
{
    mp_rng_shuffle(rng, order, (size_t)c->n_train);
    for (int32_t s = 0; s < n_steps; s++) {
        lrs[s] = noam->lr;
        mp_noam_step(noam);
    }
    return pack_epoch(c, res, order, n_steps, pk);
}

/* Plans the epoch's slots from its batches' sizes (each batch in the
 * smallest slot class that holds it), then packs every slot, in parallel; on
 * a failure the first failing slot is packed again on this thread, for its
 * message. */
static mp_status pack_epoch(const train_ctx *c, mp_resident *res, const size_t *order,
                            int32_t n_steps, pack_bufs *pk)
{
    int dmpnn = c->o->model == MP_MODEL_DMPNN;
    const mp_graphs *g = &c->f->g;
    for (int32_t s = 0; dmpnn && s < n_steps; s++) {
        int32_t b0 = s * c->o->batch_size;
        int32_t b1 = c->n_train - b0 < c->o->batch_size ? c->n_train : b0 + c->o->batch_size;
        int64_t na = 0, ne = 0;
        for (int32_t i = b0; i < b1; i++) {
            size_t k = order[i];
            na += g->mol_atom[k + 1] - g->mol_atom[k];
            ne += g->mol_edge[k + 1] - g->mol_edge[k];
        }
        /* a batch past int32 fails the plan (the largest slot is int32) */
        pk->atoms[s] = na < INT32_MAX ? (int32_t)na : INT32_MAX;
        pk->edges[s] = ne < INT32_MAX ? (int32_t)ne : INT32_MAX;
    }
    mp_status pst = mp_resident_plan(res, n_steps, dmpnn ? pk->atoms : NULL,
                                     dmpnn ? pk->edges : NULL);
    if (pst != MP_OK)
        return pst;
    int32_t bad = INT32_MAX;
#pragma omp parallel for num_threads(pk->n) schedule(dynamic, 4)
    for (int32_t s = 0; s < n_steps; s++) {
        if (pack_slot(c, res, order, s, pk, omp_get_thread_num()) != MP_OK) {
#pragma omp critical(mp_pack_epoch)
            if (s < bad)
                bad = s;
        }
    }
    if (bad == INT32_MAX)
        return MP_OK;
    mp_status st = pack_slot(c, res, order, bad, pk, 0);
    return st != MP_OK ? st : mp_error_set(MP_ERR_INTERNAL, "packing batch %d failed", (int)bad);
}

static mp_status train_member(train_ctx *c, int k, int *best_epoch_out)
{
    const mp_train_opts *o = c->o;
    mp_model *m = c->e->members[k];
    size_t n_params = mp_model_n_params(m), t = c->d->n_tasks;
    int32_t bs = o->batch_size;
    mp_status st = MP_OK;

    size_t   *order = mp_malloc(sizeof(size_t) * (size_t)c->n_train);
    int32_t  *mols = mp_malloc(sizeof(int32_t) * (size_t)bs);
    float    *extra = c->feat_dim ? mp_malloc(sizeof(float) * (size_t)bs * (size_t)c->feat_dim) : NULL;
    float    *tgt = mp_malloc(sizeof(float) * (size_t)bs * t);
    float    *best = mp_malloc(sizeof(float) * n_params);
    double   *valpred = mp_malloc(sizeof(double) * (size_t)(c->n_val > 0 ? c->n_val : 1) * t);
    double   *per_task = mp_malloc(sizeof(double) * t);
    mp_score_status *why = mp_malloc(sizeof(mp_score_status) * t);
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    mp_resident *res = NULL;
    pack_bufs *pk = NULL;
    int32_t n_steps = (int32_t)((c->n_train + (int64_t)bs - 1) / bs);
    double *lrs = NULL, *step_loss = NULL;
    if (!order || !mols || (c->feat_dim && !extra) || !tgt || !best || !valpred || !per_task || !why) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
        goto done;
    }

    /* Activations sized once, from the largest batch this run can draw. */
    if (o->model == MP_MODEL_DMPNN) {
        int32_t ma, me, va = 0, ve = 0;
        mp_graphs_batch_bounds(&c->f->g, c->train, c->n_train, bs, &ma, &me);
        if (c->n_val > 0)
            mp_graphs_batch_bounds(&c->f->g, c->val, c->n_val, c->eval_batch, &va, &ve);
        int32_t mm = bs > c->eval_batch ? bs : c->eval_batch;
        if ((st = mp_model_reserve(m, mm, ma > va ? ma : va, me > ve ? me : ve)))
            goto done;
    } else if ((st = mp_model_reserve(m, bs > c->eval_batch ? bs : c->eval_batch, 0, 0))) {
        goto done;
    }

    /* Device-resident epochs: on the GPU by default (or when asked). */
    mp_backend *dev = c->e->backend;
    int resident = o->resident < 0 ? !dev->host_memory : o->resident;
    if (resident) {
        /* a graph replays dropout through the keyed ops (ops.h); slot
         * classes: MOLPROP_SLOT_CLASSES (1 = one, padded to the largest) */
        const char *cls_env = getenv("MOLPROP_SLOT_CLASSES");
        int n_cls = cls_env && *cls_env ? atoi(cls_env) : SLOT_CLASSES;
        n_cls = n_cls < 1 ? 1 : n_cls > MP_RESIDENT_MAX_CLASSES ? MP_RESIDENT_MAX_CLASSES : n_cls;
        mp_resident_opts ro = { .batch_size = bs, .max_batches = n_steps,
                                .use_graph = o->graph != 0 && !dev->host_memory,
                                .n_classes = n_cls };
        if (o->model == MP_MODEL_DMPNN)
            mp_graphs_batch_bounds(&c->f->g, c->train, c->n_train, bs, &ro.cap_atoms,
                                   &ro.cap_edges);
        lrs = mp_malloc(sizeof(double) * (size_t)n_steps);
        step_loss = mp_malloc(sizeof(double) * (size_t)n_steps);
        if (!lrs || !step_loss) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
            goto done;
        }
        int nth = mp_threads_get();
        nth = nth < 1 ? 1 : nth > n_steps ? (int)n_steps : nth;
        if (!(pk = pack_bufs_new(nth, bs, t, c->feat_dim, n_steps))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory setting up training");
            goto done;
        }
        if ((st = mp_resident_create(&res, m, &ro)))
            goto done;
    }

    /* MOLPROP_GPU_PROFILE=1: where each epoch's time goes, on stderr. */
    const char *prof_env = getenv("MOLPROP_GPU_PROFILE");
    int profile = prof_env && *prof_env && strcmp(prof_env, "0") != 0;

    mp_rng rng;
    mp_rng_seed(&rng, o->seed + (uint64_t)k, MP_STREAM_SHUFFLE);
    mp_noam noam;
    if ((st = mp_noam_init(&noam, o->warmup_epochs, o->epochs, (size_t)c->n_train,
                           (size_t)bs, o->init_lr, o->max_lr, o->final_lr)))
        goto done;
    for (int32_t i = 0; i < c->n_train; i++)
        order[i] = (size_t)c->train[i];

    /* As Chemprop saves the model before the first epoch: if no epoch ever
     * scores (a NaN validation metric), the initial weights are kept. */
    if ((st = mp_model_get_params(m, best)))
        goto done;
    double best_score = NAN;
    int best_epoch = 0;

    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        double loss_sum = 0;
        int n_batches = 0;
        double tp0 = mp_time_now(), tp1 = tp0, tp2 = tp0;
        if (res) {
            /* The epoch was packed (the same batches in the same order as
             * the host loop below) while the previous one ran; run it, and
             * meanwhile pack the next. */
            if (epoch == 1 && (st = prepare_epoch(c, res, &rng, order, &noam, lrs, n_steps, pk)))
                goto done;
            if ((st = mp_resident_launch(res, n_steps, lrs)))
                goto done;
            tp1 = mp_time_now();
            if (epoch < o->epochs &&
                (st = prepare_epoch(c, res, &rng, order, &noam, lrs, n_steps, pk))) {
                mp_resident_finish(res, step_loss);
                goto done;
            }
            tp2 = mp_time_now();
            if ((st = mp_resident_finish(res, step_loss)))
                goto done;
            for (int32_t i = 0; i < n_steps; i++) {
                loss_sum += step_loss[i];
                n_batches++;
                mp_progress_step(c->progress, step_loss[i]);
            }
        } else {
            mp_rng_shuffle(&rng, order, (size_t)c->n_train);
        }
        for (int32_t b0 = 0; !res && b0 < c->n_train; b0 += bs) {
            int32_t n = c->n_train - b0 < bs ? c->n_train - b0 : bs;
            for (int32_t i = 0; i < n; i++) {
                mols[i] = (int32_t)order[b0 + i];
                memcpy(tgt + (size_t)i * t, c->targets_scaled + (size_t)mols[i] * t,
                       t * sizeof(float));
            }
            const mp_graphs *gb = NULL;
            if (o->model == MP_MODEL_DMPNN) {
                if ((st = mp_graphs_select(&batch, &c->f->g, mols, n)))
                    goto done;
                gb = &batch;
            }
            if (extra) {
                mp_feature_set_fill(c->e->features, c->f, mols, n, extra);
                mp_scaler_transform_f32(&c->e->feature_scaler, extra, (size_t)n);
            }
            double loss;
            mp_model_zero_grad(m);
            if ((st = mp_model_forward(m, gb, extra, n, 1, NULL)) ||
                (st = mp_model_loss_backward(m, tgt, &loss)) ||
                (st = mp_model_adam_step(m, noam.lr)))
                goto done;
            mp_noam_step(&noam);
            loss_sum += loss;
            n_batches++;
            mp_progress_step(c->progress, loss);
        }

        double tv_train = mp_time_now();
        double val_mean = NAN;
        size_t skipped = 0;
        if (c->n_val > 0) {
            if ((st = mp_ensemble_predict(c->e, c->f, c->val, c->n_val, k, 1, c->eval_batch,
                                          valpred, NULL)) ||
                (st = score_rows(c->d, c->val, c->n_val, valpred, c->metric,
                                 c->classification, per_task, why, &val_mean, &skipped)))
                goto done;
        }
        if (profile) {
            double tv = mp_time_now(), up = 0, run = 0, er = 0, ep = 0;
            if (res) {
                mp_resident_times(res, &up, &run);
                mp_resident_padding(res, &er, &ep);
            } else {
                tp2 = tp1 = tp0;
            }
            fprintf(stderr, "profile epoch %d: upload %.3f s, steps %.3f s%s, next epoch's pack "
                    "%.3f s (during the steps), train loop %.3f s, validation %.3f s", epoch,
                    up, run, res ? "" : " (host loop)", tp2 - tp1, tv_train - tp0,
                    tv - tv_train);
            if (res && er > 0)
                fprintf(stderr, ", %d slot classes, padded/real edges %.2f",
                        (int)mp_resident_n_classes(res), ep / er);
            fputc('\n', stderr);
            for (int32_t q = 0; res && epoch == 1 && q < mp_resident_n_classes(res); q++) {
                int32_t fa, fe, cm, ca, ce;
                mp_resident_class_caps(res, q, &fa, &fe, &cm, &ca, &ce);
                fprintf(stderr, "profile slot class %d: up to %d atoms, %d edges (padded %d "
                        "molecules, %d atoms, %d edges)\n", (int)q, (int)fa, (int)fe, (int)cm,
                        (int)ca, (int)ce);
            }
        }
        if (better(c->metric, val_mean, best_score) || (c->n_val == 0 && epoch == o->epochs)) {
            best_score = val_mean;
            best_epoch = epoch;
            if ((st = mp_model_get_params(m, best)))
                goto done;
        }
        mp_progress_epoch_end(c->progress, epoch - 1, n_batches ? loss_sum / n_batches : NAN,
                              mp_metric_name(c->metric), val_mean);
    }
    st = mp_model_set_params(m, best);
    *best_epoch_out = best_epoch;

done:
    mp_resident_free(res);
    pack_bufs_free(pk);
    mp_free(lrs);
    mp_free(step_loss);
    mp_graphs_free(&batch);
    mp_free(order);
    mp_free(mols);
    mp_free(extra);
    mp_free(tgt);
    mp_free(best);
    mp_free(valpred);
    mp_free(per_task);
    mp_free(why);
    return st;
}

/* Writes the split as "set<TAB>rows" lines (0-based data rows, ascending),
 * the layout of Chemprop's reference splits, so a run can be checked and
 * repeated with other tools. */
static mp_status write_split(const mp_split *sp, const char *path)
{
    static const char *names[3] = { "train", "val", "test" };
    mp_afile f;
    mp_status st = mp_afile_open(&f, path);
    if (st)
        return st;
    fputs("set\trows\n", f.fp);
    for (int s = 0; s < 3; s++) {
        size_t *rows = mp_malloc(sizeof(size_t) * (sp->n[s] ? sp->n[s] : 1));
        if (!rows) {
            mp_afile_abort(&f);
            return mp_error_set(MP_ERR_NOMEM, "out of memory writing %s", path);
        }
        memcpy(rows, sp->rows[s], sizeof(size_t) * sp->n[s]);
        qsort(rows, sp->n[s], sizeof(size_t), cmp_size);
        fprintf(f.fp, "%s\t", names[s]);
        for (size_t i = 0; i < sp->n[s]; i++)
            fprintf(f.fp, i ? ",%zu" : "%zu", rows[i]);
        fputc('\n', f.fp);
        mp_free(rows);
    }
    return mp_afile_commit(&f);
}

/* ===================================================================== */
/* The run                                                               */
/* ===================================================================== */

static void warn_skipped(const mp_dataset *d, const char *set, const mp_score_status *why)
{
    for (size_t t = 0; t < d->n_tasks; t++)
        if (why[t] != MP_SCORE_OK)
            fprintf(stderr, "warning: %s set, task '%s' skipped: %s\n", set, d->task_names[t],
                    mp_score_status_text(why[t]));
}

static mp_status write_metrics_json(const mp_train_opts *o, const mp_dataset *d,
                                    const mp_train_result *r, const char *path)
{
    mp_report *rep = NULL;
    mp_status st = mp_report_new(&rep);
    if (st)
        return st;
    char feats[128];
    mp_feature_set_name(o->features, feats, sizeof feats);
    const char *const *names = (const char *const *)d->task_names;
    if ((st = mp_report_set_str(rep, "data", o->data_path)) ||
        (st = mp_report_set_str(rep, "task_type", mp_task_type_name(r->task))) ||
        (st = mp_report_set_str(rep, "model", o->model == MP_MODEL_DMPNN ? "dmpnn" : "ffn")) ||
        (st = mp_report_set_str(rep, "features", feats)) ||
        (st = mp_report_set_str(rep, "split", mp_split_type_name(o->split.type))) ||
        (st = mp_report_set_int(rep, "seed", (long long)o->seed)) ||
        (st = mp_report_set_int(rep, "ensemble_size", o->ensemble_size)) ||
        (st = mp_report_set_int(rep, "epochs", o->epochs)) ||
        (st = mp_report_set_strs(rep, "metric_names", (const char *const[]){ mp_metric_name(r->metric) }, 1)) ||
        (st = mp_report_set_strs(rep, "tasks", names, d->n_tasks)) ||
        (st = mp_report_set_metric(rep, "val", mp_metric_name(r->metric), names,
                                   r->val_per_task, d->n_tasks, r->val_mean)) ||
        (st = mp_report_set_metric(rep, "test", mp_metric_name(r->metric), names,
                                   r->test_per_task, d->n_tasks, r->test_mean)) ||
        (st = mp_report_set_int(rep, "split_sizes.train", (long long)r->n_train)) ||
        (st = mp_report_set_int(rep, "split_sizes.val", (long long)r->n_val)) ||
        (st = mp_report_set_int(rep, "split_sizes.test", (long long)r->n_test)) ||
        (st = mp_report_set_int(rep, "invalid_rows", (long long)r->n_invalid)) ||
        (st = mp_report_set_num(rep, "timings.featurize_seconds", r->featurize_seconds)) ||
        (st = mp_report_set_num(rep, "timings.train_seconds", r->train_seconds)) ||
        (st = mp_report_set_num(rep, "timings.train_molecules_per_second",
                                r->train_mols_per_second)))
        goto done;
    {
        double be[256];
        int nb = o->ensemble_size < 256 ? o->ensemble_size : 256;
        for (int i = 0; i < nb; i++)
            be[i] = r->best_epoch[i];
        if ((st = mp_report_set_nums(rep, "best_epoch", be, (size_t)nb)))
            goto done;
    }
    st = mp_report_write(rep, path);
done:
    mp_report_free(rep);
    return st;
}

mp_status mp_train(const mp_train_opts *o, mp_train_result *res)
{
    memset(res, 0, sizeof *res);
    mp_status st = check_opts(o);
    if (st)
        return st;
    if (o->threads > 0)
        mp_threads_set(o->threads);

    mp_dataset  *d = NULL;
    mp_features *f = NULL;
    mp_ensemble *e = NULL;
    mp_split     sp;
    memset(&sp, 0, sizeof sp);
    size_t  *valid = NULL;
    int32_t *sets[3] = { NULL, NULL, NULL };
    float   *tscaled = NULL, *train_feats = NULL;
    double  *testpred = NULL, *teststd = NULL, *valpred = NULL;
    mp_score_status *why = NULL;
    mp_progress prog;
    memset(&prog, 0, sizeof prog);
    char path[4096];

    /* The save directory is made first (an unwritable place fails before any
     * work) and removed again if this run made it and then failed. */
    int made_dir = 0;
    if (o->save_dir) {
        if (mkdir(o->save_dir, 0777) == 0)
            made_dir = 1;
        else if (errno != EEXIST)
            return mp_error_set(MP_ERR_IO, "cannot create directory %s: %s", o->save_dir,
                                strerror(errno));
    }

    /* A missing GPU is found before any work is done. */
    if (o->backend && strcmp(o->backend, "cpu") != 0) {
        mp_backend *probe = NULL;
        if ((st = mp_backend_open(&probe, o->backend)))
            goto done;
        mp_backend_close(probe);
    }

    double t0 = mp_time_now();
    if ((st = mp_dataset_load(&d, o->data_path, &o->columns)))
        goto done;
    if (d->n_tasks == 0) {
        st = mp_error_set(MP_ERR_ARG, "%s: no target columns to train on", o->data_path);
        goto done;
    }
    if ((st = choose_task(o, d, &res->task)))
        goto done;
    int classification = res->task == MP_TASK_CLASSIFICATION;
    if (o->metric) {
        if ((st = mp_metric_parse(o->metric, &res->metric)))
            goto done;
        if (mp_metric_is_classification(res->metric) != classification) {
            st = mp_error_set(MP_ERR_ARG, "metric %s does not fit a %s task", o->metric,
                              mp_task_type_name(res->task));
            goto done;
        }
    } else {
        res->metric = classification ? MP_METRIC_AUC : MP_METRIC_RMSE;
    }
    if (classification) {
        size_t n = d->n_rows * d->n_tasks;
        for (size_t i = 0; i < n; i++)
            if (!isnan(d->targets[i]) && d->targets[i] != 0.0 && d->targets[i] != 1.0) {
                size_t row = i / d->n_tasks;
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': classification label "
                                  "%g is not 0 or 1", o->data_path, d->line[row],
                                  d->task_names[i % d->n_tasks], d->targets[i]);
                goto done;
            }
    }

    /* Featurize every row once. */
    mp_featurize_opts fo = { .layout = o->layout,
                             .morgan = (o->features & (MP_FEAT_MORGAN | MP_FEAT_MORGAN_COUNT)) != 0,
                             .descriptors = (o->features & MP_FEAT_RDKIT2D) != 0,
                             .scaffolds = o->split.type == MP_SPLIT_SCAFFOLD_BALANCED,
                             .n_threads = o->threads };
    if (d->n_rows > INT32_MAX) {
        st = mp_error_set(MP_ERR_ARG, "%s: too many rows for one training run", o->data_path);
        goto done;
    }
    if ((st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo)))
        goto done;
    res->featurize_seconds = mp_time_now() - t0;

    valid = mp_malloc(sizeof(size_t) * d->n_rows);
    if (!valid) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n_valid = 0;
    for (size_t i = 0; i < d->n_rows; i++) {
        if (f->g.valid[i]) {
            valid[n_valid++] = i;
        } else {
            if (!o->quiet && res->n_invalid < MAX_REPORTED_INVALID)
                fprintf(stderr, "%s:%zu: invalid SMILES '%s' left out: %s\n", o->data_path,
                        d->line[i], d->smiles[i], f->error[i] ? f->error[i] : "invalid");
            res->n_invalid++;
        }
    }
    if (!o->quiet && res->n_invalid > MAX_REPORTED_INVALID)
        fprintf(stderr, "... %zu invalid SMILES in all\n", res->n_invalid);
    if (n_valid == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: no valid molecule to train on", o->data_path);
        goto done;
    }

    mp_split_opts so = o->split;
    so.seed = o->seed;   /* one --seed: the split's, and the first member's */
    if ((st = mp_split_make(&sp, valid, n_valid, (const char *const *)f->scaffold, &so)))
        goto done;
    for (int s = 0; s < 3; s++) {
        sets[s] = mp_malloc(sizeof(int32_t) * (sp.n[s] ? sp.n[s] : 1));
        if (!sets[s]) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < sp.n[s]; i++)
            sets[s][i] = (int32_t)sp.rows[s][i];
    }
    res->n_train = sp.n[0];
    res->n_val = sp.n[1];
    res->n_test = sp.n[2];
    if (res->n_train == 0) {
        st = mp_error_set(MP_ERR_ARG, "%s: the split leaves no training molecule", o->data_path);
        goto done;
    }
    if (!o->quiet)
        fprintf(stderr, "split %s seed %llu: %zu train, %zu val, %zu test\n",
                mp_split_type_name(o->split.type), (unsigned long long)o->seed, res->n_train,
                res->n_val, res->n_test);

    /* The model set. */
    mp_model_config cfg = mp_model_config_default();
    cfg.kind = o->model;
    cfg.task = classification ? MP_MODEL_CLASSIFICATION : MP_MODEL_REGRESSION;
    cfg.n_tasks = (int)d->n_tasks;
    cfg.atom_fdim = mp_atom_fdim(o->layout);
    cfg.hidden = o->hidden;
    cfg.depth = o->depth;
    cfg.dropout = o->dropout;
    cfg.ffn_layers = o->ffn_layers;
    cfg.ffn_hidden = o->ffn_hidden;
    cfg.aggregation = o->aggregation;
    int feat_dim = mp_feature_set_dim(o->features, f->n_desc);
    cfg.extra_dim = feat_dim;
    if ((st = mp_ensemble_create(&e, &cfg, o->ensemble_size, o->seed, o->backend)))
        goto done;
    e->task = res->task;
    e->n_tasks = d->n_tasks;
    e->layout = o->layout;
    e->features = o->features;
    e->n_desc = f->n_desc;
    e->task_names = mp_calloc(d->n_tasks, sizeof(char *));
    e->smiles_name = mp_strdup(d->smiles_name);
    if (!e->task_names || !e->smiles_name) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t t = 0; t < d->n_tasks; t++)
        if (!(e->task_names[t] = mp_strdup(d->task_names[t]))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }

    /* Scalers, fitted on the training set only. */
    tscaled = mp_malloc(sizeof(float) * d->n_rows * d->n_tasks);
    if (!tscaled) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!classification) {
        if ((st = mp_scaler_fit(&e->target_scaler, MP_SCALE_TARGETS, d->targets, d->n_tasks,
                                sp.rows[0], sp.n[0])))
            goto done;
        mp_scaler_transform_to_f32(&e->target_scaler, d->targets, tscaled, d->n_rows);
    } else {
        for (size_t i = 0; i < d->n_rows * d->n_tasks; i++)
            tscaled[i] = (float)d->targets[i];
    }
    if (feat_dim) {
        train_feats = mp_malloc(sizeof(float) * sp.n[0] * (size_t)feat_dim);
        if (!train_feats) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory (%zu training feature rows)", sp.n[0]);
            goto done;
        }
        mp_feature_set_fill(o->features, f, sets[0], (int32_t)sp.n[0], train_feats);
        size_t *ident = mp_malloc(sizeof(size_t) * sp.n[0]);
        if (!ident) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < sp.n[0]; i++)
            ident[i] = i;
        st = mp_scaler_fit_f32(&e->feature_scaler, MP_SCALE_FEATURES, train_feats,
                               (size_t)feat_dim, ident, sp.n[0]);
        mp_free(ident);
        mp_free(train_feats);
        train_feats = NULL;
        if (st)
            goto done;
    }

    /* Train each member. */
    res->best_epoch = mp_calloc((size_t)o->ensemble_size, sizeof(int));
    if (!res->best_epoch) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    long steps = (long)((res->n_train + (size_t)o->batch_size - 1) / (size_t)o->batch_size);
    double t1 = mp_time_now();
    train_ctx c = { .o = o, .d = d, .f = f, .e = e, .targets_scaled = tscaled,
                    .train = sets[0], .val = sets[1], .n_train = (int32_t)sp.n[0],
                    .n_val = (int32_t)sp.n[1], .metric = res->metric,
                    .classification = classification, .feat_dim = feat_dim,
                    .eval_batch = e->backend->host_memory ? EVAL_BATCH : EVAL_BATCH_GPU,
                    .progress = &prog };
    for (int k = 0; k < o->ensemble_size; k++) {
        mp_progress_begin_on(&prog, stderr, o->quiet ? MP_PROGRESS_QUIET : MP_PROGRESS_AUTO,
                             o->epochs, steps);
        if (o->ensemble_size > 1)
            mp_progress_message(&prog, "ensemble member %d of %d (seed %llu)", k + 1,
                                o->ensemble_size, (unsigned long long)(o->seed + (uint64_t)k));
        st = train_member(&c, k, &res->best_epoch[k]);
        mp_progress_end(&prog);
        if (st)
            goto done;
    }
    res->train_seconds = mp_time_now() - t1;
    res->train_mols_per_second = (double)res->n_train * o->epochs * o->ensemble_size /
                                 (res->train_seconds > 0 ? res->train_seconds : 1e-9);

    /* Score the ensemble on validation and test. */
    size_t t = d->n_tasks, skipped;
    res->n_tasks = t;
    res->val_per_task = mp_malloc(sizeof(double) * t);
    res->test_per_task = mp_malloc(sizeof(double) * t);
    why = mp_malloc(sizeof(mp_score_status) * t);
    testpred = mp_malloc(sizeof(double) * (sp.n[2] + 1) * t);
    teststd = mp_malloc(sizeof(double) * (sp.n[2] + 1) * t);
    valpred = mp_malloc(sizeof(double) * (sp.n[1] + 1) * t);
    if (!res->val_per_task || !res->test_per_task || !why || !testpred || !teststd || !valpred) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    res->val_mean = res->test_mean = NAN;
    for (size_t i = 0; i < t; i++)
        res->val_per_task[i] = res->test_per_task[i] = NAN;
    if (sp.n[1]) {
        if ((st = mp_ensemble_predict(e, f, sets[1], (int32_t)sp.n[1], 0, 0, c.eval_batch,
                                      valpred, NULL)) ||
            (st = score_rows(d, sets[1], (int32_t)sp.n[1], valpred, res->metric,
                             classification, res->val_per_task, why, &res->val_mean, &skipped)))
            goto done;
        if (!o->quiet)
            warn_skipped(d, "validation", why);
    }
    if (sp.n[2]) {
        if ((st = mp_ensemble_predict(e, f, sets[2], (int32_t)sp.n[2], 0, 0, c.eval_batch,
                                      testpred, teststd)) ||
            (st = score_rows(d, sets[2], (int32_t)sp.n[2], testpred, res->metric,
                             classification, res->test_per_task, why, &res->test_mean,
                             &skipped)))
            goto done;
        if (!o->quiet)
            warn_skipped(d, "test", why);
    }

    if (o->save_dir) {
        snprintf(path, sizeof path, "%s/model.mpm", o->save_dir);
        if ((st = mp_ensemble_save(e, path)))
            goto done;
        snprintf(path, sizeof path, "%s/metrics.json", o->save_dir);
        if ((st = write_metrics_json(o, d, res, path)))
            goto done;
        snprintf(path, sizeof path, "%s/split.tsv", o->save_dir);
        if ((st = write_split(&sp, path)))
            goto done;
    }

done:
    if (st != MP_OK && made_dir) {
        static const char *const outputs[3] = { "model.mpm", "metrics.json", "split.tsv" };
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", o->save_dir, outputs[i]);
            (void)unlink(path);
        }
        (void)rmdir(o->save_dir);
    }
    mp_free(why);
    mp_free(testpred);
    mp_free(teststd);
    mp_free(valpred);
    mp_free(tscaled);
    mp_free(train_feats);
    for (int s = 0; s < 3; s++)
        mp_free(sets[s]);
    mp_split_free(&sp);
    mp_free(valid);
    mp_ensemble_free(e);
    mp_features_free(f);
    mp_dataset_free(d);
    if (st)
        mp_train_result_free(res);
    return st;
}
