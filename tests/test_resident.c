/*
 * test_resident.c - device-resident training with dropout replayed from
 * device keys, and slot size classes (models/resident.h; the keyed dropout
 * ops of models/ops.h).
 *
 * On every machine (cpu and ref backends): the keyed ops equal the plain ops
 * given the same key; resident steps with dropout (keyed, several slot
 * classes) give bitwise the host loop's model on ref (whose sums run in
 * order, so padding changes no bit) and leave the dropout stream where the
 * host loop leaves it; on cpu they follow the host loop; the plan puts
 * every batch in the smallest class holding it; padded == unpadded
 * gradients in every class.  With a GPU (names gpu_resident_cuda_*, skipped
 * without one, failed under MOLPROP_REQUIRE_GPU=1): the keyed kernels ==
 * plain kernels, graph replay == eager with dropout and with several
 * classes, and both against the cpu host loop.
 */
#include "test.h"
#include "gpu_test.h"

#include "data/dataset.h"
#include "gpu/gpu.h"
#include "models/model.h"
#include "models/model_impl.h"   /* the dropout stream's state */
#include "run/resident.h"
#include "run/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ESOL, featurized once per process. */
static mp_dataset  *g_data;
static mp_features *g_fs;

static mp_status data_load(void) { return mp_test_esol(&g_data, &g_fs); }

/* ===================================================================== */
/* Keyed ops == plain ops                                                 */
/* ===================================================================== */

/* Each dropout op with its key read on the device (ops.h mp_key_dev: the
 * key the device index picks, k = 2 of 3 steps, 3 keys a step, layer 1)
 * against the same op given that key by value, on poisoned outputs; and
 * the key matters (another key drops other units). */
static void keyed_check(mp_test_result *mp__r, const char *backend)
{
    enum { N = 1003, ROWS = 37, COLS = 21, LD = 27, STEPS = 3, LAYERS = 3 };
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, backend));
    size_t es = b->esize, nx = (size_t)ROWS * LD > N ? (size_t)ROWS * LD : N;
    double *xd = mp_malloc(sizeof(double) * nx);
    void *hx = mp_malloc(es * nx), *h1 = mp_malloc(es * nx), *h2 = mp_malloc(es * nx);
    mp_rng rng;
    mp_rng_seed(&rng, 11, 3);
    for (size_t i = 0; i < nx; i++) {
        xd[i] = mp_rng_normal(&rng);
        if (es == sizeof(double))
            ((double *)hx)[i] = xd[i];
        else
            ((float *)hx)[i] = (float)xd[i];
    }
    uint64_t keys[STEPS * LAYERS];
    for (int i = 0; i < STEPS * LAYERS; i++)
        keys[i] = mp_rng_u64(&rng);
    int32_t k = 2;
    void *x = b->alloc(b, es * nx), *y1 = b->alloc(b, es * nx), *y2 = b->alloc(b, es * nx);
    uint64_t *dkeys = b->alloc(b, sizeof keys);
    int32_t *dk = b->alloc(b, sizeof k);
    CHECK(x && y1 && y2 && dkeys && dk);
    CHECK_OK(b->upload(b, x, hx, es * nx));
    CHECK_OK(b->upload(b, dkeys, keys, sizeof keys));
    CHECK_OK(b->upload(b, dk, &k, sizeof k));
    const uint64_t key = keys[k * LAYERS + 1];
    const mp_key dev = mp_key_dev(dkeys + 1, dk, LAYERS), host = mp_key_host(key);
    for (int op = 0; op < 2; op++) {
        memset(h1, 0x7f, es * nx);   /* poison: NaN-ish patterns differ from results */
        memset(h2, 0x3c, es * nx);
        CHECK_OK(b->upload(b, y1, h1, es * nx));
        CHECK_OK(b->upload(b, y2, h2, es * nx));
        double p = op == 0 ? 0.3 : 0.45;
        if (op == 0) {
            b->relu_dropout(b, y1, x, MP_ST_ELEM, N, p, dev);
            b->relu_dropout(b, y2, x, MP_ST_ELEM, N, p, host);
        } else {
            b->dropout(b, y1, x, ROWS, COLS, LD, p, dev);
            b->dropout(b, y2, x, ROWS, COLS, LD, p, host);
        }
        CHECK_OK(b->sync(b));
        CHECK_OK(b->download(b, h1, y1, es * nx));
        CHECK_OK(b->download(b, h2, y2, es * nx));
        size_t n = op == 0 ? N : (size_t)ROWS * LD;
        size_t zeros = 0, kept = 0;
        for (size_t i = 0; i < n; i++) {
            int in_block = op == 0 || (int)(i % LD) < COLS;
            if (!in_block)
                continue;
            CHECK_MSG(memcmp((char *)h1 + i * es, (char *)h2 + i * es, es) == 0,
                      "%s op %d: element %zu differs", backend, op, i);
            double v = es == sizeof(double) ? ((double *)h1)[i] : ((float *)h1)[i];
            if (v == 0 && (op == 0 ? xd[i] > 0 : xd[i] != 0))
                zeros++;
            else if (v != 0)
                kept++;
        }
        CHECK_MSG(zeros > 0 && kept > zeros, "%s op %d: %zu dropped, %zu kept", backend, op,
                  zeros, kept);
    }
    /* another step's key drops other units */
    k = 1;
    CHECK_OK(b->upload(b, dk, &k, sizeof k));
    b->relu_dropout(b, y1, x, MP_ST_ELEM, N, 0.3, dev);
    b->relu_dropout(b, y2, x, MP_ST_ELEM, N, 0.3, host);
    CHECK_OK(b->sync(b));
    CHECK_OK(b->download(b, h1, y1, es * N));
    CHECK_OK(b->download(b, h2, y2, es * N));
    CHECK(memcmp(h1, h2, es * N) != 0);
    b->free(b, x);
    b->free(b, y1);
    b->free(b, y2);
    b->free(b, dkeys);
    b->free(b, dk);
    mp_free(xd);
    mp_free(hx);
    mp_free(h1);
    mp_free(h2);
    mp_backend_close(b);
}

MP_TEST(resident_keyed_ops_equal_plain)
{
    keyed_check(mp__r, "cpu");
    keyed_check(mp__r, "ref");
    keyed_check(mp__r, "ref64");
}

MP_TEST(gpu_resident_cuda_keyed_ops_equal_plain)
{
    MP_NEED_GPU();
    keyed_check(mp__r, "cuda:fp32");
}

/* ===================================================================== */
/* Runs of several steps                                                  */
/* ===================================================================== */

#define BS 50

typedef struct {
    const char   *backend;
    int           mode;        /* 0 host loop, 1 resident eager, 2 resident graph */
    mp_model_kind kind;
    double        dropout;
    int           n_classes;
    int           hidden;
    int           steps;
} run_cfg;

typedef struct {
    double *losses;            /* steps + 1: the last from one host-loop step after */
    float  *params;
    size_t  n_params;
    int     classes_used;      /* distinct slot classes of the resident run */
    mp_rng  drop_rng;          /* the model's dropout stream after the steps */
} run_out;

static void run_out_free(run_out *o)
{
    mp_free(o->losses);
    mp_free(o->params);
    memset(o, 0, sizeof *o);
}

/* Batch s: 5 .. 50 distinct molecules (so of different sizes), targets
 * roughly standardized, one label missing, 4 extra features (FFN model). */
static int32_t batch_n(int s) { return 5 + (int32_t)((s * 11) % 46); }

static void batch_fill(int s, int32_t *mols, float *tgt, float *extra)
{
    int32_t n = g_fs->g.n_mols, bn = batch_n(s);
    for (int32_t j = 0; j < bn; j++) {
        mols[j] = (int32_t)(((int64_t)s * 37 + (int64_t)j * 13) % n);
        double y = g_data->targets[(size_t)mols[j] * g_data->n_tasks];
        tgt[j] = j == 3 ? NAN : (float)((y + 3.0) / 2.0);
        for (int k = 0; k < 4; k++)
            extra[j * 4 + k] = (float)sin(0.1 * mols[j] + k);
    }
}

static double lr_at(int s) { return 1e-4 + 2e-5 * s; }

/* One host-loop step on batch s. */
static mp_status host_step(mp_model *m, mp_graphs *batch, int s, double *loss)
{
    int32_t mols[BS];
    float tgt[BS], extra[BS * 4];
    batch_fill(s, mols, tgt, extra);
    int32_t n = batch_n(s);
    int dmpnn = mp_model_get_config(m)->kind == MP_MODEL_DMPNN;
    mp_status st;
    mp_model_zero_grad(m);
    if ((dmpnn && (st = mp_graphs_select(batch, &g_fs->g, mols, n))) ||
        (st = mp_model_forward(m, dmpnn ? batch : NULL, dmpnn ? NULL : extra, n, 1, NULL)) ||
        (st = mp_model_loss_backward(m, tgt, loss)) || (st = mp_model_adam_step(m, lr_at(s))))
        return st;
    return MP_OK;
}

static void sizes_of(int s, int32_t *atoms, int32_t *edges)
{
    int32_t mols[BS];
    float tgt[BS], extra[BS * 4];
    batch_fill(s, mols, tgt, extra);
    *atoms = *edges = 0;
    for (int32_t j = 0; j < batch_n(s); j++) {
        int32_t k = mols[j];
        *atoms += g_fs->g.mol_atom[k + 1] - g_fs->g.mol_atom[k];
        *edges += g_fs->g.mol_edge[k + 1] - g_fs->g.mol_edge[k];
    }
}

/* c->steps steps (host loop or resident), then one host-loop step more (so
 * a dropout stream left elsewhere than the host loop's shows). */
static mp_status run(const run_cfg *c, run_out *o)
{
    mp_status st;
    memset(o, 0, sizeof *o);
    if ((st = data_load()))
        return st;
    mp_backend *b = NULL;
    mp_model *m = NULL;
    mp_resident *r = NULL;
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    int S = c->steps;
    double *lrs = mp_malloc(sizeof(double) * (size_t)S);
    int32_t *atoms = mp_malloc(sizeof(int32_t) * (size_t)S);
    int32_t *edges = mp_malloc(sizeof(int32_t) * (size_t)S);
    o->losses = mp_malloc(sizeof(double) * (size_t)(S + 1));
    if (!lrs || !atoms || !edges || !o->losses) {
        st = mp_error_set(MP_ERR_NOMEM, "test: out of memory");
        goto done;
    }
    if ((st = mp_backend_open(&b, c->backend)))
        goto done;
    mp_model_config cfg = mp_model_config_default();
    cfg.kind = c->kind;
    cfg.hidden = c->hidden;
    cfg.dropout = c->dropout;
    if (c->kind == MP_MODEL_FFN) {
        cfg.extra_dim = 4;
        cfg.ffn_layers = 3;
    }
    if ((st = mp_model_create(&m, &cfg, b, 7)))
        goto done;
    if (c->mode == 0) {
        for (int s = 0; s < S; s++)
            if ((st = host_step(m, &batch, s, &o->losses[s])))
                goto done;
    } else {
        mp_resident_opts ro = { .batch_size = BS, .max_batches = S, .use_graph = c->mode == 2,
                                .n_classes = c->n_classes };
        mp_graphs_batch_bounds(&g_fs->g, NULL, 0, BS, &ro.cap_atoms, &ro.cap_edges);
        if ((st = mp_resident_create(&r, m, &ro)))
            goto done;
        for (int s = 0; s < S; s++)
            sizes_of(s, &atoms[s], &edges[s]);
        if ((st = mp_resident_plan(r, S, atoms, edges)))
            goto done;
        int seen[MP_RESIDENT_MAX_CLASSES] = { 0 };
        for (int s = 0; s < S; s++) {
            int32_t mols[BS];
            float tgt[BS], extra[BS * 4];
            batch_fill(s, mols, tgt, extra);
            lrs[s] = lr_at(s);
            if ((st = mp_resident_pack(r, s, &g_fs->g, mols, batch_n(s), tgt, extra)))
                goto done;
            int k = mp_resident_slot_class(r, s);
            if (k >= 0 && !seen[k]++)
                o->classes_used++;
        }
        if ((st = mp_resident_run(r, S, lrs, o->losses)))
            goto done;
        mp_resident_free(r);
        r = NULL;
    }
    o->drop_rng = m->drop_rng;
    if ((st = host_step(m, &batch, S, &o->losses[S])))
        goto done;
    o->n_params = mp_model_n_params(m);
    if (!(o->params = mp_malloc(sizeof(float) * o->n_params))) {
        st = mp_error_set(MP_ERR_NOMEM, "test: out of memory");
        goto done;
    }
    st = mp_model_get_params(m, o->params);
done:
    mp_free(lrs);
    mp_free(atoms);
    mp_free(edges);
    mp_graphs_free(&batch);
    mp_resident_free(r);
    mp_model_free(m);
    mp_backend_close(b);
    if (st)
        run_out_free(o);
    return st;
}

static double max_rel_diff(const double *a, const double *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1e-30);
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

/* Bitwise the same losses (all S + 1), parameters and dropout stream. */
static int same_run(const run_out *a, const run_out *b, int S)
{
    return a->n_params == b->n_params &&
           memcmp(a->losses, b->losses, sizeof(double) * (size_t)(S + 1)) == 0 &&
           memcmp(a->params, b->params, sizeof(float) * a->n_params) == 0 &&
           memcmp(&a->drop_rng, &b->drop_rng, sizeof a->drop_rng) == 0;
}

/* ||a - b|| / ||b|| over the parameters. */
static double param_rel(const run_out *a, const run_out *b)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < a->n_params; i++) {
        num += ((double)a->params[i] - b->params[i]) * ((double)a->params[i] - b->params[i]);
        den += (double)b->params[i] * b->params[i];
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

/* ===================================================================== */
/* Dropout in resident steps                                              */
/* ===================================================================== */

/* On ref the padded steps compute the host loop's bits (its sums run in
 * order); only Adam differs, by the float rounding of the device schedule's
 * step size (ops.h: adam_sched), so: the first loss bitwise, the rest and
 * the model to 1e-6, and the dropout stream in the same state (the same
 * keys were drawn: another mask would move the losses by ~1e-2). */
MP_TEST(resident_dropout_matches_host_loop_ref)
{
    enum { S = 8 };
    for (int kind = 0; kind < 2; kind++) {
        run_cfg c = { .backend = "ref", .kind = kind ? MP_MODEL_FFN : MP_MODEL_DMPNN,
                      .dropout = 0.2, .n_classes = 3, .hidden = 16, .steps = S };
        run_out host, res, other;
        CHECK_OK(run(&c, &host));
        c.mode = 1;
        CHECK_OK(run(&c, &res));
        c.dropout = 0.25;
        CHECK_OK(run(&c, &other));
        if (kind == 0)
            CHECK_MSG(res.classes_used >= 2, "only %d slot classes used", res.classes_used);
        CHECK(res.losses[0] == host.losses[0]);
        double e = max_rel_diff(res.losses, host.losses, S + 1), pe = param_rel(&res, &host);
        CHECK_MSG(e <= 1e-6 && pe <= 1e-6, "kind %d: resident with dropout vs the host loop: "
                  "loss rel. diff %g, parameters %g", kind, e, pe);
        CHECK(memcmp(&res.drop_rng, &host.drop_rng, sizeof res.drop_rng) == 0);
        /* the check can fail: other masks move the losses far more */
        CHECK(max_rel_diff(other.losses, host.losses, S + 1) > 1e-4);
        CHECK(host.losses[S - 1] != host.losses[0]);
        run_out_free(&host);
        run_out_free(&res);
        run_out_free(&other);
    }
}

/* (Every backend reads dropout keys from device memory now (ops.h mp_key),
 * so resident steps always take the keyed path; the keys drawn as issued
 * are the host loop's, compared below.) */
MP_TEST(resident_dropout_keyed_follows_host_loop_cpu)
{
    enum { S = 8 };
    run_cfg c = { .backend = "cpu", .mode = 1, .kind = MP_MODEL_DMPNN, .dropout = 0.2,
                  .n_classes = 3, .hidden = 32, .steps = S };
    run_out keyed, host, nodrop;
    CHECK_OK(run(&c, &keyed));
    c.mode = 0;
    CHECK_OK(run(&c, &host));
    c.mode = 1;
    c.dropout = 0;
    CHECK_OK(run(&c, &nodrop));
    /* cpu padding moves the BLAS blocking: near, not bitwise, the host loop;
     * the same keys drawn, the stream left in the same state */
    double e = max_rel_diff(keyed.losses, host.losses, S + 1);
    CHECK_MSG(e <= 1e-5, "resident vs host loop with dropout: %g", e);
    CHECK(memcmp(&keyed.drop_rng, &host.drop_rng, sizeof host.drop_rng) == 0);
    /* and the dropout did something */
    CHECK(max_rel_diff(keyed.losses, nodrop.losses, S + 1) > 1e-4);
    run_out_free(&keyed);
    run_out_free(&host);
    run_out_free(&nodrop);
}

MP_TEST(resident_graph_with_dropout_needs_keyed_ops)
{
    CHECK_OK(data_load());
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cpu"));
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 4;
    cfg.dropout = 0.1;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &cfg, b, 1));
    mp_resident *r = NULL;
    mp_resident_opts ro = { .batch_size = 2, .max_batches = 1, .use_graph = 1,
                            .cap_atoms = 50, .cap_edges = 100 };
    CHECK(mp_resident_create(&r, m, &ro) == MP_ERR_ARG);
    ro.use_graph = 0;
    ro.n_classes = MP_RESIDENT_MAX_CLASSES + 1;
    CHECK(mp_resident_create(&r, m, &ro) == MP_ERR_ARG);
    mp_model_free(m);
    mp_backend_close(b);
}

/* ===================================================================== */
/* Slot classes                                                           */
/* ===================================================================== */

MP_TEST(resident_classes_smallest_that_holds)
{
    enum { S = 40 };
    CHECK_OK(data_load());
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, "cpu"));
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 8;
    mp_model *m = NULL;
    CHECK_OK(mp_model_create(&m, &cfg, b, 1));
    mp_resident *r = NULL;
    mp_resident_opts ro = { .batch_size = BS, .max_batches = S, .n_classes = 4 };
    mp_graphs_batch_bounds(&g_fs->g, NULL, 0, BS, &ro.cap_atoms, &ro.cap_edges);
    CHECK_OK(mp_resident_create(&r, m, &ro));
    CHECK_EQ_INT(mp_resident_n_classes(r), 1);   /* before the first plan */
    int32_t atoms[S], edges[S];
    for (int s = 0; s < S; s++)
        sizes_of(s, &atoms[s], &edges[s]);
    /* a batch beyond the largest class is refused, and changes nothing */
    int32_t big_a = ro.cap_atoms + 1, big_e = 2;
    CHECK(mp_resident_plan(r, 1, &big_a, &big_e) == MP_ERR_ARG);
    CHECK(mp_resident_plan(r, S + 1, atoms, edges) == MP_ERR_ARG);
    CHECK_EQ_INT(mp_resident_n_classes(r), 1);
    CHECK_OK(mp_resident_plan(r, S, atoms, edges));
    int nc = mp_resident_n_classes(r);
    CHECK_MSG(nc >= 3 && nc <= 4, "%d classes", nc);
    int32_t fa[4], fe[4], cm[4], ca[4], ce[4];
    for (int k = 0; k < nc; k++) {
        CHECK_OK(mp_resident_class_caps(r, k, &fa[k], &fe[k], &cm[k], &ca[k], &ce[k]));
        CHECK(ce[k] >= fe[k] && ca[k] > fa[k] && cm[k] > BS);
        if (k > 0)
            CHECK(fe[k] > fe[k - 1] && fa[k] >= fa[k - 1] && ca[k] >= ca[k - 1]);
    }
    CHECK(mp_resident_class_caps(r, nc, &fa[0], &fe[0], &cm[0], &ca[0], &ce[0]) == MP_ERR_ARG);
    CHECK_EQ_INT(fa[nc - 1], ro.cap_atoms);
    CHECK_EQ_INT(fe[nc - 1], ro.cap_edges);
    int32_t pm, pa, pe;
    mp_resident_caps(r, &pm, &pa, &pe);
    CHECK(pm == cm[nc - 1] && pa == ca[nc - 1] && pe == ce[nc - 1]);
    int used[4] = { 0 };
    mp_graphs sel;
    memset(&sel, 0, sizeof sel);
    for (int s = 0; s < S; s++) {
        int k = mp_resident_slot_class(r, s);
        CHECK(k >= 0 && k < nc);
        used[k]++;
        CHECK_MSG(atoms[s] <= fa[k] && edges[s] <= fe[k], "batch %d not held by class %d", s, k);
        for (int j = 0; j < k; j++)
            CHECK_MSG(atoms[s] > fa[j] || edges[s] > fe[j], "batch %d: class %d holds it, "
                      "class %d was given", s, j, k);
        int32_t mols[BS];
        float tgt[BS], extra[BS * 4];
        batch_fill(s, mols, tgt, extra);
        CHECK_OK(mp_resident_pack(r, s, &g_fs->g, mols, batch_n(s), tgt, NULL));
    }
    CHECK(used[0] > 0);
    CHECK(mp_resident_slot_class(r, S) == -1);
    /* slots back to back: each still holds its own batch after all were
     * packed (an overlap would have overwritten one), padded to its class */
    for (int s = 0; s < S; s++) {
        int k = mp_resident_slot_class(r, s);
        int32_t mols[BS];
        float tgt[BS], extra[BS * 4];
        batch_fill(s, mols, tgt, extra);
        int32_t n = batch_n(s);
        CHECK_OK(mp_graphs_select(&sel, &g_fs->g, mols, n));
        mp_graphs v;
        CHECK_OK(mp_resident_slot_view(r, s, &v, NULL, NULL));
        CHECK(v.n_mols == cm[k] && v.n_atoms == ca[k] && v.n_edges == ce[k]);
        for (int32_t i = 0; i <= n; i++)
            CHECK(v.mol_atom[i] == sel.mol_atom[i] && v.mol_edge[i] == sel.mol_edge[i]);
        CHECK(memcmp(v.edge_src, sel.edge_src, sizeof(int32_t) * (size_t)sel.n_edges) == 0);
        CHECK(memcmp(v.in_edge, sel.in_edge, sizeof(int32_t) * (size_t)sel.n_edges) == 0);
        CHECK(memcmp(v.atom_hot, sel.atom_hot,
                     sizeof(int16_t) * MP_ATOM_MAX_HOT * (size_t)sel.n_atoms) == 0);
        CHECK_EQ_INT(v.mol_atom[cm[k]], ca[k]);
        CHECK_EQ_INT(v.in_start[ca[k]], ce[k]);
        /* the padding: self-loop pairs on padding atoms, spread evenly (an
         * even count each, no atom more than 2 x ceil(pairs / atoms)) */
        const int32_t na = sel.n_atoms, ne = sel.n_edges;
        const int32_t pairs = (ce[k] - ne) / 2, pad_atoms = ca[k] - na;
        const int32_t per = 2 * ((pairs + pad_atoms - 1) / pad_atoms);
        for (int32_t e = ne; e < ce[k]; e++)
            CHECK(v.edge_src[e] == v.edge_dst[e] && v.edge_src[e] >= na &&
                  v.edge_src[e] == v.edge_src[e ^ 1]);
        for (int32_t a = na; a < ca[k]; a++) {
            int32_t deg = v.in_start[a + 1] - v.in_start[a];
            CHECK_MSG(deg % 2 == 0 && deg <= per, "batch %d: padding atom %d holds %d edges "
                      "(at most %d)", s, (int)a, (int)deg, (int)per);
        }
    }
    /* a later plan keeps the classes */
    CHECK_OK(mp_resident_plan(r, S / 2, atoms + S / 2, edges + S / 2));
    CHECK_EQ_INT(mp_resident_n_classes(r), nc);
    mp_graphs_free(&sel);
    mp_resident_free(r);
    mp_model_free(m);
    mp_backend_close(b);
}

/* Step by step, host loop vs resident with several classes: the gradients
 * of every step (bitwise on ref, 1e-5 on cpu) and the parameters. */
static void classes_padded_vs_unpadded(mp_test_result *mp__r, const char *backend, double tol)
{
    enum { S = 12 };
    CHECK_OK(data_load());
    mp_backend *b = NULL;
    CHECK_OK(mp_backend_open(&b, backend));
    mp_model_config cfg = mp_model_config_default();
    cfg.hidden = 16;
    cfg.dropout = 0.15;
    mp_model *m1 = NULL, *m2 = NULL;
    CHECK_OK(mp_model_create(&m1, &cfg, b, 5));
    CHECK_OK(mp_model_create(&m2, &cfg, b, 5));
    size_t np = mp_model_n_params(m1);
    float *g1 = mp_malloc(np * sizeof(float)), *g2 = mp_malloc(np * sizeof(float));
    float *p1 = mp_malloc(np * sizeof(float)), *p2 = mp_malloc(np * sizeof(float));
    mp_resident *r = NULL;
    mp_resident_opts ro = { .batch_size = BS, .max_batches = S, .n_classes = 4 };
    mp_graphs_batch_bounds(&g_fs->g, NULL, 0, BS, &ro.cap_atoms, &ro.cap_edges);
    CHECK_OK(mp_resident_create(&r, m2, &ro));
    int32_t atoms[S], edges[S];
    for (int s = 0; s < S; s++)
        sizes_of(s, &atoms[s], &edges[s]);
    CHECK_OK(mp_resident_plan(r, S, atoms, edges));   /* fixes the classes */
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    int seen[MP_RESIDENT_MAX_CLASSES] = { 0 }, n_seen = 0;
    for (int s = 0; s < S; s++) {
        double l1, l2;
        CHECK_OK(host_step(m1, &batch, s, &l1));
        CHECK_OK(mp_model_get_grads(m1, g1));
        CHECK_OK(mp_model_get_params(m1, p1));
        /* this batch alone as slot 0, in its class */
        CHECK_OK(mp_resident_plan(r, 1, &atoms[s], &edges[s]));
        int k = mp_resident_slot_class(r, 0);
        n_seen += !seen[k]++;
        int32_t mols[BS];
        float tgt[BS], extra[BS * 4];
        batch_fill(s, mols, tgt, extra);
        CHECK_OK(mp_resident_pack(r, 0, &g_fs->g, mols, batch_n(s), tgt, NULL));
        double lr = lr_at(s);
        CHECK_OK(mp_resident_run(r, 1, &lr, &l2));
        CHECK_OK(mp_model_get_grads(m2, g2));
        CHECK_OK(mp_model_get_params(m2, p2));
        double num = 0, den = 0, pn = 0, pd = 0;
        for (size_t i = 0; i < np; i++) {
            num += ((double)g1[i] - g2[i]) * ((double)g1[i] - g2[i]);
            den += (double)g1[i] * g1[i];
            pn += ((double)p1[i] - p2[i]) * ((double)p1[i] - p2[i]);
            pd += (double)p1[i] * p1[i];
        }
        CHECK(den > 0);
        if (tol == 0) {
            CHECK_MSG(l1 == l2 && memcmp(g1, g2, np * sizeof(float)) == 0,
                      "%s step %d (class %d): loss %.17g vs %.17g, gradient rel. error %g",
                      backend, s, k, l1, l2, sqrt(num / den));
        } else {
            CHECK_NEAR(l2, l1, 0, tol);
            CHECK_MSG(sqrt(num / den) <= tol, "%s step %d (class %d): gradient rel. error %g",
                      backend, s, k, sqrt(num / den));
        }
        /* Adam from the device schedule: the same update up to the float
         * rounding of its step size on ref; then the two models are put
         * back on the same parameters (the moments are equal already) */
        CHECK_MSG(sqrt(pn / pd) <= (tol > 1e-6 ? tol : 1e-6), "%s step %d: parameter rel. "
                  "error %g", backend, s, sqrt(pn / pd));
        CHECK_OK(mp_model_set_params(m2, p1));
    }
    CHECK_MSG(n_seen >= 3, "only %d classes exercised", n_seen);
    mp_graphs_free(&batch);
    mp_resident_free(r);
    mp_free(g1);
    mp_free(g2);
    mp_free(p1);
    mp_free(p2);
    mp_model_free(m1);
    mp_model_free(m2);
    mp_backend_close(b);
}

MP_TEST(resident_classes_padded_equals_unpadded_ref)
{
    classes_padded_vs_unpadded(mp__r, "ref", 0.0);
}

MP_TEST(resident_classes_padded_equals_unpadded_cpu)
{
    classes_padded_vs_unpadded(mp__r, "cpu", 1e-5);
}

/* ===================================================================== */
/* On the GPU                                                             */
/* ===================================================================== */

/* Steps over which the gpu and cpu losses are held to tol_cpu: past them
 * the training dynamics grow the two sides' rounding, and by how much
 * depends on the cpu's BLAS kernels (no dropout, 4 classes, 51 steps, on
 * an H100's host, 2026-12-07: OpenBLAS's Haswell kernels 2.1e-2, its
 * SkylakeX kernels 4.2e-7, its own choice there 8.1e-5), not on the
 * resident path; all the steps are held to DRIFT_TOL. */
enum { CPU_PREFIX = 10 };
#define DRIFT_TOL 0.1

/* 50 ESOL steps of the default-sized D-MPNN in fp32: graph replay == eager
 * bitwise (with dropout: the keys come from device memory; with several
 * slot classes: one graph each), and near the cpu host loop. */
static void gpu_graph_vs_eager(mp_test_result *mp__r, mp_model_kind kind, double dropout,
                               int n_classes, double tol_cpu)
{
    enum { S = 50 };
    run_cfg c = { .backend = "cpu", .mode = 0, .kind = kind, .dropout = dropout,
                  .n_classes = n_classes, .hidden = 300, .steps = S };
    run_out cpu, graph, eager;
    CHECK_OK(run(&c, &cpu));
    c.backend = "cuda:fp32";
    c.mode = 2;
    CHECK_OK(run(&c, &graph));
    c.mode = 1;
    CHECK_OK(run(&c, &eager));
    double e = max_rel_diff(graph.losses, cpu.losses, S + 1);
    double ep = max_rel_diff(graph.losses, cpu.losses, CPU_PREFIX + 1);
    printf("    %s dropout %.2f, %d classes (%d used): gpu graph vs cpu host loop: max rel. "
           "loss diff %.3g over %d steps, %.3g over the first %d\n",
           kind == MP_MODEL_FFN ? "ffn" : "dmpnn", dropout, n_classes, graph.classes_used, e,
           S + 1, ep, CPU_PREFIX + 1);
    CHECK_MSG(same_run(&graph, &eager, S), "graph replay differs from the eager steps "
              "(max rel. loss diff %g)", max_rel_diff(graph.losses, eager.losses, S + 1));
    /* the first step: the same masks (another mask moves it by ~1e-2) */
    double e0 = max_rel_diff(graph.losses, cpu.losses, 1);
    CHECK_MSG(e0 <= 1e-5, "gpu vs cpu: first loss rel. difference %g", e0);
    CHECK_MSG(ep <= tol_cpu, "gpu vs cpu: max relative loss difference %g over the first %d "
              "steps", ep, CPU_PREFIX + 1);
    CHECK_MSG(e <= DRIFT_TOL, "gpu vs cpu: max relative loss difference %g", e);
    if (kind == MP_MODEL_DMPNN && n_classes > 1)
        CHECK(graph.classes_used >= 2);
    run_out_free(&cpu);
    run_out_free(&graph);
    run_out_free(&eager);
}

/* (Over 50 steps with dropout the default-sized D-MPNN's gpu and cpu losses
 * drift apart, by 2.4e-2 on an H200, from step 9 on, and the gpu host loop
 * drifts just the same (gpu_resident_cuda_dropout_drift below): rounding
 * grown by the dynamics, not the resident path.  Hence the loose bound
 * there; the first step's 1e-5 checks the masks.) */
MP_TEST(gpu_resident_cuda_dropout_graph_equals_eager)
{
    MP_NEED_GPU();
    gpu_graph_vs_eager(mp__r, MP_MODEL_DMPNN, 0.1, 1, 0.1);
    gpu_graph_vs_eager(mp__r, MP_MODEL_DMPNN, 0.1, 4, 0.1);
    gpu_graph_vs_eager(mp__r, MP_MODEL_FFN, 0.2, 1, 1e-3);
}

MP_TEST(gpu_resident_cuda_classes_graph_equals_eager)
{
    MP_NEED_GPU();
    gpu_graph_vs_eager(mp__r, MP_MODEL_DMPNN, 0.0, 4, 1e-4);
}

MP_TEST(gpu_resident_cuda_trainer_dropout_graph_equals_eager)
{
    MP_NEED_GPU();
    mp_train_result a, b, c;
    CHECK_OK(mp_test_train_esol("cpu", 0, -1, 0.1, &a));
    CHECK_OK(mp_test_train_esol("cuda:fp32", -1, 1, 0.1, &b));   /* resident, graph */
    CHECK_OK(mp_test_train_esol("cuda:fp32", -1, 0, 0.1, &c));   /* resident, eager */
    printf("    esol 3 epochs, dropout 0.1, test rmse: cpu %.6f, gpu graph %.6f, gpu eager "
           "%.6f\n", a.test_mean, b.test_mean, c.test_mean);
    CHECK(b.test_mean == c.test_mean && b.val_mean == c.val_mean);
    CHECK_NEAR(b.test_mean, a.test_mean, 0, 1e-3);
    mp_train_result_free(&a);
    mp_train_result_free(&b);
    mp_train_result_free(&c);
}

/* Where a gpu/cpu difference comes from (D-MPNN, fp32): the losses of the
 * cpu host loop against the cuda host loop, resident eager (device keys)
 * and resident graph, printed; graph == eager checked.  On an H200 (2026-11-30): hidden 300 with dropout 0.1, all
 * four gpu runs drift from the cpu alike (2.4e-2, from step 9); hidden 32,
 * or no dropout: <= 5e-7. */
static void dropout_diag(mp_test_result *mp__r, int hidden, double dropout)
{
    enum { S = 50, V = 4 };
    static const char *names[V] = { "cpu host", "gpu host", "gpu eager keyed", "gpu graph" };
    run_out o[V];
    for (int v = 0; v < V; v++) {
        run_cfg c = { .backend = v ? "cuda:fp32" : "cpu", .mode = v <= 1 ? 0 : v == 3 ? 2 : 1,
                      .kind = MP_MODEL_DMPNN, .dropout = dropout, .n_classes = 1,
                      .hidden = hidden, .steps = S };
        CHECK_OK(run(&c, &o[v]));
    }
    printf("    diag hidden %d dropout %.2f:", hidden, dropout);
    for (int v = 1; v < V; v++) {
        int first = -1;
        for (int i = 0; i <= S && first < 0; i++)
            if (fabs(o[v].losses[i] - o[0].losses[i]) > 1e-5 * fabs(o[0].losses[i]))
                first = i;
        printf(" | %s: max rel %.3g, first > 1e-5 at step %d", names[v],
               max_rel_diff(o[v].losses, o[0].losses, S + 1), first);
    }
    printf("\n    steps 0-4:");
    for (int i = 0; i < 5; i++)
        for (int v = 0; v < V; v++)
            printf("%s%.9g", v ? " " : "\n      ", o[v].losses[i]);
    printf("\n");
    CHECK(same_run(&o[2], &o[3], S));
    for (int v = 0; v < V; v++)
        run_out_free(&o[v]);
}

MP_TEST(gpu_resident_cuda_dropout_drift)
{
    MP_NEED_GPU();
    dropout_diag(mp__r, 300, 0.1);
    dropout_diag(mp__r, 32, 0.1);
    dropout_diag(mp__r, 300, 0.0);
}
