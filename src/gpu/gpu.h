/*
 * gpu.h - the CUDA backend of the ops seam (backend/ops.h) for Hopper GPUs
 * (H100/H200, sm_90a), and the few extras a GPU needs: choosing the GEMM
 * precision, asking whether a GPU is there, and capturing a stream of ops
 * into a CUDA graph for replay.
 *
 *   mp_backend *b;
 *   char why[256];
 *   if (!mp_backend_cuda_available(why, sizeof why))
 *       ... fall back to "cpu", telling the user `why` ...
 *   if (mp_backend_cuda_open(&b, MP_PREC_TF32) != MP_OK) ... mp_error_message() ...
 *   ... ops through b->... (asynchronous on the backend's one stream) ...
 *   if (b->sync(b) != MP_OK) ... the first failure since open, with file:line ...
 *   mp_backend_close(b);
 *
 * Precision.  fp32 (CUBLAS_COMPUTE_32F: exact fp32, Chemprop/PyTorch's
 * default) and tf32 (inputs rounded to TF32 on the tensor cores, products
 * accumulated in fp32) change only the dense products, on fp32 buffers.
 * bf16 is real bf16 storage: the backend reports act_st = MP_ST_BF16
 * (ops.h), so the model stores the D-MPNN's product operands (messages, dZ,
 * the readout's input and its gradient, and per-forward copies of W_h and
 * W_o's message rows; H0 and M_t too in a model without dropout) as
 * bfloat16, written by the ops that make them, and cuBLAS / cuBLASLt
 * multiply them as CUDA_R_16BF with fp32 accumulation; the remaining
 * products (the FFN head's, tiny) run on fp32 buffers with
 * CUBLAS_COMPUTE_32F_FAST_16BF.  The kernels are templates over the storage
 * of their operands (kernels_rows.cuh), one per op for every precision.  At
 * every precision parameters, gradients and the Adam moments are fp32
 * master copies, and every op computes in fp32 (the loss sums in double).
 *
 * Errors.  The ops are void in the seam, so the backend keeps the first
 * failure (a CUDA or cuBLAS status, with the file and line of the call) and
 * reports it from b->sync, b->upload and b->download; it stays reported until
 * mp_backend_cuda_clear_error.  b->alloc returns NULL on failure with the
 * message set (how many bytes were asked, how many are free).
 *
 * Determinism.  Every op gives bitwise the same result for the same inputs on
 * every run on the same GPU model: segment sums run over the CSR in edge
 * order with one writer per output element, the weight-gradient scatters and
 * column sums reduce fixed chunks in a fixed order (chunk counts depend on the
 * shapes only), the loss reduces by a fixed tree, there are no float atomics,
 * and cuBLAS runs on one stream with a fixed workspace (its documented
 * condition for reproducible results).
 *
 * With CUDA=0 (or without nvcc) gpu_nocuda.c stands in: nothing is available
 * and every open fails with MP_ERR_NODEVICE "molprop was built without CUDA".
 */
#ifndef MP_GPU_H
#define MP_GPU_H

#include "core/core.h"
#include "backend/ops.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The precision of the dense products; see the header comment. */
typedef enum {
    MP_PREC_FP32 = 0,
    MP_PREC_TF32 = 1,
    MP_PREC_BF16 = 2
} mp_precision;

/* "fp32", "tf32", "bf16" ("?" for a bad value). */
const char *mp_precision_name(mp_precision p);

/* Parses "fp32" / "tf32" / "bf16" (also "float32", "f32", "bfloat16").
 * MP_ERR_ARG with a message naming the accepted values otherwise. */
mp_status mp_precision_parse(const char *s, mp_precision *out);

/*
 * 1 when the CUDA backend can run here: built with CUDA, a driver new enough
 * for the runtime, at least one GPU, and GPU 0 able to run sm_90 code.  0
 * otherwise, with the reason in why[0..n) (e.g. "cudaGetDeviceCount: CUDA
 * driver version is insufficient for CUDA runtime version", "molprop was built
 * without CUDA").  why may be NULL when n == 0.  Leaves no CUDA error behind.
 */
int mp_backend_cuda_available(char *why, size_t n);

/* cuBLAS and cuBLASLt are not linked: the first mp_backend_cuda_open loads
 * them (their start-up costs ~45 ms and ~210 MB, which CPU runs no longer
 * pay).  _blas_loaded: 1 once they are loaded in this process.  _blas_load:
 * loads them now if need be (no GPU needed) and asks one a question; 1 when
 * both answer, else 0 with the reason in why[0..n) (built without CUDA,
 * "cannot load libcublasLt.so.13: ..."). */
int mp_backend_cuda_blas_loaded(void);
int mp_backend_cuda_blas_load(char *why, size_t n);

/* The GPUs this process sees (CUDA_VISIBLE_DEVICES counts), 0 when none
 * or the driver cannot say.  Leaves no CUDA error behind. */
int mp_backend_cuda_device_count(void);

/*
 * Opens the CUDA backend on the current device (device 0 unless the caller
 * chose another with cudaSetDevice; CUDA_VISIBLE_DEVICES picks among several)
 * with the given GEMM precision.  Creates the backend's stream (non-blocking),
 * its cuBLAS handle and fixed workspace, and a scratch buffer for the
 * two-level reductions.  Fails with MP_ERR_NODEVICE and the reason when there
 * is no usable GPU, MP_ERR_ARG for an unknown precision, MP_ERR_NOMEM when
 * the device has no room for the workspace, MP_ERR_INTERNAL for other CUDA
 * failures.  Close with mp_backend_close (or b->close).
 */
mp_status mp_backend_cuda_open(mp_backend **out, mp_precision prec);

/*
 * Opens by name, for mp_backend_open and the command line: "cuda" (fp32),
 * "cuda:fp32", "cuda:tf32", "cuda:bf16".  MP_ERR_ARG for another suffix.
 */
mp_status mp_backend_cuda_open_name(mp_backend **out, const char *name);

/*
 * One line for logs, e.g. "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB, L2 60 MiB,
 * driver 13.0, runtime 13.0, gemm tf32, dependent launch" (the last part
 * when kernels are queued with programmatic dependent launch: sm_90 on,
 * unless MOLPROP_CUDA_PDL=0 at open).  Valid until the backend is closed.
 * "" for a backend that is not a cuda one.
 */
const char *mp_backend_cuda_info(const mp_backend *b);

/* The device's multiprocessor count and global memory in bytes (0 for a
 * backend that is not a cuda one). */
int    mp_backend_cuda_sm_count(const mp_backend *b);
size_t mp_backend_cuda_memory(const mp_backend *b);

/* Products queued on the tile kernel (tiles_cuda.cu: the bf16 products of
 * small batches) since open; 0 for a backend that is not a cuda one.  Off
 * (cuBLAS for every product) when MOLPROP_CUDA_TILES=0 at open; under
 * set_share(n > 2) the products of up to 6,144 rows, and products with n
 * or k past 512 always, go to cuBLAS unless MOLPROP_CUDA_TILES=1. */
long   mp_backend_cuda_tile_calls(const mp_backend *b);
/* Message steps queued on the wgmma panels (fused_cuda.cu, ops.h
 * message_update) since open; 0 for a backend that is not a cuda one. */
long   mp_backend_cuda_panel_message_calls(const mp_backend *b);

/* The GEMM precision the backend was opened with. */
mp_precision mp_backend_cuda_precision(const mp_backend *b);

/* The backend's stream, as a cudaStream_t cast to void *, for callers that
 * time it with CUDA events or order their own work after it (the bench). */
void *mp_backend_cuda_stream(mp_backend *b);

/* The number of SMs the backend's products (cuBLAS, cuBLASLt) are sized
 * for: 0 (the default) the whole GPU; n > 0 when n SMs' worth is what this
 * instance can expect while others run beside it (cublasSetSmCountTarget).
 * The products' algorithms, so their bits, are a function of it: every
 * instance whose results must agree takes the same n.  MP_ERR_ARG for n
 * outside [0, the GPU's SMs]. */
mp_status mp_backend_cuda_set_sm_target(mp_backend *b, int n);

/* Forgets a recorded failure so that the backend can be used again (after a
 * caller handled, e.g., a too-large gemm).  CUDA errors that break the
 * context (an illegal address) cannot be forgotten: later calls fail again. */
void mp_backend_cuda_clear_error(mp_backend *b);

/* The same backend issuing the unfused kernels where an op has a fused
 * form: message as a segment-sum pass into its scratch and a gather pass
 * (instead of summing per atom in registers), edge_embed's M_0 as a
 * separate ReLU pass.  Bitwise the same results; for benchmarks and tests
 * that compare the two, usually called on a copy of the backend struct.
 * Does nothing for another backend. */
void mp_backend_cuda_plain_ops(mp_backend *b);

/* ===================================================================== */
/* CUDA graphs                                                            */
/* ===================================================================== */

/*
 * Stream capture of a sequence of ops into a replayable graph:
 *
 *   mp_cuda_graph_begin(b);           // ops below are recorded, not run
 *   ... b->gemm(...), b->message(...), ..., b->adam(...) ...
 *   mp_cuda_graph *g;
 *   mp_cuda_graph_end(b, &g);         // instantiates the graph
 *   for (...) mp_cuda_graph_launch(b, g);   // one launch per step
 *   b->sync(b);
 *   mp_cuda_graph_free(g);
 *
 * What is recorded is fixed: every pointer, size and scalar argument (the
 * learning rate and step count of adam, the dropout keys) is baked into the
 * graph, so a replay computes with the values of the capture.  Data changes
 * by writing into the same device buffers (b->upload before the launch).
 * Between begin and end only ops that stay on the device may run: b->upload,
 * b->download, b->sync, b->alloc and b->free fail the capture (end then
 * reports it).  A failed op during capture also fails end.
 */
typedef struct mp_cuda_graph mp_cuda_graph;

mp_status mp_cuda_graph_begin(mp_backend *b);
mp_status mp_cuda_graph_end(mp_backend *b, mp_cuda_graph **out);
mp_status mp_cuda_graph_launch(mp_backend *b, mp_cuda_graph *g);
void      mp_cuda_graph_free(mp_cuda_graph *g);     /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif /* MP_GPU_H */
