/*
 * backend.c - the backend registry: opening a backend by name.
 *
 * Each backend module exports one provider (ops.h: mp_backend_provider):
 * the names it answers to, a line for help texts, its opener and its
 * availability test.  The table below lists the modules linked into the
 * library, not backend names: what a name means is the provider's business,
 * so no code here (or above: models, run, cli) knows a backend by its name.
 * A name is "family" or "family:variant" ("cpu", "ref64", "gpu:bf16");
 * the variant (a precision) is the provider's to parse.
 */
#include "backend/ops.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const mp_backend_provider *const providers[] = {
    &mp_backend_cpu_provider,
    &mp_backend_gpu_provider,
    &mp_backend_ref_provider,
};
#define N_PROVIDERS (sizeof providers / sizeof providers[0])

/* Whether `name` is one of p's names ("a, b" list), or one of them followed
 * by ":variant". */
static int answers(const mp_backend_provider *p, const char *name)
{
    const char *s = p->names;
    while (*s) {
        while (*s == ',' || isspace((unsigned char)*s))
            s++;
        size_t len = 0;
        while (s[len] && s[len] != ',' && !isspace((unsigned char)s[len]))
            len++;
        if (len && strncmp(name, s, len) == 0 && (name[len] == '\0' || name[len] == ':'))
            return 1;
        s += len;
    }
    return 0;
}

const mp_backend_provider *mp_backend_find(const char *name)
{
    if (!name || !*name)
        name = "cpu";
    for (size_t i = 0; i < N_PROVIDERS; i++)
        if (answers(providers[i], name))
            return providers[i];
    return NULL;
}

/* The providers' names, for messages: "cpu, gpu[:...], ..." */
static void list_names(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_PROVIDERS && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "; " : "",
                                 providers[i]->usage);
}

mp_status mp_backend_open(mp_backend **out, const char *name)
{
    *out = NULL;
    const mp_backend_provider *p = mp_backend_find(name);
    if (!p) {
        char names[256];
        list_names(names, sizeof names);
        return mp_error_set(MP_ERR_ARG, "unknown backend '%s' (expected %s)", name, names);
    }
    return p->open(out, name && *name ? name : "cpu");
}

int mp_backend_available(const char *name, char *why, size_t n)
{
    const mp_backend_provider *p = mp_backend_find(name);
    if (!p) {
        if (why && n)
            snprintf(why, n, "unknown backend '%s'", name);
        return 0;
    }
    return p->available(why, n);
}

int mp_backend_devices(const char *name)
{
    const mp_backend_provider *p = mp_backend_find(name);
    return !p ? 0 : p->devices ? p->devices() : -1;
}

void mp_backend_close(mp_backend *b)
{
    if (b)
        b->close(b);
}
