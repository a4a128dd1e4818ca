/*
 * hpopt_int.h - what hpopt.c (the search, its files, one trial),
 * halving.c (successive halving over the same trials) and queue.c (a
 * random search's trials as a queue) share; internal to src/hpopt.
 */
#ifndef MP_HPOPT_INT_H
#define MP_HPOPT_INT_H

#include "hpopt/hpopt.h"

#include "api/api.h"
#include "api/options.h"

#include <pthread.h>

/* A trial's status in its line of trials.jsonl. */
enum {
    HP_OK,        /* "ok": trained to the full epochs (or ended early by patience) */
    HP_FAILED,    /* "failed": out of memory, a NaN score                           */
    HP_RUNG,      /* "rung": trained to a rung of halving, waiting for its ranking  */
    HP_STOPPED,   /* "stopped": halving stopped it at that rung                     */
};

typedef struct {
    int    done;           /* finished: a line "ok" or "failed" for it exists    */
    int    seen;           /* any line for it exists (halving: one per rung)     */
    int    failed;
    int    state;          /* HP_*: the status its next line gets                */
    int    rung, epochs;   /* halving: the rung (0 ..) and its epochs            */
    double *x;             /* space.n values                                     */
    double val, test, loss, seconds;
    double stopped_epoch;  /* the train summary's (halving)                      */
} trial_rec;

typedef struct mp_hp_halving mp_hp_halving;
typedef struct hp_job job;

typedef struct {
    const mp_hpopt_args *a;
    const mp_options    *base;
    const mp_hp_space   *space;
    trial_rec           *t;          /* a->trials */
    char                 metric[32];
    int                  higher;     /* metric: higher is better */
    int                  threads;    /* per trial; 0: the base's own */
    int                  gpu_share;  /* --gpu-share of each trial; 0: the base's */
    int                  quiet;      /* no line per trial on stderr */
    job                **group;      /* the jobs side by side now (rounds: the
                                      * round's; queue: the workers'), for
                                      * mp_hp_give_threads; under lock */
    int                  n_group;
    pthread_mutex_t      lock;       /* the trials file and messages */
    char                 path[1200]; /* OUT/trials.jsonl */
    mp_hp_halving       *h;          /* --halving (halving.c); NULL: off */
    mp_train_shared     *shared;     /* the data, read once (api.h)      */
} search;

/* One trial to train (the trial's record is S->t[i]): from scratch, or
 * (halving) continued from the checkpoint in its folder, to stop_after
 * epochs of the base's (0: all of them). */
struct hp_job {
    search   *S;
    int       i;
    int       rung, stop_after, resume;
    int       beside;   /* in: other trials may run beside it             */
    int       again;    /* out: out of memory beside others, nothing filed: *
                         * to be trained again alone                        */
    int       threads;  /* cpu: the count its trial's regions follow
                         * (mp_threads_follow), raised as trials beside it end */
    int       busy;     /* in a group side by side, not yet done (S->lock)  */
    mp_status st;
    char      error[1024];
};

/* OUT/trials/NNN */
void      mp_hp_trial_dir(const mp_hpopt_args *a, int i, char *buf, size_t n);
void      mp_hp_remove_tree(const char *path);
/* Appends trial i's line (its record as it is; error: the failure's
 * message) in one write, synced. */
mp_status mp_hp_append_trial(search *S, int i, const char *error);
/* Appends the lines of trials[0..n) in one write, synced. */
mp_status mp_hp_append_trials(search *S, const int *trials, int n);
/* Trains jobs[0..n) side by side (one on this thread), then alone each
 * one that ran out of memory beside the others, and returns the first
 * failure among them (MP_ERR_INTERRUPTED with the search's message). */
mp_status mp_hp_run_jobs(search *S, job *jobs, pthread_t *th, int n);
/* Proposes trial i (x: as the trials file will hold it) from the first
 * n_hist trials' losses, the round's trials n_hist..i-1 pending
 * (mp_hp_propose_in_round: it overwrites their losses); a trial with a
 * line must have these parameters (MP_ERR_FORMAT otherwise). */
mp_status mp_hp_propose_trial(search *S, const mp_hp_proposer *p, const double *xs,
                              double *losses, int n_hist, int i);
/* Trains job *arg (a job: pthread's signature), files its line and sets
 * its st; out of memory beside others (beside set) files nothing and sets
 * again instead. */
void     *mp_hp_run_trial(void *arg);
/* 1 when the trials train on a GPU (--device gpu or cuda, any precision). */
int       mp_hp_on_gpu(const mp_options *base);
/* Trains job j again, alone, after it ran out of memory beside others (on
 * a GPU the trials side by side share its memory); a stop since leaves it
 * unfiled, for a rerun. */
void      mp_hp_train_again_alone(job *j);
/* Job j is done: its threads go to the busy job of S->group with the
 * fewest (the cpu backend's results do not depend on the count), so the
 * last trials of a round or of the queue do not run on a share of the
 * cores beside idle ones. */
void      mp_hp_give_threads(search *S, job *j);
/* queue.c: the trials not yet done, proposed up front (each from its own
 * stream), trained by --jobs workers taking the costliest first. */
mp_status mp_hp_run_queue(search *S, const mp_hp_proposer *p, const double *xs,
                          double *losses);
/* The message of a search stopped by a signal during trial i (-1: between). */
mp_status mp_hp_interrupted(const search *S, int i);
/* The best finished trial (lowest loss, the earlier on ties), or -1. */
int       mp_hp_best_trial(const search *S);

/*
 * Halving (halving.c).  mp_hp_halving_open: S->h, the rungs of the base's
 * epochs (MP_ERR_ARG for options that give none); mp_hp_halving_load: a
 * line of a halving search's file, status HP_* (*why set when it does not
 * fit the lines before); mp_hp_halving_run: the whole search, the trials
 * file's lines skipped.
 */
mp_status mp_hp_halving_open(search *S);
void      mp_hp_halving_free(search *S);
int       mp_hp_halving_epochs(const search *S);   /* the full epochs */
struct cJSON;
void      mp_hp_halving_load(search *S, int i, const struct cJSON *o, int status,
                             const char **why);
mp_status mp_hp_halving_run(search *S, const mp_hp_proposer *p, double *xs, double *losses,
                            job *jobs, pthread_t *th);

#endif /* MP_HPOPT_INT_H */
