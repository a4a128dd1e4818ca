/*
 * bench.c - the benchmark loop behind `molprop bench`: train every chosen
 * model on every chosen benchmark dataset with scaffold-balanced splits over
 * several seeds, and write one comparable table (the test score per run in
 * the dataset's paper metric, then mean and spread over seeds).
 */
#include "api/api.h"

#include "api/options.h"
#include "data/registry.h"
#include "run/ensemble.h"
#include "run/trainer.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The model variants of Yang et al. 2019's comparison that molprop trains. */
static const struct {
    const char   *name;
    mp_model_kind kind;
    unsigned      features;
} variants[] = {
    { "dmpnn", MP_MODEL_DMPNN, 0 },
    { "dmpnn-rdkit2d", MP_MODEL_DMPNN, MP_FEAT_RDKIT2D },
    { "ffn-morgan", MP_MODEL_FFN, MP_FEAT_MORGAN },
    { "ffn-morgan-count", MP_MODEL_FFN, MP_FEAT_MORGAN_COUNT },
    { "ffn-rdkit2d", MP_MODEL_FFN, MP_FEAT_RDKIT2D },
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])
#define MAX_LIST 64

/* Splits "a,b,c" (a copy the caller frees) into at most MAX_LIST pieces. */
static int split_list(char *s, char **items)
{
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(s, ",", &save); tok && n < MAX_LIST; tok = strtok_r(NULL, ",", &save))
        items[n++] = tok;
    return n;
}

static const char *metric_of(const mp_dataset_info *info)
{
    if (!strcmp(info->metric, "RMSE")) return "rmse";
    if (!strcmp(info->metric, "MAE")) return "mae";
    if (!strcmp(info->metric, "PRC-AUC")) return "prc-auc";
    return "auc";
}

static void out(FILE *fp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(FILE *fp, const char *fmt, ...)
{
    if (!fp)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(fp, fmt, ap);
    va_end(ap);
    fflush(fp);
}

mp_status mp_run_bench(const mp_options *o, FILE *table, mp_summary **summary)
{
    if (summary)
        *summary = NULL;
    mp_status st = mp_run_check(o, "bench");
    if (st)
        return st;
    mp_bench_args a;
    memset(&a, 0, sizeof a);
    char backend[128];
    if ((st = mp_options_apply(o, &a)) || (st = mp_options_backend(o, backend, sizeof backend)))
        return st;

    mp_registry *reg = NULL;
    if ((st = mp_registry_load(&reg, a.registry)))
        return st;
    char *ds_list = mp_strdup(a.datasets), *model_list = mp_strdup(a.models),
         *seed_list = mp_strdup(a.seeds);
    mp_afile tsv;
    int tsv_open = 0, n_runs = 0;
    char path[4096];
    if (!ds_list || !model_list || !seed_list) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }

    /* Datasets, models and seeds, all checked before any training. */
    const mp_dataset_info *ds[MAX_LIST];
    int n_ds = 0;
    char *items[MAX_LIST];
    if (!strcmp(ds_list, "all")) {
        for (size_t i = 0; i < reg->n && n_ds < MAX_LIST; i++)
            if (reg->items[i].file)
                ds[n_ds++] = &reg->items[i];
    } else {
        int n = split_list(ds_list, items);
        for (int i = 0; i < n; i++) {
            const mp_dataset_info *info = mp_registry_find(reg, items[i]);
            if (!info) {
                char *names = mp_registry_names(reg);
                st = mp_error_set(MP_ERR_ARG, "unknown dataset '%s' (known: %s)", items[i],
                                  names ? names : "?");
                mp_free(names);
                goto done;
            }
            if (!info->file) {
                st = mp_error_set(MP_ERR_ARG, "dataset '%s' has no file available", items[i]);
                goto done;
            }
            ds[n_ds++] = info;
        }
    }
    int var[N_VARIANTS], n_var = 0;
    if (!strcmp(model_list, "all")) {
        for (int v = 0; v < N_VARIANTS; v++)
            var[n_var++] = v;
    } else {
        int n = split_list(model_list, items);
        for (int i = 0; i < n; i++) {
            int v;
            for (v = 0; v < N_VARIANTS; v++)
                if (!strcmp(items[i], variants[v].name))
                    break;
            if (v == N_VARIANTS) {
                st = mp_error_set(MP_ERR_ARG, "unknown model '%s' (known: dmpnn, dmpnn-rdkit2d, "
                                  "ffn-morgan, ffn-morgan-count, ffn-rdkit2d)", items[i]);
                goto done;
            }
            if (n_var < N_VARIANTS)
                var[n_var++] = v;
        }
    }
    long seeds[MAX_LIST];
    int n_seeds = split_list(seed_list, items);
    for (int i = 0; i < n_seeds; i++)
        seeds[i] = strtol(items[i], NULL, 10);   /* checked by the option table */
    if (n_ds == 0 || n_seeds == 0) {
        st = mp_error_set(MP_ERR_ARG, "nothing to run (no dataset or no seed)");
        goto done;
    }
    for (int i = 0; i < n_ds; i++) {
        snprintf(path, sizeof path, "%s/%s", a.data_dir, ds[i]->file);
        if (access(path, R_OK) != 0) {
            st = mp_error_set(MP_ERR_IO, "%s not found: run  molprop data fetch %s  first", path,
                              ds[i]->name);
            goto done;
        }
    }
    if (a.out_path) {
        if ((st = mp_afile_open(&tsv, a.out_path)))
            goto done;
        tsv_open = 1;
        fprintf(tsv.fp, "dataset\tmodel\tseed\tmetric\ttest\tval\ttrain_seconds\n");
    }

    out(table, "%-16s %-17s %-8s %s\n", "dataset", "model", "metric",
        "test score per seed -> mean ± std");
    for (int i = 0; i < n_ds; i++) {
        for (int k = 0; k < n_var; k++) {
            const char *metric = metric_of(ds[i]);
            double score[MAX_LIST], sum = 0;
            out(table, "%-16s %-17s %-8s", ds[i]->name, variants[var[k]].name, metric);
            for (int s = 0; s < n_seeds; s++) {
                mp_train_opts t = mp_train_opts_default();
                snprintf(path, sizeof path, "%s/%s", a.data_dir, ds[i]->file);
                t.data_path = path;
                t.task = (int)ds[i]->task_type;
                t.metric = metric;
                t.model = variants[var[k]].kind;
                t.features = variants[var[k]].features;
                t.split.type = a.split;
                t.seed = (uint64_t)seeds[s];
                t.epochs = a.epochs;
                t.batch_size = a.batch_size;
                t.threads = a.threads;
                t.backend = backend;
                t.registry = a.registry;
                t.quiet = 1;
                mp_train_result r;
                if ((st = mp_train(&t, &r))) {
                    out(table, "\n");
                    goto done;
                }
                score[s] = r.test_mean;
                sum += r.test_mean;
                n_runs++;
                out(table, " %.4f", r.test_mean);
                if (tsv_open)
                    fprintf(tsv.fp, "%s\t%s\t%ld\t%s\t%.6g\t%.6g\t%.3f\n", ds[i]->name,
                            variants[var[k]].name, seeds[s], metric, r.test_mean, r.val_mean,
                            r.train_seconds);
                mp_train_result_free(&r);
            }
            double mean = sum / n_seeds, var2 = 0;
            for (int s = 0; s < n_seeds; s++)
                var2 += (score[s] - mean) * (score[s] - mean);
            out(table, "  -> %.4f ± %.4f\n", mean, sqrt(var2 / n_seeds));
        }
    }
    if (tsv_open) {
        tsv_open = 0;
        if ((st = mp_afile_commit(&tsv)))
            goto done;
    }
    mp_summary *s = NULL;
    if (!(st = mp_summary_new(&s)) && (st = mp_summary_put_number(s, "n_runs", n_runs)))
        mp_summary_free(s);
    else if (!st)
        mp_summary_hand_over(s, summary);
done:
    if (tsv_open)
        mp_afile_abort(&tsv);
    mp_free(ds_list);
    mp_free(model_list);
    mp_free(seed_list);
    mp_registry_free(reg);
    return st;
}
