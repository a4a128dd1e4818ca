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
 * Storage (model.c, from the backend's act_st; ops.h): the operands of the
 * dense products (msg[t], a, dZ_t, dho and the weights W_h and W_o's
 * message rows) are of storage st_op, H0 and the messages M_t of st_m.  On
 * fp32 backends both are the element type and the products read the
 * activations and parameters themselves; at bf16 the ops that make them
 * write them (or a copy beside the fp32 value that is also summed: dZ into
 * dH0, dho) in bf16, and the weights are converted at the start of every
 * forward.  One sequence of ops serves every precision: only the buffers and
 * the storage types passed with them differ.
 *
 * The layers of the training options (another activation, undirected or
 * atom messages) take the unfused form of encoder.c; the readout (pooling
 * or attention, batch norm) is readout.c's.
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
    if (m->generic) {
        mp_encoder_forward(m, training);
        return;
    }
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const int h = m->h, fa = m->cfg.atom_fdim, depth = m->cfg.depth;
    const int32_t na = g->n_atoms, ne = g->n_edges;
    const size_t edge_elems = (size_t)ne * h;
    const double p = m->p;
    const mp_stype so = m->st_op, sm = m->st_m;
    void *wi = P(m->off_wi), *wh = P(m->off_wh), *wo = P(m->off_wo), *bo = P(m->off_bo);

    /* H0 = W_i [x_u ; b_uv]: the atom part once per atom, then per edge the
     * source atom's row plus the bond's rows, and M_0 = ReLU(H0) in the same
     * pass.  An inference forward does not store M_0: the first message step
     * reads H0 through the ReLU (training keeps it: backward needs it, and
     * so does atom_sum when depth is 1). */
    const int m0_virtual = !training && depth > 1;
    b->atom_embed(b, a->as, g->atom_hot, g->atom_mass, wi, NULL, na, h, fa - 1);
    b->edge_embed(b, a->h0, m0_virtual ? NULL : a->m[0], sm, g->edge_src, g->bond_hot, a->as,
                  MP_AT(m, wi, (size_t)fa * h), ne, h);

    /* The weight operands in st_op storage, once per forward: W_h and W_o
     * (consecutive in the parameter block) in one pass. */
    if (a->whcopy) {
        MP_ASSERT(m->off_wo == m->off_wh + (size_t)h * h);
        b->copy2d(b, a->whcopy, so, h, wh, MP_ST_ELEM, h, 2 * h + fa, h);
    }
    for (int t = 1; t < depth; t++) {
        const int virt = t == 1 && m0_virtual;
        const void *mp = virt ? a->h0 : a->m[t - 1];
        /* M_t = ReLU(H0 + msg W_h): the residual is the pre-activation H0;
         * dropout layer t-1 after it (dropout.c: its key, eager or device):
         * dropout of ReLU(ReLU(x)) is exactly relu_dropout of x.  Where the
         * backend fuses the step (ops.h message_update), an inference
         * forward's message stays on chip; a training forward's is written
         * once for the backward, and not read back. */
        if (!b->message_update ||
            !b->message_update(b, a->m[t], a->h0, sm, a->as, g->in_start, g->in_edge,
                               g->edge_src, mp, sm, virt, a->wh_op, so, na, ne, h,
                               training ? a->msg[t] : NULL)) {
            b->message(b, a->msg[t], so, a->as, g->in_start, g->in_edge, g->edge_src, mp, sm,
                       virt, na, ne, h);
            b->gemm_res_relu(b, ne, h, h, a->msg[t], h, a->wh_op, h, so, a->h0, h, a->m[t], h,
                             sm);
        }
        if (p > 0)
            mp_model_relu_dropout(m, a->m[t], a->m[t], sm, edge_elems, p, t - 1);
    }

    /* Readout: h_v = Dropout(ReLU(W_o [x_v ; a_v] + b_o)), in place in ho;
     * dropout layer depth-1. */
    b->atom_sum(b, a->a, so, g->in_start, g->in_edge, a->m[depth - 1], sm, na, h);
    b->atom_embed(b, a->ho, g->atom_hot, g->atom_mass, wo, bo, na, h, fa - 1);
    b->gemm_res_relu(b, na, h, h, a->a, h, a->wo_op, h, so, a->ho, h, a->ho, h, MP_ST_ELEM);
    if (p > 0)
        mp_model_relu_dropout(m, a->ho, a->ho, MP_ST_ELEM, (size_t)na * h, p, depth - 1);

    mp_readout_forward(m, training);
}

void mp_dmpnn_backward(mp_model *m, const void *dx0)
{
    if (m->generic) {
        mp_encoder_backward(m, dx0);
        return;
    }
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const int h = m->h, fa = m->cfg.atom_fdim, depth = m->cfg.depth;
    const int32_t na = g->n_atoms, ne = g->n_edges;
    const double p = m->p;
    const mp_stype so = m->st_op, sm = m->st_m, se = MP_ST_ELEM;

    /* Readout; dho_op: dho as the products read it. */
    mp_readout_backward(m, dx0);
    b->relu_dropout_backward(b, a->dho, a->dho_op, so, a->ho, se, a->dho, (size_t)na * h, p);
    b->col_sum(b, G(m->off_bo), a->dho, h, na, h);
    /* dW_o (message rows) += A^T dZ and dA = dZ W_o^T: independent, one call */
    mp_gemm ro[2] = {
        { 1, 0, h, h, na, 1.0, 1.0, a->a, a->dho_op, MP_AT(m, G(m->off_wo), (size_t)fa * h), h, h,
          h, so, so, se },
        { 0, 1, na, h, h, 1.0, 0.0, a->dho_op, a->wo_op, a->da, h, h, h, so, so, se },
    };
    b->gemm(b, 2, ro);
    b->atom_embed_backward(b, G(m->off_wo), g->atom_hot, g->atom_mass, a->dho, na, h, fa - 1);

    /* The gather of dA and the ReLU / dropout backward of M_{depth-1} in one
     * pass: dh0 = dZ_{depth-1} (M_0 = ReLU(H0) has no dropout).  dz: dZ as
     * the products read it (its st_op copy, or dh0 itself). */
    void *dz = a->dz_op ? a->dz_op : a->dh0;
    b->atom_sum_backward(b, a->dh0, dz, so, g->edge_dst, a->da, a->m[depth - 1], sm,
                         depth > 1 ? p : 0.0, ne, h);

    /* Message steps, last first: dW_h += msg^T dZ and dMsg = dZ W_h^T, then
     * message_backward makes dZ_{t-1} (the ReLU / dropout backward of
     * M_{t-1} fused in) into dm or dz_op, and adds it into dh0 unrounded. */
    for (int t = depth - 1; t >= 1; t--) {
        mp_gemm st[2] = {
            { 1, 0, h, h, ne, 1.0, 1.0, a->msg[t], dz, G(m->off_wh), h, h, h, so, so, se },
            { 0, 1, ne, h, h, 1.0, 0.0, dz, a->wh_op, a->dmsg, h, h, h, so, so, so },
        };
        b->gemm(b, 2, st);
        dz = a->dz_op ? a->dz_op : a->dm;
        b->message_backward(b, dz, so, a->dh0, a->da, g->in_start, g->in_edge, g->edge_dst,
                            a->dmsg, so, a->m[t - 1], sm, t - 1 >= 1 ? p : 0.0, na, ne, h);
    }

    /* W_i: bond rows from every edge, atom rows from the edges each atom sends. */
    b->edge_embed_backward(b, a->da, MP_AT(m, G(m->off_wi), (size_t)fa * h), g->in_start,
                           g->in_edge, g->bond_hot, a->dh0, na, ne, h);
    b->atom_embed_backward(b, G(m->off_wi), g->atom_hot, g->atom_mass, a->da, na, h, fa - 1);
}
