/*
 * test_gpu_concurrent.c - runs side by side on one GPU (the benchmark
 * runner's --jobs, hpopt's --jobs): three trainings, each with its own cuda
 * backend, resident epochs and captured CUDA graphs, in three threads at
 * once, give the models they give one after another.  Before the capture
 * gate (cuda_ctx.cuh) another thread's cudaFree or cuBLAS set-up could
 * invalidate a capture ("operation failed due to a previous error during
 * capture").
 */
#include "gpu_test.h"

#include <pthread.h>

enum { RUNS = 3 };

typedef struct {
    int             seed;
    int             share;   /* --gpu-share */
    char            dir[1024];
    mp_status       st;
    char            msg[1024];
    mp_train_result r;
} run_arg;

static void *run(void *p)
{
    run_arg *a = p;
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = 3;
    o.hidden = 32;
    o.dropout = 0.1;
    o.threads = 1;
    o.quiet = 1;
    o.seed = (uint64_t)a->seed;
    o.gpu_share = a->share;
    o.backend = "cuda:bf16";
    o.resident = 1;
    o.graph = 1;
    o.save_dir = a->dir;
    memset(&a->r, 0, sizeof a->r);
    a->st = mp_train(&o, &a->r);
    if (a->st)
        snprintf(a->msg, sizeof a->msg, "%s", mp_error_message());
    return NULL;
}

/* RUNS trainings under --gpu-share `share`, one after another and side by
 * side: the same models. */
static void side_by_side_equal_in_turn(mp_test_result *mp__r, int share)
{
    run_arg seq[RUNS], par[RUNS];
    for (int i = 0; i < RUNS; i++) {
        seq[i] = (run_arg){ .seed = i, .share = share };
        par[i] = (run_arg){ .seed = i, .share = share };
        snprintf(seq[i].dir, sizeof seq[i].dir, "%s/seq%d_%d", mp_test_tmpdir(), share, i);
        snprintf(par[i].dir, sizeof par[i].dir, "%s/par%d_%d", mp_test_tmpdir(), share, i);
        run(&seq[i]);
        CHECK_MSG(seq[i].st == MP_OK, "sequential run %d: %s", i, seq[i].msg);
    }
    pthread_t th[RUNS];
    for (int i = 0; i < RUNS; i++)
        CHECK(pthread_create(&th[i], NULL, run, &par[i]) == 0);
    for (int i = 0; i < RUNS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < RUNS; i++) {
        CHECK_MSG(par[i].st == MP_OK, "run %d side by side: %s", i, par[i].msg);
        CHECK_MSG(par[i].r.val_mean == seq[i].r.val_mean && par[i].r.test_mean == seq[i].r.test_mean,
                  "run %d: val %.17g / %.17g, test %.17g / %.17g side by side / alone", i,
                  par[i].r.val_mean, seq[i].r.val_mean, par[i].r.test_mean, seq[i].r.test_mean);
        char pa[1100], pb[1100];
        snprintf(pa, sizeof pa, "%s/model.mpm", par[i].dir);
        snprintf(pb, sizeof pb, "%s/model.mpm", seq[i].dir);
        size_t na = 0, nb = 0;
        char *ma = mp_test_slurp(pa, &na), *mb = mp_test_slurp(pb, &nb);
        CHECK(ma && mb);
        /* the parameter tensors are the same bytes (the file: 24 bytes, the
         * header's length as u64 LE, the header, the tensors, a CRC) */
        uint64_t ha = 0, hb = 0;
        for (int k = 7; ma && mb && na > 40 && nb > 40 && k >= 0; k--) {
            ha = ha << 8 | (unsigned char)ma[24 + k];
            hb = hb << 8 | (unsigned char)mb[24 + k];
        }
        CHECK(ha > 0 && hb > 0 && 32 + ha + 4 <= na && 32 + hb + 4 <= nb);
        CHECK_MSG(na - ha == nb - hb && !memcmp(ma + 32 + ha, mb + 32 + hb, na - 32 - ha - 4),
                  "run %d: the parameters differ side by side", i);
        mp_free(ma);
        mp_free(mb);
        mp_train_result_free(&par[i].r);
        mp_train_result_free(&seq[i].r);
    }
}

MP_TEST(gpu_concurrent_trainings_equal_sequential_ones)
{
    MP_NEED_GPU();
    side_by_side_equal_in_turn(mp__r, 1);
}

/* hpopt's trials side by side take --gpu-share = --jobs (products sized
 * for a share, the small ones on cuBLAS): still the models they are in turn. */
MP_TEST(gpu_concurrent_shared_trainings_equal_sequential_ones)
{
    MP_NEED_GPU();
    side_by_side_equal_in_turn(mp__r, RUNS);
}
