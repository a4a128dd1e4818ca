/*
 * test_robust_inputs.c - huge and hostile inputs (docs/limits.md): a CSV
 * record past the record limit, a record of too many fields, 10,000
 * columns, a gzip bomb, SMILES past the length and atom limits, a model
 * file whose header claims a model far larger than its tensors, a feature
 * cache claiming 2^31 atoms: each refused with a message naming the file
 * (or the molecule), or processed.
 */
#include "test.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "featurize/featurize.h"
#include "featurize/limits.h"
#include "run/ensemble.h"
#include "run/modelfile.h"

#include <stdlib.h>
#include <zlib.h>

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* Writes head, then `rep` times the n bytes of unit, then tail. */
static int write_rep(const char *path, const char *head, const char *unit, size_t n, size_t rep,
                     const char *tail)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    fputs(head, fp);
    for (size_t i = 0; i < rep; i++)
        fwrite(unit, 1, n, fp);
    fputs(tail, fp);
    return fclose(fp) == 0;
}

MP_TEST(robust_csv_record_and_field_limits)
{
    /* 20 MiB on one line (a 1 GB line is the same, only slower to write):
     * refused at the 16 MiB limit, naming line 2 */
    const char *path = tmp("long.csv");
    static char unit[1 << 20];
    memset(unit, 'C', sizeof unit);
    CHECK(write_rep(path, "smiles,y\n", unit, sizeof unit, 20, ",1\n"));
    mp_dataset *d = NULL;
    double t0 = mp_time_now();
    mp_status st = mp_dataset_load(&d, path, NULL);
    CHECK_EQ_INT(st, MP_ERR_FORMAT);
    CHECK(d == NULL);
    CHECK(strstr(mp_error_message(), "long.csv:2:") && strstr(mp_error_message(), "longer than"));
    CHECK_MSG(mp_time_now() - t0 < 30, "took %.1f s", mp_time_now() - t0);

    /* a quote that never closes is a record that never ends: the same */
    CHECK(write_rep(path, "smiles,y\n\"C", "CCCCCCCC\n", 9, 2000000, ""));
    CHECK_EQ_INT(mp_dataset_load(&d, path, NULL), MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), ":2: a record longer than") != NULL);

    /* 100,001 fields */
    CHECK(write_rep(path, "smiles", ",t", 2, MP_CSV_MAX_FIELDS, "\n"));
    CHECK_EQ_INT(mp_dataset_load(&d, path, NULL), MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "long.csv:1: more than 100000 fields") != NULL);

    /* the limits can be set lower for one reader */
    CHECK(write_rep(path, "a,b,c\n", "x", 1, 300, "\n"));
    mp_csv_reader *r = NULL;
    CHECK_OK(mp_csv_open(&r, path));
    mp_csv_set_limits(r, 100, 2);
    char **f;
    size_t nf, line;
    CHECK_EQ_INT(mp_csv_next(r, &f, &nf, &line), MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "more than 2 fields") != NULL);
    mp_csv_close(r);
    CHECK_OK(mp_csv_open(&r, path));
    mp_csv_set_limits(r, 100, 0);
    CHECK_OK(mp_csv_next(r, &f, &nf, &line));
    CHECK_EQ_INT(nf, 3);
    CHECK_EQ_INT(mp_csv_next(r, &f, &nf, &line), MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), ":2: a record longer than 100 bytes") != NULL);
    mp_csv_close(r);
}

MP_TEST(robust_csv_ten_thousand_columns)
{
    const char *path = tmp("wide.csv");
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    fputs("smiles", fp);
    for (int j = 0; j < 10000; j++)
        fprintf(fp, ",t%d", j);
    for (int i = 0; i < 5; i++) {
        fputs(i % 2 ? "\nCCO" : "\nc1ccccc1", fp);
        for (int j = 0; j < 10000; j++)
            fprintf(fp, (i + j) % 3 ? ",%d" : ",", (i + j) % 2);
    }
    fputc('\n', fp);
    fclose(fp);
    mp_dataset *d = NULL;
    double t0 = mp_time_now();
    CHECK_OK(mp_dataset_load(&d, path, NULL));
    double dt = mp_time_now() - t0;
    CHECK(d->n_tasks == 10000 && d->n_rows == 5);
    CHECK(isnan(d->targets[0]) && d->targets[1] == 1.0 && !strcmp(d->task_names[9999], "t9999"));
    mp_dataset_free(d);
    CHECK_MSG(dt < 10, "10,000 columns took %.1f s", dt);

    /* a repeated name among them is still found, naming the first pair */
    fp = fopen(path, "w");
    CHECK(fp != NULL);
    fputs("smiles", fp);
    for (int j = 0; j < 10000; j++)
        fprintf(fp, ",t%d", j == 7000 ? 4000 : j == 9000 ? 20 : j);
    fputs("\nC", fp);
    for (int j = 0; j < 10000; j++)
        fputs(",1", fp);
    fputc('\n', fp);
    fclose(fp);
    CHECK_EQ_INT(mp_dataset_load(&d, path, NULL), MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "'t4000' appears twice (columns 4002 and 7002)"),
              "%s", mp_error_message());
}

/* text as one gzip member into out[cap]; its length, or 0. */
static size_t gz_member(const void *text, size_t n, unsigned char *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    z.next_in = (Bytef *)text;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    return r == Z_STREAM_END ? len : 0;
}

MP_TEST(robust_gzip_bomb_refused)
{
    /* a header member, then 100 members of one 1 MiB line each: some 100 KB
     * inflating to 100 MiB, refused past 64 MiB (memory stays one chunk
     * and one record all along) */
    static char line[1 << 20];
    memset(line, 'C', sizeof line - 3);
    memcpy(line + sizeof line - 3, ",1\n", 3);
    static unsigned char gz[1 << 16], head[256];
    size_t n = gz_member(line, sizeof line, gz, sizeof gz);
    size_t nh = gz_member("smiles,y\n", 9, head, sizeof head);
    CHECK(n > 0 && nh > 0);
    const char *path = tmp("bomb.csv.gz");
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    fwrite(head, 1, nh, fp);
    for (int i = 0; i < 100; i++)
        fwrite(gz, 1, n, fp);
    fclose(fp);
    mp_dataset *d = NULL;
    mp_status st = mp_dataset_load(&d, path, NULL);
    CHECK_EQ_INT(st, MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "bomb.csv.gz") && strstr(mp_error_message(), "gzip bomb"),
              "%s", mp_error_message());
    /* the same text, honestly compressed (one member per line of a file
     * of 3 lines): read as usual */
    fp = fopen(path, "wb");
    CHECK(fp != NULL);
    fwrite(head, 1, nh, fp);
    for (int i = 0; i < 3; i++)
        fwrite(gz, 1, n, fp);
    fclose(fp);
    CHECK_EQ_INT(mp_dataset_load(&d, path, NULL), MP_OK);
    CHECK_EQ_INT(d->n_rows, 3);
    mp_dataset_free(d);
}

MP_TEST(robust_smiles_limits)
{
    static char big[100001];
    memset(big, 'C', 100000);
    char why[256];
    CHECK_EQ_INT(mp_smiles_count_atoms("CC(=O)Oc1ccccc1C(=O)O"), 13);
    CHECK_EQ_INT(mp_smiles_count_atoms("[NH4+].[Cl-]"), 2);
    CHECK_EQ_INT(mp_smiles_count_atoms("ClCBr"), 3);
    CHECK_EQ_INT(mp_smiles_count_atoms("*C[C@@H](F)I"), 5);
    CHECK(!mp_smiles_oversized("CCO", why, sizeof why));
    CHECK(mp_smiles_oversized(big, why, sizeof why) && strstr(why, "100000 characters"));
    big[MP_SMILES_MAX_CHARS] = '\0';
    CHECK(mp_smiles_oversized(big, why, sizeof why) && strstr(why, "20000 atoms"));
    big[MP_SMILES_MAX_ATOMS] = '\0';
    CHECK(!mp_smiles_oversized(big, why, sizeof why));
    big[MP_SMILES_MAX_ATOMS] = 'C';
    big[MP_SMILES_MAX_ATOMS + 1] = '\0';
    CHECK(mp_smiles_oversized(big, why, sizeof why) && strstr(why, "1001 atoms"));

    /* through featurization: invalid with the reason, at once; the rows
     * around it featurize as usual */
    memset(big, 'C', 100000);
    big[100000] = '\0';
    const char *smiles[3] = { "CCO", big, "c1ccccc1" };
    mp_features *f = NULL;
    double t0 = mp_time_now();
    CHECK_OK(mp_featurize(&f, smiles, 3, NULL));
    double dt = mp_time_now() - t0;
    int ok = f->g.valid[0] && !f->g.valid[1] && f->g.valid[2] && f->error[1] &&
             strstr(f->error[1], "limit of 20000");
    mp_features_free(f);
    CHECK(ok);
    CHECK_MSG(dt < 5, "featurizing took %.1f s", dt);
}

/* A real small model's file, with header key `key` set to `value`, and
 * (n_extra > 0) that many more tensor blocks of one 1-value tensor. */
static mp_status doctored_model(const char *src, const char *dst, const char *key,
                                const char *value, int n_extra)
{
    mp_modelfile *mf = NULL;
    mp_status st = mp_modelfile_read(&mf, src);
    if (st)
        return st;
    if ((st = mp_kv_set(mf->header, key, value)) == MP_OK) {
        size_t n = mf->n_tensors + (size_t)n_extra;
        mp_tensor *t = mp_calloc(n, sizeof *t);
        static const float one = 1.0f;
        if (!t) {
            st = MP_ERR_NOMEM;
        } else {
            memcpy(t, mf->tensors, sizeof *t * mf->n_tensors);
            for (int i = 0; i < n_extra; i++)
                t[mf->n_tensors + i] = (mp_tensor){ "W_h", (uint32_t)(1 + i), 1, { 1 }, &one };
            st = mp_modelfile_write(dst, mf->header, t, n);
            mp_free(t);
        }
    }
    mp_modelfile_free(mf);
    return st;
}

MP_TEST(robust_model_file_claiming_huge_model)
{
    const char *dir = tmp("small-model");
    char out[4096], src[1400];
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 8 "
                             "--depth 2 --quiet --threads 1 --save-dir '%s'",
                             mp_test_shared("datasets/freesolv.csv.gz"), dir), 0);
    snprintf(src, sizeof src, "%s/model.mpm", dir);
    const char *bad = tmp("huge.mpm");
    mp_ensemble *e = NULL;
    /* hidden 65536: W_h alone would be 2^32 parameters, 16 GiB a block */
    CHECK_OK(doctored_model(src, bad, "hidden", "65536", 0));
    double t0 = mp_time_now();
    long live = mp_alloc_live();
    CHECK_EQ_INT(mp_ensemble_load(&e, bad, "cpu"), MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "huge.mpm: the header describes a model of") &&
              strstr(mp_error_message(), "parameters per member"), "%s", mp_error_message());
    CHECK(mp_time_now() - t0 < 5 && mp_alloc_live() == live);
    /* an FFN width past the model's range (10^12-odd parameters): refused
     * by the configuration check before anything is counted or allocated */
    CHECK_OK(doctored_model(src, bad, "ffn_hidden", "1000000", 0));
    CHECK_EQ_INT(mp_ensemble_load(&e, bad, "cpu"), MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "huge.mpm: ") &&
              strstr(mp_error_message(), "ffn_hidden = 1000000 (must be 0 .. 65536"), "%s",
              mp_error_message());   /* out of the model's range: refused before counting */
    /* 100,000 members, each of which but the first holds one value */
    CHECK_OK(doctored_model(src, bad, "ensemble_size", "100000", 99999));
    t0 = mp_time_now();
    CHECK_EQ_INT(mp_ensemble_load(&e, bad, "cpu"), MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "for member 1") != NULL, "%s", mp_error_message());
    CHECK(mp_time_now() - t0 < 10);
    /* the untouched file still loads */
    CHECK_OK(mp_ensemble_load(&e, src, "cpu"));
    mp_ensemble_free(e);
}

MP_TEST(robust_feature_cache_claiming_huge_store)
{
    const char *smiles[2] = { "CCO", "c1ccccc1" };
    mp_features *f = NULL;
    CHECK_OK(mp_featurize(&f, smiles, 2, NULL));
    const char *path = tmp("small.mpf");
    mp_status st = mp_features_save(f, path);
    mp_features_free(f);
    CHECK_OK(st);
    size_t n;
    unsigned char *b = (unsigned char *)mp_test_slurp(path, &n);
    CHECK(b != NULL && n > 64);
    /* n_atoms (header offset 28) = 2^31 - 1, CRC recomputed: the size the
     * header implies is not the file's, refused before any allocation */
    int32_t big = INT32_MAX;
    memcpy(b + 28, &big, 4);
    uint32_t crc = mp_crc32(0, b, n - 4);
    memcpy(b + n - 4, &crc, 4);
    const char *bad = tmp("huge.mpf");
    FILE *fp = fopen(bad, "wb");
    CHECK(fp != NULL);
    fwrite(b, 1, n, fp);
    fclose(fp);
    mp_free(b);
    long live = mp_alloc_live();
    CHECK_EQ_INT(mp_features_load(&f, bad), MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "huge.mpf") && strstr(mp_error_message(), "implies"),
              "%s", mp_error_message());
    CHECK_EQ_INT(mp_alloc_live(), live);
}

MP_TEST(robust_model_file_many_tensors_and_keys)
{
    /* 200,000 one-value tensors (a hostile file may hold one per 21 bytes):
     * written and parsed in well under a minute (the repeat check sorts;
     * comparing every pair took hours), and a repeat among them still found */
    enum { N = 200000 };
    mp_tensor *t = mp_calloc(N, sizeof *t);
    char *names = mp_malloc((size_t)N * 8);
    CHECK(t && names);
    static const float one = 1.0f;
    for (int i = 0; i < N; i++) {
        snprintf(names + (size_t)i * 8, 8, "t%d", i % 100000);
        t[i] = (mp_tensor){ names + (size_t)i * 8, (uint32_t)(i / 100000), 1, { 1 }, &one };
    }
    const char *path = tmp("many.mpm");
    double t0 = mp_time_now();
    mp_status st = mp_modelfile_write(path, NULL, t, N);
    mp_modelfile *mf = NULL;
    if (st == MP_OK)
        st = mp_modelfile_read(&mf, path);
    double dt = mp_time_now() - t0;
    int n_ok = mf && mf->n_tensors == N && mf->n_blocks == 2;
    mp_modelfile_free(mf);
    t[N - 1].name = t[N - 2].name;   /* a repeat: refused by the writer */
    mp_status st2 = mp_modelfile_write(path, NULL, t, N);
    mp_free(t);
    mp_free(names);
    CHECK_OK(st);
    CHECK(n_ok);
    CHECK_MSG(dt < 30, "200,000 tensors took %.1f s", dt);
    CHECK_EQ_INT(st2, MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "given twice") != NULL);

    /* a header of more than 4096 keys */
    mp_buf b = { 0 };
    for (int i = 0; i < 5000; i++)
        CHECK_OK(mp_buf_printf(&b, "k%d = v\n", i));
    mp_kv *kv = NULL;
    st = mp_kv_parse(&kv, b.data, b.len, "keys.mpm");
    mp_buf_free(&b);
    CHECK_EQ_INT(st, MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "more than 4096 keys") != NULL);
}

/* ===================================================================== */
/* A read interrupted by a signal (standard input from a pipe, a handler  */
/* without SA_RESTART)                                                    */
/* ===================================================================== */

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;
static int alarm_stops;   /* 1: the handler requests a stop, as the CLI's does */

static void on_alarm(int sig)
{
    alarms++;
    if (alarm_stops)
        mp_interrupt_request(SIGINT);
}

static void *late_writer(void *arg)
{
    int fd = *(int *)arg;
    usleep(300000);
    static const char text[] = "smiles,y\nCCO,1\n";
    ssize_t w = write(fd, text, sizeof text - 1);
    (void)w;
    close(fd);
    return NULL;
}

/* Reads the pipe's records after a 100 ms alarm interrupts the blocked read. */
static mp_status read_pipe_interrupted(int stops, size_t *n_records)
{
    int p[2];
    if (pipe(p) != 0)
        return MP_ERR_INTERNAL;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;   /* no SA_RESTART: the blocked read returns EINTR */
    sigaction(SIGALRM, &sa, &old);
    alarm_stops = stops;
    alarms = 0;
    pthread_t th;
    int wfd = p[1];
    pthread_create(&th, NULL, late_writer, &wfd);
    struct itimerval it = { { 0, 0 }, { 0, 100000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    char path[64];
    snprintf(path, sizeof path, "/dev/fd/%d", p[0]);
    mp_csv_reader *r = NULL;
    mp_status st = mp_csv_open(&r, path);
    *n_records = 0;
    for (;;) {
        char **f;
        size_t nf, line;
        if (st || (st = mp_csv_next(r, &f, &nf, &line)) || nf == 0)
            break;
        (*n_records)++;
    }
    mp_csv_close(r);
    pthread_join(th, NULL);
    close(p[0]);
    sigaction(SIGALRM, &old, NULL);
    return st;
}

MP_TEST(robust_csv_read_interrupted_by_a_signal)
{
    size_t n;
    mp_interrupt_clear();
    /* a signal that asks for nothing: the read goes on */
    CHECK_OK(read_pipe_interrupted(0, &n));
    CHECK(alarms == 1 && n == 2);
    /* a stop request: the read ends with it, not with an I/O error */
    mp_status st = read_pipe_interrupted(1, &n);
    mp_interrupt_clear();
    CHECK_EQ_INT(st, MP_ERR_INTERRUPTED);
    CHECK(strstr(mp_error_message(), "SIGINT") != NULL);
}
