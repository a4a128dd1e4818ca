/*
 * shard.h - prediction split over processes: `molprop predict --shard I/N`
 * (job arrays: each process predicts one byte range of the input into a
 * part file), `molprop predict --merge` (the parts joined in order), and
 * `mpirun -np K molprop predict` (both at once, rank 0 joining).
 *
 * The ranges: the bytes after the header are cut into N nearly equal
 * pieces, each boundary moved forward to the next record start.  A record
 * start is found from the file's beginning by counting quotes: in RFC 4180
 * a line break lies inside a quoted field exactly when an odd number of
 * quote characters precede it in the record, so a quoted SMILES or name
 * spanning lines stays whole.  That scan reads the file up to the range's
 * end (memory-speed, a small cost beside featurization), and gives the
 * range's first line and row number, so messages keep the file's own line
 * numbers and dropout masks or --features-path rows stay those of one
 * process.  Gzipped input and standard input have no byte ranges: refused.
 *
 * A part file: one line "#molprop-part I/N ..." naming its range and input,
 * the output's header, the rows, and a last line "#molprop-part-end ...".
 * The merge checks every part against the others (count, input, model,
 * contiguous ranges, header, the end line) before it writes anything.
 */
#ifndef MP_SHARD_H
#define MP_SHARD_H

#include "run/predict.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "I/N" with 0 <= I < N <= 100000 into *spec; MP_ERR_ARG saying what is wrong. */
mp_status mp_shard_parse(const char *text, mp_shard_spec *spec);
/* The option's converter (options.c): "none" (no shards, count 0) or I/N
 * into the mp_shard_spec at field (NULL: only checks). */
mp_status mp_shard_parse_option(const char *text, void *field);

/* One shard of an input file. */
typedef struct {
    int      index, count;
    uint64_t size;            /* the input's bytes                           */
    int64_t  mtime;           /* its modification time (seconds)             */
    uint64_t header_end;      /* the first byte after the header record      */
    uint64_t start, end;      /* this shard's bytes [start, end)             */
    size_t   line;            /* the physical line at start (1-based)        */
    uint64_t row0;            /* data rows before start                      */
    uint64_t model_bytes;     /* the model file's size (0: a directory)      */
    uint64_t align;           /* boundaries fall on multiples of align rows  */
    /* the part being written */
    char     part_path[4200];
    long long head_end, header_bytes;
} mp_shard;

/* Finds shard spec->index of spec->count of the plain file `path`, its
 * boundaries on multiples of `align` data rows (the prediction batch: a
 * molecule's numbers depend on the batch it is computed in, through the
 * BLAS kernels' blocking, so the shards batch as one process does).
 * MP_ERR_IO when it cannot be read, MP_ERR_ARG for gzip or "-". */
mp_status mp_shard_plan(mp_shard *s, const char *path, mp_shard_spec spec, int32_t align);

/* "<out>.shard-I-of-N" into buf. */
void mp_shard_part_path(char *buf, size_t cap, const char *out_path, int index, int count);

/* The hooks of mp_predict_file for a shard: after the header row of the
 * input has been read (plans the shard, restricts the reader to its range,
 * fills s->part_path), after the part is opened (its first line), after the
 * output's header, and before the commit (the end line). */
struct mp_csv_reader;
mp_status mp_shard_begin(mp_shard *s, const mp_predict_opts *o, struct mp_csv_reader *r,
                         int32_t align);
void      mp_shard_write_head(mp_shard *s, FILE *fp);
void      mp_shard_header_done(mp_shard *s, FILE *fp);
void      mp_shard_write_tail(mp_shard *s, FILE *fp, const mp_predict_stats *stats);

/*
 * Joins the parts <out>.shard-*-of-N in order into out (atomically): the
 * output one process would have written.  Refuses, naming the files,
 * before writing anything: no parts, a missing or duplicate index, parts
 * of different counts, inputs, models or headers, ranges that do not join,
 * a part without its end line.  remove_parts: delete them after success.
 * stats gets the rows and invalid rows of all the parts.
 */
mp_status mp_predict_merge(const char *out_path, int remove_parts, mp_predict_stats *stats);

/*
 * mp_predict_file, or under an MPI launcher of K > 1 ranks: every rank
 * predicts its shard into a part, rank 0 joins them into o->out_path and
 * removes them; stats are the totals on every rank.  On any rank's failure
 * every rank fails and nothing is left.
 */
mp_status mp_predict_run(const mp_predict_opts *o, mp_predict_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* MP_SHARD_H */
