/*
 * core.h - the bottom of molprop: status codes and error messages, the one
 * allocation hook, random number generators, and small helpers shared by every
 * module.  Nothing here knows about molecules or models.
 */
#ifndef MP_CORE_H
#define MP_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "molprop.h"   /* the public types: mp_status, ... */

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Status and errors                                                      */
/* ===================================================================== */

/*
 * mp_status, mp_error_message, mp_error_clear and mp_status_name are public
 * (molprop.h, which every internal header reaches through this one).  The
 * last error message is kept per thread, like errno, so a library call can
 * return a status and the caller can read the detail (file, line, column,
 * molecule).  mp_error_set formats it and returns `st` so callers can write
 * `return mp_error_set(MP_ERR_FORMAT, "%s:%zu: ...", path, line);`.
 */
mp_status   mp_error_set(mp_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Assertions on our own invariants: print file:line and abort.  Cheap ones
 * always; MP_DEBUG_ASSERT only in debug builds. */
#define MP_ASSERT(c) \
    ((c) ? (void)0 : mp_assert_fail(#c, __FILE__, __LINE__))
#ifdef MP_DEBUG
#define MP_DEBUG_ASSERT(c) MP_ASSERT(c)
#else
#define MP_DEBUG_ASSERT(c) ((void)0)
#endif
void mp_assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

/* ===================================================================== */
/* Allocation: every allocation in molprop goes through these, so tests   */
/* can count live blocks and make the Nth allocation fail.                */
/* ===================================================================== */

void *mp_malloc(size_t n);             /* NULL on failure (also when n==0 -> non-NULL) */
void *mp_calloc(size_t count, size_t size);
void *mp_realloc(void *p, size_t n);
void  mp_free(void *p);
char *mp_strdup(const char *s);

/* Test hooks. mp_alloc_live() counts blocks not yet freed;
 * mp_alloc_fail_after(n) makes the allocation after the next n fail
 * (n < 0 disables). */
long  mp_alloc_live(void);
void  mp_alloc_fail_after(long n);

/* ===================================================================== */
/* Random numbers                                                         */
/* ===================================================================== */

/*
 * mp_pyrandom: Python's random.Random, bit for bit (MT19937 seeded through
 * init_by_array from the integer seed; getrandbits; _randbelow by rejection;
 * shuffle as Fisher-Yates from the end; random() with 53 bits).  Chemprop draws
 * its split shuffles from this, so reproducing it reproduces its splits.
 */
typedef struct {
    uint32_t mt[624];
    int      index;
} mp_pyrandom;

void     mp_pyrandom_seed(mp_pyrandom *r, uint64_t seed);
uint32_t mp_pyrandom_u32(mp_pyrandom *r);              /* genrand_uint32    */
uint64_t mp_pyrandom_getrandbits(mp_pyrandom *r, int k); /* 1 <= k <= 64   */
uint64_t mp_pyrandom_randbelow(mp_pyrandom *r, uint64_t n); /* n >= 1      */
double   mp_pyrandom_random(mp_pyrandom *r);            /* [0,1), 53 bits  */
/* random.shuffle(x) on an array of n size_t indices */
void     mp_pyrandom_shuffle(mp_pyrandom *r, size_t *x, size_t n);

/*
 * mp_rng: the fast generator for everything else (weight init, shuffling
 * training batches, dropout).  xoshiro256** seeded by splitmix64, so a seed
 * and a stream number give an independent sequence.
 */
typedef struct { uint64_t s[4]; } mp_rng;

void     mp_rng_seed(mp_rng *r, uint64_t seed, uint64_t stream);
uint64_t mp_rng_u64(mp_rng *r);
double   mp_rng_uniform(mp_rng *r);     /* [0,1), 53 bits        */
double   mp_rng_normal(mp_rng *r);      /* standard normal       */
uint64_t mp_rng_below(mp_rng *r, uint64_t n);  /* unbiased, n >= 1 */
void     mp_rng_shuffle(mp_rng *r, size_t *x, size_t n);

/* ===================================================================== */
/* Small helpers                                                          */
/* ===================================================================== */

/* Monotonic wall clock in seconds. */
double mp_time_now(void);

/* Number of threads molprop uses: set by mp_threads_set (0 = OpenMP default). */
void mp_threads_set(int n);
int  mp_threads_get(void);
/* The calling thread's own count, ahead of mp_threads_set's (0: none): a
 * worker thread that runs on a share of the cores (the cpu backend's
 * parallel regions ask mp_threads_get; results never depend on it). */
void mp_threads_set_local(int n);
/* The calling thread's count is *n, read at every mp_threads_get (another
 * thread may raise it meanwhile, atomically), until mp_threads_follow(NULL)
 * or mp_threads_set_local. */
void mp_threads_follow(const int *n);

/* mp_exit (molprop.h) ends the process without exit's handlers after this
 * (the GPU backend calls it on opening: its runtime's teardown at exit
 * costs memory and frees nothing the process's end does not). */
void mp_exit_skip_teardown(void);

/* ===================================================================== */
/* Output: atomic files and the I/O fault hook (io.c)                     */
/* ===================================================================== */

/*
 * Atomic file output: mp_afile_open creates "<path>.tmp.<pid>" next to the
 * target; mp_afile_commit flushes, fsyncs, closes and renames it over
 * `path`; mp_afile_abort closes and removes it.  So a failed or interrupted
 * writer never leaves a half-written file at `path`, and the temp file is
 * on the cleanup list (mp_cleanup_add) while it exists.
 *
 * fp is a stdio stream of its own over the temp file (fopencookie): write
 * to it as to any FILE.  A write that fails (a full disk) is remembered;
 * mp_afile_check reports it at once (a long writer should call it now and
 * then, so it does not go on working for nothing), mp_afile_commit refuses
 * to rename a file any write of which failed.  Messages name `path` and the
 * system's reason: "cannot write P.csv: No space left on device (the disk is
 * full)".  fd is the temp file's descriptor, for a writer that writes
 * through it directly (zlib); fileno(fp) is -1.
 */
struct mp_afile_sink;
typedef struct {
    FILE *fp;
    char *path;
    char *tmp_path;
    int   fd;
    int   cleanup;                  /* its slot on the cleanup list (-1: none) */
    struct mp_afile_sink *sink;
} mp_afile;

mp_status mp_afile_open(mp_afile *f, const char *path);
mp_status mp_afile_check(mp_afile *f);      /* MP_ERR_IO once a write has failed */
int       mp_afile_error(const mp_afile *f); /* that error's errno value, or 0     */
mp_status mp_afile_commit(mp_afile *f);
void      mp_afile_abort(mp_afile *f);      /* a no-op on a file not open      */

/* Makes directory `path` (one level); *made = 1 when this call created it,
 * 0 when it was there already.  MP_ERR_IO naming the path otherwise (also
 * when a file of that name is in the way). */
mp_status mp_mkdir(const char *path, int *made);

/*
 * mkdir -p with an undo, for a run that must leave no directory behind when
 * it fails or is stopped: mp_mkdirs makes path and any missing parent (each
 * through mp_mkdir), records the ones it made (the deepest MP_MKDIRS_MAX)
 * and puts them on the cleanup list.  After a failure mp_mkdirs_undo
 * removes them again, deepest first (rmdir: one that holds anything stays),
 * after a success mp_mkdirs_keep forgets them; either one, once, for each
 * mp_mkdirs (also a failed one: it has undone its own part already, and the
 * call is then a no-op).  MP_ERR_IO naming the directory that could not be
 * made, or naming path when it is a file.
 */
#define MP_MKDIRS_MAX 16
typedef struct {
    char  *path;                   /* a copy of the path (mp_malloc'd)      */
    int    n;                      /* directories made, outermost first     */
    size_t len[MP_MKDIRS_MAX];     /* each one's length in path             */
    int    slot[MP_MKDIRS_MAX];    /* its cleanup slot (-1: none)           */
} mp_made_dirs;
mp_status mp_mkdirs(const char *path, mp_made_dirs *m);
void      mp_mkdirs_undo(mp_made_dirs *m);
void      mp_mkdirs_keep(mp_made_dirs *m);

/*
 * Test hook, like mp_alloc_fail_after: after the next n hooked output
 * operations, every one fails with errno err (ENOSPC when err is 0): a disk
 * that fills up and stays full.  n < 0 disarms.  Hooked: mp_afile's open,
 * each write of its stream, its fsync, close and rename, and mp_mkdir.
 * mp_io_ops counts them (so a test can make each one fail in turn);
 * mp_io_fault is the hook itself, for a writer of another kind: it counts
 * one operation and returns 0, or the errno value to fail it with.
 */
void mp_io_fail_after(long n, int err);
long mp_io_ops(void);
int  mp_io_fault(void);

/* ===================================================================== */
/* Interruption (interrupt.c)                                             */
/* ===================================================================== */

/*
 * A process-wide "stop requested" flag.  A signal handler calls
 * mp_interrupt_request(signo) (async-signal-safe: one atomic store); long
 * loops poll it (epochs, training steps, featurization, prediction chunks,
 * CSV reading) and return MP_ERR_INTERRUPTED, "interrupted by SIGINT", so
 * the run unwinds through its error paths.  The flag stays set until
 * mp_interrupt_clear: every later poll fails too, so a caller that only
 * wants to end can rely on each library call returning soon.
 *
 *   mp_interrupted()      the signal number requested, 0 if none (no count)
 *   mp_interrupt_check()  the same, counted as a poll (for the test hook);
 *                         for loops in worker threads, which cannot set the
 *                         calling thread's message
 *   mp_interrupt_poll()   MP_OK, or MP_ERR_INTERRUPTED with the message
 *
 * mp_interrupt_request, mp_interrupted, mp_interrupt_clear and
 * mp_cleanup_run are public (molprop.h: a command's signal handlers).
 *
 * Test hook: mp_interrupt_after_polls(n, signo) requests a stop (as signo)
 * at the poll after the next n; mp_interrupt_polls counts polls so far.
 */
int         mp_interrupt_check(void);
mp_status   mp_interrupt_poll(void);
const char *mp_signal_name(int signo);     /* "SIGINT", "SIGTERM", ...    */
void        mp_interrupt_after_polls(long n, int signo);
long        mp_interrupt_polls(void);

/*
 * Paths a run created and must not leave behind, for a handler that cannot
 * wait for the unwinding (a second signal): mp_cleanup_add registers a
 * temp file or a directory (returns its slot, or -1 when the table of 64
 * is full or the path longer than 4095 bytes: then only the normal
 * unwinding removes it), mp_cleanup_remove forgets it (once committed or
 * removed), mp_cleanup_run unlinks every registered file, then removes the
 * registered directories newest first with rmdir (so a directory that
 * holds anything else stays).  mp_cleanup_run is async-signal-safe;
 * mp_afile registers its temp files itself.
 */
int  mp_cleanup_add(const char *path, int is_dir);
void mp_cleanup_remove(int id);
int  mp_cleanup_count(void);   /* paths registered now (tests) */

/* CRC-32 (zlib's polynomial), chainable: crc = mp_crc32(crc, buf, n), start 0. */
uint32_t mp_crc32(uint32_t crc, const void *buf, size_t n);

/* Sum of a[0..n) in NumPy's pairwise order (blocks of 128 summed with eight
 * accumulators, larger ranges halved at a multiple of 8), so sums, means and
 * metrics computed from them equal NumPy's and scikit-learn's bit for bit. */
double mp_pairwise_sum(const double *a, size_t n);

/* Lower-case, case-insensitive compare helpers used for column names. */
int mp_strcaseeq(const char *a, const char *b);

/* Growable buffer of bytes (for building strings and arrays). */
typedef struct {
    char  *data;
    size_t len, cap;
} mp_buf;

mp_status mp_buf_reserve(mp_buf *b, size_t extra);
mp_status mp_buf_append(mp_buf *b, const void *p, size_t n);
mp_status mp_buf_printf(mp_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void      mp_buf_free(mp_buf *b);

#ifdef __cplusplus
}
#endif
#endif /* MP_CORE_H */
