/*
 * cuda_ctx.cuh - what the cuda backend's .cu files share: the context
 * (stream, cuBLAS handles, scratch, precision, the kept error), the error
 * checks (CUDA_OK, BLAS_OK, LAUNCHED: the first failure is kept with
 * file:line and later ops are not queued), storage types (ops.h mp_stype)
 * as C++ types, the launch shapes of the row and grid-stride kernels, and
 * the device twin of ops.h's dropout hash.
 *
 *   ops_cuda.cu     open / close, memory, introspection, registration
 *   dense_cuda.cu   gemm (cuBLAS), gemm_res_relu (cuBLASLt)
 *   tiles_cuda.cu   the bf16 products of small batches (a kernel of ours)
 *   rows_cuda.cu    the elementwise and graph row ops (kernels_rows.cuh)
 *   reduce_cuda.cu  column sums, weight-gradient scatters, loss, Adam, step_end
 *   graph_cuda.cu   capture into CUDA graphs;  stream_cuda.cu  the copy lane
 *
 * Each file registers its ops on the backend through an mp_cu_*_ops call
 * from mp_backend_cuda_open.
 */
#ifndef MP_CUDA_CTX_CUH
#define MP_CUDA_CTX_CUH

#include "gpu/gpu.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

/* The cuBLAS and cuBLASLt functions the backend calls, through mp_blas
 * (blas_dl.cu loads the libraries when the first backend opens; they are
 * not linked).  Each member has the library's type and name, so a call
 * reads mp_blas.cublasGemmEx(...); one made directly does not link. */
#define MP_BLAS_FUNCTIONS(X)                                                          \
    X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetPointerMode)       \
    X(cublasSetWorkspace) X(cublasSetSmCountTarget)                                  \
    X(cublasGetStatusString) X(cublasGetStatusName)                                  \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul)                           \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate)                    \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)                   \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                     \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)             \
    X(cublasLtMatmulPreferenceSetAttribute)

struct mp_blas_api {
#define MP_BLAS_MEMBER(f) decltype(&::f) f;
    MP_BLAS_FUNCTIONS(MP_BLAS_MEMBER)
#undef MP_BLAS_MEMBER
    /* spelled out: C++ also sees an inline overload (a cudaDataType compute
     * type) that decltype cannot choose between */
    cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const void *, const void *, cudaDataType, int,
                                   const void *, cudaDataType, int, const void *, void *,
                                   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
};
extern mp_blas_api mp_blas;

/* Loads the two libraries and fills mp_blas, once per process (any thread);
 * 1 when they are there, else 0 with the reason in err (e.g. "cannot load
 * libcublasLt.so.13: ..."). */
int mp_blas_load(char *err, size_t cap);

/* ===================================================================== */
/* Context and errors                                                     */
/* ===================================================================== */

/* cuBLAS workspace: fixed (so its algorithm choice, hence its bits, is fixed,
 * and capture needs no allocation).  NVIDIA recommends 32 MiB on Hopper. */
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)
/* Scratch for the partial sums of the two-level reductions: 16M floats. */
#define SCRATCH_ELEMS ((size_t)16 << 20)
/* Blocks a one-hot scatter whose partials outweigh its rows aims for: 5
 * one-warp blocks a SM (its shared memory's limit) on 132 SMs.  A constant,
 * not the device's SM count, so the sums are the same bits on every card. */
#define SCATTER_BLOCKS 660

/* gemm_res_relu's cuBLASLt algorithm per call shape, so that the heuristic
 * (tens of microseconds of host time, more than a small batch's product) is
 * asked once per shape: lt_heuristic in dense_cuda.cu. */
#define LT_CACHE 256
#define LT_KEY 13
typedef struct {
    int valid, found;
    int key[LT_KEY];
    cublasLtMatmulHeuristicResult_t res;
} lt_cached;

typedef struct {
    int            device;
    cudaStream_t   stream;
    cublasHandle_t blas;
    void          *blas_ws;
    /* gemm_batch's second lane: a side stream with its own cuBLAS handle and
     * workspace, forked from and joined into `stream` by the two events */
    cudaStream_t   side;
    cublasHandle_t blas2;
    void          *blas_ws2;
    cudaEvent_t    ev_fork, ev_join;
    cudaStream_t   lane_stream[2];
    cublasHandle_t lane_blas[2];
    cublasLtHandle_t lt;         /* gemm_res_relu's fused epilogue; shares blas_ws */
    float         *scratch;
    int            tiles;        /* tiles_cuda.cu's kernels for bf16 products: 0 never
                                  * (MOLPROP_CUDA_TILES=0), 2 always (=1), 1 (default)
                                  * but for the small ones under a share > 2 */
    int            share;        /* set_share's n: instances side by side (1: alone) */
    int            scatter_blocks; /* the one-hot scatters' block budget (reduce_cuda.cu
                                  * slot_launch): SCATTER_BLOCKS, or
                                  * MOLPROP_CUDA_SCATTER_BLOCKS (0: no cap) */
    int            by_atom_bw;     /* message_backward per atom (rows_cuda.cu), else in two
                                    * passes: MOLPROP_CUDA_BY_ATOM_BW=0|1 */
    int            wgmma;        /* 1: the device is sm_90 (tiles_cuda.cu's panels) */
    int            pdl;          /* programmatic dependent launch: 0 off, 1 all
                                  * but the panels, 2 all (launch_dep(), below) */
    long           tile_calls;   /* products queued on it (mp_backend_cuda_tile_calls) */
    long           panel_msg_calls; /* message steps on the panels (fused_cuda.cu) */
    mp_precision   prec;
    int            sm_count;
    int            sm_target;    /* SMs the products are sized for; 0: all (gpu.h) */
    size_t         mem_total;
    int            capturing;
    /* streaming (stream_cuda.cu): the copy lane and the fences of ops.h's
     * streaming ops; made at open by mp_cu_stream_ops, freed by
     * mp_cu_stream_close from close */
    cudaStream_t   copy;
    cudaEvent_t    fence[MP_FENCES];
    lt_cached      lt_cache[LT_CACHE];
    mp_status      err;          /* first failure, MP_OK when none   */
    char           errmsg[512];
    char           info[512];
} gpu_ctx;

static inline gpu_ctx *CTX(const mp_backend *b) { return (gpu_ctx *)b->ctx; }

static inline void record(gpu_ctx *c, mp_status st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static inline void record(gpu_ctx *c, mp_status st, const char *file, int line, const char *fmt, ...)
{
    if (c->err != MP_OK)
        return;
    c->err = st;
    int k = snprintf(c->errmsg, sizeof c->errmsg, "%s:%d: ", file, line);
    if (k < 0 || (size_t)k >= sizeof c->errmsg)
        k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg + k, sizeof c->errmsg - (size_t)k, fmt, ap);
    va_end(ap);
}

static inline int cuda_ok(gpu_ctx *c, cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess)
        return 1;
    record(c, e == cudaErrorMemoryAllocation ? MP_ERR_NOMEM : MP_ERR_INTERNAL, file, line,
           "CUDA error: %s (%s, in %s)", cudaGetErrorString(e), cudaGetErrorName(e), what);
    return 0;
}

static inline int blas_ok(gpu_ctx *c, cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 1;
    record(c, s == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM : MP_ERR_INTERNAL, file, line,
           "cuBLAS error: %s (%s, in %s)", mp_blas.cublasGetStatusString(s), mp_blas.cublasGetStatusName(s),
           what);
    return 0;
}

#define CUDA_OK(c, call) cuda_ok((c), (call), #call, __FILE__, __LINE__)
#define BLAS_OK(c, call) blas_ok((c), (call), #call, __FILE__, __LINE__)
/* After every kernel launch: a bad configuration shows up here. */
#define LAUNCHED(c, name) cuda_ok((c), cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

/* The kept failure as a status with the message set (MP_OK when none). */
static inline mp_status report(gpu_ctx *c)
{
    if (c->err == MP_OK)
        return MP_OK;
    return mp_error_set(c->err, "%s", c->errmsg);
}

/* An op may queue work: no failure kept. */
static inline int usable(gpu_ctx *c) { return c->err == MP_OK; }

/* Calls that cannot be part of a captured graph fail it with a message. */
static inline int not_capturing(gpu_ctx *c, const char *what, const char *file, int line)
{
    if (!c->capturing)
        return 1;
    record(c, MP_ERR_ARG, file, line,
           "%s is not allowed while a CUDA graph is being captured (mp_cuda_graph_begin): "
           "only device ops can be recorded", what);
    return 0;
}
#define NOT_CAPTURING(c, what) not_capturing((c), (what), __FILE__, __LINE__)

/* ===================================================================== */
/* Launch shapes                                                          */
/* ===================================================================== */

#define THREADS 256
#define ROWS_PER_BLOCK (THREADS / 32)

/* Blocks for a grid-stride loop over n items, items_per_block per block:
 * enough to fill the device several times over, never 0.  Results never
 * depend on this number (each output has one fixed computation). */
static inline unsigned grid_for(const gpu_ctx *c, size_t n, size_t items_per_block)
{
    size_t blocks = (n + items_per_block - 1) / items_per_block;
    size_t cap = (size_t)c->sm_count * 32;
    if (blocks > cap)
        blocks = cap;
    return blocks ? (unsigned)blocks : 1u;
}

/* ===================================================================== */
/* Storage types                                                          */
/* ===================================================================== */

typedef __nv_bfloat16 bf16;

/* Runs the statement (the variadic part) with T the C++ type of storage st:
 * float (the element type) or bf16.  Nested, it instantiates a kernel for
 * each combination of its operands' types. */
#define WITH_T(st, T, ...)                                                                 \
    do {                                                                                  \
        if ((st) == MP_ST_BF16) {                                                         \
            typedef bf16 T;                                                               \
            __VA_ARGS__;                                                                  \
        } else {                                                                          \
            typedef float T;                                                              \
            __VA_ARGS__;                                                                  \
        }                                                                                 \
    } while (0)

/* x, or max(x, 0) where RELU: how message reads M_0 through the ReLU
 * (kernels_rows.cuh's per-atom message, fused_cuda.cu's panels: one
 * definition, so the two make the same bits). */
template <bool RELU> __device__ __forceinline__ float rl(float x)
{
    return RELU ? (x > 0.0f ? x : 0.0f) : x;
}

static inline cudaDataType_t cuda_type(mp_stype st)
{
    return st == MP_ST_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static inline const char *st_name(mp_stype st) { return st == MP_ST_BF16 ? "bf16" : "fp32"; }

/* 1 when p can be read or written 4 elements of storage st at a time
 * (kernels_rows.cuh's V = 4: 16 bytes of float, 8 of bf16); NULL, an
 * absent optional operand, counts as aligned. */
static inline int alv(const void *p, mp_stype st)
{
    return ((uintptr_t)p & (st == MP_ST_BF16 ? 7 : 15)) == 0;
}
static inline int al16(const void *p) { return alv(p, MP_ST_ELEM); }

/*
 * Programmatic dependent launch (sm_90).  launch() queues a kernel so that
 * it may be scheduled before the kernel ahead of it on the stream has
 * finished: its launch and the start of its blocks overlap the tail of the
 * one before.  At batch 50 a step is a chain of ~50 kernels of a few
 * microseconds each, and this took a graph-replayed bf16 step on an H100
 * from 250 to 230 us (bench/RESULTS.md, "Programmatic dependent launch").
 * Every kernel of ours therefore opens with pdl_enter(), which waits until
 * the kernel before it has completed and its writes are visible
 * (griddepcontrol.wait).  None of ours triggers its dependants early
 * (griddepcontrol.launch_dependents): that was measured slower, for the
 * dependants' blocks then hold SM slots while they wait.  Completion stays
 * transitive: a kernel completes after its wait.  cuBLAS's kernels are
 * launched plainly and wait for whatever precedes them.
 *
 * c->pdl: 0 off (MOLPROP_CUDA_PDL=0 at open, or before sm_90); 1 (the
 * default) every kernel but the wgmma panels (tiles_cuda.cu), whose blocks
 * each take a whole SM's shared memory: queued early, a step of batch 1024
 * or 4096, where they run, was 4% slower; 2 every kernel
 * (MOLPROP_CUDA_PDL=2, for comparisons).  A kernel without pdl_enter()
 * must not be queued with launch().
 */
__device__ __forceinline__ void pdl_enter(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Queues k<<<grid, block, smem, s>>>(args), as a dependent launch when
 * c->pdl is 2, or 1 and dep; a failure is left to cudaGetLastError (the
 * callers' LAUNCHED). */
template <typename... P, typename... A>
static inline void launch_dep(const gpu_ctx *c, int dep, cudaStream_t s, void (*k)(P...),
                              dim3 grid, dim3 block, size_t smem, A... args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = c->pdl == 2 || (c->pdl == 1 && dep);
    (void)cudaLaunchKernelEx(&cfg, k, ((P)args)...);
}

/* launch_dep for every kernel but the panels. */
template <typename... P, typename... A>
static inline void launch(const gpu_ctx *c, cudaStream_t s, void (*k)(P...), dim3 grid, dim3 block,
                          size_t smem, A... args)
{
    launch_dep(c, 1, s, k, grid, block, smem, args...);
}

/* Launches k4 (the kernel's V = 4 form) when v4, else k1 (V = 1), over
 * rows x (cols / V) items of one thread each, on the backend's stream. */
template <typename... P, typename... A>
static inline void launch_rows(gpu_ctx *c, int v4, size_t rows, size_t cols, void (*k4)(P...),
                               void (*k1)(P...), A... args)
{
    size_t items = rows * (cols / (v4 ? 4 : 1));
    unsigned grid = grid_for(c, items, THREADS);
    if (v4)
        launch(c, c->stream, k4, grid, THREADS, 0, args...);
    else
        launch(c, c->stream, k1, grid, THREADS, 0, args...);
}

/* Warp-per-row kernels: global warp index and warp count. */
__device__ __forceinline__ int64_t warp_id(void)
{
    return ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}
__device__ __forceinline__ int64_t warp_count(void)
{
    return ((int64_t)gridDim.x * blockDim.x) >> 5;
}
__device__ __forceinline__ int lane_id(void) { return (int)(threadIdx.x & 31); }

/* Grid-stride loops: global thread index and thread count. */
__device__ __forceinline__ size_t gtid(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t gstride(void) { return (size_t)gridDim.x * blockDim.x; }

/* ===================================================================== */
/* Dropout hash (the device twin of ops.h's mp_dropout_keep)              */
/* ===================================================================== */

__device__ __forceinline__ bool d_keep(uint64_t key, uint64_t index, uint32_t thr)
{
    uint64_t z = key + (index + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= thr;
}

/* The context of a cuda backend, or NULL when b is not one (ops_cuda.cu). */
gpu_ctx *mp_cu_ctx(const mp_backend *b);

/*
 * The capture gate (ops_cuda.cu), one per process: held by a thread from
 * the start of a stream capture to its end, and around every call that
 * synchronizes the device or may (cudaFree, cudaFreeHost, cudaMalloc,
 * cudaHostAlloc, a backend's open and close with their cuBLAS handles,
 * graph destruction).  Such a call from another thread (another run side
 * by side, its own backend) would invalidate the capture, even in
 * thread-local capture mode.  Recursive: the capturing thread may close
 * its backend.
 */
void mp_cu_gate_enter(void);
void mp_cu_gate_leave(void);

/* Registration, called by mp_backend_cuda_open: dense_cuda.cu (gemm,
 * gemm_res_relu), rows_cuda.cu (copy2d, the elementwise and graph row ops),
 * reduce_cuda.cu (col_sum, the embed backwards, loss, adam, adam_sched,
 * step_end), graph_cuda.cu (the capture ops), stream_cuda.cu (pinned host
 * buffers, the copy lane, fences; if those cannot be made they stay NULL,
 * with no failure kept).  mp_cu_stream_close releases the latter's stream
 * and events (called by close; safe when they were never made). */
void mp_cu_dense_ops(mp_backend *b);
/* train_cuda.cu: the layers of the training options (act, act_backward,
 * add, edge_mean, neighbor_sum, attn_pool and its backward, batch_norm and
 * its backward, clip_norm), and the losses beyond mse and bce, which
 * reduce_cuda.cu's loss hands to mp_cu_loss_ext. */
void mp_cu_layer_ops(mp_backend *b);
void mp_cu_loss_ext(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                    const uint8_t *mask, int32_t n, const mp_loss_spec *spec);
void mp_cu_rows_ops(mp_backend *b);
/* fused_cuda.cu: message_update (the inference message step in one kernel),
 * which takes S from rows_cuda.cu's segment sum */
void mp_cu_fused_ops(mp_backend *b);
void mp_cu_segment_sum(gpu_ctx *c, float *s, const int32_t *in_start, const int32_t *in_edge,
                       const void *x, mp_stype x_st, int relu, int32_t n_atoms, int h);
void mp_cu_reduce_ops(mp_backend *b);
void mp_cu_capture_ops(mp_backend *b);
void mp_cu_stream_ops(mp_backend *b);
void mp_cu_nccl_ops(mp_backend *b);      /* nccl_cuda.cu: rank_sum (NCCL=1 builds) */
void mp_cu_pick_rank_device(void);       /* nccl_cuda.cu: a GPU per MPI rank      */
void mp_cu_stream_close(gpu_ctx *c);

/* dense_cuda.cu: one product of gemm on `lane` (0: the backend's stream and
 * cuBLAS handle, 1: the side stream gemm runs every other product of a batch
 * on). */
void mp_cu_gemm_on(gpu_ctx *c, int lane, const mp_gemm *g);

/* tiles_cuda.cu: the product on the tile kernel, 1 when queued (or its
 * failure kept), 0 when it does not take these operands and sizes (the
 * caller runs cuBLAS). */
int mp_cu_tile_gemm(gpu_ctx *c, int lane, const mp_gemm *g);
int mp_cu_tile_res_relu(gpu_ctx *c, int m, int n, int k, const void *a, int lda, const void *w,
                        int ldw, mp_stype aw_st, const void *r, int ldr, void *cm, int ldc,
                        mp_stype rc_st);

/* reduce_cuda.cu: the weight-gradient scatter of edge_embed_backward:
 * dwb[s] += sum of the dh0 rows of the edges whose bond holds slot s. */
void mp_cu_bond_scatter(gpu_ctx *c, float *dwb, const int8_t *bond_hot, const float *dh0,
                        int32_t n_edges, int h);

#endif /* MP_CUDA_CTX_CUH */
