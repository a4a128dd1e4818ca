/*
 * test_cpu_bf16.c - the cpu backend's bf16 products (cpu:bf16,
 * src/backend/cpu_dnnl.c) at the shapes the op table (test_backend_ops.c)
 * is too small to reach: row blocks and padded tails of the E x h x h
 * products (m past 512 rows), k chunks of dW = X^T dY (k past 1024), every
 * transpose, strides, alpha / beta, bf16 C and the residual-ReLU epilogue
 * (the residual in C, and in a buffer of its own).
 * Each product is checked against a double sum of the same bf16 values and
 * must give the same bytes again, and on 1 and 2 threads.  Then the model
 * level: a cpu:bf16 training run is deterministic, differs from fp32 (so the
 * bf16 path really ran) and stays close to it.
 */
#include "test.h"

#include "backend/cpu_impl.h"
#include "backend/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill_bf16(uint16_t *x, size_t n, mp_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = mp_bf16_round((float)(2 * mp_rng_uniform(r) - 1));
}

/* op(X)[i][j] of a row-major stored matrix with stride ld. */
static double at(const uint16_t *x, int t, int ld, int i, int j)
{
    return mp_bf16_value(t ? x[(size_t)j * ld + i] : x[(size_t)i * ld + j]);
}

typedef struct {
    int ta, tb, m, n, k, pad, c16, relu;
    double alpha, beta;
} shape;

/* Runs one product on b with the thread count nt; returns C's bytes in out
 * (malloc'd; size in *bytes). */
static void *run_one(mp_backend *b, const shape *s, const uint16_t *A, const uint16_t *B,
                     const void *C0, size_t cbytes, int nt)
{
    void *c = malloc(cbytes);
    memcpy(c, C0, cbytes);
    int lda = (s->ta ? s->m : s->k) + s->pad, ldb = (s->tb ? s->k : s->n) + s->pad;
    int ldc = s->n + s->pad;
    mp_threads_set(nt);
    mp_stype cst = s->c16 ? MP_ST_BF16 : MP_ST_ELEM;
    if (s->relu) {
        b->gemm_res_relu(b, s->m, s->n, s->k, A, lda, B, ldb, MP_ST_BF16, c, ldc, c, ldc, cst);
    } else {
        mp_gemm g = { s->ta, s->tb, s->m, s->n, s->k, s->alpha, s->beta, A, B, c,
                      lda, ldb, ldc, MP_ST_BF16, MP_ST_BF16, cst };
        b->gemm(b, 1, &g);
    }
    mp_threads_set(0);
    return c;
}

MP_TEST(cpu_bf16_gemm_blocks)
{
    static const shape shapes[] = {
        { 0, 0, 1300, 300, 300, 0, 0, 0, 1.0, 0.0 },   /* 5 blocks + a 20-row tail */
        { 0, 1, 1300, 300, 300, 0, 0, 0, 1.0, 0.0 },   /* dMsg = dZ W^T */
        { 1, 0, 300, 300, 2600, 0, 0, 0, 1.0, 1.0 },   /* dW += X^T dZ: 2 chunks + tail */
        { 1, 1, 70, 33, 1500, 3, 0, 0, -0.5, 1.0 },
        { 0, 0, 512, 64, 100, 5, 0, 0, 2.0, 0.5 },      /* exactly two blocks */
        { 0, 0, 600, 45, 33, 2, 1, 0, 1.0, 0.0 },       /* bf16 C */
        { 1, 0, 40, 30, 1100, 0, 1, 0, 1.0, 0.0 },      /* bf16 C over k chunks: fallback */
        { 0, 0, 777, 300, 300, 0, 0, 1, 1.0, 1.0 },     /* ReLU(R + A W), fp32 R/C */
        { 0, 0, 777, 300, 300, 0, 1, 1, 1.0, 1.0 },     /* the same, bf16 R/C */
        { 0, 0, 50, 1, 300, 0, 0, 0, 1.0, 0.0 },        /* the head: one column */
    };
    mp_backend *b;
    CHECK_OK(mp_backend_open(&b, "cpu:bf16"));
    CHECK(b->act_st == MP_ST_BF16);
    printf("    bf16 products: %s (%s)\n", mp_cpu_bf16_info(),
           mp_cpu_bf16_native() ? "bf16 instructions" : "fp32 fallback");
    mp_rng r;
    mp_rng_seed(&r, 77, 0);
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
        const shape *s = &shapes[q];
        int ar = s->ta ? s->k : s->m, lda = (s->ta ? s->m : s->k) + s->pad;
        int br = s->tb ? s->n : s->k, ldb = (s->tb ? s->k : s->n) + s->pad;
        int ldc = s->n + s->pad;
        size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)s->m * ldc;
        size_t cs = s->c16 ? 2 : 4;
        uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
        void *C0 = malloc(nc * cs);
        fill_bf16(A, na, &r);
        fill_bf16(B, nb, &r);
        for (size_t i = 0; i < nc; i++) {
            float v = (float)(2 * mp_rng_uniform(&r) - 1);
            if (s->c16)
                ((uint16_t *)C0)[i] = mp_bf16_round(v);
            else
                ((float *)C0)[i] = v;
        }
        void *c1 = run_one(b, s, A, B, C0, nc * cs, 1);
        void *c1b = run_one(b, s, A, B, C0, nc * cs, 1);
        void *c2 = run_one(b, s, A, B, C0, nc * cs, 2);
        int same = !memcmp(c1, c1b, nc * cs), same2 = !memcmp(c1, c2, nc * cs);
        double err = 0, ref = 0;
        int pad_ok = 1;
        for (int i = 0; i < s->m; i++) {
            for (int j = 0; j < ldc; j++) {
                size_t o = (size_t)i * ldc + j;
                double c0 = s->c16 ? mp_bf16_value(((uint16_t *)C0)[o]) : ((float *)C0)[o];
                double got = s->c16 ? mp_bf16_value(((uint16_t *)c1)[o]) : ((float *)c1)[o];
                if (j >= s->n) {   /* the padding columns stay as they were */
                    pad_ok &= memcmp((char *)c1 + o * cs, (char *)C0 + o * cs, cs) == 0;
                    continue;
                }
                double sum = 0;
                for (int l = 0; l < s->k; l++)
                    sum += at(A, s->ta, lda, i, l) * at(B, s->tb, ldb, l, j);
                double want = s->alpha * sum + s->beta * c0;
                if (s->relu)
                    want = want > 0 ? want : 0;
                err += (got - want) * (got - want);
                ref += want * want;
            }
        }
        free(A);
        free(B);
        free(C0);
        free(c1);
        free(c1b);
        free(c2);
        double rel = sqrt(err / (ref > 0 ? ref : 1));
        double tol = s->c16 ? 1e-2 : 1e-5;
        CHECK_MSG(same && same2, "shape %zu: not the same bytes (%s)", q,
                  same ? "1 vs 2 threads" : "two runs");
        CHECK_MSG(pad_ok, "shape %zu: wrote outside the m x n block", q);
        CHECK_MSG(rel <= tol, "shape %zu (ta=%d tb=%d m=%d n=%d k=%d): relative error %.3g > %g",
                  q, s->ta, s->tb, s->m, s->n, s->k, rel, tol);
    }
    mp_backend_close(b);
}

/* gemm_res_relu with the residual in its own buffer (C = ReLU(R + A W), R
 * read by the product's epilogue) gives the bytes of the in-place form
 * (R copied into C, then C += A W through the ReLU), leaves R and C's
 * padding columns alone and writes every element of the m x n block (C
 * poisoned first); 1 and 2 threads, row blocks and a padded tail. */
MP_TEST(cpu_bf16_res_relu_separate)
{
    static const struct { int m, c16, pad_r, pad_c; } shapes[] = {
        { 777, 0, 0, 0 }, { 777, 1, 0, 0 }, { 300, 1, 4, 0 }, { 1300, 0, 0, 3 }, { 21, 1, 2, 5 },
    };
    const int n = 300, k = 300;
    mp_backend *b;
    CHECK_OK(mp_backend_open(&b, "cpu:bf16"));
    mp_rng rng;
    mp_rng_seed(&rng, 78, 0);
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
        int m = shapes[q].m, c16 = shapes[q].c16, ldr = n + shapes[q].pad_r;
        int ldc = n + shapes[q].pad_c;
        size_t cs = c16 ? 2 : 4;
        mp_stype cst = c16 ? MP_ST_BF16 : MP_ST_ELEM;
        uint16_t *A = malloc((size_t)m * k * 2), *W = malloc((size_t)k * n * 2);
        char *R = malloc((size_t)m * ldr * cs), *R0 = malloc((size_t)m * ldr * cs);
        char *inplace = malloc((size_t)m * ldc * cs), *sep = malloc((size_t)m * ldc * cs);
        fill_bf16(A, (size_t)m * k, &rng);
        fill_bf16(W, (size_t)k * n, &rng);
        for (size_t i = 0; i < (size_t)m * ldr; i++) {
            float v = (float)(2 * mp_rng_uniform(&rng) - 1);
            if (c16)
                ((uint16_t *)R)[i] = mp_bf16_round(v);
            else
                ((float *)R)[i] = v;
        }
        memcpy(R0, R, (size_t)m * ldr * cs);
        for (int nt = 1; nt <= 2; nt++) {
            mp_threads_set(nt);
            memset(inplace, 0x7f, (size_t)m * ldc * cs);
            for (int i = 0; i < m; i++)
                memcpy(inplace + (size_t)i * ldc * cs, R + (size_t)i * ldr * cs, (size_t)n * cs);
            b->gemm_res_relu(b, m, n, k, A, k, W, n, MP_ST_BF16, inplace, ldc, inplace, ldc, cst);
            memset(sep, 0x7f, (size_t)m * ldc * cs);   /* poison: NaN-like bytes */
            b->gemm_res_relu(b, m, n, k, A, k, W, n, MP_ST_BF16, R, ldr, sep, ldc, cst);
            mp_threads_set(0);
            CHECK_MSG(!memcmp(inplace, sep, (size_t)m * ldc * cs),
                      "shape %zu, %d threads: residual read by the epilogue differs from the "
                      "copied residual (or touched C's padding)", q, nt);
            CHECK_MSG(!memcmp(R, R0, (size_t)m * ldr * cs), "shape %zu: R was written", q);
        }
        free(A);
        free(W);
        free(R);
        free(R0);
        free(inplace);
        free(sep);
    }
    mp_backend_close(b);
}

MP_TEST(cpu_bf16_precision_names)
{
    mp_backend *b;
    CHECK_OK(mp_backend_open(&b, "cpu:fp32"));
    CHECK(b->act_st == MP_ST_ELEM);
    mp_backend_close(b);
    CHECK(mp_backend_open(&b, "cpu:tf32") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "tf32") != NULL);
}

/* The model level: `molprop train --precision bf16` on the CPU gives the
 * same model file for 1 and 2 threads, not fp32's model, and a model that
 * predicts (with --precision bf16) finite values. */
static char cli_out[65536];

static char *model_bytes(const char *dir, size_t *len)
{
    char p[1300];
    snprintf(p, sizeof p, "%s/model.mpm", dir);
    return mp_test_slurp(p, len);
}

MP_TEST(cpu_bf16_train_deterministic)
{
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    char dir[3][1200];
    static const char *const how[3] = { "--precision bf16 --threads 1",
                                        "--precision bf16 --threads 2", "--threads 2" };
    for (int i = 0; i < 3; i++) {
        snprintf(dir[i], sizeof dir[i], "%s/cpu_bf16_%d", mp_test_tmpdir(), i);
        CHECK_EQ_INT(mp_test_cli(cli_out, sizeof cli_out, "train --data '%s' --epochs 1 "
                                 "--hidden 32 --seed 3 --quiet %s --save-dir '%s'", esol, how[i],
                                 dir[i]), 0);
    }
    size_t la, lb, lc;
    char *a = model_bytes(dir[0], &la), *b = model_bytes(dir[1], &lb), *c = model_bytes(dir[2], &lc);
    int same = a && b && la == lb && !memcmp(a, b, la);
    /* the parameters are the file's tail (header first): compare its last half */
    int differs = a && c && la == lc && memcmp(a + la / 2, c + lc / 2, la - la / 2) != 0;
    mp_free(a);
    mp_free(b);
    mp_free(c);
    CHECK_MSG(same, "cpu bf16: 1 and 2 threads gave different model files");
    CHECK_MSG(differs, "cpu bf16 trained the very parameters fp32 did: bf16 did not run");
    char pred[1300];
    snprintf(pred, sizeof pred, "%s/cpu_bf16_pred.csv", mp_test_tmpdir());
    CHECK_EQ_INT(mp_test_cli(cli_out, sizeof cli_out, "predict --model '%s/model.mpm' --data '%s' "
                             "--out '%s' --precision bf16 --threads 2", dir[0], esol, pred), 0);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    int rows = 0, finite = 1;
    for (char *p = strchr(text, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        char *comma = strchr(p + 1, ',');
        if (!comma)
            break;
        double v = strtod(comma + 1, NULL);
        finite &= isfinite(v);
        rows++;
    }
    mp_free(text);
    CHECK_EQ_INT(rows, 1128);
    CHECK(finite);
}
