/*
 * calibrate.c - the uncertainty calibrators of calibrate.h: fit on a
 * labelled calibration set, apply to new predictions.  Chemprop v2.3.1's
 * definitions; the optimizer is our Nelder-Mead with scipy fmin's rules.
 */
#include "run/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Names                                                                  */
/* ===================================================================== */

static const char *const cal_names[MP_CAL_COUNT] = {
    "none", "zscaling", "zelikman", "mve-weighting", "conformal", "conformal-adaptive",
    "platt", "isotonic", "conformal-multiclass", "isotonic-multiclass", "conformal-multilabel"
};

mp_status mp_calibrator_parse(const char *s, mp_calibrator *out)
{
    for (int c = 0; c < MP_CAL_COUNT; c++)
        if (mp_strcaseeq(s, cal_names[c])) {
            *out = (mp_calibrator)c;
            return MP_OK;
        }
    if (mp_strcaseeq(s, "zelikman-interval")) {
        *out = MP_CAL_ZELIKMAN;
        return MP_OK;
    }
    if (mp_strcaseeq(s, "conformal-regression")) {
        *out = MP_CAL_CONFORMAL;
        return MP_OK;
    }
    return mp_error_set(MP_ERR_ARG, "unknown calibration '%s' (zscaling, zelikman, "
                        "mve-weighting, conformal, conformal-adaptive, platt, isotonic, "
                        "conformal-multiclass, isotonic-multiclass, conformal-multilabel)", s);
}

const char *mp_calibrator_name(mp_calibrator c)
{
    return c >= 0 && c < MP_CAL_COUNT ? cal_names[c] : "?";
}

int mp_calibrator_is_classification(mp_calibrator c)
{
    return c == MP_CAL_PLATT || c == MP_CAL_ISOTONIC;
}

int mp_calibrator_makes_interval(mp_calibrator c)
{
    return c == MP_CAL_ZELIKMAN || c == MP_CAL_CONFORMAL || c == MP_CAL_CONFORMAL_ADAPTIVE;
}

int mp_calibrator_fits_multiclass(mp_calibrator c)
{
    return c == MP_CAL_CONFORMAL_MULTICLASS || c == MP_CAL_CONFORMAL_ADAPTIVE ||
           c == MP_CAL_ISOTONIC_MULTICLASS;
}

/* ===================================================================== */
/* Building blocks                                                        */
/* ===================================================================== */

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double mp_quantile_lower(double *x, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(x, n, sizeof *x, dbl_cmp);
    double pos = q * (double)(n - 1);
    size_t i = (size_t)floor(pos);
    return x[i < n ? i : n - 1];
}

double mp_quantile_higher(double *x, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(x, n, sizeof *x, dbl_cmp);
    double pos = q * (double)(n - 1);
    size_t i = (size_t)ceil(pos);
    return x[i < n ? i : n - 1];
}

double mp_conformal_level(size_t n, double alpha)
{
    if (n == 0 || alpha < 1.0 / (double)(n + 1))
        return 1.0;
    double q = ceil((double)(n + 1) * (1 - alpha)) / (double)n;
    return q < 1 ? q : 1;
}

#define NM_MAX_D 16

/* The simplex of mp_nelder_mead: vertices, values, and the evaluation
 * budget (scipy raises once it is spent, abandoning the step under way). */
typedef struct {
    double (*f)(const double *x, void *ctx);
    void  *ctx;
    int    d, fcalls, max_fun;
    double sim[NM_MAX_D + 1][NM_MAX_D], fs[NM_MAX_D + 1];
} nm_state;

/* f(x) into *fx; 0 when the budget is spent (nothing evaluated). */
static int nm_eval(nm_state *s, const double *x, double *fx)
{
    if (s->fcalls >= s->max_fun)
        return 0;
    s->fcalls++;
    *fx = s->f(x, s->ctx);
    return 1;
}

/* Vertices by value (insertion: stable; d is small). */
static void nm_sort(nm_state *s)
{
    for (int a = 1; a <= s->d; a++)
        for (int b = a; b > 0 && s->fs[b] < s->fs[b - 1]; b--) {
            double t = s->fs[b];
            s->fs[b] = s->fs[b - 1];
            s->fs[b - 1] = t;
            for (int j = 0; j < s->d; j++) {
                t = s->sim[b][j];
                s->sim[b][j] = s->sim[b - 1][j];
                s->sim[b - 1][j] = t;
            }
        }
}

static void nm_take(nm_state *s, const double *x, double fx)
{
    memcpy(s->sim[s->d], x, sizeof(double) * (size_t)s->d);
    s->fs[s->d] = fx;
}

/* One step of scipy's _minimize_neldermead (rho 1, chi 2, psi 0.5, sigma
 * 0.5); 0 when the budget ran out during it. */
static int nm_step(nm_state *s)
{
    const double rho = 1, chi = 2, psi = 0.5, sigma = 0.5;
    int d = s->d;
    double xbar[NM_MAX_D], xr[NM_MAX_D], xe[NM_MAX_D], xc[NM_MAX_D], fxr, fxe, fxc;
    for (int j = 0; j < d; j++) {
        double sum = 0;
        for (int k = 0; k < d; k++)
            sum += s->sim[k][j];
        xbar[j] = sum / d;
        xr[j] = (1 + rho) * xbar[j] - rho * s->sim[d][j];
    }
    if (!nm_eval(s, xr, &fxr))
        return 0;
    int shrink = 0;
    if (fxr < s->fs[0]) {
        for (int j = 0; j < d; j++)
            xe[j] = (1 + rho * chi) * xbar[j] - rho * chi * s->sim[d][j];
        if (!nm_eval(s, xe, &fxe))
            return 0;
        if (fxe < fxr)
            nm_take(s, xe, fxe);
        else
            nm_take(s, xr, fxr);
    } else if (fxr < s->fs[d - 1]) {
        nm_take(s, xr, fxr);
    } else if (fxr < s->fs[d]) {          /* contract outside */
        for (int j = 0; j < d; j++)
            xc[j] = (1 + psi * rho) * xbar[j] - psi * rho * s->sim[d][j];
        if (!nm_eval(s, xc, &fxc))
            return 0;
        if (fxc <= fxr)
            nm_take(s, xc, fxc);
        else
            shrink = 1;
    } else {                              /* contract inside */
        for (int j = 0; j < d; j++)
            xc[j] = (1 - psi) * xbar[j] + psi * s->sim[d][j];
        if (!nm_eval(s, xc, &fxc))
            return 0;
        if (fxc < s->fs[d])
            nm_take(s, xc, fxc);
        else
            shrink = 1;
    }
    for (int k = 1; shrink && k <= d; k++) {
        for (int j = 0; j < d; j++)
            s->sim[k][j] = s->sim[0][j] + sigma * (s->sim[k][j] - s->sim[0][j]);
        if (!nm_eval(s, s->sim[k], &s->fs[k]))
            return 0;
    }
    return 1;
}

double mp_nelder_mead(double (*f)(const double *x, void *ctx), void *ctx, double *x, int d)
{
    MP_ASSERT(d >= 1 && d <= NM_MAX_D);
    nm_state *s = mp_calloc(1, sizeof *s);
    if (!s) {
        double fx = f(x, ctx);
        return fx;   /* no memory: x unchanged */
    }
    s->f = f;
    s->ctx = ctx;
    s->d = d;
    s->max_fun = 200 * d;
    for (int k = 0; k <= d; k++) {
        memcpy(s->sim[k], x, sizeof(double) * (size_t)d);
        if (k > 0)
            s->sim[k][k - 1] = x[k - 1] != 0 ? 1.05 * x[k - 1] : 0.00025;
        nm_eval(s, s->sim[k], &s->fs[k]);
    }
    nm_sort(s);
    for (int iter = 0; iter < 200 * d && s->fcalls < s->max_fun; iter++) {
        double dx = 0, df = 0;
        for (int k = 1; k <= d; k++) {
            for (int j = 0; j < d; j++)
                dx = fmax(dx, fabs(s->sim[k][j] - s->sim[0][j]));
            df = fmax(df, fabs(s->fs[0] - s->fs[k]));
        }
        if (dx <= 1e-4 && df <= 1e-4)   /* xtol, ftol */
            break;
        if (!nm_step(s))
            break;                       /* as scipy: the last sorted best */
        nm_sort(s);
    }
    memcpy(x, s->sim[0], sizeof(double) * (size_t)d);
    double best = s->fs[0];
    mp_free(s);
    return best;
}

void mp_conformal_aps_scores(const double *p, int n_classes, double *score)
{
    /* classes by decreasing probability (ties: lower class first, as a
     * stable descending argsort) */
    int order[256];
    int c_n = n_classes < 256 ? n_classes : 256;
    for (int c = 0; c < c_n; c++)
        order[c] = c;
    for (int a = 1; a < c_n; a++)
        for (int b = a; b > 0 && p[order[b]] > p[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    double s = 0;
    for (int k = 0; k < c_n; k++) {
        s += p[order[k]];
        score[order[k]] = s;
    }
}

/* ===================================================================== */
/* Fitting                                                                */
/* ===================================================================== */

typedef struct {
    const mp_cal_inputs *in;
    const double        *y;
} fit_ctx;

/* Platt: the binary NLL of sigmoid(a logit(p) + b). */
static double platt_nll(const double *ab, void *vctx)
{
    const fit_ctx *c = vctx;
    double s = 0;
    for (size_t i = 0; i < c->in->n; i++) {
        double p = c->in->unc[i], z = ab[0] * log(p / (1 - p)) + ab[1];
        double q = 1 / (1 + exp(-z)), t = c->y[i];
        s -= t * log(q) + (1 - t) * log(1 - q);
    }
    return s;
}

/* MVE weighting: the Gaussian NLL of sum_k softmax(theta)_k var_k. */
static double mve_weight_nll(const double *theta, void *vctx)
{
    const fit_ctx *c = vctx;
    const mp_cal_inputs *in = c->in;
    int m = in->n_members;
    double w[NM_MAX_D], mx = theta[0], z = 0;
    for (int k = 1; k < m; k++)
        mx = fmax(mx, theta[k]);
    for (int k = 0; k < m; k++)
        z += (w[k] = exp(theta[k] - mx));
    double s = 0;
    for (size_t i = 0; i < in->n; i++) {
        double v = 0, e = in->pred[i] - c->y[i];
        for (int k = 0; k < m; k++)
            v += w[k] / z * in->member_var[(size_t)k * in->n + i];
        s += log(2 * M_PI * v) / 2 + e * e / (2 * v);
    }
    return s;
}

/* Isotonic: unique x (the mean y of ties, weighted by their count), then
 * pool-adjacent-violators into blocks, clipped to [0, 1]. */
typedef struct { double x, y; } iso_pt;

static int iso_cmp(const void *a, const void *b)
{
    const iso_pt *p = a, *q = b;
    return (p->x > q->x) - (p->x < q->x);
}

static mp_status fit_isotonic(mp_calibration *c, const double *x, const double *y, size_t n)
{
    iso_pt *p = mp_malloc(sizeof *p * n);
    double *uy = mp_malloc(sizeof(double) * n), *uw = mp_malloc(sizeof(double) * n);
    double *bm = mp_malloc(sizeof(double) * n), *bw = mp_malloc(sizeof(double) * n);
    size_t *bn = mp_malloc(sizeof(size_t) * n);
    c->iso_x = mp_malloc(sizeof(double) * n);
    c->iso_y = mp_malloc(sizeof(double) * n);
    mp_status st = MP_OK;
    if (!p || !uy || !uw || !bm || !bw || !bn || !c->iso_x || !c->iso_y) {
        st = mp_error_set(MP_ERR_NOMEM, "isotonic calibration: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (iso_pt){ x[i], y[i] };
    qsort(p, n, sizeof *p, iso_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double s = 0;
        while (j < n && p[j].x == p[i].x)
            s += p[j++].y;
        c->iso_x[u] = p[i].x;
        uy[u] = s / (double)(j - i);
        uw[u] = (double)(j - i);
        u++;
        i = j;
    }
    size_t nb = 0;
    for (size_t i = 0; i < u; i++) {
        double mean = uy[i], w = uw[i];
        size_t cnt = 1;
        while (nb > 0 && bm[nb - 1] >= mean) {   /* merge violators (and ties) */
            mean = (bm[nb - 1] * bw[nb - 1] + mean * w) / (bw[nb - 1] + w);
            w += bw[nb - 1];
            cnt += bn[nb - 1];
            nb--;
        }
        bm[nb] = mean;
        bw[nb] = w;
        bn[nb] = cnt;
        nb++;
    }
    for (size_t b = 0, at = 0; b < nb; b++)
        for (size_t k = 0; k < bn[b]; k++, at++)
            c->iso_y[at] = fmin(1.0, fmax(0.0, bm[b]));
    c->n_iso = u;
done:
    mp_free(p);
    mp_free(uy);
    mp_free(uw);
    mp_free(bm);
    mp_free(bw);
    mp_free(bn);
    return st;
}

mp_status mp_calibration_fit(mp_calibration *c, mp_calibrator kind, double alpha,
                             const mp_cal_inputs *in, const double *y)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->alpha = alpha;
    c->scale = 1;
    c->a = 1;
    size_t n = in->n;
    if (kind == MP_CAL_NONE)
        return MP_OK;
    if (n == 0)
        return mp_error_set(MP_ERR_ARG, "calibration (%s): no labelled molecules",
                            mp_calibrator_name(kind));
    if (!(alpha > 0 && alpha < 1))
        return mp_error_set(MP_ERR_ARG, "calibration: alpha = %g (must be in (0, 1))", alpha);
    int cls = mp_calibrator_is_classification(kind);
    for (size_t i = 0; i < n; i++) {
        if (cls && y[i] != 0 && y[i] != 1)
            return mp_error_set(MP_ERR_ARG, "calibration (%s): label %g of molecule %zu is not "
                                "0 or 1", mp_calibrator_name(kind), y[i], i);
        if (!cls && kind != MP_CAL_CONFORMAL && kind != MP_CAL_MVE_WEIGHTING &&
            !(in->unc[i] > 0 && isfinite(in->unc[i])))
            return mp_error_set(MP_ERR_ARG, "calibration (%s): variance %g of molecule %zu is "
                                "not positive", mp_calibrator_name(kind), in->unc[i], i);
    }
    double *s = mp_malloc(sizeof(double) * n);
    if (!s)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    mp_status st = MP_OK;
    fit_ctx ctx = { in, y };
    switch (kind) {
    case MP_CAL_ZSCALING: {
        double m = 0;
        for (size_t i = 0; i < n; i++) {
            double e = in->pred[i] - y[i];
            m += e * e / in->unc[i];
        }
        c->scale = sqrt(m / (double)n);
        break;
    }
    case MP_CAL_ZELIKMAN:
        for (size_t i = 0; i < n; i++)
            s[i] = fabs(in->pred[i] - y[i]) / sqrt(in->unc[i]);
        c->scale = mp_quantile_lower(s, n, 1 - alpha);
        break;
    case MP_CAL_MVE_WEIGHTING: {
        if (!in->member_var || in->n_members < 1 || in->n_members > NM_MAX_D) {
            st = mp_error_set(MP_ERR_ARG, "mve-weighting needs the variances of 1 to %d "
                              "ensemble members (an MVE model)", NM_MAX_D);
            break;
        }
        double theta[NM_MAX_D];
        for (int k = 0; k < in->n_members; k++)
            theta[k] = 1;
        mp_nelder_mead(mve_weight_nll, &ctx, theta, in->n_members);
        if (!(c->w = mp_malloc(sizeof(double) * (size_t)in->n_members))) {
            st = mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
            break;
        }
        double mx = theta[0], z = 0;
        for (int k = 1; k < in->n_members; k++)
            mx = fmax(mx, theta[k]);
        for (int k = 0; k < in->n_members; k++)
            z += (c->w[k] = exp(theta[k] - mx));
        for (int k = 0; k < in->n_members; k++)
            c->w[k] /= z;
        c->n_w = in->n_members;
        break;
    }
    case MP_CAL_CONFORMAL:
        for (size_t i = 0; i < n; i++) {
            double h = in->half ? in->half[i] : 0;
            s[i] = fmax(in->pred[i] - h - y[i], y[i] - in->pred[i] - h);
        }
        c->qhat = mp_quantile_higher(s, n, mp_conformal_level(n, alpha));
        break;
    case MP_CAL_CONFORMAL_ADAPTIVE:
        for (size_t i = 0; i < n; i++)
            s[i] = fabs(in->pred[i] - y[i]) / sqrt(in->unc[i]);
        c->qhat = mp_quantile_higher(s, n, mp_conformal_level(n, alpha));
        break;
    case MP_CAL_PLATT: {
        double ab[2] = { 1, 0 };
        mp_nelder_mead(platt_nll, &ctx, ab, 2);
        c->a = ab[0];
        c->b = ab[1];
        break;
    }
    case MP_CAL_ISOTONIC:
        st = fit_isotonic(c, in->unc, y, n);
        break;
    default:
        st = mp_error_set(MP_ERR_ARG, "calibration: unknown kind %d", (int)kind);
    }
    mp_free(s);
    if (st)
        mp_calibration_free(c);
    return st;
}

/* ===================================================================== */
/* Applying                                                               */
/* ===================================================================== */

/* The fitted piecewise-linear map at t, clipped to the fitted x range. */
static double iso_eval(const mp_calibration *c, double t)
{
    size_t n = c->n_iso;
    if (isnan(t) || n == 0)
        return NAN;
    if (t <= c->iso_x[0])
        return c->iso_y[0];
    if (t >= c->iso_x[n - 1])
        return c->iso_y[n - 1];
    size_t lo = 0, hi = n - 1;   /* iso_x[lo] < t < iso_x[hi] */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (c->iso_x[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    double f = (t - c->iso_x[lo]) / (c->iso_x[hi] - c->iso_x[lo]);
    return c->iso_y[lo] + f * (c->iso_y[hi] - c->iso_y[lo]);
}

void mp_calibration_apply(const mp_calibration *c, const mp_cal_inputs *in, double *unc_out,
                          double *lower, double *upper)
{
    for (size_t i = 0; i < in->n; i++) {
        double u = in->unc ? in->unc[i] : NAN, p = in->pred ? in->pred[i] : NAN, lo = NAN,
               up = NAN;
        switch (c->kind) {
        case MP_CAL_ZSCALING:
            u *= c->scale * c->scale;
            break;
        case MP_CAL_ZELIKMAN:
            u *= c->scale * c->scale;
            lo = p - sqrt(u);
            up = p + sqrt(u);
            break;
        case MP_CAL_MVE_WEIGHTING:
            u = 0;
            for (int k = 0; k < c->n_w; k++)
                u += c->w[k] * in->member_var[(size_t)k * in->n + i];
            break;
        case MP_CAL_CONFORMAL: {
            double h = (in->half ? in->half[i] : 0) + c->qhat;
            lo = p - h;
            up = p + h;
            break;
        }
        case MP_CAL_CONFORMAL_ADAPTIVE:
            lo = p - c->qhat * sqrt(u);
            up = p + c->qhat * sqrt(u);
            break;
        case MP_CAL_PLATT:
            u = 1 / (1 + exp(-(c->a * log(u / (1 - u)) + c->b)));
            break;
        case MP_CAL_ISOTONIC:
            u = iso_eval(c, u);
            break;
        default:
            break;
        }
        if (unc_out)
            unc_out[i] = u;
        if (lower)
            lower[i] = lo;
        if (upper)
            upper[i] = up;
    }
}

void mp_calibration_free(mp_calibration *c)
{
    mp_free(c->w);
    mp_free(c->iso_x);
    mp_free(c->iso_y);
    c->w = c->iso_x = c->iso_y = NULL;
    c->n_w = 0;
    c->n_iso = 0;
}

/* ===================================================================== */
/* Multiclass                                                             */
/* ===================================================================== */

/* The conformal score of class k for one molecule's probabilities p: -p_k
 * (conformal-multiclass) or the APS mass (conformal-adaptive); aps: a
 * buffer of n_classes. */
static double mc_score(mp_calibrator kind, const double *p, int n_classes, int k, double *aps)
{
    if (kind == MP_CAL_CONFORMAL_MULTICLASS)
        return -p[k];
    mp_conformal_aps_scores(p, n_classes, aps);
    return aps[k];
}

mp_status mp_mc_calibration_fit(mp_mc_calibration *c, mp_calibrator kind, double alpha,
                                int n_classes, const double *prob, const double *y, size_t n)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->alpha = alpha;
    c->n_classes = n_classes;
    const char *name = mp_calibrator_name(kind);
    if (!mp_calibrator_fits_multiclass(kind))
        return mp_error_set(MP_ERR_ARG, "calibration: %s does not calibrate a multiclass model "
                            "(conformal-multiclass, conformal-adaptive, isotonic-multiclass)",
                            name);
    if (n_classes < 2 || n_classes > 256)
        return mp_error_set(MP_ERR_ARG, "calibration (%s): %d classes (2 to 256)", name,
                            n_classes);
    if (n == 0)
        return mp_error_set(MP_ERR_ARG, "calibration (%s): no labelled molecules", name);
    if (!(alpha > 0 && alpha < 1))
        return mp_error_set(MP_ERR_ARG, "calibration: alpha = %g (must be in (0, 1))", alpha);
    for (size_t i = 0; i < n; i++)
        if (!(y[i] >= 0 && y[i] < n_classes && y[i] == floor(y[i])))
            return mp_error_set(MP_ERR_ARG, "calibration (%s): label %g of molecule %zu is not "
                                "a class (0 to %d)", name, y[i], i, n_classes - 1);
    size_t C = (size_t)n_classes;
    double *s = mp_malloc(sizeof(double) * (n > C ? n : C) * 2);
    if (!s)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    mp_status st = MP_OK;
    if (kind == MP_CAL_ISOTONIC_MULTICLASS) {
        /* one vs. all: class k's probabilities against [y == k] */
        double *x = s, *t = s + n;
        if (!(c->iso = mp_calloc(C, sizeof *c->iso)))
            st = mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
        for (size_t k = 0; st == MP_OK && k < C; k++) {
            for (size_t i = 0; i < n; i++) {
                x[i] = prob[i * C + k];
                t[i] = y[i] == (double)k;
            }
            c->iso[k].kind = MP_CAL_ISOTONIC;
            st = fit_isotonic(&c->iso[k], x, t, n);
        }
    } else {
        double *aps = s + (n > C ? n : C);
        for (size_t i = 0; i < n; i++)
            s[i] = mc_score(kind, prob + i * C, n_classes, (int)y[i], aps);
        c->qhat = mp_quantile_higher(s, n, mp_conformal_level(n, alpha));
    }
    mp_free(s);
    if (st)
        mp_mc_calibration_free(c);
    return st;
}

void mp_mc_calibration_apply(const mp_mc_calibration *c, const double *prob, size_t n,
                             double *prob_out, double *in_set)
{
    size_t C = (size_t)c->n_classes;
    double aps[256], cal[256];
    for (size_t i = 0; i < n; i++) {
        const double *p = prob + i * C;
        int bad = 0;
        for (size_t k = 0; k < C; k++)
            bad |= isnan(p[k]);
        if (c->kind == MP_CAL_ISOTONIC_MULTICLASS) {
            double sum = 0;
            for (size_t k = 0; k < C; k++)
                sum += (cal[k] = iso_eval(&c->iso[k], p[k]));
            for (size_t k = 0; prob_out && k < C; k++)
                prob_out[i * C + k] = bad ? NAN : cal[k] / sum;
        } else if (in_set) {
            if (c->kind == MP_CAL_CONFORMAL_ADAPTIVE && !bad)
                mp_conformal_aps_scores(p, (int)C, aps);
            for (size_t k = 0; k < C; k++) {
                double sc = c->kind == MP_CAL_CONFORMAL_ADAPTIVE ? aps[k] : -p[k];
                in_set[i * C + k] = bad ? NAN : sc <= c->qhat;
            }
        }
    }
}

void mp_mc_calibration_free(mp_mc_calibration *c)
{
    for (int k = 0; c->iso && k < c->n_classes; k++)
        mp_calibration_free(&c->iso[k]);
    mp_free(c->iso);
    c->iso = NULL;
}
