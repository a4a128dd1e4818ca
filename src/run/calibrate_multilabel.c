/*
 * calibrate_multilabel.c - conformal-multilabel (calibrate.h): in- and
 * out-sets over the tasks of a binary classification model, after Cauchois,
 * Gupta & Duchi, "Knowing what you know: valid and validated confidence
 * sets in multiclass and multilabel prediction" (JMLR 2021), as Chemprop
 * v2.3.1 documents it (its code's masks and axes are not followed: see
 * calibrate.h).  Fitted once for all the tasks on the calibration set's
 * probabilities (run/predict_unc.c), applied chunk by chunk.
 */
#include "run/calibrate.h"

#include <math.h>
#include <string.h>

void mp_ml_scores(const double *prob, const double *y, size_t n_tasks, double *m_in,
                  double *m_out)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t k = 0; k < n_tasks; k++) {
        if (isnan(y[k]) || isnan(prob[k]))
            continue;   /* a missing label (or prediction) says nothing */
        double s = -prob[k];
        if (y[k] == 0)
            lo = fmin(lo, s);
        else
            hi = fmax(hi, s);
    }
    *m_in = lo;
    *m_out = hi;
}

mp_status mp_ml_calibration_fit(mp_ml_calibration *c, double alpha, const double *prob,
                                const double *y, size_t n, size_t n_tasks)
{
    memset(c, 0, sizeof *c);
    c->alpha = alpha;
    c->n_tasks = n_tasks;
    c->t_in = c->t_out = NAN;
    if (!(alpha > 0 && alpha < 1))
        return mp_error_set(MP_ERR_ARG, "calibration: alpha = %g (must be in (0, 1))", alpha);
    if (n_tasks == 0)
        return mp_error_set(MP_ERR_ARG, "calibration (conformal-multilabel): no tasks");
    for (size_t i = 0; i < n * n_tasks; i++)
        if (!isnan(y[i]) && y[i] != 0 && y[i] != 1)
            return mp_error_set(MP_ERR_ARG, "calibration (conformal-multilabel): label %g of "
                                "molecule %zu, task %zu is not 0 or 1", y[i], i / n_tasks,
                                i % n_tasks);
    double *s = mp_malloc(sizeof(double) * 2 * (n ? n : 1));
    if (!s)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    double *m_in = s, *m_out = s + n;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        mp_ml_scores(prob + i * n_tasks, y + i * n_tasks, n_tasks, &m_in[m], &m_out[m]);
        /* a molecule without one labelled task is no calibration point:
         * its event C_in <= Y <= C_out would hold whatever the thresholds */
        m += !(m_in[m] == INFINITY && m_out[m] == -INFINITY);
    }
    if (m == 0) {
        mp_free(s);
        return mp_error_set(MP_ERR_ARG, "calibration (conformal-multilabel): no labelled "
                            "molecules");
    }
    /*
     * Coverage fails when a negative task lands in C_in (m_in < t_in) or a
     * positive one outside C_out (m_out > t_out); each gets alpha / 2 (a
     * union bound), at the finite-sample level q = ceil((m + 1)(1 - alpha /
     * 2)) / m.  t_out is the upper q quantile of m_out and rounds "higher":
     * a larger t_out only grows C_out.  t_in is its mirror, the lower
     * 1 - q quantile of m_in, and rounds "lower": a smaller t_in only
     * shrinks C_in.  (numpy's "higher" at q = k / m is the (k+1)-th smallest,
     * one past the textbook k-th, as Chemprop's other conformal
     * calibrators and ours take it: a little more conservative still.)
     */
    double q = mp_conformal_level(m, alpha / 2);
    c->t_out = mp_quantile_higher(m_out, m, q);
    c->t_in = mp_quantile_lower(m_in, m, 1 - q);
    c->n = m;
    mp_free(s);
    return MP_OK;
}

void mp_ml_calibration_apply(const mp_ml_calibration *c, const double *prob, size_t n,
                             double *in_set, double *out_set)
{
    for (size_t i = 0; i < n * c->n_tasks; i++) {
        double s = -prob[i];
        int bad = isnan(s);
        if (in_set)
            in_set[i] = bad ? NAN : s < c->t_in;
        if (out_set)
            out_set[i] = bad ? NAN : s <= c->t_out;
    }
}
