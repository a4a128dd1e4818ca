/*
 * test_predict_stream.c - the prediction path (ensemble_predict.c:
 * mp_ensemble_predict, two batch slots, packed page-locked uploads,
 * asynchronous outputs) against an independent computation (per batch a
 * select and a synchronous mp_model_forward per member, un-scaled and
 * averaged here), and edge_embed with M_0 on the host backends against the
 * ops it replaces.
 *
 * The two must give bitwise the same means and standard deviations for
 * every model kind the path packs differently (D-MPNN alone, D-MPNN with
 * molecule features, features-only FFN), ensembles and member subsets,
 * invalid molecules, repeated and permuted molecule lists, and every batch
 * size from 1 to larger than the input.  On the cpu and ref backends the
 * path runs with synchronous stand-ins for the copies (the same packing,
 * slots and bookkeeping; ref64 also widens the features and narrows the
 * outputs); gpu_predict_stream runs the real thing on the cuda backend
 * (skipped without a GPU; a failure under MOLPROP_REQUIRE_GPU=1).
 */
#include "test.h"

#include "gpu/gpu.h"
#include "run/ensemble.h"
#include "models/model.h"
#include "randgraph.h"

#include <math.h>
#include <stdlib.h>

/* ===================================================================== */
/* Fixtures                                                               */
/* ===================================================================== */

#define N_DESC 6

/* n random molecules (some invalid, some without bonds) with N_DESC random
 * descriptors each (NaN now and then, as RDKit gives); NULL on OOM. */
static mp_features *make_features(int32_t n, uint64_t seed, int max_atoms)
{
    mp_features *f = mp_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    mp_rng r;
    mp_rng_seed(&r, seed, 3);
    rg_opts o = { 1, max_atoms, 0.08, 0.05, 3 };
    if (!rg_make(&f->g, &r, n, 133, &o)) {
        mp_free(f);
        return NULL;
    }
    f->n_desc = N_DESC;
    f->desc = mp_malloc(sizeof(double) * (size_t)n * N_DESC);
    if (!f->desc) {
        mp_features_free(f);
        return NULL;
    }
    for (size_t i = 0; i < (size_t)n * N_DESC; i++)
        f->desc[i] = mp_rng_uniform(&r) < 0.02 ? NAN : 10 * mp_rng_uniform(&r) - 3;
    return f;
}

/* An ensemble of n_members models on backend `name`: kind, task, n_tasks,
 * with the descriptors as molecule features when feats (a features-only FFN
 * always has them), and made-up scalers. */
static mp_status make_ensemble(mp_ensemble **out, const char *name, mp_model_kind kind,
                               mp_task_type task, int n_tasks, int n_members, int feats)
{
    mp_model_config c = mp_model_config_default();
    c.kind = kind;
    c.task = task == MP_TASK_CLASSIFICATION ? MP_MODEL_CLASSIFICATION : MP_MODEL_REGRESSION;
    c.n_tasks = n_tasks;
    c.hidden = 40;
    c.ffn_hidden = 24;
    c.extra_dim = feats || kind == MP_MODEL_FFN ? N_DESC : 0;
    mp_status st = mp_ensemble_create(out, &c, n_members, 11, name);
    if (st)
        return st;
    mp_ensemble *e = *out;
    e->task = task;
    e->n_tasks = (size_t)n_tasks;
    double mu[8], sd[8];
    for (int k = 0; k < 8; k++) {
        mu[k] = 0.5 * k - 1.25;
        sd[k] = 0.75 + 0.5 * k;
    }
    if (task == MP_TASK_REGRESSION &&
        (st = mp_scaler_set(&e->target_scaler, MP_SCALE_TARGETS, (size_t)n_tasks, mu, sd)))
        return st;
    if (c.extra_dim) {
        e->features = MP_FEAT_RDKIT2D_CORE;
        e->n_desc = N_DESC;
        if ((st = mp_scaler_set(&e->feature_scaler, MP_SCALE_FEATURES, N_DESC, mu, sd)))
            return st;
    }
    return MP_OK;
}

/* The independent computation: per batch (the valid molecules among batch
 * consecutive entries of mols) a select and mp_model_forward (training 0)
 * for each member; outputs through the sigmoid (classification) or the
 * target scaler; the members' mean, then their spread (ddof 0), in two
 * passes.  Invalid molecules read NaN. */
static mp_status reference_predict(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                   int32_t n, int first, int count, int32_t batch, double *mean,
                                   double *std)
{
    size_t t = e->n_tasks;
    int lo = first, hi = count > 0 ? first + count : e->n_members, nu = hi - lo;
    int dim = e->cfg.extra_dim;
    int32_t *sel = mp_malloc(sizeof(int32_t) * (size_t)batch);
    float *extra = mp_malloc(sizeof(float) * ((size_t)batch * (size_t)dim + 1));
    double *xd = mp_malloc(sizeof(double) * ((size_t)batch * (size_t)dim + 1));
    float *out = mp_malloc(sizeof(float) * (size_t)batch * t);
    double *vals = mp_malloc(sizeof(double) * (size_t)nu * (size_t)batch * t);
    mp_graphs g;
    memset(&g, 0, sizeof g);
    mp_status st = sel && extra && xd && out && vals ? MP_OK : MP_ERR_NOMEM;
    for (int32_t b0 = 0; st == MP_OK && b0 < n; b0 += batch) {
        int32_t span = n - b0 < batch ? n - b0 : batch, nb = 0;
        for (int32_t i = 0; i < span; i++)
            if (f->g.valid[mols[b0 + i]])
                sel[nb++] = mols[b0 + i];
        if (nb > 0 && e->cfg.kind == MP_MODEL_DMPNN)
            st = mp_graphs_select(&g, &f->g, sel, nb);
        if (nb > 0 && dim) {
            mp_feature_set_fill(e->features, f, sel, nb, xd);
            mp_scaler_transform_to_f32(&e->feature_scaler, xd, extra, (size_t)nb);
        }
        for (int k = lo; st == MP_OK && nb > 0 && k < hi; k++) {
            double *v = vals + (size_t)(k - lo) * (size_t)nb * t;
            st = mp_model_forward(e->members[k], e->cfg.kind == MP_MODEL_DMPNN ? &g : NULL,
                                  dim ? extra : NULL, nb, 0, out);
            if (e->task == MP_TASK_CLASSIFICATION)
                for (size_t i = 0; i < (size_t)nb * t; i++)
                    v[i] = 1.0 / (1.0 + exp(-(double)out[i]));
            else
                mp_scaler_inverse_from_f32(&e->target_scaler, out, v, (size_t)nb);
        }
        for (int32_t i = 0, j = 0; st == MP_OK && i < span; i++) {
            int valid = f->g.valid[mols[b0 + i]];
            for (size_t c = 0; c < t; c++) {
                double mu = 0, ss = 0;
                for (int k = 0; valid && k < nu; k++)
                    mu += vals[((size_t)k * (size_t)nb + (size_t)j) * t + c];
                mu /= nu;
                for (int k = 0; valid && k < nu; k++) {
                    double dv = vals[((size_t)k * (size_t)nb + (size_t)j) * t + c] - mu;
                    ss += dv * dv;
                }
                mean[(size_t)(b0 + i) * t + c] = valid ? mu : NAN;
                std[(size_t)(b0 + i) * t + c] = valid ? sqrt(ss / nu) : NAN;
            }
            j += valid;
        }
    }
    mp_graphs_free(&g);
    mp_free(sel);
    mp_free(extra);
    mp_free(xd);
    mp_free(out);
    mp_free(vals);
    return st;
}

/* Runs both computations on mols[0..n) and compares mean and std bit for bit.
 * Returns 0 and fills why on a difference or a failure. */
static int same_both_ways(mp_ensemble *e, const mp_features *f, const int32_t *mols, int32_t n,
                          int first, int count, int32_t batch, char *why, size_t wn)
{
    size_t t = e->n_tasks, cells = (size_t)(n > 0 ? n : 1) * t;
    double *m1 = mp_malloc(cells * sizeof(double)), *s1 = mp_malloc(cells * sizeof(double));
    double *m2 = mp_malloc(cells * sizeof(double)), *s2 = mp_malloc(cells * sizeof(double));
    int ok = 0;
    if (!m1 || !s1 || !m2 || !s2) {
        snprintf(why, wn, "out of memory");
        goto out;
    }
    /* poison: a cell the stream path forgets keeps 0xFF bytes */
    memset(m2, 0xFF, cells * sizeof(double));
    memset(s2, 0xFF, cells * sizeof(double));
    mp_predict_stream_stats stats;
    if (reference_predict(e, f, mols, n, first, count, batch, m1, s1) != MP_OK ||
        mp_ensemble_predict_stream(e, f, mols, n, first, count, batch, m2, s2, &stats) != MP_OK) {
        snprintf(why, wn, "batch %d: %s", (int)batch, mp_error_message());
        goto out;
    }
    int32_t want_batches = (n + batch - 1) / batch;
    if (n > 0 && batch > n)
        want_batches = 1;
    if (stats.batches != want_batches) {
        snprintf(why, wn, "batch %d: %d batches, expected %d", (int)batch, stats.batches,
                 (int)want_batches);
        goto out;
    }
    for (size_t i = 0; i < (size_t)n * t; i++)
        if (memcmp(&m1[i], &m2[i], sizeof(double)) || memcmp(&s1[i], &s2[i], sizeof(double))) {
            snprintf(why, wn, "batch %d, molecule %zu, task %zu: mp_model_forward %.17g (std "
                     "%.17g), prediction path %.17g (std %.17g)", (int)batch, i / t, i % t, m1[i], s1[i], m2[i],
                     s2[i]);
            goto out;
        }
    ok = 1;
out:
    mp_free(m1);
    mp_free(s1);
    mp_free(m2);
    mp_free(s2);
    return ok;
}

/* Every model kind and batch size on backend `name` over features f. */
static int all_cases(const char *name, const mp_features *f, const int32_t *batches, int nbat,
                     char *why, size_t wn)
{
    int32_t n = f->g.n_mols;
    int32_t *ident = mp_malloc(sizeof(int32_t) * (size_t)n);
    int32_t *perm = mp_malloc(sizeof(int32_t) * (size_t)n);
    if (!ident || !perm) {
        mp_free(ident);
        mp_free(perm);
        snprintf(why, wn, "out of memory");
        return 0;
    }
    for (int32_t i = 0; i < n; i++) {
        ident[i] = i;
        perm[i] = (int32_t)(((int64_t)i * 7 + 3) % n);   /* a permutation when 7 !| n */
    }
    perm[n / 2] = perm[0];                                 /* and one repeat */
    static const struct {
        mp_model_kind kind;
        mp_task_type  task;
        int           tasks, members, feats;
    } kinds[] = {
        { MP_MODEL_DMPNN, MP_TASK_REGRESSION, 2, 2, 0 },
        { MP_MODEL_DMPNN, MP_TASK_CLASSIFICATION, 3, 1, 1 },
        { MP_MODEL_FFN, MP_TASK_REGRESSION, 1, 3, 1 },
    };
    int ok = 1;
    for (size_t k = 0; ok && k < sizeof kinds / sizeof kinds[0]; k++) {
        mp_ensemble *e = NULL;
        if (make_ensemble(&e, name, kinds[k].kind, kinds[k].task, kinds[k].tasks,
                          kinds[k].members, kinds[k].feats) != MP_OK) {
            snprintf(why, wn, "ensemble %zu: %s", k, mp_error_message());
            mp_ensemble_free(e);
            ok = 0;
            break;
        }
        /* Same activation capacity for both paths: the arena's size must
         * not be what differs between them. */
        int32_t ma, me, big = batches[nbat - 1] < n ? batches[nbat - 1] : n;
        mp_graphs_batch_bounds(&f->g, NULL, n, big, &ma, &me);
        for (int q = 0; q < e->n_members; q++)
            if (mp_model_reserve(e->members[q], big, ma, me) != MP_OK) {
                snprintf(why, wn, "reserve: %s", mp_error_message());
                ok = 0;
            }
        char sub[600];
        for (int bi = 0; ok && bi < nbat; bi++) {
            ok = same_both_ways(e, f, ident, n, 0, 0, batches[bi], sub, sizeof sub) &&
                 same_both_ways(e, f, perm, n, 0, 0, batches[bi], sub, sizeof sub) &&
                 same_both_ways(e, f, perm + 5, n / 3, 0, 0, batches[bi], sub, sizeof sub);
            if (ok && e->n_members > 1)
                ok = same_both_ways(e, f, ident, n, 1, e->n_members - 1, batches[bi], sub,
                                    sizeof sub);
            if (!ok)
                snprintf(why, wn, "%s, model %zu: %s", name, k, sub);
        }
        mp_ensemble_free(e);
    }
    mp_free(ident);
    mp_free(perm);
    return ok;
}

/* ===================================================================== */
/* Host backends                                                          */
/* ===================================================================== */

MP_TEST(predict_matches_model_forward_cpu)
{
    mp_features *f = make_features(157, 5, 30);
    CHECK(f);
    static const int32_t batches[] = { 1, 6, 50, 157, 400 };
    char why[800] = "";
    int ok = all_cases("cpu", f, batches, 5, why, sizeof why);
    mp_features_free(f);
    CHECK_MSG(ok, "%s", why);
}

/* The reference backends: ref in float, ref64 in double (the features
 * widened in the packed block, the outputs narrowed as mp_model_forward
 * narrows them). */
MP_TEST(predict_matches_model_forward_ref)
{
    mp_features *f = make_features(61, 8, 20);
    CHECK(f);
    static const int32_t batches[] = { 1, 13, 100 };
    char why[800] = "";
    int ok = all_cases("ref", f, batches, 3, why, sizeof why) &&
             all_cases("ref64", f, batches, 3, why, sizeof why);
    mp_features_free(f);
    CHECK_MSG(ok, "%s", why);
}

MP_TEST(predict_stream_refusals)
{
    mp_features *f = make_features(40, 9, 12);
    CHECK(f);
    mp_ensemble *e = NULL;
    mp_status st = make_ensemble(&e, "cpu", MP_MODEL_DMPNN, MP_TASK_REGRESSION, 1, 1, 0);
    double mean[40], sd[40];
    int32_t bad[3] = { 0, 40, 1 };
    if (st == MP_OK)
        st = mp_ensemble_predict_stream(e, f, bad, 3, 0, 0, 2, mean, sd, NULL);
    int range_ok = st == MP_ERR_ARG && strstr(mp_error_message(), "out of range");
    char msg1[300];
    snprintf(msg1, sizeof msg1, "%s", mp_error_message());
    /* a hot slot outside the layout: refused by the batch check, both ways */
    int32_t victim = 0;
    while (victim < 39 && !f->g.valid[victim])
        victim++;
    f->g.atom_hot[(size_t)f->g.mol_atom[victim] * MP_ATOM_MAX_HOT] = 500;
    int32_t all[40];
    for (int i = 0; i < 40; i++)
        all[i] = i;
    mp_status s1 = mp_ensemble_predict(e, f, all, 40, 0, 0, 16, mean, sd);
    int slot_ok = s1 == MP_ERR_FORMAT && strstr(mp_error_message(), "hot slot 500");
    /* members outside the ensemble */
    mp_status s2 = mp_ensemble_predict(e, f, all, 4, 1, 1, 16, mean, sd);
    mp_status s3 = mp_ensemble_predict(e, f, all, 4, -1, 0, 16, mean, sd);
    mp_ensemble_free(e);
    mp_features_free(f);
    CHECK_MSG(range_ok, "bad index: %s (%s)", mp_status_name(st), msg1);
    CHECK_MSG(slot_ok, "bad hot slot: %s", mp_status_name(s1));
    CHECK(s2 == MP_ERR_ARG && s3 == MP_ERR_ARG);
}

/* edge_embed with M_0 on the host backends is edge_embed then ReLU, bit for bit. */
MP_TEST(ops_edge_embed_relu_host)
{
    const char *names[] = { "cpu", "ref", "ref64" };
    mp_rng r;
    mp_rng_seed(&r, 21, 1);
    mp_graphs g;
    rg_opts o = { 1, 20, 0.1, 0.1, 2 };
    CHECK(rg_make(&g, &r, 30, 133, &o));
    const int h = 37;
    size_t E = (size_t)g.n_edges, A = (size_t)g.n_atoms;
    double *av = malloc(sizeof(double) * A * h), *wb = malloc(sizeof(double) * MP_BOND_FDIM * h);
    float *af = malloc(sizeof(float) * A * h), *wf = malloc(sizeof(float) * MP_BOND_FDIM * h);
    char *h0a = malloc(8 * E * h + 8), *m0a = malloc(8 * E * h + 8), *h0b = malloc(8 * E * h + 8),
         *m0b = malloc(8 * E * h + 8);
    int ok = av && wb && af && wf && h0a && m0a && h0b && m0b;
    for (size_t i = 0; ok && i < A * h; i++)
        af[i] = (float)(av[i] = (float)(2 * mp_rng_uniform(&r) - 1));
    for (size_t i = 0; ok && i < (size_t)MP_BOND_FDIM * h; i++)
        wf[i] = (float)(wb[i] = (float)(2 * mp_rng_uniform(&r) - 1));
    char why[200] = "";
    for (int k = 0; ok && k < 3; k++) {
        mp_backend *b = NULL;
        if (mp_backend_open(&b, names[k]) != MP_OK) {
            snprintf(why, sizeof why, "%s: %s", names[k], mp_error_message());
            mp_backend_close(b);
            ok = 0;
            break;
        }
        int dbl = b->esize == 8;
        const void *a = dbl ? (const void *)av : (const void *)af;
        const void *w = dbl ? (const void *)wb : (const void *)wf;
        size_t bytes = E * h * b->esize;
        memset(h0a, 0xFF, bytes);
        memset(m0a, 0xFF, bytes);
        memset(h0b, 0x7F, bytes);
        memset(m0b, 0x7F, bytes);
        b->edge_embed(b, h0a, m0a, MP_ST_ELEM, g.edge_src, g.bond_hot, a, w, g.n_edges, h);
        b->edge_embed(b, h0b, NULL, MP_ST_ELEM, g.edge_src, g.bond_hot, a, w, g.n_edges, h);
        b->relu_dropout(b, m0b, h0b, MP_ST_ELEM, E * h, 0.0, mp_key_host(0));
        int neg = 0;
        for (size_t i = 0; i < E * h; i++)
            neg += dbl ? ((double *)h0a)[i] < 0 : ((float *)h0a)[i] < 0;
        if (memcmp(h0a, h0b, bytes) || memcmp(m0a, m0b, bytes) || neg == 0) {
            snprintf(why, sizeof why, "%s: fused differs from edge_embed + relu (or no negative "
                     "pre-activation to test the ReLU: %d)", names[k], neg);
            ok = 0;
        }
        mp_backend_close(b);
    }
    free(av);
    free(wb);
    free(af);
    free(wf);
    free(h0a);
    free(m0a);
    free(h0b);
    free(m0b);
    mp_graphs_free(&g);
    CHECK_MSG(ok, "%s", why);
}

/* ===================================================================== */
/* The cuda backend                                                       */
/* ===================================================================== */

MP_TEST(gpu_predict_stream)
{
    char why[800];
    if (!mp_backend_cuda_available(why, sizeof why)) {
        const char *req = getenv("MOLPROP_REQUIRE_GPU");
        if (req && *req && strcmp(req, "0") != 0)
            MP_FAIL("no GPU (MOLPROP_REQUIRE_GPU=1): %s", why);
        MP_SKIP(why);
    }
    mp_features *f = make_features(9000, 17, 34);
    CHECK(f);
    static const int32_t batches[] = { 1000, 4096, 20000 };
    const char *names[] = { "cuda:fp32", "cuda:bf16" };
    int ok = 1;
    for (int k = 0; ok && k < 2; k++) {
        mp_backend *b = NULL;
        if (mp_backend_open(&b, names[k]) != MP_OK) {
            snprintf(why, sizeof why, "%s: %s", names[k], mp_error_message());
            ok = 0;
            break;
        }
        /* the streaming ops are there, so mp_ensemble_predict takes this path */
        ok = b->host_alloc && b->upload_async && b->download_async && b->fence_record &&
             b->fence_wait && b->fence_sync;
        mp_backend_close(b);
        if (!ok) {
            snprintf(why, sizeof why, "%s: streaming ops missing", names[k]);
            break;
        }
        ok = all_cases(names[k], f, batches, 3, why, sizeof why);
    }
    mp_features_free(f);
    CHECK_MSG(ok, "%s", why);
}

/* The inference forward with the fused kernels (M_0 never stored, the
 * message summed per atom in registers reading H0 through ReLU; depth 1:
 * H0 and M_0 in one pass) against the same model on the unfused kernels
 * (mp_backend_cuda_plain_ops: two-pass message, a separate ReLU pass): the
 * same bits.  The message step as one product kernel (message_update) sums
 * in its own order; it is left out here and checked within a tolerance in
 * test_gpu_fused.c. */
MP_TEST(gpu_infer_forward_fused_equals_plain)
{
    char why[300];
    if (!mp_backend_cuda_available(why, sizeof why)) {
        const char *req = getenv("MOLPROP_REQUIRE_GPU");
        if (req && *req && strcmp(req, "0") != 0)
            MP_FAIL("no GPU (MOLPROP_REQUIRE_GPU=1): %s", why);
        MP_SKIP(why);
    }
    mp_features *f = make_features(3000, 23, 40);
    CHECK(f);
    mp_graphs g;
    memset(&g, 0, sizeof g);
    int32_t *sel = mp_malloc(sizeof(int32_t) * 3000);
    CHECK(sel);
    int32_t nv = 0;
    for (int32_t i = 0; i < 3000; i++)
        if (f->g.valid[i])
            sel[nv++] = i;
    CHECK_OK(mp_graphs_select(&g, &f->g, sel, nv));
    float *o1 = mp_malloc(sizeof(float) * (size_t)nv * 2), *o2 = mp_malloc(sizeof(float) * (size_t)nv * 2);
    CHECK(o1 && o2);
    static const int hidden[] = { 300, 37, 64 };
    static const int depth[] = { 3, 2, 1 };
    const char *names[] = { "cuda:fp32", "cuda:bf16" };
    int ok = 1;
    for (int k = 0; ok && k < 2; k++)
        for (int c = 0; ok && c < 3; c++) {
            mp_backend *b = NULL;
            mp_model *m1 = NULL, *m2 = NULL;
            static mp_backend fused, plain;
            mp_model_config cfg = mp_model_config_default();
            cfg.hidden = hidden[c];
            cfg.depth = depth[c];
            cfg.n_tasks = 2;
            if (mp_backend_open(&b, names[k]) != MP_OK) {
                snprintf(why, sizeof why, "%s", mp_error_message());
                ok = 0;
                break;
            }
            fused = *b;
            fused.message_update = NULL;
            plain = *b;
            mp_backend_cuda_plain_ops(&plain);
            if (mp_model_create(&m1, &cfg, &fused, 5) != MP_OK ||
                mp_model_create(&m2, &cfg, &plain, 5) != MP_OK ||
                mp_model_forward(m1, &g, NULL, nv, 0, o1) != MP_OK ||
                mp_model_forward(m2, &g, NULL, nv, 0, o2) != MP_OK) {
                snprintf(why, sizeof why, "%s: %s", names[k], mp_error_message());
                ok = 0;
            } else if (memcmp(o1, o2, sizeof(float) * (size_t)nv * 2) != 0) {
                snprintf(why, sizeof why, "%s hidden %d depth %d: fused and plain forwards "
                         "differ", names[k], hidden[c], depth[c]);
                ok = 0;
            } else if (depth[c] > 1 && mp_model_loss_backward(m1, o1, NULL) != MP_ERR_ARG) {
                snprintf(why, sizeof why, "backward after an inference forward that kept no "
                         "M_0 was not refused");
                ok = 0;
            }
            mp_model_free(m1);
            mp_model_free(m2);
            mp_backend_close(b);
        }
    mp_free(o1);
    mp_free(o2);
    mp_free(sel);
    mp_graphs_free(&g);
    mp_features_free(f);
    CHECK_MSG(ok, "%s", why);
}
