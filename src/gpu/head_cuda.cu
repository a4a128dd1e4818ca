/*
 * head_cuda.cu - the FFN head of a small batch in one kernel each way (ops.h
 * head_forward, head_backward; the head's form is ops.h's mp_head).
 *
 * At Chemprop's batch of 50 the head is tiny (a 50 x 300 input, 300 x 300
 * weights), but ffn.c issues it as about fifteen launches: per layer a bias
 * copy, a product (cuBLAS, split-K, with its reduction) and the ReLU, and
 * backward a column sum, the two products of each layer and the ReLU's
 * backward, each a few microseconds of latency around little work.  Here a
 * cluster of HD_C blocks does the whole forward, and another the backward.
 * The hidden width f is split into HD_C column slices, block j owning
 * [f j / C, f (j + 1) / C):
 *
 *   forward   hid[:, s_j] = ReLU(x W_0[:, s_j] + b_0)   (kept in shared memory)
 *             P_j = hid[:, s_j] W_1[s_j, :]              (its part of out)
 *             out = b_1 + P_0 + ... + P_{C-1}            (read across the cluster)
 *   backward  dW_1[s_j, :] += hid[:, s_j]^T dy,  db_1 += column sums of dy
 *             Z = dy W_1[s_j, :]^T where hid[:, s_j] > 0  (dz_0's slice, shared memory)
 *             db_0[s_j] += column sums of Z,  dW_0[:, s_j] += x^T Z
 *             P_j = Z W_0[0:want, s_j]^T,  dx = P_0 + ... + P_{C-1}
 *
 * so a block needs only its own slice until the two sums over the cluster:
 * each block writes its P_j to the backend's scratch, and after the
 * cluster's barrier (release / acquire at cluster scope) reads all of them
 * through L2 (__ldcg), for its share of out's or dx's elements.  A head of
 * one layer splits out's (or dx's) columns instead and needs no barrier.
 *
 * Each product runs on the tensor cores, in 3xTF32 (three tf32 products of
 * the operands' high and low parts, fp32 sums: fp32's accuracy to ~2^-22
 * per product), its warps reading their fragments straight from memory:
 * the operands are a few hundred KB, so L1 and L2 serve them, and nothing
 * is staged (a first form staged 64 x 32 stages through shared memory with
 * 4-byte cp.async: 24 and 52 us for the two kernels at batch 50, the
 * staging's instructions the bound).  fp32 rather than the precision's
 * operands because the unfused head behaves as fp32: cuBLAS's FAST_TF32 /
 * FAST_16BF modes allow rounding the operands, not require it, and a head
 * in bf16 operands moved a 50-step ESOL run out of the bf16-vs-fp32 bound
 * of tests/test_gpu_ops.c that the unfused head stays within.  Each
 * output is one sum in a fixed order, so the bits are the same run to run
 * and in a CUDA graph (they depend on HD_C through the order of the two
 * cluster sums).
 *
 * Taken: the precisions tf32 and bf16 (at fp32 the head keeps cuBLAS's
 * exact products, which the comparisons with the CPU rely on), 1 or 2
 * layers, at most HD_ROWS molecules, f up to HD_MAX_F (a slice of at most
 * 64 columns), d0 up to HD_MAX_D0, and n t and n want at most HD_PART.
 * MOLPROP_CUDA_HEAD=0 at open leaves the head unfused (for comparisons).
 */
#include "gpu/cuda_ctx.cuh"
#include "gpu/mma.cuh"

#include <cooperative_groups.h>
#include <stdlib.h>
#include <string.h>

namespace cg = cooperative_groups;

#define HD_C 8                  /* blocks of the cluster                        */
#define HD_ROWS 128             /* most molecules a fused head takes            */
#define HD_MAX_F 512            /* widest hidden layer: slices of <= 64 columns */
#define HD_MAX_D0 1024          /* widest input                                 */
#define HD_PART 65536           /* most elements of out or dx (n t, n want)      */
#define HD_SLD 68               /* row stride of the slice kept in shared memory */

static_assert((size_t)HD_C * HD_PART <= SCRATCH_ELEMS, "the partial sums fit the scratch");


/* Everything a launch needs, by value. */
struct head_args {
    int          L, n, d0, ldx, f, t, want;
    const float *x, *dy;
    float       *out, *dx;
    const float *w[2], *b[2];
    float       *dw[2], *db[2], *hid;
    float       *part;          /* the blocks' P_j: scratch, HD_C x n x (t or want) */
};

/* ===================================================================== */
/* Operands and one block's product                                      */
/* ===================================================================== */

/* An operand of C[i][c] = sum_k A(i, k) Bt(c, k): element (i, k) at
 * p[i * ld + k], or at p[k * ld + i] for a transposed one (the template
 * flags of product say which, and whether p is global memory written by an
 * earlier kernel, staged through shared memory, or this block's shared
 * memory, read in place). */
struct opnd {
    const float *p;
    int          ld;
};

/* The stages: an operand's 64 rows x HD_KC k, laid as in memory so that
 * 16-byte cp.async can copy them: [i][k] (row stride SA) when k is the
 * contiguous index, [k][i] (SB) when i is.  The strides put a fragment's
 * 32 loads on 32 banks (4 g + t, 8 t + g). */
#define HD_KC 32
#define HD_NS 3
#define SA (HD_KC + 4)
#define SB (64 + 8)
#define HD_OPND_FLOATS (64 * SA > HD_KC * SB ? 64 * SA : HD_KC * SB)
#define HD_STAGE_FLOATS (2 * HD_OPND_FLOATS)

/* Element (i, k) of a stage or of an in-place operand. */
template <bool TRANS>
__device__ __forceinline__ float at(const float *s, int ld, int i, int k)
{
    return TRANS ? s[k * ld + i] : s[i * ld + k];
}

/* Rows [i0, i0 + 64) x k [k0, k0 + HD_KC) of a global operand (i < R, k <
 * K) into stage s, zeros outside; 16 bytes a copy where the four elements
 * are in range and v16 (ld a multiple of 4, p 16-byte aligned). */
template <bool TRANS>
__device__ __forceinline__ void stage_in(float *s, const opnd &o, int v16, int i0, int R, int k0,
                                         int K)
{
    for (int ch = threadIdx.x; ch < 64 * HD_KC / 4; ch += THREADS) {
        int i, k;
        float *dst;
        if (TRANS) {            /* four consecutive i */
            k = ch / 16;
            i = ch % 16 * 4;
            dst = s + k * SB + i;
        } else {                /* four consecutive k */
            i = ch / (HD_KC / 4);
            k = ch % (HD_KC / 4) * 4;
            dst = s + i * SA + k;
        }
        const int gi = i0 + i, gk = k0 + k;
        const float *src = TRANS ? o.p + (size_t)gk * o.ld + gi : o.p + (size_t)gi * o.ld + gk;
        if (v16 && (TRANS ? gk < K && gi + 3 < R : gi < R && gk + 3 < K)) {
            cp_async<16>(dst, src, 1);
        } else {
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int ok = TRANS ? gk < K && gi + q < R : gi < R && gk + q < K;
                cp_async<4>(dst + q, ok ? src + q : o.p, ok);
            }
        }
    }
}

/* x as the high and low tf32 parts of 3xTF32: x = hi + lo + O(2^-22 x). */
__device__ __forceinline__ void split(float x, uint32_t *hi, uint32_t *lo)
{
    uint32_t h;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(h) : "f"(x));
    float r = x - __uint_as_float(h);
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(*lo) : "f"(r));
    *hi = h;
}

/* d += a b for one 16 x 8 x 8 tile, tf32 operands, fp32 sums. */
__device__ __forceinline__ void mma1688(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/*
 * One block's product C[i][c] = sum_k A(i, k) Bt(c, k), i < R, c < W, k <
 * K, handing every output to epi(i, c, value, pre(i, c)).  TA / TB: the
 * operand is transposed; AS / BS: it is in this block's shared memory,
 * read in place (zero past R or W and K, as far as the k steps reach);
 * else it comes through the stages.  Output tiles of 64 x 64, one 16 x 32
 * part a warp; the stages run through the (tile, k chunk) pairs in order,
 * HD_NS - 1 ahead of the products.  Each product is 3xTF32 on the tensor
 * cores: a b = a_lo b_hi + a_hi b_lo + a_hi b_hi, each m16n8k8, fp32 sums
 * (fp32's accuracy to ~2^-22 a product).  pre's loads (a bias, the
 * gradient added to, the ReLU's mask) go out at a tile's first stage,
 * before any of epi's stores.  Every thread of the block must call it.
 */
template <bool TA, bool TB, bool AS, bool BS, typename PRE, typename EPI>
__device__ void product(float *stages, const opnd &A, const opnd &Bt, int R, int W, int K,
                        PRE pre, EPI epi)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3, m0 = 16 * (w & 3), n0 = 32 * (w >> 2);
    const int nr = (R + 63) / 64, nc = (W + 63) / 64, nk = (K + HD_KC - 1) / HD_KC;
    const int S = nr * nc * nk;
    const int va = !AS && A.ld % 4 == 0 && ((uintptr_t)A.p & 15) == 0;
    const int vb = !BS && Bt.ld % 4 == 0 && ((uintptr_t)Bt.p & 15) == 0;
    float acc[4][4], old[4][4];
    if (K <= 0) {               /* an empty sum: every output 0 */
        for (int e = threadIdx.x; e < R * W; e += THREADS)
            epi(e / W, e % W, 0.0f, pre(e / W, e % W));
        __syncthreads();
        return;
    }
    for (int s = 0; s < S + HD_NS - 1; s++) {
        /* stage s in; then the product of stage s - (HD_NS - 1) */
        const int sn = s;
        if (sn < S) {
            float *st = stages + (sn % HD_NS) * HD_STAGE_FLOATS;
            const int tile = sn / nk, k0 = sn % nk * HD_KC;
            if (!AS)
                stage_in<TA>(st, A, va, tile / nc * 64, R, k0, K);
            if (!BS)
                stage_in<TB>(st + HD_OPND_FLOATS, Bt, vb, tile % nc * 64, W, k0, K);
        }
        cp_commit();
        if (s < HD_NS - 1)
            continue;
        const int sc = s - (HD_NS - 1);      /* the stage multiplied now */
        cp_wait<HD_NS - 1>();
        __syncthreads();
        const int tile = sc / nk, kc = sc % nk, r0 = tile / nc * 64, c0 = tile % nc * 64;
        const int k0 = kc * HD_KC, rows = R - r0, cols = W - c0;
        const int nts = cols - n0 >= 32 ? 4 : cols > n0 ? (cols - n0 + 7) / 8 : 0;
        if (kc == 0)
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int i = m0 + g + 8 * (q >> 1), c = n0 + 8 * nt + 2 * t + (q & 1);
                    acc[nt][q] = 0.0f;
                    old[nt][q] = i < rows && c < cols ? pre(r0 + i, c0 + c) : 0.0f;
                }
        if (m0 < rows && nts > 0) {
            const float *sa = stages + (sc % HD_NS) * HD_STAGE_FLOATS, *sb = sa + HD_OPND_FLOATS;
            /* the stage's k (or, in place, the operand's, offset to this stage) */
            const float *pa = AS ? A.p + (TA ? (size_t)(k0 * A.ld + r0) : (size_t)(r0 * A.ld + k0))
                                 : sa;
            const float *pb = BS ? Bt.p + (TB ? (size_t)(k0 * Bt.ld + c0)
                                              : (size_t)(c0 * Bt.ld + k0))
                                 : sb;
            const int la = AS ? A.ld : TA ? SB : SA, lb = BS ? Bt.ld : TB ? SB : SA;
            const int kin = min(HD_KC, K - k0);
            for (int k = 0; k < kin; k += 8) {
                uint32_t ah[4], al[4];
                split(at<TA>(pa, la, m0 + g, k + t), &ah[0], &al[0]);
                split(at<TA>(pa, la, m0 + g + 8, k + t), &ah[1], &al[1]);
                split(at<TA>(pa, la, m0 + g, k + t + 4), &ah[2], &al[2]);
                split(at<TA>(pa, la, m0 + g + 8, k + t + 4), &ah[3], &al[3]);
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    if (nt < nts) {
                        const int c = n0 + 8 * nt + g;
                        uint32_t bh0, bl0, bh1, bl1;
                        split(at<TB>(pb, lb, c, k + t), &bh0, &bl0);
                        split(at<TB>(pb, lb, c, k + t + 4), &bh1, &bl1);
                        mma1688(acc[nt], al, bh0, bh1);
                        mma1688(acc[nt], ah, bl0, bl1);
                        mma1688(acc[nt], ah, bh0, bh1);
                    }
                }
            }
        }
        if (kc == nk - 1 && m0 < rows)
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int i = m0 + g + 8 * (q >> 1), c = n0 + 8 * nt + 2 * t + (q & 1);
                    if (i < rows && c < cols)
                        epi(r0 + i, c0 + c, acc[nt][q], old[nt][q]);
                }
        __syncthreads();                    /* stage sc read: free for reuse */
    }
}

/* The pre of an epilogue that loads nothing. */
struct no_pre {
    __device__ float operator()(int, int) const { return 0.0f; }
};
#define nothing no_pre()

/* Block j's share of N, in groups of 4 (16-byte copies line up). */
__device__ __forceinline__ void slice(int N, int j, int *lo, int *hi)
{
    const int groups = (N + 3) / 4;
    *lo = min(N, 4 * (groups * j / HD_C));
    *hi = min(N, 4 * (groups * (j + 1) / HD_C));
}

/* out(e, init(e) + P_0[e] + ... + P_{C-1}[e]) for e < count (P_r = part +
 * r count, written by block r before the barrier), the elements dealt out
 * over the blocks. */
template <typename INIT, typename OUT>
__device__ void cluster_sum(cg::cluster_group &cl, const float *part, int count, INIT init,
                            OUT out)
{
    cl.sync();                              /* every P_j written and visible */
    const int j = (int)cl.block_rank(), step = HD_C * THREADS;
    /* four elements a round: their 4 HD_C loads in flight together */
    for (int e0 = j * THREADS + (int)threadIdx.x; e0 < count; e0 += 4 * step) {
        float v[4];
#pragma unroll
        for (int q = 0; q < 4; q++)
            v[q] = e0 + q * step < count ? init(e0 + q * step) : 0.0f;
#pragma unroll
        for (int r = 0; r < HD_C; r++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (e0 + q * step < count)
                    v[q] += __ldcg(part + (size_t)r * count + e0 + q * step);
#pragma unroll
        for (int q = 0; q < 4; q++)
            if (e0 + q * step < count)
                out(e0 + q * step, v[q]);
    }
}

/* ===================================================================== */
/* The kernels                                                            */
/* ===================================================================== */

/* Dynamic shared memory: the stages, then the block's slice (hid's or
 * dz_0's), zero wherever it is not written (products read it in place). */
#define HD_SMEM_BYTES ((HD_NS * HD_STAGE_FLOATS + HD_ROWS * HD_SLD) * 4)

__device__ __forceinline__ float *slice_buf(float *smem)
{
    float *z = smem + HD_NS * HD_STAGE_FLOATS;
    for (int e = threadIdx.x; e < HD_ROWS * HD_SLD; e += THREADS)
        z[e] = 0.0f;
    __syncthreads();
    return z;
}

__global__ void __launch_bounds__(THREADS) k_head_forward(head_args a)
{
    extern __shared__ __align__(16) float smem[];
    cg::cluster_group cl = cg::this_cluster();
    const int j = (int)cl.block_rank(), n = a.n, f = a.f, t = a.t;
    if (a.L == 1) {
        /* out's columns [t0, t1) */
        int t0, t1;
        slice(t, j, &t0, &t1);
        const float *b0 = a.b[0];
        float *out = a.out;
        product<false, true, false, false>(smem, opnd{ a.x, a.ldx }, opnd{ a.w[0] + t0, t }, n,
                                           t1 - t0, a.d0,
                   [&](int r, int c) { return b0[t0 + c]; },
                   [&](int r, int c, float v, float b) { out[(size_t)r * t + t0 + c] = v + b; });
        return;
    }
    int f0, f1;
    slice(f, j, &f0, &f1);
    const int wj = f1 - f0;
    const float *b0 = a.b[0];
    float *hid = a.hid;
    float *H = slice_buf(smem);
    product<false, true, false, false>(smem, opnd{ a.x, a.ldx }, opnd{ a.w[0] + f0, f }, n, wj,
                                       a.d0,
               [&](int r, int c) { return b0[f0 + c]; },
               [&](int r, int c, float v, float b) {
                   v = fmaxf(v + b, 0.0f);
                   hid[(size_t)r * f + f0 + c] = v;
                   H[r * HD_SLD + c] = v;
               });
    __syncthreads();
    float *Pj = a.part + (size_t)j * n * t;
    product<false, true, true, false>(smem, opnd{ H, HD_SLD }, opnd{ a.w[1] + (size_t)f0 * t, t },
                                      n, t, wj, nothing,
               [&](int r, int c, float v, float) { Pj[r * t + c] = v; });
    const float *b1 = a.b[1];
    float *out = a.out;
    cluster_sum(cl, a.part, n * t, [&](int e) { return b1[e % t]; },
                [&](int e, float v) { out[e] = v; });
}

__global__ void __launch_bounds__(THREADS) k_head_backward(head_args a)
{
    extern __shared__ __align__(16) float smem[];
    cg::cluster_group cl = cg::this_cluster();
    const int j = (int)cl.block_rank(), n = a.n, f = a.f, t = a.t, want = a.want;
    const float *dy = a.dy;
    /* the last layer's bias: its columns dealt out over the blocks */
    {
        float *db = a.db[a.L - 1];
        for (int c = j * THREADS + (int)threadIdx.x; c < t; c += HD_C * THREADS) {
            float s = 0.0f;
            for (int r = 0; r < n; r++)
                s += dy[(size_t)r * t + c];
            db[c] += s;
        }
    }
    if (a.L == 1) {
        /* dW_0's rows [i0, i1), and dx's columns [c0, c1) */
        int i0, i1, c0, c1;
        slice(a.d0, j, &i0, &i1);
        float *dw = a.dw[0], *dx = a.dx;
        product<true, true, false, false>(smem, opnd{ a.x + i0, a.ldx }, opnd{ dy, t }, i1 - i0, t,
                                          n,
                   [&](int i, int c) { return dw[(size_t)(i0 + i) * t + c]; },
                   [&](int i, int c, float v, float o) { dw[(size_t)(i0 + i) * t + c] = o + v; });
        slice(want, j, &c0, &c1);
        const int ldx = a.ldx;
        product<false, false, false, false>(smem, opnd{ dy, t }, opnd{ a.w[0] + (size_t)c0 * t, t },
                                            n, c1 - c0, t,
                   nothing, [&](int r, int c, float v, float) { dx[(size_t)r * ldx + c0 + c] = v; });
        return;
    }
    int f0, f1;
    slice(f, j, &f0, &f1);
    const int wj = f1 - f0;
    const float *hid = a.hid;
    /* dW_1[s_j, :] += hid[:, s_j]^T dy */
    float *dw1 = a.dw[1];
    float *Z = slice_buf(smem);
    product<true, true, false, false>(smem, opnd{ hid + f0, f }, opnd{ dy, t }, wj, t, n,
               [&](int i, int c) { return dw1[(size_t)(f0 + i) * t + c]; },
               [&](int i, int c, float v, float o) { dw1[(size_t)(f0 + i) * t + c] = o + v; });
    /* Z = dy W_1[s_j, :]^T through the ReLU's mask */
    product<false, false, false, false>(smem, opnd{ dy, t }, opnd{ a.w[1] + (size_t)f0 * t, t }, n,
                                        wj, t,
               [&](int r, int c) { return hid[(size_t)r * f + f0 + c]; },
               [&](int r, int c, float v, float y) { Z[r * HD_SLD + c] = y > 0.0f ? v : 0.0f; });
    __syncthreads();
    /* db_0[s_j] += column sums of Z */
    float *db0 = a.db[0];
    for (int c = (int)threadIdx.x; c < wj; c += THREADS) {
        float s = 0.0f;
        for (int r = 0; r < n; r++)
            s += Z[r * HD_SLD + c];
        db0[f0 + c] += s;
    }
    /* dW_0[:, s_j] += x^T Z */
    float *dw0 = a.dw[0];
    product<true, true, false, true>(smem, opnd{ a.x, a.ldx }, opnd{ Z, HD_SLD }, a.d0, wj, n,
               [&](int i, int c) { return dw0[(size_t)i * f + f0 + c]; },
               [&](int i, int c, float v, float o) { dw0[(size_t)i * f + f0 + c] = o + v; });
    if (want <= 0)
        return;
    /* dx = sum over the cluster of Z W_0[0:want, s_j]^T */
    float *Pj = a.part + (size_t)j * n * want;
    product<false, false, true, false>(smem, opnd{ Z, HD_SLD }, opnd{ a.w[0] + f0, f }, n, want,
                                       wj, nothing,
               [&](int r, int c, float v, float) { Pj[r * want + c] = v; });
    float *dx = a.dx;
    const int ldx = a.ldx;
    cluster_sum(cl, a.part, n * want, [&](int e) { return 0.0f; },
                [&](int e, float v) { dx[(size_t)(e / want) * ldx + e % want] = v; });
}

/* ===================================================================== */
/* Host side                                                              */
/* ===================================================================== */

typedef void (*head_kernel)(head_args);


/* The launch shape: one cluster of HD_C blocks. */
static cudaLaunchConfig_t config(cudaStream_t stream, cudaLaunchAttribute *at)
{
    cudaLaunchConfig_t cfg = {};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = HD_C;
    at->val.clusterDim.y = 1;
    at->val.clusterDim.z = 1;
    cfg.gridDim = dim3(HD_C, 1, 1);
    cfg.blockDim = dim3(THREADS, 1, 1);
    cfg.dynamicSmemBytes = HD_SMEM_BYTES;
    cfg.stream = stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cfg;
}

/* 1 when the head's sizes are fused (ops.h). */
static int takes(const gpu_ctx *c, const mp_head *hd, int want)
{
    const long n = hd->n;
    return c->head_cluster > 0 && (hd->n_layers == 1 || hd->n_layers == 2) && n >= 1 &&
           n <= HD_ROWS && hd->d0 >= 1 && hd->d0 <= HD_MAX_D0 && hd->ldx >= hd->d0 &&
           hd->t >= 1 && n * hd->t <= HD_PART && want >= 0 && want <= hd->d0 &&
           n * want <= HD_PART && (hd->n_layers == 1 || (hd->f >= 1 && hd->f <= HD_MAX_F));
}

static head_args args_of(gpu_ctx *c, const mp_head *hd)
{
    head_args a;
    memset(&a, 0, sizeof a);
    a.L = hd->n_layers;
    a.n = hd->n;
    a.d0 = hd->d0;
    a.ldx = hd->ldx;
    a.f = hd->f;
    a.t = hd->t;
    for (int l = 0; l < hd->n_layers; l++) {
        a.w[l] = (const float *)hd->w[l];
        a.b[l] = (const float *)hd->bias[l];
        a.dw[l] = (float *)hd->dw[l];
        a.db[l] = (float *)hd->db[l];
    }
    a.hid = (float *)hd->hid[0];
    a.part = c->scratch;
    return a;
}

static void launch(gpu_ctx *c, head_kernel k, const head_args &a)
{
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = config(c->stream, &at);
    CUDA_OK(c, cudaLaunchKernelEx(&cfg, k, a));
}

static int cu_head_forward(mp_backend *b, void *out, const void *x, const mp_head *hd)
{
    gpu_ctx *c = CTX(b);
    if (!takes(c, hd, 0))
        return 0;
    if (!usable(c))
        return 1;
    head_args a = args_of(c, hd);
    a.x = (const float *)x;
    a.out = (float *)out;
    launch(c, k_head_forward, a);
    LAUNCHED(c, "k_head_forward");
    c->head_calls++;
    return 1;
}

static int cu_head_backward(mp_backend *b, void *dx, int want_cols, const void *dy,
                            const void *x, const mp_head *hd)
{
    gpu_ctx *c = CTX(b);
    if (!takes(c, hd, want_cols))
        return 0;
    if (!usable(c))
        return 1;
    head_args a = args_of(c, hd);
    a.x = (const float *)x;
    a.dy = (const float *)dy;
    a.dx = (float *)dx;
    a.want = want_cols;
    launch(c, k_head_backward, a);
    LAUNCHED(c, "k_head_backward");
    c->head_calls++;
    return 1;
}

/* 1 when both kernels run here as clusters of HD_C blocks (asked once, at
 * open: not a stream operation, so never inside a capture). */
static int fits(gpu_ctx *c)
{
    head_kernel ks[2] = { k_head_forward, k_head_backward };
    for (int i = 0; i < 2; i++) {
        int clusters = 0;
        cudaLaunchAttribute at;
        cudaLaunchConfig_t cfg = config(c->stream, &at);
        if (cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 HD_SMEM_BYTES) != cudaSuccess ||
            cudaOccupancyMaxActiveClusters(&clusters, ks[i], &cfg) != cudaSuccess ||
            clusters < 1) {
            (void)cudaGetLastError();   /* not this device's: the head stays unfused */
            return 0;
        }
    }
    return 1;
}

/* The ops on b as c->head_cluster says. */
static void set_ops(mp_backend *b)
{
    int on = CTX(b)->head_cluster > 0;
    b->head_forward = on ? cu_head_forward : NULL;
    b->head_backward = on ? cu_head_backward : NULL;
}

int mp_cu_set_head_cluster(gpu_ctx *c, int n)
{
    if (n != 0 && (n != HD_C || c->prec == MP_PREC_FP32))
        return 0;
    if (n > 0 && !fits(c))
        return 0;
    c->head_cluster = n;
    return 1;
}

void mp_cu_head_ops(mp_backend *b)
{
    gpu_ctx *c = CTX(b);
    const char *e = getenv("MOLPROP_CUDA_HEAD");
    c->head_cluster = 0;
    if (!(e && !strcmp(e, "0")))
        (void)mp_cu_set_head_cluster(c, HD_C);
    set_ops(b);
}

extern "C" int mp_backend_cuda_head_cluster(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->head_cluster : 0;
}

extern "C" long mp_backend_cuda_head_calls(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->head_calls : 0;
}

extern "C" mp_status mp_backend_cuda_set_head_cluster(mp_backend *b, int n)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c)
        return mp_error_set(MP_ERR_ARG, "mp_backend_cuda_set_head_cluster: not a cuda backend");
    if (!mp_cu_set_head_cluster(c, n))
        return mp_error_set(MP_ERR_ARG, "cuda backend: the fused head takes a cluster of %d "
                            "blocks (0: unfused); %d is not one this device runs", HD_C, n);
    set_ops(b);
    return MP_OK;
}
