/*
 * queue.c - a random search's trials as a queue (hpopt.c runs it when no
 * proposal reads a result: --method random without --halving, --jobs > 1):
 * every trial proposed up front, handed out the costliest first to --jobs
 * workers, each taking the next one as it finishes one; those that ran out
 * of memory beside others trained again alone at the end.
 */
#include "hpopt/hpopt_int.h"

#include "run/trainer.h"

#include <stdio.h>
#include <string.h>

/* Trial i's rough cost, to hand out the longest trials first (a queue
 * that ends on one long trial started late waits for it alone): the
 * D-MPNN's and the head's multiply-adds per atom of a training epoch
 * (about 2.2 directed bonds and 1/25 of a molecule an atom: W_i over the
 * 147 bond columns, W_h at each of depth - 1 steps, W_o over 133 + h), and
 * on a GPU a step's fixed cost (about 250 us at 150 T multiply-adds a
 * second, 3.75e10, over 25 x batch atoms), times the epochs.  Only the
 * order depends on it, never a trial's result.  -1: options it cannot read
 * (the trial fails later, with the message). */
static double trial_cost(const search *S, int i, int gpu)
{
    const mp_hp_space *sp = S->space;
    mp_options *o = NULL;
    char text[64];
    mp_status st = mp_options_copy(&o, S->base);
    for (int k = 0; !st && k < sp->n; k++) {
        mp_hp_value_text(&sp->dims[k], S->t[i].x[k], text, sizeof text);
        st = mp_options_set_from(o, sp->dims[k].key, text, sp->path);
    }
    mp_train_opts t = mp_train_opts_default();
    if (!st)
        st = mp_options_apply(o, &t);
    mp_options_free(o);
    if (st) {
        mp_error_clear();
        return -1;
    }
    double h = t.hidden, d = t.depth, fh = t.ffn_hidden > 0 ? t.ffn_hidden : h;
    double atom = 2.2 * h * (147 + h * (d - 1)) + h * (133 + h) +
                  (h * fh + (t.ffn_layers - 1) * fh * fh) / 25;
    double step = gpu ? 3.75e10 / (25.0 * (t.batch_size > 0 ? t.batch_size : 50)) : 0;
    double runs = (double)(t.epochs > 0 ? t.epochs : 1) *
                  (t.ensemble_size > 0 ? t.ensemble_size : 1);
    return (3 * atom + step) * runs;
}

/* The trials not done, the costliest first (ties: the lower index). */
static void queue_order(const search *S, int *order, int *n_order)
{
    const int gpu = mp_hp_on_gpu(S->base);
    double *cost = mp_calloc((size_t)S->a->trials, sizeof *cost);
    int n = 0;
    for (int i = 0; i < S->a->trials; i++) {
        if (S->t[i].done)
            continue;
        double c = cost ? trial_cost(S, i, gpu) : 0;
        int j = n++;
        for (; j > 0 && cost && c > cost[order[j - 1]]; j--)   /* stable: the index breaks ties */
            order[j] = order[j - 1];
        order[j] = i;
        if (cost)
            cost[i] = c;
    }
    mp_free(cost);
    *n_order = n;
}

/* What the workers share; every field past `S` under S->lock. */
typedef struct {
    search        *S;
    const int     *order;    /* the trials to train, in the order handed out */
    int            n_order;
    int            next;     /* the next of order[] to hand out             */
    int            stop;     /* a failure or a signal: hand out no more     */
    int            fail;     /* the first failing trial (in time), -1       */
    mp_status      fail_st;
    char           fail_msg[1024];
    unsigned char *fin;      /* fin[i]: trial i's record is complete        */
    int           *again;    /* trials to train again alone at the end      */
    int            n_again;
    unsigned char *gone;     /* gone[i]: its folder was pruned              */
} queue;

typedef struct {
    queue *q;
    job    j;
} worker;

/* --keep best | none as trials finish (under the lock): every finished
 * trial's folder but the best one's so far (ties: the lower index, as
 * mp_hp_best_trial; a pruned trial never becomes the best again). */
static void prune_finished(queue *q)
{
    search *S = q->S;
    if (S->a->keep == MP_HP_KEEP_ALL)
        return;
    int best = -1;
    for (int i = 0; S->a->keep == MP_HP_KEEP_BEST && i < S->a->trials; i++)
        if (q->fin[i] && S->t[i].done && !S->t[i].failed &&
            (best < 0 || S->t[i].loss < S->t[best].loss))
            best = i;
    char dir[1200];
    for (int i = 0; i < S->a->trials; i++)
        if (q->fin[i] && !q->gone[i] && i != best) {
            mp_hp_trial_dir(S->a, i, dir, sizeof dir);
            mp_hp_remove_tree(dir);
            q->gone[i] = 1;
        }
}

static void *queue_worker(void *arg)
{
    worker *w = arg;
    queue *q = w->q;
    search *S = q->S;
    for (;;) {
        pthread_mutex_lock(&S->lock);
        if (!q->stop && mp_interrupt_check()) {   /* a stop between two trials */
            q->stop = 1;
            if (q->fail < 0) {
                q->fail_st = MP_ERR_INTERRUPTED;
                q->fail_msg[0] = '\0';
            }
        }
        int i = q->stop || q->next >= q->n_order ? -1 : q->order[q->next++];
        if (i >= 0) {   /* the count it follows stays the worker's (others raise it) */
            int threads = w->j.threads;
            w->j = (job){ .S = S, .i = i, .beside = 1, .threads = threads, .busy = 1 };
        }
        pthread_mutex_unlock(&S->lock);
        if (i < 0) {   /* the queue is empty: its threads to the trials still running */
            mp_hp_give_threads(S, &w->j);
            return NULL;
        }
        mp_hp_run_trial(&w->j);
        pthread_mutex_lock(&S->lock);
        if (w->j.again && !w->j.st) {
            q->again[q->n_again++] = i;
            pthread_mutex_unlock(&S->lock);
            continue;
        }
        q->fin[i] = 1;
        if (w->j.st && !q->stop) {
            q->stop = 1;
            q->fail = i;
            q->fail_st = w->j.st;
            snprintf(q->fail_msg, sizeof q->fail_msg, "%s", w->j.error);
        }
        prune_finished(q);
        pthread_mutex_unlock(&S->lock);
    }
}

/* The trials not yet done, proposed up front (random: each from its own
 * stream), then trained by --jobs workers (one on this thread). */
mp_status mp_hp_run_queue(search *S, const mp_hp_proposer *p, const double *xs,
                           double *losses)
{
    const int n = S->a->trials, nw = S->a->jobs;
    mp_status st = MP_OK;
    for (int i = 0; i < n && !st; i++)
        st = mp_hp_propose_trial(S, p, xs, losses, 0, i);
    if (st)
        return st;
    queue q = { .S = S, .fail = -1 };
    worker *w = mp_calloc((size_t)nw, sizeof *w);
    pthread_t *th = mp_calloc((size_t)nw, sizeof *th);
    int *order = mp_calloc((size_t)n, sizeof *order);
    q.fin = mp_calloc((size_t)n, 1);
    q.gone = mp_calloc((size_t)n, 1);
    q.again = mp_calloc((size_t)n, sizeof *q.again);
    if (!w || !th || !order || !q.fin || !q.gone || !q.again) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        q.fin[i] = (unsigned char)S->t[i].done;   /* a rerun's trials */
    queue_order(S, order, &q.n_order);
    q.order = order;
    job **group = mp_calloc((size_t)nw, sizeof *group);
    if (!group) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int k = 0; k < nw; k++) {   /* each on its share of the cpu, as rounds are */
        w[k].j.threads = S->threads;
        w[k].j.busy = 1;
        group[k] = &w[k].j;
    }
    pthread_mutex_lock(&S->lock);
    S->group = group;
    S->n_group = nw;
    pthread_mutex_unlock(&S->lock);
    for (int k = 1; k < nw; k++) {
        w[k].q = &q;
        if (pthread_create(&th[k], NULL, queue_worker, &w[k]) != 0) {
            th[k] = 0;   /* fewer workers: the queue still empties */
            mp_hp_give_threads(S, &w[k].j);
        }
    }
    w[0].q = &q;
    queue_worker(&w[0]);
    for (int k = 1; k < nw; k++)
        if (th[k])
            pthread_join(th[k], NULL);
    pthread_mutex_lock(&S->lock);
    S->group = NULL;
    S->n_group = 0;
    pthread_mutex_unlock(&S->lock);
    mp_free(group);
    /* those that ran out of memory beside others, one at a time */
    for (int k = 0; k < q.n_again && !q.stop; k++) {
        job j = { .S = S, .i = q.again[k] };
        mp_hp_train_again_alone(&j);
        if (j.st) {
            q.stop = 1;
            q.fail = j.i;
            q.fail_st = j.st;
            snprintf(q.fail_msg, sizeof q.fail_msg, "%s", j.error);
        }
    }
    if (q.fail_st == MP_ERR_INTERRUPTED)
        st = mp_hp_interrupted(S, q.fail);
    else if (q.fail_st)
        st = mp_error_set(q.fail_st, "%s", q.fail_msg);
out:
    mp_free(q.again);
    mp_free(q.gone);
    mp_free(q.fin);
    mp_free(order);
    mp_free(th);
    mp_free(w);
    return st;
}
