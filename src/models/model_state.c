/*
 * model_state.c - a model's training state out and back in (model_state.h),
 * block by block through the backend's own copies.
 */
#include "models/model_state.h"

#include "models/model_impl.h"

#include <math.h>
#include <string.h>

void mp_model_state_free(mp_model_state *s)
{
    mp_free(s->params);
    mp_free(s->adam_m);
    mp_free(s->adam_v);
    memset(s, 0, sizeof *s);
}

/* A padded model's state is kept in the API's layout (model_impl.h), as
 * its checkpoints count parameters, so it resumes padded or not. */
static mp_status padded_get(const mp_model *m, mp_model_state *s)
{
    mp_status st = m->b->sync(m->b);
    if (st == MP_OK)
        st = mp_model_block_get(m, m->params, s->params);
    if (st == MP_OK)
        st = mp_model_block_get(m, m->adam_m, s->adam_m);
    if (st == MP_OK)
        st = mp_model_block_get(m, m->adam_v, s->adam_v);
    return st;
}

mp_status mp_model_state_get(const mp_model *m, mp_model_state *s)
{
    memset(s, 0, sizeof *s);
    const size_t n = mp_model_n_params(m), bytes = n * m->esize;
    s->n_params = n;
    s->esize = m->esize;
    s->params = mp_malloc(bytes);
    s->adam_m = mp_malloc(bytes);
    s->adam_v = mp_malloc(bytes);
    if (!s->params || !s->adam_m || !s->adam_v) {
        mp_model_state_free(s);
        return mp_error_set(MP_ERR_NOMEM, "out of memory saving the training state (%zu "
                            "parameters)", n);
    }
    mp_backend *b = m->b;
    mp_status st;
    if (m->padded) {
        if ((st = padded_get(m, s))) {
            mp_model_state_free(s);
            return st;
        }
    } else if ((st = b->sync(b)) || (st = b->download(b, s->params, m->params, bytes)) ||
        (st = b->download(b, s->adam_m, m->adam_m, bytes)) ||
        (st = b->download(b, s->adam_v, m->adam_v, bytes))) {
        mp_model_state_free(s);
        return st;
    }
    s->adam_t = m->adam_t;
    s->dropout = m->drop_rng;
    return MP_OK;
}

mp_status mp_model_state_set(mp_model *m, const mp_model_state *s)
{
    const size_t n = mp_model_n_params(m);
    if (s->n_params != n || s->esize != m->esize)
        return mp_error_set(MP_ERR_ARG, "training state of %zu parameters of %zu bytes for a "
                            "model of %zu parameters of %zu bytes", s->n_params, s->esize, n,
                            m->esize);
    mp_backend *b = m->b;
    size_t bytes = n * m->esize;
    mp_status st;
    if (m->padded) {
        if ((st = mp_model_block_set(m, m->params, s->params)) ||
            (st = mp_model_block_set(m, m->adam_m, s->adam_m)) ||
            (st = mp_model_block_set(m, m->adam_v, s->adam_v)) || (st = b->sync(b)))
            return st;
    } else if ((st = b->upload(b, m->params, s->params, bytes)) ||
        (st = b->upload(b, m->adam_m, s->adam_m, bytes)) ||
        (st = b->upload(b, m->adam_v, s->adam_v, bytes)) || (st = b->sync(b)))
        return st;
    m->adam_t = s->adam_t;
    m->drop_rng = s->dropout;
    return MP_OK;
}

mp_status mp_model_set_grad_clip(mp_model *m, double max_norm)
{
    if (!(max_norm >= 0 && isfinite(max_norm)))
        return mp_error_set(MP_ERR_ARG, "gradient clipping norm %g (must be >= 0)", max_norm);
    m->grad_clip = max_norm;
    return MP_OK;
}

long mp_model_adam_steps(const mp_model *m) { return m->adam_t; }
void mp_model_add_adam_steps(mp_model *m, long n) { m->adam_t += n; }
