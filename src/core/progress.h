/*
 * progress.h - what a training run shows while it works.  On a terminal: one
 * status line redrawn in place (epoch i/N, a bar over the whole run, the
 * running loss, the last validation score, elapsed<left as tqdm shows it):
 *   epoch 3/30 [##------------------]   8%  loss 0.1234  val rmse 0.8765  4.1s<45.0s
 * Anywhere else (a log file, a pipe, CI): one plain line per epoch, so logs
 * stay readable.
 *
 *     mp_progress p;
 *     mp_progress_begin(&p, epochs, batches_per_epoch);
 *     for (e = 0; e < epochs; e++) {
 *         for each batch: ...; mp_progress_step(&p, batch_loss);
 *         mp_progress_epoch_end(&p, e, epoch_loss, "rmse", val_rmse);
 *     }
 *     mp_progress_end(&p);
 *
 * Nothing here allocates or fails; output errors are ignored.
 */
#ifndef MP_PROGRESS_H
#define MP_PROGRESS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MP_PROGRESS_AUTO,    /* bar if the stream is a terminal (and TERM is not "dumb") */
    MP_PROGRESS_BAR,     /* always the redrawn bar                                    */
    MP_PROGRESS_LINES,   /* always one line per epoch                                 */
    MP_PROGRESS_QUIET    /* nothing                                                   */
} mp_progress_mode;

typedef struct {
    FILE  *out;
    mp_progress_mode mode;     /* resolved: BAR, LINES or QUIET            */
    int    width;              /* columns available for the bar line       */
    long   n_epochs, steps_per_epoch;
    long   epoch;              /* 0-based epoch in progress                */
    long   step;               /* batches done in this epoch               */
    long   steps_done;         /* batches done in the run                  */
    long   epochs_done;
    double loss_sum;           /* this epoch's batch losses, for the mean  */
    long   loss_n;
    double last_loss;          /* the last finished epoch's loss (NaN: none) */
    double t_start, t_epoch, t_drawn;
    char   val_name[32];
    double val_value;          /* NaN until an epoch reports one          */
    int    line_open;          /* a bar line is on screen, unterminated   */
    double (*clock)(void);     /* seconds; mp_time_now by default         */
} mp_progress;

/* Starts on stderr in MP_PROGRESS_AUTO mode.  steps_per_epoch is the number
 * of batches per epoch (0 if unknown: time left then counts epochs). */
void mp_progress_begin(mp_progress *p, long n_epochs, long steps_per_epoch);
/* The same on any stream, in any mode. */
void mp_progress_begin_on(mp_progress *p, FILE *out, mp_progress_mode mode, long n_epochs,
                          long steps_per_epoch);
/* Replaces the clock (tests) and restarts the timers. */
void mp_progress_set_clock(mp_progress *p, double (*clock)(void));

/* One batch done with this loss (NaN is allowed and shown as such).  The bar
 * is redrawn at most ten times a second. */
void mp_progress_step(mp_progress *p, double loss);

/*
 * Epoch `epoch` (0-based, shown 1-based) done.  `loss` is its mean training
 * loss (NaN: the mean of the losses given to mp_progress_step); val_name and
 * val_value the validation score (val_name NULL: none).  Lines mode prints:
 *   "epoch 3/30  loss 0.123457  val rmse 0.876543  4.1s (12.3s elapsed, 1:23 left)"
 */
void mp_progress_epoch_end(mp_progress *p, long epoch, double loss, const char *val_name,
                           double val_value);

/* Prints a line of text (a warning, say) without garbling the bar; a
 * newline is added. */
void mp_progress_message(mp_progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Finishes the bar line.  The struct may then be begun again. */
void mp_progress_end(mp_progress *p);

/* Formats a duration: "12.3s", "4:05", "1:02:03"; "?" when not finite or
 * negative.  Returns buf. */
char *mp_format_duration(char *buf, size_t n, double seconds);

#ifdef __cplusplus
}
#endif
#endif /* MP_PROGRESS_H */
