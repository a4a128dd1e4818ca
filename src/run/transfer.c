/*
 * transfer.c - transfer learning (trainer.h: mp_transfer_init): a new
 * ensemble starts from a saved model's weights, with a fresh head when the
 * tasks differ, and parts of it frozen (models/model.c: mp_model_set_frozen;
 * frozen tensors keep their loaded bits through fine-tuning).
 */
#include "run/trainer.h"

#include <string.h>

/* The first architecture field where a and b differ (NULL: none). */
static const char *arch_mismatch(const mp_model_config *a, const mp_model_config *b, char *buf,
                                 size_t n)
{
#define SAME(field, name)                                                                    \
    if (a->field != b->field) {                                                              \
        snprintf(buf, n, "%s %g here, %g in the initial model", name, (double)a->field,       \
                 (double)b->field);                                                          \
        return buf;                                                                          \
    }
    SAME(kind, "model kind (0 dmpnn, 1 ffn)");
    SAME(atom_fdim, "atom features");
    SAME(hidden, "--hidden");
    SAME(depth, "--depth");
    SAME(ffn_layers, "--ffn-layers");
    SAME(extra_dim, "molecule features (their length)");
    SAME(aggregation, "--aggregation (0 mean, 1 sum, 2 norm)");
#undef SAME
    int fa = a->ffn_hidden > 0 ? a->ffn_hidden : a->hidden;
    int fb = b->ffn_hidden > 0 ? b->ffn_hidden : b->hidden;
    if (a->ffn_layers > 1 && fa != fb) {
        snprintf(buf, n, "--ffn-hidden %d here, %d in the initial model", fa, fb);
        return buf;
    }
    return NULL;
}

/* 1 when e and init predict the same tasks (names, count and type). */
static int same_tasks(const mp_ensemble *e, const mp_ensemble *init)
{
    if (e->n_tasks != init->n_tasks || e->task != init->task)
        return 0;
    for (size_t k = 0; k < e->n_tasks; k++)
        if (strcmp(e->task_names[k], init->task_names[k]))
            return 0;
    return 1;
}

/* Copies init's member `from` into e's member `to`: all of the block, or
 * all but the head's last layer (its weights and bias end the block). */
static mp_status copy_member(mp_ensemble *e, int to, const mp_ensemble *init, int from,
                             int whole)
{
    mp_model *dst = e->members[to];
    const mp_model *src = init->members[from];
    size_t n = mp_model_n_params(dst), n_src = mp_model_n_params(src), keep = n;
    int nv;
    const mp_param_view *v = mp_model_views(dst, &nv);
    if (!whole)
        keep = v[nv - 2].offset;   /* the last layer's W, then its b */
    float *a = mp_malloc(sizeof(float) * n), *b = mp_malloc(sizeof(float) * n_src);
    mp_status st = MP_OK;
    if (!a || !b)
        st = mp_error_set(MP_ERR_NOMEM, "init-model: out of memory");
    if (!st && !(st = mp_model_get_params(dst, a)) && !(st = mp_model_get_params(src, b))) {
        memcpy(a, b, sizeof(float) * keep);
        st = mp_model_set_params(dst, a);
    }
    mp_free(a);
    mp_free(b);
    return st;
}

mp_status mp_transfer_init(mp_ensemble *e, const mp_train_opts *o)
{
    if (!o->init_model) {
        if (o->freeze_encoder || o->freeze_ffn_layers > 0)
            return mp_error_set(MP_ERR_ARG, "--freeze-encoder / --freeze-ffn-layers need "
                                "--init-model (frozen random weights are of no use)");
        return MP_OK;
    }
    mp_ensemble *init = NULL;
    mp_status st = mp_ensemble_load(&init, o->init_model, "cpu");
    if (st)
        return st;
    char why[256];
    const char *diff = arch_mismatch(&e->cfg, &init->cfg, why, sizeof why);
    if (diff)
        st = mp_error_set(MP_ERR_ARG, "--init-model %s: %s (pass the same architecture)",
                          o->init_model, diff);
    else if (e->layout != init->layout || e->features != init->features)
        st = mp_error_set(MP_ERR_ARG, "--init-model %s: trained with other atom features or "
                          "molecule features (--atom-layout, --features must match)",
                          o->init_model);
    int whole = same_tasks(e, init);
    if (!st && !whole && o->freeze_ffn_layers >= e->cfg.ffn_layers)
        st = mp_error_set(MP_ERR_ARG, "--freeze-ffn-layers %d: the tasks differ from the "
                          "initial model's, so the last layer is a fresh head that must train",
                          o->freeze_ffn_layers);
    for (int k = 0; !st && k < e->n_members; k++)
        if (!(st = copy_member(e, k, init, k % init->n_members, whole)))
            st = mp_model_set_frozen(e->members[k], o->freeze_encoder, o->freeze_ffn_layers);
    if (!st && !o->quiet)
        fprintf(stderr, "init-model %s: %s%s%s\n", o->init_model,
                whole ? "every weight loaded" : "weights loaded, a fresh head for the new tasks",
                o->freeze_encoder ? "; encoder frozen" : "",
                o->freeze_ffn_layers > 0 ? "; first FFN layers frozen" : "");
    mp_ensemble_free(init);
    return st;
}
