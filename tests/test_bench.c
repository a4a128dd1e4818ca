/*
 * test_bench.c - the benchmark runner (src/run/bench*.c): the grid from
 * options and configs, the results file (rows round-trip, a torn row is
 * cut, one row per run), a grid's runs identical to mp_train alone (with
 * the feature cache, without it, and side by side), resuming, the exported
 * splits, the statistics and bench compare.  test_bench_report.c has the
 * report and the command line (interruption).
 */
#include "test.h"
#include "internal.h"
#include "bench/bench.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp(const char *name) { return mp_test_tmp("bench_", name); }

static int write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fputs(text, fp);
    return fclose(fp) == 0;
}

/* The first n rows of ESOL as a CSV of our own (a user's dataset). */
static const char *small_esol(int n)
{
    static char path[1300];
    snprintf(path, sizeof path, "%s/bench_esol%d.csv", mp_test_tmpdir(), n);
    if (access(path, R_OK) == 0)
        return path;
    mp_dataset *d;
    if (mp_dataset_load(&d, mp_test_shared("datasets/esol.csv.gz"), NULL) != MP_OK)
        return NULL;
    FILE *fp = fopen(path, "w");
    fprintf(fp, "smiles,logS\n");
    for (int i = 0; i < n && (size_t)i < d->n_rows; i++)
        fprintf(fp, "%s,%.17g\n", d->smiles[i], d->targets[i]);
    fclose(fp);
    mp_dataset_free(d);
    return path;
}

/* bench options for a grid over `datasets` in out dir `out`. */
static mp_options *bench_opts(const char *datasets, const char *models, const char *seeds,
                              const char *out)
{
    mp_options *o;
    if (mp_options_create(&o, "bench") || mp_options_set(o, "datasets", datasets) ||
        mp_options_set(o, "models", models) || mp_options_set(o, "seeds", seeds) ||
        mp_options_set(o, "epochs", "2") || mp_options_set(o, "threads", "1") ||
        mp_options_set(o, "quiet", NULL) || mp_options_set(o, "out", out) ||
        mp_options_set(o, "data-dir", mp_test_shared("datasets"))) {
        fprintf(stdout, "    bench options: %s\n", mp_error_message());
        return NULL;
    }
    return o;
}

static int count_files(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' && (!part || strstr(e->d_name, part));
    closedir(d);
    return n;
}

/* ===================================================================== */
/* The grid                                                               */
/* ===================================================================== */

MP_TEST(bench_grid_from_options)
{
    const char *csv = small_esol(60);
    CHECK(csv);
    char list[2048];
    snprintf(list, sizeof list, "esol, mine=%s:regression:mae,freesolv", csv);
    mp_options *o = bench_opts(list, "ffn-morgan,dmpnn,ffn-morgan", "2,0", tmp("grid"));
    CHECK(o);
    mp_bench_grid g;
    CHECK_OK(mp_bench_grid_make(&g, o));
    CHECK_EQ_INT(g.n_ds, 3);
    CHECK_EQ_STR(g.ds[0].name, "esol");
    CHECK_EQ_STR(g.ds[0].metric, "rmse");
    CHECK_EQ_STR(g.ds[1].name, "mine");
    CHECK_EQ_STR(g.ds[1].path, csv);
    CHECK_EQ_STR(g.ds[1].metric, "mae");
    CHECK(g.ds[1].task == MP_TASK_REGRESSION);
    CHECK_EQ_INT(g.n_var, 2);   /* duplicates dropped, order kept */
    CHECK_EQ_STR(g.var[0]->name, "ffn-morgan");
    CHECK_EQ_INT(g.n_seeds, 2);
    CHECK_EQ_INT(g.seeds[0], 2);
    CHECK(g.features == MP_FEAT_MORGAN);
    CHECK(strstr(g.results_path, "grid/results.tsv") != NULL);
    CHECK(strstr(g.cache_dir, "grid/cache") != NULL);
    mp_bench_grid_free(&g);
    mp_options_free(o);

    /* 'all' is every registry dataset present; a config file and flags */
    const char *ini = tmp("grid.ini");
    CHECK(write_text(ini, "[bench]\ndatasets = all\nmodels = all\nseeds = 0,1,2\n"));
    CHECK_OK(mp_options_create(&o, "bench"));
    CHECK_OK(mp_options_read_config(o, ini));
    CHECK_OK(mp_options_set(o, "data-dir", mp_test_shared("datasets")));
    CHECK_OK(mp_options_set(o, "seeds", "5"));   /* a flag after the file wins */
    CHECK_OK(mp_bench_grid_make(&g, o));
    CHECK_EQ_INT(g.n_ds, 17);
    CHECK_EQ_INT(g.n_var, 5);
    CHECK_EQ_INT(g.n_seeds, 1);
    CHECK_EQ_INT(g.seeds[0], 5);
    CHECK(g.features == (MP_FEAT_MORGAN | MP_FEAT_MORGAN_COUNT | MP_FEAT_RDKIT2D_NORM));
    mp_bench_grid_free(&g);
    mp_options_free(o);

    /* the paper's grid: 19 datasets (and the 12-target qm9), the absent
     * ones skipped with missing = skip */
    CHECK_OK(mp_options_create(&o, "bench"));
    CHECK_OK(mp_options_read_config(o, "configs/bench/paper.ini"));
    CHECK_OK(mp_options_set(o, "data-dir", mp_test_shared("datasets")));
    CHECK_OK(mp_bench_grid_make(&g, o));
    CHECK_EQ_INT(g.n_ds, 17);
    CHECK_EQ_INT(g.n_skipped, 3);
    CHECK_EQ_INT(g.n_var, 5);
    CHECK_EQ_INT(g.n_seeds, 3);
    CHECK(g.a.split == MP_SPLIT_SCAFFOLD_BALANCED);
    mp_bench_grid_free(&g);
    mp_options_free(o);
}

MP_TEST(bench_grid_rejects_bad_grids)
{
    static const struct { const char *datasets, *models, *seeds, *msg; } cases[] = {
        { "esol", "dmpnn,gcn", "0", "unknown model 'gcn'" },
        { "esoll", "dmpnn", "0", "unknown dataset 'esoll'" },
        { "esol,esol", "dmpnn", "0", "'esol' is in the grid twice" },
        { "esol", "dmpnn", "1,1", "1 is given twice" },
        { "pcba", "dmpnn", "0", "molprop data fetch pcba" },
        { "/nonexistent/x.csv:regression", "dmpnn", "0", "is not a file" },
        { "@CSV", "dmpnn", "0", "give the task type" },
        { "@CSV:regression:auc", "dmpnn", "0", "metric auc does not fit a regression task" },
        { "@CSV:regresion", "dmpnn", "0", "unknown task type 'regresion'" },
    };
    const char *csv = small_esol(60);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char ds[1400];
        if (!strncmp(cases[i].datasets, "@CSV", 4))
            snprintf(ds, sizeof ds, "%s%s", csv, cases[i].datasets + 4);
        else
            snprintf(ds, sizeof ds, "%s", cases[i].datasets);
        mp_options *o = bench_opts(ds, cases[i].models, "0", tmp("bad"));
        CHECK(o);
        if (strcmp(cases[i].seeds, "0"))
            CHECK_OK(mp_options_set(o, "seeds", cases[i].seeds));
        mp_bench_grid g;
        mp_status st = mp_bench_grid_make(&g, o);
        mp_options_free(o);
        CHECK_MSG(st != MP_OK && strstr(mp_error_message(), cases[i].msg),
                  "case %zu: status %d, message '%s'", i, st, mp_error_message());
    }
    /* missing = skip: the absent dataset is a note, not an error */
    mp_options *o = bench_opts("esol,pcba", "dmpnn", "0", tmp("bad"));
    CHECK_OK(mp_options_set(o, "missing", "skip"));
    mp_bench_grid g;
    CHECK_OK(mp_bench_grid_make(&g, o));
    CHECK_EQ_INT(g.n_ds, 1);
    CHECK_EQ_INT(g.n_skipped, 1);
    CHECK_EQ_STR(g.skipped[0], "pcba");
    mp_bench_grid_free(&g);
    mp_options_free(o);
}

/* ===================================================================== */
/* Results rows                                                           */
/* ===================================================================== */

static mp_bench_row sample_row(double *tt, double *vt, double *loss, double *val)
{
    mp_bench_row r;
    memset(&r, 0, sizeof r);
    r.tool = "molprop";
    r.dataset = "tox21";
    r.model = "dmpnn";
    r.split = "scaffold_balanced";
    r.metric = "auc";
    r.device = "gpu";
    r.precision = "bf16";
    r.version = "0.1.0";
    r.seed = 2;
    snprintf(r.split_sum, sizeof r.split_sum, "0123456789abcdef");
    snprintf(r.data_sha, sizeof r.data_sha, "a8f5b4744c25cad3");
    snprintf(r.settings, sizeof r.settings, "fedcba9876543210");
    r.n_tasks = 3;
    r.test = 0.75;
    r.val = NAN;
    r.test_tasks = tt;
    r.val_tasks = vt;
    r.epochs = 30;
    r.best_epoch = 17;
    r.n_train = 6264;
    r.n_val = 783;
    r.n_test = 784;
    r.featurize_seconds = 1.25;
    r.train_seconds = 12.5;
    r.n_curve = 2;
    r.train_loss = loss;
    r.val_curve = val;
    return r;
}

MP_TEST(bench_results_rows_round_trip)
{
    double tt[3] = { 0.5, NAN, 0.875 }, vt[3] = { 0.25, 0.5, 0.75 };
    double loss[2] = { 0.69, 0.5 }, val[2] = { NAN, 0.7 };
    mp_bench_row r = sample_row(tt, vt, loss, val);
    const char *path = tmp("rows.tsv");
    unlink(path);
    int fd;
    CHECK_OK(mp_bench_results_open(path, &fd));
    CHECK_OK(mp_bench_results_append(fd, path, &r));
    r.seed = 3;
    r.test = 0.8;
    CHECK_OK(mp_bench_results_append(fd, path, &r));
    close(fd);
    mp_bench_row *rows;
    size_t n, torn;
    CHECK_OK(mp_bench_rows_read(path, 0, &rows, &n, &torn));
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(torn, 0);
    CHECK_EQ_STR(rows[0].dataset, "tox21");
    CHECK_EQ_STR(rows[0].precision, "bf16");
    CHECK_EQ_STR(rows[0].split_sum, "0123456789abcdef");
    CHECK_EQ_INT(rows[0].seed, 2);
    CHECK_EQ_INT(rows[1].seed, 3);
    CHECK(rows[0].test == 0.75 && isnan(rows[0].val) && rows[1].test == 0.8);
    CHECK_EQ_INT(rows[0].n_tasks, 3);
    CHECK(rows[0].test_tasks[0] == 0.5 && isnan(rows[0].test_tasks[1]) &&
          rows[0].test_tasks[2] == 0.875);
    CHECK(rows[0].val_tasks[2] == 0.75);
    CHECK_EQ_INT(rows[0].best_epoch, 17);
    CHECK_EQ_INT(rows[0].n_test, 784);
    CHECK(rows[0].train_seconds == 12.5);
    CHECK_EQ_INT(rows[0].n_curve, 2);
    CHECK(rows[0].train_loss[0] == 0.69 && isnan(rows[0].val_curve[0]) &&
          rows[0].val_curve[1] == 0.7);
    mp_bench_rows_free(rows, n);

    /* a row cut short (no newline) is left out by the reader and cut off
     * when the file is opened for appending again */
    FILE *fp = fopen(path, "a");
    fputs("molprop\ttox21\tdmpnn\t4\tscaff", fp);
    fclose(fp);
    CHECK_OK(mp_bench_rows_read(path, 0, &rows, &n, &torn));
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(torn, 1);
    mp_bench_rows_free(rows, n);
    CHECK_OK(mp_bench_results_open(path, &fd));
    r.seed = 4;
    CHECK_OK(mp_bench_results_append(fd, path, &r));
    close(fd);
    CHECK_OK(mp_bench_rows_read(path, 0, &rows, &n, &torn));
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(torn, 0);
    CHECK_EQ_INT(rows[2].seed, 4);
    mp_bench_rows_free(rows, n);

    /* errors name the file and line */
    const char *bad = tmp("bad.tsv");
    CHECK(write_text(bad, "dataset\tmodel\n"));
    CHECK(mp_bench_rows_read(bad, 0, &rows, &n, NULL) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "bad.tsv:1: not a results file") != NULL);
    fp = fopen(bad, "w");
    fputs(mp_bench_results_header(), fp);
    fputs("molprop\tesol\tdmpnn\tzero\n", fp);
    fclose(fp);
    CHECK(mp_bench_rows_read(bad, 0, &rows, &n, NULL) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "bad.tsv:2: expected 26 tab-separated fields") != NULL);
    CHECK(mp_bench_rows_read(tmp("absent.tsv"), 0, &rows, &n, NULL) == MP_ERR_IO);
    CHECK_OK(mp_bench_rows_read(tmp("absent.tsv"), 1, &rows, &n, NULL));
    CHECK(n == 0 && rows == NULL);
}

MP_TEST(bench_temp_files_are_removed_by_the_signal_cleanup)
{
    const char *p = tmp("partial.mpf.part");
    CHECK(write_text(p, "half"));
    int slot = mp_bench_temp_register(p);
    CHECK(slot >= 0);
    mp_bench_signal_cleanup();
    CHECK(access(p, F_OK) != 0);
    mp_bench_temp_unregister(slot);
    CHECK(write_text(p, "kept"));   /* unregistered: left alone */
    mp_bench_signal_cleanup();
    CHECK(access(p, F_OK) == 0);
}

/* ===================================================================== */
/* Runs                                                                   */
/* ===================================================================== */

/* mp_train of the same run, alone, from the CSV: its test score. */
static double train_alone_scaled(const char *path, mp_model_kind model, unsigned features,
                                 int no_scaling, long seed, double *val)
{
    mp_train_opts t = mp_train_opts_default();
    t.data_path = path;
    t.task = MP_TASK_REGRESSION;
    t.metric = "rmse";
    t.model = model;
    t.features = features;
    t.no_features_scaling = no_scaling;
    /* the grid's settings are Chemprop's: features scaled unless the
     * variant says not (bench_grid.c) */
    t.features_scaling = no_scaling ? MP_FSCALE_OFF : MP_FSCALE_ON;
    t.split.type = MP_SPLIT_SCAFFOLD_BALANCED;
    t.seed = (uint64_t)seed;
    t.epochs = 2;
    t.threads = 1;
    t.quiet = 1;
    mp_train_result r;
    if (mp_train(&t, &r) != MP_OK)
        return NAN;
    double test = r.test_mean;
    *val = r.val_mean;
    mp_train_result_free(&r);
    return test;
}

static double train_alone(const char *path, mp_model_kind model, unsigned features, long seed,
                          double *val)
{
    return train_alone_scaled(path, model, features, 0, seed, val);
}

static const mp_bench_row *find(const mp_bench_row *rows, size_t n, const char *model, long seed)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rows[i].model, model) && rows[i].seed == seed)
            return &rows[i];
    return NULL;
}

MP_TEST(bench_runs_equal_mp_train_alone_and_resume)
{
    const char *csv = small_esol(150);
    CHECK(csv);
    char ds[1400];
    snprintf(ds, sizeof ds, "small=%s:regression", csv);
    const char *out = tmp("run");
    char results[1300], cache[1300];
    snprintf(results, sizeof results, "%s/results.tsv", out);
    snprintf(cache, sizeof cache, "%s/cache", out);
    mp_options *o = bench_opts(ds, "dmpnn,ffn-morgan", "0,1", out);
    CHECK(o);
    mp_summary *s;
    CHECK_OK(mp_run_bench(o, NULL, &s));
    CHECK(mp_summary_number(s, "n_runs") == 4 && mp_summary_number(s, "n_skipped") == 0);
    mp_summary_free(s);
    CHECK_EQ_INT(count_files(cache, ".mpf"), 1);
    CHECK_EQ_INT(count_files(cache, ".tmp"), 0);

    mp_bench_row *rows;
    size_t n;
    CHECK_OK(mp_bench_rows_read(results, 0, &rows, &n, NULL));
    CHECK_EQ_INT(n, 4);
    for (int m = 0; m < 2; m++)
        for (long seed = 0; seed < 2; seed++) {
            const mp_bench_row *r = find(rows, n, m ? "ffn-morgan" : "dmpnn", seed);
            CHECK(r);
            double val = NAN, test = train_alone(csv, m ? MP_MODEL_FFN : MP_MODEL_DMPNN,
                                           m ? MP_FEAT_MORGAN : 0, seed, &val);
            CHECK_MSG(r->test == test && r->val == val, "%s seed %ld: bench %.17g/%.17g, "
                      "alone %.17g/%.17g", r->model, seed, r->test, r->val, test, val);
            CHECK_EQ_STR(r->metric, "rmse");
            CHECK_EQ_STR(r->device, "cpu");
            CHECK_EQ_INT(r->epochs, 2);
            CHECK_EQ_INT(r->n_curve, 2);
            CHECK(r->train_loss[0] > 0 && r->val_curve[1] > 0);
            CHECK(r->n_train + r->n_val + r->n_test == 150);
            CHECK(strlen(r->split_sum) == 16 && strlen(r->settings) == 16);
        }
    /* the two models of one seed share a split; the seeds differ */
    CHECK_EQ_STR(find(rows, n, "dmpnn", 0)->split_sum, find(rows, n, "ffn-morgan", 0)->split_sum);
    CHECK(strcmp(find(rows, n, "dmpnn", 0)->split_sum, find(rows, n, "dmpnn", 1)->split_sum));

    /* the same grid again: nothing to run */
    CHECK_OK(mp_run_bench(o, NULL, &s));
    CHECK(mp_summary_number(s, "n_runs") == 0 && mp_summary_number(s, "n_skipped") == 4);
    mp_summary_free(s);

    /* a lost row is run again, from the cache, with the same result */
    FILE *fp = fopen(results, "w");
    fputs(mp_bench_results_header(), fp);
    mp_buf b = { 0 };
    for (size_t i = 0; i < n; i++)
        if (!(rows[i].seed == 1 && !strcmp(rows[i].model, "dmpnn")))
            CHECK_OK(mp_bench_row_format(&rows[i], &b));
    fwrite(b.data, 1, b.len, fp);
    fclose(fp);
    mp_buf_free(&b);
    CHECK_OK(mp_run_bench(o, NULL, &s));
    CHECK(mp_summary_number(s, "n_runs") == 1 && mp_summary_number(s, "n_skipped") == 3);
    mp_summary_free(s);
    mp_bench_row *again;
    size_t n2;
    CHECK_OK(mp_bench_rows_read(results, 0, &again, &n2, NULL));
    CHECK_EQ_INT(n2, 4);
    CHECK(find(again, n2, "dmpnn", 1)->test == find(rows, n, "dmpnn", 1)->test);
    mp_bench_rows_free(again, n2);

    /* other settings in the same results file are refused */
    CHECK_OK(mp_options_set(o, "epochs", "3"));
    CHECK(mp_run_bench(o, NULL, &s) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "with other settings") != NULL);
    mp_options_free(o);

    /* without the cache, and two runs at a time: the same rows */
    const char *out2 = tmp("run2");
    o = bench_opts(ds, "dmpnn,ffn-morgan", "0,1", out2);
    CHECK_OK(mp_options_set(o, "cache-dir", "none"));
    CHECK_OK(mp_options_set(o, "jobs", "2"));
    CHECK_OK(mp_run_bench(o, NULL, &s));
    CHECK(mp_summary_number(s, "n_runs") == 4);
    mp_summary_free(s);
    mp_options_free(o);
    snprintf(results, sizeof results, "%s/results.tsv", out2);
    CHECK_OK(mp_bench_rows_read(results, 0, &again, &n2, NULL));
    CHECK_EQ_INT(n2, 4);
    for (size_t i = 0; i < n; i++) {
        const mp_bench_row *r = find(again, n2, rows[i].model, rows[i].seed);
        CHECK(r && r->test == rows[i].test && r->val == rows[i].val &&
              r->best_epoch == rows[i].best_epoch && !strcmp(r->split_sum, rows[i].split_sum));
        for (int e = 0; e < r->n_curve; e++)
            CHECK(r->train_loss[e] == rows[i].train_loss[e]);
    }
    char cache2[1300];
    snprintf(cache2, sizeof cache2, "%s/cache", out2);
    CHECK(access(cache2, F_OK) != 0);
    mp_bench_rows_free(again, n2);
    mp_bench_rows_free(rows, n);
}

MP_TEST(bench_cached_features_equal_computed_ones)
{
    const char *csv = small_esol(120);
    char ds[1400];
    snprintf(ds, sizeof ds, "small=%s:regression", csv);
    mp_options *o = bench_opts(ds, "dmpnn-rdkit2d,ffn-morgan-count", "0", tmp("cache"));
    CHECK(o);
    mp_bench_grid g;
    CHECK_OK(mp_bench_grid_make(&g, o));
    mp_bench_prepared a, b, c;
    CHECK_OK(mp_bench_prepare(&a, &g, &g.ds[0], g.cache_dir));   /* computed, stored */
    CHECK(!a.cache_hit);
    CHECK_OK(mp_bench_prepare(&b, &g, &g.ds[0], g.cache_dir));   /* from the cache */
    CHECK(b.cache_hit);
    CHECK_OK(mp_bench_prepare(&c, &g, &g.ds[0], NULL));          /* no cache */
    /* dmpnn-rdkit2d reads Chemprop's rdkit_2d_normalized (200 columns) */
    const mp_molmat *ma = &a.f->mat[MP_MAT_RDKIT2D_NORM], *mb = &b.f->mat[MP_MAT_RDKIT2D_NORM],
                    *mc = &c.f->mat[MP_MAT_RDKIT2D_NORM];
    CHECK(!c.cache_hit && ma->n_cols == 200 && mb->n_cols == 200 && mc->n_cols == 200);
    CHECK(a.f->morgan_start && a.f->scaffold);
    CHECK_EQ_INT(b.f->g.n_atoms, a.f->g.n_atoms);
    CHECK(!memcmp(mb->values, ma->values, sizeof(double) * 200 * 120));
    CHECK(!memcmp(mc->values, ma->values, sizeof(double) * 200 * 120));
    CHECK(!memcmp(b.f->morgan_count, a.f->morgan_count,
                  sizeof(uint32_t) * (size_t)a.f->morgan_start[120]));
    CHECK_EQ_STR(b.split_sum[0], a.split_sum[0]);
    CHECK_EQ_STR(c.split_sum[0], a.split_sum[0]);
    mp_bench_prepared_free(&a);
    mp_bench_prepared_free(&b);
    mp_bench_prepared_free(&c);
    /* a damaged cache file is featurized again and replaced */
    char name[4400] = "";
    DIR *d = opendir(g.cache_dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".mpf"))
            snprintf(name, sizeof name, "%s/%s", g.cache_dir, e->d_name);
    closedir(d);
    CHECK(name[0]);
    CHECK(write_text(name, "MPFEATS but not really"));
    CHECK_OK(mp_bench_prepare(&a, &g, &g.ds[0], g.cache_dir));
    CHECK(!a.cache_hit);
    mp_bench_prepared_free(&a);
    CHECK_OK(mp_bench_prepare(&a, &g, &g.ds[0], g.cache_dir));
    CHECK(a.cache_hit);
    mp_bench_prepared_free(&a);
    mp_bench_grid_free(&g);
    mp_options_free(o);
}

/* The RDKit 2D variants: rdkit_2d_normalized, unscaled, as Chemprop runs
 * them (--features_generator rdkit_2d_normalized --no_features_scaling). */
MP_TEST(bench_rdkit2d_variants_read_normalized_features_unscaled)
{
    const mp_bench_variant *v = mp_bench_variant_find("ffn-rdkit2d");
    CHECK(v && v->no_features_scaling && !strcmp(v->features, "rdkit2d-normalized"));
    v = mp_bench_variant_find("dmpnn-rdkit2d");
    CHECK(v && v->no_features_scaling && !strcmp(v->features, "rdkit2d-normalized"));
    CHECK(!mp_bench_variant_find("ffn-morgan")->no_features_scaling);
    unsigned mask = 0;
    CHECK_OK(mp_feature_set_parse("rdkit2d-normalized", &mask));
    CHECK_EQ_INT(mask, MP_FEAT_RDKIT2D_NORM);
    CHECK_EQ_INT(mp_feature_set_dim(mask, 43, 0), 200);
    char name[64];
    mp_feature_set_name(MP_FEAT_MORGAN | MP_FEAT_RDKIT2D_NORM, name, sizeof name);
    CHECK_EQ_STR(name, "morgan,rdkit2d-normalized");

    const char *csv = small_esol(120);
    CHECK(csv);
    char ds[1400];
    snprintf(ds, sizeof ds, "small=%s:regression", csv);
    const char *out = tmp("norm");
    mp_options *o = bench_opts(ds, "ffn-rdkit2d", "0", out);
    CHECK(o);
    /* the vector a run reads is the normalized matrix, NaN read as 0 */
    mp_bench_grid g;
    CHECK_OK(mp_bench_grid_make(&g, o));
    CHECK_EQ_INT(g.features, MP_FEAT_RDKIT2D_NORM);
    mp_bench_prepared p;
    CHECK_OK(mp_bench_prepare(&p, &g, &g.ds[0], NULL));
    const mp_molmat *mm = &p.f->mat[MP_MAT_RDKIT2D_NORM];
    CHECK_EQ_INT(mm->n_cols, 200);
    double row[200];
    int32_t mols[1];
    int in01 = 1;
    for (int32_t m = 0; m < 120; m++) {
        if (!p.f->g.valid[m])
            continue;
        mols[0] = m;
        mp_feature_set_fill(MP_FEAT_RDKIT2D_NORM, p.f, mols, 1, row);
        for (int j = 0; j < 200; j++) {
            double x = mm->values[(size_t)m * 200 + (size_t)j];
            CHECK(row[j] == (isnan(x) ? 0.0 : x));
            in01 &= row[j] >= 0.0 && row[j] <= 1.0;
        }
    }
    CHECK(in01);   /* CDF values (the one exception, column 0, is 0/1 too) */
    mp_bench_prepared_free(&p);
    mp_bench_grid_free(&g);
    /* the grid's row is mp_train's without feature scaling, not with it */
    mp_summary *s;
    CHECK_OK(mp_run_bench(o, NULL, &s));
    mp_summary_free(s);
    mp_options_free(o);
    char results[1300];
    snprintf(results, sizeof results, "%s/results.tsv", out);
    mp_bench_row *rows;
    size_t n;
    CHECK_OK(mp_bench_rows_read(results, 0, &rows, &n, NULL));
    CHECK_EQ_INT(n, 1);
    double val = NAN, val_scaled = NAN;
    double test = train_alone_scaled(csv, MP_MODEL_FFN, MP_FEAT_RDKIT2D_NORM, 1, 0, &val);
    double scaled = train_alone_scaled(csv, MP_MODEL_FFN, MP_FEAT_RDKIT2D_NORM, 0, 0,
                                       &val_scaled);
    CHECK_MSG(rows[0].test == test && rows[0].val == val, "bench %.17g, alone %.17g",
              rows[0].test, test);
    CHECK_MSG(test != scaled, "scaling made no difference (%.17g)", test);
    mp_bench_rows_free(rows, n);
}

MP_TEST(bench_exports_splits_for_other_tools)
{
    const char *out = tmp("export");
    char dir[1300];
    snprintf(dir, sizeof dir, "%s/splits", out);
    mp_options *o = bench_opts("freesolv", "ffn-morgan", "0,3", out);
    CHECK(o);
    CHECK_OK(mp_options_set(o, "export-splits", dir));
    mp_summary *s;
    CHECK_OK(mp_run_bench(o, NULL, &s));
    mp_summary_free(s);
    mp_options_free(o);
    char path[1500], results[1300];
    snprintf(results, sizeof results, "%s/results.tsv", out);
    mp_bench_row *rows;
    size_t n;
    CHECK_OK(mp_bench_rows_read(results, 0, &rows, &n, NULL));
    CHECK_EQ_INT(n, 2);
    for (size_t i = 0; i < n; i++) {
        const mp_bench_row *r = &rows[i];
        snprintf(path, sizeof path, "%s/freesolv/seed%ld/splits.json", dir, r->seed);
        char *text = mp_test_slurp(path, NULL);
        CHECK(text);
        cJSON *j = cJSON_Parse(text);
        mp_free(text);
        CHECK(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1);
        cJSON *sets = cJSON_GetArrayItem(j, 0);
        long sizes[3] = { r->n_train, r->n_val, r->n_test };
        static const char *names[3] = { "train", "val", "test" };
        int seen[642] = { 0 };
        for (int k = 0; k < 3; k++) {
            cJSON *a = cJSON_GetObjectItem(sets, names[k]);
            CHECK(cJSON_IsArray(a) && cJSON_GetArraySize(a) == sizes[k]);
            cJSON *x;
            cJSON_ArrayForEach(x, a) {
                CHECK(x->valueint >= 0 && x->valueint < 642 && !seen[x->valueint]);
                seen[x->valueint] = 1;
            }
            /* the CSV holds the set's original rows, with the header */
            snprintf(path, sizeof path, "%s/freesolv/seed%ld/%s.csv", dir, r->seed, names[k]);
            char *csv = mp_test_slurp(path, NULL);
            CHECK(csv && !strncmp(csv, "smiles,freesolv\n", 16));
            long lines = 0;
            for (char *c = csv; *c; c++)
                lines += *c == '\n';
            mp_free(csv);
            CHECK_EQ_INT(lines, sizes[k] + 1);
        }
        cJSON_Delete(j);
        /* split.tsv's checksum is the row's */
        snprintf(path, sizeof path, "%s/freesolv/seed%ld/split.tsv", dir, r->seed);
        size_t len;
        char *t = mp_test_slurp(path, &len), hex[65];
        CHECK(t);
        CHECK_OK(mp_bench_text_sha256(t, len, hex));
        mp_free(t);
        CHECK(!strncmp(hex, r->split_sum, 16));
    }
    mp_bench_rows_free(rows, n);
    snprintf(path, sizeof path, "%s/freesolv/dataset.tsv", dir);
    char *info = mp_test_slurp(path, NULL);
    CHECK(info && strstr(info, "task_type\tregression\n") && strstr(info, "metric\trmse\n") &&
          strstr(info, "target\tfreesolv\n") && strstr(info, "valid_rows\t642\n"));
    mp_free(info);
    snprintf(path, sizeof path, "%s/freesolv/data.csv", dir);
    char *data = mp_test_slurp(path, NULL);
    long lines = 0;
    for (char *c = data; c && *c; c++)
        lines += *c == '\n';
    mp_free(data);
    CHECK_EQ_INT(lines, 643);
}

/* ===================================================================== */
/* Statistics and compare                                                 */
/* ===================================================================== */

MP_TEST(bench_stats_t_test)
{
    /* Student's t: known two-sided p-values */
    CHECK_NEAR(mp_bench_t_two_sided_p(2.0, 2), 0.18350341907227397, 1e-12, 0);
    CHECK_NEAR(mp_bench_t_two_sided_p(4.302652729911275, 2), 0.05, 1e-9, 0);
    CHECK_NEAR(mp_bench_t_two_sided_p(2.2281388519649385, 10), 0.05, 1e-9, 0);
    CHECK_NEAR(mp_bench_t_two_sided_p(-1.0, 1), 0.5, 1e-12, 0);
    CHECK_NEAR(mp_bench_t_two_sided_p(0.0, 5), 1.0, 1e-12, 0);
    double a[3] = { 1.0, 2.0, 3.5 }, b[3] = { 0.5, 1.0, 2.0 }, t, p;
    /* differences 0.5, 1, 1.5: mean 1, sd 0.5, t = 1 / (0.5 / sqrt 3) */
    mp_bench_paired_t(a, b, 3, &t, &p);
    CHECK_NEAR(t, 2 * sqrt(3.0), 1e-12, 0);
    CHECK_NEAR(p, mp_bench_t_two_sided_p(2 * sqrt(3.0), 2), 1e-15, 0);
    mp_bench_paired_t(a, a, 3, &t, &p);
    CHECK(t == 0 && p == 1);
    mp_bench_paired_t(a, b, 1, &t, &p);
    CHECK(isnan(t) && isnan(p));
    double m, sd;
    size_t used;
    double x[4] = { 1, NAN, 3, 2 };
    mp_bench_mean_std(x, 4, &m, &sd, &used);
    CHECK(m == 2 && used == 3);
    CHECK_NEAR(sd, sqrt(2.0 / 3.0), 1e-15, 0);
    CHECK_EQ_INT(mp_bench_verdict("rmse", 1.0, 2.0, 0.01, 0.05), 1);
    CHECK_EQ_INT(mp_bench_verdict("rmse", 2.0, 1.0, 0.01, 0.05), -1);
    CHECK_EQ_INT(mp_bench_verdict("auc", 0.9, 0.8, 0.01, 0.05), 1);
    CHECK_EQ_INT(mp_bench_verdict("auc", 0.9, 0.8, 0.2, 0.05), 0);
}

/* A results file of `tool` with test scores v[model][seed]. */
static void write_results(const char *path, const char *tool, const char *dataset,
                          const char *metric, const char *const *models, int n_models,
                          const double v[][3], const char *split_sum)
{
    unlink(path);
    int fd;
    if (mp_bench_results_open(path, &fd) != MP_OK)
        return;
    for (int m = 0; m < n_models; m++)
        for (int s = 0; s < 3; s++) {
            double tt[1] = { v[m][s] }, loss[3] = { 1.0 / (s + 1), 0.5 / (s + 1), 0.25 },
                   val[3] = { 0.5, 0.6, 0.7 };
            mp_bench_row r = sample_row(tt, tt, loss, val);
            r.tool = (char *)tool;
            r.dataset = (char *)dataset;
            r.model = (char *)models[m];
            r.metric = (char *)metric;
            r.seed = s;
            r.n_tasks = 1;
            r.test = v[m][s];
            r.n_curve = 3;
            snprintf(r.split_sum, sizeof r.split_sum, "%s%d", split_sum, s);
            mp_bench_results_append(fd, path, &r);
        }
    close(fd);
}

MP_TEST(bench_compare_aligns_runs)
{
    static const char *const models[] = { "dmpnn", "ffn-morgan", "ffn-rdkit2d" };
    /* dmpnn: ours clearly lower error; ffn-morgan: ours clearly higher;
     * ffn-rdkit2d: the same up to noise */
    static const double ours[3][3] = { { 1.0, 1.1, 1.2 }, { 2.0, 2.1, 2.2 }, { 3.0, 3.2, 2.9 } };
    static const double theirs[3][3] = { { 1.5, 1.6, 1.75 }, { 1.5, 1.55, 1.7 }, { 3.1, 3.0, 3.0 } };
    const char *a = tmp("ours.tsv"), *b = tmp("theirs.tsv");
    write_results(a, "molprop", "esol", "rmse", models, 3, ours, "abcdef012345678");
    write_results(b, "chemprop", "esol", "rmse", models, 3, theirs, "abcdef012345678");
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "bench-compare"));
    CHECK_OK(mp_options_set(o, "ours", a));
    CHECK_OK(mp_options_set(o, "theirs", b));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    mp_summary *s;
    mp_status st = mp_run_bench_compare(o, mem, &s);
    fclose(mem);
    CHECK_OK(st);
    CHECK(mp_summary_number(s, "n_compared") == 3);
    CHECK(mp_summary_number(s, "wins") == 1 && mp_summary_number(s, "losses") == 1 &&
          mp_summary_number(s, "ties") == 1);
    CHECK(mp_summary_number(s, "n_split_mismatch") == 0);
    mp_summary_free(s);
    CHECK(strstr(text, "| esol | dmpnn | rmse | 3 | 1.1000 ± 0.0816 | 1.6167 ± 0.1027 | -32.0% |"));
    CHECK(strstr(text, "| win |") && strstr(text, "| loss |") && strstr(text, "| tie |"));
    CHECK(strstr(text, "1 wins, 1 ties, 1 losses"));
    free(text);
    /* other splits are flagged */
    write_results(b, "chemprop", "esol", "rmse", models, 3, theirs, "fffffffffffffff");
    CHECK_OK(mp_run_bench_compare(o, NULL, &s));
    CHECK(mp_summary_number(s, "n_split_mismatch") == 9);
    mp_summary_free(s);
    /* nothing in common */
    write_results(b, "chemprop", "lipo", "rmse", models, 3, theirs, "abcdef012345678");
    CHECK(mp_run_bench_compare(o, NULL, &s) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "share no") != NULL);
    mp_options_free(o);
}
