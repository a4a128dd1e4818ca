/*
 * test_bench_report.c - `molprop bench report` (the Markdown, the HTML, and
 * figures that are valid PNG and SVG files holding the series they should:
 * one per tool in a dataset's figure, one per model in the summary and the
 * learning curves) and `molprop bench` from the command line: stopped by
 * SIGTERM it keeps whole rows and no temporary file, and the same command
 * then finishes the grid.
 */
#include "test.h"
#include "internal.h"
#include "bench/bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

extern char **environ;

static const char *tmp(const char *name) { return mp_test_tmp("report_", name); }

/* Appends rows of `tool`: dataset ds, each model m with test v[m][seed]. */
static void add_rows(const char *path, const char *tool, const char *ds, const char *metric,
                     const char *const *models, int n_models, const double v[][3])
{
    int fd;
    if (mp_bench_results_open(path, &fd) != MP_OK)
        return;
    for (int m = 0; m < n_models; m++)
        for (int s = 0; s < 3; s++) {
            double tt[1] = { v[m][s] };
            double loss[4] = { 1.0 + m, 0.5 + m, 0.25 + m, 0.2 + m };
            double val[4] = { 0.5, 0.6, 0.7, 0.72 };
            mp_bench_row r;
            memset(&r, 0, sizeof r);
            r.tool = (char *)tool;
            r.dataset = (char *)ds;
            r.model = (char *)models[m];
            r.split = "scaffold_balanced";
            r.metric = (char *)metric;
            r.device = "cpu";
            r.precision = "fp32";
            r.version = "0.1.0";
            r.seed = s;
            r.n_tasks = 1;
            r.test = r.val = v[m][s];
            r.test_tasks = r.val_tasks = tt;
            r.epochs = 4;
            r.best_epoch = 4;
            r.train_seconds = 1.5;
            r.n_curve = strcmp(tool, "molprop") ? 0 : 4;
            r.train_loss = loss;
            r.val_curve = val;
            mp_bench_results_append(fd, path, &r);
        }
    close(fd);
}

/* A PNG: signature, chunks with good CRCs, IHDR first (w x h), IDAT, IEND
 * last.  1 if valid. */
static int png_valid(const char *path, unsigned *w, unsigned *h)
{
    size_t len;
    unsigned char *p = (unsigned char *)mp_test_slurp(path, &len);
    static const unsigned char sig[8] = { 137, 'P', 'N', 'G', 13, 10, 26, 10 };
    int ok = p && len > 8 && !memcmp(p, sig, 8), n = 0, idat = 0, iend = 0;
    size_t at = 8;
    while (ok && at + 12 <= len && !iend) {
        uint32_t clen = (uint32_t)p[at] << 24 | p[at + 1] << 16 | p[at + 2] << 8 | p[at + 3];
        if (at + 12 + clen > len) {
            ok = 0;
            break;
        }
        const unsigned char *type = p + at + 4;
        uint32_t crc = (uint32_t)crc32(0, type, clen + 4);
        const unsigned char *c = p + at + 8 + clen;
        ok = crc == ((uint32_t)c[0] << 24 | c[1] << 16 | c[2] << 8 | c[3]);
        if (n == 0) {
            ok = ok && !memcmp(type, "IHDR", 4) && clen == 13;
            *w = (unsigned)(type[4] << 24 | type[5] << 16 | type[6] << 8 | type[7]);
            *h = (unsigned)(type[8] << 24 | type[9] << 16 | type[10] << 8 | type[11]);
        }
        idat |= !memcmp(type, "IDAT", 4);
        iend = !memcmp(type, "IEND", 4);
        at += 12 + clen;
        n++;
    }
    mp_free(p);
    return ok && idat && iend && at == len && *w > 0 && *h > 0;
}

/* The series of a gnuplot SVG: the key text of each <g id="gnuplot_plot_N">
 * group into names (comma-joined, in order), and the polygons (bars) of
 * each into bars[]. */
static int svg_series(const char *path, char *names, size_t n, int *bars, int max)
{
    char *s = mp_test_slurp(path, NULL);
    names[0] = '\0';
    if (!s || !strstr(s, "<svg") || !strstr(s, "</svg>")) {
        mp_free(s);
        return -1;
    }
    int k = 0;
    char *g = strstr(s, "<g id=\"gnuplot_plot_");
    while (g && k < max) {
        char *next = strstr(g + 1, "<g id=\"gnuplot_plot_");
        char *t = strstr(g, "<text>");
        if (t && (!next || t < next)) {
            char *e = strstr(t, "</text>");
            size_t used = strlen(names);
            snprintf(names + used, n - used, "%s%.*s", used ? "," : "", (int)(e - t - 6), t + 6);
        }
        int polys = 0;
        for (char *q = strstr(g, "<polygon"); q && (!next || q < next); q = strstr(q + 1, "<polygon"))
            polys++;
        bars[k++] = polys;
        g = next;
    }
    mp_free(s);
    return k;
}

MP_TEST(bench_report_draws_valid_figures_with_their_series)
{
    static const char *const models[] = { "dmpnn", "dmpnn-rdkit2d", "ffn-morgan" };
    static const double esol[3][3] = { { 1.0, 1.1, 1.2 }, { 0.9, 1.0, 1.1 }, { 2.0, 2.2, 2.4 } };
    static const double bace[3][3] = { { 0.8, 0.82, 0.84 }, { 0.85, 0.86, 0.87 }, { 0.7, 0.71, 0.72 } };
    static const double ref[3][3] = { { 1.3, 1.4, 1.5 }, { 1.2, 1.2, 1.2 }, { 2.5, 2.5, 2.5 } };
    const char *ours = tmp("ours.tsv"), *theirs = tmp("theirs.tsv"), *dir = tmp("out");
    unlink(ours);
    unlink(theirs);
    add_rows(ours, "molprop", "esol", "rmse", models, 3, esol);
    add_rows(ours, "molprop", "bace", "auc", models, 3, bace);
    add_rows(theirs, "chemprop", "esol", "rmse", models, 3, ref);
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "bench-report"));
    CHECK_OK(mp_options_set(o, "results", ours));
    CHECK_OK(mp_options_set(o, "reference", theirs));
    CHECK_OK(mp_options_set(o, "out", dir));
    mp_summary *s;
    mp_status st = mp_run_bench_report(o, &s);
    CHECK_MSG(st == MP_OK, "%s (is gnuplot-nox installed? make deps)", mp_error_message());
    CHECK(mp_summary_number(s, "n_datasets") == 2);
    CHECK(mp_summary_number(s, "n_figures") == 5);   /* 2 datasets, 2 curves, the summary */
    mp_summary_free(s);

    char path[1400], names[512];
    int bars[16];
    unsigned w = 0, h = 0;
    static const char *const figs[] = { "fig_esol", "fig_bace", "curves_esol", "curves_bace",
                                        "summary" };
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s.png", dir, figs[i]);
        CHECK_MSG(png_valid(path, &w, &h), "%s is not a valid PNG", path);
        CHECK(w >= 640 && h >= 300);
        snprintf(path, sizeof path, "%s/%s.svg", dir, figs[i]);
        CHECK_MSG(svg_series(path, names, sizeof names, bars, 16) > 0, "%s", path);
    }
    /* esol: ours and the reference, a bar per model each (+ the key's swatch) */
    snprintf(path, sizeof path, "%s/fig_esol.svg", dir);
    CHECK_EQ_INT(svg_series(path, names, sizeof names, bars, 16), 2);
    CHECK_EQ_STR(names, "molprop,chemprop");
    CHECK(bars[0] == 4 && bars[1] == 4);
    /* bace: no reference runs: its bars are missing, ours are there */
    snprintf(path, sizeof path, "%s/fig_bace.svg", dir);
    CHECK_EQ_INT(svg_series(path, names, sizeof names, bars, 16), 2);
    CHECK_MSG(bars[0] == 4 && bars[1] == 0, "bars %d %d", bars[0], bars[1]);
    /* the summary: the two other models in each of two panels */
    snprintf(path, sizeof path, "%s/summary.svg", dir);
    CHECK_EQ_INT(svg_series(path, names, sizeof names, bars, 16), 4);
    CHECK_EQ_STR(names, "dmpnn-rdkit2d,ffn-morgan,dmpnn-rdkit2d,ffn-morgan");
    /* learning curves: a line per model in both panels */
    snprintf(path, sizeof path, "%s/curves_esol.svg", dir);
    CHECK_EQ_INT(svg_series(path, names, sizeof names, bars, 16), 6);
    CHECK_EQ_STR(names, "dmpnn,dmpnn-rdkit2d,ffn-morgan,dmpnn,dmpnn-rdkit2d,ffn-morgan");

    /* the numbers behind the figures */
    snprintf(path, sizeof path, "%s/fig_esol.dat", dir);
    char *dat = mp_test_slurp(path, NULL);
    CHECK(dat && strstr(dat, "\"dmpnn\" 1.1 0.0816496581 1.4 0.0816496581\n") &&
          strstr(dat, "\"ffn-morgan\" 2.2 0.163299316 2.5 0\n"));
    mp_free(dat);
    snprintf(path, sizeof path, "%s/summary_1.dat", dir);   /* regression: error ratios */
    dat = mp_test_slurp(path, NULL);
    CHECK(dat && strstr(dat, "\"esol\" 0.909090909 ") && strstr(dat, " 2 0.148"));
    mp_free(dat);
    snprintf(path, sizeof path, "%s/curves_esol.dat", dir);
    dat = mp_test_slurp(path, NULL);
    CHECK(dat && strstr(dat, "\n1 1 0.5 2 0.5 3 0.5\n") && strstr(dat, "\n4 0.2 0.72 1.2 0.72 "));
    mp_free(dat);

    /* Markdown and HTML */
    snprintf(path, sizeof path, "%s/report.md", dir);
    char *md = mp_test_slurp(path, NULL);
    CHECK(md && strstr(md, "| esol | rmse | 1.1000 ± 0.0816 | 1.0000 ± 0.0816 | 2.2000 ± 0.1633 |"));
    CHECK(strstr(md, "| ↳ chemprop | rmse | 1.4000 ± 0.0816 | 1.2000 ± 0.0000 |"));
    CHECK(strstr(md, "![esol](fig_esol.png)") && strstr(md, "(summary.png)") &&
          strstr(md, "(curves_bace.png)"));
    mp_free(md);
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *html = mp_test_slurp(path, NULL);
    CHECK(html && strstr(html, "<img src=\"fig_bace.svg\"") && strstr(html, "</html>"));
    mp_free(html);

    /* no gnuplot: an error before anything is written */
    const char *dir2 = tmp("out2");
    CHECK_OK(mp_options_set(o, "out", dir2));
    CHECK_OK(mp_options_set(o, "gnuplot", "/nonexistent/gnuplot"));
    CHECK(mp_run_bench_report(o, &s) == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "gnuplot") != NULL);
    CHECK(access(dir2, F_OK) != 0);
    mp_options_free(o);
}

/* ===================================================================== */
/* The command line: stopped and resumed                                  */
/* ===================================================================== */

static int leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".part");
    closedir(d);
    return n;
}

static long data_rows(const char *path)
{
    mp_bench_row *rows;
    size_t n, torn;
    if (mp_bench_rows_read(path, 1, &rows, &n, &torn) != MP_OK)
        return -1;
    mp_bench_rows_free(rows, n);
    return torn ? -2 : (long)n;
}

MP_TEST(cli_bench_stopped_by_sigterm_resumes)
{
    const char *bin = getenv("MOLPROP_BIN");
    if (!bin)
        MP_SKIP("MOLPROP_BIN is not set (run through make test)");
    /* 400 molecules of ESOL as a user's CSV */
    const char *csv = tmp("esol400.csv");
    mp_dataset *d;
    CHECK_OK(mp_dataset_load(&d, mp_test_shared("datasets/esol.csv.gz"), NULL));
    FILE *fp = fopen(csv, "w");
    fprintf(fp, "smiles,logS\n");
    for (size_t i = 0; i < 400; i++)
        fprintf(fp, "%s,%.17g\n", d->smiles[i], d->targets[i]);
    fclose(fp);
    mp_dataset_free(d);
    const char *out = tmp("cli");
    char ds[1400], results[1300], cache[1300];
    snprintf(ds, sizeof ds, "--datasets=mine=%s:regression", csv);
    snprintf(results, sizeof results, "%s/results.tsv", out);
    snprintf(cache, sizeof cache, "%s/cache", out);
    char outarg[1300];
    snprintf(outarg, sizeof outarg, "--out=%s", out);
    char *argv[] = { (char *)bin, "bench", ds, "--models=dmpnn,ffn-morgan", "--seeds=0,1,2",
                     "--epochs=4", "--threads=1", outarg, NULL };
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    CHECK(posix_spawn(&pid, bin, &fa, NULL, argv, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    /* stop it once the first run is in the file */
    double t0 = mp_time_now();
    while (data_rows(results) < 1 && mp_time_now() - t0 < 120)
        usleep(20000);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    long kept = data_rows(results);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM,
              "status %d (the run ended before the signal?)", status);
    CHECK_MSG(kept >= 1 && kept < 6, "%ld rows kept", kept);   /* whole rows only */
    CHECK_EQ_INT(leftovers(out), 0);
    CHECK_EQ_INT(leftovers(cache), 0);
    /* the same command finishes the grid */
    static char text[16384];
    int rc = mp_test_cli(text, sizeof text, "bench '%s' --models dmpnn,ffn-morgan --seeds 0,1,2 "
                         "--epochs 4 --threads 1 '%s'", ds, outarg);
    CHECK_MSG(rc == 0, "%s", text);
    char want[64];
    snprintf(want, sizeof want, "%ld already done", kept);
    CHECK_MSG(strstr(text, want) && strstr(text, "from the cache"), "%s", text);
    CHECK_EQ_INT(data_rows(results), 6);
    /* and the report draws it */
    rc = mp_test_cli(text, sizeof text, "bench report '%s'", out);
    CHECK_MSG(rc == 0 && strstr(text, "report: "), "%s", text);
    char md[1400];
    snprintf(md, sizeof md, "%s/report/report.md", out);
    CHECK(access(md, R_OK) == 0);
}
