/*
 * error.c - per-thread last-error message and assertion failure.
 */
#include "core.h"

#include <stdarg.h>
#include <stdlib.h>

static _Thread_local char tls_msg[2048];

mp_status mp_error_set(mp_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    return st;
}

const char *mp_error_message(void) { return tls_msg; }

void mp_error_clear(void) { tls_msg[0] = '\0'; }

const char *mp_status_name(mp_status st)
{
    switch (st) {
    case MP_OK:           return "ok";
    case MP_ERR_IO:       return "I/O error";
    case MP_ERR_FORMAT:   return "format error";
    case MP_ERR_ARG:      return "bad argument";
    case MP_ERR_NOMEM:    return "out of memory";
    case MP_ERR_CHECKSUM: return "checksum mismatch";
    case MP_ERR_NODEVICE: return "no GPU";
    case MP_ERR_INTERNAL: return "internal error";
    case MP_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

void mp_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "molprop: internal assertion failed at %s:%d: %s\n",
            file, line, expr);
    abort();
}
