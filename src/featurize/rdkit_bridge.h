/*
 * rdkit_bridge.h - the C face of rdkit_bridge.cpp, internal to src/featurize.
 *
 * The bridge parses one SMILES the way Chemprop v1 does and copies what the
 * featurizer needs out of the RDKit molecule into a per-thread scratch struct
 * of plain numbers (and, on request, Morgan counts, descriptors and the
 * Murcko scaffold).  The layouts (which slot is hot) are encoded in C by
 * featurize.c; nothing here knows about them.  No RDKit type crosses this line.
 */
#ifndef MP_RDKIT_BRIDGE_H
#define MP_RDKIT_BRIDGE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hybridization codes: RDKit 2022.09's Atom::HybridizationType numbering
 * (the bridge static_asserts that they agree). */
enum {
    MP_HYB_UNSPECIFIED = 0,
    MP_HYB_S = 1,
    MP_HYB_SP = 2,
    MP_HYB_SP2 = 3,
    MP_HYB_SP3 = 4,
    MP_HYB_SP2D = 5,
    MP_HYB_SP3D = 6,
    MP_HYB_SP3D2 = 7,
    MP_HYB_OTHER = 8
};

/* Bond type codes (ours; every other RDKit bond type, e.g. DATIVE, is OTHER). */
enum {
    MP_BT_OTHER = 0,
    MP_BT_SINGLE = 1,
    MP_BT_DOUBLE = 2,
    MP_BT_TRIPLE = 3,
    MP_BT_AROMATIC = 4
};

/* What to compute beyond the graph. */
enum {
    MP_RDK_MORGAN = 1,     /* hashed Morgan count fingerprint, r=2, 2048 */
    MP_RDK_DESC = 2,       /* the descriptor registry                    */
    MP_RDK_SCAFFOLD = 4,   /* Bemis-Murcko scaffold SMILES, no chirality */
    MP_RDK_RDKIT2D = 8,    /* descriptastorus' 200, on the molecule read
                            * again from its canonical SMILES (desc2d.h) */
    MP_RDK_V2DESC = 16,    /* RDKit's descList (208), on the molecule    */
    MP_RDK_V2MORGAN = 32,  /* Morgan generator r=2, 2048, chirality:
                            * folded counts (Chemprop v2)                */
    MP_RDK_CHARGE = 64     /* the molecule's formal charge               */
};

/*
 * One parsed molecule.  Arrays belong to the context and are reused (grown,
 * never shrunk) from molecule to molecule; they hold n_atoms / n_bonds /
 * n_morgan entries.  Atom values are RDKit's own: chiral_tag is
 * int(GetChiralTag()), bond_stereo int(GetStereo()).  Bonds are in RDKit's
 * bond order with begin/end as RDKit has them (not sorted).
 */
typedef struct {
    int32_t  n_atoms, n_bonds, n_morgan;
    int32_t *atomic_num, *total_degree, *formal_charge, *chiral_tag, *total_hs,
            *hybridization;
    uint8_t *aromatic;
    double  *mass;                 /* GetMass(): average, or the isotope's      */
    int32_t *bond_begin, *bond_end;
    uint8_t *bond_type, *bond_conjugated, *bond_in_ring, *bond_stereo;
    uint16_t *morgan_bit;          /* ascending                                  */
    uint32_t *morgan_count;
    double  *desc;                 /* mp_rdk_n_desc() values                     */
    /* MP_RDK_RDKIT2D: the 200 raw values and descriptastorus' failure flags
     * (a descriptor whose RDKit call threw: 0.0 raw, 0.0 normalized); all
     * NaN, flags 0, when the canonical SMILES does not parse again. */
    double  *rdkit2d;
    uint8_t *rdkit2d_failed;
    double  *v2desc;               /* MP_RDK_V2DESC: 208, descList order       */
    int32_t  n_morgan2;            /* MP_RDK_V2MORGAN                           */
    uint16_t *morgan2_bit;         /* ascending                                 */
    uint32_t *morgan2_count;
    int32_t  charge;               /* MP_RDK_CHARGE                             */
    const char *scaffold;          /* valid until the next call                  */
    const char *error;             /* why invalid; valid until the next call    */
} mp_rdk_mol;

typedef struct mp_rdk_ctx mp_rdk_ctx;

/* A per-thread context (scratch buffers); NULL when out of memory. */
mp_rdk_ctx *mp_rdk_ctx_new(void);
void        mp_rdk_ctx_free(mp_rdk_ctx *ctx);

/*
 * Parses `smiles` (sanitized, hydrogens removed, atom maps cleared) and fills
 * *out (owned by ctx).  Returns 1 for a valid molecule, 0 for an invalid one
 * (out->error says why: RDKit's parse or sanitization message, "empty SMILES",
 * "no heavy atoms"), -1 when out of memory.  Thread-safe with one ctx per thread.
 */
int mp_rdk_featurize(mp_rdk_ctx *ctx, const char *smiles, int what, const mp_rdk_mol **out);

/* Nonzero: RDKit's own functions throughout, where by default the bridge
 * takes a shorter way to the same result: every SMILES through RDKit's whole
 * SmilesToMol, stereo perception included (by default those without stereo
 * marks skip it: 30-40% faster), and scaffolds through RDKit's
 * MurckoDecompose (rdkit_bridge.cpp stereo_free, murcko_core).  For the
 * tests that compare the two and for benchmarks; process-wide, set it
 * before featurizing. */
void mp_rdk_set_reference(int on);

/* Checks, before a run asks for MP_RDK_RDKIT2D or MP_RDK_V2DESC, that the
 * descriptor engine can start: RDKit's FragmentDescriptors.csv is readable
 * and its SMARTS parse, the embedded normalization table is sound.  Sets the
 * error (MP_ERR_IO, MP_ERR_FORMAT) otherwise. */
mp_status mp_rdk_desc2d_ready(void);

/* Reference for tests: RDKit's own Morgan generator fingerprint (r=2, 2048,
 * chirality, 64-bit hashes, as Chemprop v2's GetMorganGenerator) of a SMILES
 * parsed as above: bits[2048] from getFingerprint as 0/1 and counts[2048]
 * from getCountFingerprint.  Returns 1, or 0 when the SMILES is invalid. */
int mp_rdk_morgan2_reference(const char *smiles, uint8_t *bits, uint32_t *counts);

/* Reference for tests: the descriptors molprop computes by its own faster
 * routes (mp_d2_reference: which[j] = 1), of n SMILES parsed as above (no
 * canonical round trip), molprop's way into fast[i * MP_D2_ALL + j] and
 * RDKit's own functions' way into rdkit[i * MP_D2_ALL + j] (engine slots,
 * desc2d.h); valid[i] says which SMILES parsed.  Returns 0, or -1 when the
 * engine cannot start or memory runs out (error set). */
int mp_rdk_fast_reference(const char *const *smiles, int n, double *fast, double *rdkit,
                          uint8_t *which, uint8_t *valid);

/* The descriptor registry: count and names (RDKit::Descriptors::Properties). */
int         mp_rdk_n_desc(void);
const char *mp_rdk_desc_name(int i);

/* Reference for tests: RDKit's own hashed Morgan count fingerprint (r=2,
 * 2048) of a SMILES parsed as above, into counts[2048].  Returns 1, or 0
 * when the SMILES is invalid. */
int mp_rdk_morgan_reference(const char *smiles, uint32_t *counts);

/* Reference for tests: RDKit's own Morgan bit vector (r=2, 2048, no chirality)
 * of a SMILES parsed as above, into bits[2048] as 0/1.  Returns 1, or 0 when
 * the SMILES is invalid. */
int mp_rdk_morgan_bitvect(const char *smiles, uint8_t *bits);

#ifdef __cplusplus
}
#endif
#endif /* MP_RDKIT_BRIDGE_H */
