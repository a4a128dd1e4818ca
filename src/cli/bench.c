/*
 * bench.c - `molprop bench`: train every chosen model on every chosen
 * benchmark dataset with scaffold-balanced splits over several seeds, and
 * write one comparable table (mean and spread of the test score per dataset
 * and model, each dataset scored with its paper metric).
 */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
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

static void bench_usage(FILE *fp)
{
    fprintf(fp,
"usage: molprop bench [--datasets all|a,b] [options]\n"
"\n"
"Trains each model on each benchmark dataset (data/datasets.tsv; fetch them\n"
"first with molprop data fetch) with scaffold_balanced splits, one run per\n"
"seed, and prints and writes a table of test scores in each dataset's paper\n"
"metric (RMSE, MAE, ROC-AUC, PRC-AUC): per run, then mean and std (ddof 0)\n"
"over seeds.\n"
"\n"
"  --datasets L         'all' (every dataset with a file) or names, comma-\n"
"                       separated (default: esol)\n"
"  --models L           dmpnn, dmpnn-rdkit2d, ffn-morgan, ffn-morgan-count,\n"
"                       ffn-rdkit2d, or 'all' (default: dmpnn)\n"
"  --seeds L            comma-separated split seeds (default: 0,1,2)\n"
"  --split S            scaffold_balanced (default) or random\n"
"  --epochs N           (default 30)   --batch-size N (default 50)\n"
"  --data-dir D         where the dataset files are (default: data)\n"
"  --out F              write the per-run table as TSV (atomically)\n"
"  --threads N  --device cpu|gpu  --precision fp32|tf32|bf16\n");
}

/* Splits "a,b,c" into at most MAX_LIST pieces (in place). */
static int split_list(char *s, char **items)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
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

int cli_bench(int argc, char **argv)
{
    const char *V = "bench";
    enum { O_DATASETS = 256, O_MODELS, O_SEEDS, O_SPLIT, O_EPOCHS, O_BATCH, O_DIR, O_OUT,
           O_THREADS, O_DEVICE, O_PRECISION, O_HELP };
    static const struct option opts[] = {
        { "datasets", required_argument, 0, O_DATASETS },
        { "models", required_argument, 0, O_MODELS },
        { "seeds", required_argument, 0, O_SEEDS },
        { "split", required_argument, 0, O_SPLIT },
        { "epochs", required_argument, 0, O_EPOCHS },
        { "batch-size", required_argument, 0, O_BATCH },
        { "data-dir", required_argument, 0, O_DIR },
        { "out", required_argument, 0, O_OUT },
        { "threads", required_argument, 0, O_THREADS },
        { "device", required_argument, 0, O_DEVICE },
        { "precision", required_argument, 0, O_PRECISION },
        { "help", no_argument, 0, O_HELP },
        { 0, 0, 0, 0 },
    };
    char datasets_arg[4096] = "esol", models_arg[1024] = "dmpnn", seeds_arg[1024] = "0,1,2";
    const char *data_dir = "data", *out_path = NULL, *device = "cpu", *precision = NULL;
    mp_split_type split = MP_SPLIT_SCAFFOLD_BALANCED;
    long epochs = 30, batch = 50, threads = 0;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_DATASETS: snprintf(datasets_arg, sizeof datasets_arg, "%s", optarg); break;
        case O_MODELS: snprintf(models_arg, sizeof models_arg, "%s", optarg); break;
        case O_SEEDS: snprintf(seeds_arg, sizeof seeds_arg, "%s", optarg); break;
        case O_SPLIT:
            if (mp_split_type_parse(optarg, &split) ||
                (split != MP_SPLIT_SCAFFOLD_BALANCED && split != MP_SPLIT_RANDOM))
                return cli_fail(V, "--split expects scaffold_balanced or random, got '%s'", optarg);
            break;
        case O_EPOCHS: if (cli_parse_int(V, "--epochs", optarg, 1, 100000, &epochs)) return 1; break;
        case O_BATCH: if (cli_parse_int(V, "--batch-size", optarg, 1, 10000000, &batch)) return 1; break;
        case O_DIR: data_dir = optarg; break;
        case O_OUT: out_path = optarg; break;
        case O_THREADS: if (cli_parse_int(V, "--threads", optarg, 1, 1024, &threads)) return 1; break;
        case O_DEVICE: device = optarg; break;
        case O_PRECISION: precision = optarg; break;
        case O_HELP: bench_usage(stdout); return 0;
        default:
            return cli_fail(V, "unknown or incomplete option '%s' (see molprop bench --help)",
                            argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_fail(V, "unexpected argument '%s' (see molprop bench --help)", argv[optind]);
    char backend[64];
    if (cli_backend_name(V, device, precision, backend, sizeof backend))
        return 1;

    mp_registry *reg = NULL;
    mp_status st = mp_registry_load(&reg, NULL);
    if (st)
        return cli_fail_status(V, st);
    int rc = 1;
    mp_afile out;
    int out_open = 0;

    /* Datasets, models and seeds, all checked before any training. */
    const mp_dataset_info *ds[MAX_LIST];
    int n_ds = 0;
    char *items[MAX_LIST];
    if (!strcmp(datasets_arg, "all")) {
        for (size_t i = 0; i < reg->n && n_ds < MAX_LIST; i++)
            if (reg->items[i].file)
                ds[n_ds++] = &reg->items[i];
    } else {
        int n = split_list(datasets_arg, items);
        for (int i = 0; i < n; i++) {
            const mp_dataset_info *info = mp_registry_find(reg, items[i]);
            if (!info) {
                char *names = mp_registry_names(reg);
                cli_fail(V, "unknown dataset '%s' (known: %s)", items[i], names ? names : "?");
                mp_free(names);
                goto done;
            }
            if (!info->file) {
                cli_fail(V, "dataset '%s' has no file available", items[i]);
                goto done;
            }
            ds[n_ds++] = info;
        }
    }
    int var[N_VARIANTS], n_var = 0;
    if (!strcmp(models_arg, "all")) {
        for (int v = 0; v < N_VARIANTS; v++)
            var[n_var++] = v;
    } else {
        int n = split_list(models_arg, items);
        for (int i = 0; i < n; i++) {
            int v;
            for (v = 0; v < N_VARIANTS; v++)
                if (!strcmp(items[i], variants[v].name))
                    break;
            if (v == N_VARIANTS) {
                cli_fail(V, "unknown model '%s' (known: dmpnn, dmpnn-rdkit2d, ffn-morgan, "
                         "ffn-morgan-count, ffn-rdkit2d)", items[i]);
                goto done;
            }
            if (n_var < N_VARIANTS)
                var[n_var++] = v;
        }
    }
    long seeds[MAX_LIST];
    int n_seeds = split_list(seeds_arg, items);
    for (int i = 0; i < n_seeds; i++)
        if (cli_parse_int(V, "--seeds", items[i], 0, 2147483647L, &seeds[i]))
            goto done;
    if (n_ds == 0 || n_seeds == 0) {
        cli_fail(V, "nothing to run (no dataset or no seed)");
        goto done;
    }
    char path[4096];
    for (int i = 0; i < n_ds; i++) {
        snprintf(path, sizeof path, "%s/%s", data_dir, ds[i]->file);
        if (access(path, R_OK) != 0) {
            cli_fail(V, "%s not found: run  molprop data fetch %s  first", path, ds[i]->name);
            goto done;
        }
    }
    if (out_path) {
        if ((st = mp_afile_open(&out, out_path))) {
            cli_fail_status(V, st);
            goto done;
        }
        out_open = 1;
        fprintf(out.fp, "dataset\tmodel\tseed\tmetric\ttest\tval\ttrain_seconds\n");
    }

    printf("%-16s %-17s %-8s %s\n", "dataset", "model", "metric", "test score per seed -> mean ± std");
    for (int i = 0; i < n_ds; i++) {
        for (int k = 0; k < n_var; k++) {
            const char *metric = metric_of(ds[i]);
            double score[MAX_LIST], sum = 0;
            printf("%-16s %-17s %-8s", ds[i]->name, variants[var[k]].name, metric);
            fflush(stdout);
            for (int s = 0; s < n_seeds; s++) {
                mp_train_opts o = mp_train_opts_default();
                snprintf(path, sizeof path, "%s/%s", data_dir, ds[i]->file);
                o.data_path = path;
                o.task = (int)ds[i]->task_type;
                o.metric = metric;
                o.model = variants[var[k]].kind;
                o.features = variants[var[k]].features;
                o.split.type = split;
                o.seed = (uint64_t)seeds[s];
                o.epochs = (int)epochs;
                o.batch_size = (int)batch;
                o.threads = (int)threads;
                o.backend = backend;
                o.quiet = 1;
                mp_train_result r;
                if ((st = mp_train(&o, &r))) {
                    printf("\n");
                    cli_fail_status(V, st);
                    goto done;
                }
                score[s] = r.test_mean;
                sum += r.test_mean;
                printf(" %.4f", r.test_mean);
                fflush(stdout);
                if (out_open)
                    fprintf(out.fp, "%s\t%s\t%ld\t%s\t%.6g\t%.6g\t%.3f\n", ds[i]->name,
                            variants[var[k]].name, seeds[s], metric, r.test_mean, r.val_mean,
                            r.train_seconds);
                mp_train_result_free(&r);
            }
            double mean = sum / n_seeds, var2 = 0;
            for (int s = 0; s < n_seeds; s++)
                var2 += (score[s] - mean) * (score[s] - mean);
            printf("  -> %.4f ± %.4f\n", mean, sqrt(var2 / n_seeds));
        }
    }
    if (out_open) {
        out_open = 0;
        if ((st = mp_afile_commit(&out))) {
            cli_fail_status(V, st);
            goto done;
        }
    }
    rc = 0;
done:
    if (out_open)
        mp_afile_abort(&out);
    mp_registry_free(reg);
    return rc;
}
