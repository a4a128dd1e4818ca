/*
 * test_gpu_train.c - device-resident training (models/resident.h) and the
 * device-scheduled step ops (adam_sched, step_end in models/ops.h).
 *
 * On every machine (cpu and ref backends): a padded slot gives the same loss
 * and gradients as the unpadded batch (bitwise on ref, whose sums run in
 * order; to 1e-5 on cpu, whose BLAS blocks by shape), adam_sched equals adam
 * bitwise, and resident steps follow the host loop's losses over 50 ESOL
 * steps.  With a GPU (test names gpu_train_cuda_*; skipped without one,
 * failed under MOLPROP_REQUIRE_GPU=1): the same checks on cuda, 50 ESOL steps
 * in fp32 against the cpu loop within 1e-4 relative, the same seed giving
 * bitwise the same model twice, and graph replay equal to the eager step.
 */
#include "test.h"
#include "gpu_test.h"

#include "data/dataset.h"
#include "gpu/gpu.h"
#include "models/model.h"
#include "run/resident.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ESOL, featurized once per process. */
static mp_dataset  *g_esol;
static mp_features *g_feat;

static mp_status esol_load(void) { return mp_test_esol(&g_esol, &g_feat); }

/* Batch s of the test sequence: 50 distinct molecules, targets roughly
 * standardized, one label missing per batch. */
#define BS 50
static void batch_of(int s, int32_t *mols, float *tgt)
{
    int32_t n = g_feat->g.n_mols;
    for (int j = 0; j < BS; j++) {
        mols[j] = (int32_t)(((int64_t)s * 37 + (int64_t)j * 13) % n);
        double y = g_esol->targets[(size_t)mols[j] * g_esol->n_tasks];
        tgt[j] = j == 7 ? NAN : (float)((y + 3.0) / 2.0);
    }
}

static double lr_of(int s) { return 1e-4 + 2e-5 * s; }

/* mode 0: the host loop (forward / loss_backward / adam_step);
 * 1: resident, ops issued per step; 2: resident, one graph replayed. */
static mp_status run_steps(const char *backend, int mode, int hidden, int n_steps,
                           double *losses, float **params_out, size_t *n_params)
{
    mp_status st;
    if ((st = esol_load()))
        return st;
    mp_backend *b = NULL;
    mp_model *m = NULL;
    mp_resident *r = NULL;
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    int32_t mols[BS];
    float tgt[BS];
    double *lrs = mp_malloc(sizeof(double) * (size_t)n_steps);
    if ((st = mp_backend_open(&b, backend)))
        goto done;
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = hidden;
    if ((st = mp_model_create(&m, &cfg, b, 7)))
        goto done;
    if (mode == 0) {
        for (int s = 0; s < n_steps; s++) {
            batch_of(s, mols, tgt);
            mp_model_zero_grad(m);
            if ((st = mp_graphs_select(&batch, &g_feat->g, mols, BS)) ||
                (st = mp_model_forward(m, &batch, NULL, BS, 1, NULL)) ||
                (st = mp_model_loss_backward(m, tgt, &losses[s])) ||
                (st = mp_model_adam_step(m, lr_of(s))))
                goto done;
        }
    } else {
        mp_resident_opts ro = { .batch_size = BS, .max_batches = n_steps,
                                .use_graph = mode == 2 };
        mp_graphs_batch_bounds(&g_feat->g, NULL, 0, BS, &ro.cap_atoms, &ro.cap_edges);
        if ((st = mp_resident_create(&r, m, &ro)))
            goto done;
        for (int s = 0; s < n_steps; s++) {
            batch_of(s, mols, tgt);
            lrs[s] = lr_of(s);
            if ((st = mp_resident_pack(r, s, &g_feat->g, mols, BS, tgt, NULL)))
                goto done;
        }
        if ((st = mp_resident_run(r, n_steps, lrs, losses)))
            goto done;
        if (mp_model_adam_steps(m) != n_steps) {
            st = mp_error_set(MP_ERR_INTERNAL, "adam steps %ld after %d", mp_model_adam_steps(m),
                              n_steps);
            goto done;
        }
    }
    *n_params = mp_model_n_params(m);
    *params_out = mp_malloc(sizeof(float) * *n_params);
    st = mp_model_get_params(m, *params_out);
done:
    mp_free(lrs);
    mp_graphs_free(&batch);
    mp_resident_free(r);
    mp_model_free(m);
    mp_backend_close(b);
    return st;
}

/* ===================================================================== */
/* Padding                                                                */
/* ===================================================================== */

/* One step of a small model on the host loop and on a padded slot (batch
 * capacity n + 3, room for 9 more atoms and 6 more edges): loss, gradients
 * and the parameters after Adam. */
static void padded_vs_unpadded(mp_test_result *mp__r, const char *backend, double tol,
                               double dropout, mp_model_kind kind)
{
    CHECK_OK(esol_load());
    enum { N = 11 };
    int32_t mols[N];
    float tgt[N * 2], extra[N * 3];
    for (int i = 0; i < N; i++) {
        mols[i] = 5 + 17 * i;
        tgt[2 * i] = (float)(g_esol->targets[(size_t)mols[i] * g_esol->n_tasks] / 3.0);
        tgt[2 * i + 1] = i % 3 ? (float)(0.1 * i - 0.4) : NAN;
        for (int k = 0; k < 3; k++)
            extra[i * 3 + k] = (float)(0.3 * k - 0.05 * i);
    }
    mols[4] = 0;   /* a repeat would be fine too; keep them distinct */
    mp_model_config cfg = mp_model_config_default();
    cfg.kind = kind;
    cfg.hidden = 12;
    cfg.n_tasks = 2;
    cfg.extra_dim = 3;
    cfg.dropout = dropout;
    cfg.ffn_hidden = 9;
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, backend));
    mp_model *m1 = NULL, *m2 = NULL;
    CHECK_OK(mp_model_create(&m1, &cfg, b, 3));
    CHECK_OK(mp_model_create(&m2, &cfg, b, 3));
    size_t np = mp_model_n_params(m1);
    float *g1 = mp_malloc(np * sizeof(float)), *g2 = mp_malloc(np * sizeof(float));
    float *p1 = mp_malloc(np * sizeof(float)), *p2 = mp_malloc(np * sizeof(float));
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    CHECK_OK(mp_graphs_select(&batch, &g_feat->g, mols, N));

    double l1 = 0, l2 = 0, lr = 1e-3;
    mp_model_zero_grad(m1);
    CHECK_OK(mp_model_forward(m1, kind == MP_MODEL_DMPNN ? &batch : NULL, extra, N, 1, NULL));
    CHECK_OK(mp_model_loss_backward(m1, tgt, &l1));
    CHECK_OK(mp_model_get_grads(m1, g1));
    CHECK_OK(mp_model_adam_step(m1, lr));
    CHECK_OK(mp_model_get_params(m1, p1));

    mp_resident *r = NULL;
    mp_resident_opts ro = { .batch_size = N + 3, .max_batches = 2,
                            .cap_atoms = batch.n_atoms + 9, .cap_edges = batch.n_edges + 6 };
    CHECK_OK(mp_resident_create(&r, m2, &ro));
    CHECK_OK(mp_resident_pack(r, 1, &g_feat->g, mols, N, tgt, extra));
    CHECK_OK(mp_resident_pack(r, 0, &g_feat->g, mols, N, tgt, extra));
    if (kind == MP_MODEL_DMPNN) {
        /* the slot really is padded: the real molecules as the batch has
         * them, then padding molecules of at most 64 atoms and padding atoms
         * of at most 32 incoming edges, the whole capacity used; the 3
         * padding pairs go one to an atom (pack_padding spreads them) */
        mp_graphs v;
        int32_t cm, ca, ce;
        mp_resident_caps(r, &cm, &ca, &ce);
        CHECK_OK(mp_resident_slot_view(r, 0, &v, NULL, NULL));
        CHECK_EQ_INT(ce, batch.n_edges + 6);
        CHECK_EQ_INT(ca, batch.n_atoms + 10 + (ce + 31) / 32);
        CHECK(cm >= N + 4 + ca / 64);
        CHECK_EQ_INT(v.n_mols, cm);
        CHECK_EQ_INT(v.n_atoms, ca);
        CHECK_EQ_INT(v.n_edges, ce);
        for (int i = 0; i <= N; i++)
            CHECK_EQ_INT(v.mol_atom[i], batch.mol_atom[i]);
        CHECK_EQ_INT(v.mol_atom[cm], ca);
        CHECK(v.mol_atom[N + 1] > v.mol_atom[N]);     /* padding atoms exist */
        for (int32_t i = N; i < cm; i++)
            CHECK(v.mol_atom[i + 1] - v.mol_atom[i] <= 64);
        for (int32_t a = batch.n_atoms; a < ca; a++)
            CHECK(v.in_start[a + 1] - v.in_start[a] <= 32);
        for (int32_t a = batch.n_atoms; a < batch.n_atoms + 3; a++)
            CHECK_EQ_INT(v.in_start[a + 1] - v.in_start[a], 2);
        CHECK_EQ_INT(v.in_start[batch.n_atoms + 3], ce);
    }
    double lrs[1] = { lr };
    CHECK_OK(mp_resident_run(r, 1, lrs, &l2));
    CHECK_OK(mp_model_get_grads(m2, g2));
    CHECK_OK(mp_model_get_params(m2, p2));
    CHECK(l1 > 0);
    if (tol == 0) {
        CHECK(l1 == l2);
        CHECK(memcmp(g1, g2, np * sizeof(float)) == 0);
    } else {
        CHECK_NEAR(l2, l1, 0, tol);
    }
    double num = 0, den = 0, pn = 0, pd = 0;
    for (size_t i = 0; i < np; i++) {
        num += ((double)g1[i] - g2[i]) * ((double)g1[i] - g2[i]);
        den += (double)g1[i] * g1[i];
        pn += ((double)p1[i] - p2[i]) * ((double)p1[i] - p2[i]);
        pd += (double)p1[i] * p1[i];
    }
    CHECK(den > 0);
    CHECK_MSG(sqrt(num / den) <= (tol > 0 ? tol : 0), "%s: gradient rel. error %g", backend,
              sqrt(num / den));
    /* Adam from the device schedule: same update (to float rounding of the
     * step size on ref, whose adam computes it in double) */
    CHECK_MSG(sqrt(pn / pd) <= 1e-6, "%s: parameter rel. error %g", backend, sqrt(pn / pd));
    mp_resident_free(r);
    mp_graphs_free(&batch);
    mp_free(g1);
    mp_free(g2);
    mp_free(p1);
    mp_free(p2);
    mp_model_free(m1);
    mp_model_free(m2);
    mp_backend_close(b);
}

MP_TEST(gpu_train_padded_equals_unpadded_ref)
{
    padded_vs_unpadded(mp__r, "ref", 0.0, 0.0, MP_MODEL_DMPNN);
    padded_vs_unpadded(mp__r, "ref", 0.0, 0.25, MP_MODEL_DMPNN);
    padded_vs_unpadded(mp__r, "ref", 0.0, 0.25, MP_MODEL_FFN);
}

MP_TEST(gpu_train_padded_equals_unpadded_cpu)
{
    padded_vs_unpadded(mp__r, "cpu", 1e-5, 0.0, MP_MODEL_DMPNN);
    padded_vs_unpadded(mp__r, "cpu", 1e-5, 0.25, MP_MODEL_DMPNN);
    padded_vs_unpadded(mp__r, "cpu", 1e-5, 0.0, MP_MODEL_FFN);
}

MP_TEST(gpu_train_cuda_padded_equals_unpadded)
{
    MP_NEED_GPU();
    padded_vs_unpadded(mp__r, "cuda:fp32", 1e-5, 0.0, MP_MODEL_DMPNN);
    padded_vs_unpadded(mp__r, "cuda:fp32", 1e-5, 0.25, MP_MODEL_DMPNN);
    padded_vs_unpadded(mp__r, "cuda:fp32", 1e-5, 0.0, MP_MODEL_FFN);
}

MP_TEST(gpu_train_pack_refuses_bad_input)
{
    CHECK_OK(esol_load());
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cpu"));
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 4;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &cfg, b, 1));
    mp_resident *r = NULL;
    mp_resident_opts bad = { .batch_size = 0, .max_batches = 1 };
    CHECK(mp_resident_create(&r, m, &bad) == MP_ERR_ARG);
    mp_resident_opts gr = { .batch_size = 2, .max_batches = 1, .use_graph = 1 };
    CHECK(mp_resident_create(&r, m, &gr) == MP_ERR_ARG);   /* cpu cannot capture */
    CHECK(strstr(mp_error_message(), "that can capture") != NULL);
    mp_resident_opts ro = { .batch_size = 2, .max_batches = 1, .cap_atoms = 10,
                            .cap_edges = 10 };
    CHECK_OK(mp_resident_create(&r, m, &ro));
    int32_t big[2] = { 0, 1 }, three[3] = { 0, 1, 2 }, out_of_range[1] = { 1 << 30 };
    float t[3] = { 0, 1, 2 }, tinf[1] = { INFINITY };
    /* ESOL's first molecules have more than 10 atoms together */
    CHECK(mp_resident_pack(r, 0, &g_feat->g, big, 2, t, NULL) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "does not fit") != NULL);
    CHECK(mp_resident_pack(r, 0, &g_feat->g, three, 3, t, NULL) == MP_ERR_ARG);
    CHECK(mp_resident_pack(r, 1, &g_feat->g, big, 1, t, NULL) == MP_ERR_ARG);
    CHECK(mp_resident_pack(r, 0, &g_feat->g, out_of_range, 1, t, NULL) == MP_ERR_ARG);
    /* the smallest ESOL molecule fits; an infinite target does not */
    int32_t small = 0;
    for (int32_t i = 0; i < g_feat->g.n_mols; i++)
        if (g_feat->g.mol_atom[i + 1] - g_feat->g.mol_atom[i] <
            g_feat->g.mol_atom[small + 1] - g_feat->g.mol_atom[small])
            small = i;
    CHECK(mp_resident_pack(r, 0, &g_feat->g, &small, 1, tinf, NULL) == MP_ERR_FORMAT);
    CHECK_OK(mp_resident_pack(r, 0, &g_feat->g, &small, 1, t, NULL));
    double lr = -1, loss;
    CHECK(mp_resident_run(r, 1, &lr, &loss) == MP_ERR_ARG);
    CHECK(mp_resident_run(r, 2, &lr, &loss) == MP_ERR_ARG);
    lr = 1e-3;
    CHECK_OK(mp_resident_run(r, 1, &lr, &loss));
    CHECK(isfinite(loss));
    mp_resident_free(r);
    mp_model_free(m);
    mp_backend_close(b);
}

/* ===================================================================== */
/* adam_sched                                                             */
/* ===================================================================== */

static void adam_sched_check(mp_test_result *mp__r, const char *backend)
{
    enum { N = 1003 };
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, backend));
    float h[4][N];
    mp_rng rng;
    mp_rng_seed(&rng, 5, 1);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++)
            h[k][i] = (float)(k == 2 ? fabs(mp_rng_normal(&rng)) * 1e-3 : mp_rng_normal(&rng));
    void *d[2][4];
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++) {
            d[s][k] = b->alloc(b, sizeof h[k]);
            CHECK(d[s][k] != NULL);
            CHECK_OK(b->upload(b, d[s][k], h[k], sizeof h[k]));
        }
    float sched[6];
    long ts[3] = { 1, 17, 1000 };
    double lrs[3] = { 1e-3, 3e-4, 1e-4 };
    for (int i = 0; i < 3; i++)
        mp_adam_sched_entry(lrs[i], 0.9, 0.999, ts[i], sched + 2 * i);
    float *ds = b->alloc(b, sizeof sched);
    int32_t *dk = b->alloc(b, sizeof(int32_t));
    void *dl = b->alloc(b, 4 * sizeof(float));
    int32_t one = 1;
    CHECK_OK(b->upload(b, ds, sched, sizeof sched));
    CHECK_OK(b->upload(b, dk, &one, sizeof one));
    /* entry 1 (t = 17), then entry 2 after step_end advanced k */
    b->adam(b, d[0][0], d[0][1], d[0][2], d[0][3], N, lrs[1], 0.9, 0.999, 1e-8, 0.0, ts[1]);
    b->adam_sched(b, d[1][0], d[1][1], d[1][2], d[1][3], N, ds, dk, 0.9, 0.999, 1e-8, 0.0);
    b->step_end(b, dk, dl, d[0][3]);   /* losses[1] = g[0] */
    b->adam(b, d[0][0], d[0][1], d[0][2], d[0][3], N, lrs[2], 0.9, 0.999, 1e-8, 0.0, ts[2]);
    b->adam_sched(b, d[1][0], d[1][1], d[1][2], d[1][3], N, ds, dk, 0.9, 0.999, 1e-8, 0.0);
    CHECK_OK(b->sync(b));
    float r0[3][N], r1[3][N], l[4];
    int32_t k = 0;
    for (int q = 0; q < 3; q++) {
        CHECK_OK(b->download(b, r0[q], d[0][q], sizeof r0[q]));
        CHECK_OK(b->download(b, r1[q], d[1][q], sizeof r1[q]));
        CHECK(memcmp(r0[q], r1[q], sizeof r0[q]) == 0);
        CHECK(memcmp(r0[q], h[q], sizeof r0[q]) != 0);
    }
    CHECK_OK(b->download(b, &k, dk, sizeof k));
    CHECK_OK(b->download(b, l, dl, sizeof l));
    CHECK_EQ_INT(k, 2);
    CHECK(l[1] == h[3][0]);
    for (int s = 0; s < 2; s++)
        for (int q = 0; q < 4; q++)
            b->free(b, d[s][q]);
    b->free(b, ds);
    b->free(b, dk);
    b->free(b, dl);
    mp_backend_close(b);
}

MP_TEST(gpu_train_adam_sched_equals_adam_cpu) { adam_sched_check(mp__r, "cpu"); }

MP_TEST(gpu_train_cuda_adam_sched_equals_adam)
{
    MP_NEED_GPU();
    adam_sched_check(mp__r, "cuda:fp32");
}

/* ===================================================================== */
/* 50 ESOL steps                                                          */
/* ===================================================================== */

static double max_rel(const double *a, const double *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1e-30);
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

MP_TEST(gpu_train_resident_follows_host_loop_cpu)
{
    enum { S = 50 };
    double la[S], lb[S];
    float *pa = NULL, *pb = NULL;
    size_t na = 0, nb = 0;
    CHECK_OK(run_steps("cpu", 0, 64, S, la, &pa, &na));
    CHECK_OK(run_steps("cpu", 1, 64, S, lb, &pb, &nb));
    CHECK_EQ_INT(na, nb);
    double e = max_rel(lb, la, S);
    CHECK_MSG(e <= 1e-5, "resident vs host loop: max relative loss difference %g", e);
    CHECK(la[S - 1] < la[0]);   /* it learns */
    mp_free(pa);
    mp_free(pb);
}

MP_TEST(gpu_train_cuda_50_steps_match_cpu)
{
    MP_NEED_GPU();
    enum { S = 50 };
    double lc[S], lg[S], le[S], lg2[S];
    float *pc = NULL, *pg = NULL, *pe = NULL, *pg2 = NULL;
    size_t nc = 0, ng = 0, ne = 0, ng2 = 0;
    CHECK_OK(run_steps("cpu", 0, 300, S, lc, &pc, &nc));
    CHECK_OK(run_steps("cuda:fp32", 2, 300, S, lg, &pg, &ng));
    CHECK_OK(run_steps("cuda:fp32", 1, 300, S, le, &pe, &ne));
    CHECK_OK(run_steps("cuda:fp32", 2, 300, S, lg2, &pg2, &ng2));
    double e = max_rel(lg, lc, S);
    printf("    gpu (graph, fp32) vs cpu: max relative loss difference over %d steps %.3g\n", S,
           e);
    CHECK_MSG(e <= 1e-4, "gpu vs cpu: max relative loss difference %g", e);
    /* same seed twice: bitwise the same model and losses */
    CHECK(memcmp(pg, pg2, ng * sizeof(float)) == 0);
    CHECK(memcmp(lg, lg2, sizeof lg) == 0);
    /* graph replay == eager step */
    CHECK(memcmp(pg, pe, ng * sizeof(float)) == 0);
    CHECK(memcmp(lg, le, sizeof lg) == 0);
    mp_free(pc);
    mp_free(pg);
    mp_free(pe);
    mp_free(pg2);
}

/* Programmatic dependent launch (cuda_ctx.cuh launch()) changes when a
 * kernel may start, never what it computes: 30 steps with it (the default
 * on sm_90, every kernel but the panels; MOLPROP_CUDA_PDL=2, all) and with
 * MOLPROP_CUDA_PDL=0 give the same losses and model bit for bit, in bf16
 * and fp32, as one graph replayed and as ops issued per step.  A kernel
 * reading before its wait would race its predecessor. */
static mp_status run_steps_pdl(const char *value, const char *backend, int mode, int n_steps,
                               double *losses, float **params, size_t *n_params)
{
    char *old = mp_test_env_set("MOLPROP_CUDA_PDL", value);
    mp_status st = run_steps(backend, mode, 300, n_steps, losses, params, n_params);
    mp_test_env_restore("MOLPROP_CUDA_PDL", old);
    return st;
}

MP_TEST(gpu_train_dependent_launch_same_bits)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cuda:bf16"));
    int sm90 = mp_backend_cuda_sm_count(b) > 0 && strstr(mp_backend_cuda_info(b), ", sm_9") != NULL;
    CHECK_MSG(!sm90 || strstr(mp_backend_cuda_info(b), "dependent launch") != NULL, "info: %s",
              mp_backend_cuda_info(b));
    mp_backend_close(b);
    enum { S = 30 };
    static const char *backends[] = { "cuda:bf16", "cuda:fp32" };
    static const char *values[] = { NULL, "2" };
    for (int i = 0; i < 2; i++)
        for (int v = 0; v < 2; v++)
            for (int mode = 1; mode <= 2; mode++) {
                double lp[S], lq[S];
                float *pp = NULL, *pq = NULL;
                size_t np = 0, nq = 0;
                CHECK_OK(run_steps_pdl(values[v], backends[i], mode, S, lp, &pp, &np));
                CHECK_OK(run_steps_pdl("0", backends[i], mode, S, lq, &pq, &nq));
                CHECK_EQ_INT(np, nq);
                CHECK_MSG(memcmp(lp, lq, sizeof lp) == 0 &&
                              memcmp(pp, pq, np * sizeof(float)) == 0,
                          "%s, %s, MOLPROP_CUDA_PDL=%s: the losses or the model differ with =0",
                          backends[i], mode == 2 ? "graph replay" : "ops per step",
                          values[v] ? values[v] : "(default)");
                CHECK(lp[S - 1] < lp[0]);
                mp_free(pp);
                mp_free(pq);
            }
}

/* ===================================================================== */
/* The trainer                                                            */
/* ===================================================================== */

MP_TEST(gpu_train_trainer_resident_matches_cpu)
{
    mp_train_result a, b;
    CHECK_OK(mp_test_train_esol("cpu", 0, -1, 0.1, &a));
    CHECK_OK(mp_test_train_esol("cpu", 1, -1, 0.1, &b));
    CHECK(isfinite(a.test_mean) && a.test_mean > 0);
    CHECK_NEAR(b.val_mean, a.val_mean, 0, 1e-4);
    CHECK_NEAR(b.test_mean, a.test_mean, 0, 1e-4);
    mp_train_result_free(&a);
    mp_train_result_free(&b);
}

MP_TEST(gpu_train_cuda_trainer_matches_cpu)
{
    MP_NEED_GPU();
    mp_train_result a, b, c, d;
    CHECK_OK(mp_test_train_esol("cpu", 0, -1, 0.0, &a));
    CHECK_OK(mp_test_train_esol("cuda:fp32", -1, -1, 0.0, &b));     /* resident, graph */
    CHECK_OK(mp_test_train_esol("cuda:fp32", 0, -1, 0.0, &c));      /* the host loop   */
    CHECK_OK(mp_test_train_esol("cuda:fp32", -1, -1, 0.1, &d));     /* resident, eager */
    printf("    esol 3 epochs test rmse: cpu %.6f, gpu resident %.6f, gpu host loop %.6f\n",
           a.test_mean, b.test_mean, c.test_mean);
    CHECK_NEAR(b.test_mean, a.test_mean, 0, 1e-3);
    CHECK_NEAR(c.test_mean, a.test_mean, 0, 1e-3);
    CHECK(isfinite(d.test_mean) && d.test_mean > 0);
    mp_train_result_free(&a);
    mp_train_result_free(&b);
    mp_train_result_free(&c);
    mp_train_result_free(&d);
}

/* The slot classes as an option (mp_train_opts.slot_classes, formerly
 * MOLPROP_SLOT_CLASSES): resident on the GPU with graph replay, one class
 * (every slot padded to the largest batch) and four both train near the cpu
 * host loop, with and without dropout. */
MP_TEST(gpu_train_cuda_slot_classes_option)
{
    MP_NEED_GPU();
    for (int d = 0; d < 2; d++) {
        mp_train_result cpu, gpu[2];
        CHECK_OK(mp_test_train_esol("cpu", 0, -1, d ? 0.1 : 0.0, &cpu));
        for (int q = 0; q < 2; q++) {
            mp_train_opts o = mp_train_opts_default();
            o.data_path = mp_test_shared("datasets/esol.csv.gz");
            o.epochs = 3;
            o.hidden = 32;
            o.dropout = d ? 0.1 : 0.0;
            o.threads = 1;
            o.quiet = 1;
            o.backend = "cuda:fp32";
            o.slot_classes = q ? 4 : 1;
            CHECK_OK(mp_train(&o, &gpu[q]));
        }
        printf("    esol 3 epochs, dropout %.1f, test rmse: cpu %.6f, gpu 1 class %.6f, "
               "4 classes %.6f\n", d ? 0.1 : 0.0, cpu.test_mean, gpu[0].test_mean,
               gpu[1].test_mean);
        for (int q = 0; q < 2; q++) {
            CHECK_NEAR(gpu[q].test_mean, cpu.test_mean, 0, 1e-3);
            mp_train_result_free(&gpu[q]);
        }
        mp_train_result_free(&cpu);
    }
}
