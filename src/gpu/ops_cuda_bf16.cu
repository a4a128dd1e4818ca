/*
 * ops_cuda_bf16.cu - real bf16 on the cuda backend: the bf16-storage ops of
 * models/ops.h (half_acts), and the cuBLASLt fused product both precisions
 * of gemm_res_relu use.
 *
 * Before this file, "bf16" meant cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF on
 * fp32 buffers; on CUDA 13.0 on the H200 that gave the bits and the speed of
 * tf32, and every product still read 4 bytes an operand.  Now, at bf16, the
 * operands of the D-MPNN's big products are *stored* in bfloat16 by the ops
 * that produce them (the model allocates them at 2 bytes an element):
 *
 *   msg[t]  message_bf16            forward W_h product (A), dW_h (A^T)
 *   dZ_t    atom_sum_backward_relu_bf16 / message_backward_relu_bf16
 *                                   dW_h (B) and dMsg = dZ W_h^T (A)
 *   dMsg    the product dZ W_h^T (bf16 C, rounded once at the end)
 *                                   message_backward_relu_bf16
 *   a       atom_sum_bf16           forward W_o product (A), dW_o (A^T)
 *   dho     relu_dropout_backward_bf16 (a rounded copy beside the fp32 one)
 *   W_h, W_o                        to_bf16, once per forward (one pass)
 *   H0, M_t edge_embed_relu_bf16, the W_h product (bf16 C and D),
 *           relu_dropout_bf16       the W_h product, message, atom_sum,
 *                                   the backward ReLU masks
 *
 * and the products run cuBLAS / cuBLASLt with A, B = CUDA_R_16BF, C, D =
 * CUDA_R_32F (CUDA_R_16BF for the W_h update), CUBLAS_COMPUTE_32F: the
 * tensor cores' bf16 path with fp32 accumulation.  Parameters, gradients, Adam moments and
 * every other activation (the sums, dh0, the readout) stay fp32; where a
 * gradient is both summed and fed to a product (dZ into dh0) the sum takes
 * the unrounded value.  Rounding is to nearest even (__float2bfloat16_rn).
 *
 * The row kernels are those of kernels_rows.cuh with a bf16 store: same
 * launch shapes, V = 4 columns per thread (8-byte bf16 stores) when the
 * widths and pointers allow it.  Every op stays deterministic (fixed
 * summation order, no atomics; cuBLAS on a fixed workspace).
 */
#include "gpu/cuda_ctx.cuh"

#include <cuda_bf16.h>

#include <string.h>

#include "gpu/kernels_rows.cuh"

typedef __nv_bfloat16 bf16;

/* ===================================================================== */
/* Kernels                                                                */
/* ===================================================================== */

/* V bf16 values at p as floats (V = 4: one 8-byte load, p 8-byte aligned). */
template <int V> __device__ __forceinline__ fv<V> ldbf(const bf16 *p)
{
    fv<V> r;
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
    return r;
}

/* V values at p as floats, p fp32 or bf16 (the kernels below take the
 * messages M in either type). */
template <int V> __device__ __forceinline__ fv<V> ldx(const float *p) { return ldv<V>(p); }
template <int V> __device__ __forceinline__ fv<V> ldx(const bf16 *p) { return ldbf<V>(p); }

/* V floats rounded to bf16 at p (V = 4: one 8-byte store, p 8-byte aligned). */
template <int V> __device__ __forceinline__ void stbf(bf16 *p, const fv<V> &r)
{
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

template <int V>
__global__ void k_to_bf16(bf16 *__restrict__ dst, const float *__restrict__ src, size_t n)
{
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride())
        stbf<V>(dst + t * V, ldv<V>(src + t * V));
    for (size_t i = nvec * V + gtid(); i < n; i += gstride())
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* dx = y > 0 ? dy (* scale) : 0 (fp32; dx may alias dy), dxh = bf16(dx). */
template <int V>
__global__ void k_relu_dropout_backward_bf16(float *dx, bf16 *__restrict__ dxh, const float *y,
                                             const float *dy, size_t n, float scale, int scaled)
{
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> yv = ldv<V>(y + t * V), g = ldv<V>(dy + t * V);
#pragma unroll
        for (int u = 0; u < V; u++)
            g.v[u] = yv.v[u] > 0.0f ? (scaled ? g.v[u] * scale : g.v[u]) : 0.0f;
        stv<V>(dx + t * V, g);
        stbf<V>(dxh + t * V, g);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride()) {
        float g = y[i] > 0.0f ? (scaled ? dy[i] * scale : dy[i]) : 0.0f;
        dx[i] = g;
        dxh[i] = __float2bfloat16_rn(g);
    }
}

/* The gather of atom_sum_backward and the ReLU / dropout backward through y:
 * dx[e] = y[e] > 0 ? da[dst[e]] (* scale) : 0 (fp32), dxh[e] = bf16(dx[e]). */
template <int V, typename T>
__global__ void k_gather_relu_bf16(float *__restrict__ dx, bf16 *__restrict__ dxh,
                                   const int32_t *__restrict__ idx, const float *__restrict__ da,
                                   const T *__restrict__ y, int32_t n_edges, int h,
                                   float scale, int scaled)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        const size_t o = (size_t)e * h + j;
        fv<V> g = ldv<V>(da + (size_t)idx[e] * h + j), yv = ldx<V>(y + o);
#pragma unroll
        for (int u = 0; u < V; u++)
            g.v[u] = yv.v[u] > 0.0f ? (scaled ? g.v[u] * scale : g.v[u]) : 0.0f;
        stv<V>(dx + o, g);
        stbf<V>(dxh + o, g);
    }
}

/* out (bf16) [v] = sum over k in [in_start[v], in_start[v+1]) of x[in_edge[k]],
 * in CSR order (k_segment_sum with flip 0 and a bf16 store). */
template <int V, typename T>
__global__ void k_segment_sum_bf16(bf16 *__restrict__ out, const int32_t *__restrict__ in_start,
                                   const int32_t *__restrict__ in_edge,
                                   const T *__restrict__ x, int32_t n_atoms, int h)
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
            fv_add<V>(acc, ldx<V>(x + (size_t)in_edge[k] * h + j));
        stbf<V>(out + (size_t)v * h + j, acc);
    }
}

/* out (fp32) [v] = sum over k in [in_start[v], in_start[v+1]) of x (fp32
 * or bf16) [in_edge[k] ^ flip], in CSR order (k_segment_sum on either type:
 * message's sum over M, message_backward's over dMsg). */
template <int V, typename T>
__global__ void k_segsum(float *__restrict__ out, const int32_t *__restrict__ in_start,
                         const int32_t *__restrict__ in_edge, const T *__restrict__ x,
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
            fv_add<V>(acc, ldx<V>(x + (size_t)(in_edge[k] ^ flip) * h + j));
        stv<V>(out + (size_t)v * h + j, acc);
    }
}

/* msg (bf16) [e] = s[src[e]] - m[e ^ 1]. */
template <int V, typename T>
__global__ void k_gather_sub_rev_bf16(bf16 *__restrict__ out, const float *__restrict__ s,
                                      const int32_t *__restrict__ idx,
                                      const T *__restrict__ x, int32_t n_edges, int h)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        fv<V> a = ldv<V>(s + (size_t)idx[e] * h + j);
        fv<V> r = ldx<V>(x + (size_t)(e ^ 1) * h + j);
#pragma unroll
        for (int u = 0; u < V; u++)
            a.v[u] -= r.v[u];
        stbf<V>(out + (size_t)e * h + j, a);
    }
}

/* k_gather_sub_rev_relu on bf16 x (dMsg), dz stored only as bf16:
 * g = s[idx[e]] - x[e ^ 1]; dz = y[e] > 0 ? g (* scale) : 0; dh0[e] += dz;
 * dzh[e] = bf16(dz). */
template <int V, typename T>
__global__ void k_gather_sub_rev_relu_bf16(bf16 *__restrict__ dzh, float *__restrict__ dh0,
                                           const float *__restrict__ s,
                                           const int32_t *__restrict__ idx,
                                           const bf16 *__restrict__ x,
                                           const T *__restrict__ y, int32_t n_edges, int h,
                                           float scale, int scaled)
{
    const unsigned nv = (unsigned)(h / V);
    const size_t total = (size_t)n_edges * nv;
    for (size_t t = gtid(); t < total; t += gstride()) {
        unsigned jv;
        int64_t e = split_row(t, nv, &jv);
        const int j = (int)jv * V;
        const size_t o = (size_t)e * h + j;
        fv<V> a = ldv<V>(s + (size_t)idx[e] * h + j);
        fv<V> r = ldbf<V>(x + (size_t)(e ^ 1) * h + j);
        fv<V> yv = ldx<V>(y + o), acc = ldv<V>(dh0 + o);
#pragma unroll
        for (int u = 0; u < V; u++) {
            float g = a.v[u] - r.v[u];
            g = yv.v[u] > 0.0f ? (scaled ? g * scale : g) : 0.0f;
            a.v[u] = g;
            acc.v[u] += g;
        }
        stbf<V>(dzh + o, a);
        stv<V>(dh0 + o, acc);
    }
}

/* h0 (bf16) [e] = a[src[e]] + sum of the bond's hot rows of wb (as
 * k_edge_embed), m0 (bf16) [e] = ReLU of the same fp32 sum. */
template <int V>
__global__ void k_edge_embed_relu_bf16(bf16 *__restrict__ h0, bf16 *__restrict__ m0,
                                       const int32_t *__restrict__ edge_src,
                                       const int8_t *__restrict__ bond_hot,
                                       const float *__restrict__ a, const float *__restrict__ wb,
                                       int32_t n_edges, int h)
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
        const size_t o = (size_t)e * h + j;
        stbf<V>(h0 + o, acc);
#pragma unroll
        for (int u = 0; u < V; u++)
            acc.v[u] = acc.v[u] > 0.0f ? acc.v[u] : 0.0f;
        stbf<V>(m0 + o, acc);
    }
}

/* relu_dropout on bf16 (y may alias x): y = keep ? max(x, 0) * scale : 0. */
template <int V>
__global__ void k_relu_dropout_bf16(bf16 *y, const bf16 *x, size_t n, uint32_t thr, float scale,
                                    uint64_t key)
{
    const size_t nvec = n / V;
    for (size_t t = gtid(); t < nvec; t += gstride()) {
        fv<V> a = ldbf<V>(x + t * V);
#pragma unroll
        for (int u = 0; u < V; u++)
            a.v[u] = relu_drop1(a.v[u], t * V + u, thr, scale, key);
        stbf<V>(y + t * V, a);
    }
    for (size_t i = nvec * V + gtid(); i < n; i += gstride())
        y[i] = __float2bfloat16_rn(relu_drop1(__bfloat162float(x[i]), i, thr, scale, key));
}

/* C = beta == 0 ? 0 : beta C over [m x n] (ldc): a product with k == 0
 * (C fp32, or bf16 when half). */
__global__ void k_beta_rows(void *c, int half, int ldc, int m, int n, float beta)
{
    for (int64_t i = warp_id(); i < m; i += warp_count()) {
        for (int j = lane_id(); j < n; j += 32) {
            size_t o = (size_t)i * ldc + j;
            if (half) {
                bf16 *p = (bf16 *)c + o;
                *p = __float2bfloat16_rn(beta == 0.0f ? 0.0f : beta * __bfloat162float(*p));
            } else {
                float *p = (float *)c + o;
                *p = beta == 0.0f ? 0.0f : beta * *p;
            }
        }
    }
}

/* ===================================================================== */
/* cuBLASLt: c = ReLU(r + a w) in one product                             */
/* ===================================================================== */

/* The alignment of p in bytes, as Lt's preferences take it (2 .. 256). */
static uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 2 && ((uintptr_t)p & (al - 1)))
        al >>= 1;
    return al;
}

/*
 * c = ReLU(r + a w) as one cuBLASLt product with the residual as its C
 * operand (beta 1) and the ReLU epilogue: one pass over the output instead
 * of a copy, a product reading C, and a ReLU pass.  Row-major over
 * column-major as in gemm: C^T = W^T A^T + R^T, so Lt's A is w (n x k), its
 * B is a (k x m).  a and w are of type ab, r and c of type cd (fp32 or
 * bf16 each).  The
 * algorithm is the heuristic's first for the shape and the fixed workspace,
 * so the same on every call (same bits).  Returns 0 when Lt offers no
 * algorithm or refuses the layout (the caller composes the unfused ops), 1
 * when the product was queued or its failure kept.
 */
int mp_cu_lt_res_relu(gpu_ctx *c, cudaDataType_t ab, cudaDataType_t cd, cublasComputeType_t ct,
                      int m, int n, int k, const void *a, int lda, const void *w, int ldw,
                      const void *r, int ldr, void *cm, int ldc)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int done = 0;
    const cublasOperation_t no = CUBLAS_OP_N;
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_RELU;
    const size_t ws = BLAS_WORKSPACE_BYTES;
    /* Lt assumes 256-byte aligned operands unless told: a sub-block of the
     * parameter block is not, so state what each pointer really has. */
    const uint32_t al_a = align_of(w), al_b = align_of(a), al_c = align_of(r),
                   al_d = align_of(cm);
    /* the heuristic's answer, remembered per shape (mp_cu_lt_heuristic):
     * the operand and output types are part of the key */
    const int key[LT_KEY] = { m, n, k, lda, ldw, ldr, ldc, (int)al_a, (int)al_b, (int)al_c,
                              (int)al_d,
                              (int)c->prec | (ab == CUDA_R_16BF) << 4 | (cd == CUDA_R_16BF) << 5 };
    memset(&res, 0, sizeof res);
    if (cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &no, sizeof no) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof no) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)n, (uint64_t)k, ldw) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)k, (uint64_t)m, lda) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&lc, cd, (uint64_t)n, (uint64_t)m, ldr) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&ld, cd, (uint64_t)n, (uint64_t)m, ldc) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof al_a) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof al_b) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_d, sizeof al_d) == CUBLAS_STATUS_SUCCESS &&
        mp_cu_lt_heuristic(c, key, op, la, lb, lc, ld, pref, &res)) {
        const float one = 1.0f;
        cublasStatus_t st = cublasLtMatmul(c->lt, op, &one, w, la, a, lb, &one, r, lc, cm, ld,
                                           &res.algo, c->blas_ws, ws, c->stream);
        if (st != CUBLAS_STATUS_SUCCESS)
            record(c, st == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM : MP_ERR_INTERNAL,
                   __FILE__, __LINE__, "cuBLASLt error: %s (%s) in gemm_res_relu m=%d n=%d k=%d "
                   "lda=%d ldw=%d ldr=%d ldc=%d, %s operands, %s C/D, %s",
                   cublasGetStatusString(st), cublasGetStatusName(st), m, n, k, lda, ldw, ldr, ldc,
                   ab == CUDA_R_16BF ? "bf16" : "fp32", cd == CUDA_R_16BF ? "bf16" : "fp32",
                   mp_precision_name(c->prec));
        done = 1;
    }
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    if (ld)
        (void)cublasLtMatrixLayoutDestroy(ld);
    if (lc)
        (void)cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        (void)cublasLtMatrixLayoutDestroy(lb);
    if (la)
        (void)cublasLtMatrixLayoutDestroy(la);
    if (op)
        (void)cublasLtMatmulDescDestroy(op);
    return done;
}

/* ===================================================================== */
/* Products on bf16 operands                                              */
/* ===================================================================== */

/* C = alpha op(A) op(B) + beta C with A, B bf16, fp32 accumulation, C fp32
 * (c_half 0) or bf16 (1), on `lane` (as gemm_on in ops_cuda.cu: 0 the main
 * stream, 1 the side). */
static void gemm_bf16_on(gpu_ctx *c, int lane, int ta, int tb, int m, int n, int k, double alpha,
                         const void *a, int lda, const void *bm, int ldb, double beta, void *cm,
                         int ldc, int c_half)
{
    if (m <= 0 || n <= 0 || !usable(c))
        return;
    if (k <= 0) {
        if (ldc < n) {
            record(c, MP_ERR_ARG, __FILE__, __LINE__, "cuda gemm (bf16): ldc %d < n %d", ldc, n);
            return;
        }
        k_beta_rows<<<grid_for(c, (size_t)m, ROWS_PER_BLOCK), THREADS, 0, c->lane_stream[lane]>>>(
            cm, c_half, ldc, m, n, (float)beta);
        LAUNCHED(c, "k_beta_rows");
        return;
    }
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
    const float al = (float)alpha, be = (float)beta;
    cublasStatus_t s = cublasGemmEx(c->lane_blas[lane], tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &al, bm, CUDA_R_16BF,
                                    ldb, a, CUDA_R_16BF, lda, &be, cm,
                                    c_half ? CUDA_R_16BF : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        record(c, s == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM : MP_ERR_INTERNAL, __FILE__,
               __LINE__, "cuBLAS error: %s (%s) in gemm on bf16 operands ta=%d tb=%d m=%d n=%d "
               "k=%d lda=%d ldb=%d ldc=%d, C %s", cublasGetStatusString(s),
               cublasGetStatusName(s), ta, tb, m, n, k, lda, ldb, ldc,
               c_half ? "bf16" : "fp32");
}

/* As cu_gemm_batch (ops_cuda.cu): even products on the main stream, odd on
 * the side stream, forked and joined by events. */
static void cu_gemm_batch_bf16(mp_backend *b, int count, const mp_gemm *g, unsigned c_bf16)
{
    gpu_ctx *c = CTX(b);
    if (count <= 0 || !usable(c))
        return;
    if (count == 1) {
        gemm_bf16_on(c, 0, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb,
                     g->beta, g->c, g->ldc, (int)(c_bf16 & 1u));
        return;
    }
    if (!CUDA_OK(c, cudaEventRecord(c->ev_fork, c->stream)) ||
        !CUDA_OK(c, cudaStreamWaitEvent(c->side, c->ev_fork, 0)))
        return;
    for (int i = 0; i < count; i++)
        gemm_bf16_on(c, i & 1, g[i].ta, g[i].tb, g[i].m, g[i].n, g[i].k, g[i].alpha, g[i].a,
                     g[i].lda, g[i].b, g[i].ldb, g[i].beta, g[i].c, g[i].ldc,
                     (int)((c_bf16 >> i) & 1u));
    if (CUDA_OK(c, cudaEventRecord(c->ev_join, c->side)))
        CUDA_OK(c, cudaStreamWaitEvent(c->stream, c->ev_join, 0));
}

static void relu_bf16(gpu_ctx *c, bf16 *y, const bf16 *x, size_t n, uint32_t thr, float scale,
                      uint64_t key);

static void cu_gemm_res_relu_bf16(mp_backend *b, int m, int n, int k, const void *a, int lda,
                                  const void *w, int ldw, const void *r, int ldr, void *cm,
                                  int ldc, int rc_bf16)
{
    gpu_ctx *c = CTX(b);
    if (m <= 0 || n <= 0 || !usable(c))
        return;
    if (cm == r && ldc != ldr) {
        record(c, MP_ERR_ARG, __FILE__, __LINE__,
               "cuda gemm_res_relu (bf16): c == r needs ldc == ldr (%d != %d)", ldc, ldr);
        return;
    }
    const cudaDataType_t cd = rc_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (k > 0 && mp_cu_lt_res_relu(c, CUDA_R_16BF, cd, CUBLAS_COMPUTE_32F, m, n, k, a, lda, w, ldw,
                                   r, ldr, cm, ldc))
        return;
    /* No Lt algorithm: copy, product (beta 1), ReLU row by row. */
    if (!rc_bf16) {
        if (cm != r)
            b->copy2d(b, cm, ldc, r, ldr, m, n);
        gemm_bf16_on(c, 0, 0, 0, m, n, k, 1.0, a, lda, w, ldw, 1.0, cm, ldc, 0);
        for (int i = 0; i < m; i += ldc == n ? m : 1) {
            float *row = (float *)cm + (size_t)i * ldc;
            b->relu_dropout(b, row, row, ldc == n ? (size_t)m * n : (size_t)n, 0.0, 0);
        }
        return;
    }
    if (cm != r && !CUDA_OK(c, cudaMemcpy2DAsync(cm, (size_t)ldc * 2, r, (size_t)ldr * 2,
                                                 (size_t)n * 2, (size_t)m,
                                                 cudaMemcpyDeviceToDevice, c->stream)))
        return;
    gemm_bf16_on(c, 0, 0, 0, m, n, k, 1.0, a, lda, w, ldw, 1.0, cm, ldc, 1);
    for (int i = 0; i < m && usable(c); i += ldc == n ? m : 1) {
        bf16 *row = (bf16 *)cm + (size_t)i * ldc;
        relu_bf16(c, row, row, ldc == n ? (size_t)m * n : (size_t)n, 0, 0.0f, 0);
    }
}

/* ===================================================================== */
/* Row ops on bf16                                                        */
/* ===================================================================== */

/* 8-byte bf16 accesses need the bf16 base 8-byte aligned (rows of
 * h % 4 == 0 elements keep it); the fp32 bases 16-byte aligned as in vec4. */
static inline int al8(const void *p) { return ((uintptr_t)p & 7) == 0; }

/* As LAUNCH_ROWS, for a kernel templated on <V, T> (T: the type of M). */
#define LAUNCH_ROWS_T(c, v4, rows, h, kern, T, ...)                                        \
    do {                                                                                  \
        size_t items_ = (size_t)(rows) * (size_t)((h) / ((v4) ? 4 : 1));                   \
        unsigned grid_ = grid_for((c), items_, THREADS);                                  \
        if (v4)                                                                           \
            kern<4, T><<<grid_, THREADS, 0, (c)->stream>>>(__VA_ARGS__);                  \
        else                                                                              \
            kern<1, T><<<grid_, THREADS, 0, (c)->stream>>>(__VA_ARGS__);                  \
    } while (0)

static void relu_bf16(gpu_ctx *c, bf16 *y, const bf16 *x, size_t n, uint32_t thr, float scale,
                      uint64_t key)
{
    LAUNCH_ROWS(c, al8(y) && al8(x), 1, n, k_relu_dropout_bf16, y, x, n, thr, scale, key);
    LAUNCHED(c, "k_relu_dropout_bf16");
}

static void cu_relu_dropout_bf16(mp_backend *b, void *y, const void *x, size_t n, double p,
                                 uint64_t key)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    /* threshold and scale exactly as cu_relu_dropout computes them */
    uint32_t thr = mp_dropout_threshold(p);
    float scale = thr && p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    relu_bf16(c, (bf16 *)y, (const bf16 *)x, n, thr, scale, key);
}

static void cu_edge_embed_relu_bf16(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                                    const int8_t *bond_hot, const void *a, const void *wb,
                                    int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_edges <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, a, wb) && al8(h0) && al8(m0), n_edges, h, k_edge_embed_relu_bf16,
                (bf16 *)h0, (bf16 *)m0, edge_src, bond_hot, (const float *)a, (const float *)wb,
                n_edges, h);
    LAUNCHED(c, "k_edge_embed_relu_bf16");
}

static void cu_to_bf16(mp_backend *b, void *dst, const void *src, size_t n)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    LAUNCH_ROWS(c, al8(dst) && al16(src), 1, n, k_to_bf16, (bf16 *)dst, (const float *)src, n);
    LAUNCHED(c, "k_to_bf16");
}

static void cu_relu_dropout_backward_bf16(mp_backend *b, void *dx, void *dxh, const void *y,
                                          const void *dy, size_t n, double p)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    /* the scale exactly as cu_relu_dropout_backward computes it */
    int scaled = p > 0 && p < 1;
    float scale = scaled ? (float)(1.0 / (1.0 - p)) : 1.0f;
    LAUNCH_ROWS(c, al16(dx) && al16(y) && al16(dy) && al8(dxh), 1, n,
                k_relu_dropout_backward_bf16, (float *)dx, (bf16 *)dxh, (const float *)y,
                (const float *)dy, n, scale, scaled);
    LAUNCHED(c, "k_relu_dropout_backward_bf16");
}

static void cu_atom_sum_backward_relu_bf16(mp_backend *b, void *dx, void *dxh,
                                           const int32_t *edge_dst, const void *da,
                                           const void *y, int y_bf16, double p, int32_t n_edges,
                                           int h)
{
    gpu_ctx *c = CTX(b);
    if (n_edges <= 0 || h <= 0 || !usable(c))
        return;
    int scaled = p > 0 && p < 1;
    float scale = scaled ? (float)(1.0 / (1.0 - p)) : 1.0f;
    int v4 = vec4(h, dx, da) && al8(dxh) && (y_bf16 ? al8(y) : al16(y));
    if (y_bf16)
        LAUNCH_ROWS_T(c, v4, n_edges, h, k_gather_relu_bf16, bf16, (float *)dx, (bf16 *)dxh,
                      edge_dst, (const float *)da, (const bf16 *)y, n_edges, h, scale, scaled);
    else
        LAUNCH_ROWS_T(c, v4, n_edges, h, k_gather_relu_bf16, float, (float *)dx, (bf16 *)dxh,
                      edge_dst, (const float *)da, (const float *)y, n_edges, h, scale, scaled);
    LAUNCHED(c, "k_gather_relu_bf16");
}

/* out (fp32) = CSR segment sums of x (fp32, or bf16 when x_bf16). */
static void segsum(gpu_ctx *c, float *out, const int32_t *in_start, const int32_t *in_edge,
                   const void *x, int x_bf16, int32_t n_atoms, int h, int32_t flip)
{
    int v4 = vec4(h, out) && (x_bf16 ? al8(x) : al16(x));
    if (x_bf16)
        LAUNCH_ROWS_T(c, v4, n_atoms, h, k_segsum, bf16, out, in_start, in_edge,
                      (const bf16 *)x, n_atoms, h, flip);
    else
        LAUNCH_ROWS_T(c, v4, n_atoms, h, k_segsum, float, out, in_start, in_edge,
                      (const float *)x, n_atoms, h, flip);
    LAUNCHED(c, "k_segsum");
}

static void cu_message_bf16(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                            const int32_t *in_edge, const int32_t *edge_src, const void *m,
                            int m_bf16, int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segsum(c, (float *)s, in_start, in_edge, m, m_bf16, n_atoms, h, 0);
    if (n_edges > 0 && usable(c)) {
        int v4 = vec4(h, s) && al8(msg) && (m_bf16 ? al8(m) : al16(m));
        if (m_bf16)
            LAUNCH_ROWS_T(c, v4, n_edges, h, k_gather_sub_rev_bf16, bf16, (bf16 *)msg,
                          (const float *)s, edge_src, (const bf16 *)m, n_edges, h);
        else
            LAUNCH_ROWS_T(c, v4, n_edges, h, k_gather_sub_rev_bf16, float, (bf16 *)msg,
                          (const float *)s, edge_src, (const float *)m, n_edges, h);
        LAUNCHED(c, "k_gather_sub_rev_bf16");
    }
}

static void cu_atom_sum_bf16(mp_backend *b, void *a, const int32_t *in_start,
                             const int32_t *in_edge, const void *m, int m_bf16, int32_t n_atoms,
                             int h)
{
    gpu_ctx *c = CTX(b);
    if (n_atoms <= 0 || h <= 0 || !usable(c))
        return;
    int v4 = h % 4 == 0 && al8(a) && (m_bf16 ? al8(m) : al16(m));
    if (m_bf16)
        LAUNCH_ROWS_T(c, v4, n_atoms, h, k_segment_sum_bf16, bf16, (bf16 *)a, in_start, in_edge,
                      (const bf16 *)m, n_atoms, h);
    else
        LAUNCH_ROWS_T(c, v4, n_atoms, h, k_segment_sum_bf16, float, (bf16 *)a, in_start, in_edge,
                      (const float *)m, n_atoms, h);
    LAUNCHED(c, "k_segment_sum_bf16");
}

static void cu_message_backward_relu_bf16(mp_backend *b, void *dzh, void *dh0, void *ds,
                                          const int32_t *in_start, const int32_t *in_edge,
                                          const int32_t *edge_dst, const void *dmsg,
                                          const void *y, int y_bf16, double p, int32_t n_atoms,
                                          int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segsum(c, (float *)ds, in_start, in_edge, dmsg, 1, n_atoms, h, 1);
    if (n_edges > 0 && usable(c)) {
        int scaled = p > 0 && p < 1;
        float scale = scaled ? (float)(1.0 / (1.0 - p)) : 1.0f;
        int v4 = vec4(h, dh0, ds) && al8(dzh) && al8(dmsg) && (y_bf16 ? al8(y) : al16(y));
        if (y_bf16)
            LAUNCH_ROWS_T(c, v4, n_edges, h, k_gather_sub_rev_relu_bf16, bf16, (bf16 *)dzh,
                          (float *)dh0, (const float *)ds, edge_dst, (const bf16 *)dmsg,
                          (const bf16 *)y, n_edges, h, scale, scaled);
        else
            LAUNCH_ROWS_T(c, v4, n_edges, h, k_gather_sub_rev_relu_bf16, float, (bf16 *)dzh,
                          (float *)dh0, (const float *)ds, edge_dst, (const bf16 *)dmsg,
                          (const float *)y, n_edges, h, scale, scaled);
        LAUNCHED(c, "k_gather_sub_rev_relu_bf16");
    }
}

/* ===================================================================== */
/* Registration                                                           */
/* ===================================================================== */

void mp_cu_bf16_ops(mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c || c->prec != MP_PREC_BF16)
        return;
    b->half_acts = 1;
    b->to_bf16 = cu_to_bf16;
    b->gemm_batch_bf16 = cu_gemm_batch_bf16;
    b->gemm_res_relu_bf16 = cu_gemm_res_relu_bf16;
    b->message_bf16 = cu_message_bf16;
    b->atom_sum_bf16 = cu_atom_sum_bf16;
    b->relu_dropout_backward_bf16 = cu_relu_dropout_backward_bf16;
    b->message_backward_relu_bf16 = cu_message_backward_relu_bf16;
    b->atom_sum_backward_relu_bf16 = cu_atom_sum_backward_relu_bf16;
    b->edge_embed_relu_bf16 = cu_edge_embed_relu_bf16;
    b->relu_dropout_bf16 = cu_relu_dropout_bf16;
}
