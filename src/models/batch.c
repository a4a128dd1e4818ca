/*
 * batch.c - a graph batch on its way into a model: checked (so that no index
 * in it can make an op read or write out of bounds), then uploaded into the
 * model's device arena; and the batch-size bounds a trainer reserves with.
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdlib.h>

/* ===================================================================== */
/* Checking                                                               */
/* ===================================================================== */

#define BAD(...) mp_error_set(MP_ERR_FORMAT, "graph batch: " __VA_ARGS__)

static mp_status check_molecule(const mp_graphs *g, int32_t i, int atom_fdim)
{
    int32_t a0 = g->mol_atom[i], a1 = g->mol_atom[i + 1];
    int32_t e0 = g->mol_edge[i], e1 = g->mol_edge[i + 1];
    if ((e0 & 1) || (e1 & 1))
        return BAD("molecule %d: edge range [%d, %d) is not made of edge pairs", (int)i,
                   (int)e0, (int)e1);
    for (int32_t v = a0; v < a1; v++) {
        const int16_t *hot = g->atom_hot + (size_t)v * MP_ATOM_MAX_HOT;
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
            if (hot[q] < -1 || hot[q] > atom_fdim - 2)
                return BAD("molecule %d, atom %d: hot slot %d outside the %d-slot atom layout "
                           "(the last slot is the mass)", (int)i, (int)(v - a0), (int)hot[q],
                           atom_fdim);
        if (!isfinite(g->atom_mass[v]))
            return BAD("molecule %d, atom %d: mass is not a finite number", (int)i, (int)(v - a0));
        int32_t k0 = g->in_start[v], k1 = g->in_start[v + 1];
        for (int32_t k = k0; k < k1; k++) {
            int32_t e = g->in_edge[k];
            if (e < e0 || e >= e1 || g->edge_dst[e] != v || (k > k0 && e <= g->in_edge[k - 1]))
                return BAD("molecule %d, atom %d: incoming edge %d is not an edge into this atom "
                           "(or the list is not ascending)", (int)i, (int)(v - a0), (int)e);
        }
    }
    if (a1 > a0 && g->in_start[a1] - g->in_start[a0] != e1 - e0)
        return BAD("molecule %d: %d incoming-edge entries for %d edges", (int)i,
                   (int)(g->in_start[a1] - g->in_start[a0]), (int)(e1 - e0));
    if (a1 == a0 && e1 > e0)
        return BAD("molecule %d: %d edges but no atoms", (int)i, (int)(e1 - e0));
    for (int32_t e = e0; e < e1; e++) {
        int32_t s = g->edge_src[e], d = g->edge_dst[e];
        if (s < a0 || s >= a1 || d < a0 || d >= a1)
            return BAD("molecule %d, edge %d: atoms %d -> %d outside the molecule's %d atoms",
                       (int)i, (int)(e - e0), (int)(s - a0), (int)(d - a0), (int)(a1 - a0));
        if (g->edge_src[e ^ 1] != d || g->edge_dst[e ^ 1] != s)
            return BAD("molecule %d, edge %d: its pair edge %d is not its reverse", (int)i,
                       (int)(e - e0), (int)((e ^ 1) - e0));
        if (!(e & 1)) {
            const int8_t *bh = g->bond_hot + (size_t)(e >> 1) * MP_BOND_MAX_HOT;
            for (int q = 0; q < MP_BOND_MAX_HOT; q++)
                if (bh[q] < -1 || bh[q] >= MP_BOND_FDIM)
                    return BAD("molecule %d, bond %d: hot slot %d outside the %d bond slots",
                               (int)i, (int)((e - e0) >> 1), (int)bh[q], MP_BOND_FDIM);
        }
    }
    return MP_OK;
}

mp_status mp_batch_check(const mp_graphs *g, int atom_fdim)
{
    if (!g)
        return mp_error_set(MP_ERR_ARG, "graph batch: missing (a D-MPNN needs graphs)");
    if (g->atom_fdim != atom_fdim)
        return BAD("atom vectors have %d slots but the model was built for %d", g->atom_fdim,
                   atom_fdim);
    if (g->n_mols < 0 || g->n_atoms < 0 || g->n_edges < 0 || (g->n_edges & 1))
        return BAD("bad sizes: %d molecules, %d atoms, %d edges", (int)g->n_mols,
                   (int)g->n_atoms, (int)g->n_edges);
    if (!g->mol_atom || !g->mol_edge || !g->in_start ||
        (g->n_atoms && (!g->atom_hot || !g->atom_mass)) ||
        (g->n_edges && (!g->bond_hot || !g->edge_src || !g->edge_dst || !g->in_edge)))
        return BAD("arrays missing for %d molecules, %d atoms, %d edges", (int)g->n_mols,
                   (int)g->n_atoms, (int)g->n_edges);
    if (g->mol_atom[0] != 0 || g->mol_edge[0] != 0 || g->in_start[0] != 0 ||
        g->mol_atom[g->n_mols] != g->n_atoms || g->mol_edge[g->n_mols] != g->n_edges ||
        g->in_start[g->n_atoms] != g->n_edges)
        return BAD("offsets do not span the %d atoms and %d edges", (int)g->n_atoms,
                   (int)g->n_edges);
    for (int32_t i = 0; i < g->n_mols; i++)
        if (g->mol_atom[i + 1] < g->mol_atom[i] || g->mol_edge[i + 1] < g->mol_edge[i])
            return BAD("molecule %d: atom or edge offsets decrease", (int)i);
    for (int32_t v = 0; v < g->n_atoms; v++)
        if (g->in_start[v + 1] < g->in_start[v])
            return BAD("atom %d: incoming-edge offsets decrease", (int)v);
    /* Molecules in parallel (the check costs more than packing the batch);
     * the message is the first bad molecule's, as a serial loop gives it:
     * each thread stops at its first failure, the lowest index wins and is
     * checked again here to set this thread's message. */
    int32_t bad = INT32_MAX;
    int nt = g->n_mols >= 256 ? mp_threads_get() : 1;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(min : bad)
    for (int32_t i = 0; i < g->n_mols; i++)
        if (i < bad && check_molecule(g, i, atom_fdim) != MP_OK)
            bad = i;
    return bad == INT32_MAX ? MP_OK : check_molecule(g, bad, atom_fdim);
}

/* ===================================================================== */
/* Upload                                                                 */
/* ===================================================================== */

mp_status mp_batch_upload(mp_backend *b, mp_dev_graph *d, const mp_graphs *g)
{
    size_t na = (size_t)g->n_atoms, ne = (size_t)g->n_edges, nm = (size_t)g->n_mols;
    mp_status st;
    if ((st = b->upload(b, d->atom_hot, g->atom_hot, na * MP_ATOM_MAX_HOT * sizeof(int16_t))) ||
        (st = b->upload(b, d->atom_mass, g->atom_mass, na * sizeof(float))) ||
        (st = b->upload(b, d->bond_hot, g->bond_hot, ne / 2 * MP_BOND_MAX_HOT * sizeof(int8_t))) ||
        (st = b->upload(b, d->edge_src, g->edge_src, ne * sizeof(int32_t))) ||
        (st = b->upload(b, d->edge_dst, g->edge_dst, ne * sizeof(int32_t))) ||
        (st = b->upload(b, d->in_start, g->in_start, (na + 1) * sizeof(int32_t))) ||
        (st = b->upload(b, d->in_edge, g->in_edge, ne * sizeof(int32_t))) ||
        (st = b->upload(b, d->mol_atom, g->mol_atom, (nm + 1) * sizeof(int32_t))))
        return st;
    d->n_mols = g->n_mols;
    d->n_atoms = g->n_atoms;
    d->n_edges = g->n_edges;
    return MP_OK;
}

/* ===================================================================== */
/* User atom / bond columns (model.h atom_extra_dim ...)                  */
/* ===================================================================== */

/* The batch's user columns against the model's widths (cfg atom_extra_dim
 * ...): a model without them ignores columns a store happens to carry. */
mp_status mp_batch_check_columns(const mp_model *m, const mp_graphs *g)
{
    const mp_model_config *c = &m->cfg;
    const int xdim = c->atom_extra_dim + c->atom_desc_dim;
    if (xdim && (g->xa_dim != xdim || (g->n_atoms && !g->atom_x)))
        return mp_error_set(MP_ERR_ARG, "model forward: the model takes %d atom %s per atom "
                            "but the batch has %d (--atom-descriptors-path)", xdim,
                            c->atom_desc_dim ? "descriptors" : "features", (int)g->xa_dim);
    if (c->bond_extra_dim && (g->xb_dim != c->bond_extra_dim || (g->n_edges && !g->bond_x)))
        return mp_error_set(MP_ERR_ARG, "model forward: the model takes %d bond features per "
                            "bond but the batch has %d (--bond-features-path)",
                            c->bond_extra_dim, (int)g->xb_dim);
    return MP_OK;
}

/* Uploads the batch's atom columns (xa) and bond columns, one row per
 * directed edge (xb: edge e reads bond e / 2), in the element type. */
mp_status mp_batch_upload_columns(mp_model *m, const mp_graphs *g)
{
    const mp_model_config *c = &m->cfg;
    const size_t xdim = (size_t)(c->atom_extra_dim + c->atom_desc_dim);
    const size_t db = (size_t)c->bond_extra_dim, ne = (size_t)g->n_edges;
    mp_status st = MP_OK;
    if (xdim && g->n_atoms) {
        size_t n = (size_t)g->n_atoms * xdim;
        char *t = mp_model_host(m, n * m->esize);
        if (!t)
            return mp_error_set(MP_ERR_NOMEM, "model: out of memory staging atom columns");
        for (size_t i = 0; i < n; i++) {
            if (m->esize == sizeof(double))
                ((double *)t)[i] = g->atom_x[i];
            else
                ((float *)t)[i] = g->atom_x[i];
        }
        if ((st = m->b->upload(m->b, m->a.xa, t, n * m->esize)) != MP_OK)
            return st;
    }
    if (!db || !ne)
        return MP_OK;
    char *t = mp_model_host(m, ne * db * m->esize);
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory staging bond columns");
    for (size_t e = 0; e < ne; e++) {
        const float *row = g->bond_x + (e / 2) * db;
        for (size_t j = 0; j < db; j++) {
            if (m->esize == sizeof(double))
                ((double *)t)[e * db + j] = row[j];
            else
                ((float *)t)[e * db + j] = row[j];
        }
    }
    return m->b->upload(m->b, m->a.xb, t, ne * db * m->esize);
}

/* 1 when bt carries the user columns the model takes (or it takes none). */
int mp_batch_has_columns(const mp_model *m, const mp_dev_batch *bt)
{
    const mp_model_config *c = &m->cfg;
    if ((c->atom_extra_dim || c->atom_desc_dim) && bt->n_atoms > 0 && !bt->atom_x)
        return 0;
    return !(c->bond_extra_dim && bt->n_edges > 0 && !bt->bond_x);
}

/* ===================================================================== */
/* Batch bounds                                                           */
/* ===================================================================== */
