/*
 * ops_cpu.c - the cpu backend: the ops of ops.h over float host buffers,
 * with OpenBLAS for the dense products and OpenMP for everything else.
 *
 * Threads and determinism.  The result of every op is bitwise the same for
 * any thread count, by construction:
 *   - row ops (gathers, CSR segment sums, pooling, elementwise) give each
 *     output row or element one writer that sums in a fixed order;
 *   - scatters into weight rows (the backward of the one-hot gathers) give
 *     each weight row to one thread, which adds its input rows in ascending
 *     order (through a slot index, see scatter_by_slot); the bias column
 *     sums split the columns, so each element is still summed over the rows
 *     in the same order;
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
#include "backend/ops.h"

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

/* [*a, *z): this thread's contiguous share of [0, n), cut at multiples of
 * `align` (16 floats = one cache line, so no two threads share a line). */
static void my_range(size_t n, size_t align, size_t *a, size_t *z)
{
    size_t nt = (size_t)thread_count(), t = (size_t)thread_id();
    size_t per = ((n + nt - 1) / nt + align - 1) / align * align;
    size_t x = t * per, y = x + per;
    *a = x < n ? x : n;
    *z = y < n ? y : n;
}

/* Columns [*c0, *c1) of h for this thread, in chunks of 16 floats. */
static void my_columns(int h, int *c0, int *c1)
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
 * count), so the set of sgemm calls, hence every bit of C, is fixed.  Small
 * products are one call; others at least 2 blocks (the best split for 2
 * cores: each extra block repacks B, which costs most in the X^T dY
 * shapes), doubling up to 8 while each block keeps >= 30M multiply-adds.
 * Rows are a multiple of 16 (the micro-kernel's). */
static int gemm_block_rows(int m, int n, int k)
{
    double work = (double)m * n * k;
    int nblk = 1;
    if (work >= 8e6) {
        nblk = 2;
        while (nblk < 8 && work / (2.0 * nblk) >= 30e6)
            nblk *= 2;
    }
    int rows = ((m + nblk - 1) / nblk + 15) & ~15;
    return rows < 16 ? 16 : rows;
}

/* One sgemm over rows [r0, r0 + r) of C. */
static void gemm_rows(const mp_gemm *g, int r0, int r)
{
    const float *a = g->a;
    const float *ap = g->ta ? a + r0 : a + (size_t)r0 * g->lda;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                g->tb ? CblasTrans : CblasNoTrans, r, g->n, g->k, (float)g->alpha, ap, g->lda,
                (const float *)g->b, g->ldb, (float)g->beta, (float *)g->c + (size_t)r0 * g->ldc,
                g->ldc);
}

/* The degenerate shapes BLAS would reject (k = 0: C = beta C).  Returns 1
 * when the product is done. */
static int gemm_trivial(const mp_gemm *g)
{
    if (g->m <= 0 || g->n <= 0)
        return 1;
    if (g->k > 0)
        return 0;
    float *c = g->c;
    for (int i = 0; i < g->m; i++)
        for (int j = 0; j < g->n; j++)
            c[(size_t)i * g->ldc + j] = g->beta == 0 ? 0.0f : (float)g->beta * c[(size_t)i * g->ldc + j];
    return 1;
}

static void cpu_gemm(mp_backend *b, int ta, int tb, int m, int n, int k, double alpha,
                     const void *av, int lda, const void *bv, int ldb, double beta,
                     void *cv, int ldc)
{
    mp_gemm g = { ta, tb, m, n, k, alpha, beta, av, bv, cv, lda, ldb, ldc };
    if (gemm_trivial(&g))
        return;
    int rows = gemm_block_rows(m, n, k);
    int nblk = (m + rows - 1) / rows;
    int nt = mp_threads_get();
    if (nt > nblk)
        nt = nblk;
    if (nt <= 1) {
        for (int q = 0; q < nblk; q++)
            gemm_rows(&g, q * rows, m - q * rows < rows ? m - q * rows : rows);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int q = 0; q < nblk; q++)
        gemm_rows(&g, q * rows, m - q * rows < rows ? m - q * rows : rows);
}

/* In a batch each product is one block unless it is big enough to keep
 * several cores busy on its own (>= 120M multiply-adds per block): the
 * products themselves are the parallel tasks.  Again a function of the
 * shapes only. */
static int batch_block_rows(int m, int n, int k)
{
    double work = (double)m * n * k;
    int nblk = 1;
    while (nblk < 8 && work / (2.0 * nblk) >= 120e6)
        nblk *= 2;
    int rows = ((m + nblk - 1) / nblk + 15) & ~15;
    return rows < 16 ? 16 : rows;
}

typedef struct {
    int    g, r0, r;
    double work;
} gemm_task;

static void cpu_gemm_batch(mp_backend *b, int count, const mp_gemm *g)
{
    gemm_task t[64];
    int n_tasks = 0;
    for (int i = 0; i < count && i < 8; i++) {
        if (gemm_trivial(&g[i]))
            continue;
        int rows = batch_block_rows(g[i].m, g[i].n, g[i].k);
        for (int r0 = 0; r0 < g[i].m; r0 += rows) {
            int r = g[i].m - r0 < rows ? g[i].m - r0 : rows;
            t[n_tasks++] = (gemm_task){ i, r0, r, (double)r * g[i].n * g[i].k };
        }
    }
    /* Largest first (a fixed order; which thread runs a task changes no bit). */
    for (int i = 1; i < n_tasks; i++)
        for (int j = i; j > 0 && t[j - 1].work < t[j].work; j--) {
            gemm_task x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    int nt = mp_threads_get();
    if (nt > n_tasks)
        nt = n_tasks;
    if (nt <= 1) {
        for (int i = 0; i < n_tasks; i++)
            gemm_rows(&g[t[i].g], t[i].r0, t[i].r);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int i = 0; i < n_tasks; i++)
        gemm_rows(&g[t[i].g], t[i].r0, t[i].r);
}

static void cpu_fill_rows(mp_backend *b, void *yv, int ldy, const void *rowv,
                          int32_t n_rows, int n_cols)
{
    float *y = yv;
    const float *row = rowv;
    int nt = threads_for((size_t)n_rows * n_cols);
    PARALLEL_RANGE((size_t)n_rows, 1,
        for (size_t i = a; i < z; i++)
            memcpy(y + i * ldy, row, (size_t)n_cols * sizeof(float)));
}

static void cpu_col_sum(mp_backend *b, void *dstv, const void *xv, int ldx,
                        int32_t n_rows, int n_cols)
{
    float *dst = dstv;
    const float *x = xv;
    int nt = threads_for((size_t)n_rows * n_cols);
    PARALLEL_COLUMNS(n_cols,
        for (int32_t i = 0; i < n_rows && c0 < c1; i++)
            row_add(dst + c0, x + (size_t)i * ldx + c0, c1 - c0));
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

KERNEL static void add_range(float *restrict y, const float *restrict x, size_t a, size_t z)
{
#pragma omp simd
    for (size_t i = a; i < z; i++)
        y[i] += x[i];
}

static void cpu_add(mp_backend *b, void *y, const void *x, size_t n)
{
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16, add_range(y, x, a, z));
}

/* y may alias x in the elementwise ops: each element is read, then written,
 * by the same iteration, which "omp simd" keeps valid. */
KERNEL static void relu_range(float *y, const float *x, size_t a, size_t z)
{
#pragma omp simd
    for (size_t i = a; i < z; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

static void relu_dropout_range(float *y, const float *x, size_t a, size_t z, uint32_t thr,
                               float scale, uint64_t key)
{
    for (size_t i = a; i < z; i++) {
        float v = x[i] > 0 ? x[i] : 0.0f;
        y[i] = mp_dropout_keep(key, i, thr) ? v * scale : 0.0f;
    }
}

static void cpu_relu_dropout(mp_backend *b, void *y, const void *x, size_t n,
                             double p, uint64_t key)
{
    uint32_t thr = mp_dropout_threshold(p);
    int nt = threads_for(n);
    if (!thr) {
        PARALLEL_RANGE(n, 16, relu_range(y, x, a, z));
        return;
    }
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    PARALLEL_RANGE(n, 16, relu_dropout_range(y, x, a, z, thr, scale, key));
}

KERNEL static void relu_back_range(float *dx, const float *y, const float *dy, size_t a, size_t z,
                            float scale)
{
#pragma omp simd
    for (size_t i = a; i < z; i++) {
        float d = dy[i] * scale;
        dx[i] = y[i] > 0 ? d : 0.0f;
    }
}

static void cpu_relu_dropout_backward(mp_backend *b, void *dx, const void *y,
                                      const void *dy, size_t n, double p)
{
    float scale = p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : 1.0f;
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16, relu_back_range(dx, y, dy, a, z, scale));
}

static void cpu_dropout(mp_backend *b, void *yv, const void *xv, int32_t n_rows,
                        int n_cols, int ld, double p, uint64_t key)
{
    float *y = yv;
    const float *x = xv;
    uint32_t thr = mp_dropout_threshold(p);
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    int nt = threads_for((size_t)n_rows * n_cols);
    PARALLEL_RANGE((size_t)n_rows, 1,
        for (size_t i = a; i < z; i++)
            for (int j = 0; j < n_cols; j++) {
                size_t k = i * ld + j;
                y[k] = mp_dropout_keep(key, k, thr) ? x[k] * scale : 0.0f;
            });
}

static void cpu_dropout_backward(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                 int n_cols, int ld, double p, uint64_t key)
{
    cpu_dropout(b, dx, dy, n_rows, n_cols, ld, p, key);
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

static void cpu_atom_embed(mp_backend *b, void *outv, const int16_t *hot, const float *mass,
                           const void *wv, const void *biasv, int32_t n_atoms, int h,
                           int mass_row)
{
    float *out = outv;
    const float *w = wv, *bias = biasv, *wm = w + (size_t)mass_row * h;
    int nt = threads_for((size_t)n_atoms * h * 4);
    PARALLEL_RANGE((size_t)n_atoms, 1,
        for (size_t v = a; v < z; v++) {
            float *o = out + v * h;
            if (bias)
                memcpy(o, bias, (size_t)h * sizeof(float));
            else
                memset(o, 0, (size_t)h * sizeof(float));
            const int16_t *hv = hot + v * MP_ATOM_MAX_HOT;
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
                if (hv[q] >= 0)
                    row_add(o, w + (size_t)hv[q] * h, h);
            row_axpy(o, mass[v], wm, h);
        });
}

/*
 * The scatters of the one-hot backward (dW[s] += rows that hit slot s) are
 * split by weight rows, not columns: a column split of a 300-float row puts
 * both threads on one cache line of every row they touch.  A slot index
 * (counting sort: for each slot, the input rows that hit it, ascending) lets
 * each thread own whole rows and sum them in ascending input order, the same
 * order as a plain sequential scatter, so any thread count gives the same
 * bits.  The index is built per call (a few KB); if it cannot be allocated
 * the column-split loop below does the job.
 */
typedef struct {
    int      n_slots;       /* rows of the index (max slot + 1)           */
    int32_t *start;         /* n_slots + 1                                */
    int32_t *list;          /* input rows, grouped by slot, ascending     */
} slot_index;

static void slot_index_free(slot_index *ix)
{
    mp_free(ix->start);
    mp_free(ix->list);
}

/* Slot q of input row i: slots are int16 (atoms) or int8 (bonds), -1 = none. */
static inline int slot_at(const void *slots, int is16, size_t k)
{
    return is16 ? ((const int16_t *)slots)[k] : ((const int8_t *)slots)[k];
}

/* Builds the index of slots[i * width + q] over n_rows input rows.  Returns
 * 0 (and leaves ix to slot_index_free) when out of memory. */
static int slot_index_build(slot_index *ix, const void *slots, int is16, int width, int32_t n_rows)
{
    size_t tot = (size_t)n_rows * (size_t)width;
    int max = -1;
    for (size_t k = 0; k < tot; k++)
        if (slot_at(slots, is16, k) > max)
            max = slot_at(slots, is16, k);
    ix->n_slots = max + 1;
    ix->start = mp_calloc((size_t)ix->n_slots + 1, sizeof(int32_t));
    ix->list = mp_malloc((tot ? tot : 1) * sizeof(int32_t));
    int32_t *fill = mp_malloc(((size_t)ix->n_slots + 1) * sizeof(int32_t));
    if (!ix->start || !ix->list || !fill) {
        mp_free(fill);
        return 0;
    }
    for (size_t k = 0; k < tot; k++)
        if (slot_at(slots, is16, k) >= 0)
            ix->start[slot_at(slots, is16, k) + 1]++;
    for (int sl = 0; sl < ix->n_slots; sl++)
        ix->start[sl + 1] += ix->start[sl];
    memcpy(fill, ix->start, (size_t)ix->n_slots * sizeof(int32_t));
    for (size_t k = 0; k < tot; k++) {
        int sl = slot_at(slots, is16, k);
        if (sl >= 0)
            ix->list[fill[sl]++] = (int32_t)(k / (size_t)width);
    }
    mp_free(fill);
    return 1;
}

/* This thread's rows [*r0, *r1) of n_rows whose cumulative work (cum[r],
 * cum[n_rows] = total) starts inside its equal share of the total. */
static void my_work_rows(const int64_t *cum, int n_rows, int *r0, int *r1)
{
    int64_t nt = thread_count(), t = thread_id(), total = cum[n_rows];
    int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
    int a = 0, z;
    while (a < n_rows && cum[a] < lo)
        a++;
    z = a;
    while (z < n_rows && (cum[z] < hi || t == nt - 1))
        z++;
    *r0 = a;
    *r1 = z;
}

/* dw[s] += sum_{i in ix slot s} g[input row i] for every slot, plus, when
 * scale is given, dw[extra_row] += sum_i scale[i] g[i] over all n_in rows
 * (the mass row).  Rows are shared out by work. */
static void scatter_by_slot(float *dw, const slot_index *ix, const float *g, int h,
                            const float *scale, int extra_row, int32_t n_in, int nt)
{
    int n_rows = ix->n_slots + (scale ? 1 : 0);
    int64_t cum_local[64], *cum = n_rows < 64 ? cum_local : mp_malloc(((size_t)n_rows + 1) * sizeof *cum);
    if (!cum)
        nt = 1;   /* no memory for the split: one thread does every row */
    int64_t c = 0;
    for (int r = 0; r < n_rows && cum; r++) {
        cum[r] = c;
        c += r < ix->n_slots ? ix->start[r + 1] - ix->start[r] : n_in;
    }
    if (cum)
        cum[n_rows] = c;
#define SCATTER_ROWS(r0, r1)                                                   \
    for (int r = (r0); r < (r1); r++) {                                        \
        if (r < ix->n_slots) {                                                 \
            float *dst = dw + (size_t)r * h;                                   \
            for (int32_t k = ix->start[r]; k < ix->start[r + 1]; k++)          \
                row_add(dst, g + (size_t)ix->list[k] * h, h);                  \
        } else {                                                               \
            float *dst = dw + (size_t)extra_row * h;                           \
            for (int32_t i = 0; i < n_in; i++)                                 \
                row_axpy(dst, scale[i], g + (size_t)i * h, h);                 \
        }                                                                      \
    }
    if (nt <= 1) {
        SCATTER_ROWS(0, n_rows);
    } else {
#pragma omp parallel num_threads(nt)
        {
            int r0, r1;
            my_work_rows(cum, n_rows, &r0, &r1);
            SCATTER_ROWS(r0, r1);
        }
    }
#undef SCATTER_ROWS
    if (cum != cum_local)
        mp_free(cum);
}

static void cpu_atom_embed_backward(mp_backend *b, void *dwv, const int16_t *hot,
                                    const float *mass, const void *doutv, int32_t n_atoms,
                                    int h, int mass_row)
{
    float *dw = dwv;
    const float *dout = doutv;
    int nt = threads_for((size_t)n_atoms * h * 4);
    slot_index ix = { 0, NULL, NULL };
    if (slot_index_build(&ix, hot, 1, MP_ATOM_MAX_HOT, n_atoms)) {
        scatter_by_slot(dw, &ix, dout, h, mass, mass_row, n_atoms, nt);
        slot_index_free(&ix);
        return;
    }
    slot_index_free(&ix);
    PARALLEL_COLUMNS(h,
        float *dwm = dw + (size_t)mass_row * h;
        for (int32_t v = 0; v < n_atoms && c0 < c1; v++) {
            const float *g = dout + (size_t)v * h;
            const int16_t *hv = hot + (size_t)v * MP_ATOM_MAX_HOT;
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
                if (hv[q] >= 0)
                    row_add(dw + (size_t)hv[q] * h + c0, g + c0, c1 - c0);
            row_axpy(dwm + c0, mass[v], g + c0, c1 - c0);
        });
}

static void cpu_edge_embed(mp_backend *b, void *h0v, const int32_t *edge_src,
                           const int8_t *bond_hot, const void *av, const void *wbv,
                           int32_t n_edges, int h)
{
    float *h0 = h0v;
    const float *at = av, *wb = wbv;
    int nt = threads_for((size_t)n_edges * h * 2);
    PARALLEL_RANGE((size_t)n_edges, 2,
        for (size_t e = a; e < z; e++) {
            float *o = h0 + e * h;
            memcpy(o, at + (size_t)edge_src[e] * h, (size_t)h * sizeof(float));
            const int8_t *bh = bond_hot + (e >> 1) * MP_BOND_MAX_HOT;
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                if (bh[q] >= 0)
                    row_add(o, wb + (size_t)bh[q] * h, h);
        });
}

/* o = sum over the CSR segment of v of the rows x[in_edge[k] ^ flip]. */
static inline void csr_row_sum(float *restrict o, const int32_t *in_start,
                               const int32_t *in_edge, const float *x, size_t v,
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
    PARALLEL_RANGE((size_t)n_atoms, 1,
        for (size_t v = a; v < z; v++)
            csr_row_sum(da + v * h, in_start, in_edge, dh0, v, 1, h));
    /* Bond rows: index the bonds by slot, then each edge of a bond adds its
     * row (edges 2k and 2k+1 in that order, as a sequential scatter would). */
    slot_index ix = { 0, NULL, NULL };
    if (slot_index_build(&ix, bond_hot, 0, MP_BOND_MAX_HOT, n_edges / 2)) {
        int32_t *elist = mp_malloc(((size_t)ix.start[ix.n_slots] * 2 + 1) * sizeof *elist);
        int32_t *estart = mp_malloc(((size_t)ix.n_slots + 1) * sizeof *estart);
        if (elist && estart) {
            for (int sl = 0; sl <= ix.n_slots; sl++)
                estart[sl] = 2 * ix.start[sl];
            for (int32_t k = 0; k < ix.start[ix.n_slots]; k++) {
                elist[2 * k] = 2 * ix.list[k];
                elist[2 * k + 1] = 2 * ix.list[k] + 1;
            }
            slot_index ex = { ix.n_slots, estart, elist };
            scatter_by_slot(dwb, &ex, dh0, h, NULL, 0, n_edges, nt);
            slot_index_free(&ex);
            slot_index_free(&ix);
            return;
        }
        mp_free(elist);
        mp_free(estart);
    }
    slot_index_free(&ix);
    PARALLEL_COLUMNS(h,
        for (int32_t e = 0; e < n_edges && c0 < c1; e++) {
            const int8_t *bh = bond_hot + (size_t)(e >> 1) * MP_BOND_MAX_HOT;
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                if (bh[q] >= 0)
                    row_add(dwb + (size_t)bh[q] * h + c0, dh0 + (size_t)e * h + c0, c1 - c0);
        });
}

static void cpu_atom_sum(mp_backend *b, void *av, const int32_t *in_start,
                         const int32_t *in_edge, const void *mv, int32_t n_atoms, int h)
{
    float *out = av;
    const float *m = mv;
    int nt = threads_for((size_t)n_atoms * h * 2);
    PARALLEL_RANGE((size_t)n_atoms, 1,
        for (size_t v = a; v < z; v++)
            csr_row_sum(out + v * h, in_start, in_edge, m, v, 0, h));
}

/* The two phases of message / message_backward: per-atom sums, then per
 * edge "sum at one end minus the reverse edge". */
KERNEL static void msg_atoms(float *s, const int32_t *in_start, const int32_t *in_edge, const float *m,
                      int32_t flip, size_t a, size_t z, int h)
{
    for (size_t v = a; v < z; v++)
        csr_row_sum(s + v * h, in_start, in_edge, m, v, flip, h);
}

KERNEL static void msg_edges(float *out, const float *s, const int32_t *end, const float *m, size_t a,
                      size_t z, int h)
{
    for (size_t e = a; e < z; e++)
        row_sub(out + e * h, s + (size_t)end[e] * h, m + (e ^ 1) * h, h);
}

static void message_both(float *out, float *s, const int32_t *in_start, const int32_t *in_edge,
                         const int32_t *end, const float *m, int32_t flip, int32_t n_atoms,
                         int32_t n_edges, int h)
{
    int nt = threads_for((size_t)n_edges * h * 2);
    if (nt <= 1) {
        msg_atoms(s, in_start, in_edge, m, flip, 0, (size_t)n_atoms, h);
        msg_edges(out, s, end, m, 0, (size_t)n_edges, h);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t a, z;
        my_range((size_t)n_atoms, 1, &a, &z);
        msg_atoms(s, in_start, in_edge, m, flip, a, z, h);
#pragma omp barrier
        my_range((size_t)n_edges, 2, &a, &z);
        msg_edges(out, s, end, m, a, z, h);
    }
}

static void cpu_message(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                        const int32_t *in_edge, const int32_t *edge_src, const void *m,
                        int32_t n_atoms, int32_t n_edges, int h)
{
    message_both(msg, s, in_start, in_edge, edge_src, m, 0, n_atoms, n_edges, h);
}

static void cpu_message_backward(mp_backend *b, void *dm, void *ds, const int32_t *in_start,
                                 const int32_t *in_edge, const int32_t *edge_dst,
                                 const void *dmsg, int32_t n_atoms, int32_t n_edges, int h)
{
    message_both(dm, ds, in_start, in_edge, edge_dst, dmsg, 1, n_atoms, n_edges, h);
}

static void cpu_atom_sum_backward(mp_backend *b, void *dmv, const int32_t *edge_dst,
                                  const void *dav, int32_t n_edges, int h)
{
    float *dm = dmv;
    const float *da = dav;
    int nt = threads_for((size_t)n_edges * h);
    PARALLEL_RANGE((size_t)n_edges, 1,
        for (size_t e = a; e < z; e++)
            memcpy(dm + e * h, da + (size_t)edge_dst[e] * h, (size_t)h * sizeof(float)));
}

KERNEL static void pool_one(float *restrict o, const float *x, int32_t a0, int32_t a1, int h,
                     mp_aggregation agg, double norm)
{
    memset(o, 0, (size_t)h * sizeof(float));
    for (int32_t v = a0; v < a1; v++)
        row_add(o, x + (size_t)v * h, h);
    if (a1 == a0 || agg == MP_AGG_SUM)
        return;
    /* mean divides, as torch's sum / a_size does, rather than multiplying */
    float d = agg == MP_AGG_MEAN ? (float)(a1 - a0) : (float)norm;
#pragma omp simd
    for (int j = 0; j < h; j++)
        o[j] /= d;
}

static void cpu_pool(mp_backend *b, void *outv, int ldo, const int32_t *mol_atom,
                     const void *xv, int32_t n_mols, int h, mp_aggregation agg, double norm)
{
    float *out = outv;
    const float *x = xv;
    int nt = threads_for((size_t)mol_atom[n_mols] * h);
    PARALLEL_RANGE((size_t)n_mols, 1,
        for (size_t i = a; i < z; i++)
            pool_one(out + i * ldo, x, mol_atom[i], mol_atom[i + 1], h, agg, norm));
}

KERNEL static void pool_back_one(float *dx, const float *restrict g, int32_t a0, int32_t a1, int h,
                          mp_aggregation agg, double norm)
{
    if (a1 == a0)
        return;
    float *restrict o = dx + (size_t)a0 * h;
    if (agg == MP_AGG_SUM) {
        memcpy(o, g, (size_t)h * sizeof(float));
    } else {
        float d = agg == MP_AGG_MEAN ? (float)(a1 - a0) : (float)norm;
#pragma omp simd
        for (int j = 0; j < h; j++)
            o[j] = g[j] / d;
    }
    for (int32_t v = a0 + 1; v < a1; v++)
        memcpy(dx + (size_t)v * h, o, (size_t)h * sizeof(float));
}

static void cpu_pool_backward(mp_backend *b, void *dxv, const int32_t *mol_atom,
                              const void *doutv, int ldo, int32_t n_mols, int h,
                              mp_aggregation agg, double norm)
{
    float *dx = dxv;
    const float *dout = doutv;
    int nt = threads_for((size_t)mol_atom[n_mols] * h);
    PARALLEL_RANGE((size_t)n_mols, 1,
        for (size_t i = a; i < z; i++)
            pool_back_one(dx, dout + i * ldo, mol_atom[i], mol_atom[i + 1], h, agg, norm));
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

typedef struct {
    float b1, b2, c1, c2, step, bc2s, eps, wd;
} adam_k;

/* Vectorizes (sqrtps) because the Makefile builds this file with
 * -fno-math-errno: the argument is never negative. */
KERNEL static void adam_range(float *restrict p, float *restrict m, float *restrict v,
                       const float *restrict g, size_t a, size_t z, adam_k k)
{
#pragma omp simd
    for (size_t i = a; i < z; i++) {
        float gi = g[i] + k.wd * p[i];
        float mi = k.b1 * m[i] + k.c1 * gi;
        float vi = k.b2 * v[i] + k.c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= k.step * (mi / (sqrtf(vi) / k.bc2s + k.eps));
    }
}

static void cpu_adam(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                     double lr, double beta1, double beta2, double eps,
                     double weight_decay, long t)
{
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    adam_k k = { (float)beta1, (float)beta2, (float)(1 - beta1), (float)(1 - beta2),
                 (float)(lr / bc1), (float)sqrt(bc2), (float)eps, (float)weight_decay };
    int nt = threads_for(n / 4);
    PARALLEL_RANGE(n, 16, adam_range(p, m, v, g, a, z, k));
}

/* adam with the step's scalars read from (host) memory at index k_dev[0]. */
static void cpu_adam_sched(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                           const float *sched, const int32_t *k_dev, double beta1, double beta2,
                           double eps, double weight_decay)
{
    const float *e = sched + 2 * (size_t)k_dev[0];
    adam_k k = { (float)beta1, (float)beta2, (float)(1 - beta1), (float)(1 - beta2),
                 e[0], e[1], (float)eps, (float)weight_decay };
    int nt = threads_for(n / 4);
    PARALLEL_RANGE(n, 16, adam_range(p, m, v, g, a, z, k));
}

static void cpu_step_end(mp_backend *b, int32_t *k_dev, void *losses, const void *loss)
{
    ((float *)losses)[k_dev[0]] = *(const float *)loss;
    k_dev[0]++;
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
    b->gemm_batch = cpu_gemm_batch;
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
    b->gemm_res_relu = mp_ops_gemm_res_relu_composed;
    b->message_backward_relu = mp_ops_message_backward_relu_composed;
    b->edge_embed_relu = mp_ops_edge_embed_relu_composed;
    b->adam_sched = cpu_adam_sched;
    b->step_end = cpu_step_end;
    mp_ops_keyed_host(b);
    *out = b;
    return MP_OK;
}

/* "cpu" (or "cpu:fp32"): the CPU computes in fp32 only. */
static mp_status cpu_open_name(mp_backend **out, const char *name)
{
    *out = NULL;
    const char *prec = strchr(name, ':');
    if (prec && strcmp(prec + 1, "fp32") != 0)
        return mp_error_set(MP_ERR_ARG, "the cpu backend computes in fp32 (got precision '%s'; "
                            "tf32 and bf16 need the GPU)", prec + 1);
    return mp_backend_cpu_open(out);
}

static int cpu_available(char *why, size_t n)
{
    (void)why; (void)n;
    return 1;
}

const mp_backend_provider mp_backend_cpu_provider = {
    "cpu", "cpu", "OpenBLAS + OpenMP, fp32", cpu_open_name, cpu_available,
};
