/*
 * predict.c - `molprop predict`: streaming prediction with a saved model.
 */
#include "cli.h"

#include <getopt.h>
#include <string.h>

static void predict_usage(FILE *fp)
{
    fprintf(fp,
"usage: molprop predict --model M.mpm --data F --out P.csv [options]\n"
"\n"
"Writes P.csv: the SMILES column of F, then one column per task (the ensemble\n"
"mean; probabilities for classification).  Rows whose SMILES is invalid keep\n"
"their place with empty predictions and are reported on stderr.  The input is\n"
"streamed, so files of any length fit in memory.\n"
"\n"
"  --model M            a model file written by molprop train\n"
"  --data F             CSV or gzipped CSV\n"
"  --out P              output CSV (written atomically)\n"
"  --smiles-column C    default: the column named 'smiles', else the first\n"
"  --uncertainty        add <task>_std columns: the spread over ensemble members\n"
"  --threads N          CPU threads (default: all cores)\n"
"  --device cpu|gpu     (default cpu)\n"
"  --precision P        fp32 | tf32 | bf16 on the GPU (default fp32)\n"
"  --quiet              no summary line\n");
}

static void eval_usage(FILE *fp)
{
    fprintf(fp,
"usage: molprop eval --model M.mpm --data F [options]\n"
"\n"
"Metrics of a saved model on a labelled file whose columns are named like the\n"
"model's tasks: per task and the mean over tasks.\n"
"\n"
"  --model M            a model file written by molprop train\n"
"  --data F             CSV or gzipped CSV with the SMILES and the task columns\n"
"  --smiles-column C    default: the column named 'smiles', else the first\n"
"  --metric M           one metric (default: rmse, mae, r2 for regression;\n"
"                       auc, prc-auc, accuracy for classification)\n"
"  --threads N          CPU threads (default: all cores)\n"
"  --device cpu|gpu     (default cpu)\n"
"  --precision P        fp32 | tf32 | bf16 on the GPU (default fp32)\n");
}

enum { O_MODEL = 256, O_DATA, O_OUT, O_SMILES, O_UNC, O_THREADS, O_DEVICE, O_PRECISION,
       O_QUIET, O_METRIC, O_HELP };

static const struct option options[] = {
    { "model", required_argument, 0, O_MODEL },
    { "data", required_argument, 0, O_DATA },
    { "out", required_argument, 0, O_OUT },
    { "smiles-column", required_argument, 0, O_SMILES },
    { "uncertainty", no_argument, 0, O_UNC },
    { "threads", required_argument, 0, O_THREADS },
    { "device", required_argument, 0, O_DEVICE },
    { "precision", required_argument, 0, O_PRECISION },
    { "quiet", no_argument, 0, O_QUIET },
    { "metric", required_argument, 0, O_METRIC },
    { "help", no_argument, 0, O_HELP },
    { 0, 0, 0, 0 },
};

typedef struct {
    const char *model, *data, *out, *smiles, *device, *precision, *metric;
    int uncertainty, quiet, help;
    long threads;
} args;

/* Shared option loop for predict and eval; `allowed` lists the options the
 * verb takes. */
static int parse(const char *V, int argc, char **argv, const int *allowed, args *a)
{
    memset(a, 0, sizeof *a);
    a->device = "cpu";
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        int ok = 0;
        for (const int *p = allowed; *p; p++)
            ok |= *p == c;
        if (!ok)
            return cli_fail(V, "unknown or incomplete option '%s' (see molprop %s --help)",
                            argv[optind - 1], V);
        switch (c) {
        case O_MODEL: a->model = optarg; break;
        case O_DATA: a->data = optarg; break;
        case O_OUT: a->out = optarg; break;
        case O_SMILES: a->smiles = optarg; break;
        case O_UNC: a->uncertainty = 1; break;
        case O_THREADS:
            if (cli_parse_int(V, "--threads", optarg, 1, 1024, &a->threads)) return 1;
            break;
        case O_DEVICE: a->device = optarg; break;
        case O_PRECISION: a->precision = optarg; break;
        case O_QUIET: a->quiet = 1; break;
        case O_METRIC: a->metric = optarg; break;
        case O_HELP: a->help = 1; break;
        }
    }
    if (optind < argc)
        return cli_fail(V, "unexpected argument '%s' (see molprop %s --help)", argv[optind], V);
    return 0;
}

int cli_predict(int argc, char **argv)
{
    const char *V = "predict";
    static const int allowed[] = { O_MODEL, O_DATA, O_OUT, O_SMILES, O_UNC, O_THREADS,
                                   O_DEVICE, O_PRECISION, O_QUIET, O_HELP, 0 };
    args a;
    if (parse(V, argc, argv, allowed, &a))
        return 1;
    if (a.help) {
        predict_usage(stdout);
        return 0;
    }
    if (!a.model || !a.data || !a.out)
        return cli_fail(V, "--model, --data and --out are required (see molprop predict --help)");
    char backend[64];
    if (cli_backend_name(V, a.device, a.precision, backend, sizeof backend))
        return 1;
    mp_predict_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = a.model;
    o.data_path = a.data;
    o.out_path = a.out;
    o.columns.smiles_column = a.smiles;
    o.uncertainty = a.uncertainty;
    o.backend = backend;
    o.threads = (int)a.threads;
    o.quiet = a.quiet;
    mp_predict_stats s;
    mp_status st = mp_predict_file(&o, &s);
    if (st)
        return cli_fail_status(V, st);
    if (!a.quiet)
        fprintf(stderr, "predicted %zu rows (%zu invalid) in %.2f s (%.0f molecules/s) -> %s\n",
                s.n_rows, s.n_invalid, s.seconds, s.mols_per_second, a.out);
    return 0;
}

int cli_eval(int argc, char **argv)
{
    const char *V = "eval";
    static const int allowed[] = { O_MODEL, O_DATA, O_SMILES, O_THREADS, O_DEVICE,
                                   O_PRECISION, O_METRIC, O_HELP, 0 };
    args a;
    if (parse(V, argc, argv, allowed, &a))
        return 1;
    if (a.help) {
        eval_usage(stdout);
        return 0;
    }
    if (!a.model || !a.data)
        return cli_fail(V, "--model and --data are required (see molprop eval --help)");
    char backend[64];
    if (cli_backend_name(V, a.device, a.precision, backend, sizeof backend))
        return 1;
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.smiles_column = a.smiles;
    mp_eval_result r;
    mp_status st = mp_eval_file(a.model, a.data, &spec, a.metric, backend, (int)a.threads, &r);
    if (st)
        return cli_fail_status(V, st);
    printf("%zu molecules (%zu invalid left out), %zu task(s)\n", r.n_rows, r.n_invalid,
           r.n_tasks);
    for (int m = 0; m < r.n_metrics; m++)
        printf("%-10s %.6g\n", mp_metric_name(r.metrics[m]), r.mean[m]);
    mp_eval_result_free(&r);
    return 0;
}
