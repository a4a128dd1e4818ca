/*
 * scaler.h - per-column standardisation, as Chemprop v1's StandardScaler
 * (data/scaler.py): regression targets are scaled with the training set's
 * mean and standard deviation before training and the model's outputs scaled
 * back before they are scored or written; extra molecule features (RDKit
 * descriptors, fingerprints) are scaled the same way.
 *
 * The statistics ignore NaN (np.nanmean / np.nanstd with ddof 0) and are
 * summed in NumPy's order, so they match Chemprop's to the last bit.  A column
 * with no values gets mean 0, std 1; a constant column std 1.
 *
 * Two kinds differ only in how NaN is treated:
 *   MP_SCALE_TARGETS   NaN is a missing label: ignored by the fit, and kept
 *                      as NaN by transform and inverse.
 *   MP_SCALE_FEATURES  NaN is a failed feature: read as 0, as Chemprop's
 *                      MoleculeDatapoint replaces NaN features by 0 before
 *                      the scaler sees them; a NaN result of scaling (inf
 *                      inputs) becomes 0 (replace_nan_token=0).
 */
#ifndef MP_SCALER_H
#define MP_SCALER_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_SCALE_TARGETS, MP_SCALE_FEATURES } mp_scaler_kind;

typedef struct {
    mp_scaler_kind kind;
    size_t         n_cols;
    double        *mean;   /* n_cols                      */
    double        *std;    /* n_cols, > 0                 */
} mp_scaler;

/*
 * Fits on rows of a row-major matrix x with n_cols columns: the rows listed
 * in rows[0..n_rows) (e.g. the training split), or rows 0..n_rows-1 when rows
 * is NULL.  The indices must lie inside x.  On success the scaler owns two
 * arrays (free with mp_scaler_free); on failure (MP_ERR_NOMEM, MP_ERR_ARG for
 * n_cols == 0) *s is left empty.
 */
mp_status mp_scaler_fit(mp_scaler *s, mp_scaler_kind kind, const double *x, size_t n_cols,
                        const size_t *rows, size_t n_rows);
/* The same for a float matrix (fingerprints, other float features). */
mp_status mp_scaler_fit_f32(mp_scaler *s, mp_scaler_kind kind, const float *x,
                            size_t n_cols, const size_t *rows, size_t n_rows);

/*
 * Builds a scaler from stored statistics (a model file): copies mean and std.
 * MP_ERR_FORMAT when a mean is NaN or a std is NaN or not > 0, which the fit
 * never produces.
 */
mp_status mp_scaler_set(mp_scaler *s, mp_scaler_kind kind, size_t n_cols,
                        const double *mean, const double *std);

void mp_scaler_free(mp_scaler *s);   /* leaves *s empty; safe on an empty one */

/* In place, on n_rows rows of n_cols values: x = (x - mean) / std. */
void mp_scaler_transform(const mp_scaler *s, double *x, size_t n_rows);
void mp_scaler_transform_f32(const mp_scaler *s, float *x, size_t n_rows);
/* Scales in double and rounds once to float: targets for the loss, features
 * for the model (what Chemprop does when it hands numpy arrays to torch). */
void mp_scaler_transform_to_f32(const mp_scaler *s, const double *x, float *out,
                                size_t n_rows);

/* Columns [c0, c0 + k) of one row, as mp_scaler_transform_to_f32 scales
 * them: out[j] from x[j] by column c0 + j's statistics. */
void mp_scaler_transform_cols_to_f32(const mp_scaler *s, size_t c0, const double *x,
                                     float *out, size_t k);

/* x = x * std + mean, in place; and from float model outputs to double. */
void mp_scaler_inverse(const mp_scaler *s, double *x, size_t n_rows);
void mp_scaler_inverse_from_f32(const mp_scaler *s, const float *x, double *out,
                                size_t n_rows);

#ifdef __cplusplus
}
#endif
#endif /* MP_SCALER_H */
