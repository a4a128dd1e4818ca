/*
 * test_options.c - the option table (src/run/options.c) and what is built on
 * it: checks with one wording for flags and files, defaults that equal the
 * pipelines' own (so runs are bit for bit what they were), the INI reader's
 * file:line messages, the JSON of a resolved configuration, the help text,
 * and configs/ (every file parses; defaults.ini lists every key at its
 * default).
 */
#include "test.h"
#include "internal.h"   /* every module header */

#include <cjson/cJSON.h>
#include <stdlib.h>

static const char *const verbs[] = { "train", "predict", "eval", "featurize", "split",
                                     "bench", "data", "bench-compare", "bench-report",
                                     "hpopt", "fingerprint" };
#define N_VERBS (sizeof verbs / sizeof verbs[0])

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fputs(text, fp);
    return fclose(fp) == 0;
}

/* ===================================================================== */
/* The table                                                              */
/* ===================================================================== */

MP_TEST(options_table_is_well_formed)
{
    CHECK_EQ_STR(mp_options_verbs(), "train, predict, eval, featurize, split, bench, data, "
                                     "bench-compare, bench-report, hpopt, fingerprint");
    for (size_t v = 0; v < N_VERBS; v++) {
        size_t n;
        const mp_option_def *d = mp_option_table(verbs[v], &n);
        CHECK_MSG(d && n > 0, "%s has no table", verbs[v]);
        mp_options *o;
        CHECK_OK(mp_options_create(&o, verbs[v]));
        char *help = mp_options_help(o);
        CHECK(help != NULL);
        for (size_t i = 0; i < n; i++) {
            if (!d[i].key) {
                CHECK_MSG(d[i].help && d[i].help[strlen(d[i].help) - 1] == ':',
                          "%s: heading %zu", verbs[v], i);
                continue;
            }
            const char *k = d[i].key;
            CHECK_MSG(strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(k),
                      "%s: key '%s'", verbs[v], k);
            CHECK_MSG(d[i].help && *d[i].help, "%s --%s has no help", verbs[v], k);
            for (size_t j = 0; j < i; j++)
                CHECK_MSG(!d[j].key || strcmp(d[j].key, k), "%s --%s twice", verbs[v], k);
            /* only text can be without a default; everything else has one that
             * passes its own check */
            if (d[i].type != MP_OPT_TEXT && d[i].type != MP_OPT_LIST)
                CHECK_MSG(d[i].def != NULL, "%s --%s has no default", verbs[v], k);
            if (d[i].parse)
                CHECK_MSG(d[i].def != NULL, "%s --%s: a converter needs a default", verbs[v], k);
            if (d[i].def)
                CHECK_MSG(mp_options_set(o, k, d[i].def) == MP_OK, "%s --%s default '%s': %s",
                          verbs[v], k, d[i].def, mp_error_message());
            if (d[i].type == MP_OPT_CHOICE)
                CHECK_MSG(d[i].choices && (d[i].values || d[i].parse), "%s --%s", verbs[v], k);
            CHECK_EQ_INT(mp_options_type(o, k), d[i].type);
            char flag[160];
            snprintf(flag, sizeof flag, "  --%s", k);
            CHECK_MSG(strstr(help, flag), "%s help lacks --%s", verbs[v], k);
        }
        /* the help fits a terminal */
        for (const char *line = help; *line;) {
            const char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line) : strlen(line);
            CHECK_MSG(len <= 79, "%s help line of %zu characters: %.*s", verbs[v], len, (int)len,
                      line);
            line = nl ? nl + 1 : line + len;
        }
        mp_free(help);
        mp_options_free(o);
    }
    CHECK(mp_option_table("nope", NULL) == NULL);
    mp_options *o = NULL;
    CHECK(mp_options_create(&o, "nope") == MP_ERR_ARG && o == NULL);
    CHECK(strstr(mp_error_message(), "'nope'") && strstr(mp_error_message(), "train, predict"));
}

/* The table's defaults are the pipelines' defaults: a run with no option
 * set is the run mp_train_opts_default() describes, bit for bit. */
MP_TEST(options_defaults_equal_the_pipelines_defaults)
{
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "train"));
    mp_train_opts t, d = mp_train_opts_default();
    memset(&t, 0x5a, sizeof t);   /* every field the table misses shows */
    t.backend = d.backend;
    t.quiet = d.quiet;
    CHECK_OK(mp_options_apply(o, &t));
    CHECK(t.data_path == NULL && t.save_dir == NULL && t.registry == NULL);
    CHECK(t.columns.smiles_column == NULL && t.columns.target_columns == NULL &&
          t.columns.ignore_columns == NULL);
    CHECK_EQ_INT(t.task, d.task);
    CHECK(t.metric == NULL && d.metric == NULL);
    CHECK_EQ_INT(t.model, d.model);
    CHECK_EQ_INT(t.features, d.features);
    CHECK_EQ_INT(t.layout, d.layout);
    CHECK_EQ_INT(t.split.type, d.split.type);
    CHECK(!memcmp(t.split.sizes, d.split.sizes, sizeof d.split.sizes));
    CHECK_EQ_INT(t.split.n_folds, d.split.n_folds);
    CHECK_EQ_INT(t.seed, d.seed);
    CHECK_EQ_INT(t.epochs, d.epochs);
    CHECK_EQ_INT(t.batch_size, d.batch_size);
    CHECK(t.warmup_epochs == d.warmup_epochs && t.init_lr == d.init_lr &&
          t.max_lr == d.max_lr && t.final_lr == d.final_lr && t.dropout == d.dropout);
    CHECK_EQ_INT(t.hidden, d.hidden);
    CHECK_EQ_INT(t.depth, d.depth);
    CHECK_EQ_INT(t.ffn_layers, d.ffn_layers);
    CHECK_EQ_INT(t.ffn_hidden, d.ffn_hidden);
    CHECK_EQ_INT(t.aggregation, d.aggregation);
    CHECK_EQ_INT(t.ensemble_size, d.ensemble_size);
    CHECK_EQ_INT(t.threads, d.threads);
    CHECK_EQ_INT(t.resident, d.resident);
    CHECK_EQ_INT(t.graph, d.graph);
    CHECK_EQ_INT(t.slot_classes, d.slot_classes);
    CHECK_EQ_INT(t.profile, d.profile);
    CHECK_EQ_INT(t.quiet, 0);
    char backend[64];
    CHECK_OK(mp_options_backend(o, backend, sizeof backend));
    CHECK_EQ_STR(backend, "cpu");
    mp_options_free(o);

    /* split: Chemprop's defaults */
    CHECK_OK(mp_options_create(&o, "split"));
    mp_split_args s;
    memset(&s, 0x5a, sizeof s);
    CHECK_OK(mp_options_apply(o, &s));
    mp_split_opts sd = mp_split_opts_default();
    CHECK(s.split.type == sd.type && s.split.seed == sd.seed && s.split.n_folds == sd.n_folds &&
          !memcmp(s.split.sizes, sd.sizes, sizeof sd.sizes) && s.threads == 0);
    mp_options_free(o);

    /* featurize: v1 atoms, Morgan and descriptors on, scaffolds off */
    CHECK_OK(mp_options_create(&o, "featurize"));
    mp_featurize_args f;
    memset(&f, 0x5a, sizeof f);
    CHECK_OK(mp_options_apply(o, &f));
    CHECK(f.layout == MP_ATOM_V1 && !f.no_morgan && !f.no_descriptors && !f.scaffolds &&
          !f.gz && f.threads == 0 && !f.out_path && !f.dump_dir);
    mp_options_free(o);
}

/* ===================================================================== */
/* Setting values                                                         */
/* ===================================================================== */

MP_TEST(options_set_checks_every_type)
{
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK_EQ_STR(mp_options_verb(o), "train");
    /* int: range, junk, auto where allowed */
    CHECK_OK(mp_options_set(o, "epochs", "7"));
    CHECK_EQ_STR(mp_options_get(o, "epochs"), "7");
    CHECK(mp_options_is_set(o, "epochs") && !mp_options_is_set(o, "hidden"));
    CHECK(mp_options_set(o, "epochs", "zero") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--epochs expects an integer in [1, 100000], got 'zero'");
    CHECK_EQ_STR(mp_options_get(o, "epochs"), "7");   /* unchanged */
    CHECK(mp_options_set(o, "epochs", "0") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "epochs", "3x") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "epochs", "auto") == MP_ERR_ARG);
    CHECK_OK(mp_options_set(o, "threads", "auto"));
    CHECK(mp_options_set(o, "threads", "0") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "or auto") != NULL);
    CHECK(mp_options_set(o, "seed", "-1") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "seed", "2147483648") == MP_ERR_ARG);
    CHECK_OK(mp_options_set(o, "seed", "2147483647"));
    /* real */
    CHECK_OK(mp_options_set(o, "dropout", "0.25"));
    CHECK(mp_options_set(o, "dropout", "1") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--dropout expects a number in [0, 0.99], got '1'");
    CHECK(mp_options_set(o, "init-lr", "nan") == MP_ERR_ARG);
    /* choice */
    CHECK(mp_options_set(o, "model", "gcn") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--model expects dmpnn or ffn, got 'gcn'");
    CHECK(mp_options_set(o, "aggregation", "max") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--aggregation expects mean, sum, norm or attentive, got 'max'");
    CHECK(mp_options_set(o, "resident", "maybe") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "task", "ranking") == MP_ERR_ARG);
    /* converters: their own message, behind the option's name */
    CHECK(mp_options_set(o, "split", "scaffold") == MP_ERR_ARG);
    CHECK(!strncmp(mp_error_message(), "--split: unknown split type 'scaffold'", 38));
    CHECK(mp_options_set(o, "features", "maccs") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "--features: ") && strstr(mp_error_message(), "maccs"));
    CHECK(mp_options_set(o, "split-sizes", "0.8,0.2") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "metric", "f1") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "atom-layout", "v9") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "device", "tpu") == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "--device: unknown backend 'tpu'") &&
          strstr(mp_error_message(), "cpu"));
    CHECK_OK(mp_options_set(o, "features", "rdkit2d,morgan"));
    CHECK_OK(mp_options_set(o, "metric", "prc-auc"));
    /* bool: a missing value is true; forms normalized */
    CHECK_OK(mp_options_set(o, "quiet", NULL));
    CHECK_EQ_STR(mp_options_get(o, "quiet"), "true");
    CHECK_OK(mp_options_set(o, "quiet", "No"));
    CHECK_EQ_STR(mp_options_get(o, "quiet"), "false");
    CHECK(mp_options_set(o, "quiet", "2") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "hidden", NULL) == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--hidden needs a value");
    /* "" resets; '_' stands for '-'; unknown keys */
    CHECK_OK(mp_options_set(o, "epochs", ""));
    CHECK(!mp_options_is_set(o, "epochs"));
    CHECK_EQ_STR(mp_options_get(o, "epochs"), "30");
    CHECK_OK(mp_options_set(o, "batch_size", "64"));
    CHECK_EQ_STR(mp_options_get(o, "batch-size"), "64");
    CHECK(mp_options_set(o, "epoch", "3") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "unknown option '--epoch' for train");
    CHECK(mp_options_type(o, "epoch") == MP_OPT_UNKNOWN && mp_options_get(o, "epoch") == NULL);
    CHECK(mp_options_type(o, "uncertainty") == MP_OPT_UNKNOWN);   /* predict's, not train's */
    /* a file's origin names the option as a key */
    CHECK(mp_options_set_from(o, "epochs", "x", "f.ini:3") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "f.ini:3: epochs expects an integer in [1, 100000], got 'x'");
    CHECK(mp_options_set_from(o, "epoch", "3", "f.ini:4") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "f.ini:4: unknown key 'epoch' in [train]");
    /* required */
    CHECK_EQ_STR(mp_options_missing(o), "data");
    CHECK_OK(mp_options_set(o, "data", "x.csv"));
    CHECK_EQ_STR(mp_options_missing(o), "save-dir");
    CHECK_OK(mp_options_set(o, "save-dir", "d"));
    CHECK(mp_options_missing(o) == NULL);

    /* what lands in the struct */
    mp_train_opts t = mp_train_opts_default();
    CHECK_OK(mp_options_apply(o, &t));
    CHECK_EQ_STR(t.data_path, "x.csv");
    CHECK(t.features == (MP_FEAT_RDKIT2D | MP_FEAT_MORGAN));
    CHECK_EQ_STR(t.metric, "prc-auc");
    CHECK(t.dropout == 0.25 && t.batch_size == 64 && t.seed == 2147483647u && t.threads == 0);
    mp_options_free(o);

    /* split's seed takes any uint64 */
    CHECK_OK(mp_options_create(&o, "split"));
    CHECK_OK(mp_options_set(o, "seed", "18446744073709551615"));
    mp_split_args s;
    CHECK_OK(mp_options_apply(o, &s));
    CHECK(s.split.seed == UINT64_MAX);
    CHECK(mp_options_set(o, "seed", "-1") == MP_ERR_ARG);
    CHECK_EQ_STR(mp_error_message(), "--seed expects a non-negative integer, got '-1'");
    mp_options_free(o);

    /* bench's seeds: a list of integers */
    CHECK_OK(mp_options_create(&o, "bench"));
    CHECK_OK(mp_options_set(o, "seeds", "0,5,9"));
    CHECK(mp_options_set(o, "seeds", "0,x") == MP_ERR_ARG);
    CHECK(mp_options_set(o, "seeds", "0,,1") == MP_ERR_ARG);
    mp_options_free(o);
}

MP_TEST(options_backend_name_from_device_and_precision)
{
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "predict"));
    char b[64];
    CHECK_OK(mp_options_set(o, "device", "gpu"));
    CHECK_OK(mp_options_backend(o, b, sizeof b));
    CHECK_EQ_STR(b, "gpu");
    CHECK_OK(mp_options_set(o, "precision", "bf16"));
    CHECK_OK(mp_options_backend(o, b, sizeof b));
    CHECK_EQ_STR(b, "gpu:bf16");
    CHECK_OK(mp_options_set(o, "device", "gpu:tf32"));
    CHECK(mp_options_backend(o, b, sizeof b) == MP_ERR_ARG);
    CHECK_OK(mp_options_set(o, "precision", ""));
    CHECK_OK(mp_options_backend(o, b, sizeof b));
    CHECK_EQ_STR(b, "gpu:tf32");
    CHECK(mp_options_backend(o, b, 4) == MP_ERR_ARG);   /* does not fit */
    mp_options_free(o);
}

/* ===================================================================== */
/* Configuration files                                                    */
/* ===================================================================== */

MP_TEST(options_read_config_sets_the_verbs_section)
{
    const char *p = tmp("good.ini");
    CHECK(write_text(p, "; a comment\n"
                        "# another\n"
                        "[train]\n"
                        "data = in.csv\n"
                        "epochs=12 ; inline comment\n"
                        "hidden = 64   # the other inline comment\n"
                        "features = morgan,rdkit2d\n"
                        "save_dir = out dir\r\n"   /* '_' for '-', CRLF, a space inside */
                        "quiet\t=\tyes\n"
                        "\n"
                        "[predict]\n"
                        "model = m.mpm\n"
                        "uncertainty = dropout\n"));
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK_OK(mp_options_set(o, "epochs", "99"));   /* a file read later overrides */
    CHECK_OK(mp_options_read_config(o, p));
    CHECK_EQ_STR(mp_options_get(o, "data"), "in.csv");
    CHECK_EQ_STR(mp_options_get(o, "epochs"), "12");
    CHECK_EQ_STR(mp_options_get(o, "hidden"), "64");
    CHECK_EQ_STR(mp_options_get(o, "features"), "morgan,rdkit2d");
    CHECK_EQ_STR(mp_options_get(o, "save-dir"), "out dir");
    CHECK_EQ_STR(mp_options_get(o, "quiet"), "true");
    /* ... and flags after the file override it */
    CHECK_OK(mp_options_set(o, "hidden", "32"));
    CHECK_EQ_STR(mp_options_get(o, "hidden"), "32");
    mp_options_free(o);

    /* the same file for predict: only its section applies */
    CHECK_OK(mp_options_create(&o, "predict"));
    CHECK_OK(mp_options_read_config(o, p));
    CHECK_EQ_STR(mp_options_get(o, "model"), "m.mpm");
    CHECK_EQ_STR(mp_options_get(o, "uncertainty"), "dropout");
    CHECK(mp_options_get(o, "data") == NULL);
    mp_options_free(o);

    /* a line far beyond libinih's default limit of 200 */
    char longline[3000];
    int k = snprintf(longline, sizeof longline, "[train]\ndata = ");
    memset(longline + k, 'a', 2000);
    snprintf(longline + k + 2000, sizeof longline - k - 2000, ".csv\n");
    CHECK(write_text(p, longline));
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK_OK(mp_options_read_config(o, p));
    CHECK_EQ_INT(strlen(mp_options_get(o, "data")), 2004);
    mp_options_free(o);
}

MP_TEST(options_read_config_errors_name_file_and_line)
{
    static const struct {
        const char *text, *message;
        mp_status   st;
    } cases[] = {
        { "[train]\nepochs = 3\n\n; c\nepoch = 4\n", "bad.ini:5: unknown key 'epoch' in [train]",
          MP_ERR_ARG },
        { "[train]\nepochs = zero\n",
          "bad.ini:2: epochs expects an integer in [1, 100000], got 'zero'", MP_ERR_ARG },
        /* another verb's section is checked too */
        { "[train]\nepochs = 3\n[predict]\nthreads = 0\n",
          "bad.ini:4: threads expects an integer in [1, 1024] or auto, got '0'", MP_ERR_ARG },
        { "[predict]\nepochs = 3\n", "bad.ini:2: unknown key 'epochs' in [predict]", MP_ERR_ARG },
        { "[trian]\nepochs = 3\n", "bad.ini:2: unknown section [trian] (sections: train, "
          "predict, eval, featurize, split, bench, data, bench-compare, bench-report, hpopt, "
          "fingerprint)", MP_ERR_ARG },
        { "epochs = 3\n", "bad.ini:1: 'epochs' is outside a section (start with [train])",
          MP_ERR_ARG },
        { "[train]\nepochs 3\n", "bad.ini:2: expected 'key = value', a [section] or a comment",
          MP_ERR_FORMAT },
        { "[train\nepochs = 3\n", "bad.ini:1: expected 'key = value', a [section] or a comment",
          MP_ERR_FORMAT },
        { "[train]\nsplit = scaffold\n", "bad.ini:2: split: unknown split type 'scaffold'",
          MP_ERR_ARG },
    };
    const char *p = tmp("bad.ini");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(write_text(p, cases[i].text));
        mp_options *o;
        CHECK_OK(mp_options_create(&o, "train"));
        mp_status st = mp_options_read_config(o, p);
        const char *m = mp_error_message();
        const char *at = strstr(m, "bad.ini:");
        int ok = st == cases[i].st && at &&
                 !strncmp(at, cases[i].message, strlen(cases[i].message));
        mp_options_free(o);
        CHECK_MSG(ok, "case %zu: %s: %s", i, mp_status_name(st), m);
    }
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK(mp_options_read_config(o, tmp("absent.ini")) == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "absent.ini") != NULL);
    mp_options_free(o);
}

/* ===================================================================== */
/* JSON                                                                   */
/* ===================================================================== */

MP_TEST(options_json_has_every_option_with_its_value)
{
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK_OK(mp_options_set(o, "data", "x.csv"));
    CHECK_OK(mp_options_set(o, "features", "morgan,rdkit2d"));
    CHECK_OK(mp_options_set(o, "quiet", NULL));
    CHECK_OK(mp_options_set(o, "dropout", "0.1"));
    char *text = mp_options_json(o);
    CHECK(text != NULL);
    cJSON *j = cJSON_Parse(text);
    mp_free(text);
    CHECK(j != NULL);
    size_t n;
    const mp_option_def *d = mp_option_table("train", &n);
    int missing = 0;
    for (size_t i = 0; i < n; i++)
        missing += d[i].key && !cJSON_GetObjectItemCaseSensitive(j, d[i].key);
    const cJSON *feat = cJSON_GetObjectItemCaseSensitive(j, "features");
    int ok = cJSON_IsArray(feat) && cJSON_GetArraySize(feat) == 2 &&
             !strcmp(cJSON_GetArrayItem(feat, 1)->valuestring, "rdkit2d");
    const cJSON *sizes = cJSON_GetObjectItemCaseSensitive(j, "split-sizes");
    ok &= cJSON_IsArray(sizes) && cJSON_GetArrayItem(sizes, 0)->valuedouble == 0.8;
    ok &= cJSON_GetObjectItemCaseSensitive(j, "epochs")->valuedouble == 30;
    ok &= cJSON_GetObjectItemCaseSensitive(j, "dropout")->valuedouble == 0.1;
    ok &= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "quiet"));
    ok &= cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "save-dir"));
    ok &= !strcmp(cJSON_GetObjectItemCaseSensitive(j, "threads")->valuestring, "auto");
    ok &= !strcmp(cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring, "dmpnn");
    ok &= !strcmp(cJSON_GetObjectItemCaseSensitive(j, "data")->valuestring, "x.csv");
    cJSON_Delete(j);
    mp_options_free(o);
    CHECK_EQ_INT(missing, 0);
    CHECK(ok);
}

/* ===================================================================== */
/* configs/                                                               */
/* ===================================================================== */

/* Every key of every verb is in configs/defaults.ini, in its section, at its
 * default: the file documents the table and cannot drift from it. */
MP_TEST(configs_defaults_ini_lists_every_key_at_its_default)
{
    char *text = mp_test_slurp("configs/defaults.ini", NULL);
    CHECK_MSG(text != NULL, "configs/defaults.ini is missing (run the tests from the checkout)");
    for (size_t v = 0; v < N_VERBS; v++) {
        char head[64];
        snprintf(head, sizeof head, "\n[%s]\n", verbs[v]);
        const char *sec = strstr(text, head);
        CHECK_MSG(sec, "no [%s] section", verbs[v]);
        const char *end = strstr(sec + 1, "\n[");
        size_t n;
        const mp_option_def *d = mp_option_table(verbs[v], &n);
        for (size_t i = 0; i < n; i++) {
            if (!d[i].key)
                continue;
            char line[256];
            snprintf(line, sizeof line, "\n%s =%s%s\n", d[i].key, d[i].def ? " " : "",
                     d[i].def ? d[i].def : "");
            const char *at = strstr(sec, line);
            CHECK_MSG(at && (!end || at < end), "[%s]: no line '%s'", verbs[v], line + 1);
        }
        mp_options *o;
        CHECK_OK(mp_options_create(&o, verbs[v]));
        mp_status st = mp_options_read_config(o, "configs/defaults.ini");
        char *json = mp_options_json(o);
        mp_options_free(o);
        /* setting every default changes nothing */
        CHECK_OK(mp_options_create(&o, verbs[v]));
        char *fresh = mp_options_json(o);
        mp_options_free(o);
        int same = json && fresh && !strcmp(json, fresh);
        mp_free(json);
        mp_free(fresh);
        CHECK_MSG(st == MP_OK, "%s", mp_error_message());
        CHECK_MSG(same, "[%s] of defaults.ini is not the defaults", verbs[v]);
    }
    mp_free(text);
}

MP_TEST(configs_examples_parse)
{
    static const struct {
        const char *path, *verb, *key, *value;
    } files[] = {
        { "configs/esol.ini", "train", "split", "scaffold_balanced" },
        { "configs/esol.ini", "predict", "out", "runs/esol/predictions.csv" },
        { "configs/esol.ini", "eval", "model", "runs/esol/model.mpm" },
        { "configs/bench/quick.ini", "bench", "datasets", "esol,freesolv,bace" },
        { "configs/bench/paper.ini", "bench", "models", "all" },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        mp_options *o;
        CHECK_OK(mp_options_create(&o, files[i].verb));
        mp_status st = mp_options_read_config(o, files[i].path);
        const char *v = mp_options_get(o, files[i].key);
        int ok = st == MP_OK && v && !strcmp(v, files[i].value) && !mp_options_missing(o);
        mp_options_free(o);
        CHECK_MSG(ok, "%s [%s]: %s", files[i].path, files[i].verb, mp_error_message());
    }
}
