/*
 * resume.h - what a training run is, as header keys, so that a checkpoint
 * (checkpoint.h) can tell whether the run resuming from it is the same one:
 * "opt.*" for every option that decides the result, compared before any
 * work; "data.*" for what the run made of its data (rows, a CRC of the
 * SMILES and labels, task type, metric, scalers), compared once the data
 * are read, featurized, split and scaled again.  Internal to src/run.
 */
#ifndef MP_RESUME_H
#define MP_RESUME_H

#include "run/modelfile.h"
#include "run/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The options of o that decide its result (not threads, quiet, profile,
 * save_dir, checkpoint_every, resume), as "opt.<name>" keys named like the
 * command line's flags ("opt.epochs", "opt.batch-size", ...), and the data
 * file's path as "run.data" (not compared: the data's CRC is). */
mp_status mp_train_identity_opts(const mp_train_opts *o, mp_kv *kv);

/* "data.*": rows, CRC-32 of every SMILES and label row, task names, task
 * type and metric chosen, the scalers (exact doubles). */
mp_status mp_train_identity_data(const mp_dataset *d, mp_task_type task, mp_metric metric,
                                 const mp_scaler *target_scaler,
                                 const mp_scaler *feature_scaler, mp_kv *kv);

/* The split of a checkpoint is the split this run made (the same data and
 * seed give the same one): MP_ERR_ARG naming `path` otherwise. */
mp_status mp_train_identity_split(const mp_split *saved, const mp_split *now, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* MP_RESUME_H */
