/*
 * test_atom_extra_run.c - user atom / bond columns through the whole run:
 * train (mp_train) with --atom-descriptors-path in both modes and
 * --bond-features-path, the model file's keys and scalers, predict
 * (mp_predict_file) reading the same kind of files in chunks, the
 * predictions against the ensemble's own on the scaled columns, and the
 * refusals (a missing, extra or wrong-width file at prediction, a mode
 * without a path, columns for an FFN model, resident training asked for).
 */
#include "test.h"

#include "data/csv.h"
#include "featurize/atomcols.h"
#include "run/predict.h"
#include "run/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const MOLS[] = {
    "CCO", "c1ccccc1O", "CC(=O)N", "CCCCCC", "c1ccncc1", "OCC(O)CO", "CC(C)Cl", "C1CCCCC1",
    "CCN(CC)CC", "O=C(O)c1ccccc1", "CCOC(C)=O", "Cc1ccccc1", "BrCCBr", "CC#N", "NCCO",
    "CC(C)(C)O", "c1ccc2ccccc2c1", "FC(F)(F)c1ccccc1", "CCCCO", "OC1CCCCC1", "CCS", "C=CC=C",
    "CC(=O)OC1=CC=CC=C1C(=O)O", "COc1ccccc1", "CCCCCCCC", "ClC(Cl)Cl", "CC(N)C(=O)O",
    "c1ccsc1", "CN1CCCC1", "OCCOCCO", "C", "not_a_molecule", "CCCl", "CC=O", "N#CC#N",
    "c1ccoc1", "CC(C)C", "OC(=O)CC(O)=O", "C1CC1", "CCCCN",
};
#define N_MOLS ((int)(sizeof MOLS / sizeof MOLS[0]))

static char data_path[1024], atom_path[1024], bond_path[1024], atom2_path[1024];

/* Writes the data CSV (a target from the SMILES' length, so there is
 * something to learn) and column CSVs from the molecules' real atom and
 * bond counts: 3 atom columns, 2 bond columns (and a 2-column atom file). */
static int write_inputs(void)
{
    if (data_path[0])
        return 1;
    const char *t = mp_test_tmpdir();
    snprintf(data_path, sizeof data_path, "%s/cols_data.csv", t);
    snprintf(atom_path, sizeof atom_path, "%s/cols_atoms.csv", t);
    snprintf(bond_path, sizeof bond_path, "%s/cols_bonds.csv", t);
    snprintf(atom2_path, sizeof atom2_path, "%s/cols_atoms2.csv", t);
    mp_features *f = NULL;
    mp_featurize_opts o = { 0 };
    o.n_threads = 1;
    if (mp_featurize(&f, MOLS, N_MOLS, &o) != MP_OK)
        return 0;
    FILE *d = fopen(data_path, "w"), *a = fopen(atom_path, "w"), *b = fopen(bond_path, "w");
    FILE *a2 = fopen(atom2_path, "w");
    if (!d || !a || !b || !a2)
        return 0;
    fprintf(d, "smiles,y\n");
    fprintf(a, "mol,q1,q2,q3\n");
    fprintf(a2, "mol,q1,q2\n");
    fprintf(b, "mol,w1,w2\n");
    for (int m = 0; m < N_MOLS; m++) {
        fprintf(d, "%s,%.3f\n", MOLS[m], 0.1 * (double)strlen(MOLS[m]) - 1.0);
        int na = f->g.mol_atom[m + 1] - f->g.mol_atom[m];
        int nb = (f->g.mol_edge[m + 1] - f->g.mol_edge[m]) / 2;
        for (int r = 0; r < na; r++) {
            fprintf(a, "%d,%.3f,%.3f,%d\n", m, 0.3 * r, 10.0 + m, r % 2);
            fprintf(a2, "%d,%.3f,%.3f\n", m, 0.3 * r, 1.0 * m);
        }
        for (int r = 0; r < nb; r++)
            fprintf(b, "%d,%.3f,%d\n", m, 0.5 * r + 0.1 * m, r % 3);
    }
    fclose(d);
    fclose(a);
    fclose(b);
    fclose(a2);
    mp_features_free(f);
    return 1;
}

static mp_train_opts small_run(const char *save)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = data_path;
    o.epochs = 3;
    o.hidden = 16;
    o.batch_size = 8;
    o.threads = 1;
    o.quiet = 1;
    o.save_dir = save;
    return o;
}

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* Column i (a task) of every row of a predictions CSV into v (NaN: empty). */
static int read_preds(const char *path, double *v, int n)
{
    mp_csv_reader *r = NULL;
    if (mp_csv_open(&r, path) != MP_OK)
        return 0;
    char **f;
    size_t nf, line;
    int k = 0;
    mp_csv_next(r, &f, &nf, &line);
    while (mp_csv_next(r, &f, &nf, &line) == MP_OK && nf > 0 && k < n)
        v[k++] = *f[1] ? strtod(f[1], NULL) : NAN;
    mp_csv_close(r);
    return k == n;
}

MP_TEST(atom_extra_train_predict_descriptor_mode)
{
    CHECK(write_inputs());
    char save[1024], model[1100];
    snprintf(save, sizeof save, "%s", tmp("cols_desc"));
    snprintf(model, sizeof model, "%s/model.mpm", save);
    mp_train_opts o = small_run(save);
    o.cols.atom_path = atom_path;
    o.cols.atom_mode = MP_ATOM_COLS_DESCRIPTOR;
    o.cols.bond_path = bond_path;
    mp_train_result res;
    memset(&res, 0, sizeof res);
    CHECK_OK(mp_train(&o, &res));
    CHECK(isfinite(res.test_mean));
    mp_train_result_free(&res);

    /* the model file: the mode, widths and scalers */
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    CHECK(e->cols.atom_mode == MP_ATOM_COLS_DESCRIPTOR);
    CHECK_EQ_INT(e->cols.atom_dim, 3);
    CHECK_EQ_INT(e->cols.bond_dim, 2);
    CHECK_EQ_INT(e->cfg.atom_desc_dim, 3);
    CHECK_EQ_INT(e->cfg.bond_extra_dim, 2);
    CHECK_EQ_INT((int)e->cols.atom_scaler.n_cols, 3);
    CHECK_EQ_INT((int)e->cols.bond_scaler.n_cols, 2);
    /* column 2 is 10 + m: its mean lies inside the molecules' 10 .. 49 */
    CHECK(e->cols.atom_scaler.mean[1] > 10 && e->cols.atom_scaler.mean[1] < 10 + N_MOLS);

    /* predict, in chunks of 7 rows, against the ensemble on the whole input */
    mp_predict_opts po;
    memset(&po, 0, sizeof po);
    po.model_path = model;
    po.data_path = data_path;
    po.out_path = tmp("cols_pred.csv");
    po.threads = 1;
    po.quiet = 1;
    po.chunk_rows = 7;
    po.atom_path = atom_path;
    po.bond_path = bond_path;
    mp_predict_stats ps;
    CHECK_OK(mp_predict_file(&po, &ps));
    CHECK_EQ_INT((int)ps.n_rows, N_MOLS);
    CHECK_EQ_INT((int)ps.n_invalid, 1);
    double pred[N_MOLS], ref[N_MOLS];
    CHECK(read_preds(po.out_path, pred, N_MOLS));
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
    CHECK_OK(mp_ensemble_predict(e, f, idx, N_MOLS, 0, 0, 64, ref, NULL));
    int differ = 0;
    for (int i = 0; i < N_MOLS; i++) {
        if (isnan(ref[i])) {
            CHECK(isnan(pred[i]));
            continue;
        }
        CHECK_NEAR(pred[i], ref[i], 1e-6, 1e-6);
        differ += i > 0 && fabs(pred[i] - pred[0]) > 1e-9;
    }
    CHECK(differ > N_MOLS / 2);
    /* the columns count: unscaled ones give other predictions */
    mp_features_free(f);
    f = NULL;
    CHECK_OK(mp_featurize(&f, MOLS, N_MOLS, &fo));
    CHECK_OK(mp_graphs_read_columns(&f->g, atom_path, 0, MOLS));
    CHECK_OK(mp_graphs_read_columns(&f->g, bond_path, 1, MOLS));
    double raw[N_MOLS];
    CHECK_OK(mp_ensemble_predict(e, f, idx, N_MOLS, 0, 0, 64, raw, NULL));
    CHECK(fabs(raw[0] - ref[0]) > 1e-6);
    mp_features_free(f);
    mp_ensemble_free(e);

    /* refusals at prediction: a file missing, one too many, another width */
    po.bond_path = NULL;
    CHECK(mp_predict_file(&po, &ps) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "--bond-features-path") != NULL);
    po.bond_path = bond_path;
    po.atom_path = atom2_path;
    CHECK(mp_predict_file(&po, &ps) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "3 atom descriptors per atom") != NULL);
}

MP_TEST(atom_extra_train_feature_mode_unscaled)
{
    CHECK(write_inputs());
    char save[1024], model[1100];
    snprintf(save, sizeof save, "%s", tmp("cols_feat"));
    snprintf(model, sizeof model, "%s/model.mpm", save);
    mp_train_opts o = small_run(save);
    o.cols.atom_path = atom2_path;      /* auto: feature */
    o.cols.no_atom_scaling = 1;
    mp_train_result res;
    memset(&res, 0, sizeof res);
    CHECK_OK(mp_train(&o, &res));
    mp_train_result_free(&res);
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    CHECK(e->cols.atom_mode == MP_ATOM_COLS_FEATURE && e->cols.atom_dim == 2);
    CHECK(e->cols.atom_scaler.n_cols == 0 && e->cols.bond_dim == 0);
    CHECK_EQ_INT(e->cfg.atom_extra_dim, 2);
    mp_ensemble_free(e);
    /* a model without columns refuses a columns file at prediction */
    mp_predict_opts po;
    memset(&po, 0, sizeof po);
    po.model_path = model;
    po.data_path = data_path;
    po.out_path = tmp("cols_pred2.csv");
    po.quiet = 1;
    po.atom_path = atom2_path;
    po.bond_path = bond_path;
    mp_predict_stats ps;
    CHECK(mp_predict_file(&po, &ps) == MP_ERR_ARG);
}

MP_TEST(atom_extra_train_refusals)
{
    CHECK(write_inputs());
    mp_train_result res;
    memset(&res, 0, sizeof res);
    mp_train_opts o = small_run(NULL);
    o.cols.atom_mode = MP_ATOM_COLS_DESCRIPTOR;     /* a mode without a file */
    CHECK(mp_train(&o, &res) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "without --atom-descriptors-path") != NULL);
    mp_train_result_free(&res);
    o = small_run(NULL);
    o.model = MP_MODEL_FFN;
    o.features = MP_FEAT_MORGAN;
    o.cols.bond_path = bond_path;
    memset(&res, 0, sizeof res);
    CHECK(mp_train(&o, &res) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "FFN") != NULL);
    mp_train_result_free(&res);
    /* a columns file of the wrong molecule count names the file */
    o = small_run(NULL);
    o.cols.atom_path = "tests/fixtures/atomcols/atoms3.npz";
    memset(&res, 0, sizeof res);
    CHECK(mp_train(&o, &res) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "atoms3.npz: 5 arrays for 40 input rows") != NULL);
    mp_train_result_free(&res);
}

/* Training with columns on the device-resident steps (the cpu backend has
 * them too) follows the host loop: the same scores. */
MP_TEST(atom_extra_resident_steps_follow_the_host_loop)
{
    CHECK(write_inputs());
    /* descriptors + bonds with dropout (the descriptor layer's dropout key
     * in its place in the step's keys), features with dropout, bonds alone */
    const int cases[3] = { 7, 13, 2 };   /* 1 atoms, 2 bonds, 4 dropout, 8 feature mode */
    for (int ci = 0; ci < 3; ci++) {
        int v = cases[ci];
        double val[2], test[2];
        for (int k = 0; k < 2; k++) {
            mp_train_opts o = small_run(NULL);
            if (v & 1)
                o.cols.atom_path = atom_path;
            o.cols.atom_mode = (v & 8) ? MP_ATOM_COLS_FEATURE : MP_ATOM_COLS_DESCRIPTOR;
            if (v & 2)
                o.cols.bond_path = bond_path;
            o.dropout = (v & 4) ? 0.1 : 0;
            o.resident = k;   /* 0: host loop, 1: resident slots */
            mp_train_result res;
            memset(&res, 0, sizeof res);
            CHECK_OK(mp_train(&o, &res));
            val[k] = res.val_mean;
            test[k] = res.test_mean;
            mp_train_result_free(&res);
        }
        CHECK(isfinite(val[0]) && isfinite(test[0]));
        CHECK_MSG(fabs(val[1] - val[0]) <= 1e-6 * fabs(val[0]) &&
                  fabs(test[1] - test[0]) <= 1e-6 * fabs(test[0]),
                  "case %d: resident %.9g / %.9g, host loop %.9g / %.9g", v, val[1], test[1],
                  val[0], test[0]);
    }
}

/* Atom columns beside a molecule features file (--features-path): both
 * reach the model, at training and at prediction. */
MP_TEST(atom_extra_with_a_features_file)
{
    CHECK(write_inputs());
    const char *feat = tmp("cols_molfeat.csv");
    FILE *fp = fopen(feat, "w");
    CHECK(fp);
    fprintf(fp, "f1,f2\n");
    for (int m = 0; m < N_MOLS; m++)
        fprintf(fp, "%.3f,%d\n", 0.05 * m, m % 2);
    fclose(fp);
    char save[1024], model[1100];
    snprintf(save, sizeof save, "%s", tmp("cols_ff"));
    snprintf(model, sizeof model, "%s/model.mpm", save);
    mp_train_opts o = small_run(save);
    o.features_path = feat;
    o.cols.atom_path = atom_path;
    mp_train_result res;
    memset(&res, 0, sizeof res);
    CHECK_OK(mp_train(&o, &res));
    mp_train_result_free(&res);
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    CHECK(e->cfg.extra_dim == 2 && e->cfg.atom_extra_dim == 3);
    mp_ensemble_free(e);
    mp_predict_opts po;
    memset(&po, 0, sizeof po);
    po.model_path = model;
    po.data_path = data_path;
    po.out_path = tmp("cols_ff_pred.csv");
    po.quiet = 1;
    po.features_path = feat;
    po.atom_path = atom_path;
    mp_predict_stats ps;
    CHECK_OK(mp_predict_file(&po, &ps));
    double pred[N_MOLS];
    CHECK(read_preds(po.out_path, pred, N_MOLS));
    CHECK(isfinite(pred[0]) && isnan(pred[31]));
    po.atom_path = NULL;
    CHECK(mp_predict_file(&po, &ps) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "--atom-descriptors-path") != NULL);
}
