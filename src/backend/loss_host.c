/*
 * loss_host.c - the loss op of the host backends for the losses beyond mse
 * and bce (ops.h mp_loss_spec): each labelled (molecule, task) pair through
 * formulas.h in double, weighted by its sample and task weights, divided by
 * the number of labelled pairs; rmse takes the square root; the mcc losses
 * reduce every task over the batch first, the spectral ones every row.  One thread: it is a few values
 * per molecule, and a fixed order makes the sums the same on every call.
 */
#include "backend/host_ops.h"

#include "backend/formulas.h"

#include <math.h>

static double ld(const mp_backend *b, const void *p, size_t i)
{
    return b->esize == sizeof(double) ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static void st(const mp_backend *b, void *p, size_t i, double v)
{
    if (b->esize == sizeof(double))
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

/* The weight of pair (i, t): sample weight times task weight. */
static double pair_weight(const mp_backend *b, const mp_loss_spec *s, int32_t i, int t)
{
    double w = s->sample_weight ? ld(b, s->sample_weight, (size_t)i) : 1.0;
    return s->task_weight ? w * ld(b, s->task_weight, (size_t)t) : w;
}

/* Chemprop v2's mcc losses: 1 - mean_t tw_t MCC_t; the binary one's
 * gradient through the soft counts, the multiclass one's zero (its counts
 * are of argmax predictions, and its total sums probabilities that add up
 * to one). */
static double loss_mcc(mp_backend *b, void *dy, const void *y, const void *target,
                       const uint8_t *mask, int32_t n, const mp_loss_spec *s, size_t row)
{
    const int T = s->n_tasks, C = s->n_classes;
    const int W = mp_loss_width(s->kind, C);
    double sum = 0, tw_sum = 0;
    for (size_t i = 0; i < (size_t)n * row; i++)
        st(b, dy, i, 0);
    for (int t = 0; t < T; t++) {
        double tw = s->task_weight ? ld(b, s->task_weight, (size_t)t) : 1.0, mcc;
        if (s->kind == MP_LOSS_BINARY_MCC) {
            double tp = 0, fp = 0, tn = 0, fn = 0, d1, d0;
            for (int32_t i = 0; i < n; i++) {
                size_t at = (size_t)i * T + t;
                if (!mask[at])
                    continue;
                double w = s->sample_weight ? ld(b, s->sample_weight, (size_t)i) : 1.0;
                double p = mp_sigmoid(ld(b, y, (size_t)i * row + t)), lab = ld(b, target, at);
                tp += lab * p * w;
                fp += (1 - lab) * p * w;
                tn += (1 - lab) * (1 - p) * w;
                fn += lab * (1 - p) * w;
            }
            mcc = mp_mcc_binary(tp, fp, tn, fn, &d1, &d0);
            for (int32_t i = 0; i < n; i++) {
                size_t at = (size_t)i * T + t;
                if (!mask[at])
                    continue;
                double w = s->sample_weight ? ld(b, s->sample_weight, (size_t)i) : 1.0;
                double p = mp_sigmoid(ld(b, y, (size_t)i * row + t));
                double dm = ld(b, target, at) > 0.5 ? d1 : d0;
                st(b, dy, (size_t)i * row + t, -tw / T * dm * w * p * (1 - p));
            }
        } else {
            double pc[MP_LOSS_MAX_CLASSES] = { 0 }, tc[MP_LOSS_MAX_CLASSES] = { 0 };
            double correct = 0, tot = 0, v[MP_LOSS_MAX_CLASSES];
            for (int32_t i = 0; i < n; i++) {
                size_t at = (size_t)i * T + t;
                if (!mask[at])
                    continue;
                double w = s->sample_weight ? ld(b, s->sample_weight, (size_t)i) : 1.0;
                for (int c = 0; c < W; c++)
                    v[c] = ld(b, y, (size_t)i * row + mp_loss_col(s->kind, T, C, t, c));
                int pred = mp_argmax(v, C), lab = (int)ld(b, target, at);
                pc[pred] += w;
                tc[lab] += w;
                correct += pred == lab ? w : 0;
                tot += w;
            }
            mcc = mp_mcc_multiclass(pc, tc, C, correct, tot);
        }
        sum += tw * mcc;
        tw_sum += tw;
    }
    return (tw_sum - sum) / T;   /* Chemprop v2: the mean over tasks of tw (1 - MCC) */
}

void mp_loss_host(mp_backend *b, void *loss, void *dy, const void *y, const void *target,
                  const uint8_t *mask, int32_t n, const mp_loss_spec *s)
{
    const int T = s->n_tasks, C = s->n_classes;
    const int W = mp_loss_width(s->kind, C);
    const size_t row = (size_t)T * (size_t)W, pairs = (size_t)(n > 0 ? n : 0) * (size_t)T;
    size_t count = 0;
    for (size_t i = 0; i < pairs; i++)
        count += mask[i] != 0;
    if (!count) {
        for (size_t i = 0; i < (size_t)(n > 0 ? n : 0) * row; i++)
            st(b, dy, i, 0);
        st(b, loss, 0, 0);
        return;
    }
    if (mp_loss_is_mcc(s->kind)) {
        st(b, loss, 0, loss_mcc(b, dy, y, target, mask, n, s, row));
        return;
    }
    if (mp_loss_is_spectral(s->kind)) {
        /* a row is one spectrum: its positions are the tasks */
        const mp_loss_par par = mp_loss_par_of(s);
        const int dbl = b->esize == sizeof(double);
        const size_t es = b->esize;
        double sum = 0, inv = 1.0 / (double)count;
        for (int32_t i = 0; i < n; i++) {
            size_t at = (size_t)i * T;
            double w = s->sample_weight ? ld(b, s->sample_weight, (size_t)i) : 1.0;
            sum += mp_loss_spectral_row(&par, (const char *)y + at * es,
                                        (const char *)target + at * es, mask + at, dbl, w,
                                        s->task_weight, inv, (char *)dy + at * es);
        }
        st(b, loss, 0, sum * inv);
        return;
    }
    /* Two passes for rmse (the sum, then the gradients scaled by the
     * square root's derivative: d sqrt(m) = dm / (2 sqrt(m)); none at m = 0),
     * one for the others. */
    const mp_loss_par par = mp_loss_par_of(s);
    const double inv = 1.0 / (double)count;
    const int rmse = mp_loss_is_rmse(s->kind);
    double sum = 0, scale = inv, v[MP_LOSS_MAX_CLASSES], g[MP_LOSS_MAX_CLASSES];
    for (int pass = rmse ? 0 : 1; pass < 2; pass++) {
        if (pass == 1 && rmse) {
            double r = sqrt(sum * inv);
            scale = r > 0 ? inv * 0.5 / r : 0;
        }
        sum = 0;
        for (int32_t i = 0; i < n; i++)
            for (int t = 0; t < T; t++) {
                size_t at = (size_t)i * T + t, base = (size_t)i * row;
                if (!mask[at]) {
                    for (int k = 0; pass && k < W; k++)
                        st(b, dy, base + mp_loss_col(s->kind, T, C, t, k), 0);
                    continue;
                }
                for (int k = 0; k < W; k++)
                    v[k] = ld(b, y, base + mp_loss_col(s->kind, T, C, t, k));
                double w = pair_weight(b, s, i, t);
                double l = mp_loss_elem(&par, v, ld(b, target, at), s->ineq ? s->ineq[at] : 0, g);
                sum += l * w;
                for (int k = 0; pass && k < W; k++)
                    st(b, dy, base + mp_loss_col(s->kind, T, C, t, k), g[k] * w * scale);
            }
    }
    st(b, loss, 0, rmse ? sqrt(sum * inv) : sum * inv);
}
