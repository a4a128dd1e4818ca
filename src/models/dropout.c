/*
 * dropout.c - where the model's dropout layers get their keys (model_impl.h).
 *
 * A host-loop step draws one key per dropout layer from the model's dropout
 * stream as the layer is issued, in forward order.  A step replayed from a
 * captured CUDA graph cannot do that (the graph would bake the keys in), so
 * device-resident training (resident.c) draws the same keys, in the same
 * order, for a whole epoch beforehand, uploads them, and points the model at
 * them (m->drop_keys); the layers then pass the ops device keys (ops.h
 * mp_key), keys[k * n_layers + layer] at the device step index k.  Both
 * paths leave drop_rng in the same state and drop the same units.
 */
#include "models/model_impl.h"

int mp_model_drop_layers(const mp_model *m)
{
    if (!(m->cfg.dropout > 0))
        return 0;
    /* the atom descriptor layer's dropout after the readout's (encoder.c) */
    return (m->cfg.kind == MP_MODEL_DMPNN ? m->cfg.depth + (m->cfg.atom_desc_dim > 0) : 0) +
           m->n_layers;
}

/* 1 when this layer reads its key from the device key source. */
static int keyed(const mp_model *m, double p)
{
    return p > 0 && m->bound && m->drop_keys && m->drop_k;
}

/* Layer `layer`'s key: read on the device (keyed), or drawn now. */
static mp_key layer_key(mp_model *m, double p, int layer)
{
    if (keyed(m, p))
        return mp_key_dev(m->drop_keys + layer, m->drop_k, mp_model_drop_layers(m));
    return mp_key_host(p > 0 ? mp_rng_u64(&m->drop_rng) : 0);
}

void mp_model_relu_dropout(mp_model *m, void *y, const void *x, mp_stype st, size_t n, double p,
                           int layer)
{
    m->b->relu_dropout(m->b, y, x, st, n, p, layer_key(m, p, layer));
}

uint64_t mp_model_dropout(mp_model *m, void *y, const void *x, int32_t n_rows, int n_cols,
                          int ld, double p, int layer)
{
    mp_key key = layer_key(m, p, layer);
    m->b->dropout(m->b, y, x, n_rows, n_cols, ld, p, key);
    return key.value;
}

/* Dropout is its own adjoint: the forward op with the forward's key (the
 * eager key drawn then, or the same device key). */
void mp_model_dropout_backward(mp_model *m, void *dx, const void *dy, int32_t n_rows,
                               int n_cols, int ld, double p, int layer, uint64_t key)
{
    mp_key k = keyed(m, p) ? layer_key(m, p, layer) : mp_key_host(key);
    m->b->dropout(m->b, dx, dy, n_rows, n_cols, ld, p, k);
}
