/*
 * trainer.h - the whole training run behind `molprop train`: read the CSV,
 * featurize, split, scale, train every ensemble member with Adam and the Noam
 * schedule (Chemprop v1's loop, REFERENCE.md 2.4-2.7; the epoch loop of
 * fit.h over a batch source of batches.h), keep each member's best
 * validation epoch, score the test set, write model.mpm and metrics.json.
 * Every knob is an option here: the library reads no environment variable.
 */
#ifndef MP_TRAINER_H
#define MP_TRAINER_H

#include "core/core.h"
#include "data/dataset.h"
#include "data/metrics.h"
#include "data/split.h"
#include "run/ensemble.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char     *data_path;
    mp_column_spec  columns;
    int             task;            /* -1: auto (registry, else 0/1 labels)  */
    const char     *metric;          /* NULL: rmse (regression) / auc          */
    mp_model_kind   model;
    unsigned        features;        /* MP_FEAT_* mask                         */
    mp_atom_layout  layout;
    mp_split_opts   split;           /* its seed is ignored: `seed` below      */
    int             epochs;          /* 30                                     */
    int             batch_size;      /* 50                                     */
    double          warmup_epochs;   /* 2                                      */
    double          init_lr, max_lr, final_lr;   /* 1e-4, 1e-3, 1e-4           */
    int             hidden, depth, ffn_layers, ffn_hidden;
    double          dropout;
    mp_aggregation  aggregation;
    int             ensemble_size;   /* 1                                      */
    uint64_t        seed;            /* split seed; member i is seeded seed+i  */
    int             threads;         /* 0: default                             */
    const char     *backend;         /* "cpu" (default), "cuda[:fp32|tf32|bf16]" */
    int             resident;        /* device-resident epochs (resident.h):   *
                                      * -1 auto (on the GPU), 0 off, 1 on       */
    int             graph;           /* -1 auto: replay a captured CUDA graph   *
                                      * (one per slot size) per step when       *
                                      * resident on the GPU; 0 off              */
    int             slot_classes;    /* resident slot size classes at most      *
                                      * (D-MPNN), 1..MP_RESIDENT_MAX_CLASSES (8); *
                                      * 1: every slot padded to the largest      *
                                      * batch; default 4                        */
    int             profile;         /* 1: where each epoch's time goes, one    *
                                      * "profile epoch" line per epoch on       *
                                      * stderr (the batch source's part too)    */
    const char     *registry;        /* dataset registry file for the task type *
                                      * (NULL: data/datasets.tsv)               */
    const char     *save_dir;        /* NULL: nothing written                  */
    int             quiet;           /* 1: no progress output                  */
    /* issue 11: task types, losses and training options, Chemprop's (the
     * defaults keep v1's model and loop, bit for bit).  The task types
     * are mp_task_type's; the sample-weight column is columns.weight_column. */
    const char     *loss;            /* NULL: the task's default (heads.h names) */
    int             n_classes;       /* multiclass: classes per task (0: the
                                      * largest label + 1)                      */
    double          loss_lambda;     /* 0: evidential / dirichlet regularization */
    double          loss_eps;        /* 1e-8: evidential                       */
    double          quantile_alpha;  /* 0.1: regression-quantile's interval    */
    int             patience;        /* 0: off; N: stop after N epochs without
                                      * a better validation score              */
    double          grad_clip;       /* 0: off; the global gradient norm's bound */
    int             class_balance;   /* 1: class-balanced epochs (classification) */
    const char     *task_weights;    /* "w1,w2,.." one per task, or NULL        */
    mp_act_kind     activation;      /* MP_ACT_RELU                            */
    int             batch_norm, atom_messages, undirected;   /* 0 (D-MPNN)     */
    /* issue 9: user atom / bond columns (Chemprop v1.6.1's
     * --atom_descriptors_path, --atom_descriptors, --bond_features_path and
     * their scaling switches; columns.h) */
    mp_columns_opts cols;
} mp_train_opts;

mp_train_opts mp_train_opts_default(void);

typedef struct {
    mp_task_type task;
    mp_metric    metric;
    size_t       n_tasks;
    double       val_mean, test_mean;      /* the chosen metric, mean over tasks */
    double      *val_per_task, *test_per_task;   /* n_tasks                    */
    size_t       n_train, n_val, n_test, n_invalid;
    int         *best_epoch;               /* per member (0 = initial weights)  */
    double       featurize_seconds, train_seconds, train_mols_per_second;
} mp_train_result;

/*
 * Runs the whole training.  Messages for the user (the task type chosen,
 * invalid rows, per-epoch lines or a progress bar, skipped tasks) go to
 * stderr unless opts->quiet.  Writes save_dir/model.mpm and
 * save_dir/metrics.json atomically.  Fails with a message on bad input.
 */
mp_status mp_train(const mp_train_opts *opts, mp_train_result *res);
void      mp_train_result_free(mp_train_result *res);

#ifdef __cplusplus
}
#endif
#endif /* MP_TRAINER_H */
