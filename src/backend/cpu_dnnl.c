/*
 * cpu_dnnl.c - the cpu backend's products of bf16 operands (cpu:bf16):
 * bf16 x bf16 with fp32 accumulation through oneDNN's matmul (AMX or
 * AVX-512 BF16, whichever the CPU has: oneDNN picks at run time), and, where
 * the CPU has neither (or molprop was built without oneDNN, MP_HAVE_DNNL=0),
 * the same product in OpenBLAS's fp32 sgemm on the operands widened to
 * float (a bf16 widens exactly, so only the order of the sums differs).
 *
 * Determinism.  As for the fp32 products (cpu_impl.h), the set of calls
 * depends on the shapes only, never on the thread count or on which thread
 * runs a call, and every call runs on one thread (oneDNN is told so: it sees
 * omp_get_max_threads() == 1 while we create or run a primitive), so every
 * bit of C is the same for 1 or 2 threads and from run to run:
 *   - ta = 0 (C rows = A rows; the D-MPNN's E x h x h products): blocks of
 *     BLK_M rows, and a tail of t < BLK_M rows padded (copied) to the next
 *     power of two >= 16, so a handful of shapes serve every batch size (a
 *     oneDNN primitive is JIT-compiled, ~2 ms, once per shape);
 *   - ta = 1 (dW = X^T dY, k = the batch's edges or atoms): C split in row
 *     blocks by shape, the k axis in chunks of BLK_K (the last padded with
 *     zeros to a power of two), summed into C in chunk order (beta = 1 after
 *     the first chunk).
 * The primitives live in a small cache for the process (never freed: the
 * table stays reachable), made under a mutex.
 */
#include "backend/cpu_impl.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MP_HAVE_DNNL
#define MP_HAVE_DNNL 0
#endif
#if MP_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#define BLK_M 256
#define BLK_K 1024

/* ===================================================================== */
/* bf16 rows                                                              */
/* ===================================================================== */

KERNEL void mp_cpu_widen(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    bf16_widen(dst, src, n);
}

KERNEL void mp_cpu_narrow(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    bf16_narrow(dst, src, n);
}

/* ===================================================================== */
/* The fp32 fallback                                                      */
/* ===================================================================== */

/* A stored operand of `rows` rows of stride ld (its first `cols` columns
 * used), widened to float with the same stride; NULL when out of memory. */
static float *widen_matrix(const void *x, mp_stype st, int rows, int cols, int ld)
{
    size_t n = rows > 0 ? (size_t)(rows - 1) * ld + cols : 0;
    float *w = mp_malloc((n ? n : 1) * sizeof(float));
    if (!w)
        return NULL;
    if (st == MP_ST_BF16)
        mp_cpu_widen(w, x, n);
    else
        memcpy(w, x, n * sizeof(float));
    return w;
}

/* C = relu?(alpha op(A) op(B) + beta C) through sgemm on widened operands;
 * C rounded once when bf16.  Returns 0 when out of memory. */
static int fallback(const mp_gemm *g, int relu)
{
    int ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    float *a = widen_matrix(g->a, g->a_st, ar, ac, g->lda);
    float *b = widen_matrix(g->b, g->b_st, br, bc, g->ldb);
    float *c = NULL;
    int direct = g->c_st == MP_ST_ELEM;
    if (!direct)
        c = widen_matrix(g->c, g->c_st, g->m, g->n, g->ldc);
    if (!a || !b || (!direct && !c)) {
        mp_free(a);
        mp_free(b);
        mp_free(c);
        return 0;
    }
    mp_gemm f = *g;
    f.a = a;
    f.b = b;
    f.c = direct ? g->c : c;
    f.a_st = f.b_st = f.c_st = MP_ST_ELEM;
    mp_cpu_gemm_f32(1, &f);
    float *cf = f.c;
    for (int i = 0; i < g->m; i++) {
        float *row = cf + (size_t)i * g->ldc;
        if (relu)
            for (int j = 0; j < g->n; j++)
                row[j] = row[j] > 0 ? row[j] : 0.0f;
        if (!direct)
            mp_cpu_narrow((uint16_t *)g->c + (size_t)i * g->ldc, row, (size_t)g->n);
    }
    mp_free(a);
    mp_free(b);
    mp_free(c);
    return 1;
}

#if MP_HAVE_DNNL
/* ===================================================================== */
/* oneDNN primitives                                                      */
/* ===================================================================== */

/* res: C = relu?(A B + R) with R (C's storage, stride ldr) read by a
 * binary-add post-op, so the residual is never copied into C first. */
typedef struct {
    int   m, n, k, ta, tb, lda, ldb, ldc, c_bf16, relu, res, ldr;
    float alpha, beta;
} prim_key;

typedef struct {
    prim_key          key;
    dnnl_primitive_t  prim;
    dnnl_memory_desc_t a, b, c, r, scratch;
} prim;

#define MAX_PRIMS 256
#define MAX_THREADS 64

static pthread_mutex_t prim_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t  dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t   engine;
static int             dnnl_ok;             /* 1: bf16 instructions + an engine */
static char            dnnl_info[160];
static prim            prims[MAX_PRIMS];
static int             n_prims;
static dnnl_stream_t   streams[MAX_THREADS];
static void           *scratch[MAX_THREADS];
static size_t          scratch_size[MAX_THREADS];

static void dnnl_setup(void)
{
    const dnnl_version_t *v = dnnl_version();
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    /* AVX-512 BF16 or AMX: oneDNN 2.x's ISA values are bit sets of what
     * they include (amx = 0x3e7 includes avx512_core_bf16 = 0xe7) */
    int has = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    if (has && dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success)
        dnnl_ok = 1;
    snprintf(dnnl_info, sizeof dnnl_info, "oneDNN %d.%d.%d%s", v->major, v->minor, v->patch,
             dnnl_ok ? "" : " (no bf16 instructions on this CPU: fp32 sgemm on widened operands)");
}

static int key_eq(const prim_key *x, const prim_key *y)
{
    return memcmp(x, y, sizeof *x) == 0;
}

/* The primitive for key k (made on first use), or NULL when oneDNN cannot
 * make a fast one (the caller falls back). */
static prim *prim_get(const prim_key *k)
{
    pthread_mutex_lock(&prim_mu);
    for (int i = 0; i < n_prims; i++)
        if (key_eq(&prims[i].key, k)) {
            prim *p = prims[i].prim ? &prims[i] : NULL;
            pthread_mutex_unlock(&prim_mu);
            return p;
        }
    prim *p = NULL;
    if (n_prims == MAX_PRIMS)
        goto out;
    prim *e = &prims[n_prims];
    memset(e, 0, sizeof *e);
    e->key = *k;
    dnnl_dims_t da = { k->m, k->k }, db = { k->k, k->n }, dc = { k->m, k->n };
    dnnl_dims_t sa = { k->ta ? 1 : k->lda, k->ta ? k->lda : 1 };
    dnnl_dims_t sb = { k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1 };
    dnnl_dims_t sc = { k->ldc, 1 };
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&e->a, 2, da, dnnl_bf16, sa) ||
        dnnl_memory_desc_init_by_strides(&e->b, 2, db, dnnl_bf16, sb) ||
        dnnl_memory_desc_init_by_strides(&e->c, 2, dc, k->c_bf16 ? dnnl_bf16 : dnnl_f32, sc) ||
        dnnl_matmul_desc_init(&md, &e->a, &e->b, NULL, &e->c) ||
        dnnl_primitive_attr_create(&attr) || dnnl_post_ops_create(&po))
        goto done;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))
        goto done;
    if (k->alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha))
        goto done;
    if (k->beta != 0.0f && dnnl_post_ops_append_sum(po, k->beta))
        goto done;
    if (k->res) {
        dnnl_dims_t sr = { k->ldr, 1 };
        if (dnnl_memory_desc_init_by_strides(&e->r, 2, dc, k->c_bf16 ? dnnl_bf16 : dnnl_f32, sr) ||
            dnnl_post_ops_append_binary(po, dnnl_binary_add, &e->r))
            goto done;
    }
    if (k->relu && dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f))
        goto done;
    if (dnnl_primitive_attr_set_post_ops(attr, po))
        goto done;
    if (dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL))
        goto done;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    /* a reference (plain-loop) implementation would be slower than sgemm */
    if (!impl || strncmp(impl, "ref", 3) == 0)
        goto done;
    const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (s)
        e->scratch = *s;
    if (dnnl_primitive_create(&e->prim, pd))
        e->prim = NULL;
done:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    n_prims++;   /* a failed key is kept too (prim NULL): not tried again */
    p = e->prim ? e : NULL;
out:
    pthread_mutex_unlock(&prim_mu);
    return p;
}

/* Padding buffers per thread (three of them), kept for the process and grown
 * when a product needs more: a padded tail would otherwise allocate (and
 * the kernel zero) up to a megabyte per call.  Contents undefined. */
static void *pad_buf[MAX_THREADS][3];
static size_t pad_size[MAX_THREADS][3];

static void *pad_get(int which, size_t bytes)
{
    int t = thread_id();
    if (t >= MAX_THREADS)
        return NULL;
    if (bytes > pad_size[t][which]) {
        free(pad_buf[t][which]);
        size_t n = (bytes + 4095) & ~(size_t)4095;
        pad_buf[t][which] = aligned_alloc(64, n);
        pad_size[t][which] = pad_buf[t][which] ? n : 0;
    }
    return pad_buf[t][which];
}

/* Runs p on the given buffers on this thread (r: the residual of a res
 * primitive, else unused).  Returns 0 on failure. */
static int prim_run(prim *p, const void *a, const void *b, void *c, const void *r)
{
    int t = thread_id();
    if (t >= MAX_THREADS)
        return 0;
    if (!streams[t] && dnnl_stream_create(&streams[t], engine, dnnl_stream_default_flags))
        return 0;
    size_t need = dnnl_memory_desc_get_size(&p->scratch);
    if (need > scratch_size[t]) {
        free(scratch[t]);
        scratch[t] = aligned_alloc(64, (need + 63) & ~(size_t)63);
        scratch_size[t] = scratch[t] ? need : 0;
        if (!scratch[t])
            return 0;
    }
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL, mr = NULL;
    int ok = !dnnl_memory_create(&ma, &p->a, engine, (void *)a) &&
             !dnnl_memory_create(&mb, &p->b, engine, (void *)b) &&
             !dnnl_memory_create(&mc, &p->c, engine, c) &&
             (!need || !dnnl_memory_create(&ms, &p->scratch, engine, scratch[t])) &&
             (!p->key.res || !dnnl_memory_create(&mr, &p->r, engine, (void *)r));
    if (ok) {
        dnnl_exec_arg_t args[5] = { { DNNL_ARG_SRC, ma }, { DNNL_ARG_WEIGHTS, mb },
                                    { DNNL_ARG_DST, mc } };
        int n = 3;
        if (need)
            args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_SCRATCHPAD, ms };
        if (p->key.res)
            args[n++] = (dnnl_exec_arg_t){ DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mr };
        ok = !dnnl_primitive_execute(p->prim, streams[t], n, args) &&
             !dnnl_stream_wait(streams[t]);
    }
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(mr);
    return ok;
}

/* ===================================================================== */
/* Tasks                                                                  */
/* ===================================================================== */

typedef struct {
    const mp_gemm *g;
    const void    *res;        /* the residual R (C's storage, stride ldr) or NULL */
    int            ldr;
    int            r0, r;      /* rows of C */
    int            relu;
    double         work;
} task;

static int pow2_at_least(int x)
{
    int p = 16;
    while (p < x)
        p *= 2;
    return p;
}

/* Rows [r0, r0 + r) of C for ta = 0: one call, or (r not a block) one call
 * on a copy padded to a power of two. */
static int run_rows(const task *t, int prepare)
{
    const mp_gemm *g = t->g;
    int r0 = t->r0, r = t->r;
    size_t cs = g->c_st == MP_ST_BF16 ? 2 : 4;
    const uint16_t *a = (const uint16_t *)g->a + (size_t)r0 * g->lda;
    char *c = (char *)g->c + (size_t)r0 * g->ldc * cs;
    const char *res = t->res ? (const char *)t->res + (size_t)r0 * t->ldr * cs : NULL;
    prim_key k = { r, g->n, g->k, 0, g->tb, g->lda, g->ldb, g->ldc, g->c_st == MP_ST_BF16,
                   t->relu, res != NULL, res ? t->ldr : 0, (float)g->alpha, (float)g->beta };
    if (r == BLK_M || r == pow2_at_least(r)) {
        prim *p = prim_get(&k);
        return p && (prepare || prim_run(p, a, g->b, c, res));
    }
    int mp = pow2_at_least(r);
    k.m = mp;
    k.lda = g->k;
    k.ldc = g->n;
    if (res)
        k.ldr = g->n;
    prim *p = prim_get(&k);
    if (!p || prepare)
        return p != NULL;
    uint16_t *ap = pad_get(0, (size_t)mp * g->k * 2);
    char *cp = pad_get(1, (size_t)mp * g->n * cs);
    char *rp = res ? pad_get(2, (size_t)mp * g->n * cs) : NULL;
    int ok = ap && cp && (!res || rp);
    if (ok) {
        for (int i = 0; i < r; i++)
            memcpy(ap + (size_t)i * g->k, a + (size_t)i * g->lda, (size_t)g->k * 2);
        /* the padding rows: zeros (their C rows are computed, then dropped;
         * and R's padding rows zeros too) */
        memset(ap + (size_t)r * g->k, 0, (size_t)(mp - r) * g->k * 2);
        if (g->beta != 0)
            for (int i = 0; i < r; i++)
                memcpy(cp + (size_t)i * g->n * cs, c + (size_t)i * g->ldc * cs, (size_t)g->n * cs);
        if (res) {
            for (int i = 0; i < r; i++)
                memcpy(rp + (size_t)i * g->n * cs, res + (size_t)i * t->ldr * cs,
                       (size_t)g->n * cs);
            memset(rp + (size_t)r * g->n * cs, 0, (size_t)(mp - r) * g->n * cs);
        }
        ok = prim_run(p, ap, g->b, cp, rp);
        if (ok)
            for (int i = 0; i < r; i++)
                memcpy(c + (size_t)i * g->ldc * cs, cp + (size_t)i * g->n * cs, (size_t)g->n * cs);
    }
    return ok;
}

/* Rows [r0, r0 + r) of C for ta = 1 (A stored [k x m]): the k axis in
 * chunks, summed into C in order; the last chunk padded with zeros. */
static int run_chunks(const mp_gemm *g, int r0, int r, int relu, int prepare)
{
    if (g->c_st != MP_ST_ELEM || relu)
        return 0;   /* each chunk would round C again: the fallback does it */
    const uint16_t *a = g->a, *b = g->b;
    float *c = (float *)g->c + (size_t)r0 * g->ldc;
    int ok = 1;
    for (int k0 = 0; k0 < g->k && ok; k0 += BLK_K) {
        int t = g->k - k0 < BLK_K ? g->k - k0 : BLK_K;
        float beta = k0 == 0 ? (float)g->beta : 1.0f;
        prim_key k = { r, g->n, t, 1, g->tb, g->lda, g->ldb, g->ldc, 0, 0, 0, 0,
                       (float)g->alpha, beta };
        if (t == BLK_K || t == pow2_at_least(t)) {
            prim *p = prim_get(&k);
            const uint16_t *bp = g->tb ? b + k0 : b + (size_t)k0 * g->ldb;
            ok = p && (prepare || prim_run(p, a + (size_t)k0 * g->lda + r0, bp, c, NULL));
            continue;
        }
        /* padded copies: A^T rows [t x r] -> [kp x r], B -> [kp x n] */
        int kp = pow2_at_least(t);
        k.k = kp;
        k.lda = r;
        k.tb = 0;
        k.ldb = g->n;
        prim *p = prim_get(&k);
        if (!p || prepare) {
            ok = p != NULL;
            continue;
        }
        uint16_t *ap = pad_get(0, (size_t)kp * r * 2), *bp = pad_get(1, (size_t)kp * g->n * 2);
        ok = ap && bp;
        if (ok) {
            /* the padding rows of k: zeros, so they add nothing */
            memset(ap + (size_t)t * r, 0, (size_t)(kp - t) * r * 2);
            memset(bp + (size_t)t * g->n, 0, (size_t)(kp - t) * g->n * 2);
            for (int i = 0; i < t; i++)
                memcpy(ap + (size_t)i * r, a + (size_t)(k0 + i) * g->lda + r0, (size_t)r * 2);
            if (!g->tb)   /* rows of B as they are (the usual dW = X^T dY) */
                for (int i = 0; i < t; i++)
                    memcpy(bp + (size_t)i * g->n, b + (size_t)(k0 + i) * g->ldb,
                           (size_t)g->n * 2);
            else
                for (int i = 0; i < t; i++)
                    for (int j = 0; j < g->n; j++)
                        bp[(size_t)i * g->n + j] = b[(size_t)j * g->ldb + k0 + i];
            ok = prim_run(p, ap, bp, c, NULL);
        }
    }
    return ok;
}

/* Runs one task (prepare: only makes its primitives, returning 0 when one
 * cannot be made) with oneDNN held to this one thread. */
static int run_task(const task *t, int prepare)
{
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    int ok = t->g->ta ? !t->res && run_chunks(t->g, t->r0, t->r, t->relu, prepare)
                      : run_rows(t, prepare);
    omp_set_num_threads(saved);
    return ok;
}

/* The tasks of product g (a function of its shape); res, ldr: its
 * residual (task). */
static int tasks_of(const mp_gemm *g, int relu, const void *res, int ldr, task *t, int cap)
{
    int n = 0;
    if (g->ta) {
        double work = (double)g->m * g->n * g->k;
        int rows = work >= 8e6 && g->m >= 32 ? (((g->m + 1) / 2) + 15) & ~15 : g->m;
        for (int r0 = 0; r0 < g->m && n < cap; r0 += rows) {
            int r = g->m - r0 < rows ? g->m - r0 : rows;
            t[n++] = (task){ g, res, ldr, r0, r, relu, (double)r * g->n * g->k };
        }
        return n;
    }
    for (int r0 = 0; r0 < g->m && n < cap; r0 += BLK_M) {
        int r = g->m - r0 < BLK_M ? g->m - r0 : BLK_M;
        t[n++] = (task){ g, res, ldr, r0, r, relu, (double)r * g->n * g->k };
    }
    return n;
}
#endif /* MP_HAVE_DNNL */

const char *mp_cpu_bf16_info(void)
{
#if MP_HAVE_DNNL
    pthread_once(&dnnl_once, dnnl_setup);
    return dnnl_info;
#else
    return "built without oneDNN: fp32 sgemm on widened bf16 operands";
#endif
}

int mp_cpu_bf16_native(void)
{
#if MP_HAVE_DNNL
    pthread_once(&dnnl_once, dnnl_setup);
    return dnnl_ok;
#else
    return 0;
#endif
}

/* count products of bf16 A and B (gemm's contract, ops.h), relu: ReLU of
 * the result; res (count 1 only): C = ReLU(A B + R), R of C's storage with
 * stride ldr, g->beta 0.  Returns 0, having written nothing, where the
 * product needs the fallback (res given) or done[] says which it did. */
static int gemm_bf16(int count, const mp_gemm *g, int relu, const void *res, int ldr,
                     int *done)
{
#if MP_HAVE_DNNL
    enum { CAP = 4096 };
    task *t = mp_cpu_bf16_native() ? mp_malloc(CAP * sizeof *t) : NULL;
    if (!t)   /* no memory for the task list: the fallback does it all */
        return 0;
    int n = 0;
    for (int i = 0; i < count && i < 8; i++) {
        if (g[i].m <= 0 || g[i].n <= 0 || g[i].k <= 0 || g[i].a_st != MP_ST_BF16 ||
            g[i].b_st != MP_ST_BF16)
            continue;
        /* every primitive the product needs is made first (one ~2 ms JIT
         * per new shape); a product oneDNN cannot serve goes to the
         * fallback whole, before anything is written */
        int nm = tasks_of(&g[i], relu, res, ldr, t + n, CAP - n);
        int ok = nm > 0 && t[n + nm - 1].r0 + t[n + nm - 1].r == g[i].m;
        for (int q = 0; q < nm && ok; q++)
            ok = run_task(&t[n + q], 1);
        if (!ok)
            continue;
        n += nm;
        done[i] = 1;
    }
    for (int i = 1; i < n; i++)   /* largest first: a fixed order */
        for (int j = i; j > 0 && t[j - 1].work < t[j].work; j--) {
            task x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    int bad = 0, nt = mp_threads_get();
    if (nt > n)
        nt = n;
    if (nt <= 1) {
        for (int i = 0; i < n; i++)
            bad |= !run_task(&t[i], 0);
    } else {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) reduction(| : bad)
        for (int i = 0; i < n; i++)
            bad |= !run_task(&t[i], 0);
    }
    /* with its primitives made, a run fails only when a few hundred KB
     * of padding (or oneDNN's scratchpad) cannot be allocated */
    MP_ASSERT(!bad);
    mp_free(t);
    return 1;
#else
    (void)count, (void)g, (void)relu, (void)res, (void)ldr, (void)done;
    return 0;
#endif
}

void mp_cpu_gemm_bf16(int count, const mp_gemm *g, int relu)
{
    int done[8] = { 0 };
    gemm_bf16(count, g, relu, NULL, 0, done);
    for (int i = 0; i < count; i++) {
        if (done[i] || g[i].m <= 0 || g[i].n <= 0)
            continue;
        MP_ASSERT(fallback(&g[i], relu));
    }
}

void mp_cpu_gemm_bf16_res_relu(const mp_gemm *g, const void *r, int ldr)
{
    MP_ASSERT(g->beta == 0 && !g->ta);
    int done[8] = { 0 };
    if (g->m <= 0 || g->n <= 0)
        return;
    gemm_bf16(1, g, 1, r, ldr, done);
    if (done[0])
        return;
    /* the fallback: R copied into C, then C = ReLU(C + A B) */
    size_t cs = g->c_st == MP_ST_BF16 ? 2 : 4;
    for (int i = 0; i < g->m; i++)
        memcpy((char *)g->c + (size_t)i * g->ldc * cs, (const char *)r + (size_t)i * ldr * cs,
               (size_t)g->n * cs);
    mp_gemm f = *g;
    f.beta = 1.0;
    mp_cpu_gemm_bf16(1, &f, 1);
}
