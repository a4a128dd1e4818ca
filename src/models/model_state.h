/*
 * model_state.h - a model's training state beyond its configuration, for
 * checkpoints (run/checkpoint.c): the parameter block and Adam's two
 * moments exactly as the backend holds them (raw elements of its type, so
 * a double-precision backend keeps every bit too), Adam's step count and
 * the dropout stream.  A model of the same configuration on the same
 * backend that is given this state continues bit for bit as the one it was
 * taken from would have: the same steps, the same dropout masks.
 */
#ifndef MP_MODEL_STATE_H
#define MP_MODEL_STATE_H

#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t n_params;      /* elements per block                             */
    size_t esize;         /* bytes per element (the backend's type)         */
    void  *params;        /* n_params x esize bytes each (mp_malloc'd)      */
    void  *adam_m;
    void  *adam_v;
    long   adam_t;        /* Adam steps taken (mp_model_adam_steps)         */
    mp_rng dropout;       /* the dropout stream where the next key comes from */
} mp_model_state;

/* Copies m's state into *s (three host blocks, owned by s; free with
 * mp_model_state_free).  The model must be idle (no launched steps).
 * MP_ERR_NOMEM, or the backend's download error. */
mp_status mp_model_state_get(const mp_model *m, mp_model_state *s);

/* Gives m the state s.  MP_ERR_ARG when s is of another size or element
 * type than m (naming both). */
mp_status mp_model_state_set(mp_model *m, const mp_model_state *s);

void mp_model_state_free(mp_model_state *s);   /* leaves *s zeroed */

#ifdef __cplusplus
}
#endif
#endif /* MP_MODEL_STATE_H */
