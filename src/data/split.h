/*
 * split.h - train/validation/test splits, exactly as Chemprop v1.6.1 makes
 * them (../shared/REFERENCE.md section 3): random, scaffold_balanced, cv and
 * cv-no-test.  The step between featurization and training in the data flow.
 *
 * Chemprop drops invalid molecules, then splits the positions 0..n-1 of the
 * molecules that are left, drawing every shuffle from Python's
 * random.Random(seed).  mp_split_make does the same on the caller's candidate
 * rows (the valid ones) with mp_pyrandom, so the sets are Chemprop's sets, and
 * each set lists its rows in the order Chemprop's list holds them (which is
 * the order its training loop sees them):
 *   random            the shuffled order;
 *   scaffold_balanced scaffold groups in the order they were placed, each
 *                     group's rows in the order CPython iterates a set of ints;
 *   cv, cv-no-test    ascending (data order).
 *
 *     mp_split_opts o = mp_split_opts_default();      // random 0.8/0.1/0.1, seed 0
 *     o.type = MP_SPLIT_SCAFFOLD_BALANCED;
 *     mp_split s;
 *     if (mp_split_make(&s, rows, n_rows, (const char *const *)f->scaffold, &o) != MP_OK)
 *         ... mp_error_message() ...
 *     train rows: s.rows[MP_SET_TRAIN][0 .. s.n[MP_SET_TRAIN])
 *     mp_split_free(&s);
 */
#ifndef MP_SPLIT_H
#define MP_SPLIT_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MP_SPLIT_RANDOM = 0,          /* "random"                                    */
    MP_SPLIT_SCAFFOLD_BALANCED,   /* "scaffold_balanced"                         */
    MP_SPLIT_CV,                  /* "cv": k folds; test fold seed%k, val (seed+1)%k */
    MP_SPLIT_CV_NO_TEST           /* "cv-no-test": as cv, the test fold joins train */
} mp_split_type;

/* Indices of the three sets in mp_split. */
enum { MP_SET_TRAIN = 0, MP_SET_VAL = 1, MP_SET_TEST = 2 };

typedef struct {
    mp_split_type type;
    double   sizes[3];  /* train, val, test fractions (random, scaffold_balanced) */
    uint64_t seed;      /* Chemprop's --seed                                      */
    int      n_folds;   /* cv only: number of folds k, 2 <= k <= rows             */
} mp_split_opts;

/* Chemprop's defaults: random, 0.8/0.1/0.1, seed 0, 5 folds (for cv). */
mp_split_opts mp_split_opts_default(void);

/* "random", "scaffold_balanced", "cv", "cv-no-test" (also "cv_no_test").
 * Unknown name -> MP_ERR_ARG with a message listing the choices. */
mp_status   mp_split_type_parse(const char *name, mp_split_type *out);
const char *mp_split_type_name(mp_split_type t);

/*
 * Checks three fractions: each finite and >= 0, sum within 1e-6 of 1.
 * MP_ERR_ARG with a message otherwise.  Zeros are allowed, as Chemprop's
 * split_data allows them (its training front end additionally requires
 * nonzero train and val fractions; that is the trainer's rule, not ours).
 */
mp_status mp_split_sizes_check(const double sizes[3]);

/* Parses "0.8,0.1,0.1" (commas and/or blanks between three numbers) into
 * sizes[3] and checks them as above.  On error sizes is left untouched. */
mp_status mp_split_sizes_parse(const char *s, double sizes[3]);

typedef struct {
    size_t *rows[3];    /* train, val, test: row ids taken from the caller's rows[] */
    size_t  n[3];
} mp_split;

/*
 * Splits the candidate rows rows[0..n_rows) (strictly ascending row ids, e.g.
 * the data rows whose molecule is valid) into train/val/test.  Every
 * candidate lands in exactly one set; rows not listed are in none.
 *
 * scaffold_of_row: needed only for MP_SPLIT_SCAFFOLD_BALANCED (else ignored,
 * may be NULL); indexed by row id (scaffold_of_row[rows[i]]), e.g.
 * mp_features.scaffold.  A NULL entry for a candidate row is an error.
 *
 * What Chemprop does, and so what this does (N = n_rows):
 *   random: shuffle positions 0..N-1 with Random(seed); train = the first
 *     int(s0*N), val up to int((s0+s1)*N), test the rest.
 *   scaffold_balanced: group positions by scaffold string; a group is big if
 *     its size > s1*N/2 or > s2*N/2; shuffle the big groups, then the small
 *     ones, with Random(seed); place each group, big ones first, in train if
 *     it still fits s0*N, else in val if it fits s1*N, else in test.  (So a
 *     test fraction of 0 can still receive groups that fit nowhere else.)
 *   cv / cv-no-test: fold labels 0..k-1 tiled over the positions and
 *     shuffled with Random(0) (not the seed); test = fold seed%k (joins train
 *     for cv-no-test), val = fold (seed+1)%k, train = the rest.  Sizes are
 *     ignored.
 *
 * On success *out owns its arrays (free with mp_split_free).  On failure
 * (bad options or rows: MP_ERR_ARG; memory: MP_ERR_NOMEM) *out is zeroed
 * and nothing leaks.
 */
mp_status mp_split_make(mp_split *out, const size_t *rows, size_t n_rows,
                        const char *const *scaffold_of_row, const mp_split_opts *opts);

/* Frees the arrays and zeroes *s; safe on a zeroed or already freed split. */
void mp_split_free(mp_split *s);

/*
 * Marks each row's set: set_of_row[r] = MP_SET_TRAIN/VAL/TEST for rows in
 * the split, -1 for rows in none, for r < n_total.  MP_ERR_ARG if a row of
 * the split is >= n_total or appears twice.
 */
mp_status mp_split_label_rows(const mp_split *s, size_t n_total, signed char *set_of_row);

#ifdef __cplusplus
}
#endif
#endif /* MP_SPLIT_H */
