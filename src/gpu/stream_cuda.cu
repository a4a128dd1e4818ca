/*
 * stream_cuda.cu - the streaming ops of models/ops.h on the cuda backend:
 * page-locked host buffers, asynchronous copies on the backend's stream
 * (lane 0) or on a copy stream beside it (lane 1), and fences (CUDA events)
 * that order one lane after the other or the host after either.  They let a
 * prediction pipeline (models/ensemble.c) upload batch j+1 on the copy
 * engine while the kernels of batch j run, and read outputs back without a
 * full synchronization per batch.
 *
 * Registered by mp_cu_stream_ops from mp_backend_cuda_open.  If the copy
 * stream or the events cannot be made, the ops stay NULL (callers then use
 * the synchronous upload/download) and no failure is kept: streaming is an
 * optimisation, not a requirement.
 */
#include "gpu/cuda_ctx.cuh"

static cudaStream_t lane_of(gpu_ctx *c, int lane) { return lane == 1 ? c->copy : c->stream; }

static int fence_ok(gpu_ctx *c, int f, const char *what)
{
    if (f >= 0 && f < MP_FENCES)
        return 1;
    record(c, MP_ERR_ARG, __FILE__, __LINE__, "%s: fence %d outside 0 .. %d", what, f,
           MP_FENCES - 1);
    return 0;
}

static void *cu_host_alloc(mp_backend *b, size_t bytes)
{
    void *p = NULL;
    mp_cu_gate_enter();
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 16, cudaHostAllocDefault);
    mp_cu_gate_leave();
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();               /* not sticky: the caller may fall back */
    mp_error_set(e == cudaErrorMemoryAllocation ? MP_ERR_NOMEM : MP_ERR_INTERNAL,
                 "%s:%d: cuda: cannot allocate %zu bytes (%.1f MiB) of page-locked host "
                 "memory: %s", __FILE__, __LINE__, bytes, bytes / 1048576.0,
                 cudaGetErrorString(e));
    return NULL;
}

static void cu_host_free(mp_backend *b, void *p)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (p && c) {
        mp_cu_gate_enter();
        CUDA_OK(c, cudaFreeHost(p));
        mp_cu_gate_leave();
    }
}

static void cu_upload_async(mp_backend *b, int lane, void *dst, const void *src, size_t bytes)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!bytes || !NOT_CAPTURING(c, "b->upload_async") || !usable(c))
        return;
    CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, lane_of(c, lane)));
}

static void cu_download_async(mp_backend *b, int lane, void *dst, const void *src, size_t bytes)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!bytes || !NOT_CAPTURING(c, "b->download_async") || !usable(c))
        return;
    CUDA_OK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, lane_of(c, lane)));
}

static void cu_fence_record(mp_backend *b, int lane, int f)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!usable(c) || !fence_ok(c, f, "fence_record"))
        return;
    CUDA_OK(c, cudaEventRecord(c->fence[f], lane_of(c, lane)));
}

static void cu_fence_wait(mp_backend *b, int lane, int f)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!usable(c) || !fence_ok(c, f, "fence_wait"))
        return;
    CUDA_OK(c, cudaStreamWaitEvent(lane_of(c, lane), c->fence[f], 0));
}

static mp_status cu_fence_sync(mp_backend *b, int f)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!NOT_CAPTURING(c, "b->fence_sync") || !usable(c) || !fence_ok(c, f, "fence_sync"))
        return report(c);
    CUDA_OK(c, cudaEventSynchronize(c->fence[f]));
    return report(c);
}

void mp_cu_stream_close(gpu_ctx *c)
{
    if (c->copy) {
        (void)cudaStreamSynchronize(c->copy);
        (void)cudaStreamDestroy(c->copy);
        c->copy = NULL;
    }
    for (int f = 0; f < MP_FENCES; f++)
        if (c->fence[f]) {
            (void)cudaEventDestroy(c->fence[f]);
            c->fence[f] = NULL;
        }
    (void)cudaGetLastError();
}

void mp_cu_stream_ops(mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c)
        return;
    int ok = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking) == cudaSuccess;
    for (int f = 0; ok && f < MP_FENCES; f++)
        ok = cudaEventCreateWithFlags(&c->fence[f], cudaEventDisableTiming) == cudaSuccess;
    if (!ok) {
        mp_cu_stream_close(c);
        return;
    }
    b->host_alloc = cu_host_alloc;
    b->host_free = cu_host_free;
    b->upload_async = cu_upload_async;
    b->download_async = cu_download_async;
    b->fence_record = cu_fence_record;
    b->fence_wait = cu_fence_wait;
    b->fence_sync = cu_fence_sync;
}
