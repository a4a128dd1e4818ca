/*
 * ref_layers.c - the reference backend's ops for the layers of the training
 * options (ops.h: activations, undirected and atom messages, attentive
 * readout, batch normalization, gradient clipping): the plainest loops that
 * state each definition, in double, over buffers of the backend's element
 * type.  The oracle of the cpu and cuda versions (cpu_layers.c,
 * train_cuda.cu).
 */
#include "backend/formulas.h"
#include "backend/host_ops.h"
#include "backend/ref_impl.h"

static void ref_act(mp_backend *b, void *y, const void *x, size_t n, mp_act_kind kind,
                    const void *param)
{
    double a = kind == MP_ACT_PRELU ? LD(param, 0) : 0;
    for (size_t i = 0; i < n; i++)
        ST(y, i, mp_act_f_double(kind, LD(x, i), a));
}

static void ref_act_backward(mp_backend *b, void *dx, void *dparam, const void *x,
                             const void *dy, size_t n, mp_act_kind kind, const void *param,
                             int accumulate)
{
    double a = kind == MP_ACT_PRELU ? LD(param, 0) : 0, da = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = LD(x, i), g = LD(dy, i);
        if (kind == MP_ACT_PRELU && xi < 0)
            da += xi * g;
        double v = mp_act_d_double(kind, xi, a) * g;
        ST(dx, i, accumulate ? LD(dx, i) + v : v);
    }
    if (kind == MP_ACT_PRELU && dparam)
        ST(dparam, 0, LD(dparam, 0) + da);
}

static void ref_add(mp_backend *b, void *y, const void *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ST(y, i, LD(y, i) + LD(x, i));
}

static void ref_edge_mean(mp_backend *b, void *out, const void *m, int32_t n_edges, int h)
{
    for (int32_t e = 0; e < n_edges; e += 2)
        for (int j = 0; j < h; j++) {
            size_t p = (size_t)e * h + j, q = (size_t)(e + 1) * h + j;
            double v = (LD(m, p) + LD(m, q)) / 2;
            ST(out, p, v);
            ST(out, q, v);
        }
}

static void ref_neighbor_sum(mp_backend *b, void *out, const int32_t *in_start,
                             const int32_t *in_edge, const int32_t *edge_src, const void *x,
                             int32_t n_atoms, int h)
{
    for (int32_t v = 0; v < n_atoms; v++)
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int32_t k = in_start[v]; k < in_start[v + 1]; k++)
                s += LD(x, (size_t)edge_src[in_edge[k]] * h + j);
            ST(out, (size_t)v * h + j, s);
        }
}

static void ref_attn_pool(mp_backend *b, void *out, int ldo, void *alpha, const int32_t *mol_atom,
                          const void *x, const void *score, int32_t n_mols, int h)
{
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        double mx = -INFINITY, z = 0;
        for (int32_t v = a0; v < a1; v++)
            mx = LD(score, v) > mx ? LD(score, v) : mx;
        for (int32_t v = a0; v < a1; v++)
            z += exp(LD(score, v) - mx);
        for (int32_t v = a0; v < a1; v++)
            ST(alpha, v, exp(LD(score, v) - mx) / z);
        for (int j = 0; j < h; j++) {
            double s = 0;
            for (int32_t v = a0; v < a1; v++)
                s += LD(alpha, v) * LD(x, (size_t)v * h + j);
            ST(out, (size_t)i * ldo + j, s);
        }
    }
}

static void ref_attn_pool_backward(mp_backend *b, void *dx, void *dscore, const int32_t *mol_atom,
                                   const void *x, const void *alpha, const void *w,
                                   const void *dout, int ldo, int32_t n_mols, int h)
{
    for (int32_t i = 0; i < n_mols; i++) {
        int32_t a0 = mol_atom[i], a1 = mol_atom[i + 1];
        double sg = 0;
        for (int32_t v = a0; v < a1; v++) {
            double g = 0;
            for (int j = 0; j < h; j++)
                g += LD(dout, (size_t)i * ldo + j) * LD(x, (size_t)v * h + j);
            ST(dscore, v, g);
            sg += LD(alpha, v) * g;
        }
        for (int32_t v = a0; v < a1; v++) {
            double al = LD(alpha, v), ds = al * (LD(dscore, v) - sg);
            ST(dscore, v, ds);
            for (int j = 0; j < h; j++)
                ST(dx, (size_t)v * h + j, al * LD(dout, (size_t)i * ldo + j) + ds * LD(w, j));
        }
    }
}

static void ref_batch_norm(mp_backend *b, void *y, int ldy, void *save, const void *x, int ldx,
                           const void *gamma, const void *beta, void *running, int32_t n, int h,
                           int training, double momentum, double eps)
{
    for (int j = 0; j < h; j++) {
        double mean, var;
        if (training) {
            double s = 0, q = 0;
            for (int32_t i = 0; i < n; i++)
                s += LD(x, (size_t)i * ldx + j);
            mean = n > 0 ? s / n : 0;
            for (int32_t i = 0; i < n; i++) {
                double d = LD(x, (size_t)i * ldx + j) - mean;
                q += d * d;
            }
            var = n > 0 ? q / n : 0;
            ST(save, j, mean);
            ST(save, (size_t)h + j, 1 / sqrt(var + eps));
            if (n >= 2) {
                ST(running, j, (1 - momentum) * LD(running, j) + momentum * mean);
                ST(running, (size_t)h + j, (1 - momentum) * LD(running, (size_t)h + j) +
                                               momentum * q / (n - 1));
            }
        } else {
            mean = LD(running, j);
            var = LD(running, (size_t)h + j);
        }
        double inv = 1 / sqrt(var + eps), ga = LD(gamma, j), be = LD(beta, j);
        for (int32_t i = 0; i < n; i++)
            ST(y, (size_t)i * ldy + j, (LD(x, (size_t)i * ldx + j) - mean) * inv * ga + be);
    }
}

static void ref_batch_norm_backward(mp_backend *b, void *dx, int ldx, void *dgamma, void *dbeta,
                                    const void *dy, int ldy, const void *x, int ldx_in,
                                    const void *save, const void *gamma, int32_t n, int h)
{
    for (int j = 0; j < h; j++) {
        double mean = LD(save, j), inv = LD(save, (size_t)h + j), ga = LD(gamma, j);
        double sd = 0, sdx = 0;
        for (int32_t i = 0; i < n; i++) {
            double g = LD(dy, (size_t)i * ldy + j);
            double xh = (LD(x, (size_t)i * ldx_in + j) - mean) * inv;
            sd += g;
            sdx += g * xh;
        }
        ST(dgamma, j, LD(dgamma, j) + sdx);
        ST(dbeta, j, LD(dbeta, j) + sd);
        for (int32_t i = 0; i < n; i++) {
            double g = LD(dy, (size_t)i * ldy + j);
            double xh = (LD(x, (size_t)i * ldx_in + j) - mean) * inv;
            /* dxhat = g gamma: dx = inv / n (n dxhat - sum dxhat - xhat sum dxhat xhat) */
            ST(dx, (size_t)i * ldx + j, ga * inv / n * (n * g - sd - xh * sdx));
        }
    }
}

static void ref_clip_norm(mp_backend *b, void *g, size_t n, double max_norm, void *norm)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += LD(g, i) * LD(g, i);
    double nr = sqrt(s), c = max_norm / (nr + 1e-6);
    c = c < 1 ? c : 1;
    ST(norm, 0, nr);
    for (size_t i = 0; i < n; i++)
        ST(g, i, LD(g, i) * c);
}

void mp_ref_layer_ops(mp_backend *b)
{
    b->act = ref_act;
    b->act_backward = ref_act_backward;
    b->add = ref_add;
    b->edge_mean = ref_edge_mean;
    b->neighbor_sum = ref_neighbor_sum;
    b->attn_pool = ref_attn_pool;
    b->attn_pool_backward = ref_attn_pool_backward;
    b->batch_norm = ref_batch_norm;
    b->batch_norm_backward = ref_batch_norm_backward;
    b->clip_norm = ref_clip_norm;
}
