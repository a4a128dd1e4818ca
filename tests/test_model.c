/*
 * test_model.c - the models as a trainer sees them: defaults and parameter
 * layout, Xavier init, the forward pass against an independent dense
 * re-statement of Chemprop v1's MPNEncoder (padded BatchMolGraph layout,
 * 147-wide edge inputs, torch-layout weights), batch invariance,
 * determinism (same seed; 1 vs 2 threads), a small overfit, graph batch
 * selection, and refusals: bad configs, bad batches, allocation failures.
 */
#include "test.h"
#include "gpu_test.h"
#include "models/model_impl.h"
#include "models/model_state.h"
#include "randgraph.h"

#include <stdlib.h>

static mp_backend *open_b(const char *name)
{
    mp_backend *b = NULL;
    return mp_backend_open(&b, name) == MP_OK ? b : NULL;
}

/* ===================================================================== */
/* Configuration and parameters                                           */
/* ===================================================================== */

MP_TEST(model_defaults_and_parameter_layout)
{
    mp_model_config c = mp_model_config_default();
    CHECK(c.kind == MP_MODEL_DMPNN && c.hidden == 300 && c.depth == 3 && c.dropout == 0 &&
          c.ffn_layers == 2 && c.atom_fdim == 133 && c.aggregation == MP_AGG_MEAN &&
          c.agg_norm == 100 && c.n_tasks == 1 && c.extra_dim == 0);
    mp_backend *b = open_b("cpu");
    CHECK(b);
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &c, b, 0));
    /* REFERENCE.md 2.2: 44,100 + 90,000 + 130,200 + 90,601 */
    CHECK_EQ_INT(mp_model_n_params(m), 354901);
    int nv;
    const mp_param_view *v = mp_model_views(m, &nv);
    static const struct { const char *name; size_t off; int rows, cols; } want[] = {
        { "W_i", 0, 147, 300 },      { "W_h", 44100, 300, 300 },  { "W_o", 134100, 433, 300 },
        { "b_o", 264000, 1, 300 },   { "ffn0.W", 264300, 300, 300 }, { "ffn0.b", 354300, 1, 300 },
        { "ffn1.W", 354600, 300, 1 }, { "ffn1.b", 354900, 1, 1 },
    };
    CHECK_EQ_INT(nv, 8);
    for (int i = 0; i < nv; i++) {
        CHECK_EQ_STR(v[i].name, want[i].name);
        CHECK_EQ_INT(v[i].offset, want[i].off);
        CHECK_EQ_INT(v[i].rows, want[i].rows);
        CHECK_EQ_INT(v[i].cols, want[i].cols);
    }
    /* Xavier normal: std sqrt(2 / (fan_in + fan_out)); biases zero */
    float *p = malloc(354901 * sizeof *p);
    CHECK(p);
    CHECK_OK(mp_model_get_params(m, p));
    for (int i = 0; i < nv; i++) {
        double s = 0, s2 = 0;
        size_t n = (size_t)v[i].rows * v[i].cols;
        for (size_t k = 0; k < n; k++) {
            s += p[v[i].offset + k];
            s2 += (double)p[v[i].offset + k] * p[v[i].offset + k];
        }
        if (strchr(v[i].name, 'b')) {
            CHECK(s2 == 0);
            continue;
        }
        double std = sqrt(s2 / n), want_std = sqrt(2.0 / (v[i].rows + v[i].cols));
        if (n >= 1000) {
            CHECK_NEAR(std, want_std, 0, 0.03);
            CHECK_NEAR(s / n, 0, 4 * want_std / sqrt((double)n), 0);
        }
    }
    /* set / get round trip; a NaN is refused */
    p[5] = 0.125f;
    CHECK_OK(mp_model_set_params(m, p));
    float q = 0;
    float *back = malloc(354901 * sizeof *back);
    CHECK_OK(mp_model_get_params(m, back));
    q = back[5];
    CHECK(q == 0.125f && memcmp(p, back, 354901 * sizeof *p) == 0);
    p[7] = NAN;
    CHECK(mp_model_set_params(m, p) == MP_ERR_FORMAT);
    free(p);
    free(back);
    mp_model_free(m);

    /* FFN on 2048 Morgan bits: 2048*300+300 + 300+1 */
    c.kind = MP_MODEL_FFN;
    c.extra_dim = 2048;
    CHECK_OK(mp_model_create(&m, &c, b, 0));
    CHECK_EQ_INT(mp_model_n_params(m), 615001);
    mp_model_free(m);
    mp_backend_close(b);
}

MP_TEST(model_config_refusals)
{
    mp_backend *b = open_b("cpu");
    CHECK(b);
    struct { const char *field; mp_model_config c; } bad[10];
    for (int i = 0; i < 10; i++)
        bad[i].c = mp_model_config_default();
    bad[0].field = "depth";       bad[0].c.depth = 0;
    bad[1].field = "hidden";      bad[1].c.hidden = 0;
    bad[2].field = "dropout";     bad[2].c.dropout = 1.0;
    bad[3].field = "ffn_layers";  bad[3].c.ffn_layers = 0;
    bad[4].field = "n_tasks";     bad[4].c.n_tasks = 0;
    bad[5].field = "atom_fdim";   bad[5].c.atom_fdim = 1;
    bad[6].field = "extra";       bad[6].c.kind = MP_MODEL_FFN;   /* no input features */
    bad[7].field = "norm";        bad[7].c.aggregation = MP_AGG_NORM; bad[7].c.agg_norm = 0;
    bad[8].field = "kind";        bad[8].c.kind = (mp_model_kind)7;
    bad[9].field = "dropout";     bad[9].c.dropout = NAN;
    long live = mp_alloc_live();
    for (int i = 0; i < 10; i++) {
        mp_model *m = (mp_model *)1;
        CHECK(mp_model_create(&m, &bad[i].c, b, 0) == MP_ERR_ARG && m == NULL);
        CHECK_MSG(strstr(mp_error_message(), bad[i].field) != NULL, "message \"%s\" does not name %s",
                  mp_error_message(), bad[i].field);
    }
    CHECK_EQ_INT(mp_alloc_live(), live);
    mp_backend_close(b);
}

/* ===================================================================== */
/* The forward pass against Chemprop v1's formulation                     */
/* ===================================================================== */

/* Chemprop v1's MPN + FFN, restated densely from REFERENCE.md 2.1 / 2.2 in
 * the padded BatchMolGraph layout (row 0 of atoms and bonds is zero
 * padding, a2b padded with 0), with torch-layout weights W[out][in] taken
 * from the model's [in x out] block.  Inference only.  out: [n_mols x T]. */
static void chemprop_dense_forward(const mp_model_config *c, const double *prm,
                                   const mp_param_view *v, const mp_graphs *g,
                                   const float *extra, double *out)
{
    const int F = c->atom_fdim, BF = F + MP_BOND_FDIM, h = c->hidden;
    const int nA = g->n_atoms + 1, nB = g->n_edges + 1;
    double *fa = calloc((size_t)nA * F, sizeof *fa), *fb = calloc((size_t)nB * BF, sizeof *fb);
    int max_in = 1;
    for (int a = 0; a < g->n_atoms; a++)
        if (g->in_start[a + 1] - g->in_start[a] > max_in)
            max_in = g->in_start[a + 1] - g->in_start[a];
    int *a2b = calloc((size_t)nA * max_in, sizeof *a2b), *b2a = calloc((size_t)nB, sizeof *b2a);
    int *b2revb = calloc((size_t)nB, sizeof *b2revb);
    for (int a = 0; a < g->n_atoms; a++) {
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
            if (g->atom_hot[a * MP_ATOM_MAX_HOT + q] >= 0)
                fa[(size_t)(a + 1) * F + g->atom_hot[a * MP_ATOM_MAX_HOT + q]] = 1;
        fa[(size_t)(a + 1) * F + F - 1] = g->atom_mass[a];
        for (int k = g->in_start[a]; k < g->in_start[a + 1]; k++)
            a2b[(a + 1) * max_in + (k - g->in_start[a])] = g->in_edge[k] + 1;
    }
    for (int e = 0; e < g->n_edges; e++) {
        double *row = fb + (size_t)(e + 1) * BF;
        memcpy(row, fa + (size_t)(g->edge_src[e] + 1) * F, (size_t)F * sizeof *row);
        for (int q = 0; q < MP_BOND_MAX_HOT; q++)
            if (g->bond_hot[(e / 2) * MP_BOND_MAX_HOT + q] >= 0)
                row[F + g->bond_hot[(e / 2) * MP_BOND_MAX_HOT + q]] = 1;
        b2a[e + 1] = g->edge_src[e] + 1;
        b2revb[e + 1] = (e ^ 1) + 1;
    }
    /* torch: y = x W^T with W[out][in]; ours stores [in][out], i.e. W^T */
#define WT(view, in, o) prm[v[view].offset + (size_t)(in) * v[view].cols + (o)]
    double *input = calloc((size_t)nB * h, sizeof *input), *msg = calloc((size_t)nB * h, sizeof *msg);
    double *amsg = calloc((size_t)nA * h, sizeof *amsg), *tmp = calloc((size_t)nB * h, sizeof *tmp);
    for (int b = 0; b < nB; b++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int k = 0; k < BF; k++)
                s += fb[(size_t)b * BF + k] * WT(0, k, j);
            input[(size_t)b * h + j] = s;
            msg[(size_t)b * h + j] = s > 0 ? s : 0;
        }
    for (int d = 0; d < c->depth - 1; d++) {
        for (int a = 0; a < nA; a++)
            for (int j = 0; j < h; j++) {
                double s = 0;
                for (int q = 0; q < max_in; q++)
                    s += msg[(size_t)a2b[a * max_in + q] * h + j];
                amsg[(size_t)a * h + j] = s;
            }
        for (int b = 0; b < nB; b++)
            for (int j = 0; j < h; j++)
                tmp[(size_t)b * h + j] = amsg[(size_t)b2a[b] * h + j] - msg[(size_t)b2revb[b] * h + j];
        for (int b = 0; b < nB; b++)
            for (int j = 0; j < h; j++) {
                double s = 0;
                for (int k = 0; k < h; k++)
                    s += tmp[(size_t)b * h + k] * WT(1, k, j);
                s += input[(size_t)b * h + j];
                msg[(size_t)b * h + j] = s > 0 ? s : 0;
            }
    }
    for (int a = 0; a < nA; a++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int q = 0; q < max_in; q++)
                s += msg[(size_t)a2b[a * max_in + q] * h + j];
            amsg[(size_t)a * h + j] = s;
        }
    double *hid = calloc((size_t)nA * h, sizeof *hid);
    for (int a = 0; a < nA; a++)
        for (int j = 0; j < h; j++) {
            double s = prm[v[3].offset + j];
            for (int k = 0; k < F; k++)
                s += fa[(size_t)a * F + k] * WT(2, k, j);
            for (int k = 0; k < h; k++)
                s += amsg[(size_t)a * h + k] * WT(2, F + k, j);
            hid[(size_t)a * h + j] = s > 0 ? s : 0;
        }
    /* readout, features, FFN */
    int I = h + c->extra_dim, Fh = c->ffn_hidden ? c->ffn_hidden : h, T = c->n_tasks;
    double *x = calloc((size_t)I + Fh + T, sizeof *x), *y = calloc((size_t)Fh + T, sizeof *y);
    for (int i = 0; i < g->n_mols; i++) {
        int a0 = g->mol_atom[i], n = g->mol_atom[i + 1] - a0;
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int a = 0; a < n; a++)
                s += hid[(size_t)(a0 + a + 1) * h + j];
            x[j] = n == 0 ? 0 : c->aggregation == MP_AGG_MEAN ? s / n
                 : c->aggregation == MP_AGG_NORM ? s / c->agg_norm : s;
        }
        for (int j = 0; j < c->extra_dim; j++)
            x[h + j] = extra[(size_t)i * c->extra_dim + j];
        int din = I;
        for (int l = 0; l < c->ffn_layers; l++) {
            int last = l == c->ffn_layers - 1, dout = last ? T : Fh, vw = 4 + 2 * l;
            for (int o = 0; o < dout; o++) {
                double s = prm[v[vw + 1].offset + o];
                for (int k = 0; k < din; k++)
                    s += x[k] * WT(vw, k, o);
                y[o] = last ? s : (s > 0 ? s : 0);
            }
            memcpy(x, y, (size_t)dout * sizeof *x);
            din = dout;
        }
        memcpy(out + (size_t)i * T, x, (size_t)T * sizeof *out);
    }
#undef WT
    free(fa); free(fb); free(a2b); free(b2a); free(b2revb); free(input); free(msg);
    free(amsg); free(tmp); free(hid); free(x); free(y);
}

MP_TEST(model_forward_matches_chemprop_dense_formulation)
{
    mp_backend *r64 = open_b("ref64"), *cpu = open_b("cpu");
    CHECK(r64 && cpu);
    for (int ci = 0; ci < 3; ci++) {
        mp_model_config c = mp_model_config_default();
        c.hidden = 16;
        c.n_tasks = 2;
        if (ci == 1) {
            c.depth = 4;
            c.aggregation = MP_AGG_SUM;
            c.extra_dim = 3;
            c.ffn_layers = 3;
            c.ffn_hidden = 11;
        } else if (ci == 2) {
            c.depth = 1;
            c.aggregation = MP_AGG_NORM;
            c.ffn_layers = 1;
            c.atom_fdim = 44;
        }
        mp_rng r;
        mp_rng_seed(&r, 40 + ci, 0);
        rg_opts o = { 1, 14, 0.1, 0.1, 3 };
        mp_graphs g;
        CHECK(rg_make(&g, &r, 12, c.atom_fdim, &o));
        float extra[12 * 3];
        for (int i = 0; i < 36; i++)
            extra[i] = (float)mp_rng_normal(&r);
        mp_model *md = NULL, *mc = NULL;
        CHECK_OK(mp_model_create(&md, &c, r64, 3));
        CHECK_OK(mp_model_create(&mc, &c, cpu, 3));
        /* nonzero biases, so the bias paths are exercised too */
        size_t np = mp_model_n_params(md);
        double *pd = mp_model_block_ptr(md, MP_BLOCK_PARAMS);
        float *pf = malloc(np * sizeof *pf);
        for (size_t i = 0; i < np; i++) {
            pf[i] = (float)(pd[i] + 0.05 * mp_rng_normal(&r));
            pd[i] = pf[i];
        }
        CHECK_OK(mp_model_set_params(mc, pf));
        int nv;
        const mp_param_view *v = mp_model_views(md, &nv);
        double want[12 * 2];
        chemprop_dense_forward(&c, pd, v, &g, extra, want);
        float got[12 * 2];
        CHECK_OK(mp_model_forward(md, &g, extra, g.n_mols, 0, got));
        const double *yd = mp_model_block_ptr(md, MP_BLOCK_OUTPUT);
        double scale = 0;
        for (int i = 0; i < 24; i++)
            scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
        CHECK(scale > 1e-3);
        for (int i = 0; i < 24; i++)
            CHECK_NEAR(yd[i], want[i], 1e-12 * scale, 1e-10);
        CHECK_OK(mp_model_forward(mc, &g, extra, g.n_mols, 0, got));
        for (int i = 0; i < 24; i++)
            CHECK_NEAR(got[i], want[i], 1e-5 * scale, 1e-4);
        free(pf);
        mp_model_free(md);
        mp_model_free(mc);
        mp_graphs_free(&g);
    }
    mp_backend_close(r64);
    mp_backend_close(cpu);
}

/* ===================================================================== */
/* Batches                                                                */
/* ===================================================================== */

MP_TEST(model_graphs_select)
{
    mp_rng r;
    mp_rng_seed(&r, 50, 0);
    rg_opts o = { 1, 9, 0.2, 0.2, 2 };
    mp_graphs g, s;
    CHECK(rg_make(&g, &r, 10, 20, &o));
    memset(&s, 0, sizeof s);
    const int32_t pick[] = { 3, 0, 3, 9, 5, 1 };
    for (int round = 0; round < 2; round++) {   /* the second reuses the buffers */
        int32_t n = round ? 3 : 6;
        CHECK_OK(mp_graphs_select(&s, &g, pick, n));
        CHECK_OK(mp_batch_check(&s, 20));
        CHECK_EQ_INT(s.n_mols, n);
        for (int32_t i = 0; i < n; i++) {
            int32_t m = pick[i], a0 = g.mol_atom[m], b0 = s.mol_atom[i];
            int32_t e0 = g.mol_edge[m], f0 = s.mol_edge[i];
            CHECK_EQ_INT(s.mol_atom[i + 1] - b0, g.mol_atom[m + 1] - a0);
            CHECK_EQ_INT(s.mol_edge[i + 1] - f0, g.mol_edge[m + 1] - e0);
            CHECK_EQ_INT(s.valid[i], g.valid[m]);
            for (int32_t a = 0; a < g.mol_atom[m + 1] - a0; a++) {
                CHECK(memcmp(s.atom_hot + (size_t)(b0 + a) * MP_ATOM_MAX_HOT,
                             g.atom_hot + (size_t)(a0 + a) * MP_ATOM_MAX_HOT,
                             MP_ATOM_MAX_HOT * sizeof(int16_t)) == 0);
                CHECK(s.atom_mass[b0 + a] == g.atom_mass[a0 + a]);
                CHECK_EQ_INT(s.in_start[b0 + a + 1] - s.in_start[b0 + a],
                             g.in_start[a0 + a + 1] - g.in_start[a0 + a]);
            }
            for (int32_t e = 0; e < g.mol_edge[m + 1] - e0; e++) {
                CHECK_EQ_INT(s.edge_src[f0 + e] - b0, g.edge_src[e0 + e] - a0);
                CHECK_EQ_INT(s.edge_dst[f0 + e] - b0, g.edge_dst[e0 + e] - a0);
                CHECK(memcmp(s.bond_hot + (size_t)(f0 + e) / 2 * MP_BOND_MAX_HOT,
                             g.bond_hot + (size_t)(e0 + e) / 2 * MP_BOND_MAX_HOT, MP_BOND_MAX_HOT) == 0);
            }
        }
    }
    /* refusals leave the output as it was */
    int32_t bad[] = { 1, 10 };
    int32_t before = s.n_mols;
    CHECK(mp_graphs_select(&s, &g, bad, 2) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "10") != NULL);
    CHECK_EQ_INT(s.n_mols, before);
    bad[1] = -1;
    CHECK(mp_graphs_select(&s, &g, bad, 2) == MP_ERR_ARG);
    CHECK_OK(mp_graphs_select(&s, &g, NULL, 0));
    CHECK(s.n_mols == 0 && s.n_atoms == 0 && s.mol_atom[0] == 0);
    /* bounds: the sums of the largest molecules */
    int32_t ma, me;
    mp_graphs_batch_bounds(&g, NULL, 0, 3, &ma, &me);
    int32_t na[10], ne[10];
    for (int i = 0; i < 10; i++) {
        na[i] = g.mol_atom[i + 1] - g.mol_atom[i];
        ne[i] = g.mol_edge[i + 1] - g.mol_edge[i];
    }
    for (int k = 0; k < 3; k++)   /* three passes of selection: take the max, zero it */
        for (int w = 0; w < 2; w++) {
            int32_t *x = w ? ne : na, bi = 0;
            for (int i = 1; i < 10; i++)
                if (x[i] > x[bi])
                    bi = i;
            if (w) me -= x[bi]; else ma -= x[bi];
            x[bi] = 0;
        }
    CHECK(ma == 0 && me == 0);
    mp_graphs_free(&s);
    mp_graphs_free(&g);
}

MP_TEST(model_batch_invariance_and_empty_batch)
{
    mp_backend *cpu = open_b("cpu");
    CHECK(cpu);
    mp_rng r;
    mp_rng_seed(&r, 60, 0);
    rg_opts o = { 1, 20, 0.15, 0.1, 2 };
    mp_graphs g, one;
    CHECK(rg_make(&g, &r, 25, 133, &o));
    memset(&one, 0, sizeof one);
    mp_model_config c = mp_model_config_default();
    c.hidden = 64;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &c, cpu, 9));
    /* reserve for a small batch: the forward over all 25 must grow it */
    CHECK_OK(mp_model_reserve(m, 2, 10, 10));
    float all[25], single;
    CHECK_OK(mp_model_forward(m, &g, NULL, g.n_mols, 0, all));
    CHECK(m->cap_mols >= 25 && m->cap_atoms >= g.n_atoms && m->cap_edges >= g.n_edges);
    for (int32_t i = 0; i < g.n_mols; i++) {
        CHECK_OK(mp_graphs_select(&one, &g, &i, 1));
        CHECK_OK(mp_model_forward(m, &one, NULL, 1, 0, &single));
        CHECK_NEAR(single, all[i], 1e-6, 1e-5);
    }
    /* a batch of invalid molecules only (no atoms at all): every readout is
     * the zero vector, so every output is the head's output for zeros */
    int32_t empty_ids[3], ne_ = 0;
    for (int32_t i = 0; i < g.n_mols && ne_ < 3; i++)
        if (g.mol_atom[i + 1] == g.mol_atom[i])
            empty_ids[ne_++] = i;
    CHECK(ne_ >= 2);
    float eo[3];
    CHECK_OK(mp_graphs_select(&one, &g, empty_ids, ne_));
    CHECK_EQ_INT(one.n_atoms, 0);
    CHECK_OK(mp_model_forward(m, &one, NULL, ne_, 0, eo));
    for (int i = 0; i < ne_; i++) {
        CHECK_NEAR(eo[i], all[empty_ids[i]], 1e-6, 1e-6);
        CHECK_NEAR(eo[i], eo[0], 1e-6, 1e-6);
    }
    /* an empty batch is fine, and a backward after it gives loss 0 */
    CHECK_OK(mp_graphs_select(&one, &g, NULL, 0));
    CHECK_OK(mp_model_forward(m, &one, NULL, 0, 1, NULL));
    double loss = -1;
    CHECK_OK(mp_model_loss_backward(m, NULL, &loss));
    CHECK(loss == 0);
    mp_model_free(m);
    mp_graphs_free(&one);
    mp_graphs_free(&g);
    mp_backend_close(cpu);
}

MP_TEST(model_refuses_bad_batches)
{
    mp_backend *cpu = open_b("cpu");
    CHECK(cpu);
    mp_rng r;
    mp_rng_seed(&r, 70, 0);
    rg_opts o = { 3, 8, 0, 0, 1 };
    mp_graphs g;
    CHECK(rg_make(&g, &r, 4, 30, &o));
    mp_model_config c = mp_model_config_default();
    c.atom_fdim = 30;
    c.hidden = 8;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &c, cpu, 1));
    float out[4], tgt[4] = { 0, 1, NAN, 2 };
    double loss;
    CHECK(mp_model_loss_backward(m, tgt, &loss) == MP_ERR_ARG);   /* no forward yet */
    CHECK_OK(mp_model_forward(m, &g, NULL, 4, 1, out));

#define EXPECT_BAD(mutate, undo, word)                                                   \
    do {                                                                                 \
        mutate;                                                                          \
        mp_status st_ = mp_model_forward(m, &g, NULL, 4, 1, out);                        \
        undo;                                                                            \
        CHECK_MSG(st_ == MP_ERR_FORMAT && strstr(mp_error_message(), word),              \
                  "%s: got %s \"%s\"", #mutate, mp_status_name(st_), mp_error_message()); \
        CHECK(mp_model_loss_backward(m, tgt, &loss) == MP_ERR_ARG);                      \
    } while (0)
    int16_t hs = g.atom_hot[3];
    EXPECT_BAD(g.atom_hot[3] = 29, g.atom_hot[3] = hs, "hot slot");    /* the mass slot */
    EXPECT_BAD(g.atom_hot[3] = -2, g.atom_hot[3] = hs, "hot slot");
    int8_t bs = g.bond_hot[0];
    EXPECT_BAD(g.bond_hot[0] = 14, g.bond_hot[0] = bs, "bond");
    int32_t es = g.edge_src[1];
    EXPECT_BAD(g.edge_src[1] = g.n_atoms + 5, g.edge_src[1] = es, "edge");
    EXPECT_BAD(g.edge_src[1] = g.mol_atom[1], g.edge_src[1] = es, "edge");   /* next molecule */
    int32_t ie = g.in_edge[0];
    EXPECT_BAD(g.in_edge[0] = 1 << 30, g.in_edge[0] = ie, "incoming");
    int32_t is = g.in_start[1];
    EXPECT_BAD(g.in_start[1] = 1 << 30, g.in_start[1] = is, "offsets");
    float ms = g.atom_mass[0];
    EXPECT_BAD(g.atom_mass[0] = NAN, g.atom_mass[0] = ms, "mass");
    EXPECT_BAD(g.atom_fdim = 31, g.atom_fdim = 30, "31");
    /* the wrong molecule count, missing features, infinite targets */
    CHECK(mp_model_forward(m, &g, NULL, 3, 1, out) == MP_ERR_ARG);
    CHECK(mp_model_forward(m, NULL, NULL, 4, 1, out) == MP_ERR_ARG);
    /* the model still works */
    CHECK_OK(mp_model_forward(m, &g, NULL, 4, 1, out));
    tgt[1] = INFINITY;
    CHECK(mp_model_loss_backward(m, tgt, &loss) == MP_ERR_ARG);
    tgt[1] = 1;
    CHECK_OK(mp_model_loss_backward(m, tgt, &loss));
    CHECK(isfinite(loss) && loss > 0);
    CHECK(mp_model_adam_step(m, NAN) == MP_ERR_ARG);
    mp_model_free(m);

    c.kind = MP_MODEL_FFN;
    c.extra_dim = 5;
    CHECK_OK(mp_model_create(&m, &c, cpu, 1));
    CHECK(mp_model_forward(m, NULL, NULL, 4, 0, out) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "features") != NULL);
    mp_model_free(m);
    mp_graphs_free(&g);
    mp_backend_close(cpu);
}

/* Every allocation made while creating, sizing and running a model can fail
 * without a crash or a leak. */
MP_TEST(model_allocation_failures)
{
    mp_rng r;
    mp_rng_seed(&r, 80, 0);
    rg_opts o = { 1, 8, 0.1, 0.1, 1 };
    mp_graphs g;
    CHECK(rg_make(&g, &r, 6, 133, &o));
    float tgt[6] = { 1, 0, 1, 0, 1, 0 }, out[6];
    long live = mp_alloc_live();
    int succeeded = 0;
    for (long k = 0; k < 200 && !succeeded; k++) {
        mp_alloc_fail_after(k);
        mp_backend *b = NULL;
        mp_model *m = NULL;
        mp_model_config c = mp_model_config_default();
        c.hidden = 8;
        c.dropout = 0.1;
        mp_status st = mp_backend_open(&b, "cpu");
        if (st == MP_OK)
            st = mp_model_create(&m, &c, b, 1);
        if (st == MP_OK)
            st = mp_model_forward(m, &g, NULL, 6, 1, out);
        double loss;
        if (st == MP_OK)
            st = mp_model_loss_backward(m, tgt, &loss);
        mp_alloc_fail_after(-1);
        CHECK_MSG(st == MP_OK || st == MP_ERR_NOMEM, "allocation %ld: %s", k, mp_status_name(st));
        succeeded = st == MP_OK;
        mp_model_free(m);
        mp_backend_close(b);
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    CHECK(succeeded);
    mp_graphs_free(&g);
}

/* ===================================================================== */
/* Training                                                               */
/* ===================================================================== */

/* A few Adam steps over two batches; returns the parameters (malloc'd). */
static float *train_some(mp_backend *b, const mp_graphs *g, const mp_model_config *c,
                         uint64_t seed, int steps, double *last_loss)
{
    mp_model *m = NULL;
    if (mp_model_create(&m, c, b, seed) != MP_OK)
        return NULL;
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    float tgt[20];
    for (int i = 0; i < 20; i++)
        tgt[i] = (float)sin(i * 1.7);
    int32_t idx[20];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 20; i++)
            idx[i] = (s % 2) * 20 + i;
        mp_model_zero_grad(m);
        if (mp_graphs_select(&batch, g, idx, 20) != MP_OK ||
            mp_model_forward(m, &batch, NULL, 20, 1, NULL) != MP_OK ||
            mp_model_loss_backward(m, tgt, last_loss) != MP_OK ||
            mp_model_adam_step(m, 1e-3) != MP_OK)
            return NULL;
    }
    float *p = malloc(mp_model_n_params(m) * sizeof *p);
    if (p && mp_model_get_params(m, p) != MP_OK) {
        free(p);
        p = NULL;
    }
    mp_graphs_free(&batch);
    mp_model_free(m);
    return p;
}

MP_TEST(model_deterministic_same_seed_and_any_thread_count)
{
    mp_backend *cpu = open_b("cpu");
    CHECK(cpu);
    mp_rng r;
    mp_rng_seed(&r, 90, 0);
    rg_opts o = { 4, 24, 0.05, 0.05, 2 };
    mp_graphs g;
    CHECK(rg_make(&g, &r, 40, 133, &o));
    mp_model_config c = mp_model_config_default();
    c.hidden = 300;  /* big enough that gemms split into blocks and ops thread */
    c.dropout = 0.1;
    size_t np;
    {
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, &c, cpu, 1));
        np = mp_model_n_params(m);
        mp_model_free(m);
    }
    double l1, l2, l3, l4;
    mp_threads_set(2);
    float *a = train_some(cpu, &g, &c, 1, 6, &l1);
    float *b = train_some(cpu, &g, &c, 1, 6, &l2);
    mp_threads_set(1);
    float *d = train_some(cpu, &g, &c, 1, 6, &l3);
    mp_threads_set(0);
    float *e = train_some(cpu, &g, &c, 2, 6, &l4);
    CHECK(a && b && d && e);
    CHECK(memcmp(a, b, np * sizeof *a) == 0 && l1 == l2);
    CHECK_MSG(memcmp(a, d, np * sizeof *a) == 0 && l1 == l3,
              "1 and 2 threads differ (loss %.9g vs %.9g)", l1, l3);
    CHECK(memcmp(a, e, np * sizeof *a) != 0);
    free(a); free(b); free(d); free(e);
    mp_graphs_free(&g);
    mp_backend_close(cpu);
}

MP_TEST(model_overfits_a_few_molecules)
{
    mp_backend *cpu = open_b("cpu");
    CHECK(cpu);
    mp_rng r;
    mp_rng_seed(&r, 95, 0);
    rg_opts o = { 5, 15, 0, 0, 2 };
    mp_graphs g;
    CHECK(rg_make(&g, &r, 8, 133, &o));
    for (int kind = 0; kind < 2; kind++) {
        mp_model_config c = mp_model_config_default();
        c.hidden = 64;
        c.n_tasks = 2;
        float tgt[16], extra[8 * 16];
        for (int i = 0; i < 16; i++)
            tgt[i] = (float)mp_rng_normal(&r);
        tgt[3] = NAN;   /* a missing label */
        for (int i = 0; i < 8 * 16; i++)
            extra[i] = (float)mp_rng_normal(&r);
        if (kind == 1) {
            c.kind = MP_MODEL_FFN;
            c.extra_dim = 16;
        }
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, &c, cpu, 4));
        double first = 0, loss = 0;
        int step;
        for (step = 0; step < 500; step++) {
            mp_model_zero_grad(m);
            CHECK_OK(mp_model_forward(m, kind ? NULL : &g, kind ? extra : NULL, 8, 1, NULL));
            CHECK_OK(mp_model_loss_backward(m, tgt, &loss));
            if (step == 0)
                first = loss;
            else if (loss < first / 10)
                break;
            CHECK_OK(mp_model_adam_step(m, 1e-3));
        }
        fprintf(stdout, "    %s: loss %.4g -> %.4g in %d steps\n", kind ? "ffn" : "dmpnn", first,
                loss, step);
        CHECK(loss < first / 10);
        mp_model_free(m);
    }
    mp_graphs_free(&g);
    mp_backend_close(cpu);
}

/* ===================================================================== */
/* Padded width (model.c: a wide model on a backend that wants aligned    */
/* rows runs with its hidden size rounded up, the extra units zero)       */
/* ===================================================================== */

/* max |a - b| / max(1, |b|) over n values */
static double max_rel(const float *a, const float *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        e = d > e ? d : e;
    }
    return e;
}

/* The padded model is the same model: the API's layout and initial values
 * bit for bit, the same losses and outputs over a few Adam steps (up to the
 * products' order of summation), the padding exactly zero throughout, its
 * parameters and its training state loaded into an unpadded model give the
 * same predictions, and its encoding the unpadded width.  On the cpu
 * backend with row_align forced, and on cuda:bf16. */
static void padded_case(mp_test_result *mp__r, const char *backend, double tol_loss,
                        double tol_params, double tol_out)
{
    /* plain: rows as they come; al: rows of 8 */
    mp_backend *plain = open_b(backend), *al = open_b(backend);
    CHECK(plain && al);
    plain->row_align = 0;
    al->row_align = 8;
    mp_rng r;
    mp_rng_seed(&r, 97, 0);
    rg_opts o = { 4, 18, 0, 0.05, 2 };
    mp_graphs g;
    CHECK(rg_make(&g, &r, 12, 133, &o));
    mp_model_config c = mp_model_config_default();
    c.hidden = 516;                 /* > 512, 516 % 8 = 4: padded to 520 */
    c.ffn_hidden = 40;
    c.extra_dim = 3;                /* ffn0.W's padding rows sit before these */
    float tgt[12], extra[12 * 3];
    for (int i = 0; i < 12; i++)
        tgt[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < 12 * 3; i++)
        extra[i] = (float)mp_rng_normal(&r);

    mp_model *m0 = NULL, *m1 = NULL, *m2 = NULL;
    CHECK_OK(mp_model_create(&m0, &c, plain, 5));
    CHECK_OK(mp_model_create(&m1, &c, al, 5));
    CHECK(!m0->padded && m1->padded && m1->h == 520 && m1->h_log == 516);
    const size_t np = mp_model_n_params(m0);
    CHECK_EQ_INT(mp_model_n_params(m1), np);
    CHECK(m1->n_params > np);
    int nv0, nv1;
    const mp_param_view *v0 = mp_model_views(m0, &nv0), *v1 = mp_model_views(m1, &nv1);
    CHECK_EQ_INT(nv1, nv0);
    for (int i = 0; i < nv0; i++) {
        CHECK_EQ_STR(v1[i].name, v0[i].name);
        CHECK(v1[i].offset == v0[i].offset && v1[i].rows == v0[i].rows &&
              v1[i].cols == v0[i].cols);
    }
    float *p0 = malloc(np * sizeof *p0), *p1 = malloc(np * sizeof *p1);
    float *o0 = malloc(12 * sizeof *o0), *o1 = malloc(12 * sizeof *o1);
    CHECK(p0 && p1 && o0 && o1);
    CHECK_OK(mp_model_get_params(m0, p0));
    CHECK_OK(mp_model_get_params(m1, p1));
    CHECK(memcmp(p0, p1, np * sizeof *p0) == 0);

    double l0 = 0, l1 = 0;
    for (int s = 0; s < 5; s++) {
        mp_model *mm[2] = { m0, m1 };
        double *ll[2] = { &l0, &l1 };
        for (int k = 0; k < 2; k++) {
            mp_model_zero_grad(mm[k]);
            CHECK_OK(mp_model_forward(mm[k], &g, extra, 12, 1, NULL));
            CHECK_OK(mp_model_loss_backward(mm[k], tgt, ll[k]));
            CHECK_OK(mp_model_adam_step(mm[k], 1e-3));
        }
        CHECK_MSG(fabs(l1 - l0) <= tol_loss * fmax(1.0, fabs(l0)), "%s step %d: loss %.9g "
                  "padded, %.9g not", backend, s, l1, l0);
    }
    /* the padding (rows and columns the logical layout does not have) of
     * the parameters and of the last gradients: exactly zero */
    float *pp = malloc(m1->n_params * sizeof *pp), *pg = malloc(m1->n_params * sizeof *pg);
    CHECK(pp && pg);
    CHECK_OK(al->sync(al));
    CHECK_OK(al->download(al, pp, m1->params, m1->n_params * sizeof *pp));
    CHECK_OK(al->download(al, pg, m1->grads, m1->n_params * sizeof *pg));
    size_t nonzero = 0;
    for (int i = 0; i < m1->n_views; i++) {
        const mp_param_view *l = &m1->lviews[i], *p = &m1->views[i];
        const int gap = p->rows - l->rows, at = m1->pad_at[i];
        for (int rr = 0; rr < p->rows; rr++)
            for (int cc = 0; cc < p->cols; cc++) {
                size_t k = p->offset + (size_t)rr * p->cols + cc;
                int pad = (rr >= at && rr < at + gap) || cc >= l->cols;
                nonzero += pad && (pp[k] != 0.0f || pg[k] != 0.0f);
            }
    }
    CHECK_EQ_INT(nonzero, 0);
    free(pp);
    free(pg);
    CHECK_OK(mp_model_get_params(m0, p0));
    CHECK_OK(mp_model_get_params(m1, p1));
    CHECK_MSG(max_rel(p1, p0, np) <= tol_params, "%s: parameters after 5 steps: %.3g", backend,
              max_rel(p1, p0, np));

    /* the padded model's parameters in an unpadded model: the same outputs */
    CHECK_OK(mp_model_create(&m2, &c, plain, 6));
    CHECK_OK(mp_model_set_params(m2, p1));
    CHECK_OK(mp_model_forward(m1, &g, extra, 12, 0, o1));
    CHECK_OK(mp_model_forward(m2, &g, extra, 12, 0, o0));
    CHECK_MSG(max_rel(o1, o0, 12) <= tol_out, "%s: outputs: %.3g", backend, max_rel(o1, o0, 12));
    int w1 = 0, w2 = 0;
    CHECK_OK(mp_model_get_encoding(m1, 0, NULL, &w1));
    CHECK_OK(mp_model_get_encoding(m2, 0, NULL, &w2));
    CHECK_EQ_INT(w1, 516 + 3);
    CHECK_EQ_INT(w2, w1);
    float *e1 = malloc((size_t)12 * w1 * sizeof *e1), *e2 = malloc((size_t)12 * w2 * sizeof *e2);
    CHECK(e1 && e2);
    CHECK_OK(mp_model_get_encoding(m1, 0, e1, &w1));
    CHECK_OK(mp_model_get_encoding(m2, 0, e2, &w2));
    CHECK_MSG(max_rel(e1, e2, (size_t)12 * w1) <= tol_out, "%s: encodings: %.3g", backend,
              max_rel(e1, e2, (size_t)12 * w1));

    /* its training state (checkpoints) in the API's layout: into another
     * padded model the same outputs bit for bit, into an unpadded one the
     * same within the bound */
    mp_model_state st;
    mp_model *m4 = NULL, *m5 = NULL;
    CHECK_OK(mp_model_state_get(m1, &st));
    CHECK_EQ_INT(st.n_params, np);
    CHECK_OK(mp_model_create(&m4, &c, al, 7));
    CHECK_OK(mp_model_create(&m5, &c, plain, 7));
    CHECK_OK(mp_model_state_set(m4, &st));
    CHECK_OK(mp_model_state_set(m5, &st));
    float o4[12], o5[12];
    CHECK_OK(mp_model_forward(m4, &g, extra, 12, 0, o4));
    CHECK_OK(mp_model_forward(m5, &g, extra, 12, 0, o5));
    CHECK(memcmp(o4, o1, sizeof o4) == 0);
    CHECK_MSG(max_rel(o5, o0, 12) <= tol_out, "%s: outputs from the state: %.3g", backend,
              max_rel(o5, o0, 12));
    mp_model_state_free(&st);
    mp_model_free(m4);
    mp_model_free(m5);

    /* at or below 512, or a multiple of 8: never padded */
    mp_model *m3 = NULL;
    c.hidden = 508;
    CHECK_OK(mp_model_create(&m3, &c, al, 5));
    CHECK(!m3->padded && m3->h == 508);
    mp_model_free(m3);
    c.hidden = 528;
    CHECK_OK(mp_model_create(&m3, &c, al, 5));
    CHECK(!m3->padded);
    mp_model_free(m3);

    free(e1); free(e2); free(p0); free(p1); free(o0); free(o1);
    mp_model_free(m0);
    mp_model_free(m1);
    mp_model_free(m2);
    mp_graphs_free(&g);
    mp_backend_close(plain);
    mp_backend_close(al);
}

MP_TEST(model_padded_width_same_model)
{
    padded_case(mp__r, "cpu", 1e-5, 1e-2, 1e-5);
}

/* cuda:bf16, where the padding pays (the backend's default there; the
 * test sets the alignment itself): bf16 operands rounded after sums of another
 * order, hence the wider bounds */
MP_TEST(gpu_model_padded_width_same_model)
{
    MP_NEED_GPU();
    padded_case(mp__r, "gpu:bf16", 2e-2, 5e-2, 2e-2);
}
