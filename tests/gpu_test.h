/*
 * gpu_test.h - what the GPU test files share: the environment switches
 * (MOLPROP_REQUIRE_GPU=1 turns a missing GPU from a skip into a failure;
 * MOLPROP_TEST_VERBOSE=1 prints every comparison), MP_NEED_GPU() at the top
 * of a test that needs a GPU, and ESOL featurized once per process.
 */
#ifndef MP_GPU_TEST_H
#define MP_GPU_TEST_H

#include "test.h"
#include "internal.h"   /* every module header */
#include "gpu/gpu.h"

/* 1 when environment variable `name` is set to something other than "" or "0". */
int mp_test_env_flag(const char *name);

/* Skips the test when no usable GPU is present, or fails it when
 * MOLPROP_REQUIRE_GPU is set (a GPU machine must run every GPU test). */
#define MP_NEED_GPU()                                                            \
    do {                                                                         \
        char why_[256];                                                          \
        if (!mp_backend_cuda_available(why_, sizeof why_)) {                     \
            if (mp_test_env_flag("MOLPROP_REQUIRE_GPU"))                         \
                MP_FAIL("no usable GPU (MOLPROP_REQUIRE_GPU=1): %s", why_);      \
            MP_SKIP(why_);                                                       \
        }                                                                        \
    } while (0)

/* The shared ESOL file (MOLPROP_SHARED/datasets/esol.csv.gz), loaded and
 * featurized (v1 layout, no fingerprints) on the first call; later calls
 * hand back the same two objects, which live until the process ends. */
mp_status mp_test_esol(mp_dataset **d, mp_features **f);

/* `molprop train` on the shared ESOL file through mp_train: 3 epochs, hidden
 * 32, one thread, quiet, on `backend` with the given resident / graph
 * switches and dropout (the trainer comparisons of GPU and CPU paths). */
mp_status mp_test_train_esol(const char *backend, int resident, int graph, double dropout,
                             mp_train_result *r);

/* rows x cols values of storage st at p as host floats (mp_free them;
 * NULL: a failure, message set). */
float *mp_test_floats_of(mp_backend *b, const void *p, mp_stype st, size_t rows, int cols);

/* rows x cols random values in [-scale, scale) into a new buffer of storage
 * st (NULL: out of memory). */
void *mp_test_random_dev(mp_backend *b, mp_rng *r, mp_stype st, size_t rows, int cols,
                         double scale);

/* 1 when every element has |x - y| <= rel |y| + abs_tol rms(y); else 0
 * with the first that does not named in err. */
int mp_test_close_all(const float *x, const float *y, size_t n, double rel, double abs_tol,
                      char *err, size_t cap);

#endif /* MP_GPU_TEST_H */
