/*
 * kernels_rows.cuh - the memory-bound kernels of the CUDA backend (included
 * by ops_cuda.cu and ops_cuda_bf16.cu; templates and static kernels only, so
 * each file has its own copy): elementwise passes, row gathers, CSR segment sums
 * and pooling, with one thread per (row, V consecutive columns).
 *
 * V = 4 moves 16 bytes per access (float4) and is used when the row width is
 * a multiple of 4 and every base pointer is 16-byte aligned (cudaMalloc
 * buffers are; a sub-block of the parameter block may not be); V = 1 is the
 * same code one float at a time.  Every output element is still one fixed
 * sequence of float operations in the same order as the plain loop (ops_ref.c
 * order), whatever V and the launch shape: bits are the same run to run and
 * the same for V = 1 and V = 4.
 *
 * Why one thread per element group and not one warp per row: with a warp per
 * row each lane walked h / 32 columns one after the other, and for the
 * segment sums and pooling each column was a chain of dependent loads; small
 * batches (a few thousand rows) then ran at a few percent of the bandwidth.
 */

/* V floats at p: one 16-byte access for V = 4 (p 16-byte aligned). */
template <int V> struct fv {
    float v[V];
};

template <int V> __device__ __forceinline__ fv<V> ldv(const float *p)
{
    fv<V> r;
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

template <int V> __device__ __forceinline__ void stv(float *p, const fv<V> &r)
{
    if constexpr (V == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    else
        *p = r.v[0];
}

template <int V> __device__ __forceinline__ fv<V> fv_zero(void)
{
    fv<V> r;
#pragma unroll
    for (int u = 0; u < V; u++)
        r.v[u] = 0.0f;
    return r;
}

template <int V> __device__ __forceinline__ void fv_add(fv<V> &a, const fv<V> &b)
{
#pragma unroll
    for (int u = 0; u < V; u++)
        a.v[u] += b.v[u];
}

__device__ __forceinline__ size_t gtid(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t gstride(void) { return (size_t)gridDim.x * blockDim.x; }

/* Item t of a [rows x nv] grid: its row, and its column group in *jv
 * (32-bit division whenever the index fits, which is every practical size). */
__device__ __forceinline__ int64_t split_row(size_t t, unsigned nv, unsigned *jv)
{
    if (t <= 0xffffffffu) {
        unsigned tt = (unsigned)t, r = tt / nv;
        *jv = tt - r * nv;
        return (int64_t)r;
    }
    size_t r = t / nv;
    *jv = (unsigned)(t - r * nv);
    return (int64_t)r;
}

/* ---- elementwise (flat; the last n % V elements one at a time) -------- */

template <int V>
__global__ void k_add(float *__restrict__ y, const float *__restrict__ x, size_t n)
{
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> a = ldv<V>(y + t * V);
        fv_add<V>(a, ldv<V>(x + t * V));
        stv<V>(y + t * V, a);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride())
        y[i] += x[i];
}

/* thr == 0: plain ReLU (scale unused).  y may alias x. */
__device__ __forceinline__ float relu_drop1(float x, size_t i, uint32_t thr, float scale,
                                            uint64_t key)
{
    float v = x > 0.0f ? x : 0.0f;
    if (thr)
        v = d_keep(key, i, thr) ? v * scale : 0.0f;
    return v;
}

template <int V>
__global__ void k_relu_dropout(float *y, const float *x, size_t n, uint32_t thr, float scale,
                               uint64_t key)
{
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> a = ldv<V>(x + t * V);
#pragma unroll
        for (int u = 0; u < V; u++)
            a.v[u] = relu_drop1(a.v[u], t * V + u, thr, scale, key);
        stv<V>(y + t * V, a);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride())
        y[i] = relu_drop1(x[i], i, thr, scale, key);
}

/* dx may alias dy. */
template <int V>
__global__ void k_relu_dropout_backward(float *dx, const float *y, const float *dy, size_t n,
                                        float scale, int scaled)
{
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> yv = ldv<V>(y + t * V), g = ldv<V>(dy + t * V);
#pragma unroll
        for (int u = 0; u < V; u++)
            g.v[u] = yv.v[u] > 0.0f ? (scaled ? g.v[u] * scale : g.v[u]) : 0.0f;
        stv<V>(dx + t * V, g);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride())
        dx[i] = y[i] > 0.0f ? (scaled ? dy[i] * scale : dy[i]) : 0.0f;
}

/* ---- graph gathers and CSR segment sums (h a multiple of V) ----------- */

/* out[v] = bias + sum of the hot rows of w + mass[v] * w[mass_row]. */
template <int V>
__global__ void k_atom_embed(float *__restrict__ out, const int16_t *__restrict__ hot,
                             const float *__restrict__ mass, const float *__restrict__ w,
                             const float *__restrict__ bias, int32_t n_atoms, int h, int mass_row)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_atoms * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t v = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        fv<V> acc = bias ? ldv<V>(bias + j) : fv_zero<V>();
#pragma unroll
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++) {
            int s = hot[(size_t)v * MP_ATOM_MAX_HOT + q];
            if (s >= 0)
                fv_add<V>(acc, ldv<V>(w + (size_t)s * h + j));
        }
        const float mv = mass[v];
        fv<V> wm = ldv<V>(w + (size_t)mass_row * h + j);
#pragma unroll
        for (int u = 0; u < V; u++)
            acc.v[u] += mv * wm.v[u];
        stv<V>(out + (size_t)v * h + j, acc);
    }
}

/* h0[e] = a[src[e]] + sum of the bond's hot rows of wb. */
template <int V>
__global__ void k_edge_embed(float *__restrict__ h0, const int32_t *__restrict__ edge_src,
                             const int8_t *__restrict__ bond_hot, const float *__restrict__ a,
                             const float *__restrict__ wb, int32_t n_edges, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        fv<V> acc = ldv<V>(a + (size_t)edge_src[e] * h + j);
#pragma unroll
        for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
            int s = bond_hot[(size_t)(e >> 1) * MP_BOND_MAX_HOT + q];
            if (s >= 0)
                fv_add<V>(acc, ldv<V>(wb + (size_t)s * h + j));
        }
        stv<V>(h0 + (size_t)e * h + j, acc);
    }
}

/* out[v] = sum over k in [in_start[v], in_start[v+1]) of x[in_edge[k] ^ flip],
 * in CSR order: one writer per element, so no atomics and fixed bits. */
template <int V>
__global__ void k_segment_sum(float *__restrict__ out, const int32_t *__restrict__ in_start,
                              const int32_t *__restrict__ in_edge, const float *__restrict__ x,
                              int32_t n_atoms, int h, int32_t flip)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_atoms * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t v = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        const int32_t k0 = in_start[v], k1 = in_start[v + 1];
        fv<V> acc = fv_zero<V>();
#pragma unroll 4
        for (int32_t k = k0; k < k1; k++)
            fv_add<V>(acc, ldv<V>(x + (size_t)(in_edge[k] ^ flip) * h + j));
        stv<V>(out + (size_t)v * h + j, acc);
    }
}

/* out[e] = s[idx[e]] - x[e ^ 1]   (message: idx = src; its adjoint: idx = dst). */
template <int V>
__global__ void k_gather_sub_rev(float *__restrict__ out, const float *__restrict__ s,
                                 const int32_t *__restrict__ idx, const float *__restrict__ x,
                                 int32_t n_edges, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        fv<V> a = ldv<V>(s + (size_t)idx[e] * h + j);
        fv<V> r = ldv<V>(x + (size_t)(e ^ 1) * h + j);
#pragma unroll
        for (int u = 0; u < V; u++)
            a.v[u] -= r.v[u];
        stv<V>(out + (size_t)e * h + j, a);
    }
}

/* The fused message_backward tail (ops.h message_backward_relu):
 * g = s[idx[e]] - x[e ^ 1]; dz[e] = y[e] > 0 ? g (* scale) : 0; dh0[e] += dz[e],
 * the same float operations as k_gather_sub_rev, k_relu_dropout_backward
 * and k_add one after the other. */
template <int V>
__global__ void k_gather_sub_rev_relu(float *__restrict__ dz, float *__restrict__ dh0,
                                      const float *__restrict__ s,
                                      const int32_t *__restrict__ idx,
                                      const float *__restrict__ x, const float *__restrict__ y,
                                      int32_t n_edges, int h, float scale, int scaled)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        const size_t o = (size_t)e * h + j;
        fv<V> a = ldv<V>(s + (size_t)idx[e] * h + j);
        fv<V> r = ldv<V>(x + (size_t)(e ^ 1) * h + j);
        fv<V> yv = ldv<V>(y + o), acc = ldv<V>(dh0 + o);
#pragma unroll
        for (int u = 0; u < V; u++) {
            float g = a.v[u] - r.v[u];
            g = yv.v[u] > 0.0f ? (scaled ? g * scale : g) : 0.0f;
            a.v[u] = g;
            acc.v[u] += g;
        }
        stv<V>(dz + o, a);
        stv<V>(dh0 + o, acc);
    }
}

/* out[e] = x[idx[e]]. */
template <int V>
__global__ void k_gather_rows(float *__restrict__ out, const int32_t *__restrict__ idx,
                              const float *__restrict__ x, int32_t n_rows, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_rows * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        stv<V>(out + (size_t)e * h + j, ldv<V>(x + (size_t)idx[e] * h + j));
    }
}

/* ---- pooling (row stride ldo of the output a multiple of V) ----------- */

/* agg: 0 mean, 1 sum, 2 norm (scale = inv_norm).  Four atom rows loaded
 * before they are added (in atom order), so a thread has several loads in
 * flight instead of a chain of one load per atom. */
template <int V>
__global__ void k_pool(float *__restrict__ out, int ldo, const int32_t *__restrict__ mol_atom,
                       const float *__restrict__ x, int32_t n_mols, int h, int agg, float inv_norm)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_mols * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t i = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        const int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        fv<V> acc = fv_zero<V>();
        int32_t v = a0;
        for (; v + 4 <= a1; v += 4) {
            fv<V> x0 = ldv<V>(x + (size_t)v * h + j), x1 = ldv<V>(x + (size_t)(v + 1) * h + j);
            fv<V> x2 = ldv<V>(x + (size_t)(v + 2) * h + j), x3 = ldv<V>(x + (size_t)(v + 3) * h + j);
            fv_add<V>(acc, x0);
            fv_add<V>(acc, x1);
            fv_add<V>(acc, x2);
            fv_add<V>(acc, x3);
        }
        for (; v < a1; v++)
            fv_add<V>(acc, ldv<V>(x + (size_t)v * h + j));
#pragma unroll
        for (int u = 0; u < V; u++) {
            if (a1 == a0)
                acc.v[u] = 0.0f;
            else if (agg == 0)
                acc.v[u] /= (float)(a1 - a0);   /* divide, as torch's sum / a_size does */
            else if (agg == 2)
                acc.v[u] *= inv_norm;
        }
        stv<V>(out + (size_t)i * ldo + j, acc);
    }
}

template <int V>
__global__ void k_pool_backward(float *__restrict__ dx, const int32_t *__restrict__ mol_atom,
                                const float *__restrict__ dout, int ldo, int32_t n_mols, int h,
                                int agg, float inv_norm)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_mols * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t i = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        const int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        if (a1 == a0)
            continue;
        fv<V> g = ldv<V>(dout + (size_t)i * ldo + j);
        const float d = (float)(a1 - a0);
#pragma unroll
        for (int u = 0; u < V; u++)
            g.v[u] = agg == 0 ? g.v[u] / d : agg == 2 ? g.v[u] * inv_norm : g.v[u];
        for (int32_t v = a0; v < a1; v++)
            stv<V>(dx + (size_t)v * h + j, g);
    }
}

/* ---- a plain device copy in 16-byte units (cu_copy of aligned buffers) - */

static __global__ void k_copy16(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n16)
{
    for (size_t t = gtid(); t < n16; t += gstride())
        dst[t] = src[t];
}
