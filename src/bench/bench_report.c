/*
 * bench_report.c - `molprop bench report RESULTS --out DIR`: a results file
 * (and optionally another tool's, --reference) as DIR/report.md and
 * DIR/report.html: the table of mean ± std over seeds per dataset and
 * model, one figure per dataset (the paper metric per model, the reference
 * tool's bars beside ours), a summary figure (each model relative to the
 * D-MPNN on every dataset, regression and classification apart, as the
 * paper's figures compare them), and learning curves per dataset (training
 * loss and validation score per epoch, mean over seeds).  Figures are drawn
 * by gnuplot (bench_plot.c) in PNG and SVG.
 */
#include "bench/bench.h"

#include "api/api.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_MODELS 16

typedef struct {
    const char *name, *metric;
    const char *models[MAX_MODELS];
    int         n_models;
    double      mean[2][MAX_MODELS], std[2][MAX_MODELS];   /* [tool][model] */
    int         n[2][MAX_MODELS];
    double      train_seconds;
    int         curves;                                    /* has learning curves */
} ds_summary;

typedef struct {
    const mp_bench_row *rows[2];
    size_t              n[2];
    const char         *tool[2];
    int                 n_tools;
    ds_summary          ds[MP_BENCH_MAX_LIST * 4];
    int                 n_ds;
    const char         *models[MAX_MODELS];   /* every model, in paper order */
    int                 n_models;
} report;

/* ===================================================================== */
/* Aggregation                                                            */
/* ===================================================================== */

static int model_rank(const char *name)
{
    int n;
    const mp_bench_variant *v = mp_bench_variants(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].name, name))
            return i;
    return n;
}

static void add_model(const char **list, int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i], name))
            return;
    if (*n == MAX_MODELS)
        return;
    int at = *n;   /* paper order, unknown models last in the order seen */
    while (at > 0 && model_rank(list[at - 1]) > model_rank(name))
        at--;
    memmove(list + at + 1, list + at, sizeof *list * (size_t)(*n - at));
    list[at] = name;
    (*n)++;
}

static int model_index(const ds_summary *d, const char *name)
{
    for (int i = 0; i < d->n_models; i++)
        if (!strcmp(d->models[i], name))
            return i;
    return -1;
}

static mp_status aggregate(report *R)
{
    const mp_bench_row *rows = R->rows[0];
    for (size_t i = 0; i < R->n[0]; i++) {
        int k;
        for (k = 0; k < R->n_ds; k++)
            if (!strcmp(R->ds[k].name, rows[i].dataset))
                break;
        if (k == R->n_ds) {
            if (R->n_ds == (int)(sizeof R->ds / sizeof R->ds[0]))
                return mp_error_set(MP_ERR_ARG, "too many datasets in the results");
            R->ds[k] = (ds_summary){ .name = rows[i].dataset, .metric = rows[i].metric };
            R->n_ds++;
        }
        add_model(R->ds[k].models, &R->ds[k].n_models, rows[i].model);
        add_model(R->models, &R->n_models, rows[i].model);
        R->ds[k].train_seconds += isfinite(rows[i].train_seconds) ? rows[i].train_seconds : 0;
        R->ds[k].curves |= rows[i].n_curve > 0;
    }
    for (int k = 0; k < R->n_ds; k++) {
        ds_summary *d = &R->ds[k];
        for (int t = 0; t < R->n_tools; t++)
            for (int m = 0; m < d->n_models; m++) {
                double x[MP_BENCH_MAX_LIST];
                size_t nx = 0, used;
                for (size_t i = 0; i < R->n[t] && nx < MP_BENCH_MAX_LIST; i++) {
                    const mp_bench_row *r = &R->rows[t][i];
                    if (!strcmp(r->dataset, d->name) && !strcmp(r->model, d->models[m]))
                        x[nx++] = r->test;
                }
                mp_bench_mean_std(x, nx, &d->mean[t][m], &d->std[t][m], &used);
                d->n[t][m] = (int)used;
            }
    }
    return MP_OK;
}

/* ===================================================================== */
/* Figures                                                                */
/* ===================================================================== */

static const char *metric_label(const char *metric)
{
    if (!strcmp(metric, "rmse"))
        return "RMSE (lower is better)";
    if (!strcmp(metric, "mae"))
        return "MAE (lower is better)";
    if (!strcmp(metric, "auc"))
        return "ROC-AUC (higher is better)";
    if (!strcmp(metric, "prc-auc"))
        return "PRC-AUC (higher is better)";
    return metric;
}

static mp_status dataset_figure(const report *R, const ds_summary *d, const char *dir,
                                char *name, size_t n)
{
    snprintf(name, n, "fig_%s", d->name);
    double mean[2 * MAX_MODELS], std[2 * MAX_MODELS];
    for (int t = 0; t < R->n_tools; t++)
        for (int m = 0; m < d->n_models; m++) {
            mean[t * d->n_models + m] = d->mean[t][m];
            std[t * d->n_models + m] = d->std[t][m];
        }
    char title[256];
    snprintf(title, sizeof title, "%s: test %s, mean ± std over seeds", d->name, d->metric);
    return mp_bench_plot_bars(dir, name, title, metric_label(d->metric), d->models, d->n_models,
                              R->tool, R->n_tools, mean, std, NAN);
}

/* Each model's mean over the D-MPNN's, per dataset: errors in one panel,
 * AUCs in the other.  0 figures when no dataset has a D-MPNN. */
static mp_status summary_figure(const report *R, const char *dir, int *drawn)
{
    *drawn = 0;
    const char *series[MAX_MODELS];
    int n_series = 0;
    for (int m = 0; m < R->n_models; m++)
        if (strcmp(R->models[m], "dmpnn"))
            series[n_series++] = R->models[m];
    if (n_series == 0)
        return MP_OK;
    const char *cats[2][MP_BENCH_MAX_LIST * 4];
    size_t cap = (size_t)MAX_MODELS * MP_BENCH_MAX_LIST * 4;
    double *mean[2] = { mp_malloc(sizeof(double) * cap), mp_malloc(sizeof(double) * cap) };
    double *sd[2] = { mp_malloc(sizeof(double) * cap), mp_malloc(sizeof(double) * cap) };
    int n_cat[2] = { 0, 0 };
    mp_status st = MP_OK;
    if (!mean[0] || !mean[1] || !sd[0] || !sd[1]) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < R->n_ds; k++) {
            const ds_summary *d = &R->ds[k];
            if (mp_bench_higher_is_better(d->metric) != pass)
                continue;
            int base = model_index(d, "dmpnn");
            if (base < 0 || !(d->mean[0][base] != 0) || !isfinite(d->mean[0][base]))
                continue;
            cats[pass][n_cat[pass]++] = d->name;
        }
    mp_bench_panel panels[2];
    int n_panels = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (!n_cat[pass])
            continue;
        for (int s = 0; s < n_series; s++)
            for (int c = 0; c < n_cat[pass]; c++) {
                const ds_summary *d = NULL;
                for (int k = 0; k < R->n_ds && !d; k++)
                    if (!strcmp(R->ds[k].name, cats[pass][c]))
                        d = &R->ds[k];
                int base = model_index(d, "dmpnn"), m = model_index(d, series[s]);
                double b = d->mean[0][base];
                mean[pass][s * n_cat[pass] + c] = m >= 0 ? d->mean[0][m] / b : NAN;
                sd[pass][s * n_cat[pass] + c] = m >= 0 ? d->std[0][m] / fabs(b) : NAN;
            }
        panels[n_panels++] = (mp_bench_panel){
            .title = pass ? "classification: AUC relative to the D-MPNN (above 1: better)"
                          : "regression: error relative to the D-MPNN (below 1: better)",
            .ylabel = pass ? "AUC / D-MPNN AUC" : "error / D-MPNN error",
            .categories = cats[pass], .n_cat = n_cat[pass], .mean = mean[pass],
            .std = sd[pass], .ref_line = 1.0 };
    }
    if (n_panels) {
        *drawn = 1;
        st = mp_bench_plot_bar_panels(dir, "summary", n_panels, panels, series, n_series);
    }
done:
    for (int i = 0; i < 2; i++) {
        mp_free(mean[i]);
        mp_free(sd[i]);
    }
    return st;
}

/* The mean learning curves of dataset d per model (our tool's rows). */
static mp_status curves_figure(const report *R, const ds_summary *d, const char *dir,
                               char *name, size_t n, int *drawn)
{
    *drawn = 0;
    int n_epochs = 0;
    for (size_t i = 0; i < R->n[0]; i++)
        if (!strcmp(R->rows[0][i].dataset, d->name) && R->rows[0][i].n_curve > n_epochs)
            n_epochs = R->rows[0][i].n_curve;
    if (n_epochs == 0)
        return MP_OK;
    double *loss = mp_malloc(sizeof(double) * (size_t)(MAX_MODELS * n_epochs));
    double *val = mp_malloc(sizeof(double) * (size_t)(MAX_MODELS * n_epochs));
    const char *series[MAX_MODELS];
    int n_series = 0;
    mp_status st = loss && val ? MP_OK : mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (int m = 0; m < d->n_models && !st; m++) {
        int any = 0;
        for (int e = 0; e < n_epochs; e++) {
            double sl = 0, sv = 0;
            int nl = 0, nv = 0;
            for (size_t i = 0; i < R->n[0]; i++) {
                const mp_bench_row *r = &R->rows[0][i];
                if (strcmp(r->dataset, d->name) || strcmp(r->model, d->models[m]) ||
                    e >= r->n_curve)
                    continue;
                if (isfinite(r->train_loss[e]) && r->train_loss[e] > 0) {
                    sl += r->train_loss[e];
                    nl++;
                }
                if (isfinite(r->val_curve[e])) {
                    sv += r->val_curve[e];
                    nv++;
                }
            }
            loss[n_series * n_epochs + e] = nl ? sl / nl : NAN;
            val[n_series * n_epochs + e] = nv ? sv / nv : NAN;
            any |= nl > 0;
        }
        if (any)
            series[n_series++] = d->models[m];
    }
    if (!st && n_series) {
        snprintf(name, n, "curves_%s", d->name);
        char title[256], label[64];
        snprintf(title, sizeof title, "%s: learning curves (mean over seeds)", d->name);
        snprintf(label, sizeof label, "validation %s", d->metric);
        st = mp_bench_plot_curves(dir, name, title, series, n_series, n_epochs, loss, val, label);
        *drawn = !st;
    }
    mp_free(loss);
    mp_free(val);
    return st;
}

/* ===================================================================== */
/* Markdown and HTML                                                      */
/* ===================================================================== */

static void cell(FILE *fp, const ds_summary *d, int t, int m)
{
    if (m < 0 || d->n[t][m] == 0)
        fputs("-", fp);
    else
        fprintf(fp, "%.4f ± %.4f", d->mean[t][m], d->std[t][m]);
}

static void html_escape(FILE *fp, const char *s)
{
    for (; *s; s++)
        if (*s == '<')
            fputs("&lt;", fp);
        else if (*s == '>')
            fputs("&gt;", fp);
        else if (*s == '&')
            fputs("&amp;", fp);
        else
            fputc(*s, fp);
}

static void write_markdown(FILE *fp, const report *R, const char *title, const char *source,
                           const char *reference, int have_summary, const int *have_curves)
{
    fprintf(fp, "# %s\n\n", title);
    fprintf(fp, "From `%s` (%zu runs of %s)%s%s%s, by molprop %s. Test scores in each dataset's "
                "paper metric, mean ± std (ddof 0) over the seeds.\n\n", source, R->n[0],
            R->tool[0], reference ? "; the reference is `" : "", reference ? reference : "",
            reference ? "`" : "", mp_version());
    fprintf(fp, "| dataset | metric |");
    for (int m = 0; m < R->n_models; m++)
        fprintf(fp, " %s |", R->models[m]);
    fprintf(fp, "\n|---|---|");
    for (int m = 0; m < R->n_models; m++)
        fputs("---|", fp);
    fputs("\n", fp);
    for (int k = 0; k < R->n_ds; k++) {
        const ds_summary *d = &R->ds[k];
        for (int t = 0; t < R->n_tools; t++) {
            if (t)
                fprintf(fp, "| ↳ %s | %s |", R->tool[t], d->metric);
            else
                fprintf(fp, "| %s | %s |", d->name, d->metric);
            for (int m = 0; m < R->n_models; m++) {
                fputc(' ', fp);
                cell(fp, d, t, model_index(d, R->models[m]));
                fputs(" |", fp);
            }
            fputs("\n", fp);
        }
    }
    if (have_summary)
        fputs("\n## Relative to the D-MPNN\n\n![each model relative to the D-MPNN](summary.png)"
              "\n", fp);
    fputs("\n## Datasets\n", fp);
    for (int k = 0; k < R->n_ds; k++) {
        const ds_summary *d = &R->ds[k];
        fprintf(fp, "\n### %s\n\n%s; %.1f s of training in all.\n\n![%s](fig_%s.png)\n", d->name,
                metric_label(d->metric), d->train_seconds, d->name, d->name);
        if (have_curves[k])
            fprintf(fp, "\n![%s learning curves](curves_%s.png)\n", d->name, d->name);
    }
}

static void write_html(FILE *fp, const report *R, const char *title, const char *source,
                       int have_summary, const int *have_curves)
{
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>", fp);
    html_escape(fp, title);
    fputs("</title>\n<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
          "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
          "text-align:right}td:first-child{text-align:left}tr.ref{color:#666;font-style:italic}"
          "img{max-width:100%}</style></head><body>\n<h1>", fp);
    html_escape(fp, title);
    fputs("</h1>\n<p>From <code>", fp);
    html_escape(fp, source);
    fprintf(fp, "</code> (%zu runs of %s), by molprop %s.  Test scores in each dataset's paper "
                "metric, mean &plusmn; std over the seeds.</p>\n<table>\n<tr><th>dataset</th>"
                "<th>metric</th>", R->n[0], R->tool[0], mp_version());
    for (int m = 0; m < R->n_models; m++)
        fprintf(fp, "<th>%s</th>", R->models[m]);
    fputs("</tr>\n", fp);
    for (int k = 0; k < R->n_ds; k++) {
        const ds_summary *d = &R->ds[k];
        for (int t = 0; t < R->n_tools; t++) {
            fprintf(fp, "<tr%s><td>%s</td><td>%s</td>", t ? " class=\"ref\"" : "",
                    t ? R->tool[t] : d->name, d->metric);
            for (int m = 0; m < R->n_models; m++) {
                fputs("<td>", fp);
                cell(fp, d, t, model_index(d, R->models[m]));
                fputs("</td>", fp);
            }
            fputs("</tr>\n", fp);
        }
    }
    fputs("</table>\n", fp);
    if (have_summary)
        fputs("<h2>Relative to the D-MPNN</h2>\n<img src=\"summary.svg\" alt=\"summary\">\n", fp);
    fputs("<h2>Datasets</h2>\n", fp);
    for (int k = 0; k < R->n_ds; k++) {
        const ds_summary *d = &R->ds[k];
        fprintf(fp, "<h3>%s</h3>\n<p>%s; %.1f s of training in all.</p>\n"
                    "<img src=\"fig_%s.svg\" alt=\"%s\">\n", d->name, metric_label(d->metric),
                d->train_seconds, d->name, d->name);
        if (have_curves[k])
            fprintf(fp, "<img src=\"curves_%s.svg\" alt=\"%s learning curves\">\n", d->name,
                    d->name);
    }
    fputs("</body></html>\n", fp);
}

/* ===================================================================== */
/* The report                                                             */
/* ===================================================================== */

static mp_status make_dir(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return mp_error_set(MP_ERR_ARG, "--out: bad folder name '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return mp_error_set(MP_ERR_IO, "cannot create folder '%s': %s", buf, strerror(errno));
        buf[i] = c;
    }
    return MP_OK;
}

mp_status mp_run_bench_report(const mp_options *o, mp_summary **summary)
{
    if (summary)
        *summary = NULL;
    mp_status st = mp_run_check(o, "bench-report");
    if (st)
        return st;
    mp_bench_report_args a;
    memset(&a, 0, sizeof a);
    if ((st = mp_options_apply(o, &a)))
        return st;
    char src[4096], ref[4096], dir[4096];
    mp_bench_row *rows[2] = { NULL, NULL };
    size_t n[2] = { 0, 0 };
    report *R = mp_calloc(1, sizeof *R);
    int *have_curves = NULL;
    if (!R)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    if ((st = mp_bench_results_resolve(a.results, src, sizeof src)) ||
        (a.reference && (st = mp_bench_results_resolve(a.reference, ref, sizeof ref))) ||
        (st = mp_bench_rows_read(src, 0, &rows[0], &n[0], NULL)) ||
        (a.reference && (st = mp_bench_rows_read(ref, 0, &rows[1], &n[1], NULL))))
        goto done;
    if (n[0] == 0) {
        st = mp_error_set(MP_ERR_ARG, "%s holds no run", src);
        goto done;
    }
    if (a.out_dir) {
        snprintf(dir, sizeof dir, "%s", a.out_dir);
    } else {
        const char *slash = strrchr(src, '/');
        snprintf(dir, sizeof dir, "%.*sreport", slash ? (int)(slash - src + 1) : 0, src);
    }
    if ((st = mp_bench_plot_check(a.gnuplot)) || (st = make_dir(dir)))
        goto done;
    R->rows[0] = rows[0];
    R->n[0] = n[0];
    R->tool[0] = rows[0][0].tool;
    R->n_tools = 1;
    if (a.reference && n[1]) {
        R->rows[1] = rows[1];
        R->n[1] = n[1];
        R->tool[1] = strcmp(rows[1][0].tool, R->tool[0]) ? rows[1][0].tool : "reference";
        R->n_tools = 2;
    }
    if ((st = aggregate(R)))
        goto done;
    have_curves = mp_calloc((size_t)R->n_ds + 1, sizeof *have_curves);
    const char **names = mp_calloc((size_t)(2 * R->n_ds + 1), sizeof *names);
    char (*buf)[300] = mp_calloc((size_t)(2 * R->n_ds + 1), sizeof *buf);
    int n_fig = 0, have_summary = 0;
    if (!have_curves || !names || !buf) {
        mp_free(names);
        mp_free(buf);
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < R->n_ds && !st; k++) {
        st = dataset_figure(R, &R->ds[k], dir, buf[n_fig], sizeof buf[n_fig]);
        if (!st)
            names[n_fig] = buf[n_fig], n_fig++;
        if (!st && !(st = curves_figure(R, &R->ds[k], dir, buf[n_fig], sizeof buf[n_fig],
                                        &have_curves[k])) && have_curves[k])
            names[n_fig] = buf[n_fig], n_fig++;
    }
    if (!st && !(st = summary_figure(R, dir, &have_summary)) && have_summary)
        names[n_fig++] = "summary";
    if (!st)
        st = mp_bench_plot_run(a.gnuplot, dir, names, n_fig);
    mp_free(names);
    mp_free(buf);
    char path[4200];
    mp_afile md = { 0 }, html = { 0 };
    snprintf(path, sizeof path, "%s/report.md", dir);
    if (!st && !(st = mp_afile_open(&md, path))) {
        write_markdown(md.fp, R, a.title, src, a.reference ? ref : NULL, have_summary,
                       have_curves);
        st = mp_afile_commit(&md);
    }
    snprintf(path, sizeof path, "%s/report.html", dir);
    if (!st && !(st = mp_afile_open(&html, path))) {
        write_html(html.fp, R, a.title, src, have_summary, have_curves);
        st = mp_afile_commit(&html);
    }
    snprintf(path, sizeof path, "%s/report.md", dir);
    mp_summary *s = NULL;
    if (!st && !(st = mp_summary_new(&s)) &&
        !(st = mp_summary_put_number(s, "n_datasets", R->n_ds)) &&
        !(st = mp_summary_put_number(s, "n_figures", n_fig)) &&
        !(st = mp_summary_put_text(s, "report", path)))
        mp_summary_hand_over(s, summary);
    else
        mp_summary_free(s);
done:
    mp_free(have_curves);
    mp_bench_rows_free(rows[0], n[0]);
    mp_bench_rows_free(rows[1], n[1]);
    mp_free(R);
    return st;
}
