/*
 * resident.h - device-resident training: every batch of an epoch packed on
 * the host into padded slots, uploaded to the device in one copy, then one
 * step per slot with no other host<->device traffic: a device-to-device copy
 * of the slot into the model's bound batch buffers and the step itself,
 * which on a cuda backend is ONE captured CUDA graph per slot size replayed
 * every step (the learning rate, Adam's step count, the loss and the dropout
 * keys live in device memory, indexed by a device step counter).
 *
 *   mp_resident *r;
 *   mp_resident_create(&r, model, &opts);
 *   per epoch: mp_resident_plan(r, n_batches, atoms, edges);
 *              for each batch s: mp_resident_pack(r, s, ...);  lrs[s] = ...;
 *              mp_resident_run(r, n_batches, lrs, losses);
 *              (or _launch, plan and pack the next epoch on the host, _finish)
 *   mp_resident_free(r);
 *
 * Size classes.  A slot holds a batch of up to fit_atoms atoms and
 * fit_edges directed edges.  The largest class holds the opts' capacities
 * (cap_atoms / cap_edges: any batch); with n_classes > 1 the first plan
 * adds up to n_classes - 1 smaller classes chosen from its batch sizes (to
 * pad that epoch's batches least), and every plan puts each batch in the
 * smallest class that holds it.  Slots of different classes lie back to
 * back in the epoch buffers; the model's buffers are reserved for the
 * largest; each class has its own captured graph.  Without a plan every
 * slot is of the largest class.
 *
 * Padding.  A class's slot holds ce = fit_edges directed edges (rounded up
 * to even), ca = fit_atoms + 1 + ce / 32 atoms and batch_size + 1 + ca / 64
 * molecules (mp_resident_class_caps).  The real molecules come first, in
 * batch order, exactly as mp_graphs_select lays them out; then padding
 * molecules of up to 64 atoms (no hot slots, mass 0) own the unused atoms,
 * and the unused edges are pairs of self-loops, at most 32 into one padding
 * atom (so no padding row is a long serial walk for the GPU's one-warp-per-
 * row ops); molecules after the last padding atom are empty.  Padding rows
 * have loss mask 0, so they add exactly zero to the loss and to every
 * gradient (tests/test_gpu_train.c compares padded and unpadded gradients).
 *
 * Dropout.  With a backend that has the keyed dropout ops (ops.h), each
 * launch draws the epoch's keys from the model's dropout stream exactly as
 * the host loop's steps would (one per dropout layer per step, in forward
 * order), uploads them, and the steps read theirs at the device step index:
 * graph replay drops the same units as the host loop, and the stream ends
 * the epoch in the same state.
 */
#ifndef MP_RESIDENT_H
#define MP_RESIDENT_H

#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t batch_size;   /* real molecules a step may hold                        */
    int32_t max_batches;  /* slots per epoch                                        */
    int32_t cap_atoms;    /* real atoms / edges a batch may hold (D-MPNN; e.g.      */
    int32_t cap_edges;    /*   mp_graphs_batch_bounds over the training set)        */
    int     use_graph;    /* 1: capture one step per class as a CUDA graph and      *
                           * replay it (cuda backend; with dropout, the keyed       *
                           * ops); 0: issue the ops of every step (any backend)     */
    int32_t n_classes;    /* slot size classes at most (D-MPNN; 0 or 1: one, the    *
                           * capacities above; at most MP_RESIDENT_MAX_CLASSES)     */
} mp_resident_opts;

#define MP_RESIDENT_MAX_CLASSES 8

typedef struct mp_resident mp_resident;

/* Allocates the host staging, the device epoch block, the step buffers and
 * the schedule for `m` (which must outlive it), room for max_batches slots
 * of the largest class.  MP_ERR_ARG for bad sizes or use_graph on a backend
 * that cannot capture (or replay the model's dropout), MP_ERR_NOMEM naming
 * the bytes. */
mp_status mp_resident_create(mp_resident **out, mp_model *m, const mp_resident_opts *o);
void      mp_resident_free(mp_resident *r);

/*
 * Plans the coming epoch of n_steps batches: batch s holds atoms[s] atoms
 * and edges[s] directed edges (D-MPNN; both may be NULL for the FFN model).
 * The first plan of a resident made with n_classes > 1 chooses the classes
 * from these sizes.  Each batch goes into the smallest class that holds it;
 * slots from n_steps on are of the largest.  MP_ERR_ARG when a batch does
 * not fit the largest class.  Call before packing the epoch (a plan moves
 * the slots); a launch has issued all its steps when it returns, so the
 * next epoch may be planned and packed before its finish.
 */
mp_status mp_resident_plan(mp_resident *r, int32_t n_steps, const int32_t *atoms,
                           const int32_t *edges);

/*
 * Fixes the slot classes to those of another resident (mp_resident_class_caps'
 * fit_atoms / fit_edges, smallest first, the last the largest class), as
 * when resuming a run from a checkpoint: the classes its first plan would
 * have chosen, so every epoch is padded as it was.  Before the first plan;
 * MP_ERR_ARG when the last class is not this resident's largest, the
 * classes do not grow, or other classes were chosen already.
 */
mp_status mp_resident_set_classes(mp_resident *r, int32_t n, const int32_t *fit_atoms,
                                  const int32_t *fit_edges);

/*
 * Packs slot `slot` of the coming epoch (into the class the plan gave it): molecules mols[0..n) of the store g
 * (D-MPNN; NULL for the FFN model), their targets [n x n_tasks] (scaled, NaN
 * missing) and extra features [n x extra_dim] (standardized; NULL when the
 * model takes none), then the padding.  The packed slot is checked like any
 * batch (mp_batch_check); MP_ERR_ARG when the batch exceeds the capacities,
 * MP_ERR_FORMAT for a bad graph or an infinite target.  Different slots may
 * be packed concurrently (each writes only its own slot); the error message
 * is the calling thread's.
 */
mp_status mp_resident_pack(mp_resident *r, int32_t slot, const mp_graphs *g,
                           const int32_t *mols, int32_t n, const float *targets,
                           const float *extra);

/*
 * Runs slots 0..n_steps-1 as training steps with learning rates lrs[] (Adam's
 * step count continues the model's): one upload of the slots, one of the
 * schedule, the steps, one download of the losses into losses[0..n_steps).
 */
mp_status mp_resident_run(mp_resident *r, int32_t n_steps, const double *lrs, double *losses);

/* mp_resident_run in two halves, so the host can pack the next epoch while
 * the device runs this one: launch uploads the slots and the schedule (the
 * staging may be packed again as soon as it returns) and queues the steps;
 * finish waits for them and downloads the losses (n_steps of the launch).
 * Between the two the model must not be used. */
mp_status mp_resident_launch(mp_resident *r, int32_t n_steps, const double *lrs);
mp_status mp_resident_finish(mp_resident *r, double *losses);

/* Seconds the last mp_resident_run spent uploading (slots, schedule) and
 * running the steps (through the final sync and the losses' download). */
void mp_resident_times(const mp_resident *r, double *upload, double *steps);

/* The padded capacities of a slot of the largest class (for tests and logs). */
void mp_resident_caps(const mp_resident *r, int32_t *mols, int32_t *atoms, int32_t *edges);

/* The classes, smallest first (the last is the largest): how many, and
 * class k's real capacities (fit_*) and padded ones; MP_ERR_ARG for a bad
 * k.  The class of a slot in the current plan (-1 for a bad slot). */
int32_t   mp_resident_n_classes(const mp_resident *r);
mp_status mp_resident_class_caps(const mp_resident *r, int32_t k, int32_t *fit_atoms,
                                 int32_t *fit_edges, int32_t *mols, int32_t *atoms,
                                 int32_t *edges);
int32_t   mp_resident_slot_class(const mp_resident *r, int32_t slot);

/* The real and the padded directed edges of the last launch's slots (the
 * padding's cost; for logs). */
void mp_resident_padding(const mp_resident *r, double *real_edges, double *padded_edges);

/* The packed slot `slot` as a host graph view (pointers into the staging,
 * valid until the next pack of that slot) plus its targets and mask (model
 * element type): for tests. */
mp_status mp_resident_slot_view(mp_resident *r, int32_t slot, mp_graphs *view,
                                const void **target, const uint8_t **mask);

#ifdef __cplusplus
}
#endif
#endif /* MP_RESIDENT_H */
