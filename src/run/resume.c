/*
 * resume.c - a training run's identity as header keys (resume.h), written
 * into each checkpoint and compared when a run resumes from one.
 */
#include "run/resume.h"

#include "core/dist.h"

#include "models/heads.h"
#include "run/checkpoint.h"

#include <string.h>

static const char *str_or(const char *s, const char *dflt) { return s ? s : dflt; }

/* The options that came after the first checkpoints (the heads and
 * training options of issue 11, the molecule features' scaling and file,
 * transfer learning, the user columns), under "train." so that a
 * checkpoint written before them (without these keys) still resumes:
 * restored from the checkpoint, not compared with the command line. */
static mp_status identity_more(const mp_train_opts *o, mp_kv *kv)
{
    mp_status st;
    if ((st = mp_kv_set(kv, "train.loss", str_or(o->loss, ""))) ||
        (st = mp_kv_set_int(kv, "train.n-classes", o->n_classes)) ||
        (st = mp_kv_set_double(kv, "train.loss-lambda", o->loss_lambda)) ||
        (st = mp_kv_set_double(kv, "train.loss-eps", o->loss_eps)) ||
        (st = mp_kv_set_double(kv, "train.quantile-alpha", o->quantile_alpha)) ||
        (st = mp_kv_set_int(kv, "train.patience", o->patience)) ||
        (st = mp_kv_set_double(kv, "train.grad-clip", o->grad_clip)) ||
        (st = mp_kv_set_int(kv, "train.class-balance", o->class_balance)) ||
        (st = mp_kv_set(kv, "train.spectra-activation",
                        o->spectra_act == MP_SPECTRA_SOFTPLUS ? "softplus" : "exp")) ||
        (st = mp_kv_set_double(kv, "train.spectra-target-floor", o->spectra_floor)) ||
        (st = mp_kv_set(kv, "train.task-weights", str_or(o->task_weights, ""))) ||
        (st = mp_kv_set(kv, "train.weight-column", str_or(o->columns.weight_column, ""))) ||
        (st = mp_kv_set(kv, "train.activation", mp_act_name(o->activation))) ||
        (st = mp_kv_set_int(kv, "train.batch-norm", o->batch_norm)) ||
        (st = mp_kv_set_int(kv, "train.atom-messages", o->atom_messages)) ||
        (st = mp_kv_set_int(kv, "train.undirected", o->undirected)) ||
        (st = mp_kv_set_int(kv, "train.features-scaling", o->features_scaling)) ||
        (st = mp_kv_set_int(kv, "train.no-features-scaling", o->no_features_scaling)) ||
        (st = mp_kv_set(kv, "train.features-path", str_or(o->features_path, ""))) ||
        (st = mp_kv_set(kv, "train.init-model", str_or(o->init_model, ""))) ||
        (st = mp_kv_set_int(kv, "train.freeze-encoder", o->freeze_encoder)) ||
        (st = mp_kv_set_int(kv, "train.freeze-ffn-layers", o->freeze_ffn_layers)) ||
        (st = mp_kv_set(kv, "train.atom-descriptors-path", str_or(o->cols.atom_path, ""))) ||
        (st = mp_kv_set_int(kv, "train.atom-descriptors", (int)o->cols.atom_mode)) ||
        (st = mp_kv_set(kv, "train.bond-features-path", str_or(o->cols.bond_path, ""))) ||
        (st = mp_kv_set_int(kv, "train.no-atom-descriptor-scaling", o->cols.no_atom_scaling)) ||
        (st = mp_kv_set_int(kv, "train.no-bond-features-scaling", o->cols.no_bond_scaling)))
        return st;
    return MP_OK;
}

mp_status mp_train_identity_opts(const mp_train_opts *o, mp_kv *kv)
{
    char feats[128];
    mp_feature_set_name(o->features, feats, sizeof feats);
    static const char *const agg[4] = { "mean", "sum", "norm", "attentive" };
    int a = o->aggregation >= 0 && o->aggregation <= 3 ? (int)o->aggregation : 0;
    mp_status st;
    if ((st = mp_kv_set(kv, "run.data", str_or(o->data_path, ""))) ||
        (st = mp_kv_set(kv, "opt.smiles-column", str_or(o->columns.smiles_column, ""))) ||
        (st = mp_kv_set(kv, "opt.target-columns", str_or(o->columns.target_columns, ""))) ||
        (st = mp_kv_set(kv, "opt.ignore-columns", str_or(o->columns.ignore_columns, ""))) ||
        (st = mp_kv_set(kv, "opt.task", o->task < 0 ? "auto"
                                        : mp_task_type_name((mp_task_type)o->task))) ||
        (st = mp_kv_set(kv, "opt.metric", str_or(o->metric, "default"))) ||
        (st = mp_kv_set(kv, "opt.model", o->model == MP_MODEL_FFN ? "ffn" : "dmpnn")) ||
        (st = mp_kv_set(kv, "opt.features", feats)) ||
        (st = mp_kv_set(kv, "opt.atom-layout", mp_atom_layout_name(o->layout))) ||
        (st = mp_kv_set(kv, "opt.split", mp_split_type_name(o->split.type))) ||
        (st = mp_kv_set_doubles(kv, "opt.split-sizes", o->split.sizes, 3)) ||
        (st = mp_kv_set_int(kv, "opt.folds", o->split.n_folds)) ||
        (st = mp_kv_set_int(kv, "opt.seed", (long long)o->seed)) ||
        (st = mp_kv_set_int(kv, "opt.epochs", o->epochs)) ||
        (st = mp_kv_set_int(kv, "opt.batch-size", o->batch_size)) ||
        (st = mp_kv_set_double(kv, "opt.warmup-epochs", o->warmup_epochs)) ||
        (st = mp_kv_set_double(kv, "opt.init-lr", o->init_lr)) ||
        (st = mp_kv_set_double(kv, "opt.max-lr", o->max_lr)) ||
        (st = mp_kv_set_double(kv, "opt.final-lr", o->final_lr)) ||
        (st = mp_kv_set_int(kv, "opt.hidden", o->hidden)) ||
        (st = mp_kv_set_int(kv, "opt.depth", o->depth)) ||
        (st = mp_kv_set_int(kv, "opt.ffn-layers", o->ffn_layers)) ||
        (st = mp_kv_set_int(kv, "opt.ffn-hidden", o->ffn_hidden)) ||
        (st = mp_kv_set_double(kv, "opt.dropout", o->dropout)) ||
        (st = mp_kv_set(kv, "opt.aggregation", agg[a])) ||
        (st = mp_kv_set_int(kv, "opt.ensemble-size", o->ensemble_size)) ||
        (st = mp_kv_set(kv, "opt.backend", str_or(o->backend, "cpu"))) ||
        (st = mp_kv_set_int(kv, "opt.resident", o->resident)) ||
        (st = mp_kv_set_int(kv, "opt.graph", o->graph)) ||
        (st = mp_kv_set_int(kv, "opt.slot-classes", o->slot_classes)))
        return st;
    /* data-parallel ranks (core/dist.h) slice every batch: a run continues
     * bit for bit over as many ranks as it was stopped with (the key only
     * over K > 1, so one process's checkpoints are as before) */
    if (mp_dist_size() > 1 && (st = mp_kv_set_int(kv, "opt.ranks", mp_dist_size())))
        return st;
    /* a share of the GPU sends some products elsewhere (other last bits):
     * the key past 1 only, as the ranks' */
    if (o->gpu_share > 1 && (st = mp_kv_set_int(kv, "opt.gpu-share", o->gpu_share)))
        return st;
    return identity_more(o, kv);
}

/* ===================================================================== */
/* Options back from a checkpoint                                         */
/* ===================================================================== */

static mp_status get_int(const mp_kv *kv, const char *key, int *out)
{
    long long v;
    mp_status st = mp_kv_get_int(kv, key, INT32_MIN, INT32_MAX, &v);
    if (st == MP_OK)
        *out = (int)v;
    return st;
}

/* "" (as written for NULL) back to NULL. */
static const char *null_if_empty(const char *s) { return s && *s ? s : NULL; }

/* identity_more's keys back, each where the checkpoint has it (one
 * written before them keeps the command's values: those runs had the
 * defaults). */
static mp_status more_from_kv(const mp_kv *kv, mp_train_opts *o)
{
    struct { const char *key; const char **field; } strs[] = {
        { "train.loss", &o->loss }, { "train.task-weights", &o->task_weights },
        { "train.weight-column", &o->columns.weight_column },
        { "train.features-path", &o->features_path }, { "train.init-model", &o->init_model },
        { "train.atom-descriptors-path", &o->cols.atom_path },
        { "train.bond-features-path", &o->cols.bond_path },
    };
    int atom_mode = (int)o->cols.atom_mode;
    struct { const char *key; int *field; } ints[] = {
        { "train.n-classes", &o->n_classes }, { "train.patience", &o->patience },
        { "train.class-balance", &o->class_balance }, { "train.batch-norm", &o->batch_norm },
        { "train.atom-messages", &o->atom_messages }, { "train.undirected", &o->undirected },
        { "train.features-scaling", &o->features_scaling },
        { "train.no-features-scaling", &o->no_features_scaling },
        { "train.freeze-encoder", &o->freeze_encoder },
        { "train.freeze-ffn-layers", &o->freeze_ffn_layers },
        { "train.atom-descriptors", &atom_mode },
        { "train.no-atom-descriptor-scaling", &o->cols.no_atom_scaling },
        { "train.no-bond-features-scaling", &o->cols.no_bond_scaling },
    };
    struct { const char *key; double *field; } reals[] = {
        { "train.loss-lambda", &o->loss_lambda }, { "train.loss-eps", &o->loss_eps },
        { "train.quantile-alpha", &o->quantile_alpha }, { "train.grad-clip", &o->grad_clip },
        { "train.spectra-target-floor", &o->spectra_floor },
    };
    mp_status st;
    const char *s;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if ((s = mp_kv_get(kv, strs[i].key)))
            *strs[i].field = null_if_empty(s);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (mp_kv_get(kv, ints[i].key) && (st = get_int(kv, ints[i].key, ints[i].field)))
            return st;
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        if (mp_kv_get(kv, reals[i].key) && (st = mp_kv_get_double(kv, reals[i].key, reals[i].field)))
            return st;
    o->cols.atom_mode = (mp_atom_cols_mode)atom_mode;
    if ((s = mp_kv_get(kv, "train.spectra-activation")))
        o->spectra_act = !strcmp(s, "softplus") ? MP_SPECTRA_SOFTPLUS : MP_SPECTRA_EXP;
    if ((s = mp_kv_get(kv, "train.activation")) && (st = mp_act_parse(s, &o->activation)))
        return mp_error_set(MP_ERR_FORMAT, "%s: train.activation '%s' unknown", mp_kv_origin(kv), s);
    return MP_OK;
}

static mp_status opts_from_kv(const mp_kv *kv, mp_train_opts *o)
{
    const char *s;
    long long seed;
    double *sizes = NULL;
    size_t n_sizes = 0;
    mp_status st;
    if ((st = mp_kv_get_str(kv, "run.data", &s)))
        return st;
    o->data_path = s;
    if ((st = mp_kv_get_str(kv, "opt.smiles-column", &s)))
        return st;
    o->columns.smiles_column = null_if_empty(s);
    if ((st = mp_kv_get_str(kv, "opt.target-columns", &s)))
        return st;
    o->columns.target_columns = null_if_empty(s);
    if ((st = mp_kv_get_str(kv, "opt.ignore-columns", &s)))
        return st;
    o->columns.ignore_columns = null_if_empty(s);
    if ((st = mp_kv_get_str(kv, "opt.task", &s)))
        return st;
    mp_task_type task;
    if (!strcmp(s, "auto"))
        o->task = -1;
    else if ((st = mp_task_type_parse(s, &task)) == MP_OK)
        o->task = (int)task;
    else
        return st;
    if ((st = mp_kv_get_str(kv, "opt.metric", &s)))
        return st;
    o->metric = strcmp(s, "default") ? s : NULL;
    if ((st = mp_kv_get_str(kv, "opt.model", &s)))
        return st;
    o->model = !strcmp(s, "ffn") ? MP_MODEL_FFN : MP_MODEL_DMPNN;
    if ((st = mp_kv_get_str(kv, "opt.features", &s)) || (st = mp_feature_set_parse(s, &o->features)) ||
        (st = mp_kv_get_str(kv, "opt.atom-layout", &s)) || (st = mp_atom_layout_parse(s, &o->layout)) ||
        (st = mp_kv_get_str(kv, "opt.split", &s)) || (st = mp_split_type_parse(s, &o->split.type)) ||
        (st = get_int(kv, "opt.folds", &o->split.n_folds)) ||
        (st = mp_kv_get_int(kv, "opt.seed", 0, INT64_MAX, &seed)) ||
        (st = get_int(kv, "opt.epochs", &o->epochs)) ||
        (st = get_int(kv, "opt.batch-size", &o->batch_size)) ||
        (st = mp_kv_get_double(kv, "opt.warmup-epochs", &o->warmup_epochs)) ||
        (st = mp_kv_get_double(kv, "opt.init-lr", &o->init_lr)) ||
        (st = mp_kv_get_double(kv, "opt.max-lr", &o->max_lr)) ||
        (st = mp_kv_get_double(kv, "opt.final-lr", &o->final_lr)) ||
        (st = get_int(kv, "opt.hidden", &o->hidden)) ||
        (st = get_int(kv, "opt.depth", &o->depth)) ||
        (st = get_int(kv, "opt.ffn-layers", &o->ffn_layers)) ||
        (st = get_int(kv, "opt.ffn-hidden", &o->ffn_hidden)) ||
        (st = mp_kv_get_double(kv, "opt.dropout", &o->dropout)) ||
        (st = mp_kv_get_str(kv, "opt.aggregation", &s)))
        return st;
    o->seed = (uint64_t)seed;
    o->aggregation = !strcmp(s, "sum") ? MP_AGG_SUM : !strcmp(s, "norm") ? MP_AGG_NORM
                     : !strcmp(s, "attentive") ? MP_AGG_ATTENTIVE : MP_AGG_MEAN;
    if ((st = get_int(kv, "opt.ensemble-size", &o->ensemble_size)) ||
        (st = mp_kv_get_str(kv, "opt.backend", &s)))
        return st;
    o->backend = s;
    if ((st = get_int(kv, "opt.resident", &o->resident)) ||
        (st = get_int(kv, "opt.graph", &o->graph)) ||
        (st = get_int(kv, "opt.slot-classes", &o->slot_classes)) ||
        (st = mp_kv_get_doubles(kv, "opt.split-sizes", &sizes, &n_sizes)))
        return st;
    if (n_sizes == 3)
        memcpy(o->split.sizes, sizes, sizeof o->split.sizes);
    mp_free(sizes);
    if (n_sizes != 3)
        return mp_error_set(MP_ERR_FORMAT, "%s: opt.split-sizes holds %zu values",
                            mp_kv_origin(kv), n_sizes);
    o->gpu_share = 0;   /* the key only past 1 */
    if (mp_kv_get(kv, "opt.gpu-share") && (st = get_int(kv, "opt.gpu-share", &o->gpu_share)))
        return st;
    return more_from_kv(kv, o);
}

mp_status mp_train_opts_from_checkpoint(const char *dir, mp_train_opts *o, mp_kv **keep)
{
    *keep = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MP_CHECKPOINT_FILE);
    mp_modelfile *mf = NULL;
    mp_status st = mp_modelfile_read(&mf, path);
    if (st)
        return st;
    const char *fmt = mp_kv_get(mf->header, "format");
    if (!fmt || strcmp(fmt, "molprop-checkpoint") != 0)
        st = mp_error_set(MP_ERR_FORMAT, "%s: not a molprop checkpoint", path);
    mp_train_opts t = *o;
    if (st == MP_OK)
        st = opts_from_kv(mf->header, &t);
    if (st == MP_OK) {
        t.resume = dir;
        *o = t;
        *keep = mf->header;   /* the strings of *o point into it */
        mf->header = NULL;
    }
    mp_modelfile_free(mf);
    return st;
}

/* CRC-32 of what the run learns from: every row's SMILES (with its NUL)
 * and labels (their bytes: NaN for a missing one), and the task names. */
static uint32_t data_crc(const mp_dataset *d)
{
    uint32_t crc = 0;
    for (size_t t = 0; t < d->n_tasks; t++)
        crc = mp_crc32(crc, d->task_names[t], strlen(d->task_names[t]) + 1);
    for (size_t i = 0; i < d->n_rows; i++) {
        crc = mp_crc32(crc, d->smiles[i], strlen(d->smiles[i]) + 1);
        crc = mp_crc32(crc, d->targets + i * d->n_tasks, sizeof(double) * d->n_tasks);
    }
    return crc;
}

mp_status mp_train_identity_data(const mp_dataset *d, mp_task_type task, mp_metric metric,
                                 const mp_scaler *target_scaler,
                                 const mp_scaler *feature_scaler, mp_kv *kv)
{
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", (unsigned)data_crc(d));
    mp_status st;
    if ((st = mp_kv_set_int(kv, "data.rows", (long long)d->n_rows)) ||
        (st = mp_kv_set(kv, "data.crc32", crc)) ||
        (st = mp_kv_set(kv, "data.task", mp_task_type_name(task))) ||
        (st = mp_kv_set(kv, "data.metric", mp_metric_name(metric))))
        return st;
    if (target_scaler && target_scaler->n_cols &&
        (st = mp_kv_set_scaler(kv, "data.target_scaler", target_scaler)))
        return st;
    if (feature_scaler && feature_scaler->n_cols &&
        (st = mp_kv_set_scaler(kv, "data.feature_scaler", feature_scaler)))
        return st;
    return MP_OK;
}

mp_status mp_train_identity_split(const mp_split *saved, const mp_split *now, const char *path)
{
    static const char *const set[3] = { "training", "validation", "test" };
    for (int s = 0; s < 3; s++)
        if (saved->n[s] != now->n[s] ||
            (now->n[s] && memcmp(saved->rows[s], now->rows[s], sizeof(size_t) * now->n[s])))
            return mp_error_set(MP_ERR_ARG, "cannot resume from %s: its %s set (%zu rows) is "
                                "not the one this run made (%zu rows)", path, set[s],
                                saved->n[s], now->n[s]);
    return MP_OK;
}
