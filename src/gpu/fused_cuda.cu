/*
 * fused_cuda.cu - the D-MPNN message step as one product kernel (ops.h
 * message_update), in two forms, both off by default: an mma.sync form for
 * inference forwards (MOLPROP_CUDA_MESSAGE_UPDATE=1, this comment) and a
 * wgmma form on the panels for inference and training forwards (=2, the
 * second half of the file):
 *
 *   M_t[e] = ReLU(H0[e] + bf16(S[src[e]] - M_{t-1}[e ^ 1]) W_h)
 *
 * The unfused step writes the message to global memory (message) and reads
 * it back as the product's A operand (gemm_res_relu, cuBLASLt).  Here a
 * block of 256 threads takes 64 edges and goes through the message's
 * columns 32 at a time (a stage): cp.async brings the stage's rows of
 * S[src] and M[rev] and of W_h into shared memory, FM_STAGES - 1 stages
 * ahead of the product, so that many loads are in flight without holding
 * registers; each thread turns the rows it loaded into the bf16 message
 * (the A tile), the tensor cores make the product (mma.sync m16n8k16, bf16
 * operands, fp32 sums), and the epilogue adds H0, applies the ReLU and
 * writes M_t.  S, the per-atom sums, come first from rows_cuda.cu's
 * segment sum.
 *
 * (A first form gathered each stage into registers one stage ahead: one
 * block per SM then waited out the gather's latency at every stage, and the
 * step took 1.2-1.3 times the unfused pair; bench/RESULTS.md.)
 *
 * Written with mma.sync rather than wgmma: the A operand is computed, not
 * copied, so it passes through the threads on its way to the tensor cores
 * anyway, and the product (E x h x h, h ~ 300) is small per tile.
 *
 * Warp tiling: 8 warps as 2 (rows) x 4 (columns), each 32 rows x 80
 * columns = 2 x 10 mma tiles; a block covers 320 output columns (blockIdx.y
 * steps through wider layers).  h must be a multiple of 4 (8-byte bf16
 * groups); the rows of every operand are h apart.
 */
#include "gpu/cuda_ctx.cuh"
#include "gpu/mma.cuh"
#include "gpu/panel.cuh"

#include <stdlib.h>
#include <string.h>

#define FM_BM 64                /* edges per block                     */
#define FM_BN 320               /* output columns per block            */
#define FM_BK 32                /* columns of the message per stage    */
#define FM_STAGES 4             /* stages in flight: 3 loading, 1 in the product */
#define FM_AS (FM_BK + 8)       /* A tile row stride: 80 bytes, no ldmatrix conflicts */
#define FM_WS (FM_BN + 8)       /* W tile row stride: 656 bytes, the same */
/* one stage: S[src] rows (fp32), M[rev] rows (room for fp32), W_h rows */
#define FM_RS_BYTES (FM_BM * FM_BK * 4)
#define FM_RM_BYTES (FM_BM * FM_BK * 4)
#define FM_W_BYTES (FM_BK * FM_WS * 2)
#define FM_STAGE_BYTES (FM_RS_BYTES + FM_RM_BYTES + FM_W_BYTES)
#define FM_A_BYTES (FM_BM * FM_AS * 2)
#define FM_SMEM_BYTES (FM_STAGES * FM_STAGE_BYTES + FM_A_BYTES)
#define FM_A_GROUPS (FM_BM * FM_BK / 4 / THREADS)     /* 4-element groups per thread: 2 */
#define FM_W_GROUPS (FM_BK * FM_BN / 4 / THREADS)     /* 10 */

/* 4 elements of storage T as floats. */
__device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ld4(const bf16 *p)
{
    uint2 u = *(const uint2 *)p;
    float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
    float2 hi = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
/* until at most FM_STAGES - 2 of this thread's groups are in flight */
__device__ __forceinline__ void cp_wait_stage(void) { cp_wait<FM_STAGES - 2>(); }

/* Starts loading stage buffer `stage` with message columns k0..k0+31: this
 * thread's 4-element groups of S[src[e]] and M[e ^ 1] (zeros past h or the
 * last edge), and its share of W_h rows k0.. , columns n0..n0+319. */
template <typename TM>
__device__ __forceinline__ void load_stage(unsigned char *stage, const float *__restrict__ s,
                                           const TM *__restrict__ m, const bf16 *__restrict__ w,
                                           const int64_t srow[], const int64_t rrow[], int k0,
                                           int n0, int h)
{
    float *rs = (float *)stage;
    TM *rm = (TM *)(stage + FM_RS_BYTES);
    bf16 *ws = (bf16 *)(stage + FM_RS_BYTES + FM_RM_BYTES);
#pragma unroll
    for (int j = 0; j < FM_A_GROUPS; j++) {
        const int q = threadIdx.x + j * THREADS, k = k0 + (q % (FM_BK / 4)) * 4;
        const int ok = srow[j] >= 0 && k < h;
        cp_async<16>(rs + q * 4, ok ? s + srow[j] + k : s, ok);
        cp_async<4 * sizeof(TM)>(rm + q * 4, ok ? m + rrow[j] + k : m, ok);
    }
#pragma unroll
    for (int j = 0; j < FM_W_GROUPS; j++) {
        const int q = threadIdx.x + j * THREADS;
        const int kr = q / (FM_BN / 4), c = (q % (FM_BN / 4)) * 4;
        const int ok = k0 + kr < h && n0 + c < h;
        cp_async<8>(ws + kr * FM_WS + c, ok ? w + (size_t)(k0 + kr) * h + n0 + c : w, ok);
    }
}

/* The A tile of a stage: the message S[src] - M[rev] (ReLU on M where
 * asked) rounded to bf16, from the groups this thread loaded itself. */
template <typename TM, bool RELU>
__device__ __forceinline__ void make_a(bf16 *a, const unsigned char *stage)
{
    const float *rs = (const float *)stage;
    const TM *rm = (const TM *)(stage + FM_RS_BYTES);
#pragma unroll
    for (int j = 0; j < FM_A_GROUPS; j++) {
        const int q = threadIdx.x + j * THREADS;
        float4 x = ld4(rs + q * 4), r = ld4(rm + q * 4);
        if (RELU) {
            r.x = fmaxf(r.x, 0.f), r.y = fmaxf(r.y, 0.f);
            r.z = fmaxf(r.z, 0.f), r.w = fmaxf(r.w, 0.f);
        }
        __nv_bfloat162 lo = __floats2bfloat162_rn(x.x - r.x, x.y - r.y);
        __nv_bfloat162 hi = __floats2bfloat162_rn(x.z - r.z, x.w - r.w);
        uint2 u;
        u.x = *(uint32_t *)&lo;
        u.y = *(uint32_t *)&hi;
        *(uint2 *)(a + (q / (FM_BK / 4)) * FM_AS + (q % (FM_BK / 4)) * 4) = u;
    }
}

template <typename TM, typename TR, bool RELU>
__global__ void __launch_bounds__(THREADS, 1)
k_message_update(TR *__restrict__ out, const TR *__restrict__ r, const float *__restrict__ s,
                 const int32_t *__restrict__ edge_src, const TM *__restrict__ m,
                 const bf16 *__restrict__ w, int32_t n_edges, int h)
{
    pdl_enter();
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *const A = (bf16 *)(smem + FM_STAGES * FM_STAGE_BYTES);
    const int64_t e0 = (int64_t)blockIdx.x * FM_BM;
    const int n0 = blockIdx.y * FM_BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp & 1, wn = warp >> 1;

    /* this thread's gather rows: S[src[e]] and M[e ^ 1] (-1: past the end) */
    int64_t srow[FM_A_GROUPS], rrow[FM_A_GROUPS];
#pragma unroll
    for (int j = 0; j < FM_A_GROUPS; j++) {
        const int64_t e = e0 + (threadIdx.x + j * THREADS) / (FM_BK / 4);
        srow[j] = e < n_edges ? (int64_t)edge_src[e] * h : -1;
        rrow[j] = e < n_edges ? (e ^ 1) * h : 0;
    }

    float acc[2][10][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < 10; n++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[i][n][q] = 0.f;

    /* FM_STAGES - 1 stages in flight before the first product; one commit
     * group per stage, empty ones included, so that cp_wait_stage always
     * means "this stage has landed" */
    const int stages = (h + FM_BK - 1) / FM_BK;
    for (int st = 0; st < FM_STAGES - 1; st++) {
        if (st < stages)
            load_stage<TM>(smem + st * FM_STAGE_BYTES, s, m, w, srow, rrow, st * FM_BK, n0, h);
        cp_commit();
    }

    for (int st = 0; st < stages; st++) {
        const unsigned char *cur = smem + (st % FM_STAGES) * FM_STAGE_BYTES;
        cp_wait_stage();
        /* every thread's copies of this stage are in, and the product of
         * the last one is done with A and with the buffer refilled next */
        __syncthreads();
        const int ahead = st + FM_STAGES - 1;
        if (ahead < stages)
            load_stage<TM>(smem + (ahead % FM_STAGES) * FM_STAGE_BYTES, s, m, w, srow, rrow,
                           ahead * FM_BK, n0, h);
        cp_commit();
        make_a<TM, RELU>(A, cur);
        __syncthreads();
        const bf16 *W = (const bf16 *)(cur + FM_RS_BYTES + FM_RM_BYTES);
#pragma unroll
        for (int kk = 0; kk < FM_BK; kk += 16) {
            uint32_t af[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldm_x4(af[i], A + (wm * 32 + i * 16 + (lane & 15)) * FM_AS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int n = 0; n < 10; n += 2) {
                uint32_t bf[4];
                ldm_x4_t(bf, W + (kk + (lane & 15)) * FM_WS + wn * 80 + n * 8 + (lane >> 4) * 8);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mma16816(acc[i][n], af[i], bf[0], bf[1]);
                    mma16816(acc[i][n + 1], af[i], bf[2], bf[3]);
                }
            }
        }
    }

    /* epilogue: thread (g = lane / 4, t = lane % 4) holds rows g and g + 8
     * of each tile, columns 2t and 2t + 1 */
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int64_t e = e0 + wm * 32 + i * 16 + g + half * 8;
            if (e >= n_edges)
                continue;
#pragma unroll
            for (int n = 0; n < 10; n++) {
                const int col = n0 + wn * 80 + n * 8 + 2 * t;
                if (col >= h)
                    continue;
                const size_t o = (size_t)e * h + col;
                float2 res = ld2(r + o);
                st2(out + o, fmaxf(acc[i][n][2 * half] + res.x, 0.f),
                    fmaxf(acc[i][n][2 * half + 1] + res.y, 0.f));
            }
        }
}

static int al8(const void *p) { return ((uintptr_t)p & 7) == 0; }

template <typename TM, typename TR, bool RELU>
static void launch_update(gpu_ctx *c, void *out, const void *r, const float *s,
                          const int32_t *edge_src, const void *m, const void *w,
                          int32_t n_edges, int h)
{
    dim3 grid((unsigned)((n_edges + FM_BM - 1) / FM_BM), (unsigned)((h + FM_BN - 1) / FM_BN));
    launch(c, c->stream, k_message_update<TM, TR, RELU>, grid, THREADS, FM_SMEM_BYTES,
        (TR *)out, (const TR *)r, s, edge_src, (const TM *)m, (const bf16 *)w, n_edges, h);
}

static int cu_message_update(mp_backend *b, void *out, const void *r, mp_stype rc_st, void *s,
                             const int32_t *in_start, const int32_t *in_edge,
                             const int32_t *edge_src, const void *m, mp_stype m_st, int relu_in,
                             const void *w, mp_stype w_st, int32_t n_atoms, int32_t n_edges,
                             int h, void *msg)
{
    gpu_ctx *c = CTX(b);
    if (msg || w_st != MP_ST_BF16 || h <= 0 || h % 4 || n_atoms <= 0 || n_edges <= 0 ||
        !al16(s) || !al8(out) || !al8(r) || !al8(m) || !al8(w) ||
        (m_st == MP_ST_ELEM && !al16(m)))
        return 0;
    if (!usable(c))
        return 1;
    mp_cu_segment_sum(c, (float *)s, in_start, in_edge, m, m_st, relu_in, n_atoms, h);
    WITH_T(rc_st, TR, WITH_T(m_st, TM, {
        if (relu_in)
            launch_update<TM, TR, true>(c, out, r, (const float *)s, edge_src, m, w, n_edges, h);
        else
            launch_update<TM, TR, false>(c, out, r, (const float *)s, edge_src, m, w, n_edges, h);
    }));
    LAUNCHED(c, "k_message_update");
    return 1;
}

/* ===================================================================== */
/* The message step on wgmma panels (sm_90a)                              */
/* ===================================================================== */

/*
 * The same step on panel.cuh's panels, with no S in memory at all:
 *
 *   M_t[k ^ 1] = ReLU(H0[k ^ 1] + bf16(S[v] - M[k]) W_h),  k in in(v),
 *
 * taken in the order of the incoming-edge lists (positions p of in_edge:
 * an atom's incoming edges are a run of positions, and edge k = in_edge[p]
 * enters v exactly when k ^ 1 leaves it).  A warpgroup's panel is 64
 * positions.  Each stage brings the panel's rows M[in_edge[p]] (32 columns)
 * into shared memory as the A operand, in the panels' core-matrix layout;
 * the threads then sum each atom's rows there (fp32, in list order from 0,
 * as message's per-atom kernel does), and overwrite every row with its
 * message S[v] - M[k] rounded to bf16.  W_h is whole in shared memory, the
 * products are the panels' wgmma, and the epilogue writes row p to edge
 * in_edge[p] ^ 1.  What reaches memory: M once, H0 once, M_t once.
 *
 * An atom whose run crosses a panel's first or last position has rows the
 * panel does not hold: a first kernel (k_panel_prep) sums such an atom's
 * rows once into T[i], i the boundary 64 i it straddles, and the panels
 * load T[P] and T[P + 1]'s stage columns beside their rows.  It also writes
 * each position's run relative to it (lo - p, hi - p) beside in_edge[p].
 *
 * Every message element is the float sum and difference message makes,
 * rounded as it rounds them, and the products, stages and epilogue are
 * tiles_cuda.cu's panels': the output is bit for bit message followed by
 * gemm_res_relu wherever that product runs on the panels (sm_90, at least
 * PANEL_MIN_ROWS edges, h in (PANEL_NH, PANEL_N]; tests/test_gpu_fused.c).
 */
struct pinfo {
    int16_t dlo, dhi;   /* the position's atom's run, [p + dlo, p + dhi), clamped */
    int32_t ie;         /* in_edge[p] */
};
#define PM_T_FLOATS (2 * PANEL_BK)                       /* a stage's T[P], T[P + 1] */
#define PM_NEAR 4   /* a run's rows loaded at once (most atoms have at most 4 bonds) */
#define PM_SMEM(kp) ((size_t)PANEL_N * (kp) * 2 + PANEL_WG * PANEL_ST * PANEL_A_BYTES + \
                     PANEL_WG * PANEL_ST * PM_T_FLOATS * 4 + PANEL_WG * 2 * PANEL_BM * 8)

/* Blocks [0, atom_blocks): a thread per atom writes its positions' pinfo.
 * The others: a warp per boundary i (1 <= i < panels) whose position 64 i
 * falls inside an atom's run after its start sums that run into T[i]. */
template <bool RELU>
__global__ void k_panel_prep(pinfo *__restrict__ info, float *__restrict__ T,
                             const int32_t *__restrict__ in_start,
                             const int32_t *__restrict__ in_edge,
                             const int32_t *__restrict__ edge_src, const bf16 *__restrict__ m,
                             int32_t n_atoms, int32_t n_edges, int h, int atom_blocks)
{
    pdl_enter();
    if ((int)blockIdx.x < atom_blocks) {
        const int32_t v = blockIdx.x * blockDim.x + threadIdx.x;
        if (v >= n_atoms)
            return;
        const int32_t lo = in_start[v], hi = in_start[v + 1];
        for (int32_t p = lo; p < hi; p++) {
            pinfo f;
            f.dlo = (int16_t)max(lo - p, -32768);
            f.dhi = (int16_t)min(hi - p, 32767);
            f.ie = in_edge[p];
            info[p] = f;
        }
        return;
    }
    const int64_t i = ((int64_t)blockIdx.x - atom_blocks) * (blockDim.x / 32) + threadIdx.x / 32 + 1;
    const int64_t pos = i * PANEL_BM;
    if (pos >= n_edges)
        return;
    const int32_t v = edge_src[in_edge[pos] ^ 1], lo = in_start[v], hi = in_start[v + 1];
    if (lo == pos)
        return;
    for (int j = threadIdx.x % 32; j < h; j += 32) {
        float acc = 0.0f;
        for (int32_t q = lo; q < hi; q++)
            acc += rl<RELU>(__bfloat162float(m[(size_t)in_edge[q] * h + j]));
        T[i * h + j] = acc;
    }
}

template <bool RELU, bool OVL>
__global__ void __launch_bounds__(PANEL_NT, 1)
    k_panel_message(tile_args p, const pinfo *__restrict__ info, const float *__restrict__ T,
                    bf16 *__restrict__ msg_out)
{
    pdl_enter();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) bf16 smp[];
    const int h = p.n, S = (h + PANEL_BK - 1) / PANEL_BK, kp = S * PANEL_BK, KC = kp / 8;
    const int32_t E = p.m;
    bf16 *Bs = smp;                                  /* W_h^T: PANEL_N x kp, K-major */
    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    bf16 *Aw = smp + PANEL_N * kp + wg * PANEL_ST * (PANEL_A_BYTES / 2);
    float *Tw = (float *)(smp + PANEL_N * kp + PANEL_WG * PANEL_ST * (PANEL_A_BYTES / 2)) +
                wg * PANEL_ST * PM_T_FLOATS;
    pinfo *Iw = (pinfo *)((float *)(smp + PANEL_N * kp + PANEL_WG * PANEL_ST *
                                                             (PANEL_A_BYTES / 2)) +
                          PANEL_WG * PANEL_ST * PM_T_FLOATS) +
                wg * 2 * PANEL_BM;

    panel_load_b<false>(p.b, p.ldb, h, h, Bs, kp);

    const int workers = (int)gridDim.x * PANEL_WG, me = (int)blockIdx.x * PANEL_WG + wg;
    const int panels = (E + PANEL_BM - 1) / PANEL_BM;
    const int mine = me < panels ? (panels - me + workers - 1) / workers : 0;
    const int Q = mine * S;
    /* the pinfo of this warpgroup's panel j into buffer j % 2 */
    auto load_info = [&](int j) {
        if (t < PANEL_BM) {
            const int64_t pos = (int64_t)(me + j * workers) * PANEL_BM + t;
            cp_async<8>(Iw + (j & 1) * PANEL_BM + t, pos < E ? info + pos : info, pos < E);
        }
    };
    /* stage q: the rows of panel q / S at columns (q % S) * PANEL_BK, and
     * T's beside them; at a panel's stage 3 the next panel's pinfo, into
     * the buffer the panel before this one is done with (S >= 6: the host
     * checks) */
    auto load = [&](int q) {
        const int j = q / S, s = q % S, P = me + j * workers, k0 = s * PANEL_BK;
        const int64_t p0 = (int64_t)P * PANEL_BM;
        bf16 *As = Aw + (q % PANEL_ST) * (PANEL_A_BYTES / 2);
        const pinfo *I = Iw + (j & 1) * PANEL_BM;
        for (int e = t; e < PANEL_BM * PANEL_BK / 4; e += 128) {
            const int r = e / (PANEL_BK / 4), c = (e % (PANEL_BK / 4)) * 4;
            const int ok = p0 + r < E && k0 + c < h;
            cp_async<8>(As + core_at(r, c, PANEL_BK / 8),
                        ok ? p.a + (size_t)I[r].ie * p.lda + k0 + c : p.a, ok);
        }
        if (t < 2 * PANEL_BK / 4) {
            const int side = t / (PANEL_BK / 4), c = (t % (PANEL_BK / 4)) * 4;
            const int ok = k0 + c < h;
            cp_async<16>(Tw + (q % PANEL_ST) * PM_T_FLOATS + side * PANEL_BK + c,
                         ok ? T + (size_t)(P + side) * h + k0 + c : T, ok);
        }
        if (s == 3 && j + 1 < mine)
            load_info(j + 1);
    };
    if (mine > 0)
        load_info(0);
    cp_commit();
    cp_wait<0>();
    fence_async_smem();
    __syncthreads();   /* B and the first pinfo in */

    const uint32_t b0 = smem_addr(Bs);
    const int warp = t >> 5, lane = t & 31;
    /* stage q's messages over its rows, once they are in */
    auto messages = [&](int q) {
        const int j = q / S, s = q % S, k0 = s * PANEL_BK;
        const int64_t p0 = (int64_t)(me + j * workers) * PANEL_BM;
        bf16 *As = Aw + (q % PANEL_ST) * (PANEL_A_BYTES / 2);
        const float *Ts = Tw + (q % PANEL_ST) * PM_T_FLOATS;
        const pinfo *I = Iw + (j & 1) * PANEL_BM;

        /* the messages: warp w takes rows 16 w .. 16 w + 15, a lane one row
         * of a core matrix and two of its columns, so that a warp's reads
         * of one core matrix meet no bank twice; all read before any write.
         * A row's first PM_NEAR atom rows and its own are loaded together
         * (one wait instead of a chain of them), the rest of a longer run
         * after, in order */
        __nv_bfloat162 msg[2][PANEL_BK / 8];
#pragma unroll
        for (int rb = 0; rb < 2; rb++) {
            const int r = warp * 16 + rb * 8 + (lane >> 2);
            const pinfo f = I[r];
            const int lo = r + f.dlo, hi = r + f.dhi, in = lo >= 0 && hi <= PANEL_BM;
            float2 v[PANEL_BK / 8][PM_NEAR + 1];
#pragma unroll
            for (int co = 0; co < PANEL_BK / 8; co++) {
                const int c = co * 8 + 2 * (lane & 3);
                v[co][PM_NEAR] = ld2(As + core_at(r, c, PANEL_BK / 8));
#pragma unroll
                for (int i = 0; i < PM_NEAR; i++)
                    if (in && lo + i < hi)
                        v[co][i] = ld2(As + core_at(lo + i, c, PANEL_BK / 8));
                if (!in)
                    v[co][0] = *(const float2 *)(Ts + (lo < 0 ? 0 : PANEL_BK) + c);
            }
#pragma unroll
            for (int co = 0; co < PANEL_BK / 8; co++) {
                const int c = co * 8 + 2 * (lane & 3);
                float2 sum = in ? make_float2(0.0f, 0.0f) : v[co][0];
                if (in) {
#pragma unroll
                    for (int i = 0; i < PM_NEAR; i++)
                        if (lo + i < hi) {
                            sum.x += rl<RELU>(v[co][i].x);
                            sum.y += rl<RELU>(v[co][i].y);
                        }
                    for (int x = lo + PM_NEAR; x < hi; x++) {
                        const float2 w = ld2(As + core_at(x, c, PANEL_BK / 8));
                        sum.x += rl<RELU>(w.x);
                        sum.y += rl<RELU>(w.y);
                    }
                }
                msg[rb][co] = __floats2bfloat162_rn(sum.x - rl<RELU>(v[co][PM_NEAR].x),
                                                    sum.y - rl<RELU>(v[co][PM_NEAR].y));
            }
        }
        bar_named(1 + wg, 128);
#pragma unroll
        for (int rb = 0; rb < 2; rb++) {
            const int r = warp * 16 + rb * 8 + (lane >> 2);
            if (p0 + r >= E)
                continue;
#pragma unroll
            for (int co = 0; co < PANEL_BK / 8; co++) {
                const int c = co * 8 + 2 * (lane & 3);
                if (k0 + c >= h)
                    continue;
                *(__nv_bfloat162 *)(As + core_at(r, c, PANEL_BK / 8)) = msg[rb][co];
                if (msg_out)   /* a training forward's, for the backward */
                    *(__nv_bfloat162 *)(msg_out + (size_t)(I[r].ie ^ 1) * h + k0 + c) =
                        msg[rb][co];
            }
        }
        fence_async_smem();
        bar_named(1 + wg, 128);   /* the messages in, for the async proxy */

    };
    float acc[2][76];
    auto epilogue = [&](int q) {
        const int64_t p0 = (int64_t)(me + (q / S) * workers) * PANEL_BM;
        const pinfo *I = Iw + ((q / S) & 1) * PANEL_BM;
        panel_epilogue<bf16, EPI_RES_RELU>(
            p, acc, [&](int r) { return p0 + r < E ? (int)(I[r].ie ^ 1) : -1; });
    };
    if (!OVL) {
        panel_pipeline(Q, wg, load, [&](int q) {
            messages(q);
            panel_stage(acc, smem_addr(Aw + (q % PANEL_ST) * (PANEL_A_BYTES / 2)), b0, q % S,
                        KC);
            if (q % S == S - 1)
                epilogue(q);
        });
    } else {
        /* stage q's products run while the threads make stage q + 1's
         * messages: loads two stages ahead of the messages, into the buffer
         * of the stage whose products ended last */
        auto next = [&](int q) {   /* stage q in, and its messages made */
            cp_wait<1>();
            fence_async_smem();
            bar_named(1 + wg, 128);
            if (q + PANEL_ST - 2 < Q)
                load(q + PANEL_ST - 2);
            cp_commit();
            messages(q);
        };
        for (int q = 0; q < PANEL_ST - 2; q++) {
            if (q < Q)
                load(q);
            cp_commit();
        }
        if (Q > 0)
            next(0);
        for (int q = 0; q < Q; q++) {
            panel_stage_issue(acc, smem_addr(Aw + (q % PANEL_ST) * (PANEL_A_BYTES / 2)), b0,
                              q % S, KC);
            if (q + 1 < Q)
                next(q + 1);
            panel_stage_wait(acc);
            if (q % S == S - 1)
                epilogue(q);
        }
        cp_wait<0>();
    }
#endif
}

/* The panels' form of message_update: 1 when queued, 0 when these shapes,
 * storage types or this device are not the panels' (message and
 * gemm_res_relu then run, as they would have run on the panels or not). */
static int cu_message_update_panels(mp_backend *b, void *out, const void *r, mp_stype rc_st, void *s,
                                const int32_t *in_start, const int32_t *in_edge,
                                const int32_t *edge_src, const void *m, mp_stype m_st,
                                int relu_in, const void *w, mp_stype w_st, int32_t n_atoms,
                                int32_t n_edges, int h, void *msg)
{
    gpu_ctx *c = CTX(b);
    const int S = (h + PANEL_BK - 1) / PANEL_BK;
    if (!c->tiles || !c->wgmma || rc_st != MP_ST_BF16 || m_st != MP_ST_BF16 ||
        w_st != MP_ST_BF16 || n_edges < PANEL_MIN_ROWS || h <= PANEL_NH || h > PANEL_N ||
        h % 4 || S < 6 || n_atoms <= 0 || !al8(out) || !al8(r) || !al8(m) || !al8(w) ||
        !al16(s) || !al8(msg))
        return 0;
    /* the scratch (n_atoms x h floats) holds pinfo for every position, then T */
    const int64_t panels = ((int64_t)n_edges + PANEL_BM - 1) / PANEL_BM;
    const size_t info_bytes = ((size_t)n_edges * sizeof(pinfo) + 15) / 16 * 16;
    if (info_bytes + (size_t)(panels + 1) * h * 4 > (size_t)n_atoms * h * 4)
        return 0;
    if (!usable(c))
        return 1;
    pinfo *info = (pinfo *)s;
    float *T = (float *)((char *)s + info_bytes);
    const int atom_blocks = (n_atoms + THREADS - 1) / THREADS;
    const int bound_blocks = (int)((panels - 1 + THREADS / 32 - 1) / (THREADS / 32));
    if (relu_in)
        launch(c, c->stream, k_panel_prep<true>, atom_blocks + bound_blocks, THREADS, 0, info, T,
               in_start, in_edge, edge_src, (const bf16 *)m, n_atoms, n_edges, h, atom_blocks);
    else
        launch(c, c->stream, k_panel_prep<false>, atom_blocks + bound_blocks, THREADS, 0, info,
               T, in_start, in_edge, edge_src, (const bf16 *)m, n_atoms, n_edges, h,
               atom_blocks);
    LAUNCHED(c, "k_panel_prep");
    const tile_args p = { (const bf16 *)m, (const bf16 *)w, out, r, h, h, h, h, n_edges, h, h,
                          0.f };
    const int pairs = (int)((panels + PANEL_WG - 1) / PANEL_WG);
    int grid = c->sm_target > 0 ? c->sm_target : c->sm_count;
    if (grid > pairs)
        grid = pairs;
    const size_t bytes = PM_SMEM((size_t)S * PANEL_BK);
    /* MOLPROP_CUDA_PANEL_OVERLAP=0: a stage's messages, then its products
     * (an experiment's switch) */
    const char *ov = getenv("MOLPROP_CUDA_PANEL_OVERLAP");
    const int ovl = !(ov && !strcmp(ov, "0"));
    void (*k)(tile_args, const pinfo *, const float *, bf16 *) =
        relu_in ? (ovl ? k_panel_message<true, true> : k_panel_message<true, false>)
                : (ovl ? k_panel_message<false, true> : k_panel_message<false, false>);
    /* the opt-in past 48 KiB (per device: at every launch, as the panels) */
    if (!cuda_ok(c, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)PM_SMEM(PANEL_KMAX)),
                 "k_panel_message shared memory", __FILE__, __LINE__))
        return 1;
    launch_dep(c, 0, c->stream, k, grid, PANEL_NT, bytes, p, (const pinfo *)info,
               (const float *)T, (bf16 *)msg);
    LAUNCHED(c, "k_panel_message");
    c->panel_msg_calls++;
    return 1;
}

/* Shared memory past the default 48 KB, asked for once per kernel form at
 * open (not a stream operation, so never inside a capture). */
template <typename TM, typename TR>
static void allow_smem(gpu_ctx *c)
{
    CUDA_OK(c, cudaFuncSetAttribute(k_message_update<TM, TR, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM_BYTES));
    CUDA_OK(c, cudaFuncSetAttribute(k_message_update<TM, TR, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, FM_SMEM_BYTES));
}

void mp_cu_fused_ops(mp_backend *b)
{
    gpu_ctx *c = CTX(b);
    allow_smem<bf16, bf16>(c);
    allow_smem<bf16, float>(c);
    allow_smem<float, bf16>(c);
    allow_smem<float, float>(c);
    /* Off by default: message + gemm_res_relu make the faster inference
     * forward.  MOLPROP_CUDA_MESSAGE_UPDATE=2 takes the panels' form (where
     * the panels run: sm_90, 40,000 edges or more; forward and training;
     * its first form was correct and 1.4 times as slow as the pair on an
     * H100, 2026-12-08, and this one has not run on a GPU:
     * bench/RESULTS.md), =1 the mma.sync form above (inference only; 2.42M
     * against 2.78M mol/s at batch 4,096, an H100, 2026-12-07). */
    const char *mu = getenv("MOLPROP_CUDA_MESSAGE_UPDATE");
    b->message_update = !mu          ? NULL
                        : !strcmp(mu, "2") ? cu_message_update_panels
                        : !strcmp(mu, "1") ? cu_message_update
                                           : NULL;
}
