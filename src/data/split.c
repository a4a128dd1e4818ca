/*
 * split.c - Chemprop v1.6.1's split types (random, scaffold_balanced, cv,
 * cv-no-test), reproduced draw for draw with mp_pyrandom (CPython's
 * random.Random).  See split.h for the contract and REFERENCE.md section 3.
 *
 * Everything works on positions 0..N-1 of the candidate rows, as Chemprop
 * works on positions in its filtered dataset; rows[] maps them back to row
 * ids at the end.
 */
#include "data/split.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Options                                                                */
/* ===================================================================== */

static const struct {
    const char   *name;
    mp_split_type type;
} split_names[] = {
    { "random",            MP_SPLIT_RANDOM },
    { "scaffold_balanced", MP_SPLIT_SCAFFOLD_BALANCED },
    { "cv",                MP_SPLIT_CV },
    { "cv-no-test",        MP_SPLIT_CV_NO_TEST },
    { "cv_no_test",        MP_SPLIT_CV_NO_TEST },
};

mp_split_opts mp_split_opts_default(void)
{
    mp_split_opts o;
    memset(&o, 0, sizeof o);
    o.type = MP_SPLIT_RANDOM;
    o.sizes[0] = 0.8;
    o.sizes[1] = 0.1;
    o.sizes[2] = 0.1;
    o.seed = 0;
    o.n_folds = 5;
    return o;
}

mp_status mp_split_type_parse(const char *name, mp_split_type *out)
{
    if (name)
        for (size_t i = 0; i < sizeof split_names / sizeof split_names[0]; i++)
            if (!strcmp(name, split_names[i].name)) {
                *out = split_names[i].type;
                return MP_OK;
            }
    return mp_error_set(MP_ERR_ARG, "unknown split type '%s' (choose random, "
                        "scaffold_balanced, cv or cv-no-test)", name ? name : "(null)");
}

const char *mp_split_type_name(mp_split_type t)
{
    switch (t) {
    case MP_SPLIT_RANDOM:            return "random";
    case MP_SPLIT_SCAFFOLD_BALANCED: return "scaffold_balanced";
    case MP_SPLIT_CV:                return "cv";
    case MP_SPLIT_CV_NO_TEST:        return "cv-no-test";
    }
    return "unknown";
}

mp_status mp_split_sizes_check(const double sizes[3])
{
    for (int i = 0; i < 3; i++)
        if (!isfinite(sizes[i]) || sizes[i] < 0)
            return mp_error_set(MP_ERR_ARG, "split sizes must be non-negative numbers, "
                                "got %g,%g,%g", sizes[0], sizes[1], sizes[2]);
    double sum = sizes[0] + sizes[1] + sizes[2];
    if (fabs(sum - 1.0) > 1e-6)
        return mp_error_set(MP_ERR_ARG, "split sizes must sum to 1, got %g,%g,%g (sum %.9g)",
                            sizes[0], sizes[1], sizes[2], sum);
    return MP_OK;
}

mp_status mp_split_sizes_parse(const char *s, double sizes[3])
{
    if (!s)
        return mp_error_set(MP_ERR_ARG, "split sizes: no value given");
    double v[3];
    int n = 0;
    const char *p = s;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        if (n == 3)
            return mp_error_set(MP_ERR_ARG, "split sizes '%s': expected three numbers "
                                "(train,val,test), got more", s);
        char *end;
        errno = 0;
        v[n] = strtod(p, &end);
        if (*p == ',')
            return mp_error_set(MP_ERR_ARG, "split sizes '%s': empty value", s);
        if (end == p || errno == ERANGE)
            return mp_error_set(MP_ERR_ARG, "split sizes '%s': '%.*s' is not a number", s,
                                (int)strcspn(p, ", \t"), p);
        n++;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == ',') {
            p++;
            while (isspace((unsigned char)*p))
                p++;
            if (!*p)
                return mp_error_set(MP_ERR_ARG, "split sizes '%s': trailing comma", s);
        } else if (*p && !isdigit((unsigned char)*p) && *p != '.' && *p != '-' && *p != '+') {
            return mp_error_set(MP_ERR_ARG, "split sizes '%s': unexpected '%c'", s, *p);
        }
    }
    if (n != 3)
        return mp_error_set(MP_ERR_ARG, "split sizes '%s': expected three numbers "
                            "(train,val,test), got %d", s, n);
    mp_status st = mp_split_sizes_check(v);
    if (st != MP_OK)
        return st;
    memcpy(sizes, v, sizeof v);
    return MP_OK;
}

/* ===================================================================== */
/* Result helpers                                                         */
/* ===================================================================== */

void mp_split_free(mp_split *s)
{
    if (!s)
        return;
    for (int k = 0; k < 3; k++)
        mp_free(s->rows[k]);
    memset(s, 0, sizeof *s);
}

/* Allocates the three row arrays for the given counts (at least one slot
 * each, so an empty set still has a non-NULL array). */
static mp_status split_alloc(mp_split *s, const size_t n[3])
{
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 3; k++) {
        s->rows[k] = mp_malloc((n[k] ? n[k] : 1) * sizeof(size_t));
        if (!s->rows[k]) {
            mp_split_free(s);
            return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu rows)", n[k]);
        }
    }
    return MP_OK;
}

mp_status mp_split_label_rows(const mp_split *s, size_t n_total, signed char *set_of_row)
{
    memset(set_of_row, -1, n_total);
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < s->n[k]; i++) {
            size_t r = s->rows[k][i];
            if (r >= n_total)
                return mp_error_set(MP_ERR_ARG, "split: row %zu is outside the %zu rows of "
                                    "the data", r, n_total);
            if (set_of_row[r] >= 0)
                return mp_error_set(MP_ERR_ARG, "split: row %zu is in two sets", r);
            set_of_row[r] = (signed char)k;
        }
    return MP_OK;
}

/* Python's int(x) for a non-negative double, clamped to n (Python's slices
 * clamp the same way when sizes sum to a hair above 1). */
static size_t py_int_clamped(double x, size_t n)
{
    if (!(x > 0))
        return 0;
    if (x >= (double)n)
        return n;
    return (size_t)x;
}

/* ===================================================================== */
/* random and cv                                                          */
/* ===================================================================== */

static mp_status split_random(mp_split *out, size_t n, const mp_split_opts *o)
{
    size_t *perm = mp_malloc((n ? n : 1) * sizeof *perm);
    if (!perm)
        return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu rows)", n);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    mp_pyrandom r;
    mp_pyrandom_seed(&r, o->seed);
    mp_pyrandom_shuffle(&r, perm, n);

    /* Chemprop: train_size = int(s0*N), train_val_size = int((s0+s1)*N). */
    size_t a = py_int_clamped(o->sizes[0] * (double)n, n);
    size_t b = py_int_clamped((o->sizes[0] + o->sizes[1]) * (double)n, n);
    if (b < a)
        b = a;
    size_t cnt[3] = { a, b - a, n - b };
    mp_status st = split_alloc(out, cnt);
    if (st == MP_OK) {
        memcpy(out->rows[0], perm, a * sizeof *perm);
        memcpy(out->rows[1], perm + a, (b - a) * sizeof *perm);
        memcpy(out->rows[2], perm + b, (n - b) * sizeof *perm);
        memcpy(out->n, cnt, sizeof cnt);
    }
    mp_free(perm);
    return st;
}

static mp_status split_cv(mp_split *out, size_t n, const mp_split_opts *o)
{
    if (o->n_folds < 2 || (size_t)o->n_folds > n)
        return mp_error_set(MP_ERR_ARG, "cross-validation needs between 2 and the number of "
                            "valid molecules (%zu) folds, got %d", n, o->n_folds);
    size_t k = (size_t)o->n_folds;
    size_t *fold = mp_malloc(n * sizeof *fold);
    if (!fold)
        return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu rows)", n);
    /* np.tile(arange(k), ...)[:N] shuffled by Random(0): the seed only picks
     * which folds are test and val. */
    for (size_t i = 0; i < n; i++)
        fold[i] = i % k;
    mp_pyrandom r;
    mp_pyrandom_seed(&r, 0);
    mp_pyrandom_shuffle(&r, fold, n);

    size_t test_fold = (size_t)(o->seed % k), val_fold = (size_t)((o->seed % k + 1) % k);
    int use_test = o->type == MP_SPLIT_CV;
    signed char *set = mp_malloc(n);
    if (!set) {
        mp_free(fold);
        return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu rows)", n);
    }
    size_t cnt[3] = { 0, 0, 0 };
    for (size_t i = 0; i < n; i++) {
        int s = (use_test && fold[i] == test_fold) ? MP_SET_TEST
              : fold[i] == val_fold                ? MP_SET_VAL
                                                   : MP_SET_TRAIN;
        set[i] = (signed char)s;
        cnt[s]++;
    }
    mp_status st = split_alloc(out, cnt);
    if (st == MP_OK)
        for (size_t i = 0; i < n; i++)
            out->rows[(int)set[i]][out->n[(int)set[i]]++] = i;
    mp_free(set);
    mp_free(fold);
    return st;
}

/* ===================================================================== */
/* CPython set iteration order                                            */
/* ===================================================================== */

/*
 * Chemprop keeps each scaffold's positions in a Python set and appends the
 * set to a list, so the list order is the set's iteration order: the order of
 * the set's hash-table slots.  For ints hash(i) = i, and the table evolves
 * deterministically (CPython 3.7+, Objects/setobject.c as documented there:
 * 8 slots to start; a key goes to slot hash & mask, else the next of up to 9
 * following slots when they exist, else the probe moves on to
 * (i*5 + 1 + perturb) & mask with perturb = hash >> 5 each round; after an
 * insert that leaves fill*5 >= mask*3 the table is rebuilt with the smallest
 * power of two > used*4 (used*2 above 50,000 entries) by re-inserting the
 * old slots in slot order).  Checked against CPython 3.11 on random sets.
 */

#define PYSET_LINEAR_PROBES 9
#define PYSET_PERTURB_SHIFT 5

/* slot holds key+1, 0 = empty */
static void pyset_place(size_t *tab, size_t mask, size_t key)
{
    size_t perturb = key, i = key & mask;
    for (;;) {
        if (!tab[i]) {
            tab[i] = key + 1;
            return;
        }
        if (i + PYSET_LINEAR_PROBES <= mask)
            for (size_t j = 1; j <= PYSET_LINEAR_PROBES; j++)
                if (!tab[i + j]) {
                    tab[i + j] = key + 1;
                    return;
                }
        perturb >>= PYSET_PERTURB_SHIFT;
        i = (i * 5 + 1 + perturb) & mask;
    }
}

/* The table size a set reaches after n inserts (no deletions). */
static size_t pyset_final_size(size_t n)
{
    size_t size = 8;
    for (size_t used = 1; used <= n; used++)
        if (used * 5 >= (size - 1) * 3) {
            size_t want = used > 50000 ? used * 2 : used * 4, ns = 8;
            while (ns <= want)
                ns <<= 1;
            size = ns;
        }
    return size;
}

/*
 * Reorders keys[0..n) (distinct, added to the set in this order) into the
 * set's iteration order.  tab/tab2 are scratch tables of at least
 * pyset_final_size(n) entries.
 */
static void pyset_order(size_t *keys, size_t n, size_t *tab, size_t *tab2)
{
    size_t mask = 7;
    memset(tab, 0, 8 * sizeof *tab);
    for (size_t used = 1; used <= n; used++) {
        pyset_place(tab, mask, keys[used - 1]);
        if (used * 5 >= mask * 3) {
            size_t want = used > 50000 ? used * 2 : used * 4, ns = 8;
            while (ns <= want)
                ns <<= 1;
            memset(tab2, 0, ns * sizeof *tab2);
            for (size_t i = 0; i <= mask; i++)
                if (tab[i])
                    pyset_place(tab2, ns - 1, tab[i] - 1);
            size_t *t = tab;
            tab = tab2;
            tab2 = t;
            mask = ns - 1;
        }
    }
    size_t m = 0;
    for (size_t i = 0; i <= mask; i++)
        if (tab[i])
            keys[m++] = tab[i] - 1;
    MP_ASSERT(m == n);
}

/* ===================================================================== */
/* scaffold_balanced                                                      */
/* ===================================================================== */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

typedef struct {
    size_t n_groups;
    size_t *group_of;     /* n: group of each position (by first appearance)   */
    size_t *start;        /* n_groups+1: members of g = member[start[g]..start[g+1]) */
    size_t *member;       /* n: positions, each group in set iteration order     */
} scaffold_groups;

static void groups_free(scaffold_groups *g)
{
    mp_free(g->group_of);
    mp_free(g->start);
    mp_free(g->member);
    memset(g, 0, sizeof *g);
}

/* Groups positions by scaffold string, numbering groups by first appearance
 * (the order of Chemprop's defaultdict). */
static mp_status group_scaffolds(scaffold_groups *g, const size_t *rows, size_t n,
                                 const char *const *scaf)
{
    memset(g, 0, sizeof *g);
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    size_t *slot = mp_malloc(cap * sizeof *slot);         /* group+1, 0 = empty */
    size_t *first = mp_malloc((n ? n : 1) * sizeof *first); /* a position of each group */
    g->group_of = mp_malloc((n ? n : 1) * sizeof *g->group_of);
    g->member = mp_malloc((n ? n : 1) * sizeof *g->member);
    g->start = mp_malloc((n + 1) * sizeof *g->start);
    if (!slot || !first || !g->group_of || !g->member || !g->start) {
        mp_free(slot);
        mp_free(first);
        groups_free(g);
        return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu rows)", n);
    }
    memset(slot, 0, cap * sizeof *slot);
    for (size_t i = 0; i < n; i++) {
        const char *s = scaf[rows[i]];
        size_t h = (size_t)hash_str(s) & (cap - 1);
        for (;;) {
            if (!slot[h]) {
                first[g->n_groups] = i;
                slot[h] = ++g->n_groups;
                g->group_of[i] = g->n_groups - 1;
                break;
            }
            size_t gi = slot[h] - 1;
            if (!strcmp(scaf[rows[first[gi]]], s)) {
                g->group_of[i] = gi;
                break;
            }
            h = (h + 1) & (cap - 1);
        }
    }
    mp_free(slot);
    mp_free(first);

    /* CSR by group; positions land ascending, the order they were added. */
    memset(g->start, 0, (g->n_groups + 1) * sizeof *g->start);
    for (size_t i = 0; i < n; i++)
        g->start[g->group_of[i] + 1]++;
    size_t biggest = 0;
    for (size_t k = 0; k < g->n_groups; k++) {
        if (g->start[k + 1] > biggest)
            biggest = g->start[k + 1];
        g->start[k + 1] += g->start[k];
    }
    size_t *fillp = mp_malloc((g->n_groups ? g->n_groups : 1) * sizeof *fillp);
    size_t tsize = pyset_final_size(biggest);
    size_t *tab = mp_malloc(tsize * sizeof *tab), *tab2 = mp_malloc(tsize * sizeof *tab2);
    if (!fillp || !tab || !tab2) {
        mp_free(fillp);
        mp_free(tab);
        mp_free(tab2);
        groups_free(g);
        return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu rows)", n);
    }
    memcpy(fillp, g->start, g->n_groups * sizeof *fillp);
    for (size_t i = 0; i < n; i++)
        g->member[fillp[g->group_of[i]]++] = i;
    for (size_t k = 0; k < g->n_groups; k++)
        pyset_order(g->member + g->start[k], g->start[k + 1] - g->start[k], tab, tab2);
    mp_free(fillp);
    mp_free(tab);
    mp_free(tab2);
    return MP_OK;
}

static mp_status split_scaffold(mp_split *out, const size_t *rows, size_t n,
                                const char *const *scaf, const mp_split_opts *o)
{
    if (!scaf && n)
        return mp_error_set(MP_ERR_ARG, "scaffold_balanced split needs the scaffold of "
                            "every molecule (none were given)");
    for (size_t i = 0; i < n; i++)
        if (!scaf[rows[i]])
            return mp_error_set(MP_ERR_ARG, "scaffold_balanced split: row %zu has no "
                                "scaffold (an invalid molecule among the candidates?)",
                                rows[i]);
    scaffold_groups g;
    mp_status st = group_scaffolds(&g, rows, n, scaf);
    if (st != MP_OK)
        return st;

    /* Target sizes stay floats, as in Chemprop. */
    double dn = (double)n;
    double train_size = o->sizes[0] * dn, val_size = o->sizes[1] * dn,
           test_size = o->sizes[2] * dn;

    size_t ng = g.n_groups;
    size_t *order = mp_malloc((ng ? ng : 1) * sizeof *order);
    signed char *set = mp_malloc(ng ? ng : 1);
    if (!order || !set) {
        mp_free(order);
        mp_free(set);
        groups_free(&g);
        return mp_error_set(MP_ERR_NOMEM, "split: out of memory (%zu scaffolds)", ng);
    }
    /* Big groups (bigger than half the val or test target) first, in
     * dictionary order, then the small ones; each list shuffled in turn by
     * one Random(seed). */
    size_t n_big = 0;
    for (size_t k = 0; k < ng; k++) {
        double len = (double)(g.start[k + 1] - g.start[k]);
        if (len > val_size / 2 || len > test_size / 2)
            order[n_big++] = k;
    }
    size_t n_small = n_big;
    for (size_t k = 0; k < ng; k++) {
        double len = (double)(g.start[k + 1] - g.start[k]);
        if (!(len > val_size / 2 || len > test_size / 2))
            order[n_small++] = k;
    }
    mp_pyrandom r;
    mp_pyrandom_seed(&r, o->seed);
    mp_pyrandom_shuffle(&r, order, n_big);
    mp_pyrandom_shuffle(&r, order + n_big, ng - n_big);

    size_t cnt[3] = { 0, 0, 0 };
    for (size_t j = 0; j < ng; j++) {
        size_t k = order[j], len = g.start[k + 1] - g.start[k];
        int s;
        if ((double)(cnt[0] + len) <= train_size)
            s = MP_SET_TRAIN;
        else if ((double)(cnt[1] + len) <= val_size)
            s = MP_SET_VAL;
        else
            s = MP_SET_TEST;
        set[k] = (signed char)s;
        cnt[s] += len;
    }
    st = split_alloc(out, cnt);
    if (st == MP_OK)
        for (size_t j = 0; j < ng; j++) {
            size_t k = order[j], len = g.start[k + 1] - g.start[k];
            int s = set[k];
            memcpy(out->rows[s] + out->n[s], g.member + g.start[k], len * sizeof(size_t));
            out->n[s] += len;
        }
    mp_free(order);
    mp_free(set);
    groups_free(&g);
    return st;
}

/* ===================================================================== */
/* Entry point                                                            */
/* ===================================================================== */

mp_status mp_split_make(mp_split *out, const size_t *rows, size_t n_rows,
                        const char *const *scaffold_of_row, const mp_split_opts *opts)
{
    memset(out, 0, sizeof *out);
    if (!opts)
        return mp_error_set(MP_ERR_ARG, "split: no options given");
    if (n_rows && !rows)
        return mp_error_set(MP_ERR_ARG, "split: no rows given");
    for (size_t i = 1; i < n_rows; i++)
        if (rows[i] <= rows[i - 1])
            return mp_error_set(MP_ERR_ARG, "split: candidate rows must be strictly "
                                "ascending (row %zu follows row %zu)", rows[i], rows[i - 1]);
    mp_status st;
    switch (opts->type) {
    case MP_SPLIT_RANDOM:
        if ((st = mp_split_sizes_check(opts->sizes)) != MP_OK)
            return st;
        st = split_random(out, n_rows, opts);
        break;
    case MP_SPLIT_SCAFFOLD_BALANCED:
        if ((st = mp_split_sizes_check(opts->sizes)) != MP_OK)
            return st;
        st = split_scaffold(out, rows, n_rows, scaffold_of_row, opts);
        break;
    case MP_SPLIT_CV:
    case MP_SPLIT_CV_NO_TEST:
        st = split_cv(out, n_rows, opts);
        break;
    default:
        return mp_error_set(MP_ERR_ARG, "split: unknown split type %d", (int)opts->type);
    }
    if (st != MP_OK) {
        mp_split_free(out);
        return st;
    }
    /* Positions -> the caller's row ids. */
    MP_ASSERT(out->n[0] + out->n[1] + out->n[2] == n_rows);
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < out->n[k]; i++)
            out->rows[k][i] = rows[out->rows[k][i]];
    return MP_OK;
}
