/*
 * test_columns_verbs.c - a model trained with user atom / bond columns
 * (--atom-descriptors-path, --bond-features-path) in every verb that uses
 * a model besides predict: eval (its metrics equal those of predict's
 * output), fingerprint (the encoder vectors equal the model's own forward
 * on the scaled columns), predict --calibrate (the calibration file's own
 * columns), hpopt (every trial trains with them) and bench (a dataset's
 * column files; its D-MPNN runs equal mp_train alone on the same files, its
 * FFN runs do not see them); the refusals name the option, the file and the
 * molecule; Chemprop v1.6.1's names (--bond-descriptors-path,
 * --bond-descriptors) and its refusal of the bond "descriptor" mode.
 * gpu_columns_verbs_cuda_equals_cpu (make test-gpu; skipped without a GPU):
 * eval, fingerprint and a bench run of the column model on cuda:fp32
 * against the cpu backend.
 */
#include "test.h"
#include "gpu_test.h"

#include "internal.h"
#include "bench/bench.h"
#include "data/csv.h"
#include "run/fingerprint.h"
#include "run/predict.h"
#include "run/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const MOLS[] = {
    "CCO", "c1ccccc1O", "CC(=O)N", "CCCCCC", "c1ccncc1", "OCC(O)CO", "CC(C)Cl", "C1CCCCC1",
    "CCN(CC)CC", "O=C(O)c1ccccc1", "CCOC(C)=O", "Cc1ccccc1", "BrCCBr", "CC#N", "NCCO",
    "CC(C)(C)O", "c1ccc2ccccc2c1", "FC(F)(F)c1ccccc1", "CCCCO", "OC1CCCCC1", "CCS", "C=CC=C",
    "CC(=O)OC1=CC=CC=C1C(=O)O", "COc1ccccc1", "CCCCCCCC", "ClC(Cl)Cl", "CC(N)C(=O)O",
    "c1ccsc1", "CN1CCCC1", "OCCOCCO", "C", "CCCl", "CC=O", "N#CC#N", "c1ccoc1", "CC(C)C",
    "OC(=O)CC(O)=O", "C1CC1", "CCCCN", "CCC(=O)O",
};
#define N_MOLS ((int)(sizeof MOLS / sizeof MOLS[0]))

static char data_path[1024], atom_path[1024], bond_path[1024], atom_b_path[1024],
    bad_path[1024], model_path[1200];

static const char *tmp(const char *name) { return mp_test_tmp("cv_", name); }

/* The data CSV, column CSVs from the molecules' atom and bond counts (2
 * atom columns, 1 bond column), atom_b: other values of the same width,
 * bad: molecule 5 one atom row short. */
static int write_inputs(void)
{
    if (data_path[0])
        return 1;
    snprintf(data_path, sizeof data_path, "%s", tmp("data.csv"));
    snprintf(atom_path, sizeof atom_path, "%s", tmp("atoms.csv"));
    snprintf(bond_path, sizeof bond_path, "%s", tmp("bonds.csv"));
    snprintf(atom_b_path, sizeof atom_b_path, "%s", tmp("atoms_b.csv"));
    snprintf(bad_path, sizeof bad_path, "%s", tmp("atoms_bad.csv"));
    mp_features *f = NULL;
    mp_featurize_opts o = { 0 };
    o.n_threads = 1;
    if (mp_featurize(&f, MOLS, N_MOLS, &o) != MP_OK)
        return 0;
    FILE *d = fopen(data_path, "w"), *a = fopen(atom_path, "w"), *b = fopen(bond_path, "w");
    FILE *ab = fopen(atom_b_path, "w"), *bad = fopen(bad_path, "w");
    if (!d || !a || !b || !ab || !bad)
        return 0;
    fprintf(d, "smiles,y\n");
    fprintf(a, "mol,q1,q2\n");
    fprintf(ab, "mol,q1,q2\n");
    fprintf(bad, "mol,q1,q2\n");
    fprintf(b, "mol,w1\n");
    for (int m = 0; m < N_MOLS; m++) {
        int na = f->g.mol_atom[m + 1] - f->g.mol_atom[m];
        int nb = (f->g.mol_edge[m + 1] - f->g.mol_edge[m]) / 2;
        fprintf(d, "%s,%.3f\n", MOLS[m], 0.1 * na - 0.2 * nb + 0.05 * m);
        for (int r = 0; r < na; r++) {
            fprintf(a, "%d,%.3f,%d\n", m, 0.3 * r + 0.1 * m, r % 2);
            fprintf(ab, "%d,%.3f,%d\n", m, 5.0 - 0.7 * r, (r + m) % 3);
            if (!(m == 5 && r == 0))
                fprintf(bad, "%d,%.3f,%d\n", m, 0.3 * r, r % 2);
        }
        for (int r = 0; r < nb; r++)
            fprintf(b, "%d,%.3f\n", m, 0.5 * r - 0.1 * m);
    }
    fclose(d);
    fclose(a);
    fclose(b);
    fclose(ab);
    fclose(bad);
    mp_features_free(f);
    return 1;
}

/* A D-MPNN trained with both kinds of columns (atom: descriptor mode). */
static int train_model(void)
{
    if (!write_inputs())
        return 0;
    if (model_path[0])
        return 1;
    char save[1024];
    snprintf(save, sizeof save, "%s", tmp("model"));
    mp_train_opts o = mp_train_opts_default();
    o.data_path = data_path;
    o.epochs = 3;
    o.hidden = 16;
    o.batch_size = 8;
    o.threads = 1;
    o.quiet = 1;
    o.save_dir = save;
    o.cols.atom_path = atom_path;
    o.cols.atom_mode = MP_ATOM_COLS_DESCRIPTOR;
    o.cols.bond_path = bond_path;
    mp_train_result res;
    memset(&res, 0, sizeof res);
    if (mp_train(&o, &res) != MP_OK)
        return 0;
    mp_train_result_free(&res);
    snprintf(model_path, sizeof model_path, "%s/model.mpm", save);
    return 1;
}

/* Column `col` of every data row of a CSV (empty: NaN) into v[0..n). */
static int read_column(const char *path, int col, double *v, int n)
{
    mp_csv_reader *r = NULL;
    if (mp_csv_open(&r, path) != MP_OK)
        return 0;
    char **f;
    size_t nf, line;
    int k = 0;
    mp_csv_next(r, &f, &nf, &line);
    while (mp_csv_next(r, &f, &nf, &line) == MP_OK && nf > (size_t)col && k < n)
        v[k++] = *f[col] ? strtod(f[col], NULL) : NAN;
    mp_csv_close(r);
    return k == n;
}

MP_TEST(columns_eval_equals_predicts_metrics)
{
    CHECK(train_model());
    char out[8192];
    const char *preds = tmp("eval_preds.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--atom-descriptors-path '%s' --bond-features-path '%s' --quiet",
                             model_path, data_path, preds, atom_path, bond_path), 0);
    double p[N_MOLS], y[N_MOLS], se = 0;
    CHECK(read_column(preds, 1, p, N_MOLS) && read_column(data_path, 1, y, N_MOLS));
    for (int i = 0; i < N_MOLS; i++)
        se += (p[i] - y[i]) * (p[i] - y[i]);
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    mp_eval_result r;
    CHECK_OK(mp_eval_file(model_path, data_path, &spec, "rmse", NULL, atom_path, bond_path,
                          "cpu", 1, &r));
    CHECK_EQ_INT((int)r.n_rows, N_MOLS);
    CHECK_NEAR(r.mean[0], sqrt(se / N_MOLS), 1e-7, 1e-7);
    mp_eval_result_free(&r);
    /* other columns of the same width: another score (the columns count) */
    CHECK_OK(mp_eval_file(model_path, data_path, &spec, "rmse", NULL, atom_b_path, bond_path,
                          "cpu", 1, &r));
    CHECK(fabs(r.mean[0] - sqrt(se / N_MOLS)) > 1e-6);
    mp_eval_result_free(&r);
    /* the CLI: the options, Chemprop v1.6.1's name of the bond file */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --metric rmse "
                             "--atom-descriptors-path '%s' --bond-descriptors-path '%s'",
                             model_path, data_path, atom_path, bond_path), 0);
    CHECK_MSG(strstr(out, "rmse") != NULL, "%s", out);
    /* refusals: a file missing, a molecule's rows short, both names given */
    CHECK(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --bond-features-path '%s'",
                      model_path, data_path, bond_path) != 0);
    CHECK_MSG(strstr(out, "--atom-descriptors-path") != NULL, "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --atom-descriptors-path "
                      "'%s' --bond-features-path '%s'", model_path, data_path, bad_path,
                      bond_path) != 0);
    CHECK_MSG(strstr(out, bad_path) != NULL && strstr(out, MOLS[5]) != NULL, "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --atom-descriptors-path "
                      "'%s' --bond-features-path '%s' --bond-descriptors-path '%s'", model_path,
                      data_path, atom_path, bond_path, atom_path) != 0);
    CHECK_MSG(strstr(out, "one option") != NULL, "%s", out);
    /* the same file under both names is one file */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' "
                             "--atom-descriptors-path '%s' --bond-features-path '%s' "
                             "--bond-descriptors-path '%s'", model_path, data_path, atom_path,
                             bond_path, bond_path), 0);
    CHECK(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --atom-descriptors-path "
                      "'%s' --bond-features-path '%s'", model_path, data_path, atom_path,
                      tmp("no_such.npz")) != 0);
    CHECK_MSG(strstr(out, "no_such.npz") != NULL, "%s", out);
}

MP_TEST(columns_fingerprint_is_the_models_encoder)
{
    CHECK(train_model());
    const char *fp = tmp("fp.csv");
    mp_fingerprint_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = model_path;
    o.data_path = data_path;
    o.out_path = fp;
    o.backend = "cpu";
    o.threads = 1;
    o.quiet = 1;
    o.chunk_rows = 7;   /* chunks: each takes its molecules' rows */
    o.atom_path = atom_path;
    o.bond_path = bond_path;
    mp_predict_stats st;
    CHECK_OK(mp_fingerprint_file(&o, &st));
    CHECK_EQ_INT((int)st.n_rows, N_MOLS);

    /* the model's own forward on the scaled columns, as predict runs it */
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model_path, "cpu"));
    mp_features *f = NULL;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    fo.n_threads = 1;
    CHECK_OK(mp_featurize(&f, MOLS, N_MOLS, &fo));
    CHECK_OK(mp_graphs_read_columns(&f->g, atom_path, 0, MOLS));
    CHECK_OK(mp_graphs_read_columns(&f->g, bond_path, 1, MOLS));
    mp_columns_apply(&e->cols, &f->g);
    int32_t idx[N_MOLS];
    for (int i = 0; i < N_MOLS; i++)
        idx[i] = i;
    mp_graphs sub;
    memset(&sub, 0, sizeof sub);
    CHECK_OK(mp_graphs_select(&sub, &f->g, idx, N_MOLS));
    int w = 0;
    CHECK_OK(mp_model_get_encoding(e->members[0], 0, NULL, &w));
    CHECK(w == 16 + 2);   /* hidden + the atom descriptors' layer width */
    float *enc = malloc(sizeof(float) * (size_t)w * N_MOLS);
    CHECK_OK(mp_model_forward(e->members[0], &sub, NULL, N_MOLS, 0, NULL));
    CHECK_OK(mp_model_get_encoding(e->members[0], 0, enc, &w));
    mp_csv_reader *r = NULL;
    CHECK_OK(mp_csv_open(&r, fp));
    char **fields;
    size_t nf, line;
    CHECK_OK(mp_csv_next(r, &fields, &nf, &line));
    CHECK_EQ_INT((int)nf, 1 + w);
    int row = 0, nonzero = 0;
    while (mp_csv_next(r, &fields, &nf, &line) == MP_OK && nf > 0 && row < N_MOLS) {
        for (int k = 0; k < w; k++) {
            double v = strtod(fields[1 + k], NULL), ref = enc[(size_t)row * w + k];
            CHECK_NEAR(v, ref, 1e-6, 1e-6);
            nonzero += fabs(v) > 1e-6;
        }
        row++;
    }
    CHECK_EQ_INT(row, N_MOLS);
    CHECK(nonzero > N_MOLS);
    mp_csv_close(r);
    free(enc);
    mp_graphs_free(&sub);
    mp_features_free(f);
    mp_ensemble_free(e);

    /* other atom values: other vectors; no atom file: refused naming it */
    char out[8192];
    const char *fp2 = tmp("fp2.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                             "--atom-descriptors-path '%s' --bond-features-path '%s' --quiet",
                             model_path, data_path, fp2, atom_b_path, bond_path), 0);
    char *a = mp_test_slurp(fp, NULL), *b = mp_test_slurp(fp2, NULL);
    CHECK(a && b && strcmp(a, b));
    mp_free(a);
    mp_free(b);
    CHECK(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                      "--bond-features-path '%s'", model_path, data_path, fp2, bond_path) != 0);
    CHECK_MSG(strstr(out, "--atom-descriptors-path") != NULL, "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "fingerprint --model '%s' --data '%s' --out '%s' "
                      "--atom-descriptors-path '%s' --bond-features-path '%s'", model_path,
                      data_path, fp2, bad_path, bond_path) != 0);
    CHECK_MSG(strstr(out, bad_path) != NULL && strstr(out, MOLS[5]) != NULL, "%s", out);
}

MP_TEST(columns_predict_calibrate_reads_the_calibration_columns)
{
    CHECK(train_model());
    char out[8192];
    const char *plain = tmp("cal_plain.csv"), *cal = tmp("cal.csv"), *cal_b = tmp("cal_b.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--atom-descriptors-path '%s' --bond-features-path '%s' --quiet",
                             model_path, data_path, plain, atom_path, bond_path), 0);
    const char *common = "predict --model '%s' --data '%s' --out '%s' --atom-descriptors-path "
                         "'%s' --bond-features-path '%s' --calibrate conformal "
                         "--calibration-data '%s' --calibration-bond-features-path '%s' "
                         "--calibration-atom-descriptors-path '%s' --quiet";
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, common, model_path, data_path, cal, atom_path,
                             bond_path, data_path, bond_path, atom_path), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, common, model_path, data_path, cal_b, atom_path,
                             bond_path, data_path, bond_path, atom_b_path), 0);
    /* the predictions are predict's; the conformal half-width is the
     * quantile of |y - prediction| over the calibration rows: the interval
     * holds at least 1 - alpha of them, and other calibration columns give
     * other residuals, so another width */
    double p[N_MOLS], m[N_MOLS], lo[N_MOLS], hi[N_MOLS], lob[N_MOLS], y[N_MOLS];
    CHECK(read_column(plain, 1, p, N_MOLS) && read_column(cal, 1, m, N_MOLS) &&
          read_column(cal, 2, lo, N_MOLS) && read_column(cal, 3, hi, N_MOLS) &&
          read_column(cal_b, 2, lob, N_MOLS) && read_column(data_path, 1, y, N_MOLS));
    int inside = 0;
    for (int i = 0; i < N_MOLS; i++) {
        CHECK_NEAR(m[i], p[i], 1e-9, 1e-9);
        CHECK(lo[i] < m[i] && hi[i] > m[i]);
        inside += y[i] >= lo[i] && y[i] <= hi[i];
    }
    CHECK(inside >= (int)ceil(0.9 * N_MOLS));
    CHECK(fabs((m[0] - lo[0]) - (m[0] - lob[0])) > 1e-9);
    /* the calibration file's columns are its own options */
    CHECK(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                      "--atom-descriptors-path '%s' --bond-features-path '%s' --calibrate "
                      "conformal --calibration-data '%s' --calibration-bond-features-path '%s'",
                      model_path, data_path, cal, atom_path, bond_path, data_path,
                      bond_path) != 0);
    CHECK_MSG(strstr(out, "--calibration-atom-descriptors-path") != NULL, "%s", out);
}

MP_TEST(columns_hpopt_trials_train_with_them)
{
    CHECK(write_inputs());
    const char *space = tmp("space.ini");
    FILE *fp = fopen(space, "w");
    CHECK(fp != NULL);
    fputs("[space]\nhidden = int 8 16 8\ndepth = int 2 3\n", fp);
    fclose(fp);
    char out[8192], dir[1024];
    snprintf(dir, sizeof dir, "%s", tmp("hp"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "hpopt --data '%s' --epochs 1 --batch-size 10 "
                             "--threads 1 --space '%s' --method random --trials 2 --keep all "
                             "--out '%s' --atom-descriptors-path '%s' --atom-descriptors "
                             "descriptor --bond-features-path '%s'", data_path, space, dir,
                             atom_path, bond_path), 0);
    for (int t = 0; t < 2; t++) {
        char m[1200];
        snprintf(m, sizeof m, "%s/trials/%03d/model.mpm", dir, t);
        mp_ensemble *e = NULL;
        CHECK_OK(mp_ensemble_load(&e, m, "cpu"));
        CHECK(e->cols.atom_mode == MP_ATOM_COLS_DESCRIPTOR && e->cols.atom_dim == 2 &&
              e->cols.bond_dim == 1);
        mp_ensemble_free(e);
    }
    char best[1200];
    snprintf(best, sizeof best, "%s/best.ini", dir);
    char *ini = mp_test_slurp(best, NULL);
    CHECK(ini && strstr(ini, atom_path) && strstr(ini, bond_path));
    mp_free(ini);
}

static double bench_alone(mp_model_kind kind, unsigned features, int cols, double *val)
{
    mp_train_opts t = mp_train_opts_default();
    t.data_path = data_path;
    t.task = MP_TASK_REGRESSION;
    t.metric = "rmse";
    t.model = kind;
    t.features = features;
    t.features_scaling = MP_FSCALE_ON;
    t.split.type = MP_SPLIT_SCAFFOLD_BALANCED;
    t.seed = 0;
    t.epochs = 2;
    t.threads = 1;
    t.quiet = 1;
    if (cols) {
        t.cols.atom_path = atom_path;
        t.cols.atom_mode = MP_ATOM_COLS_DESCRIPTOR;
        t.cols.bond_path = bond_path;
    }
    mp_train_result r;
    if (mp_train(&t, &r) != MP_OK)
        return NAN;
    double test = r.test_mean;
    *val = r.val_mean;
    mp_train_result_free(&r);
    return test;
}

MP_TEST(columns_bench_runs_equal_train_with_the_files)
{
    CHECK(write_inputs());
    char ds[1200], ac[1200], bc[1200], out[1100], results[1200];
    snprintf(ds, sizeof ds, "cv=%s:regression", data_path);
    snprintf(ac, sizeof ac, "cv=%s", atom_path);
    snprintf(bc, sizeof bc, "cv=%s", bond_path);
    snprintf(out, sizeof out, "%s", tmp("bench"));
    snprintf(results, sizeof results, "%s/results.tsv", out);
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "bench"));
    CHECK_OK(mp_options_set(o, "datasets", ds));
    CHECK_OK(mp_options_set(o, "models", "dmpnn,ffn-morgan"));
    CHECK_OK(mp_options_set(o, "seeds", "0"));
    CHECK_OK(mp_options_set(o, "epochs", "2"));
    CHECK_OK(mp_options_set(o, "threads", "1"));
    CHECK_OK(mp_options_set(o, "quiet", NULL));
    CHECK_OK(mp_options_set(o, "out", out));
    CHECK_OK(mp_options_set(o, "atom-descriptors-path", ac));
    CHECK_OK(mp_options_set(o, "atom-descriptors", "descriptor"));
    CHECK_OK(mp_options_set(o, "bond-features-path", bc));
    mp_summary *s;
    CHECK_OK(mp_run_bench(o, NULL, &s));
    CHECK(mp_summary_number(s, "n_runs") == 2);
    mp_summary_free(s);
    mp_bench_row *rows;
    size_t n;
    CHECK_OK(mp_bench_rows_read(results, 0, &rows, &n, NULL));
    CHECK_EQ_INT((int)n, 2);
    for (size_t i = 0; i < n; i++) {
        int dmpnn = !strcmp(rows[i].model, "dmpnn");
        double val = NAN, test = dmpnn ? bench_alone(MP_MODEL_DMPNN, 0, 1, &val)
                                       : bench_alone(MP_MODEL_FFN, MP_FEAT_MORGAN, 0, &val);
        CHECK_MSG(rows[i].test == test && rows[i].val == val, "%s: bench %.17g/%.17g, alone "
                  "%.17g/%.17g", rows[i].model, rows[i].test, rows[i].val, test, val);
        if (dmpnn) {   /* the columns count: without them, another score */
            double v2, t2 = bench_alone(MP_MODEL_DMPNN, 0, 0, &v2);
            CHECK(t2 != test);
        }
    }
    mp_bench_rows_free(rows, n);
    /* the same results file with other column files: another configuration */
    CHECK_OK(mp_options_set(o, "atom-descriptors-path", ""));
    CHECK_OK(mp_options_set(o, "atom-descriptors", ""));
    CHECK(mp_run_bench(o, NULL, &s) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "other settings") != NULL, "%s", mp_error_message());
    /* refusals: a name not in the grid, no file, no NAME= */
    CHECK_OK(mp_options_set(o, "atom-descriptors-path", "other=x.csv"));
    CHECK(mp_run_bench(o, NULL, &s) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "'other' is not a dataset") != NULL);
    snprintf(ac, sizeof ac, "cv=%s", tmp("missing.npz"));
    CHECK_OK(mp_options_set(o, "atom-descriptors-path", ac));
    CHECK(mp_run_bench(o, NULL, &s) == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "missing.npz") != NULL);
    CHECK_OK(mp_options_set(o, "atom-descriptors-path", atom_path));
    CHECK(mp_run_bench(o, NULL, &s) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "NAME=FILE") != NULL);
    mp_options_free(o);
}

MP_TEST(columns_chemprop_v161_bond_names)
{
    CHECK(write_inputs());
    char out[8192];
    /* --bond-descriptors-path F --bond-descriptors feature: --bond-features-path F */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 8 "
                             "--threads 1 --save-dir '%s' --bond-descriptors-path '%s' "
                             "--bond-descriptors feature --no-bond-descriptor-scaling --quiet",
                             data_path, tmp("v161"), bond_path), 0);
    char m[1200];
    snprintf(m, sizeof m, "%s/model.mpm", tmp("v161"));
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, m, "cpu"));
    CHECK(e->cols.bond_dim == 1 && e->cols.bond_scaler.n_cols == 0 && e->cols.atom_dim == 0);
    CHECK_EQ_INT(e->cfg.bond_extra_dim, 1);
    mp_ensemble_free(e);
    /* descriptor: refused, as Chemprop refuses it for molecule targets */
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --save-dir '%s' "
                      "--bond-descriptors-path '%s' --bond-descriptors descriptor", data_path,
                      tmp("v161b"), bond_path) != 0);
    CHECK_MSG(strstr(out, "is_atom_bond_targets") != NULL, "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --save-dir '%s' "
                      "--bond-descriptors feature", data_path, tmp("v161c")) != 0);
    CHECK_MSG(strstr(out, "--bond-descriptors-path") != NULL, "%s", out);
}

MP_TEST(columns_npy_refused_with_the_formats_that_hold_molecules)
{
    CHECK(write_inputs());
    /* a valid .npy (2 x 2 float64): one array, no molecule boundaries */
    const char *npy = tmp("atoms.npy");
    FILE *fp = fopen(npy, "wb");
    CHECK(fp != NULL);
    char head[128];
    memset(head, ' ', sizeof head);
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = 118, head[9] = 0;
    const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }";
    memcpy(head + 10, dict, strlen(dict));
    head[127] = '\n';
    double v[4] = { 1, 2, 3, 4 };
    CHECK(fwrite(head, 1, 128, fp) == 128 && fwrite(v, sizeof v[0], 4, fp) == 4);
    fclose(fp);
    char out[8192];
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --save-dir '%s' "
                      "--atom-descriptors-path '%s'", data_path, tmp("npy"), npy) != 0);
    CHECK_MSG(strstr(out, npy) && strstr(out, ".npz") && strstr(out, "--features-path"), "%s",
              out);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --save-dir '%s' "
                      "--bond-features-path '%s'", data_path, tmp("npy"), npy) != 0);
    CHECK_MSG(strstr(out, "one array, not one per molecule") != NULL, "%s", out);
    CHECK(train_model());
    CHECK(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' "
                      "--atom-descriptors-path '%s' --bond-features-path '%s'", model_path,
                      data_path, npy, bond_path) != 0);
    CHECK_MSG(strstr(out, "one array, not one per molecule") != NULL, "%s", out);
}

/* eval's score, fingerprint's vectors and a bench run of a column model on
 * the GPU against the CPU's (1e-4 relative; bench: against mp_train alone
 * on the GPU with the same files, as on the CPU). */
MP_TEST(gpu_columns_verbs_cuda_equals_cpu)
{
    MP_NEED_GPU();
    CHECK(train_model());
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    mp_eval_result rc, rg;
    CHECK_OK(mp_eval_file(model_path, data_path, &spec, "rmse", NULL, atom_path, bond_path,
                          "cpu", 1, &rc));
    CHECK_OK(mp_eval_file(model_path, data_path, &spec, "rmse", NULL, atom_path, bond_path,
                          "cuda", 1, &rg));
    CHECK_NEAR(rg.mean[0], rc.mean[0], 1e-4, 1e-4);
    mp_eval_result_free(&rc);
    mp_eval_result_free(&rg);
    const char *fc = tmp("gpu_fp_cpu.csv"), *fg = tmp("gpu_fp_cuda.csv");
    for (int k = 0; k < 2; k++) {
        mp_fingerprint_opts o;
        memset(&o, 0, sizeof o);
        o.model_path = model_path;
        o.data_path = data_path;
        o.out_path = k ? fg : fc;
        o.backend = k ? "cuda" : "cpu";
        o.threads = 1;
        o.quiet = 1;
        o.atom_path = atom_path;
        o.bond_path = bond_path;
        mp_predict_stats st;
        CHECK_OK(mp_fingerprint_file(&o, &st));
    }
    mp_csv_reader *a = NULL, *b = NULL;
    CHECK_OK(mp_csv_open(&a, fc));
    CHECK_OK(mp_csv_open(&b, fg));
    char **fa, **fb;
    size_t na, nb, la, lb;
    int rows = 0;
    while (mp_csv_next(a, &fa, &na, &la) == MP_OK && na > 0) {
        CHECK_OK(mp_csv_next(b, &fb, &nb, &lb));
        CHECK_EQ_INT((int)nb, (int)na);
        for (size_t k = 1; rows > 0 && k < na; k++)
            CHECK_NEAR(strtod(fb[k], NULL), strtod(fa[k], NULL), 1e-4, 1e-4);
        rows++;
    }
    CHECK_EQ_INT(rows, N_MOLS + 1);
    mp_csv_close(a);
    mp_csv_close(b);

    char ds[1200], ac[1200], bc[1200], out[1100], results[1200];
    snprintf(ds, sizeof ds, "cv=%s:regression", data_path);
    snprintf(ac, sizeof ac, "cv=%s", atom_path);
    snprintf(bc, sizeof bc, "cv=%s", bond_path);
    snprintf(out, sizeof out, "%s", tmp("gpu_bench"));
    snprintf(results, sizeof results, "%s/results.tsv", out);
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "bench"));
    CHECK_OK(mp_options_set(o, "datasets", ds));
    CHECK_OK(mp_options_set(o, "models", "dmpnn"));
    CHECK_OK(mp_options_set(o, "seeds", "0"));
    CHECK_OK(mp_options_set(o, "epochs", "2"));
    CHECK_OK(mp_options_set(o, "quiet", NULL));
    CHECK_OK(mp_options_set(o, "device", "cuda"));
    CHECK_OK(mp_options_set(o, "out", out));
    CHECK_OK(mp_options_set(o, "atom-descriptors-path", ac));
    CHECK_OK(mp_options_set(o, "atom-descriptors", "descriptor"));
    CHECK_OK(mp_options_set(o, "bond-features-path", bc));
    mp_summary *s;
    CHECK_OK(mp_run_bench(o, NULL, &s));
    mp_summary_free(s);
    mp_options_free(o);
    mp_bench_row *brows;
    size_t n;
    CHECK_OK(mp_bench_rows_read(results, 0, &brows, &n, NULL));
    CHECK_EQ_INT((int)n, 1);
    mp_train_opts t = mp_train_opts_default();
    t.data_path = data_path;
    t.task = MP_TASK_REGRESSION;
    t.metric = "rmse";
    t.split.type = MP_SPLIT_SCAFFOLD_BALANCED;
    t.epochs = 2;
    t.quiet = 1;
    t.backend = "cuda";
    t.cols.atom_path = atom_path;
    t.cols.atom_mode = MP_ATOM_COLS_DESCRIPTOR;
    t.cols.bond_path = bond_path;
    mp_train_result r;
    CHECK_OK(mp_train(&t, &r));
    CHECK_NEAR(brows[0].test, r.test_mean, 1e-5, 1e-5);
    CHECK_NEAR(brows[0].val, r.val_mean, 1e-5, 1e-5);
    mp_train_result_free(&r);
    mp_bench_rows_free(brows, n);
}
