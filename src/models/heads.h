/*
 * heads.h - the task types (Chemprop v2.3.1's: nn/predictors.py), what a
 * model's outputs mean for each, which losses fit it, and how the raw
 * outputs become predictions.  The one place these conventions are written
 * down; the model (model.c), the trainer, the predictor and the model file
 * all follow them.
 *
 * Raw outputs (what the FFN's last layer writes, per molecule; T tasks, C
 * classes; the layouts are Chemprop's, ops.h mp_loss_col):
 *
 *   task type                 outputs  layout
 *   regression                T        y[t]
 *   regression-mve            2T       mean y[t], variance v[t] = y[T+t]
 *   regression-evidential     4T       gamma y[t], nu y[T+t], alpha y[2T+t], beta y[3T+t]
 *   regression-quantile       2T       lower y[t], upper y[T+t]
 *   classification            T        a logit y[t]
 *   classification-dirichlet  2T       evidence of class 0 and 1: y[2t], y[2t+1]
 *   multiclass                CT       C logits y[tC + c]
 *   multiclass-dirichlet      CT       C evidences y[tC + c]
 *   spectral                  T        a spectrum: position t's raw intensity y[t]
 *
 * Predictions (mp_head_values: V values per task, value k of task t of
 * molecule i at out[(i T + t) V + k]), in the training data's units: a
 * regression value is un-scaled (x std + mean), a variance by std^2, as
 * Chemprop v2's UnscaleTransform does.  softplus(x) = log(1 + e^x).
 *
 *   task type                 V   values
 *   regression                1   the value
 *   regression-mve            2   mean, variance = softplus(v) std^2
 *   regression-evidential     4   gamma (the mean), nu = softplus, alpha = softplus + 1,
 *                                 beta = softplus std^2  (Chemprop's order; its
 *                                 aleatoric variance is beta / (alpha - 1), epistemic
 *                                 beta / (nu (alpha - 1)))
 *   regression-quantile       2   mean = (lower + upper) / 2, interval = upper - lower
 *                                 (for quantiles alpha/2 and 1 - alpha/2)
 *   classification            1   probability of 1 = sigmoid(logit)
 *   classification-dirichlet  2   probability of 1 = a1 / S, uncertainty 2 / S
 *                                 (a_c = softplus + 1, S = a0 + a1)
 *   multiclass                C   class probabilities, softmax of the logits
 *   multiclass-dirichlet      C   class probabilities a_c / S
 *   spectral                  1   position t's share act(y[t]) / sum_k act(y[k])
 *                                 (act: exp or softplus, Chemprop v1's
 *                                 --spectra_activation; mp_head_predict_spectra)
 *
 * The point prediction a metric scores is value 0 of each task (the mean,
 * the probability of class 1), or all C values for the multiclass heads.
 *
 * Where the values reach the rest of molprop (for the uncertainty
 * estimators and calibrators): mp_ensemble_predict_values (run/ensemble.h)
 * gives every value of every task, the member mean [n x T x V] and the
 * member spread; mp_ensemble_predict gives value 0 only.  `molprop predict`
 * writes "<task>" (value 0; the most probable class for the multiclass
 * heads) and then "<task>_<mp_head_value_name>" for the others.
 */
#ifndef MP_HEADS_H
#define MP_HEADS_H

#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Chemprop's name of a task type ("regression-mve"), "?" when out of range;
 * and the name back (MP_ERR_ARG listing the names). */
const char *mp_model_task_name(mp_model_task t);
mp_status   mp_model_task_parse(const char *s, mp_model_task *out);

/* The regression family (targets scaled, values un-scaled), the binary
 * classification family (0/1 labels), the multiclass family (class labels
 * 0 .. C-1). */
int mp_head_is_regression(mp_model_task t);
int mp_head_is_binary(mp_model_task t);
int mp_head_is_multiclass(mp_model_task t);

/* Raw outputs, prediction values per task (tables above), and the classes
 * the loss sees (2 for classification-dirichlet, n_classes for multiclass). */
int mp_head_outputs(mp_model_task t, int n_classes);
int mp_head_n_values(mp_model_task t, int n_classes);
int mp_head_loss_classes(mp_model_task t, int n_classes);

/* The name of value k of a task type's predictions: "" for the first value
 * of every head but the multiclass ones (the prediction itself), then
 * "var", "nu" / "alpha" / "beta", "interval", "u"; "class<k>" for the
 * multiclass heads.  (Output columns are "<task>" and "<task>_<name>".) */
const char *mp_head_value_name(mp_model_task t, int k, char *buf, size_t n);

/* The task type's loss when none is chosen (Chemprop's criterion), and
 * whether a loss fits it: regression: mse, mae, rmse, bounded-mse,
 * bounded-mae, bounded-rmse; mve: mve; evidential: evidential; quantile:
 * quantile; classification: bce, binary-mcc; the dirichlet heads:
 * dirichlet; multiclass: ce, multiclass-mcc; spectral: sid, wasserstein. */
mp_loss_kind mp_head_default_loss(mp_model_task t);
int          mp_head_loss_fits(mp_model_task t, mp_loss_kind loss);

/* Loss names (Chemprop v2's: "mse", "bounded-mse", "binary-mcc", ...); the
 * parser also takes v1's ("bounded_mse", "binary_cross_entropy",
 * "cross_entropy") and "mcc", "pinball", and needs the task type for "mcc"
 * (binary or multiclass).  MP_ERR_ARG naming the losses that fit. */
const char *mp_loss_name(mp_loss_kind k);
mp_status   mp_loss_parse(const char *s, mp_model_task t, mp_loss_kind *out);
/* The losses that fit task t, as "mse | mae | ..." for messages. */
void        mp_head_losses_text(mp_model_task t, char *buf, size_t n);

/* Activation names: relu, leakyrelu, prelu, elu, selu, tanh, gelu (any case;
 * v1's "ReLU", "LeakyReLU", ... parse too). */
const char *mp_act_name(mp_act_kind k);
mp_status   mp_act_parse(const char *s, mp_act_kind *out);

/*
 * Predictions of n molecules from their raw outputs raw [n x outputs]
 * (float, as the model downloads them) into out [n x T x V] (tables
 * above).  mean / std [T]: the target scaler of a regression head (NULL:
 * none, the values stay in scaled units); unused by the others.
 */
void mp_head_predict(mp_model_task t, int n_tasks, int n_classes, const float *raw, int32_t n,
                     const double *mean, const double *std, double *out);

/* The spectral head's predictions: each row of raw [n x n_tasks] activated
 * (act: MP_SPECTRA_*) and divided by its sum, into out [n x n_tasks] (NaN
 * for a row whose sum is not finite and positive).  mp_head_predict leaves
 * the spectral head to this one (it needs the activation). */
void mp_head_predict_spectra(int act, int n_tasks, const float *raw, int32_t n, double *out);

#ifdef __cplusplus
}
#endif
#endif /* MP_HEADS_H */
