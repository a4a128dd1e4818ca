/*
 * train_head.c - issue 11's part of a training run (train_head.h): the
 * model configuration of the task type, loss and layer options, the class
 * labels of a multiclass task, the per-task loss weights, and the two lists
 * of a class-balanced epoch.  Everything here is checked against the data
 * with messages naming the file, line and column.
 */
#include "run/train_head.h"

#include "data/spectra.h"
#include "models/heads.h"
#include "run/resident.h"   /* MP_RESIDENT_MAX_CLASSES */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The two enums list the task types in one order (molprop.h, model.h). */
_Static_assert((int)MP_TASK_MULTICLASS_DIRICHLET == (int)MP_MODEL_MULTICLASS_DIRICHLET &&
               (int)MP_TASK_REGRESSION_MVE == (int)MP_MODEL_REGRESSION_MVE &&
               (int)MP_TASK_CLASSIFICATION == (int)MP_MODEL_CLASSIFICATION &&
               (int)MP_TASK_SPECTRAL == (int)MP_MODEL_SPECTRAL,
               "mp_task_type and mp_model_task differ");

int mp_train_loss_is_bounded(const char *loss)
{
    return loss && strncmp(loss, "bounded", 7) == 0;
}

/* Classes of a multiclass task: o->n_classes, else the largest label + 1;
 * every label an integer 0 .. C-1. */
static mp_status multiclass_labels(const mp_train_opts *o, const mp_dataset *d, int *classes)
{
    size_t n = d->n_rows * d->n_tasks;
    double top = -1;
    for (size_t i = 0; i < n; i++) {
        double v = d->targets[i];
        if (isnan(v))
            continue;
        if (!(v >= 0 && v == floor(v) && v < MP_LOSS_MAX_CLASSES))
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': class label %g is not "
                                "an integer 0 .. %d", o->data_path, d->line[i / d->n_tasks],
                                d->task_names[i % d->n_tasks], v, MP_LOSS_MAX_CLASSES - 1);
        top = v > top ? v : top;
    }
    int c = o->n_classes > 0 ? o->n_classes : (int)top + 1;
    if (c < 2)
        return mp_error_set(MP_ERR_ARG, "%s: a multiclass task needs at least 2 classes (give "
                            "--multiclass-num-classes)", o->data_path);
    for (size_t i = 0; i < n; i++)
        if (!isnan(d->targets[i]) && d->targets[i] >= c)
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': class label %g, but "
                                "--multiclass-num-classes is %d (labels 0 .. %d)", o->data_path,
                                d->line[i / d->n_tasks], d->task_names[i % d->n_tasks],
                                d->targets[i], c, c - 1);
    *classes = c;
    return MP_OK;
}

mp_status mp_train_head_config(const mp_train_opts *o, const mp_dataset *d, mp_task_type task,
                               mp_model_config *cfg)
{
    mp_model_task t = (mp_model_task)task;
    mp_status st;
    cfg->task = t;
    if (o->loss && (st = mp_loss_parse(o->loss, t, &cfg->loss)))
        return st;
    if (d->ineq && !mp_train_loss_is_bounded(o->loss))
        return mp_error_set(MP_ERR_ARG, "%s: inequality labels need a bounded loss", o->data_path);
    cfg->n_classes = 0;
    if (mp_head_is_multiclass(t) && (st = multiclass_labels(o, d, &cfg->n_classes)))
        return st;
    if (!mp_head_is_multiclass(t) && o->n_classes > 0)
        return mp_error_set(MP_ERR_ARG, "--multiclass-num-classes is for the multiclass task "
                            "types (this one is %s)", mp_task_type_name(task));
    cfg->loss_lambda = o->loss_lambda;
    cfg->loss_eps = o->loss_eps;
    cfg->loss_alpha = o->quantile_alpha;
    cfg->spectra_act = o->spectra_act;
    cfg->spectra_floor = o->spectra_floor;
    cfg->activation = o->activation;
    cfg->batch_norm = o->batch_norm;
    cfg->atom_messages = o->atom_messages;
    cfg->undirected = o->undirected;
    if (o->model == MP_MODEL_FFN && (o->batch_norm || o->atom_messages || o->undirected ||
                                     o->aggregation == MP_AGG_ATTENTIVE))
        return mp_error_set(MP_ERR_ARG, "--batch-norm, --atom-messages, --undirected and "
                            "--aggregation attentive are D-MPNN options (not --model ffn)");
    return MP_OK;
}

mp_status mp_train_task_weights(const mp_train_opts *o, const mp_dataset *d, float **out)
{
    *out = NULL;
    if (!o->task_weights)
        return MP_OK;
    float *w = mp_malloc(sizeof(float) * (d->n_tasks + 1));
    if (!w)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    const char *p = o->task_weights;
    size_t k = 0;
    for (;;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= 0 && isfinite(v)) || k >= d->n_tasks ||
            (*end != ',' && *end != '\0')) {
            mp_free(w);
            return mp_error_set(MP_ERR_ARG, "--task-weights '%s': %zu finite weights >= 0, one "
                                "per task, comma-separated", o->task_weights, d->n_tasks);
        }
        w[k++] = (float)v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    if (k != d->n_tasks) {
        mp_free(w);
        return mp_error_set(MP_ERR_ARG, "--task-weights: %zu weights for %zu tasks", k,
                            d->n_tasks);
    }
    *out = w;
    return MP_OK;
}

mp_status mp_train_class_lists(const mp_dataset *d, const int32_t *train, int32_t n,
                               int32_t **pos, int32_t *n_pos, int32_t **neg, int32_t *n_neg)
{
    *pos = mp_malloc(sizeof(int32_t) * (size_t)(n + 1));
    *neg = mp_malloc(sizeof(int32_t) * (size_t)(n + 1));
    *n_pos = *n_neg = 0;
    if (!*pos || !*neg)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        const double *y = d->targets + (size_t)train[i] * d->n_tasks;
        int any = 0;
        for (size_t t = 0; t < d->n_tasks; t++)
            any |= y[t] == 1.0;
        if (any)
            (*pos)[(*n_pos)++] = train[i];
        else
            (*neg)[(*n_neg)++] = train[i];
    }
    if (*n_pos == 0 || *n_neg == 0)
        return mp_error_set(MP_ERR_ARG, "%s: --class-balance needs training molecules of both "
                            "classes (%d with a label 1, %d without)", d->path, *n_pos, *n_neg);
    return MP_OK;
}

/* (trainer.h) The featurization a run of these options needs. */
mp_featurize_opts mp_train_featurize_opts(const mp_train_opts *o)
{
    mp_featurize_opts fo = { .layout = o->layout,
                             .scaffolds = o->split.type == MP_SPLIT_SCAFFOLD_BALANCED,
                             .n_threads = o->threads };
    for (int v = 0; v < MP_N_VECS; v++)
        if (o->features & (1u << v))
            mp_vec_request((mp_vec)v, &fo);
    return fo;
}

mp_status mp_train_check_opts(const mp_train_opts *o)
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
    if (o->slot_classes < 1 || o->slot_classes > MP_RESIDENT_MAX_CLASSES)
        return mp_error_set(MP_ERR_ARG, "slot classes must be 1 to %d, got %d",
                            MP_RESIDENT_MAX_CLASSES, o->slot_classes);
    if (o->model == MP_MODEL_FFN && o->features == 0 && !o->features_path)
        return mp_error_set(MP_ERR_ARG, "--model ffn trains on molecule features only: "
                                        "give --features (morgan, morgan-count, rdkit2d, "
                                        "rdkit2d-normalized, ...) or --features-path");
    if (o->features & ~(unsigned)MP_FEAT_NAMED)
        return mp_error_set(MP_ERR_ARG, "unknown feature sets 0x%x", o->features);
    if (o->features_scaling < MP_FSCALE_AUTO || o->features_scaling > MP_FSCALE_ON)
        return mp_error_set(MP_ERR_ARG, "unknown feature scaling %d", o->features_scaling);
    if (o->no_features_scaling && o->features_scaling == MP_FSCALE_ON)
        return mp_error_set(MP_ERR_ARG, "--no-features-scaling contradicts "
                                        "--features-scaling on");
    if (o->checkpoint_every < 0)
        return mp_error_set(MP_ERR_ARG, "checkpoint-every must be at least 0, got %d",
                            o->checkpoint_every);
    if (o->checkpoint_every > 0 && !o->save_dir && !o->resume)
        return mp_error_set(MP_ERR_ARG, "checkpoints are written into the save directory: "
                                        "give --save-dir");
    if (o->stop_after < 0 || o->stop_after > o->epochs)
        return mp_error_set(MP_ERR_ARG, "stop-after must be 0 (off) to the epochs (%d), got %d",
                            o->epochs, o->stop_after);
    if (o->stop_after > 0 && !o->save_dir && !o->resume)
        return mp_error_set(MP_ERR_ARG, "--stop-after keeps the run's checkpoint in the save "
                                        "directory: give --save-dir");
    if (o->resume && o->save_dir && strcmp(o->resume, o->save_dir) != 0)
        return mp_error_set(MP_ERR_ARG, "--resume %s continues the run saved there: "
                            "--save-dir %s must be the same directory (or left out)", o->resume,
                            o->save_dir);
    return MP_OK;
}

/* ===================================================================== */
/* Spectra                                                                */
/* ===================================================================== */

mp_status mp_train_spectral_targets(const mp_train_opts *o, mp_dataset *d, mp_task_type task,
                                    int given)
{
    if (o->spectra_phase_mask)
        return mp_error_set(MP_ERR_ARG, "--spectra-phase-mask-path %s: Chemprop v1's phase "
                            "masks (with phase features) are not supported; leave the masked "
                            "positions' cells empty instead", o->spectra_phase_mask);
    if (task != MP_TASK_SPECTRAL) {
        if (o->spectra_act != MP_SPECTRA_EXP || o->spectra_floor != MP_SPECTRA_FLOOR_DEFAULT)
            return mp_error_set(MP_ERR_ARG, "--spectra-activation and --spectra-target-floor "
                                "are for the spectral task (this one is %s)",
                                mp_task_type_name(task));
        return MP_OK;
    }
    if (given)
        return mp_error_set(MP_ERR_ARG, "%s: a spectral task trains from its data file (not "
                            "from data given in memory)", o->data_path);
    if (d->ineq)
        return mp_error_set(MP_ERR_ARG, "%s: inequality labels in a spectrum", o->data_path);
    return mp_spectra_normalize(d->targets, d->n_rows, d->n_tasks, o->spectra_floor,
                                o->data_path, d->line, (const char *const *)d->task_names);
}
