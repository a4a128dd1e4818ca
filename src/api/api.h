/*
 * api.h - the library side of molprop.h's runs: building the summaries the
 * mp_run_* functions hand back, and the checks every run starts with.
 */
#ifndef MP_API_H
#define MP_API_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An empty summary (MP_ERR_NOMEM on no memory). */
mp_status mp_summary_new(mp_summary **out);
/* Adds (or replaces) a number or a text; MP_ERR_NOMEM on no memory. */
mp_status mp_summary_put_number(mp_summary *s, const char *key, double v);
mp_status mp_summary_put_text(mp_summary *s, const char *key, const char *text);
/* Records an invalid row (its strings are copied; reason may be NULL). */
mp_status mp_summary_add_invalid(mp_summary *s, size_t line, const char *smiles,
                                 const char *reason);

/* What every mp_run_<verb> checks first: options of `verb`, and every
 * required option with a value ("--data is required"). */
mp_status mp_run_check(const mp_options *o, const char *verb);

/* The start of every mp_run_*: *out cleared (when out is not NULL), o
 * checked to be `verb`'s options (with the required ones), applied to the verb's struct `args` (mp_options_apply)
 * and, when backend is not NULL, the backend's name written to
 * backend[cap] (mp_options_backend).  The first failure's status. */
mp_status mp_run_start(const mp_options *o, const char *verb, void *args, char *backend,
                       size_t cap, mp_summary **out);

/* Hands s to *out when out is not NULL, else frees it. */
void mp_summary_hand_over(mp_summary *s, mp_summary **out);

/* hpopt's trials: the data file read and featurized once for a search
 * (as the benchmark runner's runs and --devices' ranks have it), lent
 * read-only to every trial whose inputs would be the same: the same file,
 * columns, loss bounds and featurization, and no features file or atom /
 * bond columns (read per run).  A trial whose options differ there reads
 * its own.  A run on shared inputs is the run it would be alone, bit for
 * bit, minus the reading.  With a features file or atom / bond columns in
 * the base, open shares nothing (every trial reads its own). */
typedef struct mp_train_shared mp_train_shared;
mp_status mp_train_shared_open(mp_train_shared **out, const mp_options *base);
void mp_train_shared_free(mp_train_shared *sh);
/* mp_run_train, on sh's inputs where they fit (sh may be NULL). */
mp_status mp_run_train_shared(const mp_options *o, const mp_train_shared *sh,
                              mp_summary **out);

/* The end of a run that built summary s: st == MP_OK hands s over
 * (mp_summary_hand_over), any other status frees it.  Returns st. */
mp_status mp_summary_finish(mp_status st, mp_summary *s, mp_summary **out);

#ifdef __cplusplus
}
#endif
#endif /* MP_API_H */
