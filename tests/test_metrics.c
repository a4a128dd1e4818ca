/*
 * test_metrics.c - metrics against scikit-learn (tests/fixtures/metrics_cases.txt,
 * made by tests/fixtures/metrics_gen.py), hand-worked cases, the per-task
 * helper with missing labels and skipped tasks, and the metrics.json report.
 */
#include "test.h"
#include "data/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>

#define FIXTURE "tests/fixtures/metrics_cases.txt"

/* ===================================================================== */
/* Reading the fixture                                                    */
/* ===================================================================== */

#define MAX_VALS 512

typedef struct {
    char   key[32];
    double v[MAX_VALS];
    size_t n;
} fx_line;

/* Reads the next "key v v v" line; 0 at end of file, -1 on a malformed line. */
static int fx_next(FILE *fp, fx_line *l)
{
    static char buf[1 << 16];
    for (;;) {
        if (!fgets(buf, sizeof buf, fp))
            return 0;
        if (buf[0] != '#' && buf[0] != '\n')
            break;
    }
    char *p = buf, *end;
    size_t k = 0;
    while (*p && *p != ' ' && *p != '\n' && k + 1 < sizeof l->key)
        l->key[k++] = *p++;
    l->key[k] = '\0';
    l->n = 0;
    if (strcmp(l->key, "case") == 0) {   /* "case <kind> <n>": kind in key+5 */
        return 1;
    }
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == '\n' || !*p)
            break;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || l->n == MAX_VALS)
            return -1;
        l->v[l->n++] = v;
        p = end;
    }
    return 1;
}

/* |a-b| within a few ulps; NaN matches NaN. */
static int same(double a, double b, double rel)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= rel * fabs(b) + 1e-300;
}

typedef struct {
    int    classification;
    double pred[MAX_VALS], target[MAX_VALS];
    size_t n;
} fx_case;

/* Compares one curve produced by our code against the fixture's values. */
static int curve_matches(const double *got, size_t n_got, const fx_line *want)
{
    if (n_got != want->n)
        return 0;
    for (size_t i = 0; i < n_got; i++)
        if (!same(got[i], want->v[i], 0))
            return 0;
    return 1;
}

MP_TEST(metrics_match_sklearn_fixture)
{
    FILE *fp = fopen(FIXTURE, "r");
    CHECK_MSG(fp, "cannot open %s (run the tests from the repository root)", FIXTURE);
    static fx_case c;
    static fx_line l;
    int n_cases = 0, n_scores = 0, n_curves = 0, n_exact = 0, r = 0;
    char fail[512] = "";
    double *cv[3] = { NULL, NULL, NULL };
    size_t n_pts = 0;
    while (!fail[0] && (r = fx_next(fp, &l)) > 0) {
        if (strcmp(l.key, "case") == 0) {
            memset(&c, 0, sizeof c);
            n_cases++;
            continue;
        }
        if (strcmp(l.key, "end") == 0)
            continue;
        if (strcmp(l.key, "pred") == 0) {
            memcpy(c.pred, l.v, l.n * sizeof(double));
            c.n = l.n;
            continue;
        }
        if (strcmp(l.key, "target") == 0) {
            memcpy(c.target, l.v, l.n * sizeof(double));
            if (l.n != c.n)
                snprintf(fail, sizeof fail, "case %d: pred/target lengths differ", n_cases);
            continue;
        }
        mp_metric m;
        if (mp_metric_parse(l.key, &m) == MP_OK) {
            c.classification = mp_metric_is_classification(m);
            double got;
            mp_score_status why;
            if (mp_metric_compute(m, c.classification, c.pred, 1, c.target, 1, c.n, &got,
                                  &why) != MP_OK) {
                snprintf(fail, sizeof fail, "case %d %s: %s", n_cases, l.key,
                         mp_error_message());
                break;
            }
            /* bit for bit: NumPy's summation order is reproduced */
            if (!same(got, l.v[0], 0))
                snprintf(fail, sizeof fail, "case %d %s: got %.17g, sklearn %.17g",
                         n_cases, l.key, got, l.v[0]);
            if (isnan(got) != (why != MP_SCORE_OK))
                snprintf(fail, sizeof fail, "case %d %s: NaN without a reason", n_cases,
                         l.key);
            n_exact += got == l.v[0] || (isnan(got) && isnan(l.v[0]));
            n_scores++;
            continue;
        }
        /* curves: compute the pair when its first array appears */
        if (strcmp(l.key, "pr_precision") == 0 || strcmp(l.key, "roc_fpr") == 0) {
            for (int i = 0; i < 3; i++) {
                mp_free(cv[i]);
                cv[i] = NULL;
            }
            mp_status st = l.key[0] == 'p'
                               ? mp_pr_curve(c.pred, 1, c.target, 1, c.n, &cv[0], &cv[1],
                                             &cv[2], &n_pts)
                               : mp_roc_curve(c.pred, 1, c.target, 1, c.n, &cv[0], &cv[1],
                                              &cv[2], &n_pts);
            if (st != MP_OK) {
                snprintf(fail, sizeof fail, "case %d %s: %s", n_cases, l.key,
                         mp_error_message());
                break;
            }
        }
        int idx = strstr(l.key, "precision") || strstr(l.key, "fpr") ? 0
                  : strstr(l.key, "recall") || strstr(l.key, "tpr")  ? 1
                  : strstr(l.key, "thresholds")                      ? 2
                                                                     : -1;
        if (idx < 0) {
            snprintf(fail, sizeof fail, "case %d: unknown key %s", n_cases, l.key);
            break;
        }
        /* precision/recall/fpr/tpr have n_pts values; pr thresholds one less */
        size_t n_want = n_pts - (idx == 2 && l.key[0] == 'p');
        if (!curve_matches(cv[idx], n_want, &l))
            snprintf(fail, sizeof fail, "case %d: %s differs from sklearn (%zu vs %zu points)",
                     n_cases, l.key, n_want, l.n);
        n_curves++;
    }
    for (int i = 0; i < 3; i++)
        mp_free(cv[i]);
    fclose(fp);
    CHECK_MSG(!fail[0], "%s", fail);
    CHECK_MSG(r == 0, "malformed line in %s after case %d", FIXTURE, n_cases);
    CHECK(n_cases >= 50);
    CHECK(n_scores >= 150);
    CHECK(n_curves >= 150);
    printf("    %d cases, %d scores (%d bit-identical), %d curve arrays\n", n_cases,
           n_scores, n_exact, n_curves);
}

/* ===================================================================== */
/* Hand-worked values                                                     */
/* ===================================================================== */

MP_TEST(metrics_hand_worked)
{
    double v;
    mp_score_status why;
    /* errors 1, -2, 0, 1 (one more row missing): mse 6/4, mae 4/4 */
    const double p[5] = { 2, 0, 3, 5, 100 }, t[5] = { 1, 2, 3, 4, NAN };
    CHECK_OK(mp_metric_compute(MP_METRIC_MSE, 0, p, 1, t, 1, 5, &v, &why));
    CHECK_NEAR(v, 1.5, 0, 1e-15);
    CHECK_OK(mp_metric_compute(MP_METRIC_RMSE, 0, p, 1, t, 1, 5, &v, &why));
    CHECK_NEAR(v, sqrt(1.5), 0, 1e-15);
    CHECK_OK(mp_metric_compute(MP_METRIC_MAE, 0, p, 1, t, 1, 5, &v, &why));
    CHECK_NEAR(v, 1.0, 0, 1e-15);
    /* r2 = 1 - 6 / sum((t - 2.5)^2) = 1 - 6/5 */
    CHECK_OK(mp_metric_compute(MP_METRIC_R2, 0, p, 1, t, 1, 5, &v, &why));
    CHECK_NEAR(v, -0.2, 0, 1e-14);

    /* AUC with a tie across classes: positives {0.8, 0.4}, negatives
     * {0.4, 0.1}: pairs won 1 + 1 + 0.5 + 1 of 4 -> 0.875 */
    const double s[4] = { 0.8, 0.4, 0.4, 0.1 }, y[4] = { 1, 1, 0, 0 };
    CHECK_OK(mp_metric_compute(MP_METRIC_AUC, 1, s, 1, y, 1, 4, &v, &why));
    CHECK_NEAR(v, 0.875, 0, 1e-15);
    /* PR points (recall, precision): (0,1) (0.5,1) (1,2/3) (1,0.5):
     * trapezoid 0.5*1 + 0.5*(1+2/3)/2 = 0.91666... */
    CHECK_OK(mp_metric_compute(MP_METRIC_PRC_AUC, 1, s, 1, y, 1, 4, &v, &why));
    CHECK_NEAR(v, 0.5 + 0.5 * (1 + 2.0 / 3) / 2, 0, 1e-15);
    /* accuracy: 0.5 is not above the threshold, so 0.5 reads as class 0 */
    const double a[4] = { 0.5, 0.51, 0.2, 0.9 }, ya[4] = { 0, 1, 1, 0 };
    CHECK_OK(mp_metric_compute(MP_METRIC_ACCURACY, 1, a, 1, ya, 1, 4, &v, &why));
    CHECK_NEAR(v, 0.5, 0, 0);
    /* a stride other than 1 reads every other element */
    const double sp[8] = { 0.8, -1, 0.4, -1, 0.4, -1, 0.1, -1 };
    const double yp[8] = { 1, 7, 1, 7, 0, 7, 0, 7 };
    CHECK_OK(mp_metric_compute(MP_METRIC_AUC, 1, sp, 2, yp, 2, 4, &v, &why));
    CHECK_NEAR(v, 0.875, 0, 1e-15);
}

MP_TEST(metrics_skips_like_chemprop)
{
    double v;
    mp_score_status why;
    const double p[4] = { 0.2, 0.7, 0.4, 0.9 };
    const double one_class[4] = { 1, 1, NAN, 1 }, none[4] = { NAN, NAN, NAN, NAN };
    const double mixed[4] = { 0, 1, 0, 1 }, odd[4] = { 0, 1, 2, 1 };
    CHECK_OK(mp_metric_compute(MP_METRIC_AUC, 1, p, 1, one_class, 1, 4, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_ONE_CLASS);
    CHECK_OK(mp_metric_compute(MP_METRIC_PRC_AUC, 1, p, 1, none, 1, 4, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_NO_LABELS);
    CHECK_OK(mp_metric_compute(MP_METRIC_AUC, 1, p, 1, odd, 1, 4, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_NOT_BINARY);
    /* predictions all exactly 1: Chemprop skips the task */
    const double ones[4] = { 1, 1, 1, 1 }, nanp[4] = { 0.1, NAN, 0.3, 0.4 };
    CHECK_OK(mp_metric_compute(MP_METRIC_ACCURACY, 1, ones, 1, mixed, 1, 4, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_CONSTANT_PRED);
    /* the same rule for a regression metric on a classification task, not
     * on a regression task */
    CHECK_OK(mp_metric_compute(MP_METRIC_RMSE, 1, ones, 1, mixed, 1, 4, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_CONSTANT_PRED);
    CHECK_OK(mp_metric_compute(MP_METRIC_RMSE, 0, ones, 1, mixed, 1, 4, &v, &why));
    CHECK_NEAR(v, sqrt(0.5), 0, 1e-15);
    CHECK(why == MP_SCORE_OK);
    CHECK_OK(mp_metric_compute(MP_METRIC_AUC, 1, nanp, 1, mixed, 1, 4, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_NAN_PRED);
    CHECK_OK(mp_metric_compute(MP_METRIC_R2, 0, p, 1, one_class + 1, 1, 1, &v, &why));
    CHECK(isnan(v) && why == MP_SCORE_TOO_FEW);
    CHECK(strstr(mp_score_status_text(MP_SCORE_ONE_CLASS), "all 0 or all 1"));
    /* bad arguments */
    CHECK(mp_metric_compute(MP_METRIC_COUNT, 0, p, 1, mixed, 1, 4, &v, &why) == MP_ERR_ARG);
    CHECK(mp_metric_compute(MP_METRIC_AUC, 0, p, 0, mixed, 1, 4, &v, &why) == MP_ERR_ARG);
}

MP_TEST(metrics_per_task_and_mean)
{
    /* 5 rows x 3 tasks; task 1 has one class only among its labels, task 2
     * has missing labels. */
    const double pred[15] = {
        0.9, 0.1, 0.3,
        0.2, 0.8, 0.6,
        0.7, 0.3, 0.2,
        0.4, 0.6, 0.9,
        0.6, 0.5, 0.1,
    };
    const double target[15] = {
        1, 1, NAN,
        0, 1, 1,
        1, NAN, 0,
        0, 1, NAN,
        1, 1, 0,
    };
    double per[3], mean;
    mp_score_status why[3];
    size_t skipped = 99;
    CHECK_OK(mp_metric_tasks(MP_METRIC_AUC, 1, pred, target, 5, 3, per, why, &mean, &skipped));
    CHECK_NEAR(per[0], 1.0, 0, 0);   /* positives 0.9 0.7 0.6 above negatives 0.2 0.4 */
    CHECK(isnan(per[1]) && why[1] == MP_SCORE_ONE_CLASS);
    CHECK_NEAR(per[2], 1.0, 0, 0);   /* 0.6 above 0.2 and 0.1 */
    CHECK_EQ_INT(skipped, 1);
    CHECK_NEAR(mean, 1.0, 0, 0);

    char msg[200];
    const char *names[3] = { "NR-AR", "SR-p53", "HSE" };
    CHECK_EQ_INT(mp_metric_skip_message(msg, sizeof msg, MP_METRIC_AUC, names, why, 3), 1);
    CHECK_EQ_STR(msg, "auc: 1 of 3 tasks not scored: SR-p53 (targets all 0 or all 1)");
    mp_score_status two[3] = { MP_SCORE_NO_LABELS, MP_SCORE_OK, MP_SCORE_ONE_CLASS };
    CHECK_EQ_INT(mp_metric_skip_message(msg, sizeof msg, MP_METRIC_AUC, NULL, two, 3), 2);
    CHECK_EQ_STR(msg, "auc: 2 of 3 tasks not scored: task 0 (no labelled rows), "
                      "task 2 (targets all 0 or all 1)");
    CHECK_EQ_INT(mp_metric_skip_message(msg, 20, MP_METRIC_AUC, NULL, two, 3), 2);
    CHECK_EQ_STR(msg, "auc: 2 of 3 task...");
    CHECK_EQ_INT(mp_metric_skip_message(msg, sizeof msg, MP_METRIC_AUC, NULL, two + 1, 1), 0);
    CHECK_EQ_STR(msg, "");

    /* each task equals the single-task call on its column */
    double rpred[15], rtarget[15];
    for (int i = 0; i < 15; i++) {
        rpred[i] = 3.0 * pred[i] - 1.0;
        rtarget[i] = isnan(target[i]) ? NAN : target[i] + 0.25 * i;
    }
    CHECK_OK(mp_metric_tasks(MP_METRIC_RMSE, 0, rpred, rtarget, 5, 3, per, NULL, &mean, NULL));
    double sum = 0;
    for (int t = 0; t < 3; t++) {
        double v;
        CHECK_OK(mp_metric_compute(MP_METRIC_RMSE, 0, rpred + t, 3, rtarget + t, 3, 5, &v, NULL));
        CHECK_NEAR(per[t], v, 0, 0);
        CHECK(!isnan(v));
        sum += v;
    }
    CHECK_NEAR(mean, sum / 3, 0, 1e-15);

    /* averages: NaN tasks left out, or (v1.6) geometric for rmse and NaN-poisoned */
    const double scores[3] = { 1.0, 4.0, NAN };
    CHECK_NEAR(mp_metric_average(MP_METRIC_RMSE, scores, 3, MP_AVERAGE_NANMEAN), 2.5, 0, 0);
    CHECK(isnan(mp_metric_average(MP_METRIC_RMSE, scores, 3, MP_AVERAGE_V1_6)));
    CHECK_NEAR(mp_metric_average(MP_METRIC_RMSE, scores, 2, MP_AVERAGE_V1_6), 2.0, 0, 1e-15);
    CHECK_NEAR(mp_metric_average(MP_METRIC_AUC, scores, 2, MP_AVERAGE_V1_6), 2.5, 0, 1e-15);
    const double all_nan[2] = { NAN, NAN };
    CHECK(isnan(mp_metric_average(MP_METRIC_AUC, all_nan, 2, MP_AVERAGE_NANMEAN)));
}

MP_TEST(metrics_names)
{
    mp_metric m;
    const char *names[] = { "rmse", "mae", "mse", "r2", "auc", "prc-auc", "accuracy" };
    for (int i = 0; i < 7; i++) {
        CHECK_OK(mp_metric_parse(names[i], &m));
        CHECK_EQ_STR(mp_metric_name(m), names[i]);
    }
    CHECK_OK(mp_metric_parse("ROC-AUC", &m));
    CHECK(m == MP_METRIC_AUC);
    CHECK_OK(mp_metric_parse("PRC-AUC", &m));
    CHECK(m == MP_METRIC_PRC_AUC);
    CHECK(mp_metric_parse("f1", &m) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "'f1'") && strstr(mp_error_message(), "prc-auc"));
    CHECK(mp_metric_higher_is_better(MP_METRIC_AUC) && mp_metric_higher_is_better(MP_METRIC_R2));
    CHECK(!mp_metric_higher_is_better(MP_METRIC_RMSE) && !mp_metric_higher_is_better(MP_METRIC_MAE));
    CHECK(mp_metric_is_classification(MP_METRIC_ACCURACY) &&
          !mp_metric_is_classification(MP_METRIC_R2));
}

MP_TEST(metrics_curves_edge_cases)
{
    double *a, *b, *c;
    size_t k;
    /* no positive label: recall 1 everywhere, then the final (1, 0) point */
    const double s[3] = { 0.3, 0.1, 0.3 }, neg[3] = { 0, 0, 0 };
    CHECK_OK(mp_pr_curve(s, 1, neg, 1, 3, &a, &b, &c, &k));
    CHECK_EQ_INT(k, 3);
    CHECK(a[0] == 0 && a[1] == 0 && a[2] == 1);
    CHECK(b[0] == 1 && b[1] == 1 && b[2] == 0);
    CHECK(c[0] == 0.1 && c[1] == 0.3);
    mp_free(a);
    mp_free(b);
    mp_free(c);
    /* roc with one class: tpr NaN, as sklearn */
    CHECK_OK(mp_roc_curve(s, 1, neg, 1, 3, &a, &b, &c, &k));
    CHECK(k == 3 && isinf(c[0]) && isnan(b[1]) && a[2] == 1.0);
    mp_free(a);
    mp_free(b);
    mp_free(c);
    const double bad[3] = { 0, 3, 1 }, nolab[3] = { NAN, NAN, NAN };
    CHECK(mp_pr_curve(s, 1, bad, 1, 3, &a, &b, &c, &k) == MP_ERR_ARG);
    CHECK(a == NULL && k == 0);
    CHECK(mp_roc_curve(s, 1, nolab, 1, 3, &a, &b, &c, &k) == MP_ERR_ARG);
    /* trapezoid: direction, non-monotonic x */
    const double x[3] = { 0, 0.5, 1 }, xr[3] = { 1, 0.5, 0 }, xm[3] = { 0, 1, 0.5 };
    const double y[3] = { 1, 1, 0 }, yr[3] = { 1, 0, 0 };
    CHECK_NEAR(mp_trapezoid_auc(x, y, 3), 0.75, 0, 0);
    CHECK_NEAR(mp_trapezoid_auc(xr, yr, 3), 0.25, 0, 0);   /* (1,1) (0.5,0) (0,0) */
    CHECK(isnan(mp_trapezoid_auc(xm, y, 3)));
    CHECK(isnan(mp_trapezoid_auc(x, y, 1)));
}

MP_TEST(metrics_out_of_memory)
{
    const double s[6] = { 0.8, 0.4, 0.4, 0.1, 0.6, 0.3 }, y[6] = { 1, 1, 0, 0, NAN, 1 };
    long live = mp_alloc_live();
    int failures = 0;
    for (long k = 0; k < 20; k++) {
        for (int m = 0; m < MP_METRIC_COUNT; m++) {
            double v;
            mp_alloc_fail_after(k);
            mp_status st = mp_metric_compute((mp_metric)m, 1, s, 1, y, 1, 6, &v, NULL);
            mp_alloc_fail_after(-1);
            CHECK(st == MP_OK || st == MP_ERR_NOMEM);
            failures += st == MP_ERR_NOMEM;
            CHECK_EQ_INT(mp_alloc_live(), live);
        }
    }
    CHECK(failures > 0);
}

/* ===================================================================== */
/* metrics.json                                                           */
/* ===================================================================== */

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

MP_TEST(metrics_report_json)
{
    long live = mp_alloc_live();
    mp_report *r;
    CHECK_OK(mp_report_new(&r));
    const char *tasks[2] = { "logS", "pKa" };
    const double per[2] = { 0.5, NAN };
    CHECK_OK(mp_report_set_str(r, "task_type", "regression"));
    CHECK_OK(mp_report_set_metric(r, "test", "rmse", tasks, per, 2, 0.5));
    CHECK_OK(mp_report_set_metric(r, "val", "rmse", NULL, per, 2, 0.25));
    CHECK_OK(mp_report_set_int(r, "best_epoch", 17));
    CHECK_OK(mp_report_set_int(r, "split.train", 902));
    CHECK_OK(mp_report_set_num(r, "timings.train_s", 12.5));
    CHECK_OK(mp_report_set_num(r, "timings.train_s", 13.25));   /* replaced */
    CHECK_OK(mp_report_set_bool(r, "ok", 1));
    const double nums[3] = { 1, INFINITY, 2.5 };
    CHECK_OK(mp_report_set_nums(r, "curve", nums, 3));
    CHECK_OK(mp_report_set_strs(r, "metrics", (const char *const[]){ "rmse", "mae" }, 2));
    CHECK(mp_report_set_num(r, "best_epoch.x", 1) == MP_ERR_ARG);   /* not an object */
    CHECK(strstr(mp_error_message(), "best_epoch"));
    CHECK(mp_report_set_num(r, "a..b", 1) == MP_ERR_ARG);
    CHECK(mp_report_set_metric(r, "test", "r.2", tasks, per, 2, 0) == MP_ERR_ARG);

    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.json", mp_test_tmpdir());
    CHECK_OK(mp_report_write(r, path));
    mp_report_free(r);
    CHECK_EQ_INT(mp_alloc_live(), live);

    /* read it back with cJSON's parser */
    const char *text = slurp(path);
    CHECK(text);
    CHECK(text[strlen(text) - 1] == '\n');
    cJSON *j = cJSON_Parse(text);
    CHECK_MSG(j, "metrics.json does not parse:\n%s", text);
    const cJSON *test = cJSON_GetObjectItemCaseSensitive(j, "test");
    const cJSON *rmse = cJSON_GetObjectItemCaseSensitive(test, "rmse");
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(rmse, "tasks");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "val"), "rmse"),
        "tasks");
    const cJSON *tim = cJSON_GetObjectItemCaseSensitive(j, "timings");
    const cJSON *curve = cJSON_GetObjectItemCaseSensitive(j, "curve");
    int ok = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "task_type")) &&
             cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(rmse, "mean")) == 0.5 &&
             cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tk, "logS")) == 0.5 &&
             cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(tk, "pKa")) &&
             cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(val, "task1")) &&
             cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(val, "task0")) == 0.5 &&
             cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tim, "train_s")) == 13.25 &&
             cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "best_epoch")) == 17 &&
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")) &&
             cJSON_GetArraySize(curve) == 3 && cJSON_IsNull(cJSON_GetArrayItem(curve, 1)) &&
             cJSON_GetNumberValue(cJSON_GetArrayItem(curve, 2)) == 2.5 &&
             cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "metrics")) == 2;
    /* keys stay in first-set order */
    const char *order[] = { "task_type", "test", "val", "best_epoch", "split", "timings" };
    const cJSON *it = j->child;
    for (int i = 0; ok && i < 6; i++, it = it->next)
        ok = it && strcmp(it->string, order[i]) == 0;
    cJSON_Delete(j);
    CHECK_MSG(ok, "metrics.json has unexpected content:\n%s", text);

    /* a directory that does not exist: a clean error naming the file */
    CHECK_OK(mp_report_new(&r));
    CHECK(mp_report_write(r, "/nonexistent-dir/metrics.json") == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "/nonexistent-dir/metrics.json"));
    mp_report_free(r);
    CHECK_EQ_INT(mp_alloc_live(), live);
}

MP_TEST(metrics_report_out_of_memory)
{
    long live = mp_alloc_live();
    int failures = 0, successes = 0;
    const double per[2] = { 0.5, 0.75 };
    for (long k = 0; k < 60; k++) {
        mp_report *r = NULL;
        mp_alloc_fail_after(k);
        mp_status st = mp_report_new(&r);
        if (st == MP_OK) st = mp_report_set_num(r, "a.b.c", 1.5);
        if (st == MP_OK) st = mp_report_set_metric(r, "test", "auc", NULL, per, 2, 0.625);
        if (st == MP_OK) st = mp_report_set_strs(r, "s", (const char *const[]){ "x", "y" }, 2);
        char *text = st == MP_OK ? mp_report_print(r) : NULL;
        mp_alloc_fail_after(-1);
        CHECK(st == MP_OK || st == MP_ERR_NOMEM);
        if (st == MP_OK && text)
            successes++;
        else
            failures++;
        mp_free(text);
        mp_report_free(r);
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
    CHECK(failures > 0 && successes > 0);
}
