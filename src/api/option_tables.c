/*
 * option_tables.c - every verb's options: the one table per verb that
 * options.c's handle, the command line, the INI/JSON configs and the help
 * all read (names, types, defaults, ranges, help text, where each lands in
 * the pipeline's struct), and the converters of the options the built-in
 * types do not cover.
 */
#include "api/options.h"

#include "backend/ops.h"
#include "data/metrics.h"
#include "data/registry.h"
#include "models/heads.h"
#include "run/calibrate.h"
#include "run/ensemble.h"
#include "run/fingerprint.h"
#include "run/predict.h"
#include "run/uncertainty.h"
#include "run/resident.h"
#include "run/shard.h"
#include "run/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Converters for options the built-in types do not cover                 */
/* ===================================================================== */

/* A metric name, or "auto" (train: from the task type) / "all" (eval: every
 * metric of the task type), which land as NULL. */
static mp_status parse_metric(const char *s, void *field)
{
    const char *v = NULL;
    if (strcmp(s, "auto") != 0 && strcmp(s, "all") != 0) {
        mp_metric m;
        mp_status st = mp_metric_parse(s, &m);
        if (st)
            return st;
        v = s;
    }
    if (field)
        *(const char **)field = v;
    return MP_OK;
}

/* A loss name any task type takes (the trainer checks it against the task). */
static mp_status parse_loss(const char *s, void *field)
{
    if (strcmp(s, "auto") == 0) {
        if (field)
            *(const char **)field = NULL;
        return MP_OK;
    }
    for (int t = 0; t < MP_MODEL_TASK_COUNT; t++) {
        mp_loss_kind k;
        if (mp_loss_parse(s, (mp_model_task)t, &k) == MP_OK) {
            mp_error_clear();
            if (field)
                *(const char **)field = s;
            return MP_OK;
        }
    }
    return mp_error_set(MP_ERR_ARG, "unknown loss '%s' (mse, mae, rmse, bounded-mse, "
                        "bounded-mae, bounded-rmse, mve, evidential, quantile, bce, binary-mcc, "
                        "ce, multiclass-mcc or dirichlet)", s);
}

static mp_status parse_split_type(const char *s, void *field)
{
    mp_split_type t;
    mp_status st = mp_split_type_parse(s, &t);
    if (!st && field)
        *(mp_split_type *)field = t;
    return st;
}

static mp_status parse_split_sizes(const char *s, void *field)
{
    double sizes[3];
    mp_status st = mp_split_sizes_parse(s, sizes);
    if (!st && field)
        memcpy(field, sizes, sizeof sizes);
    return st;
}

static mp_status parse_features(const char *s, void *field)
{
    unsigned mask = 0;
    mp_status st = mp_feature_set_parse(s, &mask);
    if (!st && field)
        *(unsigned *)field = mask;
    return st;
}

static mp_status parse_layout(const char *s, void *field)
{
    mp_atom_layout l;
    mp_status st = mp_atom_layout_parse(s, &l);
    if (!st && field)
        *(mp_atom_layout *)field = l;
    return st;
}

/* A device the backend registry knows (it, not this file, knows the names).
 * For an unknown one, the registry's own message lists the known ones. */
static mp_status parse_device(const char *s, void *field)
{
    (void)field;
    if (mp_backend_find(s))
        return MP_OK;
    mp_backend *b = NULL;
    mp_status st = mp_backend_open(&b, s);   /* fails at once: unknown name */
    if (st == MP_OK) {
        mp_backend_close(b);
        return MP_OK;
    }
    return st;
}

static mp_status parse_unc_method(const char *s, void *field)
{
    mp_unc_method m;
    mp_status st = mp_unc_method_parse(s, &m);
    if (!st && field)
        *(int *)field = (int)m;
    return st;
}

static mp_status parse_calibrator(const char *s, void *field)
{
    mp_calibrator c;
    mp_status st = mp_calibrator_parse(s, &c);
    if (!st && field)
        *(int *)field = (int)c;
    return st;
}

/* ===================================================================== */
/* The table                                                              */
/* ===================================================================== */

static const int task_values[] = {
    -1, MP_TASK_REGRESSION, MP_TASK_CLASSIFICATION, MP_TASK_REGRESSION_MVE,
    MP_TASK_REGRESSION_EVIDENTIAL, MP_TASK_REGRESSION_QUANTILE, MP_TASK_CLASSIFICATION_DIRICHLET,
    MP_TASK_MULTICLASS, MP_TASK_MULTICLASS_DIRICHLET, MP_TASK_SPECTRAL,
};
static const int spectra_act_values[] = { MP_SPECTRA_EXP, MP_SPECTRA_SOFTPLUS };
static const int model_values[] = { MP_MODEL_DMPNN, MP_MODEL_FFN };
static const int agg_values[] = { MP_AGG_MEAN, MP_AGG_SUM, MP_AGG_NORM, MP_AGG_ATTENTIVE };
static const int act_values[] = {
    MP_ACT_RELU, MP_ACT_LEAKYRELU, MP_ACT_PRELU, MP_ACT_ELU, MP_ACT_SELU, MP_ACT_TANH, MP_ACT_GELU,
};
static const int tristate_values[] = { -1, 1, 0 };
static const int atom_cols_values[] = { MP_ATOM_COLS_NONE, MP_ATOM_COLS_FEATURE,
                                        MP_ATOM_COLS_DESCRIPTOR };
static const int bench_split_values[] = { MP_SPLIT_SCAFFOLD_BALANCED, MP_SPLIT_RANDOM };
static const int missing_values[] = { 0, 1 };

#define HEADING(text) { .key = NULL, .help = text, .offset = -1 }
#define AT(S, f) offsetof(S, f)

/* Rows every verb with a backend shares. */
#define THREADS(S, f) \
    { "threads", MP_OPT_INT, "auto", 1, 1024, .offset = AT(S, f), .arg = "N", \
      .help = "CPU threads; auto: all cores", .flags = MP_OPTF_AUTO }
#define DEVICE \
    { "device", MP_OPT_TEXT, "cpu", .parse = parse_device, .offset = -1, .arg = "D", \
      .help = "cpu | gpu" }
#define PRECISION \
    { "precision", MP_OPT_TEXT, NULL, .offset = -1, .arg = "P", \
      .help = "fp32 | bf16 (cpu, gpu) | tf32 (gpu); fp32 when unset" }
#define SMILES_COLUMN(S, f) \
    { "smiles-column", MP_OPT_TEXT, NULL, .offset = AT(S, f), .arg = "C", \
      .help = "default: the column named 'smiles', else the first" }
#define REGISTRY(S, f, what) \
    { "registry", MP_OPT_TEXT, NULL, .offset = AT(S, f), .arg = "FILE", \
      .help = "the dataset registry" what "\n(unset: $MOLPROP_REGISTRY, else data/datasets.tsv,\nelse the installed share/molprop/datasets.tsv)" }

static const mp_option_def train_table[] = {
    HEADING("data:"),
    { "data", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, data_path), .arg = "F",
      .help = "CSV or gzipped CSV with a SMILES column and targets", .flags = MP_OPTF_REQUIRED },
    SMILES_COLUMN(mp_train_opts, columns.smiles_column),
    { "target-columns", MP_OPT_LIST, NULL, .offset = AT(mp_train_opts, columns.target_columns),
      .arg = "a,b", .help = "default: every other column" },
    { "ignore-columns", MP_OPT_LIST, NULL, .offset = AT(mp_train_opts, columns.ignore_columns),
      .arg = "a,b", .help = "columns left out of the default targets" },
    { "task", MP_OPT_CHOICE, "auto",
      .choices = "auto|regression|classification|regression-mve|regression-evidential|"
                 "regression-quantile|classification-dirichlet|multiclass|multiclass-dirichlet|"
                 "spectral",
      .values = task_values, .offset = AT(mp_train_opts, task), .arg = "T",
      .help = "regression | classification | regression-mve |\nregression-evidential | "
              "regression-quantile |\nclassification-dirichlet | multiclass |\n"
              "multiclass-dirichlet | spectral (the target\ncolumns are a spectrum's positions); "
              "auto: from the\ndataset registry, else "
              "classification if every label is 0 or 1" },
    { "metric", MP_OPT_CHOICE, "auto",
      .choices = "auto|rmse|mae|mse|r2|auc|prc-auc|accuracy|sid|wasserstein",
      .parse = parse_metric, .offset = AT(mp_train_opts, metric), .arg = "M",
      .help = "rmse | mae | mse | r2 | auc | prc-auc | accuracy |\nsid | wasserstein "
              "(spectral); auto: rmse\n(regression), auc (classification), sid (spectral)" },
    REGISTRY(mp_train_opts, registry, ", for the task type of a benchmark file"),
    HEADING("split:"),
    { "split", MP_OPT_CHOICE, "random", .choices = "random|scaffold_balanced|cv|cv-no-test",
      .parse = parse_split_type, .offset = AT(mp_train_opts, split.type), .arg = "S",
      .help = "random | scaffold_balanced | cv | cv-no-test" },
    { "split-sizes", MP_OPT_LIST, "0.8,0.1,0.1", .parse = parse_split_sizes,
      .offset = AT(mp_train_opts, split.sizes), .arg = "a,b,c",
      .help = "train,val,test fractions", .flags = MP_OPTF_NUMBERS },
    { "folds", MP_OPT_INT, "5", 2, 1000000, .offset = AT(mp_train_opts, split.n_folds),
      .arg = "K", .help = "folds for --split cv" },
    { "seed", MP_OPT_INT, "0", 0, 2147483647, .offset = AT(mp_train_opts, seed), .arg = "N",
      .help = "split seed; ensemble member i uses N+i", .flags = MP_OPTF_U64 },
    HEADING("model:"),
    { "model", MP_OPT_CHOICE, "dmpnn", .choices = "dmpnn|ffn", .values = model_values,
      .offset = AT(mp_train_opts, model), .arg = "M", .help = "dmpnn | ffn" },
    { "features", MP_OPT_LIST, "none", .parse = parse_features,
      .offset = AT(mp_train_opts, features), .arg = "F",
      .help = "molecule features, comma-separated (ffn: its input;\ndmpnn: joined to the "
              "readout), or none:\nmorgan, morgan-count (v1 Morgan r=2, 2048 bits/counts),\n"
              "rdkit2d (Chemprop v1's 200 RDKit descriptors, raw),\nrdkit2d-normalized (those "
              "200 through their CDFs),\nrdkit2d-core (RDKit's 43-value C++ registry),\n"
              "v2-morgan, v2-morgan-count (with chirality),\nv2-rdkit2d (208), v2-charge" },
    { "features-scaling", MP_OPT_CHOICE, "auto", .choices = "auto|on|off",
      .values = tristate_values, .offset = AT(mp_train_opts, features_scaling),
      .arg = "auto|on|off",
      .help = "standardize the features on the training set;\nauto: all but the fingerprints "
              "(bits and counts)\nand rdkit2d-normalized" },
    { "no-features-scaling", MP_OPT_BOOL, "false",
      .offset = AT(mp_train_opts, no_features_scaling),
      .help = "Chemprop's flag: --features-scaling off" },
    { "features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, features_path),
      .arg = "F", .help = "extra molecule features: a CSV with a header (or a\n.npy array), "
                          "one row per data row, joined after\n--features" },
    { "atom-layout", MP_OPT_CHOICE, "v1", .choices = "v1|v2|organic", .parse = parse_layout,
      .offset = AT(mp_train_opts, layout), .arg = "L",
      .help = "v1 (133 features) | v2 (72) | organic (44)" },
    /* issue 9: user atom / bond columns (Chemprop v1.6.1's) */
    { "atom-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, cols.atom_path),
      .arg = "F", .help = "per-atom columns (D-MPNN), Chemprop v1's file: an\n.npz of one 2-D "
      "array per input row (atoms x\ncolumns, RDKit's atom order), or a CSV (molecule\nindex, "
      "then the columns; a row per atom)" },
    { "atom-descriptors", MP_OPT_CHOICE, "auto", .choices = "auto|feature|descriptor",
      .values = atom_cols_values, .offset = AT(mp_train_opts, cols.atom_mode), .arg = "M",
      .help = "feature: joined to the atom features; descriptor:\njoined to the atom hiddens "
              "through one more layer\n(h+d wide); auto: feature" },
    { "bond-features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, cols.bond_path),
      .arg = "F", .help = "per-bond columns (bonds in RDKit's order) joined to\nthe bond "
      "features; the formats of\n--atom-descriptors-path" },
    { "bond-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, cols.bond_path),
      .arg = "F", .help = "Chemprop v1.6.1's name of --bond-features-path",
      .flags = MP_OPTF_ALIAS },
    { "bond-descriptors", MP_OPT_CHOICE, "auto", .choices = "auto|feature|descriptor",
      .values = atom_cols_values, .offset = AT(mp_train_opts, cols.bond_mode), .arg = "M",
      .help = "Chemprop v1.6.1's mode of the bond columns: feature\n(auto: joined to the bond "
              "features); descriptor is\nfor atom / bond-level targets in Chemprop, which\n"
              "molprop does not train: refused" },
    { "no-atom-descriptor-scaling", MP_OPT_BOOL, "false",
      .offset = AT(mp_train_opts, cols.no_atom_scaling),
      .help = "leave the atom columns as given (default: scaled to\nthe training atoms' mean "
              "and std, as Chemprop)" },
    { "no-bond-features-scaling", MP_OPT_BOOL, "false",
      .offset = AT(mp_train_opts, cols.no_bond_scaling),
      .help = "leave the bond columns as given (default: scaled)" },
    { "no-bond-descriptor-scaling", MP_OPT_BOOL, "false",
      .offset = AT(mp_train_opts, cols.no_bond_scaling),
      .help = "Chemprop v1.6.1's name of --no-bond-features-scaling",
      .flags = MP_OPTF_ALIAS },
    { "hidden", MP_OPT_INT, "300", 1, 100000, .offset = AT(mp_train_opts, hidden), .arg = "N",
      .help = "hidden size" },
    { "depth", MP_OPT_INT, "3", 1, 100, .offset = AT(mp_train_opts, depth), .arg = "N",
      .help = "message-passing steps" },
    { "dropout", MP_OPT_REAL, "0", 0, 0.99, .offset = AT(mp_train_opts, dropout), .arg = "X",
      .help = "dropout probability" },
    { "ffn-layers", MP_OPT_INT, "2", 1, 100, .offset = AT(mp_train_opts, ffn_layers),
      .arg = "N", .help = "layers of the FFN head" },
    { "ffn-hidden", MP_OPT_INT, "auto", 1, 100000, .offset = AT(mp_train_opts, ffn_hidden),
      .arg = "N", .help = "hidden size of the FFN head; auto: --hidden", .flags = MP_OPTF_AUTO },
    { "aggregation", MP_OPT_CHOICE, "mean", .choices = "mean|sum|norm|attentive",
      .values = agg_values, .offset = AT(mp_train_opts, aggregation), .arg = "A",
      .help = "mean | sum | norm | attentive (a learned softmax\nweight per atom, Chemprop v2)" },
    { "ensemble-size", MP_OPT_INT, "1", 1, 256, .offset = AT(mp_train_opts, ensemble_size),
      .arg = "N", .help = "models that differ only in their seeds" },
    { "member-jobs", MP_OPT_INT, "auto", 1, 256, .offset = AT(mp_train_opts, member_jobs),
      .arg = "K", .help = "ensemble members trained side by side, each bit\nfor bit the model "
              "it is alone; auto: all on a\nGPU, min(N, --threads) on the cpu",
      .flags = MP_OPTF_AUTO },
    HEADING("transfer learning:"),
    { "init-model", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, init_model), .arg = "M",
      .help = "start from the weights of model file M (same\narchitecture; a fresh head "
              "when its tasks differ)" },
    { "freeze-encoder", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, freeze_encoder),
      .help = "with --init-model: keep the D-MPNN encoder as\nloaded (dropout still applies)" },
    { "freeze-ffn-layers", MP_OPT_INT, "0", 0, 100, .offset = AT(mp_train_opts,
      freeze_ffn_layers), .arg = "K", .help = "with --init-model: keep the first K FFN "
      "layers as\nloaded" },
    HEADING("training:"),
    { "epochs", MP_OPT_INT, "30", 1, 100000, .offset = AT(mp_train_opts, epochs), .arg = "N",
      .help = "training epochs" },
    { "batch-size", MP_OPT_INT, "50", 1, 10000000, .offset = AT(mp_train_opts, batch_size),
      .arg = "N", .help = "molecules per step" },
    { "warmup-epochs", MP_OPT_REAL, "2", 0, 1e6, .offset = AT(mp_train_opts, warmup_epochs),
      .arg = "X", .help = "Noam warm-up" },
    { "init-lr", MP_OPT_REAL, "0.0001", 1e-12, 10, .offset = AT(mp_train_opts, init_lr),
      .arg = "X", .help = "learning rate at the start" },
    { "max-lr", MP_OPT_REAL, "0.001", 1e-12, 10, .offset = AT(mp_train_opts, max_lr),
      .arg = "X", .help = "learning rate after the warm-up" },
    { "final-lr", MP_OPT_REAL, "0.0001", 1e-12, 10, .offset = AT(mp_train_opts, final_lr),
      .arg = "X", .help = "learning rate at the end" },
    THREADS(mp_train_opts, threads),
    DEVICE,
    PRECISION,
    { "devices", MP_OPT_INT, "1", 1, 64, .offset = -1, .arg = "N",
      .help = "data-parallel training in this process: N\nthreads, each a copy of the model on "
              "its own\nGPU (--device gpu; the cpu: N thread ranks\nsharing --threads), "
              "every batch split across\nthem, the gradients summed in rank order" },
    { "gpus", MP_OPT_LIST, NULL, .offset = -1, .arg = "0,1,..",
      .help = "the GPUs of --devices, one per rank (sets N)" },
    { "resident", MP_OPT_CHOICE, "auto", .choices = "auto|on|off", .values = tristate_values,
      .offset = AT(mp_train_opts, resident), .arg = "on|off",
      .help = "keep each epoch on the device and run its steps\nthere; auto: on with --device gpu" },
    { "graph", MP_OPT_CHOICE, "auto", .choices = "auto|on|off", .values = tristate_values,
      .offset = AT(mp_train_opts, graph), .arg = "on|off",
      .help = "replay a captured CUDA graph per step; auto: on\nwhen resident on the GPU" },
    { "slot-classes", MP_OPT_INT, "4", 1, MP_RESIDENT_MAX_CLASSES,
      .offset = AT(mp_train_opts, slot_classes), .arg = "N",
      .help = "resident slot size classes at most (D-MPNN); 1: every slot padded to the "
              "largest batch" },
    { "gpu-share", MP_OPT_INT, "auto", 1, 256, .offset = AT(mp_train_opts, gpu_share),
      .arg = "N", .help = "runs side by side on the GPU: each one's products\nand validation batch "
              "sized for its share (hpopt --jobs\nsets it); auto: 1", .flags = MP_OPTF_AUTO },
    { "profile", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, profile),
      .help = "where each epoch's time goes: a 'profile epoch' line per epoch on stderr" },
    /* issue 11: losses and Chemprop's training options (one block) */
    HEADING("loss and training options (Chemprop's; defaults: v1's model):"),
    { "loss", MP_OPT_TEXT, "auto", .parse = parse_loss, .offset = AT(mp_train_opts, loss),
      .arg = "L", .help = "mse | mae | rmse | bounded-mse | bounded-mae |\nbounded-rmse (regression); "
      "mve | evidential | quantile\n(their task types); bce | binary-mcc\n(classification); "
      "ce | multiclass-mcc (multiclass);\ndirichlet (the dirichlet types); sid | wasserstein\n"
      "(spectral); default: the\n"
      "task's (auto: mse, bce, ce, mve, ...).  bounded-*:\ntarget cells may be \"<x\" or \">x\"" },
    { "multiclass-num-classes", MP_OPT_INT, "auto", 2, MP_LOSS_MAX_CLASSES,
      .offset = AT(mp_train_opts, n_classes), .arg = "K", .flags = MP_OPTF_AUTO,
      .help = "classes per task of a multiclass task; auto: the\nlargest label + 1" },
    { "evidential-regularization", MP_OPT_REAL, "0", 0, 1e6,
      .offset = AT(mp_train_opts, loss_lambda), .arg = "X",
      .help = "lambda of the evidential and dirichlet losses\n(Chemprop's --v-kl; 0.2 is "
              "Soleimany et al.'s)" },
    { "evidential-eps", MP_OPT_REAL, "1e-8", 0, 1, .offset = AT(mp_train_opts, loss_eps),
      .arg = "X", .help = "the evidential loss's eps" },
    { "quantile-alpha", MP_OPT_REAL, "0.1", 1e-6, 0.999999,
      .offset = AT(mp_train_opts, quantile_alpha), .arg = "A",
      .help = "regression-quantile: the interval of quantiles A/2\nand 1 - A/2" },
    { "patience", MP_OPT_INT, "0", 0, 100000, .offset = AT(mp_train_opts, patience),
      .arg = "N", .help = "stop after N epochs without a better validation\nscore; 0: off" },
    { "grad-clip", MP_OPT_REAL, "0", 0, 1e30, .offset = AT(mp_train_opts, grad_clip),
      .arg = "X", .help = "clip the gradient's global norm to X; 0: off" },
    { "class-balance", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, class_balance),
      .help = "classification: epochs of as many molecules with a\nlabel 1 as without, "
              "interleaved" },
    { "task-weights", MP_OPT_LIST, NULL, .offset = AT(mp_train_opts, task_weights),
      .arg = "w1,w2", .help = "a weight per task in the loss (default: all 1)" },
    { "weight-column", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, columns.weight_column),
      .arg = "C", .help = "a column of sample weights (>= 0) in the loss; not\na target" },
    { "spectra-activation", MP_OPT_CHOICE, "exp", .choices = "exp|softplus",
      .values = spectra_act_values, .offset = AT(mp_train_opts, spectra_act), .arg = "F",
      .help = "spectral: exp | softplus, what makes an output a\npositive intensity "
              "(Chemprop v1's)" },
    { "spectra-target-floor", MP_OPT_REAL, "1e-8", 1e-300, 1e30,
      .offset = AT(mp_train_opts, spectra_floor), .arg = "X",
      .help = "spectral: intensities below X count as X (targets\nand predictions in the "
              "loss; Chemprop v1's)" },
    { "spectra-phase-mask-path", MP_OPT_TEXT, NULL,
      .offset = AT(mp_train_opts, spectra_phase_mask), .arg = "F",
      .help = "Chemprop v1's phase mask: not supported (refused)" },
    { "activation", MP_OPT_CHOICE, "relu",
      .choices = "relu|leakyrelu|prelu|elu|selu|tanh|gelu", .values = act_values,
      .offset = AT(mp_train_opts, activation), .arg = "F",
      .help = "relu | leakyrelu | prelu | elu | selu | tanh | gelu" },
    { "batch-norm", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, batch_norm),
      .help = "batch normalization of the readout (D-MPNN)" },
    { "atom-messages", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, atom_messages),
      .help = "messages on atoms, not bonds (Chemprop v1's)" },
    { "undirected", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, undirected),
      .help = "bond messages averaged over both directions" },
    HEADING("output:"),
    { "save-dir", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, save_dir), .arg = "D",
      .help = "where model.mpm and metrics.json go", .flags = MP_OPTF_REQUIRED },
    { "quiet", MP_OPT_BOOL, "false", .offset = AT(mp_train_opts, quiet),
      .help = "no progress output" },
    { "checkpoint-every", MP_OPT_INT, "0", 0, 100000,
      .offset = AT(mp_train_opts, checkpoint_every), .arg = "N",
      .help = "after every N epochs, write the whole run's state\nto D/checkpoint.mpc "
              "(atomically; removed when the\nrun ends well); 0: no checkpoints" },
    { "stop-after", MP_OPT_INT, "0", 0, 100000, .offset = AT(mp_train_opts, stop_after),
      .arg = "K", .help = "end the run after epoch K of --epochs (the schedule\nstill --epochs "
      "long), scored and saved with its best\nepoch so far; D/checkpoint.mpc stays, and "
      "--resume D\ncontinues it bit for bit; 0: off" },
    { "resume", MP_OPT_TEXT, NULL, .offset = AT(mp_train_opts, resume), .arg = "D",
      .help = "continue the run whose checkpoint is in D, to the\nmodel an uninterrupted run "
              "makes; alone, its options\nand data come from the checkpoint" },
};

static const mp_option_def predict_table[] = {
    { "model", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, model_path), .arg = "M",
      .help = "a model file written by molprop train", .flags = MP_OPTF_REQUIRED },
    { "data", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, data_path), .arg = "F",
      .help = "CSV or gzipped CSV", .flags = MP_OPTF_REQUIRED },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, out_path), .arg = "P",
      .help = "output CSV (written atomically)", .flags = MP_OPTF_REQUIRED },
    SMILES_COLUMN(mp_predict_opts, columns.smiles_column),
    { "features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, features_path),
      .arg = "F", .help = "the extra molecule features of --data (a model\ntrained with "
                          "--features-path needs them): one\nrow per data row" },
    { "atom-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, atom_path),
      .arg = "F", .help = "the per-atom columns of these molecules, for a\nmodel trained with "
      "them (the training file's format)" },
    { "bond-features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, bond_path),
      .arg = "F", .help = "the per-bond columns, likewise" },
    { "bond-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, bond_path),
      .arg = "F", .help = "Chemprop v1.6.1's name of --bond-features-path",
      .flags = MP_OPTF_ALIAS },
    HEADING("uncertainty:"),
    { "uncertainty", MP_OPT_CHOICE, "none",
      .choices = "none|ensemble|dropout|mve|evidential|evidential-total|evidential-epistemic|"
                 "evidential-aleatoric|quantile|dirichlet",
      .parse = parse_unc_method, .offset = AT(mp_predict_opts, uncertainty), .arg = "E",
      .help = "add <task>_unc columns: ensemble (variance over\nmembers), dropout (MC dropout "
              "variance), mve,\nevidential[-epistemic|-aleatoric], quantile,\ndirichlet "
              "(models with those heads); a multiclass\nmodel: ensemble and dropout per class "
              "into\n<task>_class<k>_unc, dirichlet's u = C/S" },
    { "dropout-samples", MP_OPT_INT, "10", 2, 10000, .offset = AT(mp_predict_opts,
      dropout_samples), .arg = "N", .help = "dropout: stochastic passes per member" },
    { "dropout-p", MP_OPT_REAL, "0.1", 0.0, 0.99, .offset = AT(mp_predict_opts, dropout_p),
      .arg = "X", .help = "dropout: probability of every dropout layer" },
    { "dropout-seed", MP_OPT_INT, "0", 0, 2147483647, .offset = AT(mp_predict_opts,
      dropout_seed), .arg = "N", .help = "dropout: seed of the passes' masks",
      .flags = MP_OPTF_U64 },
    { "calibrate", MP_OPT_CHOICE, "none",
      .choices = "none|zscaling|zelikman|mve-weighting|conformal|conformal-adaptive|platt|isotonic|"
                 "conformal-multiclass|isotonic-multiclass|conformal-multilabel",
      .parse = parse_calibrator, .offset = AT(mp_predict_opts, calibrate), .arg = "C",
      .help = "fit a calibrator on --calibration-data: zscaling,\nzelikman, mve-weighting "
              "(--uncertainty mve,\nevidential or dropout), conformal,\nconformal-adaptive "
              "(regression; zelikman and the\nconformal ones write <task>_lower, _upper), "
              "platt,\nisotonic (binary classification),\nconformal-multiclass, conformal-adaptive "
              "(sets:\n<task>_class<k>_in_set), isotonic-multiclass\n(multiclass), "
              "conformal-multilabel (binary\nclassification, the tasks as labels: in- and\n"
              "out-sets <task>_in_set, <task>_out_set)" },
    { "calibration-data", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_opts, calibration_data),
      .arg = "F", .help = "labelled CSV (columns named like the tasks)" },
    { "calibration-atom-descriptors-path", MP_OPT_TEXT, NULL,
      .offset = AT(mp_predict_opts, calibration_atom_path), .arg = "F",
      .help = "the per-atom columns of --calibration-data (a\nmodel trained with them)" },
    { "calibration-bond-features-path", MP_OPT_TEXT, NULL,
      .offset = AT(mp_predict_opts, calibration_bond_path), .arg = "F",
      .help = "the per-bond columns of --calibration-data" },
    { "alpha", MP_OPT_REAL, "0.1", 1e-6, 0.999999, .offset = AT(mp_predict_opts, alpha),
      .arg = "A", .help = "error rate of the intervals and sets (coverage\n1 - A)" },
    HEADING("run:"),
    THREADS(mp_predict_opts, threads),
    DEVICE,
    PRECISION,
    { "quiet", MP_OPT_BOOL, "false", .offset = AT(mp_predict_opts, quiet),
      .help = "no summary line" },
    { "chunk-rows", MP_OPT_INT, "auto", 1, 1048576, .offset = AT(mp_predict_opts, chunk_rows),
      .arg = "N", .help = "rows read, featurized and held at a time (memory\ngrows with it), "
                          "rounded up to whole batches\n(128 rows, 256 with MC dropout; 4096 on a GPU):\n"
                          "the predictions do not depend on it; auto: 8192",
      .flags = MP_OPTF_AUTO },
    { "shard", MP_OPT_TEXT, "none", .parse = mp_shard_parse_option, .offset = AT(mp_predict_opts, shard),
      .arg = "I/N", .help = "predict the I-th of N byte ranges of --data (0 <=\nI < N) into "
                            "P.shard-I-of-N; join them with\n--merge (under mpirun the ranks "
                            "are the shards);\nnone: all of it" },
};

/* `molprop predict --merge --out P`: the parts of --shard joined */
static const mp_option_def predict_merge_table[] = {
    { "merge", MP_OPT_BOOL, "false", .offset = AT(mp_predict_merge_args, merge),
      .help = "join P.shard-0-of-N ... P.shard-(N-1)-of-N into\nP, in order (checked first: "
              "all there, of one run)" },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_predict_merge_args, out_path), .arg = "P",
      .help = "the output the parts make (written atomically)", .flags = MP_OPTF_REQUIRED },
    { "remove-parts", MP_OPT_BOOL, "false", .offset = AT(mp_predict_merge_args, remove_parts),
      .help = "delete the parts once P is written" },
    { "quiet", MP_OPT_BOOL, "false", .offset = AT(mp_predict_merge_args, quiet),
      .help = "no summary line" },
};

static const mp_option_def eval_table[] = {
    { "model", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, model_path), .arg = "M",
      .help = "a model file written by molprop train (or --preds)" },
    { "preds", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, preds_path), .arg = "P",
      .help = "a prediction CSV of molprop predict, scored\ninstead of a model (rows as in "
              "--data)" },
    { "uncertainty-metrics", MP_OPT_LIST, NULL,
      .offset = AT(mp_eval_args, unc_metrics), .arg = "L",
      .help = "with --preds: nll, miscalibration-area, ence,\nspearman, coverage "
              "(comma-separated; a\nmulticlass task: nll, coverage; binary tasks:\nnll, and "
              "coverage of conformal-multilabel's\nsets over all the tasks at once)" },
    { "data", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, data_path), .arg = "F",
      .help = "CSV or gzipped CSV with the SMILES and the task\ncolumns",
      .flags = MP_OPTF_REQUIRED },
    SMILES_COLUMN(mp_eval_args, smiles_column),
    { "features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, features_path),
      .arg = "F", .help = "the extra molecule features of --data (a model\ntrained with "
                          "--features-path needs them)" },
    { "atom-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, atom_path),
      .arg = "F", .help = "the per-atom columns of --data, for a model\ntrained with them "
      "(the training file's format)" },
    { "bond-features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, bond_path),
      .arg = "F", .help = "the per-bond columns, likewise" },
    { "bond-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_eval_args, bond_path),
      .arg = "F", .help = "Chemprop v1.6.1's name of --bond-features-path",
      .flags = MP_OPTF_ALIAS },
    { "metric", MP_OPT_CHOICE, "all",
      .choices = "all|rmse|mae|mse|r2|auc|prc-auc|accuracy|sid|wasserstein",
      .parse = parse_metric, .offset = AT(mp_eval_args, metric), .arg = "M",
      .help = "one metric; all: rmse, mae, r2 for regression;\nauc, prc-auc, accuracy for "
              "classification; sid,\nwasserstein for spectral" },
    THREADS(mp_eval_args, threads),
    DEVICE,
    PRECISION,
};

static const int layer_values[] = { 0, 1 };

static const mp_option_def fingerprint_table[] = {
    { "model", MP_OPT_TEXT, NULL, .offset = AT(mp_fingerprint_opts, model_path), .arg = "M",
      .help = "a model file written by molprop train", .flags = MP_OPTF_REQUIRED },
    { "data", MP_OPT_TEXT, NULL, .offset = AT(mp_fingerprint_opts, data_path), .arg = "F",
      .help = "CSV or gzipped CSV", .flags = MP_OPTF_REQUIRED },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_fingerprint_opts, out_path), .arg = "F",
      .help = "F.npy (float32 rows x width) or a CSV (written\natomically)",
      .flags = MP_OPTF_REQUIRED },
    { "layer", MP_OPT_CHOICE, "encoder", .choices = "encoder|ffn-last", .values = layer_values,
      .offset = AT(mp_fingerprint_opts, layer), .arg = "L",
      .help = "encoder: the vector the FFN head reads (readout\n++ molecule features); "
              "ffn-last: the head's last\nhidden layer" },
    { "member", MP_OPT_INT, "0", 0, 255, .offset = AT(mp_fingerprint_opts, member), .arg = "K",
      .help = "the ensemble member whose vectors are written" },
    SMILES_COLUMN(mp_fingerprint_opts, columns.smiles_column),
    { "chunk-rows", MP_OPT_INT, "auto", 1, 1048576, .offset = AT(mp_fingerprint_opts,
      chunk_rows), .arg = "N", .help = "rows read and held at a time, rounded up to whole\n"
                                      "batches (256; 4096 on a GPU); auto: 8192",
      .flags = MP_OPTF_AUTO },
    { "atom-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_fingerprint_opts, atom_path),
      .arg = "F", .help = "the per-atom columns of --data, for a model\ntrained with them "
      "(the training file's format)" },
    { "bond-features-path", MP_OPT_TEXT, NULL, .offset = AT(mp_fingerprint_opts, bond_path),
      .arg = "F", .help = "the per-bond columns, likewise" },
    { "bond-descriptors-path", MP_OPT_TEXT, NULL, .offset = AT(mp_fingerprint_opts, bond_path),
      .arg = "F", .help = "Chemprop v1.6.1's name of --bond-features-path",
      .flags = MP_OPTF_ALIAS },
    THREADS(mp_fingerprint_opts, threads),
    DEVICE,
    PRECISION,
    { "quiet", MP_OPT_BOOL, "false", .offset = AT(mp_fingerprint_opts, quiet),
      .help = "no summary line" },
};

static const mp_option_def featurize_table[] = {
    { "data", MP_OPT_TEXT, NULL, .offset = AT(mp_featurize_args, data_path), .arg = "FILE",
      .help = "input CSV with a header line", .flags = MP_OPTF_REQUIRED },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_featurize_args, out_path), .arg = "FILE.mpf",
      .help = "write the feature cache here" },
    { "dump", MP_OPT_TEXT, NULL, .offset = AT(mp_featurize_args, dump_dir), .arg = "DIR",
      .help = "write molecules/atoms/bonds/morgan/descriptors.tsv\n(and rdkit2d.tsv, "
              "rdkit2d_normalized.tsv with\n--features) here" },
    { "gz", MP_OPT_BOOL, "false", .offset = AT(mp_featurize_args, gz),
      .help = "gzip the dump's files (.tsv.gz)" },
    { "atom-layout", MP_OPT_CHOICE, "v1", .choices = "v1|v2|organic", .parse = parse_layout,
      .offset = AT(mp_featurize_args, layout), .arg = "L",
      .help = "v1 (133 features) | v2 (72) | organic (44)" },
    { "features", MP_OPT_LIST, "none", .parse = parse_features,
      .offset = AT(mp_featurize_args, features), .arg = "F",
      .help = "molecule feature sets to compute too, as for train:\nrdkit2d, rdkit2d-normalized, "
              "v2-morgan, v2-rdkit2d,\nv2-charge, ... (kept in the cache; --dump writes\n"
              "rdkit2d.tsv and rdkit2d_normalized.tsv)" },
    { "no-morgan", MP_OPT_BOOL, "false", .offset = AT(mp_featurize_args, no_morgan),
      .help = "skip the Morgan fingerprints" },
    { "no-descriptors", MP_OPT_BOOL, "false", .offset = AT(mp_featurize_args, no_descriptors),
      .help = "skip the RDKit 2D descriptors (the slowest part)" },
    { "scaffolds", MP_OPT_BOOL, "false", .offset = AT(mp_featurize_args, scaffolds),
      .help = "compute Bemis-Murcko scaffolds too" },
    THREADS(mp_featurize_args, threads),
    SMILES_COLUMN(mp_featurize_args, smiles_column),
};

static const mp_option_def split_table[] = {
    { "data", MP_OPT_TEXT, NULL, .offset = AT(mp_split_args, data_path), .arg = "FILE",
      .help = "input CSV (.csv or .csv.gz)", .flags = MP_OPTF_REQUIRED },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_split_args, out_dir), .arg = "DIR",
      .help = "output folder (created if absent)", .flags = MP_OPTF_REQUIRED },
    { "split", MP_OPT_CHOICE, "random", .choices = "random|scaffold_balanced|cv|cv-no-test",
      .parse = parse_split_type, .offset = AT(mp_split_args, split.type), .arg = "TYPE",
      .help = "random | scaffold_balanced | cv | cv-no-test" },
    { "seed", MP_OPT_INT, "0", 0, 18446744073709551615.0, .offset = AT(mp_split_args, split.seed),
      .arg = "N", .help = "Chemprop's --seed; with cv it picks the test fold\n(N % k) and the "
                          "val fold ((N+1) % k)", .flags = MP_OPTF_U64 },
    { "split-sizes", MP_OPT_LIST, "0.8,0.1,0.1", .parse = parse_split_sizes,
      .offset = AT(mp_split_args, split.sizes), .arg = "A,B,C",
      .help = "train,val,test fractions: non-negative, summing\nto 1; ignored by cv",
      .flags = MP_OPTF_NUMBERS },
    { "folds", MP_OPT_INT, "5", 2, 1000000, .offset = AT(mp_split_args, split.n_folds),
      .arg = "K", .help = "number of folds for cv" },
    SMILES_COLUMN(mp_split_args, smiles_column),
    { "threads", MP_OPT_INT, "0", 0, 4096, .offset = AT(mp_split_args, threads), .arg = "N",
      .help = "threads for RDKit parsing; 0: all cores" },
};

static const mp_option_def bench_table[] = {
    HEADING("the grid:"),
    { "datasets", MP_OPT_LIST, "esol", .offset = AT(mp_bench_args, datasets), .arg = "L",
      .help = "registry names, 'all' (every registry dataset\nwhose file is in --data-dir), or "
              "a CSV of your own\nas PATH[:TASK[:METRIC]] or NAME=PATH[:TASK[:METRIC]]\n"
              "(TASK regression | classification, METRIC rmse,\nmae, auc, prc-auc, ...), "
              "comma-separated" },
    { "models", MP_OPT_LIST, "dmpnn", .offset = AT(mp_bench_args, models), .arg = "L",
      .help = "dmpnn, dmpnn-rdkit2d, ffn-morgan, ffn-morgan-count,\nffn-rdkit2d, or 'all' "
              "(the rdkit2d ones read\nChemprop's rdkit_2d_normalized, unscaled)" },
    { "seeds", MP_OPT_LIST, "0,1,2", 0, 2147483647, .offset = AT(mp_bench_args, seeds),
      .arg = "L", .help = "comma-separated split seeds", .flags = MP_OPTF_NUMBERS },
    { "split", MP_OPT_CHOICE, "scaffold_balanced", .choices = "scaffold_balanced|random",
      .values = bench_split_values, .offset = AT(mp_bench_args, split), .arg = "S",
      .help = "scaffold_balanced | random" },
    { "split-sizes", MP_OPT_LIST, "0.8,0.1,0.1", .parse = parse_split_sizes,
      .offset = AT(mp_bench_args, split_sizes), .arg = "a,b,c",
      .help = "train,val,test fractions", .flags = MP_OPTF_NUMBERS },
    { "epochs", MP_OPT_INT, "30", 1, 100000, .offset = AT(mp_bench_args, epochs), .arg = "N",
      .help = "training epochs" },
    { "batch-size", MP_OPT_INT, "50", 1, 10000000, .offset = AT(mp_bench_args, batch_size),
      .arg = "N", .help = "molecules per step" },
    { "missing", MP_OPT_CHOICE, "fail", .choices = "fail|skip", .values = missing_values,
      .offset = AT(mp_bench_args, missing_skip), .arg = "M",
      .help = "a registry dataset whose file is not in --data-dir:\nfail | skip (with a note)" },
    HEADING("files:"),
    { "data-dir", MP_OPT_TEXT, "data", .offset = AT(mp_bench_args, data_dir), .arg = "D",
      .help = "where the dataset files are" },
    { "out", MP_OPT_TEXT, "runs/bench", .offset = AT(mp_bench_args, out_dir), .arg = "DIR",
      .help = "results go to DIR/results.tsv, one row per finished\nrun, appended as each "
              "finishes; runs already there\nare skipped, so rerunning resumes" },
    { "cache-dir", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_args, cache_dir), .arg = "DIR",
      .help = "feature cache, by content hash, shared by every\nmodel, seed and later "
              "invocation; 'none': no cache\n(unset: DIR/cache of --out)" },
    { "export-splits", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_args, export_splits),
      .arg = "DIR", .help = "write each dataset/seed split as train/val/test CSV\nand "
                            "Chemprop v2 splits.json under DIR" },
    REGISTRY(mp_bench_args, registry, ""),
    HEADING("user atom / bond columns (the D-MPNN variants; molprop train's):"),
    { "atom-descriptors-path", MP_OPT_LIST, NULL, .offset = AT(mp_bench_args, atom_paths),
      .arg = "L", .help = "NAME=FILE per dataset, comma-separated: the\ndataset's per-atom "
      "columns (train's formats)" },
    { "atom-descriptors", MP_OPT_CHOICE, "auto", .choices = "auto|feature|descriptor",
      .values = atom_cols_values, .offset = AT(mp_bench_args, atom_mode), .arg = "M",
      .help = "feature (auto) or descriptor, as train's" },
    { "bond-features-path", MP_OPT_LIST, NULL, .offset = AT(mp_bench_args, bond_paths),
      .arg = "L", .help = "NAME=FILE per dataset: the per-bond columns" },
    HEADING("running:"),
    { "jobs", MP_OPT_INT, "auto", 1, 64, .offset = AT(mp_bench_args, jobs), .arg = "N",
      .help = "runs trained at once, each with its own backend\n(its own stream on the GPU); "
              "auto: the seeds\nside by side (at least 4 on the GPU; at most\n--threads on "
              "the CPU)", .flags = MP_OPTF_AUTO },
    THREADS(mp_bench_args, threads),
    DEVICE,
    PRECISION,
    { "quiet", MP_OPT_BOOL, "false", .offset = AT(mp_bench_args, quiet),
      .help = "no line per finished run" },
};

static const mp_option_def bench_compare_table[] = {
    { "ours", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_compare_args, ours), .arg = "F",
      .help = "a results file (or a bench --out folder)", .flags = MP_OPTF_REQUIRED },
    { "theirs", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_compare_args, theirs), .arg = "F",
      .help = "the other tool's results, same format", .flags = MP_OPTF_REQUIRED },
    { "alpha", MP_OPT_REAL, "0.05", 1e-6, 0.5, .offset = AT(mp_bench_compare_args, alpha),
      .arg = "X", .help = "level of the paired t-test over seeds: a win or a\nloss needs "
                          "p < X, else a tie" },
};

static const mp_option_def bench_report_table[] = {
    { "results", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_report_args, results), .arg = "F",
      .help = "a results file (or a bench --out folder)", .flags = MP_OPTF_REQUIRED },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_report_args, out_dir), .arg = "DIR",
      .help = "where report.md, report.html and the figures go\n(unset: report/ beside the "
              "results)" },
    { "reference", MP_OPT_TEXT, NULL, .offset = AT(mp_bench_report_args, reference),
      .arg = "F", .help = "another tool's results (bench compare's THEIRS):\nits bars beside "
                          "ours" },
    { "title", MP_OPT_TEXT, "molprop benchmark", .offset = AT(mp_bench_report_args, title),
      .arg = "T", .help = "the report's title" },
    { "gnuplot", MP_OPT_TEXT, "gnuplot", .offset = AT(mp_bench_report_args, gnuplot),
      .arg = "P", .help = "the gnuplot program that draws the figures" },
};

static const int hp_method_values[] = { 0, 1 };   /* hpopt.h: MP_HP_RANDOM, MP_HP_TPE */
static const int hp_objective_values[] = { 0 };
static const int hp_keep_values[] = { MP_HP_KEEP_BEST, MP_HP_KEEP_ALL, MP_HP_KEEP_NONE };

/* hpopt's own options; every other option of `molprop hpopt` is a train
 * option, the base of every trial (src/cli/hpopt.c sorts them). */
static const mp_option_def hpopt_table[] = {
    { "space", MP_OPT_TEXT, "configs/hpopt/chemprop.ini", .offset = AT(mp_hpopt_args, space_path),
      .arg = "F", .help = "the search space: train options and their ranges" },
    { "trials", MP_OPT_INT, "20", 1, 100000, .offset = AT(mp_hpopt_args, trials), .arg = "N",
      .help = "trials in all (a rerun with more continues the search)" },
    { "method", MP_OPT_CHOICE, "tpe", .choices = "random|tpe", .values = hp_method_values,
      .offset = AT(mp_hpopt_args, method), .arg = "M",
      .help = "random | tpe (tree-structured Parzen estimator)" },
    { "objective", MP_OPT_CHOICE, "val", .choices = "val", .values = hp_objective_values,
      .offset = -1, .arg = "O",
      .help = "the score compared: the validation score of the\ntrain options' metric" },
    { "search-seed", MP_OPT_INT, "0", 0, 2147483647, .offset = AT(mp_hpopt_args, seed),
      .arg = "N", .help = "seed of the proposals (--seed is the trials' split seed)",
      .flags = MP_OPTF_U64 },
    { "startup-trials", MP_OPT_INT, "10", 1, 100000, .offset = AT(mp_hpopt_args, startup),
      .arg = "N", .help = "tpe: random trials before the first model" },
    { "candidates", MP_OPT_INT, "24", 1, 100000, .offset = AT(mp_hpopt_args, candidates),
      .arg = "N", .help = "tpe: draws scored per proposal" },
    { "jobs", MP_OPT_INT, "1", 1, 256, .offset = AT(mp_hpopt_args, jobs), .arg = "N",
      .help = "trials trained side by side (proposed together,\nfrom the same history; "
              "random search: as a\nqueue, each worker taking the next trial)" },
    { "keep", MP_OPT_CHOICE, "best", .choices = "best|all|none", .values = hp_keep_values,
      .offset = AT(mp_hpopt_args, keep), .arg = "K",
      .help = "trial models kept under OUT/trials: best | all | none" },
    { "halving", MP_OPT_BOOL, "false", .offset = AT(mp_hpopt_args, halving),
      .help = "successive halving: every trial trained to the\nfirst rung, the best 1/eta of "
              "them on to the\nnext, ..., the last ones to --epochs" },
    { "halving-eta", MP_OPT_INT, "3", 2, 1000, .offset = AT(mp_hpopt_args, halving_eta),
      .arg = "E", .help = "halving: 1 in E trials of a rung goes on (ceil)" },
    { "halving-min-epochs", MP_OPT_INT, "auto", 1, 100000,
      .offset = AT(mp_hpopt_args, halving_min), .arg = "R", .flags = MP_OPTF_AUTO,
      .help = "halving: the rungs are epochs/E^k (rounded down)\nfor k >= 1 while at least R, "
              "then --epochs;\nauto: R = epochs/E^2 (at least 1)" },
    { "out", MP_OPT_TEXT, NULL, .offset = AT(mp_hpopt_args, out_dir), .arg = "DIR",
      .help = "trials.jsonl, best.ini and the trials' models", .flags = MP_OPTF_REQUIRED },
};

static const mp_option_def data_table[] = {
    { "dest", MP_OPT_TEXT, "data", .offset = AT(mp_data_args, dest), .arg = "DIR",
      .help = "where fetched files live (created if missing)" },
    REGISTRY(mp_data_args, registry, ""),
    { "mirror", MP_OPT_TEXT, NULL, .offset = AT(mp_data_args, mirror), .arg = "DIR",
      .help = "a directory holding the dataset files\n(unset: $MOLPROP_DATA_MIRROR)" },
    { "url", MP_OPT_TEXT, NULL, .offset = AT(mp_data_args, url), .arg = "URL",
      .help = "a base URL to download from (http, https, file://)\n(unset: $MOLPROP_DATA_URL)" },
};

#define TABLE(v, t) { v, t, sizeof t / sizeof t[0] }
static const struct {
    const char          *verb;
    const mp_option_def *defs;
    size_t               n;
} tables[] = {
    TABLE("train", train_table),         TABLE("predict", predict_table),
    TABLE("eval", eval_table),           TABLE("featurize", featurize_table),
    TABLE("split", split_table),         TABLE("bench", bench_table),
    TABLE("data", data_table),           TABLE("bench-compare", bench_compare_table),
    TABLE("bench-report", bench_report_table), TABLE("hpopt", hpopt_table),
    TABLE("fingerprint", fingerprint_table),
    TABLE("predict-merge", predict_merge_table),   /* molprop predict --merge */
};
#define N_TABLES (sizeof tables / sizeof tables[0])

const char *mp_options_verbs(void)
{
    return "train, predict, eval, featurize, split, bench, data, bench-compare, bench-report, "
           "hpopt, fingerprint";
}

const mp_option_def *mp_option_table(const char *verb, size_t *n)
{
    for (size_t i = 0; verb && i < N_TABLES; i++)
        if (!strcmp(tables[i].verb, verb)) {
            if (n)
                *n = tables[i].n;
            return tables[i].defs;
        }
    if (n)
        *n = 0;
    return NULL;
}

const char *mp_option_table_verb(const mp_option_def *defs)
{
    for (size_t i = 0; i < N_TABLES; i++)
        if (tables[i].defs == defs)
            return tables[i].verb;
    return NULL;
}
