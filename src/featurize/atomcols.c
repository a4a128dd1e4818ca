/*
 * atomcols.c - user-supplied per-atom and per-bond columns from .npz (the
 * archive Chemprop v1 reads: one .npy per molecule) or CSV files into a
 * graph store (atomcols.h).
 *
 * An .npz is a zip archive; numpy writes one member per array, stored
 * (np.savez) or deflated (np.savez_compressed), with zip64 local headers.
 * The member list and sizes come from the central directory (zip64 extra
 * fields honoured); a member's data starts after its local header's name
 * and extra field.  Deflated members are inflated with zlib (raw deflate).
 * Each member is an .npy: magic, version, header length, a Python dict
 * literal with 'descr', 'fortran_order' and 'shape', then the data.
 */
#include "featurize/atomcols.h"

#include "data/csv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define BAD(...) mp_error_set(MP_ERR_FORMAT, __VA_ARGS__)

/* Rows molecule i needs: its atoms, or its bonds. */
static int32_t rows_of(const mp_graphs *g, int32_t i, int bonds)
{
    return bonds ? (g->mol_edge[i + 1] - g->mol_edge[i]) / 2 : g->mol_atom[i + 1] - g->mol_atom[i];
}

/* Destination of row r (RDKit order) of molecule i in the store's block of
 * width d. */
static float *row_dst(mp_graphs *g, int32_t i, int32_t r, int bonds, int d)
{
    if (!bonds)
        return g->atom_x + ((size_t)g->mol_atom[i] + r) * d;
    /* store bond k of molecule i is RDKit bond bond_rdkit[k]: find k */
    int32_t b0 = g->mol_edge[i] / 2, nb = rows_of(g, i, 1);
    for (int32_t k = 0; k < nb; k++)
        if (g->bond_rdkit[b0 + k] == r)
            return g->bond_x + ((size_t)b0 + k) * d;
    return NULL;
}

static mp_status set_block(mp_graphs *g, int bonds, int d)
{
    return bonds ? mp_graphs_set_extra(g, g->xa_dim, d) : mp_graphs_set_extra(g, d, g->xb_dim);
}

/* Checks bond_rdkit of molecule i is a permutation of 0 .. nb-1, so every
 * RDKit row has exactly one place. */
static int bond_order_ok(const mp_graphs *g, int32_t i)
{
    int32_t b0 = g->mol_edge[i] / 2, nb = rows_of(g, i, 1);
    for (int32_t k = 0; k < nb; k++) {
        int32_t r = g->bond_rdkit[b0 + k];
        if (r < 0 || r >= nb)
            return 0;
        for (int32_t q = 0; q < k; q++)
            if (g->bond_rdkit[b0 + q] == r)
                return 0;
    }
    return 1;
}

/* ===================================================================== */
/* .npy inside the archive                                                */
/* ===================================================================== */

typedef struct {
    int     kind;       /* 'f' or 'i' */
    int     size;       /* 4 or 8     */
    int     fortran;
    int     ndim;
    int64_t shape[2];
    const unsigned char *data;
    size_t  n_bytes;
} npy_array;

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* The value of key 'key' in the header dict (a pointer just after its ':'). */
static const char *dict_value(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p)
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

/* Parses an .npy of n bytes; the message (what) names the member. */
static mp_status npy_parse(npy_array *a, const unsigned char *p, size_t n, const char *what)
{
    memset(a, 0, sizeof *a);
    if (n < 10 || memcmp(p, "\x93NUMPY", 6) != 0)
        return BAD("%s: not an .npy array (no \\x93NUMPY magic)", what);
    int major = p[6];
    size_t hl, at;
    if (major == 1) {
        hl = rd16(p + 8);
        at = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12)
            return BAD("%s: .npy header cut short", what);
        hl = rd32(p + 8);
        at = 12;
    } else {
        return BAD("%s: .npy format version %d (1, 2 or 3 expected)", what, major);
    }
    if (hl > n - at || hl > 65536)
        return BAD("%s: .npy header of %zu bytes runs past the array", what, hl);
    char hdr[65537];
    memcpy(hdr, p + at, hl);
    hdr[hl] = 0;
    const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order");
    const char *s = dict_value(hdr, "shape");
    if (!d || !f || !s)
        return BAD("%s: .npy header without descr, fortran_order and shape: %.80s", what, hdr);
    if (!strncmp(d, "'<f8'", 5) || !strncmp(d, "'<d'", 4))
        a->kind = 'f', a->size = 8;
    else if (!strncmp(d, "'<f4'", 5))
        a->kind = 'f', a->size = 4;
    else if (!strncmp(d, "'<i8'", 5))
        a->kind = 'i', a->size = 8;
    else if (!strncmp(d, "'<i4'", 5))
        a->kind = 'i', a->size = 4;
    else
        return BAD("%s: dtype %.12s (float64, float32, int64 or int32, little-endian, "
                   "expected)", what, d);
    a->fortran = !strncmp(f, "True", 4);
    if (*s != '(')
        return BAD("%s: shape %.20s is not a tuple", what, s);
    s++;
    while (a->ndim < 3) {
        while (*s == ' ')
            s++;
        if (*s == ')')
            break;
        char *e;
        errno = 0;
        long long v = strtoll(s, &e, 10);
        if (e == s || errno || v < 0)
            return BAD("%s: bad shape in the .npy header: %.80s", what, hdr);
        if (a->ndim < 2)
            a->shape[a->ndim] = v;
        a->ndim++;
        s = e;
        while (*s == ' ')
            s++;
        if (*s == ',')
            s++;
    }
    if (a->ndim == 1 && a->shape[0] == 0) {
        a->shape[1] = 0;   /* np.array([]): a molecule without rows */
    } else if (a->ndim != 2) {
        return BAD("%s: a %d-dimensional array (one 2-D array of rows x columns per molecule "
                   "expected)", what, a->ndim);
    }
    at += hl;
    uint64_t want = (uint64_t)a->shape[0] * (uint64_t)a->shape[1] * (uint64_t)a->size;
    if (a->shape[0] > INT32_MAX || a->shape[1] > 1000000 || want > n - at)
        return BAD("%s: shape (%lld, %lld) needs %llu bytes of data, the array holds %zu", what,
                   (long long)a->shape[0], (long long)a->shape[1], (unsigned long long)want,
                   n - at);
    a->data = p + at;
    a->n_bytes = (size_t)want;
    return MP_OK;
}

static double npy_at(const npy_array *a, int64_t r, int64_t c)
{
    int64_t i = a->fortran ? c * a->shape[0] + r : r * a->shape[1] + c;
    const unsigned char *p = a->data + (size_t)i * a->size;
    if (a->kind == 'f' && a->size == 8) {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    if (a->kind == 'f') {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    return a->size == 8 ? (double)(int64_t)rd64(p) : (double)(int32_t)rd32(p);
}

/* ===================================================================== */
/* The zip archive                                                        */
/* ===================================================================== */

typedef struct {
    char     name[256];
    int      method;
    uint64_t csize, usize, local;
} zip_member;

static mp_status read_file(const char *path, unsigned char **out, size_t *n)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    mp_buf b = { 0 };
    unsigned char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0)
        if (mp_buf_append(&b, chunk, k) != MP_OK) {
            fclose(fp);
            mp_buf_free(&b);
            return mp_error_set(MP_ERR_NOMEM, "%s: out of memory reading it", path);
        }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        mp_buf_free(&b);
        return mp_error_set(MP_ERR_IO, "%s: read error", path);
    }
    *out = (unsigned char *)b.data;
    *n = b.len;
    if (!*out)
        *out = mp_malloc(1);
    return *out ? MP_OK : mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
}

/* The central directory of the archive p[0..n): members into *out (owned by
 * the caller).  MP_ERR_FORMAT when it is not a zip archive. */
static mp_status zip_members(const char *path, const unsigned char *p, size_t n,
                             zip_member **out, int64_t *count)
{
    *out = NULL;
    *count = 0;
    if (n < 22)
        return BAD("%s: not an .npz (zip) archive: %zu bytes", path, n);
    size_t eocd = (size_t)-1;
    for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
        if (rd32(p + i) == 0x06054b50) {
            eocd = i;
            break;
        }
    if (eocd == (size_t)-1)
        return BAD("%s: not an .npz (zip) archive: no end of central directory", path);
    uint64_t nent = rd16(p + eocd + 10), cd = rd32(p + eocd + 16);
    if ((nent == 0xFFFF || cd == 0xFFFFFFFFu) && eocd >= 20 &&
        rd32(p + eocd - 20) == 0x07064b50) {
        uint64_t z = rd64(p + eocd - 12);   /* zip64 end of central directory */
        if (z > n - 56 || rd32(p + z) != 0x06064b50)
            return BAD("%s: damaged zip64 end of central directory", path);
        nent = rd64(p + z + 32);
        cd = rd64(p + z + 48);
    }
    if (nent > 100000000 || cd > n)
        return BAD("%s: damaged central directory (%llu members at %llu)", path,
                   (unsigned long long)nent, (unsigned long long)cd);
    zip_member *m = mp_calloc(nent + 1, sizeof *m);
    if (!m)
        return mp_error_set(MP_ERR_NOMEM, "%s: out of memory for %llu members", path,
                            (unsigned long long)nent);
    size_t at = (size_t)cd;
    for (uint64_t k = 0; k < nent; k++) {
        if (at > n - 46 || rd32(p + at) != 0x02014b50) {
            mp_free(m);
            return BAD("%s: damaged central directory at member %llu", path,
                       (unsigned long long)k);
        }
        zip_member *z = &m[k];
        z->method = rd16(p + at + 10);
        z->csize = rd32(p + at + 20);
        z->usize = rd32(p + at + 24);
        size_t nl = rd16(p + at + 28), xl = rd16(p + at + 30), cl = rd16(p + at + 32);
        z->local = rd32(p + at + 42);
        if (nl + xl + cl > n - at - 46) {
            mp_free(m);
            return BAD("%s: damaged central directory at member %llu", path,
                       (unsigned long long)k);
        }
        size_t cn = nl < sizeof z->name - 1 ? nl : sizeof z->name - 1;
        memcpy(z->name, p + at + 46, cn);
        z->name[cn] = 0;
        /* zip64 extra: the 8-byte fields of those that read 0xFFFFFFFF, in order */
        const unsigned char *x = p + at + 46 + nl, *xe = x + xl;
        while (x + 4 <= xe) {
            unsigned id = rd16(x), len = rd16(x + 2);
            const unsigned char *v = x + 4, *ve = v + len;
            if (ve > xe)
                break;
            if (id == 0x0001) {
                if (z->usize == 0xFFFFFFFFu && v + 8 <= ve)
                    z->usize = rd64(v), v += 8;
                if (z->csize == 0xFFFFFFFFu && v + 8 <= ve)
                    z->csize = rd64(v), v += 8;
                if (z->local == 0xFFFFFFFFu && v + 8 <= ve)
                    z->local = rd64(v), v += 8;
            }
            x = ve;
        }
        at += 46 + nl + xl + cl;
    }
    *out = m;
    *count = (int64_t)nent;
    return MP_OK;
}

/* Member z's bytes: a pointer into the archive (stored) or *owned (inflated). */
static mp_status zip_data(const char *path, const unsigned char *p, size_t n,
                          const zip_member *z, const unsigned char **data, size_t *len,
                          unsigned char **owned)
{
    *owned = NULL;
    if (z->local > n - 30 || rd32(p + z->local) != 0x04034b50)
        return BAD("%s: member %s: damaged local header", path, z->name);
    uint64_t start = z->local + 30 + rd16(p + z->local + 26) + rd16(p + z->local + 28);
    if (start > n || z->csize > n - start)
        return BAD("%s: member %s runs past the end of the archive", path, z->name);
    if (z->method == 0) {
        *data = p + start;
        *len = (size_t)z->csize;
        return MP_OK;
    }
    if (z->method != 8)
        return BAD("%s: member %s: compression method %d (stored or deflated expected)", path,
                   z->name, z->method);
    if (z->usize > ((uint64_t)1 << 34))
        return BAD("%s: member %s: %llu bytes inflated is too large", path, z->name,
                   (unsigned long long)z->usize);
    unsigned char *o = mp_malloc((size_t)z->usize + 1);
    if (!o)
        return mp_error_set(MP_ERR_NOMEM, "%s: out of memory inflating %s", path, z->name);
    z_stream s;
    memset(&s, 0, sizeof s);
    if (inflateInit2(&s, -15) != Z_OK) {
        mp_free(o);
        return mp_error_set(MP_ERR_NOMEM, "%s: zlib could not start", path);
    }
    s.next_in = (unsigned char *)(p + start);
    s.avail_in = (uInt)z->csize;
    s.next_out = o;
    s.avail_out = (uInt)z->usize;
    int r = inflate(&s, Z_FINISH);
    uint64_t got = s.total_out;
    inflateEnd(&s);
    if (r != Z_STREAM_END || got != z->usize) {
        mp_free(o);
        return BAD("%s: member %s: damaged deflate data", path, z->name);
    }
    *data = o;
    *len = (size_t)got;
    *owned = o;
    return MP_OK;
}

/* ===================================================================== */
/* Reading into an mp_colfile                                             */
/* ===================================================================== */

/* Starts molecule cf->n_mols (rows x width) in cf, growing the arrays;
 * returns its first value or NULL (out of memory). */
static float *cf_add(mp_colfile *cf, mp_buf *vals, int32_t rows, int32_t width, size_t *cap)
{
    int32_t i = cf->n_mols;
    if ((size_t)i + 1 >= *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        int64_t *st = mp_realloc(cf->start, (c + 1) * sizeof *st);
        if (st)
            cf->start = st;
        int32_t *nr = mp_realloc(cf->n_rows, c * sizeof *nr);
        if (nr)
            cf->n_rows = nr;
        int32_t *w = mp_realloc(cf->width, c * sizeof *w);
        if (w)
            cf->width = w;
        int64_t *r0 = mp_realloc(cf->row0, c * sizeof *r0);
        if (r0)
            cf->row0 = r0;
        if (!st || !nr || !w || !r0)
            return NULL;
        *cap = c;
    }
    size_t n = (size_t)rows * (size_t)width;
    if (mp_buf_reserve(vals, n * sizeof(float) + sizeof(float)) != MP_OK)
        return NULL;
    if (i == 0)
        cf->start[0] = 0;
    cf->n_rows[i] = rows;
    cf->width[i] = width;
    cf->start[i + 1] = cf->start[i] + (int64_t)n;
    cf->row0[i] = i ? cf->row0[i - 1] + cf->n_rows[i - 1] : 0;
    float *at = (float *)(vals->data + vals->len);
    vals->len += n * sizeof(float);
    cf->n_mols = i + 1;
    return at;
}

static mp_status read_npz(mp_colfile *cf, mp_buf *vals, int32_t n_expected)
{
    const char *path = cf->path;
    unsigned char *file = NULL;
    size_t n = 0, cap = 0;
    zip_member *mem = NULL;
    int64_t count = 0;
    mp_status st = read_file(path, &file, &n);
    if (st == MP_OK)
        st = zip_members(path, file, n, &mem, &count);
    if (st == MP_OK && n_expected >= 0 && count != n_expected)
        st = BAD("%s: %lld arrays for %d input rows (one array per molecule, in input order)",
                 path, (long long)count, (int)n_expected);
    char what[512];
    for (int64_t i = 0; st == MP_OK && i < count; i++) {
        const unsigned char *data = NULL;
        size_t len = 0;
        unsigned char *owned = NULL;
        snprintf(what, sizeof what, "%s: array '%s' (molecule %lld)", path, mem[i].name,
                 (long long)i);
        if ((st = zip_data(path, file, n, &mem[i], &data, &len, &owned)) != MP_OK)
            break;
        npy_array a;
        st = npy_parse(&a, data, len, what);
        float *dst = st == MP_OK ? cf_add(cf, vals, (int32_t)a.shape[0], (int32_t)a.shape[1],
                                          &cap) : NULL;
        if (st == MP_OK && !dst)
            st = mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
        for (int64_t r = 0; st == MP_OK && r < a.shape[0]; r++)
            for (int64_t c = 0; c < a.shape[1]; c++)
                dst[r * a.shape[1] + c] = (float)npy_at(&a, r, c);
        mp_free(owned);
    }
    mp_free(mem);
    mp_free(file);
    return st;
}

static mp_status read_csv(mp_colfile *cf, mp_buf *vals, int32_t n_expected)
{
    const char *path = cf->path;
    mp_csv_reader *rd = NULL;
    mp_status st = mp_csv_open(&rd, path);
    if (st != MP_OK)
        return st;
    char **f;
    size_t nf, line, cap = 0, lcap = 0;
    int64_t total = 0;
    st = mp_csv_next(rd, &f, &nf, &line);
    if (st == MP_OK && nf < 2)
        st = BAD("%s:%zu: the header needs the molecule column and at least one value column",
                 path, nf ? line : (size_t)1);
    const int d = (int)nf - 1;
    int64_t cur = -1;            /* the molecule whose rows are being read */
    while (st == MP_OK) {
        if ((st = mp_csv_next(rd, &f, &nf, &line)) != MP_OK || nf == 0)
            break;
        if (nf != (size_t)d + 1) {
            st = BAD("%s:%zu: %zu fields, the header has %d", path, line, nf, d + 1);
            break;
        }
        char *e;
        errno = 0;
        long long mi = strtoll(f[0], &e, 10);
        if (e == f[0] || *e || errno || mi < 0 || (n_expected >= 0 && mi >= n_expected) ||
            mi > INT32_MAX - 1) {
            st = BAD("%s:%zu, column 1: '%.40s' is not a molecule index (0 .. %d)", path, line,
                     f[0], (int)n_expected - 1);
            break;
        }
        if (mi < cur) {
            st = BAD("%s:%zu: molecule %lld after molecule %lld (a molecule's rows together, "
                     "molecules in input order)", path, line, mi, (long long)cur);
            break;
        }
        /* molecules up to mi: the ones without rows start empty */
        while (cur < mi) {
            if (!cf_add(cf, vals, 0, d, &cap)) {
                st = mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            cur++;
        }
        if (st != MP_OK)
            break;
        /* one more row of molecule cur */
        if (mp_buf_reserve(vals, (size_t)d * sizeof(float)) != MP_OK) {
            st = mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        if ((size_t)total + 1 >= lcap) {
            size_t c = lcap ? 2 * lcap : 256;
            int32_t *l = mp_realloc(cf->line, c * sizeof *l);
            if (!l) {
                st = mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            cf->line = l;
            lcap = c;
        }
        float *dst = (float *)(vals->data + vals->len);
        for (int c = 0; c < d; c++) {
            double v = strtod(f[c + 1], &e);
            if (e == f[c + 1] || *e) {
                st = BAD("%s:%zu, column %d: '%.40s' is not a number (molecule %lld)", path,
                         line, c + 2, f[c + 1], mi);
                break;
            }
            dst[c] = (float)v;
        }
        if (st != MP_OK)
            break;
        vals->len += (size_t)d * sizeof(float);
        cf->line[total++] = line > INT32_MAX ? INT32_MAX : (int32_t)line;
        int32_t k = cf->n_mols - 1;
        cf->n_rows[k]++;
        cf->start[k + 1] += d;
    }
    /* the molecules after the last row: none */
    while (st == MP_OK && n_expected >= 0 && cf->n_mols < n_expected)
        if (!cf_add(cf, vals, 0, d, &cap))
            st = mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
    /* first rows, now that every count is known */
    for (int32_t i = 0; st == MP_OK && i < cf->n_mols; i++)
        cf->row0[i] = i ? cf->row0[i - 1] + cf->n_rows[i - 1] : 0;
    mp_csv_close(rd);
    return st;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && mp_strcaseeq(s + n - k, suffix);
}

void mp_colfile_free(mp_colfile *cf)
{
    if (!cf)
        return;
    mp_free(cf->path);
    mp_free(cf->start);
    mp_free(cf->n_rows);
    mp_free(cf->width);
    mp_free(cf->values);
    mp_free(cf->line);
    mp_free(cf->row0);
    memset(cf, 0, sizeof *cf);
}

mp_status mp_colfile_read(mp_colfile *cf, const char *path, int32_t n_mols)
{
    memset(cf, 0, sizeof *cf);
    if (!path)
        return mp_error_set(MP_ERR_ARG, "atom / bond columns: no path");
    int npz = ends_with(path, ".npz"), csv = ends_with(path, ".csv") || ends_with(path, ".csv.gz");
    if (ends_with(path, ".npy"))   /* one array: no molecule boundaries in it */
        return mp_error_set(MP_ERR_ARG, "%s: an .npy holds one array, not one per molecule: "
                            "save the molecules' arrays as an .npz (np.savez(path, *arrays), "
                            "as Chemprop v1 reads) or write a CSV; a matrix of one row per "
                            "molecule is --features-path's (which reads .npy)", path);
    if (!npz && !csv)
        return mp_error_set(MP_ERR_ARG, "%s: unknown format (.npz of one array per molecule, as "
                            "Chemprop v1 reads, or .csv)", path);
    if (!(cf->path = mp_strdup(path)))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_buf vals = { 0 };
    mp_status st = npz ? read_npz(cf, &vals, n_mols) : read_csv(cf, &vals, n_mols);
    cf->values = (float *)vals.data;
    if (st == MP_OK && !cf->start) {
        /* an empty file of no molecules */
        cf->start = mp_calloc(1, sizeof *cf->start);
        if (!cf->start)
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    if (st == MP_OK && n_mols >= 0 && cf->n_mols != n_mols)
        st = BAD("%s: %d molecules for %d input rows", path, (int)cf->n_mols, (int)n_mols);
    if (st != MP_OK)
        mp_colfile_free(cf);
    return st;
}

/* ===================================================================== */
/* Into a store                                                           */
/* ===================================================================== */

mp_status mp_colfile_apply(const mp_colfile *cf, mp_graphs *g, int bonds, int32_t first,
                           const char *const *smiles)
{
    const char *path = cf->path;
    if (bonds && g->n_edges && !g->bond_rdkit)
        return mp_error_set(MP_ERR_ARG, "%s: bond columns need the molecules featurized from "
                            "their SMILES (RDKit's bond order), not read from a feature cache",
                            path);
    /* a CSV read without a count (n_mols -1) says nothing of the molecules
     * after its last row: they have no rows */
    if (first < 0 || (!cf->line && (int64_t)first + g->n_mols > cf->n_mols))
        return mp_error_set(MP_ERR_ARG, "%s: molecules %d .. %d asked of a file of %d", path,
                            (int)first, (int)(first + g->n_mols - 1), (int)cf->n_mols);
    const char *what = bonds ? "bonds" : "atoms";
    char mb[128], where[256];
    mp_status st = MP_OK;
    int d = -1;
    int32_t dmol = -1;
    for (int32_t i = 0; st == MP_OK && i < g->n_mols; i++) {
        int32_t want = rows_of(g, i, bonds), k = first + i;
        if (!g->valid[i] || want == 0)
            continue;
        if (smiles && smiles[i])
            snprintf(mb, sizeof mb, "molecule %d (%.60s)", (int)k, smiles[i]);
        else
            snprintf(mb, sizeof mb, "molecule %d", (int)k);
        if (cf->line)
            snprintf(where, sizeof where, "%s: %s", path, mb);
        else
            snprintf(where, sizeof where, "%s: array %d (%s)", path, (int)k, mb);
        int32_t have = k < cf->n_mols ? cf->n_rows[k] : 0;
        if (have != want) {
            st = BAD("%s: %d rows, but the molecule has %d %s", where, (int)have, (int)want,
                     what);
            break;
        }
        if (bonds && !bond_order_ok(g, i)) {
            st = mp_error_set(MP_ERR_ARG, "%s: the store's RDKit bond order is damaged", where);
            break;
        }
        if (d < 0) {
            d = cf->width[k];
            dmol = k;
            if (d < 1) {
                st = BAD("%s: no columns", where);
                break;
            }
            if ((st = set_block(g, bonds, d)) != MP_OK)
                break;
        } else if (cf->width[k] != d) {
            st = BAD("%s: %d columns, molecule %d has %d", where, (int)cf->width[k], (int)dmol,
                     d);
            break;
        }
        const float *src = cf->values + cf->start[k];
        for (int32_t r = 0; st == MP_OK && r < want; r++) {
            float *dst = row_dst(g, i, r, bonds, d);
            for (int c = 0; c < d; c++) {
                float v = src[(size_t)r * d + c];
                if (!isfinite(v)) {
                    if (cf->line)
                        st = BAD("%s:%d, column %d: %s: %g (NaN and infinities are not "
                                 "allowed)", path, (int)cf->line[cf->row0[k] + r], c + 2, mb,
                                 (double)v);
                    else
                        st = BAD("%s: row %d, column %d is %g (NaN and infinities are not "
                                 "allowed)", where, (int)r, c, (double)v);
                    break;
                }
                dst[c] = v;
            }
        }
    }
    if (st == MP_OK && d < 0 && g->n_mols > 0) {
        /* no row needed here (e.g. no bonds at all): the width of the file's
         * first molecule with rows, so the store's width matches the model */
        for (int pass = 0; pass < 2 && d < 0; pass++)
            for (int32_t k = 0; k < cf->n_mols && d < 0; k++)
                if ((pass || cf->n_rows[k] > 0) && cf->width[k] > 0)
                    d = cf->width[k];
        if (d < 0)
            st = BAD("%s: no molecule has any %s row, so the width of the columns is unknown",
                     path, bonds ? "bond" : "atom");
        else
            st = set_block(g, bonds, d);
    }
    if (st != MP_OK)
        set_block(g, bonds, 0);
    return st;
}

mp_status mp_graphs_read_columns(mp_graphs *g, const char *path, int bonds,
                                 const char *const *smiles)
{
    if (!g || !path)
        return mp_error_set(MP_ERR_ARG, "atom / bond columns: no store or no path");
    mp_colfile cf;
    mp_status st = mp_colfile_read(&cf, path, g->n_mols);
    if (st == MP_OK)
        st = mp_colfile_apply(&cf, g, bonds, 0, smiles);
    else
        set_block(g, bonds, 0);
    mp_colfile_free(&cf);
    return st;
}
