/*
 * cuda_exp.cuh - what the standalone CUDA experiments share
 * (bench/dw_wgmma.cu, bench/scatter_mma.cu): CK(call), the check of a
 * runtime call (on an error the place and the message, and exit 1), and
 * the in-order sum of chunk partials.
 */
#ifndef MP_BENCH_CUDA_EXP_CUH
#define MP_BENCH_CUDA_EXP_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* dst[i] (+)= the sum over chunks c, in order, of part[c][i]. */
__global__ void k_chunks(float *dst, const float *part, int n_chunks, size_t width, int add)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= width)
        return;
    float s = 0.f;
    for (int c = 0; c < n_chunks; c++)
        s += part[(size_t)c * width + i];
    dst[i] = add ? dst[i] + s : s;
}

#endif
