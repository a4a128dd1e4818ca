/*
 * members.h - the members of an ensemble trained one after another or side
 * by side (`molprop train --ensemble-size N --member-jobs K`, the seeds of a
 * benchmark's (dataset, model)): each member through the one epoch loop of
 * fit.h, K at a time in threads, each member bitwise the model it is when
 * trained alone, because nothing a member computes reads another's state:
 *
 *   - the featurized data, the split and the scaled targets (c->batches)
 *     are made once and only read;
 *   - on a device backend each thread opens its own instance of the
 *     backend (its own stream, cuBLAS handles and scratch: the GPU runs the
 *     members' small kernels side by side) and moves the member's model
 *     onto it for the member's training (mp_model_rebind), validating
 *     through its own view of the ensemble (its own streaming buffers);
 *   - on the cpu each thread runs its members' ops on a share of the
 *     threads (mp_threads_follow; a worker left without members gives its
 *     share to one still training); the cpu backend's results do not
 *     depend on the thread count (cpu_impl.h).
 * The epoch callbacks, the checkpoint hook and the per-member output are
 * serialized by one lock; a failing member stops the others before their
 * next epoch (fit.h's cancel flag), and a stop request stops them all.
 */
#ifndef MP_MEMBERS_H
#define MP_MEMBERS_H

#include "run/fit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const mp_fit_ctx   *c;          /* the run's context; c->resume is ignored:   *
                                     * see states                                 */
    const int          *members;    /* which members of c->e to train, in order   */
    int                 n;
    int                 jobs;       /* side by side (1: one after another, on the *
                                     * calling thread, with c->progress as it is) */
    int                 threads;    /* cpu threads in all, split among the jobs   */
    int                 share;      /* on a device, every member's backend takes  *
                                     * set_share(share) (ops.h) whatever the jobs, *
                                     * so members side by side and one after      *
                                     * another agree bit for bit (the ensemble's  *
                                     * size; 0 or 1: the whole device)            */
    const mp_fit_state *states;     /* resuming: the members' states (n_states)   */
    int                 n_states;
    int                *best_epoch; /* per member of c->e: set for those trained  */
    /* Hooks, each called under the lock (NULL: none).  begin: before member
     * k starts (jobs 1: the caller's progress output); end: after it ended
     * with status st, its model holding its final parameters when st is
     * MP_OK (idle: the hook may read them); a failing end fails the run. */
    void              (*begin)(void *arg, int k);
    mp_status         (*end)(void *arg, int k, mp_status st);
    void               *arg;
} mp_members_opts;

/* The number of members side by side that `requested` (--member-jobs; 0:
 * auto) gives for n members on backend b with `threads` cpu threads: auto
 * is all n on a device backend, min(n, threads) on a host one; never more
 * than n, at least 1. */
int mp_members_jobs(int requested, int n, const mp_backend *b, int threads);

/*
 * Trains members mo->members[0..n) of mo->c->e (mp_fit_member each), their
 * best epochs into mo->best_epoch.  The first failure (in time) is the
 * status, its message kept; the other members then stop at their next
 * epoch.  With jobs > 1 and c->progress set, one line per member epoch on
 * stderr ("member 2/5 epoch 3/30: loss ..."), unless the run is quiet.
 */
mp_status mp_fit_members(const mp_members_opts *mo);

/* Threads that cpu workers out of members have given to busy ones, since
 * the process started (for tests). */
long mp_members_threads_given(void);

#ifdef __cplusplus
}
#endif
#endif /* MP_MEMBERS_H */
