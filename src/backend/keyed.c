/*
 * ops_keyed.c - the device-keyed dropout ops (ops.h) for the host-memory
 * backends (cpu, ref): the key and the step index are plain host memory
 * there, so each op reads keys[k_dev[0] * stride] and calls the backend's
 * own plain op with it: bitwise the plain op by construction.  The cuda
 * twins (src/gpu/ops_cuda_keyed.cu) read the key inside the kernel.
 */
#include "backend/ops.h"

static uint64_t host_key(const uint64_t *keys, const int32_t *k_dev, int stride)
{
    return keys[(size_t)k_dev[0] * (size_t)stride];
}

static void host_relu_dropout_keyed(mp_backend *b, void *y, const void *x, size_t n, double p,
                                    const uint64_t *keys, const int32_t *k_dev, int stride)
{
    b->relu_dropout(b, y, x, n, p, host_key(keys, k_dev, stride));
}

static void host_dropout_keyed(mp_backend *b, void *y, const void *x, int32_t n_rows,
                               int n_cols, int ld, double p, const uint64_t *keys,
                               const int32_t *k_dev, int stride)
{
    b->dropout(b, y, x, n_rows, n_cols, ld, p, host_key(keys, k_dev, stride));
}

static void host_dropout_backward_keyed(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                        int n_cols, int ld, double p, const uint64_t *keys,
                                        const int32_t *k_dev, int stride)
{
    b->dropout_backward(b, dx, dy, n_rows, n_cols, ld, p, host_key(keys, k_dev, stride));
}

void mp_ops_keyed_host(mp_backend *b)
{
    if (!b || !b->host_memory)
        return;
    b->relu_dropout_keyed = host_relu_dropout_keyed;
    b->dropout_keyed = host_dropout_keyed;
    b->dropout_backward_keyed = host_dropout_backward_keyed;
}
