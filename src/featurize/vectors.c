/*
 * vectors.c - the molecule-level vectors by name (featurize.h, "Molecule
 * vectors by name"): which featurization each needs, its length, and the
 * row of one molecule as Chemprop holds it (NaN read as 0, the
 * replace_token of Chemprop v1's MoleculeDatapoint and the NAN_TOKEN of v2).
 */
#include "featurize/featurize.h"

#include <math.h>
#include <string.h>

static const char *const vec_names[MP_N_VECS] = {
    [MP_VEC_MORGAN] = "morgan",
    [MP_VEC_MORGAN_COUNT] = "morgan-count",
    [MP_VEC_RDKIT2D_CORE] = "rdkit2d-core",
    [MP_VEC_RDKIT2D] = "rdkit2d",
    [MP_VEC_RDKIT2D_NORM] = "rdkit2d-normalized",
    [MP_VEC_V2_MORGAN] = "v2-morgan",
    [MP_VEC_V2_MORGAN_COUNT] = "v2-morgan-count",
    [MP_VEC_V2_RDKIT2D] = "v2-rdkit2d",
    [MP_VEC_V2_CHARGE] = "v2-charge",
};

const char *mp_vec_name(mp_vec v)
{
    return (int)v >= 0 && v < MP_N_VECS ? vec_names[v] : NULL;
}

mp_status mp_vec_parse(const char *name, mp_vec *out)
{
    for (int i = 0; i < MP_N_VECS; i++)
        if (name && !strcmp(name, vec_names[i])) {
            *out = (mp_vec)i;
            return MP_OK;
        }
    return mp_error_set(MP_ERR_ARG, "unknown molecule vector '%s' (known: morgan, morgan-count, "
                        "rdkit2d-core, rdkit2d, rdkit2d-normalized, v2-morgan, v2-morgan-count, "
                        "v2-rdkit2d, v2-charge)", name ? name : "(null)");
}

void mp_vec_request(mp_vec v, mp_featurize_opts *o)
{
    switch (v) {
    case MP_VEC_MORGAN:
    case MP_VEC_MORGAN_COUNT: o->morgan = 1; break;
    case MP_VEC_RDKIT2D_CORE: o->descriptors = 1; break;
    case MP_VEC_RDKIT2D: o->sets |= MP_SET_RDKIT2D; break;
    case MP_VEC_RDKIT2D_NORM: o->sets |= MP_SET_RDKIT2D_NORM; break;
    case MP_VEC_V2_MORGAN:
    case MP_VEC_V2_MORGAN_COUNT: o->sets |= MP_SET_V2_MORGAN; break;
    case MP_VEC_V2_RDKIT2D: o->sets |= MP_SET_V2_RDKIT2D; break;
    case MP_VEC_V2_CHARGE: o->sets |= MP_SET_V2_CHARGE; break;
    default: break;
    }
}

/* The dense matrix behind v, or NULL. */
static const mp_molmat *mat_of(const mp_features *f, mp_vec v)
{
    switch (v) {
    case MP_VEC_RDKIT2D: return &f->mat[MP_MAT_RDKIT2D];
    case MP_VEC_RDKIT2D_NORM: return &f->mat[MP_MAT_RDKIT2D_NORM];
    case MP_VEC_V2_RDKIT2D: return &f->mat[MP_MAT_V2_RDKIT2D];
    case MP_VEC_V2_CHARGE: return &f->mat[MP_MAT_V2_CHARGE];
    default: return NULL;
    }
}

int mp_features_vec_dim(const mp_features *f, mp_vec v)
{
    if (!f)
        return 0;
    switch (v) {
    case MP_VEC_MORGAN:
    case MP_VEC_MORGAN_COUNT: return f->morgan_start ? MP_MORGAN_BITS : 0;
    case MP_VEC_V2_MORGAN:
    case MP_VEC_V2_MORGAN_COUNT: return f->morgan2_start ? MP_MORGAN_BITS : 0;
    case MP_VEC_RDKIT2D_CORE: return f->desc ? f->n_desc : 0;
    default: {
        const mp_molmat *x = mat_of(f, v);
        return x && x->values ? x->n_cols : 0;
    }
    }
}

void mp_features_vec_row(const mp_features *f, mp_vec v, int32_t m, double *dst)
{
    int dim = mp_features_vec_dim(f, v);
    if (dim <= 0 || m < 0 || m >= f->g.n_mols)
        return;
    if (!f->g.valid[m]) {
        for (int j = 0; j < dim; j++)
            dst[j] = NAN;
        return;
    }
    switch (v) {
    case MP_VEC_MORGAN:
    case MP_VEC_MORGAN_COUNT:
    case MP_VEC_V2_MORGAN:
    case MP_VEC_V2_MORGAN_COUNT: {
        int v2 = v == MP_VEC_V2_MORGAN || v == MP_VEC_V2_MORGAN_COUNT;
        int counts = v == MP_VEC_MORGAN_COUNT || v == MP_VEC_V2_MORGAN_COUNT;
        const int32_t *start = v2 ? f->morgan2_start : f->morgan_start;
        const uint16_t *bit = v2 ? f->morgan2_bit : f->morgan_bit;
        const uint32_t *count = v2 ? f->morgan2_count : f->morgan_count;
        for (int j = 0; j < MP_MORGAN_BITS; j++)
            dst[j] = 0.0;
        for (int32_t j = start[m]; j < start[m + 1]; j++)
            dst[bit[j]] = counts ? (double)count[j] : 1.0;
        return;
    }
    case MP_VEC_RDKIT2D_CORE:
        for (int j = 0; j < dim; j++) {
            double x = f->desc[(size_t)m * (size_t)dim + (size_t)j];
            dst[j] = isnan(x) ? 0.0 : x;
        }
        return;
    default: {
        const mp_molmat *x = mat_of(f, v);
        const double *row = x->values + (size_t)m * (size_t)dim;
        for (int j = 0; j < dim; j++)
            dst[j] = isnan(row[j]) ? 0.0 : row[j];
        return;
    }
    }
}
