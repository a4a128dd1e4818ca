/*
 * spectra.c - spectral targets made positive and normalized, and the two
 * spectrum metrics (spectra.h).
 */
#include "data/spectra.h"

#include <math.h>
#include <string.h>

mp_status mp_spectra_normalize(double *t, size_t n_rows, size_t T, double floor,
                               const char *path, const size_t *line,
                               const char *const *names)
{
    if (!(floor > 0 && isfinite(floor)))
        return mp_error_set(MP_ERR_ARG, "spectra target floor %g: must be finite and > 0",
                            floor);
    for (size_t i = 0; i < n_rows; i++) {
        double *row = t + i * T, sum = 0;
        size_t labelled = 0, ln = line ? line[i] : i + 1;
        for (size_t j = 0; j < T; j++) {
            double v = row[j];
            if (isnan(v))
                continue;
            if (v < 0 || isinf(v))
                return mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': spectrum intensity %g "
                                    "(a spectrum's values are finite and >= 0; leave a cell "
                                    "empty to leave its position out)", path ? path : "data",
                                    ln, names ? names[j] : "?", v);
            row[j] = v < floor ? floor : v;
            sum += row[j];
            labelled++;
        }
        if (!labelled)
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: the spectrum has no value (all %zu "
                                "positions are empty)", path ? path : "data", ln, T);
        for (size_t j = 0; j < T; j++)
            row[j] /= sum;   /* NaN stays NaN */
    }
    return MP_OK;
}

double mp_spectrum_metric(mp_metric m, const double *pred, size_t ps, const double *target,
                          size_t ts, size_t n, size_t T, double *per_pos, size_t *n_scored)
{
    const int wass = m == MP_METRIC_WASSERSTEIN;
    double total = 0;
    size_t scored = 0;
    if (per_pos)
        for (size_t j = 0; j < T; j++)
            per_pos[j] = 0;
    for (size_t i = 0; i < n; i++) {
        const double *p = pred + i * ps, *q = target + i * ts;
        double s = 0;
        size_t labelled = 0;
        int bad = 0;
        for (size_t j = 0; j < T; j++) {
            if (isnan(q[j]))
                continue;
            bad |= isnan(p[j]);
            s += p[j];
            labelled++;
        }
        if (!labelled || bad)
            continue;
        double row = 0, P = 0, Q = 0;
        for (size_t j = 0; j < T; j++) {
            if (isnan(q[j]))
                continue;
            double pj = p[j] / s, qj = q[j], l;
            if (wass) {
                P += pj;
                Q += qj;
                l = fabs(Q - P);
            } else {
                l = (pj - qj) * log(pj / qj);
            }
            row += l;
            if (per_pos)
                per_pos[j] += l;
        }
        total += row;
        scored++;
    }
    if (per_pos)
        for (size_t j = 0; j < T; j++)
            per_pos[j] = scored ? per_pos[j] / (double)scored : NAN;
    if (n_scored)
        *n_scored = scored;
    return scored ? total / (double)scored : NAN;
}
