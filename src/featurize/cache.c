/*
 * cache.c - the feature cache file (.mpf): a featurized dataset on disk, so a
 * benchmark pays for RDKit once and a GPU run needs no RDKit at all.
 *
 * Layout of version 2 (little-endian, every array padded with zeros to 8
 * bytes, so the file could be mapped as is):
 *
 *   header (96 bytes)   magic "MPFEATS\0", u32 version, u32 header size,
 *                       u32 layout, i32 atom_fdim, i32 n_mols, i32 n_atoms,
 *                       i32 n_edges, i32 n_morgan, i32 n_desc, u32 flags
 *                       (1 Morgan, 2 descriptors, 4 scaffolds, 8 v2 Morgan,
 *                       16/32/64/128 the matrices rdkit2d, rdkit2d
 *                       normalized, v2 rdkit2d, charge), u32 atom/bond hot
 *                       widths (8 | 4 << 16), u32 zero, u64 string bytes,
 *                       i32 n_morgan2, i32 columns of each of the 4
 *                       matrices, 12 zero bytes
 *   arrays              valid, mol_atom, mol_edge, atom_hot, atom_mass,
 *                       bond_hot, edge_src, edge_dst, in_start, in_edge,
 *                       [morgan_start, morgan_bit, morgan_count], [desc],
 *                       [morgan2_start, morgan2_bit, morgan2_count],
 *                       [each matrix present: n_mols x columns doubles]
 *   strings             descriptor names, [each present matrix's column
 *                       names], [scaffolds], errors: each a u32 length
 *                       (0xffffffff = none) and its bytes
 *   u32 CRC-32 of everything before it
 *
 * Version 1 (molprop before Chemprop's descriptor sets) is the same with a
 * 64-byte header (the first 64 above) and flags 1, 2, 4 only; it still loads.
 *
 * Loading checks, in order: magic, version, header sizes, the exact file size
 * they imply, the checksum, then every structural invariant (mp_graphs_check
 * and the Morgan/matrix/string sections: column counts and names must be
 * this molprop's), and refuses with a message naming the file.
 */
#include "featurize/featurize.h"
#include "featurize/desc2d.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define MPF_MAGIC "MPFEATS"      /* 8 bytes with its NUL */
#define MPF_VERSION 2u
#define MPF_HEADER 96u
#define MPF_HEADER_V1 64u
#define MPF_F_MORGAN 1u
#define MPF_F_DESC 2u
#define MPF_F_SCAFFOLD 4u
#define MPF_F_MORGAN2 8u
#define MPF_F_MAT0 16u            /* matrix k: MPF_F_MAT0 << k */
#define MPF_F_ALL 255u
#define MPF_HOT_WIDTHS ((uint32_t)MP_ATOM_MAX_HOT | ((uint32_t)MP_BOND_MAX_HOT << 16))
#define NO_STRING 0xffffffffu

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .mpf format is little-endian");

typedef struct {
    char     magic[8];
    uint32_t version, header_size, layout;
    int32_t  atom_fdim, n_mols, n_atoms, n_edges, n_morgan, n_desc;
    uint32_t flags, hot_widths;
    uint32_t zero;
    uint64_t string_bytes;
    /* version 2 */
    int32_t  n_morgan2;
    int32_t  mat_cols[MP_N_MATS];
    uint32_t zero2[3];
} mpf_header;

_Static_assert(sizeof(mpf_header) == MPF_HEADER, "header is 96 bytes");
_Static_assert(MP_N_MATS == 4, "the header has room for 4 matrices");

/* The columns matrix k has in this molprop. */
static int32_t mat_cols_expected(int k)
{
    return k == MP_MAT_V2_RDKIT2D ? MP_D2_ALL : k == MP_MAT_V2_CHARGE ? 1 : MP_D2_V1;
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* The arrays in file order, sized from a header (or a features struct). */
typedef struct {
    void  *ptr;      /* address of the array pointer in mp_features */
    size_t bytes;
} section;

static int sections(mp_features *f, const mpf_header *h, section *s)
{
    int k = 0;
    size_t nm = (size_t)h->n_mols, na = (size_t)h->n_atoms, ne = (size_t)h->n_edges;
    mp_graphs *g = &f->g;
    s[k++] = (section){ &g->valid, nm };
    s[k++] = (section){ &g->mol_atom, (nm + 1) * 4 };
    s[k++] = (section){ &g->mol_edge, (nm + 1) * 4 };
    s[k++] = (section){ &g->atom_hot, na * MP_ATOM_MAX_HOT * 2 };
    s[k++] = (section){ &g->atom_mass, na * 4 };
    s[k++] = (section){ &g->bond_hot, ne / 2 * MP_BOND_MAX_HOT };
    s[k++] = (section){ &g->edge_src, ne * 4 };
    s[k++] = (section){ &g->edge_dst, ne * 4 };
    s[k++] = (section){ &g->in_start, (na + 1) * 4 };
    s[k++] = (section){ &g->in_edge, ne * 4 };
    if (h->flags & MPF_F_MORGAN) {
        s[k++] = (section){ &f->morgan_start, (nm + 1) * 4 };
        s[k++] = (section){ &f->morgan_bit, (size_t)h->n_morgan * 2 };
        s[k++] = (section){ &f->morgan_count, (size_t)h->n_morgan * 4 };
    }
    if (h->flags & MPF_F_DESC)
        s[k++] = (section){ &f->desc, nm * (size_t)h->n_desc * 8 };
    if (h->flags & MPF_F_MORGAN2) {
        s[k++] = (section){ &f->morgan2_start, (nm + 1) * 4 };
        s[k++] = (section){ &f->morgan2_bit, (size_t)h->n_morgan2 * 2 };
        s[k++] = (section){ &f->morgan2_count, (size_t)h->n_morgan2 * 4 };
    }
    for (int m = 0; m < MP_N_MATS; m++)
        if (h->flags & (MPF_F_MAT0 << m))
            s[k++] = (section){ &f->mat[m].values, nm * (size_t)h->mat_cols[m] * 8 };
    return k;
}

/* ===================================================================== */
/* Save                                                                   */
/* ===================================================================== */

typedef struct {
    FILE    *fp;
    uint32_t crc;
    int      bad;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    static const char zeros[8];
    if (w->bad || !n)
        return;
    if (fwrite(p, 1, n, w->fp) != n)
        w->bad = 1;
    w->crc = mp_crc32(w->crc, p, n);
    size_t pad = pad8(n) - n;
    if (pad) {
        if (fwrite(zeros, 1, pad, w->fp) != pad)
            w->bad = 1;
        w->crc = mp_crc32(w->crc, zeros, pad);
    }
}

static uint64_t strings_size(char *const *s, int32_t n)
{
    uint64_t b = 0;
    for (int32_t i = 0; s && i < n; i++)
        b += 4 + (s[i] ? strlen(s[i]) : 0);
    return b;
}

static void put_strings(writer *w, char *const *s, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        uint32_t len = s[i] ? (uint32_t)strlen(s[i]) : NO_STRING;
        if (w->bad)
            return;
        if (fwrite(&len, 4, 1, w->fp) != 1)
            w->bad = 1;
        w->crc = mp_crc32(w->crc, &len, 4);
        if (s[i] && len) {
            if (fwrite(s[i], 1, len, w->fp) != len)
                w->bad = 1;
            w->crc = mp_crc32(w->crc, s[i], len);
        }
    }
}

mp_status mp_features_save(const mp_features *f, const char *path)
{
    const mp_graphs *g = &f->g;
    mpf_header h = { .magic = MPF_MAGIC };
    h.version = MPF_VERSION;
    h.header_size = MPF_HEADER;
    h.layout = (uint32_t)g->layout;
    h.atom_fdim = g->atom_fdim;
    h.n_mols = g->n_mols;
    h.n_atoms = g->n_atoms;
    h.n_edges = g->n_edges;
    h.n_morgan = f->morgan_start ? f->morgan_start[g->n_mols] : 0;
    h.n_desc = f->desc ? f->n_desc : 0;
    h.flags = (f->morgan_start ? MPF_F_MORGAN : 0) | (f->desc ? MPF_F_DESC : 0) |
              (f->scaffold ? MPF_F_SCAFFOLD : 0) | (f->morgan2_start ? MPF_F_MORGAN2 : 0);
    h.n_morgan2 = f->morgan2_start ? f->morgan2_start[g->n_mols] : 0;
    h.hot_widths = MPF_HOT_WIDTHS;
    h.string_bytes = strings_size(f->desc_names, h.n_desc) + strings_size(f->scaffold, g->n_mols) +
                     strings_size(f->error, g->n_mols);
    for (int m = 0; m < MP_N_MATS; m++)
        if (f->mat[m].values && f->mat[m].n_cols > 0) {
            h.flags |= MPF_F_MAT0 << m;
            h.mat_cols[m] = f->mat[m].n_cols;
            h.string_bytes += strings_size(f->mat[m].names, f->mat[m].n_cols);
        }
    if (!f->error)   /* every molecule gets an entry, "none" when absent */
        h.string_bytes += 4 * (uint64_t)g->n_mols;
    section s[24];
    int ns = sections((mp_features *)f, &h, s);

    mp_afile af;
    mp_status st = mp_afile_open(&af, path);
    if (st)
        return st;
    writer w = { af.fp, 0, 0 };
    put(&w, &h, sizeof h);
    for (int i = 0; i < ns; i++)
        put(&w, *(void **)s[i].ptr, s[i].bytes);
    put_strings(&w, f->desc_names, h.n_desc);
    for (int m = 0; m < MP_N_MATS; m++)
        if (h.flags & (MPF_F_MAT0 << m))
            put_strings(&w, f->mat[m].names, f->mat[m].n_cols);
    if (f->scaffold)
        put_strings(&w, f->scaffold, g->n_mols);
    if (f->error) {
        put_strings(&w, f->error, g->n_mols);
    } else {
        for (int32_t i = 0; i < g->n_mols && !w.bad; i++) {
            uint32_t none = NO_STRING;
            w.bad |= fwrite(&none, 4, 1, w.fp) != 1;
            w.crc = mp_crc32(w.crc, &none, 4);
        }
    }
    uint32_t crc = w.crc;
    if (!w.bad && fwrite(&crc, 4, 1, w.fp) != 1)
        w.bad = 1;
    if (w.bad) {
        mp_afile_abort(&af);
        return mp_error_set(MP_ERR_IO, "error writing %s (disk full?)", path);
    }
    return mp_afile_commit(&af);
}

/* ===================================================================== */
/* Load                                                                   */
/* ===================================================================== */

#define BAD(...) mp_error_set(MP_ERR_FORMAT, __VA_ARGS__)

/* Reads n strings from [*p, end); NULL entries allowed only when nullable. */
static mp_status get_strings(const char *path, const char *what, const unsigned char **p,
                             const unsigned char *end, int32_t n, int nullable, char ***out)
{
    char **s = mp_calloc((size_t)n + 1, sizeof *s);
    if (!s)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
    *out = s;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len;
        if (end - *p < 4)
            return BAD("%s: %s %d runs past the string section", path, what, (int)i);
        memcpy(&len, *p, 4);
        *p += 4;
        if (len == NO_STRING) {
            if (!nullable)
                return BAD("%s: %s %d is missing", path, what, (int)i);
            continue;
        }
        if ((uint64_t)(end - *p) < len)
            return BAD("%s: %s %d runs past the string section", path, what, (int)i);
        if (memchr(*p, '\0', len))
            return BAD("%s: %s %d holds a NUL byte", path, what, (int)i);
        if (!(s[i] = mp_malloc((size_t)len + 1)))
            return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
        memcpy(s[i], *p, len);
        s[i][len] = '\0';
        *p += len;
    }
    return MP_OK;
}

/* A sparse fingerprint: offsets from 0, monotone, within range; bits
 * ascending below MP_MORGAN_BITS with nonzero counts; none for an invalid
 * molecule. */
static mp_status check_sparse(const char *path, const char *what, const mp_graphs *g,
                              const int32_t *start, const uint16_t *bit, const uint32_t *count)
{
    if (start[0] != 0)
        return BAD("%s: %s offsets do not start at 0", path, what);
    for (int32_t m = 0; m < g->n_mols; m++) {
        int32_t a = start[m], b = start[m + 1];
        if (b < a)
            return BAD("%s: %s offsets not monotone at molecule %d", path, what, (int)m);
        if (b > a && !g->valid[m])
            return BAD("%s: invalid molecule %d has %s bits", path, (int)m, what);
        if (b > start[g->n_mols])
            return BAD("%s: %s offsets of molecule %d out of range", path, what, (int)m);
        for (int32_t j = a; j < b; j++)
            if (bit[j] >= MP_MORGAN_BITS || (j > a && bit[j] <= bit[j - 1]) || count[j] == 0)
                return BAD("%s: molecule %d: bad %s entry %d", path, (int)m, what, (int)j);
    }
    return MP_OK;
}

/* Everything beyond the graph store: Morgan offsets and bits, the matrices
 * (this molprop's columns, NaN rows for invalid molecules), the per
 * molecule strings agreeing with validity. */
static mp_status check_extras(const char *path, const mp_features *f)
{
    const mp_graphs *g = &f->g;
    mp_status st;
    if (f->morgan_start &&
        (st = check_sparse(path, "Morgan", g, f->morgan_start, f->morgan_bit, f->morgan_count)))
        return st;
    if (f->morgan2_start && (st = check_sparse(path, "v2 Morgan", g, f->morgan2_start,
                                               f->morgan2_bit, f->morgan2_count)))
        return st;
    for (int k = 0; k < MP_N_MATS; k++) {
        const mp_molmat *x = &f->mat[k];
        if (!x->values)
            continue;
        for (int j = 0; j < x->n_cols; j++) {
            const char *want = k == MP_MAT_V2_CHARGE ? "charge"
                               : k == MP_MAT_V2_RDKIT2D ? mp_d2_name(mp_d2_v2_index(j))
                                                        : mp_d2_name(j);
            if (strcmp(x->names[j], want) != 0)
                return BAD("%s: matrix %d column %d is '%s', this molprop's is '%s'", path, k,
                           j, x->names[j], want);
        }
        for (int32_t m = 0; m < g->n_mols; m++)
            if (!g->valid[m])
                for (int j = 0; j < x->n_cols; j++)
                    if (!isnan(x->values[(size_t)m * (size_t)x->n_cols + (size_t)j]))
                        return BAD("%s: invalid molecule %d has values in matrix %d", path,
                                   (int)m, k);
    }
    for (int32_t m = 0; m < g->n_mols; m++) {
        if (g->valid[m] == (f->error[m] != NULL))
            return BAD("%s: molecule %d: validity and error message disagree", path, (int)m);
        if (f->scaffold && g->valid[m] == (f->scaffold[m] == NULL))
            return BAD("%s: molecule %d: validity and scaffold disagree", path, (int)m);
    }
    return MP_OK;
}

static mp_status read_file(const char *path, unsigned char **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return mp_error_set(MP_ERR_IO, "%s is not a regular file", path);
    }
    *size = (size_t)sb.st_size;
    *data = mp_malloc(*size + 1);
    if (!*data) {
        fclose(fp);
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s (%zu bytes)", path, *size);
    }
    size_t got = fread(*data, 1, *size, fp);
    int err = ferror(fp);
    fclose(fp);
    if (err || got != *size) {
        mp_free(*data);
        *data = NULL;
        return mp_error_set(MP_ERR_IO, "error reading %s", path);
    }
    return MP_OK;
}

static mp_status check_header(const char *path, const mpf_header *h, size_t size)
{
    if (memcmp(h->magic, MPF_MAGIC, 8) != 0)
        return BAD("%s is not a molprop feature cache (bad magic)", path);
    if (h->version != MPF_VERSION && h->version != 1)
        return BAD("%s: feature cache format version %u, this molprop reads versions 1 and %u",
                   path, h->version, MPF_VERSION);
    if (h->header_size != (h->version == 1 ? MPF_HEADER_V1 : MPF_HEADER) ||
        h->hot_widths != MPF_HOT_WIDTHS || h->zero || h->zero2[0] || h->zero2[1] || h->zero2[2])
        return BAD("%s: bad header", path);
    if (h->layout > (uint32_t)MP_ATOM_ORGANIC || h->atom_fdim != mp_atom_fdim((mp_atom_layout)h->layout))
        return BAD("%s: unknown atom layout %u (width %d)", path, h->layout, (int)h->atom_fdim);
    uint32_t known = h->version == 1 ? 7u : MPF_F_ALL;
    if (h->n_mols < 0 || h->n_atoms < 0 || h->n_edges < 0 || h->n_edges % 2 || h->n_morgan < 0 ||
        h->n_desc < 0 || h->n_desc > 100000 || (h->flags & ~known) ||
        (!(h->flags & MPF_F_MORGAN) && h->n_morgan) || (!(h->flags & MPF_F_DESC) && h->n_desc) ||
        h->n_morgan2 < 0 || (!(h->flags & MPF_F_MORGAN2) && h->n_morgan2))
        return BAD("%s: inconsistent sizes in the header", path);
    for (int k = 0; k < MP_N_MATS; k++) {
        int present = (h->flags & (MPF_F_MAT0 << k)) != 0;
        if (h->mat_cols[k] != (present ? mat_cols_expected(k) : 0))
            return BAD("%s: matrix %d has %d columns, this molprop's has %d", path, k,
                       (int)h->mat_cols[k], present ? (int)mat_cols_expected(k) : 0);
    }
    if (h->string_bytes > size)
        return BAD("%s: truncated (strings of %llu bytes in a file of %zu)", path,
                   (unsigned long long)h->string_bytes, size);
    return MP_OK;
}

mp_status mp_features_load(mp_features **out, const char *path)
{
    *out = NULL;
    unsigned char *data;
    size_t size = 0;
    mp_status st = read_file(path, &data, &size);
    if (st)
        return st;
    mp_features *f = NULL;
    mpf_header h;
    memset(&h, 0, sizeof h);
    if (size < MPF_HEADER_V1 + 4) {
        st = BAD("%s: truncated (%zu bytes; not a molprop feature cache)", path, size);
        goto out;
    }
    memcpy(&h, data, MPF_HEADER_V1);   /* version 1 ends here */
    if (h.version != 1) {
        if (size < sizeof h + 4) {
            st = BAD("%s: truncated (%zu bytes; not a molprop feature cache)", path, size);
            goto out;
        }
        memcpy(&h, data, sizeof h);
    }
    if ((st = check_header(path, &h, size)))
        goto out;

    /* the exact size the header implies */
    f = mp_calloc(1, sizeof *f);
    if (!f) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    section s[24];
    int ns = sections(f, &h, s);
    uint64_t want = h.header_size;
    for (int i = 0; i < ns; i++)
        want += pad8(s[i].bytes);
    want += h.string_bytes + 4;
    if (want != size) {
        st = BAD("%s: truncated or damaged: its header implies %llu bytes, the file has %zu", path,
                 (unsigned long long)want, size);
        goto out;
    }
    uint32_t crc;
    memcpy(&crc, data + size - 4, 4);
    if (mp_crc32(0, data, size - 4) != crc) {
        st = mp_error_set(MP_ERR_CHECKSUM, "%s: checksum mismatch (the file is damaged)", path);
        goto out;
    }

    mp_graphs *g = &f->g;
    g->layout = (mp_atom_layout)h.layout;
    g->atom_fdim = h.atom_fdim;
    g->n_mols = h.n_mols;
    g->n_atoms = h.n_atoms;
    g->n_edges = h.n_edges;
    g->cap_mols = h.n_mols;
    g->cap_atoms = h.n_atoms;
    g->cap_edges = h.n_edges;
    f->n_desc = h.n_desc;
    for (int k = 0; k < MP_N_MATS; k++)
        f->mat[k].n_cols = (h.flags & (MPF_F_MAT0 << k)) ? h.mat_cols[k] : 0;
    const unsigned char *p = data + h.header_size;
    for (int i = 0; i < ns; i++) {
        void *a = mp_malloc(s[i].bytes);
        if (!a) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", path);
            goto out;
        }
        memcpy(a, p, s[i].bytes);
        *(void **)s[i].ptr = a;
        p += pad8(s[i].bytes);
    }
    const unsigned char *end = p + h.string_bytes;
    if ((h.flags & MPF_F_DESC) &&
        (st = get_strings(path, "descriptor name", &p, end, h.n_desc, 0, &f->desc_names)))
        goto out;
    for (int k = 0; k < MP_N_MATS; k++)
        if ((h.flags & (MPF_F_MAT0 << k)) &&
            (st = get_strings(path, "column name", &p, end, h.mat_cols[k], 0, &f->mat[k].names)))
            goto out;
    if (((h.flags & MPF_F_SCAFFOLD) &&
         (st = get_strings(path, "scaffold", &p, end, h.n_mols, 1, &f->scaffold))) ||
        (st = get_strings(path, "error message", &p, end, h.n_mols, 1, &f->error)))
        goto out;
    if (p != end) {
        st = BAD("%s: %zu unexplained bytes in the string section", path, (size_t)(end - p));
        goto out;
    }
    if (g->atom_fdim != mp_atom_fdim(g->layout)) {
        st = BAD("%s: atom layout %d with width %d", path, (int)g->layout, g->atom_fdim);
        goto out;
    }
    if ((st = mp_graphs_check(g))) {
        char msg[1800];
        snprintf(msg, sizeof msg, "%s", mp_error_message());
        st = BAD("%s: %s", path, msg);
        goto out;
    }
    /* the offsets must end where the arrays do (fuzz_cache found reads past them) */
    if (f->morgan_start && f->morgan_start[g->n_mols] != h.n_morgan) {
        st = BAD("%s: Morgan offsets end at %d, the arrays hold %d", path,
                 (int)f->morgan_start[g->n_mols], (int)h.n_morgan);
        goto out;
    }
    if ((st = check_extras(path, f)))
        goto out;
out:
    mp_free(data);
    if (st) {
        mp_features_free(f);
        f = NULL;
    }
    *out = f;
    return st;
}
