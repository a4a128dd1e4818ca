/*
 * main.c - the molprop command: dispatches to one verb per file.
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} verbs[] = {
    { "train",     cli_train,     "train a model (FFN or D-MPNN) on a CSV file" },
    { "predict",   cli_predict,   "predict properties for a CSV of SMILES with a saved model" },
    { "eval",      cli_eval,      "metrics of a saved model on a labelled CSV" },
    { "featurize", cli_featurize, "featurize a CSV into a binary cache and/or reference dump" },
    { "split",     cli_split,     "split a CSV into train/val/test files (random, scaffold_balanced, cv)" },
    { "data",      cli_data,      "list, fetch and verify the benchmark datasets" },
    { "bench",     cli_bench,     "train and compare models on the benchmark datasets" },
};

static void usage(FILE *fp)
{
    fprintf(fp, "molprop %s - molecular property prediction (FFN and D-MPNN)\n\n"
                "usage: molprop <command> [options]   (molprop <command> --help for more)\n\n",
            MP_VERSION);
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(fp, "  %-10s %s\n", verbs[i].name, verbs[i].what);
    fprintf(fp, "  %-10s %s\n", "version", "print versions of molprop and its libraries");
}

int cli_fail(const char *verb, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "molprop %s: ", verb);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

int cli_fail_status(const char *verb, mp_status st)
{
    const char *m = mp_error_message();
    return cli_fail(verb, "%s", m && *m ? m : mp_status_name(st));
}

int cli_parse_int(const char *verb, const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return cli_fail(verb, "%s expects an integer in [%ld, %ld], got '%s'", opt, lo, hi, s);
    *out = v;
    return 0;
}

int cli_parse_double(const char *verb, const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return cli_fail(verb, "%s expects a number in [%g, %g], got '%s'", opt, lo, hi, s);
    *out = v;
    return 0;
}

int cli_backend_name(const char *verb, const char *device, const char *precision,
                     char *out, size_t n)
{
    if (!strcmp(device, "cpu")) {
        if (precision && strcmp(precision, "fp32") != 0)
            return cli_fail(verb, "--precision %s needs --device gpu (the CPU computes in fp32)",
                            precision);
        snprintf(out, n, "cpu");
        return 0;
    }
    if (!strcmp(device, "gpu") || !strcmp(device, "cuda")) {
        const char *p = precision ? precision : "fp32";
        if (strcmp(p, "fp32") && strcmp(p, "tf32") && strcmp(p, "bf16"))
            return cli_fail(verb, "--precision expects fp32, tf32 or bf16, got '%s'", p);
        snprintf(out, n, "cuda:%s", p);
        return 0;
    }
    return cli_fail(verb, "--device expects cpu or gpu, got '%s'", device);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *v = argv[1];
    if (!strcmp(v, "-h") || !strcmp(v, "--help") || !strcmp(v, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(v, "version") || !strcmp(v, "--version")) {
        printf("molprop %s (RDKit %s)\n", MP_VERSION, mp_rdkit_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(v, verbs[i].name))
            return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "molprop: unknown command '%s'\n\n", v);
    usage(stderr);
    return 1;
}
