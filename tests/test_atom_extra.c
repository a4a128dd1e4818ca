/*
 * test_atom_extra.c - user-supplied atom and bond columns in the D-MPNN
 * (issue 9: Chemprop v1.6.1's --atom_descriptors feature|descriptor and
 * --bond_features_path).  The model's forward pass against a dense
 * re-computation of Chemprop's equations written here (every input vector
 * built in full, one matrix per layer in Chemprop's row order), gradients of
 * every parameter by central differences (ref64), the views and their
 * initial scale, the refusals of configs and batches that do not fit, and
 * the graph store carrying the columns through mp_graphs_select.
 */
#include "test.h"

#include "backend/ops.h"
#include "models/model_impl.h"
#include "randgraph.h"

#include <math.h>
#include <stdlib.h>

static mp_backend *open_ref64(void)
{
    mp_backend *b = NULL;
    return mp_backend_open(&b, "ref64") == MP_OK ? b : NULL;
}

/* Random graphs with random atom / bond columns of widths xa / xb. */
static int make_graphs(mp_graphs *g, mp_rng *r, int32_t nm, int fa, int xa, int xb)
{
    rg_opts o = { 1, 6, 0.1, 0.15, 2 };
    if (!rg_make(g, r, nm, fa, &o))
        return 0;
    if (mp_graphs_set_extra(g, xa, xb) != MP_OK)
        return 0;
    for (size_t i = 0; i < (size_t)g->n_atoms * xa; i++)
        g->atom_x[i] = (float)(2 * mp_rng_uniform(r) - 1);
    for (size_t i = 0; i < (size_t)(g->n_edges / 2) * xb; i++)
        g->bond_x[i] = (float)(2 * mp_rng_uniform(r) - 1);
    return 1;
}

static mp_model_config small(void)
{
    mp_model_config c = mp_model_config_default();
    c.atom_fdim = 10;
    c.hidden = 4;
    c.ffn_hidden = 3;
    c.n_tasks = 2;
    return c;
}

static const mp_param_view *view(mp_model *m, const char *name)
{
    int nv;
    const mp_param_view *v = mp_model_views(m, &nv);
    for (int i = 0; i < nv; i++)
        if (!strcmp(v[i].name, name))
            return &v[i];
    return NULL;
}

/* ===================================================================== */
/* Against a dense re-computation of Chemprop's equations                 */
/* ===================================================================== */

/* The dense atom vector x_v (hot slots, mass, then the user columns when
 * they are features) and bond vector b_k (14 slots, then the user bond
 * columns). */
static void atom_vec(const mp_graphs *g, int32_t v, int fa, int da, double *x)
{
    for (int j = 0; j < fa + da; j++)
        x[j] = 0;
    for (int q = 0; q < MP_ATOM_MAX_HOT; q++) {
        int s = g->atom_hot[(size_t)v * MP_ATOM_MAX_HOT + q];
        if (s >= 0)
            x[s] = 1;
    }
    x[fa - 1] = g->atom_mass[v];
    for (int j = 0; j < da; j++)
        x[fa + j] = g->atom_x[(size_t)v * g->xa_dim + j];
}

static void bond_vec(const mp_graphs *g, int32_t k, int db, double *x)
{
    for (int j = 0; j < MP_BOND_FDIM + db; j++)
        x[j] = 0;
    for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
        int s = g->bond_hot[(size_t)k * MP_BOND_MAX_HOT + q];
        if (s >= 0)
            x[s] = 1;
    }
    for (int j = 0; j < db; j++)
        x[MP_BOND_FDIM + j] = g->bond_x[(size_t)k * db + j];
}

/* y[n] = x[k] . W[k x n] (row-major, rows = inputs) + y (accumulate). */
static void vecmat(double *y, const double *x, const double *w, int k, int n)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < k; i++)
            y[j] += x[i] * w[(size_t)i * n + j];
}

/* The readout (mean) vectors [n_mols x hr] of the bond-message D-MPNN with
 * ReLU, no dropout, computed densely: the full input vectors, W_i as
 * [x_u ; xa_u ; b ; xb] rows, W_o as [x_v ; xa_v ; a_v] rows. */
static void reference_readout(mp_model *m, const mp_graphs *g, double *mol)
{
    const mp_model_config *c = &m->cfg;
    const double *p = mp_model_block_ptr(m, MP_BLOCK_PARAMS);
    const int fa = c->atom_fdim, da = c->atom_extra_dim, db = c->bond_extra_dim;
    const int dd = c->atom_desc_dim, h = c->hidden, hr = h + dd;
    const int32_t na = g->n_atoms, ne = g->n_edges;
    /* W_i in Chemprop's order: x_u (fa), its user columns (da), bond (14), xb (db) */
    const int in_i = fa + da + MP_BOND_FDIM + db;
    double *wi = calloc((size_t)in_i * h, sizeof *wi);
    const mp_param_view *vi = view(m, "W_i"), *vxa = view(m, "W_i.atom_x");
    const mp_param_view *vxb = view(m, "W_i.bond_x");
    for (int r = 0; r < fa; r++)
        memcpy(wi + (size_t)r * h, p + vi->offset + (size_t)r * h, h * sizeof *wi);
    for (int r = 0; r < da; r++)
        memcpy(wi + (size_t)(fa + r) * h, p + vxa->offset + (size_t)r * h, h * sizeof *wi);
    for (int r = 0; r < MP_BOND_FDIM; r++)
        memcpy(wi + (size_t)(fa + da + r) * h, p + vi->offset + (size_t)(fa + r) * h,
               h * sizeof *wi);
    for (int r = 0; r < db; r++)
        memcpy(wi + (size_t)(fa + da + MP_BOND_FDIM + r) * h, p + vxb->offset + (size_t)r * h,
               h * sizeof *wi);
    /* W_o: x_v (fa), its user columns (da), a_v (h) */
    const int in_o = fa + da + h;
    double *wo = calloc((size_t)in_o * h, sizeof *wo);
    const mp_param_view *vo = view(m, "W_o"), *vox = view(m, "W_o.atom_x");
    for (int r = 0; r < fa; r++)
        memcpy(wo + (size_t)r * h, p + vo->offset + (size_t)r * h, h * sizeof *wo);
    for (int r = 0; r < da; r++)
        memcpy(wo + (size_t)(fa + r) * h, p + vox->offset + (size_t)r * h, h * sizeof *wo);
    for (int r = 0; r < h; r++)
        memcpy(wo + (size_t)(fa + da + r) * h, p + vo->offset + (size_t)(fa + r) * h,
               h * sizeof *wo);
    const double *wh = p + view(m, "W_h")->offset, *bo = p + view(m, "b_o")->offset;

    double *h0 = calloc((size_t)ne * h + 1, sizeof *h0), *msg = calloc((size_t)ne * h + 1, 8);
    double *nxt = calloc((size_t)ne * h + 1, 8), *sum = calloc((size_t)na * h + 1, 8);
    double *ho = calloc((size_t)na * hr + 1, 8);
    double in[256], x[256];
    for (int32_t e = 0; e < ne; e++) {
        atom_vec(g, g->edge_src[e], fa, da, in);
        bond_vec(g, e / 2, db, in + fa + da);
        vecmat(h0 + (size_t)e * h, in, wi, in_i, h);
        for (int j = 0; j < h; j++)
            msg[(size_t)e * h + j] = fmax(0.0, h0[(size_t)e * h + j]);
    }
    for (int t = 1; t < c->depth; t++) {
        memset(sum, 0, (size_t)na * h * sizeof *sum);
        for (int32_t e = 0; e < ne; e++)
            for (int j = 0; j < h; j++)
                sum[(size_t)g->edge_dst[e] * h + j] += msg[(size_t)e * h + j];
        for (int32_t e = 0; e < ne; e++) {
            double mv[64], z[64];
            for (int j = 0; j < h; j++) {
                mv[j] = sum[(size_t)g->edge_src[e] * h + j] - msg[(size_t)(e ^ 1) * h + j];
                z[j] = h0[(size_t)e * h + j];
            }
            vecmat(z, mv, wh, h, h);
            for (int j = 0; j < h; j++)
                nxt[(size_t)e * h + j] = fmax(0.0, z[j]);
        }
        memcpy(msg, nxt, (size_t)ne * h * sizeof *msg);
    }
    memset(sum, 0, (size_t)na * h * sizeof *sum);
    for (int32_t e = 0; e < ne; e++)
        for (int j = 0; j < h; j++)
            sum[(size_t)g->edge_dst[e] * h + j] += msg[(size_t)e * h + j];
    for (int32_t v = 0; v < na; v++) {
        atom_vec(g, v, fa, da, in);
        memcpy(in + fa + da, sum + (size_t)v * h, h * sizeof *in);
        double z[64];
        memcpy(z, bo, h * sizeof *z);
        vecmat(z, in, wo, in_o, h);
        for (int j = 0; j < h; j++)
            x[j] = fmax(0.0, z[j]);
        if (dd) {
            /* h_v <- W_ad [h_v ; d_v] + b_ad (no activation) */
            const double *wad = p + view(m, "W_ad")->offset, *bad = p + view(m, "b_ad")->offset;
            for (int j = 0; j < dd; j++)
                x[h + j] = g->atom_x[(size_t)v * dd + j];
            double y[64];
            memcpy(y, bad, hr * sizeof *y);
            vecmat(y, x, wad, hr, hr);
            memcpy(x, y, hr * sizeof *x);
        }
        memcpy(ho + (size_t)v * hr, x, hr * sizeof *x);
    }
    for (int32_t i = 0; i < g->n_mols; i++) {
        int32_t a0 = g->mol_atom[i], a1 = g->mol_atom[i + 1];
        for (int j = 0; j < hr; j++) {
            double s = 0;
            for (int32_t v = a0; v < a1; v++)
                s += ho[(size_t)v * hr + j];
            mol[(size_t)i * hr + j] = a1 > a0 ? s / (a1 - a0) : 0.0;
        }
    }
    free(wi), free(wo), free(h0), free(msg), free(nxt), free(sum), free(ho);
}

MP_TEST(atom_extra_forward_matches_dense_chemprop)
{
    mp_backend *b = open_ref64();
    CHECK(b);
    /* feature mode with bond columns; descriptor mode; bond columns alone */
    const int cases[3][3] = { { 3, 0, 2 }, { 0, 3, 0 }, { 0, 0, 4 } };
    for (int ci = 0; ci < 3; ci++) {
        mp_model_config c = small();
        c.atom_extra_dim = cases[ci][0];
        c.atom_desc_dim = cases[ci][1];
        c.bond_extra_dim = cases[ci][2];
        mp_rng r;
        mp_rng_seed(&r, 40 + ci, 0);
        mp_graphs g;
        CHECK(make_graphs(&g, &r, 6, c.atom_fdim, c.atom_extra_dim + c.atom_desc_dim,
                          c.bond_extra_dim));
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, &c, b, 3 + ci));
        /* random biases too, so b_o and b_ad are exercised */
        double *p = mp_model_block_ptr(m, MP_BLOCK_PARAMS);
        for (size_t i = 0; i < mp_model_n_params(m); i++)
            p[i] += 0.2 * mp_rng_normal(&r);
        CHECK_OK(mp_model_forward(m, &g, NULL, g.n_mols, 0, NULL));
        /* the head's input x0 (ref64: host memory), readout columns first */
        const int w = c.hidden + c.atom_desc_dim;
        CHECK_EQ_INT(m->in_dim, w);
        double *enc = malloc((size_t)g.n_mols * w * sizeof *enc);
        double *ref = malloc((size_t)g.n_mols * w * sizeof *ref);
        memcpy(enc, m->a.x0, (size_t)g.n_mols * w * sizeof *enc);
        reference_readout(m, &g, ref);
        int nonzero = 0;
        for (size_t i = 0; i < (size_t)g.n_mols * w; i++) {
            CHECK_NEAR(enc[i], ref[i], 1e-12, 1e-12);
            nonzero += ref[i] != 0;
        }
        CHECK(nonzero > g.n_mols);
        /* the columns matter: change one atom's and the readout moves */
        if (g.xa_dim || g.xb_dim) {
            if (g.xa_dim)
                g.atom_x[0] += 1.0f;
            else
                g.bond_x[0] += 1.0f;
            double *enc2 = malloc((size_t)g.n_mols * w * sizeof *enc2);
            CHECK_OK(mp_model_forward(m, &g, NULL, g.n_mols, 0, NULL));
            memcpy(enc2, m->a.x0, (size_t)g.n_mols * w * sizeof *enc2);
            CHECK(memcmp(enc, enc2, (size_t)g.n_mols * w * sizeof *enc) != 0);
            free(enc2);
        }
        free(enc);
        free(ref);
        mp_model_free(m);
        mp_graphs_free(&g);
    }
    mp_backend_close(b);
}

/* ===================================================================== */
/* Gradients by central differences                                       */
/* ===================================================================== */

typedef struct {
    const char *name;
    int da, dd, db;
    int atom_messages, attentive, batch_norm, extra, gelu;
    double dropout;
} gc_case;

static const gc_case gc_cases[] = {
    { "atom features",                        3, 0, 0, 0, 0, 0, 0, 0, 0.0 },
    { "bond features",                        0, 0, 2, 0, 0, 0, 0, 0, 0.0 },
    { "atom + bond features, mol features",   2, 0, 3, 0, 0, 0, 2, 0, 0.0 },
    { "atom descriptors",                     0, 3, 0, 0, 0, 0, 0, 0, 0.0 },
    { "descriptors + bond features, dropout", 0, 2, 2, 0, 0, 0, 0, 0, 0.25 },
    { "descriptors, attentive, batch norm",   0, 2, 0, 0, 1, 1, 1, 0, 0.0 },
    { "atom messages, atom + bond features",  2, 0, 2, 1, 0, 0, 0, 0, 0.0 },
    { "atom messages, descriptors, gelu",     0, 2, 3, 1, 0, 0, 0, 1, 0.0 },
};

MP_TEST(atom_extra_gradcheck_double)
{
    mp_backend *b = open_ref64();
    CHECK(b);
    for (size_t ci = 0; ci < sizeof gc_cases / sizeof gc_cases[0]; ci++) {
        const gc_case *k = &gc_cases[ci];
        mp_model_config c = small();
        c.atom_extra_dim = k->da;
        c.atom_desc_dim = k->dd;
        c.bond_extra_dim = k->db;
        c.atom_messages = k->atom_messages;
        c.aggregation = k->attentive ? MP_AGG_ATTENTIVE : MP_AGG_MEAN;
        c.batch_norm = k->batch_norm;
        c.extra_dim = k->extra;
        c.activation = k->gelu ? MP_ACT_GELU : MP_ACT_RELU;
        c.dropout = k->dropout;
        mp_rng r;
        mp_rng_seed(&r, 700 + ci, 0);
        mp_graphs g;
        CHECK(make_graphs(&g, &r, 7, c.atom_fdim, k->da + k->dd, k->db));
        float extra[7 * 2], tgt[7 * 2];
        for (int i = 0; i < 7 * 2; i++) {
            extra[i] = (float)(2 * mp_rng_uniform(&r) - 1);
            tgt[i] = (float)(2 * mp_rng_uniform(&r) - 1);
        }
        mp_model *m = NULL;
        CHECK_OK(mp_model_create(&m, &c, b, 17 + ci));
        size_t np = mp_model_n_params(m);
        double *p = mp_model_block_ptr(m, MP_BLOCK_PARAMS);
        double *gr = mp_model_block_ptr(m, MP_BLOCK_GRADS);
        for (size_t i = 0; i < np; i++)
            p[i] += 0.1 * mp_rng_normal(&r);
        double *p0 = malloc(np * sizeof *p0), *grad = malloc(np * sizeof *grad);
        CHECK(p0 && grad);
        memcpy(p0, p, np * sizeof *p0);
        mp_rng saved = m->drop_rng;
        const float *ex = c.extra_dim ? extra : NULL;
        double loss;
        mp_model_zero_grad(m);
        CHECK_OK(mp_model_forward(m, &g, ex, g.n_mols, 1, NULL));
        CHECK_OK(mp_model_loss_backward(m, tgt, &loss));
        memcpy(grad, gr, np * sizeof *grad);
        int nonzero = 0;
        double worst = 0;
        for (size_t i = 0; i < np; i++) {
            double e = 1e-6, f[2];
            for (int s = 0; s < 2; s++) {
                memcpy(p, p0, np * sizeof *p);
                p[i] = p0[i] + (s ? -e : e);
                m->drop_rng = saved;
                CHECK_OK(mp_model_forward(m, &g, ex, g.n_mols, 1, NULL));
                CHECK_OK(mp_model_loss_backward(m, tgt, &f[s]));
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
                        k->name, i, v[vi].name, i - v[vi].offset, grad[i], num);
            }
        }
        memcpy(p, p0, np * sizeof *p);
        /* every view of the user columns gets a gradient */
        const char *names[] = { "W_i.atom_x", "W_i.bond_x", "W_h.bond_x", "W_o.atom_x", "W_ad",
                                "b_ad" };
        for (int q = 0; q < 6; q++) {
            const mp_param_view *v = view(m, names[q]);
            if (!v)
                continue;
            int any = 0;
            for (size_t j = 0; j < (size_t)v->rows * v->cols; j++)
                any |= grad[v->offset + j] != 0;
            CHECK_MSG(any, "%s: no gradient reaches %s", k->name, names[q]);
        }
        printf("    %-40s %4zu parameters, %4d with nonzero gradient, worst |error| %.2g\n",
               k->name, np, nonzero, worst);
        free(p0);
        free(grad);
        mp_model_free(m);
        mp_graphs_free(&g);
    }
    mp_backend_close(b);
}

/* ===================================================================== */
/* Views, initial scale, refusals, the store                              */
/* ===================================================================== */

MP_TEST(atom_extra_views_and_init)
{
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cpu"));
    mp_model_config c = mp_model_config_default();
    mp_model *plain = NULL, *feat = NULL, *desc = NULL;
    CHECK_OK(mp_model_create(&plain, &c, b, 5));
    c.atom_extra_dim = 6;
    c.bond_extra_dim = 4;
    CHECK_OK(mp_model_create(&feat, &c, b, 5));
    c.atom_extra_dim = 0;
    c.bond_extra_dim = 0;
    c.atom_desc_dim = 7;
    CHECK_OK(mp_model_create(&desc, &c, b, 5));
    /* the shapes Chemprop builds: W_i (133 + 6 + 14 + 4) x 300 in all, W_o
     * (133 + 6 + 300) x 300, W_ad 307 x 307 with its bias, the head 307 wide */
    CHECK_EQ_INT(view(feat, "W_i")->rows, 147);
    CHECK_EQ_INT(view(feat, "W_i.atom_x")->rows, 6);
    CHECK_EQ_INT(view(feat, "W_i.bond_x")->rows, 4);
    CHECK_EQ_INT(view(feat, "W_o.atom_x")->rows, 6);
    CHECK(view(feat, "W_ad") == NULL && view(plain, "W_i.atom_x") == NULL);
    CHECK_EQ_INT(view(desc, "W_ad")->rows, 307);
    CHECK_EQ_INT(view(desc, "W_ad")->cols, 307);
    CHECK_EQ_INT(view(desc, "b_ad")->cols, 307);
    CHECK_EQ_INT(view(desc, "ffn0.W")->rows, 307);
    CHECK_EQ_INT((int)(mp_model_n_params(feat) - mp_model_n_params(plain)), (6 + 4 + 6) * 300);
    CHECK_EQ_INT((int)(mp_model_n_params(desc) - mp_model_n_params(plain)),
                 307 * 307 + 307 + 7 * 300);
    /* a model without columns draws what it always drew; W_i of the
     * feature model is drawn with the whole matrix's fan-in (157 + 300) */
    float *pp = malloc(mp_model_n_params(plain) * sizeof *pp);
    float *pf = malloc(mp_model_n_params(feat) * sizeof *pf);
    CHECK_OK(mp_model_get_params(plain, pp));
    CHECK_OK(mp_model_get_params(feat, pf));
    const mp_param_view *v = view(feat, "W_i");
    double s2 = 0;
    for (size_t i = 0; i < (size_t)v->rows * v->cols; i++)
        s2 += (double)pf[v->offset + i] * pf[v->offset + i];
    double sd = sqrt(s2 / ((double)v->rows * v->cols));
    CHECK_NEAR(sd, sqrt(2.0 / (157 + 300)), 0, 0.03);
    CHECK(fabs(sd - sqrt(2.0 / (147 + 300))) > 0.5 * fabs(sqrt(2.0 / 457) - sqrt(2.0 / 447)));
    free(pp);
    free(pf);
    mp_model_free(plain);
    mp_model_free(feat);
    mp_model_free(desc);

    /* refusals */
    mp_model *m = NULL;
    c = mp_model_config_default();
    c.atom_extra_dim = 2;
    c.atom_desc_dim = 2;
    CHECK(mp_model_create(&m, &c, b, 1) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "one mode") != NULL);
    c = mp_model_config_default();
    c.kind = MP_MODEL_FFN;
    c.extra_dim = 5;
    c.bond_extra_dim = 1;
    CHECK(mp_model_create(&m, &c, b, 1) == MP_ERR_ARG);
    c = mp_model_config_default();
    c.bond_extra_dim = -1;
    CHECK(mp_model_create(&m, &c, b, 1) == MP_ERR_ARG);
    mp_backend_close(b);
}

MP_TEST(atom_extra_batch_widths_refused)
{
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cpu"));
    mp_model_config c = small();
    c.atom_desc_dim = 3;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &c, b, 2));
    mp_rng r;
    mp_rng_seed(&r, 9, 0);
    mp_graphs g;
    CHECK(make_graphs(&g, &r, 4, c.atom_fdim, 2, 0));   /* 2 columns, the model takes 3 */
    CHECK(mp_model_forward(m, &g, NULL, g.n_mols, 0, NULL) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "3 atom descriptors") != NULL);
    mp_graphs_free(&g);
    CHECK(make_graphs(&g, &r, 4, c.atom_fdim, 0, 0));   /* none */
    CHECK(mp_model_forward(m, &g, NULL, g.n_mols, 0, NULL) == MP_ERR_ARG);
    mp_graphs_free(&g);
    mp_model_free(m);
    c = small();
    c.bond_extra_dim = 2;
    CHECK_OK(mp_model_create(&m, &c, b, 2));
    CHECK(make_graphs(&g, &r, 4, c.atom_fdim, 0, 3));
    CHECK(mp_model_forward(m, &g, NULL, g.n_mols, 0, NULL) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "bond features") != NULL);
    mp_graphs_free(&g);
    mp_model_free(m);
    mp_backend_close(b);
}

MP_TEST(atom_extra_select_carries_columns)
{
    mp_rng r;
    mp_rng_seed(&r, 12, 0);
    mp_graphs g, s, s2;
    memset(&s, 0, sizeof s);
    memset(&s2, 0, sizeof s2);
    CHECK(make_graphs(&g, &r, 9, 10, 3, 2));
    int32_t pick[4] = { 7, 2, 2, 5 };
    CHECK_OK(mp_graphs_select(&s, &g, pick, 4));
    CHECK_EQ_INT(s.xa_dim, 3);
    CHECK_EQ_INT(s.xb_dim, 2);
    for (int i = 0; i < 4; i++) {
        int32_t m = pick[i];
        int32_t na = g.mol_atom[m + 1] - g.mol_atom[m], nb = (g.mol_edge[m + 1] - g.mol_edge[m]) / 2;
        CHECK(memcmp(s.atom_x + (size_t)s.mol_atom[i] * 3, g.atom_x + (size_t)g.mol_atom[m] * 3,
                     (size_t)na * 3 * sizeof(float)) == 0);
        CHECK(memcmp(s.bond_x + (size_t)(s.mol_edge[i] / 2) * 2,
                     g.bond_x + (size_t)(g.mol_edge[m] / 2) * 2, (size_t)nb * 2 * sizeof(float)) == 0);
    }
    /* reusing a selection of another width re-sizes it; a store without
     * columns leaves none behind */
    mp_graphs plain;
    rg_opts o = { 1, 6, 0.1, 0.15, 2 };
    CHECK(rg_make(&plain, &r, 9, 10, &o));
    CHECK_OK(mp_graphs_select(&s, &plain, pick + 1, 3));
    CHECK(s.xa_dim == 0 && s.xb_dim == 0 && !s.atom_x && !s.bond_x);
    CHECK_OK(mp_graphs_select(&s, &g, pick, 4));
    CHECK(s.xa_dim == 3 && s.atom_x);
    CHECK(mp_graphs_set_extra(&s2, -1, 0) == MP_ERR_ARG);
    mp_graphs_free(&plain);
    mp_graphs_free(&s);
    mp_graphs_free(&s2);
    mp_graphs_free(&g);
}
