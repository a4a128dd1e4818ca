/*
 * dmpnn.c - the directed message-passing encoder, Chemprop v1's
 * MPNEncoder.forward (REFERENCE.md 2.1), written against the backend ops.
 *
 *   H0   = W_i [x_u ; b_uv]                per directed edge, no bias
 *   M_0  = ReLU(H0)
 *   M_t  = Dropout(ReLU(H0 + W_h (S[src] - M_{t-1}[rev])))   t = 1..depth-1,
 *          S[v] = sum of the messages entering v
 *   a_v  = sum of M_{depth-1} entering v
 *   h_v  = Dropout(ReLU(W_o [x_v ; a_v] + b_o))
 *   mol  = mean (sum, norm) of h_v over the molecule's atoms
 *
 * Because x_u and b_uv are one-hot (plus the mass scalar), W_i [x_u ; b_uv]
 * and W_o's atom part are sums of a few weight rows: gathers forward,
 * scatters backward (atom_embed, edge_embed), not dense products.  The dense
 * work is W_h (depth-1 times; two products each backward) and W_o's message
 * part, each one gemm over the whole batch.
 *
 * bf16 storage (m->half, from b->half_acts; ops.h): the operands of the
 * dense products (msg[t], a, dZ_t, dho and bf16 copies of W_h and W_o's
 * message rows, made at the start of each forward) are written in bf16 by
 * the ops that produce them, and the products read them so; so is dMsg, a
 * product's output read only by message_backward_relu_bf16.  Everything
 * else stays of the element type.
 *
 * Weight layout (rows = fan_in): W_i [(F_a + 14) x h], atom rows first, the
 * mass row is F_a - 1; W_h [h x h]; W_o [(F_a + h) x h], atom rows first;
 * b_o [h].  This matches Chemprop's input order [f_atoms[src] ; f_bond] and
 * [f_atoms ; a_message].
 */
#include "models/model_impl.h"

#define P(off) MP_AT(m, m->params, off)
#define G(off) MP_AT(m, m->grads, off)

void mp_dmpnn_forward(mp_model *m, int training)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const int h = m->h, fa = m->cfg.atom_fdim, depth = m->cfg.depth;
    const int32_t na = g->n_atoms, ne = g->n_edges;
    const size_t edge_elems = (size_t)ne * h;
    const double p = m->p;
    void *wi = P(m->off_wi), *wh = P(m->off_wh), *wo = P(m->off_wo), *bo = P(m->off_bo);

    /* H0 = W_i [x_u ; b_uv]: the atom part once per atom, then per edge the
     * source atom's row plus the bond's rows. */
    b->atom_embed(b, a->as, g->atom_hot, g->atom_mass, wi, NULL, na, h, fa - 1);
    /* Inference with message_direct reads M_0 through ReLU from H0 in the
     * first message step: M_0 is not stored (training keeps it: backward
     * needs it, and so does atom_sum when depth is 1).  Not with bf16
     * storage, whose message step is message_bf16. */
    const int m0_virtual = !training && !m->half && b->message_direct && depth > 1;
    if (m->half_m) {
        /* bf16 H0 and M_0 = ReLU(H0), one pass */
        b->edge_embed_relu_bf16(b, a->h0, a->m[0], g->edge_src, g->bond_hot, a->as,
                                MP_AT(m, wi, (size_t)fa * h), ne, h);
    } else if (m0_virtual) {
        b->edge_embed(b, a->h0, g->edge_src, g->bond_hot, a->as, MP_AT(m, wi, (size_t)fa * h),
                      ne, h);
    } else if (b->edge_embed_relu) {
        /* fused (ops.h): H0 and M_0 = ReLU(H0) in one pass */
        b->edge_embed_relu(b, a->h0, a->m[0], g->edge_src, g->bond_hot, a->as,
                           MP_AT(m, wi, (size_t)fa * h), ne, h);
    } else {
        b->edge_embed(b, a->h0, g->edge_src, g->bond_hot, a->as, MP_AT(m, wi, (size_t)fa * h),
                      ne, h);
        b->relu_dropout(b, a->m[0], a->h0, edge_elems, 0.0, 0);
    }

    void *wom = MP_AT(m, wo, (size_t)fa * h);       /* W_o's message rows */
    if (m->half) {
        /* the products' weight operands in bf16, once per forward: W_h and
         * W_o (consecutive in the parameter block) in one pass */
        MP_ASSERT(m->off_wo == m->off_wh + (size_t)h * h);
        b->to_bf16(b, a->whh, wh, (size_t)(2 * h + fa) * h);
    }
    for (int t = 1; t < depth; t++) {
        if (m->half)
            b->message_bf16(b, a->msg[t], a->as, g->in_start, g->in_edge, g->edge_src,
                            a->m[t - 1], m->half_m, na, ne, h);
        else if (b->message_direct)   /* fused (ops.h): no scratch sums */
            b->message_direct(b, a->msg[t], g->in_start, g->in_edge, g->edge_src,
                              t == 1 && m0_virtual ? a->h0 : a->m[t - 1], t == 1 && m0_virtual,
                              na, ne, h);
        else
            b->message(b, a->msg[t], a->as, g->in_start, g->in_edge, g->edge_src, a->m[t - 1],
                       na, ne, h);
        /* M_t = H0 + msg W_h: the residual is the pre-activation H0;
         * dropout layer t-1 (dropout.c: its key, eager or device-keyed) */
        if (m->half || b->gemm_res_relu) {
            /* fused residual + ReLU (ops.h); dropout, if any, after it:
             * dropout of ReLU(ReLU(x)) is exactly relu_dropout of x.  (bf16
             * M_t only without dropout: model.c) */
            if (m->half)
                b->gemm_res_relu_bf16(b, ne, h, h, a->msg[t], h, a->whh, h, a->h0, h, a->m[t], h,
                                      m->half_m);
            else
                b->gemm_res_relu(b, ne, h, h, a->msg[t], h, wh, h, a->h0, h, a->m[t], h);
            if (p > 0)
                mp_model_relu_dropout(m, a->m[t], a->m[t], edge_elems, p, t - 1);
            continue;
        }
        b->copy(b, a->m[t], a->h0, edge_elems * m->esize);
        b->gemm(b, 0, 0, ne, h, h, 1.0, a->msg[t], h, wh, h, 1.0, a->m[t], h);
        mp_model_relu_dropout(m, a->m[t], a->m[t], edge_elems, p, t - 1);
    }

    /* Readout: h_v = Dropout(ReLU(W_o [x_v ; a_v] + b_o)), dropout layer
     * depth-1. */
    if (m->half)
        b->atom_sum_bf16(b, a->a, g->in_start, g->in_edge, a->m[depth - 1], m->half_m, na, h);
    else
        b->atom_sum(b, a->a, g->in_start, g->in_edge, a->m[depth - 1], na, h);
    b->atom_embed(b, a->ho, g->atom_hot, g->atom_mass, wo, bo, na, h, fa - 1);
    if (m->half || b->gemm_res_relu) {
        /* in place: ho = ReLU(ho + a W_o), then the dropout if any */
        if (m->half)
            b->gemm_res_relu_bf16(b, na, h, h, a->a, h, a->woh, h, a->ho, h, a->ho, h, 0);
        else
            b->gemm_res_relu(b, na, h, h, a->a, h, wom, h, a->ho, h, a->ho, h);
        if (p > 0)
            mp_model_relu_dropout(m, a->ho, a->ho, (size_t)na * h, p, depth - 1);
    } else {
        b->gemm(b, 0, 0, na, h, h, 1.0, a->a, h, wom, h, 1.0, a->ho, h);
        mp_model_relu_dropout(m, a->ho, a->ho, (size_t)na * h, p, depth - 1);
    }

    b->pool(b, a->x0, m->in_dim, g->mol_atom, a->ho, g->n_mols, h, m->cfg.aggregation,
            m->cfg.agg_norm);
    if (m->cfg.extra_dim > 0)
        b->copy2d(b, MP_AT(m, a->x0, h), m->in_dim, a->extra, m->cfg.extra_dim, g->n_mols,
                  m->cfg.extra_dim);
}

void mp_dmpnn_backward(mp_model *m, const void *dx0)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const int h = m->h, fa = m->cfg.atom_fdim, depth = m->cfg.depth;
    const int32_t na = g->n_atoms, ne = g->n_edges;
    const size_t edge_elems = (size_t)ne * h;
    const double p = m->p;
    void *wh = P(m->off_wh), *wo = P(m->off_wo);

    /* Readout. */
    b->pool_backward(b, a->dho, g->mol_atom, dx0, m->in_dim, g->n_mols, h, m->cfg.aggregation,
                     m->cfg.agg_norm);
    if (m->half)
        b->relu_dropout_backward_bf16(b, a->dho, a->dhoh, a->ho, a->dho, (size_t)na * h, p);
    else
        b->relu_dropout_backward(b, a->dho, a->ho, a->dho, (size_t)na * h, p);
    b->col_sum(b, G(m->off_bo), a->dho, h, na, h);
    /* dW_o (message rows) += A^T dZ and dA = dZ W_o^T: independent, one batch */
    void *dz_o = m->half ? a->dhoh : a->dho;
    void *wom = m->half ? a->woh : MP_AT(m, wo, (size_t)fa * h);
    mp_gemm ro[2] = {
        { 1, 0, h, h, na, 1.0, 1.0, a->a, dz_o, MP_AT(m, G(m->off_wo), (size_t)fa * h), h, h, h },
        { 0, 1, na, h, h, 1.0, 0.0, dz_o, wom, a->da, h, h, h },
    };
    if (m->half)
        b->gemm_batch_bf16(b, 2, ro, 0);
    else
        b->gemm_batch(b, 2, ro);
    b->atom_embed_backward(b, G(m->off_wo), g->atom_hot, g->atom_mass, a->dho, na, h, fa - 1);
    if (m->half) {
        /* bf16: the gather of dA and the first ReLU backward in one pass
         * (M_0 = ReLU(H0) has no dropout) */
        b->atom_sum_backward_relu_bf16(b, a->dh0, a->dzh, g->edge_dst, a->da, a->m[depth - 1],
                                       m->half_m, depth > 1 ? p : 0.0, ne, h);
    } else {
        b->atom_sum_backward(b, a->dm, g->edge_dst, a->da, ne, h);
    }

    /* Message steps, last first.  dm holds d loss / d M_t on entry.  The
     * first dZ goes straight into dh0 (no copy), later ones are added. */
    if ((m->half || b->message_backward_relu) && depth > 1) {
        /* Fused (ops.h): each message_backward also applies the ReLU /
         * dropout backward of M_{t-1} and adds the result into dh0, so dm
         * leaves it holding dZ_{t-1}: the same ops as the loop below.  In
         * bf16 (m->half) dZ goes to the products as dzh, rounded; dh0 sums
         * it unrounded. */
        if (!m->half)   /* (bf16: done above, with the gather) */
            b->relu_dropout_backward(b, a->dh0, a->m[depth - 1], a->dm, edge_elems, p);
        void *dz = m->half ? a->dzh : a->dh0, *whp = m->half ? a->whh : wh;
        for (int t = depth - 1; t >= 1; t--) {
            mp_gemm st[2] = {
                { 1, 0, h, h, ne, 1.0, 1.0, a->msg[t], dz, G(m->off_wh), h, h, h },
                { 0, 1, ne, h, h, 1.0, 0.0, dz, whp, a->dmsg, h, h, h },
            };
            double pt = t - 1 >= 1 ? p : 0.0;
            if (m->half) {
                b->gemm_batch_bf16(b, 2, st, 2u);   /* dmsg in bf16 */
                b->message_backward_relu_bf16(b, a->dzh, a->dh0, a->da, g->in_start, g->in_edge,
                                              g->edge_dst, a->dmsg, a->m[t - 1], m->half_m, pt,
                                              na, ne, h);
                continue;
            }
            b->gemm_batch(b, 2, st);
            b->message_backward_relu(b, a->dm, a->dh0, a->da, g->in_start, g->in_edge,
                                     g->edge_dst, a->dmsg, a->m[t - 1], pt, na, ne, h);
            dz = a->dm;
        }
    } else if (!m->half) {   /* (bf16, depth 1: dh0 already holds dZ_0, above) */
        int first = 1;
        for (int t = depth - 1; t >= 1; t--) {
            void *dz = first ? a->dh0 : a->dm;
            b->relu_dropout_backward(b, dz, a->m[t], a->dm, edge_elems, p);
            if (!first)
                b->add(b, a->dh0, dz, edge_elems);
            first = 0;
            /* dW_h += msg^T dZ and dmsg = dZ W_h^T */
            mp_gemm st[2] = {
                { 1, 0, h, h, ne, 1.0, 1.0, a->msg[t], dz, G(m->off_wh), h, h, h },
                { 0, 1, ne, h, h, 1.0, 0.0, dz, wh, a->dmsg, h, h, h },
            };
            b->gemm_batch(b, 2, st);
            b->message_backward(b, a->dm, a->da, g->in_start, g->in_edge, g->edge_dst,
                                a->dmsg, na, ne, h);
        }
        /* M_0 = ReLU(H0). */
        if (first) {
            b->relu_dropout_backward(b, a->dh0, a->m[0], a->dm, edge_elems, 0.0);
        } else {
            b->relu_dropout_backward(b, a->dm, a->m[0], a->dm, edge_elems, 0.0);
            b->add(b, a->dh0, a->dm, edge_elems);
        }
    }

    /* W_i: bond rows from every edge, atom rows from the edges each atom sends. */
    b->edge_embed_backward(b, a->da, MP_AT(m, G(m->off_wi), (size_t)fa * h), g->in_start,
                           g->in_edge, g->bond_hot, a->dh0, na, ne, h);
    b->atom_embed_backward(b, G(m->off_wi), g->atom_hot, g->atom_mass, a->da, na, h, fa - 1);
}
