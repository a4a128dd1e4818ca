/*
 * ensemble.c - a set of trained models plus what turns their raw outputs into
 * predictions in the user's units (scalers, task names): the molecule
 * feature sets and the ensemble's life cycle.  Prediction is in
 * ensemble_predict.c, the model file in modelio.c.
 */
#include "run/ensemble.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Molecule feature sets                                                  */
/* ===================================================================== */

static const struct {
    const char *name;
    unsigned    bit;
} feature_names[] = {
    { "morgan", MP_FEAT_MORGAN },
    { "morgan-count", MP_FEAT_MORGAN_COUNT },
    { "rdkit2d", MP_FEAT_RDKIT2D },
};
#define N_FEATURE_NAMES (sizeof feature_names / sizeof feature_names[0])

mp_status mp_feature_set_parse(const char *s, unsigned *mask)
{
    *mask = 0;
    if (!s || !*s || !strcmp(s, "none"))
        return MP_OK;
    const char *p = s;
    while (*p) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        size_t i;
        for (i = 0; i < N_FEATURE_NAMES; i++)
            if (strlen(feature_names[i].name) == len && !strncmp(p, feature_names[i].name, len))
                break;
        if (i == N_FEATURE_NAMES)
            return mp_error_set(MP_ERR_ARG, "unknown feature set '%.*s' in '%s' "
                                "(known: morgan, morgan-count, rdkit2d)", (int)len, p, s);
        *mask |= feature_names[i].bit;
        p += len;
        if (*p == ',')
            p++;
    }
    return MP_OK;
}

void mp_feature_set_name(unsigned mask, char *buf, size_t n)
{
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < N_FEATURE_NAMES; i++)
        if (mask & feature_names[i].bit) {
            int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", feature_names[i].name);
            if (w < 0 || (size_t)w >= n - used)
                return;
            used += (size_t)w;
        }
    if (!used)
        snprintf(buf, n, "none");
}

int mp_feature_set_dim(unsigned mask, int n_desc)
{
    return ((mask & MP_FEAT_MORGAN) ? MP_MORGAN_BITS : 0) +
           ((mask & MP_FEAT_MORGAN_COUNT) ? MP_MORGAN_BITS : 0) +
           ((mask & MP_FEAT_RDKIT2D) ? n_desc : 0);
}

void mp_feature_set_fill(unsigned mask, const mp_features *f, const int32_t *mols, int32_t n,
                         float *out)
{
    int dim = mp_feature_set_dim(mask, f->n_desc);
    for (int32_t i = 0; i < n; i++) {
        int32_t m = mols[i];
        float *row = out + (size_t)i * (size_t)dim;
        if (!f->g.valid[m]) {
            for (int j = 0; j < dim; j++)
                row[j] = NAN;
            continue;
        }
        if (mask & MP_FEAT_MORGAN) {
            mp_features_morgan_dense(f, m, 0, row);
            row += MP_MORGAN_BITS;
        }
        if (mask & MP_FEAT_MORGAN_COUNT) {
            mp_features_morgan_dense(f, m, 1, row);
            row += MP_MORGAN_BITS;
        }
        if (mask & MP_FEAT_RDKIT2D)
            for (int j = 0; j < f->n_desc; j++)
                row[j] = (float)f->desc[(size_t)m * (size_t)f->n_desc + (size_t)j];
    }
}

/* ===================================================================== */
/* Life cycle                                                             */
/* ===================================================================== */

mp_status mp_ensemble_create(mp_ensemble **out, const mp_model_config *cfg, int n_members,
                             uint64_t seed, const char *backend_name)
{
    *out = NULL;
    if (n_members < 1)
        return mp_error_set(MP_ERR_ARG, "an ensemble needs at least one member");
    mp_ensemble *e = mp_calloc(1, sizeof *e);
    if (!e)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    e->cfg = *cfg;
    e->layout = MP_ATOM_V1;
    mp_status st = mp_backend_open(&e->backend, backend_name ? backend_name : "cpu");
    if (st) {
        mp_free(e);
        return st;
    }
    e->members = mp_calloc((size_t)n_members, sizeof(mp_model *));
    if (!e->members) {
        mp_ensemble_free(e);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    e->n_members = n_members;
    for (int k = 0; k < n_members; k++)
        if ((st = mp_model_create(&e->members[k], cfg, e->backend, seed + (uint64_t)k))) {
            mp_ensemble_free(e);
            return st;
        }
    *out = e;
    return MP_OK;
}

void mp_ensemble_free(mp_ensemble *e)
{
    if (!e)
        return;
    mp_ensemble_predict_release(e);
    if (e->members)
        for (int k = 0; k < e->n_members; k++)
            mp_model_free(e->members[k]);
    mp_free(e->members);
    if (e->task_names)
        for (size_t t = 0; t < e->n_tasks; t++)
            mp_free(e->task_names[t]);
    mp_free(e->task_names);
    mp_free(e->smiles_name);
    mp_scaler_free(&e->target_scaler);
    mp_scaler_free(&e->feature_scaler);
    mp_columns_free(&e->cols);
    if (e->backend)
        mp_backend_close(e->backend);
    mp_free(e);
}

mp_featurize_opts mp_ensemble_featurize_opts(const mp_ensemble *e)
{
    mp_featurize_opts o;
    memset(&o, 0, sizeof o);
    o.layout = e->layout;
    o.morgan = (e->features & (MP_FEAT_MORGAN | MP_FEAT_MORGAN_COUNT)) != 0;
    o.descriptors = (e->features & MP_FEAT_RDKIT2D) != 0;
    return o;
}
