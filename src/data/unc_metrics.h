/*
 * unc_metrics.h - how good a model's uncertainties are, as Chemprop v2.3.1
 * scores them (chemprop/uncertainty/evaluator.py): the Gaussian NLL, the
 * miscalibration area, the expected normalized calibration error (ENCE),
 * the Spearman rank correlation between uncertainty and error, and the
 * coverage of prediction intervals and sets.
 *
 * Every function scores ONE task over its n labelled molecules (the caller
 * drops rows with a missing label, as metrics.h's per-task helper does); a
 * regression uncertainty is a variance in the target's units squared, a
 * binary classification one the predicted probability of class 1.
 *
 *     double nll = mp_unc_nll_regression(pred, var, target, n);
 *
 * Sits beside metrics.h in data/; the prediction side (run/predict_unc.c)
 * and `molprop eval --uncertainty-metrics` call it.
 */
#ifndef MP_UNC_METRICS_H
#define MP_UNC_METRICS_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MP_UNC_METRIC_NLL,          /* "nll": mean Gaussian NLL (binary: mean -log p(y)) */
    MP_UNC_METRIC_MISCAL_AREA,  /* "miscalibration-area"                           */
    MP_UNC_METRIC_ENCE,         /* "ence"                                          */
    MP_UNC_METRIC_SPEARMAN,     /* "spearman": rank correlation of var and |error| */
    MP_UNC_METRIC_COVERAGE,     /* "coverage": fraction inside [lower, upper]      */
    MP_UNC_METRIC_COUNT
} mp_unc_metric;

/* Parses one name (case-insensitive; "miscalibration_area" and
 * "conformal-coverage" are accepted too); MP_ERR_ARG listing the names. */
mp_status   mp_unc_metric_parse(const char *name, mp_unc_metric *out);
const char *mp_unc_metric_name(mp_unc_metric m);
/* Parses "nll,ence,..." into out[0..*n) (at most MP_UNC_METRIC_COUNT, no
 * repeats). */
mp_status   mp_unc_metric_list_parse(const char *list, mp_unc_metric *out, int *n);

/* mean over i of log(2 pi var_i) / 2 + (pred_i - y_i)^2 / (2 var_i). */
double mp_unc_nll_regression(const double *pred, const double *var, const double *y, size_t n);
/* mean over i of -log(p_i y_i + (1 - p_i)(1 - y_i)) (y 0 or 1). */
double mp_unc_nll_binary(const double *prob, const double *y, size_t n);

/*
 * The area between the observed and the ideal calibration curve: for
 * k = 1 .. bins-1, the fraction of molecules with |pred - y| <= sigma
 * sqrt(2) erfinv(k / bins) against k / bins (0 and 1 at the ends), summed
 * with weight 1 / bins.  Chemprop uses bins = 100.
 */
double mp_unc_miscalibration_area(const double *pred, const double *var, const double *y,
                                  size_t n, int bins);

/*
 * ENCE: the molecules sorted by variance (stable), cut as torch.chunk cuts
 * them (chunks of ceil(n / bins), the last one shorter), then the mean over
 * chunks of |RMV - RMSE| / RMV, RMV = sqrt(mean var), RMSE = sqrt(mean
 * error^2).  Chemprop uses bins = 100.
 */
double mp_unc_ence(const double *pred, const double *var, const double *y, size_t n, int bins);

/* Spearman's rho between var and |pred - y| (average ranks for ties, as
 * scipy.stats.spearmanr); NaN when either is constant or n < 2. */
double mp_unc_spearman(const double *pred, const double *var, const double *y, size_t n);

/* Fraction of molecules with lower_i <= y_i <= upper_i. */
double mp_unc_coverage(const double *lower, const double *upper, const double *y, size_t n);
/* Multiclass, one task of C classes: prob [n x C] the class probabilities,
 * y the class labels (0 .. C-1).  The mean over i of -log prob[i][y_i]
 * (Chemprop's nll-multiclass), and the fraction of molecules whose class
 * is in their prediction set (in_set [n x C], nonzero = in the set;
 * Chemprop's conformal-coverage-multiclass). */
double mp_unc_nll_multiclass(const double *prob, const double *y, size_t n, int C);
double mp_unc_coverage_sets(const double *in_set, const double *y, size_t n, int C);
/*
 * Multilabel (conformal-multilabel's sets over n_tasks binary tasks):
 * in_set, out_set and y [n x n_tasks] (nonzero = in the set; y 0 / 1, NaN
 * where the label is missing).  The fraction of molecules whose sets hold
 * C_in <= Y <= C_out on their labelled tasks: no task of the in-set is
 * labelled 0 and every task labelled 1 is in the out-set.  A task whose
 * label or sets are NaN is left out, a molecule with none left is not
 * counted; *n_used (may be NULL) gets the molecules counted.  NaN when
 * none is.  With n_tasks = 1 it is one task's share.
 */
double mp_unc_coverage_multilabel(const double *in_set, const double *out_set, const double *y,
                                  size_t n, size_t n_tasks, size_t *n_used);

/* The inverse error function on (-1, 1) (+-inf at +-1, NaN outside), to
 * double precision (a rational start refined by Newton steps on erf). */
double mp_erfinv(double x);

/* Average ranks (1-based, ties share their mean rank) of x[0..n) into r. */
void   mp_rank_average(const double *x, size_t n, double *r);

#ifdef __cplusplus
}
#endif
#endif /* MP_UNC_METRICS_H */
