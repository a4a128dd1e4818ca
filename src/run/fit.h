/*
 * fit.h - one ensemble member's training: the epoch loop, written once over
 * a batch source (batches.h).  Per member: activations reserved for the
 * largest batch, the source opened (host or device-resident, as the options
 * say), the shuffle stream seeded with seed + k; per epoch: the order
 * shuffled, the Noam rates of its steps, the source's steps, the validation
 * score, the best epoch's parameters kept (Chemprop v1, REFERENCE.md 2.6).
 *
 * The order of the RNG draws is fixed by this loop alone: the shuffle
 * stream once per epoch, before the epoch's steps; the dropout stream by
 * the steps, in step order, whichever source runs them.
 */
#ifndef MP_FIT_H
#define MP_FIT_H

#include "core/progress.h"
#include "data/dataset.h"
#include "data/metrics.h"
#include "models/model_state.h"
#include "models/schedule.h"
#include "run/batches.h"
#include "run/ensemble.h"
#include "run/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Where a member's training stands after an epoch: everything the rest of
 * its training depends on, so that a run resumed from it ends bit for bit
 * as the uninterrupted one (checkpoint.c keeps it in a file).  Taken after
 * the epoch's validation, when the loop has already drawn the next epoch
 * (its order and its rates): order and lrs are that next epoch's and rng
 * and noam have made its draws; prepared = 0 after the last epoch.
 */
typedef struct {
    int              k;             /* the member                                */
    int              epoch;         /* epochs finished (1..epochs)               */
    mp_rng           rng;           /* the order's stream                        */
    mp_noam          noam;          /* the schedule                              */
    int              prepared;      /* 1: order / lrs hold the next epoch        */
    int32_t          n_train, n_steps;
    size_t          *order;         /* n_train                                   */
    double          *lrs;           /* n_steps                                   */
    size_t           n_params;
    float           *best;          /* the best epoch's parameters (n_params)    */
    double           best_score;    /* its validation score (NaN: none yet)      */
    int              best_epoch;
    mp_model_state   model;         /* parameters, Adam, the dropout stream      */
    uint32_t        *source;        /* the batch source's state words            */
    size_t           n_source;
    /* class-balanced epochs (mp_fit_ctx.pos / neg): the positive list then
     * the negative one, in the order the last shuffle left them (each
     * epoch shuffles them in place, so they are state); NULL, 0 otherwise */
    size_t          *balance;
    int32_t          n_balance;
} mp_fit_state;

/* Frees what a state read from a file owns (order, lrs, best, model,
 * source, balance: each mp_malloc'd) and zeroes it. */
void mp_fit_state_free(mp_fit_state *s);

/* Everything a member's training reads; shared by the members of a run. */
typedef struct {
    const mp_train_opts *o;           /* epochs, schedule, seed, resident, graph,        *
                                       * slot_classes, profile                           */
    const mp_dataset    *d;           /* the targets of the validation rows              */
    mp_ensemble         *e;           /* member k is the one trained                     */
    mp_batch_data        batches;     /* the training set                                */
    const int32_t       *val;         /* validation rows (of d and e's features)         */
    int32_t              n_val;
    mp_metric            metric;
    int                  classification;
    int32_t              eval_batch;  /* molecules per validation batch                  */
    mp_progress         *progress;    /* per-step and per-epoch output (may be NULL)     */
    /* Checkpoints: after each epoch e with e % checkpoint_every == 0 (0:
     * never), checkpoint(checkpoint_arg, state) is called with the member's
     * state (valid during the call only); its failure ends the training
     * with that status. */
    int                  checkpoint_every;
    mp_status          (*checkpoint)(void *arg, const mp_fit_state *s);
    /* stop_after K > 0 (trainer.h): after epoch K (its checkpoint made
     * whatever checkpoint_every says; the checkpoint hook is required) the
     * member ends as if K were its last epoch, and stopped[k] = 1 (stopped
     * NULL: not recorded); a member resumed at epoch K or later trains no
     * epoch. */
    int                  stop_after;
    int                 *stopped;
    void                *checkpoint_arg;
    /* Resuming: member resume->k continues from this state instead of
     * starting (the member's model and the source are given its state). */
    const mp_fit_state  *resume;
    /* Members side by side (members.h): when *cancel is set (another
     * member failed), this one stops before its next epoch with
     * MP_ERR_INTERRUPTED.  NULL: never. */
    const int           *cancel;
    /* issue 11: Chemprop's class-balanced epochs (batches.n_epoch = 2 x the
     * smaller list): each epoch shuffles both lists with the member's stream
     * and interleaves them, positive first */
    const int32_t       *pos, *neg;   /* training rows with a label 1, the others       */
    int32_t              n_pos, n_neg;/* (NULL, 0: plain shuffled epochs)               */
    int                  multiclass;  /* classes per task of a multiclass head (0: none):*
                                       * scored by accuracy of the most probable class   */
} mp_fit_ctx;

/*
 * Trains member k of c->e for o->epochs epochs (fewer with o->patience > 0
 * and a validation set: it stops once that many epochs in a row brought no
 * better validation score, Chemprop v2's early stopping) and leaves it with the
 * parameters of its best validation epoch (the last epoch without a
 * validation set; the initial weights, epoch 0, if no epoch ever scores),
 * whose number goes to *best_epoch.  Polls for a stop request before each
 * epoch (and the host source between steps): MP_ERR_INTERRUPTED then, the
 * model left as it is.  src NULL: the source the options ask
 * for (mp_fit_open_source), opened and freed here; otherwise the caller's,
 * built for member k's model and c->batches, which stays the caller's.
 */
mp_status mp_fit_member(const mp_fit_ctx *c, int k, mp_batch_source *src, int *best_epoch);

/* The source o->resident asks for (-1: resident on a device backend, host on
 * a host-memory one), for member k: resident with a captured graph per slot
 * class when o->graph allows and the backend can replay the model's
 * dropout, o->slot_classes classes. */
mp_status mp_fit_open_source(const mp_fit_ctx *c, int k, mp_batch_source **out);

/* The validation/test batch on a device backend: `eval` molecules (4096),
 * halved, not below the training batch, while the D-MPNN's activations
 * for it would pass 8 GiB (about (2 depth + 3) h floats per directed edge
 * and 5 h per atom, at g's mean molecule): Chemprop's largest search
 * configurations (hidden 2400, depth 6) need 30 GiB at 4096 and leave no
 * room for the trials beside them.  A run sharing the GPU with others
 * (--gpu-share N, hpopt's --jobs) gets 8 GiB / N: ten trials side by side
 * would otherwise reserve 80 GB between them and run out of memory.  From
 * sizes alone: deterministic. */
int32_t mp_fit_eval_batch(const mp_model_config *c, const mp_graphs *g, int32_t batch,
                          int32_t eval, int share);

/* The activations member k needs for the largest training and validation
 * batches (mp_model_reserve), reserved once before its first step. */
mp_status mp_fit_reserve(const mp_fit_ctx *c, int k);

/* The metric of predictions pred [n x n_tasks] against the rows mols of d
 * (mp_metric_tasks: per task into per_task and why, their mean). */
mp_status mp_fit_score(const mp_dataset *d, const int32_t *mols, int32_t n, const double *pred,
                       mp_metric metric, int classification, double *per_task,
                       mp_score_status *why, double *mean, size_t *n_skipped);
/* The same with the targets of `labels` when not NULL (sparse; d->targets
 * may then be NULL). */
mp_status mp_fit_score_labels(const mp_dataset *d, const mp_labels *labels, const int32_t *mols,
                              int32_t n, const double *pred, mp_metric metric,
                              int classification, double *per_task, mp_score_status *why,
                              double *mean, size_t *n_skipped);

/* A multiclass head's score: per task the fraction of labelled rows of mols
 * whose most probable class (prob [n x n_tasks x n_classes]) is the label
 * (NaN without one), into per_task, and their mean. */
mp_status mp_fit_score_multiclass(const mp_dataset *d, const int32_t *mols, int32_t n,
                                  const double *prob, int n_classes, double *per_task,
                                  double *mean);

#ifdef __cplusplus
}
#endif
#endif /* MP_FIT_H */
