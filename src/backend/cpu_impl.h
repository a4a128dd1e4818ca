/*
 * cpu_impl.h - what the two files of the cpu backend share (cpu.c: memory,
 * dense, elementwise, loss, Adam, open; cpu_graph.c: the graph ops): the
 * thread split helpers, the row kernels, and the few elementwise passes the
 * graph file composes its fused ops from.  Not part of any API.
 *
 * Threads and determinism.  The result of every op is bitwise the same for
 * any thread count, by construction:
 *   - row ops (gathers, CSR segment sums, pooling, elementwise) give each
 *     output row or element one writer that sums in a fixed order;
 *   - scatters into weight rows (the backward of the one-hot gathers) give
 *     each weight row to one thread, which adds its input rows in ascending
 *     order (through a slot index, see cpu_graph.c's scatter_by_slot); the
 *     bias column sums split the columns, so each element is still summed
 *     over the rows in the same order;
 *   - gemm: OpenBLAS runs single-threaded inside our OpenMP threads, on row
 *     blocks of C whose size depends only on the problem shape, never on the
 *     thread count (each block is one deterministic sgemm call).  So there is
 *     one thread pool (ours), not two fighting over the cores.
 *
 * Storage.  "cpu" stores every operand in fp32 (act_st = MP_ST_ELEM) and
 * runs the fp32 code, whose bits never change; "cpu:bf16" (act_st =
 * MP_ST_BF16) gives the ops bf16 operands, which they hand to the bf16
 * paths: cpu_bf16.c (the elementwise and graph ops, widening each bf16 value
 * when read and rounding once when written) and cpu_dnnl.c (the products).
 * An fp32 op asked for a bf16 operand it does not take fails an assertion
 * (CPU_ELEM).
 */
#ifndef MP_CPU_IMPL_H
#define MP_CPU_IMPL_H

#include "backend/ops.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements an op runs on one thread: a parallel region costs
 * a few microseconds, which is what ~16k float adds cost. */
#define PAR_MIN 16384

static inline int threads_for(size_t work)
{
    if (work < PAR_MIN)
        return 1;
    int nt = mp_threads_get();
    return nt > 0 ? nt : 1;
}

static inline int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline int thread_count(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* [*a, *z): this thread's contiguous share of [0, n), cut at multiples of
 * `align` (16 floats = one cache line, so no two threads share a line). */
static inline void my_range(size_t n, size_t align, size_t *a, size_t *z)
{
    size_t nt = (size_t)thread_count(), t = (size_t)thread_id();
    size_t per = ((n + nt - 1) / nt + align - 1) / align * align;
    size_t x = t * per, y = x + per;
    *a = x < n ? x : n;
    *z = y < n ? y : n;
}

/* Columns [*c0, *c1) of h for this thread, in chunks of 16 floats. */
static inline void my_columns(int h, int *c0, int *c1)
{
    size_t a, z;
    my_range((size_t)h, 16, &a, &z);
    *c0 = (int)a;
    *c1 = (int)z;
}

/*
 * Runs the statement (the variadic part) with size_t a, z bound to this
 * thread's share of [0, n), or to all of it without a parallel region when
 * nt <= 1.  Why not "parallel for if (nt > 1)": GCC compiles the if(0) path
 * of a combined "parallel for simd" as a plain scalar loop, 20x slower here.
 * Needs a variable `nt` in scope.
 */
#define PARALLEL_RANGE(n, align, ...)                                        \
    do {                                                                     \
        if (nt <= 1) {                                                       \
            size_t a = 0, z = (n);                                           \
            __VA_ARGS__;                                                     \
        } else {                                                             \
            _Pragma("omp parallel num_threads(nt)")                          \
            {                                                                \
                size_t a, z;                                                 \
                my_range((n), (align), &a, &z);                              \
                __VA_ARGS__;                                                 \
            }                                                                \
        }                                                                    \
    } while (0)

/* Runs the statement with int c0, c1 bound to this thread's columns of h. */
#define PARALLEL_COLUMNS(h, ...)                                             \
    do {                                                                     \
        if (nt <= 1) {                                                       \
            int c0 = 0, c1 = (h);                                            \
            __VA_ARGS__;                                                     \
        } else {                                                             \
            _Pragma("omp parallel num_threads(nt)")                          \
            {                                                                \
                int c0, c1;                                                  \
                my_columns((h), &c0, &c1);                                   \
                __VA_ARGS__;                                                 \
            }                                                                \
        }                                                                    \
    } while (0)

/* The kernels below are compiled three times (AVX-512, AVX2, baseline) and
 * the best one for the CPU is picked at load time.  Results can differ in
 * the last bit between those versions (FMA contraction), never between runs
 * or thread counts on one machine. */
#if defined(__x86_64__)
#define KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERNEL
#endif

/* The same, for loops that were written (and whose fp32 bits were fixed)
 * as baseline code: no FMA contraction, so every version rounds each
 * product and each sum as the baseline one does and gives its bits, only
 * faster. */
#if defined(__x86_64__)
#define KERNEL_EXACT \
    __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#else
#define KERNEL_EXACT
#endif

/* Row kernels: the inner loops every graph op is made of.  "omp simd"
 * because GCC's -O2 cost model would otherwise leave them scalar. */
static inline void row_add(float *restrict y, const float *restrict x, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] += x[j];
}

static inline void row_axpy(float *restrict y, float s, const float *restrict x, int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] += s * x[j];
}

static inline void row_sub(float *restrict y, const float *restrict x, const float *restrict r,
                           int n)
{
#pragma omp simd
    for (int j = 0; j < n; j++)
        y[j] = x[j] - r[j];
}

/* bf16 <-> float over n elements, inlined into the KERNEL loops so that
 * they vectorize for the CPU at hand: widening is exact; narrowing rounds to
 * nearest even and keeps a NaN a quiet NaN (mp_bf16_round's bits, written
 * with integer ops only). */
static inline void bf16_widen(float *restrict dst, const uint16_t *restrict src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

static inline void bf16_narrow(uint16_t *restrict dst, const float *restrict src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t q = (u >> 16) | 0x40u;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}

/* Every storage type given to a cpu op is the element type (float). */
#define CPU_ELEM(st) MP_ASSERT((st) == MP_ST_ELEM)

/* cpu.c: the elementwise passes over float arrays, as the seam's ops run
 * them (threaded, same bits for any thread count): relu_dropout with a key
 * value, relu_dropout_backward (dx may alias dy), y += x. */
void mp_cpu_relu_dropout(float *y, const float *x, size_t n, double p, uint64_t key);
void mp_cpu_relu_backward(float *dx, const float *y, const float *dy, size_t n, double p);
void mp_cpu_add(float *y, const float *x, size_t n);

/* cpu_graph.c: sets the graph ops of the cpu backend. */
void mp_cpu_graph_ops(mp_backend *b);

/* cpu.c: gemm's contract (ops.h) for fp32 operands. */
void mp_cpu_gemm_f32(int count, const mp_gemm *g);

/* cpu_dnnl.c: gemm's contract for bf16 A and B (C fp32 or bf16), each C
 * then through a ReLU when relu; bf16 <-> float rows; whether the products
 * run on bf16 instructions (1) or in sgemm on widened operands (0); a line
 * for logs. */
void mp_cpu_gemm_bf16(int count, const mp_gemm *g, int relu);
/* C = ReLU(R + A B) for one product g of bf16 A and B (ta 0, beta 0), R of
 * C's storage with stride ldr (R and C may not overlap): the residual read
 * by the product's epilogue, not copied into C first; the same bits as the
 * copy followed by mp_cpu_gemm_bf16 with beta 1 and relu. */
void mp_cpu_gemm_bf16_res_relu(const mp_gemm *g, const void *r, int ldr);
void mp_cpu_widen(float *restrict dst, const uint16_t *restrict src, size_t n);
void mp_cpu_narrow(uint16_t *restrict dst, const float *restrict src, size_t n);
int  mp_cpu_bf16_native(void);
const char *mp_cpu_bf16_info(void);

/* cpu_bf16.c: the ops that take storage types, for operands of any storage
 * (the entry points cpu.c and cpu_graph.c hand a call to when one of its
 * storage types is bf16); the arguments are the seam's. */
void mp_cpu_bf16_copy2d(void *dst, mp_stype dst_st, int ldd, const void *src, mp_stype src_st,
                        int lds, int32_t n_rows, int n_cols);
void mp_cpu_bf16_relu_dropout(void *y, const void *x, mp_stype st, size_t n, double p,
                              uint64_t key);
void mp_cpu_bf16_relu_backward(void *dx, void *dxo, mp_stype dxo_st, const void *y,
                               mp_stype y_st, const void *dy, size_t n, double p);
void mp_cpu_bf16_edge_embed(void *h0, void *m0, mp_stype st, const int32_t *edge_src,
                            const int8_t *bond_hot, const float *a, const float *wb,
                            int32_t n_edges, int h);
void mp_cpu_bf16_message(void *msg, mp_stype msg_st, float *s, const int32_t *in_start,
                         const int32_t *in_edge, const int32_t *edge_src, const void *m,
                         mp_stype m_st, int relu_in, int32_t n_atoms, int32_t n_edges, int h);
void mp_cpu_bf16_message_backward(void *dz, mp_stype dz_st, float *dh0, float *ds,
                                  const int32_t *in_start, const int32_t *in_edge,
                                  const int32_t *edge_dst, const void *dmsg, mp_stype dmsg_st,
                                  const void *y, mp_stype y_st, double p, int32_t n_atoms,
                                  int32_t n_edges, int h);
void mp_cpu_bf16_atom_sum(void *a, mp_stype a_st, const int32_t *in_start,
                          const int32_t *in_edge, const void *m, mp_stype m_st,
                          int32_t n_atoms, int h);
void mp_cpu_bf16_atom_sum_backward(float *dm, void *dmo, mp_stype dmo_st,
                                   const int32_t *edge_dst, const float *da, const void *y,
                                   mp_stype y_st, double p, int32_t n_edges, int h);

#endif /* MP_CPU_IMPL_H */
