/*
 * test_features_train.c - molecule features wired into training (issue 9
 * phase B): the feature set names (current and the model files' legacy
 * ones), the scaling modes and their scaler, user-supplied feature files
 * (CSV and .npy, every bad-input case), the model file's feature keys and
 * old files, and `featurize --features ... --dump` from the CLI.
 */
#include "test.h"
#include "gpu_test.h"
#include "internal.h"

#include <stdlib.h>
#include <unistd.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0) & (w == n);
}

static int write_text(const char *path, const char *text)
{
    return write_bytes(path, text, strlen(text));
}

/* A .npy file of version 1.0 with the given header dict and data. */
static int write_npy(const char *path, const char *dict, const void *data, size_t n)
{
    char head[256];
    size_t dl = strlen(dict), total = 10 + dl + 1;
    size_t pad = (64 - total % 64) % 64;
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    size_t hl = dl + pad + 1;
    head[8] = (char)(hl & 0xff);
    head[9] = (char)(hl >> 8);
    memcpy(head + 10, dict, dl);
    memset(head + 10 + dl, ' ', pad);
    head[10 + dl + pad] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(head, 1, 10 + hl, f);
    fwrite(data, 1, n, f);
    return fclose(f) == 0;
}

/* ===================================================================== */
/* Names, dimensions, scaling modes                                       */
/* ===================================================================== */

MP_TEST(features_set_names_and_dims)
{
    unsigned m;
    CHECK_OK(mp_feature_set_parse("morgan,rdkit2d-normalized,v2-charge", &m));
    CHECK_EQ_INT(m, MP_FEAT_MORGAN | MP_FEAT_RDKIT2D_NORM | MP_FEAT_V2_CHARGE);
    char buf[256];
    mp_feature_set_name(m, buf, sizeof buf);
    CHECK_EQ_STR(buf, "morgan,rdkit2d-normalized,v2-charge");
    /* every name mp_vec knows is a feature set, and names itself back */
    for (int v = 0; v < MP_N_VECS; v++) {
        CHECK_OK(mp_feature_set_parse(mp_vec_name((mp_vec)v), &m));
        CHECK_EQ_INT(m, 1u << v);
        mp_feature_set_name(m, buf, sizeof buf);
        CHECK_EQ_STR(buf, mp_vec_name((mp_vec)v));
    }
    CHECK_OK(mp_feature_set_parse("rdkit2d", &m));
    CHECK_EQ_INT(m, MP_FEAT_RDKIT2D);
    CHECK_OK(mp_feature_set_parse("none", &m));
    CHECK_EQ_INT(m, 0);
    mp_feature_set_name(0, buf, sizeof buf);
    CHECK_EQ_STR(buf, "none");
    /* an unknown name: the error lists the valid ones */
    CHECK(mp_feature_set_parse("morgan,rdkit3d", &m) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "'rdkit3d'"));
    CHECK(strstr(mp_error_message(), "rdkit2d-normalized"));
    CHECK(strstr(mp_error_message(), "v2-morgan-count"));
    CHECK(mp_feature_set_parse("morgan,,rdkit2d", &m) == MP_ERR_ARG);
    /* model files before feature_sets: "rdkit2d" was the 43-value registry */
    CHECK_OK(mp_feature_set_parse_legacy("morgan,rdkit2d", &m));
    CHECK_EQ_INT(m, MP_FEAT_MORGAN | MP_FEAT_RDKIT2D_CORE);
    CHECK(mp_feature_set_parse_legacy("rdkit2d-normalized", &m) == MP_ERR_ARG);

    CHECK_EQ_INT(mp_feature_set_dim(MP_FEAT_MORGAN | MP_FEAT_RDKIT2D_CORE, 43, 0), 2048 + 43);
    CHECK_EQ_INT(mp_feature_set_dim(MP_FEAT_RDKIT2D | MP_FEAT_RDKIT2D_NORM | MP_FEAT_V2_RDKIT2D |
                                    MP_FEAT_V2_CHARGE | MP_FEAT_FILE, 43, 7),
                 200 + 200 + 208 + 1 + 7);
    CHECK_EQ_INT(mp_feature_set_dim(MP_FEAT_V2_MORGAN | MP_FEAT_V2_MORGAN_COUNT, 0, 7), 4096);

    /* auto leaves the fingerprints and the normalized set alone */
    static const struct {
        unsigned bit;
        int      auto_scaled;
    } modes[] = {
        { MP_FEAT_MORGAN, 0 },       { MP_FEAT_MORGAN_COUNT, 0 }, { MP_FEAT_RDKIT2D_CORE, 1 },
        { MP_FEAT_RDKIT2D, 1 },      { MP_FEAT_RDKIT2D_NORM, 0 }, { MP_FEAT_V2_MORGAN, 0 },
        { MP_FEAT_V2_MORGAN_COUNT, 0 }, { MP_FEAT_V2_RDKIT2D, 1 }, { MP_FEAT_V2_CHARGE, 1 },
        { MP_FEAT_FILE, 1 },
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        CHECK_EQ_INT(mp_feature_set_scaled(modes[i].bit, MP_FSCALE_AUTO), modes[i].auto_scaled);
        CHECK_EQ_INT(mp_feature_set_scaled(modes[i].bit, MP_FSCALE_ON), 1);
        CHECK_EQ_INT(mp_feature_set_scaled(modes[i].bit, MP_FSCALE_OFF), 0);
    }
    mp_feature_scaling s;
    CHECK_OK(mp_feature_scaling_parse("off", &s));
    CHECK_EQ_INT(s, MP_FSCALE_OFF);
    CHECK_EQ_STR(mp_feature_scaling_name(MP_FSCALE_AUTO), "auto");
    CHECK(mp_feature_scaling_parse("yes", &s) == MP_ERR_ARG);
}

static const char *const mols[] = {
    "CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "not a smiles", "OC(=O)C[C@H](N)C(=O)O", "C#N",
};
#define N_MOLS 6

MP_TEST(features_scaler_modes_in_double)
{
    mp_featurize_opts fo = { .layout = MP_ATOM_V1, .n_threads = 1 };
    unsigned mask = MP_FEAT_MORGAN | MP_FEAT_MORGAN_COUNT | MP_FEAT_RDKIT2D |
                    MP_FEAT_RDKIT2D_NORM | MP_FEAT_FILE;
    for (int v = 0; v < MP_N_VECS; v++)
        if (mask & (1u << v))
            mp_vec_request((mp_vec)v, &fo);
    mp_features *f;
    CHECK_OK(mp_featurize(&f, mols, N_MOLS, &fo));
    /* two file columns: one beyond float's range (as raw Ipc is), one NaN */
    double file[N_MOLS * 2];
    for (int i = 0; i < N_MOLS; i++) {
        file[2 * i] = (i + 1) * 1e41;
        file[2 * i + 1] = i == 2 ? NAN : i;
    }
    f->file_values = file;
    f->file_cols = 2;
    CHECK_OK(mp_feature_set_check(mask, f, f->n_desc, 2));
    CHECK(mp_feature_set_check(mask | MP_FEAT_V2_CHARGE, f, f->n_desc, 2) == MP_ERR_FORMAT);
    CHECK(mp_feature_set_check(mask, f, f->n_desc, 3) == MP_ERR_ARG);
    int dim = mp_feature_set_dim(mask, f->n_desc, 2);
    const int32_t rows[5] = { 0, 1, 2, 4, 5 };   /* the valid ones */
    size_t c_count = 2048, c_raw = 4096, c_norm = 4296, c_file = 4496;
    CHECK_EQ_INT(dim, 4498);

    mp_scaler sa, so, sn;
    CHECK_OK(mp_feature_scaler_fit(&sa, mask, MP_FSCALE_AUTO, f, rows, 5));
    CHECK_OK(mp_feature_scaler_fit(&so, mask, MP_FSCALE_ON, f, rows, 5));
    CHECK_OK(mp_feature_scaler_fit(&sn, mask, MP_FSCALE_OFF, f, rows, 5));
    CHECK_EQ_INT(sa.n_cols, dim);
    int count_scaled = 0, raw_scaled = 0, on_scaled = 0;
    for (size_t c = 0; c < (size_t)dim; c++) {
        int ident = sa.mean[c] == 0.0 && sa.std[c] == 1.0;
        if (c < c_raw || (c >= c_norm && c < c_file))
            CHECK_MSG(ident, "auto scaled column %zu", c);
        count_scaled += c >= c_count && c < c_raw && (so.mean[c] != 0.0 || so.std[c] != 1.0);
        raw_scaled += c >= c_raw && c < c_norm && !ident;
        CHECK_MSG(sn.mean[c] == 0.0 && sn.std[c] == 1.0, "off scaled column %zu", c);
        on_scaled += so.mean[c] != 0.0 || so.std[c] != 1.0;
        if ((c >= c_raw && c < c_norm) || c >= c_file)
            CHECK(sa.mean[c] == so.mean[c] && sa.std[c] == so.std[c]);
    }
    CHECK(count_scaled > 0 && raw_scaled > 100 && on_scaled > raw_scaled + count_scaled);
    /* the statistics in double: mean of 1, 2, 3, 5, 6 x 1e41, finite; the
     * NaN read as 0 */
    CHECK_NEAR(sa.mean[c_file], 3.4e41, 0, 1e-12);
    CHECK(isfinite(sa.std[c_file]) && sa.std[c_file] > 1e41);
    CHECK_NEAR(sa.mean[c_file + 1], (0 + 1 + 0 + 4 + 5) / 5.0, 0, 1e-15);

    /* fill_scaled = fill, then scale in double and round once */
    float *got = mp_malloc(sizeof(float) * N_MOLS * (size_t)dim);
    float *want = mp_malloc(sizeof(float) * N_MOLS * (size_t)dim);
    double *x = mp_malloc(sizeof(double) * N_MOLS * (size_t)dim);
    CHECK(got && want && x);
    const int32_t all[N_MOLS] = { 0, 1, 2, 3, 4, 5 };
    mp_feature_set_fill_scaled(mask, f, all, N_MOLS, &sa, got);
    mp_feature_set_fill(mask, f, all, N_MOLS, x);
    int nan_row = 1, bits_ok = 1;
    for (int j = 0; j < dim; j++)
        nan_row &= isnan(x[3 * dim + j]);
    for (int j = 0; j < 2048; j++)
        bits_ok &= x[j] == 0.0 || x[j] == 1.0;
    mp_scaler_transform_to_f32(&sa, x, want, N_MOLS);
    int same = !memcmp(got, want, sizeof(float) * N_MOLS * (size_t)dim);
    CHECK(isnan(x[2 * dim + (int)c_file + 1]) == 0 && x[2 * dim + (int)c_file + 1] == 0.0);
    mp_free(got);
    mp_free(want);
    mp_free(x);
    CHECK_MSG(nan_row, "an invalid molecule's row is NaN before scaling");
    CHECK(bits_ok);
    CHECK(same);

    /* a stored scaler must agree with its mode */
    CHECK_OK(mp_feature_scaler_check(&sa, mask, MP_FSCALE_AUTO, f->n_desc, 2));
    CHECK_OK(mp_feature_scaler_check(&so, mask, MP_FSCALE_ON, f->n_desc, 2));
    CHECK_OK(mp_feature_scaler_check(&sn, mask, MP_FSCALE_OFF, f->n_desc, 2));
    CHECK(mp_feature_scaler_check(&so, mask, MP_FSCALE_AUTO, f->n_desc, 2) == MP_ERR_FORMAT);
    CHECK(mp_feature_scaler_check(&sa, mask, MP_FSCALE_OFF, f->n_desc, 2) == MP_ERR_FORMAT);
    CHECK(mp_feature_scaler_check(&sa, mask, MP_FSCALE_AUTO, f->n_desc, 3) == MP_ERR_FORMAT);
    sa.mean[c_norm + 7] = 0.25;
    CHECK(mp_feature_scaler_check(&sa, mask, MP_FSCALE_AUTO, f->n_desc, 2) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "column 4303"));
    mp_scaler_free(&sa);
    mp_scaler_free(&so);
    mp_scaler_free(&sn);
    mp_features_free(f);
}

/* ===================================================================== */
/* Feature files                                                          */
/* ===================================================================== */

MP_TEST(features_file_csv)
{
    const char *p = tmp("feat.csv");
    CHECK(write_text(p, "a,b,c\n1,2.5,-3e2\n\nnan, 4 ,inf\r\n"));
    mp_featfile ff;
    CHECK_OK(mp_featfile_load(&ff, p));
    CHECK_EQ_INT(ff.n_rows, 2);
    CHECK_EQ_INT(ff.n_cols, 3);
    CHECK_EQ_STR(ff.names[2], "c");
    CHECK(ff.values[0] == 1 && ff.values[1] == 2.5 && ff.values[2] == -300);
    CHECK(isnan(ff.values[3]) && ff.values[4] == 4 && isinf(ff.values[5]));
    CHECK_OK(mp_featfile_check_rows(&ff, p, 2, "the data file x.csv"));
    CHECK(mp_featfile_check_rows(&ff, p, 3, "the data file x.csv") == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "2 rows of features, the data file x.csv has 3"));
    mp_featfile_free(&ff);
    CHECK(ff.values == NULL && ff.n_cols == 0);

    static const struct {
        const char *text, *msg;
    } bad[] = {
        { "a,b\n1,2\n3,x7\n", ":3: column 2 ('b'): 'x7' is not a number" },
        { "a,b\n1,\n", ":2: column 2 ('b'): '' is not a number" },
        { "a,b\n1,2,3\n", ":2: 3 fields, the header has 2" },
        { "a,b\n1\n", ":2: 1 fields, the header has 2" },
        { "a,b\n1,2e\n", "'2e' is not a number" },
        { "", "empty file" },
        { "a,b\n\"1,2\n", "unterminated quoted field" },   /* the CSV reader's */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(write_text(p, bad[i].text));
        mp_status st = mp_featfile_load(&ff, p);
        CHECK_MSG(st == MP_ERR_FORMAT, "case %zu: %s", i, mp_status_name(st));
        CHECK_MSG(strstr(mp_error_message(), bad[i].msg) && strstr(mp_error_message(), p),
                  "case %zu: %s", i, mp_error_message());
        CHECK(ff.values == NULL && ff.names == NULL);
    }
    CHECK(mp_featfile_load(&ff, tmp("no_such.csv")) == MP_ERR_IO);
}

MP_TEST(features_file_npy)
{
    const char *p = tmp("feat.npy");
    const double d[6] = { 1, 2, 3, 4.5, -5, 1e300 };
    mp_featfile ff;
    CHECK(write_npy(p, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", d, sizeof d));
    CHECK_OK(mp_featfile_load(&ff, p));
    CHECK(ff.n_rows == 3 && ff.n_cols == 2);
    CHECK(!memcmp(ff.values, d, sizeof d));
    CHECK_EQ_STR(ff.names[1], "1");
    mp_featfile_free(&ff);
    const float fl[3] = { 0.5f, -1.25f, 3.0f };
    CHECK(write_npy(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", fl, sizeof fl));
    CHECK_OK(mp_featfile_load(&ff, p));
    CHECK(ff.n_rows == 3 && ff.n_cols == 1 && ff.values[1] == -1.25);
    mp_featfile_free(&ff);
    const int64_t iv[4] = { -3, 0, 7, 1LL << 40 };
    CHECK(write_npy(p, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", iv, sizeof iv));
    CHECK_OK(mp_featfile_load(&ff, p));
    CHECK(ff.values[0] == -3 && ff.values[3] == (double)(1LL << 40));
    mp_featfile_free(&ff);
    const unsigned char bv[2] = { 1, 0 };
    CHECK(write_npy(p, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 1), }", bv, 2));
    CHECK_OK(mp_featfile_load(&ff, p));
    CHECK(ff.values[0] == 1 && ff.values[1] == 0);
    mp_featfile_free(&ff);

    static const struct {
        const char *dict;
        size_t      bytes;
        const char *msg;
    } bad[] = {
        { "{'descr': '>f8', 'fortran_order': False, 'shape': (3, 2), }", 48, "dtype" },
        { "{'descr': '<c16', 'fortran_order': False, 'shape': (3, 2), }", 48, "dtype" },
        { "{'descr': '<f8', 'fortran_order': True, 'shape': (3, 2), }", 48, "Fortran" },
        { "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2, 1), }", 48, "shape" },
        { "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 0), }", 0, "shape" },
        { "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 8, "shape" },
        { "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", 40, "cut short at row 2" },
        { "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", 48, "bytes after" },
    };
    double big[6] = { 0 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(write_npy(p, bad[i].dict, big, bad[i].bytes));
        mp_status st = mp_featfile_load(&ff, p);
        CHECK_MSG(st == MP_ERR_FORMAT, "case %zu: %s", i, mp_status_name(st));
        CHECK_MSG(strstr(mp_error_message(), bad[i].msg) && strstr(mp_error_message(), p),
                  "case %zu: %s", i, mp_error_message());
    }
    CHECK(write_bytes(p, "\x93NUMPZ\x01\x00\x00\x00", 10));
    CHECK(mp_featfile_load(&ff, p) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "bad magic"));
    CHECK(write_bytes(p, "\x93NUMPY\x01", 7));
    CHECK(mp_featfile_load(&ff, p) == MP_ERR_FORMAT);
}

/* ===================================================================== */
/* Training and prediction with features, through the CLI                */
/* ===================================================================== */

static const char *esol(void) { return mp_test_shared("datasets/esol.csv.gz"); }
#define ESOL_ROWS 1128

/* A features CSV for ESOL's rows: two columns that depend on the row. */
static int esol_features(const char *path, int rows)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fputs("feat_a,feat_b\n", f);
    for (int i = 0; i < rows; i++)
        fprintf(f, "%d,%.3f\n", i % 7, 0.5 * (i % 3) - 0.25);
    return fclose(f) == 0;
}

static char *header_of(const char *model)
{
    mp_modelfile *mf;
    if (mp_modelfile_read(&mf, model))
        return NULL;
    mp_buf b = { 0 };
    mp_status st = mp_kv_format(mf->header, &b);
    mp_modelfile_free(mf);
    if (st) {
        mp_buf_free(&b);
        return NULL;
    }
    return b.data;
}

MP_TEST(features_train_predict_with_a_features_file)
{
    const char *csv = tmp("esol_feat.csv"), *dir = tmp("ffile"), *pred = tmp("ffile.csv");
    CHECK(esol_features(csv, ESOL_ROWS));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features-path '%s' "
                             "--epochs 2 --hidden 16 --threads 1 --quiet --save-dir '%s'", esol(),
                             csv, dir), 0);
    char model[1300];
    snprintf(model, sizeof model, "%s/model.mpm", dir);
    char *h = header_of(model);
    CHECK(h != NULL);
    int keys = strstr(h, "\nfeature_sets = none\n") && strstr(h, "\nfeature_scaling = auto\n") &&
               strstr(h, "\nfeature_file_cols = 2\n") && strstr(h, "\nextra_dim = 2\n") &&
               !strstr(h, "\nfeatures =");
    mp_free(h);
    CHECK_MSG(keys, "model header lacks the feature keys");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --features-path "
                             "'%s' --out '%s' --quiet", model, esol(), csv, pred), 0);
    CHECK(access(pred, F_OK) == 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --features-path "
                             "'%s'", model, esol(), csv), 0);
    /* without the file, or with another one */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s'",
                             model, esol(), tmp("x.csv")), 1);
    CHECK_MSG(strstr(out, "--features-path"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s'", model, esol()), 1);
    CHECK_MSG(strstr(out, "--features-path"), "%s", out);
    const char *short_csv = tmp("short.csv");
    CHECK(esol_features(short_csv, ESOL_ROWS - 1));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --features-path "
                             "'%s' --out '%s'", model, esol(), short_csv, tmp("x.csv")), 1);
    CHECK_MSG(strstr(out, "1127 rows of features") && strstr(out, short_csv), "%s", out);
    CHECK(access(tmp("x.csv"), F_OK) != 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features-path "
                             "'%s' --epochs 1 --quiet --save-dir '%s'", esol(), short_csv,
                             tmp("fshort")), 1);
    CHECK_MSG(strstr(out, "1127 rows of features, the data file") && strstr(out, "has 1128"),
              "%s", out);
    const char *wide = tmp("wide.csv");
    CHECK(write_text(wide, "a,b,c\n1,2,3\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --features-path "
                             "'%s' --out '%s'", model, esol(), wide, tmp("x.csv")), 1);
    CHECK_MSG(strstr(out, "3 feature columns"), "%s", out);
    const char *badcell = tmp("badcell.csv");
    CHECK(write_text(badcell, "a,b\n1,2\n3,oops\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features-path "
                             "'%s' --epochs 1 --quiet --save-dir '%s'", esol(), badcell,
                             tmp("fbad")), 1);
    CHECK_MSG(strstr(out, "badcell.csv:3: column 2 ('b'): 'oops' is not a number"), "%s", out);
    /* a model without a file refuses one */
    const char *dir2 = tmp("fnone");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features v2-charge "
                             "--epochs 1 --hidden 8 --threads 1 --quiet --save-dir '%s'", esol(),
                             dir2), 0);
    snprintf(model, sizeof model, "%s/model.mpm", dir2);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --features-path "
                             "'%s' --out '%s'", model, esol(), csv, tmp("x.csv")), 1);
    CHECK_MSG(strstr(out, "without a features file"), "%s", out);
}

MP_TEST(features_train_dmpnn_normalized_npy_and_scaling_flags)
{
    /* the D-MPNN with rdkit2d-normalized and a .npy file of 2 columns */
    const char *npy = tmp("esol_feat.npy"), *dir = tmp("fdm");
    double *v = mp_malloc(sizeof(double) * ESOL_ROWS * 2);
    CHECK(v != NULL);
    for (int i = 0; i < ESOL_ROWS; i++) {
        v[2 * i] = i % 5;
        v[2 * i + 1] = 1e30 * (i % 2);
    }
    int ok = write_npy(npy, "{'descr': '<f8', 'fortran_order': False, 'shape': (1128, 2), }", v,
                       sizeof(double) * ESOL_ROWS * 2);
    mp_free(v);
    CHECK(ok);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --features rdkit2d-normalized "
                             "--features-path '%s' --epochs 1 --hidden 16 --threads 1 --quiet "
                             "--save-dir '%s'", esol(), npy, dir), 0);
    char model[1300];
    snprintf(model, sizeof model, "%s/model.mpm", dir);
    char *h = header_of(model);
    CHECK(h != NULL);
    int keys = strstr(h, "\nfeature_sets = rdkit2d-normalized\n") &&
               strstr(h, "\nfeature_scaling = auto\n") && strstr(h, "\nfeature_file_cols = 2\n") &&
               strstr(h, "\nextra_dim = 202\n");
    mp_free(h);
    CHECK_MSG(keys, "model header lacks the feature keys");
    mp_ensemble *e;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    int loaded = e->features == (MP_FEAT_RDKIT2D_NORM | MP_FEAT_FILE) && e->n_file == 2 &&
                 e->feature_scaling == MP_FSCALE_AUTO && e->feature_scaler.mean[0] == 0.0 &&
                 e->feature_scaler.std[199] == 1.0 &&
                 fabs(e->feature_scaler.mean[200] - 2.0) < 0.3 &&
                 e->feature_scaler.std[201] > 1e29;
    mp_ensemble_free(e);
    CHECK(loaded);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --features-path "
                             "'%s' --out '%s' --quiet", model, esol(), npy, tmp("fdm.csv")), 0);

    /* Chemprop's flag, and its contradiction */
    const char *dir2 = tmp("foff");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features "
                             "morgan-count --features-path '%s' --no-features-scaling --epochs 1 "
                             "--hidden 8 --threads 1 --quiet --save-dir '%s'", esol(), npy,
                             dir2), 0);
    snprintf(model, sizeof model, "%s/model.mpm", dir2);
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    int off = e->feature_scaling == MP_FSCALE_OFF;
    for (int c = 0; c < 2050; c++)   /* the file's columns too, which auto scales */
        off &= e->feature_scaler.mean[c] == 0.0 && e->feature_scaler.std[c] == 1.0;
    mp_ensemble_free(e);
    CHECK(off);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features morgan "
                             "--no-features-scaling --features-scaling on --epochs 1 --quiet "
                             "--save-dir '%s'", esol(), tmp("fboth")), 1);
    CHECK_MSG(strstr(out, "contradicts"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features "
                             "morgan,rdkit3d --epochs 1 --quiet --save-dir '%s'", esol(),
                             tmp("fbadname")), 1);
    CHECK_MSG(strstr(out, "rdkit3d") && strstr(out, "rdkit2d-normalized"), "%s", out);
}

/* Rewrites a model file's header: the keys drop[] removed, key=value add
 * inserted where the first dropped key was, the tensors kept. */
static mp_status rewrite_header(const char *src, const char *dst, const char *const *drop,
                                int n_drop, const char *add_key, const char *add_value,
                                const char *set_key, const char *set_value)
{
    mp_modelfile *mf;
    mp_kv *kv = NULL;
    mp_status st = mp_modelfile_read(&mf, src);
    if (st)
        return st;
    if ((st = mp_kv_new(&kv)))
        goto done;
    int added = 0;
    for (size_t i = 0; i < mp_kv_count(mf->header); i++) {
        const char *k = mp_kv_key(mf->header, i);
        int dropped = 0;
        for (int d = 0; d < n_drop; d++)
            dropped |= !strcmp(k, drop[d]);
        if (dropped && !added && add_key) {
            if ((st = mp_kv_set(kv, add_key, add_value)))
                goto done;
            added = 1;
        }
        if (!dropped && (st = mp_kv_set(kv, k, set_key && !strcmp(k, set_key)
                                                   ? set_value : mp_kv_value(mf->header, i))))
            goto done;
    }
    st = mp_modelfile_write(dst, kv, mf->tensors, mf->n_tensors);
done:
    mp_kv_free(kv);
    mp_modelfile_free(mf);
    return st;
}

MP_TEST(features_old_model_files_load_and_predict_the_same)
{
    /* A model on the 43-value registry and Morgan bits, rewritten as the
     * model files before feature_sets were: "features = morgan,rdkit2d". */
    const char *dir = tmp("fcore");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features "
                             "rdkit2d-core,morgan --features-scaling on --epochs 2 --hidden 16 "
                             "--threads 1 --quiet --save-dir '%s'", esol(), dir), 0);
    char model[1300], old[1300];
    snprintf(model, sizeof model, "%s/model.mpm", dir);
    snprintf(old, sizeof old, "%s/old.mpm", dir);
    static const char *const drop[2] = { "feature_sets", "feature_scaling" };
    CHECK_OK(rewrite_header(model, old, drop, 2, "features", "morgan,rdkit2d", NULL, NULL));
    char *h = header_of(old);
    CHECK(h && strstr(h, "\nfeatures = morgan,rdkit2d\n") && !strstr(h, "feature_sets") &&
          !strstr(h, "feature_scaling ="));
    mp_free(h);
    mp_ensemble *e;
    CHECK_OK(mp_ensemble_load(&e, old, "cpu"));
    int legacy = e->features == (MP_FEAT_MORGAN | MP_FEAT_RDKIT2D_CORE) &&
                 e->feature_scaling == MP_FSCALE_ON && e->n_file == 0;
    mp_ensemble_free(e);
    CHECK(legacy);
    const char *p1 = tmp("fcore_new.csv"), *p2 = tmp("fcore_old.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--quiet", model, esol(), p1), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--quiet", old, esol(), p2), 0);
    size_t n1, n2;
    char *a = mp_test_slurp(p1, &n1), *b = mp_test_slurp(p2, &n2);
    int same = a && b && n1 == n2 && n1 > 1000 && !memcmp(a, b, n1);
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "the old-style file predicts otherwise");

    /* the scaler must agree with the recorded mode */
    const char *tampered = tmp("fcore_off.mpm");
    CHECK_OK(rewrite_header(model, tampered, NULL, 0, NULL, NULL, "feature_scaling", "off"));
    CHECK(mp_ensemble_load(&e, tampered, "cpu") == MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "feature scaling 'off'"), "%s", mp_error_message());
    CHECK_OK(rewrite_header(model, tampered, NULL, 0, NULL, NULL, "feature_sets",
                            "rdkit2d,morgan"));
    CHECK(mp_ensemble_load(&e, tampered, "cpu") == MP_ERR_FORMAT);
    CHECK_OK(rewrite_header(model, tampered, NULL, 0, NULL, NULL, "feature_sets", "rdkit9d"));
    CHECK(mp_ensemble_load(&e, tampered, "cpu") == MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), tampered) && strstr(mp_error_message(), "rdkit9d"),
              "%s", mp_error_message());
    CHECK_OK(rewrite_header(model, tampered, NULL, 0, NULL, NULL, "feature_scaling", "maybe"));
    CHECK(mp_ensemble_load(&e, tampered, "cpu") == MP_ERR_FORMAT);
}

MP_TEST(features_featurize_cli_dumps_and_caches_the_sets)
{
    const char *csv = tmp("fz.csv"), *dump = tmp("fz_dump"), *cache = tmp("fz.mpf");
    CHECK(write_text(csv, "smiles\nCCO\nc1ccccc1O\nnope\nCC(=O)O\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "featurize --data '%s' --features "
                             "rdkit2d,rdkit2d-normalized,v2-charge --dump '%s' --out '%s'", csv,
                             dump, cache), 0);
    static const char *const files[2] = { "rdkit2d.tsv", "rdkit2d_normalized.tsv" };
    for (int k = 0; k < 2; k++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s", dump, files[k]);
        char *text = mp_test_slurp(path, NULL);
        CHECK_MSG(text != NULL, "no %s", files[k]);
        int tabs = 0, lines = 0;
        for (const char *p = text; *p && *p != '\n'; p++)
            tabs += *p == '\t';
        for (const char *p = text; *p; p++)
            lines += *p == '\n';
        int head = !strncmp(text, "mol\t", 4) && strstr(text, "\tMolLogP\t");
        mp_free(text);
        CHECK_EQ_INT(tabs, 200);
        CHECK_EQ_INT(lines, 1 + 3);   /* the valid molecules */
        CHECK(head);
    }
    mp_features *f;
    CHECK_OK(mp_features_load(&f, cache));
    int sets = f->mat[MP_MAT_RDKIT2D].n_cols == 200 && f->mat[MP_MAT_RDKIT2D_NORM].n_cols == 200 &&
               f->mat[MP_MAT_V2_CHARGE].n_cols == 1 && f->mat[MP_MAT_V2_RDKIT2D].n_cols == 0 &&
               f->morgan_start != NULL && f->g.n_mols == 4;
    mp_features_free(f);
    CHECK(sets);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "featurize --data '%s' --features rdkit2d,bogus "
                             "--dump '%s'", csv, dump), 1);
    CHECK_MSG(strstr(out, "bogus") && strstr(out, "rdkit2d-normalized"), "%s", out);
}

/* ===================================================================== */
/* On the GPU (make test-gpu)                                             */
/* ===================================================================== */

/* The features reach the model as its extra input through the seam, on
 * every batch source: the D-MPNN with rdkit2d-normalized (unscaled) and a
 * features file (scaled), and the FFN on Morgan bits (unscaled) and the
 * file, trained on the cpu and on the GPU (resident with graph replay, and
 * the host loop) to the same scores. */
static mp_status train_with_features(const char *backend, int resident, mp_model_kind kind,
                                     const char *features_path, mp_train_result *r)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.model = kind;
    o.features = kind == MP_MODEL_DMPNN ? MP_FEAT_RDKIT2D_NORM : MP_FEAT_MORGAN;
    o.features_path = features_path;
    o.epochs = 3;
    o.hidden = 32;
    o.threads = 1;
    o.quiet = 1;
    o.backend = backend;
    o.resident = resident;
    return mp_train(&o, r);
}

MP_TEST(gpu_features_train_matches_cpu)
{
    MP_NEED_GPU();
    const char *csv = tmp("gpu_feat.csv");
    CHECK(esol_features(csv, ESOL_ROWS));
    for (int k = 0; k < 2; k++) {
        mp_model_kind kind = k ? MP_MODEL_FFN : MP_MODEL_DMPNN;
        mp_train_result a, b, c;
        CHECK_OK(train_with_features("cpu", 0, kind, csv, &a));
        CHECK_OK(train_with_features("cuda:fp32", -1, kind, csv, &b));   /* resident, graph */
        CHECK_OK(train_with_features("cuda:fp32", 0, kind, csv, &c));    /* the host loop   */
        printf("    %s + features, esol 3 epochs test rmse: cpu %.6f, gpu resident %.6f, "
               "gpu host loop %.6f\n", k ? "ffn" : "dmpnn", a.test_mean, b.test_mean,
               c.test_mean);
        double ta = a.test_mean, tb = b.test_mean, tc = c.test_mean;
        mp_train_result_free(&a);
        mp_train_result_free(&b);
        mp_train_result_free(&c);
        CHECK(isfinite(ta) && ta > 0);
        CHECK_NEAR(tb, ta, 0, 1e-3);
        CHECK_NEAR(tc, ta, 0, 1e-3);
    }
}
