/*
 * test_csv.c - the streaming CSV reader: RFC 4180 quoting, line ends, BOM,
 * blank lines, gzip by magic bytes, damaged input, line numbers, and the
 * field writer.  Inputs are written at test time into the scratch directory.
 */
#include "test.h"
#include "data/csv.h"

#include <stdlib.h>
#include <zlib.h>

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

/* Writes n bytes to <tmpdir>/<name>; returns the path (static buffer). */
static const char *put_file(const char *name, const void *bytes, size_t n)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", mp_test_tmpdir(), name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(bytes, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "test: cannot write %s\n", path);
        exit(2);
    }
    return path;
}

static const char *put_text(const char *name, const char *text)
{
    return put_file(name, text, strlen(text));
}

/* gzip-compresses n bytes into *out (malloc'd), returning its length. */
static size_t gzip_bytes(const void *bytes, size_t n, unsigned char **out)
{
    z_stream z = { 0 };
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        exit(2);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    *out = malloc(cap);
    z.next_in = (unsigned char *)bytes;
    z.avail_in = (uInt)n;
    z.next_out = *out;
    z.avail_out = (uInt)cap;
    if (!*out || deflate(&z, Z_FINISH) != Z_STREAM_END)
        exit(2);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

static const char *put_gz(const char *name, const char *text)
{
    unsigned char *gz;
    size_t n = gzip_bytes(text, strlen(text), &gz);
    const char *p = put_file(name, gz, n);
    free(gz);
    return p;
}

/*
 * Reads every record of `path` into `out` as "LINE:f1|f2|...\n".  Returns the
 * status of the first failing call (MP_OK at a clean end).
 */
static mp_status dump(const char *path, char *out, size_t cap)
{
    mp_csv_reader *r;
    out[0] = '\0';
    mp_status st = mp_csv_open(&r, path);
    if (st)
        return st;
    size_t len = 0;
    for (;;) {
        char **f;
        size_t nf, line;
        st = mp_csv_next(r, &f, &nf, &line);
        if (st || nf == 0)
            break;
        len += (size_t)snprintf(out + len, cap - len, "%zu:", line);
        for (size_t i = 0; i < nf && len < cap; i++)
            len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "|" : "", f[i]);
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "\n");
        if (len >= cap) {
            st = MP_ERR_INTERNAL;
            break;
        }
    }
    mp_csv_close(r);
    return st;
}

/* Expects `text` (written as plain and gzip files) to read as `want`. */
#define CHECK_READS(text, want)                                               \
    do {                                                                      \
        char got_[4096];                                                      \
        CHECK_OK(dump(put_text("in.csv", text), got_, sizeof got_));          \
        CHECK_EQ_STR(got_, want);                                             \
        CHECK_OK(dump(put_gz("in.csv.gz", text), got_, sizeof got_));         \
        CHECK_EQ_STR(got_, want);                                             \
    } while (0)

/* Expects reading to fail with `st` and a message holding each of the substrings. */
#define CHECK_FAILS(path, want_st, sub1, sub2)                                \
    do {                                                                      \
        static char got_[1 << 17];                                            \
        long live_ = mp_alloc_live();                                         \
        mp_status st_ = dump(path, got_, sizeof got_);                        \
        CHECK_MSG(st_ == (want_st), "got %s (%s), want %s", mp_status_name(st_), \
                  mp_error_message(), mp_status_name(want_st));               \
        CHECK_MSG(strstr(mp_error_message(), sub1) && strstr(mp_error_message(), sub2), \
                  "message '%s' lacks '%s' or '%s'", mp_error_message(), sub1, sub2); \
        CHECK_EQ_INT(mp_alloc_live(), live_);                                 \
    } while (0)

/* ===================================================================== */
/* Well-formed input                                                      */
/* ===================================================================== */

MP_TEST(csv_plain_records_and_lines)
{
    CHECK_READS("smiles,y\nCCO,1.5\nc1ccccc1,-2\n",
                "1:smiles|y\n2:CCO|1.5\n3:c1ccccc1|-2\n");
    /* no newline at the end of the last record */
    CHECK_READS("a,b\n1,2", "1:a|b\n2:1|2\n");
    /* empty fields stay empty strings */
    CHECK_READS("a,b,c\n,,\nx,,z\n", "1:a|b|c\n2:||\n3:x||z\n");
}

MP_TEST(csv_rfc4180_quoting)
{
    /* embedded comma, doubled quote, newline inside quotes (a record spanning
     * lines 3-4; the next record starts on line 5) */
    CHECK_READS("smiles,name\n"
                "\"C,C\",\"say \"\"hi\"\"\"\n"
                "\"multi\nline\",x\n"
                "CC,\"\"\n",
                "1:smiles|name\n2:C,C|say \"hi\"\n3:multi\nline|x\n5:CC|\n");
    /* a quoted header with commas in names (as in SIDER) */
    CHECK_READS("smiles,\"Injury, poisoning\",Eye\nC,1,0\n",
                "1:smiles|Injury, poisoning|Eye\n2:C|1|0\n");
}

MP_TEST(csv_crlf_and_lone_cr)
{
    CHECK_READS("a,b\r\n1,2\r\n\r\n3,4\r\n", "1:a|b\n2:1|2\n4:3|4\n");
    /* CRLF inside quotes is data and counts as one line */
    CHECK_READS("a,b\r\n\"x\r\ny\",2\r\n5,6\r\n", "1:a|b\n2:x\r\ny|2\n4:5|6\n");
    /* old Mac line ends: a lone CR ends a line too */
    CHECK_READS("a,b\r1,2\r\r3,4", "1:a|b\n2:1|2\n4:3|4\n");
}

MP_TEST(csv_utf8_bom_dropped)
{
    CHECK_READS("\xEF\xBB\xBFsmiles,y\nC,1\n", "1:smiles|y\n2:C|1\n");
    /* only at the very start: elsewhere it is data */
    CHECK_READS("a\n\xEF\xBB\xBF" "b\n", "1:a\n2:\xEF\xBB\xBF" "b\n");
    /* a BOM alone is an empty file */
    CHECK_READS("\xEF\xBB\xBF", "");
}

MP_TEST(csv_blank_lines_skipped)
{
    CHECK_READS("\n\nsmiles,y\n\n   \nC,1\n\t\n\r\nCC,2\n\n",
                "3:smiles|y\n6:C|1\n9:CC|2\n");
    CHECK_READS("", "");
    CHECK_READS("\n\n\n", "");
}

MP_TEST(csv_spaces_are_kept)
{
    /* RFC 4180: spaces belong to the field (libcsv would trim them) */
    CHECK_READS(" a , b\nC ,\" 1 \"\n", "1: a | b\n2:C | 1 \n");
}

MP_TEST(csv_gzip_detected_by_magic_not_name)
{
    const char *text = "smiles,y\nCCO,1\n";
    char got[256];
    /* gzip data in a file named .csv */
    CHECK_OK(dump(put_gz("really_gzip.csv", text), got, sizeof got));
    CHECK_EQ_STR(got, "1:smiles|y\n2:CCO|1\n");
    /* plain text in a file named .gz */
    CHECK_OK(dump(put_text("really_plain.csv.gz", text), got, sizeof got));
    CHECK_EQ_STR(got, "1:smiles|y\n2:CCO|1\n");
    /* a one-byte file cannot be gzip */
    CHECK_OK(dump(put_text("one.csv", "x"), got, sizeof got));
    CHECK_EQ_STR(got, "1:x\n");
}

MP_TEST(csv_gzip_concatenated_members)
{
    unsigned char *a, *b;
    size_t na = gzip_bytes("a,b\n1,", 6, &a);
    size_t nb = gzip_bytes("2\n3,4\n", 6, &b);
    unsigned char *both = malloc(na + nb);
    CHECK(both != NULL);
    memcpy(both, a, na);
    memcpy(both + na, b, nb);
    char got[256];
    mp_status st = dump(put_file("two.csv.gz", both, na + nb), got, sizeof got);
    free(a);
    free(b);
    free(both);
    CHECK_OK(st);
    CHECK_EQ_STR(got, "1:a|b\n2:1|2\n3:3|4\n");
}

MP_TEST(csv_long_input_crosses_buffers)
{
    /* 60,000 rows and one 700,000-byte field: both cross the reader's
     * internal chunks; every record must keep its content and line. */
    size_t n_rows = 60000, big = 700000;
    size_t cap = n_rows * 24 + big + 64;
    char *text = malloc(cap);
    CHECK(text != NULL);
    size_t len = (size_t)sprintf(text, "smiles,y\n");
    for (size_t i = 0; i < n_rows; i++) {
        if (i == 30000) {   /* a quoted field with a long run of commas and newlines */
            text[len++] = '"';
            for (size_t k = 0; k < big; k++)
                text[len++] = k % 100 == 99 ? '\n' : (k % 7 ? 'C' : ',');
            len += (size_t)sprintf(text + len, "\",big\n");
        }
        len += (size_t)sprintf(text + len, "C%zu,%zu\n", i, i);
    }
    text[len] = '\0';
    for (int gz = 0; gz < 2; gz++) {
        const char *path = gz ? put_gz("long.csv.gz", text) : put_text("long.csv", text);
        mp_csv_reader *r;
        CHECK_OK(mp_csv_open(&r, path));
        char **f;
        size_t nf, line, expect_line = 2, row = 0;
        CHECK_OK(mp_csv_next(r, &f, &nf, &line));
        CHECK_EQ_INT(line, 1);
        int bad = 0;
        for (;;) {
            mp_status st = mp_csv_next(r, &f, &nf, &line);
            if (st || nf == 0) {
                bad |= st != MP_OK;
                break;
            }
            if (nf == 2 && !strcmp(f[1], "big")) {
                bad |= strlen(f[0]) != big || line != expect_line;
                expect_line += big / 100 + 1;
                continue;
            }
            char want[32];
            snprintf(want, sizeof want, "C%zu", row);
            if (nf != 2 || strcmp(f[0], want) || (size_t)atol(f[1]) != row || line != expect_line) {
                bad = 1;
                break;
            }
            row++;
            expect_line++;
        }
        mp_csv_close(r);
        CHECK_MSG(!bad && row == n_rows, "gz=%d: stopped at row %zu, line %zu", gz, row, expect_line);
    }
    free(text);
}

MP_TEST(csv_writer_round_trip)
{
    char *rec[6] = { "plain", "with,comma", "with \"quote\"", "two\nlines", " lead", "" };
    const char *path = put_text("rt.csv", "");
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    mp_csv_write_record(fp, rec, 6);
    mp_csv_write_record(fp, rec + 1, 2);
    fclose(fp);
    char got[512];
    CHECK_OK(dump(path, got, sizeof got));
    CHECK_EQ_STR(got, "1:plain|with,comma|with \"quote\"|two\nlines| lead|\n"
                      "3:with,comma|with \"quote\"\n");
    /* what is written is RFC 4180 */
    fp = fopen(path, "rb");
    CHECK(fp != NULL);
    char raw[256] = "";
    size_t n = fread(raw, 1, sizeof raw - 1, fp);
    fclose(fp);
    raw[n] = '\0';
    CHECK_EQ_STR(raw, "plain,\"with,comma\",\"with \"\"quote\"\"\",\"two\nlines\",\" lead\",\n"
                      "\"with,comma\",\"with \"\"quote\"\"\"\n");
}

/* ===================================================================== */
/* Damaged input                                                          */
/* ===================================================================== */

MP_TEST(csv_missing_file_is_io_error)
{
    mp_csv_reader *r = (mp_csv_reader *)1;
    long live = mp_alloc_live();
    CHECK(mp_csv_open(&r, "/nonexistent/dir/x.csv") == MP_ERR_IO);
    CHECK(r == NULL);
    CHECK(strstr(mp_error_message(), "/nonexistent/dir/x.csv") != NULL);
    CHECK_EQ_INT(mp_alloc_live(), live);
}

MP_TEST(csv_unterminated_quote)
{
    CHECK_FAILS(put_text("unterm.csv", "a,b\n1,2\n3,\"abc\n4,5\n"), MP_ERR_FORMAT,
                "unterm.csv:", "opens on line 3");
    CHECK_FAILS(put_gz("unterm.csv.gz", "a,b\n\"x"), MP_ERR_FORMAT,
                "unterm.csv.gz:", "opens on line 2");
}

MP_TEST(csv_stray_quotes)
{
    /* a quote inside an unquoted field */
    CHECK_FAILS(put_text("stray1.csv", "a,b\n1,2\n3,ab\"c\n"), MP_ERR_FORMAT,
                "stray1.csv:3:", "quot");
    /* text after a closing quote */
    CHECK_FAILS(put_text("stray2.csv", "a,b\n\"x\"y,2\n"), MP_ERR_FORMAT,
                "stray2.csv:2:", "quot");
}

MP_TEST(csv_nul_byte)
{
    static const char bytes[] = "a,b\n1,2\n3\0,4\n";
    CHECK_FAILS(put_file("nul.csv", bytes, sizeof bytes - 1), MP_ERR_FORMAT, "nul.csv:3:", "NUL");
    unsigned char *gz;
    size_t n = gzip_bytes(bytes, sizeof bytes - 1, &gz);
    const char *p = put_file("nul.csv.gz", gz, n);
    free(gz);
    CHECK_FAILS(p, MP_ERR_FORMAT, "nul.csv.gz:3:", "NUL");
}

MP_TEST(csv_truncated_and_damaged_gzip)
{
    /* a file long enough that the cut falls well inside the data */
    char text[20000];
    size_t len = 0;
    len += (size_t)sprintf(text, "smiles,y\n");
    for (int i = 0; len < sizeof text - 40; i++)
        len += (size_t)sprintf(text + len, "C%dO%d,%d.%d\n", i, i * 7, i, i % 10);
    unsigned char *gz;
    size_t n = gzip_bytes(text, len, &gz);

    /* cut short at several places, including inside the 8-byte trailer */
    size_t cuts[] = { 5, 12, n / 2, n - 8, n - 1 };
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        const char *p = put_file("cut.csv.gz", gz, cuts[c]);
        CHECK_FAILS(p, MP_ERR_FORMAT, "cut.csv.gz:", "truncated");
        /* the message names the line being read when the data ran out */
        const char *m = strstr(mp_error_message(), "cut.csv.gz:") + strlen("cut.csv.gz:");
        long at = atol(m);
        if (cuts[c] == n / 2)
            CHECK_MSG(at > 100 && at < 1500, "cut at %zu of %zu: line %ld", cuts[c], n, at);
        else if (cuts[c] < 20)
            CHECK_EQ_INT(at, 1);
    }

    /* a corrupted byte in the compressed data (or its checksum) */
    unsigned char *bad = malloc(n);
    CHECK(bad != NULL);
    memcpy(bad, gz, n);
    bad[n - 6] ^= 0x55;   /* inside the CRC-32 of the trailer */
    const char *p = put_file("crc.csv.gz", bad, n);
    CHECK_FAILS(p, MP_ERR_FORMAT, "crc.csv.gz:", "damaged");
    memcpy(bad, gz, n);
    memset(bad + n / 3, 0xff, 16);
    p = put_file("junk.csv.gz", bad, n);
    CHECK_FAILS(p, MP_ERR_FORMAT, "junk.csv.gz:", "gzip");

    /* bytes after the end of the gzip stream that are not another member */
    unsigned char *tail = malloc(n + 4);
    CHECK(tail != NULL);
    memcpy(tail, gz, n);
    memcpy(tail + n, "junk", 4);
    p = put_file("tail.csv.gz", tail, n + 4);
    CHECK_FAILS(p, MP_ERR_FORMAT, "tail.csv.gz:", "after the end");
    free(tail);
    free(bad);
    free(gz);
}

MP_TEST(csv_error_is_sticky)
{
    mp_csv_reader *r;
    CHECK_OK(mp_csv_open(&r, put_text("sticky.csv", "a\n\"x\"y\nb\n")));
    char **f;
    size_t nf, line;
    CHECK_OK(mp_csv_next(r, &f, &nf, &line));
    CHECK(mp_csv_next(r, &f, &nf, &line) == MP_ERR_FORMAT);
    CHECK(mp_csv_next(r, &f, &nf, &line) == MP_ERR_FORMAT);
    CHECK_EQ_INT(nf, 0);
    mp_csv_close(r);
}
