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
 * A columns file in memory, not yet matched to molecules: molecule i's rows
 * are values[start[i] .. start[i+1]) * width[i] (rows in RDKit's order).
 * line[r] is row r's line in a CSV (0 for an .npz).
 */
typedef struct {
    char    *path;
    int32_t  n_mols;
    int64_t *start;      /* n_mols + 1: offsets into values (floats)          */
    int32_t *n_rows;     /* n_mols                                            */
    int32_t *width;      /* n_mols                                            */
    float   *values;
    int32_t *line;       /* per row of the file (CSV), or NULL                */
    int64_t *row0;       /* n_mols: the molecule's first row (for line)       */
} mp_colfile;

/*
 * Reads `path` (.npz or .csv, see above) for n_mols input rows (-1: not
 * known yet, as when prediction streams its input; the caller checks the
 * count at the end: an .npz must hold one array per input row, a CSV's
 * molecules after its last row have no rows).  Errors
 * that need no molecule name the file (and the CSV line): a missing file
 * (MP_ERR_IO), not an archive, a damaged member, a dtype or shape the
 * format does not allow, another count of molecules than n_mols, a cell
 * that is not a number.  Free with mp_colfile_free.
 */
mp_status mp_colfile_read(mp_colfile *cf, const char *path, int32_t n_mols);
void      mp_colfile_free(mp_colfile *cf);

/*
 * Copies the file's molecules first .. first + g->n_mols - 1 into
 * g->atom_x (bonds = 0) or g->bond_x (bonds = 1) of the store g (molecule i
 * of g = file molecule first + i: a chunk of the input), sizing the block
 * by the width (mp_graphs_set_extra; the other block stays).  Bonds need
 * g->bond_rdkit (a store featurized from SMILES, not read from a cache).
 * smiles[i] (may be NULL) names g's molecule i in messages.  MP_ERR_FORMAT
 * naming the file and molecule (and CSV line): a molecule with another
 * count of rows than atoms (bonds), widths that differ between molecules,
 * a NaN or infinite value.  Invalid molecules (no atoms) are skipped.  On
 * failure the block is removed.
 */
mp_status mp_colfile_apply(const mp_colfile *cf, mp_graphs *g, int bonds, int32_t first,
                           const char *const *smiles);

/* Read and apply in one: g is the store of the whole input. */
mp_status mp_graphs_read_columns(mp_graphs *g, const char *path, int bonds,
                                 const char *const *smiles);

#ifdef __cplusplus
}
#endif
#endif /* MP_ATOMCOLS_H */
