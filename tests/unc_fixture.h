/*
 * unc_fixture.h - the reader of the uncertainty fixtures (records of
 * "key v v v" lines opened by "case ..." and closed by "end": the format
 * of tests/fixtures/unc_cases.txt and unc_mc_chemprop.txt), shared by
 * test_unc.c and test_unc_mc.c.  Define FIXTURE (the file's path, for
 * messages) before including it.
 */
#ifndef MP_UNC_FIXTURE_H
#define MP_UNC_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define MAX_KEYS 48

typedef struct {
    char    head[128];          /* the "case ..." line, without "case " */
    int     n_keys;
    char    key[MAX_KEYS][32];
    double *v[MAX_KEYS];
    size_t  n[MAX_KEYS];
} record;

static inline void record_free(record *r)
{
    for (int k = 0; k < r->n_keys; k++)
        free(r->v[k]);
    memset(r, 0, sizeof *r);
}

/* The next record; 0 at the end of the file, -1 when malformed. */
static inline int record_next(FILE *fp, record *r)
{
    static char buf[1 << 17];
    memset(r, 0, sizeof *r);
    int in = 0;
    while (fgets(buf, sizeof buf, fp)) {
        if (buf[0] == '#' || buf[0] == '\n')
            continue;
        buf[strcspn(buf, "\n")] = 0;
        if (!strncmp(buf, "case ", 5)) {
            snprintf(r->head, sizeof r->head, "%.100s", buf + 5);
            in = 1;
            continue;
        }
        if (!strcmp(buf, "end"))
            return in ? 1 : -1;
        if (!in || r->n_keys == MAX_KEYS)
            return -1;
        int k = r->n_keys++;
        char *p = buf;
        size_t len = strcspn(p, " ");
        snprintf(r->key[k], sizeof r->key[k], "%.*s", (int)len, p);
        p += len;
        size_t cap = 16;
        r->v[k] = malloc(sizeof(double) * cap);
        while (*p == ' ') {
            char *end;
            double x = strtod(p + 1, &end);
            if (end == p + 1)
                return -1;
            if (r->n[k] == cap)
                r->v[k] = realloc(r->v[k], sizeof(double) * (cap *= 2));
            r->v[k][r->n[k]++] = x;
            p = end;
        }
    }
    return in ? -1 : 0;
}

/* The values of the nth line named key (NULL if absent). */
static inline const double *rec_get(const record *r, const char *key, int nth, size_t *n)
{
    for (int k = 0; k < r->n_keys; k++)
        if (!strcmp(r->key[k], key) && nth-- == 0) {
            if (n)
                *n = r->n[k];
            return r->v[k];
        }
    return NULL;
}

#define GET(r, key, np)                                                         \
    ({                                                                          \
        const double *mp__v = rec_get(r, key, 0, np);                           \
        if (!mp__v)                                                             \
            MP_FAIL("%s: no '%s' in case '%s'", FIXTURE, key, (r)->head);       \
        mp__v;                                                                  \
    })

/* Every value of a against b. */
#define CHECK_ALL_NEAR(a, b, n, abs_tol, rel_tol)                               \
    do {                                                                        \
        for (size_t mp__i = 0; mp__i < (n); mp__i++)                            \
            CHECK_NEAR((a)[mp__i], (b)[mp__i], abs_tol, rel_tol);               \
    } while (0)


#endif /* MP_UNC_FIXTURE_H */
