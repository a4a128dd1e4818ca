/*
 * test_backend_ops_train.c - the op table (test_backend_ops.c has the
 * method and backends_ops_harness.h the harness) for the ops of the
 * training options (issue 11): the activations and their backward, add,
 * edge_mean, neighbor_sum, attentive pooling and its backward, batch norm
 * and its backward, clip_norm, and every loss kind of the loss op with
 * sample weights, task weights and inequality flags.  Each on cpu, ref and
 * ref:bf16 here, and on gpu:fp32 / tf32 / bf16 under `make test-gpu`,
 * against ref64 given the very same operands.
 */
#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"
#include "models/heads.h"
#include "randgraph.h"

#include "backend_ops_harness.h"

/* Losses and batch statistics sum many terms: a little looser than one
 * fp32 operation. */
static const double TOL_SUM = 1e-4;

/* ===================================================================== */
/* Activations, add, clip_norm                                            */
/* ===================================================================== */

typedef struct {
    size_t n;
    int kind, acc;
    double max_norm;
    tens *x, *y, *dy, *dx, *a, *da, *norm;
} act_arg;

static void op_act(mp_backend *b, int s, const void *arg)
{
    const act_arg *q = arg;
    b->act(b, S(q->y), S(q->x), q->n, (mp_act_kind)q->kind, q->a ? S(q->a) : NULL);
}

static void op_act_backward(mp_backend *b, int s, const void *arg)
{
    const act_arg *q = arg;
    b->act_backward(b, S(q->dx), q->da ? S(q->da) : NULL, S(q->x), S(q->dy), q->n,
                    (mp_act_kind)q->kind, q->a ? S(q->a) : NULL, q->acc);
}

static void op_add(mp_backend *b, int s, const void *arg)
{
    const act_arg *q = arg;
    b->add(b, S(q->y), S(q->x), q->n);
}

static void op_clip(mp_backend *b, int s, const void *arg)
{
    const act_arg *q = arg;
    b->clip_norm(b, S(q->y), q->n, q->max_norm, S(q->norm));
}

static void case_act(bo *x)
{
    char what[160];
    size_t ns[] = { 0, 1, 7, 1000, 100003 };
    int nn = x->spec->big ? 5 : 4;
    for (int i = 0; i < nn; i++)
        for (int kind = 0; kind < MP_ACT_COUNT; kind++)
            for (int acc = 0; acc < 2; acc++) {
                act_arg q = { .n = ns[i], .kind = kind, .acc = acc };
                q.x = t_rand(x, "x", MP_ST_ELEM, q.n, -3, 3);
                q.a = kind == MP_ACT_PRELU ? t_rand(x, "a", MP_ST_ELEM, 1, 0.05, 0.5) : NULL;
                q.y = t_out(x, "y", MP_ST_ELEM, q.n, TOL_ELEM);
                q.dy = t_rand(x, "dy", MP_ST_ELEM, q.n, -1, 1);
                q.dx = acc ? t_acc(t_rand(x, "dx", MP_ST_ELEM, q.n, -1, 1), TOL_ELEM)
                           : t_out(x, "dx", MP_ST_ELEM, q.n, TOL_ELEM);
                q.da = kind == MP_ACT_PRELU ? t_acc(t_rand(x, "da", MP_ST_ELEM, 1, 0.5, 1),
                                                    TOL_SUM) : NULL;
                snprintf(what, sizeof what, "act(n=%zu %d)", q.n, kind);
                tens *o1[1] = { q.y };
                if (!acc)
                    bo_run(x, what, op_act, &q, o1, 1);
                snprintf(what, sizeof what, "act_backward(n=%zu %d acc=%d)", q.n, kind, acc);
                tens *o2[2] = { q.dx, q.da };
                bo_run(x, what, op_act_backward, &q, o2, q.da ? 2 : 1);
                bo_reset(x);
            }
    for (int i = 0; i < nn; i++) {
        act_arg q = { .n = ns[i] };
        q.x = t_rand(x, "x", MP_ST_ELEM, q.n, -1, 1);
        q.y = t_acc(t_rand(x, "y", MP_ST_ELEM, q.n, 2, 3), TOL_ELEM);
        snprintf(what, sizeof what, "add(n=%zu)", q.n);
        tens *o[1] = { q.y };
        bo_run(x, what, op_add, &q, o, 1);
        bo_reset(x);
        /* a norm above the bound (scaled) and below it (unchanged) */
        for (int big = 0; big < 2; big++) {
            act_arg c = { .n = ns[i], .max_norm = big ? 1e6 : 0.5 };
            c.y = t_acc(t_rand(x, "g", MP_ST_ELEM, c.n, -1, 1), TOL_SUM);
            c.norm = t_out(x, "norm", MP_ST_ELEM, 1, TOL_SUM);
            snprintf(what, sizeof what, "clip_norm(n=%zu max=%g)", c.n, c.max_norm);
            tens *oc[2] = { c.y, c.norm };
            bo_run(x, what, op_clip, &c, oc, 2);
            bo_reset(x);
        }
    }
}

/* ===================================================================== */
/* Graph-shaped layers                                                    */
/* ===================================================================== */

typedef struct {
    mp_graphs g;
    int h, ldo;
    tens *in_start, *in_edge, *src, *mol_atom;
    tens *x, *out, *score, *alpha, *w, *dout, *dx, *dscore;
} lay_arg;

static void op_edge_mean(mp_backend *b, int s, const void *arg)
{
    const lay_arg *q = arg;
    b->edge_mean(b, S(q->out), S(q->x), q->g.n_edges, q->h);
}

static void op_neighbor_sum(mp_backend *b, int s, const void *arg)
{
    const lay_arg *q = arg;
    b->neighbor_sum(b, S(q->out), S(q->in_start), S(q->in_edge), S(q->src), S(q->x),
                    q->g.n_atoms, q->h);
}

static void op_attn_pool(mp_backend *b, int s, const void *arg)
{
    const lay_arg *q = arg;
    b->attn_pool(b, S(q->out), q->ldo, S(q->alpha), S(q->mol_atom), S(q->x), S(q->score),
                 q->g.n_mols, q->h);
}

static void op_attn_pool_backward(mp_backend *b, int s, const void *arg)
{
    const lay_arg *q = arg;
    b->attn_pool_backward(b, S(q->dx), S(q->dscore), S(q->mol_atom), S(q->x), S(q->alpha),
                          S(q->w), S(q->dout), q->ldo, q->g.n_mols, q->h);
}

static void case_layers(bo *x)
{
    char what[160];
    static const int32_t mols[] = { 1, 5, 40, 600 };
    static const int hs[] = { 1, 7, 33 };
    int nm = x->spec->big ? 4 : 3;
    for (int mi = 0; mi < nm; mi++)
        for (int hi = 0; hi < 3; hi++) {
            lay_arg q;
            memset(&q, 0, sizeof q);
            rg_opts o = { 1, 9, 0.2, 0.2, 2 };
            if (!rg_make(&q.g, &x->rng, mols[mi], 8, &o)) {
                bo_fail(x, "random graph: out of memory");
                return;
            }
            q.h = hs[hi];
            q.ldo = q.h + 3;
            const size_t A = (size_t)q.g.n_atoms, E = (size_t)q.g.n_edges, h = (size_t)q.h;
            const size_t M = (size_t)q.g.n_mols;
            q.in_start = t_raw(x, q.g.in_start, (A + 1) * sizeof(int32_t));
            q.in_edge = t_raw(x, q.g.in_edge, E * sizeof(int32_t));
            q.src = t_raw(x, q.g.edge_src, E * sizeof(int32_t));
            q.mol_atom = t_raw(x, q.g.mol_atom, (M + 1) * sizeof(int32_t));

            q.x = t_rand(x, "m", MP_ST_ELEM, E * h, -1, 1);
            q.out = t_out(x, "out", MP_ST_ELEM, E * h, TOL_ELEM);
            snprintf(what, sizeof what, "edge_mean(E=%zu h=%zu)", E, h);
            tens *o1[1] = { q.out };
            bo_run(x, what, op_edge_mean, &q, o1, 1);
            bo_reset(x);
            q.in_start = t_raw(x, q.g.in_start, (A + 1) * sizeof(int32_t));
            q.in_edge = t_raw(x, q.g.in_edge, E * sizeof(int32_t));
            q.src = t_raw(x, q.g.edge_src, E * sizeof(int32_t));
            q.mol_atom = t_raw(x, q.g.mol_atom, (M + 1) * sizeof(int32_t));

            q.x = t_rand(x, "x", MP_ST_ELEM, A * h, -1, 1);
            q.out = t_out(x, "out", MP_ST_ELEM, A * h, TOL_ELEM);
            snprintf(what, sizeof what, "neighbor_sum(A=%zu h=%zu)", A, h);
            o1[0] = q.out;
            bo_run(x, what, op_neighbor_sum, &q, o1, 1);

            q.score = t_rand(x, "score", MP_ST_ELEM, A, -3, 3);
            q.alpha = t_out(x, "alpha", MP_ST_ELEM, A, TOL_ELEM);
            q.out = t_out(x, "pooled", MP_ST_ELEM, M * (size_t)q.ldo, TOL_ELEM);
            /* (the row stride's padding is not written: NaN on both sides) */
            snprintf(what, sizeof what, "attn_pool(M=%zu A=%zu h=%zu)", M, A, h);
            tens *o2[2] = { q.alpha, q.out };
            bo_run(x, what, op_attn_pool, &q, o2, 2);

            q.alpha = t_rand(x, "alpha", MP_ST_ELEM, A, 0.01, 1);
            q.w = t_rand(x, "w", MP_ST_ELEM, h, -1, 1);
            q.dout = t_rand(x, "dout", MP_ST_ELEM, M * (size_t)q.ldo, -1, 1);
            q.dx = t_out(x, "dx", MP_ST_ELEM, A * h, TOL_ELEM);
            q.dscore = t_out(x, "dscore", MP_ST_ELEM, A, TOL_SUM);
            snprintf(what, sizeof what, "attn_pool_backward(M=%zu A=%zu h=%zu)", M, A, h);
            tens *o3[2] = { q.dx, q.dscore };
            bo_run(x, what, op_attn_pool_backward, &q, o3, 2);
            bo_reset(x);
            mp_graphs_free(&q.g);
        }
}

/* ===================================================================== */
/* Batch norm                                                             */
/* ===================================================================== */

typedef struct {
    int32_t n;
    int h, ld, training;
    tens *x, *y, *save, *gamma, *beta, *running, *dy, *dx, *dgamma, *dbeta;
} bn_arg;

static void op_bn(mp_backend *b, int s, const void *arg)
{
    const bn_arg *q = arg;
    b->batch_norm(b, S(q->y), q->ld, S(q->save), S(q->x), q->ld, S(q->gamma), S(q->beta),
                  S(q->running), q->n, q->h, q->training, 0.1, 1e-5);
}

static void op_bn_backward(mp_backend *b, int s, const void *arg)
{
    const bn_arg *q = arg;
    b->batch_norm_backward(b, S(q->dx), q->ld, S(q->dgamma), S(q->dbeta), S(q->dy), q->ld,
                           S(q->x), q->ld, S(q->save), S(q->gamma), q->n, q->h);
}

static void case_bn(bo *x)
{
    char what[160];
    static const int32_t ns[] = { 2, 3, 50, 4000 };
    static const int hs[] = { 1, 9, 300 };
    int nn = x->spec->big ? 4 : 3;
    for (int i = 0; i < nn; i++)
        for (int hi = 0; hi < 3; hi++)
            for (int tr = 0; tr < 2; tr++) {
                bn_arg q = { .n = ns[i], .h = hs[hi], .ld = hs[hi], .training = tr };
                size_t N = (size_t)q.n * (size_t)q.h, H = (size_t)q.h;
                q.x = t_rand(x, "x", MP_ST_ELEM, N, -2, 3);
                q.y = t_out(x, "y", MP_ST_ELEM, N, TOL_SUM);
                q.save = tr ? t_out(x, "save", MP_ST_ELEM, 2 * H, TOL_SUM)
                            : t_rand(x, "save", MP_ST_ELEM, 2 * H, 0.5, 1);
                q.gamma = t_rand(x, "gamma", MP_ST_ELEM, H, 0.5, 1.5);
                q.beta = t_rand(x, "beta", MP_ST_ELEM, H, -1, 1);
                q.running = t_acc(t_rand(x, "running", MP_ST_ELEM, 2 * H, 0.5, 1.5), TOL_SUM);
                snprintf(what, sizeof what, "batch_norm(n=%d h=%d training=%d)", q.n, q.h, tr);
                tens *o1[3] = { q.y, q.running, q.save };
                bo_run(x, what, op_bn, &q, o1, tr ? 3 : 2);
                if (tr) {
                    q.dy = t_rand(x, "dy", MP_ST_ELEM, N, -1, 1);
                    q.dx = t_out(x, "dx", MP_ST_ELEM, N, TOL_SUM);
                    q.dgamma = t_acc(t_rand(x, "dgamma", MP_ST_ELEM, H, -1, 1), TOL_SUM);
                    q.dbeta = t_acc(t_rand(x, "dbeta", MP_ST_ELEM, H, -1, 1), TOL_SUM);
                    /* save as the forward left it on the oracle, on both sides */
                    q.save = t_rand(x, "save", MP_ST_ELEM, 2 * H, 0.5, 1);
                    snprintf(what, sizeof what, "batch_norm_backward(n=%d h=%d)", q.n, q.h);
                    tens *o2[3] = { q.dx, q.dgamma, q.dbeta };
                    bo_run(x, what, op_bn_backward, &q, o2, 3);
                }
                bo_reset(x);
            }
}

/* ===================================================================== */
/* Every loss                                                             */
/* ===================================================================== */

typedef struct {
    int32_t n;
    mp_loss_spec sp;
    int with_w, with_tw, with_ineq;
    tens *y, *tg, *mask, *loss, *dy, *w, *tw, *ineq;
} loss_arg;

static void op_loss_kind(mp_backend *b, int s, const void *arg)
{
    const loss_arg *q = arg;
    mp_loss_spec sp = q->sp;
    sp.sample_weight = q->w ? S(q->w) : NULL;
    sp.task_weight = q->tw ? S(q->tw) : NULL;
    sp.ineq = q->ineq ? (const uint8_t *)S(q->ineq) : NULL;
    b->loss(b, S(q->loss), S(q->dy), S(q->y), S(q->tg), S(q->mask), q->n, &sp);
}

static int loss_classes(mp_loss_kind k)
{
    return k == MP_LOSS_CE || k == MP_LOSS_MULTICLASS_MCC || k == MP_LOSS_DIRICHLET ? 3 : 0;
}

static void case_losses(bo *x)
{
    char what[200];
    static const int32_t ns[] = { 0, 1, 9, 64, 3000 };
    int nn = x->spec->big ? 5 : 4;
    for (int kind = 0; kind < MP_LOSS_COUNT; kind++)
        for (int i = 0; i < nn; i++)
            for (int tasks = 1; tasks <= 3; tasks += 2)
                for (int extras = 0; extras < 2; extras++) {
                    loss_arg q;
                    memset(&q, 0, sizeof q);
                    q.n = ns[i];
                    int C = loss_classes((mp_loss_kind)kind);
                    q.sp = (mp_loss_spec){ (mp_loss_kind)kind, tasks, C, 0.2, 1e-8, 0.1,
                                           NULL, NULL, NULL,
                                           i % 2 ? MP_SPECTRA_SOFTPLUS : MP_SPECTRA_EXP, 1e-8 };
                    int W = mp_loss_width((mp_loss_kind)kind, C);
                    size_t N = (size_t)q.n * tasks, NY = N * (size_t)W;
                    uint8_t *mask = mp_malloc(N + 1), *ineq = mp_malloc(N + 1);
                    if (!mask || !ineq) {
                        mp_free(mask);
                        mp_free(ineq);
                        bo_fail(x, "out of host memory");
                        return;
                    }
                    q.y = t_rand(x, "y", MP_ST_ELEM, NY, -2, 2);
                    q.tg = t_rand(x, "target", MP_ST_ELEM, N, -1, 1);
                    for (size_t e = 0; e < N; e++) {
                        mask[e] = mp_rng_uniform(&x->rng) < 0.8;
                        ineq[e] = (uint8_t)mp_rng_below(&x->rng, 3);
                        if (q.tg && C)
                            q.tg->init[e] = (float)mp_rng_below(&x->rng, (uint64_t)C);
                        else if (q.tg && (kind == MP_LOSS_BCE || kind == MP_LOSS_BINARY_MCC))
                            q.tg->init[e] = q.tg->init[e] > 0;
                        else if (q.tg && (kind == MP_LOSS_SID || kind == MP_LOSS_WASSERSTEIN))
                            q.tg->init[e] = 0.05f + fabsf(q.tg->init[e]);   /* intensities */
                    }
                    /* a spectrum's labelled positions sum to 1 */
                    for (int32_t r = 0; q.tg && (kind == MP_LOSS_SID ||
                                                 kind == MP_LOSS_WASSERSTEIN) && r < q.n; r++) {
                        float s = 0;
                        for (int t = 0; t < tasks; t++)
                            s += mask[(size_t)r * tasks + t] ? q.tg->init[(size_t)r * tasks + t] : 0;
                        for (int t = 0; s > 0 && t < tasks; t++)
                            q.tg->init[(size_t)r * tasks + t] /= s;
                    }
                    if (q.tg && (!t_put(x, q.tg, 0) || !t_put(x, q.tg, 1)))
                        q.tg = NULL;
                    q.mask = t_raw(x, mask, N);
                    if (extras) {
                        q.w = t_rand(x, "w", MP_ST_ELEM, (size_t)q.n, 0.2, 2);
                        q.tw = t_rand(x, "tw", MP_ST_ELEM, (size_t)tasks, 0.5, 1.5);
                        q.ineq = t_raw(x, ineq, N);
                    }
                    mp_free(mask);
                    mp_free(ineq);
                    q.loss = t_out(x, "loss", MP_ST_ELEM, 1, TOL_SUM);
                    q.dy = t_out(x, "dy", MP_ST_ELEM, NY, TOL_SUM);
                    snprintf(what, sizeof what, "loss(%s n=%d tasks=%d%s)",
                             mp_loss_name((mp_loss_kind)kind), (int)q.n, tasks,
                             extras ? " weights, task weights, inequalities" : "");
                    tens *outs[2] = { q.loss, q.dy };
                    if ((!extras || (q.w && q.tw && q.ineq)) || q.n == 0)
                        bo_run(x, what, op_loss_kind, &q, outs, 2);
                    else
                        bo_fail(x, "%s: set-up failed", what);
                    bo_reset(x);
                }
}

/* ===================================================================== */
/* The table                                                              */
/* ===================================================================== */

static const bo_case CASES[] = {
    { "act, act_backward, add, clip_norm", case_act },
    { "edge_mean, neighbor_sum, attn_pool(+backward)", case_layers },
    { "batch_norm, batch_norm_backward", case_bn },
    { "loss (every kind)", case_losses },
};

#define TABLE_TEST(tname, bname, prec, big, gpu) \
    BO_TABLE_TEST(tname, bname, prec, big, gpu, CASES, 2026)

TABLE_TEST(ops_train_table_cpu, "cpu", 0, 0, 0)
TABLE_TEST(ops_train_table_ref, "ref", 0, 0, 0)
TABLE_TEST(ops_train_table_ref_bf16, "ref:bf16", 0, 0, 0)
TABLE_TEST(gpu_ops_train_table_fp32, "gpu:fp32", 0, 1, 1)
TABLE_TEST(gpu_ops_train_table_tf32, "gpu:tf32", 1, 1, 1)
TABLE_TEST(gpu_ops_train_table_bf16, "gpu:bf16", 2, 1, 1)
