/*
 * molprop.h - the public API of libmolprop: molecular property prediction
 * with Chemprop's directed message-passing network (D-MPNN) and its FFN
 * baselines on Morgan fingerprints and RDKit descriptors, on the CPU
 * (OpenBLAS + OpenMP) and NVIDIA GPUs (CUDA).
 *
 * The one header a program needs; it includes only <stddef.h>, <stdint.h>
 * and <stdio.h>.  Build against the installed library with
 *
 *     cc $(pkg-config --cflags --libs molprop) prog.c
 *
 * (add --static to pkg-config for libmolprop.a).  Train on a CSV, then
 * predict two molecules (examples/train_predict.c is the whole program):
 *
 *     mp_options *o;
 *     mp_summary *s;
 *     if (mp_options_create(&o, "train") ||
 *         mp_options_set(o, "data", "esol.csv") ||       // keys are the CLI's
 *         mp_options_set(o, "epochs", "5") ||            // long options
 *         mp_options_set(o, "save-dir", "esol_model") ||
 *         mp_run_train(o, &s)) {
 *         fprintf(stderr, "%s\n", mp_error_message());
 *         return 1;
 *     }
 *     printf("test %s %.3f\n", mp_summary_text(s, "metric"), mp_summary_number(s, "test"));
 *
 *     mp_predictor *p;
 *     const char *smiles[2] = { "CCO", "c1ccccc1O" };
 *     double y[2];                                      // 2 molecules x 1 task
 *     if (mp_predictor_open(&p, "esol_model/model.mpm", "cpu") ||
 *         mp_predictor_predict(p, smiles, 2, y, NULL))
 *         fprintf(stderr, "%s\n", mp_error_message());
 *     mp_predictor_free(p);
 *     mp_summary_free(s);
 *     mp_options_free(o);
 *
 * Conventions.  Every function that can fail returns an mp_status (MP_OK is
 * 0, so `if (f(...))` tests for failure); the message, naming the file, line,
 * column or molecule at fault, is then in mp_error_message() (kept per
 * thread, like errno).  Nothing calls exit() or aborts on bad input.  Handles
 * are opaque; each has one function that frees it (NULL is fine), and
 * strings the library returns as `char *` are freed with mp_free.  Output
 * files are written to a temporary name and renamed, so a failed run never
 * leaves a half-written file.
 *
 * The pieces: options (every setting of every verb, by name, from code or a
 * configuration file), runs (the verbs of the molprop command: train,
 * predict, eval, featurize, split, bench), a predictor (a saved model applied
 * to SMILES in memory), the benchmark dataset registry, and a few basics.
 * The molprop command is built on this header alone.
 */
#ifndef MOLPROP_H
#define MOLPROP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MP_VERSION "0.1.0"

/* ===================================================================== */
/* Status, errors, basics                                                 */
/* ===================================================================== */

typedef enum {
    MP_OK = 0,
    MP_ERR_IO,        /* a file could not be opened, read or written       */
    MP_ERR_FORMAT,    /* malformed input: CSV, model file, cache, config   */
    MP_ERR_ARG,       /* a bad argument or option value                    */
    MP_ERR_NOMEM,     /* an allocation failed                              */
    MP_ERR_CHECKSUM,  /* a checksum did not match                          */
    MP_ERR_NODEVICE,  /* no usable GPU                                     */
    MP_ERR_INTERNAL,  /* a library we call failed unexpectedly             */
    MP_ERR_INTERRUPTED /* a stop was requested (SIGINT, SIGTERM): the run   *
                        * unwound and left no temporary file behind        */
} mp_status;

/* The last error's message on this thread ("" when none was recorded). */
const char *mp_error_message(void);
void        mp_error_clear(void);
/* "ok", "I/O error", ... */
const char *mp_status_name(mp_status st);

/* Frees what the library returned as `char *` (and NULL). */
void mp_free(void *p);

/*
 * Stopping a run.  A signal handler calls mp_interrupt_request(signo)
 * (async-signal-safe: one atomic store); every long loop of the library
 * polls the flag, and the run in progress returns MP_ERR_INTERRUPTED
 * ("interrupted by SIGINT") through its error paths, which remove its
 * temporary files and the directories it made.  The flag stays set (every
 * later call fails too) until mp_interrupt_clear.  mp_interrupted() is the
 * signal requested, 0 if none.  mp_cleanup_run, for a handler that cannot
 * wait for the unwinding (a second signal, then _exit), removes the
 * temporary files and the directories the runs in progress made (those
 * still empty): async-signal-safe.
 */
void mp_interrupt_request(int signo);
int  mp_interrupted(void);
void mp_interrupt_clear(void);
void mp_cleanup_run(void);

/*
 * Ends the process with `status`, as exit() does, except in a process that
 * opened a GPU backend: there the C library's exit handlers and the
 * libraries' destructors are skipped (stdio flushed, MPI finalized, then
 * _exit).  The CUDA runtime's own exit-time teardown raises the peak memory
 * of a finished run by ~31 MiB (measured on an H200: 454 MiB before it, 485
 * after, at 1 M predicted rows); the driver releases a process's GPU state
 * at its end without it.  For the last line of a program: outputs must be
 * closed before.
 */
void mp_exit(int status) __attribute__((noreturn));

/* MP_VERSION of the linked library, and the RDKit version it was built with. */
const char *mp_version(void);
const char *mp_rdkit_version(void);

/* CPU threads for everything that follows (0: OpenMP's default, all cores).
 * The "threads" option of each verb sets this too. */
void mp_threads_set(int n);
int  mp_threads_get(void);

/*
 * Whether the backend `name` can be opened here: "cpu", "gpu", "gpu:bf16",
 * ... (a device, optionally ":precision"; what the "device" and "precision"
 * options name).  Returns 1 or 0; on 0, why[0..n) (may be NULL) says why
 * ("no CUDA device", "molprop was built without CUDA", "unknown backend").
 */
int mp_backend_available(const char *name, char *why, size_t n);

/* ===================================================================== */
/* Options                                                                */
/* ===================================================================== */

/*
 * One verb's settings, by name.  Keys are the molprop command's long options
 * without the dashes ("epochs", "save-dir"; "_" may stand for "-"); values
 * are text, checked when set ("30", "0.1", "rdkit2d,morgan", "true").  An
 * option never set has its default; an empty value resets it to the default.
 * `molprop <verb> --help` lists every key of a verb with its type, range and
 * default (mp_options_help gives the same text).
 *
 * Configuration files are INI files with one section per verb, keys as
 * above, ';' or '#' comments (configs/ holds commented examples):
 *
 *     [train]
 *     data     = data/esol.csv.gz
 *     epochs   = 30       ; Chemprop v1's default
 *     features = rdkit2d
 *
 * A later setting overrides an earlier one, so the command line reads the
 * file first and its flags after it.
 */
typedef struct mp_options mp_options;

typedef enum {
    MP_OPT_UNKNOWN = 0,   /* not a key of this verb                        */
    MP_OPT_BOOL,          /* true|false (also 1|0, yes|no, on|off)         */
    MP_OPT_INT,           /* an integer in a range (some also take "auto") */
    MP_OPT_REAL,          /* a number in a range                           */
    MP_OPT_TEXT,          /* free text: a path, a column name              */
    MP_OPT_CHOICE,        /* one of a few words                            */
    MP_OPT_LIST           /* comma-separated items                         */
} mp_option_type;

/* The verbs that have options, comma-separated:
 * "train, predict, eval, featurize, split, bench, data, bench-compare,
 * bench-report, hpopt, fingerprint". */
const char *mp_options_verbs(void);

/* New options for `verb`, every option at its default.  MP_ERR_ARG for an
 * unknown verb.  Free with mp_options_free. */
mp_status   mp_options_create(mp_options **out, const char *verb);
void        mp_options_free(mp_options *o);
const char *mp_options_verb(const mp_options *o);

/* The type of option `key`; MP_OPT_UNKNOWN when the verb has no such key. */
mp_option_type mp_options_type(const mp_options *o, const char *key);

/*
 * Sets option `key` to `value` after checking it.  value NULL means "true"
 * for a boolean and is an error for the others; "" resets to the default.
 * MP_ERR_ARG on an unknown key or a bad value, the option unchanged; the
 * message names the option as a command-line flag: "--epochs expects an
 * integer in [1, 100000], got 'zero'".  mp_options_set_from does the same
 * and names the option as `origin` says: "esol.ini:7: epochs expects ...",
 * "esol.ini:7: unknown key 'epoch' in [train]" (origin "esol.ini:7").
 */
mp_status mp_options_set(mp_options *o, const char *key, const char *value);
mp_status mp_options_set_from(mp_options *o, const char *key, const char *value,
                              const char *origin);

/*
 * Reads the INI file `path`: the keys of section [<verb>] are set as by
 * mp_options_set_from; the sections of the other verbs are checked the same
 * way but not applied, so a typo anywhere in the file is found.  Errors name
 * the file and line: an unknown section, a key outside any section, an
 * unknown key or a bad value (MP_ERR_ARG), a line that is neither
 * "key = value" nor "[section]" (MP_ERR_FORMAT), a file that cannot be read
 * (MP_ERR_IO).  Keys before the failing line stay set.  Not thread-safe
 * (the INI parser's settings are process-wide).
 */
mp_status mp_options_read_config(mp_options *o, const char *path);

/* The value of `key` as text: what was set, else the default; NULL for an
 * unknown key or an option without a value (e.g. no default).  Valid until
 * the option is set again or o is freed. */
const char *mp_options_get(const mp_options *o, const char *key);
/* 1 if `key` was set (by a call or a configuration file), else 0. */
int         mp_options_is_set(const mp_options *o, const char *key);
/* The first required option that has no value ("data" for train), or NULL. */
const char *mp_options_missing(const mp_options *o);

/* The option list of `molprop <verb> --help`: one entry per key with its
 * value placeholder, help text and default.  Caller frees with mp_free. */
char *mp_options_help(const mp_options *o);
/* Every option of the verb with its value, as a JSON object ({"epochs": 30,
 * "features": ["rdkit2d"], "smiles-column": null, ...}): what metrics.json
 * records under "config".  Caller frees with mp_free; NULL on no memory. */
char *mp_options_json(const mp_options *o);

/* ===================================================================== */
/* Runs: the verbs of the molprop command                                 */
/* ===================================================================== */

/*
 * Each mp_run_<verb> takes the options of its verb (MP_ERR_ARG for another
 * verb's options or a required option without a value) and does what
 * `molprop <verb>` does.  On success *out (when out is not NULL) receives a
 * summary of named numbers and texts, listed per verb below; free it with
 * mp_summary_free.  On failure *out is NULL and no output file is left.
 * train and predict write notes for the user (the task type chosen, invalid
 * SMILES, progress) to stderr unless their "quiet" option is set; featurize
 * and split print nothing and list the invalid rows in the summary.
 */
typedef struct mp_summary mp_summary;

/* The number called `key`; NaN if the summary has none. */
double      mp_summary_number(const mp_summary *s, const char *key);
/* The text called `key`; NULL if the summary has none.  Owned by s. */
const char *mp_summary_text(const mp_summary *s, const char *key);
/* Rows whose SMILES RDKit rejected (featurize, split): their count, and row
 * k's file line, SMILES and RDKit's reason (owned by s).  MP_ERR_ARG when
 * k >= the count. */
size_t      mp_summary_invalid_count(const mp_summary *s);
mp_status   mp_summary_invalid(const mp_summary *s, size_t k, size_t *line,
                               const char **smiles, const char **reason);
void        mp_summary_free(mp_summary *s);

/*
 * Trains a model (an ensemble when "ensemble-size" > 1) and writes
 * <save-dir>/model.mpm, metrics.json (with the whole resolved configuration
 * under "config") and split.tsv.  Summary: texts "metric", "task",
 * "save_dir"; numbers "test" and "val" (the metric, mean over tasks),
 * "n_tasks", "n_train", "n_val", "n_test", "n_invalid",
 * "featurize_seconds", "train_seconds", "train_mols_per_second",
 * "stopped_epoch" (with "stop-after" K: K when the run was stopped there,
 * resumable with "resume"; 0 when it ran to its end).
 */
mp_status mp_run_train(const mp_options *o, mp_summary **out);

/* Predicts a CSV with a saved model into "out" (streamed: any length fits
 * in memory).  Summary: "n_rows", "n_invalid", "seconds",
 * "mols_per_second"; text "out". */
mp_status mp_run_predict(const mp_options *o, mp_summary **out);

/* `molprop predict --merge` (options of "predict-merge"): joins the parts
 * "out".shard-I-of-N that mp_run_predict wrote with option "shard" I/N, in
 * order, into "out" (atomically), after checking they are all there and of
 * one run.  Summary: "n_rows", "n_invalid", "seconds"; text "out". */
mp_status mp_run_predict_merge(const mp_options *o, mp_summary **out);

/* Scores a saved model on a labelled CSV, or (options "preds" and
 * "uncertainty-metrics") a prediction file's uncertainties against it.
 * Summary: "n_rows", "n_invalid", "n_tasks"; text "metrics" (the metric
 * names, comma-separated) and one number per metric, named like it
 * ("rmse", "prc-auc", "nll", "ence"): the mean over tasks. */
mp_status mp_run_eval(const mp_options *o, mp_summary **out);

/* Writes the learned molecule vectors of a saved model ("layer": encoder
 * or ffn-last; "member") for a CSV into "out" (.npy or CSV; streamed).
 * Summary: "n_rows", "n_invalid", "seconds", "mols_per_second", "width";
 * text "out". */
mp_status mp_run_fingerprint(const mp_options *o, mp_summary **out);

/* Featurizes a CSV into a feature cache ("out") and/or a reference dump
 * ("dump").  Summary: "n_mols", "n_valid", "n_invalid", "n_atoms",
 * "n_bonds", "seconds", "threads", "gz"; texts "data", "layout", "out",
 * "dump"; the invalid rows. */
mp_status mp_run_featurize(const mp_options *o, mp_summary **out);

/* Splits a CSV into <out>/train.csv, val.csv and test.csv as Chemprop v1
 * does.  Summary: "n_rows", "n_train", "n_val", "n_test", "n_invalid";
 * texts "data", "split", "seed"; the invalid rows. */
mp_status mp_run_split(const mp_options *o, mp_summary **out);

/*
 * The benchmark grid: trains every chosen model on every chosen dataset
 * over the seeds (Yang et al. 2019's comparison; configs/bench/ holds
 * paper.ini and quick.ini).  Each dataset is read and featurized once for
 * all its runs, its features kept in the cache ("cache-dir", by content
 * hash) for later invocations; each finished run is appended at once to
 * <out>/results.tsv as one row (dataset, model, seed, split checksum,
 * metric, test and validation scores per task and their mean, epochs, best
 * epoch, featurize and train seconds, device, precision, version, the
 * per-epoch training loss and validation score), so running the same grid
 * again skips the finished runs.  "jobs" runs train side by side, each with
 * its own backend; each gives the row it gives alone.  One line per
 * finished run (done/total, elapsed, ETA) and the table at the end go to
 * `table` (NULL: nowhere; on a terminal a status line shows the runs in
 * flight).  "export-splits" writes each split for other tools.  Summary:
 * "n_runs" (trained now), "n_skipped" (found in the results), "n_total",
 * "seconds"; text "results" (the file).
 */
mp_status mp_run_bench(const mp_options *o, FILE *table, mp_summary **out);

/*
 * For a signal handler: removes the benchmark runner's temporary files
 * (async-signal-safe; it only unlinks), so a grid stopped by Ctrl-C or
 * SIGTERM leaves its finished rows and nothing else.  The handler then
 * ends the process (_exit).
 */
void mp_bench_signal_cleanup(void);

/*
 * `molprop bench compare OURS THEIRS` (options of "bench-compare"): aligns
 * the runs of two results files by dataset, model and seed and prints to
 * `out`, per dataset and model: both tools' mean ± std over the seeds they
 * share, the difference (relative for errors, absolute for AUCs), a paired
 * t-test over the seeds and the verdict (win, tie or loss for OURS at
 * level "alpha"); then the wins, ties and losses.  Runs whose split
 * checksums differ are reported (they did not see the same sets).
 * Summary: "n_compared", "wins", "ties", "losses", "n_split_mismatch".
 */
mp_status mp_run_bench_compare(const mp_options *o, FILE *out, mp_summary **s);

/*
 * `molprop bench report RESULTS --out DIR` (options of "bench-report"):
 * DIR/report.md and DIR/report.html with a table of mean ± std per dataset
 * and model, and figures in PNG and SVG drawn by gnuplot (with their .gp
 * scripts and .dat data beside them): one per dataset (the models' paper
 * metric, mean ± std over seeds, the "reference" tool's bars beside ours
 * when given), a summary (each model relative to the D-MPNN on every
 * dataset), and learning curves per dataset (training loss and validation
 * score per epoch, mean over seeds).  Summary: "n_datasets", "n_figures";
 * text "report" (the Markdown file).
 */
mp_status mp_run_bench_report(const mp_options *o, mp_summary **s);

/*
 * Searches hyperparameters: trials of `train` with the options `base`
 * (train options: the data, split, epochs ... every trial shares) and the
 * values the search proposes for the options of the space file (hpopt
 * option "space"), by random search or TPE.  Writes <out>/hpopt.json (the
 * search's identity), <out>/trials.jsonl (a line per finished trial,
 * appended as it finishes: a rerun with the same options continues where
 * the last one stopped, and one with more "trials" goes on), <out>/best.ini
 * (a [train] section for mp_options_read_config) and the trials' model
 * directories under <out>/trials (option "keep").  With option "halving",
 * successive halving: every trial trained to the first rung of epochs
 * (the train option "stop-after", the checkpoint kept), the best 1 in
 * "halving-eta" of each rung continued ("resume") to the next, up to the
 * full epochs; a line per trial and rung, and one per stopped trial
 * (README: hpopt).  Summary: numbers "best_trial", "best_val",
 * "best_test", "trials", "failed", "stopped"; texts "metric",
 * "best_config", "trials_file".
 */
mp_status mp_run_hpopt(const mp_options *hp, const mp_options *base, mp_summary **out);

/* ===================================================================== */
/* Predictor: a saved model applied to SMILES in memory                   */
/* ===================================================================== */

typedef struct mp_predictor mp_predictor;

/* Loads a model file (written by training) onto backend `backend` ("cpu"
 * when NULL; see mp_backend_available).  Refuses, with a message naming the
 * file, any file that does not add up.  Free with mp_predictor_free. */
mp_status   mp_predictor_open(mp_predictor **out, const char *model_path, const char *backend);
void        mp_predictor_free(mp_predictor *p);
size_t      mp_predictor_n_tasks(const mp_predictor *p);
const char *mp_predictor_task_name(const mp_predictor *p, size_t t);  /* NULL if t out of range */
const char *mp_predictor_task_type(const mp_predictor *p);  /* "regression" | "classification" */
int         mp_predictor_n_members(const mp_predictor *p);  /* ensemble members */

/*
 * Predicts n molecules: mean[i * n_tasks + t] gets molecule i's prediction
 * for task t in the training data's units (a probability for
 * classification), the mean over ensemble members; std (may be NULL) the
 * members' standard deviation.  A SMILES that RDKit rejects gets NaN (not an
 * error).  Fails on memory or a device error.
 */
mp_status mp_predictor_predict(mp_predictor *p, const char *const *smiles, size_t n,
                               double *mean, double *std);

/* ===================================================================== */
/* Benchmark datasets (data/datasets.tsv)                                 */
/* ===================================================================== */

/* Chemprop v2.3.1's task types.  The benchmark registry's datasets are
 * regression or classification; training takes any (the "task" option). */
typedef enum {
    MP_TASK_REGRESSION, MP_TASK_CLASSIFICATION, MP_TASK_REGRESSION_MVE,
    MP_TASK_REGRESSION_EVIDENTIAL, MP_TASK_REGRESSION_QUANTILE,
    MP_TASK_CLASSIFICATION_DIRICHLET, MP_TASK_MULTICLASS, MP_TASK_MULTICLASS_DIRICHLET,
    MP_TASK_SPECTRAL
} mp_task_type;

/* Chemprop's name: "regression", "classification", "regression-mve",
 * "regression-evidential", "regression-quantile", "classification-dirichlet",
 * "multiclass", "multiclass-dirichlet", "spectral" (its targets are the
 * columns of a spectrum); "?" when out of range. */
const char *mp_task_type_name(mp_task_type t);

/* One dataset of the registry (read-only; owned by the registry). */
typedef struct {
    char        *name;       /* "esol"                                         */
    char        *file;       /* "esol.csv.gz"; NULL: no file available         */
    long         rows;       /* data rows; -1 when unknown (no file)           */
    int          tasks;      /* target columns; -1 when unknown                */
    mp_task_type task_type;
    char        *metric;     /* the paper's metric: RMSE, MAE, ROC-AUC, PRC-AUC */
    char        *sha256;     /* 64 lower-case hex digits; NULL when no file or *
                              * none is pinned (recorded on the first fetch)  */
    char        *url;        /* where the file is published; NULL: unknown    */
    char        *targets;    /* its target columns, comma-separated; NULL: every
                              * column but the SMILES and `ignore`           */
    char        *ignore;     /* columns that are not targets (ids); NULL: none */
} mp_dataset_info;

typedef struct mp_registry mp_registry;

/*
 * Reads a registry file: lines starting with '#' are comments; the first
 * other line is the header "name file rows tasks task_type metric sha256"
 * (tab-separated), then one line per dataset ('-' for the file, rows, tasks
 * and sha256 of a dataset without a file).  path NULL = "data/datasets.tsv"
 * in the current directory.  A malformed line is MP_ERR_FORMAT naming file
 * and line, a missing file MP_ERR_IO.  Free with mp_registry_free.
 */
mp_status mp_registry_load(mp_registry **out, const char *path);
void      mp_registry_free(mp_registry *reg);
size_t    mp_registry_count(const mp_registry *reg);
/* Entry i in file order (NULL when i >= the count). */
const mp_dataset_info *mp_registry_at(const mp_registry *reg, size_t i);
/* The entry called `name` (case-insensitive), or NULL. */
const mp_dataset_info *mp_registry_find(const mp_registry *reg, const char *name);
/* "esol, freesolv, ..." in file order, for messages.  Caller frees with mp_free. */
char *mp_registry_names(const mp_registry *reg);

/* Where mp_registry_fetch may take files from (either may be NULL or ""),
 * and whom to tell how a download goes. */
typedef struct {
    const char *mirror;   /* a directory holding the dataset files          */
    const char *url;      /* a base URL: url + "/" + file (http, https, file://) */
    /* Called now and then during a download (may be NULL): bytes of the
     * file in hand (a resumed download counts what it had) and its size
     * (-1 while unknown). */
    void      (*progress)(void *arg, const char *name, int64_t done, int64_t total);
    void       *progress_arg;
} mp_fetch_source;

/* How mp_registry_fetch got the file. */
typedef enum {
    MP_FETCH_PRESENT,     /* already in dest_dir with the right checksum: untouched */
    MP_FETCH_MIRROR,      /* copied from the mirror directory                       */
    MP_FETCH_DOWNLOADED   /* downloaded (from the base URL or the registry's url)   */
} mp_fetch_result;

/*
 * Puts dataset `name`'s file into dest_dir (NULL = "data"; created if
 * missing), from src->mirror or, where that is unset or lacks the file, by
 * download (libcurl) from src->url + "/" + file or else from the entry's
 * own url.  An entry url "ARCHIVE#MEMBER" names a file inside a .tar.gz:
 * the archive is downloaded and MEMBER taken out of it (gzipped when the
 * file name ends in .gz).  A download goes to dest_dir/<file>.part, kept
 * when the transfer breaks off, so the next fetch resumes it (an HTTP
 * Range request; from the start if the server ignores ranges).  The bytes
 * are checked against the registry's SHA-256 (of the file, or of the
 * archive); an entry without one records the checksum it saw in
 * dest_dir/<file>.sha256, against which later fetches and
 * mp_registry_local_sha256 check.  Only a checked file is renamed into
 * place: a mismatch (MP_ERR_CHECKSUM) or any other failure leaves nothing
 * at the target.  A file already present with the right checksum is left
 * alone (MP_FETCH_PRESENT; no source needed); one with a wrong checksum is
 * replaced.  Errors: unknown name (MP_ERR_ARG, listing the valid names), a
 * dataset without a file (MP_ERR_ARG), no source (MP_ERR_ARG), source
 * unreadable or download failed (MP_ERR_IO).  src and result may be NULL.
 * Not for concurrent use from several threads (libcurl's global
 * initialisation is not thread-safe).
 */
mp_status mp_registry_fetch(const mp_registry *reg, const char *name, const char *dest_dir,
                            const mp_fetch_source *src, mp_fetch_result *result);

/* The SHA-256 dataset `name`'s local file must have: the registry's (for a
 * plain file), else the one recorded by its first fetch into dest_dir (NULL
 * = "data").  MP_ERR_ARG when neither is known (never fetched). */
mp_status mp_registry_local_sha256(const mp_registry *reg, const char *name,
                                   const char *dest_dir, char hex[65]);

/* SHA-256 of a file's bytes as 64 lower-case hex digits.  MP_ERR_IO naming
 * the file when it cannot be read. */
mp_status mp_sha256_file(const char *path, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif /* MOLPROP_H */
