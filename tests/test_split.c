/*
 * test_split.c - splits against Chemprop v1.6.1's own output: the sets of
 * ../shared/fixtures/chemprop_v1/splits.tsv and the ordered lists of
 * tests/fixtures/chemprop_v1_split_order.tsv (see tests/fixtures/README.md);
 * then the invariants (partition, determinism, sizes edge cases, cv folds),
 * errors, allocation failures, and `molprop split` end to end.
 */
#include "test.h"
#include "internal.h"   /* every module header */
#include "data/split.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* ===================================================================== */
/* Fixture reading                                                        */
/* ===================================================================== */

/* One line of a split fixture: the set's rows as listed. */
typedef struct {
    char    dataset[32], split[32], sizes[64], set[8];
    uint64_t seed;
    int      folds;
    size_t  *rows;
    size_t   n;
} fix_row;

typedef struct {
    fix_row *r;
    size_t   n;
} fix_table;

static void fix_free(fix_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->r[i].rows);
    free(t->r);
    memset(t, 0, sizeof *t);
}

static int parse_rows(const char *s, size_t **rows, size_t *n)
{
    size_t cap = 64, k = 0;
    size_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    while (*s && *s != '\n') {
        char *end;
        unsigned long long x = strtoull(s, &end, 10);
        if (end == s) {
            free(v);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            size_t *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (size_t)x;
        s = end;
        if (*s == ',')
            s++;
    }
    *rows = v;
    *n = k;
    return 0;
}

/* Reads a fixture with columns dataset, split, [sizes,] seed, [folds,] set,
 * rows (has_sizes selects the wider layout of our order fixture).  Returns 0
 * on success. */
static int fix_load(fix_table *t, const char *path, int has_sizes)
{
    memset(t, 0, sizeof *t);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    char *line = NULL;
    size_t cap = 0, tcap = 0;
    int first = 1, bad = 0;
    while (getline(&line, &cap, fp) > 0) {
        if (first) {
            first = 0;
            continue;
        }
        char *f[7];
        int nf = 0;
        char *p = line;
        f[nf++] = p;
        while ((p = strchr(p, '\t')) && nf < 7) {
            *p++ = 0;
            f[nf++] = p;
        }
        if (nf != (has_sizes ? 7 : 5)) {
            bad = 1;
            break;
        }
        if (t->n == tcap) {
            tcap = tcap ? 2 * tcap : 64;
            t->r = realloc(t->r, tcap * sizeof *t->r);
        }
        fix_row *r = &t->r[t->n];
        memset(r, 0, sizeof *r);
        int i = 0;
        snprintf(r->dataset, sizeof r->dataset, "%s", f[i++]);
        snprintf(r->split, sizeof r->split, "%s", f[i++]);
        if (has_sizes)
            snprintf(r->sizes, sizeof r->sizes, "%s", f[i++]);
        else
            snprintf(r->sizes, sizeof r->sizes, "0.8,0.1,0.1");
        r->seed = strtoull(f[i++], NULL, 10);
        r->folds = has_sizes ? atoi(f[i++]) : 1;
        snprintf(r->set, sizeof r->set, "%s", f[i++]);
        if (parse_rows(f[i], &r->rows, &r->n)) {
            bad = 1;
            break;
        }
        t->n++;
    }
    free(line);
    fclose(fp);
    if (bad || t->n % 3) {
        fix_free(t);
        return -1;
    }
    return 0;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* ===================================================================== */
/* Scaffolds of a benchmark dataset                                       */
/* ===================================================================== */

static char         scaf_name[32];
static mp_dataset  *scaf_data;
static mp_features *scaf_feat;

/* Scaffolds of every row of $MOLPROP_DATA_MIRROR/<name>.csv.gz as
 * mp_featurize computes them (NULL for an invalid molecule), kept for the
 * next call with the same name.  NULL if the file cannot be read. */
static char **dataset_scaffolds(const char *name, size_t *n)
{
    if (scaf_feat && !strcmp(scaf_name, name)) {
        *n = scaf_data->n_rows;
        return scaf_feat->scaffold;
    }
    mp_features_free(scaf_feat);
    mp_dataset_free(scaf_data);
    scaf_feat = NULL;
    scaf_data = NULL;
    scaf_name[0] = 0;
    const char *mirror = getenv("MOLPROP_DATA_MIRROR");
    char path[2048];
    snprintf(path, sizeof path, "%s/%s.csv.gz", mirror && *mirror ? mirror : "../shared/datasets",
             name);
    mp_column_spec spec = { .no_targets = 1 };
    if (mp_dataset_load(&scaf_data, path, &spec) != MP_OK)
        return NULL;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .scaffolds = 1 };
    if (mp_featurize(&scaf_feat, (const char *const *)scaf_data->smiles,
                     (int32_t)scaf_data->n_rows, &o) != MP_OK) {
        mp_dataset_free(scaf_data);
        scaf_data = NULL;
        return NULL;
    }
    snprintf(scaf_name, sizeof scaf_name, "%s", name);
    *n = scaf_data->n_rows;
    return scaf_feat->scaffold;
}

/* Frees the cached scaffolds (so the leak checker sees nothing left). */
static void dataset_scaffolds_release(void)
{
    mp_features_free(scaf_feat);
    mp_dataset_free(scaf_data);
    scaf_feat = NULL;
    scaf_data = NULL;
    scaf_name[0] = 0;
}

static size_t *iota(size_t n)
{
    size_t *r = malloc((n ? n : 1) * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = i;
    return r;
}

static int set_index(const char *name)
{
    return !strcmp(name, "train") ? 0 : !strcmp(name, "val") ? 1 : !strcmp(name, "test") ? 2 : -1;
}

/* ===================================================================== */
/* Chemprop's own splits                                                  */
/* ===================================================================== */

/* Every set of splits.tsv (esol, bbbp, lipo x random, scaffold_balanced x
 * seeds 0-2), compared as sorted sets. */
MP_TEST(split_matches_chemprop_fixture_sets)
{
    fix_table t;
    CHECK_MSG(fix_load(&t, mp_test_shared("fixtures/chemprop_v1/splits.tsv"), 0) == 0,
              "cannot read %s", mp_test_shared("fixtures/chemprop_v1/splits.tsv"));
    CHECK(t.n == 54);
    int checked_scaffold = 0;
    for (size_t i = 0; i < t.n; i += 3) {
        fix_row *r = &t.r[i];
        size_t n = r[0].n + r[1].n + r[2].n;
        mp_split_opts o = mp_split_opts_default();
        o.seed = r->seed;
        char **scaf = NULL;
        if (!strcmp(r->split, "scaffold_balanced")) {
            o.type = MP_SPLIT_SCAFFOLD_BALANCED;
            size_t ns = 0;
            scaf = dataset_scaffolds(r->dataset, &ns);
            if (!scaf) {
                fix_free(&t);
                MP_FAIL("no scaffolds for %s", r->dataset);
            }
            if (ns != n) {
                fix_free(&t);
                MP_FAIL("%s: %zu molecules, fixture has %zu rows", r->dataset, ns, n);
            }
            checked_scaffold++;
        } else {
            CHECK_EQ_STR(r->split, "random");
        }
        size_t *rows = iota(n);
        mp_split s;
        mp_status st = mp_split_make(&s, rows, n, (const char *const *)scaf, &o);
        free(rows);
        if (st != MP_OK) {
            fix_free(&t);
            MP_FAIL("%s %s seed %llu: %s", r->dataset, r->split,
                    (unsigned long long)r->seed, mp_error_message());
        }
        for (int k = 0; k < 3; k++) {
            int ok = set_index(r[k].set) == k && s.n[k] == r[k].n;
            if (ok) {
                qsort(s.rows[k], s.n[k], sizeof(size_t), cmp_size);
                ok = !memcmp(s.rows[k], r[k].rows, s.n[k] * sizeof(size_t));
            }
            if (!ok) {
                size_t got = s.n[k];
                mp_split_free(&s);
                fix_free(&t);
                MP_FAIL("%s %s seed %llu: set %d differs (%zu rows, want %zu)",
                        r->dataset, r->split, (unsigned long long)r->seed, k, got, r[k].n);
            }
        }
        mp_split_free(&s);
    }
    fix_free(&t);
    dataset_scaffolds_release();
    CHECK_EQ_INT(checked_scaffold, 9);
}

/* Chemprop's lists in Chemprop's order (training order), including the
 * sizes edge cases (a zero val or test fraction), a seed above 2^32, cv and
 * cv-no-test. */
MP_TEST(split_matches_chemprop_order)
{
    fix_table t;
    const char *path = "tests/fixtures/chemprop_v1_split_order.tsv";
    CHECK_MSG(fix_load(&t, path, 1) == 0, "cannot read %s", path);
    CHECK(t.n >= 30);
    int n_cases = 0;
    for (size_t i = 0; i < t.n; i += 3) {
        fix_row *r = &t.r[i];
        size_t n = r[0].n + r[1].n + r[2].n;
        mp_split_opts o = mp_split_opts_default();
        o.seed = r->seed;
        o.n_folds = r->folds;
        if (mp_split_type_parse(r->split, &o.type) != MP_OK ||
            mp_split_sizes_parse(r->sizes, o.sizes) != MP_OK) {
            fix_free(&t);
            MP_FAIL("fixture line %zu: %s", i + 2, mp_error_message());
        }
        char **scaf = NULL;
        if (o.type == MP_SPLIT_SCAFFOLD_BALANCED) {
            size_t ns = 0;
            scaf = dataset_scaffolds(r->dataset, &ns);
            if (!scaf || ns != n) {
                fix_free(&t);
                MP_FAIL("no scaffolds for %s", r->dataset);
            }
        }
        size_t *rows = iota(n);
        mp_split s;
        mp_status st = mp_split_make(&s, rows, n, (const char *const *)scaf, &o);
        free(rows);
        if (st != MP_OK) {
            fix_free(&t);
            MP_FAIL("%s %s: %s", r->split, r->sizes, mp_error_message());
        }
        for (int k = 0; k < 3; k++) {
            if (set_index(r[k].set) != k || s.n[k] != r[k].n ||
                memcmp(s.rows[k], r[k].rows, s.n[k] * sizeof(size_t))) {
                size_t got = s.n[k];
                mp_split_free(&s);
                fix_free(&t);
                MP_FAIL("%s sizes %s seed %llu folds %d: set %d differs (%zu rows, want %zu)",
                        r->split, r->sizes, (unsigned long long)r->seed, r->folds, k, got,
                        r[k].n);
            }
        }
        mp_split_free(&s);
        n_cases++;
    }
    fix_free(&t);
    dataset_scaffolds_release();
    CHECK_EQ_INT(n_cases, 10);
}

/* A scaffold group's rows come out in CPython's set iteration order; the
 * expected lists were printed by CPython 3.11 (list(set(xs)) for ascending
 * xs). */
MP_TEST(split_scaffold_group_in_python_set_order)
{
    static const size_t a_members[40] = {
        0, 1, 3, 7, 13, 18, 26, 28, 32, 33, 35, 40, 46, 53, 55, 63, 65, 71, 91, 95,
        97, 99, 104, 113, 119, 120, 135, 139, 146, 158, 159, 166, 167, 176, 182, 186,
        189, 193, 194, 197 };
    static const size_t a_order[40] = {
        0, 1, 3, 7, 135, 139, 13, 18, 146, 26, 28, 158, 159, 32, 33, 35, 166, 167, 40,
        46, 176, 53, 182, 55, 186, 189, 63, 65, 193, 194, 197, 71, 91, 95, 97, 99, 104,
        113, 119, 120 };
    const char *scaf[200];
    for (int i = 0; i < 200; i++)
        scaf[i] = "c1ccccc1";
    for (int i = 0; i < 40; i++)
        scaf[a_members[i]] = "A";
    size_t *rows = iota(200);
    mp_split_opts o = mp_split_opts_default();
    o.type = MP_SPLIT_SCAFFOLD_BALANCED;
    o.sizes[0] = 1, o.sizes[1] = 0, o.sizes[2] = 0;
    mp_split s;
    mp_status st = mp_split_make(&s, rows, 200, scaf, &o);
    free(rows);
    CHECK_OK(st);
    CHECK_EQ_INT(s.n[0], 200);
    /* Two groups, both in train: "A" is either first or last. */
    size_t off = s.rows[0][0] == a_order[0] ? 0 : 160;
    int same = 1;
    for (int i = 0; i < 40; i++)
        same &= s.rows[0][off + i] == a_order[i];
    mp_split_free(&s);
    CHECK(same);

    /* {5, 8}: 8 lands in slot 0, so it comes first. */
    const char *scaf2[9] = { "B", "B", "B", "B", "B", "A", "B", "B", "A" };
    rows = iota(9);
    o.seed = 0;
    st = mp_split_make(&s, rows, 9, scaf2, &o);
    free(rows);
    CHECK_OK(st);
    int found = 0;
    for (size_t i = 0; i + 1 < s.n[0]; i++)
        if (s.rows[0][i] == 8 && s.rows[0][i + 1] == 5)
            found = 1;
    mp_split_free(&s);
    CHECK(found);
}

/* ===================================================================== */
/* Invariants                                                             */
/* ===================================================================== */

/* Candidate rows with gaps (invalid molecules left out): the split of the
 * positions, mapped through rows[], and rows outside the list in no set. */
MP_TEST(split_candidate_rows_map_positions)
{
    enum { N = 300, TOTAL = 1000 };
    size_t rows[N], pos[N];
    const char *scaf_row[TOTAL], *scaf_pos[N];
    static const char *names[] = { "", "c1ccccc1", "C1CC1", "c1ccncc1", "C1CCCCC1" };
    mp_rng g;
    mp_rng_seed(&g, 11, 0);
    size_t r = 0;
    for (int i = 0; i < N; i++) {
        r += 1 + mp_rng_below(&g, 5);
        rows[i] = r;
        pos[i] = (size_t)i;
        scaf_pos[i] = names[mp_rng_below(&g, 5)];
    }
    CHECK(r < TOTAL);
    for (int i = 0; i < TOTAL; i++)
        scaf_row[i] = NULL;
    for (int i = 0; i < N; i++)
        scaf_row[rows[i]] = scaf_pos[i];
    const mp_split_type types[3] = { MP_SPLIT_RANDOM, MP_SPLIT_SCAFFOLD_BALANCED, MP_SPLIT_CV };
    for (int t = 0; t < 3; t++) {
        mp_split_opts o = mp_split_opts_default();
        o.type = types[t];
        o.seed = 3;
        mp_split a, b;
        CHECK_OK(mp_split_make(&a, rows, N, scaf_row, &o));
        mp_status st = mp_split_make(&b, pos, N, scaf_pos, &o);
        if (st != MP_OK) {
            mp_split_free(&a);
            CHECK_OK(st);
        }
        int same = 1;
        for (int k = 0; k < 3; k++) {
            same &= a.n[k] == b.n[k];
            for (size_t i = 0; same && i < a.n[k]; i++)
                same &= a.rows[k][i] == rows[b.rows[k][i]];
        }
        signed char lab[TOTAL];
        st = mp_split_label_rows(&a, TOTAL, lab);
        int outside_ok = 1;
        size_t j = 0;
        for (size_t x = 0; x < TOTAL; x++) {
            int listed = j < N && rows[j] == x;
            if (listed)
                j++;
            outside_ok &= listed ? lab[x] >= 0 : lab[x] == -1;
        }
        mp_split_free(&a);
        mp_split_free(&b);
        CHECK_OK(st);
        CHECK_MSG(same, "type %d: rows are not the positions' split mapped", t);
        CHECK(outside_ok);
    }
}

/* Every row in exactly one set, the same seed gives the same split, another
 * seed another split; for every type and a few sizes. */
MP_TEST(split_partition_and_determinism)
{
    enum { N = 517 };
    size_t *rows = iota(N);
    const char *scaf[N];
    char names[40][16];
    for (int i = 0; i < 40; i++)
        snprintf(names[i], sizeof names[i], "S%d", i);
    mp_rng g;
    mp_rng_seed(&g, 5, 0);
    for (int i = 0; i < N; i++) /* skewed group sizes: some big, many small */
        scaf[i] = names[mp_rng_below(&g, 1 + mp_rng_below(&g, 40))];
    const double sizes[4][3] = { { 0.8, 0.1, 0.1 }, { 0.5, 0.3, 0.2 }, { 0.8, 0.2, 0 }, { 0, 0, 1 } };
    const mp_split_type types[4] = { MP_SPLIT_RANDOM, MP_SPLIT_SCAFFOLD_BALANCED, MP_SPLIT_CV,
                                     MP_SPLIT_CV_NO_TEST };
    for (int t = 0; t < 4; t++)
        for (int z = 0; z < 4; z++) {
            mp_split_opts o = mp_split_opts_default();
            o.type = types[t];
            memcpy(o.sizes, sizes[z], sizeof o.sizes);
            o.n_folds = 4;
            mp_split a, b, c;
            o.seed = 42;
            CHECK_OK(mp_split_make(&a, rows, N, scaf, &o));
            CHECK_OK(mp_split_make(&b, rows, N, scaf, &o));
            o.seed = 43;
            CHECK_OK(mp_split_make(&c, rows, N, scaf, &o));
            signed char lab[N];
            mp_status st = mp_split_label_rows(&a, N, lab);
            int all = 1, same = 1, differs = 0;
            for (int i = 0; i < N; i++)
                all &= lab[i] >= 0;
            for (int k = 0; k < 3; k++) {
                same &= a.n[k] == b.n[k] && !memcmp(a.rows[k], b.rows[k], a.n[k] * sizeof(size_t));
                differs |= a.n[k] != c.n[k] || memcmp(a.rows[k], c.rows[k], a.n[k] * sizeof(size_t));
            }
            size_t n0 = a.n[0], n1 = a.n[1], n2 = a.n[2];
            mp_split_free(&a);
            mp_split_free(&b);
            mp_split_free(&c);
            CHECK_OK(st);
            CHECK_MSG(all && n0 + n1 + n2 == N, "type %d sizes %d: not a partition", t, z);
            CHECK_MSG(same, "type %d sizes %d: not deterministic", t, z);
            CHECK_MSG(differs, "type %d sizes %d: seed has no effect", t, z);
            if (types[t] == MP_SPLIT_RANDOM) {
                /* int(s0*N), int((s0+s1)*N) */
                CHECK_EQ_INT(n0, (size_t)(sizes[z][0] * N));
                CHECK_EQ_INT(n0 + n1, (size_t)((sizes[z][0] + sizes[z][1]) * N));
            }
            if (types[t] == MP_SPLIT_SCAFFOLD_BALANCED && z < 3) {
                CHECK(n0 <= sizes[z][0] * N);
                CHECK(n1 <= sizes[z][1] * N);
            }
            if (types[t] == MP_SPLIT_CV_NO_TEST)
                CHECK_EQ_INT(n2, 0);
        }
    free(rows);
}

/* Scaffold groups never straddle two sets. */
MP_TEST(split_scaffold_groups_stay_together)
{
    enum { N = 400 };
    size_t *rows = iota(N);
    const char *scaf[N];
    char names[60][16];
    for (int i = 0; i < 60; i++)
        snprintf(names[i], sizeof names[i], "G%d", i);
    mp_rng g;
    mp_rng_seed(&g, 9, 0);
    for (int i = 0; i < N; i++)
        scaf[i] = names[mp_rng_below(&g, 1 + mp_rng_below(&g, 60))];
    for (uint64_t seed = 0; seed < 5; seed++) {
        mp_split_opts o = mp_split_opts_default();
        o.type = MP_SPLIT_SCAFFOLD_BALANCED;
        o.seed = seed;
        mp_split s;
        CHECK_OK(mp_split_make(&s, rows, N, scaf, &o));
        signed char lab[N];
        mp_status st = mp_split_label_rows(&s, N, lab);
        mp_split_free(&s);
        CHECK_OK(st);
        int set_of_group[60];
        for (int i = 0; i < 60; i++)
            set_of_group[i] = -1;
        for (int i = 0; i < N; i++) {
            int gi = atoi(scaf[i] + 1);
            if (set_of_group[gi] < 0)
                set_of_group[gi] = lab[i];
            CHECK_MSG(set_of_group[gi] == lab[i], "scaffold %s is in two sets", scaf[i]);
        }
    }
    free(rows);
}

/* cv: the test folds of seeds 0..k-1 partition the rows, fold sizes differ
 * by at most one, val of seed s is test of seed s+1, and seed s+k = seed s. */
MP_TEST(split_cv_folds_partition)
{
    enum { N = 103, K = 7 };
    size_t *rows = iota(N);
    int seen[N];
    memset(seen, 0, sizeof seen);
    size_t fold_min = N, fold_max = 0;
    mp_split prev;
    memset(&prev, 0, sizeof prev);
    for (uint64_t seed = 0; seed <= K; seed++) {
        mp_split_opts o = mp_split_opts_default();
        o.type = MP_SPLIT_CV;
        o.n_folds = K;
        o.seed = seed;
        mp_split s;
        CHECK_OK(mp_split_make(&s, rows, N, NULL, &o));
        int ok_chain = 1;
        if (seed > 0) /* val(seed-1) == test(seed) */
            ok_chain = prev.n[1] == s.n[2] &&
                       !memcmp(prev.rows[1], s.rows[2], s.n[2] * sizeof(size_t));
        if (seed < K) {
            for (size_t i = 0; i < s.n[2]; i++)
                seen[s.rows[2][i]]++;
            if (s.n[2] < fold_min) fold_min = s.n[2];
            if (s.n[2] > fold_max) fold_max = s.n[2];
        }
        int ascending = 1;
        for (int k = 0; k < 3; k++)
            for (size_t i = 1; i < s.n[k]; i++)
                ascending &= s.rows[k][i] > s.rows[k][i - 1];
        mp_split_free(&prev);
        prev = s;
        CHECK(ok_chain);
        CHECK(ascending);
    }
    /* seed K wraps to seed 0's folds: its test fold is seed 0's */
    int wrap = prev.n[2] > 0;
    for (size_t i = 0; i < prev.n[2]; i++)
        wrap &= seen[prev.rows[2][i]] == 1;
    mp_split_free(&prev);
    free(rows);
    for (int i = 0; i < N; i++)
        CHECK_MSG(seen[i] == 1, "row %d is in %d test folds", i, seen[i]);
    CHECK(fold_max - fold_min <= 1);
    CHECK(wrap);
}

/* Zero fractions behave as in Chemprop: sets may be empty; all-in-one works. */
MP_TEST(split_sizes_with_zeros)
{
    enum { N = 250 };
    size_t *rows = iota(N);
    const char *scaf[N];
    for (int i = 0; i < N; i++)
        scaf[i] = (i % 3) ? "c1ccccc1" : (i % 2 ? "C1CC1" : "");
    mp_split s;
    mp_split_opts o = mp_split_opts_default();
    const double cases[3][3] = { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } };
    for (int t = 0; t < 2; t++)
        for (int c = 0; c < 3; c++) {
            o.type = t ? MP_SPLIT_SCAFFOLD_BALANCED : MP_SPLIT_RANDOM;
            memcpy(o.sizes, cases[c], sizeof o.sizes);
            CHECK_OK(mp_split_make(&s, rows, N, scaf, &o));
            size_t n[3] = { s.n[0], s.n[1], s.n[2] };
            mp_split_free(&s);
            /* scaffold: with two targets 0 every group is big and fits
             * only the set with fraction 1 (or, for 0,0,1, none: test) */
            for (int k = 0; k < 3; k++)
                CHECK_EQ_INT(n[k], k == c ? N : 0);
        }
    /* An empty candidate list is a valid, empty split (not for cv). */
    o.type = MP_SPLIT_SCAFFOLD_BALANCED;
    o.sizes[0] = 0.8, o.sizes[1] = 0.1, o.sizes[2] = 0.1;
    CHECK_OK(mp_split_make(&s, NULL, 0, NULL, &o));
    CHECK(s.n[0] == 0 && s.n[1] == 0 && s.n[2] == 0);
    mp_split_free(&s);
    free(rows);
}

/* ===================================================================== */
/* Options and errors                                                     */
/* ===================================================================== */

MP_TEST(split_sizes_parse_cases)
{
    double v[3] = { -1, -1, -1 };
    CHECK_OK(mp_split_sizes_parse("0.8,0.1,0.1", v));
    CHECK(v[0] == 0.8 && v[1] == 0.1 && v[2] == 0.1);
    CHECK_OK(mp_split_sizes_parse(" 0.7 , 0.2,0.1 ", v));
    CHECK(v[0] == 0.7 && v[1] == 0.2 && v[2] == 0.1);
    CHECK_OK(mp_split_sizes_parse("0.8 0.2 0", v));
    CHECK(v[0] == 0.8 && v[1] == 0.2 && v[2] == 0);
    CHECK_OK(mp_split_sizes_parse("1,0,0", v));
    CHECK_OK(mp_split_sizes_parse("0.8,0.1,0.1000005", v));  /* within 1e-6 */
    CHECK(v[2] == 0.1000005);
    static const char *bad[] = {
        "", "0.8,0.1", "0.8,0.1,0.1,0", "0.9,0.1,0.1", "-0.1,0.6,0.5", "a,b,c",
        "nan,0,1", "inf,0,0", "0.8,,0.1", "0.8,0.1,0.1,", "0.8;0.1;0.1", "0.8,0.1,0.10001",
        "1e999,0,0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v[0] = 0.25, v[1] = 0.5, v[2] = 0.25;
        mp_error_clear();
        mp_status st = mp_split_sizes_parse(bad[i], v);
        CHECK_MSG(st == MP_ERR_ARG, "'%s' gave %s", bad[i], mp_status_name(st));
        CHECK_MSG(strstr(mp_error_message(), "split sizes"), "'%s': message '%s'", bad[i],
                  mp_error_message());
        CHECK_MSG(v[0] == 0.25 && v[1] == 0.5 && v[2] == 0.25, "'%s' changed sizes", bad[i]);
    }
    CHECK(mp_split_sizes_parse(NULL, v) == MP_ERR_ARG);
}

MP_TEST(split_type_names)
{
    mp_split_type t;
    const mp_split_type all[4] = { MP_SPLIT_RANDOM, MP_SPLIT_SCAFFOLD_BALANCED, MP_SPLIT_CV,
                                   MP_SPLIT_CV_NO_TEST };
    for (int i = 0; i < 4; i++) {
        CHECK_OK(mp_split_type_parse(mp_split_type_name(all[i]), &t));
        CHECK(t == all[i]);
    }
    CHECK_OK(mp_split_type_parse("cv_no_test", &t));
    CHECK(t == MP_SPLIT_CV_NO_TEST);
    CHECK(mp_split_type_parse("scaffold", &t) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "scaffold_balanced"));
    CHECK(mp_split_type_parse("Random", &t) == MP_ERR_ARG);
    CHECK(mp_split_type_parse(NULL, &t) == MP_ERR_ARG);
}

MP_TEST(split_bad_arguments)
{
    size_t rows[5] = { 0, 1, 2, 3, 4 };
    const char *scaf[5] = { "a", "b", NULL, "a", "c" };
    mp_split s;
    mp_split_opts o = mp_split_opts_default();

    o.type = MP_SPLIT_CV;
    o.n_folds = 1;
    CHECK(mp_split_make(&s, rows, 5, NULL, &o) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "folds"));
    CHECK(s.rows[0] == NULL && s.n[0] == 0);
    o.n_folds = 6;
    CHECK(mp_split_make(&s, rows, 5, NULL, &o) == MP_ERR_ARG);
    o.n_folds = 5;
    CHECK_OK(mp_split_make(&s, rows, 5, NULL, &o));
    CHECK(s.n[0] == 3 && s.n[1] == 1 && s.n[2] == 1);
    mp_split_free(&s);
    mp_split_free(&s);  /* idempotent */

    o = mp_split_opts_default();
    o.type = MP_SPLIT_SCAFFOLD_BALANCED;
    CHECK(mp_split_make(&s, rows, 5, NULL, &o) == MP_ERR_ARG);
    CHECK(mp_split_make(&s, rows, 5, scaf, &o) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "row 2"));
    size_t skip[4] = { 0, 1, 3, 4 };   /* leaving the invalid row out works */
    CHECK_OK(mp_split_make(&s, skip, 4, scaf, &o));
    mp_split_free(&s);

    size_t unsorted[3] = { 0, 3, 1 };
    o.type = MP_SPLIT_RANDOM;
    CHECK(mp_split_make(&s, unsorted, 3, NULL, &o) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "ascending"));
    o.sizes[0] = 0.9;
    CHECK(mp_split_make(&s, rows, 5, NULL, &o) == MP_ERR_ARG);
    o = mp_split_opts_default();
    o.type = (mp_split_type)99;
    CHECK(mp_split_make(&s, rows, 5, NULL, &o) == MP_ERR_ARG);
    CHECK(mp_split_make(&s, rows, 5, NULL, NULL) == MP_ERR_ARG);

    /* label_rows refuses a row out of range or a duplicate */
    size_t a[2] = { 1, 7 }, b[1] = { 1 }, none[1] = { 0 };
    mp_split bad = { { a, b, none }, { 2, 0, 0 } };
    signed char lab[8];
    CHECK(mp_split_label_rows(&bad, 5, lab) == MP_ERR_ARG);
    bad.n[1] = 1;
    CHECK(mp_split_label_rows(&bad, 8, lab) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "two sets"));
}

/* Allocation N fails: a clean MP_ERR_NOMEM, a zeroed result, nothing leaks. */
MP_TEST(split_allocation_failures)
{
    enum { N = 60 };
    size_t *rows = iota(N);
    const char *scaf[N];
    for (int i = 0; i < N; i++)
        scaf[i] = (i % 4) ? "c1ccccc1" : "C1CC1";
    const mp_split_type types[3] = { MP_SPLIT_RANDOM, MP_SPLIT_SCAFFOLD_BALANCED, MP_SPLIT_CV };
    for (int t = 0; t < 3; t++) {
        mp_split_opts o = mp_split_opts_default();
        o.type = types[t];
        int succeeded = 0;
        for (long fail = 0; fail < 40 && !succeeded; fail++) {
            long live = mp_alloc_live();
            mp_split s;
            mp_alloc_fail_after(fail);
            mp_status st = mp_split_make(&s, rows, N, scaf, &o);
            mp_alloc_fail_after(-1);
            if (st == MP_OK) {
                succeeded = 1;
                mp_split_free(&s);
            } else {
                CHECK_MSG(st == MP_ERR_NOMEM, "type %d fail %ld: %s", t, fail, mp_status_name(st));
                CHECK(s.rows[0] == NULL && s.rows[1] == NULL && s.rows[2] == NULL);
            }
            CHECK_MSG(mp_alloc_live() == live, "type %d fail %ld: leak", t, fail);
        }
        CHECK_MSG(succeeded, "type %d never succeeded", t);
    }
    free(rows);
}

/* ===================================================================== */
/* molprop split, end to end                                              */
/* ===================================================================== */

/* Reads every record of a CSV (plain or gz) with our reader; records are
 * joined with \x1f between fields so rows compare as strings. */
typedef struct {
    char  **rec;
    size_t *line;
    size_t  n;
} csv_rows;

static void csv_rows_free(csv_rows *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->rec[i]);
    free(c->rec);
    free(c->line);
    memset(c, 0, sizeof *c);
}

static int csv_rows_read(csv_rows *c, const char *path)
{
    memset(c, 0, sizeof *c);
    mp_csv_reader *r;
    if (mp_csv_open(&r, path) != MP_OK)
        return -1;
    size_t cap = 0;
    for (;;) {
        char **f;
        size_t nf, line;
        if (mp_csv_next(r, &f, &nf, &line) != MP_OK) {
            mp_csv_close(r);
            csv_rows_free(c);
            return -1;
        }
        if (!nf)
            break;
        size_t len = 1;
        for (size_t i = 0; i < nf; i++)
            len += strlen(f[i]) + 1;
        char *s = malloc(len), *p = s;
        for (size_t i = 0; i < nf; i++) {
            size_t l = strlen(f[i]);
            memcpy(p, f[i], l);
            p += l;
            *p++ = i + 1 < nf ? '\x1f' : 0;
        }
        if (c->n == cap) {
            cap = cap ? 2 * cap : 256;
            c->rec = realloc(c->rec, cap * sizeof *c->rec);
            c->line = realloc(c->line, cap * sizeof *c->line);
        }
        c->rec[c->n] = s;
        c->line[c->n++] = line;
    }
    mp_csv_close(r);
    return 0;
}

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    int ok = a && b;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0)
        ok = fwrite(buf, 1, n, b) == n;
    if (a)
        fclose(a);
    if (b && fclose(b))
        ok = 0;
    return ok ? 0 : -1;
}

static int write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return -1;
    fputs(text, fp);
    return fclose(fp);
}

/* Runs `$MOLPROP_BIN split ARGS`, stdout/stderr to files in dir; returns the
 * exit status, or -1 if it could not run. */
static int run_split(const char *dir, const char *args)
{
    const char *bin = getenv("MOLPROP_BIN");
    if (!bin || !*bin)
        return -1;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' split %s >'%s/stdout' 2>'%s/stderr'", bin, args, dir, dir);
    int st = system(cmd);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static int file_contains(const char *path, const char *needle)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = 0;
    fclose(fp);
    return strstr(buf, needle) != NULL;
}

static int dir_is_empty_of_outputs(const char *dir)
{
    static const char *names[] = { "train.csv", "val.csv", "test.csv" };
    char p[2048];
    struct stat sb;
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (stat(p, &sb) == 0)
            return 0;
    }
    /* no temp files either */
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | grep -q '\\.tmp\\.'", dir);
    return system(cmd) != 0;
}

/*
 * Splits a copy of ESOL with the CLI, scaffold_balanced seed 0: the three
 * files hold the header and, between them, every data row exactly once in
 * file order, and the rows of each file are the rows of Chemprop's set in
 * ../shared/fixtures/chemprop_v1/splits.tsv.
 */
MP_TEST(split_cli_esol_matches_chemprop)
{
    const char *mirror = getenv("MOLPROP_DATA_MIRROR");
    CHECK_MSG(mirror && *mirror, "MOLPROP_DATA_MIRROR is not set");
    CHECK_MSG(getenv("MOLPROP_BIN"), "MOLPROP_BIN is not set");
    char src[2048], data[2048], out[2048], args[8192];
    snprintf(src, sizeof src, "%s/esol.csv.gz", mirror);
    snprintf(data, sizeof data, "%s/cli_esol.csv.gz", mp_test_tmpdir());
    snprintf(out, sizeof out, "%s/cli_esol_out/sub", mp_test_tmpdir());
    CHECK_MSG(copy_file(src, data) == 0, "cannot copy %s", src);
    snprintf(args, sizeof args, "--data '%s' --split scaffold_balanced --seed 0 --out '%s'", data, out);
    int rc = run_split(mp_test_tmpdir(), args);
    CHECK_MSG(rc == 0, "molprop split exited %d", rc);
    char so[2048];
    snprintf(so, sizeof so, "%s/stdout", mp_test_tmpdir());
    CHECK(file_contains(so, "train 902, val 112, test 114"));

    fix_table t;
    CHECK(fix_load(&t, mp_test_shared("fixtures/chemprop_v1/splits.tsv"), 0) == 0);
    fix_row *want = NULL;
    for (size_t i = 0; i < t.n; i += 3)
        if (!strcmp(t.r[i].dataset, "esol") && !strcmp(t.r[i].split, "scaffold_balanced") &&
            t.r[i].seed == 0)
            want = &t.r[i];
    if (!want) {
        fix_free(&t);
        MP_FAIL("esol scaffold_balanced seed 0 not in the fixture");
    }
    csv_rows orig;
    if (csv_rows_read(&orig, data)) {
        fix_free(&t);
        MP_FAIL("cannot read %s", data);
    }
    static const char *names[3] = { "train.csv", "val.csv", "test.csv" };
    int *seen = calloc(orig.n, sizeof *seen);
    const char *why = NULL;
    for (int k = 0; k < 3 && !why; k++) {
        char p[2100];
        snprintf(p, sizeof p, "%s/%s", out, names[k]);
        csv_rows part;
        if (csv_rows_read(&part, p)) {
            why = "cannot read an output file";
            break;
        }
        if (part.n != want[k].n + 1 || strcmp(part.rec[0], orig.rec[0]))
            why = "wrong row count or header";
        /* walk the original in order: each output row is the next fixture row */
        for (size_t i = 1; !why && i < part.n; i++) {
            size_t row = want[k].rows[i - 1];   /* 0-based data row, ascending */
            if (row + 1 >= orig.n || strcmp(part.rec[i], orig.rec[row + 1]))
                why = "a row differs from the original row Chemprop put in this set";
            else
                seen[row + 1]++;
        }
        csv_rows_free(&part);
    }
    for (size_t i = 1; !why && i < orig.n; i++)
        if (seen[i] != 1)
            why = "a data row is not in exactly one file";
    free(seen);
    csv_rows_free(&orig);
    fix_free(&t);
    CHECK_MSG(!why, "%s", why);
}

/* Invalid SMILES are left out and reported with their line; quoted fields
 * and extra columns survive; --split-sizes, --smiles-column and cv work. */
MP_TEST(split_cli_invalid_rows_and_columns)
{
    CHECK_MSG(getenv("MOLPROP_BIN"), "MOLPROP_BIN is not set");
    const char *tmp = mp_test_tmpdir();
    char data[2048], out[2048], args[8192], err[2048];
    snprintf(data, sizeof data, "%s/small.csv", tmp);
    snprintf(out, sizeof out, "%s/small_out", tmp);
    snprintf(err, sizeof err, "%s/stderr", tmp);
    CHECK(write_text(data,
        "name,mol,y\n"
        "ethanol,CCO,1.5\n"
        "\"benzene, plain\",c1ccccc1,2\n"
        "bad,C1CC,3\n"                    /* line 4: unclosed ring */
        "toluene,Cc1ccccc1,\n"
        "pyridine,c1ccncc1,4\n"
        "\"multi\nline\",CCN,5\n"
        "empty,,6\n"                      /* line 9: empty SMILES */
        "cyclohexane,C1CCCCC1,7\n"
        "acid,CC(=O)O,8\n"
        "phenol,Oc1ccccc1,9\n"
        "hexane,CCCCCC,10\n") == 0);
    snprintf(args, sizeof args, "--data '%s' --smiles-column mol --split cv --folds 3 --seed 1 "
             "--out '%s'", data, out);
    int rc = run_split(tmp, args);
    CHECK_MSG(rc == 0, "molprop split exited %d", rc);
    CHECK_MSG(file_contains(err, ":4:") && file_contains(err, "C1CC"),
              "invalid row 4 not reported");
    CHECK_MSG(file_contains(err, ":9:"), "empty SMILES row 9 not reported");

    csv_rows orig;
    CHECK(csv_rows_read(&orig, data) == 0);
    size_t total = 0, got_invalid = 0;
    int order_ok = 1, header_ok = 1, cols_ok = 1;
    static const char *names[3] = { "train.csv", "val.csv", "test.csv" };
    for (int k = 0; k < 3; k++) {
        char p[2100];
        snprintf(p, sizeof p, "%s/%s", out, names[k]);
        csv_rows part;
        if (csv_rows_read(&part, p)) {
            csv_rows_free(&orig);
            MP_FAIL("cannot read %s", p);
        }
        header_ok &= part.n > 0 && !strcmp(part.rec[0], orig.rec[0]);
        size_t j = 1;   /* rows appear in file order: find each in orig after the last */
        for (size_t i = 1; i < part.n; i++) {
            while (j < orig.n && strcmp(orig.rec[j], part.rec[i]))
                j++;
            if (j == orig.n)
                order_ok = 0;
            else if (j == 3 || j == 7)
                got_invalid++;
            cols_ok &= strchr(part.rec[i], '\x1f') != strrchr(part.rec[i], '\x1f');
            j++;
        }
        total += part.n - 1;
        csv_rows_free(&part);
    }
    csv_rows_free(&orig);
    CHECK(header_ok);
    CHECK(order_ok);
    CHECK(cols_ok);
    CHECK_EQ_INT(got_invalid, 0);
    CHECK_EQ_INT(total, 9);

    /* sizes 1,0,0 puts every valid row in train; val and test are header only */
    snprintf(args, sizeof args, "--data '%s' --smiles-column=mol --split-sizes 1,0,0 --out '%s'",
             data, out);
    rc = run_split(tmp, args);
    CHECK_MSG(rc == 0, "molprop split exited %d", rc);
    char p[2100];
    csv_rows part;
    snprintf(p, sizeof p, "%s/train.csv", out);
    CHECK(csv_rows_read(&part, p) == 0);
    size_t n_train = part.n;
    csv_rows_free(&part);
    snprintf(p, sizeof p, "%s/test.csv", out);
    CHECK(csv_rows_read(&part, p) == 0);
    size_t n_test = part.n;
    csv_rows_free(&part);
    CHECK_EQ_INT(n_train, 10);
    CHECK_EQ_INT(n_test, 1);
}

/* Bad input: a clear message, exit status 1, and no output files. */
MP_TEST(split_cli_errors_leave_no_files)
{
    CHECK_MSG(getenv("MOLPROP_BIN"), "MOLPROP_BIN is not set");
    const char *tmp = mp_test_tmpdir();
    char good[2048], badcsv[2048], out[2048], args[8192], err[2048];
    snprintf(good, sizeof good, "%s/err_good.csv", tmp);
    snprintf(badcsv, sizeof badcsv, "%s/err_bad.csv", tmp);
    snprintf(out, sizeof out, "%s/err_out", tmp);
    snprintf(err, sizeof err, "%s/stderr", tmp);
    CHECK(write_text(good, "smiles,y\nCCO,1\nCCC,2\nCCN,3\nc1ccccc1,4\n") == 0);
    CHECK(write_text(badcsv, "smiles,y\nCCO,1\n\"CCC,2\nCCN,3\n") == 0);
    mkdir(out, 0777);
    static const struct {
        const char *args, *msg;
    } cases[] = {
        { "--data '%s' --out '%s' --split-sizes 0.8,0.1,0.2", "sum to 1" },
        { "--data '%s' --out '%s' --split-sizes 0.8,0.2", "three numbers" },
        { "--data '%s' --out '%s' --split-sizes -0.2,0.6,0.6", "non-negative" },
        { "--data '%s' --out '%s' --split scaffold", "unknown split type" },
        { "--data '%s' --out '%s' --split cv --folds 9", "folds" },
        { "--data '%s' --out '%s' --folds x", "--folds" },
        { "--data '%s' --out '%s' --seed -1", "--seed" },
        { "--data '%s' --out '%s' --smiles-column nope", "nope" },
        { "--data '%s' --out '%s' --bogus", "unknown option" },
        { "--data '%s' --out '%s' --seed", "needs a value" },
        { "--data '%s.missing' --out '%s'", "missing" },
        { "--data '%s' --out '%s'", "err_bad.csv" },   /* run with the bad CSV */
        { "--out '%s%s'", "--data" },
        { "--data '%s' --out '%s' --smiles-column y", "no valid molecule" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *in = strstr(cases[i].msg, "err_bad") ? badcsv : good;
        if (!strncmp(cases[i].args, "--out", 5))
            snprintf(args, sizeof args, cases[i].args, out, "");
        else
            snprintf(args, sizeof args, cases[i].args, in, out);
        int rc = run_split(tmp, args);
        CHECK_MSG(rc == 1, "case %zu (%s): exit %d", i, args, rc);
        CHECK_MSG(file_contains(err, cases[i].msg), "case %zu (%s): message lacks '%s'", i,
                  args, cases[i].msg);
        CHECK_MSG(dir_is_empty_of_outputs(out), "case %zu (%s): left files behind", i, args);
    }
    /* and the good file does split */
    snprintf(args, sizeof args, "--data '%s' --out '%s' --split-sizes 0.5,0.25,0.25", good, out);
    CHECK_EQ_INT(run_split(tmp, args), 0);
    CHECK(!dir_is_empty_of_outputs(out));
}
