/*
 * train_predict.c - libmolprop from the outside: train a D-MPNN on a CSV
 * through the public API, then predict a few molecules with the saved model.
 *
 *   cc $(pkg-config --cflags --libs molprop) train_predict.c -o train_predict
 *   ./train_predict data/esol.csv.gz esol_model epochs=5 hidden=64
 *
 * Arguments after the CSV and the model directory are training options,
 * key=value, named like `molprop train`'s long options (molprop train --help).
 */
#include <molprop.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "train_predict: %s: %s\n", what, mp_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DATA.csv MODEL_DIR [key=value ...]\n", argv[0]);
        return 2;
    }
    /* Training: options by name, as on the command line or in a config file. */
    mp_options *o;
    if (mp_options_create(&o, "train"))
        return fail("options");
    if (mp_options_set(o, "data", argv[1]) || mp_options_set(o, "save-dir", argv[2]) ||
        mp_options_set(o, "epochs", "5") || mp_options_set(o, "quiet", "true")) {
        mp_options_free(o);
        return fail("options");
    }
    for (int i = 3; i < argc; i++) {
        char key[64];
        const char *eq = strchr(argv[i], '=');
        if (!eq || (size_t)(eq - argv[i]) >= sizeof key) {
            fprintf(stderr, "train_predict: '%s' is not key=value\n", argv[i]);
            mp_options_free(o);
            return 2;
        }
        snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
        if (mp_options_set(o, key, eq + 1)) {
            mp_options_free(o);
            return fail("options");
        }
    }
    mp_summary *s;
    if (mp_run_train(o, &s)) {
        mp_options_free(o);
        return fail("training");
    }
    printf("trained on %.0f molecules: test %s %.4f\n", mp_summary_number(s, "n_train"),
           mp_summary_text(s, "metric"), mp_summary_number(s, "test"));
    mp_summary_free(s);
    mp_options_free(o);

    /* Prediction: the saved model applied to SMILES in memory. */
    char path[4096];
    snprintf(path, sizeof path, "%s/model.mpm", argv[2]);
    mp_predictor *p;
    if (mp_predictor_open(&p, path, "cpu"))
        return fail("loading the model");
    static const char *const smiles[] = { "CCO", "c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O", "not a molecule" };
    enum { N = sizeof smiles / sizeof smiles[0] };
    size_t t = mp_predictor_n_tasks(p);
    double mean[N * 8];
    if (t > 8 || mp_predictor_predict(p, smiles, N, mean, NULL)) {
        mp_predictor_free(p);
        return fail("predicting");
    }
    for (size_t i = 0; i < N; i++) {
        printf("%-24s", smiles[i]);
        for (size_t k = 0; k < t; k++) {
            if (isnan(mean[i * t + k]))
                printf("  %s: invalid", mp_predictor_task_name(p, k));
            else
                printf("  %s: %.4f", mp_predictor_task_name(p, k), mean[i * t + k]);
        }
        printf("\n");
    }
    mp_predictor_free(p);
    return 0;
}
