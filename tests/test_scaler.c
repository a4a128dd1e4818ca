/*
 * test_scaler.c - the target and feature scalers: statistics against NumPy
 * (bit for bit), NaN handling of both kinds, round trips, stored statistics.
 */
#include "test.h"
#include "data/scaler.h"

/* A column formula whose values C and Python compute identically. */
static double fx(size_t i, size_t c)
{
    return (double)(i * 37 % 101) / 7.0 - 3.3 + (double)i * 1e-3 * (double)(c + 1);
}

MP_TEST(scaler_matches_numpy)
{
    /* Reference printed by NumPy 2.4:
     *   x = lambda i, c: (i*37 % 101)/7.0 - 3.3 + i*1e-3*(c+1)
     *   col = [[nan if i % 11 == 3 else x(i, 0)] for i in range(300)]
     *   np.nanmean(col, axis=0), np.nanstd(col, axis=0)
     *   m = [[nan if (i+c) % 7 == 0 else x(i, c) for c in range(3)] for i in range(50)]
     *   np.nanmean(m, axis=0), np.nanstd(m, axis=0)
     * (One column is summed pairwise, several in row order; a plain sum
     * gives 3.990086865515437 for the first mean.) */
    static double col[300], m[150];
    for (size_t i = 0; i < 300; i++)
        col[i] = i % 11 == 3 ? NAN : fx(i, 0);
    for (size_t i = 0; i < 50; i++)
        for (size_t c = 0; c < 3; c++)
            m[i * 3 + c] = (i + c) % 7 == 0 ? NAN : fx(i, c);
    mp_scaler s;
    CHECK_OK(mp_scaler_fit(&s, MP_SCALE_TARGETS, col, 1, NULL, 300));
    CHECK(s.mean[0] == 3.990086865515438);
    CHECK(s.std[0] == 4.233893108874122);
    mp_scaler_free(&s);
    CHECK_OK(mp_scaler_fit(&s, MP_SCALE_TARGETS, m, 3, NULL, 50));
    const double mean[3] = { 3.925180272108844, 3.9707774086378733, 3.8491794019933567 };
    const double sd[3] = { 4.16082646592627, 4.24680969102478, 4.236820730379059 };
    for (int c = 0; c < 3; c++) {
        CHECK_MSG(s.mean[c] == mean[c], "mean[%d] %.17g vs %.17g", c, s.mean[c], mean[c]);
        CHECK_MSG(s.std[c] == sd[c], "std[%d] %.17g vs %.17g", c, s.std[c], sd[c]);
    }
    mp_scaler_free(&s);
    CHECK(s.mean == NULL && s.n_cols == 0);
}

MP_TEST(scaler_targets_rows_nan_and_degenerate)
{
    /* 4 rows x 3 tasks; fit on rows {0, 2, 3} only */
    const double x[12] = {
        1, 5, NAN,
        100, 100, 100,   /* not in the training rows */
        3, 5, NAN,
        NAN, 5, NAN,
    };
    const size_t rows[3] = { 0, 2, 3 };
    mp_scaler s;
    CHECK_OK(mp_scaler_fit(&s, MP_SCALE_TARGETS, x, 3, rows, 3));
    CHECK_NEAR(s.mean[0], 2.0, 0, 0);
    CHECK_NEAR(s.std[0], 1.0, 0, 0);   /* ddof 0: values 1 and 3 */
    CHECK_NEAR(s.mean[1], 5.0, 0, 0);
    CHECK_NEAR(s.std[1], 1.0, 0, 0);   /* constant -> 1 */
    CHECK_NEAR(s.mean[2], 0.0, 0, 0);  /* no values -> 0 and 1 */
    CHECK_NEAR(s.std[2], 1.0, 0, 0);

    double y[6] = { 4, 7, 2, NAN, 5, -1 };
    mp_scaler_transform(&s, y, 2);
    CHECK_NEAR(y[0], 2.0, 0, 0);
    CHECK_NEAR(y[1], 2.0, 0, 0);
    CHECK_NEAR(y[2], 2.0, 0, 0);
    CHECK(isnan(y[3]));                /* a missing label stays missing */
    CHECK_NEAR(y[4], 0.0, 0, 0);
    CHECK_NEAR(y[5], -1.0, 0, 0);
    mp_scaler_inverse(&s, y, 2);
    CHECK_NEAR(y[0], 4, 0, 0);
    CHECK_NEAR(y[1], 7, 0, 0);
    CHECK(isnan(y[3]));
    CHECK_NEAR(y[5], -1, 0, 0);

    /* float paths: scale in double, round once */
    float out[6];
    const double z[6] = { 2.1, 5, 0, NAN, 5.5, 1 };
    mp_scaler_transform_to_f32(&s, z, out, 2);
    CHECK(out[0] == (float)((2.1 - 2.0) / 1.0));
    CHECK(isnan(out[3]) && out[4] == 0.5f);
    double back[6];
    mp_scaler_inverse_from_f32(&s, out, back, 2);
    CHECK(back[0] == (double)out[0] + 2.0);
    CHECK(isnan(back[3]));
    mp_scaler_free(&s);

    /* no rows at all */
    CHECK_OK(mp_scaler_fit(&s, MP_SCALE_TARGETS, x, 3, NULL, 0));
    CHECK(s.mean[1] == 0 && s.std[1] == 1);
    mp_scaler_free(&s);
    CHECK(mp_scaler_fit(&s, MP_SCALE_TARGETS, x, 0, NULL, 4) == MP_ERR_ARG);
}

MP_TEST(scaler_features_nan_is_zero)
{
    /* Chemprop reads a NaN feature as 0 before fitting: column 0 = {0, 2,
     * 4, 6} -> mean 3, std sqrt(5). */
    const double x[8] = { NAN, 1, 2, 1, 4, 1, 6, 1 };
    mp_scaler s;
    CHECK_OK(mp_scaler_fit(&s, MP_SCALE_FEATURES, x, 2, NULL, 4));
    CHECK_NEAR(s.mean[0], 3.0, 0, 0);
    CHECK_NEAR(s.std[0], sqrt(5.0), 0, 1e-15);
    CHECK(s.mean[1] == 1 && s.std[1] == 1);
    double y[4] = { NAN, 1, INFINITY, NAN };
    mp_scaler_transform(&s, y, 2);
    CHECK_NEAR(y[0], -3.0 / sqrt(5.0), 0, 1e-15);   /* NaN read as 0 */
    CHECK_NEAR(y[1], 0.0, 0, 0);
    CHECK(isinf(y[2]));                             /* inf - 3 is still inf */
    CHECK_NEAR(y[3], -1.0, 0, 0);                   /* NaN read as 0, then scaled */
    mp_scaler_free(&s);

    /* float features, and a column holding inf: its std is NaN -> 1, and
     * inf - inf = NaN after scaling becomes 0 */
    const float f[6] = { 1, INFINITY, 3, 1, 5, 1 };
    CHECK_OK(mp_scaler_fit_f32(&s, MP_SCALE_FEATURES, f, 2, NULL, 3));
    CHECK_NEAR(s.mean[0], 3.0, 0, 0);
    CHECK_NEAR(s.std[0], sqrt(8.0 / 3.0), 0, 1e-15);
    CHECK(isinf(s.mean[1]));
    CHECK(s.std[1] == 1);
    float g[2] = { 5, INFINITY };
    mp_scaler_transform_f32(&s, g, 1);
    CHECK_NEAR(g[0], (float)(2.0 / sqrt(8.0 / 3.0)), 0, 1e-7);
    CHECK(g[1] == 0.0f);
    mp_scaler_free(&s);
}

MP_TEST(scaler_set_and_out_of_memory)
{
    const double mean[2] = { 1, -2 }, sd[2] = { 0.5, 3 }, bad[2] = { 1, 0 };
    const double nanm[2] = { NAN, 0 };
    mp_scaler s;
    CHECK_OK(mp_scaler_set(&s, MP_SCALE_TARGETS, 2, mean, sd));
    double y[2] = { 2, 1 };
    mp_scaler_transform(&s, y, 1);
    CHECK(y[0] == 2 && y[1] == 1);
    mp_scaler_free(&s);
    CHECK(mp_scaler_set(&s, MP_SCALE_TARGETS, 2, mean, bad) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "std of column 1"));
    CHECK(mp_scaler_set(&s, MP_SCALE_TARGETS, 2, nanm, sd) == MP_ERR_FORMAT);
    CHECK(s.mean == NULL);

    long live = mp_alloc_live();
    int fails = 0;
    const double x[4] = { 1, 2, 3, 4 };
    for (long k = 0; k < 6; k++) {
        mp_alloc_fail_after(k);
        mp_status st = mp_scaler_fit(&s, MP_SCALE_TARGETS, x, 2, NULL, 2);
        mp_alloc_fail_after(-1);
        CHECK(st == MP_OK || st == MP_ERR_NOMEM);
        fails += st != MP_OK;
        if (st == MP_OK)
            mp_scaler_free(&s);
        CHECK(s.mean == NULL);
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    CHECK_EQ_INT(fails, 4);
}
