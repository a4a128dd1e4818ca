/*
 * fuzz_cli.c - the command line's option parser (src/cli/main.c:
 * cli_options, argv onto the library's option table) of every verb: the
 * first byte picks the verb, the rest is argv, one argument per line
 * (at most 64).  The verbs themselves are stubs here (nothing runs); what
 * is checked is that any argv ends in options or a message, that options
 * which parsed print as JSON, and that positional arguments are argv's own
 * strings.  --config is left out (a file the fuzzer names could be
 * /dev/zero): fuzz_config covers that reader.
 */
#include "fuzz.h"
#include "molprop.h"

#define main molprop_cli_main
#include "../../src/cli/main.c"
#undef main

/* The verbs behind the dispatch table; never called by the harness. */
int cli_data(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_featurize(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_split(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_train(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_predict(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_eval(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_bench(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_hpopt(int argc, char **argv) { (void)argc, (void)argv; return 0; }
int cli_fingerprint(int argc, char **argv) { (void)argc, (void)argv; return 0; }

int mp_fuzz_cli(const uint8_t *data, size_t size)
{
    static const char *const names[] = { "train", "predict", "eval", "featurize",
                                          "split", "bench", "data", "hpopt",
                                          "fingerprint" };
    if (size < 1 || size > 8192)
        return 0;
    const char *verb = names[data[0] % (sizeof names / sizeof names[0])];
    char *text = malloc(size);   /* the arguments, NUL-terminated in place */
    char *argv[66];
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    int argc = 0;
    argv[argc++] = (char *)verb;
    for (char *p = text; argc < 65;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(p, "config")) {   /* see above */
            free(text);
            return 0;
        }
        argv[argc++] = p;
        if (!nl)
            break;
        p = nl + 1;
    }
    argv[argc] = NULL;
    long live = mp_alloc_live();
    char *pos[66];
    int n_pos = 0;
    mp_options *o = NULL;
    FILE *keep = stdout;   /* --help prints; keep the fuzzer's output short */
    stdout = fopen("/dev/null", "w");
    int rc = cli_options(verb, "usage", argc, argv, &o, !strcmp(verb, "data") ? pos : NULL,
                         &n_pos);
    if (stdout)
        fclose(stdout);
    stdout = keep;
    MP_FUZZ_CHECK(rc >= 0 && rc <= 2, "cli_options returned %d", rc);
    MP_FUZZ_CHECK((rc == 0) == (o != NULL), "rc %d with options %p", rc, (void *)o);
    for (int i = 0; i < n_pos; i++) {
        int found = 0;
        for (int k = 1; k < argc; k++)
            found |= pos[i] == argv[k];
        MP_FUZZ_CHECK(found, "positional argument %d is not one of argv's", i);
    }
    if (o) {
        char *json = mp_options_json(o);
        MP_FUZZ_CHECK(json != NULL, "no JSON for options that parsed");
        mp_free(json);
        (void)mp_options_missing(o);
        mp_options_free(o);
    }
    mp_error_clear();
    free(text);
    MP_FUZZ_CHECK(mp_alloc_live() == live, "%ld blocks leaked", mp_alloc_live() - live);
    return 0;
}

MP_FUZZ_ENTRY(mp_fuzz_cli)
