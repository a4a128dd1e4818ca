/*
 * test_unc_ml_cli.c - `molprop predict --calibrate conformal-multilabel`
 * and `molprop eval --uncertainty-metrics coverage` of what it writes, end
 * to end through the command, on a 2-task classification model trained
 * here (ClinTox: FDA_APPROVED, CT_TOX; a random split, so calibration and
 * test molecules are exchangeable).  The sets are checked against
 * thresholds worked out here from the library's own probabilities of the
 * calibration molecules (order statistics by counting), the coverage
 * against the file's sets and labels counted here, and every misuse is
 * refused with a message naming the file or the model.  On a GPU the same
 * host code applies the calibrator to the GPU's probabilities: the files
 * agree with the cpu's (gpu_unc_ml_multilabel_matches_cpu, a skip here).
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

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* ClinTox split 50/25/25 at random into tmp("ml"), with val_missing.csv
 * (val.csv with every 5th CT_TOX and every 7th FDA_APPROVED label blank)
 * and a 2-task classification FFN (m) trained on the train part; the
 * directory, NULL on failure. */
static const char *ml_setup(void)
{
    static int done;
    static char dir[1200];
    snprintf(dir, sizeof dir, "%s", tmp("ml"));
    if (done)
        return dir;
    if (mp_test_cli(out, sizeof out, "split --data '%s' --split random --seed 0 --split-sizes "
                    "0.5,0.25,0.25 --out '%s'", mp_test_shared("datasets/clintox.csv.gz"),
                    dir) != 0 ||
        mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --task classification "
                    "--model ffn --features morgan --epochs 10 --hidden 64 --threads 2 --quiet "
                    "--save-dir '%s/m'", dir, dir) != 0)
        return NULL;
    char path[1300];
    snprintf(path, sizeof path, "%s/val.csv", dir);
    mp_dataset *V = tu_load(path);
    snprintf(path, sizeof path, "%s/val_missing.csv", dir);
    FILE *fp = V ? fopen(path, "w") : NULL;
    if (!fp) {
        mp_dataset_free(V);
        return NULL;
    }
    fprintf(fp, "smiles,FDA_APPROVED,CT_TOX\n");
    for (size_t i = 0; i < V->n_rows; i++) {
        fputc('"', fp);
        fputs(V->smiles[i], fp);
        fputc('"', fp);
        for (size_t k = 0; k < 2; k++) {
            double y = V->targets[i * V->n_tasks + k];
            int blank = k == 0 ? i % 7 == 3 : i % 5 == 1;
            if (blank || isnan(y))
                fputc(',', fp);
            else
                fprintf(fp, ",%.0f", y);
        }
        fputc('\n', fp);
    }
    int ok = fclose(fp) == 0;
    mp_dataset_free(V);
    if (!ok)
        return NULL;
    done = 1;
    return dir;
}

/* The model's probabilities of the valid rows of the file at path (n x 2,
 * NaN rows for invalid SMILES), as the command predicts them (batches of
 * 256); NULL on failure. */
static double *probabilities(mp_ensemble *e, const char *path, size_t *n)
{
    mp_dataset *d = tu_load(path);
    mp_features *f = NULL;
    if (!d)
        return NULL;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    double *p = malloc(sizeof(double) * d->n_rows * e->n_tasks);
    int32_t *idx = malloc(sizeof(int32_t) * d->n_rows);
    int32_t nv = 0;
    int ok = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo) == MP_OK;
    for (size_t i = 0; ok && i < d->n_rows; i++)
        if (f->g.valid[i])
            idx[nv++] = (int32_t)i;
    double *pv = malloc(sizeof(double) * ((size_t)nv + 1) * e->n_tasks);
    ok = ok && mp_ensemble_predict(e, f, idx, nv, 0, 0, 256, pv, NULL) == MP_OK;
    for (size_t i = 0; ok && i < d->n_rows * e->n_tasks; i++)
        p[i] = NAN;
    for (int32_t r = 0; ok && r < nv; r++)
        memcpy(p + (size_t)idx[r] * e->n_tasks, pv + (size_t)r * e->n_tasks,
               sizeof(double) * e->n_tasks);
    *n = d->n_rows;
    free(pv);
    free(idx);
    mp_features_free(f);
    mp_dataset_free(d);
    if (!ok) {
        free(p);
        return NULL;
    }
    return p;
}

/* ===================================================================== */
/* The sets and their coverage                                            */
/* ===================================================================== */

MP_TEST(unc_ml_cli_sets_and_coverage)
{
    const char *dir = ml_setup();
    CHECK_MSG(dir, "setup: %s", out);
    const char *pred = tmp("ml_sets.csv");
    const double alpha = 0.2;
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --calibrate conformal-multilabel "
                             "--calibration-data '%s/val_missing.csv' --alpha 0.2 --quiet", dir,
                             dir, pred, dir), 0);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    const char *want = "smiles,FDA_APPROVED,CT_TOX,FDA_APPROVED_in_set,CT_TOX_in_set,"
                       "FDA_APPROVED_out_set,CT_TOX_out_set\n";
    int header_ok = !strncmp(text, want, strlen(want));
    mp_free(text);
    CHECK_MSG(header_ok, "header of %s", pred);
    /* the thresholds from the calibration molecules' probabilities */
    char model[1300], path[1300];
    snprintf(model, sizeof model, "%s/m/model.mpm", dir);
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, model, "cpu"));
    size_t nv = 0, nt = 0;
    snprintf(path, sizeof path, "%s/val_missing.csv", dir);
    double *vp = probabilities(e, path, &nv);
    snprintf(path, sizeof path, "%s/test.csv", dir);
    double *tp = probabilities(e, path, &nt);
    mp_ensemble_free(e);
    mp_dataset *V = tu_load(tmp("ml/val_missing.csv")), *T = tu_load(tmp("ml/test.csv"));
    mp_dataset *P = tu_load(pred);
    CHECK(vp && tp && V && T && P && V->n_rows == nv && P->n_rows == nt && T->n_rows == nt);
    double *m_in = malloc(sizeof(double) * nv), *m_out = malloc(sizeof(double) * nv);
    size_t n = 0, missing = 0;
    for (size_t i = 0; i < nv; i++) {
        double lo = INFINITY, hi = -INFINITY;
        int seen = 0;
        for (int k = 0; k < 2 && !isnan(vp[i * 2]); k++) {
            double y = V->targets[i * V->n_tasks + (size_t)k];
            missing += isnan(y);
            if (isnan(y))
                continue;
            seen = 1;
            if (y == 0)
                lo = fmin(lo, -vp[i * 2 + (size_t)k]);
            else
                hi = fmax(hi, -vp[i * 2 + (size_t)k]);
        }
        if (seen) {
            m_in[n] = lo;
            m_out[n++] = hi;
        }
    }
    /* q = ceil((n + 1)(1 - alpha / 2)) / n; t_out at 0-based position
     * ceil(q (n - 1)), t_in at floor((1 - q)(n - 1)) */
    double q = ceil((double)(n + 1) * (1 - alpha / 2)) / (double)n;
    double t_out = tu_kth_smallest(m_out, n, (size_t)ceil(q * (double)(n - 1)) + 1);
    double t_in = tu_kth_smallest(m_in, n, (size_t)floor((1 - q) * (double)(n - 1)) + 1);
    free(m_in);
    free(m_out);
    int bad_cell = -1, not01 = 0, covered = 0, counted = 0, in_sets = 0, out_sets = 0;
    for (size_t i = 0; i < nt; i++) {
        int ok = 1, seen = 0;
        for (int k = 0; k < 2; k++) {
            static const char *const names[2][2] = {
                { "FDA_APPROVED_in_set", "CT_TOX_in_set" },
                { "FDA_APPROVED_out_set", "CT_TOX_out_set" }
            };
            double in = P->targets[i * P->n_tasks + (size_t)tu_col(P, names[0][k])];
            double o = P->targets[i * P->n_tasks + (size_t)tu_col(P, names[1][k])];
            double p = tp[i * 2 + (size_t)k], y = T->targets[i * T->n_tasks + (size_t)k];
            if (isnan(p)) {   /* an invalid molecule: empty cells */
                not01 += !isnan(in) || !isnan(o);
                continue;
            }
            not01 += !(in == 0 || in == 1) || !(o == 0 || o == 1);
            if (bad_cell < 0 && (in != (double)(-p < t_in) || o != (double)(-p <= t_out)))
                bad_cell = (int)i;
            in_sets += in == 1;
            out_sets += o == 1;
            if (isnan(y))
                continue;
            seen = 1;
            ok &= !(in == 1 && y == 0) && !(y == 1 && o == 0);
        }
        counted += seen;
        covered += seen && ok;
    }
    free(vp);
    free(tp);
    mp_dataset_free(V);
    mp_dataset_free(T);
    mp_dataset_free(P);
    CHECK_MSG(missing > 50, "only %zu calibration labels blanked", missing);
    CHECK_MSG(not01 == 0, "%d set cells are not 0 / 1 (or not empty for an invalid molecule)",
              not01);
    CHECK_MSG(bad_cell < 0, "row %d: the sets are not -p < %g, -p <= %g", bad_cell, t_in, t_out);
    CHECK_MSG(in_sets > 0 && out_sets > 0, "in-sets hold %d tasks, out-sets %d", in_sets,
              out_sets);
    /* eval: the share of molecules with C_in <= Y <= C_out, as counted here */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                             "--uncertainty-metrics coverage,nll", pred, dir), 0);
    double cov = tu_eval_number(out, "coverage");
    CHECK_NEAR(cov, (double)covered / (double)counted, 1e-6, 0);
    CHECK_MSG(strstr(out, "2 task(s)"), "%s", out);
    CHECK_MSG(isfinite(tu_eval_number(out, "nll")), "%s", out);
    /* 370 exchangeable test molecules: about 1 - alpha or more */
    CHECK_MSG(cov >= 1 - alpha - 0.06, "coverage %g at alpha %g", cov, alpha);
}

/* ===================================================================== */
/* Misuse                                                                 */
/* ===================================================================== */

MP_TEST(unc_ml_cli_misuse_is_refused)
{
    const char *dir = ml_setup();
    CHECK_MSG(dir, "setup: %s", out);
    char bad[1300], empty[1300];
    snprintf(bad, sizeof bad, "%s/bad_labels.csv", dir);
    snprintf(empty, sizeof empty, "%s/no_labels.csv", dir);
    FILE *fp = fopen(bad, "w");
    CHECK(fp != NULL);
    fprintf(fp, "smiles,FDA_APPROVED,CT_TOX\nCCO,1,0\nCCCO,1,2\n");
    fclose(fp);
    CHECK((fp = fopen(empty, "w")) != NULL);
    fprintf(fp, "smiles,FDA_APPROVED,CT_TOX\nCCO,,\nCCCO,,\n");
    fclose(fp);
    static const struct {
        const char *args, *want[2];
    } cases[] = {
        { "--calibrate conformal-multilabel", { "--calibration-data", "conformal-multilabel" } },
        { "--calibrate conformal-multilabel --calibration-data B", { "bad_labels.csv:3",
                                                                     "not 0 or 1" } },
        { "--calibrate conformal-multilabel --calibration-data E", { "no_labels.csv",
                                                                     "no labelled cell" } },
        { "--calibrate conformal-multilabel --calibration-data V --alpha 0", { "--alpha",
                                                                               "[1e-06" } },
        { "--calibrate conformal-multilabel --calibration-data V --alpha 1.5", { "--alpha",
                                                                                 "1.5" } },
        { "--calibrate zscaling --uncertainty dropout --calibration-data V",
          { "zscaling does not fit this classification model", "conformal-multilabel" } },
        { "--calibrate conformal-multilabels --calibration-data V", { "unknown calibration",
                                                                      "conformal-multilabel)" } },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[2048], file[1400];
        snprintf(args, sizeof args, "%s", cases[k].args);
        char *at = strstr(args, "--calibration-data ");
        if (at) {
            char c = at[19], rest[256];
            snprintf(rest, sizeof rest, "%s", at + 20);
            if (c == 'V')
                snprintf(file, sizeof file, "'%s/val.csv'", dir);
            else
                snprintf(file, sizeof file, "'%s'", c == 'B' ? bad : empty);
            snprintf(at + 19, sizeof args - (size_t)(at + 19 - args), "%s%s", file, rest);
        }
        int rc = mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                             "'%s/test.csv' --out '%s' %s", dir, dir, tmp("mis.csv"), args);
        CHECK_MSG(rc != 0, "'%s' was accepted", cases[k].args);
        for (int w = 0; w < 2; w++)
            CHECK_MSG(strstr(out, cases[k].want[w]), "'%s': no '%s' in: %s", cases[k].args,
                      cases[k].want[w], out);
    }
    /* a regression and a multiclass model take no multilabel calibrator */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --task regression "
                             "--model ffn --features morgan --epochs 1 --hidden 16 --threads 1 "
                             "--quiet --save-dir '%s/r'", dir, dir), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --task multiclass "
                             "--target-columns FDA_APPROVED --model ffn --features morgan "
                             "--epochs 1 --hidden 16 --threads 1 --quiet --save-dir '%s/c'", dir,
                             dir), 0);
    static const struct {
        const char *model, *want[2];
    } models[] = {
        { "r", { "r/model.mpm: --calibrate conformal-multilabel does not fit this regression "
                 "model", "conformal-adaptive calibrate a regression model" } },
        { "c", { "c/model.mpm: --calibrate conformal-multilabel does not fit this multiclass "
                 "model", "conformal-multiclass" } },
    };
    for (size_t k = 0; k < 2; k++) {
        CHECK(mp_test_cli(out, sizeof out, "predict --model '%s/%s/model.mpm' --data "
                          "'%s/test.csv' --out '%s' --calibrate conformal-multilabel "
                          "--calibration-data '%s/val.csv'", dir, models[k].model, dir,
                          tmp("mis.csv"), dir) != 0);
        for (int w = 0; w < 2; w++)
            CHECK_MSG(strstr(out, models[k].want[w]), "no '%s' in: %s", models[k].want[w], out);
    }
    /* eval: a binary file without sets has no coverage; labels of a file
     * with sets must be 0 / 1 */
    const char *plain = tmp("ml_plain.csv"), *sets = tmp("ml_sets2.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                             "'%s/test.csv' --out '%s' --uncertainty dropout --quiet", dir, dir,
                             plain), 0);
    CHECK(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                      "--uncertainty-metrics coverage", plain, dir) != 0);
    CHECK_MSG(strstr(out, "FDA_APPROVED_in_set") && strstr(out, "conformal-multilabel"), "%s",
              out);
    CHECK(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                      "--uncertainty-metrics ence", plain, dir) != 0);
    CHECK_MSG(strstr(out, "only nll and coverage"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data '%s' "
                             "--out '%s' --calibrate conformal-multilabel --calibration-data "
                             "'%s/val.csv' --quiet", dir, bad, sets, dir), 0);
    CHECK(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s' --uncertainty-metrics "
                      "coverage", sets, bad) != 0);
    CHECK_MSG(strstr(out, "bad_labels.csv:3: label 2") && strstr(out, "not 0 or 1"), "%s", out);
}

/* ===================================================================== */
/* The cuda backend                                                       */
/* ===================================================================== */

/* The prediction files a (cpu) and b (gpu) agree: same columns and rows,
 * the probabilities within tol (relative to 1 + |x|), and the 0 / 1 set
 * columns on all but *flips cells (a task at a threshold's edge). */
static int files_agree(const char *a, const char *b, double tol, int *flips)
{
    mp_dataset *A = tu_load(a), *B = tu_load(b);
    int ok = A && B && A->n_rows == B->n_rows && A->n_tasks == B->n_tasks;
    *flips = 0;
    for (size_t j = 0; ok && j < A->n_tasks; j++) {
        int set = strstr(A->task_names[j], "_set") != NULL;
        ok = !strcmp(A->task_names[j], B->task_names[j]);
        for (size_t i = 0; ok && i < A->n_rows; i++) {
            double x = A->targets[i * A->n_tasks + j], y = B->targets[i * B->n_tasks + j];
            if (isnan(x) || isnan(y))
                ok = isnan(x) && isnan(y);
            else if (set)
                *flips += x != y;
            else
                ok = fabs(x - y) <= tol * (1 + fabs(x));
        }
    }
    mp_dataset_free(A);
    mp_dataset_free(B);
    return ok;
}

MP_TEST(gpu_unc_ml_multilabel_matches_cpu)
{
    MP_NEED_GPU();
    const char *dir = ml_setup();
    CHECK_MSG(dir, "setup: %s", out);
    char a[1300], b[1300];
    snprintf(a, sizeof a, "%s/gpu_cpu.csv", dir);
    snprintf(b, sizeof b, "%s/gpu_gpu.csv", dir);
    for (int g = 0; g < 2; g++)
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                                 "'%s/test.csv' --out '%s' --calibrate conformal-multilabel "
                                 "--calibration-data '%s/val_missing.csv' --alpha 0.2 --quiet%s",
                                 dir, dir, g ? b : a, dir,
                                 g ? " --device gpu --precision fp32" : ""), 0);
    int flips;
    CHECK_MSG(files_agree(a, b, 1e-4, &flips), "the gpu's probabilities differ from the cpu's");
    CHECK_MSG(flips <= 3, "%d set cells differ", flips);
}
