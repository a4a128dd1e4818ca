/*
 * test_modelfile.c - the .mpm model file and its key/value header: round
 * trips, every truncation point, every single-byte flip, flips with a
 * recomputed CRC (so the structural checks are reached), wrong magic and
 * version, shape checks, out-of-memory at every allocation.
 */
#include "test.h"
#include "run/modelfile.h"

#include <limits.h>
#include <stdlib.h>

/* ===================================================================== */
/* mp_kv                                                                  */
/* ===================================================================== */

MP_TEST(modelfile_kv_round_trip)
{
    mp_kv *kv;
    CHECK_OK(mp_kv_new(&kv));
    const double d[4] = { 0.1, -1e-300, 12345.678901234567, 3 };
    const char *names[5] = { "logS", "a,b", "back\\slash", "", "new\nline" };
    CHECK_OK(mp_kv_set(kv, "model", "dmpnn"));
    CHECK_OK(mp_kv_set_int(kv, "hidden_size", 300));
    CHECK_OK(mp_kv_set_int(kv, "big", -9223372036854775807LL));
    CHECK_OK(mp_kv_set_double(kv, "dropout", 0.1));
    CHECK_OK(mp_kv_set_double(kv, "odd", NAN));
    CHECK_OK(mp_kv_set_doubles(kv, "target_scaler.mean", d, 4));
    CHECK_OK(mp_kv_set_doubles(kv, "empty", d, 0));
    CHECK_OK(mp_kv_set_strs(kv, "task_names", names, 5));
    CHECK_OK(mp_kv_set(kv, "note", "line one\nline two \\ end\r"));
    CHECK_OK(mp_kv_set(kv, "model", "ffn"));   /* replaces, keeps its place */
    CHECK(mp_kv_set(kv, "bad key", "x") == MP_ERR_ARG);
    CHECK(mp_kv_set(kv, "", "x") == MP_ERR_ARG);
    CHECK(mp_kv_set(kv, "k=v", "x") == MP_ERR_ARG);
    CHECK_EQ_INT(mp_kv_count(kv), 9);

    mp_buf text = { 0 };
    CHECK_OK(mp_kv_format(kv, &text));
    CHECK(strncmp(text.data, "model = ffn\nhidden_size = 300\n", 30) == 0);
    CHECK(strstr(text.data, "note = line one\\nline two \\\\ end\\r\n"));
    mp_kv *back;
    CHECK_OK(mp_kv_parse(&back, text.data, text.len, "x.mpm"));
    mp_buf_free(&text);
    CHECK_EQ_INT(mp_kv_count(back), 9);
    for (size_t i = 0; i < 9; i++) {
        CHECK_EQ_STR(mp_kv_key(back, i), mp_kv_key(kv, i));
        CHECK_EQ_STR(mp_kv_value(back, i), mp_kv_value(kv, i));
    }
    long long h, big;
    CHECK_OK(mp_kv_get_int(back, "hidden_size", 1, 100000, &h));
    CHECK_EQ_INT(h, 300);
    CHECK_OK(mp_kv_get_int(back, "big", LLONG_MIN, 0, &big));
    CHECK(big == -9223372036854775807LL);
    double x;
    CHECK_OK(mp_kv_get_double(back, "dropout", &x));
    CHECK(x == 0.1);
    CHECK_OK(mp_kv_get_double(back, "odd", &x));
    CHECK(isnan(x));
    double *arr;
    size_t n;
    CHECK_OK(mp_kv_get_doubles(back, "target_scaler.mean", &arr, &n));
    CHECK_EQ_INT(n, 4);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(arr[i] == d[i], "element %d: %.17g != %.17g", i, arr[i], d[i]);
    mp_free(arr);
    CHECK_OK(mp_kv_get_doubles(back, "empty", &arr, &n));
    CHECK(n == 0 && arr == NULL);
    char **s;
    CHECK_OK(mp_kv_get_strs(back, "task_names", &s, &n));
    CHECK_EQ_INT(n, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_STR(s[i], names[i]);
    mp_free(s);
    const char *note;
    CHECK_OK(mp_kv_get_str(back, "note", &note));
    CHECK_EQ_STR(note, "line one\nline two \\ end\r");

    /* getter errors name the file, the key and the value */
    CHECK(mp_kv_get_int(back, "hidden_size", 1, 100, &h) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "x.mpm") && strstr(mp_error_message(), "hidden_size") &&
          strstr(mp_error_message(), "300"));
    CHECK(mp_kv_get_int(back, "dropout", 0, 1, &h) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "not an integer"));
    CHECK(mp_kv_get_double(back, "model", &x) == MP_ERR_FORMAT);
    CHECK(mp_kv_get_doubles(back, "note", &arr, &n) == MP_ERR_FORMAT);
    CHECK(arr == NULL);
    CHECK(mp_kv_get_str(back, "depth", &note) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "'depth' is missing"));
    CHECK(mp_kv_get(back, "depth") == NULL);
    mp_kv_free(back);
    mp_kv_free(kv);
}

MP_TEST(modelfile_kv_parse_rejects)
{
    const char *bad[] = {
        "model dmpnn\n",               /* no ' = '           */
        "model = a\nmodel = b\n",      /* repeated key       */
        "bad key = 1\n",               /* space in key       */
        "x = a\\qb\n",                 /* unknown escape     */
        "x = trailing\\\n",            /* escape at the end  */
        "x = no newline",              /* unterminated       */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mp_kv *kv = (mp_kv *)1;
        mp_status st = mp_kv_parse(&kv, bad[i], strlen(bad[i]), "h.mpm");
        CHECK_MSG(st == MP_ERR_FORMAT, "case %zu accepted", i);
        CHECK(kv == NULL);
        CHECK_MSG(strstr(mp_error_message(), "h.mpm: header"), "case %zu: %s", i,
                  mp_error_message());
    }
    mp_kv *kv;
    CHECK(mp_kv_parse(&kv, "a = b\0c\n", 8, "h.mpm") == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "NUL"));
    /* comments and blank lines are fine; '=' inside a value too */
    const char *ok = "# molprop\n\nexpr = a = b\n";
    CHECK_OK(mp_kv_parse(&kv, ok, strlen(ok), "h.mpm"));
    CHECK_EQ_STR(mp_kv_get(kv, "expr"), "a = b");
    /* a hand-made bad string array */
    CHECK_OK(mp_kv_set(kv, "s", "a\\eb"));
    char **s;
    size_t n;
    CHECK(mp_kv_get_strs(kv, "s", &s, &n) == MP_ERR_FORMAT);
    CHECK_OK(mp_kv_set(kv, "s", "a\\x"));
    CHECK(mp_kv_get_strs(kv, "s", &s, &n) == MP_ERR_FORMAT);
    mp_kv_free(kv);
}

/* ===================================================================== */
/* The file                                                               */
/* ===================================================================== */

/* A small two-member ensemble: per member W (3x4), b (3), and a 2x2x2 cube. */
typedef struct {
    float     w[2][12], b[2][3], cube[8];
    mp_tensor t[5];
    mp_kv    *h;
} sample;

static mp_status sample_make(sample *s)
{
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i < 12; i++)
            s->w[m][i] = (float)(m * 100 + i) * 0.25f - 1.0f;
        for (int i = 0; i < 3; i++)
            s->b[m][i] = -(float)(m + i) / 3.0f;
    }
    for (int i = 0; i < 8; i++)
        s->cube[i] = (float)i * 1e-3f;
    s->t[0] = (mp_tensor){ "W", 0, 2, { 3, 4 }, s->w[0] };
    s->t[1] = (mp_tensor){ "b", 0, 1, { 3 }, s->b[0] };
    s->t[2] = (mp_tensor){ "W", 1, 2, { 3, 4 }, s->w[1] };
    s->t[3] = (mp_tensor){ "b", 1, 1, { 3 }, s->b[1] };
    s->t[4] = (mp_tensor){ "cube", 1, 3, { 2, 2, 2 }, s->cube };
    mp_status st = mp_kv_new(&s->h);
    if (st == MP_OK) st = mp_kv_set(s->h, "model", "ffn");
    if (st == MP_OK) st = mp_kv_set_int(s->h, "ensemble_size", 2);
    if (st == MP_OK) st = mp_kv_set_strs(s->h, "task_names", (const char *const[]){ "y" }, 1);
    return st;
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, fp) : 0;
    fclose(fp);
    return b;
}

static void put32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

MP_TEST(modelfile_round_trip)
{
    sample s;
    CHECK_OK(sample_make(&s));
    char path[1200];
    snprintf(path, sizeof path, "%s/m.mpm", mp_test_tmpdir());
    CHECK_OK(mp_modelfile_write(path, s.h, s.t, 5));

    mp_modelfile *mf;
    CHECK_OK(mp_modelfile_read(&mf, path));
    CHECK_EQ_INT(mf->version, MP_MODELFILE_VERSION);
    CHECK_EQ_INT(mf->n_tensors, 5);
    CHECK_EQ_INT(mf->n_blocks, 2);
    CHECK_EQ_STR(mp_kv_get(mf->header, "model"), "ffn");
    for (int i = 0; i < 5; i++) {
        const mp_tensor *a = &s.t[i], *b = &mf->tensors[i];
        CHECK_EQ_STR(b->name, a->name);
        CHECK(b->block == a->block && b->ndim == a->ndim);
        for (uint32_t d = 0; d < a->ndim; d++)
            CHECK(b->shape[d] == a->shape[d]);
        CHECK(memcmp(b->data, a->data, mp_tensor_numel(a) * 4) == 0);
    }
    const float *w;
    CHECK_OK(mp_modelfile_get(mf, 1, "W", 2, (const uint64_t[]){ 3, 4 }, &w));
    CHECK(w[5] == s.w[1][5]);
    CHECK(mp_modelfile_get(mf, 1, "W", 2, (const uint64_t[]){ 4, 3 }, &w) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "m.mpm") && strstr(mp_error_message(), "[3, 4]") &&
          strstr(mp_error_message(), "expected [4, 3]"));
    CHECK(mp_modelfile_get(mf, 2, "W", 2, (const uint64_t[]){ 3, 4 }, &w) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "member 2 is missing"));
    CHECK(mp_modelfile_find(mf, 0, "cube") == NULL && mp_modelfile_find(mf, 1, "cube"));
    mp_modelfile_free(mf);

    /* the bytes are what the layout says: magic, version, little-endian */
    size_t n;
    unsigned char *b = read_all(path, &n);
    CHECK(b);
    int ok = memcmp(b, "\x89MPM\r\n\x1a\n", 8) == 0 && b[8] == 2 && b[9] == 0 && b[12] == 5 &&
             b[16] == (unsigned char)n && b[17] == (unsigned char)(n >> 8);
    free(b);
    CHECK(ok);
    mp_kv_free(s.h);

    /* no tensors and no header at all is still a valid file */
    CHECK_OK(mp_modelfile_write(path, NULL, NULL, 0));
    CHECK_OK(mp_modelfile_read(&mf, path));
    CHECK(mf->n_tensors == 0 && mf->n_blocks == 0 && mp_kv_count(mf->header) == 0);
    mp_modelfile_free(mf);
}

MP_TEST(modelfile_write_rejects)
{
    sample s;
    CHECK_OK(sample_make(&s));
    char path[1200];
    snprintf(path, sizeof path, "%s/bad.mpm", mp_test_tmpdir());
    mp_tensor t[2] = { s.t[0], s.t[0] };
    CHECK(mp_modelfile_write(path, s.h, t, 2) == MP_ERR_ARG);   /* repeated */
    CHECK(strstr(mp_error_message(), "twice"));
    t[1].block = 1;
    t[1].ndim = 5;
    CHECK(mp_modelfile_write(path, s.h, t, 2) == MP_ERR_ARG);
    t[1].ndim = 2;
    t[1].name = "";
    CHECK(mp_modelfile_write(path, s.h, t, 2) == MP_ERR_ARG);
    t[1].name = "x";
    t[1].data = NULL;
    CHECK(mp_modelfile_write(path, s.h, t, 2) == MP_ERR_ARG);
    t[1].data = s.cube;
    t[1].shape[0] = UINT64_MAX / 2;
    CHECK(mp_modelfile_write(path, s.h, t, 2) == MP_ERR_ARG);
    FILE *fp = fopen(path, "rb");
    CHECK(fp == NULL);   /* nothing was written by any of these */
    CHECK(mp_modelfile_write("/nonexistent-dir/m.mpm", s.h, s.t, 5) == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "/nonexistent-dir/m.mpm"));
    mp_kv_free(s.h);
}

/* Parses bytes in memory under the name `origin` (the loops below), from a
 * copy of exactly n bytes so that ASan sees any read past the end. */
static mp_status parse_bytes(const char *origin, const unsigned char *b, size_t n)
{
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact)
        return MP_ERR_NOMEM;
    memcpy(exact, b, n);
    mp_modelfile *mf = (mp_modelfile *)1;
    mp_status st = mp_modelfile_parse(&mf, exact, n, origin);
    free(exact);
    if (st != MP_OK && mf != NULL)
        return MP_ERR_INTERNAL;   /* *out must be NULL on failure */
    mp_modelfile_free(mf);
    return st;
}

/* Writes bytes to a file and reads it back as a model file. */
static mp_status load_bytes(const char *path, const unsigned char *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return MP_ERR_IO;
    fwrite(b, 1, n, fp);
    fclose(fp);
    mp_modelfile *mf;
    mp_status st = mp_modelfile_read(&mf, path);
    mp_modelfile_free(mf);
    return st;
}

MP_TEST(modelfile_refuses_damage)
{
    sample s;
    CHECK_OK(sample_make(&s));
    char path[1200], bad[1200];
    snprintf(path, sizeof path, "%s/good.mpm", mp_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/damaged.mpm", mp_test_tmpdir());
    CHECK_OK(mp_modelfile_write(path, s.h, s.t, 5));
    mp_kv_free(s.h);
    size_t n;
    unsigned char *b = read_all(path, &n), *c = malloc(n + 8);
    CHECK(b && c && n > 100);
    long live = mp_alloc_live();
    char fail[300] = "";

    /* every truncation point (in memory: the same checks as a file read,
     * which the specific cases below go through) */
    for (size_t len = 0; len < n && !fail[0]; len++) {
        mp_status st = parse_bytes(bad, b, len);
        if (st != MP_ERR_FORMAT || !strstr(mp_error_message(), bad))
            snprintf(fail, sizeof fail, "truncated to %zu bytes: %s (%s)", len,
                     mp_status_name(st), mp_error_message());
    }
    /* every single-byte flip: the CRC (or an earlier check) catches it */
    for (size_t i = 0; i < n && !fail[0]; i++) {
        memcpy(c, b, n);
        c[i] ^= 0x5a;
        mp_status st = parse_bytes(bad, c, n);
        if (st == MP_OK || !strstr(mp_error_message(), bad))
            snprintf(fail, sizeof fail, "byte %zu flipped: %s (%s)", i, mp_status_name(st),
                     mp_error_message());
    }
    /* flips with the CRC recomputed, so the parser itself meets the damage:
     * every outcome must be clean (ASan watches the reads); count refusals */
    int refused = 0;
    for (size_t i = 8; i < n - 4 && !fail[0]; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(c, b, n);
            c[i] ^= (unsigned char)(1u << bit);
            put32(c + n - 4, mp_crc32(0, c, n - 4));
            unsigned char *exact = malloc(n);
            CHECK(exact);
            memcpy(exact, c, n);
            mp_modelfile *mf = NULL;
            mp_status st = mp_modelfile_parse(&mf, exact, n, "fuzz");
            free(exact);
            if (st == MP_OK) {
                /* accepted: then it must be self-consistent */
                for (size_t k = 0; k < mf->n_tensors; k++)
                    if (mf->tensors[k].block >= mf->n_blocks || !mf->tensors[k].name[0])
                        snprintf(fail, sizeof fail, "byte %zu: inconsistent tensor table", i);
                mp_modelfile_free(mf);
            } else {
                refused++;
                if (mf || !strstr(mp_error_message(), "fuzz"))
                    snprintf(fail, sizeof fail, "byte %zu: bad failure (%s)", i,
                             mp_error_message());
            }
        }
    }
    CHECK_MSG(!fail[0], "%s", fail);
    CHECK(refused > 100);

    /* specific faults, specific messages */
    memcpy(c, b, n);
    c[0] = 'X';
    CHECK(load_bytes(bad, c, n) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "not a molprop model file"));
    memcpy(c, b, n);
    put32(c + 8, 3);
    CHECK(load_bytes(bad, c, n) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "version 3"));
    memcpy(c, b, n);
    put32(c + 8, 0);
    CHECK(load_bytes(bad, c, n) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "version 0"));
    CHECK(load_bytes(bad, b, n - 1) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "truncated"));
    memcpy(c, b, n);
    c[n / 2] ^= 1;
    CHECK(load_bytes(bad, c, n) == MP_ERR_CHECKSUM);
    CHECK(strstr(mp_error_message(), "corrupt"));
    memcpy(c, b, n);
    memset(c + n, 0, 8);
    CHECK(load_bytes(bad, c, n + 8) == MP_ERR_FORMAT);   /* trailing bytes */
    /* a tensor count that overruns, with a valid CRC */
    memcpy(c, b, n);
    put32(c + 12, 6);
    put32(c + n - 4, mp_crc32(0, c, n - 4));
    CHECK(mp_modelfile_parse(&(mp_modelfile *){ NULL }, c, n, "six") == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "six:"));
    CHECK(load_bytes("/nonexistent-dir/none.mpm", b, 0) == MP_ERR_IO);
    mp_modelfile *mf;
    CHECK(mp_modelfile_read(&mf, "/nonexistent-dir/none.mpm") == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "/nonexistent-dir/none.mpm"));
    CHECK_EQ_INT(mp_alloc_live(), live);
    free(b);
    free(c);
}

MP_TEST(modelfile_out_of_memory)
{
    sample s;
    CHECK_OK(sample_make(&s));
    char path[1200];
    snprintf(path, sizeof path, "%s/oom.mpm", mp_test_tmpdir());
    long live = mp_alloc_live();
    int write_fail = 0, read_fail = 0, read_ok = 0;
    for (long k = 0; k < 40; k++) {
        mp_alloc_fail_after(k);
        mp_status st = mp_modelfile_write(path, s.h, s.t, 5);
        mp_alloc_fail_after(-1);
        CHECK(st == MP_OK || st == MP_ERR_NOMEM);
        write_fail += st != MP_OK;
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    CHECK_OK(mp_modelfile_write(path, s.h, s.t, 5));
    for (long k = 0; k < 80; k++) {
        mp_modelfile *mf = NULL;
        mp_alloc_fail_after(k);
        mp_status st = mp_modelfile_read(&mf, path);
        mp_alloc_fail_after(-1);
        CHECK(st == MP_OK || st == MP_ERR_NOMEM);
        if (st == MP_OK) {
            read_ok++;
            CHECK(mf && mf->n_tensors == 5);
        } else {
            read_fail++;
            CHECK(mf == NULL);
        }
        mp_modelfile_free(mf);
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    CHECK(write_fail > 0 && read_fail > 5 && read_ok > 0);
    mp_kv_free(s.h);
}

MP_TEST(modelfile_kv_scaler)
{
    const double x[6] = { 1, 10, 3, 10, NAN, 13 };
    mp_scaler s, back;
    CHECK_OK(mp_scaler_fit(&s, MP_SCALE_TARGETS, x, 2, NULL, 3));
    mp_kv *kv;
    CHECK_OK(mp_kv_new(&kv));
    CHECK_OK(mp_kv_set_scaler(kv, "target_scaler", &s));
    CHECK_EQ_STR(mp_kv_get(kv, "target_scaler.kind"), "targets");
    /* through the text form, as a model file carries it */
    mp_buf text = { 0 };
    CHECK_OK(mp_kv_format(kv, &text));
    mp_kv *kv2;
    CHECK_OK(mp_kv_parse(&kv2, text.data, text.len, "s.mpm"));
    mp_buf_free(&text);
    CHECK_OK(mp_kv_get_scaler(kv2, "target_scaler", 2, &back));
    CHECK(back.kind == MP_SCALE_TARGETS && back.n_cols == 2);
    for (int c = 0; c < 2; c++)
        CHECK(back.mean[c] == s.mean[c] && back.std[c] == s.std[c]);
    mp_scaler_free(&back);
    CHECK(mp_kv_get_scaler(kv2, "target_scaler", 3, &back) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "s.mpm") && strstr(mp_error_message(), "expected 3"));
    CHECK(mp_kv_get_scaler(kv2, "feature_scaler", 0, &back) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "feature_scaler.kind' is missing"));
    CHECK_OK(mp_kv_set(kv2, "target_scaler.std", "1,0"));
    CHECK(mp_kv_get_scaler(kv2, "target_scaler", 2, &back) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "s.mpm: scaler: std of column 1"));
    CHECK(back.mean == NULL);
    CHECK_OK(mp_kv_set(kv2, "target_scaler.kind", "other"));
    CHECK(mp_kv_get_scaler(kv2, "target_scaler", 2, &back) == MP_ERR_FORMAT);
    mp_kv_free(kv2);
    mp_kv_free(kv);
    mp_scaler_free(&s);
}
