/*
 * test_unc_ml.c - conformal-multilabel (calibrate.h, calibrate_multilabel.c)
 * and its coverage (unc_metrics.h): the thresholds of a small case worked
 * out by hand, the sets at their edges, the coverage of hand-made sets, a
 * statistical check on well-specified synthetic probabilities (labels drawn
 * Bernoulli(p) with the repo's RNG) that also shows it can fail, and bad
 * input.
 */
#include "test.h"
#include "core/core.h"
#include "data/unc_metrics.h"
#include "run/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_ NAN

/* ===================================================================== */
/* Worked out by hand                                                     */
/* ===================================================================== */

/*
 * 11 molecules, 3 tasks; the last has no label and is left out (n = 10).
 * Per molecule (y: 1 positive, 0 negative, N_ missing), m_in = min of -p
 * over the negatives (+inf: none), m_out = max of -p over the positives
 * (-inf: none):
 *
 *   i  p                 y          m_in    m_out
 *   0  .9   .2   .6      1  0  1    -.2     -.6
 *   1  .8   .7   .1      1  1  0    -.1     -.7
 *   2  .3   .4   .5      0  0  0    -.5     -inf
 *   3  .95  .85  .75     1  1  N    +inf    -.85   (if the missing label
 *                                                   counted as 0, m_in -.75)
 *   4  .6   .35  .05     1  N  0    -.05    -.6
 *   5  .45  .55  .65     0  1  N    -.45    -.55
 *   6  .15  .25  .9      0  0  1    -.25    -.9
 *   7  .7   .65  .4      0  1  0    -.7     -.65
 *   8  .2   .1   .3      1  N  N    +inf    -.2
 *   9  .5   .8   .02     N  0  0    -.8     -inf   (as 1s: m_out -.5)
 *  10  .5   .5   .5      N  N  N    (left out)
 *
 * alpha = 0.6, so alpha / 2 = 0.3 and the level q = ceil(11 * 0.7) / 10 =
 * 8 / 10.  t_out: numpy's "higher" quantile at 0.8 of the 10 sorted m_out
 * (-inf -inf -.9 -.85 -.7 -.65 -.6 -.6 -.55 -.2): position 0.8 * 9 = 7.2,
 * up to 8 (0-based), the 9th smallest: -.55.  t_in: the "lower" quantile at
 * 1 - 0.8 = 0.2 of the sorted m_in (-.8 -.7 -.5 -.45 -.25 -.2 -.1 -.05 +inf
 * +inf): position 0.2 * 9 = 1.8, down to 1, the 2nd smallest: -.7.
 * (Rounding the other way would give -.5 and -.6; alpha instead of
 * alpha / 2 gives q = 5 / 10 and t_out -.65.)
 */
static const double hand_p[11 * 3] = {
    .9, .2, .6,    .8, .7, .1,    .3, .4, .5,     .95, .85, .75, .6, .35, .05, .45, .55, .65,
    .15, .25, .9,  .7, .65, .4,   .2, .1, .3,     .5, .8, .02,   .5, .5, .5
};
static const double hand_y[11 * 3] = {
    1, 0, 1,    1, 1, 0,    0, 0, 0,    1, 1, N_,   1, N_, 0,   0, 1, N_,
    0, 0, 1,    0, 1, 0,    1, N_, N_,  N_, 0, 0,   N_, N_, N_
};

MP_TEST(unc_ml_scores_by_hand)
{
    static const double want_in[10] = { -.2, -.1, -.5, INFINITY, -.05, -.45, -.25, -.7,
                                        INFINITY, -.8 };
    static const double want_out[10] = { -.6, -.7, -INFINITY, -.85, -.6, -.55, -.9, -.65, -.2,
                                         -INFINITY };
    for (int i = 0; i < 10; i++) {
        double mi, mo;
        mp_ml_scores(hand_p + 3 * i, hand_y + 3 * i, 3, &mi, &mo);
        CHECK_MSG(mi == want_in[i] && mo == want_out[i], "molecule %d: m_in %g m_out %g", i, mi,
                  mo);
    }
    double mi, mo;
    mp_ml_scores(hand_p + 30, hand_y + 30, 3, &mi, &mo);
    CHECK(mi == INFINITY && mo == -INFINITY);
}

MP_TEST(unc_ml_thresholds_by_hand)
{
    mp_ml_calibration c;
    CHECK_OK(mp_ml_calibration_fit(&c, 0.6, hand_p, hand_y, 11, 3));
    CHECK_EQ_INT(c.n, 10);   /* molecule 10 has no label */
    CHECK_EQ_INT(c.n_tasks, 3);
    CHECK_MSG(c.t_in == -.7, "t_in %.17g", c.t_in);
    CHECK_MSG(c.t_out == -.55, "t_out %.17g", c.t_out);
    /* the sets: C_in = {k : -p_k < -.7}, C_out = {k : -p_k <= -.55}; at
     * each edge (p = .7, p = .55) the strict and the wide comparison */
    static const double p[4 * 3] = { .75, .6, .5, .7, .55, .1, .71, .54, 1, N_, N_, N_ };
    static const double want_in[4 * 3] = { 1, 0, 0, 0, 0, 0, 1, 0, 1 };
    static const double want_out[4 * 3] = { 1, 1, 0, 1, 1, 0, 1, 0, 1 };
    double in[12], out[12];
    mp_ml_calibration_apply(&c, p, 4, in, out);
    for (int k = 0; k < 9; k++)
        CHECK_MSG(in[k] == want_in[k] && out[k] == want_out[k], "cell %d: in %g out %g", k,
                  in[k], out[k]);
    for (int k = 9; k < 12; k++)
        CHECK_MSG(isnan(in[k]) && isnan(out[k]), "a NaN prediction gave %g %g", in[k], out[k]);
    /* alpha small enough that the level is 1: the extremes of the scores */
    CHECK_OK(mp_ml_calibration_fit(&c, 0.1, hand_p, hand_y, 11, 3));
    CHECK(c.t_in == -.8 && c.t_out == -.2);
}

/* A molecule is covered when no task of C_in is labelled 0 and every task
 * labelled 1 is in C_out; missing labels and NaN sets leave a task out. */
MP_TEST(unc_ml_coverage_by_hand)
{
    static const double in[6 * 2] = { 1, 0,  1, 0,  0, 0,  0, 1,  N_, N_, 1, 0 };
    static const double out[6 * 2] = { 1, 1, 1, 0,  1, 0,  1, 1,  N_, N_, 1, 1 };
    static const double y[6 * 2] = { 1, 0,   1, 1,  0, 0,  1, 0,  1, 1,   N_, N_ };
    /* 0: covered; 1: positive task 1 outside C_out; 2: covered (empty sets,
     * all negative); 3: task 1 in C_in but labelled 0; 4, 5: nothing left */
    size_t used = 0;
    CHECK_NEAR(mp_unc_coverage_multilabel(in, out, y, 6, 2, &used), 0.5, 0, 0);
    CHECK_EQ_INT(used, 4);
    /* one task at a time: task 0 fails nowhere (rows 0-3), task 1 fails in
     * rows 1 and 3 */
    double i0[6], o0[6], y0[6], i1[6], o1[6], y1[6];
    for (int r = 0; r < 6; r++) {
        i0[r] = in[2 * r], o0[r] = out[2 * r], y0[r] = y[2 * r];
        i1[r] = in[2 * r + 1], o1[r] = out[2 * r + 1], y1[r] = y[2 * r + 1];
    }
    CHECK_NEAR(mp_unc_coverage_multilabel(i0, o0, y0, 6, 1, NULL), 1.0, 0, 0);
    CHECK_NEAR(mp_unc_coverage_multilabel(i1, o1, y1, 6, 1, NULL), 0.5, 0, 0);
    CHECK(isnan(mp_unc_coverage_multilabel(in + 8, out + 8, y + 8, 2, 2, NULL)));
}

MP_TEST(unc_ml_bad_input_is_refused)
{
    mp_ml_calibration c;
    const double alphas[4] = { 0, 1, -0.1, 1.5 };
    for (int k = 0; k < 4; k++) {
        CHECK(mp_ml_calibration_fit(&c, alphas[k], hand_p, hand_y, 11, 3) == MP_ERR_ARG);
        CHECK_MSG(strstr(mp_error_message(), "alpha"), "%s", mp_error_message());
    }
    double y[33];
    memcpy(y, hand_y, sizeof y);
    y[3 * 4 + 2] = 2;   /* molecule 4, task 2 */
    CHECK(mp_ml_calibration_fit(&c, 0.2, hand_p, y, 11, 3) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "label 2 of molecule 4, task 2 is not 0 or 1"), "%s",
              mp_error_message());
    for (int k = 0; k < 33; k++)
        y[k] = NAN;
    CHECK(mp_ml_calibration_fit(&c, 0.2, hand_p, y, 11, 3) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "no labelled molecules"), "%s", mp_error_message());
    CHECK(mp_ml_calibration_fit(&c, 0.2, hand_p, hand_y, 0, 3) == MP_ERR_ARG);
}

/* ===================================================================== */
/* Statistical: well-specified probabilities                              */
/* ===================================================================== */

#define ML_T 4
#define ML_N 4000

/* n molecules of ML_T tasks: p = sigmoid(1.5 z + b_k), z standard normal,
 * y ~ Bernoulli(p), one label in ten missing. */
static void ml_synth(mp_rng *r, size_t n, double *p, double *y)
{
    static const double bias[ML_T] = { -1, 0, 0.5, 1 };
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < ML_T; k++) {
            size_t c = i * ML_T + (size_t)k;
            p[c] = 1 / (1 + exp(-(1.5 * mp_rng_normal(r) + bias[k])));
            y[c] = mp_rng_uniform(r) < p[c];
            if (mp_rng_uniform(r) < 0.1)
                y[c] = NAN;
        }
}

/* Coverage of the thresholds (t_in, t_out) on (p, y), counted here from
 * the definition: *bad_in the share with a negative task of -p < t_in,
 * *bad_out those with a positive task of -p > t_out. */
static double ml_cover(const double *p, const double *y, size_t n, double t_in, double t_out,
                       double *bad_in, double *bad_out)
{
    size_t used = 0, ok = 0, bi = 0, bo = 0;
    for (size_t i = 0; i < n; i++) {
        int seen = 0, fi = 0, fo = 0;
        for (int k = 0; k < ML_T; k++) {
            double pk = p[i * ML_T + (size_t)k], yk = y[i * ML_T + (size_t)k];
            if (isnan(yk))
                continue;
            seen = 1;
            fi |= yk == 0 && -pk < t_in;
            fo |= yk == 1 && -pk > t_out;
        }
        used += seen;
        ok += seen && !fi && !fo;
        bi += seen && fi;
        bo += seen && fo;
    }
    *bad_in = (double)bi / (double)used;
    *bad_out = (double)bo / (double)used;
    return (double)ok / (double)used;
}

MP_TEST(unc_ml_covers_one_minus_alpha_on_synthetic_data)
{
    double *buf = malloc(sizeof(double) * 6 * ML_N * ML_T);
    CHECK(buf != NULL);
    double *cp = buf, *cy = buf + ML_N * ML_T, *tp = cy + ML_N * ML_T, *ty = tp + ML_N * ML_T;
    double *in = ty + ML_N * ML_T, *out = in + ML_N * ML_T;
    mp_rng r;
    mp_rng_seed(&r, 2021, 0);
    ml_synth(&r, ML_N, cp, cy);
    ml_synth(&r, ML_N, tp, ty);
    const double alphas[2] = { 0.1, 0.2 };
    double cov_at[2];
    for (int a = 0; a < 2; a++) {
        mp_ml_calibration c;
        mp_status st = mp_ml_calibration_fit(&c, alphas[a], cp, cy, ML_N, ML_T);
        if (st) {
            free(buf);
            CHECK_OK(st);
        }
        double bad_in, bad_out;
        double cov = ml_cover(tp, ty, ML_N, c.t_in, c.t_out, &bad_in, &bad_out);
        /* what the sets give, through the library's coverage, agrees */
        mp_ml_calibration_apply(&c, tp, ML_N, in, out);
        double lib = mp_unc_coverage_multilabel(in, out, ty, ML_N, ML_T, NULL);
        cov_at[a] = cov;
        if (!(fabs(cov - (1 - alphas[a])) <= 0.03 && lib == cov && bad_in <= alphas[a] / 2 + 0.02 &&
              bad_out <= alphas[a] / 2 + 0.02)) {
            free(buf);
            MP_FAIL("alpha %g: coverage %.4f (library %.4f), in-set wrong %.4f, out-set wrong "
                    "%.4f (t_in %g, t_out %g)", alphas[a], cov, lib, bad_in, bad_out, c.t_in,
                    c.t_out);
        }
    }
    /* it can fail: the thresholds of alpha 0.5 cover clearly less than 0.9,
     * and those of 0.1 clearly more than those of 0.2 */
    mp_ml_calibration c5;
    CHECK_OK(mp_ml_calibration_fit(&c5, 0.5, cp, cy, ML_N, ML_T));
    double bad_in, bad_out;
    double cov5 = ml_cover(tp, ty, ML_N, c5.t_in, c5.t_out, &bad_in, &bad_out);
    free(buf);
    CHECK_MSG(cov5 < 0.9 - 0.2, "alpha 0.5's thresholds cover %.4f", cov5);
    CHECK_MSG(cov_at[0] > cov_at[1] + 0.05, "coverage %.4f at alpha 0.1, %.4f at 0.2", cov_at[0],
              cov_at[1]);
}
