/*
 * select.c - cutting a batch out of the graph store: mp_graphs_select copies
 * chosen molecules (in the order given) into a store of their own with
 * re-based atom and edge indices, which is what a model trains on; and
 * mp_graphs_free.  Lives beside the featurizer because it only knows the
 * store's layout (featurize.h), nothing about models.
 */
#include "featurize/featurize.h"

#include <string.h>

void mp_graphs_free(mp_graphs *g)
{
    if (!g)
        return;
    mp_free(g->valid);
    mp_free(g->mol_atom);
    mp_free(g->mol_edge);
    mp_free(g->atom_hot);
    mp_free(g->atom_mass);
    mp_free(g->bond_hot);
    mp_free(g->edge_src);
    mp_free(g->edge_dst);
    mp_free(g->in_start);
    mp_free(g->in_edge);
    memset(g, 0, sizeof *g);
}

/* Grows *p to hold n elements of `size` bytes; on failure *p is untouched. */
static int grow(void *p, size_t n, size_t size)
{
    void **pp = p;
    size_t bytes = n * size;
    void *q = mp_realloc(*pp, bytes ? bytes : 1);
    if (!q)
        return 0;
    *pp = q;
    return 1;
}

mp_status mp_graphs_select(mp_graphs *out, const mp_graphs *g, const int32_t *mols, int32_t n)
{
    if (n < 0 || (n > 0 && !mols))
        return mp_error_set(MP_ERR_ARG, "graph select: bad molecule list (n = %d)", (int)n);
    if (out == g)
        return mp_error_set(MP_ERR_ARG, "graph select: the output must not be the input store");
    /* Count first, checking every index, so a bad list changes nothing. */
    int64_t n_atoms = 0, n_edges = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t m = mols[i];
        if (m < 0 || m >= g->n_mols)
            return mp_error_set(MP_ERR_ARG,
                                "graph select: molecule index %d (position %d) outside the "
                                "store of %d molecules", (int)m, (int)i, (int)g->n_mols);
        n_atoms += g->mol_atom[m + 1] - g->mol_atom[m];
        n_edges += g->mol_edge[m + 1] - g->mol_edge[m];
        if ((g->mol_edge[m] & 1) || (g->mol_edge[m + 1] & 1))
            return mp_error_set(MP_ERR_FORMAT,
                                "graph select: molecule %d has an odd edge range [%d, %d)",
                                (int)m, (int)g->mol_edge[m], (int)g->mol_edge[m + 1]);
        int32_t a0 = g->mol_atom[m], a1 = g->mol_atom[m + 1];
        if (a1 < a0 || g->mol_edge[m + 1] < g->mol_edge[m] ||
            g->in_start[a1] - g->in_start[a0] != g->mol_edge[m + 1] - g->mol_edge[m])
            return mp_error_set(MP_ERR_FORMAT,
                                "graph select: molecule %d: its atoms' incoming-edge lists do "
                                "not match its %d edges", (int)m,
                                (int)(g->mol_edge[m + 1] - g->mol_edge[m]));
    }
    if (n_atoms > INT32_MAX || n_edges > INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "graph select: %d molecules hold more than 2^31 atoms or edges",
                            (int)n);

    size_t na = (size_t)n_atoms, ne = (size_t)n_edges, nb = ne / 2, nm = (size_t)n;
    out->n_mols = out->n_atoms = out->n_edges = 0;
    if (!grow(&out->valid, nm, 1) || !grow(&out->mol_atom, nm + 1, sizeof(int32_t)) ||
        !grow(&out->mol_edge, nm + 1, sizeof(int32_t)) ||
        !grow(&out->atom_hot, na * MP_ATOM_MAX_HOT, sizeof(int16_t)) ||
        !grow(&out->atom_mass, na, sizeof(float)) ||
        !grow(&out->bond_hot, nb * MP_BOND_MAX_HOT, sizeof(int8_t)) ||
        !grow(&out->edge_src, ne, sizeof(int32_t)) || !grow(&out->edge_dst, ne, sizeof(int32_t)) ||
        !grow(&out->in_start, na + 1, sizeof(int32_t)) || !grow(&out->in_edge, ne, sizeof(int32_t)))
        return mp_error_set(MP_ERR_NOMEM, "graph select: out of memory for %d molecules, %zu atoms, "
                            "%zu edges", (int)n, na, ne);

    out->layout = g->layout;
    out->atom_fdim = g->atom_fdim;
    int32_t a_at = 0, e_at = 0;
    out->mol_atom[0] = 0;
    out->mol_edge[0] = 0;
    out->in_start[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t m = mols[i];
        int32_t a0 = g->mol_atom[m], a1 = g->mol_atom[m + 1];
        int32_t e0 = g->mol_edge[m], e1 = g->mol_edge[m + 1];
        int32_t da = a_at - a0, de = e_at - e0;   /* index shifts; de is even */
        int32_t k0 = a1 > a0 ? g->in_start[a0] : 0;
        out->valid[i] = g->valid[m];
        memcpy(out->atom_hot + (size_t)a_at * MP_ATOM_MAX_HOT,
               g->atom_hot + (size_t)a0 * MP_ATOM_MAX_HOT,
               (size_t)(a1 - a0) * MP_ATOM_MAX_HOT * sizeof(int16_t));
        memcpy(out->atom_mass + a_at, g->atom_mass + a0, (size_t)(a1 - a0) * sizeof(float));
        memcpy(out->bond_hot + (size_t)(e_at / 2) * MP_BOND_MAX_HOT,
               g->bond_hot + (size_t)(e0 / 2) * MP_BOND_MAX_HOT,
               (size_t)(e1 - e0) / 2 * MP_BOND_MAX_HOT * sizeof(int8_t));
        for (int32_t e = e0; e < e1; e++) {
            out->edge_src[e + de] = g->edge_src[e] + da;
            out->edge_dst[e + de] = g->edge_dst[e] + da;
        }
        /* The incoming-edge lists of this molecule's atoms are one run of
         * in_edge; it moves to e_at and its entries shift by de. */
        for (int32_t v = a0; v < a1; v++)
            out->in_start[v + da + 1] = g->in_start[v + 1] - k0 + e_at;
        if (a1 > a0)
            for (int32_t k = k0; k < g->in_start[a1]; k++)
                out->in_edge[k - k0 + e_at] = g->in_edge[k] + de;
        a_at += a1 - a0;
        e_at += e1 - e0;
        out->mol_atom[i + 1] = a_at;
        out->mol_edge[i + 1] = e_at;
    }
    out->n_mols = n;
    out->n_atoms = a_at;
    out->n_edges = e_at;
    return MP_OK;
}
