/*
 * test_gpu_members.c - ensemble members side by side on one GPU (make
 * test-gpu): each member on its own cuda backend instance (stream, cuBLAS
 * handles), device-resident epochs replayed from captured CUDA graphs, in
 * each precision (fp32, tf32, bf16): the ensemble is byte for byte the one
 * trained one member after another; the host source too; and a side-by-side
 * run stopped and resumed (test_members.c has the checks).
 */
#include "gpu_test.h"
#include "members_test.h"

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static mp_train_opts gpu_opts(const char *backend, int epochs, int members)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = epochs;
    o.hidden = 64;
    o.dropout = 0.1;
    o.threads = 1;
    o.quiet = 1;
    o.backend = backend;
    o.ensemble_size = members;
    return o;
}

MP_TEST(gpu_members_side_by_side_equal_in_turn_each_precision)
{
    MP_NEED_GPU();
    static const char *const prec[3] = { "cuda:fp32", "cuda:tf32", "cuda:bf16" };
    for (int p = 0; p < 3; p++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "gm-seq-%d", p);
        snprintf(b, sizeof b, "gm-par-%d", p);
        mp_train_opts o = gpu_opts(prec[p], 3, 4);
        CHECK_MSG(mp_test_members_equal(&o, 4, 0, tmp(a), tmp(b)), "%s", prec[p]);
    }
}

MP_TEST(gpu_members_side_by_side_host_source_and_ffn)
{
    MP_NEED_GPU();
    mp_train_opts o = gpu_opts("cuda:bf16", 2, 3);
    o.resident = 0;
    CHECK(mp_test_members_equal(&o, 3, 0, tmp("gm-seq-h"), tmp("gm-par-h")));
    mp_train_opts f = gpu_opts("cuda", 2, 3);
    f.model = MP_MODEL_FFN;
    f.features = MP_FEAT_MORGAN;
    CHECK(mp_test_members_equal(&f, 3, 0, tmp("gm-seq-f"), tmp("gm-par-f")));
}

MP_TEST(gpu_members_side_by_side_resume_bitwise)
{
    MP_NEED_GPU();
    mp_train_opts o = gpu_opts("cuda:bf16", 5, 3);
    CHECK(mp_test_members_resume(&o, 3, 2, 2, tmp("gm-ref"), tmp("gm-cut")));
}

/* set_share (ops.h): a share of 1 .. the SMs' count is taken, 0 refused
 * with a message; the cuda backend has it, the cpu backend does not. */
MP_TEST(gpu_set_share_takes_counts_and_refuses_zero)
{
    mp_backend *cpu = NULL;
    CHECK(mp_backend_open(&cpu, "cpu") == MP_OK);
    CHECK(cpu->set_share == NULL);
    mp_backend_close(cpu);
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK(mp_backend_open(&b, "cuda:bf16") == MP_OK);
    CHECK(b->set_share != NULL);
    CHECK(b->set_share(b, 5) == MP_OK);
    CHECK(b->set_share(b, 1000) == MP_OK);   /* more instances than SMs: one SM each */
    CHECK(b->set_share(b, 1) == MP_OK);
    CHECK(b->set_share(b, 0) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "share") != NULL);
    mp_backend_close(b);
}
