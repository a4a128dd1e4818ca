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
 * The graph store itself (mp_graphs) is graph/graph.h: `featurize` produces it,
 * `models` consume it, and the two meet only there.
 * No RDKit type appears in this header; rdkit_bridge.cpp is the one C++ file.
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
