/*
 * unc_eval.c - `molprop eval --preds P --data T --uncertainty-metrics ...`
 * (predict.h): the uncertainty metrics (data/unc_metrics.h) of a prediction
 * file that `molprop predict --uncertainty / --calibrate` wrote
 * (predict_unc.c), against a labelled file with the same rows.
 */
#include "run/predict.h"

#include "data/unc_metrics.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

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

/*
 * Task j of T when P predicts it as a multiclass model does (columns
 * <task>_class0 ..): C = the number of those columns (0: it does not), and
 * its nll (of the class probabilities) and coverage (of the prediction
 * sets <task>_class<k>_in_set) into sc[0..nm); the other metrics do not
 * apply (MP_ERR_ARG).  Labels must be classes (MP_ERR_FORMAT naming the
 * line).  n_used: the labelled molecules with a prediction.
 */
static mp_status eval_mc_task(const mp_dataset *P, const mp_dataset *T, size_t j,
                              const mp_unc_metric *ms, int nm, size_t *C_out, double *sc,
                              size_t *n_used)
{
    const char *task = T->task_names[j];
    char name[1100];
    size_t C = 0, cc[256], cs[256];
    int have_sets = 1;
    for (; C < 256; C++) {
        snprintf(name, sizeof name, "%s_class%zu", task, C);
        if ((cc[C] = find_column(P, name)) == SIZE_MAX)
            break;
        snprintf(name, sizeof name, "%s_class%zu_in_set", task, C);
        have_sets &= (cs[C] = find_column(P, name)) != SIZE_MAX;
    }
    *C_out = C;
    if (C == 0)
        return MP_OK;
    size_t n = T->n_rows, m = 0;
    double *buf = mp_malloc(sizeof(double) * (n ? n : 1) * (2 * C + 1));
    if (!buf)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    double *prob = buf, *set = buf + n * C, *y = buf + 2 * n * C;
    mp_status st = MP_OK;
    for (size_t i = 0; i < n && st == MP_OK; i++) {
        double target = T->targets[i * T->n_tasks + j];
        if (isnan(target) || isnan(P->targets[i * P->n_tasks + cc[0]]))
            continue;
        if (!(target >= 0 && target < (double)C && target == floor(target))) {
            st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: label %g of '%s' in '%s' is not a class "
                              "(0 to %zu)", T->path, T->line[i], target, T->smiles[i], task,
                              C - 1);
            break;
        }
        for (size_t k = 0; k < C; k++) {
            prob[m * C + k] = P->targets[i * P->n_tasks + cc[k]];
            set[m * C + k] = have_sets ? P->targets[i * P->n_tasks + cs[k]] : NAN;
        }
        y[m++] = target;
    }
    for (int k = 0; k < nm && st == MP_OK; k++) {
        if (ms[k] == MP_UNC_METRIC_NLL)
            sc[k] = mp_unc_nll_multiclass(prob, y, m, (int)C);
        else if (ms[k] == MP_UNC_METRIC_COVERAGE && have_sets)
            sc[k] = mp_unc_coverage_sets(set, y, m, (int)C);
        else if (ms[k] == MP_UNC_METRIC_COVERAGE)
            st = mp_error_set(MP_ERR_FORMAT, "%s: no columns '%s_class<k>_in_set' (needed by "
                              "coverage: predict with --calibrate conformal-multiclass or "
                              "conformal-adaptive)", P->path, task);
        else
            st = mp_error_set(MP_ERR_ARG, "%s: task '%s' is multiclass: only nll and coverage "
                              "apply, not %s", T->path, task, mp_unc_metric_name(ms[k]));
    }
    *n_used = m;
    mp_free(buf);
    return st;
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
    double *buf = NULL, *ml = NULL;
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
    /* conformal-multilabel's sets and labels, n x tasks each, for the
     * coverage of every molecule over all its tasks at once */
    size_t nt = T->n_tasks, ml_cells = n * nt;
    ml = mp_malloc(sizeof(double) * 3 * (ml_cells ? ml_cells : 1));
    if (!res->per_task || !buf || !rowi || !ml) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    double *ml_in = ml, *ml_out = ml + ml_cells, *ml_y = ml + 2 * ml_cells;
    for (size_t c = 0; c < 3 * ml_cells; c++)
        ml[c] = NAN;   /* tasks without sets stay out */
    int ml_tasks = 0, want_coverage = 0;
    for (int k = 0; k < nm; k++)
        want_coverage |= ms[k] == MP_UNC_METRIC_COVERAGE;
    double sums[8] = { 0 };
    int counts[8] = { 0 };
    for (size_t j = 0; j < T->n_tasks; j++) {
        const char *task = T->task_names[j];
        char name[1100];
        size_t cp = find_column(P, task), cu, cl, ch;
        if (cp == SIZE_MAX)
            continue;   /* a labelled column the predictions do not have */
        size_t C = 0, used = 0;
        double mcs[MP_UNC_METRIC_COUNT];
        if ((st = eval_mc_task(P, T, j, ms, nm, &C, mcs, &used)))
            goto done;
        if (C > 0) {   /* a multiclass task */
            for (int k = 0; k < nm; k++) {
                res->per_task[(size_t)k * T->n_tasks + res->n_tasks] = mcs[k];
                if (!isnan(mcs[k])) {
                    sums[k] += mcs[k];
                    counts[k]++;
                }
            }
            res->n_tasks++;
            res->n_rows = used > res->n_rows ? used : res->n_rows;
            continue;
        }
        snprintf(name, sizeof name, "%s_unc", task);
        cu = find_column(P, name);
        snprintf(name, sizeof name, "%s_lower", task);
        cl = find_column(P, name);
        snprintf(name, sizeof name, "%s_upper", task);
        ch = find_column(P, name);
        /* conformal-multilabel's sets take the place of the interval */
        snprintf(name, sizeof name, "%s_in_set", task);
        size_t ci = find_column(P, name);
        snprintf(name, sizeof name, "%s_out_set", task);
        size_t co = find_column(P, name);
        int sets = ci != SIZE_MAX && co != SIZE_MAX;
        if (sets) {
            cl = ci;
            ch = co;
        }
        double *p = buf, *v = buf + n, *lo = buf + 2 * n, *up = buf + 3 * n, *y = buf + 4 * n;
        size_t m = 0;
        int binary = 1;
        for (size_t i = 0; i < n; i++) {
            double target = T->targets[i * T->n_tasks + j];
            double pred = P->targets[i * P->n_tasks + cp];
            if (isnan(target) || isnan(pred))
                continue;   /* no label, or no prediction (an invalid molecule) */
            binary &= target == 0 || target == 1;
            if (sets && !binary) {
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: label %g of '%s' in '%s' is not 0 or "
                                  "1 (%s has its conformal-multilabel sets)", truth_path,
                                  T->line[i], target, T->smiles[i], task, preds_path);
                goto done;
            }
            rowi[m] = i;
            y[m] = target;
            p[m] = pred;
            v[m] = cu != SIZE_MAX ? P->targets[i * P->n_tasks + cu] : NAN;
            lo[m] = cl != SIZE_MAX ? P->targets[i * P->n_tasks + cl] : NAN;
            up[m] = ch != SIZE_MAX ? P->targets[i * P->n_tasks + ch] : NAN;
            if (sets) {
                ml_in[i * nt + j] = lo[m];
                ml_out[i * nt + j] = up[m];
                ml_y[i * nt + j] = target;
            }
            m++;
        }
        ml_tasks += sets;
        for (int k = 0; k < nm; k++) {
            int needs_var = !(ms[k] == MP_UNC_METRIC_COVERAGE ||
                              (ms[k] == MP_UNC_METRIC_NLL && binary));
            if (needs_var && cu == SIZE_MAX) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: no column '%s_unc' (needed by %s)",
                                  preds_path, task, mp_unc_metric_name(ms[k]));
                goto done;
            }
            if (ms[k] == MP_UNC_METRIC_COVERAGE && binary && !sets) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: no columns '%s_in_set' and '%s_out_set' "
                                  "(needed by coverage of a binary task: predict with "
                                  "--calibrate conformal-multilabel)", preds_path, task, task);
                goto done;
            }
            if (ms[k] == MP_UNC_METRIC_COVERAGE && (cl == SIZE_MAX || ch == SIZE_MAX)) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: no columns '%s_lower' and '%s_upper' "
                                  "(needed by coverage: predict with --calibrate conformal)",
                                  preds_path, task, task);
                goto done;
            }
            if (binary && ms[k] != MP_UNC_METRIC_NLL && ms[k] != MP_UNC_METRIC_COVERAGE) {
                st = mp_error_set(MP_ERR_ARG, "%s: task '%s' is binary: only nll and coverage "
                                  "(of conformal-multilabel's sets) apply, not %s", truth_path,
                                  task, mp_unc_metric_name(ms[k]));
                goto done;
            }
            for (size_t i = 0; needs_var && i < m; i++)
                if (!(v[i] > 0)) {
                    st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: %s_unc of '%s' is %g (a variance "
                                      "must be positive)", preds_path, P->line[rowi[i]], task,
                                      P->smiles[rowi[i]], v[i]);
                    goto done;
                }
            double sc = ms[k] == MP_UNC_METRIC_COVERAGE && sets
                            ? mp_unc_coverage_multilabel(lo, up, y, m, 1, NULL)   /* its share */
                            : score(ms[k], binary, p, v, lo, up, y, m);
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
    if (ml_tasks > 0 && want_coverage) {   /* of the sets over all the tasks at once */
        size_t used = 0;
        double joint = mp_unc_coverage_multilabel(ml_in, ml_out, ml_y, n, nt, &used);
        for (int k = 0; k < nm; k++)
            if (ms[k] == MP_UNC_METRIC_COVERAGE)
                res->mean[k] = joint;
        res->n_rows = used > res->n_rows ? used : res->n_rows;
    }
done:
    mp_free(buf);
    mp_free(ml);
    mp_free(rowi);
    mp_dataset_free(P);
    mp_dataset_free(T);
    if (st)
        mp_unc_eval_result_free(res);
    return st;
}
