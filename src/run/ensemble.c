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

/* The legacy names (model files before the key feature_sets): bit 2 was
 * RDKit's registry, called "rdkit2d". */
static const struct {
    const char *name;
    unsigned    bit;
} legacy_names[] = {
    { "morgan", MP_FEAT_MORGAN },
    { "morgan-count", MP_FEAT_MORGAN_COUNT },
    { "rdkit2d", MP_FEAT_RDKIT2D_CORE },
};

/* One comma-separated list: names by mp_vec_parse (legacy: the table above). */
static mp_status parse_list(const char *s, unsigned *mask, int legacy)
{
    *mask = 0;
    if (!s || !*s || !strcmp(s, "none"))
        return MP_OK;
    const char *p = s;
    while (*p) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        char name[64];
        if (len == 0 || len >= sizeof name)
            return mp_error_set(MP_ERR_ARG, "bad feature set list '%s'", s);
        memcpy(name, p, len);
        name[len] = '\0';
        unsigned bit = 0;
        if (legacy) {
            for (size_t i = 0; i < sizeof legacy_names / sizeof legacy_names[0]; i++)
                if (!strcmp(name, legacy_names[i].name))
                    bit = legacy_names[i].bit;
            if (!bit)
                return mp_error_set(MP_ERR_ARG, "unknown feature set '%s' in '%s' (known: "
                                    "morgan, morgan-count, rdkit2d)", name, s);
        } else {
            mp_vec v;
            if (mp_vec_parse(name, &v)) {
                mp_error_clear();
                return mp_error_set(MP_ERR_ARG, "unknown feature set '%s' in '%s' (known: "
                                    "morgan, morgan-count, rdkit2d, rdkit2d-normalized, "
                                    "rdkit2d-core, v2-morgan, v2-morgan-count, v2-rdkit2d, "
                                    "v2-charge)", name, s);
            }
            bit = 1u << v;
        }
        *mask |= bit;
        p += len;
        if (*p == ',')
            p++;
    }
    return MP_OK;
}

mp_status mp_feature_set_parse(const char *s, unsigned *mask)
{
    return parse_list(s, mask, 0);
}

mp_status mp_feature_set_parse_legacy(const char *s, unsigned *mask)
{
    return parse_list(s, mask, 1);
}

void mp_feature_set_name(unsigned mask, char *buf, size_t n)
{
    buf[0] = '\0';
    size_t used = 0;
    for (int v = 0; v < MP_N_VECS; v++)
        if (mask & (1u << v)) {
            int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", mp_vec_name(v));
            if (w < 0 || (size_t)w >= n - used)
                return;
            used += (size_t)w;
        }
    if (!used)
        snprintf(buf, n, "none");
}

const char *mp_feature_scaling_name(mp_feature_scaling s)
{
    return s == MP_FSCALE_ON ? "on" : s == MP_FSCALE_OFF ? "off" : "auto";
}

mp_status mp_feature_scaling_parse(const char *s, mp_feature_scaling *out)
{
    if (s && !strcmp(s, "auto"))
        *out = MP_FSCALE_AUTO;
    else if (s && !strcmp(s, "on"))
        *out = MP_FSCALE_ON;
    else if (s && !strcmp(s, "off"))
        *out = MP_FSCALE_OFF;
    else
        return mp_error_set(MP_ERR_ARG, "unknown feature scaling '%s' (auto, on, off)",
                            s ? s : "(null)");
    return MP_OK;
}

/* The fixed length of named set v (rdkit2d-core: n_desc). */
static int set_dim(int v, int n_desc)
{
    switch (v) {
    case MP_VEC_RDKIT2D_CORE: return n_desc;
    case MP_VEC_RDKIT2D:
    case MP_VEC_RDKIT2D_NORM: return MP_RDKIT2D_DIM;
    case MP_VEC_V2_RDKIT2D: return MP_V2_RDKIT2D_DIM;
    case MP_VEC_V2_CHARGE: return 1;
    default: return MP_MORGAN_BITS;   /* the four fingerprints */
    }
}

int mp_feature_set_dim(unsigned mask, int n_desc, int n_file)
{
    int dim = 0;
    for (int v = 0; v < MP_N_VECS; v++)
        if (mask & (1u << v))
            dim += set_dim(v, n_desc);
    return dim + ((mask & MP_FEAT_FILE) ? n_file : 0);
}

int mp_feature_set_scaled(unsigned bit, mp_feature_scaling s)
{
    if (s != MP_FSCALE_AUTO)
        return s == MP_FSCALE_ON;
    /* sparse fingerprints: standardizing makes a rare bit's 1 a value of
     * ~sqrt(n); the normalized descriptors are CDF values in [0, 1] */
    return !(bit & (MP_FEAT_MORGAN | MP_FEAT_MORGAN_COUNT | MP_FEAT_V2_MORGAN |
                    MP_FEAT_V2_MORGAN_COUNT | MP_FEAT_RDKIT2D_NORM));
}

mp_status mp_feature_set_check(unsigned mask, const mp_features *f, int n_desc, int n_file)
{
    for (int v = 0; v < MP_N_VECS; v++) {
        if (!(mask & (1u << v)))
            continue;
        int have = mp_features_vec_dim(f, (mp_vec)v), want = set_dim(v, n_desc);
        if (have != want)
            return mp_error_set(MP_ERR_FORMAT, "feature set %s: the model takes %d values per "
                                "molecule, the features hold %d", mp_vec_name(v), want, have);
    }
    if ((mask & MP_FEAT_FILE) && (!f->file_values || f->file_cols != n_file))
        return mp_error_set(MP_ERR_ARG, "the model takes %d values per molecule from a "
                            "features file (--features-path), %s", n_file,
                            f->file_values ? "the file given has another width"
                                           : "none was given");
    if (!(mask & MP_FEAT_FILE) && f->file_values)
        return mp_error_set(MP_ERR_ARG, "the model was trained without a features file, "
                            "yet one was given (--features-path)");
    return MP_OK;
}

/* Row m's values of every set of mask, in order, each set (or piece of the
 * file's columns) handed to put(ctx, first column, values, count). */
#define FILL_CHUNK MP_MORGAN_BITS
static void fill_row(unsigned mask, const mp_features *f, int32_t m,
                     void (*put)(void *, size_t, const double *, size_t), void *ctx)
{
    double buf[FILL_CHUNK];
    size_t c = 0;
    int valid = f->g.valid[m];
    for (int v = 0; v < MP_N_VECS; v++) {
        if (!(mask & (1u << v)))
            continue;
        int k = mp_features_vec_dim(f, (mp_vec)v);
        MP_ASSERT(k <= FILL_CHUNK);
        mp_features_vec_row(f, (mp_vec)v, m, buf);
        /* rdkit2d-core's values were rounded to float before scaling when
         * it was the only descriptor set: its models, old and new, keep
         * that (an old model file predicts as it did) */
        for (int j = 0; v == MP_VEC_RDKIT2D_CORE && j < k; j++)
            buf[j] = (double)(float)buf[j];
        put(ctx, c, buf, (size_t)k);
        c += (size_t)k;
    }
    if (!(mask & MP_FEAT_FILE))
        return;
    const double *row = f->file_values + (size_t)m * (size_t)f->file_cols;
    for (int32_t j0 = 0; j0 < f->file_cols; j0 += FILL_CHUNK) {
        int32_t k = f->file_cols - j0 < FILL_CHUNK ? f->file_cols - j0 : FILL_CHUNK;
        for (int32_t j = 0; j < k; j++)
            buf[j] = !valid ? NAN : isnan(row[j0 + j]) ? 0.0 : row[j0 + j];
        put(ctx, c, buf, (size_t)k);
        c += (size_t)k;
    }
}

static void put_double(void *ctx, size_t c, const double *x, size_t k)
{
    memcpy((double *)ctx + c, x, k * sizeof(double));
}

typedef struct {
    const mp_scaler *s;
    float           *out;
} scaled_row;

static void put_scaled(void *ctx, size_t c, const double *x, size_t k)
{
    scaled_row *r = ctx;
    mp_scaler_transform_cols_to_f32(r->s, c, x, r->out + c, k);
}

void mp_feature_set_fill(unsigned mask, const mp_features *f, const int32_t *mols, int32_t n,
                         double *out)
{
    size_t dim = (size_t)mp_feature_set_dim(mask, f->n_desc, f->file_cols);
    for (int32_t i = 0; i < n; i++)
        fill_row(mask, f, mols[i], put_double, out + (size_t)i * dim);
}

void mp_feature_set_fill_scaled(unsigned mask, const mp_features *f, const int32_t *mols,
                                int32_t n, const mp_scaler *s, float *out)
{
    MP_ASSERT(s->n_cols == (size_t)mp_feature_set_dim(mask, f->n_desc, f->file_cols));
    for (int32_t i = 0; i < n; i++) {
        scaled_row r = { s, out + (size_t)i * s->n_cols };
        fill_row(mask, f, mols[i], put_scaled, &r);
    }
}

/* Calls fn(ctx, first column, count) for each set mode `scaling` leaves
 * unscaled. */
static void unscaled_ranges(unsigned mask, mp_feature_scaling scaling, int n_desc, int n_file,
                            void (*fn)(void *, size_t, size_t), void *ctx)
{
    size_t c = 0;
    for (int v = 0; v < MP_N_VECS; v++) {
        if (!(mask & (1u << v)))
            continue;
        size_t k = (size_t)set_dim(v, n_desc);
        if (!mp_feature_set_scaled(1u << v, scaling))
            fn(ctx, c, k);
        c += k;
    }
    if ((mask & MP_FEAT_FILE) && !mp_feature_set_scaled(MP_FEAT_FILE, scaling))
        fn(ctx, c, (size_t)n_file);
}

static void set_identity(void *ctx, size_t c0, size_t k)
{
    mp_scaler *s = ctx;
    for (size_t c = c0; c < c0 + k; c++) {
        s->mean[c] = 0.0;
        s->std[c] = 1.0;
    }
}

mp_status mp_feature_scaler_fit(mp_scaler *s, unsigned mask, mp_feature_scaling scaling,
                                const mp_features *f, const int32_t *rows, int32_t n)
{
    memset(s, 0, sizeof *s);
    size_t dim = (size_t)mp_feature_set_dim(mask, f->n_desc, f->file_cols);
    double *x = mp_malloc(sizeof(double) * (n > 0 ? (size_t)n : 1) * dim);
    if (!x)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (%d training feature rows of %zu)",
                            (int)n, dim);
    mp_feature_set_fill(mask, f, rows, n, x);
    mp_status st = mp_scaler_fit(s, MP_SCALE_FEATURES, x, dim, NULL, (size_t)n);
    mp_free(x);
    if (st == MP_OK)
        unscaled_ranges(mask, scaling, f->n_desc, f->file_cols, set_identity, s);
    return st;
}

typedef struct {
    const mp_scaler *s;
    long             bad;   /* first non-identity column, -1: none */
} identity_check;

static void check_identity(void *ctx, size_t c0, size_t k)
{
    identity_check *ic = ctx;
    for (size_t c = c0; c < c0 + k && c < ic->s->n_cols; c++)
        if (ic->bad < 0 && (ic->s->mean[c] != 0.0 || ic->s->std[c] != 1.0))
            ic->bad = (long)c;
}

mp_status mp_feature_scaler_check(const mp_scaler *s, unsigned mask, mp_feature_scaling scaling,
                                  int n_desc, int n_file)
{
    if (s->n_cols != (size_t)mp_feature_set_dim(mask, n_desc, n_file))
        return mp_error_set(MP_ERR_FORMAT, "feature scaler of %zu columns for %d features",
                            s->n_cols, mp_feature_set_dim(mask, n_desc, n_file));
    identity_check ic = { s, -1 };
    unscaled_ranges(mask, scaling, n_desc, n_file, check_identity, &ic);
    if (ic.bad >= 0)
        return mp_error_set(MP_ERR_FORMAT, "feature scaling '%s' leaves column %ld unscaled, "
                            "yet its scaler has mean %g, std %g", mp_feature_scaling_name(scaling),
                            ic.bad, s->mean[ic.bad], s->std[ic.bad]);
    return MP_OK;
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
    e->feature_scaling = MP_FSCALE_ON;
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
    for (int v = 0; v < MP_N_VECS; v++)
        if (e->features & (1u << v))
            mp_vec_request((mp_vec)v, &o);
    return o;
}
