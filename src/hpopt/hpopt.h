/*
 * hpopt.h - hyperparameter search behind `molprop hpopt`: the search space
 * (a file of train options and their ranges), the proposals (random search
 * and the tree-structured Parzen estimator of Bergstra et al. 2011), and the
 * run (hpopt.c: trials trained one after another or side by side, each
 * appended to trials.jsonl as it finishes, resumable, the best written as a
 * config file `molprop train --config` reads).
 *
 * A point of the space is one double per dimension: the value itself for
 * int, real and log dimensions (ints and stepped reals already on their
 * grid), the index of the choice for choice dimensions.
 */
#ifndef MP_HPOPT_H
#define MP_HPOPT_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_HP_MAX_DIMS    32
#define MP_HP_MAX_CHOICES 32

typedef enum {
    MP_HP_INT,     /* lo..hi on the grid lo + k*step (step >= 1)       */
    MP_HP_REAL,    /* uniform in [lo, hi]; step > 0: on the grid        */
    MP_HP_LOG,     /* log-uniform in [lo, hi], 0 < lo < hi              */
    MP_HP_CHOICE,  /* one of choices[0..n_choices)                      */
} mp_hp_kind;

typedef struct {
    char       key[64];        /* the train option it sets ("hidden")      */
    mp_hp_kind kind;
    double     lo, hi, step;   /* step 0: continuous (REAL)                */
    int        n_choices;
    char      *choices[MP_HP_MAX_CHOICES];
} mp_hp_dim;

typedef struct {
    int       n;
    mp_hp_dim dims[MP_HP_MAX_DIMS];
    char      path[1024];
} mp_hp_space;

/*
 * Reads a space file: one [space] section, a line per dimension,
 *
 *   hidden      = int 300 2400 100      ; lo hi [step]
 *   dropout     = real 0 0.4 0.05       ; lo hi [step]; no step: continuous
 *   max-lr      = log 1e-4 1e-2
 *   aggregation = choice mean sum norm
 *
 * Every key must be a train option and every value one it accepts
 * (lo, hi, each choice); errors name file:line.
 */
mp_status mp_hp_space_read(mp_hp_space *s, const char *path);
void      mp_hp_space_free(mp_hp_space *s);

/* The option text of dimension d at value v ("1200", "0.15", "sum"). */
void mp_hp_value_text(const mp_hp_dim *d, double v, char *buf, size_t n);
/* Parses text back into v (as written by mp_hp_value_text); MP_ERR_FORMAT
 * if it is not a point of the dimension. */
mp_status mp_hp_value_parse(const mp_hp_dim *d, const char *text, double *v);

typedef enum { MP_HP_RANDOM, MP_HP_TPE } mp_hp_method;

typedef struct {
    mp_hp_method method;
    uint64_t     seed;
    int          startup;     /* TPE: random proposals before the first model (10) */
    int          candidates;  /* TPE: draws from l(x) scored per dimension (24)     */
} mp_hp_proposer;

/*
 * Proposes point `trial` (x: space->n values) from the finished trials:
 * xs[i * space->n ...] and losses[i] for i < n_done (lower is better; NaN:
 * failed, ignored).  Deterministic: the same inputs give the same point,
 * whatever ran before (trial's own random stream).  Random search ignores
 * the history; TPE draws at random until it has `startup` finished trials.
 */
void mp_hp_propose(const mp_hp_proposer *p, const mp_hp_space *s, const double *xs,
                   const double *losses, int n_done, int trial, double *x);

/*
 * Proposes point `trial` of a round of trials run side by side, the round
 * starting at trial r0: trials 0..r0-1 are finished (losses as above), and
 * r0..trial-1 are proposed (their points in xs) but not yet scored.  With
 * TPE, once the finished trials alone reach `startup`, the pending ones
 * join the history with the worst finished loss (Ginsbourger et al.'s
 * "constant liar" for parallel proposals), so that a round's proposals
 * spread out instead of all taking the best region; losses[r0..trial-1]
 * are overwritten with that loss.  Random search and TPE's startup
 * proposals are those of mp_hp_propose(.., r0, trial, ..).
 */
void mp_hp_propose_in_round(const mp_hp_proposer *p, const mp_hp_space *s, const double *xs,
                            double *losses, int r0, int trial, double *x);

/* Threads handed from finished trials to running ones since the start
 * (hpopt.c mp_hp_give_threads; for tests). */
long mp_hpopt_threads_given(void);

#ifdef __cplusplus
}
#endif
#endif /* MP_HPOPT_H */
