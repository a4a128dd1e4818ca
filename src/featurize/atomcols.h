/*
 * atomcols.h - user-supplied per-atom and per-bond columns (Chemprop v1's
 * --atom_descriptors_path and --bond_features_path), read from a file into a
 * graph store's atom_x / bond_x (graph.h).  The step between featurization
 * (which gives the atoms and bonds) and training or prediction (which reads
 * the columns beside the one-hot features).
 *
 * Formats:
 *   .npz  Chemprop v1's: one 2-D array per input row, in the archive's order
 *         (np.savez(path, *arrays): arr_0, arr_1, ...), rows = the
 *         molecule's atoms in RDKit's order, or its bonds in RDKit's bond
 *         order; float64, float32, int64 or int32, little-endian, C or
 *         Fortran order; stored or deflated (np.savez_compressed).
 *   .csv  a header row, then one row per atom (bond): the first column the
 *         0-based index of the molecule's input row, the others the values;
 *         a molecule's rows together, molecules in input order.
 * A molecule whose SMILES was invalid (no atoms in the store) takes no rows
 * in a CSV; its .npz array is not read.
 */
#ifndef MP_ATOMCOLS_H
#define MP_ATOMCOLS_H

#include "core/core.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Reads `path` into g->atom_x (bonds = 0) or g->bond_x (bonds = 1), sizing
 * it by the file's width (mp_graphs_set_extra; the other block stays).  g is
 * the store of the whole input, molecule i = input row i; bonds need
 * g->bond_rdkit (a store featurized from SMILES, not read from a cache).
 * smiles (may be NULL) names molecules in messages.  Every disagreement is
 * MP_ERR_FORMAT naming the file and the molecule (and CSV line): a missing
 * file (MP_ERR_IO), another count of molecules than input rows, a molecule
 * with another count of rows than atoms (bonds), widths that differ between
 * molecules, a NaN or infinite value, a cell that is not a number, a dtype
 * or shape the format does not allow.  On failure the block is removed.
 */
mp_status mp_graphs_read_columns(mp_graphs *g, const char *path, int bonds,
                                 const char *const *smiles);

#ifdef __cplusplus
}
#endif
#endif /* MP_ATOMCOLS_H */
