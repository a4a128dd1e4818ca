/*
 * cpu_bf16.c - the cpu backend's ops on bf16 storage (cpu:bf16): the
 * elementwise and graph ops that take a storage type per operand (ops.h),
 * for operands of either storage.  cpu.c and cpu_graph.c keep their fp32
 * code, bit for bit, and hand a call here when one of its storage types is
 * bf16.  Each bf16 value is widened (exactly) when read and each result
 * rounded once when written, as the seam says; the arithmetic is the fp32
 * code's, in the same order (a row of floats on the stack per row of work),
 * so where every operand is fp32 these give the fp32 ops' bits.  Threads and
 * determinism: cpu_impl.h (one writer per output row or element).
 */
#include "backend/cpu_impl.h"

/* y = max(y, 0);  y = yv > 0 ? y * scale : 0 (a ReLU / dropout backward). */
static inline void row_relu_self(float *restrict y, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] = y[j] > 0 ? y[j] : 0.0f;
}

static inline void row_mask(float *restrict y, const float *restrict yv, float scale, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++) {
        float d = y[j] * scale;
        y[j] = yv[j] > 0 ? d : 0.0f;
    }
}

/* Elements per chunk of the elementwise passes (on the stack). */
#define CHUNK 1024

/* Row i of x (storage st, rows of n) as floats: x's own memory when fp32,
 * else widened into tmp. */
static inline const float *row_in(float *tmp, const void *x, mp_stype st, size_t i, int n)
{
    if (st == MP_ST_ELEM)
        return (const float *)x + i * (size_t)n;
    bf16_widen(tmp, (const uint16_t *)x + i * (size_t)n, (size_t)n);
    return tmp;
}

/* Writes v[0..n) at element offset off of y (storage st). */
static inline void put(void *y, mp_stype st, size_t off, const float *v, size_t n)
{
    if (st == MP_ST_ELEM)
        memcpy((float *)y + off, v, n * sizeof(float));
    else
        bf16_narrow((uint16_t *)y + off, v, n);
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

KERNEL static void copy2d_rows(void *dst, mp_stype dst_st, int ldd, const void *src,
                               mp_stype src_st, int lds, size_t a, size_t z, int n_cols)
{
    float tmp[CHUNK];
    for (size_t i = a; i < z; i++)
        for (int c0 = 0; c0 < n_cols; c0 += CHUNK) {
            int w = n_cols - c0 < CHUNK ? n_cols - c0 : CHUNK;
            size_t so = i * (size_t)lds + c0;
            const float *v;
            if (src_st == MP_ST_ELEM) {
                v = (const float *)src + so;
            } else {
                bf16_widen(tmp, (const uint16_t *)src + so, (size_t)w);
                v = tmp;
            }
            put(dst, dst_st, i * (size_t)ldd + c0, v, (size_t)w);
        }
}

void mp_cpu_bf16_copy2d(void *dst, mp_stype dst_st, int ldd, const void *src, mp_stype src_st,
                        int lds, int32_t n_rows, int n_cols)
{
    int nt = threads_for((size_t)n_rows * n_cols);
    PARALLEL_RANGE((size_t)n_rows, 1,
        copy2d_rows(dst, dst_st, ldd, src, src_st, lds, a, z, n_cols));
}

KERNEL static void relu_dropout_range(void *y, const void *x, mp_stype st, size_t a, size_t z,
                               uint32_t thr, float scale, uint64_t key)
{
    float t[CHUNK];
    for (size_t i0 = a; i0 < z; i0 += CHUNK) {
        size_t n = z - i0 < CHUNK ? z - i0 : CHUNK;
        if (st == MP_ST_ELEM)
            memcpy(t, (const float *)x + i0, n * sizeof(float));
        else
            bf16_widen(t, (const uint16_t *)x + i0, n);
        if (!thr) {
#pragma omp simd
            for (size_t j = 0; j < n; j++)
                t[j] = t[j] > 0 ? t[j] : 0.0f;
        } else {
            for (size_t j = 0; j < n; j++) {
                float v = t[j] > 0 ? t[j] : 0.0f;
                t[j] = mp_dropout_keep(key, i0 + j, thr) ? v * scale : 0.0f;
            }
        }
        put(y, st, i0, t, n);
    }
}

void mp_cpu_bf16_relu_dropout(void *y, const void *x, mp_stype st, size_t n, double p,
                              uint64_t key)
{
    uint32_t thr = mp_dropout_threshold(p);
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16, relu_dropout_range(y, x, st, a, z, thr, scale, key));
}

KERNEL static void relu_back_range(float *dx, void *dxo, mp_stype dxo_st, const void *y,
                            mp_stype y_st, const float *dy, size_t a, size_t z, float scale)
{
    float t[CHUNK];
    for (size_t i0 = a; i0 < z; i0 += CHUNK) {
        size_t n = z - i0 < CHUNK ? z - i0 : CHUNK;
        const float *yv;
        if (y_st == MP_ST_ELEM) {
            yv = (const float *)y + i0;
        } else {
            bf16_widen(t, (const uint16_t *)y + i0, n);
            yv = t;
        }
#pragma omp simd
        for (size_t j = 0; j < n; j++) {
            float d = dy[i0 + j] * scale;
            dx[i0 + j] = yv[j] > 0 ? d : 0.0f;
        }
        if (dxo && dxo != dx)
            put(dxo, dxo_st, i0, dx + i0, n);
    }
}

void mp_cpu_bf16_relu_backward(void *dx, void *dxo, mp_stype dxo_st, const void *y,
                               mp_stype y_st, const void *dy, size_t n, double p)
{
    float scale = p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : 1.0f;
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16, relu_back_range(dx, dxo, dxo_st, y, y_st, dy, a, z, scale));
}

/* ===================================================================== */
/* Graph ops                                                              */
/* ===================================================================== */

KERNEL static void edge_embed_rows(void *h0, void *m0, mp_stype st, const int32_t *edge_src,
                                   const int8_t *bond_hot, const float *at, const float *wb,
                                   size_t a, size_t z, int h)
{
    float o[h];
    for (size_t e = a; e < z; e++) {
        memcpy(o, at + (size_t)edge_src[e] * h, (size_t)h * sizeof(float));
        const int8_t *bh = bond_hot + (e >> 1) * MP_BOND_MAX_HOT;
        for (int q = 0; q < MP_BOND_MAX_HOT; q++)
            if (bh[q] >= 0)
                row_add(o, wb + (size_t)bh[q] * h, h);
        put(h0, st, e * h, o, (size_t)h);
        if (m0) {
            row_relu_self(o, h);
            put(m0, st, e * h, o, (size_t)h);
        }
    }
}

void mp_cpu_bf16_edge_embed(void *h0, void *m0, mp_stype st, const int32_t *edge_src,
                            const int8_t *bond_hot, const float *at, const float *wb,
                            int32_t n_edges, int h)
{
    if (n_edges <= 0 || h <= 0)
        return;
    int nt = threads_for((size_t)n_edges * h * 2);
    PARALLEL_RANGE((size_t)n_edges, 2,
        edge_embed_rows(h0, m0, st, edge_src, bond_hot, at, wb, a, z, h));
}

/* o = sum over the CSR segment of v of rows m[in_edge[k] ^ flip] (read
 * through max(., 0) when relu); t: a row of scratch. */
static inline __attribute__((always_inline)) void seg_row(float *o, float *t, const int32_t *in_start, const int32_t *in_edge,
                    const void *m, mp_stype m_st, int32_t flip, int relu, size_t v, int h)
{
    int32_t k0 = in_start[v], k1 = in_start[v + 1];
    if (k0 == k1) {
        memset(o, 0, (size_t)h * sizeof(float));
        return;
    }
    for (int32_t k = k0; k < k1; k++) {
        const float *x = row_in(t, m, m_st, (size_t)(in_edge[k] ^ flip), h);
        if (k == k0 && !relu) {
            memcpy(o, x, (size_t)h * sizeof(float));
        } else if (k == k0) {
#pragma omp simd
            for (int j = 0; j < h; j++)
                o[j] = x[j] > 0 ? x[j] : 0.0f;
        } else if (!relu) {
            row_add(o, x, h);
        } else {
#pragma omp simd
            for (int j = 0; j < h; j++)
                o[j] += x[j] > 0 ? x[j] : 0.0f;
        }
    }
}

/* One edge's row: g = se - x (x through max(., 0) when relu); with y,
 * g = yv > 0 ? g * scale : 0 and dh0e += g; out row = g.  t, o, yt: rows of
 * scratch; x: the edge's reverse row (storage m_st). */
static inline __attribute__((always_inline)) void edge_diff_row(
    void *out, mp_stype out_st, size_t e, const float *se, const float *x, int relu,
    const void *y, mp_stype y_st, float scale, float *dh0, float *o, float *yt, int h)
{
    if (relu) {
#pragma omp simd
        for (int j = 0; j < h; j++)
            o[j] = se[j] - (x[j] > 0 ? x[j] : 0.0f);
    } else {
        row_sub(o, se, x, h);
    }
    if (y) {
        row_mask(o, row_in(yt, y, y_st, e, h), scale, h);
        if (dh0)
            row_add(dh0 + e * h, o, h);
    }
    put(out, out_st, e * h, o, (size_t)h);
}

/*
 * The message and its adjoint, per atom v, as the cuda backend does it: S[v]
 * from the rows x_k = m[in_edge[k] ^ flip] of v's segment, then the edge
 * e = in_edge[k] ^ flip ^ 1 gets S[v] - x_k.  Every directed edge is the
 * reverse of exactly one atom's incoming edge (forward: e leaves v, whose
 * sum S[src[e]] it needs; backward: e enters v, S = dS[dst[e]]), so each
 * output row has one writer, S never goes to memory to be gathered back per
 * edge, and x_k is read again from L1.  The arithmetic is that of the sums
 * and then the edge rows, in their order: the same bits as computing all of
 * S first.  s_keep (backward): also left holding the sums.
 */
KERNEL static void message_rows(void *out, mp_stype out_st, float *s_keep,
                                const int32_t *in_start, const int32_t *in_edge, const void *m,
                                mp_stype m_st, int32_t flip, int relu, const void *y,
                                mp_stype y_st, float scale, float *dh0, size_t a, size_t z,
                                int h)
{
    float sv[h], t[h], o[h], yt[h];
    for (size_t v = a; v < z; v++) {
        seg_row(sv, t, in_start, in_edge, m, m_st, flip, relu, v, h);
        if (s_keep)
            memcpy(s_keep + v * h, sv, (size_t)h * sizeof(float));
        for (int32_t k = in_start[v]; k < in_start[v + 1]; k++) {
            size_t xr = (size_t)(in_edge[k] ^ flip);
            edge_diff_row(out, out_st, xr ^ 1, sv, row_in(t, m, m_st, xr, h), relu, y, y_st,
                          scale, dh0, o, yt, h);
        }
    }
}

static void message_any(void *out, mp_stype out_st, float *s, const int32_t *in_start,
                        const int32_t *in_edge, const void *m, mp_stype m_st, int32_t flip,
                        int relu, const void *y, mp_stype y_st, float scale, float *dh0,
                        int32_t n_atoms, int32_t n_edges, int h, int keep_s)
{
    if (h <= 0 || (n_atoms <= 0 && n_edges <= 0))
        return;
    /* the in-edge CSR covers every edge once (graph store invariant) */
    MP_ASSERT(in_start[0] == 0 && in_start[n_atoms] == n_edges);
    float *s_keep = keep_s ? s : NULL;
    int nt = threads_for((size_t)n_edges * h * 2);
    PARALLEL_RANGE((size_t)n_atoms, 1,
        message_rows(out, out_st, s_keep, in_start, in_edge, m, m_st, flip, relu, y, y_st,
                     scale, dh0, a, z, h));
}

void mp_cpu_bf16_message(void *msg, mp_stype msg_st, float *s, const int32_t *in_start,
                         const int32_t *in_edge, const int32_t *edge_src, const void *m,
                         mp_stype m_st, int relu_in, int32_t n_atoms, int32_t n_edges, int h)
{
    (void)edge_src;   /* src[e] = dst[e ^ 1]: the CSR says it (message_rows) */
    message_any(msg, msg_st, s, in_start, in_edge, m, m_st, 0, relu_in != 0, NULL, MP_ST_ELEM,
                1.0f, NULL, n_atoms, n_edges, h, 0);
}

void mp_cpu_bf16_message_backward(void *dz, mp_stype dz_st, float *dh0, float *ds,
                                  const int32_t *in_start, const int32_t *in_edge,
                                  const int32_t *edge_dst, const void *dmsg, mp_stype dmsg_st,
                                  const void *y, mp_stype y_st, double p, int32_t n_atoms,
                                  int32_t n_edges, int h)
{
    float scale = p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : 1.0f;
    (void)edge_dst;   /* dst[e]: the atom whose segment holds e (message_rows) */
    message_any(dz, dz_st, ds, in_start, in_edge, dmsg, dmsg_st, 1, 0, y, y_st, scale, dh0,
                n_atoms, n_edges, h, 1);
}

KERNEL static void atom_sum_rows(void *av, mp_stype a_st, const int32_t *in_start,
                                 const int32_t *in_edge, const void *m, mp_stype m_st,
                                 size_t a, size_t z, int h)
{
    float o[h], t[h];
    for (size_t v = a; v < z; v++) {
        seg_row(o, t, in_start, in_edge, m, m_st, 0, 0, v, h);
        put(av, a_st, v * h, o, (size_t)h);
    }
}

void mp_cpu_bf16_atom_sum(void *av, mp_stype a_st, const int32_t *in_start,
                          const int32_t *in_edge, const void *m, mp_stype m_st,
                          int32_t n_atoms, int h)
{
    if (n_atoms <= 0 || h <= 0)
        return;
    int nt = threads_for((size_t)n_atoms * h * 2);
    PARALLEL_RANGE((size_t)n_atoms, 1,
        atom_sum_rows(av, a_st, in_start, in_edge, m, m_st, a, z, h));
}

KERNEL static void atom_sum_back_rows(float *dm, void *dmo, mp_stype dmo_st,
                                      const int32_t *edge_dst, const float *da, const void *y,
                                      mp_stype y_st, float scale, size_t a, size_t z, int h)
{
    float yt[h];
    for (size_t e = a; e < z; e++) {
        float *o = dm + e * h;
        memcpy(o, da + (size_t)edge_dst[e] * h, (size_t)h * sizeof(float));
        if (y)
            row_mask(o, row_in(yt, y, y_st, e, h), scale, h);
        if (dmo != dm)
            put(dmo, dmo_st, e * h, o, (size_t)h);
    }
}

void mp_cpu_bf16_atom_sum_backward(float *dm, void *dmo, mp_stype dmo_st,
                                   const int32_t *edge_dst, const float *da, const void *y,
                                   mp_stype y_st, double p, int32_t n_edges, int h)
{
    if (n_edges <= 0 || h <= 0)
        return;
    float scale = p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : 1.0f;
    int nt = threads_for((size_t)n_edges * h);
    PARALLEL_RANGE((size_t)n_edges, 1,
        atom_sum_back_rows(dm, dmo, dmo_st, edge_dst, da, y, y_st, scale, a, z, h));
}
