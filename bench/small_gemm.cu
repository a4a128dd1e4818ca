/*
 * small_gemm.cu - an experiment (issue 13 item 2): can a product kernel of
 * ours beat cuBLAS on the batch-50 step's edge products (2,502 x 300 x 300,
 * bf16 operands, fp32 sums), where cuBLAS's sm80 kernels take 10-16 us?
 *
 * Times, as the mean over a CUDA graph of REPS launches back to back:
 *   cuBLAS GemmEx (the call dense_cuda.cu makes), and
 *   tiled mma.sync kernels of BM x BN outputs per block (cp.async stages of
 *   BK columns, 8-byte copies: rows 300 apart are 8-byte aligned only),
 * for C = A B (forward), C = A B^T (the message gradient), and prints the
 * largest difference from cuBLAS.  Standalone: nvcc, cuBLAS.
 *
 *   small_gemm [m n k]
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

typedef __nv_bfloat16 bf16;

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define REPS 200

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp8(void *dst, const void *src, int ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(ok ? 8 : 0));
}
__device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldm_x4(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldm_x4_t(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* C[m x n] (bf16) = A[m x k] op(B), B [k x n] (TB = 0) or [n x k] (TB = 1),
 * all row-major bf16; k, n, the lds multiples of 4. */
template <int BM, int BN, int BK, int WM, int WN, int ST, bool TB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
k_gemm(bf16 *__restrict__ c, int ldc, const bf16 *__restrict__ a, int lda,
       const bf16 *__restrict__ b, int ldb, int m, int n, int k)
{
    constexpr int NT = (BM / WM) * (BN / WN) * 32;
    constexpr int AS = BK + 8;                        /* A tile row stride */
    constexpr int BS = TB ? BK + 8 : BN + 8;          /* B tile row stride */
    constexpr int A_EL = BM * AS, B_EL = TB ? BN * BS : BK * BS;
    constexpr int MI = WM / 16, NI = WN / 8;
    __shared__ __align__(16) bf16 sm[ST * (A_EL + B_EL)];
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp % (BM / WM), wn = warp / (BM / WM);

    auto load = [&](int s, int k0) {
        bf16 *As = sm + s * (A_EL + B_EL), *Bs = As + A_EL;
        for (int q = threadIdx.x; q < BM * BK / 4; q += NT) {
            int r = q / (BK / 4), cc = (q % (BK / 4)) * 4;
            int ok = m0 + r < m && k0 + cc < k;
            cp8(As + r * AS + cc, ok ? a + (size_t)(m0 + r) * lda + k0 + cc : a, ok);
        }
        if (TB) {
            for (int q = threadIdx.x; q < BN * BK / 4; q += NT) {
                int r = q / (BK / 4), cc = (q % (BK / 4)) * 4;
                int ok = n0 + r < n && k0 + cc < k;
                cp8(Bs + r * BS + cc, ok ? b + (size_t)(n0 + r) * ldb + k0 + cc : b, ok);
            }
        } else {
            for (int q = threadIdx.x; q < BK * BN / 4; q += NT) {
                int r = q / (BN / 4), cc = (q % (BN / 4)) * 4;
                int ok = k0 + r < k && n0 + cc < n;
                cp8(Bs + r * BS + cc, ok ? b + (size_t)(k0 + r) * ldb + n0 + cc : b, ok);
            }
        }
    };

    float acc[MI][NI][4] = {};
    const int stages = (k + BK - 1) / BK;
    for (int s = 0; s < ST - 1; s++) {
        if (s < stages)
            load(s, s * BK);
        cp_commit();
    }
    for (int s = 0; s < stages; s++) {
        cp_wait<ST - 2>();
        __syncthreads();
        if (s + ST - 1 < stages)
            load((s + ST - 1) % ST, (s + ST - 1) * BK);
        cp_commit();
        const bf16 *As = sm + (s % ST) * (A_EL + B_EL), *Bs = As + A_EL;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t af[MI][4];
#pragma unroll
            for (int i = 0; i < MI; i++)
                ldm_x4(af[i], As + (wm * WM + i * 16 + (lane & 15)) * AS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                uint32_t bfr[4];
                if (TB)
                    ldm_x4(bfr, Bs + (wn * WN + j * 8 + (lane >> 4) * 8 + (lane & 7)) * BS + kk +
                                    ((lane >> 3) & 1) * 8);
                else
                    ldm_x4_t(bfr, Bs + (kk + (lane & 15)) * BS + wn * WN + j * 8 + (lane >> 4) * 8);
#pragma unroll
                for (int i = 0; i < MI; i++) {
                    mma16816(acc[i][j], af[i], bfr[0], bfr[1]);
                    mma16816(acc[i][j + 1], af[i], bfr[2], bfr[3]);
                }
            }
        }
    }
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = m0 + wm * WM + i * 16 + g + h * 8;
            if (r >= m)
                continue;
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const int col = n0 + wn * WN + j * 8 + 2 * t;
                if (col < n)
                    *(__nv_bfloat162 *)(c + (size_t)r * ldc + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

static float bf2f(bf16 x) { return __bfloat162float(x); }

template <int BM, int BN, int BK, int WM, int WN, int ST, bool TB>
static void try_kernel(const char *name, cudaStream_t st, bf16 *c, const bf16 *a, const bf16 *b,
                       int m, int n, int k, const std::vector<bf16> &ref)
{
    constexpr int NT = (BM / WM) * (BN / WN) * 32;
    dim3 grid((m + BM - 1) / BM, (n + BN - 1) / BN);
    int ldb = TB ? k : n;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaMemsetAsync(c, 0, (size_t)m * n * 2, st));
    k_gemm<BM, BN, BK, WM, WN, ST, TB><<<grid, NT, 0, st>>>(c, n, a, k, b, ldb, m, n, k);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));
    std::vector<bf16> out((size_t)m * n);
    CK(cudaMemcpy(out.data(), c, out.size() * 2, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < out.size(); i++) {
        double d = fabs(bf2f(out[i]) - bf2f(ref[i])) / (fabs(bf2f(ref[i])) + 1e-2);
        if (d > worst)
            worst = d;
    }
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < REPS; i++)
        k_gemm<BM, BN, BK, WM, WN, ST, TB><<<grid, NT, 0, st>>>(c, n, a, k, b, ldb, m, n, k);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int rep = 0; rep < 5; rep++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best)
            best = ms;
    }
    printf("  %-34s %3d blocks x %3d threads  %6.2f us   max rel diff %.3g\n", name,
           grid.x * grid.y, NT, best * 1000.0f / REPS, worst);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
}

static void run(cublasHandle_t h, cudaStream_t st, int m, int n, int k, bool tb)
{
    printf("C[%d x %d] = A[%d x %d] %s, bf16, fp32 sums\n", m, n, m, k,
           tb ? "B^T (B [n x k])" : "B [k x n]");
    std::vector<bf16> ha((size_t)m * k), hb((size_t)k * n);
    srand(1);
    for (auto &x : ha)
        x = __float2bfloat16((rand() / (float)RAND_MAX - 0.5f));
    for (auto &x : hb)
        x = __float2bfloat16((rand() / (float)RAND_MAX - 0.5f) * 0.1f);
    bf16 *a, *b, *c;
    CK(cudaMalloc(&a, ha.size() * 2));
    CK(cudaMalloc(&b, hb.size() * 2));
    CK(cudaMalloc(&c, (size_t)m * n * 2));
    CK(cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
    const float one = 1, zero = 0;
    int ldb = tb ? k : n;
    /* row-major C = A op(B) as column-major C^T = op(B)^T A^T */
    auto blas = [&]() {
        cublasStatus_t s = cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k,
                                        &one, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, k, &zero, c,
                                        CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublas %d\n", (int)s);
            exit(1);
        }
    };
    blas();
    CK(cudaStreamSynchronize(st));
    std::vector<bf16> ref((size_t)m * n);
    CK(cudaMemcpy(ref.data(), c, ref.size() * 2, cudaMemcpyDeviceToHost));
    {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < REPS; i++)
            blas();
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        float best = 1e30f;
        for (int rep = 0; rep < 5; rep++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (ms < best)
                best = ms;
        }
        printf("  %-34s                          %6.2f us\n", "cuBLAS GemmEx", best * 1000.0f / REPS);
    }
    if (tb) {
        try_kernel<64, 64, 32, 32, 32, 3, true>("64x64 k32 4 warps 3 st", st, c, a, b, m, n, k, ref);
        try_kernel<64, 64, 32, 32, 32, 4, true>("64x64 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<32, 64, 32, 16, 32, 4, true>("32x64 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<32, 64, 64, 16, 32, 3, true>("32x64 k64 4 warps 3 st", st, c, a, b, m, n, k, ref);
        try_kernel<64, 32, 32, 16, 32, 4, true>("64x32 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<32, 32, 32, 16, 16, 4, true>("32x32 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<64, 96, 32, 32, 48, 3, true>("64x96 k32 4 warps 3 st", st, c, a, b, m, n, k, ref);
        try_kernel<128, 64, 32, 32, 32, 3, true>("128x64 k32 8 warps 3 st", st, c, a, b, m, n, k, ref);
    } else {
        try_kernel<64, 64, 32, 32, 32, 3, false>("64x64 k32 4 warps 3 st", st, c, a, b, m, n, k, ref);
        try_kernel<64, 64, 32, 32, 32, 4, false>("64x64 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<32, 64, 32, 16, 32, 4, false>("32x64 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<32, 64, 64, 16, 32, 3, false>("32x64 k64 4 warps 3 st", st, c, a, b, m, n, k, ref);
        try_kernel<64, 32, 32, 16, 32, 4, false>("64x32 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<32, 32, 32, 16, 16, 4, false>("32x32 k32 4 warps 4 st", st, c, a, b, m, n, k, ref);
        try_kernel<64, 96, 32, 32, 48, 3, false>("64x96 k32 4 warps 3 st", st, c, a, b, m, n, k, ref);
        try_kernel<128, 64, 32, 32, 32, 3, false>("128x64 k32 8 warps 3 st", st, c, a, b, m, n, k, ref);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c));
}

int main(int argc, char **argv)
{
    int m = argc > 3 ? atoi(argv[1]) : 2502, n = argc > 3 ? atoi(argv[2]) : 300,
        k = argc > 3 ? atoi(argv[3]) : 300;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return 1;
    void *ws;
    CK(cudaMalloc(&ws, 32 << 20));
    cublasSetWorkspace(h, ws, 32 << 20);
    cublasSetStream(h, st);
    run(h, st, m, n, k, false);
    run(h, st, m, n, k, true);
    if (argc <= 3) {
        run(h, st, 1179, 300, 432, false);   /* W_o: atoms x (133 + 300 -> 432 rounded) */
        run(h, st, 50, 300, 300, false);     /* the FFN head */
    }
    return 0;
}
