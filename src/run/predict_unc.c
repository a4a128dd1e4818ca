/*
 * predict_unc.c - the uncertainty side of `molprop predict` and `molprop
 * eval --uncertainty-metrics` (predict.h): the estimator a run uses
 * (uncertainty.h), the calibrators fitted on a labelled file (calibrate.h)
 * and applied chunk by chunk, and the uncertainty metrics of a prediction
 * file against a labelled one (unc_metrics.h).
 *
 * Conventions (Chemprop v2.3.1's where it has one): a regression <task>_unc
 * is a variance in the target's units squared; a classification one the
 * variance of the probability over members / passes; platt and isotonic
 * recalibrate the probability column itself; intervals are written as
 * <task>_lower / <task>_upper.
 */
#include "run/predict.h"

#include "data/unc_metrics.h"
#include "models/heads.h"
#include "run/calibrate.h"
#include "run/uncertainty.h"

#include <math.h>
#include <string.h>

#define CAL_BATCH_HOST 256
#define CAL_BATCH_DEVICE 4096

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

/* Predicts the calibration file and fits one calibrator per task on its
 * labelled rows. */
static mp_status fit_calibration(mp_unc_run *u)
{
    const mp_predict_opts *o = u->o;
    mp_ensemble *e = u->e;
    size_t t = e->n_tasks;
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
    size_t n = d->n_rows, nv = 0;
    size_t *col = mp_malloc(sizeof(size_t) * t);
    int32_t *idx = mp_malloc(sizeof(int32_t) * (n ? n : 1));
    double *buf = mp_malloc(sizeof(double) * (n ? n : 1) * t * 4);
    double *y = mp_malloc(sizeof(double) * (n ? n : 1) * 5);
    u->cal = mp_calloc(t, sizeof(mp_calibration));
    if (!col || !idx || !buf || !y || !u->cal) {
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
    int32_t batch = e->backend->host_memory ? CAL_BATCH_HOST : CAL_BATCH_DEVICE;
    /* keys of the calibration rows: a stream of their own (row0 past any input) */
    if ((st = mp_unc_run_predict(u, f, idx, (int32_t)nv, batch, INT64_C(1) << 40, mean, unc, lo,
                                 up, NULL)))
        goto done;
    double *yp = y, *pp = y + n, *up_ = y + 2 * n, *hp = y + 3 * n;
    for (size_t k = 0; k < t; k++) {
        size_t m = 0;
        for (size_t r = 0; r < nv; r++) {
            double target = d->targets[(size_t)idx[r] * d->n_tasks + col[k]];
            if (isnan(target))
                continue;
            yp[m] = target;
            pp[m] = mean[r * t + k];
            up_[m] = unc ? unc[r * t + k] : NAN;
            hp[m] = o->uncertainty == MP_UNC_QUANTILE ? unc[r * t + k] : 0;
            m++;
        }
        mp_calibrator kind = (mp_calibrator)o->calibrate;
        mp_cal_inputs in = { m, pp, mp_calibrator_is_classification(kind) ? pp : up_, hp, NULL,
                             0 };
        if ((st = mp_calibration_fit(&((mp_calibration *)u->cal)[k], kind, o->alpha, &in, yp))) {
            st = mp_error_set(st, "%s, task '%s': %s", o->calibration_data, e->task_names[k],
                              mp_error_message());
            goto done;
        }
    }
done:
    mp_columns_files_free(&cols);
    mp_free(col);
    mp_free(idx);
    mp_free(buf);
    mp_free(y);
    mp_features_free(f);
    mp_dataset_free(d);
    return st;
}

/* The task type whose head a head-reading method reads (heads.h). */
static mp_model_task method_head(mp_unc_method m)
{
    switch (m) {
    case MP_UNC_MVE: return MP_MODEL_REGRESSION_MVE;
    case MP_UNC_QUANTILE: return MP_MODEL_REGRESSION_QUANTILE;
    case MP_UNC_DIRICHLET: return MP_MODEL_CLASSIFICATION_DIRICHLET;
    default: return MP_MODEL_REGRESSION_EVIDENTIAL;
    }
}

mp_status mp_unc_run_open(mp_unc_run *u, const mp_predict_opts *o, mp_ensemble *e)
{
    memset(u, 0, sizeof *u);
    u->o = o;
    u->e = e;
    mp_unc_method m = (mp_unc_method)o->uncertainty;
    mp_calibrator c = (mp_calibrator)o->calibrate;
    int cls = e->task == MP_TASK_CLASSIFICATION;
    mp_model_task head = e->cfg.task;
    if (mp_unc_method_needs_head(m) && head != method_head(m))
        return mp_error_set(MP_ERR_ARG, "--uncertainty %s needs a model trained with --task %s "
                            "(this one is a %s model)", mp_unc_method_name(m),
                            mp_model_task_name(method_head(m)), mp_model_task_name(head));
    if (mp_head_is_multiclass(head) && (m != MP_UNC_NONE || c != MP_CAL_NONE))
        return mp_error_set(MP_ERR_ARG, "a %s model predicts class probabilities, which "
                            "--uncertainty and --calibrate do not take yet: leave both out",
                            mp_model_task_name(head));
    if (m == MP_UNC_ENSEMBLE && e->n_members < 2)
        return mp_error_set(MP_ERR_ARG, "--uncertainty ensemble needs an ensemble (this model "
                            "has 1 member: train with --ensemble-size N, or use --uncertainty "
                            "dropout)");
    if (c != MP_CAL_NONE) {
        if (!o->calibration_data)
            return mp_error_set(MP_ERR_ARG, "--calibrate %s needs --calibration-data F",
                                mp_calibrator_name(c));
        if (mp_calibrator_is_classification(c) != cls)
            return mp_error_set(MP_ERR_ARG, "--calibrate %s does not fit this %s model",
                                mp_calibrator_name(c), mp_task_type_name(e->task));
        if (c == MP_CAL_MVE_WEIGHTING)
            return mp_error_set(MP_ERR_ARG, "--calibrate mve-weighting needs an ensemble of "
                                "MVE models (--uncertainty mve)");
        if (!cls && c != MP_CAL_CONFORMAL && m == MP_UNC_NONE)
            return mp_error_set(MP_ERR_ARG, "--calibrate %s calibrates a variance: choose "
                                "--uncertainty ensemble or dropout", mp_calibrator_name(c));
    }
    u->unc_cols = m != MP_UNC_NONE;
    u->interval_cols = mp_calibrator_makes_interval(c) || m == MP_UNC_QUANTILE;
    mp_status st = mp_ensemble_set_mc_dropout(e, m == MP_UNC_DROPOUT ? o->dropout_samples : 0,
                                              o->dropout_p, o->dropout_seed, 0);
    if (st == MP_OK && c != MP_CAL_NONE)
        st = fit_calibration(u);
    if (st)
        mp_unc_run_free(u);
    return st;
}

void mp_unc_run_free(mp_unc_run *u)
{
    if (u->cal)
        for (size_t k = 0; k < u->e->n_tasks; k++)
            mp_calibration_free(&((mp_calibration *)u->cal)[k]);
    mp_free(u->cal);
    u->cal = NULL;
}

/* ===================================================================== */
/* Predicting a chunk                                                     */
/* ===================================================================== */

/* A head model's values (V per task): every member's through the head
 * estimator of the method when it reads one (mp_unc_from_head: member by
 * member, as Chemprop's estimators average per-member uncertainties), else
 * the member mean and spread of value 0 (ensemble, dropout, none); vals
 * (may be NULL) gets the member mean of every value. */
static mp_status predict_head(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                              int32_t n, int32_t batch_size, double *mean, double *unc,
                              double *lower, double *upper, double *vals)
{
    mp_ensemble *e = u->e;
    mp_unc_method m = (mp_unc_method)u->o->uncertainty;
    size_t t = e->n_tasks, cells = (size_t)n * t, V = (size_t)mp_ensemble_n_values(e);
    int M = e->n_members, per_member = mp_unc_method_needs_head(m);
    size_t blocks = per_member ? (size_t)M : 2;
    double *buf = mp_malloc(sizeof(double) * (blocks * cells * V + 1));
    if (!buf)
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory (%zu head values)", cells * V);
    mp_status st = MP_OK;
    if (per_member) {
        for (int k = 0; k < M && st == MP_OK; k++)
            st = mp_ensemble_predict_values(e, f, mols, n, k, 1, batch_size,
                                            buf + (size_t)k * cells * V, NULL);
        if (st == MP_OK) {
            mp_unc_from_head(m, buf, M, cells, mean, unc, lower, upper);
            for (size_t i = 0; vals && i < cells * V; i++) {
                double s = 0;
                for (int k = 0; k < M; k++)
                    s += buf[(size_t)k * cells * V + i];
                vals[i] = s / M;
            }
        }
    } else {
        double *mv = buf, *sv = buf + cells * V;
        st = mp_ensemble_predict_values(e, f, mols, n, 0, 0, batch_size, mv, sv);
        for (size_t i = 0; st == MP_OK && i < cells; i++) {
            mean[i] = mv[i * V];
            if (unc)
                unc[i] = m == MP_UNC_NONE ? NAN : sv[i * V] * sv[i * V];
            if (lower)
                lower[i] = NAN;
            if (upper)
                upper[i] = NAN;
        }
        if (st == MP_OK && vals)
            memcpy(vals, mv, sizeof(double) * cells * V);
    }
    mp_free(buf);
    return st;
}

mp_status mp_unc_run_predict(mp_unc_run *u, const mp_features *f, const int32_t *mols,
                             int32_t n, int32_t batch_size, int64_t row0, double *mean,
                             double *unc, double *lower, double *upper, double *vals)
{
    mp_ensemble *e = u->e;
    const mp_predict_opts *o = u->o;
    size_t t = e->n_tasks, cells = (size_t)(n > 0 ? n : 0) * t;
    mp_status st;
    if (e->mc_samples > 1 &&
        (st = mp_ensemble_set_mc_dropout(e, e->mc_samples, e->mc_p, e->mc_seed, row0)))
        return st;
    if (mp_ensemble_n_values(e) > 1) {
        if ((st = predict_head(u, f, mols, n > 0 ? n : 0, batch_size, mean, unc, lower, upper,
                               vals)))
            return st;
    } else {
        int want_spread = o->uncertainty == MP_UNC_ENSEMBLE || o->uncertainty == MP_UNC_DROPOUT;
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
    if (!u->cal)
        return MP_OK;
    /* the calibrators, task by task over the rows' strided values */
    size_t nr = (size_t)(n > 0 ? n : 0);
    double *col = mp_malloc(sizeof(double) * (5 * nr + 1));
    if (!col)
        return mp_error_set(MP_ERR_NOMEM, "calibration: out of memory");
    double *p = col, *v = col + nr, *lo = col + 2 * nr, *up = col + 3 * nr, *h = col + 4 * nr;
    for (size_t k = 0; k < t; k++) {
        const mp_calibration *c = &((const mp_calibration *)u->cal)[k];
        int cls = mp_calibrator_is_classification(c->kind);
        for (size_t i = 0; i < nr; i++) {
            p[i] = mean[i * t + k];
            v[i] = unc ? unc[i * t + k] : NAN;
            h[i] = 0;
        }
        mp_cal_inputs in = { nr, p, cls ? p : v, h, NULL, 0 };
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
/* Uncertainty metrics of a prediction file                               */
/* ===================================================================== */

void mp_unc_eval_result_free(mp_unc_eval_result *r)
{
    mp_free(r->per_task);
    memset(r, 0, sizeof *r);
}

/* The column of d named `name` (SIZE_MAX when absent). */
static size_t find_column(const mp_dataset *d, const char *name)
{
    for (size_t j = 0; j < d->n_tasks; j++)
        if (!strcmp(d->task_names[j], name))
            return j;
    return SIZE_MAX;
}

/* Scores metric m on the labelled rows of one task. */
static double score(mp_unc_metric m, int binary, const double *p, const double *v,
                    const double *lo, const double *up, const double *y, size_t n)
{
    switch (m) {
    case MP_UNC_METRIC_NLL:
        return binary ? mp_unc_nll_binary(p, y, n) : mp_unc_nll_regression(p, v, y, n);
    case MP_UNC_METRIC_MISCAL_AREA:
        return mp_unc_miscalibration_area(p, v, y, n, 100);
    case MP_UNC_METRIC_ENCE:
        return mp_unc_ence(p, v, y, n, 100);
    case MP_UNC_METRIC_SPEARMAN:
        return mp_unc_spearman(p, v, y, n);
    case MP_UNC_METRIC_COVERAGE:
        return mp_unc_coverage(lo, up, y, n);
    default:
        return NAN;
    }
}

mp_status mp_unc_eval_file(const char *preds_path, const char *truth_path,
                           const char *smiles_column, const char *metrics,
                           mp_unc_eval_result *res)
{
    memset(res, 0, sizeof *res);
    mp_unc_metric ms[MP_UNC_METRIC_COUNT];
    int nm = 0;
    mp_status st = mp_unc_metric_list_parse(metrics, ms, &nm);
    if (st)
        return st;
    mp_dataset *P = NULL, *T = NULL;
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.smiles_column = smiles_column;
    double *buf = NULL;
    size_t *rowi = NULL;
    if ((st = mp_dataset_load(&P, preds_path, &spec)) ||
        (st = mp_dataset_load(&T, truth_path, &spec)))
        goto done;
    if (P->n_rows != T->n_rows) {
        st = mp_error_set(MP_ERR_FORMAT, "%s has %zu rows, %s %zu: they must be the same "
                          "molecules in the same order", preds_path, P->n_rows, truth_path,
                          T->n_rows);
        goto done;
    }
    for (size_t i = 0; i < P->n_rows; i++)
        if (strcmp(P->smiles[i], T->smiles[i])) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: SMILES '%s' where %s:%zu has '%s'",
                              preds_path, P->line[i], P->smiles[i], truth_path, T->line[i],
                              T->smiles[i]);
            goto done;
        }
    size_t n = T->n_rows;
    res->n_metrics = nm;
    for (int k = 0; k < nm; k++)
        res->metrics[k] = ms[k];
    res->per_task = mp_malloc(sizeof(double) * (size_t)nm * (T->n_tasks ? T->n_tasks : 1));
    buf = mp_malloc(sizeof(double) * 5 * (n ? n : 1));
    rowi = mp_malloc(sizeof(size_t) * (n ? n : 1));
    if (!res->per_task || !buf || !rowi) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    double sums[8] = { 0 };
    int counts[8] = { 0 };
    for (size_t j = 0; j < T->n_tasks; j++) {
        const char *task = T->task_names[j];
        char name[1100];
        size_t cp = find_column(P, task), cu, cl, ch;
        if (cp == SIZE_MAX)
            continue;   /* a labelled column the predictions do not have */
        snprintf(name, sizeof name, "%s_unc", task);
        cu = find_column(P, name);
        snprintf(name, sizeof name, "%s_lower", task);
        cl = find_column(P, name);
        snprintf(name, sizeof name, "%s_upper", task);
        ch = find_column(P, name);
        double *p = buf, *v = buf + n, *lo = buf + 2 * n, *up = buf + 3 * n, *y = buf + 4 * n;
        size_t m = 0;
        int binary = 1;
        for (size_t i = 0; i < n; i++) {
            double target = T->targets[i * T->n_tasks + j];
            double pred = P->targets[i * P->n_tasks + cp];
            if (isnan(target) || isnan(pred))
                continue;   /* no label, or no prediction (an invalid molecule) */
            binary &= target == 0 || target == 1;
            rowi[m] = i;
            y[m] = target;
            p[m] = pred;
            v[m] = cu != SIZE_MAX ? P->targets[i * P->n_tasks + cu] : NAN;
            lo[m] = cl != SIZE_MAX ? P->targets[i * P->n_tasks + cl] : NAN;
            up[m] = ch != SIZE_MAX ? P->targets[i * P->n_tasks + ch] : NAN;
            m++;
        }
        for (int k = 0; k < nm; k++) {
            int needs_var = !(ms[k] == MP_UNC_METRIC_COVERAGE ||
                              (ms[k] == MP_UNC_METRIC_NLL && binary));
            if (needs_var && cu == SIZE_MAX) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: no column '%s_unc' (needed by %s)",
                                  preds_path, task, mp_unc_metric_name(ms[k]));
                goto done;
            }
            if (ms[k] == MP_UNC_METRIC_COVERAGE && (cl == SIZE_MAX || ch == SIZE_MAX)) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: no columns '%s_lower' and '%s_upper' "
                                  "(needed by coverage: predict with --calibrate conformal)",
                                  preds_path, task, task);
                goto done;
            }
            if (binary && ms[k] != MP_UNC_METRIC_NLL) {
                st = mp_error_set(MP_ERR_ARG, "%s: task '%s' is binary: only nll applies, not %s",
                                  truth_path, task, mp_unc_metric_name(ms[k]));
                goto done;
            }
            for (size_t i = 0; needs_var && i < m; i++)
                if (!(v[i] > 0)) {
                    st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: %s_unc of '%s' is %g (a variance "
                                      "must be positive)", preds_path, P->line[rowi[i]], task,
                                      P->smiles[rowi[i]], v[i]);
                    goto done;
                }
            double sc = score(ms[k], binary, p, v, lo, up, y, m);
            res->per_task[(size_t)k * T->n_tasks + res->n_tasks] = sc;
            if (!isnan(sc)) {
                sums[k] += sc;
                counts[k]++;
            }
        }
        res->n_tasks++;
        res->n_rows = m > res->n_rows ? m : res->n_rows;
    }
    if (res->n_tasks == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s predicts none of the columns of %s", preds_path,
                          truth_path);
        goto done;
    }
    for (int k = 0; k < nm; k++)
        res->mean[k] = counts[k] ? sums[k] / counts[k] : NAN;
done:
    mp_free(buf);
    mp_free(rowi);
    mp_dataset_free(P);
    mp_dataset_free(T);
    if (st)
        mp_unc_eval_result_free(res);
    return st;
}
