/*
 * ops_cuda_infer.cu - fused ops of the cuda backend that serve the forward
 * pass (and so inference above all), kept out of ops_cuda.cu (at its size
 * limit).  Registered on the backend by mp_cu_infer_ops, which
 * mp_backend_cuda_open calls.
 *
 *   edge_embed_relu   H0 = W_i [x_u ; b_uv] per edge and M_0 = ReLU(H0) in
 *                     one pass: the unfused pair wrote H0, then read it back
 *                     to write M_0 (3 edge-sized passes become 2).
 *   message_direct    msg[e] = S[src e] - M[rev e] with S[v] summed per edge
 *                     from the ~2 rows entering src e (which the edges of one
 *                     atom share, in cache), instead of a segment-sum pass
 *                     writing S and a gather pass reading it back: about 2
 *                     edge-sized passes instead of ~4.
 *
 * Same arithmetic, in the same order, as the ops they replace (ops_cuda.cu's
 * k_edge_embed and k_relu_dropout with p = 0; k_segment_sum then
 * k_gather_sub_rev), so the same bits.
 */
#include "gpu/cuda_ctx.cuh"

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

/* msg[e] = (sum over k in in(src[e]) of m[in_edge[k]], from 0 in CSR
 * order, as k_segment_sum) - m[e ^ 1] (as k_gather_sub_rev). */
template <int V>
__global__ void k_message_direct(float *__restrict__ msg, const int32_t *__restrict__ in_start,
                                 const int32_t *__restrict__ in_edge,
                                 const int32_t *__restrict__ edge_src,
                                 const float *__restrict__ m, int32_t n_edges, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
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
        const int32_t v = edge_src[e];
        const int32_t k0 = in_start[v], k1 = in_start[v + 1];
        vf<V> acc;
#pragma unroll
        for (int u = 0; u < V; u++)
            acc.v[u] = 0.0f;
#pragma unroll 4
        for (int32_t k = k0; k < k1; k++) {
            vf<V> x = ld<V>(m + (size_t)in_edge[k] * h + j);
#pragma unroll
            for (int u = 0; u < V; u++)
                acc.v[u] += x.v[u];
        }
        vf<V> r = ld<V>(m + (e ^ 1) * h + j);
#pragma unroll
        for (int u = 0; u < V; u++)
            acc.v[u] -= r.v[u];
        st<V>(msg + e * h + j, acc);
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
                              int32_t n_edges, int h)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c || n_edges <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, msg, m), n_edges, h, k_message_direct, (float *)msg, in_start,
                in_edge, edge_src, (const float *)m, n_edges, h);
    LAUNCHED(c, "k_message_direct");
}

void mp_cu_infer_ops(mp_backend *b)
{
    b->edge_embed_relu = cu_edge_embed_relu;
    b->message_direct = cu_message_direct;
}
