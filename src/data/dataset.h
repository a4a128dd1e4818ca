/*
 * dataset.h - a labelled (or unlabelled) molecule table read from CSV:
 * SMILES, the target matrix with missing labels as NaN, and the file line of
 * every row, so any later message can point back into the user's file.
 */
#ifndef MP_DATASET_H
#define MP_DATASET_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which columns to use.  All strings are optional (NULL = default). */
typedef struct {
    const char *smiles_column;   /* default: column named "smiles" (any case), else the first */
    const char *target_columns;  /* comma-separated names; default: every other column */
    const char *ignore_columns;  /* comma-separated names left out of the default targets */
    int         no_targets;      /* 1: read SMILES only (prediction input); targets ignored */
    /* issue 11: sample weights and inequality labels */
    const char *weight_column;   /* a column of per-row weights (finite, >= 0; left out of
                                  * the default targets), or NULL */
    int         inequalities;    /* 1: a target cell may be "<x" or ">x" (the bounded
                                  * losses); 0: such a cell is an error naming the loss */
} mp_column_spec;

typedef struct {
    char    *path;         /* the file it came from                              */
    size_t   n_rows;       /* data rows (header excluded, blank lines skipped)   */
    size_t   n_tasks;
    char   **task_names;   /* n_tasks                                            */
    char    *smiles_name;  /* the SMILES column's header                         */
    char   **smiles;       /* n_rows                                             */
    double  *targets;      /* n_rows x n_tasks, row-major; NaN = missing label   */
    size_t  *line;         /* n_rows: 1-based line in the file                   */
    double  *weights;      /* n_rows sample weights (weight_column), or NULL     */
    uint8_t *ineq;         /* n_rows x n_tasks MP_INEQ-style flags (1 "<", 2 ">"),
                            * or NULL when no cell has one                       */
} mp_dataset;

/* Rows a file read whole may hold (docs/limits.md): past some 16 million
 * molecules the features alone outgrow a large machine's memory. */
#define MP_DATASET_MAX_ROWS (1u << 24)

/* The inequality flags of mp_dataset.ineq (the values of ops.h's MP_INEQ_*). */
enum { MP_DATA_INEQ_LT = 1, MP_DATA_INEQ_GT = 2 };

/*
 * Reads the whole file (at most MP_DATASET_MAX_ROWS rows: MP_ERR_ARG).  Errors (MP_ERR_FORMAT / MP_ERR_IO / MP_ERR_ARG) name
 * the file, line and column: an absent column, a row with the wrong number of
 * fields, a target cell that is not a finite number ("nan" and "inf" are
 * rejected), a file with no header or no data rows.  An empty target cell is
 * a missing label.  On failure *out is NULL and nothing leaks.
 *
 * Columns: names match exactly, else case-insensitively; a name that matches
 * two columns is an error, as are two default targets of one name (drop them
 * with ignore_columns, which removes every column of a name).  An absent
 * named column is MP_ERR_ARG.  Ownership: the dataset and every string in it
 * are separate mp_malloc blocks; mp_dataset_free frees them all (so code that
 * builds an mp_dataset by hand must allocate the same way).
 */
mp_status mp_dataset_load(mp_dataset **out, const char *path, const mp_column_spec *spec);
void      mp_dataset_free(mp_dataset *d);

/*
 * Resolves column names against a header (shared by mp_dataset_load and the
 * streaming predictor).  *smiles_col gets the SMILES column index; targets
 * (may be NULL) gets the target column indices, *n_targets their count
 * (caller frees *targets with mp_free).
 */
mp_status mp_columns_resolve(const char *path, char *const *header, size_t n_header,
                             const mp_column_spec *spec, size_t *smiles_col,
                             size_t **targets, size_t *n_targets);

/* Parses a target cell: "" -> NaN (missing) and MP_OK; a finite decimal
 * number, optionally surrounded by spaces/tabs (as Python's float() allows),
 * -> MP_OK; anything else -> MP_ERR_FORMAT (the caller formats the message):
 * "nan", "inf", "1e999" (overflow), hex, "1.2.3", "abc", "1 2", a cell of only
 * spaces.  Underflow ("1e-400") gives 0 or a subnormal, as in Python. */
mp_status mp_parse_target(const char *cell, double *value);

/* mp_parse_target, and also "<x" / ">x" (spaces allowed around the sign)
 * with *ineq MP_DATA_INEQ_LT / _GT (0 for a plain number or an empty cell). */
mp_status mp_parse_target_ineq(const char *cell, double *value, int *ineq);

#ifdef __cplusplus
}
#endif
#endif /* MP_DATASET_H */
