/*
 * gpu_infer.c - where inference time goes on the CUDA backend, for the
 * default D-MPNN (hidden 300, depth 3, one task) on random molecule-shaped
 * graphs (20-34 atoms, a few rings: about 27 atoms and 29 bonds per
 * molecule), per batch size and precision:
 *
 *   call      mp_model_forward (training 0) as the simple prediction path
 *             calls it: check, eight synchronous uploads from pageable
 *             memory, the forward, a sync, the download of the outputs
 *   forward   the forward alone on a batch already on the device
 *             (mp_model_forward_dev), CUDA events on the backend's stream;
 *             "graph": the same captured once as a CUDA graph and replayed
 *   upload    the batch's graph arrays host -> device: as the simple path
 *             does (8 synchronous copies from pageable memory) and as the
 *             stream path does (one packed block from page-locked memory)
 *   predict   the whole prediction path over pre-featurized graphs
 *             (per batch a select and mp_model_forward, predict_simple
 *             below, vs mp_ensemble_predict_stream,
 *             1 member, N molecules in batches of B): selecting, packing,
 *             checking, uploading, the forward, downloading, un-scaling;
 *             the stream's host time split into packing and waiting
 *   ops       the forward's ops one by one (CUDA events around each op of
 *             the real model code, through a timing shim of the backend)
 *
 * Medians (of 9 calls, or of 15 trials of a ~2 ms run of forwards).
 *   build/gpu_infer [--n N] [--prec fp32|tf32|bf16|all] [--ops 0|1] [batch ...]
 *   (default: --n 262144 --prec all --ops 1, batches 4096 16384 65536)
 */
#include "internal.h"   /* every module header */
#include "gpu/gpu.h"
#include "run/ensemble.h"
#include "models/model.h"
#include "../tests/randgraph.h"

#include <cuda_runtime.h>

#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define DIE(...)                                                                   \
    do {                                                                           \
        fprintf(stderr, "gpu_infer: " __VA_ARGS__);                                \
        fprintf(stderr, "\n");                                                     \
        exit(1);                                                                   \
    } while (0)
#define OK(call)                                                                   \
    do {                                                                           \
        if ((call) != MP_OK)                                                       \
            DIE("%s: %s", #call, mp_error_message());                              \
    } while (0)

/* The prediction as a plain mp_model_forward per batch (a select, the
 * synchronous forward, un-scaling) for one regression member without
 * molecule features: the column the streamed path is measured against. */
static void predict_simple(mp_ensemble *e, const mp_features *f, const int32_t *mols, int32_t n,
                           int32_t B, double *mean)
{
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    int32_t *sel = mp_malloc(sizeof(int32_t) * (size_t)B);
    float *out = mp_malloc(sizeof(float) * (size_t)B);
    double *val = mp_malloc(sizeof(double) * (size_t)B);
    if (!sel || !out || !val)
        DIE("out of memory");
    for (int32_t b0 = 0; b0 < n; b0 += B) {
        int32_t span = n - b0 < B ? n - b0 : B, nb = 0;
        for (int32_t i = 0; i < span; i++)
            if (f->g.valid[mols[b0 + i]])
                sel[nb++] = mols[b0 + i];
        if (nb > 0) {
            OK(mp_graphs_select(&batch, &f->g, sel, nb));
            OK(mp_model_forward(e->members[0], &batch, NULL, nb, 0, out));
            mp_scaler_inverse_from_f32(&e->target_scaler, out, val, (size_t)nb);
        }
        for (int32_t i = 0, j = 0; i < span; i++)
            mean[b0 + i] = f->g.valid[mols[b0 + i]] ? val[j++] : NAN;
    }
    mp_graphs_free(&batch);
    mp_free(sel);
    mp_free(out);
    mp_free(val);
}

/* ===================================================================== */
/* Per-op timing shim                                                     */
/* ===================================================================== */

/* The model runs on `shim`, a copy of the real backend whose forward ops
 * record a CUDA event pair around the real op (called on `real`, so ops
 * that call other ops are timed once). */
#define MAX_T 64
static mp_backend real, shim;
static cudaStream_t t_stream;
static cudaEvent_t t_ev[2 * MAX_T];
static char t_name[MAX_T][80];
static double t_host[MAX_T], t_host0;   /* host seconds to issue each op */
static int t_n, t_on;

static void t_begin(const char *fmt, long a, long b2, long c)
{
    if (!t_on || t_n >= MAX_T)
        return;
    snprintf(t_name[t_n], sizeof t_name[t_n], fmt, a, b2, c);
    cudaEventRecord(t_ev[2 * t_n], t_stream);
    t_host0 = mp_time_now();
}
static void t_end(void)
{
    if (!t_on || t_n >= MAX_T)
        return;
    t_host[t_n] = mp_time_now() - t_host0;
    cudaEventRecord(t_ev[2 * t_n + 1], t_stream);
    t_n++;
}

static void s_atom_embed(mp_backend *b, void *out, const int16_t *hot, const float *mass,
                         const void *w, const void *bias, int32_t n, int h, int mass_row)
{
    t_begin(bias ? "atom_embed W_o+bias (%ld atoms)" : "atom_embed W_i (%ld atoms)", n, 0, 0);
    real.atom_embed(&real, out, hot, mass, w, bias, n, h, mass_row);
    t_end();
}
static void s_edge_embed(mp_backend *b, void *h0, void *m0, mp_stype st, const int32_t *src,
                         const int8_t *bh, const void *a, const void *wb, int32_t n, int h)
{
    t_begin(m0 ? "edge_embed + M_0 (%ld edges)" : "edge_embed (%ld edges)", n, 0, 0);
    real.edge_embed(&real, h0, m0, st, src, bh, a, wb, n, h);
    t_end();
}
static void s_relu_dropout(mp_backend *b, void *y, const void *x, mp_stype st, size_t n, double p,
                           mp_key key)
{
    t_begin("relu_dropout (%ld values)", (long)n, 0, 0);
    real.relu_dropout(&real, y, x, st, n, p, key);
    t_end();
}
static void s_message(mp_backend *b, void *msg, mp_stype msg_st, void *s, const int32_t *is,
                      const int32_t *ie, const int32_t *src, const void *m, mp_stype m_st,
                      int relu_in, int32_t na, int32_t ne, int h)
{
    t_begin(relu_in ? "message, ReLU on read (%ld atoms, %ld edges)" : "message (%ld atoms, %ld edges)",
            na, ne, 0);
    real.message(&real, msg, msg_st, s, is, ie, src, m, m_st, relu_in, na, ne, h);
    t_end();
}
static void s_gemm_res_relu(mp_backend *b, int m, int n, int k, const void *a, int lda,
                            const void *w, int ldw, mp_stype aw_st, const void *r, int ldr, void *c,
                            int ldc, mp_stype rc_st)
{
    t_begin("gemm_res_relu %ld x %ld x %ld", m, n, k);
    real.gemm_res_relu(&real, m, n, k, a, lda, w, ldw, aw_st, r, ldr, c, ldc, rc_st);
    t_end();
}
static void s_gemm(mp_backend *b, int count, const mp_gemm *g)
{
    t_begin("gemm %ld x %ld x %ld", g->m, g->n, g->k);
    real.gemm(&real, count, g);
    t_end();
}
static void s_atom_sum(mp_backend *b, void *a, mp_stype a_st, const int32_t *is,
                       const int32_t *ie, const void *m, mp_stype m_st, int32_t na, int h)
{
    t_begin("atom_sum (%ld atoms)", na, 0, 0);
    real.atom_sum(&real, a, a_st, is, ie, m, m_st, na, h);
    t_end();
}
static void s_pool(mp_backend *b, void *out, int ldo, const int32_t *ma, const void *x,
                   int32_t nm, int h, mp_aggregation agg, double norm)
{
    t_begin("pool (%ld molecules)", nm, 0, 0);
    real.pool(&real, out, ldo, ma, x, nm, h, agg, norm);
    t_end();
}
static void s_copy2d(mp_backend *b, void *dst, mp_stype dst_st, int ldd, const void *src,
                     mp_stype src_st, int lds, int32_t n, int cols)
{
    t_begin(lds ? "copy2d %ld x %ld" : "copy2d (bias rows) %ld x %ld", n, cols, 0);
    real.copy2d(&real, dst, dst_st, ldd, src, src_st, lds, n, cols);
    t_end();
}

static int s_message_update(mp_backend *b, void *c, const void *r, mp_stype rc_st, void *s,
                            const int32_t *is, const int32_t *ie, const int32_t *src,
                            const void *m, mp_stype m_st, int relu_in, const void *w,
                            mp_stype w_st, int32_t na, int32_t ne, int h, void *msg)
{
    t_begin("message_update, fused (%ld atoms, %ld edges)", na, ne, 0);
    int done = real.message_update(&real, c, r, rc_st, s, is, ie, src, m, m_st, relu_in, w, w_st,
                                   na, ne, h, msg);
    t_end();
    return done;
}

static mp_backend *shim_of(mp_backend *b)
{
    real = *b;
    shim = *b;
    shim.atom_embed = s_atom_embed;
    shim.edge_embed = s_edge_embed;
    shim.relu_dropout = s_relu_dropout;
    shim.message = s_message;
    shim.gemm_res_relu = s_gemm_res_relu;
    shim.gemm = s_gemm;
    shim.atom_sum = s_atom_sum;
    shim.pool = s_pool;
    shim.copy2d = s_copy2d;
    if (b->message_update)
        shim.message_update = s_message_update;
    t_stream = (cudaStream_t)mp_backend_cuda_stream(b);
    for (int i = 0; i < 2 * MAX_T; i++)
        if (!t_ev[i] && cudaEventCreate(&t_ev[i]) != cudaSuccess)
            DIE("cudaEventCreate failed");
    return &shim;
}

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

/* The graph arrays of g on the device, as the model reads them. */
typedef struct {
    mp_dev_batch bt;
    void *bufs[8];
} dev_graph;

static void dev_graph_make(dev_graph *d, mp_backend *b, const mp_graphs *g)
{
    size_t na = (size_t)g->n_atoms, ne = (size_t)g->n_edges, nm = (size_t)g->n_mols;
    const void *src[8] = { g->atom_hot, g->atom_mass, g->bond_hot, g->edge_src, g->edge_dst,
                           g->in_start, g->in_edge, g->mol_atom };
    size_t bytes[8] = { na * MP_ATOM_MAX_HOT * 2, na * 4, ne / 2 * MP_BOND_MAX_HOT, ne * 4,
                        ne * 4, (na + 1) * 4, ne * 4, (nm + 1) * 4 };
    memset(d, 0, sizeof *d);
    for (int i = 0; i < 8; i++) {
        if (!(d->bufs[i] = b->alloc(b, bytes[i])))
            DIE("%s", mp_error_message());
        OK(b->upload(b, d->bufs[i], src[i], bytes[i]));
    }
    d->bt.n_mols = g->n_mols;
    d->bt.n_atoms = g->n_atoms;
    d->bt.n_edges = g->n_edges;
    d->bt.atom_hot = d->bufs[0];
    d->bt.atom_mass = d->bufs[1];
    d->bt.bond_hot = d->bufs[2];
    d->bt.edge_src = d->bufs[3];
    d->bt.edge_dst = d->bufs[4];
    d->bt.in_start = d->bufs[5];
    d->bt.in_edge = d->bufs[6];
    d->bt.mol_atom = d->bufs[7];
}

static void dev_graph_free(dev_graph *d, mp_backend *b)
{
    for (int i = 0; i < 8; i++)
        b->free(b, d->bufs[i]);
}

/* ms per forward on the device batch: median over 15 trials of the mean of
 * a run of `reps` forwards (reps so a run lasts ~2 ms); graph != NULL
 * replays it instead of issuing the ops. */
static double time_forward(mp_backend *b, mp_model *m, const mp_dev_batch *bt,
                           mp_cuda_graph *graph)
{
    cudaStream_t s = (cudaStream_t)mp_backend_cuda_stream(b);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int reps = 1;
    double v[15];
    for (int trial = -1; trial < 15; trial++) {
        cudaEventRecord(e0, s);
        for (int r = 0; r < reps; r++) {
            if (graph)
                OK(mp_cuda_graph_launch(b, graph));
            else
                OK(mp_model_forward_dev(m, bt));
        }
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (trial < 0) {          /* calibration */
            reps = ms > 0 ? (int)(2.0 / ms * reps) + 1 : 64;
            if (reps > 256)
                reps = 256;
            continue;
        }
        v[trial] = ms / reps;
    }
    OK(b->sync(b));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return median(v, 15);
}

/* ===================================================================== */
/* Main                                                                   */
/* ===================================================================== */

/* A crash prints where it happened (binary+offset: addr2line -e on the
 * unstripped build resolves them). */
static void on_fatal(int sig)
{
    void *frames[48];
    int n = backtrace(frames, 48);
    static const char msg[] = "gpu_infer: fatal signal, backtrace:\n";
    (void)!write(2, msg, sizeof msg - 1);
    backtrace_symbols_fd(frames, n, 2);
    _exit(128 + sig);
}

int main(int argc, char **argv)
{
    signal(SIGSEGV, on_fatal);
    signal(SIGBUS, on_fatal);
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a crash keeps the lines before it */
    char why[256];
    if (!mp_backend_cuda_available(why, sizeof why))
        DIE("no GPU: %s", why);
    int batches[16] = { 4096, 16384, 65536 }, n_batches = 0, ops = 1;
    int32_t n_total = 262144;
    const char *prec_arg = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n_total = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prec") && i + 1 < argc)
            prec_arg = argv[++i];
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops = atoi(argv[++i]);
        else if (n_batches < 16)
            batches[n_batches++] = atoi(argv[i]);
    }
    if (n_batches == 0)
        n_batches = 3;
    const char *precs[3] = { "fp32", "tf32", "bf16" };

    /* One store of random molecules: batches are its first B molecules, the
     * prediction runs over all of it. */
    mp_features *f = mp_calloc(1, sizeof *f);
    mp_rng r;
    mp_rng_seed(&r, 7, 0);
    rg_opts ro = { .min_atoms = 20, .max_atoms = 34, .p_empty = 0, .p_no_bonds = 0, .max_rings = 3 };
    double t0 = mp_time_now();
    if (!f || !rg_make(&f->g, &r, n_total, 133, &ro))
        DIE("out of memory building %d molecules", (int)n_total);
    int32_t *all = malloc(sizeof(int32_t) * (size_t)n_total);
    double *mean = malloc(sizeof(double) * (size_t)n_total);
    double *mean2 = malloc(sizeof(double) * (size_t)n_total);
    for (int32_t i = 0; i < n_total; i++)
        all[i] = i;
    printf("store: %d molecules, %d atoms, %d edges (%.1f s to make); host threads %d\n",
           (int)f->g.n_mols, (int)f->g.n_atoms, (int)f->g.n_edges, mp_time_now() - t0,
           mp_threads_get());

    for (int bi = 0; bi < n_batches; bi++) {
        int32_t B = batches[bi] < n_total ? batches[bi] : n_total;
        mp_graphs g;
        memset(&g, 0, sizeof g);
        OK(mp_graphs_select(&g, &f->g, all, B));
        float *out = malloc(sizeof(float) * (size_t)B);
        printf("\n== batch %d: %d atoms, %d edges ==\n", (int)B, (int)g.n_atoms, (int)g.n_edges);
        printf("%-5s %10s %10s %10s %10s %10s %10s %11s %11s %9s %9s\n", "prec", "call_ms",
               "fwd_ms", "graph_ms", "up8_ms", "up1_ms", "up1_GB/s", "simple_m/s", "stream_m/s",
               "pack_ms", "wait_ms");
        for (int p = 0; p < 3; p++) {
            if (strcmp(prec_arg, "all") && strcmp(prec_arg, precs[p]))
                continue;
            char name[32];
            snprintf(name, sizeof name, "cuda:%s", precs[p]);
            mp_backend *b;
            mp_model *m;
            mp_model_config cfg = mp_model_config_default();
            OK(mp_backend_open(&b, name));
            OK(mp_model_create(&m, &cfg, b, 1));
            OK(mp_model_reserve(m, g.n_mols, g.n_atoms, g.n_edges));

            /* call: the simple path's forward */
            double v[9];
            for (int rep = -2; rep < 9; rep++) {
                double a = mp_time_now();
                OK(mp_model_forward(m, &g, NULL, g.n_mols, 0, out));
                if (rep >= 0)
                    v[rep] = mp_time_now() - a;
            }
            double call_ms = 1e3 * median(v, 9);

            /* forward alone, issued and as a graph */
            dev_graph d;
            dev_graph_make(&d, b, &g);
            double fwd_ms = time_forward(b, m, &d.bt, NULL);
            /* the same on the unfused kernels (gpu.h plain_ops), and how far
             * apart their outputs are */
            static mp_backend plain;
            plain = *b;
            mp_backend_cuda_plain_ops(&plain);
            mp_model *mu = NULL;
            OK(mp_model_create(&mu, &cfg, &plain, 1));
            OK(mp_model_reserve(mu, g.n_mols, g.n_atoms, g.n_edges));
            double unfused_ms = time_forward(b, mu, &d.bt, NULL);
            float *o1 = malloc(sizeof(float) * (size_t)B), *o2 = malloc(sizeof(float) * (size_t)B);
            OK(mp_model_forward_dev(m, &d.bt));
            OK(b->download(b, o1, mp_model_block_ptr(m, MP_BLOCK_OUTPUT), sizeof(float) * (size_t)B));
            OK(mp_model_forward_dev(mu, &d.bt));
            OK(b->download(b, o2, mp_model_block_ptr(mu, MP_BLOCK_OUTPUT), sizeof(float) * (size_t)B));
            /* bit for bit but for message_update (its own product order) */
            double fd2 = 0, fr2 = 0;
            for (int32_t i = 0; i < B; i++) {
                fd2 += ((double)o1[i] - o2[i]) * ((double)o1[i] - o2[i]);
                fr2 += (double)o2[i] * o2[i];
            }
            const double fused_rel = sqrt(fd2 / (fr2 > 0 ? fr2 : 1));
            free(o1);
            free(o2);
            mp_model_free(mu);
            mp_cuda_graph *graph = NULL;
            OK(mp_cuda_graph_begin(b));
            OK(mp_model_forward_dev(m, &d.bt));
            OK(mp_cuda_graph_end(b, &graph));
            double graph_ms = time_forward(b, m, &d.bt, graph);
            mp_cuda_graph_free(graph);

            /* upload: 8 pageable synchronous copies vs one pinned block */
            size_t na = (size_t)g.n_atoms, ne = (size_t)g.n_edges, nm = (size_t)g.n_mols;
            const void *src[8] = { g.atom_hot, g.atom_mass, g.bond_hot, g.edge_src, g.edge_dst,
                                   g.in_start, g.in_edge, g.mol_atom };
            size_t bytes[8] = { na * MP_ATOM_MAX_HOT * 2, na * 4, ne / 2 * MP_BOND_MAX_HOT,
                                ne * 4, ne * 4, (na + 1) * 4, ne * 4, (nm + 1) * 4 };
            size_t total = 0;
            for (int i = 0; i < 8; i++)
                total += bytes[i];
            for (int rep = -1; rep < 9; rep++) {
                double a = mp_time_now();
                for (int i = 0; i < 8; i++)
                    OK(b->upload(b, d.bufs[i], src[i], bytes[i]));
                if (rep >= 0)
                    v[rep] = mp_time_now() - a;
            }
            double up8_ms = 1e3 * median(v, 9);
            char *pin = b->host_alloc ? b->host_alloc(b, total) : NULL;
            char *dblock = b->alloc(b, total);
            double up1_ms = -1;
            if (pin && dblock) {
                size_t at = 0;
                for (int i = 0; i < 8; i++) {
                    memcpy(pin + at, src[i], bytes[i]);
                    at += bytes[i];
                }
                for (int rep = -1; rep < 9; rep++) {
                    double a = mp_time_now();
                    b->upload_async(b, 1, dblock, pin, total);
                    b->fence_record(b, 1, 7);
                    OK(b->fence_sync(b, 7));
                    if (rep >= 0)
                        v[rep] = mp_time_now() - a;
                }
                up1_ms = 1e3 * median(v, 9);
            }
            if (pin)
                b->host_free(b, pin);
            b->free(b, dblock);

            /* the forward op by op (bf16 and fp32 only: tf32 is bf16's twin) */
            if (ops && p != 1) {
                mp_model *ms = NULL;
                OK(mp_model_create(&ms, &cfg, shim_of(b), 1));
                OK(mp_model_reserve(ms, g.n_mols, g.n_atoms, g.n_edges));
                OK(mp_model_forward_dev(ms, &d.bt));          /* warm up */
                OK(b->sync(b));
                double per[9][MAX_T], host[9][MAX_T];
                int nops = 0;
                for (int rep = 0; rep < 9; rep++) {
                    t_n = 0;
                    t_on = 1;
                    OK(mp_model_forward_dev(ms, &d.bt));
                    t_on = 0;
                    OK(b->sync(b));
                    nops = t_n;
                    for (int i = 0; i < t_n; i++) {
                        float e = 0;
                        cudaEventElapsedTime(&e, t_ev[2 * i], t_ev[2 * i + 1]);
                        per[rep][i] = e;
                        host[rep][i] = 1e3 * t_host[i];
                    }
                }
                printf("  ops, %s (median of 9 forwards; device us, host us to issue):\n",
                       precs[p]);
                double sum = 0, hsum = 0;
                for (int i = 0; i < nops; i++) {
                    double col[9], hcol[9];
                    for (int rep = 0; rep < 9; rep++) {
                        col[rep] = per[rep][i];
                        hcol[rep] = host[rep][i];
                    }
                    double us = 1e3 * median(col, 9), hus = 1e3 * median(hcol, 9);
                    sum += us;
                    hsum += hus;
                    printf("    %-48s %9.1f %8.1f\n", t_name[i], us, hus);
                }
                printf("    %-48s %9.1f %8.1f  (forward timed whole: %.1f)\n", "sum of ops", sum,
                       hsum, 1e3 * fwd_ms);
                mp_model_free(ms);
            }
            dev_graph_free(&d, b);
            mp_model_free(m);
            mp_backend_close(b);

            /* the prediction paths over the whole store, batch B */
            mp_ensemble *e;
            OK(mp_ensemble_create(&e, &cfg, 1, 1, name));
            e->task = MP_TASK_REGRESSION;
            e->n_tasks = 1;
            double smu = 0.5, ssd = 2.0;
            OK(mp_scaler_set(&e->target_scaler, MP_SCALE_TARGETS, 1, &smu, &ssd));
            mp_predict_stream_stats ss;
            double simple_s = 0, stream_s = 0;
            for (int rep = 0; rep < 2; rep++) {       /* the second of each counts */
                double a = mp_time_now();
                predict_simple(e, f, all, n_total, B, mean);
                simple_s = mp_time_now() - a;
                a = mp_time_now();
                OK(mp_ensemble_predict_stream(e, f, all, n_total, 0, 0, B, mean2, NULL, &ss));
                stream_s = mp_time_now() - a;
            }
            int same = !memcmp(mean, mean2, sizeof(double) * (size_t)n_total);
            /* as molprop predict runs it: mp_ensemble_predict per chunk of
             * 65,536 rows (predict.c's device default), batches of B */
            double cli_s = 0;
            for (int rep = 0; rep < 2; rep++) {
                double a = mp_time_now();
                for (int32_t c0 = 0; c0 < n_total; c0 += 65536) {
                    int32_t cn = n_total - c0 < 65536 ? n_total - c0 : 65536;
                    OK(mp_ensemble_predict(e, f, all + c0, cn, 0, 0, B, mean2 + c0, NULL));
                }
                cli_s = mp_time_now() - a;
            }
            same = same && !memcmp(mean, mean2, sizeof(double) * (size_t)n_total);
            mp_ensemble_free(e);

            printf("%-5s %10.3f %10.3f %10.3f %10.3f %10.3f %10.1f %11.0f %11.0f %9.1f %9.1f%s\n",
                   precs[p], call_ms, fwd_ms, graph_ms, up8_ms, up1_ms,
                   up1_ms > 0 ? total / (up1_ms * 1e6) : 0.0, n_total / simple_s,
                   n_total / stream_s, 1e3 * ss.pack_s, 1e3 * ss.wait_s,
                   same ? "" : "  OUTPUTS DIFFER");
            printf("      predict in chunks of 65536 rows (as molprop predict): %.0f mol/s\n",
                   n_total / cli_s);
            printf("      forward alone: %.0f mol/s (graph %.0f; without the inference fusions "
                   "%.3f ms = %.0f mol/s, outputs apart by %.2g relative); call: %.0f mol/s; %zu bytes/batch "
                   "uploaded (%.0f B/mol)\n",
                   B / (fwd_ms * 1e-3), B / (graph_ms * 1e-3), unfused_ms,
                   B / (unfused_ms * 1e-3), fused_rel,
                   B / (call_ms * 1e-3), total, (double)total / B);
        }
        free(out);
        mp_graphs_free(&g);
    }
    free(all);
    free(mean);
    free(mean2);
    mp_features_free(f);
    return 0;
}
