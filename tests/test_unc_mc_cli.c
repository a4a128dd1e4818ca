/*
 * test_unc_mc_cli.c - `molprop predict --uncertainty / --calibrate` on
 * multiclass models and with mve-weighting, end to end through the
 * command, on models trained here (ESOL's solubility cut into tertiles:
 * classes 0, 1, 2; ESOL itself for an MVE ensemble).  What the command
 * writes is checked against references worked out here from the library's
 * own per-member predictions: the members' per-class variance, the
 * conformal sets from the calibration set's scores, the Dirichlet u from
 * the raw evidences, the MVE weights against a grid search; and every
 * misuse is refused with a message naming the model and the method.
 */
#include "test.h"
#include "gpu_test.h"
#include "test_unc_util.h"
#include "data/dataset.h"
#include "featurize/featurize.h"
#include "gpu/gpu.h"
#include "run/ensemble.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* ESOL's solubility in tertiles (tmp("mc/esol3.csv")), split 50/25/25 at
 * random into tmp("mc"), a multiclass ensemble of 2 (m2) and a
 * multiclass-dirichlet model (md) trained on its train part; the
 * directory, NULL on failure. */
static const char *mc_setup(void)
{
    static int done;
    static char dir[1200];   /* its own: tmp's buffers rotate */
    snprintf(dir, sizeof dir, "%s", tmp("mc"));
    if (done)
        return dir;
    char path[1300];
    snprintf(path, sizeof path, "%s/esol3.csv", dir);
    mp_dataset *d = tu_load(mp_test_shared("datasets/esol.csv.gz"));
    if (!d)
        return NULL;
    double *v = malloc(sizeof(double) * d->n_rows);
    for (size_t i = 0; i < d->n_rows; i++)
        v[i] = d->targets[i];
    for (size_t a = 1; a < d->n_rows; a++)   /* insertion sort: 1,128 values */
        for (size_t b = a; b > 0 && v[b] < v[b - 1]; b--) {
            double t = v[b];
            v[b] = v[b - 1];
            v[b - 1] = t;
        }
    double lo = v[d->n_rows / 3], hi = v[2 * d->n_rows / 3];
    free(v);
    mkdir(dir, 0755);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return NULL;
    fprintf(fp, "smiles,sol\n");
    for (size_t i = 0; i < d->n_rows; i++)
        fprintf(fp, "%s,%d\n", d->smiles[i], d->targets[i] < lo ? 0 : d->targets[i] < hi ? 1 : 2);
    fclose(fp);
    mp_dataset_free(d);
    if (mp_test_cli(out, sizeof out, "split --data '%s' --split random --seed 0 --split-sizes "
                    "0.5,0.25,0.25 --out '%s'", path, dir) != 0 ||
        mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --task multiclass --model ffn "
                    "--features morgan --epochs 10 --hidden 64 --dropout 0.1 --ensemble-size 2 "
                    "--threads 2 --quiet --save-dir '%s/m2'", dir, dir) != 0 ||
        mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --task multiclass-dirichlet "
                    "--model ffn --features morgan --epochs 10 --hidden 64 --threads 2 --quiet "
                    "--save-dir '%s/md'", dir, dir) != 0)
        return NULL;
    done = 1;
    return dir;
}

/* Every member's values of every row of the file at path (n x T x V per
 * member, members one after another), as the command predicts them (the
 * same batches of 256); *n the rows.  NULL on failure. */
static double *member_values(mp_ensemble *e, const char *path, size_t *n, int raw)
{
    mp_dataset *d = tu_load(path);
    mp_features *f = NULL;
    if (!d)
        return NULL;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    size_t cells = d->n_rows * e->n_tasks * (size_t)mp_ensemble_n_values(e);
    double *v = malloc(sizeof(double) * cells * (size_t)e->n_members);
    int32_t *idx = malloc(sizeof(int32_t) * d->n_rows);
    int ok = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo) == MP_OK;
    for (size_t i = 0; i < d->n_rows; i++)
        idx[i] = (int32_t)i;
    for (int k = 0; ok && k < e->n_members; k++)
        ok = (raw ? mp_ensemble_predict_raw(e, f, idx, (int32_t)d->n_rows, k, 256,
                                            v + (size_t)k * cells)
                  : mp_ensemble_predict_values(e, f, idx, (int32_t)d->n_rows, k, 1, 256,
                                               v + (size_t)k * cells, NULL)) == MP_OK;
    *n = d->n_rows;
    mp_features_free(f);
    mp_dataset_free(d);
    free(idx);
    if (!ok) {
        free(v);
        return NULL;
    }
    return v;
}

/* ===================================================================== */
/* Ensemble variance and conformal sets                                   */
/* ===================================================================== */

MP_TEST(unc_mc_cli_ensemble_variance_and_conformal_sets)
{
    const char *dir = mc_setup();
    CHECK_MSG(dir, "setup: %s", out);
    const char *pred = tmp("mc_ens.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m2/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --uncertainty ensemble --calibrate "
                             "conformal-multiclass --calibration-data '%s/val.csv' --alpha 0.1 "
                             "--quiet", dir, dir, pred, dir), 0);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    const char *want = "smiles,sol,sol_class0,sol_class1,sol_class2,sol_class0_unc,"
                       "sol_class1_unc,sol_class2_unc,sol_class0_in_set,sol_class1_in_set,"
                       "sol_class2_in_set\n";
    int header_ok = !strncmp(text, want, strlen(want));
    mp_free(text);
    CHECK_MSG(header_ok, "header of %s", pred);
    /* the references: each member's class probabilities on val and test */
    char path[1300], model[1300];
    snprintf(model, sizeof model, "%s/m2/model.mpm", dir);
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    size_t nv = 0, nt = 0;
    snprintf(path, sizeof path, "%s/val.csv", dir);
    double *vv = member_values(e, path, &nv, 0);
    snprintf(path, sizeof path, "%s/test.csv", dir);
    double *tv = member_values(e, path, &nt, 0);
    mp_ensemble_free(e);
    CHECK(vv && tv && nv > 200 && nt > 200);
    mp_dataset *V = tu_load(tmp("mc/val.csv")), *T = tu_load(tmp("mc/test.csv"));
    mp_dataset *P = tu_load(pred);
    CHECK(V && T && P && P->n_rows == nt);
    /* the calibration scores -p_y of the member mean; qhat their quantile at
     * rank ceil(level (n - 1)) + 1, level = ceil((n + 1) 0.9) / n */
    double *s = malloc(sizeof(double) * nv);
    for (size_t i = 0; i < nv; i++) {
        int y = (int)V->targets[i];
        s[i] = -(vv[i * 3 + y] + vv[nv * 3 + i * 3 + y]) / 2;
    }
    double level = ceil((double)(nv + 1) * 0.9) / (double)nv;
    double qhat = tu_kth_smallest(s, nv, (size_t)ceil(level * (double)(nv - 1)) + 1);
    free(s);
    int bad_var = -1, bad_set = -1, covered = 0;
    double nll = 0;
    for (size_t i = 0; i < nt; i++) {
        for (int c = 0; c < 3; c++) {
            char name[64];
            double a = tv[i * 3 + c], b = tv[nt * 3 + i * 3 + c], mu = (a + b) / 2;
            double var = ((a - mu) * (a - mu) + (b - mu) * (b - mu)) / 2;
            snprintf(name, sizeof name, "sol_class%d_unc", c);
            double got = P->targets[i * P->n_tasks + tu_col(P, name)];
            /* the command's member values may differ from these in their
             * last float bits: with OpenBLAS's Haswell kernels a product's
             * bits depend on the batch it is in (OPENBLAS_CORETYPE=Haswell,
             * AMD EPYC, 2026-12-03: batches of 256 and of 50 give member
             * values 1e-9 apart; SkylakeX's give the same), which moves the
             * variance by about |a - b| (|a| + |b|) 2^-24; a wrong
             * estimator (the std, ddof 1, another member) is off by far more */
            double tol = 1e-7 * var + 1e-6 * fabs(a - b) * (fabs(a) + fabs(b)) + 1e-12;
            if (bad_var < 0 && !(fabs(got - var) <= tol))
                bad_var = (int)i;
            snprintf(name, sizeof name, "sol_class%d_in_set", c);
            double in = P->targets[i * P->n_tasks + tu_col(P, name)];
            if (bad_set < 0 && in != (double)(-mu <= qhat))
                bad_set = (int)i;
            if (c == (int)T->targets[i]) {
                covered += in == 1;
                snprintf(name, sizeof name, "sol_class%d", c);
                nll -= log(P->targets[i * P->n_tasks + tu_col(P, name)]);
            }
        }
    }
    free(vv);
    free(tv);
    CHECK_MSG(bad_var < 0, "row %d: the class variances are not the members'", bad_var);
    CHECK_MSG(bad_set < 0, "row %d: the prediction set is not {k : p_k >= %g}", bad_set, -qhat);
    /* eval scores the file as worked out here; coverage near 1 - alpha */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                             "--uncertainty-metrics nll,coverage", pred, dir), 0);
    CHECK_NEAR(tu_eval_number(out, "coverage"), (double)covered / (double)nt, 1e-6, 0);
    CHECK_NEAR(tu_eval_number(out, "nll"), nll / (double)nt, 0, 1e-5);
    CHECK_MSG(fabs((double)covered / (double)nt - 0.9) <= 0.04, "coverage %g at alpha 0.1",
              (double)covered / (double)nt);
    mp_dataset_free(V);
    mp_dataset_free(T);
    mp_dataset_free(P);
}

/* ===================================================================== */
/* Dropout, the adaptive sets, isotonic-multiclass                        */
/* ===================================================================== */

MP_TEST(unc_mc_cli_dropout_adaptive_isotonic)
{
    const char *dir = mc_setup();
    CHECK_MSG(dir, "setup: %s", out);
    const char *p1 = tmp("mc_do1.csv"), *p2 = tmp("mc_do2.csv"), *pi = tmp("mc_iso.csv");
    for (int r = 0; r < 2; r++)
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m2/model.mpm' --data "
                                 "'%s/test.csv' --out '%s' --uncertainty dropout --dropout-seed "
                                 "3 --calibrate conformal-adaptive --calibration-data "
                                 "'%s/val.csv' --alpha 0.2 --threads %d --quiet", dir, dir,
                                 r ? p2 : p1, dir, r + 1), 0);
    char *a = mp_test_slurp(p1, NULL), *b = mp_test_slurp(p2, NULL);
    CHECK(a && b);
    int same = !strcmp(a, b);
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "dropout with one seed gave two files");
    mp_dataset *P = tu_load(p1), *T = tu_load(tmp("mc/test.csv"));
    CHECK(P && T && P->n_rows == T->n_rows);
    /* APS sets are nested: a class in the set brings every more probable
     * one; the variances are variances */
    int nested = 1, var_ok = 1, covered = 0;
    for (size_t i = 0; i < P->n_rows; i++) {
        double p[3], in[3];
        for (int c = 0; c < 3; c++) {
            char name[64];
            snprintf(name, sizeof name, "sol_class%d", c);
            p[c] = P->targets[i * P->n_tasks + tu_col(P, name)];
            snprintf(name, sizeof name, "sol_class%d_in_set", c);
            in[c] = P->targets[i * P->n_tasks + tu_col(P, name)];
            snprintf(name, sizeof name, "sol_class%d_unc", c);
            var_ok &= P->targets[i * P->n_tasks + tu_col(P, name)] >= 0;
        }
        for (int c = 0; c < 3; c++)
            for (int j = 0; j < 3; j++)
                nested &= !(in[c] == 1 && p[j] > p[c] && in[j] != 1);
        covered += in[(int)T->targets[i]] == 1;
    }
    CHECK(nested && var_ok);
    CHECK_MSG(covered >= 0.75 * (double)P->n_rows, "adaptive sets cover %d of %zu at alpha 0.2",
              covered, P->n_rows);
    mp_dataset_free(P);
    /* isotonic-multiclass: probabilities that sum to 1, the task column
     * their most probable class */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m2/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --calibrate isotonic-multiclass "
                             "--calibration-data '%s/val.csv' --quiet", dir, dir, pi, dir), 0);
    CHECK((P = tu_load(pi)) != NULL);
    int sums = 1, argmax = 1, changed = 0;
    mp_dataset *R = NULL;
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m2/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --quiet", dir, dir, tmp("mc_raw.csv")), 0);
    CHECK((R = tu_load(tmp("mc_raw.csv"))) != NULL);
    for (size_t i = 0; i < P->n_rows; i++) {
        const double *row = P->targets + i * P->n_tasks;
        double s = row[1] + row[2] + row[3];
        int best = row[2] > row[1] ? 1 : 0;
        best = row[3] > row[1 + best] ? 2 : best;
        sums &= fabs(s - 1) < 1e-7;
        argmax &= row[0] == best;
        changed |= row[1] != R->targets[i * R->n_tasks + 1];
    }
    mp_dataset_free(P);
    mp_dataset_free(R);
    mp_dataset_free(T);
    CHECK(sums && argmax && changed);
}

/* ===================================================================== */
/* Multiclass Dirichlet                                                   */
/* ===================================================================== */

MP_TEST(unc_mc_cli_dirichlet_u_from_the_evidences)
{
    const char *dir = mc_setup();
    CHECK_MSG(dir, "setup: %s", out);
    const char *pu = tmp("mc_dir.csv"), *p0 = tmp("mc_dir0.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/md/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --uncertainty dirichlet --quiet", dir,
                             dir, pu), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/md/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --quiet", dir, dir, p0), 0);
    char *a = mp_test_slurp(pu, NULL), *b = mp_test_slurp(p0, NULL);
    CHECK(a && b);
    /* the same rows, with u appended */
    int same = 1;
    for (const char *x = a, *y = b; same && *y;) {
        size_t ly = strcspn(y, "\n");
        same = !strncmp(x, y, ly) && x[ly] == ',';
        x = strchr(x, '\n') + 1;
        y += ly + 1;
    }
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "--uncertainty dirichlet changed the probabilities");
    char model[1300];
    snprintf(model, sizeof model, "%s/md/model.mpm", dir);
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    size_t n = 0;
    double *raw = member_values(e, tmp("mc/test.csv"), &n, 1);
    mp_ensemble_free(e);
    mp_dataset *P = tu_load(pu);
    CHECK(raw && P && P->n_rows == n);
    int bad = -1;
    for (size_t i = 0; i < n && bad < 0; i++) {
        double S = 0;
        for (int c = 0; c < 3; c++)
            S += log1p(exp(raw[i * 3 + c])) + 1;
        double u = P->targets[i * P->n_tasks + tu_col(P, "sol_unc")];
        if (!(fabs(u - 3 / S) <= 1e-7 * u))
            bad = (int)i;
    }
    free(raw);
    mp_dataset_free(P);
    CHECK_MSG(bad < 0, "row %d: u is not C / S of the evidences", bad);
}

/* ===================================================================== */
/* MVE weighting                                                          */
/* ===================================================================== */

MP_TEST(unc_cli_mve_weighting_minimizes_the_calibration_nll)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", tmp("mvew"));
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "split --data '%s' --split random --seed 2 "
                             "--split-sizes 0.5,0.25,0.25 --out '%s'", esol, dir), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --task regression-mve "
                             "--model ffn --features morgan --epochs 10 --hidden 64 "
                             "--ensemble-size 3 --threads 2 --quiet --save-dir '%s/m'", dir,
                             dir), 0);
    /* predicted on the calibration set itself: the weighted NLL there */
    double nll[2];
    for (int k = 0; k < 2; k++) {
        const char *pred = tmp(k ? "mvew_cal.csv" : "mvew_mve.csv");
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                                 "'%s/val.csv' --out '%s' --uncertainty mve %s --calibration-data "
                                 "'%s/val.csv' --quiet", dir, dir, pred,
                                 k ? "--calibrate mve-weighting" : "", dir), 0);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/val.csv' "
                                 "--uncertainty-metrics nll", pred, dir), 0);
        nll[k] = tu_eval_number(out, "nll");
    }
    /* the reference: the NLL of every weighting on a 0.01 grid of the
     * simplex, from the members' own (mean, variance) */
    char model[1300];
    snprintf(model, sizeof model, "%s/m/model.mpm", dir);
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    size_t n = 0;
    double *v = member_values(e, tmp("mvew/val.csv"), &n, 0);
    mp_ensemble_free(e);
    mp_dataset *V = tu_load(tmp("mvew/val.csv"));
    CHECK(v && V && V->n_rows == n);
    double best = INFINITY, uniform = 0;
    for (int a = 0; a <= 100; a++)
        for (int b = 0; a + b <= 100; b++) {
            double w[3] = { a / 100.0, b / 100.0, (100 - a - b) / 100.0 }, s = 0;
            for (size_t i = 0; i < n; i++) {
                double mu = 0, var = 0;
                for (int k = 0; k < 3; k++) {
                    mu += v[(size_t)k * n * 2 + i * 2] / 3;
                    var += w[k] * v[(size_t)k * n * 2 + i * 2 + 1];
                }
                double err = mu - V->targets[i];
                s += log(2 * M_PI * var) / 2 + err * err / (2 * var);
            }
            best = fmin(best, s / (double)n);
        }
    for (size_t i = 0; i < n; i++) {
        double mu = 0, var = 0;
        for (int k = 0; k < 3; k++) {
            mu += v[(size_t)k * n * 2 + i * 2] / 3;
            var += v[(size_t)k * n * 2 + i * 2 + 1] / 3;
        }
        double err = mu - V->targets[i];
        uniform += (log(2 * M_PI * var) / 2 + err * err / (2 * var)) / (double)n;
    }
    free(v);
    mp_dataset_free(V);
    CHECK_NEAR(nll[0], uniform, 0, 1e-5);    /* uncalibrated: equal weights */
    CHECK_MSG(nll[1] <= best + 1e-4 * fabs(best) && nll[1] >= best - 0.01,
              "mve-weighting: calibration nll %g, grid minimum %g", nll[1], best);
    CHECK_MSG(nll[1] < nll[0], "mve-weighting nll %g, equal weights %g", nll[1], nll[0]);
    /* and with dropout's per-member variances it runs too */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --uncertainty dropout --calibrate "
                             "mve-weighting --calibration-data '%s/val.csv' --quiet", dir, dir,
                             tmp("mvew_do.csv"), dir), 0);
    /* an estimator without per-member variances is refused, naming both */
    CHECK(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data '%s/test.csv' "
                      "--out '%s' --calibrate mve-weighting --calibration-data '%s/val.csv'",
                      dir, dir, tmp("x.csv"), dir) != 0);
    CHECK_MSG(strstr(out, "m/model.mpm") && strstr(out, "mve-weighting") &&
              strstr(out, "(not none)"), "%s", out);
}

/* ===================================================================== */
/* Misuse                                                                 */
/* ===================================================================== */

MP_TEST(unc_mc_cli_misuse_is_refused)
{
    const char *dir = mc_setup();
    CHECK_MSG(dir, "setup: %s", out);
    static const struct {
        const char *model, *args, *want[2];
    } cases[] = {
        { "m2", "--uncertainty mve", { "--uncertainty mve", "multiclass model" } },
        { "m2", "--uncertainty evidential", { "evidential", "multiclass model" } },
        { "m2", "--uncertainty quantile", { "quantile", "multiclass model" } },
        { "m2", "--uncertainty dirichlet", { "dirichlet", "multiclass-dirichlet" } },
        { "md", "--uncertainty mve", { "--uncertainty mve", "multiclass-dirichlet model" } },
        { "m2", "--calibrate platt --calibration-data V", { "platt", "multiclass model" } },
        { "m2", "--calibrate isotonic --calibration-data V", { "isotonic does not fit",
                                                               "isotonic-multiclass" } },
        { "m2", "--calibrate zscaling --uncertainty ensemble --calibration-data V",
          { "zscaling", "multiclass model" } },
        { "m2", "--calibrate mve-weighting --calibration-data V", { "mve-weighting", "multiclass" } },
        { "m2", "--calibrate conformal-multiclass", { "--calibration-data", "conformal-multiclass" } },
        { "m2", "--calibrate conformal-multiclass --calibration-data B", { "bad_labels.csv:3", "not a class" } },
    };
    char bad[1300];
    snprintf(bad, sizeof bad, "%s/bad_labels.csv", dir);
    FILE *fp = fopen(bad, "w");
    CHECK(fp != NULL);
    fprintf(fp, "smiles,sol\nCCO,1\nCCCO,7\n");
    fclose(fp);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[2048], val[1400];
        snprintf(val, sizeof val, "'%s/val.csv'", dir);
        snprintf(args, sizeof args, "%s", cases[k].args);
        char *at = strstr(args, "--calibration-data ");
        if (at) {
            char c = at[19];
            snprintf(at + 19, sizeof args - (size_t)(at + 19 - args), "%s",
                     c == 'V' ? val : (snprintf(val, sizeof val, "'%s'", bad), val));
        }
        int rc = mp_test_cli(out, sizeof out, "predict --model '%s/%s/model.mpm' --data "
                             "'%s/test.csv' --out '%s' %s", dir, cases[k].model, dir,
                             tmp("mis.csv"), args);
        CHECK_MSG(rc != 0, "'%s' was accepted", cases[k].args);
        for (int w = 0; w < 2; w++)
            CHECK_MSG(strstr(out, cases[k].want[w]), "'%s': no '%s' in: %s", cases[k].args,
                      cases[k].want[w], out);
        if (k < 9)
            CHECK_MSG(strstr(out, "model.mpm"), "'%s': the model is not named: %s",
                      cases[k].args, out);
    }
    /* a regression model takes no multiclass calibrator */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --model ffn --features "
                             "morgan --epochs 1 --hidden 16 --threads 1 --quiet --save-dir "
                             "'%s/r'", dir, dir), 0);
    CHECK(mp_test_cli(out, sizeof out, "predict --model '%s/r/model.mpm' --data '%s/test.csv' "
                      "--out '%s' --calibrate conformal-multiclass --calibration-data "
                      "'%s/val.csv'", dir, dir, tmp("mis.csv"), dir) != 0);
    CHECK_MSG(strstr(out, "conformal-multiclass does not fit this regression model"), "%s", out);
    /* eval: only nll and coverage for a multiclass task; labels are classes */
    const char *pred = tmp("mis_ok.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m2/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --quiet", dir, dir, pred), 0);
    CHECK(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                      "--uncertainty-metrics ence", pred, dir) != 0);
    CHECK_MSG(strstr(out, "multiclass: only nll and coverage"), "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                      "--uncertainty-metrics coverage", pred, dir) != 0);
    CHECK_MSG(strstr(out, "in_set"), "%s", out);
}

/* ===================================================================== */
/* The cuda backend                                                       */
/* ===================================================================== */

/* The prediction files a (cpu) and b (gpu) agree: same columns and rows,
 * every number within tol of the cpu's (relative to 1 + |x|), and the 0/1
 * set columns on all but *flips cells (a class at the set's edge). */
static int files_agree(const char *a, const char *b, double tol, int *flips)
{
    mp_dataset *A = tu_load(a), *B = tu_load(b);
    int ok = A && B && A->n_rows == B->n_rows && A->n_tasks == B->n_tasks;
    *flips = 0;
    for (size_t j = 0; ok && j < A->n_tasks; j++) {
        int set = strstr(A->task_names[j], "_in_set") != NULL;
        ok = !strcmp(A->task_names[j], B->task_names[j]);
        for (size_t i = 0; ok && i < A->n_rows; i++) {
            double x = A->targets[i * A->n_tasks + j], y = B->targets[i * B->n_tasks + j];
            if (set || !strcmp(A->task_names[j], "sol"))
                *flips += x != y;   /* a set's edge, or the most probable class */
            else
                ok = fabs(x - y) <= tol * (1 + fabs(x));
        }
    }
    mp_dataset_free(A);
    mp_dataset_free(B);
    return ok;
}

/* The first n data rows of src (with its header) into dst; 0 on failure. */
static int head_rows(const char *src, const char *dst, int n)
{
    char *text = mp_test_slurp(src, NULL);
    FILE *fp = text ? fopen(dst, "w") : NULL;
    if (!fp) {
        mp_free(text);
        return 0;
    }
    const char *p = text;
    for (int k = 0; k <= n && *p; k++) {
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    int ok = fwrite(text, 1, (size_t)(p - text), fp) == (size_t)(p - text);
    ok = fclose(fp) == 0 && ok;
    mp_free(text);
    return ok;
}

MP_TEST(gpu_unc_mc_multiclass_matches_cpu)
{
    MP_NEED_GPU();
    const char *dir = mc_setup();
    CHECK_MSG(dir, "setup: %s", out);
    static const struct {
        const char *model, *args;
    } runs[] = {
        { "m2", "--uncertainty ensemble --calibrate conformal-multiclass" },
        { "m2", "--uncertainty dropout --calibrate conformal-adaptive" },
        { "m2", "--calibrate isotonic-multiclass" },
        { "md", "--uncertainty dirichlet" },
    };
    /* MC dropout's masks are keyed by each batch's first row, and the
     * batches are 256 rows on the cpu, 4096 on a gpu: the dropout run reads
     * 200 test and calibration rows, one batch on either */
    char t200[1300], v200[1300];
    snprintf(t200, sizeof t200, "%s/test200.csv", dir);
    snprintf(v200, sizeof v200, "%s/val200.csv", dir);
    char tpath[1300], vpath[1300];
    snprintf(tpath, sizeof tpath, "%s/test.csv", dir);
    snprintf(vpath, sizeof vpath, "%s/val.csv", dir);
    CHECK(head_rows(tpath, t200, 200) && head_rows(vpath, v200, 200));
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char a[1300], b[1300];
        const char *td = k == 1 ? "test200" : "test", *vd = k == 1 ? "val200" : "val";
        snprintf(a, sizeof a, "%s/gpu_cpu_%zu.csv", dir, k);
        snprintf(b, sizeof b, "%s/gpu_gpu_%zu.csv", dir, k);
        for (int g = 0; g < 2; g++)
            CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/%s/model.mpm' --data "
                                     "'%s/%s.csv' --out '%s' %s --calibration-data "
                                     "'%s/%s.csv' --quiet%s", dir, runs[k].model, dir, td,
                                     g ? b : a, runs[k].args, dir, vd,
                                     g ? " --device gpu --precision fp32" : ""), 0);
        int flips;
        /* isotonic maps are steps: a probability at a step may land on
         * either side, so only its sums and classes are compared loosely */
        int ok = files_agree(a, b, k == 2 ? 1.0 : 1e-4, &flips);
        CHECK_MSG(ok, "'%s': the gpu's numbers differ from the cpu's", runs[k].args);
        CHECK_MSG(flips <= 3, "'%s': %d set / class cells differ", runs[k].args, flips);
    }
}
