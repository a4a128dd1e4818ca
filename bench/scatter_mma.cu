/*
 * scatter_mma.cu - a standalone experiment (not built by make, not part of
 * the library): the one-hot weight-gradient scatter of atom_embed_backward
 * as a tensor-core product, for large batches.
 *
 *   dW[s, :] = sum over rows r whose hot list holds s of g[r, :]
 *
 * is C = X^T G with X the rows' one-hot matrix (0/1, exact in bf16).  The
 * row-chunk kernel in src/gpu/reduce_cuda.cu does it with shared-memory
 * read-modify-writes and takes 258 us per call at batch 4096 (108,496 atoms
 * x 300 columns, bench/RESULTS.md), about 8x its memory floor.  Here each
 * block builds X^T for 32 rows at a time in shared memory from the hot
 * lists, splits each fp32 g into SPLITS bf16 parts (g = g1 + g2 + g3 exactly
 * for SPLITS = 3: 3 x 8 bits of mantissa), and multiplies with mma.sync
 * m16n8k16 into fp32 sums: 144 slot rows (132 hot slots, padded) x 64
 * columns a block, a chunk of rows each, the chunks then added in order
 * (deterministic).  The mass row (mass[r] g[r]) is a separate weighted
 * column sum.
 *
 * It checks its result against a double-precision sum on the host and
 * times itself (CUDA events, the mean of 20 calls after a warm-up).  Run
 * next to `build/gpu_ops --batch 4096 --prec bf16` (its atom_embed_backward
 * row) to compare:
 *
 *   make build/scatter_mma && build/scatter_mma [ROWS [H]]   (default 108496 300)
 *
 * Written on 2026-12-04 after the device time of that session was spent:
 * it compiles, it has not run yet.
 */
#include "cuda_exp.cuh"
#include "gpu/mma.cuh"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;   /* ldm_x4, ldm_x4_t, mma16816: gpu/mma.cuh */

#define NH      8        /* hot slots a row (MP_ATOM_MAX_HOT) */
#define N_HOT   132      /* hot slots (the v1 atom layout), + the mass row */
#define MP_     144      /* slot rows of the product, padded to 9 x 16 */
#define BN      64       /* columns a block: 4 warps of 16 */
#define BK      32       /* rows a step */
#define CHUNK   1024     /* rows a block */
#define XS      (BK + 8) /* X^T rows in shared memory: 80 bytes, 16-byte units odd */
#define GS      (BN + 8)

/* Block (column tile x, chunk y): part[y][s][j] for s < N_HOT and the
 * block's 64 columns j. */
template <int SPLITS>
__global__ void __launch_bounds__(128) k_scatter_mma(float *part, const int16_t *hot,
                                                     const float *g, int n_rows, int h)
{
    __shared__ __align__(16) bf16 Xs[MP_ * XS];
    __shared__ __align__(16) bf16 Gs[SPLITS][BK * GS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int n0 = blockIdx.x * BN;
    const int r0 = blockIdx.y * CHUNK;
    const int r1 = r0 + CHUNK < n_rows ? r0 + CHUNK : n_rows;
    for (int e = tid; e < MP_ * XS / 2; e += 128)
        ((uint32_t *)Xs)[e] = 0u;
    float acc[9][2][4];
#pragma unroll
    for (int i = 0; i < 9; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[i][j][q] = 0.f;
    int16_t my[NH];                     /* thread tid < BK: its row's slots */
    const bf16 one = __float2bfloat16(1.f);
    for (int rb = r0; rb < r1; rb += BK) {
        /* G's 32 x 64 tile, split; a warp reads 32 columns of one row */
        {
            float v[16];
#pragma unroll
            for (int q = 0; q < 16; q++) {
                const int e = q * 128 + tid, row = rb + (e >> 6), col = n0 + (e & 63);
                v[q] = row < r1 && col < h ? g[(size_t)row * h + col] : 0.f;
            }
#pragma unroll
            for (int q = 0; q < 16; q++) {
                const int e = q * 128 + tid;
#pragma unroll
                for (int s = 0; s < SPLITS; s++) {
                    const bf16 b = __float2bfloat16(v[q]);
                    Gs[s][(e >> 6) * GS + (e & 63)] = b;
                    v[q] -= __bfloat162float(b);
                }
            }
        }
        /* X^T's column of each row: 1 at its hot slots (a repeated slot adds) */
        if (tid < BK) {
            const int row = rb + tid;
#pragma unroll
            for (int q = 0; q < NH; q++) {
                my[q] = row < r1 ? hot[(size_t)row * NH + q] : (int16_t)-1;
                if (my[q] >= 0 && my[q] < N_HOT)
                    Xs[my[q] * XS + tid] = __hadd(Xs[my[q] * XS + tid], one);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t af[9][4];
#pragma unroll
            for (int i = 0; i < 9; i++)
                ldm_x4(af[i], Xs + (i * 16 + (lane & 15)) * XS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int s = 0; s < SPLITS; s++) {
                uint32_t bfr[4];
                ldm_x4_t(bfr, Gs[s] + (kk + (lane & 15)) * GS + warp * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int i = 0; i < 9; i++) {
                    mma16816(acc[i][0], af[i], bfr[0], bfr[1]);
                    mma16816(acc[i][1], af[i], bfr[2], bfr[3]);
                }
            }
        }
        __syncthreads();
        if (tid < BK) {                 /* clear what this row set */
#pragma unroll
            for (int q = 0; q < NH; q++)
                if (my[q] >= 0 && my[q] < N_HOT)
                    Xs[my[q] * XS + tid] = __float2bfloat16(0.f);
        }
    }
    const int gq = lane >> 2, t = lane & 3;
    float *dst = part + (size_t)blockIdx.y * N_HOT * h;
#pragma unroll
    for (int i = 0; i < 9; i++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int s = i * 16 + gq + hf * 8;
            if (s >= N_HOT)
                continue;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int col = n0 + warp * 16 + j * 8 + 2 * t;
                if (col < h)
                    dst[(size_t)s * h + col] = acc[i][j][2 * hf];
                if (col + 1 < h)
                    dst[(size_t)s * h + col + 1] = acc[i][j][2 * hf + 1];
            }
        }
}

/* The mass row's chunk partials: part[c][j] = sum over the chunk of mass g. */
__global__ void k_mass_part(float *part, const float *mass, const float *g, int n_rows, int h)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int r0 = blockIdx.y * CHUNK;
    const int r1 = r0 + CHUNK < n_rows ? r0 + CHUNK : n_rows;
    if (j >= h)
        return;
    float s = 0.f;
    for (int r = r0; r < r1; r++)
        s += mass[r] * g[(size_t)r * h + j];
    part[(size_t)blockIdx.y * h + j] = s;
}

template <int SPLITS>
static void scatter(float *dw, float *part, float *mpart, const int16_t *hot, const float *mass,
                    const float *g, int n_rows, int h)
{
    const int nch = (n_rows + CHUNK - 1) / CHUNK;
    k_scatter_mma<SPLITS><<<dim3((h + BN - 1) / BN, nch), 128>>>(part, hot, g, n_rows, h);
    k_mass_part<<<dim3((h + 127) / 128, nch), 128>>>(mpart, mass, g, n_rows, h);
    const size_t w = (size_t)N_HOT * h;
    k_chunks<<<(unsigned)((w + 255) / 256), 256>>>(dw, part, nch, w, 1);
    k_chunks<<<(h + 255) / 256, 256>>>(dw + w, mpart, nch, (size_t)h, 1);
}

/* A skewed batch like real atoms: each one-hot block has a dominant value. */
static void make_batch(int16_t *hot, float *mass, float *g, int n_rows, int h, uint64_t seed)
{
    static const int blk[7] = { 101, 7, 6, 5, 6, 6, 1 };
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int r = 0; r < n_rows; r++) {
        int base = 0, q = 0;
        for (int b = 0; b < 7; b++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            const int u = (int)(x % 1000);
            if (blk[b] == 1)                       /* aromatic: hot or not */
                hot[r * NH + q++] = u < 400 ? (int16_t)base : (int16_t)-1;
            else
                hot[r * NH + q++] = (int16_t)(base + (u < 700 ? 1 : u % blk[b]));
            base += blk[b];
        }
        while (q < NH)
            hot[r * NH + q++] = -1;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        mass[r] = 0.12f + (float)(x % 1000) * 1e-4f;
    }
    for (size_t i = 0; i < (size_t)n_rows * h; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        g[i] = ((float)(x % 2000001) / 1e6f - 1.f) * (x & 1 ? 1e-3f : 1.f);
    }
}

template <int SPLITS>
static void run(int n_rows, int h, const int16_t *dhot, const float *dmass, const float *dg,
                const double *ref)
{
    const int nch = (n_rows + CHUNK - 1) / CHUNK;
    const size_t w = (size_t)(N_HOT + 1) * h;
    float *dw, *part, *mpart;
    CK(cudaMalloc(&dw, w * sizeof(float)));
    CK(cudaMalloc(&part, (size_t)nch * N_HOT * h * sizeof(float)));
    CK(cudaMalloc(&mpart, (size_t)nch * h * sizeof(float)));
    CK(cudaMemset(dw, 0, w * sizeof(float)));
    scatter<SPLITS>(dw, part, mpart, dhot, dmass, dg, n_rows, h);
    CK(cudaDeviceSynchronize());
    float *got = (float *)malloc(w * sizeof(float));
    CK(cudaMemcpy(got, dw, w * sizeof(float), cudaMemcpyDeviceToHost));
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < w; i++) {
        const double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        const double rel = fabs(d) / (fabs(ref[i]) + 1e-30);
        if (fabs(ref[i]) > 1e-3 && rel > worst)
            worst = rel;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 20; i++)
        scatter<SPLITS>(dw, part, mpart, dhot, dmass, dg, n_rows, h);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    /* the repeated calls added into dw: the sums are not checked after them */
    printf("splits %d: %8.2f us a call; ||got - ref|| / ||ref|| = %.2e, worst relative "
           "(|ref| > 1e-3) %.2e\n", SPLITS, ms * 1e3 / 20, sqrt(num / den), worst);
    free(got);
    cudaFree(dw);
    cudaFree(part);
    cudaFree(mpart);
}

int main(int argc, char **argv)
{
    const int n_rows = argc > 1 ? atoi(argv[1]) : 108496, h = argc > 2 ? atoi(argv[2]) : 300;
    if (n_rows < 1 || h < 1) {
        fprintf(stderr, "usage: scatter_mma [ROWS [H]]\n");
        return 2;
    }
    int16_t *hot = (int16_t *)malloc((size_t)n_rows * NH * sizeof(int16_t));
    float *mass = (float *)malloc((size_t)n_rows * sizeof(float));
    float *g = (float *)malloc((size_t)n_rows * h * sizeof(float));
    double *ref = (double *)calloc((size_t)(N_HOT + 1) * h, sizeof(double));
    if (!hot || !mass || !g || !ref)
        return 1;
    make_batch(hot, mass, g, n_rows, h, 7);
    for (int r = 0; r < n_rows; r++) {
        for (int q = 0; q < NH; q++) {
            const int s = hot[r * NH + q];
            if (s >= 0 && s < N_HOT)
                for (int j = 0; j < h; j++)
                    ref[(size_t)s * h + j] += g[(size_t)r * h + j];
        }
        for (int j = 0; j < h; j++)
            ref[(size_t)N_HOT * h + j] += (double)mass[r] * g[(size_t)r * h + j];
    }
    int16_t *dhot;
    float *dmass, *dg;
    CK(cudaMalloc(&dhot, (size_t)n_rows * NH * sizeof(int16_t)));
    CK(cudaMalloc(&dmass, (size_t)n_rows * sizeof(float)));
    CK(cudaMalloc(&dg, (size_t)n_rows * h * sizeof(float)));
    CK(cudaMemcpy(dhot, hot, (size_t)n_rows * NH * sizeof(int16_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dmass, mass, (size_t)n_rows * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, g, (size_t)n_rows * h * sizeof(float), cudaMemcpyHostToDevice));
    printf("%d rows x %d columns, %d hot slots + mass, chunks of %d rows\n", n_rows, h, N_HOT,
           CHUNK);
    run<3>(n_rows, h, dhot, dmass, dg, ref);
    run<2>(n_rows, h, dhot, dmass, dg, ref);
    free(hot);
    free(mass);
    free(g);
    free(ref);
    return 0;
}
