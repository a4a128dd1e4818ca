/*
 * ffn.c - the feed-forward head shared by both model kinds (Chemprop v1
 * chemprop/models/ffn.py, REFERENCE.md 2.2):
 *
 *   Dropout -> Linear(I, F) -> [ReLU -> Dropout -> Linear(F, F)] x (L-2)
 *           -> ReLU -> Dropout -> Linear(F, T)          (L = 1: Dropout -> Linear(I, T))
 *
 * (another activation than ReLU: its own op, after which the dropout; the
 * pre-activations are kept for the backward).
 *
 * I = readout ++ extra features (dmpnn) or the feature vector (ffn).  Each
 * Linear is a bias row copied into every output row (copy2d, lds 0)
 * followed by one product with beta = 1; ReLU and the dropout after it are
 * one op whose output is all the backward pass needs.
 */
#include "models/model_impl.h"

#define P(off) MP_AT(m, m->params, off)
#define G(off) MP_AT(m, m->grads, off)

static void layer_dims(const mp_model *m, int l, int *din, int *dout)
{
    *din = l == 0 ? m->in_dim : m->ffn_hidden;
    *dout = l == m->n_layers - 1 ? m->n_out : m->ffn_hidden;
}

/* The head's activation when it is not ReLU (m->ffn_generic): the slope
 * parameter of PReLU, or NULL. */
static const void *act_param(mp_model *m)
{
    return m->cfg.activation == MP_ACT_PRELU ? P(m->off_prelu_ffn) : NULL;
}

void mp_ffn_forward(mp_model *m, int training)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    int32_t n = m->n_mols;
    double p = m->p;
    const void *x = a->x0;
    /* dropout layers (dropout.c): the input, then each hidden layer, after
     * the encoder's */
    const int layer0 = mp_model_head_layer0(m);
    if (p > 0) {
        m->key_in = mp_model_dropout(m, a->xd0, a->x0, n, m->in_dim, m->in_dim, p, layer0);
        x = a->xd0;
    }
    for (int l = 0; l < m->n_layers; l++) {
        int din, dout;
        layer_dims(m, l, &din, &dout);
        int last = l == m->n_layers - 1;
        /* a hidden layer of another activation keeps its pre-activation */
        void *y = last ? a->out : m->ffn_generic ? a->hp[l] : a->hl[l];
        b->copy2d(b, y, MP_ST_ELEM, dout, P(m->off_fb[l]), MP_ST_ELEM, 0, n, dout);
        mp_gemm pr = { 0, 0, n, dout, din, 1.0, 1.0, x, P(m->off_fw[l]), y, din, dout, dout,
                       MP_ST_ELEM, MP_ST_ELEM, MP_ST_ELEM };
        b->gemm(b, 1, &pr);
        if (!last && m->ffn_generic) {
            int layer = layer0 + 1 + l;
            b->act(b, a->hl[l], y, (size_t)n * dout, m->cfg.activation, act_param(m));
            if (p > 0)
                m->drop_key[layer] = mp_model_dropout(m, a->hl[l], a->hl[l], n, dout, dout, p,
                                                      layer);
            x = a->hl[l];
        } else if (!last) {
            mp_model_relu_dropout(m, y, y, MP_ST_ELEM, (size_t)n * dout, p, layer0 + 1 + l);
            x = y;
        }
    }
}

const void *mp_ffn_backward(mp_model *m, int want_cols)
{
    mp_backend *b = m->b;
    mp_acts *a = &m->a;
    int32_t n = m->n_mols;
    double p = m->p;
    void *dy = a->g0, *dx = a->g1;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        int din, dout;
        layer_dims(m, l, &din, &dout);
        const void *x = l > 0 ? a->hl[l - 1] : p > 0 ? a->xd0 : a->x0;
        /* dW += x^T dy, batched with dx = dy W^T when a dx is wanted;
         * db += column sums of dy */
        const mp_stype se = MP_ST_ELEM;
        mp_gemm gw = { 1, 0, din, dout, n, 1.0, 1.0, x, dy, G(m->off_fw[l]), din, dout, dout,
                       se, se, se };
        b->col_sum(b, G(m->off_fb[l]), dy, dout, n, dout);
        if (l > 0) {
            mp_gemm pr[2] = { gw, { 0, 1, n, din, dout, 1.0, 0.0, dy, P(m->off_fw[l]), dx,
                                    dout, dout, din, se, se, se } };
            b->gemm(b, 2, pr);
            /* back through the ReLU + dropout before this layer (another
             * activation: the dropout, then f' at the pre-activation) */
            if (m->ffn_generic) {
                int layer = mp_model_head_layer0(m) + l;
                if (p > 0)
                    mp_model_dropout_backward(m, dx, dx, n, din, din, p, layer,
                                              m->drop_key[layer]);
                b->act_backward(b, dx,
                                m->cfg.activation == MP_ACT_PRELU ? G(m->off_prelu_ffn) : NULL,
                                a->hp[l - 1], dx, (size_t)n * din, m->cfg.activation,
                                act_param(m), 0);
            } else {
                b->relu_dropout_backward(b, dx, dx, se, a->hl[l - 1], se, dx, (size_t)n * din, p);
            }
            void *t = dy;
            dy = dx;
            dx = t;
        } else if (want_cols > 0) {
            /* Only the readout's columns need a gradient: the first
             * want_cols rows of W_0 (row stride of the result: in_dim). */
            mp_gemm pr[2] = { gw, { 0, 1, n, want_cols, dout, 1.0, 0.0, dy, P(m->off_fw[0]), dx,
                                    dout, dout, m->in_dim, se, se, se } };
            b->gemm(b, 2, pr);
            if (p > 0)
                mp_model_dropout_backward(m, dx, dx, n, want_cols, m->in_dim, p,
                                          mp_model_head_layer0(m),
                                          m->key_in);
            return dx;
        } else {
            b->gemm(b, 1, &gw);
        }
    }
    return NULL;
}
