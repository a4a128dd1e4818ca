/*
 * api.c - the public API's glue over the pipelines: summaries, the runs of
 * train, predict and eval (options -> the pipeline's struct -> mp_train,
 * mp_predict_file, mp_eval_file), the configuration written into
 * metrics.json, and the predictor (a model file applied to SMILES in
 * memory).  featurize and split are in verbs.c, bench in bench.c.
 */
#include "api/api.h"

#include "api/options.h"
#include "backend/ops.h"
#include "data/metrics.h"
#include "data/registry.h"
#include "data/unc_metrics.h"
#include "run/ensemble.h"
#include "run/fingerprint.h"
#include "run/modelfile.h"
#include "core/dist.h"
#include "run/predict.h"
#include "run/shard.h"
#include "run/train_head.h"
#include "run/trainer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *mp_version(void)
{
    return MP_VERSION;
}

/* ===================================================================== */
/* Summaries                                                              */
/* ===================================================================== */

typedef struct {
    char  *key;
    char  *text;   /* NULL: a number */
    double number;
} entry;

typedef struct {
    size_t line;
    char  *smiles, *reason;
} invalid_row;

struct mp_summary {
    entry       *items;
    size_t       n, cap;
    invalid_row *invalid;
    size_t       n_invalid, cap_invalid;
};

mp_status mp_summary_new(mp_summary **out)
{
    *out = mp_calloc(1, sizeof **out);
    return *out ? MP_OK : mp_error_set(MP_ERR_NOMEM, "out of memory");
}

void mp_summary_free(mp_summary *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        mp_free(s->items[i].key);
        mp_free(s->items[i].text);
    }
    for (size_t i = 0; i < s->n_invalid; i++) {
        mp_free(s->invalid[i].smiles);
        mp_free(s->invalid[i].reason);
    }
    mp_free(s->items);
    mp_free(s->invalid);
    mp_free(s);
}

void mp_summary_hand_over(mp_summary *s, mp_summary **out)
{
    if (out)
        *out = s;
    else
        mp_summary_free(s);
}

static entry *find_entry(const mp_summary *s, const char *key)
{
    for (size_t i = 0; s && key && i < s->n; i++)
        if (!strcmp(s->items[i].key, key))
            return &s->items[i];
    return NULL;
}

/* The entry for key, made if absent. */
static entry *put(mp_summary *s, const char *key)
{
    entry *e = find_entry(s, key);
    if (e)
        return e;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        entry *p = mp_realloc(s->items, cap * sizeof *p);
        if (!p)
            return NULL;
        s->items = p;
        s->cap = cap;
    }
    e = &s->items[s->n];
    memset(e, 0, sizeof *e);
    if (!(e->key = mp_strdup(key)))
        return NULL;
    s->n++;
    return e;
}

mp_status mp_summary_put_number(mp_summary *s, const char *key, double v)
{
    entry *e = put(s, key);
    if (!e)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_free(e->text);
    e->text = NULL;
    e->number = v;
    return MP_OK;
}

mp_status mp_summary_put_text(mp_summary *s, const char *key, const char *text)
{
    entry *e = put(s, key);
    char *copy = mp_strdup(text ? text : "");
    if (!e || !copy) {
        mp_free(copy);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    mp_free(e->text);
    e->text = copy;
    return MP_OK;
}

mp_status mp_summary_add_invalid(mp_summary *s, size_t line, const char *smiles,
                                 const char *reason)
{
    if (s->n_invalid == s->cap_invalid) {
        size_t cap = s->cap_invalid ? 2 * s->cap_invalid : 16;
        invalid_row *p = mp_realloc(s->invalid, cap * sizeof *p);
        if (!p)
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        s->invalid = p;
        s->cap_invalid = cap;
    }
    invalid_row *r = &s->invalid[s->n_invalid];
    r->line = line;
    r->smiles = mp_strdup(smiles ? smiles : "");
    r->reason = mp_strdup(reason ? reason : "rejected by RDKit");
    if (!r->smiles || !r->reason) {
        mp_free(r->smiles);
        mp_free(r->reason);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    s->n_invalid++;
    return MP_OK;
}

double mp_summary_number(const mp_summary *s, const char *key)
{
    const entry *e = find_entry(s, key);
    return e && !e->text ? e->number : NAN;
}

const char *mp_summary_text(const mp_summary *s, const char *key)
{
    const entry *e = find_entry(s, key);
    return e ? e->text : NULL;
}

size_t mp_summary_invalid_count(const mp_summary *s)
{
    return s ? s->n_invalid : 0;
}

mp_status mp_summary_invalid(const mp_summary *s, size_t k, size_t *line, const char **smiles,
                             const char **reason)
{
    if (!s || k >= s->n_invalid)
        return mp_error_set(MP_ERR_ARG, "invalid row %zu of %zu", k, s ? s->n_invalid : 0);
    if (line)
        *line = s->invalid[k].line;
    if (smiles)
        *smiles = s->invalid[k].smiles;
    if (reason)
        *reason = s->invalid[k].reason;
    return MP_OK;
}

mp_status mp_run_check(const mp_options *o, const char *verb)
{
    if (!o || strcmp(mp_options_verb(o), verb) != 0)
        return mp_error_set(MP_ERR_ARG, "mp_run_%s: these are options for '%s'", verb,
                            o ? mp_options_verb(o) : "nothing");
    const char *missing = mp_options_missing(o);
    if (missing)
        return mp_error_set(MP_ERR_ARG, "--%s is required", missing);
    return MP_OK;
}

mp_status mp_run_start(const mp_options *o, const char *verb, void *args, char *backend,
                       size_t cap, mp_summary **out)
{
    if (out)
        *out = NULL;
    mp_status st = mp_run_check(o, verb);
    if (!st)
        st = mp_options_apply(o, args);
    if (!st && backend)
        st = mp_options_backend(o, backend, cap);
    return st;
}

mp_status mp_summary_finish(mp_status st, mp_summary *s, mp_summary **out)
{
    if (st)
        mp_summary_free(s);
    else
        mp_summary_hand_over(s, out);
    return st;
}

/* ===================================================================== */
/* train                                                                  */
/* ===================================================================== */

/* Reads a whole small file (mp_malloc'd, NUL-terminated). */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    mp_buf b = { 0 };
    char chunk[8192];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, fp)) > 0)
        if (mp_buf_append(&b, chunk, got)) {
            mp_buf_free(&b);
            fclose(fp);
            return NULL;
        }
    int bad = ferror(fp);
    fclose(fp);
    if (bad || mp_buf_append(&b, "", 1)) {
        mp_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* Adds "config" (every option with its value; task and metric as the run
 * resolved them) to the metrics.json the trainer wrote, atomically. */
static mp_status record_config(const mp_options *o, const mp_train_result *r, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    char *text = slurp(path);
    if (!text)
        return mp_error_set(MP_ERR_IO, "cannot read %s back", path);
    cJSON *root = cJSON_Parse(text);
    mp_free(text);
    cJSON *cfg = mp_options_cjson(o);
    mp_status st = MP_OK;
    char *out = NULL;
    if (!root || !cfg) {
        st = mp_error_set(root ? MP_ERR_NOMEM : MP_ERR_FORMAT, "%s: cannot add the configuration",
                          path);
        goto done;
    }
    cJSON_ReplaceItemInObject(cfg, "task", cJSON_CreateString(mp_task_type_name(r->task)));
    cJSON_ReplaceItemInObject(cfg, "metric", cJSON_CreateString(mp_metric_name(r->metric)));
    cJSON_AddItemToObject(root, "config", cfg);
    cfg = NULL;
    if (!(out = cJSON_Print(root))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    mp_afile f;
    if ((st = mp_afile_open(&f, path)))
        goto done;
    fputs(out, f.fp);
    fputc('\n', f.fp);
    st = mp_afile_commit(&f);
done:
    cJSON_free(out);
    cJSON_Delete(cfg);
    cJSON_Delete(root);
    return st;
}

/* One option of a checkpoint's header (opt.KEY, run.data) as the option's
 * text; NULL where the option was unset (its default). */
/* The options resume.c keeps under "train." (issue 11's, added after the
 * first checkpoints), as the option table reads them: the key of each
 * (NULL: the option's own name) and, for the choices kept as numbers, the
 * choice of 0, 1 and -1. */
static const struct {
    const char *option, *key, *of0, *of1, *of_m1;
} later_keys[] = {
    { "loss", NULL, NULL, NULL, NULL },
    { "multiclass-num-classes", "n-classes", NULL, NULL, NULL },
    { "evidential-regularization", "loss-lambda", NULL, NULL, NULL },
    { "evidential-eps", "loss-eps", NULL, NULL, NULL },
    { "quantile-alpha", NULL, NULL, NULL, NULL },
    { "patience", NULL, NULL, NULL, NULL },
    { "grad-clip", NULL, NULL, NULL, NULL },
    { "class-balance", NULL, "false", "true", NULL },
    { "task-weights", NULL, NULL, NULL, NULL },
    { "weight-column", NULL, NULL, NULL, NULL },
    { "activation", NULL, NULL, NULL, NULL },
    { "batch-norm", NULL, "false", "true", NULL },
    { "atom-messages", NULL, "false", "true", NULL },
    { "undirected", NULL, "false", "true", NULL },
    { "features-scaling", NULL, "off", "on", "auto" },
    { "no-features-scaling", NULL, "false", "true", NULL },
    { "features-path", NULL, NULL, NULL, NULL },
    { "init-model", NULL, NULL, NULL, NULL },
    { "freeze-encoder", NULL, "false", "true", NULL },
    { "freeze-ffn-layers", NULL, NULL, NULL, NULL },
    { "atom-descriptors-path", NULL, NULL, NULL, NULL },
    { "atom-descriptors", NULL, "auto", "feature", NULL },
    { "bond-features-path", NULL, NULL, NULL, NULL },
    { "no-atom-descriptor-scaling", NULL, "false", "true", NULL },
    { "no-bond-features-scaling", NULL, "false", "true", NULL },
    { "spectra-activation", NULL, NULL, NULL, NULL },
    { "spectra-target-floor", NULL, NULL, NULL, NULL },
};

/* Option `key` from the checkpoint's "train." keys (NULL: not kept there,
 * or the default). */
static const char *checkpoint_later(const mp_kv *kv, const char *key, char *buf, size_t n)
{
    for (size_t i = 0; i < sizeof later_keys / sizeof later_keys[0]; i++) {
        if (strcmp(key, later_keys[i].option))
            continue;
        snprintf(buf, n, "train.%s", later_keys[i].key ? later_keys[i].key : key);
        const char *v = mp_kv_get(kv, buf);
        if (!v || !*v)
            return NULL;
        if (!later_keys[i].of0)
            return !strcmp(key, "multiclass-num-classes") && atoi(v) <= 0 ? NULL : v;
        if (!strcmp(v, "0"))
            return later_keys[i].of0;
        if (!strcmp(v, "1"))
            return later_keys[i].of1;
        if (!strcmp(v, "2") && !strcmp(key, "atom-descriptors"))
            return "descriptor";
        return !strcmp(v, "-1") ? later_keys[i].of_m1 : v;
    }
    return NULL;
}

static const char *checkpoint_value(const mp_kv *kv, const char *key, char *buf, size_t n)
{
    if (!strcmp(key, "data"))
        return mp_kv_get(kv, "run.data");
    if (!strcmp(key, "device"))
        key = "backend";   /* "gpu:bf16": device and precision in one */
    snprintf(buf, n, "opt.%s", key);
    const char *v = mp_kv_get(kv, buf);
    if (!v)
        return checkpoint_later(kv, key, buf, n);
    if (!v || !*v || (!strcmp(key, "metric") && !strcmp(v, "default")))
        return NULL;
    if (!strcmp(key, "resident") || !strcmp(key, "graph"))
        return !strcmp(v, "1") ? "on" : !strcmp(v, "0") ? "off" : "auto";
    if (!strcmp(key, "ffn-hidden") && atoi(v) <= 0)
        return NULL;   /* auto */
    return v;
}

/*
 * The options of `train --resume D`: those set in o, over (when o sets no
 * --data) every option the checkpoint in D records, with --save-dir D
 * unless o names it.  The run then compares them with the checkpoint's
 * identity (trainer.h), so an option set here that differs is refused.
 */
static mp_status resume_options(const mp_options *o, mp_options **out)
{
    *out = NULL;
    const char *dir = mp_options_get(o, "resume");
    mp_kv *keep = NULL;
    mp_options *r = NULL;
    mp_status st = MP_OK;
    if (!mp_options_is_set(o, "data")) {
        mp_train_opts t = mp_train_opts_default();
        if ((st = mp_train_opts_from_checkpoint(dir, &t, &keep)))
            return st;
    }
    if ((st = mp_options_create(&r, "train")))
        goto done;
    size_t n;
    const mp_option_def *defs = mp_option_table("train", &n);
    for (size_t i = 0; i < n && !st; i++) {
        const char *key = defs[i].key;
        char buf[160];
        const char *v = !key ? NULL : mp_options_is_set(o, key) ? mp_options_get(o, key)
                                    : keep ? checkpoint_value(keep, key, buf, sizeof buf) : NULL;
        if (v)
            st = mp_options_set(r, key, v);
    }
    if (!st && !mp_options_is_set(r, "save-dir"))
        st = mp_options_set(r, "save-dir", dir);
    if (st && keep) {   /* a value the checkpoint holds that the table refuses */
        char why[512];
        snprintf(why, sizeof why, "%s", mp_error_message());
        st = mp_error_set(st, "cannot resume from %s: %s", dir, why);
    }
done:
    mp_kv_free(keep);
    if (st)
        mp_options_free(r);
    else
        *out = r;
    return st;
}

static mp_status run_train(const mp_options *o, const mp_train_shared *sh, mp_summary **out);

mp_status mp_run_train_shared(const mp_options *o, const mp_train_shared *sh, mp_summary **out)
{
    if (out)
        *out = NULL;
    if (o && !strcmp(mp_options_verb(o), "train") && mp_options_get(o, "resume")) {
        mp_options *r;
        mp_status st = resume_options(o, &r);
        if (st == MP_OK)
            st = run_train(r, sh, out);
        mp_options_free(r);
        return st;
    }
    return run_train(o, sh, out);
}

mp_status mp_run_train(const mp_options *o, mp_summary **out)
{
    return mp_run_train_shared(o, NULL, out);
}

/* Under K > 1 ranks (MPI processes or --devices threads; fit.c trains
 * data-parallel): rank 0 writes the model, the metrics and the
 * checkpoints, the others nothing and quietly (they read a checkpoint to
 * resume: every rank restores it). */
static mp_status dist_train_opts(mp_train_opts *t)
{
    if (mp_dist_size() > 1 && t->stop_after > 0)
        return mp_error_set(MP_ERR_ARG, "--stop-after does not run over ranks yet (%d ranks): "
                            "train in one process to use it", mp_dist_size());
    if (mp_dist_size() > 1 && mp_dist_rank() != 0) {
        t->read_only = 1;
        t->quiet = 1;
    }
    return MP_OK;
}

#define MAX_DEVICES 64

/* --devices N / --gpus a,b,..: the thread ranks and their GPUs (n 1: a
 * plain run).  A GPU backend must see every GPU asked for. */
static mp_status devices_opt(const mp_options *o, const char *backend, int *n, int *dev)
{
    const char *gpus = mp_options_get(o, "gpus"), *nd = mp_options_get(o, "devices");
    *n = nd ? atoi(nd) : 1;
    if (gpus) {
        int k = 0;
        for (const char *p = gpus; *p; k++) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v > 1023 || (*end && *end != ',') || k == MAX_DEVICES)
                return mp_error_set(MP_ERR_ARG, "--gpus %s: expected GPU indices 0,1,.. (at most "
                                    "%d)", gpus, MAX_DEVICES);
            for (int j = 0; j < k; j++)
                if (dev[j] == (int)v)
                    return mp_error_set(MP_ERR_ARG, "--gpus %s: GPU %ld twice", gpus, v);
            dev[k] = (int)v;
            p = *end ? end + 1 : end;
        }
        /* devices = 1 may be a config file's default: --gpus sets N then */
        if (mp_options_is_set(o, "devices") && *n != k && *n != 1)
            return mp_error_set(MP_ERR_ARG, "--devices %d with --gpus %s (%d GPUs): leave one out",
                                *n, gpus, k);
        *n = k;
        if (k == 1 && dev[0] != 0)
            return mp_error_set(MP_ERR_ARG, "--gpus %s alone is a plain one-GPU run: choose "
                                "its GPU with CUDA_VISIBLE_DEVICES=%d instead", gpus, dev[0]);
    } else {
        for (int r = 0; r < *n; r++)
            dev[r] = r;
    }
    if (*n > 1 && mp_dist_size() > 1)
        return mp_error_set(MP_ERR_ARG, "--devices %d under %d MPI ranks: start one MPI rank per "
                            "GPU instead (each takes its node's next GPU)", *n, mp_dist_size());
    int have = mp_backend_devices(backend), top = 0;
    for (int r = 0; r < *n; r++)
        top = dev[r] > top ? dev[r] : top;
    if (have >= 0 && (*n > 1 || gpus) && top >= have) {
        char what[80];
        if (gpus)
            snprintf(what, sizeof what, "--gpus %.60s", gpus);
        else
            snprintf(what, sizeof what, "--devices %d", *n);
        return mp_error_set(MP_ERR_ARG, "%s: this machine has %d GPU%s%s", what, have,
                            have == 1 ? "" : "s",
                            have == 0 ? " (or this molprop was built without CUDA)" : "");
    }
    return MP_OK;
}

/* The thread ranks of --devices N: each trains its copy (mp_train, with
 * the same options but for rank 0's writing) on a share of the threads. */
typedef struct {
    const mp_train_opts *t;
    int                  threads;   /* each rank's                        */
    mp_train_result      r0;        /* rank 0's                           */
    int                  have_r0;
} rank_runs;

static mp_status train_rank(void *arg, int rank)
{
    rank_runs *R = arg;
    mp_train_opts t = *R->t;
    mp_status st = dist_train_opts(&t);
    if (st)
        return st;
    t.threads = 0;
    mp_threads_set_local(R->threads);
    mp_train_result r;
    st = mp_train(&t, &r);
    if (st == MP_OK && rank == 0) {
        R->r0 = r;
        R->have_r0 = 1;
    } else if (st == MP_OK) {
        mp_train_result_free(&r);
    }
    return st;
}

/* The thread ranks read and featurize the data once, here, and share it
 * read-only (mp_train_inputs, as the benchmark's runs do: the same run bit
 * for bit), where the run allows it: not with a features file or user
 * atom / bond columns (those are read, and scaled, per run). */
static mp_status shared_inputs(const mp_train_opts *t, mp_dataset **d, mp_features **f,
                               double *seconds)
{
    *d = NULL;
    *f = NULL;
    if (t->inputs || t->features_path || t->cols.atom_path || t->cols.bond_path)
        return MP_OK;
    double t0 = mp_time_now();
    mp_column_spec cs = t->columns;
    cs.inequalities = mp_train_loss_is_bounded(t->loss);
    mp_status st = mp_dataset_load(d, t->data_path, &cs);
    if (st == MP_OK && (*d)->n_rows > INT32_MAX)
        st = mp_error_set(MP_ERR_ARG, "%s: too many rows for one training run", t->data_path);
    mp_featurize_opts fo = mp_train_featurize_opts(t);
    if (st == MP_OK)
        st = mp_featurize(f, (const char *const *)(*d)->smiles, (int32_t)(*d)->n_rows, &fo);
    if (st) {
        mp_features_free(*f);
        mp_dataset_free(*d);
        *d = NULL;
        *f = NULL;
    }
    *seconds = mp_time_now() - t0;
    return st;
}

/* What a run's inputs depend on (shared_inputs): the file, its columns,
 * the inequality cells of a bounded loss and the featurization (threads
 * aside).  The strings are copies. */
struct mp_train_shared {
    char             *data_path, *smiles, *targets, *ignore, *weights;
    int               no_targets, bounded;
    mp_featurize_opts fo;
    mp_dataset       *d;
    mp_features      *f;
    mp_train_inputs   in;
};

static int same_text(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/* Whether run t may take sh's inputs: the same file, columns and
 * featurization, and nothing read per run (shared_inputs' rule).  Every
 * field of mp_featurize_opts but n_threads is compared: */
_Static_assert(sizeof(mp_featurize_opts) == 6 * sizeof(int),
               "a field added to mp_featurize_opts: compare it in shared_fits");
static int shared_fits(const mp_train_shared *sh, const mp_train_opts *t)
{
    mp_featurize_opts fo = mp_train_featurize_opts(t);
    const mp_column_spec *c = &t->columns;
    return sh && sh->d && !t->inputs && !t->features_path && !t->cols.atom_path &&
           !t->cols.bond_path && same_text(sh->data_path, t->data_path) &&
           same_text(sh->smiles, c->smiles_column) && same_text(sh->targets, c->target_columns) &&
           same_text(sh->ignore, c->ignore_columns) && same_text(sh->weights, c->weight_column) &&
           sh->no_targets == c->no_targets && sh->bounded == mp_train_loss_is_bounded(t->loss) &&
           sh->fo.layout == fo.layout && sh->fo.morgan == fo.morgan &&
           sh->fo.descriptors == fo.descriptors && sh->fo.scaffolds == fo.scaffolds &&
           sh->fo.sets == fo.sets;
}

void mp_train_shared_free(mp_train_shared *sh)
{
    if (!sh)
        return;
    mp_features_free(sh->f);
    mp_dataset_free(sh->d);
    mp_free(sh->data_path);
    mp_free(sh->smiles);
    mp_free(sh->targets);
    mp_free(sh->ignore);
    mp_free(sh->weights);
    mp_free(sh);
}

static mp_status dup_text(char **out, const char *s)
{
    *out = NULL;
    if (s && !(*out = mp_strdup(s)))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    return MP_OK;
}

mp_status mp_train_shared_open(mp_train_shared **out, const mp_options *base)
{
    *out = NULL;
    mp_train_opts t = mp_train_opts_default();
    mp_status st = mp_options_apply(base, &t);
    if (st)
        return st;
    mp_train_shared *sh = mp_calloc(1, sizeof *sh);
    if (!sh)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    const mp_column_spec *c = &t.columns;
    double secs;
    if ((st = dup_text(&sh->data_path, t.data_path)) ||
        (st = dup_text(&sh->smiles, c->smiles_column)) ||
        (st = dup_text(&sh->targets, c->target_columns)) ||
        (st = dup_text(&sh->ignore, c->ignore_columns)) ||
        (st = dup_text(&sh->weights, c->weight_column)) ||
        (st = shared_inputs(&t, &sh->d, &sh->f, &secs))) {
        mp_train_shared_free(sh);
        return st;
    }
    sh->no_targets = c->no_targets;
    sh->bounded = mp_train_loss_is_bounded(t.loss);
    sh->fo = mp_train_featurize_opts(&t);
    sh->in = (mp_train_inputs){ .dataset = sh->d, .features = sh->f };
    *out = sh;
    return MP_OK;
}

static mp_status run_train(const mp_options *o, const mp_train_shared *sh, mp_summary **out)
{
    mp_train_opts t = mp_train_opts_default();
    char backend[128];
    mp_status st = mp_run_start(o, "train", &t, backend, sizeof backend, out);
    if (st)
        return st;
    t.backend = backend;
    int n = 1, dev[MAX_DEVICES];
    if ((st = mp_dist_init()) || (st = devices_opt(o, backend, &n, dev)))
        return st;
    mp_train_result r;
    if (n > 1) {
        int all = t.threads > 0 ? t.threads : mp_threads_get();
        rank_runs R = { .t = &t, .threads = all / n > 0 ? all / n : 1 };
        /* the backend's first open (OpenBLAS's kernels, the CUDA runtime)
         * here, before the threads */
        mp_backend *b = NULL;
        if ((st = mp_backend_open(&b, backend)))
            return st;
        mp_backend_close(b);
        mp_dataset *d;
        mp_features *f;
        double secs = 0;
        if ((st = shared_inputs(&t, &d, &f, &secs)))
            return st;
        mp_train_inputs in = { .dataset = d, .features = f };
        mp_train_opts tr = t;
        if (d)
            tr.inputs = &in;
        R.t = &tr;
        st = mp_dist_run_threads(n, dev, train_rank, &R);
        mp_features_free(f);
        mp_dataset_free(d);
        if (st) {
            if (R.have_r0)
                mp_train_result_free(&R.r0);
            return st;
        }
        r = R.r0;
        if (d)
            r.featurize_seconds = secs;
    } else {
        if (shared_fits(sh, &t))
            t.inputs = &sh->in;
        if ((st = dist_train_opts(&t)) || (st = mp_train(&t, &r)))
            return st;
    }
    mp_summary *s = NULL;
    if (t.save_dir && !t.read_only)
        st = record_config(o, &r, t.save_dir);
    if (!st)
        st = mp_summary_new(&s);
    if (!st)
        (void)((st = mp_summary_put_text(s, "metric", mp_metric_name(r.metric))) ||
               (st = mp_summary_put_text(s, "task", mp_task_type_name(r.task))) ||
               (st = mp_summary_put_text(s, "save_dir", t.save_dir)) ||
               (st = mp_summary_put_number(s, "rank", (double)mp_dist_rank())) ||
               (st = mp_summary_put_number(s, "test", r.test_mean)) ||
               (st = mp_summary_put_number(s, "val", r.val_mean)) ||
               (st = mp_summary_put_number(s, "stopped_epoch", r.stopped_epoch)) ||
               (st = mp_summary_put_number(s, "n_tasks", (double)r.n_tasks)) ||
               (st = mp_summary_put_number(s, "n_train", (double)r.n_train)) ||
               (st = mp_summary_put_number(s, "n_val", (double)r.n_val)) ||
               (st = mp_summary_put_number(s, "n_test", (double)r.n_test)) ||
               (st = mp_summary_put_number(s, "n_invalid", (double)r.n_invalid)) ||
               (st = mp_summary_put_number(s, "featurize_seconds", r.featurize_seconds)) ||
               (st = mp_summary_put_number(s, "train_seconds", r.train_seconds)) ||
               (st = mp_summary_put_number(s, "train_mols_per_second",
                                           r.train_mols_per_second)));
    mp_train_result_free(&r);
    return mp_summary_finish(st, s, out);
}

/* ===================================================================== */
/* predict and eval                                                       */
/* ===================================================================== */

/* The summary of a run over a file of molecules (predict, fingerprint). */
static mp_status stream_summary(const mp_predict_stats *stats, const char *out_path,
                                mp_summary **out)
{
    mp_summary *s = NULL;
    mp_status st = mp_summary_new(&s);
    if (!st)
        (void)((st = mp_summary_put_number(s, "n_rows", (double)stats->n_rows)) ||
               (st = mp_summary_put_number(s, "n_invalid", (double)stats->n_invalid)) ||
               (st = mp_summary_put_number(s, "seconds", stats->seconds)) ||
               (st = mp_summary_put_number(s, "mols_per_second", stats->mols_per_second)) ||
               (st = mp_summary_put_text(s, "out", out_path)));
    return mp_summary_finish(st, s, out);
}

mp_status mp_run_predict(const mp_options *o, mp_summary **out)
{
    mp_predict_opts p;
    memset(&p, 0, sizeof p);
    char backend[128];
    mp_predict_stats stats;
    mp_status st = mp_run_start(o, "predict", &p, backend, sizeof backend, out);
    if (!st) {
        p.backend = backend;
        st = mp_predict_run(&p, &stats);   /* shard.c: one process, a shard or MPI ranks */
    }
    if (st)
        return st;
    char part[4300];
    if (p.shard.count)
        mp_shard_part_path(part, sizeof part, p.out_path, p.shard.index, p.shard.count);
    mp_summary *s = NULL;
    if (!(st = mp_summary_new(&s)))
        (void)((st = mp_summary_put_number(s, "n_rows", (double)stats.n_rows)) ||
               (st = mp_summary_put_number(s, "n_invalid", (double)stats.n_invalid)) ||
               (st = mp_summary_put_number(s, "seconds", stats.seconds)) ||
               (st = mp_summary_put_number(s, "mols_per_second", stats.mols_per_second)) ||
               (st = mp_summary_put_number(s, "rank", (double)mp_dist_rank())) ||
               (st = mp_summary_put_text(s, "out", p.shard.count ? part : p.out_path)));
    return mp_summary_finish(st, s, out);
}

mp_status mp_run_predict_merge(const mp_options *o, mp_summary **out)
{
    if (out)
        *out = NULL;
    mp_status st = mp_run_check(o, "predict-merge");
    if (st)
        return st;
    mp_predict_merge_args a;
    memset(&a, 0, sizeof a);
    if ((st = mp_options_apply(o, &a)))
        return st;
    mp_predict_stats stats;
    if ((st = mp_predict_merge(a.out_path, a.remove_parts, &stats)))
        return st;
    mp_summary *s = NULL;
    if (!(st = mp_summary_new(&s)))
        (void)((st = mp_summary_put_number(s, "n_rows", (double)stats.n_rows)) ||
               (st = mp_summary_put_number(s, "n_invalid", (double)stats.n_invalid)) ||
               (st = mp_summary_put_number(s, "seconds", stats.seconds)) ||
               (st = mp_summary_put_text(s, "out", a.out_path)));
    return mp_summary_finish(st, s, out);
}

mp_status mp_run_fingerprint(const mp_options *o, mp_summary **out)
{
    mp_fingerprint_opts p;
    memset(&p, 0, sizeof p);
    char backend[128];
    mp_predict_stats stats;
    mp_status st = mp_run_start(o, "fingerprint", &p, backend, sizeof backend, out);
    if (!st) {
        p.backend = backend;
        st = mp_fingerprint_file(&p, &stats);
    }
    return st ? st : stream_summary(&stats, p.out_path, out);
}

/* eval's summary: the counts, each metric's mean under its name, and
 * "metrics", the names in order, comma-separated. */
static mp_status eval_summary(double n_rows, double n_invalid, double n_tasks, int n_metrics,
                              const char *const *names, const double *mean, mp_summary **out)
{
    mp_summary *s = NULL;
    mp_buf list = { 0 };
    mp_status st = mp_summary_new(&s);
    if (!st)
        (void)((st = mp_summary_put_number(s, "n_rows", n_rows)) ||
               (st = mp_summary_put_number(s, "n_invalid", n_invalid)) ||
               (st = mp_summary_put_number(s, "n_tasks", n_tasks)));
    for (int m = 0; m < n_metrics && !st; m++)
        (void)((st = mp_buf_printf(&list, "%s%s", m ? "," : "", names[m])) ||
               (st = mp_summary_put_number(s, names[m], mean[m])));
    if (!st)
        st = mp_summary_put_text(s, "metrics", list.data ? list.data : "");
    mp_buf_free(&list);
    return mp_summary_finish(st, s, out);
}

/* eval --preds P --uncertainty-metrics L: the uncertainty metrics of a
 * prediction file (predict_unc.c), named like the metrics, the mean over
 * tasks, and "<metric>.<task>" per task. */
static mp_status run_eval_preds(const mp_eval_args *a, mp_summary **out)
{
    if (!a->preds_path || !a->unc_metrics)
        return mp_error_set(MP_ERR_ARG, "--preds and --uncertainty-metrics go together");
    if (a->model_path)
        return mp_error_set(MP_ERR_ARG, "--preds scores a prediction file: leave out --model");
    mp_unc_eval_result r;
    mp_status st = mp_unc_eval_file(a->preds_path, a->data_path, a->smiles_column,
                                    a->unc_metrics, &r);
    if (st)
        return st;
    const char *names[8];
    for (int m = 0; m < r.n_metrics; m++)
        names[m] = mp_unc_metric_name((mp_unc_metric)r.metrics[m]);
    st = eval_summary((double)r.n_rows, 0, (double)r.n_tasks, r.n_metrics, names, r.mean, out);
    mp_unc_eval_result_free(&r);
    return st;
}

mp_status mp_run_eval(const mp_options *o, mp_summary **out)
{
    mp_eval_args a;
    memset(&a, 0, sizeof a);
    char backend[128];
    mp_status st = mp_run_start(o, "eval", &a, backend, sizeof backend, out);
    if (st)
        return st;
    if (a.preds_path || a.unc_metrics)
        return run_eval_preds(&a, out);
    if (!a.model_path)
        return mp_error_set(MP_ERR_ARG, "--model is required (or --preds with "
                            "--uncertainty-metrics)");
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.smiles_column = a.smiles_column;
    mp_eval_result r;
    if ((st = mp_eval_file(a.model_path, a.data_path, &spec, a.metric, a.features_path,
                           a.atom_path, a.bond_path, backend, a.threads, &r)))
        return st;
    const char *names[8];
    for (int m = 0; m < r.n_metrics; m++)
        names[m] = mp_metric_name(r.metrics[m]);
    st = eval_summary((double)r.n_rows, (double)r.n_invalid, (double)r.n_tasks, r.n_metrics,
                      names, r.mean, out);
    mp_eval_result_free(&r);
    return st;
}

/* ===================================================================== */
/* Predictor                                                              */
/* ===================================================================== */

/* Molecules per forward, as the streaming predictor uses them (predict.c),
 * so predictions from here equal those of `molprop predict` bit for bit. */
#define PREDICTOR_BATCH_HOST 256
#define PREDICTOR_BATCH_DEVICE 4096

struct mp_predictor {
    mp_ensemble *e;
};

mp_status mp_predictor_open(mp_predictor **out, const char *model_path, const char *backend)
{
    *out = NULL;
    mp_predictor *p = mp_calloc(1, sizeof *p);
    if (!p)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_status st = mp_ensemble_load(&p->e, model_path, backend && *backend ? backend : "cpu");
    if (st) {
        mp_free(p);
        return st;
    }
    *out = p;
    return MP_OK;
}

void mp_predictor_free(mp_predictor *p)
{
    if (!p)
        return;
    mp_ensemble_free(p->e);
    mp_free(p);
}

size_t mp_predictor_n_tasks(const mp_predictor *p)
{
    return p ? p->e->n_tasks : 0;
}

const char *mp_predictor_task_name(const mp_predictor *p, size_t t)
{
    return p && t < p->e->n_tasks ? p->e->task_names[t] : NULL;
}

const char *mp_predictor_task_type(const mp_predictor *p)
{
    return p ? mp_task_type_name(p->e->task) : NULL;
}

int mp_predictor_n_members(const mp_predictor *p)
{
    return p ? p->e->n_members : 0;
}

mp_status mp_predictor_predict(mp_predictor *p, const char *const *smiles, size_t n,
                               double *mean, double *std)
{
    if (!p || (n && (!smiles || !mean)))
        return mp_error_set(MP_ERR_ARG, "mp_predictor_predict: no predictor, SMILES or output");
    if (n == 0)
        return MP_OK;
    if (n > (size_t)INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "mp_predictor_predict: %zu molecules in one call "
                            "(at most %d)", n, INT32_MAX);
    mp_featurize_opts fo = mp_ensemble_featurize_opts(p->e);
    mp_features *f = NULL;
    int32_t *idx = mp_malloc(n * sizeof *idx);
    if (!idx)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (%zu molecules)", n);
    mp_status st = mp_featurize(&f, smiles, (int32_t)n, &fo);
    if (!st) {
        for (size_t i = 0; i < n; i++)
            idx[i] = (int32_t)i;
        int32_t batch = p->e->backend->host_memory ? PREDICTOR_BATCH_HOST : PREDICTOR_BATCH_DEVICE;
        st = mp_ensemble_predict(p->e, f, idx, (int32_t)n, 0, 0, batch, mean, std);
    }
    mp_features_free(f);
    mp_free(idx);
    return st;
}
