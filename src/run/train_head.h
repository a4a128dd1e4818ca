/*
 * train_head.h - issue 11's part of a training run (trainer.c calls these):
 * the head and layers of mp_train_opts into a model configuration, the
 * per-task loss weights, and Chemprop's class-balanced epochs' two lists;
 * train_head.c also holds trainer.h's mp_train_featurize_opts and the
 * options' checks.
 */
#ifndef MP_TRAIN_HEAD_H
#define MP_TRAIN_HEAD_H

#include "data/dataset.h"
#include "run/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 for "bounded-mse", "bounded-mae", "bounded-rmse" (and v1's
 * "bounded_*"): the losses that read inequality labels. */
int mp_train_loss_is_bounded(const char *loss);

/*
 * cfg's task type (task), loss (o->loss parsed for the task, MP_ERR_ARG
 * naming the losses that fit), classes (multiclass: o->n_classes or the
 * largest label + 1; a label that is not an integer 0 .. C-1 is
 * MP_ERR_FORMAT naming file, line and column), loss parameters and layer
 * options.  MP_ERR_ARG for a D-MPNN option on an FFN model, inequality
 * labels without a bounded loss.
 */
mp_status mp_train_head_config(const mp_train_opts *o, const mp_dataset *d, mp_task_type task,
                               mp_model_config *cfg);

/* o->task_weights ("1,0.5") into *out [n_tasks] (mp_free), NULL when unset;
 * MP_ERR_ARG for a count other than n_tasks or a weight < 0. */
mp_status mp_train_task_weights(const mp_train_opts *o, const mp_dataset *d, float **out);

/*
 * A spectral task's targets (d->targets, in place): each row a spectrum,
 * made positive and normalized as Chemprop does (data/spectra.h; a
 * negative or infinite value, or a row without a value, refused by file
 * and line).  Refuses the phase mask (not supported), the spectra options
 * on another task type, and a spectral task on data given in memory
 * (given: 1).
 */
mp_status mp_train_spectral_targets(const mp_train_opts *o, mp_dataset *d, mp_task_type task,
                                    int given);

/* The training rows with a label 1 in some task (*pos) and the others (*neg),
 * both mp_malloc'd (freed by the caller, also after a failure); MP_ERR_ARG
 * when either list is empty. */
mp_status mp_train_class_lists(const mp_dataset *d, const int32_t *train, int32_t n,
                               int32_t **pos, int32_t *n_pos, int32_t **neg, int32_t *n_neg);

/* The options' own checks, before any work (MP_ERR_ARG naming the option). */
mp_status mp_train_check_opts(const mp_train_opts *o);

#ifdef __cplusplus
}
#endif
#endif /* MP_TRAIN_HEAD_H */
