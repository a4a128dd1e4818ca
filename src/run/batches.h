/*
 * batches.h - the batch source: where a training epoch's steps run.  The
 * epoch loop (fit.c) is written once: it shuffles the training molecules
 * with the member's RNG stream, takes each step's learning rate from the
 * Noam schedule, and hands the epoch to a source as (order, lrs); the
 * source turns that into Adam steps on the model and gives back the losses.
 *
 *   host      per batch: select, forward, backward, Adam step (any backend)
 *   resident  the epoch packed into padded slots, uploaded in one copy,
 *             stepped on the device, the next epoch packed meanwhile
 *             (resident.h)
 *
 * A later source (several processes or GPUs sharing each batch, ensemble
 * members trained side by side) implements the same five ops and the loop
 * stays as it is.
 *
 * The protocol, epoch after epoch (fit.c):
 *
 *   prepare(order, lrs)  takes the coming epoch: batch s holds the molecules
 *                        order[s*bs .. min((s+1)*bs, n_train)) (bs =
 *                        batch_size), lrs[s] is its learning rate; order and
 *                        lrs must stay unchanged until launch returns
 *   launch()             starts the prepared epoch; once it returns, the next
 *                        epoch may be prepared (a resident source packs it
 *                        while the device runs this one); between launch and
 *                        finish nothing else may use the model
 *   finish(losses)       waits for the launched epoch and writes each step's
 *                        loss into losses[0 .. n_steps)
 *
 * A source reports each step's loss to `progress` (when set) as soon as it
 * knows it: the host source after every step, the resident one at finish.
 * Every step draws its dropout masks from the model's own stream in step
 * order, whichever the source, so two sources given the same epochs run the
 * same batches with the same masks and rates.  Host and resident differ
 * only where the arithmetic does: the resident Adam takes its step size
 * from a float schedule (ops.h: adam_sched), and on the cpu backend the
 * slots' padding moves the BLAS blocking; on ref (sums in order, padding
 * exact) the first step's loss is bitwise the same, the models agree to
 * ~1e-8 and the dropout stream ends in the same state
 * (tests/test_batches.c).
 */
#ifndef MP_BATCHES_H
#define MP_BATCHES_H

#include "core/progress.h"
#include "data/labels.h"
#include "data/scaler.h"
#include "featurize/featurize.h"
#include "models/model.h"
#include "run/resident.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the batches are made of: the training molecules and their inputs. */
typedef struct {
    const mp_features *f;              /* the store: graphs, fingerprints, descriptors  */
    const float       *targets;        /* per row of f: n_tasks, scaled, NaN missing    */
    const mp_labels   *labels;         /* instead of targets: sparse (classification,   *
                                        * unscaled); targets is then NULL               */
    size_t             n_tasks;
    unsigned           features;       /* MP_FEAT_* mask of the molecule features (0: none) */
    int                feat_dim;       /* their length (mp_feature_set_dim)             */
    const mp_scaler   *feature_scaler; /* standardizes them (when feat_dim > 0)         */
    int                graphs;         /* 1: the model reads the graphs (D-MPNN)        */
    const int32_t     *train;          /* the training molecules (rows of f); an epoch's */
    int32_t            n_train;        /*   order is a permutation of them              */
    int32_t            batch_size;
    /* issue 11 (all 0 / NULL: Chemprop v1's loop as before) */
    int32_t            n_epoch;        /* molecules per epoch (0: n_train); class-balanced
                                        * epochs (fit.c) take 2 min(positives, negatives) */
    const float       *weights;        /* per row of f: sample weight, or NULL          */
    const uint8_t     *ineq;           /* per row of f: n_tasks MP_INEQ_* flags, or NULL */
} mp_batch_data;

/* Molecules per epoch: n_epoch, or n_train when 0. */
int32_t mp_batch_data_epoch(const mp_batch_data *d);

/* Steps per epoch: ceil(mp_batch_data_epoch / batch_size). */
int32_t mp_batch_data_steps(const mp_batch_data *d);

/* Batch s of the epoch in `order`: its molecules into mols[0..n), their
 * targets into tgt [n x n_tasks] and, when feat_dim > 0, their scaled
 * features into extra [n x feat_dim] (may be NULL otherwise).  Returns n. */
int32_t mp_batch_data_fill(const mp_batch_data *d, const size_t *order, int32_t s,
                           int32_t *mols, float *tgt, float *extra);

typedef struct mp_batch_source mp_batch_source;

typedef struct {
    const char *name;                  /* "host", "resident"                            */
    mp_status (*prepare)(mp_batch_source *s, const size_t *order, const double *lrs);
    mp_status (*launch)(mp_batch_source *s);
    mp_status (*finish)(mp_batch_source *s, double *losses);
    /* The source's part of a profile line (mp_train_opts.profile): the rest
     * of the line, where the last finished epoch's time went, and its
     * newline; at epoch 1 also lines on how the source is laid out. */
    void      (*profile)(const mp_batch_source *s, int epoch, FILE *fp);
    void      (*free)(mp_batch_source *s);
    /* Resuming (checkpoints; may be NULL: nothing to keep): what later
     * epochs depend on that the source fixed from earlier ones (the
     * resident's slot classes, chosen at its first plan), as n 32-bit
     * words in *out (mp_malloc'd; NULL when n is 0); and those words given
     * to a fresh source of the same data before its first prepare. */
    mp_status (*state_get)(const mp_batch_source *s, uint32_t **out, size_t *n);
    mp_status (*state_set)(mp_batch_source *s, const uint32_t *w, size_t n);
} mp_batch_source_ops;

struct mp_batch_source {
    const mp_batch_source_ops *ops;
    mp_model     *m;             /* the model it trains (outlives the source)       */
    int32_t       n_steps;       /* steps per epoch                                 */
    mp_progress  *progress;      /* each step's loss, when set (the caller's)       */
    int           prepared;      /* the protocol: an epoch prepared, not launched   */
    int           launched;      /*   an epoch launched, not finished               */
};

/* The protocol's calls, checked: MP_ERR_ARG (naming the source) for a call
 * out of turn (prepare twice without a launch, launch without a prepared
 * epoch or with one still launched, finish without a launch).  A failed
 * prepare leaves nothing prepared, a failed launch nothing launched. */
mp_status mp_batch_source_prepare(mp_batch_source *s, const size_t *order, const double *lrs);
mp_status mp_batch_source_launch(mp_batch_source *s);
mp_status mp_batch_source_finish(mp_batch_source *s, double *losses);
void      mp_batch_source_free(mp_batch_source *s);   /* NULL is fine */

/* The source's state for a checkpoint, and back (the ops above; a source
 * without them has none: *n = 0, and only n == 0 may be set).  MP_ERR_ARG
 * for words the source cannot take, naming it. */
mp_status mp_batch_source_state_get(const mp_batch_source *s, uint32_t **out, size_t *n);
mp_status mp_batch_source_state_set(mp_batch_source *s, const uint32_t *w, size_t n);

/*
 * The host source: every step issued from the host, on any backend, with
 * the model's own batch buffers (mp_model_forward, mp_model_loss_backward,
 * mp_model_adam_step; with sample weights or inequality flags
 * mp_model_loss_backward_ex).  d must outlive the source.  MP_ERR_NOMEM.
 */
mp_status mp_batch_source_host(mp_batch_source **out, mp_model *m, const mp_batch_data *d);

/*
 * The data-parallel source (batches_dist.c): under K > 1 MPI ranks each
 * computes its slice of every batch on the host and the gradients are
 * summed over the ranks in rank order (core/dist.h), so every rank's model
 * takes the same steps.  Otherwise as the host source.
 */
mp_status mp_batch_source_dist(mp_batch_source **out, mp_model *m, const mp_batch_data *d);

typedef struct {
    int     use_graph;     /* replay one captured CUDA graph per slot class (mp_resident_opts) */
    int32_t n_classes;     /* slot size classes at most, 1..MP_RESIDENT_MAX_CLASSES            */
    int     threads;       /* host threads packing the slots (0: mp_threads_get())             */
} mp_resident_source_opts;

/*
 * The device-resident source (resident.h): slots for a whole epoch, the
 * largest of them holding the largest batch d's training molecules can
 * form (mp_graphs_batch_bounds); the epoch's batches planned into slot
 * classes and packed in parallel at prepare, one upload and the steps at
 * launch, the losses at finish.  d and m must outlive the source.
 * MP_ERR_ARG for n_classes out of range; otherwise fails as
 * mp_resident_create does.
 */
mp_status mp_batch_source_resident(mp_batch_source **out, mp_model *m, const mp_batch_data *d,
                                   const mp_resident_source_opts *o);

#ifdef __cplusplus
}
#endif
#endif /* MP_BATCHES_H */
