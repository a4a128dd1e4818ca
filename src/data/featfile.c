/*
 * featfile.c - the user's molecule features (featfile.h): a CSV through the
 * CSV reader, or a NumPy .npy file parsed here (its header is a Python dict
 * literal of three keys; only the forms NumPy writes are accepted).
 */
#include "data/featfile.h"

#include "data/csv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mp_featfile_free(mp_featfile *f)
{
    if (f->names)
        for (size_t j = 0; j < f->n_cols; j++)
            mp_free(f->names[j]);
    mp_free(f->names);
    mp_free(f->values);
    memset(f, 0, sizeof *f);
}

mp_status mp_featfile_check_rows(const mp_featfile *f, const char *path, size_t n_rows,
                                 const char *what)
{
    if (f->n_rows != n_rows)
        return mp_error_set(MP_ERR_FORMAT, "%s: %zu rows of features, %s has %zu (one row of "
                            "features per input row)", path, f->n_rows, what, n_rows);
    return MP_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* ===================================================================== */
/* CSV                                                                    */
/* ===================================================================== */

/* A cell as Python's float() reads it: the whole text one number (spaces
 * around it allowed). */
static int parse_cell(const char *s, double *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s)
        return 0;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end)
        return 0;
    *out = v;   /* an overflow is inf, as float() gives */
    return 1;
}

static mp_status load_csv(mp_featfile *f, const char *path)
{
    mp_csv_reader *r = NULL;
    char **fields;
    size_t nf, line;
    mp_buf rows = { 0 };
    mp_status st = mp_csv_open(&r, path);
    if (st)
        return st;
    if ((st = mp_csv_next(r, &fields, &nf, &line)))
        goto done;
    if (nf == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: empty file (a features file starts with a "
                          "header row)", path);
        goto done;
    }
    if (!(f->names = mp_calloc(nf, sizeof(char *)))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
        goto done;
    }
    f->n_cols = nf;
    for (size_t j = 0; j < nf; j++)
        if (!(f->names[j] = mp_strdup(fields[j]))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
            goto done;
        }
    for (;;) {
        if ((st = mp_csv_next(r, &fields, &nf, &line)))
            goto done;
        if (nf == 0)
            break;
        if (nf != f->n_cols) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: %zu fields, the header has %zu", path,
                              line, nf, f->n_cols);
            goto done;
        }
        if ((st = mp_buf_reserve(&rows, nf * sizeof(double))))
            goto done;
        double *row = (double *)(rows.data + rows.len);
        for (size_t j = 0; j < nf; j++)
            if (!parse_cell(fields[j], &row[j])) {
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: column %zu ('%s'): '%s' is not a "
                                  "number", path, line, j + 1, f->names[j], fields[j]);
                goto done;
            }
        rows.len += nf * sizeof(double);
        f->n_rows++;
    }
    f->values = (double *)rows.data;
    rows.data = NULL;
done:
    mp_buf_free(&rows);
    mp_csv_close(r);
    return st;
}

/* ===================================================================== */
/* .npy                                                                   */
/* ===================================================================== */

/* The value of key `key` in the header dict: a pointer just after its colon
 * (spaces skipped), or NULL. */
static const char *dict_value(const char *h, const char *key)
{
    char pat[32];
    const char *p;
    snprintf(pat, sizeof pat, "'%s'", key);
    if (!(p = strstr(h, pat)))
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p++ != ':')
        return NULL;
    while (*p == ' ')
        p++;
    return p;
}

typedef struct {
    char   kind;    /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
    int    size;    /* bytes                                         */
} npy_type;

static int parse_descr(const char *v, npy_type *t)
{
    /* '<f8', '|u1', '|b1' ...: little-endian or byte-sized only */
    if (!v || v[0] != '\'' || (v[1] != '<' && v[1] != '|'))
        return 0;
    t->kind = v[2];
    t->size = v[3] - '0';
    if (v[4] != '\'')
        return 0;
    if (t->kind == 'f')
        return t->size == 4 || t->size == 8;
    if (t->kind == 'i')
        return t->size == 1 || t->size == 2 || t->size == 4 || t->size == 8;
    if (t->kind == 'u')
        return t->size == 1 || t->size == 2 || t->size == 4;
    if (t->kind == 'b')
        return t->size == 1;
    return 0;
}

/* "(n,)" or "(n, k)" */
static int parse_shape(const char *v, size_t *n, size_t *k)
{
    if (!v || *v++ != '(')
        return 0;
    char *end;
    errno = 0;
    unsigned long long a = strtoull(v, &end, 10);
    if (end == v || errno)
        return 0;
    v = end;
    while (*v == ' ')
        v++;
    if (*v++ != ',')
        return 0;
    while (*v == ' ')
        v++;
    if (*v == ')') {
        *n = (size_t)a;
        *k = 1;
        return 1;
    }
    unsigned long long b = strtoull(v, &end, 10);
    if (end == v || errno)
        return 0;
    v = end;
    while (*v == ' ' || *v == ',')
        v++;
    if (*v != ')')
        return 0;
    *n = (size_t)a;
    *k = (size_t)b;
    return 1;
}

static double npy_value(const unsigned char *p, npy_type t)
{
    /* little-endian host assumed, as the model file is */
    switch (t.kind) {
    case 'f':
        if (t.size == 4) {
            float x;
            memcpy(&x, p, 4);
            return x;
        } else {
            double x;
            memcpy(&x, p, 8);
            return x;
        }
    case 'i':
        if (t.size == 1)
            return (double)(int8_t)p[0];
        if (t.size == 2) {
            int16_t x;
            memcpy(&x, p, 2);
            return x;
        }
        if (t.size == 4) {
            int32_t x;
            memcpy(&x, p, 4);
            return x;
        } else {
            int64_t x;
            memcpy(&x, p, 8);
            return (double)x;
        }
    case 'u':
        if (t.size == 1)
            return p[0];
        if (t.size == 2) {
            uint16_t x;
            memcpy(&x, p, 2);
            return x;
        } else {
            uint32_t x;
            memcpy(&x, p, 4);
            return x;
        }
    default:
        return p[0] ? 1.0 : 0.0;
    }
}

static mp_status load_npy(mp_featfile *f, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    unsigned char pre[12];
    char *h = NULL;
    mp_status st = MP_OK;
    size_t hl = 0;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: not a NumPy .npy file (bad magic)", path);
        goto done;
    }
    if (pre[6] == 1) {
        hl = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2) {
            st = mp_error_set(MP_ERR_FORMAT, "%s: .npy file cut short in its header", path);
            goto done;
        }
        hl = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
             (size_t)pre[11] << 24;
    } else {
        st = mp_error_set(MP_ERR_FORMAT, "%s: .npy format version %d.%d not supported", path,
                          pre[6], pre[7]);
        goto done;
    }
    if (hl > (1u << 20) || !(h = mp_malloc(hl + 1))) {
        st = mp_error_set(hl > (1u << 20) ? MP_ERR_FORMAT : MP_ERR_NOMEM,
                          "%s: .npy header of %zu bytes", path, hl);
        goto done;
    }
    if (fread(h, 1, hl, fp) != hl) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: .npy file cut short in its header", path);
        goto done;
    }
    h[hl] = '\0';
    npy_type t;
    size_t n, k;
    const char *fo = dict_value(h, "fortran_order");
    if (!parse_descr(dict_value(h, "descr"), &t)) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: .npy dtype not supported (header %s): use "
                          "little-endian float64/float32/int/bool", path, h);
        goto done;
    }
    if (!fo || strncmp(fo, "False", 5) != 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: .npy array in Fortran order: save it in C order "
                          "(np.ascontiguousarray)", path);
        goto done;
    }
    if (!parse_shape(dict_value(h, "shape"), &n, &k) || k == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: .npy array must have shape (rows,) or (rows, "
                          "columns) with columns > 0 (header %s)", path, h);
        goto done;
    }
    if (n && k > ((size_t)1 << 40) / n) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: .npy array of %zu x %zu is too large", path, n, k);
        goto done;
    }
    f->names = mp_calloc(k, sizeof(char *));
    f->values = mp_malloc(sizeof(double) * (n * k > 0 ? n * k : 1));
    unsigned char *raw = mp_malloc((size_t)t.size * k);
    if (!f->names || !f->values || !raw) {
        mp_free(raw);
        st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s (%zu x %zu)", path, n, k);
        goto done;
    }
    f->n_cols = k;
    for (size_t j = 0; j < k && st == MP_OK; j++) {
        char name[32];
        snprintf(name, sizeof name, "%zu", j);
        if (!(f->names[j] = mp_strdup(name)))
            st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
    }
    for (size_t i = 0; i < n && st == MP_OK; i++) {
        if (fread(raw, (size_t)t.size, k, fp) != k) {
            st = mp_error_set(MP_ERR_FORMAT, "%s: .npy data cut short at row %zu of %zu", path,
                              i, n);
            break;
        }
        for (size_t j = 0; j < k; j++)
            f->values[i * k + j] = npy_value(raw + (size_t)t.size * j, t);
    }
    mp_free(raw);
    if (st == MP_OK && fgetc(fp) != EOF)
        st = mp_error_set(MP_ERR_FORMAT, "%s: bytes after the %zu x %zu array", path, n, k);
    f->n_rows = n;
done:
    mp_free(h);
    fclose(fp);
    return st;
}

mp_status mp_featfile_load(mp_featfile *out, const char *path)
{
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return mp_error_set(MP_ERR_ARG, "no features file named");
    mp_status st = ends_with(path, ".npy") ? load_npy(out, path) : load_csv(out, path);
    if (st == MP_OK && out->n_cols == 0)
        st = mp_error_set(MP_ERR_FORMAT, "%s: no feature columns", path);
    if (st)
        mp_featfile_free(out);
    return st;
}
