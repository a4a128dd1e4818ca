/*
 * train_nocuda.c - stand-in for train_cuda.cu in a build without CUDA: there
 * is no cuda backend to give the device-scheduled step ops to.
 */
#include "gpu/gpu.h"

void mp_backend_cuda_train_ops(mp_backend *b) { (void)b; }
