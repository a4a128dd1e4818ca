/*
 * test_split.c - splits against Chemprop v1.6.1's own output: the sets of
 * ../shared/fixtures/chemprop_v1/splits.tsv and the ordered lists of
 * tests/fixtures/chemprop_v1_split_order.tsv (see tests/fixtures/README.md);
 * then the invariants (partition, determinism, sizes edge cases, cv folds),
 * errors, allocation failures, and `molprop split` end to end.
 */
#include "test.h"
#include "molprop.h"
#include "data/split.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

static char  scaf_name[32];
static char **scaf_list;
static size_t scaf_n;

/* Scaffolds of every row of $MOLPROP_DATA_MIRROR/<name>.csv.gz (NULL for an
 * invalid molecule), cached for the next call with the same name. */
static char **dataset_scaffolds(const char *name, size_t *n)
{
    if (scaf_list && !strcmp(scaf_name, name)) {
        *n = scaf_n;
        return scaf_list;
    }
    if (scaf_list) {
        for (size_t i = 0; i < scaf_n; i++)
            free(scaf_list[i]);
        free(scaf_list);
        scaf_list = NULL;
    }
    char path[1024];
    snprintf(path, sizeof path, "/tmp/scaf/%s.tsv", name);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    size_t cap = 1024, k = 0;
    char **v = malloc(cap * sizeof *v);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, fp)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = 0;
        if (k == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
        }
        v[k++] = line[0] == '1' ? strdup(line + 2) : NULL;
    }
    free(line);
    fclose(fp);
    snprintf(scaf_name, sizeof scaf_name, "%s", name);
    scaf_list = v;
    scaf_n = k;
    *n = k;
    return v;
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
    char names[40][8];
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
    char names[60][8];
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
