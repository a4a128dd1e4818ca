/*
 * modelio.c - an ensemble to and from its model file (.mpm): the header keys
 * (architecture, featurizer, tasks, scalers) and one block of named
 * parameter tensors per member, through the file format of modelfile.h.
 * mp_ensemble_save and mp_ensemble_load are declared in ensemble.h.
 */
#include "run/ensemble.h"

#include "models/heads.h"
#include "run/modelfile.h"

#include <math.h>
#include <string.h>

static const char *agg_name(mp_aggregation a)
{
    return a == MP_AGG_SUM ? "sum" : a == MP_AGG_NORM ? "norm"
           : a == MP_AGG_ATTENTIVE ? "attentive" : "mean";
}

/* The keys of format version 2 (issue 11), each written only where the
 * model differs from what a version 1 file means, so a version 1 model's
 * header is what it was. */
static const char *const v2_keys[] = {
    "loss", "n_classes", "loss_lambda", "loss_eps", "quantile_alpha", "activation",
    "batch_norm", "atom_messages", "undirected", "spectra_activation", "spectra_floor",
};

static mp_status header_put_v2(const mp_model_config *c, mp_kv *kv)
{
    mp_status st = MP_OK;
    mp_loss_kind loss = mp_model_loss(c);
    if (loss != mp_head_default_loss(c->task))
        st = mp_kv_set(kv, "loss", mp_loss_name(loss));
    if (!st && mp_head_is_multiclass(c->task))
        st = mp_kv_set_int(kv, "n_classes", c->n_classes);
    if (!st && c->loss_lambda != 0)
        st = mp_kv_set_double(kv, "loss_lambda", c->loss_lambda);
    if (!st && c->loss_eps != 1e-8)
        st = mp_kv_set_double(kv, "loss_eps", c->loss_eps);
    if (!st && c->task == MP_MODEL_REGRESSION_QUANTILE)
        st = mp_kv_set_double(kv, "quantile_alpha", c->loss_alpha);
    if (!st && c->activation != MP_ACT_RELU)
        st = mp_kv_set(kv, "activation", mp_act_name(c->activation));
    if (!st && c->batch_norm)
        st = mp_kv_set_int(kv, "batch_norm", 1);
    if (!st && c->atom_messages)
        st = mp_kv_set_int(kv, "atom_messages", 1);
    if (!st && c->undirected)
        st = mp_kv_set_int(kv, "undirected", 1);
    if (!st && c->task == MP_MODEL_SPECTRAL)   /* task_type spectral: its two settings */
        st = mp_kv_set(kv, "spectra_activation",
                       c->spectra_act == MP_SPECTRA_SOFTPLUS ? "softplus" : "exp");
    if (!st && c->task == MP_MODEL_SPECTRAL)
        st = mp_kv_set_double(kv, "spectra_floor", c->spectra_floor);
    return st;
}

/* The version 2 keys into c (absent: version 1's meaning), each checked;
 * a version 1 file must have none. */
static mp_status header_get_v2(const mp_kv *kv, const char *path, uint32_t version,
                               mp_model_config *c)
{
    const char *s;
    mp_status st;
    long long v;
    for (size_t i = 0; version < 2 && i < sizeof v2_keys / sizeof v2_keys[0]; i++)
        if (mp_kv_get(kv, v2_keys[i]))
            return mp_error_set(MP_ERR_FORMAT, "%s: key '%s' in a model file of format version "
                                "%u (it came with version 2)", path, v2_keys[i], version);
    char why[512];
    c->loss = mp_head_default_loss(c->task);
    if ((s = mp_kv_get(kv, "loss")) && (st = mp_loss_parse(s, c->task, &c->loss))) {
        snprintf(why, sizeof why, "%s", mp_error_message());
        return mp_error_set(MP_ERR_FORMAT, "%s: %s", path, why);
    }
    c->n_classes = 0;
    if (mp_head_is_multiclass(c->task)) {
        if ((st = mp_kv_get_int(kv, "n_classes", 2, MP_LOSS_MAX_CLASSES, &v)))
            return st;
        c->n_classes = (int)v;
    } else if (mp_kv_get(kv, "n_classes")) {
        return mp_error_set(MP_ERR_FORMAT, "%s: n_classes in a model of task type %s", path,
                            mp_model_task_name(c->task));
    }
    struct { const char *key; double *field, lo, hi; } reals[] = {
        { "loss_lambda", &c->loss_lambda, 0, 1e6 }, { "loss_eps", &c->loss_eps, 0, 1 },
        { "quantile_alpha", &c->loss_alpha, 1e-6, 0.999999 },
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        if (!mp_kv_get(kv, reals[i].key))
            continue;
        if ((st = mp_kv_get_double(kv, reals[i].key, reals[i].field)))
            return st;
        if (!(*reals[i].field >= reals[i].lo && *reals[i].field <= reals[i].hi))
            return mp_error_set(MP_ERR_FORMAT, "%s: %s = %g (must be in [%g, %g])", path,
                                reals[i].key, *reals[i].field, reals[i].lo, reals[i].hi);
    }
    c->spectra_act = MP_SPECTRA_EXP;
    c->spectra_floor = 1e-8;
    if (c->task != MP_MODEL_SPECTRAL && (mp_kv_get(kv, "spectra_activation") ||
                                          mp_kv_get(kv, "spectra_floor")))
        return mp_error_set(MP_ERR_FORMAT, "%s: spectra keys in a model of task type %s", path,
                            mp_model_task_name(c->task));
    if (c->task == MP_MODEL_SPECTRAL) {
        if ((st = mp_kv_get_str(kv, "spectra_activation", &s)))
            return st;
        if (strcmp(s, "exp") && strcmp(s, "softplus"))
            return mp_error_set(MP_ERR_FORMAT, "%s: spectra_activation '%s' (exp or softplus)",
                                path, s);
        c->spectra_act = strcmp(s, "softplus") ? MP_SPECTRA_EXP : MP_SPECTRA_SOFTPLUS;
        if ((st = mp_kv_get_double(kv, "spectra_floor", &c->spectra_floor)))
            return st;
        if (!(c->spectra_floor > 0 && c->spectra_floor <= 1e30))
            return mp_error_set(MP_ERR_FORMAT, "%s: spectra_floor = %g (must be > 0)", path,
                                c->spectra_floor);
    }
    if ((s = mp_kv_get(kv, "activation")) && mp_act_parse(s, &c->activation)) {
        snprintf(why, sizeof why, "%s", mp_error_message());
        return mp_error_set(MP_ERR_FORMAT, "%s: %s", path, why);
    }
    struct { const char *key; int *field; } flags[] = {
        { "batch_norm", &c->batch_norm }, { "atom_messages", &c->atom_messages },
        { "undirected", &c->undirected },
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!mp_kv_get(kv, flags[i].key))
            continue;
        if ((st = mp_kv_get_int(kv, flags[i].key, 0, 1, &v)))
            return st;
        *flags[i].field = (int)v;
    }
    return MP_OK;
}

/* ===================================================================== */
/* Saving                                                                 */
/* ===================================================================== */

/* The molecule features.  A model without any writes "features = none", as
 * every version has.  One with features writes their current names under
 * feature_sets (never "features": files before it name the 43-value
 * registry "rdkit2d", and an older molprop then refuses the file rather
 * than misread it), the scaling mode, and the width of the features file. */
static mp_status features_put(const mp_ensemble *e, mp_kv *kv, const char *names)
{
    mp_status st;
    if (!e->features)
        return mp_kv_set(kv, "features", "none");
    if ((st = mp_kv_set(kv, "feature_sets", names)) ||
        (st = mp_kv_set(kv, "feature_scaling", mp_feature_scaling_name(e->feature_scaling))))
        return st;
    if (e->features & MP_FEAT_FILE)
        return mp_kv_set_int(kv, "feature_file_cols", e->n_file);
    return MP_OK;
}

/* Every header key of e (the file format requires none of them; the
 * loader below requires all). */
static mp_status header_put(const mp_ensemble *e, mp_kv *kv)
{
    const mp_model_config *c = &e->cfg;
    char feats[128];
    mp_feature_set_name(e->features, feats, sizeof feats);
    mp_status st;
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
        (st = features_put(e, kv, feats)) ||
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
        (st = mp_kv_set_int(kv, "n_params", (long long)mp_model_n_params(e->members[0]))) ||
        (st = header_put_v2(c, kv)) || (st = mp_columns_put(&e->cols, kv)))
        return st;
    if (mp_head_is_regression(c->task) &&
        (st = mp_kv_set_scaler(kv, "target_scaler", &e->target_scaler)))
        return st;
    if (c->extra_dim > 0 && (st = mp_kv_set_scaler(kv, "feature_scaler", &e->feature_scaler)))
        return st;
    return MP_OK;
}

mp_status mp_ensemble_save(const mp_ensemble *e, const char *path)
{
    mp_kv *kv = NULL;
    mp_tensor *tensors = NULL;
    float *params = NULL;
    int n_views = 0;
    const mp_param_view *views = mp_model_views(e->members[0], &n_views);
    size_t n_params = mp_model_n_params(e->members[0]);

    mp_status st = mp_kv_new(&kv);
    if (st)
        return st;
    if ((st = header_put(e, kv)))
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

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

static mp_status kv_int(const mp_kv *kv, const char *key, long long lo, long long hi, int *out)
{
    long long v;
    mp_status st = mp_kv_get_int(kv, key, lo, hi, &v);
    if (!st)
        *out = (int)v;
    return st;
}

/* What the header says, before an ensemble exists. */
typedef struct {
    mp_model_config c;
    int             n_members, n_tasks, n_desc, n_file;
    mp_task_type    task;
    mp_atom_layout  layout;
    unsigned        features;
    mp_feature_scaling scaling;
    char          **tasks;        /* one allocation (mp_kv_get_strs) */
    size_t          n_task_names;
    mp_columns      cols;         /* the user atom / bond columns (owned) */
} header_info;

static mp_status header_model_kind(const mp_kv *kv, const char *path, mp_model_kind *kind)
{
    const char *s;
    mp_status st;
    if ((st = mp_kv_get_str(kv, "format", &s)))
        return st;
    if (strcmp(s, "molprop-model") != 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: not a molprop model (format '%s')", path, s);
    if ((st = mp_kv_get_str(kv, "model", &s)))
        return st;
    if (!strcmp(s, "dmpnn"))
        *kind = MP_MODEL_DMPNN;
    else if (!strcmp(s, "ffn"))
        *kind = MP_MODEL_FFN;
    else
        return mp_error_set(MP_ERR_FORMAT, "%s: unknown model kind '%s'", path, s);
    return MP_OK;
}

/* The current error message, prefixed with the file's name. */
static mp_status in_file(const char *path)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mp_error_message());
    return mp_error_set(MP_ERR_FORMAT, "%s: %s", path, msg);
}

/* The molecule features, of either generation (features_put). */
static mp_status features_get(const mp_kv *kv, const char *path, header_info *h)
{
    const char *s;
    mp_status st;
    h->scaling = MP_FSCALE_ON;   /* what every file before feature_sets did */
    h->n_file = 0;
    if (!mp_kv_get(kv, "feature_sets")) {
        if ((st = mp_kv_get_str(kv, "features", &s)))
            return st;
        return mp_feature_set_parse_legacy(s, &h->features) ? in_file(path) : MP_OK;
    }
    if ((st = mp_kv_get_str(kv, "feature_sets", &s)))
        return st;
    if (mp_feature_set_parse(s, &h->features))
        return in_file(path);
    if ((st = mp_kv_get_str(kv, "feature_scaling", &s)))
        return st;
    if (mp_feature_scaling_parse(s, &h->scaling))
        return in_file(path);
    if (mp_kv_get(kv, "feature_file_cols")) {
        if ((st = kv_int(kv, "feature_file_cols", 1, 1000000, &h->n_file)))
            return st;
        h->features |= MP_FEAT_FILE;
    }
    if (!h->features)
        return mp_error_set(MP_ERR_FORMAT, "%s: feature_sets names no features", path);
    return MP_OK;
}

/* Reads and cross-checks every header key the ensemble needs into h. */
static mp_status header_get(const mp_kv *kv, const char *path, uint32_t version, header_info *h)
{
    mp_model_config *c = &h->c;
    const char *s;
    *c = mp_model_config_default();
    mp_status st = header_model_kind(kv, path, &c->kind);
    if (st)
        return st;
    if ((st = mp_kv_get_str(kv, "task_type", &s)) || (st = mp_task_type_parse(s, &h->task)) ||
        (st = kv_int(kv, "n_tasks", 1, 1000000, &h->n_tasks)) ||
        (st = mp_kv_get_strs(kv, "tasks", &h->tasks, &h->n_task_names)) ||
        (st = mp_kv_get_str(kv, "atom_layout", &s)) || (st = mp_atom_layout_parse(s, &h->layout)) ||
        (st = kv_int(kv, "atom_fdim", 1, 100000, &c->atom_fdim)) ||
        (st = features_get(kv, path, h)) ||
        (st = kv_int(kv, "n_desc", 0, 100000, &h->n_desc)) ||
        (st = kv_int(kv, "extra_dim", 0, 10000000, &c->extra_dim)) ||
        (st = kv_int(kv, "hidden", 1, 1000000, &c->hidden)) ||
        (st = kv_int(kv, "depth", 1, 1000, &c->depth)) ||
        (st = mp_kv_get_double(kv, "dropout", &c->dropout)) ||
        (st = kv_int(kv, "ffn_layers", 1, 1000, &c->ffn_layers)) ||
        (st = kv_int(kv, "ffn_hidden", 0, 1000000, &c->ffn_hidden)) ||
        (st = mp_kv_get_str(kv, "aggregation", &s)) ||
        (st = mp_kv_get_double(kv, "aggregation_norm", &c->agg_norm)) ||
        (st = kv_int(kv, "ensemble_size", 1, 100000, &h->n_members)))
        return st;
    if (strcmp(s, "sum") && strcmp(s, "norm") && strcmp(s, "mean") &&
        (version < 2 || strcmp(s, "attentive")))
        return mp_error_set(MP_ERR_FORMAT, "%s: unknown aggregation '%s'", path, s);
    c->aggregation = !strcmp(s, "sum") ? MP_AGG_SUM : !strcmp(s, "norm") ? MP_AGG_NORM
                     : !strcmp(s, "attentive") ? MP_AGG_ATTENTIVE : MP_AGG_MEAN;
    if ((size_t)h->n_tasks != h->n_task_names || c->atom_fdim != mp_atom_fdim(h->layout) ||
        c->extra_dim != mp_feature_set_dim(h->features, h->n_desc, h->n_file))
        return mp_error_set(MP_ERR_FORMAT, "%s: header does not add up (tasks %d vs %zu names, "
                            "atom_fdim %d for layout %s, extra_dim %d for features)", path,
                            h->n_tasks, h->n_task_names, c->atom_fdim,
                            mp_atom_layout_name(h->layout), c->extra_dim);
    c->n_tasks = h->n_tasks;
    if (version < 2 && h->task != MP_TASK_REGRESSION && h->task != MP_TASK_CLASSIFICATION)
        return mp_error_set(MP_ERR_FORMAT, "%s: task type %s in a model file of format version "
                            "%u", path, mp_task_type_name(h->task), version);
    c->task = (mp_model_task)h->task;
    if ((st = header_get_v2(kv, path, version, c)))
        return st;
    /* the user columns' keys came with version 2 */
    if (version < 2 && (mp_kv_get(kv, "atom_descriptors") || mp_kv_get(kv, "bond_features_dim")))
        return mp_error_set(MP_ERR_FORMAT, "%s: user column keys in a model file of format "
                            "version %u (they came with version 2)", path, version);
    if ((st = mp_columns_get(&h->cols, kv, path)))
        return st;
    if ((h->cols.atom_dim || h->cols.bond_dim) && c->kind != MP_MODEL_DMPNN)
        return mp_error_set(MP_ERR_FORMAT, "%s: user atom / bond columns in an FFN model", path);
    mp_columns_config(&h->cols, c);
    return MP_OK;
}

/* The ensemble's own copies of the header's names, featurizer and scalers. */
static mp_status header_apply(mp_ensemble *e, const mp_kv *kv, header_info *h)
{
    const char *s;
    mp_status st;
    e->task = h->task;
    e->n_tasks = (size_t)h->n_tasks;
    /* The kv getter returns one block; the ensemble owns each name. */
    if (!(e->task_names = mp_calloc((size_t)h->n_tasks, sizeof(char *))))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < h->n_tasks; k++)
        if (!(e->task_names[k] = mp_strdup(h->tasks[k])))
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
    e->layout = h->layout;
    e->features = h->features;
    e->n_desc = h->n_desc;
    e->n_file = h->n_file;
    e->feature_scaling = h->scaling;
    if ((st = mp_kv_get_str(kv, "smiles_column", &s)))
        return st;
    if (!(e->smiles_name = mp_strdup(s)))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    if (mp_head_is_regression(h->c.task) &&
        (st = mp_kv_get_scaler(kv, "target_scaler", (size_t)h->n_tasks, &e->target_scaler)))
        return st;
    if (h->c.extra_dim > 0 &&
        ((st = mp_kv_get_scaler(kv, "feature_scaler", (size_t)h->c.extra_dim,
                                &e->feature_scaler)) ||
         (st = mp_feature_scaler_check(&e->feature_scaler, e->features, e->feature_scaling,
                                       e->n_desc, e->n_file))))
        return st;
    e->cols = h->cols;   /* moved: the ensemble owns the scalers now */
    memset(&h->cols, 0, sizeof h->cols);
    return MP_OK;
}

/*
 * The parameters per member the header describes (mp_model_config_n_params:
 * model.c's layout counted, nothing allocated) are checked against the
 * tensors really in the file before a model is built, so a header that
 * claims an absurd model (hidden = 65536: 2^32 parameters in W_h alone) is
 * refused with a message instead of allocating what it claims.
 */
/* Every member's tensors in the file hold `want` values (so what the
 * models allocate is bounded by the file's length). */
static mp_status check_file_params(const mp_modelfile *mf, uint64_t want, const char *path)
{
    uint64_t *have = mp_calloc(mf->n_blocks ? mf->n_blocks : 1, sizeof *have);
    if (!have)
        return mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
    for (size_t i = 0; i < mf->n_tensors; i++)
        have[mf->tensors[i].block] += mp_tensor_numel(&mf->tensors[i]);
    mp_status st = MP_OK;
    for (uint32_t k = 0; k < mf->n_blocks && st == MP_OK; k++)
        if (have[k] != want)
            st = mp_error_set(MP_ERR_FORMAT, "%s: the header describes a model of %llu "
                              "parameters per member, the file holds %llu for member %u", path,
                              (unsigned long long)want, (unsigned long long)have[k], k);
    mp_free(have);
    return st;
}

/* Every member's tensors, each checked against the model's views. */
static mp_status params_get(mp_ensemble *e, const mp_modelfile *mf, const char *path)
{
    int n_views = 0;
    const mp_param_view *views = mp_model_views(e->members[0], &n_views);
    size_t n_params = mp_model_n_params(e->members[0]);
    if ((size_t)n_views * (size_t)e->n_members != mf->n_tensors)
        return mp_error_set(MP_ERR_FORMAT, "%s: %zu tensors, expected %d per member", path,
                            mf->n_tensors, n_views);
    float *params = mp_malloc(sizeof(float) * n_params);
    if (!params)
        return mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
    mp_status st = MP_OK;
    for (int k = 0; st == MP_OK && k < e->n_members; k++) {
        for (int v = 0; st == MP_OK && v < n_views; v++) {
            uint64_t shape[2] = { (uint64_t)views[v].rows, (uint64_t)views[v].cols };
            const float *data;
            if ((st = mp_modelfile_get(mf, (uint32_t)k, views[v].name, 2, shape, &data)))
                break;
            memcpy(params + views[v].offset, data,
                   sizeof(float) * (size_t)views[v].rows * (size_t)views[v].cols);
        }
        if (st == MP_OK)
            st = mp_model_set_params(e->members[k], params);
    }
    mp_free(params);
    return st;
}

mp_status mp_ensemble_load(mp_ensemble **out, const char *path, const char *backend_name)
{
    *out = NULL;
    mp_modelfile *mf = NULL;
    mp_ensemble *e = NULL;
    header_info h;
    memset(&h, 0, sizeof h);
    mp_status st = mp_modelfile_read(&mf, path);
    if (st)
        return st;
    if ((st = header_get(mf->header, path, mf->version, &h)))
        goto done;
    if (mf->n_blocks != (uint32_t)h.n_members) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: header says %d ensemble members, file holds %u",
                          path, h.n_members, mf->n_blocks);
        goto done;
    }
    uint64_t want = mp_model_config_n_params(&h.c);
    if (want == 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", mp_error_message());
        st = mp_error_set(MP_ERR_FORMAT, "%s: %s", path, why);
        goto done;
    }
    if ((st = check_file_params(mf, want, path)) ||
        (st = mp_ensemble_create(&e, &h.c, h.n_members, 0, backend_name)) ||
        (st = header_apply(e, mf->header, &h)) || (st = params_get(e, mf, path)))
        goto done;
    *out = e;
    e = NULL;
done:
    mp_free(h.tasks);
    mp_columns_free(&h.cols);
    mp_ensemble_free(e);
    mp_modelfile_free(mf);
    return st;
}
