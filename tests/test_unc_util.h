/*
 * test_unc_util.h - helpers shared by the uncertainty CLI tests
 * (test_unc_cli.c, test_unc_mc_cli.c, test_unc_ml_cli.c).
 */
#ifndef MP_TEST_UNC_UTIL_H
#define MP_TEST_UNC_UTIL_H

#include "data/dataset.h"

/* The number printed on the eval line of `metric` ("coverage   0.9") in
 * text; NAN when no line names it. */
double tu_eval_number(const char *text, const char *metric);

/* The dataset at path with its default columns (NULL on failure; the caller
 * frees it with mp_dataset_free). */
mp_dataset *tu_load(const char *path);

/* The index of d's target column `name` (-1 when absent). */
int tu_col(const mp_dataset *d, const char *name);

/* The k-th smallest of x[0..n) (1-based), by counting: the brute-force
 * reference the calibrators' quantiles are checked against (+inf when k > n). */
double tu_kth_smallest(const double *x, size_t n, size_t k);

#endif
