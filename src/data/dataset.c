/*
 * dataset.c - a CSV file read into memory as SMILES, a target matrix (NaN =
 * missing label) and the file line of every row.  Column selection
 * (mp_columns_resolve) and target-cell parsing (mp_parse_target) are shared
 * with the streaming predictor, which reads the same files row by row.
 */
#define _GNU_SOURCE   /* qsort_r */
#include "data/dataset.h"
#include "data/csv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Target cells                                                           */
/* ===================================================================== */

static int is_blank_char(char c) { return c == ' ' || c == '\t'; }

/*
 * The rule, chosen to agree with Python's float() that Chemprop applies to
 * every cell: spaces and tabs around the number are allowed; the rest must be
 * one decimal number (digits, optional sign, point and exponent) that is
 * finite as a double.  So "nan", "inf", "-inf", "1e999", "0x10", "1.2.3",
 * "abc", "1 2" and a cell of only spaces are all rejected.  A number too small
 * for a double becomes 0 or a subnormal, as in Python.
 */
mp_status mp_parse_target(const char *cell, double *value)
{
    if (cell[0] == '\0') {
        *value = NAN;
        return MP_OK;
    }
    const char *b = cell, *e = cell + strlen(cell);
    while (b < e && is_blank_char(*b))
        b++;
    while (e > b && is_blank_char(e[-1]))
        e--;
    if (b == e)
        return MP_ERR_FORMAT;
    /* Only the characters of a decimal number: this keeps strtod from
     * reading hex, "inf", "nan" or "infinity". */
    for (const char *p = b; p < e; p++)
        if (!strchr("0123456789+-.eE", *p))
            return MP_ERR_FORMAT;
    char tmp[128];
    size_t n = (size_t)(e - b);
    if (n >= sizeof tmp)
        return MP_ERR_FORMAT;
    memcpy(tmp, b, n);
    tmp[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    if (end != tmp + n || end == tmp || !isfinite(v))
        return MP_ERR_FORMAT;
    if (errno == ERANGE && fabs(v) > 1.0)   /* overflow; underflow is fine */
        return MP_ERR_FORMAT;
    *value = v;
    return MP_OK;
}

mp_status mp_parse_target_ineq(const char *cell, double *value, int *ineq)
{
    const char *p = cell;
    while (is_blank_char(*p))
        p++;
    *ineq = *p == '<' ? MP_DATA_INEQ_LT : *p == '>' ? MP_DATA_INEQ_GT : 0;
    if (!*ineq)
        return mp_parse_target(cell, value);
    p++;
    if (*p == '\0' || mp_parse_target(p, value) != MP_OK || isnan(*value))
        return MP_ERR_FORMAT;   /* "<" alone, "<abc" */
    return MP_OK;
}

/* ===================================================================== */
/* Column selection                                                       */
/* ===================================================================== */

/* "'a', 'b', 'c', ... (N columns)" for messages, at most a few names. */
static void list_columns(char *out, size_t cap, char *const *header, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && i < 8; i++) {
        int w = snprintf(out + len, cap - len, "%s'%s'", i ? ", " : "", header[i]);
        if (w < 0 || (size_t)w >= cap - len)
            return;
        len += (size_t)w;
    }
    if (n > 8)
        snprintf(out + len, cap - len, ", ... (%zu columns)", n);
}

/*
 * Finds `name` in the header: a unique exact match wins; failing that, a
 * unique case-insensitive one.  Two equal candidates make the choice
 * ambiguous, an error naming both column numbers.
 */
static mp_status find_column(const char *path, char *const *header, size_t n,
                             const char *name, const char *what, size_t *col)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t found = n, second = n;
        for (size_t i = 0; i < n; i++) {
            int hit = pass == 0 ? !strcmp(header[i], name) : mp_strcaseeq(header[i], name);
            if (!hit)
                continue;
            if (found == n)
                found = i;
            else if (second == n)
                second = i;
        }
        if (second < n)
            return mp_error_set(MP_ERR_FORMAT,
                                "%s:1: %s '%s' is ambiguous: columns %zu ('%s') and %zu ('%s') both match",
                                path, what, name, found + 1, header[found], second + 1, header[second]);
        if (found < n) {
            *col = found;
            return MP_OK;
        }
    }
    char cols[512];
    list_columns(cols, sizeof cols, header, n);
    return mp_error_set(MP_ERR_ARG, "%s:1: no column '%s' (%s); the header has %s",
                        path, name, what, cols);
}

/*
 * Calls fn(ctx, name) for each comma-separated name of a list.  An empty name
 * ("a,,b", a trailing comma, or an empty list) is an argument error.
 */
typedef mp_status (*name_fn)(void *ctx, const char *name);

static mp_status for_each_name(const char *list, const char *opt, name_fn fn, void *ctx)
{
    char name[1024];
    const char *p = list;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n == 0)
            return mp_error_set(MP_ERR_ARG, "%s: empty column name in '%s'", opt, list);
        if (n >= sizeof name)
            return mp_error_set(MP_ERR_ARG, "%s: column name too long in '%s'", opt, list);
        memcpy(name, p, n);
        name[n] = '\0';
        mp_status st = fn(ctx, name);
        if (st)
            return st;
        if (!c)
            return MP_OK;
        p = c + 1;
    }
}

typedef struct {
    const char *path;
    char *const *header;
    size_t n_header;
    unsigned char *role;   /* per column: 0 free, 1 smiles, 2 target, 3 ignored */
    size_t *targets;
    size_t n_targets;
} resolve_ctx;

enum { ROLE_FREE, ROLE_SMILES, ROLE_TARGET, ROLE_IGNORED };

static mp_status add_ignore(void *vctx, const char *name)
{
    resolve_ctx *x = vctx;
    /* Every column of that name is ignored (duplicates included): asking to
     * drop a name is never ambiguous.  Exact matches first, as elsewhere. */
    int hit = 0;
    for (int pass = 0; pass < 2 && !hit; pass++)
        for (size_t i = 0; i < x->n_header; i++) {
            if (pass == 0 ? strcmp(x->header[i], name) != 0 : !mp_strcaseeq(x->header[i], name))
                continue;
            hit = 1;
            if (x->role[i] == ROLE_SMILES)
                return mp_error_set(MP_ERR_ARG,
                                    "--ignore-columns: '%s' is the SMILES column of %s", name, x->path);
            x->role[i] = ROLE_IGNORED;
        }
    if (!hit) {
        size_t col;
        return find_column(x->path, x->header, x->n_header, name, "--ignore-columns", &col);
    }
    return MP_OK;
}

static mp_status add_target(void *vctx, const char *name)
{
    resolve_ctx *x = vctx;
    size_t col;
    mp_status st = find_column(x->path, x->header, x->n_header, name, "--target-columns", &col);
    if (st)
        return st;
    if (x->role[col] == ROLE_SMILES)
        return mp_error_set(MP_ERR_ARG, "--target-columns: '%s' is the SMILES column of %s",
                            name, x->path);
    if (x->role[col] == ROLE_TARGET)
        return mp_error_set(MP_ERR_ARG, "--target-columns: column '%s' is named twice", name);
    if (x->role[col] == ROLE_IGNORED)
        return mp_error_set(MP_ERR_ARG, "column '%s' is in both --target-columns and --ignore-columns",
                            name);
    x->role[col] = ROLE_TARGET;
    x->targets[x->n_targets++] = col;
    return MP_OK;
}

static int cmp_by_name(const void *a, const void *b, void *header)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    char *const *h = header;
    int c = strcmp(h[i], h[j]);
    return c ? c : (i > j) - (i < j);
}

/* The default targets have distinct names; else the error names the pair
 * a scan in file order meets first.  Sorted, so 100,000 columns cost
 * milliseconds, not the minutes of comparing every pair. */
static mp_status check_unique_targets(const char *path, char *const *header, const size_t *t,
                                      size_t n)
{
    size_t *ix = mp_malloc(sizeof(size_t) * (n ? n : 1));
    if (!ix)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading the header of %s", path);
    memcpy(ix, t, sizeof(size_t) * n);
    mp_status st = MP_OK;
    qsort_r(ix, n, sizeof *ix, cmp_by_name, (void *)header);
    size_t first = 0, second = SIZE_MAX;
    for (size_t k = 1; k < n; k++)
        if (!strcmp(header[ix[k - 1]], header[ix[k]]) &&
            (k < 2 || strcmp(header[ix[k - 2]], header[ix[k]])) && ix[k] < second) {
            first = ix[k - 1];
            second = ix[k];
        }
    if (second != SIZE_MAX)
        st = mp_error_set(MP_ERR_FORMAT,
                          "%s:1: column name '%s' appears twice (columns %zu and %zu); "
                          "rename one or leave it out with --ignore-columns",
                          path, header[second], first + 1, second + 1);
    mp_free(ix);
    return st;
}

mp_status mp_columns_resolve(const char *path, char *const *header, size_t n_header,
                             const mp_column_spec *spec, size_t *smiles_col,
                             size_t **targets, size_t *n_targets)
{
    static const mp_column_spec none = { 0 };
    if (!spec)
        spec = &none;
    if (targets)
        *targets = NULL;
    if (n_targets)
        *n_targets = 0;
    if (n_header == 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: the header is empty", path);

    size_t sc = 0;
    mp_status st;
    if (spec->smiles_column) {
        if ((st = find_column(path, header, n_header, spec->smiles_column, "--smiles-column", &sc)))
            return st;
    } else {
        /* The column called "smiles" in any case, else the first column. */
        st = find_column(path, header, n_header, "smiles", "SMILES column", &sc);
        if (st == MP_ERR_ARG)
            sc = 0;
        else if (st)
            return st;
    }
    *smiles_col = sc;
    if (!targets || spec->no_targets)
        return MP_OK;

    resolve_ctx x = { path, header, n_header, NULL, NULL, 0 };
    x.role = mp_calloc(n_header, 1);
    x.targets = mp_malloc(n_header * sizeof *x.targets);
    if (!x.role || !x.targets) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory reading the header of %s", path);
        goto fail;
    }
    x.role[sc] = ROLE_SMILES;
    if (spec->ignore_columns &&
        (st = for_each_name(spec->ignore_columns, "--ignore-columns", add_ignore, &x)))
        goto fail;
    if (spec->target_columns) {
        if ((st = for_each_name(spec->target_columns, "--target-columns", add_target, &x)))
            goto fail;
    } else {
        for (size_t i = 0; i < n_header; i++) {
            if (x.role[i] != ROLE_FREE)
                continue;
            if (!header[i][0]) {
                st = mp_error_set(MP_ERR_FORMAT,
                                  "%s:1: column %zu has no name (a trailing comma?); "
                                  "choose the targets with --target-columns",
                                  path, i + 1);
                goto fail;
            }
            x.targets[x.n_targets++] = i;
        }
        /* Two targets of one name could not be told apart later (task
         * names, prediction columns): refuse rather than guess. */
        if ((st = check_unique_targets(path, header, x.targets, x.n_targets)))
            goto fail;
        if (x.n_targets == 0) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:1: no target columns (the header has only '%s'%s)",
                              path, header[sc], n_header > 1 ? " and ignored columns" : "");
            goto fail;
        }
    }
    mp_free(x.role);
    *targets = x.targets;
    *n_targets = x.n_targets;
    return MP_OK;
fail:
    mp_free(x.role);
    mp_free(x.targets);
    return st;
}

/* ===================================================================== */
/* Loading                                                                */
/* ===================================================================== */

void mp_dataset_free(mp_dataset *d)
{
    if (!d)
        return;
    if (d->task_names)
        for (size_t i = 0; i < d->n_tasks; i++)
            mp_free(d->task_names[i]);
    if (d->smiles)
        for (size_t i = 0; i < d->n_rows; i++)
            mp_free(d->smiles[i]);
    mp_free(d->task_names);
    mp_free(d->smiles);
    mp_free(d->smiles_name);
    mp_free(d->targets);
    mp_free(d->line);
    mp_free(d->weights);
    mp_free(d->ineq);
    mp_free(d->path);
    mp_free(d);
}

/* Grows the per-row arrays to hold at least `need` rows. */
static mp_status grow_rows(mp_dataset *d, size_t *cap, size_t need, int want_weights)
{
    if (need <= *cap)
        return MP_OK;
    size_t c = *cap ? *cap * 2 : 1024;
    while (c < need)
        c *= 2;
    char **s = mp_realloc(d->smiles, c * sizeof *s);
    if (!s)
        return MP_ERR_NOMEM;
    d->smiles = s;
    size_t *l = mp_realloc(d->line, c * sizeof *l);
    if (!l)
        return MP_ERR_NOMEM;
    d->line = l;
    if (d->n_tasks) {
        double *t = mp_realloc(d->targets, c * d->n_tasks * sizeof *t);
        if (!t)
            return MP_ERR_NOMEM;
        d->targets = t;
        uint8_t *q = mp_realloc(d->ineq, c * d->n_tasks);
        if (!q)
            return MP_ERR_NOMEM;
        d->ineq = q;
    }
    if (want_weights) {
        double *w = mp_realloc(d->weights, c * sizeof *w);
        if (!w)
            return MP_ERR_NOMEM;
        d->weights = w;
    }
    *cap = c;
    return MP_OK;
}

/* Shortens a cell for a message: at most 40 characters, then "...". */
static void clip(char *out, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n < 41 && n < cap)
        memcpy(out, s, n + 1);
    else
        snprintf(out, cap, "%.40s...", s);
}

/* mp_columns_resolve with the weight column (when named) found first and
 * left out of the default targets; *wcol (size_t)-1 when there is none.  A
 * weight column that is also a named target is an error. */
static mp_status resolve_with_weights(const char *path, char *const *header, size_t n_header,
                                      const mp_column_spec *spec, size_t *sc, size_t **tcols,
                                      size_t *n_tcols, size_t *wcol)
{
    *wcol = (size_t)-1;
    if (!spec->weight_column)
        return mp_columns_resolve(path, header, n_header, spec, sc, tcols, n_tcols);
    mp_column_spec ws = { .smiles_column = spec->smiles_column,
                          .target_columns = spec->weight_column, .no_targets = 0 };
    size_t *w = NULL, nw = 0, s0;
    mp_status st = mp_columns_resolve(path, header, n_header, &ws, &s0, &w, &nw);
    if (st)
        return st;
    *wcol = w[0];
    mp_free(w);
    mp_column_spec ts = *spec;
    char *ign = NULL;
    size_t need = strlen(spec->weight_column) + 2 +
                  (spec->ignore_columns ? strlen(spec->ignore_columns) : 0);
    if (!spec->target_columns) {
        if (!(ign = mp_malloc(need)))
            return mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
        snprintf(ign, need, "%s%s%s", spec->ignore_columns ? spec->ignore_columns : "",
                 spec->ignore_columns ? "," : "", header[*wcol]);
        ts.ignore_columns = ign;
    }
    st = mp_columns_resolve(path, header, n_header, &ts, sc, tcols, n_tcols);
    mp_free(ign);
    for (size_t j = 0; st == MP_OK && tcols && j < *n_tcols; j++)
        if ((*tcols)[j] == *wcol)
            st = mp_error_set(MP_ERR_ARG, "%s: column '%s' is both a target and the weight "
                              "column", path, header[*wcol]);
    if (st == MP_OK && *sc == *wcol)
        st = mp_error_set(MP_ERR_ARG, "%s: column '%s' is both the SMILES and the weight column",
                          path, header[*wcol]);
    if (st && tcols) {
        mp_free(*tcols);
        *tcols = NULL;
    }
    return st;
}

mp_status mp_dataset_load(mp_dataset **out, const char *path, const mp_column_spec *spec)
{
    static const mp_column_spec none = { 0 };
    if (!spec)
        spec = &none;
    *out = NULL;
    mp_csv_reader *r = NULL;
    size_t *tcols = NULL, n_tcols = 0, cap = 0, wcol = (size_t)-1, n_ineq = 0;
    mp_dataset *d = mp_calloc(1, sizeof *d);
    if (!d)
        return mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
    mp_status st = mp_csv_open(&r, path);
    if (st)
        goto fail;
    if (!(d->path = mp_strdup(path))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
        goto fail;
    }

    char **f;
    size_t nf, line, n_header;
    if ((st = mp_csv_next(r, &f, &nf, &line)))
        goto fail;
    if (nf == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: the file is empty (expected a header line)", path);
        goto fail;
    }
    n_header = nf;
    size_t sc;
    if ((st = resolve_with_weights(path, f, nf, spec, &sc, spec->no_targets ? NULL : &tcols,
                                   &n_tcols, &wcol)))
        goto fail;
    d->n_tasks = n_tcols;
    if (!(d->smiles_name = mp_strdup(f[sc])))
        goto nomem;
    if (n_tcols) {
        if (!(d->task_names = mp_calloc(n_tcols, sizeof *d->task_names)))
            goto nomem;
        for (size_t j = 0; j < n_tcols; j++)
            if (!(d->task_names[j] = mp_strdup(f[tcols[j]])))
                goto nomem;
    }

    for (;;) {
        if ((st = mp_csv_next(r, &f, &nf, &line)))
            goto fail;
        if (nf == 0)
            break;
        if (nf != n_header) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: expected %zu fields as in the header, found %zu",
                              path, line, n_header, nf);
            goto fail;
        }
        if (d->n_rows == MP_DATASET_MAX_ROWS) {
            st = mp_error_set(MP_ERR_ARG, "%s:%zu: more than %u data rows: molprop loads a file "
                              "for training or evaluation whole, and stops there (the limit; "
                              "predict streams files of any length)", path, line,
                              (unsigned)MP_DATASET_MAX_ROWS);
            goto fail;
        }
        if (grow_rows(d, &cap, d->n_rows + 1, wcol != (size_t)-1))
            goto nomem;
        size_t i = d->n_rows;
        double *row = d->n_tasks ? d->targets + i * d->n_tasks : NULL;   /* none: no targets */
        for (size_t j = 0; j < n_tcols; j++) {
            int iq = 0;
            if (mp_parse_target_ineq(f[tcols[j]], &row[j], &iq) != MP_OK) {
                char cell[64];
                clip(cell, sizeof cell, f[tcols[j]]);
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': '%s' is not a number%s",
                                  path, line, d->task_names[j], cell,
                                  " (a target must be a finite number, or empty for a missing label)");
                goto fail;
            }
            if (iq && !spec->inequalities) {
                char cell[64];
                clip(cell, sizeof cell, f[tcols[j]]);
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': the inequality label "
                                  "'%s' needs a bounded loss (--loss bounded-mse, bounded-mae "
                                  "or bounded-rmse)", path, line, d->task_names[j], cell);
                goto fail;
            }
            d->ineq[i * d->n_tasks + j] = (uint8_t)iq;
            n_ineq += iq != 0;
        }
        if (wcol != (size_t)-1) {
            double w;
            if (mp_parse_target(f[wcol], &w) != MP_OK || !(w >= 0)) {
                char cell[64];
                clip(cell, sizeof cell, f[wcol]);
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': weight '%s' is not a "
                                  "finite number >= 0", path, line, spec->weight_column, cell);
                goto fail;
            }
            d->weights[i] = w;
        }
        if (!(d->smiles[i] = mp_strdup(f[sc])))
            goto nomem;
        d->line[i] = line;
        d->n_rows++;
    }
    if (d->n_rows == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: no data rows after the header", path);
        goto fail;
    }

    /* Give back the slack of the doubling growth. */
    char **s = mp_realloc(d->smiles, d->n_rows * sizeof *s);
    if (s)
        d->smiles = s;
    size_t *l = mp_realloc(d->line, d->n_rows * sizeof *l);
    if (l)
        d->line = l;
    if (d->n_tasks) {
        double *t = mp_realloc(d->targets, d->n_rows * d->n_tasks * sizeof *t);
        if (t)
            d->targets = t;
    }
    if (n_ineq == 0) {   /* no inequality anywhere: none kept */
        mp_free(d->ineq);
        d->ineq = NULL;
    }
    mp_free(tcols);
    mp_csv_close(r);
    *out = d;
    return MP_OK;

nomem:
    st = mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
fail:
    mp_free(tcols);
    mp_csv_close(r);
    mp_dataset_free(d);
    return st;
}
