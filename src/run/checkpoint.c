/*
 * checkpoint.c - a training run's checkpoint file (checkpoint.h) to and
 * from mp_checkpoint, through the model file format of modelfile.h: scalar
 * state in header keys (integers in decimal, doubles with 17 digits: both
 * read back exactly), arrays as tensors of 32-bit words.
 */
#include "run/checkpoint.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Words                                                                  */
/* ===================================================================== */

/* A growable list of tensors whose data are word arrays we own. */
typedef struct {
    mp_tensor *t;
    uint32_t **owned;
    size_t     n, cap;
    int        nomem;
} tensor_list;

static void tl_free(tensor_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        mp_free(l->owned[i]);
    mp_free(l->t);
    mp_free(l->owned);
}

/* Adds tensor (block, name) of n words; w is taken over (mp_malloc'd, may
 * be NULL when n == 0). */
static void tl_add(tensor_list *l, uint32_t block, const char *name, uint32_t *w, size_t n)
{
    if (l->nomem) {
        mp_free(w);
        return;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        mp_tensor *t = mp_realloc(l->t, cap * sizeof *t);
        if (t)
            l->t = t;
        uint32_t **o = t ? mp_realloc(l->owned, cap * sizeof *o) : NULL;
        if (o)
            l->owned = o;
        if (!t || !o) {
            l->nomem = 1;
            mp_free(w);
            return;
        }
        l->cap = cap;
    }
    if (n && !w) {
        l->nomem = 1;
        return;
    }
    mp_tensor *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->block = block;
    t->ndim = 1;
    t->shape[0] = n;
    t->data = (const float *)w;   /* 32-bit words; the file stores them as they are */
    l->owned[l->n++] = w;
}

static uint32_t *words_of_bytes(const void *p, size_t bytes)
{
    uint32_t *w = mp_malloc(bytes ? bytes : 1);
    if (w && bytes)
        memcpy(w, p, bytes);
    return w;
}

static uint32_t *words_of_u64(const uint64_t *v, size_t n)
{
    uint32_t *w = mp_malloc(sizeof(uint32_t) * 2 * (n ? n : 1));
    for (size_t i = 0; w && i < n; i++) {
        w[2 * i] = (uint32_t)v[i];
        w[2 * i + 1] = (uint32_t)(v[i] >> 32);
    }
    return w;
}

static uint32_t *words_of_doubles(const double *v, size_t n)
{
    uint64_t *u = mp_malloc(sizeof(uint64_t) * (n ? n : 1));
    if (!u)
        return NULL;
    memcpy(u, v, sizeof(double) * n);
    uint32_t *w = words_of_u64(u, n);
    mp_free(u);
    return w;
}

static uint32_t *words_of_sizes(const size_t *v, size_t n)
{
    uint32_t *w = mp_malloc(sizeof(uint32_t) * (n ? n : 1));
    for (size_t i = 0; w && i < n; i++)
        w[i] = (uint32_t)v[i];
    return w;
}

/* ===================================================================== */
/* Writing                                                                */
/* ===================================================================== */

static mp_status put_state_keys(mp_kv *kv, const mp_checkpoint *ck)
{
    const mp_fit_state *s = &ck->state;
    const mp_noam *q = &s->noam;
    double done_best[256];
    int nd = ck->n_done < 256 ? ck->n_done : 256;
    for (int i = 0; i < nd; i++)
        done_best[i] = ck->done_best[i];
    mp_status st;
    if ((st = mp_kv_set(kv, "format", "molprop-checkpoint")) ||
        (st = mp_kv_set_int(kv, "checkpoint_version", MP_CHECKPOINT_VERSION)) ||
        (st = mp_kv_set(kv, "molprop_version", MP_VERSION)) ||
        (st = mp_kv_set_int(kv, "ck.n_members", ck->n_members)) ||
        (st = mp_kv_set_int(kv, "ck.n_done", ck->n_done)) ||
        (st = mp_kv_set_doubles(kv, "ck.done_best_epochs", done_best, (size_t)nd)) ||
        (st = mp_kv_set_int(kv, "ck.n_params", (long long)ck->n_params)) ||
        (st = mp_kv_set_int(kv, "ck.member", s->k)) ||
        (st = mp_kv_set_int(kv, "ck.epoch", s->epoch)) ||
        (st = mp_kv_set_int(kv, "ck.prepared", s->prepared)) ||
        (st = mp_kv_set_int(kv, "ck.n_train", s->n_train)) ||
        (st = mp_kv_set_int(kv, "ck.n_steps", s->n_steps)) ||
        (st = mp_kv_set_double(kv, "ck.best_score", s->best_score)) ||
        (st = mp_kv_set_int(kv, "ck.best_epoch", s->best_epoch)) ||
        (st = mp_kv_set_int(kv, "ck.adam_t", s->model.adam_t)) ||
        (st = mp_kv_set_int(kv, "ck.esize", (long long)s->model.esize)) ||
        (st = mp_kv_set_double(kv, "ck.noam.init_lr", q->init_lr)) ||
        (st = mp_kv_set_double(kv, "ck.noam.max_lr", q->max_lr)) ||
        (st = mp_kv_set_double(kv, "ck.noam.final_lr", q->final_lr)) ||
        (st = mp_kv_set_int(kv, "ck.noam.steps_per_epoch", q->steps_per_epoch)) ||
        (st = mp_kv_set_int(kv, "ck.noam.warmup_steps", q->warmup_steps)) ||
        (st = mp_kv_set_int(kv, "ck.noam.total_steps", q->total_steps)) ||
        (st = mp_kv_set_double(kv, "ck.noam.linear_increment", q->linear_increment)) ||
        (st = mp_kv_set_double(kv, "ck.noam.gamma", q->gamma)) ||
        (st = mp_kv_set_int(kv, "ck.noam.step", q->step)) ||
        (st = mp_kv_set_double(kv, "ck.noam.lr", q->lr)))
        return st;
    return MP_OK;
}

static void put_state_tensors(tensor_list *l, const mp_checkpoint *ck)
{
    const mp_fit_state *s = &ck->state;
    uint32_t k = (uint32_t)s->k;
    size_t eb = s->model.n_params * s->model.esize;
    tl_add(l, k, "rng", words_of_u64(s->rng.s, 4), 8);
    tl_add(l, k, "dropout_rng", words_of_u64(s->model.dropout.s, 4), 8);
    if (s->prepared) {
        tl_add(l, k, "order", words_of_sizes(s->order, (size_t)s->n_train), (size_t)s->n_train);
        tl_add(l, k, "lrs", words_of_doubles(s->lrs, (size_t)s->n_steps), 2 * (size_t)s->n_steps);
    }
    tl_add(l, k, "best", words_of_bytes(s->best, sizeof(float) * s->n_params), s->n_params);
    tl_add(l, k, "params", words_of_bytes(s->model.params, eb), eb / 4);
    tl_add(l, k, "adam_m", words_of_bytes(s->model.adam_m, eb), eb / 4);
    tl_add(l, k, "adam_v", words_of_bytes(s->model.adam_v, eb), eb / 4);
    tl_add(l, k, "source", words_of_bytes(s->source, sizeof(uint32_t) * s->n_source),
           s->n_source);
    for (int j = 0; j < ck->n_done; j++)
        tl_add(l, (uint32_t)j, "final",
               words_of_bytes(ck->done_params + (size_t)j * ck->n_params,
                              sizeof(float) * ck->n_params),
               ck->n_params);
    static const char *const set[3] = { "split.train", "split.val", "split.test" };
    for (int i = 0; i < 3; i++)
        tl_add(l, 0, set[i], words_of_sizes(ck->split.rows[i], ck->split.n[i]), ck->split.n[i]);
}

mp_status mp_checkpoint_write(const char *path, const mp_kv *run, const mp_checkpoint *ck)
{
    if (ck->state.model.esize % 4 || ck->state.k != ck->n_done)
        return mp_error_set(MP_ERR_ARG, "checkpoint: a state of member %d after %d members "
                            "done, elements of %zu bytes", ck->state.k, ck->n_done,
                            ck->state.model.esize);
    mp_kv *kv = NULL;
    tensor_list l = { 0 };
    mp_status st = mp_kv_new(&kv);
    for (size_t i = 0; st == MP_OK && run && i < mp_kv_count(run); i++)
        st = mp_kv_set(kv, mp_kv_key(run, i), mp_kv_value(run, i));
    if (st == MP_OK)
        st = put_state_keys(kv, ck);
    if (st == MP_OK) {
        put_state_tensors(&l, ck);
        st = l.nomem ? mp_error_set(MP_ERR_NOMEM, "out of memory writing %s", path)
                     : mp_modelfile_write(path, kv, l.t, l.n);
    }
    tl_free(&l);
    mp_kv_free(kv);
    return st;
}

/* ===================================================================== */
/* Reading                                                                */
/* ===================================================================== */

void mp_checkpoint_free(mp_checkpoint *ck)
{
    mp_free((void *)ck->done_params);
    mp_free((void *)ck->done_best);
    mp_fit_state_free(&ck->state);
    mp_split_free(&ck->split);
    memset(ck, 0, sizeof *ck);
}

/* The words of tensor (block, name), which must hold exactly n of them. */
static mp_status get_words(const mp_modelfile *mf, uint32_t block, const char *name, size_t n,
                           const uint32_t **w)
{
    const float *data;
    mp_status st = mp_modelfile_get(mf, block, name, 1, (uint64_t[]){ n }, &data);
    *w = (const uint32_t *)data;
    return st;
}

static void u64_of_words(const uint32_t *w, uint64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
}

static mp_status kv_long(const mp_kv *kv, const char *key, long long lo, long long hi, long *out)
{
    long long v;
    mp_status st = mp_kv_get_int(kv, key, lo, hi, &v);
    if (st == MP_OK)
        *out = (long)v;
    return st;
}

static mp_status kv_int32(const mp_kv *kv, const char *key, long long lo, long long hi, int *out)
{
    long v;
    mp_status st = kv_long(kv, key, lo, hi, &v);
    if (st == MP_OK)
        *out = (int)v;
    return st;
}

static mp_status get_state_keys(const mp_kv *kv, mp_checkpoint *ck)
{
    mp_fit_state *s = &ck->state;
    mp_noam *q = &s->noam;
    long n_params, esize, n_train, n_steps;
    mp_status st;
    if ((st = kv_int32(kv, "ck.n_members", 1, 100000, &ck->n_members)) ||
        (st = kv_int32(kv, "ck.n_done", 0, ck->n_members - 1, &ck->n_done)) ||
        (st = kv_long(kv, "ck.n_params", 1, (long long)1 << 40, &n_params)) ||
        (st = kv_int32(kv, "ck.member", ck->n_done, ck->n_done, &s->k)) ||
        (st = kv_int32(kv, "ck.epoch", 1, 100000000, &s->epoch)) ||
        (st = kv_int32(kv, "ck.prepared", 0, 1, &s->prepared)) ||
        (st = kv_long(kv, "ck.n_train", 1, INT32_MAX, &n_train)) ||
        (st = kv_long(kv, "ck.n_steps", 1, INT32_MAX, &n_steps)) ||
        (st = mp_kv_get_double(kv, "ck.best_score", &s->best_score)) ||
        (st = kv_int32(kv, "ck.best_epoch", 0, s->epoch, &s->best_epoch)) ||
        (st = kv_long(kv, "ck.adam_t", 0, LLONG_MAX, &s->model.adam_t)) ||
        (st = kv_long(kv, "ck.esize", 4, 8, &esize)) ||
        (st = mp_kv_get_double(kv, "ck.noam.init_lr", &q->init_lr)) ||
        (st = mp_kv_get_double(kv, "ck.noam.max_lr", &q->max_lr)) ||
        (st = mp_kv_get_double(kv, "ck.noam.final_lr", &q->final_lr)) ||
        (st = kv_long(kv, "ck.noam.steps_per_epoch", 0, LLONG_MAX, &q->steps_per_epoch)) ||
        (st = kv_long(kv, "ck.noam.warmup_steps", 0, LLONG_MAX, &q->warmup_steps)) ||
        (st = kv_long(kv, "ck.noam.total_steps", 0, LLONG_MAX, &q->total_steps)) ||
        (st = mp_kv_get_double(kv, "ck.noam.linear_increment", &q->linear_increment)) ||
        (st = mp_kv_get_double(kv, "ck.noam.gamma", &q->gamma)) ||
        (st = kv_long(kv, "ck.noam.step", 0, LLONG_MAX, &q->step)) ||
        (st = mp_kv_get_double(kv, "ck.noam.lr", &q->lr)))
        return st;
    if (esize % 4)
        return mp_error_set(MP_ERR_FORMAT, "%s: elements of %ld bytes", mp_kv_origin(kv), esize);
    s->n_params = (size_t)n_params;
    s->model.n_params = (size_t)n_params;
    s->model.esize = (size_t)esize;
    s->n_train = (int32_t)n_train;
    s->n_steps = (int32_t)n_steps;
    ck->n_params = (size_t)n_params;
    return MP_OK;
}

/* A copy of n words of tensor (block, name) into a new block of `bytes`
 * (bytes <= 4 n). */
static mp_status take_words(const mp_modelfile *mf, uint32_t block, const char *name, size_t n,
                            void **out)
{
    const uint32_t *w;
    mp_status st = get_words(mf, block, name, n, &w);
    if (st)
        return st;
    if (!(*out = mp_malloc(4 * (n ? n : 1))))
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", mp_kv_origin(mf->header));
    memcpy(*out, w, 4 * n);
    return MP_OK;
}

static mp_status get_state_tensors(const mp_modelfile *mf, mp_checkpoint *ck)
{
    mp_fit_state *s = &ck->state;
    const char *origin = mp_kv_origin(mf->header);
    uint32_t k = (uint32_t)s->k;
    size_t ew = s->n_params * s->model.esize / 4;
    const uint32_t *w;
    mp_status st;
    if ((st = get_words(mf, k, "rng", 8, &w)))
        return st;
    u64_of_words(w, s->rng.s, 4);
    if ((st = get_words(mf, k, "dropout_rng", 8, &w)))
        return st;
    u64_of_words(w, s->model.dropout.s, 4);
    s->order = mp_malloc(sizeof(size_t) * (size_t)s->n_train);
    s->lrs = mp_malloc(sizeof(double) * (size_t)s->n_steps);
    if (!s->order || !s->lrs)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
    if (s->prepared) {
        if ((st = get_words(mf, k, "order", (size_t)s->n_train, &w)))
            return st;
        for (int32_t i = 0; i < s->n_train; i++)
            s->order[i] = w[i];
        if ((st = get_words(mf, k, "lrs", 2 * (size_t)s->n_steps, &w)))
            return st;
        for (int32_t i = 0; i < s->n_steps; i++) {
            uint64_t u;
            u64_of_words(w + 2 * i, &u, 1);
            memcpy(&s->lrs[i], &u, sizeof u);
        }
    }
    const mp_tensor *src = mp_modelfile_find(mf, k, "source");
    if (!src)
        return mp_error_set(MP_ERR_FORMAT, "%s: tensor source of member %u is missing", origin, k);
    s->n_source = (size_t)mp_tensor_numel(src);
    if ((st = take_words(mf, k, "best", s->n_params, (void **)&s->best)) ||
        (st = take_words(mf, k, "params", ew, &s->model.params)) ||
        (st = take_words(mf, k, "adam_m", ew, &s->model.adam_m)) ||
        (st = take_words(mf, k, "adam_v", ew, &s->model.adam_v)) ||
        (st = take_words(mf, k, "source", s->n_source, (void **)&s->source)))
        return st;
    return MP_OK;
}

static mp_status get_done(const mp_modelfile *mf, mp_checkpoint *ck)
{
    const mp_kv *kv = mf->header;
    const char *origin = mp_kv_origin(kv);
    double *best = NULL;
    size_t nb = 0;
    mp_status st = mp_kv_get_doubles(kv, "ck.done_best_epochs", &best, &nb);
    if (st)
        return st;
    int *db = mp_malloc(sizeof(int) * (size_t)(ck->n_done ? ck->n_done : 1));
    float *dp = mp_malloc(sizeof(float) * ck->n_params * (size_t)(ck->n_done ? ck->n_done : 1));
    ck->done_best = db;
    ck->done_params = dp;
    if (!db || !dp) {
        mp_free(best);
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
    }
    if (nb != (size_t)ck->n_done) {
        mp_free(best);
        return mp_error_set(MP_ERR_FORMAT, "%s: %zu best epochs for %d members done", origin,
                            nb, ck->n_done);
    }
    for (int j = 0; j < ck->n_done; j++) {
        if (!(best[j] >= 0 && best[j] <= 1e8 && best[j] == floor(best[j]))) {
            mp_free(best);
            return mp_error_set(MP_ERR_FORMAT, "%s: member %d's best epoch %g", origin, j, best[j]);
        }
        db[j] = (int)best[j];
    }
    mp_free(best);
    for (int j = 0; j < ck->n_done; j++) {
        const uint32_t *w;
        if ((st = get_words(mf, (uint32_t)j, "final", ck->n_params, &w)))
            return st;
        memcpy(dp + (size_t)j * ck->n_params, w, sizeof(float) * ck->n_params);
    }
    static const char *const set[3] = { "split.train", "split.val", "split.test" };
    for (int i = 0; i < 3; i++) {
        const mp_tensor *t = mp_modelfile_find(mf, 0, set[i]);
        if (!t)
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %s is missing", origin, set[i]);
        size_t n = (size_t)mp_tensor_numel(t);
        const uint32_t *w = (const uint32_t *)t->data;
        if (!(ck->split.rows[i] = mp_malloc(sizeof(size_t) * (n ? n : 1))))
            return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
        ck->split.n[i] = n;
        for (size_t j = 0; j < n; j++)
            ck->split.rows[i][j] = w[j];
    }
    return MP_OK;
}

mp_status mp_checkpoint_read(const char *path, mp_kv **run, mp_checkpoint *ck)
{
    memset(ck, 0, sizeof *ck);
    *run = NULL;
    mp_modelfile *mf = NULL;
    mp_status st = mp_modelfile_read(&mf, path);
    if (st)
        return st;
    const char *fmt = mp_kv_get(mf->header, "format");
    long long ver = 0;
    if (!fmt || strcmp(fmt, "molprop-checkpoint") != 0)
        st = mp_error_set(MP_ERR_FORMAT, "%s: not a molprop checkpoint (format '%s')", path,
                          fmt ? fmt : "");
    else if ((st = mp_kv_get_int(mf->header, "checkpoint_version", 0, 1000000, &ver)) == MP_OK &&
             ver != MP_CHECKPOINT_VERSION)
        st = mp_error_set(MP_ERR_FORMAT, "%s: checkpoint version %lld; this molprop reads "
                          "version %d", path, ver, MP_CHECKPOINT_VERSION);
    if (st == MP_OK)
        st = get_state_keys(mf->header, ck);
    if (st == MP_OK)
        st = get_state_tensors(mf, ck);
    if (st == MP_OK)
        st = get_done(mf, ck);
    if (st == MP_OK) {
        *run = mf->header;
        mf->header = NULL;
    } else {
        mp_checkpoint_free(ck);
    }
    mp_modelfile_free(mf);
    return st;
}

/* ===================================================================== */
/* Matching                                                               */
/* ===================================================================== */

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static mp_status differ(const char *path, const char *key, const char *was, const char *is)
{
    return mp_error_set(MP_ERR_ARG, "cannot resume from %s: it was made with %s = %s, this run "
                        "has %s = %s", path, key, was ? was : "(none)", key, is ? is : "(none)");
}

mp_status mp_checkpoint_match(const mp_kv *saved, const mp_kv *now, const char *prefix,
                              const char *path)
{
    size_t np = strlen(prefix);
    for (size_t i = 0; i < mp_kv_count(now); i++) {
        const char *key = mp_kv_key(now, i);
        if (!has_prefix(key, prefix))
            continue;
        const char *was = mp_kv_get(saved, key), *is = mp_kv_value(now, i);
        if (!was || strcmp(was, is) != 0)
            return differ(path, key + np, was, is);
    }
    for (size_t i = 0; i < mp_kv_count(saved); i++) {
        const char *key = mp_kv_key(saved, i);
        if (has_prefix(key, prefix) && !mp_kv_get(now, key))
            return differ(path, key + np, mp_kv_value(saved, i), NULL);
    }
    return MP_OK;
}
