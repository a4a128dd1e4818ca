/*
 * test_columns.c - a run's user atom / bond columns (run/columns.h):
 * Chemprop's standardization (fitted on every row of the training
 * molecules, applied to all), the model widths of each mode, the
 * model-file keys written and read back, and the checks at prediction time.
 */
#include "test.h"

#include "run/columns.h"
#include "randgraph.h"

#include <math.h>
#include <stdlib.h>

static int store(mp_graphs *g, int xa, int xb)
{
    mp_rng r;
    mp_rng_seed(&r, 4, 0);
    rg_opts o = { 1, 6, 0.1, 0.1, 2 };
    if (!rg_make(g, &r, 12, 10, &o) || mp_graphs_set_extra(g, xa, xb) != MP_OK)
        return 0;
    for (size_t i = 0; i < (size_t)g->n_atoms * xa; i++)
        g->atom_x[i] = (float)(3 * mp_rng_uniform(&r) + (double)(i % xa));
    for (size_t i = 0; i < (size_t)(g->n_edges / 2) * xb; i++)
        g->bond_x[i] = (float)(5 * mp_rng_uniform(&r) - 2);
    return 1;
}

MP_TEST(columns_scaling_fits_training_rows)
{
    mp_graphs g;
    CHECK(store(&g, 3, 2));
    const int32_t train[5] = { 0, 2, 3, 7, 9 };
    mp_columns_opts o = { .atom_path = "a.npz", .atom_mode = MP_ATOM_COLS_DESCRIPTOR,
                          .bond_path = "b.npz" };
    mp_columns c;
    CHECK_OK(mp_columns_fit(&c, &o, &g, train, 5));
    CHECK_EQ_INT(c.atom_dim, 3);
    CHECK_EQ_INT(c.bond_dim, 2);
    CHECK_EQ_INT((int)c.atom_scaler.n_cols, 3);
    /* the mean and (ddof 0) std of column j over the training atoms */
    for (int j = 0; j < 3; j++) {
        double s = 0, s2 = 0;
        int n = 0;
        for (int k = 0; k < 5; k++)
            for (int32_t v = g.mol_atom[train[k]]; v < g.mol_atom[train[k] + 1]; v++) {
                double x = g.atom_x[(size_t)v * 3 + j];
                s += x, s2 += x * x, n++;
            }
        double mean = s / n, sd = sqrt(s2 / n - mean * mean);
        CHECK_NEAR(c.atom_scaler.mean[j], mean, 1e-9, 1e-9);
        CHECK_NEAR(c.atom_scaler.std[j], sd, 1e-7, 1e-7);
    }
    float before = g.atom_x[4], bb = g.bond_x[1];
    mp_columns_apply(&c, &g);
    CHECK_NEAR(g.atom_x[4], (before - c.atom_scaler.mean[1]) / c.atom_scaler.std[1], 1e-6, 1e-6);
    CHECK_NEAR(g.bond_x[1], (bb - c.bond_scaler.mean[1]) / c.bond_scaler.std[1], 1e-6, 1e-6);
    mp_model_config cfg = mp_model_config_default();
    mp_columns_config(&c, &cfg);
    CHECK(cfg.atom_desc_dim == 3 && cfg.atom_extra_dim == 0 && cfg.bond_extra_dim == 2);

    /* the keys round trip; a model without columns writes none */
    mp_kv *kv = NULL;
    CHECK_OK(mp_kv_new(&kv));
    CHECK_OK(mp_columns_put(&c, kv));
    mp_columns back;
    CHECK_OK(mp_columns_get(&back, kv, "m.mpm"));
    CHECK(back.atom_mode == MP_ATOM_COLS_DESCRIPTOR && back.atom_dim == 3 && back.bond_dim == 2);
    for (int j = 0; j < 3; j++)
        CHECK(back.atom_scaler.mean[j] == c.atom_scaler.mean[j] &&
              back.atom_scaler.std[j] == c.atom_scaler.std[j]);
    CHECK(back.bond_scaler.std[1] == c.bond_scaler.std[1]);
    CHECK_OK(mp_columns_check(&back, &g, "m.mpm"));
    mp_columns_free(&back);
    mp_kv_free(kv);
    CHECK_OK(mp_kv_new(&kv));
    mp_columns none;
    memset(&none, 0, sizeof none);
    CHECK_OK(mp_columns_put(&none, kv));
    CHECK_EQ_INT((int)mp_kv_count(kv), 0);
    CHECK_OK(mp_columns_get(&back, kv, "m.mpm"));
    CHECK(back.atom_dim == 0 && back.bond_dim == 0);
    /* a damaged mode is refused, naming the file */
    CHECK_OK(mp_kv_set(kv, "atom_descriptors", "sideways"));
    CHECK_OK(mp_kv_set_int(kv, "atom_descriptors_dim", 3));
    CHECK(mp_columns_get(&back, kv, "m.mpm") == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "m.mpm") != NULL);
    mp_kv_free(kv);

    /* prediction-time checks: missing, extra and other widths */
    CHECK(mp_columns_check(&none, &g, "m.mpm") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "leave out --atom-descriptors-path") != NULL);
    mp_graphs_set_extra(&g, 0, 2);
    CHECK(mp_columns_check(&c, &g, "m.mpm") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "3 atom descriptors per atom") != NULL);
    mp_graphs_set_extra(&g, 3, 4);
    CHECK(mp_columns_check(&c, &g, "m.mpm") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "the --bond-features-path file has 4") != NULL);

    /* scaling off: no scaler, the values stay */
    mp_columns_free(&c);
    o.no_atom_scaling = o.no_bond_scaling = 1;
    o.atom_mode = MP_ATOM_COLS_NONE;   /* a path without a mode: feature */
    CHECK_OK(mp_columns_fit(&c, &o, &g, train, 5));
    CHECK(c.atom_mode == MP_ATOM_COLS_FEATURE && c.atom_scaler.n_cols == 0);
    float keep = g.atom_x[2];
    mp_columns_apply(&c, &g);
    CHECK(g.atom_x[2] == keep);
    mp_columns_config(&c, &cfg);
    CHECK(cfg.atom_extra_dim == 3 && cfg.atom_desc_dim == 0 && cfg.bond_extra_dim == 4);
    mp_columns_free(&c);

    mp_atom_cols_mode md;
    CHECK(mp_atom_cols_parse("descriptors", &md) == MP_ERR_ARG);
    CHECK_OK(mp_atom_cols_parse("feature", &md));
    CHECK(md == MP_ATOM_COLS_FEATURE);
    mp_graphs_free(&g);
}
