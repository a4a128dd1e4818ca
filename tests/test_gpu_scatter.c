/*
 * test_gpu_scatter.c - the one-hot weight-gradient scatters of the cuda
 * backend (src/gpu/reduce_cuda.cu: atom_embed_backward, and the bond rows
 * of edge_embed_backward) in their two forms, two columns a lane (an even
 * row width and an 8-byte aligned gradient) and one (otherwise):
 *
 *   - each against a double sum on the host of the same rows;
 *   - the two forms give the same bits: the gradient one float past an
 *     aligned address takes the one-column form, and must agree bit for bit
 *     with the aligned call, at the batch-50 and batch-4096 row counts,
 *     with one slot group and with several (more slots than a group holds);
 *   - an odd row width (the one-column form alone) against the host;
 *   - the bond rows, whose two directions share a hot list and are summed
 *     as one row (their g added first), both forms against the host.
 *
 * GPU only (names gpu_*): skipped without a GPU, failed under
 * MOLPROP_REQUIRE_GPU=1.
 */
#include "test.h"
#include "gpu_test.h"

#include "backend/ops.h"
#include "core/core.h"
#include "gpu/gpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t rows;   /* atoms (edges for the bonds: two per bond) */
    int h;
    int slots;      /* atom hot slots; the mass row is `slots` */
} scase;

static const scase cases[] = {
    { 1179, 300, 132 },     /* a batch of 50 */
    { 108496, 300, 132 },   /* a batch of 4096 */
    { 3001, 300, 420 },     /* several slot groups in either form */
    { 2000, 301, 132 },     /* odd width: one column a lane only */
    { 5265, 1800, 132 },    /* a wide model (hpopt's widths): many column tiles */
    { 77, 2, 9 },
};

/* Hot lists like the featurizer's: up to MP_ATOM_MAX_HOT distinct slots a
 * row, ascending, -1 padded; every tenth row has a mass of 0. */
static void make_hot(int16_t *hot, float *mass, int32_t rows, int slots, mp_rng *r)
{
    for (int32_t v = 0; v < rows; v++) {
        int16_t *hv = hot + (size_t)v * MP_ATOM_MAX_HOT;
        int n = (int)mp_rng_below(r, MP_ATOM_MAX_HOT + 1), k = 0;
        int base = 0;
        for (int q = 0; q < n && base < slots; q++) {
            /* ascending and distinct: each slot past the one before */
            int span = (slots - base) / (n - q);
            int s = base + (span > 1 ? (int)mp_rng_below(r, (uint64_t)span) : 0);
            if (s >= slots)
                break;
            hv[k++] = (int16_t)s;
            base = s + 1;
        }
        for (; k < MP_ATOM_MAX_HOT; k++)
            hv[k] = -1;
        mass[v] = v % 10 ? (float)(mp_rng_uniform(r) * 2.0) : 0.0f;
    }
}

static void make_bond_hot(int8_t *hot, int32_t bonds, mp_rng *r)
{
    for (int32_t b = 0; b < bonds; b++) {
        int8_t *hb = hot + (size_t)b * MP_BOND_MAX_HOT;
        int s = (int)mp_rng_below(r, 5), k = 0;   /* one bond-type slot of 0..4 */
        hb[k++] = (int8_t)s;
        if (mp_rng_below(r, 2))
            hb[k++] = 5;
        if (mp_rng_below(r, 2))
            hb[k++] = 6;
        hb[k++] = (int8_t)(7 + (int)mp_rng_below(r, 7));
        for (; k < MP_BOND_MAX_HOT; k++)
            hb[k] = -1;
    }
}

/* ||got - ref|| / ||ref|| of n floats against doubles. */
static double rel_err(const float *got, const double *ref, size_t n)
{
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        d2 += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        r2 += ref[i] * ref[i];
    }
    return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
}

/* g uploaded at an aligned address (two columns a lane when h is even) and
 * one float past one (one column a lane), dw from the same start each
 * time; 1 when both match the host sums and each other bit for bit. */
static int atom_case(mp_backend *b, const scase *sc, uint64_t seed, char *err, size_t cap)
{
    const size_t n = (size_t)sc->rows * sc->h, wr = (size_t)sc->slots + 1;
    mp_rng r;
    mp_rng_seed(&r, seed, 1);
    int16_t *hot = malloc((size_t)sc->rows * MP_ATOM_MAX_HOT * sizeof *hot);
    float *mass = malloc((size_t)sc->rows * sizeof *mass), *g = malloc(n * sizeof *g);
    float *dw0 = malloc(wr * sc->h * sizeof *dw0), *out[2] = { malloc(wr * sc->h * sizeof(float)),
                                                              malloc(wr * sc->h * sizeof(float)) };
    double *ref = calloc(wr * sc->h, sizeof *ref);
    int ok = 0;
    void *d_hot = NULL, *d_mass = NULL, *d_g = NULL, *d_dw = NULL;
    if (!hot || !mass || !g || !dw0 || !out[0] || !out[1] || !ref) {
        snprintf(err, cap, "out of host memory");
        goto out;
    }
    make_hot(hot, mass, sc->rows, sc->slots, &r);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(mp_rng_uniform(&r) * 2.0 - 1.0);
    for (size_t i = 0; i < wr * sc->h; i++) {
        dw0[i] = (float)(mp_rng_uniform(&r) - 0.5);
        ref[i] = dw0[i];
    }
    for (int32_t v = 0; v < sc->rows; v++)
        for (int j = 0; j < sc->h; j++) {
            const double gv = g[(size_t)v * sc->h + j];
            for (int q = 0; q < MP_ATOM_MAX_HOT; q++) {
                int s = hot[(size_t)v * MP_ATOM_MAX_HOT + q];
                if (s >= 0)
                    ref[(size_t)s * sc->h + j] += gv;
            }
            ref[(size_t)sc->slots * sc->h + j] += (double)mass[v] * gv;
        }
    d_hot = b->alloc(b, (size_t)sc->rows * MP_ATOM_MAX_HOT * sizeof *hot);
    d_mass = b->alloc(b, (size_t)sc->rows * sizeof *mass);
    d_g = b->alloc(b, (n + 1) * sizeof *g);
    d_dw = b->alloc(b, wr * sc->h * sizeof(float));
    if (!d_hot || !d_mass || !d_g || !d_dw ||
        b->upload(b, d_hot, hot, (size_t)sc->rows * MP_ATOM_MAX_HOT * sizeof *hot) != MP_OK ||
        b->upload(b, d_mass, mass, (size_t)sc->rows * sizeof *mass) != MP_OK) {
        snprintf(err, cap, "device buffers: %s", mp_error_message());
        goto out;
    }
    for (int k = 0; k < 2; k++) {
        float *gk = (float *)d_g + k;   /* k = 1: 4-byte aligned only */
        if (b->upload(b, gk, g, n * sizeof *g) != MP_OK ||
            b->upload(b, d_dw, dw0, wr * sc->h * sizeof(float)) != MP_OK) {
            snprintf(err, cap, "upload: %s", mp_error_message());
            goto out;
        }
        b->atom_embed_backward(b, d_dw, d_hot, d_mass, gk, sc->rows, sc->h, sc->slots);
        if (b->sync(b) != MP_OK ||
            b->download(b, out[k], d_dw, wr * sc->h * sizeof(float)) != MP_OK) {
            snprintf(err, cap, "atom_embed_backward: %s", mp_error_message());
            goto out;
        }
        double e = rel_err(out[k], ref, wr * sc->h);
        if (!(e <= 1e-5)) {
            snprintf(err, cap, "%s gradient: relative error %.3g against the host", k ? "offset" : "aligned", e);
            goto out;
        }
    }
    if (memcmp(out[0], out[1], wr * sc->h * sizeof(float))) {
        size_t i = 0;
        while (out[0][i] == out[1][i])
            i++;
        snprintf(err, cap, "aligned and offset gradients differ at slot %zu column %zu: %.9g vs %.9g",
                 i / sc->h, i % sc->h, out[0][i], out[1][i]);
        goto out;
    }
    ok = 1;
out:
    b->free(b, d_hot);
    b->free(b, d_mass);
    b->free(b, d_g);
    b->free(b, d_dw);
    free(hot);
    free(mass);
    free(g);
    free(dw0);
    free(out[0]);
    free(out[1]);
    free(ref);
    return ok;
}

MP_TEST(gpu_scatter_atom_forms_same_bits)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "gpu:fp32"));
    char err[512] = "";
    size_t i = 0;
    int ok = 1;
    for (; ok && i < sizeof cases / sizeof cases[0]; i++)
        ok = atom_case(b, &cases[i], 40 + i, err, sizeof err);
    mp_backend_close(b);
    const scase *sc = &cases[i - 1];
    CHECK_MSG(ok, "%d rows, h %d, %d slots: %s", (int)sc->rows, sc->h, sc->slots, err);
}

/* The bond rows of edge_embed_backward the same way: dwb from dh0 aligned
 * and one float past, the host's sums, the same bits (da beside it). */
MP_TEST(gpu_scatter_bond_forms_same_bits)
{
    MP_NEED_GPU();
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "gpu:fp32"));
    const int32_t bonds = 114086, edges = 2 * bonds, atoms = 1;
    const int h = 300;
    const size_t n = (size_t)edges * h, wn = (size_t)MP_BOND_FDIM * h;
    mp_rng r;
    mp_rng_seed(&r, 7, 1);
    int8_t *hot = malloc((size_t)bonds * MP_BOND_MAX_HOT);
    float *g = malloc(n * sizeof *g), *out[2] = { malloc(wn * sizeof(float)), malloc(wn * sizeof(float)) };
    double *ref = calloc(wn, sizeof *ref);
    /* one atom that every edge leaves: in_start {0, edges}, in_edge = 0..edges-1 */
    int32_t in_start[2] = { 0, edges }, *in_edge = malloc((size_t)edges * sizeof *in_edge);
    CHECK(hot && g && out[0] && out[1] && ref && in_edge);
    make_bond_hot(hot, bonds, &r);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(mp_rng_uniform(&r) * 2.0 - 1.0);
    for (int32_t e = 0; e < edges; e++) {
        in_edge[e] = e;
        for (int q = 0; q < MP_BOND_MAX_HOT; q++) {
            int s = hot[(size_t)(e >> 1) * MP_BOND_MAX_HOT + q];
            if (s >= 0)
                for (int j = 0; j < h; j++)
                    ref[(size_t)s * h + j] += g[(size_t)e * h + j];
        }
    }
    void *d_hot = b->alloc(b, (size_t)bonds * MP_BOND_MAX_HOT), *d_g = b->alloc(b, (n + 1) * sizeof *g);
    void *d_dwb = b->alloc(b, wn * sizeof(float)), *d_da = b->alloc(b, (size_t)h * sizeof(float));
    void *d_start = b->alloc(b, sizeof in_start), *d_edge = b->alloc(b, (size_t)edges * sizeof *in_edge);
    CHECK(d_hot && d_g && d_dwb && d_da && d_start && d_edge);
    CHECK_OK(b->upload(b, d_hot, hot, (size_t)bonds * MP_BOND_MAX_HOT));
    CHECK_OK(b->upload(b, d_start, in_start, sizeof in_start));
    CHECK_OK(b->upload(b, d_edge, in_edge, (size_t)edges * sizeof *in_edge));
    for (int k = 0; k < 2; k++) {
        float *gk = (float *)d_g + k;
        CHECK_OK(b->upload(b, gk, g, n * sizeof *g));
        b->zero(b, d_dwb, wn * sizeof(float));
        b->edge_embed_backward(b, d_da, d_dwb, d_start, d_edge, d_hot, gk, atoms, edges, h);
        CHECK_OK(b->sync(b));
        CHECK_OK(b->download(b, out[k], d_dwb, wn * sizeof(float)));
        double e = rel_err(out[k], ref, wn);
        CHECK_MSG(e <= 1e-5, "%s dh0: dwb relative error %.3g against the host",
                  k ? "offset" : "aligned", e);
    }
    CHECK_MSG(!memcmp(out[0], out[1], wn * sizeof(float)),
              "dwb differs between the aligned and the offset dh0");
    b->free(b, d_hot);
    b->free(b, d_g);
    b->free(b, d_dwb);
    b->free(b, d_da);
    b->free(b, d_start);
    b->free(b, d_edge);
    mp_backend_close(b);
    free(hot);
    free(g);
    free(out[0]);
    free(out[1]);
    free(ref);
    free(in_edge);
}
