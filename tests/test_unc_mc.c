/*
 * test_unc_mc.c - the multiclass uncertainty estimators, calibrators and
 * evaluators, and MVE weighting, against Chemprop v2.3.1's own classes
 * (tests/fixtures/unc_mc_chemprop.txt, made by make_unc_mc_fixtures.py)
 * and against small cases worked out here by independent, plain methods
 * (an order statistic by counting, isotonic regression by its min-max
 * formula, a grid search over the weights), plus bad input.
 */
#include "test.h"
#include "test_unc_util.h"
#include "data/unc_metrics.h"
#include "run/calibrate.h"
#include "run/uncertainty.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/unc_mc_chemprop.txt"

#include "unc_fixture.h"

/* ===================================================================== */
/* Against Chemprop v2.3.1                                                */
/* ===================================================================== */

/* One multiclass case: every multiclass calibrator and both evaluators. */
static int check_mc_case(const record *r, char *why, size_t why_n)
{
    int C = atoi(r->head + strlen("multiclass_calibration "));
    double alpha = atof(strrchr(r->head, ' ') + 1);
    size_t np = 0, tnp = 0;
    const double *p = rec_get(r, "prob", 0, &np), *y = rec_get(r, "label", 0, NULL),
                 *tp = rec_get(r, "test_prob", 0, &tnp), *ty = rec_get(r, "test_label", 0, NULL);
    if (!p || !y || !tp || !ty || C < 2)
        return snprintf(why, why_n, "missing arrays"), 0;
    size_t n = np / (size_t)C, tn = tnp / (size_t)C;
    double *set = malloc(sizeof(double) * tnp), *cal = malloc(sizeof(double) * tnp);
    int ok = 1;
#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (ok && !(cond)) {                                                    \
            snprintf(why, why_n, __VA_ARGS__);                                  \
            ok = 0;                                                             \
        }                                                                       \
    } while (0)
    static const struct {
        mp_calibrator kind;
        const char *qhat, *set, *coverage;
    } conf[2] = { { MP_CAL_CONFORMAL_MULTICLASS, "conformal_qhat", "conformal_set",
                    "conformal_coverage" },
                  { MP_CAL_CONFORMAL_ADAPTIVE, "adaptive_qhat", "adaptive_set",
                    "adaptive_coverage" } };
    for (int k = 0; k < 2; k++) {
        mp_mc_calibration c;
        EXPECT(mp_mc_calibration_fit(&c, conf[k].kind, alpha, C, p, y, n) == MP_OK, "%s fit: %s",
               conf[k].qhat, mp_error_message());
        EXPECT(fabs(c.qhat - rec_get(r, conf[k].qhat, 0, NULL)[0]) <= 1e-15, "%s %.17g",
               conf[k].qhat, c.qhat);
        mp_mc_calibration_apply(&c, tp, tn, NULL, set);
        const double *want = rec_get(r, conf[k].set, 0, NULL);
        for (size_t i = 0; i < tnp; i++)
            EXPECT(set[i] == want[i], "%s[%zu] = %g, Chemprop %g", conf[k].set, i, set[i],
                   want[i]);
        /* Chemprop's coverage is a float32 division */
        double cov = mp_unc_coverage_sets(set, ty, tn, C);
        EXPECT(fabs(cov - rec_get(r, conf[k].coverage, 0, NULL)[0]) <= 1e-7, "%s %.9g",
               conf[k].coverage, cov);
        mp_mc_calibration_free(&c);
    }
    mp_mc_calibration c;
    EXPECT(mp_mc_calibration_fit(&c, MP_CAL_ISOTONIC_MULTICLASS, alpha, C, p, y, n) == MP_OK,
           "isotonic-multiclass fit");
    mp_mc_calibration_apply(&c, tp, tn, cal, NULL);
    const double *want = rec_get(r, "isotonic_prob", 0, NULL);
    for (size_t i = 0; i < tnp; i++)
        EXPECT(fabs(cal[i] - want[i]) <= 1e-12, "isotonic_prob[%zu] = %.17g, Chemprop %.17g", i,
               cal[i], want[i]);
    mp_mc_calibration_free(&c);
    double nll = mp_unc_nll_multiclass(tp, ty, tn, C);
    EXPECT(fabs(nll - rec_get(r, "nll", 0, NULL)[0]) <= 1e-13, "nll %.17g", nll);
    free(set);
    free(cal);
    return ok;
}

/* One MVE weighting case: Chemprop's weights (scipy's fmin from theta = 1)
 * and the test variances they give. */
static int check_mve_case(const record *r, char *why, size_t why_n)
{
    int m = atoi(r->head + strlen("mve_weighting "));
    size_t n = 0, tvn = 0;
    const double *pred = rec_get(r, "pred", 0, &n), *y = rec_get(r, "target", 0, NULL),
                 *mv = rec_get(r, "member_var", 0, NULL),
                 *tmv = rec_get(r, "test_member_var", 0, &tvn),
                 *w = rec_get(r, "weights", 0, NULL), *tv = rec_get(r, "test_var", 0, NULL);
    if (!pred || !y || !mv || !tmv || !w || !tv || m < 1)
        return snprintf(why, why_n, "missing arrays"), 0;
    size_t tn = tvn / (size_t)m;
    int ok = 1;
    mp_cal_inputs in = { n, pred, mv, NULL, mv, m }, tin = { tn, NULL, tmv, NULL, tmv, m };
    mp_calibration c;
    EXPECT(mp_calibration_fit(&c, MP_CAL_MVE_WEIGHTING, 0.1, &in, y) == MP_OK, "mve fit: %s",
           mp_error_message());
    /* the same simplex steps as fmin; numpy's pairwise sums round the
     * objective otherwise, which moves the last steps by ~1e-9 */
    for (int k = 0; k < m; k++)
        EXPECT(fabs(c.w[k] - w[k]) <= 1e-7 * (1 + fabs(w[k])), "weight %d: %.17g, Chemprop "
               "%.17g", k, c.w[k], w[k]);
    double *u = malloc(sizeof(double) * tn);
    mp_calibration_apply(&c, &tin, u, NULL, NULL);
    for (size_t i = 0; i < tn; i++)
        EXPECT(fabs(u[i] - tv[i]) <= 1e-7 * tv[i], "test var %zu: %.17g, Chemprop %.17g", i,
               u[i], tv[i]);
    mp_calibration_free(&c);
    free(u);
    return ok;
}

static int check_dirichlet_case(const record *r, char *why, size_t why_n)
{
    int C = atoi(r->head + strlen("multiclass_dirichlet "));
    size_t nr = 0;
    const double *raw = rec_get(r, "raw", 0, &nr), *prob = rec_get(r, "prob", 0, NULL),
                 *u = rec_get(r, "u", 0, NULL);
    if (!raw || !prob || !u || C < 2)
        return snprintf(why, why_n, "missing arrays"), 0;
    size_t cells = nr / (size_t)C;
    double *p = malloc(sizeof(double) * nr), *uu = malloc(sizeof(double) * cells);
    mp_unc_multiclass_dirichlet(raw, 1, cells, C, p, uu);
    int ok = 1;
    for (size_t i = 0; i < nr; i++)
        EXPECT(fabs(p[i] - prob[i]) <= 1e-14, "prob %zu: %.17g vs %.17g", i, p[i], prob[i]);
    for (size_t i = 0; i < cells; i++)
        EXPECT(fabs(uu[i] - u[i]) <= 1e-14, "u %zu: %.17g vs %.17g", i, uu[i], u[i]);
    free(p);
    free(uu);
    return ok;
#undef EXPECT
}

MP_TEST(unc_mc_match_chemprop_v2)
{
    FILE *fp = fopen(FIXTURE, "r");
    CHECK_MSG(fp, "cannot open %s", FIXTURE);
    record r;
    int rc, n_mc = 0, n_mve = 0, n_dir = 0;
    char why[256] = "";
    while ((rc = record_next(fp, &r)) == 1) {
        int ok = 1;
        if (!strncmp(r.head, "multiclass_calibration", 22)) {
            ok = check_mc_case(&r, why, sizeof why);
            n_mc++;
        } else if (!strncmp(r.head, "mve_weighting", 13)) {
            ok = check_mve_case(&r, why, sizeof why);
            n_mve++;
        } else if (!strncmp(r.head, "multiclass_dirichlet", 20)) {
            ok = check_dirichlet_case(&r, why, sizeof why);
            n_dir++;
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
    CHECK(n_mc == 3 && n_mve == 3 && n_dir == 2);
}

/* ===================================================================== */
/* Worked out here                                                        */
/* ===================================================================== */

/* The APS score of class k: the mass of the classes more likely than k,
 * or as likely and not after it, plus its own. */
static double aps_by_hand(const double *p, int C, int k)
{
    double s = 0;
    for (int j = 0; j < C; j++)
        if (p[j] > p[k] || (p[j] == p[k] && j <= k))
            s += p[j];
    return s;
}

/* The 1-based rank of the score Chemprop's conformal quantile takes:
 * torch.quantile(s, level, "higher") is the sorted s at ceil(level (n-1)),
 * level = ceil((n+1)(1-alpha)) / n (1 when alpha < 1/(n+1)). */
static size_t conformal_rank(size_t n, double alpha)
{
    double level = alpha < 1.0 / (double)(n + 1) ? 1 : ceil((double)(n + 1) * (1 - alpha)) / n;
    return (size_t)ceil(level * (double)(n - 1)) + 1;
}

MP_TEST(unc_mc_conformal_by_hand)
{
    /* 7 molecules, 3 classes; alpha 0.4: level 5/7, rank ceil(30/7) + 1 = 6 */
    const double p[21] = { 0.7, 0.2, 0.1,  0.1, 0.6, 0.3,  0.3, 0.3, 0.4,  0.5, 0.1, 0.4,
                           0.2, 0.2, 0.6,  0.05, 0.9, 0.05, 0.45, 0.35, 0.2 };
    const double y[7] = { 0, 2, 0, 2, 1, 1, 1 };
    double s[7], a[7];
    for (int i = 0; i < 7; i++) {
        s[i] = -p[i * 3 + (int)y[i]];
        a[i] = aps_by_hand(p + i * 3, 3, (int)y[i]);
    }
    CHECK_EQ_INT(conformal_rank(7, 0.4), 6);
    double q = tu_kth_smallest(s, 7, 6), qa = tu_kth_smallest(a, 7, 6);
    CHECK_NEAR(q, -0.3, 0, 1e-15);   /* scores sorted: -.9 -.7 -.4 -.35 -.3 -.3 -.2 */
    mp_mc_calibration c;
    CHECK_OK(mp_mc_calibration_fit(&c, MP_CAL_CONFORMAL_MULTICLASS, 0.4, 3, p, y, 7));
    CHECK_NEAR(c.qhat, q, 0, 0);
    const double tp[6] = { 0.5, 0.3, 0.2,  0.85, 0.1, 0.05 };
    double set[6];
    /* sets: every class with p_k >= 0.3 */
    mp_mc_calibration_apply(&c, tp, 2, NULL, set);
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT((int)set[i], tp[i] >= -q);
    mp_mc_calibration_free(&c);
    CHECK_OK(mp_mc_calibration_fit(&c, MP_CAL_CONFORMAL_ADAPTIVE, 0.4, 3, p, y, 7));
    CHECK_NEAR(c.qhat, qa, 0, 0);
    mp_mc_calibration_apply(&c, tp, 2, NULL, set);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            CHECK_EQ_INT((int)set[i * 3 + j], aps_by_hand(tp + i * 3, 3, j) <= qa);
    mp_mc_calibration_free(&c);
    /* the APS scores of one molecule, by hand: order 0, 2, 1 */
    double sc[3];
    mp_conformal_aps_scores((const double[]){ 0.5, 0.2, 0.3 }, 3, sc);
    CHECK_NEAR(sc[0], 0.5, 0, 1e-15);
    CHECK_NEAR(sc[2], 0.8, 0, 1e-15);
    CHECK_NEAR(sc[1], 1.0, 0, 1e-15);
    /* alpha below 1 / (n + 1): the whole range (the largest score) */
    CHECK_OK(mp_mc_calibration_fit(&c, MP_CAL_CONFORMAL_MULTICLASS, 0.1, 3, p, y, 7));
    CHECK_EQ_INT(conformal_rank(7, 0.1), 7);
    CHECK_NEAR(c.qhat, tu_kth_smallest(s, 7, 7), 0, 0);
    CHECK_NEAR(c.qhat, -0.2, 0, 1e-15);
    mp_mc_calibration_free(&c);
    /* the evaluators: -log p_y and the share of true classes in the set */
    const double sets[6] = { 1, 1, 0,  0, 0, 1 }, ty[2] = { 1, 0 };
    CHECK_NEAR(mp_unc_coverage_sets(sets, ty, 2, 3), 0.5, 0, 0);
    CHECK_NEAR(mp_unc_nll_multiclass(tp, ty, 2, 3), -(log(0.3) + log(0.85)) / 2, 0, 1e-15);
}

/* Isotonic regression of y on x at the distinct sorted points, by the
 * min-max formula: f_i = max_{j <= i} min_{k >= i} mean(y_j .. y_k). */
static void isotonic_minmax(const double *y, int n, double *f)
{
    for (int i = 0; i < n; i++) {
        double best = -INFINITY;
        for (int j = 0; j <= i; j++) {
            double lo = INFINITY;
            for (int k = i; k < n; k++) {
                double s = 0;
                for (int q = j; q <= k; q++)
                    s += y[q];
                lo = fmin(lo, s / (k - j + 1));
            }
            best = fmax(best, lo);
        }
        f[i] = best;
    }
}

MP_TEST(unc_mc_isotonic_by_hand)
{
    /* 6 molecules, 3 classes, every class's probabilities distinct */
    const double p[18] = { 0.60, 0.30, 0.10,  0.20, 0.50, 0.30,  0.10, 0.15, 0.75,
                           0.40, 0.35, 0.25,  0.30, 0.20, 0.50,  0.50, 0.40, 0.10 };
    const double y[6] = { 0, 1, 2, 1, 0, 0 };
    double xs[3][6], fs[3][6];
    for (int k = 0; k < 3; k++) {
        /* class k's points in increasing x, their one-vs-all labels */
        int order[6] = { 0, 1, 2, 3, 4, 5 };
        for (int a = 1; a < 6; a++)
            for (int b = a; b > 0 && p[order[b] * 3 + k] < p[order[b - 1] * 3 + k]; b--) {
                int t = order[b];
                order[b] = order[b - 1];
                order[b - 1] = t;
            }
        double lab[6];
        for (int i = 0; i < 6; i++) {
            xs[k][i] = p[order[i] * 3 + k];
            lab[i] = y[order[i]] == k;
        }
        isotonic_minmax(lab, 6, fs[k]);
    }
    mp_mc_calibration c;
    CHECK_OK(mp_mc_calibration_fit(&c, MP_CAL_ISOTONIC_MULTICLASS, 0.1, 3, p, y, 6));
    /* a fitted point of every class, one between points, one past the end */
    const double tp[9] = { 0.60, 0.15, 0.50,  0.45, 0.45, 0.10,  0.05, 0.95, 0.20 };
    double got[9];
    mp_mc_calibration_apply(&c, tp, 3, got, NULL);
    for (int i = 0; i < 3; i++) {
        double v[3], sum = 0;
        for (int k = 0; k < 3; k++) {
            double t = tp[i * 3 + k];
            const double *x = xs[k], *f = fs[k];
            if (t <= x[0])
                v[k] = f[0];
            else if (t >= x[5])
                v[k] = f[5];
            else {
                int j = 0;
                while (x[j + 1] < t)
                    j++;
                v[k] = f[j] + (t - x[j]) / (x[j + 1] - x[j]) * (f[j + 1] - f[j]);
            }
            sum += v[k];
        }
        for (int k = 0; k < 3; k++)
            CHECK_NEAR(got[i * 3 + k], v[k] / sum, 1e-15, 1e-13);
    }
    mp_mc_calibration_free(&c);
}

/* The Gaussian NLL of weights (w, 1 - w) over two members' variances. */
static double nll2(double w, const double *pred, const double *y, const double *mv, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double v = w * mv[i] + (1 - w) * mv[n + i], e = pred[i] - y[i];
        s += log(2 * M_PI * v) / 2 + e * e / (2 * v);
    }
    return s;
}

MP_TEST(unc_mve_weighting_by_hand)
{
    /* member 0 says 0.25 everywhere, member 1 says 4: the errors' squares
     * average 1, so the best mixture is about w 0.8 (0.8 .25 + .2 4 = 1) */
    const double pred[6] = { 0, 0, 0, 0, 0, 0 }, y[6] = { 1, -1, 1.5, -0.5, 0.7, -1.1 };
    double mv[12];
    for (int i = 0; i < 6; i++) {
        mv[i] = 0.25;
        mv[6 + i] = 4;
    }
    mp_cal_inputs in = { 6, pred, mv, NULL, mv, 2 };
    mp_calibration c;
    CHECK_OK(mp_calibration_fit(&c, MP_CAL_MVE_WEIGHTING, 0.1, &in, y));
    CHECK_NEAR(c.w[0] + c.w[1], 1, 0, 1e-15);
    double best = INFINITY, wbest = 0;
    for (int k = 0; k <= 100000; k++) {
        double w = k / 100000.0, f = nll2(w, pred, y, mv, 6);
        if (f < best) {
            best = f;
            wbest = w;
        }
    }
    CHECK_NEAR(c.w[0], wbest, 2e-3, 0);
    CHECK(nll2(c.w[0], pred, y, mv, 6) <= best + 1e-6);
    /* applied: the weighted sum of the members' variances */
    double u[6];
    mp_calibration_apply(&c, &in, u, NULL, NULL);
    CHECK_NEAR(u[0], c.w[0] * 0.25 + c.w[1] * 4, 0, 1e-15);
    mp_calibration_free(&c);
    /* one member: weight 1, the variance itself */
    in.n_members = 1;
    CHECK_OK(mp_calibration_fit(&c, MP_CAL_MVE_WEIGHTING, 0.1, &in, y));
    CHECK_NEAR(c.w[0], 1, 0, 0);
    mp_calibration_free(&c);
}

MP_TEST(unc_mc_dirichlet_by_hand)
{
    /* 2 members, 1 molecule, 2 classes: alpha = softplus(z) + 1 */
    const double raw[4] = { 0, 1, 2, -1 };
    double p[2], u;
    mp_unc_multiclass_dirichlet(raw, 2, 1, 2, p, &u);
    double a00 = log(2) + 1, a01 = log1p(exp(1)) + 1, a10 = log1p(exp(2)) + 1,
           a11 = log1p(exp(-1)) + 1;
    CHECK_NEAR(p[0], (a00 / (a00 + a01) + a10 / (a10 + a11)) / 2, 0, 1e-15);
    CHECK_NEAR(p[1], (a01 / (a00 + a01) + a11 / (a10 + a11)) / 2, 0, 1e-15);
    CHECK_NEAR(u, (2 / (a00 + a01) + 2 / (a10 + a11)) / 2, 0, 1e-15);
}

/* ===================================================================== */
/* Bad input                                                              */
/* ===================================================================== */

MP_TEST(unc_mc_calibrator_bad_input)
{
    const double p[6] = { 0.5, 0.3, 0.2, 0.1, 0.1, 0.8 };
    mp_mc_calibration c;
    CHECK(mp_mc_calibration_fit(&c, MP_CAL_CONFORMAL_MULTICLASS, 0.1, 3, p,
                                (const double[]){ 0, 3 }, 2) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "molecule 1") && strstr(mp_error_message(), "not a class"));
    CHECK(mp_mc_calibration_fit(&c, MP_CAL_ISOTONIC_MULTICLASS, 0.1, 3, p,
                                (const double[]){ 0.5, 1 }, 2) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "molecule 0") != NULL);
    CHECK(mp_mc_calibration_fit(&c, MP_CAL_CONFORMAL_ADAPTIVE, 0.1, 3, p,
                                (const double[]){ 0, 1 }, 0) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "no labelled") != NULL);
    CHECK(mp_mc_calibration_fit(&c, MP_CAL_PLATT, 0.1, 3, p, (const double[]){ 0, 1 }, 2) ==
          MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "platt") != NULL);
    CHECK(mp_mc_calibration_fit(&c, MP_CAL_CONFORMAL_MULTICLASS, 1.5, 3, p,
                                (const double[]){ 0, 1 }, 2) == MP_ERR_ARG);
    mp_calibrator k;
    CHECK_OK(mp_calibrator_parse("conformal-multiclass", &k));
    CHECK_EQ_INT(k, MP_CAL_CONFORMAL_MULTICLASS);
    CHECK_OK(mp_calibrator_parse("Isotonic-Multiclass", &k));
    CHECK_EQ_INT(k, MP_CAL_ISOTONIC_MULTICLASS);
    CHECK(mp_calibrator_fits_multiclass(MP_CAL_CONFORMAL_ADAPTIVE));
    CHECK(!mp_calibrator_fits_multiclass(MP_CAL_ISOTONIC));
    /* mve-weighting without member variances, or more members than fit */
    double pred[2] = { 0, 1 }, var[2] = { 1, 1 }, y[2] = { 0, 1 };
    mp_cal_inputs in = { 2, pred, var, NULL, NULL, 0 };
    mp_calibration cc;
    CHECK(mp_calibration_fit(&cc, MP_CAL_MVE_WEIGHTING, 0.1, &in, y) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "mve-weighting") != NULL);
}
