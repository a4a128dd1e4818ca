/*
 * readout.c - from the D-MPNN's atom hiddens to the head's input: the
 * molecule vector (mean / sum / norm pooling, REFERENCE.md 2.1 step 4, or
 * Chemprop v2's AttentiveAggregation), batch normalization of it (v2's
 * --batch-norm: BatchNorm1d after the aggregation), then the extra molecule
 * features beside it:
 *
 *   attentive:  s_v = h_v . w,  a_v = softmax over the molecule's atoms of s,
 *               mol = sum_v a_v h_v      (v2's Linear(h, 1) has a bias too,
 *                                         which the softmax cancels: left out)
 *   batch norm: mol = gamma (mol - mean) / sqrt(var + 1e-5) + beta, batch
 *               statistics in training (running ones moved by 0.1),
 *               the running ones in inference (PyTorch's defaults)
 *   x0 = [mol ; extra]
 *
 * The running statistics are views of the parameter block (no gradient ever
 * reaches them, so Adam leaves them as they are), so a model file carries
 * them with the weights.
 */
#include "models/model_impl.h"

#define P(off) MP_AT(m, m->params, off)
#define G(off) MP_AT(m, m->grads, off)

#define BN_MOMENTUM 0.1
#define BN_EPS 1e-5

void mp_readout_forward(mp_model *m, int training)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const mp_model_config *c = &m->cfg;
    const int h = m->h, bn = c->batch_norm;
    /* the molecule vectors: into x0's first columns, or xp before batch norm */
    void *dst = bn ? a->xp : a->x0;
    int ld = bn ? h : m->in_dim;
    if (c->aggregation == MP_AGG_ATTENTIVE) {
        mp_gemm sc = { 0, 0, g->n_atoms, 1, h, 1.0, 0.0, a->ho, P(m->off_attn), a->score, h, 1, 1,
                       MP_ST_ELEM, MP_ST_ELEM, MP_ST_ELEM };
        b->gemm(b, 1, &sc);
        b->attn_pool(b, dst, ld, a->alpha, g->mol_atom, a->ho, a->score, g->n_mols, h);
    } else {
        b->pool(b, dst, ld, g->mol_atom, a->ho, g->n_mols, h, c->aggregation, c->agg_norm);
    }
    if (bn) {
        size_t o = m->off_bn, hh = (size_t)h;
        /* (PyTorch refuses a training batch of one molecule, whose
         * normalized vector is beta with no gradient to the input; the
         * trainer drops the last partial batch, as Chemprop does) */
        b->batch_norm(b, a->x0, m->in_dim, a->bn_save, a->xp, h, P(o), P(o + hh), P(o + 2 * hh),
                      g->n_mols, h, training, BN_MOMENTUM, BN_EPS);
    }
    if (c->extra_dim > 0)
        b->copy2d(b, MP_AT(m, a->x0, h), MP_ST_ELEM, m->in_dim, a->extra, MP_ST_ELEM,
                  c->extra_dim, g->n_mols, c->extra_dim);
}

void mp_readout_backward(mp_model *m, const void *dx0)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    mp_dev_graph *g = &a->g;
    const mp_model_config *c = &m->cfg;
    const int h = m->h;
    const void *src = dx0;
    int ld = m->in_dim;
    if (c->batch_norm) {
        size_t o = m->off_bn, hh = (size_t)h;
        b->batch_norm_backward(b, a->dxp, h, G(o), G(o + hh), dx0, m->in_dim, a->xp, h,
                               a->bn_save, P(o), g->n_mols, h);
        src = a->dxp;
        ld = h;
    }
    if (c->aggregation == MP_AGG_ATTENTIVE) {
        b->attn_pool_backward(b, a->dho, a->dscore, g->mol_atom, a->ho, a->alpha, P(m->off_attn),
                              src, ld, g->n_mols, h);
        mp_gemm dw = { 1, 0, h, 1, g->n_atoms, 1.0, 1.0, a->ho, a->dscore, G(m->off_attn), h, 1,
                       1, MP_ST_ELEM, MP_ST_ELEM, MP_ST_ELEM };
        b->gemm(b, 1, &dw);
    } else {
        b->pool_backward(b, a->dho, g->mol_atom, src, ld, g->n_mols, h, c->aggregation,
                         c->agg_norm);
    }
}
