/*
 * test_gpu_bf16.c - real bf16 on the cuda backend: the bf16-storage ops of
 * models/ops.h (half_acts: to_bf16, gemm_batch_bf16, gemm_res_relu_bf16,
 * message_bf16, atom_sum_bf16, relu_dropout_backward_bf16,
 * atom_sum_backward_relu_bf16, message_backward_relu_bf16), the D-MPNN step
 * and the model's code on
 * them, and that "bf16" is really bf16.
 *
 * Every op runs on fresh random inputs against the double-precision
 * reference backend (ref64) running the op it stands for (message for
 * message_bf16, ...), on the unrounded inputs: relative error of each output
 * within 2e-2 (bf16's rounding is 2^-9 relative; fp32 outputs of the same
 * ops within 1e-5).  The products are also checked against ref64 fed the
 * same bf16-rounded operands (then only fp32 accumulation differs: 1e-4),
 * which proves the operands are read as bf16.  Outputs are poisoned first
 * (0xFF bytes: NaN in fp32 and in bf16), every op runs twice and must give
 * the same bytes.
 *
 * Where there is no GPU the same op checks run on an emulation of the
 * bf16 ops over the float reference backend (bf16_emu.h: plain C rounding
 * to nearest even), so the checks themselves, the model's bf16 path
 * (dmpnn.c with half_acts) and the step's bounds are exercised on every
 * machine.  The cuda tests (names gpu_bf16_*) are skipped without a GPU and
 * fail under MOLPROP_REQUIRE_GPU=1.
 */
#include "test.h"
#include "gpu_test.h"

#include "data/dataset.h"
#include "gpu/gpu.h"
#include "models/model.h"
#include "backend/ops.h"
#include "../bench/gpu_step.h"
#include "randgraph.h"
#include "bf16_emu.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const double TOL_BF16 = 2e-2;     /* a bf16 output, or a product of bf16 operands */
static const double TOL_F32 = 1e-5;      /* an fp32 output computed in fp32              */
static const double TOL_SAME_OPS = 1e-4; /* a product against ref64 on the same bf16 operands */

/* ===================================================================== */
/* Fixture                                                                */
/* ===================================================================== */

#define MAX_BUFS 96

typedef struct {
    mp_backend *g;          /* cuda:bf16 or the emulation */
    mp_backend *r;          /* ref64                      */
    mp_rng      rng;
    void       *gb[MAX_BUFS], *rb[MAX_BUFS];
    int         ngb, nrb;
    char        err[1024];
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

/* 0 on success; else the skip / failure reason is in why. */
static int fx_open(fx *f, int emulated, mp_precision prec, uint64_t seed, char *why, size_t n,
                   int *skip)
{
    memset(f, 0, sizeof *f);
    *skip = 0;
    mp_status st;
    if (emulated) {
        st = emu_open(&f->g);
    } else {
        if (!mp_backend_cuda_available(why, n)) {
            *skip = !mp_test_env_flag("MOLPROP_REQUIRE_GPU");
            return 1;
        }
        st = mp_backend_cuda_open(&f->g, prec);
    }
    if (st == MP_OK && (st = mp_backend_ref_open(&f->r, MP_F64)) != MP_OK) {
        mp_backend_close(f->g);
        f->g = NULL;
    }
    if (st != MP_OK) {
        snprintf(why, n, "%s", mp_error_message());
        return 1;
    }
    mp_rng_seed(&f->rng, seed, 11);
    return 0;
}

#define FX_OPEN(f, emulated, prec, seed)                                             \
    do {                                                                             \
        char why_[300];                                                              \
        int skip_;                                                                   \
        if (fx_open(&(f), (emulated), (prec), (seed), why_, sizeof why_, &skip_)) {  \
            if (skip_)                                                               \
                MP_SKIP(why_);                                                       \
            MP_FAIL("%s", why_);                                                     \
        }                                                                            \
    } while (0)

static void fx_reset(fx *f)
{
    for (int i = 0; i < f->ngb; i++)
        f->g->free(f->g, f->gb[i]);
    for (int i = 0; i < f->nrb; i++)
        f->r->free(f->r, f->rb[i]);
    f->ngb = f->nrb = 0;
}

static void fx_close(fx *f)
{
    fx_reset(f);
    mp_backend_close(f->g);
    mp_backend_close(f->r);
    f->g = f->r = NULL;
}

#define FX_END(f, ok)                                                                \
    do {                                                                             \
        int ok_ = (ok);                                                              \
        fx_close(&(f));                                                              \
        CHECK_MSG(ok_, "%s", (f).err);                                               \
    } while (0)

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

/* A buffer of n values on both sides: on the tested backend fp32 (half 0)
 * or bf16 (half 1), on ref64 double.  `h` NULL: poisoned (0xFF bytes on the
 * tested side, NaN on ref64).  round_ref: ref64 gets the bf16-rounded
 * values (the same operands as the bf16 side). */
typedef struct {
    void  *g, *r;
    size_t n;
    int    half;
} buf;

static int put_g(fx *f, const buf *p, const float *h)
{
    size_t es = p->half ? 2 : 4, bytes = p->n * es;
    if (!bytes)
        return 1;
    void *t = mp_malloc(bytes);
    if (!t)
        return fail(f, "out of host memory");
    if (!h)
        memset(t, 0xFF, bytes);
    else if (p->half)
        emu_round(t, h, p->n);
    else
        memcpy(t, h, bytes);
    mp_status st = f->g->upload(f->g, p->g, t, bytes);
    mp_free(t);
    return st == MP_OK ? 1 : fail(f, "upload: %s", mp_error_message());
}

static int buf_make(fx *f, buf *p, size_t n, int half, const float *h, int round_ref)
{
    p->n = n;
    p->half = half;
    p->g = galloc(f, n * (half ? 2 : 4));
    p->r = ralloc(f, n * sizeof(double));
    if (!p->g || !p->r)
        return fail(f, "allocation of %zu values failed: %s", n, mp_error_message());
    double *rr = p->r;
    for (size_t i = 0; i < n; i++)
        rr[i] = !h ? NAN : round_ref ? bf_value(bf_round(h[i])) : h[i];
    return put_g(f, p, h);
}

static float *rand_floats(fx *f, size_t n, double scale)
{
    float *x = mp_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; x && i < n; i++)
        x[i] = (float)(scale * (2 * mp_rng_uniform(&f->rng) - 1));
    return x;
}

/* Random values in [-1, 1) on both sides (ref64 rounded like the bf16 side
 * when round_ref). */
static int buf_rand(fx *f, buf *p, size_t n, int half, int round_ref)
{
    float *h = rand_floats(f, n, 1.0);
    if (!h)
        return fail(f, "out of host memory");
    int ok = buf_make(f, p, n, half, h, round_ref);
    mp_free(h);
    return ok;
}

/* The tested side as doubles (and its raw bytes when raw != NULL). */
static int get_g(fx *f, const buf *p, double *out, void **raw)
{
    size_t es = p->half ? 2 : 4, bytes = p->n * es;
    void *t = mp_malloc(bytes ? bytes : 1);
    if (!t)
        return fail(f, "out of host memory");
    if (f->g->sync(f->g) != MP_OK || (bytes && f->g->download(f->g, t, p->g, bytes) != MP_OK)) {
        mp_free(t);
        return fail(f, "the tested backend reported: %s", mp_error_message());
    }
    for (size_t i = 0; i < p->n; i++)
        out[i] = p->half ? bf_value(((uint16_t *)t)[i]) : ((float *)t)[i];
    if (raw)
        *raw = t;
    else
        mp_free(t);
    return 1;
}

/* ||g - r|| / ||r|| <= tol, NaN on both sides = not written by either;
 * returns the relative error in *rel_out when not NULL. */
static int compare(fx *f, const char *what, const buf *p, double tol, void **raw,
                   double *rel_out)
{
    size_t n = p->n;
    double *gv = mp_malloc((n ? n : 1) * sizeof(double));
    if (!gv)
        return fail(f, "out of host memory");
    if (!get_g(f, p, gv, raw)) {
        mp_free(gv);
        return 0;
    }
    const double *rv = p->r;
    double d2 = 0, r2 = 0;
    int ok = 1;
    for (size_t i = 0; ok && i < n; i++) {
        int gn = isnan(gv[i]), rn = isnan(rv[i]);
        if (gn && rn)
            continue;
        if (gn != rn) {
            ok = fail(f, "%s: element %zu of %zu: tested %.9g, ref %.9g (%s)", what, i, n, gv[i],
                      rv[i], gn ? "not written, or NaN" : "written by the tested side only");
            break;
        }
        d2 += (gv[i] - rv[i]) * (gv[i] - rv[i]);
        r2 += rv[i] * rv[i];
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    if (ok && mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
        printf("    %-88s rel %.3g (bound %.3g)\n", what, rel, tol);
    if (ok && !(rel <= tol))
        ok = fail(f, "%s: relative error %.3g > %.3g over %zu elements", what, rel, tol, n);
    if (rel_out)
        *rel_out = rel;
    mp_free(gv);
    if (!ok && raw) {
        mp_free(*raw);
        *raw = NULL;
    }
    return ok;
}

/* After a second run: the same bytes as *first (freed here). */
static int same_bytes(fx *f, const char *what, const buf *p, void **first)
{
    size_t bytes = p->n * (p->half ? 2 : 4);
    void *now = mp_malloc(bytes ? bytes : 1);
    int ok = 0;
    if (!now)
        fail(f, "out of host memory");
    else if (f->g->sync(f->g) != MP_OK ||
             (bytes && f->g->download(f->g, now, p->g, bytes) != MP_OK))
        fail(f, "%s (second run): %s", what, mp_error_message());
    else if (bytes && memcmp(now, *first, bytes) != 0)
        fail(f, "%s: not deterministic: a second run gave other bytes", what);
    else
        ok = 1;
    mp_free(now);
    mp_free(*first);
    *first = NULL;
    return ok;
}

/* Raw bytes (index arrays) on both sides. */
static int raw_make(fx *f, void **g, void **r, const void *h, size_t bytes)
{
    *g = galloc(f, bytes);
    *r = ralloc(f, bytes);
    if (!*g || !*r)
        return fail(f, "allocation of %zu bytes failed: %s", bytes, mp_error_message());
    if (bytes && (f->g->upload(f->g, *g, h, bytes) != MP_OK ||
                  f->r->upload(f->r, *r, h, bytes) != MP_OK))
        return fail(f, "upload: %s", mp_error_message());
    return 1;
}

/* ===================================================================== */
/* The ops                                                                */
/* ===================================================================== */

/* One output checked, then the op run again after re-poisoning and the
 * bytes compared: the pattern of every case below. */
typedef struct {
    const char *name;
    buf        *out;
    double      tol;
    const float *init;     /* what the output held before the op (NULL: poison) */
} out_spec;

typedef void (*op_fn)(fx *f, void *arg, int gpu_side);

/* Runs op on both sides, checks every output, runs it again on the tested
 * side (outputs reset as before) and checks the bytes. */
static int run_checked(fx *f, const char *what, op_fn op, void *arg, out_spec *outs, int n_outs)
{
    char name[200];
    void *raw[8] = { 0 };
    op(f, arg, 1);
    op(f, arg, 0);
    int ok = 1;
    for (int i = 0; ok && i < n_outs; i++) {
        snprintf(name, sizeof name, "%s: %s", what, outs[i].name);
        ok = compare(f, name, outs[i].out, outs[i].tol, &raw[i], NULL);
    }
    for (int i = 0; ok && i < n_outs; i++)
        ok = put_g(f, outs[i].out, outs[i].init);
    if (ok)
        op(f, arg, 1);
    for (int i = 0; ok && i < n_outs; i++) {
        snprintf(name, sizeof name, "%s: %s", what, outs[i].name);
        ok = same_bytes(f, name, outs[i].out, &raw[i]);
    }
    for (int i = 0; i < n_outs; i++)
        mp_free(raw[i]);
    return ok;
}

/* ---- to_bf16: exact round to nearest even ----------------------------- */

static int case_to_bf16(fx *f, size_t n)
{
    float *h = rand_floats(f, n, 3.0);
    if (!h)
        return fail(f, "out of host memory");
    /* ties and specials: exact halves between two bf16 values, tiny, huge */
    for (size_t i = 0; i + 4 < n && i < 64; i += 4) {
        uint32_t u = 0x3f808000u + ((uint32_t)(i / 4) << 16);   /* a tie, odd or even below */
        memcpy(&h[i], &u, 4);
        h[i + 1] = 1e-30f * (float)(i + 1);
        h[i + 2] = -3e38f;
    }
    buf src, dst;
    int ok = buf_make(f, &src, n, 0, h, 0) && buf_make(f, &dst, n, 1, NULL, 0);
    void *raw = NULL;
    if (ok) {
        f->g->to_bf16(f->g, dst.g, src.g, n);
        double *gv = mp_malloc((n ? n : 1) * sizeof(double));
        ok = gv && get_g(f, &dst, gv, &raw);
        for (size_t i = 0; ok && i < n; i++)
            if (((uint16_t *)raw)[i] != bf_round(h[i]))
                ok = fail(f, "to_bf16 (n=%zu): element %zu: %.9g -> 0x%04x, round to nearest "
                          "even gives 0x%04x", n, i, h[i], ((uint16_t *)raw)[i], bf_round(h[i]));
        mp_free(gv);
    }
    ok = ok && put_g(f, &dst, NULL);
    if (ok) {
        f->g->to_bf16(f->g, dst.g, src.g, n);
        char what[64];
        snprintf(what, sizeof what, "to_bf16 (n=%zu)", n);
        ok = same_bytes(f, what, &dst, &raw);
    }
    mp_free(raw);
    mp_free(h);
    fx_reset(f);
    return ok;
}

/* ---- products ---------------------------------------------------------- */

typedef struct {
    int count;
    unsigned c_bf16;
    mp_gemm gg[2], gr[2];
} gemm_arg;

static void op_gemm(fx *f, void *x, int gpu)
{
    gemm_arg *a = x;
    if (gpu)
        f->g->gemm_batch_bf16(f->g, a->count, a->gg, a->c_bf16);
    else
        f->r->gemm_batch(f->r, a->count, a->gr);
}

/* The backward pair of a W_h step at (rows, h): dW += X^T dZ (beta 1) and
 * dX = dZ W^T (beta 0), with padded leading dimensions when pad; or one
 * product alone (count 1, forward shape, beta 0, or k = 0).  dx_half: dX
 * is a bf16 buffer (as dMsg is). */
static int case_gemm(fx *f, int rows, int h, int pad, int count, int same_operands, int dx_half)
{
    char what[160];
    int ld = h + pad;
    buf X, dZ, W, dW, dX;
    float *dw0 = NULL;
    int ok = buf_rand(f, &X, (size_t)rows * ld, 1, same_operands) &&
             buf_rand(f, &dZ, (size_t)rows * ld, 1, same_operands) &&
             buf_rand(f, &W, (size_t)h * ld, 1, same_operands);
    ok = ok && (dw0 = rand_floats(f, (size_t)h * ld, 1.0)) != NULL;
    ok = ok && buf_make(f, &dW, (size_t)h * ld, 0, dw0, 0) &&
         buf_make(f, &dX, (size_t)rows * ld, dx_half, NULL, 0);
    if (!ok) {
        mp_free(dw0);
        return 0;
    }
    gemm_arg a;
    memset(&a, 0, sizeof a);
    a.count = count;
    a.c_bf16 = dx_half ? (count == 1 ? 1u : 2u) : 0u;
    a.gg[0] = (mp_gemm){ 1, 0, h, h, rows, 1.0, 1.0, X.g, dZ.g, dW.g, ld, ld, ld };
    a.gr[0] = (mp_gemm){ 1, 0, h, h, rows, 1.0, 1.0, X.r, dZ.r, dW.r, ld, ld, ld };
    a.gg[1] = (mp_gemm){ 0, 1, rows, h, h, 1.0, 0.0, dZ.g, W.g, dX.g, ld, ld, ld };
    a.gr[1] = (mp_gemm){ 0, 1, rows, h, h, 1.0, 0.0, dZ.r, W.r, dX.r, ld, ld, ld };
    if (count == 1) {   /* the forward shape alone: dX = dZ W, beta 0, alpha 0.5 */
        a.gg[0] = (mp_gemm){ 0, 0, rows, h, h, 0.5, 0.0, dZ.g, W.g, dX.g, ld, ld, ld };
        a.gr[0] = (mp_gemm){ 0, 0, rows, h, h, 0.5, 0.0, dZ.r, W.r, dX.r, ld, ld, ld };
    }
    double tol = same_operands ? TOL_SAME_OPS : TOL_BF16;
    snprintf(what, sizeof what, "gemm_batch_bf16 (count %d, rows %d, h %d, pad %d, %s, dX %s)",
             count, rows, h, pad, same_operands ? "ref on the same bf16 operands" : "ref unrounded",
             dx_half ? "bf16" : "fp32");
    /* a bf16 dX is rounded at the end: bf16's bound whatever the operands */
    out_spec outs[2] = { { "dX", &dX, dx_half ? TOL_BF16 : tol, NULL }, { "dW", &dW, tol, dw0 } };
    /* pad columns of dX are never written: poison stays NaN on both sides */
    ok = run_checked(f, what, op_gemm, &a, outs, count == 1 ? 1 : 2);
    mp_free(dw0);
    fx_reset(f);
    return ok;
}

typedef struct {
    int m, n, k, ld, inplace, rc;
    buf *a, *w, *r, *c;
} rr_arg;

static void op_res_relu(fx *f, void *x, int gpu)
{
    rr_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    void *c = gpu ? q->c->g : q->c->r;
    void *r = q->inplace ? c : gpu ? q->r->g : q->r->r;
    if (gpu)
        b->gemm_res_relu_bf16(b, q->m, q->n, q->k, q->a->g, q->ld, q->w->g, q->ld, r, q->ld, c,
                              q->ld, q->rc);
    else
        b->gemm_res_relu(b, q->m, q->n, q->k, q->a->r, q->ld, q->w->r, q->ld, r, q->ld, c, q->ld);
}

/* rc: r and c bf16 too (the model's W_h update with bf16 H0 and M_t; c
 * rounded at the end, so bf16's bound). */
static int case_res_relu(fx *f, int m, int h, int pad, int inplace, int same_operands, int rc,
                         double *rel_out)
{
    char what[160];
    int ld = h + pad;
    buf A, W, R, C;
    float *r0 = rand_floats(f, (size_t)m * ld, 1.0);
    int ok = r0 && buf_rand(f, &A, (size_t)m * ld, 1, same_operands) &&
             buf_rand(f, &W, (size_t)h * ld, 1, same_operands) &&
             buf_make(f, &R, (size_t)m * ld, rc, r0, rc) &&
             buf_make(f, &C, (size_t)m * ld, rc, inplace ? r0 : NULL, rc);
    if (ok) {
        rr_arg q = { m, h, h, ld, inplace, rc, &A, &W, &R, &C };
        snprintf(what, sizeof what, "gemm_res_relu_bf16 (m %d, h %d, pad %d%s, %s, r/c %s)", m,
                 h, pad, inplace ? ", in place" : "",
                 same_operands ? "ref on the same bf16 operands" : "ref unrounded",
                 rc ? "bf16" : "fp32");
        out_spec o = { "c", &C, same_operands && !rc ? TOL_SAME_OPS : TOL_BF16,
                       inplace ? r0 : NULL };
        ok = run_checked(f, what, op_res_relu, &q, &o, 1);
        if (ok && rel_out) {
            /* the error of the first run (the output now holds the second) */
            ok = compare(f, what, &C, o.tol, NULL, rel_out);
        }
    }
    mp_free(r0);
    fx_reset(f);
    return ok;
}

/* ---- graph ops --------------------------------------------------------- */

typedef struct {
    mp_graphs h;
    void *src[2], *dst[2], *in_start[2], *in_edge[2], *bond[2];   /* [0] tested, [1] ref */
} dgraph;

static const rg_opts SHAPES[] = {
    { 1, 11, 0.15, 0.15, 2 },
    { 1, 53, 0.05, 0.05, 6 },
    { 1, 5, 1.0, 0.0, 0 },      /* only empty molecules */
};
static const int SHAPE_MOLS[] = { 7, 60, 3 };

static int dgraph_make(fx *f, dgraph *d, int si)
{
    memset(d, 0, sizeof *d);
    if (!rg_make(&d->h, &f->rng, SHAPE_MOLS[si], 20, &SHAPES[si]))
        return fail(f, "random graph: out of memory");
    const mp_graphs *g = &d->h;
    size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges;
    return raw_make(f, &d->src[0], &d->src[1], g->edge_src, E * 4) &&
           raw_make(f, &d->dst[0], &d->dst[1], g->edge_dst, E * 4) &&
           raw_make(f, &d->in_start[0], &d->in_start[1], g->in_start, (A + 1) * 4) &&
           raw_make(f, &d->in_edge[0], &d->in_edge[1], g->in_edge, E * 4) &&
           raw_make(f, &d->bond[0], &d->bond[1], g->bond_hot, E / 2 * MP_BOND_MAX_HOT);
}

typedef struct {
    dgraph *d;
    int h;
    double p;
    buf *x, *y, *out, *s, *dh0, *dxf;
    int mh;                 /* x (M) or y is bf16 (the tested side) */
} g_arg;

#define SIDE(bp) (gpu ? (bp)->g : (bp)->r)
#define GI(field) (gpu ? q->d->field[0] : q->d->field[1])

static void op_message(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    const mp_graphs *g = &q->d->h;
    if (gpu)
        b->message_bf16(b, SIDE(q->out), SIDE(q->s), GI(in_start), GI(in_edge), GI(src),
                        SIDE(q->x), q->mh, g->n_atoms, g->n_edges, q->h);
    else
        b->message(b, SIDE(q->out), SIDE(q->s), GI(in_start), GI(in_edge), GI(src), SIDE(q->x),
                   g->n_atoms, g->n_edges, q->h);
}

static void op_atom_sum(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    const mp_graphs *g = &q->d->h;
    if (gpu)
        b->atom_sum_bf16(b, SIDE(q->out), GI(in_start), GI(in_edge), SIDE(q->x), q->mh,
                         g->n_atoms, q->h);
    else
        b->atom_sum(b, SIDE(q->out), GI(in_start), GI(in_edge), SIDE(q->x), g->n_atoms, q->h);
}

static void op_message_backward_relu(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    const mp_graphs *g = &q->d->h;
    if (gpu)
        b->message_backward_relu_bf16(b, SIDE(q->out), SIDE(q->dh0), SIDE(q->s), GI(in_start),
                                      GI(in_edge), GI(dst), SIDE(q->x), SIDE(q->y), q->mh, q->p,
                                      g->n_atoms, g->n_edges, q->h);
    else
        b->message_backward_relu(b, SIDE(q->out), SIDE(q->dh0), SIDE(q->s), GI(in_start),
                                 GI(in_edge), GI(dst), SIDE(q->x), SIDE(q->y), q->p, g->n_atoms,
                                 g->n_edges, q->h);
}

static void op_relu_backward(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    size_t n = q->x->n;
    /* dx aliases dy (as the model calls it for dho) when dxf == x */
    if (gpu)
        b->relu_dropout_backward_bf16(b, SIDE(q->dxf), SIDE(q->out), SIDE(q->y), SIDE(q->x), n,
                                      q->p);
    else
        b->relu_dropout_backward(b, SIDE(q->dxf), SIDE(q->y), SIDE(q->x), n, q->p);
}

static void op_atom_sum_backward_relu(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    const mp_graphs *g = &q->d->h;
    if (gpu) {
        b->atom_sum_backward_relu_bf16(b, SIDE(q->dxf), SIDE(q->out), GI(dst), SIDE(q->x),
                                       SIDE(q->y), q->mh, q->p, g->n_edges, q->h);
        return;
    }
    b->atom_sum_backward(b, SIDE(q->dxf), GI(dst), SIDE(q->x), g->n_edges, q->h);
    b->relu_dropout_backward(b, SIDE(q->dxf), SIDE(q->y), SIDE(q->dxf), (size_t)g->n_edges * q->h,
                             q->p);
}

/* edge_embed_relu_bf16: x = a (atoms), y = wb (bond rows), out = h0, dxf = m0 */
static void op_edge_embed_relu(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    const mp_graphs *g = &q->d->h;
    if (gpu) {
        b->edge_embed_relu_bf16(b, SIDE(q->out), SIDE(q->dxf), GI(src), GI(bond), SIDE(q->x),
                                SIDE(q->y), g->n_edges, q->h);
        return;
    }
    b->edge_embed(b, SIDE(q->out), GI(src), GI(bond), SIDE(q->x), SIDE(q->y), g->n_edges, q->h);
    b->relu_dropout(b, SIDE(q->dxf), SIDE(q->out), (size_t)g->n_edges * q->h, 0.0, 0);
}

/* relu_dropout_bf16: out = relu_dropout(x), key 5 + p's percent */
static void op_relu_dropout(fx *f, void *x, int gpu)
{
    g_arg *q = x;
    mp_backend *b = gpu ? f->g : f->r;
    uint64_t key = 5 + (uint64_t)(q->p * 100);
    if (gpu)
        b->relu_dropout_bf16(b, SIDE(q->out), SIDE(q->x), q->x->n, q->p, key);
    else
        b->relu_dropout(b, SIDE(q->out), SIDE(q->x), q->x->n, q->p, key);
}

#undef SIDE
#undef GI

/* y with ~40% exact zeros (a ReLU output), on both sides, fp32 or bf16
 * (then ref64 gets the same rounded values). */
static int relu_like(fx *f, buf *y, size_t n, int half)
{
    float *h = rand_floats(f, n, 1.0);
    if (!h)
        return fail(f, "out of host memory");
    for (size_t i = 0; i < n; i++)
        h[i] = h[i] < -0.2f ? 0.0f : h[i] + 0.2f;
    int ok = buf_make(f, y, n, half, h, half);
    mp_free(h);
    return ok;
}

/* mh: the messages M (input of message, atom_sum; y of the backwards) are
 * bf16 buffers, ref64 on the same rounded values. */
static int case_graph_ops(fx *f, int si, int h, int mh)
{
    char what[160];
    dgraph d;
    int ok = dgraph_make(f, &d, si);
    const mp_graphs *g = &d.h;
    size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges, nE = E * h, nA = A * h;
    const char *mt = mh ? "bf16" : "fp32";
    buf m, out, s, a;
    ok = ok && buf_rand(f, &m, nE, mh, mh) && buf_make(f, &out, nE, 1, NULL, 0) &&
         buf_make(f, &s, nA, 0, NULL, 0) && buf_make(f, &a, nA, 1, NULL, 0);
    g_arg q = { &d, h, 0.0, &m, NULL, &out, &s, NULL, NULL, mh };
    if (ok) {
        snprintf(what, sizeof what, "message_bf16 (mols %d, h %d, M %s)", (int)g->n_mols, h, mt);
        out_spec o[2] = { { "msg (bf16)", &out, TOL_BF16, NULL }, { "s", &s, TOL_F32, NULL } };
        ok = run_checked(f, what, op_message, &q, o, 2);
    }
    if (ok) {
        q.out = &a;
        snprintf(what, sizeof what, "atom_sum_bf16 (mols %d, h %d, M %s)", (int)g->n_mols, h,
                 mt);
        out_spec o = { "a (bf16)", &a, TOL_BF16, NULL };
        ok = run_checked(f, what, op_atom_sum, &q, &o, 1);
    }
    for (int pi = 0; ok && pi < 2; pi++) {
        double p = pi ? 0.25 : 0.0;
        buf dmsg, y, dzh, dh0, ds;
        float *dh00 = rand_floats(f, nE, 1.0);
        /* dmsg bf16, ref64 on the same rounded values: the fp32 outputs
         * (ds, dh0) then agree to fp32 rounding */
        ok = dh00 && buf_rand(f, &dmsg, nE, 1, 1) && relu_like(f, &y, nE, mh) &&
             buf_make(f, &dzh, nE, 1, NULL, 0) && buf_make(f, &dh0, nE, 0, dh00, 0) &&
             buf_make(f, &ds, nA, 0, NULL, 0);
        if (ok) {
            g_arg r = { &d, h, p, &dmsg, &y, &dzh, &ds, &dh0, NULL, mh };
            snprintf(what, sizeof what, "message_backward_relu_bf16 (mols %d, h %d, p %g, y %s)",
                     (int)g->n_mols, h, p, mt);
            out_spec o[3] = { { "dz (bf16)", &dzh, TOL_BF16, NULL },
                              { "dh0 (+= dz)", &dh0, TOL_F32, dh00 },
                              { "ds", &ds, TOL_F32, NULL } };
            ok = run_checked(f, what, op_message_backward_relu, &r, o, 3);
        }
        buf da, dx, dxh;
        ok = ok && buf_rand(f, &da, nA, 0, 0) && buf_make(f, &dx, nE, 0, NULL, 0) &&
             buf_make(f, &dxh, nE, 1, NULL, 0);
        if (ok) {
            dxh.r = dx.r;   /* the reference of the rounded copy: ref64's dx */
            g_arg r = { &d, h, p, &da, &y, &dxh, NULL, NULL, &dx, mh };
            snprintf(what, sizeof what, "atom_sum_backward_relu_bf16 (mols %d, h %d, p %g, y %s)",
                     (int)g->n_mols, h, p, mt);
            out_spec o[2] = { { "dx", &dx, TOL_F32, NULL }, { "dx (bf16)", &dxh, TOL_BF16, NULL } };
            ok = run_checked(f, what, op_atom_sum_backward_relu, &r, o, 2);
        }
        mp_free(dh00);
    }
    if (ok && mh) {
        /* H0 and M_0 = ReLU(H0) in bf16 from the atom part a and bond rows wb */
        buf aa, wb, h0, m0;
        ok = buf_rand(f, &aa, nA, 0, 0) && buf_rand(f, &wb, (size_t)MP_BOND_FDIM * h, 0, 0) &&
             buf_make(f, &h0, nE, 1, NULL, 0) && buf_make(f, &m0, nE, 1, NULL, 0);
        if (ok) {
            g_arg r = { &d, h, 0.0, &aa, &wb, &h0, NULL, NULL, &m0, 1 };
            snprintf(what, sizeof what, "edge_embed_relu_bf16 (mols %d, h %d)", (int)g->n_mols,
                     h);
            out_spec o[2] = { { "h0 (bf16)", &h0, TOL_BF16, NULL },
                              { "m0 (bf16)", &m0, TOL_BF16, NULL } };
            ok = run_checked(f, what, op_edge_embed_relu, &r, o, 2);
        }
    }
    mp_graphs_free(&d.h);
    fx_reset(f);
    return ok;
}

/* relu_dropout_bf16 over n bf16 values (alias: in place). */
static int case_relu_dropout(fx *f, size_t n, double p, int alias)
{
    char what[160];
    buf x, y;
    float *x0 = rand_floats(f, n, 1.0);
    int ok = x0 && buf_make(f, &x, n, 1, x0, 1) && buf_make(f, &y, n, 1, NULL, 0);
    if (ok) {
        buf *out = alias ? &x : &y;
        g_arg q = { NULL, 0, p, &x, NULL, out, NULL, NULL, NULL, 1 };
        snprintf(what, sizeof what, "relu_dropout_bf16 (n %zu, p %g%s)", n, p,
                 alias ? ", in place" : "");
        /* a unit dropped on one side only is an error of order 1 */
        out_spec o = { "y (bf16)", out, TOL_BF16, alias ? x0 : NULL };
        ok = run_checked(f, what, op_relu_dropout, &q, &o, 1);
    }
    mp_free(x0);
    fx_reset(f);
    return ok;
}

static int case_relu_backward(fx *f, size_t n, double p, int alias)
{
    char what[160];
    buf dy, y, dx, dxh;
    float *dy0 = rand_floats(f, n, 1.0);
    int ok = dy0 && buf_make(f, &dy, n, 0, dy0, 0) && relu_like(f, &y, n, 0) &&
             buf_make(f, &dx, n, 0, NULL, 0) && buf_make(f, &dxh, n, 1, NULL, 0);
    if (ok) {
        dxh.r = alias ? dy.r : dx.r;   /* the reference of the rounded copy: ref64's dx */
        g_arg q = { NULL, 0, p, &dy, &y, &dxh, NULL, NULL, alias ? &dy : &dx, 0 };
        snprintf(what, sizeof what, "relu_dropout_backward_bf16 (n %zu, p %g%s)", n, p,
                 alias ? ", dx = dy" : "");
        out_spec o[2] = { { "dx", alias ? &dy : &dx, TOL_F32, alias ? dy0 : NULL },
                          { "dx (bf16)", &dxh, TOL_BF16, NULL } };
        /* aliased: run_checked resets dy (o[0]) to dy0 before the second run */
        ok = run_checked(f, what, op_relu_backward, &q, o, 2);
    }
    mp_free(dy0);
    fx_reset(f);
    return ok;
}

/* big: also the model's W_h shape (2900 x 300 x 300), too slow for the
 * plain-loop reference on every test run (the GPU tests only). */
static int ops_all(fx *f, int big)
{
    static const size_t NS[] = { 1, 7, 1001, 300 * 301 };
    for (size_t i = 0; i < sizeof NS / sizeof NS[0]; i++)
        if (!case_to_bf16(f, NS[i]))
            return 0;
    static const int H[] = { 1, 7, 64, 300, 301 };
    for (size_t i = 0; i < sizeof H / sizeof H[0]; i++)
        for (int si = 0; si < 3; si++)
            if (!case_graph_ops(f, si, H[i], 0) || !case_graph_ops(f, si, H[i], 1))
                return 0;
    if (!case_relu_dropout(f, 1, 0.0, 0) || !case_relu_dropout(f, 4099, 0.0, 1) ||
        !case_relu_dropout(f, 60 * 300, 0.3, 0) || !case_relu_dropout(f, 60 * 301, 0.2, 1))
        return 0;
    if (!case_relu_backward(f, 1, 0.0, 0) || !case_relu_backward(f, 4099, 0.0, 0) ||
        !case_relu_backward(f, 60 * 300, 0.3, 0) || !case_relu_backward(f, 60 * 300, 0.0, 1))
        return 0;
    struct { int rows, h, pad; } G[] = { { 1, 1, 0 }, { 37, 7, 1 }, { 500, 64, 0 },
                                         { 2900, 300, 0 }, { 333, 301, 3 }, { 0, 16, 0 } };
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++) {
        if (!big && G[i].rows * G[i].h >= 100000)
            continue;
        for (int same = 0; same < 2; same++)
            if (!case_gemm(f, G[i].rows, G[i].h, G[i].pad, 2, same, 0) ||
                !case_gemm(f, G[i].rows, G[i].h, G[i].pad, 2, same, 1) ||
                !case_gemm(f, G[i].rows, G[i].h, G[i].pad, 1, same, 0) ||
                !case_gemm(f, G[i].rows, G[i].h, G[i].pad, 1, same, 1) ||
                !case_res_relu(f, G[i].rows, G[i].h, G[i].pad, 0, same, 0, NULL) ||
                !case_res_relu(f, G[i].rows, G[i].h, G[i].pad, 1, same, 0, NULL) ||
                !case_res_relu(f, G[i].rows, G[i].h, G[i].pad, 0, same, 1, NULL) ||
                !case_res_relu(f, G[i].rows, G[i].h, G[i].pad, 1, same, 1, NULL))
                return 0;
    }
    return 1;
}

MP_TEST(bf16_ops_emulated)
{
    fx f;
    FX_OPEN(f, 1, MP_PREC_BF16, 201);
    int ok = ops_all(&f, 0);
    FX_END(f, ok);
}

MP_TEST(gpu_bf16_ops)
{
    fx f;
    FX_OPEN(f, 0, MP_PREC_BF16, 202);
    CHECK_MSG(f.g->half_acts, "cuda:bf16 has no bf16 storage ops (half_acts = 0)");
    int ok = ops_all(&f, 1);
    FX_END(f, ok);
}

/* fp32 and tf32 are what they were: no bf16 storage, no bf16 ops. */
MP_TEST(gpu_bf16_only_at_bf16)
{
    for (int p = MP_PREC_FP32; p <= MP_PREC_TF32; p++) {
        fx f;
        FX_OPEN(f, 0, (mp_precision)p, 203);
        int ok = !f.g->half_acts && !f.g->to_bf16 && !f.g->gemm_batch_bf16 &&
                 !f.g->gemm_res_relu_bf16 && !f.g->message_bf16 && !f.g->atom_sum_bf16 &&
                 !f.g->relu_dropout_backward_bf16 && !f.g->message_backward_relu_bf16 &&
                 !f.g->atom_sum_backward_relu_bf16 && !f.g->edge_embed_relu_bf16 &&
                 !f.g->relu_dropout_bf16;
        if (!ok)
            fail(&f, "cuda:%s has bf16 storage ops", mp_precision_name((mp_precision)p));
        FX_END(f, ok);
    }
}

/* ===================================================================== */
/* bf16 is really bf16                                                    */
/* ===================================================================== */

/* The W_h product (E x 300 x 300, the model's shape) on unrounded random
 * operands: at bf16 the rounding of the operands shows (error ~1e-3 and
 * more), at tf32 it is ~4x smaller; and the step's outputs differ from
 * tf32's. */
MP_TEST(gpu_bf16_is_bf16)
{
    double e_bf = 0, e_tf = 0;
    {
        fx f;
        FX_OPEN(f, 0, MP_PREC_BF16, 204);
        int ok = case_res_relu(&f, 2900, 300, 0, 0, 0, 0, &e_bf);
        FX_END(f, ok);
    }
    {
        /* tf32: the fp32-buffer op on the same kind of data */
        fx f;
        FX_OPEN(f, 0, MP_PREC_TF32, 204);
        int m = 2900, h = 300;
        buf A, W, R, C;
        float *r0 = rand_floats(&f, (size_t)m * h, 1.0);
        size_t mh = (size_t)m * h;
        int ok = r0 && buf_rand(&f, &A, mh, 0, 0) && buf_rand(&f, &W, (size_t)h * h, 0, 0) &&
                 buf_make(&f, &R, mh, 0, r0, 0) && buf_make(&f, &C, mh, 0, NULL, 0);
        if (ok) {
            f.g->gemm_res_relu(f.g, m, h, h, A.g, h, W.g, h, R.g, h, C.g, h);
            f.r->gemm_res_relu(f.r, m, h, h, A.r, h, W.r, h, R.r, h, C.r, h);
            ok = compare(&f, "gemm_res_relu at tf32", &C, 2e-3, NULL, &e_tf);
        }
        mp_free(r0);
        FX_END(f, ok);
    }
    printf("    W_h product vs ref64: bf16 rel err %.3g, tf32 %.3g\n", e_bf, e_tf);
    CHECK_MSG(e_bf > 1e-3, "bf16 product error %.3g: operands not rounded to bf16?", e_bf);
    CHECK_MSG(e_bf > 3 * e_tf, "bf16 error %.3g is not clearly above tf32's %.3g", e_bf, e_tf);
}

/* ===================================================================== */
/* The D-MPNN step (bench/gpu_step.h) and the model (src/models)          */
/* ===================================================================== */

/* Bounds (as test_gpu_ops.c's step bounds at bf16; see the reasoning
 * there: gradient errors are dominated by units whose pre-activation
 * rounding flips their ReLU). */
static const double STEP_TOL_Y = 5e-2, STEP_TOL_GRAD = 0.15, STEP_TOL_PARAMS = 3e-2;

static int step_case(fx *f, int32_t n_mols, int h, int depth, double p, uint64_t seed)
{
    char what[160];
    mp_graphs hg;
    gs_dev_graph dg[2];
    gs_model mg, mr, m2;
    memset(dg, 0, sizeof dg);
    memset(&mg, 0, sizeof mg);
    memset(&mr, 0, sizeof mr);
    memset(&m2, 0, sizeof m2);
    rg_opts o = { 1, 53, 0.05, 0.05, 6 };
    if (!rg_make(&hg, &f->rng, n_mols, 133, &o))
        return fail(f, "random graph: out of memory");
    int ok = 1;
    if (gs_dev_graph_upload(f->g, &dg[0], &hg) != MP_OK ||
        gs_dev_graph_upload(f->r, &dg[1], &hg) != MP_OK ||
        gs_model_create(&mg, f->g, 133, h, depth, 3, p, n_mols, hg.n_atoms, hg.n_edges, seed) ||
        gs_model_create(&mr, f->r, 133, h, depth, 3, p, n_mols, hg.n_atoms, hg.n_edges, seed) ||
        gs_model_create(&m2, f->g, 133, h, depth, 3, p, n_mols, hg.n_atoms, hg.n_edges, seed))
        ok = fail(f, "step set-up: %s", mp_error_message());
    if (ok && !mg.half)
        ok = fail(f, "the step did not take the bf16 path (half_acts = 0)");
    buf Y = { 0 }, L = { 0 }, G = { 0 }, P = { 0 }, P2 = { 0 };
    void *b1 = NULL;
    if (ok) {
        gs_step(&mg, &dg[0], 99);
        gs_step(&mr, &dg[1], 99);
        Y = (buf){ mg.y, mr.y, (size_t)n_mols * 3, 0 };
        L = (buf){ mg.loss, mr.loss, 1, 0 };
        G = (buf){ mg.grads, mr.grads, mg.n_params, 0 };
        snprintf(what, sizeof what, "bf16 step output (mols %d h %d depth %d p %g)", (int)n_mols,
                 h, depth, p);
        ok = compare(f, what, &Y, STEP_TOL_Y, NULL, NULL);
        snprintf(what, sizeof what, "bf16 step loss (mols %d h %d)", (int)n_mols, h);
        ok = ok && compare(f, what, &L, STEP_TOL_Y, NULL, NULL);
        snprintf(what, sizeof what, "bf16 step gradients (mols %d h %d depth %d p %g)",
                 (int)n_mols, h, depth, p);
        ok = ok && compare(f, what, &G, STEP_TOL_GRAD, NULL, NULL);
    }
    if (ok) {
        gs_step(&mg, &dg[0], 1234);
        gs_step(&mr, &dg[1], 1234);
        P = (buf){ mg.params, mr.params, mg.n_params, 0 };
        snprintf(what, sizeof what, "bf16 step parameters after 2 steps (mols %d h %d)",
                 (int)n_mols, h);
        ok = compare(f, what, &P, STEP_TOL_PARAMS, &b1, NULL);
    }
    if (ok) {
        gs_step(&m2, &dg[0], 99);
        gs_step(&m2, &dg[0], 1234);
        P2 = (buf){ m2.params, mr.params, m2.n_params, 0 };
        ok = same_bytes(f, "bf16 step parameters, second model", &P2, &b1);
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

static int steps_all(fx *f, int big)
{
    return step_case(f, 50, 64, 3, 0.0, 5) && step_case(f, 40, 64, 3, 0.2, 6) &&
           step_case(f, 9, 7, 1, 0.1, 8) && step_case(f, 20, 33, 5, 0.0, 9) &&
           (!big || step_case(f, 12, 300, 3, 0.0, 7));
}

MP_TEST(bf16_step_emulated)
{
    fx f;
    FX_OPEN(f, 1, MP_PREC_BF16, 211);
    int ok = steps_all(&f, 0);
    FX_END(f, ok);
}

/* The bf16 step captured into a CUDA graph and replayed once gives the
 * bytes of the same step run op by op (the bf16 ops queue nothing a graph
 * cannot hold). */
static int capture_case(fx *f, int32_t n_mols, int h)
{
    mp_graphs hg;
    gs_dev_graph dg;
    gs_model me, mc;
    memset(&dg, 0, sizeof dg);
    memset(&me, 0, sizeof me);
    memset(&mc, 0, sizeof mc);
    rg_opts o = { 1, 53, 0.05, 0.05, 6 };
    if (!rg_make(&hg, &f->rng, n_mols, 133, &o))
        return fail(f, "random graph: out of memory");
    int ok = 1;
    mp_cuda_graph *cg = NULL;
    if (gs_dev_graph_upload(f->g, &dg, &hg) != MP_OK ||
        gs_model_create(&me, f->g, 133, h, 3, 2, 0.1, n_mols, hg.n_atoms, hg.n_edges, 31) ||
        gs_model_create(&mc, f->g, 133, h, 3, 2, 0.1, n_mols, hg.n_atoms, hg.n_edges, 31))
        ok = fail(f, "capture set-up: %s", mp_error_message());
    if (ok) {
        gs_step(&me, &dg, 77);
        if (mp_cuda_graph_begin(f->g) != MP_OK)
            ok = fail(f, "graph begin: %s", mp_error_message());
        if (ok) {
            gs_step(&mc, &dg, 77);
            if (mp_cuda_graph_end(f->g, &cg) != MP_OK || mp_cuda_graph_launch(f->g, cg) != MP_OK ||
                f->g->sync(f->g) != MP_OK)
                ok = fail(f, "bf16 step as a CUDA graph: %s", mp_error_message());
        }
    }
    size_t n = me.n_params * sizeof(float);
    float *pe = ok ? mp_malloc(n) : NULL, *pc = ok ? mp_malloc(n) : NULL;
    if (ok && (!pe || !pc || f->g->download(f->g, pe, me.params, n) != MP_OK ||
               f->g->download(f->g, pc, mc.params, n) != MP_OK))
        ok = fail(f, "download: %s", mp_error_message());
    if (ok && memcmp(pe, pc, n) != 0)
        ok = fail(f, "bf16 step: graph replay and op-by-op step give other parameters");
    mp_free(pe);
    mp_free(pc);
    mp_cuda_graph_free(cg);
    gs_model_free(&me);
    gs_model_free(&mc);
    if (dg.mol_atom)
        gs_dev_graph_free(f->g, &dg);
    mp_graphs_free(&hg);
    return ok;
}

MP_TEST(gpu_bf16_step)
{
    fx f;
    FX_OPEN(f, 0, MP_PREC_BF16, 212);
    int ok = steps_all(&f, 1) && capture_case(&f, 50, 300) && capture_case(&f, 300, 64);
    FX_END(f, ok);
}

/* mp_model (the models' own code: dmpnn.c's bf16 path) against ref64: two
 * training steps (gradients, loss, parameters), then inference. */
static int host_rel(fx *f, const char *what, const float *g, const float *r, size_t n, double tol)
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
        printf("    %-88s rel %.3g (bound %.3g)\n", what, rel, tol);
    return rel <= tol ? 1 : fail(f, "%s: relative error %.3g > %.3g over %zu values", what, rel,
                                 tol, n);
}

static int model_case(fx *f, mp_model_task task, double dropout, int extra_dim, int depth)
{
    char what[160];
    mp_model_config cfg = mp_model_config_default();
    cfg.task = task;
    cfg.n_tasks = 3;
    cfg.hidden = 96;
    cfg.depth = depth;
    cfg.dropout = dropout;
    cfg.extra_dim = extra_dim;
    const int32_t n = 24;
    mp_graphs g;
    rg_opts o = { 1, 40, 0.05, 0.05, 4 };
    if (!rg_make(&g, &f->rng, n, cfg.atom_fdim, &o))
        return fail(f, "random graph: out of memory");
    mp_model *mg = NULL, *mr = NULL;
    size_t ne = (size_t)n * (extra_dim ? extra_dim : 1), nt = (size_t)n * 3;
    float *extra = mp_malloc(ne * sizeof(float)), *tg = mp_malloc(nt * sizeof(float));
    float *outg = mp_malloc(nt * sizeof(float)), *outr = mp_malloc(nt * sizeof(float));
    float *pg = NULL, *pr = NULL;
    int ok = extra && tg && outg && outr;
    for (size_t i = 0; ok && i < (size_t)n * extra_dim; i++)
        extra[i] = (float)mp_rng_normal(&f->rng);
    for (size_t i = 0; ok && i < nt; i++) {
        double u = mp_rng_uniform(&f->rng);
        tg[i] = u < 0.1 ? NAN : task == MP_MODEL_CLASSIFICATION ? (float)(u < 0.55)
                                                                 : (float)mp_rng_normal(&f->rng);
    }
    if (ok && (mp_model_create(&mg, &cfg, f->g, 17) != MP_OK ||
               mp_model_create(&mr, &cfg, f->r, 17) != MP_OK))
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
        snprintf(what, sizeof what, "bf16 model step %d loss (task %d p %g extra %d depth %d)",
                 step, (int)task, dropout, extra_dim, depth);
        float fl = (float)lg, fr = (float)lr;
        ok = host_rel(f, what, &fl, &fr, 1, STEP_TOL_Y);
        if (ok && (mp_model_get_grads(mg, pg) != MP_OK || mp_model_get_grads(mr, pr) != MP_OK))
            ok = fail(f, "grads: %s", mp_error_message());
        snprintf(what, sizeof what, "bf16 model step %d gradients (task %d p %g extra %d depth %d)",
                 step, (int)task, dropout, extra_dim, depth);
        ok = ok && host_rel(f, what, pg, pr, np, STEP_TOL_GRAD);
        if (ok && (mp_model_adam_step(mg, 1e-3) != MP_OK || mp_model_adam_step(mr, 1e-3) != MP_OK))
            ok = fail(f, "adam: %s", mp_error_message());
    }
    if (ok && (mp_model_get_params(mg, pg) != MP_OK || mp_model_get_params(mr, pr) != MP_OK))
        ok = fail(f, "params: %s", mp_error_message());
    ok = ok && host_rel(f, "bf16 model parameters after 2 steps", pg, pr, np, STEP_TOL_PARAMS);
    if (ok && (mp_model_forward(mg, &g, ex, n, 0, outg) != MP_OK ||
               mp_model_forward(mr, &g, ex, n, 0, outr) != MP_OK))
        ok = fail(f, "inference: %s", mp_error_message());
    ok = ok && host_rel(f, "bf16 model inference outputs", outg, outr, nt, STEP_TOL_Y);
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

static int models_all(fx *f)
{
    return model_case(f, MP_MODEL_REGRESSION, 0.0, 0, 3) &&
           model_case(f, MP_MODEL_CLASSIFICATION, 0.1, 5, 3) &&
           model_case(f, MP_MODEL_REGRESSION, 0.1, 0, 1) &&
           model_case(f, MP_MODEL_REGRESSION, 0.0, 3, 4);
}

MP_TEST(bf16_model_emulated)
{
    fx f;
    FX_OPEN(f, 1, MP_PREC_BF16, 221);
    int ok = models_all(&f);
    FX_END(f, ok);
}

MP_TEST(gpu_bf16_model)
{
    fx f;
    FX_OPEN(f, 0, MP_PREC_BF16, 222);
    int ok = models_all(&f);
    FX_END(f, ok);
}

/* ===================================================================== */
/* 50 ESOL steps: bf16 tracks fp32                                        */
/* ===================================================================== */

static mp_dataset  *g_esol;
static mp_features *g_feat;

static mp_status esol_load(void) { return mp_test_esol(&g_esol, &g_feat); }

#define BS 50

/* The host training loop (forward, loss_backward, Adam) over n_steps
 * batches of 50 ESOL molecules on a backend made by open_fn / by name. */
static mp_status esol_steps(mp_backend *b, int hidden, int n_steps, double *losses)
{
    mp_status st;
    if ((st = esol_load()))
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
    int32_t nm = g_feat->g.n_mols;
    for (int s = 0; s < n_steps; s++) {
        for (int j = 0; j < BS; j++) {
            mols[j] = (int32_t)(((int64_t)s * 37 + (int64_t)j * 13) % nm);
            double y = g_esol->targets[(size_t)mols[j] * g_esol->n_tasks];
            tgt[j] = j == 7 ? NAN : (float)((y + 3.0) / 2.0);
        }
        mp_model_zero_grad(m);
        if ((st = mp_graphs_select(&batch, &g_feat->g, mols, BS)) ||
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

/* Largest |a - b| / |b| over n (its index in *at). */
static double max_rel(const double *a, const double *b, int n, int *at)
{
    double e = 0;
    *at = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1e-12);
        if (d > e) {
            e = d;
            *at = i;
        }
    }
    return e;
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
static const double ESOL_TOL_MEAN = 0.02, ESOL_TOL_LAST10 = 0.05, ESOL_TOL_STEP = 0.35;

static void esol_check(mp_test_result *mp__r, mp_backend *half, const char *ref_name, int hidden)
{
    enum { S = 50 };
    double lh[S], lf[S];
    mp_backend *rb = NULL;
    mp_status st = esol_steps(half, hidden, S, lh);
    mp_backend_close(half);
    CHECK_OK(st);
    CHECK_OK(mp_backend_open(&rb, ref_name));
    st = esol_steps(rb, hidden, S, lf);
    mp_backend_close(rb);
    CHECK_OK(st);
    int at;
    double e = max_rel(lh, lf, S, &at);
    double mh = mean_of(lh, S), mf = mean_of(lf, S);
    double th = mean_of(lh + S - 10, 10), tf = mean_of(lf + S - 10, 10);
    double e_mean = fabs(mh - mf) / mf, e_last = fabs(th - tf) / tf;
    printf("    bf16 vs %s, %d ESOL steps (hidden %d): mean loss %.4g vs %.4g (%.3g), last 10 "
           "%.4g vs %.4g (%.3g), worst step %d: %.4g vs %.4g (%.3g)\n", ref_name, S, hidden, mh,
           mf, e_mean, th, tf, e_last, at, lh[at], lf[at], e);
    CHECK_MSG(e_mean <= ESOL_TOL_MEAN, "bf16 vs %s: mean loss differs by %g", ref_name, e_mean);
    CHECK_MSG(e_last <= ESOL_TOL_LAST10, "bf16 vs %s: last 10 losses differ by %g", ref_name,
              e_last);
    CHECK_MSG(e <= ESOL_TOL_STEP, "bf16 vs %s: step %d's loss differs by %g", ref_name, at, e);
    CHECK(th < 0.8 * lh[0]);    /* it learns */
}

MP_TEST(bf16_esol_50_steps_emulated)
{
    mp_backend *b = NULL;
    CHECK_OK(emu_open(&b));
    CHECK(b->half_acts);
    esol_check(mp__r, b, "cpu", 32);
}

MP_TEST(gpu_bf16_esol_50_steps)
{
    char why[256];
    if (!mp_backend_cuda_available(why, sizeof why)) {
        if (mp_test_env_flag("MOLPROP_REQUIRE_GPU"))
            MP_FAIL("no usable GPU (MOLPROP_REQUIRE_GPU=1): %s", why);
        MP_SKIP(why);
    }
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cuda:bf16"));
    CHECK(b->half_acts);
    esol_check(mp__r, b, "cuda:fp32", 300);
}
