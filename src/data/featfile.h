/*
 * featfile.h - molecule features supplied by the user (--features-path): a
 * matrix with one row per input row, read from a CSV or a NumPy .npy file,
 * as Chemprop v1's load_features reads them.  The trainer and predictor
 * join its columns to the generated feature sets (mp_features.file_values).
 *
 * CSV (plain or gzipped, by content; any name but .npy): a header row of
 * column names, then one row per molecule, every cell a number (strtod's
 * syntax, as Python's float(): "nan", "inf" are numbers; an empty cell is
 * not).  NaN is read as 0 later, as Chemprop does.
 * .npy (by the name's ending): format 1.0, 2.0 or 3.0, a C-order array of
 * shape (n,) or (n, k), little-endian float64, float32, int64, int32,
 * int8/uint8 or bool; columns are then named "0", "1", ....
 */
#ifndef MP_FEATFILE_H
#define MP_FEATFILE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t  n_rows, n_cols;
    char  **names;      /* n_cols                                         */
    double *values;     /* n_rows x n_cols, row-major                     */
} mp_featfile;

/*
 * Reads `path` into *out (zeroed first).  Errors name the file and, for a
 * CSV, the line and column (1-based, with the header's name): MP_ERR_IO
 * unreadable, MP_ERR_FORMAT for a row of another width than the header, a
 * cell that is not a number, no header, no columns, or a .npy file that is
 * not one of the kinds above; MP_ERR_NOMEM.  *out is empty on failure.
 */
mp_status mp_featfile_load(mp_featfile *out, const char *path);
void      mp_featfile_free(mp_featfile *f);   /* leaves *f empty; safe on an empty one */

/* MP_ERR_FORMAT unless f has n_rows rows: "<path>: N rows of features, <what>
 * has M".  what names the other side ("the data file x.csv"). */
mp_status mp_featfile_check_rows(const mp_featfile *f, const char *path, size_t n_rows,
                                 const char *what);

#ifdef __cplusplus
}
#endif
#endif /* MP_FEATFILE_H */
