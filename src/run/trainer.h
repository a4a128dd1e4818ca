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
#include "data/labels.h"
#include "data/metrics.h"
#include "data/split.h"
#include "run/ensemble.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A run's inputs already in memory (the benchmark runner reads and
 * featurizes a dataset once for all its models and seeds): the table, its
 * features (every molecule vector the model asks for, and scaffolds for a
 * scaffold split) and optionally the split.  Borrowed: they must outlive
 * mp_train and are not changed.  The run is then the one mp_train does from
 * data_path with the same options, bit for bit, minus the reading.
 */
typedef struct {
    const mp_dataset  *dataset;
    const mp_features *features;      /* features->g.n_mols == dataset->n_rows */
    const mp_split    *split;         /* NULL: made from the options' split    */
    const mp_labels   *labels;        /* the targets stored sparsely (labels.h); *
                                       * dataset->targets is then NULL; for a   *
                                       * classification task                    */
} mp_train_inputs;

/* Called after every epoch of every member (0-based member, 1-based epoch)
 * with the epoch's mean training loss and the validation score (NaN
 * without a validation set).  Runs on the training thread. */
typedef void (*mp_train_epoch_fn)(void *arg, int member, int epoch, double loss, double val);

typedef struct {
    const char     *data_path;
    mp_column_spec  columns;
    int             task;            /* -1: auto (registry, else 0/1 labels)  */
    const char     *metric;          /* NULL: rmse (regression) / auc          */
    mp_model_kind   model;
    unsigned        features;        /* MP_FEAT_* mask of named sets           */
    int             features_scaling;    /* mp_feature_scaling: auto (default) */
    int             no_features_scaling; /* 1: scaling off (Chemprop's flag);  *
                                          * an error with scaling on            */
    const char     *features_path;   /* CSV or .npy: one row of extra molecule *
                                      * features per data row (featfile.h)     */
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
    int             member_jobs;     /* members trained side by side (0: auto: *
                                      * all of them on a device backend,        *
                                      * min(ensemble_size, threads) on the cpu; *
                                      * members.h); each is the model it is     *
                                      * alone, bit for bit                      */
    uint64_t        seed;            /* split seed; member i is seeded seed+i  */
    int             threads;         /* 0: default                             */
    const char     *backend;         /* "cpu" (default), "cuda[:fp32|tf32|bf16]" */
    int             resident;        /* device-resident epochs (resident.h):   *
                                      * -1 auto (on the GPU), 0 off, 1 on       */
    int             graph;           /* -1 auto: replay a captured CUDA graph   *
                                      * (one per slot size) per step when       *
                                      * resident on the GPU; 0 off              */
    int             gpu_share;       /* runs side by side on this GPU (0: auto, *
                                      * 1; hpopt --jobs sets it): each member's  *
                                      * products sized for its share (ops.h      *
                                      * set_share)                              */
    int             slot_classes;    /* resident slot size classes at most      *
                                      * (D-MPNN), 1..MP_RESIDENT_MAX_CLASSES (8); *
                                      * 1: every slot padded to the largest      *
                                      * batch; default 4                        */
    int             profile;         /* 1: where each epoch's time goes, one    *
                                      * "profile epoch" line per epoch on       *
                                      * stderr (the batch source's part too)    */
    const char     *registry;        /* dataset registry file for the task type *
                                      * (NULL: data/datasets.tsv)               */
    const char     *init_model;      /* transfer learning (transfer.c): start  *
                                      * from this model file's weights (NULL:  *
                                      * fresh), a fresh head when its tasks    *
                                      * differ                                 */
    int             freeze_encoder;  /* 1: the D-MPNN encoder is not trained   */
    int             freeze_ffn_layers;  /* the first K head layers are not     */
    const char     *save_dir;        /* NULL: nothing written (NULL with       *
                                      * resume: the resumed directory)          */
    int             quiet;           /* 1: no progress output                  */
    int             read_only;       /* 1: a rank other than 0 of data-parallel *
                                      * training (core/dist.h): save_dir is     *
                                      * rank 0's; this rank reads its checkpoint *
                                      * when resuming and writes nothing there  */
    int             checkpoint_every; /* epochs between checkpoints (0: none): *
                                      * save_dir/checkpoint.mpc, replaced       *
                                      * atomically, removed when the run ends   *
                                      * well (checkpoint.h)                     */
    const char     *resume;          /* a save directory holding a checkpoint: *
                                      * continue that run (every option that    *
                                      * decides the result must be the same;    *
                                      * checkpoint_every, threads, member_jobs, *
                                      * quiet and profile may differ)           */
    int             stop_after;      /* 0: off; K (1..epochs): end the run after *
                                      * epoch K of `epochs` (the schedule still  *
                                      * `epochs` long) as if K were its last:    *
                                      * each member keeps its best epoch so far, *
                                      * the run is scored and saved, and         *
                                      * save_dir/checkpoint.mpc keeps the state  *
                                      * after epoch K, so resume continues it to *
                                      * `epochs` (or a later stop_after), bit for*
                                      * bit the run never stopped.  Resumed from *
                                      * a checkpoint at epoch K or later: no     *
                                      * epoch is trained.  The checkpoint stays  *
                                      * after the run (hpopt's halving, issue 12)*/
    const mp_train_inputs *inputs;   /* NULL: read and featurize data_path     */
    mp_train_epoch_fn on_epoch;      /* NULL: none                             */
    void           *on_epoch_arg;
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
    /* the spectral task (Chemprop v1.6.1's spectra options) */
    int             spectra_act;     /* MP_SPECTRA_EXP | MP_SPECTRA_SOFTPLUS   */
    double          spectra_floor;   /* 1e-8: spectra_target_floor (> 0)       */
    const char     *spectra_phase_mask; /* NULL; a path is refused (not done) */
    /* issue 9: user atom / bond columns (Chemprop v1.6.1's
     * --atom_descriptors_path, --atom_descriptors, --bond_features_path and
     * their scaling switches; columns.h) */
    mp_columns_opts cols;
} mp_train_opts;

mp_train_opts mp_train_opts_default(void);

/* What mp_featurize must compute for a run with these options: the layout,
 * the molecule vectors of o->features, scaffolds for a scaffold split. */
mp_featurize_opts mp_train_featurize_opts(const mp_train_opts *o);

typedef struct {
    mp_task_type task;
    mp_metric    metric;
    size_t       n_tasks;
    double       val_mean, test_mean;      /* the chosen metric, mean over tasks */
    double      *val_per_task, *test_per_task;   /* n_tasks                    */
    size_t       n_train, n_val, n_test, n_invalid;
    int         *best_epoch;               /* per member (0 = initial weights)  */
    int          stopped_epoch;            /* stop_after: the epoch a member was *
                                            * stopped at (0: every member ran to  *
                                            * its end, or stopped by patience)    */
    double       featurize_seconds, train_seconds, train_mols_per_second;
} mp_train_result;

/*
 * Runs the whole training.  Messages for the user (the task type chosen,
 * invalid rows, per-epoch lines or a progress bar, skipped tasks) go to
 * stderr unless opts->quiet.  Writes save_dir/model.mpm and
 * save_dir/metrics.json atomically.  Fails with a message on bad input.
 *
 * A stop request (mp_interrupt_request) ends it with MP_ERR_INTERRUPTED;
 * like any other failure that leaves no temporary file and removes the
 * save directory if this run made it, unless a checkpoint is in it: then
 * the directory and the checkpoint stay, and the message says how to go on.
 * With resume, the run continues from the checkpoint and ends with the
 * model, bit for bit, of a run never interrupted; MP_ERR_ARG (naming the
 * option) when an option or the data differ from the checkpoint's.
 */
mp_status mp_train(const mp_train_opts *opts, mp_train_result *res);

/*
 * Transfer learning (transfer.c), on a freshly built ensemble e (its task
 * names and type set): with o->init_model, member i starts from member
 * i % n of that model file, every tensor copied when the tasks (names and
 * type) are the same, all but the head's last layer (left as initialized,
 * a fresh head) when they differ; the architecture, atom layout and
 * molecule features must match (MP_ERR_ARG naming the difference).  Then
 * the freezing of o->freeze_encoder / o->freeze_ffn_layers
 * (mp_model_set_frozen; freezing without an initial model is refused).
 */
mp_status mp_transfer_init(mp_ensemble *e, const mp_train_opts *o);

/*
 * `molprop train --resume D` with no other option: every option that
 * decides the result, and the data file, as the checkpoint in D records
 * them, into *o (the rest of *o, threads, quiet, profile, checkpoint_every,
 * stays as the caller set it), and o->resume = dir.  The strings of *o then
 * point into *keep: free it with mp_kv_free after the run (run/modelfile.h).
 * MP_ERR_IO when D holds no checkpoint, MP_ERR_FORMAT for a damaged one.
 */
struct mp_kv;
mp_status mp_train_opts_from_checkpoint(const char *dir, mp_train_opts *o, struct mp_kv **keep);
void      mp_train_result_free(mp_train_result *res);

#ifdef __cplusplus
}
#endif
#endif /* MP_TRAINER_H */
