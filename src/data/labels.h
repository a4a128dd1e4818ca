/*
 * labels.h - a label matrix stored sparsely: only the labels present, row
 * by row (compressed sparse rows), for the large multi-task sets where
 * nearly every cell is missing.  ChEMBL as Yang et al. used it has 456,331
 * molecules x 1,310 targets with about 1% of the cells filled: dense, as
 * mp_dataset keeps targets, that is 4.8 GB of doubles (and as much again in
 * the trainer's scaled float copy); sparse it is about 70 MB.
 *
 *     mp_dataset *d;  mp_labels *y;
 *     mp_labels_load(&d, &y, "chembl.csv.gz", NULL);   // d->targets is NULL
 *     mp_labels_fill_rows(y, batch_rows, n, dense_block);  // NaN = missing
 *
 * Converters go both ways (mp_labels_from_dense, mp_labels_to_dense), so a
 * consumer written for the dense matrix can take a block of rows at a time.
 */
#ifndef MP_LABELS_H
#define MP_LABELS_H

#include "core/core.h"
#include "data/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t   n_rows, n_tasks;
    size_t   nnz;         /* labels present                                 */
    size_t  *row_start;   /* n_rows + 1: row i's labels are [row_start[i], row_start[i+1]) */
    int32_t *task;        /* nnz: the task of each label, ascending within a row */
    double  *value;       /* nnz                                             */
} mp_labels;

void mp_labels_free(mp_labels *y);   /* NULL is fine */

/* The present (non-NaN) cells of targets [n_rows x n_tasks].  MP_ERR_NOMEM. */
mp_status mp_labels_from_dense(mp_labels **out, const double *targets, size_t n_rows,
                               size_t n_tasks);

/* The whole matrix into dense [n_rows x n_tasks], NaN where missing. */
void mp_labels_to_dense(const mp_labels *y, double *dense);

/* Rows rows[0..n) into dense [n x n_tasks] (double or float), NaN where
 * missing: what a batch or an evaluation block needs. */
void mp_labels_fill_rows(const mp_labels *y, const int32_t *rows, size_t n, double *dense);
void mp_labels_fill_rows_f32(const mp_labels *y, const int32_t *rows, size_t n, float *dense);

/* Bytes the sparse matrix takes, and what the dense one would. */
size_t mp_labels_bytes(const mp_labels *y);
size_t mp_labels_dense_bytes(const mp_labels *y);

/*
 * Reads a CSV as mp_dataset_load does (the same columns, rules and
 * messages naming file, line and column), but the labels into *labels:
 * (*out)->targets stays NULL, so memory grows with the labels present, not
 * with rows x tasks.  On failure both are NULL.
 */
mp_status mp_labels_load(mp_dataset **out, mp_labels **labels, const char *path,
                         const mp_column_spec *spec);

#ifdef __cplusplus
}
#endif
#endif /* MP_LABELS_H */
