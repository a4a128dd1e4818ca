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

#endif
