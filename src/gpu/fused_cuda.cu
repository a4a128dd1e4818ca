/*
 * fused_cuda.cu - the D-MPNN message step of an inference forward as one
 * product kernel (ops.h message_update):
 *
 *   M_t[e] = ReLU(H0[e] + bf16(S[src[e]] - M_{t-1}[e ^ 1]) W_h)
 *
 * The unfused step writes the message to global memory (message) and reads
 * it back as the product's A operand (gemm_res_relu, cuBLASLt).  Here a
 * block of 256 threads takes 64 edges and goes through the message's
 * columns 32 at a time (a stage): cp.async brings the stage's rows of
 * S[src] and M[rev] and of W_h into shared memory, FM_STAGES - 1 stages
 * ahead of the product, so that many loads are in flight without holding
 * registers; each thread turns the rows it loaded into the bf16 message
 * (the A tile), the tensor cores make the product (mma.sync m16n8k16, bf16
 * operands, fp32 sums), and the epilogue adds H0, applies the ReLU and
 * writes M_t.  S, the per-atom sums, come first from rows_cuda.cu's
 * segment sum.
 *
 * (A first form gathered each stage into registers one stage ahead: one
 * block per SM then waited out the gather's latency at every stage, and the
 * step took 1.2-1.3 times the unfused pair; bench/RESULTS.md.)
 *
 * Written with mma.sync rather than wgmma: the A operand is computed, not
 * copied, so it passes through the threads on its way to the tensor cores
 * anyway, and the product (E x h x h, h ~ 300) is small per tile.
 *
 * Warp tiling: 8 warps as 2 (rows) x 4 (columns), each 32 rows x 80
 * columns = 2 x 10 mma tiles; a block covers 320 output columns (blockIdx.y
 * steps through wider layers).  h must be a multiple of 4 (8-byte bf16
 * groups); the rows of every operand are h apart.
 */
#include "gpu/cuda_ctx.cuh"
#include "gpu/mma.cuh"

#include <stdlib.h>
#include <string.h>

#define FM_BM 64                /* edges per block                     */
#define FM_BN 320               /* output columns per block            */
#define FM_BK 32                /* columns of the message per stage    */
#define FM_STAGES 4             /* stages in flight: 3 loading, 1 in the product */
#define FM_AS (FM_BK + 8)       /* A tile row stride: 80 bytes, no ldmatrix conflicts */
#define FM_WS (FM_BN + 8)       /* W tile row stride: 656 bytes, the same */
/* one stage: S[src] rows (fp32), M[rev] rows (room for fp32), W_h rows */
#define FM_RS_BYTES (FM_BM * FM_BK * 4)
#define FM_RM_BYTES (FM_BM * FM_BK * 4)
#define FM_W_BYTES (FM_BK * FM_WS * 2)
#define FM_STAGE_BYTES (FM_RS_BYTES + FM_RM_BYTES + FM_W_BYTES)
#define FM_A_BYTES (FM_BM * FM_AS * 2)
#define FM_SMEM_BYTES (FM_STAGES * FM_STAGE_BYTES + FM_A_BYTES)
#define FM_A_GROUPS (FM_BM * FM_BK / 4 / THREADS)     /* 4-element groups per thread: 2 */
#define FM_W_GROUPS (FM_BK * FM_BN / 4 / THREADS)     /* 10 */

/* 4 elements of storage T as floats. */
__device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ld4(const bf16 *p)
{
    uint2 u = *(const uint2 *)p;
    float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
    float2 hi = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
/* until at most FM_STAGES - 2 of this thread's groups are in flight */
__device__ __forceinline__ void cp_wait_stage(void) { cp_wait<FM_STAGES - 2>(); }

/* Starts loading stage buffer `stage` with message columns k0..k0+31: this
 * thread's 4-element groups of S[src[e]] and M[e ^ 1] (zeros past h or the
 * last edge), and its share of W_h rows k0.. , columns n0..n0+319. */
template <typename TM>
__device__ __forceinline__ void load_stage(unsigned char *stage, const float *__restrict__ s,
                                           const TM *__restrict__ m, const bf16 *__restrict__ w,
                                           const int64_t srow[], const int64_t rrow[], int k0,
                                           int n0, int h)
{
    float *rs = (float *)stage;
    TM *rm = (TM *)(stage + FM_RS_BYTES);
    bf16 *ws = (bf16 *)(stage + FM_RS_BYTES + FM_RM_BYTES);
#pragma unroll
    for (int j = 0; j < FM_A_GROUPS; j++) {
        const int q = threadIdx.x + j * THREADS, k = k0 + (q % (FM_BK / 4)) * 4;
        const int ok = srow[j] >= 0 && k < h;
        cp_async<16>(rs + q * 4, ok ? s + srow[j] + k : s, ok);
        cp_async<4 * sizeof(TM)>(rm + q * 4, ok ? m + rrow[j] + k : m, ok);
    }
#pragma unroll
    for (int j = 0; j < FM_W_GROUPS; j++) {
        const int q = threadIdx.x + j * THREADS;
        const int kr = q / (FM_BN / 4), c = (q % (FM_BN / 4)) * 4;
        const int ok = k0 + kr < h && n0 + c < h;
        cp_async<8>(ws + kr * FM_WS + c, ok ? w + (size_t)(k0 + kr) * h + n0 + c : w, ok);
    }
}

/* The A tile of a stage: the message S[src] - M[rev] (ReLU on M where
 * asked) rounded to bf16, from the groups this thread loaded itself. */
template <typename TM, bool RELU>
__device__ __forceinline__ void make_a(bf16 *a, const unsigned char *stage)
{
    const float *rs = (const float *)stage;
    const TM *rm = (const TM *)(stage + FM_RS_BYTES);
#pragma unroll
    for (int j = 0; j < FM_A_GROUPS; j++) {
        const int q = threadIdx.x + j * THREADS;
        float4 x = ld4(rs + q * 4), r = ld4(rm + q * 4);
        if (RELU) {
            r.x = fmaxf(r.x, 0.f), r.y = fmaxf(r.y, 0.f);
            r.z = fmaxf(r.z, 0.f), r.w = fmaxf(r.w, 0.f);
        }
        __nv_bfloat162 lo = __floats2bfloat162_rn(x.x - r.x, x.y - r.y);
        __nv_bfloat162 hi = __floats2bfloat162_rn(x.z - r.z, x.w - r.w);
        uint2 u;
        u.x = *(uint32_t *)&lo;
        u.y = *(uint32_t *)&hi;
        *(uint2 *)(a + (q / (FM_BK / 4)) * FM_AS + (q % (FM_BK / 4)) * 4) = u;
    }
}

template <typename TM, typename TR, bool RELU>
__global__ void __launch_bounds__(THREADS, 1)
k_message_update(TR *__restrict__ out, const TR *__restrict__ r, const float *__restrict__ s,
                 const int32_t *__restrict__ edge_src, const TM *__restrict__ m,
                 const bf16 *__restrict__ w, int32_t n_edges, int h)
{
    pdl_enter();
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *const A = (bf16 *)(smem + FM_STAGES * FM_STAGE_BYTES);
    const int64_t e0 = (int64_t)blockIdx.x * FM_BM;
    const int n0 = blockIdx.y * FM_BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp & 1, wn = warp >> 1;

    /* this thread's gather rows: S[src[e]] and M[e ^ 1] (-1: past the end) */
    int64_t srow[FM_A_GROUPS], rrow[FM_A_GROUPS];
#pragma unroll
    for (int j = 0; j < FM_A_GROUPS; j++) {
        const int64_t e = e0 + (threadIdx.x + j * THREADS) / (FM_BK / 4);
        srow[j] = e < n_edges ? (int64_t)edge_src[e] * h : -1;
        rrow[j] = e < n_edges ? (e ^ 1) * h : 0;
    }

    float acc[2][10][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < 10; n++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[i][n][q] = 0.f;

    /* FM_STAGES - 1 stages in flight before the first product; one commit
     * group per stage, empty ones included, so that cp_wait_stage always
     * means "this stage has landed" */
    const int stages = (h + FM_BK - 1) / FM_BK;
    for (int st = 0; st < FM_STAGES - 1; st++) {
        if (st < stages)
            load_stage<TM>(smem + st * FM_STAGE_BYTES, s, m, w, srow, rrow, st * FM_BK, n0, h);
        cp_commit();
    }

    for (int st = 0; st < stages; st++) {
        const unsigned char *cur = smem + (st % FM_STAGES) * FM_STAGE_BYTES;
        cp_wait_stage();
        /* every thread's copies of this stage are in, and the product of
         * the last one is done with A and with the buffer refilled next */
        __syncthreads();
        const int ahead = st + FM_STAGES - 1;
        if (ahead < stages)
            load_stage<TM>(smem + (ahead % FM_STAGES) * FM_STAGE_BYTES, s, m, w, srow, rrow,
                           ahead * FM_BK, n0, h);
        cp_commit();
        make_a<TM, RELU>(A, cur);
        __syncthreads();
        const bf16 *W = (const bf16 *)(cur + FM_RS_BYTES + FM_RM_BYTES);
#pragma unroll
        for (int kk = 0; kk < FM_BK; kk += 16) {
            uint32_t af[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldm_x4(af[i], A + (wm * 32 + i * 16 + (lane & 15)) * FM_AS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int n = 0; n < 10; n += 2) {
                uint32_t bf[4];
                ldm_x4_t(bf, W + (kk + (lane & 15)) * FM_WS + wn * 80 + n * 8 + (lane >> 4) * 8);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mma16816(acc[i][n], af[i], bf[0], bf[1]);
                    mma16816(acc[i][n + 1], af[i], bf[2], bf[3]);
                }
            }
        }
    }

    /* epilogue: thread (g = lane / 4, t = lane % 4) holds rows g and g + 8
     * of each tile, columns 2t and 2t + 1 */
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int64_t e = e0 + wm * 32 + i * 16 + g + half * 8;
            if (e >= n_edges)
                continue;
#pragma unroll
            for (int n = 0; n < 10; n++) {
                const int col = n0 + wn * 80 + n * 8 + 2 * t;
                if (col >= h)
                    continue;
                const size_t o = (size_t)e * h + col;
                float2 res = ld2(r + o);
                st2(out + o, fmaxf(acc[i][n][2 * half] + res.x, 0.f),
                    fmaxf(acc[i][n][2 * half + 1] + res.y, 0.f));
            }
        }
}

static int al8(const void *p) { return ((uintptr_t)p & 7) == 0; }

template <typename TM, typename TR, bool RELU>
static void launch_update(gpu_ctx *c, void *out, const void *r, const float *s,
                          const int32_t *edge_src, const void *m, const void *w,
                          int32_t n_edges, int h)
{
    dim3 grid((unsigned)((n_edges + FM_BM - 1) / FM_BM), (unsigned)((h + FM_BN - 1) / FM_BN));
    launch(c, c->stream, k_message_update<TM, TR, RELU>, grid, THREADS, FM_SMEM_BYTES,
        (TR *)out, (const TR *)r, s, edge_src, (const TM *)m, (const bf16 *)w, n_edges, h);
}

static int cu_message_update(mp_backend *b, void *out, const void *r, mp_stype rc_st, void *s,
                             const int32_t *in_start, const int32_t *in_edge,
                             const int32_t *edge_src, const void *m, mp_stype m_st, int relu_in,
                             const void *w, mp_stype w_st, int32_t n_atoms, int32_t n_edges,
                             int h)
{
    gpu_ctx *c = CTX(b);
    if (w_st != MP_ST_BF16 || h <= 0 || h % 4 || n_atoms <= 0 || n_edges <= 0 ||
        !al16(s) || !al8(out) || !al8(r) || !al8(m) || !al8(w) ||
        (m_st == MP_ST_ELEM && !al16(m)))
        return 0;
    if (!usable(c))
        return 1;
    mp_cu_segment_sum(c, (float *)s, in_start, in_edge, m, m_st, relu_in, n_atoms, h);
    WITH_T(rc_st, TR, WITH_T(m_st, TM, {
        if (relu_in)
            launch_update<TM, TR, true>(c, out, r, (const float *)s, edge_src, m, w, n_edges, h);
        else
            launch_update<TM, TR, false>(c, out, r, (const float *)s, edge_src, m, w, n_edges, h);
    }));
    LAUNCHED(c, "k_message_update");
    return 1;
}

/* Shared memory past the default 48 KB, asked for once per kernel form at
 * open (not a stream operation, so never inside a capture). */
template <typename TM, typename TR>
static void allow_smem(gpu_ctx *c)
{
    CUDA_OK(c, cudaFuncSetAttribute(k_message_update<TM, TR, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM_BYTES));
    CUDA_OK(c, cudaFuncSetAttribute(k_message_update<TM, TR, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM_BYTES));
}

void mp_cu_fused_ops(mp_backend *b)
{
    gpu_ctx *c = CTX(b);
    allow_smem<bf16, bf16>(c);
    allow_smem<bf16, float>(c);
    allow_smem<float, bf16>(c);
    allow_smem<float, float>(c);
    /* Off unless MOLPROP_CUDA_MESSAGE_UPDATE=1: since message sums per atom
     * at every storage type (rows_cuda.cu), message + gemm_res_relu make a
     * faster inference forward than this kernel (an H100, 2026-12-07: 2.78M
     * against 2.42M mol/s at batch 4,096, 3.16M against 2.61M at 65,536;
     * bench/RESULTS.md).  Kept for the comparison and its tests. */
    const char *mu = getenv("MOLPROP_CUDA_MESSAGE_UPDATE");
    b->message_update = mu && !strcmp(mu, "1") ? cu_message_update : NULL;
}
