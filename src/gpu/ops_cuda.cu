/*
 * ops_cuda.cu - the cuda backend (src/gpu): its context, open and close, the
 * memory ops of ops.h, introspection (gpu.h), and the registration of the
 * ops the other files implement (cuda_ctx.cuh lists them).  Built for
 * Hopper (sm_90a), fp32 buffers, one stream; at bf16 the backend reports
 * act_st = MP_ST_BF16 and the model stores its product operands in bf16
 * (ops.h), which the same ops read and write through their storage-type
 * arguments.
 *
 * Everything is queued on the backend's stream without host synchronization
 * (no allocation, copy to the host or sync inside an op), so a sequence of
 * ops can be captured into a CUDA graph (mp_cuda_graph_*).
 *
 * Errors: each CUDA and cuBLAS call and each kernel launch is checked; the
 * first failure is kept in the context with file:line and reported by sync,
 * upload and download (gpu.h).  Once a failure is kept, later ops are not
 * queued (they would compute on garbage).
 */
#include "gpu/cuda_ctx.cuh"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* A plain device copy in 16-byte units (cu_copy of aligned buffers). */
__global__ void k_copy16(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n16)
{
    pdl_enter();
    for (size_t t = gtid(); t < n16; t += gstride())
        dst[t] = src[t];
}

/* ===================================================================== */
/* Memory                                                                 */
/* ===================================================================== */

static pthread_mutex_t gate;
static pthread_once_t gate_once = PTHREAD_ONCE_INIT;

static void gate_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&gate, &a);
    pthread_mutexattr_destroy(&a);
}

void mp_cu_gate_enter(void)
{
    pthread_once(&gate_once, gate_init);
    pthread_mutex_lock(&gate);
}

void mp_cu_gate_leave(void) { pthread_mutex_unlock(&gate); }

static void *cu_alloc(mp_backend *b, size_t bytes)
{
    gpu_ctx *c = CTX(b);
    if (c->capturing) {
        mp_error_set(MP_ERR_ARG, "%s:%d: cuda: device allocation is not allowed while a CUDA "
                     "graph is being captured", __FILE__, __LINE__);
        return NULL;
    }
    void *p = NULL;
    /* 0 bytes still gives a distinct pointer: NULL means failure. */
    mp_cu_gate_enter();
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    mp_cu_gate_leave();
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();                  /* an allocation failure is not sticky */
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        free_b = total_b = 0;
    }
    mp_error_set(e == cudaErrorMemoryAllocation ? MP_ERR_NOMEM : MP_ERR_INTERNAL,
                 "%s:%d: cuda: cannot allocate %zu bytes (%.1f MiB) of device memory: %s; "
                 "%.1f MiB free of %.1f MiB",
                 __FILE__, __LINE__, bytes, bytes / 1048576.0, cudaGetErrorString(e),
                 free_b / 1048576.0, total_b / 1048576.0);
    return NULL;
}

static void cu_free(mp_backend *b, void *p)
{
    gpu_ctx *c = CTX(b);
    if (!p || !NOT_CAPTURING(c, "b->free"))
        return;
    mp_cu_gate_enter();
    CUDA_OK(c, cudaFree(p));
    mp_cu_gate_leave();
}

static mp_status cu_upload(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    gpu_ctx *c = CTX(b);
    if (!NOT_CAPTURING(c, "b->upload") || !usable(c))
        return report(c);
    if (bytes) {
        /* Synchronous: the caller may reuse `src` as soon as we return. */
        if (CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream)))
            CUDA_OK(c, cudaStreamSynchronize(c->stream));
    }
    return report(c);
}

static mp_status cu_download(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    gpu_ctx *c = CTX(b);
    if (!NOT_CAPTURING(c, "b->download") || !usable(c))
        return report(c);
    if (bytes && CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream)))
        CUDA_OK(c, cudaStreamSynchronize(c->stream));
    return report(c);
}

static void cu_zero(mp_backend *b, void *dst, size_t bytes)
{
    gpu_ctx *c = CTX(b);
    if (bytes && usable(c))
        CUDA_OK(c, cudaMemsetAsync(dst, 0, bytes, c->stream));
}

static void cu_copy(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    gpu_ctx *c = CTX(b);
    if (!bytes || dst == src || !usable(c))
        return;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d < s + bytes && s < d + bytes) {
        record(c, MP_ERR_ARG, __FILE__, __LINE__,
               "cuda copy: source and destination overlap (%zu bytes, %td apart)", bytes,
               (ptrdiff_t)(d - s));
        return;
    }
    if (al16(dst) && al16(src) && bytes % 16 == 0) {
        /* A kernel: a memcpy node costs more than a kernel node in a graph,
         * and 16-byte accesses run at the copy bandwidth. */
        launch(c, c->stream, k_copy16, grid_for(c, bytes / 16, THREADS), THREADS, 0,
            (uint4 *)dst, (const uint4 *)src, bytes / 16);
        LAUNCHED(c, "k_copy16");
        return;
    }
    CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static mp_status cu_sync(mp_backend *b)
{
    gpu_ctx *c = CTX(b);
    if (!NOT_CAPTURING(c, "b->sync"))
        return report(c);
    CUDA_OK(c, cudaStreamSynchronize(c->stream));
    CUDA_OK(c, cudaGetLastError());
    return report(c);
}

/* ===================================================================== */
/* Availability, open and close                                           */
/* ===================================================================== */

static void say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

extern "C" int mp_backend_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

extern "C" int mp_backend_cuda_available(char *why, size_t n)
{
    int count = 0, dev = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        say(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (count < 1) {
        say(why, n, "no CUDA device found");
        return 0;
    }
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        say(why, n, "cudaGetDevice: %s", cudaGetErrorString(e));
        return 0;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        say(why, n, "cudaGetDeviceProperties(%d): %s", dev, cudaGetErrorString(e));
        return 0;
    }
    if (prop.major < 9) {
        say(why, n, "GPU %d (%s) has compute capability %d.%d; molprop's kernels are built for "
            "9.0 (Hopper) and later", dev, prop.name, prop.major, prop.minor);
        return 0;
    }
    say(why, n, "GPU %d: %s", dev, prop.name);
    return 1;
}

static void cu_close(mp_backend *b)
{
    if (!b)
        return;
    gpu_ctx *c = CTX(b);
    if (c) {
        mp_cu_gate_enter();
        if (c->capturing) {
            cudaGraph_t g = NULL;
            if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g)
                cudaGraphDestroy(g);
            (void)cudaGetLastError();
            c->capturing = 0;
            mp_cu_gate_leave();   /* the capture's hold (mp_cuda_graph_begin) */
        }
        /* the two streams drained, then everything made at open released
         * (cudaFree(NULL) is a no-op; the handles are checked) */
        cudaStream_t streams[2] = { c->side, c->stream };
        for (int i = 0; i < 2; i++)
            if (streams[i])
                (void)cudaStreamSynchronize(streams[i]);
        mp_cu_stream_close(c);
        cublasHandle_t blas[2] = { c->blas, c->blas2 };
        for (int i = 0; i < 2; i++)
            if (blas[i])
                (void)mp_blas.cublasDestroy(blas[i]);
        if (c->lt)
            (void)mp_blas.cublasLtDestroy(c->lt);
        void *dev[3] = { c->blas_ws, c->blas_ws2, c->scratch };
        for (int i = 0; i < 3; i++)
            (void)cudaFree(dev[i]);
        cudaEvent_t ev[2] = { c->ev_fork, c->ev_join };
        for (int i = 0; i < 2; i++)
            if (ev[i])
                (void)cudaEventDestroy(ev[i]);
        for (int i = 0; i < 2; i++)
            if (streams[i])
                (void)cudaStreamDestroy(streams[i]);
        (void)cudaGetLastError();
        mp_cu_gate_leave();
        mp_free(c);
    }
    mp_free(b);
}

static const char *backend_name(mp_precision p)
{
    switch (p) {
    case MP_PREC_TF32: return "cuda:tf32";
    case MP_PREC_BF16: return "cuda:bf16";
    default:           return "cuda";
    }
}

/* set_share (ops.h): the products sized for 2/n of the SMs (the whole GPU
 * for n <= 2).  Twice the even share: the n instances do not run their
 * products in step, and on the H200 five members at batch 50 trained in
 * 11.77-11.80 s sized for 52 SMs each against 11.94-11.97 s for 26
 * (bench/RESULTS.md, 2026-12-03). */
static mp_status cu_set_share(mp_backend *b, int n)
{
    if (n < 1)
        return mp_error_set(MP_ERR_ARG, "cuda backend: a share of the GPU for %d instances", n);
    CTX(b)->share = n;
    int sm = CTX(b)->sm_count, t = 2 * sm / n;
    return mp_backend_cuda_set_sm_target(b, n <= 2 || t >= sm ? 0 : (t > 0 ? t : 1));
}

/* Fails the open with the kept message (or NOMEM for the context itself). */
static mp_status open_fail(mp_backend *b, mp_status st)
{
    gpu_ctx *c = CTX(b);
    if (c && c->err != MP_OK)
        st = mp_error_set(c->err, "cuda backend: %s", c->errmsg);
    cu_close(b);
    return st;
}

extern "C" mp_status mp_backend_cuda_open(mp_backend **out, mp_precision prec)
{
    *out = NULL;
    if (prec != MP_PREC_FP32 && prec != MP_PREC_TF32 && prec != MP_PREC_BF16)
        return mp_error_set(MP_ERR_ARG, "cuda backend: unknown precision %d (expected fp32, "
                            "tf32 or bf16)", (int)prec);
    char why[512];
    if (!mp_backend_cuda_available(why, sizeof why))
        return mp_error_set(MP_ERR_NODEVICE, "cuda backend: no usable GPU: %s", why);
    if (!mp_blas_load(why, sizeof why))   /* cuBLAS: loaded here, not linked (blas_dl.cu) */
        return mp_error_set(MP_ERR_NODEVICE, "cuda backend: cuBLAS: %s", why);
    mp_exit_skip_teardown();   /* the runtime is up: see mp_exit */

    mp_backend *b = (mp_backend *)mp_calloc(1, sizeof *b);
    gpu_ctx *c = (gpu_ctx *)mp_calloc(1, sizeof *c);
    if (!b || !c) {
        mp_free(b);
        mp_free(c);
        return mp_error_set(MP_ERR_NOMEM, "cuda backend: out of host memory");
    }
    b->ctx = c;
    c->prec = prec;
    c->err = MP_OK;
    mp_cu_pick_rank_device();

    cudaDeviceProp prop;
    if (!CUDA_OK(c, cudaGetDevice(&c->device)) ||
        !CUDA_OK(c, cudaGetDeviceProperties(&prop, c->device)))
        return open_fail(b, MP_ERR_INTERNAL);
    c->sm_count = prop.multiProcessorCount;
    c->wgmma = prop.major == 9 && prop.minor == 0;
    /* programmatic dependent launch (cuda_ctx.cuh launch()) from sm_90 on;
     * MOLPROP_CUDA_PDL=0 queues every kernel plainly, =2 every kernel with
     * it (for comparisons) */
    const char *pdl = getenv("MOLPROP_CUDA_PDL");
    c->pdl = prop.major < 9 ? 0 : !pdl ? 1 : !strcmp(pdl, "0") ? 0 : !strcmp(pdl, "2") ? 2 : 1;
    c->mem_total = prop.totalGlobalMem;
    int drv = 0, rt = 0;
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    snprintf(c->info, sizeof c->info,
             "%.200s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, driver %d.%d, runtime %d.%d, gemm %s%s",
             prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize >> 20, drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10, mp_precision_name(prec),
             c->pdl ? ", dependent launch" : "");

    /* the handles, under the capture gate: cuBLAS allocates (and may
     * synchronize) as it makes them */
    mp_cu_gate_enter();
    int made = CUDA_OK(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) &&
               CUDA_OK(c, cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking)) &&
               CUDA_OK(c, cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming)) &&
               CUDA_OK(c, cudaEventCreateWithFlags(&c->ev_join, cudaEventDisableTiming)) &&
               BLAS_OK(c, mp_blas.cublasCreate(&c->blas)) &&
               BLAS_OK(c, mp_blas.cublasSetStream(c->blas, c->stream)) &&
               BLAS_OK(c, mp_blas.cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST)) &&
               BLAS_OK(c, mp_blas.cublasCreate(&c->blas2)) &&
               BLAS_OK(c, mp_blas.cublasSetStream(c->blas2, c->side)) &&
               BLAS_OK(c, mp_blas.cublasSetPointerMode(c->blas2, CUBLAS_POINTER_MODE_HOST)) &&
               BLAS_OK(c, mp_blas.cublasLtCreate(&c->lt));
    mp_cu_gate_leave();
    if (!made)
        return open_fail(b, MP_ERR_INTERNAL);
    c->lane_stream[0] = c->stream;
    c->lane_stream[1] = c->side;
    c->lane_blas[0] = c->blas;
    c->lane_blas[1] = c->blas2;
    /* Device memory: report what was asked and what is free, as alloc does. */
    b->name = backend_name(prec);
    c->blas_ws = cu_alloc(b, BLAS_WORKSPACE_BYTES);
    c->blas_ws2 = c->blas_ws ? cu_alloc(b, BLAS_WORKSPACE_BYTES) : NULL;
    c->scratch = c->blas_ws2 ? (float *)cu_alloc(b, SCRATCH_ELEMS * sizeof(float)) : NULL;
    if (!c->scratch) {
        mp_status st = mp_error_set(MP_ERR_NOMEM, "cuda backend: %s", mp_error_message());
        cu_close(b);
        return st;
    }
    if (!BLAS_OK(c, mp_blas.cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WORKSPACE_BYTES)) ||
        !BLAS_OK(c, mp_blas.cublasSetWorkspace(c->blas2, c->blas_ws2, BLAS_WORKSPACE_BYTES)))
        return open_fail(b, MP_ERR_INTERNAL);
    /* the bf16 products on tiles_cuda.cu's kernels: MOLPROP_CUDA_TILES=0
     * never (cuBLAS for every product: for comparisons), =1 always (wide
     * products and those of an ensemble's members too), else
     * as tiles_cuda.cu's takes() says */
    const char *tiles = getenv("MOLPROP_CUDA_TILES");
    c->tiles = tiles && !strcmp(tiles, "0") ? 0 : tiles && !strcmp(tiles, "1") ? 2 : 1;
    c->share = 1;
    /* the one-hot scatters' chunking (reduce_cuda.cu slot_launch):
     * MOLPROP_CUDA_SCATTER_BLOCKS=0 cuts them as before the cap (for
     * comparisons), =N aims for N blocks */
    const char *sb = getenv("MOLPROP_CUDA_SCATTER_BLOCKS");
    c->scatter_blocks = sb ? atoi(sb) : SCATTER_BLOCKS;
    const char *bw = getenv("MOLPROP_CUDA_BY_ATOM_BW");
    c->by_atom_bw = !(bw && !strcmp(bw, "0"));

    b->dtype = MP_F32;
    b->esize = sizeof(float);
    b->host_memory = 0;
    /* bf16: the model stores its product operands in bf16 (ops.h) */
    b->act_st = prec == MP_PREC_BF16 ? MP_ST_BF16 : MP_ST_ELEM;
    /* 16-byte bf16 rows for cuBLAS's fast Hopper kernels: a wide model
     * whose hidden size is not a multiple of 8 runs padded (model_pad.c).
     * Hidden 2,300 at batch 200: a step of 6,904 us unpadded, 3,283 padded
     * (H100, bench/RESULTS.md).  MOLPROP_CUDA_ROW_ALIGN=0 runs unpadded. */
    const char *ra = getenv("MOLPROP_CUDA_ROW_ALIGN");
    b->row_align = prec != MP_PREC_BF16 ? 0 : ra ? atoi(ra) : 8;
    b->close = cu_close;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->zero = cu_zero;
    b->copy = cu_copy;
    b->sync = cu_sync;
    mp_cu_dense_ops(b);
    mp_cu_rows_ops(b);
    mp_cu_fused_ops(b);
    mp_cu_reduce_ops(b);
    mp_cu_layer_ops(b);
    mp_cu_stream_ops(b);
    mp_cu_capture_ops(b);
    b->set_share = cu_set_share;
    mp_cu_nccl_ops(b);
    *out = b;
    return MP_OK;
}

/* ===================================================================== */
/* Introspection                                                          */
/* ===================================================================== */

gpu_ctx *mp_cu_ctx(const mp_backend *b)
{
    return b && b->close == cu_close ? CTX(b) : NULL;
}

extern "C" const char *mp_backend_cuda_info(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->info : "";
}

extern "C" int mp_backend_cuda_sm_count(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->sm_count : 0;
}

extern "C" long mp_backend_cuda_tile_calls(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->tile_calls : 0;
}

extern "C" long mp_backend_cuda_panel_message_calls(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->panel_msg_calls : 0;
}

extern "C" size_t mp_backend_cuda_memory(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->mem_total : 0;
}

extern "C" mp_precision mp_backend_cuda_precision(const mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? c->prec : MP_PREC_FP32;
}

extern "C" mp_status mp_backend_cuda_set_sm_target(mp_backend *b, int n)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c)
        return mp_error_set(MP_ERR_ARG, "mp_backend_cuda_set_sm_target: not a cuda backend");
    if (n < 0 || n > c->sm_count)
        return mp_error_set(MP_ERR_ARG, "cuda backend: %d SMs to size the products for; this "
                            "GPU has %d (0: all)", n, c->sm_count);
    if (!BLAS_OK(c, mp_blas.cublasSetSmCountTarget(c->blas, n)) ||
        !BLAS_OK(c, mp_blas.cublasSetSmCountTarget(c->blas2, n)))
        return report(c);
    c->sm_target = n;
    for (int i = 0; i < LT_CACHE; i++)
        c->lt_cache[i].valid = 0;
    return MP_OK;
}

extern "C" void *mp_backend_cuda_stream(mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    return c ? (void *)c->stream : NULL;
}

extern "C" void mp_backend_cuda_clear_error(mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c)
        return;
    (void)cudaGetLastError();
    c->err = MP_OK;
    c->errmsg[0] = '\0';
}

