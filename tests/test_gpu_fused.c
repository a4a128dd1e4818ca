/*
 * test_gpu_fused.c - the fused message step of an inference forward (ops.h
 * message_update, src/gpu/fused_cuda.cu) against the unfused pair it stands
 * for (message, then gemm_res_relu on cuBLASLt):
 *
 *   - the op itself on random graphs, at every storage the model gives its
 *     operands (H0 / M_t and M_{t-1} in fp32 or bf16), with and without the
 *     ReLU on the input, at widths of one, several and a ragged last block
 *     of output columns; the two differ only in the order the product sums
 *     in, so fp32 outputs agree to ~1e-6 and bf16 outputs to one rounding;
 *   - the shapes it does not take (h not a multiple of 4, fp32 weights)
 *     queue nothing and say so (return 0);
 *   - a model's inference outputs with the op and with it switched off;
 *   - it is off unless MOLPROP_CUDA_MESSAGE_UPDATE=1 (the unfused pair is
 *     the faster since message sums per atom at bf16).
 *
 * GPU only (names gpu_*): skipped without a GPU, failed under
 * MOLPROP_REQUIRE_GPU=1.
 */
#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"
#include "gpu/gpu.h"
#include "models/model.h"
#include "randgraph.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* One width h on gpu:bf16: every storage pair and relu_in, fused vs
 * unfused.  Returns 1, or 0 with err filled. */
static int update_case(mp_backend *b, int h, uint64_t seed, char *err, size_t cap)
{
    mp_rng r;
    mp_rng_seed(&r, seed, 21);
    mp_graphs g;
    rg_opts o = { 1, 40, 0.02, 0.02, 4 };
    if (!rg_make(&g, &r, 150, 133, &o)) {
        snprintf(err, cap, "random graph: out of memory");
        return 0;
    }
    const size_t A = (size_t)g.n_atoms, E = (size_t)g.n_edges, H = (size_t)h, n = E * H;
    void *src = b->alloc(b, E * 4), *is = b->alloc(b, (A + 1) * 4), *ie = b->alloc(b, E * 4);
    void *s = b->alloc(b, A * H * sizeof(float) + 16);
    void *msg = b->alloc(b, n * 2 + 16);
    void *c1 = b->alloc(b, n * sizeof(float) + 16), *c2 = b->alloc(b, n * sizeof(float) + 16);
    int ok = src && is && ie && s && msg && c1 && c2 &&
             b->upload(b, src, g.edge_src, E * 4) == MP_OK &&
             b->upload(b, is, g.in_start, (A + 1) * 4) == MP_OK &&
             b->upload(b, ie, g.in_edge, E * 4) == MP_OK;
    void *w = ok ? mp_test_random_dev(b, &r, MP_ST_BF16, H, h, 1.0 / sqrt((double)h)) : NULL;
    if (!ok || !w)
        snprintf(err, cap, "h %d: set-up: %s", h, mp_error_message());
    ok = ok && w;
    for (int k = 0; ok && k < 8; k++) {
        const mp_stype rc_st = k & 1 ? MP_ST_BF16 : MP_ST_ELEM;
        const mp_stype m_st = k & 2 ? MP_ST_BF16 : MP_ST_ELEM;
        const int relu_in = (k >> 2) & 1;
        void *res = mp_test_random_dev(b, &r, rc_st, E, h, 1.0), *m = mp_test_random_dev(b, &r, m_st, E, h, 1.0);
        if (!res || !m) {
            snprintf(err, cap, "h %d: set-up: %s", h, mp_error_message());
            ok = 0;
        }
        if (ok) {
            b->message(b, msg, MP_ST_BF16, s, is, ie, src, m, m_st, relu_in, (int32_t)A,
                       (int32_t)E, h);
            b->gemm_res_relu(b, (int)E, h, h, msg, h, w, h, MP_ST_BF16, res, h, c1, h, rc_st);
            if (!b->message_update(b, c2, res, rc_st, s, is, ie, src, m, m_st, relu_in, w,
                                   MP_ST_BF16, (int32_t)A, (int32_t)E, h)) {
                snprintf(err, cap, "h %d: message_update declined a shape it fuses", h);
                ok = 0;
            }
        }
        float *x = ok ? mp_test_floats_of(b, c2, rc_st, E, h) : NULL;
        float *y = ok ? mp_test_floats_of(b, c1, rc_st, E, h) : NULL;
        if (ok && (!x || !y)) {
            snprintf(err, cap, "h %d: download: %s", h, mp_error_message());
            ok = 0;
        }
        /* fp32 out: the order of the sums only; bf16 out: one rounding */
        char why[256];
        if (ok && !mp_test_close_all(x, y, n, rc_st == MP_ST_BF16 ? 1.0 / 128 : 1e-4,
                             rc_st == MP_ST_BF16 ? 1e-3 : 1e-5, why, sizeof why)) {
            snprintf(err, cap, "h %d, out %s, M %s, relu_in %d (%zu edges): %s", h,
                     rc_st ? "bf16" : "fp32", m_st ? "bf16" : "fp32", relu_in, E, why);
            ok = 0;
        }
        mp_free(x);
        mp_free(y);
        if (res)
            b->free(b, res);
        if (m)
            b->free(b, m);
    }
    void *bufs[] = { src, is, ie, s, msg, c1, c2, w };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            b->free(b, bufs[i]);
    mp_graphs_free(&g);
    return ok;
}

/* Opens gpu:NAME with message_update switched on (MOLPROP_CUDA_MESSAGE_UPDATE=1). */
static mp_status open_fused(mp_backend **b, const char *name)
{
    char *old = mp_test_env_set("MOLPROP_CUDA_MESSAGE_UPDATE", "1");
    mp_status st = mp_backend_open(b, name);
    mp_test_env_restore("MOLPROP_CUDA_MESSAGE_UPDATE", old);
    return st;
}

/* The default leaves the inference step to message + gemm_res_relu. */
MP_TEST(gpu_fused_message_update_off_by_default)
{
    MP_NEED_GPU();
    mp_backend *b = NULL, *f = NULL;
    char *old = mp_test_env_set("MOLPROP_CUDA_MESSAGE_UPDATE", NULL);
    mp_status st = mp_backend_open(&b, "gpu:bf16");
    mp_test_env_restore("MOLPROP_CUDA_MESSAGE_UPDATE", old);
    CHECK_OK(st);
    CHECK(b->message_update == NULL);
    CHECK_OK(open_fused(&f, "gpu:bf16"));
    CHECK(f->message_update != NULL);
    mp_backend_close(b);
    mp_backend_close(f);
}

MP_TEST(gpu_fused_message_update_matches_unfused)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(open_fused(&b, "gpu:bf16"));
    CHECK(b->message_update != NULL);
    /* one column block, a ragged one, several, a ragged K stage, small */
    static const int hs[] = { 300, 320, 1200, 2400, 100, 8 };
    char err[512] = "";
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof hs / sizeof hs[0]; i++)
        ok = update_case(b, hs[i], 40 + i, err, sizeof err);
    mp_backend_close(b);
    CHECK_MSG(ok, "%s", err);
}

/* What the op does not take it leaves to the caller, queuing nothing. */
MP_TEST(gpu_fused_message_update_declines)
{
    MP_NEED_GPU();
    mp_backend *b = NULL, *f = NULL;
    CHECK_OK(open_fused(&b, "gpu:bf16"));
    CHECK_OK(open_fused(&f, "gpu:fp32"));
    void *p = b->alloc(b, 1 << 16), *q = f->alloc(f, 1 << 16);
    int32_t zero[2] = { 0, 0 };
    CHECK(p && q);
    CHECK_OK(b->upload(b, p, zero, sizeof zero));
    /* h = 6: not a multiple of 4 */
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_BF16, 0, p,
                                   MP_ST_BF16, 1, 2, 6), 0);
    /* fp32 weights (gpu:fp32's model) */
    if (f->message_update)
        CHECK_EQ_INT(f->message_update(f, q, q, MP_ST_ELEM, q, q, q, q, q, MP_ST_ELEM, 0, q,
                                       MP_ST_ELEM, 1, 2, 8), 0);
    /* plain_ops (the unfused kernels) has none */
    mp_backend plain = *b;
    mp_backend_cuda_plain_ops(&plain);
    CHECK(plain.message_update == NULL);
    b->free(b, p);
    f->free(f, q);
    CHECK_OK(b->sync(b));
    mp_backend_close(b);
    mp_backend_close(f);
}

/* A bf16 model's predictions with the fused step and without it. */
MP_TEST(gpu_fused_model_inference)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(open_fused(&b, "gpu:bf16"));
    CHECK(b->message_update != NULL);
    static const int hs[] = { 300, 1200 }, depths[] = { 3, 6 };
    for (int k = 0; k < 2; k++) {
        mp_model_config cfg = mp_model_config_default();
        cfg.n_tasks = 2;
        cfg.hidden = hs[k];
        cfg.depth = depths[k];
        mp_rng r;
        mp_rng_seed(&r, 7 + k, 3);
        mp_graphs g;
        rg_opts o = { 1, 40, 0.05, 0.05, 4 };
        CHECK(rg_make(&g, &r, 300, cfg.atom_fdim, &o));
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, &cfg, b, 5));
        const size_t nt = 300 * 2;
        float *fused = mp_malloc(nt * sizeof(float)), *plain = mp_malloc(nt * sizeof(float));
        CHECK(fused && plain);
        CHECK_OK(mp_model_forward(m, &g, NULL, 300, 0, fused));
        int (*op)(mp_backend *, void *, const void *, mp_stype, void *, const int32_t *,
                  const int32_t *, const int32_t *, const void *, mp_stype, int, const void *,
                  mp_stype, int32_t, int32_t, int) = b->message_update;
        b->message_update = NULL;
        CHECK_OK(mp_model_forward(m, &g, NULL, 300, 0, plain));
        b->message_update = op;
        double d2 = 0, r2 = 0;
        int differ = 0;
        for (size_t i = 0; i < nt; i++) {
            d2 += ((double)fused[i] - plain[i]) * ((double)fused[i] - plain[i]);
            r2 += (double)plain[i] * plain[i];
            differ += fused[i] != plain[i];
        }
        double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
        if (mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
            printf("    hidden %d depth %d: fused vs unfused rel %.3g, %d of %zu differ\n",
                   hs[k], depths[k], rel, differ, nt);
        CHECK_MSG(rel <= 2e-2, "hidden %d depth %d: fused vs unfused predictions: relative "
                  "difference %.3g > 2e-2", hs[k], depths[k], rel);
        /* the same bits run to run */
        CHECK_OK(mp_model_forward(m, &g, NULL, 300, 0, plain));
        CHECK_MSG(memcmp(fused, plain, nt * sizeof(float)) == 0,
                  "hidden %d: the fused forward is not deterministic", hs[k]);
        mp_free(fused);
        mp_free(plain);
        mp_model_free(m);
        mp_graphs_free(&g);
    }
    mp_backend_close(b);
}
