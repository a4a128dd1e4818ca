/*
 * calibrate.h - uncertainty calibrators, Chemprop v2.3.1's definitions
 * (chemprop/uncertainty/calibrator.py): fitted on a labelled calibration set
 * (its predictions, uncertainties and targets), then applied to new
 * predictions.  One calibrator per task; pure functions of the numbers, so
 * they are tested on synthetic data against numpy / scipy / scikit-learn
 * (tests/fixtures/make_unc_fixtures.py).
 *
 * Regression (uncertainty = a variance):
 *   zscaling            var * s^2, s minimizing the Gaussian NLL on the
 *                       calibration set (closed form: s^2 = mean(e^2 / var);
 *                       Chemprop reaches the same minimum with fmin)
 *   zelikman            var * s^2, s the (1 - alpha) quantile ("lower") of
 *                       |e| / sigma (CRUDE); interval pred -+ sqrt(var s^2)
 *   mve-weighting       sum_k w_k var_k over an ensemble's member variances,
 *                       w = softmax(theta) minimizing the NLL (Nelder-Mead
 *                       from theta = 1, as scipy's fmin)
 *   conformal           interval [pred - h - q, pred + h + q], h the model's
 *                       half interval (a quantile head's; 0 otherwise), q
 *                       the ceil((n+1)(1-alpha))/n quantile ("higher") of
 *                       max(pred - h - y, y - pred - h)
 *   conformal-adaptive  interval pred -+ q sigma, q that quantile of
 *                       |e| / sigma (normalized scores: Angelopoulos & Bates
 *                       2021, 2.3; Chemprop's "conformal-adaptive" is its
 *                       multiclass APS score, mp_conformal_aps_scores)
 * Binary classification (uncertainty = the probability of class 1):
 *   platt               sigmoid(a logit(p) + b), (a, b) minimizing the NLL
 *                       (Nelder-Mead from (1, 0))
 *   isotonic            scikit-learn's IsotonicRegression(y_min 0, y_max 1,
 *                       out_of_bounds clip): pool-adjacent-violators on the
 *                       calibration set, linear interpolation between its
 *                       points
 * Multiclass (uncertainty = the C class probabilities; mp_mc_calibration):
 *   conformal-multiclass  score s = -p_y (the true class's probability,
 *                       negated); qhat its ceil((n+1)(1-alpha))/n quantile
 *                       ("higher"); the prediction set {k : -p_k <= qhat}
 *   conformal-adaptive  the same with the APS score (mp_conformal_aps_scores:
 *                       the probability mass of the classes at least as
 *                       likely as k); set {k : score_k <= qhat}
 *   isotonic-multiclass one binary isotonic map per class (one vs. all:
 *                       label [y == k]), the C calibrated values divided by
 *                       their sum (0 / 0 gives NaN, as Chemprop's does)
 * Chemprop v2.3.1 has no Platt scaling for multiclass models.
 * Multilabel (a binary classification model's tasks are the labels;
 * mp_ml_calibration, calibrate_multilabel.c):
 *   conformal-multilabel  Cauchois, Gupta & Duchi (JMLR 2021), as Chemprop
 *                       v2.3.1 documents it: score -p_k; per molecule m_in =
 *                       min of -p_k over its negative tasks, m_out = max
 *                       over its positive ones; t_in the lower, t_out the
 *                       upper alpha/2 conformal quantile; the in-set
 *                       {k : -p_k < t_in} and out-set {k : -p_k <= t_out}
 *                       hold C_in <= Y <= C_out with probability 1 - alpha.
 *                       The thresholds are fitted apart: with t_in > t_out
 *                       a task may be in C_in and not in C_out (its
 *                       molecule is then not covered); left as defined.
 *                       (Chemprop's own code mixes up its masks and axes:
 *                       the definition is followed, not its numbers.)
 */
#ifndef MP_CALIBRATE_H
#define MP_CALIBRATE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MP_CAL_NONE = 0,
    MP_CAL_ZSCALING,
    MP_CAL_ZELIKMAN,
    MP_CAL_MVE_WEIGHTING,
    MP_CAL_CONFORMAL,
    MP_CAL_CONFORMAL_ADAPTIVE,
    MP_CAL_PLATT,
    MP_CAL_ISOTONIC,
    MP_CAL_CONFORMAL_MULTICLASS,
    MP_CAL_ISOTONIC_MULTICLASS,
    MP_CAL_CONFORMAL_MULTILABEL,
    MP_CAL_COUNT
} mp_calibrator;

/* "zscaling", "zelikman" ("zelikman-interval"), "mve-weighting",
 * "conformal" ("conformal-regression"), "conformal-adaptive", "platt",
 * "isotonic", "conformal-multiclass", "isotonic-multiclass",
 * "conformal-multilabel", "none"; MP_ERR_ARG listing them. */
mp_status   mp_calibrator_parse(const char *s, mp_calibrator *out);
const char *mp_calibrator_name(mp_calibrator c);
/* 1 for the classification calibrators (platt, isotonic). */
int         mp_calibrator_is_classification(mp_calibrator c);
/* 1 for those that make intervals (zelikman, conformal, conformal-adaptive). */
int         mp_calibrator_makes_interval(mp_calibrator c);
/* 1 for the calibrators of a multiclass model (conformal-multiclass,
 * conformal-adaptive, isotonic-multiclass: mp_mc_calibration_fit). */
int         mp_calibrator_fits_multiclass(mp_calibrator c);

/* One task's fitted calibrator. */
typedef struct {
    mp_calibrator kind;
    double        alpha;     /* error rate of the intervals                 */
    double        scale;     /* zscaling, zelikman: s (variance times s^2)   */
    double        qhat;      /* conformal, conformal-adaptive               */
    double        a, b;      /* platt                                       */
    int           n_w;       /* mve-weighting: weights, one per member      */
    double       *w;
    size_t        n_iso;     /* isotonic: the fitted points, x increasing   */
    double       *iso_x, *iso_y;
} mp_calibration;

/* What a calibrator reads, per molecule of one task (n molecules):
 * pred (regression mean; unused by platt / isotonic), unc (variance, or the
 * probability of class 1), half (conformal: the model's half interval, NULL
 * = 0), member_var (mve-weighting: n_members blocks of n variances). */
typedef struct {
    size_t        n;
    const double *pred, *unc, *half, *member_var;
    int           n_members;
} mp_cal_inputs;

/*
 * Fits calibrator `kind` at error rate alpha (in (0, 1); for zelikman the
 * quantile is 1 - alpha) on in (with targets y).  MP_ERR_ARG naming the
 * problem for an empty set, a non-positive variance, a label that is not
 * 0 / 1 (platt, isotonic), missing member variances (mve-weighting);
 * MP_ERR_NOMEM.  c owns what it allocates: mp_calibration_free.
 */
mp_status mp_calibration_fit(mp_calibration *c, mp_calibrator kind, double alpha,
                             const mp_cal_inputs *in, const double *y);

/* Applies c to in: unc_out (n; the calibrated variance or probability) and,
 * for the interval calibrators, lower and upper (n each; may be NULL for
 * the others).  unc_out may alias in->unc. */
void      mp_calibration_apply(const mp_calibration *c, const mp_cal_inputs *in,
                               double *unc_out, double *lower, double *upper);
void      mp_calibration_free(mp_calibration *c);

/* One multiclass task's fitted calibrator (conformal-multiclass,
 * conformal-adaptive, isotonic-multiclass). */
typedef struct {
    mp_calibrator   kind;
    double          alpha;
    int             n_classes;
    double          qhat;    /* the conformal ones: the score's quantile      */
    mp_calibration *iso;     /* isotonic-multiclass: n_classes binary maps   */
} mp_mc_calibration;

/*
 * Fits calibrator `kind` (one of mp_calibrator_fits_multiclass) at error
 * rate alpha in (0, 1) on n molecules: prob [n x n_classes] (each row the
 * class probabilities), y [n] the class labels (integers 0 .. n_classes-1).
 * MP_ERR_ARG naming the molecule for a label that is not a class, or for
 * an empty set; MP_ERR_NOMEM.  c owns what it allocates.
 */
mp_status mp_mc_calibration_fit(mp_mc_calibration *c, mp_calibrator kind, double alpha,
                                int n_classes, const double *prob, const double *y, size_t n);
/* Applies c to n rows of prob [n x n_classes]: the conformal ones write
 * in_set [n x n_classes] (1: class k is in the prediction set, else 0; NaN
 * for a NaN row), isotonic-multiclass writes prob_out (may alias prob). */
void      mp_mc_calibration_apply(const mp_mc_calibration *c, const double *prob, size_t n,
                                  double *prob_out, double *in_set);
void      mp_mc_calibration_free(mp_mc_calibration *c);

/* ===================================================================== */
/* Multilabel (calibrate_multilabel.c)                                    */
/* ===================================================================== */

/* conformal-multilabel, fitted once for all n_tasks tasks (no heap: no
 * free needed). */
typedef struct {
    double alpha;
    size_t n_tasks;
    double t_in, t_out;   /* the thresholds on the score -p_k             */
    size_t n;             /* the calibration molecules with a label       */
} mp_ml_calibration;

/* One molecule's m_in (the smallest -p_k over its tasks labelled 0; +inf
 * when none) and m_out (the largest -p_k over those labelled 1; -inf when
 * none) from prob and y [n_tasks]; a NaN label (missing) or probability
 * leaves its task out. */
void      mp_ml_scores(const double *prob, const double *y, size_t n_tasks, double *m_in,
                       double *m_out);

/*
 * Fits conformal-multilabel at error rate alpha in (0, 1) on n molecules:
 * prob [n x n_tasks] the predicted probabilities, y [n x n_tasks] the labels
 * (0, 1, or NaN for missing).  Molecules without a labelled task are left
 * out (c->n counts the rest).  t_in = the lower 1 - q quantile of m_in
 * (mp_quantile_lower), t_out = the upper q one of m_out
 * (mp_quantile_higher), q = mp_conformal_level(c->n, alpha / 2).
 * MP_ERR_ARG for alpha outside (0, 1), a label that is not 0 / 1 (naming
 * the molecule and task by index), no labelled molecule; MP_ERR_NOMEM.
 */
mp_status mp_ml_calibration_fit(mp_ml_calibration *c, double alpha, const double *prob,
                                const double *y, size_t n, size_t n_tasks);
/* Applies c to n rows of prob [n x n_tasks]: in_set and out_set [n x
 * n_tasks] (either may be NULL) get 1 where task k is in the in-set (-p_k <
 * t_in) / the out-set (-p_k <= t_out), else 0; NaN where p_k is NaN. */
void      mp_ml_calibration_apply(const mp_ml_calibration *c, const double *prob, size_t n,
                                  double *in_set, double *out_set);

/* ===================================================================== */
/* Building blocks (exported for the tests)                               */
/* ===================================================================== */

/* numpy's quantile of x[0..n) at q with method "lower" or "higher"
 * (x is sorted in place). */
double mp_quantile_lower(double *x, size_t n, double q);
double mp_quantile_higher(double *x, size_t n, double q);

/* The conformal level ceil((n + 1)(1 - alpha)) / n, 1 when alpha < 1/(n+1). */
double mp_conformal_level(size_t n, double alpha);

/*
 * Minimizes f over R^d (d <= 16) from x (the result lands there) by the
 * Nelder-Mead simplex with scipy.optimize.fmin's defaults (initial steps
 * of 5% of each coordinate, 0.00025 for a zero one; xtol = ftol = 1e-4;
 * at most 200 d iterations and 200 d evaluations, the step under way
 * abandoned when they run out, as scipy does), so it lands where fmin
 * lands (to rounding; tests/test_unc.c) even where fmin stops short of the
 * minimum, as Chemprop's Platt fits can.  Returns the value at x.
 */
double mp_nelder_mead(double (*f)(const double *x, void *ctx), void *ctx, double *x, int d);

/* Chemprop's adaptive (APS) conformal score of each class for one molecule:
 * the sum of the probabilities of the classes at least as likely as it
 * (p sorted descending, cumulated, put back in class order). */
void   mp_conformal_aps_scores(const double *p, int n_classes, double *score);

#ifdef __cplusplus
}
#endif
#endif /* MP_CALIBRATE_H */
