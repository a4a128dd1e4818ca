/*
 * ensemble_predict.c - an ensemble's predictions for featurized molecules
 * (mp_ensemble_predict, ensemble.h): batches of valid molecules packed and
 * run through every member, raw outputs turned into the user's units, the
 * member mean and spread.  One path on every backend: streamed, with two
 * batch slots in flight on a device backend that has the streaming ops, the
 * same code with synchronous copies everywhere else.
 */
#include "run/ensemble.h"

#include "models/heads.h"
#include "models/model_impl.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Outputs                                                                */
/* ===================================================================== */

/* Raw outputs per molecule (every head's) and values per molecule (n_tasks
 * x the head's values per task, heads.h). */
static size_t raw_width(const mp_ensemble *e) { return (size_t)mp_model_n_outputs(&e->cfg); }
static size_t val_width(const mp_ensemble *e)
{
    return e->n_tasks * (size_t)mp_head_n_values(e->cfg.task, e->cfg.n_classes);
}

int mp_ensemble_n_values(const mp_ensemble *e)
{
    return mp_head_n_values(e->cfg.task, e->cfg.n_classes);
}

/* One member's raw outputs for nb molecules into the user's units (the
 * heads of issue 11 through mp_head_predict, the two first as before). */
static void member_values(const mp_ensemble *e, const float *out, double *val, int32_t nb)
{
    size_t t = e->n_tasks;
    if (e->predict_raw) {   /* mp_ensemble_predict_raw: the outputs as they are */
        for (size_t i = 0; i < (size_t)nb * raw_width(e); i++)
            val[i] = out[i];
        return;
    }
    if (e->cfg.task == MP_MODEL_SPECTRAL) {
        mp_head_predict_spectra(e->cfg.spectra_act, (int)t, out, nb, val);
        return;
    }
    if (e->cfg.task != MP_MODEL_REGRESSION && e->cfg.task != MP_MODEL_CLASSIFICATION) {
        int reg = mp_head_is_regression(e->cfg.task);
        mp_head_predict(e->cfg.task, (int)t, e->cfg.n_classes, out, nb,
                        reg ? e->target_scaler.mean : NULL, reg ? e->target_scaler.std : NULL,
                        val);
        return;
    }
    if (e->task == MP_TASK_CLASSIFICATION) {
        for (size_t i = 0; i < (size_t)nb * t; i++)
            val[i] = 1.0 / (1.0 + exp(-(double)out[i]));
    } else {
        mp_scaler_inverse_from_f32(&e->target_scaler, out, val, (size_t)nb);
    }
}

/* Monte Carlo dropout (S passes per member, blocks member-major): the
 * mean over every block, and per member the variance over its passes,
 * averaged over the members (uncertainty.h: mp_unc_dropout). */
static void finish_rows_mc(const mp_ensemble *e, const mp_features *f, const int32_t *mols,
                           int32_t b0, int32_t span, const double *vals, int32_t nb, int members,
                           int S, double *mean, double *std)
{
    size_t t = val_width(e), stride = (size_t)nb * t;
    int32_t j = 0;
    for (int32_t i = 0; i < span; i++) {
        double *mrow = mean + (size_t)(b0 + i) * t;
        double *srow = std ? std + (size_t)(b0 + i) * t : NULL;
        int valid = f->g.valid[mols[b0 + i]];
        for (size_t c = 0; c < t; c++) {
            double mu = 0, var = 0;
            for (int k = 0; valid && k < members; k++) {
                const double *v = vals + (size_t)k * S * stride + (size_t)j * t + c;
                double mk = 0, ss = 0;
                for (int q = 0; q < S; q++)
                    mk += v[(size_t)q * stride];
                mk /= S;
                for (int q = 0; q < S; q++) {
                    double d = v[(size_t)q * stride] - mk;
                    ss += d * d;
                }
                mu += mk;
                var += ss / S;
            }
            mrow[c] = valid ? mu / members : NAN;
            if (srow)
                srow[c] = valid ? sqrt(var / members) : NAN;
        }
        j += valid;
    }
}

/* Rows b0 .. b0+span of mean / std from the members' values of the batch's
 * nb valid molecules (vals: n_used blocks of nb x t); NaN for the invalid
 * ones.  Two passes per value (mean, then squared deviations). */
static void finish_rows(const mp_ensemble *e, const mp_features *f, const int32_t *mols,
                        int32_t b0, int32_t span, const double *vals, int32_t nb, int n_used,
                        double *mean, double *std)
{
    int S = e->mc_samples > 1 ? e->mc_samples : 1;
    if (S > 1) {   /* n_used counts members x passes: the dropout estimator */
        finish_rows_mc(e, f, mols, b0, span, vals, nb, n_used / S, S, mean, std);
        return;
    }
    size_t t = val_width(e);
    int32_t j = 0;
    for (int32_t i = 0; i < span; i++) {
        double *mrow = mean + (size_t)(b0 + i) * t;
        double *srow = std ? std + (size_t)(b0 + i) * t : NULL;
        if (!f->g.valid[mols[b0 + i]]) {
            for (size_t c = 0; c < t; c++) {
                mrow[c] = NAN;
                if (srow)
                    srow[c] = NAN;
            }
            continue;
        }
        for (size_t c = 0; c < t; c++) {
            size_t at = (size_t)j * t + c, stride = (size_t)nb * t;
            double mu = 0, ss = 0;
            for (int k = 0; k < n_used; k++)
                mu += vals[(size_t)k * stride + at];
            mu /= n_used;
            for (int k = 0; k < n_used; k++) {
                double dv = vals[(size_t)k * stride + at] - mu;
                ss += dv * dv;
            }
            mrow[c] = mu;
            if (srow)
                srow[c] = sqrt(ss / n_used);   /* ddof 0, as np.std */
        }
        j++;
    }
}

/* ===================================================================== */
/* Batch slots                                                            */
/* ===================================================================== */

/*
 * A forward as mp_model_forward runs it costs, per batch and member, a
 * host-side select into fresh arrays, eight synchronous uploads from
 * pageable memory, the forward, a full synchronization and a download: a
 * GPU idles while the host packs and copies.  Here two slots alternate:
 * while the device runs the forward of batch j (slot j % 2), the host
 * collects batch j - 1's outputs and packs batch j + 1 straight into the
 * other slot's page-locked buffer, one block holding every array the
 * forward reads, which goes up in one copy on the copy lane; the forward
 * waits for that copy by a fence, and its outputs come back by an
 * asynchronous copy the host waits for only when it collects the slot.
 *
 * The arrays are the ones mp_graphs_select builds and mp_model_forward
 * uploads (same values, same sizes; molecule features in the backend's
 * element type, outputs read back as floats), the ops are the same, so the
 * outputs are bitwise those of mp_model_forward on the same batches
 * (tests/test_predict_stream.c).  Backends without the streaming ops (cpu,
 * ref) run the same code with plain memory and synchronous copies.
 */

#define ALIGN16(x) (((x) + 15) & ~(size_t)15)
#define FENCE_UP(s) (s)          /* slot s's upload done            */
#define FENCE_OUT(s) (2 + (s))   /* slot s's forward and downloads  */
#define FENCE_END 4              /* the copy lane drained           */

typedef struct {
    char    *host;          /* page-locked: packed arrays, then the outputs  */
    char    *dev;           /* device copy of the packed arrays              */
    size_t   pack_cap;      /* bytes of either packed block                  */
    size_t   pack_bytes;    /* bytes used by the current batch               */
    int32_t *mol_edge;      /* host only: what the batch check reads besides */
    int32_t *edge_dst;
    void    *out;           /* in host: n_used blocks of nb x n_tasks (esize) */
    float   *xf, *of;       /* a double backend: features before widening,   *
                             * outputs after narrowing (else NULL)           */
    int32_t *sel;           /* the batch's valid molecules                   */
    void    *hx_atom, *hx_bond; /* in host: the user columns (element type)   */
    mp_dev_batch bt;        /* device pointers into dev                      */
    int32_t  b0, span, nb;
    int      busy;          /* issued, not yet collected                     */
    int      pinned;        /* host is from host_alloc (else mp_malloc)      */
} pslot;

/* The streaming ops, or their synchronous stand-ins where a backend has none.
 * Host buffers: page-locked when the backend can, else (or when locking
 * fails: a container's limit, say) plain memory, which the async copies
 * still accept, only without overlapping the host. */
static void *s_host_alloc(mp_backend *b, size_t n, int *pinned)
{
    void *p = b->host_alloc ? b->host_alloc(b, n) : NULL;
    *pinned = p != NULL;
    return p ? p : mp_malloc(n ? n : 1);
}
static void s_host_free(mp_backend *b, void *p, int pinned)
{
    if (pinned)
        b->host_free(b, p);
    else
        mp_free(p);
}
static mp_status s_upload(mp_backend *b, int lane, void *dst, const void *src, size_t n)
{
    if (!b->upload_async)
        return b->upload(b, dst, src, n);
    b->upload_async(b, lane, dst, src, n);
    return MP_OK;
}
static mp_status s_download(mp_backend *b, int lane, void *dst, const void *src, size_t n)
{
    if (!b->download_async)
        return b->download(b, dst, src, n);
    b->download_async(b, lane, dst, src, n);
    return MP_OK;
}
static void s_record(mp_backend *b, int lane, int f)
{
    if (b->fence_record)
        b->fence_record(b, lane, f);
}
static void s_wait(mp_backend *b, int lane, int f)
{
    if (b->fence_wait)
        b->fence_wait(b, lane, f);
}
static mp_status s_sync(mp_backend *b, int f)
{
    return b->fence_sync ? b->fence_sync(b, f) : b->sync(b);
}

/* The widths of the model's user atom / bond columns (model.h). */
static int cols_atom(const mp_ensemble *e)
{
    return e->cfg.kind == MP_MODEL_DMPNN ? e->cfg.atom_extra_dim + e->cfg.atom_desc_dim : 0;
}
static int cols_bond(const mp_ensemble *e)
{
    return e->cfg.kind == MP_MODEL_DMPNN ? e->cfg.bond_extra_dim : 0;
}

/* Bytes of the packed block for nb molecules, na atoms, ne edges and dim
 * features of es bytes each; with s->host set also points bt (device, at
 * dev) and the host views at the same offsets.  Every array starts on a
 * 16-byte boundary. */
static size_t pack_layout(pslot *s, int32_t nb, int32_t na, int32_t ne, int dim, size_t es,
                          int graphs, mp_graphs *hv, int xa, int xb)
{
    size_t at = 0;
    char *h = s->host, *d = s->dev;
#define PLACE(field, type, count)                                                   \
    do {                                                                           \
        if (h) {                                                                   \
            s->bt.field = (type *)(void *)(d + at);                                \
            hv->field = (type *)(void *)(h + at);                                  \
        }                                                                          \
        at = ALIGN16(at + (size_t)(count) * sizeof(type));                         \
    } while (0)
    if (graphs) {
        PLACE(mol_atom, int32_t, (size_t)nb + 1);
        PLACE(in_start, int32_t, (size_t)na + 1);
        PLACE(edge_src, int32_t, ne);
        PLACE(in_edge, int32_t, ne);
        PLACE(atom_mass, float, na);
        PLACE(atom_hot, int16_t, (size_t)na * MP_ATOM_MAX_HOT);
        PLACE(bond_hot, int8_t, (size_t)(ne / 2) * MP_BOND_MAX_HOT);
        /* the user columns (model.h atom_extra_dim ...): xa per atom, xb per
         * directed edge, in the element type */
        if (h) {
            s->bt.atom_x = xa ? (void *)(d + at) : NULL;
            s->hx_atom = xa ? (void *)(h + at) : NULL;
        }
        at = ALIGN16(at + (size_t)na * (size_t)xa * es);
        if (h) {
            s->bt.bond_x = xb ? (void *)(d + at) : NULL;
            s->hx_bond = xb ? (void *)(h + at) : NULL;
        }
        at = ALIGN16(at + (size_t)ne * (size_t)xb * es);
    }
#undef PLACE
    if (h)
        s->bt.extra = dim ? (void *)(d + at) : NULL;
    at = ALIGN16(at + (size_t)nb * (size_t)dim * es);
    return at;
}

/* Copies and re-bases the molecules sel[0..nb) of g into the host views,
 * as mp_graphs_select does; molecule i's atoms and edges start at
 * hv->mol_atom[i], hv->mol_edge[i] (already filled). */
static void pack_graphs(const mp_graphs *g, const int32_t *sel, int32_t nb, mp_graphs *hv)
{
    int nt = nb >= 512 ? mp_threads_get() : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int32_t i = 0; i < nb; i++) {
        int32_t m = sel[i], A = hv->mol_atom[i], E = hv->mol_edge[i];
        int32_t A0 = g->mol_atom[m], a = g->mol_atom[m + 1] - A0;
        int32_t E0 = g->mol_edge[m], e = g->mol_edge[m + 1] - E0;
        memcpy(hv->atom_hot + (size_t)A * MP_ATOM_MAX_HOT,
               g->atom_hot + (size_t)A0 * MP_ATOM_MAX_HOT,
               (size_t)a * MP_ATOM_MAX_HOT * sizeof(int16_t));
        memcpy(hv->atom_mass + A, g->atom_mass + A0, (size_t)a * sizeof(float));
        memcpy(hv->bond_hot + (size_t)(E / 2) * MP_BOND_MAX_HOT,
               g->bond_hot + (size_t)(E0 / 2) * MP_BOND_MAX_HOT,
               (size_t)(e / 2) * MP_BOND_MAX_HOT);
        for (int32_t k = 0; k < e; k++) {
            hv->edge_src[E + k] = g->edge_src[E0 + k] - A0 + A;
            hv->edge_dst[E + k] = g->edge_dst[E0 + k] - A0 + A;
            hv->in_edge[E + k] = g->in_edge[E0 + k] - E0 + E;
        }
        for (int32_t v = 0; v < a; v++)
            hv->in_start[A + v] = g->in_start[A0 + v] - E0 + E;
    }
}

/* The two slots, kept in e->stream_bufs between calls (predict.c calls once
 * per chunk of input rows: page-locked allocations are slow) and grown when
 * a call needs more. */
typedef struct {
    pslot   sl[2];
    int32_t cap_mols, cap_edges;
    size_t  out_bytes;
} stream_bufs;

void mp_ensemble_predict_release(mp_ensemble *e)
{
    stream_bufs *sb = e->stream_bufs;
    if (!sb)
        return;
    mp_backend *b = e->backend;
    for (int q = 0; q < 2; q++) {
        s_host_free(b, sb->sl[q].host, sb->sl[q].pinned);
        b->free(b, sb->sl[q].dev);
        mp_free(sb->sl[q].sel);
        mp_free(sb->sl[q].mol_edge);
        mp_free(sb->sl[q].edge_dst);
        mp_free(sb->sl[q].xf);
        mp_free(sb->sl[q].of);
    }
    mp_free(sb);
    e->stream_bufs = NULL;
}

/* Allocates slot s's buffers: need bytes packed, out_bytes of outputs. */
static mp_status slot_alloc(mp_ensemble *e, pslot *s, int32_t batch_size, int32_t max_edges,
                            size_t need, size_t out_bytes)
{
    mp_backend *b = e->backend;
    size_t es = b->esize;
    int dim = e->cfg.extra_dim;
    s->pack_cap = need;
    if (!(s->host = s_host_alloc(b, need + out_bytes, &s->pinned)))
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory for the batch buffers (%zu "
                            "bytes per slot)", need + out_bytes);
    s->out = s->host + need;
    s->dev = b->alloc(b, need);
    s->sel = mp_malloc(sizeof(int32_t) * (size_t)batch_size);
    s->mol_edge = mp_malloc(sizeof(int32_t) * ((size_t)batch_size + 1));
    s->edge_dst = mp_malloc(sizeof(int32_t) * ((size_t)max_edges + 1));
    if (es != sizeof(float)) {
        s->xf = mp_malloc(sizeof(float) * ((size_t)batch_size * (size_t)dim + 1));
        s->of = mp_malloc(out_bytes / es * sizeof(float) + 1);
    }
    if (!s->dev || !s->sel || !s->mol_edge || !s->edge_dst ||
        (es != sizeof(float) && (!s->xf || !s->of)))
        return mp_error_set(MP_ERR_NOMEM, "predict: out of memory for the batch buffers (%zu "
                            "bytes per slot)", need);
    return MP_OK;
}

/* Slots for batches of up to batch_size molecules, max_atoms atoms and
 * max_edges edges, with out_bytes of outputs each; none busy. */
static mp_status stream_bufs_get(mp_ensemble *e, int32_t batch_size, int32_t max_atoms,
                                 int32_t max_edges, size_t out_bytes, pslot **out)
{
    int dim = e->cfg.extra_dim, graphs = e->cfg.kind == MP_MODEL_DMPNN;
    pslot probe;
    memset(&probe, 0, sizeof probe);
    size_t need = pack_layout(&probe, batch_size, max_atoms, max_edges, dim, e->backend->esize,
                              graphs, NULL, cols_atom(e), cols_bond(e));
    stream_bufs *sb = e->stream_bufs;
    if (sb && (sb->sl[0].pack_cap < need || sb->out_bytes < out_bytes ||
               sb->cap_mols < batch_size || sb->cap_edges < max_edges)) {
        mp_ensemble_predict_release(e);
        sb = NULL;
    }
    if (!sb) {
        if (!(sb = mp_calloc(1, sizeof *sb)))
            return mp_error_set(MP_ERR_NOMEM, "predict: out of memory");
        e->stream_bufs = sb;
        sb->cap_mols = batch_size;
        sb->cap_edges = max_edges;
        sb->out_bytes = out_bytes;
        for (int q = 0; q < 2; q++) {
            mp_status st = slot_alloc(e, &sb->sl[q], batch_size, max_edges, need, out_bytes);
            if (st) {
                mp_ensemble_predict_release(e);
                return st;
            }
        }
    }
    sb->sl[0].busy = sb->sl[1].busy = 0;
    *out = sb->sl;
    return MP_OK;
}

/* ===================================================================== */
/* Packing, issuing, collecting                                           */
/* ===================================================================== */

/* The user columns of slot s's molecules (the store's, already scaled) into
 * its host block in the element type: a row per atom, the bond's row on
 * both of its edges. */
static mp_status pack_columns(const mp_ensemble *e, const mp_graphs *g, pslot *s,
                              const mp_graphs *hv)
{
    const int xa = cols_atom(e), xb = cols_bond(e), dbl = e->backend->esize == sizeof(double);
    if (g->xa_dim != xa || g->xb_dim != xb)
        return mp_error_set(MP_ERR_ARG, "predict: the model takes %d atom and %d bond columns, "
                            "the molecules carry %d and %d (--atom-descriptors-path, "
                            "--bond-features-path)", xa, xb, (int)g->xa_dim, (int)g->xb_dim);
    for (int32_t i = 0; i < s->nb; i++) {
        int32_t m = s->sel[i], A = hv->mol_atom[i], E = hv->mol_edge[i];
        int32_t A0 = g->mol_atom[m], na = g->mol_atom[m + 1] - A0;
        int32_t E0 = g->mol_edge[m], ne = g->mol_edge[m + 1] - E0;
        for (size_t k = 0; xa && k < (size_t)na * xa; k++) {
            float v = g->atom_x[(size_t)A0 * xa + k];
            if (dbl)
                ((double *)s->hx_atom)[(size_t)A * xa + k] = v;
            else
                ((float *)s->hx_atom)[(size_t)A * xa + k] = v;
        }
        for (int32_t q = 0; xb && q < ne; q++)
            for (int j = 0; j < xb; j++) {
                float v = g->bond_x[((size_t)(E0 + q) / 2) * xb + j];
                if (dbl)
                    ((double *)s->hx_bond)[(size_t)(E + q) * xb + j] = v;
                else
                    ((float *)s->hx_bond)[(size_t)(E + q) * xb + j] = v;
            }
    }
    return MP_OK;
}

/* The graph arrays of slot s's nb selected molecules into the host views,
 * checked as mp_model_forward checks a batch. */
static mp_status pack_graph_views(const mp_ensemble *e, const mp_graphs *g, pslot *s,
                                  mp_graphs *hv)
{
    int32_t nb = s->nb;
    hv->layout = g->layout;
    hv->atom_fdim = g->atom_fdim;
    hv->n_mols = nb;
    hv->n_atoms = s->bt.n_atoms;
    hv->n_edges = s->bt.n_edges;
    hv->mol_edge = s->mol_edge;
    hv->edge_dst = s->edge_dst;
    int32_t A = 0, E = 0;
    hv->mol_atom[0] = hv->mol_edge[0] = 0;
    for (int32_t i = 0; i < nb; i++) {
        int32_t m = s->sel[i];
        A += g->mol_atom[m + 1] - g->mol_atom[m];
        E += g->mol_edge[m + 1] - g->mol_edge[m];
        hv->mol_atom[i + 1] = A;
        hv->mol_edge[i + 1] = E;
    }
    hv->in_start[A] = E;
    pack_graphs(g, s->sel, nb, hv);
    mp_status st = mp_batch_check(hv, e->cfg.atom_fdim);
    if (st == MP_OK && (cols_atom(e) || cols_bond(e)))
        st = pack_columns(e, g, s, hv);
    return st;
}

/* The molecule features of slot s, scaled, in the backend's element type
 * (scaled in double, rounded once to float, then widened: what
 * mp_model_forward uploads). */
static void pack_features(const mp_ensemble *e, const mp_features *f, pslot *s)
{
    size_t es = e->backend->esize, cells = (size_t)s->nb * (size_t)e->cfg.extra_dim;
    void *block = s->host + ((char *)s->bt.extra - s->dev);
    float *x = es == sizeof(float) ? block : s->xf;
    mp_feature_set_fill_scaled(e->features, f, s->sel, s->nb, &e->feature_scaler, x);
    for (size_t i = 0; es != sizeof(float) && i < cells; i++)
        ((double *)block)[i] = x[i];
}

/* Packs slot s's batch (s->b0, s->span set) into its host block: selects
 * the valid molecules, lays out and fills the arrays, checks the graph as
 * mp_model_forward would.  s->nb == 0 (nothing to run) is fine. */
static mp_status pack(const mp_ensemble *e, const mp_features *f, const int32_t *mols, pslot *s)
{
    const mp_graphs *g = &f->g;
    int graphs = e->cfg.kind == MP_MODEL_DMPNN, dim = e->cfg.extra_dim;
    int32_t nb = 0;
    int64_t na = 0, ne = 0;
    for (int32_t i = 0; i < s->span; i++) {
        int32_t m = mols[s->b0 + i];     /* in range: checked on entry */
        if (!g->valid[m])
            continue;
        s->sel[nb++] = m;
        na += g->mol_atom[m + 1] - g->mol_atom[m];
        ne += g->mol_edge[m + 1] - g->mol_edge[m];
    }
    s->nb = nb;
    if (nb == 0)
        return MP_OK;
    if (!graphs)
        na = ne = 0;
    mp_graphs hv;
    memset(&hv, 0, sizeof hv);
    size_t bytes = pack_layout(s, nb, (int32_t)na, (int32_t)ne, dim, e->backend->esize, graphs,
                               &hv, cols_atom(e), cols_bond(e));
    if (na > INT32_MAX || ne > INT32_MAX || bytes > s->pack_cap)
        return mp_error_set(MP_ERR_INTERNAL, "predict: batch of %d molecules (%lld atoms, "
                            "%lld edges) exceeds its reserved %zu bytes", (int)nb,
                            (long long)na, (long long)ne, s->pack_cap);
    s->pack_bytes = bytes;
    s->bt.n_mols = nb;
    s->bt.n_atoms = (int32_t)na;
    s->bt.n_edges = (int32_t)ne;
    s->bt.edge_dst = NULL;
    s->bt.target = NULL;
    s->bt.mask = NULL;
    if (graphs) {
        mp_status st = pack_graph_views(e, g, s, &hv);
        if (st)
            return st;
    }
    if (dim)
        pack_features(e, f, s);
    return MP_OK;
}

/* The dropout stream's seed for pass q of member k on the batch whose
 * first row is b0 (relative to the call; mc_row0 makes it absolute):
 * splitmix64 over the four. */
static uint64_t mc_key(const mp_ensemble *e, int k, int q, int32_t b0)
{
    uint64_t parts[3] = { (uint64_t)k, (uint64_t)q, (uint64_t)(e->mc_row0 + b0) };
    uint64_t z = e->mc_seed;
    for (int i = 0; i < 3; i++) {
        z += 0x9e3779b97f4a7c15ull ^ parts[i];
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
    }
    return z;
}

mp_status mp_ensemble_set_mc_dropout(mp_ensemble *e, int samples, double p, uint64_t seed,
                                     int64_t row0)
{
    if (samples != 0 && (samples < 2 || samples > 10000))
        return mp_error_set(MP_ERR_ARG, "dropout samples = %d (2 to 10000)", samples);
    if (!(p >= 0 && p < 1))
        return mp_error_set(MP_ERR_ARG, "dropout probability %g (must be in [0, 1))", p);
    if (e->mc_samples != samples)
        mp_ensemble_predict_release(e);   /* the output blocks change size */
    e->mc_samples = samples;
    e->mc_p = p;
    e->mc_seed = seed;
    e->mc_row0 = row0;
    return MP_OK;
}

/* Queues slot s's batch: one upload on the copy lane, then on the compute
 * lane (after that upload) each member's forward and the download of its
 * outputs. */
static mp_status issue(mp_ensemble *e, pslot *s, int slot, int lo, int hi)
{
    mp_backend *b = e->backend;
    size_t t = raw_width(e), es = b->esize;
    if (s->nb == 0)
        return MP_OK;
    mp_status st = s_upload(b, 1, s->dev, s->host, s->pack_bytes);
    if (st)
        return st;
    s_record(b, 1, FENCE_UP(slot));
    s_wait(b, 0, FENCE_UP(slot));
    int S = e->mc_samples > 1 ? e->mc_samples : 1;
    for (int k = lo; k < hi; k++) {
        mp_model *m = e->members[k];
        for (int q = 0; q < S; q++) {
            size_t block = (size_t)(k - lo) * S + q;
            st = S > 1 ? mp_model_forward_dev_dropout(m, &s->bt, e->mc_p,
                                                      mc_key(e, k, q, s->b0))
                       : mp_model_forward_dev(m, &s->bt);
            if (st || (st = s_download(b, 0, (char *)s->out + block * (size_t)s->nb * t * es,
                                       mp_model_block_ptr(m, MP_BLOCK_OUTPUT),
                                       (size_t)s->nb * t * es)))
                return st;
        }
    }
    s_record(b, 0, FENCE_OUT(slot));
    return MP_OK;
}

/* Waits for slot s's outputs and writes its rows of mean / std. */
static mp_status collect(mp_ensemble *e, const mp_features *f, const int32_t *mols, pslot *s,
                         int slot, int n_used, double *vals, double *mean, double *std,
                         mp_predict_stream_stats *stats)
{
    size_t cells = (size_t)s->nb * raw_width(e), vcells = (size_t)s->nb * val_width(e);
    s->busy = 0;
    if (s->nb > 0) {
        double t0 = mp_time_now();
        mp_status st = s_sync(e->backend, FENCE_OUT(slot));
        if (stats)
            stats->wait_s += mp_time_now() - t0;
        if (st)
            return st;
        const float *out = s->out;
        if (s->of) {   /* a double backend: read back as floats, as mp_model_forward does */
            for (size_t i = 0; i < (size_t)n_used * cells; i++)
                s->of[i] = (float)((const double *)s->out)[i];
            out = s->of;
        }
        for (int k = 0; k < n_used; k++)
            member_values(e, out + (size_t)k * cells, vals + (size_t)k * vcells, s->nb);
    }
    finish_rows(e, f, mols, s->b0, s->span, vals, s->nb, n_used, mean, std);
    return MP_OK;
}

/* ===================================================================== */
/* The call                                                               */
/* ===================================================================== */

/* Refuses features that do not fit the ensemble and out-of-range indices;
 * the most atoms and edges any of the call's batches holds (they are
 * consecutive runs of mols; invalid molecules count 0). */
static mp_status check_batches(const mp_ensemble *e, const mp_features *f, const int32_t *mols,
                               int32_t n, int32_t batch_size, int32_t *max_atoms,
                               int32_t *max_edges)
{
    mp_status st = mp_feature_set_check(e->features, f, e->n_desc, e->n_file);
    if (st)
        return st;
    for (int32_t i = 0; i < n; i++)
        if (mols[i] < 0 || mols[i] >= f->g.n_mols)
            return mp_error_set(MP_ERR_ARG, "predict: molecule %d out of range (store of %d)",
                                (int)mols[i], (int)f->g.n_mols);
    int64_t ma = 0, me = 0;
    for (int32_t b0 = 0; e->cfg.kind == MP_MODEL_DMPNN && b0 < n; b0 += batch_size) {
        int64_t na = 0, ne = 0;
        for (int32_t i = b0; i < n && i < b0 + batch_size; i++) {
            na += f->g.mol_atom[mols[i] + 1] - f->g.mol_atom[mols[i]];
            ne += f->g.mol_edge[mols[i] + 1] - f->g.mol_edge[mols[i]];
        }
        ma = na > ma ? na : ma;
        me = ne > me ? ne : me;
    }
    if (ma > INT32_MAX || me > INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "predict: a batch of %d molecules holds %lld atoms and "
                            "%lld edges (at most %d each): use smaller batches",
                            (int)batch_size, (long long)ma, (long long)me, (int)INT32_MAX);
    *max_atoms = (int32_t)ma;
    *max_edges = (int32_t)me;
    return MP_OK;
}

/* The batches of mols through the two slots sl, members lo..hi. */
static mp_status run_batches(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                             int32_t n, int lo, int hi, int S, int32_t batch_size, pslot *sl,
                             double *vals, double *mean, double *std,
                             mp_predict_stream_stats *stats)
{
    int n_used = (hi - lo) * S, j = 0;   /* output blocks: members x passes */
    mp_status st;
    for (int32_t b0 = 0; b0 < n; b0 += sl[j & 1].span, j++) {
        pslot *s = &sl[j & 1];
        /* the slot's last batch (j - 2) must be done before it is refilled */
        if (s->busy && (st = collect(e, f, mols, s, j & 1, n_used, vals, mean, std, stats)))
            return st;
        double t0 = mp_time_now();
        s->b0 = b0;
        s->span = n - b0 < batch_size ? n - b0 : batch_size;
        if ((st = pack(e, f, mols, s)))
            return st;
        if (stats) {
            stats->pack_s += mp_time_now() - t0;
            stats->batches++;
            stats->upload_bytes += s->nb ? (double)s->pack_bytes : 0;
        }
        if ((st = issue(e, s, j & 1, lo, hi)))
            return st;
        s->busy = 1;
    }
    /* the older slot first (either order gives the same rows) */
    for (int q = 0; q < 2; q++) {
        pslot *s = &sl[(j + q) & 1];
        if (s->busy && (st = collect(e, f, mols, s, (j + q) & 1, n_used, vals, mean, std, stats)))
            return st;
    }
    return MP_OK;
}

mp_status mp_ensemble_predict(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                              int32_t n, int first, int count, int32_t batch_size,
                              double *mean, double *std)
{
    return mp_ensemble_predict_stream(e, f, mols, n, first, count, batch_size, mean, std, NULL);
}

/* The call behind both: every value of every task ([n x val_width]). */
static mp_status predict_values(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                int32_t n, int first, int count, int32_t batch_size,
                                double *mean, double *std, mp_predict_stream_stats *stats)
{
    mp_backend *b = e->backend;
    size_t t = val_width(e), t_raw = raw_width(e);
    int lo = first, hi = count > 0 ? first + count : e->n_members;
    int n_used = hi - lo;
    double t_start = mp_time_now();
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (lo < 0 || n_used < 1 || hi > e->n_members)
        return mp_error_set(MP_ERR_ARG, "predict: members %d..%d of an ensemble of %d", lo,
                            hi - 1, e->n_members);
    if (batch_size < 1)
        batch_size = 1;
    if (n > 0 && batch_size > n)
        batch_size = n;
    int32_t max_atoms = 0, max_edges = 0;
    mp_status st = check_batches(e, f, mols, n, batch_size, &max_atoms, &max_edges);
    if (st || n <= 0)
        return st;
    int S = e->mc_samples > 1 ? e->mc_samples : 1;
    size_t cells = (size_t)n_used * (size_t)S * (size_t)batch_size * t;
    size_t raw_cells = (size_t)n_used * (size_t)S * (size_t)batch_size * t_raw;
    double *vals = mp_malloc(sizeof(double) * cells);
    pslot *sl = NULL;
    if (!vals) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory predicting %d molecules", n);
        goto done;
    }
    for (int k = lo; k < hi; k++)
        if ((st = mp_model_reserve(e->members[k], batch_size, max_atoms, max_edges)))
            goto done;
    if ((st = stream_bufs_get(e, batch_size, max_atoms, max_edges, b->esize * raw_cells, &sl)))
        goto done;
    st = run_batches(e, f, mols, n, lo, hi, S, batch_size, sl, vals, mean, std, stats);
done:
    /* nothing may still read or write the buffers when they are freed */
    s_record(b, 1, FENCE_END);
    mp_status st_copy = s_sync(b, FENCE_END), st_run = b->sync(b);
    if (st == MP_OK)
        st = st_copy != MP_OK ? st_copy : st_run;
    if (st != MP_OK)
        mp_ensemble_predict_release(e);   /* after a failure, start afresh next time */
    mp_free(vals);
    if (stats)
        stats->total_s = mp_time_now() - t_start;
    return st;
}

mp_status mp_ensemble_predict_values(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                     int32_t n, int first, int count, int32_t batch_size,
                                     double *vals, double *std)
{
    return predict_values(e, f, mols, n, first, count, batch_size, vals, std, NULL);
}

mp_status mp_ensemble_predict_raw(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                  int32_t n, int member, int32_t batch_size, double *raw)
{
    if (raw_width(e) != val_width(e))
        return mp_error_set(MP_ERR_ARG, "predict: a %s head has %zu outputs per molecule and "
                            "%zu values: no raw prediction", mp_model_task_name(e->cfg.task),
                            raw_width(e), val_width(e));
    e->predict_raw = 1;
    mp_status st = predict_values(e, f, mols, n, member, 1, batch_size, raw, NULL, NULL);
    e->predict_raw = 0;
    return st;
}

mp_status mp_ensemble_predict_stream(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                     int32_t n, int first, int count, int32_t batch_size,
                                     double *mean, double *std, mp_predict_stream_stats *stats)
{
    const size_t V = (size_t)mp_ensemble_n_values(e), T = e->n_tasks;
    if (V == 1)
        return predict_values(e, f, mols, n, first, count, batch_size, mean, std, stats);
    /* value 0 of each task: the point prediction */
    size_t cells = (size_t)(n > 0 ? n : 1) * T * V;
    double *mv = mp_malloc(sizeof(double) * cells), *sv = std ? mp_malloc(sizeof(double) * cells)
                                                             : NULL;
    if (!mv || (std && !sv)) {
        mp_free(mv);
        mp_free(sv);
        return mp_error_set(MP_ERR_NOMEM, "out of memory predicting %d molecules", n);
    }
    mp_status st = predict_values(e, f, mols, n, first, count, batch_size, mv, sv, stats);
    for (size_t i = 0; st == MP_OK && n > 0 && i < (size_t)n * T; i++) {
        mean[i] = mv[i * V];
        if (std)
            std[i] = sv[i * V];
    }
    mp_free(mv);
    mp_free(sv);
    return st;
}
