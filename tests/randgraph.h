/*
 * randgraph.h - random molecule-like graph stores for the model tests (and the
 * microbenchmark), built by hand so the models can be tested without RDKit:
 * a random tree per molecule plus a few ring closures, random ascending hot
 * slots per atom and bond, random masses; bonds ordered by (begin, end) with
 * begin < end as Chemprop v1 orders them, edges 2k / 2k+1 the two
 * directions, in_edge ascending per atom.  Options make molecules without
 * atoms (invalid SMILES) and molecules with atoms but no bonds.
 */
#ifndef MP_TEST_RANDGRAPH_H
#define MP_TEST_RANDGRAPH_H

#include "core/core.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int    min_atoms, max_atoms;  /* atoms per molecule, uniform                */
    double p_empty;               /* probability of a molecule with no atoms    */
    double p_no_bonds;            /* probability of atoms without any bond      */
    int    max_rings;             /* extra ring-closing bonds, 0 .. max_rings   */
} rg_opts;

static int rg_cmp_pair(const void *x, const void *y)
{
    const int32_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] > b[0]) - (a[0] < b[0]) : (a[1] > b[1]) - (a[1] < b[1]);
}

/* k distinct values from [0, n) into out, ascending, -1 padded to width w. */
static void rg_pick_slots(mp_rng *r, int k, int n, int w, int *out)
{
    int c = 0;
    while (c < k) {
        int s = (int)mp_rng_below(r, (uint64_t)n), dup = 0;
        for (int i = 0; i < c; i++)
            dup |= out[i] == s;
        if (!dup)
            out[c++] = s;
    }
    for (int i = 1; i < c; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    for (int i = c; i < w; i++)
        out[i] = -1;
}

/* Fills *g (zeroed or freed first) with n_mols random molecules.  Returns 0 on
 * out-of-memory.  Free with mp_graphs_free. */
static int rg_make(mp_graphs *g, mp_rng *r, int32_t n_mols, int atom_fdim, const rg_opts *o)
{
    memset(g, 0, sizeof *g);
    int32_t *natoms = calloc((size_t)n_mols + 1, sizeof *natoms);
    int32_t *pairs = NULL;    /* per molecule (begin, end), all molecules */
    int32_t *nbonds = calloc((size_t)n_mols + 1, sizeof *nbonds);
    size_t cap = 0, used = 0;
    int64_t ta = 0;
    if (!natoms || !nbonds)
        goto fail;
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t n = 0;
        if (mp_rng_uniform(r) >= o->p_empty)
            n = o->min_atoms + (int32_t)mp_rng_below(r, (uint64_t)(o->max_atoms - o->min_atoms + 1));
        natoms[i] = n;
        ta += n;
        int no_bonds = n > 0 && mp_rng_uniform(r) < o->p_no_bonds;
        int32_t start = (int32_t)used;
        int want = no_bonds ? 0 : (n > 1 ? n - 1 : 0);
        int rings = no_bonds || n < 3 ? 0 : (int)mp_rng_below(r, (uint64_t)o->max_rings + 1);
        if (used + (size_t)(want + rings) > cap) {
            cap = 2 * cap + (size_t)(want + rings) + 16;
            int32_t *p = realloc(pairs, cap * 2 * sizeof *pairs);
            if (!p)
                goto fail;
            pairs = p;
        }
        for (int v = 1; v <= want; v++) {
            int u = (int)mp_rng_below(r, (uint64_t)v);
            pairs[2 * used] = u;
            pairs[2 * used + 1] = v;
            used++;
        }
        for (int k = 0; k < rings; k++) {
            int u = (int)mp_rng_below(r, (uint64_t)n), v = (int)mp_rng_below(r, (uint64_t)n);
            if (u == v)
                continue;
            if (u > v) { int t = u; u = v; v = t; }
            int dup = 0;
            for (size_t q = (size_t)start; q < used; q++)
                dup |= pairs[2 * q] == u && pairs[2 * q + 1] == v;
            if (dup)
                continue;
            pairs[2 * used] = u;
            pairs[2 * used + 1] = v;
            used++;
        }
        if (used - (size_t)start > 1)
            qsort(pairs + 2 * start, used - (size_t)start, 2 * sizeof *pairs, rg_cmp_pair);
        nbonds[i] = (int32_t)(used - (size_t)start);
    }
    size_t na = (size_t)ta, ne = 2 * used;
    g->layout = MP_ATOM_V1;
    g->atom_fdim = atom_fdim;
    g->n_mols = n_mols;
    g->n_atoms = (int32_t)na;
    g->n_edges = (int32_t)ne;
    g->valid = mp_malloc((size_t)n_mols + 1);
    g->mol_atom = mp_malloc(((size_t)n_mols + 1) * sizeof(int32_t));
    g->mol_edge = mp_malloc(((size_t)n_mols + 1) * sizeof(int32_t));
    g->atom_hot = mp_malloc((na + 1) * MP_ATOM_MAX_HOT * sizeof(int16_t));
    g->atom_mass = mp_malloc((na + 1) * sizeof(float));
    g->bond_hot = mp_malloc((used + 1) * MP_BOND_MAX_HOT);
    g->edge_src = mp_malloc((ne + 1) * sizeof(int32_t));
    g->edge_dst = mp_malloc((ne + 1) * sizeof(int32_t));
    g->in_start = mp_malloc((na + 1) * sizeof(int32_t));
    g->in_edge = mp_malloc((ne + 1) * sizeof(int32_t));
    if (!g->valid || !g->mol_atom || !g->mol_edge || !g->atom_hot || !g->atom_mass ||
        !g->bond_hot || !g->edge_src || !g->edge_dst || !g->in_start || !g->in_edge)
        goto fail;
    int32_t a_at = 0, e_at = 0;
    size_t pb = 0;
    g->mol_atom[0] = g->mol_edge[0] = 0;
    for (int32_t i = 0; i < n_mols; i++) {
        g->valid[i] = natoms[i] > 0;
        for (int32_t v = 0; v < natoms[i]; v++) {
            int slots[MP_ATOM_MAX_HOT];
            int k = 1 + (int)mp_rng_below(r, MP_ATOM_MAX_HOT - 1);
            if (k > atom_fdim - 1)
                k = atom_fdim - 1;
            rg_pick_slots(r, k, atom_fdim - 1, MP_ATOM_MAX_HOT, slots);
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
                g->atom_hot[(size_t)(a_at + v) * MP_ATOM_MAX_HOT + q] = (int16_t)slots[q];
            g->atom_mass[a_at + v] = (float)(0.01 + 0.8 * mp_rng_uniform(r));
        }
        for (int32_t k = 0; k < nbonds[i]; k++, pb++) {
            int32_t u = pairs[2 * pb] + a_at, v = pairs[2 * pb + 1] + a_at;
            int32_t e = e_at + 2 * k;
            g->edge_src[e] = u;
            g->edge_dst[e] = v;
            g->edge_src[e + 1] = v;
            g->edge_dst[e + 1] = u;
            int slots[MP_BOND_MAX_HOT];
            rg_pick_slots(r, 1 + (int)mp_rng_below(r, MP_BOND_MAX_HOT), MP_BOND_FDIM,
                          MP_BOND_MAX_HOT, slots);
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                g->bond_hot[(size_t)(e / 2) * MP_BOND_MAX_HOT + q] = (int8_t)slots[q];
        }
        a_at += natoms[i];
        e_at += 2 * nbonds[i];
        g->mol_atom[i + 1] = a_at;
        g->mol_edge[i + 1] = e_at;
    }
    /* incoming-edge CSR: count, prefix, fill in ascending edge order */
    memset(g->in_start, 0, (na + 1) * sizeof(int32_t));
    for (size_t e = 0; e < ne; e++)
        g->in_start[g->edge_dst[e] + 1]++;
    for (size_t v = 0; v < na; v++)
        g->in_start[v + 1] += g->in_start[v];
    int32_t *fill = calloc(na + 1, sizeof *fill);
    if (!fill)
        goto fail;
    for (size_t e = 0; e < ne; e++) {
        int32_t v = g->edge_dst[e];
        g->in_edge[g->in_start[v] + fill[v]++] = (int32_t)e;
    }
    free(fill);
    free(natoms);
    free(nbonds);
    free(pairs);
    return 1;
fail:
    free(natoms);
    free(nbonds);
    free(pairs);
    mp_graphs_free(g);
    return 0;
}

#endif /* MP_TEST_RANDGRAPH_H */
