/*
 * limits.h - how large a molecule molprop hands to RDKit (docs/limits.md).
 * RDKit's legacy stereo perception (run by every SMILES parse) ranks atoms
 * in time that grows about as the cube of the atoms: a 1,000-atom chain
 * parses in ~2 s, 2,000 atoms in ~18 s, 4,000 in ~2.5 min, and a SMILES of
 * 100,000 atoms would take days and gigabytes.  So a SMILES beyond these
 * limits is an invalid molecule with a message saying why, like any other
 * (it keeps its row; no call fails).  The largest molecule of the 19
 * benchmark sets (sider) has about 500 atoms in 1,340 characters.
 */
#ifndef MP_FEATURIZE_LIMITS_H
#define MP_FEATURIZE_LIMITS_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_SMILES_MAX_CHARS 20000   /* characters of one SMILES           */
#define MP_SMILES_MAX_ATOMS 1000    /* atoms written in it (an estimate,   *
                                     * counted before RDKit: each bracket  *
                                     * atom, each organic-subset symbol    *
                                     * outside brackets, each '*')         */

/* The atoms written in SMILES s, as counted for MP_SMILES_MAX_ATOMS. */
size_t mp_smiles_count_atoms(const char *s);

/* 0 when s is within the limits; otherwise 1 with why ("SMILES of 25000
 * characters: more than the limit of 20000") written to why[cap]. */
int mp_smiles_oversized(const char *s, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* MP_FEATURIZE_LIMITS_H */
