/*
 * gpu_nocuda.c - the CUDA=0 build's stand-in for ops_cuda.cu: the same API
 * (gpu.h), with no GPU behind it.  Everything that would need one fails with
 * MP_ERR_NODEVICE and says why, so a program built this way runs on the cpu
 * backend and tells the user how to get the GPU one.
 */
#include "gpu/gpu.h"

#include <stdio.h>

#define WHY "molprop was built without CUDA (rebuild with nvcc on the PATH, or make CUDA=1)"

int mp_backend_cuda_available(char *why, size_t n)
{
    if (why && n)
        snprintf(why, n, "%s", WHY);
    return 0;
}

int mp_backend_cuda_device_count(void) { return 0; }

int mp_backend_cuda_blas_loaded(void) { return 0; }

int mp_backend_cuda_blas_load(char *why, size_t n)
{
    return mp_backend_cuda_available(why, n);
}

mp_status mp_backend_cuda_open(mp_backend **out, mp_precision prec)
{
    *out = NULL;
    if (prec != MP_PREC_FP32 && prec != MP_PREC_TF32 && prec != MP_PREC_BF16)
        return mp_error_set(MP_ERR_ARG, "cuda backend: unknown precision %d (expected fp32, "
                            "tf32 or bf16)", (int)prec);
    return mp_error_set(MP_ERR_NODEVICE, "cuda backend: %s", WHY);
}

const char *mp_backend_cuda_info(const mp_backend *b) { return ""; }
int mp_backend_cuda_sm_count(const mp_backend *b) { return 0; }
size_t mp_backend_cuda_memory(const mp_backend *b) { return 0; }
long mp_backend_cuda_tile_calls(const mp_backend *b) { return 0; }
long mp_backend_cuda_panel_message_calls(const mp_backend *b) { return 0; }
mp_precision mp_backend_cuda_precision(const mp_backend *b) { return MP_PREC_FP32; }
void *mp_backend_cuda_stream(mp_backend *b) { return NULL; }
void mp_backend_cuda_clear_error(mp_backend *b) {}
void mp_backend_cuda_plain_ops(mp_backend *b) {}

mp_status mp_cuda_graph_begin(mp_backend *b)
{
    return mp_error_set(MP_ERR_NODEVICE, "mp_cuda_graph_begin: %s", WHY);
}

mp_status mp_cuda_graph_end(mp_backend *b, mp_cuda_graph **out)
{
    *out = NULL;
    return mp_error_set(MP_ERR_NODEVICE, "mp_cuda_graph_end: %s", WHY);
}

mp_status mp_cuda_graph_launch(mp_backend *b, mp_cuda_graph *g)
{
    return mp_error_set(MP_ERR_NODEVICE, "mp_cuda_graph_launch: %s", WHY);
}

void mp_cuda_graph_free(mp_cuda_graph *g) {}
