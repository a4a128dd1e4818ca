/*
 * model.c - the life of an mp_model: configuration, the parameter block and its
 * views, Xavier initialisation, the activation arena, and the steps a trainer
 * calls (forward, loss + backward, Adam).  The layers themselves are in dmpnn.c
 * and ffn.c; everything here talks to the device only through the backend.
 */
#include "models/model_impl.h"

#include "models/heads.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Configuration                                                          */
/* ===================================================================== */

mp_model_config mp_model_config_default(void)
{
    mp_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = MP_MODEL_DMPNN;
    c.task = MP_MODEL_REGRESSION;
    c.n_tasks = 1;
    c.atom_fdim = 133;
    c.hidden = 300;
    c.depth = 3;
    c.dropout = 0.0;
    c.ffn_layers = 2;
    c.ffn_hidden = 0;
    c.extra_dim = 0;
    c.aggregation = MP_AGG_MEAN;
    c.agg_norm = 100.0;
    c.n_classes = 0;
    c.loss = MP_LOSS_MSE;
    c.loss_lambda = 0.0;
    c.loss_eps = 1e-8;
    c.loss_alpha = 0.1;
    c.spectra_act = MP_SPECTRA_EXP, c.spectra_floor = 1e-8;
    c.activation = MP_ACT_RELU;
    return c;
}

mp_loss_kind mp_model_loss(const mp_model_config *c)
{
    if (c->loss == MP_LOSS_MSE && c->task != MP_MODEL_REGRESSION &&
        (unsigned)c->task < MP_MODEL_TASK_COUNT)
        return mp_head_default_loss(c->task);
    return c->loss;
}

int mp_model_n_outputs(const mp_model_config *c)
{
    return c->n_tasks * mp_head_outputs(c->task, c->n_classes);
}

#define CFG_BAD(...) mp_error_set(MP_ERR_ARG, "model config: " __VA_ARGS__)

/* The task, loss and layer fields (config_check's first part). */
static mp_status config_check_head(const mp_model_config *c)
{
    if ((unsigned)c->task >= MP_MODEL_TASK_COUNT)
        return CFG_BAD("unknown task type %d", (int)c->task);
    if (c->n_tasks < 1 || c->n_tasks > 1000000)
        return CFG_BAD("n_tasks = %d (must be 1 .. 1000000)", c->n_tasks);
    if (mp_head_is_multiclass(c->task) &&
        (c->n_classes < 2 || c->n_classes > MP_LOSS_MAX_CLASSES))
        return CFG_BAD("n_classes = %d (a %s task needs 2 .. %d)", c->n_classes,
                       mp_model_task_name(c->task), MP_LOSS_MAX_CLASSES);
    const mp_loss_kind loss = mp_model_loss(c);
    if ((unsigned)loss >= MP_LOSS_COUNT || !mp_head_loss_fits(c->task, loss)) {
        char fits[256];
        mp_head_losses_text(c->task, fits, sizeof fits);
        return CFG_BAD("loss %s does not fit a %s task (it takes %s)", mp_loss_name(loss),
                       mp_model_task_name(c->task), fits);
    }
    if (!(c->loss_lambda >= 0 && isfinite(c->loss_lambda)) ||
        !(c->loss_eps >= 0 && isfinite(c->loss_eps)))
        return CFG_BAD("loss regularization %g / eps %g (must be >= 0)", c->loss_lambda,
                       c->loss_eps);
    if (!(c->loss_alpha > 0 && c->loss_alpha < 1))
        return CFG_BAD("quantile alpha = %g (must be in (0, 1))", c->loss_alpha);
    if ((c->spectra_act != MP_SPECTRA_EXP && c->spectra_act != MP_SPECTRA_SOFTPLUS) ||
        !(c->spectra_floor > 0 && isfinite(c->spectra_floor)))
        return CFG_BAD("spectra activation %d, floor %g", c->spectra_act, c->spectra_floor);
    if ((unsigned)c->activation >= MP_ACT_COUNT)
        return CFG_BAD("unknown activation %d", (int)c->activation);
    if ((c->atom_messages | c->undirected | c->batch_norm) & ~1)
        return CFG_BAD("atom_messages, undirected and batch_norm are 0 or 1");
    if (c->kind == MP_MODEL_FFN && (c->atom_messages || c->undirected || c->batch_norm ||
                                    c->aggregation == MP_AGG_ATTENTIVE))
        return CFG_BAD("atom messages, undirected messages, batch norm and attentive readout "
                       "are D-MPNN layers (an FFN model has none)");
    if (c->atom_messages && c->undirected)
        return CFG_BAD("undirected messages are bond messages (atom messages are undirected "
                       "already, as Chemprop v1 says)");
    return MP_OK;
}

static mp_status config_check(const mp_model_config *c)
{
    if (c->kind != MP_MODEL_DMPNN && c->kind != MP_MODEL_FFN)
        return CFG_BAD("unknown model kind %d", (int)c->kind);
    mp_status st = config_check_head(c);
    if (st)
        return st;
    if (c->ffn_layers < 1 || c->ffn_layers > MP_MAX_FFN_LAYERS)
        return CFG_BAD("ffn_layers = %d (must be 1 .. %d)", c->ffn_layers, MP_MAX_FFN_LAYERS);
    if (c->ffn_hidden < 0 || c->ffn_hidden > 65536)
        return CFG_BAD("ffn_hidden = %d (must be 0 .. 65536; 0 = hidden)", c->ffn_hidden);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return CFG_BAD("dropout = %g (must be in [0, 1))", c->dropout);
    if (c->extra_dim < 0 || c->extra_dim > 10000000)
        return CFG_BAD("extra_dim = %d (must be 0 .. 10000000)", c->extra_dim);
    if (c->atom_extra_dim < 0 || c->atom_extra_dim > 100000 || c->atom_desc_dim < 0 ||
        c->atom_desc_dim > 100000 || c->bond_extra_dim < 0 || c->bond_extra_dim > 100000)
        return CFG_BAD("atom / bond column widths %d, %d, %d (must be 0 .. 100000)",
                       c->atom_extra_dim, c->atom_desc_dim, c->bond_extra_dim);
    if (c->atom_extra_dim > 0 && c->atom_desc_dim > 0)
        return CFG_BAD("atom columns as features (%d) and as descriptors (%d) at once: "
                       "one mode only", c->atom_extra_dim, c->atom_desc_dim);
    if (c->kind == MP_MODEL_FFN && (c->atom_extra_dim || c->atom_desc_dim || c->bond_extra_dim))
        return CFG_BAD("an FFN model has no atoms or bonds for atom / bond columns");
    if (c->kind == MP_MODEL_FFN) {
        if (c->extra_dim < 1)
            return CFG_BAD("an FFN model needs input features (extra_dim = %d)", c->extra_dim);
        if (c->ffn_hidden == 0 && c->ffn_layers > 1 && (c->hidden < 1 || c->hidden > 65536))
            return CFG_BAD("hidden = %d (must be 1 .. 65536)", c->hidden);
        return MP_OK;
    }
    if (c->hidden < 1 || c->hidden > 65536)
        return CFG_BAD("hidden = %d (must be 1 .. 65536)", c->hidden);
    if (c->depth < 1 || c->depth > MP_MAX_DEPTH)
        return CFG_BAD("depth = %d (must be 1 .. %d)", c->depth, MP_MAX_DEPTH);
    if (c->atom_fdim < 2 || c->atom_fdim > 32767)
        return CFG_BAD("atom_fdim = %d (must be 2 .. 32767, the mass slot included)", c->atom_fdim);
    if (c->aggregation != MP_AGG_MEAN && c->aggregation != MP_AGG_SUM &&
        c->aggregation != MP_AGG_NORM && c->aggregation != MP_AGG_ATTENTIVE)
        return CFG_BAD("unknown aggregation %d", (int)c->aggregation);
    if (c->aggregation == MP_AGG_NORM && !(c->agg_norm > 0 && isfinite(c->agg_norm)))
        return CFG_BAD("aggregation norm = %g (must be > 0)", c->agg_norm);
    return MP_OK;
}

/* ===================================================================== */
/* Parameter block                                                        */
/* ===================================================================== */

/* How a view starts: Xavier-normal (a weight matrix), zeros (a bias, the
 * running mean), ones (batch norm's gamma, the running variance), or 0.25
 * (a PReLU slope, PyTorch's start). */
enum { INIT_XAVIER, INIT_ZERO, INIT_ONE, INIT_PRELU };

static size_t add_view(mp_model *m, const char *name, int rows, int cols, int init,
                       unsigned char *inits)
{
    int i = m->n_views++;
    snprintf(m->view_names[i], sizeof m->view_names[i], "%s", name);
    m->views[i] = (mp_param_view){ m->view_names[i], m->n_params, rows, cols };
    inits[i] = (unsigned char)init;
    size_t off = m->n_params;
    m->n_params += (size_t)rows * (size_t)cols;
    return off;
}

/* The views in block order: the encoder's (W_i, W_h, W_o, b_o; W_i holds
 * atom rows only and W_h [h + 14 x h] with atom messages, Chemprop v1's
 * shapes), the readout's (attention, batch norm), the head's, the PReLU
 * slopes.  Models without the optional layers have exactly the views (and
 * the initial values) they had before those layers existed. */
void mp_model_layout_params(mp_model *m, unsigned char *inits, int *fans)
{
    const mp_model_config *c = &m->cfg;
    const int am = c->atom_messages;
    if (c->kind == MP_MODEL_DMPNN) {
        m->off_wi = add_view(m, "W_i", c->atom_fdim + (am ? 0 : MP_BOND_FDIM), m->h,
                             INIT_XAVIER, inits);
        m->off_wh = add_view(m, "W_h", m->h + (am ? MP_BOND_FDIM : 0), m->h, INIT_XAVIER, inits);
        m->off_wo = add_view(m, "W_o", c->atom_fdim + m->h, m->h, INIT_XAVIER, inits);
        m->off_bo = add_view(m, "b_o", 1, m->h, INIT_ZERO, inits);
        /* The user columns' rows of W_i, W_h and W_o: views of their own
         * (after the others, so a model without them keeps its layout), drawn
         * with the Xavier scale of the whole matrix Chemprop builds (fan_in =
         * every input row of it: INIT_XAVIER_FAN with fan[]) */
        const int da = c->atom_extra_dim, db = c->bond_extra_dim, dd = c->atom_desc_dim;
        const int wi_in = c->atom_fdim + da + (am ? 0 : MP_BOND_FDIM + db);
        const int wh_in = m->h + (am ? MP_BOND_FDIM + db : 0), wo_in = c->atom_fdim + da + m->h;
        if (da || db) {
            fans[0] = wi_in;               /* W_i */
            fans[1] = wh_in;               /* W_h */
            fans[2] = wo_in;               /* W_o */
        }
        m->off_wi_xa = m->off_wi_xb = m->off_wo_xa = m->off_wad = m->off_bad = 0;
        if (da) {
            fans[m->n_views] = wi_in;
            m->off_wi_xa = add_view(m, "W_i.atom_x", da, m->h, INIT_XAVIER, inits);
        }
        if (db) {
            fans[m->n_views] = am ? wh_in : wi_in;
            m->off_wi_xb = add_view(m, am ? "W_h.bond_x" : "W_i.bond_x", db, m->h, INIT_XAVIER,
                                    inits);
        }
        if (da) {
            fans[m->n_views] = wo_in;
            m->off_wo_xa = add_view(m, "W_o.atom_x", da, m->h, INIT_XAVIER, inits);
        }
        if (dd) {
            m->off_wad = add_view(m, "W_ad", m->hr, m->hr, INIT_XAVIER, inits);
            m->off_bad = add_view(m, "b_ad", 1, m->hr, INIT_ZERO, inits);
        }
        if (c->aggregation == MP_AGG_ATTENTIVE)
            m->off_attn = add_view(m, "attn.w", m->hr, 1, INIT_XAVIER, inits);
        if (c->batch_norm) {
            m->off_bn = add_view(m, "bn.gamma", 1, m->hr, INIT_ONE, inits);
            add_view(m, "bn.beta", 1, m->hr, INIT_ZERO, inits);
            add_view(m, "bn.running_mean", 1, m->hr, INIT_ZERO, inits);
            add_view(m, "bn.running_var", 1, m->hr, INIT_ONE, inits);
        }
    }
    for (int l = 0; l < m->n_layers; l++) {
        int din = l == 0 ? m->in_dim : m->ffn_hidden;
        int dout = l == m->n_layers - 1 ? m->n_out : m->ffn_hidden;
        char name[24];
        snprintf(name, sizeof name, "ffn%d.W", l);
        m->off_fw[l] = add_view(m, name, din, dout, INIT_XAVIER, inits);
        snprintf(name, sizeof name, "ffn%d.b", l);
        m->off_fb[l] = add_view(m, name, 1, dout, INIT_ZERO, inits);
    }
    if (c->activation == MP_ACT_PRELU) {
        if (c->kind == MP_MODEL_DMPNN)
            m->off_prelu_enc = add_view(m, "enc.prelu", 1, 1, INIT_PRELU, inits);
        if (m->n_layers > 1)
            m->off_prelu_ffn = add_view(m, "ffn.prelu", 1, 1, INIT_PRELU, inits);
    }
}

/* The layer sizes mp_model_layout_params reads. */
static void set_shapes(mp_model *m, const mp_model_config *cfg)
{
    m->h = cfg->kind == MP_MODEL_DMPNN ? cfg->hidden : 0;
    m->ffn_hidden = cfg->ffn_hidden > 0 ? cfg->ffn_hidden : cfg->hidden;
    m->n_layers = cfg->ffn_layers;
    m->hr = m->h + (cfg->kind == MP_MODEL_DMPNN ? cfg->atom_desc_dim : 0);
    m->in_dim = m->hr + cfg->extra_dim;
    m->n_out = mp_model_n_outputs(cfg);
    if (m->n_layers == 1)
        m->ffn_hidden = 0;   /* no hidden layer: keep the views honest */
}

uint64_t mp_model_config_n_params(const mp_model_config *cfg)
{
    if (config_check(cfg) != MP_OK)
        return 0;
    mp_model *m = mp_calloc(1, sizeof *m);
    if (!m)
        return 0;
    m->cfg = *cfg;
    set_shapes(m, cfg);
    unsigned char inits[MP_MAX_VIEWS];
    int fans[MP_MAX_VIEWS] = { 0 };
    mp_model_layout_params(m, inits, fans);
    uint64_t n = m->n_params;
    mp_free(m);
    return n;
}

/* Xavier-normal weights, the other views' constants, drawn in view order.
 * Values are made as floats (then widened for a double backend), so every
 * backend starts from the same numbers. */
static void init_params(mp_model *m, const mp_param_view *views, void *host, uint64_t seed,
                        const unsigned char *inits, const int *fans)
{
    mp_rng r;
    mp_rng_seed(&r, seed, MP_MODEL_STREAM_INIT);
    for (int i = 0; i < m->n_views; i++) {
        const mp_param_view *v = &views[i];
        size_t n = (size_t)v->rows * v->cols;
        double std = sqrt(2.0 / (double)((fans[i] ? fans[i] : v->rows) + v->cols));
        for (size_t k = 0; k < n; k++) {
            float x = inits[i] == INIT_XAVIER ? (float)(mp_rng_normal(&r) * std)
                      : inits[i] == INIT_ONE  ? 1.0f
                      : inits[i] == INIT_PRELU ? 0.25f : 0.0f;
            if (m->esize == sizeof(double))
                ((double *)host)[v->offset + k] = x;
            else
                ((float *)host)[v->offset + k] = x;
        }
    }
}

void *mp_model_host(mp_model *m, size_t bytes)
{
    if (bytes <= m->host_bytes)
        return m->host;
    void *p = mp_realloc(m->host, bytes);
    if (!p)
        return NULL;
    m->host = p;
    m->host_bytes = bytes;
    return p;
}

/* Host floats -> device elements of the model's type. */
mp_status mp_model_upload_floats(mp_model *m, void *dst, const float *src, size_t n)
{
    if (m->esize == sizeof(float))
        return m->b->upload(m->b, dst, src, n * sizeof(float));
    double *t = mp_model_host(m, n * sizeof(double));
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory staging %zu values", n);
    for (size_t i = 0; i < n; i++)
        t[i] = src[i];
    return m->b->upload(m->b, dst, t, n * sizeof(double));
}

mp_status mp_model_download_floats(mp_model *m, float *dst, const void *src, size_t n)
{
    if (m->esize == sizeof(float))
        return m->b->download(m->b, dst, src, n * sizeof(float));
    double *t = mp_model_host(m, n * sizeof(double));
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory staging %zu values", n);
    mp_status st = m->b->download(m->b, t, src, n * sizeof(double));
    for (size_t i = 0; st == MP_OK && i < n; i++)
        dst[i] = (float)t[i];
    return st;
}

mp_status mp_model_create(mp_model **out, const mp_model_config *cfg, mp_backend *b,
                          uint64_t seed)
{
    *out = NULL;
    if (!cfg || !b)
        return mp_error_set(MP_ERR_ARG, "model: missing config or backend");
    mp_status st = config_check(cfg);
    if (st != MP_OK)
        return st;
    mp_model *m = mp_calloc(1, sizeof *m);
    if (!m)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory");
    m->cfg = *cfg;
    m->b = b;
    m->esize = b->esize;
    /* storage of the D-MPNN's activations (model_impl.h): the product
     * operands as the backend asks; H0 and M_t so too, but not with dropout
     * (kept as before bf16 storage existed, so its models' bits stay) */
    m->generic = cfg->kind == MP_MODEL_DMPNN &&
                 (cfg->activation != MP_ACT_RELU || cfg->undirected || cfg->atom_messages ||
                  cfg->atom_extra_dim > 0 || cfg->atom_desc_dim > 0 || cfg->bond_extra_dim > 0);
    m->ffn_generic = cfg->activation != MP_ACT_RELU;
    /* the unfused encoder keeps everything in the element type */
    m->st_op = m->generic ? MP_ST_ELEM : b->act_st;
    m->st_m = cfg->dropout > 0 ? MP_ST_ELEM : m->st_op;
    set_shapes(m, cfg);
    unsigned char inits[MP_MAX_VIEWS];
    int fans[MP_MAX_VIEWS] = { 0 };   /* 0: the view's own rows are its fan-in */
    mp_model_layout_params(m, inits, fans);
    mp_model_pad_width(m, b);
    mp_rng_seed(&m->drop_rng, seed, MP_MODEL_STREAM_DROPOUT);

    size_t bytes = m->n_params * m->esize;
    m->params = b->alloc(b, bytes);
    m->grads = b->alloc(b, bytes);
    m->adam_m = b->alloc(b, bytes);
    m->adam_v = b->alloc(b, bytes);
    m->gnorm = b->alloc(b, m->esize);
    void *host = mp_model_host(m, bytes);
    if (!m->params || !m->grads || !m->adam_m || !m->adam_v || !m->gnorm || !host) {
        size_t np = m->n_params;
        mp_model_free(m);
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory for %zu parameters", np);
    }
    if (m->padded) {
        /* drawn in the logical layout, as an unpadded model draws them */
        float *lg = mp_malloc(m->n_log * sizeof *lg);
        if (!lg) {
            size_t np = m->n_log;
            mp_model_free(m);
            return mp_error_set(MP_ERR_NOMEM, "model: out of memory for %zu parameters", np);
        }
        init_params(m, m->lviews, lg, seed, inits, fans);
        mp_model_pad_params(m, lg, host);
        mp_free(lg);
    } else {
        init_params(m, m->views, host, seed, inits, fans);
    }
    st = b->upload(b, m->params, host, bytes);
    if (st != MP_OK) {
        mp_model_free(m);
        return st;
    }
    b->zero(b, m->grads, bytes);
    b->zero(b, m->adam_m, bytes);
    b->zero(b, m->adam_v, bytes);
    *out = m;
    return MP_OK;
}

void mp_model_free(mp_model *m)
{
    if (!m)
        return;
    mp_backend *b = m->b;
    b->free(b, m->params);
    b->free(b, m->grads);
    b->free(b, m->adam_m);
    b->free(b, m->adam_v);
    b->free(b, m->gnorm);
    b->free(b, m->task_w);
    b->free(b, m->arena);
    mp_free(m->host);
    mp_free(m);
}

mp_status mp_model_rebind(mp_model *m, mp_backend *b)
{
    if (!b || strcmp(b->name, m->b->name) != 0 || b->esize != m->esize ||
        b->act_st != m->b->act_st)
        return mp_error_set(MP_ERR_ARG, "model: cannot move from backend %s to %s", m->b->name,
                            b ? b->name : "(none)");
    m->b = b;
    return MP_OK;
}

/* ===================================================================== */
/* Activation arena                                                       */
/* ===================================================================== */

/* Places the activation buffers for the given capacities at `base` (NULL:
 * only measure) and returns the bytes needed.  Each buffer starts on a
 * 256-byte boundary: the largest alignment cuBLASLt asks about, so its
 * choice of algorithm (hence the bits) does not depend on the capacities. */
static size_t layout_acts(mp_model *m, char *base, int32_t nm, int32_t na, int32_t ne)
{
    size_t at = 0, es = m->esize;
    mp_acts *a = &m->a;
#define TAKE(bytes) \
    (at = (at + 255) & ~(size_t)255, at += (bytes), base ? (void *)(base + at - (bytes)) : NULL)
    const mp_model_config *c = &m->cfg;
    size_t h = (size_t)m->h, E = (size_t)ne, A = (size_t)na, B = (size_t)nm;
    size_t T = (size_t)c->n_tasks, O = (size_t)m->n_out, I = (size_t)m->in_dim;
    size_t F = (size_t)m->ffn_hidden;
    size_t W = I > F ? I : F;
    W = W > O ? W : O;
    memset(a->z, 0, sizeof a->z);
    a->hop = a->dz = a->etmp = a->r = NULL;
    a->xp = a->dxp = a->bn_save = a->score = a->alpha = a->dscore = NULL;
    a->xa = a->xb = a->hd = a->hdo = a->dhd = a->dhdo = a->ro = a->dro = NULL;
    memset(a->hp, 0, sizeof a->hp);
    if (c->kind == MP_MODEL_DMPNN) {
        /* st_op / st_m storage (model_impl.h); the copies for the products
         * only where st_op is not the element type.  U: the rows of a
         * message (edges; atoms with atom messages) */
        const size_t hs = mp_stype_size(m->b, m->st_op), ms = mp_stype_size(m->b, m->st_m);
        const int copies = m->st_op != MP_ST_ELEM;
        const size_t U = c->atom_messages ? A : E;
        a->h0 = TAKE(U * h * ms);
        for (int t = 0; t < c->depth; t++)
            a->m[t] = TAKE(U * h * ms);
        for (int t = 1; t < c->depth; t++)
            a->msg[t] = TAKE(U * h * hs);
        a->dh0 = TAKE(U * h * es);
        a->dm = TAKE(U * h * es);
        a->dmsg = TAKE(U * h * hs);
        a->as = TAKE(A * h * es);
        a->a = TAKE(A * h * hs);
        a->ho = TAKE(A * h * es);
        a->dho = TAKE(A * h * es);
        a->da = TAKE(A * h * es);
        a->dz_op = copies ? TAKE(E * h * hs) : NULL;
        a->dho_op = copies ? TAKE(A * h * hs) : a->dho;
        /* W_h and W_o are consecutive in the parameter block: one copy of
         * both (whcopy); wo_op = its W_o message rows */
        size_t fa = (size_t)c->atom_fdim;
        a->whcopy = copies ? TAKE((2 * h + fa) * h * hs) : NULL;
        a->wh_op = copies ? a->whcopy : MP_AT(m, m->params, m->off_wh);
        a->wo_op = !copies ? MP_AT(m, m->params, m->off_wo + fa * h)
                   : a->whcopy ? (void *)((char *)a->whcopy + (h + fa) * h * hs) : NULL;
        if (m->generic) {
            for (int t = 1; t < c->depth; t++)
                a->z[t] = TAKE(U * h * es);
            a->hop = TAKE(A * h * es);
            a->dz = TAKE(U * h * es);
            a->etmp = TAKE(E * h * es);
            a->r = c->atom_messages ? TAKE(A * h * es) : NULL;
        }
        const size_t hr = (size_t)m->hr, xdim = (size_t)(c->atom_extra_dim + c->atom_desc_dim);
        a->xa = xdim ? TAKE(A * xdim * es) : NULL;
        a->xb = c->bond_extra_dim ? TAKE(E * (size_t)c->bond_extra_dim * es) : NULL;
        if (c->atom_desc_dim) {
            a->hd = TAKE(A * hr * es);
            a->hdo = TAKE(A * hr * es);
            a->dhd = TAKE(A * hr * es);
            a->dhdo = TAKE(A * hr * es);
        }
        a->ro = c->atom_desc_dim ? a->hdo : a->ho;
        a->dro = c->atom_desc_dim ? a->dhdo : a->dho;
        if (c->batch_norm) {
            a->xp = TAKE(B * hr * es);
            a->dxp = TAKE(B * hr * es);
            a->bn_save = TAKE(2 * hr * es);
        }
        if (c->aggregation == MP_AGG_ATTENTIVE) {
            a->score = TAKE(A * es);
            a->alpha = TAKE(A * es);
            a->dscore = TAKE(A * es);
        }
        a->extra = TAKE(B * (size_t)c->extra_dim * es);
        a->g.atom_hot = TAKE(A * MP_ATOM_MAX_HOT * sizeof(int16_t));
        a->g.atom_mass = TAKE(A * sizeof(float));
        a->g.bond_hot = TAKE(E / 2 * MP_BOND_MAX_HOT * sizeof(int8_t));
        a->g.edge_src = TAKE(E * sizeof(int32_t));
        a->g.edge_dst = TAKE(E * sizeof(int32_t));
        a->g.in_start = TAKE((A + 1) * sizeof(int32_t));
        a->g.in_edge = TAKE(E * sizeof(int32_t));
        a->g.mol_atom = TAKE((B + 1) * sizeof(int32_t));
    }
    a->x0 = TAKE(B * I * es);
    a->xd0 = c->dropout > 0 ? TAKE(B * I * es) : a->x0;
    for (int l = 0; l + 1 < m->n_layers; l++) {
        a->hl[l] = TAKE(B * F * es);
        if (m->ffn_generic)
            a->hp[l] = TAKE(B * F * es);
    }
    a->out = TAKE(B * O * es);
    a->g0 = TAKE(B * W * es);
    a->g1 = TAKE(B * W * es);
    a->target = TAKE(B * T * es);
    a->loss = TAKE(es);
    a->mask = TAKE(B * T);
    a->wbuf = TAKE(B * es);
    a->ibuf = TAKE(B * T);
    a->weight = NULL;
    a->ineq = NULL;
#undef TAKE
    return at + 256;
}

mp_status mp_model_reserve(mp_model *m, int32_t max_mols, int32_t max_atoms, int32_t max_edges)
{
    if (max_mols < 0 || max_atoms < 0 || max_edges < 0)
        return mp_error_set(MP_ERR_ARG, "model reserve: negative size (%d molecules, %d atoms, "
                            "%d edges)", (int)max_mols, (int)max_atoms, (int)max_edges);
    if (m->cfg.kind == MP_MODEL_FFN)
        max_atoms = max_edges = 0;
    max_edges += max_edges & 1;
    if (m->arena && max_mols <= m->cap_mols && max_atoms <= m->cap_atoms &&
        max_edges <= m->cap_edges)
        return MP_OK;
    m->bound = 0;
    int32_t nm = max_mols > m->cap_mols ? max_mols : m->cap_mols;
    int32_t na = max_atoms > m->cap_atoms ? max_atoms : m->cap_atoms;
    int32_t ne = max_edges > m->cap_edges ? max_edges : m->cap_edges;
    size_t bytes = layout_acts(m, NULL, nm, na, ne);
    m->b->free(m->b, m->arena);
    m->arena = NULL;
    m->cap_mols = m->cap_atoms = m->cap_edges = 0;
    m->have_forward = 0;
    char *base = m->b->alloc(m->b, bytes);
    if (!base)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory for activations (%zu MiB for "
                            "%d molecules, %d atoms, %d edges)", bytes >> 20, (int)nm, (int)na,
                            (int)ne);
    m->arena = base;
    layout_acts(m, base, nm, na, ne);
    m->cap_mols = nm;
    m->cap_atoms = na;
    m->cap_edges = ne;
    return MP_OK;
}

/* ===================================================================== */
/* Steps                                                                  */
/* ===================================================================== */

mp_status mp_model_forward(mp_model *m, const mp_graphs *batch, const float *extra,
                           int32_t n_mols, int training, float *out)
{
    const mp_model_config *c = &m->cfg;
    mp_backend *b = m->b;
    mp_status st;
    m->have_forward = 0;
    mp_model_unbind(m);
    if (n_mols < 0)
        return mp_error_set(MP_ERR_ARG, "model forward: n_mols = %d", (int)n_mols);
    if (c->extra_dim > 0 && n_mols > 0 && !extra)
        return mp_error_set(MP_ERR_ARG, "model forward: the model takes %d molecule features "
                            "per molecule but none were given", c->extra_dim);
    if (c->kind == MP_MODEL_DMPNN) {
        if ((st = mp_batch_check(batch, c->atom_fdim)) != MP_OK ||
            (st = mp_batch_check_columns(m, batch)) != MP_OK)
            return st;
        if (batch->n_mols != n_mols)
            return mp_error_set(MP_ERR_ARG, "model forward: the batch holds %d molecules, "
                                "n_mols says %d", (int)batch->n_mols, (int)n_mols);
        st = mp_model_reserve(m, n_mols, batch->n_atoms, batch->n_edges);
    } else {
        st = mp_model_reserve(m, n_mols, 0, 0);
    }
    if (st != MP_OK)
        return st;

    if (c->kind == MP_MODEL_DMPNN) {
        if ((st = mp_batch_upload(b, &m->a.g, batch)) != MP_OK ||
            (st = mp_batch_upload_columns(m, batch)) != MP_OK)
            return st;
        if (c->extra_dim > 0 &&
            (st = mp_model_upload_floats(m, m->a.extra, extra, (size_t)n_mols * c->extra_dim)) != MP_OK)
            return st;
    } else if ((st = mp_model_upload_floats(m, m->a.x0, extra, (size_t)n_mols * c->extra_dim)) != MP_OK) {
        return st;
    }
    m->n_mols = n_mols;
    m->p = training ? c->dropout : 0.0;
    if (c->kind == MP_MODEL_DMPNN)
        mp_dmpnn_forward(m, training);
    mp_ffn_forward(m, training);
    if ((st = b->sync(b)) != MP_OK)
        return st;
    if (out && (st = mp_model_download_floats(m, out, m->a.out, (size_t)n_mols * m->n_out)) != MP_OK)
        return st;
    /* 2: an inference forward that did not keep M_0 (dmpnn.c), no backward */
    m->have_forward = !training && c->kind == MP_MODEL_DMPNN && c->depth > 1 ? 2 : 1;
    return MP_OK;
}

static void freeze_grads(mp_model *m);
/* The loss op of the model's loss over its bound or uploaded batch. */
static void issue_loss(mp_model *m)
{
    const mp_model_config *c = &m->cfg;
    mp_loss_spec sp = { mp_model_loss(c), c->n_tasks, mp_head_loss_classes(c->task, c->n_classes),
                        c->loss_lambda, c->loss_eps, c->loss_alpha, m->task_w, m->a.weight,
                        m->a.ineq, c->spectra_act, c->spectra_floor };
    m->b->loss(m->b, m->a.loss, m->a.g0, m->a.out, m->a.target, m->a.mask, m->n_mols, &sp);
}

/* Checks and stages the host step's targets, weights and inequality flags. */
static mp_status stage_targets(mp_model *m, const float *targets, const float *weights,
                               const uint8_t *ineq)
{
    const mp_model_config *c = &m->cfg;
    mp_backend *b = m->b;
    mp_status st;
    size_t n = (size_t)m->n_mols * c->n_tasks, nm = (size_t)m->n_mols;
    if (n && !targets)
        return mp_error_set(MP_ERR_ARG, "model backward: no targets");
    char *host = mp_model_host(m, (n + nm) * m->esize + n + 8);
    if (!host)
        return mp_error_set(MP_ERR_NOMEM, "model backward: out of memory staging targets");
    uint8_t *mask = (uint8_t *)host + (n + nm) * m->esize;
    const int C = c->n_classes;
    for (size_t i = 0; i < n; i++) {
        float t = targets[i];
        if (isinf(t))
            return mp_error_set(MP_ERR_ARG, "model backward: target of molecule %zu, task %zu "
                                "is infinite", i / c->n_tasks, i % c->n_tasks);
        mask[i] = !isnan(t);
        if (mask[i] && mp_head_is_multiclass(c->task) && !(t >= 0 && t < C && t == floorf(t)))
            return mp_error_set(MP_ERR_ARG, "model backward: target of molecule %zu, task %zu "
                                "is %g, not a class 0 .. %d", i / c->n_tasks, i % c->n_tasks,
                                (double)t, C - 1);
        double v = mask[i] ? t : 0.0;
        if (m->esize == sizeof(double))
            ((double *)host)[i] = v;
        else
            ((float *)host)[i] = (float)v;
    }
    for (size_t i = 0; weights && i < nm; i++) {
        if (!(weights[i] >= 0 && isfinite(weights[i])))
            return mp_error_set(MP_ERR_ARG, "model backward: weight of molecule %zu is %g (must "
                                "be finite and >= 0)", i, (double)weights[i]);
        if (m->esize == sizeof(double))
            ((double *)host)[n + i] = weights[i];
        else
            ((float *)host)[n + i] = weights[i];
    }
    if ((st = b->upload(b, m->a.target, host, n * m->esize)) != MP_OK ||
        (st = b->upload(b, m->a.mask, mask, n)) != MP_OK)
        return st;
    m->a.weight = m->a.ineq = NULL;
    if (weights) {
        if ((st = b->upload(b, m->a.wbuf, host + n * m->esize, nm * m->esize)) != MP_OK)
            return st;
        m->a.weight = m->a.wbuf;
    }
    if (ineq) {
        if ((st = b->upload(b, m->a.ibuf, ineq, n)) != MP_OK)
            return st;
        m->a.ineq = m->a.ibuf;
    }
    return MP_OK;
}

mp_status mp_model_loss_backward(mp_model *m, const float *targets, double *loss)
{
    return mp_model_loss_backward_ex(m, targets, NULL, NULL, loss);
}

mp_status mp_model_loss_backward_ex(mp_model *m, const float *targets, const float *weights,
                                    const uint8_t *ineq, double *loss)
{
    const mp_model_config *c = &m->cfg;
    mp_backend *b = m->b;
    mp_status st;
    if (!m->have_forward)
        return mp_error_set(MP_ERR_ARG, "model backward: no forward pass to go back through");
    if (m->have_forward == 2)
        return mp_error_set(MP_ERR_ARG, "model backward: the last forward was an inference one "
                            "(training = 0), which does not keep what backward needs (M_0)");
    if ((st = stage_targets(m, targets, weights, ineq)) != MP_OK)
        return st;
    issue_loss(m);
    const void *dx0 = mp_ffn_backward(m, c->kind == MP_MODEL_DMPNN ? m->hr : 0);
    if (c->kind == MP_MODEL_DMPNN)
        mp_dmpnn_backward(m, dx0);
    freeze_grads(m);
    double l = 0;
    if (m->esize == sizeof(double)) {
        st = b->download(b, &l, m->a.loss, sizeof l);
    } else {
        float lf = 0;
        st = b->download(b, &lf, m->a.loss, sizeof lf);
        l = lf;
    }
    if (st == MP_OK)
        st = b->sync(b);
    if (st != MP_OK)
        return st;
    if (loss)
        *loss = l;
    return MP_OK;
}

mp_status mp_model_set_task_weights(mp_model *m, const float *w)
{
    int T = m->cfg.n_tasks;
    for (int t = 0; w && t < T; t++)   /* a refused call leaves the weights as they were */
        if (!(w[t] >= 0 && isfinite(w[t])))
            return mp_error_set(MP_ERR_ARG, "task weight %d is %g (must be finite and >= 0)", t,
                                (double)w[t]);
    m->b->free(m->b, m->task_w);
    m->task_w = NULL;
    if (!w)
        return MP_OK;
    if (!(m->task_w = m->b->alloc(m->b, (size_t)T * m->esize)))
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory for %d task weights", T);
    return mp_model_upload_floats(m, m->task_w, w, (size_t)T);
}

/* ===================================================================== */
/* Device-resident steps                                                  */
/* ===================================================================== */

/* Reserves activations for bt's sizes, then points the graph inputs (and
 * the extra features) at bt's device buffers: the model is bound. */
static mp_status point_inputs(mp_model *m, const mp_dev_batch *bt)
{
    const mp_model_config *c = &m->cfg;
    int dm = c->kind == MP_MODEL_DMPNN;
    mp_status st = mp_model_reserve(m, bt->n_mols, dm ? bt->n_atoms : 0, dm ? bt->n_edges : 0);
    if (st != MP_OK)
        return st;
    mp_acts *a = &m->a;
    if (dm) {
        a->g.n_mols = bt->n_mols;
        a->g.n_atoms = bt->n_atoms;
        a->g.n_edges = bt->n_edges;
        a->g.atom_hot = bt->atom_hot;
        a->g.atom_mass = bt->atom_mass;
        a->g.bond_hot = bt->bond_hot;
        a->g.edge_src = bt->edge_src;
        a->g.edge_dst = bt->edge_dst;
        a->g.in_start = bt->in_start;
        a->g.in_edge = bt->in_edge;
        a->g.mol_atom = bt->mol_atom;
        if (c->extra_dim > 0)
            a->extra = bt->extra;
        if (c->atom_extra_dim || c->atom_desc_dim)
            a->xa = bt->atom_x;
        if (c->bond_extra_dim)
            a->xb = bt->bond_x;
    }
    m->n_mols = bt->n_mols;
    m->have_forward = 0;
    m->bound = 1;
    m->bound_extra = bt->extra;
    return MP_OK;
}

mp_status mp_model_bind(mp_model *m, const mp_dev_batch *bt)
{
    const mp_model_config *c = &m->cfg;
    if (!bt || bt->n_mols < 1 || bt->n_atoms < 0 || bt->n_edges < 0 || (bt->n_edges & 1))
        return mp_error_set(MP_ERR_ARG, "model bind: bad batch sizes");
    if (!m->b->adam_sched || !m->b->step_end)
        return mp_error_set(MP_ERR_ARG, "model bind: backend '%s' has no device-scheduled "
                            "step ops", m->b->name);
    if ((c->extra_dim > 0 && !bt->extra) || !bt->target || !bt->mask)
        return mp_error_set(MP_ERR_ARG, "model bind: batch buffers missing");
    if (!mp_batch_has_columns(m, bt))
        return mp_error_set(MP_ERR_ARG, "model bind: the model takes user atom / bond columns "
                            "and the batch carries none");
    mp_status st = point_inputs(m, bt);
    if (st != MP_OK)
        return st;
    m->a.target = bt->target;
    m->a.mask = bt->mask;
    m->a.weight = bt->weight;
    m->a.ineq = bt->ineq;
    return MP_OK;
}

/* mp_model_forward_dev and its stochastic twin: dropout probability p
 * (0: none) with the layers' keys drawn from drop_rng. */
static mp_status forward_dev(mp_model *m, const mp_dev_batch *bt, double p);

mp_status mp_model_forward_dev(mp_model *m, const mp_dev_batch *bt)
{
    return forward_dev(m, bt, 0.0);
}

mp_status mp_model_forward_dev_dropout(mp_model *m, const mp_dev_batch *bt, double p,
                                       uint64_t seed)
{
    if (!(p >= 0 && p < 1))
        return mp_error_set(MP_ERR_ARG, "model forward: dropout probability %g (must be in "
                            "[0, 1))", p);
    mp_rng_seed(&m->drop_rng, seed, MP_MODEL_STREAM_DROPOUT);
    return forward_dev(m, bt, p);
}

static mp_status forward_dev(mp_model *m, const mp_dev_batch *bt, double p)
{
    const mp_model_config *c = &m->cfg;
    mp_backend *b = m->b;
    if (!bt || bt->n_mols < 1 || bt->n_atoms < 0 || bt->n_edges < 0 || (bt->n_edges & 1))
        return mp_error_set(MP_ERR_ARG, "model forward (device batch): bad batch sizes");
    if (c->extra_dim > 0 && !bt->extra)
        return mp_error_set(MP_ERR_ARG, "model forward (device batch): the model takes %d "
                            "molecule features per molecule but none were given", c->extra_dim);
    if (!mp_batch_has_columns(m, bt))
        return mp_error_set(MP_ERR_ARG, "model forward (device batch): the model takes user "
                            "atom / bond columns and the batch carries none");
    if (c->kind == MP_MODEL_DMPNN && (!bt->mol_atom || !bt->in_start ||
        (bt->n_atoms && (!bt->atom_hot || !bt->atom_mass)) ||
        (bt->n_edges && (!bt->bond_hot || !bt->edge_src || !bt->in_edge))))
        return mp_error_set(MP_ERR_ARG, "model forward (device batch): graph arrays missing");
    mp_status st = point_inputs(m, bt);
    if (st != MP_OK)
        return st;
    m->p = p;
    if (c->kind == MP_MODEL_FFN)
        b->copy(b, m->a.x0, bt->extra, (size_t)bt->n_mols * c->extra_dim * m->esize);
    else
        mp_dmpnn_forward(m, 0);
    mp_ffn_forward(m, 0);
    return MP_OK;
}

void mp_model_unbind(mp_model *m)
{
    if (!m->bound)
        return;
    m->bound = 0;
    m->have_forward = 0;
    layout_acts(m, m->arena, m->cap_mols, m->cap_atoms, m->cap_edges);
}

void mp_model_step_bound(mp_model *m, const float *sched, int32_t *k_dev, void *losses)
{
    const mp_model_config *c = &m->cfg;
    mp_backend *b = m->b;
    if (!m->bound)
        return;
    b->zero(b, m->grads, m->n_params * m->esize);
    if (c->kind == MP_MODEL_FFN)
        b->copy(b, m->a.x0, m->bound_extra, (size_t)m->n_mols * c->extra_dim * m->esize);
    m->p = c->dropout;
    m->drop_k = k_dev;   /* the step index of a device key source, if set */
    if (c->kind == MP_MODEL_DMPNN)
        mp_dmpnn_forward(m, 1);
    mp_ffn_forward(m, 1);
    issue_loss(m);
    const void *dx0 = mp_ffn_backward(m, c->kind == MP_MODEL_DMPNN ? m->hr : 0);
    if (c->kind == MP_MODEL_DMPNN)
        mp_dmpnn_backward(m, dx0);
    freeze_grads(m);
    if (m->grad_clip > 0)
        b->clip_norm(b, m->grads, m->n_params, m->grad_clip, m->gnorm);
    b->adam_sched(b, m->params, m->adam_m, m->adam_v, m->grads, m->n_params, sched, k_dev, 0.9,
                  0.999, 1e-8, 0.0);
    b->step_end(b, k_dev, losses, m->a.loss);
}


mp_status mp_model_set_frozen(mp_model *m, int encoder, int ffn_layers)
{
    if (encoder && m->cfg.kind != MP_MODEL_DMPNN)
        return mp_error_set(MP_ERR_ARG, "freeze: an FFN model has no encoder to freeze");
    if (ffn_layers < 0 || ffn_layers > m->n_layers)
        return mp_error_set(MP_ERR_ARG, "freeze: %d FFN layers, the head has %d", ffn_layers,
                            m->n_layers);
    m->n_frozen = 0;
    size_t head = m->off_fw[0];   /* the encoder's views come first */
    if (encoder) {
        m->frozen_lo[m->n_frozen] = 0;
        m->frozen_hi[m->n_frozen++] = head;
    }
    if (ffn_layers > 0) {
        m->frozen_lo[m->n_frozen] = head;
        m->frozen_hi[m->n_frozen++] = ffn_layers < m->n_layers ? m->off_fw[ffn_layers]
                                                               : m->n_params;
    }
    return MP_OK;
}

/* Zeroes the frozen parameters' gradients (queued on the backend). */
static void freeze_grads(mp_model *m)
{
    for (int k = 0; k < m->n_frozen; k++)
        if (m->frozen_hi[k] > m->frozen_lo[k])
            m->b->zero(m->b, MP_AT(m, m->grads, m->frozen_lo[k]),
                       (m->frozen_hi[k] - m->frozen_lo[k]) * m->esize);
}

void mp_model_zero_grad(mp_model *m)
{
    m->b->zero(m->b, m->grads, m->n_params * m->esize);
}

mp_status mp_model_adam_step(mp_model *m, double lr)
{
    if (!(lr >= 0 && isfinite(lr)))
        return mp_error_set(MP_ERR_ARG, "adam: learning rate %g", lr);
    m->adam_t++;
    if (m->grad_clip > 0)
        m->b->clip_norm(m->b, m->grads, m->n_params, m->grad_clip, m->gnorm);
    m->b->adam(m->b, m->params, m->adam_m, m->adam_v, m->grads, m->n_params, lr, 0.9, 0.999,
               1e-8, 0.0, m->adam_t);
    return m->b->sync(m->b);
}

/* ===================================================================== */
/* Access                                                                 */
/* ===================================================================== */

size_t mp_model_n_params(const mp_model *m) { return m->padded ? m->n_log : m->n_params; }

const mp_param_view *mp_model_views(const mp_model *m, int *n_views)
{
    *n_views = m->n_views;
    return m->padded ? m->lviews : m->views;
}

const mp_model_config *mp_model_get_config(const mp_model *m) { return &m->cfg; }

mp_status mp_model_get_params(const mp_model *m, float *dst)
{
    return mp_model_block_get(m, m->params, dst);
}

mp_status mp_model_get_grads(const mp_model *m, float *dst)
{
    return mp_model_block_get(m, m->grads, dst);
}

mp_status mp_model_set_grads(mp_model *m, const float *src)
{
    return mp_model_block_set(m, m->grads, src);
}

mp_status mp_model_rank_sum_grads(mp_model *m, const float *w, int *done)
{
    *done = m->b->rank_sum != NULL;
    return *done ? m->b->rank_sum(m->b, m->grads, m->n_params, w) : MP_OK;
}

mp_status mp_model_set_params(mp_model *m, const float *src)
{
    const size_t n = mp_model_n_params(m);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return mp_error_set(MP_ERR_FORMAT, "model: parameter %zu is not a finite number", i);
    return mp_model_block_set(m, m->params, src);
}

mp_status mp_model_get_encoding(mp_model *m, int layer, float *dst, int *width)
{
    if (layer != 0 && layer != 1)
        return mp_error_set(MP_ERR_ARG, "model encoding: layer %d (0: encoder, 1: last FFN "
                            "hidden layer)", layer);
    if (layer == 1 && m->n_layers < 2)
        return mp_error_set(MP_ERR_ARG, "model encoding: the FFN head has 1 layer, so no "
                            "hidden layer (train with --ffn-layers 2 or more)");
    /* a padded model's x0 holds h - h_log zero columns after the readout */
    const int gap = layer == 0 && m->padded ? m->h - m->h_log : 0;
    *width = layer == 0 ? m->in_dim - gap : m->ffn_hidden;
    if (!dst)
        return MP_OK;
    if (!m->have_forward)
        return mp_error_set(MP_ERR_ARG, "model encoding: no forward pass");
    const void *src = layer == 0 ? m->a.x0 : m->a.hl[m->n_layers - 2];
    if (!gap)
        return mp_model_download_floats(m, dst, src, (size_t)m->n_mols * (size_t)*width);
    const size_t rows = (size_t)m->n_mols, w = (size_t)*width, pw = (size_t)m->in_dim;
    float *t = mp_malloc(rows * pw * sizeof *t);
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "model encoding: out of memory");
    mp_status st = mp_model_download_floats(m, t, src, rows * pw);
    for (size_t i = 0; st == MP_OK && i < rows; i++) {
        memcpy(dst + i * w, t + i * pw, (size_t)m->h_log * sizeof *dst);
        memcpy(dst + i * w + m->h_log, t + i * pw + m->h, (w - (size_t)m->h_log) * sizeof *dst);
    }
    mp_free(t);
    return st;
}

void *mp_model_block_ptr(mp_model *m, mp_model_block which)
{
    switch (which) {
    case MP_BLOCK_PARAMS: return m->params;
    case MP_BLOCK_GRADS:  return m->grads;
    case MP_BLOCK_ADAM_M: return m->adam_m;
    case MP_BLOCK_ADAM_V: return m->adam_v;
    case MP_BLOCK_OUTPUT: return m->a.out;
    }
    return NULL;
}
