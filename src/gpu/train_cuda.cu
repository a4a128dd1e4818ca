/*
 * train_cuda.cu - the cuda backend's ops for the layers of the training
 * options (ops.h: activations, undirected and atom messages, attentive
 * readout, batch normalization, gradient clipping) and the losses beyond
 * mse and bce.  Every operand is fp32 (the element type); the mathematics
 * is formulas.h's, the same text the host backends compile.
 *
 * These are small ops next to the D-MPNN's products, so the kernels are
 * plain: grid-stride loops with one writer per output, one thread per
 * molecule or column where an output sums over a segment, and one block
 * reducing by a fixed tree where a result sums over everything (the loss,
 * the PReLU slope's gradient, the gradient norm).  No atomics: every result
 * is the same bits on every run.  Nothing synchronizes with the host, so
 * all of it can be captured in a CUDA graph.
 */
#include "gpu/cuda_ctx.cuh"

#include "backend/formulas.h"

#define RED_THREADS 256

/* v[0] = the sum of v[0 .. RED_THREADS) by a fixed tree (every thread of the
 * block calls it; v shared and written before). */
template <typename T> __device__ __forceinline__ void block_sum(T *v, int t)
{
    __syncthreads();
    for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
        if (t < w)
            v[t] += v[t + w];
        __syncthreads();
    }
}

/* ===================================================================== */
/* Activations                                                            */
/* ===================================================================== */

__global__ void k_act(float *y, const float *x, size_t n, int kind, const float *param)
{
    pdl_enter();
    float a = kind == MP_ACT_PRELU ? param[0] : 0.0f;
    for (size_t i = gtid(); i < n; i += gstride())
        y[i] = mp_act_f_float(kind, x[i], a);
}

__global__ void k_act_backward(float *dx, const float *x, const float *dy, size_t n, int kind,
                               const float *param, int accumulate)
{
    pdl_enter();
    float a = kind == MP_ACT_PRELU ? param[0] : 0.0f;
    for (size_t i = gtid(); i < n; i += gstride()) {
        float v = mp_act_d_float(kind, x[i], a) * dy[i];
        dx[i] = accumulate ? dx[i] + v : v;
    }
}

/* dparam[0] += sum min(x, 0) dy, one block.  Runs before k_act_backward,
 * which may overwrite dy (dx may alias it). */
__global__ void __launch_bounds__(RED_THREADS)
k_prelu_grad(float *dparam, const float *x, const float *dy, size_t n)
{
    pdl_enter();
    __shared__ double s[RED_THREADS];
    const int t = threadIdx.x;
    double v = 0;
    for (size_t i = t; i < n; i += RED_THREADS)
        if (x[i] < 0)
            v += (double)x[i] * dy[i];
    s[t] = v;
    block_sum(s, t);
    if (t == 0)
        dparam[0] += (float)s[0];
}

static void cu_act(mp_backend *b, void *y, const void *x, size_t n, mp_act_kind kind,
                   const void *param)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    launch(c, c->stream, k_act, grid_for(c, n, THREADS), THREADS, 0, (float *)y, (const float *)x, n,
                                                              (int)kind, (const float *)param);
    LAUNCHED(c, "k_act");
}

static void cu_act_backward(mp_backend *b, void *dx, void *dparam, const void *x, const void *dy,
                            size_t n, mp_act_kind kind, const void *param, int accumulate)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    if (kind == MP_ACT_PRELU && dparam) {
        launch(c, c->stream, k_prelu_grad, 1, RED_THREADS, 0, (float *)dparam, (const float *)x,
                                                       (const float *)dy, n);
        LAUNCHED(c, "k_prelu_grad");
    }
    launch(c, c->stream, k_act_backward, grid_for(c, n, THREADS), THREADS, 0,
        (float *)dx, (const float *)x, (const float *)dy, n, (int)kind, (const float *)param,
        accumulate);
    LAUNCHED(c, "k_act_backward");
}

__global__ void k_add(float *y, const float *x, size_t n)
{
    pdl_enter();
    for (size_t i = gtid(); i < n; i += gstride())
        y[i] += x[i];
}

static void cu_add(mp_backend *b, void *y, const void *x, size_t n)
{
    gpu_ctx *c = CTX(b);
    if (!n || !usable(c))
        return;
    launch(c, c->stream, k_add, grid_for(c, n, THREADS), THREADS, 0, (float *)y, (const float *)x, n);
    LAUNCHED(c, "k_add");
}

/* ===================================================================== */
/* Graph                                                                  */
/* ===================================================================== */

__global__ void k_edge_mean(float *out, const float *m, size_t pairs, int h)
{
    pdl_enter();
    for (size_t i = gtid(); i < pairs * (size_t)h; i += gstride()) {
        size_t e = 2 * (i / (size_t)h), j = i % (size_t)h;
        size_t p = e * h + j, q = p + h;
        float v = (m[p] + m[q]) * 0.5f;
        out[p] = v;
        out[q] = v;
    }
}

static void cu_edge_mean(mp_backend *b, void *out, const void *m, int32_t n_edges, int h)
{
    gpu_ctx *c = CTX(b);
    size_t pairs = n_edges > 0 ? (size_t)n_edges / 2 : 0;
    if (!pairs || h <= 0 || !usable(c))
        return;
    launch(c, c->stream, k_edge_mean, grid_for(c, pairs * h, THREADS), THREADS, 0,
        (float *)out, (const float *)m, pairs, h);
    LAUNCHED(c, "k_edge_mean");
}

__global__ void k_neighbor_sum(float *out, const int32_t *in_start, const int32_t *in_edge,
                               const int32_t *edge_src, const float *x, int32_t n_atoms, int h)
{
    pdl_enter();
    for (size_t i = gtid(); i < (size_t)n_atoms * h; i += gstride()) {
        int32_t v = (int32_t)(i / (size_t)h);
        int j = (int)(i % (size_t)h);
        float s = 0;
        for (int32_t k = in_start[v]; k < in_start[v + 1]; k++)
            s += x[(size_t)edge_src[in_edge[k]] * h + j];
        out[i] = s;
    }
}

static void cu_neighbor_sum(mp_backend *b, void *out, const int32_t *in_start,
                            const int32_t *in_edge, const int32_t *edge_src, const void *x,
                            int32_t n_atoms, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_atoms <= 0 || h <= 0 || !usable(c))
        return;
    launch(c, c->stream, k_neighbor_sum, grid_for(c, (size_t)n_atoms * h, THREADS), THREADS, 0,
        (float *)out, in_start, in_edge, edge_src, (const float *)x, n_atoms, h);
    LAUNCHED(c, "k_neighbor_sum");
}

/* ===================================================================== */
/* Attentive readout                                                      */
/* ===================================================================== */

/* alpha over each molecule's atoms: one thread per molecule. */
__global__ void k_attn_alpha(float *alpha, const int32_t *mol_atom, const float *score,
                             int32_t n_mols)
{
    pdl_enter();
    for (size_t i = gtid(); i < (size_t)n_mols; i += gstride()) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        float mx = -INFINITY, z = 0;
        for (int32_t v = a0; v < a1; v++)
            mx = score[v] > mx ? score[v] : mx;
        for (int32_t v = a0; v < a1; v++)
            z += expf(score[v] - mx);
        for (int32_t v = a0; v < a1; v++)
            alpha[v] = expf(score[v] - mx) / z;
    }
}

/* out[i, j] = sum_v alpha[v] x[v, j]: one thread per (molecule, column). */
__global__ void k_attn_sum(float *out, int ldo, const int32_t *mol_atom, const float *alpha,
                           const float *x, int32_t n_mols, int h)
{
    pdl_enter();
    for (size_t q = gtid(); q < (size_t)n_mols * h; q += gstride()) {
        size_t i = q / (size_t)h, j = q % (size_t)h;
        float s = 0;
        for (int32_t v = mol_atom[i]; v < mol_atom[i + 1]; v++)
            s += alpha[v] * x[(size_t)v * h + j];
        out[i * ldo + j] = s;
    }
}

static void cu_attn_pool(mp_backend *b, void *out, int ldo, void *alpha, const int32_t *mol_atom,
                         const void *x, const void *score, int32_t n_mols, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_mols <= 0 || h <= 0 || !usable(c))
        return;
    launch(c, c->stream, k_attn_alpha, grid_for(c, (size_t)n_mols, THREADS), THREADS, 0,
        (float *)alpha, mol_atom, (const float *)score, n_mols);
    LAUNCHED(c, "k_attn_alpha");
    launch(c, c->stream, k_attn_sum, grid_for(c, (size_t)n_mols * h, THREADS), THREADS, 0,
        (float *)out, ldo, mol_atom, (const float *)alpha, (const float *)x, n_mols, h);
    LAUNCHED(c, "k_attn_sum");
}

/* dscore for every atom: one thread per molecule. */
__global__ void k_attn_dscore(float *ds, const int32_t *mol_atom, const float *x,
                              const float *alpha, const float *dout, int ldo, int32_t n_mols,
                              int h)
{
    pdl_enter();
    for (size_t i = gtid(); i < (size_t)n_mols; i += gstride()) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        const float *d = dout + i * ldo;
        float sg = 0;
        for (int32_t v = a0; v < a1; v++) {
            const float *xr = x + (size_t)v * h;
            float g = 0;
            for (int j = 0; j < h; j++)
                g += d[j] * xr[j];
            ds[v] = g;
            sg += alpha[v] * g;
        }
        for (int32_t v = a0; v < a1; v++)
            ds[v] = alpha[v] * (ds[v] - sg);
    }
}

/* dx[v, j] = alpha[v] dout[i, j] + ds[v] w[j]: one thread per (molecule, column). */
__global__ void k_attn_dx(float *dx, const int32_t *mol_atom, const float *alpha, const float *ds,
                          const float *w, const float *dout, int ldo, int32_t n_mols, int h)
{
    pdl_enter();
    for (size_t q = gtid(); q < (size_t)n_mols * h; q += gstride()) {
        size_t i = q / (size_t)h, j = q % (size_t)h;
        float d = dout[i * ldo + j], wj = w[j];
        for (int32_t v = mol_atom[i]; v < mol_atom[i + 1]; v++)
            dx[(size_t)v * h + j] = alpha[v] * d + ds[v] * wj;
    }
}

static void cu_attn_pool_backward(mp_backend *b, void *dx, void *dscore, const int32_t *mol_atom,
                                  const void *x, const void *alpha, const void *w,
                                  const void *dout, int ldo, int32_t n_mols, int h)
{
    gpu_ctx *c = CTX(b);
    if (n_mols <= 0 || h <= 0 || !usable(c))
        return;
    launch(c, c->stream, k_attn_dscore, grid_for(c, (size_t)n_mols, THREADS), THREADS, 0,
        (float *)dscore, mol_atom, (const float *)x, (const float *)alpha, (const float *)dout,
        ldo, n_mols, h);
    LAUNCHED(c, "k_attn_dscore");
    launch(c, c->stream, k_attn_dx, grid_for(c, (size_t)n_mols * h, THREADS), THREADS, 0,
        (float *)dx, mol_atom, (const float *)alpha, (const float *)dscore, (const float *)w,
        (const float *)dout, ldo, n_mols, h);
    LAUNCHED(c, "k_attn_dx");
}

/* ===================================================================== */
/* Batch normalization: one thread per column                             */
/* ===================================================================== */

__global__ void k_batch_norm(float *y, int ldy, float *save, const float *x, int ldx,
                             const float *gamma, const float *beta, float *run, int32_t n, int h,
                             int training, double momentum, double eps)
{
    pdl_enter();
    for (size_t j = gtid(); j < (size_t)h; j += gstride()) {
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
    }
}

__global__ void k_batch_norm_backward(float *dx, int ldx, float *dgamma, float *dbeta,
                                      const float *dy, int ldy, const float *x, int ldx_in,
                                      const float *save, const float *gamma, int32_t n, int h)
{
    pdl_enter();
    for (size_t j = gtid(); j < (size_t)h; j += gstride()) {
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
    }
}

static void cu_batch_norm(mp_backend *b, void *y, int ldy, void *save, const void *x, int ldx,
                          const void *gamma, const void *beta, void *running, int32_t n, int h,
                          int training, double momentum, double eps)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    launch(c, c->stream, k_batch_norm, grid_for(c, (size_t)h, THREADS), THREADS, 0,
        (float *)y, ldy, (float *)save, (const float *)x, ldx, (const float *)gamma,
        (const float *)beta, (float *)running, n, h, training, momentum, eps);
    LAUNCHED(c, "k_batch_norm");
}

static void cu_batch_norm_backward(mp_backend *b, void *dx, int ldx, void *dgamma, void *dbeta,
                                   const void *dy, int ldy, const void *x, int ldx_in,
                                   const void *save, const void *gamma, int32_t n, int h)
{
    gpu_ctx *c = CTX(b);
    if (h <= 0 || !usable(c))
        return;
    launch(c, c->stream, k_batch_norm_backward, grid_for(c, (size_t)h, THREADS), THREADS, 0,
        (float *)dx, ldx, (float *)dgamma, (float *)dbeta, (const float *)dy, ldy,
        (const float *)x, ldx_in, (const float *)save, (const float *)gamma, n, h);
    LAUNCHED(c, "k_batch_norm_backward");
}

/* ===================================================================== */
/* Gradient clipping                                                      */
/* ===================================================================== */

__global__ void __launch_bounds__(RED_THREADS) k_grad_norm(float *norm, const float *g, size_t n)
{
    pdl_enter();
    __shared__ double s[RED_THREADS];
    const int t = threadIdx.x;
    double v = 0;
    for (size_t i = t; i < n; i += RED_THREADS)
        v += (double)g[i] * g[i];
    s[t] = v;
    block_sum(s, t);
    if (t == 0)
        norm[0] = (float)sqrt(s[0]);
}

__global__ void k_clip(float *g, size_t n, double max_norm, const float *norm)
{
    pdl_enter();
    double f = max_norm / ((double)norm[0] + 1e-6);
    float k = (float)(f < 1 ? f : 1);
    for (size_t i = gtid(); i < n; i += gstride())
        g[i] *= k;
}

static void cu_clip_norm(mp_backend *b, void *g, size_t n, double max_norm, void *norm)
{
    gpu_ctx *c = CTX(b);
    if (!usable(c))
        return;
    launch(c, c->stream, k_grad_norm, 1, RED_THREADS, 0, (float *)norm, (const float *)g, n);
    LAUNCHED(c, "k_grad_norm");
    if (!n)
        return;
    launch(c, c->stream, k_clip, grid_for(c, n, THREADS), THREADS, 0, (float *)g, n, max_norm,
                                                               (const float *)norm);
    LAUNCHED(c, "k_clip");
}

/* ===================================================================== */
/* Losses beyond mse and bce                                              */
/* ===================================================================== */

__device__ __forceinline__ float pair_w(const float *sw, const float *tw, size_t i, int t)
{
    return (sw ? sw[i] : 1.0f) * (tw ? tw[t] : 1.0f);
}

/* The elementwise kinds (rmse too: two passes): one block, the pairs
 * strided over its threads, the sums by the fixed tree. */
__global__ void __launch_bounds__(RED_THREADS)
k_loss_elem(float *loss, float *dy, const float *y, const float *target, const uint8_t *mask,
            int32_t n, mp_loss_par par, const float *sw, const float *tw, const uint8_t *ineq)
{
    pdl_enter();
    __shared__ double s[RED_THREADS];
    __shared__ unsigned long long cnt[RED_THREADS];
    const int t = threadIdx.x, T = par.n_tasks, C = par.n_classes;
    const int W = mp_loss_width((mp_loss_kind)par.kind, C);
    const size_t pairs = (size_t)n * T, row = (size_t)T * W;
    unsigned long long k = 0;
    for (size_t i = t; i < pairs; i += RED_THREADS)
        k += mask[i] != 0;
    cnt[t] = k;
    block_sum(cnt, t);
    const unsigned long long count = cnt[0];
    const double inv = count ? 1.0 / (double)count : 0.0;
    const int rmse = mp_loss_is_rmse(par.kind);
    double v[MP_LOSS_MAX_CLASSES], g[MP_LOSS_MAX_CLASSES], scale = inv, total = 0;
    for (int pass = rmse ? 0 : 1; pass < 2; pass++) {
        if (pass == 1 && rmse) {
            double r = sqrt(total * inv);
            scale = r > 0 ? inv * 0.5 / r : 0;
        }
        double acc = 0;
        for (size_t p = t; p < pairs; p += RED_THREADS) {
            size_t i = p / T, base = i * row;
            int tk = (int)(p % T);
            if (!mask[p]) {
                for (int q = 0; pass && q < W; q++)
                    dy[base + mp_loss_col((mp_loss_kind)par.kind, T, C, tk, q)] = 0.0f;
                continue;
            }
            for (int q = 0; q < W; q++)
                v[q] = y[base + mp_loss_col((mp_loss_kind)par.kind, T, C, tk, q)];
            double w = pair_w(sw, tw, i, tk);
            double l = mp_loss_elem(&par, v, target[p], ineq ? ineq[p] : 0, g);
            acc += l * w;
            for (int q = 0; pass && q < W; q++)
                dy[base + mp_loss_col((mp_loss_kind)par.kind, T, C, tk, q)] =
                    (float)(g[q] * w * scale);
        }
        s[t] = acc;
        block_sum(s, t);
        total = s[0];
        __syncthreads();
    }
    if (t == 0)
        loss[0] = !count ? 0.0f : (float)(rmse ? sqrt(total * inv) : total * inv);
}

/* The spectral losses (sid, wasserstein): one block; a thread takes a row
 * (a spectrum) at a time through formulas.h's mp_loss_spectral_row, the
 * rows' losses summed by the fixed tree. */
__global__ void __launch_bounds__(RED_THREADS)
k_loss_spectral(float *loss, float *dy, const float *y, const float *target, const uint8_t *mask,
                int32_t n, mp_loss_par par, const float *sw, const float *tw)
{
    pdl_enter();
    __shared__ double s[RED_THREADS];
    __shared__ unsigned long long cnt[RED_THREADS];
    const int t = threadIdx.x, T = par.n_tasks;
    unsigned long long k = 0;
    for (size_t i = t; i < (size_t)n * T; i += RED_THREADS)
        k += mask[i] != 0;
    cnt[t] = k;
    block_sum(cnt, t);
    const unsigned long long count = cnt[0];
    const double inv = count ? 1.0 / (double)count : 0.0;
    double acc = 0;
    for (int32_t i = t; i < n; i += RED_THREADS) {
        size_t at = (size_t)i * T;
        acc += mp_loss_spectral_row(&par, y + at, target + at, mask + at, 0,
                                    sw ? (double)sw[i] : 1.0, tw, inv, dy + at);
    }
    s[t] = acc;
    block_sum(s, t);
    if (t == 0)
        loss[0] = !count ? 0.0f : (float)(s[0] * inv);
}

/* Chemprop v2's soft binary MCC: per task the four weighted sums by the
 * tree, then each labelled row's gradient. */
__global__ void __launch_bounds__(RED_THREADS)
k_loss_mcc_binary(float *loss, float *dy, const float *y, const float *target,
                  const uint8_t *mask, int32_t n, int T, const float *sw, const float *tw)
{
    pdl_enter();
    __shared__ double s[4][RED_THREADS];
    __shared__ unsigned long long cnt[RED_THREADS];
    const int t = threadIdx.x;
    unsigned long long k = 0;
    for (size_t i = t; i < (size_t)n * T; i += RED_THREADS) {
        k += mask[i] != 0;
        dy[i] = 0.0f;
    }
    cnt[t] = k;
    block_sum(cnt, t);
    const unsigned long long count = cnt[0];
    double mcc_sum = 0, tw_sum = 0;
    for (int task = 0; count && task < T; task++) {
        double a[4] = { 0, 0, 0, 0 };
        for (int32_t i = t; i < n; i += RED_THREADS) {
            size_t at = (size_t)i * T + task;
            if (!mask[at])
                continue;
            double w = sw ? sw[i] : 1.0, p = mp_sigmoid(y[at]), lab = target[at];
            a[0] += lab * p * w;
            a[1] += (1 - lab) * p * w;
            a[2] += (1 - lab) * (1 - p) * w;
            a[3] += lab * (1 - p) * w;
        }
        for (int q = 0; q < 4; q++)
            s[q][t] = a[q];
        for (int q = 0; q < 4; q++)
            block_sum(s[q], t);
        double d1, d0, mcc = mp_mcc_binary(s[0][0], s[1][0], s[2][0], s[3][0], &d1, &d0);
        double twt = tw ? tw[task] : 1.0;
        mcc_sum += twt * mcc;
        tw_sum += twt;
        for (int32_t i = t; i < n; i += RED_THREADS) {
            size_t at = (size_t)i * T + task;
            if (!mask[at])
                continue;
            double w = sw ? sw[i] : 1.0, p = mp_sigmoid(y[at]);
            double dm = target[at] > 0.5f ? d1 : d0;
            dy[at] = (float)(-twt / T * dm * w * p * (1 - p));
        }
        __syncthreads();
    }
    if (t == 0)
        loss[0] = count ? (float)((tw_sum - mcc_sum) / T) : 0.0f;
}

/* Chemprop v2's multiclass MCC: counts of argmax predictions, no gradient;
 * the dy zeroed in parallel, the counts by thread 0 in row order. */
__global__ void __launch_bounds__(RED_THREADS)
k_loss_mcc_multi(float *loss, float *dy, const float *y, const float *target,
                 const uint8_t *mask, int32_t n, int T, int C, const float *sw, const float *tw)
{
    pdl_enter();
    const int t = threadIdx.x;
    for (size_t i = t; i < (size_t)n * T * C; i += RED_THREADS)
        dy[i] = 0.0f;
    if (t != 0)
        return;
    size_t count = 0;
    for (size_t i = 0; i < (size_t)n * T; i++)
        count += mask[i] != 0;
    double sum = 0, tw_sum = 0;
    double v[MP_LOSS_MAX_CLASSES], pc[MP_LOSS_MAX_CLASSES], tc[MP_LOSS_MAX_CLASSES];
    for (int task = 0; count && task < T; task++) {
        double correct = 0, tot = 0;
        for (int c = 0; c < C; c++)
            pc[c] = tc[c] = 0;
        for (int32_t i = 0; i < n; i++) {
            size_t at = (size_t)i * T + task;
            if (!mask[at])
                continue;
            double w = sw ? sw[i] : 1.0;
            for (int c = 0; c < C; c++)
                v[c] = y[(size_t)i * T * C + (size_t)task * C + c];
            int pred = mp_argmax(v, C), lab = (int)target[at];
            pc[pred] += w;
            tc[lab] += w;
            correct += pred == lab ? w : 0;
            tot += w;
        }
        sum += (tw ? tw[task] : 1.0) * mp_mcc_multiclass(pc, tc, C, correct, tot);
        tw_sum += tw ? tw[task] : 1.0;
    }
    loss[0] = count ? (float)((tw_sum - sum) / T) : 0.0f;
}

void mp_cu_loss_ext(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                    const uint8_t *mask, int32_t n, const mp_loss_spec *spec)
{
    gpu_ctx *c = CTX(b);
    if (!usable(c))
        return;
    const float *sw = (const float *)spec->sample_weight, *tw = (const float *)spec->task_weight;
    int32_t nn = n > 0 ? n : 0;
    if (spec->kind == MP_LOSS_BINARY_MCC) {
        launch(c, c->stream, k_loss_mcc_binary, 1, RED_THREADS, 0,
            (float *)loss, (float *)dy, (const float *)y, (const float *)target, mask, nn,
            spec->n_tasks, sw, tw);
        LAUNCHED(c, "k_loss_mcc_binary");
    } else if (spec->kind == MP_LOSS_MULTICLASS_MCC) {
        launch(c, c->stream, k_loss_mcc_multi, 1, RED_THREADS, 0,
            (float *)loss, (float *)dy, (const float *)y, (const float *)target, mask, nn,
            spec->n_tasks, spec->n_classes, sw, tw);
        LAUNCHED(c, "k_loss_mcc_multi");
    } else if (mp_loss_is_spectral(spec->kind)) {
        launch(c, c->stream, k_loss_spectral, 1, RED_THREADS, 0,
            (float *)loss, (float *)dy, (const float *)y, (const float *)target, mask, nn,
            mp_loss_par_of(spec), sw, tw);
        LAUNCHED(c, "k_loss_spectral");
    } else {
        launch(c, c->stream, k_loss_elem, 1, RED_THREADS, 0,
            (float *)loss, (float *)dy, (const float *)y, (const float *)target, mask, nn,
            mp_loss_par_of(spec), sw, tw, spec->ineq);
        LAUNCHED(c, "k_loss_elem");
    }
}

void mp_cu_layer_ops(mp_backend *b)
{
    b->act = cu_act;
    b->act_backward = cu_act_backward;
    b->add = cu_add;
    b->edge_mean = cu_edge_mean;
    b->neighbor_sum = cu_neighbor_sum;
    b->attn_pool = cu_attn_pool;
    b->attn_pool_backward = cu_attn_pool_backward;
    b->batch_norm = cu_batch_norm;
    b->batch_norm_backward = cu_batch_norm_backward;
    b->clip_norm = cu_clip_norm;
}
