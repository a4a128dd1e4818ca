/*
 * desc2d.h - the RDKit 2D descriptor engine, internal to src/featurize.
 *
 * Computes, for one RDKit molecule, the 200 descriptors of descriptastorus'
 * RDKit2D (Chemprop v1's rdkit_2d, in its order and with its names) and the
 * 8 BCUT2D values that RDKit 2022.09's Descriptors._descList adds (Chemprop
 * v2's rdkit_2d is those 208 in descList order).  The values are those of
 * RDKit's Python functions; where RDKit implements a descriptor in Python
 * only, desc2d_graph.cpp and desc2d_smarts.cpp compute it from its published
 * definition on top of RDKit's C++ primitives.
 *
 *   desc2d.cpp         names, the per-thread context, the driver, the
 *                      descriptors RDKit computes in C++ and the small ones
 *   desc2d_graph.cpp   BalabanJ, BertzCT, Chi0, Chi1, Ipc, the EState
 *                      indices and the EState/VSA bins
 *   desc2d_paths.cpp   Chi2-4 n/v and Kappa2-3 (RDKit's, computed from one
 *                      enumeration of paths instead of eight)
 *   desc2d_smarts.cpp  the 85 fr_* fragment counts (SMARTS read from RDKit's
 *                      FragmentDescriptors.csv) and QED
 *   normalize.cpp      descriptastorus' CDF normalization (Boost.Math)
 *
 * The molecule crosses this header as an opaque mp_d2_mol (it is an
 * RDKit::ROMol): no RDKit or C++ type appears here.
 */
#ifndef MP_DESC2D_H
#define MP_DESC2D_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_D2_V1 200   /* descriptastorus' RDKit2D: values 0..199 of the engine */
#define MP_D2_ALL 208  /* + BCUT2D_*: values 200..207                          */
#define MP_D2_FR_FIRST 114
#define MP_D2_N_FR 85

/* Engine index of every descriptor that is not an fr_* (those are the block
 * MP_D2_FR_FIRST .. +84, in descriptastorus' order). */
enum {
    D_BalabanJ = 0, D_BertzCT, D_Chi0, D_Chi0n, D_Chi0v, D_Chi1, D_Chi1n, D_Chi1v,
    D_Chi2n, D_Chi2v, D_Chi3n, D_Chi3v, D_Chi4n, D_Chi4v,
    D_EState_VSA1, D_EState_VSA10, D_EState_VSA11, D_EState_VSA2, D_EState_VSA3,
    D_EState_VSA4, D_EState_VSA5, D_EState_VSA6, D_EState_VSA7, D_EState_VSA8,
    D_EState_VSA9, D_ExactMolWt, D_FpDensityMorgan1, D_FpDensityMorgan2,
    D_FpDensityMorgan3, D_FractionCSP3, D_HallKierAlpha, D_HeavyAtomCount,
    D_HeavyAtomMolWt, D_Ipc, D_Kappa1, D_Kappa2, D_Kappa3, D_LabuteASA,
    D_MaxAbsEStateIndex, D_MaxAbsPartialCharge, D_MaxEStateIndex, D_MaxPartialCharge,
    D_MinAbsEStateIndex, D_MinAbsPartialCharge, D_MinEStateIndex, D_MinPartialCharge,
    D_MolLogP, D_MolMR, D_MolWt, D_NHOHCount, D_NOCount, D_NumAliphaticCarbocycles,
    D_NumAliphaticHeterocycles, D_NumAliphaticRings, D_NumAromaticCarbocycles,
    D_NumAromaticHeterocycles, D_NumAromaticRings, D_NumHAcceptors, D_NumHDonors,
    D_NumHeteroatoms, D_NumRadicalElectrons, D_NumRotatableBonds,
    D_NumSaturatedCarbocycles, D_NumSaturatedHeterocycles, D_NumSaturatedRings,
    D_NumValenceElectrons,
    D_PEOE_VSA1, D_PEOE_VSA10, D_PEOE_VSA11, D_PEOE_VSA12, D_PEOE_VSA13, D_PEOE_VSA14,
    D_PEOE_VSA2, D_PEOE_VSA3, D_PEOE_VSA4, D_PEOE_VSA5, D_PEOE_VSA6, D_PEOE_VSA7,
    D_PEOE_VSA8, D_PEOE_VSA9, D_RingCount,
    D_SMR_VSA1, D_SMR_VSA10, D_SMR_VSA2, D_SMR_VSA3, D_SMR_VSA4, D_SMR_VSA5,
    D_SMR_VSA6, D_SMR_VSA7, D_SMR_VSA8, D_SMR_VSA9,
    D_SlogP_VSA1, D_SlogP_VSA10, D_SlogP_VSA11, D_SlogP_VSA12, D_SlogP_VSA2,
    D_SlogP_VSA3, D_SlogP_VSA4, D_SlogP_VSA5, D_SlogP_VSA6, D_SlogP_VSA7,
    D_SlogP_VSA8, D_SlogP_VSA9, D_TPSA,
    D_VSA_EState1, D_VSA_EState10, D_VSA_EState2, D_VSA_EState3, D_VSA_EState4,
    D_VSA_EState5, D_VSA_EState6, D_VSA_EState7, D_VSA_EState8, D_VSA_EState9,
    D_qed = 199,
    D_BCUT2D_MWHI = 200, D_BCUT2D_MWLOW, D_BCUT2D_CHGHI, D_BCUT2D_CHGLO,
    D_BCUT2D_LOGPHI, D_BCUT2D_LOGPLOW, D_BCUT2D_MRHI, D_BCUT2D_MRLOW
};

typedef struct mp_d2_mol mp_d2_mol;   /* an RDKit::ROMol */
typedef struct mp_d2_ctx mp_d2_ctx;   /* per-thread scratch and query molecules */

/* Name of engine value j (0..207); NULL outside. */
const char *mp_d2_name(int j);
/* Engine index of descList position k (0..207), Chemprop v2's rdkit_2d order. */
int mp_d2_v2_index(int k);

/*
 * A per-thread context: the fragment and QED query molecules (each thread
 * its own, so that RDKit's recursive-SMARTS locks are never contended) and
 * reused scratch.  Reads the fr_* SMARTS from RDKit's FragmentDescriptors.csv
 * ($RDDATADIR, else $RDBASE/Data, else /usr/share/RDKit/Data: Debian's
 * rdkit-data).  NULL with the error set (MP_ERR_IO: the file is missing or
 * does not hold descriptastorus' 85 fragments; MP_ERR_NOMEM); *out is then
 * NULL.
 */
mp_status mp_d2_ctx_new(mp_d2_ctx **out);
void      mp_d2_ctx_free(mp_d2_ctx *ctx);

/*
 * Computes the engine values of `mol` into v[0..MP_D2_V1) (and, with bcut,
 * v[MP_D2_V1..MP_D2_ALL)).  A descriptor whose RDKit call throws gets 0.0 and
 * failed[j] = 1 (descriptastorus' rule: a failed function gives 0.0 raw and
 * 0.0 normalized); otherwise failed[j] = 0.  The BCUT2D values are NaN when
 * RDKit's BCUT2D throws, as RDKit's Python wrapper returns.  Returns 0, or
 * -1 when out of memory.
 */
int mp_d2_compute(mp_d2_ctx *ctx, mp_d2_mol *mol, int bcut, double *v, uint8_t *failed);

/*
 * For tests: the descriptors molprop computes by a faster route than RDKit's
 * Python calls (Chi2-4 n/v and Kappa2-3 from one path enumeration; HBA, HBD
 * and rotatable bonds with the context's own queries; FpDensityMorgan from
 * one fingerprint; MolLogP, MolMR, SlogP_VSA and SMR_VSA from one Crippen
 * typing), computed RDKit's way: which[j] = 1 and v[j] set for each of them.
 */
void mp_d2_reference(const mp_d2_mol *mol, double *v, uint8_t *which);

/*
 * The identifiers of RDKit's unfolded Morgan count fingerprint of mol up to
 * `radius` (GetMorganFingerprint's defaults: bond types, no chirality), each
 * with the first layer (0..radius) that sets it, every one the ECFP
 * iteration counts (an identifier set by several environments appears once
 * per environment).  *ids points at them in this thread's scratch, valid
 * until the thread's next call; returns their number.  Throws std::bad_alloc
 * (C++ callers only) when out of memory.  The count fingerprint of the
 * bridge (rdkit_bridge.cpp) folds them, FpDensityMorgan1-3 count them.
 */
typedef struct {
    uint32_t id, layer;
} mp_d2_morgan_id;
size_t mp_d2_morgan_ids(const mp_d2_mol *mol, unsigned radius, const mp_d2_morgan_id **ids);

/* ---- the parts, one per file (called by mp_d2_compute) ---- */

typedef struct mp_d2_graph_ws mp_d2_graph_ws;
mp_d2_graph_ws *mp_d2_graph_ws_new(void);
void mp_d2_graph_ws_free(mp_d2_graph_ws *w);
/* BalabanJ, BertzCT, Chi0, Chi1, Ipc. */
void mp_d2_graph(mp_d2_graph_ws *w, const mp_d2_mol *mol, double *v);
/* The EState indices binned by the Labute contributions vsa[0..n_atoms):
 * Max/Min(Abs)EStateIndex, EState_VSA1..11, VSA_EState1..10. */
void mp_d2_estate(mp_d2_graph_ws *w, const mp_d2_mol *mol, const double *vsa, double *v);
/* Topological distance matrix (n x n, 1e8 between fragments, as RDKit's
 * getDistanceMat) into w's scratch; returns it. */
const double *mp_d2_topo_dist(mp_d2_graph_ws *w, const mp_d2_mol *mol);

/* Chi2n-4n, Chi2v-4v, Kappa2, Kappa3 from one path enumeration
 * (desc2d_paths.cpp); mp_d2_paths_rdkit: the same eight from RDKit's own
 * calcChi* / calcKappa*, for tests. */
void mp_d2_paths(const mp_d2_mol *mol, double *v);
void mp_d2_paths_rdkit(const mp_d2_mol *mol, double *v);

typedef struct mp_d2_smarts mp_d2_smarts;
/* The query molecules, parsed once per context; the error set on failure. */
mp_status mp_d2_smarts_new(mp_d2_smarts **out);
void mp_d2_smarts_free(mp_d2_smarts *s);
/* NumHAcceptors, NumHDonors, NumRotatableBonds: RDKit's patterns, matched
 * with the context's own query molecules. */
void mp_d2_lipinski(mp_d2_smarts *s, const mp_d2_mol *mol, double *v);
/* The fr_* counts into v[MP_D2_FR_FIRST ..]. */
void mp_d2_fragments(mp_d2_smarts *s, const mp_d2_mol *mol, double *v);
/* QED from the already computed MolWt, MolLogP, NumHDonors, TPSA and
 * NumRotatableBonds in v, into v[D_qed]. */
void mp_d2_qed(mp_d2_smarts *s, const mp_d2_mol *mol, double *v);
/* Turns the pattern screen off (0) or on (1, the default) for contexts made
 * from now on; for tests. */
void mp_d2_set_screen(int on);

/* ---- normalization (normalize.cpp) ---- */

/* Loads the fitted table (data/rdkit2d_normalization.tsv, embedded at build
 * time) once and checks it against the engine's names; MP_ERR_FORMAT if it
 * does not add up.  Thread-safe. */
mp_status mp_d2_norm_init(void);
/* descriptastorus' normalized value of descriptor j (0..199) for raw x:
 * clip(F(clip(x, min, max)), 0, 1), NaN for NaN.  mp_d2_norm_init first. */
double mp_d2_norm_cdf(int j, double x);
/* The distribution family of descriptor j ("nct", ...) and its parameter
 * count (shapes, loc, scale); for tests. */
const char *mp_d2_norm_family(int j, int *n_params);

#ifdef __cplusplus
}
#endif
#endif /* MP_DESC2D_H */
