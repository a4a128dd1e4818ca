/*
 * reduce_cuda.cu - the cuda backend's reductions (ops.h): column sums, the
 * weight-gradient scatters of the one-hot gathers (atom_embed_backward,
 * edge_embed_backward's bond rows), the masked loss, and Adam with its
 * step's scalars from the host (adam) or from device memory (adam_sched),
 * and step_end.  All fp32.
 *
 * No float atomics anywhere.  Column sums and the scatters run in two
 * levels: fixed row chunks, each summed in row order by one lane per
 * (chunk, slot, column) into a scratch block, then the chunks summed in
 * chunk order.  The chunk count is a function of the shape only, so the
 * result is the same bits on every run.  The loss is one block reducing by a
 * fixed tree (in double).
 */
#include "gpu/cuda_ctx.cuh"

#include <math.h>

/* ===================================================================== */
/* Kernels                                                                */
/* ===================================================================== */

/* The Adam update, one thread per element (grid-stride).  The step's two
 * scalars are `step` and `bc2s`, or read at sched[2k], sched[2k + 1] with
 * k = *k_dev when sched (adam_sched): the same arithmetic either way, so
 * bitwise the same update for the same scalars. */
__global__ void k_adam(float *__restrict__ p, float *__restrict__ m, float *__restrict__ v,
                       const float *__restrict__ g, size_t n, float step, float bc2s,
                       const float *__restrict__ sched, const int32_t *__restrict__ k_dev,
                       float b1, float b2, float c1, float c2, float eps, float wd)
{
    pdl_enter();
    if (sched) {
        size_t k = (size_t)*k_dev;
        step = sched[2 * k];
        bc2s = sched[2 * k + 1];
    }
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

__global__ void k_step_end(int32_t *k_dev, float *losses, const float *loss)
{
    pdl_enter();
    int32_t k = *k_dev;
    losses[k] = loss[0];
    *k_dev = k + 1;
}

/*
 * Column sums of x [n_rows x n_cols] by row chunks.  Block (x: 128 columns,
 * y: chunk c).  direct: add the chunk's sums into dst (only when there is one
 * chunk); else write them to part[c * n_cols + j].
 */
__global__ void k_col_sum_chunks(float *dst, int direct, const float *x, int ldx, int32_t n_rows,
                                 int n_cols, int32_t rows_per_chunk)
{
    pdl_enter();
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
    pdl_enter();
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
    pdl_enter();
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
 * With PAIR a row r is the pair of g's rows 2r and 2r + 1, g[2r] + g[2r + 1]
 * (n_rows counts pairs, hot has a list per pair), and list entries that
 * are none are skipped rather than summed into the trash row (bond lists
 * are half empty; atom lists nearly full, where the test costs more than
 * it saves).  One warp per block: lane = CW adjacent columns of a 32 * CW column tile
 * (blockIdx.x); row chunk blockIdx.y; slot group blockIdx.z (slots [z *
 * group, (z+1) * group) of the n_hot + has_mass slots).  Each lane sums its
 * columns over the chunk's rows in order into shared memory, CW floats per
 * slot, so every partial is a fixed sequence of adds whatever CW is.
 * direct (one chunk): add into dst[s * h + j]; else write part[(chunk *
 * n_slots + s) * h + j].  Slots outside [0, n_hot) in `hot` are ignored (the
 * model checks its batches: ops.h callers never pass them).
 *
 * Shape of the code (scatter v6 of 2026-12-04, NOTES.md): rows go 32 at a
 * time.  Lane u fetches row u's hot list and mass for the warp, as
 * accumulator offsets (a slot outside the group, or none, points at a spare
 * "trash" row), and the 32 rows' g are loaded branch-free one round ahead,
 * so the next round's loads are in flight while this round is summed.  A
 * round is parked in shared memory (g, offsets, masses) and the row loop,
 * NOT unrolled (a fully unrolled body is instruction-fetch bound: v3 in
 * NOTES.md), reads it back there, the offsets and masses as broadcasts.
 * That loop is bound by the instructions it issues, so a lane sums two
 * columns (float2) when the row width allows (CW 2: half the offsets and
 * loop overhead per column).  A row's slots are distinct (one per one-hot
 * block), so its NH accumulators are all read, then all written; a row
 * whose list repeats a slot (the seam allows it; the featurizer never does
 * it) takes the one-at-a-time path, so the sums are the same either way.
 */
#define SLOT_ROWS 32

template <int CW> struct colv;
template <> struct colv<1> {
    typedef float T;
    static __device__ __forceinline__ T zero() { return 0.0f; }
};
template <> struct colv<2> {
    typedef float2 T;
    static __device__ __forceinline__ T zero() { return make_float2(0.0f, 0.0f); }
};
__device__ __forceinline__ float v_add(float a, float b) { return a + b; }
__device__ __forceinline__ float2 v_add(float2 a, float2 b)
{
    return make_float2(a.x + b.x, a.y + b.y);
}
/* acc + m * g, contracted as `acc += m * g` always was (one fma a column) */
__device__ __forceinline__ float v_fma(float acc, float m, float g) { return acc + m * g; }
__device__ __forceinline__ float2 v_fma(float2 acc, float m, float2 g)
{
    return make_float2(acc.x + m * g.x, acc.y + m * g.y);
}
__device__ __forceinline__ void v_store(float *p, int add, float v) { *p = add ? *p + v : v; }
__device__ __forceinline__ void v_store(float *p, int add, float2 v)
{
    p[0] = add ? p[0] + v.x : v.x;
    p[1] = add ? p[1] + v.y : v.y;
}

template <typename HT, int NH, int CW, int PAIR>
__global__ void k_slot_sum_chunks(float *dst, int direct, const HT *hot, int hot_shift,
                                  const float *mass, const float *g, int32_t n_rows, int h,
                                  int n_hot, int32_t rows_per_chunk, int group)
{
    pdl_enter();
    typedef typename colv<CW>::T VT;
    /* acc [group + 1][32] (last: trash), gs [32][32], offs [32][NH], ms [32] */
    extern __shared__ float4 sm4[];
    VT *acc = (VT *)sm4, *gs = acc + (size_t)(group + 1) * 32;
    int *offs = (int *)(gs + SLOT_ROWS * 32);
    float *ms = (float *)(offs + SLOT_ROWS * NH);
    const int lane = threadIdx.x;
    const int j = (blockIdx.x * 32 + lane) * CW;  /* h % CW == 0: the lane's CW columns fit */
    const int32_t c = blockIdx.y;
    const int n_slots = n_hot + (mass ? 1 : 0);
    const int s0 = blockIdx.z * group;
    const int s1 = s0 + group < n_slots ? s0 + group : n_slots;
    /* accumulator offsets in bytes from the lane's slot-0 accumulator */
    const int slot_bytes = 32 * (int)sizeof(VT), trash = group * slot_bytes;
    char *const acc_lane = (char *)(acc + lane);
    for (int s = 0; s <= group; s++)
        acc[s * 32 + lane] = colv<CW>::zero();
    VT macc = colv<CW>::zero();
    const int32_t r0 = c * rows_per_chunk;
    const int32_t r1 = r0 + rows_per_chunk < n_rows ? r0 + rows_per_chunk : n_rows;
    const int hot_hi = s1 < n_hot ? s1 : n_hot;   /* hot slots of this group: [s0, hot_hi) */
    const bool col = j < h;
    const int jj = col ? j : 0;                   /* a valid address for idle lanes */

    /* one round's loads, issued together: row r + u's g for u < 32, and lane
     * u's row's hot list and mass (rows past r1 read row r, unused) */
    VT v[SLOT_ROWS];
    HT hv[NH];
    float mym = 0.0f;
#define SLOT_LOADS(r)                                                                        \
    do {                                                                                     \
        const int nr_ = r1 - (r) < SLOT_ROWS ? (int)(r1 - (r)) : SLOT_ROWS;                  \
        const int32_t rl_ = (r) + (lane < nr_ ? lane : 0);                                   \
        _Pragma("unroll") for (int q = 0; q < NH; q++)                                       \
            hv[q] = hot[(size_t)(rl_ >> hot_shift) * NH + q];                                \
        mym = mass ? mass[rl_] : 0.0f;                                                       \
        _Pragma("unroll") for (int u = 0; u < SLOT_ROWS; u++) {                              \
            const size_t ru_ = (size_t)((r) + (u < nr_ ? u : 0));                            \
            v[u] = PAIR ? v_add(*(const VT *)(g + 2 * ru_ * h + jj),                         \
                                *(const VT *)(g + (2 * ru_ + 1) * h + jj))                   \
                        : *(const VT *)(g + ru_ * h + jj);                                   \
        }                                                                                    \
    } while (0)
    if (r0 < r1)
        SLOT_LOADS(r0);
    for (int32_t r = r0; r < r1; r += SLOT_ROWS) {
        const int nr = r1 - r < SLOT_ROWS ? (int)(r1 - r) : SLOT_ROWS;   /* warp-uniform */
        int my[NH];
        bool dup = false;
#pragma unroll
        for (int q = 0; q < NH; q++) {
            const int sl = (int)hv[q];
            my[q] = lane < nr && sl >= s0 && sl < hot_hi ? (sl - s0) * slot_bytes : trash;
            offs[lane * NH + q] = my[q];
#pragma unroll
            for (int q2 = 0; q2 < q; q2++)
                dup |= my[q] != trash && my[q] == my[q2];
        }
        ms[lane] = mym;
        const unsigned dups = __ballot_sync(0xffffffffu, dup);
#pragma unroll
        for (int u = 0; u < SLOT_ROWS; u++)
            gs[u * 32 + lane] = col && u < nr ? v[u] : colv<CW>::zero();
        __syncwarp();
        if (r + SLOT_ROWS < r1)
            SLOT_LOADS(r + SLOT_ROWS);
#pragma unroll 1
        for (int u = 0; u < nr; u++) {
            const VT gu = gs[u * 32 + lane];
            VT *a[NH];
            bool live[NH];   /* warp-uniform; with PAIR the trash updates are skipped */
#pragma unroll
            for (int q = 0; q < NH; q++) {
                const int o = offs[u * NH + q];
                live[q] = !PAIR || o != trash;
                a[q] = (VT *)(acc_lane + o);
            }
            if (!((dups >> u) & 1u)) {                   /* warp-uniform */
                VT old[NH];
#pragma unroll
                for (int q = 0; q < NH; q++)
                    if (live[q])
                        old[q] = *a[q];
#pragma unroll
                for (int q = 0; q < NH; q++)
                    if (live[q])
                        *a[q] = v_add(old[q], gu);
            } else {
#pragma unroll
                for (int q = 0; q < NH; q++)
                    if (live[q])
                        *a[q] = v_add(*a[q], gu);
            }
            if (mass)
                macc = v_fma(macc, ms[u], gu);
        }
        __syncwarp();                                    /* offs, ms rewritten next round */
    }
#undef SLOT_LOADS
    if (!col)
        return;
    for (int s = s0; s < s1; s++) {
        const VT val = s == n_hot ? macc : acc[(s - s0) * 32 + lane];
        if (direct)
            v_store(dst + (size_t)s * h + j, 1, val);
        else
            v_store(dst + ((size_t)c * n_slots + s) * h + j, 0, val);
    }
}

/* ===================================================================== */
/* Kernel: masked loss (one block, fixed reduction tree)                  */
/* ===================================================================== */

#define LOSS_THREADS 1024

/* v[0] = the sum of v[0 .. LOSS_THREADS) by a fixed tree (every thread of
 * the block calls it, t its index; v shared, written before). */
template <typename T> __device__ __forceinline__ void tree_sum(T *v, int t)
{
    for (int w = LOSS_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            v[t] += v[t + w];
        __syncthreads();
    }
}

/* mse / bce; w_i = sw[i / n_tasks] tw[i % n_tasks] (1 where absent: a
 * factor of 1 multiplies exactly, so unweighted runs keep their bits). */
__global__ void __launch_bounds__(LOSS_THREADS)
k_loss(float *loss, float *dy, const float *y, const float *target, const uint8_t *mask,
       size_t total, int bce, const float *sw, const float *tw, int n_tasks)
{
    pdl_enter();
    __shared__ double sum[LOSS_THREADS];
    __shared__ unsigned long long cnt[LOSS_THREADS];
    const int t = threadIdx.x;

    unsigned long long n = 0;
    for (size_t i = t; i < total; i += LOSS_THREADS)
        n += mask[i] != 0;
    cnt[t] = n;
    __syncthreads();
    tree_sum(cnt, t);
    const unsigned long long count = cnt[0];
    const float inv = count ? (float)(1.0 / (double)count) : 0.0f;

    double s = 0;
    for (size_t i = t; i < total; i += LOSS_THREADS) {
        if (!mask[i]) {
            dy[i] = 0.0f;
            continue;
        }
        float x = y[i], tt = target[i], g;
        float w = (sw ? sw[i / n_tasks] : 1.0f) * (tw ? tw[i % n_tasks] : 1.0f);
        if (bce) {
            float l = (x > 0.0f ? x : 0.0f) - x * tt + log1pf(expf(-fabsf(x)));
            s += (double)l * w;
            g = 1.0f / (1.0f + expf(-x)) - tt;
        } else {
            float d = x - tt;
            s += (double)d * d * w;
            g = 2.0f * d;
        }
        dy[i] = g * w * inv;
    }
    sum[t] = s;
    __syncthreads();
    tree_sum(sum, t);
    if (t == 0)
        loss[0] = count ? (float)(sum[0] / (double)count) : 0.0f;
}

/* ===================================================================== */
/* Column sums and scatters                                               */
/* ===================================================================== */

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
        launch(c, c->stream, k_sum_chunks_seq, grid_for(c, width, THREADS), THREADS, 0,
            dst, c->scratch, n_chunks, width);
        LAUNCHED(c, "k_sum_chunks_seq");
        return;
    }
    dim3 block(SUM_TX, SUM_TY);
    launch(c, c->stream, k_sum_chunks, (unsigned)((width + SUM_TX - 1) / SUM_TX), block, 0,
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
    launch(c, c->stream, k_col_sum_chunks, grid, 128, 0, direct ? (float *)dst : c->scratch, direct,
                                                  (const float *)x, ldx, n_rows, n_cols, rows);
    if (LAUNCHED(c, "k_col_sum_chunks") && !direct)
        sum_chunks(c, (float *)dst, nch, (size_t)n_cols);
}

/* One launch of k_slot_sum_chunks at CW columns a lane, and the chunk sums. */
template <typename HT, int NH, int CW, int PAIR>
static void slot_launch(gpu_ctx *c, float *dw, const HT *hot, int hot_shift, const float *mass,
                        const float *g, int32_t n_rows, int h, int n_slots, int n_hot,
                        const char *name)
{
    /* Shared memory: 32 * CW floats per slot, one trash row, the 32 x 32 * CW
     * staged g, and the 32 rows' offsets and masses; a group of at most
     * 320 / CW slots keeps it under 48 KiB, the default limit. */
    const int cap = 320 / CW - 10;
    const int group = n_slots < cap ? n_slots : cap;
    const int n_groups = (n_slots + group - 1) / group;
    const size_t width = (size_t)n_slots * h;
    /* pairs are chunked as their rows would be (half as many pairs a chunk:
     * the same blocks for a small batch, whose time is their latency) */
    int32_t nch, rows = chunk_rows(PAIR ? 2 * n_rows : n_rows, width, &nch);
    if (PAIR) {
        rows = (rows + 1) / 2;
        nch = (n_rows + rows - 1) / rows;
    }
    /* Where the chunks' partials would outweigh the rows themselves (chunks
     * x slots > rows: the atom scatter of a wide model or of a big batch),
     * longer chunks: at most enough for c->scatter_blocks blocks of 64
     * columns.  Counted in 64-column tiles whatever CW is, so both forms
     * cut the same chunks (the same bits); a function of the shape. */
    if (c->scatter_blocks > 0 && (int64_t)nch * n_slots > n_rows) {
        const int64_t tiles = (h + 63) / 64;
        const int64_t want = (c->scatter_blocks + tiles - 1) / tiles;
        if (want < nch) {
            rows = (int32_t)(((int64_t)n_rows + want - 1) / want);
            nch = (n_rows + rows - 1) / rows;
        }
    }
    int direct = nch == 1;
    dim3 grid((unsigned)((h + 32 * CW - 1) / (32 * CW)), (unsigned)nch, (unsigned)n_groups);
    const size_t smem = ((size_t)(group + 1) * 32 + (size_t)SLOT_ROWS * 32) * CW * sizeof(float) +
                        (size_t)SLOT_ROWS * (NH + 1) * sizeof(int);
    launch(c, c->stream, k_slot_sum_chunks<HT, NH, CW, PAIR>, grid, 32, smem,
        direct ? dw : c->scratch, direct, hot, hot_shift, mass, g, n_rows, h, n_hot, rows, group);
    if (cuda_ok(c, cudaGetLastError(), name, __FILE__, __LINE__) && !direct)
        sum_chunks(c, dw, nch, width);
}

/* The scatter of a one-hot gather into weight rows [0, n_hot) (+ the mass
 * row n_hot when mass != NULL), shared by both embed backwards: two
 * columns a lane when h is even and g 8-byte aligned (the same sums), and
 * for hot lists shared by row pairs (hot_shift 1: the two directions of a
 * bond) the pair's rows added first, g[2p] + g[2p + 1], and summed as one
 * row (half the accumulator updates). */
template <typename HT, int NH>
static void slot_scatter(gpu_ctx *c, float *dw, const HT *hot, int hot_shift, const float *mass,
                         const float *g, int32_t n_rows, int h, int n_hot, const char *name)
{
    const int n_slots = n_hot + (mass ? 1 : 0);
    if (n_rows <= 0 || h <= 0 || n_slots <= 0)
        return;
    const bool two = h % 2 == 0 && ((uintptr_t)g & 7) == 0;
    if (hot_shift == 1 && n_rows % 2 == 0 && !mass) {
        if (two)
            slot_launch<HT, NH, 2, 1>(c, dw, hot, 0, NULL, g, n_rows / 2, h, n_slots, n_hot, name);
        else
            slot_launch<HT, NH, 1, 1>(c, dw, hot, 0, NULL, g, n_rows / 2, h, n_slots, n_hot, name);
    } else if (two) {
        slot_launch<HT, NH, 2, 0>(c, dw, hot, hot_shift, mass, g, n_rows, h, n_slots, n_hot, name);
    } else {
        slot_launch<HT, NH, 1, 0>(c, dw, hot, hot_shift, mass, g, n_rows, h, n_slots, n_hot, name);
    }
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

void mp_cu_bond_scatter(gpu_ctx *c, float *dwb, const int8_t *bond_hot, const float *dh0,
                        int32_t n_edges, int h)
{
    slot_scatter<int8_t, MP_BOND_MAX_HOT>(c, dwb, bond_hot, 1, NULL, dh0, n_edges, h,
                                          MP_BOND_FDIM, "launch of k_slot_sum_chunks (bonds)");
}

/* ===================================================================== */
/* Loss, Adam, step_end                                                   */
/* ===================================================================== */

static void cu_loss(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                    const uint8_t *mask, int32_t n, const mp_loss_spec *spec)
{
    gpu_ctx *c = CTX(b);
    if (!usable(c))
        return;
    if (spec->kind != MP_LOSS_MSE && spec->kind != MP_LOSS_BCE) {
        mp_cu_loss_ext(b, loss, dy, y, target, mask, n, spec);
        return;
    }
    int n_tasks = spec->n_tasks;
    size_t total = n > 0 && n_tasks > 0 ? (size_t)n * n_tasks : 0;
    /* Always launched, so the loss is written (0) even for an empty batch. */
    launch(c, c->stream, k_loss, 1, LOSS_THREADS, 0, (float *)loss, (float *)dy, (const float *)y,
                                              (const float *)target, mask, total,
                                              spec->kind == MP_LOSS_BCE,
                                              (const float *)spec->sample_weight,
                                              (const float *)spec->task_weight,
                                              n_tasks > 0 ? n_tasks : 1);
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
    launch(c, c->stream, k_adam, grid_for(c, n, THREADS), THREADS, 0,
        (float *)p, (float *)m, (float *)v, (const float *)g, n, (float)(lr / bc1),
        (float)sqrt(bc2), NULL, NULL, (float)beta1, (float)beta2, (float)(1 - beta1),
        (float)(1 - beta2), (float)eps, (float)weight_decay);
    LAUNCHED(c, "k_adam");
}

/* adam with the scalars read on the device (resident.c replays one captured
 * step with each step's own scalars). */
static void cu_adam_sched(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                          const float *sched, const int32_t *k_dev, double beta1, double beta2,
                          double eps, double weight_decay)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    size_t blocks = (n + THREADS - 1) / THREADS;
    if (blocks > 4096)
        blocks = 4096;
    launch(c, c->stream, k_adam, (unsigned)blocks, THREADS, 0,
        (float *)p, (float *)m, (float *)v, (const float *)g, n, 0.0f, 1.0f, sched, k_dev,
        (float)beta1, (float)beta2, (float)(1 - beta1), (float)(1 - beta2), (float)eps,
        (float)weight_decay);
    LAUNCHED(c, "k_adam (sched)");
}

static void cu_step_end(mp_backend *b, int32_t *k_dev, void *losses, const void *loss)
{
    gpu_ctx *c = CTX(b);
    if (!usable(c))
        return;
    launch(c, c->stream, k_step_end, 1, 1, 0, k_dev, (float *)losses, (const float *)loss);
    LAUNCHED(c, "k_step_end");
}

void mp_cu_reduce_ops(mp_backend *b)
{
    b->col_sum = cu_col_sum;
    b->atom_embed_backward = cu_atom_embed_backward;
    b->loss = cu_loss;
    b->adam = cu_adam, b->adam_sched = cu_adam_sched;   /* host / device scalars */
    b->step_end = cu_step_end;
}

