/*
 * nccl_cuda.cu - the cuda backend's sum over MPI ranks (ops.h rank_sum)
 * through NCCL, built with NCCL=1 (the Makefile sets it where nccl.h is in
 * the CUDA toolkit); without it the op stays NULL and data-parallel
 * training goes through the host (run/batches_dist.c).
 *
 * One communicator per rank (one GPU per rank), made at the first sum:
 * rank 0's ncclUniqueId broadcast to the others (core/dist.h: over MPI, or
 * in memory between the thread ranks of `train --devices N`), then
 * ncclCommInitRank on every rank.
 * Determinism: NCCL's all-reduce adds in an order that depends on its
 * algorithm, protocol and topology; an all-gather only copies bytes, so the
 * sum runs here, per element in rank order, on every rank alike.  Memory:
 * n x ranks floats for the gathered gradients (a D-MPNN has ~10^5-10^6).
 */
#include "cuda_ctx.cuh"

#include "core/dist.h"

#ifndef MP_HAVE_NCCL
#define MP_HAVE_NCCL 0
#endif

#if MP_HAVE_NCCL
#include <nccl.h>

#define MAX_RANKS 1024

/* One rank's communicator and buffers: per thread, so that the thread
 * ranks of `train --devices N` (core/dist.h) each hold their own; a thread
 * rank's are released when its thread ends (an MPI rank's at exit, by the
 * driver). */
struct rank_comm {
    ncclComm_t comm;
    int        ok;
    int        thread_rank;   /* made in a thread rank: released with it */
    float     *gather;        /* n x ranks, on this rank's GPU */
    size_t     gather_n;
    float     *w;             /* the weights, on the GPU       */
    ~rank_comm()
    {
        if (!thread_rank)
            return;
        if (ok)
            (void)ncclCommDestroy(comm);
        cudaFree(gather);
        cudaFree(w);
        (void)cudaGetLastError();
    }
};
static thread_local rank_comm g_rc;
#define g_comm     g_rc.comm
#define g_comm_ok  g_rc.ok
#define g_gather   g_rc.gather
#define g_gather_n g_rc.gather_n
#define g_w        g_rc.w

__global__ void ordered_sum(float *__restrict__ out, const float *__restrict__ all,
                            const float *__restrict__ w, size_t n, int ranks)
{
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        /* __fmul_rn / __fadd_rn: rounded separately, never fused (the
         * host's mp_dist_sum_float gives the same bits) */
        float s = __fmul_rn(w[0], all[i]);
        for (int r = 1; r < ranks; r++)
            s = __fadd_rn(s, __fmul_rn(w[r], all[(size_t)r * n + i]));
        out[i] = s;
    }
}

static mp_status nccl_fail(const char *what, ncclResult_t r)
{
    return mp_error_set(MP_ERR_INTERNAL, "NCCL: %s failed on rank %d of %d: %s", what,
                        mp_dist_rank(), mp_dist_size(), ncclGetErrorString(r));
}

/* The communicator over the MPI ranks (every rank calls this at once). */
static mp_status comm_open(void)
{
    if (g_comm_ok)
        return MP_OK;
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (mp_dist_rank() == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        return nccl_fail("ncclGetUniqueId", r);
    mp_status st = mp_dist_bcast(&id, sizeof id, 0);
    if (st)
        return st;
    /* thread ranks: each thread on its own GPU (mp_cu_pick_rank_device),
     * all of them in this call at once, with the id shared in memory */
    if ((r = ncclCommInitRank(&g_comm, mp_dist_size(), id, mp_dist_rank())) != ncclSuccess)
        return nccl_fail("ncclCommInitRank", r);
    g_comm_ok = 1;
    g_rc.thread_rank = mp_dist_in_threads();
    return MP_OK;
}

static mp_status cu_rank_sum(mp_backend *b, void *buf, size_t n, const float *w)
{
    gpu_ctx *c = CTX(b);
    int k = mp_dist_size();
    if (k > MAX_RANKS)
        return mp_error_set(MP_ERR_ARG, "NCCL sum: %d ranks (at most %d)", k, MAX_RANKS);
    mp_status st = report(c);
    if (st || (st = comm_open()))
        return st;
    if (g_gather_n < n * (size_t)k) {
        cudaFree(g_gather);
        g_gather = NULL;
        g_gather_n = 0;
        if (!CUDA_OK(c, cudaMalloc((void **)&g_gather, sizeof(float) * n * (size_t)k)))
            return report(c);
        g_gather_n = n * (size_t)k;
    }
    if (!g_w && !CUDA_OK(c, cudaMalloc((void **)&g_w, sizeof(float) * MAX_RANKS)))
        return report(c);
    if (!CUDA_OK(c, cudaMemcpyAsync(g_w, w, sizeof(float) * (size_t)k, cudaMemcpyHostToDevice,
                                    c->stream)))
        return report(c);
    ncclResult_t r = ncclAllGather(buf, g_gather, n, ncclFloat, g_comm, c->stream);
    if (r != ncclSuccess)
        return nccl_fail("ncclAllGather", r);
    if (n > 0) {
        launch(c, c->stream, ordered_sum, grid_for(c, n, 256), 256, 0, (float *)buf, g_gather, g_w, n, k);
        if (!LAUNCHED(c, "ordered_sum"))
            return report(c);
    }
    /* w is the caller's host memory: the copy must be done before it returns */
    if (!CUDA_OK(c, cudaStreamSynchronize(c->stream)))
        return report(c);
    return MP_OK;
}

void mp_cu_nccl_ops(mp_backend *b)
{
    b->rank_sum = cu_rank_sum;
}

#else

void mp_cu_nccl_ops(mp_backend *b) { (void)b; }

#endif /* MP_HAVE_NCCL */

/* Under K > 1 MPI ranks each rank takes a GPU of its node in turn (local
 * rank modulo the GPUs it sees), before the backend opens on the current
 * device; a thread rank of `train --devices N` takes its own (--gpus, or
 * its rank: the caller checked they exist).  Left alone otherwise
 * (CUDA_VISIBLE_DEVICES may have chosen). */
void mp_cu_pick_rank_device(void)
{
    int count = 0;
    if (mp_dist_in_threads())
        (void)cudaSetDevice(mp_dist_device());
    else if (mp_dist_size() > 1 && cudaGetDeviceCount(&count) == cudaSuccess && count > 1)
        (void)cudaSetDevice(mp_dist_device() % count);
    (void)cudaGetLastError();
}
