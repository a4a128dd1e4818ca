/*
 * predict.c - streaming prediction and evaluation with a saved model.
 */
#include "run/predict.h"

#include "data/csv.h"

#include <math.h>
#include <string.h>

#define DEFAULT_CHUNK 8192
#define DEFAULT_CHUNK_GPU 65536  /* a device backend streams batches: fewer pipeline fills */
#define PREDICT_BATCH 256        /* molecules per forward: bounds the activation memory */
#define PREDICT_BATCH_GPU 4096   /* a device backend: fewer, fuller launches */
#define PREDICT_BATCH_FOR(e) ((e)->backend->host_memory ? PREDICT_BATCH : PREDICT_BATCH_GPU)
#define MAX_REPORTED_INVALID 20

/* One chunk of input rows: the SMILES strings (owned) and their lines. */
typedef struct {
    int32_t n, cap;
    char  **smiles;
    size_t *line;
} chunk;

static void chunk_clear(chunk *c)
{
    for (int32_t i = 0; i < c->n; i++)
        mp_free(c->smiles[i]);
    c->n = 0;
}

static void chunk_free(chunk *c)
{
    chunk_clear(c);
    mp_free(c->smiles);
    mp_free(c->line);
}

static mp_status predict_chunk(mp_ensemble *e, const chunk *c, const mp_featurize_opts *fo,
                               int32_t *idx, double *mean, double *std)
{
    mp_features *f = NULL;
    mp_status st = mp_featurize(&f, (const char *const *)c->smiles, c->n, fo);
    if (st)
        return st;
    for (int32_t i = 0; i < c->n; i++)
        idx[i] = i;
    st = mp_ensemble_predict(e, f, idx, c->n, 0, 0, PREDICT_BATCH_FOR(e), mean, std);
    mp_features_free(f);
    return st;
}

static void write_number(FILE *fp, double v)
{
    if (!isnan(v))
        fprintf(fp, "%.9g", v);
}

mp_status mp_predict_file(const mp_predict_opts *o, mp_predict_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (o->threads > 0)
        mp_threads_set(o->threads);
    int32_t cap = o->chunk_rows;
    mp_ensemble *e = NULL;
    mp_csv_reader *r = NULL;
    mp_afile out;
    int out_open = 0;
    chunk c;
    memset(&c, 0, sizeof c);
    double *mean = NULL, *std = NULL;
    int32_t *idx = NULL;
    mp_status st;
    double t0 = mp_time_now();

    if ((st = mp_ensemble_load(&e, o->model_path, o->backend)))
        goto done;
    if (cap <= 0)
        cap = e->backend->host_memory ? DEFAULT_CHUNK : DEFAULT_CHUNK_GPU;
    if ((st = mp_csv_open(&r, o->data_path)))
        goto done;
    char **fields;
    size_t nf, line, smiles_col;
    if ((st = mp_csv_next(r, &fields, &nf, &line)))
        goto done;
    if (nf == 0) {
        st = mp_error_set(MP_ERR_FORMAT, "%s: empty file (no header row)", o->data_path);
        goto done;
    }
    size_t n_header = nf;
    mp_column_spec spec = o->columns;
    spec.no_targets = 1;
    if ((st = mp_columns_resolve(o->data_path, fields, nf, &spec, &smiles_col, NULL, NULL)))
        goto done;

    size_t t = e->n_tasks;
    c.smiles = mp_malloc(sizeof(char *) * (size_t)cap);
    c.line = mp_malloc(sizeof(size_t) * (size_t)cap);
    mean = mp_malloc(sizeof(double) * (size_t)cap * t);
    std = mp_malloc(sizeof(double) * (size_t)cap * t);
    idx = mp_malloc(sizeof(int32_t) * (size_t)cap);
    if (!c.smiles || !c.line || !mean || !std || !idx) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory (chunk of %d rows)", cap);
        goto done;
    }
    c.cap = cap;

    if ((st = mp_afile_open(&out, o->out_path)))
        goto done;
    out_open = 1;
    mp_csv_write_field(out.fp, fields[smiles_col]);
    for (size_t k = 0; k < t; k++) {
        fputc(',', out.fp);
        mp_csv_write_field(out.fp, e->task_names[k]);
    }
    if (o->uncertainty)
        for (size_t k = 0; k < t; k++) {
            char name[1024];
            snprintf(name, sizeof name, "%s_std", e->task_names[k]);
            fputc(',', out.fp);
            mp_csv_write_field(out.fp, name);
        }
    fputc('\n', out.fp);

    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    fo.n_threads = o->threads;
    for (;;) {
        if ((st = mp_csv_next(r, &fields, &nf, &line)))
            goto done;
        int eof = nf == 0;
        if (!eof) {
            if (nf != n_header) {
                st = mp_error_set(MP_ERR_FORMAT, "%s:%zu: expected %zu fields like the header, "
                                  "found %zu", o->data_path, line, n_header, nf);
                goto done;
            }
            if (!(c.smiles[c.n] = mp_strdup(fields[smiles_col]))) {
                st = mp_error_set(MP_ERR_NOMEM, "out of memory");
                goto done;
            }
            c.line[c.n++] = line;
        }
        if (c.n == c.cap || (eof && c.n > 0)) {
            if ((st = predict_chunk(e, &c, &fo, idx, mean, std)))
                goto done;
            for (int32_t i = 0; i < c.n; i++) {
                mp_csv_write_field(out.fp, c.smiles[i]);
                int bad = isnan(mean[(size_t)i * t]);
                if (bad) {
                    if (!o->quiet && stats->n_invalid < MAX_REPORTED_INVALID)
                        fprintf(stderr, "%s:%zu: invalid SMILES '%s': no prediction\n",
                                o->data_path, c.line[i], c.smiles[i]);
                    stats->n_invalid++;
                }
                for (size_t k = 0; k < t; k++) {
                    fputc(',', out.fp);
                    write_number(out.fp, mean[(size_t)i * t + k]);
                }
                if (o->uncertainty)
                    for (size_t k = 0; k < t; k++) {
                        fputc(',', out.fp);
                        write_number(out.fp, std[(size_t)i * t + k]);
                    }
                fputc('\n', out.fp);
            }
            stats->n_rows += (size_t)c.n;
            chunk_clear(&c);
        }
        if (eof)
            break;
    }
    if (!o->quiet && stats->n_invalid > MAX_REPORTED_INVALID)
        fprintf(stderr, "... %zu invalid SMILES in all\n", stats->n_invalid);
    st = mp_afile_commit(&out);
    out_open = 0;
    stats->seconds = mp_time_now() - t0;
    stats->mols_per_second = stats->n_rows / (stats->seconds > 0 ? stats->seconds : 1e-9);

done:
    if (out_open)
        mp_afile_abort(&out);
    chunk_free(&c);
    mp_free(mean);
    mp_free(std);
    mp_free(idx);
    mp_csv_close(r);
    mp_ensemble_free(e);
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

mp_status mp_eval_file(const char *model_path, const char *data_path,
                       const mp_column_spec *columns, const char *metric,
                       const char *backend, int threads, mp_eval_result *res)
{
    memset(res, 0, sizeof *res);
    if (threads > 0)
        mp_threads_set(threads);
    mp_ensemble *e = NULL;
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    int32_t *idx = NULL;
    size_t *col = NULL;
    double *pred = NULL, *target = NULL;
    mp_score_status *why = NULL;
    mp_status st;

    if ((st = mp_ensemble_load(&e, model_path, backend)))
        goto done;
    mp_column_spec spec;
    memset(&spec, 0, sizeof spec);
    if (columns)
        spec.smiles_column = columns->smiles_column;
    if ((st = mp_dataset_load(&d, data_path, &spec)))
        goto done;
    size_t t = e->n_tasks;
    col = mp_malloc(sizeof(size_t) * t);
    if (!col) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < t; k++) {
        size_t j;
        for (j = 0; j < d->n_tasks; j++)
            if (!strcmp(d->task_names[j], e->task_names[k]))
                break;
        if (j == d->n_tasks) {
            st = mp_error_set(MP_ERR_FORMAT, "%s: no column '%s' (the model predicts it)",
                              data_path, e->task_names[k]);
            goto done;
        }
        col[k] = j;
    }
    int is_cls = e->task == MP_TASK_CLASSIFICATION;
    if (metric) {
        if ((st = mp_metric_parse(metric, &res->metrics[0])))
            goto done;
        if (mp_metric_is_classification(res->metrics[0]) != is_cls) {
            st = mp_error_set(MP_ERR_ARG, "metric %s does not fit this %s model", metric,
                              mp_task_type_name(e->task));
            goto done;
        }
        res->n_metrics = 1;
    } else if (is_cls) {
        res->metrics[0] = MP_METRIC_AUC;
        res->metrics[1] = MP_METRIC_PRC_AUC;
        res->metrics[2] = MP_METRIC_ACCURACY;
        res->n_metrics = 3;
    } else {
        res->metrics[0] = MP_METRIC_RMSE;
        res->metrics[1] = MP_METRIC_MAE;
        res->metrics[2] = MP_METRIC_R2;
        res->n_metrics = 3;
    }

    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    fo.n_threads = threads;
    if ((st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo)))
        goto done;
    size_t n = d->n_rows, nv = 0;
    idx = mp_malloc(sizeof(int32_t) * (n ? n : 1));
    pred = mp_malloc(sizeof(double) * (n ? n : 1) * t);
    target = mp_malloc(sizeof(double) * (n ? n : 1) * t);
    why = mp_malloc(sizeof(mp_score_status) * t);
    res->per_task = mp_malloc(sizeof(double) * (size_t)res->n_metrics * t);
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
    if ((st = mp_ensemble_predict(e, f, idx, (int32_t)nv, 0, 0, PREDICT_BATCH_FOR(e), pred,
                                  NULL)))
        goto done;
    for (int m = 0; m < res->n_metrics; m++) {
        size_t skipped;
        if ((st = mp_metric_tasks(res->metrics[m], is_cls, pred, target, nv, t,
                                  res->per_task + (size_t)m * t, why, &res->mean[m], &skipped)))
            goto done;
    }
done:
    mp_free(col);
    mp_free(idx);
    mp_free(pred);
    mp_free(target);
    mp_free(why);
    mp_features_free(f);
    mp_dataset_free(d);
    mp_ensemble_free(e);
    if (st)
        mp_eval_result_free(res);
    return st;
}
