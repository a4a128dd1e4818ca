/*
 * ops_cuda.cu - the cuda backend: every op of models/ops.h on an NVIDIA GPU
 * (built for Hopper, sm_90a), fp32 buffers, one stream.  At bf16,
 * ops_cuda_bf16.cu adds the bf16-storage ops (ops.h half_acts).
 *
 *   dense products      cublasGemmEx, compute type by the backend's precision
 *                       (fp32 / tf32 / bf16 inputs, fp32 accumulation); the
 *                       row-major seam is a column-major product of the
 *                       swapped operands: C^T = op(B)^T op(A)^T
 *   row ops             one warp per output row (gathers, CSR segment sums,
 *                       pooling, message assembly); lanes walk the columns,
 *                       so every load and store of a row is coalesced and the
 *                       row's indices are one broadcast load
 *   elementwise         grid-stride loops (add, relu/dropout, Adam)
 *   reductions          no float atomics anywhere.  Column sums and the
 *                       weight-gradient scatters of the one-hot gathers run
 *                       in two levels: fixed row chunks, each summed in row
 *                       order by one lane per (chunk, slot, column) into a
 *                       scratch block, then the chunks summed in chunk order.
 *                       The chunk count is a function of the shape only, so
 *                       the result is the same bits on every run.  The loss
 *                       is one block reducing by a fixed tree (in double).
 *
 * The row kernels mark their pointers __restrict__ (so loads of a row can be
 * issued ahead of its stores): ops.h forbids outputs aliasing inputs except
 * for the elementwise ops that say so, whose kernels do without it.
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
#include <string.h>

/* ===================================================================== */
/* Kernels: dense helpers and elementwise                                 */
/* ===================================================================== */

/* C[i, j] = beta == 0 ? 0 : beta * C[i, j]: gemm with k == 0. */
__global__ void k_scale_rows(float *c, int ldc, int m, int n, float beta)
{
    for (int64_t i = warp_id(); i < m; i += warp_count()) {
        float *row = c + (size_t)i * ldc;
        for (int j = lane_id(); j < n; j += 32)
            row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
}

__global__ void k_fill_rows(float *__restrict__ y, int ldy, const float *__restrict__ row,
                            int32_t n_rows, int n_cols)
{
    for (int64_t i = warp_id(); i < n_rows; i += warp_count()) {
        float *o = y + (size_t)i * ldy;
        for (int j = lane_id(); j < n_cols; j += 32)
            o[j] = row[j];
    }
}

__global__ void k_dropout2d(float *y, const float *x, int32_t n_rows, int n_cols, int ld,
                            uint32_t thr, float scale, uint64_t key)
{
    for (int64_t i = warp_id(); i < n_rows; i += warp_count())
        for (int j = lane_id(); j < n_cols; j += 32) {
            size_t k = (size_t)i * ld + j;
            y[k] = d_keep(key, k, thr) ? x[k] * scale : 0.0f;
        }
}

__global__ void k_adam(float *__restrict__ p, float *__restrict__ m, float *__restrict__ v,
                       const float *__restrict__ g, size_t n, float step, float bc2s, float b1,
                       float b2, float c1, float c2, float eps, float wd)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pi = p[i];
        float gi = g[i] + wd * pi;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * (mi / (sqrtf(vi) / bc2s + eps));
    }
}

#include "gpu/kernels_rows.cuh"

/* ===================================================================== */
/* Kernels: two-level deterministic reductions                            */
/* ===================================================================== */

/*
 * Column sums of x [n_rows x n_cols] by row chunks.  Block (x: 128 columns,
 * y: chunk c).  direct: add the chunk's sums into dst (only when there is one
 * chunk); else write them to part[c * n_cols + j].
 */
__global__ void k_col_sum_chunks(float *dst, int direct, const float *x, int ldx, int32_t n_rows,
                                 int n_cols, int32_t rows_per_chunk)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_cols)
        return;
    int32_t c = blockIdx.y;
    int32_t r0 = c * rows_per_chunk;
    int32_t r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
    float acc = 0.0f;
#pragma unroll 8
    for (int32_t r = r0; r < r1; r++)
        acc += x[(size_t)r * ldx + j];
    if (direct)
        dst[j] += acc;
    else
        dst[(size_t)c * n_cols + j] = acc;
}

/*
 * dst[i] += sum over c < n_chunks of part[c * width + i].  Block: 32 outputs
 * (x) by 32 chunk lanes (y); lane y sums chunks y, y + 32, ... in order, then
 * one thread adds the 32 lane sums in lane order.  A fixed tree, so fixed
 * bits, with 32x the memory parallelism of one thread per output.
 */
#define SUM_TX 32
#define SUM_TY 32

/* The same for n_chunks <= SUM_SEQ_MAX: one thread per output adds the
 * chunks in order (eight loads in flight), no shared memory, no 32 x 32
 * blocks of mostly idle lanes (small batches: ~20 chunks). */
#define SUM_SEQ_MAX 32

__global__ void k_sum_chunks_seq(float *dst, const float *part, int32_t n_chunks, size_t width)
{
    for (size_t i = gtid(); i < width; i += gstride()) {
        float s = 0.0f;
#pragma unroll 8
        for (int32_t c = 0; c < n_chunks; c++)
            s += part[(size_t)c * width + i];
        dst[i] += s;
    }
}

__global__ void __launch_bounds__(SUM_TX * SUM_TY)
k_sum_chunks(float *dst, const float *part, int32_t n_chunks, size_t width)
{
    __shared__ float red[SUM_TY][SUM_TX + 1];
    const size_t i = (size_t)blockIdx.x * SUM_TX + threadIdx.x;
    float acc = 0.0f;
    if (i < width) {
#pragma unroll 4
        for (int32_t c = threadIdx.y; c < n_chunks; c += SUM_TY)
            acc += part[(size_t)c * width + i];
    }
    red[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < width) {
        float s = 0.0f;
        for (int y = 0; y < SUM_TY; y++)
            s += red[y][threadIdx.x];
        dst[i] += s;
    }
}

/*
 * The weight-gradient scatter of a one-hot gather, by row chunks:
 *   for slot s < n_hot:  sum over rows r whose hot list (row r >> hot_shift of
 *                        `hot`, NH entries, -1 = none) holds s of g[r]
 *   slot n_hot (mass):   sum over rows of mass[r] * g[r]      (when mass)
 * One warp per block: lane = column of a 32-column tile (blockIdx.x); row
 * chunk blockIdx.y; slot group blockIdx.z (slots [z * group, (z+1) * group)
 * of the n_hot + has_mass slots).  Each lane sums its column over the chunk's
 * rows in order into shared memory, one float per slot, so every partial is
 * a fixed sequence of adds.  direct (one chunk): add into dst[s * h + j];
 * else write part[(chunk * n_slots + s) * h + j].  Slots outside [0, n_hot)
 * in `hot` are ignored (the model checks its batches: ops.h callers never
 * pass them).
 *
 * Shape of the code (v5; see NOTES.md): rows go 32 at a time.  The 32 loads
 * of g are issued together, branch-free, and parked in shared memory (each
 * lane reads back only its own column, so no synchronization); lane u fetches
 * row u's hot list and mass once for the warp, as accumulator offsets (a
 * slot outside the group, or none, points at a spare "trash" row), and the
 * consuming loop takes them by shuffle, in row order, NOT unrolled: a fully
 * unrolled 32-row x NH-slot body with a branch per access was ~20k PTX
 * lines, and the instruction fetch, not memory, set the speed.  A row's
 * slots are distinct (one per one-hot block), so its NH accumulators are all
 * read, then all written (one shared-memory latency per row); a row whose
 * list repeats a slot (the seam allows it; the featurizer never does it)
 * takes the one-at-a-time path, so the sums are the same either way.
 */
#define SLOT_ROWS 32

template <typename HT, int NH>
__global__ void k_slot_sum_chunks(float *dst, int direct, const HT *hot, int hot_shift,
                                  const float *mass, const float *g, int32_t n_rows, int h,
                                  int n_hot, int32_t rows_per_chunk, int group)
{
    extern __shared__ float sm[];          /* acc [group + 1][32] (last: trash), gs [32][32] */
    float *acc = sm, *gs = sm + (size_t)(group + 1) * 32;
    const int lane = threadIdx.x;
    const int j = blockIdx.x * 32 + lane;
    const int32_t c = blockIdx.y;
    const int n_slots = n_hot + (mass ? 1 : 0);
    const int s0 = blockIdx.z * group;
    const int s1 = s0 + group < n_slots ? s0 + group : n_slots;
    const int trash = group * 32;
    for (int s = 0; s <= group; s++)
        acc[s * 32 + lane] = 0.0f;
    float macc = 0.0f;
    const int32_t r0 = c * rows_per_chunk;
    const int32_t r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
    const int hot_hi = s1 < n_hot ? s1 : n_hot;   /* hot slots of this group: [s0, hot_hi) */
    const bool col = j < h;
    const int jj = col ? j : 0;                   /* a valid address for idle lanes */

    for (int32_t r = r0; r < r1; r += SLOT_ROWS) {
        const int nr = r1 - r < SLOT_ROWS ? (int)(r1 - r) : SLOT_ROWS;   /* warp-uniform */
        const int32_t rl = r + (lane < nr ? lane : 0);
        int my[NH];
        bool dup = false;
#pragma unroll
        for (int q = 0; q < NH; q++) {
            int sl = (int)hot[(size_t)(rl >> hot_shift) * NH + q];
            my[q] = lane < nr && sl >= s0 && sl < hot_hi ? (sl - s0) * 32 : trash;
#pragma unroll
            for (int q2 = 0; q2 < q; q2++)
                dup |= my[q] != trash && my[q] == my[q2];
        }
        const float mym = mass ? mass[rl] : 0.0f;
        const unsigned dups = __ballot_sync(0xffffffffu, dup);
        float v[SLOT_ROWS];
#pragma unroll
        for (int u = 0; u < SLOT_ROWS; u++)
            v[u] = g[(size_t)(r + (u < nr ? u : 0)) * h + jj];
#pragma unroll
        for (int u = 0; u < SLOT_ROWS; u++)
            gs[u * 32 + lane] = col && u < nr ? v[u] : 0.0f;
#pragma unroll 1
        for (int u = 0; u < nr; u++) {
            const float gu = gs[u * 32 + lane];
            int off[NH];
#pragma unroll
            for (int q = 0; q < NH; q++)
                off[q] = __shfl_sync(0xffffffffu, my[q], u) + lane;
            if (!((dups >> u) & 1u)) {                   /* warp-uniform */
                float old[NH];
#pragma unroll
                for (int q = 0; q < NH; q++)
                    old[q] = acc[off[q]];
#pragma unroll
                for (int q = 0; q < NH; q++)
                    acc[off[q]] = old[q] + gu;
            } else {
#pragma unroll
                for (int q = 0; q < NH; q++)
                    acc[off[q]] += gu;
            }
            const float mu = __shfl_sync(0xffffffffu, mym, u);
            if (mass)
                macc += mu * gu;
        }
    }
    if (!col)
        return;
    for (int s = s0; s < s1; s++) {
        float val = s == n_hot ? macc : acc[(s - s0) * 32 + lane];
        if (direct)
            dst[(size_t)s * h + j] += val;
        else
            dst[((size_t)c * n_slots + s) * h + j] = val;
    }
}

/* ===================================================================== */
/* Kernel: masked loss (one block, fixed reduction tree)                  */
/* ===================================================================== */

#define LOSS_THREADS 1024

__global__ void __launch_bounds__(LOSS_THREADS)
k_loss(float *loss, float *dy, const float *y, const float *target, const uint8_t *mask,
       size_t total, int bce)
{
    __shared__ double sum[LOSS_THREADS];
    __shared__ unsigned long long cnt[LOSS_THREADS];
    const int t = threadIdx.x;

    unsigned long long n = 0;
    for (size_t i = t; i < total; i += LOSS_THREADS)
        n += mask[i] != 0;
    cnt[t] = n;
    __syncthreads();
    for (int w = LOSS_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            cnt[t] += cnt[t + w];
        __syncthreads();
    }
    const unsigned long long count = cnt[0];
    const float inv = count ? (float)(1.0 / (double)count) : 0.0f;

    double s = 0;
    for (size_t i = t; i < total; i += LOSS_THREADS) {
        if (!mask[i]) {
            dy[i] = 0.0f;
            continue;
        }
        float x = y[i], tt = target[i], g;
        if (bce) {
            float l = (x > 0.0f ? x : 0.0f) - x * tt + log1pf(expf(-fabsf(x)));
            s += l;
            g = 1.0f / (1.0f + expf(-x)) - tt;
        } else {
            float d = x - tt;
            s += (double)d * d;
            g = 2.0f * d;
        }
        dy[i] = g * inv;
    }
    sum[t] = s;
    __syncthreads();
    for (int w = LOSS_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            sum[t] += sum[t + w];
        __syncthreads();
    }
    if (t == 0)
        loss[0] = count ? (float)(sum[0] / (double)count) : 0.0f;
}

/* ===================================================================== */
/* Memory                                                                 */
/* ===================================================================== */

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
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
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
    CUDA_OK(c, cudaFree(p));
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
        k_copy16<<<grid_for(c, bytes / 16, THREADS), THREADS, 0, c->stream>>>(
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
/* Dense                                                                  */
/* ===================================================================== */

static cublasComputeType_t compute_type(mp_precision p)
{
    switch (p) {
    case MP_PREC_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MP_PREC_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default:           return CUBLAS_COMPUTE_32F;
    }
}

/* One product on `lane` (0: the backend's stream and cuBLAS handle, 1: the
 * side stream gemm_batch runs its second half on, with its own handle and
 * workspace, so each product's result is the same whichever lane runs it). */
static void gemm_on(gpu_ctx *c, int lane, int ta, int tb, int m, int n, int k, double alpha,
                    const void *a, int lda, const void *bm, int ldb, double beta, void *cm,
                    int ldc)
{
    if (m <= 0 || n <= 0 || !usable(c))
        return;
    if (k <= 0) {
        /* No products: C = beta C (cuBLAS's treatment of k == 0 is not
         * documented for every path, so do it ourselves). */
        if (ldc < n) {
            record(c, MP_ERR_ARG, __FILE__, __LINE__, "cuda gemm: ldc %d < n %d", ldc, n);
            return;
        }
        k_scale_rows<<<grid_for(c, (size_t)m, ROWS_PER_BLOCK), THREADS, 0, c->lane_stream[lane]>>>(
            (float *)cm, ldc, m, n, (float)beta);
        LAUNCHED(c, "k_scale_rows");
        return;
    }
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
     * row-major buffers read as column-major are the transposes, so the
     * operands swap and keep their own transpose flags. */
    const float al = (float)alpha, be = (float)beta;
    cublasStatus_t s = cublasGemmEx(c->lane_blas[lane], tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &al, bm, CUDA_R_32F,
                                    ldb, a, CUDA_R_32F, lda, &be, cm, CUDA_R_32F, ldc,
                                    compute_type(c->prec), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        record(c, s == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM : MP_ERR_INTERNAL, __FILE__,
               __LINE__, "cuBLAS error: %s (%s) in gemm ta=%d tb=%d m=%d n=%d k=%d lda=%d "
               "ldb=%d ldc=%d, %s", cublasGetStatusString(s), cublasGetStatusName(s), ta, tb, m,
               n, k, lda, ldb, ldc, mp_precision_name(c->prec));
}

static void cu_gemm(mp_backend *b, int ta, int tb, int m, int n, int k, double alpha,
                    const void *a, int lda, const void *bm, int ldb, double beta, void *cm,
                    int ldc)
{
    gemm_on(CTX(b), 0, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, cm, ldc);
}

/*
 * Independent products (ops.h): the even ones on the backend's stream, the
 * odd ones on the side stream, forked from and joined back into the main
 * stream by events, so two products share the GPU when neither fills it (the
 * two of each backward step at small batches).  Both lanes are ordered after
 * everything queued before and everything queued after waits for both, so to
 * the caller this is one op on the one stream; under graph capture the fork
 * and join become two parallel branches of the graph.
 */
static void cu_gemm_batch(mp_backend *b, int count, const mp_gemm *g)
{
    gpu_ctx *c = CTX(b);
    if (count <= 0 || !usable(c))
        return;
    if (count == 1) {
        gemm_on(c, 0, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb,
                g->beta, g->c, g->ldc);
        return;
    }
    if (!CUDA_OK(c, cudaEventRecord(c->ev_fork, c->stream)) ||
        !CUDA_OK(c, cudaStreamWaitEvent(c->side, c->ev_fork, 0)))
        return;
    for (int i = 0; i < count; i++)
        gemm_on(c, i & 1, g[i].ta, g[i].tb, g[i].m, g[i].n, g[i].k, g[i].alpha, g[i].a, g[i].lda,
                g[i].b, g[i].ldb, g[i].beta, g[i].c, g[i].ldc);
    /* Join even after a failed product: a capture must not end with the side
     * stream still forked. */
    if (CUDA_OK(c, cudaEventRecord(c->ev_join, c->side)))
        CUDA_OK(c, cudaStreamWaitEvent(c->stream, c->ev_join, 0));
}

static void cu_fill_rows(mp_backend *b, void *y, int ldy, const void *row, int32_t n_rows,
                         int n_cols)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    k_fill_rows<<<grid_for(c, (size_t)n_rows, ROWS_PER_BLOCK), THREADS, 0, c->stream>>>(
        (float *)y, ldy, (const float *)row, n_rows, n_cols);
    LAUNCHED(c, "k_fill_rows");
}

/* Rows per chunk of a two-level reduction over n_rows rows whose partial
 * block has `width` floats per chunk: at least 64 rows a chunk, at most 1024
 * chunks, and the partials must fit the scratch.  A function of the shape
 * only.  One chunk means "add directly into the destination". */
static int32_t chunk_rows(int32_t n_rows, size_t width, int32_t *n_chunks)
{
    int64_t nch = ((int64_t)n_rows + 63) / 64;
    if (nch > 1024)
        nch = 1024;
    int64_t fit = (int64_t)(SCRATCH_ELEMS / (width ? width : 1));
    if (nch > fit)
        nch = fit;
    if (nch < 1)
        nch = 1;
    int32_t rows = (int32_t)(((int64_t)n_rows + nch - 1) / nch);
    if (rows < 1)
        rows = 1;
    *n_chunks = (int32_t)(((int64_t)n_rows + rows - 1) / rows);
    if (*n_chunks < 1)
        *n_chunks = 1;
    return rows;
}

static void sum_chunks(gpu_ctx *c, float *dst, int32_t n_chunks, size_t width)
{
    if (n_chunks <= SUM_SEQ_MAX) {
        k_sum_chunks_seq<<<grid_for(c, width, THREADS), THREADS, 0, c->stream>>>(
            dst, c->scratch, n_chunks, width);
        LAUNCHED(c, "k_sum_chunks_seq");
        return;
    }
    dim3 block(SUM_TX, SUM_TY);
    k_sum_chunks<<<(unsigned)((width + SUM_TX - 1) / SUM_TX), block, 0, c->stream>>>(
        dst, c->scratch, n_chunks, width);
    LAUNCHED(c, "k_sum_chunks");
}

static void cu_col_sum(mp_backend *b, void *dst, const void *x, int ldx, int32_t n_rows,
                       int n_cols)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    int32_t nch, rows = chunk_rows(n_rows, (size_t)n_cols, &nch);
    dim3 grid((unsigned)((n_cols + 127) / 128), (unsigned)nch);
    int direct = nch == 1;
    k_col_sum_chunks<<<grid, 128, 0, c->stream>>>(direct ? (float *)dst : c->scratch, direct,
                                                  (const float *)x, ldx, n_rows, n_cols, rows);
    if (LAUNCHED(c, "k_col_sum_chunks") && !direct)
        sum_chunks(c, (float *)dst, nch, (size_t)n_cols);
}

static void cu_copy2d(mp_backend *b, void *dst, int ldd, const void *src, int lds, int32_t n_rows,
                      int n_cols)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    CUDA_OK(c, cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src,
                                 (size_t)lds * sizeof(float), (size_t)n_cols * sizeof(float),
                                 (size_t)n_rows, cudaMemcpyDeviceToDevice, c->stream));
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static void cu_add(mp_backend *b, void *y, const void *x, size_t n)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    LAUNCH_ROWS(c, al16(y) && al16(x), 1, n, k_add, (float *)y, (const float *)x, n);
    LAUNCHED(c, "k_add");
}

static void cu_relu_dropout(mp_backend *b, void *y, const void *x, size_t n, double p,
                            uint64_t key)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    uint32_t thr = mp_dropout_threshold(p);
    float scale = thr && p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    LAUNCH_ROWS(c, al16(y) && al16(x), 1, n, k_relu_dropout, (float *)y, (const float *)x, n,
                thr, scale, key);
    LAUNCHED(c, "k_relu_dropout");
}

static void cu_relu_dropout_backward(mp_backend *b, void *dx, const void *y, const void *dy,
                                     size_t n, double p)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    int scaled = p > 0 && p < 1;
    float scale = scaled ? (float)(1.0 / (1.0 - p)) : 1.0f;
    LAUNCH_ROWS(c, al16(dx) && al16(y) && al16(dy), 1, n, k_relu_dropout_backward, (float *)dx,
                (const float *)y, (const float *)dy, n, scale, scaled);
    LAUNCHED(c, "k_relu_dropout_backward");
}

static void cu_dropout(mp_backend *b, void *y, const void *x, int32_t n_rows, int n_cols, int ld,
                       double p, uint64_t key)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    uint32_t thr = mp_dropout_threshold(p);
    float scale = !thr ? 1.0f : p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    k_dropout2d<<<grid_for(c, (size_t)n_rows, ROWS_PER_BLOCK), THREADS, 0, c->stream>>>(
        (float *)y, (const float *)x, n_rows, n_cols, ld, thr, scale, key);
    LAUNCHED(c, "k_dropout2d");
}

static void cu_dropout_backward(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                int n_cols, int ld, double p, uint64_t key)
{
    /* Dropout is linear and diagonal: its adjoint is itself. */
    cu_dropout(b, dx, dy, n_rows, n_cols, ld, p, key);
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

static void cu_atom_embed(mp_backend *b, void *out, const int16_t *hot, const float *mass,
                          const void *w, const void *bias, int32_t n_atoms, int h, int mass_row)
{
    gpu_ctx *c = CTX(b);
    if (n_atoms <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, out, w, bias), n_atoms, h, k_atom_embed, (float *)out, hot, mass,
                (const float *)w, (const float *)bias, n_atoms, h, mass_row);
    LAUNCHED(c, "k_atom_embed");
}

/* The scatter of a one-hot gather into weight rows [0, n_hot) (+ the mass
 * row n_hot when mass != NULL), shared by both embed backwards. */
template <typename HT, int NH>
static void slot_scatter(gpu_ctx *c, float *dw, const HT *hot, int hot_shift, const float *mass,
                         const float *g, int32_t n_rows, int h, int n_hot, const char *name)
{
    const int n_slots = n_hot + (mass ? 1 : 0);
    if (n_rows <= 0 || h <= 0 || n_slots <= 0)
        return;
    /* Shared memory: 32 floats per slot, one trash row and the 32 x 32
     * staged rows; 320 slots keep it under 48 KiB, the default limit. */
    const int group = n_slots < 320 ? n_slots : 320;
    const int n_groups = (n_slots + group - 1) / group;
    const size_t width = (size_t)n_slots * h;
    int32_t nch, rows = chunk_rows(n_rows, width, &nch);
    int direct = nch == 1;
    dim3 grid((unsigned)((h + 31) / 32), (unsigned)nch, (unsigned)n_groups);
    const size_t smem = ((size_t)(group + 1) * 32 + (size_t)SLOT_ROWS * 32) * sizeof(float);
    k_slot_sum_chunks<HT, NH><<<grid, 32, smem, c->stream>>>(
        direct ? dw : c->scratch, direct, hot, hot_shift, mass, g, n_rows, h, n_hot, rows, group);
    if (cuda_ok(c, cudaGetLastError(), name, __FILE__, __LINE__) && !direct)
        sum_chunks(c, dw, nch, width);
}

static void cu_atom_embed_backward(mp_backend *b, void *dw, const int16_t *hot, const float *mass,
                                   const void *dout, int32_t n_atoms, int h, int mass_row)
{
    gpu_ctx *c = CTX(b);
    if (!usable(c))
        return;
    /* Hot slots are rows [0, mass_row) (the model's batch check guarantees
     * it); the mass row comes right after them. */
    slot_scatter<int16_t, MP_ATOM_MAX_HOT>(c, (float *)dw, hot, 0, mass, (const float *)dout,
                                           n_atoms, h, mass_row, "launch of k_slot_sum_chunks (atoms)");
}

static void cu_edge_embed(mp_backend *b, void *h0, const int32_t *edge_src, const int8_t *bond_hot,
                          const void *a, const void *wb, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_edges <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, h0, a, wb), n_edges, h, k_edge_embed, (float *)h0, edge_src,
                bond_hot, (const float *)a, (const float *)wb, n_edges, h);
    LAUNCHED(c, "k_edge_embed");
}

static void segment_sum(gpu_ctx *c, float *out, const int32_t *in_start, const int32_t *in_edge,
                        const float *x, int32_t n_atoms, int h, int32_t flip)
{
    LAUNCH_ROWS(c, vec4(h, out, x), n_atoms, h, k_segment_sum, out, in_start, in_edge, x,
                n_atoms, h, flip);
    LAUNCHED(c, "k_segment_sum");
}

static void cu_edge_embed_backward(mp_backend *b, void *da, void *dwb, const int32_t *in_start,
                                   const int32_t *in_edge, const int8_t *bond_hot,
                                   const void *dh0, int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, (float *)da, in_start, in_edge, (const float *)dh0, n_atoms, h, 1);
    if (n_edges > 0 && usable(c))
        slot_scatter<int8_t, MP_BOND_MAX_HOT>(c, (float *)dwb, bond_hot, 1, NULL,
                                              (const float *)dh0, n_edges, h, MP_BOND_FDIM,
                                              "launch of k_slot_sum_chunks (bonds)");
}

static void cu_message(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                       const int32_t *in_edge, const int32_t *edge_src, const void *m,
                       int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, (float *)s, in_start, in_edge, (const float *)m, n_atoms, h, 0);
    if (n_edges > 0 && usable(c)) {
        LAUNCH_ROWS(c, vec4(h, msg, s, m), n_edges, h, k_gather_sub_rev, (float *)msg,
                    (const float *)s, edge_src, (const float *)m, n_edges, h);
        LAUNCHED(c, "k_gather_sub_rev");
    }
}

static void cu_message_backward(mp_backend *b, void *dm, void *ds, const int32_t *in_start,
                                const int32_t *in_edge, const int32_t *edge_dst,
                                const void *dmsg, int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, (float *)ds, in_start, in_edge, (const float *)dmsg, n_atoms, h, 1);
    if (n_edges > 0 && usable(c)) {
        LAUNCH_ROWS(c, vec4(h, dm, ds, dmsg), n_edges, h, k_gather_sub_rev, (float *)dm,
                    (const float *)ds, edge_dst, (const float *)dmsg, n_edges, h);
        LAUNCHED(c, "k_gather_sub_rev");
    }
}

static void cu_atom_sum(mp_backend *b, void *a, const int32_t *in_start, const int32_t *in_edge,
                        const void *m, int32_t n_atoms, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_atoms <= 0 || h <= 0 || !usable(c))
        return;
    segment_sum(c, (float *)a, in_start, in_edge, (const float *)m, n_atoms, h, 0);
}

static void cu_atom_sum_backward(mp_backend *b, void *dm, const int32_t *edge_dst, const void *da,
                                 int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_edges <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, dm, da), n_edges, h, k_gather_rows, (float *)dm, edge_dst,
                (const float *)da, n_edges, h);
    LAUNCHED(c, "k_gather_rows");
}

static int agg_code(mp_aggregation agg) { return agg == MP_AGG_MEAN ? 0 : agg == MP_AGG_NORM ? 2 : 1; }

static void cu_pool(mp_backend *b, void *out, int ldo, const int32_t *mol_atom, const void *x,
                    int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    gpu_ctx *c = CTX(b);
    if (n_mols <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, out, x) && ldo % 4 == 0, n_mols, h, k_pool, (float *)out, ldo,
                mol_atom, (const float *)x, n_mols, h, agg_code(agg), (float)(1.0 / norm));
    LAUNCHED(c, "k_pool");
}

static void cu_pool_backward(mp_backend *b, void *dx, const int32_t *mol_atom, const void *dout,
                             int ldo, int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    gpu_ctx *c = CTX(b);
    if (n_mols <= 0 || h <= 0 || !usable(c))
        return;
    LAUNCH_ROWS(c, vec4(h, dx, dout) && ldo % 4 == 0, n_mols, h, k_pool_backward, (float *)dx,
                mol_atom, (const float *)dout, ldo, n_mols, h, agg_code(agg), (float)(1.0 / norm));
    LAUNCHED(c, "k_pool_backward");
}

/* ===================================================================== */
/* Fused ops (ops.h: gemm_res_relu, message_backward_relu)                */
/* ===================================================================== */

/* gemm_res_relu's fused product (ReLU epilogue, residual as C) is
 * mp_cu_lt_res_relu in ops_cuda_bf16.cu, shared with the bf16 variant. */
static void cu_gemm_res_relu(mp_backend *b, int m, int n, int k, const void *a, int lda,
                             const void *w, int ldw, const void *r, int ldr, void *cm, int ldc)
{
    gpu_ctx *c = CTX(b);
    if (m <= 0 || n <= 0 || !usable(c))
        return;
    if (cm == r && ldc != ldr) {
        record(c, MP_ERR_ARG, __FILE__, __LINE__,
               "cuda gemm_res_relu: c == r needs ldc == ldr (%d != %d)", ldc, ldr);
        return;
    }
    /* Lt needs k >= 1 (k == 0 is c = ReLU(r), composed below). */
    if (k > 0 && mp_cu_lt_res_relu(c, CUDA_R_32F, CUDA_R_32F, compute_type(c->prec), m, n, k, a,
                                   lda, w, ldw, r, ldr, cm, ldc))
        return;
    mp_ops_gemm_res_relu_composed(b, m, n, k, a, lda, w, ldw, r, ldr, cm, ldc);
}

static void cu_message_backward_relu(mp_backend *b, void *dz, void *dh0, void *ds,
                                     const int32_t *in_start, const int32_t *in_edge,
                                     const int32_t *edge_dst, const void *dmsg, const void *y,
                                     double p, int32_t n_atoms, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    if (n_atoms > 0)
        segment_sum(c, (float *)ds, in_start, in_edge, (const float *)dmsg, n_atoms, h, 1);
    if (n_edges > 0 && usable(c)) {
        /* the scale exactly as cu_relu_dropout_backward computes it */
        int scaled = p > 0 && p < 1;
        float scale = scaled ? (float)(1.0 / (1.0 - p)) : 1.0f;
        LAUNCH_ROWS(c, vec4(h, dz, dh0, ds, dmsg) && al16(y), n_edges, h,
                    k_gather_sub_rev_relu, (float *)dz, (float *)dh0, (const float *)ds,
                    edge_dst, (const float *)dmsg, (const float *)y, n_edges, h, scale, scaled);
        LAUNCHED(c, "k_gather_sub_rev_relu");
    }
}

/* ===================================================================== */
/* Loss and optimizer                                                     */
/* ===================================================================== */

static void cu_loss(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                    const uint8_t *mask, int32_t n, int n_tasks, mp_loss_kind kind)
{
    gpu_ctx *c = CTX(b);
    if (!usable(c))
        return;
    size_t total = n > 0 && n_tasks > 0 ? (size_t)n * n_tasks : 0;
    /* Always launched, so the loss is written (0) even for an empty batch. */
    k_loss<<<1, LOSS_THREADS, 0, c->stream>>>((float *)loss, (float *)dy, (const float *)y,
                                              (const float *)target, mask, total,
                                              kind == MP_LOSS_BCE);
    LAUNCHED(c, "k_loss");
}

static void cu_adam(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n, double lr,
                    double beta1, double beta2, double eps, double weight_decay, long t)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    /* The step's scalars in double on the host, then fp32, as the cpu
     * backend does. */
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    k_adam<<<grid_for(c, n, THREADS), THREADS, 0, c->stream>>>(
        (float *)p, (float *)m, (float *)v, (const float *)g, n, (float)(lr / bc1),
        (float)sqrt(bc2), (float)beta1, (float)beta2, (float)(1 - beta1), (float)(1 - beta2),
        (float)eps, (float)weight_decay);
    LAUNCHED(c, "k_adam");
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
        if (c->capturing) {
            cudaGraph_t g = NULL;
            if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g)
                cudaGraphDestroy(g);
            (void)cudaGetLastError();
            c->capturing = 0;
        }
        if (c->stream)
            (void)cudaStreamSynchronize(c->stream);
        if (c->side)
            (void)cudaStreamSynchronize(c->side);
        mp_cu_stream_close(c);
        if (c->blas)
            (void)cublasDestroy(c->blas);
        if (c->blas2)
            (void)cublasDestroy(c->blas2);
        if (c->lt)
            (void)cublasLtDestroy(c->lt);
        if (c->blas_ws)
            (void)cudaFree(c->blas_ws);
        if (c->blas_ws2)
            (void)cudaFree(c->blas_ws2);
        if (c->scratch)
            (void)cudaFree(c->scratch);
        if (c->ev_fork)
            (void)cudaEventDestroy(c->ev_fork);
        if (c->ev_join)
            (void)cudaEventDestroy(c->ev_join);
        if (c->side)
            (void)cudaStreamDestroy(c->side);
        if (c->stream)
            (void)cudaStreamDestroy(c->stream);
        (void)cudaGetLastError();
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
    char why[256];
    if (!mp_backend_cuda_available(why, sizeof why))
        return mp_error_set(MP_ERR_NODEVICE, "cuda backend: no usable GPU: %s", why);

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

    cudaDeviceProp prop;
    if (!CUDA_OK(c, cudaGetDevice(&c->device)) ||
        !CUDA_OK(c, cudaGetDeviceProperties(&prop, c->device)))
        return open_fail(b, MP_ERR_INTERNAL);
    c->sm_count = prop.multiProcessorCount;
    c->mem_total = prop.totalGlobalMem;
    int drv = 0, rt = 0;
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    snprintf(c->info, sizeof c->info,
             "%.200s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, driver %d.%d, runtime %d.%d, gemm %s",
             prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize >> 20, drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10, mp_precision_name(prec));

    if (!CUDA_OK(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) ||
        !CUDA_OK(c, cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking)) ||
        !CUDA_OK(c, cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming)) ||
        !CUDA_OK(c, cudaEventCreateWithFlags(&c->ev_join, cudaEventDisableTiming)) ||
        !BLAS_OK(c, cublasCreate(&c->blas)) ||
        !BLAS_OK(c, cublasSetStream(c->blas, c->stream)) ||
        !BLAS_OK(c, cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST)) ||
        !BLAS_OK(c, cublasCreate(&c->blas2)) ||
        !BLAS_OK(c, cublasSetStream(c->blas2, c->side)) ||
        !BLAS_OK(c, cublasSetPointerMode(c->blas2, CUBLAS_POINTER_MODE_HOST)) ||
        !BLAS_OK(c, cublasLtCreate(&c->lt)))
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
    if (!BLAS_OK(c, cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WORKSPACE_BYTES)) ||
        !BLAS_OK(c, cublasSetWorkspace(c->blas2, c->blas_ws2, BLAS_WORKSPACE_BYTES)))
        return open_fail(b, MP_ERR_INTERNAL);

    b->dtype = MP_F32;
    b->esize = sizeof(float);
    b->host_memory = 0;
    b->close = cu_close;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->zero = cu_zero;
    b->copy = cu_copy;
    b->sync = cu_sync;
    b->gemm = cu_gemm;
    b->gemm_batch = cu_gemm_batch;
    b->fill_rows = cu_fill_rows;
    b->col_sum = cu_col_sum;
    b->copy2d = cu_copy2d;
    b->add = cu_add;
    b->relu_dropout = cu_relu_dropout;
    b->relu_dropout_backward = cu_relu_dropout_backward;
    b->dropout = cu_dropout;
    b->dropout_backward = cu_dropout_backward;
    b->atom_embed = cu_atom_embed;
    b->atom_embed_backward = cu_atom_embed_backward;
    b->edge_embed = cu_edge_embed;
    b->edge_embed_backward = cu_edge_embed_backward;
    b->message = cu_message;
    b->message_backward = cu_message_backward;
    b->atom_sum = cu_atom_sum;
    b->atom_sum_backward = cu_atom_sum_backward;
    b->pool = cu_pool;
    b->pool_backward = cu_pool_backward;
    b->loss = cu_loss;
    b->adam = cu_adam;
    b->gemm_res_relu = cu_gemm_res_relu;
    b->message_backward_relu = cu_message_backward_relu;
    mp_cu_keyed_ops(b);
    mp_cu_infer_ops(b);
    mp_cu_stream_ops(b);
    mp_cu_bf16_ops(b);                      /* bf16 storage ops (bf16 only) */
    mp_cu_train_ops(b);
    mp_cu_capture_ops(b);
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
