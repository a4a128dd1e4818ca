/*
 * test_ops.c - what the op table (test_backend_ops.c) does not cover:
 * finite-difference checks, in double on the ref64 backend, of every op
 * that has a backward; the Adam formula; backend names and the storage
 * they report; bf16 rounding on the host and in the reference backend; and
 * the cpu scatters' fallback when their index cannot be allocated.
 */
#include "test.h"
#include "backend/ops.h"
#include "randgraph.h"

#include <stdlib.h>

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

static mp_backend *open_backend(const char *name)
{
    mp_backend *b = NULL;
    if (mp_backend_open(&b, name) != MP_OK) {
        fprintf(stdout, "    cannot open backend %s: %s\n", name, mp_error_message());
        return NULL;
    }
    return b;
}

static float *frand(mp_rng *r, size_t n, double lo, double hi)
{
    float *p = mp_malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(lo + (hi - lo) * mp_rng_uniform(r));
    return p;
}

static float *fpoison(size_t n)
{
    float *p = mp_malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static float *fcopy(const float *x, size_t n)
{
    float *p = mp_malloc((n ? n : 1) * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* a and b bitwise equal; else print the first difference. */
static int all_same(const float *a, const float *b, size_t n, const char *what)
{
    if (n && memcmp(a, b, n * sizeof *a) != 0) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof *a)) {
                fprintf(stdout, "    %s: not bitwise equal at %zu: %.9g vs %.9g\n", what, i,
                        a[i], b[i]);
                break;
            }
        return 0;
    }
    return 1;
}

/* The graph cases: sizes chosen to hit odd widths, empty molecules, atoms
 * without bonds, a single atom, and batches big enough to run threaded. */
typedef struct {
    int32_t n_mols;
    int     h;
    int     atom_fdim;
    rg_opts o;
} graph_case;

static const graph_case graph_cases[] = {
    { 0, 5, 9, { 1, 4, 0.0, 0.0, 0 } },
    { 1, 1, 3, { 1, 1, 0.0, 0.0, 0 } },
    { 6, 7, 20, { 1, 6, 0.3, 0.3, 2 } },
    { 17, 33, 133, { 1, 15, 0.1, 0.1, 3 } },
    { 50, 300, 133, { 5, 22, 0.05, 0.05, 2 } },
};
#define N_GRAPH_CASES (int)(sizeof graph_cases / sizeof graph_cases[0])

/* ===================================================================== */
/* Adam                                                                   */
/* ===================================================================== */

/* The first Adam step moves every parameter by lr * g / (|g| + eps') (the
 * bias corrections cancel the (1-beta) factors): a check of the formula
 * independent of the reference code. */
MP_TEST(ops_adam_first_step_is_signed_lr)
{
    mp_backend *cpu = open_backend("cpu");
    CHECK(cpu);
    float p[4] = { 1, -2, 0.5f, 3 }, g[4] = { 0.3f, -4, 1e-3f, 0 }, m[4] = { 0 }, v[4] = { 0 };
    float p0[4];
    memcpy(p0, p, sizeof p);
    cpu->adam(cpu, p, m, v, g, 4, 0.01, 0.9, 0.999, 1e-8, 0.0, 1);
    for (int i = 0; i < 4; i++) {
        double want = p0[i] - 0.01 * g[i] / (fabs(g[i]) + 1e-8);
        CHECK_NEAR(p[i], want, 1e-6, 0);
    }
    mp_backend_close(cpu);
}

/* ===================================================================== */
/* Finite differences, in double on ref64                                 */
/* ===================================================================== */

static double *drand(mp_rng *r, size_t n, double lo, double hi)
{
    double *p = mp_malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * mp_rng_uniform(r);
    return p;
}

static double *dzeros(size_t n) { return mp_calloc(n ? n : 1, sizeof(double)); }

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Checks grad[i] = d f / d x[i] for every i by central differences, where f
 * = <r, forward(x)> is evaluated by `fwd` into out[n_out]. */
#define FD_CHECK(x, n, grad, out, n_out, rr, fwd, what)                                 \
    do {                                                                                \
        for (size_t i_ = 0; i_ < (n); i_++) {                                           \
            double keep_ = (x)[i_], eps_ = 1e-6;                                        \
            (x)[i_] = keep_ + eps_;                                                     \
            fwd;                                                                        \
            double fp_ = dot(rr, out, n_out);                                           \
            (x)[i_] = keep_ - eps_;                                                     \
            fwd;                                                                        \
            double fm_ = dot(rr, out, n_out);                                           \
            (x)[i_] = keep_;                                                            \
            double num_ = (fp_ - fm_) / (2 * eps_);                                     \
            if (!(fabs(num_ - (grad)[i_]) <= 1e-7 + 1e-6 * fabs(num_)))                 \
                MP_FAIL("%s: d/dx[%zu]: analytic %.12g, finite difference %.12g", what, \
                        i_, (grad)[i_], num_);                                          \
        }                                                                               \
    } while (0)

MP_TEST(ops_gradcheck_gemm)
{
    mp_backend *b = open_backend("ref64");
    CHECK(b);
    mp_rng r;
    mp_rng_seed(&r, 31, 0);
    const int m = 4, n = 3, k = 5;
    const mp_stype e = MP_ST_ELEM;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = ta ? m : k, ldb = tb ? k : n;
            double *a = drand(&r, (size_t)m * k, -1, 1), *bm = drand(&r, (size_t)k * n, -1, 1);
            double *c = dzeros((size_t)m * n), *rr = drand(&r, (size_t)m * n, -1, 1);
            double *da = dzeros((size_t)m * k), *db = dzeros((size_t)k * n);
            /* the adjoint products, as dmpnn.c / ffn.c write them, as one call */
            mp_gemm adj[2] = {
                !ta ? (mp_gemm){ 0, !tb, m, k, n, 1, 0, rr, bm, da, n, ldb, k, e, e, e }
                    : (mp_gemm){ tb, 1, k, m, n, 1, 0, bm, rr, da, ldb, n, m, e, e, e },
                !tb ? (mp_gemm){ !ta, 0, k, n, m, 1, 0, a, rr, db, lda, n, n, e, e, e }
                    : (mp_gemm){ 1, ta, n, k, m, 1, 0, rr, a, db, n, lda, k, e, e, e },
            };
            b->gemm(b, 2, adj);
            mp_gemm fw = { ta, tb, m, n, k, 1, 0, a, bm, c, lda, ldb, n, e, e, e };
            FD_CHECK(a, (size_t)m * k, da, c, (size_t)m * n, rr, b->gemm(b, 1, &fw), "gemm dA");
            FD_CHECK(bm, (size_t)k * n, db, c, (size_t)m * n, rr, b->gemm(b, 1, &fw), "gemm dB");
            mp_free(a); mp_free(bm); mp_free(c); mp_free(rr); mp_free(da); mp_free(db);
        }
    mp_backend_close(b);
}

MP_TEST(ops_gradcheck_elementwise_bias_loss)
{
    mp_backend *b = open_backend("ref64");
    CHECK(b);
    mp_rng r;
    mp_rng_seed(&r, 32, 0);
    const size_t n = 40;
    double *x = drand(&r, n, -1, 1), *y = dzeros(n), *rr = drand(&r, n, -1, 1), *dx = dzeros(n);
    for (size_t i = 0; i < n; i++)   /* keep away from the kink */
        x[i] = x[i] < 0 ? x[i] - 0.1 : x[i] + 0.1;
    for (int pi = 0; pi < 2; pi++) {
        double p = pi ? 0.4 : 0.0;
        mp_key key = mp_key_host(77);
        b->relu_dropout(b, y, x, MP_ST_ELEM, n, p, key);
        b->relu_dropout_backward(b, dx, dx, MP_ST_ELEM, y, MP_ST_ELEM, rr, n, p);
        FD_CHECK(x, n, dx, y, n, rr, b->relu_dropout(b, y, x, MP_ST_ELEM, n, p, key),
                 "relu_dropout");
        /* dropout over 5 rows x 6 of ld 8: columns 6, 7 are outside the
         * block, so their outputs stay constant and their gradient is 0; the
         * backward is the same op with the same key */
        b->dropout(b, dx, rr, 5, 6, 8, p, key);
        for (int i = 0; i < 5; i++)
            for (int j = 6; j < 8; j++)
                dx[i * 8 + j] = 0;
        FD_CHECK(x, n, dx, y, n, rr, b->dropout(b, y, x, 5, 6, 8, p, key), "dropout");
    }
    /* bias: copy2d of one row into every row forward, col_sum backward */
    double *row = drand(&r, 8, -1, 1), *drow = dzeros(8);
    b->col_sum(b, drow, rr, 8, 5, 8);
    FD_CHECK(row, 8, drow, y, n, rr, b->copy2d(b, y, MP_ST_ELEM, 8, row, MP_ST_ELEM, 0, 5, 8),
             "copy2d (bias rows) / col_sum");
    /* losses over 8 molecules x 5 tasks, some labels missing */
    double *t = drand(&r, n, 0, 1), *loss = dzeros(1), *dl = dzeros(n), one = 1;
    uint8_t mask[40];
    for (size_t i = 0; i < n; i++) {
        mask[i] = mp_rng_uniform(&r) < 0.6;
        t[i] = mp_rng_uniform(&r) < 0.5 ? (double)(t[i] > 0.5) : t[i];
    }
    for (int kind = 0; kind < 2; kind++) {
        mp_loss_spec sp = { (mp_loss_kind)kind, 5, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0 };
        b->loss(b, loss, dl, x, t, mask, 8, &sp);
        FD_CHECK(x, n, dl, loss, 1, &one, b->loss(b, loss, y, x, t, mask, 8, &sp),
                 kind ? "BCE loss" : "MSE loss");
        for (size_t i = 0; i < n; i++)
            CHECK(mask[i] || dl[i] == 0);
    }
    /* no label at all: zero loss, zero gradient */
    memset(mask, 0, sizeof mask);
    mp_loss_spec mse = { MP_LOSS_MSE, 5, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0 };
    b->loss(b, loss, dl, x, t, mask, 8, &mse);
    CHECK(loss[0] == 0 && dl[0] == 0);
    mp_free(x); mp_free(y); mp_free(rr); mp_free(dx); mp_free(row); mp_free(drow);
    mp_free(t); mp_free(loss); mp_free(dl);
    mp_backend_close(b);
}

MP_TEST(ops_gradcheck_graph_ops)
{
    mp_backend *b = open_backend("ref64");
    CHECK(b);
    mp_rng r;
    mp_rng_seed(&r, 33, 0);
    rg_opts o = { 1, 6, 0.2, 0.2, 2 };
    mp_graphs g;
    CHECK(rg_make(&g, &r, 6, 9, &o));
    CHECK(g.n_edges > 0);
    const int h = 3, fa = 9, ldo = 5;
    const size_t na = (size_t)g.n_atoms, ne = (size_t)g.n_edges, nm = (size_t)g.n_mols;
    const size_t nw = (size_t)(fa + MP_BOND_FDIM) * h;
    double *w = drand(&r, nw, -1, 1), *bias = drand(&r, (size_t)h, -1, 1);
    double *atoms = drand(&r, na * h, -1, 1), *edges = drand(&r, ne * h, -1, 1);
    double *ra = drand(&r, na * h, -1, 1), *re = drand(&r, ne * h, -1, 1);
    double *rm = drand(&r, nm * ldo, -1, 1);
    double *oa = dzeros(na * h), *oe = dzeros(ne * h), *om = dzeros(nm * ldo);
    double *gw = dzeros(nw), *gb = dzeros((size_t)h), *ga = dzeros(na * h), *ge = dzeros(ne * h);
    double *sa = dzeros(na * h);
    for (size_t i = 0; i < nm; i++)   /* pool writes only h of the ldo columns */
        for (int j = h; j < ldo; j++)
            rm[i * ldo + j] = 0;

    /* atom_embed: d/dw and d/dbias */
    b->atom_embed_backward(b, gw, g.atom_hot, g.atom_mass, ra, g.n_atoms, h, fa - 1);
    b->col_sum(b, gb, ra, h, g.n_atoms, h);
    FD_CHECK(w, (size_t)fa * h, gw, oa, na * h, ra,
             b->atom_embed(b, oa, g.atom_hot, g.atom_mass, w, bias, g.n_atoms, h, fa - 1),
             "atom_embed dW");
    FD_CHECK(bias, (size_t)h, gb, oa, na * h, ra,
             b->atom_embed(b, oa, g.atom_hot, g.atom_mass, w, bias, g.n_atoms, h, fa - 1),
             "atom_embed dbias");
    /* edge_embed: d/da and d/dwb */
    memset(gw, 0, nw * sizeof *gw);
    double *wb = w + (size_t)fa * h;
    b->edge_embed_backward(b, ga, gw + (size_t)fa * h, g.in_start, g.in_edge, g.bond_hot, re,
                           g.n_atoms, g.n_edges, h);
    const mp_stype e = MP_ST_ELEM;
    FD_CHECK(atoms, na * h, ga, oe, ne * h, re,
             b->edge_embed(b, oe, NULL, e, g.edge_src, g.bond_hot, atoms, wb, g.n_edges, h),
             "edge_embed da");
    FD_CHECK(wb, (size_t)MP_BOND_FDIM * h, gw + (size_t)fa * h, oe, ne * h, re,
             b->edge_embed(b, oe, NULL, e, g.edge_src, g.bond_hot, atoms, wb, g.n_edges, h),
             "edge_embed dwb");
    /* message: d/dm (the plain adjoint) */
    b->message_backward(b, ge, e, NULL, sa, g.in_start, g.in_edge, g.edge_dst, re, e, NULL, e,
                        0.0, g.n_atoms, g.n_edges, h);
    FD_CHECK(edges, ne * h, ge, oe, ne * h, re,
             b->message(b, oe, e, sa, g.in_start, g.in_edge, g.edge_src, edges, e, 0, g.n_atoms,
                        g.n_edges, h),
             "message");
    /* atom_sum: d/dm */
    b->atom_sum_backward(b, ge, ge, e, g.edge_dst, ra, NULL, e, 0.0, g.n_edges, h);
    FD_CHECK(edges, ne * h, ge, oa, na * h, ra,
             b->atom_sum(b, oa, e, g.in_start, g.in_edge, edges, e, g.n_atoms, h), "atom_sum");
    /* the fused adjoints (y, dropout p): message_backward through the ReLU /
     * dropout of y, summed into dh0, is the adjoint of y -> message(relu_dropout(...)),
     * checked as the composition: d<re, message(M)> / dm with M = relu_dropout(m) */
    for (size_t i = 0; i < ne * h; i++)   /* keep away from the kink */
        edges[i] = edges[i] < 0 ? edges[i] - 0.1 : edges[i] + 0.1;
    double *y = dzeros(ne * h), *dh0 = dzeros(ne * h), *dz = dzeros(ne * h);
    b->relu_dropout(b, y, edges, e, ne * h, 0.3, mp_key_host(5));
    b->message_backward(b, dz, e, dh0, sa, g.in_start, g.in_edge, g.edge_dst, re, e, y, e, 0.3,
                        g.n_atoms, g.n_edges, h);
    for (size_t i = 0; i < ne * h; i++)
        CHECK(dh0[i] == dz[i]);   /* dh0 started at 0: it holds dz */
    FD_CHECK(edges, ne * h, dz, oe, ne * h, re,
             b->relu_dropout(b, y, edges, e, ne * h, 0.3, mp_key_host(5));
             b->message(b, oe, e, sa, g.in_start, g.in_edge, g.edge_src, y, e, 0, g.n_atoms,
                        g.n_edges, h),
             "message_backward through relu_dropout");
    /* atom_sum_backward through y likewise */
    b->atom_sum_backward(b, dz, dz, e, g.edge_dst, ra, y, e, 0.3, g.n_edges, h);
    FD_CHECK(edges, ne * h, dz, oa, na * h, ra,
             b->relu_dropout(b, y, edges, e, ne * h, 0.3, mp_key_host(5));
             b->atom_sum(b, oa, e, g.in_start, g.in_edge, y, e, g.n_atoms, h),
             "atom_sum_backward through relu_dropout");
    mp_free(y); mp_free(dh0); mp_free(dz);
    /* pool, each aggregation: d/dx */
    for (int agg = 0; agg < 3; agg++) {
        b->pool_backward(b, ga, g.mol_atom, rm, ldo, (int32_t)nm, h, (mp_aggregation)agg, 7.0);
        FD_CHECK(atoms, na * h, ga, om, nm * ldo, rm,
                 b->pool(b, om, ldo, g.mol_atom, atoms, (int32_t)nm, h, (mp_aggregation)agg, 7.0),
                 "pool");
    }
    mp_free(w); mp_free(bias); mp_free(atoms); mp_free(edges); mp_free(ra); mp_free(re); mp_free(rm);
    mp_free(oa); mp_free(oe); mp_free(om); mp_free(gw); mp_free(gb); mp_free(ga); mp_free(ge); mp_free(sa);
    mp_graphs_free(&g);
    mp_backend_close(b);
}

/* ===================================================================== */
/* Names, storage, bf16, fallbacks                                        */
/* ===================================================================== */

MP_TEST(ops_backend_open_names)
{
    mp_backend *b = NULL;
    CHECK(mp_backend_open(&b, "nonesuch") == MP_ERR_ARG && !b);
    CHECK(strstr(mp_error_message(), "nonesuch") != NULL);
    CHECK(mp_backend_open(&b, "cuda") == MP_ERR_NODEVICE && !b);
    CHECK(mp_backend_open(&b, "ref:fp16") == MP_ERR_ARG && !b);
    CHECK(strstr(mp_error_message(), "ref:bf16") != NULL);
    CHECK(mp_backend_open(&b, "cpu:tf32") == MP_ERR_ARG && !b);   /* bf16 opens (below) */
    static const struct {
        const char *name;
        mp_dtype    dtype;
        mp_stype    act;
    } ok[] = {
        { "cpu", MP_F32, MP_ST_ELEM },      { "ref", MP_F32, MP_ST_ELEM },
        { "ref64", MP_F64, MP_ST_ELEM },    { "ref:bf16", MP_F32, MP_ST_BF16 },
        { "ref64:bf16", MP_F64, MP_ST_BF16 }, { "cpu:bf16", MP_F32, MP_ST_BF16 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK_OK(mp_backend_open(&b, ok[i].name));
        CHECK_EQ_STR(b->name, ok[i].name);
        CHECK(b->dtype == ok[i].dtype && b->esize == (ok[i].dtype == MP_F64 ? 8u : 4u));
        CHECK(b->act_st == ok[i].act && b->host_memory);
        CHECK(mp_stype_size(b, MP_ST_BF16) == 2 && mp_stype_size(b, MP_ST_ELEM) == b->esize);
        mp_backend_close(b);
    }
    CHECK(strstr(mp_backend_cpu_info(), "OpenBLAS") != NULL);
}

/* Round to nearest even on the host (the rounding the reference's bf16 mode
 * and the GPU's __float2bfloat16_rn use): ties to the even neighbour, NaN
 * kept quiet, infinities and signed zeros kept, overflow to infinity. */
MP_TEST(ops_bf16_rounding)
{
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        { 0x3f800000u, 0x3f80 },   /* 1 */
        { 0x3f808000u, 0x3f80 },   /* 1 + half an ulp: tie, down to even */
        { 0x3f818000u, 0x3f82 },   /* tie, up to even */
        { 0x3f808001u, 0x3f81 },   /* above the tie */
        { 0x3f807fffu, 0x3f80 },   /* below it */
        { 0x80000000u, 0x8000 },   /* -0 */
        { 0x7f800000u, 0x7f80 },   /* inf */
        { 0xff800000u, 0xff80 },   /* -inf */
        { 0x7f7fffffu, 0x7f80 },   /* the largest float rounds to inf */
        { 0x00000001u, 0x0000 },   /* the smallest subnormal to +0 */
        { 0x7fc00001u, 0x7fc0 },   /* a quiet NaN stays one */
        { 0x7f800001u, 0x7fc0 },   /* a signalling NaN becomes quiet */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float x;
        memcpy(&x, &cases[i].in, 4);
        CHECK_MSG(mp_bf16_round(x) == cases[i].out, "0x%08x -> 0x%04x, expected 0x%04x",
                  (unsigned)cases[i].in, mp_bf16_round(x), cases[i].out);
    }
    CHECK(mp_bf16_value(0x3f80) == 1.0f && mp_bf16_value(0xc0a0) == -5.0f);
    /* ref:bf16 stores bf16 operands so: a conversion by copy2d, exactly */
    mp_backend *b = open_backend("ref:bf16");
    CHECK(b);
    float src[4] = { 1.00390625f, 1.01171875f, -3.0e38f, 1e-40f };
    uint16_t dst[4];
    b->copy2d(b, dst, MP_ST_BF16, 4, src, MP_ST_ELEM, 4, 1, 4);
    for (int i = 0; i < 4; i++)
        CHECK(dst[i] == mp_bf16_round(src[i]));
    mp_backend_close(b);
}

/* The one-hot scatters fall back to a column split when their slot index
 * cannot be allocated: same sums in the same order, so the same bits. */
MP_TEST(ops_scatter_fallback_matches)
{
    mp_backend *cpu = open_backend("cpu");
    CHECK(cpu);
    for (int gc = 2; gc < N_GRAPH_CASES; gc++) {
        mp_rng r;
        mp_rng_seed(&r, 23, (uint64_t)gc);
        mp_graphs g;
        CHECK(rg_make(&g, &r, graph_cases[gc].n_mols, graph_cases[gc].atom_fdim, &graph_cases[gc].o));
        const int h = graph_cases[gc].h, fa = graph_cases[gc].atom_fdim;
        const size_t na = (size_t)g.n_atoms, ne = (size_t)g.n_edges, nw = (size_t)(fa + MP_BOND_FDIM) * h;
        float *dw0 = frand(&r, nw, -1, 1), *datoms = frand(&r, na * h, -1, 1);
        float *dedges = frand(&r, ne * h, -1, 1);
        float *w1 = fcopy(dw0, nw), *w2 = fcopy(dw0, nw), *w3 = fcopy(dw0, nw);
        float *da1 = fpoison(na * h), *da2 = fpoison(na * h), *da3 = fpoison(na * h);
        cpu->atom_embed_backward(cpu, w1, g.atom_hot, g.atom_mass, datoms, g.n_atoms, h, fa - 1);
        cpu->edge_embed_backward(cpu, da1, w1 + (size_t)fa * h, g.in_start, g.in_edge, g.bond_hot,
                                 dedges, g.n_atoms, g.n_edges, h);
        mp_alloc_fail_after(0);   /* the slot index's first allocation fails */
        cpu->atom_embed_backward(cpu, w2, g.atom_hot, g.atom_mass, datoms, g.n_atoms, h, fa - 1);
        mp_alloc_fail_after(0);
        cpu->edge_embed_backward(cpu, da2, w2 + (size_t)fa * h, g.in_start, g.in_edge, g.bond_hot,
                                 dedges, g.n_atoms, g.n_edges, h);
        mp_alloc_fail_after(3);   /* the bond index is made, the edge lists are not */
        cpu->edge_embed_backward(cpu, da3, w3 + (size_t)fa * h, g.in_start, g.in_edge, g.bond_hot,
                                 dedges, g.n_atoms, g.n_edges, h);
        mp_alloc_fail_after(-1);
        int ok = all_same(w2, w1, nw, "atom + bond scatter, fallback") &&
                 all_same(w3 + (size_t)fa * h, w1 + (size_t)fa * h, (size_t)MP_BOND_FDIM * h,
                          "bond scatter, late fallback") &&
                 all_same(da2, da1, na * h, "edge_embed_backward atoms") &&
                 all_same(da3, da1, na * h, "edge_embed_backward atoms");
        mp_free(dw0); mp_free(datoms); mp_free(dedges); mp_free(w1); mp_free(w2); mp_free(w3);
        mp_free(da1); mp_free(da2); mp_free(da3);
        mp_graphs_free(&g);
        CHECK_MSG(ok, "graph case %d", gc);
    }
    mp_backend_close(cpu);
}

