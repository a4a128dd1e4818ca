/*
 * model_pad.c - the padded width: a wide D-MPNN whose hidden size is not a
 * multiple of the backend's row_align runs with that size rounded up, its
 * extra units' weights zero and staying zero (model_impl.h, "padded").  The
 * API keeps the logical layout: parameters, gradients and Adam's moments go
 * to and from the host through mp_model_block_get / mp_model_block_set, which
 * drop or insert the padding.  Why: src/gpu/NOTES.md, "16-byte rows".
 */
#include "models/model_impl.h"

#include <string.h>

/* A fused-path D-MPNN wider than this whose hidden size is not a multiple
 * of the backend's row_align runs padded (model_impl.h): the products of
 * such widths are cuBLAS's, whose fast kernels want aligned rows; narrower
 * ones run on kernels of ours that take any row. */
#define PAD_MIN_HIDDEN 512

/* Lays the parameters out again at the padded width, keeping the logical
 * layout (already laid out) as the API's; nothing when the model is not to
 * be padded. */
void mp_model_pad_width(mp_model *m, const mp_backend *b)
{
    const int al = b->row_align, h = m->h;
    if (al <= 1 || m->generic || m->cfg.kind != MP_MODEL_DMPNN || h <= PAD_MIN_HIDDEN ||
        h % al == 0 || m->esize != sizeof(float))
        return;
    m->padded = 1;
    m->h_log = h;
    m->n_log = m->n_params;
    memcpy(m->lviews, m->views, sizeof m->views);
    m->h = (h + al - 1) / al * al;
    m->hr = m->h;                   /* the fused path has no atom descriptors */
    m->in_dim = m->hr + m->cfg.extra_dim;
    m->n_views = 0;
    m->n_params = 0;
    unsigned char inits[MP_MAX_VIEWS];
    int fans[MP_MAX_VIEWS] = { 0 };
    mp_model_layout_params(m, inits, fans);
    for (int i = 0; i < m->n_views; i++)
        m->pad_at[i] = m->views[i].offset == m->off_fw[0] ? h : m->lviews[i].rows;
}

/* Logical parameters (lviews) into the padded layout (views), zeros in the
 * padding, and back. */
void mp_model_pad_params(const mp_model *m, const float *lg, float *pd)
{
    for (int i = 0; i < m->n_views; i++) {
        const mp_param_view *l = &m->lviews[i], *p = &m->views[i];
        const int gap = p->rows - l->rows, at = m->pad_at[i];
        for (int r = 0; r < p->rows; r++) {
            float *row = pd + p->offset + (size_t)r * p->cols;
            if (r >= at && r < at + gap) {
                memset(row, 0, (size_t)p->cols * sizeof *row);
                continue;
            }
            const int lr = r < at ? r : r - gap;
            memcpy(row, lg + l->offset + (size_t)lr * l->cols, (size_t)l->cols * sizeof *row);
            memset(row + l->cols, 0, (size_t)(p->cols - l->cols) * sizeof *row);
        }
    }
}

static void unpad_params(const mp_model *m, const float *pd, float *lg)
{
    for (int i = 0; i < m->n_views; i++) {
        const mp_param_view *l = &m->lviews[i], *p = &m->views[i];
        const int gap = p->rows - l->rows, at = m->pad_at[i];
        for (int lr = 0; lr < l->rows; lr++)
            memcpy(lg + l->offset + (size_t)lr * l->cols,
                   pd + p->offset + (size_t)(lr < at ? lr : lr + gap) * p->cols,
                   (size_t)l->cols * sizeof *lg);
    }
}

/* A parameter-sized block (params, grads, Adam's moments) to and from host
 * floats in the API's (logical) layout (model_impl.h). */
mp_status mp_model_block_get(const mp_model *m, const void *blk, float *dst)
{
    if (!m->padded)
        return mp_model_download_floats((mp_model *)m, dst, blk, m->n_params);
    float *t = mp_malloc(m->n_params * sizeof *t);
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory for %zu values", m->n_params);
    mp_status st = mp_model_download_floats((mp_model *)m, t, blk, m->n_params);
    if (st == MP_OK)
        unpad_params(m, t, dst);
    mp_free(t);
    return st;
}

mp_status mp_model_block_set(mp_model *m, void *blk, const float *src)
{
    if (!m->padded)
        return mp_model_upload_floats(m, blk, src, m->n_params);
    float *t = mp_malloc(m->n_params * sizeof *t);
    if (!t)
        return mp_error_set(MP_ERR_NOMEM, "model: out of memory for %zu values", m->n_params);
    mp_model_pad_params(m, src, t);
    mp_status st = mp_model_upload_floats(m, blk, t, m->n_params);
    mp_free(t);
    return st;
}
