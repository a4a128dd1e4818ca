/*
 * host_ops.h - op bodies that the two host-memory backends (cpu.c, ref.c)
 * share: buffers of either element type (float or double, b->esize), one
 * thread, sums in a fixed order.  Not part of any API.
 */
#ifndef MP_HOST_OPS_H
#define MP_HOST_OPS_H

#include "backend/ops.h"

/* The loss op (ops.h) for every kind but mse and bce (which cpu.c and ref.c
 * keep in their own arithmetic): per labelled pair in double (formulas.h),
 * the batch kinds by their sums over the rows. */
void mp_loss_host(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                  const uint8_t *mask, int32_t n, const mp_loss_spec *s);

/* The training-option layers of ref.c (ref_layers.c): plain loops in double
 * over buffers of the backend's element type. */
void mp_ref_layer_ops(mp_backend *b);

/* The same layers for cpu.c (cpu_layers.c): float, threaded, the same bits
 * for every thread count. */
void mp_cpu_layer_ops(mp_backend *b);

#endif /* MP_HOST_OPS_H */
