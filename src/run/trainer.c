/*
 * trainer.c - `molprop train` as a library call: CSV -> features -> split ->
 * scaled targets/features -> each ensemble member trained by the epoch loop
 * of fit.c over a batch source (batches.h) -> test metrics -> model.mpm,
 * metrics.json and split.tsv.  Chemprop v1's run (REFERENCE.md 2.4-2.7, 3.6).
 */
#include "run/trainer.h"

#include "data/featfile.h"
#include "data/registry.h"
#include "models/heads.h"
#include "core/dist.h"
#include "run/checkpoint.h"
#include "run/fit.h"
#include "run/members.h"
#include "run/resident.h"
#include "run/resume.h"
#include "run/train_head.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EVAL_BATCH 256           /* inference batch for validation/test      */
#define EVAL_BATCH_GPU 4096      /* the same on a device backend             */
#define MAX_REPORTED_INVALID 20

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
    o.slot_classes = 4;
    o.profile = 0;
    o.features_scaling = MP_FSCALE_AUTO;
    o.loss_eps = 1e-8;
    o.quantile_alpha = 0.1;
    o.activation = MP_ACT_RELU;
    o.spectra_act = MP_SPECTRA_EXP;
    o.spectra_floor = 1e-8;
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
    if (mp_registry_load(&reg, o->registry) == MP_OK) {
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

/* ===================================================================== */
/* Output files                                                          */
/* ===================================================================== */

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
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
        (st = mp_report_set_str(rep, "features_scaling",
                                mp_feature_scaling_name(o->no_features_scaling
                                    ? MP_FSCALE_OFF : (mp_feature_scaling)o->features_scaling))) ||
        (o->features_path && (st = mp_report_set_str(rep, "features_path", o->features_path))) ||
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

/* ===================================================================== */
/* The run, stage by stage                                                */
/* ===================================================================== */

/* Everything a run holds; train_free releases it. */
typedef struct {
    const mp_train_opts *o;
    mp_train_result     *res;
    mp_dataset          *d;
    mp_features         *f;
    mp_ensemble         *e;
    mp_split             sp;
    int32_t             *sets[3];      /* train, val, test rows (int32)      */
    float               *tscaled;      /* n_rows x n_tasks, scaled, NaN missing */
    const mp_labels     *y;            /* sparse targets instead (o->inputs')  */
    float               *weights;      /* n_rows sample weights, or NULL     */
    float               *task_w;       /* n_tasks loss weights, or NULL      */
    int32_t             *pos, *neg;    /* class balance's lists (or NULL)    */
    int32_t              n_pos, n_neg;
    int                  classification;  /* the binary heads: 0/1 labels    */
    int                  multiclass;   /* classes per task of a multiclass head */
    int                  feat_dim;
    unsigned             features;     /* o->features, with MP_FEAT_FILE     */
    mp_feature_scaling   scaling;
    mp_featfile          file;         /* --features-path (f->file_values)   */
    mp_features          f_view;       /* o->inputs' features with this run's *
                                        * own copies of the user columns      */
    int                  f_viewed;     /* 1: f is &f_view                      */
    int32_t              eval_batch;
    int                  made_dir;     /* this run made save_dir             */
    int                  wrote;        /* outputs[0..wrote) are written      */
    int                  dir_slot;     /* ... and put it on the cleanup list */
    double               t_start;      /* when reading the CSV began         */
    mp_progress          prog;
    /* checkpoints (checkpoint.h) */
    char                 ck_path[4096];  /* save_dir/checkpoint.mpc          */
    mp_kv               *id;           /* the run's identity (resume.h)      */
    mp_kv               *ck_kv;        /* resuming: the checkpoint's header  */
    mp_checkpoint        ck;           /*   and the rest of it               */
    int                  resuming;
    int                  ck_written;   /* this run wrote a checkpoint        */
    /* what the next checkpoint holds, per member (the members may train
     * side by side, each checkpointing after its own epochs) */
    mp_ck_table          table;        /* the members for the next one       */
    int                  member_jobs;  /* members side by side               */
    int                 *stopped;      /* per member: ended at o->stop_after */
    long                 steps;        /* training steps per epoch           */
} train_run;

/* The save directory is made first (an unwritable place fails before any
 * work) and removed again if this run made it and then failed, unless a
 * checkpoint was written into it. */
static mp_status open_save_dir(train_run *r)
{
    const char *dir = r->o->save_dir;
    if (!dir || r->o->read_only)
        return MP_OK;
    /* missing parents first ("runs/esol" from a fresh checkout); they stay */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    mp_status st = MP_OK;
    if (slash && slash != parent) {
        *slash = '\0';
        mp_made_dirs m;
        if ((st = mp_mkdirs(parent, &m)))
            return st;
        mp_mkdirs_keep(&m);
    }
    st = mp_mkdir(dir, &r->made_dir);
    if (st == MP_OK && r->made_dir)
        r->dir_slot = mp_cleanup_add(dir, 1);
    return st;
}

/* The run's options as identity keys (when it checkpoints or resumes); a
 * resumed run reads its checkpoint and must have the same options. */
static mp_status resume_open(train_run *r)
{
    const mp_train_opts *o = r->o;
    if (!o->save_dir || (o->checkpoint_every == 0 && o->stop_after == 0 && !o->resume))
        return MP_OK;
    snprintf(r->ck_path, sizeof r->ck_path, "%s/%s", o->save_dir, MP_CHECKPOINT_FILE);
    mp_status st = mp_kv_new(&r->id);
    if (st == MP_OK)
        st = mp_train_identity_opts(o, r->id);
    if (st || !o->resume)
        return st;
    if ((st = mp_checkpoint_read(r->ck_path, &r->ck_kv, &r->ck)) == MP_ERR_IO) {
        char msg[2048], model[4200];
        snprintf(msg, sizeof msg, "%s", mp_error_message());
        snprintf(model, sizeof model, "%s/model.mpm", o->save_dir);
        struct stat sb;
        return mp_error_set(MP_ERR_IO, "cannot resume from %s: no checkpoint to continue from%s "
                            "(%s)", o->save_dir,
                            stat(model, &sb) == 0 ? " (model.mpm is there: the run finished)" : "",
                            msg);
    }
    if (st)
        return st;
    r->resuming = 1;
    return mp_checkpoint_match(r->ck_kv, r->id, "opt.", r->ck_path);
}

/* Once the data are read, split and scaled: what the run made of them joins
 * its identity, and a resumed run must have made the same. */
static mp_status resume_check_data(train_run *r)
{
    if (!r->id)
        return MP_OK;
    mp_ensemble *e = r->e;
    mp_status st = mp_train_identity_data(r->d, r->res->task, r->res->metric,
                                          r->classification ? NULL : &e->target_scaler,
                                          r->feat_dim ? &e->feature_scaler : NULL, r->id);
    if (st || !r->resuming)
        return st;
    if ((st = mp_checkpoint_match(r->ck_kv, r->id, "data.", r->ck_path)) ||
        (st = mp_train_identity_split(&r->ck.split, &r->sp, r->ck_path)))
        return st;
    if (r->ck.n_params != mp_model_n_params(e->members[0]) || r->ck.n_members != e->n_members)
        return mp_error_set(MP_ERR_ARG, "cannot resume from %s: it holds %d members of %zu "
                            "parameters, this run builds %d of %zu", r->ck_path,
                            r->ck.n_members, r->ck.n_params, e->n_members,
                            mp_model_n_params(e->members[0]));
    return MP_OK;
}

/* The fit loop's checkpoint hook (called by one member at a time): member
 * s->k's state joins the table, and the table is written: the members done
 * so far, each member in training, the split, under the run's identity,
 * into save_dir. */
static mp_status write_checkpoint(void *arg, const mp_fit_state *s)
{
    train_run *r = arg;
    mp_status st = mp_ck_table_set_state(&r->table, s);
    /* over data-parallel ranks every rank holds the same state: rank 0
     * writes it, and a failed write stops them all at once */
    if (st == MP_OK && !r->o->read_only)
        st = mp_ck_table_write(&r->table, r->ck_path, r->id, &r->sp);
    if (mp_dist_size() > 1 && !mp_dist_all_ok(st == MP_OK) && st == MP_OK)
        st = mp_error_set(MP_ERR_IO, "rank %d: rank 0 could not write %s (its message says "
                          "why)", mp_dist_rank(), r->ck_path);
    if (st == MP_OK)
        r->ck_written = 1;
    return st;
}

/* A missing GPU is found before any work is done. */
static mp_status probe_backend(const mp_train_opts *o)
{
    if (!o->backend || strcmp(o->backend, "cpu") == 0)
        return MP_OK;
    mp_backend *probe = NULL;
    mp_status st = mp_backend_open(&probe, o->backend);
    if (st == MP_OK)
        mp_backend_close(probe);
    return st;
}

/* The metric asked for (it must fit the task), else the task's default. */
static mp_status choose_metric(const train_run *r, mp_metric *out)
{
    const mp_train_opts *o = r->o;
    if (mp_head_is_multiclass((mp_model_task)r->res->task)) {
        /* scored by the accuracy of the most probable class (fit.h) */
        if (o->metric && strcmp(o->metric, "accuracy") != 0)
            return mp_error_set(MP_ERR_ARG, "metric %s does not fit a %s task (accuracy does)",
                                o->metric, mp_task_type_name(r->res->task));
        *out = MP_METRIC_ACCURACY;
        return MP_OK;
    }
    const int spectral = r->res->task == MP_TASK_SPECTRAL;
    if (!o->metric) {
        *out = spectral ? MP_METRIC_SID : r->classification ? MP_METRIC_AUC : MP_METRIC_RMSE;
        return MP_OK;
    }
    mp_status st = mp_metric_parse(o->metric, out);
    if (st)
        return st;
    if (mp_metric_is_spectral(*out) != spectral ||
        (!spectral && mp_metric_is_classification(*out) != r->classification))
        return mp_error_set(MP_ERR_ARG, "metric %s does not fit a %s task", o->metric,
                            mp_task_type_name(r->res->task));
    return MP_OK;
}

/* Every label of a classification task is 0 or 1 (or missing). */
static mp_status check_labels(const train_run *r)
{
    const mp_dataset *d = r->d;
    for (size_t i = 0; r->y && i < r->y->n_rows; i++)
        for (size_t k = r->y->row_start[i]; k < r->y->row_start[i + 1]; k++)
            if (r->y->value[k] != 0.0 && r->y->value[k] != 1.0)
                return mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': classification label "
                                    "%g is not 0 or 1", r->o->data_path, d->line[i],
                                    d->task_names[r->y->task[k]], r->y->value[k]);
    if (r->y)
        return MP_OK;
    size_t n = d->n_rows * d->n_tasks;
    for (size_t i = 0; r->classification && i < n; i++)
        if (!isnan(d->targets[i]) && d->targets[i] != 0.0 && d->targets[i] != 1.0)
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': classification label %g "
                                "is not 0 or 1", r->o->data_path, d->line[i / d->n_tasks],
                                d->task_names[i % d->n_tasks], d->targets[i]);
    return MP_OK;
}

/* The CSV, its task type and metric. */
static mp_status load_data(train_run *r)
{
    const mp_train_opts *o = r->o;
    mp_status st = MP_OK;
    if (o->inputs) {
        r->d = (mp_dataset *)o->inputs->dataset;
    } else {
        mp_column_spec cs = o->columns;
        cs.inequalities = mp_train_loss_is_bounded(o->loss);
        st = mp_dataset_load(&r->d, o->data_path, &cs);
    }
    if (st)
        return st;
    if (r->d->n_tasks == 0)
        return mp_error_set(MP_ERR_ARG, "%s: no target columns to train on", o->data_path);
    r->y = o->inputs ? o->inputs->labels : NULL;
    if (r->y && (o->task != MP_TASK_CLASSIFICATION || r->y->n_rows != r->d->n_rows))
        return mp_error_set(MP_ERR_ARG, "%s: sparse labels are for a classification task of "
                            "the dataset's rows", o->data_path);
    if ((st = choose_task(o, r->d, &r->res->task)))
        return st;
    r->classification = mp_head_is_binary((mp_model_task)r->res->task);
    if ((st = choose_metric(r, &r->res->metric)))
        return st;
    if ((st = mp_train_spectral_targets(o, r->d, r->res->task, o->inputs || r->y)))
        return st;
    return check_labels(r);
}

/* Every row featurized once; the valid ones into valid[0..*n_valid), the
 * invalid ones reported (the first MAX_REPORTED_INVALID) and counted. */
static mp_status featurize_rows(train_run *r, size_t *valid, size_t *n_valid)
{
    const mp_train_opts *o = r->o;
    const mp_dataset *d = r->d;
    mp_featurize_opts fo = mp_train_featurize_opts(o);
    if (d->n_rows > INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "%s: too many rows for one training run", o->data_path);
    mp_status st;
    if (o->features_path) {
        char what[4200];
        snprintf(what, sizeof what, "the data file %s", o->data_path);
        if ((st = mp_featfile_load(&r->file, o->features_path)) ||
            (st = mp_featfile_check_rows(&r->file, o->features_path, d->n_rows, what)))
            return st;
        if (r->file.n_cols > 1000000)
            return mp_error_set(MP_ERR_FORMAT, "%s: %zu feature columns (at most 1000000)",
                                o->features_path, r->file.n_cols);
    }
    if (o->inputs && o->features_path)
        return mp_error_set(MP_ERR_ARG, "%s: a features file with molecule features given in "
                            "memory", o->features_path);
    if (o->inputs) {
        r->f = (mp_features *)o->inputs->features;
        if (r->f->g.n_mols != (int32_t)d->n_rows)
            return mp_error_set(MP_ERR_ARG, "%s: %d featurized molecules for %zu rows",
                                o->data_path, r->f->g.n_mols, d->n_rows);
    } else if ((st = mp_featurize(&r->f, (const char *const *)d->smiles, (int32_t)d->n_rows,
                                  &fo)))
        return st;
    if (o->features_path) {
        r->f->file_values = r->file.values;
        r->f->file_cols = (int32_t)r->file.n_cols;
    }
    /* the CSV counts too; given inputs cost nothing here */
    r->res->featurize_seconds = o->inputs ? 0.0 : mp_time_now() - r->t_start;
    size_t nv = 0, *n_invalid = &r->res->n_invalid;
    for (size_t i = 0; i < d->n_rows; i++) {
        if (r->f->g.valid[i]) {
            valid[nv++] = i;
            continue;
        }
        if (!o->quiet && *n_invalid < MAX_REPORTED_INVALID) {
            const char *smi = d->smiles[i];
            size_t len = strlen(smi);
            fprintf(stderr, "%s:%zu: invalid SMILES '%.60s%s' left out: %s\n", o->data_path,
                    d->line[i], smi, len > 60 ? "..." : "",
                    r->f->error[i] ? r->f->error[i] : "invalid");
        }
        (*n_invalid)++;
    }
    if (!o->quiet && *n_invalid > MAX_REPORTED_INVALID)
        fprintf(stderr, "... %zu invalid SMILES in all\n", *n_invalid);
    *n_valid = nv;
    if (nv == 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: no valid molecule to train on", o->data_path);
    /* the user atom / bond columns, one file row group per input row (of
     * molecules given in memory: a copy, as they are scaled in place) */
    if ((st = mp_columns_opts_check(&o->cols, o->model == MP_MODEL_DMPNN)))
        return st;
    if (o->inputs)
        return mp_columns_view(&r->f_view, &r->f_viewed, o->inputs->features, &o->cols, &r->f);
    return mp_columns_read(&r->f->g, &o->cols, (const char *const *)d->smiles);
}

/* The valid rows split into train, validation and test (r->sets). */
static mp_status split_rows(train_run *r, const size_t *valid, size_t n_valid)
{
    const mp_train_opts *o = r->o;
    mp_split_opts so = o->split;
    so.seed = o->seed;   /* one --seed: the split's, and the first member's */
    mp_status st = MP_OK;
    if (o->inputs && o->inputs->split)
        r->sp = *o->inputs->split;   /* borrowed: train_free leaves it */
    else
        st = mp_split_make(&r->sp, valid, n_valid, (const char *const *)r->f->scaffold, &so);
    if (st)
        return st;
    for (int s = 0; s < 3; s++) {
        if (!(r->sets[s] = mp_malloc(sizeof(int32_t) * (r->sp.n[s] ? r->sp.n[s] : 1))))
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < r->sp.n[s]; i++)
            r->sets[s][i] = (int32_t)r->sp.rows[s][i];
    }
    r->res->n_train = r->sp.n[0];
    r->res->n_val = r->sp.n[1];
    r->res->n_test = r->sp.n[2];
    if (r->res->n_train == 0)
        return mp_error_set(MP_ERR_ARG, "%s: the split leaves no training molecule", o->data_path);
    if (!o->quiet)
        fprintf(stderr, "split %s seed %llu: %zu train, %zu val, %zu test\n",
                mp_split_type_name(o->split.type), (unsigned long long)o->seed, r->sp.n[0],
                r->sp.n[1], r->sp.n[2]);
    return MP_OK;
}

static mp_status load_and_split(train_run *r)
{
    r->t_start = mp_time_now();
    mp_status st = load_data(r);
    if (st)
        return st;
    size_t n_valid = 0, *valid = mp_malloc(sizeof(size_t) * (r->d->n_rows ? r->d->n_rows : 1));
    if (!valid)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    st = featurize_rows(r, valid, &n_valid);
    if (st == MP_OK)
        st = split_rows(r, valid, n_valid);
    mp_free(valid);
    return st;
}

/* The untrained ensemble: the configuration, seeds seed + i, task names. */
static mp_status build_ensemble(train_run *r)
{
    const mp_train_opts *o = r->o;
    const mp_dataset *d = r->d;
    mp_model_config cfg = mp_model_config_default();
    cfg.kind = o->model;
    cfg.n_tasks = (int)d->n_tasks;
    cfg.atom_fdim = mp_atom_fdim(o->layout);
    cfg.hidden = o->hidden;
    cfg.depth = o->depth;
    cfg.dropout = o->dropout;
    cfg.ffn_layers = o->ffn_layers;
    cfg.ffn_hidden = o->ffn_hidden;
    cfg.aggregation = o->aggregation;
    r->features = o->features | (o->features_path ? MP_FEAT_FILE : 0u);
    r->scaling = o->no_features_scaling ? MP_FSCALE_OFF : (mp_feature_scaling)o->features_scaling;
    r->feat_dim = mp_feature_set_dim(r->features, r->f->n_desc, r->f->file_cols);
    cfg.extra_dim = r->feat_dim;
    /* features given in memory (o->inputs) must hold every set asked for */
    mp_status st = mp_feature_set_check(r->features, r->f, r->f->n_desc, r->f->file_cols);
    if (st == MP_OK)
        st = mp_train_head_config(o, d, r->res->task, &cfg);
    if (st)
        return st;
    /* the user columns: widths into the config, scalers fitted on the
     * training molecules' rows and applied to every row (Chemprop's
     * atom_descriptor_scaler / bond_feature_scaler) */
    mp_columns cols;
    if ((st = mp_columns_fit(&cols, &o->cols, &r->f->g, r->sets[0], (int32_t)r->sp.n[0])))
        return st;
    mp_columns_apply(&cols, &r->f->g);
    mp_columns_config(&cols, &cfg);
    if ((st = mp_ensemble_create(&r->e, &cfg, o->ensemble_size, o->seed, o->backend))) {
        mp_columns_free(&cols);
        return st;
    }
    r->e->cols = cols;
    r->multiclass = mp_head_is_multiclass(cfg.task) ? cfg.n_classes : 0;
    mp_ensemble *e = r->e;
    if ((st = mp_train_task_weights(o, d, &r->task_w)))
        return st;
    for (int k = 0; k < e->n_members; k++)
        if ((st = mp_model_set_task_weights(e->members[k], r->task_w)) ||
            (st = mp_model_set_grad_clip(e->members[k], o->grad_clip)))
            return st;
    e->task = r->res->task;
    e->n_tasks = d->n_tasks;
    e->layout = o->layout;
    e->features = r->features;
    e->n_desc = r->f->n_desc;
    e->n_file = r->f->file_cols;
    e->feature_scaling = r->scaling;
    e->task_names = mp_calloc(d->n_tasks, sizeof(char *));
    e->smiles_name = mp_strdup(d->smiles_name);
    if (!e->task_names || !e->smiles_name)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (size_t t = 0; t < d->n_tasks; t++)
        if (!(e->task_names[t] = mp_strdup(d->task_names[t])))
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
    r->eval_batch = e->backend->host_memory ? EVAL_BATCH
                                            : mp_fit_eval_batch(&cfg, &r->f->g, o->batch_size,
                                                                EVAL_BATCH_GPU, o->gpu_share);
    return mp_transfer_init(e, o);
}

/* The feature scaler, fitted on the training rows' molecule features (in
 * double), identity on the columns left unscaled. */
static mp_status fit_feature_scaler(train_run *r)
{
    return mp_feature_scaler_fit(&r->e->feature_scaler, r->features, r->scaling, r->f,
                                 r->sets[0], (int32_t)r->sp.n[0]);
}

/* Scalers, fitted on the training set only; the scaled targets. */
static mp_status fit_scalers(train_run *r)
{
    const mp_dataset *d = r->d;
    size_t n = d->n_rows * d->n_tasks;
    if (r->y)   /* classification, sparse: the batches read the labels as they are */
        return r->feat_dim ? fit_feature_scaler(r) : MP_OK;
    if (!(r->tscaled = mp_malloc(sizeof(float) * (n ? n : 1))))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    if (mp_head_is_regression(r->e->cfg.task)) {
        mp_status st = mp_scaler_fit(&r->e->target_scaler, MP_SCALE_TARGETS, d->targets,
                                     d->n_tasks, r->sp.rows[0], r->sp.n[0]);
        if (st)
            return st;
        mp_scaler_transform_to_f32(&r->e->target_scaler, d->targets, r->tscaled, d->n_rows);
    } else {
        for (size_t i = 0; i < n; i++)
            r->tscaled[i] = (float)d->targets[i];
    }
    return r->feat_dim ? fit_feature_scaler(r) : MP_OK;
}

/* The sample weights as floats, the class-balanced epochs' lists. */
static mp_status train_extras(train_run *r)
{
    const mp_dataset *d = r->d;
    if (d->weights) {
        if (!(r->weights = mp_malloc(sizeof(float) * (d->n_rows + 1))))
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < d->n_rows; i++)
            r->weights[i] = (float)d->weights[i];
    }
    if (!r->o->class_balance)
        return MP_OK;
    if (!r->classification)
        return mp_error_set(MP_ERR_ARG, "--class-balance is for classification tasks (this one "
                            "is %s)", mp_task_type_name(r->res->task));
    if (r->y)
        return mp_error_set(MP_ERR_ARG, "--class-balance with sparse labels (a bench input): "
                            "not supported");
    return mp_train_class_lists(d, r->sets[0], (int32_t)r->sp.n[0], &r->pos, &r->n_pos,
                                &r->neg, &r->n_neg);
}


/* Member hooks of mp_fit_members: one after another, the progress of
 * each member; the final parameters of a member done join the checkpoint
 * table. */
static void member_begin(void *arg, int k)
{
    train_run *r = arg;
    const mp_train_opts *o = r->o;
    if (r->member_jobs > 1)
        return;
    mp_progress_begin_on(&r->prog, stderr, o->quiet ? MP_PROGRESS_QUIET : MP_PROGRESS_AUTO,
                         o->epochs, r->steps);
    if (o->ensemble_size > 1)
        mp_progress_message(&r->prog, "ensemble member %d of %d (seed %llu)", k + 1,
                            o->ensemble_size, (unsigned long long)(o->seed + (uint64_t)k));
}

static mp_status member_end(void *arg, int k, mp_status st)
{
    train_run *r = arg;
    if (r->member_jobs <= 1)
        mp_progress_end(&r->prog);
    if (st || !r->table.status || (r->stopped && r->stopped[k]))
        return MP_OK;   /* a member stopped stays in the table as its checkpoint left it */
    size_t np = mp_model_n_params(r->e->members[k]);
    float *final = mp_malloc(sizeof(float) * np);
    if (!final)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    if ((st = mp_model_get_params(r->e->members[k], final)) == MP_OK)
        mp_ck_table_set_done(&r->table, k, final, r->res->best_epoch[k]);
    mp_free(final);
    return st;
}

/* Every member (fit.c), one after another or side by side (members.c). */
static mp_status train_members(train_run *r)
{
    const mp_train_opts *o = r->o;
    mp_train_result *res = r->res;
    if (!(res->best_epoch = mp_calloc((size_t)o->ensemble_size, sizeof(int))) ||
        !(r->stopped = mp_calloc((size_t)o->ensemble_size, sizeof(int))))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_status st0 = train_extras(r);
    if (st0)
        return st0;
    mp_fit_ctx c = {
        .o = o, .d = r->d, .e = r->e,
        .batches = { .f = r->f, .targets = r->tscaled, .labels = r->y, .n_tasks = r->d->n_tasks,
                     .features = r->e->features, .feat_dim = r->feat_dim,
                     .feature_scaler = &r->e->feature_scaler,
                     .graphs = o->model == MP_MODEL_DMPNN, .train = r->sets[0],
                     .n_train = (int32_t)r->sp.n[0], .batch_size = o->batch_size,
                     .n_epoch = r->pos ? 2 * (r->n_pos < r->n_neg ? r->n_pos : r->n_neg) : 0,
                     .weights = r->weights, .ineq = r->d->ineq },
        .val = r->sets[1], .n_val = (int32_t)r->sp.n[1], .metric = res->metric,
        .classification = r->classification, .eval_batch = r->eval_batch,
        .progress = &r->prog, .pos = r->pos, .neg = r->neg, .n_pos = r->n_pos,
        .n_neg = r->n_neg, .multiclass = r->multiclass, .stopped = r->stopped,
    };
    r->steps = (long)mp_batch_data_steps(&c.batches);
    mp_status st = r->id ? mp_ck_table_open(&r->table, o->ensemble_size,
                                            mp_model_n_params(r->e->members[0]),
                                            r->resuming ? &r->ck : NULL)
                         : MP_OK;
    if (st)
        return st;
    int n = o->ensemble_size, n_todo = 0;
    int *todo = mp_malloc(sizeof(int) * (size_t)n);
    if (!todo)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n; k++) {
        if (r->table.status && r->table.status[k] == 2) {   /* done before the stop */
            size_t np = r->table.n_params;
            if ((st = mp_model_set_params(r->e->members[k], r->table.final + (size_t)k * np))) {
                mp_free(todo);
                return st;
            }
            res->best_epoch[k] = r->table.best[k];
        } else {
            todo[n_todo++] = k;
        }
    }
    if (r->id && (o->checkpoint_every > 0 || o->stop_after > 0)) {
        c.checkpoint_every = o->checkpoint_every;
        c.stop_after = o->stop_after;
        c.checkpoint = write_checkpoint;
        c.checkpoint_arg = r;
    }
    int threads = o->threads > 0 ? o->threads : mp_threads_get();
    r->member_jobs = mp_members_jobs(o->member_jobs, n_todo, r->e->backend, threads);
    if (mp_dist_size() > 1)   /* the ranks' collectives come from one thread each */
        r->member_jobs = 1;
    const int share = n * (o->gpu_share > 1 ? o->gpu_share : 1);   /* beside other runs */
    mp_members_opts mo = { .c = &c, .members = todo, .n = n_todo, .jobs = r->member_jobs,
                           .threads = threads, .share = share, .states = r->ck.states,
                           .n_states = r->resuming ? r->ck.n_states : 0,
                           .best_epoch = res->best_epoch, .begin = member_begin,
                           .end = member_end, .arg = r };
    double t1 = mp_time_now();
    st = mp_fit_members(&mo);
    mp_free(todo);
    if (st)
        return st;
    for (int k = 0; k < n; k++)
        if (r->stopped[k])
            res->stopped_epoch = o->stop_after;
    /* --stop-after: the checkpoint holds the run as it ends (members that
     * patience ended since the last one are done in it) */
    if (o->stop_after > 0) {
        if ((st = mp_ck_table_write(&r->table, r->ck_path, r->id, &r->sp)))
            return st;
        r->ck_written = 1;
    }
    res->train_seconds = mp_time_now() - t1;
    res->train_mols_per_second = (double)res->n_train * o->epochs * o->ensemble_size /
                                 (res->train_seconds > 0 ? res->train_seconds : 1e-9);
    return MP_OK;
}

/* score_set for a multiclass head: the accuracy of its class probabilities. */
static mp_status score_set_multiclass(train_run *r, int s, double *per_task, double *mean)
{
    size_t n = r->sp.n[s], t = r->d->n_tasks, C = (size_t)r->multiclass;
    double *prob = mp_malloc(sizeof(double) * (n + 1) * t * C);
    mp_status st = MP_OK;
    *mean = NAN;
    for (size_t i = 0; i < t; i++)
        per_task[i] = NAN;
    if (!prob)
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
    else if (n > 0 &&
             !(st = mp_ensemble_predict_values(r->e, r->f, r->sets[s], (int32_t)n, 0, 0,
                                               r->eval_batch, prob, NULL)))
        st = mp_fit_score_multiclass(r->d, r->sets[s], (int32_t)n, prob, r->multiclass,
                                     per_task, mean);
    mp_free(prob);
    return st;
}

/* The whole ensemble's metric on set s (1 validation, 2 test), when the set
 * has molecules; NaN otherwise. */
static mp_status score_set(train_run *r, int s, double *per_task, double *mean)
{
    const mp_dataset *d = r->d;
    size_t n = r->sp.n[s], t = d->n_tasks, skipped;
    if (r->multiclass)
        return score_set_multiclass(r, s, per_task, mean);
    double *pred = mp_malloc(sizeof(double) * (n + 1) * t);
    double *sd = mp_malloc(sizeof(double) * (n + 1) * t);
    mp_score_status *why = mp_malloc(sizeof(mp_score_status) * t);
    mp_status st = MP_OK;
    *mean = NAN;
    for (size_t i = 0; i < t; i++)
        per_task[i] = NAN;
    if (!pred || !sd || !why)
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
    else if (n > 0 &&
             !(st = mp_ensemble_predict(r->e, r->f, r->sets[s], (int32_t)n, 0, 0, r->eval_batch,
                                        pred, s == 2 ? sd : NULL)) &&
             !(st = mp_fit_score_labels(d, r->y, r->sets[s], (int32_t)n, pred, r->res->metric,
                                        r->classification, per_task, why, mean, &skipped)) &&
             !r->o->quiet)
        warn_skipped(d, s == 1 ? "validation" : "test", why);
    mp_free(pred);
    mp_free(sd);
    mp_free(why);
    return st;
}

static mp_status score(train_run *r)
{
    mp_train_result *res = r->res;
    size_t t = r->d->n_tasks;
    res->n_tasks = t;
    res->val_per_task = mp_malloc(sizeof(double) * t);
    res->test_per_task = mp_malloc(sizeof(double) * t);
    if (!res->val_per_task || !res->test_per_task)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_status st = score_set(r, 1, res->val_per_task, &res->val_mean);
    return st ? st : score_set(r, 2, res->test_per_task, &res->test_mean);
}

static const char *const outputs[3] = { "model.mpm", "metrics.json", "split.tsv" };

/* save_dir/model.mpm, metrics.json and split.tsv, each written atomically. */
static mp_status save_outputs(train_run *r)
{
    const char *dir = r->o->save_dir;
    char path[4096];
    mp_status st;
    if (!dir || r->o->read_only)
        return MP_OK;
    snprintf(path, sizeof path, "%s/%s", dir, outputs[0]);
    if ((st = mp_ensemble_save(r->e, path)))
        return st;
    r->wrote = 1;
    snprintf(path, sizeof path, "%s/%s", dir, outputs[1]);
    if ((st = write_metrics_json(r->o, r->d, r->res, path)))
        return st;
    r->wrote = 2;
    snprintf(path, sizeof path, "%s/%s", dir, outputs[2]);
    if ((st = write_split(&r->sp, path)))
        return st;
    r->wrote = 3;
    return MP_OK;
}

/* Frees the run.  After a failure: the outputs it wrote are removed (the
 * three belong together), and a save_dir this run made too, unless a
 * checkpoint is in it (rmdir keeps a directory that is not empty).  After
 * success, the checkpoint is not needed (unless --stop-after keeps it). */
static void train_free(train_run *r, int failed)
{
    if (!failed && r->ck_path[0] && !r->o->read_only && r->o->stop_after == 0)
        (void)unlink(r->ck_path);
    if (failed) {
        char path[4096];
        for (int i = 0; i < r->wrote; i++) {
            snprintf(path, sizeof path, "%s/%s", r->o->save_dir, outputs[i]);
            (void)unlink(path);
        }
        if (r->made_dir)
            (void)rmdir(r->o->save_dir);
    }
    if (r->made_dir)
        mp_cleanup_remove(r->dir_slot);
    mp_kv_free(r->id);
    mp_kv_free(r->ck_kv);
    mp_ck_table_free(&r->table);
    mp_checkpoint_free(&r->ck);
    mp_free(r->stopped);
    mp_free(r->tscaled);
    mp_free(r->weights);
    mp_free(r->task_w);
    mp_free(r->pos);
    mp_free(r->neg);
    for (int s = 0; s < 3; s++)
        mp_free(r->sets[s]);
    if (!(r->o->inputs && r->o->inputs->split))
        mp_split_free(&r->sp);
    mp_ensemble_free(r->e);
    if (!r->o->inputs) {
        mp_features_free(r->f);
        mp_dataset_free(r->d);
    }
    if (r->f_viewed)
        mp_columns_view_free(&r->f_view);
    mp_featfile_free(&r->file);
}

/* A stopped run's message: where its checkpoint holds it, how to go on. */
static void interrupted_message(train_run *r)
{
    char msg[1024], where[1024];
    snprintf(msg, sizeof msg, "%s", mp_error_message());
    mp_ck_table_where(&r->table, where, sizeof where);
    mp_error_set(MP_ERR_INTERRUPTED, "%s; %s holds the run after %s (train --resume %s "
                 "continues it)", msg, r->ck_path, where, r->o->save_dir);
}

mp_status mp_train(const mp_train_opts *o, mp_train_result *res)
{
    memset(res, 0, sizeof *res);
    mp_status st = mp_train_check_opts(o);
    if (st)
        return st;
    if (o->threads > 0)
        mp_threads_set(o->threads);
    /* a resumed run saves into the directory it resumes */
    mp_train_opts oc = *o;
    if (!oc.save_dir)
        oc.save_dir = oc.resume;
    train_run r;
    memset(&r, 0, sizeof r);
    r.o = &oc;
    r.res = res;
    r.dir_slot = -1;
    if ((st = resume_open(&r)) == MP_OK && (st = open_save_dir(&r)) == MP_OK &&
        (st = probe_backend(&oc)) == MP_OK && (st = load_and_split(&r)) == MP_OK &&
        (st = build_ensemble(&r)) == MP_OK && (st = fit_scalers(&r)) == MP_OK &&
        (st = resume_check_data(&r)) == MP_OK && (st = train_members(&r)) == MP_OK &&
        (st = score(&r)) == MP_OK)
        st = save_outputs(&r);
    if (st == MP_ERR_INTERRUPTED && (r.ck_written || r.resuming))
        interrupted_message(&r);
    train_free(&r, st != MP_OK);
    if (st)
        mp_train_result_free(res);
    return st;
}
