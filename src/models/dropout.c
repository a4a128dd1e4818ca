/*
 * dropout.c - where the model's dropout layers get their keys (model_impl.h).
 *
 * A host-loop step draws one key per dropout layer from the model's dropout
 * stream as the layer is issued, in forward order.  A step replayed from a
 * captured CUDA graph cannot do that (the graph would bake the keys in), so
 * device-resident training (resident.c) draws the same keys, in the same
 * order, for a whole epoch beforehand, uploads them, and points the model at
 * them (m->drop_keys); the layers then issue the keyed ops, which read
 * keys[k * n_layers + layer] at the device step index k.  Both paths leave
 * drop_rng in the same state and drop the same units.
 */
#include "models/model_impl.h"

#include <assert.h>

int mp_model_drop_layers(const mp_model *m)
{
    if (!(m->cfg.dropout > 0))
        return 0;
    return (m->cfg.kind == MP_MODEL_DMPNN ? m->cfg.depth : 0) + m->n_layers;
}

/* 1 when this layer reads its key from the device key source. */
static int keyed(const mp_model *m, double p)
{
    if (!(p > 0) || !m->bound || !m->drop_keys || !m->drop_k)
        return 0;
    /* resident.c sets a key source only for a backend with the keyed ops */
    assert(m->b->relu_dropout_keyed && m->b->dropout_keyed && m->b->dropout_backward_keyed);
    return 1;
}

void mp_model_relu_dropout(mp_model *m, void *y, const void *x, size_t n, double p, int layer)
{
    mp_backend *b = m->b;
    if (keyed(m, p)) {
        b->relu_dropout_keyed(b, y, x, n, p, m->drop_keys + layer, m->drop_k,
                              mp_model_drop_layers(m));
        return;
    }
    uint64_t key = p > 0 ? mp_rng_u64(&m->drop_rng) : 0;
    b->relu_dropout(b, y, x, n, p, key);
}

uint64_t mp_model_dropout(mp_model *m, void *y, const void *x, int32_t n_rows, int n_cols,
                          int ld, double p, int layer)
{
    mp_backend *b = m->b;
    if (keyed(m, p)) {
        b->dropout_keyed(b, y, x, n_rows, n_cols, ld, p, m->drop_keys + layer, m->drop_k,
                         mp_model_drop_layers(m));
        return 0;
    }
    uint64_t key = p > 0 ? mp_rng_u64(&m->drop_rng) : 0;
    b->dropout(b, y, x, n_rows, n_cols, ld, p, key);
    return key;
}

void mp_model_dropout_backward(mp_model *m, void *dx, const void *dy, int32_t n_rows,
                               int n_cols, int ld, double p, int layer, uint64_t key)
{
    mp_backend *b = m->b;
    if (keyed(m, p)) {
        b->dropout_backward_keyed(b, dx, dy, n_rows, n_cols, ld, p, m->drop_keys + layer,
                                  m->drop_k, mp_model_drop_layers(m));
        return;
    }
    b->dropout_backward(b, dx, dy, n_rows, n_cols, ld, p, key);
}
