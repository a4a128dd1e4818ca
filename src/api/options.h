/*
 * options.h - the one table of every verb's options, and what the library
 * does with it.  The public face (mp_options_*: set by name, read an INI
 * file, help text, JSON) is in molprop.h; this header is the table itself
 * and the step from a checked mp_options to the struct a pipeline takes
 * (mp_train_opts, mp_predict_opts, and the argument structs below).
 *
 * One row per option: its key (the long flag without dashes), type,
 * default, range or choices, help text, and where its value lands (offsetof
 * into the verb's struct).  From the table: the command line's flags, the
 * configuration files' keys, --help, validation with one wording for both,
 * and metrics.json's "config" object.
 */
#ifndef MP_OPTIONS_H
#define MP_OPTIONS_H

#include "core/core.h"
#include "data/split.h"
#include "featurize/featurize.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Converts (field != NULL) or only checks (field == NULL) a value's text;
 * MP_ERR_ARG with a message on bad text.  text is owned by the options and
 * lives as long as they do, so a converter may keep the pointer. */
typedef mp_status (*mp_option_parse_fn)(const char *text, void *field);

enum {
    MP_OPTF_REQUIRED = 1u << 0,   /* the verb cannot run without it            */
    MP_OPTF_AUTO     = 1u << 1,   /* INT: also takes "auto", stored as 0       */
    MP_OPTF_NUMBERS  = 1u << 2,   /* LIST: the items are numbers (in JSON too) */
    MP_OPTF_U64      = 1u << 3,   /* INT: the field is a uint64_t              */
    MP_OPTF_ALIAS    = 1u << 4    /* another name of an option of the same     *
                                   * field (Chemprop's): either name sets it    */
};

typedef struct {
    const char        *key;      /* NULL: a heading of the help text (help)    */
    mp_option_type     type;
    const char        *def;      /* default as text; NULL: none (unset)        */
    double             lo, hi;   /* INT, REAL: the accepted range              */
    const char        *choices;  /* CHOICE: "a|b|c"                            */
    const int         *values;   /* CHOICE: the int stored per choice          */
    mp_option_parse_fn parse;    /* converter/checker replacing the built-in   */
    long               offset;   /* where it lands in the verb's struct; -1: nowhere */
    const char        *arg;      /* help: placeholder of the value ("N")       */
    const char        *help;     /* help: lines separated by '\n'              */
    unsigned           flags;    /* MP_OPTF_*                                  */
} mp_option_def;

/* The table of `verb` (n entries, headings included), or NULL. */
const mp_option_def *mp_option_table(const char *verb, size_t *n);
/* The verb of a table mp_option_table returned (static storage; NULL for
 * any other pointer). */
const char          *mp_option_table_verb(const mp_option_def *defs);

/*
 * Writes every option of o that lands somewhere into the verb's struct at
 * `target` (mp_train_opts for "train", mp_predict_opts for "predict", the
 * structs below for the others), defaults included.  Text fields point into
 * o, so o must outlive the struct's use.  MP_ERR_ARG if a value no longer
 * converts (cannot happen for values that were checked when set).
 */
mp_status mp_options_apply(const mp_options *o, void *target);

/* Checks a value for `key` of `verb` as mp_options_set_from would, without
 * keeping it (the configuration reader checks the other verbs' sections). */
mp_status mp_options_check_from(const char *verb, const char *key, const char *value,
                                const char *origin);

/* The backend name the "device" and "precision" options make:
 * "<device>" or "<device>:<precision>".  MP_ERR_ARG when both name a
 * precision ("gpu:bf16" with --precision) or the result does not fit. */
mp_status mp_options_backend(const mp_options *o, char *buf, size_t n);

/* The JSON object of mp_options_json, as a cJSON tree the caller owns
 * (cJSON_Delete); NULL on no memory.  void * keeps cJSON out of this header. */
void *mp_options_cjson(const mp_options *o);

/* ===================================================================== */
/* The verbs' argument structs (train and predict use theirs: trainer.h, */
/* predict.h)                                                            */
/* ===================================================================== */

typedef struct {
    const char *model_path, *data_path, *smiles_column, *metric, *features_path;
    const char *atom_path, *bond_path;      /* user atom / bond columns (columns.h) */
    const char *preds_path, *unc_metrics;   /* eval of a prediction file */
    int         threads;
} mp_eval_args;

typedef struct {
    const char    *data_path, *out_path, *dump_dir, *smiles_column;
    int            gz, no_morgan, no_descriptors, scaffolds, threads;
    unsigned       features;   /* MP_FEAT_* named sets computed besides */
    mp_atom_layout layout;
} mp_featurize_args;

typedef struct {
    const char   *data_path, *out_dir, *smiles_column;
    mp_split_opts split;
    int           threads;
} mp_split_args;

typedef struct {
    const char   *datasets, *models, *seeds;   /* comma-separated lists      */
    mp_split_type split;
    double        split_sizes[3];
    int           epochs, batch_size, threads;
    const char   *data_dir, *out_dir, *registry;
    const char   *cache_dir;       /* NULL: <out>/cache; "none": no cache   */
    const char   *export_splits;   /* NULL: none                            */
    int           missing_skip;    /* 1: skip registry datasets not present */
    int           jobs;            /* runs trained at once (0: auto)        */
    int           quiet;           /* 1: no per-run lines                   */
    /* user atom / bond columns of the D-MPNN runs, per dataset: NAME=FILE,
     * comma-separated (NULL: none); the atom columns' mode (columns.h) */
    const char   *atom_paths, *bond_paths;
    int           atom_mode;
} mp_bench_args;

typedef struct {
    const char *ours, *theirs;
    double      alpha;             /* the paired test's level               */
} mp_bench_compare_args;

typedef struct {
    const char *results, *out_dir, *reference, *title, *gnuplot;
} mp_bench_report_args;

typedef struct {
    const char *dest, *registry, *mirror, *url;
} mp_data_args;

/* `molprop predict --merge` (run/shard.h) */
typedef struct {
    const char *out_path;
    int         merge, remove_parts, quiet;
} mp_predict_merge_args;

enum { MP_HP_KEEP_BEST, MP_HP_KEEP_ALL, MP_HP_KEEP_NONE };

typedef struct {
    const char *space_path, *out_dir;
    int         trials, method, startup, candidates, jobs, keep;
    uint64_t    seed;
    int         halving;       /* successive halving (hpopt/halving.c)        */
    int         halving_eta;   /* 1 in eta trials of a rung goes on (3)       */
    int         halving_min;   /* the fewest epochs before a stop (0: auto)   */
} mp_hpopt_args;

/*
 * libinih over the file at `path` in molprop's INI dialect (';' and '#'
 * comments, inline ones after a blank; no continuation lines; any line
 * length; stop at the first error), fn called per entry with its line.
 * Returns 0, the first failing line (> 0: fn returned 0 or a malformed
 * line), -1 when the file cannot be opened (errno), -2 on no memory, -3 on
 * a read error.  Not thread-safe (libinih's settings are globals).
 */
typedef int (*mp_ini_entry_fn)(void *user, int line, const char *section, const char *name,
                               const char *value);
int mp_ini_parse(const char *path, mp_ini_entry_fn fn, void *user);

/* A copy of o (every value set in o set in the copy). */
mp_status mp_options_copy(mp_options **out, const mp_options *o);
/* The options set in o, one per call from *i (start at 0): the key, its
 * text in *value; NULL after the last. */
const char *mp_options_set_at(const mp_options *o, size_t *i, const char **value);

#ifdef __cplusplus
}
#endif
#endif /* MP_OPTIONS_H */
