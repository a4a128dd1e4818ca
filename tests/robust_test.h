/*
 * robust_test.h - what the robustness tests share (test_robust_*.c): the
 * interrupted-and-resumed training check that runs on the CPU here and on
 * the GPU in test_robust_gpu.c.
 */
#ifndef MP_ROBUST_TEST_H
#define MP_ROBUST_TEST_H

#include "test.h"
#include "run/trainer.h"

/* Small ESOL training options: `epochs` epochs, hidden 32, one thread,
 * quiet, on `backend`, saving into dir (under the test's temp dir); the
 * members one after another (test_members.c trains them side by side). */
mp_train_opts mp_test_robust_opts(const char *backend, int epochs, const char *dir);

/*
 * Trains o straight into dir `ref`, then the same with a checkpoint every
 * `every` epochs into dir `cut`, stopped (mp_interrupt_after_polls) at the
 * start of epoch `stop_epoch` of member `stop_member` (0-based) plus
 * `steps_in` host training steps (0: before the epoch's first step; on a
 * resident source, whose epochs have no poll between steps, 0 only), then
 * resumed.  Checks: the stop gives MP_ERR_INTERRUPTED naming the
 * checkpoint; the checkpoint is of the last epoch before the stop that is
 * a multiple of `every`; nothing else is left in `cut`; the resumed run's
 * model.mpm is byte for byte the straight run's, and its checkpoint is
 * gone.  Returns 1 when every check passed (failures printed), 0 otherwise.
 */
int mp_test_robust_resume(const mp_train_opts *o, int every, int stop_member, int stop_epoch,
                          int steps_in, const char *ref, const char *cut);

#endif /* MP_ROBUST_TEST_H */
