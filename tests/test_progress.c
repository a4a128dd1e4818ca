/*
 * test_progress.c - the progress display in both modes, on a scratch stream
 * with a fake clock.
 */
#include "test.h"
#include "core/progress.h"

#include <stdlib.h>

static double fake_now;
static double fake_clock(void) { return fake_now; }

/* Everything written to fp so far, NUL-terminated (static buffer). */
static const char *contents(FILE *fp)
{
    static char buf[1 << 15];
    fflush(fp);
    rewind(fp);
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    return buf;
}

static int count(const char *s, const char *needle)
{
    int k = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        k++;
    return k;
}

MP_TEST(progress_lines_mode)
{
    FILE *fp = tmpfile();
    CHECK(fp);
    mp_progress p;
    mp_progress_begin_on(&p, fp, MP_PROGRESS_LINES, 3, 4);
    fake_now = 100;
    mp_progress_set_clock(&p, fake_clock);
    for (int e = 0; e < 3; e++) {
        for (int b = 0; b < 4; b++) {
            fake_now += 0.5;
            mp_progress_step(&p, 1.0 + e + b);   /* mean of e+1..e+4 = e + 2.5 */
        }
        mp_progress_epoch_end(&p, e, NAN, e == 1 ? NULL : "rmse", 0.25 * e);
    }
    mp_progress_message(&p, "warning: %s", "task 2 skipped");
    mp_progress_end(&p);
    const char *s = contents(fp);
    fclose(fp);
    CHECK_MSG(count(s, "\n") == 4, "expected 4 lines:\n%s", s);
    CHECK(!strchr(s, '\r') && !strstr(s, "\x1b"));
    CHECK_MSG(strstr(s, "epoch 1/3  loss 2.5  val rmse 0  2.0s (2.0s elapsed, 4.0s left)\n"),
              "%s", s);
    CHECK_MSG(strstr(s, "epoch 2/3  loss 3.5  2.0s (4.0s elapsed, 2.0s left)\n"), "%s", s);
    CHECK_MSG(strstr(s, "epoch 3/3  loss 4.5  val rmse 0.5  2.0s (6.0s elapsed, 0.0s left)\n"),
              "%s", s);
    CHECK(strstr(s, "warning: task 2 skipped\n"));
}

MP_TEST(progress_bar_mode)
{
    FILE *fp = tmpfile();
    CHECK(fp);
    mp_progress p;
    mp_progress_begin_on(&p, fp, MP_PROGRESS_BAR, 2, 10);
    fake_now = 0;
    mp_progress_set_clock(&p, fake_clock);
    /* 20 batches 0.01 s apart: redraws are throttled to one per 0.1 s */
    for (int e = 0; e < 2; e++) {
        for (int b = 0; b < 10; b++) {
            fake_now += 0.01;
            mp_progress_step(&p, 0.5);
        }
        mp_progress_epoch_end(&p, e, 0.5, "auc", 0.75 + 0.125 * e);
    }
    mp_progress_message(&p, "note");
    mp_progress_end(&p);
    const char *s = contents(fp);
    fclose(fp);
    int draws = count(s, "\r");
    /* first step draws, then about every 10th step, plus 2 epoch ends, plus
     * the message's clear and redraw */
    CHECK_MSG(draws >= 5 && draws <= 9, "%d redraws:\n%s", draws, s);
    CHECK_MSG(strstr(s, "\repoch 1/2 [#-------------------]   5%  loss 0.5  0.0s<0.2s\x1b[K"), "%s", s);
    CHECK(strstr(s, "epoch 2/2 [##########----------]  50%  loss 0.5  val auc 0.75"));
    CHECK(strstr(s, "[####################] 100%  loss 0.5  val auc 0.875  0.2s<0.0s"));
    CHECK(strstr(s, "\r\x1b[Knote\n"));
    CHECK(s[strlen(s) - 1] == '\n');
    CHECK_EQ_INT(count(s, "\n"), 2);   /* the message, and the end */
}

MP_TEST(progress_quiet_and_durations)
{
    FILE *fp = tmpfile();
    CHECK(fp);
    mp_progress p;
    mp_progress_begin_on(&p, fp, MP_PROGRESS_QUIET, 2, 0);
    mp_progress_step(&p, 1);
    mp_progress_epoch_end(&p, 0, 1, "r2", 0.5);
    mp_progress_message(&p, "x");
    mp_progress_end(&p);
    CHECK_EQ_STR(contents(fp), "");
    fclose(fp);
    /* auto mode on a regular file is lines mode */
    fp = tmpfile();
    mp_progress_begin_on(&p, fp, MP_PROGRESS_AUTO, 1, 0);
    CHECK(p.mode == MP_PROGRESS_LINES);
    fclose(fp);
    char b[32];
    CHECK_EQ_STR(mp_format_duration(b, sizeof b, 12.34), "12.3s");
    CHECK_EQ_STR(mp_format_duration(b, sizeof b, 245), "4:05");
    CHECK_EQ_STR(mp_format_duration(b, sizeof b, 3723), "1:02:03");
    CHECK_EQ_STR(mp_format_duration(b, sizeof b, NAN), "?");
    CHECK_EQ_STR(mp_format_duration(b, sizeof b, -1), "?");
}
