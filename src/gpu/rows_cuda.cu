/*
 * rows_cuda.cu - the cuda backend's memory-bound ops (ops.h): copy2d, the
 * elementwise ReLU / dropout ops, and the graph ops made of row gathers and
 * CSR segment sums (the embeddings, message, atom_sum, their adjoints,
 * pooling).  The kernels are kernels_rows.cuh's, one per op, templated on
 * the storage types of its operands; each launcher picks the instantiation
 * from the mp_stype arguments (WITH_T) and the 4-wide form when the widths
 * and pointers allow it.  The weight-gradient scatter of edge_embed_backward
 * is reduce_cuda.cu's.
 *
 * Everything is queued on the backend's stream without host synchronization,
 * so a sequence of ops can be captured into a CUDA graph.  The row kernels
 * mark their pointers __restrict__ (so loads of a row can be issued ahead of
 * its stores): ops.h forbids outputs aliasing inputs except for the
 * elementwise ops that say so, whose kernels do without it.
 */
#include "gpu/cuda_ctx.cuh"

#include <string.h>

#include "gpu/kernels_rows.cuh"

/* The scale of the ReLU / dropout backward, exactly as every kernel uses it. */
static int drop_scaled(double p) { return p > 0 && p < 1; }
static float drop_scale(double p) { return drop_scaled(p) ? (float)(1.0 / (1.0 - p)) : 1.0f; }

/* ===================================================================== */
/* Dense helpers                                                          */
/* ===================================================================== */

static void cu_copy2d(mp_backend *b, void *dst, mp_stype dst_st, int ldd, const void *src,
                      mp_stype src_st, int lds, int32_t n_rows, int n_cols)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    if (dst_st == src_st && lds != 0) {
        size_t es = dst_st == MP_ST_BF16 ? 2 : sizeof(float);
        CUDA_OK(c, cudaMemcpy2DAsync(dst, (size_t)ldd * es, src, (size_t)lds * es,
                                     (size_t)n_cols * es, (size_t)n_rows,
                                     cudaMemcpyDeviceToDevice, c->stream));
        return;
    }
    /* a conversion, or one row into every row */
    int v4 = n_cols % 4 == 0 && ldd % 4 == 0 && lds % 4 == 0 && alv(dst, dst_st) &&
             alv(src, src_st);
    WITH_T(dst_st, TO, WITH_T(src_st, TI,
        launch_rows(c, v4, (size_t)n_rows, (size_t)n_cols, k_copy2d<4, TO, TI>, k_copy2d<1, TO, TI>,
                    (TO *)dst, ldd, (const TI *)src, lds, n_rows, n_cols)));
    LAUNCHED(c, "k_copy2d");
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static void cu_relu_dropout(mp_backend *b, void *y, const void *x, mp_stype st, size_t n,
                            double p, mp_key key)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    uint32_t thr = mp_dropout_threshold(p);
    float scale = thr && p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    WITH_T(st, T,
        launch_rows(c, alv(y, st) && alv(x, st), 1, n, k_relu_dropout<4, T>, k_relu_dropout<1, T>,
                    (T *)y, (const T *)x, n, thr, scale, key.value, key.keys, key.k_dev,
                    key.stride));
    LAUNCHED(c, "k_relu_dropout");
}

static void cu_relu_dropout_backward(mp_backend *b, void *dx, void *dxo, mp_stype dxo_st,
                                     const void *y, mp_stype y_st, const void *dy, size_t n,
                                     double p)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    const int scaled = drop_scaled(p), copy = dxo != dx;
    const float scale = drop_scale(p);
    int v4 = al16(dx) && alv(y, y_st) && al16(dy) && (!copy || alv(dxo, dxo_st));
    if (copy)
        WITH_T(y_st, TY, WITH_T(dxo_st, TO,
            launch_rows(c, v4, 1, n, k_relu_dropout_backward<4, TY, TO, true>,
                        k_relu_dropout_backward<1, TY, TO, true>, (float *)dx, (TO *)dxo,
                        (const TY *)y, (const float *)dy, n, scale, scaled)));
    else
        WITH_T(y_st, TY,
            launch_rows(c, v4, 1, n, k_relu_dropout_backward<4, TY, float, false>,
                        k_relu_dropout_backward<1, TY, float, false>, (float *)dx, (float *)NULL,
                        (const TY *)y, (const float *)dy, n, scale, scaled));
    LAUNCHED(c, "k_relu_dropout_backward");
}

static void cu_dropout(mp_backend *b, void *y, const void *x, int32_t n_rows, int n_cols, int ld,
                       double p, mp_key key)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    uint32_t thr = mp_dropout_threshold(p);
    float scale = !thr ? 1.0f : p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    launch(c, c->stream, k_dropout2d, grid_for(c, (size_t)n_rows, ROWS_PER_BLOCK), THREADS, 0,
        (float *)y, (const float *)x, n_rows, n_cols, ld, thr, scale, key.value, key.keys,
        key.k_dev, key.stride);
    LAUNCHED(c, "k_dropout2d");
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

static void cu_atom_embed(mp_backend *b, void *out, const int16_t *hot, const float *mass,
                          const void *w, const void *bias, int32_t n_atoms, int h, int mass_row)
{
    gpu_ctx *c = CTX(b);
    if (n_atoms <= 0 || h <= 0 || !usable(c))
        return;
    int v4 = h % 4 == 0 && al16(out) && al16(w) && al16(bias);
    launch_rows(c, v4, (size_t)n_atoms, (size_t)h, k_atom_embed<4>, k_atom_embed<1>, (float *)out,
                hot, mass, (const float *)w, (const float *)bias, n_atoms, h, mass_row);
    LAUNCHED(c, "k_atom_embed");
}

/* H0, and M_0 = ReLU(H0) in the same pass when m0 (fused: 2 edge-sized
 * passes instead of 3). */
static void cu_edge_embed(mp_backend *b, void *h0, void *m0, mp_stype st, const int32_t *edge_src,
                          const int8_t *bond_hot, const void *a, const void *wb, int32_t n_edges,
                          int h)
{
    gpu_ctx *c = CTX(b);
    if (n_edges <= 0 || h <= 0 || !usable(c))
        return;
    int v4 = h % 4 == 0 && al16(a) && al16(wb) && alv(h0, st) && alv(m0, st);
    if (m0)
        WITH_T(st, T,
            launch_rows(c, v4, (size_t)n_edges, (size_t)h, k_edge_embed<4, T, true>,
                        k_edge_embed<1, T, true>, (T *)h0, (T *)m0, edge_src, bond_hot,
                        (const float *)a, (const float *)wb, n_edges, h));
    else
        WITH_T(st, T,
            launch_rows(c, v4, (size_t)n_edges, (size_t)h, k_edge_embed<4, T, false>,
                        k_edge_embed<1, T, false>, (T *)h0, (T *)NULL, edge_src, bond_hot,
                        (const float *)a, (const float *)wb, n_edges, h));
    LAUNCHED(c, "k_edge_embed");
}

/* out (out_st) = the CSR segment sums of x (x_st) over the rows
 * in_edge[k] ^ flip, through max(., 0) when relu. */
static void segment_sum(gpu_ctx *c, void *out, mp_stype out_st, const int32_t *in_start,
                        const int32_t *in_edge, const void *x, mp_stype x_st, int32_t flip,
                        int relu, int32_t n_atoms, int h)
{
    int v4 = h % 4 == 0 && alv(out, out_st) && alv(x, x_st);
    WITH_T(out_st, TO, WITH_T(x_st, TX, {
        if (relu)
            launch_rows(c, v4, (size_t)n_atoms, (size_t)h, k_segment_sum<4, TO, TX, true>,
                        k_segment_sum<1, TO, TX, true>, (TO *)out, in_start, in_edge,
                        (const TX *)x, n_atoms, h, flip);
        else
            launch_rows(c, v4, (size_t)n_atoms, (size_t)h, k_segment_sum<4, TO, TX, false>,
                        k_segment_sum<1, TO, TX, false>, (TO *)out, in_start, in_edge,
                        (const TX *)x, n_atoms, h, flip);
    }));
    LAUNCHED(c, "k_segment_sum");
}

/* S for fused_cuda.cu's message_update: s[v] = sum_{k in in(v)} M[k] of
 * the element type, M = x or max(x, 0) when relu. */
void mp_cu_segment_sum(gpu_ctx *c, float *s, const int32_t *in_start, const int32_t *in_edge,
                       const void *x, mp_stype x_st, int relu, int32_t n_atoms, int h)
{
    segment_sum(c, s, MP_ST_ELEM, in_start, in_edge, x, x_st, 0, relu, n_atoms, h);
}

/* The edge pass out[e] = s[idx[e]] - x[e ^ 1] in its three modes
 * (kernels_rows.cuh: GS_*); dh0, y, scale only for GS_BACKWARD. */
template <int MODE>
static void gather_sub_rev(gpu_ctx *c, void *out, mp_stype out_st, float *dh0, const float *s,
                           const int32_t *idx, const void *x, mp_stype x_st, const void *y,
                           mp_stype y_st, double p, int32_t n_edges, int h)
{
    int v4 = h % 4 == 0 && alv(out, out_st) && al16(dh0) && al16(s) && alv(x, x_st) &&
             alv(y, y_st);
    WITH_T(out_st, TO, WITH_T(x_st, TX, WITH_T(y_st, TY,
        launch_rows(c, v4, (size_t)n_edges, (size_t)h, k_gather_sub_rev<4, TO, TX, TY, MODE>,
                    k_gather_sub_rev<1, TO, TX, TY, MODE>, (TO *)out, dh0, s, idx,
                    (const TX *)x, (const TY *)y, n_edges, h, drop_scale(p), drop_scaled(p)))));
    LAUNCHED(c, "k_gather_sub_rev");
}

/* message as a segment-sum pass into s and a gather pass (any storage
 * types; what plain_ops leaves every message to). */
static void message_two_pass(mp_backend *b, void *msg, mp_stype msg_st, void *s,
                             const int32_t *in_start, const int32_t *in_edge,
                             const int32_t *edge_src, const void *m, mp_stype m_st, int relu_in,
                             int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, s, MP_ST_ELEM, in_start, in_edge, m, m_st, 0, relu_in, n_atoms, h);
    if (n_edges <= 0 || !usable(c))
        return;
    if (relu_in)
        gather_sub_rev<GS_RELU_IN>(c, msg, msg_st, NULL, (const float *)s, edge_src, m, m_st, NULL,
                                   MP_ST_ELEM, 0.0, n_edges, h);
    else
        gather_sub_rev<GS_PLAIN>(c, msg, msg_st, NULL, (const float *)s, edge_src, m, m_st, NULL,
                                 MP_ST_ELEM, 0.0, n_edges, h);
}

/* message per atom in registers (k_message_by_atom: 2 edge-sized passes
 * instead of ~4, the same bits as message_two_pass), any storage types. */
static void cu_message(mp_backend *b, void *msg, mp_stype msg_st, void *s,
                       const int32_t *in_start, const int32_t *in_edge, const int32_t *edge_src,
                       const void *m, mp_stype m_st, int relu_in, int32_t n_atoms,
                       int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    (void)s;
    (void)edge_src;
    if (n_atoms <= 0 || n_edges <= 0 || h <= 0 || !usable(c))
        return;
    const int v4 = h % 4 == 0 && alv(msg, msg_st) && alv(m, m_st);
    const size_t rows = (size_t)n_atoms, cols = (size_t)h;
#define BY_ATOM(RELU)                                                                            \
    launch_rows(c, v4, rows, cols, k_message_by_atom<4, TO, TX, float, RELU, false>,             \
                k_message_by_atom<1, TO, TX, float, RELU, false>, (TO *)msg, (float *)NULL,      \
                in_start, in_edge, (const TX *)m, (const float *)NULL, n_atoms, h, 0, 1.0f, 0)
    WITH_T(msg_st, TO, WITH_T(m_st, TX, {
        if (relu_in)
            BY_ATOM(true);
        else
            BY_ATOM(false);
    }));
#undef BY_ATOM
    LAUNCHED(c, "k_message_by_atom");
}

/* message_backward as a segment-sum pass into ds and an edge pass (what
 * plain_ops leaves it to, for the tests' comparison). */
static void message_backward_two_pass(mp_backend *b, void *dz, mp_stype dz_st, void *dh0,
                                      void *ds, const int32_t *in_start, const int32_t *in_edge,
                                      const int32_t *edge_dst, const void *dmsg,
                                      mp_stype dmsg_st, const void *y, mp_stype y_st, double p,
                                      int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, ds, MP_ST_ELEM, in_start, in_edge, dmsg, dmsg_st, 1, 0, n_atoms, h);
    if (n_edges <= 0 || !usable(c))
        return;
    if (y)
        gather_sub_rev<GS_BACKWARD>(c, dz, dz_st, (float *)dh0, (const float *)ds, edge_dst, dmsg,
                                    dmsg_st, y, y_st, p, n_edges, h);
    else
        gather_sub_rev<GS_PLAIN>(c, dz, dz_st, NULL, (const float *)ds, edge_dst, dmsg, dmsg_st,
                                 NULL, MP_ST_ELEM, 0.0, n_edges, h);
}

/* message_backward per atom in registers (k_message_by_atom with flip 1:
 * ds never stored, each edge-sized row read or written once; the same bits
 * as the two passes). */
static void cu_message_backward(mp_backend *b, void *dz, mp_stype dz_st, void *dh0, void *ds,
                                const int32_t *in_start, const int32_t *in_edge,
                                const int32_t *edge_dst, const void *dmsg, mp_stype dmsg_st,
                                const void *y, mp_stype y_st, double p, int32_t n_atoms,
                                int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (!y != !dh0) {
        record(c, MP_ERR_ARG, __FILE__, __LINE__, "cuda message_backward: y and dh0 go together "
               "(both given: the fused ReLU backward and sum; both NULL: the plain adjoint)");
        return;
    }
    if (!c->by_atom_bw) {
        message_backward_two_pass(b, dz, dz_st, dh0, ds, in_start, in_edge, edge_dst, dmsg,
                                  dmsg_st, y, y_st, p, n_atoms, n_edges, h);
        return;
    }
    if (n_atoms <= 0 || n_edges <= 0)
        return;
    const int v4 = h % 4 == 0 && alv(dz, dz_st) && alv(dmsg, dmsg_st) &&
                   (!y || (al16(dh0) && alv(y, y_st)));
    const float scale = drop_scale(p);
    const int scaled = drop_scaled(p);
    const size_t rows = (size_t)n_atoms, cols = (size_t)h;
#define BY_ATOM(TY, BW)                                                                          \
    launch_rows(c, v4, rows, cols, k_message_by_atom<4, TO, TX, TY, false, BW>,                  \
                k_message_by_atom<1, TO, TX, TY, false, BW>, (TO *)dz, (float *)dh0, in_start,   \
                in_edge, (const TX *)dmsg, (const TY *)y, n_atoms, h, 1, scale, scaled)
    WITH_T(dz_st, TO, WITH_T(dmsg_st, TX, {
        if (y)
            WITH_T(y_st, TY, BY_ATOM(TY, true));
        else
            BY_ATOM(float, false);
    }));
#undef BY_ATOM
    LAUNCHED(c, "k_message_by_atom");
}

static void cu_atom_sum(mp_backend *b, void *a, mp_stype a_st, const int32_t *in_start,
                        const int32_t *in_edge, const void *m, mp_stype m_st, int32_t n_atoms,
                        int h)
{
    gpu_ctx *c = CTX(b);
    if (n_atoms <= 0 || h <= 0 || !usable(c))
        return;
    segment_sum(c, a, a_st, in_start, in_edge, m, m_st, 0, 0, n_atoms, h);
}

/* The gather, the ReLU / dropout backward through y (when y) and the copy
 * for the product (when dmo != dm), in one pass. */
static void cu_atom_sum_backward(mp_backend *b, void *dm, void *dmo, mp_stype dmo_st,
                                 const int32_t *edge_dst, const void *da, const void *y,
                                 mp_stype y_st, double p, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_edges <= 0 || h <= 0 || !usable(c))
        return;
    const int copy = dmo != dm, scaled = drop_scaled(p);
    const float scale = drop_scale(p);
    int v4 = h % 4 == 0 && al16(dm) && al16(da) && alv(y, y_st) && (!copy || alv(dmo, dmo_st));
    const size_t rows = (size_t)n_edges, cols = (size_t)h;
#define GATHER(TY, TO, RELU, COPY)                                                               \
    launch_rows(c, v4, rows, cols, k_gather_rows<4, TY, TO, RELU, COPY>,                         \
                k_gather_rows<1, TY, TO, RELU, COPY>, (float *)dm, (TO *)(copy ? dmo : NULL),   \
                edge_dst, (const float *)da, (const TY *)y, n_edges, h, scale, scaled)
    if (!y && !copy)
        GATHER(float, float, false, false);
    else if (!y)
        WITH_T(dmo_st, TO, GATHER(float, TO, false, true));
    else if (!copy)
        WITH_T(y_st, TY, GATHER(TY, float, true, false));
    else
        WITH_T(y_st, TY, WITH_T(dmo_st, TO, GATHER(TY, TO, true, true)));
#undef GATHER
    LAUNCHED(c, "k_gather_rows");
}

static int agg_code(mp_aggregation agg)
{
    return agg == MP_AGG_MEAN ? 0 : agg == MP_AGG_NORM ? 2 : 1;
}

static void cu_pool(mp_backend *b, void *out, int ldo, const int32_t *mol_atom, const void *x,
                    int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    gpu_ctx *c = CTX(b);
    if (n_mols <= 0 || h <= 0 || !usable(c))
        return;
    int v4 = h % 4 == 0 && al16(out) && al16(x) && ldo % 4 == 0;
    launch_rows(c, v4, (size_t)n_mols, (size_t)h, k_pool<4>, k_pool<1>, (float *)out, ldo,
                mol_atom, (const float *)x, n_mols, h, agg_code(agg), (float)(1.0 / norm));
    LAUNCHED(c, "k_pool");
}

static void cu_pool_backward(mp_backend *b, void *dx, const int32_t *mol_atom, const void *dout,
                             int ldo, int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    gpu_ctx *c = CTX(b);
    if (n_mols <= 0 || h <= 0 || !usable(c))
        return;
    int v4 = h % 4 == 0 && al16(dx) && al16(dout) && ldo % 4 == 0;
    launch_rows(c, v4, (size_t)n_mols, (size_t)h, k_pool_backward<4>, k_pool_backward<1>,
                (float *)dx, mol_atom, (const float *)dout, ldo, n_mols, h, agg_code(agg),
                (float)(1.0 / norm));
    LAUNCHED(c, "k_pool_backward");
}

static void cu_edge_embed_backward(mp_backend *b, void *da, void *dwb, const int32_t *in_start,
                                   const int32_t *in_edge, const int8_t *bond_hot,
                                   const void *dh0, int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, da, MP_ST_ELEM, in_start, in_edge, dh0, MP_ST_ELEM, 1, 0, n_atoms, h);
    if (n_edges > 0 && usable(c))
        mp_cu_bond_scatter(c, (float *)dwb, bond_hot, (const float *)dh0, n_edges, h);
}

/* ===================================================================== */
/* Registration                                                           */
/* ===================================================================== */

void mp_cu_rows_ops(mp_backend *b)
{
    b->copy2d = cu_copy2d;
    b->relu_dropout = cu_relu_dropout;
    b->relu_dropout_backward = cu_relu_dropout_backward;
    b->dropout = cu_dropout;
    b->atom_embed = cu_atom_embed;
    b->edge_embed = cu_edge_embed;
    b->edge_embed_backward = cu_edge_embed_backward;
    b->message = cu_message;
    b->message_backward = cu_message_backward;
    b->atom_sum = cu_atom_sum;
    b->atom_sum_backward = cu_atom_sum_backward;
    b->pool = cu_pool;
    b->pool_backward = cu_pool_backward;
}

/* edge_embed with m0 as edge_embed then a ReLU pass (the unfused pair). */
static void edge_embed_two_pass(mp_backend *b, void *h0, void *m0, mp_stype st,
                                const int32_t *edge_src, const int8_t *bond_hot, const void *a,
                                const void *wb, int32_t n_edges, int h)
{
    cu_edge_embed(b, h0, NULL, st, edge_src, bond_hot, a, wb, n_edges, h);
    if (m0 && n_edges > 0 && h > 0)
        cu_relu_dropout(b, m0, h0, st, (size_t)n_edges * h, 0.0, mp_key_host(0));
}

extern "C" void mp_backend_cuda_plain_ops(mp_backend *b)
{
    if (!mp_cu_ctx(b))
        return;
    b->message = message_two_pass;
    b->message_backward = message_backward_two_pass;
    b->edge_embed = edge_embed_two_pass;
    b->message_update = NULL;
}
