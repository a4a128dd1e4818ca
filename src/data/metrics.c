/*
 * metrics.c - Chemprop v1's metrics, computed as scikit-learn computes them
 * (down to NumPy's pairwise summation, so the last bits agree), the ROC and
 * precision-recall curves behind the two AUCs, and the metrics.json report.
 */
#include "metrics.h"
#include "data/spectra.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Names and properties                                                   */
/* ===================================================================== */

static const char *const metric_names[MP_METRIC_COUNT] = {
    "rmse", "mae", "mse", "r2", "auc", "prc-auc", "accuracy", "sid", "wasserstein",
};

static const struct {
    const char *alias;
    mp_metric   m;
} metric_aliases[] = {
    { "roc-auc", MP_METRIC_AUC },     { "roc_auc", MP_METRIC_AUC },
    { "rocauc", MP_METRIC_AUC },      { "prc_auc", MP_METRIC_PRC_AUC },
    { "pr-auc", MP_METRIC_PRC_AUC },  { "prcauc", MP_METRIC_PRC_AUC },
};

mp_status mp_metric_parse(const char *name, mp_metric *out)
{
    if (!name)
        return mp_error_set(MP_ERR_ARG, "no metric name given");
    for (int i = 0; i < MP_METRIC_COUNT; i++)
        if (mp_strcaseeq(name, metric_names[i])) {
            *out = (mp_metric)i;
            return MP_OK;
        }
    for (size_t i = 0; i < sizeof metric_aliases / sizeof *metric_aliases; i++)
        if (mp_strcaseeq(name, metric_aliases[i].alias)) {
            *out = metric_aliases[i].m;
            return MP_OK;
        }
    return mp_error_set(MP_ERR_ARG,
                        "unknown metric '%s' (valid: rmse, mae, mse, r2, auc, prc-auc, accuracy, "
                        "sid, wasserstein)",
                        name);
}

const char *mp_metric_name(mp_metric m)
{
    return (unsigned)m < MP_METRIC_COUNT ? metric_names[m] : "?";
}

int mp_metric_higher_is_better(mp_metric m)
{
    return m == MP_METRIC_R2 || m == MP_METRIC_AUC || m == MP_METRIC_PRC_AUC ||
           m == MP_METRIC_ACCURACY;
}

int mp_metric_is_spectral(mp_metric m)
{
    return m == MP_METRIC_SID || m == MP_METRIC_WASSERSTEIN;
}

int mp_metric_is_classification(mp_metric m)
{
    return m == MP_METRIC_AUC || m == MP_METRIC_PRC_AUC || m == MP_METRIC_ACCURACY;
}

int mp_metric_is_scale_dependent(mp_metric m)
{
    return m == MP_METRIC_RMSE || m == MP_METRIC_MAE || m == MP_METRIC_MSE;
}

const char *mp_score_status_text(mp_score_status s)
{
    switch (s) {
    case MP_SCORE_OK:            return "ok";
    case MP_SCORE_NO_LABELS:     return "no labelled rows";
    case MP_SCORE_ONE_CLASS:     return "targets all 0 or all 1";
    case MP_SCORE_CONSTANT_PRED: return "predictions all 0 or all 1";
    case MP_SCORE_NOT_BINARY:    return "a target is neither 0 nor 1";
    case MP_SCORE_NAN_PRED:      return "a prediction is NaN";
    case MP_SCORE_TOO_FEW:       return "fewer than two labelled rows";
    }
    return "?";
}

/* ===================================================================== */
/* NumPy's summation                                                      */
/* ===================================================================== */


/* ===================================================================== */
/* Gathering one task                                                     */
/* ===================================================================== */

/* The labelled rows of one task, copied contiguously (pred, target). */
typedef struct {
    double *p, *t;
    size_t  n;
} task_rows;

static mp_status gather(task_rows *g, const double *pred, size_t ps,
                        const double *target, size_t ts, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !isnan(target[i * ts]);
    g->n = k;
    g->p = mp_malloc((k ? k : 1) * 2 * sizeof(double));
    if (!g->p)
        return mp_error_set(MP_ERR_NOMEM, "out of memory scoring %zu rows", n);
    g->t = g->p + (k ? k : 1);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(target[i * ts])) {
            g->p[k] = pred[i * ps];
            g->t[k] = target[i * ts];
            k++;
        }
    return MP_OK;
}

/* ===================================================================== */
/* Regression scores                                                      */
/* ===================================================================== */

/* mean of f(t - p) as np.average does it: a pairwise sum divided by n. */
static double mean_sq_err(const double *p, const double *t, double *tmp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double d = t[i] - p[i];
        tmp[i] = d * d;
    }
    return mp_pairwise_sum(tmp, n) / (double)n;
}

static double mean_abs_err(const double *p, const double *t, double *tmp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tmp[i] = fabs(p[i] - t[i]);
    return mp_pairwise_sum(tmp, n) / (double)n;
}

/* sklearn r2_score with force_finite=True: a constant target gives 1 when
 * the fit is perfect, else 0. */
static double r2_score(const double *p, const double *t, double *tmp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double d = t[i] - p[i];
        tmp[i] = d * d;
    }
    double num = mp_pairwise_sum(tmp, n);
    for (size_t i = 0; i < n; i++)
        tmp[i] = t[i];
    double mean = mp_pairwise_sum(tmp, n) / (double)n;
    for (size_t i = 0; i < n; i++) {
        double d = t[i] - mean;
        tmp[i] = d * d;
    }
    double den = mp_pairwise_sum(tmp, n);
    if (den != 0.0)
        return 1.0 - num / den;
    return num != 0.0 ? 0.0 : 1.0;
}

/* ===================================================================== */
/* Ranking: the confusion counts at each distinct score                   */
/* ===================================================================== */

typedef struct {
    double score, label;
} scored;

static int by_score_desc(const void *a, const void *b)
{
    double x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x < y) - (x > y);
}

/*
 * sklearn's confusion_matrix_at_thresholds: sort by score, descending; for
 * each distinct score (the last row of each run of ties) the number of true
 * and false positives among the rows scored at least that high.  Fills
 * tps/fps/thr (arrays of n) and returns the number of distinct scores.  The
 * order inside a run of ties does not matter: only run ends are read.
 */
static size_t clf_curve(scored *s, size_t n, double *tps, double *fps, double *thr)
{
    qsort(s, n, sizeof *s, by_score_desc);
    size_t k = 0;
    double pos = 0;
    for (size_t i = 0; i < n; i++) {
        pos += s[i].label;
        if (i + 1 == n || s[i + 1].score != s[i].score) {
            tps[k] = pos;
            fps[k] = (double)(i + 1) - pos;
            thr[k] = s[i].score;
            k++;
        }
    }
    return k;
}

/* Copies (score, target) pairs with a label; checks labels and scores. */
static mp_status gather_scored(scored **out, size_t *n_out, const double *score, size_t ss,
                               const double *target, size_t ts, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !isnan(target[i * ts]);
    if (k == 0)
        return mp_error_set(MP_ERR_ARG, "no labelled rows for a curve");
    scored *s = mp_malloc(k * sizeof *s);
    if (!s)
        return mp_error_set(MP_ERR_NOMEM, "out of memory ranking %zu rows", k);
    k = 0;
    for (size_t i = 0; i < n; i++) {
        double t = target[i * ts], p = score[i * ss];
        if (isnan(t))
            continue;
        if (t != 0.0 && t != 1.0) {
            mp_free(s);
            return mp_error_set(MP_ERR_ARG, "row %zu: target %g is not 0 or 1", i, t);
        }
        if (isnan(p)) {
            mp_free(s);
            return mp_error_set(MP_ERR_ARG, "row %zu: score is NaN", i);
        }
        s[k++] = (scored){ p, t };
    }
    *out = s;
    *n_out = k;
    return MP_OK;
}

/* Three arrays of n doubles in one allocation each (freed separately). */
static mp_status alloc3(double **a, double **b, double **c, size_t n)
{
    *a = mp_malloc(n * sizeof(double));
    *b = mp_malloc(n * sizeof(double));
    *c = mp_malloc(n * sizeof(double));
    if (*a && *b && *c)
        return MP_OK;
    mp_free(*a);
    mp_free(*b);
    mp_free(*c);
    *a = *b = *c = NULL;
    return mp_error_set(MP_ERR_NOMEM, "out of memory for a curve of %zu points", n);
}

/* The cumulative true/false positive counts at each distinct score, highest
 * first (sklearn's _binary_clf_curve), over the labelled rows: three arrays
 * of *k entries the caller frees. */
static mp_status curve_counts(const double *score, size_t score_stride, const double *target,
                              size_t target_stride, size_t n, double **tps, double **fps,
                              double **thr, size_t *k)
{
    scored *s = NULL;
    size_t m = 0;
    mp_status st = gather_scored(&s, &m, score, score_stride, target, target_stride, n);
    if (st)
        return st;
    if ((st = alloc3(tps, fps, thr, m))) {
        mp_free(s);
        return st;
    }
    *k = clf_curve(s, m, *tps, *fps, *thr);
    mp_free(s);
    return MP_OK;
}

mp_status mp_pr_curve(const double *score, size_t score_stride,
                      const double *target, size_t target_stride, size_t n,
                      double **precision, double **recall, double **thresholds,
                      size_t *n_points)
{
    *precision = *recall = *thresholds = NULL;
    *n_points = 0;
    double *tps, *fps, *thr;
    size_t k;
    mp_status st = curve_counts(score, score_stride, target, target_stride, n, &tps, &fps,
                                &thr, &k);
    if (st)
        return st;
    double *P, *R, *T;
    if ((st = alloc3(&P, &R, &T, k + 1))) {
        mp_free(tps);
        mp_free(fps);
        mp_free(thr);
        return st;
    }
    /* sklearn reverses the curve so recall decreases, then appends (1, 0). */
    double total_pos = tps[k - 1];
    for (size_t i = 0; i < k; i++) {
        size_t j = k - 1 - i;
        double ps = tps[j] + fps[j];
        P[i] = ps != 0 ? tps[j] / ps : 0.0;
        R[i] = total_pos == 0 ? 1.0 : tps[j] / total_pos;
        T[i] = thr[j];
    }
    P[k] = 1.0;
    R[k] = 0.0;
    mp_free(tps);
    mp_free(fps);
    mp_free(thr);
    *precision = P;
    *recall = R;
    *thresholds = T;
    *n_points = k + 1;
    return MP_OK;
}

mp_status mp_roc_curve(const double *score, size_t score_stride,
                       const double *target, size_t target_stride, size_t n,
                       double **fpr, double **tpr, double **thresholds,
                       size_t *n_points)
{
    *fpr = *tpr = *thresholds = NULL;
    *n_points = 0;
    double *tps, *fps, *thr;
    size_t k;
    mp_status st = curve_counts(score, score_stride, target, target_stride, n, &tps, &fps,
                                &thr, &k);
    if (st)
        return st;
    double *F, *T, *H;
    if ((st = alloc3(&F, &T, &H, k + 1))) {
        mp_free(tps);
        mp_free(fps);
        mp_free(thr);
        return st;
    }
    /* drop_intermediate: keep the ends and every point where either count's
     * second difference is non-zero (a corner); then prepend (0, 0, +inf). */
    double P = tps[k - 1], N = fps[k - 1];
    size_t out = 0;
    F[out] = 0.0;
    T[out] = 0.0;
    H[out] = INFINITY;
    out++;
    for (size_t i = 0; i < k; i++) {
        int keep = 1;
        if (k > 2 && i > 0 && i + 1 < k)
            keep = (fps[i + 1] - 2 * fps[i] + fps[i - 1]) != 0 ||
                   (tps[i + 1] - 2 * tps[i] + tps[i - 1]) != 0;
        if (!keep)
            continue;
        F[out] = fps[i];
        T[out] = tps[i];
        H[out] = thr[i];
        out++;
    }
    for (size_t i = 0; i < out; i++) {
        F[i] = N > 0 ? F[i] / N : NAN;
        T[i] = P > 0 ? T[i] / P : NAN;
    }
    mp_free(tps);
    mp_free(fps);
    mp_free(thr);
    *fpr = F;
    *tpr = T;
    *thresholds = H;
    *n_points = out;
    return MP_OK;
}

double mp_trapezoid_auc(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    int any_neg = 0, any_pos = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        double dx = x[i + 1] - x[i];
        any_neg |= dx < 0;
        any_pos |= dx > 0;
    }
    if (any_neg && any_pos)
        return NAN;
    double *terms = mp_malloc((n - 1) * sizeof *terms);
    double area = 0;
    if (terms) {
        /* scipy.integrate.trapezoid: (d * (y[1:] + y[:-1]) / 2.0).sum() */
        for (size_t i = 0; i + 1 < n; i++)
            terms[i] = (x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2.0;
        area = mp_pairwise_sum(terms, n - 1);
        mp_free(terms);
    } else {   /* no memory for the exact order: a plain sum, still correct */
        for (size_t i = 0; i + 1 < n; i++)
            area += (x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2.0;
    }
    return any_neg ? -area : area;
}

/* ===================================================================== */
/* One task                                                               */
/* ===================================================================== */

static mp_status curve_auc(mp_metric m, const task_rows *g, double *value)
{
    double *a, *b, *c;
    size_t k;
    mp_status st = m == MP_METRIC_AUC
                       ? mp_roc_curve(g->p, 1, g->t, 1, g->n, &a, &b, &c, &k)
                       : mp_pr_curve(g->p, 1, g->t, 1, g->n, &a, &b, &c, &k);
    if (st)
        return st;
    /* roc: auc(fpr, tpr); prc: auc(recall, precision) */
    *value = m == MP_METRIC_AUC ? mp_trapezoid_auc(a, b, k) : mp_trapezoid_auc(b, a, k);
    mp_free(a);
    mp_free(b);
    mp_free(c);
    return MP_OK;
}

mp_status mp_metric_compute(mp_metric m, int classification,
                            const double *pred, size_t pred_stride,
                            const double *target, size_t target_stride, size_t n,
                            double *value, mp_score_status *why)
{
    mp_score_status dummy;
    if (!why)
        why = &dummy;
    *value = NAN;
    *why = MP_SCORE_OK;
    if ((unsigned)m >= MP_METRIC_COUNT)
        return mp_error_set(MP_ERR_ARG, "unknown metric %d", (int)m);
    if (pred_stride == 0 || target_stride == 0)
        return mp_error_set(MP_ERR_ARG, "metric %s: stride 0", mp_metric_name(m));
    if (mp_metric_is_spectral(m)) {
        /* the column is one spectrum of n positions */
        double *buf = mp_malloc(sizeof(double) * 2 * (n ? n : 1));
        if (!buf)
            return mp_error_set(MP_ERR_NOMEM, "out of memory scoring %zu rows", n);
        for (size_t i = 0; i < n; i++) {
            buf[i] = pred[i * pred_stride];
            buf[n + i] = target[i * target_stride];
        }
        size_t n_ok;
        *value = mp_spectrum_metric(m, buf, n, buf + n, n, n ? 1 : 0, n, NULL, &n_ok);
        *why = n_ok ? MP_SCORE_OK : MP_SCORE_NO_LABELS;
        mp_free(buf);
        return MP_OK;
    }
    int clf = classification || mp_metric_is_classification(m);

    task_rows g = { NULL, NULL, 0 };
    mp_status st = gather(&g, pred, pred_stride, target, target_stride, n);
    if (st)
        return st;

    /* Chemprop's order: the classification skips first (all([]) is true in
     * Python, so no labels reads as "one class" there; we name it), then
     * an empty task. */
    if (g.n == 0) {
        *why = MP_SCORE_NO_LABELS;
        goto done;
    }
    if (clf) {
        size_t ones = 0, zeros = 0, p0 = 0, p1 = 0;
        for (size_t i = 0; i < g.n; i++) {
            ones += g.t[i] == 1.0;
            zeros += g.t[i] == 0.0;
            p0 += g.p[i] == 0.0;
            p1 += g.p[i] == 1.0;
        }
        if (mp_metric_is_classification(m) && ones + zeros != g.n) {
            *why = MP_SCORE_NOT_BINARY;
            goto done;
        }
        if (ones == g.n || zeros == g.n) {
            *why = MP_SCORE_ONE_CLASS;
            goto done;
        }
        if (p0 == g.n || p1 == g.n) {
            *why = MP_SCORE_CONSTANT_PRED;
            goto done;
        }
    }
    for (size_t i = 0; i < g.n; i++)
        if (isnan(g.p[i])) {
            *why = MP_SCORE_NAN_PRED;
            goto done;
        }

    double *tmp = mp_malloc(g.n * sizeof *tmp);
    if (!tmp) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory scoring %zu rows", g.n);
        goto done;
    }
    switch (m) {
    case MP_METRIC_RMSE:
        *value = sqrt(mean_sq_err(g.p, g.t, tmp, g.n));
        break;
    case MP_METRIC_MSE:
        *value = mean_sq_err(g.p, g.t, tmp, g.n);
        break;
    case MP_METRIC_MAE:
        *value = mean_abs_err(g.p, g.t, tmp, g.n);
        break;
    case MP_METRIC_R2:
        if (g.n < 2)
            *why = MP_SCORE_TOO_FEW;
        else
            *value = r2_score(g.p, g.t, tmp, g.n);
        break;
    case MP_METRIC_ACCURACY: {
        size_t right = 0;
        for (size_t i = 0; i < g.n; i++)
            right += (g.p[i] > 0.5 ? 1.0 : 0.0) == g.t[i];
        *value = (double)right / (double)g.n;
        break;
    }
    case MP_METRIC_AUC:
    case MP_METRIC_PRC_AUC:
        st = curve_auc(m, &g, value);
        break;
    case MP_METRIC_SID: case MP_METRIC_WASSERSTEIN: case MP_METRIC_COUNT:
        break;
    }
    mp_free(tmp);
done:
    mp_free(g.p);
    return st;
}

mp_status mp_metric_tasks(mp_metric m, int classification,
                          const double *pred, const double *target,
                          size_t n_rows, size_t n_tasks,
                          double *per_task, mp_score_status *why,
                          double *mean, size_t *n_skipped)
{
    size_t skipped = 0;
    if (mp_metric_is_spectral(m)) {
        /* rows are spectra; per_task: each position's mean term */
        size_t n_ok;
        double v = mp_spectrum_metric(m, pred, n_tasks, target, n_tasks, n_rows, n_tasks,
                                      per_task, &n_ok);
        for (size_t t = 0; why && t < n_tasks; t++)
            why[t] = n_ok ? MP_SCORE_OK : MP_SCORE_NO_LABELS;
        if (mean)
            *mean = v;
        if (n_skipped)
            *n_skipped = n_ok ? 0 : n_tasks;
        return MP_OK;
    }
    for (size_t t = 0; t < n_tasks; t++) {
        mp_score_status w;
        mp_status st = mp_metric_compute(m, classification, pred + t, n_tasks,
                                         target + t, n_tasks, n_rows, &per_task[t], &w);
        if (st)
            return st;
        if (why)
            why[t] = w;
        skipped += isnan(per_task[t]);
    }
    if (mean)
        *mean = mp_metric_average(m, per_task, n_tasks, MP_AVERAGE_NANMEAN);
    if (n_skipped)
        *n_skipped = skipped;
    return MP_OK;
}

size_t mp_metric_skip_message(char *buf, size_t buf_len, mp_metric m,
                              const char *const *task_names, const mp_score_status *why,
                              size_t n_tasks)
{
    size_t skipped = 0;
    for (size_t t = 0; t < n_tasks; t++)
        skipped += why[t] != MP_SCORE_OK;
    if (buf_len == 0)
        return skipped;
    buf[0] = '\0';
    if (skipped == 0)
        return 0;
    size_t k = (size_t)snprintf(buf, buf_len, "%s: %zu of %zu task%s not scored:",
                                mp_metric_name(m), skipped, n_tasks, n_tasks == 1 ? "" : "s");
    size_t listed = 0;
    for (size_t t = 0; t < n_tasks && k < buf_len; t++) {
        if (why[t] == MP_SCORE_OK)
            continue;
        char name[32];
        if (!task_names)
            snprintf(name, sizeof name, "task %zu", t);
        k += (size_t)snprintf(buf + k, buf_len - k, "%s %s (%s)", listed ? "," : "",
                              task_names ? task_names[t] : name, mp_score_status_text(why[t]));
        listed++;
    }
    if (k >= buf_len && buf_len > 4)   /* cut: say so */
        memcpy(buf + buf_len - 4, "...", 4);
    return skipped;
}

double mp_metric_average(mp_metric m, const double *per_task, size_t n_tasks,
                         mp_average how)
{
    if (n_tasks == 0)
        return NAN;
    if (how == MP_AVERAGE_V1_6) {
        /* np.mean / scipy gmean: any NaN makes the result NaN */
        double s = 0;
        int geo = mp_metric_is_scale_dependent(m);
        for (size_t i = 0; i < n_tasks; i++)
            s += geo ? log(per_task[i]) : per_task[i];
        s /= (double)n_tasks;
        return geo ? exp(s) : s;
    }
    double s = 0;
    size_t k = 0;
    for (size_t i = 0; i < n_tasks; i++)
        if (!isnan(per_task[i])) {
            s += per_task[i];
            k++;
        }
    return k ? s / (double)k : NAN;
}

/* ===================================================================== */
/* metrics.json                                                           */
/* ===================================================================== */

struct mp_report {
    cJSON *root;
};

/* cJSON allocates through our hook too, so leak and out-of-memory tests see
 * its blocks.  Installed once; the hook never changes afterwards. */
static void *report_malloc(size_t n) { return mp_malloc(n); }
static void  report_free(void *p) { mp_free(p); }

static void report_hooks(void)
{
    static int installed;
    if (!__atomic_exchange_n(&installed, 1, __ATOMIC_ACQ_REL)) {
        cJSON_Hooks h = { report_malloc, report_free };
        cJSON_InitHooks(&h);
    }
}

mp_status mp_report_new(mp_report **out)
{
    report_hooks();
    *out = NULL;
    mp_report *r = mp_calloc(1, sizeof *r);
    if (!r)
        return mp_error_set(MP_ERR_NOMEM, "out of memory for a report");
    r->root = cJSON_CreateObject();
    if (!r->root) {
        mp_free(r);
        return mp_error_set(MP_ERR_NOMEM, "out of memory for a report");
    }
    *out = r;
    return MP_OK;
}

void mp_report_free(mp_report *r)
{
    if (!r)
        return;
    cJSON_Delete(r->root);
    mp_free(r);
}

/* Places `item` at `path`, creating the objects on the way; consumes item
 * (deleted on failure). */
static mp_status report_put(mp_report *r, const char *path, cJSON *item)
{
    if (!item)
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting '%s'", path);
    size_t len = strlen(path);
    char *buf = mp_malloc(len + 1);
    if (!buf) {
        cJSON_Delete(item);
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting '%s'", path);
    }
    memcpy(buf, path, len + 1);
    mp_status st = MP_OK;
    cJSON *obj = r->root;
    char *key = buf;
    for (;;) {
        char *dot = strchr(key, '.');
        if (dot)
            *dot = '\0';
        if (!*key) {
            st = mp_error_set(MP_ERR_ARG, "report path '%s' has an empty key", path);
            break;
        }
        cJSON *cur = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!dot) {   /* the last key: set or replace */
            cJSON_bool ok = cur ? cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item)
                                : cJSON_AddItemToObject(obj, key, item);
            if (!ok)
                st = mp_error_set(MP_ERR_NOMEM, "out of memory setting '%s'", path);
            else
                item = NULL;
            break;
        }
        if (!cur) {
            cur = cJSON_CreateObject();
            if (!cur || !cJSON_AddItemToObject(obj, key, cur)) {
                cJSON_Delete(cur);
                st = mp_error_set(MP_ERR_NOMEM, "out of memory setting '%s'", path);
                break;
            }
        } else if (!cJSON_IsObject(cur)) {
            st = mp_error_set(MP_ERR_ARG, "report path '%s': '%s' is not an object",
                              path, key);
            break;
        }
        obj = cur;
        key = dot + 1;
    }
    cJSON_Delete(item);
    mp_free(buf);
    return st;
}

static cJSON *json_number(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

mp_status mp_report_set_str(mp_report *r, const char *path, const char *value)
{
    return report_put(r, path, value ? cJSON_CreateString(value) : cJSON_CreateNull());
}

mp_status mp_report_set_num(mp_report *r, const char *path, double value)
{
    return report_put(r, path, json_number(value));
}

mp_status mp_report_set_int(mp_report *r, const char *path, long long value)
{
    return report_put(r, path, cJSON_CreateNumber((double)value));
}

mp_status mp_report_set_bool(mp_report *r, const char *path, int value)
{
    return report_put(r, path, cJSON_CreateBool(value != 0));
}

mp_status mp_report_set_nums(mp_report *r, const char *path, const double *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *x = json_number(v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            a = NULL;
        }
    }
    return report_put(r, path, a);
}

mp_status mp_report_set_strs(mp_report *r, const char *path, const char *const *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateString(v[i] ? v[i] : "");
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            a = NULL;
        }
    }
    return report_put(r, path, a);
}

mp_status mp_report_set_metric(mp_report *r, const char *set, const char *metric,
                               const char *const *task_names, const double *per_task,
                               size_t n_tasks, double mean)
{
    if (strchr(metric, '.') || !*metric)
        return mp_error_set(MP_ERR_ARG, "metric name '%s' is empty or contains a dot", metric);
    cJSON *obj = cJSON_CreateObject(), *tasks = cJSON_CreateObject();
    cJSON *m = json_number(mean);
    int ok = obj && tasks && m && cJSON_AddItemToObject(obj, "mean", m);
    if (!ok)
        cJSON_Delete(m);
    for (size_t i = 0; ok && i < n_tasks; i++) {
        char name[32];
        const char *key = task_names ? task_names[i] : name;
        if (!task_names)
            snprintf(name, sizeof name, "task%zu", i);
        cJSON *x = json_number(per_task[i]);
        ok = x && cJSON_AddItemToObject(tasks, key, x);
        if (!ok)
            cJSON_Delete(x);
    }
    if (ok)
        ok = cJSON_AddItemToObject(obj, "tasks", tasks);
    if (!ok) {
        cJSON_Delete(tasks);
        cJSON_Delete(obj);
        return mp_error_set(MP_ERR_NOMEM, "out of memory recording %s %s", set, metric);
    }
    size_t n = strlen(set) + strlen(metric) + 2;
    char *path = mp_malloc(n);
    if (!path) {
        cJSON_Delete(obj);
        return mp_error_set(MP_ERR_NOMEM, "out of memory recording %s %s", set, metric);
    }
    snprintf(path, n, "%s.%s", set, metric);
    mp_status st = report_put(r, path, obj);
    mp_free(path);
    return st;
}

char *mp_report_print(const mp_report *r)
{
    char *text = cJSON_Print(r->root);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *out = mp_malloc(n + 2);
    if (out) {
        memcpy(out, text, n);
        out[n] = '\n';
        out[n + 1] = '\0';
    }
    cJSON_free(text);
    return out;
}

mp_status mp_report_write(const mp_report *r, const char *path)
{
    char *text = mp_report_print(r);
    if (!text)
        return mp_error_set(MP_ERR_NOMEM, "out of memory printing %s", path);
    mp_afile f;
    mp_status st = mp_afile_open(&f, path);
    if (st == MP_OK) {
        fputs(text, f.fp);
        st = mp_afile_commit(&f);
    }
    mp_free(text);
    return st;
}
