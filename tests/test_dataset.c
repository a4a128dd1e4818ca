/*
 * test_dataset.c - loading labelled CSV files: column selection, target
 * parsing (missing labels, nan/inf rejection), error messages that name file,
 * line and column, allocation failures without leaks, and every benchmark
 * dataset of the mirror against MANIFEST.tsv.
 */
#include "test.h"
#include "data/dataset.h"

#include <dirent.h>
#include <stdlib.h>
#include <zlib.h>

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

static const char *put_text(const char *name, const char *text)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", mp_test_tmpdir(), name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fputs(text, fp) < 0 || fclose(fp) != 0) {
        fprintf(stderr, "test: cannot write %s\n", path);
        exit(2);
    }
    return path;
}

static const char *put_gz(const char *name, const char *text)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", mp_test_tmpdir(), name);
    gzFile g = gzopen(path, "wb");
    if (!g || gzputs(g, text) < 0 || gzclose(g) != Z_OK) {
        fprintf(stderr, "test: cannot write %s\n", path);
        exit(2);
    }
    return path;
}

/* A load that must fail with `want` and a message holding `sub`, leaking
 * nothing and leaving *out NULL. */
#define CHECK_LOAD_FAILS(path, spec, want, sub)                               \
    do {                                                                      \
        long live_ = mp_alloc_live();                                         \
        mp_dataset *d_ = (mp_dataset *)1;                                     \
        mp_status st_ = mp_dataset_load(&d_, path, spec);                     \
        CHECK_MSG(st_ == (want), "got %s (%s), want %s", mp_status_name(st_), \
                  mp_error_message(), mp_status_name(want));                  \
        CHECK(d_ == NULL);                                                    \
        CHECK_MSG(strstr(mp_error_message(), sub) != NULL,                    \
                  "message '%s' lacks '%s'", mp_error_message(), sub);        \
        CHECK_EQ_INT(mp_alloc_live(), live_);                                 \
    } while (0)

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

MP_TEST(dataset_basic_and_missing_labels)
{
    const char *p = put_text("basic.csv",
                             "smiles,a,b\n"
                             "CCO,1.5,\n"
                             "\n"
                             "c1ccccc1,,-2e-1\n"
                             "C, 3 ,4\n");
    mp_dataset *d;
    long live = mp_alloc_live();
    CHECK_OK(mp_dataset_load(&d, p, NULL));
    CHECK_EQ_INT(d->n_rows, 3);
    CHECK_EQ_INT(d->n_tasks, 2);
    CHECK_EQ_STR(d->smiles_name, "smiles");
    CHECK_EQ_STR(d->task_names[0], "a");
    CHECK_EQ_STR(d->task_names[1], "b");
    CHECK_EQ_STR(d->smiles[0], "CCO");
    CHECK_EQ_STR(d->smiles[1], "c1ccccc1");
    CHECK_EQ_STR(d->smiles[2], "C");
    CHECK_EQ_INT(d->line[0], 2);
    CHECK_EQ_INT(d->line[1], 4);
    CHECK_EQ_INT(d->line[2], 5);
    CHECK(d->targets[0] == 1.5);
    CHECK(isnan(d->targets[1]));
    CHECK(isnan(d->targets[2]));
    CHECK(d->targets[3] == -0.2);
    CHECK(d->targets[4] == 3.0);
    CHECK(d->targets[5] == 4.0);
    mp_dataset_free(d);
    CHECK_EQ_INT(mp_alloc_live(), live);
}

MP_TEST(dataset_parse_target_rules)
{
    static const struct { const char *cell; double want; } good[] = {
        { "1", 1 }, { "-2.5", -2.5 }, { "+3", 3 }, { "1e3", 1000 }, { "1E-5", 1e-5 },
        { ".5", 0.5 }, { "5.", 5 }, { " 7 ", 7 }, { "\t-1\t", -1 }, { "0", 0 },
        { "1e-400", 0 },   /* underflow is a (tiny) number, as in Python */
        { "1.7976931348623157e308", 1.7976931348623157e308 },
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        double v = -99;
        CHECK_MSG(mp_parse_target(good[i].cell, &v) == MP_OK, "'%s' rejected", good[i].cell);
        CHECK_MSG(v == good[i].want, "'%s' -> %.17g", good[i].cell, v);
    }
    static const char *const bad[] = {
        "nan", "NaN", "NAN", "-nan", "inf", "-inf", "Inf", "infinity", "Infinity", "1e999",
        "-1e999", "1.2.3", "abc", " ", "\t", "1 2", "0x10", "1,5", "--1", "1e", ".", "e5",
        "1.0a", "one", "1_000", "+", "-",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        double v = -99;
        CHECK_MSG(mp_parse_target(bad[i], &v) == MP_ERR_FORMAT, "'%s' accepted as %g", bad[i], v);
    }
    double v = 0;
    CHECK_OK(mp_parse_target("", &v));
    CHECK(isnan(v));
}

MP_TEST(dataset_bad_target_message)
{
    char text[512] = "smiles,logSolubility\n";
    for (int i = 0; i < 15; i++)
        strcat(text, "CC,1.0\n");
    strcat(text, "CCO,abc\n");   /* line 17 */
    CHECK_LOAD_FAILS(put_text("esol.csv", text), NULL, MP_ERR_FORMAT,
                     "esol.csv:17: column 'logSolubility': 'abc' is not a number");
    const char *cells[] = { "nan", "inf", "-inf", "1e999", "NaN", "1.2.3" };
    for (size_t i = 0; i < sizeof cells / sizeof *cells; i++) {
        char t[128], want[64];
        snprintf(t, sizeof t, "smiles,y\nC,1\nCC,%s\n", cells[i]);
        snprintf(want, sizeof want, ":3: column 'y': '%s' is not a number", cells[i]);
        CHECK_LOAD_FAILS(put_text("bad.csv", t), NULL, MP_ERR_FORMAT, want);
    }
    /* a very long bad cell is cut short in the message */
    char t[400] = "smiles,y\nC,";
    memset(t + strlen(t), 'x', 300);
    CHECK_LOAD_FAILS(put_text("long.csv", t), NULL, MP_ERR_FORMAT, "xxx...' is not a number");
    CHECK(strlen(mp_error_message()) < 250);
}

MP_TEST(dataset_wrong_field_count)
{
    CHECK_LOAD_FAILS(put_text("fields.csv", "smiles,y\nC,1\n\nCC,2,3\n"), NULL, MP_ERR_FORMAT,
                     "fields.csv:4: expected 2 fields as in the header, found 3");
    CHECK_LOAD_FAILS(put_text("fields.csv", "smiles,y,z\nC,1,2\nCC,2\n"), NULL, MP_ERR_FORMAT,
                     "fields.csv:3: expected 3 fields as in the header, found 2");
    /* a quoted newline moves the count of the next record's line */
    CHECK_LOAD_FAILS(put_text("fields.csv", "smiles,y\n\"C\nC\",1\nCC\n"), NULL, MP_ERR_FORMAT,
                     "fields.csv:4: expected 2 fields");
}

MP_TEST(dataset_empty_and_header_only)
{
    CHECK_LOAD_FAILS(put_text("empty.csv", ""), NULL, MP_ERR_FORMAT, "empty.csv: the file is empty");
    CHECK_LOAD_FAILS(put_text("blank.csv", "\n\n  \n"), NULL, MP_ERR_FORMAT, "blank.csv: the file is empty");
    CHECK_LOAD_FAILS(put_gz("empty.csv.gz", ""), NULL, MP_ERR_FORMAT, "empty.csv.gz: the file is empty");
    CHECK_LOAD_FAILS(put_text("hdr.csv", "smiles,y\n"), NULL, MP_ERR_FORMAT, "hdr.csv: no data rows");
    CHECK_LOAD_FAILS(put_text("hdr.csv", "smiles,y\n\n\n"), NULL, MP_ERR_FORMAT, "no data rows");
    CHECK_LOAD_FAILS("/nonexistent/x.csv", NULL, MP_ERR_IO, "/nonexistent/x.csv");
    /* damage found by the reader comes through with file and line */
    CHECK_LOAD_FAILS(put_text("q.csv", "smiles,y\nC,1\n\"C,2\n"), NULL, MP_ERR_FORMAT,
                     "q.csv:4: unterminated quoted field (the quote opens on line 3)");
}

MP_TEST(dataset_column_selection)
{
    const char *p = put_text("cols.csv", "id,SMILES,t1,t2,t3\n7,CCO,1,2,3\n8,CC,4,,6\n");
    mp_dataset *d;
    /* SMILES found case-insensitively; id left out of the default targets */
    mp_column_spec s1 = { .ignore_columns = "id" };
    CHECK_OK(mp_dataset_load(&d, p, &s1));
    CHECK_EQ_STR(d->smiles_name, "SMILES");
    CHECK_EQ_STR(d->smiles[1], "CC");
    CHECK_EQ_INT(d->n_tasks, 3);
    CHECK_EQ_STR(d->task_names[0], "t1");
    CHECK(isnan(d->targets[1 * 3 + 1]));
    mp_dataset_free(d);

    /* explicit targets, in the order given; ignore several */
    mp_column_spec s2 = { .target_columns = "t3,t1" };
    CHECK_OK(mp_dataset_load(&d, p, &s2));
    CHECK_EQ_INT(d->n_tasks, 2);
    CHECK_EQ_STR(d->task_names[0], "t3");
    CHECK_EQ_STR(d->task_names[1], "t1");
    CHECK(d->targets[0] == 3 && d->targets[1] == 1 && d->targets[2] == 6 && d->targets[3] == 4);
    mp_dataset_free(d);
    mp_column_spec s3 = { .ignore_columns = "id,t2" };
    CHECK_OK(mp_dataset_load(&d, p, &s3));
    CHECK_EQ_INT(d->n_tasks, 2);
    CHECK_EQ_STR(d->task_names[1], "t3");
    mp_dataset_free(d);

    /* --smiles-column is case-insensitive too */
    mp_column_spec s4 = { .smiles_column = "smiles", .target_columns = "T2" };
    CHECK_OK(mp_dataset_load(&d, p, &s4));
    CHECK_EQ_STR(d->smiles_name, "SMILES");
    CHECK_EQ_STR(d->task_names[0], "t2");
    mp_dataset_free(d);

    /* no "smiles" column: the first one is the SMILES column */
    const char *q = put_text("first.csv", "mol,y\nCCO,1\n");
    CHECK_OK(mp_dataset_load(&d, q, NULL));
    CHECK_EQ_STR(d->smiles_name, "mol");
    CHECK_EQ_STR(d->smiles[0], "CCO");
    CHECK_EQ_STR(d->task_names[0], "y");
    mp_dataset_free(d);
    mp_column_spec s5 = { .smiles_column = "MOL" };
    CHECK_OK(mp_dataset_load(&d, q, &s5));
    CHECK_EQ_STR(d->smiles_name, "mol");
    mp_dataset_free(d);

    /* prediction input: SMILES only, other columns are not read as numbers */
    const char *r = put_text("pred.csv", "name,smiles\naspirin,CC(=O)O\nx,C\n");
    mp_column_spec s6 = { .no_targets = 1 };
    CHECK_OK(mp_dataset_load(&d, r, &s6));
    CHECK_EQ_INT(d->n_tasks, 0);
    CHECK_EQ_INT(d->n_rows, 2);
    CHECK_EQ_STR(d->smiles[0], "CC(=O)O");
    mp_dataset_free(d);
}

MP_TEST(dataset_quoted_header_names)
{
    const char *p = put_text("sider_like.csv",
                             "smiles,\"Neoplasms benign, malignant\",Eye disorders\n"
                             "CCO,1,0\n");
    mp_dataset *d;
    CHECK_OK(mp_dataset_load(&d, p, NULL));
    CHECK_EQ_INT(d->n_tasks, 2);
    CHECK_EQ_STR(d->task_names[0], "Neoplasms benign, malignant");
    CHECK_EQ_STR(d->task_names[1], "Eye disorders");
    mp_dataset_free(d);
}

MP_TEST(dataset_absent_and_bad_columns)
{
    const char *p = put_text("abs.csv", "smiles,a,b\nC,1,2\n");
    mp_column_spec s1 = { .target_columns = "a,nope" };
    CHECK_LOAD_FAILS(p, &s1, MP_ERR_ARG, "abs.csv:1: no column 'nope' (--target-columns)");
    CHECK(strstr(mp_error_message(), "'smiles', 'a', 'b'") != NULL);
    mp_column_spec s2 = { .smiles_column = "smi" };
    CHECK_LOAD_FAILS(p, &s2, MP_ERR_ARG, "no column 'smi' (--smiles-column)");
    mp_column_spec s3 = { .ignore_columns = "zz" };
    CHECK_LOAD_FAILS(p, &s3, MP_ERR_ARG, "no column 'zz' (--ignore-columns)");
    mp_column_spec s4 = { .target_columns = "a,,b" };
    CHECK_LOAD_FAILS(p, &s4, MP_ERR_ARG, "empty column name");
    mp_column_spec s5 = { .target_columns = "" };
    CHECK_LOAD_FAILS(p, &s5, MP_ERR_ARG, "empty column name");
    mp_column_spec s6 = { .target_columns = "a,a" };
    CHECK_LOAD_FAILS(p, &s6, MP_ERR_ARG, "named twice");
    mp_column_spec s7 = { .target_columns = "smiles" };
    CHECK_LOAD_FAILS(p, &s7, MP_ERR_ARG, "is the SMILES column");
    mp_column_spec s8 = { .target_columns = "a", .ignore_columns = "a" };
    CHECK_LOAD_FAILS(p, &s8, MP_ERR_ARG, "both --target-columns and --ignore-columns");
    mp_column_spec s9 = { .ignore_columns = "a,b" };
    CHECK_LOAD_FAILS(p, &s9, MP_ERR_FORMAT, "no target columns");
    CHECK_LOAD_FAILS(put_text("only.csv", "smiles\nC\n"), NULL, MP_ERR_FORMAT, "no target columns");
    /* a trailing comma makes a nameless column: not a default target ... */
    const char *t = put_text("trail.csv", "smiles,y,\nC,1,\n");
    CHECK_LOAD_FAILS(t, NULL, MP_ERR_FORMAT, "trail.csv:1: column 3 has no name");
    /* ... but the named ones can still be chosen */
    mp_column_spec s10 = { .target_columns = "y" };
    mp_dataset *d;
    CHECK_OK(mp_dataset_load(&d, t, &s10));
    CHECK(d->n_tasks == 1 && d->targets[0] == 1);
    mp_dataset_free(d);
}

MP_TEST(dataset_duplicate_column_names)
{
    mp_column_spec none = { 0 };
    /* duplicates that would both be targets: refused */
    const char *p = put_text("dup.csv", "smiles,a,a,b\nC,1,2,3\n");
    CHECK_LOAD_FAILS(p, NULL, MP_ERR_FORMAT, "column name 'a' appears twice (columns 2 and 3)");
    mp_column_spec s1 = { .target_columns = "a" };
    CHECK_LOAD_FAILS(p, &s1, MP_ERR_FORMAT, "'a' is ambiguous: columns 2 ('a') and 3 ('a')");
    /* ignoring the name drops both: no ambiguity left */
    mp_column_spec s2 = { .ignore_columns = "a" };
    mp_dataset *d;
    CHECK_OK(mp_dataset_load(&d, p, &s2));
    CHECK_EQ_INT(d->n_tasks, 1);
    CHECK_EQ_STR(d->task_names[0], "b");
    CHECK(d->targets[0] == 3);
    mp_dataset_free(d);
    /* duplicates nobody asks for are harmless */
    mp_column_spec s3 = { .target_columns = "b" };
    CHECK_OK(mp_dataset_load(&d, p, &s3));
    CHECK_EQ_INT(d->n_tasks, 1);
    mp_dataset_free(d);

    /* SMILES by case: an exact "smiles" wins over "SMILES" ... */
    char *h1[] = { "SMILES", "smiles", "y" };
    size_t sc, *t, nt;
    CHECK_OK(mp_columns_resolve("h1.csv", h1, 3, &none, &sc, NULL, NULL));
    CHECK_EQ_INT(sc, 1);
    /* ... but two case variants and no exact match are ambiguous */
    char *h2[] = { "Smiles", "SMILES", "y" };
    CHECK(mp_columns_resolve("h2.csv", h2, 3, &none, &sc, NULL, NULL) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "h2.csv:1: SMILES column 'smiles' is ambiguous") != NULL);
    /* targets come back as column indices */
    char *h3[] = { "x", "smiles", "y", "z" };
    mp_column_spec s4 = { .ignore_columns = "z" };
    CHECK_OK(mp_columns_resolve("h3.csv", h3, 4, &s4, &sc, &t, &nt));
    CHECK_EQ_INT(sc, 1);
    CHECK_EQ_INT(nt, 2);
    CHECK(t[0] == 0 && t[1] == 2);
    mp_free(t);
}

/* ===================================================================== */
/* Allocation failures                                                    */
/* ===================================================================== */

/* Fails allocation N for every N in [0, limit) during a load: each attempt
 * must succeed or report MP_ERR_NOMEM, and leave no block behind. */
static int load_under_failures(const char *path, const mp_column_spec *spec, long limit,
                               int *nomem_seen, char *why, size_t why_cap)
{
    int last_ok = 0;
    for (long n = 0; n < limit; n++) {
        long live = mp_alloc_live();
        mp_dataset *d = (mp_dataset *)1;
        mp_alloc_fail_after(n);
        mp_status st = mp_dataset_load(&d, path, spec);
        mp_alloc_fail_after(-1);
        if (st == MP_OK)
            mp_dataset_free(d);
        else if (d != NULL) {
            snprintf(why, why_cap, "N=%ld: failed but *out is set", n);
            return 0;
        }
        if (st != MP_OK && st != MP_ERR_NOMEM) {
            snprintf(why, why_cap, "N=%ld: %s (%s)", n, mp_status_name(st), mp_error_message());
            return 0;
        }
        if (mp_alloc_live() != live) {
            snprintf(why, why_cap, "N=%ld: %ld blocks leaked", n, mp_alloc_live() - live);
            return 0;
        }
        *nomem_seen += st == MP_ERR_NOMEM;
        last_ok = st == MP_OK;
    }
    if (!last_ok)
        snprintf(why, why_cap, "never loaded within %ld allocations", limit);
    return last_ok;
}

MP_TEST(dataset_allocation_failures_do_not_leak)
{
    /* plain and gzip (zlib allocates through our hook too); enough rows and a
     * long field to make every array and buffer grow */
    char text[8192] = "id,smiles,a,b\n";
    for (int i = 0; i < 1500 / 20; i++)
        sprintf(text + strlen(text), "%d,C%dO,%d.5,\n", i, i, i);
    strcat(text, "99,\"");
    memset(text + strlen(text), 'C', 3000);
    strcat(text, "\",1,2\n");
    mp_column_spec spec = { .ignore_columns = "id" };
    char why[256] = "";
    int nomem = 0;
    CHECK_MSG(load_under_failures(put_text("oom.csv", text), &spec, 400, &nomem, why, sizeof why),
              "plain: %s", why);
    CHECK(nomem > 10);
    nomem = 0;
    CHECK_MSG(load_under_failures(put_gz("oom.csv.gz", text), &spec, 400, &nomem, why, sizeof why),
              "gzip: %s", why);
    CHECK(nomem > 10);
    /* and an error path under failures: a bad cell late in the file */
    const char *bad = put_text("oom_bad.csv", "smiles,y\nC,1\nCC,2\nCCC,x\n");
    for (long n = 0; n < 100; n++) {
        long live = mp_alloc_live();
        mp_dataset *d;
        mp_alloc_fail_after(n);
        mp_status st = mp_dataset_load(&d, bad, NULL);
        mp_alloc_fail_after(-1);
        CHECK_MSG(st == MP_ERR_NOMEM || st == MP_ERR_FORMAT, "N=%ld: %s", n, mp_status_name(st));
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
}

/* ===================================================================== */
/* The benchmark datasets                                                 */
/* ===================================================================== */

typedef struct {
    char name[64], file[64];
    long rows, tasks;
} manifest_row;

/* Reads name, file, rows, tasks of MANIFEST.tsv; returns the count. */
static int read_manifest(const char *path, manifest_row *rows, int cap)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, fp) && n < cap) {
        char name[64], file[64], r[32], t[32];
        if (sscanf(line, "%63[^\t]\t%63[^\t]\t%31[^\t]\t%31[^\t]", name, file, r, t) != 4)
            continue;
        if (!strcmp(name, "name"))
            continue;
        snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
        snprintf(rows[n].file, sizeof rows[n].file, "%s", file);
        rows[n].rows = strcmp(r, "-") ? atol(r) : -1;
        rows[n].tasks = strcmp(t, "-") ? atol(t) : -1;
        n++;
    }
    fclose(fp);
    return n;
}

MP_TEST(dataset_every_mirror_file_matches_manifest)
{
    const char *mirror = getenv("MOLPROP_DATA_MIRROR");
    if (!mirror || !*mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not set");
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/MANIFEST.tsv", mirror);
    manifest_row man[64];
    int n_man = read_manifest(mpath, man, 64);
    if (n_man < 0)
        MP_SKIP("no MANIFEST.tsv in MOLPROP_DATA_MIRROR");
    CHECK_EQ_INT(n_man, 19);

    DIR *dir = opendir(mirror);
    CHECK(dir != NULL);
    struct dirent *e;
    int loaded = 0, saw_qm9 = 0, saw_toxcast = 0, saw_sider = 0;
    char why[512] = "";
    while ((e = readdir(dir)) && !why[0]) {
        size_t len = strlen(e->d_name);
        if (len < 8 || strcmp(e->d_name + len - 7, ".csv.gz"))
            continue;
        const manifest_row *m = NULL;
        for (int i = 0; i < n_man; i++)
            if (!strcmp(man[i].file, e->d_name))
                m = &man[i];
        if (!m) {
            snprintf(why, sizeof why, "%s is not in MANIFEST.tsv", e->d_name);
            break;
        }
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", mirror, e->d_name);
        mp_dataset *d;
        long live = mp_alloc_live();
        if (mp_dataset_load(&d, path, NULL) != MP_OK) {
            snprintf(why, sizeof why, "%s", mp_error_message());
            break;
        }
        if ((long)d->n_rows != m->rows || (long)d->n_tasks != m->tasks || strcmp(d->smiles_name, "smiles"))
            snprintf(why, sizeof why, "%s: %zu rows x %zu tasks, manifest %ld x %ld", m->name,
                     d->n_rows, d->n_tasks, m->rows, m->tasks);
        if (!strcmp(m->name, "qm9")) {
            saw_qm9 = d->n_rows == 133885;
            size_t gap = d->n_tasks, missing = 0;   /* 4 gap cells are empty (README) */
            for (size_t j = 0; j < d->n_tasks; j++)
                if (!strcmp(d->task_names[j], "gap"))
                    gap = j;
            for (size_t i = 0; gap < d->n_tasks && i < d->n_rows; i++)
                missing += isnan(d->targets[i * d->n_tasks + gap]);
            if (missing != 4)
                snprintf(why, sizeof why, "qm9: %zu missing gap labels, README says 4", missing);
        }
        if (!strcmp(m->name, "toxcast"))
            saw_toxcast = d->n_tasks == 617;
        if (!strcmp(m->name, "sider")) {
            for (size_t j = 0; j < d->n_tasks; j++)
                saw_sider |= !strcmp(d->task_names[j],
                                     "Neoplasms benign, malignant and unspecified (incl cysts and polyps)");
        }
        if (d->line[d->n_rows - 1] != d->n_rows + 1)   /* no blank or multi-line rows */
            snprintf(why, sizeof why, "%s: last row on line %zu", m->name, d->line[d->n_rows - 1]);
        mp_dataset_free(d);
        if (mp_alloc_live() != live)
            snprintf(why, sizeof why, "%s: leaked", m->name);
        loaded++;
    }
    closedir(dir);
    CHECK_MSG(!why[0], "%s", why);
    CHECK_EQ_INT(loaded, 17);
    CHECK(saw_qm9);
    CHECK(saw_toxcast);
    CHECK(saw_sider);
}
