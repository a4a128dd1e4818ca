/*
 * bench.c - `molprop bench`: the benchmark grid (mp_run_bench), and its two
 * companions `molprop bench compare OURS THEIRS` (mp_run_bench_compare) and
 * `molprop bench report RESULTS --out DIR` (mp_run_bench_report).  The
 * options come from argv and --config; Ctrl-C and SIGTERM end a grid at
 * once, leaving its finished rows and no temporary file.
 */
#include "cli.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
"usage: molprop bench [--config configs/bench/paper.ini] [options]\n"
"       molprop bench compare OURS.tsv THEIRS.tsv [options]\n"
"       molprop bench report RESULTS.tsv [--out DIR] [options]\n"
"\n"
"Trains each model on each dataset with scaffold_balanced splits, one run per\n"
"seed, and scores it in the dataset's paper metric (RMSE, MAE, ROC-AUC,\n"
"PRC-AUC).  Each dataset is featurized once (cached in --cache-dir for later\n"
"runs); each finished run is appended at once to DIR/results.tsv of --out, so\n"
"the same command run again resumes where it stopped.  A line per finished run,\n"
"then the table of mean ± std (ddof 0) over seeds.  'molprop bench compare\n"
"--help' and 'molprop bench report --help' for the other two.\n";

static const char usage_compare[] =
"usage: molprop bench compare OURS THEIRS [options]\n"
"\n"
"Aligns two results files (or bench --out folders) by dataset, model and seed\n"
"and prints, per dataset and model: each tool's mean ± std, the difference\n"
"(relative for errors, absolute for AUCs), a paired t-test over the seeds and\n"
"a verdict for OURS (win, tie, loss); then the counts.  bench/chemprop/ writes\n"
"Chemprop's results in this format, on splits from bench --export-splits.\n";

static const char usage_report[] =
"usage: molprop bench report RESULTS [--out DIR] [options]\n"
"\n"
"Writes DIR/report.md and DIR/report.html: the table of mean ± std, a figure\n"
"per dataset (with --reference, the other tool's bars beside ours), a summary\n"
"figure (each model relative to the D-MPNN) and learning curves, in PNG and\n"
"SVG, drawn by gnuplot (their .gp scripts and .dat data are kept beside them).\n";

static void on_signal(int sig)
{
    static const char msg[] = "\nmolprop bench: interrupted; finished runs are kept, "
                              "run the same command to resume\n";
    mp_bench_signal_cleanup();
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + sig);
}

static int run_grid(int argc, char **argv)
{
    const char *V = "bench";
    mp_options *o;
    int rc = cli_options(V, usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    mp_summary *s = NULL;
    mp_status st = mp_run_bench(o, stdout, &s);
    mp_options_free(o);
    if (st)
        return cli_fail_status(V, st);
    printf("%.0f runs trained, %.0f already done, in %.1f s; results in %s\n",
           mp_summary_number(s, "n_runs"), mp_summary_number(s, "n_skipped"),
           mp_summary_number(s, "seconds"), mp_summary_text(s, "results"));
    mp_summary_free(s);
    return 0;
}

/* The options of `verb` with the positional arguments as keys[0..n). */
static int options_with_files(const char *verb, const char *text, int argc, char **argv,
                              const char *const *keys, int n_keys, mp_options **o)
{
    char *pos[16];
    int n_pos = 0;
    if (argc > 16)
        return cli_fail(verb, "too many arguments");
    int rc = cli_options(verb, text, argc, argv, o, pos, &n_pos);
    if (rc)
        return rc;
    if (n_pos > n_keys) {
        mp_options_free(*o);
        return cli_fail(verb, "unexpected argument '%s' (see molprop %s --help)", pos[n_keys],
                        verb);
    }
    for (int i = 0; i < n_pos; i++) {
        mp_status st = mp_options_set(*o, keys[i], pos[i]);
        if (st) {
            mp_options_free(*o);
            return cli_fail_status(verb, st);
        }
    }
    const char *missing = mp_options_missing(*o);
    if (missing) {
        mp_options_free(*o);
        return cli_fail(verb, "%s is required (see molprop %s --help)", missing, verb);
    }
    return 0;
}

static int run_compare(int argc, char **argv)
{
    const char *V = "bench-compare";
    static const char *const keys[] = { "ours", "theirs" };
    mp_options *o;
    int rc = options_with_files(V, usage_compare, argc, argv, keys, 2, &o);
    if (rc)
        return rc == 2 ? 0 : 1;
    mp_summary *s = NULL;
    mp_status st = mp_run_bench_compare(o, stdout, &s);
    mp_options_free(o);
    mp_summary_free(s);
    return st ? cli_fail_status(V, st) : 0;
}

static int run_report(int argc, char **argv)
{
    const char *V = "bench-report";
    static const char *const keys[] = { "results" };
    mp_options *o;
    int rc = options_with_files(V, usage_report, argc, argv, keys, 1, &o);
    if (rc)
        return rc == 2 ? 0 : 1;
    mp_summary *s = NULL;
    mp_status st = mp_run_bench_report(o, &s);
    mp_options_free(o);
    if (st)
        return cli_fail_status(V, st);
    printf("report: %s (%.0f datasets, %.0f figures)\n", mp_summary_text(s, "report"),
           mp_summary_number(s, "n_datasets"), mp_summary_number(s, "n_figures"));
    mp_summary_free(s);
    return 0;
}

int cli_bench(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "compare"))
        return run_compare(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "report"))
        return run_report(argc - 1, argv + 1);
    return run_grid(argc, argv);
}
