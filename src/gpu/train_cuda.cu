/*
 * train_cuda.cu - the CUDA side of the device-scheduled training step
 * (models/ops.h: adam_sched, step_end), kept apart from ops_cuda.cu: Adam
 * whose step scalars are read from device memory at a device step index, and
 * the op that records a step's loss and advances that index.  Both run on the
 * backend's stream, so they can be captured in a graph with the rest of the
 * step (models/resident.c) and replayed with new values every time.
 */
#include "gpu/cuda_ctx.cuh"

#include <cuda_runtime.h>

#define TRAIN_THREADS 256

/* The same arithmetic as ops_cuda.cu's k_adam, the two step scalars read at
 * sched[2k], sched[2k + 1] with k = *k_dev: bitwise the same update. */
__global__ void k_adam_sched(float *__restrict__ p, float *__restrict__ m,
                             float *__restrict__ v, const float *__restrict__ g, size_t n,
                             const float *__restrict__ sched, const int32_t *__restrict__ k_dev,
                             float b1, float b2, float c1, float c2, float eps, float wd)
{
    size_t k = (size_t)*k_dev;
    float step = sched[2 * k], bc2s = sched[2 * k + 1];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float pi = p[i];
        float gi = g[i] + wd * pi;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * (mi / (sqrtf(vi) / bc2s + eps));
    }
}

__global__ void k_step_end(int32_t *k_dev, float *losses, const float *loss)
{
    int32_t k = *k_dev;
    losses[k] = loss[0];
    *k_dev = k + 1;
}

static cudaStream_t stream_of(mp_backend *b)
{
    return (cudaStream_t)mp_backend_cuda_stream(b);
}

static void cu_adam_sched(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                          const float *sched, const int32_t *k_dev, double beta1, double beta2,
                          double eps, double weight_decay)
{
    if (!n)
        return;
    size_t blocks = (n + TRAIN_THREADS - 1) / TRAIN_THREADS;
    if (blocks > 4096)
        blocks = 4096;
    k_adam_sched<<<(unsigned)blocks, TRAIN_THREADS, 0, stream_of(b)>>>(
        (float *)p, (float *)m, (float *)v, (const float *)g, n, sched, k_dev, (float)beta1,
        (float)beta2, (float)(1 - beta1), (float)(1 - beta2), (float)eps, (float)weight_decay);
}

static void cu_step_end(mp_backend *b, int32_t *k_dev, void *losses, const void *loss)
{
    k_step_end<<<1, 1, 0, stream_of(b)>>>(k_dev, (float *)losses, (const float *)loss);
}

void mp_cu_train_ops(mp_backend *b)
{
    b->adam_sched = cu_adam_sched;
    b->step_end = cu_step_end;
}
