/*
 * test_train.c - the training path end to end through the CLI ($MOLPROP_BIN):
 * train -> model.mpm + metrics.json -> predict -> eval, determinism, ensembles
 * with uncertainty, the FFN and extra-feature variants, and bad input of
 * every kind (bad CSV, bad labels, invalid SMILES, damaged model files).
 */
#include "test.h"
#include "internal.h"   /* every module header */

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[65536];

static const char *esol(void) { return mp_test_shared("datasets/esol.csv.gz"); }

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fputs(text, f);
    return fclose(f) == 0;
}

static int count_lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

/* A small regression model on ESOL, trained once and shared by the tests
 * that only need some model. */
static const char *tiny_model(void)
{
    static int done;
    const char *dir = tmp("tiny");
    if (!done) {
        if (mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 32 --threads 1 "
                        "--quiet --save-dir '%s'", esol(), dir) != 0) {
            fprintf(stdout, "    tiny model training failed:\n%s\n", out);
            return NULL;
        }
        done = 1;
    }
    static char path[1300];
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    return path;
}

static cJSON *load_json(const char *path)
{
    char *text = mp_test_slurp(path, NULL);
    if (!text)
        return NULL;
    cJSON *j = cJSON_Parse(text);
    mp_free(text);
    return j;
}

static double json_num(const cJSON *j, const char *a, const char *b, const char *c)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    if (c)
        x = cJSON_GetObjectItemCaseSensitive(x, c);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

MP_TEST(train_predict_eval_esol)
{
    const char *dir = tmp("esol");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --split scaffold_balanced "
                             "--seed 0 --epochs 4 --threads 1 --save-dir '%s'", esol(), dir), 0);
    CHECK(strstr(out, "task type: regression (registry entry 'esol')") != NULL);
    CHECK(strstr(out, "test rmse = ") != NULL);
    char path[1300];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    cJSON *j = load_json(path);
    CHECK_MSG(j != NULL, "metrics.json missing or not JSON");
    double tr = json_num(j, "split_sizes", "train", NULL), va = json_num(j, "split_sizes", "val", NULL),
           te = json_num(j, "split_sizes", "test", NULL), rmse = json_num(j, "test", "rmse", "mean"),
           speed = json_num(j, "timings", "train_molecules_per_second", NULL);
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(j, "task_type");
    int is_reg = cJSON_IsString(tt) && !strcmp(tt->valuestring, "regression");
    cJSON_Delete(j);
    CHECK(is_reg);
    /* Chemprop's scaffold_balanced split of ESOL, seed 0 (fixtures/splits.tsv). */
    CHECK_EQ_INT((long)tr, 902);
    CHECK_EQ_INT((long)va, 112);
    CHECK_EQ_INT((long)te, 114);
    CHECK_MSG(rmse > 0.3 && rmse < 2.5, "test rmse %g out of any sane range after 4 epochs", rmse);
    CHECK(speed > 0);

    /* Prediction: one row per input row, in order, all finite. */
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    const char *pred = tmp("esol_pred.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--threads 1", path, esol(), pred), 0);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    int lines = count_lines(text);
    int header_ok = !strncmp(text, "smiles,logSolubility\n", 21);
    char *second = strchr(text, '\n') + 1;
    int first_row_ok = !strncmp(second, "OCC3OC(OCC2OC(OC(C#N)c1ccccc1)C(O)C(O)C2O)C(O)C(O)C3O,", 52);
    int all_numbers = 1;
    for (char *p = second; *p; p = strchr(p, '\n') + 1) {
        char *comma = strchr(p, ',');
        char *end;
        double v = strtod(comma + 1, &end);
        all_numbers &= comma && *end == '\n' && isfinite(v);
    }
    mp_free(text);
    CHECK_EQ_INT(lines, 1129);
    CHECK(header_ok);
    CHECK(first_row_ok);
    CHECK(all_numbers);

    /* Eval prints the regression metrics. */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --threads 1", path,
                             esol()), 0);
    CHECK(strstr(out, "rmse") && strstr(out, "mae") && strstr(out, "r2"));
    CHECK(strstr(out, "1128 molecules") != NULL);
}

/* The split a training run uses is Chemprop's for its --seed: compare the
 * run's split.tsv with Chemprop's own sets (fixtures/splits.tsv). */
MP_TEST(train_uses_chemprops_split_for_its_seed)
{
    char *fixture = mp_test_slurp(mp_test_shared("fixtures/chemprop_v1/splits.tsv"), NULL);
    CHECK(fixture != NULL);
    int matched = 0;
    for (int seed = 1; seed <= 2; seed++) {
        const char *dir = tmp(seed == 1 ? "split1" : "split2");
        if (mp_test_cli(out, sizeof out, "train --data '%s' --split scaffold_balanced --seed %d "
                        "--epochs 1 --hidden 8 --threads 1 --quiet --save-dir '%s'", esol(),
                        seed, dir) != 0)
            break;
        char path[1300];
        snprintf(path, sizeof path, "%s/split.tsv", dir);
        char *got = mp_test_slurp(path, NULL);
        if (!got)
            break;
        static const char *sets[3] = { "train", "val", "test" };
        for (int k = 0; k < 3; k++) {
            char key[64];
            snprintf(key, sizeof key, "esol\tscaffold_balanced\t%d\t%s\t", seed, sets[k]);
            const char *want = strstr(fixture, key);
            char mine[64];
            snprintf(mine, sizeof mine, "\n%s\t", sets[k]);
            const char *have = strstr(got, mine);
            if (!want || !have)
                continue;
            want += strlen(key);
            have += strlen(mine);
            size_t lw = strcspn(want, "\n"), lh = strcspn(have, "\n");
            matched += lw == lh && !memcmp(want, have, lw);
        }
        mp_free(got);
    }
    mp_free(fixture);
    CHECK_EQ_INT(matched, 6);
}

MP_TEST(train_is_deterministic)
{
    const char *a = tmp("det_a"), *b = tmp("det_b");
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 48 "
                                 "--threads 2 --seed 3 --quiet --save-dir '%s'", esol(),
                                 i ? b : a), 0);
    char pa[1300], pb[1300];
    snprintf(pa, sizeof pa, "%s/model.mpm", a);
    snprintf(pb, sizeof pb, "%s/model.mpm", b);
    size_t la, lb;
    char *x = mp_test_slurp(pa, &la), *y = mp_test_slurp(pb, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    mp_free(x);
    mp_free(y);
    CHECK_MSG(same, "two runs with one seed gave different model files");
}

MP_TEST(predict_keeps_invalid_rows_in_place)
{
    const char *model = tiny_model();
    CHECK(model != NULL);
    const char *in = tmp("mixed.csv"), *pred = tmp("mixed_pred.csv");
    CHECK(write_text(in, "name,SMILES\na,CCO\nb,notasmiles\nc,\nd,C1CC\ne,c1ccccc1O\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--smiles-column SMILES", model, in, pred), 0);
    CHECK(strstr(out, "mixed.csv:3: invalid SMILES 'notasmiles'") != NULL);
    CHECK(strstr(out, "mixed.csv:5: invalid SMILES 'C1CC'") != NULL);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    int lines = count_lines(text);
    int ok = !strncmp(text, "SMILES,logSolubility\nCCO,", 25) && strstr(text, "\nnotasmiles,\n") &&
             strstr(text, "\n,\n") && strstr(text, "\nC1CC,\n") && strstr(text, "\nc1ccccc1O,-");
    mp_free(text);
    CHECK_EQ_INT(lines, 6);
    CHECK_MSG(ok, "invalid rows did not keep their place with empty predictions");
}

MP_TEST(predict_refuses_damaged_model)
{
    const char *model = tiny_model();
    CHECK(model != NULL);
    size_t len;
    char *bytes = mp_test_slurp(model, &len);
    CHECK(bytes && len > 1000);
    const char *bad = tmp("damaged.mpm"), *pred = tmp("damaged_pred.csv");
    for (int kind = 0; kind < 3; kind++) {
        FILE *f = fopen(bad, "wb");
        CHECK(f != NULL);
        if (kind == 0) {
            fwrite(bytes, 1, len / 2, f);          /* truncated */
        } else if (kind == 1) {
            bytes[len / 2] ^= 0x40;                /* one flipped bit */
            fwrite(bytes, 1, len, f);
            bytes[len / 2] ^= 0x40;
        } else {
            fwrite("not a model\n", 1, 12, f);     /* not a model at all */
        }
        fclose(f);
        int rc = mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s'",
                             bad, esol(), pred);
        CHECK_EQ_INT(rc, 1);
        CHECK_MSG(strstr(out, "damaged.mpm") != NULL, "message does not name the file: %s", out);
        CHECK_MSG(access(pred, F_OK) != 0, "an output file was left behind");
    }
    mp_free(bytes);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s'",
                             tmp("absent.mpm"), esol(), pred), 1);
    CHECK(access(pred, F_OK) != 0);
}

MP_TEST(train_refuses_bad_input)
{
    const char *dir = tmp("bad_train"), *csv = tmp("bad.csv");
    char model[1300];
    snprintf(model, sizeof model, "%s/model.mpm", dir);
    CHECK(write_text(csv, "smiles,y\nCCO,1.0\nCCN,abc\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s'", csv, dir), 1);
    CHECK_MSG(strstr(out, "bad.csv:3") && strstr(out, "'y'"), "message: %s", out);
    CHECK(access(model, F_OK) != 0);
    CHECK_MSG(access(dir, F_OK) != 0, "the failed run left its new --save-dir behind");

    CHECK(write_text(csv, "smiles,y\nCCO,1\nCCN,0\nCCC,2\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task classification "
                             "--save-dir '%s'", csv, dir), 1);
    CHECK_MSG(strstr(out, "bad.csv:4") && strstr(out, "not 0 or 1"), "message: %s", out);

    CHECK(write_text(csv, "smiles,y\nxx,1\nyy,2\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s'", csv, dir), 1);
    CHECK_MSG(strstr(out, "no valid molecule"), "message: %s", out);

    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --save-dir '%s'", dir), 1);
    CHECK(strstr(out, "--data is required") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s' --bogus 1",
                             esol(), dir), 1);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s' --epochs zero",
                             esol(), dir), 1);
    CHECK(strstr(out, "--epochs") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s' --model ffn",
                             esol(), dir), 1);
    CHECK(strstr(out, "--features") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s' --metric auc",
                             esol(), dir), 1);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s' --device gpu "
                             "--precision fp64", esol(), dir), 1);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s' "
                             "--target-columns nope", esol(), dir), 1);
    CHECK(strstr(out, "nope") != NULL);
    CHECK(access(model, F_OK) != 0);
    CHECK(access(dir, F_OK) != 0);
    /* a directory that was there before the failed run stays */
    CHECK(mkdir(dir, 0777) == 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --save-dir '%s'", csv, dir), 1);
    CHECK(access(dir, F_OK) == 0);
    CHECK(rmdir(dir) == 0);
}

MP_TEST(train_classification_ensemble_with_uncertainty)
{
    const char *dir = tmp("bbbp");
    const char *data = mp_test_shared("datasets/bbbp.csv.gz");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 32 --threads 1 "
                             "--ensemble-size 2 --split scaffold_balanced --quiet --save-dir '%s'",
                             data, dir), 0);
    char path[1300];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    cJSON *j = load_json(path);
    CHECK(j != NULL);
    double auc = json_num(j, "test", "auc", "mean");
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(j, "best_epoch");
    int n_members = cJSON_GetArraySize(be);
    cJSON_Delete(j);
    CHECK_MSG(auc > 0.5 && auc <= 1.0, "test auc %g", auc);
    CHECK_EQ_INT(n_members, 2);

    snprintf(path, sizeof path, "%s/model.mpm", dir);
    const char *pred = tmp("bbbp_pred.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--uncertainty ensemble --quiet", path, data, pred), 0);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    int header_ok = !strncmp(text, "smiles,p_np,p_np_unc\n", 21);
    int in_range = 1, spread_seen = 0, rows = 0;
    for (char *p = strchr(text, '\n') + 1; *p; p = strchr(p, '\n') + 1) {
        char *c1 = strchr(p, ',');
        char *end;
        double prob = strtod(c1 + 1, &end);
        double sd = strtod(end + 1, NULL);
        in_range &= prob >= 0 && prob <= 1 && sd >= 0 && sd <= 0.5;
        spread_seen |= sd > 0;
        rows++;
    }
    mp_free(text);
    CHECK(header_ok);
    CHECK_EQ_INT(rows, 2039);
    CHECK(in_range);
    CHECK_MSG(spread_seen, "two members with different seeds never disagreed");
}

MP_TEST(train_ffn_and_extra_features)
{
    const char *dir = tmp("ffn");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --model ffn --features "
                             "morgan-count,rdkit2d --epochs 3 --quiet --save-dir '%s'", esol(), dir), 0);
    CHECK(strstr(out, "test rmse = ") != NULL);
    char path[1300];
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s'", path, esol()), 0);
    const char *dir2 = tmp("dmpnn_feat");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --features rdkit2d --hidden 32 "
                             "--epochs 2 --quiet --save-dir '%s'", esol(), dir2), 0);
    snprintf(path, sizeof path, "%s/model.mpm", dir2);
    const char *pred = tmp("feat_pred.csv");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s'",
                             path, esol(), pred), 0);
}

MP_TEST(bench_runs_models_over_datasets_and_seeds)
{
    const char *bench_out = tmp("bench"), *tsv = tmp("bench/results.tsv");
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", mp_test_shared("datasets"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "bench --datasets esol,bbbp --models dmpnn,ffn-morgan "
                             "--seeds 0,1 --epochs 1 --threads 1 --data-dir '%s' --out '%s'", dir,
                             bench_out), 0);
    char *text = mp_test_slurp(tsv, NULL);
    CHECK(text != NULL);
    int lines = count_lines(text);
    int ok = strstr(text, "\tesol\tdmpnn\t1\tscaffold_balanced\t") &&
             strstr(text, "\tbbbp\tffn-morgan\t0\tscaffold_balanced\t") &&
             strstr(text, "\trmse\t1\t") && strstr(text, "\tauc\t1\t");
    mp_free(text);
    CHECK_EQ_INT(lines, 1 + 2 * 2 * 2);
    CHECK(ok);
    CHECK(strstr(out, "±") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "bench --datasets chembl --data-dir '%s'", dir), 1);
    CHECK(strstr(out, "molprop data fetch chembl") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "bench --models gcn --data-dir '%s'", dir), 1);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "bench --datasets esol --data-dir /nonexistent"), 1);
    CHECK(strstr(out, "molprop data fetch esol") != NULL);
}
