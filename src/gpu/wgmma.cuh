/*
 * wgmma.cuh - Hopper's warpgroup products (sm_90a) as the panels of
 * tiles_cuda.cu use them: wgmma.mma_async m64n152k16 with both operands in
 * shared memory, the fences and waits around it, and the shared-memory
 * matrix descriptor of core matrices without swizzle.  Outside sm_90a
 * (the compute_90 PTX of the build) the product and its fences compile to
 * nothing: the host takes the panels on sm_90 devices only.
 */
#ifndef MP_WGMMA_CUH
#define MP_WGMMA_CUH

#include <stdint.h>

__device__ __forceinline__ void fence_async_smem(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void bar_named(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void wgmma_fence(void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit(void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_wait(void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
/* A shared-memory matrix descriptor, no swizzle: lbo = bytes between core
 * matrices along k, sbo = along m (n). */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 |
           (uint64_t)(sbo >> 4) << 32;
}
/* Element (r, k) of a K-major operand of `kc` core columns: core (r / 8,
 * k / 8) of 64 elements, row r % 8 of it 8 elements long. */
__device__ __forceinline__ int core_at(int r, int k, int kc)
{
    return ((r >> 3) * kc + (k >> 3)) * 64 + (r & 7) * 8 + (k & 7);
}

/* d (+)= A B for one 64 x 152 x 16 step, both operands in shared memory
 * (descriptors), bf16, fp32 sums; acc 0: d = A B.  TA, TB: 0 for K-major
 * operands, 1 for M- (N-) major ones. */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_152(float d[76], uint64_t da, uint64_t db, int acc)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %78, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n152k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, "
                 "%72, %73, %74, %75"
                 "}, %76, %77, p, 1, 1, %79, %80;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
                   "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75])
                 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
#endif
}

#endif /* MP_WGMMA_CUH */
