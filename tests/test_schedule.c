/*
 * test_schedule.c - the Noam learning-rate schedule against Chemprop v1's
 * arithmetic, evaluated in Python.
 *
 * The reference values were printed by a Python transcription of NoamLR
 * (numpy arrays for the per-group values, as there; step() called once by
 * the constructor, as torch's _LRScheduler.__init__ does), e.g. for A:
 *     spe = 1000 // 50; warmup = (np.array([2.0]) * spe).astype(int)
 *     total = np.array([30]) * spe
 *     inc = (max - init) / warmup; gamma = (final / max) ** (1 / (total - warmup))
 *     lr(s) = init + s*inc | max * gamma ** (s - warmup) | final
 * and the learning rate of batch b (0-based) is lr(b + 1).
 */
#include "test.h"
#include "models/schedule.h"

typedef struct {
    long   batch;
    double lr;
} lr_point;

/* Runs the schedule batch by batch and checks the listed batches exactly. */
static int run_and_check(mp_noam *s, const lr_point *pts, int n_pts, long n_batches,
                         char *why, size_t why_len)
{
    int next = 0;
    for (long b = 0; b < n_batches && next < n_pts; b++) {
        if (b == pts[next].batch) {
            if (s->lr != pts[next].lr) {
                snprintf(why, why_len, "batch %ld: lr %.17g, Chemprop %.17g", b, s->lr,
                         pts[next].lr);
                return 0;
            }
            if (mp_noam_lr_at(s, b + 1) != s->lr) {
                snprintf(why, why_len, "batch %ld: lr_at disagrees with stepping", b);
                return 0;
            }
            next++;
        }
        mp_noam_step(s);
    }
    if (next != n_pts) {
        snprintf(why, why_len, "only %d of %d points reached", next, n_pts);
        return 0;
    }
    return 1;
}

MP_TEST(schedule_noam_chemprop_defaults)
{
    /* A: 1000 training molecules, batch 50, 30 epochs, warmup 2 epochs */
    mp_noam s;
    CHECK_OK(mp_noam_init(&s, 2.0, 30, 1000, 50, 1e-4, 1e-3, 1e-4));
    CHECK_EQ_INT(s.steps_per_epoch, 20);
    CHECK_EQ_INT(s.warmup_steps, 40);
    CHECK_EQ_INT(s.total_steps, 600);
    CHECK_EQ_INT(s.step, 1);
    const lr_point a[] = {
        { 0, 0.0001225 },
        { 1, 0.000145 },
        { 2, 0.0001675 },
        { 3, 0.00019 },
        { 38, 0.0009774999999999999 },
        { 39, 0.001 },
        { 40, 0.0009958966826127415 },
        { 302, 0.0003391229198525519 },
        { 599, 0.00010000000000000132 },
        { 600, 0.0001 },
        { 602, 0.0001 },
    };
    char why[200] = "";
    CHECK_MSG(run_and_check(&s, a, 11, 700, why, sizeof why), "A: %s", why);
}

MP_TEST(schedule_noam_fractional_warmup)
{
    mp_noam s;
    char why[200] = "";
    /* C: 130 // 20 = 6 steps/epoch, warmup int(0.5 * 6) = 3, total 18 */
    CHECK_OK(mp_noam_init(&s, 0.5, 3, 130, 20, 1e-4, 1e-3, 1e-5));
    CHECK_EQ_INT(s.warmup_steps, 3);
    CHECK_EQ_INT(s.total_steps, 18);
    const lr_point c[] = {
        { 0, 0.00039999999999999996 }, { 1, 0.0007 }, { 2, 0.001 },
        { 3, 0.0007356422544596414 },  { 11, 6.309573444801937e-05 },
        { 17, 1.0000000000000011e-05 }, { 18, 1e-05 }, { 20, 1e-05 },
    };
    CHECK_MSG(run_and_check(&s, c, 8, 30, why, sizeof why), "C: %s", why);

    /* D: 70 // 10 = 7, warmup int(1.3 * 7) = int(9.1) = 9, total 28 */
    CHECK_OK(mp_noam_init(&s, 1.3, 4, 70, 10, 2e-4, 5e-3, 3e-4));
    CHECK_EQ_INT(s.warmup_steps, 9);
    const lr_point d[] = {
        { 0, 0.0007333333333333333 },  { 1, 0.0012666666666666668 },
        { 2, 0.0018000000000000002 },  { 3, 0.0023333333333333335 },
        { 7, 0.0044666666666666665 },  { 8, 0.005 },
        { 9, 0.004311835416588537 },   { 16, 0.001529351709654399 },
        { 27, 0.00030000000000000035 }, { 28, 0.0003 }, { 30, 0.0003 },
    };
    CHECK_MSG(run_and_check(&s, d, 11, 40, why, sizeof why), "D: %s", why);
}

MP_TEST(schedule_noam_train_smaller_than_batch)
{
    /* B: 37 molecules, batch 50: steps_per_epoch 0, and Python trains every
     * batch (one per epoch) at final_lr */
    mp_noam s;
    CHECK_OK(mp_noam_init(&s, 2.0, 30, 37, 50, 1e-4, 1e-3, 2e-5));
    CHECK_EQ_INT(s.steps_per_epoch, 0);
    CHECK_EQ_INT(s.warmup_steps, 0);
    CHECK_EQ_INT(s.total_steps, 0);
    for (int b = 0; b < 40; b++) {
        CHECK(s.lr == 2e-5);
        CHECK(isfinite(mp_noam_step(&s)));
    }
    /* no warmup at all: decay from max right away */
    CHECK_OK(mp_noam_init(&s, 0.0, 2, 100, 10, 1e-4, 1e-3, 1e-4));
    CHECK(s.warmup_steps == 0 && s.total_steps == 20);
    CHECK_NEAR(s.lr, 1e-3 * pow(0.1, 1.0 / 20), 0, 1e-15);
    /* warmup as long as training: linear all the way, final after */
    CHECK_OK(mp_noam_init(&s, 2.0, 2, 100, 10, 1e-4, 1e-3, 1e-4));
    CHECK_NEAR(mp_noam_lr_at(&s, 20), 1e-3, 0, 1e-15);
    CHECK(mp_noam_lr_at(&s, 21) == 1e-4);
}

MP_TEST(schedule_noam_rejects_bad_values)
{
    mp_noam s;
    CHECK(mp_noam_init(&s, -1, 30, 100, 10, 1e-4, 1e-3, 1e-4) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "warmup"));
    CHECK(mp_noam_init(&s, NAN, 30, 100, 10, 1e-4, 1e-3, 1e-4) == MP_ERR_ARG);
    CHECK(mp_noam_init(&s, 2, -1, 100, 10, 1e-4, 1e-3, 1e-4) == MP_ERR_ARG);
    CHECK(mp_noam_init(&s, 2, 30, 100, 0, 1e-4, 1e-3, 1e-4) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "batch size"));
    CHECK(mp_noam_init(&s, 2, 30, 100, 10, 1e-4, 0, 1e-4) == MP_ERR_ARG);
    CHECK(mp_noam_init(&s, 2, 30, 100, 10, -1, 1e-3, 1e-4) == MP_ERR_ARG);
    CHECK(mp_noam_init(&s, 2, 30, 100, 10, 1e-4, 1e-3, INFINITY) == MP_ERR_ARG);
}
