/*
 * ensemble.c - a set of trained models plus what turns their raw outputs into
 * predictions in the user's units (scalers, task names), and the model file.
 */
#include "models/ensemble.h"

#include "models/modelfile.h"

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

/* ===================================================================== */
/* Prediction                                                             */
/* ===================================================================== */

mp_status mp_ensemble_predict(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                              int32_t n, int first, int count, int32_t batch_size,
                              double *mean, double *std)
{
    size_t t = e->n_tasks;
    int lo = first, hi = count > 0 ? first + count : e->n_members;
    int n_used = hi - lo;
    int dim = e->cfg.extra_dim;
    int is_cls = e->task == MP_TASK_CLASSIFICATION;
    if (batch_size < 1)
        batch_size = 1;
    if (e->features && f->n_desc != e->n_desc && (e->features & MP_FEAT_RDKIT2D))
        return mp_error_set(MP_ERR_FORMAT, "the model was trained on %d descriptors, these "
                            "features have %d", e->n_desc, f->n_desc);

    int32_t *sel = mp_malloc(sizeof(int32_t) * (size_t)batch_size);
    float *extra = dim ? mp_malloc(sizeof(float) * (size_t)batch_size * (size_t)dim) : NULL;
    float *out = mp_malloc(sizeof(float) * (size_t)batch_size * t);
    /* Every member's predictions for the batch, kept so the spread is
     * computed in two passes (mean, then squared deviations). */
    double *vals = mp_malloc(sizeof(double) * (size_t)n_used * (size_t)batch_size * t);
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    mp_status st = MP_OK;
    if (!sel || (dim && !extra) || !out || !vals) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory predicting %d molecules", n);
        goto done;
    }

    for (int32_t b0 = 0; b0 < n; b0 += batch_size) {
        /* Only valid molecules go through the models; invalid ones read NaN. */
        int32_t nb = 0, span = n - b0 < batch_size ? n - b0 : batch_size;
        for (int32_t i = 0; i < span; i++)
            if (f->g.valid[mols[b0 + i]])
                sel[nb++] = mols[b0 + i];
        if (nb > 0) {
            const mp_graphs *gb = NULL;
            if (e->cfg.kind == MP_MODEL_DMPNN) {
                if ((st = mp_graphs_select(&batch, &f->g, sel, nb)))
                    goto done;
                gb = &batch;
            }
            if (extra) {
                mp_feature_set_fill(e->features, f, sel, nb, extra);
                mp_scaler_transform_f32(&e->feature_scaler, extra, (size_t)nb);
            }
            for (int k = lo; k < hi; k++) {
                double *val = vals + (size_t)(k - lo) * (size_t)nb * t;
                if ((st = mp_model_forward(e->members[k], gb, extra, nb, 0, out)))
                    goto done;
                if (is_cls) {
                    for (size_t i = 0; i < (size_t)nb * t; i++)
                        val[i] = 1.0 / (1.0 + exp(-(double)out[i]));
                } else {
                    mp_scaler_inverse_from_f32(&e->target_scaler, out, val, (size_t)nb);
                }
            }
        }
        int32_t j = 0;
        for (int32_t i = 0; i < span; i++) {
            double *mrow = mean + (size_t)(b0 + i) * t;
            double *srow = std ? std + (size_t)(b0 + i) * t : NULL;
            if (!f->g.valid[mols[b0 + i]]) {
                for (size_t c = 0; c < t; c++) {
                    mrow[c] = NAN;
                    if (srow)
                        srow[c] = NAN;
                }
                continue;
            }
            for (size_t c = 0; c < t; c++) {
                size_t at = (size_t)j * t + c, stride = (size_t)nb * t;
                double mu = 0, ss = 0;
                for (int k = 0; k < n_used; k++)
                    mu += vals[(size_t)k * stride + at];
                mu /= n_used;
                for (int k = 0; k < n_used; k++) {
                    double dv = vals[(size_t)k * stride + at] - mu;
                    ss += dv * dv;
                }
                mrow[c] = mu;
                if (srow)
                    srow[c] = sqrt(ss / n_used);   /* ddof 0, as np.std */
            }
            j++;
        }
    }
done:
    mp_graphs_free(&batch);
    mp_free(sel);
    mp_free(extra);
    mp_free(out);
    mp_free(vals);
    return st;
}

/* ===================================================================== */
/* Model file                                                             */
/* ===================================================================== */

static const char *agg_name(mp_aggregation a)
{
    return a == MP_AGG_SUM ? "sum" : a == MP_AGG_NORM ? "norm" : "mean";
}

mp_status mp_ensemble_save(const mp_ensemble *e, const char *path)
{
    const mp_model_config *c = &e->cfg;
    mp_kv *kv = NULL;
    mp_tensor *tensors = NULL;
    float *params = NULL;
    int n_views = 0;
    const mp_param_view *views = mp_model_views(e->members[0], &n_views);
    size_t n_params = mp_model_n_params(e->members[0]);
    char feats[128];
    mp_feature_set_name(e->features, feats, sizeof feats);

    mp_status st = mp_kv_new(&kv);
    if (st)
        return st;
    if ((st = mp_kv_set(kv, "format", "molprop-model")) ||
        (st = mp_kv_set(kv, "molprop_version", MP_VERSION)) ||
        (st = mp_kv_set(kv, "rdkit_version", mp_rdkit_version())) ||
        (st = mp_kv_set(kv, "model", c->kind == MP_MODEL_DMPNN ? "dmpnn" : "ffn")) ||
        (st = mp_kv_set(kv, "task_type", mp_task_type_name(e->task))) ||
        (st = mp_kv_set_int(kv, "n_tasks", (long long)e->n_tasks)) ||
        (st = mp_kv_set_strs(kv, "tasks", (const char *const *)e->task_names, e->n_tasks)) ||
        (st = mp_kv_set(kv, "smiles_column", e->smiles_name ? e->smiles_name : "smiles")) ||
        (st = mp_kv_set(kv, "atom_layout", mp_atom_layout_name(e->layout))) ||
        (st = mp_kv_set_int(kv, "atom_fdim", c->atom_fdim)) ||
        (st = mp_kv_set(kv, "features", feats)) ||
        (st = mp_kv_set_int(kv, "n_desc", e->n_desc)) ||
        (st = mp_kv_set_int(kv, "extra_dim", c->extra_dim)) ||
        (st = mp_kv_set_int(kv, "hidden", c->hidden)) ||
        (st = mp_kv_set_int(kv, "depth", c->depth)) ||
        (st = mp_kv_set_double(kv, "dropout", c->dropout)) ||
        (st = mp_kv_set_int(kv, "ffn_layers", c->ffn_layers)) ||
        (st = mp_kv_set_int(kv, "ffn_hidden", c->ffn_hidden)) ||
        (st = mp_kv_set(kv, "aggregation", agg_name(c->aggregation))) ||
        (st = mp_kv_set_double(kv, "aggregation_norm", c->agg_norm)) ||
        (st = mp_kv_set_int(kv, "ensemble_size", e->n_members)) ||
        (st = mp_kv_set_int(kv, "n_params", (long long)n_params)))
        goto done;
    if (e->task == MP_TASK_REGRESSION &&
        (st = mp_kv_set_scaler(kv, "target_scaler", &e->target_scaler)))
        goto done;
    if (c->extra_dim > 0 &&
        (st = mp_kv_set_scaler(kv, "feature_scaler", &e->feature_scaler)))
        goto done;

    size_t n_tensors = (size_t)n_views * (size_t)e->n_members;
    tensors = mp_calloc(n_tensors, sizeof *tensors);
    params = mp_malloc(sizeof(float) * n_params * (size_t)e->n_members);
    if (!tensors || !params) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory saving %s", path);
        goto done;
    }
    for (int k = 0; k < e->n_members; k++) {
        float *p = params + n_params * (size_t)k;
        if ((st = mp_model_get_params(e->members[k], p)))
            goto done;
        for (int v = 0; v < n_views; v++) {
            mp_tensor *t = &tensors[(size_t)k * (size_t)n_views + (size_t)v];
            t->name = views[v].name;
            t->block = (uint32_t)k;
            t->ndim = 2;
            t->shape[0] = (uint64_t)views[v].rows;
            t->shape[1] = (uint64_t)views[v].cols;
            t->data = p + views[v].offset;
        }
    }
    st = mp_modelfile_write(path, kv, tensors, n_tensors);
done:
    mp_free(tensors);
    mp_free(params);
    mp_kv_free(kv);
    return st;
}

static mp_status kv_int(const mp_kv *kv, const char *key, long long lo, long long hi, int *out)
{
    long long v;
    mp_status st = mp_kv_get_int(kv, key, lo, hi, &v);
    if (!st)
        *out = (int)v;
    return st;
}

mp_status mp_ensemble_load(mp_ensemble **out, const char *path, const char *backend_name)
{
    *out = NULL;
    mp_modelfile *mf = NULL;
    mp_ensemble *e = NULL;
    float *params = NULL;
    char **tasks = NULL;
    size_t n_task_names = 0;
    const char *s;
    mp_status st = mp_modelfile_read(&mf, path);
    if (st)
        return st;
    const mp_kv *kv = mf->header;

    mp_model_config c = mp_model_config_default();
    int n_members = 0, n_tasks = 0, n_desc = 0;
    mp_task_type task;
    mp_atom_layout layout;
    unsigned features;
    if ((st = mp_kv_get_str(kv, "format", &s)))
        goto done;
    if (strcmp(s, "molprop-model") != 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: not a molprop model (format '%s')", path, s);
        goto done;
    }
    if ((st = mp_kv_get_str(kv, "model", &s)))
        goto done;
    if (!strcmp(s, "dmpnn"))
        c.kind = MP_MODEL_DMPNN;
    else if (!strcmp(s, "ffn"))
        c.kind = MP_MODEL_FFN;
    else {
        st = mp_error_set(MP_ERR_FORMAT, "%s: unknown model kind '%s'", path, s);
        goto done;
    }
    if ((st = mp_kv_get_str(kv, "task_type", &s)) || (st = mp_task_type_parse(s, &task)) ||
        (st = kv_int(kv, "n_tasks", 1, 1000000, &n_tasks)) ||
        (st = mp_kv_get_strs(kv, "tasks", &tasks, &n_task_names)) ||
        (st = mp_kv_get_str(kv, "atom_layout", &s)) || (st = mp_atom_layout_parse(s, &layout)) ||
        (st = kv_int(kv, "atom_fdim", 1, 100000, &c.atom_fdim)) ||
        (st = mp_kv_get_str(kv, "features", &s)) || (st = mp_feature_set_parse(s, &features)) ||
        (st = kv_int(kv, "n_desc", 0, 100000, &n_desc)) ||
        (st = kv_int(kv, "extra_dim", 0, 10000000, &c.extra_dim)) ||
        (st = kv_int(kv, "hidden", 1, 1000000, &c.hidden)) ||
        (st = kv_int(kv, "depth", 1, 1000, &c.depth)) ||
        (st = mp_kv_get_double(kv, "dropout", &c.dropout)) ||
        (st = kv_int(kv, "ffn_layers", 1, 1000, &c.ffn_layers)) ||
        (st = kv_int(kv, "ffn_hidden", 0, 1000000, &c.ffn_hidden)) ||
        (st = mp_kv_get_str(kv, "aggregation", &s)) ||
        (st = mp_kv_get_double(kv, "aggregation_norm", &c.agg_norm)) ||
        (st = kv_int(kv, "ensemble_size", 1, 100000, &n_members)))
        goto done;
    c.aggregation = !strcmp(s, "sum") ? MP_AGG_SUM : !strcmp(s, "norm") ? MP_AGG_NORM : MP_AGG_MEAN;
    if (strcmp(s, "sum") && strcmp(s, "norm") && strcmp(s, "mean")) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: unknown aggregation '%s'", path, s);
        goto done;
    }
    if ((size_t)n_tasks != n_task_names || c.atom_fdim != mp_atom_fdim(layout) ||
        c.extra_dim != mp_feature_set_dim(features, n_desc)) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: header does not add up (tasks %d vs %zu names, "
                          "atom_fdim %d for layout %s, extra_dim %d for features)", path,
                          n_tasks, n_task_names, c.atom_fdim, mp_atom_layout_name(layout),
                          c.extra_dim);
        goto done;
    }
    c.n_tasks = n_tasks;
    c.task = task == MP_TASK_CLASSIFICATION ? MP_MODEL_CLASSIFICATION : MP_MODEL_REGRESSION;
    if (mf->n_blocks != (uint32_t)n_members) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: header says %d ensemble members, file holds %u",
                          path, n_members, mf->n_blocks);
        goto done;
    }
    if ((st = mp_ensemble_create(&e, &c, n_members, 0, backend_name)))
        goto done;
    e->task = task;
    e->n_tasks = (size_t)n_tasks;
    /* The kv getter returns one block; the ensemble owns each name. */
    if (!(e->task_names = mp_calloc((size_t)n_tasks, sizeof(char *)))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < n_tasks; k++)
        if (!(e->task_names[k] = mp_strdup(tasks[k]))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
    e->layout = layout;
    e->features = features;
    e->n_desc = n_desc;
    if ((st = mp_kv_get_str(kv, "smiles_column", &s)) || !(e->smiles_name = mp_strdup(s))) {
        if (!st)
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (task == MP_TASK_REGRESSION &&
        (st = mp_kv_get_scaler(kv, "target_scaler", (size_t)n_tasks, &e->target_scaler)))
        goto done;
    if (c.extra_dim > 0 &&
        (st = mp_kv_get_scaler(kv, "feature_scaler", (size_t)c.extra_dim, &e->feature_scaler)))
        goto done;

    int n_views = 0;
    const mp_param_view *views = mp_model_views(e->members[0], &n_views);
    size_t n_params = mp_model_n_params(e->members[0]);
    params = mp_malloc(sizeof(float) * n_params);
    if (!params) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
        goto done;
    }
    if ((size_t)n_views * (size_t)n_members != mf->n_tensors) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: %zu tensors, expected %d per member", path,
                          mf->n_tensors, n_views);
        goto done;
    }
    for (int k = 0; k < n_members; k++) {
        for (int v = 0; v < n_views; v++) {
            uint64_t shape[2] = { (uint64_t)views[v].rows, (uint64_t)views[v].cols };
            const float *data;
            if ((st = mp_modelfile_get(mf, (uint32_t)k, views[v].name, 2, shape, &data)))
                goto done;
            memcpy(params + views[v].offset, data,
                   sizeof(float) * (size_t)views[v].rows * (size_t)views[v].cols);
        }
        if ((st = mp_model_set_params(e->members[k], params)))
            goto done;
    }
    *out = e;
    e = NULL;
done:
    mp_free(tasks);
    mp_free(params);
    mp_ensemble_free(e);
    mp_modelfile_free(mf);
    return st;
}
