/*
 * resident.c - device-resident training steps (resident.h): packing an
 * epoch's batches into padded slots of a few size classes, laid out back to
 * back, one upload per epoch, and one step per slot replayed from the
 * class's captured CUDA graph where the backend can.
 */
#include "run/resident.h"

#include "models/model_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Byte offsets of the arrays inside one slot. */
typedef struct {
    size_t hot, mass, bond, src, dst, in_start, in_edge, mol_atom, mol_edge, target, mask, extra;
    size_t xa, xb;   /* the user atom / bond columns (model.h atom_extra_dim ...) */
    size_t bytes;
} slot_layout;

/* One size of slot: what a batch may hold, the padded capacities, where
 * each array sits, the model's batch bound to it and its captured step. */
typedef struct {
    int32_t      fit_atoms, fit_edges; /* real atoms / edges a batch may hold */
    int32_t      cm, ca, ce;           /* padded molecules, atoms, edges      */
    slot_layout  L;
    mp_dev_batch bt;                   /* the class's view of dev_step        */
    mp_capture  *graph;
    void        *graph_arena;          /* the arena the graph was captured on, */
    int32_t      graph_caps[3];        /* with these capacities                */
} slot_class;

struct mp_resident {
    mp_model   *m;
    mp_backend *b;
    mp_resident_opts o;
    int         dmpnn;
    int         n_tasks, extra_dim;
    int         xa_dim, xb_dim;      /* user atom / bond columns per row      */
    size_t      es;
    int         n_cls;               /* classes, smallest first; the last is  */
    slot_class  cls[MP_RESIDENT_MAX_CLASSES]; /* the opts' capacities          */
    int         cls_fixed;           /* classes chosen (or never to be)       */
    uint8_t    *slot_cls;            /* max_batches: each slot's class        */
    size_t     *slot_off;            /* max_batches + 1: byte offsets         */
    double      plan_real, plan_padded;   /* edges of the planned epoch       */
    double      run_real, run_padded;     /* ... of the last launch           */
    char       *host;                /* max_batches largest slots             */
    char       *dev_epoch;           /* the same on the device                */
    char       *dev_step;            /* the slot the model is bound to        */
    float      *dev_sched;           /* 2 x max_batches                       */
    int32_t    *dev_k;               /* the step counter                      */
    void       *dev_losses;          /* max_batches elements                  */
    int         n_keys;              /* dropout keys per step (0: none)       */
    int         keyed;               /* keys from dev_keys (the keyed ops)    */
    uint64_t   *keys, *dev_keys;     /* max_batches x n_keys                  */
    float      *sched;               /* host copy of the schedule             */
    void       *losses;              /* host copy of the losses               */
    int         bound_cls;           /* the class the model is bound to, or -1 */
    double      t_upload, t_steps;   /* seconds in the last run               */
    double      t_bound;             /* when its steps began to be issued     */
    int32_t     n_launched;          /* steps launched, not yet finished      */
};

/* Padding density: at most PAD_EDGES incoming edges per padding atom (the
 * room class_init leaves; pack_padding spreads them thinner when the slot
 * has spare atoms) and PAD_ATOMS atoms per padding molecule (a real atom
 * has a handful of edges, a real molecule tens of atoms; the row ops walk
 * one row per warp, so one padding row holding thousands would be a
 * straggler of milliseconds). */
#define PAD_EDGES 32
#define PAD_ATOMS 64

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void make_layout(const mp_resident *r, slot_class *k)
{
    slot_layout *L = &k->L;
    size_t at = 0;
#define PUT(field, bytes) (at = align_up(at, 64), L->field = at, at += (bytes))
    size_t A = (size_t)k->ca, E = (size_t)k->ce, B = (size_t)k->cm;
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
    PUT(xa, A * (size_t)r->xa_dim * r->es);   /* a row per atom         */
    PUT(xb, E * (size_t)r->xb_dim * r->es);   /* a row per directed edge */
#undef PUT
    L->bytes = align_up(at, 256);
}

/* The class's batch view of a slot at `base` (the device step buffer). */
static void point_batch(const mp_resident *r, slot_class *k, char *base)
{
    mp_dev_batch *t = &k->bt;
    const slot_layout *L = &k->L;
    t->n_mols = k->cm;
    t->n_atoms = k->ca;
    t->n_edges = k->ce;
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
    t->atom_x = r->xa_dim > 0 ? base + L->xa : NULL;
    t->bond_x = r->xb_dim > 0 ? base + L->xb : NULL;
}

/* A class holding fit_atoms real atoms and fit_edges real edges: room for
 * the padding spread thin (see pack_graph), one padding atom per PAD_EDGES
 * edges, one padding molecule per PAD_ATOMS atoms, so no row op has a long
 * serial row to walk.  MP_ERR_ARG when that overflows int32. */
static mp_status class_init(const mp_resident *r, slot_class *k, int32_t fit_atoms,
                            int32_t fit_edges)
{
    memset(k, 0, sizeof *k);
    k->fit_atoms = fit_atoms;
    k->fit_edges = fit_edges;
    if (r->dmpnn) {
        k->ce = fit_edges + (fit_edges & 1);
        int64_t ca = (int64_t)fit_atoms + 1 + (k->ce + PAD_EDGES - 1) / PAD_EDGES;
        int64_t cm = (int64_t)r->o.batch_size + 1 + (ca + PAD_ATOMS - 1) / PAD_ATOMS;
        if (ca >= INT32_MAX || cm >= INT32_MAX)
            return mp_error_set(MP_ERR_ARG, "resident training: batch too large (%lld atoms)",
                                (long long)ca);
        k->ca = (int32_t)ca;
        k->cm = (int32_t)cm;
    } else {
        k->cm = r->o.batch_size;
    }
    make_layout(r, k);
    return MP_OK;
}

/* Every slot in the largest class (before the first plan). */
static void plan_all_largest(mp_resident *r)
{
    const slot_class *top = &r->cls[r->n_cls - 1];
    r->slot_off[0] = 0;
    for (int32_t s = 0; s < r->o.max_batches; s++) {
        r->slot_cls[s] = (uint8_t)(r->n_cls - 1);
        r->slot_off[s + 1] = r->slot_off[s] + top->L.bytes;
    }
    r->plan_real = r->plan_padded = 0;
}

void mp_resident_free(mp_resident *r)
{
    if (!r)
        return;
    mp_backend *b = r->b;
    r->m->drop_keys = NULL;
    mp_model_unbind(r->m);
    for (int k = 0; k < r->n_cls; k++)
        if (r->cls[k].graph)
            r->b->capture_free(r->b, r->cls[k].graph);
    b->free(b, r->dev_epoch);
    b->free(b, r->dev_step);
    b->free(b, r->dev_sched);
    b->free(b, r->dev_k);
    b->free(b, r->dev_losses);
    b->free(b, r->dev_keys);
    mp_free(r->host);
    mp_free(r->sched);
    mp_free(r->losses);
    mp_free(r->keys);
    mp_free(r->slot_cls);
    mp_free(r->slot_off);
    mp_free(r);
}

/* The host staging and the device buffers for max_batches slots of the
 * largest class (cls[0] when called), the schedule, losses and keys. */
static mp_status alloc_buffers(mp_resident *r)
{
    mp_backend *b = r->b;
    const slot_class *top = &r->cls[0];
    size_t nb = (size_t)r->o.max_batches, total = nb * top->L.bytes;
    size_t nk = r->keyed ? nb * (size_t)r->n_keys : 0;
    r->host = mp_calloc(nb, top->L.bytes);
    r->sched = mp_malloc(sizeof(float) * 2 * nb);
    r->losses = mp_malloc(r->es * nb);
    r->slot_cls = mp_malloc(nb);
    r->slot_off = mp_malloc(sizeof(size_t) * (nb + 1));
    r->keys = nk ? mp_malloc(sizeof(uint64_t) * nk) : NULL;
    if (!r->host || !r->sched || !r->losses || !r->slot_cls || !r->slot_off || (nk && !r->keys))
        return mp_error_set(MP_ERR_NOMEM, "resident training: out of host memory (%zu MiB for "
                            "%zu batches)", total >> 20, nb);
    r->dev_epoch = b->alloc(b, total);
    r->dev_step = b->alloc(b, top->L.bytes);
    r->dev_sched = b->alloc(b, sizeof(float) * 2 * nb);
    r->dev_k = b->alloc(b, sizeof(int32_t));
    r->dev_losses = b->alloc(b, r->es * nb);
    r->dev_keys = nk ? b->alloc(b, sizeof(uint64_t) * nk) : NULL;
    if (!r->dev_epoch || !r->dev_step || !r->dev_sched || !r->dev_k || !r->dev_losses ||
        (nk && !r->dev_keys))
        return mp_error_set(MP_ERR_NOMEM, "resident training: out of device memory (%zu MiB "
                            "for %zu batches of %zu KiB)", total >> 20, nb, top->L.bytes >> 10);
    return MP_OK;
}

mp_status mp_resident_create(mp_resident **out, mp_model *m, const mp_resident_opts *o)
{
    *out = NULL;
    const mp_model_config *c = mp_model_get_config(m);
    mp_backend *b = m->b;
    if (o->batch_size < 1 || o->max_batches < 1 || o->cap_atoms < 0 || o->cap_edges < 0 ||
        o->cap_atoms == INT32_MAX || o->cap_edges >= INT32_MAX - 1 || o->batch_size == INT32_MAX ||
        o->n_classes < 0 || o->n_classes > MP_RESIDENT_MAX_CLASSES)
        return mp_error_set(MP_ERR_ARG, "resident training: bad sizes (batch %d, %d batches, "
                            "%d atoms, %d edges, %d classes)", (int)o->batch_size,
                            (int)o->max_batches, (int)o->cap_atoms, (int)o->cap_edges,
                            (int)o->n_classes);
    if (!b->adam_sched || !b->step_end)
        return mp_error_set(MP_ERR_ARG, "resident training: backend '%s' lacks the "
                            "device-scheduled step ops", b->name);
    int keyed_ops = 1;   /* every backend reads dropout keys from device memory (ops.h mp_key) */
    if (o->use_graph && (!b->capture_begin || (c->dropout > 0 && !keyed_ops)))
        return mp_error_set(MP_ERR_ARG, "resident training: replaying a captured step needs a "
                            "backend that can capture (backend '%s' cannot) and, for a model "
                            "with dropout, the keyed dropout ops (its keys would be replayed)",
                            b->name);
    mp_resident *r = mp_calloc(1, sizeof *r);
    if (!r)
        return mp_error_set(MP_ERR_NOMEM, "resident training: out of memory");
    r->m = m;
    r->b = b;
    r->o = *o;
    r->dmpnn = c->kind == MP_MODEL_DMPNN;
    r->n_tasks = c->n_tasks;
    r->extra_dim = c->extra_dim;
    r->xa_dim = r->dmpnn ? c->atom_extra_dim + c->atom_desc_dim : 0;
    r->xb_dim = r->dmpnn ? c->bond_extra_dim : 0;
    r->es = b->esize;
    r->bound_cls = -1;
    r->n_cls = 1;
    r->cls_fixed = !r->dmpnn || o->n_classes <= 1;
    mp_status st = class_init(r, &r->cls[0], o->cap_atoms, o->cap_edges);
    if (st != MP_OK) {
        mp_free(r);
        return st;
    }
    r->n_keys = mp_model_drop_layers(m);
    r->keyed = r->n_keys > 0 && keyed_ops;
    const slot_class *top = &r->cls[0];
    if ((st = alloc_buffers(r)) != MP_OK) {
        mp_resident_free(r);
        return st;
    }
    b->zero(b, r->dev_step, top->L.bytes);
    point_batch(r, &r->cls[0], r->dev_step);
    plan_all_largest(r);
    st = mp_model_reserve(m, top->cm, r->dmpnn ? top->ca : 0, r->dmpnn ? top->ce : 0);
    if (st != MP_OK) {
        mp_resident_free(r);
        return st;
    }
    *out = r;
    return MP_OK;
}

void mp_resident_caps(const mp_resident *r, int32_t *mols, int32_t *atoms, int32_t *edges)
{
    const slot_class *top = &r->cls[r->n_cls - 1];
    *mols = top->cm;
    *atoms = top->ca;
    *edges = top->ce;
}

int32_t mp_resident_n_classes(const mp_resident *r) { return r->n_cls; }

mp_status mp_resident_class_caps(const mp_resident *r, int32_t k, int32_t *fit_atoms,
                                 int32_t *fit_edges, int32_t *mols, int32_t *atoms,
                                 int32_t *edges)
{
    if (k < 0 || k >= r->n_cls)
        return mp_error_set(MP_ERR_ARG, "resident: class %d of %d", (int)k, r->n_cls);
    const slot_class *c = &r->cls[k];
    *fit_atoms = c->fit_atoms;
    *fit_edges = c->fit_edges;
    *mols = c->cm;
    *atoms = c->ca;
    *edges = c->ce;
    return MP_OK;
}

int32_t mp_resident_slot_class(const mp_resident *r, int32_t slot)
{
    return slot < 0 || slot >= r->o.max_batches ? -1 : (int32_t)r->slot_cls[slot];
}

void mp_resident_padding(const mp_resident *r, double *real_edges, double *padded_edges)
{
    *real_edges = r->run_real;
    *padded_edges = r->run_padded;
}

/* ===================================================================== */
/* Size classes                                                           */
/* ===================================================================== */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

#define CLASS_CANDIDATES 256   /* edge counts the class search considers   */
#define CLASS_EDGE_ROUND 64    /* class edge capacities: multiples of this */
#define CLASS_ATOM_ROUND 32    /* atom capacities: multiples of this       */

/* The candidate capacities among n batch edge counts: at most
 * CLASS_CANDIDATES quantiles, distinct values cv[j] ascending, with cc[j]
 * batches of at most that many edges; their number, 0 when out of memory. */
static int edge_candidates(const int32_t *edges, int32_t n, int32_t *cv, int64_t *cc)
{
    int32_t *x = mp_malloc(sizeof(int32_t) * (size_t)n);
    if (!x)
        return 0;
    memcpy(x, edges, sizeof(int32_t) * (size_t)n);
    qsort(x, (size_t)n, sizeof *x, cmp_i32);
    int C = 0;
    int64_t Q = n < CLASS_CANDIDATES ? n : CLASS_CANDIDATES;
    for (int64_t q = 1; q <= Q; q++) {
        int64_t i = (q * n + Q - 1) / Q - 1;
        while (i + 1 < n && x[i + 1] == x[i])
            i++;
        if (C == 0 || x[i] != cv[C - 1]) {
            cv[C] = x[i];
            cc[C] = i + 1;
            C++;
        }
    }
    mp_free(x);
    return C;
}

/* Up to K - 1 capacities among the C candidates minimising the padded
 * edges of the n batches (each in the smallest class holding it, the rest
 * in the top class of top_edges), by dynamic programming: ascending into
 * caps; their number (0: the top class alone pads least). */
static int best_caps(const int32_t *cv, const int64_t *cc, int C, int32_t n, int32_t top_edges,
                     int K, int32_t *caps)
{
    /* f[t][j]: least padded edges of the items <= cv[j] with t classes, the
     * last of capacity cv[j]; the rest go to the top class. */
    static const int64_t INF = INT64_MAX / 4;
    int64_t f[MP_RESIDENT_MAX_CLASSES][CLASS_CANDIDATES];
    int16_t from[MP_RESIDENT_MAX_CLASSES][CLASS_CANDIDATES];
    int64_t best = (int64_t)n * top_edges;
    int best_t = 0, best_j = -1;
    for (int t = 1; t < K; t++)
        for (int j = 0; j < C; j++) {
            f[t][j] = INF;
            from[t][j] = -1;
            if (t == 1) {
                f[t][j] = cc[j] * cv[j];
            } else {
                for (int i = t - 2; i < j; i++)
                    if (f[t - 1][i] < INF) {
                        int64_t v = f[t - 1][i] + (cc[j] - cc[i]) * cv[j];
                        if (v < f[t][j]) {
                            f[t][j] = v;
                            from[t][j] = (int16_t)i;
                        }
                    }
            }
            if (f[t][j] < INF) {
                int64_t tot = f[t][j] + ((int64_t)n - cc[j]) * top_edges;
                if (tot < best) {
                    best = tot;
                    best_t = t;
                    best_j = j;
                }
            }
        }
    for (int t = best_t, j = best_j; t >= 1; j = from[t][j], t--)
        caps[t - 1] = cv[j];
    return best_t;
}

/* The real capacities of nc classes of edge capacities caps: edges rounded
 * up, atoms the most seen under that many edges plus slack, both at most
 * the top class's and non-decreasing. */
static void class_fits(const int32_t *caps, int nc, int32_t n, const int32_t *atoms,
                       const int32_t *edges, const slot_class *top, int32_t *fa, int32_t *fe)
{
    for (int k = 0; k < nc; k++) {
        int64_t e = ((int64_t)caps[k] + CLASS_EDGE_ROUND - 1) / CLASS_EDGE_ROUND *
                    CLASS_EDGE_ROUND;
        fe[k] = e < top->fit_edges ? (int32_t)e : top->fit_edges;
        int32_t most = 0;
        for (int32_t s = 0; s < n; s++)
            if (edges[s] <= caps[k] && atoms[s] > most)
                most = atoms[s];
        int64_t a = (int64_t)most + 8 + (fe[k] - caps[k]) / 2;
        a = (a + CLASS_ATOM_ROUND - 1) / CLASS_ATOM_ROUND * CLASS_ATOM_ROUND;
        fa[k] = a < top->fit_atoms ? (int32_t)a : top->fit_atoms;
    }
    for (int k = nc - 2; k >= 0; k--)
        if (fa[k] > fa[k + 1])
            fa[k] = fa[k + 1];
}

/*
 * The classes, from one epoch's batch sizes (the first plan): up to
 * n_classes - 1 edge capacities below the largest class's, chosen among the
 * observed batch edge counts to minimise the padded edges of that epoch
 * (every batch in the smallest class holding it), by dynamic programming
 * over at most CLASS_CANDIDATES quantiles.  Later epochs shuffle the same
 * molecules into batches of the same distribution.  Each class's edges are
 * rounded up to CLASS_EDGE_ROUND; its atoms are the most any batch of the
 * epoch with that many edges held, plus slack for the rounding.  Out of
 * memory here only means one class.
 */
static void choose_classes(mp_resident *r, int32_t n, const int32_t *atoms,
                           const int32_t *edges)
{
    int K = r->o.n_classes;
    slot_class top = r->cls[r->n_cls - 1];
    if (K <= 1 || n < 1)
        return;
    int32_t cv[CLASS_CANDIDATES];
    int64_t cc[CLASS_CANDIDATES];
    int C = edge_candidates(edges, n, cv, cc);
    if (C == 0)
        return;
    int32_t caps[MP_RESIDENT_MAX_CLASSES], fa[MP_RESIDENT_MAX_CLASSES],
        fe[MP_RESIDENT_MAX_CLASSES];
    int nc = best_caps(cv, cc, C, n, top.fit_edges, K, caps);
    class_fits(caps, nc, n, atoms, edges, &top, fa, fe);
    /* drop classes with no fewer edges than the next (or than the top) */
    int n_cls = 0;
    for (int k = 0; k < nc; k++) {
        int32_t ne = k + 1 < nc ? fe[k + 1] : top.fit_edges;
        if (fe[k] >= ne)
            continue;
        if (class_init(r, &r->cls[n_cls], fa[k], fe[k]) != MP_OK)
            continue;
        point_batch(r, &r->cls[n_cls], r->dev_step);
        n_cls++;
    }
    mp_error_clear();
    r->cls[n_cls] = top;   /* the largest, with its graph, if one was captured */
    r->n_cls = n_cls + 1;
}

mp_status mp_resident_set_classes(mp_resident *r, int32_t n, const int32_t *fit_atoms,
                                  const int32_t *fit_edges)
{
    slot_class top = r->cls[r->n_cls - 1];
    if (n < 1 || n > MP_RESIDENT_MAX_CLASSES || fit_atoms[n - 1] != top.fit_atoms ||
        fit_edges[n - 1] != top.fit_edges)
        return mp_error_set(MP_ERR_ARG, "resident training: %d slot classes up to %d atoms and "
                            "%d edges for slots of at most %d atoms and %d edges", (int)n,
                            n >= 1 ? (int)fit_atoms[n - 1] : 0, n >= 1 ? (int)fit_edges[n - 1] : 0,
                            (int)top.fit_atoms, (int)top.fit_edges);
    for (int32_t k = 0; k + 1 < n; k++)
        if (fit_atoms[k] < 0 || fit_edges[k] < 0 || fit_edges[k] >= fit_edges[k + 1])
            return mp_error_set(MP_ERR_ARG, "resident training: slot class %d (%d atoms, %d "
                                "edges) is not smaller than the next", (int)k, (int)fit_atoms[k],
                                (int)fit_edges[k]);
    if (r->cls_fixed) {   /* fixed already: only the same classes again */
        int same = n == r->n_cls;
        for (int32_t k = 0; same && k < n; k++)
            same = r->cls[k].fit_atoms == fit_atoms[k] && r->cls[k].fit_edges == fit_edges[k];
        return same ? MP_OK
                    : mp_error_set(MP_ERR_ARG, "resident training: the slot classes were "
                                   "chosen already");
    }
    mp_status st;
    for (int32_t k = 0; k + 1 < n; k++) {
        if ((st = class_init(r, &r->cls[k], fit_atoms[k], fit_edges[k])) != MP_OK)
            return st;
        point_batch(r, &r->cls[k], r->dev_step);
    }
    r->cls[n - 1] = top;
    r->n_cls = (int)n;
    r->cls_fixed = 1;
    return MP_OK;
}

mp_status mp_resident_plan(mp_resident *r, int32_t n_steps, const int32_t *atoms,
                           const int32_t *edges)
{
    if (n_steps < 0 || n_steps > r->o.max_batches)
        return mp_error_set(MP_ERR_ARG, "resident plan: %d batches for %d slots", (int)n_steps,
                            (int)r->o.max_batches);
    if (r->dmpnn && n_steps > 0 && (!atoms || !edges))
        return mp_error_set(MP_ERR_ARG, "resident plan: a D-MPNN needs the batch sizes");
    const slot_class *top = &r->cls[r->n_cls - 1];
    for (int32_t s = 0; r->dmpnn && s < n_steps; s++)
        if (atoms[s] < 0 || edges[s] < 0 || atoms[s] > top->fit_atoms ||
            edges[s] > top->fit_edges)
            return mp_error_set(MP_ERR_ARG, "resident plan: batch %d (%d atoms, %d edges) does "
                                "not fit the largest slot (%d atoms, %d edges)", (int)s,
                                (int)atoms[s], (int)edges[s], (int)top->fit_atoms,
                                (int)top->fit_edges);
    if (!r->cls_fixed) {
        choose_classes(r, n_steps, atoms, edges);
        r->cls_fixed = 1;
    }
    plan_all_largest(r);
    r->slot_off[0] = 0;
    for (int32_t s = 0; s < n_steps; s++) {
        int k = 0;
        while (r->dmpnn && k < r->n_cls - 1 &&
               (atoms[s] > r->cls[k].fit_atoms || edges[s] > r->cls[k].fit_edges))
            k++;
        if (!r->dmpnn)
            k = r->n_cls - 1;
        r->slot_cls[s] = (uint8_t)k;
        r->slot_off[s + 1] = r->slot_off[s] + r->cls[k].L.bytes;
        r->plan_real += r->dmpnn ? edges[s] : 0;
        r->plan_padded += r->cls[k].ce;
    }
    for (int32_t s = n_steps; s < r->o.max_batches; s++)
        r->slot_off[s + 1] = r->slot_off[s] + r->cls[r->n_cls - 1].L.bytes;
    return MP_OK;
}

/* ===================================================================== */
/* Packing                                                                */
/* ===================================================================== */

static void put_el(const mp_resident *r, void *base, size_t i, double v)
{
    if (r->es == sizeof(double))
        ((double *)base)[i] = v;
    else
        ((float *)base)[i] = (float)v;
}

/* The padding of a slot whose n real molecules hold na atoms and ne edges:
 * atoms na .. ca-1 without hot slots or mass, in molecules n, n+1, ... of
 * PAD_ATOMS atoms each; edges ne .. ce-1 as pairs of self-loops spread
 * evenly over the padding atoms from atom na on (an even number each, at
 * most PAD_EDGES: class_init leaves room for that), so that no padding atom
 * holds more entering edges than it must (a kernel with a thread per atom
 * walks them one round after another).  Every padding row is zero whatever
 * atom its edge enters, so where the edges go changes no bit.  Molecules
 * after the last padding atom are empty. */
static void pack_padding(const slot_class *c, char *s, int32_t n, int32_t na, int32_t ne)
{
    const slot_layout *L = &c->L;
    int16_t *hot = (int16_t *)(s + L->hot);
    float *mass = (float *)(s + L->mass);
    int8_t *bond = (int8_t *)(s + L->bond);
    int32_t *src = (int32_t *)(s + L->src), *dst = (int32_t *)(s + L->dst);
    int32_t *in_start = (int32_t *)(s + L->in_start), *in_edge = (int32_t *)(s + L->in_edge);
    int32_t *mol_atom = (int32_t *)(s + L->mol_atom), *mol_edge = (int32_t *)(s + L->mol_edge);
    for (int32_t v = na; v < c->ca; v++) {
        for (int q = 0; q < MP_ATOM_MAX_HOT; q++)
            hot[(size_t)v * MP_ATOM_MAX_HOT + q] = -1;
        mass[v] = 0.0f;
    }
    memset(bond + (size_t)ne / 2 * MP_BOND_MAX_HOT, 0xff,
           (size_t)(c->ce - ne) / 2 * MP_BOND_MAX_HOT);
    const int32_t pad_atoms = c->ca - na, pairs = (c->ce - ne) / 2;
    const int32_t per = pad_atoms > 0 ? 2 * ((pairs + pad_atoms - 1) / pad_atoms) : 0;
    for (int32_t e = ne; e < c->ce; e++) {
        src[e] = dst[e] = na + (e - ne) / per;
        in_edge[e] = e;
    }
    for (int32_t v = na; v <= c->ca; v++) {
        int64_t k = (int64_t)ne + (int64_t)(v - na) * per;
        in_start[v] = k < c->ce ? (int32_t)k : c->ce;
    }
    for (int32_t i = n + 1; i <= c->cm; i++) {
        int64_t a = (int64_t)na + (int64_t)(i - n) * PAD_ATOMS;
        mol_atom[i] = a < c->ca ? (int32_t)a : c->ca;
        mol_edge[i] = in_start[mol_atom[i]];
    }
}

/* The graph arrays of one slot: real molecules, then the padding. */
static mp_status pack_graph(const slot_class *c, char *s, const mp_graphs *g,
                            const int32_t *mols, int32_t n)
{
    const slot_layout *L = &c->L;
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
        if ((int64_t)na + (a1 - a0) > c->ca - 1 || (int64_t)ne + (e1 - e0) > c->ce)
            return mp_error_set(MP_ERR_ARG, "resident pack: molecule %d does not fit the slot "
                                "(%d atoms, %d edges of room left)", (int)k,
                                (int)(c->ca - 1 - na), (int)(c->ce - ne));
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
            if (ne + q < c->ce)
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
    pack_padding(c, s, n, na, ne);
    return MP_OK;
}

/* The user columns of the slot's molecules in the element type (atom rows,
 * then the bond's row on both of its edges), zero for the padding. */
static mp_status pack_columns(const mp_resident *r, const slot_class *c, char *s,
                              const mp_graphs *g, const int32_t *mols, int32_t n)
{
    const int xa = r->xa_dim, xb = r->xb_dim;
    if (!xa && !xb)
        return MP_OK;
    if (g->xa_dim != xa || g->xb_dim != xb)
        return mp_error_set(MP_ERR_ARG, "resident pack: the model takes %d atom and %d bond "
                            "columns, the molecules carry %d and %d", xa, xb, (int)g->xa_dim,
                            (int)g->xb_dim);
    const slot_layout *L = &c->L;
    char *pa = s + L->xa, *pb = s + L->xb;
    size_t na = 0, ne = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = mols[i];
        int32_t a0 = g->mol_atom[k], a1 = g->mol_atom[k + 1];
        int32_t e0 = g->mol_edge[k], e1 = g->mol_edge[k + 1];
        for (size_t q = 0; xa && q < (size_t)(a1 - a0) * xa; q++)
            put_el(r, pa, na * xa + q, g->atom_x[(size_t)a0 * xa + q]);
        for (int32_t e = e0; xb && e < e1; e++)
            for (int j = 0; j < xb; j++)
                put_el(r, pb, (ne + (size_t)(e - e0)) * xb + j,
                       g->bond_x[(size_t)(e / 2) * xb + j]);
        na += (size_t)(a1 - a0);
        ne += (size_t)(e1 - e0);
    }
    if (xa)
        memset(pa + na * xa * r->es, 0, ((size_t)c->ca - na) * xa * r->es);
    if (xb)
        memset(pb + ne * xb * r->es, 0, ((size_t)c->ce - ne) * xb * r->es);
    return MP_OK;
}

mp_status mp_resident_slot_view(mp_resident *r, int32_t slot, mp_graphs *v,
                                const void **target, const uint8_t **mask)
{
    if (slot < 0 || slot >= r->o.max_batches)
        return mp_error_set(MP_ERR_ARG, "resident: slot %d of %d", (int)slot,
                            (int)r->o.max_batches);
    const slot_class *c = &r->cls[r->slot_cls[slot]];
    char *s = r->host + r->slot_off[slot];
    const slot_layout *L = &c->L;
    memset(v, 0, sizeof *v);
    v->atom_fdim = mp_model_get_config(r->m)->atom_fdim;
    v->n_mols = c->cm;
    v->n_atoms = c->ca;
    v->n_edges = c->ce;
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
    const slot_class *c = &r->cls[r->slot_cls[slot]];
    char *s = r->host + r->slot_off[slot];
    const slot_layout *L = &c->L;
    mp_status st;
    if (r->dmpnn) {
        if (!g)
            return mp_error_set(MP_ERR_ARG, "resident pack: a D-MPNN needs graphs");
        if (g->atom_fdim != mp_model_get_config(r->m)->atom_fdim)
            return mp_error_set(MP_ERR_FORMAT, "resident pack: atom vectors have %d slots but "
                                "the model was built for %d", g->atom_fdim,
                                mp_model_get_config(r->m)->atom_fdim);
        if ((st = pack_graph(c, s, g, mols, n)) != MP_OK ||
            (st = pack_columns(r, c, s, g, mols, n)) != MP_OK)
            return st;
        mp_graphs v;
        mp_resident_slot_view(r, slot, &v, NULL, NULL);
        if ((st = mp_batch_check(&v, v.atom_fdim)) != MP_OK)
            return st;
    }
    size_t T = (size_t)r->n_tasks, D = (size_t)r->extra_dim;
    void *tg = s + L->target, *ex = s + L->extra;
    uint8_t *mk = (uint8_t *)(s + L->mask);
    for (size_t i = 0; i < (size_t)c->cm * T; i++) {
        float t = i < (size_t)n * T ? targets[i] : NAN;
        if (isinf(t))
            return mp_error_set(MP_ERR_FORMAT, "resident pack: target of molecule %zu, task %zu "
                                "is infinite", i / T, i % T);
        mk[i] = !isnan(t);
        put_el(r, tg, i, mk[i] ? t : 0.0);
    }
    for (size_t i = 0; i < (size_t)c->cm * D; i++)
        put_el(r, ex, i, i < (size_t)n * D ? extra[i] : 0.0);
    return MP_OK;
}

/* ===================================================================== */
/* Steps                                                                  */
/* ===================================================================== */

/* Binds the model to class k's view of the step buffer (if not already). */
static mp_status bind_class(mp_resident *r, int k)
{
    if (r->bound_cls == k && r->m->bound)
        return MP_OK;
    mp_status st = mp_model_bind(r->m, &r->cls[k].bt);
    r->bound_cls = st == MP_OK ? k : -1;
    return st;
}

/* One step of class k on the step buffer: replay the class's graph
 * (capturing it first when it is missing or the activations moved), or
 * issue the ops. */
static mp_status one_step(mp_resident *r, int k, const float *sched_dev)
{
    mp_backend *b = r->b;
    mp_model *m = r->m;
    slot_class *c = &r->cls[k];
    mp_status st;
    if (!r->o.use_graph) {
        if ((st = bind_class(r, k)) != MP_OK)
            return st;
        mp_model_step_bound(m, sched_dev, r->dev_k, r->dev_losses);
        return MP_OK;
    }
    if (c->graph && (c->graph_arena != m->arena || c->graph_caps[0] != m->cap_mols ||
                     c->graph_caps[1] != m->cap_atoms || c->graph_caps[2] != m->cap_edges)) {
        b->capture_free(b, c->graph);
        c->graph = NULL;
    }
    if (!c->graph) {
        if ((st = bind_class(r, k)) != MP_OK || (st = b->capture_begin(b)) != MP_OK)
            return st;
        mp_model_step_bound(m, sched_dev, r->dev_k, r->dev_losses);
        if ((st = b->capture_end(b, &c->graph)) != MP_OK)
            return st;
        c->graph_arena = m->arena;
        c->graph_caps[0] = m->cap_mols;
        c->graph_caps[1] = m->cap_atoms;
        c->graph_caps[2] = m->cap_edges;
    }
    return b->replay(b, c->graph);
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
    /* The epoch's dropout keys, drawn as the host loop's steps would draw
     * them (step by step, layer by layer in forward order): drop_rng ends
     * where theirs would. */
    size_t nk = r->keyed ? (size_t)n_steps * (size_t)r->n_keys : 0;
    for (size_t i = 0; i < nk; i++)
        r->keys[i] = mp_rng_u64(&m->drop_rng);
    int32_t zero = 0;
    double t_start = mp_time_now();
    /* b->upload is synchronous: the staging may be packed again on return */
    if ((st = b->upload(b, r->dev_epoch, r->host, r->slot_off[n_steps])) != MP_OK ||
        (st = b->upload(b, r->dev_sched, r->sched, sizeof(float) * 2 * (size_t)n_steps)) ||
        (nk && (st = b->upload(b, r->dev_keys, r->keys, sizeof(uint64_t) * nk)) != MP_OK) ||
        (st = b->upload(b, r->dev_k, &zero, sizeof zero)) != MP_OK)
        return st;
    r->bound_cls = -1;
    r->t_bound = mp_time_now();
    r->t_upload = r->t_bound - t_start;
    r->run_real = r->plan_real;
    r->run_padded = r->plan_padded;
    m->drop_keys = r->keyed ? r->dev_keys : NULL;
    for (int32_t i = 0; i < n_steps; i++) {
        int k = r->slot_cls[i];
        b->copy(b, r->dev_step, r->dev_epoch + r->slot_off[i], r->cls[k].L.bytes);
        if ((st = one_step(r, k, r->dev_sched)) != MP_OK) {
            m->drop_keys = NULL;
            return st;
        }
    }
    m->drop_keys = NULL;
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
