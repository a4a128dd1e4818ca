/*
 * test_unc.c - uncertainty metrics, calibrators and estimators against
 * numpy / scipy / scikit-learn (tests/fixtures/unc_cases.txt, made by
 * tests/fixtures/make_unc_fixtures.py), plus hand-worked cases and bad
 * input.
 */
#include "test.h"
#include "data/unc_metrics.h"
#include "run/calibrate.h"
#include "run/uncertainty.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/unc_cases.txt"

#include "unc_fixture.h"

/* ===================================================================== */
/* Metrics                                                                */
/* ===================================================================== */

MP_TEST(unc_metrics_match_scipy)
{
    FILE *fp = fopen(FIXTURE, "r");
    CHECK_MSG(fp, "cannot open %s", FIXTURE);
    record r;
    int rc, n_reg = 0, n_erf = 0, n_bin = 0;
    while ((rc = record_next(fp, &r)) == 1) {
        if (!strncmp(r.head, "erfinv", 6)) {
            size_t n;
            const double *x = GET(&r, "x", &n), *want = GET(&r, "erfinv", NULL);
            for (size_t i = 0; i < n; i++)
                CHECK_NEAR(mp_erfinv(x[i]), want[i], 1e-14, 1e-13);
            n_erf++;
        } else if (!strncmp(r.head, "regression_metrics", 18)) {
            size_t n;
            const double *pred = GET(&r, "pred", &n), *var = GET(&r, "var", NULL),
                         *y = GET(&r, "target", NULL);
            CHECK_NEAR(mp_unc_nll_regression(pred, var, y, n), GET(&r, "nll", NULL)[0], 1e-12,
                       1e-12);
            CHECK_NEAR(mp_unc_miscalibration_area(pred, var, y, n, 100),
                       GET(&r, "miscalibration-area", NULL)[0], 1e-12, 1e-12);
            CHECK_NEAR(mp_unc_ence(pred, var, y, n, 100), GET(&r, "ence", NULL)[0], 1e-12,
                       1e-11);
            CHECK_NEAR(mp_unc_spearman(pred, var, y, n), GET(&r, "spearman", NULL)[0], 1e-12,
                       1e-11);
            double *lo = malloc(sizeof(double) * n), *up = malloc(sizeof(double) * n);
            for (size_t i = 0; i < n; i++) {
                lo[i] = pred[i] - sqrt(var[i]);
                up[i] = pred[i] + sqrt(var[i]);
            }
            double cov = mp_unc_coverage(lo, up, y, n);
            free(lo);
            free(up);
            CHECK_NEAR(cov, GET(&r, "coverage", NULL)[0], 1e-15, 0);
            n_reg++;
        } else if (!strncmp(r.head, "binary_nll", 10)) {
            size_t n;
            const double *p = GET(&r, "prob", &n), *y = GET(&r, "target", NULL);
            CHECK_NEAR(mp_unc_nll_binary(p, y, n), GET(&r, "nll", NULL)[0], 1e-12, 1e-12);
            n_bin++;
        }
        record_free(&r);
    }
    fclose(fp);
    CHECK_EQ_INT(rc, 0);
    CHECK(n_erf == 1 && n_reg == 4 && n_bin == 1);
}

/* By hand: perfectly calibrated errors at the bin edges, and the chunking. */
MP_TEST(unc_metrics_by_hand)
{
    /* errors 0 with any variance: every bin holds all molecules */
    double pred[4] = { 1, 2, 3, 4 }, var[4] = { 1, 4, 9, 16 }, y[4] = { 1, 2, 3, 4 };
    double area = 0;
    for (int k = 1; k < 100; k++)
        area += 1 - k / 100.0;
    CHECK_NEAR(mp_unc_miscalibration_area(pred, var, y, 4, 100), area / 100, 1e-15, 1e-12);
    /* ENCE with 2 bins of 2: RMV sqrt(2.5), sqrt(12.5); RMSE 0 -> 1 each */
    CHECK_NEAR(mp_unc_ence(pred, var, y, 4, 2), 1.0, 0, 1e-15);
    /* NLL of a unit Gaussian at its mean */
    double p1 = 0, v1 = 1, y1 = 0;
    CHECK_NEAR(mp_unc_nll_regression(&p1, &v1, &y1, 1), 0.5 * log(2 * M_PI), 0, 1e-15);
    /* Spearman: monotone -> 1, reversed -> -1, constant -> NaN */
    double pr[5] = { 0, 0, 0, 0, 0 }, u[5] = { 1, 2, 3, 4, 5 }, t[5] = { 1, 2, 3, 4, 5 };
    CHECK_NEAR(mp_unc_spearman(pr, u, t, 5), 1.0, 1e-15, 0);
    double t2[5] = { 5, 4, 3, 2, 1 };
    CHECK_NEAR(mp_unc_spearman(pr, u, t2, 5), -1.0, 1e-15, 0);
    double uc[5] = { 2, 2, 2, 2, 2 };
    CHECK(isnan(mp_unc_spearman(pr, uc, t, 5)));
    CHECK(isnan(mp_unc_nll_regression(pr, u, t, 0)));
}

MP_TEST(unc_metric_names)
{
    mp_unc_metric m[8];
    int n;
    CHECK_OK(mp_unc_metric_list_parse("nll,miscalibration_area,ENCE,spearman", m, &n));
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(m[1], MP_UNC_METRIC_MISCAL_AREA);
    CHECK_EQ_STR(mp_unc_metric_name(m[1]), "miscalibration-area");
    CHECK(mp_unc_metric_list_parse("nll,nll", m, &n) == MP_ERR_ARG);
    CHECK(mp_unc_metric_list_parse("nll,bogus", m, &n) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "bogus") != NULL);
    CHECK(mp_unc_metric_list_parse("", m, &n) == MP_ERR_ARG);
}

/* ===================================================================== */
/* Calibrators                                                            */
/* ===================================================================== */

static const double *member_block(const record *r, const char *key, int m, size_t n, double *buf)
{
    for (int k = 0; k < m; k++) {
        const double *v = rec_get(r, key, k, NULL);
        if (!v)
            return NULL;
        memcpy(buf + (size_t)k * n, v, sizeof(double) * n);
    }
    return buf;
}

/* One regression calibration case: every regression calibrator fitted on
 * the calibration set and applied to the test set. */
static int check_regression_case(const record *r, char *why, size_t why_n)
{
    size_t n = 0, tn = 0;
    const double *pred = rec_get(r, "pred", 0, &n), *var = rec_get(r, "var", 0, NULL),
                 *half = rec_get(r, "half", 0, NULL), *y = rec_get(r, "target", 0, NULL),
                 *tpred = rec_get(r, "test_pred", 0, &tn), *tvar = rec_get(r, "test_var", 0, NULL),
                 *thalf = rec_get(r, "test_half", 0, NULL);
    double alpha = atof(strrchr(r->head, ' ') + 1);
    if (!pred || !var || !half || !y || !tpred || !tvar || !thalf || !n || !tn)
        return snprintf(why, why_n, "missing arrays"), 0;
    double *mv = malloc(sizeof(double) * 3 * n), *tmv = malloc(sizeof(double) * 3 * tn);
    double *u = malloc(sizeof(double) * tn), *lo = malloc(sizeof(double) * tn),
           *up = malloc(sizeof(double) * tn);
    int ok = 1;
#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (ok && !(cond)) {                                                    \
            snprintf(why, why_n, __VA_ARGS__);                                  \
            ok = 0;                                                             \
        }                                                                       \
    } while (0)
#define NEAR(a, b, tol) (fabs((a) - (b)) <= (tol) * (1 + fabs(b)))
    member_block(r, "member_var", 3, n, mv);
    member_block(r, "test_member_var", 3, tn, tmv);
    mp_cal_inputs in = { n, pred, var, NULL, mv, 3 };
    mp_cal_inputs tin = { tn, tpred, tvar, NULL, tmv, 3 };
    mp_calibration c;
    /* zscaling: fmin stops within its xtol of the closed-form optimum */
    EXPECT(mp_calibration_fit(&c, MP_CAL_ZSCALING, alpha, &in, y) == MP_OK, "zscaling fit");
    EXPECT(NEAR(c.scale, rec_get(r, "zscaling_scale", 0, NULL)[0], 2e-4), "zscaling scale %.9g",
           c.scale);
    mp_calibration_apply(&c, &tin, u, NULL, NULL);
    for (size_t i = 0; i < tn; i++)
        EXPECT(NEAR(u[i], rec_get(r, "zscaling_var", 0, NULL)[i], 5e-4), "zscaling var %zu", i);
    mp_calibration_free(&c);
    /* zelikman: exact */
    EXPECT(mp_calibration_fit(&c, MP_CAL_ZELIKMAN, alpha, &in, y) == MP_OK, "zelikman fit");
    EXPECT(NEAR(c.scale, rec_get(r, "zelikman_scale", 0, NULL)[0], 1e-14), "zelikman scale");
    mp_calibration_apply(&c, &tin, u, lo, up);
    for (size_t i = 0; i < tn; i++) {
        EXPECT(NEAR(u[i], rec_get(r, "zelikman_var", 0, NULL)[i], 1e-13), "zelikman var %zu", i);
        EXPECT(NEAR(up[i] - tpred[i], sqrt(u[i]), 1e-13), "zelikman interval %zu", i);
    }
    mp_calibration_free(&c);
    /* mve-weighting: the same Nelder-Mead steps as fmin, to rounding */
    EXPECT(mp_calibration_fit(&c, MP_CAL_MVE_WEIGHTING, alpha, &in, y) == MP_OK, "mve fit");
    for (int k = 0; k < 3 && ok; k++)
        EXPECT(NEAR(c.w[k], rec_get(r, "mve_weights", 0, NULL)[k], 1e-9), "mve weight %d: %.9g",
               k, c.w[k]);
    mp_calibration_apply(&c, &tin, u, NULL, NULL);
    for (size_t i = 0; i < tn; i++)
        EXPECT(NEAR(u[i], rec_get(r, "mve_var", 0, NULL)[i], 1e-9), "mve var %zu", i);
    mp_calibration_free(&c);
    /* conformal, with and without the model's half interval: exact */
    EXPECT(mp_calibration_fit(&c, MP_CAL_CONFORMAL, alpha, &in, y) == MP_OK, "conformal fit");
    EXPECT(NEAR(c.qhat, rec_get(r, "conformal0_qhat", 0, NULL)[0], 1e-15), "conformal0 qhat");
    mp_calibration_free(&c);
    in.half = half;
    tin.half = thalf;
    EXPECT(mp_calibration_fit(&c, MP_CAL_CONFORMAL, alpha, &in, y) == MP_OK, "conformal fit");
    EXPECT(NEAR(c.qhat, rec_get(r, "conformal_qhat", 0, NULL)[0], 1e-15), "conformal qhat");
    mp_calibration_apply(&c, &tin, u, lo, up);
    for (size_t i = 0; i < tn; i++) {
        EXPECT(NEAR(lo[i], rec_get(r, "conformal_lower", 0, NULL)[i], 1e-14), "conf lower %zu", i);
        EXPECT(NEAR(up[i], rec_get(r, "conformal_upper", 0, NULL)[i], 1e-14), "conf upper %zu", i);
        EXPECT(u[i] == tvar[i], "conformal leaves the variance");
    }
    mp_calibration_free(&c);
    in.half = tin.half = NULL;
    EXPECT(mp_calibration_fit(&c, MP_CAL_CONFORMAL_ADAPTIVE, alpha, &in, y) == MP_OK, "ad fit");
    EXPECT(NEAR(c.qhat, rec_get(r, "adaptive_qhat", 0, NULL)[0], 1e-15), "adaptive qhat");
    mp_calibration_apply(&c, &tin, u, lo, up);
    for (size_t i = 0; i < tn; i++) {
        EXPECT(NEAR(lo[i], rec_get(r, "adaptive_lower", 0, NULL)[i], 1e-14), "ad lower %zu", i);
        EXPECT(NEAR(up[i], rec_get(r, "adaptive_upper", 0, NULL)[i], 1e-14), "ad upper %zu", i);
    }
    mp_calibration_free(&c);
    free(mv);
    free(tmv);
    free(u);
    free(lo);
    free(up);
    return ok;
}

static int check_binary_case(const record *r, char *why, size_t why_n)
{
    size_t n = 0, tn = 0;
    const double *p = rec_get(r, "prob", 0, &n), *y = rec_get(r, "target", 0, NULL),
                 *tp = rec_get(r, "test_prob", 0, &tn);
    const double *want_platt = rec_get(r, "platt_prob", 0, NULL),
                 *want_iso = rec_get(r, "isotonic_prob", 0, NULL);
    if (!p || !y || !tp || !n || !tn)
        return snprintf(why, why_n, "missing arrays"), 0;
    double *u = malloc(sizeof(double) * tn);
    int ok = 1;
    mp_cal_inputs in = { n, NULL, p, NULL, NULL, 0 }, tin = { tn, NULL, tp, NULL, NULL, 0 };
    mp_calibration c;
    if (want_platt) {
        EXPECT(mp_calibration_fit(&c, MP_CAL_PLATT, 0.1, &in, y) == MP_OK, "platt fit");
        const double *ab = rec_get(r, "platt_ab", 0, NULL);
        EXPECT(NEAR(c.a, ab[0], 1e-9) && NEAR(c.b, ab[1], 1e-9), "platt a, b = %.9g, %.9g", c.a,
               c.b);
        mp_calibration_apply(&c, &tin, u, NULL, NULL);
        for (size_t i = 0; i < tn; i++)
            EXPECT(NEAR(u[i], want_platt[i], 1e-9), "platt prob %zu: %.9g", i, u[i]);
        mp_calibration_free(&c);
    }
    EXPECT(mp_calibration_fit(&c, MP_CAL_ISOTONIC, 0.1, &in, y) == MP_OK, "isotonic fit");
    mp_calibration_apply(&c, &tin, u, NULL, NULL);
    for (size_t i = 0; i < tn; i++)
        EXPECT(NEAR(u[i], want_iso[i], 1e-12), "isotonic prob %zu: %.17g vs %.17g", i, u[i],
               want_iso[i]);
    mp_calibration_free(&c);
    free(u);
    return ok;
#undef EXPECT
#undef NEAR
}

MP_TEST(unc_calibrators_match_scipy_sklearn)
{
    FILE *fp = fopen(FIXTURE, "r");
    CHECK_MSG(fp, "cannot open %s", FIXTURE);
    record r;
    int rc, n_reg = 0, n_bin = 0, n_aps = 0;
    char why[256] = "";
    while ((rc = record_next(fp, &r)) == 1) {
        int ok = 1;
        if (!strncmp(r.head, "regression_calibration", 22)) {
            ok = check_regression_case(&r, why, sizeof why);
            n_reg++;
        } else if (!strncmp(r.head, "binary_calibration", 18) ||
                   !strncmp(r.head, "isotonic_ties", 13)) {
            ok = check_binary_case(&r, why, sizeof why);
            n_bin++;
        } else if (!strncmp(r.head, "aps", 3)) {
            size_t n = 0;
            const double *p = rec_get(&r, "prob", 0, &n), *want = rec_get(&r, "score", 0, NULL);
            double s[4];
            for (size_t i = 0; i + 4 <= n; i += 4) {
                mp_conformal_aps_scores(p + i, 4, s);
                for (int k = 0; k < 4; k++)
                    ok &= fabs(s[k] - want[i + k]) <= 1e-15;
            }
            snprintf(why, sizeof why, "aps scores");
            n_aps++;
        }
        char head[128];
        snprintf(head, sizeof head, "%s", r.head);
        record_free(&r);
        if (!ok) {
            fclose(fp);
            MP_FAIL("case '%s': %s", head, why);
        }
    }
    fclose(fp);
    CHECK_EQ_INT(rc, 0);
    CHECK(n_reg == 3 && n_bin == 3 && n_aps == 1);
}

MP_TEST(unc_calibrator_bad_input)
{
    double pred[3] = { 0, 1, 2 }, var[3] = { 1, 0, 1 }, y[3] = { 0, 1, 2 };
    mp_cal_inputs in = { 3, pred, var, NULL, NULL, 0 };
    mp_calibration c;
    CHECK(mp_calibration_fit(&c, MP_CAL_ZSCALING, 0.1, &in, y) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "molecule 1") != NULL);
    var[1] = 1;
    CHECK(mp_calibration_fit(&c, MP_CAL_ZSCALING, 1.5, &in, y) == MP_ERR_ARG);
    CHECK(mp_calibration_fit(&c, MP_CAL_MVE_WEIGHTING, 0.1, &in, y) == MP_ERR_ARG);
    double p[3] = { 0.2, 0.5, 0.9 }, t[3] = { 0, 2, 1 };
    mp_cal_inputs bin = { 3, NULL, p, NULL, NULL, 0 };
    CHECK(mp_calibration_fit(&c, MP_CAL_PLATT, 0.1, &bin, t) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "not 0 or 1") != NULL);
    in.n = 0;
    CHECK(mp_calibration_fit(&c, MP_CAL_CONFORMAL, 0.1, &in, y) == MP_ERR_ARG);
    mp_calibrator k;
    CHECK_OK(mp_calibrator_parse("zelikman-interval", &k));
    CHECK_EQ_INT(k, MP_CAL_ZELIKMAN);
    CHECK(mp_calibrator_parse("tscaling", &k) == MP_ERR_ARG);
}

/* Nelder-Mead finds a quadratic's minimum; quantiles as numpy's. */
static double bowl(const double *x, void *ctx)
{
    (void)ctx;
    return (x[0] - 3) * (x[0] - 3) + 10 * (x[1] + 1) * (x[1] + 1);
}

MP_TEST(unc_building_blocks)
{
    double x[2] = { 0, 0 };
    double f = mp_nelder_mead(bowl, NULL, x, 2);
    CHECK_NEAR(x[0], 3, 1e-3, 0);
    CHECK_NEAR(x[1], -1, 1e-3, 0);
    CHECK(f < 1e-6);
    double v[5] = { 5, 1, 4, 2, 3 };
    CHECK_EQ_INT((int)mp_quantile_lower(v, 5, 0.9), 4);    /* pos 3.6 */
    CHECK_EQ_INT((int)mp_quantile_higher(v, 5, 0.9), 5);
    CHECK_EQ_INT((int)mp_quantile_higher(v, 5, 0.5), 3);   /* pos 2 exactly */
    CHECK_NEAR(mp_conformal_level(9, 0.1), 1.0, 0, 0);     /* ceil(9) / 9 */
    CHECK_NEAR(mp_conformal_level(100, 0.1), 91.0 / 100, 0, 1e-15);
    CHECK_NEAR(mp_conformal_level(5, 0.1), 1.0, 0, 0);     /* alpha < 1/6 */
}

/* ===================================================================== */
/* Estimators on synthetic outputs                                        */
/* ===================================================================== */

MP_TEST(unc_estimators_synthetic)
{
    /* ensemble of 3 members, 2 cells */
    double vals[6] = { 1, 10, 2, 20, 6, 30 }, mean[2], var[2];
    mp_unc_ensemble(vals, 3, 2, mean, var);
    CHECK_NEAR(mean[0], 3, 0, 1e-15);
    CHECK_NEAR(var[0], (4 + 1 + 9) / 3.0, 0, 1e-15);
    CHECK_NEAR(mean[1], 20, 0, 1e-15);
    CHECK_NEAR(var[1], 200 / 3.0, 0, 1e-15);
    /* dropout: 2 members x 2 passes, 1 cell: per-member variance, averaged */
    double dv[4] = { 0, 2, 10, 14 };
    mp_unc_dropout(dv, 2, 2, 1, mean, var);
    CHECK_NEAR(mean[0], 6.5, 0, 1e-15);
    CHECK_NEAR(var[0], (1 + 4) / 2.0, 0, 1e-15);   /* not the variance over all four */
    /* mve: 2 members, 1 cell: (mean, var) */
    double mve[4] = { 1, 0.5, 3, 1.5 }, unc[1], lo[1], up[1];
    mp_unc_from_head(MP_UNC_MVE, mve, 2, 1, mean, unc, lo, up);
    CHECK_NEAR(mean[0], 2, 0, 1e-15);
    CHECK_NEAR(unc[0], 1, 0, 1e-15);
    CHECK(isnan(lo[0]) && isnan(up[0]));
    /* evidential: gamma 1, nu 2, alpha 3, beta 4 */
    double ev[4] = { 1, 2, 3, 4 };
    mp_unc_from_head(MP_UNC_EVIDENTIAL_TOTAL, ev, 1, 1, mean, unc, NULL, NULL);
    CHECK_NEAR(unc[0], 1.5 * 4 / 2, 0, 1e-15);
    mp_unc_from_head(MP_UNC_EVIDENTIAL_EPISTEMIC, ev, 1, 1, mean, unc, NULL, NULL);
    CHECK_NEAR(unc[0], 4 / (2.0 * 2), 0, 1e-15);
    mp_unc_from_head(MP_UNC_EVIDENTIAL_ALEATORIC, ev, 1, 1, mean, unc, NULL, NULL);
    CHECK_NEAR(unc[0], 2, 0, 1e-15);
    CHECK_NEAR(mean[0], 1, 0, 0);
    /* quantile: (mean 5, interval 2) -> [4, 6], half 1 */
    double q[2] = { 5, 2 };
    mp_unc_from_head(MP_UNC_QUANTILE, q, 1, 1, mean, unc, lo, up);
    CHECK(mean[0] == 5 && unc[0] == 1 && lo[0] == 4 && up[0] == 6);
    /* dirichlet: (p, u) */
    double d[4] = { 0.2, 0.4, 0.6, 0.2 };
    mp_unc_from_head(MP_UNC_DIRICHLET, d, 2, 1, mean, unc, NULL, NULL);
    CHECK_NEAR(mean[0], 0.4, 0, 1e-15);
    CHECK_NEAR(unc[0], 0.3, 0, 1e-15);
    mp_unc_method m;
    CHECK_OK(mp_unc_method_parse("evidential", &m));
    CHECK_EQ_INT(m, MP_UNC_EVIDENTIAL_TOTAL);
    CHECK(mp_unc_method_parse("bayes", &m) == MP_ERR_ARG);
}
