/*
 * columns.c - the user atom / bond columns of a run (columns.h): files in,
 * Chemprop's standardization, model widths and model-file keys.
 */
#include "run/columns.h"

#include <string.h>

mp_status mp_atom_cols_parse(const char *s, mp_atom_cols_mode *out)
{
    if (s && !strcmp(s, "feature")) {
        *out = MP_ATOM_COLS_FEATURE;
        return MP_OK;
    }
    if (s && !strcmp(s, "descriptor")) {
        *out = MP_ATOM_COLS_DESCRIPTOR;
        return MP_OK;
    }
    return mp_error_set(MP_ERR_ARG, "atom descriptors '%s': 'feature' (appended to the atom "
                        "features) or 'descriptor' (appended to the atom hiddens)",
                        s ? s : "");
}

const char *mp_atom_cols_name(mp_atom_cols_mode m)
{
    return m == MP_ATOM_COLS_DESCRIPTOR ? "descriptor" : m == MP_ATOM_COLS_FEATURE ? "feature"
                                                                                 : "none";
}

mp_status mp_columns_opts_check(const mp_columns_opts *o, int dmpnn)
{
    if (o->bond_mode == MP_ATOM_COLS_DESCRIPTOR)
        return mp_error_set(MP_ERR_ARG, "--bond-descriptors descriptor: Chemprop v1.6.1 joins "
                            "bond descriptors to bond hiddens only for atom / bond-level "
                            "targets (--is_atom_bond_targets), which molprop does not train; "
                            "use --bond-descriptors feature");
    if (o->bond_mode != MP_ATOM_COLS_NONE && !o->bond_path)
        return mp_error_set(MP_ERR_ARG, "--bond-descriptors %s without --bond-descriptors-path",
                            mp_atom_cols_name(o->bond_mode));
    if (o->atom_mode != MP_ATOM_COLS_NONE && !o->atom_path && !o->bond_path)
        return mp_error_set(MP_ERR_ARG, "--atom-descriptors %s without --atom-descriptors-path",
                            mp_atom_cols_name(o->atom_mode));
    if ((o->atom_path || o->bond_path) && !dmpnn)
        return mp_error_set(MP_ERR_ARG, "--atom-descriptors-path and --bond-features-path "
                            "are for the D-MPNN (an FFN model has no atoms)");
    return MP_OK;
}

mp_status mp_columns_read(mp_graphs *g, const mp_columns_opts *o, const char *const *smiles)
{
    mp_status st;
    if (o->atom_path && (st = mp_graphs_read_columns(g, o->atom_path, 0, smiles)) != MP_OK)
        return st;
    if (o->bond_path && (st = mp_graphs_read_columns(g, o->bond_path, 1, smiles)) != MP_OK)
        return st;
    return MP_OK;
}

/* The row indices (atoms or bonds) of the molecules train[0..n). */
static size_t *train_rows(const mp_graphs *g, const int32_t *train, int32_t n, int bonds,
                          size_t *n_rows)
{
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t m = train[i];
        total += bonds ? (size_t)(g->mol_edge[m + 1] - g->mol_edge[m]) / 2
                       : (size_t)(g->mol_atom[m + 1] - g->mol_atom[m]);
    }
    size_t *rows = mp_malloc((total + 1) * sizeof *rows), k = 0;
    if (!rows)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        int32_t m = train[i];
        size_t lo = bonds ? (size_t)g->mol_edge[m] / 2 : (size_t)g->mol_atom[m];
        size_t hi = bonds ? (size_t)g->mol_edge[m + 1] / 2 : (size_t)g->mol_atom[m + 1];
        for (size_t r = lo; r < hi; r++)
            rows[k++] = r;
    }
    *n_rows = k;
    return rows;
}

static mp_status fit_one(mp_scaler *s, const mp_graphs *g, const int32_t *train, int32_t n,
                         int bonds)
{
    size_t nr = 0;
    size_t *rows = train_rows(g, train, n, bonds, &nr);
    if (!rows)
        return mp_error_set(MP_ERR_NOMEM, "out of memory fitting the %s column scaler",
                            bonds ? "bond" : "atom");
    mp_status st = mp_scaler_fit_f32(s, MP_SCALE_FEATURES, bonds ? g->bond_x : g->atom_x,
                                     (size_t)(bonds ? g->xb_dim : g->xa_dim), rows, nr);
    mp_free(rows);
    return st;
}

mp_status mp_columns_fit(mp_columns *c, const mp_columns_opts *o, const mp_graphs *g,
                         const int32_t *train, int32_t n)
{
    memset(c, 0, sizeof *c);
    c->atom_dim = g->xa_dim;
    c->bond_dim = g->xb_dim;
    c->atom_mode = !g->xa_dim ? MP_ATOM_COLS_NONE
                   : o->atom_mode == MP_ATOM_COLS_NONE ? MP_ATOM_COLS_FEATURE : o->atom_mode;
    mp_status st = MP_OK;
    if (c->atom_dim && !o->no_atom_scaling)
        st = fit_one(&c->atom_scaler, g, train, n, 0);
    if (st == MP_OK && c->bond_dim && !o->no_bond_scaling)
        st = fit_one(&c->bond_scaler, g, train, n, 1);
    if (st != MP_OK)
        mp_columns_free(c);
    return st;
}

void mp_columns_apply(const mp_columns *c, mp_graphs *g)
{
    if (c->atom_scaler.n_cols && g->xa_dim == (int32_t)c->atom_scaler.n_cols)
        mp_scaler_transform_f32(&c->atom_scaler, g->atom_x, (size_t)g->n_atoms);
    if (c->bond_scaler.n_cols && g->xb_dim == (int32_t)c->bond_scaler.n_cols)
        mp_scaler_transform_f32(&c->bond_scaler, g->bond_x, (size_t)g->n_edges / 2);
}

void mp_columns_config(const mp_columns *c, mp_model_config *cfg)
{
    cfg->atom_extra_dim = c->atom_mode == MP_ATOM_COLS_FEATURE ? c->atom_dim : 0;
    cfg->atom_desc_dim = c->atom_mode == MP_ATOM_COLS_DESCRIPTOR ? c->atom_dim : 0;
    cfg->bond_extra_dim = c->bond_dim;
}

mp_status mp_columns_check(const mp_columns *c, const mp_graphs *g, const char *model_path)
{
    const char *mode = mp_atom_cols_name(c->atom_mode);
    if (c->atom_dim && !g->xa_dim)
        return mp_error_set(MP_ERR_ARG, "%s: the model was trained with %d atom %ss per atom: "
                            "give them with --atom-descriptors-path", model_path, c->atom_dim,
                            mode);
    if (!c->atom_dim && g->xa_dim)
        return mp_error_set(MP_ERR_ARG, "%s: the model takes no atom descriptors: leave out "
                            "--atom-descriptors-path", model_path);
    if (c->atom_dim != g->xa_dim)
        return mp_error_set(MP_ERR_ARG, "%s: the model takes %d atom %ss per atom, the "
                            "--atom-descriptors-path file has %d", model_path, c->atom_dim,
                            mode, (int)g->xa_dim);
    if (c->bond_dim && !g->xb_dim)
        return mp_error_set(MP_ERR_ARG, "%s: the model was trained with %d bond features per "
                            "bond: give them with --bond-features-path", model_path,
                            c->bond_dim);
    if (!c->bond_dim && g->xb_dim)
        return mp_error_set(MP_ERR_ARG, "%s: the model takes no bond features: leave out "
                            "--bond-features-path", model_path);
    if (c->bond_dim != g->xb_dim)
        return mp_error_set(MP_ERR_ARG, "%s: the model takes %d bond features per bond, the "
                            "--bond-features-path file has %d", model_path, c->bond_dim,
                            (int)g->xb_dim);
    return MP_OK;
}

mp_status mp_columns_put(const mp_columns *c, mp_kv *kv)
{
    mp_status st = MP_OK;
    if (c->atom_dim) {
        if ((st = mp_kv_set(kv, "atom_descriptors", mp_atom_cols_name(c->atom_mode))) ||
            (st = mp_kv_set_int(kv, "atom_descriptors_dim", c->atom_dim)))
            return st;
        if (c->atom_scaler.n_cols && (st = mp_kv_set_scaler(kv, "atom_scaler", &c->atom_scaler)))
            return st;
    }
    if (c->bond_dim) {
        if ((st = mp_kv_set_int(kv, "bond_features_dim", c->bond_dim)))
            return st;
        if (c->bond_scaler.n_cols && (st = mp_kv_set_scaler(kv, "bond_scaler", &c->bond_scaler)))
            return st;
    }
    return MP_OK;
}

mp_status mp_columns_get(mp_columns *c, const mp_kv *kv, const char *path)
{
    memset(c, 0, sizeof *c);
    mp_status st = MP_OK;
    long long v;
    const char *s = mp_kv_get(kv, "atom_descriptors");
    if (s || mp_kv_get(kv, "atom_descriptors_dim") || mp_kv_get(kv, "atom_scaler.mean")) {
        if (!s || mp_atom_cols_parse(s, &c->atom_mode) != MP_OK)
            return mp_error_set(MP_ERR_FORMAT, "%s: atom_descriptors '%s' (feature or "
                                "descriptor)", path, s ? s : "(missing)");
        if ((st = mp_kv_get_int(kv, "atom_descriptors_dim", 1, 100000, &v)))
            return st;
        c->atom_dim = (int)v;
        if (mp_kv_get(kv, "atom_scaler.mean") &&
            (st = mp_kv_get_scaler(kv, "atom_scaler", (size_t)c->atom_dim, &c->atom_scaler)))
            return st;
    }
    if (mp_kv_get(kv, "bond_features_dim") || mp_kv_get(kv, "bond_scaler.mean")) {
        if ((st = mp_kv_get_int(kv, "bond_features_dim", 1, 100000, &v))) {
            mp_columns_free(c);
            return st;
        }
        c->bond_dim = (int)v;
        if (mp_kv_get(kv, "bond_scaler.mean") &&
            (st = mp_kv_get_scaler(kv, "bond_scaler", (size_t)c->bond_dim, &c->bond_scaler))) {
            mp_columns_free(c);
            return st;
        }
    }
    return MP_OK;
}

mp_status mp_columns_view(mp_features *view, int *viewed, const mp_features *src,
                          const mp_columns_opts *o, mp_features **f)
{
    const mp_graphs *g = &src->g;
    const int want[2] = { o->atom_path != NULL, o->bond_path != NULL };
    const int32_t dim[2] = { g->xa_dim, g->xb_dim };
    const char *opt[2] = { "--atom-descriptors-path", "--bond-features-path" };
    for (int k = 0; k < 2; k++)
        if (want[k] && !dim[k])
            return mp_error_set(MP_ERR_ARG, "%s %s: the molecules given in memory carry no "
                                "%s columns (read them into the store first)", opt[k],
                                k ? o->bond_path : o->atom_path, k ? "bond" : "atom");
    if (!dim[0] && !dim[1])
        return MP_OK;
    *view = *src;
    mp_graphs *v = &view->g;
    v->atom_x = v->bond_x = NULL;
    v->xa_dim = v->xb_dim = v->cap_xa = v->cap_xb = 0;
    *f = view;
    *viewed = 1;
    const size_t rows[2] = { (size_t)g->n_atoms, (size_t)g->n_edges / 2 };
    for (int k = 0; k < 2; k++) {
        if (!want[k])
            continue;
        size_t n = rows[k] * (size_t)dim[k];
        float *x = mp_malloc(sizeof(float) * (n ? n : 1));
        if (!x)
            return mp_error_set(MP_ERR_NOMEM, "out of memory copying the %s columns",
                                k ? "bond" : "atom");
        memcpy(x, k ? g->bond_x : g->atom_x, sizeof(float) * n);
        if (k) {
            v->bond_x = x, v->xb_dim = dim[k], v->cap_xb = (int32_t)rows[k];
        } else {
            v->atom_x = x, v->xa_dim = dim[k], v->cap_xa = (int32_t)rows[k];
        }
    }
    return MP_OK;
}

void mp_columns_view_free(mp_features *view)
{
    mp_free(view->g.atom_x);
    mp_free(view->g.bond_x);
    view->g.atom_x = view->g.bond_x = NULL;
}

void mp_columns_free(mp_columns *c)
{
    mp_scaler_free(&c->atom_scaler);
    mp_scaler_free(&c->bond_scaler);
    memset(c, 0, sizeof *c);
}

/* ===================================================================== */
/* The column files of a run that uses a saved model                      */
/* ===================================================================== */

mp_status mp_columns_files_open(mp_columns_files *cf, const mp_columns *c, const char *atom_path,
                                const char *bond_path, const char *model_path, int32_t n_mols,
                                const char *prefix)
{
    memset(cf, 0, sizeof *cf);
    cf->model_path = model_path;
    const char *paths[2] = { atom_path, bond_path };
    const int dims[2] = { c->atom_dim, c->bond_dim };
    const char *opt[2] = { "atom-descriptors-path", "bond-features-path" };
    if (!prefix)
        prefix = "";
    for (int k = 0; k < 2; k++) {
        if (dims[k] && !paths[k])
            return mp_error_set(MP_ERR_ARG, "%s: the model was trained with %d %s columns: "
                                "give them with --%s%s", model_path, dims[k],
                                k ? "bond" : "atom", prefix, opt[k]);
        if (!dims[k] && paths[k])
            return mp_error_set(MP_ERR_ARG, "%s: the model takes no %s columns: leave out "
                                "--%s%s", model_path, k ? "bond" : "atom", prefix, opt[k]);
        mp_status st;
        if (paths[k] && (st = mp_colfile_read(&cf->file[k], paths[k], n_mols)))
            return st;
        cf->has[k] = paths[k] != NULL;
    }
    return MP_OK;
}

mp_status mp_columns_files_apply(const mp_columns_files *cf, const mp_columns *c, mp_graphs *g,
                                 int32_t first, const char *const *smiles)
{
    if (!cf->has[0] && !cf->has[1] && !c->atom_dim && !c->bond_dim)
        return MP_OK;
    mp_status st;
    for (int k = 0; k < 2; k++)
        if (cf->has[k] && (st = mp_colfile_apply(&cf->file[k], g, k, first, smiles)))
            return st;
    if ((st = mp_columns_check(c, g, cf->model_path)))
        return st;
    mp_columns_apply(c, g);
    return MP_OK;
}

mp_status mp_columns_files_end(const mp_columns_files *cf, size_t seen, int last,
                               const char *data_path)
{
    for (int k = 0; k < 2; k++) {
        const mp_colfile *f = &cf->file[k];
        size_t have = (size_t)f->n_mols;
        if (cf->has[k] && (f->line ? last && have > seen : (last ? have != seen : have < seen)))
            return mp_error_set(MP_ERR_FORMAT, "%s: %d molecules for the %zu input rows of %s",
                                f->path, (int)f->n_mols, seen, data_path);
    }
    return MP_OK;
}

void mp_columns_files_free(mp_columns_files *cf)
{
    mp_colfile_free(&cf->file[0]);
    mp_colfile_free(&cf->file[1]);
    memset(cf, 0, sizeof *cf);
}
