/*
 * ops_cpu.c - the cpu backend: the ops of ops.h over float host buffers,
 * with OpenBLAS for the dense products and OpenMP for everything else.
 *
 * Threads and determinism.  The result of every op is bitwise the same for
 * any thread count, by construction:
 *   - row ops (gathers, CSR segment sums, pooling, elementwise) give each
 *     output row or element one writer that sums in a fixed order;
 *   - scatters into weight rows (the backward of the one-hot gathers) and the
 *     bias column sums split the *columns* among threads, so each output
 *     element is still summed over the rows in the same order;
 *   - gemm: OpenBLAS runs single-threaded inside our OpenMP threads, on row
 *     blocks of C whose size depends only on the problem shape, never on the
 *     thread count (each block is one deterministic sgemm call).  So there is
 *     one thread pool (ours), not two fighting over the cores.
 *
 * OpenBLAS core type.  Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not know
 * recent Xeons (e.g. family 6 model 207) and falls back to its "Prescott" SSE3
 * kernels: 5x slower sgemm on an AVX-512 machine.  When the user has not set
 * OPENBLAS_CORETYPE and OpenBLAS picked such a generic fallback although the
 * CPU supports AVX-512 (or AVX2+FMA), we re-run OpenBLAS's own dynamic core
 * selection with OPENBLAS_CORETYPE=SkylakeX (or Haswell), through the entry
 * points gotoblas_dynamic_quit/_init that its DYNAMIC_ARCH builds export
 * (looked up with dlsym, so a build without them simply keeps its choice).
 */
#include "models/ops.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements an op runs on one thread: a parallel region costs
 * a few microseconds, which is what ~16k float adds cost. */
#define PAR_MIN 16384

static int threads_for(size_t work)
{
    if (work < PAR_MIN)
        return 1;
    int nt = mp_threads_get();
    return nt > 0 ? nt : 1;
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int thread_count(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* Columns [*c0, *c1) of h for this thread, in chunks of 16 floats (one
 * AVX-512 vector) so threads do not share cache lines. */
static void my_columns(int h, int *c0, int *c1)
{
    int nt = thread_count(), t = thread_id();
    int per = ((h + nt - 1) / nt + 15) & ~15;
    int a = t * per, z = a + per;
    *c0 = a < h ? a : h;
    *c1 = z < h ? z : h;
}

/* ===================================================================== */
/* OpenBLAS set-up                                                        */
/* ===================================================================== */

static char blas_info[160];

static int core_is_generic(const char *core, int avx512)
{
    static const char *const generic[] = {
        "prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge",
        "atom", "nano", "katmai", "coppermine", "northwood", "banias", NULL
    };
    for (int i = 0; generic[i]; i++)
        if (strcasecmp(core, generic[i]) == 0)
            return 1;
    return avx512 && strcasecmp(core, "haswell") == 0;
}

static void blas_setup(void)
{
    openblas_set_num_threads(1);
    const char *core = openblas_get_corename();
    char before[32];
    snprintf(before, sizeof before, "%s", core ? core : "?");
    snprintf(blas_info, sizeof blas_info, "OpenBLAS core %s", before);
    if (getenv("OPENBLAS_CORETYPE") || !core)
        return;
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *want = avx512 ? "SkylakeX" : avx2 ? "Haswell" : NULL;
    const char *table = avx512 ? "gotoblas_SKYLAKEX" : "gotoblas_HASWELL";
    if (!want || !core_is_generic(core, avx512))
        return;
    void (*dyn_quit)(void), (*dyn_init)(void);
    *(void **)&dyn_quit = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    *(void **)&dyn_init = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    if (!dyn_quit || !dyn_init || !dlsym(RTLD_DEFAULT, table))
        return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    dyn_quit();
    dyn_init();
    unsetenv("OPENBLAS_CORETYPE");
    openblas_set_num_threads(1);
    core = openblas_get_corename();
    snprintf(blas_info, sizeof blas_info, "OpenBLAS core %s (OpenBLAS chose %s for this CPU)",
             core ? core : "?", before);
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

const char *mp_backend_cpu_info(void)
{
    pthread_once(&blas_once, blas_setup);
    return blas_info;
}

/* ===================================================================== */
/* Memory                                                                 */
/* ===================================================================== */

static void *cpu_alloc(mp_backend *b, size_t bytes)
{
    /* 64-byte aligned: whole cache lines and AVX-512 vectors per row start. */
    void *p = NULL;
    size_t n = (bytes + 63) & ~(size_t)63;
    p = mp_malloc(n + 64);
    if (!p)
        return NULL;
    uintptr_t a = ((uintptr_t)p + 64) & ~(uintptr_t)63;
    ((void **)a)[-1] = p;
    return (void *)a;
}

static void cpu_free(mp_backend *b, void *p)
{
    if (p)
        mp_free(((void **)p)[-1]);
}

static mp_status cpu_upload(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return MP_OK;
}

static mp_status cpu_download(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return MP_OK;
}

static void cpu_zero(mp_backend *b, void *dst, size_t bytes)
{
    if (bytes)
        memset(dst, 0, bytes);
}

static void cpu_copy(mp_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src)
        return;
    int nt = threads_for(bytes / sizeof(float));
    if (nt == 1) {
        memmove(dst, src, bytes);
        return;
    }
    /* Large copies are activations, which never overlap. */
    size_t chunk = (size_t)1 << 16, nchunk = (bytes + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t q = 0; q < nchunk; q++) {
        size_t a = q * chunk;
        memcpy((char *)dst + a, (const char *)src + a, a + chunk < bytes ? chunk : bytes - a);
    }
}

static mp_status cpu_sync(mp_backend *b) { return MP_OK; }

/* ===================================================================== */
/* Dense                                                                  */
/* ===================================================================== */

/* Rows of C per block: a function of the shape only (never of the thread
 * count), so the set of sgemm calls, hence every bit of C, is fixed.  About
 * 16M multiply-adds per block, at most 8 blocks, rows a multiple of 16. */
static int gemm_block_rows(int m, int n, int k)
{
    double work = (double)m * n * k;
    int nblk = 1;
    while (nblk < 8 && work / (2.0 * nblk) >= 16e6)
        nblk *= 2;
    int rows = ((m + nblk - 1) / nblk + 15) & ~15;
    return rows < 16 ? 16 : rows;
}

static void cpu_gemm(mp_backend *b, int ta, int tb, int m, int n, int k, double alpha,
                     const void *av, int lda, const void *bv, int ldb, double beta,
                     void *cv, int ldc)
{
    const float *a = av, *bm = bv;
    float *c = cv;
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0 ? 0.0f : (float)beta * c[(size_t)i * ldc + j];
        return;
    }
    int rows = gemm_block_rows(m, n, k);
    int nblk = (m + rows - 1) / rows;
    int nt = mp_threads_get();
    if (nt > nblk)
        nt = nblk;
    if (nt < 1)
        nt = 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int q = 0; q < nblk; q++) {
        int r0 = q * rows, r = m - r0 < rows ? m - r0 : rows;
        const float *ap = ta ? a + r0 : a + (size_t)r0 * lda;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                    tb ? CblasTrans : CblasNoTrans, r, n, k, (float)alpha, ap, lda,
                    bm, ldb, (float)beta, c + (size_t)r0 * ldc, ldc);
    }
}

static void cpu_fill_rows(mp_backend *b, void *yv, int ldy, const void *rowv,
                          int32_t n_rows, int n_cols)
{
    float *y = yv;
    const float *row = rowv;
    int nt = threads_for((size_t)n_rows * n_cols);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t i = 0; i < n_rows; i++)
        memcpy(y + (size_t)i * ldy, row, (size_t)n_cols * sizeof(float));
}

static void cpu_col_sum(mp_backend *b, void *dstv, const void *xv, int ldx,
                        int32_t n_rows, int n_cols)
{
    float *dst = dstv;
    const float *x = xv;
    int nt = threads_for((size_t)n_rows * n_cols);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int c0, c1;
        my_columns(n_cols, &c0, &c1);
        for (int32_t i = 0; i < n_rows; i++) {
            const float *xr = x + (size_t)i * ldx;
            for (int j = c0; j < c1; j++)
                dst[j] += xr[j];
        }
    }
}

static void cpu_copy2d(mp_backend *b, void *dstv, int ldd, const void *srcv, int lds,
                       int32_t n_rows, int n_cols)
{
    float *dst = dstv;
    const float *src = srcv;
    for (int32_t i = 0; i < n_rows; i++)
        memcpy(dst + (size_t)i * ldd, src + (size_t)i * lds, (size_t)n_cols * sizeof(float));
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static void cpu_add(mp_backend *b, void *yv, const void *xv, size_t n)
{
    float *restrict y = yv;
    const float *restrict x = xv;
    int nt = threads_for(n);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void cpu_relu_dropout(mp_backend *b, void *yv, const void *xv, size_t n,
                             double p, uint64_t key)
{
    float *y = yv;
    const float *x = xv;
    uint32_t thr = mp_dropout_threshold(p);
    int nt = threads_for(n);
    if (!thr) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (nt > 1)
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] > 0 ? x[i] : 0.0f;
        return;
    }
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++) {
        float v = x[i] > 0 ? x[i] : 0.0f;
        y[i] = mp_dropout_keep(key, i, thr) ? v * scale : 0.0f;
    }
}

static void cpu_relu_dropout_backward(mp_backend *b, void *dxv, const void *yv,
                                      const void *dyv, size_t n, double p)
{
    float *dx = dxv;
    const float *y = yv, *dy = dyv;
    float scale = p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : 1.0f;
    int nt = threads_for(n);
    if (scale == 1.0f) {
#pragma omp parallel for simd num_threads(nt) schedule(static) if (nt > 1)
        for (size_t i = 0; i < n; i++)
            dx[i] = y[i] > 0 ? dy[i] : 0.0f;
        return;
    }
#pragma omp parallel for simd num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] * scale : 0.0f;
}

static void cpu_dropout(mp_backend *b, void *yv, const void *xv, int32_t n_rows,
                        int n_cols, int ld, double p, uint64_t key)
{
    float *y = yv;
    const float *x = xv;
    uint32_t thr = mp_dropout_threshold(p);
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    int nt = threads_for((size_t)n_rows * n_cols);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t i = 0; i < n_rows; i++)
        for (int j = 0; j < n_cols; j++) {
            size_t k = (size_t)i * ld + j;
            y[k] = mp_dropout_keep(key, k, thr) ? x[k] * scale : 0.0f;
        }
}

static void cpu_dropout_backward(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                 int n_cols, int ld, double p, uint64_t key)
{
    cpu_dropout(b, dx, dy, n_rows, n_cols, ld, p, key);
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

static inline void row_add(float *restrict y, const float *restrict x, int h)
{
    for (int j = 0; j < h; j++)
        y[j] += x[j];
}

static void cpu_atom_embed(mp_backend *b, void *outv, const int16_t *hot, const float *mass,
                           const void *wv, const void *biasv, int32_t n_atoms, int h,
                           int mass_row)
{
    float *out = outv;
    const float *w = wv, *bias = biasv, *wm = w + (size_t)mass_row * h;
    int nt = threads_for((size_t)n_atoms * h * 4);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t v = 0; v < n_atoms; v++) {
        float *restrict o = out + (size_t)v * h;
        if (bias)
            memcpy(o, bias, (size_t)h * sizeof(float));
        else
            memset(o, 0, (size_t)h * sizeof(float));
        const int16_t *hv = hot + (size_t)v * MP_ATOM_MAX_HOT;
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
            if (hv[q] >= 0)
                row_add(o, w + (size_t)hv[q] * h, h);
        float mv = mass[v];
        for (int j = 0; j < h; j++)
            o[j] += mv * wm[j];
    }
}

static void cpu_atom_embed_backward(mp_backend *b, void *dwv, const int16_t *hot,
                                    const float *mass, const void *doutv, int32_t n_atoms,
                                    int h, int mass_row)
{
    float *dw = dwv;
    const float *dout = doutv;
    int nt = threads_for((size_t)n_atoms * h * 4);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int c0, c1;
        my_columns(h, &c0, &c1);
        float *dwm = dw + (size_t)mass_row * h;
        for (int32_t v = 0; v < n_atoms && c0 < c1; v++) {
            const float *g = dout + (size_t)v * h;
            const int16_t *hv = hot + (size_t)v * MP_ATOM_MAX_HOT;
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
                if (hv[q] >= 0)
                    row_add(dw + (size_t)hv[q] * h + c0, g + c0, c1 - c0);
            float mv = mass[v];
            for (int j = c0; j < c1; j++)
                dwm[j] += mv * g[j];
        }
    }
}

static void cpu_edge_embed(mp_backend *b, void *h0v, const int32_t *edge_src,
                           const int8_t *bond_hot, const void *av, const void *wbv,
                           int32_t n_edges, int h)
{
    float *h0 = h0v;
    const float *a = av, *wb = wbv;
    int nt = threads_for((size_t)n_edges * h * 2);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t e = 0; e < n_edges; e++) {
        float *o = h0 + (size_t)e * h;
        memcpy(o, a + (size_t)edge_src[e] * h, (size_t)h * sizeof(float));
        const int8_t *bh = bond_hot + (size_t)(e >> 1) * MP_BOND_MAX_HOT;
        for (int q = 0; q < MP_BOND_MAX_HOT; q++)
            if (bh[q] >= 0)
                row_add(o, wb + (size_t)bh[q] * h, h);
    }
}

/* out[v] = sum over the CSR segment of v of rows x[in_edge[k] ^ flip]. */
static inline void csr_row_sum(float *restrict o, const int32_t *in_start,
                               const int32_t *in_edge, const float *x, int32_t v,
                               int32_t flip, int h)
{
    int32_t k0 = in_start[v], k1 = in_start[v + 1];
    if (k0 == k1) {
        memset(o, 0, (size_t)h * sizeof(float));
        return;
    }
    memcpy(o, x + (size_t)(in_edge[k0] ^ flip) * h, (size_t)h * sizeof(float));
    for (int32_t k = k0 + 1; k < k1; k++)
        row_add(o, x + (size_t)(in_edge[k] ^ flip) * h, h);
}

static void cpu_edge_embed_backward(mp_backend *b, void *dav, void *dwbv,
                                    const int32_t *in_start, const int32_t *in_edge,
                                    const int8_t *bond_hot, const void *dh0v,
                                    int32_t n_atoms, int32_t n_edges, int h)
{
    float *da = dav, *dwb = dwbv;
    const float *dh0 = dh0v;
    int nt = threads_for((size_t)n_edges * h * 2);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(static) nowait
        for (int32_t v = 0; v < n_atoms; v++)
            csr_row_sum(da + (size_t)v * h, in_start, in_edge, dh0, v, 1, h);
        int c0, c1;
        my_columns(h, &c0, &c1);
        for (int32_t e = 0; e < n_edges && c0 < c1; e++) {
            const int8_t *bh = bond_hot + (size_t)(e >> 1) * MP_BOND_MAX_HOT;
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                if (bh[q] >= 0)
                    row_add(dwb + (size_t)bh[q] * h + c0, dh0 + (size_t)e * h + c0, c1 - c0);
        }
    }
}

static void cpu_atom_sum(mp_backend *b, void *av, const int32_t *in_start,
                         const int32_t *in_edge, const void *mv, int32_t n_atoms, int h)
{
    float *a = av;
    const float *m = mv;
    int nt = threads_for((size_t)n_atoms * h * 2);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t v = 0; v < n_atoms; v++)
        csr_row_sum(a + (size_t)v * h, in_start, in_edge, m, v, 0, h);
}

static void cpu_message(mp_backend *b, void *msgv, void *sv, const int32_t *in_start,
                        const int32_t *in_edge, const int32_t *edge_src, const void *mv,
                        int32_t n_atoms, int32_t n_edges, int h)
{
    float *msg = msgv, *s = sv;
    const float *m = mv;
    int nt = threads_for((size_t)n_edges * h * 2);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(static)
        for (int32_t v = 0; v < n_atoms; v++)
            csr_row_sum(s + (size_t)v * h, in_start, in_edge, m, v, 0, h);
#pragma omp for schedule(static)
        for (int32_t e = 0; e < n_edges; e++) {
            float *restrict o = msg + (size_t)e * h;
            const float *restrict x = s + (size_t)edge_src[e] * h;
            const float *restrict r = m + (size_t)(e ^ 1) * h;
            for (int j = 0; j < h; j++)
                o[j] = x[j] - r[j];
        }
    }
}

static void cpu_message_backward(mp_backend *b, void *dmv, void *dsv, const int32_t *in_start,
                                 const int32_t *in_edge, const int32_t *edge_dst,
                                 const void *dmsgv, int32_t n_atoms, int32_t n_edges, int h)
{
    float *dm = dmv, *ds = dsv;
    const float *dmsg = dmsgv;
    int nt = threads_for((size_t)n_edges * h * 2);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(static)
        for (int32_t v = 0; v < n_atoms; v++)
            csr_row_sum(ds + (size_t)v * h, in_start, in_edge, dmsg, v, 1, h);
#pragma omp for schedule(static)
        for (int32_t e = 0; e < n_edges; e++) {
            float *restrict o = dm + (size_t)e * h;
            const float *restrict x = ds + (size_t)edge_dst[e] * h;
            const float *restrict r = dmsg + (size_t)(e ^ 1) * h;
            for (int j = 0; j < h; j++)
                o[j] = x[j] - r[j];
        }
    }
}

static void cpu_atom_sum_backward(mp_backend *b, void *dmv, const int32_t *edge_dst,
                                  const void *dav, int32_t n_edges, int h)
{
    float *dm = dmv;
    const float *da = dav;
    int nt = threads_for((size_t)n_edges * h);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t e = 0; e < n_edges; e++)
        memcpy(dm + (size_t)e * h, da + (size_t)edge_dst[e] * h, (size_t)h * sizeof(float));
}

static float pool_scale(int32_t n_atoms, mp_aggregation agg, double norm)
{
    if (n_atoms == 0)
        return 0;
    if (agg == MP_AGG_MEAN)
        return 1.0f / (float)n_atoms;
    if (agg == MP_AGG_NORM)
        return (float)(1.0 / norm);
    return 1.0f;
}

static void cpu_pool(mp_backend *b, void *outv, int ldo, const int32_t *mol_atom,
                     const void *xv, int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    float *out = outv;
    const float *x = xv;
    int nt = threads_for((size_t)mol_atom[n_mols] * h);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        float *restrict o = out + (size_t)i * ldo;
        memset(o, 0, (size_t)h * sizeof(float));
        for (int32_t v = a0; v < a1; v++)
            row_add(o, x + (size_t)v * h, h);
        float sc = pool_scale(a1 - a0, agg, norm);
        if (agg == MP_AGG_MEAN && a1 > a0) {
            /* divide, as torch's sum / a_size does, rather than multiply */
            float d = (float)(a1 - a0);
            for (int j = 0; j < h; j++)
                o[j] /= d;
        } else {
            for (int j = 0; j < h; j++)
                o[j] *= sc;
        }
    }
}

static void cpu_pool_backward(mp_backend *b, void *dxv, const int32_t *mol_atom,
                              const void *doutv, int ldo, int32_t n_mols, int h,
                              mp_aggregation agg, double norm)
{
    float *dx = dxv;
    const float *dout = doutv;
    int nt = threads_for((size_t)mol_atom[n_mols] * h);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        const float *g = dout + (size_t)i * ldo;
        if (a1 == a0)
            continue;
        float d = (float)(a1 - a0), sc = pool_scale(a1 - a0, agg, norm);
        float *o = dx + (size_t)a0 * h;
        for (int j = 0; j < h; j++)
            o[j] = agg == MP_AGG_MEAN ? g[j] / d : g[j] * sc;
        for (int32_t v = a0 + 1; v < a1; v++)
            memcpy(dx + (size_t)v * h, o, (size_t)h * sizeof(float));
    }
}

/* ===================================================================== */
/* Loss and optimizer                                                     */
/* ===================================================================== */

static void cpu_loss(mp_backend *b, void *lossv, void *dyv, const void *yv,
                     const void *targetv, const uint8_t *mask, int32_t n, int n_tasks,
                     mp_loss_kind kind)
{
    float *loss = lossv, *dy = dyv;
    const float *y = yv, *t = targetv;
    size_t total = (size_t)n * n_tasks, count = 0;
    for (size_t i = 0; i < total; i++)
        count += mask[i] != 0;
    /* The sum is kept in double: it is one number per batch, and a float sum
     * over thousands of terms would drift from the double-precision oracle. */
    double sum = 0;
    float inv = count ? (float)(1.0 / (double)count) : 0.0f;
    for (size_t i = 0; i < total; i++) {
        if (!mask[i]) {
            dy[i] = 0;
            continue;
        }
        float x = y[i], tt = t[i], g;
        if (kind == MP_LOSS_BCE) {
            float l = (x > 0 ? x : 0.0f) - x * tt + log1pf(expf(-fabsf(x)));
            sum += l;
            g = 1.0f / (1.0f + expf(-x)) - tt;
        } else {
            float d = x - tt;
            sum += (double)d * d;
            g = 2.0f * d;
        }
        dy[i] = g * inv;
    }
    loss[0] = count ? (float)(sum / (double)count) : 0.0f;
}

static void cpu_adam(mp_backend *b, void *pv, void *mv, void *vv, const void *gv, size_t n,
                     double lr, double beta1, double beta2, double eps,
                     double weight_decay, long t)
{
    float *restrict p = pv, *restrict m = mv, *restrict v = vv;
    const float *restrict g = gv;
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    const float step = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
    const float b1 = (float)beta1, b2 = (float)beta2, c1 = (float)(1 - beta1),
                c2 = (float)(1 - beta2), ep = (float)eps, wd = (float)weight_decay;
    int nt = threads_for(n / 4);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= step * (mi / (sqrtf(vi) / bc2s + ep));
    }
}

/* ===================================================================== */
/* Open / close                                                           */
/* ===================================================================== */

static void cpu_close(mp_backend *b) { mp_free(b); }

mp_status mp_backend_cpu_open(mp_backend **out)
{
    *out = NULL;
    pthread_once(&blas_once, blas_setup);
    mp_backend *b = mp_calloc(1, sizeof *b);
    if (!b)
        return mp_error_set(MP_ERR_NOMEM, "cpu backend: out of memory");
    b->name = "cpu";
    b->dtype = MP_F32;
    b->esize = sizeof(float);
    b->host_memory = 1;
    b->close = cpu_close;
    b->alloc = cpu_alloc;
    b->free = cpu_free;
    b->upload = cpu_upload;
    b->download = cpu_download;
    b->zero = cpu_zero;
    b->copy = cpu_copy;
    b->sync = cpu_sync;
    b->gemm = cpu_gemm;
    b->fill_rows = cpu_fill_rows;
    b->col_sum = cpu_col_sum;
    b->copy2d = cpu_copy2d;
    b->add = cpu_add;
    b->relu_dropout = cpu_relu_dropout;
    b->relu_dropout_backward = cpu_relu_dropout_backward;
    b->dropout = cpu_dropout;
    b->dropout_backward = cpu_dropout_backward;
    b->atom_embed = cpu_atom_embed;
    b->atom_embed_backward = cpu_atom_embed_backward;
    b->edge_embed = cpu_edge_embed;
    b->edge_embed_backward = cpu_edge_embed_backward;
    b->message = cpu_message;
    b->message_backward = cpu_message_backward;
    b->atom_sum = cpu_atom_sum;
    b->atom_sum_backward = cpu_atom_sum_backward;
    b->pool = cpu_pool;
    b->pool_backward = cpu_pool_backward;
    b->loss = cpu_loss;
    b->adam = cpu_adam;
    *out = b;
    return MP_OK;
}

/* ===================================================================== */
/* Backend registry                                                       */
/* ===================================================================== */

mp_status mp_backend_open(mp_backend **out, const char *name)
{
    *out = NULL;
    if (!name || !*name || strcmp(name, "cpu") == 0)
        return mp_backend_cpu_open(out);
    if (strcmp(name, "ref") == 0)
        return mp_backend_ref_open(out, MP_F32);
    if (strcmp(name, "ref64") == 0)
        return mp_backend_ref_open(out, MP_F64);
    if (strcmp(name, "cuda") == 0)
        return mp_error_set(MP_ERR_NODEVICE, "backend cuda: not available in this build");
    return mp_error_set(MP_ERR_ARG, "unknown backend '%s' (expected cpu, cuda, ref or ref64)",
                        name);
}

void mp_backend_close(mp_backend *b)
{
    if (b)
        b->close(b);
}
