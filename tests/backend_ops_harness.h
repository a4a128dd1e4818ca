/*
 * backend_ops_harness.h - the op table's harness (test_backend_ops.c has
 * the method): tensors on a tested backend and on ref64, random inputs,
 * poisoned outputs, the comparison and the rerun for equal bytes, and the
 * table runner with its test macro (BO_TABLE_TEST).  Static functions,
 * included by the op-table test files.
 */
#ifndef MP_BACKEND_OPS_HARNESS_H
#define MP_BACKEND_OPS_HARNESS_H

#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Every helper is static; a file may use only some of them. */
#define BO_STATIC static __attribute__((unused))

/* ===================================================================== */
/* Tolerances                                                             */
/* ===================================================================== */

BO_STATIC const double TOL_ELEM = 1e-5;                     /* an fp32 result of fp32 operations */
BO_STATIC const double TOL_GEMM[3] = { 1e-5, 2e-3, 2e-2 };  /* of fp32 buffers: fp32, tf32, bf16 */
BO_STATIC const double TOL_GEMM_BF16 = 1e-4;                /* a product of bf16 operands, fp32 C */
BO_STATIC const double TOL_BF16 = 1e-2;                     /* a value stored in bf16 */

/* ===================================================================== */
/* The harness                                                            */
/* ===================================================================== */

typedef struct {
    const char *name;     /* as mp_backend_open takes it */
    int         prec;     /* products of fp32 buffers: 0 fp32, 1 tf32, 2 bf16 */
    int         big;      /* also the large sizes (the GPU; plain loops are slow) */
} be_spec;

#define MAX_T 48

/* A buffer on both backends: [0] the tested one, [1] the oracle. */
typedef struct {
    mp_stype st;
    size_t   n;        /* elements (raw: bytes) */
    int      raw;      /* index bytes, the same on both sides */
    float   *init;     /* the values it starts with; NULL: poisoned */
    void    *p[2];
    double   tol;      /* for an output */
    int      zeros;    /* an output whose zero pattern must agree */
    const char *name;
} tens;

typedef struct {
    mp_backend   *b[2];
    const be_spec *spec;
    mp_rng        rng;
    tens          t[MAX_T];
    int           nt;
    int           failed;
    int           cases;
    char          err[1200];
} bo;

typedef void (*op_fn)(mp_backend *b, int s, const void *arg);

/* The side-s pointer of a tensor. */
#define S(t) ((t)->p[s])

BO_STATIC int bo_fail(bo *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

BO_STATIC int bo_fail(bo *x, const char *fmt, ...)
{
    if (!x->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err, sizeof x->err, fmt, ap);
        va_end(ap);
    }
    x->failed = 1;
    return 0;
}

BO_STATIC size_t t_bytes(const bo *x, const tens *t, int side)
{
    return t->raw ? t->n : t->n * mp_stype_size(x->b[side], t->st);
}

/* Writes t's initial values (or the poison) to side `side`. */
BO_STATIC int t_put(bo *x, tens *t, int side)
{
    mp_backend *b = x->b[side];
    size_t bytes = t_bytes(x, t, side);
    if (!bytes || t->raw)
        return 1;
    unsigned char *h = mp_malloc(bytes);
    if (!h)
        return bo_fail(x, "out of host memory");
    if (!t->init)
        memset(h, 0xFF, bytes);
    else
        for (size_t i = 0; i < t->n; i++) {
            if (t->st == MP_ST_BF16)
                ((uint16_t *)h)[i] = mp_bf16_round(t->init[i]);
            else if (b->esize == sizeof(double))
                ((double *)h)[i] = t->init[i];
            else
                ((float *)h)[i] = t->init[i];
        }
    mp_status st = b->upload(b, t->p[side], h, bytes);
    mp_free(h);
    return st == MP_OK ? 1 : bo_fail(x, "upload to %s: %s", b->name, mp_error_message());
}

BO_STATIC tens *t_new(bo *x, const char *name, mp_stype st, size_t n, int raw)
{
    if (x->failed)
        return NULL;
    if (x->nt == MAX_T) {
        bo_fail(x, "test harness: more than %d buffers in one case", MAX_T);
        return NULL;
    }
    tens *t = &x->t[x->nt++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->st = st;
    t->n = n;
    t->raw = raw;
    for (int side = 0; side < 2; side++) {
        size_t bytes = t_bytes(x, t, side);
        t->p[side] = x->b[side]->alloc(x->b[side], bytes ? bytes : 1);
        if (!t->p[side]) {
            bo_fail(x, "%s: cannot allocate %zu bytes: %s", x->b[side]->name, bytes,
                    mp_error_message());
            return NULL;
        }
    }
    return t;
}

/* An input (or an accumulating output: tol > 0) of random values in
 * [lo, hi), the same on both sides (rounded to bf16 first when st is). */
BO_STATIC tens *t_rand(bo *x, const char *name, mp_stype st, size_t n, double lo, double hi)
{
    tens *t = t_new(x, name, st, n, 0);
    if (!t)
        return NULL;
    t->init = mp_malloc((n ? n : 1) * sizeof(float));
    if (!t->init) {
        bo_fail(x, "out of host memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        float v = (float)(lo + (hi - lo) * mp_rng_uniform(&x->rng));
        t->init[i] = st == MP_ST_BF16 ? mp_bf16_value(mp_bf16_round(v)) : v;
    }
    return t_put(x, t, 0) && t_put(x, t, 1) ? t : NULL;
}

/* A ReLU output (about 40% exact zeros): the y of the backward ops. */
BO_STATIC tens *t_relu_like(bo *x, const char *name, mp_stype st, size_t n)
{
    tens *t = t_rand(x, name, st, n, -1, 1);
    if (!t)
        return NULL;
    for (size_t i = 0; i < n; i++)
        t->init[i] = t->init[i] < -0.2f ? 0.0f : t->init[i] + 0.25f;
    return t_put(x, t, 0) && t_put(x, t, 1) ? t : NULL;
}

/* A poisoned output checked to `tol`. */
BO_STATIC tens *t_out(bo *x, const char *name, mp_stype st, size_t n, double tol)
{
    tens *t = t_new(x, name, st, n, 0);
    if (!t)
        return NULL;
    t->tol = tol;
    return t_put(x, t, 0) && t_put(x, t, 1) ? t : NULL;
}

/* Makes an input tensor an output checked to tol (it starts from its values). */
BO_STATIC tens *t_acc(tens *t, double tol)
{
    if (t)
        t->tol = tol;
    return t;
}

/* Index bytes (graph arrays), the same on both sides. */
BO_STATIC tens *t_raw(bo *x, const void *h, size_t bytes)
{
    tens *t = t_new(x, "index", MP_ST_ELEM, bytes, 1);
    if (!t)
        return NULL;
    for (int side = 0; side < 2 && bytes; side++)
        if (x->b[side]->upload(x->b[side], t->p[side], h, bytes) != MP_OK) {
            bo_fail(x, "upload: %s", mp_error_message());
            return NULL;
        }
    return t;
}

/* Frees every buffer of the case. */
BO_STATIC void bo_reset(bo *x)
{
    for (int i = 0; i < x->nt; i++) {
        for (int side = 0; side < 2; side++)
            x->b[side]->free(x->b[side], x->t[i].p[side]);
        mp_free(x->t[i].init);
    }
    x->nt = 0;
}

/* Side `side` of t as doubles (and its bytes when raw != NULL). */
BO_STATIC double *t_get(bo *x, const tens *t, int side, void **raw)
{
    mp_backend *b = x->b[side];
    size_t bytes = t_bytes(x, t, side);
    void *h = mp_malloc(bytes ? bytes : 1);
    double *v = mp_malloc((t->n ? t->n : 1) * sizeof(double));
    if (!h || !v || (bytes && b->download(b, h, t->p[side], bytes) != MP_OK)) {
        bo_fail(x, "download from %s: %s", b->name, mp_error_message());
        mp_free(h);
        mp_free(v);
        return NULL;
    }
    for (size_t i = 0; i < t->n; i++)
        v[i] = t->st == MP_ST_BF16 ? mp_bf16_value(((uint16_t *)h)[i])
               : b->esize == sizeof(double) ? ((double *)h)[i] : ((float *)h)[i];
    if (raw)
        *raw = h;
    else
        mp_free(h);
    return v;
}

/* The tested side of an output against the oracle's. */
BO_STATIC int t_check(bo *x, const char *what, const tens *t, void **raw)
{
    double *g = t_get(x, t, 0, raw), *r = g ? t_get(x, t, 1, NULL) : NULL;
    if (!g || !r) {
        mp_free(g);
        return 0;
    }
    double d2 = 0, r2 = 0;
    int ok = 1;
    for (size_t i = 0; ok && i < t->n; i++) {
        int gn = isnan(g[i]), rn = isnan(r[i]);
        if (gn && rn)
            continue;
        if (gn != rn)
            ok = bo_fail(x, "%s: %s[%zu] of %zu: %s %.9g, ref64 %.9g (%s)", what, t->name, i,
                         t->n, x->spec->name, g[i], r[i],
                         gn ? "not written, or NaN" : "written by the tested side only");
        else if (t->zeros && (g[i] == 0) != (r[i] == 0))
            ok = bo_fail(x, "%s: %s[%zu]: %s %.9g, ref64 %.9g (one side dropped or zeroed it)",
                         what, t->name, i, x->spec->name, g[i], r[i]);
        d2 += (g[i] - r[i]) * (g[i] - r[i]);
        r2 += r[i] * r[i];
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    if (ok && mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
        printf("    %-96s %-7s rel %.3g (bound %.3g)\n", what, t->name, rel, t->tol);
    if (ok && !(rel <= t->tol))
        ok = bo_fail(x, "%s: %s: relative error %.3g > %.3g over %zu elements", what, t->name,
                     rel, t->tol, t->n);
    mp_free(g);
    mp_free(r);
    return ok;
}

/*
 * Runs op on the oracle and the tested backend, checks each output, resets
 * the outputs on the tested side and runs it there again (the cpu backend
 * on 2 threads after 1) for the same bytes.
 */
BO_STATIC int bo_run(bo *x, const char *what, op_fn op, const void *arg, tens *const *outs,
                  int n_outs)
{
    if (x->failed)
        return 0;
    for (int i = 0; i < n_outs; i++)
        if (!outs[i])
            return bo_fail(x, "%s: set-up failed", what);
    x->cases++;
    void *first[8] = { 0 };
    int ok = n_outs <= 8;
    mp_threads_set(1);
    op(x->b[1], 1, arg);
    op(x->b[0], 0, arg);
    if (x->b[0]->sync(x->b[0]) != MP_OK)
        ok = bo_fail(x, "%s: %s reported: %s", what, x->spec->name, mp_error_message());
    for (int i = 0; ok && i < n_outs; i++)
        ok = t_check(x, what, outs[i], &first[i]);
    for (int i = 0; ok && i < n_outs; i++)
        ok = t_put(x, outs[i], 0);
    mp_threads_set(2);
    if (ok) {
        op(x->b[0], 0, arg);
        if (x->b[0]->sync(x->b[0]) != MP_OK)
            ok = bo_fail(x, "%s (second run): %s", what, mp_error_message());
    }
    for (int i = 0; ok && i < n_outs; i++) {
        void *now = NULL;
        double *v = t_get(x, outs[i], 0, &now);
        size_t bytes = t_bytes(x, outs[i], 0);
        if (!v)
            ok = 0;
        else if (bytes && memcmp(now, first[i], bytes) != 0)
            ok = bo_fail(x, "%s: %s: a second run gave other bytes%s", what, outs[i]->name,
                         x->b[0]->host_memory ? " (1 vs 2 threads)" : "");
        mp_free(v);
        mp_free(now);
    }
    mp_threads_set(0);
    for (int i = 0; i < 8; i++)
        mp_free(first[i]);
    return ok;
}

/* The storage types a backend's model gives an operand: the element type,
 * and also bf16 where the backend stores its product operands so. */
BO_STATIC int n_st(const bo *x) { return x->b[0]->act_st == MP_ST_BF16 ? 2 : 1; }
BO_STATIC mp_stype st_at(int i) { return i ? MP_ST_BF16 : MP_ST_ELEM; }
BO_STATIC const char *st_str(mp_stype st) { return st == MP_ST_BF16 ? "bf16" : "elem"; }
BO_STATIC double tol_st(mp_stype st) { return st == MP_ST_BF16 ? TOL_BF16 : TOL_ELEM; }

/* ===================================================================== */
/* The table                                                              */
/* ===================================================================== */

/* An entry of a file's op table: a name for its line, and its cases. */
typedef struct {
    const char *name;
    void (*run)(bo *x);
} bo_case;

/* Runs cases[0..n_cases) on backend `spec` against ref64, the inputs drawn
 * from the stream (seed, spec->prec); a line per entry.  Returns 0 with the
 * message in err (or the skip reason, *skip set). */
BO_STATIC int bo_table(const be_spec *spec, const bo_case *cases, size_t n_cases, uint64_t seed,
                       int *skip, char *err, size_t n)
{
    bo x;
    memset(&x, 0, sizeof x);
    x.spec = spec;
    *skip = 0;
    char why[256];
    if (!mp_backend_available(spec->name, why, sizeof why)) {
        *skip = 1;
        snprintf(err, n, "%s: %s", spec->name, why);
        return 0;
    }
    if (mp_backend_open(&x.b[0], spec->name) != MP_OK ||
        mp_backend_open(&x.b[1], "ref64") != MP_OK) {
        snprintf(err, n, "%s: %s", spec->name, mp_error_message());
        mp_backend_close(x.b[0]);
        return 0;
    }
    mp_rng_seed(&x.rng, seed, (uint64_t)spec->prec);
    for (size_t i = 0; i < n_cases && !x.failed; i++) {
        int before = x.cases;
        cases[i].run(&x);
        bo_reset(&x);
        printf("    %s: %-48s %5d cases%s\n", spec->name, cases[i].name, x.cases - before,
               x.failed ? "  FAILED" : "");
    }
    mp_threads_set(0);
    snprintf(err, n, "%s", x.err);
    mp_backend_close(x.b[0]);
    mp_backend_close(x.b[1]);
    return !x.failed;
}

/* Test `tname`: the table `cases` (an array of bo_case) with `seed` on
 * backend `bname` (products in precision `prec`, the large sizes when
 * `big`; skipped without a GPU when `gpu`). */
#define BO_TABLE_TEST(tname, bname, prec, big, gpu, cases, seed)                     \
    MP_TEST(tname)                                                                 \
    {                                                                              \
        static const be_spec spec = { bname, prec, big };                         \
        char err_[1300];                                                           \
        int skip_;                                                                 \
        if (gpu)                                                                   \
            MP_NEED_GPU();                                                         \
        int ok_ = bo_table(&spec, cases, sizeof cases / sizeof cases[0], seed, &skip_, \
                           err_, sizeof err_);                                     \
        if (skip_)                                                                 \
            MP_SKIP(err_);                                                         \
        CHECK_MSG(ok_, "%s", err_);                                                \
    }

#endif /* MP_BACKEND_OPS_HARNESS_H */
