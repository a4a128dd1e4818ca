/*
 * registry.c - the benchmark dataset registry (data/datasets.tsv): parsing,
 * lookup by name or file, and SHA-256 of files.  Fetching a dataset into
 * data/ is fetch.c.
 * Which registry file and which sources are arguments: nothing here reads
 * the environment (the command line does, and passes them in).
 */
#define _GNU_SOURCE   /* dladdr */
#include "data/registry.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IO_CHUNK (64u << 10)

/* The seven columns every registry has, and three optional ones after them
 * (all or none): where the file is published, its target columns, the
 * columns that are not targets. */
#define N_BASE_COLUMNS 7
#define N_ALL_COLUMNS 10
static const char *const registry_columns[N_ALL_COLUMNS] = {
    "name", "file", "rows", "tasks", "task_type", "metric", "sha256", "url", "targets", "ignore"
};
static const char *const known_metrics[] = { "RMSE", "MAE", "ROC-AUC", "PRC-AUC" };

/* ===================================================================== */
/* Task types                                                             */
/* ===================================================================== */

static const char *const task_type_names[] = {
    "regression", "classification", "regression-mve", "regression-evidential",
    "regression-quantile", "classification-dirichlet", "multiclass", "multiclass-dirichlet",
    "spectral",
};
#define N_TASK_TYPES (sizeof task_type_names / sizeof task_type_names[0])

const char *mp_task_type_name(mp_task_type t)
{
    return (unsigned)t < N_TASK_TYPES ? task_type_names[t] : "?";
}

mp_status mp_task_type_parse(const char *s, mp_task_type *out)
{
    for (size_t i = 0; s && i < N_TASK_TYPES; i++)
        if (mp_strcaseeq(s, task_type_names[i])) {
            *out = (mp_task_type)i;
            return MP_OK;
        }
    return mp_error_set(MP_ERR_ARG, "unknown task type '%s' (regression, classification, "
                        "regression-mve, regression-evidential, regression-quantile, "
                        "classification-dirichlet, multiclass, multiclass-dirichlet or spectral)",
                        s ? s : "(null)");
}

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

void mp_registry_free(mp_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n; i++) {
        mp_free(reg->items[i].name);
        mp_free(reg->items[i].file);
        mp_free(reg->items[i].metric);
        mp_free(reg->items[i].sha256);
        mp_free(reg->items[i].url);
        mp_free(reg->items[i].targets);
        mp_free(reg->items[i].ignore);
    }
    mp_free(reg->items);
    mp_free(reg);
}

/* Reads a whole (small) file into b, NUL-terminated. */
static mp_status slurp(const char *path, mp_buf *b, const char *hint)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s%s", path, strerror(errno), hint);
    char chunk[4096];
    size_t n;
    mp_status st = mp_buf_append(b, "", 0);
    while (!st && (n = fread(chunk, 1, sizeof chunk, fp)) > 0)
        st = mp_buf_append(b, chunk, n);
    if (!st && ferror(fp))
        st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    fclose(fp);
    return st;
}

static int parse_count(const char *s, long *out)
{
    if (!*s || strlen(s) > 12)
        return 0;
    long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        v = 10 * v + (*s - '0');
    }
    *out = v;
    return v > 0;
}

static int is_sha256_hex(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* Checks one data line's fields f[7] and fills *e (strings still borrowed). */
static mp_status parse_entry(const char *path, size_t line, char **f, mp_dataset_info *e)
{
    memset(e, 0, sizeof *e);
    e->rows = -1;
    e->tasks = -1;
    if (!*f[0])
        return mp_error_set(MP_ERR_FORMAT, "%s:%zu: empty dataset name", path, line);
    int no_file = !strcmp(f[1], "-");
    if (!no_file && (!*f[1] || strchr(f[1], '/') || f[1][0] == '.'))
        return mp_error_set(MP_ERR_FORMAT, "%s:%zu: file '%s' must be a plain file name or '-'",
                            path, line, f[1]);
    /* rows, tasks and sha256 are '-' without a file; with one, rows and
     * tasks are required and sha256 may be '-': none pinned, the first
     * fetch records the one it sees */
    static const int follow_file[3] = { 2, 3, 6 };
    for (int i = 0; i < 3; i++) {
        if (!no_file && follow_file[i] == 6)
            continue;
        int k = follow_file[i];
        if (no_file != !strcmp(f[k], "-"))
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: %s is '%s' but file is '%s' "
                                "(a dataset without a file has '-' in file, rows, tasks and sha256)",
                                path, line, registry_columns[k], f[k], f[1]);
    }
    if (!no_file) {
        long v;
        if (!parse_count(f[2], &v))
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: rows '%s' is not a positive integer",
                                path, line, f[2]);
        e->rows = v;
        if (!parse_count(f[3], &v) || v > 1000000)
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: tasks '%s' is not a positive integer",
                                path, line, f[3]);
        e->tasks = (int)v;
        if (strcmp(f[6], "-") && !is_sha256_hex(f[6]))
            return mp_error_set(MP_ERR_FORMAT,
                                "%s:%zu: sha256 '%s' is not 64 lower-case hex digits", path, line, f[6]);
    }
    if (mp_task_type_parse(f[4], &e->task_type) != MP_OK ||
        (e->task_type != MP_TASK_REGRESSION && e->task_type != MP_TASK_CLASSIFICATION))
        return mp_error_set(MP_ERR_FORMAT, "%s:%zu: task_type '%s' is not regression or classification",
                            path, line, f[4]);
    int metric_ok = 0;
    for (size_t i = 0; i < sizeof known_metrics / sizeof *known_metrics; i++)
        metric_ok |= !strcmp(f[5], known_metrics[i]);
    if (!metric_ok)
        return mp_error_set(MP_ERR_FORMAT, "%s:%zu: metric '%s' is not one of RMSE, MAE, ROC-AUC, PRC-AUC",
                            path, line, f[5]);
    return MP_OK;
}

/* Splits a line at tabs in place; returns the number of fields (max `cap`+1). */
static size_t split_tabs(char *s, char **f, size_t cap)
{
    size_t n = 0;
    for (;;) {
        if (n < cap)
            f[n] = s;
        n++;
        char *t = strchr(s, '\t');
        if (!t)
            return n;
        *t = '\0';
        s = t + 1;
    }
}

/* The installed registry, <prefix>/share/molprop/datasets.tsv, where
 * <prefix> is the directory above the one holding the binary or library this
 * code is in (bin/molprop, lib/libmolprop.so): found at run time, so an
 * installed tree can be moved.  0 with out[0] = 0 when there is none. */
static int installed_registry(char *out, size_t n)
{
    char file[PATH_MAX];
    Dl_info info;
    out[0] = 0;
    if (dladdr((void *)mp_registry_load, &info) && info.dli_fname && info.dli_fname[0] &&
        strchr(info.dli_fname, '/') && realpath(info.dli_fname, file))
        ;
    else {   /* the main program (dladdr may give its argv[0]) */
        ssize_t k = readlink("/proc/self/exe", file, sizeof file - 1);
        if (k <= 0)
            return 0;
        file[k] = 0;
    }
    for (int up = 0; up < 2; up++) {   /* <prefix>/bin/molprop -> <prefix> */
        char *slash = strrchr(file, '/');
        if (!slash)
            return 0;
        *slash = 0;
    }
    if ((size_t)snprintf(out, n, "%s/share/molprop/datasets.tsv", file) >= n ||
        access(out, R_OK) != 0) {
        out[0] = 0;
        return 0;
    }
    return 1;
}

mp_status mp_registry_load(mp_registry **out, const char *path)
{
    *out = NULL;
    const char *hint = "";
    char installed[PATH_MAX];
    if (!path || !*path) {
        path = MP_REGISTRY_DEFAULT;
        if (access(path, R_OK) != 0 && installed_registry(installed, sizeof installed))
            path = installed;
        hint = " (run molprop from its checkout or install it, or name the registry file: "
               "--registry FILE or MOLPROP_REGISTRY)";
    }
    mp_buf b = { 0 };
    mp_registry *reg = mp_calloc(1, sizeof *reg);
    mp_status st = reg ? slurp(path, &b, hint) : MP_ERR_NOMEM;
    if (st)
        goto fail;

    /* Each line ends at LF (a CR before it is dropped).  Count lines first so
     * the item array is allocated once. */
    size_t max_items = 1;
    for (size_t i = 0; i < b.len; i++)
        max_items += b.data[i] == '\n';
    reg->items = mp_calloc(max_items, sizeof *reg->items);
    if (!reg->items) {
        st = MP_ERR_NOMEM;
        goto fail;
    }

    int seen_header = 0;
    size_t line = 0, n_columns = N_BASE_COLUMNS;
    for (char *s = b.data; s && *s;) {
        line++;
        char *nl = strchr(s, '\n');
        char *next = nl ? nl + 1 : NULL;
        if (nl) {
            *nl = '\0';
            if (nl > s && nl[-1] == '\r')
                nl[-1] = '\0';
        }
        if (s[0] == '#' || s[0] == '\0') {
            s = next;
            continue;
        }
        char *f[N_ALL_COLUMNS];
        size_t nf = split_tabs(s, f, N_ALL_COLUMNS);
        if (!seen_header && nf != N_BASE_COLUMNS && nf != N_ALL_COLUMNS) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: expected 7 tab-separated fields, found %zu",
                              path, line, nf);
            goto fail;
        }
        if (seen_header && nf != n_columns) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: expected %zu tab-separated fields, found %zu",
                              path, line, n_columns, nf);
            goto fail;
        }
        if (!seen_header) {
            for (size_t k = 0; k < nf; k++)
                if (strcmp(f[k], registry_columns[k])) {
                    st = mp_error_set(MP_ERR_FORMAT,
                                      "%s:%zu: header field %zu is '%s', expected '%s' "
                                      "(name file rows tasks task_type metric sha256, then "
                                      "optionally url targets ignore)",
                                      path, line, k + 1, f[k], registry_columns[k]);
                    goto fail;
                }
            seen_header = 1;
            n_columns = nf;
            s = next;
            continue;
        }
        mp_dataset_info e;
        if ((st = parse_entry(path, line, f, &e)))
            goto fail;
        if (mp_registry_find(reg, f[0])) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: dataset '%s' is listed twice", path, line, f[0]);
            goto fail;
        }
        mp_dataset_info *d = &reg->items[reg->n];
        *d = e;
        reg->n++;   /* counted now so mp_registry_free sees partial entries */
        d->name = mp_strdup(f[0]);
        d->metric = mp_strdup(f[5]);
        d->file = strcmp(f[1], "-") ? mp_strdup(f[1]) : NULL;
        d->sha256 = strcmp(f[6], "-") ? mp_strdup(f[6]) : NULL;
        if (!d->name || !d->metric || (strcmp(f[1], "-") && !d->file) ||
            (strcmp(f[6], "-") && !d->sha256)) {
            st = MP_ERR_NOMEM;
            goto fail;
        }
        char **extra[3] = { &d->url, &d->targets, &d->ignore };
        for (size_t k = N_BASE_COLUMNS; k < n_columns; k++) {
            const char *v = f[k];
            if (!strcmp(v, "-") || !*v)
                continue;
            if (!(*extra[k - N_BASE_COLUMNS] = mp_strdup(v))) {
                st = MP_ERR_NOMEM;
                goto fail;
            }
        }
        s = next;
    }
    if (!seen_header) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: no header line (name file rows tasks task_type metric sha256)",
                          path);
        goto fail;
    }
    mp_buf_free(&b);
    *out = reg;
    return MP_OK;
fail:
    if (st == MP_ERR_NOMEM)
        mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
    mp_buf_free(&b);
    mp_registry_free(reg);
    return st;
}

/* ===================================================================== */
/* Lookup                                                                 */
/* ===================================================================== */

size_t mp_registry_count(const mp_registry *reg)
{
    return reg ? reg->n : 0;
}

const mp_dataset_info *mp_registry_at(const mp_registry *reg, size_t i)
{
    return reg && i < reg->n ? &reg->items[i] : NULL;
}

const mp_dataset_info *mp_registry_find(const mp_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n; i++)
        if (mp_strcaseeq(reg->items[i].name, name))
            return &reg->items[i];
    return NULL;
}

/* Length of s without a trailing ".gz". */
static size_t strip_gz(const char *s)
{
    size_t n = strlen(s);
    return n > 3 && !strcmp(s + n - 3, ".gz") ? n - 3 : n;
}

const mp_dataset_info *mp_registry_find_file(const mp_registry *reg, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t nb = strip_gz(base);
    for (size_t i = 0; i < reg->n; i++) {
        const char *f = reg->items[i].file;
        if (f && strip_gz(f) == nb && !strncmp(f, base, nb))
            return &reg->items[i];
    }
    return NULL;
}

char *mp_registry_names(const mp_registry *reg)
{
    mp_buf b = { 0 };
    if (mp_buf_append(&b, "", 0))
        return NULL;
    for (size_t i = 0; i < reg->n; i++)
        if (mp_buf_printf(&b, "%s%s", i ? ", " : "", reg->items[i].name)) {
            mp_buf_free(&b);
            return NULL;
        }
    return b.data;
}

/* ===================================================================== */
/* SHA-256                                                                */
/* ===================================================================== */

static void hex_digest(const unsigned char *md, unsigned n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[2 * n] = '\0';
}

/* Starts a SHA-256 context; NULL (with the error set) on failure. */
static EVP_MD_CTX *sha256_begin(void)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1)
        return ctx;
    EVP_MD_CTX_free(ctx);
    mp_error_set(MP_ERR_INTERNAL, "libcrypto could not start a SHA-256 digest");
    return NULL;
}

static mp_status sha256_end(EVP_MD_CTX *ctx, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    int ok = EVP_DigestFinal_ex(ctx, md, &n) == 1 && n == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return mp_error_set(MP_ERR_INTERNAL, "libcrypto could not finish a SHA-256 digest");
    hex_digest(md, n, hex);
    return MP_OK;
}

mp_status mp_sha256_file(const char *path, char hex[65])
{
    hex[0] = '\0';
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    unsigned char *buf = mp_malloc(IO_CHUNK);
    EVP_MD_CTX *ctx = buf ? sha256_begin() : NULL;
    if (!ctx) {
        mp_status st = buf ? MP_ERR_INTERNAL : mp_error_set(MP_ERR_NOMEM, "out of memory hashing %s", path);
        mp_free(buf);
        fclose(fp);
        return st;
    }
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, IO_CHUNK, fp)) > 0)
        ok = EVP_DigestUpdate(ctx, buf, n) == 1;
    int rd_err = ferror(fp);
    int e = errno;
    fclose(fp);
    mp_free(buf);
    if (rd_err || !ok) {
        EVP_MD_CTX_free(ctx);
        return rd_err ? mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(e))
                      : mp_error_set(MP_ERR_INTERNAL, "libcrypto failed hashing %s", path);
    }
    return sha256_end(ctx, hex);
}
