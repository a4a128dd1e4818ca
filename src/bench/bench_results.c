/*
 * bench_results.c - the benchmark's results file: one tab-separated row
 * per finished run, appended with a single write() to an O_APPEND
 * descriptor the moment the run ends, so an interrupted grid keeps every
 * run it finished and never holds half a row; read back to skip finished
 * runs, compared (bench compare) and drawn (bench report).  Another tool's
 * results (bench/chemprop/) use the same columns.  Also the runner's list
 * of temporary files, which a signal handler removes.
 */
#include "bench/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The columns, in file order.  Lists (per-task scores, per-epoch curves)
 * are comma-separated within their column; "nan" is a missing number. */
static const char *const columns[] = {
    "tool", "dataset", "model", "seed", "split", "split_checksum", "data_sha256", "settings",
    "metric", "n_tasks", "test", "val", "test_tasks", "val_tasks", "epochs", "best_epoch",
    "n_train", "n_val", "n_test", "featurize_seconds", "train_seconds", "device", "precision",
    "version", "train_loss", "val_curve",
};
#define N_COLUMNS (sizeof columns / sizeof columns[0])

const char *mp_bench_results_header(void)
{
    static char header[512];
    if (!header[0]) {
        size_t k = 0;
        for (size_t i = 0; i < N_COLUMNS; i++)
            k += (size_t)snprintf(header + k, sizeof header - k, "%s%s", i ? "\t" : "",
                                  columns[i]);
        snprintf(header + k, sizeof header - k, "\n");
    }
    return header;
}

void mp_bench_row_free(mp_bench_row *r)
{
    if (!r)
        return;
    mp_free(r->tool);
    mp_free(r->dataset);
    mp_free(r->model);
    mp_free(r->split);
    mp_free(r->metric);
    mp_free(r->device);
    mp_free(r->precision);
    mp_free(r->version);
    mp_free(r->test_tasks);
    mp_free(r->val_tasks);
    mp_free(r->train_loss);
    mp_free(r->val_curve);
    memset(r, 0, sizeof *r);
}

void mp_bench_rows_free(mp_bench_row *rows, size_t n)
{
    for (size_t i = 0; rows && i < n; i++)
        mp_bench_row_free(&rows[i]);
    mp_free(rows);
}

/* ===================================================================== */
/* Writing a row                                                          */
/* ===================================================================== */

static mp_status put_num(mp_buf *b, double v, const char *fmt)
{
    if (isnan(v))
        return mp_buf_append(b, "nan", 3);
    return mp_buf_printf(b, fmt, v);
}

static mp_status put_list(mp_buf *b, const double *v, int n, const char *fmt)
{
    if (n <= 0 || !v)
        return mp_buf_append(b, "-", 1);
    mp_status st = MP_OK;
    for (int i = 0; i < n && !st; i++) {
        if (i)
            st = mp_buf_append(b, ",", 1);
        if (!st)
            st = put_num(b, v[i], fmt);
    }
    return st;
}

/* Text fields may not hold tabs or newlines (they would break the row). */
static mp_status put_text(mp_buf *b, const char *s)
{
    if (!s || !*s)
        return mp_buf_append(b, "-", 1);
    for (const char *c = s; *c; c++)
        if (*c == '\t' || *c == '\n' || *c == '\r')
            return mp_error_set(MP_ERR_ARG, "results field '%s' holds a tab or newline", s);
    return mp_buf_append(b, s, strlen(s));
}

mp_status mp_bench_row_format(const mp_bench_row *r, mp_buf *b)
{
    mp_status st = MP_OK;
#define TAB() (st ? st : (st = mp_buf_append(b, "\t", 1)))
#define TEXT(s) (st ? st : (st = put_text(b, s)))
#define NUM(v, f) (st ? st : (st = put_num(b, v, f)))
#define LIST(v, n, f) (st ? st : (st = put_list(b, v, n, f)))
#define INT(v) (st ? st : (st = mp_buf_printf(b, "%lld", (long long)(v))))
    TEXT(r->tool); TAB(); TEXT(r->dataset); TAB(); TEXT(r->model); TAB(); INT(r->seed); TAB();
    TEXT(r->split); TAB(); TEXT(r->split_sum); TAB(); TEXT(r->data_sha); TAB();
    TEXT(r->settings); TAB(); TEXT(r->metric); TAB(); INT(r->n_tasks); TAB();
    /* scores exactly (17 digits round-trip a double); curves to 9 */
    NUM(r->test, "%.17g"); TAB(); NUM(r->val, "%.17g"); TAB();
    LIST(r->test_tasks, r->n_tasks, "%.17g"); TAB(); LIST(r->val_tasks, r->n_tasks, "%.17g");
    TAB();
    INT(r->epochs); TAB(); INT(r->best_epoch); TAB(); INT(r->n_train); TAB(); INT(r->n_val);
    TAB(); INT(r->n_test); TAB(); NUM(r->featurize_seconds, "%.3f"); TAB();
    NUM(r->train_seconds, "%.3f"); TAB(); TEXT(r->device); TAB(); TEXT(r->precision); TAB();
    TEXT(r->version); TAB(); LIST(r->train_loss, r->n_curve, "%.9g"); TAB();
    LIST(r->val_curve, r->n_curve, "%.9g");
    if (!st)
        st = mp_buf_append(b, "\n", 1);
#undef TAB
#undef TEXT
#undef NUM
#undef LIST
#undef INT
    return st;
}

/* ===================================================================== */
/* Reading rows                                                           */
/* ===================================================================== */

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

static int get_num(const char *s, double *v)
{
    char *end;
    if (!strcmp(s, "nan") || !strcmp(s, "-")) {
        *v = NAN;
        return 1;
    }
    *v = strtod(s, &end);
    return end != s && !*end;
}

static int get_long(const char *s, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return !errno && end != s && !*end;
}

/* A comma list into a new array (*n its length; "-" is empty). */
static int get_list(const char *s, double **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!strcmp(s, "-") || !*s)
        return 1;
    int count = 1;
    for (const char *c = s; *c; c++)
        count += *c == ',';
    double *v = mp_malloc(sizeof(double) * (size_t)count);
    if (!v)
        return 0;
    const char *p = s;
    for (int i = 0; i < count; i++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item) {
            mp_free(v);
            return 0;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!get_num(item, &v[i])) {
            mp_free(v);
            return 0;
        }
        p = comma ? comma + 1 : p + len;
    }
    *out = v;
    *n = count;
    return 1;
}

static char *dup_text(const char *s)
{
    return mp_strdup(strcmp(s, "-") ? s : "");
}

/* Parses one data line (modified in place) into r; a message on failure. */
static mp_status parse_row(const char *path, size_t line, char *s, mp_bench_row *r)
{
    memset(r, 0, sizeof *r);
    char *f[N_COLUMNS + 1];
    size_t nf = split_tabs(s, f, N_COLUMNS + 1);
    if (nf != N_COLUMNS)
        return mp_error_set(MP_ERR_FORMAT, "%s:%zu: expected %zu tab-separated fields, found %zu",
                            path, line, N_COLUMNS, nf);
    long v;
    double x;
    int nl;
    const char *bad = NULL;
    if (!(r->tool = dup_text(f[0])) || !(r->dataset = dup_text(f[1])) ||
        !(r->model = dup_text(f[2])) || !(r->split = dup_text(f[4])) ||
        !(r->metric = dup_text(f[8])) || !(r->device = dup_text(f[21])) ||
        !(r->precision = dup_text(f[22])) || !(r->version = dup_text(f[23])))
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
    snprintf(r->split_sum, sizeof r->split_sum, "%s", strcmp(f[5], "-") ? f[5] : "");
    snprintf(r->data_sha, sizeof r->data_sha, "%s", strcmp(f[6], "-") ? f[6] : "");
    snprintf(r->settings, sizeof r->settings, "%s", strcmp(f[7], "-") ? f[7] : "");
    if (!get_long(f[3], &r->seed))
        bad = "seed";
    else if (!get_long(f[9], &v) || v < 0 || v > 1000000)
        bad = "n_tasks";
    else if ((r->n_tasks = (int)v), !get_num(f[10], &r->test))
        bad = "test";
    else if (!get_num(f[11], &r->val))
        bad = "val";
    else if (!get_list(f[12], &r->test_tasks, &nl) || (nl && nl != r->n_tasks))
        bad = "test_tasks";
    else if (!get_list(f[13], &r->val_tasks, &nl) || (nl && nl != r->n_tasks))
        bad = "val_tasks";
    else if (!get_long(f[14], &v) || (r->epochs = (int)v, 0))
        bad = "epochs";
    else if (!get_long(f[15], &v) || (r->best_epoch = (int)v, 0))
        bad = "best_epoch";
    else if (!get_long(f[16], &r->n_train) || !get_long(f[17], &r->n_val) ||
             !get_long(f[18], &r->n_test))
        bad = "n_train/n_val/n_test";
    else if (!get_num(f[19], &r->featurize_seconds) || !get_num(f[20], &r->train_seconds))
        bad = "seconds";
    else if (!get_list(f[24], &r->train_loss, &r->n_curve))
        bad = "train_loss";
    else if (!get_list(f[25], &r->val_curve, &nl) || (nl && nl != r->n_curve))
        bad = "val_curve";
    (void)x;
    if (bad)
        return mp_error_set(MP_ERR_FORMAT, "%s:%zu: bad %s", path, line, bad);
    if (!r->val_curve && r->n_curve) {   /* a loss curve without validation scores */
        r->val_curve = mp_malloc(sizeof(double) * (size_t)r->n_curve);
        if (!r->val_curve)
            return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
        for (int i = 0; i < r->n_curve; i++)
            r->val_curve[i] = NAN;
    }
    return MP_OK;
}

mp_status mp_bench_rows_read(const char *path, int missing_ok, mp_bench_row **rows, size_t *n,
                             size_t *n_torn)
{
    *rows = NULL;
    *n = 0;
    if (n_torn)
        *n_torn = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        if (missing_ok && errno == ENOENT)
            return MP_OK;
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    mp_buf b = { 0 };
    char chunk[65536];
    size_t got;
    mp_status st = mp_buf_append(&b, "", 0);
    while (!st && (got = fread(chunk, 1, sizeof chunk, fp)) > 0)
        st = mp_buf_append(&b, chunk, got);
    if (!st && ferror(fp))
        st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    fclose(fp);
    if (st) {
        mp_buf_free(&b);
        return st;
    }
    b.data[b.len] = '\0';
    /* A last line without its newline was cut short: left out. */
    if (b.len && b.data[b.len - 1] != '\n') {
        char *last = strrchr(b.data, '\n');
        *(last ? last + 1 : b.data) = '\0';
        if (n_torn)
            *n_torn = 1;
    }
    size_t cap = 1;
    for (char *c = b.data; *c; c++)
        cap += *c == '\n';
    mp_bench_row *out = mp_calloc(cap, sizeof *out);
    if (!out) {
        mp_buf_free(&b);
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
    }
    const char *header = mp_bench_results_header();
    size_t line = 0, k = 0;
    int seen_header = 0;
    for (char *s = b.data; *s && !st;) {
        line++;
        char *nl = strchr(s, '\n');
        *nl = '\0';
        if (nl > s && nl[-1] == '\r')
            nl[-1] = '\0';
        if (*s == '\0' || *s == '#') {
            s = nl + 1;
            continue;
        }
        if (!seen_header) {
            if (strncmp(s, header, strlen(header) - 1) || s[strlen(header) - 1])
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: not a results file: the header "
                                  "should be '%.60s...'", path, line, header);
            seen_header = 1;
        } else {
            st = parse_row(path, line, s, &out[k]);
            k++;
        }
        s = nl + 1;
    }
    mp_buf_free(&b);
    if (st) {
        mp_bench_rows_free(out, k);
        return st;
    }
    *rows = out;
    *n = k;
    return MP_OK;
}

/* ===================================================================== */
/* Appending                                                              */
/* ===================================================================== */

mp_status mp_bench_results_open(const char *path, int *fd)
{
    *fd = -1;
    int f = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (f < 0)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        close(f);
        return mp_error_set(MP_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    /* A torn last row (the machine went down mid-write) is cut off at the
     * last newline, so the next row starts on a line of its own. */
    off_t end = sb.st_size, keep = end;
    while (keep > 0) {
        char c;
        if (pread(f, &c, 1, keep - 1) != 1) {
            close(f);
            return mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        }
        if (c == '\n')
            break;
        keep--;
    }
    if (keep != end && ftruncate(f, keep) != 0) {
        close(f);
        return mp_error_set(MP_ERR_IO, "cannot repair %s: %s", path, strerror(errno));
    }
    if (keep == 0) {
        const char *h = mp_bench_results_header();
        if (write(f, h, strlen(h)) != (ssize_t)strlen(h)) {
            close(f);
            return mp_error_set(MP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        }
    }
    *fd = f;
    return MP_OK;
}

mp_status mp_bench_results_append(int fd, const char *path, const mp_bench_row *r)
{
    mp_buf b = { 0 };
    mp_status st = mp_bench_row_format(r, &b);
    if (!st) {
        ssize_t w = write(fd, b.data, b.len);
        if (w != (ssize_t)b.len) {
            int e = errno;
            if (w > 0)   /* a short write (disk full): take it back */
                (void)ftruncate(fd, lseek(fd, 0, SEEK_END) - w);
            st = mp_error_set(MP_ERR_IO, "cannot append to %s: %s", path,
                              w < 0 ? strerror(e) : "short write (disk full?)");
        } else if (fsync(fd) != 0 && errno != EINVAL) {
            st = mp_error_set(MP_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
        }
    }
    mp_buf_free(&b);
    return st;
}

/* ===================================================================== */
/* Temporary files, for the signal handler                                */
/* ===================================================================== */

#define MAX_TEMPS 32
#define TEMP_PATH 4096

static char temp_path[MAX_TEMPS][TEMP_PATH];
static volatile sig_atomic_t temp_used[MAX_TEMPS];
static pthread_mutex_t temp_lock = PTHREAD_MUTEX_INITIALIZER;

int mp_bench_temp_register(const char *path)
{
    if (strlen(path) >= TEMP_PATH)
        return -1;
    pthread_mutex_lock(&temp_lock);
    int slot = -1;
    for (int i = 0; i < MAX_TEMPS && slot < 0; i++)
        if (!temp_used[i])
            slot = i;
    if (slot >= 0) {
        strcpy(temp_path[slot], path);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        temp_used[slot] = 1;
    }
    pthread_mutex_unlock(&temp_lock);
    return slot;
}

void mp_bench_temp_unregister(int slot)
{
    if (slot < 0 || slot >= MAX_TEMPS)
        return;
    pthread_mutex_lock(&temp_lock);
    temp_used[slot] = 0;
    pthread_mutex_unlock(&temp_lock);
}

void mp_bench_signal_cleanup(void)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temp_used[i])
            (void)unlink(temp_path[i]);   /* async-signal-safe */
}
