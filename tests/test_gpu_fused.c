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
 *   - it is off unless MOLPROP_CUDA_MESSAGE_UPDATE=1 (this form) or 2 (the
 *     panels' form): the unfused pair is the faster since message sums per
 *     atom at bf16;
 *   - the panels' form (MOLPROP_CUDA_MESSAGE_UPDATE=2) against message followed by
 *     gemm_res_relu on the panels, bit for bit: on graphs with atoms of up to
 *     150 bonds (runs of incoming edges across two panel boundaries), atoms
 *     without bonds, at widths of 6 to 10 stages, with and without the ReLU
 *     on the input; the shapes it leaves alone; a model's predictions with it
 *     and without it, the same bytes.
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
                                   MP_ST_BF16, (int32_t)A, (int32_t)E, h, NULL)) {
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

/* Opens gpu:NAME with MOLPROP_CUDA_MESSAGE_UPDATE set to v (NULL: unset). */
static mp_status open_with(mp_backend **b, const char *name, const char *v)
{
    char *old = mp_test_env_set("MOLPROP_CUDA_MESSAGE_UPDATE", v);
    mp_status st = mp_backend_open(b, name);
    mp_test_env_restore("MOLPROP_CUDA_MESSAGE_UPDATE", old);
    return st;
}

/* Off by default and under =0; =2 the panels' form; =1 the mma.sync form
 * (another function). */
MP_TEST(gpu_fused_message_update_off_by_default)
{
    MP_NEED_GPU();
    mp_backend *b = NULL, *z = NULL, *f = NULL;
    CHECK_OK(open_with(&b, "gpu:bf16", "2"));
    CHECK_OK(open_with(&z, "gpu:bf16", "0"));
    CHECK_OK(open_fused(&f, "gpu:bf16"));
    CHECK(b->message_update != NULL);
    CHECK(z->message_update == NULL);
    CHECK(f->message_update != NULL && f->message_update != b->message_update);
    mp_backend_close(z);
    CHECK_OK(open_with(&z, "gpu:bf16", NULL));
    CHECK(z->message_update == NULL);
    mp_backend_close(b);
    mp_backend_close(z);
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
                                   MP_ST_BF16, 1, 2, 6, NULL), 0);
    /* a message to write out (a training forward's): not this form's */
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_BF16, 0, p,
                                   MP_ST_BF16, 1, 2, 8, p), 0);
    /* fp32 weights (gpu:fp32's model) */
    if (f->message_update)
        CHECK_EQ_INT(f->message_update(f, q, q, MP_ST_ELEM, q, q, q, q, q, MP_ST_ELEM, 0, q,
                                       MP_ST_ELEM, 1, 2, 8, NULL), 0);
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
                  mp_stype, int32_t, int32_t, int, void *) = b->message_update;
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

/* ---- the panels' form ------------------------------------------------ */

/* A graph of n_mols molecules as the op needs it (edge_src, in_start,
 * in_edge; edges 2k and 2k + 1 the two directions of bond k): mostly trees
 * of 2-40 atoms, some atoms alone, and one molecule in 25 a star whose
 * centre has 10-150 bonds. */
typedef struct {
    int32_t n_atoms, n_edges;
    int32_t *src, *in_start, *in_edge;
} pm_graph;

static void pm_free(pm_graph *g)
{
    mp_free(g->src);
    mp_free(g->in_start);
    mp_free(g->in_edge);
}

static int pm_make(pm_graph *g, mp_rng *r, int n_mols)
{
    size_t cap = 64, nb = 0;
    int32_t *ba = mp_malloc(cap * 4), *bb = mp_malloc(cap * 4);
    int32_t A = 0;
    for (int i = 0; ba && bb && i < n_mols; i++) {
        const int kind = (int)mp_rng_below(r, 25);
        const int na = kind == 0 ? 11 + (int)mp_rng_below(r, 140)
                       : kind == 1 ? 1 : 2 + (int)mp_rng_below(r, 39);
        for (int a = 1; a < na; a++) {
            if (nb == cap) {
                cap *= 2;
                int32_t *x = mp_realloc(ba, cap * 4), *y = x ? mp_realloc(bb, cap * 4) : NULL;
                if (x)
                    ba = x;
                if (!y) {
                    mp_free(ba);
                    mp_free(bb);
                    return 0;
                }
                bb = y;
            }
            ba[nb] = A + (kind == 0 ? 0 : (int32_t)mp_rng_below(r, (uint64_t)a));
            bb[nb++] = A + a;
        }
        A += na;
    }
    g->n_atoms = A;
    g->n_edges = (int32_t)(2 * nb);
    g->src = mp_malloc((size_t)g->n_edges * 4);
    g->in_start = mp_calloc((size_t)A + 1, 4);
    g->in_edge = mp_malloc((size_t)g->n_edges * 4);
    int32_t *fill = mp_calloc((size_t)A + 1, 4);
    int ok = ba && bb && g->src && g->in_start && g->in_edge && fill;
    for (size_t k = 0; ok && k < nb; k++) {
        g->src[2 * k] = ba[k];
        g->src[2 * k + 1] = bb[k];
        g->in_start[bb[k] + 1]++;   /* edge 2k enters bb, 2k + 1 enters ba */
        g->in_start[ba[k] + 1]++;
    }
    for (int32_t v = 0; ok && v < A; v++)
        g->in_start[v + 1] += g->in_start[v];
    for (int32_t e = 0; ok && e < g->n_edges; e++) {   /* ascending per atom */
        const int32_t dst = g->src[e ^ 1];
        g->in_edge[g->in_start[dst] + fill[dst]++] = e;
    }
    mp_free(fill);
    mp_free(ba);
    mp_free(bb);
    if (!ok)
        pm_free(g);
    return ok;
}

/* The first element where x and y (n floats) differ in any bit, or n. */
static size_t first_diff(const float *x, const float *y, size_t n)
{
    size_t i = 0;
    while (i < n && !memcmp(&x[i], &y[i], sizeof(float)))
        i++;
    return i;
}

/* One width on gpu:bf16 (the panels' form): both relu_in, without and with the
 * message written out (a training forward's), panels vs message +
 * gemm_res_relu, bit for bit, the message too.  Returns 1, or 0 with err
 * filled. */
static int panel_case(mp_backend *b, const pm_graph *g, int h, mp_rng *r, char *err, size_t cap)
{
    const size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges, H = (size_t)h, n = E * H;
    void *src = b->alloc(b, E * 4), *is = b->alloc(b, (A + 1) * 4), *ie = b->alloc(b, E * 4);
    void *s = b->alloc(b, A * H * sizeof(float) + 16), *msg = b->alloc(b, n * 2 + 16);
    void *c1 = b->alloc(b, n * 2 + 16), *c2 = b->alloc(b, n * 2 + 16);
    void *msg2 = b->alloc(b, n * 2 + 16);
    int ok = src && is && ie && s && msg && c1 && c2 && msg2 &&
             b->upload(b, src, g->src, E * 4) == MP_OK &&
             b->upload(b, is, g->in_start, (A + 1) * 4) == MP_OK &&
             b->upload(b, ie, g->in_edge, E * 4) == MP_OK;
    void *w = ok ? mp_test_random_dev(b, r, MP_ST_BF16, H, h, 1.0 / sqrt((double)h)) : NULL;
    void *res = ok ? mp_test_random_dev(b, r, MP_ST_BF16, E, h, 1.0) : NULL;
    void *m = ok ? mp_test_random_dev(b, r, MP_ST_BF16, E, h, 1.0) : NULL;
    if (!ok || !w || !res || !m) {
        snprintf(err, cap, "h %d: set-up: %s", h, mp_error_message());
        ok = 0;
    }
    for (int k = 0; ok && k < 4; k++) {
        const int relu_in = k & 1, out_msg = k >> 1;
        b->message(b, msg, MP_ST_BF16, s, is, ie, src, m, MP_ST_BF16, relu_in, (int32_t)A,
                   (int32_t)E, h);
        b->gemm_res_relu(b, (int)E, h, h, msg, h, w, h, MP_ST_BF16, res, h, c1, h, MP_ST_BF16);
        if (!b->message_update(b, c2, res, MP_ST_BF16, s, is, ie, src, m, MP_ST_BF16, relu_in,
                               w, MP_ST_BF16, (int32_t)A, (int32_t)E, h,
                               out_msg ? msg2 : NULL)) {
            snprintf(err, cap, "h %d: the panels declined %zu edges", h, E);
            ok = 0;
            break;
        }
        float *x = mp_test_floats_of(b, c2, MP_ST_BF16, E, h);
        float *y = mp_test_floats_of(b, c1, MP_ST_BF16, E, h);
        float *xm = out_msg ? mp_test_floats_of(b, msg2, MP_ST_BF16, E, h) : NULL;
        float *ym = out_msg ? mp_test_floats_of(b, msg, MP_ST_BF16, E, h) : NULL;
        if (!x || !y || (out_msg && (!xm || !ym))) {
            snprintf(err, cap, "h %d: download: %s", h, mp_error_message());
            ok = 0;
        }
        size_t i = ok ? first_diff(x, y, n) : n;
        if (i < n) {
            snprintf(err, cap, "h %d, relu_in %d, message out %d (%zu edges): edge %zu column "
                     "%zu: panels %.9g, message + gemm_res_relu %.9g", h, relu_in, out_msg, E,
                     i / H, i % H, x[i], y[i]);
            ok = 0;
        }
        i = ok && out_msg ? first_diff(xm, ym, n) : n;
        if (i < n) {
            snprintf(err, cap, "h %d, relu_in %d (%zu edges): the message, edge %zu column %zu: "
                     "panels %.9g, message %.9g", h, relu_in, E, i / H, i % H, xm[i], ym[i]);
            ok = 0;
        }
        mp_free(x);
        mp_free(y);
        mp_free(xm);
        mp_free(ym);
    }
    void *bufs[] = { src, is, ie, s, msg, c1, c2, w, res, m, msg2 };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            b->free(b, bufs[i]);
    return ok;
}

MP_TEST(gpu_fused_panels_equal_message_and_product)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(open_with(&b, "gpu:bf16", "2"));
    mp_rng r;
    mp_rng_seed(&r, 11, 5);
    pm_graph g;
    CHECK(pm_make(&g, &r, 2500));
    CHECK_MSG(g.n_edges >= 40000, "the graph has %d edges, fewer than the panels take",
              g.n_edges);
    /* 10 stages (Chemprop's 300) and 304 (the widest), 7, 8, 6 */
    static const int hs[] = { 300, 304, 200, 256, 164 };
    char err[512] = "";
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof hs / sizeof hs[0]; i++)
        ok = panel_case(b, &g, hs[i], &r, err, sizeof err);
    pm_free(&g);
    mp_backend_close(b);
    CHECK_MSG(ok, "%s", err);
}

/* What the panels do not take they leave to message + gemm_res_relu. */
MP_TEST(gpu_fused_panels_decline)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(open_with(&b, "gpu:bf16", "2"));
    void *p = b->alloc(b, 1 << 16);
    CHECK(p);
    /* fewer than 40,000 edges; h of 5 stages (160), past 304, fp32 M */
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_BF16, 0, p,
                                   MP_ST_BF16, 20000, 39999, 300, NULL), 0);
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_BF16, 0, p,
                                   MP_ST_BF16, 30000, 60000, 160, NULL), 0);
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_BF16, 0, p,
                                   MP_ST_BF16, 30000, 60000, 308, NULL), 0);
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_ELEM, 0, p,
                                   MP_ST_BF16, 30000, 60000, 300, NULL), 0);
    /* a scratch too small for the positions' runs and T (n_atoms x h floats) */
    CHECK_EQ_INT(b->message_update(b, p, p, MP_ST_BF16, p, p, p, p, p, MP_ST_BF16, 0, p,
                                   MP_ST_BF16, 10, 60000, 300, NULL), 0);
    b->free(b, p);
    CHECK_OK(b->sync(b));
    mp_backend_close(b);
}

/* gpu:bf16 with the panels' form, a default bf16 model of 2 tasks on it,
 * and n random molecules (past 40,000 edges). */
typedef struct {
    mp_backend     *b;
    mp_model       *m;
    mp_model_config cfg;
    mp_graphs       g;
    mp_rng          r;
} panel_fix;

/* 1, or 0 with a message. */
static int panel_model(panel_fix *f, uint64_t seed, int32_t n)
{
    memset(f, 0, sizeof *f);
    f->cfg = mp_model_config_default();
    f->cfg.n_tasks = 2;
    mp_rng_seed(&f->r, seed, 3);
    rg_opts o = { 1, 60, 0.02, 0.02, 4 };
    if (open_with(&f->b, "gpu:bf16", "2") != MP_OK ||
        !rg_make(&f->g, &f->r, n, f->cfg.atom_fdim, &o)) {
        printf("    set-up: %s\n", mp_error_message());
        return 0;
    }
    if (f->g.n_edges < 40000) {
        printf("    %d edges, fewer than the panels take\n", f->g.n_edges);
        return 0;
    }
    if (mp_model_create(&f->m, &f->cfg, f->b, 5) != MP_OK) {
        printf("    model: %s\n", mp_error_message());
        return 0;
    }
    return 1;
}

/* A bf16 model's predictions, batches past 40,000 edges: the same bytes
 * with the panels' step and without it. */
MP_TEST(gpu_fused_panels_model_same_bytes)
{
    MP_NEED_GPU();
    panel_fix f;
    const int32_t nm = 1500;
    CHECK(panel_model(&f, 17, nm));
    mp_backend *b = f.b;
    mp_model *m = f.m;
    const size_t nt = (size_t)nm * 2;
    float *fused = mp_malloc(nt * sizeof(float)), *plain = mp_malloc(nt * sizeof(float));
    CHECK(fused && plain);
    const long calls0 = mp_backend_cuda_panel_message_calls(b);
    CHECK_OK(mp_model_forward(m, &f.g, NULL, nm, 0, fused));
    CHECK_MSG(mp_backend_cuda_panel_message_calls(b) == calls0 + f.cfg.depth - 1,
              "the panels ran %ld message steps, not %d",
              mp_backend_cuda_panel_message_calls(b) - calls0,
              f.cfg.depth - 1);
    int (*op)(mp_backend *, void *, const void *, mp_stype, void *, const int32_t *,
              const int32_t *, const int32_t *, const void *, mp_stype, int, const void *,
              mp_stype, int32_t, int32_t, int, void *) = b->message_update;
    b->message_update = NULL;
    CHECK_OK(mp_model_forward(m, &f.g, NULL, nm, 0, plain));
    b->message_update = op;
    const size_t i = first_diff(fused, plain, nt);
    CHECK_MSG(i == nt, "molecule %zu task %zu: %.9g with the panels, %.9g without", i / 2,
              i % 2, i < nt ? fused[i] : 0.0, i < nt ? plain[i] : 0.0);
    mp_free(fused);
    mp_free(plain);
    mp_model_free(m);
    mp_graphs_free(&f.g);
    mp_backend_close(b);
}

/* A training step of a bf16 model on a batch past 40,000 edges: the same
 * loss and gradients, bit for bit, with the panels' step (the message
 * written out for the backward) and without it. */
MP_TEST(gpu_fused_panels_training_same_gradients)
{
    MP_NEED_GPU();
    panel_fix f;
    const int32_t nm = 1500;
    CHECK(panel_model(&f, 19, nm));
    mp_backend *b = f.b;
    mp_model *m = f.m;
    float *y = mp_malloc(sizeof(float) * (size_t)nm * 2);
    CHECK(y);
    for (int32_t i = 0; i < nm * 2; i++)
        y[i] = (float)mp_rng_uniform(&f.r) - 0.5f;
    const size_t np = mp_model_n_params(m);
    float *g1 = mp_malloc(np * sizeof(float)), *g2 = mp_malloc(np * sizeof(float));
    CHECK(g1 && g2);
    double l1 = 0, l2 = 0;
    int (*op)(mp_backend *, void *, const void *, mp_stype, void *, const int32_t *,
              const int32_t *, const int32_t *, const void *, mp_stype, int, const void *,
              mp_stype, int32_t, int32_t, int, void *) = b->message_update;
    for (int k = 0; k < 2; k++) {
        b->message_update = k == 0 ? op : NULL;
        const long calls0 = mp_backend_cuda_panel_message_calls(b);
        mp_model_zero_grad(m);
        CHECK_OK(mp_model_forward(m, &f.g, NULL, nm, 1, NULL));
        CHECK_OK(mp_model_loss_backward(m, y, k == 0 ? &l1 : &l2));
        CHECK_OK(mp_model_get_grads(m, k == 0 ? g1 : g2));
        CHECK_EQ_INT(mp_backend_cuda_panel_message_calls(b) - calls0,
                     k == 0 ? f.cfg.depth - 1 : 0);
    }
    b->message_update = op;
    CHECK_MSG(l1 == l2, "loss %.17g with the panels, %.17g without", l1, l2);
    const size_t i = first_diff(g1, g2, np);
    CHECK_MSG(i == np, "gradient %zu of %zu: %.9g with the panels, %.9g without", i, np,
              i < np ? g1[i] : 0.0, i < np ? g2[i] : 0.0);
    mp_free(g1);
    mp_free(g2);
    mp_free(y);
    mp_model_free(m);
    mp_graphs_free(&f.g);
    mp_backend_close(b);
}
