/*
 * test_train_options.c - issue 11's training side end to end through the CLI
 * ($MOLPROP_BIN) and the library: every task type, loss and training option
 * trains, saves, loads and predicts; the heads' value columns; early
 * stopping; gradient clipping; task and sample weights; class-balanced
 * epochs; inequality labels; the model file's version 2 keys, each checked
 * on load; a version 1 file (tests/fixtures/model_v1_tiny.mpm, written by
 * main's binary before version 2) loads and predicts as it did.
 */
#define _GNU_SOURCE
#include "test.h"
#include "internal.h"   /* every module header */

#include "models/heads.h"
#include "run/fit.h"      /* mp_fit_eval_batch */
#include "run/train_head.h"

#include <stdlib.h>
#include <unistd.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fputs(text, f);
    return fclose(f) == 0;
}

/* A small CSV: 40 molecules with a regression target r, a class label c
 * (0 .. 2), a binary label b, a weight w and a bounded target q (every
 * fifth an inequality). */
static const char *small_csv(void)
{
    static const char *smi[] = {
        "CCO", "CCCO", "c1ccccc1", "CC(=O)O", "CCN", "CCCC", "OCCO", "CC#N", "C1CCCCC1",
        "COC", "CCOCC", "c1ccncc1", "CC(C)O", "CCCCO", "OC(=O)CC", "Cc1ccccc1", "CCCl",
        "CCBr", "NCCN", "CC=O", "C=CC", "CCS", "c1ccoc1", "CCC(=O)C", "OCC(O)CO", "CC(C)C",
        "CCCCCC", "c1ccc(O)cc1", "CN(C)C", "CCOC(=O)C", "FC(F)F", "ClCCl", "CC(N)=O",
        "c1ccsc1", "CCCN", "OCCCO", "CC(C)(C)O", "C1CCOC1", "CCCCN", "c1cc(C)ccc1",
    };
    const char *path = tmp("small.csv");
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    fprintf(f, "smiles,r,c,b,w,q\n");
    for (int i = 0; i < 40; i++) {
        double r = 0.1 * (i % 13) - 0.4 * (i % 3);
        fprintf(f, "%s,%g,%d,%d,%g,%s%g\n", smi[i], r, i % 3, (i * 7) % 5 < 2,
                0.5 + 0.05 * i, i % 5 == 0 ? "<" : i % 5 == 1 ? ">" : "", r);
    }
    fclose(f);
    return path;
}

/* Trains with `args` on the small CSV (targets `cols`) into dir; 0 on success. */
static int train(const char *dir, const char *cols, const char *args)
{
    return mp_test_cli(out, sizeof out, "train --data '%s' --target-columns %s --epochs 1 "
                       "--hidden 16 --threads 1 --split-sizes 0.6,0.2,0.2 --quiet "
                       "--save-dir '%s' %s", small_csv(), cols, dir, args);
}

MP_TEST(cli_train_every_task_type_loss_and_layer_option)
{
    static const struct {
        const char *cols, *args, *header;   /* header: the prediction file's first line */
    } runs[] = {
        { "r", "--task regression-mve", "smiles,r,r_var" },
        { "r", "--task regression-evidential --evidential-regularization 0.2",
          "smiles,r,r_nu,r_alpha,r_beta" },
        { "r", "--task regression-quantile --quantile-alpha 0.2", "smiles,r,r_interval" },
        { "r", "--loss mae --activation gelu", "smiles,r" },
        { "r", "--loss rmse --activation leakyrelu --undirected", "smiles,r" },
        { "r", "--activation prelu --atom-messages", "smiles,r" },
        { "r", "--activation elu --aggregation attentive --batch-norm", "smiles,r" },
        { "r", "--activation selu --grad-clip 0.1 --weight-column w", "smiles,r" },
        { "r,b", "--task regression --activation tanh --task-weights 1,0.5", "smiles,r,b" },
        { "q", "--loss bounded-mse", "smiles,q" },
        { "q", "--loss bounded-mae", "smiles,q" },
        { "b", "--task classification --loss binary-mcc", "smiles,b" },
        { "b", "--task classification --class-balance", "smiles,b" },
        { "b", "--task classification-dirichlet", "smiles,b,b_u" },
        { "c", "--task multiclass", "smiles,c,c_class0,c_class1,c_class2" },
        { "c", "--task multiclass --loss multiclass-mcc --multiclass-num-classes 4",
          "smiles,c,c_class0,c_class1,c_class2,c_class3" },
        { "c", "--task multiclass-dirichlet --evidential-regularization 0.1",
          "smiles,c,c_class0,c_class1,c_class2" },
        { "r", "--model ffn --features morgan --activation gelu --loss mae", "smiles,r" },
    };
    char in[1300];
    snprintf(in, sizeof in, "%s", tmp("predict_in.csv"));
    CHECK(write_text(in, "smiles\nCCO\nnot_a_smiles\nc1ccccc1\n"));
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char dir[1300], model[1400], pred[1400];
        snprintf(dir, sizeof dir, "%s/opt%zu", mp_test_tmpdir(), i);
        CHECK_MSG(train(dir, runs[i].cols, runs[i].args) == 0, "train %s: %s", runs[i].args,
                  out);
        snprintf(model, sizeof model, "%s/model.mpm", dir);
        snprintf(pred, sizeof pred, "%s/pred.csv", dir);
        CHECK_MSG(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                              "--quiet", model, in, pred) == 0, "predict %s: %s",
                  runs[i].args, out);
        char *text = mp_test_slurp(pred, NULL);
        CHECK(text);
        size_t hl = strlen(runs[i].header);
        CHECK_MSG(strncmp(text, runs[i].header, hl) == 0 && text[hl] == '\n',
                  "%s: header %.120s (expected %s)", runs[i].args, text, runs[i].header);
        /* three rows, the invalid one with empty fields, the others numbers */
        const char *row = strchr(text, '\n') + 1;
        CHECK(strncmp(row, "CCO,", 4) == 0 && row[4] >= '-' && row[4] <= '9');
        CHECK_MSG(strstr(text, "\nnot_a_smiles,\n") || strstr(text, "\nnot_a_smiles,,"),
                  "%s: %s", runs[i].args, text);
        free(text);
        /* the model reloads with every key checked (predict did), and a
         * second prediction gives the same bytes */
        char again[1400];
        snprintf(again, sizeof again, "%s/pred2.csv", dir);
        CHECK(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' --quiet",
                          model, in, again) == 0);
        char *a = mp_test_slurp(pred, NULL), *b = mp_test_slurp(again, NULL);
        CHECK(a && b && strcmp(a, b) == 0);
        free(a);
        free(b);
    }
}

MP_TEST(cli_train_option_refusals)
{
    static const struct {
        const char *cols, *args, *msg;
    } bad[] = {
        { "r", "--loss bce", "loss bce does not fit a regression task" },
        { "r", "--task regression-mve --loss mse", "does not fit a regression-mve task" },
        { "r", "--loss swish", "unknown loss 'swish'" },
        { "q", "", "small.csv:2: column 'q': the inequality label '<0' needs a bounded loss" },
        { "r", "--task-weights 1,2", "1 finite weights >= 0, one per task" },
        { "r,b", "--task-weights 1", "--task-weights: 1 weights for 2 tasks" },
        { "r", "--task-weights -1", "finite weights >= 0" },
        { "r", "--class-balance", "--class-balance is for classification tasks" },
        { "r", "--weight-column nope", "nope" },
        { "r", "--weight-column r", "both a target and the weight column" },
        { "c", "--task multiclass --multiclass-num-classes 2", "class label 2, but "
          "--multiclass-num-classes is 2" },
        { "r", "--task multiclass", "is not an integer" },
        { "r", "--multiclass-num-classes 3", "is for the multiclass task types" },
        { "r", "--model ffn --features morgan --batch-norm", "are D-MPNN options" },
        { "r", "--activation swish", "--activation expects" },
        { "r", "--patience -1", "--patience expects" },
        { "r", "--atom-messages --undirected", "undirected messages are bond messages" },
        { "c", "--task multiclass --metric rmse", "metric rmse does not fit a multiclass task" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char dir[1300];
        snprintf(dir, sizeof dir, "%s/bad%zu", mp_test_tmpdir(), i);
        CHECK_MSG(train(dir, bad[i].cols, bad[i].args) != 0, "%s trained", bad[i].args);
        CHECK_MSG(strstr(out, bad[i].msg), "%s: '%s' not in: %s", bad[i].args, bad[i].msg, out);
    }
    /* a bad weight names its file, line and column */
    const char *w = tmp("badweight.csv");
    CHECK(write_text(w, "smiles,y,w\nCCO,1,1\nCCC,2,-1\nCCCC,3,1\n"));
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --target-columns y --weight-column w "
                      "--epochs 1 --quiet --save-dir '%s'", w, tmp("bw")) != 0);
    CHECK_MSG(strstr(out, "badweight.csv:3: column 'w': weight '-1'"), "%s", out);
}

MP_TEST(cli_train_patience_stops_early)
{
    const char *dir = tmp("patience");
    CHECK(mp_test_cli(out, sizeof out, "train --data '%s' --target-columns r --epochs 40 "
                      "--hidden 16 --threads 1 --split-sizes 0.6,0.2,0.2 --patience 2 "
                      "--max-lr 0.05 --save-dir '%s'", small_csv(), dir) == 0);
    const char *at = strstr(out, "early stopping after epoch ");
    CHECK_MSG(at, "no early stop in 40 epochs: %s", out);
    int stop = 0, best = -1;
    CHECK(sscanf(at, "early stopping after epoch %d: no better validation score in 2 epochs "
                 "(best: epoch %d)", &stop, &best) == 2);
    CHECK_EQ_INT(stop, best + 2);
    CHECK(stop < 40);
    char path[1300];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    char *m = mp_test_slurp(path, NULL);
    CHECK(m);
    char want[64];
    snprintf(want, sizeof want, "[%d]", best);
    const char *be = strstr(m, "\"best_epoch\":");
    CHECK_MSG(be && strstr(be, want), "best_epoch %s not in %s", want, m);
    free(m);
}

/* ===================================================================== */
/* Library-level checks                                                    */
/* ===================================================================== */

MP_TEST(dataset_weights_and_inequality_labels)
{
    const char *p = tmp("ineq.csv");
    CHECK(write_text(p, "smiles,y,z,w\nCCO,<1.5,2,0.5\nCCC, > -3 ,,2\nCCCC,4,<0,1\n"));
    mp_dataset *d = NULL;
    mp_column_spec cs = { .weight_column = "w", .inequalities = 1 };
    CHECK_OK(mp_dataset_load(&d, p, &cs));
    CHECK_EQ_INT(d->n_tasks, 2);
    CHECK(d->weights && d->ineq);
    CHECK(d->weights[0] == 0.5 && d->weights[1] == 2 && d->weights[2] == 1);
    CHECK(d->targets[0] == 1.5 && d->ineq[0] == MP_DATA_INEQ_LT);
    CHECK(d->targets[2] == -3 && d->ineq[2] == MP_DATA_INEQ_GT);
    CHECK(isnan(d->targets[3]) && d->ineq[3] == 0);
    CHECK(d->targets[4] == 4 && d->ineq[4] == 0 && d->ineq[5] == MP_DATA_INEQ_LT);
    mp_dataset_free(d);
    /* without inequalities: refused, naming file, line and column */
    cs.inequalities = 0;
    CHECK(mp_dataset_load(&d, p, &cs) == MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "ineq.csv:2: column 'y': the inequality label '<1.5'"),
              "%s", mp_error_message());
    /* "<" alone and "<abc" are not numbers */
    CHECK(write_text(p, "smiles,y\nCCO,<\n"));
    cs.inequalities = 1;
    cs.weight_column = NULL;
    CHECK(mp_dataset_load(&d, p, &cs) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "ineq.csv:2: column 'y': '<' is not a number"));
    /* no inequality in the file: no flags kept */
    CHECK(write_text(p, "smiles,y\nCCO,1\n"));
    CHECK_OK(mp_dataset_load(&d, p, &cs));
    CHECK(d->ineq == NULL && d->weights == NULL);
    mp_dataset_free(d);
}

MP_TEST(class_balance_lists_and_task_weights)
{
    mp_dataset d;
    memset(&d, 0, sizeof d);
    double t[] = { 1, NAN, 0, 0, NAN, 1, 0, NAN, 0, 1 };   /* 5 rows x 2 tasks */
    size_t line[5] = { 2, 3, 4, 5, 6 };
    d.path = "x.csv";
    d.n_rows = 5;
    d.n_tasks = 2;
    d.targets = t;
    d.line = line;
    int32_t train[] = { 0, 1, 2, 3, 4 }, *pos = NULL, *neg = NULL, np = 0, nn = 0;
    CHECK_OK(mp_train_class_lists(&d, train, 5, &pos, &np, &neg, &nn));
    CHECK_EQ_INT(np, 3);   /* rows 0, 2, 4 have a label 1 */
    CHECK_EQ_INT(nn, 2);
    CHECK(pos[0] == 0 && pos[1] == 2 && pos[2] == 4 && neg[0] == 1 && neg[1] == 3);
    mp_free(pos);
    mp_free(neg);
    int32_t only[] = { 1, 3 };
    CHECK(mp_train_class_lists(&d, only, 2, &pos, &np, &neg, &nn) == MP_ERR_ARG);
    mp_free(pos);
    mp_free(neg);
    mp_train_opts o = mp_train_opts_default();
    float *w = NULL;
    o.task_weights = "0.5,2";
    CHECK_OK(mp_train_task_weights(&o, &d, &w));
    CHECK(w && w[0] == 0.5f && w[1] == 2.0f);
    mp_free(w);
    o.task_weights = "0.5,x";
    CHECK(mp_train_task_weights(&o, &d, &w) == MP_ERR_ARG);
}

/* After a step with clipping the gradient block's norm is the bound; task
 * weights (1, 0) train only the first task's outputs. */
MP_TEST(model_grad_clip_and_task_weights)
{
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "ref64"));
    mp_model_config c = mp_model_config_default();
    c.kind = MP_MODEL_FFN;
    c.extra_dim = 5;
    c.hidden = 6;
    c.n_tasks = 2;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &c, b, 3));
    float x[4 * 5], y[4 * 2];
    for (int i = 0; i < 20; i++)
        x[i] = (float)(0.3 * (i % 7) - 1);
    for (int i = 0; i < 8; i++)
        y[i] = (float)(2.0 * (i % 3) - 1);
    CHECK_OK(mp_model_set_grad_clip(m, 1e-3));
    CHECK(mp_model_set_grad_clip(m, -1) == MP_ERR_ARG);
    double loss;
    mp_model_zero_grad(m);
    CHECK_OK(mp_model_forward(m, NULL, x, 4, 1, NULL));
    CHECK_OK(mp_model_loss_backward(m, y, &loss));
    size_t np = mp_model_n_params(m);
    float *g = malloc(np * sizeof *g);
    CHECK(g);
    CHECK_OK(mp_model_get_grads(m, g));
    double n0 = 0;
    for (size_t i = 0; i < np; i++)
        n0 += (double)g[i] * g[i];
    CHECK(sqrt(n0) > 1e-2);   /* well above the bound */
    CHECK_OK(mp_model_adam_step(m, 1e-3));
    CHECK_OK(mp_model_get_grads(m, g));
    double n1 = 0;
    for (size_t i = 0; i < np; i++)
        n1 += (double)g[i] * g[i];
    CHECK_NEAR(sqrt(n1), 1e-3, 1e-8, 1e-5);
    /* task weights (1, 0): no gradient reaches the second output's bias */
    CHECK_OK(mp_model_set_grad_clip(m, 0));
    float tw[2] = { 1, 0 };
    CHECK_OK(mp_model_set_task_weights(m, tw));
    tw[0] = -1;
    CHECK(mp_model_set_task_weights(m, tw) == MP_ERR_ARG);
    mp_model_zero_grad(m);
    CHECK_OK(mp_model_forward(m, NULL, x, 4, 1, NULL));
    CHECK_OK(mp_model_loss_backward(m, y, &loss));
    CHECK_OK(mp_model_get_grads(m, g));
    int nv;
    const mp_param_view *v = mp_model_views(m, &nv);
    const mp_param_view *bias = &v[nv - 1];   /* the last layer's bias: one per task */
    CHECK_EQ_INT(bias->cols, 2);
    CHECK_MSG(g[bias->offset] != 0 && g[bias->offset + 1] == 0, "%s: %g %g", bias->name,
              g[bias->offset], g[bias->offset + 1]);
    free(g);
    mp_model_free(m);
    mp_backend_close(b);
}

/* ===================================================================== */
/* Model files                                                            */
/* ===================================================================== */

/* The file's bytes with `from` replaced by `to` (same length) in its header
 * text, the version set to `version` (0: kept) and the CRC made right
 * again, written to `path`.  0 when `from` is not there. */
static int doctor(const char *src, const char *path, const char *from, const char *to,
                  unsigned version)
{
    size_t n;
    char *b = mp_test_slurp(src, &n);
    if (!b || strlen(from) != strlen(to))
        return 0;
    char *at = NULL;
    for (size_t i = 32; from[0] && i + strlen(from) < n; i++)
        if (memcmp(b + i, from, strlen(from)) == 0) {
            at = b + i;
            break;
        }
    if (from[0] && !at) {
        free(b);
        return 0;
    }
    if (at)
        memcpy(at, to, strlen(to));
    if (version)
        b[8] = (char)version;
    uint32_t crc = mp_crc32(0, b, n - 4);
    for (int k = 0; k < 4; k++)
        b[n - 4 + k] = (char)(crc >> (8 * k));
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f)
        ok &= fclose(f) == 0;
    free(b);
    return ok;
}

MP_TEST(modelfile_v2_keys_checked_on_load)
{
    char mc[1300], act[1300], reg[1300];
    snprintf(mc, sizeof mc, "%s/model.mpm", tmp("v2keys_mc"));
    snprintf(act, sizeof act, "%s/model.mpm", tmp("v2keys_act"));
    snprintf(reg, sizeof reg, "%s/model.mpm", tmp("v2keys_reg"));
    CHECK(train(tmp("v2keys_mc"), "c", "--task multiclass --loss multiclass-mcc") == 0);
    CHECK(train(tmp("v2keys_act"), "r", "--activation gelu --batch-norm --task "
                "regression-quantile") == 0);
    CHECK(train(tmp("v2keys_reg"), "r", "--activation tanh") == 0);
    static const struct {
        int which;
        const char *from, *to, *msg;
        unsigned version;
    } cases[] = {
        { 0, "n_classes = 3", "n_classes = 1", "n_classes", 0 },
        { 0, "loss = multiclass-mcc", "loss = dirichlet-mcc ", "unknown loss", 0 },
        { 1, "activation = gelu", "activation = gelx", "unknown activation 'gelx'", 0 },
        { 1, "batch_norm = 1", "batch_norm = 2", "batch_norm", 0 },
        { 1, "quantile_alpha = 0.1", "quantile_alpha = 1.5", "quantile_alpha = 1.5", 0 },
        { 1, "activation = gelu", "activation = gelu", "in a model file of format version 1", 1 },
        { 2, "activation = tanh", "activation = tanh", "came with version 2", 1 },
        { 0, "task_type = multiclass", "task_type = multiclasz", "unknown task type", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = tmp("doctored.mpm");
        CHECK_MSG(doctor(cases[i].which == 2 ? reg : cases[i].which ? act : mc, p, cases[i].from, cases[i].to,
                         cases[i].version), "case %zu: '%s' not in the header", i, cases[i].from);
        mp_ensemble *e = NULL;
        mp_status st = mp_ensemble_load(&e, p, "cpu");
        CHECK_MSG(st != MP_OK, "case %zu (%s) loaded", i, cases[i].to);
        CHECK_MSG(strstr(mp_error_message(), cases[i].msg), "case %zu: '%s' not in: %s", i,
                  cases[i].msg, mp_error_message());
        mp_ensemble_free(e);
    }
    /* undamaged, they load with their fields */
    mp_ensemble *e = NULL;
    CHECK_OK(mp_ensemble_load(&e, act, "cpu"));
    CHECK(e->cfg.activation == MP_ACT_GELU && e->cfg.batch_norm == 1 &&
          e->cfg.task == MP_MODEL_REGRESSION_QUANTILE && e->cfg.loss_alpha == 0.1);
    mp_ensemble_free(e);
    CHECK_OK(mp_ensemble_load(&e, mc, "cpu"));
    CHECK(e->cfg.task == MP_MODEL_MULTICLASS && e->cfg.n_classes == 3 &&
          mp_model_loss(&e->cfg) == MP_LOSS_MULTICLASS_MCC);
    mp_ensemble_free(e);
}

MP_TEST(modelfile_version_1_loads_and_predicts_as_before)
{
    const char *fx = "tests/fixtures/model_v1_tiny.mpm";
    size_t n;
    char *b = mp_test_slurp(fx, &n);
    CHECK(b);
    CHECK(n > 32 && b[8] == 1);   /* written by main's binary, format version 1 */
    free(b);
    const char *pred = tmp("v1pred.csv");
    CHECK_MSG(mp_test_cli(out, sizeof out, "predict --model %s --data "
                          "tests/fixtures/model_v1_tiny.csv --out '%s' --quiet", fx, pred) == 0,
              "%s", out);
    char *got = mp_test_slurp(pred, NULL), *want = mp_test_slurp(
        "tests/fixtures/model_v1_tiny_pred.csv", NULL);
    CHECK(got && want);
    CHECK_MSG(strcmp(got, want) == 0, "version 1 predictions changed:\n%s\nvs main's:\n%s", got,
              want);
    free(got);
    free(want);
    /* a default model written now has none of the version 2 keys */
    const char *dir = tmp("v2default");
    CHECK(train(dir, "r", "") == 0);
    char path[1300];
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    char *m = mp_test_slurp(path, &n);
    CHECK(m && m[8] == 2);
    static const char *keys[] = { "\nloss", "\nn_classes", "\nactivation", "\nbatch_norm",
                                  "\natom_messages", "\nundirected", "\nloss_lambda" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK_MSG(!memmem(m, n, keys[i], strlen(keys[i])), "key%s in a default model", keys[i]);
    free(m);
}

/* The device validation batch (fit.c mp_fit_eval_batch): Chemprop's default
 * D-MPNN keeps 4096 (3 GB of activations for hiv-sized molecules); hidden
 * 2400 at depth 6 (37 GB at 4096) halves to 512 (4.7 GB, under 8 GiB), but
 * never below the training batch; an FFN and an empty store keep 4096.
 * Under --gpu-share 10 (hpopt --jobs 10) the budget is a tenth: the
 * default model 1024 (0.76 GB), the widest 64, still never below the
 * training batch. */
MP_TEST(train_device_eval_batch_bounded_by_activations)
{
    mp_graphs g = { 0 };
    g.n_mols = 1000;     /* hiv-like: 25 atoms, 55 directed edges a molecule */
    g.n_atoms = 25000;
    g.n_edges = 55000;
    mp_model_config c = mp_model_config_default();
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 50, 4096, 0), 4096);
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 50, 4096, 10), 1024);
    c.hidden = 2400;
    c.depth = 6;
    /* 4 * 2400 * (15 * 55 + 5 * 25) = 9.12 MB a molecule: 512 is the first
     * halving under 8 GiB */
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 50, 4096, 0), 512);
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 1000, 4096, 0), 1024);
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 4096, 4096, 0), 4096);
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 50, 4096, 1), 512);     /* a share of 1: the whole */
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 50, 4096, 10), 64);
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 200, 4096, 10), 256);
    c.kind = MP_MODEL_FFN;
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &g, 50, 4096, 0), 4096);
    c.kind = MP_MODEL_DMPNN;
    mp_graphs empty = { 0 };
    CHECK_EQ_INT(mp_fit_eval_batch(&c, &empty, 50, 4096, 0), 4096);
}
