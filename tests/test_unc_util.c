/*
 * test_unc_util.c - helpers shared by the uncertainty CLI tests
 * (test_unc_util.h).
 */
#include "test_unc_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double tu_eval_number(const char *text, const char *metric)
{
    size_t len = strlen(metric);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, metric, len) && p[len] == ' ')
            return strtod(p + len, NULL);
    return NAN;
}

mp_dataset *tu_load(const char *path)
{
    mp_dataset *d = NULL;
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    return mp_dataset_load(&d, path, &spec) == MP_OK ? d : NULL;
}

int tu_col(const mp_dataset *d, const char *name)
{
    for (size_t j = 0; j < d->n_tasks; j++)
        if (!strcmp(d->task_names[j], name))
            return (int)j;
    return -1;
}

double tu_kth_smallest(const double *x, size_t n, size_t k)
{
    double best = INFINITY;
    for (size_t i = 0; i < n; i++) {
        size_t le = 0;
        for (size_t j = 0; j < n; j++)
            le += x[j] <= x[i];
        if (le >= k && x[i] < best)
            best = x[i];
    }
    return best;
}
