/*
 * cpu_graph.c - the graph ops of the cpu backend (ops.h): the one-hot
 * embeddings and their scatters, the CSR segment sums of the D-MPNN message
 * and readout, pooling, and the fused forms the seam asks for (H0 with M_0,
 * the ReLU backward after a gather, the sum into dH0), composed of the same
 * loops in the same order as the unfused ops, so the same bits.  Threads and
 * determinism: cpu_impl.h.
 */
#include "backend/cpu_impl.h"

#include <stdlib.h>

KERNEL_EXACT static void atom_embed_rows(float *out, const int16_t *hot, const float *mass,
                                         const float *w, const float *bias, const float *wm,
                                         size_t a, size_t z, int h)
{
    for (size_t v = a; v < z; v++) {
        float *o = out + v * h;
        if (bias)
            memcpy(o, bias, (size_t)h * sizeof(float));
        else
            memset(o, 0, (size_t)h * sizeof(float));
        const int16_t *hv = hot + v * MP_ATOM_MAX_HOT;
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
            if (hv[q] >= 0)
                row_add(o, w + (size_t)hv[q] * h, h);
        row_axpy(o, mass[v], wm, h);
    }
}

static void cpu_atom_embed(mp_backend *b, void *outv, const int16_t *hot, const float *mass,
                           const void *wv, const void *biasv, int32_t n_atoms, int h,
                           int mass_row)
{
    float *out = outv;
    const float *w = wv, *bias = biasv, *wm = w + (size_t)mass_row * h;
    int nt = threads_for((size_t)n_atoms * h * 4);
    PARALLEL_RANGE((size_t)n_atoms, 1, atom_embed_rows(out, hot, mass, w, bias, wm, a, z, h));
}

/*
 * The scatters of the one-hot backward (dW[s] += rows that hit slot s) are
 * split by weight rows, not columns: a column split of a 300-float row puts
 * both threads on one cache line of every row they touch.  A slot index
 * (counting sort: for each slot, the input rows that hit it, ascending) lets
 * each thread own whole rows and sum them in ascending input order, the same
 * order as a plain sequential scatter, so any thread count gives the same
 * bits.  The index is built per call (a few KB); if it cannot be allocated
 * the column-split loop below does the job.
 */
typedef struct {
    int      n_slots;       /* rows of the index (max slot + 1)           */
    int32_t *start;         /* n_slots + 1                                */
    int32_t *list;          /* input rows, grouped by slot, ascending     */
} slot_index;

static void slot_index_free(slot_index *ix)
{
    mp_free(ix->start);
    mp_free(ix->list);
}

/* Slot q of input row i: slots are int16 (atoms) or int8 (bonds), -1 = none. */
static inline int slot_at(const void *slots, int is16, size_t k)
{
    return is16 ? ((const int16_t *)slots)[k] : ((const int8_t *)slots)[k];
}

/* Builds the index of slots[i * width + q] over n_rows input rows.  Returns
 * 0 (and leaves ix to slot_index_free) when out of memory. */
static int slot_index_build(slot_index *ix, const void *slots, int is16, int width, int32_t n_rows)
{
    size_t tot = (size_t)n_rows * (size_t)width;
    int max = -1;
    for (size_t k = 0; k < tot; k++)
        if (slot_at(slots, is16, k) > max)
            max = slot_at(slots, is16, k);
    ix->n_slots = max + 1;
    ix->start = mp_calloc((size_t)ix->n_slots + 1, sizeof(int32_t));
    ix->list = mp_malloc((tot ? tot : 1) * sizeof(int32_t));
    int32_t *fill = mp_malloc(((size_t)ix->n_slots + 1) * sizeof(int32_t));
    if (!ix->start || !ix->list || !fill) {
        mp_free(fill);
        return 0;
    }
    for (size_t k = 0; k < tot; k++)
        if (slot_at(slots, is16, k) >= 0)
            ix->start[slot_at(slots, is16, k) + 1]++;
    for (int sl = 0; sl < ix->n_slots; sl++)
        ix->start[sl + 1] += ix->start[sl];
    memcpy(fill, ix->start, (size_t)ix->n_slots * sizeof(int32_t));
    for (size_t k = 0; k < tot; k++) {
        int sl = slot_at(slots, is16, k);
        if (sl >= 0)
            ix->list[fill[sl]++] = (int32_t)(k / (size_t)width);
    }
    mp_free(fill);
    return 1;
}

/* This thread's rows [*r0, *r1) of n_rows whose cumulative work (cum[r],
 * cum[n_rows] = total) starts inside its equal share of the total. */
static void my_work_rows(const int64_t *cum, int n_rows, int *r0, int *r1)
{
    int64_t nt = thread_count(), t = thread_id(), total = cum[n_rows];
    int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
    int a = 0, z;
    while (a < n_rows && cum[a] < lo)
        a++;
    z = a;
    while (z < n_rows && (cum[z] < hi || t == nt - 1))
        z++;
    *r0 = a;
    *r1 = z;
}

/* Rows [r0, r1) of scatter_by_slot's rows (slots, then the extra row). */
KERNEL_EXACT static void scatter_rows(float *dw, const slot_index *ix, const float *g, int h,
                                      const float *scale, int extra_row, int32_t n_in, int r0,
                                      int r1)
{
    for (int r = r0; r < r1; r++) {
        if (r < ix->n_slots) {
            float *dst = dw + (size_t)r * h;
            for (int32_t k = ix->start[r]; k < ix->start[r + 1]; k++)
                row_add(dst, g + (size_t)ix->list[k] * h, h);
        } else {
            float *dst = dw + (size_t)extra_row * h;
            for (int32_t i = 0; i < n_in; i++)
                row_axpy(dst, scale[i], g + (size_t)i * h, h);
        }
    }
}

/* dw[s] += sum_{i in ix slot s} g[input row i] for every slot, plus, when
 * scale is given, dw[extra_row] += sum_i scale[i] g[i] over all n_in rows
 * (the mass row).  Rows are shared out by work. */
static void scatter_by_slot(float *dw, const slot_index *ix, const float *g, int h,
                            const float *scale, int extra_row, int32_t n_in, int nt)
{
    int n_rows = ix->n_slots + (scale ? 1 : 0);
    int64_t cum_local[64], *cum = n_rows < 64 ? cum_local : mp_malloc(((size_t)n_rows + 1) * sizeof *cum);
    if (!cum)
        nt = 1;   /* no memory for the split: one thread does every row */
    int64_t c = 0;
    for (int r = 0; r < n_rows && cum; r++) {
        cum[r] = c;
        c += r < ix->n_slots ? ix->start[r + 1] - ix->start[r] : n_in;
    }
    if (cum)
        cum[n_rows] = c;
#define SCATTER_ROWS(r0, r1) \
    scatter_rows(dw, ix, g, h, scale, extra_row, n_in, (r0), (r1))
    if (nt <= 1) {
        SCATTER_ROWS(0, n_rows);
    } else {
#pragma omp parallel num_threads(nt)
        {
            int r0, r1;
            my_work_rows(cum, n_rows, &r0, &r1);
            SCATTER_ROWS(r0, r1);
        }
    }
#undef SCATTER_ROWS
    if (cum != cum_local)
        mp_free(cum);
}

static void cpu_atom_embed_backward(mp_backend *b, void *dwv, const int16_t *hot,
                                    const float *mass, const void *doutv, int32_t n_atoms,
                                    int h, int mass_row)
{
    float *dw = dwv;
    const float *dout = doutv;
    int nt = threads_for((size_t)n_atoms * h * 4);
    slot_index ix = { 0, NULL, NULL };
    if (slot_index_build(&ix, hot, 1, MP_ATOM_MAX_HOT, n_atoms)) {
        scatter_by_slot(dw, &ix, dout, h, mass, mass_row, n_atoms, nt);
        slot_index_free(&ix);
        return;
    }
    slot_index_free(&ix);
    PARALLEL_COLUMNS(h,
        float *dwm = dw + (size_t)mass_row * h;
        for (int32_t v = 0; v < n_atoms && c0 < c1; v++) {
            const float *g = dout + (size_t)v * h;
            const int16_t *hv = hot + (size_t)v * MP_ATOM_MAX_HOT;
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
                if (hv[q] >= 0)
                    row_add(dw + (size_t)hv[q] * h + c0, g + c0, c1 - c0);
            row_axpy(dwm + c0, mass[v], g + c0, c1 - c0);
        });
}

static void cpu_edge_embed(mp_backend *b, void *h0v, void *m0, mp_stype st,
                           const int32_t *edge_src, const int8_t *bond_hot, const void *av,
                           const void *wbv, int32_t n_edges, int h)
{
    if (st != MP_ST_ELEM) {
        mp_cpu_bf16_edge_embed(h0v, m0, st, edge_src, bond_hot, av, wbv, n_edges, h);
        return;
    }
    float *h0 = h0v;
    const float *at = av, *wb = wbv;
    int nt = threads_for((size_t)n_edges * h * 2);
    PARALLEL_RANGE((size_t)n_edges, 2,
        for (size_t e = a; e < z; e++) {
            float *o = h0 + e * h;
            memcpy(o, at + (size_t)edge_src[e] * h, (size_t)h * sizeof(float));
            const int8_t *bh = bond_hot + (e >> 1) * MP_BOND_MAX_HOT;
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                if (bh[q] >= 0)
                    row_add(o, wb + (size_t)bh[q] * h, h);
        });
    /* M_0 = ReLU(H0): the plain ReLU pass over what was just written */
    if (m0 && n_edges > 0 && h > 0)
        mp_cpu_relu_dropout(m0, h0, (size_t)n_edges * h, 0.0, 0);
}

/* o = sum over the CSR segment of v of the rows x[in_edge[k] ^ flip]. */
static inline void csr_row_sum(float *restrict o, const int32_t *in_start,
                               const int32_t *in_edge, const float *x, size_t v,
                               int32_t flip, int h)
{
    int32_t k0 = in_start[v], k1 = in_start[v + 1];
    if (k0 == k1) {
        memset(o, 0, (size_t)h * sizeof(float));
        return;
    }
    memcpy(o, x + (size_t)(in_edge[k0] ^ flip) * h, (size_t)h * sizeof(float));
    for (int32_t k = k0 + 1; k < k1; k++)
        row_add(o, x + (size_t)(in_edge[k] ^ flip) * h, h);
}

/* The same through max(., 0) (message's relu_in): o = sum of ReLU(x rows). */
static inline void row_relu(float *restrict y, const float *restrict x, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] = x[j] > 0 ? x[j] : 0.0f;
}

static inline void row_add_relu(float *restrict y, const float *restrict x, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] += x[j] > 0 ? x[j] : 0.0f;
}

static inline void row_sub_relu(float *restrict y, const float *restrict x,
                                const float *restrict r, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] = x[j] - (r[j] > 0 ? r[j] : 0.0f);
}

static inline void csr_row_sum_relu(float *restrict o, const int32_t *in_start,
                                    const int32_t *in_edge, const float *x, size_t v, int h)
{
    int32_t k0 = in_start[v], k1 = in_start[v + 1];
    if (k0 == k1) {
        memset(o, 0, (size_t)h * sizeof(float));
        return;
    }
    row_relu(o, x + (size_t)in_edge[k0] * h, h);
    for (int32_t k = k0 + 1; k < k1; k++)
        row_add_relu(o, x + (size_t)in_edge[k] * h, h);
}

static void cpu_edge_embed_backward(mp_backend *b, void *dav, void *dwbv,
                                    const int32_t *in_start, const int32_t *in_edge,
                                    const int8_t *bond_hot, const void *dh0v,
                                    int32_t n_atoms, int32_t n_edges, int h)
{
    float *da = dav, *dwb = dwbv;
    const float *dh0 = dh0v;
    int nt = threads_for((size_t)n_edges * h * 2);
    PARALLEL_RANGE((size_t)n_atoms, 1,
        for (size_t v = a; v < z; v++)
            csr_row_sum(da + v * h, in_start, in_edge, dh0, v, 1, h));
    /* Bond rows: index the bonds by slot, then each edge of a bond adds its
     * row (edges 2k and 2k+1 in that order, as a sequential scatter would). */
    slot_index ix = { 0, NULL, NULL };
    if (slot_index_build(&ix, bond_hot, 0, MP_BOND_MAX_HOT, n_edges / 2)) {
        int32_t *elist = mp_malloc(((size_t)ix.start[ix.n_slots] * 2 + 1) * sizeof *elist);
        int32_t *estart = mp_malloc(((size_t)ix.n_slots + 1) * sizeof *estart);
        if (elist && estart) {
            for (int sl = 0; sl <= ix.n_slots; sl++)
                estart[sl] = 2 * ix.start[sl];
            for (int32_t k = 0; k < ix.start[ix.n_slots]; k++) {
                elist[2 * k] = 2 * ix.list[k];
                elist[2 * k + 1] = 2 * ix.list[k] + 1;
            }
            slot_index ex = { ix.n_slots, estart, elist };
            scatter_by_slot(dwb, &ex, dh0, h, NULL, 0, n_edges, nt);
            slot_index_free(&ex);
            slot_index_free(&ix);
            return;
        }
        mp_free(elist);
        mp_free(estart);
    }
    slot_index_free(&ix);
    PARALLEL_COLUMNS(h,
        for (int32_t e = 0; e < n_edges && c0 < c1; e++) {
            const int8_t *bh = bond_hot + (size_t)(e >> 1) * MP_BOND_MAX_HOT;
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                if (bh[q] >= 0)
                    row_add(dwb + (size_t)bh[q] * h + c0, dh0 + (size_t)e * h + c0, c1 - c0);
        });
}

static void cpu_atom_sum(mp_backend *b, void *av, mp_stype a_st, const int32_t *in_start,
                         const int32_t *in_edge, const void *mv, mp_stype m_st, int32_t n_atoms,
                         int h)
{
    if (a_st != MP_ST_ELEM || m_st != MP_ST_ELEM) {
        mp_cpu_bf16_atom_sum(av, a_st, in_start, in_edge, mv, m_st, n_atoms, h);
        return;
    }
    float *out = av;
    const float *m = mv;
    int nt = threads_for((size_t)n_atoms * h * 2);
    PARALLEL_RANGE((size_t)n_atoms, 1,
        for (size_t v = a; v < z; v++)
            csr_row_sum(out + v * h, in_start, in_edge, m, v, 0, h));
}

/* The two phases of message / message_backward: per-atom sums, then per
 * edge "sum at one end minus the reverse edge" (relu: the rows of m read
 * through max(., 0), message's relu_in). */
KERNEL static void msg_atoms(float *s, const int32_t *in_start, const int32_t *in_edge, const float *m,
                      int32_t flip, int relu, size_t a, size_t z, int h)
{
    for (size_t v = a; v < z; v++) {
        if (relu)
            csr_row_sum_relu(s + v * h, in_start, in_edge, m, v, h);
        else
            csr_row_sum(s + v * h, in_start, in_edge, m, v, flip, h);
    }
}

KERNEL static void msg_edges(float *out, const float *s, const int32_t *end, const float *m,
                             int relu, size_t a, size_t z, int h)
{
    for (size_t e = a; e < z; e++) {
        if (relu)
            row_sub_relu(out + e * h, s + (size_t)end[e] * h, m + (e ^ 1) * h, h);
        else
            row_sub(out + e * h, s + (size_t)end[e] * h, m + (e ^ 1) * h, h);
    }
}

static void message_both(float *out, float *s, const int32_t *in_start, const int32_t *in_edge,
                         const int32_t *end, const float *m, int32_t flip, int relu,
                         int32_t n_atoms, int32_t n_edges, int h)
{
    int nt = threads_for((size_t)n_edges * h * 2);
    if (nt <= 1) {
        msg_atoms(s, in_start, in_edge, m, flip, relu, 0, (size_t)n_atoms, h);
        msg_edges(out, s, end, m, relu, 0, (size_t)n_edges, h);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t a, z;
        my_range((size_t)n_atoms, 1, &a, &z);
        msg_atoms(s, in_start, in_edge, m, flip, relu, a, z, h);
#pragma omp barrier
        my_range((size_t)n_edges, 2, &a, &z);
        msg_edges(out, s, end, m, relu, a, z, h);
    }
}

static void cpu_message(mp_backend *b, void *msg, mp_stype msg_st, void *s,
                        const int32_t *in_start, const int32_t *in_edge,
                        const int32_t *edge_src, const void *m, mp_stype m_st, int relu_in,
                        int32_t n_atoms, int32_t n_edges, int h)
{
    if (msg_st != MP_ST_ELEM || m_st != MP_ST_ELEM) {
        mp_cpu_bf16_message(msg, msg_st, s, in_start, in_edge, edge_src, m, m_st, relu_in,
                            n_atoms, n_edges, h);
        return;
    }
    message_both(msg, s, in_start, in_edge, edge_src, m, 0, relu_in != 0, n_atoms, n_edges, h);
}

/* The adjoint, then (y given) the ReLU / dropout backward in place and the
 * sum into dh0: the three unfused passes, in their order. */
static void cpu_message_backward(mp_backend *b, void *dz, mp_stype dz_st, void *dh0, void *ds,
                                 const int32_t *in_start, const int32_t *in_edge,
                                 const int32_t *edge_dst, const void *dmsg, mp_stype dmsg_st,
                                 const void *y, mp_stype y_st, double p, int32_t n_atoms,
                                 int32_t n_edges, int h)
{
    if (dz_st != MP_ST_ELEM || dmsg_st != MP_ST_ELEM || (y && y_st != MP_ST_ELEM)) {
        mp_cpu_bf16_message_backward(dz, dz_st, dh0, ds, in_start, in_edge, edge_dst, dmsg,
                                     dmsg_st, y, y_st, p, n_atoms, n_edges, h);
        return;
    }
    message_both(dz, ds, in_start, in_edge, edge_dst, dmsg, 1, 0, n_atoms, n_edges, h);
    if (!y || n_edges <= 0 || h <= 0)
        return;
    CPU_ELEM(y_st);
    const size_t n = (size_t)n_edges * h;
    mp_cpu_relu_backward(dz, y, dz, n, p);
    if (dh0)
        mp_cpu_add(dh0, dz, n);
}

/* The gather, then (y given) the ReLU / dropout backward in place, then the
 * copy for the product (dmo != dm). */
static void cpu_atom_sum_backward(mp_backend *b, void *dmv, void *dmo, mp_stype dmo_st,
                                  const int32_t *edge_dst, const void *dav, const void *y,
                                  mp_stype y_st, double p, int32_t n_edges, int h)
{
    if ((y && y_st != MP_ST_ELEM) || (dmo != dmv && dmo_st != MP_ST_ELEM)) {
        mp_cpu_bf16_atom_sum_backward(dmv, dmo, dmo_st, edge_dst, dav, y, y_st, p, n_edges, h);
        return;
    }
    float *dm = dmv;
    const float *da = dav;
    const size_t n = n_edges > 0 && h > 0 ? (size_t)n_edges * h : 0;
    int nt = threads_for(n);
    PARALLEL_RANGE((size_t)n_edges, 1,
        for (size_t e = a; e < z; e++)
            memcpy(dm + e * h, da + (size_t)edge_dst[e] * h, (size_t)h * sizeof(float)));
    if (!n)
        return;
    if (y) {
        CPU_ELEM(y_st);
        mp_cpu_relu_backward(dm, y, dm, n, p);
    }
    if (dmo != dm) {
        CPU_ELEM(dmo_st);
        memcpy(dmo, dm, n * sizeof(float));
    }
}

KERNEL static void pool_one(float *restrict o, const float *x, int32_t a0, int32_t a1, int h,
                     mp_aggregation agg, double norm)
{
    memset(o, 0, (size_t)h * sizeof(float));
    for (int32_t v = a0; v < a1; v++)
        row_add(o, x + (size_t)v * h, h);
    if (a1 == a0 || agg == MP_AGG_SUM)
        return;
    /* mean divides, as torch's sum / a_size does, rather than multiplying */
    float d = agg == MP_AGG_MEAN ? (float)(a1 - a0) : (float)norm;
#pragma omp simd
    for (int j = 0; j < h; j++)
        o[j] /= d;
}

static void cpu_pool(mp_backend *b, void *outv, int ldo, const int32_t *mol_atom,
                     const void *xv, int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    float *out = outv;
    const float *x = xv;
    int nt = threads_for((size_t)mol_atom[n_mols] * h);
    PARALLEL_RANGE((size_t)n_mols, 1,
        for (size_t i = a; i < z; i++)
            pool_one(out + i * ldo, x, mol_atom[i], mol_atom[i + 1], h, agg, norm));
}

KERNEL static void pool_back_one(float *dx, const float *restrict g, int32_t a0, int32_t a1, int h,
                          mp_aggregation agg, double norm)
{
    if (a1 == a0)
        return;
    float *restrict o = dx + (size_t)a0 * h;
    if (agg == MP_AGG_SUM) {
        memcpy(o, g, (size_t)h * sizeof(float));
    } else {
        float d = agg == MP_AGG_MEAN ? (float)(a1 - a0) : (float)norm;
#pragma omp simd
        for (int j = 0; j < h; j++)
            o[j] = g[j] / d;
    }
    for (int32_t v = a0 + 1; v < a1; v++)
        memcpy(dx + (size_t)v * h, o, (size_t)h * sizeof(float));
}

static void cpu_pool_backward(mp_backend *b, void *dxv, const int32_t *mol_atom,
                              const void *doutv, int ldo, int32_t n_mols, int h,
                              mp_aggregation agg, double norm)
{
    float *dx = dxv;
    const float *dout = doutv;
    int nt = threads_for((size_t)mol_atom[n_mols] * h);
    PARALLEL_RANGE((size_t)n_mols, 1,
        for (size_t i = a; i < z; i++)
            pool_back_one(dx, dout + i * ldo, mol_atom[i], mol_atom[i + 1], h, agg, norm));
}

void mp_cpu_graph_ops(mp_backend *b)
{
    b->atom_embed = cpu_atom_embed;
    b->atom_embed_backward = cpu_atom_embed_backward;
    b->edge_embed = cpu_edge_embed;
    b->edge_embed_backward = cpu_edge_embed_backward;
    b->message = cpu_message;
    b->message_backward = cpu_message_backward;
    b->atom_sum = cpu_atom_sum;
    b->atom_sum_backward = cpu_atom_sum_backward;
    b->pool = cpu_pool;
    b->pool_backward = cpu_pool_backward;
}
