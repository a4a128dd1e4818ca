/*
 * test_gradcheck.c - finite-difference checks of the whole models, in double
 * precision: the model code runs unchanged on the ref64 backend (double
 * buffers), every parameter is nudged by +-eps, and the loss - recomputed
 * here from the model's outputs with Chemprop's masked formula, independently
 * of the loss op - must move as the analytic gradient says.  Covers D-MPNN
 * (depths 1-3, mean/sum/norm readout, extra features, dropout) and the FFN,
 * regression and classification, multi-task with missing labels.  Then the
 * float cpu model against the double model, same seed and batch.
 */
#include "test.h"
#include "models/model_impl.h"
#include "randgraph.h"

#include <stdlib.h>

typedef struct {
    const char *name;
    mp_model_config cfg;
    int32_t n_mols;
} gc_case;

/* Chemprop's batch loss from the outputs, in double. */
static double host_loss(const double *y, const float *t, size_t n, mp_model_task task)
{
    double s = 0;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(t[i]))
            continue;
        double x = y[i], l;
        if (task == MP_MODEL_CLASSIFICATION)
            l = -(t[i] * log(1 / (1 + exp(-x))) + (1 - t[i]) * log(1 - 1 / (1 + exp(-x))));
        else
            l = (x - t[i]) * (x - t[i]);
        s += l;
        c++;
    }
    return c ? s / (double)c : 0;
}

static mp_model_config small_dmpnn(void)
{
    mp_model_config c = mp_model_config_default();
    c.atom_fdim = 12;
    c.hidden = 6;
    c.ffn_hidden = 5;
    c.n_tasks = 3;
    return c;
}

static gc_case make_case(int i)
{
    gc_case k;
    k.n_mols = 7;
    k.cfg = small_dmpnn();
    switch (i) {
    case 0:
        k.name = "dmpnn regression, 3 tasks, mean, depth 3";
        break;
    case 1:
        k.name = "dmpnn classification, 2 tasks, sum, depth 2, extra features, dropout, 3 layers";
        k.cfg.task = MP_MODEL_CLASSIFICATION;
        k.cfg.n_tasks = 2;
        k.cfg.depth = 2;
        k.cfg.aggregation = MP_AGG_SUM;
        k.cfg.extra_dim = 4;
        k.cfg.dropout = 0.25;
        k.cfg.ffn_layers = 3;
        break;
    case 2:
        k.name = "dmpnn regression, depth 1, norm, 1 layer";
        k.cfg.depth = 1;
        k.cfg.aggregation = MP_AGG_NORM;
        k.cfg.agg_norm = 3;
        k.cfg.ffn_layers = 1;
        k.cfg.n_tasks = 1;
        break;
    case 3:
        k.name = "ffn regression, 2 tasks, 3 layers, dropout";
        k.cfg.kind = MP_MODEL_FFN;
        k.cfg.extra_dim = 9;
        k.cfg.n_tasks = 2;
        k.cfg.ffn_layers = 3;
        k.cfg.dropout = 0.2;
        break;
    default:
        k.name = "ffn classification, 4 tasks, 1 layer";
        k.cfg.kind = MP_MODEL_FFN;
        k.cfg.task = MP_MODEL_CLASSIFICATION;
        k.cfg.extra_dim = 5;
        k.cfg.n_tasks = 4;
        k.cfg.ffn_layers = 1;
        break;
    }
    return k;
}

/* Random graphs, features and targets (some missing) for a case. */
static int make_inputs(const gc_case *k, uint64_t seed, mp_graphs *g, float **extra, float **tgt)
{
    mp_rng r;
    mp_rng_seed(&r, seed, 0);
    rg_opts o = { 1, 7, 0.15, 0.15, 2 };
    if (!rg_make(g, &r, k->n_mols, k->cfg.atom_fdim, &o))
        return 0;
    size_t ne = (size_t)k->n_mols * (k->cfg.extra_dim ? k->cfg.extra_dim : 1);
    size_t nt = (size_t)k->n_mols * k->cfg.n_tasks;
    *extra = malloc(ne * sizeof **extra);
    *tgt = malloc(nt * sizeof **tgt);
    if (!*extra || !*tgt)
        return 0;
    for (size_t i = 0; i < ne; i++)
        (*extra)[i] = (float)(2 * mp_rng_uniform(&r) - 1);
    for (size_t i = 0; i < nt; i++) {
        double u = mp_rng_uniform(&r);
        if (mp_rng_uniform(&r) < 0.3)
            (*tgt)[i] = NAN;
        else
            (*tgt)[i] = k->cfg.task == MP_MODEL_CLASSIFICATION ? (float)(u < 0.5) : (float)(2 * u - 1);
    }
    (*tgt)[0] = k->cfg.task == MP_MODEL_CLASSIFICATION ? 1.0f : 0.5f;   /* at least one label */
    return 1;
}

MP_TEST(gradcheck_whole_models_double)
{
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "ref64"));
    for (int ci = 0; ci < 5; ci++) {
        gc_case k = make_case(ci);
        mp_graphs g;
        float *extra = NULL, *tgt = NULL;
        CHECK(make_inputs(&k, 100 + ci, &g, &extra, &tgt));
        const mp_graphs *batch = k.cfg.kind == MP_MODEL_DMPNN ? &g : NULL;
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, &k.cfg, b, 7 + ci));
        size_t np = mp_model_n_params(m), nout = (size_t)k.n_mols * k.cfg.n_tasks;
        double *p = mp_model_block_ptr(m, MP_BLOCK_PARAMS);
        double *gr = mp_model_block_ptr(m, MP_BLOCK_GRADS);
        double *y = mp_model_block_ptr(m, MP_BLOCK_OUTPUT);

        /* Biases start at exactly 0, and an empty molecule's readout is
         * exactly 0, which would sit on ReLU's kink: jitter every parameter. */
        mp_rng jr;
        mp_rng_seed(&jr, 300 + ci, 0);
        for (size_t i = 0; i < np; i++)
            p[i] += 0.1 * mp_rng_normal(&jr);
        /* The dropout masks must be the same in every evaluation: restart
         * the model's dropout stream from one saved state each time. */
        mp_rng saved = m->drop_rng;
        mp_model_zero_grad(m);
        CHECK_OK(mp_model_forward(m, batch, extra, k.n_mols, 1, NULL));
        double loss = -1;
        CHECK_OK(mp_model_loss_backward(m, tgt, &loss));
        y = mp_model_block_ptr(m, MP_BLOCK_OUTPUT);
        CHECK_NEAR(loss, host_loss(y, tgt, nout, k.cfg.task), 1e-12, 1e-10);
        double *grad = malloc(np * sizeof *grad);
        CHECK(grad);
        memcpy(grad, gr, np * sizeof *grad);

        int checked = 0, nonzero = 0;
        double worst = 0;
        for (size_t i = 0; i < np; i++) {
            double keep = p[i], eps = 1e-6, f[2];
            for (int s = 0; s < 2; s++) {
                p[i] = keep + (s ? -eps : eps);
                m->drop_rng = saved;
                CHECK_OK(mp_model_forward(m, batch, extra, k.n_mols, 1, NULL));
                f[s] = host_loss(mp_model_block_ptr(m, MP_BLOCK_OUTPUT), tgt, nout, k.cfg.task);
            }
            p[i] = keep;
            double num = (f[0] - f[1]) / (2 * eps), err = fabs(num - grad[i]);
            if (err > worst)
                worst = err;
            checked++;
            nonzero += grad[i] != 0;
            if (!(err <= 1e-7 + 1e-5 * fabs(num))) {
                int nv;
                const mp_param_view *v = mp_model_views(m, &nv);
                int vi = 0;
                while (vi + 1 < nv && v[vi + 1].offset <= i)
                    vi++;
                MP_FAIL("%s: parameter %zu (%s[%zu]): analytic %.12g, finite difference %.12g",
                        k.name, i, v[vi].name, i - v[vi].offset, grad[i], num);
            }
        }
        fprintf(stdout, "    %s: %d parameters, %d with nonzero gradient, worst |error| %.2g\n",
                k.name, checked, nonzero, worst);
        /* A check over all-zero gradients would prove nothing. */
        CHECK(nonzero > checked / 2);
        free(grad);
        free(extra);
        free(tgt);
        mp_model_free(m);
        mp_graphs_free(&g);
    }
    mp_backend_close(b);
}

/* The float cpu model against the double reference model: same seed, same
 * batch, same dropout masks -> outputs, loss and gradients agree to float
 * precision, and so do the parameters after an Adam step. */
MP_TEST(gradcheck_cpu_model_matches_double_model)
{
    mp_backend *cpu = NULL, *r64 = NULL;
    CHECK_OK(mp_backend_open(&cpu, "cpu"));
    CHECK_OK(mp_backend_open(&r64, "ref64"));
    for (int ci = 0; ci < 2; ci++) {
        gc_case k = make_case(ci == 0 ? 0 : 1);
        k.cfg.atom_fdim = 133;
        k.cfg.hidden = 40;
        k.cfg.ffn_hidden = 0;
        k.n_mols = 30;
        mp_graphs g;
        float *extra = NULL, *tgt = NULL;
        CHECK(make_inputs(&k, 200 + ci, &g, &extra, &tgt));
        mp_model *mc = NULL, *md = NULL;
        CHECK_OK(mp_model_create(&mc, &k.cfg, cpu, 5));
        CHECK_OK(mp_model_create(&md, &k.cfg, r64, 5));
        size_t np = mp_model_n_params(mc), nout = (size_t)k.n_mols * k.cfg.n_tasks;
        CHECK_EQ_INT(np, mp_model_n_params(md));
        float *pc = malloc(np * sizeof *pc), *pd = malloc(np * sizeof *pd);
        float *oc = malloc(nout * sizeof *oc), *od = malloc(nout * sizeof *od);
        CHECK(pc && pd && oc && od);
        CHECK_OK(mp_model_get_params(mc, pc));
        CHECK_OK(mp_model_get_params(md, pd));
        CHECK(memcmp(pc, pd, np * sizeof *pc) == 0);   /* same initial numbers */

        double lc, ld;
        mp_model_zero_grad(mc);
        mp_model_zero_grad(md);
        CHECK_OK(mp_model_forward(mc, &g, extra, k.n_mols, 1, oc));
        CHECK_OK(mp_model_forward(md, &g, extra, k.n_mols, 1, od));
        for (size_t i = 0; i < nout; i++)
            CHECK_NEAR(oc[i], od[i], 1e-5, 1e-4);
        CHECK_OK(mp_model_loss_backward(mc, tgt, &lc));
        CHECK_OK(mp_model_loss_backward(md, tgt, &ld));
        CHECK_NEAR(lc, ld, 1e-6, 1e-4);
        CHECK_OK(mp_model_get_grads(mc, pc));
        CHECK_OK(mp_model_get_grads(md, pd));
        double gmax = 0;
        for (size_t i = 0; i < np; i++)
            gmax = fabs(pd[i]) > gmax ? fabs(pd[i]) : gmax;
        for (size_t i = 0; i < np; i++)
            CHECK_NEAR(pc[i], pd[i], 1e-4 * gmax, 1e-3);
        /* One Adam step: its first move is lr * g / (|g| + eps), so where
         * the gradient is clearly nonzero both models move by the same
         * +-lr; where it is ~0 the float sign may differ. */
        float *gd = malloc(np * sizeof *gd), *p0 = malloc(np * sizeof *p0);
        CHECK(gd && p0);
        memcpy(gd, pd, np * sizeof *gd);
        CHECK_OK(mp_model_get_params(md, p0));
        CHECK_OK(mp_model_adam_step(mc, 1e-3));
        CHECK_OK(mp_model_adam_step(md, 1e-3));
        CHECK_OK(mp_model_get_params(mc, pc));
        CHECK_OK(mp_model_get_params(md, pd));
        for (size_t i = 0; i < np; i++) {
            if (fabs(gd[i]) > 1e-2 * gmax)
                CHECK_NEAR(pc[i] - p0[i], pd[i] - p0[i], 1e-6, 0);
            else
                CHECK_NEAR(pc[i] - p0[i], pd[i] - p0[i], 2.01e-3, 0);
        }
        free(gd);
        free(p0);
        free(pc); free(pd); free(oc); free(od); free(extra); free(tgt);
        mp_model_free(mc);
        mp_model_free(md);
        mp_graphs_free(&g);
    }
    mp_backend_close(cpu);
    mp_backend_close(r64);
}
