/*
 * ops_cuda_infer.cu - fused ops of the cuda backend that serve the forward
 * pass (and so inference above all), kept out of ops_cuda.cu (at its size
 * limit).  Registered on the backend by mp_cu_infer_ops, which
 * mp_backend_cuda_open calls.
 *
 *   edge_embed_relu   H0 = W_i [x_u ; b_uv] per edge and M_0 = ReLU(H0) in
 *                     one pass: the unfused pair wrote H0, then read it back
 *                     to write M_0 (3 edge-sized passes become 2).
 *   message_direct    msg[e] = S[src e] - M[rev e] per atom: S[v] summed from
 *                     the rows entering v, kept in registers, then written
 *                     as S - M[k] to each edge k ^ 1 leaving v, instead of a
 *                     segment-sum pass writing S and a gather pass reading
 *                     it back: 2 edge-sized passes (read M, write msg)
 *                     instead of ~4.
 *
 * Same arithmetic, in the same order, as the ops they replace (ops_cuda.cu's
 * k_edge_embed and k_relu_dropout with p = 0; k_segment_sum then
 * k_gather_sub_rev), so the same bits.  mp_backend_cuda_plain_ops (gpu.h)
 * takes them off a backend again (for comparisons).
 *
 * Also here: mp_cu_lt_heuristic, the per-shape memory of cuBLASLt's
 * algorithm choice that ops_cuda.cu's gemm_res_relu asks through.
 */
#include "gpu/cuda_ctx.cuh"

#include <string.h>

/* ===================================================================== */
/* Kernels                                                                */
/* ===================================================================== */

/* V consecutive floats (V = 4: one 16-byte access; p 16-byte aligned). */
template <int V> struct vf {
    float v[V];
};

template <int V> static __device__ __forceinline__ vf<V> ld(const float *p)
{
    vf<V> r;
    if constexpr (V == 4) {
        float4 t = *reinterpret_cast<const float4 *>(p);
        r.v[0] = t.x;
        r.v[1] = t.y;
        r.v[2] = t.z;
        r.v[3] = t.w;
    } else {
        r.v[0] = *p;
    }
    return r;
}

template <int V> static __device__ __forceinline__ void st(float *p, const vf<V> &r)
{
    if constexpr (V == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    else
        *p = r.v[0];
}

/* h0[e] = a[src[e]] + the bond's hot rows of wb (in slot order, as
 * k_edge_embed); m0[e] = max(h0[e], 0) (as k_relu_dropout with thr 0). */
template <int V>
__global__ void k_edge_embed_relu(float *__restrict__ h0, float *__restrict__ m0,
                                  const int32_t *__restrict__ edge_src,
                                  const int8_t *__restrict__ bond_hot,
                                  const float *__restrict__ a, const float *__restrict__ wb,
                                  int32_t n_edges, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        /* 32-bit division whenever the index fits (every practical size) */
        size_t e;
        unsigned jv;
        if (t <= 0xffffffffu) {
            unsigned tt = (unsigned)t, r = tt / nv;
            jv = tt - r * nv;
            e = r;
        } else {
            e = t / nv;
            jv = (unsigned)(t - e * nv);
        }
        const int j = (int)jv * V;
        vf<V> acc = ld<V>(a + (size_t)edge_src[e] * h + j);
#pragma unroll
        for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
            int s = bond_hot[(e >> 1) * MP_BOND_MAX_HOT + q];
            if (s >= 0) {
                vf<V> w = ld<V>(wb + (size_t)s * h + j);
#pragma unroll
                for (int u = 0; u < V; u++)
                    acc.v[u] += w.v[u];
            }
        }
        st<V>(h0 + e * h + j, acc);
#pragma unroll
        for (int u = 0; u < V; u++)
            acc.v[u] = acc.v[u] > 0.0f ? acc.v[u] : 0.0f;
        st<V>(m0 + e * h + j, acc);
    }
}

/* One thread per (atom v, V columns): S = the rows entering v, summed in
 * CSR order from 0 (as k_segment_sum), then for each entering edge k the
 * edge leaving v back along it, k ^ 1, gets msg[k ^ 1] = S - m[k] (as
 * k_gather_sub_rev: src[k ^ 1] = v and (k ^ 1) ^ 1 = k).  Every row of m is
 * read once and every row of msg written once (each edge leaves exactly one
 * atom); the first MD_CACHE entering rows stay in registers between the two
 * loops, more are read again.  RELU reads m through max(., 0). */
#define MD_CACHE 6

template <bool RELU> static __device__ __forceinline__ float rl(float x)
{
    return RELU ? (x > 0.0f ? x : 0.0f) : x;
}

template <int V, bool RELU>
__global__ void k_message_by_atom(float *__restrict__ msg, const int32_t *__restrict__ in_start,
                                  const int32_t *__restrict__ in_edge,
                                  const float *__restrict__ m, int32_t n_atoms, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_atoms * nv;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        size_t v;
        unsigned jv;
        if (t <= 0xffffffffu) {
            unsigned tt = (unsigned)t, r = tt / nv;
            jv = tt - r * nv;
            v = r;
        } else {
            v = t / nv;
            jv = (unsigned)(t - v * nv);
        }
        const int j = (int)jv * V;
        const int32_t k0 = in_start[v], deg = in_start[v + 1] - k0;
        vf<V> acc, keep[MD_CACHE];
#pragma unroll
        for (int u = 0; u < V; u++)
            acc.v[u] = 0.0f;
#pragma unroll
        for (int q = 0; q < MD_CACHE; q++) {
            if (q < deg) {
                keep[q] = ld<V>(m + (size_t)in_edge[k0 + q] * h + j);
#pragma unroll
                for (int u = 0; u < V; u++) {
                    keep[q].v[u] = rl<RELU>(keep[q].v[u]);
                    acc.v[u] += keep[q].v[u];
                }
            }
        }
        for (int32_t q = MD_CACHE; q < deg; q++) {
            vf<V> x = ld<V>(m + (size_t)in_edge[k0 + q] * h + j);
#pragma unroll
            for (int u = 0; u < V; u++)
                acc.v[u] += rl<RELU>(x.v[u]);
        }
#pragma unroll
        for (int q = 0; q < MD_CACHE; q++) {
            if (q < deg) {
                const int32_t k = in_edge[k0 + q];
                vf<V> o;
#pragma unroll
                for (int u = 0; u < V; u++)
                    o.v[u] = acc.v[u] - keep[q].v[u];
                st<V>(msg + (size_t)(k ^ 1) * h + j, o);
            }
        }
        for (int32_t q = MD_CACHE; q < deg; q++) {
            const int32_t k = in_edge[k0 + q];
            vf<V> x = ld<V>(m + (size_t)k * h + j), o;
#pragma unroll
            for (int u = 0; u < V; u++)
                o.v[u] = acc.v[u] - rl<RELU>(x.v[u]);
            st<V>(msg + (size_t)(k ^ 1) * h + j, o);
        }
    }
}

/* ===================================================================== */
/* Ops                                                                    */
/* ===================================================================== */

static void cu_edge_embed_relu(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                               const int8_t *bond_hot, const void *a, const void *wb,
                               int32_t n_edges, int h)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c || n_edges <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, h0, m0, a, wb), n_edges, h, k_edge_embed_relu, (float *)h0,
                (float *)m0, edge_src, bond_hot, (const float *)a, (const float *)wb, n_edges, h);
    LAUNCHED(c, "k_edge_embed_relu");
}

static void cu_message_direct(mp_backend *b, void *msg, const int32_t *in_start,
                              const int32_t *in_edge, const int32_t *edge_src, const void *m,
                              int relu_in, int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c || n_atoms <= 0 || n_edges <= 0 || h <= 0 || !usable(c))
        return;
    const int v4 = vec4(h, msg, m);
    size_t items = (size_t)n_atoms * (size_t)(h / (v4 ? 4 : 1));
    unsigned grid = grid_for(c, items, THREADS);
    if (v4 && relu_in)
        k_message_by_atom<4, true><<<grid, THREADS, 0, c->stream>>>(
            (float *)msg, in_start, in_edge, (const float *)m, n_atoms, h);
    else if (v4)
        k_message_by_atom<4, false><<<grid, THREADS, 0, c->stream>>>(
            (float *)msg, in_start, in_edge, (const float *)m, n_atoms, h);
    else if (relu_in)
        k_message_by_atom<1, true><<<grid, THREADS, 0, c->stream>>>(
            (float *)msg, in_start, in_edge, (const float *)m, n_atoms, h);
    else
        k_message_by_atom<1, false><<<grid, THREADS, 0, c->stream>>>(
            (float *)msg, in_start, in_edge, (const float *)m, n_atoms, h);
    LAUNCHED(c, "k_message_by_atom");
}

int mp_cu_lt_heuristic(gpu_ctx *c, const int key[LT_KEY], cublasLtMatmulDesc_t op,
                       cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                       cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                       cublasLtMatmulPreference_t pref, cublasLtMatmulHeuristicResult_t *res)
{
    uint32_t hsh = 2166136261u;                /* FNV-1a over the key */
    for (int i = 0; i < LT_KEY; i++) {
        hsh ^= (uint32_t)key[i];
        hsh *= 16777619u;
    }
    lt_cached *e = &c->lt_cache[hsh % LT_CACHE];
    if (e->valid && !memcmp(e->key, key, sizeof e->key)) {
        *res = e->res;
        return e->found;
    }
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, lc, ld, pref, 1, res, &found) !=
        CUBLAS_STATUS_SUCCESS)
        return 0;                              /* not remembered: may be transient */
    e->valid = 1;
    e->found = found > 0;
    memcpy(e->key, key, sizeof e->key);
    e->res = *res;
    return e->found;
}

void mp_cu_infer_ops(mp_backend *b)
{
    b->edge_embed_relu = cu_edge_embed_relu;
    b->message_direct = cu_message_direct;
}

extern "C" void mp_backend_cuda_plain_ops(mp_backend *b)
{
    if (!mp_cu_ctx(b))
        return;
    b->edge_embed_relu = NULL;
    b->message_direct = NULL;
}
