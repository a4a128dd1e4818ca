/*
 * csv.h - streaming CSV reader (plain or gzip, detected by magic bytes) and a
 * CSV field writer.  The first step of the data flow: everything molprop
 * reads from a user's file passes through mp_csv_next.
 *
 * Rules: RFC 4180 quoting ("" inside quotes), LF, CRLF or lone CR line ends,
 * a UTF-8 BOM at the start is dropped, blank lines are skipped (a record of
 * one field that is empty or only spaces/tabs counts as blank).  Fields are
 * verbatim: spaces around them are kept.  Memory is one record at a time.
 * Line numbers are 1-based physical lines of the file (a quoted field
 * spanning lines counts them all); a record's number is the line where it
 * starts.
 */
#ifndef MP_CSV_H
#define MP_CSV_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_csv_reader mp_csv_reader;

/* Opens `path` ("-" is standard input).  On failure returns MP_ERR_IO naming
 * the file.  The caller frees with mp_csv_close. */
mp_status mp_csv_open(mp_csv_reader **out, const char *path);

/*
 * Reads the next non-blank record.  On MP_OK with *n_fields > 0, fields[i] are
 * NUL-terminated strings owned by the reader, valid until the next call;
 * *line is the record's first line.  At end of file: MP_OK and *n_fields == 0.
 * Malformed input (an unterminated quote, a stray quote, a NUL byte, a gzip
 * stream that is damaged or cut short) gives MP_ERR_FORMAT naming file and line.
 */
mp_status mp_csv_next(mp_csv_reader *r, char ***fields, size_t *n_fields, size_t *line);

const char *mp_csv_path(const mp_csv_reader *r);

/*
 * Limits on hostile input (docs/limits.md), each refused with MP_ERR_FORMAT
 * naming the file and line:
 *   a record of more than MP_CSV_MAX_RECORD bytes (its lines, quoted line
 *     breaks included): memory stays one record, however long the line;
 *   a record of more than MP_CSV_MAX_FIELDS fields;
 *   gzip input inflating to more than MP_CSV_GZ_MAX_RATIO times the
 *     compressed bytes read, once past MP_CSV_GZ_BOMB_BYTES of text (a gzip
 *     bomb; real molecule tables compress 3 to 25 times).
 * mp_csv_set_limits changes the first two for one reader (0: the default).
 */
#define MP_CSV_MAX_RECORD     (16u << 20)
#define MP_CSV_MAX_FIELDS     100000u
#define MP_CSV_GZ_MAX_RATIO   200
#define MP_CSV_GZ_BOMB_BYTES  (64ull << 20)
void mp_csv_set_limits(mp_csv_reader *r, size_t max_record, size_t max_fields);
void mp_csv_close(mp_csv_reader *r);

/*
 * Restricts a plain-file reader to the bytes [start, end) of its file: the
 * next record read is the first that starts at `start`, the reader reports
 * the end of file at `end`.  start and end must be record boundaries (the
 * byte after a line break outside quotes, or the file's size; shard.c finds
 * them); `line` is the physical line at `start`, so messages keep the
 * file's own line numbers.  Called after the header has been read.
 * MP_ERR_ARG for gzip input or standard input (their bytes cannot be
 * addressed), MP_ERR_IO when the seek fails.
 */
mp_status mp_csv_set_range(mp_csv_reader *r, uint64_t start, uint64_t end, size_t line);

/* Writes one field to fp, quoting it (RFC 4180) when it holds a comma, a
 * quote, CR or LF, or leading/trailing space. */
void mp_csv_write_field(FILE *fp, const char *s);
/* Writes a whole record: fields joined by commas, then "\n". */
void mp_csv_write_record(FILE *fp, char *const *fields, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* MP_CSV_H */
