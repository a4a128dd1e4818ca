/*
 * bench_stats.c - the few statistics the benchmark reports: mean and
 * spread over seeds, and the paired t-test that says whether two tools
 * differ on the same splits (Student's t distribution through the
 * regularized incomplete beta function, evaluated by its continued
 * fraction with the modified Lentz method).
 */
#include "bench/bench.h"

#include <math.h>
#include <string.h>

void mp_bench_mean_std(const double *x, size_t n, double *mean, double *std, size_t *n_used)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            sum += x[i];
            k++;
        }
    if (n_used)
        *n_used = k;
    if (k == 0) {
        *mean = *std = NAN;
        return;
    }
    double m = sum / (double)k, ss = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]))
            ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    *std = sqrt(ss / (double)k);
}

/* The continued fraction of the incomplete beta function I_x(a, b). */
static double beta_cf(double a, double b, double x)
{
    const double tiny = 1e-300, eps = 1e-15;
    double qab = a + b, qap = a + 1, qam = a - 1;
    double c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny)
        d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 300; m++) {
        double m2 = 2.0 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny)
            d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny)
            d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny)
            c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < eps)
            break;
    }
    return h;
}

/* The regularized incomplete beta function I_x(a, b), 0 <= x <= 1. */
static double beta_inc(double a, double b, double x)
{
    if (x <= 0)
        return 0;
    if (x >= 1)
        return 1;
    double ln_front = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    double front = exp(ln_front);
    if (x < (a + 1) / (a + b + 2))
        return front * beta_cf(a, b, x) / a;
    return 1 - front * beta_cf(b, a, 1 - x) / b;
}

double mp_bench_t_two_sided_p(double t, double df)
{
    if (isnan(t) || !(df > 0))
        return NAN;
    if (isinf(t))
        return 0;
    return beta_inc(df / 2, 0.5, df / (df + t * t));
}

void mp_bench_paired_t(const double *a, const double *b, size_t n, double *t, double *p)
{
    double d[MP_BENCH_MAX_LIST];
    size_t k = 0;
    for (size_t i = 0; i < n && k < MP_BENCH_MAX_LIST; i++)
        if (isfinite(a[i]) && isfinite(b[i]))
            d[k++] = a[i] - b[i];
    *t = *p = NAN;
    if (k < 2)
        return;
    double mean = 0, ss = 0;
    for (size_t i = 0; i < k; i++)
        mean += d[i];
    mean /= (double)k;
    for (size_t i = 0; i < k; i++)
        ss += (d[i] - mean) * (d[i] - mean);
    double sd = sqrt(ss / (double)(k - 1));
    if (sd == 0) {   /* every difference the same */
        *t = mean == 0 ? 0 : copysign(INFINITY, mean);
        *p = mean == 0 ? 1 : 0;
        return;
    }
    *t = mean / (sd / sqrt((double)k));
    *p = mp_bench_t_two_sided_p(*t, (double)(k - 1));
}

int mp_bench_higher_is_better(const char *metric)
{
    return !strcmp(metric, "auc") || !strcmp(metric, "prc-auc") || !strcmp(metric, "accuracy") ||
           !strcmp(metric, "r2");
}
