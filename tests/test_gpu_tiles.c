/*
 * test_gpu_tiles.c - the bf16 products of small batches on the tile kernel
 * (src/gpu/tiles_cuda.cu) against cuBLAS (the same backend opened with
 * MOLPROP_CUDA_TILES=0):
 *
 *   - every form the kernel takes (C = A B, A B^T, the ReLU(R + A W) of
 *     gemm_res_relu, in place and not), fp32 and bf16 C,
 *     beta 0 and 1, at the batch-50 step's shapes, a ragged small one,
 *     one on the larger tiles and several on the panels of 40,000 rows and
 *     more (B whole in shared memory, wgmma): within the order of the sums (fp32 C) or
 *     one rounding (bf16 C) of cuBLAS, and on the tile kernel (its call
 *     count; none with MOLPROP_CUDA_TILES=0);
 *   - the same bits on a second and third call;
 *   - a row's result does not depend on the rows around it: a slice of
 *     rows alone gives the bits it gets in the whole product (for the
 *     panels, a slice of more than 40,000 rows at an odd offset);
 *   - what it does not take (the weight gradients A^T B among them) goes
 *     to cuBLAS.
 *
 * GPU only (names gpu_*): skipped without a GPU, failed under
 * MOLPROP_REQUIRE_GPU=1.
 */
#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"
#include "gpu/gpu.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int ta, tb, m, n, k;
    double beta;
    mp_stype c_st;
    int res_relu;    /* 1: gemm_res_relu (tb = 0, beta unused), 2: in place */
} pcase;

static const pcase cases[] = {
    { 0, 0, 2502, 300, 300, 0.0, MP_ST_BF16, 0 },  /* the step's products at batch 50 */
    { 0, 1, 2502, 300, 300, 0.0, MP_ST_BF16, 0 },
    { 0, 1, 1179, 300, 300, 0.0, MP_ST_ELEM, 0 },
    { 0, 0, 2502, 300, 300, 0.0, MP_ST_BF16, 2 },
    { 0, 0, 1179, 300, 300, 0.0, MP_ST_ELEM, 2 },
    { 0, 0, 1179, 300, 300, 0.0, MP_ST_ELEM, 1 },
    { 0, 0, 37, 52, 44, 1.0, MP_ST_ELEM, 0 },      /* ragged everywhere */
    { 0, 1, 37, 52, 44, 1.0, MP_ST_BF16, 0 },
    { 0, 0, 6000, 300, 300, 1.0, MP_ST_ELEM, 0 },  /* the 64 x 64 tiles */
    { 0, 1, 6000, 300, 300, 0.0, MP_ST_BF16, 0 },
    { 0, 0, 45001, 300, 300, 1.0, MP_ST_ELEM, 0 }, /* the panels (40,000 rows and more) */
    { 0, 1, 45001, 300, 300, 0.0, MP_ST_BF16, 0 },
    { 0, 0, 50000, 300, 300, 0.0, MP_ST_BF16, 2 },
    { 0, 0, 46000, 300, 300, 0.0, MP_ST_ELEM, 1 },
    { 0, 1, 45001, 156, 44, 0.0, MP_ST_ELEM, 0 },  /* ragged panels: n, k, the last rows */
    { 0, 0, 45001, 304, 320, 1.0, MP_ST_ELEM, 0 }, /* the largest B they hold */
    { 0, 1, 45001, 304, 320, 0.0, MP_ST_BF16, 0 },
};

typedef struct {
    void *a, *b, *c, *r;
} bufs;

static void free_bufs(mp_backend *be, bufs *x)
{
    void *p[4] = { x->a, x->b, x->c, x->r };
    for (int i = 0; i < 4; i++)
        if (p[i])
            be->free(be, p[i]);
    memset(x, 0, sizeof *x);
}

/* The case's operands on backend be, from seed (the same values on every
 * backend): A, B bf16, C (and R) of the case's storage. */
static int make_bufs(mp_backend *be, const pcase *pc, uint64_t seed, bufs *x)
{
    mp_rng r;
    mp_rng_seed(&r, seed, 5);
    const size_t ar = pc->ta ? pc->k : pc->m, ac = pc->ta ? pc->m : pc->k;
    const size_t br = pc->tb ? pc->n : pc->k, bc = pc->tb ? pc->k : pc->n;
    memset(x, 0, sizeof *x);
    x->a = mp_test_random_dev(be, &r, MP_ST_BF16, ar, (int)ac, 1.0);
    x->b = mp_test_random_dev(be, &r, MP_ST_BF16, br, (int)bc, 0.1);
    x->c = mp_test_random_dev(be, &r, pc->c_st, (size_t)pc->m, pc->n, 1.0);
    x->r = pc->res_relu == 1 ? mp_test_random_dev(be, &r, pc->c_st, (size_t)pc->m, pc->n, 1.0)
                             : NULL;
    return x->a && x->b && x->c && (pc->res_relu != 1 || x->r);
}

/* The product of the case on be into x->c (rows [r0, r0 + rows) of it). */
static void run_case(mp_backend *be, const pcase *pc, bufs *x, int r0, int rows)
{
    const size_t es = pc->c_st == MP_ST_BF16 ? 2 : sizeof(float);
    const int lda = pc->ta ? pc->m : pc->k, ldb = pc->tb ? pc->k : pc->n;
    const char *a = (const char *)x->a + (size_t)r0 * lda * 2;
    char *c = (char *)x->c + (size_t)r0 * pc->n * es;
    if (pc->res_relu) {
        const void *res = pc->res_relu == 2 ? c : (const char *)x->r + (size_t)r0 * pc->n * es;
        be->gemm_res_relu(be, rows, pc->n, pc->k, a, lda, x->b, ldb, MP_ST_BF16, res, pc->n, c,
                          pc->n, pc->c_st);
        return;
    }
    mp_gemm g = { pc->ta, pc->tb, rows, pc->n, pc->k, 1.0, pc->beta, a, x->b, c, lda, ldb,
                  pc->n, MP_ST_BF16, MP_ST_BF16, pc->c_st };
    be->gemm(be, 1, &g);
}

/* The calls a case makes on our kernels: one on the tiles (up to 6,144
 * rows) or on the panels (40,000 rows and more, sm_90 devices only); none
 * between them (cuBLAS). */
static long kernel_calls(const mp_backend *t, const pcase *pc)
{
    if (pc->m <= 6144)
        return 1;
    return pc->m >= 40000 && strstr(mp_backend_cuda_info(t), ", sm_90,") ? 1 : 0;
}

static int case_ok(mp_backend *t, mp_backend *u, const pcase *pc, uint64_t seed, char *err,
                   size_t cap)
{
    const long calls = mp_backend_cuda_tile_calls(t), expect = calls + kernel_calls(t, pc);
    bufs xt, xu;
    int ok = make_bufs(t, pc, seed, &xt) && make_bufs(u, pc, seed, &xu);
    const size_t n = (size_t)pc->m * pc->n;
    float *got = NULL, *want = NULL, *again = NULL, *slice = NULL;
    if (ok) {
        run_case(t, pc, &xt, 0, pc->m);
        run_case(u, pc, &xu, 0, pc->m);
        if (mp_backend_cuda_tile_calls(t) != expect || mp_backend_cuda_tile_calls(u) != 0) {
            snprintf(err, cap, "tile kernel calls: %ld on the tiles backend (expected %ld), "
                     "%ld with MOLPROP_CUDA_TILES=0 (expected 0)",
                     mp_backend_cuda_tile_calls(t), expect, mp_backend_cuda_tile_calls(u));
            ok = 0;
            goto done;
        }
        got = mp_test_floats_of(t, xt.c, pc->c_st, (size_t)pc->m, pc->n);
        want = mp_test_floats_of(u, xu.c, pc->c_st, (size_t)pc->m, pc->n);
        ok = got && want;
    }
    if (!ok) {
        snprintf(err, cap, "set-up: %s", mp_error_message());
        goto done;
    }
    char why[256];
    const int bf = pc->c_st == MP_ST_BF16;
    if (!mp_test_close_all(got, want, n, bf ? 1.0 / 128 : 1e-4, bf ? 1e-3 : 1e-5, why,
                           sizeof why)) {
        snprintf(err, cap, "tiles vs cuBLAS: %s", why);
        ok = 0;
        goto done;
    }
    if (mp_test_env_flag("MOLPROP_TEST_VERBOSE")) {
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += got[i] != want[i];
        printf("    ta %d tb %d %d x %d x %d: %zu of %zu differ from cuBLAS\n", pc->ta, pc->tb,
               pc->m, pc->n, pc->k, differ, n);
    }
    /* again, twice, from the same operands: the same bits */
    for (int rep = 0; ok && rep < 2; rep++) {
        free_bufs(t, &xt);
        ok = make_bufs(t, pc, seed, &xt);
        if (ok)
            run_case(t, pc, &xt, 0, pc->m);
        mp_free(again);
        again = ok ? mp_test_floats_of(t, xt.c, pc->c_st, (size_t)pc->m, pc->n) : NULL;
        if (!again) {
            snprintf(err, cap, "rerun: %s", mp_error_message());
            ok = 0;
        } else if (memcmp(again, got, n * sizeof(float)) != 0) {
            snprintf(err, cap, "call %d gave other bits than the first", rep + 2);
            ok = 0;
        }
    }
    /* rows [m / 3, m / 3 + m / 4) alone (ta 0: C's rows are A's); for the
     * panels all but 1,001 rows at each end, so that the slice runs on the
     * panels too, from an offset that is no multiple of 64 */
    if (ok && pc->m >= 8) {
        const int big = pc->m > 40000;
        const int r0 = big ? 1001 : pc->m / 3, rows = big ? pc->m - 2002 : pc->m / 4;
        free_bufs(t, &xt);
        ok = make_bufs(t, pc, seed, &xt);
        if (ok)
            run_case(t, pc, &xt, r0, rows);
        slice = ok ? mp_test_floats_of(t, xt.c, pc->c_st, (size_t)pc->m, pc->n) : NULL;
        if (!slice) {
            snprintf(err, cap, "slice: %s", mp_error_message());
            ok = 0;
        } else if (memcmp(slice + (size_t)r0 * pc->n, got + (size_t)r0 * pc->n,
                          (size_t)rows * pc->n * sizeof(float)) != 0) {
            snprintf(err, cap, "rows %d..%d alone differ from the same rows in the whole "
                     "product", r0, r0 + rows - 1);
            ok = 0;
        }
    }
done:
    mp_free(got);
    mp_free(want);
    mp_free(again);
    mp_free(slice);
    free_bufs(t, &xt);
    free_bufs(u, &xu);
    return ok;
}

/* Opens gpu:bf16 with MOLPROP_CUDA_TILES set to `value` (NULL: unset) for
 * the open, the environment as it was afterwards. */
static mp_status open_tiles(mp_backend **b, const char *value)
{
    char *old = mp_test_env_set("MOLPROP_CUDA_TILES", value);
    mp_status st = mp_backend_open(b, "gpu:bf16");
    mp_test_env_restore("MOLPROP_CUDA_TILES", old);
    return st;
}

MP_TEST(gpu_tiles_products_match_cublas)
{
    MP_NEED_GPU();
    mp_backend *t = NULL, *u = NULL;
    CHECK_OK(open_tiles(&t, NULL));
    CHECK_OK(open_tiles(&u, "0"));
    char err[512] = "";
    int ok = 1;
    size_t i = 0;
    for (; ok && i < sizeof cases / sizeof cases[0]; i++)
        ok = case_ok(t, u, &cases[i], 100 + i, err, sizeof err);
    CHECK_OK(t->sync(t));
    CHECK_OK(u->sync(u));
    mp_backend_close(t);
    mp_backend_close(u);
    const pcase *pc = &cases[i - 1];
    CHECK_MSG(ok, "case %zu (ta %d tb %d, %d x %d x %d, beta %g, %s C%s): %s", i - 1, pc->ta,
              pc->tb, pc->m, pc->n, pc->k, pc->beta, pc->c_st == MP_ST_BF16 ? "bf16" : "fp32",
              pc->res_relu ? ", res_relu" : "", err);
}

/* What the tile kernel does not take goes to cuBLAS: A^T B (the weight
 * gradients), more rows than the tiles take and fewer than the panels',
 * or n outside the panels' (152, 304] or k past their 320, fp32 operands,
 * k or n off the 4-element groups, alpha other than 1. */
MP_TEST(gpu_tiles_decline_to_cublas)
{
    MP_NEED_GPU();
    mp_backend *t = NULL;
    CHECK_OK(mp_backend_open(&t, "gpu:bf16"));
    const size_t cap = (size_t)41000 * 324 * 4;
    void *a = t->alloc(t, cap), *b = t->alloc(t, cap), *c = t->alloc(t, cap);
    CHECK(a && b && c);
    t->zero(t, a, cap);
    t->zero(t, b, cap);
    const mp_stype bf = MP_ST_BF16, el = MP_ST_ELEM;
    const mp_gemm no[] = {
        { 0, 0, 7000, 300, 300, 1.0, 0.0, a, b, c, 300, 300, 300, bf, bf, el }, /* rows */
        { 0, 0, 39999, 300, 300, 1.0, 0.0, a, b, c, 300, 300, 300, bf, bf, el }, /* rows */
        { 0, 0, 41000, 308, 300, 1.0, 0.0, a, b, c, 300, 308, 308, bf, bf, el }, /* rows, n */
        { 0, 1, 41000, 300, 324, 1.0, 0.0, a, b, c, 324, 324, 300, bf, bf, el }, /* rows, k */
        { 0, 0, 41000, 152, 300, 1.0, 0.0, a, b, c, 300, 152, 152, bf, bf, el }, /* rows, n */
        { 1, 0, 300, 300, 2502, 1.0, 1.0, a, b, c, 300, 300, 300, bf, bf, el }, /* A^T B */
        { 1, 0, 300, 300, 1000, 1.0, 0.0, a, b, c, 300, 300, 300, bf, bf, bf },
        { 0, 0, 500, 300, 300, 1.0, 0.0, a, b, c, 300, 300, 300, el, el, el },  /* fp32 */
        { 0, 0, 500, 300, 302, 1.0, 0.0, a, b, c, 302, 300, 300, bf, bf, el },  /* k % 4 */
        { 0, 1, 500, 300, 302, 1.0, 0.0, a, b, c, 302, 302, 300, bf, bf, el },
        { 0, 0, 500, 302, 300, 1.0, 0.0, a, b, c, 300, 302, 302, bf, bf, el },  /* n % 4 */
        { 0, 0, 500, 300, 300, 0.5, 0.0, a, b, c, 300, 300, 300, bf, bf, el },  /* alpha */
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        t->gemm(t, 1, &no[i]);
        CHECK_OK(t->sync(t));
        CHECK_MSG(mp_backend_cuda_tile_calls(t) == 0, "product %zu went to the tile kernel", i);
    }
    /* and one it takes, so the count can move */
    const mp_gemm yes = { 0, 0, 500, 300, 300, 1.0, 0.0, a, b, c, 300, 300, 300, bf, bf, el };
    t->gemm(t, 1, &yes);
    CHECK_OK(t->sync(t));
    CHECK_EQ_INT((int)mp_backend_cuda_tile_calls(t), 1);
    t->free(t, a);
    t->free(t, b);
    t->free(t, c);
    mp_backend_close(t);
}

/* Under set_share (ensemble members side by side) the tile kernel runs on
 * a smaller grid, each block taking several tiles in turn: the same bits
 * as the whole GPU's grid, so a member is the model it would be alone.
 * (MOLPROP_CUDA_TILES=1: by default a share of more than two leaves the
 * small products to cuBLAS; gpu_tiles_shared_small_products_to_cublas.) */
MP_TEST(gpu_tiles_shared_grid_same_bits)
{
    MP_NEED_GPU();
    mp_backend *t = NULL, *s = NULL;
    CHECK_OK(mp_backend_open(&t, "gpu:bf16"));
    CHECK_OK(open_tiles(&s, "1"));
    CHECK(s->set_share != NULL);
    CHECK_OK(s->set_share(s, 8));
    static const pcase shared[] = {
        { 0, 0, 2502, 300, 300, 0.0, MP_ST_BF16, 2 },
        { 0, 1, 5999, 300, 300, 1.0, MP_ST_ELEM, 0 },
        { 0, 0, 44001, 300, 300, 0.0, MP_ST_BF16, 2 },   /* panels: fewer blocks, more each */
    };
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        const pcase *pc = &shared[i];
        bufs xt, xs;
        CHECK(make_bufs(t, pc, 7 + i, &xt) && make_bufs(s, pc, 7 + i, &xs));
        const long calls = mp_backend_cuda_tile_calls(s);
        run_case(t, pc, &xt, 0, pc->m);
        run_case(s, pc, &xs, 0, pc->m);
        CHECK_EQ_INT((int)(mp_backend_cuda_tile_calls(s) - calls), (int)kernel_calls(s, pc));
        float *a = mp_test_floats_of(t, xt.c, pc->c_st, (size_t)pc->m, pc->n);
        float *b = mp_test_floats_of(s, xs.c, pc->c_st, (size_t)pc->m, pc->n);
        CHECK(a && b);
        CHECK_MSG(memcmp(a, b, (size_t)pc->m * pc->n * sizeof(float)) == 0,
                  "case %zu: the shared backend's product differs from the unshared one", i);
        mp_free(a);
        mp_free(b);
        free_bufs(t, &xt);
        free_bufs(s, &xs);
    }
    mp_backend_close(t);
    mp_backend_close(s);
}

/* By default an instance sharing the GPU with two or more others leaves the
 * products of up to 6,144 rows to cuBLAS (the tiles' many small blocks
 * crowd the other members); the panels of 40,000 rows and more stay, and a
 * share of two, or MOLPROP_CUDA_TILES=1, keeps the small ones on the tiles. */
MP_TEST(gpu_tiles_shared_small_products_to_cublas)
{
    MP_NEED_GPU();
    mp_backend *d = NULL, *f = NULL;
    CHECK_OK(open_tiles(&d, NULL));
    CHECK_OK(open_tiles(&f, "1"));
    static const pcase small = { 0, 0, 2502, 300, 300, 0.0, MP_ST_BF16, 2 };
    static const pcase panel = { 0, 0, 44001, 300, 300, 0.0, MP_ST_BF16, 2 };
    bufs xd, xf, xp;
    CHECK(make_bufs(d, &small, 3, &xd) && make_bufs(f, &small, 3, &xf) &&
          make_bufs(d, &panel, 4, &xp));
    const int shares[] = { 1, 2, 3, 5 };
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
        const int n = shares[i];
        CHECK_OK(d->set_share(d, n));
        CHECK_OK(f->set_share(f, n));
        long cd = mp_backend_cuda_tile_calls(d), cf = mp_backend_cuda_tile_calls(f);
        run_case(d, &small, &xd, 0, small.m);
        run_case(f, &small, &xf, 0, small.m);
        CHECK_MSG(mp_backend_cuda_tile_calls(d) - cd == (n > 2 ? 0 : kernel_calls(d, &small)),
                  "share %d: the small product %s the tiles", n, n > 2 ? "went to" : "missed");
        CHECK_MSG(mp_backend_cuda_tile_calls(f) - cf == kernel_calls(f, &small),
                  "share %d, MOLPROP_CUDA_TILES=1: the small product missed the tiles", n);
        cd = mp_backend_cuda_tile_calls(d);
        run_case(d, &panel, &xp, 0, panel.m);
        if (kernel_calls(d, &panel) > 0)   /* an sm_90 device: the panels */
            CHECK_MSG(mp_backend_cuda_tile_calls(d) - cd == kernel_calls(d, &panel),
                      "share %d: the panel product missed the panels", n);
    }
    free_bufs(d, &xd);
    free_bufs(f, &xf);
    free_bufs(d, &xp);
    CHECK_OK(d->sync(d));
    CHECK_OK(f->sync(f));
    mp_backend_close(d);
    mp_backend_close(f);
}
