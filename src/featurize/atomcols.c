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

/* "molecule 3 (CCO)" or "molecule 3" into buf. */
static const char *mol_name(char *buf, size_t n, int32_t i, const char *const *smiles)
{
    if (smiles && smiles[i])
        snprintf(buf, n, "molecule %d (%.60s)", (int)i, smiles[i]);
    else
        snprintf(buf, n, "molecule %d", (int)i);
    return buf;
}

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

static mp_status read_npz(mp_graphs *g, const char *path, int bonds, const char *const *smiles)
{
    unsigned char *file = NULL;
    size_t n = 0;
    zip_member *mem = NULL;
    int64_t count = 0;
    mp_status st = read_file(path, &file, &n);
    if (st == MP_OK)
        st = zip_members(path, file, n, &mem, &count);
    if (st == MP_OK && count != g->n_mols)
        st = BAD("%s: %lld arrays for %d input rows (one array per molecule, in input order)",
                 path, (long long)count, (int)g->n_mols);
    int d = -1;
    char mb[128], what[512];
    for (int32_t i = 0; st == MP_OK && i < g->n_mols; i++) {
        if (!g->valid[i])
            continue;   /* an invalid SMILES: its array is not read */
        const unsigned char *data = NULL;
        size_t len = 0;
        unsigned char *owned = NULL;
        snprintf(what, sizeof what, "%s: array '%s' (%s)", path, mem[i].name,
                 mol_name(mb, sizeof mb, i, smiles));
        if ((st = zip_data(path, file, n, &mem[i], &data, &len, &owned)) != MP_OK)
            break;
        npy_array a;
        st = npy_parse(&a, data, len, what);
        int32_t want = rows_of(g, i, bonds);
        if (st == MP_OK && a.shape[0] != want)
            st = BAD("%s: %lld rows, but the molecule has %d %s", what, (long long)a.shape[0],
                     (int)want, bonds ? "bonds" : "atoms");
        if (st == MP_OK && want > 0 && d >= 0 && a.shape[1] != d)
            st = BAD("%s: %lld columns, the molecules before it have %d", what,
                     (long long)a.shape[1], d);
        if (st == MP_OK && want > 0 && a.shape[1] < 1)
            st = BAD("%s: no columns", what);
        if (st == MP_OK && want > 0 && d < 0) {
            d = (int)a.shape[1];
            st = set_block(g, bonds, d);
        }
        for (int32_t r = 0; st == MP_OK && r < want; r++) {
            float *dst = row_dst(g, i, r, bonds, d);
            for (int c = 0; c < d; c++) {
                double v = npy_at(&a, r, c);
                if (!isfinite(v)) {
                    st = BAD("%s: row %d, column %d is %g (NaN and infinities are not "
                             "allowed)", what, (int)r, c, v);
                    break;
                }
                dst[c] = (float)v;
            }
        }
        mp_free(owned);
    }
    if (st == MP_OK && d < 0)
        st = BAD("%s: no molecule has any %s, so the width of the columns is unknown", path,
                 bonds ? "bond" : "atom");
    mp_free(mem);
    mp_free(file);
    return st;
}

/* ===================================================================== */
/* CSV                                                                    */
/* ===================================================================== */

static mp_status read_csv(mp_graphs *g, const char *path, int bonds, const char *const *smiles)
{
    mp_csv_reader *rd = NULL;
    mp_status st = mp_csv_open(&rd, path);
    if (st != MP_OK)
        return st;
    char **f;
    size_t nf, line;
    char mb[128];
    st = mp_csv_next(rd, &f, &nf, &line);
    if (st == MP_OK && nf < 2)
        st = BAD("%s:%zu: the header needs the molecule column and at least one value column",
                 path, nf ? line : (size_t)1);
    int d = (int)nf - 1;
    if (st == MP_OK)
        st = set_block(g, bonds, d);
    const char *what = bonds ? "bonds" : "atoms";
    int32_t i = 0, r = 0;   /* the molecule being read and its rows so far */
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
        if (e == f[0] || *e || errno || mi < 0 || mi >= g->n_mols) {
            st = BAD("%s:%zu, column 1: '%.40s' is not a molecule index (0 .. %d)", path, line,
                     f[0], (int)g->n_mols - 1);
            break;
        }
        /* close the molecules before mi: each must have all its rows */
        while (i < mi) {
            if (r != rows_of(g, i, bonds)) {
                st = BAD("%s:%zu: %s has %d rows before line %zu, but %d %s", path, line,
                         mol_name(mb, sizeof mb, i, smiles), (int)r, line,
                         (int)rows_of(g, i, bonds), what);
                break;
            }
            i++;
            r = 0;
        }
        if (st != MP_OK)
            break;
        if (mi < i) {
            st = BAD("%s:%zu: molecule %lld after molecule %d (a molecule's rows together, "
                     "molecules in input order)", path, line, mi, (int)i);
            break;
        }
        if (r >= rows_of(g, i, bonds)) {
            st = BAD("%s:%zu: %s has %d %s, this is row %d", path, line,
                     mol_name(mb, sizeof mb, i, smiles), (int)rows_of(g, i, bonds), what,
                     (int)r + 1);
            break;
        }
        float *dst = row_dst(g, i, r, bonds, d);
        for (int c = 0; c < d; c++) {
            errno = 0;
            double v = strtod(f[c + 1], &e);
            if (e == f[c + 1] || *e || !isfinite(v)) {
                st = BAD("%s:%zu, column %d: '%.40s' is not a finite number (%s)", path, line,
                         c + 2, f[c + 1], mol_name(mb, sizeof mb, i, smiles));
                break;
            }
            dst[c] = (float)v;
        }
        r++;
    }
    while (st == MP_OK && i < g->n_mols) {
        if (r != rows_of(g, i, bonds))
            st = BAD("%s: %s has %d rows at the end of the file, but %d %s", path,
                     mol_name(mb, sizeof mb, i, smiles), (int)r, (int)rows_of(g, i, bonds),
                     what);
        i++;
        r = 0;
    }
    mp_csv_close(rd);
    return st;
}

/* ===================================================================== */
/* Entry                                                                  */
/* ===================================================================== */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && mp_strcaseeq(s + n - k, suffix);
}

mp_status mp_graphs_read_columns(mp_graphs *g, const char *path, int bonds,
                                 const char *const *smiles)
{
    if (!g || !path)
        return mp_error_set(MP_ERR_ARG, "atom / bond columns: no store or no path");
    if (bonds) {
        if (g->n_edges && !g->bond_rdkit)
            return mp_error_set(MP_ERR_ARG, "%s: bond columns need the molecules featurized "
                                "from their SMILES (RDKit's bond order), not read from a "
                                "feature cache", path);
        for (int32_t i = 0; i < g->n_mols; i++)
            if (g->n_edges && !bond_order_ok(g, i))
                return mp_error_set(MP_ERR_ARG, "%s: molecule %d: the store's RDKit bond order "
                                    "is damaged", path, (int)i);
    }
    mp_status st;
    if (ends_with(path, ".npz"))
        st = read_npz(g, path, bonds, smiles);
    else if (ends_with(path, ".csv") || ends_with(path, ".csv.gz"))
        st = read_csv(g, path, bonds, smiles);
    else
        st = mp_error_set(MP_ERR_ARG, "%s: unknown format (.npz of one array per molecule, as "
                          "Chemprop v1 reads, or .csv)", path);
    if (st != MP_OK)
        set_block(g, bonds, 0);
    return st;
}
