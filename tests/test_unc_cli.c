/*
 * test_unc_cli.c - uncertainty at prediction, end to end through the
 * command: conformal intervals cover 1 - alpha of a held-out test set
 * (lipo, random split: exchangeable calibration and test molecules),
 * calibration lowers the held-out NLL, MC dropout is deterministic for a
 * seed, and every misuse is refused with a message.
 */
#include "test.h"
#include "test_unc_util.h"
#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* A lipo FFN model on a random 50/25/25 split (train.csv, val.csv,
 * test.csv in tmp("lipo")), trained once per run; the model's path. */
static const char *lipo_model(void)
{
    static int done;
    static char model[1300];
    const char *dir = tmp("lipo");
    snprintf(model, sizeof model, "%s/m/model.mpm", dir);
    if (done)
        return model;
    const char *data = mp_test_shared("datasets/lipo.csv.gz");
    if (mp_test_cli(out, sizeof out, "split --data '%s' --split random --seed 0 "
                    "--split-sizes 0.5,0.25,0.25 --out '%s'", data, dir) != 0)
        return NULL;
    if (mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --model ffn --features morgan "
                    "--dropout 0.1 --epochs 5 --hidden 64 --threads 2 --quiet --save-dir '%s/m'",
                    dir, dir) != 0)
        return NULL;
    done = 1;
    return model;
}

/* predict the lipo test set with `args`, then eval its uncertainty
 * metrics; the eval output in out. */
static int lipo_predict_eval(const char *args, const char *metrics, const char *name)
{
    const char *model = lipo_model(), *dir = tmp("lipo"), *pred = tmp(name);
    if (!model)
        return -1;
    int rc = mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s/test.csv' --out '%s' "
                         "--calibration-data '%s/val.csv' --threads 2 --quiet %s", model, dir,
                         pred, dir, args);
    if (rc)
        return rc;
    return mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                       "--uncertainty-metrics %s", pred, dir, metrics);
}

MP_TEST(unc_cli_conformal_covers_90_percent)
{
    CHECK_MSG(lipo_model(), "training the lipo model failed: %s", out);
    CHECK_EQ_INT(lipo_predict_eval("--calibrate conformal --alpha 0.1", "coverage", "conf.csv"), 0);
    double cov = tu_eval_number(out, "coverage");
    CHECK_MSG(fabs(cov - 0.9) <= 0.03, "conformal coverage %g at alpha 0.1: %s", cov, out);
    /* normalized by the dropout spread */
    CHECK_EQ_INT(lipo_predict_eval("--uncertainty dropout --dropout-samples 5 --calibrate "
                                   "conformal-adaptive --alpha 0.1", "coverage,nll", "ad.csv"), 0);
    cov = tu_eval_number(out, "coverage");
    CHECK_MSG(fabs(cov - 0.9) <= 0.03, "adaptive coverage %g at alpha 0.1: %s", cov, out);
    /* another alpha */
    CHECK_EQ_INT(lipo_predict_eval("--calibrate conformal --alpha 0.3", "coverage", "c3.csv"), 0);
    cov = tu_eval_number(out, "coverage");
    CHECK_MSG(fabs(cov - 0.7) <= 0.03, "conformal coverage %g at alpha 0.3: %s", cov, out);
}

MP_TEST(unc_cli_calibration_lowers_heldout_nll)
{
    CHECK_MSG(lipo_model(), "training the lipo model failed: %s", out);
    const char *m = "nll,miscalibration-area,ence,spearman";
    CHECK_EQ_INT(lipo_predict_eval("--uncertainty dropout --dropout-samples 5", m, "raw.csv"), 0);
    double raw = tu_eval_number(out, "nll"), raw_area = tu_eval_number(out, "miscalibration-area");
    CHECK_MSG(isfinite(raw) && isfinite(raw_area) && isfinite(tu_eval_number(out, "ence")) &&
              isfinite(tu_eval_number(out, "spearman")), "%s", out);
    CHECK_EQ_INT(lipo_predict_eval("--uncertainty dropout --dropout-samples 5 --calibrate zscaling",
                                   m, "zs.csv"), 0);
    double zs = tu_eval_number(out, "nll");
    CHECK_MSG(zs < raw, "zscaling: held-out nll %g, uncalibrated %g", zs, raw);
    CHECK_MSG(tu_eval_number(out, "miscalibration-area") < raw_area, "miscalibration area %g vs %g",
              tu_eval_number(out, "miscalibration-area"), raw_area);
    CHECK_EQ_INT(lipo_predict_eval("--uncertainty dropout --dropout-samples 5 --calibrate zelikman",
                                   "nll,coverage", "zk.csv"), 0);
    CHECK_MSG(tu_eval_number(out, "nll") < raw, "zelikman: held-out nll %g, uncalibrated %g",
              tu_eval_number(out, "nll"), raw);
}

MP_TEST(unc_cli_dropout_deterministic_for_a_seed)
{
    const char *model = lipo_model(), *dir = tmp("lipo");
    CHECK_MSG(model, "training the lipo model failed: %s", out);
    const char *names[3] = { "d0a.csv", "d0b.csv", "d1.csv" };
    const char *seeds[3] = { "0", "0", "1" };
    char *text[3];
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s/val.csv' "
                                 "--out '%s' --uncertainty dropout --dropout-seed %s --quiet "
                                 "--threads %d", model, dir, tmp(names[k]), seeds[k], 1 + k % 2),
                     0);
        text[k] = mp_test_slurp(tmp(names[k]), NULL);
        CHECK(text[k] != NULL);
    }
    int same = !strcmp(text[0], text[1]), differ = strcmp(text[0], text[2]) != 0;
    int header = !strncmp(text[0], "smiles,lipo,lipo_unc\n", 21);
    for (int k = 0; k < 3; k++)
        mp_free(text[k]);
    CHECK_MSG(header, "header of the dropout predictions");
    CHECK_MSG(same, "two runs with one seed (1 and 2 threads) differ");
    CHECK_MSG(differ, "seeds 0 and 1 gave the same passes");
}

MP_TEST(unc_cli_misuse_is_refused)
{
    const char *model = lipo_model(), *dir = tmp("lipo"), *pred = tmp("bad.csv");
    CHECK_MSG(model, "training the lipo model failed: %s", out);
    static const struct { const char *args, *says; } cases[] = {
        { "--uncertainty ensemble", "needs an ensemble" },
        { "--uncertainty mve", "needs a model trained with --task regression-mve" },
        { "--calibrate conformal", "needs --calibration-data" },
        { "--calibrate platt --calibration-data '%s/val.csv'", "does not fit" },
        { "--calibrate zscaling --calibration-data '%s/val.csv'", "calibrates a variance" },
        { "--uncertainty bayes", "unknown uncertainty method" },
        { "--uncertainty dropout --dropout-samples 1", "dropout-samples" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1500];
        snprintf(args, sizeof args, cases[i].args, dir);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s/val.csv' "
                                 "--out '%s' %s", model, dir, pred, args), 1);
        CHECK_MSG(strstr(out, cases[i].says), "'%s' said: %s", args, out);
    }
    /* eval of a prediction file: rows that do not match, a missing column */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s/val.csv' --out '%s' "
                             "--quiet", model, dir, pred), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                             "--uncertainty-metrics nll", pred, dir), 1);
    CHECK_MSG(strstr(out, "same order") || strstr(out, "SMILES"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/val.csv' "
                             "--uncertainty-metrics nll", pred, dir), 1);
    CHECK_MSG(strstr(out, "lipo_unc"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/val.csv' "
                             "--uncertainty-metrics nll,bogus", pred, dir), 1);
    CHECK_MSG(strstr(out, "bogus"), "%s", out);
}

/* The last field of every data row of a CSV text, as a number; the count. */
static int last_fields(const char *text, double *v, int cap)
{
    int n = 0;
    const char *line = strchr(text, '\n');
    while (line && line[1] && n < cap) {
        line++;
        const char *end = strchr(line, '\n'), *comma = NULL;
        for (const char *c = line; c < (end ? end : line + strlen(line)); c++)
            if (*c == ',')
                comma = c;
        v[n++] = comma ? strtod(comma + 1, NULL) : NAN;
        line = end;
    }
    return n;
}

/* Binary classification: platt lowers the held-out NLL of an over-trained
 * model; isotonic keeps the probabilities' order (it may reach 0 or 1
 * exactly, so its NLL can be infinite, as scikit-learn's). */
MP_TEST(unc_cli_classification_calibration)
{
    const char *dir = tmp("bbbp"), *data = mp_test_shared("datasets/bbbp.csv.gz");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "split --data '%s' --split random --seed 1 "
                             "--split-sizes 0.5,0.25,0.25 --out '%s'", data, dir), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s/train.csv' --model ffn --features "
                             "morgan --epochs 20 --hidden 64 --threads 2 --quiet --save-dir "
                             "'%s/m'", dir, dir), 0);
    double nll[2];
    const char *cal[3] = { "none", "platt", "isotonic" };
    char *text[3];
    for (int k = 0; k < 3; k++) {
        const char *pred = tmp(cal[k]);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s/m/model.mpm' --data "
                                 "'%s/test.csv' --out '%s' --calibrate %s --calibration-data "
                                 "'%s/val.csv' --quiet", dir, dir, pred, cal[k], dir), 0);
        text[k] = mp_test_slurp(pred, NULL);
        CHECK(text[k] != NULL);
        if (k == 2)
            break;
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --preds '%s' --data '%s/test.csv' "
                                 "--uncertainty-metrics nll", pred, dir), 0);
        nll[k] = tu_eval_number(out, "nll");
        CHECK_MSG(isfinite(nll[k]), "%s: %s", cal[k], out);
    }
    /* the probabilities (last field of each row) of the raw and isotonic files */
    static double raw[2000], iso[2000];
    int n = last_fields(text[0], raw, 2000), ordered = 1, in_range = 1, differ = 0;
    CHECK_EQ_INT(last_fields(text[2], iso, 2000), n);
    for (int i = 0; i < n; i++) {
        in_range &= iso[i] >= 0 && iso[i] <= 1;
        differ |= iso[i] != raw[i];
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            ordered &= !(raw[i] < raw[j] && iso[i] > iso[j]);
    for (int k = 0; k < 3; k++)
        mp_free(text[k]);
    CHECK_MSG(n > 400, "%d rows", n);
    CHECK(in_range && differ && ordered);
    CHECK_MSG(nll[1] < nll[0], "platt: held-out nll %g, uncalibrated %g", nll[1], nll[0]);
}
