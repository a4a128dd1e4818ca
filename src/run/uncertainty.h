/*
 * uncertainty.h - uncertainty estimators: what `molprop predict
 * --uncertainty E` writes beside each prediction, as Chemprop v2.3.1
 * computes it (chemprop/uncertainty/estimator.py and cli/predict.py).
 * Pure functions of model outputs in the user's units (run/predict_unc.c
 * feeds them), so each is tested on synthetic outputs.
 *
 *   ensemble              mean over members; variance over members (ddof 0)
 *   dropout               S stochastic passes per member (MC dropout, Gal &
 *                         Ghahramani 2016): per member the mean and the
 *                         variance (ddof 0) over its passes, then the mean
 *                         over members of both
 *   mve                   head (mean, variance) per member: the mean of the
 *                         means and of the variances
 *   evidential[-total]    head (gamma, nu, alpha, beta): total variance
 *                         (1 + 1/nu) beta / (alpha - 1); -epistemic
 *                         beta / (nu (alpha - 1)); -aleatoric beta / (alpha - 1);
 *                         mean over members
 *   quantile              head (mean, interval = upper - lower): the interval
 *                         [mean - interval/2, mean + interval/2], averaged
 *                         over members; unc = the half interval
 *   dirichlet             head (probability, u = K / S): means over members
 *                         (classification-dirichlet; multiclass-dirichlet:
 *                         the C class probabilities alpha_k / S and one
 *                         u = C / S per task, mp_unc_multiclass_dirichlet)
 *
 * Multiclass models (multiclass, multiclass-dirichlet): ensemble and
 * dropout apply to each class probability (mean and variance per class,
 * as above, over the C values of each task); dirichlet to
 * multiclass-dirichlet models.
 * Regression uncertainties are variances (Chemprop's convention); a
 * quantile model's is its half interval; a Dirichlet one's u.
 */
#ifndef MP_UNCERTAINTY_H
#define MP_UNCERTAINTY_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MP_UNC_NONE = 0,
    MP_UNC_ENSEMBLE,
    MP_UNC_DROPOUT,
    MP_UNC_MVE,
    MP_UNC_EVIDENTIAL_TOTAL,
    MP_UNC_EVIDENTIAL_EPISTEMIC,
    MP_UNC_EVIDENTIAL_ALEATORIC,
    MP_UNC_QUANTILE,
    MP_UNC_DIRICHLET,
    MP_UNC_COUNT
} mp_unc_method;

/* "none", "ensemble", "dropout", "mve", "evidential" (= "evidential-total"),
 * "evidential-epistemic", "evidential-aleatoric", "quantile", "dirichlet";
 * MP_ERR_ARG listing them. */
mp_status   mp_unc_method_parse(const char *s, mp_unc_method *out);
const char *mp_unc_method_name(mp_unc_method m);
/* 1 for the methods that read a head other than the plain one (mve,
 * evidential, quantile, dirichlet). */
int         mp_unc_method_needs_head(mp_unc_method m);

/* vals: m blocks of `cells` values (member k's value of cell c at
 * vals[k cells + c]); mean and var (cells each).  m >= 1. */
void mp_unc_ensemble(const double *vals, int m, size_t cells, double *mean, double *var);

/* vals: m members x s passes blocks of `cells` values (member k, pass j at
 * vals[(k s + j) cells + c]). */
void mp_unc_dropout(const double *vals, int m, int s, size_t cells, double *mean, double *var);

/*
 * The head estimators: head holds m members x cells x v values (member k's
 * value i of cell c at head[(k cells + c) v + i]; v = 2 for mve, quantile,
 * dirichlet, 4 for evidential), mp_head_values' layout.  mean and unc
 * (cells each); lower / upper (quantile only; may be NULL).
 */
void mp_unc_from_head(mp_unc_method method, const double *head, int m, size_t cells,
                      double *mean, double *unc, double *lower, double *upper);
/* Values per task that method's head gives (2 or 4), 1 otherwise. */
int  mp_unc_head_values(mp_unc_method method);

/*
 * Chemprop's MulticlassDirichletEstimator from the raw outputs of m
 * members: raw holds, per member, cells = n x T tasks of C evidences (member
 * k's evidence of class j of cell c at raw[(k cells + c) C + j]).  alpha_j =
 * softplus(z_j) + 1, S = sum_j alpha_j; prob [cells x C] gets the member
 * mean of alpha_j / S (what heads.h predicts), u [cells] the member mean of
 * C / S.  A NaN row (an invalid molecule) gives NaN.
 */
void mp_unc_multiclass_dirichlet(const double *raw, int m, size_t cells, int C, double *prob,
                                 double *u);

#ifdef __cplusplus
}
#endif
#endif /* MP_UNCERTAINTY_H */
