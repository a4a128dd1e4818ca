/*
 * test_api.c - the public API (include/molprop.h) as a program outside the
 * library sees it: runs and their summaries, the predictor against
 * `molprop predict`, and the command line's configuration layers (file,
 * then flags; the environment's defaults) with metrics.json's "config",
 * from which a run repeats bit for bit.
 */
#include "test.h"
#include "molprop.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[1 << 16];

static const char *tmp(const char *name) { return mp_test_tmp("api_", name); }

static int write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fputs(text, fp);
    return fclose(fp) == 0;
}

static const char *esol(void)
{
    return mp_test_shared("datasets/esol.csv.gz");
}

/* A small model trained through the API once (2 epochs, hidden 16). */
static const char *tiny_model(void)
{
    static char path[1300];
    static int done;
    if (done)
        return path;
    mp_options *o;
    mp_summary *s = NULL;
    const char *dir = tmp("tiny");
    if (mp_options_create(&o, "train") || mp_options_set(o, "data", esol()) ||
        mp_options_set(o, "epochs", "2") || mp_options_set(o, "hidden", "16") ||
        mp_options_set(o, "threads", "1") || mp_options_set(o, "quiet", NULL) ||
        mp_options_set(o, "save-dir", dir) || mp_run_train(o, &s)) {
        fprintf(stdout, "    tiny model: %s\n", mp_error_message());
        mp_options_free(o);
        return NULL;
    }
    mp_summary_free(s);
    mp_options_free(o);
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    done = 1;
    return path;
}

/* ===================================================================== */
/* Runs and summaries                                                     */
/* ===================================================================== */

MP_TEST(api_runs_check_their_options)
{
    mp_options *o;
    mp_summary *s = (mp_summary *)1;
    CHECK_OK(mp_options_create(&o, "predict"));
    CHECK(mp_run_train(o, &s) == MP_ERR_ARG && s == NULL);
    CHECK(strstr(mp_error_message(), "options for 'predict'") != NULL);
    CHECK(mp_run_predict(o, &s) == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--model is required");
    mp_options_free(o);
    CHECK(mp_run_eval(NULL, NULL) == MP_ERR_ARG);
    /* an empty summary has nothing */
    CHECK(isnan(mp_summary_number(NULL, "x")) && mp_summary_text(NULL, "x") == NULL);
    CHECK(mp_summary_invalid_count(NULL) == 0 && mp_summary_invalid(NULL, 0, NULL, NULL, NULL));
    mp_summary_free(NULL);
    mp_options_free(NULL);
    CHECK_EQ_STR(mp_version(), MP_VERSION);
    char why[256] = "";
    CHECK(mp_backend_available("cpu", why, sizeof why) == 1);
    CHECK(mp_backend_available("tpu", why, sizeof why) == 0 && strstr(why, "tpu"));
}

MP_TEST(api_train_summary_and_predictor)
{
    const char *model = tiny_model();
    CHECK(model != NULL);
    mp_predictor *p;
    CHECK_OK(mp_predictor_open(&p, model, NULL));
    CHECK_EQ_INT(mp_predictor_n_tasks(p), 1);
    CHECK_EQ_STR(mp_predictor_task_name(p, 0), "logSolubility");
    CHECK(mp_predictor_task_name(p, 1) == NULL);
    CHECK_EQ_STR(mp_predictor_task_type(p), "regression");
    CHECK_EQ_INT(mp_predictor_n_members(p), 1);

    /* the same numbers as `molprop predict` writes, bit for bit */
    const char *in = tmp("pred_in.csv"), *pred = tmp("pred_out.csv");
    static const char *const smiles[] = { "CCO", "notasmiles", "c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O" };
    CHECK(write_text(in, "smiles\nCCO\nnotasmiles\nc1ccccc1O\nCC(=O)Oc1ccccc1C(=O)O\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--quiet", model, in, pred), 0);
    double mean[4], std[4];
    CHECK_OK(mp_predictor_predict(p, smiles, 4, mean, std));
    CHECK_OK(mp_predictor_predict(p, smiles, 0, NULL, NULL));
    mp_predictor_free(p);
    char *text = mp_test_slurp(pred, NULL);
    CHECK(text != NULL);
    char expect[1024];
    snprintf(expect, sizeof expect, "smiles,logSolubility\nCCO,%.9g\nnotasmiles,\nc1ccccc1O,%.9g\n"
             "CC(=O)Oc1ccccc1C(=O)O,%.9g\n", mean[0], mean[2], mean[3]);
    int same = !strcmp(text, expect);
    mp_free(text);
    CHECK_MSG(same, "predictor and molprop predict differ:\n%s", expect);
    CHECK(isnan(mean[1]) && isnan(std[1]) && std[0] == 0 && !isnan(mean[3]));

    CHECK(mp_predictor_open(&p, tmp("absent.mpm"), "cpu") != MP_OK && p == NULL);
    CHECK(strstr(mp_error_message(), "absent.mpm") != NULL);
}

MP_TEST(api_eval_featurize_split_summaries)
{
    const char *model = tiny_model();
    CHECK(model != NULL);
    mp_options *o;
    mp_summary *s;
    CHECK_OK(mp_options_create(&o, "eval"));
    CHECK_OK(mp_options_set(o, "model", model));
    CHECK_OK(mp_options_set(o, "data", esol()));
    CHECK_OK(mp_options_set(o, "threads", "1"));
    CHECK_OK(mp_run_eval(o, &s));
    CHECK_EQ_STR(mp_summary_text(s, "metrics"), "rmse,mae,r2");
    CHECK(mp_summary_number(s, "n_rows") == 1128 && mp_summary_number(s, "n_tasks") == 1);
    CHECK(mp_summary_number(s, "rmse") > 0 && mp_summary_number(s, "rmse") < 10);
    CHECK(isnan(mp_summary_number(s, "auc")) && mp_summary_text(s, "rmse") == NULL);
    mp_summary_free(s);
    mp_options_free(o);

    const char *csv = tmp("fz.csv");
    CHECK(write_text(csv, "smiles,y\nCCO,1\nC1CC,2\nc1ccccc1,3\nxyz,4\nCCN,5\n"));
    CHECK_OK(mp_options_create(&o, "featurize"));
    CHECK_OK(mp_options_set(o, "data", csv));
    CHECK(mp_run_featurize(o, &s) == MP_ERR_ARG);   /* nothing to write */
    CHECK(strstr(mp_error_message(), "nothing to write") != NULL);
    CHECK_OK(mp_options_set(o, "out", tmp("fz.mpf")));
    CHECK_OK(mp_options_set(o, "no-descriptors", NULL));
    CHECK_OK(mp_run_featurize(o, &s));
    CHECK(mp_summary_number(s, "n_mols") == 5 && mp_summary_number(s, "n_valid") == 3 &&
          mp_summary_number(s, "n_atoms") == 3 + 6 + 3);
    CHECK_EQ_INT(mp_summary_invalid_count(s), 2);
    size_t line;
    const char *smi, *why;
    CHECK_OK(mp_summary_invalid(s, 1, &line, &smi, &why));
    CHECK(line == 5 && !strcmp(smi, "xyz") && why && *why);
    CHECK(mp_summary_invalid(s, 2, &line, &smi, &why) == MP_ERR_ARG);
    CHECK_EQ_STR(mp_summary_text(s, "layout"), "v1");
    mp_summary_free(s);
    mp_options_free(o);
    CHECK(access(tmp("fz.mpf"), F_OK) == 0);

    CHECK_OK(mp_options_create(&o, "split"));
    CHECK_OK(mp_options_set(o, "data", csv));
    CHECK_OK(mp_options_set(o, "out", tmp("fz_split")));
    CHECK_OK(mp_options_set(o, "split-sizes", "0.34,0.33,0.33"));
    CHECK_OK(mp_options_set(o, "seed", "4"));
    CHECK_OK(mp_run_split(o, &s));
    CHECK(mp_summary_number(s, "n_train") + mp_summary_number(s, "n_val") +
          mp_summary_number(s, "n_test") == 3);
    CHECK(mp_summary_number(s, "n_invalid") == 2 && mp_summary_invalid_count(s) == 2);
    CHECK_EQ_STR(mp_summary_text(s, "seed"), "4");
    CHECK_EQ_STR(mp_summary_text(s, "split"), "random");
    mp_summary_free(s);
    mp_options_free(o);
}

/* ===================================================================== */
/* The command line's layers: environment, --config, flags                */
/* ===================================================================== */

static cJSON *metrics_config(const char *dir, cJSON **root)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    char *text = mp_test_slurp(path, NULL);
    *root = text ? cJSON_Parse(text) : NULL;
    mp_free(text);
    return *root ? cJSON_GetObjectItemCaseSensitive(*root, "config") : NULL;
}

/* The [train] section of an INI file from a metrics.json "config". */
static int config_to_ini(const cJSON *cfg, const char *path)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fprintf(fp, "; from metrics.json\n[train]\n");
    for (const cJSON *it = cfg->child; it; it = it->next) {
        if (cJSON_IsNull(it))
            continue;
        fprintf(fp, "%s = ", it->string);
        if (cJSON_IsBool(it))
            fprintf(fp, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it))
            fprintf(fp, "%.17g", it->valuedouble);
        else if (cJSON_IsString(it))
            fprintf(fp, "%s", it->valuestring);
        else if (cJSON_IsArray(it))
            for (const cJSON *x = it->child; x; x = x->next) {
                if (cJSON_IsNumber(x))
                    fprintf(fp, "%s%.17g", x == it->child ? "" : ",", x->valuedouble);
                else
                    fprintf(fp, "%s%s", x == it->child ? "" : ",", x->valuestring);
            }
        fputc('\n', fp);
    }
    return fclose(fp) == 0;
}

MP_TEST(cli_train_config_then_flags_and_repeat_from_metrics)
{
    const char *ini = tmp("run.ini"), *dir = tmp("cfg_run"), *dir2 = tmp("cfg_repeat");
    char text[4096];
    snprintf(text, sizeof text,
             "; a run\n[train]\ndata = %s\nsplit = scaffold_balanced\nepochs = 3\n"
             "hidden = 16\ndropout = 0.1\nthreads = 1\nquiet = true\n"
             "[predict]\nmodel = nowhere.mpm\n", esol());
    CHECK(write_text(ini, text));
    /* the file's epochs (3) and hidden (16); the flag's epochs (2) wins */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --epochs 2 --config '%s' --save-dir '%s' "
                             "--seed=1", ini, dir), 0);
    CHECK(strstr(out, "test rmse = ") != NULL);
    cJSON *root;
    cJSON *cfg = metrics_config(dir, &root);
    CHECK(cfg != NULL);
    int ok = cJSON_GetObjectItemCaseSensitive(cfg, "epochs")->valuedouble == 2 &&
             cJSON_GetObjectItemCaseSensitive(cfg, "hidden")->valuedouble == 16 &&
             cJSON_GetObjectItemCaseSensitive(cfg, "seed")->valuedouble == 1 &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(cfg, "split")->valuestring, "scaffold_balanced") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(cfg, "task")->valuestring, "regression") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(cfg, "metric")->valuestring, "rmse");
    /* the rest of metrics.json is still there */
    ok &= cJSON_GetObjectItemCaseSensitive(root, "test") != NULL;
    /* repeat the run from its recorded configuration alone */
    ok &= config_to_ini(cfg, tmp("repeat.ini"));
    cJSON_Delete(root);
    CHECK(ok);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --config '%s' --save-dir '%s'",
                             tmp("repeat.ini"), dir2), 0);
    char a[1300], b[1300];
    snprintf(a, sizeof a, "%s/model.mpm", dir);
    snprintf(b, sizeof b, "%s/model.mpm", dir2);
    CHECK_MSG(mp_test_same_file(a, b), "the run repeated from metrics.json's config differs");
    snprintf(a, sizeof a, "%s/split.tsv", dir);
    snprintf(b, sizeof b, "%s/split.tsv", dir2);
    CHECK(mp_test_same_file(a, b));
}

/* The trainer's old environment knobs are the command line's defaults of
 * --slot-classes and --profile now; a flag overrides them. */
MP_TEST(cli_train_profile_from_environment_or_flag)
{
    const char *dir = tmp("profile");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "train --data '%s' --epochs 2 --hidden 8 --threads 1 --save-dir '%s'",
             esol(), dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --profile", cmd), 0);
    CHECK_MSG(strstr(out, "profile epoch 1: ") && strstr(out, "profile epoch 2: "), "%s", out);
    CHECK(setenv("MOLPROP_GPU_PROFILE", "1", 1) == 0);
    int rc_env = mp_test_cli(out, sizeof out, "%s", cmd);
    int env_on = strstr(out, "profile epoch 1: ") != NULL;
    int rc_off = mp_test_cli(out, sizeof out, "%s --profile=false", cmd);
    int flag_off = strstr(out, "profile epoch") == NULL;
    CHECK(setenv("MOLPROP_SLOT_CLASSES", "9", 1) == 0);
    int rc_bad = mp_test_cli(out, sizeof out, "%s", cmd);
    int named = strstr(out, "$MOLPROP_SLOT_CLASSES: slot-classes expects an integer in [1, 8]") != NULL;
    unsetenv("MOLPROP_GPU_PROFILE");
    unsetenv("MOLPROP_SLOT_CLASSES");
    CHECK(rc_env == 0 && env_on);
    CHECK(rc_off == 0 && flag_off);
    CHECK_MSG(rc_bad == 1 && named, "%s", out);
}

MP_TEST(cli_config_errors_and_help)
{
    const char *ini = tmp("bad.ini");
    CHECK(write_text(ini, "[train]\nepochs = 3\n\nepoch = 4\n"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --config '%s' --save-dir x", ini), 1);
    CHECK_MSG(strstr(out, "molprop train: ") && strstr(out, "bad.ini:4: unknown key 'epoch' in [train]"),
              "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --config '%s'", tmp("absent.ini")), 1);
    CHECK(strstr(out, "absent.ini") != NULL);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --config"), 1);
    CHECK(strstr(out, "--config needs a value") != NULL);
    /* a flag's bad value is worded as in the file, named as a flag */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data x --save-dir y --hidden 0"), 1);
    CHECK(strstr(out, "molprop train: --hidden expects an integer in [1, 100000], got '0'"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --modle m.mpm"), 1);
    CHECK(strstr(out, "molprop predict: unknown option '--modle' (see molprop predict --help)"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval stray"), 1);
    CHECK(strstr(out, "unexpected argument 'stray'") != NULL);
    /* every verb's help lists --config and its options */
    static const char *const helps[] = { "train", "predict", "eval", "featurize", "split", "bench" };
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --help", helps[i]), 0);
        CHECK_MSG(strstr(out, "usage: molprop ") && strstr(out, "--config FILE") &&
                  strstr(out, "(default"), "%s --help: %s", helps[i], out);
    }
    /* predict reads its section of the same file as train */
    const char *model = tiny_model();
    CHECK(model != NULL);
    char text[4096];
    snprintf(text, sizeof text, "[train]\nepochs = 3\n[predict]\nmodel = %s\ndata = %s\n"
             "out = %s\nthreads = 1\n", model, esol(), tmp("cfg_pred.csv"));
    CHECK(write_text(ini, text));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --config '%s' --quiet", ini), 0);
    CHECK(access(tmp("cfg_pred.csv"), F_OK) == 0);
    /* several files: read in order, a later one overriding */
    const char *ini2 = tmp("second.ini");
    snprintf(text, sizeof text, "[predict]\nout = %s\n", tmp("cfg_pred2.csv"));
    CHECK(write_text(ini2, text));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --config '%s' --config='%s' --quiet", ini,
                             ini2), 0);
    CHECK(access(tmp("cfg_pred2.csv"), F_OK) == 0);
}

/* ===================================================================== */
/* On a GPU (make test-gpu)                                               */
/* ===================================================================== */

int mp_test_env_flag(const char *name);   /* tests/gpu_test.c */

/* The GPU through the public API: the backend named by "device" and
 * "precision" ("gpu:tf32"), a predictor on "gpu" agreeing with the CPU's,
 * and a training run on "gpu:bf16" recording its device in metrics.json. */
MP_TEST(gpu_api_device_options_and_predictor)
{
    char why[256];
    if (!mp_backend_available("gpu", why, sizeof why)) {
        if (mp_test_env_flag("MOLPROP_REQUIRE_GPU"))
            MP_FAIL("no usable GPU (MOLPROP_REQUIRE_GPU=1): %s", why);
        MP_SKIP(why);
    }
    const char *model = tiny_model();
    CHECK(model != NULL);
    static const char *const smiles[] = { "CCO", "c1ccccc1O", "xx", "CC(=O)Oc1ccccc1C(=O)O" };
    double cpu[4], gpu[4];
    mp_predictor *p;
    CHECK_OK(mp_predictor_open(&p, model, "cpu"));
    CHECK_OK(mp_predictor_predict(p, smiles, 4, cpu, NULL));
    mp_predictor_free(p);
    CHECK_OK(mp_predictor_open(&p, model, "gpu"));
    CHECK_OK(mp_predictor_predict(p, smiles, 4, gpu, NULL));
    mp_predictor_free(p);
    for (int i = 0; i < 4; i++) {
        if (i == 2) {
            CHECK(isnan(cpu[i]) && isnan(gpu[i]));
            continue;
        }
        CHECK_NEAR(gpu[i], cpu[i], 1e-5, 1e-4);
    }

    mp_options *o;
    mp_summary *s;
    CHECK_OK(mp_options_create(&o, "predict"));
    CHECK_OK(mp_options_set(o, "model", model));
    CHECK_OK(mp_options_set(o, "data", esol()));
    CHECK_OK(mp_options_set(o, "out", tmp("gpu_pred.csv")));
    CHECK_OK(mp_options_set(o, "device", "gpu"));
    CHECK_OK(mp_options_set(o, "precision", "tf32"));
    CHECK_OK(mp_options_set(o, "quiet", NULL));
    CHECK_OK(mp_run_predict(o, &s));
    CHECK(mp_summary_number(s, "n_rows") == 1128 && mp_summary_number(s, "n_invalid") == 0);
    mp_summary_free(s);
    mp_options_free(o);

    const char *dir = tmp("gpu_train");
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK_OK(mp_options_set(o, "data", esol()));
    CHECK_OK(mp_options_set(o, "save-dir", dir));
    CHECK_OK(mp_options_set(o, "epochs", "2"));
    CHECK_OK(mp_options_set(o, "hidden", "64"));
    CHECK_OK(mp_options_set(o, "device", "gpu"));
    CHECK_OK(mp_options_set(o, "precision", "bf16"));
    CHECK_OK(mp_options_set(o, "quiet", NULL));
    mp_status st = mp_run_train(o, &s);
    mp_options_free(o);
    CHECK_OK(st);
    double rmse = mp_summary_number(s, "test");
    mp_summary_free(s);
    CHECK_MSG(rmse > 0 && rmse < 5, "test rmse %g", rmse);
    cJSON *root;
    cJSON *cfg = metrics_config(dir, &root);
    int ok = cfg && !strcmp(cJSON_GetObjectItemCaseSensitive(cfg, "device")->valuestring, "gpu") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(cfg, "precision")->valuestring, "bf16");
    cJSON_Delete(root);
    CHECK(ok);
}
