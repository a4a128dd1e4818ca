/*
 * kernels_rows.cuh - the memory-bound kernels of the CUDA backend (included
 * by rows_cuda.cu, which launches them): elementwise passes, row gathers,
 * CSR segment sums and pooling, with one thread per (row, V consecutive
 * columns).
 *
 * Storage types are template parameters: an operand of type T is float (the
 * element type) or bf16, read with ldv<V>(const T *) into V floats and
 * written with stv<V>(T *, ...), the one typed load and store every kernel
 * uses.  Arithmetic is fp32 whatever the storage: a bf16 value is widened
 * exactly when loaded and rounded to nearest even (__float2bfloat16_rn) when
 * stored.  So one kernel per op serves every precision, and the fp32
 * instantiation is the same float operations as the bf16 one.
 *
 * V = 4 moves 4 elements per access (16 bytes of float, 8 of bf16) and is
 * used when the row width is a multiple of 4 and every base pointer is
 * aligned for it (cudaMalloc buffers are; a sub-block of the parameter block
 * may not be); V = 1 is the same code one element at a time.  Every output
 * element is still one fixed sequence of float operations in the same order
 * as the plain loop (ref.c's order), whatever V and the launch shape: bits
 * are the same run to run and the same for V = 1 and V = 4.
 *
 * Why one thread per element group and not one warp per row: with a warp per
 * row each lane walked h / 32 columns one after the other, and for the
 * segment sums and pooling each column was a chain of dependent loads; small
 * batches (a few thousand rows) then ran at a few percent of the bandwidth.
 */
#include <type_traits>

/* ===================================================================== */
/* Typed access                                                           */
/* ===================================================================== */

/* V values as floats. */
template <int V> struct fv {
    float v[V];
};

/* V elements at p (float or bf16) as floats; V = 4: one 16- or 8-byte load,
 * p aligned for it. */
template <int V, typename T> __device__ __forceinline__ fv<V> ldv(const T *p)
{
    fv<V> r;
    if constexpr (std::is_same<T, float>::value) {
        if constexpr (V == 4) {
            float4 t = *reinterpret_cast<const float4 *>(p);
            r.v[0] = t.x;
            r.v[1] = t.y;
            r.v[2] = t.z;
            r.v[3] = t.w;
        } else {
            r.v[0] = *p;
        }
    } else {
        static_assert(std::is_same<T, bf16>::value, "a storage type is float or bf16");
        if constexpr (V == 4) {
            uint2 u = *reinterpret_cast<const uint2 *>(p);
            __nv_bfloat162 lo, hi;
            memcpy(&lo, &u.x, 4);
            memcpy(&hi, &u.y, 4);
            float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
            r.v[0] = a.x;
            r.v[1] = a.y;
            r.v[2] = b.x;
            r.v[3] = b.y;
        } else {
            r.v[0] = __bfloat162float(*p);
        }
    }
    return r;
}

/* V floats stored at p as float or bf16 (rounded to nearest even). */
template <int V, typename T> __device__ __forceinline__ void stv(T *p, const fv<V> &r)
{
    if constexpr (std::is_same<T, float>::value) {
        if constexpr (V == 4)
            *reinterpret_cast<float4 *>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
        else
            *p = r.v[0];
    } else {
        if constexpr (V == 4) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(r.v[0], r.v[1]);
            __nv_bfloat162 hi = __floats2bfloat162_rn(r.v[2], r.v[3]);
            uint2 u;
            memcpy(&u.x, &lo, 4);
            memcpy(&u.y, &hi, 4);
            *reinterpret_cast<uint2 *>(p) = u;
        } else {
            *p = __float2bfloat16_rn(r.v[0]);
        }
    }
}

/* One element, for the tails of the flat kernels. */
template <typename T> __device__ __forceinline__ float ld1(const T *p) { return ldv<1>(p).v[0]; }
template <typename T> __device__ __forceinline__ void st1(T *p, float x)
{
    fv<1> r;
    r.v[0] = x;
    stv<1>(p, r);
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

/* max(x, 0), element by element (a no-op unless RELU). */
template <bool RELU, int V> __device__ __forceinline__ void fv_relu(fv<V> &a)
{
    if constexpr (RELU) {
#pragma unroll
        for (int u = 0; u < V; u++)
            a.v[u] = a.v[u] > 0.0f ? a.v[u] : 0.0f;
    }
}

/* The ReLU / dropout backward through y: g = y > 0 ? g (* scale) : 0. */
template <int V> __device__ __forceinline__ void fv_relu_bw(fv<V> &g, const fv<V> &y,
                                                            float scale, int scaled)
{
#pragma unroll
    for (int u = 0; u < V; u++)
        g.v[u] = y.v[u] > 0.0f ? (scaled ? g.v[u] * scale : g.v[u]) : 0.0f;
}

/* ===================================================================== */
/* The row loop                                                           */
/* ===================================================================== */

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

/* body(row, j) for every row < n_rows and column group j = 0, V, ... < h,
 * one (row, group) per thread, grid-stride. */
template <int V, typename F>
__device__ __forceinline__ void for_rows(int64_t n_rows, int h, F &&body)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_rows * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        const int64_t r = split_row(t, nv, &jv);
        body(r, (int)jv * V);
    }
}

/* ===================================================================== */
/* Elementwise (flat; the last n % V elements one at a time)              */
/* ===================================================================== */

/* thr == 0: plain ReLU (scale unused). */
__device__ __forceinline__ float relu_drop1(float x, size_t i, uint32_t thr, float scale,
                                            uint64_t key)
{
    float v = x > 0.0f ? x : 0.0f;
    if (thr)
        v = d_keep(key, i, thr) ? v * scale : 0.0f;
    return v;
}

/* y = relu_dropout(x), y may alias x.  The key: `key`, or keys[k_dev[0] *
 * stride] read on the device when keys (ops.h mp_key). */
template <int V, typename T>
__global__ void k_relu_dropout(T *y, const T *x, size_t n, uint32_t thr, float scale,
                               uint64_t key, const uint64_t *keys, const int32_t *k_dev,
                               int stride)
{
    pdl_enter();
    if (keys)
        key = keys[(size_t)k_dev[0] * (size_t)stride];
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> a = ldv<V>(x + t * V);
#pragma unroll
        for (int u = 0; u < V; u++)
            a.v[u] = relu_drop1(a.v[u], t * V + u, thr, scale, key);
        stv<V>(y + t * V, a);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride())
        st1(y + i, relu_drop1(ld1(x + i), i, thr, scale, key));
}

/* dx = y > 0 ? dy (* scale) : 0 (dx may alias dy); COPY: dxo = dx too. */
template <int V, typename TY, typename TO, bool COPY>
__global__ void k_relu_dropout_backward(float *dx, TO *__restrict__ dxo, const TY *y,
                                        const float *dy, size_t n, float scale, int scaled)
{
    pdl_enter();
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> yv = ldv<V>(y + t * V), g = ldv<V>(dy + t * V);
        fv_relu_bw<V>(g, yv, scale, scaled);
        stv<V>(dx + t * V, g);
        if constexpr (COPY)
            stv<V>(dxo + t * V, g);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride()) {
        float g = ld1(y + i) > 0.0f ? (scaled ? dy[i] * scale : dy[i]) : 0.0f;
        dx[i] = g;
        if constexpr (COPY)
            st1(dxo + i, g);
    }
}

/* ===================================================================== */
/* Dense helpers (row ops of the dense seam ops)                          */
/* ===================================================================== */

/* dst[r, j] = src[r, j] converted (lds 0: src's one row into every row). */
template <int V, typename TO, typename TI>
__global__ void k_copy2d(TO *__restrict__ dst, int ldd, const TI *__restrict__ src, int lds,
                         int32_t n_rows, int n_cols)
{
    pdl_enter();
    for_rows<V>(n_rows, n_cols, [&](int64_t r, int j) {
        stv<V>(dst + (size_t)r * ldd + j, ldv<V>(src + (size_t)r * lds + j));
    });
}

/* y[i,j] = keep(i*ld + j) ? x[i,j] * scale : 0, one warp per row (the key
 * as in k_relu_dropout). */
__global__ void k_dropout2d(float *y, const float *x, int32_t n_rows, int n_cols, int ld,
                            uint32_t thr, float scale, uint64_t key, const uint64_t *keys,
                            const int32_t *k_dev, int stride)
{
    pdl_enter();
    if (keys)
        key = keys[(size_t)k_dev[0] * (size_t)stride];
    for (int64_t i = warp_id(); i < n_rows; i += warp_count())
        for (int j = lane_id(); j < n_cols; j += 32) {
            size_t k = (size_t)i * ld + j;
            y[k] = d_keep(key, k, thr) ? x[k] * scale : 0.0f;
        }
}

/* ===================================================================== */
/* Graph gathers and CSR segment sums (h a multiple of V)                 */
/* ===================================================================== */

/* out[v] = bias + sum of the hot rows of w + mass[v] * w[mass_row]. */
template <int V>
__global__ void k_atom_embed(float *__restrict__ out, const int16_t *__restrict__ hot,
                             const float *__restrict__ mass, const float *__restrict__ w,
                             const float *__restrict__ bias, int32_t n_atoms, int h, int mass_row)
{
    pdl_enter();
    for_rows<V>(n_atoms, h, [&](int64_t v, int j) {
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
    });
}

/* h0[e] = a[src[e]] + sum of the bond's hot rows of wb; M0: m0[e] = ReLU of
 * the same (unrounded) sum. */
template <int V, typename TO, bool M0>
__global__ void k_edge_embed(TO *__restrict__ h0, TO *__restrict__ m0,
                             const int32_t *__restrict__ edge_src,
                             const int8_t *__restrict__ bond_hot, const float *__restrict__ a,
                             const float *__restrict__ wb, int32_t n_edges, int h)
{
    pdl_enter();
    for_rows<V>(n_edges, h, [&](int64_t e, int j) {
        fv<V> acc = ldv<V>(a + (size_t)edge_src[e] * h + j);
#pragma unroll
        for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
            int s = bond_hot[(size_t)(e >> 1) * MP_BOND_MAX_HOT + q];
            if (s >= 0)
                fv_add<V>(acc, ldv<V>(wb + (size_t)s * h + j));
        }
        const size_t o = (size_t)e * h + j;
        stv<V>(h0 + o, acc);
        if constexpr (M0) {
            fv_relu<true, V>(acc);
            stv<V>(m0 + o, acc);
        }
    });
}

/* out[v] = sum over k in [in_start[v], in_start[v+1]) of x[in_edge[k] ^ flip]
 * (through max(., 0) when RELU), in CSR order: one writer per element, so
 * no atomics and fixed bits. */
template <int V, typename TO, typename TX, bool RELU>
__global__ void k_segment_sum(TO *__restrict__ out, const int32_t *__restrict__ in_start,
                              const int32_t *__restrict__ in_edge, const TX *__restrict__ x,
                              int32_t n_atoms, int h, int32_t flip)
{
    pdl_enter();
    for_rows<V>(n_atoms, h, [&](int64_t v, int j) {
        const int32_t k0 = in_start[v], k1 = in_start[v + 1];
        fv<V> acc = fv_zero<V>();
#pragma unroll 4
        for (int32_t k = k0; k < k1; k++) {
            fv<V> t = ldv<V>(x + (size_t)(in_edge[k] ^ flip) * h + j);
            fv_relu<RELU, V>(t);
            fv_add<V>(acc, t);
        }
        stv<V>(out + (size_t)v * h + j, acc);
    });
}

/* The edge pass of message and message_backward, g = s[idx[e]] - x[e ^ 1]:
 *   GS_PLAIN   out[e] = g                      (message: idx = src; adjoint: dst)
 *   GS_RELU_IN out[e] = s[idx[e]] - max(x[e ^ 1], 0)   (message's relu_in)
 *   GS_BACKWARD out[e] = y[e] > 0 ? g (* scale) : 0, dh0[e] += out[e] (the
 *              unrounded value): message_backward's fused ReLU backward and
 *              sum, the same float operations as the three passes it
 *              replaces. */
enum { GS_PLAIN, GS_RELU_IN, GS_BACKWARD };

template <int V, typename TO, typename TX, typename TY, int MODE>
__global__ void k_gather_sub_rev(TO *__restrict__ out, float *__restrict__ dh0,
                                 const float *__restrict__ s, const int32_t *__restrict__ idx,
                                 const TX *__restrict__ x, const TY *__restrict__ y,
                                 int32_t n_edges, int h, float scale, int scaled)
{
    pdl_enter();
    for_rows<V>(n_edges, h, [&](int64_t e, int j) {
        const size_t o = (size_t)e * h + j;
        fv<V> a = ldv<V>(s + (size_t)idx[e] * h + j);
        fv<V> r = ldv<V>(x + (size_t)(e ^ 1) * h + j);
        if constexpr (MODE == GS_BACKWARD) {
            fv<V> yv = ldv<V>(y + o), acc = ldv<V>(dh0 + o);
#pragma unroll
            for (int u = 0; u < V; u++) {
                float g = a.v[u] - r.v[u];
                g = yv.v[u] > 0.0f ? (scaled ? g * scale : g) : 0.0f;
                a.v[u] = g;
                acc.v[u] += g;
            }
            stv<V>(out + o, a);
            stv<V>(dh0 + o, acc);
        } else {
            fv_relu<MODE == GS_RELU_IN, V>(r);
#pragma unroll
            for (int u = 0; u < V; u++)
                a.v[u] -= r.v[u];
            stv<V>(out + o, a);
        }
    });
}

/* out[e] = x[idx[e]] (atom_sum_backward's gather); RELU: through the ReLU /
 * dropout backward of y; COPY: outo[e] = out[e] too. */
template <int V, typename TY, typename TO, bool RELU, bool COPY>
__global__ void k_gather_rows(float *__restrict__ out, TO *__restrict__ outo,
                              const int32_t *__restrict__ idx, const float *__restrict__ x,
                              const TY *__restrict__ y, int32_t n_rows, int h, float scale,
                              int scaled)
{
    pdl_enter();
    for_rows<V>(n_rows, h, [&](int64_t e, int j) {
        const size_t o = (size_t)e * h + j;
        fv<V> g = ldv<V>(x + (size_t)idx[e] * h + j);
        if constexpr (RELU)
            fv_relu_bw<V>(g, ldv<V>(y + o), scale, scaled);
        stv<V>(out + o, g);
        if constexpr (COPY)
            stv<V>(outo + o, g);
    });
}

/*
 * message and its adjoint per atom, without the scratch S: one thread per
 * (atom v, V columns) sums S = the rows x[k ^ flip] of the edges k entering
 * v, in CSR order from 0 (as k_segment_sum), then writes each edge k ^ flip
 * ^ 1 from that sum: out = S - x[k ^ flip] (as k_gather_sub_rev).
 *   message (flip 0):           msg[k ^ 1] = S - m[k]: src[k ^ 1] = v;
 *   message_backward (flip 1):  dz[k] = ds - dmsg[k ^ 1]: dst[k] = v.
 * Each edge is written once (it enters exactly one atom) and S never leaves
 * the thread: 2 edge-sized passes instead of a segment-sum pass writing S
 * and a gather pass reading it back with x again (~4; at bf16 storage the
 * fp32 S was as many bytes as the rows it summed).  The second loop reads
 * the atom's rows again, from L1 (keeping them in registers instead cost
 * occupancy: 96-192 registers a thread).  Rows are summed MD_SUM at a time
 * and edges written MD_OUT at a time, the loads of a round issued together:
 * a padding atom holds up to 32 edges (run/resident.c), which one load after
 * another would make a straggler.
 * RELU reads x through max(., 0) (message's relu_in); BACKWARD takes out
 * through the ReLU / dropout backward of y and adds it into dh0 unrounded
 * (message_backward's fused form).  The same float operations in the same
 * order as the two passes, whatever the storage types: the same bits.
 */
#define MD_SUM 4   /* rows summed a round  */
#define MD_OUT 2   /* edges written a round */


template <int V, typename TO, typename TX, typename TY, bool RELU, bool BACKWARD>
__global__ void k_message_by_atom(TO *__restrict__ out, float *__restrict__ dh0,
                                  const int32_t *__restrict__ in_start,
                                  const int32_t *__restrict__ in_edge, const TX *__restrict__ x,
                                  const TY *__restrict__ y, int32_t n_atoms, int h, int32_t flip,
                                  float scale, int scaled)
{
    pdl_enter();
    for_rows<V>(n_atoms, h, [&](int64_t v, int j) {
        const int32_t k0 = in_start[v], deg = in_start[v + 1] - k0;
        fv<V> acc = fv_zero<V>();
        for (int32_t q0 = 0; q0 < deg; q0 += MD_SUM) {
            fv<V> t[MD_SUM];
#pragma unroll
            for (int i = 0; i < MD_SUM; i++)
                if (q0 + i < deg)
                    t[i] = ldv<V>(x + (size_t)(in_edge[k0 + q0 + i] ^ flip) * h + j);
#pragma unroll
            for (int i = 0; i < MD_SUM; i++)
                if (q0 + i < deg)
#pragma unroll
                    for (int u = 0; u < V; u++)
                        acc.v[u] += rl<RELU>(t[i].v[u]);
        }
        for (int32_t q0 = 0; q0 < deg; q0 += MD_OUT) {
            fv<V> t[MD_OUT], yv[MD_OUT], d[MD_OUT];
            int32_t e[MD_OUT];
#pragma unroll
            for (int i = 0; i < MD_OUT; i++)
                if (q0 + i < deg) {
                    const int32_t k = in_edge[k0 + q0 + i] ^ flip;
                    t[i] = ldv<V>(x + (size_t)k * h + j);
                    e[i] = k ^ 1;
                    if constexpr (BACKWARD) {
                        yv[i] = ldv<V>(y + (size_t)e[i] * h + j);
                        d[i] = ldv<V>(dh0 + (size_t)e[i] * h + j);
                    }
                }
#pragma unroll
            for (int i = 0; i < MD_OUT; i++)
                if (q0 + i < deg) {
                    fv<V> g;
#pragma unroll
                    for (int u = 0; u < V; u++)
                        g.v[u] = acc.v[u] - rl<RELU>(t[i].v[u]);
                    if constexpr (BACKWARD) {
#pragma unroll
                        for (int u = 0; u < V; u++) {
                            g.v[u] = yv[i].v[u] > 0.0f ? (scaled ? g.v[u] * scale : g.v[u])
                                                       : 0.0f;
                            d[i].v[u] += g.v[u];
                        }
                        stv<V>(dh0 + (size_t)e[i] * h + j, d[i]);
                    }
                    stv<V>(out + (size_t)e[i] * h + j, g);
                }
        }
    });
}

/* ===================================================================== */
/* Pooling (row stride ldo of the output a multiple of V)                 */
/* ===================================================================== */

/* agg: 0 mean, 1 sum, 2 norm (scale = inv_norm).  Four atom rows loaded
 * before they are added (in atom order), so a thread has several loads in
 * flight instead of a chain of one load per atom. */
template <int V>
__global__ void k_pool(float *__restrict__ out, int ldo, const int32_t *__restrict__ mol_atom,
                       const float *__restrict__ x, int32_t n_mols, int h, int agg, float inv_norm)
{
    pdl_enter();
    for_rows<V>(n_mols, h, [&](int64_t i, int j) {
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
    });
}

template <int V>
__global__ void k_pool_backward(float *__restrict__ dx, const int32_t *__restrict__ mol_atom,
                                const float *__restrict__ dout, int ldo, int32_t n_mols, int h,
                                int agg, float inv_norm)
{
    pdl_enter();
    for_rows<V>(n_mols, h, [&](int64_t i, int j) {
        const int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        if (a1 == a0)
            return;
        fv<V> g = ldv<V>(dout + (size_t)i * ldo + j);
        const float d = (float)(a1 - a0);
#pragma unroll
        for (int u = 0; u < V; u++)
            g.v[u] = agg == 0 ? g.v[u] / d : agg == 2 ? g.v[u] * inv_norm : g.v[u];
        for (int32_t v = a0; v < a1; v++)
            stv<V>(dx + (size_t)v * h + j, g);
    });
}
