/*
 * test_batches.c - the batch source seam of the trainer (run/batches.h,
 * run/fit.h) and the options that replaced the trainer's environment
 * variables (mp_train_opts.slot_classes, .profile).
 *
 *   - the host and the resident source train the same model through
 *     mp_train on the ref backend (whose sums run in order, so the slots'
 *     padding moves no bit; only the resident Adam's float schedule rounds
 *     otherwise: 1e-6), with dropout and several slot classes, for the
 *     D-MPNN and the FFN; in the loop, the first loss bitwise and the
 *     dropout stream left in the same state;
 *   - a source of the test's own, plugged into the epoch loop (mp_fit_member),
 *     sees the documented protocol (prepare, then launch / prepare the next /
 *     finish, no prepare after the last launch), orders that are the member's
 *     shuffle stream epoch by epoch, the Noam schedule's rates, and trains
 *     bitwise the loop's own host source's model;
 *   - calls out of turn are refused, naming the source;
 *   - slot_classes bounds the resident source's classes and profile writes
 *     the per-epoch lines, while MOLPROP_SLOT_CLASSES and MOLPROP_GPU_PROFILE
 *     change nothing any more; bad values are refused.
 */
#include "test.h"
#include "gpu_test.h"

#include "models/model_impl.h"   /* the dropout stream's state */
#include "models/schedule.h"
#include "run/modelfile.h"
#include "run/batches.h"
#include "run/fit.h"
#include "run/trainer.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ===================================================================== */
/* Host == resident through mp_train                                      */
/* ===================================================================== */

/* mp_train on ESOL (3 epochs, hidden 24, one thread) into save_dir; the
 * model file read back into *mf. */
static mp_status train_file(const char *backend, int resident, mp_model_kind kind,
                            double dropout, int slot_classes, const char *name,
                            mp_modelfile **mf, mp_train_result *r)
{
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/%s", mp_test_tmpdir(), name);
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = 3;
    o.hidden = 24;
    o.ffn_hidden = 16;
    o.model = kind;
    o.features = kind == MP_MODEL_FFN ? MP_FEAT_MORGAN_COUNT : 0;
    o.dropout = dropout;
    o.threads = 1;
    o.quiet = 1;
    o.backend = backend;
    o.resident = resident;
    o.slot_classes = slot_classes;
    o.save_dir = dir;
    mp_status st = mp_train(&o, r);
    if (st)
        return st;
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    return mp_modelfile_read(mf, path);
}

/* ||a - b|| / ||b|| over every tensor of two model files of one shape
 * (INFINITY when the shapes differ). */
static double file_rel(const mp_modelfile *a, const mp_modelfile *b)
{
    double num = 0, den = 0;
    if (a->n_tensors != b->n_tensors)
        return INFINITY;
    for (size_t t = 0; t < a->n_tensors; t++) {
        uint64_t n = mp_tensor_numel(&a->tensors[t]);
        if (n != mp_tensor_numel(&b->tensors[t]))
            return INFINITY;
        for (uint64_t i = 0; i < n; i++) {
            double x = a->tensors[t].data[i], y = b->tensors[t].data[i];
            num += (x - y) * (x - y);
            den += y * y;
        }
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

/* The host and the resident source through the whole of mp_train on ref:
 * the same batches, masks and schedule; only Adam's step size differs, by
 * the float rounding of the device schedule (ops.h: adam_sched), so the
 * models agree to 1e-6 and pick the same epoch; a model trained with
 * other dropout masks is far off (the bound can fail). */
static void host_vs_resident_ref(mp_test_result *mp__r, mp_model_kind kind, double dropout,
                                 int slot_classes)
{
    mp_modelfile *a = NULL, *b = NULL, *c = NULL;
    mp_train_result ra, rb, rc;
    CHECK_OK(train_file("ref", 0, kind, dropout, slot_classes, "src_host", &a, &ra));
    CHECK_OK(train_file("ref", 1, kind, dropout, slot_classes, "src_res", &b, &rb));
    CHECK_OK(train_file("ref", 1, kind, dropout * 1.5, slot_classes, "src_other", &c, &rc));
    double e = file_rel(b, a), other = file_rel(c, a);
    double val_rel = fabs(rb.val_mean - ra.val_mean) / ra.val_mean;
    int same_best = ra.best_epoch[0] == rb.best_epoch[0];
    mp_modelfile_free(a);
    mp_modelfile_free(b);
    mp_modelfile_free(c);
    mp_train_result_free(&ra);
    mp_train_result_free(&rb);
    mp_train_result_free(&rc);
    printf("    %s: resident vs host parameters %.3g (other masks: %.3g), val rmse %.3g\n",
           kind == MP_MODEL_FFN ? "ffn" : "dmpnn", e, other, val_rel);
    CHECK_MSG(e <= 1e-6 && val_rel <= 1e-6, "%s, dropout %.2f, %d slot classes: resident vs "
              "host source: parameters %g, validation rmse %g apart",
              kind == MP_MODEL_FFN ? "ffn" : "dmpnn", dropout, slot_classes, e, val_rel);
    CHECK(same_best);
    CHECK_MSG(other > 100 * e && other > 1e-4, "other masks: only %g apart", other);
}

MP_TEST(batches_host_vs_resident_ref_dmpnn)
{
    host_vs_resident_ref(mp__r, MP_MODEL_DMPNN, 0.1, 4);
}

MP_TEST(batches_host_vs_resident_ref_ffn)
{
    host_vs_resident_ref(mp__r, MP_MODEL_FFN, 0.2, 1);
}

/* ===================================================================== */
/* A source of the test's own in the epoch loop                           */
/* ===================================================================== */

#define MAX_CALLS 64

/* Runs its steps through a host source inside, and records what the loop
 * hands it: the calls in order ('P', 'L', 'F'), each prepared epoch's order
 * and rates. */
typedef struct {
    mp_batch_source  base;
    mp_batch_source *inner;
    char             calls[MAX_CALLS + 1];
    int              n_calls;
    int              epochs;          /* prepared so far            */
    size_t          *orders;          /* epochs x n_train           */
    double          *rates;           /* epochs x n_steps           */
    double          *losses;          /* epochs x n_steps           */
    int              finished;        /* epochs finished so far     */
    int32_t          n_train;
    int              max_epochs;
} rec_source;

static void rec_call(rec_source *r, char c)
{
    if (r->n_calls < MAX_CALLS)
        r->calls[r->n_calls++] = c;
}

static mp_status rec_prepare(mp_batch_source *s, const size_t *order, const double *lrs)
{
    rec_source *r = (rec_source *)s;
    rec_call(r, 'P');
    if (r->epochs < r->max_epochs) {
        memcpy(r->orders + (size_t)r->epochs * (size_t)r->n_train, order,
               sizeof(size_t) * (size_t)r->n_train);
        memcpy(r->rates + (size_t)r->epochs * (size_t)s->n_steps, lrs,
               sizeof(double) * (size_t)s->n_steps);
    }
    r->epochs++;
    return mp_batch_source_prepare(r->inner, order, lrs);
}

static mp_status rec_launch(mp_batch_source *s)
{
    rec_source *r = (rec_source *)s;
    rec_call(r, 'L');
    return mp_batch_source_launch(r->inner);
}

static mp_status rec_finish(mp_batch_source *s, double *losses)
{
    rec_source *r = (rec_source *)s;
    rec_call(r, 'F');
    mp_status st = mp_batch_source_finish(r->inner, losses);
    if (st == MP_OK && r->finished < r->max_epochs)
        memcpy(r->losses + (size_t)r->finished * (size_t)s->n_steps, losses,
               sizeof(double) * (size_t)s->n_steps);
    r->finished++;
    return st;
}

static void rec_profile(const mp_batch_source *s, int epoch, FILE *fp) { fputc('\n', fp); }

static void rec_free(mp_batch_source *s)
{
    rec_source *r = (rec_source *)s;
    mp_batch_source_free(r->inner);
    mp_free(r->orders);
    mp_free(r->rates);
    mp_free(r->losses);
}

static const mp_batch_source_ops rec_ops = {
    "recorder", rec_prepare, rec_launch, rec_finish, rec_profile, rec_free, NULL, NULL,
};

/* A recorder of max_epochs epochs around `inner` (which it then owns). */
static mp_status rec_init(rec_source *r, mp_batch_source *inner, int32_t n_train,
                          int max_epochs)
{
    memset(r, 0, sizeof *r);
    r->base.ops = &rec_ops;
    r->base.m = inner->m;
    r->base.n_steps = inner->n_steps;
    r->inner = inner;
    r->n_train = n_train;
    r->max_epochs = max_epochs;
    size_t steps = (size_t)inner->n_steps * (size_t)max_epochs;
    r->orders = mp_malloc(sizeof(size_t) * (size_t)n_train * (size_t)max_epochs);
    r->rates = mp_malloc(sizeof(double) * steps);
    r->losses = mp_malloc(sizeof(double) * steps);
    return r->orders && r->rates && r->losses ? MP_OK
                                              : mp_error_set(MP_ERR_NOMEM, "test: out of memory");
}


/* The fit context of a 3-epoch member on ESOL's first 600 molecules
 * (train: every second one of the first 400, validation: rows 400..599),
 * targets as floats, on a fresh ensemble of one on `backend` with dropout. */
typedef struct {
    mp_train_opts o;
    mp_fit_ctx    c;
    float        *targets;
    int32_t      *train, *val;
} fit_fixture;

static mp_status fixture_make(fit_fixture *x, uint64_t seed, const char *backend,
                              double dropout)
{
    memset(x, 0, sizeof *x);
    mp_dataset *d;
    mp_features *f;
    mp_status st = mp_test_esol(&d, &f);
    if (st)
        return st;
    x->o = mp_train_opts_default();
    x->o.epochs = 3;
    x->o.batch_size = 32;
    x->o.dropout = dropout;
    x->o.seed = seed;
    x->o.resident = 0;
    x->targets = mp_malloc(sizeof(float) * d->n_rows * d->n_tasks);
    x->train = mp_malloc(sizeof(int32_t) * 200);
    x->val = mp_malloc(sizeof(int32_t) * 200);
    if (!x->targets || !x->train || !x->val)
        return mp_error_set(MP_ERR_NOMEM, "test: out of memory");
    for (size_t i = 0; i < d->n_rows * d->n_tasks; i++)
        x->targets[i] = (float)(d->targets[i] / 2.0);
    for (int32_t i = 0; i < 200; i++) {
        x->train[i] = 2 * i;
        x->val[i] = 400 + i;
    }
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 24;
    cfg.dropout = x->o.dropout;
    mp_ensemble *e = NULL;
    if ((st = mp_ensemble_create(&e, &cfg, 1, seed, backend)))
        return st;
    e->task = MP_TASK_REGRESSION;
    e->n_tasks = 1;
    double mu = 0, sd = 2;
    if ((st = mp_scaler_set(&e->target_scaler, MP_SCALE_TARGETS, 1, &mu, &sd))) {
        mp_ensemble_free(e);
        return st;
    }
    x->c = (mp_fit_ctx){
        .o = &x->o, .d = d, .e = e,
        .batches = { .f = f, .targets = x->targets, .n_tasks = d->n_tasks, .graphs = 1,
                     .train = x->train, .n_train = 200, .batch_size = 32 },
        .val = x->val, .n_val = 200, .metric = MP_METRIC_RMSE, .eval_batch = 64,
    };
    return MP_OK;
}

static void fixture_free(fit_fixture *x)
{
    mp_ensemble_free(x->c.e);
    mp_free(x->targets);
    mp_free(x->train);
    mp_free(x->val);
}

static float *params_of(mp_model *m)
{
    float *p = mp_malloc(sizeof(float) * mp_model_n_params(m));
    if (p && mp_model_get_params(m, p) != MP_OK) {
        mp_free(p);
        return NULL;
    }
    return p;
}

MP_TEST(batches_own_source_in_the_epoch_loop)
{
    enum { E = 3, N = 200, S = (N + 31) / 32 };
    fit_fixture a, b;
    CHECK_OK(fixture_make(&a, 5, "cpu", 0.1));
    CHECK_OK(fixture_make(&b, 5, "cpu", 0.1));
    /* the loop's own host source */
    int best_a = -1, best_b = -1;
    CHECK_OK(mp_fit_member(&a.c, 0, NULL, &best_a));
    /* the recorder around a host source of its own */
    static rec_source rec;
    mp_batch_source *inner = NULL;
    CHECK_OK(mp_batch_source_host(&inner, b.c.e->members[0], &b.c.batches));
    CHECK_OK(rec_init(&rec, inner, N, E));
    CHECK_EQ_INT(rec.base.n_steps, S);
    CHECK_OK(mp_fit_member(&b.c, 0, &rec.base, &best_b));

    /* the protocol: epoch 1 prepared first, each later one between the
     * launch and the finish of the one before */
    CHECK_EQ_STR(rec.calls, "PLPFLPFLF");
    CHECK_EQ_INT(rec.epochs, E);
    /* each epoch's order: the member's shuffle stream (seed + k, stream
     * 201), once per epoch, from the training rows in their given order */
    mp_rng rng;
    mp_rng_seed(&rng, 5, 201);
    size_t want[N];
    for (int i = 0; i < N; i++)
        want[i] = (size_t)(2 * i);
    int orders_ok = 1;
    for (int ep = 0; ep < E; ep++) {
        mp_rng_shuffle(&rng, want, N);
        orders_ok &= memcmp(want, rec.orders + (size_t)ep * N, sizeof want) == 0;
    }
    CHECK_MSG(orders_ok, "the epochs' orders are not the member's shuffle stream");
    /* the rates: the Noam schedule step by step over the whole run */
    mp_noam noam;
    CHECK_OK(mp_noam_init(&noam, 2.0, E, N, 32, 1e-4, 1e-3, 1e-4));
    int rates_ok = 1;
    for (int i = 0; i < S * E; i++) {
        rates_ok &= rec.rates[i] == noam.lr;
        mp_noam_step(&noam);
    }
    CHECK_MSG(rates_ok, "the rates handed to the source are not the schedule's");
    /* and the same model, the same best epoch */
    float *pa = params_of(a.c.e->members[0]), *pb = params_of(b.c.e->members[0]);
    CHECK(pa && pb);
    int same = memcmp(pa, pb, sizeof(float) * mp_model_n_params(a.c.e->members[0])) == 0;
    mp_free(pa);
    mp_free(pb);
    CHECK_MSG(same, "a host source behind the recorder trained another model");
    CHECK_EQ_INT(best_a, best_b);
    CHECK(best_a >= 1 && best_a <= E);
    mp_batch_source_free(&rec.base);
    fixture_free(&a);
    fixture_free(&b);
}

/* The host and the resident source in the loop on ref, both behind the
 * recorder: the same orders and rates; the first step's loss bitwise (the
 * same batch and masks, padding exact on ref), every later one to 1e-6
 * (Adam's float schedule on the resident side); the dropout stream left in
 * the same state (the same keys drawn, in the same order); other masks
 * (dropout 0.15) move the losses far more. */
MP_TEST(batches_host_vs_resident_ref_loop)
{
    enum { E = 3, N = 200 };
    static const double drop[3] = { 0.1, 0.1, 0.15 };
    fit_fixture x[3];
    static rec_source rec[3];
    int best[3];
    for (int v = 0; v < 3; v++) {
        CHECK_OK(fixture_make(&x[v], 9, "ref", drop[v]));
        mp_model *m = x[v].c.e->members[0];
        mp_batch_source *inner = NULL;
        mp_resident_source_opts ro = { .use_graph = 0, .n_classes = 3 };
        CHECK_OK(mp_fit_reserve(&x[v].c, 0));
        if (v == 1)
            CHECK_OK(mp_batch_source_resident(&inner, m, &x[v].c.batches, &ro));
        else
            CHECK_OK(mp_batch_source_host(&inner, m, &x[v].c.batches));
        CHECK_OK(rec_init(&rec[v], inner, N, E));
        CHECK_OK(mp_fit_member(&x[v].c, 0, &rec[v].base, &best[v]));
    }
    int S = rec[0].base.n_steps;
    CHECK_EQ_STR(rec[1].calls, rec[0].calls);
    CHECK(memcmp(rec[0].orders, rec[1].orders, sizeof(size_t) * N * E) == 0);
    CHECK(memcmp(rec[0].rates, rec[1].rates, sizeof(double) * (size_t)(S * E)) == 0);
    double worst = 0, other = 0;
    for (int i = 0; i < S * E; i++) {
        double l = rec[0].losses[i];
        worst = fmax(worst, fabs(rec[1].losses[i] - l) / fabs(l));
        other = fmax(other, fabs(rec[2].losses[i] - l) / fabs(l));
    }
    CHECK(rec[1].losses[0] == rec[0].losses[0]);
    CHECK_MSG(worst <= 1e-6, "resident vs host losses %g apart", worst);
    CHECK_MSG(other > 1e-4, "other masks: losses only %g apart", other);
    CHECK(rec[0].losses[S * E - 1] < rec[0].losses[0]);
    mp_model *ma = x[0].c.e->members[0], *mb = x[1].c.e->members[0];
    CHECK(memcmp(&ma->drop_rng, &mb->drop_rng, sizeof ma->drop_rng) == 0);
    CHECK_EQ_INT(best[0], best[1]);
    for (int v = 0; v < 3; v++) {
        mp_batch_source_free(&rec[v].base);
        fixture_free(&x[v]);
    }
}

/* ===================================================================== */
/* The protocol refuses calls out of turn                                 */
/* ===================================================================== */

MP_TEST(batches_protocol_out_of_turn)
{
    fit_fixture x;
    CHECK_OK(fixture_make(&x, 1, "cpu", 0.1));
    mp_model *m = x.c.e->members[0];
    CHECK_OK(mp_fit_reserve(&x.c, 0));
    const char *names[2] = { "host", "resident" };
    for (int kind = 0; kind < 2; kind++) {
        mp_batch_source *s = NULL;
        mp_resident_source_opts ro = { .use_graph = 0, .n_classes = 2 };
        if (kind == 0)
            CHECK_OK(mp_batch_source_host(&s, m, &x.c.batches));
        else
            CHECK_OK(mp_batch_source_resident(&s, m, &x.c.batches, &ro));
        CHECK_EQ_STR(s->ops->name, names[kind]);
        size_t order[200];
        double lrs[7], losses[7];
        for (int i = 0; i < 200; i++)
            order[i] = (size_t)x.train[199 - i];
        for (int i = 0; i < 7; i++)
            lrs[i] = 1e-3;
        CHECK(mp_batch_source_launch(s) == MP_ERR_ARG);
        CHECK(strstr(mp_error_message(), names[kind]) && strstr(mp_error_message(), "launch"));
        CHECK(mp_batch_source_finish(s, losses) == MP_ERR_ARG);
        CHECK_OK(mp_batch_source_prepare(s, order, lrs));
        CHECK(mp_batch_source_prepare(s, order, lrs) == MP_ERR_ARG);
        CHECK_OK(mp_batch_source_launch(s));
        CHECK(mp_batch_source_launch(s) == MP_ERR_ARG);
        CHECK_OK(mp_batch_source_prepare(s, order, lrs));   /* the next, meanwhile */
        CHECK_OK(mp_batch_source_finish(s, losses));
        CHECK(mp_batch_source_finish(s, losses) == MP_ERR_ARG);
        for (int i = 0; i < 7; i++)
            CHECK_MSG(isfinite(losses[i]) && losses[i] > 0, "%s: loss %d = %g", names[kind],
                      i, losses[i]);
        CHECK_OK(mp_batch_source_launch(s));
        CHECK_OK(mp_batch_source_finish(s, losses));
        mp_batch_source_free(s);
    }
    mp_batch_source *s = NULL;
    mp_resident_source_opts bad = { .n_classes = MP_RESIDENT_MAX_CLASSES + 1 };
    CHECK(mp_batch_source_resident(&s, m, &x.c.batches, &bad) == MP_ERR_ARG && !s);
    bad.n_classes = 0;
    CHECK(mp_batch_source_resident(&s, m, &x.c.batches, &bad) == MP_ERR_ARG && !s);
    fixture_free(&x);
}

/* ===================================================================== */
/* The options that replaced the environment variables                    */
/* ===================================================================== */

/* mp_train on ESOL (2 epochs, hidden 16, on the cpu) with stderr captured
 * into buf. */
static mp_status train_captured(int resident, int slot_classes, int profile, char *buf,
                                size_t cap)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/stderr.txt", mp_test_tmpdir());
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = 2;
    o.hidden = 16;
    o.threads = 1;
    o.quiet = 1;
    o.resident = resident;
    o.slot_classes = slot_classes;
    o.profile = profile;
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0)
        return mp_error_set(MP_ERR_IO, "test: cannot capture stderr");
    dup2(fd, 2);
    close(fd);
    mp_train_result r;
    mp_status st = mp_train(&o, &r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    if (st == MP_OK)
        mp_train_result_free(&r);
    size_t len = 0;
    char *text = mp_test_slurp(path, &len);
    snprintf(buf, cap, "%s", text ? text : "");
    mp_free(text);
    return st;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

MP_TEST(train_opts_slot_classes_and_profile)
{
    static char out[16384];
    /* the environment is not read any more */
    setenv("MOLPROP_SLOT_CLASSES", "1", 1);
    setenv("MOLPROP_GPU_PROFILE", "1", 1);
    CHECK_OK(train_captured(1, 3, 1, out, sizeof out));
    CHECK_MSG(count_of(out, "profile epoch ") == 2, "profile output:\n%s", out);
    CHECK(strstr(out, "profile epoch 1: train loop ") && strstr(out, "; resident: upload "));
    int classes = count_of(out, "profile slot class ");
    CHECK_MSG(classes >= 2 && classes <= 3, "%d classes with slot_classes 3:\n%s", classes, out);
    CHECK_OK(train_captured(1, 1, 1, out, sizeof out));
    CHECK_EQ_INT(count_of(out, "profile slot class "), 1);
    CHECK(strstr(out, "profile slot class 0: ") != NULL);
    CHECK_OK(train_captured(0, 4, 1, out, sizeof out));
    CHECK_EQ_INT(count_of(out, "; host loop"), 2);
    CHECK_OK(train_captured(1, 4, 0, out, sizeof out));
    CHECK_MSG(strstr(out, "profile") == NULL, "profile off, yet:\n%s", out);
    unsetenv("MOLPROP_SLOT_CLASSES");
    unsetenv("MOLPROP_GPU_PROFILE");
    /* bad values */
    CHECK(train_captured(1, 0, 0, out, sizeof out) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "slot classes") != NULL);
    CHECK(train_captured(1, MP_RESIDENT_MAX_CLASSES + 1, 0, out, sizeof out) == MP_ERR_ARG);
    mp_train_opts o = mp_train_opts_default();
    CHECK_EQ_INT(o.slot_classes, 4);
    CHECK_EQ_INT(o.profile, 0);
}
