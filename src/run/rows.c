/*
 * rows.c - the input of a streamed run, a chunk of rows at a time (rows.h).
 */
#include "run/rows.h"

#include <string.h>

mp_status mp_rows_open(mp_rows *w, const char *path, const mp_column_spec *spec, int32_t cap)
{
    memset(w, 0, sizeof *w);
    w->path = path;
    char **fields;
    size_t nf, line;
    mp_status st;
    if ((st = mp_csv_open(&w->r, path)) || (st = mp_csv_next(w->r, &fields, &nf, &line)))
        return st;
    if (nf == 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: empty file (no header row)", path);
    w->n_header = nf;
    mp_column_spec s = *spec;
    s.no_targets = 1;
    if ((st = mp_columns_resolve(path, fields, nf, &s, &w->smiles_col, NULL, NULL)))
        return st;
    w->smiles_name = mp_strdup(fields[w->smiles_col]);
    w->smiles = mp_calloc((size_t)cap, sizeof(char *));
    w->line = mp_malloc(sizeof(size_t) * (size_t)cap);
    if (!w->smiles_name || !w->smiles || !w->line)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (chunk of %d rows)", (int)cap);
    w->cap = cap;
    return MP_OK;
}

mp_status mp_rows_fill(mp_rows *w, int *eof)
{
    *eof = 0;
    while (w->n < w->cap) {
        char **fields;
        size_t nf, line;
        mp_status st = mp_csv_next(w->r, &fields, &nf, &line);
        if (st)
            return st;
        if (nf == 0) {
            *eof = 1;
            return MP_OK;
        }
        if (nf != w->n_header)
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: expected %zu fields like the header, "
                                "found %zu", w->path, line, w->n_header, nf);
        if (!(w->smiles[w->n] = mp_strdup(fields[w->smiles_col])))
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        w->line[w->n++] = line;
    }
    return MP_OK;
}

void mp_rows_clear(mp_rows *w)
{
    for (int32_t i = 0; w->smiles && i < w->n; i++)
        mp_free(w->smiles[i]);
    w->n = 0;
}

void mp_rows_close(mp_rows *w)
{
    mp_rows_clear(w);
    mp_free(w->smiles);
    mp_free(w->line);
    mp_free(w->smiles_name);
    mp_csv_close(w->r);
    memset(w, 0, sizeof *w);
}
