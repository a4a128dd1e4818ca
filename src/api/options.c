/*
 * options.c - the mp_options handle over the verbs' option tables
 * (option_tables.c): set by name with checks (one wording for flags and
 * files), read back, help text, and the step into a pipeline's struct
 * (offsetof).  config.c reads INI files and writes the JSON form; the
 * command line maps argv onto these functions and knows no option itself.
 */
#include "api/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* The handle                                                             */
/* ===================================================================== */

struct mp_options {
    const char          *verb;   /* the table's own string */
    const mp_option_def *defs;
    size_t               n;
    char               **text;   /* n: the value set (mp_malloc'd), NULL: default */
};

mp_status mp_options_create(mp_options **out, const char *verb)
{
    *out = NULL;
    size_t n;
    const mp_option_def *defs = mp_option_table(verb, &n);
    if (!defs)
        return mp_error_set(MP_ERR_ARG, "no options for '%s' (verbs: %s)", verb ? verb : "(null)",
                            mp_options_verbs());
    mp_options *o = mp_calloc(1, sizeof *o);
    char **text = mp_calloc(n, sizeof *text);
    if (!o || !text) {
        mp_free(o);
        mp_free(text);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    o->verb = mp_option_table_verb(defs);
    o->defs = defs;
    o->n = n;
    o->text = text;
    *out = o;
    return MP_OK;
}

void mp_options_free(mp_options *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++)
        mp_free(o->text[i]);
    mp_free(o->text);
    mp_free(o);
}

const char *mp_options_verb(const mp_options *o)
{
    return o ? o->verb : NULL;
}

/* The index of `key` ('_' matching '-'), or -1. */
static long find_key(const mp_options *o, const char *key)
{
    if (!o || !key)
        return -1;
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->defs[i].key, *s = key;
        if (!k)
            continue;
        while (*k && (*s == *k || (*s == '_' && *k == '-'))) {
            k++;
            s++;
        }
        if (!*k && !*s)
            return (long)i;
    }
    return -1;
}

mp_option_type mp_options_type(const mp_options *o, const char *key)
{
    long i = find_key(o, key);
    return i < 0 ? MP_OPT_UNKNOWN : o->defs[i].type;
}

const char *mp_options_get(const mp_options *o, const char *key)
{
    long i = find_key(o, key);
    if (i < 0)
        return NULL;
    return o->text[i] ? o->text[i] : o->defs[i].def;
}

int mp_options_is_set(const mp_options *o, const char *key)
{
    long i = find_key(o, key);
    return i >= 0 && o->text[i] != NULL;
}

const char *mp_options_missing(const mp_options *o)
{
    for (size_t i = 0; o && i < o->n; i++)
        if ((o->defs[i].flags & MP_OPTF_REQUIRED) && !o->text[i] && !o->defs[i].def)
            return o->defs[i].key;
    return NULL;
}

mp_status mp_options_copy(mp_options **out, const mp_options *o)
{
    *out = NULL;
    mp_options *c;
    mp_status st = mp_options_create(&c, o ? o->verb : NULL);
    if (st)
        return st;
    for (size_t i = 0; i < o->n; i++)
        if (o->text[i] && !(c->text[i] = mp_strdup(o->text[i]))) {
            mp_options_free(c);
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        }
    *out = c;
    return MP_OK;
}

const char *mp_options_set_at(const mp_options *o, size_t *i, const char **value)
{
    for (; o && *i < o->n; (*i)++)
        if (o->defs[*i].key && o->text[*i]) {
            *value = o->text[*i];
            return o->defs[(*i)++].key;
        }
    return NULL;
}

/* ===================================================================== */
/* Checking and converting one value                                      */
/* ===================================================================== */

static int parse_bool(const char *s, int *v)
{
    static const char *const yes[] = { "true", "1", "yes", "on" }, *const no[] = { "false", "0", "no", "off" };
    for (int i = 0; i < 4; i++) {
        if (mp_strcaseeq(s, yes[i])) {
            *v = 1;
            return 1;
        }
        if (mp_strcaseeq(s, no[i])) {
            *v = 0;
            return 1;
        }
    }
    return 0;
}

/* An integer in [lo, hi] (a non-negative one up to 2^64-1 with U64). */
static int parse_integer(const char *s, double lo, double hi, unsigned flags, uint64_t *v)
{
    char *end;
    errno = 0;
    if (flags & MP_OPTF_U64) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '-' || *s == '+')
            return 0;
        unsigned long long u = strtoull(s, &end, 10);
        if (errno || end == s || *end || (double)u > hi || (double)u < lo)
            return 0;
        *v = u;
        return 1;
    }
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || (double)x < lo || (double)x > hi)
        return 0;
    *v = (uint64_t)x;
    return 1;
}

/* "a, b or c" from "a|b|c". */
static void choices_text(const char *choices, char *buf, size_t n)
{
    size_t k = 0, count = 1, seen = 0;
    for (const char *p = choices; *p; p++)
        count += *p == '|';
    for (const char *p = choices; *p && k + 6 < n; p++) {
        if (*p != '|') {
            buf[k++] = *p;
            continue;
        }
        seen++;
        const char *sep = seen + 1 == count ? " or " : ", ";
        for (; *sep && k + 1 < n; sep++)
            buf[k++] = *sep;
    }
    buf[k] = '\0';
}

/* The index of `s` among "a|b|c", or -1. */
static int choice_index(const char *choices, const char *s)
{
    size_t len = strlen(s);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !strncmp(p, s, n))
            return i;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

/* An option's name in messages: "--key" for flags, "key" for files. */
static void option_name(const mp_option_def *d, const char *origin, char *buf, size_t n)
{
    if (origin)
        snprintf(buf, n, "%s: %s", origin, d->key);
    else
        snprintf(buf, n, "--%s", d->key);
}

/*
 * Checks `text` against d, and with field != NULL converts it there.  The
 * message names the option as option_name does.  A LIST's items are trimmed
 * of nothing: "a, b" keeps its space, as the parsers below expect.
 */
static mp_status convert(const mp_option_def *d, const char *text, void *field, const char *origin)
{
    char name[512], what[256];
    option_name(d, origin, name, sizeof name);
    if (d->parse) {
        mp_status st = d->parse(text, field);
        if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", mp_error_message());
            return mp_error_set(st, "%s: %s", name, msg);
        }
        return MP_OK;
    }
    switch (d->type) {
    case MP_OPT_BOOL: {
        int v;
        if (!parse_bool(text, &v))
            return mp_error_set(MP_ERR_ARG, "%s expects true or false, got '%s'", name, text);
        if (field)
            *(int *)field = v;
        return MP_OK;
    }
    case MP_OPT_INT: {
        uint64_t v = 0;
        int is_auto = (d->flags & MP_OPTF_AUTO) && !strcmp(text, "auto");
        if (!is_auto && !parse_integer(text, d->lo, d->hi, d->flags, &v)) {
            if ((d->flags & MP_OPTF_U64) && d->hi > 9.2e18)
                return mp_error_set(MP_ERR_ARG, "%s expects a non-negative integer, got '%s'",
                                    name, text);
            return mp_error_set(MP_ERR_ARG, "%s expects an integer in [%.0f, %.0f]%s, got '%s'",
                                name, d->lo, d->hi, d->flags & MP_OPTF_AUTO ? " or auto" : "",
                                text);
        }
        if (field) {
            if (d->flags & MP_OPTF_U64)
                *(uint64_t *)field = v;
            else
                *(int *)field = (int)(int64_t)v;
        }
        return MP_OK;
    }
    case MP_OPT_REAL: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !(v >= d->lo && v <= d->hi))
            return mp_error_set(MP_ERR_ARG, "%s expects a number in [%g, %g], got '%s'", name,
                                d->lo, d->hi, text);
        if (field)
            *(double *)field = v;
        return MP_OK;
    }
    case MP_OPT_CHOICE: {
        int i = choice_index(d->choices, text);
        if (i < 0) {
            choices_text(d->choices, what, sizeof what);
            return mp_error_set(MP_ERR_ARG, "%s expects %s, got '%s'", name, what, text);
        }
        if (field)
            *(int *)field = d->values ? d->values[i] : i;
        return MP_OK;
    }
    case MP_OPT_LIST:
        if (d->flags & MP_OPTF_NUMBERS) {   /* integers in [lo, hi], comma-separated */
            const char *p = text;
            for (;;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                char item[64];
                uint64_t v;
                if (len == 0 || len >= sizeof item)
                    return mp_error_set(MP_ERR_ARG, "%s expects comma-separated integers, got '%s'",
                                        name, text);
                memcpy(item, p, len);
                item[len] = '\0';
                if (!parse_integer(item, d->lo, d->hi, 0, &v))
                    return mp_error_set(MP_ERR_ARG, "%s expects integers in [%.0f, %.0f], got '%s'",
                                        name, d->lo, d->hi, item);
                if (!comma)
                    break;
                p = comma + 1;
            }
        }
        /* fall through */
    case MP_OPT_TEXT:
        if (field)
            *(const char **)field = text;
        return MP_OK;
    case MP_OPT_UNKNOWN:
        break;
    }
    return mp_error_set(MP_ERR_INTERNAL, "%s: option of unknown type", name);
}

mp_status mp_options_set_from(mp_options *o, const char *key, const char *value,
                              const char *origin)
{
    long i = find_key(o, key);
    if (i < 0) {
        if (origin)
            return mp_error_set(MP_ERR_ARG, "%s: unknown key '%s' in [%s]", origin,
                                key ? key : "(null)", o ? o->verb : "?");
        return mp_error_set(MP_ERR_ARG, "unknown option '--%s' for %s", key ? key : "(null)",
                            o ? o->verb : "?");
    }
    const mp_option_def *d = &o->defs[i];
    if (!value) {
        if (d->type != MP_OPT_BOOL) {
            char name[512];
            option_name(d, origin, name, sizeof name);
            return mp_error_set(MP_ERR_ARG, "%s needs a value", name);
        }
        value = "true";
    }
    if (!*value) {   /* back to the default */
        mp_free(o->text[i]);
        o->text[i] = NULL;
        return MP_OK;
    }
    mp_status st = convert(d, value, NULL, origin);
    if (st)
        return st;
    int b;
    if (d->type == MP_OPT_BOOL && parse_bool(value, &b))
        value = b ? "true" : "false";
    char *copy = mp_strdup(value);
    if (!copy)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    mp_free(o->text[i]);
    o->text[i] = copy;
    return MP_OK;
}

mp_status mp_options_set(mp_options *o, const char *key, const char *value)
{
    return mp_options_set_from(o, key, value, NULL);
}

mp_status mp_options_check_from(const char *verb, const char *key, const char *value,
                                const char *origin)
{
    mp_options *tmp;
    mp_status st = mp_options_create(&tmp, verb);
    if (st)
        return st;
    st = mp_options_set_from(tmp, key, value, origin);
    mp_options_free(tmp);
    return st;
}

/* Option i was given a value other than its default. */
static int given(const mp_options *o, size_t i)
{
    const char *t = o->text[i], *def = o->defs[i].def;
    return t && !(def && !strcmp(t, def));
}

/* Another name of option i's field (MP_OPTF_ALIAS) that was given a value
 * other than its default, or NULL. */
static const mp_option_def *same_field_given(const mp_options *o, size_t i)
{
    for (size_t j = 0; j < o->n; j++)
        if (j != i && o->defs[j].key && o->defs[j].offset == o->defs[i].offset &&
            ((o->defs[j].flags | o->defs[i].flags) & MP_OPTF_ALIAS) && given(o, j))
            return &o->defs[j];
    return NULL;
}

mp_status mp_options_apply(const mp_options *o, void *target)
{
    for (size_t i = 0; i < o->n; i++) {
        const mp_option_def *d = &o->defs[i];
        if (!d->key || d->offset < 0)
            continue;
        /* two names of one field: the one given sets it; both, only alike */
        const mp_option_def *other = same_field_given(o, i);
        if (other && given(o, i) && strcmp(o->text[i], o->text[other - o->defs]))
            return mp_error_set(MP_ERR_ARG, "--%s and --%s are one option: give one", d->key,
                                other->key);
        if (other && !(given(o, i) && other > d))   /* alike: the first name sets it */
            continue;
        const char *text = o->text[i] ? o->text[i] : d->def;
        void *field = (char *)target + d->offset;
        if (!text) {   /* only text-like options may have no value */
            MP_ASSERT(d->type == MP_OPT_TEXT || d->type == MP_OPT_LIST);
            *(const char **)field = NULL;
            continue;
        }
        mp_status st = convert(d, text, field, NULL);
        if (st)
            return st;
    }
    return MP_OK;
}

mp_status mp_options_backend(const mp_options *o, char *buf, size_t n)
{
    const char *device = mp_options_get(o, "device");
    const char *precision = mp_options_get(o, "precision");
    if (!device)
        device = "cpu";
    if (precision && strchr(device, ':'))
        return mp_error_set(MP_ERR_ARG, "--device %s names a precision already; drop --precision %s",
                            device, precision);
    int len = precision ? snprintf(buf, n, "%s:%s", device, precision)
                        : snprintf(buf, n, "%s", device);
    if (len < 0 || (size_t)len >= n)
        return mp_error_set(MP_ERR_ARG, "backend name '%s' is too long", device);
    return MP_OK;
}

/* ===================================================================== */
/* Help text                                                              */
/* ===================================================================== */

#define HELP_COLUMN 27
#define HELP_WIDTH 79

/* Appends `text` word-wrapped into the help column (lines of at most
 * HELP_WIDTH characters); *col is the current column, updated. */
static mp_status help_words(mp_buf *b, const char *text, size_t *col)
{
    mp_status st = MP_OK;
    const char *p = text;
    while (*p && !st) {
        while (*p == ' ' || *p == '\n')
            p++;
        size_t len = strcspn(p, " \n");
        if (!len)
            break;
        if (*col > HELP_COLUMN && *col + 1 + len > HELP_WIDTH) {
            st = mp_buf_printf(b, "\n%*s", HELP_COLUMN, "");
            *col = HELP_COLUMN;
        }
        if (!st && *col > HELP_COLUMN) {
            st = mp_buf_append(b, " ", 1);
            (*col)++;
        }
        if (!st)
            st = mp_buf_append(b, p, len);
        *col += len;
        p += len;
    }
    return st;
}

char *mp_options_help(const mp_options *o)
{
    mp_buf b = { 0 };
    mp_status st = MP_OK;
    for (size_t i = 0; o && i < o->n && !st; i++) {
        const mp_option_def *d = &o->defs[i];
        if (!d->key) {
            st = mp_buf_printf(&b, "%s\n", d->help);
            continue;
        }
        size_t start = b.len;
        st = mp_buf_printf(&b, "  --%s%s%s", d->key, d->type == MP_OPT_BOOL ? "" : " ",
                           d->type == MP_OPT_BOOL ? "" : d->arg ? d->arg : "V");
        size_t used = b.len - start;
        if (!st && used + 1 >= HELP_COLUMN)
            st = mp_buf_printf(&b, "\n%*s", HELP_COLUMN, "");
        else if (!st)
            st = mp_buf_printf(&b, "%*s", (int)(HELP_COLUMN - used), "");
        size_t col = HELP_COLUMN;
        char tail[256] = "";
        if (d->def && d->type != MP_OPT_BOOL)
            snprintf(tail, sizeof tail, "(default %s)", d->def);
        if (d->flags & MP_OPTF_REQUIRED)
            snprintf(tail, sizeof tail, "(required)");
        if (!st)
            st = help_words(&b, d->help, &col);
        if (!st && *tail)
            st = help_words(&b, tail, &col);
        if (!st)
            st = mp_buf_printf(&b, "\n");
    }
    if (st || !b.data) {
        mp_buf_free(&b);
        return st ? NULL : mp_strdup("");
    }
    return b.data;
}
