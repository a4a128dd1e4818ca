/*
 * panel.cuh - the pieces of a wgmma panel (sm_90a) that tiles_cuda.cu's
 * products and fused_cuda.cu's message step share: all of B in shared
 * memory, a stage's products, and the epilogue of a 64-row panel.
 */
#ifndef MP_PANEL_CUH
#define MP_PANEL_CUH

#include "gpu/cuda_ctx.cuh"
#include "gpu/mma.cuh"
#include "gpu/wgmma.cuh"

enum { EPI_BETA, EPI_RES_RELU };

struct tile_args {
    const bf16 *a, *b;
    void *c;
    const void *r;           /* EPI_RES_RELU's residual, of C's type */
    int lda, ldb, ldc, ldr;
    int m, n, k;
    float beta;
};

/*
 * Panels (past TILE_MAX_ROWS; sm_90a): B whole in shared memory, wgmma.
 * At batch sizes of hundreds and thousands the D-MPNN's E x 300 x 300
 * products are compute-bound, and cuBLAS runs them at 100-123 TFLOP/s:
 * K = 300 is short, so its 128-row tiles spend much of their time filling
 * and draining, and A is read once per column tile.  Here one block per SM
 * holds all of B (n <= 304, k <= 320; core matrices of 8 x 8, no swizzle),
 * and each of its two warpgroups walks its own 64-row panels of C, 64 x 304
 * each as two wgmma halves of 152, A in 32-column stages, 4 in flight per
 * warpgroup.  The two warpgroups drift apart, so one's epilogue overlaps
 * the other's products.  (An mma.sync form of the same plan ran the tensor
 * pipe at 20%: bench/RESULTS.md.)  Every output is one fixed sum in k
 * order whatever the panel or grid, so the bits do not depend on set_share.
 */
#define PANEL_N    304     /* n, at most: two halves of 152 */
#define PANEL_NH   152
#define PANEL_KMAX 320     /* k, at most, in stages of PANEL_BK */
#define PANEL_BM   64
#define PANEL_BK   32
#define PANEL_ST   4
#define PANEL_WG   2       /* warpgroups a block */
#define PANEL_NT   (PANEL_WG * 128)
#define PANEL_A_BYTES (PANEL_BM * PANEL_BK * 2)
/* From this many rows on the panels are faster than cuBLAS (E x 300 x 300 at
 * batch 700, ~38,000 edges, they tie: bench/RESULTS.md); below, cuBLAS. */
#define PANEL_MIN_ROWS 40000
#define PANEL_SMEM_MAX (PANEL_N * PANEL_KMAX * 2 + PANEL_WG * PANEL_ST * PANEL_A_BYTES)


/* All of B, as B^T (PANEL_N x kp, K-major core matrices; zeros past n_ and
 * k_), into Bs by every thread of the block; the caller fences and syncs.
 * TB: b is n_ x k_ (k contiguous), else k_ x n_. */
template <bool TB>
__device__ __forceinline__ void panel_load_b(const bf16 *b, int ldb, int n_, int k_, bf16 *Bs,
                                             int kp)
{
    const int KC = kp / 8;
    /* all of B (zeros past n and k), before any product.  A byte of core
     * (n, k) lies at 16 (n % 8) + 2 (k % 8) modulo 128, so a warp's writes
     * meet in few banks unless its lanes spread over n % 8 and k % 8: each
     * warp's share is laid out so they do (a plain row-major walk put 16
     * lanes on one bank: the W_h update at batch 4096 took 258 us, now 252). */
    const int warp_b = threadIdx.x >> 5, lane_b = threadIdx.x & 31, NW = PANEL_NT / 32;
    if (TB) {   /* b: n x k, k contiguous; a task: 8 n x 16 k, a lane 4 k (8 bytes) */
        const int kq = kp / 16, tasks = PANEL_N / 8 * kq;
        for (int w = warp_b; w < tasks; w += NW) {
            const int n = w / kq * 8 + (lane_b & 7), k = (w % kq) * 16 + (lane_b >> 3) * 4;
            const int ok = n < n_ && k < k_;
            cp_async<8>(Bs + core_at(n, k, KC), ok ? b + (size_t)n * ldb + k : b, ok);
        }
        cp_commit();
        cp_wait<0>();
    } else {   /* b: k x n, n contiguous, transposed on the way: a task is 32 n x 4 k
                * (k of one parity, 2 apart), a lane 4 n (8 bytes), stored rotated
                * by lane so that one store of the warp meets every n % 8; 8 loads
                * in flight */
        const int nq = lane_b & 7, kk = lane_b >> 3, rot = (nq >> 1) & 3;
        const int kt = kp / 8 * 2, tasks = (PANEL_N + 31) / 32 * kt;
        uint16_t *Bu = (uint16_t *)Bs;
        for (int w0 = warp_b; w0 < tasks; w0 += 8 * NW) {
            uint2 v[8];
            int nn[8], kx[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int w = w0 + u * NW;
                const int n = w / kt * 32 + 4 * nq, k = (w % kt) / 2 * 8 + 2 * kk + (w % kt) % 2;
                nn[u] = w < tasks ? n : PANEL_N;
                kx[u] = k;
                v[u] = w < tasks && k < k_ && n < n_
                           ? *(const uint2 *)(b + (size_t)k * ldb + n) : make_uint2(0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                if (nn[u] >= PANEL_N)
                    continue;
#pragma unroll
                for (int qq = 0; qq < 4; qq++) {
                    const int q = (qq + rot) & 3;
                    const uint32_t word = q & 2 ? v[u].y : v[u].x;
                    Bu[core_at(nn[u] + q, kx[u], KC)] = (uint16_t)(word >> ((q & 1) * 16));
                }
            }
        }
    }
}

/* A warpgroup's stages 0 .. Q - 1: load(q) queues stage q's copies,
 * PANEL_ST - 1 stages ahead, one commit group a stage (empty ones too);
 * body(q) runs once stage q is in for the whole warpgroup and stage q - 1's
 * products are done. */
template <class LOAD, class BODY>
__device__ __forceinline__ void panel_pipeline(int Q, int wg, LOAD &&load, BODY &&body)
{
    for (int q = 0; q < PANEL_ST - 1; q++) {
        if (q < Q)
            load(q);
        cp_commit();
    }
    for (int q = 0; q < Q; q++) {
        cp_wait<PANEL_ST - 2>();
        fence_async_smem();
        bar_named(1 + wg, 128);
        if (q + PANEL_ST - 1 < Q)
            load(q + PANEL_ST - 1);
        cp_commit();
        body(q);
    }
    cp_wait<0>();
}

/* acc (+)= this stage's products: A, 64 x PANEL_BK in core matrices at
 * shared address a0, times B's rows of stage s (B at b0, KC core columns);
 * s == 0 starts the sums.  Queued only: acc is not to be touched until
 * panel_stage_wait. */
__device__ __forceinline__ void panel_stage_issue(float (&acc)[2][76], uint32_t a0, uint32_t b0,
                                                  int s, int KC)
{
    /* descriptors: core matrices 128 bytes apart along k, a core row of
     * them (PANEL_BK / 8 of A, KC of B) apart along m and n */
    const uint32_t a_sbo = PANEL_BK / 8 * 128, b_sbo = KC * 128;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < PANEL_BK / 16; j++) {
        const uint64_t da = smem_desc(a0 + j * 256, 128, a_sbo);
#pragma unroll
        for (int h = 0; h < 2; h++)
            wgmma_152<0, 0>(acc[h], da,
                            smem_desc(b0 + (h * (PANEL_NH / 8) * KC + s * 4 + j * 2) * 128, 128,
                                      b_sbo),
                            s > 0 || j > 0);
    }
    wgmma_commit();
}

/* Until the products queued are done, and acc holds them. */
__device__ __forceinline__ void panel_stage_wait(float (&acc)[2][76])
{
    wgmma_wait();
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 76; i++)
            asm volatile("" : "+f"(acc[h][i])::"memory");
}

/* Both: a stage's products, done on return. */
__device__ __forceinline__ void panel_stage(float (&acc)[2][76], uint32_t a0, uint32_t b0, int s,
                                            int KC)
{
    panel_stage_issue(acc, a0, b0, s, KC);
    panel_stage_wait(acc);
}

/* A panel's sums into C: the panel's row r (0..63) goes to C's row
 * row_of(r), none where that is negative.  EPI_RES_RELU: C = ReLU(R + acc)
 * (R may be C: its loads come before the stores); EPI_BETA: C = acc + beta
 * C. */
template <typename TC, int EPI, class ROW>
__device__ __forceinline__ void panel_epilogue(const tile_args &p, const float (&acc)[2][76],
                                               ROW row_of)
{
    /* thread (warp w, lane l) holds rows 16 w + l / 4 (+ 8) of the panel,
     * columns 8 i + 2 (l % 4) (+ 1) of each half */
    const int warp = (threadIdx.x & 127) >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int row = row_of(warp * 16 + (lane >> 2) + hf * 8);
        if (row < 0)
            continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float2 rr[PANEL_NH / 8];
            if (EPI == EPI_RES_RELU) {
#pragma unroll
                for (int i = 0; i < PANEL_NH / 8; i++) {
                    const int col = h * PANEL_NH + i * 8 + 2 * (lane & 3);
                    rr[i] = col < p.n ? ld2((const TC *)p.r + (size_t)row * p.ldr + col)
                                      : make_float2(0.f, 0.f);
                }
            }
#pragma unroll
            for (int i = 0; i < PANEL_NH / 8; i++) {
                const int col = h * PANEL_NH + i * 8 + 2 * (lane & 3);
                if (col >= p.n)
                    continue;
                float2 v = make_float2(acc[h][i * 4 + hf * 2], acc[h][i * 4 + hf * 2 + 1]);
                TC *cp = (TC *)p.c + (size_t)row * p.ldc + col;
                if (EPI == EPI_RES_RELU) {
                    v.x = fmaxf(v.x + rr[i].x, 0.f);
                    v.y = fmaxf(v.y + rr[i].y, 0.f);
                } else if (p.beta != 0.f) {
                    const float2 o = ld2(cp);
                    v.x += p.beta * o.x;
                    v.y += p.beta * o.y;
                }
                st2(cp, v.x, v.y);
            }
        }
    }
}

#endif /* MP_PANEL_CUH */
