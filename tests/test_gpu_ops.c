/*
 * test_gpu_ops.c - the cuda backend (src/gpu) beyond the op table
 * (test_backend_ops.c checks every op on every precision against ref64):
 *
 *   - the names and precisions a GPU backend opens with, and what it
 *     reports (act_st: bf16 storage at bf16 only);
 *   - failures kept and reported with file:line, device allocations that
 *     do not fit;
 *   - the fused ops against the unfused kernels, bit for bit (the message
 *     per atom vs its two passes, H0 with M_0 vs a ReLU pass, the fused
 *     backward gathers vs gather + ReLU backward + sum), also on the cpu;
 *   - the model's own training step (mp_model_step_bound on a bound device
 *     batch) against the same step on the reference backend, at fp32, tf32
 *     and bf16 (against ref64:bf16, which rounds to bf16 where the GPU
 *     does), and the same model twice for the same bytes;
 *   - that step captured as a CUDA graph: replay == eager bit for bit,
 *     replays read their buffers at replay time, a host transfer fails a
 *     capture;
 *   - the host training loop of the model (mp_model_forward /
 *     loss_backward / adam_step) against the reference;
 *   - that bf16 is really bf16 (its product error well above tf32's), and
 *     that 50 ESOL steps at bf16 follow fp32.
 *
 * Where the reference backend can stand in for the GPU the same checks run
 * on it (model_* and ops_*: ref:bf16 against ref64:bf16 takes the model's
 * bf16 path on any machine).  The GPU tests (names gpu_*) are skipped
 * without a GPU and fail under MOLPROP_REQUIRE_GPU=1 (make test-gpu).
 */
#include "test.h"
#include "gpu_test.h"

#include "data/dataset.h"
#include "gpu/gpu.h"
#include "models/model.h"
#include "backend/ops.h"
#include "randgraph.h"
#include "dev_batch.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

typedef struct {
    char err[1024];
} fx;

static int fail(fx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(fx *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return 0;
}

/* ||g - r|| / ||r|| <= tol over n host floats (NaN on one side fails). */
static int host_compare(fx *f, const char *what, const float *g, const float *r, size_t n,
                        double tol)
{
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(g[i]) != isnan(r[i]))
            return fail(f, "%s: element %zu: tested %.9g, ref %.9g", what, i, g[i], r[i]);
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

/* n floats into a buffer of the backend's element type. */
static mp_status put_elems(mp_backend *b, void *dst, const float *src, size_t n)
{
    if (b->esize == sizeof(float))
        return b->upload(b, dst, src, n * sizeof(float));
    double *t = mp_malloc((n ? n : 1) * sizeof(double));
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        t[i] = src[i];
    mp_status st = b->upload(b, dst, t, n * sizeof(double));
    mp_free(t);
    return st;
}

/* A buffer of `bytes` with `src` in it (NULL: uninitialised). */
static void *dev_put(mp_backend *b, const void *src, size_t bytes)
{
    void *p = b->alloc(b, bytes ? bytes : 1);
    if (p && src && bytes && b->upload(b, p, src, bytes) != MP_OK) {
        b->free(b, p);
        return NULL;
    }
    return p;
}

/* The backends named in a test, skipping (failing under
 * MOLPROP_REQUIRE_GPU=1) when one of them needs a GPU that is not here. */
#define OPEN_OR_SKIP(b, name)                                                          \
    do {                                                                           \
        char why_[256];                                                            \
        if (!mp_backend_available((name), why_, sizeof why_)) {                     \
            if (mp_test_env_flag("MOLPROP_REQUIRE_GPU"))                           \
                MP_FAIL("%s: %s (MOLPROP_REQUIRE_GPU=1)", (name), why_);           \
            MP_SKIP(why_);                                                         \
        }                                                                          \
        CHECK_OK(mp_backend_open(&(b), (name)));                                   \
    } while (0)

/* ===================================================================== */
/* Names, precisions, errors                                              */
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

/* Without a GPU every open says why; with one, the backend describes it and
 * reports bf16 storage at bf16 only. */
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
        mp_precision prec = i == 0 ? MP_PREC_FP32 : (mp_precision)(i - 1);
        CHECK_EQ_INT(mp_backend_cuda_precision(b), prec);
        CHECK(b->dtype == MP_F32 && b->esize == 4 && !b->host_memory);
        CHECK(b->act_st == (prec == MP_PREC_BF16 ? MP_ST_BF16 : MP_ST_ELEM));
        CHECK(mp_backend_cuda_sm_count(b) > 0);
        CHECK(mp_backend_cuda_memory(b) > ((size_t)1 << 30));
        CHECK_MSG(strstr(mp_backend_cuda_info(b), "SMs") &&
                  strstr(mp_backend_cuda_info(b), names[i][4] ? names[i] + 5 : "fp32"),
                  "info: %s", mp_backend_cuda_info(b));
        CHECK(mp_backend_cuda_stream(b) != NULL);
        printf("    %s: %s\n", names[i], mp_backend_cuda_info(b));
        CHECK_OK(b->sync(b));
        mp_backend_close(b);
    }
    /* not a cuda backend */
    mp_backend *r;
    CHECK_OK(mp_backend_ref_open(&r, MP_F32, MP_ST_ELEM));
    CHECK_EQ_STR(mp_backend_cuda_info(r), "");
    CHECK_EQ_INT(mp_backend_cuda_sm_count(r), 0);
    mp_status st = mp_cuda_graph_begin(r);
    mp_backend_close(r);
    CHECK(st != MP_OK);
}

MP_TEST(gpu_errors_are_kept_and_reported)
{
    mp_backend *b;
    OPEN_OR_SKIP(b, "gpu:fp32");
    fx f;
    int ok = 1;
    float *a = b->alloc(b, 64 * sizeof(float)), *c = b->alloc(b, 64 * sizeof(float));
    if (!a || !c)
        ok = fail(&f, "alloc: %s", mp_error_message());
    /* lda 2 < k 8: cuBLAS refuses; the op is void, sync reports it */
    if (ok) {
        mp_gemm g = { 0, 0, 4, 4, 8, 1.0, 0.0, a, a, c, 2, 4, 4, MP_ST_ELEM, MP_ST_ELEM,
                      MP_ST_ELEM };
        b->gemm(b, 1, &g);
        mp_status st = b->sync(b);
        const char *m = mp_error_message();
        if (st != MP_ERR_INTERNAL || !strstr(m, "dense_cuda.cu:") || !strstr(m, "cuBLAS"))
            ok = fail(&f, "bad gemm: sync gave %s '%s'", mp_status_name(st), m);
    }
    /* kept: the next sync and a download report it again; ops are not run */
    if (ok) {
        float host[4];
        b->relu_dropout(b, c, a, MP_ST_ELEM, 16, 0.0, mp_key_host(0));
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
    /* A and B of one product of two storage types: refused, with a message */
    if (ok) {
        mp_gemm g = { 0, 0, 4, 4, 4, 1.0, 0.0, a, a, c, 4, 4, 4, MP_ST_BF16, MP_ST_ELEM,
                      MP_ST_ELEM };
        b->gemm(b, 1, &g);
        if (b->sync(b) != MP_ERR_ARG || !strstr(mp_error_message(), "storage"))
            ok = fail(&f, "mixed operand storage: '%s'", mp_error_message());
        mp_backend_cuda_clear_error(b);
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
    b->free(b, a);
    b->free(b, c);
    mp_backend_close(b);
    CHECK_MSG(ok, "%s", f.err);
}

/* ===================================================================== */
/* Fused ops == the unfused kernels, bit for bit                          */
/* ===================================================================== */

/* n values of storage st at p, downloaded as raw bytes. */
static void *bytes_of(mp_backend *b, const void *p, size_t n, mp_stype st)
{
    size_t bytes = n * mp_stype_size(b, st);
    void *h = mp_malloc(bytes ? bytes : 1);
    if (h && bytes && (b->sync(b) != MP_OK || b->download(b, h, p, bytes) != MP_OK)) {
        mp_free(h);
        return NULL;
    }
    return h;
}

static int same_dev(fx *f, mp_backend *b, const char *what, const void *x, const void *y,
                    size_t n, mp_stype st)
{
    void *hx = bytes_of(b, x, n, st), *hy = bytes_of(b, y, n, st);
    int ok = hx && hy ? memcmp(hx, hy, n * mp_stype_size(b, st)) == 0 : 0;
    mp_free(hx);
    mp_free(hy);
    return ok ? 1 : fail(f, "%s on %s: the fused op and the unfused ones differ (or a "
                         "download failed: %s)", what, b->name, mp_error_message());
}

/* g's graph arrays with one more atom holding PAD self-loop edges (PAD / 2
 * pairs), as the resident trainer pads its slots (run/resident.c): an atom
 * of many entering edges for the per-atom kernels.  0 when out of memory. */
typedef struct {
    int32_t *src, *dst, *in_start, *in_edge;
    int8_t  *bond;
    size_t   A, E;
} padded;

static int pad_graph(padded *p, const mp_graphs *g, int pad)
{
    const size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges;
    p->A = A + 1;
    p->E = E + (size_t)pad;
    p->src = mp_malloc(p->E * 4);
    p->dst = mp_malloc(p->E * 4);
    p->in_start = mp_malloc((p->A + 1) * 4);
    p->in_edge = mp_malloc(p->E * 4);
    p->bond = mp_malloc(p->E / 2 * MP_BOND_MAX_HOT + 1);
    if (!p->src || !p->dst || !p->in_start || !p->in_edge || !p->bond)
        return 0;
    memcpy(p->src, g->edge_src, E * 4);
    memcpy(p->dst, g->edge_dst, E * 4);
    memcpy(p->in_start, g->in_start, (A + 1) * 4);
    memcpy(p->in_edge, g->in_edge, E * 4);
    memcpy(p->bond, g->bond_hot, E / 2 * MP_BOND_MAX_HOT);
    memset(p->bond + E / 2 * MP_BOND_MAX_HOT, 0xff, (size_t)pad / 2 * MP_BOND_MAX_HOT);
    for (size_t e = E; e < p->E; e++) {
        p->src[e] = p->dst[e] = (int32_t)A;
        p->in_edge[e] = (int32_t)e;
    }
    p->in_start[A + 1] = (int32_t)p->E;
    return 1;
}

static void padded_free(padded *p)
{
    mp_free(p->src);
    mp_free(p->dst);
    mp_free(p->in_start);
    mp_free(p->in_edge);
    mp_free(p->bond);
}

/* On backend `name` (and its plain_ops twin on a GPU), at every storage its
 * model uses: each fused op against the unfused ops it stands for. */
static int fused_case(fx *f, const char *name, int h, uint64_t seed)
{
    mp_backend *b = NULL, plain;
    if (mp_backend_open(&b, name) != MP_OK)
        return fail(f, "%s: %s", name, mp_error_message());
    plain = *b;
    mp_backend_cuda_plain_ops(&plain);   /* (no change on the host backends) */
    mp_rng r;
    mp_rng_seed(&r, seed, 9);
    mp_graphs g;
    rg_opts o = { 1, 40, 0.05, 0.05, 4 };
    int ok = rg_make(&g, &r, 40, 133, &o);
    padded pg = { 0 };
    ok = ok && pad_graph(&pg, &g, 32);
    const size_t A = pg.A, E = pg.E, H = (size_t)h;
    const size_t es = b->esize, nh = (E > A ? E : A) * H + MP_BOND_FDIM * H;
    float *ha = mp_malloc(nh * sizeof(float));
    for (size_t i = 0; ok && ha && i < nh; i++)
        ha[i] = (float)(2 * mp_rng_uniform(&r) - 1);
    void *src = dev_put(b, pg.src, E * 4), *dst = dev_put(b, pg.dst, E * 4);
    void *is = dev_put(b, pg.in_start, (A + 1) * 4), *ie = dev_put(b, pg.in_edge, E * 4);
    void *bond = dev_put(b, pg.bond, E / 2 * MP_BOND_MAX_HOT);
    void *x = b->alloc(b, E * H * es + 16), *y = b->alloc(b, E * H * es + 16);
    void *o1 = b->alloc(b, E * H * es + 16), *o2 = b->alloc(b, E * H * es + 16);
    void *o3 = b->alloc(b, E * H * es + 16), *o4 = b->alloc(b, E * H * es + 16);
    void *o5 = b->alloc(b, E * H * es + 16);
    void *s = b->alloc(b, A * H * es + 16), *wb = b->alloc(b, MP_BOND_FDIM * H * es + 16);
    ok = ok && ha && src && dst && is && ie && bond && x && y && o1 && o2 && o3 && o4 && o5 &&
         s && wb;
    ok = ok && put_elems(b, x, ha, E * H) == MP_OK &&
         put_elems(b, wb, ha, MP_BOND_FDIM * H) == MP_OK && put_elems(b, s, ha, A * H) == MP_OK;
    if (!ok)
        fail(f, "%s: set-up: %s", name, mp_error_message());
    const int n_st = b->act_st == MP_ST_BF16 ? 2 : 1;
    for (int si = 0; ok && si < n_st; si++) {
        const mp_stype st = si ? MP_ST_BF16 : MP_ST_ELEM, e = MP_ST_ELEM;
        const size_t n = E * H;
        /* y: a ReLU output in storage st */
        b->copy2d(b, y, st, (int)H, x, e, (int)H, (int32_t)E, h);
        b->relu_dropout(b, y, y, st, n, 0.3, mp_key_host(11));
        /* edge_embed: H0 with M_0 in one pass, against H0 then a ReLU pass */
        b->edge_embed(b, o1, o2, st, src, bond, s, wb, (int32_t)E, h);
        b->edge_embed(b, o3, NULL, st, src, bond, s, wb, (int32_t)E, h);
        b->relu_dropout(b, o4, o3, st, n, 0.0, mp_key_host(0));
        ok = same_dev(f, b, "edge_embed H0", o1, o3, n, st) &&
             same_dev(f, b, "edge_embed M_0", o2, o4, n, st);
        /* plain_ops' two-pass forms (a GPU; the same functions elsewhere) */
        plain.edge_embed(&plain, o3, o4, st, src, bond, s, wb, (int32_t)E, h);
        ok = ok && same_dev(f, b, "edge_embed vs plain_ops H0", o1, o3, n, st) &&
             same_dev(f, b, "edge_embed vs plain_ops M_0", o2, o4, n, st);
        for (int relu_in = 0; ok && relu_in < 2; relu_in++) {
            b->message(b, o1, st, s, is, ie, src, y, st, relu_in, (int32_t)A, (int32_t)E, h);
            plain.message(&plain, o2, st, s, is, ie, src, y, st, relu_in, (int32_t)A,
                          (int32_t)E, h);
            ok = same_dev(f, b, relu_in ? "message relu_in vs two passes" :
                          "message vs two passes", o1, o2, n, st);
        }
        /* message_backward against plain_ops' two passes (a segment sum into
         * ds, then the edge pass): dmsg (o4) in st, plain and through y with
         * dh0 (o3, o5) starting from the same nonzero values */
        b->copy2d(b, o4, st, (int)H, x, e, (int)H, (int32_t)E, h);
        b->message_backward(b, o1, st, NULL, s, is, ie, dst, o4, st, NULL, e, 0.0, (int32_t)A,
                            (int32_t)E, h);
        plain.message_backward(&plain, o2, st, NULL, s, is, ie, dst, o4, st, NULL, e, 0.0,
                               (int32_t)A, (int32_t)E, h);
        ok = ok && same_dev(f, b, "message_backward vs two passes", o1, o2, n, st);
        b->copy2d(b, o3, e, (int)H, x, e, (int)H, (int32_t)E, h);
        b->copy2d(b, o5, e, (int)H, x, e, (int)H, (int32_t)E, h);
        b->message_backward(b, o1, st, o3, s, is, ie, dst, o4, st, y, st, 0.3, (int32_t)A,
                            (int32_t)E, h);
        plain.message_backward(&plain, o2, st, o5, s, is, ie, dst, o4, st, y, st, 0.3,
                               (int32_t)A, (int32_t)E, h);
        ok = ok && same_dev(f, b, "message_backward fused dz vs two passes", o1, o2, n, st) &&
             same_dev(f, b, "message_backward fused dh0 vs two passes", o3, o5, n, e);
        /* atom_sum_backward through y, against the gather then the ReLU backward */
        b->atom_sum_backward(b, o1, o1, e, dst, s, y, st, 0.3, (int32_t)E, h);
        b->atom_sum_backward(b, o2, o2, e, dst, s, NULL, e, 0.0, (int32_t)E, h);
        b->relu_dropout_backward(b, o2, o2, e, y, st, o2, n, 0.3);
        ok = ok && same_dev(f, b, "atom_sum_backward through y", o1, o2, n, e);
        /* message_backward fused (dz, and dh0 += dz) against the plain
         * adjoint, then the ReLU backward (dh0 starts at 0: it ends at dz) */
        b->zero(b, o3, n * es);
        b->message_backward(b, o1, e, o3, s, is, ie, dst, x, e, y, st, 0.3, (int32_t)A,
                            (int32_t)E, h);
        b->message_backward(b, o2, e, NULL, s, is, ie, dst, x, e, NULL, e, 0.0, (int32_t)A,
                            (int32_t)E, h);
        b->relu_dropout_backward(b, o2, o2, e, y, st, o2, n, 0.3);
        ok = ok && same_dev(f, b, "message_backward fused dz", o1, o2, n, e) &&
             same_dev(f, b, "message_backward fused dh0", o3, o2, n, e);
    }
    void *bufs[] = { src, dst, is, ie, bond, x, y, o1, o2, o3, o4, o5, s, wb };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        b->free(b, bufs[i]);
    mp_free(ha);
    padded_free(&pg);
    mp_graphs_free(&g);
    mp_backend_close(b);
    return ok;
}

MP_TEST(ops_fused_equal_unfused_host)
{
    fx f;
    CHECK_MSG(fused_case(&f, "cpu", 33, 1) && fused_case(&f, "cpu", 7, 2), "%s", f.err);
}

MP_TEST(gpu_fused_equal_unfused)
{
    MP_NEED_GPU();
    fx f;
    int ok = 1;
    static const char *names[] = { "gpu:fp32", "gpu:bf16" };
    static const int hs[] = { 300, 301, 7, 64 };
    for (int k = 0; ok && k < 2; k++)
        for (int i = 0; ok && i < 4; i++)
            ok = fused_case(&f, names[k], hs[i], 10 + i);
    CHECK_MSG(ok, "%s", f.err);
}

/* ===================================================================== */
/* The model's training step on a bound device batch                      */
/* ===================================================================== */

/* A model on backend b bound to a random batch on the device, and the
 * device schedule its steps read (mp_model_step_bound). */
#define MAX_STEPS 4

typedef struct {
    mp_backend *b;
    mp_model   *m;
    dev_batch   d;
    float      *sched;
    int32_t    *k;
    void       *losses;
} stepper;

static void stepper_free(stepper *s)
{
    if (!s->b)
        return;
    mp_model_free(s->m);
    dev_batch_free(&s->d);
    s->b->free(s->b, s->sched);
    s->b->free(s->b, s->k);
    s->b->free(s->b, s->losses);
    memset(s, 0, sizeof *s);
}

/* targets: [n_mols x n_tasks] host floats, NaN = missing. */
static mp_status stepper_make(stepper *s, mp_backend *b, const mp_model_config *cfg,
                              const mp_graphs *g, const float *targets, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->b = b;
    mp_status st = mp_model_create(&s->m, cfg, b, seed);
    if (st == MP_OK)
        st = dev_batch_make(&s->d, b, g, targets, cfg->n_tasks);
    if (st != MP_OK)
        return st;
    /* the schedule: lr 1e-3 at t = 1 .. MAX_STEPS */
    float sched[2 * MAX_STEPS];
    int32_t zero = 0;
    for (int t = 0; t < MAX_STEPS; t++)
        mp_adam_sched_entry(1e-3, 0.9, 0.999, t + 1, sched + 2 * t);
    s->sched = dev_put(b, sched, sizeof sched);
    s->k = dev_put(b, &zero, sizeof zero);
    s->losses = b->alloc(b, MAX_STEPS * b->esize);
    if (!s->sched || !s->k || !s->losses)
        return mp_error_set(MP_ERR_NOMEM, "schedule: %s", mp_error_message());
    return mp_model_bind(s->m, &s->d.bt);
}

static void stepper_step(stepper *s)
{
    mp_model_step_bound(s->m, s->sched, s->k, s->losses);
}

/* The model's step index back to 0, its Adam moments to 0 and its
 * parameters to p (host floats): the state before its first step. */
static mp_status stepper_rewind(stepper *s, const float *p)
{
    mp_backend *b = s->b;
    int32_t zero = 0;
    size_t bytes = mp_model_n_params(s->m) * b->esize;
    b->zero(b, mp_model_block_ptr(s->m, MP_BLOCK_ADAM_M), bytes);
    b->zero(b, mp_model_block_ptr(s->m, MP_BLOCK_ADAM_V), bytes);
    mp_status st = b->upload(b, s->k, &zero, sizeof zero);
    return st != MP_OK ? st : mp_model_set_params(s->m, p);
}

/* One of the model's blocks as host floats (params or grads). */
static float *stepper_block(stepper *s, int grads)
{
    float *h = mp_malloc(mp_model_n_params(s->m) * sizeof(float) + 4);
    mp_status st = !h ? MP_ERR_NOMEM
                   : grads ? mp_model_get_grads(s->m, h) : mp_model_get_params(s->m, h);
    if (st != MP_OK) {
        mp_free(h);
        return NULL;
    }
    return h;
}

/* The composite bounds are looser than the per-op ones for a reason: at tf32
 * and bf16 a pre-activation within the rounding error of 0 can land on the
 * other side of the ReLU, which switches its unit's whole gradient path.  The
 * fraction of such units grows with the rounding error, and the gradient
 * error with its square root (about 2% at tf32, 5% at bf16 on random data);
 * even at fp32 one such flip among 10^5 units moves the gradient by ~1e-4.
 * Adam's first steps move each parameter by about lr * sign(gradient), so a
 * gradient element within rounding of 0 moves its parameter by 2 lr the
 * other way: the parameter bounds allow for a few hundred of those.  A
 * composition bug (a wrong buffer, a missing dependency) gives errors of
 * order 1, far above these bounds. */
static const double STEP_TOL_Y[3] = { 1e-5, 5e-3, 5e-2 };
static const double STEP_TOL_GRAD[3] = { 1e-3, 6e-2, 0.15 };
static const double STEP_TOL_PARAMS[3] = { 1e-3, 1e-2, 3e-2 };

/* The step's config and batch: hidden h, depth, dropout p, 3 tasks. */
static mp_model_config step_config(int h, int depth, double p)
{
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = h;
    cfg.depth = depth;
    cfg.dropout = p;
    cfg.n_tasks = 3;
    return cfg;
}

static float *random_targets(mp_rng *r, size_t n)
{
    float *t = mp_malloc((n + 1) * sizeof(float));
    for (size_t i = 0; t && i < n; i++)
        t[i] = mp_rng_uniform(r) < 0.1 ? NAN : (float)mp_rng_normal(r);
    return t;
}

/*
 * Two steps of the model on `tested` and on `oracle` from the same seed on
 * the same batch: loss, gradients and parameters within the bounds of
 * precision prec; then a second model on `tested` for the same bytes.
 */
static int step_case(fx *f, mp_backend *tb, mp_backend *ob, int prec, int32_t n_mols, int h,
                     int depth, double p, uint64_t seed)
{
    char what[200];
    mp_rng r;
    mp_rng_seed(&r, seed, 5);
    mp_graphs g;
    rg_opts o = { 1, 53, 0.05, 0.05, 6 };
    if (!rg_make(&g, &r, n_mols, 133, &o))
        return fail(f, "random graph: out of memory");
    mp_model_config cfg = step_config(h, depth, p);
    float *tg = random_targets(&r, (size_t)n_mols * 3);
    stepper st[3];
    memset(st, 0, sizeof st);
    int ok = tg && stepper_make(&st[0], tb, &cfg, &g, tg, seed) == MP_OK &&
             stepper_make(&st[1], ob, &cfg, &g, tg, seed) == MP_OK &&
             stepper_make(&st[2], tb, &cfg, &g, tg, seed) == MP_OK;
    if (!ok)
        fail(f, "step set-up: %s", mp_error_message());
    float *pg = NULL, *pr = NULL, *p2 = NULL;
    for (int step = 0; ok && step < 2; step++) {
        stepper_step(&st[0]);
        stepper_step(&st[1]);
        stepper_step(&st[2]);
        float lg[MAX_STEPS], lr[MAX_STEPS];
        double lrd[MAX_STEPS];
        if (tb->sync(tb) != MP_OK || tb->download(tb, lg, st[0].losses, sizeof lg) != MP_OK ||
            ob->download(ob, ob->esize == 8 ? (void *)lrd : (void *)lr, st[1].losses,
                         MAX_STEPS * ob->esize) != MP_OK) {
            ok = fail(f, "step %d: %s", step, mp_error_message());
            break;
        }
        if (ob->esize == 8)
            lr[step] = (float)lrd[step];
        snprintf(what, sizeof what, "step[%s] %d loss (mols %d h %d depth %d p %g)", tb->name,
                 step, (int)n_mols, h, depth, p);
        ok = host_compare(f, what, &lg[step], &lr[step], 1, STEP_TOL_Y[prec]);
        if (ok && step == 0) {
            pg = stepper_block(&st[0], 1);
            pr = stepper_block(&st[1], 1);
            snprintf(what, sizeof what, "step[%s] gradients (mols %d h %d depth %d p %g)",
                     tb->name, (int)n_mols, h, depth, p);
            ok = pg && pr && host_compare(f, what, pg, pr, mp_model_n_params(st[0].m),
                                          STEP_TOL_GRAD[prec]);
            mp_free(pg);
            mp_free(pr);
        }
    }
    if (ok) {
        pg = stepper_block(&st[0], 0);
        pr = stepper_block(&st[1], 0);
        p2 = stepper_block(&st[2], 0);
        size_t np = mp_model_n_params(st[0].m);
        snprintf(what, sizeof what, "step[%s] parameters after 2 steps (mols %d h %d)", tb->name,
                 (int)n_mols, h);
        ok = pg && pr && p2 && host_compare(f, what, pg, pr, np, STEP_TOL_PARAMS[prec]);
        if (ok && memcmp(pg, p2, np * sizeof(float)) != 0)
            ok = fail(f, "step[%s]: a second model from the same seed gave other parameters",
                      tb->name);
    }
    mp_free(pg);
    mp_free(pr);
    mp_free(p2);
    mp_free(tg);
    for (int i = 0; i < 3; i++)
        stepper_free(&st[i]);
    mp_graphs_free(&g);
    return ok;
}

static int steps_all(fx *f, mp_backend *tb, mp_backend *ob, int prec, int big)
{
    return step_case(f, tb, ob, prec, 50, 64, 3, 0.0, 5) &&
           step_case(f, tb, ob, prec, 40, 64, 3, 0.2, 6) &&
           step_case(f, tb, ob, prec, 9, 7, 1, 0.1, 8) &&
           step_case(f, tb, ob, prec, 20, 33, 5, 0.0, 9) &&
           (!big || step_case(f, tb, ob, prec, 12, 300, 3, 0.0, 7));
}

/* A test of backend `tested` against `oracle` (skipped, or failed under
 * MOLPROP_REQUIRE_GPU=1, where one needs an absent GPU): ok = call, with
 * tb, ob and f in scope. */
#define PAIR_TEST(tname, tested, oracle, call)                                     \
    MP_TEST(tname)                                                                 \
    {                                                                              \
        mp_backend *tb, *ob;                                                       \
        OPEN_OR_SKIP(tb, tested);                                                  \
        OPEN_OR_SKIP(ob, oracle);                                                  \
        fx f;                                                                      \
        int ok = (call);                                                           \
        mp_backend_close(tb);                                                      \
        mp_backend_close(ob);                                                      \
        CHECK_MSG(ok, "%s", f.err);                                                \
    }

PAIR_TEST(model_step_cpu, "cpu", "ref64", steps_all(&f, tb, ob, 0, 0))
PAIR_TEST(model_step_ref_bf16, "ref:bf16", "ref64:bf16", steps_all(&f, tb, ob, 2, 0))
PAIR_TEST(gpu_step_fp32, "gpu:fp32", "ref64", steps_all(&f, tb, ob, 0, 1))
PAIR_TEST(gpu_step_tf32, "gpu:tf32", "ref64", steps_all(&f, tb, ob, 1, 1))
PAIR_TEST(gpu_step_bf16, "gpu:bf16", "ref64:bf16", steps_all(&f, tb, ob, 2, 1))

/*
 * The model's step captured once and replayed: the same bytes as the eager
 * step of a model from the same seed; a second replay from the same state
 * the same bytes again; a replay with new parameters (read at replay time)
 * the gradients of the oracle's eager step with them; and a host transfer
 * inside a capture fails it with a message.
 */
static int capture_case(fx *f, const char *name, const char *oracle, int prec, int32_t n_mols,
                        int h, double p)
{
    mp_backend *b = NULL, *ob = NULL;
    if (mp_backend_open(&b, name) != MP_OK || mp_backend_open(&ob, oracle) != MP_OK) {
        mp_backend_close(b);
        return fail(f, "%s: %s", name, mp_error_message());
    }
    mp_rng r;
    mp_rng_seed(&r, 31, (uint64_t)n_mols);
    mp_graphs g;
    rg_opts o = { 1, 53, 0.05, 0.05, 6 };
    int ok = rg_make(&g, &r, n_mols, 133, &o);
    mp_model_config cfg = step_config(h, 3, p);
    float *tg = random_targets(&r, (size_t)n_mols * 3);
    stepper se, sc, so;
    memset(&se, 0, sizeof se);
    memset(&sc, 0, sizeof sc);
    memset(&so, 0, sizeof so);
    mp_capture *cap = NULL;
    float *p0 = NULL, *pe = NULL, *p1 = NULL, *p2 = NULL, *newp = NULL, *gg = NULL, *gr = NULL;
    ok = ok && tg && stepper_make(&se, b, &cfg, &g, tg, 3) == MP_OK &&
         stepper_make(&sc, b, &cfg, &g, tg, 3) == MP_OK &&
         stepper_make(&so, ob, &cfg, &g, tg, 3) == MP_OK && (p0 = stepper_block(&sc, 0));
    if (!ok)
        fail(f, "capture set-up (%s): %s", name, mp_error_message());
    size_t np = ok ? mp_model_n_params(sc.m) : 0, bytes = np * sizeof(float);
    if (ok) {
        stepper_step(&se);
        if (b->capture_begin(b) != MP_OK)
            ok = fail(f, "capture begin: %s", mp_error_message());
        if (ok) {
            stepper_step(&sc);
            if (b->capture_end(b, &cap) != MP_OK || b->replay(b, cap) != MP_OK)
                ok = fail(f, "%s step as a CUDA graph: %s", name, mp_error_message());
        }
    }
    if (ok) {
        pe = stepper_block(&se, 0);
        p1 = stepper_block(&sc, 0);
        if (!pe || !p1)
            ok = fail(f, "download: %s", mp_error_message());
        else if (memcmp(pe, p1, bytes) != 0)
            ok = fail(f, "%s: the replayed step and the eager one give other parameters", name);
    }
    if (ok) {
        if (stepper_rewind(&sc, p0) != MP_OK || b->replay(b, cap) != MP_OK ||
            !(p2 = stepper_block(&sc, 0)))
            ok = fail(f, "second replay: %s", mp_error_message());
        else if (memcmp(p1, p2, bytes) != 0)
            ok = fail(f, "%s: a second replay from the same state gave other parameters", name);
    }
    if (ok) {
        /* new parameters, read at replay time: the oracle's eager gradients */
        newp = mp_malloc(bytes + 4);
        for (size_t i = 0; newp && i < np; i++)
            newp[i] = 0.1f * p0[(i * 7919) % np];
        if (!newp || stepper_rewind(&sc, newp) != MP_OK || mp_model_set_params(so.m, newp) ||
            b->replay(b, cap) != MP_OK)
            ok = fail(f, "replay with new parameters: %s", mp_error_message());
        if (ok) {
            stepper_step(&so);
            gg = stepper_block(&sc, 1);
            gr = stepper_block(&so, 1);
            ok = gg && gr && host_compare(f, "replay with new parameters: gradients vs the "
                                          "oracle's eager step", gg, gr, np, STEP_TOL_GRAD[prec]);
        }
    }
    if (ok) {
        /* a host transfer inside a capture fails the capture, with a message */
        float x = 1;
        mp_capture *bad = NULL;
        if (b->capture_begin(b) != MP_OK)
            ok = fail(f, "capture begin: %s", mp_error_message());
        mp_status up = b->upload(b, sc.losses, &x, sizeof x);
        mp_status end = ok ? b->capture_end(b, &bad) : MP_OK;
        if (ok && (up == MP_OK || end == MP_OK || bad != NULL ||
                   !strstr(mp_error_message(), "captured")))
            ok = fail(f, "upload during capture: upload %s, end %s, '%s'", mp_status_name(up),
                      mp_status_name(end), mp_error_message());
        b->capture_free(b, bad);
        mp_backend_cuda_clear_error(b);
        if (ok && b->sync(b) != MP_OK)
            ok = fail(f, "after a failed capture: %s", mp_error_message());
    }
    if (cap)
        b->capture_free(b, cap);
    float *fr[] = { p0, pe, p1, p2, newp, gg, gr, tg };
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
        mp_free(fr[i]);
    stepper_free(&se);
    stepper_free(&sc);
    stepper_free(&so);
    mp_graphs_free(&g);
    mp_backend_close(b);
    mp_backend_close(ob);
    return ok;
}

MP_TEST(gpu_graph_capture)
{
    MP_NEED_GPU();
    fx f;
    int ok = capture_case(&f, "gpu:fp32", "ref64", 0, 30, 64, 0.1) &&
             capture_case(&f, "gpu:bf16", "ref64:bf16", 2, 50, 300, 0.0) &&
             capture_case(&f, "gpu:bf16", "ref64:bf16", 2, 300, 64, 0.1);
    CHECK_MSG(ok, "%s", f.err);
}

/* ===================================================================== */
/* The model's host training loop                                         */
/* ===================================================================== */

/* mp_model (D-MPNN, classification and regression, with extra features and
 * dropout) on `tested` against the same model on `oracle`: two training
 * steps, then an inference pass. */
static int model_case(fx *f, mp_backend *tb, mp_backend *ob, int prec, mp_model_task task,
                      double dropout, int extra_dim, int depth, uint64_t seed)
{
    char what[200];
    mp_model_config cfg = mp_model_config_default();
    cfg.task = task;
    cfg.n_tasks = 3;
    cfg.hidden = 96;
    cfg.depth = depth;
    cfg.dropout = dropout;
    cfg.extra_dim = extra_dim;
    const int32_t n = 24;
    mp_rng r;
    mp_rng_seed(&r, seed, 3);
    mp_graphs g;
    rg_opts o = { 1, 40, 0.05, 0.05, 4 };
    if (!rg_make(&g, &r, n, cfg.atom_fdim, &o))
        return fail(f, "random graph: out of memory");
    mp_model *mg = NULL, *mr = NULL;
    size_t nx = (size_t)n * (extra_dim ? extra_dim : 1), nt = (size_t)n * 3;
    float *extra = mp_malloc(nx * sizeof(float)), *tg = mp_malloc(nt * sizeof(float));
    float *outg = mp_malloc(nt * sizeof(float)), *outr = mp_malloc(nt * sizeof(float));
    float *pg = NULL, *pr = NULL;
    int ok = extra && tg && outg && outr;
    for (size_t i = 0; ok && i < (size_t)n * extra_dim; i++)
        extra[i] = (float)mp_rng_normal(&r);
    for (size_t i = 0; ok && i < nt; i++) {
        double u = mp_rng_uniform(&r);
        tg[i] = u < 0.1 ? NAN : task == MP_MODEL_CLASSIFICATION ? (float)(u < 0.55)
                                                                 : (float)mp_rng_normal(&r);
    }
    if (ok && (mp_model_create(&mg, &cfg, tb, 17) != MP_OK ||
               mp_model_create(&mr, &cfg, ob, 17) != MP_OK))
        ok = fail(f, "model: %s", mp_error_message());
    size_t np = ok ? mp_model_n_params(mg) : 0;
    if (ok && (!(pg = mp_malloc(np * sizeof(float))) || !(pr = mp_malloc(np * sizeof(float)))))
        ok = fail(f, "out of memory");
    const float *ex = extra_dim ? extra : NULL;
    for (int step = 0; ok && step < 2; step++) {
        double lg = 0, lr = 0;
        mp_model_zero_grad(mg);
        mp_model_zero_grad(mr);
        if (mp_model_forward(mg, &g, ex, n, 1, NULL) != MP_OK ||
            mp_model_forward(mr, &g, ex, n, 1, NULL) != MP_OK ||
            mp_model_loss_backward(mg, tg, &lg) != MP_OK ||
            mp_model_loss_backward(mr, tg, &lr) != MP_OK) {
            ok = fail(f, "model step %d: %s", step, mp_error_message());
            break;
        }
        snprintf(what, sizeof what, "model[%s] step %d loss (task %d p %g extra %d depth %d)",
                 tb->name, step, (int)task, dropout, extra_dim, depth);
        float fl = (float)lg, fr = (float)lr;
        ok = host_compare(f, what, &fl, &fr, 1, STEP_TOL_Y[prec]);
        if (ok && (mp_model_get_grads(mg, pg) != MP_OK || mp_model_get_grads(mr, pr) != MP_OK))
            ok = fail(f, "grads: %s", mp_error_message());
        snprintf(what, sizeof what, "model[%s] step %d gradients (task %d p %g extra %d depth %d)",
                 tb->name, step, (int)task, dropout, extra_dim, depth);
        ok = ok && host_compare(f, what, pg, pr, np, STEP_TOL_GRAD[prec]);
        if (ok && (mp_model_adam_step(mg, 1e-3) != MP_OK || mp_model_adam_step(mr, 1e-3) != MP_OK))
            ok = fail(f, "adam: %s", mp_error_message());
    }
    if (ok && (mp_model_get_params(mg, pg) != MP_OK || mp_model_get_params(mr, pr) != MP_OK))
        ok = fail(f, "params: %s", mp_error_message());
    snprintf(what, sizeof what, "model[%s] parameters after 2 steps", tb->name);
    ok = ok && host_compare(f, what, pg, pr, np, STEP_TOL_PARAMS[prec]);
    if (ok && (mp_model_forward(mg, &g, ex, n, 0, outg) != MP_OK ||
               mp_model_forward(mr, &g, ex, n, 0, outr) != MP_OK))
        ok = fail(f, "inference: %s", mp_error_message());
    snprintf(what, sizeof what, "model[%s] inference outputs", tb->name);
    ok = ok && host_compare(f, what, outg, outr, nt, STEP_TOL_Y[prec]);
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

static int models_all(fx *f, mp_backend *tb, mp_backend *ob, int prec)
{
    return model_case(f, tb, ob, prec, MP_MODEL_REGRESSION, 0.0, 0, 3, 1) &&
           model_case(f, tb, ob, prec, MP_MODEL_CLASSIFICATION, 0.15, 5, 3, 2) &&
           model_case(f, tb, ob, prec, MP_MODEL_REGRESSION, 0.1, 0, 1, 3) &&
           model_case(f, tb, ob, prec, MP_MODEL_REGRESSION, 0.0, 3, 4, 4);
}

PAIR_TEST(model_host_loop_ref_bf16, "ref:bf16", "ref64:bf16", models_all(&f, tb, ob, 2))
PAIR_TEST(gpu_model_dmpnn, "gpu:fp32", "ref64", models_all(&f, tb, ob, 0))
PAIR_TEST(gpu_model_dmpnn_tf32, "gpu:tf32", "ref64", models_all(&f, tb, ob, 1))
PAIR_TEST(gpu_model_dmpnn_bf16, "gpu:bf16", "ref64:bf16", models_all(&f, tb, ob, 2))

/* ===================================================================== */
/* bf16 is really bf16                                                    */
/* ===================================================================== */

/* Relative error of the W_h update c = ReLU(r + a w) at the model's shape
 * (m x 300 x 300: 2900 edges on a GPU) on backend `name`, its operands in the storage the
 * backend's model gives them, against ref64 on the unrounded values. */
static double wh_error(fx *f, const char *name, int m)
{
    mp_backend *b = NULL, *r = NULL;
    const int h = 300;
    const size_t nm = (size_t)m * h, nw = (size_t)h * h;
    if (mp_backend_open(&b, name) != MP_OK || mp_backend_open(&r, "ref64") != MP_OK) {
        mp_backend_close(b);
        fail(f, "%s: %s", name, mp_error_message());
        return -1;
    }
    mp_rng rng;
    mp_rng_seed(&rng, 204, 0);
    const mp_stype so = b->act_st, e = MP_ST_ELEM;
    float *ha = mp_malloc(nm * 4), *hw = mp_malloc(nw * 4), *hr = mp_malloc(nm * 4);
    float *hc = mp_malloc(nm * 4), *hc2 = mp_malloc(nm * 4);
    for (size_t i = 0; ha && i < nm; i++) {
        ha[i] = (float)(2 * mp_rng_uniform(&rng) - 1);
        hr[i] = (float)(2 * mp_rng_uniform(&rng) - 1);
    }
    for (size_t i = 0; hw && i < nw; i++)
        hw[i] = (float)(2 * mp_rng_uniform(&rng) - 1);
    void *a = b->alloc(b, nm * 4), *w = b->alloc(b, nw * 4), *ao = b->alloc(b, nm * 4);
    void *wo = b->alloc(b, nw * 4), *rr = b->alloc(b, nm * 4), *c = b->alloc(b, nm * 4);
    void *ra = r->alloc(r, nm * 8), *rw = r->alloc(r, nw * 8), *rr8 = r->alloc(r, nm * 8);
    void *rc = r->alloc(r, nm * 8);
    double err = -1;
    if (ha && hw && hr && hc && hc2 && a && w && ao && wo && rr && c && ra && rw && rr8 && rc &&
        put_elems(b, a, ha, nm) == MP_OK && put_elems(b, w, hw, nw) == MP_OK &&
        put_elems(b, rr, hr, nm) == MP_OK && put_elems(r, ra, ha, nm) == MP_OK &&
        put_elems(r, rw, hw, nw) == MP_OK && put_elems(r, rr8, hr, nm) == MP_OK) {
        /* the operands as the model stores them (a conversion at bf16) */
        b->copy2d(b, ao, so, h, a, e, h, m, h);
        b->copy2d(b, wo, so, h, w, e, h, h, h);
        b->gemm_res_relu(b, m, h, h, ao, h, wo, h, so, rr, h, c, h, e);
        r->gemm_res_relu(r, m, h, h, ra, h, rw, h, e, rr8, h, rc, h, e);
        double *d = mp_malloc(nm * 8);
        if (d && b->sync(b) == MP_OK && b->download(b, hc, c, nm * 4) == MP_OK &&
            r->download(r, d, rc, nm * 8) == MP_OK) {
            double d2 = 0, r2 = 0;
            for (size_t i = 0; i < nm; i++) {
                d2 += (hc[i] - d[i]) * (hc[i] - d[i]);
                r2 += d[i] * d[i];
            }
            err = sqrt(d2 / r2);
        } else {
            fail(f, "%s: %s", name, mp_error_message());
        }
        mp_free(d);
    } else {
        fail(f, "%s set-up: %s", name, mp_error_message());
    }
    void *bb[] = { a, w, ao, wo, rr, c }, *rb[] = { ra, rw, rr8, rc };
    for (int i = 0; i < 6; i++)
        b->free(b, bb[i]);
    for (int i = 0; i < 4; i++)
        r->free(r, rb[i]);
    float *fr[] = { ha, hw, hr, hc, hc2 };
    for (int i = 0; i < 5; i++)
        mp_free(fr[i]);
    mp_backend_close(b);
    mp_backend_close(r);
    return err;
}

/* At bf16 the rounding of the operands shows (error ~1e-3 and more), at
 * tf32 it is ~4x smaller; the same holds for the reference's bf16 mode
 * against its fp32 one (exact products: only the bf16 rounding is left). */
static void bf16_vs(mp_test_result *mp__r, const char *bf, const char *other, int m)
{
    fx f;
    double e_bf = wh_error(&f, bf, m), e_o = wh_error(&f, other, m);
    CHECK_MSG(e_bf >= 0 && e_o >= 0, "%s", f.err);
    printf("    W_h product vs ref64: %s rel err %.3g, %s %.3g\n", bf, e_bf, other, e_o);
    CHECK_MSG(e_bf > 1e-3, "%s product error %.3g: operands not rounded to bf16?", bf, e_bf);
    CHECK_MSG(e_bf > 3 * e_o, "%s error %.3g is not clearly above %s's %.3g", bf, e_bf,
              other, e_o);
}

MP_TEST(ops_ref_bf16_is_bf16)
{
    bf16_vs(mp__r, "ref:bf16", "ref", 97);
}

MP_TEST(gpu_bf16_is_bf16)
{
    MP_NEED_GPU();
    bf16_vs(mp__r, "gpu:bf16", "gpu:tf32", 2900);
}

/* ===================================================================== */
/* 50 ESOL steps: bf16 tracks fp32                                        */
/* ===================================================================== */

#define BS 50

/* The host training loop (forward, loss_backward, Adam) over n_steps
 * batches of 50 ESOL molecules. */
static mp_status esol_steps(mp_backend *b, int hidden, int n_steps, double *losses)
{
    mp_dataset *data;
    mp_features *feat;
    mp_status st;
    if ((st = mp_test_esol(&data, &feat)))
        return st;
    mp_model *m = NULL;
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    int32_t mols[BS];
    float tgt[BS];
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = hidden;
    if ((st = mp_model_create(&m, &cfg, b, 7)))
        goto done;
    int32_t nm = feat->g.n_mols;
    for (int s = 0; s < n_steps; s++) {
        for (int j = 0; j < BS; j++) {
            mols[j] = (int32_t)(((int64_t)s * 37 + (int64_t)j * 13) % nm);
            double y = data->targets[(size_t)mols[j] * data->n_tasks];
            tgt[j] = j == 7 ? NAN : (float)((y + 3.0) / 2.0);
        }
        mp_model_zero_grad(m);
        if ((st = mp_graphs_select(&batch, &feat->g, mols, BS)) ||
            (st = mp_model_forward(m, &batch, NULL, BS, 1, NULL)) ||
            (st = mp_model_loss_backward(m, tgt, &losses[s])) ||
            (st = mp_model_adam_step(m, 1e-4 + 2e-5 * s)))
            goto done;
    }
done:
    mp_graphs_free(&batch);
    mp_model_free(m);
    return st;
}

static double mean_of(const double *a, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    return n ? s / n : 0;
}

/*
 * bf16 against fp32 over 50 training steps.  The two runs start from the
 * same model and batches, but their rounding differs from the first step,
 * so they follow nearby, not equal, trajectories: one batch's loss can
 * differ by tens of percent at some step (16% seen on the H200) while the
 * curves agree.  So the checks are on what training cares about: the mean
 * loss over all steps and over the last 10 within a few percent (seen:
 * well under 1%), every step within 35% (a broken gradient or an
 * unrounded-vs-rounded mix-up sends single steps far off, or stops the
 * learning), and the loss falling.
 */
static void esol_check(mp_test_result *mp__r, const char *half_name, const char *ref_name,
                       int hidden)
{
    enum { S = 50 };
    double lh[S], lf[S];
    mp_backend *hb = NULL, *rb = NULL;
    CHECK_OK(mp_backend_open(&hb, half_name));
    CHECK(hb->act_st == MP_ST_BF16);
    mp_status st = esol_steps(hb, hidden, S, lh);
    mp_backend_close(hb);
    CHECK_OK(st);
    CHECK_OK(mp_backend_open(&rb, ref_name));
    st = esol_steps(rb, hidden, S, lf);
    mp_backend_close(rb);
    CHECK_OK(st);
    int at = 0;
    double e = 0;
    for (int i = 0; i < S; i++) {
        double d = fabs(lh[i] - lf[i]) / fmax(fabs(lf[i]), 1e-12);
        if (d > e) {
            e = d;
            at = i;
        }
    }
    double mh = mean_of(lh, S), mf = mean_of(lf, S);
    double th = mean_of(lh + S - 10, 10), tf = mean_of(lf + S - 10, 10);
    double e_mean = fabs(mh - mf) / mf, e_last = fabs(th - tf) / tf;
    printf("    %s vs %s, %d ESOL steps (hidden %d): mean loss %.4g vs %.4g (%.3g), last 10 "
           "%.4g vs %.4g (%.3g), worst step %d: %.4g vs %.4g (%.3g)\n", half_name, ref_name, S,
           hidden, mh, mf, e_mean, th, tf, e_last, at, lh[at], lf[at], e);
    CHECK_MSG(e_mean <= 0.02, "bf16 vs %s: mean loss differs by %g", ref_name, e_mean);
    CHECK_MSG(e_last <= 0.05, "bf16 vs %s: last 10 losses differ by %g", ref_name, e_last);
    CHECK_MSG(e <= 0.35, "bf16 vs %s: step %d's loss differs by %g", ref_name, at, e);
    CHECK(th < 0.8 * lh[0]);    /* it learns */
}

MP_TEST(model_ref_bf16_esol_50_steps)
{
    esol_check(mp__r, "ref:bf16", "cpu", 32);
}

MP_TEST(gpu_bf16_esol_50_steps)
{
    MP_NEED_GPU();
    esol_check(mp__r, "cuda:bf16", "cuda:fp32", 300);
}
