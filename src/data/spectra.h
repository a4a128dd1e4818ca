/*
 * spectra.h - spectral targets (Chemprop v1.6.1's --dataset_type spectra,
 * v2.3.1's spectral task): each target column is one position of a
 * spectrum, each row one molecule's spectrum.  The targets are made
 * positive and normalized here (spectra_utils.py normalize_spectra), and
 * the two spectrum metrics, SID and the Wasserstein (earth mover's)
 * distance on evenly spaced positions, are computed here (sid_metric,
 * wasserstein_metric).  The losses of the same names live in the backend
 * (formulas.h mp_loss_spectral_row), on the model's raw outputs.
 */
#ifndef MP_SPECTRA_H
#define MP_SPECTRA_H

#include "core/core.h"
#include "data/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Chemprop v1's --spectra_target_floor default. */
#define MP_SPECTRA_FLOOR_DEFAULT 1e-8

/*
 * Normalizes the spectra t [n_rows x T] in place, as Chemprop's
 * normalize_spectra: a NaN (an empty cell) is a position left out of the
 * row; a labelled value below `floor` becomes `floor`; the row is divided
 * by the sum of its labelled values (so they sum to 1; left-out positions
 * stay NaN).  Refused (MP_ERR_FORMAT, naming path:line[i] and the column
 * names[t]): a negative or infinite value (Chemprop would floor a negative
 * intensity silently; a spectrum has none), a row with no labelled
 * position.  floor must be finite and > 0.
 */
mp_status mp_spectra_normalize(double *t, size_t n_rows, size_t T, double floor,
                               const char *path, const size_t *line,
                               const char *const *names);

/*
 * The spectrum metric m (MP_METRIC_SID or MP_METRIC_WASSERSTEIN) of n
 * spectra: row i's prediction pred[i ps + j] and target target[i ts + j],
 * j < T.  A NaN target leaves its position out; the prediction is
 * renormalized over the labelled positions (Chemprop's metrics do the
 * same); a row without a labelled position, or with a NaN prediction at
 * one, is not scored.  Per row the sum over its labelled positions of
 *   sid:         p ln(p / q) + q ln(q / p)
 *   wasserstein: |Q_j - P_j| (running sums of p and q over the labelled
 *                positions up to j)
 * and the result is the mean over the scored rows (NaN: none), as v1's
 * sid_metric / wasserstein_metric (over every row; v1's averages only its
 * last batch of 50).  per_pos[T] (NULL: not wanted) gets each position's
 * mean term over the scored rows, *n_scored (may be NULL) the rows scored.
 */
double mp_spectrum_metric(mp_metric m, const double *pred, size_t ps, const double *target,
                          size_t ts, size_t n, size_t T, double *per_pos, size_t *n_scored);

#ifdef __cplusplus
}
#endif
#endif /* MP_SPECTRA_H */
