/*
 * progress.c - the training progress display: a bar redrawn in place on a
 * terminal, one line per epoch elsewhere.
 */
#include "progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define REDRAW_INTERVAL 0.1   /* seconds between bar redraws */
#define BAR_CELLS       20

char *mp_format_duration(char *buf, size_t n, double s)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else {
        long t = (long)(s + 0.5);
        if (t < 3600)
            snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
        else
            snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    }
    return buf;
}

static int terminal_width(FILE *out)
{
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void mp_progress_begin_on(mp_progress *p, FILE *out, mp_progress_mode mode, long n_epochs,
                          long steps_per_epoch)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    if (mode == MP_PROGRESS_AUTO) {
        const char *term = getenv("TERM");
        int tty = out && isatty(fileno(out)) && !(term && strcmp(term, "dumb") == 0);
        mode = tty ? MP_PROGRESS_BAR : MP_PROGRESS_LINES;
    }
    if (!out)
        mode = MP_PROGRESS_QUIET;
    p->mode = mode;
    p->width = mode == MP_PROGRESS_BAR && isatty(fileno(out)) ? terminal_width(out) : 100;
    p->n_epochs = n_epochs > 0 ? n_epochs : 0;
    p->steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 0;
    p->val_value = NAN;
    p->last_loss = NAN;
    mp_progress_set_clock(p, mp_time_now);
}

void mp_progress_begin(mp_progress *p, long n_epochs, long steps_per_epoch)
{
    mp_progress_begin_on(p, stderr, MP_PROGRESS_AUTO, n_epochs, steps_per_epoch);
}

void mp_progress_set_clock(mp_progress *p, double (*clock)(void))
{
    p->clock = clock ? clock : mp_time_now;
    p->t_start = p->t_epoch = p->clock();
    p->t_drawn = -INFINITY;
}

/* Seconds left, from batches when their count is known, else from epochs. */
static double time_left(const mp_progress *p, double elapsed)
{
    if (p->steps_per_epoch > 0) {
        double total = (double)p->steps_per_epoch * (double)p->n_epochs;
        if (p->steps_done <= 0)
            return NAN;
        double left = total - (double)p->steps_done;
        return left <= 0 ? 0 : elapsed / (double)p->steps_done * left;
    }
    if (p->epochs_done <= 0)
        return NAN;
    double left = (double)(p->n_epochs - p->epochs_done);
    return left <= 0 ? 0 : elapsed / (double)p->epochs_done * left;
}

/* Fraction of the run done, for the bar. */
static double run_fraction(const mp_progress *p)
{
    if (p->n_epochs <= 0)
        return 0;
    double f = p->steps_per_epoch > 0
                   ? (double)p->steps_done / ((double)p->steps_per_epoch * (double)p->n_epochs)
                   : (double)p->epochs_done / (double)p->n_epochs;
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

static void draw_bar(mp_progress *p, double now)
{
    char line[512], el[32], left[32];
    double elapsed = now - p->t_start;
    double f = run_fraction(p);
    int cells = (int)(f * BAR_CELLS + 1e-9);
    char bar[BAR_CELLS + 1];
    for (int i = 0; i < BAR_CELLS; i++)
        bar[i] = i < cells ? '#' : '-';
    bar[BAR_CELLS] = '\0';
    long shown = p->epoch + 1 > p->n_epochs ? p->n_epochs : p->epoch + 1;
    int k = snprintf(line, sizeof line, "epoch %ld/%ld [%s] %3d%%", shown, p->n_epochs, bar,
                     (int)(f * 100 + 1e-9));
    double loss = p->loss_n > 0 ? p->loss_sum / (double)p->loss_n : p->last_loss;
    if (!isnan(loss) && k < (int)sizeof line)
        k += snprintf(line + k, sizeof line - (size_t)k, "  loss %.4g", loss);
    if (p->val_name[0] && k < (int)sizeof line)
        k += snprintf(line + k, sizeof line - (size_t)k, "  val %s %.4g", p->val_name,
                      p->val_value);
    if (k < (int)sizeof line)
        snprintf(line + k, sizeof line - (size_t)k, "  %s<%s",
                 mp_format_duration(el, sizeof el, elapsed),
                 mp_format_duration(left, sizeof left, time_left(p, elapsed)));
    /* never wrap: a wrapped line cannot be redrawn with '\r' */
    if (p->width > 1 && strlen(line) > (size_t)(p->width - 1))
        line[p->width - 1] = '\0';
    fprintf(p->out, "\r%s\x1b[K", line);
    fflush(p->out);
    p->line_open = 1;
    p->t_drawn = now;
}

void mp_progress_step(mp_progress *p, double loss)
{
    p->step++;
    p->steps_done++;
    p->loss_sum += loss;
    p->loss_n++;
    if (p->mode != MP_PROGRESS_BAR)
        return;
    double now = p->clock();
    if (now - p->t_drawn >= REDRAW_INTERVAL)
        draw_bar(p, now);
}

void mp_progress_epoch_end(mp_progress *p, long epoch, double loss, const char *val_name,
                           double val_value)
{
    double now = p->clock();
    if (isnan(loss) && p->loss_n > 0)
        loss = p->loss_sum / (double)p->loss_n;
    if (val_name) {
        snprintf(p->val_name, sizeof p->val_name, "%s", val_name);
        p->val_value = val_value;
    }
    p->epoch = epoch;
    p->epochs_done = epoch + 1;
    if (p->steps_per_epoch > 0) /* the trainer may run short epochs; trust the epoch count */
        p->steps_done = p->epochs_done * p->steps_per_epoch;
    double elapsed = now - p->t_start;
    if (p->mode == MP_PROGRESS_LINES) {
        char ep[32], el[32], left[32];
        fprintf(p->out, "epoch %ld/%ld  loss %.6g", epoch + 1, p->n_epochs, loss);
        if (val_name)
            fprintf(p->out, "  val %s %.6g", val_name, val_value);
        fprintf(p->out, "  %s (%s elapsed, %s left)\n",
                mp_format_duration(ep, sizeof ep, now - p->t_epoch),
                mp_format_duration(el, sizeof el, elapsed),
                mp_format_duration(left, sizeof left, time_left(p, elapsed)));
        fflush(p->out);
    }
    /* the bar shows this epoch's loss until the next epoch's batches come */
    p->last_loss = loss;
    p->epoch = epoch + 1;
    p->step = 0;
    p->loss_sum = 0;
    p->loss_n = 0;
    p->t_epoch = now;
    if (p->mode == MP_PROGRESS_BAR)
        draw_bar(p, now);
}

void mp_progress_message(mp_progress *p, const char *fmt, ...)
{
    if (p->mode == MP_PROGRESS_QUIET || !p->out)
        return;
    if (p->line_open)
        fputs("\r\x1b[K", p->out);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    p->line_open = 0;
    if (p->mode == MP_PROGRESS_BAR && p->t_drawn > -INFINITY)
        draw_bar(p, p->clock());
    fflush(p->out);
}

void mp_progress_end(mp_progress *p)
{
    if (p->mode == MP_PROGRESS_BAR && p->line_open) {
        fputc('\n', p->out);
        fflush(p->out);
    }
    p->line_open = 0;
}
