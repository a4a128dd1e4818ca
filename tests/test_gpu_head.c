/*
 * test_gpu_head.c - the fused FFN head (ops.h head_forward / head_backward,
 * src/gpu/head_cuda.cu) against a double-precision reference on the host:
 *
 *   - the two ops on random heads of 1 and 2 layers, 1 to 64 molecules, odd
 *     and wide inputs, one to many outputs, with and without the input's
 *     gradient, every output poisoned first (an unwritten element fails)
 *     and the gradients holding values to add to, at tf32 and bf16 (both
 *     3xTF32, to fp32's tolerance; fp32 keeps the unfused, exact products);
 *   - the same bits run to run and from a CUDA graph's replay;
 *   - the sizes it does not take queue nothing and say so (return 0);
 *   - a model's training step with the fused head and without it.
 *
 * GPU only (names gpu_*): skipped without a GPU, failed under
 * MOLPROP_REQUIRE_GPU=1.
 */
#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"
#include "gpu/gpu.h"
#include "models/model.h"
#include "randgraph.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One head's sizes. */
typedef struct {
    int L, n, d0, ldx, f, t, want;
} shape;

/* A head's host values and the device buffers holding them. */
typedef struct {
    shape  s;
    float *x, *dy, *w[MP_HEAD_LAYERS], *b[MP_HEAD_LAYERS], *dw0[MP_HEAD_LAYERS],
          *db0[MP_HEAD_LAYERS];
    size_t wn[MP_HEAD_LAYERS], bn[MP_HEAD_LAYERS];
    void  *dx_d, *x_d, *dy_d, *out_d;
    mp_head hd;
} head;

static int dim_in(const shape *s, int l) { return l ? s->f : s->d0; }
static int dim_out(const shape *s, int l) { return l == s->L - 1 ? s->t : s->f; }

static float *host_random(mp_rng *r, size_t n, double scale)
{
    float *p = mp_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)((2 * mp_rng_uniform(r) - 1) * scale);
    return p;
}

static void *dev_of(mp_backend *b, const float *p, size_t n)
{
    void *d = b->alloc(b, n * sizeof(float) + 16);
    if (d && b->upload(b, d, p, n * sizeof(float)) != MP_OK) {
        b->free(b, d);
        return NULL;
    }
    return d;
}

/* n floats of NaN into a new device buffer (the poisoned outputs). */
static void *dev_nan(mp_backend *b, size_t n)
{
    float *p = mp_malloc(n * sizeof(float) + 4);
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    void *d = dev_of(b, p, n);
    mp_free(p);
    return d;
}

static void head_free(mp_backend *b, head *h)
{
    mp_free(h->x);
    mp_free(h->dy);
    for (int l = 0; l < MP_HEAD_LAYERS; l++) {
        mp_free(h->w[l]);
        mp_free(h->b[l]);
        mp_free(h->dw0[l]);
        mp_free(h->db0[l]);
        void *d[] = { (void *)h->hd.w[l], (void *)h->hd.bias[l], h->hd.dw[l], h->hd.db[l],
                      h->hd.hid[l] };
        for (int i = 0; i < 5; i++)
            if (d[i])
                b->free(b, d[i]);
    }
    void *d[] = { h->dx_d, h->x_d, h->dy_d, h->out_d };
    for (int i = 0; i < 4; i++)
        if (d[i])
            b->free(b, d[i]);
    memset(h, 0, sizeof *h);
}

/* Random x, dy, weights and biases (scaled as a trained layer's), gradients
 * holding random values, outputs poisoned.  0 on a failure. */
static int head_make(mp_backend *b, head *h, const shape *s, uint64_t seed)
{
    memset(h, 0, sizeof *h);
    h->s = *s;
    mp_rng r;
    mp_rng_seed(&r, seed, 17);
    const size_t n = (size_t)s->n;
    h->x = host_random(&r, n * s->ldx, 1.0);
    h->dy = host_random(&r, n * s->t, 1.0);
    h->x_d = h->x ? dev_of(b, h->x, n * s->ldx) : NULL;
    h->dy_d = h->dy ? dev_of(b, h->dy, n * s->t) : NULL;
    h->out_d = dev_nan(b, n * s->t);
    h->dx_d = dev_nan(b, n * s->ldx);
    int ok = h->x_d && h->dy_d && h->out_d && h->dx_d;
    mp_head *hd = &h->hd;
    hd->n_layers = s->L;
    hd->n = s->n;
    hd->d0 = s->d0;
    hd->ldx = s->ldx;
    hd->f = s->f;
    hd->t = s->t;
    for (int l = 0; ok && l < s->L; l++) {
        int di = dim_in(s, l), dout = dim_out(s, l);
        h->wn[l] = (size_t)di * dout;
        h->bn[l] = (size_t)dout;
        h->w[l] = host_random(&r, h->wn[l], 1.0 / sqrt((double)di));
        h->b[l] = host_random(&r, h->bn[l], 0.1);
        h->dw0[l] = host_random(&r, h->wn[l], 1.0);
        h->db0[l] = host_random(&r, h->bn[l], 1.0);
        ok = h->w[l] && h->b[l] && h->dw0[l] && h->db0[l];
        hd->w[l] = ok ? dev_of(b, h->w[l], h->wn[l]) : NULL;
        hd->bias[l] = ok ? dev_of(b, h->b[l], h->bn[l]) : NULL;
        hd->dw[l] = ok ? dev_of(b, h->dw0[l], h->wn[l]) : NULL;
        hd->db[l] = ok ? dev_of(b, h->db0[l], h->bn[l]) : NULL;
        hd->hid[l] = ok && l < s->L - 1 ? dev_nan(b, n * s->f) : NULL;
        ok = hd->w[l] && hd->bias[l] && hd->dw[l] && hd->db[l] && (l == s->L - 1 || hd->hid[l]);
    }
    return ok;
}

/* Downloads n floats of device buffer d (mp_free them). */
static float *get(mp_backend *b, const void *d, size_t n)
{
    return mp_test_floats_of(b, d, MP_ST_ELEM, 1, (int)n);
}

/* The tolerance of the precision under test (relative, and absolute
 * against the reference's rms). */
static double g_rel = 1e-4, g_abs = 1e-5;

static int compare(const char *what, const float *x, const double *ref, size_t n, char *err,
                   size_t cap)
{
    float *y = mp_malloc(n * sizeof(float) + 4);
    if (!y)
        return 0;
    for (size_t i = 0; i < n; i++)
        y[i] = (float)ref[i];
    char why[256];
    int ok = mp_test_close_all(x, y, n, g_rel, g_abs, why, sizeof why);
    if (!ok)
        snprintf(err, cap, "%s: %s", what, why);
    mp_free(y);
    return ok;
}

/* Runs both ops on h and checks every output against the host reference
 * in double: out and the hidden layers from the forward; the gradients,
 * from the device's hidden layers (so a pre-activation near 0 cannot flip
 * the reference's ReLU mask), from the backward.  0 with err filled. */
static int head_check(mp_backend *b, head *h, char *err, size_t cap)
{
    const shape *s = &h->s;
    const int L = s->L;
    const size_t n = (size_t)s->n;
    if (!b->head_forward(b, h->out_d, h->x_d, &h->hd)) {
        snprintf(err, cap, "head_forward declined a head it fuses");
        return 0;
    }
    if (!b->head_backward(b, h->dx_d, s->want, h->dy_d, h->x_d, &h->hd)) {
        snprintf(err, cap, "head_backward declined a head it fuses");
        return 0;
    }
    if (b->sync(b) != MP_OK) {
        snprintf(err, cap, "sync: %s", mp_error_message());
        return 0;
    }
    float *hid[MP_HEAD_LAYERS] = { 0 };
    float *out = get(b, h->out_d, n * s->t), *dx = get(b, h->dx_d, n * s->ldx);
    int ok = out && dx;
    for (int l = 0; ok && l < L - 1; l++)
        ok = (hid[l] = get(b, h->hd.hid[l], n * s->f)) != NULL;
    size_t big = n * (size_t)(s->f > s->d0 ? (s->f > s->t ? s->f : s->t) : (s->d0 > s->t ? s->d0 : s->t));
    double *a = mp_malloc(big * sizeof(double) + 8), *z = mp_malloc(big * sizeof(double) + 8);
    double *g = mp_malloc(big * sizeof(double) + 8);
    ok = ok && a && z && g;
    char what[96];
    /* forward: layer by layer from the device's previous layer */
    for (int l = 0; ok && l < L; l++) {
        int di = dim_in(s, l), dout = dim_out(s, l);
        const float *in = l ? hid[l - 1] : h->x;
        int ld = l ? s->f : s->ldx;
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < dout; c++) {
                double v = h->b[l][c];
                for (int k = 0; k < di; k++)
                    v += (double)in[i * ld + k] * h->w[l][(size_t)k * dout + c];
                z[i * dout + c] = l < L - 1 && v < 0 ? 0 : v;
            }
        snprintf(what, sizeof what, "forward layer %d", l);
        ok = compare(what, l < L - 1 ? hid[l] : out, z, n * dout, err, cap);
    }
    /* backward: g = dz_l, from dy */
    for (size_t i = 0; ok && i < n * s->t; i++)
        g[i] = h->dy[i];
    for (int l = L - 1; ok && l >= 0; l--) {
        int di = dim_in(s, l), dout = dim_out(s, l);
        const float *in = l ? hid[l - 1] : h->x;
        int ld = l ? s->f : s->ldx;
        float *dw = get(b, h->hd.dw[l], h->wn[l]), *db = get(b, h->hd.db[l], h->bn[l]);
        ok = dw && db;
        double *rw = ok ? mp_malloc(h->wn[l] * sizeof(double)) : NULL;
        ok = ok && rw;
        for (int c = 0; ok && c < dout; c++) {
            double v = h->db0[l][c];
            for (size_t i = 0; i < n; i++)
                v += g[i * dout + c];
            a[c] = v;
        }
        snprintf(what, sizeof what, "db of layer %d", l);
        ok = ok && compare(what, db, a, (size_t)dout, err, cap);
        for (int k = 0; ok && k < di; k++)
            for (int c = 0; c < dout; c++) {
                double v = h->dw0[l][(size_t)k * dout + c];
                for (size_t i = 0; i < n; i++)
                    v += (double)in[i * ld + k] * g[i * dout + c];
                rw[(size_t)k * dout + c] = v;
            }
        snprintf(what, sizeof what, "dW of layer %d", l);
        ok = ok && compare(what, dw, rw, h->wn[l], err, cap);
        mp_free(dw);
        mp_free(db);
        mp_free(rw);
        /* the input's gradient (l > 0: through the ReLU into the next g) */
        int cols = l ? s->f : s->want;
        for (size_t i = 0; ok && i < n; i++)
            for (int c = 0; c < cols; c++) {
                double v = 0;
                for (int k = 0; k < dout; k++)
                    v += g[i * dout + k] * h->w[l][(size_t)c * dout + k];
                z[i * cols + c] = l && !(in[i * ld + c] > 0) ? 0 : v;
            }
        if (ok && l == 0 && cols > 0) {
            /* dx's first `want` columns of each row (row stride ldx) */
            float *dxw = mp_malloc(n * cols * sizeof(float) + 4);
            ok = dxw != NULL;
            for (size_t i = 0; ok && i < n; i++)
                memcpy(dxw + i * cols, dx + i * s->ldx, (size_t)cols * sizeof(float));
            ok = ok && compare("dx", dxw, z, n * cols, err, cap);
            mp_free(dxw);
        }
        for (size_t i = 0; ok && l && i < n * cols; i++)
            g[i] = z[i];
    }
    /* dx past the wanted columns is not the op's: left as it was (NaN) */
    for (size_t i = 0; ok && i < n; i++)
        for (int c = s->want; c < s->ldx; c++)
            if (!isnan(dx[i * s->ldx + c])) {
                snprintf(err, cap, "dx[%zu, %d] written (want %d)", i, c, s->want);
                ok = 0;
                break;
            }
    for (int l = 0; l < MP_HEAD_LAYERS; l++)
        mp_free(hid[l]);
    mp_free(out);
    mp_free(dx);
    mp_free(a);
    mp_free(z);
    mp_free(g);
    if (!ok && !*err)
        snprintf(err, cap, "out of memory: %s", mp_error_message());
    return ok;
}

static const shape shapes[] = {
    /* L  n   d0   ldx  f    t   want */
    { 2, 50, 300, 300, 300, 1, 300 },     /* Chemprop's default head on a D-MPNN  */
    { 2, 64, 300, 500, 300, 12, 300 },    /* extra features (ldx > want), 12 tasks */
    { 1, 17, 433, 433, 300, 3, 100 },     /* one layer, odd widths                 */
    { 2, 1, 64, 64, 512, 130, 64 },       /* one molecule, widest hidden, 130 outs  */
    { 1, 33, 1024, 1024, 72, 5, 0 },      /* one layer, widest input, no dx         */
    { 2, 64, 300, 300, 2, 1, 300 },       /* fewer hidden columns than blocks       */
    { 2, 40, 1024, 1024, 257, 40, 1000 }, /* widest input, dx of 1000 columns       */
    { 2, 92, 300, 300, 300, 1, 300 },     /* a resident slot's batch of 50 + padding */
    { 2, 128, 301, 303, 300, 2, 301 },    /* most molecules, unaligned rows          */
};

/* Every shape on backend `name`: 1, 0 with err filled, or -1 when the
 * backend has no fused head (a device without clusters). */
static int precision_case(const char *name, char *err, size_t cap)
{
    mp_backend *b = NULL;
    if (mp_backend_open(&b, name) != MP_OK) {
        snprintf(err, cap, "%s: %s", name, mp_error_message());
        return 0;
    }
    if (!b->head_forward || !b->head_backward) {
        mp_backend_close(b);
        return -1;
    }
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        char why[512] = "";
        head h;
        if (!(ok = head_make(b, &h, s, 100 + i)))
            snprintf(why, sizeof why, "set-up: %s", mp_error_message());
        else
            ok = head_check(b, &h, why, sizeof why);
        if (!ok)
            snprintf(err, cap, "%s, shape %zu (L %d, n %d, d0 %d, f %d, t %d, want %d): %s",
                     name, i, s->L, s->n, s->d0, s->f, s->t, s->want, why);
        head_free(b, &h);
    }
    mp_backend_close(b);
    return ok;
}

MP_TEST(gpu_head_matches_reference)
{
    MP_NEED_GPU();
    /* 3xTF32 at both: fp32's rounding, over sums of up to 1,024 terms */
    static const struct { const char *name; double rel, abs; } precs[] = {
        { "gpu:tf32", 1e-4, 3e-5 }, { "gpu:bf16", 1e-4, 3e-5 },
    };
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        char err[1024] = "";
        g_rel = precs[p].rel;
        g_abs = precs[p].abs;
        int ok = precision_case(precs[p].name, err, sizeof err);
        if (ok < 0)
            MP_SKIP("this device runs no thread-block clusters: the head is not fused");
        CHECK_MSG(ok, "%s", err);
    }
}

/* Every output and gradient of one run of both ops on h, from fresh
 * gradients (dw0, db0), into one host array (mp_free it). */
static float *run_all(mp_backend *b, head *h, size_t *count)
{
    const shape *s = &h->s;
    const size_t n = (size_t)s->n;
    for (int l = 0; l < s->L; l++)
        if (b->upload(b, h->hd.dw[l], h->dw0[l], h->wn[l] * 4) != MP_OK ||
            b->upload(b, h->hd.db[l], h->db0[l], h->bn[l] * 4) != MP_OK)
            return NULL;
    if (!b->head_forward(b, h->out_d, h->x_d, &h->hd) ||
        !b->head_backward(b, h->dx_d, s->want, h->dy_d, h->x_d, &h->hd))
        return NULL;
    size_t total = n * s->t + n * s->ldx;
    for (int l = 0; l < s->L; l++)
        total += h->wn[l] + h->bn[l] + (l < s->L - 1 ? n * s->f : 0);
    float *all = mp_malloc(total * sizeof(float) + 4), *p = all;
    if (!all)
        return NULL;
    mp_status st = b->download(b, p, h->out_d, n * s->t * 4);
    p += n * s->t;
    st = st ? st : b->download(b, p, h->dx_d, n * s->ldx * 4);
    p += n * s->ldx;
    for (int l = 0; st == MP_OK && l < s->L; l++) {
        st = b->download(b, p, h->hd.dw[l], h->wn[l] * 4);
        p += h->wn[l];
        st = st ? st : b->download(b, p, h->hd.db[l], h->bn[l] * 4);
        p += h->bn[l];
        if (l < s->L - 1) {
            st = st ? st : b->download(b, p, h->hd.hid[l], n * s->f * 4);
            p += n * s->f;
        }
    }
    if (st != MP_OK) {
        mp_free(all);
        return NULL;
    }
    *count = total;
    return all;
}

/* The same bits run to run, and replayed from a CUDA graph. */
MP_TEST(gpu_head_bits_fixed)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "gpu:bf16"));
    if (!b->head_forward) {
        mp_backend_close(b);
        MP_SKIP("this device runs no thread-block clusters: the head is not fused");
    }
    CHECK_EQ_INT(mp_backend_cuda_head_cluster(b), 8);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        head h;
        CHECK(head_make(b, &h, &shapes[i], 200 + i));
        size_t n1 = 0, n2 = 0;
        float *r1 = run_all(b, &h, &n1), *r2 = run_all(b, &h, &n2);
        CHECK(r1 && r2 && n1 == n2);
        CHECK_MSG(memcmp(r1, r2, n1 * 4) == 0, "shape %zu: not the same bits run to run", i);
        /* captured and replayed twice (the gradients accumulate: twice the
         * backward on top of dw0; compared with two direct runs) */
        for (int l = 0; l < h.s.L; l++) {
            CHECK_OK(b->upload(b, h.hd.dw[l], h.dw0[l], h.wn[l] * 4));
            CHECK_OK(b->upload(b, h.hd.db[l], h.db0[l], h.bn[l] * 4));
        }
        mp_cuda_graph *gr = NULL;
        CHECK_OK(mp_cuda_graph_begin(b));
        int f1 = b->head_forward(b, h.out_d, h.x_d, &h.hd);
        int f2 = b->head_backward(b, h.dx_d, h.s.want, h.dy_d, h.x_d, &h.hd);
        CHECK_OK(mp_cuda_graph_end(b, &gr));
        CHECK(f1 && f2);
        CHECK_OK(mp_cuda_graph_launch(b, gr));
        CHECK_OK(mp_cuda_graph_launch(b, gr));
        CHECK_OK(b->sync(b));
        mp_cuda_graph_free(gr);
        float *dw_g = get(b, h.hd.dw[0], h.wn[0]);
        CHECK(dw_g);
        /* direct: twice from dw0 */
        for (int l = 0; l < h.s.L; l++)
            CHECK_OK(b->upload(b, h.hd.dw[l], h.dw0[l], h.wn[l] * 4));
        CHECK(b->head_forward(b, h.out_d, h.x_d, &h.hd));
        CHECK(b->head_backward(b, h.dx_d, h.s.want, h.dy_d, h.x_d, &h.hd));
        CHECK(b->head_forward(b, h.out_d, h.x_d, &h.hd));
        CHECK(b->head_backward(b, h.dx_d, h.s.want, h.dy_d, h.x_d, &h.hd));
        float *dw_d = get(b, h.hd.dw[0], h.wn[0]);
        CHECK(dw_d);
        CHECK_MSG(memcmp(dw_g, dw_d, h.wn[0] * 4) == 0, "shape %zu: the graph's replay gives "
                  "other bits than direct calls", i);
        mp_free(dw_g);
        mp_free(dw_d);
        mp_free(r1);
        mp_free(r2);
        head_free(b, &h);
    }
    CHECK_OK(b->sync(b));
    mp_backend_close(b);
}

/* What the ops do not take they leave to the caller, queuing nothing. */
MP_TEST(gpu_head_declines)
{
    MP_NEED_GPU();
    mp_backend *b = NULL, *f32 = NULL;
    CHECK_OK(mp_backend_open(&f32, "gpu:fp32"));
    CHECK_MSG(f32->head_forward == NULL && f32->head_backward == NULL,
              "gpu:fp32 fuses the head (its products must stay exact fp32)");
    CHECK(mp_backend_cuda_set_head_cluster(f32, 8) == MP_ERR_ARG);
    mp_backend_close(f32);
    CHECK_OK(mp_backend_open(&b, "gpu:tf32"));
    if (!b->head_forward) {
        mp_backend_close(b);
        MP_SKIP("this device runs no thread-block clusters: the head is not fused");
    }
    static const shape no[] = {
        { 2, 129, 300, 300, 300, 1, 300 },    /* more molecules than a cluster takes */
        { 3, 50, 300, 300, 300, 1, 300 },     /* three layers                        */
        { 2, 128, 300, 300, 300, 513, 300 },  /* n t past what is summed             */
        { 2, 50, 300, 300, 513, 1, 300 },     /* hidden too wide                     */
        { 2, 50, 1025, 1025, 300, 1, 300 },   /* input too wide                      */
        { 0, 50, 300, 300, 300, 1, 300 },     /* no layer                            */
        { 2, 50, 300, 300, 300, 1, 301 },     /* more wanted columns than inputs      */
        { 2, 0, 300, 300, 300, 1, 300 },      /* no molecule                         */
    };
    void *p = b->alloc(b, 1 << 16);
    CHECK(p);
    long calls = mp_backend_cuda_head_calls(b);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        mp_head hd;
        memset(&hd, 0, sizeof hd);
        hd.n_layers = no[i].L;
        hd.n = no[i].n;
        hd.d0 = no[i].d0;
        hd.ldx = no[i].ldx;
        hd.f = no[i].f;
        hd.t = no[i].t;
        for (int l = 0; l < MP_HEAD_LAYERS; l++)
            hd.w[l] = hd.bias[l] = hd.dw[l] = hd.db[l] = hd.hid[l] = p;
        if (i != 6)
            CHECK_MSG(b->head_forward(b, p, p, &hd) == 0, "case %zu: forward taken", i);
        CHECK_MSG(b->head_backward(b, p, no[i].want, p, p, &hd) == 0, "case %zu: backward "
                  "taken", i);
    }
    CHECK_EQ_INT((int)(mp_backend_cuda_head_calls(b) - calls), 0);
    /* switched off: no ops */
    CHECK_OK(mp_backend_cuda_set_head_cluster(b, 0));
    CHECK(b->head_forward == NULL && b->head_backward == NULL);
    CHECK(mp_backend_cuda_set_head_cluster(b, 16) == MP_ERR_ARG);
    CHECK_OK(mp_backend_cuda_set_head_cluster(b, 8));
    CHECK(b->head_forward != NULL && b->head_backward != NULL);
    b->free(b, p);
    CHECK_OK(b->sync(b));
    mp_backend_close(b);
}

/* A D-MPNN's training step (forward, loss, backward) on a batch of 50 with
 * the fused head and without it: the same loss and gradients to within
 * the order of the sums (fp32's rounding, carried back through the bf16
 * encoder). */
MP_TEST(gpu_head_model_step)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "gpu:bf16"));
    const int c0 = mp_backend_cuda_head_cluster(b);
    if (!c0) {
        mp_backend_close(b);
        MP_SKIP("this device runs no thread-block clusters: the head is not fused");
    }
    mp_model_config cfg = mp_model_config_default();
    cfg.n_tasks = 2;
    mp_rng r;
    mp_rng_seed(&r, 11, 3);
    mp_graphs g;
    rg_opts o = { 1, 40, 0.05, 0.05, 4 };
    CHECK(rg_make(&g, &r, 50, cfg.atom_fdim, &o));
    float tg[100];
    for (int i = 0; i < 100; i++)
        tg[i] = (float)(2 * mp_rng_uniform(&r) - 1);
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &cfg, b, 5));
    const size_t np = mp_model_n_params(m);
    float *gf = mp_malloc(np * 4), *gu = mp_malloc(np * 4);
    float of[100], ou[100];
    double lf = 0, lu = 0;
    CHECK(gf && gu);
    long calls = mp_backend_cuda_head_calls(b);
    mp_model_zero_grad(m);
    CHECK_OK(mp_model_forward(m, &g, NULL, 50, 1, of));
    CHECK_OK(mp_model_loss_backward(m, tg, &lf));
    CHECK_OK(mp_model_get_grads(m, gf));
    CHECK_EQ_INT((int)(mp_backend_cuda_head_calls(b) - calls), 2);
    CHECK_OK(mp_backend_cuda_set_head_cluster(b, 0));
    mp_model_zero_grad(m);
    CHECK_OK(mp_model_forward(m, &g, NULL, 50, 1, ou));
    CHECK_OK(mp_model_loss_backward(m, tg, &lu));
    CHECK_OK(mp_model_get_grads(m, gu));
    double d2 = 0, r2 = 0, o2 = 0, or2 = 0;
    for (size_t i = 0; i < np; i++) {
        d2 += ((double)gf[i] - gu[i]) * ((double)gf[i] - gu[i]);
        r2 += (double)gu[i] * gu[i];
    }
    for (int i = 0; i < 100; i++) {
        o2 += ((double)of[i] - ou[i]) * ((double)of[i] - ou[i]);
        or2 += (double)ou[i] * ou[i];
    }
    if (mp_test_env_flag("MOLPROP_TEST_VERBOSE"))
        printf("    loss %.8g / %.8g, outputs rel %.3g, gradients rel %.3g\n", lf, lu,
               sqrt(o2 / or2), sqrt(d2 / r2));
    CHECK_MSG(sqrt(o2 / or2) < 1e-3, "outputs: fused vs unfused relative %.3g",
              sqrt(o2 / or2));
    CHECK_MSG(fabs(lf - lu) <= 1e-4 * fabs(lu), "loss: fused %.8g, unfused %.8g", lf, lu);
    CHECK_MSG(sqrt(d2 / r2) < 1e-2, "gradients: fused vs unfused relative %.3g",
              sqrt(d2 / r2));
    mp_free(gf);
    mp_free(gu);
    mp_model_free(m);
    mp_graphs_free(&g);
    CHECK_OK(mp_backend_cuda_set_head_cluster(b, c0));
    mp_backend_close(b);
}
