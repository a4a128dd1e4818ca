/*
 * shard.c - prediction split over processes (shard.h): the byte ranges of
 * an input, the part files, their merge, and the MPI run that does both.
 */
#include "run/shard.h"

#include "core/dist.h"
#include "data/csv.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCAN_CHUNK (1u << 20)
#define MAX_PARTS  100000
#define HEAD_TAG   "#molprop-part "
#define TAIL_TAG   "#molprop-part-end "

mp_status mp_shard_parse(const char *text, mp_shard_spec *spec)
{
    char *end;
    errno = 0;
    long i = strtol(text, &end, 10);
    long n = 0;
    int ok = end != text && *end == '/' && errno == 0;
    if (ok) {
        const char *p = end + 1;
        n = strtol(p, &end, 10);
        ok = end != p && *end == '\0' && errno == 0;
    }
    if (!ok)
        return mp_error_set(MP_ERR_ARG, "--shard '%s': expected I/N (this process's index I "
                            "of N shards, 0 <= I < N), e.g. 0/4", text);
    if (n < 1 || n > MAX_PARTS)
        return mp_error_set(MP_ERR_ARG, "--shard %s: N must be 1 to %d", text, MAX_PARTS);
    if (i < 0 || i >= n)
        return mp_error_set(MP_ERR_ARG, "--shard %s: the index runs from 0 to %ld", text, n - 1);
    spec->index = (int)i;
    spec->count = (int)n;
    return MP_OK;
}

mp_status mp_shard_parse_option(const char *text, void *field)
{
    mp_shard_spec spec = { 0, 0 };
    mp_status st = strcmp(text, "none") ? mp_shard_parse(text, &spec) : MP_OK;
    if (!st && field)
        *(mp_shard_spec *)field = spec;
    return st;
}

void mp_shard_part_path(char *buf, size_t cap, const char *out_path, int index, int count)
{
    snprintf(buf, cap, "%s.shard-%d-of-%d", out_path, index, count);
}

/* ===================================================================== */
/* The ranges: one quote-aware pass from the file's start                 */
/* ===================================================================== */

/* The scan's state over the bytes read so far. */
typedef struct {
    mp_shard *s;
    int       quote;        /* 0 outside quotes, 1 inside, 2 inside after a quote */
    int       nonblank;     /* the record so far is not blank (csv.h's rule) */
    int       pending_cr;   /* a CR outside quotes: a record end unless LF follows */
    int       prev_cr;
    size_t    breaks;       /* physical line breaks before the current byte */
    uint64_t  records;      /* non-blank records ended so far, header included */
    int       have_header;
    uint64_t  want[2];      /* nominal start and end of this shard */
    int       phase;        /* 0: looking for the start, 1: the end, 2: done */
} scan_state;

static uint64_t nominal(uint64_t header_end, uint64_t size, int k, int n)
{
    unsigned __int128 span = size - header_end;
    return header_end + (uint64_t)(span * (unsigned)k / (unsigned)n);
}

/* A record ends at byte p (the first byte after its line break). */
static void record_end(scan_state *z, uint64_t p)
{
    if (z->nonblank)
        z->records++;
    z->nonblank = 0;
    mp_shard *s = z->s;
    if (!z->have_header) {
        if (z->records == 0)
            return;
        z->have_header = 1;
        s->header_end = p;
        z->want[0] = nominal(p, s->size, s->index, s->count);
        z->want[1] = nominal(p, s->size, s->index + 1, s->count);
    }
    /* a boundary also falls on a multiple of s->align data rows, so the
     * shards' batches are those of one process (and so are their bits) */
    while (z->phase < 2 && p >= z->want[z->phase] && (z->records - 1) % s->align == 0) {
        if (z->phase == 0) {
            s->start = p;
            s->line = z->breaks + 1;
            s->row0 = z->records - 1;
        } else {
            s->end = p;
        }
        z->phase++;
    }
}

static void scan_bytes(scan_state *z, const unsigned char *b, size_t n, uint64_t off)
{
    for (size_t i = 0; i < n && z->phase < 2; i++) {
        unsigned char c = b[i];
        if (z->pending_cr) {
            z->pending_cr = 0;
            if (c != '\n')
                record_end(z, off + i);
        }
        if (z->quote == 2 && c != '"')
            z->quote = 0;               /* that quote closed the field */
        switch (c) {
        case '"':
            if (z->quote == 2)
                z->nonblank = 1;        /* "" inside quotes: a quote character */
            z->quote = z->quote == 1 ? 2 : 1;
            break;
        case '\n':
            if (!z->prev_cr)
                z->breaks++;
            if (z->quote == 0)
                record_end(z, off + i + 1);
            break;
        case '\r':
            z->breaks++;
            if (z->quote == 0)
                z->pending_cr = 1;
            break;
        case ' ':
        case '\t':
            break;
        default:
            z->nonblank = 1;
        }
        z->prev_cr = c == '\r';
    }
}

mp_status mp_shard_plan(mp_shard *s, const char *path, mp_shard_spec spec, int32_t align)
{
    memset(s, 0, sizeof *s);
    s->index = spec.index;
    s->count = spec.count;
    s->align = align > 0 ? (uint64_t)align : 1;
    if (!strcmp(path, "-"))
        return mp_error_set(MP_ERR_ARG, "--shard needs a file: standard input has no byte "
                            "ranges");
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return mp_error_set(MP_ERR_ARG, "%s: --shard needs a regular file (byte ranges)", path);
    }
    s->size = (uint64_t)sb.st_size;
    s->mtime = (int64_t)sb.st_mtime;
    unsigned char *buf = mp_malloc(SCAN_CHUNK);
    if (!buf) {
        fclose(fp);
        return mp_error_set(MP_ERR_NOMEM, "out of memory (shard scan)");
    }
    scan_state z;
    memset(&z, 0, sizeof z);
    z.s = s;
    uint64_t off = 0;
    mp_status st = MP_OK;
    while (z.phase < 2) {
        size_t n = fread(buf, 1, SCAN_CHUNK, fp);
        if (n == 0) {
            if (ferror(fp))
                st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        size_t skip = 0;
        if (off == 0 && n >= 2 && buf[0] == 0x1f && buf[1] == 0x8b) {
            st = mp_error_set(MP_ERR_ARG, "%s is gzipped: --shard and MPI ranks need byte "
                              "ranges of a plain file (gunzip it first)", path);
            break;
        }
        if (off == 0 && n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3))
            skip = 3;                   /* the byte order mark is not data */
        scan_bytes(&z, buf + skip, n - skip, off + skip);
        off += n;
        if ((st = mp_interrupt_poll()))
            break;
    }
    mp_free(buf);
    fclose(fp);
    if (st)
        return st;
    if (z.phase < 2) {
        if (z.pending_cr)
            record_end(&z, s->size);
        /* what is left ends at the end of the file (a last record without
         * a line break belongs to the last shard) */
        if (!z.have_header)
            s->header_end = s->size;
        if (z.phase == 0) {
            s->start = s->size;
            s->line = z.breaks + 1;
            s->row0 = z.records ? z.records - 1 : 0;
        }
        s->end = s->size;
    }
    return MP_OK;
}

/* ===================================================================== */
/* Writing a part (hooks of mp_predict_file)                              */
/* ===================================================================== */

mp_status mp_shard_begin(mp_shard *s, const mp_predict_opts *o, struct mp_csv_reader *r,
                         int32_t align)
{
    mp_status st = mp_shard_plan(s, o->data_path, o->shard, align);
    if (st || (st = mp_csv_set_range(r, s->start, s->end, s->line)))
        return st;
    struct stat sb;
    s->model_bytes = stat(o->model_path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size
                                                                         : 0;
    mp_shard_part_path(s->part_path, sizeof s->part_path, o->out_path, s->index, s->count);
    return MP_OK;
}

void mp_shard_write_head(mp_shard *s, FILE *fp)
{
    fprintf(fp, HEAD_TAG "%d/%d start=%llu end=%llu size=%llu mtime=%lld header_end=%llu "
            "row0=%llu line=%zu model_bytes=%llu align=%llu\n", s->index, s->count,
            (unsigned long long)s->start, (unsigned long long)s->end,
            (unsigned long long)s->size, (long long)s->mtime,
            (unsigned long long)s->header_end, (unsigned long long)s->row0, s->line,
            (unsigned long long)s->model_bytes, (unsigned long long)s->align);
    s->head_end = (long long)ftello(fp);
}

void mp_shard_header_done(mp_shard *s, FILE *fp)
{
    s->header_bytes = (long long)ftello(fp) - s->head_end;
}

void mp_shard_write_tail(mp_shard *s, FILE *fp, const mp_predict_stats *stats)
{
    fprintf(fp, TAIL_TAG "header_bytes=%lld rows=%zu invalid=%zu\n", s->header_bytes,
            stats->n_rows, stats->n_invalid);
}

/* ===================================================================== */
/* Merging the parts                                                      */
/* ===================================================================== */

typedef struct {
    char     *path;
    int       index, count;
    uint64_t  start, end, size, header_end, row0, model_bytes;
    long long mtime, header_bytes;
    size_t    line, rows, invalid;
    uint64_t  head_len;      /* bytes of the first line                     */
    uint64_t  body_end;      /* where the end line starts                   */
} part;

/* Reads p->path's first and last lines. */
static mp_status part_read(part *p)
{
    FILE *fp = fopen(p->path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", p->path, strerror(errno));
    char line[1024];
    mp_status st = MP_OK;
    unsigned long long a, b, c, d, e, f;
    long long mt;
    if (!fgets(line, sizeof line, fp) || strncmp(line, HEAD_TAG, strlen(HEAD_TAG)) ||
        sscanf(line + strlen(HEAD_TAG), "%d/%d start=%llu end=%llu size=%llu mtime=%lld "
               "header_end=%llu row0=%llu line=%zu model_bytes=%llu", &p->index, &p->count, &a,
               &b, &c, &mt, &d, &e, &p->line, &f) != 10) {
        st = mp_error_set(MP_ERR_FORMAT, "%s:1: not a part written by molprop predict --shard "
                          "(no '" HEAD_TAG "I/N ...' line)", p->path);
        goto done;
    }
    p->start = a, p->end = b, p->size = c, p->mtime = mt, p->header_end = d, p->row0 = e;
    p->model_bytes = f;
    p->head_len = strlen(line);
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", p->path, strerror(errno));
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    size_t tail = size - p->head_len < sizeof line - 1 ? (size_t)(size - p->head_len)
                                                       : sizeof line - 1;
    if (fseeko(fp, (off_t)(size - tail), SEEK_SET) != 0 ||
        fread(line, 1, tail, fp) != tail) {
        st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", p->path, strerror(errno));
        goto done;
    }
    line[tail] = '\0';
    /* the end line is the last line, and starts a line */
    char *t = NULL;
    for (char *q = line; (q = strstr(q, TAIL_TAG)); q++)
        if (q == line ? size - tail == p->head_len : q[-1] == '\n')
            t = q;
    if (!t || sscanf(t + strlen(TAIL_TAG), "header_bytes=%lld rows=%zu invalid=%zu",
                     &p->header_bytes, &p->rows, &p->invalid) != 3 ||
        line[tail - 1] != '\n' || strchr(t, '\n') != line + tail - 1) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: no '" TAIL_TAG "...' line at its end: the part "
                          "is incomplete or damaged (run its shard again)", p->path);
        goto done;
    }
    p->body_end = size - tail + (uint64_t)(t - line);
    if (p->header_bytes < 0 || p->head_len + (uint64_t)p->header_bytes > p->body_end)
        st = mp_error_set(MP_ERR_FORMAT, "%s: its end line says %lld header bytes, the part "
                          "has fewer", p->path, p->header_bytes);
done:
    fclose(fp);
    return st;
}

/* The part files "<base>.shard-I-of-N" in out_path's directory, by name. */
static mp_status parts_find(const char *out_path, part **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    const char *slash = strrchr(out_path, '/');
    char dir[4200];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out_path) + (slash == out_path)
                                            : 1, slash ? out_path : ".");
    const char *base = slash ? slash + 1 : out_path;
    DIR *d = opendir(dir);
    if (!d)
        return mp_error_set(MP_ERR_IO, "cannot list %s (the parts of %s): %s", dir, out_path,
                            strerror(errno));
    size_t blen = strlen(base);
    part *ps = NULL;
    int n = 0, cap = 0;
    mp_status st = MP_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        int i, k, used = 0;
        if (strncmp(nm, base, blen) || strncmp(nm + blen, ".shard-", 7) ||
            sscanf(nm + blen + 7, "%d-of-%d%n", &i, &k, &used) != 2 || nm[blen + 7 + used])
            continue;
        char canon[64];
        snprintf(canon, sizeof canon, "%d-of-%d", i, k);
        if (strcmp(canon, nm + blen + 7))
            continue;                  /* "01-of-3": not a name molprop writes */
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            part *np = mp_realloc(ps, sizeof *ps * (size_t)cap);
            if (!np) {
                st = mp_error_set(MP_ERR_NOMEM, "out of memory (parts of %s)", out_path);
                break;
            }
            ps = np;
        }
        memset(&ps[n], 0, sizeof ps[n]);
        size_t len = strlen(dir) + strlen(nm) + 2;
        if (!(ps[n].path = mp_malloc(len))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory (parts of %s)", out_path);
            break;
        }
        snprintf(ps[n].path, len, "%s/%s", dir, nm);
        ps[n].index = i;
        ps[n].count = k;
        n++;
    }
    closedir(d);
    *out = ps;
    *n_out = n;
    return st;
}

static void parts_free(part *ps, int n)
{
    for (int i = 0; i < n; i++)
        mp_free(ps[i].path);
    mp_free(ps);
}

static int by_index(const void *a, const void *b)
{
    const part *x = a, *y = b;
    return x->count != y->count ? (x->count < y->count ? -1 : 1)
                                : (x->index > y->index) - (x->index < y->index);
}

/* Every check of shard.h on the parts, sorted by index. */
static mp_status parts_check(const char *out_path, part *ps, int n)
{
    if (n == 0)
        return mp_error_set(MP_ERR_IO, "no parts of %s to merge (files %s.shard-I-of-N, "
                            "written by molprop predict --shard I/N --out %s)", out_path,
                            out_path, out_path);
    qsort(ps, (size_t)n, sizeof *ps, by_index);
    if (ps[0].count != ps[n - 1].count)
        return mp_error_set(MP_ERR_ARG, "parts of different runs: %s (one of %d) and %s (one "
                            "of %d): remove the stale ones", ps[0].path, ps[0].count,
                            ps[n - 1].path, ps[n - 1].count);
    int count = ps[0].count;
    for (int i = 0, want = 0; want < count; want++) {
        if (i < n && ps[i].index == want) {
            i++;
            continue;
        }
        char name[4300];
        mp_shard_part_path(name, sizeof name, out_path, want, count);
        return mp_error_set(MP_ERR_IO, "%s: missing part %d of %d (%s): run molprop predict "
                            "--shard %d/%d first", out_path, want, count, name, want, count);
    }
    mp_status st;
    for (int i = 0; i < n; i++) {
        int named = ps[i].index, named_n = ps[i].count;
        if ((st = part_read(&ps[i])))
            return st;
        if (ps[i].index != named || ps[i].count != named_n)
            return mp_error_set(MP_ERR_FORMAT, "%s holds part %d/%d, its name says %d/%d (a "
                                "copy or a duplicate?)", ps[i].path, ps[i].index, ps[i].count,
                                named, named_n);
    }
    const part *p0 = &ps[0];
    if (p0->start != p0->header_end)
        return mp_error_set(MP_ERR_FORMAT, "%s: part 0 starts at byte %llu, after the header "
                            "at %llu", p0->path, (unsigned long long)p0->start,
                            (unsigned long long)p0->header_end);
    for (int i = 0; i < n; i++) {
        const part *p = &ps[i];
        if (p->size != p0->size || p->mtime != p0->mtime || p->header_end != p0->header_end)
            return mp_error_set(MP_ERR_ARG, "%s and %s were made from different inputs (%llu "
                                "and %llu bytes, modified at %lld and %lld): run every shard "
                                "on one file", p0->path, p->path,
                                (unsigned long long)p0->size, (unsigned long long)p->size,
                                p0->mtime, p->mtime);
        if (p->model_bytes != p0->model_bytes)
            return mp_error_set(MP_ERR_ARG, "%s and %s were made with different models (%llu "
                                "and %llu bytes)", p0->path, p->path,
                                (unsigned long long)p0->model_bytes,
                                (unsigned long long)p->model_bytes);
        if (p->header_bytes != p0->header_bytes)
            return mp_error_set(MP_ERR_ARG, "%s and %s have different output columns: run "
                                "every shard with the same options", p0->path, p->path);
        uint64_t next = i + 1 < n ? ps[i + 1].start : p0->size;
        if (p->end != next)
            return mp_error_set(MP_ERR_FORMAT, "%s ends at byte %llu of the input, %s at "
                                "%llu: the ranges do not join", p->path,
                                (unsigned long long)p->end,
                                i + 1 < n ? "the next part starts" : "the input ends",
                                (unsigned long long)next);
    }
    return MP_OK;
}

/* Copies bytes [from, to) of path into fp (header: also compares them with
 * `same`, when given). */
static mp_status copy_range(FILE *fp, const char *path, uint64_t from, uint64_t to,
                            const char *same, char *buf, size_t cap)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    mp_status st = MP_OK;
    if (fseeko(in, (off_t)from, SEEK_SET) != 0)
        st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    uint64_t at = from;
    while (!st && at < to) {
        size_t want = to - at < cap ? (size_t)(to - at) : cap;
        size_t got = fread(buf, 1, want, in);
        if (got != want) {
            st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", path,
                              ferror(in) ? strerror(errno) : "it is shorter than it says");
            break;
        }
        if (same && memcmp(buf, same + (at - from), got)) {
            st = mp_error_set(MP_ERR_ARG, "%s has other output columns than part 0: run every "
                              "shard with the same options", path);
            break;
        }
        if (fp)
            fwrite(buf, 1, got, fp);
        at += got;
        st = mp_interrupt_poll();
    }
    fclose(in);
    return st;
}

mp_status mp_predict_merge(const char *out_path, int remove_parts, mp_predict_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    double t0 = mp_time_now();
    part *ps;
    int n;
    mp_status st = parts_find(out_path, &ps, &n);
    if (!st)
        st = parts_check(out_path, ps, n);
    if (st) {
        parts_free(ps, n);
        return st;
    }
    size_t cap = SCAN_CHUNK;
    size_t hb = (size_t)ps[0].header_bytes;
    char *buf = mp_malloc(cap), *header = mp_malloc(hb ? hb : 1);
    mp_afile out;
    memset(&out, 0, sizeof out);
    int open = 0;
    if (!buf || !header) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory (merging %s)", out_path);
        goto done;
    }
    /* part 0's header, then every other part's compared with it */
    FILE *hf = fopen(ps[0].path, "rb");
    if (!hf || fseeko(hf, (off_t)ps[0].head_len, SEEK_SET) != 0 || fread(header, 1, hb, hf) != hb)
        st = mp_error_set(MP_ERR_IO, "cannot read %s", ps[0].path);
    if (hf)
        fclose(hf);
    for (int i = 1; !st && i < n; i++)
        st = copy_range(NULL, ps[i].path, ps[i].head_len, ps[i].head_len + hb, header, buf, cap);
    if (st || (st = mp_afile_open(&out, out_path)))
        goto done;
    open = 1;
    fwrite(header, 1, hb, out.fp);
    for (int i = 0; !st && i < n; i++) {
        st = copy_range(out.fp, ps[i].path, ps[i].head_len + hb, ps[i].body_end, NULL, buf, cap);
        if (!st)
            st = mp_afile_check(&out);
        stats->n_rows += ps[i].rows;
        stats->n_invalid += ps[i].invalid;
    }
    if (!st) {
        st = mp_afile_commit(&out);
        open = 0;
    }
    for (int i = 0; !st && remove_parts && i < n; i++)
        unlink(ps[i].path);
done:
    if (open)
        mp_afile_abort(&out);
    mp_free(buf);
    mp_free(header);
    parts_free(ps, n);
    stats->seconds = mp_time_now() - t0;
    stats->mols_per_second = stats->n_rows / (stats->seconds > 0 ? stats->seconds : 1e-9);
    return st;
}

/* ===================================================================== */
/* MPI: every rank a shard, rank 0 joins                                  */
/* ===================================================================== */

mp_status mp_predict_run(const mp_predict_opts *o, mp_predict_stats *stats)
{
    mp_status st = mp_dist_init();
    if (st)
        return st;
    int rank = mp_dist_rank(), size = mp_dist_size();
    if (size == 1)
        return mp_predict_file(o, stats);
    if (o->shard.count)
        return mp_error_set(MP_ERR_ARG, "--shard %d/%d under mpirun (%d ranks): the ranks "
                            "are the shards; give one or the other", o->shard.index,
                            o->shard.count, size);
    double t0 = mp_time_now();
    mp_predict_opts so = *o;
    so.shard.index = rank;
    so.shard.count = size;
    char part_path[4300];
    mp_shard_part_path(part_path, sizeof part_path, o->out_path, rank, size);
    st = mp_predict_file(&so, stats);
    if (!mp_dist_all_ok(st == MP_OK)) {
        if (st == MP_OK) {
            unlink(part_path);
            st = mp_error_set(MP_ERR_IO, "rank %d of %d: another rank failed (its message says "
                              "why); nothing written", rank, size);
        }
        return st;
    }
    uint64_t v[2] = { stats->n_rows, stats->n_invalid };
    if ((st = mp_dist_sum_u64(v, 2)))
        return st;
    mp_status mst = MP_OK;
    if (rank == 0) {
        mp_predict_stats ms;
        mst = mp_predict_merge(o->out_path, 1, &ms);
    }
    if (!mp_dist_all_ok(mst == MP_OK)) {
        unlink(part_path);
        return rank == 0 ? mst : mp_error_set(MP_ERR_IO, "rank %d of %d: rank 0 could not join "
                                              "the parts (its message says why)", rank, size);
    }
    stats->n_rows = (size_t)v[0];
    stats->n_invalid = (size_t)v[1];
    stats->seconds = mp_time_now() - t0;
    if ((st = mp_dist_max_double(&stats->seconds)))
        return st;
    stats->mols_per_second = stats->n_rows / (stats->seconds > 0 ? stats->seconds : 1e-9);
    return MP_OK;
}
