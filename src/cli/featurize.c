/*
 * featurize.c - `molprop featurize`: a CSV of SMILES into the binary feature
 * cache (.mpf) and/or the reference dump (the TSV files of the Chemprop v1
 * fixtures), through mp_run_featurize.
 */
#include "cli.h"

#include <stdint.h>

#define VERB "featurize"
#define MAX_REPORTED 20   /* invalid rows listed one by one; the rest counted */

static const char usage[] =
    "usage: molprop featurize --data FILE [--out FILE.mpf] [--dump DIR] [options]\n"
    "\n"
    "Featurizes every SMILES of a CSV (plain or gzipped) exactly as Chemprop v1\n"
    "does: atom and bond features of the molecular graph, Morgan fingerprints\n"
    "(radius 2, 2048 bits, as bits and counts), RDKit's 43 2D descriptors and,\n"
    "on request, Chemprop's descriptor sets and v2 featurizers (--features\n"
    "rdkit2d,rdkit2d-normalized,...) and Bemis-Murcko scaffolds.  Writes a binary cache that training reads\n"
    "without RDKit, and/or a dump of tab-separated files.  SMILES that RDKit\n"
    "rejects keep their row (marked invalid) and are reported on stderr with\n"
    "their line number and RDKit's reason.  At least one of --out and --dump is\n"
    "needed.  Outputs appear only when complete (written to a temporary name,\n"
    "then renamed).\n";

int cli_featurize(int argc, char **argv)
{
    mp_options *o;
    int rc = cli_options(VERB, usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    const char *missing = mp_options_missing(o);
    if (missing) {
        mp_options_free(o);
        return cli_fail(VERB, "--%s FILE is required (molprop featurize --help)", missing);
    }
    mp_summary *s;
    mp_status st = mp_run_featurize(o, &s);
    mp_options_free(o);
    if (st)
        return cli_fail_status(VERB, st);
    const char *data = mp_summary_text(s, "data"), *out = mp_summary_text(s, "out"),
               *dump = mp_summary_text(s, "dump");
    cli_report_invalid(VERB, s, data, MAX_REPORTED, ": ", "");
    double n = mp_summary_number(s, "n_mols"), secs = mp_summary_number(s, "seconds");
    printf("featurized %s (%s atoms, %.0f threads)\n", data, mp_summary_text(s, "layout"),
           mp_summary_number(s, "threads"));
    printf("  molecules    %.0f\n", n);
    printf("  valid        %.0f\n", mp_summary_number(s, "n_valid"));
    printf("  invalid      %.0f\n", mp_summary_number(s, "n_invalid"));
    printf("  atoms        %.0f\n", mp_summary_number(s, "n_atoms"));
    printf("  bonds        %.0f\n", mp_summary_number(s, "n_bonds"));
    printf("  seconds      %.3f\n", secs);
    printf("  molecules/s  %.0f\n", secs > 0 ? n / secs : 0.0);
    if (out)
        printf("  cache        %s\n", out);
    if (dump)
        printf("  dump         %s/ (%s)\n", dump, mp_summary_number(s, "gz") ? ".tsv.gz" : ".tsv");
    mp_summary_free(s);
    return 0;
}
