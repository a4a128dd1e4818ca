/*
 * scaler.c - Chemprop's StandardScaler: NaN-aware column means and standard
 * deviations, and the scaling both ways.
 */
/* x * std + mean must round twice, as NumPy does, even where the target has
 * fused multiply-add (-march=native). */
#pragma GCC optimize("fp-contract=off")

#include "scaler.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Fitting                                                                */
/* ===================================================================== */


/*
 * np.sum(X, axis=0) over an n x c matrix: with one column NumPy reduces the
 * contiguous column pairwise; with several it walks the rows and adds each
 * to a running row of sums, so every column is summed in plain order.
 */
static double column_sum(const double *col, size_t n, size_t n_cols)
{
    if (n_cols == 1)
        return mp_pairwise_sum(col, n);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += col[i];
    return s;
}

/* One column gathered (NaN -> 0, as np.nanmean's _replace_nan) then the
 * nanmean/nanstd arithmetic; `features` reads NaN as a real 0. */
static void fit_column(double *col, const unsigned char *missing, size_t n, size_t n_cols,
                       double *mean_out, double *std_out)
{
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++)
        cnt += !missing[i];
    double mean = column_sum(col, n, n_cols) / (double)cnt;   /* NaN when cnt == 0 */
    for (size_t i = 0; i < n; i++) {
        double d = missing[i] ? 0.0 : col[i] - mean;
        col[i] = d * d;
    }
    double var = column_sum(col, n, n_cols) / (double)cnt;
    double sd = sqrt(var);
    /* StandardScaler.fit: NaN mean -> 0, NaN std -> 1, zero std -> 1 */
    *mean_out = isnan(mean) ? 0.0 : mean;
    *std_out = isnan(sd) || sd == 0.0 ? 1.0 : sd;
}

static mp_status fit_any(mp_scaler *s, mp_scaler_kind kind, const double *xd, const float *xf,
                         size_t n_cols, const size_t *rows, size_t n_rows)
{
    memset(s, 0, sizeof *s);
    if (n_cols == 0)
        return mp_error_set(MP_ERR_ARG, "scaler: no columns to fit");
    double *mean = mp_malloc(n_cols * sizeof *mean);
    double *sd = mp_malloc(n_cols * sizeof *sd);
    double *col = mp_malloc((n_rows ? n_rows : 1) * sizeof *col);
    unsigned char *missing = mp_malloc(n_rows ? n_rows : 1);
    if (!mean || !sd || !col || !missing) {
        mp_free(mean);
        mp_free(sd);
        mp_free(col);
        mp_free(missing);
        return mp_error_set(MP_ERR_NOMEM, "out of memory fitting a scaler (%zu x %zu)",
                            n_rows, n_cols);
    }
    for (size_t c = 0; c < n_cols; c++) {
        for (size_t i = 0; i < n_rows; i++) {
            size_t r = rows ? rows[i] : i;
            double v = xd ? xd[r * n_cols + c] : (double)xf[r * n_cols + c];
            int nan = isnan(v);
            /* features: a NaN was already a 0 before Chemprop's scaler saw it */
            missing[i] = nan && kind == MP_SCALE_TARGETS;
            col[i] = nan ? 0.0 : v;
        }
        fit_column(col, missing, n_rows, n_cols, &mean[c], &sd[c]);
    }
    mp_free(col);
    mp_free(missing);
    s->kind = kind;
    s->n_cols = n_cols;
    s->mean = mean;
    s->std = sd;
    return MP_OK;
}

mp_status mp_scaler_fit(mp_scaler *s, mp_scaler_kind kind, const double *x, size_t n_cols,
                        const size_t *rows, size_t n_rows)
{
    return fit_any(s, kind, x, NULL, n_cols, rows, n_rows);
}

mp_status mp_scaler_fit_f32(mp_scaler *s, mp_scaler_kind kind, const float *x,
                            size_t n_cols, const size_t *rows, size_t n_rows)
{
    return fit_any(s, kind, NULL, x, n_cols, rows, n_rows);
}

mp_status mp_scaler_set(mp_scaler *s, mp_scaler_kind kind, size_t n_cols,
                        const double *mean, const double *std)
{
    memset(s, 0, sizeof *s);
    if (n_cols == 0)
        return mp_error_set(MP_ERR_FORMAT, "scaler: no columns");
    for (size_t c = 0; c < n_cols; c++) {
        if (isnan(mean[c]))
            return mp_error_set(MP_ERR_FORMAT, "scaler: mean of column %zu is %g", c, mean[c]);
        if (!(std[c] > 0))
            return mp_error_set(MP_ERR_FORMAT, "scaler: std of column %zu is %g", c, std[c]);
    }
    s->mean = mp_malloc(n_cols * sizeof(double));
    s->std = mp_malloc(n_cols * sizeof(double));
    if (!s->mean || !s->std) {
        mp_scaler_free(s);
        return mp_error_set(MP_ERR_NOMEM, "out of memory for a scaler of %zu columns", n_cols);
    }
    memcpy(s->mean, mean, n_cols * sizeof(double));
    memcpy(s->std, std, n_cols * sizeof(double));
    s->kind = kind;
    s->n_cols = n_cols;
    return MP_OK;
}

void mp_scaler_free(mp_scaler *s)
{
    mp_free(s->mean);
    mp_free(s->std);
    memset(s, 0, sizeof *s);
}

/* ===================================================================== */
/* Scaling                                                                */
/* ===================================================================== */

static inline double fwd(const mp_scaler *s, size_t c, double v)
{
    if (s->kind == MP_SCALE_FEATURES) {
        double y = ((isnan(v) ? 0.0 : v) - s->mean[c]) / s->std[c];
        return isnan(y) ? 0.0 : y;
    }
    return (v - s->mean[c]) / s->std[c];   /* NaN stays NaN */
}

static inline double inv(const mp_scaler *s, size_t c, double v)
{
    double y = v * s->std[c] + s->mean[c];
    return s->kind == MP_SCALE_FEATURES && isnan(y) ? 0.0 : y;
}

void mp_scaler_transform(const mp_scaler *s, double *x, size_t n_rows)
{
    for (size_t i = 0; i < n_rows; i++)
        for (size_t c = 0; c < s->n_cols; c++)
            x[i * s->n_cols + c] = fwd(s, c, x[i * s->n_cols + c]);
}

void mp_scaler_transform_f32(const mp_scaler *s, float *x, size_t n_rows)
{
    for (size_t i = 0; i < n_rows; i++)
        for (size_t c = 0; c < s->n_cols; c++)
            x[i * s->n_cols + c] = (float)fwd(s, c, (double)x[i * s->n_cols + c]);
}

void mp_scaler_transform_to_f32(const mp_scaler *s, const double *x, float *out,
                                size_t n_rows)
{
    for (size_t i = 0; i < n_rows; i++)
        for (size_t c = 0; c < s->n_cols; c++)
            out[i * s->n_cols + c] = (float)fwd(s, c, x[i * s->n_cols + c]);
}

void mp_scaler_transform_cols_to_f32(const mp_scaler *s, size_t c0, const double *x,
                                     float *out, size_t k)
{
    for (size_t j = 0; j < k; j++)
        out[j] = (float)fwd(s, c0 + j, x[j]);
}

void mp_scaler_inverse(const mp_scaler *s, double *x, size_t n_rows)
{
    for (size_t i = 0; i < n_rows; i++)
        for (size_t c = 0; c < s->n_cols; c++)
            x[i * s->n_cols + c] = inv(s, c, x[i * s->n_cols + c]);
}

void mp_scaler_inverse_from_f32(const mp_scaler *s, const float *x, double *out,
                                size_t n_rows)
{
    for (size_t i = 0; i < n_rows; i++)
        for (size_t c = 0; c < s->n_cols; c++)
            out[i * s->n_cols + c] = inv(s, c, (double)x[i * s->n_cols + c]);
}
