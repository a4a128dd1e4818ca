/*
 * train.c - `molprop train`: the train options (library table) from argv and
 * --config, mp_run_train, and its one-line summary.
 */
#include "cli.h"

static const char usage[] =
"usage: molprop train --data F --save-dir D [options]\n"
"       molprop train --config FILE.ini [options]\n"
"       molprop train --resume D [options]\n"
"\n"
"Trains a D-MPNN (default) or an FFN on molecule features, Chemprop v1's way,\n"
"and writes D/model.mpm, D/metrics.json (scores, timings and the whole\n"
"configuration) and D/split.tsv.  With --checkpoint-every N it keeps\n"
"D/checkpoint.mpc, the run's whole state, and --resume D continues a run that\n"
"was stopped (a signal, a crash) to the model an uninterrupted run makes;\n"
"--stop-after K ends it after epoch K of --epochs, resumable the same way.\n";

int cli_train(int argc, char **argv)
{
    const char *V = "train";
    mp_options *o;
    int rc = cli_options(V, usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    const char *missing = mp_options_missing(o);
    if (missing && !mp_options_is_set(o, "resume")) {   /* --resume D alone: D's options */
        mp_options_free(o);
        return cli_fail(V, "--%s is required (see molprop train --help)", missing);
    }
    mp_summary *s;
    mp_status st = mp_run_train(o, &s);
    if (st) {
        mp_options_free(o);
        return cli_fail_status(V, st);
    }
    const char *dir = mp_summary_text(s, "save_dir");
    if (mp_summary_number(s, "rank") != 0) {   /* under mpirun rank 0 speaks for all */
        mp_summary_free(s);
        mp_options_free(o);
        return 0;
    }
    printf("test %s = %.6g (val %.6g), %.0f train / %.0f val / %.0f test molecules, "
           "train %.2f s (%.0f molecules/s)\n", mp_summary_text(s, "metric"),
           mp_summary_number(s, "test"), mp_summary_number(s, "val"),
           mp_summary_number(s, "n_train"), mp_summary_number(s, "n_val"),
           mp_summary_number(s, "n_test"), mp_summary_number(s, "train_seconds"),
           mp_summary_number(s, "train_mols_per_second"));
    printf("model: %s/model.mpm  metrics: %s/metrics.json\n", dir, dir);
    if (mp_summary_number(s, "stopped_epoch") > 0)
        printf("stopped after epoch %.0f (--stop-after): %s/checkpoint.mpc holds the run, "
               "molprop train --resume %s continues it\n", mp_summary_number(s, "stopped_epoch"),
               dir, dir);
    mp_summary_free(s);
    mp_options_free(o);
    return 0;
}
