/*
 * resident.c - device-resident training steps (resident.h): packing an
 * epoch's batches into padded fixed-capacity slots, one upload per epoch, and
 * one step per slot replayed from a captured CUDA graph where the backend can.
 */
#include "models/resident.h"

#include "gpu/gpu.h"
#include "models/model_impl.h"

#include <math.h>
#include <string.h>

/* Byte offsets of the arrays inside one slot. */
typedef struct {
    size_t hot, mass, bond, src, dst, in_start, in_edge, mol_atom, mol_edge, target, mask, extra;
    size_t bytes;
} slot_layout;

struct mp_resident {
    mp_model   *m;
    mp_backend *b;
    mp_resident_opts o;
    int         dmpnn;
    int32_t     cm, ca, ce;          /* slot capacities: molecules, atoms, edges */
    int         n_tasks, extra_dim;
    size_t      es;
    slot_layout L;
    char       *host;                /* max_batches slots                        */
    char       *dev_epoch;           /* max_batches slots on the device          */
    char       *dev_step;            /* the slot the model is bound to           */
    float      *dev_sched;           /* 2 x max_batches                          */
    int32_t    *dev_k;               /* the step counter                         */
    void       *dev_losses;          /* max_batches elements                     */
    float      *sched;               /* host copy of the schedule                */
    void       *losses;              /* host copy of the losses                  */
    mp_dev_batch bt;
    double      t_upload, t_steps;   /* seconds in the last run                  */
    double      t_bound;             /* when its steps began to be issued        */
    int32_t     n_launched;          /* steps launched, not yet finished         */
    mp_cuda_graph *graph;
    void       *graph_arena;         /* the arena the graph was captured on,     */
    int32_t     graph_caps[3];       /* with these capacities                    */
};

/* Padding density: at most PAD_EDGES incoming edges per padding atom and
 * PAD_ATOMS atoms per padding molecule (a real atom has a handful of edges,
 * a real molecule tens of atoms; the row ops walk one row per warp, so one
 * padding row holding thousands would be a straggler of milliseconds). */
#define PAD_EDGES 32
#define PAD_ATOMS 64

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void make_layout(mp_resident *r)
{
    slot_layout *L = &r->L;
    size_t at = 0;
#define PUT(field, bytes) (at = align_up(at, 64), L->field = at, at += (bytes))
    size_t A = (size_t)r->ca, E = (size_t)r->ce, B = (size_t)r->cm;
    PUT(hot, A * MP_ATOM_MAX_HOT * sizeof(int16_t));
    PUT(mass, A * sizeof(float));
    PUT(bond, E / 2 * MP_BOND_MAX_HOT * sizeof(int8_t));
    PUT(src, E * sizeof(int32_t));
    PUT(dst, E * sizeof(int32_t));
    PUT(in_start, (A + 1) * sizeof(int32_t));
    PUT(in_edge, E * sizeof(int32_t));
    PUT(mol_atom, (B + 1) * sizeof(int32_t));
    PUT(mol_edge, (B + 1) * sizeof(int32_t));   /* for the check; unused on the device */
    PUT(target, B * (size_t)r->n_tasks * r->es);
    PUT(mask, B * (size_t)r->n_tasks);
    PUT(extra, B * (size_t)r->extra_dim * r->es);
#undef PUT
    L->bytes = align_up(at, 256);
}

static void point_batch(mp_resident *r, char *base)
{
    mp_dev_batch *t = &r->bt;
    const slot_layout *L = &r->L;
    t->n_mols = r->cm;
    t->n_atoms = r->ca;
    t->n_edges = r->ce;
    t->atom_hot = (int16_t *)(base + L->hot);
    t->atom_mass = (float *)(base + L->mass);
    t->bond_hot = (int8_t *)(base + L->bond);
    t->edge_src = (int32_t *)(base + L->src);
    t->edge_dst = (int32_t *)(base + L->dst);
    t->in_start = (int32_t *)(base + L->in_start);
    t->in_edge = (int32_t *)(base + L->in_edge);
    t->mol_atom = (int32_t *)(base + L->mol_atom);
    t->target = base + L->target;
    t->mask = (uint8_t *)(base + L->mask);
    t->extra = r->extra_dim > 0 ? base + L->extra : NULL;
}

void mp_resident_free(mp_resident *r)
{
    if (!r)
        return;
    mp_backend *b = r->b;
    mp_model_unbind(r->m);
    mp_cuda_graph_free(r->graph);
    b->free(b, r->dev_epoch);
    b->free(b, r->dev_step);
    b->free(b, r->dev_sched);
    b->free(b, r->dev_k);
    b->free(b, r->dev_losses);
    mp_free(r->host);
    mp_free(r->sched);
    mp_free(r->losses);
    mp_free(r);
}

mp_status mp_resident_create(mp_resident **out, mp_model *m, const mp_resident_opts *o)
{
    *out = NULL;
    const mp_model_config *c = mp_model_get_config(m);
    mp_backend *b = m->b;
    if (o->batch_size < 1 || o->max_batches < 1 || o->cap_atoms < 0 || o->cap_edges < 0 ||
        o->cap_atoms == INT32_MAX || o->cap_edges >= INT32_MAX - 1 || o->batch_size == INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "resident training: bad sizes (batch %d, %d batches, "
                            "%d atoms, %d edges)", (int)o->batch_size, (int)o->max_batches,
                            (int)o->cap_atoms, (int)o->cap_edges);
    if (!b->adam_sched && strncmp(b->name, "cuda", 4) == 0)
        mp_backend_cuda_train_ops(b);
    if (!b->adam_sched || !b->step_end)
        return mp_error_set(MP_ERR_ARG, "resident training: backend '%s' lacks the "
                            "device-scheduled step ops", b->name);
    if (o->use_graph && (b->host_memory || c->dropout > 0))
        return mp_error_set(MP_ERR_ARG, "resident training: a CUDA graph needs the cuda backend "
                            "and a model without dropout (its keys would be replayed)");
    mp_resident *r = mp_calloc(1, sizeof *r);
    if (!r)
        return mp_error_set(MP_ERR_NOMEM, "resident training: out of memory");
    r->m = m;
    r->b = b;
    r->o = *o;
    r->dmpnn = c->kind == MP_MODEL_DMPNN;
    r->n_tasks = c->n_tasks;
    r->extra_dim = c->extra_dim;
    r->es = b->esize;
    if (r->dmpnn) {
        /* Room for the padding spread thin (see pack_graph): one padding
         * atom per PAD_EDGES edges, one padding molecule per PAD_ATOMS
         * atoms, so no row op has a long serial row to walk. */
        r->ce = o->cap_edges + (o->cap_edges & 1);
        int64_t ca = (int64_t)o->cap_atoms + 1 + (r->ce + PAD_EDGES - 1) / PAD_EDGES;
        int64_t cm = (int64_t)o->batch_size + 1 + (ca + PAD_ATOMS - 1) / PAD_ATOMS;
        if (ca >= INT32_MAX || cm >= INT32_MAX) {
            mp_free(r);
            return mp_error_set(MP_ERR_ARG, "resident training: batch too large (%lld atoms)",
                                (long long)ca);
        }
        r->ca = (int32_t)ca;
        r->cm = (int32_t)cm;
    } else {
        r->cm = o->batch_size;
    }
    make_layout(r);
    size_t nb = (size_t)o->max_batches, total = nb * r->L.bytes;
    r->host = mp_calloc(nb, r->L.bytes);
    r->sched = mp_malloc(sizeof(float) * 2 * nb);
    r->losses = mp_malloc(r->es * nb);
    if (!r->host || !r->sched || !r->losses) {
        mp_resident_free(r);
        return mp_error_set(MP_ERR_NOMEM, "resident training: out of host memory (%zu MiB for "
                            "%zu batches)", total >> 20, nb);
    }
    r->dev_epoch = b->alloc(b, total);
    r->dev_step = b->alloc(b, r->L.bytes);
    r->dev_sched = b->alloc(b, sizeof(float) * 2 * nb);
    r->dev_k = b->alloc(b, sizeof(int32_t));
    r->dev_losses = b->alloc(b, r->es * nb);
    if (!r->dev_epoch || !r->dev_step || !r->dev_sched || !r->dev_k || !r->dev_losses) {
        mp_resident_free(r);
        return mp_error_set(MP_ERR_NOMEM, "resident training: out of device memory (%zu MiB "
                            "for %zu batches of %zu KiB)", total >> 20, nb, r->L.bytes >> 10);
    }
    b->zero(b, r->dev_step, r->L.bytes);
    point_batch(r, r->dev_step);
    mp_status st = mp_model_reserve(m, r->cm, r->dmpnn ? r->ca : 0, r->dmpnn ? r->ce : 0);
    if (st != MP_OK) {
        mp_resident_free(r);
        return st;
    }
    *out = r;
    return MP_OK;
}

void mp_resident_caps(const mp_resident *r, int32_t *mols, int32_t *atoms, int32_t *edges)
{
    *mols = r->cm;
    *atoms = r->ca;
    *edges = r->ce;
}

static void put_el(const mp_resident *r, void *base, size_t i, double v)
{
    if (r->es == sizeof(double))
        ((double *)base)[i] = v;
    else
        ((float *)base)[i] = (float)v;
}

/* The graph arrays of one slot: real molecules, then the padding. */
static mp_status pack_graph(mp_resident *r, char *s, const mp_graphs *g, const int32_t *mols,
                            int32_t n)
{
    const slot_layout *L = &r->L;
    int16_t *hot = (int16_t *)(s + L->hot);
    float *mass = (float *)(s + L->mass);
    int8_t *bond = (int8_t *)(s + L->bond);
    int32_t *src = (int32_t *)(s + L->src), *dst = (int32_t *)(s + L->dst);
    int32_t *in_start = (int32_t *)(s + L->in_start), *in_edge = (int32_t *)(s + L->in_edge);
    int32_t *mol_atom = (int32_t *)(s + L->mol_atom), *mol_edge = (int32_t *)(s + L->mol_edge);
    int32_t na = 0, ne = 0;
    mol_atom[0] = mol_edge[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = mols[i];
        if (k < 0 || k >= g->n_mols)
            return mp_error_set(MP_ERR_ARG, "resident pack: molecule index %d outside the "
                                "store's %d", (int)k, (int)g->n_mols);
        int32_t a0 = g->mol_atom[k], a1 = g->mol_atom[k + 1];
        int32_t e0 = g->mol_edge[k], e1 = g->mol_edge[k + 1];
        if ((int64_t)na + (a1 - a0) > r->ca - 1 || (int64_t)ne + (e1 - e0) > r->ce)
            return mp_error_set(MP_ERR_ARG, "resident pack: molecule %d does not fit the slot "
                                "(%d atoms, %d edges of room left)", (int)k,
                                (int)(r->ca - 1 - na), (int)(r->ce - ne));
        if ((e0 & 1) || (e1 & 1))
            return mp_error_set(MP_ERR_FORMAT, "resident pack: molecule %d: edges not in pairs",
                                (int)k);
        memcpy(hot + (size_t)na * MP_ATOM_MAX_HOT, g->atom_hot + (size_t)a0 * MP_ATOM_MAX_HOT,
               sizeof(int16_t) * MP_ATOM_MAX_HOT * (size_t)(a1 - a0));
        memcpy(mass + na, g->atom_mass + a0, sizeof(float) * (size_t)(a1 - a0));
        memcpy(bond + (size_t)ne / 2 * MP_BOND_MAX_HOT,
               g->bond_hot + (size_t)e0 / 2 * MP_BOND_MAX_HOT,
               (size_t)(e1 - e0) / 2 * MP_BOND_MAX_HOT);
        int32_t k0 = a1 > a0 ? g->in_start[a0] : 0;
        for (int32_t v = a0; v < a1; v++)
            in_start[na + v - a0] = ne + g->in_start[v] - k0;
        for (int32_t q = 0; a1 > a0 && q < g->in_start[a1] - k0; q++)
            if (ne + q < r->ce)
                in_edge[ne + q] = g->in_edge[k0 + q] - e0 + ne;
        for (int32_t e = e0; e < e1; e++) {
            src[ne + e - e0] = g->edge_src[e] - a0 + na;
            dst[ne + e - e0] = g->edge_dst[e] - a0 + na;
        }
        na += a1 - a0;
        ne += e1 - e0;
        mol_atom[i + 1] = na;
        mol_edge[i + 1] = ne;
    }
    /* The padding: atoms na .. ca-1 without hot slots or mass, in molecules
     * n, n+1, ... of PAD_ATOMS atoms each; edges ne .. ce-1 as pairs of
     * self-loops, PAD_EDGES to an atom from atom na on.  Molecules after
     * the last padding atom are empty. */
    for (int32_t v = na; v < r->ca; v++) {
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
            hot[(size_t)v * MP_ATOM_MAX_HOT + q] = -1;
        mass[v] = 0.0f;
    }
    memset(bond + (size_t)ne / 2 * MP_BOND_MAX_HOT, 0xff,
           (size_t)(r->ce - ne) / 2 * MP_BOND_MAX_HOT);
    for (int32_t e = ne; e < r->ce; e++) {
        src[e] = dst[e] = na + (e - ne) / PAD_EDGES;
        in_edge[e] = e;
    }
    for (int32_t v = na; v <= r->ca; v++) {
        int64_t k = (int64_t)ne + (int64_t)(v - na) * PAD_EDGES;
        in_start[v] = k < r->ce ? (int32_t)k : r->ce;
    }
    for (int32_t i = n + 1; i <= r->cm; i++) {
        int64_t a = (int64_t)na + (int64_t)(i - n) * PAD_ATOMS;
        mol_atom[i] = a < r->ca ? (int32_t)a : r->ca;
        mol_edge[i] = in_start[mol_atom[i]];
    }
    return MP_OK;
}

mp_status mp_resident_slot_view(mp_resident *r, int32_t slot, mp_graphs *v,
                                const void **target, const uint8_t **mask)
{
    if (slot < 0 || slot >= r->o.max_batches)
        return mp_error_set(MP_ERR_ARG, "resident: slot %d of %d", (int)slot,
                            (int)r->o.max_batches);
    char *s = r->host + (size_t)slot * r->L.bytes;
    const slot_layout *L = &r->L;
    memset(v, 0, sizeof *v);
    v->atom_fdim = mp_model_get_config(r->m)->atom_fdim;
    v->n_mols = r->cm;
    v->n_atoms = r->ca;
    v->n_edges = r->ce;
    v->mol_atom = (int32_t *)(s + L->mol_atom);
    v->mol_edge = (int32_t *)(s + L->mol_edge);
    v->atom_hot = (int16_t *)(s + L->hot);
    v->atom_mass = (float *)(s + L->mass);
    v->bond_hot = (int8_t *)(s + L->bond);
    v->edge_src = (int32_t *)(s + L->src);
    v->edge_dst = (int32_t *)(s + L->dst);
    v->in_start = (int32_t *)(s + L->in_start);
    v->in_edge = (int32_t *)(s + L->in_edge);
    if (target)
        *target = s + L->target;
    if (mask)
        *mask = (const uint8_t *)(s + L->mask);
    return MP_OK;
}

mp_status mp_resident_pack(mp_resident *r, int32_t slot, const mp_graphs *g,
                           const int32_t *mols, int32_t n, const float *targets,
                           const float *extra)
{
    if (slot < 0 || slot >= r->o.max_batches)
        return mp_error_set(MP_ERR_ARG, "resident pack: slot %d outside the %d of an epoch",
                            (int)slot, (int)r->o.max_batches);
    if (n < 0 || n > r->o.batch_size || (n > 0 && (!mols || !targets)))
        return mp_error_set(MP_ERR_ARG, "resident pack: %d molecules for a batch of %d", (int)n,
                            (int)r->o.batch_size);
    if (r->extra_dim > 0 && n > 0 && !extra)
        return mp_error_set(MP_ERR_ARG, "resident pack: the model takes %d features per "
                            "molecule but none were given", r->extra_dim);
    char *s = r->host + (size_t)slot * r->L.bytes;
    const slot_layout *L = &r->L;
    mp_status st;
    if (r->dmpnn) {
        if (!g)
            return mp_error_set(MP_ERR_ARG, "resident pack: a D-MPNN needs graphs");
        if (g->atom_fdim != mp_model_get_config(r->m)->atom_fdim)
            return mp_error_set(MP_ERR_FORMAT, "resident pack: atom vectors have %d slots but "
                                "the model was built for %d", g->atom_fdim,
                                mp_model_get_config(r->m)->atom_fdim);
        if ((st = pack_graph(r, s, g, mols, n)) != MP_OK)
            return st;
        mp_graphs v;
        mp_resident_slot_view(r, slot, &v, NULL, NULL);
        if ((st = mp_batch_check(&v, v.atom_fdim)) != MP_OK)
            return st;
    }
    size_t T = (size_t)r->n_tasks, D = (size_t)r->extra_dim;
    void *tg = s + L->target, *ex = s + L->extra;
    uint8_t *mk = (uint8_t *)(s + L->mask);
    for (size_t i = 0; i < (size_t)r->cm * T; i++) {
        float t = i < (size_t)n * T ? targets[i] : NAN;
        if (isinf(t))
            return mp_error_set(MP_ERR_FORMAT, "resident pack: target of molecule %zu, task %zu "
                                "is infinite", i / T, i % T);
        mk[i] = !isnan(t);
        put_el(r, tg, i, mk[i] ? t : 0.0);
    }
    for (size_t i = 0; i < (size_t)r->cm * D; i++)
        put_el(r, ex, i, i < (size_t)n * D ? extra[i] : 0.0);
    return MP_OK;
}

/* One step on the bound slot: replay the graph (capturing it first when it
 * is missing or the activations moved), or issue the ops. */
static mp_status one_step(mp_resident *r, const float *sched_dev)
{
    mp_backend *b = r->b;
    mp_model *m = r->m;
    if (!r->o.use_graph) {
        mp_model_step_bound(m, sched_dev, r->dev_k, r->dev_losses);
        return MP_OK;
    }
    if (r->graph && (r->graph_arena != m->arena || r->graph_caps[0] != m->cap_mols ||
                     r->graph_caps[1] != m->cap_atoms || r->graph_caps[2] != m->cap_edges)) {
        mp_cuda_graph_free(r->graph);
        r->graph = NULL;
    }
    mp_status st;
    if (!r->graph) {
        if ((st = mp_cuda_graph_begin(b)) != MP_OK)
            return st;
        mp_model_step_bound(m, sched_dev, r->dev_k, r->dev_losses);
        if ((st = mp_cuda_graph_end(b, &r->graph)) != MP_OK)
            return st;
        r->graph_arena = m->arena;
        r->graph_caps[0] = m->cap_mols;
        r->graph_caps[1] = m->cap_atoms;
        r->graph_caps[2] = m->cap_edges;
    }
    return mp_cuda_graph_launch(b, r->graph);
}

mp_status mp_resident_launch(mp_resident *r, int32_t n_steps, const double *lrs)
{
    mp_backend *b = r->b;
    mp_model *m = r->m;
    mp_status st;
    r->n_launched = 0;
    if (n_steps < 0 || n_steps > r->o.max_batches)
        return mp_error_set(MP_ERR_ARG, "resident run: %d steps for %d slots", (int)n_steps,
                            (int)r->o.max_batches);
    if (n_steps == 0)
        return MP_OK;
    long t0 = mp_model_adam_steps(m);
    for (int32_t i = 0; i < n_steps; i++) {
        if (!(lrs[i] >= 0 && isfinite(lrs[i])))
            return mp_error_set(MP_ERR_ARG, "resident run: learning rate %g at step %d", lrs[i],
                                (int)i);
        mp_adam_sched_entry(lrs[i], 0.9, 0.999, t0 + i + 1, r->sched + 2 * (size_t)i);
    }
    int32_t zero = 0;
    double t_start = mp_time_now();
    /* b->upload is synchronous: the staging may be packed again on return */
    if ((st = b->upload(b, r->dev_epoch, r->host, (size_t)n_steps * r->L.bytes)) != MP_OK ||
        (st = b->upload(b, r->dev_sched, r->sched, sizeof(float) * 2 * (size_t)n_steps)) ||
        (st = b->upload(b, r->dev_k, &zero, sizeof zero)) != MP_OK)
        return st;
    if ((st = mp_model_bind(m, &r->bt)) != MP_OK)
        return st;
    r->t_bound = mp_time_now();
    r->t_upload = r->t_bound - t_start;
    for (int32_t i = 0; i < n_steps; i++) {
        b->copy(b, r->dev_step, r->dev_epoch + (size_t)i * r->L.bytes, r->L.bytes);
        if ((st = one_step(r, r->dev_sched)) != MP_OK)
            return st;
    }
    r->n_launched = n_steps;
    return MP_OK;
}

mp_status mp_resident_finish(mp_resident *r, double *losses)
{
    mp_backend *b = r->b;
    int32_t n_steps = r->n_launched;
    mp_status st;
    r->n_launched = 0;
    if (n_steps == 0)
        return MP_OK;
    if ((st = b->sync(b)) != MP_OK ||
        (st = b->download(b, r->losses, r->dev_losses, r->es * (size_t)n_steps)) != MP_OK)
        return st;
    r->t_steps = mp_time_now() - r->t_bound;
    mp_model_add_adam_steps(r->m, n_steps);
    for (int32_t i = 0; i < n_steps; i++)
        losses[i] = r->es == sizeof(double) ? ((double *)r->losses)[i]
                                            : (double)((float *)r->losses)[i];
    return MP_OK;
}

mp_status mp_resident_run(mp_resident *r, int32_t n_steps, const double *lrs, double *losses)
{
    mp_status st = mp_resident_launch(r, n_steps, lrs);
    return st != MP_OK ? st : mp_resident_finish(r, losses);
}

void mp_resident_times(const mp_resident *r, double *upload, double *steps)
{
    *upload = r->t_upload;
    *steps = r->t_steps;
}
