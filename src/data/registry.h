/*
 * registry.h - the benchmark datasets molprop knows by name (the 19 of Yang
 * et al. 2019): where their files come from, what they hold, how they are
 * scored, and their SHA-256 checksums.  The list lives in data/datasets.tsv;
 * `molprop data` lists, fetches and verifies them, and training looks a file
 * up here to learn its task type and metric.
 *
 * data/datasets.tsv: lines starting with '#' are comments; the first other
 * line is the header "name file rows tasks task_type metric sha256"
 * (tab-separated), then one line per dataset.  A dataset with no file
 * available has '-' for file, rows, tasks and sha256.
 */
#ifndef MP_REGISTRY_H
#define MP_REGISTRY_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_TASK_REGRESSION, MP_TASK_CLASSIFICATION } mp_task_type;

/* "regression" / "classification"; and the reverse (MP_ERR_ARG on other text). */
const char *mp_task_type_name(mp_task_type t);
mp_status   mp_task_type_parse(const char *s, mp_task_type *out);

typedef struct {
    char        *name;       /* "esol"                                         */
    char        *file;       /* "esol.csv.gz"; NULL: no file available         */
    long         rows;       /* data rows; -1 when unknown (no file)           */
    int          tasks;      /* target columns; -1 when unknown                */
    mp_task_type task_type;
    char        *metric;     /* the paper's metric: RMSE, MAE, ROC-AUC, PRC-AUC */
    char        *sha256;     /* 64 lower-case hex digits; NULL when no file    */
} mp_dataset_info;

typedef struct {
    size_t           n;
    mp_dataset_info *items;  /* in file order */
} mp_registry;

/*
 * Reads the registry.  path NULL = $MOLPROP_REGISTRY, else "data/datasets.tsv"
 * relative to the current directory.  Any malformed line is MP_ERR_FORMAT
 * naming file and line; a missing file MP_ERR_IO.  Free with mp_registry_free.
 */
mp_status mp_registry_load(mp_registry **out, const char *path);
void      mp_registry_free(mp_registry *reg);

/* The entry called `name` (case-insensitive), or NULL. */
const mp_dataset_info *mp_registry_find(const mp_registry *reg, const char *name);

/* The entry whose file is the basename of `path`, with or without its ".gz"
 * ("data/esol.csv.gz", "/tmp/esol.csv" both find esol), or NULL. */
const mp_dataset_info *mp_registry_find_file(const mp_registry *reg, const char *path);

/* "esol, freesolv, ..." in file order, for messages.  Caller frees with mp_free. */
char *mp_registry_names(const mp_registry *reg);

/* How mp_registry_fetch got the file. */
typedef enum {
    MP_FETCH_PRESENT,     /* already in dest_dir with the right checksum: untouched */
    MP_FETCH_MIRROR,      /* copied from $MOLPROP_DATA_MIRROR                       */
    MP_FETCH_DOWNLOADED   /* downloaded from $MOLPROP_DATA_URL + "/" + file         */
} mp_fetch_result;

/*
 * Puts dataset `name`'s file into dest_dir (NULL = "data"; created if
 * missing), from the directory $MOLPROP_DATA_MIRROR or, where that is unset or
 * lacks the file, by download from $MOLPROP_DATA_URL (libcurl; file:// works
 * too).  The bytes go to a temporary file beside the target, are checked
 * against the registry's SHA-256, and only then renamed into place: a
 * mismatch (MP_ERR_CHECKSUM) or any failure leaves nothing behind.  A file
 * already present with the right checksum is left alone (MP_FETCH_PRESENT);
 * one with a wrong checksum is replaced.  Errors: unknown name (MP_ERR_ARG,
 * listing the valid names), a dataset without a file (MP_ERR_ARG), neither
 * variable set (MP_ERR_ARG), source unreadable or download failed (MP_ERR_IO).
 * `result` may be NULL.  Not for concurrent use from several threads
 * (libcurl's global initialisation is not thread-safe).
 */
mp_status mp_registry_fetch(const mp_registry *reg, const char *name, const char *dest_dir,
                            mp_fetch_result *result);

/* SHA-256 of a file's bytes as 64 lower-case hex digits (libcrypto EVP).
 * MP_ERR_IO naming the file when it cannot be read. */
mp_status mp_sha256_file(const char *path, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif /* MP_REGISTRY_H */
