/*
 * predict.c - streaming prediction and evaluation with a saved model.
 */
#include "run/predict.h"

#include "data/spectra.h"
#include "run/rows.h"
#include "run/shard.h"

#include "models/heads.h"

#include "data/csv.h"
#include "data/featfile.h"
#include "featurize/atomcols.h"

#include <math.h>
#include <string.h>

#define DEFAULT_CHUNK 8192       /* rows held at a time, on a GPU too: 65,536 rows
                                  * predicted 15% faster there but cost 130 MiB more
                                  * (bench/RESULTS.md, 10 million rows) */
#define PREDICT_BATCH 128        /* molecules per forward on the host: bounds the activation
                                  * memory; 128 rather than 256 keeps a batch's edge arrays
                                  * nearer the cores' L2 (hiv, 2 threads: 8% faster, 25 MiB
                                  * less; a molecule's outputs do not depend on its batch) */
#define PREDICT_BATCH_MC 256     /* MC dropout on the host: its masks are keyed by a batch's
                                  * first row, so the batch is part of the seed (README) and
                                  * stays the documented 256 */
#define PREDICT_BATCH_GPU 4096   /* a device backend: fewer, fuller launches */
#define PREDICT_BATCH_FOR(e) (!(e)->backend->host_memory ? PREDICT_BATCH_GPU \
                              : (e)->mc_samples > 1 ? PREDICT_BATCH_MC : PREDICT_BATCH)
#define MAX_REPORTED_INVALID 20

/* The chunk featurized into *f (the caller frees it: the invalid rows'
 * reasons are in it) and predicted with its uncertainties (predict_unc.c);
 * row0: the chunk's first row in the input; file: the features file (NULL:
 * none); pc: the user atom / bond column files. */
static mp_status predict_chunk(mp_unc_run *u, const mp_rows *c, const mp_featurize_opts *fo,
                               const mp_featfile *file, const mp_columns_files *pc,
                               int64_t row0,
                               int32_t *idx, double *mean, double *unc, double *lower,
                               double *upper, double *vals, mp_features **f)
{
    mp_status st = mp_featurize(f, (const char *const *)c->smiles, c->n, fo);
    if (st)
        return st;
    const mp_ensemble *e = u->e;
    if ((st = mp_columns_files_apply(pc, &e->cols, &(*f)->g, (int32_t)row0,
                                     (const char *const *)c->smiles)))
        return st;
    if (file) {
        (*f)->file_values = file->values + row0 * file->n_cols;
        (*f)->file_cols = (int32_t)file->n_cols;
    }
    for (int32_t i = 0; i < c->n; i++)
        idx[i] = i;
    return mp_unc_run_predict(u, *f, idx, c->n, PREDICT_BATCH_FOR(u->e), row0, mean, unc,
                              lower, upper, vals);
}

/* A SMILES for a message: at most 60 characters, then "..." and its length. */
static void clip_smiles(char *out, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n <= 60)
        snprintf(out, cap, "%s", s);
    else
        snprintf(out, cap, "%.60s... (%zu characters)", s, n);
}

/* The value a task's own column holds (heads.h): value 0, or for a
 * multiclass head the most probable class; NaN for an invalid molecule. */
static double point_value(const mp_ensemble *e, const double *v)
{
    if (!mp_head_is_multiclass(e->cfg.task))
        return v[0];
    int C = e->cfg.n_classes, best = 0;
    if (isnan(v[0]))
        return NAN;
    for (int c = 1; c < C; c++)
        best = v[c] > v[best] ? c : best;
    return best;
}

/* The head's other values after the task columns: value k >= 1 (all C
 * class probabilities of a multiclass head) of each task. */
static int extra_first(const mp_ensemble *e) { return mp_head_is_multiclass(e->cfg.task) ? 0 : 1; }

static void write_number(FILE *fp, double v)
{
    if (!isnan(v))
        fprintf(fp, "%.9g", v);
}

/* One prediction run: the model, the input, the output and one chunk. */
typedef struct {
    const mp_predict_opts *o;
    mp_predict_stats      *stats;
    mp_ensemble           *e;
    mp_rows                c;             /* the input, a chunk of rows at a time */
    mp_afile               out;
    int                    out_open;
    mp_featfile            file;          /* --features-path      */
    mp_unc_run             u;             /* uncertainty, calibration */
    mp_shard               sh;            /* --shard: its range and part (shard.h) */
    int                    u_open;
    double                *mean, *std;    /* cap x n_tasks (std: the _unc values) */
    double                *lower, *upper; /* cap x n_tasks        */
    double                *vals;          /* cap x n_tasks x values (heads.h) */
    int32_t               *idx;           /* cap                  */
    mp_columns_files       cols;          /* user atom / bond columns */
} predict_run;

/* The output's header: the SMILES column's name, the tasks, their _unc,
 * _lower and _upper. */
static void write_header(predict_run *p, const char *smiles_name)
{
    FILE *fp = p->out.fp;
    const mp_ensemble *e = p->e;
    static const char *const suffix[3] = { "_unc", "_lower", "_upper" };
    int want[3] = { p->u.unc_cols, p->u.interval_cols, p->u.interval_cols };
    mp_csv_write_field(fp, smiles_name);
    for (size_t k = 0; k < e->n_tasks; k++) {
        fputc(',', fp);
        mp_csv_write_field(fp, e->task_names[k]);
    }
    const int V = mp_ensemble_n_values(e);
    for (size_t k = 0; k < e->n_tasks; k++)
        for (int j = extra_first(e); j < V; j++) {
            char name[1024], vn[32];
            snprintf(name, sizeof name, "%s_%s", e->task_names[k],
                     mp_head_value_name(e->cfg.task, j, vn, sizeof vn));
            fputc(',', fp);
            mp_csv_write_field(fp, name);
        }
    for (int s = 0; s < 3; s++)
        for (size_t k = 0; want[s] && k < e->n_tasks; k++) {
            char name[1024];
            snprintf(name, sizeof name, "%s%s", e->task_names[k], suffix[s]);
            fputc(',', fp);
            mp_csv_write_field(fp, name);
        }
    mp_unc_run_write_header(&p->u, fp);   /* a multiclass model's per-class columns */
    fputc('\n', fp);
}

/* The model, the input's header row, the chunk buffers and the output
 * file with its header. */
static mp_status predict_open(predict_run *p)
{
    const mp_predict_opts *o = p->o;
    int32_t cap = o->chunk_rows;
    mp_status st;
    if ((st = mp_ensemble_load(&p->e, o->model_path, o->backend)) ||
        (st = mp_unc_run_open(&p->u, o, p->e)))
        return st;
    p->u_open = 1;
    if ((p->e->features & MP_FEAT_FILE) && !o->features_path)
        return mp_error_set(MP_ERR_ARG, "%s was trained with %d features from a file: give "
                            "the data's with --features-path", o->model_path, p->e->n_file);
    if (o->features_path && !(p->e->features & MP_FEAT_FILE))
        return mp_error_set(MP_ERR_ARG, "%s was trained without a features file: "
                            "--features-path does not apply", o->model_path);
    if (o->features_path) {
        if ((st = mp_featfile_load(&p->file, o->features_path)))
            return st;
        if (p->file.n_cols != (size_t)p->e->n_file)
            return mp_error_set(MP_ERR_FORMAT, "%s: %zu feature columns, the model %s was "
                                "trained on %d", o->features_path, p->file.n_cols,
                                o->model_path, p->e->n_file);
    }
    /* the user columns: the files the model needs, read once */
    if ((st = mp_columns_files_open(&p->cols, &p->e->cols, o->atom_path, o->bond_path,
                                    o->model_path, -1, "")))
        return st;
    /* a whole number of batches: then the batches, and so the predictions'
     * bits, are the same for every chunk size */
    int32_t batch = PREDICT_BATCH_FOR(p->e);
    if (cap <= 0)
        cap = DEFAULT_CHUNK;
    cap = (int32_t)(((int64_t)cap + batch - 1) / batch * batch);
    if ((st = mp_rows_open(&p->c, o->data_path, &o->columns, cap)))
        return st;
    /* shards start on a batch boundary (the chunks are whole batches) */
    if (o->shard.count && (st = mp_shard_begin(&p->sh, o, p->c.r, batch)))
        return st;
    size_t t = p->e->n_tasks;
    const size_t V = (size_t)mp_ensemble_n_values(p->e);
    p->mean = mp_malloc(sizeof(double) * (size_t)cap * t);
    p->std = mp_malloc(sizeof(double) * (size_t)cap * t);
    p->vals = mp_malloc(sizeof(double) * (size_t)cap * t * V);
    p->idx = mp_malloc(sizeof(int32_t) * (size_t)cap);
    p->lower = mp_malloc(sizeof(double) * (size_t)cap * t);
    p->upper = mp_malloc(sizeof(double) * (size_t)cap * t);
    if (!p->mean || !p->std || !p->vals || !p->idx || !p->lower || !p->upper)
        return mp_error_set(MP_ERR_NOMEM, "out of memory (chunk of %d rows)", cap);
    if ((st = mp_afile_open(&p->out, o->shard.count ? p->sh.part_path : o->out_path)))
        return st;
    p->out_open = 1;
    if (o->shard.count)
        mp_shard_write_head(&p->sh, p->out.fp);
    write_header(p, p->c.smiles_name);
    if (o->shard.count)
        mp_shard_header_done(&p->sh, p->out.fp);
    return MP_OK;
}

/* The chunk's predictions, one output row per input row, in order; an
 * invalid row keeps its place with empty fields and is reported. */
static mp_status predict_flush(predict_run *p, const mp_featurize_opts *fo)
{
    const mp_predict_opts *o = p->o;
    FILE *fp = p->out.fp;
    size_t t = p->e->n_tasks, V = (size_t)mp_ensemble_n_values(p->e);
    const mp_featfile *file = o->features_path ? &p->file : NULL;
    size_t row0 = (size_t)p->sh.row0 + p->stats->n_rows;   /* in the whole input */
    if (file && row0 + (size_t)p->c.n > file->n_rows)
        return mp_error_set(MP_ERR_FORMAT, "%s: %zu rows of features, %s has more (one row of "
                            "features per input row)", o->features_path, file->n_rows,
                            o->data_path);
    mp_features *f = NULL;
    mp_status st = predict_chunk(&p->u, &p->c, fo, file, &p->cols, (int64_t)row0, p->idx,
                                 p->mean, p->std, p->lower, p->upper, p->vals, &f);
    if (st) {
        mp_features_free(f);
        return st;
    }
    for (int32_t i = 0; i < p->c.n; i++) {
        mp_csv_write_field(fp, p->c.smiles[i]);
        if (isnan(p->mean[(size_t)i * t])) {
            if (!o->quiet && p->stats->n_invalid < MAX_REPORTED_INVALID) {
                char smi[128];
                clip_smiles(smi, sizeof smi, p->c.smiles[i]);
                fprintf(stderr, "%s:%zu: invalid SMILES '%s': no prediction (%s)\n",
                        o->data_path, p->c.line[i], smi,
                        f->error[i] ? f->error[i] : "invalid");
            }
            p->stats->n_invalid++;
        }
        const double *row = p->vals + (size_t)i * t * V;
        for (size_t k = 0; k < t; k++) {   /* calibrated probabilities are in mean */
            fputc(',', fp);
            write_number(fp, V > 1 && mp_head_is_multiclass(p->e->cfg.task)
                             ? point_value(p->e, row + k * V) : p->mean[(size_t)i * t + k]);
        }
        for (size_t k = 0; k < t; k++)
            for (size_t j = (size_t)extra_first(p->e); j < V; j++) {
                fputc(',', fp);
                write_number(fp, row[k * V + j]);
            }
        const double *extra[3] = { p->std, p->lower, p->upper };
        int want[3] = { p->u.unc_cols, p->u.interval_cols, p->u.interval_cols };
        for (int s = 0; s < 3; s++)
            for (size_t k = 0; want[s] && k < t; k++) {
                fputc(',', fp);
                write_number(fp, extra[s][(size_t)i * t + k]);
            }
        mp_unc_run_write_row(&p->u, fp, (size_t)i);
        fputc('\n', fp);
    }
    mp_features_free(f);
    p->stats->n_rows += (size_t)p->c.n;
    mp_rows_clear(&p->c);
    /* a full disk or a stop request ends the run now, not after the rest
     * of the input has been predicted for nothing */
    if ((st = mp_afile_check(&p->out)))
        return st;
    return mp_interrupt_poll();
}

/* Reads the rows a chunk at a time and predicts each full chunk (and the
 * last). */
static mp_status predict_rows(predict_run *p)
{
    const mp_predict_opts *o = p->o;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(p->e);
    fo.n_threads = o->threads;
    for (;;) {
        int eof;
        mp_status st = mp_rows_fill(&p->c, &eof);
        if (st)
            return st;
        if (p->c.n > 0 && (st = predict_flush(p, &fo)))
            return st;
        if (eof) {
            /* every column file covers the input, no more and no less (a
             * shard before the last cannot tell whether the file has rows
             * to spare, only whether it has too few) */
            size_t seen = (size_t)p->sh.row0 + p->stats->n_rows;
            int last = !o->shard.count || o->shard.index == o->shard.count - 1;
            if ((st = mp_columns_files_end(&p->cols, seen, last, o->data_path)))
                return st;
            if (o->features_path && last)
                return mp_featfile_check_rows(&p->file, o->features_path, seen, o->data_path);
            return MP_OK;
        }
    }
}

mp_status mp_predict_file(const mp_predict_opts *o, mp_predict_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (o->threads > 0)
        mp_threads_set(o->threads);
    predict_run p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.stats = stats;
    double t0 = mp_time_now();
    mp_status st = predict_open(&p);
    if (st == MP_OK)
        st = predict_rows(&p);
    if (st == MP_OK) {
        if (!o->quiet && stats->n_invalid > MAX_REPORTED_INVALID)
            fprintf(stderr, "... %zu invalid SMILES in all\n", stats->n_invalid);
        if (o->shard.count)
            mp_shard_write_tail(&p.sh, p.out.fp, stats);
        st = mp_afile_commit(&p.out);
        p.out_open = 0;
        stats->seconds = mp_time_now() - t0;
        stats->mols_per_second = stats->n_rows / (stats->seconds > 0 ? stats->seconds : 1e-9);
    }
    if (p.out_open)
        mp_afile_abort(&p.out);
    mp_rows_close(&p.c);
    mp_featfile_free(&p.file);
    mp_free(p.mean);
    mp_free(p.std);
    mp_free(p.vals);
    mp_free(p.idx);
    mp_free(p.lower);
    mp_free(p.upper);
    if (p.u_open)
        mp_unc_run_free(&p.u);
    mp_columns_files_free(&p.cols);
    mp_ensemble_free(p.e);
    return st;
}

/* ===================================================================== */
/* Evaluation                                                             */
/* ===================================================================== */

void mp_eval_result_free(mp_eval_result *r)
{
    mp_free(r->per_task);
    memset(r, 0, sizeof *r);
}

/* For each of the model's tasks, the column of d that holds its labels. */
static mp_status match_columns(const mp_ensemble *e, const mp_dataset *d, const char *data_path,
                               size_t *col)
{
    for (size_t k = 0; k < e->n_tasks; k++) {
        size_t j;
        for (j = 0; j < d->n_tasks; j++)
            if (!strcmp(d->task_names[j], e->task_names[k]))
                break;
        if (j == d->n_tasks)
            return mp_error_set(MP_ERR_FORMAT, "%s: no column '%s' (the model predicts it)",
                                data_path, e->task_names[k]);
        col[k] = j;
    }
    return MP_OK;
}

/* The metric asked for (it must fit the model's task type), else every
 * metric of that type. */
static mp_status choose_metrics(const mp_ensemble *e, const char *metric, mp_eval_result *res)
{
    int is_cls = mp_head_is_binary(e->cfg.task);   /* value 0: the probability of 1 */
    if (mp_head_is_multiclass(e->cfg.task))
        return mp_error_set(MP_ERR_ARG, "eval of a %s model: not yet (its validation and test "
                            "accuracy are in the training's metrics.json)",
                            mp_task_type_name(e->task));
    const int spectral = e->cfg.task == MP_MODEL_SPECTRAL;
    if (metric) {
        mp_status st = mp_metric_parse(metric, &res->metrics[0]);
        if (st)
            return st;
        if (mp_metric_is_spectral(res->metrics[0]) != spectral ||
            (!spectral && mp_metric_is_classification(res->metrics[0]) != is_cls))
            return mp_error_set(MP_ERR_ARG, "metric %s does not fit this %s model", metric,
                                mp_task_type_name(e->task));
        res->n_metrics = 1;
        return MP_OK;
    }
    if (spectral) {
        res->metrics[0] = MP_METRIC_SID;
        res->metrics[1] = MP_METRIC_WASSERSTEIN;
        res->n_metrics = 2;
        return MP_OK;
    }
    static const mp_metric cls[3] = { MP_METRIC_AUC, MP_METRIC_PRC_AUC, MP_METRIC_ACCURACY };
    static const mp_metric reg[3] = { MP_METRIC_RMSE, MP_METRIC_MAE, MP_METRIC_R2 };
    memcpy(res->metrics, is_cls ? cls : reg, sizeof cls);
    res->n_metrics = 3;
    return MP_OK;
}

/* A spectral model's targets, the rows idx[0..n) of d in target [n x T]:
 * made positive and normalized as the training's were (spectra.h, with the
 * model's floor), bad values refused by file and line. */
static mp_status spectral_targets(const mp_ensemble *e, const mp_dataset *d,
                                  const int32_t *idx, size_t n, double *target,
                                  const char *data_path)
{
    size_t *line = mp_malloc(sizeof(size_t) * (n ? n : 1));
    if (!line)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        line[i] = d->line[idx[i]];
    mp_status st = mp_spectra_normalize(target, n, e->n_tasks, e->cfg.spectra_floor, data_path,
                                        line, (const char *const *)e->task_names);
    mp_free(line);
    return st;
}

/* Predicts the valid rows of d (featurized in f) and scores them with every
 * metric of res. */
static mp_status eval_rows(mp_ensemble *e, const mp_dataset *d, const mp_features *f,
                           const size_t *col, mp_eval_result *res, const char *data_path)
{
    size_t n = d->n_rows, nv = 0, t = e->n_tasks;
    int32_t *idx = mp_malloc(sizeof(int32_t) * (n ? n : 1));
    double *pred = mp_malloc(sizeof(double) * (n ? n : 1) * t);
    double *target = mp_malloc(sizeof(double) * (n ? n : 1) * t);
    mp_score_status *why = mp_malloc(sizeof(mp_score_status) * t);
    res->per_task = mp_malloc(sizeof(double) * (size_t)res->n_metrics * t);
    mp_status st = MP_OK;
    if (!idx || !pred || !target || !why || !res->per_task) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (!f->g.valid[i]) {
            res->n_invalid++;
            continue;
        }
        for (size_t k = 0; k < t; k++)
            target[nv * t + k] = d->targets[i * d->n_tasks + col[k]];
        idx[nv++] = (int32_t)i;
    }
    res->n_rows = nv;
    res->n_tasks = t;
    if (e->cfg.task == MP_MODEL_SPECTRAL &&
        (st = spectral_targets(e, d, idx, nv, target, data_path)))
        goto done;
    if ((st = mp_ensemble_predict(e, f, idx, (int32_t)nv, 0, 0, PREDICT_BATCH_FOR(e), pred,
                                  NULL)))
        goto done;
    for (int m = 0; m < res->n_metrics; m++) {
        size_t skipped;
        if ((st = mp_metric_tasks(res->metrics[m], mp_head_is_binary(e->cfg.task), pred,
                                  target, nv, t, res->per_task + (size_t)m * t, why,
                                  &res->mean[m], &skipped)))
            goto done;
    }
done:
    mp_free(idx);
    mp_free(pred);
    mp_free(target);
    mp_free(why);
    return st;
}

mp_status mp_eval_file(const char *model_path, const char *data_path,
                       const mp_column_spec *columns, const char *metric,
                       const char *features_path, const char *atom_path,
                       const char *bond_path, const char *backend, int threads,
                       mp_eval_result *res)
{
    memset(res, 0, sizeof *res);
    if (threads > 0)
        mp_threads_set(threads);
    mp_ensemble *e = NULL;
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    mp_featfile file;
    memset(&file, 0, sizeof file);
    mp_columns_files cols;
    memset(&cols, 0, sizeof cols);
    size_t *col = NULL;
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    if (columns)
        spec.smiles_column = columns->smiles_column;
    mp_status st;
    if ((st = mp_ensemble_load(&e, model_path, backend)) ||
        (st = mp_dataset_load(&d, data_path, &spec)))
        goto done;
    if (!(col = mp_malloc(sizeof(size_t) * e->n_tasks))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = match_columns(e, d, data_path, col)) || (st = choose_metrics(e, metric, res)))
        goto done;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    fo.n_threads = threads;
    if (features_path) {
        char what[4200];
        snprintf(what, sizeof what, "the data file %s", data_path);
        if ((st = mp_featfile_load(&file, features_path)) ||
            (st = mp_featfile_check_rows(&file, features_path, d->n_rows, what)))
            goto done;
    }
    if ((st = mp_columns_files_open(&cols, &e->cols, atom_path, bond_path, model_path,
                                    (int32_t)d->n_rows, "")) ||
        (st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo)) ||
        (st = mp_columns_files_apply(&cols, &e->cols, &f->g, 0,
                                     (const char *const *)d->smiles)) ||
        (st = mp_columns_files_end(&cols, d->n_rows, 1, data_path)))
        goto done;
    if (features_path) {
        f->file_values = file.values;
        f->file_cols = (int32_t)file.n_cols;
    }
    st = eval_rows(e, d, f, col, res, data_path);
done:
    mp_columns_files_free(&cols);
    mp_free(col);
    mp_featfile_free(&file);
    mp_features_free(f);
    mp_dataset_free(d);
    mp_ensemble_free(e);
    if (st)
        mp_eval_result_free(res);
    return st;
}
