/*
 * predict.c - `molprop predict` (streaming prediction with a saved model)
 * and `molprop eval` (its metrics on a labelled file).
 */
#include "cli.h"

#include <string.h>

static const char predict_usage[] =
"usage: molprop predict --model M.mpm --data F --out P.csv [options]\n"
"\n"
"Writes P.csv: the SMILES column of F, then one column per task (the ensemble\n"
"mean; probabilities for classification).  Rows whose SMILES is invalid keep\n"
"their place with empty predictions and are reported on stderr.  The input is\n"
"streamed, so files of any length fit in memory.\n"
"\n"
"Several processes: --shard I/N predicts the I-th of N byte ranges of F into\n"
"P.csv.shard-I-of-N (a job array); `molprop predict --merge --out P.csv` joins\n"
"the parts in order into the file one process would have written.  Under\n"
"mpirun (a build with MPI) every rank predicts its range and rank 0 joins.\n";

static const char merge_usage[] =
"usage: molprop predict --merge --out P.csv [--remove-parts]\n"
"\n"
"Joins P.csv.shard-0-of-N ... P.csv.shard-(N-1)-of-N, written by\n"
"molprop predict --shard I/N --out P.csv, in order into P.csv (atomically),\n"
"after checking that every part is there, complete and of one run.\n";

static const char eval_usage[] =
"usage: molprop eval --model M.mpm --data F [options]\n"
"\n"
"Metrics of a saved model on a labelled file whose columns are named like the\n"
"model's tasks: per task and the mean over tasks.\n";

/* Options of `verb`, with the required ones checked; 0, 1 (error), 2 (help). */
static int options(const char *verb, const char *usage, int argc, char **argv, mp_options **o)
{
    int rc = cli_options(verb, usage, argc, argv, o, NULL, NULL);
    if (rc)
        return rc;
    const char *missing = mp_options_missing(*o);
    if (missing) {
        mp_options_free(*o);
        *o = NULL;
        return cli_fail(verb, "--%s is required (see molprop %s --help)", missing, verb);
    }
    return 0;
}

/* `molprop predict --merge`: its own option set ("predict-merge"). */
static int cli_predict_merge(int argc, char **argv)
{
    const char *V = "predict";
    mp_options *o;
    int rc = cli_options("predict-merge", merge_usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    const char *missing = mp_options_missing(o);
    if (missing) {
        mp_options_free(o);
        return cli_fail(V, "--merge: --%s is required (see molprop predict --merge --help)",
                        missing);
    }
    mp_summary *s;
    mp_status st = mp_run_predict_merge(o, &s);
    if (st) {
        mp_options_free(o);
        return cli_fail_status(V, st);
    }
    if (strcmp(mp_options_get(o, "quiet"), "true") != 0)
        fprintf(stderr, "merged %.0f rows (%.0f invalid) -> %s\n",
                mp_summary_number(s, "n_rows"), mp_summary_number(s, "n_invalid"),
                mp_summary_text(s, "out"));
    mp_summary_free(s);
    mp_options_free(o);
    return 0;
}

int cli_predict(int argc, char **argv)
{
    const char *V = "predict";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--merge") || !strncmp(argv[i], "--merge=", 8))
            return cli_predict_merge(argc, argv);
    mp_options *o;
    int rc = options(V, predict_usage, argc, argv, &o);
    if (rc)
        return rc == 2 ? 0 : 1;
    mp_summary *s;
    mp_status st = mp_run_predict(o, &s);
    if (st) {
        mp_options_free(o);
        return cli_fail_status(V, st);
    }
    /* under mpirun rank 0 speaks for all */
    if (strcmp(mp_options_get(o, "quiet"), "true") != 0 && mp_summary_number(s, "rank") == 0)
        fprintf(stderr, "predicted %.0f rows (%.0f invalid) in %.2f s (%.0f molecules/s) -> %s\n",
                mp_summary_number(s, "n_rows"), mp_summary_number(s, "n_invalid"),
                mp_summary_number(s, "seconds"), mp_summary_number(s, "mols_per_second"),
                mp_summary_text(s, "out"));
    mp_summary_free(s);
    mp_options_free(o);
    return 0;
}

int cli_eval(int argc, char **argv)
{
    const char *V = "eval";
    mp_options *o;
    int rc = options(V, eval_usage, argc, argv, &o);
    if (rc)
        return rc == 2 ? 0 : 1;
    mp_summary *s;
    mp_status st = mp_run_eval(o, &s);
    mp_options_free(o);
    if (st)
        return cli_fail_status(V, st);
    printf("%.0f molecules (%.0f invalid left out), %.0f task(s)\n", mp_summary_number(s, "n_rows"),
           mp_summary_number(s, "n_invalid"), mp_summary_number(s, "n_tasks"));
    /* "rmse,mae,r2": one line per metric, in that order */
    const char *names = mp_summary_text(s, "metrics");
    while (names && *names) {
        const char *comma = strchr(names, ',');
        char name[64];
        size_t len = comma ? (size_t)(comma - names) : strlen(names);
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), names);
        printf("%-10s %.6g\n", name, mp_summary_number(s, name));
        names = comma ? comma + 1 : NULL;
    }
    mp_summary_free(s);
    return 0;
}
