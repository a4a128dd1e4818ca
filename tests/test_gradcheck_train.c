/*
 * test_gradcheck_train.c - the losses, activations and layers of issue 11 in
 * double precision (ref64): each loss kind's gradient by central
 * differences of its own value (with sample weights, task weights and
 * inequality flags), its value against a closed form written here from the
 * papers / Chemprop v2.3.1's nn/metrics.py, each activation's derivative,
 * and whole models (every new head, activation, undirected and atom
 * messages, attentive readout, batch norm) by differences of the model's
 * loss in every parameter.
 */
#include "test.h"

#include "backend/ops.h"
#include "models/heads.h"
#include "models/model_impl.h"
#include "randgraph.h"

#include <math.h>
#include <stdlib.h>

static mp_backend *open_ref64(void)
{
    mp_backend *b = NULL;
    return mp_backend_open(&b, "ref64") == MP_OK ? b : NULL;
}

static double softplus(double x) { return log1p(exp(x)); }

/* ===================================================================== */
/* Losses: gradient by differences, value by closed forms                 */
/* ===================================================================== */

static int classes_of(mp_loss_kind k)
{
    return k == MP_LOSS_CE || k == MP_LOSS_MULTICLASS_MCC || k == MP_LOSS_DIRICHLET ? 3 : 0;
}

MP_TEST(gradcheck_every_loss_double)
{
    mp_backend *b = open_ref64();
    CHECK(b);
    mp_rng r;
    mp_rng_seed(&r, 77, 0);
    const int32_t n = 11;
    const int T = 2;
    for (int kind = 0; kind < MP_LOSS_COUNT; kind++)
        for (int extras = 0; extras < 2; extras++) {
            int C = classes_of((mp_loss_kind)kind), W = mp_loss_width((mp_loss_kind)kind, C);
            int spectral = kind == MP_LOSS_SID || kind == MP_LOSS_WASSERSTEIN;
            size_t N = (size_t)n * T, NY = N * (size_t)W;
            double y[11 * 2 * 4], dy[11 * 2 * 4], tg[22], w[11], tw[2], loss[1], l2[1];
            double scratch[11 * 2 * 4];
            uint8_t mask[22], ineq[22];
            for (size_t i = 0; i < NY; i++)
                y[i] = 2 * mp_rng_uniform(&r) - 1;
            for (size_t i = 0; i < N; i++) {
                double u = mp_rng_uniform(&r);
                tg[i] = C ? (double)mp_rng_below(&r, (uint64_t)C)
                        : kind == MP_LOSS_BCE || kind == MP_LOSS_BINARY_MCC ? (double)(u < 0.5)
                        : spectral ? 0.05 + u
                        : 2 * u - 1;
                mask[i] = i == 0 || mp_rng_uniform(&r) < 0.8;
                ineq[i] = (uint8_t)mp_rng_below(&r, 3);
            }
            for (int i = 0; spectral && i < n; i++) {   /* each spectrum sums to 1 */
                double s = 0;
                for (int t = 0; t < T; t++)
                    s += mask[i * T + t] ? tg[i * T + t] : 0;
                for (int t = 0; s > 0 && t < T; t++)
                    tg[i * T + t] /= s;
            }
            for (int i = 0; i < n; i++)
                w[i] = 0.5 + mp_rng_uniform(&r);
            tw[0] = 0.7;
            tw[1] = 1.3;
            mp_loss_spec sp = { (mp_loss_kind)kind, T, C, 0.2, 1e-8, 0.1, extras ? tw : NULL,
                                extras ? w : NULL, extras ? ineq : NULL,
                                extras ? MP_SPECTRA_SOFTPLUS : MP_SPECTRA_EXP, 1e-8 };
            b->loss(b, loss, dy, y, tg, mask, n, &sp);
            CHECK(isfinite(loss[0]));
            int nonzero = 0;
            for (size_t i = 0; i < NY; i++) {
                double keep = y[i], e = 1e-6, f[2];
                for (int s = 0; s < 2; s++) {
                    y[i] = keep + (s ? -e : e);
                    b->loss(b, l2, scratch, y, tg, mask, n, &sp);
                    f[s] = l2[0];
                }
                y[i] = keep;
                double num = (f[0] - f[1]) / (2 * e);
                nonzero += dy[i] != 0;
                /* the mcc losses' hard (multiclass) form is flat: no gradient */
                if (!(fabs(num - dy[i]) <= 1e-7 + 1e-5 * fabs(num)))
                    MP_FAIL("loss %s%s: d/dy[%zu]: analytic %.12g, finite difference %.12g",
                            mp_loss_name((mp_loss_kind)kind), extras ? " (weighted)" : "", i,
                            dy[i], num);
            }
            if (kind != MP_LOSS_MULTICLASS_MCC)
                CHECK_MSG(nonzero > 0, "loss %s: every gradient is 0",
                          mp_loss_name((mp_loss_kind)kind));
        }
    mp_backend_close(b);
}

/* One labelled pair per call: the op's value against the closed form. */
static double loss1(mp_backend *b, mp_loss_kind k, int C, const double *y, double t, int ineq)
{
    double loss[1], dy[8];
    uint8_t mask[1] = { 1 }, iq[1] = { (uint8_t)ineq };
    mp_loss_spec sp = { k, 1, C, 0.2, 1e-8, 0.1, NULL, NULL, ineq ? iq : NULL, 0, 0 };
    b->loss(b, loss, dy, y, &t, mask, 1, &sp);
    return loss[0];
}

MP_TEST(loss_values_match_closed_forms)
{
    mp_backend *b = open_ref64();
    CHECK(b);
    const double pi = 3.14159265358979323846;
    double y1[1] = { 0.3 };
    CHECK_NEAR(loss1(b, MP_LOSS_MAE, 0, y1, -0.5, 0), 0.8, 1e-15, 0);
    CHECK_NEAR(loss1(b, MP_LOSS_RMSE, 0, y1, -0.5, 0), 0.8, 1e-15, 0);
    CHECK_NEAR(loss1(b, MP_LOSS_BOUNDED_MSE, 0, y1, -0.5, 0), 0.64, 1e-15, 0);
    /* ">-0.5" met by 0.3: no loss; "<-0.5" missed: the squared error */
    CHECK_NEAR(loss1(b, MP_LOSS_BOUNDED_MSE, 0, y1, -0.5, MP_INEQ_GT), 0.0, 1e-15, 0);
    CHECK_NEAR(loss1(b, MP_LOSS_BOUNDED_MSE, 0, y1, -0.5, MP_INEQ_LT), 0.64, 1e-15, 0);
    CHECK_NEAR(loss1(b, MP_LOSS_BOUNDED_MAE, 0, y1, 1.0, MP_INEQ_LT), 0.0, 1e-15, 0);
    /* MVE: (mu - t)^2 / (2 var) + log(2 pi var) / 2, var = softplus */
    double ym[2] = { 0.3, -0.4 }, var = softplus(-0.4);
    CHECK_NEAR(loss1(b, MP_LOSS_MVE, 0, ym, 1.1, 0),
               0.64 / (2 * var) + 0.5 * log(2 * pi * var), 1e-13, 1e-13);
    /* evidential (Amini et al. 2020 eq. 8 + lambda (2 nu + alpha) |r|) */
    double ye[4] = { 0.2, 0.5, -0.3, 0.8 };
    double nu = softplus(0.5), al = softplus(-0.3) + 1, be = softplus(0.8), rr = 1.0 - 0.2;
    double om = 2 * be * (1 + nu);
    double ev = 0.5 * log(pi / nu) - al * log(om) + (al + 0.5) * log(nu * rr * rr + om) +
                lgamma(al) - lgamma(al + 0.5) + 0.2 * ((2 * nu + al) * fabs(rr) - 1e-8);
    CHECK_NEAR(loss1(b, MP_LOSS_EVIDENTIAL, 0, ye, 1.0, 0), ev, 1e-12, 1e-12);
    /* quantile, alpha 0.1: pinball at 0.05 (lower) and 0.95 (upper) */
    double yq[2] = { -1.0, 2.0 };
    CHECK_NEAR(loss1(b, MP_LOSS_QUANTILE, 0, yq, 2.5, 0), 0.05 * 3.5 + 0.95 * 0.5, 1e-14, 0);
    CHECK_NEAR(loss1(b, MP_LOSS_QUANTILE, 0, yq, -2.0, 0), 0.95 * 1.0 + 0.05 * 4.0, 1e-14, 0);
    /* cross-entropy over 3 logits */
    double yc[3] = { 0.1, 1.2, -0.7 };
    double lse = log(exp(0.1) + exp(1.2) + exp(-0.7));
    CHECK_NEAR(loss1(b, MP_LOSS_CE, 3, yc, 2, 0), lse + 0.7, 1e-14, 1e-14);
    /* Dirichlet (Sensoy et al. 2018): A + B + lambda KL(Dir(a~) || Dir(1)) */
    double a[3], S = 0;
    for (int c = 0; c < 3; c++)
        S += a[c] = softplus(yc[c]) + 1;
    double A = 0, B = 0, at[3], St = 0;
    for (int c = 0; c < 3; c++) {
        double p = a[c] / S, yy = c == 1;
        A += (yy - p) * (yy - p);
        B += p * (1 - p) / (S + 1);
        St += at[c] = c == 1 ? 1.0 : a[c];
    }
    /* digamma by differences of lgamma (ample at this precision) */
#define DIG(x) ((lgamma((x) + 1e-5) - lgamma((x) - 1e-5)) / 2e-5)
    double kl = lgamma(St) - lgamma(3.0);
    for (int c = 0; c < 3; c++)
        kl += -lgamma(at[c]) + (at[c] - 1) * (DIG(at[c]) - DIG(St));
#undef DIG
    CHECK_NEAR(loss1(b, MP_LOSS_DIRICHLET, 3, yc, 1, 0), A + B + 0.2 * kl, 1e-8, 1e-8);
    /* soft binary MCC of a batch: 1 - (TP TN - FP FN) / sqrt(...) */
    double yb[4] = { 2.0, -1.0, 0.5, -0.2 }, tb[4] = { 1, 0, 0, 1 }, lb[1], db[4];
    uint8_t mb[4] = { 1, 1, 1, 1 };
    mp_loss_spec sb = { MP_LOSS_BINARY_MCC, 1, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0 };
    b->loss(b, lb, db, yb, tb, mb, 4, &sb);
    double tp = 0, fp = 0, tn = 0, fn = 0;
    for (int i = 0; i < 4; i++) {
        double p = 1 / (1 + exp(-yb[i]));
        tp += tb[i] * p;
        fp += (1 - tb[i]) * p;
        tn += (1 - tb[i]) * (1 - p);
        fn += tb[i] * (1 - p);
    }
    double mcc = (tp * tn - fp * fn) / sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn) + 1e-8);
    CHECK_NEAR(lb[0], 1 - mcc, 1e-12, 1e-12);
    /* two tasks, task weights: the mean over tasks of tw (1 - MCC); the same
     * labels in both columns give the same MCC */
    double y2[8], t2[8], tw2[2] = { 0.5, 2.0 };
    uint8_t m2[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    for (int i = 0; i < 4; i++) {
        y2[2 * i] = y2[2 * i + 1] = yb[i];
        t2[2 * i] = t2[2 * i + 1] = tb[i];
    }
    double l2[1], d2[8];
    mp_loss_spec s2 = { MP_LOSS_BINARY_MCC, 2, 0, 0, 0, 0, tw2, NULL, NULL, 0, 0 };
    b->loss(b, l2, d2, y2, t2, m2, 4, &s2);
    CHECK_NEAR(l2[0], (0.5 + 2.0) * (1 - mcc) / 2, 1e-12, 1e-12);
    /* an elementwise loss with task weights (2, 0): 2 l_0 over 2 labelled pairs */
    double ym2[2] = { 0.3, 5.0 }, tm2[2] = { -0.5, 1.0 }, tw3[2] = { 2.0, 0.0 }, l3[1], d3[2];
    uint8_t mm2[2] = { 1, 1 };
    mp_loss_spec s3 = { MP_LOSS_MAE, 2, 0, 0, 0, 0, tw3, NULL, NULL, 0, 0 };
    b->loss(b, l3, d3, ym2, tm2, mm2, 1, &s3);
    CHECK_NEAR(l3[0], 2 * 0.8 / 2, 1e-15, 0);
    CHECK(d3[1] == 0);
    mp_backend_close(b);
}

/* ===================================================================== */
/* Activations                                                            */
/* ===================================================================== */

MP_TEST(gradcheck_activations_double)
{
    mp_backend *b = open_ref64();
    CHECK(b);
    double x[41], y[41], yp[41], ym[41], dy[41], dx[41], a[1] = { 0.3 }, da[1];
    for (int i = 0; i < 41; i++) {
        x[i] = -3 + 0.15 * i + 0.01;   /* off the kinks at 0 */
        dy[i] = 1;
    }
    for (int kind = 0; kind < MP_ACT_COUNT; kind++) {
        b->act(b, y, x, 41, (mp_act_kind)kind, a);
        da[0] = 0;
        b->act_backward(b, dx, da, x, dy, 41, (mp_act_kind)kind, a, 0);
        double dnum_a = 0;
        for (int i = 0; i < 41; i++) {
            double keep = x[i], e = 1e-6;
            x[i] = keep + e;
            b->act(b, yp, x, 41, (mp_act_kind)kind, a);
            x[i] = keep - e;
            b->act(b, ym, x, 41, (mp_act_kind)kind, a);
            x[i] = keep;
            double num = (yp[i] - ym[i]) / (2 * e);
            if (!(fabs(num - dx[i]) <= 1e-8 + 1e-6 * fabs(num)))
                MP_FAIL("activation %s: f'(%g): analytic %.12g, finite difference %.12g",
                        mp_act_name((mp_act_kind)kind), x[i], dx[i], num);
        }
        if (kind == MP_ACT_PRELU) {
            double keep = a[0], e = 1e-6, s[2] = { 0, 0 };
            for (int k = 0; k < 2; k++) {
                a[0] = keep + (k ? -e : e);
                b->act(b, yp, x, 41, MP_ACT_PRELU, a);
                for (int i = 0; i < 41; i++)
                    s[k] += yp[i];
            }
            a[0] = keep;
            dnum_a = (s[0] - s[1]) / (2 * e);
            CHECK_NEAR(da[0], dnum_a, 1e-7, 1e-6);
        }
    }
    /* the values themselves at a point */
    double p[1] = { 1.5 }, q[1];
    b->act(b, q, p, 1, MP_ACT_GELU, NULL);
    CHECK_NEAR(q[0], 0.5 * 1.5 * (1 + erf(1.5 / sqrt(2.0))), 1e-15, 1e-15);
    p[0] = -1.5;
    b->act(b, q, p, 1, MP_ACT_SELU, NULL);
    CHECK_NEAR(q[0], 1.0507009873554805 * 1.6732632423543772 * expm1(-1.5), 1e-15, 1e-15);
    b->act(b, q, p, 1, MP_ACT_LEAKYRELU, NULL);
    CHECK_NEAR(q[0], -0.15, 1e-15, 0);
    mp_backend_close(b);
}

/* ===================================================================== */
/* Whole models                                                           */
/* ===================================================================== */

static mp_model_config small(void)
{
    mp_model_config c = mp_model_config_default();
    c.atom_fdim = 12;
    c.hidden = 5;
    c.ffn_hidden = 4;
    c.n_tasks = 2;
    return c;
}

typedef struct {
    const char *name;
    mp_model_config cfg;
} mc_case;

#define N_MODEL_CASES 16

static mc_case model_case(int i)
{
    mc_case k = { NULL, small() };
    mp_model_config *c = &k.cfg;
    switch (i) {
    case 0: k.name = "regression-mve"; c->task = MP_MODEL_REGRESSION_MVE; break;
    case 1: k.name = "regression-evidential, lambda 0.2"; c->task = MP_MODEL_REGRESSION_EVIDENTIAL;
        c->loss_lambda = 0.2; break;
    case 2: k.name = "regression-quantile"; c->task = MP_MODEL_REGRESSION_QUANTILE; break;
    case 3: k.name = "classification-dirichlet"; c->task = MP_MODEL_CLASSIFICATION_DIRICHLET;
        c->loss_lambda = 0.2; break;
    case 4: k.name = "multiclass, 3 classes"; c->task = MP_MODEL_MULTICLASS; c->n_classes = 3;
        break;
    case 5: k.name = "multiclass-dirichlet, 4 classes"; c->task = MP_MODEL_MULTICLASS_DIRICHLET;
        c->n_classes = 4; c->loss_lambda = 0.2; break;
    case 6: k.name = "classification, binary-mcc"; c->task = MP_MODEL_CLASSIFICATION;
        c->loss = MP_LOSS_BINARY_MCC; break;
    case 7: k.name = "regression, mae"; c->loss = MP_LOSS_MAE; break;
    case 8: k.name = "gelu, depth 3"; c->activation = MP_ACT_GELU; break;
    case 9: k.name = "prelu, 3 FFN layers"; c->activation = MP_ACT_PRELU; c->ffn_layers = 3;
        break;
    case 10: k.name = "elu, undirected"; c->activation = MP_ACT_ELU; c->undirected = 1; break;
    case 11: k.name = "atom messages"; c->atom_messages = 1; break;
    case 12: k.name = "atom messages, tanh, depth 2"; c->atom_messages = 1;
        c->activation = MP_ACT_TANH; c->depth = 2; break;
    case 13: k.name = "attentive readout"; c->aggregation = MP_AGG_ATTENTIVE; break;
    case 14: k.name = "batch norm, extra features"; c->batch_norm = 1; c->extra_dim = 3; break;
    default: k.name = "selu, attentive, batch norm, dropout"; c->activation = MP_ACT_SELU;
        c->aggregation = MP_AGG_ATTENTIVE; c->batch_norm = 1; c->dropout = 0.2; break;
    }
    return k;
}

MP_TEST(gradcheck_models_of_the_training_options_double)
{
    mp_backend *b = open_ref64();
    CHECK(b);
    for (int ci = 0; ci < N_MODEL_CASES; ci++) {
        mc_case k = model_case(ci);
        const mp_model_config *c = &k.cfg;
        const int32_t nm = 7;
        mp_rng r;
        mp_rng_seed(&r, 500 + ci, 0);
        mp_graphs g;
        rg_opts o = { 1, 7, 0.15, 0.15, 2 };
        CHECK(rg_make(&g, &r, nm, c->atom_fdim, &o));
        float extra[7 * 3], tgt[7 * 2], wts[7];
        for (int i = 0; i < 7 * 3; i++)
            extra[i] = (float)(2 * mp_rng_uniform(&r) - 1);
        for (int i = 0; i < nm * c->n_tasks; i++) {
            double u = mp_rng_uniform(&r);
            tgt[i] = mp_head_is_multiclass(c->task) ? (float)mp_rng_below(&r, (uint64_t)c->n_classes)
                     : mp_head_is_binary(c->task) ? (float)(u < 0.5) : (float)(2 * u - 1);
            if (i > 1 && mp_rng_uniform(&r) < 0.2)
                tgt[i] = NAN;
        }
        for (int i = 0; i < nm; i++)
            wts[i] = (float)(0.5 + mp_rng_uniform(&r));
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, c, b, 11 + ci));
        float tw[2] = { 0.6f, 1.4f };
        CHECK_OK(mp_model_set_task_weights(m, tw));
        size_t np = mp_model_n_params(m);
        double *p = mp_model_block_ptr(m, MP_BLOCK_PARAMS);
        double *gr = mp_model_block_ptr(m, MP_BLOCK_GRADS);
        mp_rng jr;
        mp_rng_seed(&jr, 900 + ci, 0);
        for (size_t i = 0; i < np; i++)
            p[i] += 0.1 * mp_rng_normal(&jr);
        double *p0 = malloc(np * sizeof *p0), *grad = malloc(np * sizeof *grad);
        CHECK(p0 && grad);
        memcpy(p0, p, np * sizeof *p0);
        mp_rng saved = m->drop_rng;
        const float *ex = c->extra_dim ? extra : NULL;
        double loss;
        mp_model_zero_grad(m);
        CHECK_OK(mp_model_forward(m, &g, ex, nm, 1, NULL));
        CHECK_OK(mp_model_loss_backward_ex(m, tgt, wts, NULL, &loss));
        memcpy(grad, gr, np * sizeof *grad);
        int nonzero = 0;
        double worst = 0;
        for (size_t i = 0; i < np; i++) {
            double e = 1e-6, f[2];
            for (int s = 0; s < 2; s++) {
                memcpy(p, p0, np * sizeof *p);   /* batch norm moves its running stats */
                p[i] = p0[i] + (s ? -e : e);
                m->drop_rng = saved;
                CHECK_OK(mp_model_forward(m, &g, ex, nm, 1, NULL));
                CHECK_OK(mp_model_loss_backward_ex(m, tgt, wts, NULL, &f[s]));
            }
            double num = (f[0] - f[1]) / (2 * e), err = fabs(num - grad[i]);
            worst = err > worst ? err : worst;
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
        memcpy(p, p0, np * sizeof *p);
        printf("    %-40s %4zu parameters, %4d with nonzero gradient, worst |error| %.2g\n",
               k.name, np, nonzero, worst);
        CHECK(nonzero > (int)np / 2);
        free(p0);
        free(grad);
        mp_model_free(m);
        mp_graphs_free(&g);
    }
    mp_backend_close(b);
}
