/*
 * test_featurize_dump.c - the reference dump: our files for the fixture
 * SMILES against Chemprop's own files (molecules.tsv and morgan.tsv line for
 * line, atoms and descriptors numerically, bonds as sets), plain and gzipped.
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Next line of both files; 0 when either ends. */
static int two_lines(gzFile a, gzFile b, mp_buf *la, mp_buf *lb)
{
    int ra = tf_read_line(a, la), rb = tf_read_line(b, lb);
    return ra && rb ? 1 : (ra || rb ? -1 : 0);
}

static char *file_in(const char *dir, const char *name)
{
    static char buf[1400];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

/* Compares one of our dump files with the fixture, line by line: exactly, or
 * (numeric) field by field with a relative tolerance from column 1 on. */
static long compare_file(const char *ours, const char *theirs, double rel_tol, int numeric)
{
    gzFile a = gzopen(ours, "rb"), b = gzopen(theirs, "rb");
    if (!a || !b) {
        if (a) gzclose(a);
        if (b) gzclose(b);
        printf("    cannot open %s or %s\n", ours, theirs);
        return -1;
    }
    mp_buf la = { 0 }, lb = { 0 };
    long line = 0, bad = 0;
    int r;
    while ((r = two_lines(a, b, &la, &lb)) == 1) {
        line++;
        if (!numeric || line == 1) {
            if (strcmp(la.data, lb.data) != 0 && bad++ < 3)
                printf("    %s:%ld: '%s' vs '%s'\n", ours, line, la.data, lb.data);
            continue;
        }
        char *fa[128], *fb[128];
        int na = tf_split(la.data, fa, 128), nb = tf_split(lb.data, fb, 128);
        int ok = na == nb;
        for (int i = 0; ok && i < na; i++) {
            char *ea, *eb;
            double x = strtod(fa[i], &ea), y = strtod(fb[i], &eb);
            if (*ea || *eb)   /* not numbers: compare as text */
                ok = strcmp(fa[i], fb[i]) == 0;
            else
                ok = (isnan(x) && isnan(y)) || fabs(x - y) <= rel_tol * fabs(y) + 1e-12;
        }
        if (!ok && bad++ < 3)
            printf("    %s:%ld differs from the fixture\n", ours, line);
    }
    if (r != 0) {
        printf("    %s: line counts differ after line %ld\n", ours, line);
        bad++;
    }
    gzclose(a);
    gzclose(b);
    mp_buf_free(&la);
    mp_buf_free(&lb);
    return line > 1 ? bad : -1;
}

/* bonds.tsv: ours in Chemprop's order, the fixture in RDKit's: sort both. */
static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static long compare_sorted(const char *ours, const char *theirs)
{
    char **v[2] = { NULL, NULL };
    long n[2] = { 0, 0 };
    const char *paths[2] = { ours, theirs };
    for (int k = 0; k < 2; k++) {
        gzFile g = gzopen(paths[k], "rb");
        if (!g)
            return -1;
        mp_buf b = { 0 };
        long cap = 0;
        while (tf_read_line(g, &b)) {
            if (n[k] == cap) {
                cap = cap ? 2 * cap : 1024;
                v[k] = realloc(v[k], (size_t)cap * sizeof *v[k]);
            }
            v[k][n[k]++] = strdup(b.data);
        }
        gzclose(g);
        mp_buf_free(&b);
        qsort(v[k], (size_t)n[k], sizeof *v[k], cmp_str);
    }
    long bad = n[0] != n[1];
    for (long i = 0; !bad && i < n[0]; i++)
        bad += strcmp(v[0][i], v[1][i]) != 0;
    for (int k = 0; k < 2; k++) {
        for (long i = 0; i < n[k]; i++)
            free(v[k][i]);
        free(v[k]);
    }
    return n[0] > 1 ? bad : -1;
}

MP_TEST(dump_matches_fixture_files)
{
    int32_t n;
    char **smiles = tf_fixture_smiles(&n);
    CHECK_MSG(smiles, "fixtures missing");
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 1,
                            .scaffolds = 1, .n_threads = 2 };
    mp_features *f = NULL;
    mp_status st = mp_featurize(&f, (const char *const *)smiles, n, &o);
    char plain[1200], gz[1200];
    snprintf(plain, sizeof plain, "%s/dump/plain", mp_test_tmpdir());
    snprintf(gz, sizeof gz, "%s/dump/gz", mp_test_tmpdir());
    mp_status sp = st ? st : mp_features_dump(f, (const char *const *)smiles, plain, 0);
    mp_status sg = st ? st : mp_features_dump(f, (const char *const *)smiles, gz, 1);
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_OK(st);
    CHECK_OK(sp);
    CHECK_OK(sg);
    const char *dirs[2] = { plain, gz };
    for (int k = 0; k < 2; k++) {
        const char *ext = k ? ".tsv.gz" : ".tsv";
        char ours[1400];
#define OURS(name) (snprintf(ours, sizeof ours, "%s/%s%s", dirs[k], name, ext), ours)
        CHECK_EQ_INT(compare_file(OURS("molecules"), tf_fixture("molecules.tsv"), 0, 0), 0);
        CHECK_EQ_INT(compare_file(OURS("morgan"), tf_fixture("morgan.tsv.gz"), 0, 0), 0);
        CHECK_EQ_INT(compare_file(OURS("atoms"), tf_fixture("atoms.tsv.gz"), 1e-6, 1), 0);
        CHECK_EQ_INT(compare_file(OURS("descriptors"), tf_fixture("descriptors.tsv.gz"), 1e-9, 1), 0);
        CHECK_EQ_INT(compare_sorted(OURS("bonds"), tf_fixture("bonds.tsv.gz")), 0);
#undef OURS
    }
    /* the gzipped files really are gzip */
    FILE *fp = fopen(file_in(gz, "atoms.tsv.gz"), "rb");
    CHECK(fp);
    int b0 = fgetc(fp), b1 = fgetc(fp);
    fclose(fp);
    CHECK(b0 == 0x1f && b1 == 0x8b);
}

MP_TEST(dump_partial_and_io_errors)
{
    const char *smi[] = { "CCO", "xyz" };
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 1 };
    mp_features *f = NULL;
    CHECK_OK(mp_featurize(&f, smi, 2, &o));
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/dump2/a/b", mp_test_tmpdir());
    mp_status st = mp_features_dump(f, smi, dir, 0);
    struct stat sb;
    int have_mol = stat(file_in(dir, "molecules.tsv"), &sb) == 0;
    int have_morgan = stat(file_in(dir, "morgan.tsv"), &sb) == 0;
    int have_desc = stat(file_in(dir, "descriptors.tsv"), &sb) == 0;
    /* a file where the directory should be */
    mp_status st2 = mp_features_dump(f, smi, file_in(dir, "molecules.tsv"), 0);
    mp_features_free(f);
    CHECK_OK(st);
    CHECK(have_mol);
    CHECK(!have_morgan);
    CHECK(!have_desc);
    CHECK(st2 == MP_ERR_IO);
    gzFile g = gzopen(file_in(dir, "molecules.tsv"), "rb");
    mp_buf b = { 0 };
    int l1 = tf_read_line(g, &b) && tf_read_line(g, &b) && !strcmp(b.data, "0\t1\t3\t2\t\tCCO");
    int l2 = tf_read_line(g, &b) && !strcmp(b.data, "1\t0\t\t\t\txyz");
    gzclose(g);
    mp_buf_free(&b);
    CHECK(l1);
    CHECK(l2);
}
