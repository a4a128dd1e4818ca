/*
 * resume.c - a training run's identity as header keys (resume.h), written
 * into each checkpoint and compared when a run resumes from one.
 */
#include "run/resume.h"

#include <string.h>

static const char *str_or(const char *s, const char *dflt) { return s ? s : dflt; }

mp_status mp_train_identity_opts(const mp_train_opts *o, mp_kv *kv)
{
    char feats[128];
    mp_feature_set_name(o->features, feats, sizeof feats);
    static const char *const agg[3] = { "mean", "sum", "norm" };
    int a = o->aggregation >= 0 && o->aggregation <= 2 ? (int)o->aggregation : 0;
    mp_status st;
    if ((st = mp_kv_set(kv, "opt.smiles-column", str_or(o->columns.smiles_column, ""))) ||
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
    return MP_OK;
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
