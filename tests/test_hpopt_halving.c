/*
 * test_hpopt_halving.c - issue 12's successive halving: train --stop-after
 * (a run stopped after epoch K of its epochs and resumed ends bit for bit
 * as the run never stopped, an ensemble side by side too), and `molprop
 * hpopt --halving` (the rungs and stops in the trials file, the same search
 * for a seed and a --jobs, a search stopped mid-way and resumed writes the
 * file of the search never stopped, the trial that reaches the last rung is
 * the model of its configuration trained straight through, bad values
 * refused with messages).
 */
#include "test.h"
#include "gpu_test.h"
#include "internal.h"   /* every module header */
#include "api/api.h"     /* mp_train_shared */

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ===================================================================== */
/* train --stop-after                                                     */
/* ===================================================================== */

static mp_train_opts small_opts(const char *backend, const char *dir)
{
    mp_train_opts o = mp_train_opts_default();
    o.backend = backend;
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = 5;
    o.hidden = 24;
    o.dropout = 0.1;
    o.ensemble_size = 2;
    o.member_jobs = 2;   /* side by side: each member stops on its own thread */
    o.threads = 2;
    o.quiet = 1;
    o.save_dir = dir;
    return o;
}

/* The epochs a run trained: how many (all members), the first. */
typedef struct {
    int n, first;
} epochs_seen;

static void count_epoch(void *arg, int member, int epoch, double loss, double val)
{
    epochs_seen *e = arg;
    (void)member;
    (void)loss;
    (void)val;
    __atomic_fetch_add(&e->n, 1, __ATOMIC_RELAXED);
    int f = __atomic_load_n(&e->first, __ATOMIC_RELAXED);
    while ((f == 0 || epoch < f) &&
           !__atomic_compare_exchange_n(&e->first, &f, epoch, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
}

/* On `backend` (into tmp/<name>-ref, -cut): the straight run; the run
 * stopped after epoch 2, resumed to the same stop (no epoch), to epoch 4,
 * to the end: the straight run's model, byte for byte. */
static void stop_after_bitwise(mp_test_result *mp__r, const char *backend, const char *name)
{
    char ref[1300], cut[1300], ck[1300], model[1300], dref[1100], dcut[1100];
    snprintf(dref, sizeof dref, "%s/%s-ref", mp_test_tmpdir(), name);
    snprintf(dcut, sizeof dcut, "%s/%s-cut", mp_test_tmpdir(), name);
    snprintf(ref, sizeof ref, "%s/model.mpm", dref);
    snprintf(cut, sizeof cut, "%s/model.mpm", dcut);
    snprintf(ck, sizeof ck, "%s/checkpoint.mpc", dcut);
    snprintf(model, sizeof model, "%s/%s-stopped.mpm", mp_test_tmpdir(), name);
    mp_train_result r;
    mp_train_opts a = small_opts(backend, dref);
    CHECK_OK(mp_train(&a, &r));
    CHECK_EQ_INT(r.stopped_epoch, 0);
    mp_train_result_free(&r);

    /* stopped after epoch 2 of 5: scored and saved, the checkpoint kept */
    mp_train_opts b = small_opts(backend, dcut);
    b.stop_after = 2;
    CHECK_OK(mp_train(&b, &r));
    CHECK_EQ_INT(r.stopped_epoch, 2);
    CHECK(r.best_epoch[0] <= 2 && r.best_epoch[1] <= 2);
    mp_train_result_free(&r);
    CHECK_MSG(exists(ck), "the stopped run left no checkpoint");
    CHECK_MSG(!mp_test_same_file(ref, cut), "the model after 2 epochs is the one after 5");
    CHECK(rename(cut, model) == 0);

    /* resumed to the same stop: no epoch trained, the same model again */
    epochs_seen seen = { 0, 0 };
    b.on_epoch = count_epoch;
    b.on_epoch_arg = &seen;
    b.resume = b.save_dir;
    CHECK_OK(mp_train(&b, &r));
    CHECK_MSG(seen.n == 0, "a resume to where the run stopped trained %d epochs", seen.n);
    CHECK_EQ_INT(r.stopped_epoch, 2);
    mp_train_result_free(&r);
    CHECK_MSG(mp_test_same_file(model, cut), "a resume to where it stopped changed the model");

    /* on to a later stop, then to the end: the straight run's model */
    b.stop_after = 4;
    CHECK_OK(mp_train(&b, &r));
    CHECK_EQ_INT(r.stopped_epoch, 4);
    /* on from the checkpoint: epochs 3 and 4 of both members, no more */
    CHECK_MSG(seen.n == 4 && seen.first == 3, "resumed to epoch 4: %d member epochs from epoch "
              "%d", seen.n, seen.first);
    mp_train_result_free(&r);
    b.stop_after = 0;
    CHECK_OK(mp_train(&b, &r));
    CHECK_EQ_INT(r.stopped_epoch, 0);
    mp_train_result_free(&r);
    CHECK_MSG(mp_test_same_file(ref, cut), "stopped at 2 and 4 and resumed: not the straight run's "
              "model");
    CHECK_MSG(!exists(ck), "the run that ended left its checkpoint");
}

MP_TEST(train_stop_after_and_resume_is_the_straight_run_bitwise)
{
    stop_after_bitwise(mp__r, "cpu", "sa");
}

/* make test-gpu: the resident source with captured graphs, the members
 * side by side on their streams, in fp32 and bf16 */
MP_TEST(gpu_train_stop_after_and_resume_is_the_straight_run_bitwise)
{
    MP_NEED_GPU();
    stop_after_bitwise(mp__r, "cuda", "gsa");
}

MP_TEST(gpu_train_stop_after_bf16_is_the_straight_run_bitwise)
{
    MP_NEED_GPU();
    stop_after_bitwise(mp__r, "cuda:bf16", "gsa16");
}

MP_TEST(train_stop_after_bad_values_are_refused)
{
    mp_train_result r;
    mp_train_opts o = small_opts("cpu", tmp("sa-bad"));
    o.stop_after = 6;
    CHECK(mp_train(&o, &r) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "stop-after") && strstr(mp_error_message(), "(5)"),
              "%s", mp_error_message());
    o.stop_after = -1;
    CHECK(mp_train(&o, &r) == MP_ERR_ARG);
    o.stop_after = 2;
    o.save_dir = NULL;
    CHECK(mp_train(&o, &r) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "--save-dir"), "%s", mp_error_message());
    mp_options *t = NULL;
    CHECK_OK(mp_options_create(&t, "train"));
    CHECK(mp_options_set(t, "stop-after", "x") == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "--stop-after"), "%s", mp_error_message());
    mp_options_free(t);
}

/* ===================================================================== */
/* hpopt --halving                                                        */
/* ===================================================================== */

/* The first 150 rows of esol, so that a trial takes a fraction of a second. */
static const char *small_esol(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/esol150h.csv", mp_test_tmpdir());
    if (exists(path))
        return path;
    mp_dataset *d;
    mp_column_spec spec = { 0 };
    if (mp_dataset_load(&d, mp_test_shared("datasets/esol.csv.gz"), &spec) != MP_OK)
        return NULL;
    FILE *fp = fopen(path, "w");
    if (!fp) {
        mp_dataset_free(d);
        return NULL;
    }
    fprintf(fp, "smiles,logS\n");
    for (size_t i = 0; i < 150 && i < d->n_rows; i++)
        fprintf(fp, "%s,%.6f\n", d->smiles[i], d->targets[i * d->n_tasks]);
    fclose(fp);
    mp_dataset_free(d);
    return path;
}

static const char *space_file(void)
{
    const char *p = tmp("halving_space.ini");
    FILE *fp = fopen(p, "w");
    if (fp) {
        fputs("[space]\nhidden = int 8 40 8\ndropout = real 0 0.3 0.1\n"
              "aggregation = choice mean sum\n", fp);
        fclose(fp);
    }
    return p;
}

/* A halving search of 5 trials of 9 epochs (rungs 1, 3, 9, eta 3) into out. */
static mp_status search_on(const char *device, const char *trials, const char *out,
                           const char *method, int jobs, const char *keep, mp_summary **s)
{
    mp_options *hp = NULL, *base = NULL;
    char j[16];
    snprintf(j, sizeof j, "%d", jobs);
    mp_status st;
    if ((st = mp_options_create(&hp, "hpopt")) || (st = mp_options_create(&base, "train")) ||
        (st = mp_options_set(base, "data", small_esol())) ||
        (st = mp_options_set(base, "epochs", "9")) ||
        (st = mp_options_set(base, "batch-size", "25")) ||
        (st = mp_options_set(base, "threads", "1")) ||
        (st = mp_options_set(base, "quiet", "true")) ||
        (device && (st = mp_options_set(base, "device", device))) ||
        (st = mp_options_set(hp, "space", space_file())) ||
        (st = mp_options_set(hp, "method", method)) ||
        (st = mp_options_set(hp, "startup-trials", "2")) ||
        (st = mp_options_set(hp, "trials", trials)) || (st = mp_options_set(hp, "jobs", j)) ||
        (st = mp_options_set(hp, "keep", keep)) || (st = mp_options_set(hp, "out", out)) ||
        (st = mp_options_set(hp, "halving", "true")) ||
        (st = mp_options_set(hp, "halving-min-epochs", "1")))
        goto done;
    st = mp_run_hpopt(hp, base, s);
done:
    mp_options_free(hp);
    mp_options_free(base);
    return st;
}

static mp_status search(const char *out, const char *method, int jobs, const char *keep,
                        mp_summary **s)
{
    return search_on(NULL, "5", out, method, jobs, keep, s);
}

/* The lines of OUT/trials.jsonl without their "seconds", sorted when asked
 * (side by side, the lines of a round come in any order). */
static char *trials_text(const char *out, int sorted)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/trials.jsonl", out);
    char *b = mp_test_slurp(path, NULL);
    for (char *s = b ? strstr(b, ",\"seconds\":") : NULL; s; s = strstr(s, ",\"seconds\":")) {
        char *e = strchr(s, '}');
        if (!e)
            break;
        memmove(s, e, strlen(e) + 1);
    }
    if (!b || !sorted)
        return b;
    char *lines[256];
    int n = 0;
    for (char *s = strtok(b, "\n"); s && n < 256; s = strtok(NULL, "\n"))
        lines[n++] = s;
    for (int i = 1; i < n; i++)   /* insertion sort: a few lines */
        for (int k = i; k > 0 && strcmp(lines[k - 1], lines[k]) > 0; k--) {
            char *t = lines[k];
            lines[k] = lines[k - 1];
            lines[k - 1] = t;
        }
    char *out_text = mp_malloc(64 * 1024);
    if (!out_text) {
        mp_free(b);
        return NULL;
    }
    out_text[0] = 0;
    size_t at = 0;
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(out_text + at, 64 * 1024 - at, "%s\n", lines[i]);
    mp_free(b);
    return out_text;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *s = text; s && (s = strstr(s, needle)); s += strlen(needle))
        n++;
    return n;
}

/* A search on `device` (NULL: the cpu) with --jobs `jobs`: its file's rungs
 * and stops, and the trial that reached the last rung against its
 * configuration trained straight. */
static void halving_records(mp_test_result *mp__r, const char *device, int jobs,
                            const char *name)
{
    CHECK(small_esol() != NULL);
    char out[1100], straight[1100];
    snprintf(out, sizeof out, "%s/%s", mp_test_tmpdir(), name);
    snprintf(straight, sizeof straight, "%s/%s-straight", mp_test_tmpdir(), name);
    mp_summary *s = NULL;
    CHECK_OK(search_on(device, "5", out, "random", jobs, "all", &s));
    CHECK(mp_summary_number(s, "stopped") == 4);
    char *t = trials_text(out, 0);
    CHECK(t != NULL);
    /* 5 trials at rung 0 (1 epoch): 2 go on, 3 stop; at rung 1 (3 epochs): 1 goes on */
    CHECK_EQ_INT(count(t, "\"rung\":0,\"epochs\":1,"), 5 + 3);
    CHECK_EQ_INT(count(t, "\"rung\":1,\"epochs\":3,"), 2 + 1);
    CHECK_EQ_INT(count(t, "\"rung\":2,\"epochs\":9,"), 1);
    CHECK_EQ_INT(count(t, "\"status\":\"stopped\""), 4);
    CHECK_EQ_INT(count(t, "\"status\":\"ok\""), 1);
    /* the stopped ones are the worst of their rung */
    double worst_kept = -1e300, best_stopped = 1e300;
    for (char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(strstr(l, "\"rung\":"), "\"rung\":0", 8) != 0)
            continue;
        double loss = atof(strstr(l, "\"loss\":") + 7);
        int trial = atoi(l + strlen("{\"trial\":"));
        char want[64];
        snprintf(want, sizeof want, "{\"trial\":%d,\"rung\":1,", trial);
        if (strstr(l, "\"status\":\"stopped\"") && loss < best_stopped)
            best_stopped = loss;
        else if (strstr(t, want) && loss > worst_kept)
            worst_kept = loss;
    }
    CHECK_MSG(worst_kept <= best_stopped, "a trial stopped at rung 0 (loss %g) beat one kept "
              "(%g)", best_stopped, worst_kept);
    mp_free(t);

    /* the trial that reached 9 epochs is its configuration trained
     * straight through (best.ini), byte for byte */
    int best = (int)mp_summary_number(s, "best_trial");
    mp_options *o = NULL;
    mp_summary *ts = NULL;
    CHECK_OK(mp_options_create(&o, "train"));
    CHECK_OK(mp_options_read_config(o, mp_summary_text(s, "best_config")));
    CHECK_OK(mp_options_set(o, "save-dir", straight));
    CHECK_OK(mp_options_set(o, "quiet", "true"));
    CHECK_OK(mp_run_train(o, &ts));
    mp_options_free(o);
    mp_summary_free(ts);
    char a[1300], b[1300];
    snprintf(a, sizeof a, "%s/trials/%03d/model.mpm", out, best);
    snprintf(b, sizeof b, "%s/model.mpm", straight);
    CHECK_MSG(mp_test_same_file(a, b), "trial %d's model differs from its configuration trained "
              "straight", best);
    snprintf(a, sizeof a, "%s/trials/%03d/checkpoint.mpc", out, best);
    CHECK_MSG(!exists(a), "the finished trial kept its checkpoint");
    mp_summary_free(s);
}

MP_TEST(hpopt_halving_records_rungs_and_stops)
{
    halving_records(mp__r, NULL, 1, "halving-a");
}

/* make test-gpu: trials side by side on the GPU, each on its own stream */
MP_TEST(gpu_hpopt_halving_records_rungs_and_stops)
{
    MP_NEED_GPU();
    halving_records(mp__r, "gpu", 2, "gpu-halving");
}

MP_TEST(hpopt_halving_is_the_same_for_a_seed_and_jobs)
{
    CHECK(small_esol() != NULL);
    mp_summary *s = NULL;
    CHECK_OK(search(tmp("halving-j1"), "tpe", 2, "none", &s));
    mp_summary_free(s);
    CHECK_OK(search(tmp("halving-j2"), "tpe", 2, "none", &s));
    mp_summary_free(s);
    char *a = trials_text(tmp("halving-j1"), 1), *b = trials_text(tmp("halving-j2"), 1);
    CHECK(a && b);
    CHECK_MSG(!strcmp(a, b), "two searches of one seed and --jobs 2 differ:\n%s\n%s", a, b);
    mp_free(a);
    mp_free(b);
    char dir[1300];
    snprintf(dir, sizeof dir, "%s/trials/000", tmp("halving-j2"));
    CHECK_MSG(!exists(dir), "--keep none left %s", dir);
}

MP_TEST(hpopt_halving_resumes_to_the_uninterrupted_search)
{
    CHECK(small_esol() != NULL);
    mp_summary *s = NULL;
    mp_interrupt_clear();
    long p0 = mp_interrupt_polls();
    CHECK_OK(search(tmp("halving-ref"), "tpe", 1, "best", &s));
    long polls = mp_interrupt_polls() - p0;
    mp_summary_free(s);
    char *ref = trials_text(tmp("halving-ref"), 0);
    CHECK(ref != NULL);
    /* the same search again: nothing to do, the file as it was */
    CHECK_OK(search(tmp("halving-ref"), "tpe", 1, "best", &s));
    mp_summary_free(s);
    char *again = trials_text(tmp("halving-ref"), 0);
    CHECK_MSG(again && !strcmp(again, ref), "a rerun of a finished search changed its file");
    mp_free(again);
    /* more trials would change its rankings: refused as another search */
    CHECK(search_on(NULL, "6", tmp("halving-ref"), "tpe", 1, "best", &s) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "records another search"), "%s", mp_error_message());
    /* the search reads and featurizes the data once, first (api.h
     * mp_train_shared_open): its polls come before any trial's */
    mp_options *base = NULL;
    mp_train_shared *sh = NULL;
    long f0 = mp_interrupt_polls();
    CHECK_OK(mp_options_create(&base, "train"));
    CHECK_OK(mp_options_set(base, "data", small_esol()));
    CHECK_OK(mp_options_set(base, "threads", "1"));
    CHECK_OK(mp_train_shared_open(&sh, base));
    long feat = mp_interrupt_polls() - f0;
    mp_train_shared_free(sh);
    mp_options_free(base);
    CHECK(feat < polls);
    /* stopped in rung 0, in rung 1 and in the last rung (of the trials'
     * polls) */
    static const double at[] = { 0.3, 0.6, 0.95 };
    int last = 0;
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "halving-cut%d", k);
        const char *out = tmp(name);
        mp_interrupt_after_polls(feat + (long)(at[k] * (double)(polls - feat)), SIGINT);
        mp_status st = search(out, "tpe", 1, "best", &s);
        mp_interrupt_clear();
        CHECK_MSG(st == MP_ERR_INTERRUPTED, "stop %d: %s (%s)", k, mp_status_name(st),
                  mp_error_message());
        char *part = trials_text(out, 0);
        int n_part = count(part, "\n");
        /* the stops land further and further in the search */
        CHECK_MSG(n_part > last, "stop %d after %d lines (the one before: %d)", k, n_part, last);
        last = n_part;
        CHECK_MSG(part && strlen(part) < strlen(ref) && !strncmp(part, ref, strlen(part)),
                  "stop %d: the file so far is not the start of the search's:\n%s", k,
                  part ? part : "-");
        fprintf(stdout, "    stop %d: after %d of %d lines\n", k, n_part, count(ref, "\n"));
        mp_free(part);
        CHECK_OK(search(out, "tpe", 1, "best", &s));
        mp_summary_free(s);
        char *b = trials_text(out, 0);
        CHECK_MSG(b && !strcmp(ref, b), "stop %d: the resumed search differs:\n%s\n%s", k, ref,
                  b ? b : "-");
        mp_free(b);
    }
    mp_free(ref);
}

MP_TEST(hpopt_halving_bad_values_are_refused)
{
    mp_options *hp = NULL, *base = NULL;
    CHECK_OK(mp_options_create(&hp, "hpopt"));
    CHECK_OK(mp_options_create(&base, "train"));
    CHECK(mp_options_set(hp, "halving-eta", "1") == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "--halving-eta"), "%s", mp_error_message());
    CHECK(mp_options_set(hp, "halving-min-epochs", "0") == MP_ERR_ARG);
    CHECK_OK(mp_options_set(base, "data", mp_test_shared("datasets/esol.csv.gz")));
    CHECK_OK(mp_options_set(base, "epochs", "9"));
    CHECK_OK(mp_options_set(hp, "out", tmp("halving-bad")));
    CHECK_OK(mp_options_set(hp, "space", space_file()));
    /* an eta without --halving */
    CHECK_OK(mp_options_set(hp, "halving-eta", "2"));
    CHECK(mp_run_hpopt(hp, base, NULL) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "for --halving"), "%s", mp_error_message());
    /* no rung below the epochs */
    CHECK_OK(mp_options_set(hp, "halving", "true"));
    CHECK_OK(mp_options_set(hp, "halving-min-epochs", "5"));
    CHECK(mp_run_hpopt(hp, base, NULL) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "no rung below --epochs 9"), "%s", mp_error_message());
    /* the trials' --stop-after is the search's */
    CHECK_OK(mp_options_set(hp, "halving-min-epochs", "auto"));
    CHECK_OK(mp_options_set(base, "stop-after", "3"));
    CHECK(mp_run_hpopt(hp, base, NULL) == MP_ERR_ARG);
    CHECK_MSG(strstr(mp_error_message(), "--stop-after"), "%s", mp_error_message());
    CHECK_MSG(!exists(tmp("halving-bad")), "a refused search left its folder");
    mp_options_free(hp);
    mp_options_free(base);
}
