/*
 * ops.h - the backend seam: the small set of operations the models are
 * written against, and the backends that implement them.
 *
 *   model code (dmpnn.c, ffn.c, model.c)
 *        |  calls only through mp_backend's function pointers
 *        v
 *   cpu    (cpu.c, cpu_graph.c: OpenBLAS + OpenMP, float;     - the fast one
 *           cpu:bf16 adds cpu_bf16.c, cpu_dnnl.c: bf16 storage, oneDNN products)
 *   ref    (ref.c: plain loops, float or double; bf16 mode)   - the test oracle
 *   cuda   (src/gpu: cuBLAS(Lt) + our kernels, float; bf16 storage)
 *
 * Every float buffer an op touches is a *device* buffer, made by b->alloc and
 * filled by b->upload; model code never dereferences one.  Index arrays
 * (graph structure) are device buffers of the C type named in the signature
 * (int32_t, int16_t, int8_t, uint8_t; the atom masses stay float whatever the
 * element type: they are inputs, not computed values).
 *
 * Precision is data.  Each float operand has a storage type (mp_stype): the
 * backend's element type (b->dtype: float for cpu/cuda, float or double for
 * ref; MP_ST_ELEM) or bfloat16 (MP_ST_BF16: 2 bytes an element, rounded to
 * nearest even when written).  An op that can read or write bf16 takes the
 * storage type of each such operand as an argument next to it; every other
 * operand is of the element type.  Arithmetic is always in the element type
 * (fp32 accumulation on cpu/cuda, double on ref): a bf16 operand is widened
 * exactly when read and rounded once when written.  Parameters, gradients
 * and the Adam moments are of the element type.  The backend reports which
 * storage the model should give its product operands (act_st below):
 * "cpu" stores everything in fp32; "cpu:bf16" takes bf16 operands as the GPU
 * does (its products bf16 x bf16 -> fp32 through oneDNN, see cpu_dnnl.c).
 *
 * Why a double backend: the finite-difference gradient checks of every op and
 * of both whole models run the *same* model code over the reference backend in
 * double precision (mp_backend_open(&b, "ref64")).  The model code is type
 * agnostic (it does pointer arithmetic in units of b->esize, or of
 * mp_stype_size), so nothing is compiled twice and no double twin of the
 * model has to be kept in step.
 *
 * Conventions (STYLE.md): outputs first, then saved activations, then inputs,
 * then weights, then sizes; a storage type follows the pointer it describes.
 * gemm is the one exception: its mp_gemm keeps BLAS's argument order, which
 * every reader and cuBLAS already know.  Matrices are row-major.  Ops named
 * *_backward that produce a weight gradient ADD into it (so gradients
 * accumulate until mp_model_zero_grad); ops that produce an activation
 * gradient OVERWRITE it, as documented per op.  Unless stated, outputs must
 * not alias inputs.  Every op takes empty sizes (0 rows, 0 edges, h 0) and
 * then writes nothing.
 *
 * The fused ops (a product with its residual and ReLU epilogue, a gather with
 * the ReLU backward after it, ...) are part of the seam and every backend
 * implements them (cpu: composed of its plain loops, bit for bit what the
 * unfused ops gave), so the model code has no branches on what a backend
 * offers.
 *
 * The directed-edge conventions of the graph store (graph.h) are built in:
 * the reverse of edge e is e ^ 1, bond of edge e is e >> 1, in_start /
 * in_edge is the CSR of incoming edges per atom, mol_atom the atom ranges of
 * the molecules (mol_atom[0] == 0).
 *
 * Determinism: every op of every backend must give bitwise the same result
 * for the same inputs on every call.  The cpu backend also gives the same
 * result for any thread count (see cpu.c for how).
 */
#ifndef MP_OPS_H
#define MP_OPS_H

#include "core/core.h"
#include "graph/graph.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The few helpers below that kernels call too (mp_loss_width, mp_loss_col). */
#ifdef __CUDACC__
#define MP_INLINE_HD static inline __host__ __device__
#else
#define MP_INLINE_HD static inline
#endif

typedef enum { MP_F32 = 0, MP_F64 = 1 } mp_dtype;

/* The storage type of an operand: the backend's element type, or bfloat16. */
typedef enum { MP_ST_ELEM = 0, MP_ST_BF16 = 1 } mp_stype;

/* Molecule readout (REFERENCE.md 2.1 step 4): mean over atoms (Chemprop v1
 * default), plain sum, or sum / agg_norm (v2 default, norm = 100).  A molecule
 * without atoms gets a zero vector in every mode.  MP_AGG_ATTENTIVE (Chemprop
 * v2's AttentiveAggregation) is a model-level readout made of a product and
 * the attn_pool ops below; pool and pool_backward do not take it. */
typedef enum {
    MP_AGG_MEAN = 0, MP_AGG_SUM = 1, MP_AGG_NORM = 2, MP_AGG_ATTENTIVE = 3
} mp_aggregation;

/*
 * The losses (REFERENCE.md 2.6; Chemprop v2.3.1's nn/metrics.py, v1.6.1's
 * train/loss_functions.py), each on the model's raw outputs.  A (molecule,
 * task) pair reads mp_loss_width outputs of its row (mp_loss_col says which):
 *
 *   mse, mae, bounded_mse, bounded_mae, rmse, bounded_rmse: y (1 output)
 *   bce, binary_mcc:      a logit (1); binary_mcc reduces over the batch
 *   mve:                  mean y[t], variance softplus(y[T + t])       (2, chunked)
 *   evidential:           gamma y[t], nu softplus(y[T+t]), alpha softplus(y[2T+t]) + 1,
 *                         beta softplus(y[3T+t])                        (4, chunked)
 *   quantile:             lower y[t], upper y[T + t]                   (2, chunked)
 *   ce, multiclass_mcc:   C logits y[t C + c]                          (C, interleaved)
 *   dirichlet:            C alphas softplus(y[t C + c]) + 1            (C, interleaved;
 *                         C = 2 for a binary task)
 *   sid, wasserstein:     a spectrum: the T outputs of a row are its T positions (1
 *                         each); reduced per row (mp_loss_spectral_row, formulas.h)
 *
 * (T tasks per row, C classes.)  The chunked layouts are Chemprop's
 * torch.chunk of the output, the interleaved ones its reshape(b, t, C).  The
 * bounded losses clamp y to the label where an inequality label holds
 * ("<5": y below 5 counts as 5).  MP_LOSS_MSE and MP_LOSS_BCE keep their
 * values: 0 and 1.
 */
typedef enum {
    MP_LOSS_MSE = 0, MP_LOSS_BCE = 1, MP_LOSS_MAE, MP_LOSS_RMSE, MP_LOSS_BOUNDED_MSE,
    MP_LOSS_BOUNDED_MAE, MP_LOSS_BOUNDED_RMSE, MP_LOSS_MVE, MP_LOSS_EVIDENTIAL,
    MP_LOSS_QUANTILE, MP_LOSS_BINARY_MCC, MP_LOSS_CE, MP_LOSS_MULTICLASS_MCC,
    MP_LOSS_DIRICHLET, MP_LOSS_SID, MP_LOSS_WASSERSTEIN, MP_LOSS_COUNT
} mp_loss_kind;

/* The spectral heads' output activation (Chemprop v1's --spectra_activation),
 * which makes a raw output a positive intensity. */
enum { MP_SPECTRA_EXP = 0, MP_SPECTRA_SOFTPLUS = 1 };

/* Classes a multiclass task may have (the width of a class loss's outputs). */
#define MP_LOSS_MAX_CLASSES 64

/* Inequality flags of a label (mp_loss_spec.ineq): "<x" and ">x". */
enum { MP_INEQ_LT = 1, MP_INEQ_GT = 2 };

/*
 * One call of the loss op.  The reduction is Chemprop's:
 *   sum over labelled (i, t) of l(i, t) w_i tw_t, divided by the number of
 *   labelled pairs (rmse: the square root of that; the mcc losses: the mean
 *   over tasks of tw_t (1 - MCC_t), each MCC_t over the batch's labelled rows
 *   weighted by w_i, Chemprop v2's soft (binary) and hard (multiclass) MCC).
 * w_i: sample_weight (NULL: 1), tw_t: task_weight (NULL: 1), both device
 * buffers of the element type; ineq [n x n_tasks] (NULL: none) for the
 * bounded losses.  The parameters: lambda (evidential and dirichlet
 * regularization, Chemprop's v_kl), eps (evidential), alpha (quantile: the
 * interval's quantiles alpha/2 and 1 - alpha/2); for sid and wasserstein
 * spectra_act (MP_SPECTRA_*) and floor (> 0: Chemprop v1's
 * spectra_target_floor, the least intensity a prediction counts with).
 * sid and wasserstein: l(i, t) is position t's term of row i's divergence
 * (formulas.h), divided by the labelled positions, as Chemprop's
 * loss.sum() / mask.sum().
 */
typedef struct {
    mp_loss_kind   kind;
    int            n_tasks;
    int            n_classes;      /* ce, multiclass_mcc, dirichlet: C (>= 2) */
    double         lambda, eps, alpha;
    const void    *task_weight;    /* [n_tasks]  or NULL                      */
    const void    *sample_weight;  /* [n]        or NULL                      */
    const uint8_t *ineq;           /* [n x n_tasks] MP_INEQ_* or NULL         */
    int            spectra_act;    /* sid, wasserstein: MP_SPECTRA_*           */
    double         floor;          /* sid, wasserstein: > 0                    */
} mp_loss_spec;

/* Raw outputs a (molecule, task) pair of loss `kind` reads. */
MP_INLINE_HD int mp_loss_width(mp_loss_kind kind, int n_classes)
{
    switch (kind) {
    case MP_LOSS_MVE: case MP_LOSS_QUANTILE: return 2;
    case MP_LOSS_EVIDENTIAL: return 4;
    case MP_LOSS_CE: case MP_LOSS_MULTICLASS_MCC: case MP_LOSS_DIRICHLET: return n_classes;
    default: return 1;
    }
}

/* The column, in an output row of n_tasks * width values, of output k
 * (0 <= k < width) of task t. */
MP_INLINE_HD size_t mp_loss_col(mp_loss_kind kind, int n_tasks, int n_classes, int t, int k)
{
    switch (kind) {
    case MP_LOSS_MVE: case MP_LOSS_QUANTILE: case MP_LOSS_EVIDENTIAL:
        return (size_t)k * (size_t)n_tasks + (size_t)t;
    case MP_LOSS_CE: case MP_LOSS_MULTICLASS_MCC: case MP_LOSS_DIRICHLET:
        return (size_t)t * (size_t)n_classes + (size_t)k;
    default:
        return (size_t)t;
    }
}

/*
 * Activation functions (Chemprop's --activation): ReLU, LeakyReLU(0.1)
 * (Chemprop's slope), PReLU (one learned slope a), ELU(1), SELU, tanh, GELU
 * (the exact, erf form).
 */
typedef enum {
    MP_ACT_RELU = 0, MP_ACT_LEAKYRELU, MP_ACT_PRELU, MP_ACT_ELU, MP_ACT_SELU, MP_ACT_TANH,
    MP_ACT_GELU, MP_ACT_COUNT
} mp_act_kind;

typedef struct mp_backend mp_backend;

/* A recorded sequence of ops that can be replayed (capture_* below). */
typedef struct mp_capture mp_capture;

/* One product of gemm: C[m x n] = alpha op(A) op(B) + beta C (see gemm).
 * The storage types come last, so an initializer that leaves them out
 * means the element type. */
typedef struct {
    int         ta, tb, m, n, k;
    double      alpha, beta;
    const void *a, *b;
    void       *c;
    int         lda, ldb, ldc;
    mp_stype    a_st, b_st, c_st;
} mp_gemm;

/*
 * A dropout key (ops.h's mp_dropout_keep): a host value, or one read from
 * device memory at the device step index, keys[k_dev[0] * stride] (keys: a
 * device buffer of uint64_t, k_dev one int32_t), so that a captured step
 * replays with each step's own keys (resident.c).  Both forms drop the same
 * units for the same key.
 */
typedef struct {
    uint64_t        value;     /* the key, when keys is NULL */
    const uint64_t *keys;
    const int32_t  *k_dev;
    int             stride;
} mp_key;

static inline mp_key mp_key_host(uint64_t value)
{
    mp_key k = { value, NULL, NULL, 0 };
    return k;
}

static inline mp_key mp_key_dev(const uint64_t *keys, const int32_t *k_dev, int stride)
{
    mp_key k = { 0, keys, k_dev, stride };
    return k;
}

/* The key's value, for a backend whose buffers are host memory. */
static inline uint64_t mp_key_value(mp_key k)
{
    return k.keys ? k.keys[(size_t)k.k_dev[0] * (size_t)k.stride] : k.value;
}

struct mp_backend {
    const char *name;       /* "cpu", "ref", "ref64", "ref:bf16", "cuda:tf32", ... */
    mp_dtype    dtype;      /* element type of every float buffer                */
    size_t      esize;      /* sizeof that element type                          */
    int         host_memory;/* 1: buffers are plain host memory (cpu, ref)       */
    /* The storage the model gives the operands of its big products (the
     * D-MPNN's messages, their gradients, the readout input, the weight
     * operands) and, in a model without dropout, H0 and the messages M_t:
     * MP_ST_ELEM, or MP_ST_BF16 (cuda:bf16, ref:bf16, ref64:bf16). */
    mp_stype    act_st;
    /* Row alignment the backend's products want, in elements (0 or 1: any).
     * A wide model whose hidden size is not a multiple of it runs padded
     * (model_pad.c).  cuda:bf16: 8 (16-byte bf16 rows, which Hopper's fast
     * cuBLAS kernels need), or MOLPROP_CUDA_ROW_ALIGN's value (ops_cuda.cu). */
    int         row_align;
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
    /* count independent products (1 <= count <= 8; no C overlaps another's
     * A, B or C), each C[m x n] = alpha * op(A) op(B) + beta * C, row-major;
     * op(X) = X or X^T; A is [m x k] (ta = 0) or [k x m] (ta = 1), B is
     * [k x n] or [n x k].  beta == 0 overwrites C (NaN in C does not
     * propagate).  Each operand has its storage type (a_st, b_st, c_st; A and
     * B of one product the same); a bf16 C is rounded once, at the end.  The
     * products may run in any order or concurrently: the two of a backward
     * step (dW = X^T dY and dX = dY W^T) go together, so each can run
     * unsplit on its own core or stream. */
    void (*gemm)(mp_backend *b, int count, const mp_gemm *g);
    /* c[m x n] = ReLU(r + a w), a [m x k], w [k x n] (both of storage
     * aw_st), r and c [m x n] (both rc_st), row-major, no transposes: the
     * D-MPNN update M_t = ReLU(H0 + msg W_h) in one pass (the GPU fuses the
     * residual and the ReLU into the product's epilogue).  c may equal r
     * (then ldc == ldr); c must not overlap a or w. */
    void (*gemm_res_relu)(mp_backend *b, int m, int n, int k, const void *a, int lda,
                          const void *w, int ldw, mp_stype aw_st, const void *r, int ldr,
                          void *c, int ldc, mp_stype rc_st);
    /* dst[i, 0:n_cols] = src[i, 0:n_cols] for every row i < n_rows, each
     * value converted from src_st to dst_st (bf16 rounded to nearest even).
     * lds == 0: every row of dst gets src's one row (a bias before a
     * product).  dst and src must not overlap. */
    void (*copy2d)(mp_backend *b, void *dst, mp_stype dst_st, int ldd, const void *src,
                   mp_stype src_st, int lds, int32_t n_rows, int n_cols);
    /* dst[j] += sum_i x[i, j]  (bias gradient). */
    void (*col_sum)(mp_backend *b, void *dst, const void *x, int ldx,
                    int32_t n_rows, int n_cols);

    /* ---- elementwise ---------------------------------------------------- */
    /* y[i] = keep(i) ? max(x[i], 0) / (1 - p) : 0, keep from mp_dropout_keep
     * with `key`; p == 0 is a plain ReLU.  x and y of storage st; y may
     * alias x. */
    void (*relu_dropout)(mp_backend *b, void *y, const void *x, mp_stype st, size_t n,
                         double p, mp_key key);
    /* dx[i] = y[i] > 0 ? dy[i] / (1 - p) : 0, y (storage y_st) the output of
     * relu_dropout (y > 0 exactly where the unit was kept and active).
     * Overwrites dx; dx may alias dy.  dxo: a copy of dx in storage dxo_st
     * (the operand of a product), written in the same pass; dxo == dx: no
     * copy (dxo_st must then be MP_ST_ELEM). */
    void (*relu_dropout_backward)(mp_backend *b, void *dx, void *dxo, mp_stype dxo_st,
                                  const void *y, mp_stype y_st, const void *dy, size_t n,
                                  double p);
    /* y[i,j] = keep(i*ld + j) ? x[i,j] / (1 - p) : 0 over an [n_rows x
     * n_cols] block with row stride ld (the mask index uses ld, so the same
     * key drops the same units in a sub-block).  y may alias x.  Dropout is
     * linear and diagonal: the same op with the same key is its backward. */
    void (*dropout)(mp_backend *b, void *y, const void *x, int32_t n_rows, int n_cols, int ld,
                    double p, mp_key key);

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
     * (a = the atom part, already per atom; wb = the bond rows [14 x h]),
     * and, when m0 != NULL, M_0 = ReLU(H0) in the same pass: m0[e] =
     * max(h0[e], 0) from the unrounded sum.  h0 and m0 of storage st, not
     * overlapping. */
    void (*edge_embed)(mp_backend *b, void *h0, void *m0, mp_stype st, const int32_t *edge_src,
                       const int8_t *bond_hot, const void *a, const void *wb,
                       int32_t n_edges, int h);
    /* da[v] = sum_{k in in(v)} dh0[k ^ 1]  (the edges leaving v; overwrites),
     * dwb[s] += sum_{e: s in bond_hot[e>>1]} dh0[e]. */
    void (*edge_embed_backward)(mp_backend *b, void *da, void *dwb,
                                const int32_t *in_start, const int32_t *in_edge,
                                const int8_t *bond_hot, const void *dh0,
                                int32_t n_atoms, int32_t n_edges, int h);
    /* The D-MPNN message: msg[e] = S[src[e]] - M[e ^ 1] with S[v] = sum_{k
     * in in(v)} M[k] in CSR order, M = m, or max(m, 0) when relu_in (the
     * first step of an inference forward reads H0 itself, so M_0 = ReLU(H0)
     * is never stored; the same bits).  msg of storage msg_st, m of m_st.
     * s: scratch [n_atoms x h] of the element type for S; a backend may
     * compute msg without it (cuda sums per atom in registers and writes the
     * edges leaving it), so its contents afterwards are unspecified. */
    void (*message)(mp_backend *b, void *msg, mp_stype msg_st, void *s,
                    const int32_t *in_start, const int32_t *in_edge, const int32_t *edge_src,
                    const void *m, mp_stype m_st, int relu_in, int32_t n_atoms,
                    int32_t n_edges, int h);
    /* Its adjoint, with the ReLU / dropout backward of the step before and
     * the sum into dH0 fused in: ds[v] = sum_{k in in(v)} dmsg[k ^ 1] in
     * CSR order, and for every edge g = ds[dst[e]] - dmsg[e ^ 1];
     *   y == NULL:  dz[e] = g                               (dh0 must be NULL)
     *   else:       dz[e] = y[e] > 0 ? g / (1 - p) : 0  (p == 0: g), and
     *               dh0[e] += dz[e] (the unrounded value; dh0 of the element type).
     * dz of storage dz_st (overwritten), dmsg of dmsg_st, y of y_st.  ds:
     * scratch [n_atoms x h] of the element type, as message's s (cuda keeps
     * each atom's sum in registers and never writes it), so its contents
     * afterwards are unspecified.  No argument aliases another. */
    void (*message_backward)(mp_backend *b, void *dz, mp_stype dz_st, void *dh0, void *ds,
                             const int32_t *in_start, const int32_t *in_edge,
                             const int32_t *edge_dst, const void *dmsg, mp_stype dmsg_st,
                             const void *y, mp_stype y_st, double p, int32_t n_atoms,
                             int32_t n_edges, int h);
    /* a[v] = sum_{k in in(v)} m[k]  (incoming messages per atom; overwrites);
     * a of storage a_st, m of m_st. */
    void (*atom_sum)(mp_backend *b, void *a, mp_stype a_st, const int32_t *in_start,
                     const int32_t *in_edge, const void *m, mp_stype m_st, int32_t n_atoms,
                     int h);
    /* Its adjoint, with the ReLU / dropout backward through y fused in:
     * dm[e] = da[dst[e]] (y == NULL), or y[e] > 0 ? da[dst[e]] / (1 - p) : 0
     * (y of storage y_st; p == 0: da[dst[e]]).  Overwrites dm (element
     * type); dmo: a copy of dm in storage dmo_st written in the same pass
     * (dmo == dm: none, dmo_st MP_ST_ELEM). */
    void (*atom_sum_backward)(mp_backend *b, void *dm, void *dmo, mp_stype dmo_st,
                              const int32_t *edge_dst, const void *da, const void *y,
                              mp_stype y_st, double p, int32_t n_edges, int h);
    /* out[i, 0:h] (row stride ldo) = scale_i * sum_{v in mol i} x[v], with
     * scale 1/n_atoms (mean), 1 (sum) or 1/norm (norm); 0 for an empty mol. */
    void (*pool)(mp_backend *b, void *out, int ldo, const int32_t *mol_atom,
                 const void *x, int32_t n_mols, int h, mp_aggregation agg, double norm);
    /* dx[v] = scale_i * dout[i, 0:h] for every atom v of molecule i
     * (overwrites the atoms of the n_mols molecules). */
    void (*pool_backward)(mp_backend *b, void *dx, const int32_t *mol_atom,
                          const void *dout, int ldo, int32_t n_mols, int h,
                          mp_aggregation agg, double norm);

    /* ---- the layers of the training options (every operand of the element
     * type; see mp_act_kind, mp_aggregation) ------------------------------- */
    /* y[i] = f(x[i]) for activation `kind`; PReLU's slope is param[0] (a
     * device element; NULL for the others).  y may alias x. */
    void (*act)(mp_backend *b, void *y, const void *x, size_t n, mp_act_kind kind,
                const void *param);
    /* dx[i] = f'(x[i]) dy[i] (accumulate 0: overwrites, dx may alias dy) or
     * dx[i] += f'(x[i]) dy[i] (accumulate 1); x is the activation's input.
     * PReLU: dparam[0] += sum_i min(x[i], 0) dy[i] (dparam may be NULL),
     * summed in a fixed order. */
    void (*act_backward)(mp_backend *b, void *dx, void *dparam, const void *x, const void *dy,
                         size_t n, mp_act_kind kind, const void *param, int accumulate);
    /* y[i] += x[i]. */
    void (*add)(mp_backend *b, void *y, const void *x, size_t n);
    /* out[e] = (m[e] + m[e ^ 1]) / 2 for every directed edge (Chemprop v1's
     * --undirected).  out may alias m.  Linear and symmetric: its own
     * adjoint. */
    void (*edge_mean)(mp_backend *b, void *out, const void *m, int32_t n_edges, int h);
    /* out[v] = sum_{k in in(v)} x[src[k]] in CSR order: the atom messages of
     * Chemprop v1's --atom_messages (x and out [n_atoms x h]; overwrites).
     * The graph holds every edge's reverse, so this is its own adjoint. */
    void (*neighbor_sum)(mp_backend *b, void *out, const int32_t *in_start,
                         const int32_t *in_edge, const int32_t *edge_src, const void *x,
                         int32_t n_atoms, int h);
    /* Attentive readout (Chemprop v2's AttentiveAggregation): alpha[v] =
     * softmax over the atoms of v's molecule of score[v] (score: one value
     * per atom, the model's x w), out[i, 0:h] (row stride ldo) = sum_v alpha[v]
     * x[v]; 0 for a molecule without atoms.  alpha [n_atoms] is kept for
     * the backward. */
    void (*attn_pool)(mp_backend *b, void *out, int ldo, void *alpha, const int32_t *mol_atom,
                      const void *x, const void *score, int32_t n_mols, int h);
    /* Its adjoint: for every atom v of molecule i, with g_v = <dout_i, x[v]>,
     * dscore[v] = alpha[v] (g_v - sum_u alpha[u] g_u) and dx[v] = alpha[v]
     * dout_i + dscore[v] w (w [h]: the score's weights); overwrites both.
     * The weights' gradient is the model's product x^T dscore. */
    void (*attn_pool_backward)(mp_backend *b, void *dx, void *dscore, const int32_t *mol_atom,
                               const void *x, const void *alpha, const void *w,
                               const void *dout, int ldo, int32_t n_mols, int h);
    /* Batch normalization over the n rows of x [n x h] (row stride ldx) into
     * y (ldy; may alias x when ldy == ldx), PyTorch's BatchNorm1d: training
     * (n >= 2) uses the batch mean and biased variance, keeps mean and
     * 1 / sqrt(var + eps) in save [2 x h] for the backward, and moves
     * running [2 x h] (mean, var) by momentum with the unbiased variance;
     * inference uses running.  y = gamma (x - mean) / sqrt(var + eps) + beta. */
    void (*batch_norm)(mp_backend *b, void *y, int ldy, void *save, const void *x, int ldx,
                       const void *gamma, const void *beta, void *running, int32_t n, int h,
                       int training, double momentum, double eps);
    /* Its adjoint for a training forward: dx (ldx; overwrites; may alias dy
     * when the strides agree), dgamma += sum dy xhat, dbeta += sum dy. */
    void (*batch_norm_backward)(mp_backend *b, void *dx, int ldx, void *dgamma, void *dbeta,
                                const void *dy, int ldy, const void *x, int ldx_in,
                                const void *save, const void *gamma, int32_t n, int h);
    /* Gradient clipping by the global norm (torch.nn.utils.clip_grad_norm_):
     * norm[0] = sqrt(sum g^2) (summed in double in a fixed order), then
     * g *= min(1, max_norm / (norm[0] + 1e-6)), all on the device (the
     * factor is read from norm, so a captured step clips with each step's
     * own norm).  norm: a device element. */
    void (*clip_norm)(mp_backend *b, void *g, size_t n, double max_norm, void *norm);

    /* ---- loss, optimizer, device-scheduled steps ----------------------- */
    /* The masked batch loss of spec (see mp_loss_spec): loss[0] the batch's
     * loss, dy [n x n_tasks * width] = d loss / d y (overwrites; 0 for the
     * outputs of unlabelled pairs) for the raw outputs y of the same shape,
     * target and mask [n x n_tasks] (a class label as its index 0 .. C-1).
     * With no label at all (sum(mask) = 0) loss and dy are 0 (Chemprop would
     * divide by zero).  `loss` is a device buffer of one element.  mse and bce
     * compute in the element type (sums in double), the others in double. */
    void (*loss)(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                 const uint8_t *mask, int32_t n, const mp_loss_spec *spec);
    /* One Adam step in PyTorch's form (torch.optim.Adam, L2 weight decay
     * added to the gradient): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); t >= 1. */
    void (*adam)(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                 double lr, double beta1, double beta2, double eps,
                 double weight_decay, long t);
    /* Adam as above, but the step's two scalars come from device memory, so
     * that one captured step can be replayed with a new learning rate and
     * step count each time (resident.c): with k = k_dev[0], step = sched[2k]
     * (lr / (1 - b1^t)) and bc2s = sched[2k + 1] (sqrt(1 - b2^t)), made on
     * the host by mp_adam_sched_entry.  sched is float whatever the dtype.
     * On cpu and cuda this is bitwise what adam gives for the lr and t of that
     * entry (ref uses the float-rounded scalars in its double arithmetic). */
    void (*adam_sched)(mp_backend *b, void *p, void *m, void *v, const void *g, size_t n,
                       const float *sched, const int32_t *k_dev, double beta1, double beta2,
                       double eps, double weight_decay);
    /* Ends a step: losses[k] = loss[0]; k_dev[0] += 1 (k = k_dev[0] before).
     * losses and loss are of the backend's element type. */
    void (*step_end)(mp_backend *b, int32_t *k_dev, void *losses, const void *loss);

    /* ---- fused (optional: NULL where a backend has none) ------------- */
    /* The message step of an inference forward in one pass:
     *   c[e] = ReLU(r[e] + bf16(S[src[e]] - M[e ^ 1]) w),
     * S[v] = sum_{k in in(v)} M[k] (M = m, or max(m, 0) when relu_in) into
     * the scratch s [n_atoms x h] of the element type, the message rounded to
     * w's storage as message writes msg, w [h x h].  r, c of storage rc_st,
     * m of m_st; c overlaps none of the others.  Returns 0, queuing nothing,
     * where these shapes or storage types are not fused: the caller then
     * calls message and gemm_res_relu.  msg, where not NULL (a training
     * forward: the backward reads the message), also receives the message
     * as message would write it (w's storage, rows of h); a form that
     * cannot write it returns 0.  Deterministic.  cuda has none by default;
     * its panels' form (MOLPROP_CUDA_MESSAGE_UPDATE=2: wgmma, sm_90) gives
     * that pair's bits where it runs, its mma.sync form (=1; inference
     * only) sums the product in its own order. */
    int (*message_update)(mp_backend *b, void *c, const void *r, mp_stype rc_st, void *s,
                          const int32_t *in_start, const int32_t *in_edge,
                          const int32_t *edge_src, const void *m, mp_stype m_st, int relu_in,
                          const void *w, mp_stype w_st, int32_t n_atoms, int32_t n_edges,
                          int h, void *msg);

    /* ---- sharing the device (optional: NULL on host-memory backends) -- */
    /* This instance is one of n that run side by side on one device (an
     * ensemble's members): the backend may size its work for a share of
     * the device (cuda: its products' algorithms are chosen for 2/n of
     * the SMs, all of them for n <= 2, and for n > 2 its small bf16
     * products run on cuBLAS, not the tile kernel).  The results are a
     * function of n, so instances whose results must agree take the same
     * n; n = 1, the default, is the whole device.  MP_ERR_ARG for n < 1. */
    mp_status (*set_share)(mp_backend *b, int n);

    /* ---- capture (optional: NULL where ops cannot be recorded) -------- */
    /* Between capture_begin and capture_end the ops issued are recorded,
     * not run; replay runs the recording again (cuda: a CUDA graph).  Every
     * pointer, size and scalar argument is fixed at capture: data changes
     * only through the device buffers (upload before replay, or scalars
     * read from device memory: adam_sched, device dropout keys).  While
     * recording, only ops that stay on the device may run (upload,
     * download, sync, alloc and free fail the capture; capture_end then
     * reports it).  *out is NULL on failure.  capture_free(NULL) is fine. */
    mp_status (*capture_begin)(mp_backend *b);
    mp_status (*capture_end)(mp_backend *b, mp_capture **out);
    mp_status (*replay)(mp_backend *b, mp_capture *c);
    void      (*capture_free)(mp_backend *b, mp_capture *c);

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

    /* ---- several processes (optional: NULL unless built for it) -------- */
    /* buf[0..n) (element type, device) := sum over the MPI ranks r
     * (core/dist.h), in rank order, of w[r] * rank r's buf (w: host, one
     * weight per rank), each product rounded once; the same bits on every
     * rank, as mp_dist_sum_float gives on the host.  cuda built with NCCL:
     * an all-gather over a communicator bootstrapped through MPI, then one
     * ordered sum per element.  Every rank must call it. */
    mp_status (*rank_sum)(mp_backend *b, void *buf, size_t n, const float *w);
};

#define MP_FENCES 8

/* Bytes of one element of storage st on backend b. */
static inline size_t mp_stype_size(const mp_backend *b, mp_stype st)
{
    return st == MP_ST_BF16 ? 2 : b->esize;
}

/* ===================================================================== */
/* bfloat16 on the host                                                   */
/* ===================================================================== */

/* x rounded to bfloat16, to nearest even (a NaN stays a quiet NaN): the
 * rounding of the device's __float2bfloat16_rn. */
static inline uint16_t mp_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The value of a bfloat16 (exact in float). */
static inline float mp_bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

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
 * gradient-check oracle), "ref:bf16" / "ref64:bf16" (the same with bf16
 * storage for the product operands: the bf16 path of the model, and what the
 * GPU's bf16 is checked against, on any machine), "gpu" /
 * "gpu:fp32|tf32|bf16" (src/gpu; "cuda" is the same; without a usable GPU,
 * or in a CUDA=0 build, MP_ERR_NODEVICE with the reason).  NULL or "" is
 * "cpu"; "cpu:fp32" is "cpu", "cpu:bf16" the cpu backend with bf16 storage
 * (act_st).  MP_ERR_ARG names the known backends for an unknown name.  Close
 * with mp_backend_close.  The cpu backend uses mp_threads_get() threads and
 * sets OpenBLAS to one thread (it splits the products itself).  Its first
 * open may re-select OpenBLAS's kernels (cpu.c), which briefly sets an
 * environment variable: open it before starting threads that read the
 * environment.
 */
mp_status mp_backend_open(mp_backend **out, const char *name);
void      mp_backend_close(mp_backend *b);

/* 1 when backend `name` can be opened here; 0 with the reason in why[0..n)
 * (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA
 * runtime version", "molprop was built without CUDA", "unknown backend"). */
int mp_backend_available(const char *name, char *why, size_t n);

/* How many devices backend `name` sees here (the GPUs for gpu / cuda; 0
 * when none or it is not built), -1 for a host backend (cpu, ref: any
 * number of thread ranks share the host), 0 for an unknown name. */
int mp_backend_devices(const char *name);

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
    int       (*devices)(void);   /* the devices it sees; NULL: the host's */
} mp_backend_provider;

extern const mp_backend_provider mp_backend_cpu_provider;   /* cpu.c    */
extern const mp_backend_provider mp_backend_ref_provider;   /* ref.c    */
extern const mp_backend_provider mp_backend_gpu_provider;   /* src/gpu  */

/* The provider answering to `name`, or NULL. */
const mp_backend_provider *mp_backend_find(const char *name);

/* The cpu and ref backends, opened directly (tests).  act_st: MP_ST_ELEM,
 * or MP_ST_BF16 for the reference backend's bf16 mode. */
mp_status mp_backend_cpu_open(mp_backend **out);
mp_status mp_backend_ref_open(mp_backend **out, mp_dtype dtype, mp_stype act_st);

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
