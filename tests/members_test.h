/*
 * members_test.h - what the concurrent-member tests share (test_members.c
 * on the cpu, test_gpu_members.c on the GPU under make test-gpu): an
 * ensemble trained one member after another against the same ensemble
 * trained side by side, and a side-by-side run stopped and resumed.
 */
#ifndef MP_MEMBERS_TEST_H
#define MP_MEMBERS_TEST_H

#include "test.h"
#include "run/trainer.h"

/*
 * Trains o with member_jobs 1 into dir `seq` and with member_jobs `jobs`
 * (and threads `threads`, 0: o's) into dir `par`.  Checks both succeed,
 * their validation and test scores and best epochs are equal, and the two
 * model.mpm files are byte for byte the same.  1 when every check passed.
 */
int mp_test_members_equal(const mp_train_opts *o, int jobs, int threads, const char *seq,
                          const char *par);

/*
 * Trains o (member_jobs `jobs`) straight into `ref`; then the same with a
 * checkpoint after every epoch into `cut`, stopped after 3/5 of its
 * training's polls; checks the checkpoint holds at least `min_states` members in
 * training, nothing else is left in `cut`; resumes with member_jobs
 * `resume_jobs` and checks its model.mpm is byte for byte ref's.
 */
int mp_test_members_resume(const mp_train_opts *o, int jobs, int resume_jobs, int min_states,
                           const char *ref, const char *cut);

#endif /* MP_MEMBERS_TEST_H */
