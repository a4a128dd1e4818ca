/*
 * test_transfer.c - transfer learning end to end: pretrain on ESOL,
 * fine-tune on FreeSolv (other tasks: a fresh head) with the encoder and
 * the first FFN layer frozen; the frozen tensors of the fine-tuned model
 * file are bit for bit the pretrained ones, the others moved.  Fine-tuning
 * on the same tasks loads every weight.  Misuse is refused.  The gpu_ twin
 * runs the fine-tuning on the device-resident GPU path (captured steps).
 */
#include "test.h"

#include "gpu/gpu.h"
#include "run/ensemble.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char out[65536];

static const char *path(const char *name)
{
    static char buf[8][1200];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", mp_test_tmpdir(), name);
    return b;
}

/* The parameters of member 0 of a model file (host floats, owned), with
 * its views. */
static float *load_params(const char *file, mp_ensemble **e)
{
    if (mp_ensemble_load(e, file, "cpu"))
        return NULL;
    float *p = malloc(sizeof(float) * mp_model_n_params((*e)->members[0]));
    if (p && mp_model_get_params((*e)->members[0], p)) {
        free(p);
        return NULL;
    }
    return p;
}

/* Tensor `name`: the same bits in a and b (1), different (0), absent (-1). */
static int same_tensor(const mp_ensemble *e, const float *a, const float *b, const char *name)
{
    int nv;
    const mp_param_view *v = mp_model_views(e->members[0], &nv);
    for (int k = 0; k < nv; k++)
        if (!strcmp(v[k].name, name))
            return !memcmp(a + v[k].offset, b + v[k].offset,
                           sizeof(float) * (size_t)v[k].rows * (size_t)v[k].cols);
    return -1;
}

/* Pretrain on ESOL (once per run); the model file. */
static const char *pretrained(void)
{
    static int done;
    const char *dir = path("pre");
    static char file[1300];
    snprintf(file, sizeof file, "%s/model.mpm", dir);
    if (!done && mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 48 "
                             "--dropout 0.1 --threads 1 --quiet --save-dir '%s'",
                             mp_test_shared("datasets/esol.csv.gz"), dir) != 0)
        return NULL;
    done = 1;
    return file;
}

/* Fine-tunes on FreeSolv from the pretrained model with `args` on `device`
 * and checks which tensors kept their bits. */
static int finetune_and_check(const char *device, char *why, size_t wn)
{
    const char *pre = pretrained(), *dir = path(device);
    if (!pre)
        return snprintf(why, wn, "pretraining failed: %.1000s", out), 0;
    if (mp_test_cli(out, sizeof out, "train --data '%s' --epochs 3 --hidden 48 --dropout 0.1 "
                    "--threads 1 --device %s --init-model '%s' --freeze-encoder "
                    "--freeze-ffn-layers 1 --save-dir '%s'",
                    mp_test_shared("datasets/freesolv.csv.gz"), device, pre, dir) != 0)
        return snprintf(why, wn, "fine-tuning failed: %.1000s", out), 0;
    if (!strstr(out, "a fresh head for the new tasks; encoder frozen; first FFN layers frozen"))
        return snprintf(why, wn, "no transfer note: %.1000s", out), 0;
    char file[1300];
    snprintf(file, sizeof file, "%s/model.mpm", dir);
    mp_ensemble *ea = NULL, *eb = NULL;
    float *a = load_params(pre, &ea), *b = load_params(file, &eb);
    int ok = a && b;
    if (!ok)
        snprintf(why, wn, "cannot load the models: %s", mp_error_message());
    static const char *const frozen[] = { "W_i", "W_h", "W_o", "b_o", "ffn0.W", "ffn0.b" };
    for (int k = 0; ok && k < 6; k++)
        if (same_tensor(ea, a, b, frozen[k]) != 1)
            ok = 0, snprintf(why, wn, "%s: frozen %s moved", device, frozen[k]);
    if (ok && (same_tensor(ea, a, b, "ffn1.W") != 0 || same_tensor(ea, a, b, "ffn1.b") != 0))
        ok = 0, snprintf(why, wn, "%s: the head did not train", device);
    free(a);
    free(b);
    mp_ensemble_free(ea);
    mp_ensemble_free(eb);
    return ok;
}

MP_TEST(transfer_frozen_weights_keep_their_bits)
{
    char why[1500];
    CHECK_MSG(finetune_and_check("cpu", why, sizeof why), "%s", why);
}

MP_TEST(transfer_same_tasks_loads_every_weight)
{
    const char *pre = pretrained(), *dir = path("same");
    CHECK_MSG(pre, "pretraining failed: %.1000s", out);
    /* 1 epoch at a tiny learning rate from the pretrained weights: close to
     * them everywhere (a fresh start would be far) */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 48 "
                             "--warmup-epochs 0 --init-lr 1e-9 --max-lr 1e-9 --final-lr 1e-9 "
                             "--threads 1 --init-model '%s' --save-dir '%s'",
                             mp_test_shared("datasets/esol.csv.gz"), pre, dir), 0);
    CHECK(strstr(out, "every weight loaded") != NULL);
    char file[1300];
    snprintf(file, sizeof file, "%s/model.mpm", dir);
    mp_ensemble *ea = NULL, *eb = NULL;
    float *a = load_params(pre, &ea), *b = load_params(file, &eb);
    CHECK(a && b);
    double worst = 0;
    for (size_t i = 0; i < mp_model_n_params(ea->members[0]); i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    free(a);
    free(b);
    mp_ensemble_free(ea);
    mp_ensemble_free(eb);
    CHECK_MSG(worst < 1e-4, "fine-tuned weights %g from the loaded ones", worst);
}

MP_TEST(transfer_misuse_is_refused)
{
    const char *pre = pretrained(), *dir = path("bad");
    CHECK_MSG(pre, "pretraining failed: %.1000s", out);
    const char *fs = mp_test_shared("datasets/freesolv.csv.gz");
    static const struct { const char *args, *says; } cases[] = {
        { "--freeze-encoder", "need --init-model" },
        { "--init-model '%s' --hidden 64", "--hidden 64 here, 48 in the initial model" },
        { "--init-model '%s' --hidden 48 --features morgan", "molecule features" },
        { "--init-model '%s' --hidden 48 --freeze-ffn-layers 2", "fresh head" },
        { "--init-model '%s' --hidden 48 --model ffn --features morgan", "model kind" },
        { "--init-model /nonexistent.mpm --hidden 48", "nonexistent" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1500];
        snprintf(args, sizeof args, cases[i].args, pre);
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --threads 1 "
                                 "--quiet %s --save-dir '%s'", fs, args, dir), 1);
        CHECK_MSG(strstr(out, cases[i].says), "'%s' said: %s", args, out);
    }
}

MP_TEST(gpu_transfer_frozen_weights_keep_their_bits)
{
    char why[1500];
    if (!mp_backend_cuda_available(why, sizeof why)) {
        const char *req = getenv("MOLPROP_REQUIRE_GPU");
        if (req && *req && strcmp(req, "0") != 0)
            MP_FAIL("no GPU (MOLPROP_REQUIRE_GPU=1): %s", why);
        MP_SKIP(why);
    }
    CHECK_MSG(finetune_and_check("gpu", why, sizeof why), "%s", why);
}
