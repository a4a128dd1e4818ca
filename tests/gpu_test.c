/*
 * gpu_test.c - the helpers of gpu_test.h.
 */
#include "gpu_test.h"

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
