/*
 * encoder.c - the D-MPNN in its unfused form, for the layers of Chemprop's
 * training options that the fused ops of dmpnn.c do not cover: another
 * activation than ReLU (f below), undirected messages (v1's --undirected)
 * and atom messages (v1's --atom_messages).  REFERENCE.md 2.1, with f for
 * the ReLU and every buffer of the element type:
 *
 * bond messages (E rows)                 atom messages (A rows)
 *   H0   = W_i [x_u ; b_uv]                 H0  = W_i x_v
 *   M_0  = f(H0)                            R   = H0 + sum_{k in in(v)} W_hb b_k
 *   (undirected: M <- (M + M[rev]) / 2      M_0 = f(H0)
 *    before each step)                      S_t = sum_{k in in(v)} M_{t-1}[src k]
 *   Z_t  = H0 + W_h (S[src] - M[rev])       Z_t = R + W_hm S_t
 *   M_t  = Dropout(f(Z_t))                  M_t = Dropout(f(Z_t))
 *   a_v  = sum of M_{depth-1} entering v    a_v = sum_{k in in(v)} M_{depth-1}[src k]
 *
 *   h_v = Dropout(f(W_o [x_v ; a_v] + b_o)), then the readout (readout.c).
 *
 * With atom messages W_i has the atom rows only and W_h is [h + 14 x h]: the
 * message rows W_hm, then the bond rows W_hb (v1's cat(message, f_bonds)),
 * whose sum over an atom's incoming bonds is the same in every step, so it
 * joins H0 once, as R.  Each step stores its pre-activation Z_t for the
 * backward; dropout layers draw their keys in dmpnn.c's order (dropout.c)
 * and keep them (m->drop_key) for the backward.
 */
#include "models/model_impl.h"

#define P(off) MP_AT(m, m->params, off)
#define G(off) MP_AT(m, m->grads, off)

/* f and its slope parameter (PReLU) or NULL. */
static const void *act_param(mp_model *m)
{
    return m->cfg.activation == MP_ACT_PRELU ? P(m->off_prelu_enc) : NULL;
}
static void *act_dparam(mp_model *m)
{
    return m->cfg.activation == MP_ACT_PRELU ? G(m->off_prelu_enc) : NULL;
}

/* y = Dropout(f(x)) over rows x h, dropout layer `layer` (its key kept). */
static void act_drop(mp_model *m, void *y, const void *x, int32_t rows, int h, int layer)
{
    mp_backend *b = m->b;
    b->act(b, y, x, (size_t)rows * h, m->cfg.activation, act_param(m));
    if (m->p > 0)
        m->drop_key[layer] = mp_model_dropout(m, y, y, rows, h, h, m->p, layer);
}

/* dx = f'(x) * Dropout'(dy) (dy is overwritten by the dropout's backward). */
static void act_drop_backward(mp_model *m, void *dx, void *dy, const void *x, int32_t rows,
                              int h, int layer)
{
    mp_backend *b = m->b;
    if (m->p > 0)
        mp_model_dropout_backward(m, dy, dy, rows, h, h, m->p, layer, m->drop_key[layer]);
    b->act_backward(b, dx, act_dparam(m), x, dy, (size_t)rows * h, m->cfg.activation,
                    act_param(m), 0);
}

void mp_encoder_forward(mp_model *m, int training)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const mp_model_config *c = &m->cfg;
    const int h = m->h, fa = c->atom_fdim, depth = c->depth, am = c->atom_messages;
    const int32_t na = g->n_atoms, ne = g->n_edges, nu = am ? na : ne;
    const size_t es = m->esize, ub = (size_t)nu * h * es;
    const mp_stype se = MP_ST_ELEM;
    void *wi = P(m->off_wi), *wh = P(m->off_wh), *wo = P(m->off_wo), *bo = P(m->off_bo);
    (void)training;

    if (am) {
        /* H0 = W_i x_v; R = H0 + the bond rows of W_h summed over the
         * incoming bonds (edge_embed of a zero atom part, then atom_sum) */
        b->atom_embed(b, a->h0, g->atom_hot, g->atom_mass, wi, NULL, na, h, fa - 1);
        b->zero(b, a->as, (size_t)na * h * es);
        b->edge_embed(b, a->etmp, NULL, se, g->edge_src, g->bond_hot, a->as,
                      MP_AT(m, wh, (size_t)h * h), ne, h);
        b->atom_sum(b, a->r, se, g->in_start, g->in_edge, a->etmp, se, na, h);
        b->add(b, a->r, a->h0, (size_t)na * h);
    } else {
        b->atom_embed(b, a->as, g->atom_hot, g->atom_mass, wi, NULL, na, h, fa - 1);
        b->edge_embed(b, a->h0, NULL, se, g->edge_src, g->bond_hot, a->as,
                      MP_AT(m, wi, (size_t)fa * h), ne, h);
    }
    b->act(b, a->m[0], a->h0, (size_t)nu * h, c->activation, act_param(m));

    for (int t = 1; t < depth; t++) {
        const void *in = a->m[t - 1];
        if (am) {
            b->neighbor_sum(b, a->msg[t], g->in_start, g->in_edge, g->edge_src, in, na, h);
        } else {
            if (c->undirected) {
                b->edge_mean(b, a->etmp, in, ne, h);
                in = a->etmp;
            }
            b->message(b, a->msg[t], se, a->as, g->in_start, g->in_edge, g->edge_src, in, se, 0,
                       na, ne, h);
        }
        /* Z_t = residual + msg W_h (the message rows of W_h) */
        b->copy(b, a->z[t], am ? a->r : a->h0, ub);
        mp_gemm pr = { 0, 0, nu, h, h, 1.0, 1.0, a->msg[t], wh, a->z[t], h, h, h, se, se, se };
        b->gemm(b, 1, &pr);
        act_drop(m, a->m[t], a->z[t], nu, h, t - 1);
    }

    /* readout: h_v = Dropout(f(W_o [x_v ; a_v] + b_o)) */
    if (am)
        b->neighbor_sum(b, a->a, g->in_start, g->in_edge, g->edge_src, a->m[depth - 1], na, h);
    else
        b->atom_sum(b, a->a, se, g->in_start, g->in_edge, a->m[depth - 1], se, na, h);
    b->atom_embed(b, a->hop, g->atom_hot, g->atom_mass, wo, bo, na, h, fa - 1);
    mp_gemm ro = { 0, 0, na, h, h, 1.0, 1.0, a->a, MP_AT(m, wo, (size_t)fa * h), a->hop, h, h,
                   h, se, se, se };
    b->gemm(b, 1, &ro);
    act_drop(m, a->ho, a->hop, na, h, depth - 1);
    mp_readout_forward(m, training);
}

void mp_encoder_backward(mp_model *m, const void *dx0)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const mp_model_config *c = &m->cfg;
    const int h = m->h, fa = c->atom_fdim, depth = c->depth, am = c->atom_messages;
    const int32_t na = g->n_atoms, ne = g->n_edges, nu = am ? na : ne;
    const size_t es = m->esize;
    const mp_stype se = MP_ST_ELEM;
    void *wh = P(m->off_wh), *wo = P(m->off_wo);

    /* readout: dho, through the dropout and f, into dhop (in dho) */
    mp_readout_backward(m, dx0);
    act_drop_backward(m, a->dho, a->dho, a->hop, na, h, depth - 1);
    b->col_sum(b, G(m->off_bo), a->dho, h, na, h);
    mp_gemm ro[2] = {
        { 1, 0, h, h, na, 1.0, 1.0, a->a, a->dho, MP_AT(m, G(m->off_wo), (size_t)fa * h), h, h, h,
          se, se, se },
        { 0, 1, na, h, h, 1.0, 0.0, a->dho, MP_AT(m, wo, (size_t)fa * h), a->da, h, h, h, se, se,
          se },
    };
    b->gemm(b, 2, ro);
    b->atom_embed_backward(b, G(m->off_wo), g->atom_hot, g->atom_mass, a->dho, na, h, fa - 1);

    /* dM_{depth-1} from dA (neighbor_sum is its own adjoint) */
    if (am)
        b->neighbor_sum(b, a->dm, g->in_start, g->in_edge, g->edge_src, a->da, na, h);
    else
        b->atom_sum_backward(b, a->dm, a->dm, se, g->edge_dst, a->da, NULL, se, 0.0, ne, h);

    /* the steps, last first; dh0 gathers dZ_t (the residual's gradient) */
    b->zero(b, a->dh0, (size_t)nu * h * es);
    for (int t = depth - 1; t >= 1; t--) {
        act_drop_backward(m, a->dz, a->dm, a->z[t], nu, h, t - 1);
        b->add(b, a->dh0, a->dz, (size_t)nu * h);
        mp_gemm st[2] = {
            { 1, 0, h, h, nu, 1.0, 1.0, a->msg[t], a->dz, G(m->off_wh), h, h, h, se, se, se },
            { 0, 1, nu, h, h, 1.0, 0.0, a->dz, wh, a->dmsg, h, h, h, se, se, se },
        };
        b->gemm(b, 2, st);
        if (am) {
            b->neighbor_sum(b, a->dm, g->in_start, g->in_edge, g->edge_src, a->dmsg, na, h);
        } else {
            b->message_backward(b, a->dm, se, NULL, a->da, g->in_start, g->in_edge, g->edge_dst,
                                a->dmsg, se, NULL, se, 0.0, na, ne, h);
            if (c->undirected)
                b->edge_mean(b, a->dm, a->dm, ne, h);
        }
    }

    if (am) {
        /* the bond rows of W_h from dR (= dh0): edge e gets dR[dst e] */
        b->atom_sum_backward(b, a->etmp, a->etmp, se, g->edge_dst, a->dh0, NULL, se, 0.0, ne, h);
        b->edge_embed_backward(b, a->as, MP_AT(m, G(m->off_wh), (size_t)h * h), g->in_start,
                               g->in_edge, g->bond_hot, a->etmp, na, ne, h);
    }
    /* dH0 = dR + f'(H0) dM_0 */
    b->act_backward(b, a->dh0, act_dparam(m), a->h0, a->dm, (size_t)nu * h, c->activation,
                    act_param(m), 1);
    if (am) {
        b->atom_embed_backward(b, G(m->off_wi), g->atom_hot, g->atom_mass, a->dh0, na, h, fa - 1);
    } else {
        b->edge_embed_backward(b, a->da, MP_AT(m, G(m->off_wi), (size_t)fa * h), g->in_start,
                               g->in_edge, g->bond_hot, a->dh0, na, ne, h);
        b->atom_embed_backward(b, G(m->off_wi), g->atom_hot, g->atom_mass, a->da, na, h, fa - 1);
    }
}
