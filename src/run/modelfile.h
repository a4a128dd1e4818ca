/*
 * modelfile.h - the .mpm model file: everything `molprop predict` needs to
 * rebuild a trained model (architecture, featurizer, tasks, scalers) in a
 * text header of key = value lines, then the parameters as named float32
 * tensors, one block of them per ensemble member, then a CRC-32.
 *
 * Layout (integers little-endian):
 *
 *   offset  size   field
 *   0       8      magic "\x89MPM\r\n\x1a\n"  (a high-bit byte and CR/LF/^Z,
 *                  as PNG, so text-mode mangling is caught at once)
 *   8       4      u32 format version (MP_MODELFILE_VERSION)
 *   12      4      u32 number of tensors
 *   16      8      u64 size of the whole file in bytes, CRC included
 *   24      8      u64 length H of the header text
 *   32      H      header text: "key = value\n" lines (see mp_kv)
 *   ...            per tensor: u32 name length L (1..255), L bytes of name,
 *                  u32 block (ensemble member), u32 ndim (1..4),
 *                  ndim x u64 dims, prod(dims) float32 values
 *   size-4  4      u32 CRC-32 (zlib's) of every byte before it
 *
 * The writer goes through a temporary file renamed into place, so an
 * interrupted run never leaves half a model.  The reader checks the magic,
 * the version, the stated size, the CRC, and then every length and shape
 * against the bytes that are really there, and refuses anything that does
 * not add up with a message naming the file and the fault.
 *
 *     mp_kv *h;  mp_kv_new(&h);
 *     mp_kv_set(h, "model", "dmpnn");
 *     mp_kv_set_int(h, "hidden_size", 300);
 *     mp_kv_set_strs(h, "task_names", names, n_tasks);
 *     mp_tensor t[2] = {
 *         { "W_i", 0, 2, { 300, 147 }, w_i },
 *         { "W_h", 0, 2, { 300, 300 }, w_h },
 *     };
 *     mp_modelfile_write("model.mpm", h, t, 2);
 *
 *     mp_modelfile *mf;
 *     mp_modelfile_read(&mf, "model.mpm");
 *     long long hidden;
 *     mp_kv_get_int(mf->header, "hidden_size", 1, 100000, &hidden);
 *     const float *w;
 *     mp_modelfile_get(mf, 0, "W_h", 2, (uint64_t[]){ hidden, hidden }, &w);
 *     mp_modelfile_free(mf);
 *
 * Header keys the writer and the reader of a model should agree on (the
 * file format itself requires none of them):
 *   model = dmpnn | ffn                 format_note = free text
 *   hidden_size, depth, ffn_num_layers, ffn_hidden_size, dropout, aggregation,
 *   aggregation_norm, bias, activation   (architecture)
 *   atom_features = v1 | v2, extra_features = morgan,rdkit_2d,... (a string list),
 *   extra_features_dim                  (featurizer)
 *   task_names (string list), task_type = regression | classification
 *   target_scaler.*, feature_scaler.*   (mp_kv_set_scaler)
 *   ensemble_size (= the number of tensor blocks), seed, epochs, metric
 */
#ifndef MP_MODELFILE_H
#define MP_MODELFILE_H

#include "core/core.h"
#include "data/scaler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* mp_kv: an ordered string map with typed accessors                      */
/* ===================================================================== */

/*
 * Keys: 1..128 characters from [A-Za-z0-9_.:/-]; values: any text.  Setting
 * an existing key replaces its value in place (the order is first-set).
 * Typed setters store text that the typed getters read back exactly:
 * integers in decimal, doubles with 17 significant digits ("nan", "inf"
 * allowed), arrays as comma-separated lists (in string arrays a ',' or '\'
 * inside an element is escaped with '\', and an empty element is written
 * "\e").  Getters fail with MP_ERR_FORMAT and a message naming the origin
 * (the file the header came from), the key and the offending value.
 */
typedef struct mp_kv mp_kv;

mp_status   mp_kv_new(mp_kv **out);
void        mp_kv_free(mp_kv *kv);                    /* NULL is fine */
size_t      mp_kv_count(const mp_kv *kv);
const char *mp_kv_key(const mp_kv *kv, size_t i);     /* i < count    */
const char *mp_kv_value(const mp_kv *kv, size_t i);
/* Where the header came from ("model.mpm"), for messages; "header" if unset. */
const char *mp_kv_origin(const mp_kv *kv);

/* Setters: MP_ERR_ARG for an invalid key, MP_ERR_NOMEM. */
mp_status mp_kv_set(mp_kv *kv, const char *key, const char *value);
mp_status mp_kv_set_int(mp_kv *kv, const char *key, long long v);
mp_status mp_kv_set_double(mp_kv *kv, const char *key, double v);
mp_status mp_kv_set_doubles(mp_kv *kv, const char *key, const double *v, size_t n);
mp_status mp_kv_set_strs(mp_kv *kv, const char *key, const char *const *v, size_t n);

/* The raw value, or NULL when the key is absent. */
const char *mp_kv_get(const mp_kv *kv, const char *key);

/* Getters: MP_ERR_FORMAT when the key is absent or its value does not parse
 * (or an integer lies outside [lo, hi]). */
mp_status mp_kv_get_str(const mp_kv *kv, const char *key, const char **out);
mp_status mp_kv_get_int(const mp_kv *kv, const char *key, long long lo, long long hi,
                        long long *out);
mp_status mp_kv_get_double(const mp_kv *kv, const char *key, double *out);
/* *out: n doubles, one allocation (mp_free); NULL when n == 0. */
mp_status mp_kv_get_doubles(const mp_kv *kv, const char *key, double **out, size_t *n);
/* *out: n strings in one allocation (the pointer array and the text): free
 * it with a single mp_free.  NULL when n == 0. */
mp_status mp_kv_get_strs(const mp_kv *kv, const char *key, char ***out, size_t *n);

/*
 * The header text: one "key = value\n" line per entry, in order; in values
 * '\' '\n' '\r' are written as "\\" "\n" "\r".  Appends to *out.
 */
mp_status mp_kv_format(const mp_kv *kv, mp_buf *out);
/*
 * Parses header text of `len` bytes (no NUL needed).  Blank lines and lines
 * starting with '#' are skipped; anything else must be "key = value".
 * Errors name `origin` and the line: a missing " = ", a bad key, a repeated
 * key, a bad escape, a NUL byte.  *out is NULL on failure.
 */
mp_status mp_kv_parse(mp_kv **out, const char *text, size_t len, const char *origin);

/*
 * A scaler under `prefix`: "<prefix>.kind" = targets|features,
 * "<prefix>.mean" and "<prefix>.std" = n_cols doubles each (exact).
 */
mp_status mp_kv_set_scaler(mp_kv *kv, const char *prefix, const mp_scaler *s);
/*
 * Reads the scaler stored under `prefix` into *s (free with mp_scaler_free).
 * MP_ERR_FORMAT, naming the origin and key, when a key is missing, the kind
 * is unknown, mean and std differ in length or do not have n_cols values
 * (n_cols 0: any length), or a value is invalid (see mp_scaler_set).
 */
mp_status mp_kv_get_scaler(const mp_kv *kv, const char *prefix, size_t n_cols, mp_scaler *s);

/* ===================================================================== */
/* Tensors and the file                                                   */
/* ===================================================================== */

/* Version 2 (issue 11) adds the header keys of the task types, losses and
 * layers (modelio.c), written only where a model differs from version 1's;
 * files of version 1 still load. */
#define MP_MODELFILE_VERSION 2u
#define MP_MODELFILE_VERSION_MIN 1u
#define MP_TENSOR_MAX_DIMS   4

typedef struct {
    const char  *name;      /* 1..255 bytes, no NUL                   */
    uint32_t     block;     /* ensemble member (0 for a single model) */
    uint32_t     ndim;      /* 1..MP_TENSOR_MAX_DIMS                  */
    uint64_t     shape[MP_TENSOR_MAX_DIMS];
    const float *data;      /* prod(shape) values, row-major          */
} mp_tensor;

/* prod(shape[0..ndim)); 0 when ndim is out of range. */
uint64_t mp_tensor_numel(const mp_tensor *t);
/* 1 when two of t[0..n) have the same block and name (one of them into
 * *dup), 0 when none, -1 out of memory (modelfile_repeat.c). */
int mp_tensors_find_repeat(const mp_tensor *t, size_t n, size_t *dup);

typedef struct {
    uint32_t   version;
    mp_kv     *header;
    size_t     n_tensors;
    mp_tensor *tensors;    /* in file order; names and data owned by the file */
    uint32_t   n_blocks;   /* 1 + the largest block index; 0 with no tensors  */
    /* private */
    float     *data_;
    char      *names_;
} mp_modelfile;

/*
 * Writes header + tensors to `path` atomically.  MP_ERR_ARG (nothing
 * written) for a bad name, ndim, a NULL data pointer with values to write,
 * or two tensors with the same block and name; MP_ERR_IO when the file
 * cannot be written.  The tensors' data are only read.
 */
mp_status mp_modelfile_write(const char *path, const mp_kv *header,
                             const mp_tensor *tensors, size_t n_tensors);

/*
 * Reads and checks a whole model file.  Failures: MP_ERR_IO (cannot open or
 * read), MP_ERR_FORMAT (bad magic, other version, truncated, lengths or
 * shapes that overrun, a malformed header, repeated tensors),
 * MP_ERR_CHECKSUM (CRC mismatch), MP_ERR_NOMEM.  *out is NULL on failure.
 */
mp_status mp_modelfile_read(mp_modelfile **out, const char *path);
/* The same from bytes in memory; `origin` names them in messages. */
mp_status mp_modelfile_parse(mp_modelfile **out, const void *bytes, size_t n,
                             const char *origin);
void      mp_modelfile_free(mp_modelfile *mf);   /* NULL is fine */

/* The tensor (block, name), or NULL. */
const mp_tensor *mp_modelfile_find(const mp_modelfile *mf, uint32_t block, const char *name);

/*
 * The data of tensor (block, name) after checking that it exists and has
 * exactly the expected ndim and shape; otherwise MP_ERR_FORMAT with a
 * message such as "model.mpm: tensor W_h of member 2 has shape [300, 200],
 * expected [300, 300]".
 */
mp_status mp_modelfile_get(const mp_modelfile *mf, uint32_t block, const char *name,
                           uint32_t ndim, const uint64_t *shape, const float **data);

#ifdef __cplusplus
}
#endif
#endif /* MP_MODELFILE_H */
