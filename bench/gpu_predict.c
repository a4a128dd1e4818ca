/*
 * gpu_predict.c - inference rate on a real dataset through the prediction
 * path `molprop predict` uses (mp_ensemble_predict: batches of valid
 * molecules, their graphs gathered and sent to the backend, outputs read
 * back and turned into probabilities), for the default D-MPNN (hidden 300,
 * depth 3, one task), at several batch sizes and each GPU precision.  The
 * SMILES are featurized once beforehand (timed on its own line), so the rate
 * is the model's side of prediction; the weights are the initial ones (speed
 * does not depend on them).  Median of 5 passes over the whole dataset after
 * one warm-up pass.
 *
 *   build/gpu_predict DATA.csv[.gz] [batch ...]     (default 50 4096)
 *   MOLPROP_PREDICT_BACKENDS="cuda:fp32,cpu" build/gpu_predict ...  (others)
 */
#include "internal.h"   /* every module header */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fail(const char *what)
{
    fprintf(stderr, "gpu_predict: %s: %s\n", what, mp_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_predict DATA.csv[.gz] [batch ...]\n");
        return 1;
    }
    int batches[16] = { 50, 4096 }, n_batches = 2;
    if (argc > 2) {
        n_batches = 0;
        for (int i = 2; i < argc && n_batches < 16; i++)
            if ((batches[n_batches++] = atoi(argv[i])) < 1) {
                fprintf(stderr, "gpu_predict: bad batch size '%s'\n", argv[i]);
                return 1;
            }
    }
    const char *env = getenv("MOLPROP_PREDICT_BACKENDS");
    char list[256];
    snprintf(list, sizeof list, "%s", env && *env ? env : "cuda:fp32,cuda:tf32,cuda:bf16");

    mp_column_spec spec = { .no_targets = 1 };
    mp_dataset *d;
    if (mp_dataset_load(&d, argv[1], &spec))
        return fail(argv[1]);
    if (d->n_rows > INT32_MAX) {
        fprintf(stderr, "gpu_predict: too many rows\n");
        return 1;
    }
    int32_t n = (int32_t)d->n_rows;
    mp_features *f;
    double t0 = mp_time_now();
    if (mp_featurize(&f, (const char *const *)d->smiles, n, NULL))
        return fail("featurize");
    double t_feat = mp_time_now() - t0;
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n);
    double *mean = malloc(sizeof(double) * (size_t)n);
    if (!rows || !mean) {
        fprintf(stderr, "gpu_predict: out of memory\n");
        return 1;
    }
    int32_t n_valid = 0;
    for (int32_t i = 0; i < n; i++) {
        rows[i] = i;
        n_valid += f->g.valid[i] != 0;
    }
    printf("%s: %d molecules (%d valid), %.1f atoms and %.1f bonds per valid molecule; "
           "featurized in %.2f s (%.0f mol/s, %d threads)\n", argv[1], n, n_valid,
           (double)f->g.n_atoms / (n_valid ? n_valid : 1),
           (double)f->g.n_edges / 2 / (n_valid ? n_valid : 1), t_feat, n / t_feat,
           mp_threads_get());
    printf("%-10s %8s %10s %14s\n", "backend", "batch", "s/pass", "molecules/s");

    for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        mp_model_config cfg = mp_model_config_default();
        cfg.task = MP_MODEL_CLASSIFICATION;
        cfg.n_tasks = 1;
        mp_ensemble *e;
        if (mp_ensemble_create(&e, &cfg, 1, 0, name))
            return fail(name);
        e->task = MP_TASK_CLASSIFICATION;
        e->n_tasks = 1;
        for (int bi = 0; bi < n_batches; bi++) {
            double t[REPS];
            for (int rep = -1; rep < REPS; rep++) {
                double s = mp_time_now();
                if (mp_ensemble_predict(e, f, rows, n, 0, 0, batches[bi], mean, NULL))
                    return fail("predict");
                if (rep >= 0)
                    t[rep] = mp_time_now() - s;
            }
            qsort(t, REPS, sizeof t[0], cmp_double);
            printf("%-10s %8d %10.4f %14.0f\n", name, batches[bi], t[REPS / 2],
                   n_valid / t[REPS / 2]);
            fflush(stdout);
        }
        mp_ensemble_free(e);
    }
    free(rows);
    free(mean);
    mp_features_free(f);
    mp_dataset_free(d);
    return 0;
}
