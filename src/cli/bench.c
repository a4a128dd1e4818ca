/*
 * bench.c - `molprop bench`: the bench options from argv and --config, then
 * the library's benchmark loop (mp_run_bench), which prints its table here.
 */
#include "cli.h"

static const char usage[] =
"usage: molprop bench [--datasets all|a,b] [options]\n"
"\n"
"Trains each model on each benchmark dataset (data/datasets.tsv; fetch them\n"
"first with molprop data fetch) with scaffold_balanced splits, one run per\n"
"seed, and prints and writes a table of test scores in each dataset's paper\n"
"metric (RMSE, MAE, ROC-AUC, PRC-AUC): per run, then mean and std (ddof 0)\n"
"over seeds.\n";

int cli_bench(int argc, char **argv)
{
    const char *V = "bench";
    mp_options *o;
    int rc = cli_options(V, usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    mp_status st = mp_run_bench(o, stdout, NULL);
    mp_options_free(o);
    return st ? cli_fail_status(V, st) : 0;
}
