/*
 * featurize.c - `molprop featurize`: a CSV of SMILES into the binary feature
 * cache (.mpf) and/or the reference dump (the TSV files of the Chemprop v1
 * fixtures).  Thin glue over src/data/dataset.h and src/featurize/featurize.h.
 */
#include "cli.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VERB "featurize"
#define MAX_REPORTED 20   /* invalid rows listed one by one; the rest counted */

static const char usage[] =
    "usage: molprop featurize --data FILE [--out FILE.mpf] [--dump DIR] [options]\n"
    "\n"
    "Featurizes every SMILES of a CSV (plain or gzipped) exactly as Chemprop v1\n"
    "does: atom and bond features of the molecular graph, Morgan fingerprints\n"
    "(radius 2, 2048 bits, as bits and counts), RDKit 2D descriptors and, on\n"
    "request, Bemis-Murcko scaffolds.  Writes a binary cache that training reads\n"
    "without RDKit, and/or a dump of tab-separated files.  SMILES that RDKit\n"
    "rejects keep their row (marked invalid) and are reported on stderr with\n"
    "their line number and RDKit's reason.\n"
    "\n"
    "  --data FILE            input CSV with a header line\n"
    "  --out FILE.mpf         write the feature cache here\n"
    "  --dump DIR             write molecules/atoms/bonds/morgan/descriptors.tsv here\n"
    "  --gz                   gzip the dump's files (.tsv.gz)\n"
    "  --atom-layout L        v1 (133 features, default), v2 (72) or organic (44)\n"
    "  --no-morgan            skip the Morgan fingerprints\n"
    "  --no-descriptors       skip the RDKit 2D descriptors (the slowest part)\n"
    "  --scaffolds            compute Bemis-Murcko scaffolds too\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  --smiles-column C      the SMILES column (default: 'smiles', else the first)\n"
    "\n"
    "At least one of --out and --dump is needed.  Outputs appear only when\n"
    "complete (written to a temporary name, then renamed).\n";

typedef struct {
    const char *data, *out, *dump, *smiles_column;
    int gz, threads;
    mp_featurize_opts opts;
} fz_args;

/* 0 to go on, 1 on error (printed), 2 after --help. */
static int parse_args(int argc, char **argv, fz_args *a)
{
    memset(a, 0, sizeof *a);
    a->opts.layout = MP_ATOM_V1;
    a->opts.morgan = 1;
    a->opts.descriptors = 1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(s, "--data") || !strcmp(s, "--out") || !strcmp(s, "--dump") ||
                    !strcmp(s, "--atom-layout") || !strcmp(s, "--threads") ||
                    !strcmp(s, "--smiles-column");
        if (takes && !v)
            return cli_fail(VERB, "%s needs a value", s);
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(usage, stdout);
            return 2;
        } else if (!strcmp(s, "--data")) {
            a->data = v;
        } else if (!strcmp(s, "--out")) {
            a->out = v;
        } else if (!strcmp(s, "--dump")) {
            a->dump = v;
        } else if (!strcmp(s, "--smiles-column")) {
            a->smiles_column = v;
        } else if (!strcmp(s, "--atom-layout")) {
            if (mp_atom_layout_parse(v, &a->opts.layout) != MP_OK)
                return cli_fail(VERB, "--atom-layout: %s", mp_error_message());
        } else if (!strcmp(s, "--threads")) {
            long n;
            if (cli_parse_int(VERB, s, v, 1, 1024, &n))
                return 1;
            a->threads = (int)n;
        } else if (!strcmp(s, "--gz")) {
            a->gz = 1;
        } else if (!strcmp(s, "--no-morgan")) {
            a->opts.morgan = 0;
        } else if (!strcmp(s, "--no-descriptors")) {
            a->opts.descriptors = 0;
        } else if (!strcmp(s, "--scaffolds")) {
            a->opts.scaffolds = 1;
        } else {
            return cli_fail(VERB, "unknown option '%s' (molprop featurize --help)", s);
        }
        if (takes)
            i++;
    }
    if (!a->data)
        return cli_fail(VERB, "--data FILE is required (molprop featurize --help)");
    if (!a->out && !a->dump)
        return cli_fail(VERB, "nothing to write: give --out FILE.mpf and/or --dump DIR");
    if (a->gz && !a->dump)
        return cli_fail(VERB, "--gz applies to --dump, which is not given");
    a->opts.n_threads = a->threads;
    return 0;
}

/* Fails early (before the long part) when --out's directory is not writable. */
static int check_out_dir(const char *out)
{
    char *copy = mp_strdup(out);
    if (!copy)
        return cli_fail(VERB, "out of memory");
    const char *dir = dirname(copy);
    struct stat sb;
    const char *why = stat(dir, &sb) != 0  ? "does not exist"
                      : !S_ISDIR(sb.st_mode) ? "is not a directory"
                      : access(dir, W_OK)    ? "is not writable"
                                             : NULL;
    int rc = why ? cli_fail(VERB, "cannot write %s: %s %s", out, dir, why) : 0;
    mp_free(copy);
    return rc;
}

static void report_invalid(const mp_dataset *d, const mp_features *f, int32_t n_invalid)
{
    int32_t shown = 0;
    for (int32_t i = 0; i < f->g.n_mols && shown < MAX_REPORTED; i++) {
        if (f->g.valid[i])
            continue;
        fprintf(stderr, "molprop featurize: %s:%zu: invalid SMILES '%s': %s\n", d->path, d->line[i],
                d->smiles[i], f->error[i] ? f->error[i] : "rejected by RDKit");
        shown++;
    }
    if (n_invalid > shown)
        fprintf(stderr, "molprop featurize: ... and %d more invalid rows (%d in all)\n",
                (int)(n_invalid - shown), (int)n_invalid);
}

int cli_featurize(int argc, char **argv)
{
    fz_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 2 ? 0 : 1;
    if (a.out && check_out_dir(a.out))
        return 1;

    mp_column_spec spec = { .smiles_column = a.smiles_column, .no_targets = 1 };
    mp_dataset *d = NULL;
    mp_status st = mp_dataset_load(&d, a.data, &spec);
    if (st)
        return cli_fail_status(VERB, st);
    if (d->n_rows > INT32_MAX) {
        mp_dataset_free(d);
        return cli_fail(VERB, "%s: too many rows for one feature store", a.data);
    }

    int32_t n = (int32_t)d->n_rows;
    mp_features *f = NULL;
    double t0 = mp_time_now();
    st = mp_featurize(&f, (const char *const *)d->smiles, n, &a.opts);
    double secs = mp_time_now() - t0;
    if (st) {
        mp_dataset_free(d);
        return cli_fail_status(VERB, st);
    }
    int32_t n_valid = 0;
    for (int32_t i = 0; i < n; i++)
        n_valid += f->g.valid[i];
    report_invalid(d, f, n - n_valid);

    if (a.dump && (st = mp_features_dump(f, (const char *const *)d->smiles, a.dump, a.gz))) {
        rc = cli_fail_status(VERB, st);
        goto out;
    }
    if (a.out && (st = mp_features_save(f, a.out))) {
        rc = cli_fail_status(VERB, st);
        goto out;
    }
    printf("featurized %s (%s atoms, %d threads)\n", d->path, mp_atom_layout_name(a.opts.layout),
           a.opts.n_threads > 0 ? a.opts.n_threads : mp_threads_get());
    printf("  molecules    %d\n", (int)n);
    printf("  valid        %d\n", (int)n_valid);
    printf("  invalid      %d\n", (int)(n - n_valid));
    printf("  atoms        %d\n", (int)f->g.n_atoms);
    printf("  bonds        %d\n", (int)(f->g.n_edges / 2));
    printf("  seconds      %.3f\n", secs);
    printf("  molecules/s  %.0f\n", secs > 0 ? n / secs : 0.0);
    if (a.out)
        printf("  cache        %s\n", a.out);
    if (a.dump)
        printf("  dump         %s/ (%s)\n", a.dump, a.gz ? ".tsv.gz" : ".tsv");
    rc = 0;
out:
    mp_features_free(f);
    mp_dataset_free(d);
    return rc;
}
