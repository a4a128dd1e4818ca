/*
 * test_featurize_util.c - fixture and dataset readers for the featurization
 * tests (see test_featurize_util.h).
 */
#include "test_featurize_util.h"
#include "test.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>

int tf_read_line(gzFile gz, mp_buf *b)
{
    b->len = 0;
    if (mp_buf_reserve(b, 256) != MP_OK)
        return 0;
    b->data[0] = '\0';
    int got = 0;
    for (;;) {
        if (mp_buf_reserve(b, 4096) != MP_OK)
            return 0;
        if (!gzgets(gz, b->data + b->len, (int)(b->cap - b->len)))
            break;
        got = 1;
        b->len += strlen(b->data + b->len);
        if (b->len && b->data[b->len - 1] == '\n')
            break;
    }
    if (!got)
        return 0;
    while (b->len && (b->data[b->len - 1] == '\n' || b->data[b->len - 1] == '\r'))
        b->data[--b->len] = '\0';
    return 1;
}

int tf_split(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        fields[n++] = p;
        char *t = strchr(p, '\t');
        if (!t)
            break;
        *t = '\0';
        p = t + 1;
    }
    return n;
}

const char *tf_fixture(const char *file)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s", mp_test_shared("fixtures/chemprop_v1/"));
    strncat(buf, file, sizeof buf - strlen(buf) - 1);
    return buf;
}

static char **push(char **v, int32_t *n, int32_t *cap, const char *s)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        v = realloc(v, (size_t)*cap * sizeof *v);
        if (!v)
            abort();
    }
    v[(*n)++] = strdup(s);
    return v;
}

char **tf_fixture_smiles(int32_t *n)
{
    *n = 0;
    gzFile gz = gzopen(tf_fixture("molecules.tsv"), "rb");
    if (!gz)
        return NULL;
    mp_buf b = { 0 };
    char **v = NULL;
    int32_t cap = 0;
    int first = 1;
    while (tf_read_line(gz, &b)) {
        if (first) {
            first = 0;
            continue;
        }
        char *f[8];
        int k = tf_split(b.data, f, 8);
        v = push(v, n, &cap, k == 6 ? f[5] : "");
    }
    gzclose(gz);
    mp_buf_free(&b);
    return v;
}

char **tf_dataset_smiles(const char *name, int32_t max, int32_t *n)
{
    *n = 0;
    const char *root = getenv("MOLPROP_DATA_MIRROR");
    char base[4096], path[4200];
    snprintf(base, sizeof base, "%s", root && *root ? root : mp_test_shared("datasets"));
    snprintf(path, sizeof path, "%s/%s.csv.gz", base, name);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return NULL;
    mp_buf b = { 0 };
    char **v = NULL;
    int32_t cap = 0;
    int first = 1;
    while (tf_read_line(gz, &b) && (max <= 0 || *n < max)) {
        if (first) {
            first = 0;
            continue;
        }
        char *c = strchr(b.data, ',');
        if (c)
            *c = '\0';
        v = push(v, n, &cap, b.data);
    }
    gzclose(gz);
    mp_buf_free(&b);
    return v;
}

char **tf_add_invalid(char **s, int32_t *n)
{
    static const char *bad[] = { "", "xyz", "C1CC", "[H]" };
    int32_t m = *n, k = 0;
    char **v = malloc(((size_t)m + 12) * sizeof *v);
    if (!v)
        abort();
    for (int32_t i = 0; i <= m; i++) {
        if (i == 0 || i == m / 2 || i == m)
            for (int j = 0; j < 4; j++)
                v[k++] = strdup(bad[j]);
        if (i < m)
            v[k++] = s[i];
    }
    free(s);
    *n = k;
    return v;
}

void tf_free_strings(char **s, int32_t n)
{
    if (!s)
        return;
    for (int32_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

static int same_strings(char **a, char **b, int32_t n)
{
    if (!a || !b)
        return a == b;
    for (int32_t i = 0; i < n; i++) {
        if (!a[i] || !b[i]) {
            if (a[i] != b[i])
                return 0;
        } else if (strcmp(a[i], b[i]) != 0) {
            return 0;
        }
    }
    return 1;
}

#define SAME_ARRAY(x, y, count) (memcmp((x), (y), (size_t)(count) * sizeof *(x)) == 0)

/* Every array of two results byte for byte (descriptors and the MP_SET_*
 * matrices bitwise, NaN too). */
int tf_same_features(const mp_features *a, const mp_features *b)
{
    const mp_graphs *x = &a->g, *y = &b->g;
    int32_t na = x->n_atoms, ne = x->n_edges, nm = x->n_mols;
    if (nm != y->n_mols || na != y->n_atoms || ne != y->n_edges || a->n_desc != b->n_desc ||
        !a->morgan_start != !b->morgan_start)
        return 0;
    if (a->morgan_start &&
        (!SAME_ARRAY(a->morgan_start, b->morgan_start, nm + 1) ||
         !SAME_ARRAY(a->morgan_bit, b->morgan_bit, a->morgan_start[nm]) ||
         !SAME_ARRAY(a->morgan_count, b->morgan_count, a->morgan_start[nm])))
        return 0;
    if (!a->morgan2_start != !b->morgan2_start ||
        (a->morgan2_start &&
         (!SAME_ARRAY(a->morgan2_start, b->morgan2_start, nm + 1) ||
          !SAME_ARRAY(a->morgan2_bit, b->morgan2_bit, a->morgan2_start[nm]) ||
          !SAME_ARRAY(a->morgan2_count, b->morgan2_count, a->morgan2_start[nm]))))
        return 0;
    for (int k = 0; k < MP_N_MATS; k++) {
        const mp_molmat *p = &a->mat[k], *q = &b->mat[k];
        if (p->n_cols != q->n_cols || !p->values != !q->values)
            return 0;
        if (p->values && (!SAME_ARRAY(p->values, q->values, (size_t)nm * (size_t)p->n_cols) ||
                          !same_strings(p->names, q->names, p->n_cols)))
            return 0;
    }
    return SAME_ARRAY(x->valid, y->valid, nm) && SAME_ARRAY(x->mol_atom, y->mol_atom, nm + 1) &&
           SAME_ARRAY(x->mol_edge, y->mol_edge, nm + 1) &&
           SAME_ARRAY(x->atom_hot, y->atom_hot, (size_t)na * MP_ATOM_MAX_HOT) &&
           SAME_ARRAY(x->atom_mass, y->atom_mass, na) &&
           SAME_ARRAY(x->bond_hot, y->bond_hot, (size_t)ne / 2 * MP_BOND_MAX_HOT) &&
           SAME_ARRAY(x->edge_src, y->edge_src, ne) && SAME_ARRAY(x->edge_dst, y->edge_dst, ne) &&
           SAME_ARRAY(x->in_start, y->in_start, na + 1) && SAME_ARRAY(x->in_edge, y->in_edge, ne) &&
           (!a->n_desc || SAME_ARRAY(a->desc, b->desc, (size_t)nm * a->n_desc)) &&
           same_strings(a->scaffold, b->scaffold, nm) && same_strings(a->error, b->error, nm) &&
           same_strings(a->desc_names, b->desc_names, a->n_desc);
}
