/*
 * ops.h - the backend seam: the small set of operations the models are
 * written against, and the backends that implement them.
 *
 *   model code (dmpnn.c, ffn.c, model.c)
 *        |  calls only through mp_backend's function pointers
 *        v
 *   cpu    (ops_cpu.c: OpenBLAS + OpenMP, float)          - the fast one
 *   ref    (ops_ref.c: plain loops, float or double)      - the test oracle
 *   cuda   (src/gpu, later: cuBLAS + our kernels, float)
 *
 * Every float buffer an op touches is a *device* buffer of the backend's
 * element type (b->dtype: float for cpu/cuda, float or double for ref), made
 * by b->alloc and filled by b->upload; model code never dereferences one.
 * Index arrays (graph structure) are device buffers of the C type named in
 * the signature (int32_t, int16_t, int8_t, uint8_t; the atom masses stay
 * float whatever the dtype: they are inputs, not computed values).
 *
 * Why a double backend: the finite-difference gradient checks of every op and
 * of both whole models run the *same* model code over the reference backend in
 * double precision (mp_backend_open(&b, "ref64")).  The model code is type
 * agnostic (it does pointer arithmetic in units of b->esize), so nothing is
 * compiled twice and no double twin of the model has to be kept in step.
 *
 * Conventions (STYLE.md): outputs first, then saved activations, then inputs,
 * then weights, then sizes.  gemm is the one exception: it keeps BLAS's
 * argument order, which every reader and cuBLAS already know.  Matrices are
 * row-major.  Ops named *_backward that produce a weight gradient ADD into it
 * (so gradients accumulate until mp_model_zero_grad); ops that produce an
 * activation gradient OVERWRITE it, as documented per op.  Unless stated,
 * outputs must not alias inputs.
 *
 * The directed-edge conventions of the graph store (featurize.h) are built
 * in: the reverse of edge e is e ^ 1, bond of edge e is e >> 1, in_start /
 * in_edge is the CSR of incoming edges per atom, mol_atom the atom ranges of
 * the molecules (mol_atom[0] == 0).
 *
 * Determinism: every op of every backend must give bitwise the same result
 * for the same inputs on every call.  The cpu backend also gives the same
 * result for any thread count (see ops_cpu.c for how).
 */
#ifndef MP_OPS_H
#define MP_OPS_H

#include "core/core.h"
#include "graph/graph.h"

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_F32 = 0, MP_F64 = 1 } mp_dtype;

/* Molecule readout (REFERENCE.md 2.1 step 4): mean over atoms (Chemprop v1
 * default), plain sum, or sum / agg_norm (v2 default, norm = 100).  A molecule
 * without atoms gets a zero vector in every mode. */
typedef enum { MP_AGG_MEAN = 0, MP_AGG_SUM = 1, MP_AGG_NORM = 2 } mp_aggregation;

/* Per-element losses (REFERENCE.md 2.6): squared error on (standardized)
 * regression targets; binary cross-entropy on logits for classification. */
typedef enum { MP_LOSS_MSE = 0, MP_LOSS_BCE = 1 } mp_loss_kind;

typedef struct mp_backend mp_backend;

/* A recorded sequence of ops that can be replayed (capture_* below). */
typedef struct mp_capture mp_capture;

/* The arguments of one gemm (see mp_backend.gemm), for gemm_batch. */
typedef struct {
    int         ta, tb, m, n, k;
    double      alpha, beta;
    const void *a, *b;
    void       *c;
    int         lda, ldb, ldc;
} mp_gemm;

struct mp_backend {
    const char *name;       /* "cpu", "ref", "ref64", "cuda"                     */
    mp_dtype    dtype;      /* element type of every float buffer                */
    size_t      esize;      /* sizeof that element type                          */
    int         host_memory;/* 1: buffers are plain host memory (cpu, ref)       */
    void       *ctx;        /* backend state (streams, handles), or NULL         */

    void (*close)(mp_backend *b);

    /* ---- memory ------------------------------------------------------- */
    /* A buffer of `bytes` (contents undefined), or NULL when out of memory. */
    void     *(*alloc)(mp_backend *b, size_t bytes);
    void      (*free)(mp_backend *b, void *p);                 /* NULL is fine */
    mp_status (*upload)(mp_backend *b, void *dst, const void *src_host, size_t bytes);
    mp_status (*download)(mp_backend *b, void *dst_host, const void *src, size_t bytes);
    void      (*zero)(mp_backend *b, void *dst, size_t bytes);
    void      (*copy)(mp_backend *b, void *dst, const void *src, size_t bytes);
    /* Waits for queued work and reports an asynchronous failure (cuda). */
    mp_status (*sync)(mp_backend *b);

    /* ---- dense ---------------------------------------------------------- */
    /* C[m x n] = alpha * op(A) op(B) + beta * C, row-major; op(X) = X or X^T.
     * A is [m x k] (ta = 0) or [k x m] (ta = 1), B is [k x n] or [n x k].
     * beta == 0 overwrites C (NaN in C does not propagate). */
    void (*gemm)(mp_backend *b, int ta, int tb, int m, int n, int k, double alpha,
                 const void *a, int lda, const void *bm, int ldb, double beta,
                 void *c, int ldc);
    /* Independent products (no C overlaps another's A, B or C), each as
     * gemm, in any order or concurrently: the two products of a backward
     * step (dW = X^T dY and dX = dY W^T) go together, so each can run
     * unsplit on its own core.  1 <= count <= 8. */
    void (*gemm_batch)(mp_backend *b, int count, const mp_gemm *g);
    /* y[i, 0:n_cols] = row[0:n_cols] for every row i (bias before a gemm). */
    void (*fill_rows)(mp_backend *b, void *y, int ldy, const void *row,
                      int32_t n_rows, int n_cols);
    /* dst[j] += sum_i x[i, j]  (bias gradient). */
    void (*col_sum)(mp_backend *b, void *dst, const void *x, int ldx,
                    int32_t n_rows, int n_cols);
    /* dst[i, 0:n_cols] = src[i, 0:n_cols]. */
    void (*copy2d)(mp_backend *b, void *dst, int ldd, const void *src, int lds,
                   int32_t n_rows, int n_cols);

    /* ---- elementwise ---------------------------------------------------- */
    /* y += x. */
    void (*add)(mp_backend *b, void *y, const void *x, size_t n);
    /* y[i] = keep(i) ? max(x[i], 0) / (1 - p) : 0, keep from mp_dropout_keep
     * with `key`; p == 0 is a plain ReLU.  y may alias x. */
    void (*relu_dropout)(mp_backend *b, void *y, const void *x, size_t n,
                         double p, uint64_t key);
    /* dx[i] = y[i] > 0 ? dy[i] / (1 - p) : 0, y the output of relu_dropout
     * (y > 0 exactly where the unit was kept and active).  Overwrites dx;
     * dx may alias dy. */
    void (*relu_dropout_backward)(mp_backend *b, void *dx, const void *y,
                                  const void *dy, size_t n, double p);
    /* y[i,j] = keep(i*ld + j) ? x[i,j] / (1 - p) : 0 over an [n_rows x
     * n_cols] block with row stride ld (the mask index uses ld, so the same
     * key drops the same units in a sub-block).  y may alias x. */
    void (*dropout)(mp_backend *b, void *y, const void *x, int32_t n_rows,
                    int n_cols, int ld, double p, uint64_t key);
    /* dx[i,j] = keep(i*ld + j) ? dy[i,j] / (1 - p) : 0.  Overwrites; may alias. */
    void (*dropout_backward)(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                             int n_cols, int ld, double p, uint64_t key);

    /* ---- graph ---------------------------------------------------------- */
    /* One-hot atom input times a weight matrix stored as rows [fdim x h]:
     * out[v] = bias + sum_{s in hot[v]} w[s] + mass[v] * w[mass_row]
     * (bias may be NULL = 0; hot[v] = hot[v*MP_ATOM_MAX_HOT ...], -1 = none). */
    void (*atom_embed)(mp_backend *b, void *out, const int16_t *hot, const float *mass,
                       const void *w, const void *bias, int32_t n_atoms, int h,
                       int mass_row);
    /* dw[s] += sum_{v: s in hot[v]} dout[v]; dw[mass_row] += sum_v mass[v] dout[v]. */
    void (*atom_embed_backward)(mp_backend *b, void *dw, const int16_t *hot,
                                const float *mass, const void *dout, int32_t n_atoms,
                                int h, int mass_row);
    /* Edge input of the D-MPNN, W_i [x_u ; bond_uv]:
     * h0[e] = a[src[e]] + sum_{s in bond_hot[e>>1]} wb[s]
     * (a = the atom part, already per atom; wb = the bond rows [14 x h]). */
    void (*edge_embed)(mp_backend *b, void *h0, const int32_t *edge_src,
                       const int8_t *bond_hot, const void *a, const void *wb,
                       int32_t n_edges, int h);
    /* da[v] = sum_{k in in(v)} dh0[k ^ 1]  (the edges leaving v; overwrites),
     * dwb[s] += sum_{e: s in bond_hot[e>>1]} dh0[e]. */
    void (*edge_embed_backward)(mp_backend *b, void *da, void *dwb,
                                const int32_t *in_start, const int32_t *in_edge,
                                const int8_t *bond_hot, const void *dh0,
                                int32_t n_atoms, int32_t n_edges, int h);
    /* The D-MPNN message: s[v] = sum_{k in in(v)} m[k] (s is scratch
     * [n_atoms x h], left holding those sums), msg[e] = s[src[e]] - m[e ^ 1]. */
    void (*message)(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                    const int32_t *in_edge, const int32_t *edge_src, const void *m,
                    int32_t n_atoms, int32_t n_edges, int h);
    /* Its adjoint: ds[v] = sum_{k in in(v)} dmsg[k ^ 1] (scratch),
     * dm[e] = ds[dst[e]] - dmsg[e ^ 1].  Overwrites dm. */
    void (*message_backward)(mp_backend *b, void *dm, void *ds, const int32_t *in_start,
                             const int32_t *in_edge, const int32_t *edge_dst,
                             const void *dmsg, int32_t n_atoms, int32_t n_edges, int h);
    /* a[v] = sum_{k in in(v)} m[k]  (incoming messages per atom; overwrites). */
    void (*atom_sum)(mp_backend *b, void *a, const int32_t *in_start,
                     const int32_t *in_edge, const void *m, int32_t n_atoms, int h);
    /* Its adjoint: dm[e] = da[dst[e]].  Overwrites. */
    void (*atom_sum_backward)(mp_backend *b, void *dm, const int32_t *edge_dst,
                              const void *da, int32_t n_edges, int h);
    /* out[i, 0:h] (row stride ldo) = scale_i * sum_{v in mol i} x[v], with
     * scale 1/n_atoms (mean), 1 (sum) or 1/norm (norm); 0 for an empty mol. */
    void (*pool)(mp_backend *b, void *out, int ldo, const int32_t *mol_atom,
                 const void *x, int32_t n_mols, int h, mp_aggregation agg, double norm);
    /* dx[v] = scale_i * dout[i, 0:h] for every atom v of molecule i
     * (overwrites the atoms of the n_mols molecules). */
    void (*pool_backward)(mp_backend *b, void *dx, const int32_t *mol_atom,
                          const void *dout, int ldo, int32_t n_mols, int h,
                          mp_aggregation agg, double norm);

    /* ---- loss and optimizer -------------------------------------------- */
    /* Chemprop's masked batch loss: loss[0] = sum(l * mask) / sum(mask) over
     * the [n x n_tasks] block, l the per-element loss of y against target;
     * dy = d loss / d y (overwrites).  With no label at all (sum(mask) = 0)
     * loss and dy are 0 (Chemprop would divide by zero).  `loss` is a device
     * buffer of one element. */
    void (*loss)(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                 const uint8_t *mask, int32_t n, int n_tasks, mp_loss_kind kind);
    /* One Adam step in PyTorch's form (torch.optim.Adam, L2 weight decay
     * added to the gradient): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); t >= 1. */
    void (*adam)(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                 double lr, double beta1, double beta2, double eps,
                 double weight_decay, long t);

    /* ---- fused (optional: NULL means "issue the unfused ops") ---------- */
    /* c[m x n] = ReLU(r + a w), a [m x k], w [k x n], r [m x n], row-major,
     * no transposes: the D-MPNN update M_t = ReLU(H0 + msg W_h) in one pass
     * (the GPU fuses the residual and the ReLU into the product's epilogue).
     * The same as copy2d(c <- r), gemm(beta 1), ReLU.  c may equal r (then
     * ldc == ldr); c must not overlap a or w. */
    void (*gemm_res_relu)(mp_backend *b, int m, int n, int k, const void *a, int lda,
                          const void *w, int ldw, const void *r, int ldr, void *c, int ldc);
    /* message_backward, then relu_dropout_backward through y, then add:
     * ds[v] = sum_{k in in(v)} dmsg[k ^ 1] (scratch), and for every edge e
     * g = ds[dst[e]] - dmsg[e ^ 1], dz[e] = y[e] > 0 ? g / (1 - p) : 0
     * (p == 0: g), dh0[e] += dz[e].  Overwrites dz; no argument aliases
     * another. */
    void (*message_backward_relu)(mp_backend *b, void *dz, void *dh0, void *ds,
                                  const int32_t *in_start, const int32_t *in_edge,
                                  const int32_t *edge_dst, const void *dmsg, const void *y,
                                  double p, int32_t n_atoms, int32_t n_edges, int h);
    /* ---- device-scheduled training steps (resident.c) ----------------- */
    /* Adam as above, but the step's two scalars come from device memory, so
     * that one captured step can be replayed with a new learning rate and
     * step count each time: with k = k_dev[0], step = sched[2k] (lr / (1 -
     * b1^t)) and bc2s = sched[2k + 1] (sqrt(1 - b2^t)), made on the host by
     * mp_adam_sched_entry.  sched is float whatever the dtype.  On cpu and cuda
     * this is bitwise what adam gives for the lr and t of that entry (ref
     * uses the float-rounded scalars in its double arithmetic). */
    void (*adam_sched)(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                       const float *sched, const int32_t *k_dev, double beta1, double beta2,
                       double eps, double weight_decay);
    /* Ends a step: losses[k] = loss[0]; k_dev[0] += 1 (k = k_dev[0] before).
     * losses and loss are of the backend's element type. */
    void (*step_end)(mp_backend *b, int32_t *k_dev, void *losses, const void *loss);

    /* ---- capture (optional: NULL where ops cannot be recorded) -------- */
    /* Between capture_begin and capture_end the ops issued are recorded,
     * not run; replay runs the recording again (cuda: a CUDA graph).  Every
     * pointer, size and scalar argument is fixed at capture: data changes
     * only through the device buffers (upload before replay, or scalars
     * read from device memory: adam_sched, the keyed dropout ops).  While
     * recording, only ops that stay on the device may run (upload,
     * download, sync, alloc and free fail the capture; capture_end then
     * reports it).  *out is NULL on failure.  capture_free(NULL) is fine. */
    mp_status (*capture_begin)(mp_backend *b);
    mp_status (*capture_end)(mp_backend *b, mp_capture **out);
    mp_status (*replay)(mp_backend *b, mp_capture *c);
    void      (*capture_free)(mp_backend *b, mp_capture *c);

    /* ---- device-keyed dropout (optional; resident.c) ------------------ */
    /* relu_dropout, dropout and dropout_backward with the key read from
     * device memory at the device step index: key = keys[k_dev[0] * stride]
     * (keys: a device buffer of uint64_t; the model passes keys + its layer
     * and stride = keys per step), so one captured step replays with each
     * step's own keys.  Bitwise the same as the plain op given that key.
     * cpu and ref: mp_ops_keyed_host; cuda: ops_cuda_keyed.cu. */
    void (*relu_dropout_keyed)(mp_backend *b, void *y, const void *x, size_t n, double p,
                               const uint64_t *keys, const int32_t *k_dev, int stride);
    void (*dropout_keyed)(mp_backend *b, void *y, const void *x, int32_t n_rows, int n_cols,
                          int ld, double p, const uint64_t *keys, const int32_t *k_dev,
                          int stride);
    void (*dropout_backward_keyed)(mp_backend *b, void *dx, const void *dy, int32_t n_rows,
                                   int n_cols, int ld, double p, const uint64_t *keys,
                                   const int32_t *k_dev, int stride);

    /* ---- inference (optional: NULL means "issue the unfused ops") ------ */
    /* edge_embed, then M_0 = ReLU(H0): h0 as edge_embed writes it, and
     * m0[e] = max(h0[e], 0), one pass writing both (the GPU saves re-reading
     * H0).  The same as edge_embed(h0) then relu_dropout(m0, h0, p = 0).
     * h0 and m0 must not overlap. */
    void (*edge_embed_relu)(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                            const int8_t *bond_hot, const void *a, const void *wb,
                            int32_t n_edges, int h);
    /* message without its scratch: msg[e] = sum_{k in in(src[e])} m[k] -
     * m[e ^ 1], the sum in CSR order from 0, so bitwise message's msg; the
     * GPU sums per atom in registers and writes the edges leaving it, instead
     * of a segment-sum pass and a gather pass (cpu/ref: NULL, use message).
     * relu_in = 1 reads every row of m through max(., 0): the first step
     * of an inference forward reads H0 itself, so M_0 = ReLU(H0) is never
     * stored (bitwise the same msg). */
    void (*message_direct)(mp_backend *b, void *msg, const int32_t *in_start,
                           const int32_t *in_edge, const int32_t *edge_src, const void *m,
                           int relu_in, int32_t n_atoms, int32_t n_edges, int h);

    /* ---- streaming (optional: NULL on host-memory backends) ----------- */
    /* What a prediction pipeline needs to pack and upload one batch while
     * the device computes another.  Two lanes: 0 is the queue every op
     * runs on, 1 a copy lane beside it.  A host buffer given to an async
     * copy must come from host_alloc (page-locked) and be left alone until
     * a fence recorded after the copy has passed (fence_sync).
     * host_alloc: NULL on failure, with the message set. */
    void     *(*host_alloc)(mp_backend *b, size_t bytes);
    void      (*host_free)(mp_backend *b, void *p);            /* NULL is fine */
    void      (*upload_async)(mp_backend *b, int lane, void *dst, const void *src_host,
                              size_t bytes);
    void      (*download_async)(mp_backend *b, int lane, void *dst_host, const void *src,
                                size_t bytes);
    /* Fence f (0 <= f < MP_FENCES): record marks all the work queued on
     * `lane` so far; wait makes later work on `lane` wait for the fence's
     * work; sync blocks the host until it is done and reports any kept
     * failure (as b->sync).  A fence not yet recorded has passed. */
    void      (*fence_record)(mp_backend *b, int lane, int f);
    void      (*fence_wait)(mp_backend *b, int lane, int f);
    mp_status (*fence_sync)(mp_backend *b, int f);

    /* ---- bf16 operand storage (cuda at bf16 only; see below) ---------- */
    /* half_acts = 1: the ops of this block exist, and the model stores the
     * operands of its big products in bfloat16 (2 bytes an element, round to
     * nearest even): the D-MPNN's msg[t], dZ_t and dMsg (W_h), a and dho
     * (W_o), and a bf16 copy of W_h and of W_o's message rows made at the
     * start of every forward.  Products read those with fp32 accumulation into fp32
     * outputs; parameters, gradients, Adam moments and every other
     * activation stay of the element type.  0 (cpu, ref, cuda fp32 / tf32):
     * every pointer of the block is NULL.  A "bf16 buffer" below holds n
     * bfloat16 values (n * 2 bytes, from b->alloc). */
    int half_acts;
    /* dst (bf16) = src rounded, n elements. */
    void (*to_bf16)(mp_backend *b, void *dst, const void *src, size_t n);
    /* gemm_batch whose products all read A and B as bf16 buffers, with
     * fp32 accumulation; C is of the element type, except for product i
     * when bit i of c_bf16 is set: then C is a bf16 buffer (the result
     * rounded once, at the end). */
    void (*gemm_batch_bf16)(mp_backend *b, int count, const mp_gemm *g, unsigned c_bf16);
    /* gemm_res_relu with a and w bf16 buffers; r and c of the element type,
     * or bf16 buffers when rc_bf16 (the residual read, the result rounded). */
    void (*gemm_res_relu_bf16)(mp_backend *b, int m, int n, int k, const void *a, int lda,
                               const void *w, int ldw, const void *r, int ldr, void *c,
                               int ldc, int rc_bf16);
    /* message, msg written as a bf16 buffer (s as in message); m is a bf16
     * buffer when m_bf16, else of the element type. */
    void (*message_bf16)(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                         const int32_t *in_edge, const int32_t *edge_src, const void *m,
                         int m_bf16, int32_t n_atoms, int32_t n_edges, int h);
    /* atom_sum, a written as a bf16 buffer; m as in message_bf16. */
    void (*atom_sum_bf16)(mp_backend *b, void *a, const int32_t *in_start,
                          const int32_t *in_edge, const void *m, int m_bf16, int32_t n_atoms,
                          int h);
    /* relu_dropout_backward (dx may alias dy), and dxh (bf16) = dx rounded. */
    void (*relu_dropout_backward_bf16)(mp_backend *b, void *dx, void *dxh, const void *y,
                                       const void *dy, size_t n, double p);
    /* atom_sum_backward, then relu_dropout_backward_bf16 through y, in one
     * pass (the gathered gradient is never stored):
     * dx[e] = y[e] > 0 ? da[dst[e]] / (1 - p) : 0 (p == 0: da[dst[e]]),
     * dxh (bf16) = dx rounded.  Overwrites dx and dxh.  y is a bf16 buffer
     * when y_bf16. */
    void (*atom_sum_backward_relu_bf16)(mp_backend *b, void *dx, void *dxh,
                                        const int32_t *edge_dst, const void *da, const void *y,
                                        int y_bf16, double p, int32_t n_edges, int h);
    /* message_backward_relu with dmsg a bf16 buffer and dz written only as
     * a bf16 buffer dzh; dh0 += the unrounded dz (ds stays of the element
     * type); y is a bf16 buffer when y_bf16. */
    void (*message_backward_relu_bf16)(mp_backend *b, void *dzh, void *dh0, void *ds,
                                       const int32_t *in_start, const int32_t *in_edge,
                                       const int32_t *edge_dst, const void *dmsg,
                                       const void *y, int y_bf16, double p, int32_t n_atoms,
                                       int32_t n_edges, int h);
    /* Optional within half_acts (NULL: H0 and M_t stay of the element
     * type).  With it, a model without dropout stores H0 and the messages
     * M_t in bf16 as well (the *_bf16 flags above set), halving the bytes of
     * every pass over them.  edge_embed, with h0 and m0 = ReLU(h0) both
     * written as bf16 buffers (m0 from the unrounded sum): */
    void (*edge_embed_relu_bf16)(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                                 const int8_t *bond_hot, const void *a, const void *wb,
                                 int32_t n_edges, int h);
    /* relu_dropout on bf16 buffers (y may alias x).  Not used by the model
     * yet: its dropout layers go through dropout.c, whose device-keyed form
     * (resident graph replay) has no bf16 twin, so a model with dropout
     * keeps M_t in fp32. */
    void (*relu_dropout_bf16)(mp_backend *b, void *y, const void *x, size_t n, double p,
                              uint64_t key);
};

#define MP_FENCES 8

/* Gives a host-memory backend (cpu, ref) the keyed dropout ops: each reads
 * its key on the host and calls the backend's plain op (ops_keyed.c). */
void mp_ops_keyed_host(mp_backend *b);

/* The fused ops as the unfused ops they replace (copy2d, gemm, relu_dropout;
 * message_backward, relu_dropout_backward, add): what the cpu and ref
 * backends use, bit for bit what the model computed before the fusion. */
void mp_ops_gemm_res_relu_composed(mp_backend *b, int m, int n, int k, const void *a, int lda,
                                   const void *w, int ldw, const void *r, int ldr, void *c,
                                   int ldc);
void mp_ops_message_backward_relu_composed(mp_backend *b, void *dz, void *dh0, void *ds,
                                           const int32_t *in_start, const int32_t *in_edge,
                                           const int32_t *edge_dst, const void *dmsg,
                                           const void *y, double p, int32_t n_atoms,
                                           int32_t n_edges, int h);

/* edge_embed_relu as edge_embed then relu_dropout (cpu, ref). */
void mp_ops_edge_embed_relu_composed(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                                     const int8_t *bond_hot, const void *a, const void *wb,
                                     int32_t n_edges, int h);

/* The two float scalars of one Adam step (see adam_sched), computed exactly
 * as every backend's adam computes them from lr and t (t >= 1). */
static inline void mp_adam_sched_entry(double lr, double beta1, double beta2, long t,
                                       float out[2])
{
    double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
    out[0] = (float)(lr / bc1);
    out[1] = (float)sqrt(bc2);
}

/*
 * Opens a backend by name (backend.c's registry): "cpu" (OpenBLAS + OpenMP,
 * float), "ref" (plain loops, float), "ref64" (plain loops, double: the
 * gradient-check oracle), "gpu" / "gpu:fp32|tf32|bf16" (src/gpu; "cuda" is
 * the same; without a usable GPU, or in a CUDA=0 build, MP_ERR_NODEVICE with
 * the reason).  NULL or "" is "cpu".  MP_ERR_ARG names the known backends
 * for an unknown name.  Close with mp_backend_close.  The cpu backend uses
 * mp_threads_get() threads and sets OpenBLAS to one thread (it splits the
 * products itself).  Its first open may re-select OpenBLAS's kernels
 * (cpu.c), which briefly sets an environment variable: open it before
 * starting threads that read the environment.
 */
mp_status mp_backend_open(mp_backend **out, const char *name);
void      mp_backend_close(mp_backend *b);

/* 1 when backend `name` can be opened here; 0 with the reason in why[0..n)
 * (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA
 * runtime version", "molprop was built without CUDA", "unknown backend"). */
int mp_backend_available(const char *name, char *why, size_t n);

/*
 * What a backend module exports to the registry (backend.c lists the linked
 * modules).  names: the names it answers to, comma-separated (each may also
 * be followed by ":variant"); usage: the same for messages and help texts;
 * open: opens the backend `name` (one of its names); available: as
 * mp_backend_available.
 */
typedef struct {
    const char *names;
    const char *usage;
    const char *about;
    mp_status (*open)(mp_backend **out, const char *name);
    int       (*available)(char *why, size_t n);
} mp_backend_provider;

extern const mp_backend_provider mp_backend_cpu_provider;   /* cpu.c    */
extern const mp_backend_provider mp_backend_ref_provider;   /* ref.c    */
extern const mp_backend_provider mp_backend_gpu_provider;   /* src/gpu  */

/* The provider answering to `name`, or NULL. */
const mp_backend_provider *mp_backend_find(const char *name);

/* The cpu and ref backends, opened directly (tests). */
mp_status mp_backend_cpu_open(mp_backend **out);
mp_status mp_backend_ref_open(mp_backend **out, mp_dtype dtype);

/* One line for logs: the BLAS core the cpu backend runs on, e.g.
 * "OpenBLAS core SkylakeX (OpenBLAS chose Prescott for this CPU)". */
const char *mp_backend_cpu_info(void);

/*
 * Dropout keep decision, shared by every backend so they drop the same units:
 * a counter-based hash (splitmix64's finalizer) of (key, index) gives 24
 * random bits u; the unit is kept when u >= thr, thr = mp_dropout_threshold(p)
 * = ceil(p * 2^24), i.e. with probability 1 - p (up to 2^-24).  Counter based,
 * so a GPU thread can decide for its own element and backward can recompute
 * the mask instead of storing it.  The key comes from the model's dropout
 * stream (one draw per dropout layer per step).
 */
static inline uint32_t mp_dropout_threshold(double p)
{
    if (!(p > 0)) return 0;
    if (p >= 1) return 1u << 24;
    double t = p * 16777216.0;
    uint32_t u = (uint32_t)t;
    return (double)u < t ? u + 1 : u;
}

static inline int mp_dropout_keep(uint64_t key, uint64_t index, uint32_t thr)
{
    uint64_t z = key + (index + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= thr;
}

#ifdef __cplusplus
}
#endif
#endif /* MP_OPS_H */
