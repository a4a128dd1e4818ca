/*
 * graph.c - the graph store (graph.h): allocating and freeing it, building
 * a molecule's edges, copying a batch of molecules out of it
 * (mp_graphs_select), bounding a batch's size, and checking every invariant
 * the models rely on (mp_graphs_check, also run on every loaded cache file).
 */
#include "graph/graph.h"

#include <stdlib.h>

#include <math.h>
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
    mp_free(g->atom_x);
    mp_free(g->bond_x);
    mp_free(g->bond_rdkit);
    memset(g, 0, sizeof *g);
}

mp_status mp_graphs_select(mp_graphs *out, const mp_graphs *g, const int32_t *mols, int32_t n)
{
    if (n < 0 || (n > 0 && !mols))
        return mp_error_set(MP_ERR_ARG, "mp_graphs_select: bad molecule count %d", (int)n);
    int64_t na = 0, ne = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t m = mols[i];
        if (m < 0 || m >= g->n_mols)
            return mp_error_set(MP_ERR_ARG, "mp_graphs_select: molecule %d out of range "
                                "(store of %d)", (int)m, (int)g->n_mols);
        na += g->mol_atom[m + 1] - g->mol_atom[m];
        ne += g->mol_edge[m + 1] - g->mol_edge[m];
    }
    if (na > INT32_MAX || ne > INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "mp_graphs_select: batch too large (%lld atoms)",
                            (long long)na);
    if (n > out->cap_mols || na > out->cap_atoms || ne > out->cap_edges || !out->valid ||
        out->xa_dim != g->xa_dim || out->xb_dim != g->xb_dim ||
        (g->xa_dim && na > out->cap_xa) || (g->xb_dim && ne / 2 > out->cap_xb)) {
        mp_graphs_free(out);
        mp_status st = mp_graphs_alloc(out, n, (int32_t)na, (int32_t)ne);
        if (st == MP_OK && (g->xa_dim || g->xb_dim))
            st = mp_graphs_set_extra(out, g->xa_dim, g->xb_dim);
        if (st) {
            mp_graphs_free(out);
            return st;
        }
    }
    out->layout = g->layout;
    out->atom_fdim = g->atom_fdim;
    out->n_mols = n;
    out->n_atoms = (int32_t)na;
    out->n_edges = (int32_t)ne;
    int32_t A = 0, E = 0;
    out->mol_atom[0] = out->mol_edge[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t m = mols[i];
        int32_t A0 = g->mol_atom[m], a = g->mol_atom[m + 1] - A0;
        int32_t E0 = g->mol_edge[m], e = g->mol_edge[m + 1] - E0;
        out->valid[i] = g->valid[m];
        memcpy(out->atom_hot + (size_t)A * MP_ATOM_MAX_HOT,
               g->atom_hot + (size_t)A0 * MP_ATOM_MAX_HOT,
               (size_t)a * MP_ATOM_MAX_HOT * sizeof(int16_t));
        memcpy(out->atom_mass + A, g->atom_mass + A0, (size_t)a * sizeof(float));
        if (g->xa_dim)
            memcpy(out->atom_x + (size_t)A * g->xa_dim, g->atom_x + (size_t)A0 * g->xa_dim,
                   (size_t)a * g->xa_dim * sizeof(float));
        if (g->xb_dim)
            memcpy(out->bond_x + (size_t)(E / 2) * g->xb_dim,
                   g->bond_x + (size_t)(E0 / 2) * g->xb_dim,
                   (size_t)(e / 2) * g->xb_dim * sizeof(float));
        memcpy(out->bond_hot + (size_t)(E / 2) * MP_BOND_MAX_HOT,
               g->bond_hot + (size_t)(E0 / 2) * MP_BOND_MAX_HOT, (size_t)(e / 2) * MP_BOND_MAX_HOT);
        for (int32_t k = 0; k < e; k++) {
            out->edge_src[E + k] = g->edge_src[E0 + k] - A0 + A;
            out->edge_dst[E + k] = g->edge_dst[E0 + k] - A0 + A;
            out->in_edge[E + k] = g->in_edge[E0 + k] - E0 + E;
        }
        for (int32_t v = 0; v < a; v++)
            out->in_start[A + v] = g->in_start[A0 + v] - E0 + E;
        A += a;
        E += e;
        out->mol_atom[i + 1] = A;
        out->mol_edge[i + 1] = E;
    }
    out->in_start[A] = E;
    return MP_OK;
}

/* ===================================================================== */
/* Invariants                                                             */
/* ===================================================================== */

#define BAD(...) mp_error_set(MP_ERR_FORMAT, __VA_ARGS__)

static mp_status check_offsets(const char *what, const int32_t *off, int32_t n, int32_t total)
{
    if (off[0] != 0)
        return BAD("%s[0] is %d, not 0", what, (int)off[0]);
    for (int32_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return BAD("%s not monotone at %d (%d > %d)", what, (int)i, (int)off[i],
                       (int)off[i + 1]);
    if (off[n] != total)
        return BAD("%s ends at %d, expected %d", what, (int)off[n], (int)total);
    return MP_OK;
}

mp_status mp_graphs_check(const mp_graphs *g)
{
    if (g->n_mols < 0 || g->n_atoms < 0 || g->n_edges < 0 || g->n_edges % 2)
        return BAD("bad store sizes: %d molecules, %d atoms, %d edges", (int)g->n_mols,
                   (int)g->n_atoms, (int)g->n_edges);
    /* (that the width is its layout's is featurization's to check: cache.c) */
    if ((int)g->layout < 0 || g->atom_fdim < 2)
        return BAD("atom layout %d with width %d", (int)g->layout, g->atom_fdim);
    mp_status st;
    if ((st = check_offsets("molecule atom offsets", g->mol_atom, g->n_mols, g->n_atoms)) ||
        (st = check_offsets("molecule edge offsets", g->mol_edge, g->n_mols, g->n_edges)) ||
        (st = check_offsets("incoming-edge offsets", g->in_start, g->n_atoms, g->n_edges)))
        return st;
    for (int32_t m = 0; m < g->n_mols; m++) {
        int32_t A0 = g->mol_atom[m], A1 = g->mol_atom[m + 1];
        int32_t E0 = g->mol_edge[m], E1 = g->mol_edge[m + 1];
        if (g->valid[m] > 1)
            return BAD("molecule %d: validity flag %d", (int)m, (int)g->valid[m]);
        if (!g->valid[m] && (A1 > A0 || E1 > E0))
            return BAD("invalid molecule %d has atoms or edges", (int)m);
        if ((E1 - E0) % 2)
            return BAD("molecule %d has an odd number of edges", (int)m);
        if (A1 > A0 && g->in_start[A0] != E0)
            return BAD("molecule %d: incoming edges do not start at its first edge", (int)m);
        for (int32_t e = E0; e < E1; e++) {
            int32_t s = g->edge_src[e], d = g->edge_dst[e];
            if (s < A0 || s >= A1 || d < A0 || d >= A1 || s == d)
                return BAD("molecule %d: edge %d (%d->%d) leaves the molecule's atoms "
                           "[%d, %d)", (int)m, (int)e, (int)s, (int)d, (int)A0, (int)A1);
            if (g->edge_src[e ^ 1] != d || g->edge_dst[e ^ 1] != s)
                return BAD("molecule %d: edge %d is not the reverse of edge %d", (int)m,
                           (int)(e ^ 1), (int)e);
            if (!(e & 1) && s > d)
                return BAD("molecule %d: bond %d runs from %d to %d (begin > end)", (int)m,
                           (int)(e / 2), (int)s, (int)d);
        }
        for (int32_t v = A0; v < A1; v++) {
            int32_t prev = -1;
            for (int32_t j = g->in_start[v]; j < g->in_start[v + 1]; j++) {
                int32_t e = g->in_edge[j];
                if (e < E0 || e >= E1 || g->edge_dst[e] != v || e <= prev)
                    return BAD("atom %d: incoming edge list entry %d (edge %d) is wrong",
                               (int)v, (int)j, (int)e);
                prev = e;
            }
        }
    }
    int hot_max = g->atom_fdim - 2;   /* the last slot is the mass */
    for (int64_t a = 0; a < g->n_atoms; a++) {
        const int16_t *h = g->atom_hot + a * MP_ATOM_MAX_HOT;
        for (int k = 0; k < MP_ATOM_MAX_HOT; k++) {
            int ok = h[k] == -1 ? (k == MP_ATOM_MAX_HOT - 1 || h[k + 1] == -1)
                                : (h[k] >= 0 && h[k] <= hot_max && (k == 0 || h[k] > h[k - 1]));
            if (!ok)
                return BAD("atom %lld: bad hot slots", (long long)a);
        }
        if (!isfinite(g->atom_mass[a]))
            return BAD("atom %lld: mass is not finite", (long long)a);
    }
    for (int64_t b = 0; b < g->n_edges / 2; b++) {
        const int8_t *h = g->bond_hot + b * MP_BOND_MAX_HOT;
        for (int k = 0; k < MP_BOND_MAX_HOT; k++) {
            int ok = h[k] == -1 ? (k == MP_BOND_MAX_HOT - 1 || h[k + 1] == -1)
                                : (h[k] >= 0 && h[k] < MP_BOND_FDIM && (k == 0 || h[k] > h[k - 1]));
            if (!ok)
                return BAD("bond %lld: bad hot slots", (long long)b);
        }
    }
    return MP_OK;
}

/* The arrays of the store for the given sizes; MP_ERR_NOMEM on failure
 * (the caller frees what was allocated). */
mp_status mp_graphs_alloc(mp_graphs *g, int32_t n_mols, int32_t n_atoms, int32_t n_edges)
{
    g->n_mols = n_mols;
    g->n_atoms = n_atoms;
    g->n_edges = n_edges;
    int32_t n_bonds = n_edges / 2;
    g->valid = mp_malloc((size_t)n_mols);
    g->mol_atom = mp_malloc(((size_t)n_mols + 1) * sizeof(int32_t));
    g->mol_edge = mp_malloc(((size_t)n_mols + 1) * sizeof(int32_t));
    g->atom_hot = mp_malloc((size_t)n_atoms * MP_ATOM_MAX_HOT * sizeof(int16_t));
    g->atom_mass = mp_malloc((size_t)n_atoms * sizeof(float));
    g->bond_hot = mp_malloc((size_t)n_bonds * MP_BOND_MAX_HOT);
    g->edge_src = mp_malloc((size_t)n_edges * sizeof(int32_t));
    g->edge_dst = mp_malloc((size_t)n_edges * sizeof(int32_t));
    g->in_start = mp_malloc(((size_t)n_atoms + 1) * sizeof(int32_t));
    g->in_edge = mp_malloc((size_t)n_edges * sizeof(int32_t));
    if (!g->valid || !g->mol_atom || !g->mol_edge || !g->atom_hot || !g->atom_mass ||
        !g->bond_hot || !g->edge_src || !g->edge_dst || !g->in_start || !g->in_edge)
        return mp_error_set(MP_ERR_NOMEM, "out of memory for a graph store of %d molecules, "
                            "%d atoms, %d edges", n_mols, n_atoms, n_edges);
    g->cap_mols = n_mols;
    g->cap_atoms = n_atoms;
    g->cap_edges = n_edges;
    return MP_OK;
}

/* Grows array `p` of a store to `count` items, keeping its contents. */
#define GROW(p, count)                                                         \
    do {                                                                       \
        void *q_ = mp_realloc((p), (size_t)(count) * sizeof *(p));             \
        if (!q_)                                                               \
            goto nomem;                                                        \
        (p) = q_;                                                              \
    } while (0)

mp_status mp_graphs_reserve(mp_graphs *g, int32_t cap_atoms, int32_t cap_edges)
{
    if (cap_atoms > g->cap_atoms) {
        GROW(g->atom_hot, (size_t)cap_atoms * MP_ATOM_MAX_HOT);
        GROW(g->atom_mass, cap_atoms);
        GROW(g->in_start, (size_t)cap_atoms + 1);
        g->cap_atoms = cap_atoms;
    }
    if (cap_edges > g->cap_edges) {
        GROW(g->bond_hot, (size_t)(cap_edges / 2) * MP_BOND_MAX_HOT);
        GROW(g->edge_src, cap_edges);
        GROW(g->edge_dst, cap_edges);
        GROW(g->in_edge, cap_edges);
        g->cap_edges = cap_edges;
    }
    return MP_OK;
nomem:
    return mp_error_set(MP_ERR_NOMEM, "out of memory for a graph store of %d atoms, %d edges",
                        (int)cap_atoms, (int)cap_edges);
}

#undef GROW

mp_status mp_graphs_set_extra(mp_graphs *g, int32_t xa_dim, int32_t xb_dim)
{
    if (xa_dim < 0 || xb_dim < 0 || xa_dim > 1000000 || xb_dim > 1000000)
        return mp_error_set(MP_ERR_ARG, "graph store: extra widths %d / %d", (int)xa_dim,
                            (int)xb_dim);
    int32_t nb = g->n_edges / 2;
    if (xa_dim != g->xa_dim || (xa_dim && g->cap_xa < g->n_atoms)) {
        mp_free(g->atom_x);
        g->atom_x = NULL;
        g->xa_dim = g->cap_xa = 0;
        if (xa_dim > 0) {
            g->atom_x = mp_calloc((size_t)g->n_atoms * xa_dim + 1, sizeof(float));
            if (!g->atom_x)
                return mp_error_set(MP_ERR_NOMEM, "out of memory for %d atom columns of %d "
                                    "atoms", (int)xa_dim, (int)g->n_atoms);
            g->xa_dim = xa_dim;
            g->cap_xa = g->n_atoms;
        }
    }
    if (xb_dim != g->xb_dim || (xb_dim && g->cap_xb < nb)) {
        mp_free(g->bond_x);
        g->bond_x = NULL;
        g->xb_dim = g->cap_xb = 0;
        if (xb_dim > 0) {
            g->bond_x = mp_calloc((size_t)nb * xb_dim + 1, sizeof(float));
            if (!g->bond_x)
                return mp_error_set(MP_ERR_NOMEM, "out of memory for %d bond columns of %d "
                                    "bonds", (int)xb_dim, (int)nb);
            g->xb_dim = xb_dim;
            g->cap_xb = nb;
        }
    }
    return MP_OK;
}

/* Builds one molecule's edges and incoming-edge CSR from its sorted bond
 * pairs; A and E are the molecule's first atom and first edge. */
void mp_graphs_build_edges(mp_graphs *g, int32_t A, int32_t na, int32_t E, int32_t nb,
                           const int32_t *ba, const int32_t *bb)
{
    for (int32_t k = 0; k < nb; k++) {
        int32_t u = A + ba[k], v = A + bb[k];
        g->edge_src[E + 2 * k] = u;
        g->edge_dst[E + 2 * k] = v;
        g->edge_src[E + 2 * k + 1] = v;
        g->edge_dst[E + 2 * k + 1] = u;
    }
    /* in_start[v] first counts, then the end of v's segment; filling from
     * the last edge down leaves each segment ascending and in_start[v] at its
     * start. */
    int32_t *is = g->in_start + A;
    for (int32_t v = 0; v < na; v++)
        is[v] = 0;
    for (int32_t e = E; e < E + 2 * nb; e++)
        is[g->edge_dst[e] - A]++;
    int32_t run = E;
    for (int32_t v = 0; v < na; v++) {
        run += is[v];
        is[v] = run;
    }
    for (int32_t e = E + 2 * nb - 1; e >= E; e--)
        g->in_edge[--is[g->edge_dst[e] - A]] = e;
}

static int by_desc(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a < b) - (a > b);
}

static int32_t top_sum(int32_t *v, int32_t n, int32_t k)
{
    qsort(v, (size_t)n, sizeof *v, by_desc);
    int64_t s = 0;
    for (int32_t i = 0; i < n && i < k; i++)
        s += v[i];
    return s > INT32_MAX ? INT32_MAX : (int32_t)s;
}

void mp_graphs_batch_bounds(const mp_graphs *g, const int32_t *mols, int32_t n,
                            int32_t batch_size, int32_t *max_atoms, int32_t *max_edges)
{
    if (!mols)
        n = g->n_mols;
    int32_t *na = mp_malloc((size_t)(n > 0 ? n : 1) * sizeof *na);
    int32_t *ne = mp_malloc((size_t)(n > 0 ? n : 1) * sizeof *ne);
    if (!na || !ne) {
        /* No memory for the sort: the whole store is a safe bound. */
        *max_atoms = g->n_atoms;
        *max_edges = g->n_edges;
    } else {
        for (int32_t i = 0; i < n; i++) {
            int32_t m = mols ? mols[i] : i;
            na[i] = g->mol_atom[m + 1] - g->mol_atom[m];
            ne[i] = g->mol_edge[m + 1] - g->mol_edge[m];
        }
        *max_atoms = top_sum(na, n, batch_size);
        *max_edges = top_sum(ne, n, batch_size);
    }
    mp_free(na);
    mp_free(ne);
}
