/*
 * test_featurize_util.h - helpers for the featurization tests: read the
 * Chemprop v1 fixtures and the dataset mirror with zlib (plain or gzipped),
 * line by line, without the CSV reader.
 */
#ifndef MP_TEST_FEATURIZE_UTIL_H
#define MP_TEST_FEATURIZE_UTIL_H

#include "core/core.h"
#include "featurize/featurize.h"

#include <zlib.h>

/* Reads one line (without its '\n' or '\r\n') into b; 1 if read, 0 at EOF. */
int tf_read_line(gzFile gz, mp_buf *b);

/* Splits `line` in place at tabs into at most max fields; returns the count. */
int tf_split(char *line, char **fields, int max);

/* The SMILES of the fixture molecules.tsv (its last column), in file order;
 * NULL if the file is missing.  Free with tf_free_strings. */
char **tf_fixture_smiles(int32_t *n);

/* The first column of $MOLPROP_DATA_MIRROR/<name>.csv.gz, header skipped,
 * at most max rows (max <= 0: all); NULL if the file is missing. */
char **tf_dataset_smiles(const char *name, int32_t max, int32_t *n);

/* Inserts invalid SMILES ("", "xyz", "C1CC", "[H]") at the start, the
 * middle and the end of a list from tf_dataset_smiles; returns the new list. */
char **tf_add_invalid(char **s, int32_t *n);

void tf_free_strings(char **s, int32_t n);

/* 1 if two results hold the same arrays byte for byte (descriptors bitwise,
 * NaN too) and the same strings. */
int tf_same_features(const mp_features *a, const mp_features *b);

/* Path of a fixture file (static buffer). */
const char *tf_fixture(const char *file);

#endif
