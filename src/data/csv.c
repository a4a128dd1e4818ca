/*
 * csv.c - the streaming CSV reader behind csv.h.
 *
 * Bytes come from the file (inflated on the fly when it starts with the gzip
 * magic 1f 8b, whatever its name), are cut into physical lines so that line
 * numbers stay exact, and go through libcsv in strict mode one line at a
 * time.  A line holds at most one record end, so a finished record is handed
 * to the caller before the next line is read: memory is one input chunk plus
 * one record, however long the file.
 *
 * Fields are kept verbatim: unlike libcsv's default, spaces around unquoted
 * fields are not trimmed (RFC 4180: spaces are part of a field).  A line that
 * holds only spaces and tabs counts as blank.
 */
#include "data/csv.h"

#include <csv.h>
#include <errno.h>
#include <string.h>
#include <zlib.h>

#define TEXT_CHUNK (256u << 10)   /* decompressed / plain bytes per read   */
#define GZ_CHUNK   (128u << 10)   /* compressed bytes per read             */

struct mp_csv_reader {
    char  *path;
    FILE  *fp;
    int    own_fp;          /* 0 for standard input                          */

    /* gzip input (gz = 1): compressed bytes in zin, inflated into text */
    int            gz;
    int            z_live;  /* inflateInit2 succeeded: inflateEnd at close   */
    int            z_member_done; /* a gzip member ended; another may follow */
    int            in_eof;  /* no more compressed bytes in the file          */
    z_stream       z;
    unsigned char *zin;

    /* text bytes not yet parsed: text[pos, len) */
    char  *text;
    size_t pos, len;
    int    eof;             /* no more text will come                        */
    int    bom_checked;

    /* line bookkeeping */
    size_t line;            /* line of the next unread byte (1-based)        */
    int    prev_cr;         /* last byte was CR: an LF now ends no new line  */
    int    in_record;       /* a record has begun and not yet ended          */
    size_t rec_line;        /* the line where it began                       */

    /* the parser and the record it is assembling */
    struct csv_parser p;
    int    p_live;
    mp_buf rec;             /* fields, each NUL-terminated, back to back     */
    size_t *off;            /* n_fields offsets into rec                     */
    char  **fields;         /* handed out: pointers into rec                 */
    size_t n_fields, cap_fields;
    int    rec_done;        /* libcsv reported the end of the record         */
    int    cb_nomem;        /* a callback could not grow its buffers         */

    size_t rec_bytes;       /* bytes of the record so far (its lines)        */
    size_t max_record, max_fields;   /* limits (mp_csv_set_limits)           */
    int    cb_toomany;      /* a record with more than max_fields fields     */
    uint64_t z_in_total, z_out_total; /* gzip: compressed bytes read, text made */

    int      ranged;        /* mp_csv_set_range: read no further than `left`  */
    uint64_t left;          /* bytes of the range not yet read               */

    mp_status failed;       /* sticky: after an error every call fails       */
    int    done;
};

/* ===================================================================== */
/* Opening and closing                                                    */
/* ===================================================================== */

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return mp_malloc((size_t)items * size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    mp_free(p);
}

/* Keep every space: libcsv trims unquoted fields unless told otherwise. */
static int no_space(unsigned char c)
{
    (void)c;
    return 0;
}

void mp_csv_close(mp_csv_reader *r)
{
    if (!r)
        return;
    if (r->fp && r->own_fp)
        fclose(r->fp);
    if (r->z_live)
        inflateEnd(&r->z);
    if (r->p_live)
        csv_free(&r->p);
    mp_free(r->zin);
    mp_free(r->text);
    mp_buf_free(&r->rec);
    mp_free(r->off);
    mp_free(r->fields);
    mp_free(r->path);
    mp_free(r);
}

mp_status mp_csv_open(mp_csv_reader **out, const char *path)
{
    *out = NULL;
    mp_csv_reader *r = mp_calloc(1, sizeof *r);
    if (!r)
        return mp_error_set(MP_ERR_NOMEM, "out of memory opening %s", path);
    r->line = 1;
    r->max_record = MP_CSV_MAX_RECORD;
    r->max_fields = MP_CSV_MAX_FIELDS;
    r->path = mp_strdup(path);
    r->text = mp_malloc(TEXT_CHUNK);
    if (!r->path || !r->text) {
        mp_csv_close(r);
        return mp_error_set(MP_ERR_NOMEM, "out of memory opening %s", path);
    }
    if (!strcmp(path, "-")) {
        r->fp = stdin;
    } else {
        r->fp = fopen(path, "rb");
        r->own_fp = 1;
        if (!r->fp) {
            int e = errno;
            mp_csv_close(r);
            return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(e));
        }
    }

    /* The first bytes decide: gzip magic 1f 8b, or plain text. */
    size_t n = 0;
    while (n < 2) {
        size_t got = fread(r->text + n, 1, 2 - n, r->fp);
        n += got;
        if (got > 0 && ferror(r->fp) && errno == EINTR)
            clearerr(r->fp);   /* interrupted after a byte: the next read goes on */
        if (got > 0 || !ferror(r->fp))
            break;
        int e = errno;
        mp_status st = e == EINTR ? mp_interrupt_poll() : MP_ERR_IO;
        if (st == MP_OK) {   /* a signal that asked for nothing: read again */
            clearerr(r->fp);
            continue;
        }
        mp_csv_close(r);
        return st == MP_ERR_IO ? mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(e))
                               : st;
    }
    if (n == 2 && (unsigned char)r->text[0] == 0x1f && (unsigned char)r->text[1] == 0x8b) {
        r->gz = 1;
        r->zin = mp_malloc(GZ_CHUNK);
        if (!r->zin) {
            mp_csv_close(r);
            return mp_error_set(MP_ERR_NOMEM, "out of memory opening %s", path);
        }
        r->zin[0] = 0x1f;
        r->zin[1] = 0x8b;
        r->z.zalloc = z_alloc;
        r->z.zfree = z_free;
        r->z.next_in = r->zin;
        r->z.avail_in = 2;
        int zr = inflateInit2(&r->z, 16 + MAX_WBITS);   /* gzip wrapper only */
        if (zr != Z_OK) {
            mp_csv_close(r);
            return mp_error_set(zr == Z_MEM_ERROR ? MP_ERR_NOMEM : MP_ERR_INTERNAL,
                                "cannot start decompressing %s (zlib error %d)", path, zr);
        }
        r->z_live = 1;
    } else {
        r->len = n;   /* plain text: the two bytes are its start */
    }

    if (csv_init(&r->p, CSV_STRICT | CSV_STRICT_FINI) != 0) {
        mp_csv_close(r);
        return mp_error_set(MP_ERR_INTERNAL, "cannot start the CSV parser for %s", path);
    }
    r->p_live = 1;
    csv_set_space_func(&r->p, no_space);
    csv_set_realloc_func(&r->p, mp_realloc);
    csv_set_free_func(&r->p, mp_free);
    csv_set_blk_size(&r->p, 1024);
    *out = r;
    return MP_OK;
}

const char *mp_csv_path(const mp_csv_reader *r) { return r->path; }

void mp_csv_set_limits(mp_csv_reader *r, size_t max_record, size_t max_fields)
{
    r->max_record = max_record ? max_record : MP_CSV_MAX_RECORD;
    r->max_fields = max_fields ? max_fields : MP_CSV_MAX_FIELDS;
}

/* ===================================================================== */
/* Getting text: plain reads or inflate                                   */
/* ===================================================================== */

/* A read that failed: a signal that interrupted it (a pipe or a terminal
 * on standard input, a handler installed without SA_RESTART) is a stop
 * request or nothing (then *retry: read again); anything else an error. */
static mp_status read_error(mp_csv_reader *r, int *retry)
{
    *retry = 0;
    if (errno == EINTR) {
        clearerr(r->fp);
        mp_status st = mp_interrupt_poll();
        *retry = st == MP_OK;
        return st;
    }
    return mp_error_set(MP_ERR_IO, "%s:%zu: read error: %s", r->path, r->line, strerror(errno));
}

/* Inflates into text[len, cap).  Sets r->eof after the last member. */
static mp_status inflate_some(mp_csv_reader *r, size_t room)
{
    for (;;) {
        if (r->z.avail_in == 0 && !r->in_eof) {
            size_t n = fread(r->zin, 1, GZ_CHUNK, r->fp);
            r->z_in_total += n;
            if (n == 0 && ferror(r->fp)) {
                int retry;
                mp_status st = read_error(r, &retry);
                if (retry)
                    continue;
                return st;
            }
            if (n == 0)
                r->in_eof = 1;
            r->z.next_in = r->zin;
            r->z.avail_in = (uInt)n;
        }
        if (r->z_member_done) {
            if (r->z.avail_in == 0) {
                if (r->in_eof) {
                    r->eof = 1;
                    return MP_OK;
                }
                continue;
            }
            /* More bytes after a complete member: only another member may follow
             * (that is what `cat a.gz b.gz` makes).  Anything else is damage. */
            if (r->z.next_in[0] != 0x1f)
                return mp_error_set(MP_ERR_FORMAT,
                                    "%s:%zu: damaged gzip file: unexpected bytes after the end of the compressed data",
                                    r->path, r->line);
            inflateReset(&r->z);
            r->z_member_done = 0;
        }
        r->z.next_out = (unsigned char *)r->text + r->len;
        r->z.avail_out = (uInt)room;
        int zr = inflate(&r->z, Z_NO_FLUSH);
        size_t got = room - r->z.avail_out;
        r->len += got;
        r->z_out_total += got;
        /* A gzip bomb: far more text than any CSV makes from so few bytes
         * (molecule tables compress 3-25 times).  Memory would stay bounded
         * (one chunk and one record), but not the time. */
        if (r->z_out_total > MP_CSV_GZ_BOMB_BYTES &&
            r->z_out_total / MP_CSV_GZ_MAX_RATIO > r->z_in_total)
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: refusing a gzip bomb: %llu bytes of text "
                                "from %llu compressed bytes (more than %d times; molprop reads "
                                "at most %d times beyond the first %d MiB)", r->path, r->line,
                                (unsigned long long)r->z_out_total,
                                (unsigned long long)r->z_in_total, MP_CSV_GZ_MAX_RATIO,
                                MP_CSV_GZ_MAX_RATIO, (int)(MP_CSV_GZ_BOMB_BYTES >> 20));
        switch (zr) {
        case Z_STREAM_END:
            r->z_member_done = 1;
            break;
        case Z_OK:
            break;
        case Z_BUF_ERROR:   /* no progress possible: it wants input there is none of */
            if (r->in_eof && r->z.avail_in == 0)
                return mp_error_set(MP_ERR_FORMAT,
                                    "%s:%zu: gzip data ends early (the file is truncated)",
                                    r->path, r->line);
            break;
        case Z_MEM_ERROR:
            return mp_error_set(MP_ERR_NOMEM, "%s:%zu: out of memory decompressing", r->path, r->line);
        default:
            return mp_error_set(MP_ERR_FORMAT, "%s:%zu: damaged gzip data (%s)", r->path, r->line,
                                r->z.msg ? r->z.msg : "zlib error");
        }
        if (got > 0)
            return MP_OK;
    }
}

/* Appends more text at text[len]; sets r->eof when there is none.  A stop
 * request (mp_interrupt_request) ends the reading here, a chunk at a time. */
static mp_status fill(mp_csv_reader *r)
{
    mp_status st = mp_interrupt_poll();
    if (st)
        return st;
    if (r->pos > 0) {
        memmove(r->text, r->text + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    size_t room = TEXT_CHUNK - r->len;
    if (room == 0 || r->eof)
        return MP_OK;
    if (r->gz)
        return inflate_some(r, room);
    if (r->ranged && room > r->left)
        room = (size_t)r->left;
    size_t n = room ? fread(r->text + r->len, 1, room, r->fp) : 0;
    if (r->ranged)
        r->left -= n;
    if (n == 0 && ferror(r->fp)) {
        int retry;
        st = read_error(r, &retry);
        return retry ? MP_OK : st;   /* MP_OK with nothing read: the caller reads again */
    }
    if (n == 0)
        r->eof = 1;
    r->len += n;
    return MP_OK;
}

/* ===================================================================== */
/* Records                                                                */
/* ===================================================================== */

static void on_field(void *s, size_t n, void *data)
{
    mp_csv_reader *r = data;
    if (r->cb_nomem || r->cb_toomany)
        return;
    if (r->n_fields >= r->max_fields) {
        r->cb_toomany = 1;
        return;
    }
    if (r->n_fields == r->cap_fields) {
        size_t cap = r->cap_fields ? 2 * r->cap_fields : 16;
        size_t *off = mp_realloc(r->off, cap * sizeof *off);
        if (!off) {
            r->cb_nomem = 1;
            return;
        }
        r->off = off;
        char **f = mp_realloc(r->fields, cap * sizeof *f);
        if (!f) {
            r->cb_nomem = 1;
            return;
        }
        r->fields = f;
        r->cap_fields = cap;
    }
    r->off[r->n_fields] = r->rec.len;
    if (mp_buf_append(&r->rec, s ? s : "", n) != MP_OK ||
        mp_buf_append(&r->rec, "", 1) != MP_OK) {
        r->cb_nomem = 1;
        return;
    }
    r->n_fields++;
}

static void on_record(int c, void *data)
{
    (void)c;
    mp_csv_reader *r = data;
    r->rec_done = 1;
    r->in_record = 0;
}

static mp_status fail(mp_csv_reader *r, mp_status st)
{
    r->failed = st;
    return st;
}

/* One field that is empty or only spaces and tabs: a blank line. */
static int record_is_blank(const mp_csv_reader *r)
{
    if (r->n_fields != 1)
        return 0;
    for (const char *s = r->rec.data; *s; s++)
        if (*s != ' ' && *s != '\t')
            return 0;
    return 1;
}

static void record_reset(mp_csv_reader *r)
{
    r->n_fields = 0;
    r->rec.len = 0;
    r->rec_done = 0;
    r->rec_bytes = 0;
}

static mp_status too_many_fields(mp_csv_reader *r)
{
    return fail(r, mp_error_set(MP_ERR_FORMAT, "%s:%zu: more than %zu fields in one record "
                                "(the limit)", r->path, r->rec_line, r->max_fields));
}

/* The record is complete: hand it out (1) or drop it as blank (0). */
static int record_take(mp_csv_reader *r, char ***fields, size_t *n_fields, size_t *line)
{
    if (record_is_blank(r)) {
        record_reset(r);
        return 0;
    }
    for (size_t i = 0; i < r->n_fields; i++)
        r->fields[i] = r->rec.data + r->off[i];
    *fields = r->fields;
    *n_fields = r->n_fields;
    *line = r->rec_line;
    return 1;
}

static mp_status at_end(mp_csv_reader *r, char ***fields, size_t *n_fields, size_t *line)
{
    r->done = 1;
    if (csv_fini(&r->p, on_field, on_record, r) != 0) {
        if (csv_error(&r->p) == CSV_ENOMEM)
            return fail(r, mp_error_set(MP_ERR_NOMEM, "%s: out of memory", r->path));
        return fail(r, mp_error_set(MP_ERR_FORMAT,
                                    "%s:%zu: unterminated quoted field (the quote opens on line %zu)",
                                    r->path, r->line, r->rec_line));
    }
    if (r->cb_nomem)
        return fail(r, mp_error_set(MP_ERR_NOMEM, "%s:%zu: out of memory", r->path, r->rec_line));
    if (r->cb_toomany)
        return too_many_fields(r);
    if (r->rec_done)
        record_take(r, fields, n_fields, line);
    return MP_OK;
}

mp_status mp_csv_next(mp_csv_reader *r, char ***fields, size_t *n_fields, size_t *line)
{
    *n_fields = 0;
    *fields = NULL;
    *line = 0;
    if (r->failed)
        return mp_error_set(r->failed, "%s: reading on after an error", r->path);
    if (r->done)
        return MP_OK;
    record_reset(r);

    /* A UTF-8 byte order mark at the very start is not data. */
    while (!r->bom_checked) {
        if (r->len - r->pos < 3 && !r->eof) {
            mp_status st = fill(r);
            if (st)
                return fail(r, st);
            continue;
        }
        if (r->len - r->pos >= 3 && !memcmp(r->text + r->pos, "\xEF\xBB\xBF", 3))
            r->pos += 3;
        r->bom_checked = 1;
    }

    for (;;) {
        if (r->pos == r->len) {
            mp_status st = fill(r);
            if (st)
                return fail(r, st);
            if (r->pos == r->len && r->eof)
                return at_end(r, fields, n_fields, line);
            continue;
        }

        /* The next piece: up to and including one line terminator. */
        const char *s = r->text + r->pos;
        size_t avail = r->len - r->pos, k = 0;
        while (k < avail && s[k] != '\n' && s[k] != '\r' && s[k] != '\0')
            k++;
        if (k < avail && s[k] == '\0')
            return fail(r, mp_error_set(MP_ERR_FORMAT,
                                        "%s:%zu: NUL byte in the file (not a CSV text file?)",
                                        r->path, r->line));
        size_t n = k + (k < avail);
        size_t piece_line = r->line;
        /* a record's lines may not run past the limit: a 1 GB line is
         * refused after max_record bytes, not held in memory */
        r->rec_bytes += n;
        if (r->rec_bytes > r->max_record)
            return fail(r, mp_error_set(MP_ERR_FORMAT, "%s:%zu: a record longer than %zu bytes "
                                        "(the limit; an unterminated quote or not a CSV file?)",
                                        r->path, r->in_record ? r->rec_line : piece_line,
                                        r->max_record));
        if (k > 0) {
            if (!r->in_record) {
                r->in_record = 1;
                r->rec_line = r->line;
            }
            r->prev_cr = 0;
        }
        if (k < avail) {   /* count the line break: LF, CRLF or a lone CR */
            if (s[k] == '\r') {
                r->line++;
                r->prev_cr = 1;
            } else {
                if (!r->prev_cr)
                    r->line++;
                r->prev_cr = 0;
            }
        }

        /* libcsv grows its field buffer by blk_size at a time: growing it by
         * the record's size so far makes a long field cost linear time, not
         * quadratic (a 16 MiB field took minutes under ASan's realloc) */
        csv_set_blk_size(&r->p, r->rec_bytes > 1024 ? r->rec_bytes : 1024);
        size_t used = csv_parse(&r->p, s, n, on_field, on_record, r);
        r->pos += n;
        if (used != n) {
            if (csv_error(&r->p) == CSV_ENOMEM)
                return fail(r, mp_error_set(MP_ERR_NOMEM, "%s:%zu: out of memory", r->path, piece_line));
            return fail(r, mp_error_set(MP_ERR_FORMAT,
                                        "%s:%zu: bad quoting (a quote inside an unquoted field, "
                                        "or text after a closing quote)", r->path, piece_line));
        }
        if (r->cb_nomem)
            return fail(r, mp_error_set(MP_ERR_NOMEM, "%s:%zu: out of memory", r->path, piece_line));
        if (r->cb_toomany)
            return too_many_fields(r);
        if (r->rec_done && record_take(r, fields, n_fields, line))
            return MP_OK;
    }
}

/* ===================================================================== */
/* Byte ranges (shards)                                                   */
/* ===================================================================== */

mp_status mp_csv_set_range(mp_csv_reader *r, uint64_t start, uint64_t end, size_t line)
{
    if (r->gz || !r->own_fp)
        return mp_error_set(MP_ERR_ARG, "%s: a byte range needs a plain file (%s): decompress "
                            "it first", r->path, r->gz ? "this one is gzipped" :
                            "standard input cannot seek");
    if (end < start)
        return mp_error_set(MP_ERR_INTERNAL, "%s: byte range %llu-%llu", r->path,
                            (unsigned long long)start, (unsigned long long)end);
    if (fseeko(r->fp, (off_t)start, SEEK_SET) != 0)
        return fail(r, mp_error_set(MP_ERR_IO, "%s: cannot seek to byte %llu: %s", r->path,
                                    (unsigned long long)start, strerror(errno)));
    r->pos = r->len = 0;
    r->eof = r->done = 0;
    r->bom_checked = 1;
    r->line = line;
    r->prev_cr = r->in_record = 0;
    r->ranged = 1;
    r->left = end - start;
    return MP_OK;
}

/* ===================================================================== */
/* Writing                                                                */
/* ===================================================================== */

void mp_csv_write_field(FILE *fp, const char *s)
{
    size_t n = strlen(s);
    int quote = n > 0 && (s[0] == ' ' || s[0] == '\t' || s[n - 1] == ' ' || s[n - 1] == '\t');
    if (!quote && strpbrk(s, ",\"\r\n"))
        quote = 1;
    if (!quote) {
        fputs(s, fp);
        return;
    }
    fputc('"', fp);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', fp);
        fputc(*s, fp);
    }
    fputc('"', fp);
}

void mp_csv_write_record(FILE *fp, char *const *fields, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', fp);
        mp_csv_write_field(fp, fields[i]);
    }
    fputc('\n', fp);
}
