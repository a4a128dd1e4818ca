/*
 * test_registry.c - the dataset registry (data/datasets.tsv): parsing and
 * its agreement with the mirror's MANIFEST.tsv, lookup, SHA-256, fetching
 * from a mirror or a URL (checksum mismatch leaves nothing behind), and the
 * `molprop data` command end to end through the binary in $MOLPROP_BIN.
 */
#include "test.h"
#include "data/registry.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

/* <tmpdir>/<rel> in a rotating set of static buffers (a few live at once). */
static const char *tmp_path(const char *rel)
{
    static char bufs[8][1200];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", mp_test_tmpdir(), rel);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(p, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "test: cannot write %s\n", path);
        exit(2);
    }
}

/* Reads a whole file (malloc'd); NULL if absent. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    if (!p || fread(p, 1, (size_t)len, fp) != (size_t)len)
        exit(2);
    fclose(fp);
    *n = (size_t)len;
    return p;
}

/* Copies src to dst, flipping one byte in the middle when `corrupt`. */
static void copy_file(const char *src, const char *dst, int corrupt)
{
    size_t n;
    unsigned char *p = read_bytes(src, &n);
    if (!p)
        exit(2);
    if (corrupt)
        p[n / 2] ^= 0x01;
    write_bytes(dst, p, n);
    free(p);
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0777) != 0 && access(path, F_OK) != 0) {
        fprintf(stderr, "test: cannot create %s\n", path);
        exit(2);
    }
}

/* Number of entries (other than . and ..) in a directory; -1 if absent. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static const char *mirror_dir(void)
{
    const char *m = getenv("MOLPROP_DATA_MIRROR");
    return m && *m && access(m, F_OK) == 0 ? m : NULL;
}

/* Environment changes inside a test: the first env_set of a variable keeps
 * its original value, env_restore puts that back. */
typedef struct { const char *name; char *old; int saved; } saved_env;

static void env_set(saved_env *s, const char *name, const char *value)
{
    if (!s->saved) {
        const char *o = getenv(name);
        s->name = name;
        s->old = o ? strdup(o) : NULL;
        s->saved = 1;
    }
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static void env_restore(saved_env *s)
{
    if (s->old)
        setenv(s->name, s->old, 1);
    else
        unsetenv(s->name);
    free(s->old);
    s->old = NULL;
    s->saved = 0;
}

/*
 * Runs `env ENV "$MOLPROP_BIN" ARGS 2>&1` and returns its exit status (-1 if
 * it did not exit normally), with stdout+stderr in out.
 */
static int run_cli(const char *env, const char *args, char *out, size_t cap)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env %s '%s' %s 2>&1", env, getenv("MOLPROP_BIN"), args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    while (fgetc(p) != EOF)   /* drain the rest so the child can exit */
        ;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ===================================================================== */
/* The registry file                                                      */
/* ===================================================================== */

MP_TEST(registry_parses_the_repository_file)
{
    mp_registry *reg;
    long live = mp_alloc_live();
    CHECK_OK(mp_registry_load(&reg, NULL));   /* default: data/datasets.tsv */
    CHECK_EQ_INT(reg->n, 20);   /* the paper's 19 and the 12-target qm9_full */
    const mp_dataset_info *e = mp_registry_find(reg, "esol");
    CHECK(e != NULL);
    CHECK_EQ_STR(e->file, "esol.csv.gz");
    CHECK_EQ_INT(e->rows, 1128);
    CHECK_EQ_INT(e->tasks, 1);
    CHECK(e->task_type == MP_TASK_REGRESSION);
    CHECK_EQ_STR(e->metric, "RMSE");
    CHECK_EQ_STR(e->sha256, "661b292644502400f7fac2b5bfd1db9880698d85d9435843c2b6276b8fc0d469");
    CHECK(mp_registry_find(reg, "ESOL") == e);
    CHECK(mp_registry_find(reg, "esol.csv.gz") == NULL);
    CHECK(mp_registry_find(reg, "nope") == NULL);
    /* by file: any directory, with or without .gz */
    CHECK(mp_registry_find_file(reg, "data/esol.csv.gz") == e);
    CHECK(mp_registry_find_file(reg, "/tmp/x/esol.csv") == e);
    CHECK(mp_registry_find_file(reg, "esol.csv.gz") == e);
    CHECK(mp_registry_find_file(reg, "data/esol.csv.bz2") == NULL);
    CHECK(mp_registry_find_file(reg, "data/myesol.csv.gz") == NULL);
    const mp_dataset_info *h = mp_registry_find_file(reg, "hiv.csv");
    CHECK(h && h->task_type == MP_TASK_CLASSIFICATION && !strcmp(h->metric, "ROC-AUC"));
    CHECK_EQ_STR(mp_registry_find(reg, "muv")->metric, "PRC-AUC");
    CHECK_EQ_STR(mp_registry_find(reg, "qm9")->metric, "MAE");
    CHECK_EQ_INT(mp_registry_find(reg, "toxcast")->tasks, 617);
    CHECK_EQ_INT(mp_registry_find(reg, "qm9")->rows, 133885);
    /* the three the mirror lacks: a public url, no pinned checksum */
    const mp_dataset_info *pcba = mp_registry_find(reg, "pcba");
    CHECK(pcba && !strcmp(pcba->file, "pcba.csv.gz") && !pcba->sha256 && pcba->rows == 437929 &&
          pcba->tasks == 128 && pcba->task_type == MP_TASK_CLASSIFICATION);
    CHECK(pcba->url && !strncmp(pcba->url, "https://", 8) && !strcmp(pcba->ignore, "mol_id"));
    const mp_dataset_info *chembl = mp_registry_find(reg, "chembl");
    CHECK(chembl && chembl->rows == 456331 && chembl->tasks == 1310 && !chembl->sha256 &&
          !strcmp(chembl->metric, "ROC-AUC") && strstr(chembl->url, ".tar.gz#data/chembl.csv"));
    const mp_dataset_info *q12 = mp_registry_find(reg, "qm9_full");
    CHECK(q12 && q12->tasks == 12 && q12->rows == 133885 && !strcmp(q12->metric, "MAE") &&
          !strcmp(q12->targets, "mu,alpha,homo,lumo,gap,r2,zpve,cv,u0,u298,h298,g298"));
    CHECK(!e->url && !e->targets && !e->ignore);
    char *names = mp_registry_names(reg);
    CHECK(names && !strncmp(names, "esol, freesolv, lipo", 20) && strstr(names, ", chembl"));
    mp_free(names);
    mp_registry_free(reg);
    CHECK_EQ_INT(mp_alloc_live(), live);
}

MP_TEST(registry_agrees_with_manifest_and_mirror)
{
    const char *mirror = mirror_dir();
    if (!mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not a directory");
    char path[1200];
    snprintf(path, sizeof path, "%s/MANIFEST.tsv", mirror);
    FILE *fp = fopen(path, "r");
    if (!fp)
        MP_SKIP("no MANIFEST.tsv in the mirror");
    mp_registry *reg;
    CHECK_OK(mp_registry_load(&reg, NULL));
    char line[8192], why[2000] = "";
    int rows = 0;
    while (fgets(line, sizeof line, fp) && !why[0]) {
        char *f[9];
        int nf = 0;
        for (char *s = line; nf < 9; nf++) {
            f[nf] = s;
            s = strchr(s, '\t');
            if (!s)
                break;
            *s++ = '\0';
        }
        if (nf < 7 || !strcmp(f[0], "name"))
            continue;
        rows++;
        const mp_dataset_info *d = mp_registry_find(reg, f[0]);
        if (d && !strcmp(f[1], "-") && d->url && !d->sha256)
            continue;   /* not in the mirror: the registry has its public location */
        char rs[32] = "-", ts[32] = "-";
        if (d && d->file) {
            snprintf(rs, sizeof rs, "%ld", d->rows);
            snprintf(ts, sizeof ts, "%d", d->tasks);
        }
        if (!d || strcmp(d->file ? d->file : "-", f[1]) || strcmp(rs, f[2]) || strcmp(ts, f[3]) ||
            strcmp(mp_task_type_name(d->task_type), f[4]) || strcmp(d->metric, f[5]) ||
            strcmp(d->sha256 ? d->sha256 : "-", f[7])) {
            snprintf(why, sizeof why, "registry entry for '%s' differs from MANIFEST.tsv", f[0]);
            break;
        }
        if (d->file) {   /* and the mirror's file really has that checksum */
            char fpath[1400], hex[65];
            snprintf(fpath, sizeof fpath, "%s/%s", mirror, d->file);
            if (mp_sha256_file(fpath, hex) != MP_OK || strcmp(hex, d->sha256))
                snprintf(why, sizeof why, "%s: SHA-256 %s, registry %s", fpath, hex, d->sha256);
        }
    }
    fclose(fp);
    mp_registry_free(reg);
    CHECK_MSG(!why[0], "%s", why);
    CHECK_EQ_INT(rows, 19);
}

MP_TEST(registry_sha256_known_vectors)
{
    /* FIPS 180-2 test vectors */
    const char *p = tmp_path("abc.txt");
    write_bytes(p, "abc", 3);
    char hex[65];
    CHECK_OK(mp_sha256_file(p, hex));
    CHECK_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    write_bytes(p, "", 0);
    CHECK_OK(mp_sha256_file(p, hex));
    CHECK_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* a million 'a': crosses the read buffer many times */
    char *big = malloc(1000000);
    CHECK(big != NULL);
    memset(big, 'a', 1000000);
    write_bytes(p, big, 1000000);
    free(big);
    CHECK_OK(mp_sha256_file(p, hex));
    CHECK_EQ_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    CHECK(mp_sha256_file(tmp_path("absent"), hex) == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "absent") != NULL);
}

MP_TEST(registry_rejects_malformed_files)
{
    static const char head[] = "# comment\nname\tfile\trows\ttasks\ttask_type\tmetric\tsha256\n";
    static const char sha[] = "661b292644502400f7fac2b5bfd1db9880698d85d9435843c2b6276b8fc0d469";
    static const struct { const char *body, *msg; } cases[] = {
        { "esol\tesol.csv.gz\t1128\t1\tregression\tRMSE\n", ":3: expected 7 tab-separated fields, found 6" },
        { "esol\tesol.csv.gz\t1128\t1\tregression\tRMSE\tabc\n", ":3: sha256 'abc' is not 64" },
        { "esol\tesol.csv.gz\t12x\t1\tregression\tRMSE\tSHA\n", ":3: rows '12x' is not a positive integer" },
        { "esol\tesol.csv.gz\t1128\t0\tregression\tRMSE\tSHA\n", ":3: tasks '0' is not a positive" },
        { "esol\tesol.csv.gz\t1128\t1\tregresion\tRMSE\tSHA\n", ":3: task_type 'regresion'" },
        { "esol\tesol.csv.gz\t1128\t1\tregression\tR2\tSHA\n", ":3: metric 'R2' is not one of" },
        { "esol\t-\t1128\t1\tregression\tRMSE\tSHA\n", ":3: rows is '1128' but file is '-'" },
        { "esol\tesol.csv.gz\t-\t-\tregression\tRMSE\t-\n", ":3: rows is '-' but file is 'esol.csv.gz'" },
        { "esol\t../esol.csv.gz\t1\t1\tregression\tRMSE\tSHA\n", ":3: file '../esol.csv.gz' must be" },
        { "\tesol.csv.gz\t1\t1\tregression\tRMSE\tSHA\n", ":3: empty dataset name" },
        { "esol\tesol.csv.gz\t1\t1\tregression\tRMSE\tSHA\n\nESOL\ta.csv\t1\t1\tregression\tRMSE\tSHA\n",
          ":5: dataset 'ESOL' is listed twice" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024], body[512];
        /* "SHA" stands for a valid checksum */
        const char *s = cases[i].body;
        size_t k = 0;
        while (*s && k < sizeof body - 70) {
            if (!strncmp(s, "SHA", 3)) {
                k += (size_t)sprintf(body + k, "%s", sha);
                s += 3;
            } else {
                body[k++] = *s++;
            }
        }
        body[k] = '\0';
        snprintf(text, sizeof text, "%s%s", head, body);
        const char *p = tmp_path("reg.tsv");
        write_bytes(p, text, strlen(text));
        mp_registry *reg = (mp_registry *)1;
        long live = mp_alloc_live();
        CHECK_MSG(mp_registry_load(&reg, p) == MP_ERR_FORMAT, "case %zu accepted", i);
        CHECK(reg == NULL);
        CHECK_MSG(strstr(mp_error_message(), cases[i].msg) && strstr(mp_error_message(), "reg.tsv"),
                  "case %zu: '%s' lacks '%s'", i, mp_error_message(), cases[i].msg);
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    const char *p = tmp_path("reg.tsv");
    write_bytes(p, "name\tfile\n", 10);
    mp_registry *reg;
    CHECK(mp_registry_load(&reg, p) == MP_ERR_FORMAT);
    write_bytes(p, "name\tfile\trows\ttasks\ttype\tmetric\tsha256\n", 40);
    CHECK(mp_registry_load(&reg, p) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "header field 5 is 'type'") != NULL);
    write_bytes(p, "# only a comment\n", 17);
    CHECK(mp_registry_load(&reg, p) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "no header line") != NULL);
    CHECK(mp_registry_load(&reg, tmp_path("absent.tsv")) == MP_ERR_IO);
    /* the library reads no environment: $MOLPROP_REGISTRY is the command
     * line's default (cli_data_registry_from_the_environment) */
    saved_env s = { 0 };
    env_set(&s, "MOLPROP_REGISTRY", tmp_path("absent2.tsv"));
    mp_status st = mp_registry_load(&reg, NULL);
    env_restore(&s);
    CHECK_MSG(st == MP_OK, "%s", mp_error_message());
    CHECK(mp_registry_count(reg) == reg->n && mp_registry_at(reg, 0) == &reg->items[0] &&
          mp_registry_at(reg, reg->n) == NULL);
    mp_registry_free(reg);
    /* a good one with CRLF line ends and a no-file entry */
    const char *good = "name\tfile\trows\ttasks\ttask_type\tmetric\tsha256\r\n"
                       "x\t-\t-\t-\tclassification\tPRC-AUC\t-\r\n";
    write_bytes(p, good, strlen(good));
    CHECK_OK(mp_registry_load(&reg, p));
    CHECK_EQ_INT(reg->n, 1);
    CHECK(reg->items[0].file == NULL);
    CHECK_EQ_STR(reg->items[0].metric, "PRC-AUC");
    mp_registry_free(reg);
}

MP_TEST(registry_load_allocation_failures)
{
    long ok_at = -1;
    for (long n = 0; n < 200 && ok_at < 0; n++) {
        long live = mp_alloc_live();
        mp_registry *reg;
        mp_alloc_fail_after(n);
        mp_status st = mp_registry_load(&reg, NULL);
        mp_alloc_fail_after(-1);
        CHECK_MSG(st == MP_OK || st == MP_ERR_NOMEM, "N=%ld: %s", n, mp_error_message());
        if (st == MP_OK) {
            ok_at = n;
            mp_registry_free(reg);
        }
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    CHECK(ok_at > 19);   /* several allocations per entry must have been tried */
}

/* ===================================================================== */
/* Fetching (library)                                                     */
/* ===================================================================== */

MP_TEST(registry_fetch_from_mirror)
{
    const char *mirror = mirror_dir();
    if (!mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not a directory");
    mp_registry *reg;
    CHECK_OK(mp_registry_load(&reg, NULL));
    const char *dest = tmp_path("fetch1/sub");   /* created, parents too */
    mp_fetch_result how = MP_FETCH_PRESENT;
    mp_fetch_source src_dirs = { .mirror = mirror };
    long live = mp_alloc_live();
    mp_status st = mp_registry_fetch(reg, "bace", dest, &src_dirs, &how);
    if (st) {
        mp_registry_free(reg);
        MP_FAIL("fetch: %s", mp_error_message());
    }
    CHECK(how == MP_FETCH_MIRROR);
    char path[1400], src[1400], hex[65];
    snprintf(path, sizeof path, "%s/bace.csv.gz", dest);
    snprintf(src, sizeof src, "%s/bace.csv.gz", mirror);
    CHECK_OK(mp_sha256_file(path, hex));
    CHECK_EQ_STR(hex, mp_registry_find(reg, "bace")->sha256);
    CHECK_EQ_INT(count_entries(dest), 1);   /* no temporary left */
    /* a second fetch finds it in place */
    CHECK_OK(mp_registry_fetch(reg, "BACE", dest, NULL, &how));   /* present: no source needed */
    CHECK(how == MP_FETCH_PRESENT);
    /* a damaged local copy is replaced */
    copy_file(src, path, 1);
    CHECK_OK(mp_registry_fetch(reg, "bace", dest, &src_dirs, &how));
    CHECK(how == MP_FETCH_MIRROR);
    CHECK_OK(mp_sha256_file(path, hex));
    CHECK_EQ_STR(hex, mp_registry_find(reg, "bace")->sha256);
    CHECK_EQ_INT(count_entries(dest), 1);
    CHECK_EQ_INT(mp_alloc_live(), live);
    mp_registry_free(reg);
}

MP_TEST(registry_fetch_checksum_mismatch_leaves_nothing)
{
    const char *mirror = mirror_dir();
    if (!mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not a directory");
    mp_registry *reg;
    CHECK_OK(mp_registry_load(&reg, NULL));
    char src[1400];
    snprintf(src, sizeof src, "%s/esol.csv.gz", mirror);
    const char *fake = tmp_path("fake_mirror");
    make_dir(fake);
    char bad[1400];
    snprintf(bad, sizeof bad, "%s/esol.csv.gz", fake);
    copy_file(src, bad, 1);
    const char *dest = tmp_path("fetch_bad");

    mp_fetch_source from = { .mirror = fake };
    long live = mp_alloc_live();
    mp_status st1 = mp_registry_fetch(reg, "esol", dest, &from, NULL);
    char msg1[2048];
    snprintf(msg1, sizeof msg1, "%s", mp_error_message());
    int left1 = count_entries(dest);
    /* the same through a file:// URL (the download path) */
    char url[1400];
    snprintf(url, sizeof url, "file://%s", fake);
    from = (mp_fetch_source){ .url = url };
    mp_status st2 = mp_registry_fetch(reg, "esol", dest, &from, NULL);
    int left2 = count_entries(dest);
    long leaked = mp_alloc_live() - live;
    mp_registry_free(reg);

    CHECK(st1 == MP_ERR_CHECKSUM);
    CHECK_MSG(strstr(msg1, "esol.csv.gz") && strstr(msg1, "expected 661b2926"), "%s", msg1);
    CHECK_EQ_INT(left1, 0);   /* dest made, but empty: no file, no temporary */
    CHECK(st2 == MP_ERR_CHECKSUM);
    CHECK_EQ_INT(left2, 0);
    CHECK_EQ_INT(leaked, 0);
}

MP_TEST(registry_fetch_by_url_and_errors)
{
    const char *mirror = mirror_dir();
    if (!mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not a directory");
    mp_registry *reg;
    CHECK_OK(mp_registry_load(&reg, NULL));
    const char *dest = tmp_path("fetch_url");
    char url[1400];
    snprintf(url, sizeof url, "file://%s/", mirror);   /* a trailing slash is fine */
    mp_fetch_result how = MP_FETCH_PRESENT;

    mp_fetch_source src = { .url = url };
    mp_status st_url = mp_registry_fetch(reg, "freesolv", dest, &src, &how);
    mp_fetch_result how_url = how;
    /* a mirror without the file falls back to the URL */
    src.mirror = tmp_path("fetch_url");
    mp_status st_fallback = mp_registry_fetch(reg, "pdbbind_core", tmp_path("fetch_url2"), &src, &how);
    mp_fetch_result how_fallback = how;
    /* ... and without a URL it is an error */
    src.url = NULL;
    mp_status st_nofile = mp_registry_fetch(reg, "lipo", tmp_path("fetch_url3"), &src, NULL);
    char msg_nofile[2048];
    snprintf(msg_nofile, sizeof msg_nofile, "%s", mp_error_message());
    /* neither source ("" counts as none) */
    src.mirror = "";
    mp_status st_none = mp_registry_fetch(reg, "lipo", tmp_path("fetch_url3"), &src, NULL);
    char msg_none[2048];
    snprintf(msg_none, sizeof msg_none, "%s", mp_error_message());
    mp_status st_null = mp_registry_fetch(reg, "lipo", tmp_path("fetch_url3"), NULL, NULL);
    /* a URL that has no such file */
    snprintf(url, sizeof url, "file://%s/nowhere", mp_test_tmpdir());
    src = (mp_fetch_source){ .url = url };
    mp_status st_404 = mp_registry_fetch(reg, "lipo", tmp_path("fetch_url3"), &src, NULL);

    CHECK_MSG(st_url == MP_OK, "url: %s", mp_status_name(st_url));
    CHECK(how_url == MP_FETCH_DOWNLOADED);
    CHECK_EQ_INT(count_entries(dest), 1);
    CHECK(st_fallback == MP_OK && how_fallback == MP_FETCH_DOWNLOADED);
    CHECK(st_nofile == MP_ERR_IO && strstr(msg_nofile, "lipo.csv.gz not found in the mirror"));
    CHECK(st_none == MP_ERR_ARG && st_null == MP_ERR_ARG);
    CHECK(strstr(msg_none, "no source for lipo.csv.gz") && strstr(msg_none, "mirror") &&
          strstr(msg_none, "URL"));
    CHECK(st_404 == MP_ERR_IO);
    CHECK_EQ_INT(count_entries(tmp_path("fetch_url3")), 0);

    /* names the registry does not know, or knows without a file */
    CHECK(mp_registry_fetch(reg, "nope", dest, NULL, NULL) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "unknown dataset 'nope'") &&
          strstr(mp_error_message(), "esol, freesolv"));
    mp_registry_free(reg);
    const char *nofile = tmp_path("nofile.tsv");
    const char *text = "name\tfile\trows\ttasks\ttask_type\tmetric\tsha256\n"
                       "gone\t-\t-\t-\tclassification\tPRC-AUC\t-\n";
    write_bytes(nofile, text, strlen(text));
    CHECK_OK(mp_registry_load(&reg, nofile));
    CHECK(mp_registry_fetch(reg, "gone", dest, NULL, NULL) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "'gone' is not available") != NULL);
    mp_registry_free(reg);
}

/* ===================================================================== */
/* `molprop data` end to end                                              */
/* ===================================================================== */

MP_TEST(cli_data_list_and_help)
{
    if (!getenv("MOLPROP_BIN"))
        MP_SKIP("MOLPROP_BIN is not set (run through make test)");
    static char out[16384];
    const char *dest = tmp_path("cli_list");
    make_dir(dest);
    char args[1400];
    snprintf(args, sizeof args, "data list --dest '%s'", dest);
    CHECK_EQ_INT(run_cli("", args, out, sizeof out), 0);
    CHECK(strstr(out, "name") && strstr(out, "metric"));
    CHECK(strstr(out, "toxcast") && strstr(out, "617") && strstr(out, "8576"));
    CHECK(strstr(out, "\npcba ") && strstr(out, "PRC-AUC  no\n"));
    CHECK(!strstr(out, " yes\n"));
    /* a file present in --dest shows as yes */
    write_bytes(tmp_path("cli_list/esol.csv.gz"), "x", 1);
    CHECK_EQ_INT(run_cli("", args, out, sizeof out), 0);
    const char *row = strstr(out, "\nesol ");
    CHECK(row && strstr(row, " yes\n") && strstr(row, " yes\n") < strstr(row, "\nfreesolv"));

    const char *helps[] = { "data --help", "data list --help", "data fetch --help", "data verify -h" };
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(run_cli("", helps[i], out, sizeof out), 0);
        CHECK_MSG(strstr(out, "usage: molprop data"), "%s: %s", helps[i], out);
    }
    CHECK_EQ_INT(run_cli("", "data frobnicate", out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: unknown command 'frobnicate'") != NULL);
    CHECK_EQ_INT(run_cli("", "data", out, sizeof out), 1);
    CHECK_EQ_INT(run_cli("", "data fetch", out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: fetch needs dataset names") != NULL);
    CHECK_EQ_INT(run_cli("", "data list --bogus", out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: unknown option '--bogus'") != NULL);
    snprintf(args, sizeof args, "data list --registry '%s'", tmp_path("no_registry.tsv"));
    CHECK_EQ_INT(run_cli("", args, out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: cannot open") && strstr(out, "no_registry.tsv"));
}

MP_TEST(cli_data_fetch_and_verify)
{
    const char *mirror = mirror_dir();
    if (!getenv("MOLPROP_BIN"))
        MP_SKIP("MOLPROP_BIN is not set (run through make test)");
    if (!mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not a directory");
    static char out[16384];
    char env[1400], args[1400];
    const char *dest = tmp_path("cli_fetch");
    snprintf(env, sizeof env, "-u MOLPROP_DATA_URL MOLPROP_DATA_MIRROR='%s'", mirror);

    snprintf(args, sizeof args, "data fetch esol pdbbind_core --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 0);
    CHECK(strstr(out, "esol") && strstr(out, "copied from MOLPROP_DATA_MIRROR"));
    CHECK_EQ_INT(count_entries(dest), 2);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 0);
    CHECK(strstr(out, "already present") != NULL);

    snprintf(args, sizeof args, "data verify esol pdbbind_core --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 0);
    CHECK(strstr(out, "esol") && strstr(out, ": ok"));
    /* no names: checks what is there, lists what is not */
    snprintf(args, sizeof args, "data verify --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 0);
    CHECK(strstr(out, "pdbbind_core") && strstr(out, "hiv.csv.gz: not present"));
    /* a damaged local file fails verify */
    char local[1400], src[1400];
    snprintf(local, sizeof local, "%s/esol.csv.gz", dest);
    snprintf(src, sizeof src, "%s/esol.csv.gz", mirror);
    copy_file(src, local, 1);
    snprintf(args, sizeof args, "data verify esol --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: esol:") && strstr(out, "expected 661b2926"));
    snprintf(args, sizeof args, "data verify --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 1);
    snprintf(args, sizeof args, "data verify hiv --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 1);
    CHECK(strstr(out, "is missing") != NULL);

    /* unavailable, unknown, no source */
    const char *nofile = tmp_path("cli_nofile.tsv");
    const char *text = "name\tfile\trows\ttasks\ttask_type\tmetric\tsha256\n"
                       "gone\t-\t-\t-\tclassification\tPRC-AUC\t-\n";
    write_bytes(nofile, text, strlen(text));
    snprintf(args, sizeof args, "data fetch gone --dest '%s' --registry '%s'", dest, nofile);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: gone: dataset 'gone' is not available") != NULL);
    snprintf(args, sizeof args, "data fetch esol nope --dest '%s'", dest);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: unknown dataset 'nope'") && strstr(out, "esol, freesolv"));
    snprintf(args, sizeof args, "data fetch lipo --dest '%s'", dest);
    CHECK_EQ_INT(run_cli("-u MOLPROP_DATA_URL -u MOLPROP_DATA_MIRROR", args, out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: lipo:") && strstr(out, "set MOLPROP_DATA_MIRROR") &&
          strstr(out, "MOLPROP_DATA_URL"));
    /* with 'all' the missing source is reported once, not per dataset */
    snprintf(args, sizeof args, "data fetch all --dest '%s'", tmp_path("cli_nosource"));
    CHECK_EQ_INT(run_cli("-u MOLPROP_DATA_URL MOLPROP_DATA_MIRROR=", args, out, sizeof out), 1);
    const char *first = strstr(out, "set MOLPROP_DATA_MIRROR");
    CHECK(first && !strstr(first + 1, "set MOLPROP_DATA_MIRROR"));

    /* a corrupted mirror: error, and nothing left behind */
    const char *fake = tmp_path("cli_fake_mirror");
    make_dir(fake);
    char bad[1400];
    snprintf(bad, sizeof bad, "%s/freesolv.csv.gz", fake);
    snprintf(src, sizeof src, "%s/freesolv.csv.gz", mirror);
    copy_file(src, bad, 1);
    snprintf(env, sizeof env, "-u MOLPROP_DATA_URL MOLPROP_DATA_MIRROR='%s'", fake);
    const char *dest2 = tmp_path("cli_fetch_bad");
    snprintf(args, sizeof args, "data fetch freesolv --dest '%s'", dest2);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 1);
    CHECK(strstr(out, "molprop data: freesolv:") && strstr(out, "SHA-256"));
    CHECK_EQ_INT(count_entries(dest2), 0);

    /* all: every dataset with a pinned checksum, through a URL this time;
     * the large unpinned ones are fetched by name only, with a note */
    char url_env[1400];
    snprintf(url_env, sizeof url_env, "-u MOLPROP_DATA_MIRROR MOLPROP_DATA_URL='file://%s'", mirror);
    const char *dest3 = tmp_path("cli_all");
    snprintf(args, sizeof args, "data fetch all --dest '%s'", dest3);
    CHECK_EQ_INT(run_cli(url_env, args, out, sizeof out), 0);
    CHECK(strstr(out, "pcba (437929 molecules, no pinned checksum) is fetched by name only"));
    CHECK_EQ_INT(count_entries(dest3), 17);
    snprintf(args, sizeof args, "data verify all --dest '%s'", dest3);
    CHECK_EQ_INT(run_cli("", args, out, sizeof out), 0);
}

/* The library reads no environment; the command line takes its defaults
 * from it ($MOLPROP_REGISTRY, $MOLPROP_DATA_MIRROR, $MOLPROP_DATA_URL), and
 * --registry, --mirror, --url and a [data] section of --config override. */
MP_TEST(cli_data_sources_from_environment_flags_and_config)
{
    const char *mirror = mirror_dir();
    if (!getenv("MOLPROP_BIN"))
        MP_SKIP("MOLPROP_BIN is not set (run through make test)");
    if (!mirror)
        MP_SKIP("MOLPROP_DATA_MIRROR is not a directory");
    static char out[16384];
    char env[1400], args[2800];
    /* a registry named by the environment, then overridden by the flag */
    snprintf(env, sizeof env, "MOLPROP_REGISTRY='%s'", tmp_path("env_registry.tsv"));
    CHECK_EQ_INT(run_cli(env, "data list", out, sizeof out), 1);
    CHECK_MSG(strstr(out, "molprop data: cannot open") && strstr(out, "env_registry.tsv"), "%s", out);
    CHECK_EQ_INT(run_cli(env, "data list --registry data/datasets.tsv", out, sizeof out), 0);
    CHECK(strstr(out, "toxcast") != NULL);
    /* --mirror without the environment */
    const char *dest = tmp_path("cli_flag_mirror");
    snprintf(args, sizeof args, "data fetch esol --dest '%s' --mirror '%s'", dest, mirror);
    CHECK_EQ_INT(run_cli("-u MOLPROP_DATA_URL -u MOLPROP_DATA_MIRROR", args, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "esol") && strstr(out, "copied from --mirror"), "%s", out);
    CHECK_EQ_INT(count_entries(dest), 1);
    /* the flag wins over the environment's (bad) mirror; a --url as file:// */
    snprintf(env, sizeof env, "-u MOLPROP_DATA_URL MOLPROP_DATA_MIRROR='%s'", tmp_path("nowhere"));
    snprintf(args, sizeof args, "data fetch freesolv --dest '%s' --mirror '' --url 'file://%s'",
             dest, mirror);
    CHECK_EQ_INT(run_cli(env, args, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "downloaded from --url"), "%s", out);
    /* the same from a [data] section */
    const char *ini = tmp_path("data.ini");
    char text[1400];
    snprintf(text, sizeof text, "[data]\ndest = %s\nmirror = %s\n", tmp_path("cli_ini_mirror"),
             mirror);
    write_bytes(ini, text, strlen(text));
    snprintf(args, sizeof args, "data fetch bace --config '%s'", ini);
    CHECK_EQ_INT(run_cli("-u MOLPROP_DATA_URL -u MOLPROP_DATA_MIRROR", args, out, sizeof out), 0);
    CHECK_EQ_INT(count_entries(tmp_path("cli_ini_mirror")), 1);
    snprintf(text, sizeof text, "[data]\nmirrors = %s\n", mirror);
    write_bytes(ini, text, strlen(text));
    CHECK_EQ_INT(run_cli("", args, out, sizeof out), 1);
    CHECK(strstr(out, "data.ini:2: unknown key 'mirrors' in [data]") != NULL);
}
