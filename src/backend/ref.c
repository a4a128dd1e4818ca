/*
 * ref.c - the reference backend: every op of ops.h as the plainest loop
 * that states its definition, single-threaded, accumulating in double.  It
 * is the oracle the cpu and cuda backends are tested against, and, opened as
 * "ref64" with double buffers, the backend the finite-difference gradient
 * checks run the whole models on.
 *
 * One body serves every storage type: loads and stores go through LDS/STS,
 * which read or write float, double or bfloat16 according to the operand's
 * storage type (ops.h mp_stype) and the backend's dtype.  That costs a
 * branch per element, which an oracle can afford, and keeps a single copy of
 * each definition.  A bf16 operand is widened exactly when read and rounded
 * to nearest even (mp_bf16_round, from the value made float first) when
 * written, as the cuda backend does; every sum in between is in double.
 *
 * The bf16 mode ("ref:bf16", "ref64:bf16") is the same backend reporting
 * act_st = MP_ST_BF16, so that the model stores its product operands in
 * bf16 exactly where it does on the GPU at bf16: the bf16 path of the model
 * runs, and is checked, on machines without a GPU.
 */
#include "backend/host_ops.h"
#include "backend/ref_impl.h"

#include <math.h>
#include <string.h>

/* 1 / (1 - p) for a dropout probability, 1 when no unit is dropped. */
static double drop_scale(double p) { return p > 0 && p < 1 ? 1.0 / (1.0 - p) : 1.0; }

/* ===================================================================== */
/* Memory                                                                 */
/* ===================================================================== */

static void *ref_alloc(mp_backend *b, size_t bytes) { return mp_malloc(bytes); }
static void ref_free(mp_backend *b, void *p) { mp_free(p); }

static mp_status ref_upload(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return MP_OK;
}

static mp_status ref_download(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return MP_OK;
}

static void ref_zero(mp_backend *b, void *dst, size_t bytes)
{
    if (bytes)
        memset(dst, 0, bytes);
}

static void ref_copy(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memmove(dst, src, bytes);
}

static mp_status ref_sync(mp_backend *b) { return MP_OK; }

/* ===================================================================== */
/* Dense                                                                  */
/* ===================================================================== */

static void ref_gemm_one(mp_backend *b, const mp_gemm *g)
{
    for (int i = 0; i < g->m; i++)
        for (int j = 0; j < g->n; j++) {
            double s = 0;
            for (int l = 0; l < g->k; l++) {
                double x = g->ta ? LDS(g->a, g->a_st, (size_t)l * g->lda + i)
                                 : LDS(g->a, g->a_st, (size_t)i * g->lda + l);
                double y = g->tb ? LDS(g->b, g->b_st, (size_t)j * g->ldb + l)
                                 : LDS(g->b, g->b_st, (size_t)l * g->ldb + j);
                s += x * y;
            }
            size_t ci = (size_t)i * g->ldc + j;
            double c0 = g->beta == 0 ? 0 : g->beta * LDS(g->c, g->c_st, ci);
            STS(g->c, g->c_st, ci, g->alpha * s + c0);
        }
}

static void ref_gemm(mp_backend *b, int count, const mp_gemm *g)
{
    for (int i = 0; i < count; i++)
        ref_gemm_one(b, &g[i]);
}

static void ref_gemm_res_relu(mp_backend *b, int m, int n, int k, const void *a, int lda,
                              const void *w, int ldw, mp_stype aw_st, const void *r, int ldr,
                              void *c, int ldc, mp_stype rc_st)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += LDS(a, aw_st, (size_t)i * lda + l) * LDS(w, aw_st, (size_t)l * ldw + j);
            /* c may be r: each element reads its own residual first */
            double v = LDS(r, rc_st, (size_t)i * ldr + j) + s;
            STS(c, rc_st, (size_t)i * ldc + j, v > 0 ? v : 0);
        }
}

static void ref_copy2d(mp_backend *b, void *dst, mp_stype dst_st, int ldd, const void *src,
                       mp_stype src_st, int lds, int32_t n_rows, int n_cols)
{
    for (int32_t i = 0; i < n_rows; i++)
        for (int j = 0; j < n_cols; j++)
            STS(dst, dst_st, (size_t)i * ldd + j, LDS(src, src_st, (size_t)i * lds + j));
}

static void ref_col_sum(mp_backend *b, void *dst, const void *x, int ldx,
                        int32_t n_rows, int n_cols)
{
    for (int j = 0; j < n_cols; j++) {
        double s = 0;
        for (int32_t i = 0; i < n_rows; i++)
            s += LD(x, (size_t)i * ldx + j);
        ST(dst, j, LD(dst, j) + s);
    }
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static void ref_relu_dropout(mp_backend *b, void *y, const void *x, mp_stype st, size_t n,
                             double p, mp_key key)
{
    uint32_t thr = mp_dropout_threshold(p);
    double scale = drop_scale(p);
    uint64_t kv = mp_key_value(key);
    for (size_t i = 0; i < n; i++) {
        double v = LDS(x, st, i);
        v = v > 0 ? v : 0;
        if (thr)
            v = mp_dropout_keep(kv, i, thr) ? v * scale : 0;
        STS(y, st, i, v);
    }
}

static void ref_relu_dropout_backward(mp_backend *b, void *dx, void *dxo, mp_stype dxo_st,
                                      const void *y, mp_stype y_st, const void *dy, size_t n,
                                      double p)
{
    double scale = drop_scale(p);
    for (size_t i = 0; i < n; i++) {
        double v = LDS(y, y_st, i) > 0 ? LD(dy, i) * scale : 0;
        ST(dx, i, v);
        if (dxo != dx)
            STS(dxo, dxo_st, i, LD(dx, i));
    }
}

static void ref_dropout(mp_backend *b, void *y, const void *x, int32_t n_rows, int n_cols,
                        int ld, double p, mp_key key)
{
    uint32_t thr = mp_dropout_threshold(p);
    double scale = drop_scale(p);
    uint64_t kv = mp_key_value(key);
    for (int32_t i = 0; i < n_rows; i++)
        for (int j = 0; j < n_cols; j++) {
            size_t k = (size_t)i * ld + j;
            ST(y, k, mp_dropout_keep(kv, k, thr) ? LD(x, k) * scale : 0);
        }
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

static void ref_atom_embed(mp_backend *b, void *out, const int16_t *hot, const float *mass,
                           const void *w, const void *bias, int32_t n_atoms, int h,
                           int mass_row)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double s = bias ? LD(bias, j) : 0;
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++) {
                int slot = hot[(size_t)v * MP_ATOM_MAX_HOT + q];
                if (slot >= 0)
                    s += LD(w, (size_t)slot * h + j);
            }
            s += (double)mass[v] * LD(w, (size_t)mass_row * h + j);
            ST(out, (size_t)v * h + j, s);
        }
}

static void ref_atom_embed_backward(mp_backend *b, void *dw, const int16_t *hot,
                                    const float *mass, const void *dout, int32_t n_atoms,
                                    int h, int mass_row)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double g = LD(dout, (size_t)v * h + j);
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++) {
                int slot = hot[(size_t)v * MP_ATOM_MAX_HOT + q];
                if (slot >= 0)
                    ST(dw, (size_t)slot * h + j, LD(dw, (size_t)slot * h + j) + g);
            }
            size_t k = (size_t)mass_row * h + j;
            ST(dw, k, LD(dw, k) + (double)mass[v] * g);
        }
}

static void ref_edge_embed(mp_backend *b, void *h0, void *m0, mp_stype st,
                           const int32_t *edge_src, const int8_t *bond_hot, const void *a,
                           const void *wb, int32_t n_edges, int h)
{
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++) {
            double s = LD(a, (size_t)edge_src[e] * h + j);
            for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
                int slot = bond_hot[(size_t)(e >> 1) * MP_BOND_MAX_HOT + q];
                if (slot >= 0)
                    s += LD(wb, (size_t)slot * h + j);
            }
            STS(h0, st, (size_t)e * h + j, s);
            if (m0)
                STS(m0, st, (size_t)e * h + j, s > 0 ? s : 0);
        }
}

/* out[v] = sum over the CSR segment of v of x[in_edge[k] ^ flip] (through
 * max(., 0) when relu), out of storage out_st, x of x_st. */
static void csr_sums(mp_backend *b, void *out, mp_stype out_st, const int32_t *in_start,
                     const int32_t *in_edge, const void *x, mp_stype x_st, int32_t flip,
                     int relu, int32_t n_atoms, int h)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int32_t k = in_start[v]; k < in_start[v + 1]; k++) {
                double t = LDS(x, x_st, (size_t)(in_edge[k] ^ flip) * h + j);
                s += relu && !(t > 0) ? 0 : t;
            }
            STS(out, out_st, (size_t)v * h + j, s);
        }
}

static void ref_edge_embed_backward(mp_backend *b, void *da, void *dwb,
                                    const int32_t *in_start, const int32_t *in_edge,
                                    const int8_t *bond_hot, const void *dh0,
                                    int32_t n_atoms, int32_t n_edges, int h)
{
    csr_sums(b, da, MP_ST_ELEM, in_start, in_edge, dh0, MP_ST_ELEM, 1, 0, n_atoms, h);
    for (int32_t e = 0; e < n_edges; e++)
        for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
            int slot = bond_hot[(size_t)(e >> 1) * MP_BOND_MAX_HOT + q];
            if (slot < 0)
                continue;
            for (int j = 0; j < h; j++) {
                size_t k = (size_t)slot * h + j;
                ST(dwb, k, LD(dwb, k) + LD(dh0, (size_t)e * h + j));
            }
        }
}

static void ref_atom_sum(mp_backend *b, void *a, mp_stype a_st, const int32_t *in_start,
                         const int32_t *in_edge, const void *m, mp_stype m_st, int32_t n_atoms,
                         int h)
{
    csr_sums(b, a, a_st, in_start, in_edge, m, m_st, 0, 0, n_atoms, h);
}

static void ref_message(mp_backend *b, void *msg, mp_stype msg_st, void *s,
                        const int32_t *in_start, const int32_t *in_edge,
                        const int32_t *edge_src, const void *m, mp_stype m_st, int relu_in,
                        int32_t n_atoms, int32_t n_edges, int h)
{
    csr_sums(b, s, MP_ST_ELEM, in_start, in_edge, m, m_st, 0, relu_in, n_atoms, h);
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++) {
            double r = LDS(m, m_st, (size_t)(e ^ 1) * h + j);
            if (relu_in && !(r > 0))
                r = 0;
            STS(msg, msg_st, (size_t)e * h + j, LD(s, (size_t)edge_src[e] * h + j) - r);
        }
}

static void ref_message_backward(mp_backend *b, void *dz, mp_stype dz_st, void *dh0, void *ds,
                                 const int32_t *in_start, const int32_t *in_edge,
                                 const int32_t *edge_dst, const void *dmsg, mp_stype dmsg_st,
                                 const void *y, mp_stype y_st, double p, int32_t n_atoms,
                                 int32_t n_edges, int h)
{
    double scale = drop_scale(p);
    csr_sums(b, ds, MP_ST_ELEM, in_start, in_edge, dmsg, dmsg_st, 1, 0, n_atoms, h);
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++) {
            size_t o = (size_t)e * h + j;
            double g = LD(ds, (size_t)edge_dst[e] * h + j) -
                       LDS(dmsg, dmsg_st, (size_t)(e ^ 1) * h + j);
            if (y)
                g = LDS(y, y_st, o) > 0 ? g * scale : 0;
            STS(dz, dz_st, o, g);
            if (dh0)
                ST(dh0, o, LD(dh0, o) + g);
        }
}

static void ref_atom_sum_backward(mp_backend *b, void *dm, void *dmo, mp_stype dmo_st,
                                  const int32_t *edge_dst, const void *da, const void *y,
                                  mp_stype y_st, double p, int32_t n_edges, int h)
{
    double scale = drop_scale(p);
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++) {
            size_t o = (size_t)e * h + j;
            double g = LD(da, (size_t)edge_dst[e] * h + j);
            if (y)
                g = LDS(y, y_st, o) > 0 ? g * scale : 0;
            ST(dm, o, g);
            if (dmo != dm)
                STS(dmo, dmo_st, o, LD(dm, o));
        }
}

static double pool_scale(int32_t n_atoms, mp_aggregation agg, double norm)
{
    if (n_atoms == 0)
        return 0;
    if (agg == MP_AGG_MEAN)
        return 1.0 / n_atoms;
    if (agg == MP_AGG_NORM)
        return 1.0 / norm;
    return 1.0;
}

static void ref_pool(mp_backend *b, void *out, int ldo, const int32_t *mol_atom,
                     const void *x, int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        double sc = pool_scale(a1 - a0, agg, norm);
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int32_t v = a0; v < a1; v++)
                s += LD(x, (size_t)v * h + j);
            ST(out, (size_t)i * ldo + j, s * sc);
        }
    }
}

static void ref_pool_backward(mp_backend *b, void *dx, const int32_t *mol_atom,
                              const void *dout, int ldo, int32_t n_mols, int h,
                              mp_aggregation agg, double norm)
{
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        double sc = pool_scale(a1 - a0, agg, norm);
        for (int32_t v = a0; v < a1; v++)
            for (int j = 0; j < h; j++)
                ST(dx, (size_t)v * h + j, LD(dout, (size_t)i * ldo + j) * sc);
    }
}

/* ===================================================================== */
/* Loss, optimizer and device-scheduled steps                             */
/* ===================================================================== */

/* mse and bce here (in double), the other kinds in loss_host.c. */
static void ref_loss(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                     const uint8_t *mask, int32_t n, const mp_loss_spec *spec)
{
    if (spec->kind != MP_LOSS_MSE && spec->kind != MP_LOSS_BCE) {
        mp_loss_host(b, loss, dy, y, target, mask, n, spec);
        return;
    }
    const int n_tasks = spec->n_tasks;
    size_t total = (size_t)(n > 0 ? n : 0) * n_tasks, count = 0;
    for (size_t i = 0; i < total; i++)
        count += mask[i] != 0;
    double sum = 0, inv = count ? 1.0 / (double)count : 0;
    for (size_t i = 0; i < total; i++) {
        if (!mask[i]) {
            ST(dy, i, 0);
            continue;
        }
        double x = LD(y, i), t = LD(target, i), l, g;
        double w = (spec->sample_weight ? LD(spec->sample_weight, i / n_tasks) : 1.0) *
                   (spec->task_weight ? LD(spec->task_weight, i % n_tasks) : 1.0);
        if (spec->kind == MP_LOSS_BCE) {
            /* max(x,0) - x t + log(1 + exp(-|x|)): stable for any x */
            l = (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
            g = 1.0 / (1.0 + exp(-x)) - t;
        } else {
            l = (x - t) * (x - t);
            g = 2 * (x - t);
        }
        sum += l * w;
        ST(dy, i, g * w * inv);
    }
    ST(loss, 0, sum * inv);
}

/* The Adam update with the step's scalars (step = lr / bc1, bc2s = sqrt(bc2)). */
static void adam_update(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                        double step, double bc2s, double beta1, double beta2, double eps,
                        double weight_decay)
{
    for (size_t i = 0; i < n; i++) {
        double gi = LD(g, i) + weight_decay * LD(p, i);
        double mi = beta1 * LD(m, i) + (1 - beta1) * gi;
        double vi = beta2 * LD(v, i) + (1 - beta2) * gi * gi;
        ST(m, i, mi);
        ST(v, i, vi);
        ST(p, i, LD(p, i) - step * mi / (sqrt(vi) / bc2s + eps));
    }
}

static void ref_adam(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                     double lr, double beta1, double beta2, double eps,
                     double weight_decay, long t)
{
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    adam_update(b, p, m, v, g, n, lr / bc1, sqrt(bc2), beta1, beta2, eps, weight_decay);
}

/* adam with the step's scalars (float) read at index k_dev[0]; the update
 * itself in the backend's way (double arithmetic). */
static void ref_adam_sched(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                           const float *sched, const int32_t *k_dev, double beta1, double beta2,
                           double eps, double weight_decay)
{
    size_t k = (size_t)k_dev[0];
    adam_update(b, p, m, v, g, n, sched[2 * k], sched[2 * k + 1], beta1, beta2, eps,
                weight_decay);
}

static void ref_step_end(mp_backend *b, int32_t *k_dev, void *losses, const void *loss)
{
    ST(losses, k_dev[0], LD(loss, 0));
    k_dev[0]++;
}

/* ===================================================================== */
/* Open / close                                                           */
/* ===================================================================== */

static void ref_close(mp_backend *b) { mp_free(b); }

mp_status mp_backend_ref_open(mp_backend **out, mp_dtype dtype, mp_stype act_st)
{
    *out = NULL;
    if (dtype != MP_F32 && dtype != MP_F64)
        return mp_error_set(MP_ERR_ARG, "reference backend: unknown element type %d", (int)dtype);
    if (act_st != MP_ST_ELEM && act_st != MP_ST_BF16)
        return mp_error_set(MP_ERR_ARG, "reference backend: unknown storage type %d", (int)act_st);
    mp_backend *b = mp_calloc(1, sizeof *b);
    if (!b)
        return mp_error_set(MP_ERR_NOMEM, "reference backend: out of memory");
    static const char *const names[2][2] = { { "ref", "ref:bf16" }, { "ref64", "ref64:bf16" } };
    b->name = names[dtype == MP_F64][act_st == MP_ST_BF16];
    b->dtype = dtype;
    b->esize = dtype == MP_F64 ? sizeof(double) : sizeof(float);
    b->host_memory = 1;
    b->act_st = act_st;
    b->close = ref_close;
    b->alloc = ref_alloc;
    b->free = ref_free;
    b->upload = ref_upload;
    b->download = ref_download;
    b->zero = ref_zero;
    b->copy = ref_copy;
    b->sync = ref_sync;
    b->gemm = ref_gemm;
    b->gemm_res_relu = ref_gemm_res_relu;
    b->copy2d = ref_copy2d;
    b->col_sum = ref_col_sum;
    b->relu_dropout = ref_relu_dropout;
    b->relu_dropout_backward = ref_relu_dropout_backward;
    b->dropout = ref_dropout;
    b->atom_embed = ref_atom_embed;
    b->atom_embed_backward = ref_atom_embed_backward;
    b->edge_embed = ref_edge_embed;
    b->edge_embed_backward = ref_edge_embed_backward;
    b->message = ref_message;
    b->message_backward = ref_message_backward;
    b->atom_sum = ref_atom_sum;
    b->atom_sum_backward = ref_atom_sum_backward;
    b->pool = ref_pool;
    b->pool_backward = ref_pool_backward;
    mp_ref_layer_ops(b);
    b->loss = ref_loss;
    b->adam = ref_adam;
    b->adam_sched = ref_adam_sched;
    b->step_end = ref_step_end;
    *out = b;
    return MP_OK;
}

/* "ref" (float), "ref64" (double), each optionally ":bf16" (bf16 storage of
 * the product operands). */
static mp_status ref_open_name(mp_backend **out, const char *name)
{
    static const struct {
        const char *name;
        mp_dtype    dtype;
        mp_stype    st;
    } names[] = {
        { "ref", MP_F32, MP_ST_ELEM },      { "ref:fp32", MP_F32, MP_ST_ELEM },
        { "ref64", MP_F64, MP_ST_ELEM },    { "ref:fp64", MP_F64, MP_ST_ELEM },
        { "ref:bf16", MP_F32, MP_ST_BF16 }, { "ref64:bf16", MP_F64, MP_ST_BF16 },
    };
    *out = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0)
            return mp_backend_ref_open(out, names[i].dtype, names[i].st);
    return mp_error_set(MP_ERR_ARG, "unknown reference backend '%s' (expected ref, ref64, "
                        "ref:bf16 or ref64:bf16)", name);
}

static int ref_available(char *why, size_t n)
{
    (void)why; (void)n;
    return 1;
}

const mp_backend_provider mp_backend_ref_provider = {
    "ref, ref64", "ref[:bf16], ref64[:bf16]",
    "plain loops in float or double (bf16 storage with :bf16): the test oracle", ref_open_name,
    ref_available, NULL,
};
