/*
 * test_shard.c - prediction split over processes (run/shard.c): the byte
 * ranges of an input against the reader's own records (quoted line breaks,
 * CRLF, blank lines, a byte order mark, a last line without its break),
 * `--shard I/N` parts merged with `--merge` byte for byte the output of one
 * process (invalid rows and their messages included), every refusal of the
 * merge, and `mpirun -np 2|3 molprop predict` (a build with MPI) byte for
 * byte one process.
 */
#define _GNU_SOURCE   /* memmem */
#include "test.h"

#include "core/core.h"
#include "core/dist.h"
#include "data/csv.h"
#include "run/shard.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("shard_", name); }

static int write_text(const char *path, const char *text, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    int ok = fwrite(text, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* A shell command line with its output in out (tests/test.h). */
#define shell(...) mp_test_shell(out, sizeof out, __VA_ARGS__)

/* ===================================================================== */
/* The ranges against the reader                                          */
/* ===================================================================== */

/* Every record of path after the header, as "line|field|field...\n";
 * *rows counts them. */
static int read_all(const char *path, const mp_shard *s, mp_buf *b, uint64_t *rows)
{
    mp_csv_reader *r;
    char **f;
    size_t nf, line;
    if (mp_csv_open(&r, path) || mp_csv_next(r, &f, &nf, &line)) {
        mp_csv_close(r);
        return 0;
    }
    if (s && mp_csv_set_range(r, s->start, s->end, s->line)) {
        mp_csv_close(r);
        return 0;
    }
    int ok = 1;
    for (;;) {
        if (mp_csv_next(r, &f, &nf, &line)) {
            ok = 0;
            break;
        }
        if (nf == 0)
            break;
        (*rows)++;
        mp_buf_printf(b, "%zu", line);
        for (size_t i = 0; i < nf; i++)
            mp_buf_printf(b, "|%s", f[i]);
        mp_buf_append(b, "\n", 1);
    }
    mp_csv_close(r);
    return ok;
}

/* A file of n rows with quoted line breaks, escaped quotes, blank lines,
 * quoted blanks and CR / CRLF / LF line ends. */
static void make_tricky(mp_buf *b, int n, int bom, int last_break)
{
    if (bom)
        mp_buf_append(b, "\xEF\xBB\xBF", 3);
    mp_buf_printf(b, "\n  \nsmiles,\"na\nme\",y\r\n");
    static const char *const eol[3] = { "\n", "\r\n", "\r" };
    for (int i = 0; i < n; i++) {
        switch (i % 6) {
        case 0: mp_buf_printf(b, "C%d,\"two\nlines, \"\"q\"\"\r\nmore\",%d", i, i); break;
        case 1: mp_buf_printf(b, "\"C,%d\",plain,%d", i, i); break;
        case 2: mp_buf_printf(b, "CC%d,\"\"\"\",%d", i, i); break;
        case 3: mp_buf_printf(b, "N%d,x,%d%s \t%s\"\"%s", i, i, eol[i % 3], eol[(i + 1) % 3],
                              eol[i % 2]); break;
        case 4: mp_buf_printf(b, "O%d,\"\n\",%d", i, i); break;
        default: mp_buf_printf(b, "S%d,y,%d", i, i);
        }
        if (i + 1 < n || last_break)
            mp_buf_printf(b, "%s", eol[(i * 5) % 3]);
    }
}

MP_TEST(shard_ranges_join_to_the_reader_records)
{
    const char *path = tmp("tricky.csv");
    for (int variant = 0; variant < 4; variant++) {
        mp_buf text = { 0 };
        make_tricky(&text, 37 + variant * 11, variant & 1, variant & 2);
        CHECK(write_text(path, text.data, text.len));
        mp_buf whole = { 0 };
        uint64_t n_whole = 0;
        CHECK(read_all(path, NULL, &whole, &n_whole));
        CHECK(whole.len > 100);
        for (int n = 1; n <= 9; n++)
            for (int align = 1; align <= 4; align += 3) {
                mp_buf joined = { 0 };
                uint64_t prev_end = 0, rows = 0;
                for (int i = 0; i < n; i++) {
                    mp_shard s;
                    mp_shard_spec spec = { i, n };
                    CHECK_OK(mp_shard_plan(&s, path, spec, align));
                    if (i == 0)
                        CHECK(s.start == s.header_end);
                    else
                        CHECK_EQ_INT(s.start, prev_end);
                    CHECK(s.end >= s.start);
                    CHECK_EQ_INT(s.row0, rows);
                    CHECK_MSG(i == 0 || s.start == s.size || s.row0 % (uint64_t)align == 0,
                              "shard %d/%d starts at row %llu (align %d)", i, n,
                              (unsigned long long)s.row0, align);
                    CHECK(read_all(path, &s, &joined, &rows));
                    prev_end = s.end;
                    if (i == n - 1)
                        CHECK_EQ_INT(s.end, s.size);
                }
                CHECK_MSG(joined.len == whole.len && !memcmp(joined.data, whole.data, whole.len),
                          "variant %d, %d shards (align %d): the shards' records differ from "
                          "the whole file's", variant, n, align);
                mp_buf_free(&joined);
            }
        mp_buf_free(&whole);
        mp_buf_free(&text);
    }
}

MP_TEST(shard_spec_and_inputs_refused)
{
    mp_shard_spec s;
    CHECK_OK(mp_shard_parse("2/5", &s));
    CHECK_EQ_INT(s.index, 2);
    CHECK_EQ_INT(s.count, 5);
    static const char *const bad[] = { "3/3", "-1/3", "0/0", "a/b", "1", "1/2x", "", "1/" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(mp_shard_parse(bad[i], &s) == MP_ERR_ARG, "'%s' accepted", bad[i]);
    CHECK(mp_shard_parse("3/3", &s) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "runs from 0 to 2"));
    /* gzip has no byte ranges */
    const char *gz = tmp("in.csv.gz");
    CHECK_EQ_INT(shell("printf 'smiles\\nCC\\n' | gzip > '%s'", gz), 0);
    mp_shard sh;
    mp_shard_spec one = { 0, 2 };
    CHECK(mp_shard_plan(&sh, gz, one, 1) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "gzipped"));
    CHECK(mp_shard_plan(&sh, "-", one, 1) == MP_ERR_ARG);
    CHECK(mp_shard_plan(&sh, tmp("absent.csv"), one, 1) == MP_ERR_IO);
}

/* ===================================================================== */
/* End to end: parts, merge, MPI                                          */
/* ===================================================================== */

/* A small D-MPNN on esol (once per run) and an input of its SMILES with
 * invalid rows, blank lines, a quoted column with line breaks and CRLF
 * ends; *data gets the input's path.  The model's path, NULL on failure. */
static const char *model_and_input(const char **data)
{
    static int done;
    static char model[1300], input[1300];
    *data = input;
    if (done)
        return model;
    snprintf(model, sizeof model, "%s/m/model.mpm", tmp("esol"));
    snprintf(input, sizeof input, "%s", tmp("in.csv"));
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    if (mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 32 --threads 2 "
                    "--quiet --save-dir '%s/m'", esol, tmp("esol")) != 0)
        return NULL;
    /* rows: smiles,"a name with\na break",y (every 7th a quoted break, every
     * 50th an invalid SMILES, blank lines now and then), CRLF ends */
    mp_csv_reader *r;
    char **f;
    size_t nf, line;
    FILE *fp = fopen(input, "wb");
    if (!fp || mp_csv_open(&r, esol) || mp_csv_next(r, &f, &nf, &line)) {
        if (fp)
            fclose(fp);
        return NULL;
    }
    fprintf(fp, "smiles,name,y\r\n");
    for (int i = 0; mp_csv_next(r, &f, &nf, &line) == MP_OK && nf == 2; i++) {
        if (i % 7 == 0)
            fprintf(fp, "%s,\"mol\n%d, \"\"q\"\"\",%s\r\n", f[0], i, f[1]);
        else
            fprintf(fp, "%s,n%d,%s\r\n", i % 50 == 3 ? "C1CC(bad" : f[0], i, f[1]);
        if (i % 90 == 5)
            fprintf(fp, "\r\n");
    }
    mp_csv_close(r);
    if (fclose(fp) != 0)
        return NULL;
    done = 1;
    return model;
}

/* One process's output (and its messages) for the test input. */
static char *one_process(const char *model, const char *data, const char *name, char **msgs)
{
    const char *p = tmp(name);
    if (mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' --threads 1",
                    model, data, p) != 0)
        return NULL;
    if (msgs)
        *msgs = mp_strdup(out);
    return mp_test_slurp(p, NULL);
}

/* "N rows (M invalid)" of a predict summary line. */
static int summary_of(const char *text, char *buf, size_t cap)
{
    const char *p = strstr(text, "predicted ");
    const char *q = p ? strstr(p, " invalid)") : NULL;
    if (!q)
        return 0;
    snprintf(buf, cap, "%.*s", (int)(q + 9 - (p + 10)), p + 10);
    return 1;
}

/* The "file:line: invalid SMILES" lines of text, in order. */
static void invalid_lines(const char *text, mp_buf *b)
{
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (memmem(p, len, "invalid SMILES '", 16))
            mp_buf_append(b, p, len + (nl != NULL));
        p = nl ? nl + 1 : NULL;
    }
}

MP_TEST(shard_parts_merge_to_one_process_output)
{
    const char *data, *model = model_and_input(&data);
    CHECK_MSG(model, "model: %s", out);
    char *msgs1 = NULL, *want = one_process(model, data, "one.csv", &msgs1);
    CHECK_MSG(want, "predict: %s", out);
    mp_buf lines1 = { 0 };
    invalid_lines(msgs1, &lines1);
    CHECK(lines1.len > 0);
    char summary[128];
    CHECK(summary_of(msgs1, summary, sizeof summary));
    for (int n = 2; n <= 3; n++) {
        char name[32];
        snprintf(name, sizeof name, "p%d.csv", n);
        const char *p = tmp(name);
        mp_buf lines = { 0 };
        for (int i = 0; i < n; i++) {
            CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out "
                                     "'%s' --threads 1 --shard %d/%d", model, data, p, i, n), 0);
            invalid_lines(out, &lines);
            CHECK(strstr(out, ".shard-"));
        }
        CHECK(access(p, F_OK) != 0);   /* the parts only */
        /* every invalid row reported with its own line, as one process does */
        CHECK_MSG(lines.len == lines1.len && !memcmp(lines.data, lines1.data, lines.len),
                  "%d shards report other invalid lines", n);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", p), 0);
        char merged[200];
        snprintf(merged, sizeof merged, "merged %s", summary);
        CHECK_MSG(strstr(out, merged), "%s", out);
        size_t len;
        char *got = mp_test_slurp(p, &len);
        CHECK(got);
        CHECK_MSG(len == strlen(want) && !memcmp(got, want, len), "%d shards merged differ "
                  "from one process", n);
        mp_free(got);
        mp_buf_free(&lines);
    }
    mp_buf_free(&lines1);
    mp_free(msgs1);
    mp_free(want);
}

/* --chunk-rows changes how many rows are held at a time, never the output:
 * the chunks are whole batches (128 rows on the cpu), so 1 (one batch),
 * 300 (three), 100000 (the whole file) and the default give the same bytes
 * and report the same invalid lines; a sharded run with small chunks still
 * merges to it.  Values out of range are refused. */
MP_TEST(predict_chunk_rows_do_not_change_the_output)
{
    const char *data, *model = model_and_input(&data);
    CHECK_MSG(model, "model: %s", out);
    char *msgs1 = NULL, *want = one_process(model, data, "chunk_one.csv", &msgs1);
    CHECK_MSG(want, "predict: %s", out);
    mp_buf lines1 = { 0 };
    invalid_lines(msgs1, &lines1);
    CHECK(lines1.len > 0);
    const int rows[] = { 1, 300, 100000 };
    for (int k = 0; k < 3; k++) {
        const char *p = tmp("chunk_k.csv");
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                                 "--threads 1 --chunk-rows %d", model, data, p, rows[k]), 0);
        mp_buf lines = { 0 };
        invalid_lines(out, &lines);
        CHECK_MSG(lines.len == lines1.len && !memcmp(lines.data, lines1.data, lines.len),
                  "--chunk-rows %d reports other invalid lines", rows[k]);
        mp_buf_free(&lines);
        size_t len;
        char *got = mp_test_slurp(p, &len);
        CHECK(got);
        CHECK_MSG(len == strlen(want) && !memcmp(got, want, len), "--chunk-rows %d: another "
                  "output than the default chunks'", rows[k]);
        mp_free(got);
    }
    const char *p = tmp("chunk_sh.csv");
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                                 "--threads 1 --chunk-rows 1 --shard %d/3", model, data, p, i),
                     0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s' --remove-parts", p), 0);
    size_t len;
    char *got = mp_test_slurp(p, &len);
    CHECK(got);
    CHECK_MSG(len == strlen(want) && !memcmp(got, want, len), "shards of one-batch chunks "
              "merged differ from one process");
    mp_free(got);
    const char *bad[] = { "0", "-5", "2000000", "many" };
    for (int k = 0; k < 4; k++) {
        CHECK(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                          "--chunk-rows %s", model, data, tmp("chunk_bad.csv"), bad[k]) != 0);
        CHECK_MSG(strstr(out, "--chunk-rows"), "%s", out);
        CHECK(access(tmp("chunk_bad.csv"), F_OK) != 0);
    }
    mp_buf_free(&lines1);
    mp_free(msgs1);
    mp_free(want);
}

MP_TEST(shard_merge_refuses_bad_parts)
{
    const char *data, *model = model_and_input(&data);
    CHECK_MSG(model, "model: %s", out);
    const char *p = tmp("r.csv");
    char part[3][1300];
    for (int i = 0; i < 3; i++) {
        snprintf(part[i], sizeof part[i], "%s.shard-%d-of-3", p, i);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                                 "--threads 1 --quiet --shard %d/3", model, data, p, i), 0);
    }
    /* no parts at all */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", tmp("none.csv")), 1);
    CHECK(strstr(out, "no parts of"));
    /* a missing part */
    CHECK_EQ_INT(shell("mv '%s' '%s.away'", part[1], part[1]), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", p), 1);
    CHECK_MSG(strstr(out, "missing part 1 of 3"), "%s", out);
    CHECK(access(p, F_OK) != 0);
    /* a duplicate: part 2 copied under part 1's name */
    CHECK_EQ_INT(shell("cp '%s' '%s'", part[2], part[1]), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", p), 1);
    CHECK_MSG(strstr(out, "holds part 2/3, its name says 1/3"), "%s", out);
    CHECK_EQ_INT(shell("mv '%s.away' '%s'", part[1], part[1]), 0);
    /* a stale part of another count */
    char stale[1300];
    snprintf(stale, sizeof stale, "%s.shard-0-of-2", p);
    CHECK_EQ_INT(shell("cp '%s' '%s'", part[0], stale), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", p), 1);
    CHECK_MSG(strstr(out, "parts of different runs"), "%s", out);
    CHECK_EQ_INT(shell("rm '%s'", stale), 0);
    /* a part of another input (the file with one more row) */
    const char *other = tmp("other.csv");
    CHECK_EQ_INT(shell("cp '%s' '%s' && printf 'CCO,extra,1\\r\\n' >> '%s'", data, other, other),
                 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--threads 1 --quiet --shard 2/3", model, other, p), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", p), 1);
    CHECK_MSG(strstr(out, "different inputs"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--threads 1 --quiet --shard 2/3", model, data, p), 0);
    /* a part cut short (no end line) */
    CHECK_EQ_INT(shell("cp '%s' '%s.bak' && head -c 300 '%s.bak' > '%s'", part[1], part[1],
                       part[1], part[1]), 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s'", p), 1);
    CHECK_MSG(strstr(out, "incomplete or damaged"), "%s", out);
    CHECK(access(p, F_OK) != 0);
    CHECK_EQ_INT(shell("mv '%s.bak' '%s'", part[1], part[1]), 0);
    /* all well again: merged, and --remove-parts removes them */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge --out '%s' --remove-parts", p), 0);
    CHECK(access(p, F_OK) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(access(part[i], F_OK) != 0);
    /* the CLI's own refusals */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --merge"), 1);
    CHECK(strstr(out, "--out is required"));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--shard 3/3", model, data, p), 1);
    CHECK(strstr(out, "the index runs from 0 to 2"));
}

/* mpirun -np K molprop ...; -1 when there is no mpirun. */
static int mpirun(int k, const char *args)
{
    if (shell("command -v mpirun") != 0)
        return -1;
    /* detect_leaks=0: in a sanitizer build, Open MPI's plugins, unloaded at
     * MPI_Finalize, leave blocks LeakSanitizer can neither name nor
     * suppress; the same code is leak-checked by the one-process tests */
    return shell("ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np %d "
                 "'%s' %s", k, getenv("MOLPROP_BIN"), args);
}

MP_TEST(shard_mpirun_ranks_match_one_process)
{
    const char *data, *model = model_and_input(&data);
    CHECK_MSG(model, "model: %s", out);
    if (shell("command -v mpirun") != 0)
        MP_SKIP("no mpirun (Debian: openmpi-bin)");
    char *msgs1 = NULL, *want = one_process(model, data, "one_mpi.csv", &msgs1);
    CHECK(want);
    char summary[128], predicted[200];
    CHECK(summary_of(msgs1, summary, sizeof summary));
    mp_free(msgs1);
    snprintf(predicted, sizeof predicted, "predicted %s", summary);
    char args[4000];
    const char *p = tmp("mpi.csv");
    snprintf(args, sizeof args, "predict --model '%s' --data '%s' --out '%s' --threads 1", model,
             data, p);
    if (!mp_dist_built_with_mpi()) {
        /* without MPI every rank would predict everything: refused, saying why */
        CHECK(mpirun(2, args) != 0);
        CHECK_MSG(strstr(out, "built without MPI"), "%s", out);
        CHECK(access(p, F_OK) != 0);
        mp_free(want);
        return;
    }
    for (int k = 2; k <= 3; k++) {
        unlink(p);
        CHECK_MSG(mpirun(k, args) == 0, "mpirun -np %d: %s", k, out);
        CHECK_MSG(strstr(out, predicted), "%s", out);
        size_t len;
        char *got = mp_test_slurp(p, &len);
        CHECK(got);
        CHECK_MSG(len == strlen(want) && !memcmp(got, want, len), "mpirun -np %d differs from "
                  "one process", k);
        mp_free(got);
        /* no parts left beside it */
        CHECK_EQ_INT(shell("ls '%s'.shard-* 2>/dev/null | wc -l | tr -d ' '", p), 0);
        CHECK_EQ_INT(strtol(out, NULL, 10), 0);
    }
    /* a failing input fails on every rank, and nothing is left */
    unlink(p);
    snprintf(args, sizeof args, "predict --model '%s' --data '%s' --out '%s' --threads 1",
             model, tmp("absent.csv"), p);
    CHECK(mpirun(2, args) != 0);
    CHECK(strstr(out, "absent.csv"));
    CHECK(access(p, F_OK) != 0);
    mp_free(want);
}
