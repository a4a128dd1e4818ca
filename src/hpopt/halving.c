/*
 * halving.c - `molprop hpopt --halving`: successive halving (Jamieson and
 * Talwalkar 2016, the synchronous bracket of Li et al.'s Hyperband) over
 * the trials of the search.
 *
 * The rungs are E/eta^k epochs (rounded down) for k >= 1 while at least R
 * (--halving-min-epochs; auto: E/eta^2, at least 1), ascending, then E,
 * the base's --epochs.  E = 30, eta = 3: rungs 3, 10, 30.
 *
 *   rung 0  every trial is proposed (in rounds of --jobs, TPE from the
 *           rung-0 scores of the rounds before) and trained with
 *           --stop-after r0: its schedule is the full run's, and its
 *           folder keeps the checkpoint after epoch r0;
 *   rung k  once every trial of rung k is scored, the best ceil(n_k/eta)
 *           of them (lowest loss, the lower trial number on ties) go on:
 *           --resume from their checkpoint with --stop-after r(k+1), to
 *           the model bit for bit of a run trained straight to r(k+1)
 *           (checkpoint.h); the others are stopped;
 *   last    the trials that reach E finish as a plain search's do.
 * A trial that patience ends before its rung is finished there ("ok") and
 * takes no part in the rankings after; one that fails at a rung ("failed")
 * goes no further.
 *
 * trials.jsonl gets a line per trial and rung as it is scored ("rung", and
 * "epochs" with it; status "rung" below the last rung, "ok" or "failed"),
 * and, after each ranking, a "stopped" line for each trial it stops (its
 * score at that rung; in one write).  A rerun skips what the file holds,
 * writes a ranking's stops if they are missing and continues the trials
 * still in the race from their checkpoints, so an interrupted search ends
 * with the file of the search never interrupted (lines in the same order
 * with --jobs 1).  best.ini is the best trial that reached E.
 */
#include "hpopt/hpopt_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RUNGS 40

typedef struct {
    int    done;    /* a line for the trial at this rung */
    int    state;   /* HP_RUNG, HP_OK, HP_FAILED         */
    double val, test, loss, seconds;
} rung_rec;

struct mp_hp_halving {
    int       epochs, eta, min_epochs;
    int       n_rungs;
    int       rung_epochs[MAX_RUNGS];   /* ascending; the last is epochs     */
    rung_rec *rec;                      /* trials x n_rungs                  */
    int      *stopped;                  /* per trial: the rung of its stop   *
                                         * line (-1: none)                   */
    int      *race, *next;              /* trials of the rung, of the next   */
};

static rung_rec *rec_of(const search *S, int i, int k)
{
    return &S->h->rec[(size_t)i * (size_t)S->h->n_rungs + (size_t)k];
}

int mp_hp_halving_epochs(const search *S)
{
    return S->h ? S->h->epochs : 0;
}

mp_status mp_hp_halving_open(search *S)
{
    const mp_hpopt_args *a = S->a;
    if (mp_options_is_set(S->base, "stop-after") || mp_options_is_set(S->base, "resume"))
        return mp_error_set(MP_ERR_ARG, "--halving sets each trial's --stop-after and --resume "
                            "itself: leave them out");
    const char *text = mp_options_get(S->base, "epochs");
    char *end;
    long E = text ? strtol(text, &end, 10) : 0;
    if (!text || *end || E < 1 || E > 100000)
        return mp_error_set(MP_ERR_ARG, "--halving: --epochs '%s' is not a number of epochs",
                            text ? text : "");
    int eta = a->halving_eta;
    long R = a->halving_min > 0 ? a->halving_min : E / ((long)eta * eta);
    if (R < 1)
        R = 1;
    int stops[MAX_RUNGS], n = 0;
    for (long v = E / eta; v >= R && n < MAX_RUNGS - 1; v /= eta)
        stops[n++] = (int)v;
    if (n == 0)
        return mp_error_set(MP_ERR_ARG, "--halving: no rung below --epochs %ld (the rungs are "
                            "epochs/eta^k, eta %d, of at least %ld epochs, --halving-min-epochs): "
                            "give more --epochs, a smaller --halving-eta or a smaller "
                            "--halving-min-epochs", E, eta, R);
    mp_hp_halving *h = mp_calloc(1, sizeof *h);
    size_t N = (size_t)a->trials;
    if (h) {
        h->rec = mp_calloc(N * (size_t)(n + 1), sizeof *h->rec);
        h->stopped = mp_malloc(sizeof(int) * N);
        h->race = mp_malloc(sizeof(int) * N);
        h->next = mp_malloc(sizeof(int) * N);
    }
    S->h = h;
    if (!h || !h->rec || !h->stopped || !h->race || !h->next)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    h->epochs = (int)E;
    h->eta = eta;
    h->min_epochs = (int)R;
    h->n_rungs = n + 1;
    for (int k = 0; k < n; k++)
        h->rung_epochs[k] = stops[n - 1 - k];
    h->rung_epochs[n] = (int)E;
    for (size_t i = 0; i < N; i++)
        h->stopped[i] = -1;
    return MP_OK;
}

void mp_hp_halving_free(search *S)
{
    mp_hp_halving *h = S->h;
    if (!h)
        return;
    mp_free(h->rec);
    mp_free(h->stopped);
    mp_free(h->race);
    mp_free(h->next);
    mp_free(h);
    S->h = NULL;
}

static int number(const cJSON *o, const char *key, double *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j))
        return 0;
    *v = j->valuedouble;
    return 1;
}

/* The trial's record (what its next line says) from its rung k. */
static void set_latest(search *S, int i, int k, int state)
{
    const rung_rec *r = rec_of(S, i, k);
    trial_rec *t = &S->t[i];
    t->rung = k;
    t->epochs = S->h->rung_epochs[k];
    t->state = state;
    t->failed = r->state == HP_FAILED;
    t->val = r->val;
    t->test = r->test;
    t->loss = r->loss;
    t->seconds = r->seconds;
    t->done = state == HP_OK || state == HP_FAILED;
}

void mp_hp_halving_load(search *S, int i, const cJSON *o, int status, const char **why)
{
    mp_hp_halving *h = S->h;
    double rk, ep;
    if (!number(o, "rung", &rk) || rk != floor(rk) || rk < 0 || rk >= h->n_rungs) {
        *why = "no rung of this search";
        return;
    }
    int k = (int)rk;
    rung_rec *r = rec_of(S, i, k);
    if (!number(o, "epochs", &ep) || ep != h->rung_epochs[k]) {
        *why = "its epochs are not its rung's";
        return;
    }
    if (status == HP_STOPPED) {   /* after its rung's line, once */
        if (!r->done || r->state != HP_RUNG || h->stopped[i] >= 0)
            *why = "a stop without its rung's line";
        else {
            h->stopped[i] = k;
            set_latest(S, i, k, HP_STOPPED);
        }
        return;
    }
    if (r->done)
        *why = "a rung given twice";
    else if (k > 0 && !(rec_of(S, i, k - 1)->done && rec_of(S, i, k - 1)->state == HP_RUNG))
        *why = "a rung before the trial went on from the one before";
    else if (h->stopped[i] >= 0)
        *why = "a rung after the trial's stop";
    else if (status == HP_RUNG && k == h->n_rungs - 1)
        *why = "status rung at the last rung (ok or failed)";
    else if (status != HP_FAILED && !(number(o, "val", &r->val) && number(o, "loss", &r->loss)))
        *why = "a scored trial without val and loss";
    if (*why)
        return;
    if (!number(o, "test", &r->test))
        r->test = NAN;
    if (!number(o, "seconds", &r->seconds))
        r->seconds = 0;
    if (status == HP_FAILED)
        r->val = r->test = r->loss = NAN;
    r->done = 1;
    r->state = status;
    set_latest(S, i, k, status);
}

/* Trains jobs[0..n) and files each trained one's score at its rung. */
static mp_status run_round(search *S, job *jobs, pthread_t *th, int n)
{
    mp_status st = mp_hp_run_jobs(S, jobs, th, n);
    for (int j = 0; j < n; j++) {
        const trial_rec *t = &S->t[jobs[j].i];
        if (jobs[j].st)
            continue;
        rung_rec *r = rec_of(S, jobs[j].i, jobs[j].rung);
        r->done = 1;
        r->state = t->failed ? HP_FAILED : t->state;
        r->val = t->val;
        r->test = t->test;
        r->loss = t->loss;
        r->seconds = t->seconds;
    }
    return st;
}

/* Trials out of the race (finished, failed, stopped): --keep best keeps
 * the best finished one's folder, none nothing; a finished trial's
 * checkpoint goes (a stopped one's stays with --keep all: `train --resume`
 * continues it). */
static void prune(search *S, const int *race, int n_race)
{
    int keep = S->a->keep, best = keep == MP_HP_KEEP_BEST ? mp_hp_best_trial(S) : -1;
    char dir[1200], path[1300];
    for (int i = 0; i < S->a->trials; i++) {
        int in = 0;
        for (int j = 0; j < n_race && !in; j++)
            in = race[j] == i;
        if (in || !S->t[i].seen)
            continue;
        mp_hp_trial_dir(S->a, i, dir, sizeof dir);
        if (keep != MP_HP_KEEP_ALL && i != best) {
            mp_hp_remove_tree(dir);
        } else if (S->t[i].done) {
            snprintf(path, sizeof path, "%s/checkpoint.mpc", dir);
            (void)unlink(path);
        }
    }
}

/* Sorts trials[0..n) by their loss at rung k, the lower number on ties. */
static void rank(const search *S, int *trials, int n, int k)
{
    for (int a = 1; a < n; a++) {
        int t = trials[a], b = a;
        double l = rec_of(S, t, k)->loss;
        for (; b > 0; b--) {
            int u = trials[b - 1];
            double m = rec_of(S, u, k)->loss;
            if (m < l || (m == l && u < t))
                break;
            trials[b] = u;
        }
        trials[b] = t;
    }
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The ranking of rung k over the trials of h->race: h->next gets those that
 * go on (ascending), the stops are filed. */
static mp_status rank_rung(search *S, int k, int n_race, int *n_next)
{
    mp_hp_halving *h = S->h;
    int n_c = 0, *cand = h->next;
    for (int j = 0; j < n_race; j++)
        if (rec_of(S, h->race[j], k)->state == HP_RUNG)
            cand[n_c++] = h->race[j];
    rank(S, cand, n_c, k);
    int keep = (n_race + h->eta - 1) / h->eta;
    keep = keep < n_c ? keep : n_c;
    /* a stop in the file is this ranking's */
    for (int j = 0; j < n_c; j++)
        if (j < keep ? h->stopped[cand[j]] == k
                     : h->stopped[cand[j]] >= 0 && h->stopped[cand[j]] != k)
            return mp_error_set(MP_ERR_FORMAT, "%s: trial %d is stopped at rung %d, but this "
                                "search's ranking %s it at rung %d (was the file edited?)",
                                S->path, cand[j], h->stopped[cand[j]], j < keep ? "keeps" : "stops",
                                k);
    /* the stops the file does not hold yet, in trial order, in one write */
    int *write = mp_malloc(sizeof(int) * (size_t)(n_c + 1)), n_w = 0;
    if (!write)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (int j = keep; j < n_c; j++)
        if (h->stopped[cand[j]] < 0)
            write[n_w++] = cand[j];
    qsort(write, (size_t)n_w, sizeof *write, cmp_int);
    for (int j = 0; j < n_w; j++)
        set_latest(S, write[j], k, HP_STOPPED);
    mp_status st = mp_hp_append_trials(S, write, n_w);
    for (int j = 0; j < n_w && !st; j++)
        h->stopped[write[j]] = k;
    if (!st && !S->quiet && n_c > 0) {
        pthread_mutex_lock(&S->lock);
        fprintf(stderr, "hpopt: rung %d (%d epochs): %d of %d trials go on to %d epochs\n", k,
                h->rung_epochs[k], keep, n_race, h->rung_epochs[k + 1]);
        pthread_mutex_unlock(&S->lock);
    }
    mp_free(write);
    qsort(cand, (size_t)keep, sizeof *cand, cmp_int);
    *n_next = keep;
    return st;
}

mp_status mp_hp_halving_run(search *S, const mp_hp_proposer *p, double *xs, double *losses,
                            job *jobs, pthread_t *th)
{
    mp_hp_halving *h = S->h;
    int N = S->a->trials, J = S->a->jobs;
    mp_status st = MP_OK;
    /* rung 0: every trial, proposed in rounds from the rung-0 scores */
    for (int r0 = 0; r0 < N && !st; r0 += J) {
        int r1 = r0 + J < N ? r0 + J : N, n_run = 0;
        if (mp_interrupt_check())
            return mp_hp_interrupted(S, -1);
        for (int i = 0; i < r0; i++)
            losses[i] = rec_of(S, i, 0)->state == HP_FAILED ? NAN : rec_of(S, i, 0)->loss;
        for (int i = r0; i < r1 && !st; i++)
            if (!(st = mp_hp_propose_trial(S, p, xs, losses, r0, i)) && !rec_of(S, i, 0)->done)
                jobs[n_run++] = (job){ .S = S, .i = i, .rung = 0,
                                       .stop_after = h->rung_epochs[0] };
        if (!st)
            st = run_round(S, jobs, th, n_run);
    }
    int n_race = N;
    for (int i = 0; i < N; i++)
        h->race[i] = i;
    for (int k = 0; !st && k + 1 < h->n_rungs; k++) {
        int n_next = 0;
        if ((st = rank_rung(S, k, n_race, &n_next)))
            break;
        int *t = h->race;   /* the next rung's trials become the race */
        h->race = h->next;
        h->next = t;
        n_race = n_next;
        prune(S, h->race, n_race);
        /* rung k + 1: on from the checkpoints, in rounds of --jobs */
        for (int j0 = 0; j0 < n_race && !st;) {
            int n_run = 0;
            if (mp_interrupt_check())
                return mp_hp_interrupted(S, -1);
            for (; j0 < n_race && n_run < J; j0++)
                if (!rec_of(S, h->race[j0], k + 1)->done)
                    jobs[n_run++] = (job){ .S = S, .i = h->race[j0], .rung = k + 1,
                                           .stop_after = h->rung_epochs[k + 1], .resume = 1 };
            st = run_round(S, jobs, th, n_run);
        }
    }
    if (!st)
        prune(S, NULL, 0);
    return st;
}
