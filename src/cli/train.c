/*
 * train.c - `molprop train`: option parsing over mp_train (models/trainer.h).
 */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <string.h>

static void train_usage(FILE *fp)
{
    fprintf(fp,
"usage: molprop train --data F --save-dir D [options]\n"
"\n"
"Trains a D-MPNN (default) or an FFN on molecule features, Chemprop v1's way,\n"
"and writes D/model.mpm and D/metrics.json.\n"
"\n"
"data:\n"
"  --data F                 CSV or gzipped CSV with a SMILES column and targets\n"
"  --smiles-column C        default: the column named 'smiles', else the first\n"
"  --target-columns a,b     default: every other column\n"
"  --ignore-columns a,b     columns left out of the default targets\n"
"  --task T                 regression | classification (default: from the\n"
"                           dataset registry, else classification if every\n"
"                           label is 0 or 1)\n"
"  --metric M               rmse | mae | mse | r2 | auc | prc-auc | accuracy\n"
"                           (default rmse / auc)\n"
"split:\n"
"  --split S                random | scaffold_balanced | cv   (default random)\n"
"  --split-sizes a,b,c      train,val,test fractions (default 0.8,0.1,0.1)\n"
"  --folds K                folds for --split cv (default 5)\n"
"  --seed N                 split seed; ensemble member i uses N+i (default 0)\n"
"model:\n"
"  --model M                dmpnn | ffn (default dmpnn)\n"
"  --features F             molecule features: morgan, morgan-count, rdkit2d,\n"
"                           comma-separated (ffn: its input; dmpnn: joined to\n"
"                           the readout); default none\n"
"  --atom-layout L          v1 (133, default) | v2 (72) | organic (44)\n"
"  --hidden N               hidden size (default 300)\n"
"  --depth N                message-passing steps (default 3)\n"
"  --dropout X              dropout probability (default 0)\n"
"  --ffn-layers N           layers of the FFN head (default 2)\n"
"  --ffn-hidden N           hidden size of the FFN head (default = --hidden)\n"
"  --aggregation A          mean | sum | norm (default mean)\n"
"  --ensemble-size N        models that differ only in their seeds (default 1)\n"
"training:\n"
"  --epochs N               (default 30)\n"
"  --batch-size N           (default 50)\n"
"  --warmup-epochs X        Noam warm-up (default 2)\n"
"  --init-lr X --max-lr X --final-lr X   (default 1e-4, 1e-3, 1e-4)\n"
"  --threads N              CPU threads (default: all cores)\n"
"  --device cpu|gpu         (default cpu)\n"
"  --precision P            fp32 | tf32 | bf16 on the GPU (default fp32)\n"
"  --resident on|off        keep each epoch on the device and run its steps\n"
"                           there (default: on with --device gpu)\n"
"  --graph on|off           replay a captured CUDA graph per step (default\n"
"                           on when resident on the GPU)\n"
"output:\n"
"  --save-dir D             where model.mpm and metrics.json go (required)\n"
"  --quiet                  no progress output\n");
}

enum {
    O_DATA = 256, O_SMILES, O_TARGETS, O_IGNORE, O_TASK, O_METRIC, O_SPLIT, O_SIZES, O_FOLDS,
    O_SEED, O_MODEL, O_FEATURES, O_LAYOUT, O_HIDDEN, O_DEPTH, O_DROPOUT, O_FFN_LAYERS,
    O_FFN_HIDDEN, O_AGG, O_ENSEMBLE, O_EPOCHS, O_BATCH, O_WARMUP, O_INIT_LR, O_MAX_LR,
    O_FINAL_LR, O_THREADS, O_DEVICE, O_PRECISION, O_RESIDENT, O_GRAPH, O_SAVE, O_QUIET, O_HELP
};

static const struct option train_options[] = {
    { "data", required_argument, 0, O_DATA },
    { "smiles-column", required_argument, 0, O_SMILES },
    { "target-columns", required_argument, 0, O_TARGETS },
    { "ignore-columns", required_argument, 0, O_IGNORE },
    { "task", required_argument, 0, O_TASK },
    { "metric", required_argument, 0, O_METRIC },
    { "split", required_argument, 0, O_SPLIT },
    { "split-sizes", required_argument, 0, O_SIZES },
    { "folds", required_argument, 0, O_FOLDS },
    { "seed", required_argument, 0, O_SEED },
    { "model", required_argument, 0, O_MODEL },
    { "features", required_argument, 0, O_FEATURES },
    { "atom-layout", required_argument, 0, O_LAYOUT },
    { "hidden", required_argument, 0, O_HIDDEN },
    { "depth", required_argument, 0, O_DEPTH },
    { "dropout", required_argument, 0, O_DROPOUT },
    { "ffn-layers", required_argument, 0, O_FFN_LAYERS },
    { "ffn-hidden", required_argument, 0, O_FFN_HIDDEN },
    { "aggregation", required_argument, 0, O_AGG },
    { "ensemble-size", required_argument, 0, O_ENSEMBLE },
    { "epochs", required_argument, 0, O_EPOCHS },
    { "batch-size", required_argument, 0, O_BATCH },
    { "warmup-epochs", required_argument, 0, O_WARMUP },
    { "init-lr", required_argument, 0, O_INIT_LR },
    { "max-lr", required_argument, 0, O_MAX_LR },
    { "final-lr", required_argument, 0, O_FINAL_LR },
    { "threads", required_argument, 0, O_THREADS },
    { "device", required_argument, 0, O_DEVICE },
    { "precision", required_argument, 0, O_PRECISION },
    { "resident", required_argument, 0, O_RESIDENT },
    { "graph", required_argument, 0, O_GRAPH },
    { "save-dir", required_argument, 0, O_SAVE },
    { "quiet", no_argument, 0, O_QUIET },
    { "help", no_argument, 0, O_HELP },
    { 0, 0, 0, 0 },
};

int cli_train(int argc, char **argv)
{
    const char *V = "train";
    mp_train_opts o = mp_train_opts_default();
    const char *device = "cpu", *precision = NULL;
    long iv;
    double dv;
    int c;
    o.split.n_folds = 5;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", train_options, NULL)) != -1) {
        mp_status st = MP_OK;
        switch (c) {
        case O_DATA: o.data_path = optarg; break;
        case O_SMILES: o.columns.smiles_column = optarg; break;
        case O_TARGETS: o.columns.target_columns = optarg; break;
        case O_IGNORE: o.columns.ignore_columns = optarg; break;
        case O_TASK: {
            mp_task_type t;
            if ((st = mp_task_type_parse(optarg, &t)))
                return cli_fail_status(V, st);
            o.task = (int)t;
            break;
        }
        case O_METRIC: o.metric = optarg; break;
        case O_SPLIT:
            if ((st = mp_split_type_parse(optarg, &o.split.type)))
                return cli_fail_status(V, st);
            break;
        case O_SIZES:
            if ((st = mp_split_sizes_parse(optarg, o.split.sizes)))
                return cli_fail_status(V, st);
            break;
        case O_FOLDS:
            if (cli_parse_int(V, "--folds", optarg, 2, 1000000, &iv)) return 1;
            o.split.n_folds = (int)iv;
            break;
        case O_SEED:
            if (cli_parse_int(V, "--seed", optarg, 0, 2147483647L, &iv)) return 1;
            o.seed = (uint64_t)iv;
            break;
        case O_MODEL:
            if (!strcmp(optarg, "dmpnn")) o.model = MP_MODEL_DMPNN;
            else if (!strcmp(optarg, "ffn")) o.model = MP_MODEL_FFN;
            else return cli_fail(V, "--model expects dmpnn or ffn, got '%s'", optarg);
            break;
        case O_FEATURES:
            if ((st = mp_feature_set_parse(optarg, &o.features)))
                return cli_fail_status(V, st);
            break;
        case O_LAYOUT:
            if ((st = mp_atom_layout_parse(optarg, &o.layout)))
                return cli_fail_status(V, st);
            break;
        case O_HIDDEN:
            if (cli_parse_int(V, "--hidden", optarg, 1, 100000, &iv)) return 1;
            o.hidden = (int)iv;
            break;
        case O_DEPTH:
            if (cli_parse_int(V, "--depth", optarg, 1, 100, &iv)) return 1;
            o.depth = (int)iv;
            break;
        case O_DROPOUT:
            if (cli_parse_double(V, "--dropout", optarg, 0, 0.99, &dv)) return 1;
            o.dropout = dv;
            break;
        case O_FFN_LAYERS:
            if (cli_parse_int(V, "--ffn-layers", optarg, 1, 100, &iv)) return 1;
            o.ffn_layers = (int)iv;
            break;
        case O_FFN_HIDDEN:
            if (cli_parse_int(V, "--ffn-hidden", optarg, 1, 100000, &iv)) return 1;
            o.ffn_hidden = (int)iv;
            break;
        case O_AGG:
            if (!strcmp(optarg, "mean")) o.aggregation = MP_AGG_MEAN;
            else if (!strcmp(optarg, "sum")) o.aggregation = MP_AGG_SUM;
            else if (!strcmp(optarg, "norm")) o.aggregation = MP_AGG_NORM;
            else return cli_fail(V, "--aggregation expects mean, sum or norm, got '%s'", optarg);
            break;
        case O_ENSEMBLE:
            if (cli_parse_int(V, "--ensemble-size", optarg, 1, 256, &iv)) return 1;
            o.ensemble_size = (int)iv;
            break;
        case O_EPOCHS:
            if (cli_parse_int(V, "--epochs", optarg, 1, 100000, &iv)) return 1;
            o.epochs = (int)iv;
            break;
        case O_BATCH:
            if (cli_parse_int(V, "--batch-size", optarg, 1, 10000000, &iv)) return 1;
            o.batch_size = (int)iv;
            break;
        case O_WARMUP:
            if (cli_parse_double(V, "--warmup-epochs", optarg, 0, 1e6, &dv)) return 1;
            o.warmup_epochs = dv;
            break;
        case O_INIT_LR:
            if (cli_parse_double(V, "--init-lr", optarg, 1e-12, 10, &dv)) return 1;
            o.init_lr = dv;
            break;
        case O_MAX_LR:
            if (cli_parse_double(V, "--max-lr", optarg, 1e-12, 10, &dv)) return 1;
            o.max_lr = dv;
            break;
        case O_FINAL_LR:
            if (cli_parse_double(V, "--final-lr", optarg, 1e-12, 10, &dv)) return 1;
            o.final_lr = dv;
            break;
        case O_THREADS:
            if (cli_parse_int(V, "--threads", optarg, 1, 1024, &iv)) return 1;
            o.threads = (int)iv;
            break;
        case O_DEVICE: device = optarg; break;
        case O_PRECISION: precision = optarg; break;
        case O_RESIDENT:
        case O_GRAPH:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
                return cli_fail(V, "--%s expects on or off, got '%s'",
                                c == O_RESIDENT ? "resident" : "graph", optarg);
            *(c == O_RESIDENT ? &o.resident : &o.graph) = strcmp(optarg, "on") == 0;
            break;
        case O_SAVE: o.save_dir = optarg; break;
        case O_QUIET: o.quiet = 1; break;
        case O_HELP: train_usage(stdout); return 0;
        default:
            return cli_fail(V, "unknown or incomplete option '%s' (see molprop train --help)",
                            argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_fail(V, "unexpected argument '%s' (see molprop train --help)", argv[optind]);
    if (!o.data_path)
        return cli_fail(V, "--data is required (see molprop train --help)");
    if (!o.save_dir)
        return cli_fail(V, "--save-dir is required (see molprop train --help)");
    char backend[64];
    if (cli_backend_name(V, device, precision, backend, sizeof backend))
        return 1;
    o.backend = backend;

    mp_train_result r;
    mp_status st = mp_train(&o, &r);
    if (st)
        return cli_fail_status(V, st);
    printf("test %s = %.6g (val %.6g), %zu train / %zu val / %zu test molecules, "
           "train %.2f s (%.0f molecules/s)\n", mp_metric_name(r.metric), r.test_mean,
           r.val_mean, r.n_train, r.n_val, r.n_test, r.train_seconds, r.train_mols_per_second);
    printf("model: %s/model.mpm  metrics: %s/metrics.json\n", o.save_dir, o.save_dir);
    mp_train_result_free(&r);
    return 0;
}
