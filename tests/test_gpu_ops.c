/*
 * test_gpu_ops.c - the cuda backend (src/gpu) against the double-precision
 * reference backend ("ref64", the plain-loop oracle of models/ops_ref.c).
 *
 * For every op: fresh random inputs at several sizes (hidden 1, 7, 300, 301;
 * batches with empty molecules and molecules without bonds), the same op on
 * both backends, and the relative error ||gpu - ref|| / ||ref|| of every
 * output checked against the bound of its precision (fp32 1e-5; the dense
 * products also at tf32 2e-3 and bf16 2e-2).  Outputs are poisoned first
 * (0xFF bytes = NaN on the GPU, NaN on the reference), so an element the GPU
 * fails to write, or writes where the reference does not, is a failure.
 * Every op then runs a second time on the same inputs and must give the same
 * bytes (determinism).  Accumulating outputs (weight gradients, gemm with
 * beta 1, column sums) start from the same random values on both sides.
 *
 * Where there is no GPU (or molprop was built with CUDA=0) the GPU tests are
 * skipped with the reason; MOLPROP_REQUIRE_GPU=1 (make test-gpu) turns that
 * skip into a failure.  The tests of the no-GPU answers themselves always run.
 */
#include "test.h"
#include "gpu_test.h"

#include "gpu/gpu.h"
#include "models/model.h"
#include "backend/ops.h"
#include "../bench/gpu_step.h"
#include "randgraph.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

/* ===================================================================== */
/* Fixture                                                                */
/* ===================================================================== */

static const double TOL_FP32 = 1e-5;
static const double TOL_PREC[3] = { 1e-5, 2e-3, 2e-2 };   /* gemm: fp32, tf32, bf16 */

/* MOLPROP_GPU_TESTS_ON=cpu (or ref) runs the op checks on that float
 * backend instead of the GPU: a check of the checks themselves on a machine
 * without a GPU. */
static const char *on_cpu(void)
{
    const char *s = getenv("MOLPROP_GPU_TESTS_ON");
    return s && (strcmp(s, "cpu") == 0 || strcmp(s, "ref") == 0) ? s : NULL;
}

#define MAX_BUFS 64

typedef struct {
    mp_backend *g;          /* cuda              */
    mp_backend *r;          /* ref64 (double)    */
    mp_rng      rng;
    void       *gb[MAX_BUFS], *rb[MAX_BUFS];
    int         ngb, nrb;
    char        err[1024];
} fx;

/* Opens the cuda backend at `prec` and the oracle, or skips (fails under
 * MOLPROP_REQUIRE_GPU=1) when there is no GPU. */
#define FX_OPEN(f, prec, seed)                                                       \
    do {                                                                             \
        char why_[256], msg_[320];                                                   \
        memset(&(f), 0, sizeof(f));                                                  \
        if (on_cpu()) {                                                              \
            CHECK_OK(mp_backend_open(&(f).g, on_cpu()));                             \
        } else if (!mp_backend_cuda_available(why_, sizeof why_)) {                  \
            if (mp_test_env_flag("MOLPROP_REQUIRE_GPU"))                             \
                MP_FAIL("no GPU (MOLPROP_REQUIRE_GPU=1): %s", why_);                 \
            snprintf(msg_, sizeof msg_, "no GPU: %s", why_);                         \
            MP_SKIP(msg_);                                                           \
        } else {                                                                     \
            CHECK_OK(mp_backend_cuda_open(&(f).g, (prec)));                          \
        }                                                                            \
        mp_status st_ = mp_backend_ref_open(&(f).r, MP_F64);                         \
        if (st_ != MP_OK) {                                                          \
            mp_backend_close((f).g);                                                 \
            CHECK_OK(st_);                                                           \
        }                                                                            \
        mp_rng_seed(&(f).rng, (seed), 7);                                            \
    } while (0)

static void fx_close(fx *f)
{
    for (int i = 0; i < f->ngb; i++)
        f->g->free(f->g, f->gb[i]);
    for (int i = 0; i < f->nrb; i++)
        f->r->free(f->r, f->rb[i]);
    f->ngb = f->nrb = 0;
    mp_backend_close(f->g);
    mp_backend_close(f->r);
    f->g = f->r = NULL;
}

/* Ends a test: frees everything, then fails with f->err if a step failed. */
#define FX_END(f, ok)                                                                \
    do {                                                                             \
        int ok_ = (ok);                                                              \
        fx_close(&(f));                                                              \
        CHECK_MSG(ok_, "%s", (f).err);                                               \
    } while (0)

static int fail(fx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(fx *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return 0;
}

/* Frees the buffers of one case (between sizes), keeping the backends. */
static void fx_reset(fx *f)
{
    for (int i = 0; i < f->ngb; i++)
        f->g->free(f->g, f->gb[i]);
    for (int i = 0; i < f->nrb; i++)
        f->r->free(f->r, f->rb[i]);
    f->ngb = f->nrb = 0;
}

static void *galloc(fx *f, size_t bytes)
{
    if (f->ngb == MAX_BUFS)
        return NULL;
    void *p = f->g->alloc(f->g, bytes ? bytes : 1);
    if (p)
        f->gb[f->ngb++] = p;
    return p;
}

static void *ralloc(fx *f, size_t bytes)
{
    if (f->nrb == MAX_BUFS)
        return NULL;
    void *p = f->r->alloc(f->r, bytes ? bytes : 1);
    if (p)
        f->rb[f->nrb++] = p;
    return p;
}

/* A float buffer of n elements on both backends: values from `h` (NULL:
 * poison, 0xFF bytes on the GPU and NaN on the reference). */
typedef struct {
    void  *g, *r;
    size_t n;
} pair;

static int gpu_poison(fx *f, void *g, size_t n)
{
    if (!n)
        return 1;
    void *t = mp_malloc(n * sizeof(float));
    if (!t)
        return fail(f, "out of host memory");
    memset(t, 0xFF, n * sizeof(float));
    mp_status st = f->g->upload(f->g, g, t, n * sizeof(float));
    mp_free(t);
    return st == MP_OK ? 1 : fail(f, "poison upload: %s", mp_error_message());
}

static int pair_make(fx *f, pair *p, const float *h, size_t n)
{
    p->n = n;
    p->g = galloc(f, n * sizeof(float));
    p->r = ralloc(f, n * sizeof(double));
    if (!p->g || !p->r)
        return fail(f, "allocation of %zu floats failed: %s", n, mp_error_message());
    if (!h) {
        double *rr = p->r;
        for (size_t i = 0; i < n; i++)
            rr[i] = NAN;
        return gpu_poison(f, p->g, n);
    }
    if (n && (gs_put(f->g, p->g, h, n) != MP_OK || gs_put(f->r, p->r, h, n) != MP_OK))
        return fail(f, "upload: %s", mp_error_message());
    return 1;
}

/* n random floats in [-1, 1) (host, owned by the caller). */
static float *rand_floats(fx *f, size_t n)
{
    float *x = mp_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; x && i < n; i++)
        x[i] = (float)(2 * mp_rng_uniform(&f->rng) - 1);
    return x;
}

static int pair_rand(fx *f, pair *p, size_t n)
{
    float *h = rand_floats(f, n);
    if (!h)
        return fail(f, "out of host memory");
    int ok = pair_make(f, p, h, n);
    mp_free(h);
    return ok;
}

/* Raw bytes (index arrays) on both backends. */
static int raw_make(fx *f, void **g, void **r, const void *h, size_t bytes)
{
    *g = galloc(f, bytes);
    *r = ralloc(f, bytes);
    if (!*g || !*r)
        return fail(f, "allocation of %zu bytes failed: %s", bytes, mp_error_message());
    if (bytes && (f->g->upload(f->g, *g, h, bytes) != MP_OK || f->r->upload(f->r, *r, h, bytes) != MP_OK))
        return fail(f, "upload: %s", mp_error_message());
    return 1;
}

/*
 * Compares the GPU buffer with the reference: both NaN counts as equal (an
 * element neither side wrote), one NaN is a failure, and otherwise
 * ||gpu - ref|| / ||ref|| <= tol (||gpu - ref|| <= tol when ref is all 0).
 * On success, *bytes (if not NULL) receives a copy of the GPU buffer's bytes
 * for the determinism check (caller frees).
 */
static int compare_ex(fx *f, const char *what, const pair *p, double tol, int exact_zeros,
                      void **bytes)
{
    size_t n = p->n;
    double *gv = mp_malloc((n ? n : 1) * sizeof(double));
    double *rv = mp_malloc((n ? n : 1) * sizeof(double));
    void *raw = mp_malloc((n ? n : 1) * sizeof(float));
    int ok = 0;
    if (!gv || !rv || !raw) {
        fail(f, "out of host memory");
        goto out;
    }
    if (f->g->sync(f->g) != MP_OK) {
        fail(f, "%s: the GPU reported: %s", what, mp_error_message());
        goto out;
    }
    if (gs_get(f->g, gv, p->g, n) != MP_OK || gs_get(f->r, rv, p->r, n) != MP_OK ||
        f->g->download(f->g, raw, p->g, n * sizeof(float)) != MP_OK) {
        fail(f, "%s: download: %s", what, mp_error_message());
        goto out;
    }
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        int gn = isnan(gv[i]), rn = isnan(rv[i]);
        if (gn && rn)
            continue;
        if (gn != rn) {
            fail(f, "%s: element %zu of %zu: gpu %.9g, ref %.9g (%s)", what, i, n, gv[i], rv[i],
                 gn ? "not written by the GPU, or NaN" : "written by the GPU only");
            goto out;
        }
        if (exact_zeros && (gv[i] == 0) != (rv[i] == 0)) {
            fail(f, "%s: element %zu of %zu: gpu %.9g, ref %.9g (one side dropped or zeroed it)",
                 what, i, n, gv[i], rv[i]);
            goto out;
        }
        d2 += (gv[i] - rv[i]) * (gv[i] - rv[i]);
        r2 += rv[i] * rv[i];
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    if (mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
        printf("    %-90s rel %.3g (bound %.3g)\n", what, rel, tol);
    if (!(rel <= tol)) {
        size_t worst = 0;
        double wd = -1;
        for (size_t i = 0; i < n; i++)
            if (!isnan(rv[i]) && fabs(gv[i] - rv[i]) > wd) {
                wd = fabs(gv[i] - rv[i]);
                worst = i;
            }
        fail(f, "%s: relative error %.3g > %.3g over %zu elements (worst: element %zu, gpu %.9g, "
             "ref %.9g)", what, rel, tol, n, worst, gv[worst], rv[worst]);
        goto out;
    }
    ok = 1;
    if (bytes) {
        *bytes = raw;
        raw = NULL;
    }
out:
    mp_free(gv);
    mp_free(rv);
    mp_free(raw);
    return ok;
}

static int compare(fx *f, const char *what, const pair *p, double tol, void **bytes)
{
    return compare_ex(f, what, p, tol, 0, bytes);
}

/* After a second GPU run: the buffer must hold exactly the bytes of *first
 * (from compare).  Frees *first and sets it to NULL. */
static int same_bytes(fx *f, const char *what, const pair *p, void **first)
{
    size_t bytes = p->n * sizeof(float);
    void *now = mp_malloc(bytes ? bytes : 1);
    int ok = 0;
    if (!now)
        fail(f, "out of host memory");
    else if (f->g->sync(f->g) != MP_OK || f->g->download(f->g, now, p->g, bytes) != MP_OK)
        fail(f, "%s (second run): %s", what, mp_error_message());
    else if (memcmp(now, *first, bytes) != 0) {
        size_t i = 0;
        while (i < p->n && !memcmp((char *)now + i * 4, (char *)*first + i * 4, 4))
            i++;
        fail(f, "%s: not deterministic: a second run differs at element %zu of %zu", what, i,
             p->n);
    } else
        ok = 1;
    mp_free(now);
    mp_free(*first);
    *first = NULL;
    return ok;
}

/* Re-uploads a pair's GPU side from host values (NULL = poison) before a
 * second run. */
static int regpu(fx *f, pair *p, const float *h)
{
    if (!h)
        return gpu_poison(f, p->g, p->n);
    if (p->n && gs_put(f->g, p->g, h, p->n) != MP_OK)
        return fail(f, "upload: %s", mp_error_message());
    return 1;
}

/* ===================================================================== */
/* Random graphs on both backends                                         */
/* ===================================================================== */

typedef struct {
    mp_graphs h;
    void *hot[2], *mass[2], *bond[2], *src[2], *dst[2], *in_start[2], *in_edge[2],
         *mol_atom[2];   /* [0] gpu, [1] ref */
} dgraph;

/* The batches every graph op is tried on: a handful of small molecules, a
 * training batch of 50 drug-sized ones (27 atoms, 29 bonds on average), one
 * large enough for many reduction chunks, one whose molecules are all
 * empty (invalid SMILES), and one with atoms but no bond at all.  Empty and
 * bond-less molecules also appear inside the others. */
typedef struct {
    int32_t n_mols;
    rg_opts o;
} batch_shape;

static const batch_shape BATCHES[] = {
    { 7, { 1, 11, 0.15, 0.15, 2 } },
    { 50, { 1, 53, 0.05, 0.05, 6 } },
    { 400, { 1, 53, 0.02, 0.02, 6 } },
    { 3, { 1, 5, 1.0, 0.0, 0 } },
    { 5, { 1, 4, 0.0, 1.0, 0 } },
};
static const int HIDDEN[] = { 1, 7, 300, 301 };
#define N_BATCHES ((int)(sizeof BATCHES / sizeof BATCHES[0]))
#define N_HIDDEN  ((int)(sizeof HIDDEN / sizeof HIDDEN[0]))

/* A random batch of shape bi whose hot atom slots are [0, n_atom_slots) (the
 * mass row is n_atom_slots), on both backends. */
static int dgraph_make(fx *f, dgraph *d, int bi, int n_atom_slots)
{
    memset(d, 0, sizeof *d);
    if (!rg_make(&d->h, &f->rng, BATCHES[bi].n_mols, n_atom_slots + 1, &BATCHES[bi].o))
        return fail(f, "random graph: out of memory");
    const mp_graphs *g = &d->h;
    size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges;
    return raw_make(f, &d->hot[0], &d->hot[1], g->atom_hot, A * MP_ATOM_MAX_HOT * 2) &&
           raw_make(f, &d->mass[0], &d->mass[1], g->atom_mass, A * sizeof(float)) &&
           raw_make(f, &d->bond[0], &d->bond[1], g->bond_hot, E / 2 * MP_BOND_MAX_HOT) &&
           raw_make(f, &d->src[0], &d->src[1], g->edge_src, E * 4) &&
           raw_make(f, &d->dst[0], &d->dst[1], g->edge_dst, E * 4) &&
           raw_make(f, &d->in_start[0], &d->in_start[1], g->in_start, (A + 1) * 4) &&
           raw_make(f, &d->in_edge[0], &d->in_edge[1], g->in_edge, E * 4) &&
           raw_make(f, &d->mol_atom[0], &d->mol_atom[1], g->mol_atom, ((size_t)g->n_mols + 1) * 4);
}

/* The large batch only with the small hidden sizes and 300, to keep the
 * reference's plain loops quick. */
static int skip_case(int bi, int h) { return BATCHES[bi].n_mols >= 400 && h == 301; }

/* ===================================================================== */
/* Tests that run everywhere                                              */
/* ===================================================================== */

MP_TEST(gpu_precision_names)
{
    mp_precision p;
    CHECK_OK(mp_precision_parse("fp32", &p));
    CHECK_EQ_INT(p, MP_PREC_FP32);
    CHECK_OK(mp_precision_parse("TF32", &p));
    CHECK_EQ_INT(p, MP_PREC_TF32);
    CHECK_OK(mp_precision_parse("bfloat16", &p));
    CHECK_EQ_INT(p, MP_PREC_BF16);
    CHECK_EQ_STR(mp_precision_name(MP_PREC_BF16), "bf16");
    CHECK_EQ_STR(mp_precision_name(MP_PREC_TF32), "tf32");
    CHECK_EQ_STR(mp_precision_name(MP_PREC_FP32), "fp32");
    CHECK_EQ_STR(mp_precision_name((mp_precision)9), "?");
    CHECK_EQ_INT(mp_precision_parse("fp16", &p), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "fp16") && strstr(mp_error_message(), "bf16"));

    mp_backend *b = (mp_backend *)1;
    CHECK_EQ_INT(mp_backend_cuda_open_name(&b, "cuda:fp64"), MP_ERR_ARG);
    CHECK(b == NULL);
    CHECK(strstr(mp_error_message(), "fp64") != NULL);
    CHECK_EQ_INT(mp_backend_cuda_open_name(&b, "cudax"), MP_ERR_ARG);
    CHECK_EQ_INT(mp_backend_cuda_open_name(&b, "cpu"), MP_ERR_ARG);
    CHECK_EQ_INT(mp_backend_cuda_open(&b, (mp_precision)7), MP_ERR_ARG);
    CHECK(b == NULL);
}

/* Without a GPU every open says why; with one, the backend describes it. */
MP_TEST(gpu_open_or_explain)
{
    char why[256] = "";
    int have = mp_backend_cuda_available(why, sizeof why);
    CHECK(why[0] != '\0');
    const char *names[] = { "cuda", "cuda:fp32", "cuda:tf32", "cuda:bf16" };
    for (int i = 0; i < 4; i++) {
        mp_backend *b = (mp_backend *)1;
        mp_status st = mp_backend_cuda_open_name(&b, names[i]);
        if (!have) {
            CHECK_EQ_INT(st, MP_ERR_NODEVICE);
            CHECK(b == NULL);
            CHECK_MSG(strstr(mp_error_message(), why) != NULL,
                      "open(%s) said '%s', the reason was '%s'", names[i], mp_error_message(), why);
            continue;
        }
        CHECK_OK(st);
        CHECK_EQ_INT(mp_backend_cuda_precision(b), i == 0 ? MP_PREC_FP32 : (mp_precision)(i - 1));
        CHECK(b->dtype == MP_F32 && b->esize == 4 && !b->host_memory);
        CHECK(mp_backend_cuda_sm_count(b) > 0);
        CHECK(mp_backend_cuda_memory(b) > ((size_t)1 << 30));
        CHECK_MSG(strstr(mp_backend_cuda_info(b), "SMs") && strstr(mp_backend_cuda_info(b), names[i][4] ? names[i] + 5 : "fp32"),
                  "info: %s", mp_backend_cuda_info(b));
        CHECK(mp_backend_cuda_stream(b) != NULL);
        printf("    %s: %s\n", names[i], mp_backend_cuda_info(b));
        CHECK_OK(b->sync(b));
        mp_backend_close(b);
    }
    /* not a cuda backend */
    mp_backend *r;
    CHECK_OK(mp_backend_ref_open(&r, MP_F32));
    CHECK_EQ_STR(mp_backend_cuda_info(r), "");
    CHECK_EQ_INT(mp_backend_cuda_sm_count(r), 0);
    mp_status st = mp_cuda_graph_begin(r);
    mp_backend_close(r);
    CHECK(st != MP_OK);
}

/* ===================================================================== */
/* Dense ops                                                              */
/* ===================================================================== */

static int case_gemm(fx *f, int prec, int ta, int tb, int m, int n, int k, int pad, double alpha,
                     double beta)
{
    int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t a_rows = (size_t)(ta ? k : m), b_rows = (size_t)(tb ? n : k);
    char what[160];
    snprintf(what, sizeof what, "gemm[%s](ta=%d tb=%d m=%d n=%d k=%d pad=%d alpha=%g beta=%g)",
             mp_precision_name((mp_precision)prec), ta, tb, m, n, k, pad, alpha, beta);
    pair A, B, C;
    float *c0 = beta != 0 ? rand_floats(f, (size_t)m * ldc) : NULL;
    int ok = (beta == 0 || c0) && pair_rand(f, &A, a_rows * lda) && pair_rand(f, &B, b_rows * ldb) &&
             pair_make(f, &C, c0, (size_t)m * ldc);
    void *first = NULL;
    if (ok) {
        f->r->gemm(f->r, ta, tb, m, n, k, alpha, A.r, lda, B.r, ldb, beta, C.r, ldc);
        f->g->gemm(f->g, ta, tb, m, n, k, alpha, A.g, lda, B.g, ldb, beta, C.g, ldc);
        ok = compare(f, what, &C, TOL_PREC[prec], &first) && regpu(f, &C, c0);
    }
    if (ok) {
        f->g->gemm(f->g, ta, tb, m, n, k, alpha, A.g, lda, B.g, ldb, beta, C.g, ldc);
        ok = same_bytes(f, what, &C, &first);
    }
    mp_free(c0);
    mp_free(first);
    fx_reset(f);
    return ok;
}

static int case_gemm_batch(fx *f, int prec, int count);

/* gemm_res_relu (ops.h): c = ReLU(r + a w) against the oracle, then again
 * for the same bytes.  pad widens every leading dimension (unaligned rows:
 * the GPU's fused path must state the true alignment); inplace: c == r. */
static int case_gemm_res_relu(fx *f, int prec, int m, int n, int k, int pad, int inplace)
{
    int lda = k + pad, ldw = n + pad, ldr = n + pad, ldc = n + pad;
    char what[160];
    snprintf(what, sizeof what, "gemm_res_relu[%s](m=%d n=%d k=%d pad=%d inplace=%d)",
             mp_precision_name((mp_precision)prec), m, n, k, pad, inplace);
    pair A, W, R, C;
    float *r0 = rand_floats(f, (size_t)m * ldr);
    int ok = r0 && pair_rand(f, &A, (size_t)m * lda) && pair_rand(f, &W, (size_t)k * ldw) &&
             pair_make(f, &R, r0, (size_t)m * ldr) &&
             (inplace || pair_make(f, &C, NULL, (size_t)m * ldc));
    const pair *out = inplace ? &R : &C;
    void *first = NULL;
    if (ok) {
        f->r->gemm_res_relu(f->r, m, n, k, A.r, lda, W.r, ldw, R.r, ldr, out->r, ldc);
        f->g->gemm_res_relu(f->g, m, n, k, A.g, lda, W.g, ldw, R.g, ldr, out->g, ldc);
        ok = compare(f, what, out, TOL_PREC[prec], &first) &&
             (inplace ? regpu(f, &R, r0) : regpu(f, &C, NULL));
    }
    if (ok) {
        f->g->gemm_res_relu(f->g, m, n, k, A.g, lda, W.g, ldw, R.g, ldr, out->g, ldc);
        ok = same_bytes(f, what, out, &first);
    }
    /* no negative output anywhere the product wrote: the ReLU ran */
    if (ok) {
        size_t nc = (size_t)m * ldc;
        float *c = mp_malloc(nc * sizeof(float) + 1);
        if (!c)
            ok = fail(f, "out of host memory");
        else if (f->g->download(f->g, c, out->g, nc * sizeof(float)) != MP_OK)
            ok = fail(f, "%s: download: %s", what, mp_error_message());
        for (size_t i = 0; ok && i < nc; i++)
            if ((int)(i % (size_t)ldc) < n && c[i] < 0)
                ok = fail(f, "%s: element %zu is negative (%g)", what, i, c[i]);
        mp_free(c);
    }
    mp_free(r0);
    mp_free(first);
    fx_reset(f);
    return ok;
}

static void gemm_all(fx *f, int prec, int *ok)
{
    static const int shapes[][3] = {
        { 1, 1, 1 }, { 7, 1, 7 }, { 1, 7, 300 }, { 300, 300, 300 }, { 301, 7, 300 },
        { 37, 301, 1 }, { 5, 3, 0 }, { 64, 1, 301 },
    };
    for (size_t s = 0; *ok && s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; *ok && t < 4; t++)
            for (int v = 0; *ok && v < 2; v++)
                *ok = case_gemm(f, prec, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                                v ? 3 : 0, v ? -0.5 : 1.0, v ? 1.0 : 0.0);
    /* D-MPNN-sized products, as the model calls them (W_h forward, its
     * weight gradient and its input gradient). */
    if (*ok)
        *ok = case_gemm(f, prec, 0, 0, 1500, 300, 300, 0, 1.0, 1.0);
    if (*ok)
        *ok = case_gemm(f, prec, 1, 0, 300, 300, 1500, 0, 1.0, 1.0);
    if (*ok)
        *ok = case_gemm(f, prec, 0, 1, 1500, 300, 300, 0, 1.0, 0.0);
    static const int counts[] = { 1, 2, 3, 8 };
    for (int i = 0; *ok && i < 4; i++)
        *ok = case_gemm_batch(f, prec, counts[i]);
    /* the fused update: the D-MPNN shapes (W_h over the edges, W_o in place
     * over the atoms), odd and empty ones */
    static const int rr[][5] = {
        { 1, 1, 1, 0, 0 }, { 7, 5, 3, 0, 0 }, { 7, 5, 3, 1, 1 }, { 5, 7, 0, 0, 0 },
        { 2502, 300, 300, 0, 0 }, { 1179, 300, 300, 0, 1 }, { 301, 300, 300, 3, 0 },
        { 300, 301, 7, 0, 1 },
    };
    for (size_t s = 0; *ok && s < sizeof rr / sizeof rr[0]; s++)
        *ok = case_gemm_res_relu(f, prec, rr[s][0], rr[s][1], rr[s][2], rr[s][3], rr[s][4]);
}

/* gemm_batch: count independent products of mixed shapes, each against the
 * oracle, then the whole batch again for the same bytes. */
static int case_gemm_batch(fx *f, int prec, int count)
{
    static const int shapes[][5] = {     /* ta, tb, m, n, k */
        { 1, 0, 300, 300, 1500 }, { 0, 1, 1500, 300, 300 }, { 0, 0, 7, 301, 33 },
        { 1, 1, 64, 1, 300 }, { 0, 0, 5, 3, 0 }, { 1, 0, 33, 7, 1 }, { 0, 1, 1, 1, 1 },
        { 0, 0, 301, 300, 7 },
    };
    char what[200];
    mp_gemm gg[8], gr[8];
    pair A[8], B[8], C[8];
    float *c0[8] = { 0 };
    void *first[8] = { 0 };
    int ok = count >= 1 && count <= 8;
    for (int i = 0; ok && i < count; i++) {
        int s = (i * 3 + count) % 8;
        int ta = shapes[s][0], tb = shapes[s][1], m = shapes[s][2], n = shapes[s][3], k = shapes[s][4];
        int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
        double beta = i & 1 ? 1.0 : 0.0;
        if (beta != 0 && !(c0[i] = rand_floats(f, (size_t)m * ldc)))
            ok = fail(f, "out of host memory");
        ok = ok && pair_rand(f, &A[i], (size_t)(ta ? k : m) * lda) &&
             pair_rand(f, &B[i], (size_t)(tb ? n : k) * ldb) && pair_make(f, &C[i], c0[i], (size_t)m * ldc);
        if (ok) {
            gg[i] = (mp_gemm){ ta, tb, m, n, k, 1.0, beta, A[i].g, B[i].g, C[i].g, lda, ldb, ldc };
            gr[i] = (mp_gemm){ ta, tb, m, n, k, 1.0, beta, A[i].r, B[i].r, C[i].r, lda, ldb, ldc };
        }
    }
    if (ok) {
        f->r->gemm_batch(f->r, count, gr);
        f->g->gemm_batch(f->g, count, gg);
    }
    for (int i = 0; ok && i < count; i++) {
        snprintf(what, sizeof what, "gemm_batch[%s](count=%d, product %d: ta=%d tb=%d m=%d n=%d k=%d beta=%g)",
                 mp_precision_name((mp_precision)prec), count, i, gg[i].ta, gg[i].tb, gg[i].m,
                 gg[i].n, gg[i].k, gg[i].beta);
        ok = compare(f, what, &C[i], TOL_PREC[prec], &first[i]) && regpu(f, &C[i], c0[i]);
    }
    if (ok)
        f->g->gemm_batch(f->g, count, gg);
    for (int i = 0; ok && i < count; i++) {
        snprintf(what, sizeof what, "gemm_batch[%s](count=%d, product %d)",
                 mp_precision_name((mp_precision)prec), count, i);
        ok = same_bytes(f, what, &C[i], &first[i]);
    }
    for (int i = 0; i < 8; i++) {
        mp_free(c0[i]);
        mp_free(first[i]);
    }
    fx_reset(f);
    return ok;
}

MP_TEST(gpu_gemm_fp32)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 11);
    int ok = 1;
    gemm_all(&f, MP_PREC_FP32, &ok);
    FX_END(f, ok);
}

MP_TEST(gpu_gemm_tf32)
{
    fx f;
    FX_OPEN(f, MP_PREC_TF32, 12);
    int ok = 1;
    gemm_all(&f, MP_PREC_TF32, &ok);
    FX_END(f, ok);
}

MP_TEST(gpu_gemm_bf16)
{
    fx f;
    FX_OPEN(f, MP_PREC_BF16, 13);
    int ok = 1;
    gemm_all(&f, MP_PREC_BF16, &ok);
    FX_END(f, ok);
}

static int case_rows(fx *f, int32_t rows, int cols)
{
    char what[128];
    int ld = cols + 3, ld2 = cols + 5;
    pair Y, R, D, S, CS, X;
    /* The column sums add values in [0, 1): a sum with cancellation has no
     * meaningful relative error, and the bias gradient is no test of that. */
    float *cs0 = rand_floats(f, (size_t)cols), *x0 = rand_floats(f, (size_t)rows * ld);
    for (size_t i = 0; x0 && i < (size_t)rows * ld; i++)
        x0[i] = 0.5f * (x0[i] + 1.0f);
    int ok = cs0 && x0 && pair_make(f, &Y, NULL, (size_t)rows * ld) && pair_rand(f, &R, (size_t)cols) &&
             pair_make(f, &D, NULL, (size_t)rows * ld2) && pair_rand(f, &S, (size_t)rows * ld) &&
             pair_make(f, &CS, cs0, (size_t)cols) && pair_make(f, &X, x0, (size_t)rows * ld);
    void *first = NULL;
    if (ok) {
        snprintf(what, sizeof what, "fill_rows(rows=%d cols=%d ld=%d)", (int)rows, cols, ld);
        f->r->fill_rows(f->r, Y.r, ld, R.r, rows, cols);
        f->g->fill_rows(f->g, Y.g, ld, R.g, rows, cols);
        ok = compare(f, what, &Y, TOL_FP32, &first) && regpu(f, &Y, NULL);
        if (ok) {
            f->g->fill_rows(f->g, Y.g, ld, R.g, rows, cols);
            ok = same_bytes(f, what, &Y, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "copy2d(rows=%d cols=%d)", (int)rows, cols);
        f->r->copy2d(f->r, D.r, ld2, S.r, ld, rows, cols);
        f->g->copy2d(f->g, D.g, ld2, S.g, ld, rows, cols);
        ok = compare(f, what, &D, TOL_FP32, &first) && regpu(f, &D, NULL);
        if (ok) {
            f->g->copy2d(f->g, D.g, ld2, S.g, ld, rows, cols);
            ok = same_bytes(f, what, &D, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "col_sum(rows=%d cols=%d ld=%d)", (int)rows, cols, ld);
        f->r->col_sum(f->r, CS.r, X.r, ld, rows, cols);
        f->g->col_sum(f->g, CS.g, X.g, ld, rows, cols);
        ok = compare(f, what, &CS, TOL_FP32, &first) && regpu(f, &CS, cs0);
        if (ok) {
            f->g->col_sum(f->g, CS.g, X.g, ld, rows, cols);
            ok = same_bytes(f, what, &CS, &first);
        }
    }
    mp_free(cs0);
    mp_free(x0);
    mp_free(first);
    fx_reset(f);
    return ok;
}

MP_TEST(gpu_rows_copy_colsum)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 21);
    static const int32_t rows[] = { 0, 1, 7, 64, 65, 300, 5000, 40000 };
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof rows / sizeof rows[0]; i++)
        for (int c = 0; ok && c < N_HIDDEN; c++)
            if (!(rows[i] > 5000 && HIDDEN[c] > 7))
                ok = case_rows(&f, rows[i], HIDDEN[c]);
    FX_END(f, ok);
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static int case_elementwise(fx *f, size_t n, double p)
{
    char what[128];
    uint64_t key = mp_rng_u64(&f->rng);
    float *y0 = rand_floats(f, n);
    pair Y, X, Out, Al, Dy, Dx, Al2;
    int ok = y0 && pair_make(f, &Y, y0, n) && pair_rand(f, &X, n) && pair_make(f, &Out, NULL, n) &&
             pair_rand(f, &Al, n) && pair_rand(f, &Dy, n) && pair_make(f, &Dx, NULL, n) &&
             pair_rand(f, &Al2, n);
    void *first = NULL;
    if (ok && p == 0) {
        snprintf(what, sizeof what, "add(n=%zu)", n);
        f->r->add(f->r, Y.r, X.r, n);
        f->g->add(f->g, Y.g, X.g, n);
        ok = compare(f, what, &Y, TOL_FP32, &first) && regpu(f, &Y, y0);
        if (ok) {
            f->g->add(f->g, Y.g, X.g, n);
            ok = same_bytes(f, what, &Y, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "relu_dropout(n=%zu p=%g)", n, p);
        f->r->relu_dropout(f->r, Out.r, X.r, n, p, key);
        f->g->relu_dropout(f->g, Out.g, X.g, n, p, key);
        ok = compare_ex(f, what, &Out, TOL_FP32, 1, &first) && regpu(f, &Out, NULL);
        if (ok) {
            f->g->relu_dropout(f->g, Out.g, X.g, n, p, key);
            ok = same_bytes(f, what, &Out, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "relu_dropout in place(n=%zu p=%g)", n, p);
        f->r->relu_dropout(f->r, Al.r, Al.r, n, p, key);
        f->g->relu_dropout(f->g, Al.g, Al.g, n, p, key);
        ok = compare_ex(f, what, &Al, TOL_FP32, 1, NULL);
    }
    if (ok) {
        /* y = Out (the forward's output): zero where dropped or inactive */
        snprintf(what, sizeof what, "relu_dropout_backward(n=%zu p=%g)", n, p);
        f->r->relu_dropout_backward(f->r, Dx.r, Out.r, Dy.r, n, p);
        f->g->relu_dropout_backward(f->g, Dx.g, Out.g, Dy.g, n, p);
        ok = compare_ex(f, what, &Dx, TOL_FP32, 1, &first) && regpu(f, &Dx, NULL);
        if (ok) {
            f->g->relu_dropout_backward(f->g, Dx.g, Out.g, Dy.g, n, p);
            ok = same_bytes(f, what, &Dx, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "relu_dropout_backward in place(n=%zu p=%g)", n, p);
        f->r->relu_dropout_backward(f->r, Al2.r, Out.r, Al2.r, n, p);
        f->g->relu_dropout_backward(f->g, Al2.g, Out.g, Al2.g, n, p);
        ok = compare_ex(f, what, &Al2, TOL_FP32, 1, NULL);
    }
    mp_free(y0);
    mp_free(first);
    fx_reset(f);
    return ok;
}

static int case_dropout(fx *f, int32_t rows, int cols, int ld, double p)
{
    char what[128];
    uint64_t key = mp_rng_u64(&f->rng);
    size_t n = (size_t)rows * ld;
    pair Y, X, Dx, Dy, Al;
    int ok = pair_make(f, &Y, NULL, n) && pair_rand(f, &X, n) && pair_make(f, &Dx, NULL, n) &&
             pair_rand(f, &Dy, n) && pair_rand(f, &Al, n);
    void *first = NULL;
    if (ok) {
        snprintf(what, sizeof what, "dropout(rows=%d cols=%d ld=%d p=%g)", (int)rows, cols, ld, p);
        f->r->dropout(f->r, Y.r, X.r, rows, cols, ld, p, key);
        f->g->dropout(f->g, Y.g, X.g, rows, cols, ld, p, key);
        ok = compare_ex(f, what, &Y, TOL_FP32, 1, &first) && regpu(f, &Y, NULL);
        if (ok) {
            f->g->dropout(f->g, Y.g, X.g, rows, cols, ld, p, key);
            ok = same_bytes(f, what, &Y, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "dropout_backward(rows=%d cols=%d ld=%d p=%g)", (int)rows,
                 cols, ld, p);
        f->r->dropout_backward(f->r, Dx.r, Dy.r, rows, cols, ld, p, key);
        f->g->dropout_backward(f->g, Dx.g, Dy.g, rows, cols, ld, p, key);
        ok = compare_ex(f, what, &Dx, TOL_FP32, 1, &first) && regpu(f, &Dx, NULL);
        if (ok) {
            f->g->dropout_backward(f->g, Dx.g, Dy.g, rows, cols, ld, p, key);
            ok = same_bytes(f, what, &Dx, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "dropout in place(rows=%d cols=%d ld=%d p=%g)", (int)rows,
                 cols, ld, p);
        f->r->dropout(f->r, Al.r, Al.r, rows, cols, ld, p, key);
        f->g->dropout(f->g, Al.g, Al.g, rows, cols, ld, p, key);
        ok = compare_ex(f, what, &Al, TOL_FP32, 1, NULL);
    }
    mp_free(first);
    fx_reset(f);
    return ok;
}

MP_TEST(gpu_elementwise_dropout)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 31);
    static const size_t ns[] = { 1, 7, 300 * 301, ((size_t)1 << 20) + 3 };
    static const double ps[] = { 0.0, 0.3, 1.0 };
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; ok && j < sizeof ps / sizeof ps[0]; j++)
            ok = case_elementwise(&f, ns[i], ps[j]);
    static const int shapes[][3] = { { 1, 1, 1 }, { 7, 300, 301 }, { 300, 7, 7 }, { 1000, 301, 305 },
                                     { 0, 7, 7 } };
    for (size_t i = 0; ok && i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; ok && j < sizeof ps / sizeof ps[0]; j++)
            ok = case_dropout(&f, shapes[i][0], shapes[i][1], shapes[i][2], ps[j]);
    FX_END(f, ok);
}

/* ===================================================================== */
/* Graph ops                                                              */
/* ===================================================================== */

/* Each graph case: one random batch, one hidden size, every graph op. */
static int case_embed(fx *f, int bi, int h, int slots)
{
    char what[160], tag[96];
    dgraph d;
    if (!dgraph_make(f, &d, bi, slots)) {
        mp_graphs_free(&d.h);
        fx_reset(f);
        return 0;
    }
    const mp_graphs *g = &d.h;
    const size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges, H = (size_t)h;
    snprintf(tag, sizeof tag, "mols=%d atoms=%d edges=%d h=%d slots=%d", (int)g->n_mols,
             (int)g->n_atoms, (int)g->n_edges, h, slots);
    const size_t WR = (size_t)slots + 1;                 /* weight rows incl. mass */
    float *dw0 = rand_floats(f, WR * H), *dwb0 = rand_floats(f, MP_BOND_FDIM * H);
    pair W, Bias, Out, Dout, Dw, Aa, Wb, H0, Dh0, Da, Dwb;
    int ok = dw0 && dwb0 && pair_rand(f, &W, WR * H) && pair_rand(f, &Bias, H) &&
             pair_make(f, &Out, NULL, A * H) && pair_rand(f, &Dout, A * H) &&
             pair_make(f, &Dw, dw0, WR * H) && pair_rand(f, &Aa, A * H) &&
             pair_rand(f, &Wb, MP_BOND_FDIM * H) && pair_make(f, &H0, NULL, E * H) &&
             pair_rand(f, &Dh0, E * H) && pair_make(f, &Da, NULL, A * H) &&
             pair_make(f, &Dwb, dwb0, MP_BOND_FDIM * H);
    void *first = NULL;
    for (int with_bias = 0; ok && with_bias < 2; with_bias++) {
        snprintf(what, sizeof what, "atom_embed(%s bias=%d)", tag, with_bias);
        f->r->atom_embed(f->r, Out.r, d.hot[1], d.mass[1], W.r, with_bias ? Bias.r : NULL,
                         g->n_atoms, h, slots);
        f->g->atom_embed(f->g, Out.g, d.hot[0], d.mass[0], W.g, with_bias ? Bias.g : NULL,
                         g->n_atoms, h, slots);
        ok = compare(f, what, &Out, TOL_FP32, &first) && regpu(f, &Out, NULL);
        if (ok) {
            f->g->atom_embed(f->g, Out.g, d.hot[0], d.mass[0], W.g, with_bias ? Bias.g : NULL,
                             g->n_atoms, h, slots);
            ok = same_bytes(f, what, &Out, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "atom_embed_backward(%s)", tag);
        f->r->atom_embed_backward(f->r, Dw.r, d.hot[1], d.mass[1], Dout.r, g->n_atoms, h, slots);
        f->g->atom_embed_backward(f->g, Dw.g, d.hot[0], d.mass[0], Dout.g, g->n_atoms, h, slots);
        ok = compare(f, what, &Dw, TOL_FP32, &first) && regpu(f, &Dw, dw0);
        if (ok) {
            f->g->atom_embed_backward(f->g, Dw.g, d.hot[0], d.mass[0], Dout.g, g->n_atoms, h, slots);
            ok = same_bytes(f, what, &Dw, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "edge_embed(%s)", tag);
        f->r->edge_embed(f->r, H0.r, d.src[1], d.bond[1], Aa.r, Wb.r, g->n_edges, h);
        f->g->edge_embed(f->g, H0.g, d.src[0], d.bond[0], Aa.g, Wb.g, g->n_edges, h);
        ok = compare(f, what, &H0, TOL_FP32, &first) && regpu(f, &H0, NULL);
        if (ok) {
            f->g->edge_embed(f->g, H0.g, d.src[0], d.bond[0], Aa.g, Wb.g, g->n_edges, h);
            ok = same_bytes(f, what, &H0, &first);
        }
    }
    if (ok && f->g->edge_embed_relu) {
        /* the fused edge_embed_relu (ops_cuda_infer.cu): against the oracle,
         * then bitwise against the unfused GPU pair, then run again */
        pair H0f, M0f;
        void *first2 = NULL;
        snprintf(what, sizeof what, "edge_embed_relu(%s)", tag);
        ok = pair_make(f, &H0f, NULL, E * H) && pair_make(f, &M0f, NULL, E * H);
        if (ok) {
            f->r->edge_embed_relu(f->r, H0f.r, M0f.r, d.src[1], d.bond[1], Aa.r, Wb.r,
                                  g->n_edges, h);
            f->g->edge_embed_relu(f->g, H0f.g, M0f.g, d.src[0], d.bond[0], Aa.g, Wb.g,
                                  g->n_edges, h);
            ok = compare(f, what, &H0f, TOL_FP32, &first) &&
                 compare_ex(f, what, &M0f, TOL_FP32, 1, &first2) && regpu(f, &H0f, NULL) &&
                 regpu(f, &M0f, NULL);
        }
        if (ok) {
            snprintf(what, sizeof what, "edge_embed_relu(%s) vs edge_embed + relu", tag);
            f->g->edge_embed(f->g, H0f.g, d.src[0], d.bond[0], Aa.g, Wb.g, g->n_edges, h);
            f->g->relu_dropout(f->g, M0f.g, H0f.g, E * H, 0.0, 0);
            ok = same_bytes(f, what, &H0f, &first) & same_bytes(f, what, &M0f, &first2);
            first = first2 = NULL;
            ok = ok && compare(f, what, &H0f, TOL_FP32, &first) &&
                 compare_ex(f, what, &M0f, TOL_FP32, 1, &first2) && regpu(f, &H0f, NULL) &&
                 regpu(f, &M0f, NULL);
        }
        if (ok) {
            snprintf(what, sizeof what, "edge_embed_relu(%s), second run", tag);
            f->g->edge_embed_relu(f->g, H0f.g, M0f.g, d.src[0], d.bond[0], Aa.g, Wb.g,
                                  g->n_edges, h);
            ok = same_bytes(f, what, &H0f, &first) & same_bytes(f, what, &M0f, &first2);
            first = first2 = NULL;
        }
        mp_free(first);
        mp_free(first2);
        first = NULL;
    }
    if (ok) {
        snprintf(what, sizeof what, "edge_embed_backward(%s)", tag);
        f->r->edge_embed_backward(f->r, Da.r, Dwb.r, d.in_start[1], d.in_edge[1], d.bond[1], Dh0.r,
                                  g->n_atoms, g->n_edges, h);
        f->g->edge_embed_backward(f->g, Da.g, Dwb.g, d.in_start[0], d.in_edge[0], d.bond[0], Dh0.g,
                                  g->n_atoms, g->n_edges, h);
        void *first2 = NULL;
        ok = compare(f, what, &Da, TOL_FP32, &first) && compare(f, what, &Dwb, TOL_FP32, &first2) &&
             regpu(f, &Da, NULL) && regpu(f, &Dwb, dwb0);
        if (ok) {
            f->g->edge_embed_backward(f->g, Da.g, Dwb.g, d.in_start[0], d.in_edge[0], d.bond[0],
                                      Dh0.g, g->n_atoms, g->n_edges, h);
            ok = same_bytes(f, what, &Da, &first) & same_bytes(f, what, &Dwb, &first2);
            first = first2 = NULL;
        }
        mp_free(first);
        mp_free(first2);
        first = NULL;
    }
    mp_free(dw0);
    mp_free(dwb0);
    mp_graphs_free(&d.h);
    mp_free(first);
    fx_reset(f);
    return ok;
}

static int case_message(fx *f, int bi, int h)
{
    char what[160], tag[96];
    dgraph d;
    if (!dgraph_make(f, &d, bi, 132)) {
        mp_graphs_free(&d.h);
        fx_reset(f);
        return 0;
    }
    const mp_graphs *g = &d.h;
    const size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges, H = (size_t)h;
    snprintf(tag, sizeof tag, "mols=%d atoms=%d edges=%d h=%d", (int)g->n_mols, (int)g->n_atoms,
             (int)g->n_edges, h);
    pair Msg, S, M, Dm, Ds, Dmsg, Asum, Da, Dm2;
    int ok = pair_make(f, &Msg, NULL, E * H) && pair_make(f, &S, NULL, A * H) &&
             pair_rand(f, &M, E * H) && pair_make(f, &Dm, NULL, E * H) &&
             pair_make(f, &Ds, NULL, A * H) && pair_rand(f, &Dmsg, E * H) &&
             pair_make(f, &Asum, NULL, A * H) && pair_rand(f, &Da, A * H) &&
             pair_make(f, &Dm2, NULL, E * H);
    void *f1 = NULL, *f2 = NULL;
    if (ok) {
        snprintf(what, sizeof what, "message(%s)", tag);
        f->r->message(f->r, Msg.r, S.r, d.in_start[1], d.in_edge[1], d.src[1], M.r, g->n_atoms,
                      g->n_edges, h);
        f->g->message(f->g, Msg.g, S.g, d.in_start[0], d.in_edge[0], d.src[0], M.g, g->n_atoms,
                      g->n_edges, h);
        ok = compare(f, what, &Msg, TOL_FP32, &f1) && compare(f, what, &S, TOL_FP32, &f2) &&
             regpu(f, &Msg, NULL) && regpu(f, &S, NULL);
        if (ok) {
            f->g->message(f->g, Msg.g, S.g, d.in_start[0], d.in_edge[0], d.src[0], M.g,
                          g->n_atoms, g->n_edges, h);
            ok = same_bytes(f, what, &Msg, &f1) & same_bytes(f, what, &S, &f2);
            f1 = f2 = NULL;
        }
    }
    /* the fused message_direct (ops_cuda_infer.cu), reading m as it is and
     * through ReLU: msg against the oracle's message (of ReLU(m)), bitwise
     * against the GPU's message (after the GPU's ReLU), repeatable */
    for (int relu_in = 0; ok && f->g->message_direct && relu_in < 2; relu_in++) {
        pair Msg2, Mr;
        ok = pair_make(f, &Msg2, NULL, E * H) && pair_make(f, &Mr, NULL, E * H);
        snprintf(what, sizeof what, "message_direct(%s relu_in=%d)", tag, relu_in);
        if (ok) {
            f->r->relu_dropout(f->r, Mr.r, M.r, E * H, 0.0, 0);
            f->r->message(f->r, Msg2.r, S.r, d.in_start[1], d.in_edge[1], d.src[1],
                          relu_in ? Mr.r : M.r, g->n_atoms, g->n_edges, h);
            f->g->message_direct(f->g, Msg2.g, d.in_start[0], d.in_edge[0], d.src[0], M.g,
                                 relu_in, g->n_atoms, g->n_edges, h);
            ok = compare(f, what, &Msg2, TOL_FP32, &f1) && regpu(f, &Msg2, NULL);
        }
        if (ok) {
            snprintf(what, sizeof what, "message_direct(%s relu_in=%d) vs message", tag, relu_in);
            f->g->relu_dropout(f->g, Mr.g, M.g, E * H, 0.0, 0);
            f->g->message(f->g, Msg2.g, S.g, d.in_start[0], d.in_edge[0], d.src[0],
                          relu_in ? Mr.g : M.g, g->n_atoms, g->n_edges, h);
            ok = same_bytes(f, what, &Msg2, &f1) && compare(f, what, &Msg2, TOL_FP32, &f1) &&
                 regpu(f, &Msg2, NULL);
        }
        if (ok) {
            snprintf(what, sizeof what, "message_direct(%s relu_in=%d), second run", tag,
                     relu_in);
            f->g->message_direct(f->g, Msg2.g, d.in_start[0], d.in_edge[0], d.src[0], M.g,
                                 relu_in, g->n_atoms, g->n_edges, h);
            ok = same_bytes(f, what, &Msg2, &f1);
        }
        mp_free(f1);
        f1 = NULL;
    }
    if (ok) {
        snprintf(what, sizeof what, "message_backward(%s)", tag);
        f->r->message_backward(f->r, Dm.r, Ds.r, d.in_start[1], d.in_edge[1], d.dst[1], Dmsg.r,
                               g->n_atoms, g->n_edges, h);
        f->g->message_backward(f->g, Dm.g, Ds.g, d.in_start[0], d.in_edge[0], d.dst[0], Dmsg.g,
                               g->n_atoms, g->n_edges, h);
        ok = compare(f, what, &Dm, TOL_FP32, &f1) && compare(f, what, &Ds, TOL_FP32, &f2) &&
             regpu(f, &Dm, NULL) && regpu(f, &Ds, NULL);
        if (ok) {
            f->g->message_backward(f->g, Dm.g, Ds.g, d.in_start[0], d.in_edge[0], d.dst[0], Dmsg.g,
                                   g->n_atoms, g->n_edges, h);
            ok = same_bytes(f, what, &Dm, &f1) & same_bytes(f, what, &Ds, &f2);
            f1 = f2 = NULL;
        }
    }
    /* the fused message_backward_relu, p = 0 and p = 0.25 (scaled) */
    for (int pi = 0; ok && pi < 2; pi++) {
        const double p = pi ? 0.25 : 0.0;
        pair Dz, Dh0, Y, Ds2;
        float *h0 = rand_floats(f, E * H);
        ok = h0 && pair_make(f, &Dz, NULL, E * H) && pair_make(f, &Dh0, h0, E * H) &&
             pair_rand(f, &Y, E * H) && pair_make(f, &Ds2, NULL, A * H);
        snprintf(what, sizeof what, "message_backward_relu(%s p=%g)", tag, p);
        if (ok) {
            f->r->message_backward_relu(f->r, Dz.r, Dh0.r, Ds2.r, d.in_start[1], d.in_edge[1],
                                        d.dst[1], Dmsg.r, Y.r, p, g->n_atoms, g->n_edges, h);
            f->g->message_backward_relu(f->g, Dz.g, Dh0.g, Ds2.g, d.in_start[0], d.in_edge[0],
                                        d.dst[0], Dmsg.g, Y.g, p, g->n_atoms, g->n_edges, h);
            void *f3 = NULL;
            ok = compare_ex(f, what, &Dz, TOL_FP32, 1, &f1) &&
                 compare(f, what, &Dh0, TOL_FP32, &f2) && compare(f, what, &Ds2, TOL_FP32, &f3) &&
                 regpu(f, &Dz, NULL) && regpu(f, &Dh0, h0) && regpu(f, &Ds2, NULL);
            if (ok) {
                f->g->message_backward_relu(f->g, Dz.g, Dh0.g, Ds2.g, d.in_start[0], d.in_edge[0],
                                            d.dst[0], Dmsg.g, Y.g, p, g->n_atoms, g->n_edges, h);
                ok = same_bytes(f, what, &Dz, &f1) & same_bytes(f, what, &Dh0, &f2) &
                     same_bytes(f, what, &Ds2, &f3);
            }
            mp_free(f3);
        }
        mp_free(h0);
        mp_free(f1);
        mp_free(f2);
        f1 = f2 = NULL;
    }
    if (ok) {
        snprintf(what, sizeof what, "atom_sum(%s)", tag);
        f->r->atom_sum(f->r, Asum.r, d.in_start[1], d.in_edge[1], M.r, g->n_atoms, h);
        f->g->atom_sum(f->g, Asum.g, d.in_start[0], d.in_edge[0], M.g, g->n_atoms, h);
        ok = compare(f, what, &Asum, TOL_FP32, &f1) && regpu(f, &Asum, NULL);
        if (ok) {
            f->g->atom_sum(f->g, Asum.g, d.in_start[0], d.in_edge[0], M.g, g->n_atoms, h);
            ok = same_bytes(f, what, &Asum, &f1);
            f1 = NULL;
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "atom_sum_backward(%s)", tag);
        f->r->atom_sum_backward(f->r, Dm2.r, d.dst[1], Da.r, g->n_edges, h);
        f->g->atom_sum_backward(f->g, Dm2.g, d.dst[0], Da.g, g->n_edges, h);
        ok = compare(f, what, &Dm2, TOL_FP32, &f1) && regpu(f, &Dm2, NULL);
        if (ok) {
            f->g->atom_sum_backward(f->g, Dm2.g, d.dst[0], Da.g, g->n_edges, h);
            ok = same_bytes(f, what, &Dm2, &f1);
            f1 = NULL;
        }
    }
    mp_free(f1);
    mp_free(f2);
    mp_graphs_free(&d.h);
    fx_reset(f);
    return ok;
}

static int case_pool(fx *f, int bi, int h, mp_aggregation agg)
{
    char what[160];
    dgraph d;
    if (!dgraph_make(f, &d, bi, 132)) {
        mp_graphs_free(&d.h);
        fx_reset(f);
        return 0;
    }
    const mp_graphs *g = &d.h;
    const size_t A = (size_t)g->n_atoms, H = (size_t)h, M = (size_t)g->n_mols;
    const int ldo = h + 3;
    pair Out, X, Dx, Dout;
    int ok = pair_make(f, &Out, NULL, M * ldo) && pair_rand(f, &X, A * H) &&
             pair_make(f, &Dx, NULL, A * H) && pair_rand(f, &Dout, M * ldo);
    void *first = NULL;
    if (ok) {
        snprintf(what, sizeof what, "pool(mols=%d atoms=%d h=%d agg=%d)", (int)g->n_mols,
                 (int)g->n_atoms, h, (int)agg);
        f->r->pool(f->r, Out.r, ldo, d.mol_atom[1], X.r, g->n_mols, h, agg, 100.0);
        f->g->pool(f->g, Out.g, ldo, d.mol_atom[0], X.g, g->n_mols, h, agg, 100.0);
        ok = compare(f, what, &Out, TOL_FP32, &first) && regpu(f, &Out, NULL);
        if (ok) {
            f->g->pool(f->g, Out.g, ldo, d.mol_atom[0], X.g, g->n_mols, h, agg, 100.0);
            ok = same_bytes(f, what, &Out, &first);
        }
    }
    if (ok) {
        snprintf(what, sizeof what, "pool_backward(mols=%d atoms=%d h=%d agg=%d)",
                 (int)g->n_mols, (int)g->n_atoms, h, (int)agg);
        f->r->pool_backward(f->r, Dx.r, d.mol_atom[1], Dout.r, ldo, g->n_mols, h, agg, 100.0);
        f->g->pool_backward(f->g, Dx.g, d.mol_atom[0], Dout.g, ldo, g->n_mols, h, agg, 100.0);
        ok = compare(f, what, &Dx, TOL_FP32, &first) && regpu(f, &Dx, NULL);
        if (ok) {
            f->g->pool_backward(f->g, Dx.g, d.mol_atom[0], Dout.g, ldo, g->n_mols, h, agg, 100.0);
            ok = same_bytes(f, what, &Dx, &first);
        }
    }
    mp_graphs_free(&d.h);
    mp_free(first);
    fx_reset(f);
    return ok;
}

MP_TEST(gpu_embed)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 41);
    int ok = 1;
    for (int bi = 0; ok && bi < N_BATCHES; bi++)
        for (int hi = 0; ok && hi < N_HIDDEN; hi++)
            if (!skip_case(bi, HIDDEN[hi]))
                ok = case_embed(&f, bi, HIDDEN[hi], 132);
    /* More slots than one shared-memory group holds (384), and the v2 layout's 71. */
    for (int bi = 0; ok && bi < 3; bi++)
        ok = case_embed(&f, bi, 33, 500) && case_embed(&f, bi, 7, 71);
    FX_END(f, ok);
}

MP_TEST(gpu_message)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 51);
    int ok = 1;
    for (int bi = 0; ok && bi < N_BATCHES; bi++)
        for (int hi = 0; ok && hi < N_HIDDEN; hi++)
            if (!skip_case(bi, HIDDEN[hi]))
                ok = case_message(&f, bi, HIDDEN[hi]);
    FX_END(f, ok);
}

MP_TEST(gpu_pool)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 61);
    static const mp_aggregation aggs[] = { MP_AGG_MEAN, MP_AGG_SUM, MP_AGG_NORM };
    int ok = 1;
    for (int bi = 0; ok && bi < N_BATCHES; bi++)
        for (int hi = 0; ok && hi < N_HIDDEN; hi++)
            for (int a = 0; ok && a < 3; a++)
                if (!skip_case(bi, HIDDEN[hi]))
                    ok = case_pool(&f, bi, HIDDEN[hi], aggs[a]);
    FX_END(f, ok);
}

/* ===================================================================== */
/* Loss and Adam                                                          */
/* ===================================================================== */

static int case_loss(fx *f, int32_t n, int tasks, mp_loss_kind kind, double density)
{
    char what[128];
    size_t N = (size_t)n * tasks;
    float *y = mp_malloc((N ? N : 1) * sizeof(float)), *t = mp_malloc((N ? N : 1) * sizeof(float));
    uint8_t *mask = mp_malloc(N ? N : 1);
    int ok = y && t && mask;
    for (size_t i = 0; ok && i < N; i++) {
        double u = mp_rng_uniform(&f->rng);
        y[i] = (float)(kind == MP_LOSS_BCE ? (u < 0.05 ? 40 * u - 1 : 8 * (u - 0.5)) : 3 * mp_rng_normal(&f->rng));
        t[i] = (float)(kind == MP_LOSS_BCE ? (mp_rng_uniform(&f->rng) < 0.5) : mp_rng_normal(&f->rng));
        mask[i] = mp_rng_uniform(&f->rng) < density;
    }
    pair Y, T, L, Dy;
    void *mg = NULL, *mr = NULL, *f1 = NULL, *f2 = NULL;
    ok = ok && pair_make(f, &Y, y, N) && pair_make(f, &T, t, N) && pair_make(f, &L, NULL, 1) &&
         pair_make(f, &Dy, NULL, N) && raw_make(f, &mg, &mr, mask, N);
    if (ok) {
        snprintf(what, sizeof what, "loss(n=%d tasks=%d %s labels=%g)", (int)n, tasks,
                 kind == MP_LOSS_BCE ? "bce" : "mse", density);
        f->r->loss(f->r, L.r, Dy.r, Y.r, T.r, mr, n, tasks, kind);
        f->g->loss(f->g, L.g, Dy.g, Y.g, T.g, mg, n, tasks, kind);
        ok = compare(f, what, &L, TOL_FP32, &f1) && compare(f, what, &Dy, TOL_FP32, &f2) &&
             regpu(f, &L, NULL) && regpu(f, &Dy, NULL);
        if (ok) {
            f->g->loss(f->g, L.g, Dy.g, Y.g, T.g, mg, n, tasks, kind);
            ok = same_bytes(f, what, &L, &f1) & same_bytes(f, what, &Dy, &f2);
            f1 = f2 = NULL;
        }
    }
    mp_free(f1);
    mp_free(f2);
    mp_free(y);
    mp_free(t);
    mp_free(mask);
    fx_reset(f);
    return ok;
}

MP_TEST(gpu_loss)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 71);
    static const int32_t ns[] = { 0, 1, 7, 50, 5000 };
    static const double dens[] = { 0.0, 0.5, 1.0 };
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof ns / sizeof ns[0]; i++)
        for (int tasks = 1; ok && tasks <= 12; tasks += 11)
            for (int k = 0; ok && k < 2; k++)
                for (size_t j = 0; ok && j < 3; j++)
                    ok = case_loss(&f, ns[i], tasks, k ? MP_LOSS_BCE : MP_LOSS_MSE, dens[j]);
    FX_END(f, ok);
}

static int case_adam(fx *f, size_t n, long t, double wd)
{
    char what[128];
    float *p0 = rand_floats(f, n), *m0 = rand_floats(f, n), *v0 = rand_floats(f, n);
    int ok = p0 && m0 && v0;
    for (size_t i = 0; ok && i < n; i++) {
        m0[i] *= 0.1f;
        v0[i] = 0.01f * v0[i] * v0[i];
    }
    pair P, M, V, G;
    ok = ok && pair_make(f, &P, p0, n) && pair_make(f, &M, m0, n) && pair_make(f, &V, v0, n) &&
         pair_rand(f, &G, n);
    void *fp = NULL, *fm = NULL, *fv = NULL;
    if (ok) {
        snprintf(what, sizeof what, "adam(n=%zu t=%ld wd=%g)", n, t, wd);
        f->r->adam(f->r, P.r, M.r, V.r, G.r, n, 1e-3, 0.9, 0.999, 1e-8, wd, t);
        f->g->adam(f->g, P.g, M.g, V.g, G.g, n, 1e-3, 0.9, 0.999, 1e-8, wd, t);
        ok = compare(f, what, &P, TOL_FP32, &fp) && compare(f, what, &M, TOL_FP32, &fm) &&
             compare(f, what, &V, TOL_FP32, &fv) && regpu(f, &P, p0) && regpu(f, &M, m0) &&
             regpu(f, &V, v0);
        if (ok) {
            f->g->adam(f->g, P.g, M.g, V.g, G.g, n, 1e-3, 0.9, 0.999, 1e-8, wd, t);
            ok = same_bytes(f, what, &P, &fp) & same_bytes(f, what, &M, &fm) &
                 same_bytes(f, what, &V, &fv);
            fp = fm = fv = NULL;
        }
    }
    mp_free(fp);
    mp_free(fm);
    mp_free(fv);
    mp_free(p0);
    mp_free(m0);
    mp_free(v0);
    fx_reset(f);
    return ok;
}

MP_TEST(gpu_adam)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 81);
    static const size_t ns[] = { 1, 7, 354901 };
    int ok = 1;
    for (size_t i = 0; ok && i < 3; i++)
        for (long t = 1; ok && t <= 10; t += 9)
            for (int w = 0; ok && w < 2; w++)
                ok = case_adam(&f, ns[i], t, w ? 0.01 : 0.0);
    FX_END(f, ok);
}

/* ===================================================================== */
/* A whole D-MPNN step (bench/gpu_step.h) against the oracle              */
/* ===================================================================== */

/*
 * The composite bounds are looser than the per-op ones for a reason: at tf32
 * and bf16 a pre-activation within the rounding error of 0 can land on the
 * other side of the ReLU, which switches its unit's whole gradient path.  The
 * fraction of such units grows with the rounding error, and the gradient
 * error with its square root (about 2% at tf32, 5% at bf16 on random data);
 * even at fp32 one such flip among 10^5 units moves the gradient by ~1e-4
 * (seen with the cpu backend against ref64).  Adam's first steps move each
 * parameter by about lr * sign(gradient), so a gradient element within
 * rounding of 0 moves its parameter by 2 lr the other way: the parameter
 * bounds allow for a few hundred of those.  The forward outputs stay within
 * a few rounding errors.  A composition bug (a wrong buffer, a missing
 * dependency) gives errors of order 1, far above these bounds.
 */
static const double STEP_TOL_Y[3] = { 1e-5, 5e-3, 5e-2 };
static const double STEP_TOL_GRAD[3] = { 1e-3, 6e-2, 0.15 };
static const double STEP_TOL_PARAMS[3] = { 1e-3, 1e-2, 3e-2 };

static int pair_view(pair *p, void *g, void *r, size_t n)
{
    p->g = g;
    p->r = r;
    p->n = n;
    return 1;
}

static int case_step(fx *f, int prec, int32_t n_mols, int h, int depth, double p, uint64_t seed)
{
    char what[160];
    mp_graphs hg;
    gs_dev_graph dg[2];
    gs_model mg, mr, m2;
    memset(dg, 0, sizeof dg);
    memset(&mg, 0, sizeof mg);
    memset(&mr, 0, sizeof mr);
    memset(&m2, 0, sizeof m2);
    if (!rg_make(&hg, &f->rng, n_mols, 133, &BATCHES[1].o))
        return fail(f, "random graph: out of memory");
    int ok = 1;
    if (gs_dev_graph_upload(f->g, &dg[0], &hg) != MP_OK ||
        gs_dev_graph_upload(f->r, &dg[1], &hg) != MP_OK ||
        gs_model_create(&mg, f->g, 133, h, depth, 3, p, n_mols, hg.n_atoms, hg.n_edges, seed) ||
        gs_model_create(&mr, f->r, 133, h, depth, 3, p, n_mols, hg.n_atoms, hg.n_edges, seed) ||
        gs_model_create(&m2, f->g, 133, h, depth, 3, p, n_mols, hg.n_atoms, hg.n_edges, seed))
        ok = fail(f, "step set-up: %s", mp_error_message());
    const char *pn = mp_precision_name((mp_precision)prec);
    pair Y, L, G, P;
    void *b1 = NULL;
    if (ok) {
        /* step 1: outputs, loss and gradients */
        gs_step(&mg, &dg[0], 99);
        gs_step(&mr, &dg[1], 99);
        snprintf(what, sizeof what, "step[%s] output (mols=%d h=%d depth=%d p=%g)", pn,
                 (int)n_mols, h, depth, p);
        ok = pair_view(&Y, mg.y, mr.y, (size_t)n_mols * 3) &&
             compare(f, what, &Y, STEP_TOL_Y[prec], NULL);
        snprintf(what, sizeof what, "step[%s] loss (mols=%d h=%d)", pn, (int)n_mols, h);
        ok = ok && pair_view(&L, mg.loss, mr.loss, 1) && compare(f, what, &L, STEP_TOL_Y[prec], NULL);
        snprintf(what, sizeof what, "step[%s] gradients (mols=%d h=%d depth=%d p=%g)", pn,
                 (int)n_mols, h, depth, p);
        ok = ok && pair_view(&G, mg.grads, mr.grads, mg.n_params) &&
             compare(f, what, &G, STEP_TOL_GRAD[prec], NULL);
    }
    if (ok) {
        /* step 2 (new dropout keys): parameters after two Adam steps */
        gs_step(&mg, &dg[0], 1234);
        gs_step(&mr, &dg[1], 1234);
        snprintf(what, sizeof what, "step[%s] parameters after 2 steps (mols=%d h=%d)", pn,
                 (int)n_mols, h);
        ok = pair_view(&P, mg.params, mr.params, mg.n_params) &&
             compare(f, what, &P, STEP_TOL_PARAMS[prec], &b1);
    }
    if (ok) {
        /* determinism: a second model from the same seed, same two steps */
        gs_step(&m2, &dg[0], 99);
        gs_step(&m2, &dg[0], 1234);
        snprintf(what, sizeof what, "step[%s] parameters, second model", pn);
        pair P2;
        pair_view(&P2, m2.params, mr.params, m2.n_params);
        ok = same_bytes(f, what, &P2, &b1);
        b1 = NULL;
    }
    mp_free(b1);
    gs_model_free(&mg);
    gs_model_free(&mr);
    gs_model_free(&m2);
    if (dg[0].mol_atom)
        gs_dev_graph_free(f->g, &dg[0]);
    if (dg[1].mol_atom)
        gs_dev_graph_free(f->r, &dg[1]);
    mp_graphs_free(&hg);
    return ok;
}

static void step_all(fx *f, int prec, int *ok)
{
    *ok = case_step(f, prec, 50, 64, 3, 0.0, 5) && case_step(f, prec, 40, 64, 3, 0.2, 6) &&
          case_step(f, prec, 12, 300, 3, 0.0, 7) && case_step(f, prec, 9, 7, 1, 0.1, 8) &&
          case_step(f, prec, 20, 33, 5, 0.0, 9);
}

MP_TEST(gpu_step_fp32)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 91);
    int ok;
    step_all(&f, MP_PREC_FP32, &ok);
    FX_END(f, ok);
}

MP_TEST(gpu_step_tf32)
{
    fx f;
    FX_OPEN(f, MP_PREC_TF32, 92);
    int ok;
    step_all(&f, MP_PREC_TF32, &ok);
    FX_END(f, ok);
}

MP_TEST(gpu_step_bf16)
{
    fx f;
    FX_OPEN(f, MP_PREC_BF16, 93);
    int ok;
    step_all(&f, MP_PREC_BF16, &ok);
    FX_END(f, ok);
}

/* ===================================================================== */
/* Errors and CUDA graphs (the GPU itself, no stand-in)                   */
/* ===================================================================== */

static int host_compare(fx *f, const char *what, const float *g, const float *r, size_t n,
                        double tol);

#define GPU_ONLY()                                                                   \
    do {                                                                             \
        if (on_cpu())                                                                \
            MP_SKIP("GPU-only (MOLPROP_GPU_TESTS_ON is set)");                       \
    } while (0)

MP_TEST(gpu_errors_are_kept_and_reported)
{
    GPU_ONLY();
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 101);
    mp_backend *b = f.g;
    int ok = 1;
    float *a = galloc(&f, 64 * sizeof(float)), *c = galloc(&f, 64 * sizeof(float));
    if (!a || !c)
        ok = fail(&f, "alloc: %s", mp_error_message());
    /* lda 2 < k 8: cuBLAS refuses; the op is void, sync reports it */
    if (ok) {
        b->gemm(b, 0, 0, 4, 4, 8, 1.0, a, 2, a, 4, 0.0, c, 4);
        mp_status st = b->sync(b);
        const char *m = mp_error_message();
        if (st != MP_ERR_INTERNAL || !strstr(m, "ops_cuda.cu:") || !strstr(m, "cuBLAS"))
            ok = fail(&f, "bad gemm: sync gave %s '%s'", mp_status_name(st), m);
    }
    /* kept: the next sync and a download report it again; ops are not run */
    if (ok) {
        float host[4];
        b->add(b, c, a, 16);
        if (b->sync(b) != MP_ERR_INTERNAL || !strstr(mp_error_message(), "cuBLAS") ||
            b->download(b, host, c, sizeof host) != MP_ERR_INTERNAL ||
            b->upload(b, c, host, sizeof host) != MP_ERR_INTERNAL)
            ok = fail(&f, "the failure was not kept: '%s'", mp_error_message());
    }
    if (ok) {
        mp_backend_cuda_clear_error(b);
        if (b->sync(b) != MP_OK)
            ok = fail(&f, "after clear_error: %s", mp_error_message());
    }
    /* overlapping copy */
    if (ok) {
        b->copy(b, a + 1, a, 16 * sizeof(float));
        if (b->sync(b) != MP_ERR_ARG || !strstr(mp_error_message(), "overlap"))
            ok = fail(&f, "overlapping copy: '%s'", mp_error_message());
        mp_backend_cuda_clear_error(b);
    }
    /* an allocation the device cannot hold: NULL, the size and what is free */
    if (ok) {
        void *huge = b->alloc(b, (size_t)1 << 50);
        const char *m = mp_error_message();
        if (huge) {
            b->free(b, huge);
            ok = fail(&f, "a 1 PiB allocation succeeded");
        } else if (!strstr(m, "1125899906842624 bytes") || !strstr(m, "MiB free of")) {
            ok = fail(&f, "allocation failure message: '%s'", m);
        } else if (b->sync(b) != MP_OK) {
            ok = fail(&f, "an allocation failure should not be kept: %s", mp_error_message());
        }
    }
    FX_END(f, ok);
}

/*
 * A captured forward/backward replays to the very bytes of the eager run,
 * reads its buffers at replay time (new parameters give the oracle's new
 * gradients), and a host transfer inside a capture fails it with a message.
 */
MP_TEST(gpu_graph_capture)
{
    GPU_ONLY();
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 111);
    mp_backend *b = f.g;
    mp_graphs hg;
    gs_dev_graph dg[2];
    gs_model mg, mr;
    memset(dg, 0, sizeof dg);
    memset(&mg, 0, sizeof mg);
    memset(&mr, 0, sizeof mr);
    mp_cuda_graph *graph = NULL;
    int ok = 1;
    float *eager = NULL;
    float *newp = NULL;
    if (!rg_make(&hg, &f.rng, 30, 133, &BATCHES[1].o)) {
        fx_close(&f);
        MP_FAIL("random graph: out of memory");
    }
    if (gs_dev_graph_upload(b, &dg[0], &hg) || gs_dev_graph_upload(f.r, &dg[1], &hg) ||
        gs_model_create(&mg, b, 133, 64, 3, 2, 0.1, 30, hg.n_atoms, hg.n_edges, 3) ||
        gs_model_create(&mr, f.r, 133, 64, 3, 2, 0.1, 30, hg.n_atoms, hg.n_edges, 3))
        ok = fail(&f, "set-up: %s", mp_error_message());
    pair G;
    pair_view(&G, mg.grads, mr.grads, mg.n_params);
    size_t gbytes = mg.n_params * sizeof(float);
    if (ok) {
        /* eager */
        b->zero(b, mg.grads, gbytes);
        gs_forward(&mg, &dg[0], 5);
        gs_backward(&mg, &dg[0]);
        eager = mp_malloc(gbytes);
        if (!eager || b->sync(b) != MP_OK || b->download(b, eager, mg.grads, gbytes) != MP_OK)
            ok = fail(&f, "eager run: %s", mp_error_message());
    }
    if (ok) {
        /* captured, then replayed twice into poisoned gradients */
        if (mp_cuda_graph_begin(b) != MP_OK)
            ok = fail(&f, "graph begin: %s", mp_error_message());
        if (ok) {
            b->zero(b, mg.grads, gbytes);
            gs_forward(&mg, &dg[0], 5);
            gs_backward(&mg, &dg[0]);
            if (mp_cuda_graph_end(b, &graph) != MP_OK)
                ok = fail(&f, "graph end: %s", mp_error_message());
        }
        /* replay 1 vs the eager run: the same ops on the same data (cuBLAS
         * may in principle pick other kernels under capture, so within fp32
         * rounding, not necessarily bitwise); replay 2 vs replay 1: bitwise */
        float *r1 = mp_malloc(gbytes);
        if (!r1)
            ok = fail(&f, "out of memory");
        ok = ok && gpu_poison(&f, mg.grads, mg.n_params);
        if (ok && mp_cuda_graph_launch(b, graph) != MP_OK)
            ok = fail(&f, "graph launch: %s", mp_error_message());
        if (ok && (b->sync(b) != MP_OK || b->download(b, r1, mg.grads, gbytes) != MP_OK))
            ok = fail(&f, "replay: %s", mp_error_message());
        ok = ok && host_compare(&f, "replayed gradients vs eager", r1, eager, mg.n_params, TOL_FP32);
        if (ok && mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
            printf("    replay %s the eager run bitwise\n",
                   memcmp(r1, eager, gbytes) ? "differs from" : "equals");
        ok = ok && gpu_poison(&f, mg.grads, mg.n_params);
        if (ok && mp_cuda_graph_launch(b, graph) != MP_OK)
            ok = fail(&f, "graph launch: %s", mp_error_message());
        if (ok)
            ok = same_bytes(&f, "second replay vs first", &G, (void **)&r1);
        else
            mp_free(r1);
    }
    if (ok) {
        /* new parameters on both sides: the replay must follow them */
        newp = rand_floats(&f, mg.n_params);
        for (size_t i = 0; newp && i < mg.n_params; i++)
            newp[i] *= 0.1f;
        if (!newp || gs_put(b, mg.params, newp, mg.n_params) || gs_put(f.r, mr.params, newp, mr.n_params))
            ok = fail(&f, "new parameters: %s", mp_error_message());
        if (ok && mp_cuda_graph_launch(b, graph) != MP_OK)
            ok = fail(&f, "graph launch: %s", mp_error_message());
        if (ok) {
            f.r->zero(f.r, mr.grads, mr.n_params * sizeof(double));
            gs_forward(&mr, &dg[1], 5);
            gs_backward(&mr, &dg[1]);
            ok = compare(&f, "replay with new parameters vs ref64", &G, STEP_TOL_GRAD[0], NULL);
        }
    }
    if (ok) {
        /* a host transfer inside a capture fails the capture, with a message */
        float x = 1;
        mp_cuda_graph *bad = NULL;
        if (mp_cuda_graph_begin(b) != MP_OK)
            ok = fail(&f, "graph begin: %s", mp_error_message());
        mp_status up = b->upload(b, mg.loss, &x, sizeof x);
        mp_status end = ok ? mp_cuda_graph_end(b, &bad) : MP_OK;
        if (ok && (up == MP_OK || end == MP_OK || bad != NULL ||
                   !strstr(mp_error_message(), "captured")))
            ok = fail(&f, "upload during capture: upload %s, end %s, '%s'", mp_status_name(up),
                      mp_status_name(end), mp_error_message());
        mp_cuda_graph_free(bad);
        mp_backend_cuda_clear_error(b);
        if (ok && b->sync(b) != MP_OK)
            ok = fail(&f, "after a failed capture: %s", mp_error_message());
    }
    mp_cuda_graph_free(graph);
    mp_free(eager);
    mp_free(newp);
    gs_model_free(&mg);
    gs_model_free(&mr);
    if (dg[0].mol_atom)
        gs_dev_graph_free(b, &dg[0]);
    if (dg[1].mol_atom)
        gs_dev_graph_free(f.r, &dg[1]);
    mp_graphs_free(&hg);
    FX_END(f, ok);
}

/* ===================================================================== */
/* The models' own code (src/models) on the GPU                           */
/* ===================================================================== */

static int host_compare(fx *f, const char *what, const float *g, const float *r, size_t n,
                        double tol)
{
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(g[i]) != isnan(r[i]))
            return fail(f, "%s: element %zu: gpu %.9g, ref %.9g", what, i, g[i], r[i]);
        if (isnan(r[i]))
            continue;
        d2 += ((double)g[i] - r[i]) * ((double)g[i] - r[i]);
        r2 += (double)r[i] * r[i];
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    if (mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
        printf("    %-90s rel %.3g (bound %.3g)\n", what, rel, tol);
    return rel <= tol ? 1 : fail(f, "%s: relative error %.3g > %.3g over %zu values", what, rel,
                                 tol, n);
}

/* mp_model (D-MPNN, classification and regression, with extra features and
 * dropout) on the cuda backend against the same model on ref64: two training
 * steps, then an inference pass. */
static int case_model(fx *f, int prec, mp_model_task task, double dropout, int extra_dim)
{
    char what[160];
    const char *pn = mp_precision_name((mp_precision)prec);
    mp_model_config cfg = mp_model_config_default();
    cfg.task = task;
    cfg.n_tasks = 3;
    cfg.hidden = 96;
    cfg.dropout = dropout;
    cfg.extra_dim = extra_dim;
    const int32_t n = 24;
    mp_graphs g;
    rg_opts o = { 1, 40, 0.05, 0.05, 4 };
    if (!rg_make(&g, &f->rng, n, cfg.atom_fdim, &o))
        return fail(f, "random graph: out of memory");
    mp_model *mg = NULL, *mr = NULL;
    float *extra = mp_malloc(((size_t)n * (extra_dim ? extra_dim : 1)) * sizeof(float));
    float *tg = mp_malloc((size_t)n * 3 * sizeof(float));
    float *outg = mp_malloc((size_t)n * 3 * sizeof(float)), *outr = mp_malloc((size_t)n * 3 * sizeof(float));
    float *pg = NULL, *pr = NULL;
    int ok = extra && tg && outg && outr;
    for (size_t i = 0; ok && i < (size_t)n * extra_dim; i++)
        extra[i] = (float)mp_rng_normal(&f->rng);
    for (size_t i = 0; ok && i < (size_t)n * 3; i++) {
        double u = mp_rng_uniform(&f->rng);
        tg[i] = u < 0.1 ? NAN : task == MP_MODEL_CLASSIFICATION ? (float)(u < 0.55) : (float)mp_rng_normal(&f->rng);
    }
    if (ok && (mp_model_create(&mg, &cfg, f->g, 17) != MP_OK || mp_model_create(&mr, &cfg, f->r, 17) != MP_OK))
        ok = fail(f, "model: %s", mp_error_message());
    size_t np = ok ? mp_model_n_params(mg) : 0;
    if (ok && (!(pg = mp_malloc(np * sizeof(float))) || !(pr = mp_malloc(np * sizeof(float)))))
        ok = fail(f, "out of memory");
    for (int step = 0; ok && step < 2; step++) {
        double lg = 0, lr = 0;
        mp_model_zero_grad(mg);
        mp_model_zero_grad(mr);
        if (mp_model_forward(mg, &g, extra_dim ? extra : NULL, n, 1, NULL) != MP_OK ||
            mp_model_forward(mr, &g, extra_dim ? extra : NULL, n, 1, NULL) != MP_OK ||
            mp_model_loss_backward(mg, tg, &lg) != MP_OK || mp_model_loss_backward(mr, tg, &lr) != MP_OK) {
            ok = fail(f, "model step %d: %s", step, mp_error_message());
            break;
        }
        snprintf(what, sizeof what, "model[%s] step %d loss (task %d p=%g extra %d): %.9g vs %.9g", pn,
                 step, (int)task, dropout, extra_dim, lg, lr);
        float fl = (float)lg, fr = (float)lr;
        ok = host_compare(f, what, &fl, &fr, 1, STEP_TOL_Y[prec]);
        if (ok && (mp_model_get_grads(mg, pg) != MP_OK || mp_model_get_grads(mr, pr) != MP_OK))
            ok = fail(f, "grads: %s", mp_error_message());
        snprintf(what, sizeof what, "model[%s] step %d gradients (task %d p=%g extra %d)", pn, step,
                 (int)task, dropout, extra_dim);
        ok = ok && host_compare(f, what, pg, pr, np, STEP_TOL_GRAD[prec]);
        if (ok && (mp_model_adam_step(mg, 1e-3) != MP_OK || mp_model_adam_step(mr, 1e-3) != MP_OK))
            ok = fail(f, "adam: %s", mp_error_message());
    }
    if (ok && (mp_model_get_params(mg, pg) != MP_OK || mp_model_get_params(mr, pr) != MP_OK))
        ok = fail(f, "params: %s", mp_error_message());
    snprintf(what, sizeof what, "model[%s] parameters after 2 steps", pn);
    ok = ok && host_compare(f, what, pg, pr, np, STEP_TOL_PARAMS[prec]);
    if (ok && (mp_model_forward(mg, &g, extra_dim ? extra : NULL, n, 0, outg) != MP_OK ||
               mp_model_forward(mr, &g, extra_dim ? extra : NULL, n, 0, outr) != MP_OK))
        ok = fail(f, "inference: %s", mp_error_message());
    snprintf(what, sizeof what, "model[%s] inference outputs", pn);
    ok = ok && host_compare(f, what, outg, outr, (size_t)n * 3, STEP_TOL_Y[prec]);
    mp_model_free(mg);
    mp_model_free(mr);
    mp_free(extra);
    mp_free(tg);
    mp_free(outg);
    mp_free(outr);
    mp_free(pg);
    mp_free(pr);
    mp_graphs_free(&g);
    return ok;
}

MP_TEST(gpu_model_dmpnn)
{
    fx f;
    FX_OPEN(f, MP_PREC_FP32, 121);
    int ok = case_model(&f, MP_PREC_FP32, MP_MODEL_REGRESSION, 0.0, 0) &&
             case_model(&f, MP_PREC_FP32, MP_MODEL_CLASSIFICATION, 0.15, 5) &&
             case_model(&f, MP_PREC_FP32, MP_MODEL_REGRESSION, 0.1, 0);
    FX_END(f, ok);
}

MP_TEST(gpu_model_dmpnn_bf16)
{
    fx f;
    FX_OPEN(f, MP_PREC_BF16, 122);
    int ok = case_model(&f, MP_PREC_BF16, MP_MODEL_REGRESSION, 0.0, 0) &&
             case_model(&f, MP_PREC_BF16, MP_MODEL_CLASSIFICATION, 0.1, 5);
    FX_END(f, ok);
}
