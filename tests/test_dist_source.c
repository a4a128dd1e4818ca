/*
 * test_dist_source.c - the data-parallel batch source (run/batches_dist.c)
 * in one process, plugged into the epoch loop (mp_fit_member): with one
 * rank every weight is 1 and the sum over ranks the identity, so it must
 * train bit for bit the host source's model (on the cpu, gradients through
 * the host; on the GPU through NCCL's all-gather and the ordered sum, the
 * single-rank NCCL check the issue asks for: gpu_nccl_*).  The sum over
 * ranks itself (ops.h rank_sum) on the GPU against the host's.
 */
#include "test.h"
#include "gpu_test.h"

#include "core/dist.h"
#include "run/batches.h"
#include "run/fit.h"
#include "run/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A 2-epoch member on ESOL's first 300 molecules (train: the first 240,
 * validation: the rest) on `backend`, trained by `src` (NULL: the loop's
 * host source); its parameters (mp_malloc'd) or NULL. */
static float *train_member(const char *backend, int use_dist, mp_status *st_out)
{
    mp_dataset *d;
    mp_features *f;
    float *params = NULL, *targets = NULL;
    int32_t train[240], val[60];
    mp_ensemble *e = NULL;
    mp_batch_source *src = NULL;
    mp_status st = mp_test_esol(&d, &f);
    if (st)
        goto done;
    mp_train_opts o = mp_train_opts_default();
    o.epochs = 2;
    o.batch_size = 32;
    o.seed = 3;
    o.resident = 0;
    targets = mp_malloc(sizeof(float) * d->n_rows * d->n_tasks);
    if (!targets) {
        st = MP_ERR_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < d->n_rows * d->n_tasks; i++)
        targets[i] = (float)(d->targets[i] / 2.0);
    /* a few labels missing: the slices' weights are the labels they hold */
    for (size_t i = 0; i < 240; i += 7)
        targets[i] = NAN;
    for (int32_t i = 0; i < 240; i++)
        train[i] = i;
    for (int32_t i = 0; i < 60; i++)
        val[i] = 240 + i;
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 24;
    if ((st = mp_ensemble_create(&e, &cfg, 1, 3, backend)))
        goto done;
    e->task = MP_TASK_REGRESSION;
    e->n_tasks = 1;
    double mu = 0, sd = 2;
    if ((st = mp_scaler_set(&e->target_scaler, MP_SCALE_TARGETS, 1, &mu, &sd)))
        goto done;
    mp_fit_ctx c = {
        .o = &o, .d = d, .e = e,
        .batches = { .f = f, .targets = targets, .n_tasks = d->n_tasks, .graphs = 1,
                     .train = train, .n_train = 240, .batch_size = 32 },
        .val = val, .n_val = 60, .metric = MP_METRIC_RMSE, .eval_batch = 64,
    };
    if (use_dist && (st = mp_batch_source_dist(&src, e->members[0], &c.batches)))
        goto done;
    int best;
    if ((st = mp_fit_member(&c, 0, src, &best)))
        goto done;
    params = mp_malloc(sizeof(float) * mp_model_n_params(e->members[0]));
    if (!params || (st = mp_model_get_params(e->members[0], params))) {
        mp_free(params);
        params = NULL;
        st = st ? st : MP_ERR_NOMEM;
    }
done:
    mp_batch_source_free(src);
    mp_ensemble_free(e);
    mp_free(targets);
    *st_out = st;
    return params;
}

static void dist_equals_host(mp_test_result *mp__r, const char *backend)
{
    CHECK_OK(mp_dist_init());
    CHECK_EQ_INT(mp_dist_size(), 1);
    mp_status sa, sb;
    float *a = train_member(backend, 0, &sa);
    CHECK_MSG(a, "host source: %s", mp_error_message());
    float *b = train_member(backend, 1, &sb);
    CHECK_MSG(b, "dist source: %s", mp_error_message());
    mp_ensemble *e = NULL;
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 24;
    CHECK_OK(mp_ensemble_create(&e, &cfg, 1, 3, backend));
    size_t n = mp_model_n_params(e->members[0]);
    float *init = mp_malloc(sizeof(float) * n);
    CHECK(init);
    CHECK_OK(mp_model_get_params(e->members[0], init));
    mp_ensemble_free(e);
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(memcmp(&a[i], &b[i], sizeof(float)) == 0, "%s: parameter %zu: host %.9g, "
                  "dist %.9g", backend, i, a[i], b[i]);
        moved += a[i] != init[i];
    }
    CHECK_MSG(moved > n / 10, "only %zu of %zu parameters trained", moved, n);
    mp_free(a);
    mp_free(b);
    mp_free(init);
}

MP_TEST(dist_source_one_rank_trains_the_host_model)
{
    dist_equals_host(mp__r, "cpu");
}

/* The GPU's sum over ranks: one rank, weight w: w * x, each product
 * rounded once (as the host does it). */
MP_TEST(gpu_nccl_rank_sum_one_rank)
{
    MP_NEED_GPU();
    mp_backend *b;
    CHECK_OK(mp_backend_open(&b, "cuda"));
    if (!b->rank_sum) {
        mp_backend_close(b);
        MP_FAIL("this build has no NCCL sum (NCCL=0: nccl.h not found); build with NCCL=1");
    }
    CHECK_OK(mp_dist_init());
    enum { N = 100003 };
    float *x = mp_malloc(sizeof(float) * N), *y = mp_malloc(sizeof(float) * N);
    float *want = mp_malloc(sizeof(float) * N);
    void *dev = b->alloc(b, sizeof(float) * N);
    CHECK(x && y && want && dev);
    mp_rng r;
    mp_rng_seed(&r, 9, 1);
    for (int i = 0; i < N; i++)
        x[i] = (float)(mp_rng_normal(&r) * 3.0);
    const float ws[2] = { 1.0f, 0.3f };
    for (int k = 0; k < 2; k++) {
        memcpy(want, x, sizeof(float) * N);
        CHECK_OK(mp_dist_sum_float(want, N, &ws[k], NULL));   /* the host's twin */
        memset(y, 0xFF, sizeof(float) * N);
        CHECK_OK(b->upload(b, dev, x, sizeof(float) * N));
        CHECK_OK(b->rank_sum(b, dev, N, &ws[k]));
        CHECK_OK(b->download(b, y, dev, sizeof(float) * N));
        CHECK_OK(b->sync(b));
        for (int i = 0; i < N; i++)
            CHECK_MSG(memcmp(&y[i], &want[i], sizeof(float)) == 0, "w %g, element %d: GPU "
                      "%.9g, host %.9g", ws[k], i, y[i], want[i]);
    }
    b->free(b, dev);
    mp_free(x);
    mp_free(y);
    mp_free(want);
    mp_backend_close(b);
}

MP_TEST(gpu_nccl_dist_source_one_rank_trains_the_host_model)
{
    MP_NEED_GPU();
    dist_equals_host(mp__r, "cuda");
}
