/*
 * fingerprint.c - `molprop fingerprint`: a saved model's learned molecule
 * vectors for a CSV of SMILES (mp_run_fingerprint).
 */
#include "cli.h"

#include <string.h>

static const char usage[] =
"usage: molprop fingerprint --model M.mpm --data F --out F.npy|F.csv [options]\n"
"\n"
"Writes the learned vector of every molecule of F, one row per input row in\n"
"order: --layer encoder (default) is what the FFN head reads (the D-MPNN\n"
"readout joined to any molecule features), --layer ffn-last the output of the\n"
"head's last hidden layer.  F.npy: a float32 array (invalid SMILES: NaN rows);\n"
"otherwise a CSV with the SMILES column and fp_0, fp_1, ... (invalid: empty).\n"
"Streamed, like predict, so files of any length fit in memory.\n";

int cli_fingerprint(int argc, char **argv)
{
    const char *V = "fingerprint";
    mp_options *o;
    int rc = cli_options(V, usage, argc, argv, &o, NULL, NULL);
    if (rc)
        return rc == 2 ? 0 : 1;
    const char *missing = mp_options_missing(o);
    if (missing) {
        mp_options_free(o);
        return cli_fail(V, "--%s is required (see molprop %s --help)", missing, V);
    }
    mp_summary *s;
    mp_status st = mp_run_fingerprint(o, &s);
    if (st) {
        mp_options_free(o);
        return cli_fail_status(V, st);
    }
    if (strcmp(mp_options_get(o, "quiet"), "true") != 0)
        fprintf(stderr, "fingerprints of %.0f rows (%.0f invalid) in %.2f s (%.0f molecules/s) "
                "-> %s\n", mp_summary_number(s, "n_rows"), mp_summary_number(s, "n_invalid"),
                mp_summary_number(s, "seconds"), mp_summary_number(s, "mols_per_second"),
                mp_summary_text(s, "out"));
    mp_summary_free(s);
    mp_options_free(o);
    return 0;
}
