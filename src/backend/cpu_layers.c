/*
 * cpu_layers.c - the cpu backend's ops for the layers of the training
 * options (ops.h: activations, undirected and atom messages, attentive
 * readout, batch normalization, gradient clipping), over float buffers.
 * Threads split rows, molecules, columns or fixed chunks, never a sum: each
 * output has one writer summing in a fixed order, and the reductions (the
 * PReLU slope's gradient, the gradient norm) add fixed-size chunks in double,
 * then the chunks in order, so every bit is the same for any thread count
 * (cpu_impl.h).
 */
#include "backend/cpu_impl.h"
#include "backend/formulas.h"
#include "backend/host_ops.h"

#include <math.h>

/* ===================================================================== */
/* Fixed-chunk sums                                                       */
/* ===================================================================== */

#define MAX_CHUNKS 1024

/* Elements per chunk of a reduction over n: a function of n alone. */
static size_t chunk_len(size_t n)
{
    size_t c = (n + MAX_CHUNKS - 1) / MAX_CHUNKS;
    return c < 4096 ? 4096 : c;
}

/* sum_i f(i) for i < n as the sum, in order, of the chunks' double sums.
 * TERM is an expression in i. */
#define CHUNKED_SUM(out, n, TERM)                                                   \
    do {                                                                            \
        size_t len_ = chunk_len(n), nc_ = ((n) + len_ - 1) / len_;                  \
        double part_[MAX_CHUNKS];                                                   \
        int nt = threads_for(n);                                                    \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                \
        for (size_t c_ = 0; c_ < nc_; c_++) {                                       \
            double s_ = 0;                                                          \
            size_t z_ = (c_ + 1) * len_ < (n) ? (c_ + 1) * len_ : (n);              \
            for (size_t i = c_ * len_; i < z_; i++)                                 \
                s_ += (TERM);                                                       \
            part_[c_] = s_;                                                         \
        }                                                                           \
        double t_ = 0;                                                              \
        for (size_t c_ = 0; c_ < nc_; c_++)                                         \
            t_ += part_[c_];                                                        \
        (out) = t_;                                                                 \
    } while (0)

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

static void cpu_act(mp_backend *b, void *yv, const void *xv, size_t n, mp_act_kind kind,
                    const void *param)
{
    float *y = yv;
    const float *x = xv;
    float sl = kind == MP_ACT_PRELU ? *(const float *)param : 0.0f;
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16,
        for (size_t i = a; i < z; i++) y[i] = mp_act_f_float(kind, x[i], sl));
}

static void cpu_act_backward(mp_backend *b, void *dxv, void *dparam, const void *xv,
                             const void *dyv, size_t n, mp_act_kind kind, const void *param,
                             int accumulate)
{
    float *dx = dxv;
    const float *x = xv, *dy = dyv;
    float sl = kind == MP_ACT_PRELU ? *(const float *)param : 0.0f;
    if (kind == MP_ACT_PRELU && dparam) {
        double s;
        CHUNKED_SUM(s, n, x[i] < 0 ? (double)x[i] * dy[i] : 0.0);
        *(float *)dparam += (float)s;
    }
    int nt = threads_for(n);
    if (accumulate)
        PARALLEL_RANGE(n, 16,
            for (size_t i = a; i < z; i++) dx[i] += mp_act_d_float(kind, x[i], sl) * dy[i]);
    else
        PARALLEL_RANGE(n, 16,
            for (size_t i = a; i < z; i++) dx[i] = mp_act_d_float(kind, x[i], sl) * dy[i]);
}

static void cpu_add(mp_backend *b, void *y, const void *x, size_t n)
{
    mp_cpu_add(y, x, n);
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

static void cpu_edge_mean(mp_backend *b, void *outv, const void *mv, int32_t n_edges, int h)
{
    float *out = outv;
    const float *m = mv;
    int nt = threads_for((size_t)n_edges * h);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int32_t e = 0; e < n_edges; e += 2) {
        float *o0 = out + (size_t)e * h, *o1 = o0 + h;
        const float *m0 = m + (size_t)e * h, *m1 = m0 + h;
        for (int j = 0; j < h; j++) {
            float v = (m0[j] + m1[j]) * 0.5f;
            o0[j] = v;
            o1[j] = v;
        }
    }
}

static void cpu_neighbor_sum(mp_backend *b, void *outv, const int32_t *in_start,
                             const int32_t *in_edge, const int32_t *edge_src, const void *xv,
                             int32_t n_atoms, int h)
{
    float *out = outv;
    const float *x = xv;
    int nt = threads_for((size_t)in_start[n_atoms > 0 ? n_atoms : 0] * h);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int32_t v = 0; v < n_atoms; v++) {
        float *o = out + (size_t)v * h;
        memset(o, 0, sizeof(float) * (size_t)h);
        for (int32_t k = in_start[v]; k < in_start[v + 1]; k++)
            row_add(o, x + (size_t)edge_src[in_edge[k]] * h, h);
    }
}

static void cpu_attn_pool(mp_backend *b, void *outv, int ldo, void *alphav,
                          const int32_t *mol_atom, const void *xv, const void *scorev,
                          int32_t n_mols, int h)
{
    float *out = outv, *alpha = alphav;
    const float *x = xv, *score = scorev;
    int nt = threads_for((size_t)mol_atom[n_mols > 0 ? n_mols : 0] * h);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        float mx = -INFINITY, z = 0, *o = out + (size_t)i * ldo;
        for (int32_t v = a0; v < a1; v++)
            mx = score[v] > mx ? score[v] : mx;
        for (int32_t v = a0; v < a1; v++)
            z += expf(score[v] - mx);
        memset(o, 0, sizeof(float) * (size_t)h);
        for (int32_t v = a0; v < a1; v++) {
            alpha[v] = expf(score[v] - mx) / z;
            row_axpy(o, alpha[v], x + (size_t)v * h, h);
        }
    }
}

static void cpu_attn_pool_backward(mp_backend *b, void *dxv, void *dscorev,
                                   const int32_t *mol_atom, const void *xv, const void *alphav,
                                   const void *wv, const void *doutv, int ldo, int32_t n_mols,
                                   int h)
{
    float *dx = dxv, *ds = dscorev;
    const float *x = xv, *alpha = alphav, *w = wv, *dout = doutv;
    int nt = threads_for((size_t)mol_atom[n_mols > 0 ? n_mols : 0] * h);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        const float *d = dout + (size_t)i * ldo;
        float sg = 0;
        for (int32_t v = a0; v < a1; v++) {
            const float *xr = x + (size_t)v * h;
            float g = 0;
            for (int j = 0; j < h; j++)
                g += d[j] * xr[j];
            ds[v] = g;
            sg += alpha[v] * g;
        }
        for (int32_t v = a0; v < a1; v++) {
            float al = alpha[v], s = al * (ds[v] - sg), *o = dx + (size_t)v * h;
            ds[v] = s;
            for (int j = 0; j < h; j++)
                o[j] = al * d[j] + s * w[j];
        }
    }
}

/* ===================================================================== */
/* Batch normalization                                                    */
/* ===================================================================== */

static void cpu_batch_norm(mp_backend *b, void *yv, int ldy, void *savev, const void *xv,
                           int ldx, const void *gammav, const void *betav, void *runningv,
                           int32_t n, int h, int training, double momentum, double eps)
{
    float *y = yv, *save = savev, *run = runningv;
    const float *x = xv, *gamma = gammav, *beta = betav;
    int nt = threads_for((size_t)n * h);
    PARALLEL_COLUMNS(h,
        for (int j = c0; j < c1; j++) {
            double mean, var;
            if (training) {
                double s = 0, q = 0;
                for (int32_t i = 0; i < n; i++)
                    s += x[(size_t)i * ldx + j];
                mean = n > 0 ? s / n : 0;
                for (int32_t i = 0; i < n; i++) {
                    double d = x[(size_t)i * ldx + j] - mean;
                    q += d * d;
                }
                var = n > 0 ? q / n : 0;
                save[j] = (float)mean;
                save[h + j] = (float)(1 / sqrt(var + eps));
                if (n >= 2) {
                    run[j] = (float)((1 - momentum) * run[j] + momentum * mean);
                    run[h + j] = (float)((1 - momentum) * run[h + j] + momentum * q / (n - 1));
                }
            } else {
                mean = run[j];
                var = run[h + j];
            }
            float inv = (float)(1 / sqrt(var + eps)), mf = (float)mean;
            for (int32_t i = 0; i < n; i++)
                y[(size_t)i * ldy + j] = (x[(size_t)i * ldx + j] - mf) * inv * gamma[j] + beta[j];
        });
}

static void cpu_batch_norm_backward(mp_backend *b, void *dxv, int ldx, void *dgammav,
                                    void *dbetav, const void *dyv, int ldy, const void *xv,
                                    int ldx_in, const void *savev, const void *gammav, int32_t n,
                                    int h)
{
    float *dx = dxv, *dgamma = dgammav, *dbeta = dbetav;
    const float *dy = dyv, *x = xv, *save = savev, *gamma = gammav;
    int nt = threads_for((size_t)n * h);
    PARALLEL_COLUMNS(h,
        for (int j = c0; j < c1; j++) {
            float mean = save[j], inv = save[h + j];
            double sd = 0, sdx = 0;
            for (int32_t i = 0; i < n; i++) {
                float g = dy[(size_t)i * ldy + j], xh = (x[(size_t)i * ldx_in + j] - mean) * inv;
                sd += g;
                sdx += (double)g * xh;
            }
            dgamma[j] += (float)sdx;
            dbeta[j] += (float)sd;
            float k = gamma[j] * inv / (float)n, fsd = (float)sd, fsdx = (float)sdx;
            for (int32_t i = 0; i < n; i++) {
                float g = dy[(size_t)i * ldy + j], xh = (x[(size_t)i * ldx_in + j] - mean) * inv;
                dx[(size_t)i * ldx + j] = k * ((float)n * g - fsd - xh * fsdx);
            }
        });
}

/* ===================================================================== */
/* Gradient clipping                                                      */
/* ===================================================================== */

static void cpu_clip_norm(mp_backend *b, void *gv, size_t n, double max_norm, void *norm)
{
    float *g = gv;
    double s;
    CHUNKED_SUM(s, n, (double)g[i] * g[i]);
    double nr = sqrt(s), c = max_norm / (nr + 1e-6);
    float f = (float)(c < 1 ? c : 1);
    *(float *)norm = (float)nr;
    int nt = threads_for(n);
    PARALLEL_RANGE(n, 16, for (size_t i = a; i < z; i++) g[i] *= f);
}

void mp_cpu_layer_ops(mp_backend *b)
{
    b->act = cpu_act;
    b->act_backward = cpu_act_backward;
    b->add = cpu_add;
    b->edge_mean = cpu_edge_mean;
    b->neighbor_sum = cpu_neighbor_sum;
    b->attn_pool = cpu_attn_pool;
    b->attn_pool_backward = cpu_attn_pool_backward;
    b->batch_norm = cpu_batch_norm;
    b->batch_norm_backward = cpu_batch_norm_backward;
    b->clip_norm = cpu_clip_norm;
}
