/*
 * gpu_ops.c - microbenchmark of the cuda backend (make bench-gpu, then
 * ./build/gpu_ops).  On a synthetic molecule-shaped batch (27 atoms and 29
 * bonds per molecule on average, tests/randgraph.h) and Chemprop's default
 * D-MPNN (hidden 300, depth 3, 133 atom slots, one task, 2 FFN layers) it
 * times:
 *
 *   - the model's own training step, mp_model_step_bound on the batch bound
 *     on the device (zero the gradients, forward, masked MSE, backward,
 *     adam_sched, step_end: exactly what resident training replays),
 *     issued op by op and captured once through the seam's capture ops and
 *     replayed;
 *   - every op of that step at the shapes and storage types the model calls
 *     it with (its own activation buffers), reporting microseconds per call,
 *     the bytes it must move at least and the bandwidth that implies
 *     (FLOP/s for the products); rows with 0 calls are for comparison (a
 *     product alone vs in a pair, the unfused kernels of plain_ops);
 *   - the host-to-device upload of the batch (what the trainer pays per step
 *     when the dataset is not resident on the device).
 *
 * Times come from CUDA events on the backend's stream: each figure is the
 * median over `trials` trials of the mean over a run of calls long enough
 * (about 2 ms) to drown the event resolution.  Molecules per second =
 * batch / median step time.
 *
 * With --concurrent K it times instead K models side by side, each on its
 * own backend instance (its stream, cuBLAS handles, batch and buffers), as
 * `molprop train --ensemble-size K` trains its members: a round is every
 * model's call issued once, each on its stream (forked from and joined to
 * the first by events), from one host thread; it reports each op's and the
 * captured step's microseconds per round beside one model's, and their
 * ratio (K when the GPU runs the K calls one after another, 1 when it runs
 * them side by side for free).  It also times the K steps' graphs as the
 * branches of ONE graph (captured across the K streams), one launch per
 * round.  --sm-target N sizes every model's products for N SMs
 * (mp_backend_cuda_set_sm_target; 0: the whole GPU).
 *
 * usage: gpu_ops [--batch N]... [--prec fp32|tf32|bf16|all] [--hidden H]
 *                [--depth D] [--trials T] [--seed S] [--concurrent K [--sm-target N]]
 *                [--profile-steps N] [--data FILE]
 * --profile-steps N: only N steps op by op after the warm-up one, nothing
 * timed (for a profiler: `ncu ... gpu_ops --batch 50 --profile-steps 1`).
 * --data FILE: the batch is N molecules of a CSV (evenly spaced through
 * it, featurized as for training) instead of the synthetic batch.
 * (default: --batch 50 --batch 4096 --prec all --hidden 300 --depth 3
 *  --trials 15)
 */
#include "gpu/gpu.h"
#include "backend/ops.h"
#include "models/model_impl.h"
#include "data/dataset.h"
#include "featurize/featurize.h"
#include "../tests/randgraph.h"
#include "../tests/dev_batch.h"

#include <cuda_runtime.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --data FILE: the batch is that many molecules of the file, evenly spaced
 * and featurized as training featurizes them, instead of the synthetic
 * ones (whose hot atom slots are spread evenly, where real atoms crowd
 * into a few: the one-hot scatters see the difference). */
static const char *g_data;

/* The batch's graphs into *g: synthetic, or (--data) featurized into *f,
 * whose graphs *g then borrows (free *f, not *g).  0 on failure, said. */
static int batch_make(mp_graphs *g, mp_features **f, mp_rng *rng, int32_t batch)
{
    *f = NULL;
    if (!g_data) {
        rg_opts o = { 1, 53, 0.0, 0.0, 6 };     /* mean 27 atoms, 26 + 3 bonds */
        if (rg_make(g, rng, batch, 133, &o))
            return 1;
        fprintf(stderr, "gpu_ops: out of host memory for the batch\n");
        return 0;
    }
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.no_targets = 1;
    mp_dataset *d = NULL;
    const char **smi = NULL;
    int ok = mp_dataset_load(&d, g_data, &spec) == MP_OK;
    if (ok && d->n_rows < (size_t)batch) {
        fprintf(stderr, "gpu_ops: %s has %zu molecules, fewer than the batch of %d\n", g_data,
                d->n_rows, (int)batch);
        mp_dataset_free(d);
        return 0;
    }
    if (ok && (smi = malloc((size_t)batch * sizeof *smi))) {
        for (int32_t i = 0; i < batch; i++)
            smi[i] = d->smiles[(size_t)i * d->n_rows / (size_t)batch];
        ok = mp_featurize(f, smi, batch, NULL) == MP_OK;
    } else if (ok) {
        mp_error_set(MP_ERR_NOMEM, "out of host memory");
        ok = 0;
    }
    if (!ok)
        fprintf(stderr, "gpu_ops: %s: %s\n", g_data, mp_error_message());
    free(smi);
    mp_dataset_free(d);
    if (ok)
        *g = (*f)->g;
    return ok;
}

static void batch_free(mp_graphs *g, mp_features *f)
{
    if (f)
        mp_features_free(f);
    else
        mp_graphs_free(g);
}

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
/* The model, bound to a device batch                                     */
/* ===================================================================== */

/* Entries of the step schedule: more than time_ms ever calls a step (at
 * most 4096 calls per trial and per calibration round). */
#define SCHED_STEPS (1 << 17)

typedef struct {
    mp_backend  *b, plain;      /* plain: the same backend on the unfused kernels */
    mp_model    *m;
    dev_batch    d;
    float       *sched;
    int32_t     *k;
    void        *losses;
    mp_capture  *graph;
} bench_ctx;

/* Random targets for one task (10% missing), the batch's arrays on the
 * device, the model bound to them, and its step schedule (lr 1e-6: the
 * parameters barely move however many steps are timed). */
static mp_status ctx_make(bench_ctx *c, mp_backend *b, const mp_graphs *g, int h, int depth,
                          uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->b = b;
    c->plain = *b;
    mp_backend_cuda_plain_ops(&c->plain);
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = h;
    cfg.depth = depth;
    mp_status st = mp_model_create(&c->m, &cfg, b, seed);
    if (st != MP_OK)
        return st;
    size_t M = (size_t)g->n_mols;
    float *tg = malloc((M + 1) * sizeof(float));
    float *sched = malloc(sizeof(float) * 2 * SCHED_STEPS);
    if (!tg || !sched) {
        free(tg);
        free(sched);
        return mp_error_set(MP_ERR_NOMEM, "out of host memory");
    }
    mp_rng r;
    mp_rng_seed(&r, seed, 9);
    for (size_t i = 0; i < M; i++)
        tg[i] = mp_rng_uniform(&r) < 0.9 ? (float)mp_rng_normal(&r) : NAN;
    for (int t = 0; t < SCHED_STEPS; t++)
        mp_adam_sched_entry(1e-6, 0.9, 0.999, t + 1, sched + 2 * t);
    st = dev_batch_make(&c->d, b, g, tg, 1);
    c->sched = b->alloc(b, sizeof(float) * 2 * SCHED_STEPS);
    c->k = b->alloc(b, sizeof(int32_t));
    c->losses = b->alloc(b, sizeof(float) * SCHED_STEPS);
    if (st == MP_OK && (!c->sched || !c->k || !c->losses))
        st = MP_ERR_NOMEM;
    if (st == MP_OK)
        st = b->upload(b, c->sched, sched, sizeof(float) * 2 * SCHED_STEPS);
    free(tg);
    free(sched);
    return st != MP_OK ? st : mp_model_bind(c->m, &c->d.bt);
}

static void ctx_free(bench_ctx *c)
{
    mp_backend *b = c->b;
    if (!b)
        return;
    b->capture_free(b, c->graph);
    mp_model_free(c->m);
    dev_batch_free(&c->d);
    b->free(b, c->sched);
    b->free(b, c->k);
    b->free(b, c->losses);
}

/* The step index back to 0, before a timing runs up to SCHED_STEPS steps. */
static mp_status ctx_rewind(bench_ctx *c)
{
    int32_t zero = 0;
    return c->b->upload(c->b, c->k, &zero, sizeof zero);
}

static void w_step(void *x)
{
    bench_ctx *c = x;
    mp_model_step_bound(c->m, c->sched, c->k, c->losses);
}

static void w_graph(void *x)
{
    bench_ctx *c = x;
    c->b->replay(c->b, c->graph);
}

/* ===================================================================== */
/* The step's ops, on the model's own buffers                             */
/* ===================================================================== */

#define CTX bench_ctx *c = x; mp_model *m = c->m; mp_backend *b = c->b; mp_acts *a = &m->a; \
            mp_dev_graph *g = &a->g; const int h = m->h, fa = m->cfg.atom_fdim;          \
            const mp_stype so = m->st_op, sm = m->st_m, se = MP_ST_ELEM;                 \
            (void)b; (void)h; (void)g; (void)fa; (void)so; (void)sm; (void)se
#define PAR(off) MP_AT(m, m->params, off)
#define GRD(off) MP_AT(m, m->grads, off)

static void w_atom_embed(void *x)
{
    CTX;
    b->atom_embed(b, a->as, g->atom_hot, g->atom_mass, PAR(m->off_wi), NULL, g->n_atoms, h, fa - 1);
}
static void w_edge_embed_m0(void *x)
{
    CTX;
    b->edge_embed(b, a->h0, a->m[0], sm, g->edge_src, g->bond_hot, a->as,
                  PAR(m->off_wi + (size_t)fa * h), g->n_edges, h);
}
static void w_edge_embed(void *x)
{
    CTX;
    b->edge_embed(b, a->h0, NULL, sm, g->edge_src, g->bond_hot, a->as,
                  PAR(m->off_wi + (size_t)fa * h), g->n_edges, h);
}
static void w_edge_embed_plain(void *x)
{
    CTX;
    c->plain.edge_embed(&c->plain, a->h0, a->m[0], sm, g->edge_src, g->bond_hot, a->as,
                        PAR(m->off_wi + (size_t)fa * h), g->n_edges, h);
}
static void w_weights_copy(void *x)
{
    CTX;
    b->copy2d(b, a->whcopy, so, h, PAR(m->off_wh), se, h, 2 * h + fa, h);
}
static void w_message(void *x)
{
    CTX;
    b->message(b, a->msg[1], so, a->as, g->in_start, g->in_edge, g->edge_src, a->m[0], sm, 0,
               g->n_atoms, g->n_edges, h);
}
static void w_message_plain(void *x)
{
    CTX;
    c->plain.message(&c->plain, a->msg[1], so, a->as, g->in_start, g->in_edge, g->edge_src,
                     a->m[0], sm, 0, g->n_atoms, g->n_edges, h);
}
static void w_gemm_res_relu_wh(void *x)
{
    CTX;
    b->gemm_res_relu(b, g->n_edges, h, h, a->msg[1], h, a->wh_op, h, so, a->h0, h, a->m[1], h, sm);
}
static void w_relu_dropout_edges(void *x)
{
    CTX;   /* into dm (as large as an M_t of either storage), not in place */
    b->relu_dropout(b, a->dm, a->m[1], sm, (size_t)g->n_edges * h, 0.1, mp_key_host(77));
}
static void w_atom_sum(void *x)
{
    CTX;
    b->atom_sum(b, a->a, so, g->in_start, g->in_edge, a->m[m->cfg.depth - 1], sm, g->n_atoms, h);
}
static void w_atom_embed_bias(void *x)
{
    CTX;
    b->atom_embed(b, a->ho, g->atom_hot, g->atom_mass, PAR(m->off_wo), PAR(m->off_bo), g->n_atoms,
                  h, fa - 1);
}
static void w_gemm_res_relu_wo(void *x)
{
    CTX;
    b->gemm_res_relu(b, g->n_atoms, h, h, a->a, h, a->wo_op, h, so, a->ho, h, a->ho, h, se);
}
static void w_pool(void *x)
{
    CTX;
    b->pool(b, a->x0, m->in_dim, g->mol_atom, a->ho, g->n_mols, h, MP_AGG_MEAN, 100.0);
}
static void w_bias_rows(void *x)
{
    CTX;
    b->copy2d(b, a->hl[0], se, m->ffn_hidden, PAR(m->off_fb[0]), se, 0, m->n_mols, m->ffn_hidden);
}
static void w_gemm_ffn(void *x)
{
    CTX;
    mp_gemm p = { 0, 0, m->n_mols, m->ffn_hidden, m->in_dim, 1.0, 1.0, a->x0, PAR(m->off_fw[0]),
                  a->hl[0], m->in_dim, m->ffn_hidden, m->ffn_hidden, se, se, se };
    b->gemm(b, 1, &p);
}
static void w_loss(void *x)
{
    CTX;
    mp_loss_spec sp = { MP_LOSS_MSE, 1, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0 };
    b->loss(b, a->loss, a->g0, a->out, a->target, a->mask, m->n_mols, &sp);
}
static void w_pool_backward(void *x)
{
    CTX;
    b->pool_backward(b, a->dho, g->mol_atom, a->g1, m->in_dim, g->n_mols, h, MP_AGG_MEAN, 100.0);
}
static void w_relu_backward_atoms(void *x)
{
    CTX;
    b->relu_dropout_backward(b, a->dho, a->dho_op, so, a->ho, se, a->dho, (size_t)g->n_atoms * h,
                             0.0);
}
static void w_col_sum_atoms(void *x)
{
    CTX;
    b->col_sum(b, GRD(m->off_bo), a->dho, h, g->n_atoms, h);
}
static void w_gemm_wo_pair(void *x)
{
    CTX;
    mp_gemm p[2] = {
        { 1, 0, h, h, g->n_atoms, 1.0, 1.0, a->a, a->dho_op, GRD(m->off_wo + (size_t)fa * h), h, h,
          h, so, so, se },
        { 0, 1, g->n_atoms, h, h, 1.0, 0.0, a->dho_op, a->wo_op, a->da, h, h, h, so, so, se },
    };
    b->gemm(b, 2, p);
}
static void w_atom_embed_backward(void *x)
{
    CTX;
    b->atom_embed_backward(b, GRD(m->off_wo), g->atom_hot, g->atom_mass, a->dho, g->n_atoms, h,
                           fa - 1);
}
/* dZ as the products read it (model_impl.h: dz_op, or dh0 / dm itself) */
static void *dz_of(mp_acts *a, void *self) { return a->dz_op ? a->dz_op : self; }
static void w_atom_sum_backward(void *x)
{
    CTX;
    b->atom_sum_backward(b, a->dh0, dz_of(a, a->dh0), so, g->edge_dst, a->da,
                         a->m[m->cfg.depth - 1], sm, 0.0, g->n_edges, h);
}
static void w_gemm_wh_dw(void *x)
{
    CTX;
    mp_gemm p = { 1, 0, h, h, g->n_edges, 1.0, 1.0, a->msg[1], dz_of(a, a->dh0), GRD(m->off_wh), h,
                  h, h, so, so, se };
    b->gemm(b, 1, &p);
}
static void w_gemm_wh_dx(void *x)
{
    CTX;
    mp_gemm p = { 0, 1, g->n_edges, h, h, 1.0, 0.0, dz_of(a, a->dh0), a->wh_op, a->dmsg, h, h, h,
                  so, so, so };
    b->gemm(b, 1, &p);
}
static void w_gemm_wh_pair(void *x)
{
    CTX;
    mp_gemm p[2] = {
        { 1, 0, h, h, g->n_edges, 1.0, 1.0, a->msg[1], dz_of(a, a->dh0), GRD(m->off_wh), h, h, h,
          so, so, se },
        { 0, 1, g->n_edges, h, h, 1.0, 0.0, dz_of(a, a->dh0), a->wh_op, a->dmsg, h, h, h, so, so,
          so },
    };
    b->gemm(b, 2, p);
}
static void w_message_backward(void *x)
{
    CTX;
    b->message_backward(b, dz_of(a, a->dm), so, a->dh0, a->da, g->in_start, g->in_edge,
                        g->edge_dst, a->dmsg, so, a->m[0], sm, 0.0, g->n_atoms, g->n_edges, h);
}
static void w_edge_embed_backward(void *x)
{
    CTX;
    b->edge_embed_backward(b, a->da, GRD(m->off_wi + (size_t)fa * h), g->in_start, g->in_edge,
                           g->bond_hot, a->dh0, g->n_atoms, g->n_edges, h);
}
static void w_zero_grads(void *x)
{
    CTX;
    b->zero(b, m->grads, m->n_params * sizeof(float));
}
static void w_adam_sched(void *x)
{
    CTX;
    /* entry 0 every time: only the device index is read */
    b->adam_sched(b, m->params, m->adam_m, m->adam_v, m->grads, m->n_params, c->sched, c->k, 0.9,
                  0.999, 1e-8, 0.0);
}
static void w_adam(void *x)
{
    CTX;
    b->adam(b, m->params, m->adam_m, m->adam_v, m->grads, m->n_params, 1e-9, 0.9, 0.999, 1e-8,
            0.0, 5);
}

#undef CTX

/* ===================================================================== */
/* One configuration                                                      */
/* ===================================================================== */

typedef struct {
    const char *name;
    work_fn     fn;
    int         calls;     /* per training step (the step table's weight) */
    double      bytes;     /* at least, per call                          */
    double      flops;     /* per call (products)                         */
} op_row;

#define MAX_ROWS 40

/* The step's ops in the order the model issues them, with their calls per
 * step and what each must move and compute (rows[MAX_ROWS]); returns how
 * many.  Rows with 0 calls are for comparison only. */
static int step_rows(op_row *rows, const bench_ctx *c, const mp_graphs *g, int32_t batch)
{
    const mp_model *m = c->m;
    const int h = m->h, depth = m->cfg.depth;
    mp_backend *b = c->b;
    const double A = g->n_atoms, E = g->n_edges, M = batch, H = h, F = 4.0, S = 2.0;
    const double P = (double)m->n_params;
    const int d1 = depth - 1, copies = m->a.whcopy != NULL;
    const double OS = mp_stype_size(b, m->st_op), MS = mp_stype_size(b, m->st_m);
    /* the message: per atom in registers when msg and M are fp32, else two passes */
    const int direct = OS == F && MS == F;
    const op_row all[] = {
        /* forward */
        { "atom_embed (W_i atom part)", w_atom_embed, 1, A * H * F + A * 20, 0 },
        { "edge_embed + M_0 (H0, M_0)", w_edge_embed_m0, 1, E * H * (F + 2 * MS) + E * 12, 0 },
        { "edge_embed (H0 alone: inference)", w_edge_embed, 0, E * H * (F + MS) + E * 12, 0 },
        { "  unfused: edge_embed, ReLU pass", w_edge_embed_plain, 0, E * H * (F + 4 * MS) + E * 12,
          0 },
        { "copy2d (W_h, W_o to bf16)", copies ? w_weights_copy : NULL, 1,
          (2 * H + m->cfg.atom_fdim) * H * (F + S), 0 },
        { direct ? "message (per atom, no scratch)" : "message (two passes)", w_message, d1,
          direct ? 2 * E * H * F + E * 8 : E * H * (2 * MS + F + OS) + A * H * F + E * 8, 0 },
        { "  unfused: message, two passes", direct ? w_message_plain : NULL, 0,
          (3 * E + A) * H * F + E * 8, 0 },
        { "gemm_res_relu E x h x h (W_h fused)", w_gemm_res_relu_wh, d1,
          E * H * (OS + 2 * MS) + H * H * OS, 2 * E * H * H },
        { "relu_dropout p=0.1 (edges)", w_relu_dropout_edges, 0, 2 * E * H * MS, 0 },
        { "atom_sum (readout)", w_atom_sum, 1, E * H * MS + A * H * OS + E * 4, 0 },
        { "atom_embed +bias (W_o atom part)", w_atom_embed_bias, 1, A * H * F + A * 20, 0 },
        { "gemm_res_relu A x h x h (W_o fused)", w_gemm_res_relu_wo, 1,
          A * H * (OS + 2 * F) + H * H * OS, 2 * A * H * H },
        { "pool (mean)", w_pool, 1, (A + M) * H * F, 0 },
        { "copy2d (FFN bias rows)", w_bias_rows, 2, M * H * F, 0 },
        { "gemm B x h x h (FFN)", w_gemm_ffn, 2, (3 * M * H + H * H) * F, 2 * M * H * H },
        { "loss (masked MSE)", w_loss, 1, 4 * M * F, 0 },
        /* backward */
        { "pool_backward", w_pool_backward, 1, (A + M) * H * F, 0 },
        { "relu_dropout_backward (atoms)", w_relu_backward_atoms, 1,
          A * H * (3 * F + (OS < F ? OS : 0)), 0 },
        { "col_sum (b_o grad)", w_col_sum_atoms, 1, A * H * F, 0 },
        { "gemm pair dW_o + dA", w_gemm_wo_pair, 1, A * H * (3 * OS + F) + H * H * (OS + 2 * F),
          4 * A * H * H },
        { "atom_embed_backward (W_o, W_i)", w_atom_embed_backward, 2, A * H * F + A * 20, 0 },
        { "atom_sum_backward through ReLU", w_atom_sum_backward, 1,
          A * H * F + E * H * (F + MS + (OS < F ? OS : 0)) + E * 4, 0 },
        { "gemm h x h x E (dW_h) alone", w_gemm_wh_dw, 0, 2 * E * H * OS + 2 * H * H * F,
          2 * E * H * H },
        { "gemm E x h x h^T (dMsg) alone", w_gemm_wh_dx, 0, 2 * E * H * OS + H * H * OS,
          2 * E * H * H },
        { "gemm pair dW_h + dMsg", w_gemm_wh_pair, d1, 4 * E * H * OS + H * H * (OS + 2 * F),
          4 * E * H * H },
        { "message_backward (fused)", w_message_backward, d1,
          (3 * E + A) * H * F + E * H * (MS + 2 * OS) + E * 8, 0 },
        { "edge_embed_backward", w_edge_embed_backward, 1, (2 * E + A) * H * F, 0 },
        { "zero (gradients)", w_zero_grads, 1, P * F, 0 },
        { "adam_sched", w_adam_sched, 1, 7 * P * F, 0 },
        { "adam (host scalars)", w_adam, 0, 7 * P * F, 0 },
    };
    const int n = (int)(sizeof all / sizeof all[0]);
    memcpy(rows, all, sizeof all);
    return n;
}

static int g_profile_steps;   /* --profile-steps */

static int run_config(mp_precision prec, int32_t batch, int h, int depth, int trials,
                      uint64_t seed)
{
    mp_backend *b = NULL;
    if (mp_backend_cuda_open(&b, prec) != MP_OK) {
        fprintf(stderr, "gpu_ops: %s\n", mp_error_message());
        return 1;
    }
    mp_rng rng;
    mp_rng_seed(&rng, seed, 3);
    mp_graphs g;
    mp_features *gf;
    if (!batch_make(&g, &gf, &rng, batch)) {
        mp_backend_close(b);
        return 1;
    }
    bench_ctx c;
    int rc = 1;
    if (ctx_make(&c, b, &g, h, depth, seed) != MP_OK) {
        fprintf(stderr, "gpu_ops: model: %s\n", mp_error_message());
        goto out;
    }
    mp_model *m = c.m;
    timer t = { b, (cudaStream_t)mp_backend_cuda_stream(b), NULL, NULL, trials };
    if (!cuda_check(cudaEventCreate(&t.e0), "event") || !cuda_check(cudaEventCreate(&t.e1), "event"))
        goto out;
    w_step(&c);                                 /* valid activations for the op timings */
    if (b->sync(b) != MP_OK) {
        fprintf(stderr, "gpu_ops: first step: %s\n", mp_error_message());
        goto out_events;
    }
    if (g_profile_steps > 0) {
        for (int k = 0; k < g_profile_steps; k++)
            w_step(&c);
        rc = b->sync(b) == MP_OK ? 0 : 1;
        if (rc)
            fprintf(stderr, "gpu_ops: profiled steps: %s\n", mp_error_message());
        goto out_events;
    }

    const double A = g.n_atoms, E = g.n_edges, M = batch, H = h;
    const int d1 = depth - 1;
    op_row rows[MAX_ROWS];
    const int n_rows = step_rows(rows, &c, &g, batch);

    printf("\n== %s%s | batch %d molecules%s%s: %d atoms, %d directed edges | hidden %d, "
           "depth %d, %zu parameters\n", mp_backend_cuda_info(b),
           m->st_op == MP_ST_BF16 ? (m->st_m == MP_ST_BF16 ? " (bf16 storage, H0 and M_t too)"
                                                           : " (bf16 storage, H0 and M_t fp32)")
                                  : "", (int)batch, g_data ? " of " : "", g_data ? g_data : "",
           g.n_atoms, g.n_edges, h, depth, m->n_params);
    printf("%-34s %6s %10s %10s %9s %9s %7s\n", "op", "calls", "us/call", "MB/call", "GB/s",
           "TFLOP/s", "%step");
    double sum_ms = 0, *ms = calloc((size_t)n_rows, sizeof *ms);
    if (!ms)
        goto out_events;
    for (int i = 0; i < n_rows; i++) {
        if (!rows[i].fn)
            continue;
        ms[i] = time_ms(&t, rows[i].fn, &c);
        if (ms[i] < 0) {
            fprintf(stderr, "gpu_ops: %s: %s\n", rows[i].name, mp_error_message());
            free(ms);
            goto out_events;
        }
        sum_ms += rows[i].calls * ms[i];
    }
    double step_ms = -1;
    if (ctx_rewind(&c) == MP_OK)
        step_ms = time_ms(&t, w_step, &c);
    if (step_ms < 0) {
        fprintf(stderr, "gpu_ops: step: %s\n", mp_error_message());
        free(ms);
        goto out_events;
    }
    for (int i = 0; i < n_rows; i++) {
        const op_row *r = &rows[i];
        if (!r->fn)
            continue;
        printf("%-34s %6d %10.2f %10.3f %9.0f %9.2f %6.1f%%\n", r->name, r->calls, ms[i] * 1e3,
               r->bytes / 1e6, r->bytes / (ms[i] * 1e-3) / 1e9, r->flops / (ms[i] * 1e-3) / 1e12,
               100 * r->calls * ms[i] / step_ms);
    }
    free(ms);

    /* the model's step captured once (the seam's capture ops), replayed */
    double graph_ms = -1;
    if (ctx_rewind(&c) == MP_OK && b->capture_begin(b) == MP_OK) {
        w_step(&c);
        if (b->capture_end(b, &c.graph) == MP_OK && ctx_rewind(&c) == MP_OK)
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
        const mp_dev_batch *d = &c.d.bt;
        double t0 = mp_time_now();
        for (int r = 0; r < reps; r++) {
            size_t na = (size_t)g.n_atoms, ne = (size_t)g.n_edges;
            b->upload(b, d->atom_hot, g.atom_hot, na * MP_ATOM_MAX_HOT * 2);
            b->upload(b, d->atom_mass, g.atom_mass, na * 4);
            b->upload(b, d->bond_hot, g.bond_hot, ne / 2 * MP_BOND_MAX_HOT);
            b->upload(b, d->edge_src, g.edge_src, ne * 4);
            b->upload(b, d->edge_dst, g.edge_dst, ne * 4);
            b->upload(b, d->in_start, g.in_start, (na + 1) * 4);
            b->upload(b, d->in_edge, g.in_edge, ne * 4);
            b->upload(b, d->mol_atom, g.mol_atom, ((size_t)batch + 1) * 4);
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
    cudaEventDestroy(t.e0);
    cudaEventDestroy(t.e1);
out:
    ctx_free(&c);
    batch_free(&g, gf);
    mp_backend_close(b);
    return rc;
}

/* ===================================================================== */
/* K models side by side (--concurrent K)                                 */
/* ===================================================================== */

#define MAX_CONCURRENT 16

typedef struct {
    int          k;
    bench_ctx    c[MAX_CONCURRENT];
    cudaStream_t s[MAX_CONCURRENT];
    cudaEvent_t  join[MAX_CONCURRENT];
    cudaEvent_t  e0, e1;
    int          trials;
} multi;

/* Milliseconds of one round: fn on each of the first n models, each on its
 * own stream, rounds back to back (the streams forked from the first before
 * the run, joined to it after); median over trials as time_ms. */
static double multi_ms(multi *x, int n, work_fn fn, void **args)
{
    cudaStream_t s0 = x->s[0];
    double *v = malloc((size_t)x->trials * sizeof *v);
    if (!v)
        return -1;
    int reps = 1;
    for (int k = -1; k < x->trials; k++) {   /* k = -1: warm up and calibrate */
        for (;;) {
            cuda_check(cudaEventRecord(x->e0, s0), "event");
            for (int j = 1; j < n; j++)
                cuda_check(cudaStreamWaitEvent(x->s[j], x->e0, 0), "wait");
            for (int r = 0; r < reps; r++)
                for (int j = 0; j < n; j++)
                    fn(args[j]);
            for (int j = 1; j < n; j++) {
                cuda_check(cudaEventRecord(x->join[j], x->s[j]), "event");
                cuda_check(cudaStreamWaitEvent(s0, x->join[j], 0), "wait");
            }
            cuda_check(cudaEventRecord(x->e1, s0), "event");
            cuda_check(cudaEventSynchronize(x->e1), "event sync");
            float ms = 0;
            cuda_check(cudaEventElapsedTime(&ms, x->e0, x->e1), "elapsed");
            if (k >= 0) {
                v[k] = ms / reps;
                break;
            }
            if (ms >= 2.0f || reps >= 4096)
                break;
            reps = ms <= 0.01f ? reps * 16 : (int)(reps * 2.2f / ms) + 1;
            if (reps > 4096)
                reps = 4096;
        }
    }
    qsort(v, (size_t)x->trials, sizeof *v, cmp_double);
    double med = v[x->trials / 2];
    free(v);
    for (int j = 0; j < n; j++)
        if (x->c[j].b->sync(x->c[j].b) != MP_OK)
            return -1;
    return med;
}

/* One launch of the graph whose branches are the K models' captured steps. */
typedef struct {
    cudaGraphExec_t exec;
    cudaStream_t    s;
} k_graph;

static void w_k_graph(void *x)
{
    k_graph *kg = x;
    cuda_check(cudaGraphLaunch(kg->exec, kg->s), "graph launch");
}

/* fn issued `reps` times on each of the first n models' streams, captured
 * as the n branches of one graph (a capture on the first stream that forks
 * to the others by events and joins them): what the GPU does with n
 * models' ops side by side, with no host launch in between. */
static int k_graph_make(multi *x, k_graph *kg, int n, work_fn fn, int reps)
{
    cudaStream_t s0 = x->s[0];
    cudaGraph_t g = NULL;
    kg->s = s0;
    kg->exec = NULL;
    if (!cuda_check(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal), "capture"))
        return 0;
    cuda_check(cudaEventRecord(x->e0, s0), "event");
    for (int j = 1; j < n; j++)
        cuda_check(cudaStreamWaitEvent(x->s[j], x->e0, 0), "wait");
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < n; j++)
            fn(&x->c[j]);
    for (int j = 1; j < n; j++) {
        cuda_check(cudaEventRecord(x->join[j], x->s[j]), "event");
        cuda_check(cudaStreamWaitEvent(s0, x->join[j], 0), "wait");
    }
    if (!cuda_check(cudaStreamEndCapture(s0, &g), "end capture"))
        return 0;
    int ok = cuda_check(cudaGraphInstantiate(&kg->exec, g, 0), "instantiate");
    cudaGraphDestroy(g);
    return ok;
}

/* Milliseconds per call of fn on n models side by side, on the GPU alone:
 * a graph of 16 calls per model (k_graph_make), replayed. */
#define OP_REPS 16
static double k_graph_ms(multi *x, int n, work_fn fn)
{
    k_graph kg = { NULL, NULL };
    double ms = -1;
    if (k_graph_make(x, &kg, n, fn, OP_REPS)) {
        void *ka[1] = { &kg };
        ms = multi_ms(x, 1, w_k_graph, ka) / OP_REPS;
    }
    if (kg.exec)
        cudaGraphExecDestroy(kg.exec);
    return ms;
}

/* The K captured steps replayed `reps` times each, from one host thread
 * (round robin over the streams) or from K threads (one per model, as the
 * trainer drives members side by side): host seconds per round. */
typedef struct {
    bench_ctx *c;
    int        reps;
} replay_arg;

static void *replay_thread(void *p)
{
    replay_arg *a = p;
    for (int r = 0; r < a->reps; r++)
        a->c->b->replay(a->c->b, a->c->graph);
    a->c->b->sync(a->c->b);
    return NULL;
}

static double host_rounds_ms(multi *x, int threads, int reps)
{
    for (int j = 0; j < x->k; j++)
        if (ctx_rewind(&x->c[j]) != MP_OK || x->c[j].b->sync(x->c[j].b) != MP_OK)
            return -1;
    double t0 = mp_time_now();
    if (!threads) {
        for (int r = 0; r < reps; r++)
            for (int j = 0; j < x->k; j++)
                x->c[j].b->replay(x->c[j].b, x->c[j].graph);
        for (int j = 0; j < x->k; j++)
            x->c[j].b->sync(x->c[j].b);
    } else {
        pthread_t th[MAX_CONCURRENT];
        replay_arg ra[MAX_CONCURRENT];
        for (int j = 0; j < x->k; j++) {
            ra[j] = (replay_arg){ &x->c[j], reps };
            pthread_create(&th[j], NULL, replay_thread, &ra[j]);
        }
        for (int j = 0; j < x->k; j++)
            pthread_join(th[j], NULL);
    }
    return (mp_time_now() - t0) * 1e3 / reps;
}

static int run_concurrent(mp_precision prec, int32_t batch, int h, int depth, int trials,
                          uint64_t seed, int K, int sm_target)
{
    multi x;
    memset(&x, 0, sizeof x);
    x.k = K;
    x.trials = trials;
    mp_rng rng;
    mp_rng_seed(&rng, seed, 3);
    mp_graphs g;
    mp_features *gf;
    if (!batch_make(&g, &gf, &rng, batch))
        return 1;
    int rc = 1, made = 0;
    k_graph kg = { NULL, NULL };
    for (; made < K; made++) {
        mp_backend *b = NULL;
        if (mp_backend_cuda_open(&b, prec) != MP_OK) {
            fprintf(stderr, "gpu_ops: %s\n", mp_error_message());
            goto out;
        }
        if ((sm_target && mp_backend_cuda_set_sm_target(b, sm_target) != MP_OK) ||
            ctx_make(&x.c[made], b, &g, h, depth, seed + (uint64_t)made) != MP_OK) {
            fprintf(stderr, "gpu_ops: model %d: %s\n", made + 1, mp_error_message());
            ctx_free(&x.c[made]);
            mp_backend_close(b);
            goto out;
        }
        x.s[made] = (cudaStream_t)mp_backend_cuda_stream(b);
        cuda_check(cudaEventCreateWithFlags(&x.join[made], cudaEventDisableTiming), "event");
        w_step(&x.c[made]);
        mp_status st = b->sync(b);
        if (st == MP_OK && (st = ctx_rewind(&x.c[made])) == MP_OK &&
            (st = b->capture_begin(b)) == MP_OK) {
            w_step(&x.c[made]);
            st = b->capture_end(b, &x.c[made].graph);
        }
        if (st != MP_OK) {
            fprintf(stderr, "gpu_ops: model %d: %s\n", made + 1, mp_error_message());
            made++;
            goto out;
        }
    }
    if (!cuda_check(cudaEventCreate(&x.e0), "event") || !cuda_check(cudaEventCreate(&x.e1), "event"))
        goto out;

    op_row rows[MAX_ROWS];
    const int n_rows = step_rows(rows, &x.c[0], &g, batch);
    void *args[MAX_CONCURRENT];
    for (int j = 0; j < K; j++)
        args[j] = &x.c[j];
    printf("\n== %s | batch %d molecules%s%s: %d atoms, %d directed edges | hidden %d, "
           "depth %d | %d models side by side, a backend and stream each, products sized for "
           "%d SMs\n", mp_backend_cuda_info(x.c[0].b), (int)batch, g_data ? " of " : "",
           g_data ? g_data : "", g.n_atoms, g.n_edges, h, depth, K, sm_target);
    printf("(each op: %d calls per model captured as one graph of K branches, replayed; us per "
           "call)\n", OP_REPS);
    printf("%-34s %6s %10s %12s %7s\n", "op", "calls", "us, one", "us, K/round", "ratio");
    double one_sum = 0, k_sum = 0;
    for (int i = 0; i < n_rows; i++) {
        if (!rows[i].fn || !rows[i].calls)
            continue;
        double t1 = k_graph_ms(&x, 1, rows[i].fn), tk = k_graph_ms(&x, K, rows[i].fn);
        if (t1 < 0 || tk < 0) {
            fprintf(stderr, "gpu_ops: %s: %s\n", rows[i].name, mp_error_message());
            goto out;
        }
        one_sum += rows[i].calls * t1;
        k_sum += rows[i].calls * tk;
        printf("%-34s %6d %10.2f %12.2f %7.2f\n", rows[i].name, rows[i].calls, t1 * 1e3,
               tk * 1e3, tk / t1);
    }
    printf("%-34s %6s %10.2f %12.2f %7.2f\n", "sum of the ops x calls", "", one_sum * 1e3,
           k_sum * 1e3, k_sum / one_sum);
    for (int j = 0; j < K; j++)
        if (ctx_rewind(&x.c[j]) != MP_OK)
            goto out;
    double s1 = multi_ms(&x, 1, w_graph, args), sk = multi_ms(&x, K, w_graph, args);
    double sg = -1;
    if (k_graph_make(&x, &kg, K, w_step, 1)) {
        void *ka[1] = { &kg };
        for (int j = 0; j < K; j++)
            if (ctx_rewind(&x.c[j]) != MP_OK)
                goto out;
        sg = multi_ms(&x, 1, w_k_graph, ka);
    }
    if (s1 < 0 || sk < 0) {
        fprintf(stderr, "gpu_ops: step graph: %s\n", mp_error_message());
        goto out;
    }
    printf("%-34s %6s %10.2f %12.2f %7.2f\n", "STEP, CUDA graph replay", "", s1 * 1e3, sk * 1e3,
           sk / s1);
    if (sg > 0)
        printf("%-34s %6s %10.2f %12.2f %7.2f\n", "STEP, K branches of one graph", "", s1 * 1e3,
               sg * 1e3, sg / s1);
    {
        const int reps = 2000;   /* a step's graph >= 4096 steps of schedule: rewound */
        double h1 = host_rounds_ms(&x, 0, reps), hk = host_rounds_ms(&x, 1, reps);
        printf("%-34s %6s %10s %12.2f\n", "STEP, K graphs, one host thread", "", "", h1 * 1e3);
        printf("%-34s %6s %10s %12.2f   (host wall clock per round, %d rounds)\n",
               "STEP, K graphs, K host threads", "", "", hk * 1e3, reps);
    }
    printf("molecules/s: one model %.0f; %d models %.0f (each model's molecules counted)\n",
           batch / (s1 * 1e-3), K, K * batch / ((sg > 0 && sg < sk ? sg : sk) * 1e-3));
    rc = 0;
out:
    if (kg.exec)
        cudaGraphExecDestroy(kg.exec);
    if (x.e0)
        cudaEventDestroy(x.e0);
    if (x.e1)
        cudaEventDestroy(x.e1);
    for (int j = 0; j < made; j++) {
        mp_backend *b = x.c[j].b;
        if (x.join[j])
            cudaEventDestroy(x.join[j]);
        ctx_free(&x.c[j]);
        mp_backend_close(b);
    }
    batch_free(&g, gf);
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
    int n_batches = 0, h = 300, depth = 3, trials = 15, all = 1, concurrent = 0, sm_target = 0;
    uint64_t seed = 1;
    mp_precision prec = MP_PREC_FP32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: gpu_ops [--batch N]... [--prec fp32|tf32|bf16|all] [--hidden H] "
                   "[--depth D] [--trials T] [--seed S] [--concurrent K [--sm-target N]] "
                   "[--profile-steps N] [--data FILE]\n");
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
            depth = (int)arg_long(a, v, 2, MP_MAX_DEPTH);    /* the op rows time W_h */
        else if (!strcmp(a, "--trials"))
            trials = (int)arg_long(a, v, 1, 1000);
        else if (!strcmp(a, "--sm-target"))
            sm_target = (int)arg_long(a, v, 0, 1024);
        else if (!strcmp(a, "--concurrent"))
            concurrent = (int)arg_long(a, v, 1, MAX_CONCURRENT);
        else if (!strcmp(a, "--profile-steps"))
            g_profile_steps = (int)arg_long(a, v, 1, 1000);
        else if (!strcmp(a, "--data"))
            g_data = v;
        else if (!strcmp(a, "--seed"))
            seed = (uint64_t)arg_long(a, v, 0, 1L << 40);
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
            rc |= concurrent ? run_concurrent((mp_precision)p, batches[i], h, depth, trials, seed,
                                              concurrent, sm_target)
                             : run_config((mp_precision)p, batches[i], h, depth, trials, seed);
    return rc;
}
