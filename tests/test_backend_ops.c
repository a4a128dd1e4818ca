/*
 * test_backend_ops.c - the op table (ggml's test-backend-ops is the model):
 * every op of the seam (backend/ops.h), on every backend that opens here
 * (cpu, ref, ref:bf16; gpu:fp32, gpu:tf32 and gpu:bf16 where there is a
 * GPU, else reported as skipped, a failure under MOLPROP_REQUIRE_GPU=1), at
 * the storage types the model uses on that backend, against the reference
 * backend in double (ref64) given the very same operands.
 *
 * Each case makes random inputs at its sizes (odd widths, one row, zero
 * rows; graph batches with empty molecules and molecules without bonds),
 * poisons every output (0xFF bytes: NaN in double, float and bf16), runs the
 * op on the oracle and on the tested backend, and checks every output: an
 * element NaN on one side only was written by one side only; otherwise
 * ||tested - ref|| / ||ref|| within the bound of what it is (an fp32
 * result 1e-5; a product at tf32 2e-3, at bf16 on fp32 buffers 2e-2, of
 * bf16 operands 1e-4; anything stored in bf16 1e-2), and where an output is
 * a ReLU or dropout of the inputs themselves the two sides must zero the
 * same elements (not where the ReLU acts on a computed sum: a sum within
 * rounding of 0 may land on either side).  A bf16
 * operand holds the same bf16 values on both sides, so only the order and
 * precision of the sums differ.  Then the op runs again on the tested
 * backend (outputs reset; the cpu backend with 2 threads after 1) and must
 * give the same bytes.
 *
 * What the table cannot check (graph replay, error reporting, the fused
 * ops against the unfused kernels bit for bit, training parity) is in
 * test_gpu_ops.c, test_ops.c and the model tests.
 */
#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"
#include "randgraph.h"

#include <stdarg.h>
#include <stdlib.h>

#include "backend_ops_harness.h"


/* ===================================================================== */
/* Dense ops                                                              */
/* ===================================================================== */

typedef struct {
    int     count;
    mp_gemm g[8];
    tens   *a[8], *b[8], *c[8];
} gemm_arg;

static void op_gemm(mp_backend *b, int s, const void *arg)
{
    const gemm_arg *q = arg;
    mp_gemm g[8];
    for (int i = 0; i < q->count; i++) {
        g[i] = q->g[i];
        g[i].a = S(q->a[i]);
        g[i].b = S(q->b[i]);
        g[i].c = S(q->c[i]);
    }
    b->gemm(b, q->count, g);
}

/* The bound of a product's output. */
static double tol_gemm(const bo *x, mp_stype ab, mp_stype c)
{
    if (c == MP_ST_BF16)
        return TOL_BF16;
    return ab == MP_ST_BF16 ? TOL_GEMM_BF16 : TOL_GEMM[x->spec->prec];
}

/* Product i of a call: C = alpha op(A) op(B) + beta C at the given shape. */
static int gemm_add(bo *x, gemm_arg *q, int ta, int tb, int m, int n, int k, int pad,
                    double alpha, double beta, mp_stype ab, mp_stype cs)
{
    int i = q->count++;
    int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    q->g[i] = (mp_gemm){ ta, tb, m, n, k, alpha, beta, NULL, NULL, NULL, lda, ldb, ldc,
                         ab, ab, cs };
    q->a[i] = t_rand(x, "A", ab, (size_t)(ta ? k : m) * lda, -1, 1);
    q->b[i] = t_rand(x, "B", ab, (size_t)(tb ? n : k) * ldb, -1, 1);
    q->c[i] = beta != 0 ? t_acc(t_rand(x, "C", cs, (size_t)m * ldc, -1, 1), tol_gemm(x, ab, cs))
                        : t_out(x, "C", cs, (size_t)m * ldc, tol_gemm(x, ab, cs));
    return q->c[i] != NULL;
}

static void case_gemm(bo *x)
{
    static const int shapes[][3] = {
        { 1, 1, 1 }, { 7, 1, 7 }, { 1, 7, 300 }, { 64, 64, 64 }, { 37, 301, 1 }, { 5, 3, 0 },
        { 0, 4, 4 }, { 4, 0, 3 }, { 301, 7, 300 }, { 300, 300, 300 },
        /* a long k on a thin product; the FFN head's shapes at batch 50 */
        { 9, 17, 602 }, { 50, 300, 300 }, { 300, 300, 50 },
    };
    char what[200];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 2; v++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                if (!x->spec->big && (double)m * n * k > 1e6 && (t || v))
                    continue;
                gemm_arg q = { 0 };
                double alpha = v ? -0.5 : 1.0, beta = v ? 1.0 : 0.0;
                gemm_add(x, &q, t & 1, t >> 1, m, n, k, v ? 3 : 0, alpha, beta, MP_ST_ELEM,
                         MP_ST_ELEM);
                snprintf(what, sizeof what, "gemm(ta=%d tb=%d m=%d n=%d k=%d pad=%d alpha=%g "
                         "beta=%g)", t & 1, t >> 1, m, n, k, v ? 3 : 0, alpha, beta);
                bo_run(x, what, op_gemm, &q, q.c, 1);
                bo_reset(x);
            }
    /* The model's calls: the W_h product and its backward pair, the readout
     * pair, at every storage the backend's model gives their operands (the
     * input gradient dMsg stored as the operands are), and mixed batches. */
    const int E = x->spec->big ? 2900 : 301, H = x->spec->big ? 300 : 33;
    for (int si = 0; si < n_st(x); si++) {
        mp_stype so = st_at(si);
        gemm_arg q = { 0 };
        gemm_add(x, &q, 0, 0, E, H, H, 0, 1.0, 0.0, so, MP_ST_ELEM);
        snprintf(what, sizeof what, "gemm W_h forward shape (E=%d h=%d, operands %s)", E, H,
                 st_str(so));
        bo_run(x, what, op_gemm, &q, q.c, 1);
        bo_reset(x);
        q.count = 0;
        gemm_add(x, &q, 1, 0, H, H, E, 0, 1.0, 1.0, so, MP_ST_ELEM);
        gemm_add(x, &q, 0, 1, E, H, H, 0, 1.0, 0.0, so, so);
        snprintf(what, sizeof what, "gemm pair dW_h += X^T dZ, dMsg = dZ W^T (E=%d h=%d, %s)", E,
                 H, st_str(so));
        bo_run(x, what, op_gemm, &q, q.c, 2);
        bo_reset(x);
    }
    static const int mixed[][5] = {     /* ta, tb, m, n, k */
        { 1, 0, 64, 33, 301 }, { 0, 1, 301, 33, 64 }, { 0, 0, 7, 301, 33 }, { 1, 1, 64, 1, 300 },
        { 0, 0, 5, 3, 0 }, { 1, 0, 33, 7, 1 }, { 0, 1, 1, 1, 1 }, { 0, 0, 301, 30, 7 },
    };
    static const int counts[] = { 2, 3, 8 };
    for (int ci = 0; ci < 3; ci++) {
        gemm_arg q = { 0 };
        for (int i = 0; i < counts[ci]; i++) {
            const int *sh = mixed[(i * 3 + counts[ci]) % 8];
            gemm_add(x, &q, sh[0], sh[1], sh[2], sh[3], sh[4], 0, 1.0, i & 1 ? 1.0 : 0.0,
                     MP_ST_ELEM, MP_ST_ELEM);
        }
        snprintf(what, sizeof what, "gemm batch of %d mixed products", counts[ci]);
        bo_run(x, what, op_gemm, &q, q.c, counts[ci]);
        bo_reset(x);
    }
}

typedef struct {
    int m, n, k, ld;
    mp_stype aw, rc;
    tens *a, *w, *r, *c;   /* c == r: in place */
} grr_arg;

static void op_gemm_res_relu(mp_backend *b, int s, const void *arg)
{
    const grr_arg *q = arg;
    b->gemm_res_relu(b, q->m, q->n, q->k, S(q->a), q->ld, S(q->w), q->ld, q->aw, S(q->r), q->ld,
                     S(q->c), q->ld, q->rc);
}

static void case_gemm_res_relu(bo *x)
{
    static const int rr[][5] = {        /* m, n, k, pad, in place */
        { 1, 1, 1, 0, 0 }, { 7, 5, 3, 0, 0 }, { 7, 5, 3, 1, 1 }, { 5, 7, 0, 0, 0 },
        { 0, 4, 4, 0, 0 }, { 301, 33, 33, 3, 0 }, { 300, 301, 7, 0, 1 }, { 2502, 300, 300, 0, 0 },
        { 1179, 300, 300, 0, 1 },
    };
    char what[200];
    for (size_t s = 0; s < sizeof rr / sizeof rr[0]; s++)
        for (int ai = 0; ai < n_st(x); ai++)
            for (int ri = 0; ri <= ai; ri++) {
                int m = rr[s][0], n = rr[s][1], k = rr[s][2], pad = rr[s][3], inpl = rr[s][4];
                if (!x->spec->big && (double)m * n * k > 2e6)
                    continue;
                grr_arg q = { m, n, k, (n > k ? n : k) + pad, st_at(ai), st_at(ri), 0, 0, 0, 0 };
                double tol = tol_gemm(x, q.aw, q.rc);
                q.a = t_rand(x, "a", q.aw, (size_t)m * q.ld, -1, 1);
                q.w = t_rand(x, "w", q.aw, (size_t)(k ? k : 1) * q.ld, -1, 1);
                q.r = t_rand(x, "r", q.rc, (size_t)m * q.ld, -1, 1);
                q.c = inpl ? t_acc(q.r, tol) : t_out(x, "c", q.rc, (size_t)m * q.ld, tol);
                snprintf(what, sizeof what, "gemm_res_relu(m=%d n=%d k=%d pad=%d%s, a/w %s, "
                         "r/c %s)", m, n, k, pad, inpl ? " in place" : "", st_str(q.aw),
                         st_str(q.rc));
                bo_run(x, what, op_gemm_res_relu, &q, &q.c, 1);
                bo_reset(x);
            }
}

typedef struct {
    int32_t rows;
    int cols, ldd, lds;
    mp_stype dst_st, src_st;
    tens *dst, *src, *x, *cs;
} rows_arg;

static void op_copy2d(mp_backend *b, int s, const void *arg)
{
    const rows_arg *q = arg;
    b->copy2d(b, S(q->dst), q->dst_st, q->ldd, S(q->src), q->src_st, q->lds, q->rows, q->cols);
}

static void op_col_sum(mp_backend *b, int s, const void *arg)
{
    const rows_arg *q = arg;
    b->col_sum(b, S(q->cs), S(q->x), q->lds, q->rows, q->cols);
}

static void case_rows(bo *x)
{
    static const int32_t rows[] = { 0, 1, 7, 64, 65, 300, 5000 };
    static const int cols[] = { 1, 7, 300, 301 };
    char what[200];
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            int32_t r = rows[ri];
            int c = cols[ci];
            if (!x->spec->big && (double)r * c > 4e5)
                continue;
            /* a 2-D copy, a bias into every row, and a conversion (padding stays poisoned) */
            for (int v = 0; v < 2 + (n_st(x) > 1); v++) {
                rows_arg q = { r, c, c + 3, v == 1 ? 0 : c + 5, MP_ST_ELEM, MP_ST_ELEM, 0, 0,
                               0, 0 };
                if (v == 2)
                    q.dst_st = MP_ST_BF16;
                q.src = t_rand(x, "src", MP_ST_ELEM, v == 1 ? (size_t)c : (size_t)r * q.lds, -1, 1);
                q.dst = t_out(x, "dst", q.dst_st, (size_t)r * q.ldd, 0);
                snprintf(what, sizeof what, "copy2d(rows=%d cols=%d %s)", (int)r, c,
                         v == 0 ? "copy" : v == 1 ? "lds 0: one row into every row"
                                                  : "elem -> bf16");
                bo_run(x, what, op_copy2d, &q, &q.dst, 1);
                bo_reset(x);
            }
            /* column sums of values in [0, 1) (a sum with cancellation has no
             * meaningful relative error) into random sums */
            rows_arg q = { r, c, 0, c + 3, MP_ST_ELEM, MP_ST_ELEM, 0, 0, 0, 0 };
            q.x = t_rand(x, "x", MP_ST_ELEM, (size_t)r * q.lds, 0, 1);
            q.cs = t_acc(t_rand(x, "sums", MP_ST_ELEM, (size_t)c, -1, 1), TOL_ELEM);
            snprintf(what, sizeof what, "col_sum(rows=%d cols=%d ld=%d)", (int)r, c, q.lds);
            bo_run(x, what, op_col_sum, &q, &q.cs, 1);
            bo_reset(x);
        }
}

/* ===================================================================== */
/* Elementwise                                                            */
/* ===================================================================== */

typedef struct {
    size_t n;
    int32_t rows;
    int cols, ld;
    double p;
    mp_stype st, y_st, o_st;
    uint64_t key;
    int dev_key;                 /* the tested side reads the key from device memory */
    tens *y, *x, *dx, *dxo, *dy, *keys, *k;
} elt_arg;

/* The key of a case: a host value, or (dev_key, tested side) the same value
 * read from device memory: keys[k * 3 + 1] with k = 2. */
static mp_key elt_key(const elt_arg *q, int s)
{
    if (q->dev_key && s == 0)
        return mp_key_dev((const uint64_t *)S(q->keys) + 1, (const int32_t *)S(q->k), 3);
    return mp_key_host(q->key);
}

static void op_relu_dropout(mp_backend *b, int s, const void *arg)
{
    const elt_arg *q = arg;
    b->relu_dropout(b, S(q->y), S(q->x), q->st, q->n, q->p, elt_key(q, s));
}

static void op_relu_dropout_backward(mp_backend *b, int s, const void *arg)
{
    const elt_arg *q = arg;
    b->relu_dropout_backward(b, S(q->dx), S(q->dxo), q->o_st, S(q->y), q->y_st, S(q->dy), q->n,
                             q->p);
}

static void op_dropout(mp_backend *b, int s, const void *arg)
{
    const elt_arg *q = arg;
    b->dropout(b, S(q->y), S(q->x), q->rows, q->cols, q->ld, q->p, elt_key(q, s));
}

/* The device key source of a case: 3 steps of 3 keys, step 2 current. */
static int elt_keys(bo *x, elt_arg *q)
{
    uint64_t keys[9];
    int32_t k = 2;
    for (int i = 0; i < 9; i++)
        keys[i] = mp_rng_u64(&x->rng);
    q->key = keys[k * 3 + 1];
    q->keys = t_raw(x, keys, sizeof keys);
    q->k = t_raw(x, &k, sizeof k);
    return q->keys && q->k;
}

static void case_elementwise(bo *x)
{
    static const size_t ns[] = { 0, 1, 7, 300 * 301, ((size_t)1 << 20) + 3 };
    static const double ps[] = { 0.0, 0.3, 1.0 };
    char what[200];
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
            for (int si = 0; si < n_st(x); si++)
                for (int v = 0; v < 3; v++) {   /* out of place, in place, device key */
                    size_t n = ns[ni];
                    if (!x->spec->big && n > 100000)
                        continue;
                    elt_arg q = { .n = n, .p = ps[pi], .st = st_at(si), .dev_key = v == 2 };
                    q.key = mp_rng_u64(&x->rng);
                    if (v == 2 && !elt_keys(x, &q))
                        break;
                    q.x = t_rand(x, "x", q.st, n, -1, 1);
                    q.y = v == 1 ? t_acc(q.x, tol_st(q.st)) : t_out(x, "y", q.st, n, tol_st(q.st));
                    if (q.y)
                        q.y->zeros = 1;
                    snprintf(what, sizeof what, "relu_dropout(n=%zu p=%g %s%s)", n, q.p,
                             st_str(q.st), v == 1 ? " in place" : v == 2 ? " device key" : "");
                    bo_run(x, what, op_relu_dropout, &q, &q.y, 1);
                    bo_reset(x);
                }
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t pi = 0; pi < 2; pi++)
            for (int yi = 0; yi < n_st(x); yi++)
                for (int v = 0; v < 2 + (n_st(x) > 1); v++) {  /* dx, dx = dy, + a bf16 copy */
                    size_t n = ns[ni];
                    if (!x->spec->big && n > 100000)
                        continue;
                    elt_arg q = { .n = n, .p = ps[pi], .y_st = st_at(yi), .o_st = MP_ST_ELEM };
                    q.y = t_relu_like(x, "y", q.y_st, n);
                    q.dy = t_rand(x, "dy", MP_ST_ELEM, n, -1, 1);
                    q.dx = v == 1 ? t_acc(q.dy, TOL_ELEM) : t_out(x, "dx", MP_ST_ELEM, n, TOL_ELEM);
                    q.dxo = q.dx;
                    if (v == 2) {
                        q.o_st = MP_ST_BF16;
                        q.dxo = t_out(x, "dx bf16", MP_ST_BF16, n, TOL_BF16);
                    }
                    if (q.dx)
                        q.dx->zeros = 1;
                    tens *outs[2] = { q.dx, q.dxo };
                    snprintf(what, sizeof what, "relu_dropout_backward(n=%zu p=%g y %s%s)", n,
                             q.p, st_str(q.y_st),
                             v == 1 ? " dx = dy" : v == 2 ? " + bf16 copy" : "");
                    bo_run(x, what, op_relu_dropout_backward, &q, outs, v == 2 ? 2 : 1);
                    bo_reset(x);
                }
    static const int shapes[][3] = { { 1, 1, 1 }, { 7, 300, 301 }, { 300, 7, 7 },
                                     { 1000, 301, 305 }, { 0, 7, 7 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
            for (int v = 0; v < 3; v++) {
                elt_arg q = { .rows = shapes[si][0], .cols = shapes[si][1], .ld = shapes[si][2],
                              .p = ps[pi], .dev_key = v == 2 };
                size_t n = (size_t)q.rows * q.ld;
                q.key = mp_rng_u64(&x->rng);
                if (v == 2 && !elt_keys(x, &q))
                    break;
                q.x = t_rand(x, "x", MP_ST_ELEM, n, -1, 1);
                q.y = v == 1 ? t_acc(q.x, TOL_ELEM) : t_out(x, "y", MP_ST_ELEM, n, TOL_ELEM);
                if (q.y)
                    q.y->zeros = 1;
                snprintf(what, sizeof what, "dropout(rows=%d cols=%d ld=%d p=%g%s)", (int)q.rows,
                         q.cols, q.ld, q.p, v == 1 ? " in place" : v == 2 ? " device key" : "");
                bo_run(x, what, op_dropout, &q, &q.y, 1);
                bo_reset(x);
            }
}

/* ===================================================================== */
/* Graph ops                                                              */
/* ===================================================================== */

/* The batches every graph op is tried on: a handful of small molecules, a
 * training batch of 50 drug-sized ones, one large enough for many
 * reduction chunks (the GPU only), one whose molecules are all empty
 * (invalid SMILES), one with atoms but no bond at all, and none at all.
 * Empty and bond-less molecules also appear inside the others. */
typedef struct {
    int32_t n_mols;
    rg_opts o;
    int     big;
} batch_shape;

static const batch_shape BATCHES[] = {
    { 7, { 1, 11, 0.15, 0.15, 2 }, 0 },
    { 50, { 1, 53, 0.05, 0.05, 6 }, 0 },
    { 400, { 1, 53, 0.02, 0.02, 6 }, 1 },
    { 3, { 1, 5, 1.0, 0.0, 0 }, 0 },
    { 5, { 1, 4, 0.0, 1.0, 0 }, 0 },
    { 0, { 1, 4, 0.0, 0.0, 0 }, 0 },
};
static const int HIDDEN[] = { 1, 7, 33, 300, 301 };
#define N_BATCHES ((int)(sizeof BATCHES / sizeof BATCHES[0]))
#define N_HIDDEN  ((int)(sizeof HIDDEN / sizeof HIDDEN[0]))

typedef struct {
    mp_graphs h;
    int32_t na, ne, nm;
    int hd, slots;       /* hidden; atom hot slots (the mass row is `slots`) */
    double p;
    mp_stype st, st2, st3;
    tens *hot, *mass, *bond, *src, *dst, *in_start, *in_edge, *mol_atom;
    tens *o1, *o2, *o3, *i1, *i2, *i3, *i4;
    int flag;
    mp_aggregation agg;
} gr_arg;

#define I16(t) ((const int16_t *)S(t))
#define I8(t)  ((const int8_t *)S(t))
#define I32(t) ((const int32_t *)S(t))

/* A random batch of shape bi on both sides (hot atom slots [0, slots)). */
static int graph_make(bo *x, gr_arg *g, int bi, int h, int slots)
{
    memset(g, 0, sizeof *g);
    if (!rg_make(&g->h, &x->rng, BATCHES[bi].n_mols, slots + 1, &BATCHES[bi].o))
        return bo_fail(x, "random graph: out of memory");
    const mp_graphs *m = &g->h;
    g->na = m->n_atoms;
    g->ne = m->n_edges;
    g->nm = m->n_mols;
    g->hd = h;
    g->slots = slots;
    size_t A = (size_t)g->na, E = (size_t)g->ne;
    g->hot = t_raw(x, m->atom_hot, A * MP_ATOM_MAX_HOT * 2);
    g->mass = t_raw(x, m->atom_mass, A * sizeof(float));
    g->bond = t_raw(x, m->bond_hot, E / 2 * MP_BOND_MAX_HOT);
    g->src = t_raw(x, m->edge_src, E * 4);
    g->dst = t_raw(x, m->edge_dst, E * 4);
    g->in_start = t_raw(x, m->in_start, (A + 1) * 4);
    g->in_edge = t_raw(x, m->in_edge, E * 4);
    g->mol_atom = t_raw(x, m->mol_atom, ((size_t)g->nm + 1) * 4);
    return g->mol_atom != NULL;
}

/* The ops, each reading its operands from a gr_arg. */
static void op_atom_embed(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->atom_embed(b, S(g->o1), I16(g->hot), S(g->mass), S(g->i1), g->flag ? S(g->i2) : NULL,
                  g->na, g->hd, g->slots);
}

static void op_atom_embed_backward(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->atom_embed_backward(b, S(g->o1), I16(g->hot), S(g->mass), S(g->i1), g->na, g->hd,
                           g->slots);
}

static void op_edge_embed(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->edge_embed(b, S(g->o1), g->flag ? S(g->o2) : NULL, g->st, I32(g->src), I8(g->bond),
                  S(g->i1), S(g->i2), g->ne, g->hd);
}

static void op_edge_embed_backward(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->edge_embed_backward(b, S(g->o1), S(g->o2), I32(g->in_start), I32(g->in_edge), I8(g->bond),
                           S(g->i1), g->na, g->ne, g->hd);
}

static void op_message(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->message(b, S(g->o1), g->st, S(g->o2), I32(g->in_start), I32(g->in_edge), I32(g->src),
               S(g->i1), g->st2, g->flag, g->na, g->ne, g->hd);
}

static void op_message_backward(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->message_backward(b, S(g->o1), g->st, g->flag ? S(g->o2) : NULL, S(g->o3),
                        I32(g->in_start), I32(g->in_edge), I32(g->dst), S(g->i1), g->st2,
                        g->flag ? S(g->i2) : NULL, g->st3, g->p, g->na, g->ne, g->hd);
}

static void op_atom_sum(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->atom_sum(b, S(g->o1), g->st, I32(g->in_start), I32(g->in_edge), S(g->i1), g->st2, g->na,
                g->hd);
}

static void op_atom_sum_backward(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->atom_sum_backward(b, S(g->o1), S(g->o2), g->st, I32(g->dst), S(g->i1),
                         g->flag ? S(g->i2) : NULL, g->st3, g->p, g->ne, g->hd);
}

static void op_pool(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->pool(b, S(g->o1), g->hd + 3, I32(g->mol_atom), S(g->i1), g->nm, g->hd, g->agg, 7.0);
}

static void op_pool_backward(mp_backend *b, int s, const void *arg)
{
    const gr_arg *g = arg;
    b->pool_backward(b, S(g->o1), I32(g->mol_atom), S(g->i1), g->hd + 3, g->nm, g->hd, g->agg,
                     7.0);
}

/* A fresh graph case's buffers: keeps the graph arrays, frees the rest. */
static void graph_outs_reset(bo *x, gr_arg *g)
{
    const int keep = 8;   /* graph_make's raw arrays come first */
    for (int i = keep; i < x->nt; i++) {
        for (int side = 0; side < 2; side++)
            x->b[side]->free(x->b[side], x->t[i].p[side]);
        mp_free(x->t[i].init);
    }
    if (x->nt > keep)
        x->nt = keep;
    g->o1 = g->o2 = g->o3 = g->i1 = g->i2 = g->i3 = g->i4 = NULL;
}

/* The embeddings and their backwards over one batch and hidden size. */
static void graph_embed(bo *x, gr_arg *g, const char *tag)
{
    char what[256];
    const size_t A = (size_t)g->na, E = (size_t)g->ne, H = (size_t)g->hd;
    const size_t WR = (size_t)g->slots + 1;
    for (int bias = 0; bias < 2; bias++) {
        g->flag = bias;
        g->i1 = t_rand(x, "w", MP_ST_ELEM, WR * H, -1, 1);
        g->i2 = t_rand(x, "bias", MP_ST_ELEM, H, -1, 1);
        g->o1 = t_out(x, "out", MP_ST_ELEM, A * H, TOL_ELEM);
        snprintf(what, sizeof what, "atom_embed(%s bias=%d)", tag, bias);
        bo_run(x, what, op_atom_embed, g, &g->o1, 1);
        graph_outs_reset(x, g);
    }
    g->i1 = t_rand(x, "dout", MP_ST_ELEM, A * H, -1, 1);
    g->o1 = t_acc(t_rand(x, "dw", MP_ST_ELEM, WR * H, -1, 1), TOL_ELEM);
    snprintf(what, sizeof what, "atom_embed_backward(%s)", tag);
    bo_run(x, what, op_atom_embed_backward, g, &g->o1, 1);
    graph_outs_reset(x, g);
    for (int si = 0; si < n_st(x); si++)
        for (int m0 = 0; m0 < 2; m0++) {
            g->st = st_at(si);
            g->flag = m0;
            g->i1 = t_rand(x, "a", MP_ST_ELEM, A * H, -1, 1);
            g->i2 = t_rand(x, "wb", MP_ST_ELEM, MP_BOND_FDIM * H, -1, 1);
            g->o1 = t_out(x, "h0", g->st, E * H, tol_st(g->st));
            g->o2 = t_out(x, "m0", g->st, E * H, tol_st(g->st));
            snprintf(what, sizeof what, "edge_embed(%s %s%s)", tag, st_str(g->st),
                     m0 ? " with M_0" : "");
            bo_run(x, what, op_edge_embed, g, &g->o1, m0 ? 2 : 1);
            graph_outs_reset(x, g);
        }
    g->i1 = t_rand(x, "dh0", MP_ST_ELEM, E * H, -1, 1);
    g->o1 = t_out(x, "da", MP_ST_ELEM, A * H, TOL_ELEM);
    g->o2 = t_acc(t_rand(x, "dwb", MP_ST_ELEM, MP_BOND_FDIM * H, -1, 1), TOL_ELEM);
    snprintf(what, sizeof what, "edge_embed_backward(%s)", tag);
    bo_run(x, what, op_edge_embed_backward, g, &g->o1, 2);
    graph_outs_reset(x, g);
}

/* message, atom_sum and their adjoints, at the storage the backend's model
 * uses (msg, a, dz, dmsg: st_op; m and y: the element type or st_op). */
static void graph_message(bo *x, gr_arg *g, const char *tag)
{
    char what[256];
    const size_t A = (size_t)g->na, E = (size_t)g->ne, H = (size_t)g->hd;
    for (int oi = 0; oi < n_st(x); oi++)
        for (int mi = 0; mi <= oi; mi++) {
            const mp_stype so = st_at(oi), sm = st_at(mi);
            for (int relu_in = 0; relu_in < 2; relu_in++) {
                g->st = so;
                g->st2 = sm;
                g->flag = relu_in;
                g->i1 = t_rand(x, "m", sm, E * H, -1, 1);
                g->o1 = t_out(x, "msg", so, E * H, tol_st(so));
                g->o2 = t_out(x, "s", MP_ST_ELEM, A * H, TOL_ELEM);   /* scratch: not checked */
                snprintf(what, sizeof what, "message(%s msg %s m %s relu_in=%d)", tag,
                         st_str(so), st_str(sm), relu_in);
                bo_run(x, what, op_message, g, &g->o1, 1);
                graph_outs_reset(x, g);
            }
            g->st = so;
            g->st2 = sm;
            g->i1 = t_rand(x, "m", sm, E * H, -1, 1);
            g->o1 = t_out(x, "a", so, A * H, tol_st(so));
            snprintf(what, sizeof what, "atom_sum(%s a %s m %s)", tag, st_str(so), st_str(sm));
            bo_run(x, what, op_atom_sum, g, &g->o1, 1);
            graph_outs_reset(x, g);
            /* the plain adjoint, then the fused form (y, dh0) at p 0 and 0.25 */
            for (int v = 0; v < 3; v++) {
                if (v == 0 && mi)
                    continue;
                g->st = so;
                g->st2 = so;
                g->st3 = sm;
                g->flag = v > 0;
                g->p = v == 2 ? 0.25 : 0.0;
                g->i1 = t_rand(x, "dmsg", so, E * H, -1, 1);
                g->i2 = t_relu_like(x, "y", sm, E * H);
                g->o1 = t_out(x, "dz", so, E * H, tol_st(so));
                g->o2 = t_acc(t_rand(x, "dh0", MP_ST_ELEM, E * H, -1, 1), TOL_ELEM);
                g->o3 = t_out(x, "ds", MP_ST_ELEM, A * H, TOL_ELEM);
                snprintf(what, sizeof what, "message_backward(%s dz/dmsg %s%s%s p=%g)", tag,
                         st_str(so), v ? " fused, y " : "", v ? st_str(sm) : "", g->p);
                tens *outs[2] = { g->o1, g->o2 };   /* ds (o3) is scratch: not compared */
                bo_run(x, what, op_message_backward, g, outs, v ? 2 : 1);
                graph_outs_reset(x, g);
            }
            /* the gather, plain or through y, with or without a copy for the products */
            for (int v = 0; v < 4; v++) {
                int relu = v & 1, copy = v >> 1;
                if ((copy && so == MP_ST_ELEM) || (!relu && mi))
                    continue;
                g->st = so;
                g->st3 = sm;
                g->flag = relu;
                g->p = relu ? 0.25 : 0.0;
                g->i1 = t_rand(x, "da", MP_ST_ELEM, A * H, -1, 1);
                g->i2 = t_relu_like(x, "y", sm, E * H);
                g->o1 = t_out(x, "dm", MP_ST_ELEM, E * H, TOL_ELEM);
                g->o2 = copy ? t_out(x, "dm copy", so, E * H, tol_st(so)) : g->o1;
                if (!copy)
                    g->st = MP_ST_ELEM;
                if (g->o1)
                    g->o1->zeros = relu;
                snprintf(what, sizeof what, "atom_sum_backward(%s%s%s%s p=%g)", tag,
                         relu ? " through y " : "", relu ? st_str(sm) : "",
                         copy ? " + bf16 copy" : "", g->p);
                bo_run(x, what, op_atom_sum_backward, g, &g->o1, copy ? 2 : 1);
                graph_outs_reset(x, g);
            }
        }
}

static void graph_pool(bo *x, gr_arg *g, const char *tag)
{
    char what[256];
    const size_t A = (size_t)g->na, M = (size_t)g->nm, H = (size_t)g->hd, LD = H + 3;
    for (int agg = 0; agg < 3; agg++) {
        g->agg = (mp_aggregation)agg;
        g->i1 = t_rand(x, "x", MP_ST_ELEM, A * H, -1, 1);
        g->o1 = t_out(x, "out", MP_ST_ELEM, M * LD, TOL_ELEM);
        snprintf(what, sizeof what, "pool(%s agg=%d)", tag, agg);
        bo_run(x, what, op_pool, g, &g->o1, 1);
        graph_outs_reset(x, g);
        g->i1 = t_rand(x, "dout", MP_ST_ELEM, M * LD, -1, 1);
        g->o1 = t_out(x, "dx", MP_ST_ELEM, A * H, TOL_ELEM);
        snprintf(what, sizeof what, "pool_backward(%s agg=%d)", tag, agg);
        bo_run(x, what, op_pool_backward, g, &g->o1, 1);
        graph_outs_reset(x, g);
    }
}

static void case_graph(bo *x)
{
    char tag[128];
    for (int bi = 0; bi < N_BATCHES && !x->failed; bi++)
        for (int hi = 0; hi < N_HIDDEN && !x->failed; hi++) {
            int h = HIDDEN[hi];
            if ((BATCHES[bi].big || h == 301) && !x->spec->big)
                continue;
            if (BATCHES[bi].big && h == 301)
                continue;
            if (!x->spec->big && BATCHES[bi].n_mols >= 50 && h > 33)
                continue;
            gr_arg g;
            if (!graph_make(x, &g, bi, h, 132))
                break;
            snprintf(tag, sizeof tag, "mols=%d atoms=%d edges=%d h=%d", (int)g.nm, (int)g.na,
                     (int)g.ne, h);
            graph_embed(x, &g, tag);
            graph_message(x, &g, tag);
            graph_pool(x, &g, tag);
            mp_graphs_free(&g.h);
            bo_reset(x);
        }
    /* More slots than one of the GPU scatter's shared-memory groups holds
     * (320), and the v2 layout's 71. */
    static const int slots[] = { 500, 71 };
    for (int si = 0; si < 2 && !x->failed; si++)
        for (int bi = 0; bi < 2 && !x->failed; bi++) {
            gr_arg g;
            if (!graph_make(x, &g, bi, si ? 7 : 33, slots[si]))
                break;
            snprintf(tag, sizeof tag, "mols=%d h=%d slots=%d", (int)g.nm, g.hd, slots[si]);
            graph_embed(x, &g, tag);
            mp_graphs_free(&g.h);
            bo_reset(x);
        }
}

/* ===================================================================== */
/* Loss, Adam, step_end                                                   */
/* ===================================================================== */

typedef struct {
    int32_t n;
    int tasks;
    mp_loss_kind kind;
    size_t np;
    long t;
    double wd;
    tens *y, *tg, *mask, *loss, *dy, *p, *m, *v, *g, *sched, *k, *losses;
} opt_arg;

static void op_loss(mp_backend *b, int s, const void *arg)
{
    const opt_arg *q = arg;
    mp_loss_spec sp = { q->kind, q->tasks, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0 };
    b->loss(b, S(q->loss), S(q->dy), S(q->y), S(q->tg), S(q->mask), q->n, &sp);
}

static void op_adam(mp_backend *b, int s, const void *arg)
{
    const opt_arg *q = arg;
    b->adam(b, S(q->p), S(q->m), S(q->v), S(q->g), q->np, 1e-3, 0.9, 0.999, 1e-8, q->wd, q->t);
}

/* adam_sched then step_end: the scalars of entry k = 1, the loss (g[0])
 * recorded at losses[1]; k is set first, as step_end advances it. */
static void op_adam_sched(mp_backend *b, int s, const void *arg)
{
    const opt_arg *q = arg;
    const int32_t k = 1;
    if (b->upload(b, S(q->k), &k, sizeof k) != MP_OK)
        return;
    b->adam_sched(b, S(q->p), S(q->m), S(q->v), S(q->g), q->np, S(q->sched), S(q->k), 0.9, 0.999,
                  1e-8, q->wd);
    b->step_end(b, S(q->k), S(q->losses), S(q->g));
}

static void case_loss_adam(bo *x)
{
    char what[200];
    static const int32_t ns[] = { 0, 1, 7, 50, 5000 };
    static const double dens[] = { 0.0, 0.5, 1.0 };
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int tasks = 1; tasks <= 12; tasks += 11)
            for (int kind = 0; kind < 2; kind++)
                for (size_t j = 0; j < 3; j++) {
                    opt_arg q = { .n = ns[i], .tasks = tasks, .kind = (mp_loss_kind)kind };
                    size_t N = (size_t)q.n * tasks;
                    uint8_t *mask = mp_malloc(N + 1);
                    if (!mask) {
                        bo_fail(x, "out of host memory");
                        return;
                    }
                    for (size_t e = 0; e < N; e++)
                        mask[e] = mp_rng_uniform(&x->rng) < dens[j];
                    q.y = t_rand(x, "y", MP_ST_ELEM, N, -4, 4);
                    q.tg = t_rand(x, "target", MP_ST_ELEM, N, -1, 1);
                    for (size_t e = 0; q.tg && kind && e < N; e++)
                        q.tg->init[e] = q.tg->init[e] > 0;   /* 0/1 labels for BCE */
                    if (q.tg && (!t_put(x, q.tg, 0) || !t_put(x, q.tg, 1)))
                        q.tg = NULL;
                    q.mask = t_raw(x, mask, N);
                    q.loss = t_out(x, "loss", MP_ST_ELEM, 1, TOL_ELEM);
                    q.dy = t_out(x, "dy", MP_ST_ELEM, N, TOL_ELEM);
                    mp_free(mask);
                    snprintf(what, sizeof what, "loss(n=%d tasks=%d %s labels=%g)", (int)q.n,
                             tasks, kind ? "bce" : "mse", dens[j]);
                    tens *outs[2] = { q.loss, q.dy };
                    bo_run(x, what, op_loss, &q, outs, 2);
                    bo_reset(x);
                }
    static const size_t nps[] = { 1, 7, 354901 };
    for (size_t i = 0; i < 3; i++)
        for (long t = 1; t <= 10; t += 9)
            for (int w = 0; w < 2; w++)
                for (int sched = 0; sched < 2; sched++) {
                    opt_arg q = { .np = nps[i], .t = t, .wd = w ? 0.01 : 0.0 };
                    /* of one sign, so no update cancels (an fp32 sum within
                     * rounding of 0 has no meaningful relative error) */
                    q.p = t_acc(t_rand(x, "p", MP_ST_ELEM, q.np, 0.5, 1.5), TOL_ELEM);
                    q.m = t_acc(t_rand(x, "m", MP_ST_ELEM, q.np, 0, 0.1), TOL_ELEM);
                    q.v = t_acc(t_rand(x, "v", MP_ST_ELEM, q.np, 0, 0.01), TOL_ELEM);
                    q.g = t_rand(x, "g", MP_ST_ELEM, q.np, 0, 1);
                    tens *outs[4] = { q.p, q.m, q.v, NULL };
                    if (!sched) {
                        snprintf(what, sizeof what, "adam(n=%zu t=%ld wd=%g)", q.np, t, q.wd);
                        bo_run(x, what, op_adam, &q, outs, 3);
                        bo_reset(x);
                        continue;
                    }
                    /* entry 1 of 3 (t + 1) */
                    float se[6];
                    for (int e = 0; e < 3; e++)
                        mp_adam_sched_entry(1e-3 * (e + 1), 0.9, 0.999, t + e, se + 2 * e);
                    int32_t k = 1;
                    q.sched = t_raw(x, se, sizeof se);
                    q.k = t_raw(x, &k, sizeof k);
                    q.losses = t_out(x, "losses", MP_ST_ELEM, 3, 0);
                    outs[3] = q.losses;
                    snprintf(what, sizeof what, "adam_sched + step_end(n=%zu t=%ld wd=%g)", q.np,
                             t + 1, q.wd);
                    bo_run(x, what, op_adam_sched, &q, outs, 4);
                    bo_reset(x);
                }
}

/* ===================================================================== */
/* The table, per backend                                                 */
/* ===================================================================== */

static const bo_case CASES[] = {
    { "gemm", case_gemm },
    { "gemm_res_relu", case_gemm_res_relu },
    { "copy2d, col_sum", case_rows },
    { "relu_dropout, relu_dropout_backward, dropout", case_elementwise },
    { "graph ops", case_graph },
    { "loss, adam, adam_sched, step_end", case_loss_adam },
};

#define TABLE_TEST(tname, bname, prec, big, gpu) \
    BO_TABLE_TEST(tname, bname, prec, big, gpu, CASES, 2024)

TABLE_TEST(ops_table_cpu, "cpu", 0, 0, 0)
TABLE_TEST(ops_table_ref, "ref", 0, 0, 0)
TABLE_TEST(ops_table_ref_bf16, "ref:bf16", 0, 0, 0)
TABLE_TEST(ops_table_cpu_bf16, "cpu:bf16", 0, 0, 0)
TABLE_TEST(gpu_ops_table_fp32, "gpu:fp32", 0, 1, 1)
TABLE_TEST(gpu_ops_table_tf32, "gpu:tf32", 1, 1, 1)
TABLE_TEST(gpu_ops_table_bf16, "gpu:bf16", 2, 1, 1)
