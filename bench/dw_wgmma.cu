/*
 * dw_wgmma.cu - a standalone experiment (not built by make all, not part of
 * the library): the D-MPNN's weight gradient dW_h = A^T B (A, B: E x 300
 * bf16, k = E the batch's edges) on wgmma, against cuBLAS in one program.
 *
 * At batch 4096 (E = 228,172) cuBLAS takes ~370 us for it (split-K, 121
 * TFLOP/s), the largest product left on cuBLAS once the W_h update and
 * dMsg run on the panels (tiles_cuda.cu).  Here block (x, y) makes rows
 * [128 x, 128 x + 128) of C over a chunk y of KCH rows of k: two
 * warpgroups of 64 x 304 (two wgmma m64n152k16 halves), A^T's and B's
 * 32-row stages in shared memory, 3 in flight; the chunks' partial sums are
 * then added in chunk order (deterministic).  Two ways to lay the operands
 * out, both timed and checked against cuBLAS:
 *
 *   K-major: each stage transposed on its way into shared memory (plain
 *     loads and stores), the layout the panels use;
 *   MN-major: each stage copied as it is (cp.async) and the product told
 *     that A^T and B are M- and N-major (wgmma's transpose flags), with
 *     both readings of the descriptor's two strides tried.
 *
 *   make build/dw_wgmma && build/dw_wgmma [E [H]]   (default 228172 300)
 *
 * Written on 2026-12-04 after the device time of that session was spent:
 * it compiles, it has not run yet.
 */
#include "cuda_exp.cuh"
#include "gpu/mma.cuh"
#include "gpu/wgmma.cuh"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef __nv_bfloat16 bf16;

#define DW_N   304                  /* n (and m) at most */
#define DW_BM  128                  /* rows of C a block: two warpgroups of 64 */
#define DW_BK  32                   /* k a stage */
#define DW_ST  3
#define KCH    2048                 /* k a block */
#define A_EL   (DW_BM * DW_BK)      /* elements of a stage's A^T */
#define B_EL   (DW_N * DW_BK)       /* and of its B */

/* Element (k, x) of an MN-major stage of `xc` core columns (x: m or n):
 * core (k / 8, x / 8), k-row k % 8 of it, 8 x-elements long. */
__device__ __forceinline__ int mn_at(int k, int x, int xc)
{
    return ((k >> 3) * xc + (x >> 3)) * 64 + (k & 7) * 8 + (x & 7);
}

template <int MN>
__global__ void __launch_bounds__(256, 1) k_dw(float *part, const bf16 *a, int lda, const bf16 *b,
                                               int ldb, int K, int M, int N, int swap)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) bf16 sm[];
    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;
    const int m0 = blockIdx.x * DW_BM;
    const int k0 = blockIdx.y * KCH, k1 = k0 + KCH < K ? k0 + KCH : K;
    const int S = (k1 - k0 + DW_BK - 1) / DW_BK;
    auto load = [&](int q) {
        bf16 *At = sm + (q % DW_ST) * (A_EL + B_EL), *Bt = At + A_EL;
        const int kb = k0 + q * DW_BK;
        for (int e = threadIdx.x; e < DW_BK * DW_BM / 4; e += 256) {
            const int k = e / (DW_BM / 4), m = (e % (DW_BM / 4)) * 4;
            const int ok = kb + k < k1 && m0 + m < M;
            const bf16 *src = a + (size_t)(kb + k) * lda + m0 + m;
            if (MN) {
                cp_async<8>(At + mn_at(k, m, DW_BM / 8), ok ? src : a, ok);
            } else {
                uint2 v = ok ? *(const uint2 *)src : make_uint2(0u, 0u);
                const bf16 *x = (const bf16 *)&v;
                for (int i = 0; i < 4; i++)
                    At[core_at(m + i, k, DW_BK / 8)] = x[i];
            }
        }
        for (int e = threadIdx.x; e < DW_BK * DW_N / 4; e += 256) {
            const int k = e / (DW_N / 4), n = (e % (DW_N / 4)) * 4;
            const int ok = kb + k < k1 && n < N;
            const bf16 *src = b + (size_t)(kb + k) * ldb + n;
            if (MN) {
                cp_async<8>(Bt + mn_at(k, n, DW_N / 8), ok ? src : b, ok);
            } else {
                uint2 v = ok ? *(const uint2 *)src : make_uint2(0u, 0u);
                const bf16 *x = (const bf16 *)&v;
                for (int i = 0; i < 4; i++)
                    Bt[core_at(n + i, k, DW_BK / 8)] = x[i];
            }
        }
    };
    for (int q = 0; q < DW_ST - 1; q++) {
        if (q < S)
            load(q);
        cp_commit();
    }
    float acc[2][76];
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 76; i++)
            acc[h][i] = 0.f;
    for (int q = 0; q < S; q++) {
        cp_wait<DW_ST - 2>();
        fence_async_smem();
        __syncthreads();   /* stage q in; stage q - 1's products done */
        if (q + DW_ST - 1 < S)
            load(q + DW_ST - 1);
        cp_commit();
        fence_async_smem();   /* the K-major form's plain stores of the next stage */
        const bf16 *At = sm + (q % DW_ST) * (A_EL + B_EL), *Bt = At + A_EL;
        const uint32_t a0 = smem_addr(At), b0 = smem_addr(Bt);
        wgmma_fence();
        for (int j = 0; j < DW_BK / 16; j++) {
            uint64_t da, db[2];
            if (MN) {
                /* core (k / 8, x / 8): 128 bytes apart along x, a core row along k */
                const uint32_t ak = DW_BM / 8 * 128, bk = DW_N / 8 * 128;
                da = smem_desc(a0 + (j * 2 * (DW_BM / 8) + wg * 8) * 128, swap ? 128 : ak,
                               swap ? ak : 128);
                for (int h = 0; h < 2; h++)
                    db[h] = smem_desc(b0 + (j * 2 * (DW_N / 8) + h * 19) * 128, swap ? 128 : bk,
                                      swap ? bk : 128);
            } else {
                da = smem_desc(a0 + (wg * 8 * (DW_BK / 8) + j * 2) * 128, 128, DW_BK / 8 * 128);
                for (int h = 0; h < 2; h++)
                    db[h] = smem_desc(b0 + (h * 19 * (DW_BK / 8) + j * 2) * 128, 128,
                                      DW_BK / 8 * 128);
            }
            wgmma_152<MN, MN>(acc[0], da, db[0], 1);
            wgmma_152<MN, MN>(acc[1], da, db[1], 1);
        }
        wgmma_commit_wait();
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 76; i++)
                asm volatile("" : "+f"(acc[h][i])::"memory");
    }
    cp_wait<0>();
    float *dst = part + (size_t)blockIdx.y * M * N;
    for (int hf = 0; hf < 2; hf++) {
        const int m = m0 + wg * 64 + warp * 16 + (lane >> 2) + hf * 8;
        if (m >= M)
            continue;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 19; i++) {
                const int n = h * 152 + i * 8 + 2 * (lane & 3);
                if (n < N)
                    dst[(size_t)m * N + n] = acc[h][i * 4 + hf * 2];
                if (n + 1 < N)
                    dst[(size_t)m * N + n + 1] = acc[h][i * 4 + hf * 2 + 1];
            }
    }
#endif
}

template <int MN>
static void dw(float *c, float *part, const bf16 *a, const bf16 *b, int K, int M, int N, int swap)
{
    const int nch = (K + KCH - 1) / KCH;
    const size_t smem = (size_t)DW_ST * (A_EL + B_EL) * sizeof(bf16);
    CK(cudaFuncSetAttribute(k_dw<MN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    k_dw<MN><<<dim3((M + DW_BM - 1) / DW_BM, nch), 256, smem>>>(part, a, M, b, N, K, M, N, swap);
    const size_t w = (size_t)M * N;
    k_chunks<<<(unsigned)((w + 255) / 256), 256>>>(c, part, nch, w, 0);
}

/* Times f (20 calls after one) and compares its C with want (host). */
template <typename F>
static void trial(const char *name, F f, float *dc, const float *want, size_t w)
{
    f();
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("%-34s failed: %s\n", name, cudaGetErrorString(e));
        exit(1);
    }
    float *got = (float *)malloc(w * sizeof(float));
    CK(cudaMemcpy(got, dc, w * sizeof(float), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < w; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    free(got);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 20; i++)
        f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("%-34s %8.2f us   ||C - cuBLAS|| / ||cuBLAS|| = %.2e\n", name, ms * 1e3 / 20,
           sqrt(num / (den > 0 ? den : 1)));
}

int main(int argc, char **argv)
{
    const int K = argc > 1 ? atoi(argv[1]) : 228172, M = argc > 2 ? atoi(argv[2]) : 300, N = M;
    if (K < 1 || M < 1 || M > DW_N || M % 4) {
        fprintf(stderr, "usage: dw_wgmma [E [H]]   (H <= %d, a multiple of 4)\n", DW_N);
        return 2;
    }
    const size_t na = (size_t)K * M, nb = (size_t)K * N, w = (size_t)M * N;
    bf16 *ha = (bf16 *)malloc(na * sizeof(bf16)), *hb = (bf16 *)malloc(nb * sizeof(bf16));
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < na; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ha[i] = __float2bfloat16((float)(x % 2001) / 1000.f - 1.f);
    }
    for (size_t i = 0; i < nb; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        hb[i] = __float2bfloat16(((float)(x % 2001) / 1000.f - 1.f) * 1e-2f);
    }
    bf16 *da, *db;
    float *dc, *part;
    const int nch = (K + KCH - 1) / KCH;
    CK(cudaMalloc(&da, na * sizeof(bf16)));
    CK(cudaMalloc(&db, nb * sizeof(bf16)));
    CK(cudaMalloc(&dc, w * sizeof(float)));
    CK(cudaMalloc(&part, (size_t)nch * w * sizeof(float)));
    CK(cudaMemcpy(da, ha, na * sizeof(bf16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb, nb * sizeof(bf16), cudaMemcpyHostToDevice));
    cublasHandle_t hd;
    if (cublasCreate(&hd) != CUBLAS_STATUS_SUCCESS)
        return 1;
    /* C (row-major M x N) = A^T B: column-major C^T = B^T-as-stored x A^T */
    const float one = 1.f, zero = 0.f;
    auto blas = [&]() {
        cublasGemmEx(hd, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &one, db, CUDA_R_16BF, N, da,
                     CUDA_R_16BF, M, &zero, dc, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
    };
    blas();
    CK(cudaDeviceSynchronize());
    float *want = (float *)malloc(w * sizeof(float));
    CK(cudaMemcpy(want, dc, w * sizeof(float), cudaMemcpyDeviceToHost));
    printf("C = A^T B: %d x %d, k = %d, bf16 operands, fp32 sums; %d chunks of %d\n", M, N, K,
           nch, KCH);
    trial("cuBLAS (cublasGemmEx)", blas, dc, want, w);
    trial("wgmma, K-major (transposed stores)", [&]() { dw<0>(dc, part, da, db, K, M, N, 0); },
          dc, want, w);
    trial("wgmma, MN-major, strides as read", [&]() { dw<1>(dc, part, da, db, K, M, N, 0); },
          dc, want, w);
    trial("wgmma, MN-major, strides swapped", [&]() { dw<1>(dc, part, da, db, K, M, N, 1); },
          dc, want, w);
    cublasDestroy(hd);
    return 0;
}
