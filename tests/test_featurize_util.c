/*
 * test_featurize_util.c - fixture and dataset readers for the featurization
 * tests (see test_featurize_util.h).
 */
#include "test_featurize_util.h"
#include "test.h"

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
