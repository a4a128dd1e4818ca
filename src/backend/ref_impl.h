/*
 * ref_impl.h - typed access for the reference backend's files (ref.c: the
 * seam's ops; ref_layers.c: the training-option layers): one body per op
 * serves float, double and bf16 operands through LDS / STS (see ref.c).
 * Needs a variable `b` (the backend) in scope.  Not part of any API.
 */
#ifndef MP_REF_IMPL_H
#define MP_REF_IMPL_H

#include "backend/ops.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Typed access                                                           */
/* ===================================================================== */

#define F64(b) ((b)->dtype == MP_F64)

static inline double load_st(const mp_backend *b, const void *p, mp_stype st, size_t i)
{
    if (st == MP_ST_BF16)
        return mp_bf16_value(((const uint16_t *)p)[i]);
    return F64(b) ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static inline void store_st(const mp_backend *b, void *p, mp_stype st, size_t i, double v)
{
    if (st == MP_ST_BF16)
        ((uint16_t *)p)[i] = mp_bf16_round((float)v);
    else if (F64(b))
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

#define LDS(p, st, i)    load_st(b, (p), (st), (size_t)(i))
#define STS(p, st, i, v) store_st(b, (p), (st), (size_t)(i), (v))
#define LD(p, i)         LDS(p, MP_ST_ELEM, i)
#define ST(p, i, v)      STS(p, MP_ST_ELEM, i, v)

#endif /* MP_REF_IMPL_H */
