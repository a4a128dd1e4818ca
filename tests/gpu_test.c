/*
 * gpu_test.c - the helpers of gpu_test.h.
 */
#include "gpu_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mp_test_env_flag(const char *name)
{
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") != 0;
}

static mp_dataset  *esol_data;
static mp_features *esol_feat;

mp_status mp_test_esol(mp_dataset **d, mp_features **f)
{
    if (!esol_feat) {
        mp_status st;
        if (!esol_data &&
            (st = mp_dataset_load(&esol_data, mp_test_shared("datasets/esol.csv.gz"), NULL)))
            return st;
        mp_featurize_opts fo = { .layout = MP_ATOM_V1 };
        if ((st = mp_featurize(&esol_feat, (const char *const *)esol_data->smiles,
                               (int32_t)esol_data->n_rows, &fo)))
            return st;
    }
    *d = esol_data;
    *f = esol_feat;
    return MP_OK;
}

mp_status mp_test_train_esol(const char *backend, int resident, int graph, double dropout,
                             mp_train_result *r)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = 3;
    o.hidden = 32;
    o.dropout = dropout;
    o.threads = 1;
    o.quiet = 1;
    o.backend = backend;
    o.resident = resident;
    o.graph = graph;
    return mp_train(&o, r);
}

/* ===================================================================== */
/* Device buffers as host floats, and comparisons                         */
/* ===================================================================== */

float *mp_test_floats_of(mp_backend *b, const void *p, mp_stype st, size_t rows, int cols)
{
    const size_t n = rows * (size_t)cols;
    void *t = b->alloc(b, n * sizeof(float) + 16);
    float *h = mp_malloc(n * sizeof(float) + 16);
    if (!t || !h) {
        if (t)
            b->free(b, t);
        mp_free(h);
        return NULL;
    }
    b->copy2d(b, t, MP_ST_ELEM, cols, p, st, cols, (int32_t)rows, cols);
    if (b->sync(b) != MP_OK || b->download(b, h, t, n * sizeof(float)) != MP_OK) {
        mp_free(h);
        h = NULL;
    }
    b->free(b, t);
    return h;
}

void *mp_test_random_dev(mp_backend *b, mp_rng *r, mp_stype st, size_t rows, int cols,
                        double scale)
{
    const size_t n = rows * (size_t)cols;
    float *h = mp_malloc(n * sizeof(float) + 16);
    void *f = b->alloc(b, n * sizeof(float) + 16), *d = b->alloc(b, n * sizeof(float) + 16);
    int ok = h && f && d;
    for (size_t i = 0; ok && i < n; i++)
        h[i] = (float)(scale * (2 * mp_rng_uniform(r) - 1));
    ok = ok && b->upload(b, f, h, n * sizeof(float)) == MP_OK;
    if (ok)
        b->copy2d(b, d, st, cols, f, MP_ST_ELEM, cols, (int32_t)rows, cols);
    mp_free(h);
    if (f)
        b->free(b, f);
    if (!ok && d) {
        b->free(b, d);
        d = NULL;
    }
    return d;
}

int mp_test_close_all(const float *x, const float *y, size_t n, double rel, double abs_tol,
                     char *err, size_t cap)
{
    double r2 = 0;
    for (size_t i = 0; i < n; i++)
        r2 += (double)y[i] * y[i];
    const double rms = sqrt(r2 / (double)(n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= rel * fabs(y[i]) + abs_tol * rms)) {
            snprintf(err, cap, "element %zu: %.9g, expected %.9g (rms %.3g)", i, x[i], y[i],
                     rms);
            return 0;
        }
    }
    return 1;
}

