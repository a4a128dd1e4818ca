/*
 * predict_unc.c - the uncertainty side of `molprop predict` (predict.h):
 * the estimator a run uses (uncertainty.h) and the calibrators fitted on a
 * labelled file (calibrate.h) and applied chunk by chunk.  The metrics of
 * the file it writes are unc_eval.c's (`molprop eval --uncertainty-metrics`).
 *
 * Conventions (Chemprop v2.3.1's where it has one): a regression <task>_unc
 * is a variance in the target's units squared; a classification one the
 * variance of the probability over members / passes; platt and isotonic
 * recalibrate the probability column itself; intervals are written as
 * <task>_lower / <task>_upper.  A multiclass model's uncertainties are per
 * class (<task>_class<k>_unc), but for dirichlet's u (<task>_unc); its
 * calibrators read the class probabilities: isotonic-multiclass rewrites
 * them, the conformal ones write prediction sets (<task>_class<k>_in_set).
 * conformal-multilabel reads a binary model's probabilities, all its tasks
 * at once, and writes the in-set and out-set of each molecule as 0 / 1 per
 * task (<task>_in_set, <task>_out_set).
 */
#include "run/predict.h"

#include "data/csv.h"
#include "models/heads.h"
#include "run/calibrate.h"
#include "run/uncertainty.h"

#include <math.h>
#include <string.h>

#define CAL_BATCH_HOST 256
#define CAL_BATCH_DEVICE 4096

static int is_mc(const mp_ensemble *e) { return mp_head_is_multiclass(e->cfg.task); }

/* Classes per task of a multiclass model (1 otherwise). */
static size_t n_cls(const mp_ensemble *e) { return is_mc(e) ? (size_t)e->cfg.n_classes : 1; }

/* The methods whose variance is known member by member (mve-weighting
 * weighs those). */
static int per_member_variance(mp_unc_method m)
{
    return m == MP_UNC_MVE || m == MP_UNC_DROPOUT || m == MP_UNC_EVIDENTIAL_TOTAL ||
           m == MP_UNC_EVIDENTIAL_EPISTEMIC || m == MP_UNC_EVIDENTIAL_ALEATORIC;
}

/* The chunk buffers of u for n rows (grown, never shrunk). */
static mp_status unc_bufs(mp_unc_run *u, size_t n)
{
    if (n <= u->cap)
        return MP_OK;
    size_t cells = n * u->e->n_tasks, C = n_cls(u->e);
    mp_free(u->class_unc);
    mp_free(u->in_set);
    mp_free(u->out_set);
    mp_free(u->member_unc);
    u->class_unc = mp_malloc(sizeof(double) * cells * C);
    u->in_set = mp_malloc(sizeof(double) * cells * C);
    u->out_set = mp_malloc(sizeof(double) * cells);
    u->member_unc = mp_malloc(sizeof(double) * cells * (size_t)u->e->n_members);
    u->cap = 0;
    if (!u->class_unc || !u->in_set || !u->out_set || !u->member_unc)
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory (uncertainties of %zu rows)",
                            n);
    u->cap = n;
    return MP_OK;
}

/* ===================================================================== */
/* Opening a run                                                          */
/* ===================================================================== */

/* For each of e's tasks, the column of d holding it (MP_ERR_FORMAT naming
 * the missing one). */
static mp_status task_columns(const mp_ensemble *e, const mp_dataset *d, size_t *col)
{
    for (size_t k = 0; k < e->n_tasks; k++) {
        size_t j = 0;
        while (j < d->n_tasks && strcmp(d->task_names[j], e->task_names[k]))
            j++;
        if (j == d->n_tasks)
            return mp_error_set(MP_ERR_FORMAT, "%s: no column '%s' (the model predicts it)",
                                d->path, e->task_names[k]);
        col[k] = j;
    }
    return MP_OK;
}

/* One task's calibrator, fitted on its m labelled rows (their positions r
 * among the nv predicted ones in ri).  vals: nv x T x V (the class
 * probabilities of a multiclass model); mean, unc: nv x T; member_unc: M x
 * nv x T (mve-weighting); y: the labels; w: scratch of (M + 4) m + m C. */
static mp_status fit_task(mp_unc_run *u, size_t k, const size_t *ri, size_t m, size_t nv,
                          const double *mean, const double *unc, const double *vals,
                          const double *y, double *w)
{
    const mp_predict_opts *o = u->o;
    mp_ensemble *e = u->e;
    size_t t = e->n_tasks, V = (size_t)mp_ensemble_n_values(e), C = n_cls(e);
    int M = e->n_members;
    mp_calibrator kind = (mp_calibrator)o->calibrate;
    if (is_mc(e)) {
        double *prob = w;
        for (size_t r = 0; r < m; r++)
            memcpy(prob + r * C, vals + (ri[r] * t + k) * V, sizeof(double) * C);
        return mp_mc_calibration_fit(&((mp_mc_calibration *)u->cal)[k], kind, o->alpha,
                                     (int)C, prob, y, m);
    }
    double *pp = w, *vp = w + m, *hp = w + 2 * m, *mv = w + 3 * m;
    for (size_t r = 0; r < m; r++) {
        size_t i = ri[r];
        pp[r] = mean[i * t + k];
        vp[r] = unc ? unc[i * t + k] : NAN;
        hp[r] = o->uncertainty == MP_UNC_QUANTILE ? unc[i * t + k] : 0;
        for (int q = 0; kind == MP_CAL_MVE_WEIGHTING && q < M; q++)
            mv[(size_t)q * m + r] = u->member_unc[((size_t)q * nv + i) * t + k];
    }
    mp_cal_inputs in = { m, pp, mp_calibrator_is_classification(kind) ? pp : vp, hp,
                         kind == MP_CAL_MVE_WEIGHTING ? mv : NULL,
                         kind == MP_CAL_MVE_WEIGHTING ? M : 0 };
    return mp_calibration_fit(&((mp_calibration *)u->cal)[k], kind, o->alpha, &in, y);
}

/* conformal-multilabel on the nv predicted rows of d (idx) with their
 * probabilities mean [nv x T]: the labels of every task (col) at once,
 * checked to be 0 / 1 (MP_ERR_ARG naming the line), missing ones NaN. */
static mp_status fit_multilabel(mp_unc_run *u, const mp_dataset *d, const int32_t *idx,
                                size_t nv, const size_t *col, const double *mean)
{
    const mp_predict_opts *o = u->o;
    size_t t = u->e->n_tasks, labelled = 0;
    double *y = mp_malloc(sizeof(double) * (nv * t + 1));
    if (!y)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    for (size_t r = 0; r < nv; r++)
        for (size_t k = 0; k < t; k++) {
            size_t i = (size_t)idx[r];
            double target = d->targets[i * d->n_tasks + col[k]];
            if (!isnan(target) && target != 0 && target != 1) {
                mp_free(y);
                return mp_error_set(MP_ERR_ARG, "%s:%zu: label %g of '%s' in '%s' is not 0 or 1 "
                                    "(conformal-multilabel; calibrating %s)", d->path,
                                    d->line[i], target, d->smiles[i], u->e->task_names[k],
                                    o->model_path);
            }
            labelled += !isnan(target);
            y[r * t + k] = target;
        }
    mp_status st;
    if (labelled == 0)
        st = mp_error_set(MP_ERR_ARG, "%s: no labelled cell in the %zu valid molecules "
                          "(conformal-multilabel; calibrating %s)", o->calibration_data, nv,
                          o->model_path);
    else if ((st = mp_ml_calibration_fit(u->cal, o->alpha, mean, y, nv, t)))
        st = mp_error_set(st, "%s: %s", o->calibration_data, mp_error_message());
    mp_free(y);
    return st;
}

/* Predicts the calibration file and fits one calibrator per task on its
 * labelled rows (conformal-multilabel: one for all the tasks). */
static mp_status fit_calibration(mp_unc_run *u)
{
    const mp_predict_opts *o = u->o;
    mp_ensemble *e = u->e;
    size_t t = e->n_tasks, V = (size_t)mp_ensemble_n_values(e), C = n_cls(e);
    size_t M = (size_t)e->n_members;
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    mp_columns_files cols;
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.smiles_column = o->columns.smiles_column;
    mp_status st = mp_dataset_load(&d, o->calibration_data, &spec);
    if (st)
        return st;
    if ((st = mp_columns_files_open(&cols, &e->cols, o->calibration_atom_path,
                                    o->calibration_bond_path, o->model_path,
                                    (int32_t)d->n_rows, "calibration-"))) {
        mp_columns_files_free(&cols);
        mp_dataset_free(d);
        return st;
    }
    size_t n = d->n_rows, nv = 0, n1 = n ? n : 1;
    size_t *col = mp_malloc(sizeof(size_t) * t), *ri = mp_malloc(sizeof(size_t) * n1);
    int32_t *idx = mp_malloc(sizeof(int32_t) * n1);
    double *buf = mp_malloc(sizeof(double) * n1 * t * (4 + V));
    double *y = mp_malloc(sizeof(double) * n1 * (5 + M + C));
    if (!col || !ri || !idx || !buf || !y) {
        st = mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    if ((st = task_columns(e, d, col)))
        goto done;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    fo.n_threads = o->threads;
    if ((st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)n, &fo)) ||
        (st = mp_columns_files_apply(&cols, &e->cols, &f->g, 0, (const char *const *)d->smiles)) ||
        (st = mp_columns_files_end(&cols, n, 1, o->calibration_data)))
        goto done;
    for (size_t i = 0; i < n; i++)
        if (f->g.valid[i])
            idx[nv++] = (int32_t)i;
    double *mean = buf, *unc = buf + n * t, *lo = buf + 2 * n * t, *up = buf + 3 * n * t;
    double *vals = buf + 4 * n * t;
    int32_t batch = e->backend->host_memory ? CAL_BATCH_HOST : CAL_BATCH_DEVICE;
    /* keys of the calibration rows: a stream of their own (row0 past any input) */
    if ((st = mp_unc_run_predict(u, f, idx, (int32_t)nv, batch, INT64_C(1) << 40, mean, unc, lo,
                                 up, vals)))
        goto done;
    int ml = o->calibrate == MP_CAL_CONFORMAL_MULTILABEL;
    size_t esz = ml ? sizeof(mp_ml_calibration)
                    : is_mc(e) ? sizeof(mp_mc_calibration) : sizeof(mp_calibration);
    if (!(u->cal = mp_calloc(ml ? 1 : t, esz))) {
        st = mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    if (ml) {
        st = fit_multilabel(u, d, idx, nv, col, mean);
        goto done;
    }
    for (size_t k = 0; k < t; k++) {
        size_t m = 0;
        for (size_t r = 0; r < nv; r++) {
            double target = d->targets[(size_t)idx[r] * d->n_tasks + col[k]];
            if (isnan(target))
                continue;
            if (is_mc(e) && !(target >= 0 && target < (double)C && target == floor(target))) {
                st = mp_error_set(MP_ERR_ARG, "%s:%zu: label %g of '%s' in '%s' is not a class "
                                  "(0 to %zu; calibrating %s)", d->path, d->line[idx[r]], target,
                                  d->smiles[idx[r]], e->task_names[k], C - 1, o->model_path);
                goto done;
            }
            y[m] = target;
            ri[m++] = r;
        }
        if ((st = fit_task(u, k, ri, m, nv, mean, unc, vals, y, y + n1))) {
            st = mp_error_set(st, "%s, task '%s': %s", o->calibration_data, e->task_names[k],
                              mp_error_message());
            goto done;
        }
    }
done:
    mp_columns_files_free(&cols);
    mp_free(col);
    mp_free(ri);
    mp_free(idx);
    mp_free(buf);
    mp_free(y);
    mp_features_free(f);
    mp_dataset_free(d);
    return st;
}

/* Whether a head-reading method reads this head (heads.h). */
static int method_fits_head(mp_unc_method m, mp_model_task head)
{
    switch (m) {
    case MP_UNC_MVE: return head == MP_MODEL_REGRESSION_MVE;
    case MP_UNC_QUANTILE: return head == MP_MODEL_REGRESSION_QUANTILE;
    case MP_UNC_DIRICHLET:
        return head == MP_MODEL_CLASSIFICATION_DIRICHLET || head == MP_MODEL_MULTICLASS_DIRICHLET;
    default: return head == MP_MODEL_REGRESSION_EVIDENTIAL;
    }
}

static const char *method_task_text(mp_unc_method m)
{
    switch (m) {
    case MP_UNC_MVE: return "regression-mve";
    case MP_UNC_QUANTILE: return "regression-quantile";
    case MP_UNC_DIRICHLET: return "classification-dirichlet or multiclass-dirichlet";
    default: return "regression-evidential";
    }
}

/* Whether calibrator c fits e's model; MP_ERR_ARG naming the model (path)
 * and what fits when not. */
static mp_status check_calibrator(const mp_predict_opts *o, const mp_ensemble *e)
{
    mp_calibrator c = (mp_calibrator)o->calibrate;
    mp_unc_method m = (mp_unc_method)o->uncertainty;
    const char *name = mp_calibrator_name(c), *task = mp_model_task_name(e->cfg.task);
    int cls = mp_head_is_binary(e->cfg.task);
    if (!o->calibration_data)
        return mp_error_set(MP_ERR_ARG, "--calibrate %s needs --calibration-data F", name);
    if (is_mc(e)) {
        if (!mp_calibrator_fits_multiclass(c))
            return mp_error_set(MP_ERR_ARG, "%s: --calibrate %s does not fit this %s model: "
                                "conformal-multiclass, conformal-adaptive or isotonic-multiclass "
                                "calibrate its class probabilities", o->model_path, name, task);
        return MP_OK;
    }
    if (c == MP_CAL_CONFORMAL_MULTILABEL && cls)
        return MP_OK;   /* it reads the probabilities: no --uncertainty needed */
    if (c == MP_CAL_CONFORMAL_MULTICLASS || c == MP_CAL_ISOTONIC_MULTICLASS ||
        c == MP_CAL_CONFORMAL_MULTILABEL || mp_calibrator_is_classification(c) != cls)
        return mp_error_set(MP_ERR_ARG, "%s: --calibrate %s does not fit this %s model%s",
                            o->model_path, name, task,
                            cls ? ": platt, isotonic or conformal-multilabel calibrate a binary "
                                  "classification model"
                            : mp_head_is_regression(e->cfg.task)
                                ? ": zscaling, zelikman, mve-weighting, conformal or "
                                  "conformal-adaptive calibrate a regression model"
                                : "");
    if (c == MP_CAL_MVE_WEIGHTING && !per_member_variance(m))
        return mp_error_set(MP_ERR_ARG, "%s: --calibrate mve-weighting weighs each member's "
                            "variance: it needs --uncertainty mve, evidential or dropout (not %s)",
                            o->model_path, mp_unc_method_name(m));
    if (!cls && c != MP_CAL_CONFORMAL && m == MP_UNC_NONE)
        return mp_error_set(MP_ERR_ARG, "--calibrate %s calibrates a variance: choose "
                            "--uncertainty ensemble or dropout", name);
    return MP_OK;
}

mp_status mp_unc_run_open(mp_unc_run *u, const mp_predict_opts *o, mp_ensemble *e)
{
    memset(u, 0, sizeof *u);
    u->o = o;
    u->e = e;
    mp_unc_method m = (mp_unc_method)o->uncertainty;
    mp_calibrator c = (mp_calibrator)o->calibrate;
    mp_model_task head = e->cfg.task;
    int mc = is_mc(e);
    if (mp_unc_method_needs_head(m) && !method_fits_head(m, head))
        return mp_error_set(MP_ERR_ARG, "%s: --uncertainty %s needs a model trained with --task "
                            "%s (this one is a %s model)", o->model_path, mp_unc_method_name(m),
                            method_task_text(m), mp_model_task_name(head));
    if (m == MP_UNC_ENSEMBLE && e->n_members < 2)
        return mp_error_set(MP_ERR_ARG, "%s: --uncertainty ensemble needs an ensemble (this "
                            "model has 1 member: train with --ensemble-size N, or use "
                            "--uncertainty dropout)", o->model_path);
    mp_status st;
    if (c != MP_CAL_NONE && (st = check_calibrator(o, e)))
        return st;
    int per_class = mc && (m == MP_UNC_ENSEMBLE || m == MP_UNC_DROPOUT);
    u->unc_cols = m != MP_UNC_NONE && !per_class;
    u->class_unc_cols = per_class;
    u->set_cols = mc && (c == MP_CAL_CONFORMAL_MULTICLASS || c == MP_CAL_CONFORMAL_ADAPTIVE);
    u->ml_set_cols = c == MP_CAL_CONFORMAL_MULTILABEL;
    u->interval_cols = !mc && (mp_calibrator_makes_interval(c) || m == MP_UNC_QUANTILE);
    st = mp_ensemble_set_mc_dropout(e, m == MP_UNC_DROPOUT ? o->dropout_samples : 0,
                                    o->dropout_p, o->dropout_seed, 0);
    if (st == MP_OK && c != MP_CAL_NONE)
        st = fit_calibration(u);
    if (st)
        mp_unc_run_free(u);
    return st;
}

void mp_unc_run_free(mp_unc_run *u)
{
    /* conformal-multilabel's one calibrator holds nothing to free */
    for (size_t k = 0; u->cal && !u->ml_set_cols && k < u->e->n_tasks; k++) {
        if (is_mc(u->e))
            mp_mc_calibration_free(&((mp_mc_calibration *)u->cal)[k]);
        else
            mp_calibration_free(&((mp_calibration *)u->cal)[k]);
    }
    mp_free(u->cal);
    mp_free(u->class_unc);
    mp_free(u->in_set);
    mp_free(u->out_set);
    mp_free(u->member_unc);
    u->cal = NULL;
    u->class_unc = u->in_set = u->out_set = u->member_unc = NULL;
    u->cap = 0;
}

/* ===================================================================== */
/* Predicting a chunk                                                     */
/* ===================================================================== */

/* Member by member (the head methods, and any method under mve-weighting):
 * each member's values, then the method's estimate (mp_unc_from_head, or
 * for dropout the members' mean and mean variance over their passes) and,
 * under mve-weighting, each member's variance into u->member_unc. */
static mp_status predict_members(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                                 int32_t n, int32_t batch_size, double *mean, double *unc,
                                 double *lower, double *upper, double *vals)
{
    mp_ensemble *e = u->e;
    mp_unc_method m = (mp_unc_method)u->o->uncertainty;
    size_t t = e->n_tasks, cells = (size_t)n * t, V = (size_t)mp_ensemble_n_values(e);
    int M = e->n_members, head = mp_unc_method_needs_head(m);
    int weigh = u->o->calibrate == MP_CAL_MVE_WEIGHTING;
    size_t blk = cells * V;   /* one member's values */
    double *buf = mp_malloc(sizeof(double) * ((size_t)M * blk * 2 + cells + 1));
    if (!buf)
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory (%zu head values)", cells * V);
    double *sd = buf + (size_t)M * blk, *tmp = sd + (size_t)M * blk;
    mp_status st = MP_OK;
    for (int k = 0; k < M && st == MP_OK; k++)
        st = mp_ensemble_predict_values(e, f, mols, n, k, 1, batch_size, buf + (size_t)k * blk,
                                        head ? NULL : sd + (size_t)k * blk);
    if (st == MP_OK && head) {
        mp_unc_from_head(m, buf, M, cells, mean, unc, lower, upper);
        for (int k = 0; weigh && k < M; k++)
            mp_unc_from_head(m, buf + (size_t)k * cells * V, 1, cells, tmp,
                             u->member_unc + (size_t)k * cells, NULL, NULL);
    } else if (st == MP_OK) {   /* dropout: sd the spread over each member's passes */
        for (size_t c = 0; c < cells; c++) {
            double mu = 0, var = 0;
            for (int k = 0; k < M; k++) {
                size_t at = (size_t)k * blk + c * V;   /* value 0 */
                double v = sd[at] * sd[at];
                mu += buf[at];
                var += v;
                if (weigh)
                    u->member_unc[(size_t)k * cells + c] = v;
            }
            mean[c] = mu / M;
            if (unc)
                unc[c] = var / M;
            if (lower)
                lower[c] = NAN;
            if (upper)
                upper[c] = NAN;
        }
    }
    for (size_t i = 0; st == MP_OK && vals && i < cells * V; i++) {
        double s = 0;
        for (int k = 0; k < M; k++)
            s += buf[(size_t)k * blk + i];
        vals[i] = s / M;
    }
    mp_free(buf);
    return st;
}

/* A multiclass-dirichlet model under --uncertainty dirichlet: each
 * member's raw evidences, then the class probabilities (vals) and u (unc)
 * of mp_unc_multiclass_dirichlet; mean = the probability of class 0. */
static mp_status predict_dirichlet_mc(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                                      int32_t n, int32_t batch_size, double *mean, double *unc,
                                      double *lower, double *upper, double *vals)
{
    mp_ensemble *e = u->e;
    size_t t = e->n_tasks, cells = (size_t)n * t, C = n_cls(e);
    int M = e->n_members;
    double *raw = mp_malloc(sizeof(double) * ((size_t)M * cells * C + cells * C + cells + 1));
    if (!raw)
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory (%zu evidences)", cells * C);
    double *prob = raw + (size_t)M * cells * C, *us = prob + cells * C;
    mp_status st = MP_OK;
    for (int k = 0; k < M && st == MP_OK; k++)
        st = mp_ensemble_predict_raw(e, f, mols, n, k, batch_size, raw + (size_t)k * cells * C);
    if (st == MP_OK) {
        mp_unc_multiclass_dirichlet(raw, M, cells, (int)C, prob, unc ? unc : us);
        for (size_t c = 0; c < cells; c++) {
            mean[c] = prob[c * C];
            if (lower)
                lower[c] = NAN;
            if (upper)
                upper[c] = NAN;
        }
        if (vals)
            memcpy(vals, prob, sizeof(double) * cells * C);
    }
    mp_free(raw);
    return st;
}

/* A head model's values (V per task) without a head method: the member
 * mean and spread of value 0 (ensemble, dropout, none), and of a
 * multiclass model every class's variance into u->class_unc; vals (may be
 * NULL) gets the member mean of every value. */
static mp_status predict_head(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                              int32_t n, int32_t batch_size, double *mean, double *unc,
                              double *lower, double *upper, double *vals)
{
    mp_ensemble *e = u->e;
    mp_unc_method m = (mp_unc_method)u->o->uncertainty;
    size_t t = e->n_tasks, cells = (size_t)n * t, V = (size_t)mp_ensemble_n_values(e);
    double *buf = mp_malloc(sizeof(double) * (2 * cells * V + 1));
    if (!buf)
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory (%zu head values)", cells * V);
    double *mv = buf, *sv = buf + cells * V;
    mp_status st = mp_ensemble_predict_values(e, f, mols, n, 0, 0, batch_size, mv, sv);
    for (size_t i = 0; st == MP_OK && i < cells; i++) {
        mean[i] = mv[i * V];
        if (unc)
            unc[i] = m == MP_UNC_NONE || u->class_unc_cols ? NAN : sv[i * V] * sv[i * V];
        if (lower)
            lower[i] = NAN;
        if (upper)
            upper[i] = NAN;
    }
    for (size_t i = 0; st == MP_OK && u->class_unc_cols && i < cells * V; i++)
        u->class_unc[i] = sv[i] * sv[i];   /* the spread as a variance, per class */
    if (st == MP_OK && vals)
        memcpy(vals, mv, sizeof(double) * cells * V);
    mp_free(buf);
    return st;
}

/* The multiclass calibrators, task by task over the rows' class
 * probabilities in vals (rewritten by isotonic-multiclass; mean follows
 * class 0) or into u->in_set (the conformal ones). */
static mp_status apply_mc(mp_unc_run *u, size_t nr, double *mean, double *vals)
{
    size_t t = u->e->n_tasks, C = n_cls(u->e);
    double *p = mp_malloc(sizeof(double) * (2 * nr * C + 1));
    if (!p)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    double *s = p + nr * C;
    for (size_t k = 0; k < t; k++) {
        const mp_mc_calibration *c = &((const mp_mc_calibration *)u->cal)[k];
        for (size_t i = 0; i < nr; i++)
            memcpy(p + i * C, vals + (i * t + k) * C, sizeof(double) * C);
        mp_mc_calibration_apply(c, p, nr, p, s);
        for (size_t i = 0; i < nr; i++) {
            if (c->kind == MP_CAL_ISOTONIC_MULTICLASS) {
                memcpy(vals + (i * t + k) * C, p + i * C, sizeof(double) * C);
                mean[i * t + k] = p[i * C];
            } else {
                memcpy(u->in_set + (i * t + k) * C, s + i * C, sizeof(double) * C);
            }
        }
    }
    mp_free(p);
    return MP_OK;
}

mp_status mp_unc_run_predict(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                             int32_t n, int32_t batch_size, int64_t row0, double *mean,
                             double *unc, double *lower, double *upper, double *vals)
{
    mp_ensemble *e = u->e;
    const mp_predict_opts *o = u->o;
    mp_unc_method method = (mp_unc_method)o->uncertainty;
    size_t t = e->n_tasks, nr = (size_t)(n > 0 ? n : 0), cells = nr * t;
    mp_status st;
    if ((st = unc_bufs(u, nr)))
        return st;
    if (e->mc_samples > 1 &&
        (st = mp_ensemble_set_mc_dropout(e, e->mc_samples, e->mc_p, e->mc_seed, row0)))
        return st;
    n = n > 0 ? n : 0;
    if (is_mc(e) && method == MP_UNC_DIRICHLET)
        st = predict_dirichlet_mc(u, f, mols, n, batch_size, mean, unc, lower, upper, vals);
    else if (mp_unc_method_needs_head(method) || o->calibrate == MP_CAL_MVE_WEIGHTING)
        st = predict_members(u, f, mols, n, batch_size, mean, unc, lower, upper, vals);
    else if (mp_ensemble_n_values(e) > 1)
        st = predict_head(u, f, mols, n, batch_size, mean, unc, lower, upper, vals);
    else {
        int want_spread = method == MP_UNC_ENSEMBLE || method == MP_UNC_DROPOUT;
        if ((st = mp_ensemble_predict(e, f, mols, n, 0, 0, batch_size, mean,
                                      want_spread ? unc : NULL)))
            return st;
        if (unc && want_spread)
            for (size_t i = 0; i < cells; i++)
                unc[i] *= unc[i];   /* the spread as a variance */
        else if (unc)
            for (size_t i = 0; i < cells; i++)
                unc[i] = NAN;
        for (size_t i = 0; i < cells; i++) {
            if (lower)
                lower[i] = NAN;
            if (upper)
                upper[i] = NAN;
            if (vals)
                vals[i] = mean[i];
        }
    }
    if (st || !u->cal)
        return st;
    if (o->calibrate == MP_CAL_CONFORMAL_MULTILABEL) {   /* one for all the tasks */
        mp_ml_calibration_apply(u->cal, mean, nr, u->in_set, u->out_set);
        return MP_OK;
    }
    if (is_mc(e))
        return apply_mc(u, nr, mean, vals);
    /* the calibrators, task by task over the rows' strided values */
    int M = e->n_members;
    double *col = mp_malloc(sizeof(double) * ((5 + (size_t)M) * nr + 1));
    if (!col)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    double *p = col, *v = col + nr, *lo = col + 2 * nr, *up = col + 3 * nr, *h = col + 4 * nr;
    double *mv = col + 5 * nr;
    for (size_t k = 0; k < t; k++) {
        const mp_calibration *c = &((const mp_calibration *)u->cal)[k];
        int cls = mp_calibrator_is_classification(c->kind);
        for (size_t i = 0; i < nr; i++) {
            p[i] = mean[i * t + k];
            v[i] = unc ? unc[i * t + k] : NAN;
            h[i] = 0;
            for (int q = 0; c->kind == MP_CAL_MVE_WEIGHTING && q < M; q++)
                mv[(size_t)q * nr + i] = u->member_unc[((size_t)q * nr + i) * t + k];
        }
        mp_cal_inputs in = { nr, p, cls ? p : v, h, mv, M };
        mp_calibration_apply(c, &in, cls ? p : v, lo, up);
        for (size_t i = 0; i < nr; i++) {
            if (isnan(mean[i * t + k]))
                continue;   /* an invalid molecule stays empty */
            if (cls)
                mean[i * t + k] = p[i];
            else if (unc)
                unc[i * t + k] = v[i];
            if (lower)
                lower[i * t + k] = lo[i];
            if (upper)
                upper[i * t + k] = up[i];
        }
    }
    mp_free(col);
    return MP_OK;
}

/* ===================================================================== */
/* The set columns                                                        */
/* ===================================================================== */

void mp_unc_run_write_header(const mp_unc_run *u, FILE *fp)
{
    static const char *const ml_suffix[2] = { "in_set", "out_set" };
    for (int s = 0; u->ml_set_cols && s < 2; s++)
        for (size_t k = 0; k < u->e->n_tasks; k++) {
            char name[1100];
            snprintf(name, sizeof name, "%s_%s", u->e->task_names[k], ml_suffix[s]);
            fputc(',', fp);
            mp_csv_write_field(fp, name);
        }
    static const char *const suffix[2] = { "unc", "in_set" };
    int want[2] = { u->class_unc_cols, u->set_cols };
    size_t C = n_cls(u->e);
    for (int s = 0; s < 2; s++)
        for (size_t k = 0; want[s] && k < u->e->n_tasks; k++)
            for (size_t c = 0; c < C; c++) {
                char name[1100];
                snprintf(name, sizeof name, "%s_class%zu_%s", u->e->task_names[k], c, suffix[s]);
                fputc(',', fp);
                mp_csv_write_field(fp, name);
            }
}

void mp_unc_run_write_row(const mp_unc_run *u, FILE *fp, size_t i)
{
    const double *ml_src[2] = { u->in_set, u->out_set };
    size_t t = u->e->n_tasks;
    for (int s = 0; u->ml_set_cols && s < 2; s++)
        for (size_t k = 0; k < t; k++) {
            double v = ml_src[s][i * t + k];
            fputc(',', fp);
            if (!isnan(v))
                fprintf(fp, "%.0f", v);
        }
    const double *src[2] = { u->class_unc, u->in_set };
    int want[2] = { u->class_unc_cols, u->set_cols };
    size_t C = n_cls(u->e), w = u->e->n_tasks * C;
    for (int s = 0; s < 2; s++)
        for (size_t j = 0; want[s] && j < w; j++) {
            double v = src[s][i * w + j];
            fputc(',', fp);
            if (!isnan(v))
                fprintf(fp, "%.9g", v);
        }
}
