/*
 * ops_cuda_keyed.cu - the cuda backend's device-keyed dropout ops (ops.h:
 * relu_dropout_keyed, dropout_keyed, dropout_backward_keyed): the kernels of
 * relu_dropout and dropout with the key read from device memory at the
 * device step index, key = keys[k_dev[0] * stride], instead of passed by
 * value.  So a training step captured in a CUDA graph (models/resident.c)
 * drops fresh units on every replay, with the keys the host drew for the
 * epoch in the host loop's order.
 *
 * Each element is the same float operations as ops_cuda.cu's plain kernels
 * (k_relu_dropout in kernels_rows.cuh, k_dropout2d) with the same hash
 * (cuda_ctx.cuh: d_keep), so keyed == plain bitwise for the same key.
 * Registered by mp_backend_cuda_open (mp_cu_keyed_ops).
 */
#include "gpu/cuda_ctx.cuh"

/* thr == 0: plain ReLU (scale unused), as relu_drop1 in kernels_rows.cuh. */
__device__ __forceinline__ float keyed_relu_drop1(float x, size_t i, uint32_t thr, float scale,
                                                  uint64_t key)
{
    float v = x > 0.0f ? x : 0.0f;
    if (thr)
        v = d_keep(key, i, thr) ? v * scale : 0.0f;
    return v;
}

/* y may alias x (no __restrict__).  V = 4: 16-byte accesses (y, x aligned),
 * the last n % 4 elements one at a time. */
template <int V>
__global__ void k_relu_dropout_keyed(float *y, const float *x, size_t n, uint32_t thr,
                                     float scale, const uint64_t *keys, const int32_t *k_dev,
                                     int stride)
{
    const uint64_t key = keys[(size_t)k_dev[0] * (size_t)stride];
    const size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t step = (size_t)gridDim.x * blockDim.x;
    const size_t nvec = n / V;
    if (V == 4) {
        for (size_t t = t0; t < nvec; t += step) {
            float4 a = reinterpret_cast<const float4 *>(x)[t];
            size_t i = t * 4;
            a.x = keyed_relu_drop1(a.x, i, thr, scale, key);
            a.y = keyed_relu_drop1(a.y, i + 1, thr, scale, key);
            a.z = keyed_relu_drop1(a.z, i + 2, thr, scale, key);
            a.w = keyed_relu_drop1(a.w, i + 3, thr, scale, key);
            reinterpret_cast<float4 *>(y)[t] = a;
        }
    }
    for (size_t i = (V == 4 ? nvec * 4 : 0) + t0; i < n; i += step)
        y[i] = keyed_relu_drop1(x[i], i, thr, scale, key);
}

/* One warp per row, lanes over the columns (as k_dropout2d). */
__global__ void k_dropout2d_keyed(float *y, const float *x, int32_t n_rows, int n_cols, int ld,
                                  uint32_t thr, float scale, const uint64_t *keys,
                                  const int32_t *k_dev, int stride)
{
    const uint64_t key = keys[(size_t)k_dev[0] * (size_t)stride];
    for (int64_t i = warp_id(); i < n_rows; i += warp_count())
        for (int j = lane_id(); j < n_cols; j += 32) {
            size_t k = (size_t)i * ld + j;
            y[k] = d_keep(key, k, thr) ? x[k] * scale : 0.0f;
        }
}

static void cu_relu_dropout_keyed(mp_backend *b, void *y, const void *x, size_t n, double p,
                                  const uint64_t *keys, const int32_t *k_dev, int stride)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    /* threshold and scale exactly as cu_relu_dropout makes them */
    uint32_t thr = mp_dropout_threshold(p);
    float scale = thr && p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    LAUNCH_ROWS(c, al16(y) && al16(x), 1, n, k_relu_dropout_keyed, (float *)y, (const float *)x,
                n, thr, scale, keys, k_dev, stride);
    LAUNCHED(c, "k_relu_dropout_keyed");
}

static void cu_dropout_keyed(mp_backend *b, void *y, const void *x, int32_t n_rows, int n_cols,
                             int ld, double p, const uint64_t *keys, const int32_t *k_dev,
                             int stride)
{
    gpu_ctx *c = CTX(b);
    if (n_rows <= 0 || n_cols <= 0 || !usable(c))
        return;
    /* as cu_dropout */
    uint32_t thr = mp_dropout_threshold(p);
    float scale = !thr ? 1.0f : p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    k_dropout2d_keyed<<<grid_for(c, (size_t)n_rows, ROWS_PER_BLOCK), THREADS, 0, c->stream>>>(
        (float *)y, (const float *)x, n_rows, n_cols, ld, thr, scale, keys, k_dev, stride);
    LAUNCHED(c, "k_dropout2d_keyed");
}

static void cu_dropout_backward_keyed(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                      int n_cols, int ld, double p, const uint64_t *keys,
                                      const int32_t *k_dev, int stride)
{
    /* dropout is linear and diagonal: its adjoint is itself */
    cu_dropout_keyed(b, dx, dy, n_rows, n_cols, ld, p, keys, k_dev, stride);
}

void mp_cu_keyed_ops(mp_backend *b)
{
    b->relu_dropout_keyed = cu_relu_dropout_keyed;
    b->dropout_keyed = cu_dropout_keyed;
    b->dropout_backward_keyed = cu_dropout_backward_keyed;
}
