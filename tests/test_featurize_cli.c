/*
 * test_featurize_cli.c - `molprop featurize` end to end through the binary in
 * $MOLPROP_BIN: the cache it writes equals the library's result, the dump
 * works without --out, invalid rows are reported with their file line and
 * reason (the first 20, then a count), and bad input fails with exit 1 and no
 * output.
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char *tmp(const char *rel)
{
    static char bufs[8][1200];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/cli/%s", mp_test_tmpdir(), rel);
    return b;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Runs "$MOLPROP_BIN featurize ARGS 2>&1"; exit status, output in out. */
static int run(const char *args, char *out, size_t cap)
{
    return mp_test_cli(out, cap, "featurize %s", args);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

#define NEED_BIN()                                                                     \
    do {                                                                               \
        if (!getenv("MOLPROP_BIN"))                                                    \
            MP_FAIL("MOLPROP_BIN is not set (run through make test)");                 \
        mkdir(tmp(""), 0777);                                                          \
    } while (0)

MP_TEST(cli_featurize_cache_equals_library)
{
    NEED_BIN();
    /* SMILES in the second column; a blank line; invalid rows at lines 4 and 6 */
    write_text(tmp("in.csv"), "id,SMILES,y\n1,CCO,0.5\n2,c1ccccc1O,1\n3,xyz,2\n\n"
                              "4,CN(C)(C)(C)C,3\n5,[Na+].[Cl-],4\n");
    static char out[1 << 16];
    char args[4096];
    snprintf(args, sizeof args, "--data %s --out %s --scaffolds --threads 2", tmp("in.csv"),
             tmp("in.mpf"));
    int rc = run(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "molecules    5") != NULL);
    CHECK(strstr(out, "valid        3") != NULL);
    CHECK(strstr(out, "invalid      2") != NULL);
    CHECK(strstr(out, "in.csv:4: invalid SMILES 'xyz': SMILES Parse Error") != NULL);
    CHECK(strstr(out, "in.csv:6: invalid SMILES 'CN(C)(C)(C)C': Explicit valence") != NULL);
    CHECK(strstr(out, "molecules/s") != NULL);
    /* the same as the library on the same SMILES and options */
    const char *smi[] = { "CCO", "c1ccccc1O", "xyz", "CN(C)(C)(C)C", "[Na+].[Cl-]" };
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 1,
                            .scaffolds = 1, .n_threads = 1 };
    mp_features *lib = NULL, *file = NULL;
    CHECK_OK(mp_featurize(&lib, smi, 5, &o));
    mp_status st = mp_features_load(&file, tmp("in.mpf"));
    int same = !st && tf_same_features(lib, file);
    mp_features_free(lib);
    mp_features_free(file);
    CHECK_OK(st);
    CHECK(same);
}

MP_TEST(cli_featurize_dump_without_out_and_layouts)
{
    NEED_BIN();
    write_text(tmp("d.csv"), "smiles\nCCO\nC1CC1\n");
    static char out[1 << 16];
    char args[4096];
    snprintf(args, sizeof args, "--data %s --dump %s --gz --no-descriptors --atom-layout organic",
             tmp("d.csv"), tmp("dumpdir"));
    int rc = run(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    char p[1400];
    snprintf(p, sizeof p, "%s/molecules.tsv.gz", tmp("dumpdir"));
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/morgan.tsv.gz", tmp("dumpdir"));
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/descriptors.tsv.gz", tmp("dumpdir"));
    CHECK(!exists(p));   /* --no-descriptors */
    /* organic layout: carbon is slot 2 of 13 atomic-number slots */
    snprintf(p, sizeof p, "%s/atoms.tsv.gz", tmp("dumpdir"));
    gzFile g = gzopen(p, "rb");
    mp_buf b = { 0 };
    int ok = g && tf_read_line(g, &b) && tf_read_line(g, &b) && !strncmp(b.data, "0\t0\t2,17,", 9);
    if (g)
        gzclose(g);
    mp_buf_free(&b);
    CHECK(ok);
}

MP_TEST(cli_featurize_many_invalid_rows_are_counted)
{
    NEED_BIN();
    mp_buf csv = { 0 };
    mp_buf_printf(&csv, "smiles\n");
    for (int i = 0; i < 30; i++)
        mp_buf_printf(&csv, "%s\n", i % 2 ? "CC" : "C1CC");   /* 15 bad */
    for (int i = 0; i < 15; i++)
        mp_buf_printf(&csv, "bad%d\n", i);                       /* 15 more */
    write_text(tmp("many.csv"), csv.data);
    mp_buf_free(&csv);
    static char out[1 << 16];
    char args[4096];
    snprintf(args, sizeof args, "--data %s --out %s --no-descriptors", tmp("many.csv"),
             tmp("many.mpf"));
    int rc = run(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    int listed = 0;
    for (const char *s = out; (s = strstr(s, "invalid SMILES")) != NULL; s++)
        listed++;
    CHECK_EQ_INT(listed, 20);
    CHECK(strstr(out, "and 10 more invalid rows (30 in all)") != NULL);
    CHECK(strstr(out, "many.csv:2: invalid SMILES 'C1CC'") != NULL);
}

MP_TEST(cli_featurize_bad_input_fails_cleanly)
{
    NEED_BIN();
    static char out[1 << 16];
    char args[4096];
    /* no --data; nothing to write; unknown option; bad values */
    CHECK_EQ_INT(run("--out x.mpf", out, sizeof out), 1);
    CHECK(strstr(out, "--data") != NULL);
    snprintf(args, sizeof args, "--data %s", tmp("in.csv"));
    CHECK_EQ_INT(run(args, out, sizeof out), 1);
    CHECK(strstr(out, "nothing to write") != NULL);
    CHECK_EQ_INT(run("--data a.csv --out b.mpf --frobnicate", out, sizeof out), 1);
    CHECK(strstr(out, "--frobnicate") != NULL);
    CHECK_EQ_INT(run("--data a.csv --out b.mpf --threads 0", out, sizeof out), 1);
    CHECK_EQ_INT(run("--data a.csv --out b.mpf --atom-layout v9", out, sizeof out), 1);
    CHECK(strstr(out, "v9") != NULL);
    /* a missing input file: exit 1, and no output appears */
    snprintf(args, sizeof args, "--data %s --out %s", tmp("absent.csv"), tmp("absent.mpf"));
    CHECK_EQ_INT(run(args, out, sizeof out), 1);
    CHECK(strstr(out, "absent.csv") != NULL);
    CHECK(!exists(tmp("absent.mpf")));
    /* a malformed CSV (a row with too many fields) */
    write_text(tmp("ragged.csv"), "smiles,y\nCCO,1\nCC,2,3\n");
    snprintf(args, sizeof args, "--data %s --out %s", tmp("ragged.csv"), tmp("ragged.mpf"));
    CHECK_EQ_INT(run(args, out, sizeof out), 1);
    CHECK(strstr(out, "ragged.csv") != NULL);
    CHECK(!exists(tmp("ragged.mpf")));
    /* an output directory that does not exist */
    write_text(tmp("ok.csv"), "smiles\nCCO\n");
    snprintf(args, sizeof args, "--data %s --out %s/no/such/dir/x.mpf", tmp("ok.csv"),
             mp_test_tmpdir());
    CHECK_EQ_INT(run(args, out, sizeof out), 1);
    CHECK(strstr(out, "does not exist") != NULL);
    /* --help succeeds */
    CHECK_EQ_INT(run("--help", out, sizeof out), 0);
    CHECK(strstr(out, "--atom-layout") != NULL);
}
