/*
 * test_gpu_train_options.c - issue 11's heads, losses and training options
 * through the whole trainer on every step path: the host loop and the
 * device-resident steps (one captured graph per slot class on the GPU, with
 * clipping, task weights, the unfused encoder and the readout layers inside
 * the capture).  Everywhere: the cpu backend's resident steps follow its
 * host loop.  With a GPU (names gpu_train_cuda_*, run by `make test-gpu`;
 * skipped without one, failed under MOLPROP_REQUIRE_GPU=1): cuda:fp32
 * resident and host loop against the cpu host loop, 3 epochs of ESOL or
 * BBBP (or a multiclass CSV made from ESOL), the validation and test scores
 * within 1e-3 relative, and the same seed twice bitwise the same.
 */
#include "test.h"
#include "gpu_test.h"

#include "run/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int         data;        /* 0 esol, 1 bbbp, 2 esol as 3 classes (+ weights, inequalities) */
    mp_task_type task;
    const char *loss;
    mp_act_kind act;
    mp_aggregation agg;
    int         bn, am, und, cb, weights;
    double      clip, lambda;
    const char *target, *task_weights;
} opt_case;

static const opt_case CASES[] = {
    { "gelu", 0, MP_TASK_REGRESSION, NULL, MP_ACT_GELU, MP_AGG_MEAN, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
    { "prelu, undirected", 0, MP_TASK_REGRESSION, NULL, MP_ACT_PRELU, MP_AGG_MEAN, 0, 0, 1, 0, 0,
      0, 0, NULL, NULL },
    { "atom messages, tanh", 0, MP_TASK_REGRESSION, NULL, MP_ACT_TANH, MP_AGG_MEAN, 0, 1, 0, 0, 0,
      0, 0, NULL, NULL },
    { "attentive", 0, MP_TASK_REGRESSION, NULL, MP_ACT_RELU, MP_AGG_ATTENTIVE, 0, 0, 0, 0, 0, 0,
      0, NULL, NULL },
    { "batch norm (host loop)", 0, MP_TASK_REGRESSION, NULL, MP_ACT_RELU, MP_AGG_MEAN, 1, 0, 0, 0,
      0, 0, 0, NULL, NULL },
    { "mve, grad clip", 0, MP_TASK_REGRESSION_MVE, NULL, MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0, 0, 0,
      1.0, 0, NULL, NULL },
    { "evidential", 0, MP_TASK_REGRESSION_EVIDENTIAL, NULL, MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0, 0, 0,
      0, 0.2, NULL, NULL },
    { "quantile", 0, MP_TASK_REGRESSION_QUANTILE, NULL, MP_ACT_ELU, MP_AGG_MEAN, 0, 0, 0, 0, 0, 0,
      0, NULL, NULL },
    { "mae", 0, MP_TASK_REGRESSION, "mae", MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0, 0, 0, 0, 0, NULL,
      NULL },
    { "bce, class balance", 1, MP_TASK_CLASSIFICATION, NULL, MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0, 1,
      0, 0, 0, NULL, NULL },
    { "binary mcc", 1, MP_TASK_CLASSIFICATION, "binary-mcc", MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0, 0,
      0, 0, 0, NULL, NULL },
    { "classification-dirichlet", 1, MP_TASK_CLASSIFICATION_DIRICHLET, NULL, MP_ACT_RELU,
      MP_AGG_MEAN, 0, 0, 0, 0, 0, 0, 0.2, NULL, NULL },
    { "multiclass, task weights", 2, MP_TASK_MULTICLASS, NULL, MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0, 0,
      0, 0, 0, "c,c2", "1,0.5" },
    { "multiclass mcc", 2, MP_TASK_MULTICLASS, "multiclass-mcc", MP_ACT_RELU, MP_AGG_MEAN, 0, 0, 0,
      0, 0, 0, 0, "c", NULL },
    { "multiclass-dirichlet", 2, MP_TASK_MULTICLASS_DIRICHLET, NULL, MP_ACT_RELU, MP_AGG_MEAN, 0,
      0, 0, 0, 0, 0, 0.1, "c", NULL },
    { "sample weights, bounded-mse (host loop)", 2, MP_TASK_REGRESSION, "bounded-mse", MP_ACT_RELU,
      MP_AGG_MEAN, 0, 0, 0, 0, 1, 0, 0, "q", NULL },
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* ESOL with two class columns (by solubility), a weight and a target with
 * inequalities, written once. */
static const char *classes_csv(void)
{
    static char path[1200];
    if (path[0])
        return path;
    mp_dataset *d = NULL;
    if (mp_dataset_load(&d, mp_test_shared("datasets/esol.csv.gz"), NULL) != MP_OK)
        return NULL;
    snprintf(path, sizeof path, "%s/esol_classes.csv", mp_test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f) {
        mp_dataset_free(d);
        path[0] = 0;
        return NULL;
    }
    fprintf(f, "smiles,c,c2,w,q\n");
    for (size_t i = 0; i < d->n_rows; i++) {
        double y = d->targets[i * d->n_tasks];
        fprintf(f, "\"%s\",%d,%d,%g,%s%.17g\n", d->smiles[i], y < -4 ? 0 : y < -2 ? 1 : 2,
                (int)(i % 3), 0.5 + (double)(i % 7) / 7, i % 10 == 0 ? "<" : i % 10 == 1 ? ">" : "",
                y);
    }
    fclose(f);
    mp_dataset_free(d);
    return path;
}

static mp_status run_case(const opt_case *k, const char *backend, int resident,
                          mp_train_result *r)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = k->data == 0 ? mp_test_shared("datasets/esol.csv.gz")
                  : k->data == 1 ? mp_test_shared("datasets/bbbp.csv.gz") : classes_csv();
    if (!o.data_path)
        return mp_error_set(MP_ERR_IO, "no multiclass CSV");
    o.columns.target_columns = k->target;
    o.columns.weight_column = k->weights ? "w" : NULL;
    o.task = (int)k->task;
    o.loss = k->loss;
    o.activation = k->act;
    o.aggregation = k->agg;
    o.batch_norm = k->bn;
    o.atom_messages = k->am;
    o.undirected = k->und;
    o.class_balance = k->cb;
    o.grad_clip = k->clip;
    o.loss_lambda = k->lambda;
    o.task_weights = k->task_weights;
    o.epochs = 3;
    o.hidden = 32;
    o.threads = 1;
    o.quiet = 1;
    o.backend = backend;
    o.resident = resident;
    return mp_train(&o, r);
}

/* |a - b| within rel of |b| (both NaN counts as equal). */
static int close_rel(double a, double b, double rel)
{
    return (isnan(a) && isnan(b)) || fabs(a - b) <= rel * fabs(b) + 1e-9;
}

/* The cases whose resident step differs from the host loop's code (the
 * others train with the host loop, or only change the loss op). */
static const int RESIDENT_CASES[] = { 0, 1, 2, 3, 5, 9, 12 };

MP_TEST(gpu_train_options_cpu_resident_follows_host)
{
    for (size_t j = 0; j < sizeof RESIDENT_CASES / sizeof RESIDENT_CASES[0]; j++) {
        int i = RESIDENT_CASES[j];
        mp_train_result h, r;
        CHECK_MSG(run_case(&CASES[i], "cpu", 0, &h) == MP_OK, "%s: %s", CASES[i].name,
                  mp_error_message());
        CHECK_MSG(run_case(&CASES[i], "cpu", CASES[i].weights || CASES[i].bn ? -1 : 1, &r) ==
                  MP_OK, "%s: %s",
                  CASES[i].name, mp_error_message());
        printf("    %-42s cpu host %.6f, cpu resident %.6f\n", CASES[i].name, h.test_mean,
               r.test_mean);
        CHECK(isfinite(h.test_mean));
        CHECK_MSG(close_rel(r.test_mean, h.test_mean, 1e-3) &&
                  close_rel(r.val_mean, h.val_mean, 1e-3), "%s: resident %.9g / %.9g, host "
                  "%.9g / %.9g", CASES[i].name, r.val_mean, r.test_mean, h.val_mean, h.test_mean);
        mp_train_result_free(&h);
        mp_train_result_free(&r);
    }
}

MP_TEST(gpu_train_cuda_options_match_cpu)
{
    MP_NEED_GPU();
    for (int i = 0; i < N_CASES; i++) {
        mp_train_result c, g, g2, gh;
        CHECK_MSG(run_case(&CASES[i], "cpu", 0, &c) == MP_OK, "%s: %s", CASES[i].name,
                  mp_error_message());
        CHECK_MSG(run_case(&CASES[i], "cuda:fp32", -1, &g) == MP_OK, "%s: %s", CASES[i].name,
                  mp_error_message());
        CHECK_OK(run_case(&CASES[i], "cuda:fp32", -1, &g2));
        CHECK_OK(run_case(&CASES[i], "cuda:fp32", 0, &gh));
        printf("    %-42s test: cpu %.6f, gpu resident %.6f, gpu host loop %.6f\n",
               CASES[i].name, c.test_mean, g.test_mean, gh.test_mean);
        CHECK_MSG(close_rel(g.test_mean, c.test_mean, 1e-3) &&
                  close_rel(g.val_mean, c.val_mean, 1e-3), "%s: gpu %.9g / %.9g, cpu %.9g / %.9g",
                  CASES[i].name, g.val_mean, g.test_mean, c.val_mean, c.test_mean);
        CHECK_MSG(close_rel(gh.test_mean, c.test_mean, 1e-3), "%s: gpu host loop %.9g, cpu %.9g",
                  CASES[i].name, gh.test_mean, c.test_mean);
        CHECK_MSG(g.test_mean == g2.test_mean && g.val_mean == g2.val_mean,
                  "%s: the same seed twice on the GPU: %.17g vs %.17g", CASES[i].name,
                  g.test_mean, g2.test_mean);
        mp_train_result_free(&c);
        mp_train_result_free(&g);
        mp_train_result_free(&g2);
        mp_train_result_free(&gh);
    }
}
