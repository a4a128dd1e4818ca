/*
 * test_ops.c - every op of the cpu backend against the reference backend on
 * random inputs (odd sizes, empty molecules, molecules without bonds), with
 * outputs poisoned (NaN) before each run so an unwritten element fails; the
 * cpu result with 1 thread must equal the result with 2 threads bit for bit.
 * Then finite-difference checks, in double on the ref64 backend, of every
 * op that has a backward.
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

/* |a-b| <= atol + rtol |b| everywhere, and no NaN; else print the first miss. */
static int all_close(const float *a, const float *b, size_t n, double atol, double rtol,
                     const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (!(fabs(x - y) <= atol + rtol * fabs(y))) {
            fprintf(stdout, "    %s: element %zu: cpu %.9g vs ref %.9g\n", what, i, x, y);
            return 0;
        }
    }
    return 1;
}

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
/* Dense and elementwise ops, cpu vs ref                                  */
/* ===================================================================== */

MP_TEST(ops_gemm_cpu_matches_ref)
{
    mp_backend *cpu = open_backend("cpu"), *ref = open_backend("ref");
    CHECK(cpu && ref);
    mp_rng r;
    mp_rng_seed(&r, 11, 0);
    static const int shapes[][3] = { { 1, 1, 1 }, { 3, 5, 7 }, { 17, 33, 9 }, { 64, 1, 300 },
                                     { 400, 300, 300 }, { 120, 300, 999 },
                                     { 5, 0, 3 }, { 0, 4, 4 }, { 4, 4, 0 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) {
                    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
                    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
                    size_t nc = (size_t)m * ldc;
                    float *a = frand(&r, na, -1, 1), *bm = frand(&r, nb, -1, 1);
                    float *c0 = acc ? frand(&r, nc, -1, 1) : fpoison(nc);
                    float *cr = fcopy(c0, nc), *c1 = fcopy(c0, nc), *c2 = fcopy(c0, nc);
                    double alpha = 0.75, beta = acc ? 1.0 : 0.0;
                    ref->gemm(ref, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, cr, ldc);
                    mp_threads_set(1);
                    cpu->gemm(cpu, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, c1, ldc);
                    mp_threads_set(2);
                    cpu->gemm(cpu, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, c2, ldc);
                    mp_threads_set(0);
                    int ok = 1;
                    for (int i = 0; i < m && ok; i++) {
                        /* only the m x n block is written; padding stays as it was */
                        ok &= all_close(c1 + (size_t)i * ldc, cr + (size_t)i * ldc, (size_t)n,
                                        2e-5 * (k + 1), 1e-5, "gemm");
                        for (int j = n; j < ldc && ok; j++)
                            ok &= memcmp(&c1[(size_t)i * ldc + j], &c0[(size_t)i * ldc + j],
                                         sizeof(float)) == 0;
                    }
                    ok &= all_same(c1, c2, nc, "gemm");
                    mp_free(a); mp_free(bm); mp_free(c0); mp_free(cr); mp_free(c1); mp_free(c2);
                    CHECK_MSG(ok, "gemm m=%d n=%d k=%d ta=%d tb=%d beta=%g", m, n, k, ta, tb, beta);
                }
    mp_backend_close(cpu);
    mp_backend_close(ref);
}

/* A batch of independent products: the backward pairs (X^T dY, dY W^T) at
 * several sizes, plus a degenerate one; the same bits for 1 and 2 threads. */
MP_TEST(ops_gemm_batch_cpu_matches_ref)
{
    mp_backend *cpu = open_backend("cpu"), *ref = open_backend("ref");
    CHECK(cpu && ref);
    mp_rng r;
    mp_rng_seed(&r, 14, 0);
    static const int sizes[][2] = { { 3, 5 }, { 50, 33 }, { 700, 64 }, { 1300, 300 } };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int e = sizes[s][0], h = sizes[s][1];
        float *x = frand(&r, (size_t)e * h, -1, 1), *dy = frand(&r, (size_t)e * h, -1, 1);
        float *w = frand(&r, (size_t)h * h, -1, 1), *dw0 = frand(&r, (size_t)h * h, -1, 1);
        float *dx0 = fpoison((size_t)e * h), *c0 = frand(&r, 4, -1, 1);
        float *dw[3], *dx[3], *c[3];
        for (int v = 0; v < 3; v++) {
            dw[v] = fcopy(dw0, (size_t)h * h);
            dx[v] = fcopy(dx0, (size_t)e * h);
            c[v] = fcopy(c0, 4);
            mp_gemm g[3] = {
                { 1, 0, h, h, e, 1.0, 1.0, x, dy, dw[v], h, h, h },
                { 0, 1, e, h, h, 1.0, 0.0, dy, w, dx[v], h, h, h },
                { 0, 0, 2, 2, 0, 1.0, 0.5, x, w, c[v], 1, 2, 2 },   /* k = 0: C = beta C */
            };
            mp_backend *bk = v == 0 ? ref : cpu;
            mp_threads_set(v == 2 ? 2 : 1);
            bk->gemm_batch(bk, 3, g);
            mp_threads_set(0);
        }
        int ok = all_close(dw[1], dw[0], (size_t)h * h, 2e-5 * e, 1e-5, "batch X^T dY") &&
                 all_close(dx[1], dx[0], (size_t)e * h, 2e-5 * h, 1e-5, "batch dY W^T") &&
                 all_close(c[1], c[0], 4, 0, 0, "batch k = 0") &&
                 all_same(dw[1], dw[2], (size_t)h * h, "batch X^T dY") &&
                 all_same(dx[1], dx[2], (size_t)e * h, "batch dY W^T");
        CHECK(c[0][0] == 0.5f * c0[0]);
        mp_free(x); mp_free(dy); mp_free(w); mp_free(dw0); mp_free(dx0); mp_free(c0);
        for (int v = 0; v < 3; v++) {
            mp_free(dw[v]);
            mp_free(dx[v]);
            mp_free(c[v]);
        }
        CHECK_MSG(ok, "e=%d h=%d", e, h);
    }
    mp_backend_close(cpu);
    mp_backend_close(ref);
}

MP_TEST(ops_elementwise_cpu_matches_ref)
{
    mp_backend *cpu = open_backend("cpu"), *ref = open_backend("ref");
    CHECK(cpu && ref);
    mp_rng r;
    mp_rng_seed(&r, 12, 0);
    static const size_t sizes[] = { 0, 1, 7, 1000, 40001 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int pi = 0; pi < 3; pi++) {
            size_t n = sizes[s];
            double p = pi == 0 ? 0.0 : pi == 1 ? 0.25 : 0.6;
            uint64_t key = mp_rng_u64(&r);
            float *x = frand(&r, n, -1, 1), *dy = frand(&r, n, -1, 1);
            float *yr = fpoison(n), *y1 = fpoison(n), *y2 = fpoison(n);
            int ok = 1;
            /* relu_dropout */
            ref->relu_dropout(ref, yr, x, n, p, key);
            mp_threads_set(1);
            cpu->relu_dropout(cpu, y1, x, n, p, key);
            mp_threads_set(2);
            cpu->relu_dropout(cpu, y2, x, n, p, key);
            ok &= all_close(y1, yr, n, 1e-6, 1e-6, "relu_dropout") && all_same(y1, y2, n, "relu_dropout");
            size_t kept = 0, pos = 0;
            for (size_t i = 0; i < n; i++) {
                kept += yr[i] != 0;
                pos += x[i] > 0;
            }
            if (n > 10000)   /* about (1-p) of the positive units survive */
                ok &= fabs((double)kept / (double)pos - (1 - p)) < 0.03;
            /* its backward, in place as the models use it */
            float *dr = fcopy(dy, n), *d1 = fcopy(dy, n), *d2 = fcopy(dy, n);
            ref->relu_dropout_backward(ref, dr, yr, dr, n, p);
            mp_threads_set(1);
            cpu->relu_dropout_backward(cpu, d1, y1, d1, n, p);
            mp_threads_set(2);
            cpu->relu_dropout_backward(cpu, d2, y1, d2, n, p);
            ok &= all_close(d1, dr, n, 1e-6, 1e-6, "relu_dropout_backward") &&
                  all_same(d1, d2, n, "relu_dropout_backward");
            /* add */
            float *ar = fcopy(x, n), *a1 = fcopy(x, n), *a2 = fcopy(x, n);
            ref->add(ref, ar, dy, n);
            mp_threads_set(1);
            cpu->add(cpu, a1, dy, n);
            mp_threads_set(2);
            cpu->add(cpu, a2, dy, n);
            ok &= all_close(a1, ar, n, 0, 0, "add") && all_same(a1, a2, n, "add");
            /* dropout on a 2-D block with row stride, forward and backward */
            int cols = n > 7 ? 7 : (int)n, ld = cols + 2;
            int32_t rows = cols ? (int32_t)(n / (size_t)ld) : 0;
            float *xr = fpoison(n), *x1 = fpoison(n), *x2 = fpoison(n);
            ref->dropout(ref, xr, x, rows, cols, ld, p, key);
            mp_threads_set(1);
            cpu->dropout(cpu, x1, x, rows, cols, ld, p, key);
            mp_threads_set(2);
            cpu->dropout(cpu, x2, x, rows, cols, ld, p, key);
            for (int32_t i = 0; i < rows; i++)
                ok &= all_close(x1 + (size_t)i * ld, xr + (size_t)i * ld, (size_t)cols, 1e-6,
                                1e-6, "dropout");
            ref->dropout_backward(ref, xr, dy, rows, cols, ld, p, key);
            cpu->dropout_backward(cpu, x1, dy, rows, cols, ld, p, key);
            for (int32_t i = 0; i < rows; i++)
                ok &= all_close(x1 + (size_t)i * ld, xr + (size_t)i * ld, (size_t)cols, 1e-6,
                                1e-6, "dropout_backward");
            mp_threads_set(0);
            mp_free(x); mp_free(dy); mp_free(yr); mp_free(y1); mp_free(y2);
            mp_free(dr); mp_free(d1); mp_free(d2); mp_free(ar); mp_free(a1); mp_free(a2);
            mp_free(xr); mp_free(x1); mp_free(x2);
            CHECK_MSG(ok, "elementwise n=%zu p=%g", n, p);
        }
    mp_backend_close(cpu);
    mp_backend_close(ref);
}

MP_TEST(ops_bias_copy_loss_adam_cpu_match_ref)
{
    mp_backend *cpu = open_backend("cpu"), *ref = open_backend("ref");
    CHECK(cpu && ref);
    mp_rng r;
    mp_rng_seed(&r, 13, 0);
    static const int shapes[][2] = { { 0, 3 }, { 1, 1 }, { 5, 7 }, { 50, 300 }, { 333, 129 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int32_t rows = shapes[s][0];
        int cols = shapes[s][1], ld = cols + 5;
        size_t n = (size_t)rows * ld;
        int ok = 1;
        float *row = frand(&r, (size_t)cols, -1, 1), *x = frand(&r, n, -1, 1);
        /* fill_rows, copy2d: padding columns must stay untouched */
        float *yr = fpoison(n), *y1 = fpoison(n);
        ref->fill_rows(ref, yr, ld, row, rows, cols);
        cpu->fill_rows(cpu, y1, ld, row, rows, cols);
        for (int32_t i = 0; i < rows; i++)
            ok &= all_close(y1 + (size_t)i * ld, yr + (size_t)i * ld, (size_t)cols, 0, 0, "fill_rows");
        ref->copy2d(ref, yr, ld, x, ld, rows, cols - 1);
        cpu->copy2d(cpu, y1, ld, x, ld, rows, cols - 1);
        for (int32_t i = 0; i < rows; i++)
            ok &= all_close(y1 + (size_t)i * ld, yr + (size_t)i * ld, (size_t)cols, 0, 0, "copy2d");
        /* col_sum accumulates */
        float *sr = frand(&r, (size_t)cols, -1, 1), *s1 = fcopy(sr, (size_t)cols),
              *s2 = fcopy(sr, (size_t)cols);
        ref->col_sum(ref, sr, x, ld, rows, cols);
        mp_threads_set(1);
        cpu->col_sum(cpu, s1, x, ld, rows, cols);
        mp_threads_set(2);
        cpu->col_sum(cpu, s2, x, ld, rows, cols);
        mp_threads_set(0);
        ok &= all_close(s1, sr, (size_t)cols, 1e-5 * (rows + 1), 1e-5, "col_sum") &&
              all_same(s1, s2, (size_t)cols, "col_sum");
        /* loss, both kinds, some labels missing */
        size_t nt = (size_t)rows * cols;
        float *yv = frand(&r, nt, -3, 3), *t = frand(&r, nt, -1, 1);
        uint8_t *mask = mp_malloc(nt + 1);
        for (size_t i = 0; i < nt; i++) {
            mask[i] = mp_rng_uniform(&r) < 0.7;
            if (mp_rng_uniform(&r) < 0.5)
                t[i] = t[i] > 0;   /* 0/1 labels for BCE (MSE does not care) */
        }
        for (int kind = 0; kind < 2; kind++) {
            float lr = NAN, l1 = NAN;
            float *dr = fpoison(nt), *d1 = fpoison(nt);
            ref->loss(ref, &lr, dr, yv, t, mask, rows, cols, (mp_loss_kind)kind);
            cpu->loss(cpu, &l1, d1, yv, t, mask, rows, cols, (mp_loss_kind)kind);
            ok &= all_close(&l1, &lr, 1, 1e-6, 1e-5, "loss") &&
                  all_close(d1, dr, nt, 1e-7, 1e-5, "loss gradient");
            mp_free(dr);
            mp_free(d1);
        }
        /* adam: three steps from the same state */
        float *pr = frand(&r, nt, -1, 1), *g = frand(&r, nt, -1, 1);
        float *mr = fpoison(nt), *vr = fpoison(nt);
        for (size_t i = 0; i < nt; i++)
            mr[i] = vr[i] = 0;
        float *p1 = fcopy(pr, nt), *m1 = fcopy(mr, nt), *v1 = fcopy(vr, nt);
        for (long step = 1; step <= 3; step++) {
            ref->adam(ref, pr, mr, vr, g, nt, 1e-3, 0.9, 0.999, 1e-8, 0.0, step);
            cpu->adam(cpu, p1, m1, v1, g, nt, 1e-3, 0.9, 0.999, 1e-8, 0.0, step);
        }
        ok &= all_close(p1, pr, nt, 1e-6, 1e-6, "adam p") && all_close(m1, mr, nt, 1e-7, 1e-5, "adam m") &&
              all_close(v1, vr, nt, 1e-8, 1e-5, "adam v");
        mp_free(row); mp_free(x); mp_free(yr); mp_free(y1); mp_free(sr); mp_free(s1); mp_free(s2);
        mp_free(yv); mp_free(t); mp_free(mask); mp_free(pr); mp_free(g); mp_free(mr); mp_free(vr);
        mp_free(p1); mp_free(m1); mp_free(v1);
        CHECK_MSG(ok, "rows=%d cols=%d", (int)rows, cols);
    }
    mp_backend_close(cpu);
    mp_backend_close(ref);
}

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
/* Graph ops, cpu vs ref                                                  */
/* ===================================================================== */

/* Runs the body (the variadic part) once for each graph case with g, h, fa, na, ne, nm set. */
#define FOR_GRAPH_CASES(seed, ...)                                                      \
    for (int gc = 0; gc < N_GRAPH_CASES; gc++) {                                        \
        mp_rng r;                                                                       \
        mp_rng_seed(&r, (seed), (uint64_t)gc);                                          \
        mp_graphs g;                                                                    \
        CHECK(rg_make(&g, &r, graph_cases[gc].n_mols, graph_cases[gc].atom_fdim,        \
                      &graph_cases[gc].o));                                             \
        const int h = graph_cases[gc].h, fa = graph_cases[gc].atom_fdim;                \
        const size_t na = (size_t)g.n_atoms, ne = (size_t)g.n_edges;                    \
        const int32_t nm = g.n_mols;                                                    \
        (void)fa; (void)na; (void)ne; (void)nm;                                         \
        int ok = 1;                                                                     \
        __VA_ARGS__                                                                     \
        mp_graphs_free(&g);                                                             \
        CHECK_MSG(ok, "graph case %d (%d molecules, %zu atoms, %zu edges, h %d)", gc,  \
                  (int)nm, na, ne, h);                                                  \
    }

/* Runs an op with ref, cpu at 1 thread and cpu at 2 threads, each on its
 * own copy of the output (initialised from `init`), then compares. */
#define THREE_WAY(out_n, init, call, what, atol, rtol)                                  \
    do {                                                                                \
        size_t on_ = (out_n);                                                           \
        float *o_r = fcopy(init, on_), *o_1 = fcopy(init, on_), *o_2 = fcopy(init, on_);\
        { mp_backend *bk = ref; float *o = o_r; call; }                                 \
        mp_threads_set(1);                                                              \
        { mp_backend *bk = cpu; float *o = o_1; call; }                                 \
        mp_threads_set(2);                                                              \
        { mp_backend *bk = cpu; float *o = o_2; call; }                                 \
        mp_threads_set(0);                                                              \
        ok &= all_close(o_1, o_r, on_, atol, rtol, what) && all_same(o_1, o_2, on_, what); \
        mp_free(o_r); mp_free(o_1); mp_free(o_2);                                       \
    } while (0)

MP_TEST(ops_graph_forward_cpu_matches_ref)
{
    mp_backend *cpu = open_backend("cpu"), *ref = open_backend("ref");
    CHECK(cpu && ref);
    FOR_GRAPH_CASES(21, {
        size_t wi_rows = (size_t)fa + MP_BOND_FDIM;
        float *w = frand(&r, wi_rows * h, -1, 1), *bias = frand(&r, (size_t)h, -1, 1);
        float *atoms = frand(&r, na * h, -1, 1), *edges = frand(&r, ne * h, -1, 1);
        float *pa = fpoison(na * h), *pe = fpoison(ne * h);
        int ldo = h + 3;
        float *pm = fpoison((size_t)nm * ldo);
        THREE_WAY(na * h, pa, bk->atom_embed(bk, o, g.atom_hot, g.atom_mass, w, NULL, g.n_atoms, h, fa - 1),
                  "atom_embed", 1e-5, 1e-5);
        THREE_WAY(na * h, pa, bk->atom_embed(bk, o, g.atom_hot, g.atom_mass, w, bias, g.n_atoms, h, fa - 1),
                  "atom_embed+bias", 1e-5, 1e-5);
        THREE_WAY(ne * h, pe, bk->edge_embed(bk, o, g.edge_src, g.bond_hot, atoms, w + (size_t)fa * h,
                                             g.n_edges, h),
                  "edge_embed", 1e-5, 1e-5);
        THREE_WAY(na * h, pa, bk->atom_sum(bk, o, g.in_start, g.in_edge, edges, g.n_atoms, h),
                  "atom_sum", 1e-5, 1e-5);
        THREE_WAY(ne * h, pe, bk->atom_sum_backward(bk, o, g.edge_dst, atoms, g.n_edges, h),
                  "atom_sum_backward", 0, 0);
        {
            float *s_scratch[3] = { fpoison(na * h), fpoison(na * h), fpoison(na * h) };
            int si = 0;
            THREE_WAY(ne * h, pe,
                      bk->message(bk, o, s_scratch[si++], g.in_start, g.in_edge, g.edge_src,
                                  edges, g.n_atoms, g.n_edges, h),
                      "message", 1e-5, 1e-5);
            ok &= all_close(s_scratch[1], s_scratch[0], na * h, 1e-5, 1e-5, "message sums");
            for (int i = 0; i < 3; i++)
                mp_free(s_scratch[i]);
        }
        for (int agg = 0; agg < 3; agg++)
            THREE_WAY((size_t)nm * ldo, pm,
                      bk->pool(bk, o, ldo, g.mol_atom, atoms, nm, h, (mp_aggregation)agg, 7.0);
                      for (int32_t i_ = 0; i_ < nm; i_++) for (int j_ = h; j_ < ldo; j_++)
                          o[(size_t)i_ * ldo + j_] = 0,
                      "pool", 1e-5, 1e-5);
        mp_free(w); mp_free(bias); mp_free(atoms); mp_free(edges); mp_free(pa); mp_free(pe); mp_free(pm);
    })
    mp_backend_close(cpu);
    mp_backend_close(ref);
}

MP_TEST(ops_graph_backward_cpu_matches_ref)
{
    mp_backend *cpu = open_backend("cpu"), *ref = open_backend("ref");
    CHECK(cpu && ref);
    FOR_GRAPH_CASES(22, {
        size_t wi_rows = (size_t)fa + MP_BOND_FDIM;
        float *dw0 = frand(&r, wi_rows * h, -1, 1);
        float *datoms = frand(&r, na * h, -1, 1), *dedges = frand(&r, ne * h, -1, 1);
        float *pa = fpoison(na * h), *pe = fpoison(ne * h);
        int ldo = h + 3;
        float *dmol = frand(&r, (size_t)nm * ldo, -1, 1);
        /* weight gradients accumulate onto dw0 */
        THREE_WAY(wi_rows * h, dw0,
                  bk->atom_embed_backward(bk, o, g.atom_hot, g.atom_mass, datoms, g.n_atoms, h, fa - 1),
                  "atom_embed_backward", 1e-5, 1e-5);
        {
            float *da[3] = { fpoison(na * h), fpoison(na * h), fpoison(na * h) };
            int di = 0;
            THREE_WAY(MP_BOND_FDIM * (size_t)h, dw0,
                      bk->edge_embed_backward(bk, da[di++], o, g.in_start, g.in_edge, g.bond_hot,
                                              dedges, g.n_atoms, g.n_edges, h),
                      "edge_embed_backward (bond rows)", 1e-5, 1e-5);
            ok &= all_close(da[1], da[0], na * h, 1e-5, 1e-5, "edge_embed_backward (atoms)") &&
                  all_same(da[1], da[2], na * h, "edge_embed_backward (atoms)");
            for (int i = 0; i < 3; i++)
                mp_free(da[i]);
        }
        {
            float *ds[3] = { fpoison(na * h), fpoison(na * h), fpoison(na * h) };
            int di = 0;
            THREE_WAY(ne * h, pe,
                      bk->message_backward(bk, o, ds[di++], g.in_start, g.in_edge, g.edge_dst,
                                           dedges, g.n_atoms, g.n_edges, h),
                      "message_backward", 1e-5, 1e-5);
            for (int i = 0; i < 3; i++)
                mp_free(ds[i]);
        }
        for (int agg = 0; agg < 3; agg++)
            THREE_WAY(na * h, pa,
                      bk->pool_backward(bk, o, g.mol_atom, dmol, ldo, nm, h, (mp_aggregation)agg, 7.0),
                      "pool_backward", 1e-6, 1e-6);
        mp_free(dw0); mp_free(datoms); mp_free(dedges); mp_free(pa); mp_free(pe); mp_free(dmol);
    })
    mp_backend_close(cpu);
    mp_backend_close(ref);
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
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = ta ? m : k, ldb = tb ? k : n;
            double *a = drand(&r, (size_t)m * k, -1, 1), *bm = drand(&r, (size_t)k * n, -1, 1);
            double *c = dzeros((size_t)m * n), *rr = drand(&r, (size_t)m * n, -1, 1);
            double *da = dzeros((size_t)m * k), *db = dzeros((size_t)k * n);
            /* the adjoint products, as dmpnn.c / ffn.c write them */
            if (!ta)
                b->gemm(b, 0, !tb, m, k, n, 1, rr, n, bm, ldb, 0, da, k);
            else
                b->gemm(b, tb, 1, k, m, n, 1, bm, ldb, rr, n, 0, da, m);
            if (!tb)
                b->gemm(b, !ta, 0, k, n, m, 1, a, lda, rr, n, 0, db, n);
            else
                b->gemm(b, 1, ta, n, k, m, 1, rr, n, a, lda, 0, db, k);
            FD_CHECK(a, (size_t)m * k, da, c, (size_t)m * n, rr,
                     b->gemm(b, ta, tb, m, n, k, 1, a, lda, bm, ldb, 0, c, n), "gemm dA");
            FD_CHECK(bm, (size_t)k * n, db, c, (size_t)m * n, rr,
                     b->gemm(b, ta, tb, m, n, k, 1, a, lda, bm, ldb, 0, c, n), "gemm dB");
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
        uint64_t key = 77;
        b->relu_dropout(b, y, x, n, p, key);
        b->relu_dropout_backward(b, dx, y, rr, n, p);
        FD_CHECK(x, n, dx, y, n, rr, b->relu_dropout(b, y, x, n, p, key), "relu_dropout");
        /* dropout over 5 rows x 6 of ld 8: columns 6, 7 are outside the
         * block, so their outputs stay constant and their gradient is 0 */
        b->dropout_backward(b, dx, rr, 5, 6, 8, p, key);
        for (int i = 0; i < 5; i++)
            for (int j = 6; j < 8; j++)
                dx[i * 8 + j] = 0;
        FD_CHECK(x, n, dx, y, n, rr, b->dropout(b, y, x, 5, 6, 8, p, key), "dropout");
    }
    /* bias: fill_rows forward, col_sum backward */
    double *row = drand(&r, 8, -1, 1), *drow = dzeros(8);
    b->col_sum(b, drow, rr, 8, 5, 8);
    FD_CHECK(row, 8, drow, y, n, rr, b->fill_rows(b, y, 8, row, 5, 8), "fill_rows/col_sum");
    /* losses over 8 molecules x 5 tasks, some labels missing */
    double *t = drand(&r, n, 0, 1), *loss = dzeros(1), *dl = dzeros(n), one = 1;
    uint8_t mask[40];
    for (size_t i = 0; i < n; i++) {
        mask[i] = mp_rng_uniform(&r) < 0.6;
        t[i] = mp_rng_uniform(&r) < 0.5 ? (double)(t[i] > 0.5) : t[i];
    }
    for (int kind = 0; kind < 2; kind++) {
        b->loss(b, loss, dl, x, t, mask, 8, 5, (mp_loss_kind)kind);
        FD_CHECK(x, n, dl, loss, 1, &one, b->loss(b, loss, y, x, t, mask, 8, 5, (mp_loss_kind)kind),
                 kind ? "BCE loss" : "MSE loss");
        for (size_t i = 0; i < n; i++)
            CHECK(mask[i] || dl[i] == 0);
    }
    /* no label at all: zero loss, zero gradient */
    memset(mask, 0, sizeof mask);
    b->loss(b, loss, dl, x, t, mask, 8, 5, MP_LOSS_MSE);
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
    b->edge_embed_backward(b, ga, gw + (size_t)fa * h, g.in_start, g.in_edge, g.bond_hot, re, g.n_atoms, g.n_edges, h);
    FD_CHECK(atoms, na * h, ga, oe, ne * h, re,
             b->edge_embed(b, oe, g.edge_src, g.bond_hot, atoms, wb, g.n_edges, h), "edge_embed da");
    FD_CHECK(wb, (size_t)MP_BOND_FDIM * h, gw + (size_t)fa * h, oe, ne * h, re,
             b->edge_embed(b, oe, g.edge_src, g.bond_hot, atoms, wb, g.n_edges, h), "edge_embed dwb");
    /* message: d/dm */
    b->message_backward(b, ge, sa, g.in_start, g.in_edge, g.edge_dst, re, g.n_atoms, g.n_edges, h);
    FD_CHECK(edges, ne * h, ge, oe, ne * h, re,
             b->message(b, oe, sa, g.in_start, g.in_edge, g.edge_src, edges, g.n_atoms, g.n_edges, h),
             "message");
    /* atom_sum: d/dm */
    b->atom_sum_backward(b, ge, g.edge_dst, ra, g.n_edges, h);
    FD_CHECK(edges, ne * h, ge, oa, na * h, ra,
             b->atom_sum(b, oa, g.in_start, g.in_edge, edges, g.n_atoms, h), "atom_sum");
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

MP_TEST(ops_backend_open_names)
{
    mp_backend *b = NULL;
    CHECK(mp_backend_open(&b, "nonesuch") == MP_ERR_ARG && !b);
    CHECK(strstr(mp_error_message(), "nonesuch") != NULL);
    CHECK(mp_backend_open(&b, "cuda") == MP_ERR_NODEVICE && !b);
    CHECK_OK(mp_backend_open(&b, "ref64"));
    CHECK(b->dtype == MP_F64 && b->esize == 8);
    mp_backend_close(b);
    CHECK_OK(mp_backend_open(&b, "cpu"));
    CHECK(b->dtype == MP_F32 && b->esize == 4);
    mp_backend_close(b);
    CHECK(strstr(mp_backend_cpu_info(), "OpenBLAS") != NULL);
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
