/*
 * featurize.h - molecules to numbers, exactly as Chemprop v1 computes them
 * (../shared/REFERENCE.md section 1).
 *
 * SMILES --(RDKit bridge: parse, sanitize, remove H, clear atom maps)-->
 *   graph store (one-hot atom/bond features kept as lists of hot slots, plus
 *   the mass scalar; directed edges; incoming-edge CSR per atom)
 *   + molecule vectors (Morgan bits/counts, RDKit 2D descriptors; Chemprop
 *     v1's rdkit_2d and rdkit_2d_normalized, Chemprop v2's morgan_binary,
 *     morgan_count, rdkit_2d and charge: see "Molecule vectors" below)
 *   + Bemis-Murcko scaffolds (only when asked: they cost as much as parsing).
 *
 * The graph store itself (mp_graphs) is graph/graph.h: `featurize` produces it,
 * `models` consume it, and the two meet only there.
 * No RDKit type appears in this header; RDKit lives in the C++ files of
 * src/featurize (rdkit_bridge.cpp, desc2d*.cpp, normalize.cpp).
 */
#ifndef MP_FEATURIZE_H
#define MP_FEATURIZE_H

#include "core/core.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Feature layouts                                                        */
/* ===================================================================== */


/* Length of the atom vector, mass slot included (it is always the last). */
int         mp_atom_fdim(mp_atom_layout layout);
const char *mp_atom_layout_name(mp_atom_layout layout);       /* "v1", "v2", "organic" */
mp_status   mp_atom_layout_parse(const char *name, mp_atom_layout *out);

/* ===================================================================== */
/* Featurization                                                          */
/* ===================================================================== */

#define MP_MORGAN_BITS 2048
#define MP_RDKIT2D_DIM 200      /* v1 rdkit_2d and rdkit_2d_normalized         */
#define MP_V2_RDKIT2D_DIM 208   /* v2 rdkit_2d: RDKit 2022.09's descList        */

/* Chemprop's molecule vectors beyond molprop's own (mp_featurize_opts.sets,
 * a bit mask). */
enum {
    MP_SET_RDKIT2D = 1u << 0,       /* v1 rdkit_2d: descriptastorus' 200 RDKit 2D
                                     * descriptors, raw                           */
    MP_SET_RDKIT2D_NORM = 1u << 1,  /* v1 rdkit_2d_normalized: those 200 through
                                     * descriptastorus' fitted CDFs               */
    MP_SET_V2_RDKIT2D = 1u << 2,    /* v2 rdkit_2d: RDKit 2022.09's descList (208) */
    MP_SET_V2_MORGAN = 1u << 3,     /* v2 morgan_binary / morgan_count: Morgan
                                     * generator r=2, 2048, with chirality        */
    MP_SET_V2_CHARGE = 1u << 4,     /* v2 charge: the molecule's formal charge    */
    MP_SET_ALL = (1u << 5) - 1
};

typedef struct {
    mp_atom_layout layout;   /* default MP_ATOM_V1                               */
    int morgan;              /* compute Morgan r=2 bits and counts               */
    int descriptors;         /* compute the RDKit 2D descriptor registry (the 43
                              * values of RDKit's C++ Properties: "rdkit2d-core") */
    int scaffolds;           /* compute Bemis-Murcko scaffolds                   */
    int n_threads;           /* 0: mp_threads_get()                              */
    unsigned sets;           /* MP_SET_* mask                                    */
} mp_featurize_opts;

/* The dense per-molecule matrices of mp_features.mat. */
typedef enum {
    MP_MAT_RDKIT2D,          /* MP_SET_RDKIT2D: 200 columns                      */
    MP_MAT_RDKIT2D_NORM,     /* MP_SET_RDKIT2D_NORM: 200                         */
    MP_MAT_V2_RDKIT2D,       /* MP_SET_V2_RDKIT2D: 208                           */
    MP_MAT_V2_CHARGE,        /* MP_SET_V2_CHARGE: 1 ("charge")                    */
    MP_N_MATS
} mp_mat_id;

/* A named matrix, row m for molecule m.  n_cols = 0 (and NULL arrays) when
 * not computed.  Values are the generator's output: NaN where RDKit gives
 * NaN (the partial-charge extremes of some molecules), NaN for a whole row
 * when the molecule is invalid (or, for the v1 sets, its canonical SMILES
 * does not parse again); Chemprop then reads NaN as 0
 * (mp_features_vec_row does). */
typedef struct {
    int32_t n_cols;
    char  **names;           /* n_cols                                           */
    double *values;          /* n_mols x n_cols                                  */
} mp_molmat;

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
    /* Chemprop's descriptor sets and charge (MP_SET_*), by mp_mat_id. */
    mp_molmat mat[MP_N_MATS];
    /* Chemprop v2's Morgan fingerprint (MP_SET_V2_MORGAN): RDKit's Morgan
     * generator, radius 2, 2048 bits, chirality on; sparse as morgan_*: the
     * bits with a nonzero folded count, ascending, and the counts (the bits
     * of morgan_binary are exactly these).  NULL when not computed. */
    int32_t  *morgan2_start; /* n_mols+1                                         */
    uint16_t *morgan2_bit;
    uint32_t *morgan2_count;
    /* Bemis-Murcko scaffold SMILES without chirality ("" for acyclic);
     * NULL array when not computed; NULL entry for an invalid molecule. */
    char   **scaffold;
    /* Why a molecule is invalid (RDKit's reason, or "empty SMILES", "no heavy
     * atoms"); NULL entry for a valid one. */
    char   **error;
    /* Values supplied by the user for each molecule (--features-path), row m
     * for molecule m: a view the caller sets and keeps alive (never computed,
     * freed or cached here); NULL / 0 when none. */
    const double *file_values;   /* n_mols x file_cols                         */
    int32_t       file_cols;
} mp_features;

/*
 * Featurizes n SMILES in parallel (OpenMP over molecules).  The result is
 * identical for any thread count.  Invalid molecules are kept in place with
 * valid = 0 and error[i] set: this is not a failure.  Fails only on memory
 * (MP_ERR_NOMEM), bad arguments or a store beyond 2^31-1 atoms (MP_ERR_ARG),
 * or, when opts->sets asks for RDKit 2D descriptors, when RDKit's
 * FragmentDescriptors.csv cannot be read (MP_ERR_IO: Debian's rdkit-data
 * package ships it); *out is then NULL.  opts NULL means the v1 layout with
 * Morgan only.
 * The caller frees *out with mp_features_free.
 */
mp_status mp_featurize(mp_features **out, const char *const *smiles, int32_t n,
                       const mp_featurize_opts *opts);
void      mp_features_free(mp_features *f);

/* Dense helpers for the FFN and for extra D-MPNN features. */
/* Morgan bits (0/1) or counts for molecule m into dst[MP_MORGAN_BITS]. */
void mp_features_morgan_dense(const mp_features *f, int32_t m, int counts, float *dst);

/* ===================================================================== */
/* Molecule vectors by name                                               */
/* ===================================================================== */

/* Every molecule-level vector molprop computes, by the name a user gives. */
typedef enum {
    MP_VEC_MORGAN,            /* "morgan": v1 Morgan bits (0/1), 2048          */
    MP_VEC_MORGAN_COUNT,      /* "morgan-count": v1 hashed counts, 2048       */
    MP_VEC_RDKIT2D_CORE,      /* "rdkit2d-core": RDKit's C++ registry (43)    */
    MP_VEC_RDKIT2D,           /* "rdkit2d": Chemprop v1 rdkit_2d (200)        */
    MP_VEC_RDKIT2D_NORM,      /* "rdkit2d-normalized": rdkit_2d_normalized    */
    MP_VEC_V2_MORGAN,         /* "v2-morgan": v2 morgan_binary, 2048          */
    MP_VEC_V2_MORGAN_COUNT,   /* "v2-morgan-count": v2 morgan_count, 2048     */
    MP_VEC_V2_RDKIT2D,        /* "v2-rdkit2d": v2 rdkit_2d (208)              */
    MP_VEC_V2_CHARGE,         /* "v2-charge": v2 charge (1)                   */
    MP_N_VECS
} mp_vec;

const char *mp_vec_name(mp_vec v);                        /* NULL if unknown */
mp_status   mp_vec_parse(const char *name, mp_vec *out);  /* MP_ERR_ARG, listing the names */
/* Adds to *o what featurization must compute for vector v. */
void        mp_vec_request(mp_vec v, mp_featurize_opts *o);
/* Length of vector v in f, 0 when f does not hold it. */
int         mp_features_vec_dim(const mp_features *f, mp_vec v);
/* Vector v of molecule m into dst[mp_features_vec_dim(f, v)], as Chemprop's
 * MoleculeDatapoint holds it: NaN read as 0 (infinities stay).  An invalid
 * molecule's row is NaN throughout.  In double, as Chemprop scales them: raw
 * Ipc reaches 1e41, beyond float. */
void        mp_features_vec_row(const mp_features *f, mp_vec v, int32_t m, double *dst);

/* ===================================================================== */
/* Feature cache (.mpf) and reference dump                               */
/* ===================================================================== */

/* Writes everything in `f` to a binary cache: magic, format version, sizes,
 * arrays, CRC32; atomically (temp file + rename).  MP_ERR_IO on failure, with
 * nothing left at `path`.  The format is described in cache.c (version 2;
 * version 1 caches, without the MP_SET_* data, still load). */
mp_status mp_features_save(const mp_features *f, const char *path);
/* Loads a cache, checking magic, version, every size and the checksum and
 * then every invariant of the store (mp_graphs_check, Morgan offsets, strings
 * agreeing with validity); any file that does not add up is refused with a
 * message naming it: MP_ERR_FORMAT (bad magic or version, truncated, sizes or
 * structure inconsistent) or MP_ERR_CHECKSUM; MP_ERR_IO if unreadable.  *out
 * is NULL on failure; free it with mp_features_free. */
mp_status mp_features_load(mp_features **out, const char *path);

/*
 * Writes molecules.tsv, atoms.tsv, bonds.tsv, morgan.tsv, descriptors.tsv,
 * rdkit2d.tsv, rdkit2d_normalized.tsv into `dir` (created with its parents if
 * absent) in the layout of ../shared/fixtures/chemprop_v1/README.md; gzipped
 * (".tsv.gz") when gz != 0.  smiles[i] is the input string of molecule i.
 * morgan/descriptors/rdkit2d/rdkit2d_normalized.tsv are left out when not
 * computed, the scaffold column is empty when scaffolds were not computed.
 * rdkit2d*.tsv have a row per valid molecule (mol, then the 200 names) with
 * NaN written as 0.0, as the fixtures hold Chemprop's features.  Bonds are listed in the store's (Chemprop v1's) order;
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
