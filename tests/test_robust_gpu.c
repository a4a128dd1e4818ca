/*
 * test_robust_gpu.c - checkpoints and resume on the GPU (make test-gpu):
 * the device-resident source with captured CUDA graphs (stopped between
 * epochs: its epochs have no poll between steps), the host source on the
 * device stopped mid-epoch, an ensemble with dropout (the keyed dropout
 * stream), and bf16; each resumed run's model.mpm byte for byte the
 * straight run's (tests/test_robust_resume.c has the check).
 */
#include "gpu_test.h"
#include "robust_test.h"

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

MP_TEST(gpu_resume_resident_graph_bitwise)
{
    MP_NEED_GPU();
    mp_train_opts o = mp_test_robust_opts("cuda", 5, NULL);
    o.slot_classes = 4;   /* the classes chosen at epoch 1 must come back */
    CHECK(mp_test_robust_resume(&o, 2, 0, 4, 0, tmp("g-ref-a"), tmp("g-cut-a")));
}

MP_TEST(gpu_resume_ensemble_dropout_bitwise)
{
    MP_NEED_GPU();
    mp_train_opts o = mp_test_robust_opts("cuda", 3, NULL);
    o.ensemble_size = 2;
    o.dropout = 0.1;
    CHECK(mp_test_robust_resume(&o, 1, 1, 3, 0, tmp("g-ref-b"), tmp("g-cut-b")));
}

MP_TEST(gpu_resume_host_source_mid_epoch_bitwise)
{
    MP_NEED_GPU();
    mp_train_opts o = mp_test_robust_opts("cuda", 4, NULL);
    o.resident = 0;
    CHECK(mp_test_robust_resume(&o, 2, 0, 4, 5, tmp("g-ref-c"), tmp("g-cut-c")));
}

MP_TEST(gpu_resume_bf16_bitwise)
{
    MP_NEED_GPU();
    mp_train_opts o = mp_test_robust_opts("cuda:bf16", 4, NULL);
    o.batch_size = 100;
    CHECK(mp_test_robust_resume(&o, 1, 0, 3, 0, tmp("g-ref-d"), tmp("g-cut-d")));
}
