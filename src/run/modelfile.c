/*
 * modelfile.c - the .mpm model file (layout in modelfile.h): the key/value
 * header store, the writer (atomic, CRC computed on the way out) and the
 * reader, which trusts no length it has not checked against the bytes.
 */
#include "run/modelfile.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* mp_kv                                                                  */
/* ===================================================================== */

struct mp_kv {
    char  **keys, **values;
    size_t  n, cap;
    char   *origin;
};

#define KV_MAX_KEY 128
#define KV_MAX_KEYS 4096   /* a header's keys, so a hostile one cannot make the
                            * duplicate check (linear per key) take hours     */

mp_status mp_kv_new(mp_kv **out)
{
    *out = mp_calloc(1, sizeof **out);
    return *out ? MP_OK : mp_error_set(MP_ERR_NOMEM, "out of memory for a header");
}

void mp_kv_free(mp_kv *kv)
{
    if (!kv)
        return;
    for (size_t i = 0; i < kv->n; i++) {
        mp_free(kv->keys[i]);
        mp_free(kv->values[i]);
    }
    mp_free(kv->keys);
    mp_free(kv->values);
    mp_free(kv->origin);
    mp_free(kv);
}

size_t      mp_kv_count(const mp_kv *kv) { return kv->n; }
const char *mp_kv_key(const mp_kv *kv, size_t i) { return kv->keys[i]; }
const char *mp_kv_value(const mp_kv *kv, size_t i) { return kv->values[i]; }
const char *mp_kv_origin(const mp_kv *kv) { return kv->origin ? kv->origin : "header"; }

static int key_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}

static int key_ok(const char *key, size_t len)
{
    if (len == 0 || len > KV_MAX_KEY)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!key_char_ok(key[i]))
            return 0;
    return 1;
}

static long kv_find(const mp_kv *kv, const char *key)
{
    for (size_t i = 0; i < kv->n; i++)
        if (strcmp(kv->keys[i], key) == 0)
            return (long)i;
    return -1;
}

const char *mp_kv_get(const mp_kv *kv, const char *key)
{
    long i = kv_find(kv, key);
    return i < 0 ? NULL : kv->values[i];
}

/* Takes ownership of `value` (an mp_malloc'd string) in every case. */
static mp_status kv_put_owned(mp_kv *kv, const char *key, char *value)
{
    if (!value)
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting header key '%s'", key);
    if (!key_ok(key, strlen(key))) {
        mp_free(value);
        return mp_error_set(MP_ERR_ARG,
                            "invalid header key '%s' (1-%d characters of A-Z a-z 0-9 _ . : / -)",
                            key, KV_MAX_KEY);
    }
    long i = kv_find(kv, key);
    if (i >= 0) {
        mp_free(kv->values[i]);
        kv->values[i] = value;
        return MP_OK;
    }
    if (kv->n == kv->cap) {
        size_t cap = kv->cap ? 2 * kv->cap : 16;
        char **k = mp_realloc(kv->keys, cap * sizeof *k);
        if (k)
            kv->keys = k;
        char **v = k ? mp_realloc(kv->values, cap * sizeof *v) : NULL;
        if (v)
            kv->values = v;
        if (!k || !v) {
            mp_free(value);
            return mp_error_set(MP_ERR_NOMEM, "out of memory setting header key '%s'", key);
        }
        kv->cap = cap;
    }
    char *kc = mp_strdup(key);
    if (!kc) {
        mp_free(value);
        return mp_error_set(MP_ERR_NOMEM, "out of memory setting header key '%s'", key);
    }
    kv->keys[kv->n] = kc;
    kv->values[kv->n] = value;
    kv->n++;
    return MP_OK;
}

mp_status mp_kv_set(mp_kv *kv, const char *key, const char *value)
{
    return kv_put_owned(kv, key, mp_strdup(value ? value : ""));
}

mp_status mp_kv_set_int(mp_kv *kv, const char *key, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return mp_kv_set(kv, key, buf);
}

static void format_double(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.17g", v);
}

mp_status mp_kv_set_double(mp_kv *kv, const char *key, double v)
{
    char buf[40];
    format_double(buf, sizeof buf, v);
    return mp_kv_set(kv, key, buf);
}

mp_status mp_kv_set_doubles(mp_kv *kv, const char *key, const double *v, size_t n)
{
    mp_buf b = { 0 };
    mp_status st = mp_buf_reserve(&b, 0);   /* so n == 0 gives "" */
    if (st == MP_OK)
        b.data[0] = '\0';
    for (size_t i = 0; st == MP_OK && i < n; i++) {
        char num[40];
        format_double(num, sizeof num, v[i]);
        st = mp_buf_printf(&b, "%s%s", i ? "," : "", num);
    }
    if (st) {
        mp_buf_free(&b);
        return st;
    }
    return kv_put_owned(kv, key, b.data);
}

mp_status mp_kv_set_strs(mp_kv *kv, const char *key, const char *const *v, size_t n)
{
    mp_buf b = { 0 };
    mp_status st = mp_buf_reserve(&b, 0);   /* so n == 0 gives "" */
    if (st == MP_OK)
        b.data[0] = '\0';
    for (size_t i = 0; st == MP_OK && i < n; i++) {
        if (i)
            st = mp_buf_append(&b, ",", 1);
        const char *s = v[i] ? v[i] : "";
        if (st == MP_OK && !*s)
            st = mp_buf_append(&b, "\\e", 2);
        for (; st == MP_OK && *s; s++) {
            if (*s == ',' || *s == '\\')
                st = mp_buf_append(&b, "\\", 1);
            if (st == MP_OK)
                st = mp_buf_append(&b, s, 1);
        }
    }
    if (st) {
        mp_buf_free(&b);
        return st;
    }
    return kv_put_owned(kv, key, b.data);
}

static const char *kv_need(const mp_kv *kv, const char *key, mp_status *st)
{
    const char *v = mp_kv_get(kv, key);
    *st = v ? MP_OK
            : mp_error_set(MP_ERR_FORMAT, "%s: header key '%s' is missing", mp_kv_origin(kv),
                           key);
    return v;
}

mp_status mp_kv_get_str(const mp_kv *kv, const char *key, const char **out)
{
    mp_status st;
    *out = kv_need(kv, key, &st);
    return st;
}

mp_status mp_kv_get_int(const mp_kv *kv, const char *key, long long lo, long long hi,
                        long long *out)
{
    mp_status st;
    const char *v = kv_need(kv, key, &st);
    if (!v)
        return st;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno)
        return mp_error_set(MP_ERR_FORMAT, "%s: header key '%s' = '%s' is not an integer",
                            mp_kv_origin(kv), key, v);
    if (x < lo || x > hi)
        return mp_error_set(MP_ERR_FORMAT, "%s: header key '%s' = %lld is outside [%lld, %lld]",
                            mp_kv_origin(kv), key, x, lo, hi);
    *out = x;
    return MP_OK;
}

/* strtod over [p, stop): the whole span must be one number. */
static int parse_double_span(const char *p, const char *stop, double *out)
{
    char buf[64];
    size_t n = (size_t)(stop - p);
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (buf[0] == ' ' || buf[0] == '\t')   /* strtod would skip it; we write none */
        return 0;
    char *end;
    *out = strtod(buf, &end);
    return end == buf + n;
}

mp_status mp_kv_get_double(const mp_kv *kv, const char *key, double *out)
{
    mp_status st;
    const char *v = kv_need(kv, key, &st);
    if (!v)
        return st;
    if (!parse_double_span(v, v + strlen(v), out))
        return mp_error_set(MP_ERR_FORMAT, "%s: header key '%s' = '%s' is not a number",
                            mp_kv_origin(kv), key, v);
    return MP_OK;
}

mp_status mp_kv_get_doubles(const mp_kv *kv, const char *key, double **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    mp_status st;
    const char *v = kv_need(kv, key, &st);
    if (!v)
        return st;
    if (!*v)
        return MP_OK;
    size_t count = 1;
    for (const char *p = v; *p; p++)
        count += *p == ',';
    double *a = mp_malloc(count * sizeof *a);
    if (!a)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading header key '%s'", key);
    const char *p = v;
    for (size_t i = 0; i < count; i++) {
        const char *stop = strchr(p, ',');
        if (!stop)
            stop = p + strlen(p);
        if (!parse_double_span(p, stop, &a[i])) {
            mp_free(a);
            return mp_error_set(MP_ERR_FORMAT,
                                "%s: header key '%s': element %zu ('%.*s') is not a number",
                                mp_kv_origin(kv), key, i, (int)(stop - p > 40 ? 40 : stop - p), p);
        }
        p = stop + 1;
    }
    *out = a;
    *n = count;
    return MP_OK;
}

mp_status mp_kv_get_strs(const mp_kv *kv, const char *key, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    mp_status st;
    const char *v = kv_need(kv, key, &st);
    if (!v)
        return st;
    if (!*v)
        return MP_OK;
    /* count elements (unescaped commas) and check the escapes */
    size_t count = 1, len = strlen(v);
    for (const char *p = v; *p; p++) {
        if (*p == '\\') {
            if (p[1] != ',' && p[1] != '\\' && p[1] != 'e')
                return mp_error_set(MP_ERR_FORMAT, "%s: header key '%s': bad escape in '%s'",
                                    mp_kv_origin(kv), key, v);
            p++;
        } else if (*p == ',') {
            count++;
        }
    }
    /* one block: count pointers, then the texts (never longer than v) */
    char **a = mp_malloc(count * sizeof(char *) + len + count);
    if (!a)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading header key '%s'", key);
    char *w = (char *)(a + count);
    size_t k = 0;
    a[k] = w;
    int marker = 0;   /* this element was written "\e" */
    for (const char *p = v;; p++) {
        if (*p == ',' || !*p) {
            *w++ = '\0';
            if (!*p)
                break;
            a[++k] = w;
            marker = 0;
            continue;
        }
        int is_marker = p[0] == '\\' && p[1] == 'e';
        /* "\e" stands for a whole (empty) element, nothing else */
        if (marker || (is_marker && w != a[k])) {
            mp_free(a);
            return mp_error_set(MP_ERR_FORMAT, "%s: header key '%s': '\\e' must stand alone",
                                mp_kv_origin(kv), key);
        }
        if (*p == '\\')
            p++;
        if (is_marker)
            marker = 1;
        else
            *w++ = *p;
    }
    *out = a;
    *n = count;
    return MP_OK;
}

mp_status mp_kv_format(const mp_kv *kv, mp_buf *out)
{
    mp_status st = MP_OK;
    for (size_t i = 0; st == MP_OK && i < kv->n; i++) {
        st = mp_buf_printf(out, "%s = ", kv->keys[i]);
        for (const char *p = kv->values[i]; st == MP_OK && *p; p++) {
            const char *esc = *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '\r' ? "\\r" : NULL;
            st = esc ? mp_buf_append(out, esc, 2) : mp_buf_append(out, p, 1);
        }
        if (st == MP_OK)
            st = mp_buf_append(out, "\n", 1);
    }
    return st;
}

/* A value with its escapes undone, into a new string; NULL for a bad
 * escape (or out of memory: *nomem set). */
static char *unescape(const char *v, const char *vend, int *nomem)
{
    char *value = mp_malloc((size_t)(vend - v) + 1), *w = value;
    *nomem = value == NULL;
    if (!value)
        return NULL;
    for (; v < vend; v++) {
        if (*v != '\\') {
            *w++ = *v;
            continue;
        }
        char c = v + 1 < vend ? v[1] : '\0';
        if (c != '\\' && c != 'n' && c != 'r') {
            mp_free(value);
            return NULL;
        }
        *w++ = c == 'n' ? '\n' : c == 'r' ? '\r' : '\\';
        v++;
    }
    *w = '\0';
    return value;
}

/* Header line line_no, line[0..n) (no newline, not blank, not a comment),
 * into kv. */
static mp_status parse_line(mp_kv *kv, const char *line, size_t n, size_t line_no, const char *o)
{
    const char *eq = NULL;
    for (size_t i = 0; i + 3 <= n; i++)
        if (line[i] == ' ' && line[i + 1] == '=' && line[i + 2] == ' ') {
            eq = line + i;
            break;
        }
    if (!eq)
        return mp_error_set(MP_ERR_FORMAT, "%s: header line %zu has no ' = '", o, line_no);
    size_t klen = (size_t)(eq - line);
    if (!key_ok(line, klen))
        return mp_error_set(MP_ERR_FORMAT, "%s: header line %zu: invalid key '%.*s'", o,
                            line_no, (int)(klen > 60 ? 60 : klen), line);
    char key[KV_MAX_KEY + 1];
    memcpy(key, line, klen);
    key[klen] = '\0';
    if (kv->n >= KV_MAX_KEYS)
        return mp_error_set(MP_ERR_FORMAT, "%s: header line %zu: more than %d keys", o, line_no,
                            KV_MAX_KEYS);
    if (kv_find(kv, key) >= 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: header line %zu: key '%s' appears twice", o,
                            line_no, key);
    int nomem;
    char *value = unescape(eq + 3, line + n, &nomem);
    if (nomem)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", o);
    if (!value)
        return mp_error_set(MP_ERR_FORMAT, "%s: header line %zu: bad escape in the value of '%s'",
                            o, line_no, key);
    return kv_put_owned(kv, key, value);
}

mp_status mp_kv_parse(mp_kv **out, const char *text, size_t len, const char *origin)
{
    *out = NULL;
    mp_kv *kv;
    mp_status st = mp_kv_new(&kv);
    if (st)
        return st;
    if (origin && !(kv->origin = mp_strdup(origin))) {
        mp_kv_free(kv);
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
    }
    const char *o = origin ? origin : "header";   /* outlives kv */
    if (memchr(text, '\0', len)) {
        mp_kv_free(kv);
        return mp_error_set(MP_ERR_FORMAT, "%s: header contains a NUL byte", o);
    }
    size_t line_no = 0;
    const char *p = text, *end = text + len;
    while (st == MP_OK && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            st = mp_error_set(MP_ERR_FORMAT, "%s: header line %zu is not terminated", o,
                              line_no + 1);
            break;
        }
        line_no++;
        const char *line = p;
        size_t n = (size_t)(nl - p);
        p = nl + 1;
        if (n > 0 && line[0] != '#')
            st = parse_line(kv, line, n, line_no, o);
    }
    if (st) {
        mp_kv_free(kv);
        return st;
    }
    *out = kv;
    return MP_OK;
}

/* ===================================================================== */
/* Scalers in a header                                                    */
/* ===================================================================== */

/* "<prefix>.<field>" into buf; MP_ERR_ARG when it does not fit a key. */
static mp_status scaler_key(char *buf, size_t n, const char *prefix, const char *field)
{
    int k = snprintf(buf, n, "%s.%s", prefix, field);
    if (k < 0 || (size_t)k >= n || k > KV_MAX_KEY)
        return mp_error_set(MP_ERR_ARG, "scaler prefix '%s' is too long", prefix);
    return MP_OK;
}

mp_status mp_kv_set_scaler(mp_kv *kv, const char *prefix, const mp_scaler *s)
{
    char key[KV_MAX_KEY + 2];
    mp_status st = scaler_key(key, sizeof key, prefix, "kind");
    if (st == MP_OK)
        st = mp_kv_set(kv, key, s->kind == MP_SCALE_FEATURES ? "features" : "targets");
    if (st == MP_OK && (st = scaler_key(key, sizeof key, prefix, "mean")) == MP_OK)
        st = mp_kv_set_doubles(kv, key, s->mean, s->n_cols);
    if (st == MP_OK && (st = scaler_key(key, sizeof key, prefix, "std")) == MP_OK)
        st = mp_kv_set_doubles(kv, key, s->std, s->n_cols);
    return st;
}

mp_status mp_kv_get_scaler(const mp_kv *kv, const char *prefix, size_t n_cols, mp_scaler *s)
{
    memset(s, 0, sizeof *s);
    char key[KV_MAX_KEY + 2];
    const char *kind;
    mp_status st = scaler_key(key, sizeof key, prefix, "kind");
    if (st || (st = mp_kv_get_str(kv, key, &kind)))
        return st;
    mp_scaler_kind k;
    if (strcmp(kind, "targets") == 0)
        k = MP_SCALE_TARGETS;
    else if (strcmp(kind, "features") == 0)
        k = MP_SCALE_FEATURES;
    else
        return mp_error_set(MP_ERR_FORMAT, "%s: header key '%s' = '%s' is not targets or features",
                            mp_kv_origin(kv), key, kind);
    double *mean = NULL, *sd = NULL;
    size_t n_mean = 0, n_sd = 0;
    if ((st = scaler_key(key, sizeof key, prefix, "mean")) == MP_OK)
        st = mp_kv_get_doubles(kv, key, &mean, &n_mean);
    if (st == MP_OK && (st = scaler_key(key, sizeof key, prefix, "std")) == MP_OK)
        st = mp_kv_get_doubles(kv, key, &sd, &n_sd);
    if (st == MP_OK && (n_mean != n_sd || n_mean == 0 || (n_cols && n_mean != n_cols)))
        st = mp_error_set(MP_ERR_FORMAT, "%s: scaler '%s' has %zu means and %zu stds, expected %zu",
                          mp_kv_origin(kv), prefix, n_mean, n_sd, n_cols ? n_cols : n_mean);
    if (st == MP_OK && (st = mp_scaler_set(s, k, n_mean, mean, sd)) == MP_ERR_FORMAT) {
        char why[256];   /* the message buffer is about to be rewritten */
        snprintf(why, sizeof why, "%s", mp_error_message());
        st = mp_error_set(MP_ERR_FORMAT, "%s: %s (key prefix '%s')", mp_kv_origin(kv), why,
                          prefix);
    }
    mp_free(mean);
    mp_free(sd);
    return st;
}

/* ===================================================================== */
/* Byte order                                                             */
/* ===================================================================== */

static void put_u32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *b)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)b[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static int host_is_le(void)
{
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static uint32_t bswap32(uint32_t x)
{
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

/* ===================================================================== */
/* Writing                                                                */
/* ===================================================================== */

static const unsigned char MAGIC[8] = { 0x89, 'M', 'P', 'M', '\r', '\n', 0x1a, '\n' };
#define FIXED_SIZE 32u
#define MAX_NAME   255u

uint64_t mp_tensor_numel(const mp_tensor *t)
{
    if (t->ndim < 1 || t->ndim > MP_TENSOR_MAX_DIMS)
        return 0;
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* Bytes of one tensor record, or 0 on overflow / bad ndim. */
static uint64_t record_size(const mp_tensor *t, size_t name_len)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] != 0 && n > UINT64_MAX / 8 / t->shape[d])
            return 0;
        n *= t->shape[d];
    }
    return 12 + (uint64_t)name_len + 8ull * t->ndim + 4 * n;
}

typedef struct {
    FILE    *fp;
    uint32_t crc;
} crc_writer;

static void cw_put(crc_writer *w, const void *p, size_t n)
{
    if (n == 0)
        return;
    w->crc = mp_crc32(w->crc, p, n);
    fwrite(p, 1, n, w->fp);
}

/* Checks every tensor (name, ndim, size, data, no repeats) and adds their
 * record sizes to *total. */
static mp_status check_tensors(const char *path, const mp_tensor *tensors, size_t n_tensors,
                               uint64_t *total)
{
    for (size_t i = 0; i < n_tensors; i++) {
        const mp_tensor *t = &tensors[i];
        size_t nl = t->name ? strlen(t->name) : 0;
        if (nl == 0 || nl > MAX_NAME)
            return mp_error_set(MP_ERR_ARG, "%s: tensor %zu: name must be 1-%u bytes", path, i,
                                MAX_NAME);
        if (t->ndim < 1 || t->ndim > MP_TENSOR_MAX_DIMS)
            return mp_error_set(MP_ERR_ARG, "%s: tensor %s: ndim %u is not in 1..%d", path,
                                t->name, t->ndim, MP_TENSOR_MAX_DIMS);
        uint64_t rs = record_size(t, nl);
        if (rs == 0 || *total > UINT64_MAX / 2 - rs)
            return mp_error_set(MP_ERR_ARG, "%s: tensor %s is too large", path, t->name);
        if (!t->data && mp_tensor_numel(t) > 0)
            return mp_error_set(MP_ERR_ARG, "%s: tensor %s has no data", path, t->name);
        *total += rs;
    }
    size_t dup;
    int r = mp_tensors_find_repeat(tensors, n_tensors, &dup);
    if (r < 0)
        return mp_error_set(MP_ERR_NOMEM, "out of memory writing %s", path);
    if (r)
        return mp_error_set(MP_ERR_ARG, "%s: tensor %s of member %u given twice", path,
                            tensors[dup].name, tensors[dup].block);
    return MP_OK;
}

/* One tensor record: name, block, shape, values little-endian. */
static void write_record(crc_writer *w, const mp_tensor *t)
{
    unsigned char rec[12 + 8 * MP_TENSOR_MAX_DIMS];
    uint32_t nl = (uint32_t)strlen(t->name);
    put_u32(rec, nl);
    cw_put(w, rec, 4);
    cw_put(w, t->name, nl);
    put_u32(rec, t->block);
    put_u32(rec + 4, t->ndim);
    for (uint32_t d = 0; d < t->ndim; d++)
        put_u64(rec + 8 + 8 * d, t->shape[d]);
    cw_put(w, rec, 8 + 8 * (size_t)t->ndim);
    uint64_t n = mp_tensor_numel(t);
    if (host_is_le()) {
        cw_put(w, t->data, (size_t)n * 4);
        return;
    }
    uint32_t chunk[1024];
    for (uint64_t k = 0; k < n;) {
        size_t m = n - k < 1024 ? (size_t)(n - k) : 1024;
        memcpy(chunk, t->data + k, m * 4);
        for (size_t j = 0; j < m; j++)
            chunk[j] = bswap32(chunk[j]);
        cw_put(w, chunk, m * 4);
        k += m;
    }
}

mp_status mp_modelfile_write(const char *path, const mp_kv *header,
                             const mp_tensor *tensors, size_t n_tensors)
{
    if (n_tensors > UINT32_MAX)
        return mp_error_set(MP_ERR_ARG, "%s: too many tensors (%zu)", path, n_tensors);
    uint64_t total = FIXED_SIZE + 4;
    mp_status st = check_tensors(path, tensors, n_tensors, &total);
    if (st)
        return st;
    mp_buf text = { 0 };
    st = mp_buf_reserve(&text, 0);
    if (st == MP_OK && header)
        st = mp_kv_format(header, &text);
    if (st) {
        mp_buf_free(&text);
        return st;
    }
    total += text.len;

    mp_afile f;
    if ((st = mp_afile_open(&f, path))) {
        mp_buf_free(&text);
        return st;
    }
    crc_writer w = { f.fp, 0 };
    unsigned char fixed[FIXED_SIZE];
    memcpy(fixed, MAGIC, 8);
    put_u32(fixed + 8, MP_MODELFILE_VERSION);
    put_u32(fixed + 12, (uint32_t)n_tensors);
    put_u64(fixed + 16, total);
    put_u64(fixed + 24, text.len);
    cw_put(&w, fixed, sizeof fixed);
    cw_put(&w, text.data, text.len);
    mp_buf_free(&text);
    for (size_t i = 0; i < n_tensors; i++)
        write_record(&w, &tensors[i]);
    unsigned char crc[4];
    put_u32(crc, w.crc);
    fwrite(crc, 1, 4, f.fp);
    return mp_afile_commit(&f);
}

/* ===================================================================== */
/* Reading                                                                */
/* ===================================================================== */

void mp_modelfile_free(mp_modelfile *mf)
{
    if (!mf)
        return;
    mp_kv_free(mf->header);
    mp_free(mf->tensors);
    mp_free(mf->data_);
    mp_free(mf->names_);
    mp_free(mf);
}

/* A bounds-checked cursor over the file's bytes. */
typedef struct {
    const unsigned char *b;
    uint64_t pos, end;
} cursor;

static int cur_take(cursor *c, uint64_t n, const unsigned char **p)
{
    if (n > c->end - c->pos)
        return 0;
    *p = c->b + c->pos;
    c->pos += n;
    return 1;
}

/* Pass 2 of walk_tensors: tensor i from its checked record, its name at
 * names_ + names and its values at data_ + floats. */
static mp_status store_tensor(mp_modelfile *mf, uint32_t i, const unsigned char *name,
                              uint32_t nl, uint32_t block, uint32_t ndim, const uint64_t *shape,
                              const unsigned char *data, uint64_t numel, uint64_t floats,
                              uint64_t names, const char *origin)
{
    mp_tensor *t = &mf->tensors[i];
    char *nm = mf->names_ + names;
    memcpy(nm, name, nl);
    nm[nl] = '\0';
    float *dst = mf->data_ + floats;
    memcpy(dst, data, (size_t)numel * 4);
    if (!host_is_le())
        for (uint64_t k = 0; k < numel; k++) {
            uint32_t u;
            memcpy(&u, dst + k, 4);
            u = bswap32(u);
            memcpy(dst + k, &u, 4);
        }
    t->name = nm;
    t->block = block;
    t->ndim = ndim;
    memset(t->shape, 0, sizeof t->shape);
    memcpy(t->shape, shape, ndim * sizeof *shape);
    t->data = dst;
    if (block + 1 > mf->n_blocks)
        mf->n_blocks = block + 1;
    return MP_OK;
}

/*
 * Walks the tensor records.  Pass 1 (mf->tensors NULL) checks every field
 * against the bytes left and sums the floats and name bytes; pass 2 fills
 * the tensors from the checked records.
 */
static mp_status walk_tensors(mp_modelfile *mf, cursor c, uint32_t n, const char *origin,
                              uint64_t *n_floats, uint64_t *n_name_bytes)
{
    uint64_t floats = 0, names = 0;
    mp_status st;
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *p;
        uint64_t at = c.pos;
        if (!cur_take(&c, 4, &p))
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %u: record header runs past the end "
                                "(offset %llu)", origin, i, (unsigned long long)at);
        uint32_t nl = get_u32(p);
        if (nl == 0 || nl > MAX_NAME)
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %u: name length %u at offset %llu "
                                "is not in 1..%u", origin, i, nl, (unsigned long long)at, MAX_NAME);
        const unsigned char *name;
        if (!cur_take(&c, nl, &name))
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %u: name runs past the end", origin, i);
        if (memchr(name, '\0', nl))
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %u: name contains a NUL byte", origin, i);
        if (!cur_take(&c, 8, &p))
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %.*s: record runs past the end",
                                origin, (int)nl, name);
        uint32_t block = get_u32(p), ndim = get_u32(p + 4);
        if (ndim < 1 || ndim > MP_TENSOR_MAX_DIMS)
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %.*s: ndim %u is not in 1..%d",
                                origin, (int)nl, name, ndim, MP_TENSOR_MAX_DIMS);
        if (!cur_take(&c, 8ull * ndim, &p))
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %.*s: shape runs past the end",
                                origin, (int)nl, name);
        uint64_t shape[MP_TENSOR_MAX_DIMS], numel = 1, avail = (c.end - c.pos) / 4;
        int too_big = 0;
        for (uint32_t d = 0; d < ndim; d++) {
            shape[d] = get_u64(p + 8 * d);
            /* the product may not exceed the floats left: no overflow */
            if (numel != 0 && shape[d] > avail / numel)
                too_big = 1;
            else
                numel *= shape[d];
        }
        if (block == UINT32_MAX)
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %.*s: member index %u is invalid",
                                origin, (int)nl, name, block);
        const unsigned char *data;
        if (too_big || !cur_take(&c, 4 * numel, &data))
            return mp_error_set(MP_ERR_FORMAT, "%s: tensor %.*s: its values run past the end "
                                "of the file", origin, (int)nl, name);
        if (mf->tensors && (st = store_tensor(mf, i, name, nl, block, ndim, shape, data,
                                              numel, floats, names, origin)))
            return st;
        floats += numel;
        names += nl + 1;
    }
    if (c.pos != c.end)
        return mp_error_set(MP_ERR_FORMAT, "%s: %llu unexplained bytes after the last tensor",
                            origin, (unsigned long long)(c.end - c.pos));
    *n_floats = floats;
    *n_name_bytes = names;
    return MP_OK;
}

mp_status mp_modelfile_parse(mp_modelfile **out, const void *bytes, size_t n, const char *origin)
{
    *out = NULL;
    const unsigned char *b = bytes;
    if (n < 8 ? memcmp(b, MAGIC, n) != 0 : memcmp(b, MAGIC, 8) != 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: not a molprop model file (bad magic bytes)",
                            origin);
    if (n < FIXED_SIZE + 4)
        return mp_error_set(MP_ERR_FORMAT, "%s: truncated (%zu bytes; the fixed header alone "
                            "needs %u)", origin, n, FIXED_SIZE + 4);
    uint32_t version = get_u32(b + 8);
    if (version < MP_MODELFILE_VERSION_MIN || version > MP_MODELFILE_VERSION)
        return mp_error_set(MP_ERR_FORMAT, "%s: model file format version %u; this molprop "
                            "reads versions %u to %u", origin, version,
                            MP_MODELFILE_VERSION_MIN, MP_MODELFILE_VERSION);
    uint64_t stated = get_u64(b + 16);
    if (stated != n)
        return mp_error_set(MP_ERR_FORMAT, "%s: truncated or corrupt: the header says %llu bytes, "
                            "the file has %zu", origin, (unsigned long long)stated, n);
    uint32_t crc_file = get_u32(b + n - 4), crc = mp_crc32(0, b, n - 4);
    if (crc != crc_file)
        return mp_error_set(MP_ERR_CHECKSUM, "%s: corrupt: CRC-32 is 0x%08x, the file says 0x%08x",
                            origin, crc, crc_file);
    uint32_t n_tensors = get_u32(b + 12);
    uint64_t text_len = get_u64(b + 24);
    if (text_len > n - 4 - FIXED_SIZE)
        return mp_error_set(MP_ERR_FORMAT, "%s: header text of %llu bytes runs past the end",
                            origin, (unsigned long long)text_len);
    /* each record takes at least 4 + 1 + 8 + 8 bytes */
    if (n_tensors > (n - 4 - FIXED_SIZE - text_len) / 21)
        return mp_error_set(MP_ERR_FORMAT, "%s: %u tensors cannot fit in %zu bytes", origin,
                            n_tensors, n);

    mp_modelfile *mf = mp_calloc(1, sizeof *mf);
    if (!mf)
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
    mf->version = version;
    mp_status st = mp_kv_parse(&mf->header, (const char *)b + FIXED_SIZE, (size_t)text_len,
                               origin);
    cursor c = { b, FIXED_SIZE + text_len, n - 4 };
    uint64_t n_floats = 0, n_names = 0;
    if (st == MP_OK)
        st = walk_tensors(mf, c, n_tensors, origin, &n_floats, &n_names);
    if (st == MP_OK) {
        mf->tensors = mp_calloc(n_tensors ? n_tensors : 1, sizeof *mf->tensors);
        mf->data_ = mp_malloc(n_floats ? (size_t)n_floats * 4 : 1);
        mf->names_ = mp_malloc(n_names ? (size_t)n_names : 1);
        if (!mf->tensors || !mf->data_ || !mf->names_)
            st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s (%llu parameters)", origin,
                              (unsigned long long)n_floats);
    }
    if (st == MP_OK) {
        mf->n_tensors = n_tensors;
        st = walk_tensors(mf, c, n_tensors, origin, &n_floats, &n_names);
    }
    size_t dup;
    int r = st == MP_OK ? mp_tensors_find_repeat(mf->tensors, mf->n_tensors, &dup) : 0;
    if (r < 0)
        st = mp_error_set(MP_ERR_NOMEM, "out of memory reading %s", origin);
    else if (r)
        st = mp_error_set(MP_ERR_FORMAT, "%s: tensor %s of member %u appears twice", origin,
                          mf->tensors[dup].name, mf->tensors[dup].block);
    if (st) {
        mp_modelfile_free(mf);
        return st;
    }
    *out = mf;
    return MP_OK;
}

mp_status mp_modelfile_read(mp_modelfile **out, const char *path)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    mp_buf b = { 0 };
    mp_status st = MP_OK;
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, fp)) > 0)
        if ((st = mp_buf_append(&b, chunk, got)))
            break;
    if (st == MP_OK && ferror(fp))
        st = mp_error_set(MP_ERR_IO, "error reading %s: %s", path, strerror(errno));
    fclose(fp);
    if (st == MP_OK)
        st = mp_modelfile_parse(out, b.data ? b.data : "", b.len, path);
    mp_buf_free(&b);
    return st;
}

const mp_tensor *mp_modelfile_find(const mp_modelfile *mf, uint32_t block, const char *name)
{
    for (size_t i = 0; i < mf->n_tensors; i++)
        if (mf->tensors[i].block == block && strcmp(mf->tensors[i].name, name) == 0)
            return &mf->tensors[i];
    return NULL;
}

static void format_shape(char *buf, size_t n, uint32_t ndim, const uint64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? ", " : "",
                              (unsigned long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

mp_status mp_modelfile_get(const mp_modelfile *mf, uint32_t block, const char *name,
                           uint32_t ndim, const uint64_t *shape, const float **data)
{
    *data = NULL;
    const char *origin = mp_kv_origin(mf->header);
    const mp_tensor *t = mp_modelfile_find(mf, block, name);
    if (!t)
        return mp_error_set(MP_ERR_FORMAT, "%s: tensor %s of member %u is missing", origin, name,
                            block);
    int same = t->ndim == ndim;
    for (uint32_t d = 0; same && d < ndim; d++)
        same = t->shape[d] == shape[d];
    if (!same) {
        char have[128], want[128];
        format_shape(have, sizeof have, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim, shape);
        return mp_error_set(MP_ERR_FORMAT, "%s: tensor %s of member %u has shape %s, expected %s",
                            origin, name, block, have, want);
    }
    *data = t->data;
    return MP_OK;
}
