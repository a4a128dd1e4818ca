/*
 * hpopt.c - `molprop hpopt`: its own options and train's (the base of every
 * trial) from argv and --config, mp_run_hpopt, and its summary.
 */
#include "cli.h"

static const char usage[] =
"usage: molprop hpopt --data F --out DIR [--trials N] [--space F] [--method random|tpe]\n"
"                     [train options ...]\n"
"       molprop hpopt --config FILE.ini [options]   ([hpopt] and [train] sections)\n"
"\n"
"Searches the train options of the space file (configs/hpopt/chemprop.ini:\n"
"Chemprop's space) for the best validation score, by random search or the\n"
"tree-structured Parzen estimator.  Every other option is a train option that\n"
"every trial shares.  DIR/trials.jsonl gets a line per finished trial; a rerun\n"
"of the same command continues the search, one with more --trials extends it.\n"
"The best trial's options are written to DIR/best.ini:\n"
"  molprop train --config DIR/best.ini\n"
"--halving stops weak trials early: all are trained to the first rung\n"
"(epochs/eta^k epochs), the best 1/eta of each rung go on to the next, the\n"
"last ones to --epochs; the trials file records each rung and each stop.\n";

int cli_hpopt(int argc, char **argv)
{
    const char *V = "hpopt";
    static const char *const tables[2] = { "hpopt", "train" };
    mp_options *o[2];
    int rc = cli_options_sets(V, usage, argc, argv, tables, 2, o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    const char *missing = mp_options_missing(o[0]);
    if (!missing && !mp_options_get(o[1], "data"))
        missing = "data";
    if (missing) {
        mp_options_free(o[0]);
        mp_options_free(o[1]);
        return cli_fail(V, "--%s is required (see molprop hpopt --help)", missing);
    }
    mp_summary *s;
    mp_status st = mp_run_hpopt(o[0], o[1], &s);
    mp_options_free(o[0]);
    mp_options_free(o[1]);
    if (st)
        return cli_fail_status(V, st);
    char stopped[64] = "";
    if (mp_summary_number(s, "stopped") > 0)
        snprintf(stopped, sizeof stopped, ", %.0f stopped early",
                 mp_summary_number(s, "stopped"));
    printf("best: trial %.0f of %.0f, val %s = %.6g (test %.6g); %.0f failed%s\n"
           "trials: %s  best config: %s\n", mp_summary_number(s, "best_trial"),
           mp_summary_number(s, "trials"), mp_summary_text(s, "metric"),
           mp_summary_number(s, "best_val"), mp_summary_number(s, "best_test"),
           mp_summary_number(s, "failed"), stopped, mp_summary_text(s, "trials_file"),
           mp_summary_text(s, "best_config"));
    mp_summary_free(s);
    return 0;
}
