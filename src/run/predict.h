/*
 * predict.h - prediction and evaluation with a saved model: the library side
 * of `molprop predict` and `molprop eval`.  Prediction streams: the input is
 * read, featurized and predicted a chunk at a time, so a file of any length
 * needs memory for one chunk.
 */
#ifndef MP_PREDICT_H
#define MP_PREDICT_H

#include "core/core.h"
#include "data/dataset.h"
#include "data/metrics.h"
#include "run/ensemble.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char    *model_path;
    const char    *data_path;
    const char    *out_path;
    mp_column_spec columns;       /* smiles_column only                          */
    int            uncertainty;   /* add <task>_std columns (ensemble spread)     */
    const char    *backend;       /* "cpu" (default), "cuda[:...]"                */
    int            threads;       /* 0: default                                   */
    int32_t        chunk_rows;    /* 0: 8192 (a device backend: 65536)            */
    int            quiet;
    const char    *atom_path;     /* user atom / bond columns for a model trained  *
                                   * with them (columns.h; NULL: none)             */
    const char    *bond_path;
} mp_predict_opts;

typedef struct {
    size_t n_rows, n_invalid;
    double seconds, mols_per_second;
} mp_predict_stats;

/*
 * Writes out_path: the input's SMILES column, then one column per task (and
 * <task>_std per task with uncertainty), one row per input row in order.  A
 * row whose SMILES is invalid keeps its place with empty predictions and is
 * reported on stderr with its line.  The output is written atomically: on
 * any failure nothing is left at out_path.
 */
mp_status mp_predict_file(const mp_predict_opts *o, mp_predict_stats *stats);

typedef struct {
    size_t    n_tasks, n_rows, n_invalid;
    int       n_metrics;
    mp_metric metrics[8];
    double   *per_task;          /* n_metrics x n_tasks                          */
    double    mean[8];
} mp_eval_result;

/* Metrics of a saved model on a labelled file: the columns named like the
 * model's tasks are the targets.  metric NULL: every metric of the task type. */
mp_status mp_eval_file(const char *model_path, const char *data_path,
                       const mp_column_spec *columns, const char *metric,
                       const char *backend, int threads, mp_eval_result *res);
void      mp_eval_result_free(mp_eval_result *r);

#ifdef __cplusplus
}
#endif
#endif /* MP_PREDICT_H */
