/*
 * unc_metrics.c - uncertainty metrics (unc_metrics.h), Chemprop v2.3.1's
 * definitions (uncertainty/evaluator.py), checked against numpy / scipy
 * (tests/fixtures/make_unc_fixtures.py, tests/test_unc.c).
 */
#include "data/unc_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Names                                                                  */
/* ===================================================================== */

static const char *const names[MP_UNC_METRIC_COUNT] = {
    "nll", "miscalibration-area", "ence", "spearman", "coverage"
};

mp_status mp_unc_metric_parse(const char *name, mp_unc_metric *out)
{
    for (int m = 0; m < MP_UNC_METRIC_COUNT; m++)
        if (mp_strcaseeq(name, names[m])) {
            *out = (mp_unc_metric)m;
            return MP_OK;
        }
    if (mp_strcaseeq(name, "miscalibration_area")) {
        *out = MP_UNC_METRIC_MISCAL_AREA;
        return MP_OK;
    }
    if (mp_strcaseeq(name, "conformal-coverage")) {
        *out = MP_UNC_METRIC_COVERAGE;
        return MP_OK;
    }
    return mp_error_set(MP_ERR_ARG, "unknown uncertainty metric '%s' (nll, miscalibration-area, "
                        "ence, spearman, coverage)", name);
}

const char *mp_unc_metric_name(mp_unc_metric m)
{
    return m >= 0 && m < MP_UNC_METRIC_COUNT ? names[m] : "?";
}

mp_status mp_unc_metric_list_parse(const char *list, mp_unc_metric *out, int *n)
{
    *n = 0;
    const char *p = list ? list : "";
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item)
            return mp_error_set(MP_ERR_ARG, "uncertainty metrics '%s': empty or overlong item",
                                list);
        memcpy(item, p, len);
        item[len] = 0;
        mp_unc_metric m;
        mp_status st = mp_unc_metric_parse(item, &m);
        if (st)
            return st;
        for (int k = 0; k < *n; k++)
            if (out[k] == m)
                return mp_error_set(MP_ERR_ARG, "uncertainty metrics '%s': %s twice", list, item);
        out[(*n)++] = m;
        p += len + (comma != NULL);
    }
    if (*n == 0)
        return mp_error_set(MP_ERR_ARG, "uncertainty metrics: none given");
    return MP_OK;
}

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

double mp_erfinv(double x)
{
    if (isnan(x) || x < -1 || x > 1)
        return NAN;
    if (x == 1)
        return INFINITY;
    if (x == -1)
        return -INFINITY;
    /* Giles' single-precision approximation as the start ... */
    double w = -log((1.0 - x) * (1.0 + x)), r;
    if (w < 5.0) {
        w -= 2.5;
        r = 2.81022636e-08;
        r = 3.43273939e-07 + r * w;
        r = -3.5233877e-06 + r * w;
        r = -4.39150654e-06 + r * w;
        r = 0.00021858087 + r * w;
        r = -0.00125372503 + r * w;
        r = -0.00417768164 + r * w;
        r = 0.246640727 + r * w;
        r = 1.50140941 + r * w;
    } else {
        w = sqrt(w) - 3.0;
        r = -0.000200214257;
        r = 0.000100950558 + r * w;
        r = 0.00134934322 + r * w;
        r = -0.00367342844 + r * w;
        r = 0.00573950773 + r * w;
        r = -0.0076224613 + r * w;
        r = 0.00943887047 + r * w;
        r = 1.00167406 + r * w;
        r = 2.83297682 + r * w;
    }
    r *= x;
    /* ... then Newton on erf(r) = x (d erf / dr = 2/sqrt(pi) exp(-r^2)); in
     * the tails on erfc(|r|) = 1 - |x|, which keeps its digits */
    double ax = fabs(x), ar = fabs(r);
    for (int it = 0; it < 4; it++) {
        double err = ax > 0.5 ? (1 - ax) - erfc(ar) : erf(ar) - ax;
        ar -= err / (1.1283791670955126 * exp(-ar * ar));
    }
    return x < 0 ? -ar : ar;
}

typedef struct {
    double v;
    size_t i;
} keyed;

/* By value, then by index: a stable order. */
static int keyed_cmp(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->v < y->v)
        return -1;
    if (x->v > y->v)
        return 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

void mp_rank_average(const double *x, size_t n, double *r)
{
    keyed *k = mp_malloc(sizeof *k * (n ? n : 1));
    if (!k) {   /* no memory: a plain O(n^2) count, same result */
        for (size_t i = 0; i < n; i++) {
            double lt = 0, eq = 0;
            for (size_t j = 0; j < n; j++)
                lt += x[j] < x[i], eq += x[j] == x[i];
            r[i] = lt + (eq + 1) / 2;
        }
        return;
    }
    for (size_t i = 0; i < n; i++)
        k[i] = (keyed){ x[i], i };
    qsort(k, n, sizeof *k, keyed_cmp);
    for (size_t a = 0; a < n;) {
        size_t z = a + 1;
        while (z < n && k[z].v == k[a].v)
            z++;
        double rank = (double)(a + 1 + z) / 2;   /* mean of ranks a+1 .. z */
        for (size_t j = a; j < z; j++)
            r[k[j].i] = rank;
        a = z;
    }
    mp_free(k);
}

/* ===================================================================== */
/* Metrics                                                                */
/* ===================================================================== */

double mp_unc_nll_regression(const double *pred, const double *var, const double *y, size_t n)
{
    if (n == 0)
        return NAN;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = pred[i] - y[i];
        s += log(2 * M_PI * var[i]) / 2 + e * e / (2 * var[i]);
    }
    return s / (double)n;
}

double mp_unc_nll_binary(const double *prob, const double *y, size_t n)
{
    if (n == 0)
        return NAN;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s -= log(prob[i] * y[i] + (1 - prob[i]) * (1 - y[i]));
    return s / (double)n;
}

double mp_unc_miscalibration_area(const double *pred, const double *var, const double *y,
                                  size_t n, int bins)
{
    if (n == 0 || bins < 1)
        return NAN;
    double area = 0;
    /* k = 0 and k = bins add |0 - 0| and |1 - 1| */
    for (int k = 1; k < bins; k++) {
        double scale = mp_erfinv((double)k / bins) * sqrt(2.0);
        size_t in = 0;
        for (size_t i = 0; i < n; i++)
            in += sqrt(var[i]) * scale >= fabs(pred[i] - y[i]);
        area += fabs((double)in / (double)n - (double)k / bins);
    }
    return area / bins;
}

double mp_unc_ence(const double *pred, const double *var, const double *y, size_t n, int bins)
{
    if (n == 0 || bins < 1)
        return NAN;
    keyed *k = mp_malloc(sizeof *k * n);
    if (!k)
        return NAN;
    for (size_t i = 0; i < n; i++)
        k[i] = (keyed){ var[i], i };
    qsort(k, n, sizeof *k, keyed_cmp);
    size_t size = (n + (size_t)bins - 1) / (size_t)bins;   /* torch.chunk's chunk size */
    double sum = 0;
    size_t chunks = 0;
    for (size_t a = 0; a < n; a += size, chunks++) {
        size_t z = a + size < n ? a + size : n;
        double mv = 0, mse = 0;
        for (size_t j = a; j < z; j++) {
            double e = pred[k[j].i] - y[k[j].i];
            mv += k[j].v;
            mse += e * e;
        }
        double rmv = sqrt(mv / (double)(z - a)), rmse = sqrt(mse / (double)(z - a));
        sum += fabs(rmv - rmse) / rmv;
    }
    mp_free(k);
    return sum / (double)chunks;
}

double mp_unc_spearman(const double *pred, const double *var, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double *buf = mp_malloc(sizeof(double) * 3 * n);
    if (!buf)
        return NAN;
    double *err = buf, *ru = buf + n, *re = buf + 2 * n;
    for (size_t i = 0; i < n; i++)
        err[i] = fabs(pred[i] - y[i]);
    mp_rank_average(var, n, ru);
    mp_rank_average(err, n, re);
    double mu = (double)(n + 1) / 2, sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        double a = ru[i] - mu, b = re[i] - mu;
        sxy += a * b;
        sxx += a * a;
        syy += b * b;
    }
    mp_free(buf);
    if (sxx == 0 || syy == 0)
        return NAN;
    return sxy / sqrt(sxx * syy);
}

double mp_unc_nll_multiclass(const double *prob, const double *y, size_t n, int C)
{
    if (n == 0)
        return NAN;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s -= log(prob[i * (size_t)C + (size_t)y[i]]);
    return s / (double)n;
}

double mp_unc_coverage_sets(const double *in_set, const double *y, size_t n, int C)
{
    if (n == 0)
        return NAN;
    size_t in = 0;
    for (size_t i = 0; i < n; i++)
        in += in_set[i * (size_t)C + (size_t)y[i]] > 0;
    return (double)in / (double)n;
}

double mp_unc_coverage_multilabel(const double *in_set, const double *out_set, const double *y,
                                  size_t n, size_t n_tasks, size_t *n_used)
{
    size_t used = 0, held = 0;
    for (size_t i = 0; i < n; i++) {
        int seen = 0, ok = 1;
        for (size_t k = i * n_tasks; k < (i + 1) * n_tasks; k++) {
            if (isnan(y[k]) || isnan(in_set[k]) || isnan(out_set[k]))
                continue;
            seen = 1;
            if (y[k] == 1 ? !(out_set[k] > 0) : in_set[k] > 0)
                ok = 0;   /* a positive outside C_out, or a negative inside C_in */
        }
        used += seen;
        held += seen && ok;
    }
    if (n_used)
        *n_used = used;
    return used ? (double)held / (double)used : NAN;
}

double mp_unc_coverage(const double *lower, const double *upper, const double *y, size_t n)
{
    if (n == 0)
        return NAN;
    size_t in = 0;
    for (size_t i = 0; i < n; i++)
        in += lower[i] <= y[i] && y[i] <= upper[i];
    return (double)in / (double)n;
}
