/*
 * metrics.h - the scores a trained model is judged by, as Chemprop v1 computes
 * them (train/metrics.py, train/evaluate.py, which call scikit-learn), and the
 * metrics.json report a training run leaves behind.
 *
 * Flow: the trainer predicts a validation or test set, inverse-scales the
 * regression outputs (scaler.h) or applies the sigmoid (classification), then
 * calls mp_metric_tasks() once per metric.  Each task drops its rows whose
 * target is NaN (a missing label) and is scored alone; the summary is the
 * arithmetic mean over the tasks that could be scored.
 *
 *     double per_task[T], mean;
 *     size_t skipped;
 *     mp_metric m;
 *     if (mp_metric_parse("rmse", &m) != MP_OK) ...
 *     mp_metric_tasks(m, 0, pred, target, n, T, per_task, NULL, &mean, &skipped);
 */
#ifndef MP_METRICS_H
#define MP_METRICS_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Metrics                                                                */
/* ===================================================================== */

typedef enum {
    MP_METRIC_RMSE,      /* "rmse":     sqrt(mean((t - p)^2))                        */
    MP_METRIC_MAE,       /* "mae":      mean(|t - p|)                                */
    MP_METRIC_MSE,       /* "mse":      mean((t - p)^2)                              */
    MP_METRIC_R2,        /* "r2":       sklearn r2_score                             */
    MP_METRIC_AUC,       /* "auc":      sklearn roc_auc_score (ROC-AUC)              */
    MP_METRIC_PRC_AUC,   /* "prc-auc":  sklearn auc(recall, precision), trapezoid    */
    MP_METRIC_ACCURACY,  /* "accuracy": fraction right with p > 0.5 read as 1        */
    MP_METRIC_SID,       /* "sid":      spectral information divergence (spectra.h)  */
    MP_METRIC_WASSERSTEIN, /* "wasserstein": earth mover's distance (spectra.h)      */
    MP_METRIC_COUNT
} mp_metric;

/*
 * Parses a metric name, case-insensitively: the Chemprop names above, plus
 * "roc-auc"/"roc_auc" for auc and "prc_auc"/"pr-auc" for prc-auc.  An unknown
 * name gives MP_ERR_ARG with a message that lists the valid ones.
 */
mp_status   mp_metric_parse(const char *name, mp_metric *out);
/* The canonical (Chemprop) name: "rmse", "prc-auc", ...; "?" when out of range. */
const char *mp_metric_name(mp_metric m);
/* 1 for auc, prc-auc, accuracy, r2; 0 for the error metrics. */
/* 1 for the spectrum metrics (sid, wasserstein): they score whole rows, the
 * tasks being a spectrum's positions (mp_metric_tasks; mp_metric_compute
 * scores its one column as one spectrum). */
int         mp_metric_is_spectral(mp_metric m);
int         mp_metric_higher_is_better(mp_metric m);
/* 1 for the metrics that need 0/1 labels and probabilities (auc, prc-auc,
 * accuracy). */
int         mp_metric_is_classification(mp_metric m);
/* 1 where Chemprop v1.6 averages tasks with a geometric mean (rmse, mae, mse). */
int         mp_metric_is_scale_dependent(mp_metric m);

/* Why a task got no score (NaN).  MP_SCORE_OK: it has one. */
typedef enum {
    MP_SCORE_OK = 0,
    MP_SCORE_NO_LABELS,      /* no row has a target for this task               */
    MP_SCORE_ONE_CLASS,      /* classification: the targets are all 0 or all 1  */
    MP_SCORE_CONSTANT_PRED,  /* classification: predictions all 0 or all 1 (Chemprop skips these) */
    MP_SCORE_NOT_BINARY,     /* a classification metric met a target not 0 or 1 */
    MP_SCORE_NAN_PRED,       /* a prediction for a labelled row is NaN          */
    MP_SCORE_TOO_FEW         /* r2 with fewer than two labelled rows            */
} mp_score_status;

/* A short English phrase for a warning: "targets all 0 or all 1", ... */
const char *mp_score_status_text(mp_score_status s);

/*
 * Scores one task: row i has prediction pred[i*pred_stride] and target
 * target[i*target_stride] (strides in elements, >= 1), i < n.  Rows with a
 * NaN target are dropped.  `classification` is the task type: when set,
 * Chemprop v1's rules for classification datasets apply to any metric (a task
 * whose labels are all 0 or all 1, or whose predictions are all exactly 0 or
 * all exactly 1, gets NaN).  Classification metrics follow those rules
 * whatever the flag says, and refuse targets other than 0/1.
 *
 * *value gets the score or NaN; *why (may be NULL) says why it is NaN.  Fails
 * only with MP_ERR_NOMEM (the ranking metrics sort a copy) or MP_ERR_ARG
 * (unknown metric, zero stride).
 */
mp_status mp_metric_compute(mp_metric m, int classification,
                            const double *pred, size_t pred_stride,
                            const double *target, size_t target_stride, size_t n,
                            double *value, mp_score_status *why);

/*
 * Scores every task of a row-major n_rows x n_tasks prediction/target pair.
 * per_task[n_tasks] gets each task's score (NaN when skipped); why[n_tasks]
 * (may be NULL) the reasons; *mean the arithmetic mean over the tasks that
 * have a score (NaN when none has); *n_skipped (may be NULL) the number of
 * NaN tasks.  The caller prints the warnings (see mp_score_status_text).
 */
mp_status mp_metric_tasks(mp_metric m, int classification,
                          const double *pred, const double *target,
                          size_t n_rows, size_t n_tasks,
                          double *per_task, mp_score_status *why,
                          double *mean, size_t *n_skipped);

/*
 * A one-line warning about the skipped tasks, for the caller to print, e.g.
 *   "auc: 2 of 12 tasks not scored: NR-AR (targets all 0 or all 1), SR-p53 (no labelled rows)"
 * Written into buf (cut with "..." when it does not fit); task_names may be
 * NULL ("task 3").  Returns the number of skipped tasks (0: buf is "").
 */
size_t mp_metric_skip_message(char *buf, size_t buf_len, mp_metric m,
                              const char *const *task_names, const mp_score_status *why,
                              size_t n_tasks);

/* How per-task scores become one number. */
typedef enum {
    MP_AVERAGE_NANMEAN,  /* arithmetic mean over non-NaN tasks: Chemprop up to v1.5.1,
                            v1.7 with ignore_nan_metrics, v2's final report */
    MP_AVERAGE_V1_6      /* Chemprop v1.5.2-v1.6.x multitask_mean: geometric mean for
                            rmse/mae/mse, arithmetic otherwise; a NaN task gives NaN */
} mp_average;

/* Averages per_task[n_tasks] for metric m; NaN when nothing is left. */
double mp_metric_average(mp_metric m, const double *per_task, size_t n_tasks,
                         mp_average how);

/* ===================================================================== */
/* Curves (scikit-learn's, point for point)                               */
/* ===================================================================== */

/*
 * sklearn.metrics.precision_recall_curve(target, score) for one task, with
 * its defaults (drop_intermediate=False): one point per distinct score,
 * thresholds ascending, precision and recall as sklearn orders them (recall
 * decreasing), then the final point precision 1, recall 0 which has no
 * threshold.  Rows with a NaN target are dropped; targets must be 0 or 1
 * (MP_ERR_ARG otherwise) and scores not NaN.  With no positive label recall
 * is 1 everywhere, as in sklearn.  On success *precision and *recall hold
 * *n_points values and *thresholds *n_points - 1; the caller frees the three
 * with mp_free.  No labelled row: MP_ERR_ARG.
 */
mp_status mp_pr_curve(const double *score, size_t score_stride,
                      const double *target, size_t target_stride, size_t n,
                      double **precision, double **recall, double **thresholds,
                      size_t *n_points);

/*
 * sklearn.metrics.roc_curve(target, score) with its defaults
 * (drop_intermediate=True): points where the curve bends, starting at (0, 0)
 * with threshold +inf; fpr/tpr NaN when a class is absent, as sklearn.  The
 * three arrays have *n_points values each; the caller frees them.
 */
mp_status mp_roc_curve(const double *score, size_t score_stride,
                       const double *target, size_t target_stride, size_t n,
                       double **fpr, double **tpr, double **thresholds,
                       size_t *n_points);

/*
 * sklearn.metrics.auc(x, y): the trapezoid rule over a monotonic x (area
 * signed so a decreasing x gives a positive area, as sklearn).  NaN when x is
 * neither non-decreasing nor non-increasing, or n < 2.  Sums as NumPy does
 * (pairwise), so results agree with sklearn to the last bit.
 */
double mp_trapezoid_auc(const double *x, const double *y, size_t n);

/* ===================================================================== */
/* metrics.json: a small JSON report written atomically                    */
/* ===================================================================== */

/*
 * A JSON object built by dotted paths: setting "timings.train_s" creates the
 * object "timings" if needed.  Non-finite numbers are written as null.
 * Setting an existing path replaces its value.  Keys keep their first-set
 * order.
 *
 *     mp_report *r;
 *     mp_report_new(&r);
 *     mp_report_set_str(r, "task_type", "regression");
 *     mp_report_set_metric(r, "test", "rmse", task_names, per_task, n_tasks, mean);
 *     mp_report_set_num(r, "timings.train_s", 12.5);
 *     mp_report_write(r, "out/metrics.json");
 *     mp_report_free(r);
 *
 * Suggested layout for a training run (so tools can read any run's file):
 *   task_type, metrics (names), tasks (names), best_epoch,
 *   test.<metric>, val.<metric>  (mp_report_set_metric),
 *   split.train / split.val / split.test (sizes), invalid_rows,
 *   timings.featurize_s, timings.train_s, timings.train_mols_per_s, ...
 */
typedef struct mp_report mp_report;

mp_status mp_report_new(mp_report **out);
void      mp_report_free(mp_report *r);   /* NULL is fine */

/* Path: dot-separated keys, each non-empty.  MP_ERR_ARG when a prefix of the
 * path already holds a non-object value. */
mp_status mp_report_set_str(mp_report *r, const char *path, const char *value);
mp_status mp_report_set_num(mp_report *r, const char *path, double value);
mp_status mp_report_set_int(mp_report *r, const char *path, long long value);
mp_status mp_report_set_bool(mp_report *r, const char *path, int value);
mp_status mp_report_set_nums(mp_report *r, const char *path, const double *v, size_t n);
mp_status mp_report_set_strs(mp_report *r, const char *path,
                             const char *const *v, size_t n);

/*
 * Records one metric of one evaluated set under `set` (e.g. "test", "val"):
 *   set.metric = { "mean": mean, "tasks": { task_names[i]: per_task[i], ... } }
 * (a task name used twice keeps both entries, in order).  task_names may be
 * NULL: then the tasks are named "task0", "task1", ...
 */
mp_status mp_report_set_metric(mp_report *r, const char *set, const char *metric,
                               const char *const *task_names, const double *per_task,
                               size_t n_tasks, double mean);

/* The JSON text, indented, with a final newline; the caller frees it with
 * mp_free.  NULL when out of memory. */
char     *mp_report_print(const mp_report *r);
/* Writes the JSON text to `path` atomically (temp file + rename). */
mp_status mp_report_write(const mp_report *r, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* MP_METRICS_H */
