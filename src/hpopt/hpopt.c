/*
 * hpopt.c - `molprop hpopt`, mp_run_hpopt: trials of `molprop train` over a
 * search space (space.c), proposed by random search or TPE (propose.c).
 *
 * OUT/hpopt.json    the search's identity: method, seeds, --jobs, the space
 *                   and the base train options; a rerun with another
 *                   identity is refused (a rerun with more --trials goes on)
 * OUT/trials.jsonl  a line per finished trial, appended whole (one write,
 *                   fsync'd) as it finishes: trial, params, status, val,
 *                   test, metric, loss, seconds.  A rerun skips them, so an
 *                   interrupted search loses at most the trials running
 * OUT/best.ini      the base options and the best trial's, as a [train]
 *                   section `molprop train --config` reads
 * OUT/trials/NNN/   the trial's model directory (--keep best|all|none)
 *
 * Trials run in rounds of --jobs, side by side on threads; the proposals of
 * a round are made from the trials of the rounds before it, so the search
 * is the same for a seed and a --jobs however long each trial takes.  A
 * random search (no proposal reads a result) runs its trials as a queue
 * instead, the costliest first (queue.c): each of the --jobs workers
 * takes the next trial when it finishes one, so no trial waits for the
 * slowest of a round and no long one starts last.  On the cpu each trial
 * side by side runs on its share of the threads, and one that ends (a
 * round's trial, or a worker that finds the queue empty) hands them to the
 * trial still running with the fewest (mp_hp_give_threads): the results do
 * not depend on the count.  The
 * objective is the validation score of the train options' metric (its
 * best epoch, as train keeps); loss = score, or -score where higher is
 * better.  A trial that runs out of memory or ends with a NaN score is
 * "failed" (kept in the file, ignored by TPE); any other error stops the
 * search with the trial named.  One that ran out of memory beside other
 * trials (on a GPU they share its memory) is first trained again alone,
 * after its round or at the queue's end.  The data file is read and
 * featurized once for every trial (mp_train_shared_open).
 *
 * --halving (halving.c): the trials trained rung by rung, the weak ones
 * stopped; a line per trial and rung, one per stop.
 */
#define _XOPEN_SOURCE 700   /* nftw */
#define _DEFAULT_SOURCE     /* truncate, fsync */
#include "hpopt/hpopt_int.h"

#include "data/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(MP_HP_RANDOM == 0 && MP_HP_TPE == 1, "options.c's hpopt method values");

/* ===================================================================== */
/* Files                                                                  */
/* ===================================================================== */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p) ? -1 : 0;
}

void mp_hp_remove_tree(const char *path)
{
    (void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void mp_hp_trial_dir(const mp_hpopt_args *a, int i, char *buf, size_t n)
{
    snprintf(buf, n, "%s/trials/%03d", a->out_dir, i);
}

static mp_status write_text(const char *path, const char *text)
{
    mp_afile f;
    mp_status st = mp_afile_open(&f, path);
    if (st)
        return st;
    fputs(text, f.fp);
    return mp_afile_commit(&f);
}

/* Reads a whole small file (NUL-terminated, mp_free); NULL with errno. */
static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = mp_malloc(cap);
    for (size_t k; b && (k = fread(b + n, 1, cap - n - 1, fp)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *nb = mp_realloc(b, cap * 2);
            if (!nb) {
                mp_free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    int bad = ferror(fp);
    fclose(fp);
    if (!b || bad) {
        mp_free(b);
        errno = bad ? EIO : ENOMEM;
        return NULL;
    }
    b[n] = 0;
    if (len)
        *len = n;
    return b;
}

/* The identity of the search as JSON text (mp_free). */
static char *identity(const mp_hpopt_args *a, const mp_hp_space *s, const mp_options *base)
{
    cJSON *root = cJSON_CreateObject(), *dims = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "method", a->method == MP_HP_TPE ? "tpe" : "random");
    cJSON_AddNumberToObject(root, "search_seed", (double)a->seed);
    cJSON_AddNumberToObject(root, "jobs", a->jobs);
    if (a->method == MP_HP_TPE) {
        cJSON_AddNumberToObject(root, "startup_trials", a->startup);
        cJSON_AddNumberToObject(root, "candidates", a->candidates);
    }
    for (int k = 0; k < s->n; k++) {
        const mp_hp_dim *d = &s->dims[k];
        cJSON *o = cJSON_CreateObject();
        static const char *const kinds[] = { "int", "real", "log", "choice" };
        cJSON_AddStringToObject(o, "option", d->key);
        cJSON_AddStringToObject(o, "kind", kinds[d->kind]);
        if (d->kind == MP_HP_CHOICE) {
            cJSON *c = cJSON_CreateArray();
            for (int j = 0; j < d->n_choices; j++)
                cJSON_AddItemToArray(c, cJSON_CreateString(d->choices[j]));
            cJSON_AddItemToObject(o, "choices", c);
        } else {
            cJSON_AddNumberToObject(o, "lo", d->lo);
            cJSON_AddNumberToObject(o, "hi", d->hi);
            cJSON_AddNumberToObject(o, "step", d->step);
        }
        cJSON_AddItemToArray(dims, o);
    }
    cJSON_AddItemToObject(root, "space", dims);
    if (a->halving) {   /* only then: the identity of a search without it is as before */
        cJSON *h = cJSON_CreateObject();
        cJSON_AddNumberToObject(h, "eta", a->halving_eta);
        cJSON_AddNumberToObject(h, "min_epochs", a->halving_min);   /* 0: auto */
        /* its rankings are over all the trials: no extending it */
        cJSON_AddNumberToObject(h, "trials", a->trials);
        cJSON_AddItemToObject(root, "halving", h);
    }
    cJSON *train = cJSON_CreateObject();
    size_t i = 0;
    const char *value;
    for (const char *key; (key = mp_options_set_at(base, &i, &value));)
        if (strcmp(key, "threads") && strcmp(key, "quiet") && strcmp(key, "save-dir"))
            cJSON_AddStringToObject(train, key, value);
    cJSON_AddItemToObject(root, "train", train);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return NULL;
    char *out = mp_malloc(strlen(text) + 2);
    if (out)
        sprintf(out, "%s\n", text);
    cJSON_free(text);
    return out;
}

/* OUT/hpopt.json: written on the first run (*written = 1), compared on a
 * rerun. */
static mp_status check_identity(const mp_hpopt_args *a, const mp_hp_space *s,
                                const mp_options *base, int *written)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/hpopt.json", a->out_dir);
    char *want = identity(a, s, base);
    if (!want)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    char *have = slurp(path, NULL);
    mp_status st = MP_OK;
    if (!have && errno == ENOENT)
        *written = (st = write_text(path, want)) == MP_OK;
    else if (!have)
        st = mp_error_set(MP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    else if (strcmp(have, want) != 0)
        st = mp_error_set(MP_ERR_ARG, "%s records another search (method, seeds, --jobs, the "
                          "space, the train options or --halving and its --trials differ): "
                          "continue it with the same options, or give another --out", path);
    mp_free(have);
    mp_free(want);
    return st;
}

/* ===================================================================== */
/* The trials file                                                        */
/* ===================================================================== */

/* The metric the trials are scored by: the base's, or the task's default
 * (known once a trial ran). */
static void metric_of(search *S, const char *name)
{
    mp_metric m;
    snprintf(S->metric, sizeof S->metric, "%s", name ? name : "");
    S->higher = name && mp_metric_parse(name, &m) == MP_OK && mp_metric_higher_is_better(m);
}

int mp_hp_on_gpu(const mp_options *base)
{
    const char *dev = mp_options_get(base, "device");
    return dev && (!strncmp(dev, "gpu", 3) || !strncmp(dev, "cuda", 4));
}

/* One line of trials.jsonl for trial i (mp_free). */
static char *trial_line(const search *S, int i, const char *error)
{
    const trial_rec *r = &S->t[i];
    cJSON *o = cJSON_CreateObject(), *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "trial", i);
    if (S->h) {
        cJSON_AddNumberToObject(o, "rung", r->rung);
        cJSON_AddNumberToObject(o, "epochs", r->epochs);
    }
    for (int k = 0; k < S->space->n; k++) {
        char text[64];
        mp_hp_value_text(&S->space->dims[k], r->x[k], text, sizeof text);
        cJSON_AddStringToObject(p, S->space->dims[k].key, text);
    }
    cJSON_AddItemToObject(o, "params", p);
    static const char *const status[] = { "ok", "failed", "rung", "stopped" };
    cJSON_AddStringToObject(o, "status", status[r->failed ? HP_FAILED : r->state]);
    cJSON_AddStringToObject(o, "metric", S->metric);
    if (!r->failed) {
        cJSON_AddNumberToObject(o, "val", r->val);
        cJSON_AddNumberToObject(o, "test", r->test);
        cJSON_AddNumberToObject(o, "loss", r->loss);
    }
    if (error)
        cJSON_AddStringToObject(o, "error", error);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return NULL;
    char *line = mp_malloc(strlen(text) + 2);
    if (line)
        sprintf(line, "%s\n", text);
    cJSON_free(text);
    return line;
}

/* Appends text (whole lines) to the trials file in one write and syncs it
 * (under S->lock). */
static mp_status append_text(search *S, const char *line)
{
    mp_status st = MP_OK;
    pthread_mutex_lock(&S->lock);
    int fd = open(S->path, O_WRONLY | O_APPEND | O_CREAT, 0666);
    size_t n = strlen(line);
    if (fd < 0)
        st = mp_error_set(MP_ERR_IO, "cannot open %s: %s", S->path, strerror(errno));
    else if (write(fd, line, n) != (ssize_t)n || fsync(fd) != 0)
        st = mp_error_set(MP_ERR_IO, "cannot append to %s: %s", S->path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && !st)
        st = mp_error_set(MP_ERR_IO, "cannot write %s: %s", S->path, strerror(errno));
    pthread_mutex_unlock(&S->lock);
    return st;
}

/* Appends the lines of trials[0..n) in one write and syncs them (under
 * S->lock). */
mp_status mp_hp_append_trials(search *S, const int *trials, int n)
{
    size_t len = 0, cap = 0;
    char *text = NULL;
    for (int k = 0; k < n; k++) {
        char *line = trial_line(S, trials[k], NULL);
        size_t m = line ? strlen(line) : 0;
        char *nt = line && len + m + 1 > cap ? mp_realloc(text, cap = 2 * (len + m + 1)) : text;
        if (!line || !nt) {
            mp_free(line);
            mp_free(text);
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        }
        text = nt;
        memcpy(text + len, line, m + 1);
        len += m;
        mp_free(line);
    }
    mp_status st = n > 0 ? append_text(S, text) : MP_OK;
    mp_free(text);
    return st;
}

mp_status mp_hp_append_trial(search *S, int i, const char *error)
{
    char *line = trial_line(S, i, error);
    if (!line)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_status st = append_text(S, line);
    mp_free(line);
    return st;
}

static int json_number(const cJSON *o, const char *key, double *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j))
        return 0;
    *v = j->valuedouble;
    return 1;
}

/* Parses one line into S->t; MP_ERR_FORMAT names path:line. */
static mp_status load_line(search *S, const char *text, int line)
{
    cJSON *o = cJSON_Parse(text);
    double ti = -1;
    mp_status st = MP_OK;
    const char *why = NULL;
    if (!o || !json_number(o, "trial", &ti) || ti != floor(ti) || ti < 0)
        why = "not a trial record";
    else if (ti >= 1e6)
        why = "trial number out of range";
    int i = (int)ti;
    if (!why && i >= S->a->trials) {   /* a longer search before: kept, not used */
        cJSON_Delete(o);
        return MP_OK;
    }
    if (!why && (S->h ? S->t[i].done : S->t[i].seen))
        why = S->h ? "a line after the trial's last" : "trial given twice";
    const cJSON *p = o ? cJSON_GetObjectItemCaseSensitive(o, "params") : NULL;
    double x[MP_HP_MAX_DIMS];
    for (int k = 0; !why && k < S->space->n; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, S->space->dims[k].key);
        if (!cJSON_IsString(v) ||
            mp_hp_value_parse(&S->space->dims[k], v->valuestring, &x[k]) != MP_OK)
            why = "a parameter is missing or not in the space";
    }
    /* halving: every line of a trial has its parameters */
    if (!why && S->t[i].seen && memcmp(x, S->t[i].x, sizeof(double) * (size_t)S->space->n))
        why = "another trial's parameters under its number";
    if (!why)
        memcpy(S->t[i].x, x, sizeof(double) * (size_t)S->space->n);
    const cJSON *metric = o ? cJSON_GetObjectItemCaseSensitive(o, "metric") : NULL;
    if (!why && cJSON_IsString(metric) && metric->valuestring[0]) {
        if (!S->metric[0])
            metric_of(S, metric->valuestring);
        else if (strcmp(S->metric, metric->valuestring) != 0)
            why = "another metric than the search's";
    }
    const cJSON *status = o ? cJSON_GetObjectItemCaseSensitive(o, "status") : NULL;
    if (!why && !cJSON_IsString(status))
        why = "no status";
    static const char *const names[] = { "ok", "failed", "rung", "stopped" };
    int code = HP_FAILED;   /* a plain search's: anything but ok */
    for (int k = 0; !why && k < 4; k++)
        code = !strcmp(status->valuestring, names[k]) ? k : code;
    if (!why && S->h) {
        if (strcmp(status->valuestring, names[code]) != 0)
            why = "a status other than ok, failed, rung or stopped";
        else
            mp_hp_halving_load(S, i, o, code, &why);
        S->t[i].seen = !why;
    } else if (!why) {
        trial_rec *r = &S->t[i];
        r->failed = code != HP_OK;
        (void)json_number(o, "seconds", &r->seconds);
        if (!r->failed && !(json_number(o, "val", &r->val) && json_number(o, "loss", &r->loss)))
            why = "an ok trial without val and loss";
        (void)json_number(o, "test", &r->test);
        if (r->failed)
            r->loss = r->val = r->test = NAN;
        r->done = r->seen = !why;
    }
    if (why)
        st = mp_error_set(MP_ERR_FORMAT, "%s:%d: %s", S->path, line, why);
    cJSON_Delete(o);
    return st;
}

/* Reads OUT/trials.jsonl if there is one.  A last line without its newline
 * (a write cut short) is cut off the file. */
static mp_status load_trials(search *S)
{
    size_t len;
    char *b = slurp(S->path, &len);
    if (!b)
        return errno == ENOENT ? MP_OK
                               : mp_error_set(MP_ERR_IO, "cannot read %s: %s", S->path,
                                              strerror(errno));
    mp_status st = MP_OK;
    size_t whole = 0;
    int line = 0;
    for (char *s = b; !st && *s;) {
        char *nl = strchr(s, '\n');
        if (!nl)
            break;
        *nl = 0;
        line++;
        if (*s)
            st = load_line(S, s, line);
        whole = (size_t)(nl + 1 - b);
        s = nl + 1;
    }
    mp_free(b);
    if (!st && whole < len && truncate(S->path, (off_t)whole) != 0)
        st = mp_error_set(MP_ERR_IO, "cannot cut the partial last line of %s: %s", S->path,
                          strerror(errno));
    return st;
}

/* ===================================================================== */
/* One trial                                                              */
/* ===================================================================== */

void *mp_hp_run_trial(void *arg)
{
    job *j = arg;
    search *S = j->S;
    trial_rec *r = &S->t[j->i];
    const mp_hp_space *sp = S->space;
    char dir[1200], text[64];
    mp_hp_trial_dir(S->a, j->i, dir, sizeof dir);
    if (!j->resume)
        mp_hp_remove_tree(dir);   /* a run cut short before */
    mp_options *o = NULL;
    mp_summary *sum = NULL;
    double t0 = mp_time_now();
    mp_status st = mp_options_copy(&o, S->base);
    for (int k = 0; !st && k < sp->n; k++) {
        mp_hp_value_text(&sp->dims[k], r->x[k], text, sizeof text);
        st = mp_options_set_from(o, sp->dims[k].key, text, sp->path);
    }
    if (!st)
        st = mp_options_set(o, "save-dir", dir);
    if (!st && j->resume)   /* halving: on from the checkpoint of its last rung */
        st = mp_options_set(o, "resume", dir);
    if (!st && j->stop_after > 0) {
        snprintf(text, sizeof text, "%d", j->stop_after);
        st = mp_options_set(o, "stop-after", text);
    }
    if (!st)
        st = mp_options_set(o, "quiet", "true");
    if (!st && S->threads > 0) {
        snprintf(text, sizeof text, "%d", S->threads);
        st = mp_options_set(o, "threads", text);
    }
    if (!st && S->gpu_share > 1) {
        snprintf(text, sizeof text, "%d", S->gpu_share);
        st = mp_options_set(o, "gpu-share", text);
    }
    if (j->threads > 0)   /* side by side on the cpu: a count others may raise */
        mp_threads_follow(&j->threads);
    if (!st)
        st = mp_run_train_shared(o, S->shared, &sum);
    mp_threads_follow(NULL);
    r->seconds = mp_time_now() - t0;
    r->failed = 0;
    r->rung = j->rung;
    r->epochs = j->stop_after;
    r->state = HP_OK;
    j->again = 0;
    if (st == MP_ERR_NOMEM && j->beside) {   /* the memory its neighbours held? alone, later */
        snprintf(j->error, sizeof j->error, "%s", mp_error_message());
        j->again = 1;
        j->st = MP_OK;
        mp_summary_free(sum);
        mp_options_free(o);
        return NULL;
    }
    if (st == MP_ERR_NOMEM) {   /* too big a model: this trial fails, the search goes on */
        snprintf(j->error, sizeof j->error, "%s", mp_error_message());
        r->failed = 1;
        st = MP_OK;
    } else if (!st) {
        r->val = mp_summary_number(sum, "val");
        r->test = mp_summary_number(sum, "test");
        r->stopped_epoch = mp_summary_number(sum, "stopped_epoch");
        /* halving: stopped at a rung before the last, to be ranked (a
         * trial that patience ended is finished) */
        if (S->h && r->stopped_epoch == j->stop_after && j->stop_after < mp_hp_halving_epochs(S))
            r->state = HP_RUNG;
        pthread_mutex_lock(&S->lock);
        if (!S->metric[0])   /* the task's default ("auto"): the same for every trial */
            metric_of(S, mp_summary_text(sum, "metric"));
        pthread_mutex_unlock(&S->lock);
        if (isnan(r->val)) {
            snprintf(j->error, sizeof j->error, "the validation score is NaN");
            r->failed = 1;
        }
        r->loss = S->higher ? -r->val : r->val;
    }
    if (r->failed)
        r->val = r->test = r->loss = NAN;
    if (st)
        snprintf(j->error, sizeof j->error, "trial %d: %s", j->i, mp_error_message());
    else if ((st = mp_hp_append_trial(S, j->i, r->failed ? j->error : NULL)))
        snprintf(j->error, sizeof j->error, "%s", mp_error_message());
    else {
        r->done = r->failed || r->state == HP_OK;
        r->seen = 1;
        if (!S->quiet) {   /* one line per finished trial */
            char line[2048];
            size_t k = 0;
            char at[64] = "";
            if (S->h)
                snprintf(at, sizeof at, " rung %d (%d epochs)", j->rung, j->stop_after);
            if (r->failed)
                k += (size_t)snprintf(line, sizeof line, "trial %d/%d%s failed (%.1f s: %s):",
                                      j->i, S->a->trials, at, r->seconds, j->error);
            else
                k += (size_t)snprintf(line, sizeof line, "trial %d/%d%s: val %s %.6g (%.1f s):",
                                      j->i, S->a->trials, at, S->metric, r->val, r->seconds);
            for (int d = 0; d < sp->n && k < sizeof line; d++) {
                mp_hp_value_text(&sp->dims[d], r->x[d], text, sizeof text);
                k += (size_t)snprintf(line + k, sizeof line - k, " %s=%s", sp->dims[d].key, text);
            }
            pthread_mutex_lock(&S->lock);
            fprintf(stderr, "hpopt: %s\n", line);
            pthread_mutex_unlock(&S->lock);
        }
    }
    j->st = st;
    mp_summary_free(sum);
    mp_options_free(o);
    return NULL;
}

/* ===================================================================== */
/* The search                                                             */
/* ===================================================================== */

int mp_hp_best_trial(const search *S)
{
    int best = -1;
    for (int i = 0; i < S->a->trials; i++)
        if (S->t[i].done && !S->t[i].failed && (best < 0 || S->t[i].loss < S->t[best].loss))
            best = i;
    return best;
}

/* --keep: after a round, the model directories that are not to stay. */
static void prune_models(const search *S, int upto)
{
    if (S->a->keep == MP_HP_KEEP_ALL)
        return;
    int best = S->a->keep == MP_HP_KEEP_BEST ? mp_hp_best_trial(S) : -1;
    char dir[1200];
    for (int i = 0; i < upto; i++)
        if (i != best) {
            mp_hp_trial_dir(S->a, i, dir, sizeof dir);
            mp_hp_remove_tree(dir);
        }
}

/* OUT/best.ini: the base train options, then the best trial's. */
static mp_status write_best(const search *S, int best)
{
    char path[1200], text[64];
    snprintf(path, sizeof path, "%s/best.ini", S->a->out_dir);
    mp_afile f;
    mp_status st = mp_afile_open(&f, path);
    if (st)
        return st;
    const trial_rec *r = &S->t[best];
    fprintf(f.fp, "; best.ini - the best trial of `molprop hpopt` (%s): trial %d of %d, "
            "val %s %.6g (test %.6g)\n;   molprop train --config %s\n\n[train]\n",
            S->a->method == MP_HP_TPE ? "tpe" : "random", best, S->a->trials, S->metric, r->val,
            r->test, path);
    size_t i = 0;
    const char *value;
    for (const char *key; (key = mp_options_set_at(S->base, &i, &value));) {
        int searched = !strcmp(key, "save-dir") || !strcmp(key, "quiet");
        for (int k = 0; k < S->space->n; k++)
            searched |= !strcmp(key, S->space->dims[k].key);
        if (!searched)
            fprintf(f.fp, "%-14s = %s\n", key, value);
    }
    for (int k = 0; k < S->space->n; k++) {
        mp_hp_value_text(&S->space->dims[k], r->x[k], text, sizeof text);
        fprintf(f.fp, "%-14s = %s\n", S->space->dims[k].key, text);
    }
    if (S->gpu_share > 1)
        fprintf(f.fp, "; the trials ran %d side by side on the GPU: the same share gives the\n"
                "; trial's model bit for bit; without it a run alone is faster, its last\n"
                "; bits other\ngpu-share      = %d\n", S->gpu_share, S->gpu_share);
    fprintf(f.fp, "save-dir       = %s/best\n", S->a->out_dir);
    return mp_afile_commit(&f);
}

/* Trials with a line in the trials file (from before, or finished now;
 * halving: at any rung). */
static int n_recorded(const search *S)
{
    int n = 0;
    for (int i = 0; i < S->a->trials; i++)
        n += S->t[i].seen;
    return n;
}

/* The message of a search stopped by a signal during trial i (-1: between
 * trials): what is kept and how to go on. */
mp_status mp_hp_interrupted(const search *S, int i)
{
    char during[32] = "";
    if (i >= 0)
        snprintf(during, sizeof during, " during trial %d", i);
    int n = n_recorded(S);
    if (n == 0)
        return mp_error_set(MP_ERR_INTERRUPTED, "interrupted by %s%s; no trial had finished",
                            mp_signal_name(mp_interrupted()), during);
    return mp_error_set(MP_ERR_INTERRUPTED, "interrupted by %s%s; the %d %s trial%s %s "
                        "kept in %s: run the same command to resume",
                        mp_signal_name(mp_interrupted()), during, n, S->h ? "scored" : "finished",
                        n == 1 ? "" : "s", n == 1 ? "is" : "are", S->path);
}

/* A search that failed or was stopped before any trial was recorded leaves
 * nothing behind it: the identity file and the folders this run made go
 * (rmdir: a folder that holds anything else stays). */
static void undo_start(const mp_hpopt_args *a, int wrote_identity, int made_sub, int made_out)
{
    char path[1200];
    if (wrote_identity) {
        snprintf(path, sizeof path, "%s/hpopt.json", a->out_dir);
        (void)unlink(path);
    }
    if (made_sub) {
        snprintf(path, sizeof path, "%s/trials", a->out_dir);
        (void)rmdir(path);
    }
    if (made_out)
        (void)rmdir(a->out_dir);
}

mp_status mp_hp_propose_trial(search *S, const mp_hp_proposer *p, const double *xs,
                              double *losses, int n_hist, int i)
{
    const mp_hp_space *sp = S->space;
    double x[MP_HP_MAX_DIMS];
    mp_hp_propose_in_round(p, sp, xs, losses, n_hist, i, x);
    char text[64];
    for (int k = 0; k < sp->n; k++) {   /* as the file will hold it */
        mp_hp_value_text(&sp->dims[k], x[k], text, sizeof text);
        (void)mp_hp_value_parse(&sp->dims[k], text, &x[k]);
    }
    if (!S->t[i].seen) {
        memcpy(S->t[i].x, x, sizeof(double) * (size_t)sp->n);
        return MP_OK;
    }
    /* from the file: it must be this proposal */
    if (memcmp(x, S->t[i].x, sizeof(double) * (size_t)sp->n) != 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: trial %d's parameters are not the ones this "
                            "search proposes (was the file edited?)", S->path, i);
    return MP_OK;
}

void mp_hp_train_again_alone(job *j)
{
    if (mp_interrupt_check()) {
        j->st = MP_ERR_INTERRUPTED;
        return;
    }
    if (!j->S->quiet) {
        pthread_mutex_lock(&j->S->lock);
        fprintf(stderr, "hpopt: trial %d ran out of memory beside other trials; training "
                "it again alone\n", j->i);
        pthread_mutex_unlock(&j->S->lock);
    }
    j->beside = 0;
    mp_hp_run_trial(j);
}

static long threads_given;   /* mp_hpopt_threads_given */

long mp_hpopt_threads_given(void) { return __atomic_load_n(&threads_given, __ATOMIC_RELAXED); }

void mp_hp_give_threads(search *S, job *j)
{
    pthread_mutex_lock(&S->lock);
    j->busy = 0;
    job *to = NULL;
    for (int k = 0; k < S->n_group; k++) {
        job *o = S->group[k];
        if (o->busy && o->threads > 0 &&
            (!to || __atomic_load_n(&o->threads, __ATOMIC_RELAXED) <
                        __atomic_load_n(&to->threads, __ATOMIC_RELAXED)))
            to = o;
    }
    if (to && j->threads > 0) {
        int n = __atomic_exchange_n(&j->threads, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&to->threads, n, __ATOMIC_RELAXED);
        __atomic_add_fetch(&threads_given, n, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&S->lock);
}

/* A trial of a round, on its thread: trained, then its threads given to
 * those of the round still running. */
static void *round_trial(void *arg)
{
    job *j = arg;
    mp_hp_run_trial(j);
    mp_hp_give_threads(j->S, j);
    return NULL;
}

mp_status mp_hp_run_jobs(search *S, job *jobs, pthread_t *th, int n)
{
    job **group = mp_calloc((size_t)(n > 0 ? n : 1), sizeof *group);
    if (!group)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n; k++) {
        jobs[k].beside = n > 1;
        /* side by side on the cpu's share each (S->threads): a count to
         * follow, which the round's finished trials raise */
        jobs[k].threads = n > 1 ? S->threads : 0;
        jobs[k].busy = 1;
        group[k] = &jobs[k];
    }
    pthread_mutex_lock(&S->lock);
    S->group = group;
    S->n_group = n;
    pthread_mutex_unlock(&S->lock);
    if (n == 1)
        mp_hp_run_trial(&jobs[0]);
    else
        for (int k = 0; k < n; k++)
            if (pthread_create(&th[k], NULL, round_trial, &jobs[k]) != 0) {
                round_trial(&jobs[k]);
                th[k] = 0;
            }
    if (n > 1)
        for (int k = 0; k < n; k++)
            if (th[k])
                pthread_join(th[k], NULL);
    pthread_mutex_lock(&S->lock);
    S->group = NULL;
    S->n_group = 0;
    pthread_mutex_unlock(&S->lock);
    mp_free(group);
    for (int k = 0; k < n; k++)
        jobs[k].threads = 0;   /* alone: the run's own count */
    for (int k = 0; k < n; k++)
        if (jobs[k].again && !jobs[k].st)
            mp_hp_train_again_alone(&jobs[k]);
    mp_status st = MP_OK;
    for (int k = 0; k < n && !st; k++)
        if (jobs[k].st == MP_ERR_INTERRUPTED)
            st = mp_hp_interrupted(S, jobs[k].i);
        else if (jobs[k].st)
            st = mp_error_set(jobs[k].st, "%s", jobs[k].error);
    return st;
}

mp_status mp_run_hpopt(const mp_options *hp, const mp_options *base, mp_summary **out)
{
    if (out)
        *out = NULL;
    mp_status st = mp_run_check(hp, "hpopt");
    if (st)
        return st;
    if (!base || strcmp(mp_options_verb(base), "train") != 0)
        return mp_error_set(MP_ERR_ARG, "mp_run_hpopt: the base options must be train options");
    if (!mp_options_get(base, "data"))
        return mp_error_set(MP_ERR_ARG, "--data is required (the dataset every trial trains on)");
    mp_hpopt_args a;
    if ((st = mp_options_apply(hp, &a)))
        return st;
    if (!a.halving && (mp_options_is_set(hp, "halving-eta") ||
                       mp_options_is_set(hp, "halving-min-epochs")))
        return mp_error_set(MP_ERR_ARG, "--halving-eta and --halving-min-epochs are for "
                            "--halving: give it too, or leave them out");
    mp_hp_space space;
    if ((st = mp_hp_space_read(&space, a.space_path)))
        return st;
    search S;
    memset(&S, 0, sizeof S);
    int made_out = 0, made_sub = 0, wrote_identity = 0;   /* what this run made */
    S.a = &a;
    S.base = base;
    S.space = &space;
    pthread_mutex_init(&S.lock, NULL);
    snprintf(S.path, sizeof S.path, "%s/trials.jsonl", a.out_dir);
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/trials", a.out_dir);
    S.t = mp_calloc((size_t)a.trials, sizeof *S.t);
    double *xs = mp_calloc((size_t)a.trials * (size_t)space.n, sizeof *xs);
    double *losses = mp_calloc((size_t)a.trials, sizeof *losses);
    job *jobs = mp_calloc((size_t)a.jobs, sizeof *jobs);
    pthread_t *th = mp_calloc((size_t)a.jobs, sizeof *th);
    if (!S.t || !xs || !losses || !jobs || !th) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < a.trials; i++)
        S.t[i].x = xs + (size_t)i * (size_t)space.n;
    metric_of(&S, mp_options_is_set(base, "metric") ? mp_options_get(base, "metric") : NULL);
    if ((a.halving && (st = mp_hp_halving_open(&S))) || (st = mp_mkdir(a.out_dir, &made_out)) ||
        (st = mp_mkdir(sub, &made_sub)) ||
        (st = check_identity(&a, &space, base, &wrote_identity)) || (st = load_trials(&S)))
        goto done;
    const char *q = mp_options_get(base, "quiet");
    S.quiet = q && (!strcmp(q, "true") || !strcmp(q, "1") || !strcmp(q, "yes") || !strcmp(q, "on"));
    if (a.jobs > 1 && !mp_options_is_set(base, "threads")) {
        int n = mp_threads_get() / a.jobs;
        S.threads = n > 0 ? n : 1;
    }
    /* trials side by side on one GPU: each sized for its share of it, as an
     * ensemble's members are (bench/RESULTS.md, "Wide models' products on
     * cuBLAS, and hpopt's trials side by side") */
    if (a.jobs > 1 && mp_hp_on_gpu(base) && !mp_options_is_set(base, "gpu-share"))
        S.gpu_share = a.jobs;
    /* the data read and featurized once, not by every trial (hiv: ~4 s of
     * one core each, the GPU idle meanwhile), when a trial is left to run */
    int left = 0;
    for (int i = 0; i < a.trials; i++)
        left += !S.t[i].done;
    if (left && (st = mp_train_shared_open(&S.shared, base)))
        goto done;

    mp_hp_proposer prop = { (mp_hp_method)a.method, a.seed, a.startup, a.candidates };
    int n_failed = 0;
    const int queued = !S.h && a.method == MP_HP_RANDOM && a.jobs > 1;
    if (S.h)
        st = mp_hp_halving_run(&S, &prop, xs, losses, jobs, th);
    else if (queued && (st = mp_hp_run_queue(&S, &prop, xs, losses)) == MP_OK)
        prune_models(&S, a.trials);
    for (int r0 = 0; !S.h && !queued && r0 < a.trials && !st; r0 += a.jobs) {
        int r1 = r0 + a.jobs < a.trials ? r0 + a.jobs : a.trials;
        if (mp_interrupt_check()) {   /* a stop between two rounds */
            st = mp_hp_interrupted(&S, -1);
            break;
        }
        /* the history: every trial of the rounds before */
        for (int i = 0; i < r0; i++)
            losses[i] = S.t[i].failed ? NAN : S.t[i].loss;
        int n_run = 0;
        for (int i = r0; i < r1 && !st; i++)
            if (!(st = mp_hp_propose_trial(&S, &prop, xs, losses, r0, i)) && !S.t[i].done)
                jobs[n_run++] = (job){ .S = &S, .i = i };
        if (!st)
            st = mp_hp_run_jobs(&S, jobs, th, n_run);
        prune_models(&S, r1);
    }
    int n_stopped = 0;
    for (int i = 0; i < a.trials; i++) {
        n_failed += S.t[i].done && S.t[i].failed;
        n_stopped += S.h && S.t[i].state == HP_STOPPED;
    }
    int best = mp_hp_best_trial(&S);
    if (!st && best < 0)
        st = mp_error_set(MP_ERR_ARG, "no trial of %d finished with a score (see %s)", a.trials,
                          S.path);
    if (!st)
        st = write_best(&S, best);
    mp_summary *s = NULL;
    if (!st)
        st = mp_summary_new(&s);
    if (!st) {
        char best_ini[1300];
        snprintf(best_ini, sizeof best_ini, "%s/best.ini", a.out_dir);
        (void)((st = mp_summary_put_number(s, "best_trial", best)) ||
               (st = mp_summary_put_number(s, "best_val", S.t[best].val)) ||
               (st = mp_summary_put_number(s, "best_test", S.t[best].test)) ||
               (st = mp_summary_put_number(s, "trials", a.trials)) ||
               (st = mp_summary_put_number(s, "failed", n_failed)) ||
               (st = mp_summary_put_number(s, "stopped", n_stopped)) ||
               (st = mp_summary_put_text(s, "metric", S.metric)) ||
               (st = mp_summary_put_text(s, "best_config", best_ini)) ||
               (st = mp_summary_put_text(s, "trials_file", S.path)));
    }
    (void)mp_summary_finish(st, s, out);
done:
    if (st && S.t && n_recorded(&S) == 0)   /* nothing to resume: leave nothing */
        undo_start(&a, wrote_identity, made_sub, made_out);
    mp_free(th);
    mp_free(jobs);
    mp_free(losses);
    mp_free(xs);
    mp_free(S.t);
    mp_hp_halving_free(&S);
    mp_train_shared_free(S.shared);
    mp_hp_space_free(&space);
    pthread_mutex_destroy(&S.lock);
    return st;
}
