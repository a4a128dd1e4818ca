/*
 * config.c - options to and from files: the INI reader (libinih) that sets
 * a verb's options from its [section] of a configuration file, with
 * file:line in every message, and the JSON object of a resolved
 * configuration that metrics.json records under "config".
 */
#include "api/options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* INI                                                                    */
/* ===================================================================== */

/* libinih's fgets-style reader, counting lines: the handler learns the line
 * it is called for (this build of libinih does not pass it). */
typedef struct {
    FILE            *fp;
    int              line;           /* the line being read, 1-based */
    int              at_line_start;
    mp_ini_entry_fn  fn;
    void            *user;
} line_reader;

static char *read_line(char *str, int num, void *stream)
{
    line_reader *r = stream;
    char *s = fgets(str, num, r->fp);
    if (!s)
        return NULL;
    if (r->at_line_start)
        r->line++;
    size_t n = strlen(s);
    r->at_line_start = n > 0 && s[n - 1] == '\n';
    return s;
}

static int entry(void *user, const char *section, const char *name, const char *value)
{
    line_reader *r = user;
    return r->fn(r->user, r->line, section, name, value);
}

int mp_ini_parse(const char *path, mp_ini_entry_fn fn, void *user)
{
    line_reader r = { .at_line_start = 1, .fn = fn, .user = user };
    if (!(r.fp = fopen(path, "r")))
        return -1;
    /* Our dialect: no continuation lines, ';' or '#' comments (inline ones
     * after a blank), any line length, stop at the first error. */
    ini_allow_multiline = 0;
    ini_stop_on_first_error = 1;
    ini_allow_inline_comments = 1;
    ini_inline_comment_prefixes = (char *)";#";
    ini_use_stack = 0;
    ini_allow_realloc = 1;
    ini_max_line = 1 << 20;
    int rc = ini_parse_stream(read_line, &r, entry, &r);
    int failed_read = ferror(r.fp);
    fclose(r.fp);
    return failed_read && rc >= 0 ? -3 : rc;
}

typedef struct {
    mp_options *o;
    const char *path;
    mp_status   st;
    char        msg[2048];
} ini_ctx;

static int is_verb(const char *s)
{
    return mp_option_table(s, NULL) != NULL;
}

static int on_entry(void *user, int line, const char *section, const char *name,
                    const char *value)
{
    ini_ctx *c = user;
    char origin[1200];
    snprintf(origin, sizeof origin, "%s:%d", c->path, line);
    mp_status st;
    if (!*section)
        st = mp_error_set(MP_ERR_ARG, "%s: '%s' is outside a section (start with [%s])", origin,
                          name, mp_options_verb(c->o));
    else if (!is_verb(section))
        st = mp_error_set(MP_ERR_ARG, "%s: unknown section [%s] (sections: %s)", origin, section,
                          mp_options_verbs());
    else if (!strcmp(section, mp_options_verb(c->o)))
        st = mp_options_set_from(c->o, name, value, origin);
    else
        st = mp_options_check_from(section, name, value, origin);
    if (st == MP_OK)
        return 1;
    c->st = st;
    snprintf(c->msg, sizeof c->msg, "%s", mp_error_message());
    return 0;
}

mp_status mp_options_read_config(mp_options *o, const char *path)
{
    if (!o || !path)
        return mp_error_set(MP_ERR_ARG, "mp_options_read_config: no options or no path");
    ini_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.path = path;
    int rc = mp_ini_parse(path, on_entry, &c);
    if (rc == -1)
        return mp_error_set(MP_ERR_IO, "cannot open configuration file %s: %s", path,
                            strerror(errno));
    if (rc == 0)
        return MP_OK;
    if (c.st)
        return mp_error_set(c.st, "%s", c.msg);
    if (rc == -2)
        return mp_error_set(MP_ERR_NOMEM, "%s: out of memory", path);
    if (rc < 0)
        return mp_error_set(MP_ERR_IO, "cannot read configuration file %s", path);
    return mp_error_set(MP_ERR_FORMAT, "%s:%d: expected 'key = value', a [section] or a comment",
                        path, rc);
}

/* ===================================================================== */
/* JSON                                                                   */
/* ===================================================================== */

/* Adds the items of "a,b,c" (blanks around items dropped) to array `arr`,
 * as numbers when `numbers`. */
static int add_list(cJSON *arr, const char *text, int numbers)
{
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        char *item = mp_malloc(len + 1);
        if (!item)
            return 0;
        memcpy(item, p, len);
        item[len] = '\0';
        cJSON *v = numbers ? cJSON_CreateNumber(strtod(item, NULL)) : cJSON_CreateString(item);
        mp_free(item);
        if (!v || !cJSON_AddItemToArray(arr, v)) {
            cJSON_Delete(v);
            return 0;
        }
        if (!comma)
            return 1;
        p = comma + 1;
    }
}

void *mp_options_cjson(const mp_options *o)
{
    size_t n;
    const mp_option_def *defs = mp_option_table(mp_options_verb(o), &n);
    cJSON *obj = cJSON_CreateObject();
    if (!obj || !defs) {
        cJSON_Delete(obj);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const mp_option_def *d = &defs[i];
        if (!d->key)
            continue;
        const char *text = mp_options_get(o, d->key);
        cJSON *v = NULL;
        if (!text)
            v = cJSON_CreateNull();
        else if (d->type == MP_OPT_BOOL)
            v = cJSON_CreateBool(!strcmp(text, "true"));
        else if ((d->type == MP_OPT_INT && strcmp(text, "auto") != 0) || d->type == MP_OPT_REAL)
            v = cJSON_CreateNumber(strtod(text, NULL));
        else if (d->type == MP_OPT_LIST) {
            v = cJSON_CreateArray();
            if (v && !add_list(v, text, (d->flags & MP_OPTF_NUMBERS) != 0)) {
                cJSON_Delete(v);
                v = NULL;
            }
        } else
            v = cJSON_CreateString(text);
        if (!v || !cJSON_AddItemToObject(obj, d->key, v)) {
            cJSON_Delete(v);
            cJSON_Delete(obj);
            return NULL;
        }
    }
    return obj;
}

char *mp_options_json(const mp_options *o)
{
    cJSON *obj = mp_options_cjson(o);
    char *text = obj ? cJSON_Print(obj) : NULL;
    cJSON_Delete(obj);
    char *copy = text ? mp_strdup(text) : NULL;   /* ours: freed with mp_free */
    cJSON_free(text);
    return copy;
}
