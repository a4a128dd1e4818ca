/*
 * ops_ref.c - the reference backend: every op of ops.h as the plainest loop
 * that states its definition, single-threaded, accumulating in double.  It
 * is the oracle the cpu backend (and later the cuda one) is tested against,
 * and, opened as "ref64" with double buffers, the backend the
 * finite-difference gradient checks run the whole models on.
 *
 * One body serves both element types: loads and stores go through LD/ST,
 * which read or write float or double according to the backend's dtype.
 * That costs a branch per element, which an oracle can afford, and keeps a
 * single copy of each definition.
 */
#include "backend/ops.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Typed access                                                           */
/* ===================================================================== */

#define F64(b) ((b)->dtype == MP_F64)

static inline double load_el(const mp_backend *b, const void *p, size_t i)
{
    return F64(b) ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static inline void store_el(const mp_backend *b, void *p, size_t i, double v)
{
    if (F64(b))
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

#define LD(p, i)    load_el(b, (p), (size_t)(i))
#define ST(p, i, v) store_el(b, (p), (size_t)(i), (v))

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

static void ref_gemm(mp_backend *b, int ta, int tb, int m, int n, int k, double alpha,
                     const void *a, int lda, const void *bm, int ldb, double beta,
                     void *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double x = ta ? LD(a, (size_t)l * lda + i) : LD(a, (size_t)i * lda + l);
                double y = tb ? LD(bm, (size_t)j * ldb + l) : LD(bm, (size_t)l * ldb + j);
                s += x * y;
            }
            size_t ci = (size_t)i * ldc + j;
            ST(c, ci, alpha * s + (beta == 0 ? 0 : beta * LD(c, ci)));
        }
}

static void ref_gemm_batch(mp_backend *b, int count, const mp_gemm *g)
{
    for (int i = 0; i < count; i++)
        ref_gemm(b, g[i].ta, g[i].tb, g[i].m, g[i].n, g[i].k, g[i].alpha, g[i].a, g[i].lda,
                 g[i].b, g[i].ldb, g[i].beta, g[i].c, g[i].ldc);
}

static void ref_fill_rows(mp_backend *b, void *y, int ldy, const void *row,
                          int32_t n_rows, int n_cols)
{
    for (int32_t i = 0; i < n_rows; i++)
        for (int j = 0; j < n_cols; j++)
            ST(y, (size_t)i * ldy + j, LD(row, j));
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

static void ref_copy2d(mp_backend *b, void *dst, int ldd, const void *src, int lds,
                       int32_t n_rows, int n_cols)
{
    for (int32_t i = 0; i < n_rows; i++)
        for (int j = 0; j < n_cols; j++)
            ST(dst, (size_t)i * ldd + j, LD(src, (size_t)i * lds + j));
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static void ref_add(mp_backend *b, void *y, const void *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ST(y, i, LD(y, i) + LD(x, i));
}

static void ref_relu_dropout(mp_backend *b, void *y, const void *x, size_t n,
                             double p, uint64_t key)
{
    uint32_t thr = mp_dropout_threshold(p);
    double scale = p > 0 && p < 1 ? 1.0 / (1.0 - p) : 1.0;
    for (size_t i = 0; i < n; i++) {
        double v = LD(x, i);
        v = v > 0 ? v : 0;
        if (thr)
            v = mp_dropout_keep(key, i, thr) ? v * scale : 0;
        ST(y, i, v);
    }
}

static void ref_relu_dropout_backward(mp_backend *b, void *dx, const void *y,
                                      const void *dy, size_t n, double p)
{
    double scale = p > 0 && p < 1 ? 1.0 / (1.0 - p) : 1.0;
    for (size_t i = 0; i < n; i++)
        ST(dx, i, LD(y, i) > 0 ? LD(dy, i) * scale : 0);
}

static void ref_dropout(mp_backend *b, void *y, const void *x, int32_t n_rows,
                        int n_cols, int ld, double p, uint64_t key)
{
    uint32_t thr = mp_dropout_threshold(p);
    double scale = p > 0 && p < 1 ? 1.0 / (1.0 - p) : 1.0;
    for (int32_t i = 0; i < n_rows; i++)
        for (int j = 0; j < n_cols; j++) {
            size_t k = (size_t)i * ld + j;
            ST(y, k, mp_dropout_keep(key, k, thr) ? LD(x, k) * scale : 0);
        }
}

static void ref_dropout_backward(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                 int n_cols, int ld, double p, uint64_t key)
{
    /* The same map as forward: dropout is linear and diagonal. */
    ref_dropout(b, dx, dy, n_rows, n_cols, ld, p, key);
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

static void ref_edge_embed(mp_backend *b, void *h0, const int32_t *edge_src,
                           const int8_t *bond_hot, const void *a, const void *wb,
                           int32_t n_edges, int h)
{
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++) {
            double s = LD(a, (size_t)edge_src[e] * h + j);
            for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
                int slot = bond_hot[(size_t)(e >> 1) * MP_BOND_MAX_HOT + q];
                if (slot >= 0)
                    s += LD(wb, (size_t)slot * h + j);
            }
            ST(h0, (size_t)e * h + j, s);
        }
}

static void ref_edge_embed_backward(mp_backend *b, void *da, void *dwb,
                                    const int32_t *in_start, const int32_t *in_edge,
                                    const int8_t *bond_hot, const void *dh0,
                                    int32_t n_atoms, int32_t n_edges, int h)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int32_t k = in_start[v]; k < in_start[v + 1]; k++)
                s += LD(dh0, (size_t)(in_edge[k] ^ 1) * h + j);
            ST(da, (size_t)v * h + j, s);
        }
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

static void ref_atom_sum(mp_backend *b, void *a, const int32_t *in_start,
                         const int32_t *in_edge, const void *m, int32_t n_atoms, int h)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int32_t k = in_start[v]; k < in_start[v + 1]; k++)
                s += LD(m, (size_t)in_edge[k] * h + j);
            ST(a, (size_t)v * h + j, s);
        }
}

static void ref_message(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                        const int32_t *in_edge, const int32_t *edge_src, const void *m,
                        int32_t n_atoms, int32_t n_edges, int h)
{
    ref_atom_sum(b, s, in_start, in_edge, m, n_atoms, h);
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++)
            ST(msg, (size_t)e * h + j,
               LD(s, (size_t)edge_src[e] * h + j) - LD(m, (size_t)(e ^ 1) * h + j));
}

static void ref_message_backward(mp_backend *b, void *dm, void *ds, const int32_t *in_start,
                                 const int32_t *in_edge, const int32_t *edge_dst,
                                 const void *dmsg, int32_t n_atoms, int32_t n_edges, int h)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double t = 0;
            for (int32_t k = in_start[v]; k < in_start[v + 1]; k++)
                t += LD(dmsg, (size_t)(in_edge[k] ^ 1) * h + j);
            ST(ds, (size_t)v * h + j, t);
        }
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++)
            ST(dm, (size_t)e * h + j,
               LD(ds, (size_t)edge_dst[e] * h + j) - LD(dmsg, (size_t)(e ^ 1) * h + j));
}

static void ref_atom_sum_backward(mp_backend *b, void *dm, const int32_t *edge_dst,
                                  const void *da, int32_t n_edges, int h)
{
    for (int32_t e = 0; e < n_edges; e++)
        for (int j = 0; j < h; j++)
            ST(dm, (size_t)e * h + j, LD(da, (size_t)edge_dst[e] * h + j));
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
/* Loss and optimizer                                                     */
/* ===================================================================== */

static void ref_loss(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                     const uint8_t *mask, int32_t n, int n_tasks, mp_loss_kind kind)
{
    size_t total = (size_t)n * n_tasks, count = 0;
    for (size_t i = 0; i < total; i++)
        count += mask[i] != 0;
    double sum = 0, inv = count ? 1.0 / (double)count : 0;
    for (size_t i = 0; i < total; i++) {
        if (!mask[i]) {
            ST(dy, i, 0);
            continue;
        }
        double x = LD(y, i), t = LD(target, i), l, g;
        if (kind == MP_LOSS_BCE) {
            /* max(x,0) - x t + log(1 + exp(-|x|)): stable for any x */
            l = (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
            g = 1.0 / (1.0 + exp(-x)) - t;
        } else {
            l = (x - t) * (x - t);
            g = 2 * (x - t);
        }
        sum += l;
        ST(dy, i, g * inv);
    }
    ST(loss, 0, sum * inv);
}

static void ref_adam(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                     double lr, double beta1, double beta2, double eps,
                     double weight_decay, long t)
{
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    double step = lr / bc1, bc2s = sqrt(bc2);
    for (size_t i = 0; i < n; i++) {
        double gi = LD(g, i) + weight_decay * LD(p, i);
        double mi = beta1 * LD(m, i) + (1 - beta1) * gi;
        double vi = beta2 * LD(v, i) + (1 - beta2) * gi * gi;
        ST(m, i, mi);
        ST(v, i, vi);
        ST(p, i, LD(p, i) - step * mi / (sqrt(vi) / bc2s + eps));
    }
}

/* adam with the step's scalars (float) read at index k_dev[0]; the update
 * itself in the backend's way (double arithmetic). */
static void ref_adam_sched(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                           const float *sched, const int32_t *k_dev, double beta1, double beta2,
                           double eps, double weight_decay)
{
    double step = sched[2 * (size_t)k_dev[0]], bc2s = sched[2 * (size_t)k_dev[0] + 1];
    for (size_t i = 0; i < n; i++) {
        double gi = LD(g, i) + weight_decay * LD(p, i);
        double mi = beta1 * LD(m, i) + (1 - beta1) * gi;
        double vi = beta2 * LD(v, i) + (1 - beta2) * gi * gi;
        ST(m, i, mi);
        ST(v, i, vi);
        ST(p, i, LD(p, i) - step * mi / (sqrt(vi) / bc2s + eps));
    }
}

static void ref_step_end(mp_backend *b, int32_t *k_dev, void *losses, const void *loss)
{
    ST(losses, k_dev[0], LD(loss, 0));
    k_dev[0]++;
}

/* ===================================================================== */
/* Fused ops, composed of the unfused ones (ops.h; cpu and ref use these)  */
/* ===================================================================== */

void mp_ops_gemm_res_relu_composed(mp_backend *b, int m, int n, int k, const void *a, int lda,
                                   const void *w, int ldw, const void *r, int ldr, void *c,
                                   int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (c != r)
        b->copy2d(b, c, ldc, r, ldr, m, n);
    b->gemm(b, 0, 0, m, n, k, 1.0, a, lda, w, ldw, 1.0, c, ldc);
    if (ldc == n) {
        b->relu_dropout(b, c, c, (size_t)m * n, 0.0, 0);
        return;
    }
    for (int i = 0; i < m; i++) {
        void *row = (char *)c + (size_t)i * ldc * b->esize;
        b->relu_dropout(b, row, row, (size_t)n, 0.0, 0);
    }
}

void mp_ops_message_backward_relu_composed(mp_backend *b, void *dz, void *dh0, void *ds,
                                           const int32_t *in_start, const int32_t *in_edge,
                                           const int32_t *edge_dst, const void *dmsg,
                                           const void *y, double p, int32_t n_atoms,
                                           int32_t n_edges, int h)
{
    b->message_backward(b, dz, ds, in_start, in_edge, edge_dst, dmsg, n_atoms, n_edges, h);
    if (n_edges <= 0 || h <= 0)
        return;
    const size_t n = (size_t)n_edges * h;
    b->relu_dropout_backward(b, dz, y, dz, n, p);
    b->add(b, dh0, dz, n);
}

void mp_ops_edge_embed_relu_composed(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                                     const int8_t *bond_hot, const void *a, const void *wb,
                                     int32_t n_edges, int h)
{
    b->edge_embed(b, h0, edge_src, bond_hot, a, wb, n_edges, h);
    if (n_edges > 0 && h > 0)
        b->relu_dropout(b, m0, h0, (size_t)n_edges * h, 0.0, 0);
}

/* ===================================================================== */
/* Open / close                                                           */
/* ===================================================================== */

static void ref_close(mp_backend *b) { mp_free(b); }

mp_status mp_backend_ref_open(mp_backend **out, mp_dtype dtype)
{
    *out = NULL;
    if (dtype != MP_F32 && dtype != MP_F64)
        return mp_error_set(MP_ERR_ARG, "reference backend: unknown element type %d", (int)dtype);
    mp_backend *b = mp_calloc(1, sizeof *b);
    if (!b)
        return mp_error_set(MP_ERR_NOMEM, "reference backend: out of memory");
    b->name = dtype == MP_F64 ? "ref64" : "ref";
    b->dtype = dtype;
    b->esize = dtype == MP_F64 ? sizeof(double) : sizeof(float);
    b->host_memory = 1;
    b->close = ref_close;
    b->alloc = ref_alloc;
    b->free = ref_free;
    b->upload = ref_upload;
    b->download = ref_download;
    b->zero = ref_zero;
    b->copy = ref_copy;
    b->sync = ref_sync;
    b->gemm = ref_gemm;
    b->gemm_batch = ref_gemm_batch;
    b->fill_rows = ref_fill_rows;
    b->col_sum = ref_col_sum;
    b->copy2d = ref_copy2d;
    b->add = ref_add;
    b->relu_dropout = ref_relu_dropout;
    b->relu_dropout_backward = ref_relu_dropout_backward;
    b->dropout = ref_dropout;
    b->dropout_backward = ref_dropout_backward;
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
    b->loss = ref_loss;
    b->adam = ref_adam;
    b->gemm_res_relu = mp_ops_gemm_res_relu_composed;
    b->message_backward_relu = mp_ops_message_backward_relu_composed;
    b->edge_embed_relu = mp_ops_edge_embed_relu_composed;
    b->adam_sched = ref_adam_sched;
    b->step_end = ref_step_end;
    mp_ops_keyed_host(b);
    *out = b;
    return MP_OK;
}

/* "ref" (float) or "ref64" (double). */
static mp_status ref_open_name(mp_backend **out, const char *name)
{
    *out = NULL;
    if (strcmp(name, "ref") == 0 || strcmp(name, "ref:fp32") == 0)
        return mp_backend_ref_open(out, MP_F32);
    if (strcmp(name, "ref64") == 0 || strcmp(name, "ref:fp64") == 0)
        return mp_backend_ref_open(out, MP_F64);
    return mp_error_set(MP_ERR_ARG, "unknown reference backend '%s' (expected ref or ref64)",
                        name);
}

static int ref_available(char *why, size_t n)
{
    (void)why; (void)n;
    return 1;
}

const mp_backend_provider mp_backend_ref_provider = {
    "ref, ref64", "ref, ref64", "plain loops in float or double: the test oracle", ref_open_name,
    ref_available,
};
