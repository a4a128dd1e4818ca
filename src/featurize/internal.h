/*
 * internal.h - helpers shared by the files of src/featurize (not public):
 * allocating a graph store and building one molecule's edges and CSR.
 */
#ifndef MP_FEATURIZE_INTERNAL_H
#define MP_FEATURIZE_INTERNAL_H

#include "featurize/featurize.h"

/* Allocates every array of `g` (which must hold no arrays) for the given
 * sizes and sets the sizes and capacities; MP_ERR_NOMEM on failure, with
 * whatever was allocated left in `g` for mp_graphs_free. */
mp_status mp_graphs_alloc(mp_graphs *g, int32_t n_mols, int32_t n_atoms, int32_t n_edges);

/* Fills edge_src/edge_dst of edges [E, E+2nb) and in_start/in_edge of atoms
 * [A, A+na) of one molecule from its bonds (ba[k] < bb[k], local atom
 * indices, in Chemprop order).  in_start[A+na] is the next molecule's (the
 * caller sets in_start[n_atoms] = n_edges). */
void mp_graphs_build_edges(mp_graphs *g, int32_t A, int32_t na, int32_t E, int32_t nb,
                           const int32_t *ba, const int32_t *bb);

#endif /* MP_FEATURIZE_INTERNAL_H */
