/*
 * members.c - ensemble members one after another or side by side in
 * threads (members.h): a queue of members, K worker threads taking the
 * next one, each member trained by fit.c's epoch loop on the worker's own
 * backend instance (device) or share of the threads (cpu).
 */
#include "run/members.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int mp_members_jobs(int requested, int n, const mp_backend *b, int threads)
{
    int k = requested > 0 ? requested : (b && !b->host_memory) ? n : threads;
    if (k > n)
        k = n;
    return k > 0 ? k : 1;
}

/* ===================================================================== */
/* The runner                                                             */
/* ===================================================================== */

typedef struct {
    const mp_members_opts *mo;
    mp_train_opts          o;        /* the run's options, on_epoch ours       */
    pthread_mutex_t        lock;
    int                    next;     /* the queue: members[next] is next      */
    int                    cancel;   /* set on the first failure (atomic)     */
    mp_status              st;       /* the first failure ...                 */
    char                   msg[2048];/* ... and its message                   */
    double                 t0;
    int                    lines;    /* print a line per member epoch         */
    struct worker_arg     *wa;       /* the workers (cpu: their thread counts) */
    int                    jobs;
} runner;

static long threads_given;   /* mp_members_threads_given */

long mp_members_threads_given(void) { return __atomic_load_n(&threads_given, __ATOMIC_RELAXED); }

/* Keeps the first failure; the others stop at their next epoch. */
static void fail(runner *R, mp_status st)
{
    pthread_mutex_lock(&R->lock);
    if (R->st == MP_OK) {
        R->st = st;
        snprintf(R->msg, sizeof R->msg, "%s", mp_error_message());
    }
    pthread_mutex_unlock(&R->lock);
    __atomic_store_n(&R->cancel, 1, __ATOMIC_RELEASE);
}

static const mp_fit_state *state_of(const mp_members_opts *mo, int k)
{
    for (int i = 0; i < mo->n_states; i++)
        if (mo->states[i].k == k)
            return &mo->states[i];
    return NULL;
}

/* The run's epoch callback, serialized, after the member's line. */
static void on_epoch(void *arg, int member, int epoch, double loss, double val)
{
    runner *R = arg;
    const mp_fit_ctx *c = R->mo->c;
    pthread_mutex_lock(&R->lock);
    if (R->lines)
        fprintf(stderr, "member %d/%d epoch %d/%d: loss %.6g  val %s %.6g  (%.1f s)\n",
                member + 1, c->e->n_members, epoch, R->o.epochs, loss,
                mp_metric_name(c->metric), val, mp_time_now() - R->t0);
    if (c->o->on_epoch)
        c->o->on_epoch(c->o->on_epoch_arg, member, epoch, loss, val);
    pthread_mutex_unlock(&R->lock);
}

/* The run's checkpoint hook, serialized (it writes one file of all members). */
static mp_status on_checkpoint(void *arg, const mp_fit_state *s)
{
    runner *R = arg;
    pthread_mutex_lock(&R->lock);
    mp_status st = R->mo->c->checkpoint(R->mo->c->checkpoint_arg, s);
    if (st) {
        /* the message is this thread's: keep it with the status */
        if (R->st == MP_OK) {
            R->st = st;
            snprintf(R->msg, sizeof R->msg, "%s", mp_error_message());
        }
    }
    pthread_mutex_unlock(&R->lock);
    return st;
}

static mp_status end_member(runner *R, int k, mp_status st)
{
    const mp_members_opts *mo = R->mo;
    if (!mo->end)
        return st;
    pthread_mutex_lock(&R->lock);
    mp_status se = mo->end(mo->arg, k, st);
    pthread_mutex_unlock(&R->lock);
    return st ? st : se;
}

/* One after another on this thread: the loop trainer.c always had. */
static mp_status run_in_turn(runner *R)
{
    const mp_members_opts *mo = R->mo;
    mp_fit_ctx c = *mo->c;
    mp_status st = MP_OK;
    for (int i = 0; st == MP_OK && i < mo->n; i++) {
        int k = mo->members[i];
        c.resume = state_of(mo, k);
        if (mo->begin)
            mo->begin(mo->arg, k);
        st = mp_fit_member(&c, k, NULL, &mo->best_epoch[k]);
        st = end_member(R, k, st);
    }
    return st;
}

/* A worker: its backend (the run's on the host, its own instance on a
 * device), then members from the queue until it is empty or a member
 * failed. */
typedef struct worker_arg {
    runner *R;
    int     threads;   /* cpu: its regions' count (mp_threads_follow), raised
                        * when another worker runs out of members */
    int     busy;      /* still taking members (under R->lock) */
} worker_arg;

/* A cpu worker that found the queue empty gives its threads to the busy
 * worker with the fewest (the cpu backend's results do not depend on the
 * count, so a member may gain threads mid-run): the last members of an
 * ensemble of 5 on 2 threads do not run on one thread beside an idle one. */
static void give_threads(runner *R, worker_arg *w)
{
    pthread_mutex_lock(&R->lock);
    w->busy = 0;
    worker_arg *to = NULL;
    for (int j = 0; j < R->jobs; j++)
        if (R->wa[j].busy && (!to || __atomic_load_n(&R->wa[j].threads, __ATOMIC_RELAXED) <
                                         __atomic_load_n(&to->threads, __ATOMIC_RELAXED)))
            to = &R->wa[j];
    if (to) {
        int n = __atomic_exchange_n(&w->threads, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&to->threads, n, __ATOMIC_RELAXED);
        __atomic_add_fetch(&threads_given, n, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&R->lock);
}

/* The device's share of backend b for the members (set_share, ops.h). */
static mp_status share(mp_backend *b, int n)
{
    return b->set_share && n > 1 ? b->set_share(b, n) : MP_OK;
}

static mp_status train_on(runner *R, mp_backend *b, int k)
{
    const mp_members_opts *mo = R->mo;
    mp_ensemble *e = mo->c->e;
    mp_model *m = e->members[k];
    mp_ensemble view = *e;   /* the member's validation: its backend, its buffers */
    view.backend = b;
    view.stream_bufs = NULL;
    mp_fit_ctx c = *mo->c;
    c.o = &R->o;
    c.e = &view;
    c.progress = NULL;
    c.resume = state_of(mo, k);
    c.cancel = &R->cancel;
    if (c.checkpoint) {
        c.checkpoint = on_checkpoint;
        c.checkpoint_arg = R;
    }
    mp_status st = b == e->backend ? MP_OK : mp_model_rebind(m, b);
    if (st)
        return st;
    if (mo->begin) {
        pthread_mutex_lock(&R->lock);
        mo->begin(mo->arg, k);
        pthread_mutex_unlock(&R->lock);
    }
    st = mp_fit_member(&c, k, NULL, &mo->best_epoch[k]);
    mp_status s2 = b->sync(b);   /* nothing of the member pending on b */
    st = st ? st : s2;
    st = end_member(R, k, st);
    mp_ensemble_predict_release(&view);
    if (b != e->backend)
        (void)mp_model_rebind(m, e->backend);
    if (R->lines && st == MP_OK) {
        pthread_mutex_lock(&R->lock);
        fprintf(stderr, "member %d/%d done: best epoch %d  (%.1f s)\n", k + 1, e->n_members,
                mo->best_epoch[k], mp_time_now() - R->t0);
        pthread_mutex_unlock(&R->lock);
    }
    return st;
}

static void *worker(void *p)
{
    worker_arg *w = p;
    runner *R = w->R;
    mp_backend *run_b = R->mo->c->e->backend, *b = run_b;
    mp_status st = MP_OK;
    if (run_b->host_memory)
        mp_threads_follow(&w->threads);
    else if ((st = mp_backend_open(&b, run_b->name)) == MP_OK)
        st = share(b, R->mo->share);
    if (st) {
        fail(R, st);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&R->lock);
        int i = R->next < R->mo->n && R->st == MP_OK ? R->next++ : -1;
        pthread_mutex_unlock(&R->lock);
        if (i < 0)
            break;
        if ((st = train_on(R, b, R->mo->members[i]))) {
            fail(R, st);
            break;
        }
    }
    if (run_b->host_memory)
        give_threads(R, w);
    if (b != run_b)
        mp_backend_close(b);
    mp_threads_follow(NULL);
    return NULL;
}

static mp_status fit_members(const mp_members_opts *mo);

mp_status mp_fit_members(const mp_members_opts *mo)
{
    /* The run's backend takes the members' share while they train (one
     * after another they run on it), the whole device again after. */
    mp_backend *b = mo->c->e->backend;
    mp_status st = share(b, mo->share);
    if (st == MP_OK)
        st = fit_members(mo);
    if (mo->share > 1 && b->set_share) {
        mp_status s2 = b->set_share(b, 1);
        st = st ? st : s2;
    }
    return st;
}

static mp_status fit_members(const mp_members_opts *mo)
{
    runner R;
    memset(&R, 0, sizeof R);
    R.mo = mo;
    R.o = *mo->c->o;
    R.t0 = mp_time_now();
    int jobs = mo->jobs < mo->n ? mo->jobs : mo->n;
    if (jobs <= 1)
        return run_in_turn(&R);
    R.o.on_epoch = on_epoch;
    R.o.on_epoch_arg = &R;
    R.lines = mo->c->progress != NULL && !mo->c->o->quiet;
    mp_backend *b = mo->c->e->backend;
    /* what the members' set-up queued (parameters uploaded, transfer) is
     * done before other streams read it */
    mp_status st = b->sync(b);
    if (st)
        return st;
    pthread_mutex_init(&R.lock, NULL);
    pthread_t *th = mp_calloc((size_t)jobs, sizeof *th);
    worker_arg *wa = mp_calloc((size_t)jobs, sizeof *wa);
    int started = 0;
    if (!th || !wa) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory starting %d members", jobs);
    } else {
        R.wa = wa;
        R.jobs = jobs;
        int total = mo->threads > 0 ? mo->threads : 1;
        if (R.lines)
            fprintf(stderr, "ensemble: %d members, %d side by side%s\n", mo->n, jobs,
                    b->host_memory ? "" : " (one stream each)");
        for (int j = 0; j < jobs; j++) {
            /* the threads split as evenly as they go, at least one each */
            int share = total / jobs + (j < total % jobs);
            wa[j] = (worker_arg){ .R = &R, .threads = share > 0 ? share : 1, .busy = 1 };
        }
        for (int j = 0; j < jobs; j++) {
            if (pthread_create(&th[j], NULL, worker, &wa[j]) != 0) {
                pthread_mutex_lock(&R.lock);
                for (int k = j; k < jobs; k++)
                    wa[k].busy = 0;
                pthread_mutex_unlock(&R.lock);
                fail(&R, mp_error_set(MP_ERR_INTERNAL, "cannot start ensemble member thread %d",
                                      j + 1));
                break;
            }
            started++;
        }
    }
    for (int j = 0; j < started; j++)
        pthread_join(th[j], NULL);
    mp_free(th);
    mp_free(wa);
    pthread_mutex_destroy(&R.lock);
    if (st)
        return st;
    if (R.st)
        return mp_error_set(R.st, "%s", R.msg);
    return MP_OK;
}
