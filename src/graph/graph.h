/*
 * graph.h - the graph store: every molecule of a dataset (or a batch) as one
 * directed graph, the form in which featurization hands molecules to the
 * models.  `featurize` produces it (from RDKit molecules or a cache file),
 * `models` consume it (upload it to a backend and message-pass over it), and
 * the two meet only here.  Plain C arrays, no RDKit, no backend.
 */
#ifndef MP_GRAPH_H
#define MP_GRAPH_H

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
    /* User-supplied per-atom and per-bond columns (Chemprop v1's
     * --atom_descriptors_path / --bond_features_path; NULL and 0 when none):
     * atom_x [n_atoms x xa_dim] row per atom in RDKit order, bond_x
     * [(n_edges/2) x xb_dim] row per bond of this store (both directions of
     * a bond read it).  Whether the atom columns join the atom features or
     * the atom hiddens is the model's business (mp_model_config). */
    int32_t  xa_dim, xb_dim;
    float   *atom_x, *bond_x;
    /* RDKit's index (within its molecule) of each bond of the store
     * ((n_edges/2) entries; NULL when unknown, e.g. read from a cache file):
     * user bond files are in RDKit's order.  Not copied by mp_graphs_select. */
    int32_t *bond_rdkit;
    /* Allocated sizes of the arrays above (mp_graphs_select reuses them). */
    int32_t  cap_mols, cap_atoms, cap_edges, cap_xa, cap_xb;
} mp_graphs;

/*
 * Gives the store per-atom / per-bond user columns (graph.h above) of
 * widths xa_dim / xb_dim (0: none).  A block whose width changes is made
 * anew, zero-filled (or freed); a block of the same width is kept as it
 * is.  MP_ERR_ARG for a negative width, MP_ERR_NOMEM.
 */
mp_status mp_graphs_set_extra(mp_graphs *g, int32_t xa_dim, int32_t xb_dim);

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

/* Allocates every array of `g` (which must hold no arrays) for the given
 * sizes and sets the sizes and capacities; MP_ERR_NOMEM on failure, with
 * whatever was allocated left in `g` for mp_graphs_free. */
mp_status mp_graphs_alloc(mp_graphs *g, int32_t n_mols, int32_t n_atoms, int32_t n_edges);

/* Grows the atom and edge arrays of `g` to capacities of at least
 * cap_atoms atoms and cap_edges edges (in_start: cap_atoms + 1), keeping
 * their contents; the sizes (n_atoms, n_edges) are the caller's.  For a
 * store filled in rounds (featurize.c).  MP_ERR_NOMEM leaves `g` valid for
 * mp_graphs_free. */
mp_status mp_graphs_reserve(mp_graphs *g, int32_t cap_atoms, int32_t cap_edges);

/* Fills edge_src/edge_dst of edges [E, E+2nb) and in_start/in_edge of atoms
 * [A, A+na) of one molecule from its bonds (ba[k] < bb[k], local atom
 * indices, in Chemprop order).  in_start[A+na] is the next molecule's (the
 * caller sets in_start[n_atoms] = n_edges). */
void mp_graphs_build_edges(mp_graphs *g, int32_t A, int32_t na, int32_t E, int32_t nb,
                           const int32_t *ba, const int32_t *bb);

/*
 * Upper bounds for any batch of batch_size molecules drawn from mols[0..n)
 * of g (all of g when mols is NULL): the sums of the batch_size largest atom
 * and edge counts.  For sizing a model's activations once (mp_model_reserve).
 */
void mp_graphs_batch_bounds(const mp_graphs *g, const int32_t *mols, int32_t n,
                            int32_t batch_size, int32_t *max_atoms, int32_t *max_edges);

#ifdef __cplusplus
}
#endif
#endif /* MP_GRAPH_H */
