/*
 * train_step.c - microbenchmark of one D-MPNN training step (select batch,
 * forward, loss + backward, Adam) on the cpu backend, on random ESOL-like
 * molecules: 902 training molecules (ESOL's 80% split) of 1-26 heavy atoms
 * (mean ~13.5, about as many bonds), batches of 50, hidden 300, depth 3.
 *
 *   build/bench_train_step [epochs=20] [threads=0] [hidden=300] [--profile]
 *
 * Prints the median time of a full 50-molecule step and of an epoch (every
 * batch of a shuffled pass, the last one partial, as Chemprop iterates).
 * --profile wraps every backend op with a timer and prints where an epoch's
 * time goes (the wrappers cost a little).
 *
 * On a machine shared with other busy processes run it (and molprop) with
 * OMP_WAIT_POLICY=passive: OpenMP threads that spin while a sibling is
 * descheduled made 2-thread steps ~15x slower here; passive is about as fast
 * as 1 thread then.  (libgomp reads the variable at load time, so the
 * program cannot set it for itself.)
 */
#include "internal.h"   /* every module header */
#include "../tests/randgraph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* A timing backend: the cpu backend with every op wrapped                */
/* ===================================================================== */

enum { T_GEMM, T_EMBED, T_EMBED_BW, T_EDGE, T_EDGE_BW, T_MSG, T_MSG_BW, T_SUM, T_SUM_BW,
       T_POOL, T_ELT, T_RELU, T_RELU_BW, T_COPY, T_BIAS, T_LOSS, T_ADAM, T_MEM, T_N };
static const char *t_name[T_N] = { "gemm", "atom_embed", "atom_embed_bw", "edge_embed",
                                   "edge_embed_bw", "message", "message_bw", "atom_sum",
                                   "atom_sum_bw", "pool(+bw)", "dropout", "relu(+dropout)",
                                   "relu(+dropout)_bw", "copy",
                                   "col_sum", "loss", "adam", "upload/zero" };
static double t_acc[T_N];
static mp_backend *inner;

#define WRAP(slot, ret, fn, params, args)                                      \
    static ret w_##fn params                                                   \
    {                                                                          \
        double t0 = mp_time_now();                                             \
        ret r_ = inner->fn args;                                               \
        t_acc[slot] += mp_time_now() - t0;                                     \
        return r_;                                                             \
    }
#define WRAPV(slot, fn, params, args)                                          \
    static void w_##fn params                                                  \
    {                                                                          \
        double t0 = mp_time_now();                                             \
        inner->fn args;                                                        \
        t_acc[slot] += mp_time_now() - t0;                                     \
    }

WRAPV(T_GEMM, gemm, (mp_backend *b, int count, const mp_gemm *g), (inner, count, g))
WRAPV(T_GEMM, gemm_res_relu, (mp_backend *b, int m, int n, int k, const void *a, int lda,
                              const void *w, int ldw, mp_stype aws, const void *r, int ldr,
                              void *c, int ldc, mp_stype rcs),
      (inner, m, n, k, a, lda, w, ldw, aws, r, ldr, c, ldc, rcs))
WRAPV(T_EMBED, atom_embed, (mp_backend *b, void *o, const int16_t *h, const float *ms,
                            const void *w, const void *bi, int32_t n, int hd, int mr),
      (inner, o, h, ms, w, bi, n, hd, mr))
WRAPV(T_EMBED_BW, atom_embed_backward, (mp_backend *b, void *dw, const int16_t *h, const float *ms,
                                        const void *d, int32_t n, int hd, int mr),
      (inner, dw, h, ms, d, n, hd, mr))
WRAPV(T_EDGE, edge_embed, (mp_backend *b, void *h0, void *m0, mp_stype st, const int32_t *s,
                           const int8_t *bh, const void *a, const void *wb, int32_t n, int h),
      (inner, h0, m0, st, s, bh, a, wb, n, h))
WRAPV(T_EDGE_BW, edge_embed_backward, (mp_backend *b, void *da, void *dwb, const int32_t *is,
                                       const int32_t *ie, const int8_t *bh, const void *d,
                                       int32_t na, int32_t ne, int h),
      (inner, da, dwb, is, ie, bh, d, na, ne, h))
WRAPV(T_MSG, message, (mp_backend *b, void *msg, mp_stype mst, void *s, const int32_t *is,
                       const int32_t *ie, const int32_t *src, const void *m, mp_stype ms,
                       int relu, int32_t na, int32_t ne, int h),
      (inner, msg, mst, s, is, ie, src, m, ms, relu, na, ne, h))
WRAPV(T_MSG_BW, message_backward, (mp_backend *b, void *dz, mp_stype zs, void *dh0, void *ds,
                                   const int32_t *is, const int32_t *ie, const int32_t *dst,
                                   const void *d, mp_stype dst_s, const void *y, mp_stype ys,
                                   double p, int32_t na, int32_t ne, int h),
      (inner, dz, zs, dh0, ds, is, ie, dst, d, dst_s, y, ys, p, na, ne, h))
WRAPV(T_SUM, atom_sum, (mp_backend *b, void *a, mp_stype as, const int32_t *is, const int32_t *ie,
                        const void *m, mp_stype ms, int32_t na, int h),
      (inner, a, as, is, ie, m, ms, na, h))
WRAPV(T_SUM_BW, atom_sum_backward, (mp_backend *b, void *dm, void *dmo, mp_stype os,
                                    const int32_t *dst, const void *da, const void *y,
                                    mp_stype ys, double p, int32_t ne, int h),
      (inner, dm, dmo, os, dst, da, y, ys, p, ne, h))
WRAPV(T_POOL, pool, (mp_backend *b, void *o, int ldo, const int32_t *ma, const void *x,
                     int32_t nm, int h, mp_aggregation ag, double no),
      (inner, o, ldo, ma, x, nm, h, ag, no))
WRAPV(T_POOL, pool_backward, (mp_backend *b, void *dx, const int32_t *ma, const void *d, int ldo,
                              int32_t nm, int h, mp_aggregation ag, double no),
      (inner, dx, ma, d, ldo, nm, h, ag, no))
WRAPV(T_RELU, relu_dropout, (mp_backend *b, void *y, const void *x, mp_stype st, size_t n,
                             double p, mp_key k),
      (inner, y, x, st, n, p, k))
WRAPV(T_RELU_BW, relu_dropout_backward, (mp_backend *b, void *dx, void *dxo, mp_stype os,
                                         const void *y, mp_stype ys, const void *dy, size_t n,
                                         double p),
      (inner, dx, dxo, os, y, ys, dy, n, p))
WRAPV(T_ELT, dropout, (mp_backend *b, void *y, const void *x, int32_t r, int c, int ld, double p,
                       mp_key k),
      (inner, y, x, r, c, ld, p, k))
WRAPV(T_COPY, copy, (mp_backend *b, void *d, const void *s, size_t n), (inner, d, s, n))
WRAPV(T_COPY, copy2d, (mp_backend *b, void *d, mp_stype dst, int ldd, const void *s, mp_stype sst,
                       int lds, int32_t r, int c),
      (inner, d, dst, ldd, s, sst, lds, r, c))
WRAPV(T_BIAS, col_sum, (mp_backend *b, void *d, const void *x, int ldx, int32_t r, int c),
      (inner, d, x, ldx, r, c))
WRAPV(T_LOSS, loss, (mp_backend *b, void *l, void *dy, const void *y, const void *t,
                     const uint8_t *mk, int32_t n, const mp_loss_spec *spec),
      (inner, l, dy, y, t, mk, n, spec))
WRAPV(T_ADAM, adam, (mp_backend *b, void *p, void *m, void *v, const void *g, size_t n, double lr,
                     double b1, double b2, double e, double wd, long t),
      (inner, p, m, v, g, n, lr, b1, b2, e, wd, t))
WRAP(T_MEM, mp_status, upload, (mp_backend *b, void *d, const void *s, size_t n), (inner, d, s, n))
WRAPV(T_MEM, zero, (mp_backend *b, void *d, size_t n), (inner, d, n))

static mp_backend timed;

static mp_backend *make_timed(mp_backend *b)
{
    inner = b;
    timed = *b;
    timed.gemm = w_gemm;
    timed.gemm_res_relu = w_gemm_res_relu;
    timed.atom_embed = w_atom_embed;
    timed.atom_embed_backward = w_atom_embed_backward;
    timed.edge_embed = w_edge_embed;
    timed.edge_embed_backward = w_edge_embed_backward;
    timed.message = w_message;
    timed.message_backward = w_message_backward;
    timed.atom_sum = w_atom_sum;
    timed.atom_sum_backward = w_atom_sum_backward;
    timed.pool = w_pool;
    timed.pool_backward = w_pool_backward;
    timed.relu_dropout = w_relu_dropout;
    timed.relu_dropout_backward = w_relu_dropout_backward;
    timed.dropout = w_dropout;
    timed.copy = w_copy;
    timed.copy2d = w_copy2d;
    timed.col_sum = w_col_sum;
    timed.loss = w_loss;
    timed.adam = w_adam;
    timed.upload = w_upload;
    timed.zero = w_zero;
    return &timed;
}

/* ===================================================================== */
/* Benchmark                                                              */
/* ===================================================================== */

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    int epochs = 20, threads = 0, hidden = 300, profile = 0, pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--profile") == 0)
            profile = 1;
        else if (pos == 0 && ++pos)
            epochs = atoi(argv[i]);
        else if (pos == 1 && ++pos)
            threads = atoi(argv[i]);
        else
            hidden = atoi(argv[i]);
    }
    if (epochs < 1)
        epochs = 1;
    mp_threads_set(threads);
    const int32_t n_train = 902, bs = 50;
    mp_rng r;
    mp_rng_seed(&r, 2024, 0);
    rg_opts o = { 1, 26, 0.0, 0.01, 2 };
    mp_graphs g, batch;
    memset(&batch, 0, sizeof batch);
    if (!rg_make(&g, &r, n_train, 133, &o)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    float *tgt = malloc((size_t)n_train * sizeof *tgt);
    for (int32_t i = 0; i < n_train; i++)
        tgt[i] = (float)mp_rng_normal(&r);

    mp_backend *cpu = NULL;
    mp_model *m = NULL;
    mp_model_config c = mp_model_config_default();
    c.hidden = hidden;
    if (mp_backend_open(&cpu, "cpu") != MP_OK || mp_model_create(&m, &c, profile ? make_timed(cpu) : cpu, 0) != MP_OK) {
        fprintf(stderr, "%s\n", mp_error_message());
        return 1;
    }
    int32_t max_atoms, max_edges;
    mp_graphs_batch_bounds(&g, NULL, 0, bs, &max_atoms, &max_edges);
    if (mp_model_reserve(m, bs, max_atoms, max_edges) != MP_OK) {
        fprintf(stderr, "%s\n", mp_error_message());
        return 1;
    }
    const char *wait = getenv("OMP_WAIT_POLICY");
    printf("%s; %d threads (OMP_WAIT_POLICY %s); %d molecules, %d atoms, %d directed edges; "
           "hidden %d depth %d\n", mp_backend_cpu_info(), mp_threads_get(), wait ? wait : "unset",
           g.n_mols, g.n_atoms, g.n_edges, c.hidden, c.depth);

    size_t *order = malloc((size_t)n_train * sizeof *order);
    int32_t *idx = malloc((size_t)bs * sizeof *idx);
    float *bt = malloc((size_t)bs * sizeof *bt);
    int n_steps_full = 0, cap_steps = epochs * (n_train / bs + 1);
    double *step_t = malloc((size_t)cap_steps * sizeof *step_t);
    double *epoch_t = malloc((size_t)epochs * sizeof *epoch_t);
    double loss = 0, first_loss = 0;
    mp_rng shuf;
    mp_rng_seed(&shuf, 1, 3);
    for (int ep = -1; ep < epochs; ep++) {   /* epoch -1 warms up */
        if (ep == 0)
            memset(t_acc, 0, sizeof t_acc);
        for (int32_t i = 0; i < n_train; i++)
            order[i] = (size_t)i;
        mp_rng_shuffle(&shuf, order, (size_t)n_train);
        double te = mp_time_now();
        for (int32_t s = 0; s < n_train; s += bs) {
            int32_t n = n_train - s < bs ? n_train - s : bs;
            for (int32_t i = 0; i < n; i++) {
                idx[i] = (int32_t)order[s + i];
                bt[i] = tgt[idx[i]];
            }
            double t0 = mp_time_now();
            mp_model_zero_grad(m);
            if (mp_graphs_select(&batch, &g, idx, n) != MP_OK ||
                mp_model_forward(m, &batch, NULL, n, 1, NULL) != MP_OK ||
                mp_model_loss_backward(m, bt, &loss) != MP_OK ||
                mp_model_adam_step(m, 1e-3) != MP_OK) {
                fprintf(stderr, "%s\n", mp_error_message());
                return 1;
            }
            if (ep >= 0 && n == bs)
                step_t[n_steps_full++] = mp_time_now() - t0;
            if (ep == -1 && s == 0)
                first_loss = loss;
        }
        if (ep >= 0)
            epoch_t[ep] = mp_time_now() - te;
    }
    double med_step = median(step_t, n_steps_full), med_epoch = median(epoch_t, epochs);
    printf("step (50 molecules, select+forward+backward+adam): median %.3f ms over %d steps\n",
           med_step * 1e3, n_steps_full);
    printf("epoch (%d molecules, %d steps): median %.1f ms over %d epochs (min %.1f ms); "
           "loss %.3f -> %.3f\n", n_train, (n_train + bs - 1) / bs, med_epoch * 1e3, epochs,
           epoch_t[0] * 1e3, first_loss, loss);
    if (profile) {
        double tot = 0;
        for (int i = 0; i < T_N; i++)
            tot += t_acc[i];
        printf("per epoch, by op (sum %.1f ms):\n", tot / epochs * 1e3);
        for (int i = 0; i < T_N; i++)
            printf("  %-18s %7.2f ms  %5.1f%%\n", t_name[i], t_acc[i] / epochs * 1e3,
                   100 * t_acc[i] / tot);
    }
    free(order); free(idx); free(bt); free(step_t); free(epoch_t); free(tgt);
    mp_graphs_free(&batch);
    mp_graphs_free(&g);
    mp_model_free(m);
    mp_backend_close(cpu);
    return 0;
}
