/*
 * gpu_ops.c - microbenchmark of the cuda backend (make bench-gpu, then
 * ./build/gpu_ops).  On a synthetic molecule-shaped batch (27 atoms and 29
 * bonds per molecule on average, tests/randgraph.h) and Chemprop's default
 * D-MPNN shape (hidden 300, depth 3, 133 atom slots, one task) it times:
 *
 *   - every op of the seam at the shapes one training step calls it with,
 *     reporting microseconds per call, the bytes it must move at least and
 *     the bandwidth that implies (FLOP/s for the products); rows with 0
 *     calls are for comparison (e.g. a product alone vs in gemm_batch);
 *   - a whole training step (forward, masked MSE, backward, Adam:
 *     bench/gpu_step.h) launched op by op, and the same step captured once
 *     into a CUDA graph and replayed;
 *   - the host-to-device upload of the batch (what the trainer pays per step
 *     when the dataset is not resident on the device).
 *
 * Times come from CUDA events on the backend's stream: each figure is the
 * median over `trials` trials of the mean over a run of calls long enough
 * (about 2 ms) to drown the event resolution.  Molecules per second =
 * batch / median step time.
 *
 * usage: gpu_ops [--batch N]... [--prec fp32|tf32|bf16|all] [--hidden H]
 *                [--depth D] [--trials T] [--seed S]
 * (default: --batch 50 --batch 4096 --prec all --hidden 300 --depth 3
 *  --trials 15)
 */
#include "gpu/gpu.h"
#include "backend/ops.h"
#include "gpu_step.h"
#include "../tests/randgraph.h"

#include <cuda_runtime.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Timing                                                                 */
/* ===================================================================== */

typedef struct {
    mp_backend  *b;
    cudaStream_t s;
    cudaEvent_t  e0, e1;
    int          trials;
} timer;

static int cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "gpu_ops: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

typedef void (*work_fn)(void *arg);

/* Milliseconds of one call of fn(arg): median over trials of the mean over
 * `reps` back-to-back calls, reps chosen so a trial lasts about 2 ms.
 * Returns a negative number when the backend reports a failure. */
static double time_ms(timer *t, work_fn fn, void *arg)
{
    mp_backend *b = t->b;
    fn(arg);                                          /* warm up (and cuBLAS heuristics) */
    if (b->sync(b) != MP_OK)
        return -1;
    /* calibrate */
    int reps = 1;
    for (;;) {
        cuda_check(cudaEventRecord(t->e0, t->s), "event");
        for (int r = 0; r < reps; r++)
            fn(arg);
        cuda_check(cudaEventRecord(t->e1, t->s), "event");
        cuda_check(cudaEventSynchronize(t->e1), "event sync");
        float ms = 0;
        cuda_check(cudaEventElapsedTime(&ms, t->e0, t->e1), "elapsed");
        if (ms >= 2.0f || reps >= 4096)
            break;
        reps = ms <= 0.01f ? reps * 16 : (int)(reps * 2.2f / ms * 1.0f) + 1;
        if (reps > 4096)
            reps = 4096;
    }
    double *v = malloc((size_t)t->trials * sizeof *v);
    if (!v)
        return -1;
    for (int k = 0; k < t->trials; k++) {
        cuda_check(cudaEventRecord(t->e0, t->s), "event");
        for (int r = 0; r < reps; r++)
            fn(arg);
        cuda_check(cudaEventRecord(t->e1, t->s), "event");
        cuda_check(cudaEventSynchronize(t->e1), "event sync");
        float ms = 0;
        cuda_check(cudaEventElapsedTime(&ms, t->e0, t->e1), "elapsed");
        v[k] = ms / reps;
    }
    qsort(v, (size_t)t->trials, sizeof *v, cmp_double);
    double med = v[t->trials / 2];
    free(v);
    if (b->sync(b) != MP_OK)
        return -1;
    return med;
}

/* ===================================================================== */
/* The ops at the step's shapes                                           */
/* ===================================================================== */

typedef struct {
    gs_model     *m;
    gs_dev_graph *g;
    mp_cuda_graph *graph;
    uint64_t      key;
} bench_ctx;

#define AT(p, i) ((void *)((char *)(p) + (size_t)(i) * sizeof(float)))

static void w_atom_embed(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_embed(b, m->as, g->atom_hot, g->atom_mass, AT(m->params, m->off_wi), NULL,
                  g->n_atoms, m->h, m->fa - 1);
}
static void w_atom_embed_bias(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_embed(b, m->ho, g->atom_hot, g->atom_mass, AT(m->params, m->off_wo),
                  AT(m->params, m->off_bo), g->n_atoms, m->h, m->fa - 1);
}
static void w_edge_embed(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->edge_embed(b, m->h0, g->edge_src, g->bond_hot, m->as,
                  AT(m->params, m->off_wi + (size_t)m->fa * m->h), g->n_edges, m->h);
}
static void w_edge_embed_relu(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->edge_embed_relu(b, m->h0, m->m[0], g->edge_src, g->bond_hot, m->as,
                       AT(m->params, m->off_wi + (size_t)m->fa * m->h), g->n_edges, m->h);
}
static void w_relu_edges(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout(b, m->m[0], m->h0, (size_t)c->g->n_edges * m->h, 0.0, 0);
}
static void w_relu_atoms(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout(b, m->ho, m->ho, (size_t)c->g->n_atoms * m->h, 0.0, 0);
}
static void w_relu_dropout_edges(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout(b, m->dm, m->h0, (size_t)c->g->n_edges * m->h, 0.1, 77);
}
static void w_message(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->message(b, m->msg[1], m->as, g->in_start, g->in_edge, g->edge_src, m->m[0], g->n_atoms,
               g->n_edges, m->h);
}
static void w_message_direct(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->message_direct(b, m->msg[1], g->in_start, g->in_edge, g->edge_src, m->m[0], 0,
                      g->n_atoms, g->n_edges, m->h);
}
static void w_copy_edges(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->copy(b, m->dm, m->h0, (size_t)c->g->n_edges * m->h * sizeof(float));
}
static void w_gemm_wh(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm(b, 0, 0, c->g->n_edges, m->h, m->h, 1.0, m->msg[1], m->h, AT(m->params, m->off_wh),
            m->h, 1.0, m->dm, m->h);
}
static void w_gemm_wh_dw(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm(b, 1, 0, m->h, m->h, c->g->n_edges, 1.0, m->msg[1], m->h, m->dh0, m->h, 1.0,
            AT(m->grads, m->off_wh), m->h);
}
static void w_gemm_wh_dx(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm(b, 0, 1, c->g->n_edges, m->h, m->h, 1.0, m->dh0, m->h, AT(m->params, m->off_wh),
            m->h, 0.0, m->dmsg, m->h);
}
static void w_gemm_wh_pair(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm gh[2] = {
        { 1, 0, h, h, ne, 1.0, 1.0, m->msg[1], m->dh0, AT(m->grads, m->off_wh), h, h, h },
        { 0, 1, ne, h, h, 1.0, 0.0, m->dh0, AT(m->params, m->off_wh), m->dmsg, h, h, h },
    };
    b->gemm_batch(b, 2, gh);
}
static void w_gemm_res_relu_wh(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm_res_relu(b, c->g->n_edges, m->h, m->h, m->msg[1], m->h, AT(m->params, m->off_wh),
                     m->h, m->h0, m->h, m->m[1], m->h);
}
static void w_gemm_res_relu_wo(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm_res_relu(b, c->g->n_atoms, m->h, m->h, m->a, m->h,
                     AT(m->params, m->off_wo + (size_t)m->fa * m->h), m->h, m->dho, m->h, m->dho,
                     m->h);
}
static void w_message_backward_relu(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->message_backward_relu(b, m->dm, m->dh0, m->da, g->in_start, g->in_edge, g->edge_dst,
                             m->dmsg, m->m[0], 0.0, g->n_atoms, g->n_edges, m->h);
}
static void w_atom_sum(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_sum(b, m->a, g->in_start, g->in_edge, m->m[m->depth - 1], g->n_atoms, m->h);
}
static void w_gemm_wo(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm(b, 0, 0, c->g->n_atoms, m->h, m->h, 1.0, m->a, m->h,
            AT(m->params, m->off_wo + (size_t)m->fa * m->h), m->h, 1.0, m->dho, m->h);
}
static void w_pool(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->pool(b, m->x0, m->h, g->mol_atom, m->ho, g->n_mols, m->h, MP_AGG_MEAN, 100.0);
}
static void w_gemm_ffn(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm(b, 0, 0, c->g->n_mols, m->h, m->h, 1.0, m->x0, m->h, AT(m->params, m->off_w1), m->h,
            1.0, m->z1, m->h);
}
static void w_loss(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->loss(b, m->loss, m->dy, m->y, m->target, m->mask, c->g->n_mols, m->n_tasks, MP_LOSS_MSE);
}
static void w_pool_backward(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->pool_backward(b, m->dho, g->mol_atom, m->dx0, m->h, g->n_mols, m->h, MP_AGG_MEAN, 100.0);
}
static void w_relu_backward_atoms(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout_backward(b, m->da, m->ho, m->dho, (size_t)c->g->n_atoms * m->h, 0.0);
}
static void w_col_sum_atoms(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->col_sum(b, AT(m->grads, m->off_bo), m->dho, m->h, c->g->n_atoms, m->h);
}
static void w_atom_embed_backward(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_embed_backward(b, AT(m->grads, m->off_wo), g->atom_hot, g->atom_mass, m->dho,
                           g->n_atoms, m->h, m->fa - 1);
}
static void w_atom_sum_backward(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_sum_backward(b, m->dm, g->edge_dst, m->da, g->n_edges, m->h);
}
static void w_relu_backward_edges(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout_backward(b, m->dmsg, m->m[1], m->dh0, (size_t)c->g->n_edges * m->h, 0.0);
}
static void w_add_edges(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->add(b, m->dmsg, m->dh0, (size_t)c->g->n_edges * m->h);
}
static void w_message_backward(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->message_backward(b, m->dm, m->da, g->in_start, g->in_edge, g->edge_dst, m->dmsg,
                        g->n_atoms, g->n_edges, m->h);
}
static void w_edge_embed_backward(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->edge_embed_backward(b, m->da, AT(m->grads, m->off_wi + (size_t)m->fa * m->h), g->in_start,
                           g->in_edge, g->bond_hot, m->dh0, g->n_atoms, g->n_edges, m->h);
}
static void w_adam(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->adam(b, m->params, m->adam_m, m->adam_v, m->grads, m->n_params, 1e-9, 0.9, 0.999, 1e-8,
            0.0, 5);
}
static void w_zero_grads(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->zero(b, m->grads, m->n_params * sizeof(float));
}
/* bf16 storage ops (ops.h half_acts; cuda at bf16 only) */
static void w_to_bf16_weights(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->to_bf16(b, m->whh, AT(m->params, m->off_wh), (size_t)(2 * m->h + m->fa) * m->h);
}
static void w_message_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->message_bf16(b, m->msg[1], m->as, g->in_start, g->in_edge, g->edge_src, m->m[0], m->half_m,
                    g->n_atoms, g->n_edges, m->h);
}
static void w_gemm_res_relu_wh_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm_res_relu_bf16(b, c->g->n_edges, m->h, m->h, m->msg[1], m->h, m->whh, m->h, m->h0,
                          m->h, m->m[1], m->h, m->half_m);
}
static void w_atom_sum_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_sum_bf16(b, m->a, g->in_start, g->in_edge, m->m[m->depth - 1], m->half_m, g->n_atoms,
                     m->h);
}
static void w_gemm_res_relu_wo_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm_res_relu_bf16(b, c->g->n_atoms, m->h, m->h, m->a, m->h, m->woh, m->h, m->dho, m->h,
                          m->dho, m->h, 0);
}
static void w_relu_backward_atoms_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout_backward_bf16(b, m->da, m->dhoh, m->ho, m->dho, (size_t)c->g->n_atoms * m->h,
                                  0.0);
}
static void w_relu_backward_edges_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout_backward_bf16(b, m->dmsg, m->dzh, m->m[1], m->dh0,
                                  (size_t)c->g->n_edges * m->h, 0.0);
}
static void w_atom_sum_backward_relu_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->atom_sum_backward_relu_bf16(b, m->dh0, m->dzh, g->edge_dst, m->da, m->m[m->depth - 1],
                                   m->half_m, 0.0, g->n_edges, m->h);
}
static void w_gemm_wo_pair_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, na = c->g->n_atoms;
    mp_gemm go[2] = {
        { 1, 0, h, h, na, 1.0, 1.0, m->a, m->dhoh, AT(m->grads, m->off_wo + (size_t)m->fa * h), h,
          h, h },
        { 0, 1, na, h, h, 1.0, 0.0, m->dhoh, m->woh, m->da, h, h, h },
    };
    b->gemm_batch_bf16(b, 2, go, 0);
}
static void w_gemm_wh_pair_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm gh[2] = {
        { 1, 0, h, h, ne, 1.0, 1.0, m->msg[1], m->dzh, AT(m->grads, m->off_wh), h, h, h },
        { 0, 1, ne, h, h, 1.0, 0.0, m->dzh, m->whh, m->dmsg, h, h, h },
    };
    b->gemm_batch_bf16(b, 2, gh, 2u);
}
static void w_gemm_wh_dw_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm g1 = { 1, 0, h, h, ne, 1.0, 1.0, m->msg[1], m->dzh, AT(m->grads, m->off_wh), h, h, h };
    b->gemm_batch_bf16(b, 1, &g1, 0);
}
static void w_gemm_wh_dx_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm g1 = { 0, 1, ne, h, h, 1.0, 0.0, m->dzh, m->whh, m->dmsg, h, h, h };
    b->gemm_batch_bf16(b, 1, &g1, 1u);
}
/* The same products with the bf16 operands' row stride padded to a multiple
 * of 8 elements (16 bytes: what Hopper's TMA-based kernels need; 300 bf16 are
 * 600 bytes).  For comparison only (0 calls): the buffers used are the fp32
 * ones, large enough, with whatever they hold. */
#define LDP(h) (((h) + 7) / 8 * 8)
static void w_gemm_res_relu_wh_bf16_ldp(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->gemm_res_relu_bf16(b, c->g->n_edges, m->h, m->h, m->msg[1], LDP(m->h), m->dm, LDP(m->h),
                          m->h0, m->h, m->m[1], m->h, m->half_m);
}
static void w_gemm_wh_dw_bf16_ldp(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm g1 = { 1, 0, h, h, ne, 1.0, 1.0, m->msg[1], m->dm, AT(m->grads, m->off_wh), LDP(h),
                   LDP(h), h };
    b->gemm_batch_bf16(b, 1, &g1, 0);
}
static void w_gemm_wh_dx_bf16_ldp(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm g1 = { 0, 1, ne, h, h, 1.0, 0.0, m->dm, m->h0, m->dmsg, LDP(h), LDP(h), LDP(h) };
    b->gemm_batch_bf16(b, 1, &g1, 1u);
}
static void w_gemm_wh_pair_bf16_ldp(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    int h = m->h, ne = c->g->n_edges;
    mp_gemm gh[2] = {
        { 1, 0, h, h, ne, 1.0, 1.0, m->msg[1], m->dm, AT(m->grads, m->off_wh), LDP(h), LDP(h), h },
        { 0, 1, ne, h, h, 1.0, 0.0, m->dm, m->h0, m->dmsg, LDP(h), LDP(h), LDP(h) },
    };
    b->gemm_batch_bf16(b, 2, gh, 2u);
}
static void w_message_backward_relu_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->message_backward_relu_bf16(b, m->dzh, m->dh0, m->da, g->in_start, g->in_edge, g->edge_dst,
                                  m->dmsg, m->m[0], m->half_m, 0.0, g->n_atoms, g->n_edges, m->h);
}
static void w_edge_embed_relu_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b; gs_dev_graph *g = c->g;
    b->edge_embed_relu_bf16(b, m->h0, m->m[0], g->edge_src, g->bond_hot, m->as,
                            AT(m->params, m->off_wi + (size_t)m->fa * m->h), g->n_edges, m->h);
}
static void w_relu_dropout_bf16(void *x)
{
    bench_ctx *c = x; gs_model *m = c->m; mp_backend *b = m->b;
    b->relu_dropout_bf16(b, m->m[1], m->m[1], (size_t)c->g->n_edges * m->h, 0.1, 77);
}
static void w_step(void *x)
{
    bench_ctx *c = x;
    gs_step(c->m, c->g, c->key);
}
static void w_graph(void *x)
{
    bench_ctx *c = x;
    mp_cuda_graph_launch(c->m->b, c->graph);
}

/* ===================================================================== */
/* One configuration                                                      */
/* ===================================================================== */

typedef struct {
    const char *name;
    work_fn     fn;
    int         calls;     /* per training step at depth 3 (the step table's weight) */
    double      bytes;     /* at least, per call                                     */
    double      flops;     /* per call (products)                                    */
} op_row;

static int run_config(mp_precision prec, int32_t batch, int h, int depth, int trials,
                      uint64_t seed, int bf16_messages)
{
    mp_backend *b = NULL;
    if (mp_backend_cuda_open(&b, prec) != MP_OK) {
        fprintf(stderr, "gpu_ops: %s\n", mp_error_message());
        return 1;
    }
    if (!bf16_messages) {   /* bf16 operands, but H0 and M_t in fp32 (ops.h) */
        b->edge_embed_relu_bf16 = NULL;
        b->relu_dropout_bf16 = NULL;
    }
    mp_rng rng;
    mp_rng_seed(&rng, seed, 3);
    mp_graphs g;
    rg_opts o = { 1, 53, 0.0, 0.0, 6 };     /* mean 27 atoms, 26 + 3 bonds */
    if (!rg_make(&g, &rng, batch, 133, &o)) {
        fprintf(stderr, "gpu_ops: out of host memory for the batch\n");
        mp_backend_close(b);
        return 1;
    }
    gs_dev_graph dg;
    gs_model m;
    memset(&m, 0, sizeof m);
    int rc = 1;
    if (gs_dev_graph_upload(b, &dg, &g) != MP_OK) {
        fprintf(stderr, "gpu_ops: batch upload: %s\n", mp_error_message());
        goto out_graph;
    }
    if (gs_model_create(&m, b, 133, h, depth, 1, 0.0, batch, g.n_atoms, g.n_edges, seed) != MP_OK) {
        fprintf(stderr, "gpu_ops: model: %s\n", mp_error_message());
        goto out;
    }
    timer t = { b, (cudaStream_t)mp_backend_cuda_stream(b), NULL, NULL, trials };
    if (!cuda_check(cudaEventCreate(&t.e0), "event") || !cuda_check(cudaEventCreate(&t.e1), "event"))
        goto out;
    bench_ctx c = { &m, &dg, NULL, 42 };
    gs_step(&m, &dg, 1);                       /* valid activations for the op timings */
    if (b->sync(b) != MP_OK) {
        fprintf(stderr, "gpu_ops: first step: %s\n", mp_error_message());
        goto out_events;
    }

    const double A = g.n_atoms, E = g.n_edges, M = batch, H = h, F = 4.0;
    const double P = (double)m.n_params;
    const int d1 = depth - 1;
    /* fused ops (ops.h), as gpu_step.h / models/dmpnn.c issue them: the
     * unfused rows they replace get 0 calls (timed alone) */
    const int fu = b->gemm_res_relu && b->message_backward_relu && depth > 1;
    /* bf16 storage (cuda at bf16): the ops that replace them, per row below;
     * hm: the message steps, hr: the readout */
    const int hr = m.half, hm = m.half && depth > 1, hh = m.half_m;
    /* the fp32 / tf32 training path's fused forward ops (ops.h, wt-inf):
     * H0 and M_0 in one pass, the message without its scratch pass */
    const int ee = !hh && b->edge_embed_relu, md = !hm && b->message_direct;
    const double S = 2.0;   /* bytes of a bf16 element */
    const double MS = hh ? S : F;   /* bytes of an element of H0, M_t */
    op_row rows[] = {
        /* forward */
        { "atom_embed (W_i atom part)", w_atom_embed, 1, A * H * F + A * 20, 0 },
        { "edge_embed (H0)", w_edge_embed, hh || ee ? 0 : 1, 2 * E * H * F + E * 12, 0 },
        { "edge_embed_relu (H0, M_0)", b->edge_embed_relu ? w_edge_embed_relu : NULL, ee,
          3 * E * H * F + E * 12, 0 },
        { "relu_dropout p=0 (edges)", w_relu_edges, hh ? 0 : (fu ? 1 : depth) - ee,
          2 * E * H * F, 0 },
        { "message (S, S[src]-M[rev])", w_message, hm || md ? 0 : d1,
          (3 * E + A) * H * F + E * 8, 0 },
        { "message_direct (no scratch)", b->message_direct ? w_message_direct : NULL,
          md ? d1 : 0, 2 * E * H * F + E * 8, 0 },
        { "copy (residual H0)", w_copy_edges, fu ? 0 : d1, 2 * E * H * F, 0 },
        { "gemm E x h x h (W_h)", w_gemm_wh, fu ? 0 : d1, (3 * E * H + H * H) * F, 2 * E * H * H },
        { "gemm_res_relu E x h x h (W_h fused)", w_gemm_res_relu_wh, fu && !hm ? d1 : 0,
          (3 * E * H + H * H) * F, 2 * E * H * H },
        { "relu_dropout p=0.1 (edges)", w_relu_dropout_edges, 0, 2 * E * H * F, 0 },
        { "atom_sum (readout)", w_atom_sum, hr ? 0 : 1, (E + A) * H * F + E * 4, 0 },
        { "atom_embed +bias (W_o atom part)", w_atom_embed_bias, 1, A * H * F + A * 20, 0 },
        { "gemm A x h x h (W_o)", w_gemm_wo, fu ? 0 : 1, (3 * A * H + H * H) * F, 2 * A * H * H },
        { "gemm_res_relu A x h x h (W_o fused)", w_gemm_res_relu_wo, fu && !hr ? 1 : 0,
          (3 * A * H + H * H) * F, 2 * A * H * H },
        { "relu_dropout p=0 (atoms)", w_relu_atoms, fu ? 0 : 1, 2 * A * H * F, 0 },
        { "pool (mean)", w_pool, 1, (A + M) * H * F, 0 },
        { "gemm B x h x h (FFN)", w_gemm_ffn, 2, (3 * M * H + H * H) * F, 2 * M * H * H },
        { "loss (masked MSE)", w_loss, 1, 4 * M * F, 0 },
        /* backward */
        { "pool_backward", w_pool_backward, 1, (A + M) * H * F, 0 },
        { "relu_backward (atoms)", w_relu_backward_atoms, hr ? 0 : 1, 3 * A * H * F, 0 },
        { "col_sum (b_o grad)", w_col_sum_atoms, 1, A * H * F, 0 },
        { "atom_embed_backward (W_o, W_i)", w_atom_embed_backward, 2, A * H * F + A * 20, 0 },
        { "atom_sum_backward", w_atom_sum_backward, hr ? 0 : 1, (A + 2 * E) * H * F, 0 },
        { "relu_dropout_backward (edges)", w_relu_backward_edges, hr ? 0 : fu ? 1 : depth,
          3 * E * H * F, 0 },
        { "add (edges)", w_add_edges, fu ? 0 : d1, 3 * E * H * F, 0 },
        { "gemm h x h x E (dW_h) alone", w_gemm_wh_dw, 0, (2 * E * H + 2 * H * H) * F, 2 * E * H * H },
        { "gemm E x h x h^T (dMsg) alone", w_gemm_wh_dx, 0, (2 * E * H + H * H) * F, 2 * E * H * H },
        { "gemm_batch dW_h + dMsg", w_gemm_wh_pair, hm ? 0 : d1, (4 * E * H + 3 * H * H) * F,
          4 * E * H * H },
        { "message_backward", w_message_backward, fu ? 0 : d1, (3 * E + A) * H * F + E * 8, 0 },
        { "message_backward_relu (fused)", w_message_backward_relu, fu && !hm ? d1 : 0,
          (7 * E + A) * H * F + E * 8, 0 },
        { "edge_embed_backward", w_edge_embed_backward, 1, (2 * E + A) * H * F, 0 },
        { "zero (gradients)", w_zero_grads, 1, P * F, 0 },
        { "adam", w_adam, 1, 7 * P * F, 0 },
    };
    /* the bf16 storage ops (cuda at bf16 only): bytes with bf16 operands */
    op_row rows_bf16[] = {
        { "to_bf16 (W_h, W_o copy)", w_to_bf16_weights, 1, (2 * H + m.fa) * H * (F + S), 0 },
        /* (rows whose op the backend lacks are left out: fn NULL) */
        { "edge_embed_relu_bf16 (H0, M_0)", b->edge_embed_relu_bf16 ? w_edge_embed_relu_bf16 : NULL,
          hh ? 1 : 0, E * H * (F + 2 * S) + E * 12, 0 },
        { "relu_dropout_bf16 p=0.1 (edges)", b->relu_dropout_bf16 ? w_relu_dropout_bf16 : NULL, 0,
          2 * E * H * S, 0 },
        { "message_bf16", w_message_bf16, d1, E * H * (2 * MS + F + S) + A * H * F + E * 8, 0 },
        { "gemm_res_relu_bf16 (W_h)", w_gemm_res_relu_wh_bf16, d1,
          E * H * (S + 2 * MS) + H * H * S, 2 * E * H * H },
        { "atom_sum_bf16", w_atom_sum_bf16, 1, E * H * MS + A * H * S + E * 4, 0 },
        { "gemm_res_relu_bf16 (W_o)", w_gemm_res_relu_wo_bf16, 1, A * H * (S + 2 * F) + H * H * S,
          2 * A * H * H },
        { "relu_backward_bf16 (atoms)", w_relu_backward_atoms_bf16, 1, A * H * (3 * F + S), 0 },
        { "gemm_batch_bf16 dW_o + dA", w_gemm_wo_pair_bf16, 1,
          A * H * (3 * S + F) + H * H * (S + 2 * F), 4 * A * H * H },
        { "relu_dropout_backward_bf16 (edges)", w_relu_backward_edges_bf16, 0,
          E * H * (3 * F + S), 0 },
        { "atom_sum_backward_relu_bf16", w_atom_sum_backward_relu_bf16, 1,
          A * H * F + E * H * (F + MS + S) + E * 4, 0 },
        { "gemm_bf16 dW_h alone", w_gemm_wh_dw_bf16, 0, 2 * E * H * S + 2 * H * H * F,
          2 * E * H * H },
        { "gemm_bf16 dMsg alone", w_gemm_wh_dx_bf16, 0, 2 * E * H * S + H * H * S,
          2 * E * H * H },
        { "gemm_batch_bf16 dW_h + dMsg", w_gemm_wh_pair_bf16, d1,
          4 * E * H * S + H * H * (S + 2 * F), 4 * E * H * H },
        { "message_backward_relu_bf16", w_message_backward_relu_bf16, d1,
          (3 * E + A) * H * F + E * H * (MS + 3 * S) + E * 8, 0 },
        { "  W_h fused, bf16 ld padded to 8", w_gemm_res_relu_wh_bf16_ldp, 0,
          E * H * (S + 2 * MS) + H * H * S, 2 * E * H * H },
        { "  dW_h alone, bf16 ld padded", w_gemm_wh_dw_bf16_ldp, 0, 2 * E * H * S + 2 * H * H * F,
          2 * E * H * H },
        { "  dMsg alone, bf16 ld padded", w_gemm_wh_dx_bf16_ldp, 0, 2 * E * H * S + H * H * S,
          2 * E * H * H },
        { "  dW_h + dMsg, bf16 ld padded", w_gemm_wh_pair_bf16_ldp, 0,
          4 * E * H * S + H * H * (S + 2 * F), 4 * E * H * H },
    };
    const int n_base = (int)(sizeof rows / sizeof rows[0]);
    const int n_half = m.half ? (int)(sizeof rows_bf16 / sizeof rows_bf16[0]) : 0;
    const int n_rows = n_base + n_half;
#define ROW(i) ((i) < n_base ? &rows[i] : &rows_bf16[(i) - n_base])

    printf("\n== %s%s | batch %d molecules: %d atoms, %d directed edges | hidden %d, depth %d, "
           "%zu parameters\n", mp_backend_cuda_info(b),
           m.half ? (m.half_m ? " (bf16 storage, H0 and M_t too)" : " (bf16 storage, H0 and M_t fp32)")
                  : "", (int)batch, g.n_atoms, g.n_edges, h, depth, m.n_params);
    printf("%-34s %6s %10s %10s %9s %9s %7s\n", "op", "calls", "us/call", "MB/call", "GB/s",
           "TFLOP/s", "%step");
    double sum_ms = 0, *ms = calloc((size_t)n_rows, sizeof *ms);
    if (!ms)
        goto out_events;
    for (int i = 0; i < n_rows; i++) {
        if (!ROW(i)->fn)
            continue;
        ms[i] = time_ms(&t, ROW(i)->fn, &c);
        if (ms[i] < 0) {
            fprintf(stderr, "gpu_ops: %s: %s\n", ROW(i)->name, mp_error_message());
            free(ms);
            goto out_events;
        }
        sum_ms += ROW(i)->calls * ms[i];
    }
    double step_ms = time_ms(&t, w_step, &c);
    if (step_ms < 0) {
        fprintf(stderr, "gpu_ops: step: %s\n", mp_error_message());
        free(ms);
        goto out_events;
    }
    for (int i = 0; i < n_rows; i++) {
        const op_row *r = ROW(i);
        if (!r->fn)
            continue;
        printf("%-34s %6d %10.2f %10.3f %9.0f %9.2f %6.1f%%\n", r->name, r->calls, ms[i] * 1e3,
               r->bytes / 1e6, r->bytes / (ms[i] * 1e-3) / 1e9, r->flops / (ms[i] * 1e-3) / 1e12,
               100 * r->calls * ms[i] / step_ms);
    }
#undef ROW
    free(ms);

    /* the step captured once, replayed */
    double graph_ms = -1;
    if (mp_cuda_graph_begin(b) == MP_OK) {
        gs_step(&m, &dg, 7);
        if (mp_cuda_graph_end(b, &c.graph) == MP_OK)
            graph_ms = time_ms(&t, w_graph, &c);
    }
    if (graph_ms < 0) {
        fprintf(stderr, "gpu_ops: graph: %s\n", mp_error_message());
        mp_backend_cuda_clear_error(b);
    }

    /* the batch's upload from pageable host memory, host wall clock */
    double up_ms = 0;
    {
        const int reps = 20;
        double t0 = mp_time_now();
        for (int r = 0; r < reps; r++) {
            size_t na = (size_t)g.n_atoms, ne = (size_t)g.n_edges;
            b->upload(b, dg.atom_hot, g.atom_hot, na * MP_ATOM_MAX_HOT * 2);
            b->upload(b, dg.atom_mass, g.atom_mass, na * 4);
            b->upload(b, dg.bond_hot, g.bond_hot, ne / 2 * MP_BOND_MAX_HOT);
            b->upload(b, dg.edge_src, g.edge_src, ne * 4);
            b->upload(b, dg.edge_dst, g.edge_dst, ne * 4);
            b->upload(b, dg.in_start, g.in_start, (na + 1) * 4);
            b->upload(b, dg.in_edge, g.in_edge, ne * 4);
            b->upload(b, dg.mol_atom, g.mol_atom, ((size_t)batch + 1) * 4);
        }
        up_ms = (mp_time_now() - t0) * 1e3 / reps;
    }
    double up_mb = (A * 20 + E * 14 + (A + M) * 4) / 1e6;

    /* model arithmetic of one step: forward products + twice that backward */
    double fl = 2 * H * H * (E * d1 + A + 2 * M) + 2 * H * M;
    fl *= 3;
    printf("%-34s %6s %10.2f   (sum of the ops above x calls: %.2f us)\n", "STEP, op by op", "",
           step_ms * 1e3, sum_ms * 1e3);
    if (graph_ms > 0)
        printf("%-34s %6s %10.2f   (%.0f%% of op by op)\n", "STEP, CUDA graph replay", "",
               graph_ms * 1e3, 100 * graph_ms / step_ms);
    printf("%-34s %6s %10.2f   (%.2f MB; not in the step)\n", "batch upload, pageable host", "",
           up_ms * 1e3, up_mb);
    printf("molecules/s: %.0f op by op, %.0f graph; dense products %.2f GFLOP/step = %.1f "
           "TFLOP/s in the graph step\n",
           batch / (step_ms * 1e-3), graph_ms > 0 ? batch / (graph_ms * 1e-3) : 0.0, fl / 1e9,
           graph_ms > 0 ? fl / (graph_ms * 1e-3) / 1e12 : 0.0);
    rc = b->sync(b) == MP_OK ? 0 : 1;
    if (rc)
        fprintf(stderr, "gpu_ops: %s\n", mp_error_message());
out_events:
    mp_cuda_graph_free(c.graph);
    cudaEventDestroy(t.e0);
    cudaEventDestroy(t.e1);
out:
    gs_model_free(&m);
    gs_dev_graph_free(b, &dg);
out_graph:
    mp_graphs_free(&g);
    mp_backend_close(b);
    return rc;
}

/* ===================================================================== */
/* Main                                                                   */
/* ===================================================================== */

static long arg_long(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "gpu_ops: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int32_t batches[8];
    int n_batches = 0, h = 300, depth = 3, trials = 15, all = 1, bf16_messages = 1;
    uint64_t seed = 1;
    mp_precision prec = MP_PREC_FP32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: gpu_ops [--batch N]... [--prec fp32|tf32|bf16|all] [--hidden H] "
                   "[--depth D] [--trials T] [--seed S] [--bf16-messages on|off]\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "gpu_ops: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--batch") && n_batches < 8)
            batches[n_batches++] = (int32_t)arg_long(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--hidden"))
            h = (int)arg_long(a, v, 1, 8192);
        else if (!strcmp(a, "--depth"))
            depth = (int)arg_long(a, v, 2, GS_MAX_DEPTH);    /* the op rows time W_h */
        else if (!strcmp(a, "--trials"))
            trials = (int)arg_long(a, v, 1, 1000);
        else if (!strcmp(a, "--seed"))
            seed = (uint64_t)arg_long(a, v, 0, 1L << 40);
        else if (!strcmp(a, "--bf16-messages") && (!strcmp(v, "on") || !strcmp(v, "off")))
            bf16_messages = !strcmp(v, "on");
        else if (!strcmp(a, "--prec")) {
            all = !strcmp(v, "all");
            if (!all && mp_precision_parse(v, &prec) != MP_OK) {
                fprintf(stderr, "gpu_ops: %s\n", mp_error_message());
                return 2;
            }
        } else {
            fprintf(stderr, "gpu_ops: unknown option '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (!n_batches) {
        batches[n_batches++] = 50;
        batches[n_batches++] = 4096;
    }
    char why[256];
    if (!mp_backend_cuda_available(why, sizeof why)) {
        fprintf(stderr, "gpu_ops: no GPU: %s\n", why);
        return 1;
    }
    int rc = 0;
    for (int p = all ? 0 : (int)prec; p <= (all ? 2 : (int)prec); p++)
        for (int i = 0; i < n_batches; i++)
            rc |= run_config((mp_precision)p, batches[i], h, depth, trials, seed, bf16_messages);
    return rc;
}
