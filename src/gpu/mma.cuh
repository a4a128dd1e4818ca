/*
 * mma.cuh - the tensor-core and async-copy instructions the product kernels
 * of ours share (fused_cuda.cu, tiles_cuda.cu): cp.async into shared memory,
 * ldmatrix, and mma.sync m16n8k16 with bf16 operands and fp32 sums.
 */
#ifndef MP_MMA_CUH
#define MP_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* Two consecutive elements of storage float or bf16, as floats. */
__device__ __forceinline__ float2 ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float2 ld2(const __nv_bfloat16 *p)
{
    return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}
__device__ __forceinline__ void st2(float *p, float x, float y) { *(float2 *)p = make_float2(x, y); }
__device__ __forceinline__ void st2(__nv_bfloat16 *p, float x, float y)
{
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(x, y);
}

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* N (4, 8 or 16) bytes global -> shared, asynchronously; ok == 0 writes zeros. */
template <int N>
__device__ __forceinline__ void cp_async(void *dst, const void *src, int ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "n"(N), "r"(ok ? N : 0));
}
__device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
/* until at most N of this thread's commit groups are in flight */
template <int N> __device__ __forceinline__ void cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8 x 8 bf16 matrices from shared memory (lane l gives the address of
 * row l % 8 of matrix l / 8), as stored or transposed. */
__device__ __forceinline__ void ldm_x4(uint32_t r[4], const __nv_bfloat16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldm_x4_t(uint32_t r[4], const __nv_bfloat16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* d += a b for one 16 x 8 x 16 tile: bf16 operands, fp32 sums. */
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif /* MP_MMA_CUH */
