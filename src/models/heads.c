/*
 * heads.c - the task types' tables (heads.h): names, output and value
 * counts, the losses that fit, and raw outputs into predictions.
 */
#include "models/heads.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ===================================================================== */
/* Names                                                                  */
/* ===================================================================== */

static const char *const task_names[MP_MODEL_TASK_COUNT] = {
    "regression", "classification", "regression-mve", "regression-evidential",
    "regression-quantile", "classification-dirichlet", "multiclass", "multiclass-dirichlet",
    "spectral",
};

const char *mp_model_task_name(mp_model_task t)
{
    return (unsigned)t < MP_MODEL_TASK_COUNT ? task_names[t] : "?";
}

mp_status mp_model_task_parse(const char *s, mp_model_task *out)
{
    for (int i = 0; s && i < MP_MODEL_TASK_COUNT; i++)
        if (mp_strcaseeq(s, task_names[i])) {
            *out = (mp_model_task)i;
            return MP_OK;
        }
    if (s && (mp_strcaseeq(s, "spectra") || mp_strcaseeq(s, "spectrum"))) {  /* v1's name */
        *out = MP_MODEL_SPECTRAL;
        return MP_OK;
    }
    return mp_error_set(MP_ERR_ARG, "unknown task type '%s' (expected regression, "
                        "regression-mve, regression-evidential, regression-quantile, "
                        "classification, classification-dirichlet, multiclass, "
                        "multiclass-dirichlet or spectral)", s ? s : "(null)");
}

static const char *const loss_names[MP_LOSS_COUNT] = {
    "mse", "bce", "mae", "rmse", "bounded-mse", "bounded-mae", "bounded-rmse", "mve",
    "evidential", "quantile", "binary-mcc", "ce", "multiclass-mcc", "dirichlet", "sid",
    "wasserstein",
};

const char *mp_loss_name(mp_loss_kind k)
{
    return (unsigned)k < MP_LOSS_COUNT ? loss_names[k] : "?";
}

static const char *const act_names[MP_ACT_COUNT] = {
    "relu", "leakyrelu", "prelu", "elu", "selu", "tanh", "gelu",
};

const char *mp_act_name(mp_act_kind k)
{
    return (unsigned)k < MP_ACT_COUNT ? act_names[k] : "?";
}

mp_status mp_act_parse(const char *s, mp_act_kind *out)
{
    for (int i = 0; s && i < MP_ACT_COUNT; i++)
        if (mp_strcaseeq(s, act_names[i])) {
            *out = (mp_act_kind)i;
            return MP_OK;
        }
    return mp_error_set(MP_ERR_ARG, "unknown activation '%s' (expected relu, leakyrelu, prelu, "
                        "elu, selu, tanh or gelu)", s ? s : "(null)");
}

/* ===================================================================== */
/* Families and sizes                                                     */
/* ===================================================================== */

int mp_head_is_regression(mp_model_task t)
{
    return t == MP_MODEL_REGRESSION || t == MP_MODEL_REGRESSION_MVE ||
           t == MP_MODEL_REGRESSION_EVIDENTIAL || t == MP_MODEL_REGRESSION_QUANTILE;
}

int mp_head_is_binary(mp_model_task t)
{
    return t == MP_MODEL_CLASSIFICATION || t == MP_MODEL_CLASSIFICATION_DIRICHLET;
}

int mp_head_is_multiclass(mp_model_task t)
{
    return t == MP_MODEL_MULTICLASS || t == MP_MODEL_MULTICLASS_DIRICHLET;
}

int mp_head_outputs(mp_model_task t, int n_classes)
{
    switch (t) {
    case MP_MODEL_REGRESSION_MVE: case MP_MODEL_REGRESSION_QUANTILE:
    case MP_MODEL_CLASSIFICATION_DIRICHLET:
        return 2;
    case MP_MODEL_REGRESSION_EVIDENTIAL:
        return 4;
    case MP_MODEL_MULTICLASS: case MP_MODEL_MULTICLASS_DIRICHLET:
        return n_classes;
    default:
        return 1;
    }
}

int mp_head_n_values(mp_model_task t, int n_classes)
{
    return mp_head_outputs(t, n_classes);   /* one value per output, for every head */
}

int mp_head_loss_classes(mp_model_task t, int n_classes)
{
    if (t == MP_MODEL_CLASSIFICATION_DIRICHLET)
        return 2;
    return mp_head_is_multiclass(t) ? n_classes : 0;
}

const char *mp_head_value_name(mp_model_task t, int k, char *buf, size_t n)
{
    static const char *const evid[4] = { "", "nu", "alpha", "beta" };
    if (mp_head_is_multiclass(t)) {
        snprintf(buf, n, "class%d", k);
        return buf;
    }
    const char *s = "";
    if (k > 0)
        switch (t) {
        case MP_MODEL_REGRESSION_MVE: s = "var"; break;
        case MP_MODEL_REGRESSION_EVIDENTIAL: s = k < 4 ? evid[k] : "?"; break;
        case MP_MODEL_REGRESSION_QUANTILE: s = "interval"; break;
        case MP_MODEL_CLASSIFICATION_DIRICHLET: s = "u"; break;
        default: s = "?"; break;
        }
    snprintf(buf, n, "%s", s);
    return buf;
}

/* ===================================================================== */
/* Losses                                                                 */
/* ===================================================================== */

mp_loss_kind mp_head_default_loss(mp_model_task t)
{
    switch (t) {
    case MP_MODEL_CLASSIFICATION: return MP_LOSS_BCE;
    case MP_MODEL_REGRESSION_MVE: return MP_LOSS_MVE;
    case MP_MODEL_REGRESSION_EVIDENTIAL: return MP_LOSS_EVIDENTIAL;
    case MP_MODEL_REGRESSION_QUANTILE: return MP_LOSS_QUANTILE;
    case MP_MODEL_CLASSIFICATION_DIRICHLET: return MP_LOSS_DIRICHLET;
    case MP_MODEL_MULTICLASS: return MP_LOSS_CE;
    case MP_MODEL_MULTICLASS_DIRICHLET: return MP_LOSS_DIRICHLET;
    case MP_MODEL_SPECTRAL: return MP_LOSS_SID;
    default: return MP_LOSS_MSE;
    }
}

int mp_head_loss_fits(mp_model_task t, mp_loss_kind l)
{
    switch (t) {
    case MP_MODEL_REGRESSION:
        return l == MP_LOSS_MSE || l == MP_LOSS_MAE || l == MP_LOSS_RMSE ||
               l == MP_LOSS_BOUNDED_MSE || l == MP_LOSS_BOUNDED_MAE || l == MP_LOSS_BOUNDED_RMSE;
    case MP_MODEL_CLASSIFICATION:
        return l == MP_LOSS_BCE || l == MP_LOSS_BINARY_MCC;
    case MP_MODEL_MULTICLASS:
        return l == MP_LOSS_CE || l == MP_LOSS_MULTICLASS_MCC;
    case MP_MODEL_SPECTRAL:
        return l == MP_LOSS_SID || l == MP_LOSS_WASSERSTEIN;
    case MP_MODEL_REGRESSION_MVE: case MP_MODEL_REGRESSION_EVIDENTIAL:
    case MP_MODEL_REGRESSION_QUANTILE: case MP_MODEL_CLASSIFICATION_DIRICHLET:
    case MP_MODEL_MULTICLASS_DIRICHLET:
        return l == mp_head_default_loss(t);
    default:
        return 0;
    }
}

void mp_head_losses_text(mp_model_task t, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < MP_LOSS_COUNT; k++)
        if (mp_head_loss_fits(t, (mp_loss_kind)k) && at < n) {
            int w = snprintf(buf + at, n - at, "%s%s", at ? " | " : "", loss_names[k]);
            at += w > 0 ? (size_t)w : 0;
        }
}

mp_status mp_loss_parse(const char *s, mp_model_task t, mp_loss_kind *out)
{
    static const struct {
        const char  *name;
        mp_loss_kind kind;
    } alias[] = {
        { "bounded_mse", MP_LOSS_BOUNDED_MSE }, { "bounded_mae", MP_LOSS_BOUNDED_MAE },
        { "bounded_rmse", MP_LOSS_BOUNDED_RMSE }, { "binary_cross_entropy", MP_LOSS_BCE },
        { "cross_entropy", MP_LOSS_CE }, { "pinball", MP_LOSS_QUANTILE },
        { "binary_mcc", MP_LOSS_BINARY_MCC }, { "multiclass_mcc", MP_LOSS_MULTICLASS_MCC },
    };
    int k = -1;
    if (s && mp_strcaseeq(s, "mcc"))
        k = mp_head_is_multiclass(t) ? MP_LOSS_MULTICLASS_MCC : MP_LOSS_BINARY_MCC;
    for (int i = 0; s && k < 0 && i < MP_LOSS_COUNT; i++)
        if (mp_strcaseeq(s, loss_names[i]))
            k = i;
    for (size_t i = 0; s && k < 0 && i < sizeof alias / sizeof alias[0]; i++)
        if (mp_strcaseeq(s, alias[i].name))
            k = (int)alias[i].kind;
    char fits[256];
    mp_head_losses_text(t, fits, sizeof fits);
    if (k < 0)
        return mp_error_set(MP_ERR_ARG, "unknown loss '%s' (a %s task takes %s)",
                            s ? s : "(null)", mp_model_task_name(t), fits);
    if (!mp_head_loss_fits(t, (mp_loss_kind)k))
        return mp_error_set(MP_ERR_ARG, "loss %s does not fit a %s task (it takes %s)",
                            loss_names[k], mp_model_task_name(t), fits);
    *out = (mp_loss_kind)k;
    return MP_OK;
}

/* ===================================================================== */
/* Predictions                                                            */
/* ===================================================================== */

static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

/* A spectral row: the activation of each position, over the row's sum
 * (Chemprop v1's predict: normalize_spectra of the activated outputs, no
 * floor; every position counts). */
static void spectrum_predict(int act, int T, const float *y, double *out)
{
    double s = 0;
    for (int k = 0; k < T; k++) {
        out[k] = act == MP_SPECTRA_SOFTPLUS ? softplus(y[k]) : exp((double)y[k]);
        s += out[k];
    }
    for (int k = 0; k < T; k++)
        out[k] = s > 0 && isfinite(s) ? out[k] / s : NAN;
}

void mp_head_predict_spectra(int act, int n_tasks, const float *raw, int32_t n, double *out)
{
    for (int32_t i = 0; i < n; i++)
        spectrum_predict(act, n_tasks, raw + (size_t)i * n_tasks, out + (size_t)i * n_tasks);
}

void mp_head_predict(mp_model_task t, int T, int C, const float *raw, int32_t n,
                     const double *mean, const double *std, double *out)
{
    const int O = mp_head_outputs(t, C), V = mp_head_n_values(t, C);
    const size_t row = (size_t)T * O;
    for (int32_t i = 0; i < n; i++) {
        const float *y = raw + (size_t)i * row;
        for (int k = 0; k < T; k++) {
            double *v = out + ((size_t)i * T + k) * V;
            double mu = mean ? mean[k] : 0, sd = std ? std[k] : 1;
            switch (t) {
            case MP_MODEL_REGRESSION:
                v[0] = y[k] * sd + mu;
                break;
            case MP_MODEL_REGRESSION_MVE:
                v[0] = y[k] * sd + mu;
                v[1] = softplus(y[T + k]) * sd * sd;
                break;
            case MP_MODEL_REGRESSION_EVIDENTIAL:
                v[0] = y[k] * sd + mu;
                v[1] = softplus(y[T + k]);
                v[2] = softplus(y[2 * T + k]) + 1;
                v[3] = softplus(y[3 * T + k]) * sd * sd;
                break;
            case MP_MODEL_REGRESSION_QUANTILE: {
                double lo = y[k] * sd + mu, up = y[T + k] * sd + mu;
                v[0] = (lo + up) / 2;
                v[1] = up - lo;
                break;
            }
            case MP_MODEL_CLASSIFICATION:
                v[0] = 1.0 / (1.0 + exp(-(double)y[k]));
                break;
            case MP_MODEL_CLASSIFICATION_DIRICHLET: {
                double a0 = softplus(y[2 * k]) + 1, a1 = softplus(y[2 * k + 1]) + 1;
                v[0] = a1 / (a0 + a1);
                v[1] = 2 / (a0 + a1);
                break;
            }
            case MP_MODEL_MULTICLASS: {
                const float *z = y + (size_t)k * C;
                double mx = z[0], s = 0;
                for (int c = 1; c < C; c++)
                    mx = z[c] > mx ? z[c] : mx;
                for (int c = 0; c < C; c++)
                    s += exp(z[c] - mx);
                for (int c = 0; c < C; c++)
                    v[c] = exp(z[c] - mx) / s;
                break;
            }
            case MP_MODEL_MULTICLASS_DIRICHLET: {
                const float *z = y + (size_t)k * C;
                double s = 0;
                for (int c = 0; c < C; c++)
                    s += softplus(z[c]) + 1;
                for (int c = 0; c < C; c++)
                    v[c] = (softplus(z[c]) + 1) / s;
                break;
            }
            default:
                for (int c = 0; c < V; c++)
                    v[c] = NAN;
                break;
            }
        }
    }
}
