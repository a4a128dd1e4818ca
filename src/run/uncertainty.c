/*
 * uncertainty.c - the estimators of uncertainty.h, pure functions of model
 * outputs (Chemprop v2.3.1's uncertainty/estimator.py).
 */
#include "run/uncertainty.h"

#include <math.h>
#include <string.h>

static const char *const method_names[MP_UNC_COUNT] = {
    "none", "ensemble", "dropout", "mve", "evidential-total", "evidential-epistemic",
    "evidential-aleatoric", "quantile", "dirichlet"
};

mp_status mp_unc_method_parse(const char *s, mp_unc_method *out)
{
    for (int m = 0; m < MP_UNC_COUNT; m++)
        if (mp_strcaseeq(s, method_names[m])) {
            *out = (mp_unc_method)m;
            return MP_OK;
        }
    if (mp_strcaseeq(s, "evidential")) {
        *out = MP_UNC_EVIDENTIAL_TOTAL;
        return MP_OK;
    }
    return mp_error_set(MP_ERR_ARG, "unknown uncertainty method '%s' (none, ensemble, dropout, "
                        "mve, evidential, evidential-epistemic, evidential-aleatoric, quantile, "
                        "dirichlet)", s);
}

const char *mp_unc_method_name(mp_unc_method m)
{
    return m >= 0 && m < MP_UNC_COUNT ? method_names[m] : "?";
}

int mp_unc_method_needs_head(mp_unc_method m)
{
    return m >= MP_UNC_MVE && m < MP_UNC_COUNT;
}

int mp_unc_head_values(mp_unc_method m)
{
    switch (m) {
    case MP_UNC_MVE:
    case MP_UNC_QUANTILE:
    case MP_UNC_DIRICHLET:
        return 2;
    case MP_UNC_EVIDENTIAL_TOTAL:
    case MP_UNC_EVIDENTIAL_EPISTEMIC:
    case MP_UNC_EVIDENTIAL_ALEATORIC:
        return 4;
    default:
        return 1;
    }
}

/* Mean and ddof-0 variance of n values x[0], x[stride], ...: two passes. */
static void mean_var(const double *x, int n, size_t stride, double *mean, double *var)
{
    double mu = 0, ss = 0;
    for (int k = 0; k < n; k++)
        mu += x[(size_t)k * stride];
    mu /= n;
    for (int k = 0; k < n; k++) {
        double d = x[(size_t)k * stride] - mu;
        ss += d * d;
    }
    *mean = mu;
    *var = ss / n;
}

void mp_unc_ensemble(const double *vals, int m, size_t cells, double *mean, double *var)
{
    for (size_t c = 0; c < cells; c++)
        mean_var(vals + c, m, cells, &mean[c], &var[c]);
}

void mp_unc_dropout(const double *vals, int m, int s, size_t cells, double *mean, double *var)
{
    for (size_t c = 0; c < cells; c++) {
        double mu = 0, v = 0;
        for (int k = 0; k < m; k++) {
            double mk, vk;
            mean_var(vals + (size_t)k * s * cells + c, s, cells, &mk, &vk);
            mu += mk;
            v += vk;
        }
        mean[c] = mu / m;
        var[c] = v / m;
    }
}

void mp_unc_from_head(mp_unc_method method, const double *head, int m, size_t cells,
                      double *mean, double *unc, double *lower, double *upper)
{
    int v = mp_unc_head_values(method);
    for (size_t c = 0; c < cells; c++) {
        double mu = 0, u = 0, lo = 0, up = 0;
        for (int k = 0; k < m; k++) {
            const double *h = head + ((size_t)k * cells + c) * (size_t)v;
            double uk;
            switch (method) {
            case MP_UNC_EVIDENTIAL_TOTAL:
                uk = (1 + 1 / h[1]) * h[3] / (h[2] - 1);
                break;
            case MP_UNC_EVIDENTIAL_EPISTEMIC:
                uk = h[3] / (h[1] * (h[2] - 1));
                break;
            case MP_UNC_EVIDENTIAL_ALEATORIC:
                uk = h[3] / (h[2] - 1);
                break;
            case MP_UNC_QUANTILE:
                uk = h[1] / 2;
                lo += h[0] - uk;
                up += h[0] + uk;
                break;
            default:   /* mve: (mean, variance); dirichlet: (probability, u) */
                uk = h[1];
                break;
            }
            mu += h[0];
            u += uk;
        }
        mean[c] = mu / m;
        unc[c] = u / m;
        if (lower)
            lower[c] = method == MP_UNC_QUANTILE ? lo / m : NAN;
        if (upper)
            upper[c] = method == MP_UNC_QUANTILE ? up / m : NAN;
    }
}

/* As heads.c computes it, so that the probabilities match a plain
 * prediction's bit for bit. */
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

void mp_unc_multiclass_dirichlet(const double *raw, int m, size_t cells, int C, double *prob,
                                 double *u)
{
    for (size_t c = 0; c < cells; c++) {
        double *pc = prob + c * (size_t)C, us = 0;
        for (int j = 0; j < C; j++)
            pc[j] = 0;
        for (int k = 0; k < m; k++) {
            const double *z = raw + ((size_t)k * cells + c) * (size_t)C;
            double s = 0;
            for (int j = 0; j < C; j++)
                s += softplus(z[j]) + 1;
            for (int j = 0; j < C; j++)
                pc[j] += (softplus(z[j]) + 1) / s;
            us += C / s;
        }
        for (int j = 0; j < C; j++)
            pc[j] /= m;
        u[c] = us / m;
    }
}
