/*
 * formulas.h - the per-element mathematics of the activations and the
 * losses (ops.h: mp_act_kind, mp_loss_kind), written once for every backend:
 * plain C for cpu.c / ref.c / loss_host.c, and the same text compiled by
 * nvcc as __host__ __device__ functions for the cuda backend
 * (train_cuda.cu).  Only functions both sides have are used (exp, log,
 * log1p, expm1, tanh, erf, lgamma, sqrt, fabs); the digamma and trigamma
 * functions the Dirichlet and evidential gradients need are here.
 *
 * Activations come in a float form (cpu, cuda: the element type) and a
 * double form (ref); losses are computed in double everywhere (they are a
 * few values per molecule).  Definitions follow PyTorch, as Chemprop uses
 * it: softplus(x) = log(1 + e^x), x itself above 20 (torch's threshold);
 * LeakyReLU's slope 0.1 (Chemprop's); SELU's constants; GELU's erf form.
 */
#ifndef MP_FORMULAS_H
#define MP_FORMULAS_H

#include "backend/ops.h"

#include <math.h>

#ifdef __CUDACC__
#define MP_HD __host__ __device__ __forceinline__
#else
#define MP_HD static inline
#endif

#define MP_LEAKY_SLOPE 0.1
#define MP_SELU_SCALE 1.0507009873554804934193349852946
#define MP_SELU_ALPHA 1.6732632423543772848170429916717
#define MP_INV_SQRT2 0.70710678118654752440084436210485
#define MP_INV_SQRT2PI 0.39894228040143267793994605993438
#define MP_PI 3.14159265358979323846264338327950

/* ===================================================================== */
/* Activations                                                            */
/* ===================================================================== */

/* f(x) and f'(x) for kind, a = PReLU's slope; T the arithmetic's type. */
#define MP_ACT_FUNCS(T, SUF, EXP, EXPM1, TANH, ERF)                                   \
    MP_HD T mp_act_f##SUF(int kind, T x, T a)                                         \
    {                                                                                 \
        switch (kind) {                                                               \
        case MP_ACT_LEAKYRELU: return x > 0 ? x : x * (T)MP_LEAKY_SLOPE;              \
        case MP_ACT_PRELU:     return x > 0 ? x : x * a;                              \
        case MP_ACT_ELU:       return x > 0 ? x : EXPM1(x);                           \
        case MP_ACT_SELU:      return (T)MP_SELU_SCALE *                              \
                                      (x > 0 ? x : (T)MP_SELU_ALPHA * EXPM1(x));      \
        case MP_ACT_TANH:      return TANH(x);                                        \
        case MP_ACT_GELU:      return (T)0.5 * x * ((T)1 + ERF(x * (T)MP_INV_SQRT2)); \
        default:               return x > 0 ? x : (T)0;                               \
        }                                                                             \
    }                                                                                 \
    MP_HD T mp_act_d##SUF(int kind, T x, T a)                                         \
    {                                                                                 \
        switch (kind) {                                                               \
        case MP_ACT_LEAKYRELU: return x > 0 ? (T)1 : (T)MP_LEAKY_SLOPE;               \
        case MP_ACT_PRELU:     return x > 0 ? (T)1 : a;                               \
        case MP_ACT_ELU:       return x > 0 ? (T)1 : EXP(x);                          \
        case MP_ACT_SELU:      return (T)MP_SELU_SCALE *                              \
                                      (x > 0 ? (T)1 : (T)MP_SELU_ALPHA * EXP(x));     \
        case MP_ACT_TANH: {                                                           \
            T t = TANH(x);                                                            \
            return (T)1 - t * t;                                                      \
        }                                                                             \
        case MP_ACT_GELU:                                                             \
            return (T)0.5 * ((T)1 + ERF(x * (T)MP_INV_SQRT2)) +                       \
                   x * (T)MP_INV_SQRT2PI * EXP((T)-0.5 * x * x);                      \
        default:               return x > 0 ? (T)1 : (T)0;                            \
        }                                                                             \
    }

MP_ACT_FUNCS(float, _float, expf, expm1f, tanhf, erff)
MP_ACT_FUNCS(double, _double, exp, expm1, tanh, erf)

/* ===================================================================== */
/* Special functions                                                      */
/* ===================================================================== */

MP_HD double mp_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
/* softplus'(x): the logistic function (1 above the threshold, as torch). */
MP_HD double mp_softplus_d(double x)
{
    if (x > 20)
        return 1;
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}
MP_HD double mp_sigmoid(double x)
{
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

/* digamma(x), x > 0: the recurrence up to x >= 10, then the asymptotic
 * series (error < 1e-15 there). */
MP_HD double mp_digamma(double x)
{
    double r = 0;
    while (x < 10) {
        r -= 1 / x;
        x += 1;
    }
    double f = 1 / (x * x);
    return r + log(x) - 0.5 / x -
           f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}

/* trigamma(x), x > 0, the same way. */
MP_HD double mp_trigamma(double x)
{
    double r = 0;
    while (x < 10) {
        r += 1 / (x * x);
        x += 1;
    }
    double f = 1 / (x * x);
    return r + 1 / x + f / 2 +
           f / x * (1.0 / 6 - f * (1.0 / 30 - f * (1.0 / 42 - f * (1.0 / 30 - f * (5.0 / 66)))));
}

/* ===================================================================== */
/* Losses                                                                 */
/* ===================================================================== */

/* The scalar parameters of a loss (mp_loss_spec without its buffers), small
 * enough to pass to a kernel by value. */
typedef struct {
    int    kind, n_tasks, n_classes;
    double lambda, eps, alpha;
    int    spectra_act;
    double floor;
} mp_loss_par;

static inline mp_loss_par mp_loss_par_of(const mp_loss_spec *s)
{
    mp_loss_par p = { (int)s->kind, s->n_tasks, s->n_classes, s->lambda, s->eps, s->alpha,
                      s->spectra_act, s->floor };
    return p;
}

/* 1 for the spectral losses (reduced per row by mp_loss_spectral_row). */
MP_HD int mp_loss_is_spectral(int kind)
{
    return kind == MP_LOSS_SID || kind == MP_LOSS_WASSERSTEIN;
}

/* 1 for the losses reduced over the batch by mp_loss_mcc_* (not per element). */
MP_HD int mp_loss_is_mcc(int kind)
{
    return kind == MP_LOSS_BINARY_MCC || kind == MP_LOSS_MULTICLASS_MCC;
}
/* 1 for the losses whose batch value is the square root of the mean. */
MP_HD int mp_loss_is_rmse(int kind)
{
    return kind == MP_LOSS_RMSE || kind == MP_LOSS_BOUNDED_RMSE;
}

/* The pinball loss of quantile q at error e (target - prediction), and its
 * derivative in e (at a tie the mean of the two sides, as torch's amax). */
MP_HD double mp_pinball(double q, double e) { return e > 0 ? q * e : (q - 1) * e; }
MP_HD double mp_pinball_d(double q, double e) { return e > 0 ? q : e < 0 ? q - 1 : q - 0.5; }

/*
 * The loss of one labelled (molecule, task) pair of an elementwise kind
 * (every kind but the mcc ones; rmse returns its squared error): y[0 ..
 * width) its raw outputs in mp_loss_col order, t its label, ineq its
 * MP_INEQ_* flags.  g[0 .. width) gets d l / d y.
 */
MP_HD double mp_loss_elem(const mp_loss_par *p, const double *y, double t, int ineq, double *g)
{
    switch (p->kind) {
    case MP_LOSS_BCE: {
        double x = y[0];
        g[0] = mp_sigmoid(x) - t;
        return (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
    }
    case MP_LOSS_MAE: case MP_LOSS_BOUNDED_MAE:
    case MP_LOSS_MSE: case MP_LOSS_RMSE: case MP_LOSS_BOUNDED_MSE: case MP_LOSS_BOUNDED_RMSE: {
        double x = y[0];
        int bounded = p->kind == MP_LOSS_BOUNDED_MSE || p->kind == MP_LOSS_BOUNDED_MAE ||
                      p->kind == MP_LOSS_BOUNDED_RMSE;
        /* the prediction on the right side of an inequality counts as the
         * label itself (Chemprop's torch.where: no gradient) */
        if (bounded && (((ineq & MP_INEQ_LT) && x < t) || ((ineq & MP_INEQ_GT) && x > t))) {
            g[0] = 0;
            return 0;
        }
        double d = x - t;
        if (p->kind == MP_LOSS_MAE || p->kind == MP_LOSS_BOUNDED_MAE) {
            g[0] = d > 0 ? 1 : d < 0 ? -1 : 0;
            return fabs(d);
        }
        g[0] = 2 * d;
        return d * d;
    }
    case MP_LOSS_MVE: {
        /* Nix & Weigend: (mu - t)^2 / (2 var) + log(2 pi var) / 2 */
        double mu = y[0], var = mp_softplus(y[1]), d = mu - t;
        g[0] = d / var;
        g[1] = (-d * d / (2 * var * var) + 0.5 / var) * mp_softplus_d(y[1]);
        return d * d / (2 * var) + 0.5 * log(2 * MP_PI * var);
    }
    case MP_LOSS_EVIDENTIAL: {
        /* Amini et al. 2020 eqs. 8-10, as Chemprop v2: NIG negative log
         * likelihood + lambda ((2 nu + alpha) |r| - eps) */
        double mu = y[0], v = mp_softplus(y[1]), al = mp_softplus(y[2]) + 1;
        double be = mp_softplus(y[3]), r = t - mu, ar = fabs(r), sr = r > 0 ? 1 : r < 0 ? -1 : 0;
        double om = 2 * be * (1 + v), dd = v * r * r + om, lam = p->lambda;
        double l = 0.5 * log(MP_PI / v) - al * log(om) + (al + 0.5) * log(dd) + lgamma(al) -
                   lgamma(al + 0.5) + lam * ((2 * v + al) * ar - p->eps);
        g[0] = -(al + 0.5) * 2 * v * r / dd - lam * (2 * v + al) * sr;
        g[1] = (-0.5 / v - al * 2 * be / om + (al + 0.5) * (r * r + 2 * be) / dd + 2 * lam * ar) *
               mp_softplus_d(y[1]);
        g[2] = (-log(om) + log(dd) + mp_digamma(al) - mp_digamma(al + 0.5) + lam * ar) *
               mp_softplus_d(y[2]);
        g[3] = (-al / be + (al + 0.5) * 2 * (1 + v) / dd) * mp_softplus_d(y[3]);
        return l;
    }
    case MP_LOSS_QUANTILE: {
        /* Chemprop v2's interval loss: the pinball losses of the lower bound
         * at alpha/2 and of the upper bound at 1 - alpha/2 */
        double ql = p->alpha / 2, qu = 1 - p->alpha / 2, el = t - y[0], eu = t - y[1];
        g[0] = -mp_pinball_d(ql, el);
        g[1] = -mp_pinball_d(qu, eu);
        return mp_pinball(ql, el) + mp_pinball(qu, eu);
    }
    case MP_LOSS_CE: {
        int C = p->n_classes, k = (int)t;
        double mx = y[0], s = 0;
        for (int c = 1; c < C; c++)
            mx = y[c] > mx ? y[c] : mx;
        for (int c = 0; c < C; c++)
            s += exp(y[c] - mx);
        for (int c = 0; c < C; c++)
            g[c] = exp(y[c] - mx) / s - (c == k);
        return mx + log(s) - y[k];
    }
    case MP_LOSS_DIRICHLET: {
        /* Sensoy et al. 2018, as Chemprop: the expected squared error of the
         * Dirichlet (A + B) + lambda KL(Dir(alpha~) || Dir(1)), alpha~ the
         * alphas with the label's set to 1 */
        int C = p->n_classes, k = (int)t;
        double al[MP_LOSS_MAX_CLASSES];
        double S = 0, S2 = 0, A = 0, B = 0, sum_yp = 0, sum_pp = 0, sum_am1 = 0;
        for (int c = 0; c < C; c++) {
            al[c] = mp_softplus(y[c]) + 1;
            S += al[c];
            double ah = c == k ? 1.0 : al[c];
            S2 += ah;
            sum_am1 += ah - 1;
        }
        double kl = lgamma(S2) - lgamma((double)C), dg_s2 = mp_digamma(S2);
        for (int c = 0; c < C; c++) {
            double pc = al[c] / S, yc = c == k, ah = c == k ? 1.0 : al[c];
            A += (yc - pc) * (yc - pc);
            B += pc * (1 - pc) / (S + 1);
            sum_yp += (yc - pc) * pc;
            sum_pp += (1 - 2 * pc) * pc;
            kl += -lgamma(ah) + (ah - 1) * (mp_digamma(ah) - dg_s2);
        }
        double tg_s2 = mp_trigamma(S2);
        for (int c = 0; c < C; c++) {
            double pc = al[c] / S, yc = c == k, ah = c == k ? 1.0 : al[c];
            double dA = -2 / S * ((yc - pc) - sum_yp);
            double dB = ((1 - 2 * pc) - sum_pp) / (S * (S + 1)) - B / (S + 1);
            double dK = c == k ? 0 : (ah - 1) * mp_trigamma(ah) - tg_s2 * sum_am1;
            g[c] = (dA + dB + p->lambda * dK) * mp_softplus_d(y[c]);
        }
        return A + B + p->lambda * kl;
    }
    default:
        g[0] = 0;
        return 0;
    }
}

/*
 * Chemprop v2's soft binary MCC of one task: from the weighted sums TP, FP,
 * TN, FN of its labelled rows (p = sigmoid(logit)), mcc and the derivatives
 * of mcc by p for a row with label 1 (d1) and label 0 (d0), per unit of the
 * row's weight.
 */
MP_HD double mp_mcc_binary(double tp, double fp, double tn, double fn, double *d1, double *d0)
{
    double a = tp + fp, b = tp + fn, c = tn + fp, d = tn + fn;
    double num = tp * tn - fp * fn, den = a * b * c * d + 1e-8, sq = sqrt(den);
    double k = num / (2 * den * sq);
    double m_tp = tn / sq - k * c * d * (a + b);
    double m_fp = -fn / sq - k * b * d * (a + c);
    double m_tn = tp / sq - k * a * b * (c + d);
    double m_fn = -fp / sq - k * a * c * (b + d);
    *d1 = m_tp - m_fn;
    *d0 = m_fp - m_tn;
    return num / sq;
}

/* Chemprop v2's multiclass MCC of one task from its weighted counts: pc[c]
 * predicted (argmax) as c, tc[c] labelled c, correct, and s the total. */
MP_HD double mp_mcc_multiclass(const double *pc, const double *tc, int C, double correct,
                               double s)
{
    double pt = 0, pp = 0, tt = 0;
    for (int c = 0; c < C; c++) {
        pt += pc[c] * tc[c];
        pp += pc[c] * pc[c];
        tt += tc[c] * tc[c];
    }
    double x = (s * s - pp) * (s * s - tt);
    return x == 0 ? 0 : (correct * s - pt) / sqrt(x);
}

/* The class an output row of C logits predicts: the first largest (torch's
 * argmax). */
MP_HD int mp_argmax(const double *y, int C)
{
    int best = 0;
    for (int c = 1; c < C; c++)
        if (y[c] > y[best])
            best = c;
    return best;
}

/* ===================================================================== */
/* Spectra (Chemprop v1.6.1 train/loss_functions.py sid_loss,            */
/* wasserstein_loss; v2.3.1 nn/metrics.py SID, Wasserstein)              */
/* ===================================================================== */

/* Element i of a row of the element type: double where dbl, else float. */
MP_HD double mp_spec_ld(const void *p, int dbl, int i)
{
    return dbl ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

MP_HD void mp_spec_st(void *p, int dbl, int i, double v)
{
    if (dbl)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

/* Position j's intensity: the activation of raw output x, at least the
 * floor (torch.where(a < floor, floor, a): no gradient below it); *d gets
 * d intensity / d x. */
MP_HD double mp_spec_intensity(const mp_loss_par *p, double x, double *d)
{
    double a = p->spectra_act == MP_SPECTRA_SOFTPLUS ? mp_softplus(x) : exp(x);
    double da = p->spectra_act == MP_SPECTRA_SOFTPLUS ? mp_sigmoid(x) : a;
    if (a < p->floor) {
        *d = 0;
        return p->floor;
    }
    *d = da;
    return a;
}

/*
 * One spectrum (one row of T = p->n_tasks positions): y its raw outputs,
 * q its target (normalized over its labelled positions, each > 0), m its
 * labels (0: the position is left out), w the row's sample weight, tw the
 * positions' task weights (NULL: 1); the element type is double where dbl.
 * The prediction is c_j = max(act(y_j), floor), p_j = c_j / sum over
 * labelled positions of c; the row's loss is the sum over labelled j of
 * w tw_j l_j, with
 *   sid:         l_j = p_j ln(p_j / q_j) + q_j ln(q_j / p_j)
 *   wasserstein: l_j = |Q_j - P_j|, P and Q the running sums of p and q
 *                over the labelled positions up to j
 * and it is returned.  dy (NULL: none) gets scale * d loss / d y_j (0 at
 * the positions left out).  Three passes, no scratch memory (one GPU
 * thread runs a row): the sum, the loss with the sums the gradient needs,
 * the gradient (d/dc_j = (g_j - sum_k g_k p_k) / S, g_j = d loss / d p_j).
 */
MP_HD double mp_loss_spectral_row(const mp_loss_par *p, const void *y, const void *q,
                                  const uint8_t *m, int dbl, double w, const void *tw,
                                  double scale, void *dy)
{
    const int T = p->n_tasks, wass = p->kind == MP_LOSS_WASSERSTEIN;
    double S = 0, d;
    for (int j = 0; j < T; j++)
        if (m[j])
            S += mp_spec_intensity(p, mp_spec_ld(y, dbl, j), &d);
    if (!(S > 0)) {
        for (int j = 0; dy && j < T; j++)
            mp_spec_st(dy, dbl, j, 0);
        return 0;
    }
    double loss = 0, G = 0, H = 0, P = 0, Q = 0;
    for (int j = 0; j < T; j++) {
        if (!m[j])
            continue;
        double wj = w * (tw ? mp_spec_ld(tw, dbl, j) : 1.0);
        double pj = mp_spec_intensity(p, mp_spec_ld(y, dbl, j), &d) / S;
        double qj = mp_spec_ld(q, dbl, j);
        if (wass) {
            P += pj;
            Q += qj;
            double e = Q - P, h = -wj * (e > 0 ? 1 : e < 0 ? -1 : 0);
            loss += wj * fabs(e);
            H += h;
            G += h * P;
        } else {
            double r = log(pj / qj);
            loss += wj * (pj * r - qj * r);
            G += wj * (r + 1 - qj / pj) * pj;
        }
    }
    if (!dy)
        return loss;
    double hp = 0;
    P = Q = 0;
    for (int j = 0; j < T; j++) {
        if (!m[j]) {
            mp_spec_st(dy, dbl, j, 0);
            continue;
        }
        double wj = w * (tw ? mp_spec_ld(tw, dbl, j) : 1.0);
        double cj = mp_spec_intensity(p, mp_spec_ld(y, dbl, j), &d), pj = cj / S;
        double qj = mp_spec_ld(q, dbl, j), g;
        if (wass) {
            g = H - hp;   /* d loss / d p_j: the h of positions j and after */
            P += pj;
            Q += qj;
            double e = Q - P;
            hp += -wj * (e > 0 ? 1 : e < 0 ? -1 : 0);
        } else {
            g = wj * (log(pj / qj) + 1 - qj / pj);
        }
        mp_spec_st(dy, dbl, j, scale * (g - G) / S * d);
    }
    return loss;
}

#endif /* MP_FORMULAS_H */
