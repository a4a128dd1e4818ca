/*
 * bench_plot.c - the benchmark report's figures, drawn by gnuplot.
 *
 * Why gnuplot: it is a well-kept, widely packaged plotting program
 * (Debian's gnuplot-nox, no X needed) whose cairo PNG and SVG terminals
 * draw the same script, so each figure comes in both formats from one
 * description; and its input is text.  Every figure is left as NAME.dat
 * (the numbers) and NAME.gp (the script, which a user can edit and run
 * again: `gnuplot NAME.gp`) beside NAME.png and NAME.svg.  In the SVG each
 * series is one <g id="gnuplot_plot_N"> group holding its key's text, so a
 * test can check a figure holds the series it should.  The library links
 * no plotting code; a missing gnuplot is reported before anything is
 * written.
 */
#include "bench/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Fill colours of the series, in order (a colour-blind-safe set). */
static const char *const colors[] = { "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9",
                                      "#D55E00", "#F0E442", "#000000" };
#define N_COLORS (sizeof colors / sizeof colors[0])

/* ===================================================================== */
/* Running gnuplot                                                        */
/* ===================================================================== */

/* Runs `gnuplot args...` with stdout and stderr into log (NULL: /dev/null);
 * *exit_status its status.  MP_ERR_IO when it cannot be started. */
static mp_status spawn(const char *gnuplot, char *const argv[], const char *log, int *exit_status)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log ? log : "/dev/null",
                                     O_WRONLY | O_CREAT | O_TRUNC, 0666);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int e = posix_spawnp(&pid, gnuplot, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0)
        return mp_error_set(MP_ERR_IO, "cannot run %s: %s (the report's figures need gnuplot: "
                            "apt-get install gnuplot-nox, or --gnuplot PATH)", gnuplot,
                            strerror(e));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return mp_error_set(MP_ERR_IO, "cannot run %s (the report's figures need gnuplot: "
                            "apt-get install gnuplot-nox, or --gnuplot PATH)", gnuplot);
    *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    return MP_OK;
}

mp_status mp_bench_plot_check(const char *gnuplot)
{
    char *argv[] = { (char *)gnuplot, "-e", "set terminal svg; set terminal pngcairo", NULL };
    int status;
    mp_status st = spawn(gnuplot, argv, NULL, &status);
    if (st)
        return st;
    if (status != 0)
        return mp_error_set(MP_ERR_IO, "%s lacks the svg or pngcairo terminal (Debian's "
                            "gnuplot-nox has both)", gnuplot);
    return MP_OK;
}

mp_status mp_bench_plot_run(const char *gnuplot, const char *dir, const char *const *names,
                            int n)
{
    char master[4096], log[4096];
    snprintf(master, sizeof master, "%s/figures.gp", dir);
    snprintf(log, sizeof log, "%s/gnuplot.log", dir);
    FILE *fp = fopen(master, "w");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot write %s: %s", master, strerror(errno));
    fprintf(fp, "# figures.gp - draws every figure of the report: gnuplot figures.gp\n");
    for (int i = 0; i < n; i++)
        fprintf(fp, "load '%s.gp'\n", names[i]);
    if (fclose(fp) != 0)
        return mp_error_set(MP_ERR_IO, "cannot write %s", master);
    /* gnuplot resolves the scripts' file names against its working folder:
     * `cd` first, through -e. */
    char cd[4200];
    snprintf(cd, sizeof cd, "cd '%s'", dir);
    char *argv[] = { (char *)gnuplot, "-e", cd, "figures.gp", NULL };
    int status;
    mp_status st = spawn(gnuplot, argv, log, &status);
    if (st)
        return st;
    if (status != 0)
        return mp_error_set(MP_ERR_INTERNAL, "gnuplot failed (exit status %d); see %s", status,
                            log);
    return MP_OK;
}

/* ===================================================================== */
/* Scripts                                                                */
/* ===================================================================== */

/* NAME.gp: the terminals and outputs, each loading NAME.body.gp. */
static mp_status write_wrapper(const char *dir, const char *name, int width, int height)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.gp", dir, name);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(fp, "# %s.gp - draws %s.png and %s.svg from %s.dat (gnuplot %s.gp)\n"
                "set terminal pngcairo size %d,%d noenhanced font 'sans,10'\n"
                "set output '%s.png'\nload '%s.body.gp'\n"
                "set terminal svg size %d,%d noenhanced font 'sans,11'\n"
                "set output '%s.svg'\nload '%s.body.gp'\nunset output\n",
            name, name, name, name, name, width, height, name, name, width, height, name, name);
    return fclose(fp) == 0 ? MP_OK : mp_error_set(MP_ERR_IO, "cannot write %s", path);
}

static FILE *open_in(const char *dir, const char *name, const char *ext, mp_status *st)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    FILE *fp = fopen(path, "w");
    if (!fp)
        *st = mp_error_set(MP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return fp;
}

static mp_status close_in(FILE *fp, const char *dir, const char *name)
{
    if (fclose(fp) != 0)
        return mp_error_set(MP_ERR_IO, "cannot write %s/%s", dir, name);
    return MP_OK;
}

static void put_value(FILE *fp, double v)
{
    if (isfinite(v))
        fprintf(fp, " %.9g", v);
    else
        fputs(" ?", fp);   /* gnuplot's missing value (set datafile missing) */
}

/* s for a single-quoted gnuplot string: quotes doubled, into one of a few
 * rotating buffers (several may appear in one fprintf). */
static const char *q(const char *s)
{
    static _Thread_local char bufs[8][512];
    static _Thread_local int next;
    char *b = bufs[next++ % 8];
    size_t k = 0;
    for (; *s && k + 2 < sizeof bufs[0]; s++) {
        if (*s == '\'')
            b[k++] = '\'';
        b[k++] = *s;
    }
    b[k] = '\0';
    return b;
}

/* The histogram commands of one panel over data file `dat`: clustered bars
 * of n_series series with error bars, categories as x tics. */
static void bar_panel(FILE *fp, const char *dat, const char *title, const char *ylabel,
                      const char *const *series, int n_series, double ref_line)
{
    fprintf(fp, "set title '%s'\nset ylabel '%s'\n", q(title), q(ylabel));
    fprintf(fp, "set style data histograms\nset style histogram errorbars gap 1.5 lw 1\n"
                "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
                "set xtics rotate by -30 nomirror\nset key outside right top\n"
                "set grid ytics\nset datafile missing '?'\nset yrange [0:*]\n");
    if (isfinite(ref_line))
        fprintf(fp, "set arrow 1 from graph 0, first %g to graph 1, first %g nohead dt 2 "
                    "lc rgb '#444444'\n", ref_line, ref_line);
    else
        fputs("unset arrow 1\n", fp);
    fputs("plot ", fp);
    for (int s = 0; s < n_series; s++)
        fprintf(fp, "%s'%s' using %d:%d%s title '%s' lc rgb '%s'", s ? ", \\\n     " : "",
                dat, 2 + 2 * s, 3 + 2 * s, s ? "" : ":xtic(1)", q(series[s]),
                colors[(size_t)s % N_COLORS]);
    fputs("\n", fp);
}

mp_status mp_bench_plot_bars(const char *dir, const char *name, const char *title,
                             const char *ylabel, const char *const *categories, int n_cat,
                             const char *const *series, int n_series, const double *mean,
                             const double *std, double ref_line)
{
    mp_status st = MP_OK;
    FILE *fp = open_in(dir, name, ".dat", &st);
    if (!fp)
        return st;
    fprintf(fp, "# category");
    for (int s = 0; s < n_series; s++)
        fprintf(fp, " %s_mean %s_std", series[s], series[s]);
    fputs("\n", fp);
    for (int c = 0; c < n_cat; c++) {
        fprintf(fp, "\"%s\"", categories[c]);
        for (int s = 0; s < n_series; s++) {
            put_value(fp, mean[(size_t)s * n_cat + c]);
            put_value(fp, std ? std[(size_t)s * n_cat + c] : 0.0);
        }
        fputs("\n", fp);
    }
    if ((st = close_in(fp, dir, name)))
        return st;
    if (!(fp = open_in(dir, name, ".body.gp", &st)))
        return st;
    char dat[512];
    snprintf(dat, sizeof dat, "%s.dat", name);
    fputs("reset\n", fp);
    bar_panel(fp, dat, title, ylabel, series, n_series, ref_line);
    if ((st = close_in(fp, dir, name)))
        return st;
    int width = 240 + 70 * n_cat * (n_series > 1 ? n_series : 1);
    return write_wrapper(dir, name, width < 640 ? 640 : width > 1800 ? 1800 : width, 420);
}

mp_status mp_bench_plot_bar_panels(const char *dir, const char *name, int n_panels,
                                   const mp_bench_panel *panels, const char *const *series,
                                   int n_series)
{
    mp_status st = MP_OK;
    int max_cat = 1;
    for (int p = 0; p < n_panels; p++) {
        char file[600];
        snprintf(file, sizeof file, "%s_%d", name, p + 1);
        FILE *fp = open_in(dir, file, ".dat", &st);
        if (!fp)
            return st;
        const mp_bench_panel *q = &panels[p];
        if (q->n_cat > max_cat)
            max_cat = q->n_cat;
        fprintf(fp, "# category");
        for (int s = 0; s < n_series; s++)
            fprintf(fp, " %s_mean %s_std", series[s], series[s]);
        fputs("\n", fp);
        for (int c = 0; c < q->n_cat; c++) {
            fprintf(fp, "\"%s\"", q->categories[c]);
            for (int s = 0; s < n_series; s++) {
                put_value(fp, q->mean[(size_t)s * q->n_cat + c]);
                put_value(fp, q->std ? q->std[(size_t)s * q->n_cat + c] : 0.0);
            }
            fputs("\n", fp);
        }
        if ((st = close_in(fp, dir, file)))
            return st;
    }
    FILE *fp = open_in(dir, name, ".body.gp", &st);
    if (!fp)
        return st;
    fprintf(fp, "reset\nset multiplot layout %d,1\n", n_panels);
    for (int p = 0; p < n_panels; p++) {
        char dat[600];
        snprintf(dat, sizeof dat, "%s_%d.dat", name, p + 1);
        bar_panel(fp, dat, panels[p].title, panels[p].ylabel, series, n_series,
                  panels[p].ref_line);
    }
    fputs("unset multiplot\n", fp);
    if ((st = close_in(fp, dir, name)))
        return st;
    int width = 300 + 60 * max_cat * (n_series > 1 ? n_series : 1) / 2;
    return write_wrapper(dir, name, width < 800 ? 800 : width > 1800 ? 1800 : width,
                         330 * n_panels);
}

mp_status mp_bench_plot_curves(const char *dir, const char *name, const char *title,
                               const char *const *series, int n_series, int n_epochs,
                               const double *loss, const double *val, const char *val_label)
{
    mp_status st = MP_OK;
    FILE *fp = open_in(dir, name, ".dat", &st);
    if (!fp)
        return st;
    fprintf(fp, "# epoch");
    for (int s = 0; s < n_series; s++)
        fprintf(fp, " %s_loss %s_val", series[s], series[s]);
    fputs("\n", fp);
    for (int e = 0; e < n_epochs; e++) {
        fprintf(fp, "%d", e + 1);
        for (int s = 0; s < n_series; s++) {
            put_value(fp, loss[(size_t)s * n_epochs + e]);
            put_value(fp, val[(size_t)s * n_epochs + e]);
        }
        fputs("\n", fp);
    }
    if ((st = close_in(fp, dir, name)))
        return st;
    if (!(fp = open_in(dir, name, ".body.gp", &st)))
        return st;
    fprintf(fp, "reset\nset datafile missing '?'\nset multiplot layout 1,2 title '%s'\n"
                "set xlabel 'epoch'\nset grid\nset key top right\n", q(title));
    for (int panel = 0; panel < 2; panel++) {
        fprintf(fp, "set title '%s'\nset ylabel '%s'\n%s", q(panel ? val_label : "training loss"),
                q(panel ? val_label : "loss (mean over steps)"), panel ? "" : "set logscale y\n");
        fputs("plot ", fp);
        for (int s = 0; s < n_series; s++)
            fprintf(fp, "%s'%s.dat' using 1:%d title '%s' with linespoints pt 7 ps 0.4 lw 1.5 "
                        "lc rgb '%s'", s ? ", \\\n     " : "", name, 2 + 2 * s + panel,
                    q(series[s]), colors[(size_t)s % N_COLORS]);
        fputs(panel ? "\n" : "\nunset logscale y\n", fp);
    }
    fputs("unset multiplot\n", fp);
    if ((st = close_in(fp, dir, name)))
        return st;
    return write_wrapper(dir, name, 1100, 420);
}
