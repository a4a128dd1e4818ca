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
/* Copies                                                                 */
/* ===================================================================== */

static void *dup_bytes(const void *p, size_t bytes)
{
    void *q = mp_malloc(bytes ? bytes : 1);
    if (q && bytes)
        memcpy(q, p, bytes);
    return q;
}

mp_status mp_fit_state_copy(mp_fit_state *out, const mp_fit_state *s)
{
    *out = *s;
    size_t eb = s->model.n_params * s->model.esize;
    out->order = dup_bytes(s->order, sizeof(size_t) * (size_t)s->n_train);
    out->lrs = dup_bytes(s->lrs, sizeof(double) * (size_t)s->n_steps);
    out->best = dup_bytes(s->best, sizeof(float) * s->n_params);
    out->source = dup_bytes(s->source, sizeof(uint32_t) * s->n_source);
    out->balance = s->n_balance ? dup_bytes(s->balance, sizeof(size_t) * (size_t)s->n_balance)
                                : NULL;
    out->model.params = dup_bytes(s->model.params, eb);
    out->model.adam_m = dup_bytes(s->model.adam_m, eb);
    out->model.adam_v = dup_bytes(s->model.adam_v, eb);
    if (!out->order || !out->lrs || !out->best || !out->source || !out->model.params ||
        !out->model.adam_m || !out->model.adam_v || (s->n_balance && !out->balance)) {
        mp_fit_state_free(out);
        return mp_error_set(MP_ERR_NOMEM, "out of memory copying a training state");
    }
    return MP_OK;
}

/* ===================================================================== */
/* Writing                                                                */
/* ===================================================================== */

/* A list of at most 100000 small integers as a key (doubles, exact). */
static mp_status set_ints(mp_kv *kv, const char *key, const int *v, int n)
{
    double *d = mp_malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!d)
        return mp_error_set(MP_ERR_NOMEM, "out of memory writing a checkpoint");
    for (int i = 0; i < n; i++)
        d[i] = v[i];
    mp_status st = mp_kv_set_doubles(kv, key, d, (size_t)n);
    mp_free(d);
    return st;
}

/* The scalar state of member s->k under "ck.m<k>." (version 1: "ck."). */
static mp_status put_state_keys(mp_kv *kv, const mp_fit_state *s)
{
    const mp_noam *q = &s->noam;
    char key[96];
#define KEY(name) (snprintf(key, sizeof key, "ck.m%d.%s", s->k, name), key)
    mp_status st;
    if ((st = mp_kv_set_int(kv, KEY("epoch"), s->epoch)) ||
        (st = mp_kv_set_int(kv, KEY("prepared"), s->prepared)) ||
        (st = mp_kv_set_int(kv, KEY("n_train"), s->n_train)) ||
        (st = mp_kv_set_int(kv, KEY("n_steps"), s->n_steps)) ||
        (st = mp_kv_set_double(kv, KEY("best_score"), s->best_score)) ||
        (st = mp_kv_set_int(kv, KEY("best_epoch"), s->best_epoch)) ||
        (st = mp_kv_set_int(kv, KEY("adam_t"), s->model.adam_t)) ||
        (st = mp_kv_set_int(kv, KEY("esize"), (long long)s->model.esize)) ||
        (st = mp_kv_set_double(kv, KEY("noam.init_lr"), q->init_lr)) ||
        (st = mp_kv_set_double(kv, KEY("noam.max_lr"), q->max_lr)) ||
        (st = mp_kv_set_double(kv, KEY("noam.final_lr"), q->final_lr)) ||
        (st = mp_kv_set_int(kv, KEY("noam.steps_per_epoch"), q->steps_per_epoch)) ||
        (st = mp_kv_set_int(kv, KEY("noam.warmup_steps"), q->warmup_steps)) ||
        (st = mp_kv_set_int(kv, KEY("noam.total_steps"), q->total_steps)) ||
        (st = mp_kv_set_double(kv, KEY("noam.linear_increment"), q->linear_increment)) ||
        (st = mp_kv_set_double(kv, KEY("noam.gamma"), q->gamma)) ||
        (st = mp_kv_set_int(kv, KEY("noam.step"), q->step)) ||
        (st = mp_kv_set_double(kv, KEY("noam.lr"), q->lr)))
        return st;
#undef KEY
    return MP_OK;
}

static mp_status put_keys(mp_kv *kv, const mp_checkpoint *ck)
{
    int sk[1024];
    int ns = ck->n_states < 1024 ? ck->n_states : 1024;
    for (int i = 0; i < ns; i++)
        sk[i] = ck->states[i].k;
    mp_status st;
    if ((st = mp_kv_set(kv, "format", "molprop-checkpoint")) ||
        (st = mp_kv_set_int(kv, "checkpoint_version", MP_CHECKPOINT_VERSION)) ||
        (st = mp_kv_set(kv, "molprop_version", MP_VERSION)) ||
        (st = mp_kv_set_int(kv, "ck.n_members", ck->n_members)) ||
        (st = mp_kv_set_int(kv, "ck.n_params", (long long)ck->n_params)) ||
        (st = set_ints(kv, "ck.done_members", ck->done_members, ck->n_done)) ||
        (st = set_ints(kv, "ck.done_best_epochs", ck->done_best, ck->n_done)) ||
        (st = set_ints(kv, "ck.state_members", sk, ns)))
        return st;
    for (int i = 0; i < ns; i++)
        if ((st = put_state_keys(kv, &ck->states[i])))
            return st;
    return MP_OK;
}

static void put_state_tensors(tensor_list *l, const mp_fit_state *s)
{
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
    if (s->n_balance)   /* class-balanced epochs only: older files have none */
        tl_add(l, k, "balance", words_of_sizes(s->balance, (size_t)s->n_balance),
               (size_t)s->n_balance);
}

static void put_tensors(tensor_list *l, const mp_checkpoint *ck)
{
    for (int i = 0; i < ck->n_states; i++)
        put_state_tensors(l, &ck->states[i]);
    for (int j = 0; j < ck->n_done; j++)
        tl_add(l, (uint32_t)ck->done_members[j], "final",
               words_of_bytes(ck->done_params + (size_t)j * ck->n_params,
                              sizeof(float) * ck->n_params),
               ck->n_params);
    static const char *const set[3] = { "split.train", "split.val", "split.test" };
    for (int i = 0; i < 3; i++)
        tl_add(l, 0, set[i], words_of_sizes(ck->split.rows[i], ck->split.n[i]), ck->split.n[i]);
}

/* Members named at most once, inside the ensemble, the states' not done. */
static int members_valid(const mp_checkpoint *ck)
{
    if (ck->n_members < 1 || ck->n_members > 100000 || ck->n_done < 0 || ck->n_states < 0 ||
        ck->n_done + ck->n_states > ck->n_members || ck->n_states > 1024)
        return 0;
    unsigned char *seen = mp_calloc((size_t)ck->n_members, 1);
    int ok = seen != NULL;
    for (int j = 0; ok && j < ck->n_done; j++) {
        int k = ck->done_members[j];
        ok = k >= 0 && k < ck->n_members && !seen[k] && (j == 0 || k > ck->done_members[j - 1]);
        if (ok)
            seen[k] = 1;
    }
    for (int i = 0; ok && i < ck->n_states; i++) {
        int k = ck->states[i].k;
        ok = k >= 0 && k < ck->n_members && !seen[k] && (i == 0 || k > ck->states[i - 1].k);
        if (ok)
            seen[k] = 1;
    }
    mp_free(seen);
    return ok;
}

mp_status mp_checkpoint_write(const char *path, const mp_kv *run, const mp_checkpoint *ck)
{
    for (int i = 0; i < ck->n_states; i++)
        if (ck->states[i].model.esize % 4)
            return mp_error_set(MP_ERR_ARG, "checkpoint: elements of %zu bytes",
                                ck->states[i].model.esize);
    if (!members_valid(ck))
        return mp_error_set(MP_ERR_ARG, "checkpoint: %d members done and %d in training of %d "
                            "do not add up", ck->n_done, ck->n_states, ck->n_members);
    mp_kv *kv = NULL;
    tensor_list l = { 0 };
    mp_status st = mp_kv_new(&kv);
    for (size_t i = 0; st == MP_OK && run && i < mp_kv_count(run); i++)
        st = mp_kv_set(kv, mp_kv_key(run, i), mp_kv_value(run, i));
    if (st == MP_OK)
        st = put_keys(kv, ck);
    if (st == MP_OK) {
        put_tensors(&l, ck);
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
    mp_free((void *)ck->done_members);
    mp_free((void *)ck->done_params);
    mp_free((void *)ck->done_best);
    for (int i = 0; ck->states && i < ck->n_states; i++)
        mp_fit_state_free((mp_fit_state *)&ck->states[i]);
    mp_free((void *)ck->states);
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

/* A list key of integers in [lo, hi] into a new array (*n of them). */
static mp_status get_ints(const mp_kv *kv, const char *key, int lo, int hi, int **out, int *n)
{
    double *d = NULL;
    size_t nd = 0;
    mp_status st = mp_kv_get_doubles(kv, key, &d, &nd);
    if (st)
        return st;
    int *v = mp_malloc(sizeof(int) * (nd ? nd : 1));
    if (!v) {
        mp_free(d);
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", mp_kv_origin(kv));
    }
    for (size_t i = 0; i < nd; i++) {
        if (!(d[i] >= lo && d[i] <= hi && d[i] == floor(d[i]))) {
            double bad = d[i];
            mp_free(d);
            mp_free(v);
            return mp_error_set(MP_ERR_FORMAT, "%s: %s holds %g", mp_kv_origin(kv), key, bad);
        }
        v[i] = (int)d[i];
    }
    mp_free(d);
    *out = v;
    *n = (int)nd;
    return MP_OK;
}

/* Member s->k's scalar state, its keys under `prefix`. */
static mp_status get_state_keys(const mp_kv *kv, const char *prefix, size_t n_params,
                                mp_fit_state *s)
{
    mp_noam *q = &s->noam;
    long esize, n_train, n_steps;
    char key[96];
#define KEY(name) (snprintf(key, sizeof key, "%s%s", prefix, name), key)
    mp_status st;
    if ((st = kv_int32(kv, KEY("epoch"), 1, 100000000, &s->epoch)) ||
        (st = kv_int32(kv, KEY("prepared"), 0, 1, &s->prepared)) ||
        (st = kv_long(kv, KEY("n_train"), 1, INT32_MAX, &n_train)) ||
        (st = kv_long(kv, KEY("n_steps"), 1, INT32_MAX, &n_steps)) ||
        (st = mp_kv_get_double(kv, KEY("best_score"), &s->best_score)) ||
        (st = kv_int32(kv, KEY("best_epoch"), 0, s->epoch, &s->best_epoch)) ||
        (st = kv_long(kv, KEY("adam_t"), 0, LLONG_MAX, &s->model.adam_t)) ||
        (st = kv_long(kv, KEY("esize"), 4, 8, &esize)) ||
        (st = mp_kv_get_double(kv, KEY("noam.init_lr"), &q->init_lr)) ||
        (st = mp_kv_get_double(kv, KEY("noam.max_lr"), &q->max_lr)) ||
        (st = mp_kv_get_double(kv, KEY("noam.final_lr"), &q->final_lr)) ||
        (st = kv_long(kv, KEY("noam.steps_per_epoch"), 0, LLONG_MAX, &q->steps_per_epoch)) ||
        (st = kv_long(kv, KEY("noam.warmup_steps"), 0, LLONG_MAX, &q->warmup_steps)) ||
        (st = kv_long(kv, KEY("noam.total_steps"), 0, LLONG_MAX, &q->total_steps)) ||
        (st = mp_kv_get_double(kv, KEY("noam.linear_increment"), &q->linear_increment)) ||
        (st = mp_kv_get_double(kv, KEY("noam.gamma"), &q->gamma)) ||
        (st = kv_long(kv, KEY("noam.step"), 0, LLONG_MAX, &q->step)) ||
        (st = mp_kv_get_double(kv, KEY("noam.lr"), &q->lr)))
        return st;
#undef KEY
    if (esize % 4)
        return mp_error_set(MP_ERR_FORMAT, "%s: elements of %ld bytes", mp_kv_origin(kv), esize);
    s->n_params = n_params;
    s->model.n_params = n_params;
    s->model.esize = (size_t)esize;
    s->n_train = (int32_t)n_train;
    s->n_steps = (int32_t)n_steps;
    return MP_OK;
}

/* Which members are done and which in training, and their scalar states:
 * version 2's lists, or version 1's members 0..n_done-1 done and one state
 * (member n_done) under "ck.". */
static mp_status get_keys(const mp_kv *kv, long long version, mp_checkpoint *ck)
{
    long n_params;
    int *done = NULL, *best = NULL, *sk = NULL, nd = 0, nb = 0, ns = 0;
    mp_status st;
    if ((st = kv_int32(kv, "ck.n_members", 1, 100000, &ck->n_members)) ||
        (st = kv_long(kv, "ck.n_params", 1, (long long)1 << 40, &n_params)))
        return st;
    ck->n_params = (size_t)n_params;
    if (version == 1) {
        int k;
        if ((st = kv_int32(kv, "ck.n_done", 0, ck->n_members - 1, &nd)) ||
            (st = kv_int32(kv, "ck.member", nd, nd, &k)))
            return st;
        done = mp_malloc(sizeof(int) * (size_t)(nd + 1));
        sk = mp_malloc(sizeof(int));
        if (!done || !sk) {
            mp_free(done);
            mp_free(sk);
            return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", mp_kv_origin(kv));
        }
        for (int j = 0; j < nd; j++)
            done[j] = j;
        sk[0] = k;
        ns = 1;
    } else if ((st = get_ints(kv, "ck.done_members", 0, ck->n_members - 1, &done, &nd)) ||
               (st = get_ints(kv, "ck.state_members", 0, ck->n_members - 1, &sk, &ns))) {
        mp_free(done);
        return st;
    }
    ck->done_members = done;
    ck->n_done = nd;
    if ((st = get_ints(kv, "ck.done_best_epochs", 0, 100000000, &best, &nb))) {
        mp_free(sk);
        return st;
    }
    ck->done_best = best;
    mp_fit_state *states = mp_calloc((size_t)(ns ? ns : 1), sizeof *states);
    if (!states) {
        mp_free(sk);
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", mp_kv_origin(kv));
    }
    ck->states = states;
    ck->n_states = ns;
    for (int i = 0; i < ns; i++)
        states[i].k = sk[i];
    mp_free(sk);
    if (nb != nd)
        return mp_error_set(MP_ERR_FORMAT, "%s: %d best epochs for %d members done",
                            mp_kv_origin(kv), nb, nd);
    if (!members_valid(ck))
        return mp_error_set(MP_ERR_FORMAT, "%s: its members done (%d) and in training (%d) of "
                            "%d do not add up", mp_kv_origin(kv), nd, ns, ck->n_members);
    for (int i = 0; i < ns; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, version == 1 ? "ck." : "ck.m%d.", states[i].k);
        if ((st = get_state_keys(kv, prefix, ck->n_params, &states[i])))
            return st;
    }
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

static mp_status get_state_tensors(const mp_modelfile *mf, mp_fit_state *s)
{
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
    /* the class-balance lists, where the run keeps them (fit.c checks them
     * against the run's rows before it reads one) */
    const mp_tensor *bal = mp_modelfile_find(mf, k, "balance");
    if (bal) {
        size_t nb = (size_t)mp_tensor_numel(bal);
        if (nb > (size_t)INT32_MAX || (nb && (st = get_words(mf, k, "balance", nb, &w))))
            return st ? st : mp_error_set(MP_ERR_FORMAT, "%s: tensor balance of member %u is "
                                          "too large", origin, k);
        if (!(s->balance = mp_malloc(sizeof(size_t) * (nb ? nb : 1))))
            return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
        for (size_t i = 0; i < nb; i++)
            s->balance[i] = w[i];
        s->n_balance = (int32_t)nb;
    }
    return MP_OK;
}

static mp_status get_done(const mp_modelfile *mf, mp_checkpoint *ck)
{
    const char *origin = mp_kv_origin(mf->header);
    float *dp = mp_malloc(sizeof(float) * ck->n_params * (size_t)(ck->n_done ? ck->n_done : 1));
    ck->done_params = dp;
    if (!dp)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
    mp_status st;
    for (int j = 0; j < ck->n_done; j++) {
        const uint32_t *w;
        if ((st = get_words(mf, (uint32_t)ck->done_members[j], "final", ck->n_params, &w)))
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
             ver != MP_CHECKPOINT_VERSION && ver != 1)
        st = mp_error_set(MP_ERR_FORMAT, "%s: checkpoint version %lld; this molprop reads "
                          "versions 1 to %d", path, ver, MP_CHECKPOINT_VERSION);
    if (st == MP_OK)
        st = get_keys(mf->header, ver, ck);
    for (int i = 0; st == MP_OK && i < ck->n_states; i++)
        st = get_state_tensors(mf, (mp_fit_state *)&ck->states[i]);
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
/* The table of a run's members                                           */
/* ===================================================================== */

mp_status mp_ck_table_open(mp_ck_table *t, int n_members, size_t n_params,
                           const mp_checkpoint *resumed)
{
    memset(t, 0, sizeof *t);
    t->n_members = n_members;
    t->n_params = n_params;
    t->status = mp_calloc((size_t)n_members, sizeof(int));
    t->live = mp_calloc((size_t)n_members, sizeof(mp_fit_state));
    t->final = mp_malloc(sizeof(float) * n_params * (size_t)n_members);
    t->best = mp_calloc((size_t)n_members, sizeof(int));
    if (!t->status || !t->live || !t->final || !t->best)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_status st = MP_OK;
    for (int j = 0; resumed && j < resumed->n_done; j++)
        mp_ck_table_set_done(t, resumed->done_members[j], resumed->done_params + (size_t)j * n_params,
                             resumed->done_best[j]);
    for (int i = 0; st == MP_OK && resumed && i < resumed->n_states; i++)
        st = mp_ck_table_set_state(t, &resumed->states[i]);
    return st;
}

void mp_ck_table_free(mp_ck_table *t)
{
    for (int k = 0; t->status && k < t->n_members; k++)
        if (t->status[k] == 1)
            mp_fit_state_free(&t->live[k]);
    mp_free(t->status);
    mp_free(t->live);
    mp_free(t->final);
    mp_free(t->best);
    memset(t, 0, sizeof *t);
}

mp_status mp_ck_table_set_state(mp_ck_table *t, const mp_fit_state *s)
{
    mp_fit_state copy;
    mp_status st = mp_fit_state_copy(&copy, s);
    if (st)
        return st;
    if (t->status[s->k] == 1)
        mp_fit_state_free(&t->live[s->k]);
    t->live[s->k] = copy;
    t->status[s->k] = 1;
    return MP_OK;
}

void mp_ck_table_set_done(mp_ck_table *t, int k, const float *params, int best_epoch)
{
    memcpy(t->final + (size_t)k * t->n_params, params, sizeof(float) * t->n_params);
    if (t->status[k] == 1)
        mp_fit_state_free(&t->live[k]);
    t->status[k] = 2;
    t->best[k] = best_epoch;
}

mp_status mp_ck_table_write(const mp_ck_table *t, const char *path, const mp_kv *run,
                            const mp_split *split)
{
    int n = t->n_members, nd = 0, ns = 0;
    size_t np = t->n_params;
    int *done = mp_malloc(sizeof(int) * 2 * (size_t)n);
    float *final = mp_malloc(sizeof(float) * np * (size_t)n);
    mp_fit_state *live = mp_malloc(sizeof(mp_fit_state) * (size_t)n);
    mp_status st;
    if (!done || !final || !live) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory writing %s", path);
    } else {
        for (int k = 0; k < n; k++) {
            if (t->status[k] == 2) {
                memcpy(final + (size_t)nd * np, t->final + (size_t)k * np, sizeof(float) * np);
                done[n + nd] = t->best[k];
                done[nd++] = k;
            } else if (t->status[k] == 1) {
                live[ns++] = t->live[k];
            }
        }
        mp_checkpoint ck = { .n_members = n, .n_params = np, .n_done = nd, .done_members = done,
                             .done_params = final, .done_best = done + n, .n_states = ns,
                             .states = live, .split = *split };
        st = mp_checkpoint_write(path, run, &ck);
    }
    mp_free(done);
    mp_free(final);
    mp_free(live);
    return st;
}

void mp_ck_table_where(const mp_ck_table *t, char *buf, size_t n)
{
    size_t at = 0;
    int ns = 0, nd = 0;
    buf[0] = '\0';
    for (int k = 0; t->status && k < t->n_members; k++) {
        nd += t->status[k] == 2;
        if (t->status[k] != 1 || at + 48 >= n)
            continue;
        int w = snprintf(buf + at, n - at, "%sepoch %d of member %d", ns++ ? ", " : "",
                         t->live[k].epoch, k + 1);
        at += w > 0 ? (size_t)w : 0;
    }
    if (ns == 0)
        snprintf(buf, n, "%d members done", nd);
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
