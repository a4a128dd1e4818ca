/*
 * bench.c - `molprop bench`: the grid of Yang et al. 2019's comparison
 * (datasets x model variants x seeds, scaffold-balanced splits, the paper's
 * metric per dataset), run as a product: every dataset read and featurized
 * once (the feature cache keeps it for later invocations), every finished
 * run appended to the results file at once (a rerun skips what is there),
 * the next dataset prepared while this one trains, and independent runs
 * trained side by side, each with its own backend (bench.h has the map).
 *
 * Threads: one prepares datasets in grid order, at most one ahead of those
 * being trained; `jobs` workers take the runs in grid order, each run as
 * mp_train would do it alone (inputs borrowed from the prepared dataset,
 * its own backend, so on the GPU its own stream), so a row is the same
 * whether it ran alone or beside others.  The first failure stops the
 * grid; the rows already appended stay.
 *
 * Interruption: a signal handler calls mp_bench_signal_cleanup (molprop.h)
 * and exits: appended rows are whole, temporary files are gone, the runs in
 * flight are run again next time.  Once the library has a stop flag that
 * mp_train polls between steps, the workers check it before taking a run
 * (take_job) and the preparing thread before each dataset (prep_main).
 */
#include "bench/bench.h"

#include "core/progress.h"
#include "api/api.h"
#include "run/trainer.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LIVE 2   /* prepared datasets held at once: the one training, the next */

/* A run's cost relative to a D-MPNN run on the same dataset, for the ETA:
 * an FFN's epoch is a few small products per batch (measured on the CPU:
 * about a tenth). */
static double model_weight(const mp_bench_variant *v)
{
    return v->kind == MP_MODEL_DMPNN ? 1.0 : 0.1;
}

enum { JOB_DONE_BEFORE = -1, JOB_PENDING = 0, JOB_RUNNING, JOB_DONE };
enum { DS_IDLE = 0, DS_PREPARING, DS_READY, DS_FREED };

typedef struct {
    int ds, var, k;          /* dataset, variant, seed index of the grid */
    int state;
} job;

typedef struct {
    int               state;
    int               pending;     /* jobs not yet finished              */
    int               need;        /* has jobs to run, or splits to export */
    mp_bench_prepared p;
    char              sha256[65];
    char              settings[17];
    double            work;        /* rows x epochs (for the ETA: a run's share is *
                                    * this times its model's weight)             */
} ds_state;

typedef struct {
    mp_bench_grid   *g;
    FILE            *out;
    int              tty;
    job             *jobs;
    int              n_jobs, n_pending, n_running, n_done;
    ds_state         ds[MP_BENCH_MAX_LIST];
    int              live;          /* datasets prepared and not yet freed */
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    mp_status        err;
    char             errmsg[2048];
    int              fd;
    double           t0, work_total, work_done;
    mp_bench_row    *rows;          /* finished now */
    size_t           n_rows;
} pool;

/* ===================================================================== */
/* Output                                                                 */
/* ===================================================================== */

static void say(pool *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(pool *P, const char *fmt, ...)
{
    if (!P->out)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (P->tty)
        fputs("\r\033[K", P->out);
    vfprintf(P->out, fmt, ap);
    va_end(ap);
    fflush(P->out);
}

/* On a terminal: a status line under the output, redrawn. */
static void status_line(pool *P)
{
    if (!P->out || !P->tty)
        return;
    char el[32], eta[32], running[256] = "";
    size_t k = 0;
    for (int i = 0; i < P->n_jobs && k + 40 < sizeof running; i++)
        if (P->jobs[i].state == JOB_RUNNING) {
            const job *j = &P->jobs[i];
            k += (size_t)snprintf(running + k, sizeof running - k, "%s%s/%s/%ld", k ? ", " : "",
                                  P->g->ds[j->ds].name, P->g->var[j->var]->name,
                                  P->g->seeds[j->k]);
        }
    double t = mp_time_now() - P->t0;
    double left = P->work_done > 0 ? t * (P->work_total - P->work_done) / P->work_done : NAN;
    fprintf(P->out, "\r\033[K%d/%d runs, %s elapsed, ETA %s%s%s", P->n_done, P->n_jobs,
            mp_format_duration(el, sizeof el, t), mp_format_duration(eta, sizeof eta, left),
            k ? "  running " : "", running);
    fflush(P->out);
}

/* ===================================================================== */
/* The grid's jobs                                                        */
/* ===================================================================== */

static int row_matches(const mp_bench_row *r, const char *ds, const char *model, long seed)
{
    return !strcmp(r->tool, "molprop") && !strcmp(r->dataset, ds) && !strcmp(r->model, model) &&
           r->seed == seed;
}

/* The jobs of the grid, those already in the results marked done.  A row of
 * the same run with other settings is an error: one results file, one
 * configuration. */
static mp_status make_jobs(pool *P, const mp_bench_row *old, size_t n_old)
{
    mp_bench_grid *g = P->g;
    P->n_jobs = g->n_ds * g->n_var * g->n_seeds;
    if (!(P->jobs = mp_calloc((size_t)P->n_jobs, sizeof *P->jobs)))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int d = 0; d < g->n_ds; d++) {
        ds_state *s = &P->ds[d];
        mp_status st = mp_sha256_file(g->ds[d].path, s->sha256);
        if (st)
            return st;
        /* user column files: their content and the mode decide runs too */
        char key[400], csha[2][65] = { "", "" };
        const char *cpath[2] = { g->ds[d].atom_path, g->ds[d].bond_path };
        for (int k = 0; k < 2; k++)
            if (cpath[k] && (st = mp_sha256_file(cpath[k], csha[k])))
                return st;
        if (cpath[0] || cpath[1])
            snprintf(key, sizeof key, "%s\natoms=%s\natom_mode=%d\nbonds=%s", s->sha256,
                     csha[0], g->a.atom_mode, csha[1]);
        else
            snprintf(key, sizeof key, "%s", s->sha256);
        mp_bench_settings_hash(g, key, s->settings);
        long rows = g->ds[d].rows_hint > 0 ? g->ds[d].rows_hint : 1000;
        s->work = (double)rows * g->a.epochs;
        for (int v = 0; v < g->n_var; v++)
            for (int k = 0; k < g->n_seeds; k++) {
                job *j = &P->jobs[n++];
                *j = (job){ d, v, k, JOB_PENDING };
                for (size_t i = 0; i < n_old; i++) {
                    if (!row_matches(&old[i], g->ds[d].name, g->var[v]->name, g->seeds[k]))
                        continue;
                    if (strcmp(old[i].settings, s->settings))
                        return mp_error_set(MP_ERR_ARG,
                                            "%s already holds %s/%s/seed %ld with other settings "
                                            "(the data, column files, split, epochs, batch "
                                            "size or device differ): use another --out", g->results_path,
                                            g->ds[d].name, g->var[v]->name, g->seeds[k]);
                    j->state = JOB_DONE_BEFORE;
                }
                if (j->state == JOB_PENDING) {
                    s->pending++;
                    P->n_pending++;
                    P->work_total += s->work * model_weight(g->var[v]);
                }
            }
        s->need = s->pending > 0 || g->a.export_splits != NULL;
    }
    return MP_OK;
}

/* ===================================================================== */
/* Preparing datasets                                                     */
/* ===================================================================== */

static void fail(pool *P, mp_status st)
{
    if (!P->err) {
        P->err = st;
        snprintf(P->errmsg, sizeof P->errmsg, "%s", mp_error_message());
    }
    pthread_cond_broadcast(&P->cv);
}

static void *prep_main(void *arg)
{
    pool *P = arg;
    mp_bench_grid *g = P->g;
    for (int d = 0; d < g->n_ds; d++) {
        ds_state *s = &P->ds[d];
        pthread_mutex_lock(&P->mu);
        while (!P->err && P->live >= MAX_LIVE)
            pthread_cond_wait(&P->cv, &P->mu);
        int go = !P->err && s->need;
        if (go) {
            s->state = DS_PREPARING;
            P->live++;
        }
        pthread_mutex_unlock(&P->mu);
        if (!go) {
            if (P->err)
                break;
            continue;
        }
        mp_status st = mp_bench_prepare(&s->p, g, &g->ds[d], g->cache_dir);
        if (!st && g->a.export_splits)
            st = mp_bench_export_splits(&s->p, g, g->a.export_splits);
        pthread_mutex_lock(&P->mu);
        if (st) {
            fail(P, st);
        } else {
            s->state = DS_READY;
            /* the real size now: the ETA's total follows */
            double now = (double)s->p.n_valid * g->a.epochs;
            for (int i = 0; i < P->n_jobs; i++)
                if (P->jobs[i].ds == d && P->jobs[i].state != JOB_DONE_BEFORE)
                    P->work_total += (now - s->work) * model_weight(g->var[P->jobs[i].var]);
            s->work = now;
            if (!g->a.quiet)
                say(P, "prepared %s: %zu molecules (%zu invalid), features %s in %.1f s%s\n",
                    g->ds[d].name, s->p.d->n_rows, s->p.d->n_rows - s->p.n_valid,
                    s->p.cache_hit ? "from the cache" : "computed", s->p.seconds,
                    g->a.export_splits ? ", splits exported" : "");
            if (s->pending == 0) {   /* exported only */
                mp_bench_prepared_free(&s->p);
                s->state = DS_FREED;
                P->live--;
            }
            status_line(P);
        }
        pthread_cond_broadcast(&P->cv);
        pthread_mutex_unlock(&P->mu);
        if (st)
            break;
    }
    return NULL;
}

/* ===================================================================== */
/* Running one job                                                        */
/* ===================================================================== */

typedef struct {
    double *loss, *val;
    int     n, cap;
} curve;

static void on_epoch(void *arg, int member, int epoch, double loss, double val)
{
    curve *c = arg;
    if (member == 0 && epoch >= 1 && epoch <= c->cap) {
        c->loss[epoch - 1] = loss;
        c->val[epoch - 1] = val;
        if (epoch > c->n)
            c->n = epoch;
    }
}

static char *dup_or_null(const char *s, mp_status *st)
{
    char *d = mp_strdup(s);
    if (!d && !*st)
        *st = mp_error_set(MP_ERR_NOMEM, "out of memory");
    return d;
}

/* Trains job j (the pool unlocked) and fills row. */
static mp_status run_job(pool *P, const job *j, mp_bench_row *row)
{
    mp_bench_grid *g = P->g;
    const mp_bench_dataset *ds = &g->ds[j->ds];
    const mp_bench_variant *v = g->var[j->var];
    const ds_state *s = &P->ds[j->ds];
    mp_train_opts t;
    mp_status st = mp_bench_train_opts(g, v, ds, g->seeds[j->k], &t);
    if (st)
        return st;
    mp_train_inputs in = { .dataset = s->p.d, .features = s->p.f, .split = &s->p.split[j->k],
                           .labels = s->p.y };
    curve c = { mp_malloc(sizeof(double) * (size_t)t.epochs),
                mp_malloc(sizeof(double) * (size_t)t.epochs), 0, t.epochs };
    if (!c.loss || !c.val) {
        mp_free(c.loss);
        mp_free(c.val);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    t.inputs = &in;
    t.backend = g->backend;
    t.on_epoch = on_epoch;
    t.on_epoch_arg = &c;
    mp_train_result r;
    if ((st = mp_train(&t, &r))) {
        char why[1024];
        snprintf(why, sizeof why, "%s", mp_error_message());
        mp_free(c.loss);
        mp_free(c.val);
        return mp_error_set(st, "%s/%s/seed %ld: %s", ds->name, v->name, g->seeds[j->k], why);
    }
    memset(row, 0, sizeof *row);
    char device[128], *colon;
    snprintf(device, sizeof device, "%s", g->backend);
    const char *precision = "fp32";
    if ((colon = strchr(device, ':'))) {
        *colon = '\0';
        precision = colon + 1;
    }
    row->tool = dup_or_null("molprop", &st);
    row->dataset = dup_or_null(ds->name, &st);
    row->model = dup_or_null(v->name, &st);
    row->split = dup_or_null(mp_split_type_name(g->a.split), &st);
    row->metric = dup_or_null(ds->metric, &st);
    row->device = dup_or_null(device, &st);
    row->precision = dup_or_null(precision, &st);
    row->version = dup_or_null(mp_version(), &st);
    row->seed = g->seeds[j->k];
    snprintf(row->split_sum, sizeof row->split_sum, "%s", s->p.split_sum[j->k]);
    snprintf(row->data_sha, sizeof row->data_sha, "%.16s", s->sha256);
    snprintf(row->settings, sizeof row->settings, "%s", s->settings);
    row->n_tasks = (int)r.n_tasks;
    row->test = r.test_mean;
    row->val = r.val_mean;
    row->test_tasks = r.test_per_task;   /* handed over */
    row->val_tasks = r.val_per_task;
    r.test_per_task = r.val_per_task = NULL;
    row->epochs = t.epochs;
    row->best_epoch = r.best_epoch ? r.best_epoch[0] : 0;
    row->n_train = (long)r.n_train;
    row->n_val = (long)r.n_val;
    row->n_test = (long)r.n_test;
    row->featurize_seconds = s->p.seconds;
    row->train_seconds = r.train_seconds;
    row->n_curve = c.n;
    row->train_loss = c.loss;
    row->val_curve = c.val;
    mp_train_result_free(&r);
    if (st)
        mp_bench_row_free(row);
    return st;
}

/* The next pending job whose dataset is ready, or NULL (none yet, or none
 * left: *left says which).  Called locked. */
static job *take_job(pool *P, int *left)
{
    *left = 0;
    for (int i = 0; i < P->n_jobs; i++) {
        job *j = &P->jobs[i];
        if (j->state != JOB_PENDING)
            continue;
        *left = 1;
        if (P->ds[j->ds].state == DS_READY) {
            j->state = JOB_RUNNING;
            return j;
        }
    }
    return NULL;
}

static void finish_job(pool *P, job *j, mp_bench_row *row)
{
    mp_bench_grid *g = P->g;
    ds_state *s = &P->ds[j->ds];
    j->state = JOB_DONE;
    P->n_done++;
    P->work_done += s->work * model_weight(g->var[j->var]);
    mp_bench_row *grown = mp_realloc(P->rows, sizeof *grown * (P->n_rows + 1));
    if (grown) {
        P->rows = grown;
        P->rows[P->n_rows++] = *row;
    } else {
        mp_bench_row_free(row);
    }
    if (!g->a.quiet) {
        const mp_bench_row *r = &P->rows[P->n_rows - 1];
        char el[32], eta[32];
        double t = mp_time_now() - P->t0;
        double left = t * (P->work_total - P->work_done) / (P->work_done > 0 ? P->work_done : 1);
        say(P, "[%*d/%d] %-16s %-17s seed %-3ld test %s %.4f  val %.4f  best epoch %2d/%d  "
            "%.1f s | %s elapsed, ETA %s\n", P->n_jobs >= 100 ? 3 : 2, P->n_done, P->n_pending,
            g->ds[j->ds].name, g->var[j->var]->name, g->seeds[j->k], r->metric, r->test, r->val,
            r->best_epoch, r->epochs, r->train_seconds, mp_format_duration(el, sizeof el, t),
            P->n_done == P->n_pending ? "0s" : mp_format_duration(eta, sizeof eta, left));
    }
    if (--s->pending == 0 && s->state == DS_READY) {
        mp_bench_prepared_free(&s->p);
        s->state = DS_FREED;
        P->live--;
    }
    status_line(P);
    pthread_cond_broadcast(&P->cv);
}

static void *worker_main(void *arg)
{
    pool *P = arg;
    pthread_mutex_lock(&P->mu);
    for (;;) {
        int left;
        job *j = P->err ? NULL : take_job(P, &left);
        if (!j) {
            if (P->err || !left)
                break;
            pthread_cond_wait(&P->cv, &P->mu);
            continue;
        }
        P->n_running++;
        status_line(P);
        pthread_mutex_unlock(&P->mu);
        mp_bench_row row;
        memset(&row, 0, sizeof row);
        mp_status st = run_job(P, j, &row);
        if (!st)
            st = mp_bench_results_append(P->fd, P->g->results_path, &row);
        pthread_mutex_lock(&P->mu);
        P->n_running--;
        if (st) {
            if (row.tool)
                mp_bench_row_free(&row);
            j->state = JOB_PENDING;
            fail(P, st);
        } else {
            finish_job(P, j, &row);
        }
    }
    pthread_mutex_unlock(&P->mu);
    return NULL;
}

/* ===================================================================== */
/* The table at the end                                                   */
/* ===================================================================== */

static void print_table(pool *P, const mp_bench_row *old, size_t n_old)
{
    mp_bench_grid *g = P->g;
    if (!P->out)
        return;
    say(P, "\n%-16s %-17s %-8s %s\n", "dataset", "model", "metric",
        "test score per seed -> mean ± std");
    for (int d = 0; d < g->n_ds; d++)
        for (int v = 0; v < g->n_var; v++) {
            double score[MP_BENCH_MAX_LIST];
            int n = 0;
            fprintf(P->out, "%-16s %-17s %-8s", g->ds[d].name, g->var[v]->name, g->ds[d].metric);
            for (int k = 0; k < g->n_seeds; k++) {
                const mp_bench_row *r = NULL;
                for (size_t i = 0; i < n_old && !r; i++)
                    if (row_matches(&old[i], g->ds[d].name, g->var[v]->name, g->seeds[k]))
                        r = &old[i];
                for (size_t i = 0; i < P->n_rows && !r; i++)
                    if (row_matches(&P->rows[i], g->ds[d].name, g->var[v]->name, g->seeds[k]))
                        r = &P->rows[i];
                if (r) {
                    score[n++] = r->test;
                    fprintf(P->out, " %.4f", r->test);
                } else {
                    fprintf(P->out, "      -");
                }
            }
            double mean, std;
            mp_bench_mean_std(score, (size_t)n, &mean, &std, NULL);
            fprintf(P->out, "  -> %.4f ± %.4f\n", mean, std);
        }
    fflush(P->out);
}

/* ===================================================================== */
/* The run                                                                */
/* ===================================================================== */

static int host_backend(const char *name)
{
    return !strncmp(name, "cpu", 3) || !strncmp(name, "ref", 3);
}

static mp_status run_pool(pool *P, int jobs)
{
    pthread_t prep, workers[64];
    int n_workers = 0;
    mp_status st = MP_OK;
    if (pthread_create(&prep, NULL, prep_main, P) != 0)
        return mp_error_set(MP_ERR_INTERNAL, "cannot start a thread");
    for (int i = 0; i < jobs && i < 64; i++) {
        if (pthread_create(&workers[i], NULL, worker_main, P) != 0) {
            pthread_mutex_lock(&P->mu);
            fail(P, mp_error_set(MP_ERR_INTERNAL, "cannot start a thread"));
            pthread_mutex_unlock(&P->mu);
            break;
        }
        n_workers++;
    }
    for (int i = 0; i < n_workers; i++)
        pthread_join(workers[i], NULL);
    if (n_workers == 0) {
        pthread_mutex_lock(&P->mu);
        fail(P, mp_error_set(MP_ERR_INTERNAL, "no worker thread"));
        pthread_mutex_unlock(&P->mu);
    }
    pthread_join(prep, NULL);
    for (int d = 0; d < P->g->n_ds; d++)
        if (P->ds[d].state == DS_READY || P->ds[d].state == DS_PREPARING)
            mp_bench_prepared_free(&P->ds[d].p);
    if (P->err)
        st = mp_error_set(P->err, "%s", P->errmsg);
    return st;
}

mp_status mp_run_bench(const mp_options *o, FILE *table, mp_summary **summary)
{
    if (summary)
        *summary = NULL;
    mp_status st = mp_run_check(o, "bench");
    if (st)
        return st;
    mp_bench_grid *g = mp_calloc(1, sizeof *g);
    pool *P = mp_calloc(1, sizeof *P);
    mp_bench_row *old = NULL;
    size_t n_old = 0, n_torn = 0;
    if (!g || !P) {
        mp_free(g);
        mp_free(P);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    P->g = g;
    P->out = table;
    P->tty = table && isatty(fileno(table)) && getenv("TERM") && strcmp(getenv("TERM"), "dumb");
    P->fd = -1;
    pthread_mutex_init(&P->mu, NULL);
    pthread_cond_init(&P->cv, NULL);
    int threads_before = mp_threads_get(), set_threads = 0;
    if ((st = mp_bench_grid_make(g, o)))
        goto done;
    if ((st = mp_bench_rows_read(g->results_path, 1, &old, &n_old, &n_torn)) ||
        (st = make_jobs(P, old, n_old)))
        goto done;
    for (int i = 0; i < g->n_skipped; i++)
        say(P, "note: %s skipped: its file is not in %s (molprop data fetch %s)\n",
            g->skipped[i], g->a.data_dir, g->skipped[i]);
    /* auto: the seeds of one (dataset, model) side by side, as an ensemble's
     * members train (members.h): each seed has a split of its own, so each
     * is a run of its own (its own backend, stream and scalers), sharing
     * the prepared dataset read-only; on the GPU at least 4 at a time (runs
     * of different models fill it too), on the cpu min(seeds, threads) */
    int host_threads = g->a.threads > 0 ? g->a.threads : threads_before;
    int jobs = g->a.jobs > 0 ? g->a.jobs
             : host_backend(g->backend) ? (g->n_seeds < host_threads ? g->n_seeds : host_threads)
             : (g->n_seeds > 4 ? g->n_seeds : 4);
    if (jobs < 1)
        jobs = 1;
    if (jobs > P->n_pending)
        jobs = P->n_pending > 0 ? P->n_pending : 1;
    if (!g->a.quiet)
        say(P, "bench: %d runs (%d datasets x %d models x %d seeds), %d already in %s; "
            "%d to run, %d at a time on %s\n", P->n_jobs, g->n_ds, g->n_var, g->n_seeds,
            P->n_jobs - P->n_pending, g->results_path, P->n_pending, jobs, g->backend);
    if ((st = mp_bench_mkdirs(g->a.out_dir, "--out")) ||
        (st = mp_bench_results_open(g->results_path, &P->fd)))
        goto done;
    /* host threads: shared by the runs side by side (the cpu kernels and
     * the resident source's packing give the same results for any thread
     * count) */
    int threads = host_threads;
    g->prep_threads = threads;   /* featurizing takes them all: it overlaps little */
    if (jobs > 1)
        threads = threads / jobs > 0 ? threads / jobs : 1;
    if (threads != threads_before) {
        mp_threads_set(threads);
        set_threads = 1;
    }
    P->t0 = mp_time_now();
    int any = 0;
    for (int d = 0; d < g->n_ds; d++)
        any |= P->ds[d].need;
    if (any)
        st = run_pool(P, jobs);
    if (P->tty && P->out)
        fputs("\r\033[K", P->out);
    if (!st)
        print_table(P, old, n_old);
    mp_summary *s = NULL;
    if (!st && !(st = mp_summary_new(&s)) &&
        !(st = mp_summary_put_number(s, "n_runs", P->n_done)) &&
        !(st = mp_summary_put_number(s, "n_skipped", P->n_jobs - P->n_pending)) &&
        !(st = mp_summary_put_number(s, "n_total", P->n_jobs)) &&
        !(st = mp_summary_put_number(s, "seconds", mp_time_now() - P->t0)) &&
        !(st = mp_summary_put_text(s, "results", g->results_path)))
        mp_summary_hand_over(s, summary);
    else
        mp_summary_free(s);
done:
    if (set_threads)
        mp_threads_set(threads_before);
    if (P->fd >= 0)
        close(P->fd);
    mp_bench_rows_free(old, n_old);
    mp_bench_rows_free(P->rows, P->n_rows);
    mp_free(P->jobs);
    pthread_mutex_destroy(&P->mu);
    pthread_cond_destroy(&P->cv);
    mp_bench_grid_free(g);
    mp_free(g);
    mp_free(P);
    return st;
}
