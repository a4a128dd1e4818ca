/*
 * split.c - `molprop split`: cut a CSV into train.csv, val.csv and test.csv
 * exactly as Chemprop v1 splits it (random, scaffold_balanced, cv,
 * cv-no-test), so any tool can train and test on the same molecules.  The
 * pipeline is mp_run_split; this file reports what it did.
 */
#include "cli.h"

#include <stdint.h>

static const char *VERB = "split";

static const char usage[] =
    "usage: molprop split --data FILE --out DIR [options]\n"
    "\n"
    "Splits FILE (CSV, optionally gzipped) into DIR/train.csv, DIR/val.csv and\n"
    "DIR/test.csv with the header and every column of the original rows, in file\n"
    "order.  The sets are Chemprop v1's for the same seed and sizes.  Rows whose\n"
    "SMILES RDKit rejects are left out of all three and reported on stderr.\n";

int cli_split(int argc, char **argv)
{
    mp_options *o;
    int rc = cli_options(VERB, usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    const char *missing = mp_options_missing(o);
    if (missing) {
        mp_options_free(o);
        return cli_fail(VERB, "--%s is required (see molprop split --help)", missing);
    }
    mp_summary *s;
    mp_status st = mp_run_split(o, &s);
    mp_options_free(o);
    if (st)
        return cli_fail_status(VERB, st);
    const char *data = mp_summary_text(s, "data");
    cli_report_invalid(VERB, s, data, SIZE_MAX, " (", "), left out");
    double n_invalid = mp_summary_number(s, "n_invalid");
    printf("%s split (seed %s) of %s: train %.0f, val %.0f, test %.0f", mp_summary_text(s, "split"),
           mp_summary_text(s, "seed"), data, mp_summary_number(s, "n_train"),
           mp_summary_number(s, "n_val"), mp_summary_number(s, "n_test"));
    if (n_invalid > 0)
        printf("; %.0f invalid row%s left out", n_invalid, n_invalid == 1 ? "" : "s");
    printf("\n");
    mp_summary_free(s);
    return 0;
}
