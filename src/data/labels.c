/*
 * labels.c - sparse label matrices (labels.h): compressed sparse rows of
 * the labels present, the converters to and from the dense matrix, blocks
 * of rows made dense for a batch, and a CSV reader that never holds the
 * dense matrix.
 */
#include "data/labels.h"

#include "data/csv.h"

#include <math.h>
#include <string.h>

void mp_labels_free(mp_labels *y)
{
    if (!y)
        return;
    mp_free(y->row_start);
    mp_free(y->task);
    mp_free(y->value);
    mp_free(y);
}

/* An empty matrix of n_rows x n_tasks with room for cap labels. */
static mp_labels *labels_new(size_t n_rows, size_t n_tasks, size_t cap)
{
    mp_labels *y = mp_calloc(1, sizeof *y);
    if (!y)
        return NULL;
    y->n_rows = n_rows;
    y->n_tasks = n_tasks;
    y->row_start = mp_calloc(n_rows + 1, sizeof *y->row_start);
    y->task = mp_malloc(sizeof *y->task * (cap ? cap : 1));
    y->value = mp_malloc(sizeof *y->value * (cap ? cap : 1));
    if (!y->row_start || !y->task || !y->value) {
        mp_labels_free(y);
        return NULL;
    }
    return y;
}

mp_status mp_labels_from_dense(mp_labels **out, const double *targets, size_t n_rows,
                               size_t n_tasks)
{
    *out = NULL;
    size_t nnz = 0;
    for (size_t i = 0; i < n_rows * n_tasks; i++)
        nnz += !isnan(targets[i]);
    mp_labels *y = labels_new(n_rows, n_tasks, nnz);
    if (!y)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (%zu labels)", nnz);
    size_t k = 0;
    for (size_t i = 0; i < n_rows; i++) {
        y->row_start[i] = k;
        for (size_t t = 0; t < n_tasks; t++) {
            double v = targets[i * n_tasks + t];
            if (!isnan(v)) {
                y->task[k] = (int32_t)t;
                y->value[k++] = v;
            }
        }
    }
    y->row_start[n_rows] = k;
    y->nnz = k;
    *out = y;
    return MP_OK;
}

void mp_labels_fill_rows(const mp_labels *y, const int32_t *rows, size_t n, double *dense)
{
    size_t T = y->n_tasks;
    for (size_t i = 0; i < n; i++) {
        double *d = dense + i * T;
        for (size_t t = 0; t < T; t++)
            d[t] = NAN;
        size_t r = (size_t)rows[i];
        for (size_t k = y->row_start[r]; k < y->row_start[r + 1]; k++)
            d[y->task[k]] = y->value[k];
    }
}

void mp_labels_fill_rows_f32(const mp_labels *y, const int32_t *rows, size_t n, float *dense)
{
    size_t T = y->n_tasks;
    for (size_t i = 0; i < n; i++) {
        float *d = dense + i * T;
        for (size_t t = 0; t < T; t++)
            d[t] = NAN;
        size_t r = (size_t)rows[i];
        for (size_t k = y->row_start[r]; k < y->row_start[r + 1]; k++)
            d[y->task[k]] = (float)y->value[k];
    }
}

void mp_labels_to_dense(const mp_labels *y, double *dense)
{
    for (size_t i = 0; i < y->n_rows; i++) {
        double *d = dense + i * y->n_tasks;
        for (size_t t = 0; t < y->n_tasks; t++)
            d[t] = NAN;
        for (size_t k = y->row_start[i]; k < y->row_start[i + 1]; k++)
            d[y->task[k]] = y->value[k];
    }
}

size_t mp_labels_bytes(const mp_labels *y)
{
    return (y->n_rows + 1) * sizeof *y->row_start + y->nnz * (sizeof *y->task + sizeof *y->value);
}

size_t mp_labels_dense_bytes(const mp_labels *y)
{
    return y->n_rows * y->n_tasks * sizeof(double);
}

/* ===================================================================== */
/* Reading a CSV                                                          */
/* ===================================================================== */

static void clip(char *out, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n < 41 && n < cap)
        memcpy(out, s, n + 1);
    else
        snprintf(out, cap, "%.40s...", s);
}

/* Room for `need` rows / `need` labels, growing by doubling. */
static int grow(void **p, size_t elem, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 1;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = mp_realloc(*p, c * elem);
    if (!q)
        return 0;
    *p = q;
    *cap = c;
    return 1;
}

mp_status mp_labels_load(mp_dataset **out, mp_labels **labels, const char *path,
                         const mp_column_spec *spec)
{
    static const mp_column_spec none = { 0 };
    if (!spec)
        spec = &none;
    *out = NULL;
    *labels = NULL;
    mp_csv_reader *r = NULL;
    size_t *tcols = NULL, n_tcols = 0, row_cap = 0, nnz_cap = 0, start_cap = 0;
    mp_dataset *d = mp_calloc(1, sizeof *d);
    mp_labels *y = mp_calloc(1, sizeof *y);
    if (!d || !y) {
        mp_free(d);
        mp_free(y);
        return mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
    }
    mp_status st = mp_csv_open(&r, path);
    if (st)
        goto fail;
    if (!(d->path = mp_strdup(path)))
        goto nomem;
    char **f;
    size_t nf, line;
    if ((st = mp_csv_next(r, &f, &nf, &line)))
        goto fail;
    if (nf == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: the file is empty (expected a header line)", path);
        goto fail;
    }
    size_t n_header = nf, sc;
    if ((st = mp_columns_resolve(path, f, nf, spec, &sc, &tcols, &n_tcols)))
        goto fail;
    d->n_tasks = y->n_tasks = n_tcols;
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
        size_t i = d->n_rows, scap = row_cap, lcap = row_cap;
        if (!grow((void **)&d->smiles, sizeof *d->smiles, &scap, i + 1) ||
            !grow((void **)&d->line, sizeof *d->line, &lcap, i + 1) ||
            !grow((void **)&y->row_start, sizeof *y->row_start, &start_cap, i + 2))
            goto nomem;
        row_cap = scap < lcap ? scap : lcap;
        y->row_start[i] = y->nnz;
        for (size_t j = 0; j < n_tcols; j++) {
            const char *cell = f[tcols[j]];
            if (!cell[0])
                continue;   /* missing: the common case, nothing stored */
            double v;
            if (mp_parse_target(cell, &v) != MP_OK) {
                char c[64];
                clip(c, sizeof c, cell);
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: column '%s': '%s' is not a number%s",
                                  path, line, d->task_names[j], c,
                                  " (a target must be a finite number, or empty for a missing label)");
                goto fail;
            }
            if (isnan(v))
                continue;
            size_t tc = nnz_cap, vc = nnz_cap;
            if (!grow((void **)&y->task, sizeof *y->task, &tc, y->nnz + 1) ||
                !grow((void **)&y->value, sizeof *y->value, &vc, y->nnz + 1))
                goto nomem;
            nnz_cap = tc < vc ? tc : vc;
            y->task[y->nnz] = (int32_t)j;
            y->value[y->nnz++] = v;
        }
        if (!(d->smiles[i] = mp_strdup(f[sc])))
            goto nomem;
        d->line[i] = line;
        d->n_rows++;
        y->n_rows = d->n_rows;
        y->row_start[d->n_rows] = y->nnz;
    }
    if (d->n_rows == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: no data rows after the header", path);
        goto fail;
    }
    if (!y->task || !y->value) {   /* not one label: keep valid arrays */
        size_t tc = nnz_cap, vc = nnz_cap;
        if (!grow((void **)&y->task, sizeof *y->task, &tc, 1) ||
            !grow((void **)&y->value, sizeof *y->value, &vc, 1))
            goto nomem;
    }
    mp_free(tcols);
    mp_csv_close(r);
    *out = d;
    *labels = y;
    return MP_OK;
nomem:
    st = mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
fail:
    mp_free(tcols);
    mp_csv_close(r);
    mp_dataset_free(d);
    mp_labels_free(y);
    return st;
}
