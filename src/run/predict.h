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

/* --shard I/N: this process predicts the I-th of N byte ranges of the
 * input (run/shard.h); count 0: the whole input. */
typedef struct {
    int index, count;
} mp_shard_spec;

typedef struct {
    const char    *model_path;
    const char    *data_path;
    const char    *out_path;
    mp_column_spec columns;       /* smiles_column only                          */
    const char    *features_path; /* the extra features of a model trained with  *
                                   * them (featfile.h): one row per data row      */
    int            uncertainty;   /* mp_unc_method (uncertainty.h); 0: none      */
    int            dropout_samples;  /* dropout: passes per member (10)           */
    double         dropout_p;     /* dropout: probability of every layer (0.1)    */
    uint64_t       dropout_seed;  /* dropout: the keys' seed (0)                  */
    int            calibrate;     /* mp_calibrator (calibrate.h); 0: none         */
    const char    *calibration_data;  /* labelled CSV the calibrator is fitted on */
    const char    *calibration_atom_path;  /* its user atom / bond columns (a  *
                                            * model with columns; NULL: none)  */
    const char    *calibration_bond_path;
    double         alpha;         /* intervals' error rate (0.1)                  */
    const char    *backend;       /* "cpu" (default), "cuda[:...]"                */
    int            threads;       /* 0: default                                   */
    int32_t        chunk_rows;    /* rows read and featurized at a time, rounded   *
                                   * up to whole batches; 0: 8192                  */
    int            quiet;
    const char    *atom_path;     /* user atom / bond columns for a model trained  *
                                   * with them (columns.h; NULL: none)             */
    const char    *bond_path;
    mp_shard_spec  shard;         /* writes the part <out>.shard-I-of-N (shard.h) */
} mp_predict_opts;

typedef struct {
    size_t n_rows, n_invalid;
    double seconds, mols_per_second;
} mp_predict_stats;

/*
 * Writes out_path: the input's SMILES column, then one column per task,
 * then with an uncertainty method <task>_unc per task, and with an interval
 * (a quantile model, or the zelikman / conformal calibrators)
 * <task>_lower and <task>_upper per task, then any set columns
 * (mp_unc_run_write_header); one row per input row in order.
 * The calibrators are fitted on calibration_data first (predict_unc.c;
 * platt and isotonic replace the probabilities themselves).  A
 * row whose SMILES is invalid keeps its place with empty predictions and is
 * reported on stderr with its line.  The output is written atomically: on
 * any failure nothing is left at out_path.
 */
mp_status mp_predict_file(const mp_predict_opts *o, mp_predict_stats *stats);

/* ===================================================================== */
/* The uncertainty side (predict_unc.c)                                   */
/* ===================================================================== */

/* One chunk's predictions with the chosen uncertainty: mean and unc
 * (n x n_tasks; unc may be NULL without a method), lower / upper (NULL
 * unless the method makes intervals), vals (may be NULL) every value of the
 * model's head, the member mean (n x n_tasks x mp_ensemble_n_values: heads.h;
 * for a plain head the mean again); row0 = the chunk's first row in the
 * whole input (dropout keys).  The head methods (mve, evidential, quantile,
 * dirichlet) read their head member by member (uncertainty.h). */
typedef struct {
    const mp_predict_opts *o;
    mp_ensemble           *e;
    void                  *cal;    /* n_tasks mp_calibration, or for a multiclass
                                    * model mp_mc_calibration, or under
                                    * conformal-multilabel one mp_ml_calibration
                                    * for all the tasks (calibrate.h) */
    int                    unc_cols, interval_cols;   /* what the output has */
    int                    class_unc_cols, set_cols;  /* multiclass: _class<k>_unc,
                                                       * _class<k>_in_set       */
    int                    ml_set_cols;  /* conformal-multilabel: <task>_in_set,
                                          * <task>_out_set                      */
    /* the last chunk's (owned; mp_unc_run_write_row reads them): */
    double                *class_unc;   /* n x tasks x classes: the variances */
    double                *in_set;      /* n x tasks x classes: 1 / 0 (a binary
                                         * model's: n x tasks)                 */
    double                *out_set;     /* conformal-multilabel: n x tasks     */
    double                *member_unc;  /* members x n x tasks (mve-weighting) */
    size_t                 cap;         /* rows they hold                     */
} mp_unc_run;

/* Checks that the method and the calibrator fit the model (MP_ERR_ARG
 * saying why not), turns dropout on, fits the calibrators on
 * o->calibration_data.  mp_unc_run_free undoes it. */
mp_status mp_unc_run_open(mp_unc_run *u, const mp_predict_opts *o, mp_ensemble *e);
void      mp_unc_run_free(mp_unc_run *u);
mp_status mp_unc_run_predict(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                             int32_t n, int32_t batch_size, int64_t row0, double *mean,
                             double *unc, double *lower, double *upper, double *vals);
/* The set columns, after the _unc / _lower / _upper ones: a multiclass
 * model's per-class <task>_class<k>_unc (ensemble, dropout), then
 * <task>_class<k>_in_set (the conformal calibrators' prediction sets);
 * under conformal-multilabel <task>_in_set for every task, then
 * <task>_out_set (1 / 0: task k is in the in-set / the out-set); the header
 * (each name preceded by a comma) and row i of the last chunk.  Nothing
 * otherwise. */
void      mp_unc_run_write_header(const mp_unc_run *u, FILE *fp);
void      mp_unc_run_write_row(const mp_unc_run *u, FILE *fp, size_t i);

/*
 * `molprop eval --preds P --data T --uncertainty-metrics nll,...`
 * (unc_eval.c): the metrics of the prediction file P (a task column,
 * <task>_unc, and for coverage <task>_lower / <task>_upper) against the
 * labelled file T (rows in the same order, SMILES equal); for every task of
 * T that P predicts.  Binary tasks (labels 0/1 only) get nll of the
 * predicted probability, and with conformal-multilabel's sets (columns
 * <task>_in_set, <task>_out_set) coverage: per task the share of its
 * labelled molecules whose label agrees with its sets, and as the mean
 * the share of molecules with C_in <= Y <= C_out over all their labelled
 * tasks at once (mp_unc_coverage_multilabel), not the tasks' mean.
 */
typedef struct {
    size_t  n_tasks, n_rows;
    int     n_metrics;
    int     metrics[8];            /* mp_unc_metric                           */
    double *per_task;              /* n_metrics x n_tasks                     */
    double  mean[8];               /* over the tasks with a score (multilabel
                                    * coverage: over the molecules, jointly)  */
} mp_unc_eval_result;
mp_status mp_unc_eval_file(const char *preds_path, const char *truth_path,
                           const char *smiles_column, const char *metrics,
                           mp_unc_eval_result *res);
void      mp_unc_eval_result_free(mp_unc_eval_result *r);

typedef struct {
    size_t    n_tasks, n_rows, n_invalid;
    int       n_metrics;
    mp_metric metrics[8];
    double   *per_task;          /* n_metrics x n_tasks                          */
    double    mean[8];
} mp_eval_result;

/* Metrics of a saved model on a labelled file: the columns named like the
 * model's tasks are the targets.  metric NULL: every metric of the task type.
 * features_path: the file's extra features (one row per data row) for a
 * model trained with --features-path, else NULL; atom_path / bond_path: the
 * file's user atom / bond columns (columns.h) for a model trained with
 * them, else NULL. */
mp_status mp_eval_file(const char *model_path, const char *data_path,
                       const mp_column_spec *columns, const char *metric,
                       const char *features_path, const char *atom_path,
                       const char *bond_path, const char *backend, int threads,
                       mp_eval_result *res);
void      mp_eval_result_free(mp_eval_result *r);

#ifdef __cplusplus
}
#endif
#endif /* MP_PREDICT_H */
