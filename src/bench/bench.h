/*
 * bench.h - the benchmark runner behind `molprop bench` (bench.c), in
 * pieces:
 *
 *   bench_grid.c     the grid: datasets (registry names or a user's CSV),
 *                    model variants, seeds; the settings every run shares
 *   bench_prep.c     a dataset made ready once for every model and seed:
 *                    read, featurized (or loaded from the feature cache,
 *                    keyed by a content hash), split per seed; the splits
 *                    exported for other tools (--export-splits)
 *   bench_results.c  the results file: one TSV row per finished run,
 *                    appended atomically, read back to skip finished runs
 *   bench_stats.c    mean, spread and the paired t-test over seeds
 *   bench_compare.c  `molprop bench compare OURS THEIRS`
 *   bench_report.c   `molprop bench report RESULTS --out DIR` (Markdown,
 *                    HTML, figures drawn by gnuplot: bench_plot.c)
 *   bench_pool.c     the concurrent run loop: a preparing thread one
 *                    dataset ahead, worker threads each training one
 *                    (dataset, model, seed) with its own backend
 */
#ifndef MP_BENCH_H
#define MP_BENCH_H

#include "core/core.h"
#include "data/dataset.h"
#include "data/split.h"
#include "featurize/featurize.h"
#include "run/ensemble.h"
#include "api/options.h"
#include "run/trainer.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MP_BENCH_MAX_LIST 64

/* ===================================================================== */
/* The grid                                                               */
/* ===================================================================== */

/* A model variant of Yang et al. 2019's comparison: a model, the name of
 * the feature set it reads (mp_feature_set_parse) and whether those
 * features go unscaled (Chemprop's --no_features_scaling). */
typedef struct {
    const char   *name;       /* "dmpnn-rdkit2d"                          */
    mp_model_kind kind;
    const char   *features;   /* "rdkit2d-normalized"; "none": the D-MPNN */
    int           no_features_scaling;
} mp_bench_variant;

/* The variants in their paper order; n gets their count. */
const mp_bench_variant *mp_bench_variants(int *n);
const mp_bench_variant *mp_bench_variant_find(const char *name);

/* One dataset of the grid. */
typedef struct {
    char          *name;          /* registry name, or the user's            */
    char          *path;          /* the CSV file                            */
    mp_task_type   task;
    char          *metric;        /* molprop's metric name: rmse, auc, ...   */
    char          *targets;       /* target columns (NULL: every other)      */
    char          *ignore;        /* columns left out (NULL: none)           */
    char          *atom_path;     /* user atom columns (D-MPNN runs; NULL)   */
    char          *bond_path;     /* user bond columns (NULL: none)          */
    long           rows_hint;     /* registry rows (for the ETA), -1 unknown */
    int            tasks_hint;    /* registry tasks, -1 unknown              */
} mp_bench_dataset;

typedef struct {
    mp_bench_args     a;
    char              backend[128];
    mp_bench_dataset  ds[MP_BENCH_MAX_LIST];
    int               n_ds;
    char             *skipped[MP_BENCH_MAX_LIST];   /* registry datasets without a local file */
    int               n_skipped;
    const mp_bench_variant *var[MP_BENCH_MAX_LIST];
    int               n_var;
    long              seeds[MP_BENCH_MAX_LIST];
    int               n_seeds;
    unsigned          features;    /* union of the variants' feature masks  */
    int               prep_threads; /* featurization threads (0: the default) */
    char              results_path[4096], cache_dir[4096];
} mp_bench_grid;

/*
 * The grid of the bench options o: every dataset (registry names, 'all',
 * or a CSV given as PATH[:TASK[:METRIC]] or NAME=PATH[:TASK[:METRIC]]),
 * variant and seed checked before any work.  A registry dataset whose file
 * is not in data-dir fails (MP_ERR_IO, naming `molprop data fetch`), or with
 * missing = skip is listed in skipped[].  Free with mp_bench_grid_free.
 */
mp_status mp_bench_grid_make(mp_bench_grid *g, const mp_options *o);
void      mp_bench_grid_free(mp_bench_grid *g);
int       mp_bench_grid_has(const mp_bench_grid *g, const char *name);

/* The settings one run of variant v on dataset ds trains with, as
 * mp_train_opts (inputs, callback and backend left for the caller). */
mp_status mp_bench_train_opts(const mp_bench_grid *g, const mp_bench_variant *v,
                              const mp_bench_dataset *ds, long seed, mp_train_opts *t);

/* A short fingerprint (16 hex digits) of everything that decides a run's
 * result besides dataset, model and seed: the data file's content (and, for
 * a dataset with user column files, theirs and the mode, folded into
 * data_sha256 by the caller), split type and sizes, epochs, batch size,
 * device and precision.  A results file
 * holds runs of one fingerprint per (dataset, model, seed). */
void mp_bench_settings_hash(const mp_bench_grid *g, const char *data_sha256, char out[17]);

/* ===================================================================== */
/* A prepared dataset                                                     */
/* ===================================================================== */

typedef struct {
    const mp_bench_dataset *spec;
    mp_dataset   *d;               /* d->targets NULL when the labels are sparse */
    mp_labels    *y;               /* sparse labels (large classification sets)  */
    mp_features  *f;
    char          sha256[65];        /* of the data file                          */
    mp_split      split[MP_BENCH_MAX_LIST];   /* one per grid seed            */
    char          split_sum[MP_BENCH_MAX_LIST][17];
    size_t        n_valid;
    double        seconds;           /* reading + featurizing (or the cache load) */
    int           cache_hit;
} mp_bench_prepared;

/* A classification set of more cells than this (registry rows x tasks) is
 * read with sparse labels (labels.h): pcba, chembl. */
#define MP_BENCH_SPARSE_CELLS 20000000.0

/*
 * Reads ds, takes its features from the cache (cache_dir/<name>-<key>.mpf,
 * key a hash of the file's content, the featurization settings and the
 * molprop and RDKit versions) or featurizes it (opts: what every variant of
 * the grid needs) and stores them there atomically; then makes the split of
 * every grid seed.  A dataset with user column files (ds->atom_path,
 * bond_path) is featurized from its SMILES, not cached (bond rows follow
 * RDKit's bond order, which a cached store does not keep), and the files'
 * rows are read into the store unscaled (each run fits its own scaler).  cache_dir NULL or "": no cache.  Free with
 * mp_bench_prepared_free.
 */
mp_status mp_bench_prepare(mp_bench_prepared *p, const mp_bench_grid *g,
                           const mp_bench_dataset *ds, const char *cache_dir);
void      mp_bench_prepared_free(mp_bench_prepared *p);

/* mkdir -p: path and its missing parents (kept), then a check that path is a
 * folder.  MP_ERR_ARG for an empty or overlong name (prefixed "OPTION: "
 * when option is not NULL), MP_ERR_IO naming the folder that could not be
 * made or the path that is not a folder. */
mp_status mp_bench_mkdirs(const char *path, const char *option);

/* The split of seed index k as the text of split.tsv ("set\trows" lines,
 * original 0-based data rows ascending), and its checksum: the first 16 hex
 * digits of that text's SHA-256 (what bench/chemprop/ computes from the
 * exported split.tsv). */
mp_status mp_bench_split_text(const mp_split *sp, mp_buf *out);
mp_status mp_bench_text_sha256(const char *text, size_t n, char hex[65]);

/*
 * Writes dataset p's splits under dir/<name>/: data.csv (the valid rows,
 * every column, file order), dataset.tsv (task type, metric, columns), and
 * per seed S seed<S>/ with train.csv, val.csv, test.csv (the original rows
 * of each set, in the split's order), splits.json (Chemprop v2's
 * --splits-file: [{"train": [...], "val": [...], "test": [...]}], 0-based
 * rows of data.csv) and split.tsv.  Every file is written atomically.
 */
mp_status mp_bench_export_splits(const mp_bench_prepared *p, const mp_bench_grid *g,
                                 const char *dir);

/* ===================================================================== */
/* Results rows                                                           */
/* ===================================================================== */

/* One finished run: one line of the results file (RESULTS_COLUMNS in
 * bench_results.c lists the columns, in file order). */
typedef struct {
    char   *tool, *dataset, *model, *split, *metric, *device, *precision, *version;
    long    seed;
    char    split_sum[17], data_sha[17], settings[17];
    int     n_tasks;
    double  test, val;                 /* the metric, mean over tasks       */
    double *test_tasks, *val_tasks;    /* n_tasks (NaN: a task not scored)  */
    int     epochs, best_epoch;
    long    n_train, n_val, n_test;
    double  featurize_seconds, train_seconds;
    int     n_curve;                   /* epochs recorded                   */
    double *train_loss, *val_curve;    /* n_curve                           */
} mp_bench_row;

void mp_bench_row_free(mp_bench_row *r);

/* The header line of a results file (with its newline). */
const char *mp_bench_results_header(void);

/* r as one line (with its newline) appended to b. */
mp_status mp_bench_row_format(const mp_bench_row *r, mp_buf *b);

/*
 * Reads a results file: the header, then one row per line.  A last line
 * without its newline (a write cut short) is left out and counted in
 * *n_torn (may be NULL).  Errors name the file and line (MP_ERR_FORMAT), or
 * MP_ERR_IO.  An absent file is MP_ERR_IO unless missing_ok (then no rows).
 * Free with mp_bench_rows_free.
 */
mp_status mp_bench_rows_read(const char *path, int missing_ok, mp_bench_row **rows, size_t *n,
                             size_t *n_torn);
void      mp_bench_rows_free(mp_bench_row *rows, size_t n);

/*
 * Opens the results file for appending (creating it with its header, or
 * cutting a torn last line off); *fd is an O_APPEND descriptor the caller
 * closes.  mp_bench_results_append writes one row with a single write(),
 * so a row is in the file whole or not at all, even when several threads
 * or processes append.
 */
mp_status mp_bench_results_open(const char *path, int *fd);
mp_status mp_bench_results_append(int fd, const char *path, const mp_bench_row *r);

/* ===================================================================== */
/* Statistics                                                             */
/* ===================================================================== */

/* Mean and standard deviation (ddof 0, NumPy's default, as Chemprop
 * reports) of the finite values of x[0..n); *n_used their count.  NaN when
 * none. */
void mp_bench_mean_std(const double *x, size_t n, double *mean, double *std, size_t *n_used);

/*
 * Paired two-sided t-test of a[i] - b[i] over n pairs (the seeds): *t the
 * statistic, *p its p-value from Student's t with n-1 degrees of freedom.
 * NaN when n < 2; p = 1 (t = 0) when every difference is 0, p = 0 when the
 * differences are equal and non-zero.
 */
void mp_bench_paired_t(const double *a, const double *b, size_t n, double *t, double *p);

/* Student's t distribution: P(|T| >= |t|) with df degrees of freedom. */
double mp_bench_t_two_sided_p(double t, double df);

/* 1 for metrics where higher is better (auc, prc-auc, accuracy, r2). */
int mp_bench_higher_is_better(const char *metric);

/* The verdict of bench compare for OURS: 1 win (p < alpha and ours
 * better), -1 loss, 0 tie. */
int mp_bench_verdict(const char *metric, double mean_ours, double mean_theirs, double p,
                     double alpha);

/* A results file, or the results.tsv of a bench --out folder, into out. */
mp_status mp_bench_results_resolve(const char *path, char *out, size_t n);

/* ===================================================================== */
/* Figures (gnuplot: bench_plot.c)                                        */
/* ===================================================================== */

/* MP_OK when `gnuplot` runs and has the pngcairo and svg terminals. */
mp_status mp_bench_plot_check(const char *gnuplot);

/*
 * Clustered bars: categories along x, one bar per series in each, with
 * error bars; mean and std are [n_series x n_cat] (NaN: no bar; std may be
 * NULL); a dashed line at ref_line when finite.  Writes dir/NAME.dat,
 * NAME.body.gp and NAME.gp (which draws NAME.png and NAME.svg).
 */
mp_status mp_bench_plot_bars(const char *dir, const char *name, const char *title,
                             const char *ylabel, const char *const *categories, int n_cat,
                             const char *const *series, int n_series, const double *mean,
                             const double *std, double ref_line);

/* One panel of mp_bench_plot_bar_panels. */
typedef struct {
    const char        *title, *ylabel;
    const char *const *categories;
    int                n_cat;
    const double      *mean, *std;    /* [n_series x n_cat] */
    double             ref_line;
} mp_bench_panel;

/* Panels of clustered bars one above the other (NAME_1.dat, ...). */
mp_status mp_bench_plot_bar_panels(const char *dir, const char *name, int n_panels,
                                   const mp_bench_panel *panels, const char *const *series,
                                   int n_series);

/* Learning curves: loss and val [n_series x n_epochs] per epoch, side by
 * side (training loss on a log scale, the validation score). */
mp_status mp_bench_plot_curves(const char *dir, const char *name, const char *title,
                               const char *const *series, int n_series, int n_epochs,
                               const double *loss, const double *val, const char *val_label);

/* Draws the figures names[0..n) of dir (their NAME.gp) in one gnuplot run;
 * its output goes to dir/gnuplot.log. */
mp_status mp_bench_plot_run(const char *gnuplot, const char *dir, const char *const *names,
                            int n);

/* ===================================================================== */
/* Temporary files and signals                                            */
/* ===================================================================== */

/* The runner's temporary files, removed by mp_bench_signal_cleanup (the
 * public, async-signal-safe call a signal handler makes).  Register a path
 * before creating the file; unregister after it is renamed or removed.
 * Returns the slot (-1 when all slots are taken: the file is then not
 * cleaned up on a signal). */
int  mp_bench_temp_register(const char *path);
void mp_bench_temp_unregister(int slot);

#ifdef __cplusplus
}
#endif
#endif /* MP_BENCH_H */
