/*
 * fingerprint.h - `molprop fingerprint`: the learned molecule vectors of a
 * saved model (Chemprop v2's `chemprop fingerprint`), streamed like
 * prediction (a chunk of input rows at a time), as CSV or .npy.
 */
#ifndef MP_FINGERPRINT_H
#define MP_FINGERPRINT_H

#include "run/predict.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char    *model_path, *data_path, *out_path;
    mp_column_spec columns;       /* smiles_column only                         */
    const char    *atom_path;     /* user atom / bond columns of a model trained *
                                   * with them (columns.h; NULL: none)           */
    const char    *bond_path;
    int            layer;         /* 0: encoder (the head's input), 1: ffn-last */
    int            member;        /* ensemble member (0)                        */
    const char    *backend;
    int            threads;
    int32_t        chunk_rows;    /* 0: 8192; rounded up to whole batches       */
    int            quiet;
} mp_fingerprint_opts;

/*
 * Writes out_path: ending in ".npy", a float32 array [rows x width]
 * (NumPy format 1.0, C order; an invalid molecule's row is NaN); else a CSV
 * with the SMILES column and fp_0 .. fp_<width-1> (empty for an invalid
 * molecule).  One row per input row, in order; written atomically.  The
 * vectors are member `member`'s (mp_model_get_encoding), computed through
 * the backend the model was opened on.  Memory: one chunk.
 */
mp_status mp_fingerprint_file(const mp_fingerprint_opts *o, mp_predict_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* MP_FINGERPRINT_H */
