/*
 * registry.h - the benchmark datasets molprop knows by name (the 19 of Yang
 * et al. 2019): where their files come from, what they hold, how they are
 * scored, and their SHA-256 checksums.  The list lives in data/datasets.tsv;
 * `molprop data` lists, fetches and verifies them, and training looks a file
 * up here to learn its task type and metric.
 *
 * The file format is in molprop.h (mp_registry_load).  Where files come
 * from (a mirror directory, a base URL) and which registry file to read are
 * the caller's arguments: the library reads no environment variable; the
 * command line passes $MOLPROP_REGISTRY, $MOLPROP_DATA_MIRROR and
 * $MOLPROP_DATA_URL in.
 */
#ifndef MP_REGISTRY_H
#define MP_REGISTRY_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mp_task_type, mp_dataset_info, mp_registry_load/free/count/at/find/names,
 * mp_registry_fetch and mp_sha256_file are public: molprop.h has their
 * contracts.  This header adds what the library itself uses. */

/* A task type's name (mp_task_type_name's) to the type (MP_ERR_ARG on other
 * text). */
mp_status mp_task_type_parse(const char *s, mp_task_type *out);

struct mp_registry {
    size_t           n;
    mp_dataset_info *items;  /* in file order */
};

/* The default registry file, relative to the current directory. */
#define MP_REGISTRY_DEFAULT "data/datasets.tsv"

/* The entry whose file is the basename of `path`, with or without its ".gz"
 * ("data/esol.csv.gz", "/tmp/esol.csv" both find esol), or NULL. */
const mp_dataset_info *mp_registry_find_file(const mp_registry *reg, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* MP_REGISTRY_H */
