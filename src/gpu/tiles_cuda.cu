/*
 * tiles_cuda.cu - bf16 products of ours for small batches (ops.h gemm and
 * gemm_res_relu, when both operands are bf16): a tiled mma.sync kernel
 * with small tiles, so that a product of a few thousand rows spreads over
 * every SM with several warps each.
 *
 * At Chemprop's batch of 50 the D-MPNN's products are 2,500 x 300 x 300;
 * cuBLAS runs them as sm80 kernels of 128 x 64 tiles, about 100 blocks of
 * 4 warps, and takes 10-16 us each (bench/RESULTS.md).  This kernel takes
 * 32 x 64 outputs per block (4 warps of 16 x 32), brings 64 columns of k
 * per stage into shared memory by cp.async, 3 stages in flight, 8-byte
 * copies (rows of 300 bf16 are 8-byte aligned only), and multiplies with
 * mma.sync m16n8k16 (bf16 operands, fp32 sums).  Larger products take 64 x
 * 64 tiles (4 warps of 32 x 32, 32 columns per stage, 4 stages); past
 * TILE_MAX_ROWS rows cuBLAS's sm90 kernels are faster and run instead, up
 * to PANEL_MIN_ROWS; from there on, on an sm_90 device, products with n and
 * k of about 300 (the D-MPNN's E x h x h at batch sizes of 700 and more)
 * run as panels (below): B whole in shared memory, wgmma.  Products with n
 * or k past TILE_MAX_NK (wide models) stay on cuBLAS at every m.
 * MOLPROP_CUDA_TILES=0 at open leaves every product to cuBLAS (for
 * comparisons), =1 gives the tiles every product they can take.
 *
 * Forms: C = A B and C = A B^T (the forward products and the input
 * gradients).  Epilogues: C = acc + beta C (beta 0 or 1), or C = ReLU(R +
 * acc) (gemm_res_relu).  Each output element is one fixed sum in k order:
 * within the tiles' range of m (and within the panels') a row's result does
 * not depend on the batch around it, nor on set_share's target.  The tiles,
 * cuBLAS between them and the panels differ in the last bits.
 *
 * The weight gradients (C = A^T B, k the rows of the batch) stay on
 * cuBLAS: this kernel split over k, with the partial sums added by the
 * last block of each tile, took 19.5-21 us at batch 50 against cuBLAS's 14
 * (bench/RESULTS.md).
 */
#include "gpu/panel.cuh"

/* Past this many rows of C cuBLAS is faster: at 10,000 (batch 200) its sm90
 * kernels took 19 us for E x 300 x 300, these 30 (bench/RESULTS.md). */
#define TILE_MAX_ROWS 6144
/* Under set_share (members side by side), at most this many blocks per SM
 * of the share: five members at batch 50 took 537 us a round with 4, 567
 * with 2, 549 with a block per tile (bench/RESULTS.md). */
#define TILE_SHARED_BLOCKS_PER_SM 4
/* Past this n or k cuBLAS's sm90 kernels take the products of every batch:
 * the tiles were made for n = k = 300 (W_o's k of 433 included).  At batch
 * 50, depth 6, the step on an H100 went 595 -> 366 us at hidden 600, 1,435
 * -> 673 at 1,200 and 4,540 -> 1,598 at 2,400 (the W_h product 318 -> 49
 * us), hidden sizes that hpopt proposes (bench/RESULTS.md). */
#define TILE_MAX_NK 512

template <int BM_, int BN_, int BK_, int WM_, int WN_, int ST_> struct tile_cfg {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, ST = ST_;
    static constexpr int NT = (BM / WM) * (BN / WN) * 32;
};
typedef tile_cfg<32, 64, 64, 16, 32, 3> cfg_small;   /* up to 4,096 rows */
typedef tile_cfg<64, 64, 32, 32, 32, 4> cfg_mid;     /* up to TILE_MAX_ROWS */

/* The epilogue of one pair of outputs (row, col), col even. */
template <typename TC, int EPI>
__device__ __forceinline__ void put2(const tile_args &p, int row, int col, float2 v)
{
    TC *c = (TC *)p.c + (size_t)row * p.ldc + col;
    if (EPI == EPI_RES_RELU) {
        float2 r = ld2((const TC *)p.r + (size_t)row * p.ldr + col);
        v.x = fmaxf(v.x + r.x, 0.f);
        v.y = fmaxf(v.y + r.y, 0.f);
    } else if (p.beta != 0.f) {
        float2 o = ld2(c);
        v.x += p.beta * o.x;
        v.y += p.beta * o.y;
    }
    st2(c, v.x, v.y);
}

/*
 * One BM x BN tile of C = A op(B).  Shared tiles: A as [BM][BK + 8], B as
 * [BK][BN + 8] (TB = 0, transposed by ldmatrix into the mma's column
 * layout) or [BN][BK + 8] (TB = 1): rows 16 bytes apart modulo 128, so
 * ldmatrix meets no bank conflicts.
 */
template <class CFG, bool TB> struct tile_smem {
    static constexpr int AS = CFG::BK + 8, BS = TB ? CFG::BK + 8 : CFG::BN + 8;
    static constexpr int A_EL = CFG::BM * AS, B_EL = TB ? CFG::BN * BS : CFG::BK * BS;
    static constexpr int ELEMS = CFG::ST * (A_EL + B_EL);
};

template <class CFG, bool TB, typename TC, int EPI>
__device__ __forceinline__ void tile(const tile_args &p, int m0, int n0, bf16 *sm)
{
    constexpr int BM = CFG::BM, BN = CFG::BN, BK = CFG::BK, WM = CFG::WM, WN = CFG::WN;
    constexpr int ST = CFG::ST, NT = CFG::NT, MI = WM / 16, NI = WN / 8;
    typedef tile_smem<CFG, TB> L;
    constexpr int AS = L::AS, BS = L::BS, A_EL = L::A_EL, B_EL = L::B_EL;
    const int kend = p.k;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp % (BM / WM), wn = warp / (BM / WM);
    const bf16 *a = p.a, *b = p.b;

    /* one stage: 4-element groups, zeros past the edges of the operands */
    auto load = [&](int s, int k0) {
        bf16 *As = sm + s * (A_EL + B_EL), *Bs = As + A_EL;
        for (int q = threadIdx.x; q < BM * BK / 4; q += NT) {
            const int r = q / (BK / 4), cc = (q % (BK / 4)) * 4;
            const int ok = m0 + r < p.m && k0 + cc < kend;
            cp_async<8>(As + r * AS + cc, ok ? a + (size_t)(m0 + r) * p.lda + k0 + cc : a, ok);
        }
        if (TB) {
            for (int q = threadIdx.x; q < BN * BK / 4; q += NT) {
                const int r = q / (BK / 4), cc = (q % (BK / 4)) * 4;
                const int ok = n0 + r < p.n && k0 + cc < kend;
                cp_async<8>(Bs + r * BS + cc, ok ? b + (size_t)(n0 + r) * p.ldb + k0 + cc : b, ok);
            }
        } else {
            for (int q = threadIdx.x; q < BK * BN / 4; q += NT) {
                const int r = q / (BN / 4), cc = (q % (BN / 4)) * 4;
                const int ok = k0 + r < kend && n0 + cc < p.n;
                cp_async<8>(Bs + r * BS + cc, ok ? b + (size_t)(k0 + r) * p.ldb + n0 + cc : b, ok);
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[i][j][q] = 0.f;

    /* ST - 1 stages in flight before the first product, one commit group
     * per stage (empty ones too), so cp_wait<ST - 2> means "stage s is in" */
    const int stages = (kend + BK - 1) / BK;
    for (int s = 0; s < ST - 1; s++) {
        if (s < stages)
            load(s, s * BK);
        cp_commit();
    }
    for (int s = 0; s < stages; s++) {
        cp_wait<ST - 2>();
        __syncthreads();   /* stage s in for all; stage s - 1's reads done */
        if (s + ST - 1 < stages)
            load((s + ST - 1) % ST, (s + ST - 1) * BK);
        cp_commit();
        const bf16 *As = sm + (s % ST) * (A_EL + B_EL), *Bs = As + A_EL;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t af[MI][4];
#pragma unroll
            for (int i = 0; i < MI; i++)
                ldm_x4(af[i], As + (wm * WM + i * 16 + (lane & 15)) * AS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int c0 = wn * WN + j * 8;
                uint32_t bfr[4];
                if (TB)
                    ldm_x4(bfr, Bs + (c0 + (lane >> 4) * 8 + (lane & 7)) * BS + kk +
                                    ((lane >> 3) & 1) * 8);
                else
                    ldm_x4_t(bfr, Bs + (kk + (lane & 15)) * BS + c0 + (lane >> 4) * 8);
#pragma unroll
                for (int i = 0; i < MI; i++) {
                    mma16816(acc[i][j], af[i], bfr[0], bfr[1]);
                    mma16816(acc[i][j + 1], af[i], bfr[2], bfr[3]);
                }
            }
        }
    }

    /* thread (g = lane / 4, t = lane % 4) holds rows g, g + 8 of each
     * 16 x 8 tile, columns 2t, 2t + 1 */
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int row = m0 + wm * WM + i * 16 + g + hf * 8;
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const int col = n0 + wn * WN + j * 8 + 2 * t;
                if (row < p.m && col < p.n)
                    put2<TC, EPI>(p, row, col,
                                  make_float2(acc[i][j][2 * hf], acc[i][j][2 * hf + 1]));
            }
        }
    cp_wait<0>();   /* the trailing (empty) groups, before the next tile */
}

/* The tiles of C, block by block: one tile per block, or (under set_share,
 * a smaller grid) several in turn; a tile's sums do not depend on which
 * block makes it, so the grid never changes the bits. */
template <class CFG, bool TB, typename TC, int EPI>
__global__ void __launch_bounds__(CFG::NT) k_tile_gemm(tile_args p)
{
    pdl_enter();
    __shared__ __align__(16) bf16 sm[tile_smem<CFG, TB>::ELEMS];
    const int tx = (p.m + CFG::BM - 1) / CFG::BM, tiles = tx * ((p.n + CFG::BN - 1) / CFG::BN);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        if (t != (int)blockIdx.x)
            __syncthreads();   /* the last tile's reads of sm are done */
        tile<CFG, TB, TC, EPI>(p, (t % tx) * CFG::BM, (t / tx) * CFG::BN, sm);
    }
}

template <bool TB, typename TC, int EPI>
__global__ void __launch_bounds__(PANEL_NT, 1) k_panel_gemm(tile_args p)
{
    pdl_enter();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) bf16 smp[];
    const int S = (p.k + PANEL_BK - 1) / PANEL_BK, kp = S * PANEL_BK, KC = kp / 8;
    bf16 *Bs = smp;                                  /* B^T: PANEL_N x kp, K-major */
    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    bf16 *Aw = smp + PANEL_N * kp + wg * PANEL_ST * (PANEL_A_BYTES / 2);

    panel_load_b<TB>(p.b, p.ldb, p.n, p.k, Bs, kp);
    fence_async_smem();
    __syncthreads();

    const int workers = (int)gridDim.x * PANEL_WG, me = (int)blockIdx.x * PANEL_WG + wg;
    const int panels = (p.m + PANEL_BM - 1) / PANEL_BM;
    const int mine = me < panels ? (panels - me + workers - 1) / workers : 0;
    const int Q = mine * S;                          /* (panel, stage) pairs of this warpgroup */
    auto load = [&](int q) {
        bf16 *As = Aw + (q % PANEL_ST) * (PANEL_A_BYTES / 2);
        const int m0 = (me + (q / S) * workers) * PANEL_BM, k0 = (q % S) * PANEL_BK;
        for (int e = t; e < PANEL_BM * PANEL_BK / 4; e += 128) {
            const int r = e / (PANEL_BK / 4), c = (e % (PANEL_BK / 4)) * 4;
            const int ok = m0 + r < p.m && k0 + c < p.k;
            cp_async<8>(As + core_at(r, c, PANEL_BK / 8),
                        ok ? p.a + (size_t)(m0 + r) * p.lda + k0 + c : p.a, ok);
        }
    };
    const uint32_t b0 = smem_addr(Bs);
    float acc[2][76];
    panel_pipeline(Q, wg, load, [&](int q) {
        const int s = q % S;
        panel_stage(acc, smem_addr(Aw + (q % PANEL_ST) * (PANEL_A_BYTES / 2)), b0, s, KC);
        if (s != S - 1)
            return;
        const int m0 = (me + (q / S) * workers) * PANEL_BM;
        panel_epilogue<TC, EPI>(p, acc, [&](int r) { return m0 + r < p.m ? m0 + r : -1; });
    });
#endif
}

template <bool TB, typename TC, int EPI>
static void launch_panel(gpu_ctx *c, int lane, const tile_args &p)
{
    const int kp = (p.k + PANEL_BK - 1) / PANEL_BK * PANEL_BK;
    const size_t bytes = (size_t)PANEL_N * kp * 2 + PANEL_WG * PANEL_ST * PANEL_A_BYTES;
    /* the opt-in past 48 KiB (per device: at every launch) */
    if (!cuda_ok(c, cudaFuncSetAttribute(k_panel_gemm<TB, TC, EPI>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         PANEL_SMEM_MAX),
                 "k_panel_gemm shared memory", __FILE__, __LINE__))
        return;
    const int pairs = ((p.m + PANEL_BM - 1) / PANEL_BM + PANEL_WG - 1) / PANEL_WG;
    int grid = c->sm_target > 0 ? c->sm_target : c->sm_count;
    if (grid > pairs)
        grid = pairs;
    /* plainly, but under MOLPROP_CUDA_PDL=2: a panel's blocks each take
     * a whole SM's shared memory (cuda_ctx.cuh, launch_dep) */
    launch_dep(c, 0, c->lane_stream[lane], k_panel_gemm<TB, TC, EPI>, grid, PANEL_NT, bytes, p);
    LAUNCHED(c, "k_panel_gemm");
    c->tile_calls++;
}

static int al4(const void *p) { return ((uintptr_t)p & 3) == 0; }
static int al8(const void *p) { return ((uintptr_t)p & 7) == 0; }

template <class CFG, bool TB, typename TC, int EPI>
static void launch(gpu_ctx *c, int lane, const tile_args &p)
{
    int grid = ((p.m + CFG::BM - 1) / CFG::BM) * ((p.n + CFG::BN - 1) / CFG::BN);
    /* set_share: a grid for the SMs the backend is sized for */
    if (c->sm_target > 0 && grid > TILE_SHARED_BLOCKS_PER_SM * c->sm_target)
        grid = TILE_SHARED_BLOCKS_PER_SM * c->sm_target;
    launch(c, c->lane_stream[lane], k_tile_gemm<CFG, TB, TC, EPI>, grid, CFG::NT, 0, p);
    LAUNCHED(c, "k_tile_gemm");
    c->tile_calls++;
}

template <bool TB, typename TC, int EPI>
static void launch_cfg(gpu_ctx *c, int lane, const tile_args &p)
{
    if (p.m <= 4096)
        launch<cfg_small, TB, TC, EPI>(c, lane, p);
    else if (p.m <= TILE_MAX_ROWS)
        launch<cfg_mid, TB, TC, EPI>(c, lane, p);
    else
        launch_panel<TB, TC, EPI>(c, lane, p);
}

/* Whether the tiles take a product of these sizes and operands (bf16 A
 * and B checked by the callers): A not transposed, few rows, 4-element
 * groups (A's along k, B's along n or k) aligned to 8 bytes, pairs of C
 * aligned.  An instance sharing the GPU with two or more others (set_share
 * n > 2: an ensemble's members side by side) leaves the products of up to
 * TILE_MAX_ROWS rows to cuBLAS unless MOLPROP_CUDA_TILES=1: the tiles'
 * hundreds of small blocks a product crowd the other members' kernels,
 * where cuBLAS's 100-160 larger ones do not (five members at batch 50
 * trained 7% faster on cuBLAS, bench/RESULTS.md). */
static int takes(const gpu_ctx *c, int ta, int tb, int m, int n, int k, const void *a, int lda,
                 const void *b, int ldb, const void *cm, int ldc, mp_stype c_st)
{
    if (!c->tiles || ta || m <= 0 || n <= 0 || k <= 0)
        return 0;
    if (c->tiles == 1 && ((c->share > 2 && m <= TILE_MAX_ROWS) || n > TILE_MAX_NK ||
                          k > TILE_MAX_NK))
        return 0;
    /* past TILE_MAX_ROWS only the panels: sm_90, PANEL_MIN_ROWS rows or
     * more, n in (PANEL_NH, PANEL_N] (a smaller n would leave half of each
     * panel idle), k <= PANEL_KMAX */
    if (m > TILE_MAX_ROWS && (!c->wgmma || m < PANEL_MIN_ROWS || n > PANEL_N ||
                              n <= PANEL_NH || k > PANEL_KMAX))
        return 0;
    if (k % 4 || (!tb && n % 4) || n % 2 || lda % 4 || ldb % 4 || ldc % 2)
        return 0;
    return al8(a) && al8(b) && (c_st == MP_ST_BF16 ? al4(cm) : al8(cm));
}

int mp_cu_tile_gemm(gpu_ctx *c, int lane, const mp_gemm *g)
{
    if (g->a_st != MP_ST_BF16 || g->b_st != MP_ST_BF16 || g->alpha != 1.0 ||
        (g->beta != 0.0 && g->beta != 1.0) ||
        !takes(c, g->ta, g->tb, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->c, g->ldc,
               g->c_st))
        return 0;
    const tile_args p = { (const bf16 *)g->a, (const bf16 *)g->b, g->c, NULL, g->lda, g->ldb,
                          g->ldc, 0, g->m, g->n, g->k, (float)g->beta };
    WITH_T(g->c_st, TC, {
        if (g->tb)
            launch_cfg<true, TC, EPI_BETA>(c, lane, p);
        else
            launch_cfg<false, TC, EPI_BETA>(c, lane, p);
    });
    return 1;
}

int mp_cu_tile_res_relu(gpu_ctx *c, int m, int n, int k, const void *a, int lda, const void *w,
                        int ldw, mp_stype aw_st, const void *r, int ldr, void *cm, int ldc,
                        mp_stype rc_st)
{
    if (aw_st != MP_ST_BF16 || ldr % 2 || !(rc_st == MP_ST_BF16 ? al4(r) : al8(r)) ||
        !takes(c, 0, 0, m, n, k, a, lda, w, ldw, cm, ldc, rc_st))
        return 0;
    const tile_args p = { (const bf16 *)a, (const bf16 *)w, cm, r, lda, ldw, ldc, ldr, m, n, k,
                          0.f };
    WITH_T(rc_st, TC, launch_cfg<false, TC, EPI_RES_RELU>(c, 0, p));
    return 1;
}
