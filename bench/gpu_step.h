/*
 * gpu_step.h - a D-MPNN-shaped training step written against the ops seam
 * (models/ops.h) over a graph batch (mp_graphs, e.g. from tests/randgraph.h),
 * shared by the GPU tests (tests/test_gpu_ops.c: the same step on the cuda
 * and the ref64 backend must agree) and the GPU microbenchmark
 * (bench/gpu_ops.c: the step timed eagerly and as a replayed CUDA graph).
 *
 * The step is Chemprop v1's default model as models/dmpnn.c runs it: W_i on
 * [x_u ; b_uv] as one-hot gathers, depth-1 message updates through W_h with
 * the pre-activation residual, the W_o readout with bias, mean pooling, a
 * two-layer FFN head, masked MSE, the full backward pass and one Adam step.
 * It issues only device ops (no upload, download or sync), so it can be
 * captured into a CUDA graph.  Element type follows the backend (float, or
 * double on ref64), as the model code does; on a backend with half_acts
 * (cuda at bf16) the product operands are stored in bf16 as dmpnn.c stores
 * them (msg[t], a and dmsg are still allocated at the element size, so the
 * bench's fp32 op rows can use them too).
 *
 * Header-only (static functions) because its two users are separate
 * programs; nothing here is part of libmolprop.
 */
#ifndef MP_BENCH_GPU_STEP_H
#define MP_BENCH_GPU_STEP_H

#include "core/core.h"
#include "featurize/featurize.h"
#include "backend/ops.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Buffers of either element type                                         */
/* ===================================================================== */

#define GS_AT(b, p, i) ((void *)((char *)(p) + (size_t)(i) * (b)->esize))

/* Uploads n floats into a buffer of the backend's element type. */
static mp_status gs_put(mp_backend *b, void *dst, const float *src, size_t n)
{
    if (b->dtype == MP_F32)
        return b->upload(b, dst, src, n * sizeof(float));
    double *t = mp_malloc((n ? n : 1) * sizeof(double));
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "gs_put: out of memory");
    for (size_t i = 0; i < n; i++)
        t[i] = src[i];
    mp_status st = b->upload(b, dst, t, n * sizeof(double));
    mp_free(t);
    return st;
}

/* Downloads n elements of the backend's type as doubles. */
__attribute__((unused)) static mp_status gs_get(mp_backend *b, double *dst, const void *src, size_t n)
{
    void *t = mp_malloc((n ? n : 1) * b->esize);
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "gs_get: out of memory");
    mp_status st = b->download(b, t, src, n * b->esize);
    for (size_t i = 0; st == MP_OK && i < n; i++)
        dst[i] = b->dtype == MP_F64 ? ((double *)t)[i] : (double)((float *)t)[i];
    mp_free(t);
    return st;
}

/* ===================================================================== */
/* The graph on a backend                                                 */
/* ===================================================================== */

typedef struct {
    int32_t  n_mols, n_atoms, n_edges;
    int16_t *atom_hot;
    float   *atom_mass;
    int8_t  *bond_hot;
    int32_t *edge_src, *edge_dst, *in_start, *in_edge, *mol_atom;
} gs_dev_graph;

static void gs_dev_graph_free(mp_backend *b, gs_dev_graph *d)
{
    b->free(b, d->atom_hot);
    b->free(b, d->atom_mass);
    b->free(b, d->bond_hot);
    b->free(b, d->edge_src);
    b->free(b, d->edge_dst);
    b->free(b, d->in_start);
    b->free(b, d->in_edge);
    b->free(b, d->mol_atom);
    memset(d, 0, sizeof *d);
}

static void *gs_alloc_up(mp_backend *b, const void *src, size_t bytes, mp_status *st)
{
    if (*st != MP_OK)
        return NULL;
    void *p = b->alloc(b, bytes ? bytes : 1);
    if (!p) {
        *st = MP_ERR_NOMEM;
        return NULL;
    }
    if (bytes && (*st = b->upload(b, p, src, bytes)) != MP_OK)
        return p;
    return p;
}

static mp_status gs_dev_graph_upload(mp_backend *b, gs_dev_graph *d, const mp_graphs *g)
{
    memset(d, 0, sizeof *d);
    size_t A = (size_t)g->n_atoms, E = (size_t)g->n_edges, M = (size_t)g->n_mols;
    mp_status st = MP_OK;
    d->atom_hot = gs_alloc_up(b, g->atom_hot, A * MP_ATOM_MAX_HOT * sizeof(int16_t), &st);
    d->atom_mass = gs_alloc_up(b, g->atom_mass, A * sizeof(float), &st);
    d->bond_hot = gs_alloc_up(b, g->bond_hot, E / 2 * MP_BOND_MAX_HOT, &st);
    d->edge_src = gs_alloc_up(b, g->edge_src, E * sizeof(int32_t), &st);
    d->edge_dst = gs_alloc_up(b, g->edge_dst, E * sizeof(int32_t), &st);
    d->in_start = gs_alloc_up(b, g->in_start, (A + 1) * sizeof(int32_t), &st);
    d->in_edge = gs_alloc_up(b, g->in_edge, E * sizeof(int32_t), &st);
    d->mol_atom = gs_alloc_up(b, g->mol_atom, (M + 1) * sizeof(int32_t), &st);
    d->n_mols = g->n_mols;
    d->n_atoms = g->n_atoms;
    d->n_edges = g->n_edges;
    if (st != MP_OK)
        gs_dev_graph_free(b, d);
    return st;
}

/* ===================================================================== */
/* The model and its step                                                 */
/* ===================================================================== */

#define GS_MAX_DEPTH 8

typedef struct {
    mp_backend *b;
    int     fa, h, depth, n_tasks;  /* atom slots incl. mass (133), hidden, depth, outputs */
    double  p;                      /* dropout                                         */
    int32_t max_mols, max_atoms, max_edges;
    size_t  n_params, off_wi, off_wh, off_wo, off_bo, off_w1, off_b1, off_w2, off_b2;
    void   *params, *grads, *adam_m, *adam_v;
    long    t;
    /* activations */
    void   *as, *h0, *m[GS_MAX_DEPTH], *msg[GS_MAX_DEPTH], *a, *ho, *x0, *z1, *y;
    void   *dy, *dz1, *dx0, *dho, *da, *dm, *dh0, *dmsg, *loss, *target;
    uint8_t *mask;
    /* bf16 storage (b->half_acts): dZ_t, dho, W_h and W_o's message rows;
     * half_m: H0 and M_t in bf16 too (allocated at the element size),
     * without dropout only, as model.c */
    int     half, half_m;
    void   *dzh, *dhoh, *whh, *woh;
} gs_model;

static void gs_model_free(gs_model *m)
{
    mp_backend *b = m->b;
    if (!b)
        return;
    void *bufs[] = { m->params, m->grads, m->adam_m, m->adam_v, m->as, m->h0, m->a, m->ho,
                     m->x0, m->z1, m->y, m->dy, m->dz1, m->dx0, m->dho, m->da, m->dm, m->dh0,
                     m->dmsg, m->loss, m->target, m->mask, m->dzh, m->dhoh, m->whh };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        b->free(b, bufs[i]);
    for (int t = 0; t < GS_MAX_DEPTH; t++) {
        b->free(b, m->m[t]);
        b->free(b, m->msg[t]);
    }
    memset(m, 0, sizeof *m);
}

/*
 * A model with parameters drawn from mp_rng(seed, 1) (normal, std
 * sqrt(2 / (fan_in + fan_out)); biases small normal so their gradients
 * matter), zero Adam moments, activations for up to the given batch bounds,
 * and random targets with ~10% missing labels.  The same seed gives the same
 * numbers on every backend.
 */
static mp_status gs_model_create(gs_model *m, mp_backend *b, int fa, int h, int depth,
                                 int n_tasks, double p, int32_t max_mols, int32_t max_atoms,
                                 int32_t max_edges, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    if (depth < 1 || depth > GS_MAX_DEPTH || fa < 2 || h < 1 || n_tasks < 1)
        return mp_error_set(MP_ERR_ARG, "gs_model_create: bad shape");
    m->b = b;
    m->fa = fa;
    m->h = h;
    m->depth = depth;
    m->n_tasks = n_tasks;
    m->p = p;
    m->max_mols = max_mols;
    m->max_atoms = max_atoms;
    m->max_edges = max_edges;
    size_t H = (size_t)h, off = 0;
    m->off_wi = off; off += (size_t)(fa + MP_BOND_FDIM) * H;
    m->off_wh = off; off += H * H;
    m->off_wo = off; off += (size_t)(fa + h) * H;
    m->off_bo = off; off += H;
    m->off_w1 = off; off += H * H;
    m->off_b1 = off; off += H;
    m->off_w2 = off; off += H * (size_t)n_tasks;
    m->off_b2 = off; off += (size_t)n_tasks;
    m->n_params = off;

    size_t es = b->esize, E = (size_t)(max_edges ? max_edges : 1),
           A = (size_t)(max_atoms ? max_atoms : 1), M = (size_t)(max_mols ? max_mols : 1),
           T = (size_t)n_tasks;
    int ok = 1;
#define GS_ALLOC(field, n) ok = ok && ((field) = b->alloc(b, (size_t)(n) * es)) != NULL
    GS_ALLOC(m->params, m->n_params);
    GS_ALLOC(m->grads, m->n_params);
    GS_ALLOC(m->adam_m, m->n_params);
    GS_ALLOC(m->adam_v, m->n_params);
    GS_ALLOC(m->as, A * H);
    GS_ALLOC(m->h0, E * H);
    for (int t = 0; t < depth; t++) {
        GS_ALLOC(m->m[t], E * H);
        if (t)
            GS_ALLOC(m->msg[t], E * H);
    }
    GS_ALLOC(m->a, A * H);
    GS_ALLOC(m->ho, A * H);
    GS_ALLOC(m->x0, M * H);
    GS_ALLOC(m->z1, M * H);
    GS_ALLOC(m->y, M * T);
    GS_ALLOC(m->dy, M * T);
    GS_ALLOC(m->dz1, M * H);
    GS_ALLOC(m->dx0, M * H);
    GS_ALLOC(m->dho, A * H);
    GS_ALLOC(m->da, A * H);
    GS_ALLOC(m->dm, E * H);
    GS_ALLOC(m->dh0, E * H);
    GS_ALLOC(m->dmsg, E * H);
    GS_ALLOC(m->loss, 1);
    GS_ALLOC(m->target, M * T);
#undef GS_ALLOC
    ok = ok && (m->mask = b->alloc(b, M * T)) != NULL;
    m->half = b->half_acts;
    m->half_m = m->half && b->edge_embed_relu_bf16 && b->relu_dropout_bf16 && !(p > 0);
    if (m->half) {
        ok = ok && (m->dzh = b->alloc(b, E * H * 2)) != NULL;
        ok = ok && (m->dhoh = b->alloc(b, A * H * 2)) != NULL;
        /* W_h and W_o's bf16 copy; woh = its W_o message rows (not freed) */
        ok = ok && (m->whh = b->alloc(b, (2 * H + (size_t)fa) * H * 2)) != NULL;
        m->woh = m->whh ? (char *)m->whh + (H + (size_t)fa) * H * 2 : NULL;
    }
    if (!ok) {
        gs_model_free(m);
        return MP_ERR_NOMEM;
    }

    mp_rng r;
    mp_rng_seed(&r, seed, 1);
    size_t nh = m->n_params > M * T ? m->n_params : M * T;
    float *hp = mp_malloc(nh * sizeof(float));
    uint8_t *hm = mp_malloc(M * T);
    if (!hp || !hm) {
        mp_free(hp);
        mp_free(hm);
        gs_model_free(m);
        return mp_error_set(MP_ERR_NOMEM, "gs_model_create: out of memory");
    }
    struct { size_t off; int fin, fout; } w[] = {
        { m->off_wi, fa + MP_BOND_FDIM, h }, { m->off_wh, h, h }, { m->off_wo, fa + h, h },
        { m->off_w1, h, h }, { m->off_w2, h, n_tasks },
    };
    for (size_t i = 0; i < m->n_params; i++)
        hp[i] = (float)(0.05 * mp_rng_normal(&r));           /* biases */
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        double sd = sqrt(2.0 / (w[k].fin + w[k].fout));
        for (size_t i = 0; i < (size_t)w[k].fin * w[k].fout; i++)
            hp[w[k].off + i] = (float)(sd * mp_rng_normal(&r));
    }
    mp_status st = gs_put(b, m->params, hp, m->n_params);
    memset(hp, 0, m->n_params * sizeof(float));
    if (st == MP_OK)
        st = gs_put(b, m->adam_m, hp, m->n_params);
    if (st == MP_OK)
        st = gs_put(b, m->adam_v, hp, m->n_params);
    for (size_t i = 0; i < M * T; i++) {
        hp[i] = (float)mp_rng_normal(&r);
        hm[i] = mp_rng_uniform(&r) < 0.9;
    }
    if (st == MP_OK)
        st = gs_put(b, m->target, hp, M * T);
    if (st == MP_OK)
        st = b->upload(b, m->mask, hm, M * T);
    mp_free(hp);
    mp_free(hm);
    if (st != MP_OK)
        gs_model_free(m);
    return st;
}

#define GS_P(off) GS_AT(b, m->params, off)
#define GS_G(off) GS_AT(b, m->grads, off)

/* Forward over the batch into m->y (dropout keys derived from `key`). */
static void gs_forward(gs_model *m, const gs_dev_graph *g, uint64_t key)
{
    mp_backend *b = m->b;
    const int h = m->h, fa = m->fa, T = m->n_tasks;
    const int32_t na = g->n_atoms, ne = g->n_edges, nm = g->n_mols;
    const size_t edge_elems = (size_t)ne * h;
    void *wi = GS_P(m->off_wi), *wh = GS_P(m->off_wh), *wo = GS_P(m->off_wo);

    b->atom_embed(b, m->as, g->atom_hot, g->atom_mass, wi, NULL, na, h, fa - 1);
    if (m->half_m) {   /* bf16 H0 and M_0, as models/dmpnn.c */
        b->edge_embed_relu_bf16(b, m->h0, m->m[0], g->edge_src, g->bond_hot, m->as,
                                GS_AT(b, wi, (size_t)fa * h), ne, h);
    } else if (b->edge_embed_relu) {   /* fused, as models/dmpnn.c (training) */
        b->edge_embed_relu(b, m->h0, m->m[0], g->edge_src, g->bond_hot, m->as,
                           GS_AT(b, wi, (size_t)fa * h), ne, h);
    } else {
        b->edge_embed(b, m->h0, g->edge_src, g->bond_hot, m->as, GS_AT(b, wi, (size_t)fa * h),
                      ne, h);
        b->relu_dropout(b, m->m[0], m->h0, edge_elems, 0.0, 0);
    }
    void *wom = GS_AT(b, wo, (size_t)fa * h);
    if (m->half)   /* bf16 operands, as models/dmpnn.c: W_h and W_o (consecutive) */
        b->to_bf16(b, m->whh, wh, (size_t)(2 * h + fa) * h);
    for (int t = 1; t < m->depth; t++) {
        if (m->half)
            b->message_bf16(b, m->msg[t], m->as, g->in_start, g->in_edge, g->edge_src,
                            m->m[t - 1], m->half_m, na, ne, h);
        else if (b->message_direct)   /* fused, as models/dmpnn.c */
            b->message_direct(b, m->msg[t], g->in_start, g->in_edge, g->edge_src, m->m[t - 1],
                              0, na, ne, h);
        else
            b->message(b, m->msg[t], m->as, g->in_start, g->in_edge, g->edge_src, m->m[t - 1],
                       na, ne, h);
        if (m->half || b->gemm_res_relu) {   /* fused, as models/dmpnn.c */
            if (m->half)
                b->gemm_res_relu_bf16(b, ne, h, h, m->msg[t], h, m->whh, h, m->h0, h, m->m[t], h,
                                      m->half_m);
            else
                b->gemm_res_relu(b, ne, h, h, m->msg[t], h, wh, h, m->h0, h, m->m[t], h);
            if (m->p > 0 && m->half_m)
                b->relu_dropout_bf16(b, m->m[t], m->m[t], edge_elems, m->p, key + (uint64_t)t);
            else if (m->p > 0)
                b->relu_dropout(b, m->m[t], m->m[t], edge_elems, m->p, key + (uint64_t)t);
            continue;
        }
        b->copy(b, m->m[t], m->h0, edge_elems * b->esize);
        b->gemm(b, 0, 0, ne, h, h, 1.0, m->msg[t], h, wh, h, 1.0, m->m[t], h);
        b->relu_dropout(b, m->m[t], m->m[t], edge_elems, m->p, key + (uint64_t)t);
    }
    if (m->half)
        b->atom_sum_bf16(b, m->a, g->in_start, g->in_edge, m->m[m->depth - 1], m->half_m, na, h);
    else
        b->atom_sum(b, m->a, g->in_start, g->in_edge, m->m[m->depth - 1], na, h);
    b->atom_embed(b, m->ho, g->atom_hot, g->atom_mass, wo, GS_P(m->off_bo), na, h, fa - 1);
    if (m->half || b->gemm_res_relu) {
        if (m->half)
            b->gemm_res_relu_bf16(b, na, h, h, m->a, h, m->woh, h, m->ho, h, m->ho, h, 0);
        else
            b->gemm_res_relu(b, na, h, h, m->a, h, wom, h, m->ho, h, m->ho, h);
        if (m->p > 0)
            b->relu_dropout(b, m->ho, m->ho, (size_t)na * h, m->p, key + 100);
    } else {
        b->gemm(b, 0, 0, na, h, h, 1.0, m->a, h, wom, h, 1.0, m->ho, h);
        b->relu_dropout(b, m->ho, m->ho, (size_t)na * h, m->p, key + 100);
    }
    b->pool(b, m->x0, h, g->mol_atom, m->ho, nm, h, MP_AGG_MEAN, 100.0);
    /* head: z1 = ReLU(x0 W1 + b1), y = z1 W2 + b2 */
    b->fill_rows(b, m->z1, h, GS_P(m->off_b1), nm, h);
    b->gemm(b, 0, 0, nm, h, h, 1.0, m->x0, h, GS_P(m->off_w1), h, 1.0, m->z1, h);
    b->relu_dropout(b, m->z1, m->z1, (size_t)nm * h, 0.0, 0);
    b->fill_rows(b, m->y, T, GS_P(m->off_b2), nm, T);
    b->gemm(b, 0, 0, nm, T, h, 1.0, m->z1, h, GS_P(m->off_w2), T, 1.0, m->y, T);
}

/* Loss and backward for the last forward, gradients added into m->grads. */
static void gs_backward(gs_model *m, const gs_dev_graph *g)
{
    mp_backend *b = m->b;
    const int h = m->h, fa = m->fa, T = m->n_tasks;
    const int32_t na = g->n_atoms, ne = g->n_edges, nm = g->n_mols;
    const size_t edge_elems = (size_t)ne * h;
    void *wh = GS_P(m->off_wh), *wo = GS_P(m->off_wo);

    b->loss(b, m->loss, m->dy, m->y, m->target, m->mask, nm, T, MP_LOSS_MSE);
    /* head */
    /* each layer's two backward products (dW = X^T dY, dX = dY W^T) go
     * together through gemm_batch, as the models do */
    b->col_sum(b, GS_G(m->off_b2), m->dy, T, nm, T);
    mp_gemm g2[2] = {
        { 1, 0, h, T, nm, 1.0, 1.0, m->z1, m->dy, GS_G(m->off_w2), h, T, T },
        { 0, 1, nm, h, T, 1.0, 0.0, m->dy, GS_P(m->off_w2), m->dz1, T, T, h },
    };
    b->gemm_batch(b, 2, g2);
    b->relu_dropout_backward(b, m->dz1, m->z1, m->dz1, (size_t)nm * h, 0.0);
    b->col_sum(b, GS_G(m->off_b1), m->dz1, h, nm, h);
    mp_gemm g1[2] = {
        { 1, 0, h, h, nm, 1.0, 1.0, m->x0, m->dz1, GS_G(m->off_w1), h, h, h },
        { 0, 1, nm, h, h, 1.0, 0.0, m->dz1, GS_P(m->off_w1), m->dx0, h, h, h },
    };
    b->gemm_batch(b, 2, g1);
    /* readout */
    b->pool_backward(b, m->dho, g->mol_atom, m->dx0, h, nm, h, MP_AGG_MEAN, 100.0);
    if (m->half)
        b->relu_dropout_backward_bf16(b, m->dho, m->dhoh, m->ho, m->dho, (size_t)na * h, m->p);
    else
        b->relu_dropout_backward(b, m->dho, m->ho, m->dho, (size_t)na * h, m->p);
    b->col_sum(b, GS_G(m->off_bo), m->dho, h, na, h);
    void *dz_o = m->half ? m->dhoh : m->dho, *wom = m->half ? m->woh : GS_AT(b, wo, (size_t)fa * h);
    mp_gemm go[2] = {
        { 1, 0, h, h, na, 1.0, 1.0, m->a, dz_o, GS_AT(b, GS_G(m->off_wo), (size_t)fa * h), h, h,
          h },
        { 0, 1, na, h, h, 1.0, 0.0, dz_o, wom, m->da, h, h, h },
    };
    if (m->half)
        b->gemm_batch_bf16(b, 2, go, 0);
    else
        b->gemm_batch(b, 2, go);
    b->atom_embed_backward(b, GS_G(m->off_wo), g->atom_hot, g->atom_mass, m->dho, na, h, fa - 1);
    if (m->half)   /* gather + first ReLU backward, as models/dmpnn.c */
        b->atom_sum_backward_relu_bf16(b, m->dh0, m->dzh, g->edge_dst, m->da, m->m[m->depth - 1],
                                       m->half_m, m->depth > 1 ? m->p : 0.0, ne, h);
    else
        b->atom_sum_backward(b, m->dm, g->edge_dst, m->da, ne, h);
    /* message steps, last first */
    if ((m->half || b->message_backward_relu) && m->depth > 1) {   /* fused, as models/dmpnn.c */
        if (!m->half)
            b->relu_dropout_backward(b, m->dh0, m->m[m->depth - 1], m->dm, edge_elems, m->p);
        void *dz = m->half ? m->dzh : m->dh0, *whp = m->half ? m->whh : wh;
        for (int t = m->depth - 1; t >= 1; t--) {
            mp_gemm gh[2] = {
                { 1, 0, h, h, ne, 1.0, 1.0, m->msg[t], dz, GS_G(m->off_wh), h, h, h },
                { 0, 1, ne, h, h, 1.0, 0.0, dz, whp, m->dmsg, h, h, h },
            };
            double pt = t - 1 >= 1 ? m->p : 0.0;
            if (m->half) {
                b->gemm_batch_bf16(b, 2, gh, 2u);   /* dmsg in bf16 */
                b->message_backward_relu_bf16(b, m->dzh, m->dh0, m->da, g->in_start, g->in_edge,
                                              g->edge_dst, m->dmsg, m->m[t - 1], m->half_m, pt,
                                              na, ne, h);
                continue;
            }
            b->gemm_batch(b, 2, gh);
            b->message_backward_relu(b, m->dm, m->dh0, m->da, g->in_start, g->in_edge,
                                     g->edge_dst, m->dmsg, m->m[t - 1], pt, na, ne, h);
            dz = m->dm;
        }
        b->edge_embed_backward(b, m->da, GS_AT(b, GS_G(m->off_wi), (size_t)fa * h), g->in_start,
                               g->in_edge, g->bond_hot, m->dh0, na, ne, h);
        b->atom_embed_backward(b, GS_G(m->off_wi), g->atom_hot, g->atom_mass, m->da, na, h,
                               fa - 1);
        return;
    }
    if (m->half) {   /* depth 1: dh0 holds dZ_0 (the gather above) */
        b->edge_embed_backward(b, m->da, GS_AT(b, GS_G(m->off_wi), (size_t)fa * h), g->in_start,
                               g->in_edge, g->bond_hot, m->dh0, na, ne, h);
        b->atom_embed_backward(b, GS_G(m->off_wi), g->atom_hot, g->atom_mass, m->da, na, h,
                               fa - 1);
        return;
    }
    int first = 1;
    for (int t = m->depth - 1; t >= 1; t--) {
        void *dz = first ? m->dh0 : m->dm;
        b->relu_dropout_backward(b, dz, m->m[t], m->dm, edge_elems, m->p);
        if (!first)
            b->add(b, m->dh0, dz, edge_elems);
        first = 0;
        mp_gemm gh[2] = {
            { 1, 0, h, h, ne, 1.0, 1.0, m->msg[t], dz, GS_G(m->off_wh), h, h, h },
            { 0, 1, ne, h, h, 1.0, 0.0, dz, wh, m->dmsg, h, h, h },
        };
        b->gemm_batch(b, 2, gh);
        b->message_backward(b, m->dm, m->da, g->in_start, g->in_edge, g->edge_dst, m->dmsg, na,
                            ne, h);
    }
    if (first) {
        b->relu_dropout_backward(b, m->dh0, m->m[0], m->dm, edge_elems, 0.0);
    } else {
        b->relu_dropout_backward(b, m->dm, m->m[0], m->dm, edge_elems, 0.0);
        b->add(b, m->dh0, m->dm, edge_elems);
    }
    b->edge_embed_backward(b, m->da, GS_AT(b, GS_G(m->off_wi), (size_t)fa * h), g->in_start,
                           g->in_edge, g->bond_hot, m->dh0, na, ne, h);
    b->atom_embed_backward(b, GS_G(m->off_wi), g->atom_hot, g->atom_mass, m->da, na, h, fa - 1);
}

/* One whole training step: zero the gradients, forward, loss, backward,
 * Adam (lr 1e-3, Chemprop's betas and eps).  Device ops only. */
static void gs_step(gs_model *m, const gs_dev_graph *g, uint64_t key)
{
    mp_backend *b = m->b;
    b->zero(b, m->grads, m->n_params * b->esize);
    gs_forward(m, g, key);
    gs_backward(m, g);
    m->t++;
    b->adam(b, m->params, m->adam_m, m->adam_v, m->grads, m->n_params, 1e-3, 0.9, 0.999, 1e-8,
            0.0, m->t);
}

#undef GS_P
#undef GS_G

#endif /* MP_BENCH_GPU_STEP_H */
