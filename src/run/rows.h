/*
 * rows.h - the input of a streamed run (predict, fingerprint): a CSV file's
 * header, its SMILES column, and its rows a chunk at a time.
 */
#ifndef MP_ROWS_H
#define MP_ROWS_H

#include "data/csv.h"
#include "data/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    mp_csv_reader *r;
    const char    *path;
    size_t         n_header;     /* fields of the header row                   */
    size_t         smiles_col;
    char          *smiles_name;  /* the SMILES column's header (owned)         */
    int32_t        n, cap;       /* rows in the chunk, and room                */
    char         **smiles;       /* n SMILES (owned), in input order           */
    size_t        *line;         /* their lines in the file                    */
} mp_rows;

/* Opens path, reads its header and finds the SMILES column by spec (its
 * targets are not wanted), with room for a chunk of cap rows.  On error the
 * message names the file; mp_rows_close frees what was made either way. */
mp_status mp_rows_open(mp_rows *w, const char *path, const mp_column_spec *spec, int32_t cap);

/* Reads rows into the chunk until it holds cap of them or the input ends
 * (*eof = 1 then; the chunk may still hold rows).  A row with another field
 * count than the header's is an error naming the file and line. */
mp_status mp_rows_fill(mp_rows *w, int *eof);

/* Empties the chunk (frees its strings). */
void mp_rows_clear(mp_rows *w);

/* Frees everything and closes the file; w may be zeroed or half open. */
void mp_rows_close(mp_rows *w);

#ifdef __cplusplus
}
#endif

#endif
