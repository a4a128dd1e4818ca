/*
 * ensemble.c - a set of trained models plus what turns their raw outputs into
 * predictions in the user's units (scalers, task names), and the model file.
 */
#include "run/ensemble.h"

#include "models/model_impl.h"
#include "run/modelfile.h"

#include <math.h>
#include <string.h>

/* ===================================================================== */
/* Molecule feature sets                                                  */
/* ===================================================================== */

static const struct {
    const char *name;
    unsigned    bit;
} feature_names[] = {
    { "morgan", MP_FEAT_MORGAN },
    { "morgan-count", MP_FEAT_MORGAN_COUNT },
    { "rdkit2d", MP_FEAT_RDKIT2D },
};
#define N_FEATURE_NAMES (sizeof feature_names / sizeof feature_names[0])

mp_status mp_feature_set_parse(const char *s, unsigned *mask)
{
    *mask = 0;
    if (!s || !*s || !strcmp(s, "none"))
        return MP_OK;
    const char *p = s;
    while (*p) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        size_t i;
        for (i = 0; i < N_FEATURE_NAMES; i++)
            if (strlen(feature_names[i].name) == len && !strncmp(p, feature_names[i].name, len))
                break;
        if (i == N_FEATURE_NAMES)
            return mp_error_set(MP_ERR_ARG, "unknown feature set '%.*s' in '%s' "
                                "(known: morgan, morgan-count, rdkit2d)", (int)len, p, s);
        *mask |= feature_names[i].bit;
        p += len;
        if (*p == ',')
            p++;
    }
    return MP_OK;
}

void mp_feature_set_name(unsigned mask, char *buf, size_t n)
{
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < N_FEATURE_NAMES; i++)
        if (mask & feature_names[i].bit) {
            int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", feature_names[i].name);
            if (w < 0 || (size_t)w >= n - used)
                return;
            used += (size_t)w;
        }
    if (!used)
        snprintf(buf, n, "none");
}

int mp_feature_set_dim(unsigned mask, int n_desc)
{
    return ((mask & MP_FEAT_MORGAN) ? MP_MORGAN_BITS : 0) +
           ((mask & MP_FEAT_MORGAN_COUNT) ? MP_MORGAN_BITS : 0) +
           ((mask & MP_FEAT_RDKIT2D) ? n_desc : 0);
}

void mp_feature_set_fill(unsigned mask, const mp_features *f, const int32_t *mols, int32_t n,
                         float *out)
{
    int dim = mp_feature_set_dim(mask, f->n_desc);
    for (int32_t i = 0; i < n; i++) {
        int32_t m = mols[i];
        float *row = out + (size_t)i * (size_t)dim;
        if (!f->g.valid[m]) {
            for (int j = 0; j < dim; j++)
                row[j] = NAN;
            continue;
        }
        if (mask & MP_FEAT_MORGAN) {
            mp_features_morgan_dense(f, m, 0, row);
            row += MP_MORGAN_BITS;
        }
        if (mask & MP_FEAT_MORGAN_COUNT) {
            mp_features_morgan_dense(f, m, 1, row);
            row += MP_MORGAN_BITS;
        }
        if (mask & MP_FEAT_RDKIT2D)
            for (int j = 0; j < f->n_desc; j++)
                row[j] = (float)f->desc[(size_t)m * (size_t)f->n_desc + (size_t)j];
    }
}

/* ===================================================================== */
/* Life cycle                                                             */
/* ===================================================================== */

mp_status mp_ensemble_create(mp_ensemble **out, const mp_model_config *cfg, int n_members,
                             uint64_t seed, const char *backend_name)
{
    *out = NULL;
    if (n_members < 1)
        return mp_error_set(MP_ERR_ARG, "an ensemble needs at least one member");
    mp_ensemble *e = mp_calloc(1, sizeof *e);
    if (!e)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    e->cfg = *cfg;
    e->layout = MP_ATOM_V1;
    mp_status st = mp_backend_open(&e->backend, backend_name ? backend_name : "cpu");
    if (st) {
        mp_free(e);
        return st;
    }
    e->members = mp_calloc((size_t)n_members, sizeof(mp_model *));
    if (!e->members) {
        mp_ensemble_free(e);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    e->n_members = n_members;
    for (int k = 0; k < n_members; k++)
        if ((st = mp_model_create(&e->members[k], cfg, e->backend, seed + (uint64_t)k))) {
            mp_ensemble_free(e);
            return st;
        }
    *out = e;
    return MP_OK;
}

static void stream_bufs_free(mp_ensemble *e);

void mp_ensemble_free(mp_ensemble *e)
{
    if (!e)
        return;
    stream_bufs_free(e);
    if (e->members)
        for (int k = 0; k < e->n_members; k++)
            mp_model_free(e->members[k]);
    mp_free(e->members);
    if (e->task_names)
        for (size_t t = 0; t < e->n_tasks; t++)
            mp_free(e->task_names[t]);
    mp_free(e->task_names);
    mp_free(e->smiles_name);
    mp_scaler_free(&e->target_scaler);
    mp_scaler_free(&e->feature_scaler);
    if (e->backend)
        mp_backend_close(e->backend);
    mp_free(e);
}

mp_featurize_opts mp_ensemble_featurize_opts(const mp_ensemble *e)
{
    mp_featurize_opts o;
    memset(&o, 0, sizeof o);
    o.layout = e->layout;
    o.morgan = (e->features & (MP_FEAT_MORGAN | MP_FEAT_MORGAN_COUNT)) != 0;
    o.descriptors = (e->features & MP_FEAT_RDKIT2D) != 0;
    return o;
}

/* ===================================================================== */
/* Prediction                                                             */
/* ===================================================================== */

/* One member's raw outputs for nb molecules into the user's units. */
static void member_values(const mp_ensemble *e, const float *out, double *val, int32_t nb)
{
    size_t t = e->n_tasks;
    if (e->task == MP_TASK_CLASSIFICATION) {
        for (size_t i = 0; i < (size_t)nb * t; i++)
            val[i] = 1.0 / (1.0 + exp(-(double)out[i]));
    } else {
        mp_scaler_inverse_from_f32(&e->target_scaler, out, val, (size_t)nb);
    }
}

/* Rows b0 .. b0+span of mean / std from the members' values of the batch's
 * nb valid molecules (vals: n_used blocks of nb x t); NaN for the invalid
 * ones.  Two passes per value (mean, then squared deviations). */
static void finish_rows(const mp_ensemble *e, const mp_features *f, const int32_t *mols,
                        int32_t b0, int32_t span, const double *vals, int32_t nb, int n_used,
                        double *mean, double *std)
{
    size_t t = e->n_tasks;
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

mp_status mp_ensemble_predict(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                              int32_t n, int first, int count, int32_t batch_size,
                              double *mean, double *std)
{
    const mp_backend *b = e->backend;
    if (!b->host_memory && b->upload_async && b->dtype == MP_F32)
        return mp_ensemble_predict_stream(e, f, mols, n, first, count, batch_size, mean, std,
                                          NULL);
    return mp_ensemble_predict_simple(e, f, mols, n, first, count, batch_size, mean, std);
}

mp_status mp_ensemble_predict_simple(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                     int32_t n, int first, int count, int32_t batch_size,
                                     double *mean, double *std)
{
    size_t t = e->n_tasks;
    int lo = first, hi = count > 0 ? first + count : e->n_members;
    int n_used = hi - lo;
    int dim = e->cfg.extra_dim;
    if (batch_size < 1)
        batch_size = 1;
    if (e->features && f->n_desc != e->n_desc && (e->features & MP_FEAT_RDKIT2D))
        return mp_error_set(MP_ERR_FORMAT, "the model was trained on %d descriptors, these "
                            "features have %d", e->n_desc, f->n_desc);

    int32_t *sel = mp_malloc(sizeof(int32_t) * (size_t)batch_size);
    float *extra = dim ? mp_malloc(sizeof(float) * (size_t)batch_size * (size_t)dim) : NULL;
    float *out = mp_malloc(sizeof(float) * (size_t)batch_size * t);
    /* Every member's predictions for the batch, kept so the spread is
     * computed in two passes (mean, then squared deviations). */
    double *vals = mp_malloc(sizeof(double) * (size_t)n_used * (size_t)batch_size * t);
    mp_graphs batch;
    memset(&batch, 0, sizeof batch);
    mp_status st = MP_OK;
    if (!sel || (dim && !extra) || !out || !vals) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory predicting %d molecules", n);
        goto done;
    }

    for (int32_t b0 = 0; b0 < n; b0 += batch_size) {
        /* Only valid molecules go through the models; invalid ones read NaN. */
        int32_t nb = 0, span = n - b0 < batch_size ? n - b0 : batch_size;
        for (int32_t i = 0; i < span; i++)
            if (f->g.valid[mols[b0 + i]])
                sel[nb++] = mols[b0 + i];
        if (nb > 0) {
            const mp_graphs *gb = NULL;
            if (e->cfg.kind == MP_MODEL_DMPNN) {
                if ((st = mp_graphs_select(&batch, &f->g, sel, nb)))
                    goto done;
                gb = &batch;
            }
            if (extra) {
                mp_feature_set_fill(e->features, f, sel, nb, extra);
                mp_scaler_transform_f32(&e->feature_scaler, extra, (size_t)nb);
            }
            for (int k = lo; k < hi; k++) {
                if ((st = mp_model_forward(e->members[k], gb, extra, nb, 0, out)))
                    goto done;
                member_values(e, out, vals + (size_t)(k - lo) * (size_t)nb * t, nb);
            }
        }
        finish_rows(e, f, mols, b0, span, vals, nb, n_used, mean, std);
    }
done:
    mp_graphs_free(&batch);
    mp_free(sel);
    mp_free(extra);
    mp_free(out);
    mp_free(vals);
    return st;
}

/* ===================================================================== */
/* Prediction, streamed (device backends)                                 */
/* ===================================================================== */

/*
 * The simple path above costs, per batch and member, a host-side select
 * into fresh arrays, eight synchronous uploads from pageable memory, the
 * forward, a full synchronization and a download: the GPU idles while the
 * host packs and copies.  Here two slots alternate: while the device runs
 * the forward of batch j (slot j % 2), the host collects batch j - 1's
 * outputs and packs batch j + 1 straight into the other slot's page-locked
 * buffer, one block holding every array the forward reads, which goes up in
 * one copy on the copy lane; the forward waits for that copy by a fence,
 * and its outputs come back by an asynchronous copy the host waits for only
 * when it collects the slot.
 *
 * The arrays are the ones mp_graphs_select builds and mp_model_forward
 * uploads (same values, same sizes), the ops are the same, so the outputs
 * are bitwise those of the simple path.  Backends without the streaming ops
 * (cpu, ref) run the same code with plain memory and synchronous copies
 * (that is how the tests compare the two paths without a GPU).
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
    float   *out;           /* in host: n_used blocks of nb x n_tasks        */
    int32_t *sel;           /* the batch's valid molecules                   */
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

/* Bytes of the packed block for nb molecules, na atoms, ne edges; with
 * base != NULL also points bt (device, at dev) and the host views at the
 * same offsets.  Every array starts on a 16-byte boundary. */
static size_t pack_layout(pslot *s, int32_t nb, int32_t na, int32_t ne, int dim, int graphs,
                          mp_graphs *hv)
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
    }
#undef PLACE
    if (h)
        s->bt.extra = dim ? (void *)(d + at) : NULL;
    at = ALIGN16(at + (size_t)nb * (size_t)dim * sizeof(float));
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

static void stream_bufs_free(mp_ensemble *e)
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
    }
    mp_free(sb);
    e->stream_bufs = NULL;
}

/* Slots for batches of up to batch_size molecules, max_atoms atoms and
 * max_edges edges, with out_bytes of outputs each; none busy. */
static mp_status stream_bufs_get(mp_ensemble *e, int32_t batch_size, int32_t max_atoms,
                                 int32_t max_edges, size_t out_bytes, pslot **out)
{
    mp_backend *b = e->backend;
    int dim = e->cfg.extra_dim, graphs = e->cfg.kind == MP_MODEL_DMPNN;
    pslot probe;
    memset(&probe, 0, sizeof probe);
    size_t need = pack_layout(&probe, batch_size, max_atoms, max_edges, dim, graphs, NULL);
    stream_bufs *sb = e->stream_bufs;
    if (sb && (sb->sl[0].pack_cap < need || sb->out_bytes < out_bytes ||
               sb->cap_mols < batch_size || sb->cap_edges < max_edges)) {
        stream_bufs_free(e);
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
            pslot *s = &sb->sl[q];
            s->pack_cap = need;
            if (!(s->host = s_host_alloc(b, need + out_bytes, &s->pinned))) {
                stream_bufs_free(e);
                return mp_error_set(MP_ERR_NOMEM, "predict: out of memory for the batch "
                                    "buffers (%zu bytes per slot)", need + out_bytes);
            }
            s->out = (float *)(void *)(s->host + need);
            s->dev = b->alloc(b, need);
            s->sel = mp_malloc(sizeof(int32_t) * (size_t)batch_size);
            s->mol_edge = mp_malloc(sizeof(int32_t) * ((size_t)batch_size + 1));
            s->edge_dst = mp_malloc(sizeof(int32_t) * ((size_t)max_edges + 1));
            if (!s->dev || !s->sel || !s->mol_edge || !s->edge_dst) {
                stream_bufs_free(e);
                return mp_error_set(MP_ERR_NOMEM, "predict: out of memory for the batch "
                                    "buffers (%zu bytes per slot)", need);
            }
        }
    }
    sb->sl[0].busy = sb->sl[1].busy = 0;
    *out = sb->sl;
    return MP_OK;
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
    size_t bytes = pack_layout(s, nb, (int32_t)na, (int32_t)ne, dim, graphs, &hv);
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
        hv.layout = g->layout;
        hv.atom_fdim = g->atom_fdim;
        hv.n_mols = nb;
        hv.n_atoms = (int32_t)na;
        hv.n_edges = (int32_t)ne;
        hv.mol_edge = s->mol_edge;
        hv.edge_dst = s->edge_dst;
        int32_t A = 0, E = 0;
        hv.mol_atom[0] = hv.mol_edge[0] = 0;
        for (int32_t i = 0; i < nb; i++) {
            int32_t m = s->sel[i];
            A += g->mol_atom[m + 1] - g->mol_atom[m];
            E += g->mol_edge[m + 1] - g->mol_edge[m];
            hv.mol_atom[i + 1] = A;
            hv.mol_edge[i + 1] = E;
        }
        hv.in_start[A] = E;
        pack_graphs(g, s->sel, nb, &hv);
        mp_status st = mp_batch_check(&hv, e->cfg.atom_fdim);
        if (st)
            return st;
    }
    if (dim) {
        float *extra = (float *)(void *)(s->host + ((char *)s->bt.extra - s->dev));
        mp_feature_set_fill(e->features, f, s->sel, nb, extra);
        mp_scaler_transform_f32(&e->feature_scaler, extra, (size_t)nb);
    }
    return MP_OK;
}

/* Queues slot s's batch: one upload on the copy lane, then on the compute
 * lane (after that upload) each member's forward and the download of its
 * outputs. */
static mp_status issue(mp_ensemble *e, pslot *s, int slot, int lo, int hi)
{
    mp_backend *b = e->backend;
    size_t t = e->n_tasks;
    if (s->nb == 0)
        return MP_OK;
    mp_status st = s_upload(b, 1, s->dev, s->host, s->pack_bytes);
    if (st)
        return st;
    s_record(b, 1, FENCE_UP(slot));
    s_wait(b, 0, FENCE_UP(slot));
    for (int k = lo; k < hi; k++) {
        mp_model *m = e->members[k];
        if ((st = mp_model_forward_dev(m, &s->bt)) ||
            (st = s_download(b, 0, s->out + (size_t)(k - lo) * (size_t)s->nb * t,
                             mp_model_block_ptr(m, MP_BLOCK_OUTPUT),
                             (size_t)s->nb * t * sizeof(float))))
            return st;
    }
    s_record(b, 0, FENCE_OUT(slot));
    return MP_OK;
}

/* Waits for slot s's outputs and writes its rows of mean / std. */
static mp_status collect(mp_ensemble *e, const mp_features *f, const int32_t *mols, pslot *s,
                         int slot, int n_used, double *vals, double *mean, double *std,
                         mp_predict_stream_stats *stats)
{
    size_t t = e->n_tasks;
    s->busy = 0;
    if (s->nb > 0) {
        double t0 = mp_time_now();
        mp_status st = s_sync(e->backend, FENCE_OUT(slot));
        if (stats)
            stats->wait_s += mp_time_now() - t0;
        if (st)
            return st;
        for (int k = 0; k < n_used; k++)
            member_values(e, s->out + (size_t)k * (size_t)s->nb * t,
                          vals + (size_t)k * (size_t)s->nb * t, s->nb);
    }
    finish_rows(e, f, mols, s->b0, s->span, vals, s->nb, n_used, mean, std);
    return MP_OK;
}

mp_status mp_ensemble_predict_stream(mp_ensemble *e, const mp_features *f, const int32_t *mols,
                                     int32_t n, int first, int count, int32_t batch_size,
                                     double *mean, double *std, mp_predict_stream_stats *stats)
{
    mp_backend *b = e->backend;
    size_t t = e->n_tasks;
    int lo = first, hi = count > 0 ? first + count : e->n_members;
    int n_used = hi - lo;
    int graphs = e->cfg.kind == MP_MODEL_DMPNN;
    double t_start = mp_time_now();
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (b->dtype != MP_F32)   /* the packed block holds floats */
        return mp_ensemble_predict_simple(e, f, mols, n, first, count, batch_size, mean, std);
    if (batch_size < 1)
        batch_size = 1;
    if (n > 0 && batch_size > n)
        batch_size = n;
    if (e->features && f->n_desc != e->n_desc && (e->features & MP_FEAT_RDKIT2D))
        return mp_error_set(MP_ERR_FORMAT, "the model was trained on %d descriptors, these "
                            "features have %d", e->n_desc, f->n_desc);
    if (n <= 0)
        return MP_OK;
    for (int32_t i = 0; i < n; i++)
        if (mols[i] < 0 || mols[i] >= f->g.n_mols)
            return mp_error_set(MP_ERR_ARG, "predict: molecule %d out of range (store of %d)",
                                (int)mols[i], (int)f->g.n_mols);

    /* Capacities: the largest of the batches this call will form (they are
     * consecutive runs of mols; invalid molecules count 0). */
    int64_t max_atoms = 0, max_edges = 0;
    for (int32_t b0 = 0; graphs && b0 < n; b0 += batch_size) {
        int64_t na = 0, ne = 0;
        for (int32_t i = b0; i < n && i < b0 + batch_size; i++) {
            na += f->g.mol_atom[mols[i] + 1] - f->g.mol_atom[mols[i]];
            ne += f->g.mol_edge[mols[i] + 1] - f->g.mol_edge[mols[i]];
        }
        max_atoms = na > max_atoms ? na : max_atoms;
        max_edges = ne > max_edges ? ne : max_edges;
    }
    if (max_atoms > INT32_MAX || max_edges > INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "predict: a batch of %d molecules holds %lld atoms and "
                            "%lld edges (at most %d each): use smaller batches",
                            (int)batch_size, (long long)max_atoms, (long long)max_edges,
                            (int)INT32_MAX);
    double *vals = mp_malloc(sizeof(double) * (size_t)n_used * (size_t)batch_size * t);
    mp_status st = MP_OK;
    pslot *sl = NULL;
    if (!vals) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory predicting %d molecules", n);
        goto done;
    }
    for (int k = lo; k < hi; k++)
        if ((st = mp_model_reserve(e->members[k], batch_size, (int32_t)max_atoms,
                                   (int32_t)max_edges)))
            goto done;
    if ((st = stream_bufs_get(e, batch_size, (int32_t)max_atoms, (int32_t)max_edges,
                              sizeof(float) * (size_t)n_used * (size_t)batch_size * t, &sl)))
        goto done;

    int j = 0;
    for (int32_t b0 = 0; b0 < n; b0 += sl[j & 1].span, j++) {
        pslot *s = &sl[j & 1];
        /* the slot's last batch (j - 2) must be done before it is refilled */
        if (s->busy && (st = collect(e, f, mols, s, j & 1, n_used, vals, mean, std, stats)))
            goto done;
        double t0 = mp_time_now();
        s->b0 = b0;
        s->span = n - b0 < batch_size ? n - b0 : batch_size;
        if ((st = pack(e, f, mols, s)))
            goto done;
        if (stats) {
            stats->pack_s += mp_time_now() - t0;
            stats->batches++;
            stats->upload_bytes += s->nb ? (double)s->pack_bytes : 0;
        }
        if ((st = issue(e, s, j & 1, lo, hi)))
            goto done;
        s->busy = 1;
    }
    /* the older slot first (either order gives the same rows) */
    for (int q = 0; q < 2; q++) {
        pslot *s = &sl[(j + q) & 1];
        if (s->busy && (st = collect(e, f, mols, s, (j + q) & 1, n_used, vals, mean, std, stats)))
            goto done;
    }
done:
    /* nothing may still read or write the buffers when they are freed */
    s_record(b, 1, FENCE_END);
    mp_status st_copy = s_sync(b, FENCE_END), st_run = b->sync(b);
    if (st == MP_OK)
        st = st_copy != MP_OK ? st_copy : st_run;
    if (st != MP_OK)
        stream_bufs_free(e);       /* after a failure, start afresh next time */
    mp_free(vals);
    if (stats)
        stats->total_s = mp_time_now() - t_start;
    return st;
}

/* ===================================================================== */
/* Model file                                                             */
/* ===================================================================== */

static const char *agg_name(mp_aggregation a)
{
    return a == MP_AGG_SUM ? "sum" : a == MP_AGG_NORM ? "norm" : "mean";
}

mp_status mp_ensemble_save(const mp_ensemble *e, const char *path)
{
    const mp_model_config *c = &e->cfg;
    mp_kv *kv = NULL;
    mp_tensor *tensors = NULL;
    float *params = NULL;
    int n_views = 0;
    const mp_param_view *views = mp_model_views(e->members[0], &n_views);
    size_t n_params = mp_model_n_params(e->members[0]);
    char feats[128];
    mp_feature_set_name(e->features, feats, sizeof feats);

    mp_status st = mp_kv_new(&kv);
    if (st)
        return st;
    if ((st = mp_kv_set(kv, "format", "molprop-model")) ||
        (st = mp_kv_set(kv, "molprop_version", MP_VERSION)) ||
        (st = mp_kv_set(kv, "rdkit_version", mp_rdkit_version())) ||
        (st = mp_kv_set(kv, "model", c->kind == MP_MODEL_DMPNN ? "dmpnn" : "ffn")) ||
        (st = mp_kv_set(kv, "task_type", mp_task_type_name(e->task))) ||
        (st = mp_kv_set_int(kv, "n_tasks", (long long)e->n_tasks)) ||
        (st = mp_kv_set_strs(kv, "tasks", (const char *const *)e->task_names, e->n_tasks)) ||
        (st = mp_kv_set(kv, "smiles_column", e->smiles_name ? e->smiles_name : "smiles")) ||
        (st = mp_kv_set(kv, "atom_layout", mp_atom_layout_name(e->layout))) ||
        (st = mp_kv_set_int(kv, "atom_fdim", c->atom_fdim)) ||
        (st = mp_kv_set(kv, "features", feats)) ||
        (st = mp_kv_set_int(kv, "n_desc", e->n_desc)) ||
        (st = mp_kv_set_int(kv, "extra_dim", c->extra_dim)) ||
        (st = mp_kv_set_int(kv, "hidden", c->hidden)) ||
        (st = mp_kv_set_int(kv, "depth", c->depth)) ||
        (st = mp_kv_set_double(kv, "dropout", c->dropout)) ||
        (st = mp_kv_set_int(kv, "ffn_layers", c->ffn_layers)) ||
        (st = mp_kv_set_int(kv, "ffn_hidden", c->ffn_hidden)) ||
        (st = mp_kv_set(kv, "aggregation", agg_name(c->aggregation))) ||
        (st = mp_kv_set_double(kv, "aggregation_norm", c->agg_norm)) ||
        (st = mp_kv_set_int(kv, "ensemble_size", e->n_members)) ||
        (st = mp_kv_set_int(kv, "n_params", (long long)n_params)))
        goto done;
    if (e->task == MP_TASK_REGRESSION &&
        (st = mp_kv_set_scaler(kv, "target_scaler", &e->target_scaler)))
        goto done;
    if (c->extra_dim > 0 &&
        (st = mp_kv_set_scaler(kv, "feature_scaler", &e->feature_scaler)))
        goto done;

    size_t n_tensors = (size_t)n_views * (size_t)e->n_members;
    tensors = mp_calloc(n_tensors, sizeof *tensors);
    params = mp_malloc(sizeof(float) * n_params * (size_t)e->n_members);
    if (!tensors || !params) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory saving %s", path);
        goto done;
    }
    for (int k = 0; k < e->n_members; k++) {
        float *p = params + n_params * (size_t)k;
        if ((st = mp_model_get_params(e->members[k], p)))
            goto done;
        for (int v = 0; v < n_views; v++) {
            mp_tensor *t = &tensors[(size_t)k * (size_t)n_views + (size_t)v];
            t->name = views[v].name;
            t->block = (uint32_t)k;
            t->ndim = 2;
            t->shape[0] = (uint64_t)views[v].rows;
            t->shape[1] = (uint64_t)views[v].cols;
            t->data = p + views[v].offset;
        }
    }
    st = mp_modelfile_write(path, kv, tensors, n_tensors);
done:
    mp_free(tensors);
    mp_free(params);
    mp_kv_free(kv);
    return st;
}

static mp_status kv_int(const mp_kv *kv, const char *key, long long lo, long long hi, int *out)
{
    long long v;
    mp_status st = mp_kv_get_int(kv, key, lo, hi, &v);
    if (!st)
        *out = (int)v;
    return st;
}

mp_status mp_ensemble_load(mp_ensemble **out, const char *path, const char *backend_name)
{
    *out = NULL;
    mp_modelfile *mf = NULL;
    mp_ensemble *e = NULL;
    float *params = NULL;
    char **tasks = NULL;
    size_t n_task_names = 0;
    const char *s;
    mp_status st = mp_modelfile_read(&mf, path);
    if (st)
        return st;
    const mp_kv *kv = mf->header;

    mp_model_config c = mp_model_config_default();
    int n_members = 0, n_tasks = 0, n_desc = 0;
    mp_task_type task;
    mp_atom_layout layout;
    unsigned features;
    if ((st = mp_kv_get_str(kv, "format", &s)))
        goto done;
    if (strcmp(s, "molprop-model") != 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: not a molprop model (format '%s')", path, s);
        goto done;
    }
    if ((st = mp_kv_get_str(kv, "model", &s)))
        goto done;
    if (!strcmp(s, "dmpnn"))
        c.kind = MP_MODEL_DMPNN;
    else if (!strcmp(s, "ffn"))
        c.kind = MP_MODEL_FFN;
    else {
        st = mp_error_set(MP_ERR_FORMAT, "%s: unknown model kind '%s'", path, s);
        goto done;
    }
    if ((st = mp_kv_get_str(kv, "task_type", &s)) || (st = mp_task_type_parse(s, &task)) ||
        (st = kv_int(kv, "n_tasks", 1, 1000000, &n_tasks)) ||
        (st = mp_kv_get_strs(kv, "tasks", &tasks, &n_task_names)) ||
        (st = mp_kv_get_str(kv, "atom_layout", &s)) || (st = mp_atom_layout_parse(s, &layout)) ||
        (st = kv_int(kv, "atom_fdim", 1, 100000, &c.atom_fdim)) ||
        (st = mp_kv_get_str(kv, "features", &s)) || (st = mp_feature_set_parse(s, &features)) ||
        (st = kv_int(kv, "n_desc", 0, 100000, &n_desc)) ||
        (st = kv_int(kv, "extra_dim", 0, 10000000, &c.extra_dim)) ||
        (st = kv_int(kv, "hidden", 1, 1000000, &c.hidden)) ||
        (st = kv_int(kv, "depth", 1, 1000, &c.depth)) ||
        (st = mp_kv_get_double(kv, "dropout", &c.dropout)) ||
        (st = kv_int(kv, "ffn_layers", 1, 1000, &c.ffn_layers)) ||
        (st = kv_int(kv, "ffn_hidden", 0, 1000000, &c.ffn_hidden)) ||
        (st = mp_kv_get_str(kv, "aggregation", &s)) ||
        (st = mp_kv_get_double(kv, "aggregation_norm", &c.agg_norm)) ||
        (st = kv_int(kv, "ensemble_size", 1, 100000, &n_members)))
        goto done;
    c.aggregation = !strcmp(s, "sum") ? MP_AGG_SUM : !strcmp(s, "norm") ? MP_AGG_NORM : MP_AGG_MEAN;
    if (strcmp(s, "sum") && strcmp(s, "norm") && strcmp(s, "mean")) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: unknown aggregation '%s'", path, s);
        goto done;
    }
    if ((size_t)n_tasks != n_task_names || c.atom_fdim != mp_atom_fdim(layout) ||
        c.extra_dim != mp_feature_set_dim(features, n_desc)) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: header does not add up (tasks %d vs %zu names, "
                          "atom_fdim %d for layout %s, extra_dim %d for features)", path,
                          n_tasks, n_task_names, c.atom_fdim, mp_atom_layout_name(layout),
                          c.extra_dim);
        goto done;
    }
    c.n_tasks = n_tasks;
    c.task = task == MP_TASK_CLASSIFICATION ? MP_MODEL_CLASSIFICATION : MP_MODEL_REGRESSION;
    if (mf->n_blocks != (uint32_t)n_members) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: header says %d ensemble members, file holds %u",
                          path, n_members, mf->n_blocks);
        goto done;
    }
    if ((st = mp_ensemble_create(&e, &c, n_members, 0, backend_name)))
        goto done;
    e->task = task;
    e->n_tasks = (size_t)n_tasks;
    /* The kv getter returns one block; the ensemble owns each name. */
    if (!(e->task_names = mp_calloc((size_t)n_tasks, sizeof(char *)))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < n_tasks; k++)
        if (!(e->task_names[k] = mp_strdup(tasks[k]))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
    e->layout = layout;
    e->features = features;
    e->n_desc = n_desc;
    if ((st = mp_kv_get_str(kv, "smiles_column", &s)) || !(e->smiles_name = mp_strdup(s))) {
        if (!st)
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (task == MP_TASK_REGRESSION &&
        (st = mp_kv_get_scaler(kv, "target_scaler", (size_t)n_tasks, &e->target_scaler)))
        goto done;
    if (c.extra_dim > 0 &&
        (st = mp_kv_get_scaler(kv, "feature_scaler", (size_t)c.extra_dim, &e->feature_scaler)))
        goto done;

    int n_views = 0;
    const mp_param_view *views = mp_model_views(e->members[0], &n_views);
    size_t n_params = mp_model_n_params(e->members[0]);
    params = mp_malloc(sizeof(float) * n_params);
    if (!params) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory loading %s", path);
        goto done;
    }
    if ((size_t)n_views * (size_t)n_members != mf->n_tensors) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: %zu tensors, expected %d per member", path,
                          mf->n_tensors, n_views);
        goto done;
    }
    for (int k = 0; k < n_members; k++) {
        for (int v = 0; v < n_views; v++) {
            uint64_t shape[2] = { (uint64_t)views[v].rows, (uint64_t)views[v].cols };
            const float *data;
            if ((st = mp_modelfile_get(mf, (uint32_t)k, views[v].name, 2, shape, &data)))
                goto done;
            memcpy(params + views[v].offset, data,
                   sizeof(float) * (size_t)views[v].rows * (size_t)views[v].cols);
        }
        if ((st = mp_model_set_params(e->members[k], params)))
            goto done;
    }
    *out = e;
    e = NULL;
done:
    mp_free(tasks);
    mp_free(params);
    mp_ensemble_free(e);
    mp_modelfile_free(mf);
    return st;
}
