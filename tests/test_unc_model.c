/*
 * test_unc_model.c - Monte Carlo dropout through the prediction path and
 * learned fingerprints, on random graphs and on real files:
 *
 *   - dropout at p = 0 is the plain prediction bit for bit (spread 0); the
 *     ensemble's dropout mean / variance are the members' ones averaged
 *     (each member predicted alone: the members' keys do not depend on the
 *     others); the passes are a pure function of (seed, member, pass, row),
 *     so a run on a suffix of the molecules (row0 moved along) gives the
 *     suffix's rows bit for bit; the cpu and ref backends agree;
 *   - ffn-last's vector times the last layer's weights is the output; the
 *     encoder of an FFN model is its scaled input;
 *   - `molprop fingerprint` writes the same numbers as CSV and .npy, for
 *     any chunk size.
 * The gpu_* twins compare the cuda backend with the cpu one (skipped
 * without a GPU; `make test-gpu` requires one).
 */
#include "test.h"

#include "gpu/gpu.h"
#include "models/model.h"
#include "run/ensemble.h"
#include "run/fingerprint.h"
#include "randgraph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char out[65536];

static mp_features *make_graphs(int32_t n, uint64_t seed)
{
    mp_features *f = mp_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    mp_rng r;
    mp_rng_seed(&r, seed, 3);
    rg_opts o = { 1, 30, 0.08, 0.05, 3 };
    if (!rg_make(&f->g, &r, n, 133, &o)) {
        mp_free(f);
        return NULL;
    }
    return f;
}

/* A D-MPNN ensemble (dropout 0 as trained, 2 FFN layers) on `backend`. */
static mp_status make_dmpnn(mp_ensemble **e, const char *backend, int members, int n_tasks)
{
    mp_model_config c = mp_model_config_default();
    c.n_tasks = n_tasks;
    c.hidden = 32;
    c.ffn_hidden = 24;
    mp_status st = mp_ensemble_create(e, &c, members, 5, backend);
    if (st)
        return st;
    (*e)->task = MP_TASK_REGRESSION;
    (*e)->n_tasks = (size_t)n_tasks;
    double mu[4] = { 1, -2, 0.5, 3 }, sd[4] = { 2, 0.5, 1, 4 };
    return mp_scaler_set(&(*e)->target_scaler, MP_SCALE_TARGETS, (size_t)n_tasks, mu, sd);
}

/* mean / std of mols[0..n) with MC dropout (samples, p, seed, row0). */
static mp_status mc_predict(mp_ensemble *e, const mp_features *f, const int32_t *mols, int32_t n,
                            int first, int count, int samples, double p, uint64_t seed,
                            int64_t row0, double *mean, double *std)
{
    mp_status st = mp_ensemble_set_mc_dropout(e, samples, p, seed, row0);
    if (st)
        return st;
    st = mp_ensemble_predict(e, f, mols, n, first, count, 16, mean, std);
    mp_ensemble_set_mc_dropout(e, 0, 0, 0, 0);
    return st;
}

MP_TEST(unc_mc_dropout_through_the_prediction_path)
{
    const int32_t n = 100;
    const size_t t = 2, cells = (size_t)n * t;
    mp_features *f = make_graphs(n, 17);
    CHECK(f);
    mp_ensemble *e = NULL;
    CHECK_OK(make_dmpnn(&e, "cpu", 3, (int)t));
    int32_t mols[100];
    for (int32_t i = 0; i < n; i++)
        mols[i] = i;
    static double m0[200], s0[200], m1[200], s1[200], m2[200], s2[200], mk[3][200], sk[3][200];
    /* p = 0: the plain prediction, no spread */
    CHECK_OK(mp_ensemble_predict(e, f, mols, n, 0, 1, 16, m0, s0));
    CHECK_OK(mc_predict(e, f, mols, n, 0, 1, 4, 0.0, 7, 0, m1, s1));
    int same = 1, zero = 1;
    for (size_t i = 0; i < cells; i++) {
        same &= isnan(m0[i]) ? isnan(m1[i]) : m0[i] == m1[i];
        zero &= isnan(s1[i]) || s1[i] == 0;
    }
    CHECK_MSG(same && zero, "dropout at p = 0 is not the plain prediction");
    /* p = 0.3: a spread, reproducible, seed-dependent */
    CHECK_OK(mc_predict(e, f, mols, n, 0, 0, 4, 0.3, 7, 0, m1, s1));
    CHECK_OK(mc_predict(e, f, mols, n, 0, 0, 4, 0.3, 7, 0, m2, s2));
    CHECK(!memcmp(m1, m2, sizeof m1) && !memcmp(s1, s2, sizeof s1));
    int spread = 0, n_valid = 0;
    for (size_t i = 0; i < cells; i++) {
        spread += s1[i] > 0;
        n_valid += !isnan(m1[i]);
    }
    CHECK_MSG(spread == n_valid && n_valid > 0, "%d of %d valid cells have a spread", spread,
              n_valid);
    CHECK_OK(mc_predict(e, f, mols, n, 0, 0, 4, 0.3, 8, 0, m2, s2));
    CHECK(memcmp(m1, m2, sizeof m1) != 0);
    /* the ensemble's numbers from each member alone */
    for (int k = 0; k < 3; k++)
        CHECK_OK(mc_predict(e, f, mols, n, k, 1, 4, 0.3, 7, 0, mk[k], sk[k]));
    for (size_t i = 0; i < cells; i++) {
        if (isnan(m1[i]))
            continue;
        double mu = (mk[0][i] + mk[1][i] + mk[2][i]) / 3;
        double var = (sk[0][i] * sk[0][i] + sk[1][i] * sk[1][i] + sk[2][i] * sk[2][i]) / 3;
        CHECK_NEAR(m1[i], mu, 1e-12, 1e-12);
        CHECK_NEAR(s1[i] * s1[i], var, 1e-12, 1e-9);
    }
    /* a suffix starting on a batch boundary, with row0 moved along: its rows */
    CHECK_OK(mc_predict(e, f, mols + 32, n - 32, 0, 0, 4, 0.3, 7, 32, m2, s2));
    CHECK(!memcmp(m2, m1 + 32 * t, sizeof(double) * (cells - 32 * t)));
    CHECK(!memcmp(s2, s1 + 32 * t, sizeof(double) * (cells - 32 * t)));
    /* the ref backend: the same model, the same masks */
    mp_ensemble *r = NULL;
    CHECK_OK(make_dmpnn(&r, "ref", 3, (int)t));
    CHECK_OK(mc_predict(r, f, mols, n, 0, 0, 4, 0.3, 7, 0, m2, s2));
    for (size_t i = 0; i < cells; i++) {
        if (isnan(m1[i])) {
            CHECK(isnan(m2[i]));
            continue;
        }
        CHECK_NEAR(m2[i], m1[i], 1e-4, 1e-4);
        CHECK_NEAR(s2[i], s1[i], 1e-4, 1e-3);
    }
    CHECK(mp_ensemble_set_mc_dropout(e, 1, 0.1, 0, 0) == MP_ERR_ARG);
    CHECK(mp_ensemble_set_mc_dropout(e, 3, 1.0, 0, 0) == MP_ERR_ARG);
    mp_ensemble_free(r);
    mp_ensemble_free(e);
    mp_features_free(f);
}

/* ffn-last x the last layer (+ bias) = the raw output. */
MP_TEST(unc_fingerprint_layers)
{
    const int32_t n = 40;
    mp_features *f = make_graphs(n, 23);
    CHECK(f);
    mp_ensemble *e = NULL;
    CHECK_OK(make_dmpnn(&e, "cpu", 1, 2));
    mp_model *m = e->members[0];
    int32_t sel[40], nb = 0;
    for (int32_t i = 0; i < n; i++)
        if (f->g.valid[i])
            sel[nb++] = i;
    mp_graphs g;
    memset(&g, 0, sizeof g);
    CHECK_OK(mp_graphs_select(&g, &f->g, sel, nb));
    static float outv[80], hid[40 * 24], enc[40 * 32], params[200000];
    int w0, w1;
    CHECK(mp_model_get_encoding(m, 0, enc, &w0) == MP_ERR_ARG);   /* no forward yet */
    CHECK_OK(mp_model_forward(m, &g, NULL, nb, 0, outv));
    CHECK_OK(mp_model_get_encoding(m, 0, enc, &w0));
    CHECK_OK(mp_model_get_encoding(m, 1, hid, &w1));
    CHECK_EQ_INT(w0, 32);
    CHECK_EQ_INT(w1, 24);
    CHECK(mp_model_n_params(m) <= sizeof params / sizeof params[0]);
    CHECK_OK(mp_model_get_params(m, params));
    int nv;
    const mp_param_view *v = mp_model_views(m, &nv);
    const mp_param_view *W = NULL, *b = NULL;
    for (int k = 0; k < nv; k++) {
        if (!strcmp(v[k].name, "ffn1.W"))
            W = &v[k];
        if (!strcmp(v[k].name, "ffn1.b"))
            b = &v[k];
    }
    CHECK(W && b && W->rows == 24 && W->cols == 2);
    for (int32_t i = 0; i < nb; i++)
        for (int c = 0; c < 2; c++) {
            double y = params[b->offset + (size_t)c];
            for (int k = 0; k < 24; k++)
                y += (double)hid[i * 24 + k] * params[W->offset + (size_t)k * 2 + (size_t)c];
            CHECK_NEAR(y, outv[i * 2 + c], 1e-5, 1e-5);
        }
    /* the ReLU'd hidden layer and a mean-pooled readout of ReLU'd atoms */
    for (int32_t i = 0; i < nb * 24; i++)
        CHECK(hid[i] >= 0);
    for (int32_t i = 0; i < nb * 32; i++)
        CHECK(enc[i] >= 0);
    mp_graphs_free(&g);
    mp_ensemble_free(e);
    /* a one-layer head has no hidden layer */
    mp_model_config c = mp_model_config_default();
    c.ffn_layers = 1;
    c.hidden = 16;
    CHECK_OK(mp_ensemble_create(&e, &c, 1, 1, "cpu"));
    CHECK(mp_model_get_encoding(e->members[0], 1, NULL, &w1) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "hidden layer") != NULL);
    mp_ensemble_free(e);
    mp_features_free(f);
}

/* Reads an .npy written by fingerprint: its shape and float32 data (owned). */
static float *read_npy(const char *path, size_t *rows, size_t *cols)
{
    size_t len;
    char *raw = mp_test_slurp(path, &len);
    if (!raw || len < 10 || memcmp(raw, "\x93NUMPY\x01\x00", 8)) {
        mp_free(raw);
        return NULL;
    }
    size_t hl = (unsigned char)raw[8] | (size_t)(unsigned char)raw[9] << 8;
    const char *shape = strstr(raw + 10, "'shape': (");
    if (!shape || sscanf(shape, "'shape': (%zu, %zu)", rows, cols) != 2 ||
        !strstr(raw + 10, "'descr': '<f4'") || 10 + hl + *rows * *cols * 4 != len) {
        mp_free(raw);
        return NULL;
    }
    float *v = malloc(*rows * *cols * 4 + 4);
    memcpy(v, raw + 10 + hl, *rows * *cols * 4);
    mp_free(raw);
    return v;
}

MP_TEST(unc_fingerprint_file_csv_npy_chunks)
{
    const char *dir = mp_test_tmpdir();
    char model[1300], csv[1300], npy[1300], npy2[1300], data[1300];
    snprintf(data, sizeof data, "%s/fp_in.csv", dir);
    FILE *fp = fopen(data, "w");
    CHECK(fp);
    fputs("name,smiles\nethanol,CCO\nbad,not_a_smiles\nphenol,c1ccccc1O\n"
          "acid,CC(=O)O\nbenzene,c1ccccc1\npyridine,c1ccncc1\n", fp);
    fclose(fp);
    snprintf(model, sizeof model, "%s/fp_model", dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 16 "
                             "--ensemble-size 2 --threads 1 --quiet --save-dir '%s'",
                             mp_test_shared("datasets/esol.csv.gz"), model), 0);
    strcat(model, "/model.mpm");
    snprintf(csv, sizeof csv, "%s/fp.csv", dir);
    snprintf(npy, sizeof npy, "%s/fp.npy", dir);
    snprintf(npy2, sizeof npy2, "%s/fp2.npy", dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                             "--layer ffn-last --member 1 --quiet", model, data, csv), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                             "--layer ffn-last --member 1 --quiet", model, data, npy), 0);
    /* the library with chunks of 2 rows: the same file */
    mp_fingerprint_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = model;
    o.data_path = data;
    o.out_path = npy2;
    o.layer = 1;
    o.member = 1;
    o.backend = "cpu";
    o.chunk_rows = 2;
    o.quiet = 1;
    mp_predict_stats stats;
    CHECK_OK(mp_fingerprint_file(&o, &stats));
    CHECK_EQ_INT(stats.n_rows, 6);
    CHECK_EQ_INT(stats.n_invalid, 1);
    char *a = mp_test_slurp(npy, NULL), *b = mp_test_slurp(npy2, NULL);
    size_t la = 0, lb = 0;
    CHECK(a && b);
    mp_free(mp_test_slurp(npy, &la));
    mp_free(mp_test_slurp(npy2, &lb));
    int same = la == lb && !memcmp(a, b, la);
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "chunks of 2 rows gave another .npy");
    size_t rows, cols;
    float *v = read_npy(npy, &rows, &cols);
    CHECK_MSG(v, "%s is not a float32 .npy", npy);
    CHECK_EQ_INT(rows, 6);
    CHECK_EQ_INT(cols, 16);
    char *text = mp_test_slurp(csv, NULL);
    CHECK(text);
    int header = !strncmp(text, "smiles,fp_0,fp_1,", 17) && strstr(text, ",fp_15\n");
    /* the CSV's numbers are the .npy's (to %.9g); the invalid row empty / NaN */
    int agree = 1, r = 0;
    for (char *line = strchr(text, '\n') + 1; *line && r < 6; line = strchr(line, '\n') + 1, r++) {
        char *p = strchr(line, ',');
        for (size_t k = 0; k < cols; k++) {
            if (r == 1) {
                agree &= p[1] == ',' || p[1] == '\n';
                agree &= isnan(v[r * cols + k]);
            } else {
                agree &= fabs(strtod(p + 1, NULL) - v[r * cols + k]) <= 1e-6 * (1 + fabs(v[r * cols + k]));
            }
            p = strchr(p + 1, ',');
            if (!p)
                break;
        }
    }
    mp_free(text);
    free(v);
    CHECK(header);
    CHECK_MSG(agree && r == 6, "CSV and .npy disagree (%d rows)", r);
    /* refusals */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                             "--member 2", model, data, csv), 1);
    CHECK(strstr(out, "member") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                             "--layer middle", model, data, csv), 1);
}

/* ===================================================================== */
/* The cuda backend                                                       */
/* ===================================================================== */

#define NEED_GPU()                                                               \
    do {                                                                         \
        char why_[300];                                                          \
        if (!mp_backend_cuda_available(why_, sizeof why_)) {                     \
            const char *req = getenv("MOLPROP_REQUIRE_GPU");                     \
            if (req && *req && strcmp(req, "0") != 0)                            \
                MP_FAIL("no GPU (MOLPROP_REQUIRE_GPU=1): %s", why_);             \
            MP_SKIP(why_);                                                       \
        }                                                                        \
    } while (0)

/* MC dropout on cuda (fp32 and bf16) against the cpu: the same masks, so
 * the same numbers to the precision's tolerance. */
MP_TEST(gpu_unc_mc_dropout_matches_cpu)
{
    NEED_GPU();
    const int32_t n = 300;
    const size_t cells = (size_t)n * 2;
    mp_features *f = make_graphs(n, 29);
    CHECK(f);
    int32_t *mols = malloc(sizeof(int32_t) * n);
    for (int32_t i = 0; i < n; i++)
        mols[i] = i;
    static double mc[600], sc[600], mg[600], sg[600];
    mp_ensemble *c = NULL;
    CHECK_OK(make_dmpnn(&c, "cpu", 2, 2));
    CHECK_OK(mc_predict(c, f, mols, n, 0, 0, 5, 0.2, 3, 0, mc, sc));
    const char *names[2] = { "cuda:fp32", "cuda:bf16" };
    const double tol[2] = { 1e-4, 3e-2 };
    for (int k = 0; k < 2; k++) {
        mp_ensemble *g = NULL;
        CHECK_OK(make_dmpnn(&g, names[k], 2, 2));
        CHECK_OK(mc_predict(g, f, mols, n, 0, 0, 5, 0.2, 3, 0, mg, sg));
        double worst = 0;
        for (size_t i = 0; i < cells; i++) {
            if (isnan(mc[i])) {
                CHECK(isnan(mg[i]));
                continue;
            }
            worst = fmax(worst, fabs(mg[i] - mc[i]) / (1 + fabs(mc[i])));
            worst = fmax(worst, fabs(sg[i] - sc[i]) / (1 + fabs(sc[i])));
        }
        mp_ensemble_free(g);
        CHECK_MSG(worst <= tol[k], "%s: MC dropout differs from the cpu by %g", names[k], worst);
    }
    mp_ensemble_free(c);
    free(mols);
    mp_features_free(f);
}

/* Fingerprints on cuda against the cpu (through the command). */
MP_TEST(gpu_unc_fingerprint_matches_cpu)
{
    NEED_GPU();
    const char *dir = mp_test_tmpdir();
    char model[1300], a[1300], b[1300];
    snprintf(model, sizeof model, "%s/gpu_fp_model", dir);
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 32 "
                             "--threads 1 --quiet --save-dir '%s'", esol, model), 0);
    strcat(model, "/model.mpm");
    snprintf(a, sizeof a, "%s/fp_cpu.npy", dir);
    snprintf(b, sizeof b, "%s/fp_gpu.npy", dir);
    for (int layer = 0; layer < 2; layer++) {
        const char *l = layer ? "ffn-last" : "encoder";
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out "
                                 "'%s' --layer %s --quiet", model, esol, a, l), 0);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out "
                                 "'%s' --layer %s --device gpu --quiet", model, esol, b, l), 0);
        size_t r1, c1, r2, c2;
        float *x = read_npy(a, &r1, &c1), *y = read_npy(b, &r2, &c2);
        CHECK(x && y && r1 == r2 && c1 == c2 && r1 > 1000);
        double worst = 0;
        for (size_t i = 0; i < r1 * c1; i++)
            worst = fmax(worst, fabs((double)x[i] - y[i]) / (1 + fabs((double)x[i])));
        free(x);
        free(y);
        CHECK_MSG(worst <= 1e-4, "%s: gpu fingerprints differ from the cpu by %g", l, worst);
    }
}
