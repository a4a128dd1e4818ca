/*
 * fingerprint.c - learned molecule vectors (fingerprint.h): the input read
 * a chunk at a time, featurized, run through one member in batches of the
 * chunk's valid molecules (mp_model_forward on the model's backend), the
 * chosen layer read back (mp_model_get_encoding) and written row by row.
 */
#include "run/fingerprint.h"

#include "data/csv.h"
#include "run/rows.h"

#include <math.h>
#include <string.h>

#define FP_CHUNK 8192
#define FP_BATCH_HOST 256
#define FP_BATCH_DEVICE 4096
#define NPY_HEADER 128    /* bytes of the .npy header: room for any shape */

typedef struct {
    const mp_fingerprint_opts *o;
    mp_predict_stats          *stats;
    mp_ensemble               *e;
    mp_model                  *m;
    mp_rows                    in;      /* the input, a chunk at a time  */
    mp_columns_files           cols;    /* user atom / bond column files */
    mp_afile                   out;
    int                        out_open, npy, width;
    float                     *vec;     /* cap x width                   */
    float                     *batch;   /* batch x width                 */
    float                     *extra;   /* batch x extra_dim             */
    int32_t                   *sel;
} fp_run;

/* ===================================================================== */
/* Output                                                                 */
/* ===================================================================== */

/* The .npy header for `rows` rows, padded to NPY_HEADER bytes. */
static mp_status write_npy_header(fp_run *p, size_t rows)
{
    char dict[NPY_HEADER];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': (%zu, %d), }", rows, p->width);
    if (n < 0 || n + 11 > NPY_HEADER)
        return mp_error_set(MP_ERR_INTERNAL, "fingerprint: .npy header too long");
    unsigned char head[NPY_HEADER];
    memset(head, ' ', sizeof head);
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (unsigned char)((NPY_HEADER - 10) & 0xff);
    head[9] = (unsigned char)((NPY_HEADER - 10) >> 8);
    memcpy(head + 10, dict, (size_t)n);
    head[NPY_HEADER - 1] = '\n';
    if (fseek(p->out.fp, 0, SEEK_SET) || fwrite(head, 1, sizeof head, p->out.fp) != sizeof head)
        return mp_error_set(MP_ERR_IO, "%s: cannot write", p->o->out_path);
    return MP_OK;
}

static void write_csv_header(fp_run *p, const char *smiles_name)
{
    FILE *fp = p->out.fp;
    mp_csv_write_field(fp, smiles_name);
    for (int k = 0; k < p->width; k++)
        fprintf(fp, ",fp_%d", k);
    fputc('\n', fp);
}

/* Row i of the chunk: its vector, or NaN / empty fields when invalid. */
static mp_status write_row(fp_run *p, int32_t i, int valid)
{
    FILE *fp = p->out.fp;
    const float *v = p->vec + (size_t)i * p->width;
    if (p->npy) {
        if (!valid)
            for (int k = 0; k < p->width; k++)
                p->vec[(size_t)i * p->width + k] = NAN;
        if (fwrite(v, sizeof(float), (size_t)p->width, fp) != (size_t)p->width)
            return mp_error_set(MP_ERR_IO, "%s: cannot write", p->o->out_path);
        return MP_OK;
    }
    mp_csv_write_field(fp, p->in.smiles[i]);
    for (int k = 0; k < p->width; k++) {
        fputc(',', fp);
        if (valid)
            fprintf(fp, "%.9g", v[k]);
    }
    fputc('\n', fp);
    return MP_OK;
}

/* ===================================================================== */
/* A chunk                                                                */
/* ===================================================================== */

/* The vectors of molecules sel[0..nb) of f into rows rows[...] of p->vec. */
static mp_status run_batch(fp_run *p, const mp_features *f, int32_t nb)
{
    mp_ensemble *e = p->e;
    int dim = e->cfg.extra_dim;
    mp_graphs sub;
    memset(&sub, 0, sizeof sub);
    mp_status st = MP_OK;
    if (e->cfg.kind == MP_MODEL_DMPNN && (st = mp_graphs_select(&sub, &f->g, p->sel, nb)))
        return st;
    if (dim) {
        mp_feature_set_fill_scaled(e->features, f, p->sel, nb, &e->feature_scaler, p->extra);
    }
    int w;
    if (!(st = mp_model_forward(p->m, e->cfg.kind == MP_MODEL_DMPNN ? &sub : NULL,
                                dim ? p->extra : NULL, nb, 0, NULL)))
        st = mp_model_get_encoding(p->m, p->o->layer, p->batch, &w);
    mp_graphs_free(&sub);
    if (st)
        return st;
    for (int32_t i = 0; i < nb; i++)
        memcpy(p->vec + (size_t)p->sel[i] * p->width, p->batch + (size_t)i * p->width,
               sizeof(float) * (size_t)p->width);
    return MP_OK;
}

static mp_status flush(fp_run *p, const mp_featurize_opts *fo)
{
    mp_features *f = NULL;
    mp_status st = mp_featurize(&f, (const char *const *)p->in.smiles, p->in.n, fo);
    if (!st)
        st = mp_columns_files_apply(&p->cols, &p->e->cols, &f->g, (int32_t)p->stats->n_rows,
                                    (const char *const *)p->in.smiles);
    if (st) {
        mp_features_free(f);
        return st;
    }
    int32_t batch = p->e->backend->host_memory ? FP_BATCH_HOST : FP_BATCH_DEVICE, nb = 0;
    const int32_t n = p->in.n;
    for (int32_t i = 0; i < n && !st; i++) {
        if (f->g.valid[i])
            p->sel[nb++] = i;
        if (nb == batch || (i == n - 1 && nb > 0)) {
            st = run_batch(p, f, nb);
            nb = 0;
        }
    }
    for (int32_t i = 0; i < n && !st; i++) {
        if (!f->g.valid[i]) {
            if (!p->o->quiet && p->stats->n_invalid < 20)
                fprintf(stderr, "%s:%zu: invalid SMILES '%s': no fingerprint\n",
                        p->o->data_path, p->in.line[i], p->in.smiles[i]);
            p->stats->n_invalid++;
        }
        st = write_row(p, i, f->g.valid[i]);
    }
    mp_features_free(f);
    p->stats->n_rows += (size_t)n;
    mp_rows_clear(&p->in);
    return st;
}

/* ===================================================================== */
/* The run                                                                */
/* ===================================================================== */

static mp_status fp_open(fp_run *p)
{
    const mp_fingerprint_opts *o = p->o;
    mp_status st;
    if ((st = mp_ensemble_load(&p->e, o->model_path, o->backend)))
        return st;
    if (o->member < 0 || o->member >= p->e->n_members)
        return mp_error_set(MP_ERR_ARG, "--member %d: the model has %d member(s)", o->member,
                            p->e->n_members);
    p->m = p->e->members[o->member];
    if ((st = mp_model_get_encoding(p->m, o->layer, NULL, &p->width)) ||
        (st = mp_columns_files_open(&p->cols, &p->e->cols, o->atom_path, o->bond_path,
                                    o->model_path, -1, "")))
        return st;
    size_t len = strlen(o->out_path);
    p->npy = len >= 4 && !strcmp(o->out_path + len - 4, ".npy");
    int32_t batch = p->e->backend->host_memory ? FP_BATCH_HOST : FP_BATCH_DEVICE;
    int32_t cap = o->chunk_rows > 0 ? o->chunk_rows : FP_CHUNK;
    cap = (int32_t)(((int64_t)cap + batch - 1) / batch * batch);   /* whole batches */
    if ((st = mp_rows_open(&p->in, o->data_path, &o->columns, cap)))
        return st;
    p->vec = mp_malloc(sizeof(float) * (size_t)cap * (size_t)p->width);
    p->batch = mp_malloc(sizeof(float) * (size_t)batch * (size_t)p->width);
    p->extra = mp_malloc(sizeof(float) * ((size_t)batch * (size_t)p->e->cfg.extra_dim + 1));
    p->sel = mp_malloc(sizeof(int32_t) * (size_t)cap);
    if (!p->vec || !p->batch || !p->extra || !p->sel)
        return mp_error_set(MP_ERR_NOMEM, "fingerprint: out of memory (chunk of %d rows)",
                            (int)cap);
    if ((st = mp_afile_open(&p->out, o->out_path)))
        return st;
    p->out_open = 1;
    if (p->npy)
        return write_npy_header(p, 0);
    write_csv_header(p, p->in.smiles_name);
    return MP_OK;
}

static mp_status fp_rows(fp_run *p)
{
    const mp_fingerprint_opts *o = p->o;
    mp_featurize_opts fo = mp_ensemble_featurize_opts(p->e);
    fo.n_threads = o->threads;
    for (;;) {
        int eof;
        mp_status st = mp_rows_fill(&p->in, &eof);
        if (st)
            return st;
        if (p->in.n > 0 && (st = flush(p, &fo)))
            return st;
        if (eof) {
            if ((st = mp_columns_files_end(&p->cols, p->stats->n_rows, 1, o->data_path)))
                return st;
            return p->npy ? write_npy_header(p, p->stats->n_rows) : MP_OK;
        }
    }
}

mp_status mp_fingerprint_file(const mp_fingerprint_opts *o, mp_predict_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (o->threads > 0)
        mp_threads_set(o->threads);
    fp_run p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.stats = stats;
    double t0 = mp_time_now();
    mp_status st = fp_open(&p);
    if (st == MP_OK)
        st = fp_rows(&p);
    if (st == MP_OK) {
        st = mp_afile_commit(&p.out);
        p.out_open = 0;
        stats->seconds = mp_time_now() - t0;
        stats->mols_per_second = stats->n_rows / (stats->seconds > 0 ? stats->seconds : 1e-9);
    }
    if (p.out_open)
        mp_afile_abort(&p.out);
    mp_rows_close(&p.in);
    mp_free(p.vec);
    mp_free(p.batch);
    mp_free(p.extra);
    mp_free(p.sel);
    mp_columns_files_free(&p.cols);
    mp_ensemble_free(p.e);
    return st;
}
