/*
 * test_dist_threads.c - threads as ranks (core/dist.h mp_dist_run_threads,
 * what `train --devices N` runs): every collective over 3 thread ranks
 * gives the rank-order result on every rank (the same bits as the serial
 * sum), a rank that fails wakes the others and its own message comes back,
 * and the command's --devices / --gpus: the thread ranks write once, run
 * to run the same model, and a GPU count the machine does not have is
 * refused by name.  The training curves against one process and MPI are
 * in test_dist.c (dist_threads_*); the GPU checks are gpu_* (make test-gpu).
 */
#include "test.h"
#include "gpu_test.h"

#include "core/core.h"
#include "core/dist.h"
#include "gpu/gpu.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define K 3
#define N 1000

typedef struct {
    float    in[K][N], w[K];
    float    sum[K][N];      /* each rank's weighted sum        */
    float    gather[K][K * 4];
    uint64_t u[K][2];
    double   d[K], mx[K];
    int      ok[K], bcast[K], size[K], rank[K], in_threads[K];
    mp_status st[K];
} coll;

static mp_status collectives(void *arg, int rank)
{
    coll *c = arg;
    c->size[rank] = mp_dist_size();
    c->rank[rank] = mp_dist_rank();
    c->in_threads[rank] = mp_dist_in_threads();
    float v[N];
    memcpy(v, c->in[rank], sizeof v);
    mp_status st;
    if ((st = mp_dist_sum_float(v, N, c->w, NULL)))
        return st;
    memcpy(c->sum[rank], v, sizeof v);
    if ((st = mp_dist_allgather_float(c->in[rank], c->gather[rank], 4)))
        return st;
    c->u[rank][0] = (uint64_t)rank + 1;
    c->u[rank][1] = 10;
    c->d[rank] = 0.1 * (rank + 1);
    c->mx[rank] = rank == 1 ? 7.5 : -1.0;
    c->bcast[rank] = rank == 1 ? 42 : -1;
    if ((st = mp_dist_sum_u64(c->u[rank], 2)) || (st = mp_dist_sum_double(&c->d[rank], 1)) ||
        (st = mp_dist_max_double(&c->mx[rank])) ||
        (st = mp_dist_bcast(&c->bcast[rank], sizeof(int), 1)) || (st = mp_dist_barrier()))
        return st;
    c->ok[rank] = mp_dist_all_ok(rank != 2);
    return MP_OK;
}

MP_TEST(dist_threads_collectives_are_rank_order_sums)
{
    static coll c;
    memset(&c, 0, sizeof c);
    mp_rng g;
    mp_rng_seed(&g, 7, 1);
    for (int r = 0; r < K; r++) {
        c.w[r] = (float)(0.25 + 0.1 * r);
        for (int i = 0; i < N; i++)
            c.in[r][i] = (float)(mp_rng_normal(&g) * 1e3);
    }
    CHECK_OK(mp_dist_run_threads(K, NULL, collectives, &c));
    CHECK_EQ_INT(mp_dist_in_threads(), 0);   /* the caller is no rank */
    CHECK_EQ_INT(mp_dist_size(), 1);
    int sums_differ_by_order = 0;
    for (int i = 0; i < N; i++) {
        volatile float s = c.w[0] * c.in[0][i];
        for (int r = 1; r < K; r++) {
            volatile float p = c.w[r] * c.in[r][i];
            s = s + p;
        }
        volatile float rev = c.w[2] * c.in[2][i], p1 = c.w[1] * c.in[1][i],
                       p0 = c.w[0] * c.in[0][i];
        rev = rev + p1;
        rev = rev + p0;
        sums_differ_by_order |= rev != s;
        for (int r = 0; r < K; r++)
            CHECK_MSG(memcmp(&c.sum[r][i], (const void *)&s, sizeof s) == 0,
                      "rank %d element %d: %.9g, the rank-order sum is %.9g", r, i,
                      c.sum[r][i], (double)s);
    }
    CHECK_MSG(sums_differ_by_order, "no element where the order matters: the test is weak");
    for (int r = 0; r < K; r++) {
        CHECK_EQ_INT(c.size[r], K);
        CHECK_EQ_INT(c.rank[r], r);
        CHECK_EQ_INT(c.in_threads[r], 1);
        for (int q = 0; q < K; q++)
            CHECK(!memcmp(c.gather[r] + 4 * q, c.in[q], 4 * sizeof(float)));
        CHECK(c.u[r][0] == 6 && c.u[r][1] == 30);
        CHECK(c.d[r] == (0.1 + 0.2) + 0.30000000000000004);
        CHECK(c.mx[r] == 7.5);
        CHECK_EQ_INT(c.bcast[r], 42);
        CHECK_EQ_INT(c.ok[r], 0);   /* rank 2 said no: every rank hears it */
    }
}

static mp_status one_fails(void *arg, int rank)
{
    int *woke = arg;
    if (rank == 1)
        return mp_error_set(MP_ERR_FORMAT, "rank one broke on purpose");
    float v[4] = { 1, 2, 3, 4 };
    mp_status st = mp_dist_sum_float(v, 4, NULL, NULL);   /* would wait for rank 1 forever */
    if (st)
        __atomic_add_fetch(woke, 1, __ATOMIC_RELAXED);
    return st;
}

MP_TEST(dist_threads_failed_rank_wakes_the_others)
{
    int woke = 0;
    mp_status st = mp_dist_run_threads(K, NULL, one_fails, &woke);
    CHECK_EQ_INT(st, MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "rank one broke on purpose"), "%s",
              mp_error_message());
    CHECK_EQ_INT(woke, K - 1);
}

static mp_status in_caller(void *arg, int rank)
{
    *(int *)arg = 100 + rank + mp_dist_in_threads() + 10 * (mp_dist_size() - 1);
    return MP_OK;
}

MP_TEST(dist_threads_one_rank_runs_in_the_caller)
{
    int v = 0;
    CHECK_OK(mp_dist_run_threads(1, NULL, in_caller, &v));
    CHECK_EQ_INT(v, 100);
}

static const char *tmp(const char *name) { return mp_test_tmp("dthr_", name); }

static char out[16384];

MP_TEST(dist_threads_cli_devices_write_once_and_repeat)
{
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    const char *a = tmp("a"), *b = tmp("b");
    CHECK_MSG(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 24 "
                          "--devices 2 --threads 2 --save-dir '%s'", esol, a) == 0, "%s", out);
    const char *first = strstr(out, "test rmse = ");
    CHECK_MSG(first && !strstr(first + 1, "test rmse = "), "one summary: %s", out);
    const char *ep = strstr(out, "epoch 2/2");
    CHECK_MSG(ep && !strstr(ep + 1, "epoch 2/2"), "the epochs' lines once: %s", out);
    CHECK_EQ_INT(mp_test_count_in(a, ""), 3);
    CHECK_EQ_INT(mp_test_count_in(a, "model.mpm"), 1);
    CHECK_MSG(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 24 "
                          "--gpus 0,1 --device cpu --threads 2 --quiet --save-dir '%s'", esol,
                          b) == 0, "%s", out);
    char pa[1300], pb[1300];
    snprintf(pa, sizeof pa, "%s/model.mpm", a);
    snprintf(pb, sizeof pb, "%s/model.mpm", b);
    size_t na, nb;
    char *fa = mp_test_slurp(pa, &na), *fb = mp_test_slurp(pb, &nb);
    CHECK_MSG(fa && fb && na == nb && !memcmp(fa, fb, na), "two runs of 2 thread ranks differ");
    /* the data read and featurized once for both threads: the model of 2
     * MPI ranks, each reading its own */
    if (mp_dist_built_with_mpi() && system("command -v mpirun > /dev/null 2>&1") == 0) {
        const char *m = tmp("m");
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root "
                 "--oversubscribe -np 2 '%s' train --data '%s' --epochs 2 --hidden 24 "
                 "--threads 1 --quiet --save-dir '%s' > /dev/null 2>&1", getenv("MOLPROP_BIN"),
                 esol, m);
        CHECK_EQ_INT(system(cmd), 0);
        char pm[1300];
        snprintf(pm, sizeof pm, "%s/model.mpm", m);
        size_t nm;
        char *fm = mp_test_slurp(pm, &nm);
        CHECK_MSG(fm && fa && nm == na && !memcmp(fm, fa, na),
                  "--devices 2 and mpirun -np 2 saved other models");
        mp_free(fm);
    }
    mp_free(fa);
    mp_free(fb);
}

MP_TEST(dist_threads_cli_refuses_what_is_not_there)
{
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    int gpus = mp_backend_cuda_device_count(), ask = gpus < 1 ? 2 : gpus + 1;
    char want[128];
    snprintf(want, sizeof want, "--devices %d: this machine has %d GPU%s", ask, gpus,
             gpus == 1 ? "" : "s");
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --device gpu --devices %d "
                      "--save-dir '%s'", esol, ask, tmp("g")) != 0);
    CHECK_MSG(strstr(out, want), "expected '%s': %s", want, out);
    CHECK(access(tmp("g"), F_OK) != 0);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --device gpu --gpus 0,%d --save-dir '%s'",
                      esol, ask, tmp("g")) != 0);
    CHECK_MSG(strstr(out, "this machine has"), "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --gpus 0,0 --save-dir '%s'", esol,
                      tmp("g")) != 0);
    CHECK_MSG(strstr(out, "GPU 0 twice"), "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --gpus 0,x --save-dir '%s'", esol,
                      tmp("g")) != 0);
    CHECK_MSG(strstr(out, "expected GPU indices"), "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --devices 3 --gpus 0,1 "
                      "--save-dir '%s'", esol, tmp("g")) != 0);
    CHECK_MSG(strstr(out, "leave one out"), "%s", out);
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --gpus 1 --save-dir '%s'", esol,
                      tmp("g")) != 0);
    CHECK_MSG(strstr(out, "CUDA_VISIBLE_DEVICES"), "%s", out);
}

/* On the GPU (make test-gpu): --devices 1 is a plain run, bit for bit. */
MP_TEST(gpu_dist_threads_devices_1_is_a_plain_run)
{
    MP_NEED_GPU();
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    const char *a = tmp("gpu_plain"), *b = tmp("gpu_dev1");
    CHECK_MSG(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 3 --hidden 64 --device gpu "
                          "--quiet --save-dir '%s'", esol, a) == 0, "%s", out);
    CHECK_MSG(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 3 --hidden 64 --device gpu "
                          "--devices 1 --quiet --save-dir '%s'", esol, b) == 0, "%s", out);
    char pa[1300], pb[1300];
    snprintf(pa, sizeof pa, "%s/model.mpm", a);
    snprintf(pb, sizeof pb, "%s/model.mpm", b);
    size_t na, nb;
    char *fa = mp_test_slurp(pa, &na), *fb = mp_test_slurp(pb, &nb);
    CHECK_MSG(fa && fb && na == nb && !memcmp(fa, fb, na), "--devices 1 differs from a plain run");
    mp_free(fa);
    mp_free(fb);
}

/* On a one-GPU machine (the H200): --devices 2 is refused by name; on a
 * machine with more, two thread ranks on the GPUs (NCCL where built) are
 * deterministic run to run. */
MP_TEST(gpu_dist_threads_devices_2)
{
    MP_NEED_GPU();
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    int gpus = mp_backend_cuda_device_count();
    int rc = mp_test_cli(out, sizeof out, "train --data '%s' --epochs 3 --hidden 64 --device gpu "
                         "--devices 2 --quiet --save-dir '%s'", esol, tmp("gpu_d2a"));
    if (gpus < 2) {
        CHECK(rc != 0);
        CHECK_MSG(strstr(out, "--devices 2: this machine has 1 GPU"), "%s", out);
        return;
    }
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_MSG(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 3 --hidden 64 --device gpu "
                          "--devices 2 --quiet --save-dir '%s'", esol, tmp("gpu_d2b")) == 0,
              "%s", out);
    char pa[1300], pb[1300];
    snprintf(pa, sizeof pa, "%s/model.mpm", tmp("gpu_d2a"));
    snprintf(pb, sizeof pb, "%s/model.mpm", tmp("gpu_d2b"));
    size_t na, nb;
    char *fa = mp_test_slurp(pa, &na), *fb = mp_test_slurp(pb, &nb);
    CHECK_MSG(fa && fb && na == nb && !memcmp(fa, fb, na), "two runs on 2 GPUs differ");
    mp_free(fa);
    mp_free(fb);
}
