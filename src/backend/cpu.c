/*
 * cpu.c - the cpu backend: the ops of ops.h over float host buffers,
 * with OpenBLAS for the dense products and OpenMP for everything else.
 * This file: OpenBLAS set-up, memory, the dense and elementwise ops, loss,
 * Adam and the backend's open; the graph ops are in cpu_graph.c, what both
 * share in cpu_impl.h (with the rules that keep every bit independent of
 * the thread count).
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
#include "backend/cpu_impl.h"
#include "backend/host_ops.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* One product, split into row blocks of C (the shape decides the blocks). */
static void gemm_one(const mp_gemm *g)
{
    if (gemm_trivial(g))
        return;
    int m = g->m, rows = gemm_block_rows(m, g->n, g->k);
    int nblk = (m + rows - 1) / rows;
    int nt = mp_threads_get();
    if (nt > nblk)
        nt = nblk;
    if (nt <= 1) {
        for (int q = 0; q < nblk; q++)
            gemm_rows(g, q * rows, m - q * rows < rows ? m - q * rows : rows);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int q = 0; q < nblk; q++)
        gemm_rows(g, q * rows, m - q * rows < rows ? m - q * rows : rows);
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

/* Several products: the products themselves are the parallel tasks. */
static void gemm_batch(int count, const mp_gemm *g)
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

void mp_cpu_gemm_f32(int count, const mp_gemm *g)
{
    for (int i = 0; i < count; i++) {
        CPU_ELEM(g[i].a_st);
        CPU_ELEM(g[i].b_st);
        CPU_ELEM(g[i].c_st);
    }
    /* one product keeps the single product's blocking, several the batch's
     * (the same calls, hence bits, as before the two ops were one) */
    if (count == 1)
        gemm_one(g);
    else
        gemm_batch(count, g);
}

static void cpu_gemm(mp_backend *b, int count, const mp_gemm *g)
{
    int any16 = 0;
    for (int i = 0; i < count; i++)
        any16 |= g[i].a_st == MP_ST_BF16 || g[i].b_st == MP_ST_BF16 || g[i].c_st == MP_ST_BF16;
    if (!any16)
        mp_cpu_gemm_f32(count, g);
    else
        mp_cpu_gemm_bf16(count, g, 0);   /* cpu_dnnl.c (fp32 ones included) */
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

static void cpu_copy2d(mp_backend *b, void *dstv, mp_stype dst_st, int ldd, const void *srcv,
                       mp_stype src_st, int lds, int32_t n_rows, int n_cols)
{
    if (dst_st != MP_ST_ELEM || src_st != MP_ST_ELEM) {
        mp_cpu_bf16_copy2d(dstv, dst_st, ldd, srcv, src_st, lds, n_rows, n_cols);
        return;
    }
    float *dst = dstv;
    const float *src = srcv;
    if (lds == 0) {   /* one row into every row (a bias): rows in parallel */
        int nt = threads_for((size_t)n_rows * n_cols);
        PARALLEL_RANGE((size_t)n_rows, 1,
            for (size_t i = a; i < z; i++)
                memcpy(dst + i * ldd, src, (size_t)n_cols * sizeof(float)));
        return;
    }
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

void mp_cpu_add(float *y, const float *x, size_t n)
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

void mp_cpu_relu_dropout(float *y, const float *x, size_t n, double p, uint64_t key)
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

static void cpu_relu_dropout(mp_backend *b, void *y, const void *x, mp_stype st, size_t n,
                             double p, mp_key key)
{
    if (st != MP_ST_ELEM)
        mp_cpu_bf16_relu_dropout(y, x, st, n, p, mp_key_value(key));
    else
        mp_cpu_relu_dropout(y, x, n, p, mp_key_value(key));
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

void mp_cpu_relu_backward(float *dx, const float *y, const float *dy, size_t n, double p)
{
    float scale = p > 0 && p < 1 ? (float)(1.0 / (1.0 - p)) : 1.0f;
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16, relu_back_range(dx, y, dy, a, z, scale));
}

static void cpu_relu_dropout_backward(mp_backend *b, void *dx, void *dxo, mp_stype dxo_st,
                                      const void *y, mp_stype y_st, const void *dy, size_t n,
                                      double p)
{
    if (y_st != MP_ST_ELEM || (dxo != dx && dxo_st != MP_ST_ELEM)) {
        mp_cpu_bf16_relu_backward(dx, dxo, dxo_st, y, y_st, dy, n, p);
        return;
    }
    mp_cpu_relu_backward(dx, y, dy, n, p);
    if (dxo != dx) {
        CPU_ELEM(dxo_st);
        if (n)
            memcpy(dxo, dx, n * sizeof(float));
    }
}

static void cpu_dropout(mp_backend *b, void *yv, const void *xv, int32_t n_rows,
                        int n_cols, int ld, double p, mp_key kd)
{
    float *y = yv;
    const float *x = xv;
    uint64_t key = mp_key_value(kd);
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

/* ===================================================================== */
/* Fused product                                                          */
/* ===================================================================== */

/* c = ReLU(r + a w) as the unfused ops: copy the residual, the product with
 * beta 1, the ReLU (bit for bit what the model computed before the fusion). */
static void cpu_gemm_res_relu(mp_backend *b, int m, int n, int k, const void *a, int lda,
                              const void *w, int ldw, mp_stype aw_st, const void *r, int ldr,
                              void *c, int ldc, mp_stype rc_st)
{
    if (m <= 0 || n <= 0)
        return;
    if (aw_st != MP_ST_ELEM || rc_st != MP_ST_ELEM) {
        /* cpu:bf16: the residual and the ReLU in the product's epilogue
         * (oneDNN's sum and relu post-ops: c rounded once) */
        if (c != r && aw_st == MP_ST_BF16) {
            mp_gemm g = { 0, 0, m, n, k, 1.0, 0.0, a, w, c, lda, ldw, ldc, aw_st, aw_st, rc_st };
            mp_cpu_gemm_bf16_res_relu(&g, r, ldr);
            return;
        }
        if (c != r)
            cpu_copy2d(b, c, rc_st, ldc, r, rc_st, ldr, m, n);
        mp_gemm g = { 0, 0, m, n, k, 1.0, 1.0, a, w, c, lda, ldw, ldc, aw_st, aw_st, rc_st };
        mp_cpu_gemm_bf16(1, &g, 1);
        return;
    }
    if (c != r)
        cpu_copy2d(b, c, MP_ST_ELEM, ldc, r, MP_ST_ELEM, ldr, m, n);
    mp_gemm g = { 0, 0, m, n, k, 1.0, 1.0, a, w, c, lda, ldw, ldc, MP_ST_ELEM, MP_ST_ELEM,
                  MP_ST_ELEM };
    gemm_one(&g);
    if (ldc == n) {
        mp_cpu_relu_dropout(c, c, (size_t)m * n, 0.0, 0);
        return;
    }
    for (int i = 0; i < m; i++) {
        float *row = (float *)c + (size_t)i * ldc;
        mp_cpu_relu_dropout(row, row, (size_t)n, 0.0, 0);
    }
}

/* ===================================================================== */
/* Loss and optimizer                                                     */
/* ===================================================================== */

/* mse and bce in float, as before the loss op took weights (a weight of 1
 * multiplies exactly, so unweighted runs keep their bits); every other kind
 * in double through loss_host.c. */
static void cpu_loss(mp_backend *b, void *lossv, void *dyv, const void *yv,
                     const void *targetv, const uint8_t *mask, int32_t n,
                     const mp_loss_spec *spec)
{
    if (spec->kind != MP_LOSS_MSE && spec->kind != MP_LOSS_BCE) {
        mp_loss_host(b, lossv, dyv, yv, targetv, mask, n, spec);
        return;
    }
    float *loss = lossv, *dy = dyv;
    const float *y = yv, *t = targetv;
    const float *sw = spec->sample_weight, *tw = spec->task_weight;
    const int n_tasks = spec->n_tasks;
    size_t total = (size_t)(n > 0 ? n : 0) * n_tasks, count = 0;
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
        float w = (sw ? sw[i / n_tasks] : 1.0f) * (tw ? tw[i % n_tasks] : 1.0f);
        if (spec->kind == MP_LOSS_BCE) {
            float l = (x > 0 ? x : 0.0f) - x * tt + log1pf(expf(-fabsf(x)));
            sum += (double)l * w;
            g = 1.0f / (1.0f + expf(-x)) - tt;
        } else {
            float d = x - tt;
            sum += (double)d * d * w;
            g = 2.0f * d;
        }
        dy[i] = g * w * inv;
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

static mp_status cpu_open_st(mp_backend **out, mp_stype act_st)
{
    *out = NULL;
    pthread_once(&blas_once, blas_setup);
    mp_backend *b = mp_calloc(1, sizeof *b);
    if (!b)
        return mp_error_set(MP_ERR_NOMEM, "cpu backend: out of memory");
    b->name = act_st == MP_ST_BF16 ? "cpu:bf16" : "cpu";
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
    b->act_st = act_st;
    b->gemm = cpu_gemm;
    b->gemm_res_relu = cpu_gemm_res_relu;
    b->copy2d = cpu_copy2d;
    b->col_sum = cpu_col_sum;
    b->relu_dropout = cpu_relu_dropout;
    b->relu_dropout_backward = cpu_relu_dropout_backward;
    b->dropout = cpu_dropout;
    mp_cpu_graph_ops(b);
    mp_cpu_layer_ops(b);
    b->loss = cpu_loss;
    b->adam = cpu_adam;
    b->adam_sched = cpu_adam_sched;
    b->step_end = cpu_step_end;
    *out = b;
    return MP_OK;
}

mp_status mp_backend_cpu_open(mp_backend **out)
{
    return cpu_open_st(out, MP_ST_ELEM);
}

/* "cpu" (or "cpu:fp32"), or "cpu:bf16": the product operands, messages and
 * their gradients stored in bf16, the products bf16 x bf16 with fp32
 * accumulation (cpu_dnnl.c: on AMX / AVX-512 BF16 where the CPU has them,
 * else in sgemm on the widened operands). */
static mp_status cpu_open_name(mp_backend **out, const char *name)
{
    *out = NULL;
    const char *prec = strchr(name, ':');
    if (prec && strcmp(prec + 1, "bf16") == 0)
        return cpu_open_st(out, MP_ST_BF16);
    if (prec && strcmp(prec + 1, "fp32") != 0)
        return mp_error_set(MP_ERR_ARG, "the cpu backend computes in fp32 or bf16 (got precision "
                            "'%s'; tf32 needs the GPU)", prec + 1);
    return mp_backend_cpu_open(out);
}

static int cpu_available(char *why, size_t n)
{
    (void)why; (void)n;
    return 1;
}

const mp_backend_provider mp_backend_cpu_provider = {
    "cpu", "cpu[:fp32|bf16]", "OpenBLAS + OpenMP, fp32; bf16 products through oneDNN",
    cpu_open_name, cpu_available, NULL,
};
