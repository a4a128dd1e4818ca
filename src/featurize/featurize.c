/*
 * featurize.c - SMILES to the graph store and molecule vectors, in parallel.
 *
 * The RDKit bridge hands over plain numbers per atom and bond; this file
 * encodes them into hot slots for the chosen layout (REFERENCE 1.1, 1.2, 1.5),
 * orders the bonds as Chemprop v1 does (by (a1, a2), a1 < a2; REFERENCE 1.3)
 * and assembles the store.
 *
 * Two passes make the result independent of the thread count:
 *   1. each thread featurizes molecules (dynamic schedule) into its own
 *      arena, recording per molecule how many atoms, bonds and Morgan bits
 *      it has and where its record sits;
 *   2. prefix sums give every molecule its global offsets, and the records
 *      are copied into place in parallel (edges, CSR built per molecule).
 */
#include "featurize/featurize.h"
#include "featurize/desc2d.h"
#include "featurize/limits.h"
#include "featurize/rdkit_bridge.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ===================================================================== */
/* Layouts                                                                */
/* ===================================================================== */

/* Block widths shared by every multi-hot layout (each with its unknown slot). */
#define W_DEGREE 7   /* 0..5          */
#define W_CHARGE 6   /* -1,-2,1,2,0   */
#define W_CHIRAL 5   /* 0..3          */
#define W_HS     6   /* 0..4          */

static const int v2_z[] = { 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13,
                            14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                            27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 53 };
static const int organic_z[] = { 1, 5, 6, 7, 8, 9, 14, 15, 16, 17, 35, 53 };
static const int v1_hyb[] = { MP_HYB_SP, MP_HYB_SP2, MP_HYB_SP3, MP_HYB_SP3D, MP_HYB_SP3D2 };
static const int v2_hyb[] = { MP_HYB_S,   MP_HYB_SP,   MP_HYB_SP2,  MP_HYB_SP2D,
                              MP_HYB_SP3, MP_HYB_SP3D, MP_HYB_SP3D2 };
static const int organic_hyb[] = { MP_HYB_S, MP_HYB_SP, MP_HYB_SP2, MP_HYB_SP3 };

typedef struct {
    const char *name;
    int n_z;            /* atomic-number choices (v1: Z = 1..100 in order) */
    const int *z;       /* NULL: Z = 1..n_z                                 */
    int n_hyb;
    const int *hyb;
} layout_desc;

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const layout_desc layouts[] = {
    [MP_ATOM_V1] = { "v1", 100, NULL, COUNT(v1_hyb), v1_hyb },
    [MP_ATOM_V2] = { "v2", COUNT(v2_z), v2_z, COUNT(v2_hyb), v2_hyb },
    [MP_ATOM_ORGANIC] = { "organic", COUNT(organic_z), organic_z, COUNT(organic_hyb), organic_hyb },
};

static int layout_ok(mp_atom_layout l)
{
    return (int)l >= 0 && (int)l < COUNT(layouts);
}

int mp_atom_fdim(mp_atom_layout layout)
{
    if (!layout_ok(layout))
        return 0;
    const layout_desc *L = &layouts[layout];
    /* one-hot blocks with unknown slots, aromatic, mass */
    return (L->n_z + 1) + W_DEGREE + W_CHARGE + W_CHIRAL + W_HS + (L->n_hyb + 1) + 1 + 1;
}

const char *mp_atom_layout_name(mp_atom_layout layout)
{
    return layout_ok(layout) ? layouts[layout].name : "unknown";
}

mp_status mp_atom_layout_parse(const char *name, mp_atom_layout *out)
{
    for (int i = 0; i < COUNT(layouts); i++)
        if (name && mp_strcaseeq(name, layouts[i].name)) {
            *out = (mp_atom_layout)i;
            return MP_OK;
        }
    return mp_error_set(MP_ERR_ARG, "unknown atom layout '%s' (expected v1, v2 or organic)",
                        name ? name : "(null)");
}

/* Index of v in choices[0..n), or n (the unknown slot). */
static int choice(const int *choices, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (choices[i] == v)
            return i;
    return n;
}

static int charge_slot(int c)
{
    switch (c) {
    case -1: return 0;
    case -2: return 1;
    case 1:  return 2;
    case 2:  return 3;
    case 0:  return 4;
    default: return 5;
    }
}

/* Hot slots of atom i, ascending (blocks are laid out in order), -1 padded. */
static void encode_atom(const layout_desc *L, const mp_rdk_mol *m, int32_t i, int16_t *hot)
{
    int k = 0, off = 0;
    int z = m->atomic_num[i];
    int zs = L->z ? choice(L->z, L->n_z, z) : (z >= 1 && z <= L->n_z ? z - 1 : L->n_z);
    hot[k++] = (int16_t)(off + zs);
    off += L->n_z + 1;
    int d = m->total_degree[i];
    hot[k++] = (int16_t)(off + (d >= 0 && d <= 5 ? d : 6));
    off += W_DEGREE;
    hot[k++] = (int16_t)(off + charge_slot(m->formal_charge[i]));
    off += W_CHARGE;
    int c = m->chiral_tag[i];
    hot[k++] = (int16_t)(off + (c >= 0 && c <= 3 ? c : 4));
    off += W_CHIRAL;
    int h = m->total_hs[i];
    hot[k++] = (int16_t)(off + (h >= 0 && h <= 4 ? h : 5));
    off += W_HS;
    hot[k++] = (int16_t)(off + choice(L->hyb, L->n_hyb, m->hybridization[i]));
    off += L->n_hyb + 1;
    if (m->aromatic[i])
        hot[k++] = (int16_t)off;
    while (k < MP_ATOM_MAX_HOT)
        hot[k++] = -1;
}

/* Bond slots: 0 none-flag (never for a real bond), 1-4 type, 5 conjugated,
 * 6 in ring, 7-13 stereo 0..5 + unknown. */
static void encode_bond(const mp_rdk_mol *m, int32_t b, int8_t *hot)
{
    int k = 0;
    if (m->bond_type[b] != MP_BT_OTHER)
        hot[k++] = (int8_t)m->bond_type[b];
    if (m->bond_conjugated[b])
        hot[k++] = 5;
    if (m->bond_in_ring[b])
        hot[k++] = 6;
    int s = m->bond_stereo[b];
    hot[k++] = (int8_t)(7 + (s <= 5 ? s : 6));
    while (k < MP_BOND_MAX_HOT)
        hot[k++] = -1;
}

/* ===================================================================== */
/* Pass 1: one molecule into a thread's arena                             */
/* ===================================================================== */

/* Where the parts of a record of na atoms, nb bonds, nm Morgan bits and nm2
 * v2 Morgan bits lie (4-byte items first, then 2-byte, then 1-byte: all
 * naturally aligned when the record starts on 8 bytes). */
typedef struct {
    size_t mass, bond_a, bond_b, bond_rd, mcount, mcount2, atom_hot, mbit, mbit2, bond_hot, size;
} rec_layout;

static rec_layout rec_at(int32_t na, int32_t nb, int32_t nm, int32_t nm2)
{
    rec_layout r;
    size_t o = 0;
    r.mass = o;     o += (size_t)na * sizeof(float);
    r.bond_a = o;   o += (size_t)nb * sizeof(int32_t);
    r.bond_b = o;   o += (size_t)nb * sizeof(int32_t);
    r.bond_rd = o;  o += (size_t)nb * sizeof(int32_t);
    r.mcount = o;   o += (size_t)nm * sizeof(uint32_t);
    r.mcount2 = o;  o += (size_t)nm2 * sizeof(uint32_t);
    r.atom_hot = o; o += (size_t)na * MP_ATOM_MAX_HOT * sizeof(int16_t);
    r.mbit = o;     o += (size_t)nm * sizeof(uint16_t);
    r.mbit2 = o;    o += (size_t)nm2 * sizeof(uint16_t);
    r.bond_hot = o; o += (size_t)nb * MP_BOND_MAX_HOT;
    r.size = (o + 7) & ~(size_t)7;
    return r;
}

typedef struct {
    int64_t key;    /* (min atom) * n_atoms + (max atom) */
    int32_t idx;    /* RDKit bond index                  */
} key_idx;

typedef struct {
    mp_buf   arena;
    key_idx *order;      /* bond permutation scratch, reused */
    int32_t  cap;
} thread_state;

/* Per-molecule bookkeeping between the passes. */
typedef struct {
    int32_t *na, *nb, *nm, *nm2;
    int32_t *thr;
    size_t  *off;
} mol_index;

static int key_idx_cmp(const void *a, const void *b)
{
    const key_idx *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Bond order of Chemprop v1: ascending (min atom, max atom); the result is
 * ts->order[0..nb).  Keys are unique (no two bonds join the same atoms). */
static int sort_bonds(thread_state *ts, const mp_rdk_mol *m)
{
    int32_t nb = m->n_bonds, na = m->n_atoms;
    if (nb > ts->cap) {
        int32_t c = ts->cap ? ts->cap : 64;
        while (c < nb)
            c *= 2;
        key_idx *o = mp_realloc(ts->order, (size_t)c * sizeof *o);
        if (!o)
            return -1;
        ts->order = o;
        ts->cap = c;
    }
    key_idx *o = ts->order;
    for (int32_t b = 0; b < nb; b++) {
        int32_t u = m->bond_begin[b], v = m->bond_end[b];
        int32_t lo = u < v ? u : v, hi = u < v ? v : u;
        o[b] = (key_idx){ (int64_t)lo * na + hi, b };
    }
    if (nb > 64) {
        qsort(o, (size_t)nb, sizeof *o, key_idx_cmp);
        return 0;
    }
    /* insertion sort: small, and RDKit's order is nearly sorted already */
    for (int32_t i = 1; i < nb; i++) {
        key_idx x = o[i];
        int32_t j = i;
        while (j > 0 && o[j - 1].key > x.key) {
            o[j] = o[j - 1];
            j--;
        }
        o[j] = x;
    }
    return 0;
}

/* Encodes molecule mol (already parsed into *m) as a record in ts->arena. */
static int put_record(thread_state *ts, const layout_desc *L, const mp_rdk_mol *m,
                      int with_morgan, int with_morgan2, size_t *off_out)
{
    int32_t na = m->n_atoms, nb = m->n_bonds, nm = with_morgan ? m->n_morgan : 0;
    int32_t nm2 = with_morgan2 ? m->n_morgan2 : 0;
    rec_layout r = rec_at(na, nb, nm, nm2);
    size_t start = (ts->arena.len + 7) & ~(size_t)7;
    if (mp_buf_reserve(&ts->arena, start - ts->arena.len + r.size) != MP_OK)
        return -1;
    if (sort_bonds(ts, m) < 0)
        return -1;
    char *p = ts->arena.data + start;
    float *mass = (float *)(p + r.mass);
    int16_t *ahot = (int16_t *)(p + r.atom_hot);
    for (int32_t i = 0; i < na; i++) {
        mass[i] = (float)(m->mass[i] * 0.01);
        encode_atom(L, m, i, ahot + (size_t)i * MP_ATOM_MAX_HOT);
    }
    int32_t *ba = (int32_t *)(p + r.bond_a), *bb = (int32_t *)(p + r.bond_b);
    int32_t *brd = (int32_t *)(p + r.bond_rd);
    int8_t *bhot = (int8_t *)(p + r.bond_hot);
    for (int32_t k = 0; k < nb; k++) {
        int32_t b = ts->order[k].idx;
        int32_t u = m->bond_begin[b], v = m->bond_end[b];
        ba[k] = u < v ? u : v;
        bb[k] = u < v ? v : u;
        brd[k] = b;
        encode_bond(m, b, bhot + (size_t)k * MP_BOND_MAX_HOT);
    }
    if (nm) {
        memcpy(p + r.mcount, m->morgan_count, (size_t)nm * sizeof(uint32_t));
        memcpy(p + r.mbit, m->morgan_bit, (size_t)nm * sizeof(uint16_t));
    }
    if (nm2) {
        memcpy(p + r.mcount2, m->morgan2_count, (size_t)nm2 * sizeof(uint32_t));
        memcpy(p + r.mbit2, m->morgan2_bit, (size_t)nm2 * sizeof(uint16_t));
    }
    ts->arena.len = start + r.size;
    *off_out = start;
    return 0;
}

/* ===================================================================== */
/* Chemprop's descriptor matrices                                         */
/* ===================================================================== */

/* Allocates the matrices `sets` asks for, with their column names. */
static mp_status alloc_mats(mp_features *f, unsigned sets, int32_t n)
{
    static const unsigned want[MP_N_MATS] = { MP_SET_RDKIT2D, MP_SET_RDKIT2D_NORM,
                                              MP_SET_V2_RDKIT2D, MP_SET_V2_CHARGE };
    static const int32_t cols[MP_N_MATS] = { MP_D2_V1, MP_D2_V1, MP_D2_ALL, 1 };
    for (int k = 0; k < MP_N_MATS; k++) {
        if (!(sets & want[k]))
            continue;
        mp_molmat *x = &f->mat[k];
        x->names = mp_calloc((size_t)cols[k] + 1, sizeof(char *));
        x->values = mp_malloc(((size_t)n * (size_t)cols[k] + 1) * sizeof(double));
        if (!x->names || !x->values)
            return MP_ERR_NOMEM;
        x->n_cols = cols[k];
        for (int j = 0; j < cols[k]; j++) {
            const char *nm = k == MP_MAT_V2_CHARGE ? "charge"
                             : k == MP_MAT_V2_RDKIT2D ? mp_d2_name(mp_d2_v2_index(j))
                                                      : mp_d2_name(j);
            if (!(x->names[j] = mp_strdup(nm)))
                return MP_ERR_NOMEM;
        }
    }
    return MP_OK;
}

/* Row i of every matrix from the bridge's molecule m (NULL: invalid). */
static void put_mats(mp_features *f, int32_t i, const mp_rdk_mol *m)
{
    for (int k = 0; k < MP_N_MATS; k++) {
        mp_molmat *x = &f->mat[k];
        if (!x->n_cols)
            continue;
        double *row = x->values + (size_t)i * (size_t)x->n_cols;
        if (!m) {
            for (int j = 0; j < x->n_cols; j++)
                row[j] = NAN;
            continue;
        }
        switch (k) {
        case MP_MAT_RDKIT2D:
            memcpy(row, m->rdkit2d, MP_D2_V1 * sizeof(double));
            break;
        case MP_MAT_RDKIT2D_NORM:
            /* descriptastorus: a failed descriptor normalizes to 0.0 */
            for (int j = 0; j < MP_D2_V1; j++)
                row[j] = m->rdkit2d_failed[j] ? 0.0 : mp_d2_norm_cdf(j, m->rdkit2d[j]);
            break;
        case MP_MAT_V2_RDKIT2D:
            memcpy(row, m->v2desc, MP_D2_ALL * sizeof(double));
            break;
        case MP_MAT_V2_CHARGE:
            row[0] = (double)m->charge;
            break;
        }
    }
}

/* ===================================================================== */
/* The driver                                                             */
/* ===================================================================== */

/* Pass 1 for molecule i: featurized by thread t into its arena (or marked
 * invalid with the reason), its sizes into mi, its descriptor rows into f.
 * -1 on OOM. */
static int featurize_one(mp_features *f, const mp_featurize_opts *o, const layout_desc *L,
                         int what, mp_rdk_ctx *ctx, thread_state *ts, int t, mol_index *mi,
                         const char *smiles, int32_t i)
{
    int morgan2 = (o->sets & MP_SET_V2_MORGAN) != 0;
    const mp_rdk_mol *m = NULL;
    char big[192];   /* too large for RDKit (limits.h): invalid, with why */
    int r = mp_smiles_oversized(smiles, big, sizeof big) ? 0 : mp_rdk_featurize(ctx, smiles, what, &m);
    int bad = r < 0;
    if (r == 1) {
        f->g.valid[i] = 1;
        mi->na[i] = m->n_atoms;
        mi->nb[i] = m->n_bonds;
        mi->nm[i] = o->morgan ? m->n_morgan : 0;
        mi->nm2[i] = morgan2 ? m->n_morgan2 : 0;
        mi->thr[i] = t;
        bad = put_record(ts, L, m, o->morgan, morgan2, &mi->off[i]) < 0;
        if (o->descriptors)
            memcpy(f->desc + (size_t)i * f->n_desc, m->desc, (size_t)f->n_desc * sizeof(double));
        put_mats(f, i, m);
        if (o->scaffolds && !bad)
            bad = !(f->scaffold[i] = mp_strdup(m->scaffold ? m->scaffold : ""));
    } else if (r == 0) {
        if (o->descriptors)
            for (int j = 0; j < f->n_desc; j++)
                f->desc[(size_t)i * f->n_desc + j] = NAN;
        put_mats(f, i, NULL);
        const char *why = m ? m->error : big;
        bad = !(f->error[i] = mp_strdup(why && *why ? why : "invalid SMILES"));
    }
    return bad ? -1 : 0;
}

/* Pass 2 for valid molecule i: its record p copied into place (the offsets
 * of molecule i are set), its edges and CSR built. */
static void place_record(mp_features *f, const mol_index *mi, const char *p, int32_t i)
{
    int32_t na = mi->na[i], nb = mi->nb[i], nm = mi->nm[i], nm2 = mi->nm2[i];
    int32_t A = f->g.mol_atom[i], E = f->g.mol_edge[i];
    rec_layout r = rec_at(na, nb, nm, nm2);
    memcpy(f->g.atom_hot + (size_t)A * MP_ATOM_MAX_HOT, p + r.atom_hot,
           (size_t)na * MP_ATOM_MAX_HOT * sizeof(int16_t));
    memcpy(f->g.atom_mass + A, p + r.mass, (size_t)na * sizeof(float));
    memcpy(f->g.bond_hot + (size_t)(E / 2) * MP_BOND_MAX_HOT, p + r.bond_hot,
           (size_t)nb * MP_BOND_MAX_HOT);
    mp_graphs_build_edges(&f->g, A, na, E, nb, (const int32_t *)(p + r.bond_a),
                          (const int32_t *)(p + r.bond_b));
    memcpy(f->g.bond_rdkit + E / 2, p + r.bond_rd, (size_t)nb * sizeof(int32_t));
    if (nm) {
        int32_t s = f->morgan_start[i];
        memcpy(f->morgan_bit + s, p + r.mbit, (size_t)nm * sizeof(uint16_t));
        memcpy(f->morgan_count + s, p + r.mcount, (size_t)nm * sizeof(uint32_t));
    }
    if (nm2) {
        int32_t s = f->morgan2_start[i];
        memcpy(f->morgan2_bit + s, p + r.mbit2, (size_t)nm2 * sizeof(uint16_t));
        memcpy(f->morgan2_count + s, p + r.mcount2, (size_t)nm2 * sizeof(uint32_t));
    }
}

/* A capacity for `total` items after `done` of n molecules: the rate so far
 * over all n, plus an eighth (so a store usually grows once or twice). */
static int32_t projected(int64_t total, int32_t done, int32_t n)
{
    int64_t c = total * n / (done > 0 ? done : 1);
    c += c / 8 + 64;
    if (c < total)
        c = total;
    return c > INT32_MAX ? INT32_MAX : (int32_t)c;
}

/* Grows a Morgan bit / count pair of arrays to `cap` (+1) entries. */
static int grow_morgan(uint16_t **bit, uint32_t **count, int32_t cap)
{
    void *b = mp_realloc(*bit, ((size_t)cap + 1) * sizeof(uint16_t));
    if (!b)
        return -1;
    *bit = b;
    void *c = mp_realloc(*count, ((size_t)cap + 1) * sizeof(uint32_t));
    if (!c)
        return -1;
    *count = c;
    return 0;
}

static void free_strings(char **s, int32_t n)
{
    if (!s)
        return;
    for (int32_t i = 0; i < n; i++)
        mp_free(s[i]);
    mp_free(s);
}

void mp_features_free(mp_features *f)
{
    if (!f)
        return;
    int32_t n = f->g.n_mols;   /* before mp_graphs_free zeroes it */
    mp_graphs_free(&f->g);
    mp_free(f->morgan_start);
    mp_free(f->morgan_bit);
    mp_free(f->morgan_count);
    free_strings(f->desc_names, f->n_desc);
    mp_free(f->desc);
    for (int k = 0; k < MP_N_MATS; k++) {
        free_strings(f->mat[k].names, f->mat[k].n_cols);
        mp_free(f->mat[k].values);
    }
    mp_free(f->morgan2_start);
    mp_free(f->morgan2_bit);
    mp_free(f->morgan2_count);
    free_strings(f->scaffold, n);
    free_strings(f->error, n);
    mp_free(f);
}

mp_status mp_featurize(mp_features **out, const char *const *smiles, int32_t n,
                       const mp_featurize_opts *opts)
{
    *out = NULL;
    mp_featurize_opts o = { MP_ATOM_V1, 1, 0, 0, 0, 0 };
    if (opts)
        o = *opts;
    if (!layout_ok(o.layout))
        return mp_error_set(MP_ERR_ARG, "mp_featurize: unknown atom layout %d", (int)o.layout);
    if (o.sets & ~(unsigned)MP_SET_ALL)
        return mp_error_set(MP_ERR_ARG, "mp_featurize: unknown feature sets 0x%x", o.sets);
    if (n < 0 || (n > 0 && !smiles))
        return mp_error_set(MP_ERR_ARG, "mp_featurize: bad molecule count %d", (int)n);
    for (int32_t i = 0; i < n; i++)
        if (!smiles[i])
            return mp_error_set(MP_ERR_ARG, "mp_featurize: SMILES %d is NULL", (int)i);
    const layout_desc *L = &layouts[o.layout];
    int what = (o.morgan ? MP_RDK_MORGAN : 0) | (o.descriptors ? MP_RDK_DESC : 0) |
               (o.scaffolds ? MP_RDK_SCAFFOLD : 0) |
               ((o.sets & (MP_SET_RDKIT2D | MP_SET_RDKIT2D_NORM)) ? MP_RDK_RDKIT2D : 0) |
               ((o.sets & MP_SET_V2_RDKIT2D) ? MP_RDK_V2DESC : 0) |
               ((o.sets & MP_SET_V2_MORGAN) ? MP_RDK_V2MORGAN : 0) |
               ((o.sets & MP_SET_V2_CHARGE) ? MP_RDK_CHARGE : 0);
    int morgan2 = (o.sets & MP_SET_V2_MORGAN) != 0;
    if (what & (MP_RDK_RDKIT2D | MP_RDK_V2DESC)) {
        mp_status rs = mp_rdk_desc2d_ready();
        if (rs)
            return rs;
    }
    int nt = o.n_threads > 0 ? o.n_threads : mp_threads_get();
    if (nt < 1)
        nt = 1;
    if (nt > n)
        nt = n > 0 ? n : 1;

    mp_features *f = mp_calloc(1, sizeof *f);
    mol_index mi = { 0 };
    thread_state *ts = mp_calloc((size_t)nt, sizeof *ts);
    mp_rdk_ctx **ctx = mp_calloc((size_t)nt, sizeof *ctx);   /* made by their threads */
    mp_status st = MP_OK;
    if (!f || !ts || !ctx)
        goto nomem;
    f->g.layout = o.layout;
    f->g.atom_fdim = mp_atom_fdim(o.layout);
    f->g.n_mols = n;
    size_t nn = (size_t)n + 1;
    mi.na = mp_calloc(nn, sizeof(int32_t));
    mi.nb = mp_calloc(nn, sizeof(int32_t));
    mi.nm = mp_calloc(nn, sizeof(int32_t));
    mi.nm2 = mp_calloc(nn, sizeof(int32_t));
    mi.thr = mp_calloc(nn, sizeof(int32_t));
    mi.off = mp_calloc(nn, sizeof(size_t));
    f->error = mp_calloc(nn, sizeof(char *));
    f->g.valid = mp_calloc(nn, 1);
    if (!mi.na || !mi.nb || !mi.nm || !mi.nm2 || !mi.thr || !mi.off || !f->error || !f->g.valid)
        goto nomem;
    if (alloc_mats(f, o.sets, n) != MP_OK)
        goto nomem;
    if (o.scaffolds && !(f->scaffold = mp_calloc(nn, sizeof(char *))))
        goto nomem;
    if (o.descriptors) {
        f->n_desc = mp_rdk_n_desc();
        f->desc_names = mp_calloc((size_t)f->n_desc + 1, sizeof(char *));
        f->desc = mp_malloc(((size_t)n * (size_t)f->n_desc + 1) * sizeof(double));
        if (!f->desc_names || !f->desc)
            goto nomem;
        for (int j = 0; j < f->n_desc; j++)
            if (!(f->desc_names[j] = mp_strdup(mp_rdk_desc_name(j))))
                goto nomem;
    }

    /* the store's arrays, grown round by round below */
    {
        uint8_t *valid = f->g.valid;
        f->g.valid = NULL;
        st = mp_graphs_alloc(&f->g, n, 0, 0);
        mp_free(f->g.valid);
        f->g.valid = valid;
        if (st)
            goto fail;
    }
    if (!(f->g.bond_rdkit = mp_malloc(sizeof(int32_t))))   /* RDKit's bond order (graph.h) */
        goto nomem;
    if (o.morgan && (!(f->morgan_start = mp_malloc(nn * sizeof(int32_t))) ||
                     grow_morgan(&f->morgan_bit, &f->morgan_count, 0) < 0))
        goto nomem;
    if (morgan2 && (!(f->morgan2_start = mp_malloc(nn * sizeof(int32_t))) ||
                    grow_morgan(&f->morgan2_bit, &f->morgan2_count, 0) < 0))
        goto nomem;
    f->g.mol_atom[0] = f->g.mol_edge[0] = 0;
    if (o.morgan)
        f->morgan_start[0] = 0;
    if (morgan2)
        f->morgan2_start[0] = 0;

    /* The molecules in rounds of `chunk`: pass 1, the offsets, pass 2.  A
     * round's records fit the caches and the arenas are reused from round to
     * round (no page faults after the first); the result does not depend on
     * the round size. */
    int32_t chunk = 256 * nt > 1024 ? 256 * nt : 1024;
    int64_t ta = 0, te = 0, tm = 0, tm2 = 0;   /* totals so far */
    int32_t cap_m = 0, cap_m2 = 0;             /* of morgan(2)_bit / _count */
    for (int32_t c0 = 0; c0 < n; c0 += chunk) {
        int32_t c1 = n - c0 > chunk ? c0 + chunk : n;
        for (int t = 0; t < nt; t++)
            ts[t].arena.len = 0;

        /* ---- pass 1 ---- */
        int failed = 0;
#pragma omp parallel num_threads(nt)
        {
            int t = 0;
#ifdef _OPENMP
            t = omp_get_thread_num();
#endif
            if (!ctx[t] && !(ctx[t] = mp_rdk_ctx_new()))
                __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
#pragma omp for schedule(dynamic, 32)
            for (int32_t i = c0; i < c1; i++) {
                if (__atomic_load_n(&failed, __ATOMIC_RELAXED))
                    continue;
                if (mp_interrupt_check()) {   /* a stop was requested: unwind */
                    __atomic_store_n(&failed, 2, __ATOMIC_RELAXED);
                    continue;
                }
                if (featurize_one(f, &o, L, what, ctx[t], &ts[t], t, &mi, smiles[i], i) < 0)
                    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            }
        }
        if (failed == 2) {
            if ((st = mp_interrupt_poll()) == MP_OK)
                st = mp_error_set(MP_ERR_INTERRUPTED, "interrupted");
            goto fail;
        }
        if (failed)
            goto nomem;

        /* ---- offsets ---- */
        for (int32_t i = c0; i < c1; i++) {
            ta += mi.na[i];
            te += 2 * (int64_t)mi.nb[i];
            tm += mi.nm[i];
            tm2 += mi.nm2[i];
        }
        if (ta > INT32_MAX || te > INT32_MAX || tm > INT32_MAX || tm2 > INT32_MAX) {
            st = mp_error_set(MP_ERR_ARG, "mp_featurize: %lld atoms / %lld edges do not fit one "
                              "store (at most 2^31-1): featurize in chunks", (long long)ta,
                              (long long)te);
            goto fail;
        }
        if (ta > f->g.cap_atoms || te > f->g.cap_edges) {
            int32_t ca = projected(ta, c1, n), ce = projected(te, c1, n);
            if (mp_graphs_reserve(&f->g, ca > f->g.cap_atoms ? ca : f->g.cap_atoms,
                                  ce > f->g.cap_edges ? ce : f->g.cap_edges) != MP_OK)
                goto nomem;
            void *q = mp_realloc(f->g.bond_rdkit, ((size_t)f->g.cap_edges / 2 + 1) * sizeof(int32_t));
            if (!q)
                goto nomem;
            f->g.bond_rdkit = q;
        }
        if (o.morgan && tm > cap_m) {
            int32_t c = projected(tm, c1, n);
            if (grow_morgan(&f->morgan_bit, &f->morgan_count, c) < 0)
                goto nomem;
            cap_m = c;
        }
        if (morgan2 && tm2 > cap_m2) {
            int32_t c = projected(tm2, c1, n);
            if (grow_morgan(&f->morgan2_bit, &f->morgan2_count, c) < 0)
                goto nomem;
            cap_m2 = c;
        }
        int32_t *ms = f->morgan_start, *ms2 = f->morgan2_start;
        for (int32_t i = c0; i < c1; i++) {
            f->g.mol_atom[i + 1] = f->g.mol_atom[i] + mi.na[i];
            f->g.mol_edge[i + 1] = f->g.mol_edge[i] + 2 * mi.nb[i];
            if (ms)
                ms[i + 1] = ms[i] + mi.nm[i];
            if (ms2)
                ms2[i + 1] = ms2[i] + mi.nm2[i];
        }

        /* ---- pass 2 ---- */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int32_t i = c0; i < c1; i++)
            if (f->g.valid[i])
                place_record(f, &mi, ts[mi.thr[i]].arena.data + mi.off[i], i);
    }
    f->g.n_atoms = (int32_t)ta;
    f->g.n_edges = (int32_t)te;
    f->g.in_start[f->g.n_atoms] = f->g.n_edges;
    goto done;

nomem:
    st = mp_error_set(MP_ERR_NOMEM, "out of memory featurizing %d molecules", (int)n);
fail:
    mp_features_free(f);
    f = NULL;
done:
    if (ts)
        for (int t = 0; t < nt; t++) {
            mp_buf_free(&ts[t].arena);
            mp_free(ts[t].order);
        }
    mp_free(ts);
    if (ctx)
        for (int t = 0; t < nt; t++)
            mp_rdk_ctx_free(ctx[t]);
    mp_free(ctx);
    mp_free(mi.na);
    mp_free(mi.nb);
    mp_free(mi.nm);
    mp_free(mi.nm2);
    mp_free(mi.thr);
    mp_free(mi.off);
    *out = f;
    return st;
}

void mp_features_morgan_dense(const mp_features *f, int32_t m, int counts, float *dst)
{
    memset(dst, 0, MP_MORGAN_BITS * sizeof(float));
    if (!f || !f->morgan_start || m < 0 || m >= f->g.n_mols)
        return;
    for (int32_t j = f->morgan_start[m]; j < f->morgan_start[m + 1]; j++)
        dst[f->morgan_bit[j]] = counts ? (float)f->morgan_count[j] : 1.0f;
}
