/*
 * space.c - the search space file of `molprop hpopt` (hpopt.h): one [space]
 * section of "option = kind args", read with libinih, every bound and
 * choice checked against the train option table.
 */
#include "hpopt/hpopt.h"

#include "api/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mp_hp_space *s;
    int          line;
    mp_status    st;
    char         msg[2048];
} space_ctx;

static int fail(space_ctx *c, const char *fmt, const char *a, const char *b)
{
    char text[1024];
    snprintf(text, sizeof text, fmt, a, b);
    snprintf(c->msg, sizeof c->msg, "%.1000s:%d: %.1000s", c->s->path, c->line, text);
    c->st = MP_ERR_FORMAT;
    return 0;
}

/* The train option check of one value, its message kept on failure. */
static int check_value(space_ctx *c, const char *key, const char *value)
{
    char origin[1200];
    snprintf(origin, sizeof origin, "%s:%d", c->s->path, c->line);
    if (mp_options_check_from("train", key, value, origin) == MP_OK)
        return 1;
    snprintf(c->msg, sizeof c->msg, "%s", mp_error_message());
    c->st = MP_ERR_FORMAT;
    return 0;
}

static int number(const char *tok, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(tok, &end);
    return tok[0] && !*end && errno == 0 && isfinite(*v);
}

static int on_entry(void *user, int line, const char *section, const char *name,
                    const char *value)
{
    space_ctx *c = user;
    c->line = line;
    mp_hp_space *s = c->s;
    if (c->st != MP_OK)
        return 0;   /* the first error is the one reported */
    if (strcmp(section, "space") != 0)
        return fail(c, "'%s' is not in a [space] section%s", name, "");
    if (s->n == MP_HP_MAX_DIMS)
        return fail(c, "more than %s dimensions", "32", "");
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->dims[i].key, name))
            return fail(c, "'%s' is given twice%s", name, "");
    if (!strcmp(name, "data") || !strcmp(name, "save-dir") || !strcmp(name, "seed"))
        return fail(c, "'%s' cannot be searched over%s", name, "");
    if (strlen(name) >= sizeof s->dims[0].key)
        return fail(c, "option name '%s' too long%s", name, "");
    mp_hp_dim *d = &s->dims[s->n];
    memset(d, 0, sizeof *d);
    snprintf(d->key, sizeof d->key, "%s", name);

    char buf[1024];
    snprintf(buf, sizeof buf, "%s", value);
    char *tok[MP_HP_MAX_CHOICES + 2], *save = NULL;
    int nt = 0;
    for (char *t = strtok_r(buf, " \t,", &save); t; t = strtok_r(NULL, " \t,", &save)) {
        if (nt == MP_HP_MAX_CHOICES + 1)
            return fail(c, "'%s': more than %s choices", name, "32");
        tok[nt++] = t;
    }
    if (nt == 0)
        return fail(c, "'%s' has no kind (int, real, log or choice)%s", name, "");
    if (!strcmp(tok[0], "choice")) {
        if (nt < 2)
            return fail(c, "'%s': choice needs at least one value%s", name, "");
        d->kind = MP_HP_CHOICE;
        for (int i = 1; i < nt; i++) {
            if (!check_value(c, name, tok[i]))
                return 0;
            for (int j = 0; j < d->n_choices; j++)
                if (!strcmp(d->choices[j], tok[i]))
                    return fail(c, "'%s': choice '%s' is given twice", name, tok[i]);
            if (!(d->choices[d->n_choices] = mp_strdup(tok[i]))) {
                c->st = mp_error_set(MP_ERR_NOMEM, "out of memory");
                snprintf(c->msg, sizeof c->msg, "out of memory");
                return 0;
            }
            d->n_choices++;
        }
        s->n++;
        return 1;
    }
    if (!strcmp(tok[0], "int"))
        d->kind = MP_HP_INT;
    else if (!strcmp(tok[0], "real"))
        d->kind = MP_HP_REAL;
    else if (!strcmp(tok[0], "log"))
        d->kind = MP_HP_LOG;
    else
        return fail(c, "'%s': unknown kind '%s' (int, real, log or choice)", name, tok[0]);
    int max_args = d->kind == MP_HP_LOG ? 3 : 4;
    if (nt < 3 || nt > max_args)
        return fail(c, "'%s': expected '%s LO HI%s'", name,
                    d->kind == MP_HP_LOG ? "log" : d->kind == MP_HP_INT ? "int" : "real");
    if (!number(tok[1], &d->lo) || !number(tok[2], &d->hi) ||
        (nt == 4 && !number(tok[3], &d->step)))
        return fail(c, "'%s': bounds and step must be numbers (\"%s\")", name, value);
    if (!(d->lo < d->hi))
        return fail(c, "'%s': LO must be below HI (\"%s\")", name, value);
    if (d->kind == MP_HP_LOG && !(d->lo > 0))
        return fail(c, "'%s': a log range needs LO > 0 (\"%s\")", name, value);
    if (d->kind == MP_HP_INT) {
        if (d->step == 0)
            d->step = 1;
        if (d->lo != floor(d->lo) || d->hi != floor(d->hi) || d->step != floor(d->step) ||
            d->step < 1)
            return fail(c, "'%s': int bounds and step must be whole, step >= 1 (\"%s\")", name,
                        value);
    }
    if (d->step < 0 || (d->step > 0 && d->step > d->hi - d->lo))
        return fail(c, "'%s': step must be positive and at most HI - LO (\"%s\")", name, value);
    if (!check_value(c, name, tok[1]) || !check_value(c, name, tok[2]))
        return 0;
    s->n++;
    return 1;
}

mp_status mp_hp_space_read(mp_hp_space *s, const char *path)
{
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    space_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    int rc = mp_ini_parse(path, on_entry, &c);
    if (rc == -1)
        return mp_error_set(MP_ERR_IO, "cannot open search space %s: %s", path, strerror(errno));
    if (c.st != MP_OK) {
        mp_hp_space_free(s);
        return mp_error_set(c.st, "%s", c.msg);
    }
    if (rc != 0) {
        mp_hp_space_free(s);
        if (rc < 0)
            return mp_error_set(rc == -2 ? MP_ERR_NOMEM : MP_ERR_IO, "cannot read search space %s",
                                path);
        return mp_error_set(MP_ERR_FORMAT, "%s:%d: expected 'option = kind ...', [space] or a "
                            "comment", path, rc);
    }
    if (s->n == 0)
        return mp_error_set(MP_ERR_FORMAT, "%s: no dimensions (a [space] section of "
                            "'option = int|real|log|choice ...' lines)", path);
    return MP_OK;
}

void mp_hp_space_free(mp_hp_space *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n && i < MP_HP_MAX_DIMS; i++)
        for (int j = 0; j < s->dims[i].n_choices; j++)
            mp_free(s->dims[i].choices[j]);
    /* also a dimension being filled when the file failed */
    if (s->n < MP_HP_MAX_DIMS)
        for (int j = 0; j < s->dims[s->n].n_choices; j++)
            mp_free(s->dims[s->n].choices[j]);
    s->n = 0;
}

void mp_hp_value_text(const mp_hp_dim *d, double v, char *buf, size_t n)
{
    if (d->kind == MP_HP_CHOICE) {
        int i = (int)v;
        snprintf(buf, n, "%s", i >= 0 && i < d->n_choices ? d->choices[i] : "?");
    } else if (d->kind == MP_HP_INT)
        snprintf(buf, n, "%.0f", v);
    else {
        /* a grid point to 10 digits (0.15), other values to 6, unless that
         * leaves the range; the search goes on with the value read back */
        snprintf(buf, n, d->step > 0 ? "%.10g" : "%.6g", v);
        double back = strtod(buf, NULL);
        if (!(back >= d->lo && back <= d->hi))
            snprintf(buf, n, "%.17g", v);
    }
}

mp_status mp_hp_value_parse(const mp_hp_dim *d, const char *text, double *v)
{
    if (d->kind == MP_HP_CHOICE) {
        for (int i = 0; i < d->n_choices; i++)
            if (!strcmp(d->choices[i], text)) {
                *v = i;
                return MP_OK;
            }
    } else if (number(text, v) && *v >= d->lo && *v <= d->hi &&
               (d->kind != MP_HP_INT || *v == floor(*v)))
        return MP_OK;
    return mp_error_set(MP_ERR_FORMAT, "'%s' is not a value of %s", text, d->key);
}
