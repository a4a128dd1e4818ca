/*
 * featurize.h - molecules to numbers, exactly as Chemprop v1 computes them
 * (../shared/REFERENCE.md section 1).
 *
 * SMILES --(RDKit bridge: parse, sanitize, remove H, clear atom maps)-->
 *   graph store (one-hot atom/bond features kept as lists of hot slots, plus
 *   the mass scalar; directed edges; incoming-edge CSR per atom)
 *   + molecule vectors (Morgan bits/counts, RDKit 2D descriptors)
 *   + Bemis-Murcko scaffolds (only when asked: they cost as much as parsing).
 *
 * The store is what the models read: `featurize` and `models` meet only here.
 * No RDKit type appears in this header; rdkit_bridge.cpp is the one C++ file.
 */
#ifndef MP_FEATURIZE_H
#define MP_FEATURIZE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Feature layouts                                                        */
/* ===================================================================== */

typedef enum {
    MP_ATOM_V1 = 0,     /* 133: Chemprop v1 (default)                       */
    MP_ATOM_V2 = 1,     /*  72: Chemprop v2 default multi-hot featurizer    */
    MP_ATOM_ORGANIC = 2 /*  44: Chemprop v2 "organic" featurizer            */
} mp_atom_layout;

#define MP_BOND_FDIM     14
#define MP_ATOM_MAX_HOT  8    /* hot slots per atom: 6 one-hot blocks + aromatic (+1 spare) */
#define MP_BOND_MAX_HOT  4    /* bond type, conjugated, in ring, stereo                     */

/* Length of the atom vector, mass slot included (it is always the last). */
int         mp_atom_fdim(mp_atom_layout layout);
const char *mp_atom_layout_name(mp_atom_layout layout);       /* "v1", "v2", "organic" */
mp_status   mp_atom_layout_parse(const char *name, mp_atom_layout *out);

/* ===================================================================== */
/* The graph store                                                        */
/* ===================================================================== */

/*
 * All molecules of a dataset, concatenated.  Indices are global (int32: a
 * store is at most 2^31-1 atoms/edges; prediction works in chunks).
 *
 * Edges: bond k of the store gives edge 2k (begin -> end, begin < end) and
 * edge 2k+1 (end -> begin), so the reverse of edge e is e ^ 1.  Bonds of a
 * molecule are ordered as Chemprop v1 builds them: by (begin, end) with
 * begin < end.  in_edge lists, for each atom, its incoming edges in
 * ascending edge order.  An invalid molecule has no atoms and no edges.
 */
typedef struct {
    mp_atom_layout layout;
    int      atom_fdim;      /* mp_atom_fdim(layout)                          */
    int32_t  n_mols, n_atoms, n_edges;
    uint8_t *valid;          /* n_mols: 1 valid, 0 invalid                    */
    int32_t *mol_atom;       /* n_mols+1: atoms of molecule m = [mol_atom[m], mol_atom[m+1]) */
    int32_t *mol_edge;       /* n_mols+1: edges likewise                      */
    int16_t *atom_hot;       /* n_atoms x MP_ATOM_MAX_HOT: hot slots ascending, -1 padded */
    float   *atom_mass;      /* n_atoms: mass * 0.01, the value of slot atom_fdim-1 */
    int8_t  *bond_hot;       /* (n_edges/2) x MP_BOND_MAX_HOT, ascending, -1 padded */
    int32_t *edge_src;       /* n_edges: source atom                          */
    int32_t *edge_dst;       /* n_edges: target atom                          */
    int32_t *in_start;       /* n_atoms+1: incoming edges of atom v = in_edge[in_start[v] .. in_start[v+1]) */
    int32_t *in_edge;        /* n_edges                                       */
    /* Allocated sizes of the arrays above (mp_graphs_select reuses them). */
    int32_t  cap_mols, cap_atoms, cap_edges;
} mp_graphs;

/*
 * Copies the molecules mols[0..n) (in that order, repeats allowed) into a
 * store with re-based indices: the batch a model trains on.  `out` reuses its
 * buffers when they are large enough (pass a zeroed struct first; free it with
 * mp_graphs_free).  MP_ERR_ARG for an index out of range, MP_ERR_NOMEM (out is
 * then empty).
 */
mp_status mp_graphs_select(mp_graphs *out, const mp_graphs *g, const int32_t *mols, int32_t n);
void      mp_graphs_free(mp_graphs *g);

/*
 * Checks every structural invariant of a store: offsets start at 0, never
 * decrease and end at the totals; invalid molecules are empty; each edge stays
 * inside its molecule, edge e^1 reverses edge e and even edges run from the
 * lower atom index; in_edge lists, per atom, exactly its incoming edges in
 * ascending order; hot slots are in range, ascending, -1 padded.  MP_OK or
 * MP_ERR_FORMAT with a message naming the first violation.
 */
mp_status mp_graphs_check(const mp_graphs *g);

/* ===================================================================== */
/* Featurization                                                          */
/* ===================================================================== */

#define MP_MORGAN_BITS 2048

typedef struct {
    mp_atom_layout layout;   /* default MP_ATOM_V1                               */
    int morgan;              /* compute Morgan r=2 bits and counts               */
    int descriptors;         /* compute the RDKit 2D descriptor registry         */
    int scaffolds;           /* compute Bemis-Murcko scaffolds                   */
    int n_threads;           /* 0: mp_threads_get()                              */
} mp_featurize_opts;

typedef struct {
    mp_graphs g;
    /* Morgan fingerprint, radius 2, 2048 bits, no chirality; sparse per
     * molecule: the bits set, ascending, with their counts from the hashed
     * count fingerprint (the on-bits of the bit vector are exactly the bits
     * with count > 0).  NULL when not computed. */
    int32_t  *morgan_start;  /* n_mols+1                                         */
    uint16_t *morgan_bit;
    uint32_t *morgan_count;
    /* RDKit 2D descriptors (RDKit::Descriptors::Properties order), NaN for an
     * invalid molecule.  NULL when not computed. */
    int      n_desc;
    char   **desc_names;     /* n_desc                                           */
    double  *desc;           /* n_mols x n_desc                                  */
    /* Bemis-Murcko scaffold SMILES without chirality ("" for acyclic);
     * NULL array when not computed; NULL entry for an invalid molecule. */
    char   **scaffold;
    /* Why a molecule is invalid (RDKit's reason, or "empty SMILES", "no heavy
     * atoms"); NULL entry for a valid one. */
    char   **error;
} mp_features;

/*
 * Featurizes n SMILES in parallel (OpenMP over molecules).  The result is
 * identical for any thread count.  Invalid molecules are kept in place with
 * valid = 0 and error[i] set: this is not a failure.  Fails only on memory
 * (MP_ERR_NOMEM), bad arguments or a store beyond 2^31-1 atoms (MP_ERR_ARG);
 * *out is then NULL.  opts NULL means the v1 layout with Morgan only.
 * The caller frees *out with mp_features_free.
 */
mp_status mp_featurize(mp_features **out, const char *const *smiles, int32_t n,
                       const mp_featurize_opts *opts);
void      mp_features_free(mp_features *f);

/* Dense helpers for the FFN and for extra D-MPNN features. */
/* Morgan bits (0/1) or counts for molecule m into dst[MP_MORGAN_BITS]. */
void mp_features_morgan_dense(const mp_features *f, int32_t m, int counts, float *dst);

/* ===================================================================== */
/* Feature cache (.mpf) and reference dump                               */
/* ===================================================================== */

/* Writes everything in `f` to a binary cache: magic, format version, sizes,
 * arrays, CRC32; atomically (temp file + rename).  MP_ERR_IO on failure, with
 * nothing left at `path`.  The format is described in cache.c. */
mp_status mp_features_save(const mp_features *f, const char *path);
/* Loads a cache, checking magic, version, every size and the checksum and
 * then every invariant of the store (mp_graphs_check, Morgan offsets, strings
 * agreeing with validity); any file that does not add up is refused with a
 * message naming it: MP_ERR_FORMAT (bad magic or version, truncated, sizes or
 * structure inconsistent) or MP_ERR_CHECKSUM; MP_ERR_IO if unreadable.  *out
 * is NULL on failure; free it with mp_features_free. */
mp_status mp_features_load(mp_features **out, const char *path);

/*
 * Writes molecules.tsv, atoms.tsv, bonds.tsv, morgan.tsv, descriptors.tsv into
 * `dir` (created with its parents if absent) in the layout of
 * ../shared/fixtures/chemprop_v1/README.md; gzipped (".tsv.gz") when gz != 0.
 * smiles[i] is the input string of molecule i.  morgan/descriptors.tsv are
 * left out when not computed, the scaffold column is empty when scaffolds
 * were not computed.  Bonds are listed in the store's (Chemprop v1's) order;
 * the fixture lists them in RDKit's.  Floats are printed in their shortest
 * round-trip form.  All files appear only when all were written (MP_ERR_IO).
 */
mp_status mp_features_dump(const mp_features *f, const char *const *smiles, const char *dir, int gz);

/* ===================================================================== */
/* The RDKit bridge (rdkit_bridge.cpp), for the rest of the C code        */
/* ===================================================================== */

/* Canonical SMILES of a SMILES as RDKit writes it (for messages and tests),
 * parsed as mp_featurize parses it; NULL if that molecule is invalid.
 * Caller frees with mp_free. */
char *mp_rdkit_canonical(const char *smiles);
/* RDKit's version string, e.g. "2022.09.3". */
const char *mp_rdkit_version(void);

#ifdef __cplusplus
}
#endif
#endif /* MP_FEATURIZE_H */
