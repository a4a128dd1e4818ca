/*
 * test_unc_heads.c - `molprop predict --uncertainty mve | evidential[-...] |
 * quantile | dirichlet` on models trained with those heads: the columns
 * the command writes equal the estimators' formulas (uncertainty.h) worked
 * out here from each member's own head values (the library's per-member
 * prediction), so the wiring member by member is what is tested; and the
 * misuses are refused.
 */
#include "test.h"
#include "featurize/featurize.h"
#include "run/ensemble.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* A prediction file read whole: its SMILES and the numbers of each column
 * (NaN for an empty field); SMILES hold no commas in these datasets. */
typedef struct {
    int    n_rows, n_cols;
    char  *names[16];
    char **smiles;
    double *v;   /* n_rows x n_cols; column 0 (the SMILES) NaN */
} table;

static void table_free(table *t)
{
    for (int c = 0; c < t->n_cols; c++)
        free(t->names[c]);
    for (int i = 0; i < t->n_rows; i++)
        free(t->smiles[i]);
    free(t->smiles);
    free(t->v);
}

static int table_read(table *t, const char *path)
{
    memset(t, 0, sizeof *t);
    char *text = mp_test_slurp(path, NULL);
    if (!text)
        return 0;
    int lines = 0;
    for (char *p = text; *p; p++)
        lines += *p == '\n';
    t->smiles = calloc((size_t)lines + 1, sizeof *t->smiles);
    t->v = malloc(sizeof(double) * ((size_t)lines + 1) * 16);
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    for (char *f = line, *next; f && t->n_cols < 16; f = next) {
        next = strchr(f, ',');
        if (next)
            *next++ = 0;
        t->names[t->n_cols++] = strdup(f);
    }
    while ((line = strtok_r(NULL, "\n", &save))) {
        double *row = t->v + (size_t)t->n_rows * 16;
        int c = 0;
        for (char *f = line, *next; f && c < t->n_cols; f = next, c++) {
            next = strchr(f, ',');
            if (next)
                *next++ = 0;
            if (c == 0)
                t->smiles[t->n_rows] = strdup(f);
            row[c] = c == 0 || !*f ? NAN : strtod(f, NULL);
        }
        t->n_rows++;
    }
    free(text);
    return t->n_rows > 0;
}

static int col(const table *t, const char *name)
{
    for (int c = 0; c < t->n_cols; c++)
        if (!strcmp(t->names[c], name))
            return c;
    return -1;
}

/* Every member's head values for the file's molecules: head[k][(i) V + j]
 * (one task); V into *V. */
static double *member_values(const char *model, const table *t, int *V, int *M)
{
    mp_ensemble *e = NULL;
    mp_features *f = NULL;
    if (mp_ensemble_load(&e, model, "cpu") != MP_OK)
        return NULL;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    double *vals = NULL;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)t->n_rows);
    if (idx && mp_featurize(&f, (const char *const *)t->smiles, t->n_rows, &fo) == MP_OK) {
        *V = mp_ensemble_n_values(e);
        *M = e->n_members;
        for (int i = 0; i < t->n_rows; i++)
            idx[i] = i;
        vals = malloc(sizeof(double) * (size_t)*M * (size_t)t->n_rows * (size_t)*V);
        for (int k = 0; vals && k < *M; k++)
            if (mp_ensemble_predict_values(e, f, idx, t->n_rows, k, 1, 64,
                                           vals + (size_t)k * t->n_rows * *V, NULL) != MP_OK) {
                free(vals);
                vals = NULL;
            }
    }
    free(idx);
    mp_features_free(f);
    mp_ensemble_free(e);
    return vals;
}

static int close_to(double got, double want)
{
    return fabs(got - want) <= 2e-7 * fmax(1.0, fabs(want));
}

/* Trains `task` (an ensemble of 2, FFN on Morgan bits) on dataset `data`
 * into tmp(name); 0 on success. */
static int train_head(const char *name, const char *data, const char *task)
{
    return mp_test_cli(out, sizeof out, "train --data '%s' --task %s --model ffn --features "
                       "morgan --ensemble-size 2 --epochs 2 --hidden 32 --threads 2 --quiet "
                       "--save-dir '%s'", mp_test_shared(data), task, tmp(name));
}

MP_TEST(unc_heads_through_predict_match_the_formulas)
{
    static const struct {
        const char *task, *method, *data, *model;
        int V;
    } runs[] = {
        { "regression-mve", "mve", "datasets/esol.csv.gz", "mve", 2 },
        { "regression-evidential", "evidential", "datasets/esol.csv.gz", "evi", 4 },
        { "regression-evidential", "evidential-epistemic", "datasets/esol.csv.gz", "evi", 4 },
        { "regression-evidential", "evidential-aleatoric", "datasets/esol.csv.gz", "evi", 4 },
        { "regression-quantile", "quantile", "datasets/esol.csv.gz", "qua", 2 },
        { "classification-dirichlet", "dirichlet", "datasets/bbbp.csv.gz", "dir", 2 },
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        char model[1300], pred[1300];
        snprintf(model, sizeof model, "%s/model.mpm", tmp(runs[r].model));
        if (r == 0 || strcmp(runs[r].model, runs[r - 1].model))
            CHECK_MSG(train_head(runs[r].model, runs[r].data, runs[r].task) == 0, "%s: %s",
                      runs[r].task, out);
        snprintf(pred, sizeof pred, "%s", tmp("heads_pred.csv"));
        CHECK_MSG(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                              "--uncertainty %s --threads 2 --quiet", model,
                              mp_test_shared(runs[r].data), pred, runs[r].method) == 0,
                  "%s: %s", runs[r].method, out);
        table t;
        CHECK(table_read(&t, pred));
        int V = 0, M = 0;
        double *h = member_values(model, &t, &V, &M);
        CHECK(h && V == runs[r].V && M == 2);
        CHECK(t.n_cols >= 3);
        const char *task = t.names[1];
        char name[256];
        snprintf(name, sizeof name, "%s_unc", task);
        int cu = col(&t, name);
        snprintf(name, sizeof name, "%s_lower", task);
        int cl = col(&t, name);
        snprintf(name, sizeof name, "%s_upper", task);
        int ch = col(&t, name);
        CHECK_MSG(cu > 0, "%s: no _unc column", runs[r].method);
        CHECK(!strcmp(runs[r].method, "quantile") ? cl > 0 && ch > 0 : cl < 0 && ch < 0);
        int checked = 0;
        for (int i = 0; i < t.n_rows; i++) {
            const double *row = t.v + (size_t)i * 16;
            if (isnan(row[1]))
                continue;   /* an invalid molecule */
            double mean = 0, unc = 0, lo = 0, hi = 0;
            for (int k = 0; k < M; k++) {
                const double *v = h + ((size_t)k * t.n_rows + i) * V;
                double u = v[1];   /* mve: the variance; dirichlet: u */
                if (!strcmp(runs[r].method, "evidential"))
                    u = (1 + 1 / v[1]) * v[3] / (v[2] - 1);
                else if (!strcmp(runs[r].method, "evidential-epistemic"))
                    u = v[3] / (v[1] * (v[2] - 1));
                else if (!strcmp(runs[r].method, "evidential-aleatoric"))
                    u = v[3] / (v[2] - 1);
                else if (!strcmp(runs[r].method, "quantile"))
                    u = v[1] / 2;
                mean += v[0] / M;
                unc += u / M;
                lo += (v[0] - v[1] / 2) / M;
                hi += (v[0] + v[1] / 2) / M;
            }
            CHECK_MSG(close_to(row[1], mean) && close_to(row[cu], unc), "%s row %d: %.9g %.9g "
                      "vs %.9g %.9g", runs[r].method, i, row[1], row[cu], mean, unc);
            if (cl > 0)
                CHECK(close_to(row[cl], lo) && close_to(row[ch], hi));
            checked++;
        }
        CHECK(checked > 100);
        free(h);
        table_free(&t);
    }
}

MP_TEST(unc_heads_misuse_is_refused)
{
    CHECK_MSG(train_head("mve_misuse", "datasets/esol.csv.gz", "regression-mve") == 0, "%s", out);
    char model[1300];
    snprintf(model, sizeof model, "%s/model.mpm", tmp("mve_misuse"));
    const char *data = mp_test_shared("datasets/esol.csv.gz"), *pred = tmp("misuse.csv");
    static const struct { const char *method, *says; } cases[] = {
        { "evidential", "needs a model trained with --task regression-evidential" },
        { "quantile", "needs a model trained with --task regression-quantile" },
        { "dirichlet", "needs a model trained with --task classification-dirichlet" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                                 "--uncertainty %s", model, data, pred, cases[i].method), 1);
        CHECK_MSG(strstr(out, cases[i].says), "%s said: %s", cases[i].method, out);
    }
    /* the ensemble spread of an mve head's mean works as for a plain model */
    CHECK_MSG(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                          "--uncertainty ensemble --quiet", model, data, pred) == 0, "%s", out);
    table t;
    CHECK(table_read(&t, pred));
    CHECK_MSG(t.n_cols == 4 && col(&t, "logSolubility_var") == 2 &&
              col(&t, "logSolubility_unc") == 3, "columns: %d", t.n_cols);
    int spread = 0;   /* two members of different seeds disagree somewhere */
    for (int i = 0; i < t.n_rows; i++)
        spread += t.v[(size_t)i * 16 + 3] > 0;
    CHECK(spread > 100);
    table_free(&t);
}
