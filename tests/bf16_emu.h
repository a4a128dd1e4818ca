/*
 * bf16_emu.h - bfloat16 on the host for the bf16 tests (tests/test_gpu_bf16.c):
 * round to nearest even and back, and an emulation of ops.h's bf16-storage
 * ops (half_acts) over the float reference backend, so the op checks, the
 * model's bf16 path and the step bounds run on machines without a GPU.
 * Each emulated op is the float op it stands for, bf16 inputs widened
 * (exactly) before and bf16 outputs rounded after: what the cuda ops
 * compute, up to the order of fp32 additions inside the products.
 * Header-only (static functions): one user.
 */
#ifndef MP_TEST_BF16_EMU_H
#define MP_TEST_BF16_EMU_H

#include "core/core.h"
#include "backend/ops.h"

#include <stdint.h>
#include <string.h>

/* ===================================================================== */
/* bf16 on the host                                                       */
/* ===================================================================== */

/* Round to nearest even (NaN stays a quiet NaN), as __float2bfloat16_rn. */
static uint16_t bf_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ===================================================================== */
/* The emulation: bf16 ops over the float reference backend               */
/* ===================================================================== */

/* Each op is the float op it stands for, with the bf16 operands widened
 * (exactly) before and the bf16 outputs rounded after: what the cuda ops
 * compute, up to the order of fp32 additions inside the products. */

static float *emu_tmp(size_t n) { return mp_malloc((n ? n : 1) * sizeof(float)); }

static void emu_round(void *dst, const float *src, size_t n)
{
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = bf_round(src[i]);
}

static float *emu_widen(const void *src, size_t n)
{
    float *t = emu_tmp(n);
    const uint16_t *s = src;
    for (size_t i = 0; t && i < n; i++)
        t[i] = bf_value(s[i]);
    return t;
}

static void emu_to_bf16(mp_backend *b, void *dst, const void *src, size_t n)
{
    emu_round(dst, src, n);
}

static void emu_gemm_batch_bf16(mp_backend *b, int count, const mp_gemm *g, unsigned c_bf16)
{
    for (int i = 0; i < count; i++) {
        const mp_gemm *p = &g[i];
        size_t na = (size_t)(p->ta ? p->k : p->m) * p->lda;
        size_t nb = (size_t)(p->tb ? p->n : p->k) * p->ldb;
        size_t nc = (size_t)(p->m > 0 ? p->m : 0) * p->ldc;
        int ch = (c_bf16 >> i) & 1u;
        float *a = emu_widen(p->a, na), *bb = emu_widen(p->b, nb);
        float *c = ch ? emu_widen(p->c, nc) : p->c;
        if (a && bb && c) {
            b->gemm(b, p->ta, p->tb, p->m, p->n, p->k, p->alpha, a, p->lda, bb, p->ldb, p->beta,
                    c, p->ldc);
            for (int r = 0; ch && r < p->m; r++)   /* the [m x n] block, rounded once */
                emu_round((uint16_t *)p->c + (size_t)r * p->ldc, c + (size_t)r * p->ldc,
                          (size_t)p->n);
        }
        mp_free(a);
        mp_free(bb);
        if (ch)
            mp_free(c);
    }
}

static void emu_gemm_res_relu_bf16(mp_backend *b, int m, int n, int k, const void *a, int lda,
                                   const void *w, int ldw, const void *r, int ldr, void *c,
                                   int ldc, int rc_bf16)
{
    float *af = emu_widen(a, (size_t)m * lda), *wf = emu_widen(w, (size_t)k * ldw);
    float *rf = rc_bf16 ? emu_widen(r, (size_t)m * ldr) : NULL;
    float *cf = rc_bf16 ? emu_tmp((size_t)m * ldc) : NULL;
    if (af && wf && (!rc_bf16 || (rf && cf))) {
        if (!rc_bf16) {
            b->gemm_res_relu(b, m, n, k, af, lda, wf, ldw, r, ldr, c, ldc);
        } else {
            b->gemm_res_relu(b, m, n, k, af, lda, wf, ldw, rf, ldr, cf, ldc);
            for (int i = 0; i < m; i++)   /* the [m x n] block, rounded */
                emu_round((uint16_t *)c + (size_t)i * ldc, cf + (size_t)i * ldc, (size_t)n);
        }
    }
    mp_free(af);
    mp_free(wf);
    mp_free(rf);
    mp_free(cf);
}

/* x as floats: itself, or a widened copy of a bf16 x (in *owned). */
static const void *emu_in(const void *x, int x_bf16, size_t n, float **owned)
{
    *owned = x_bf16 ? emu_widen(x, n) : NULL;
    return x_bf16 ? (const void *)*owned : x;
}

static void emu_message_bf16(mp_backend *b, void *msg, void *s, const int32_t *in_start,
                             const int32_t *in_edge, const int32_t *edge_src, const void *m,
                             int m_bf16, int32_t n_atoms, int32_t n_edges, int h)
{
    size_t n = (size_t)n_edges * h;
    float *t = emu_tmp(n), *mw;
    const void *mf = emu_in(m, m_bf16, n, &mw);
    if (t && mf) {
        b->message(b, t, s, in_start, in_edge, edge_src, mf, n_atoms, n_edges, h);
        emu_round(msg, t, n);
    }
    mp_free(t);
    mp_free(mw);
}

static void emu_atom_sum_bf16(mp_backend *b, void *a, const int32_t *in_start,
                              const int32_t *in_edge, const void *m, int m_bf16, int32_t n_atoms,
                              int h)
{
    size_t n = (size_t)n_atoms * h;
    float *t = emu_tmp(n), *mw;
    /* m holds a row per edge: the largest index in in_edge bounds it */
    size_t ne = 0;
    for (int32_t k = 0; k < (n_atoms > 0 ? in_start[n_atoms] : 0); k++)
        ne = (size_t)in_edge[k] + 1 > ne ? (size_t)in_edge[k] + 1 : ne;
    const void *mf = emu_in(m, m_bf16, ne * h, &mw);
    if (t && (mf || !m_bf16)) {
        b->atom_sum(b, t, in_start, in_edge, mf, n_atoms, h);
        emu_round(a, t, n);
    }
    mp_free(t);
    mp_free(mw);
}

static void emu_edge_embed_relu_bf16(mp_backend *b, void *h0, void *m0, const int32_t *edge_src,
                                     const int8_t *bond_hot, const void *a, const void *wb,
                                     int32_t n_edges, int h)
{
    size_t n = (size_t)n_edges * h;
    float *t = emu_tmp(n);
    if (!t)
        return;
    b->edge_embed(b, t, edge_src, bond_hot, a, wb, n_edges, h);
    emu_round(h0, t, n);
    b->relu_dropout(b, t, t, n, 0.0, 0);
    emu_round(m0, t, n);
    mp_free(t);
}

static void emu_relu_dropout_bf16(mp_backend *b, void *y, const void *x, size_t n, double p,
                                  uint64_t key)
{
    float *t = emu_widen(x, n);
    if (!t)
        return;
    b->relu_dropout(b, t, t, n, p, key);
    emu_round(y, t, n);
    mp_free(t);
}

static void emu_relu_dropout_backward_bf16(mp_backend *b, void *dx, void *dxh, const void *y,
                                           const void *dy, size_t n, double p)
{
    b->relu_dropout_backward(b, dx, y, dy, n, p);
    emu_round(dxh, dx, n);
}

static void emu_atom_sum_backward_relu_bf16(mp_backend *b, void *dx, void *dxh,
                                            const int32_t *edge_dst, const void *da,
                                            const void *y, int y_bf16, double p, int32_t n_edges,
                                            int h)
{
    size_t n = (size_t)n_edges * h;
    float *yw;
    const void *yf = emu_in(y, y_bf16, n, &yw);
    if (yf) {
        b->atom_sum_backward(b, dx, edge_dst, da, n_edges, h);
        b->relu_dropout_backward(b, dx, yf, dx, n, p);
        emu_round(dxh, dx, n);
    }
    mp_free(yw);
}

static void emu_message_backward_relu_bf16(mp_backend *b, void *dzh, void *dh0, void *ds,
                                           const int32_t *in_start, const int32_t *in_edge,
                                           const int32_t *edge_dst, const void *dmsg,
                                           const void *y, int y_bf16, double p, int32_t n_atoms,
                                           int32_t n_edges, int h)
{
    size_t n = (size_t)n_edges * h;
    float *t = emu_tmp(n), *dm = emu_widen(dmsg, n), *yw;
    const void *yf = emu_in(y, y_bf16, n, &yw);
    if (t && dm && yf) {
        b->message_backward_relu(b, t, dh0, ds, in_start, in_edge, edge_dst, dm, yf, p, n_atoms,
                                 n_edges, h);
        emu_round(dzh, t, n);
    }
    mp_free(t);
    mp_free(dm);
    mp_free(yw);
}

/* The float reference backend with the bf16 ops emulated (half_acts = 1). */
static mp_status emu_open(mp_backend **out)
{
    mp_status st = mp_backend_ref_open(out, MP_F32);
    if (st != MP_OK)
        return st;
    mp_backend *b = *out;
    b->name = "ref+bf16 (emulated)";
    b->half_acts = 1;
    b->to_bf16 = emu_to_bf16;
    b->gemm_batch_bf16 = emu_gemm_batch_bf16;
    b->gemm_res_relu_bf16 = emu_gemm_res_relu_bf16;
    b->message_bf16 = emu_message_bf16;
    b->atom_sum_bf16 = emu_atom_sum_bf16;
    b->relu_dropout_backward_bf16 = emu_relu_dropout_backward_bf16;
    b->message_backward_relu_bf16 = emu_message_backward_relu_bf16;
    b->atom_sum_backward_relu_bf16 = emu_atom_sum_backward_relu_bf16;
    b->edge_embed_relu_bf16 = emu_edge_embed_relu_bf16;
    b->relu_dropout_bf16 = emu_relu_dropout_bf16;
    return MP_OK;
}


#endif /* MP_TEST_BF16_EMU_H */
