/*
 * test_labels.c - sparse label matrices (src/data/labels.c) on a
 * ChEMBL-shaped file at small scale: real SMILES from the shared datasets,
 * 1,310 tasks, about 1% of the cells labelled at random.  The sparse reader
 * gives exactly what the dense one does, in a fraction of the memory; the
 * converters and the row blocks agree with the dense matrix.
 */
#include "test.h"
#include "internal.h"
#include "data/labels.h"

#include <stdlib.h>
#include <unistd.h>

#define N_TASKS 1310

/* n rows x N_TASKS tasks, each cell labelled 0/1 with probability p. */
static const char *chembl_shaped(int n, double p)
{
    static char path[1300];
    snprintf(path, sizeof path, "%s/labels_chembl_%d.csv", mp_test_tmpdir(), n);
    mp_dataset *src;
    if (mp_dataset_load(&src, mp_test_shared("datasets/bbbp.csv.gz"), NULL) != MP_OK)
        return NULL;
    FILE *fp = fopen(path, "w");
    fputs("smiles", fp);
    for (int t = 0; t < N_TASKS; t++)
        fprintf(fp, ",CHEMBL%d", 1000 + t);
    fputc('\n', fp);
    mp_rng rng;
    mp_rng_seed(&rng, 42, 7);
    for (int i = 0; i < n; i++) {
        fputs(src->smiles[(size_t)i % src->n_rows], fp);
        for (int t = 0; t < N_TASKS; t++) {
            fputc(',', fp);
            if (mp_rng_uniform(&rng) < p)
                fputc(mp_rng_uniform(&rng) < 0.3 ? '1' : '0', fp);
        }
        fputc('\n', fp);
    }
    fclose(fp);
    mp_dataset_free(src);
    return path;
}

MP_TEST(labels_sparse_reader_equals_the_dense_one)
{
    const char *path = chembl_shaped(1500, 0.01);
    CHECK(path);
    long live = mp_alloc_live();
    mp_dataset *dense, *d;
    mp_labels *y;
    CHECK_OK(mp_dataset_load(&dense, path, NULL));
    CHECK_OK(mp_labels_load(&d, &y, path, NULL));
    CHECK(d->targets == NULL);
    CHECK_EQ_INT(d->n_rows, 1500);
    CHECK_EQ_INT(d->n_tasks, N_TASKS);
    CHECK_EQ_INT(y->n_rows, 1500);
    CHECK_EQ_STR(d->task_names[1309], "CHEMBL2309");
    for (size_t i = 0; i < d->n_rows; i++)
        CHECK(!strcmp(d->smiles[i], dense->smiles[i]) && d->line[i] == dense->line[i]);
    size_t nnz = 0;
    for (size_t i = 0; i < 1500 * (size_t)N_TASKS; i++)
        nnz += !isnan(dense->targets[i]);
    CHECK_EQ_INT(y->nnz, nnz);
    CHECK(nnz > 15000 && nnz < 24000);   /* ~1% of 1.97M cells */
    double *back = malloc(sizeof(double) * 1500 * N_TASKS);
    mp_labels_to_dense(y, back);
    int same = 1;
    for (size_t i = 0; i < 1500 * (size_t)N_TASKS && same; i++)
        same = isnan(back[i]) ? isnan(dense->targets[i]) : back[i] == dense->targets[i];
    CHECK(same);
    /* a block of rows, as a batch takes it */
    int32_t rows[5] = { 1499, 0, 77, 77, 1000 };
    double blk[5 * N_TASKS];
    float blkf[5 * N_TASKS];
    mp_labels_fill_rows(y, rows, 5, blk);
    mp_labels_fill_rows_f32(y, rows, 5, blkf);
    for (int i = 0; i < 5 && same; i++)
        for (int t = 0; t < N_TASKS && same; t++) {
            double v = dense->targets[(size_t)rows[i] * N_TASKS + t];
            same = isnan(v) ? isnan(blk[i * N_TASKS + t]) && isnan(blkf[i * N_TASKS + t])
                            : blk[i * N_TASKS + t] == v && blkf[i * N_TASKS + t] == (float)v;
        }
    CHECK(same);
    /* the dense matrix back to sparse: the same arrays */
    mp_labels *z;
    CHECK_OK(mp_labels_from_dense(&z, dense->targets, 1500, N_TASKS));
    CHECK(z->nnz == y->nnz && !memcmp(z->row_start, y->row_start, sizeof(size_t) * 1501) &&
          !memcmp(z->task, y->task, sizeof(int32_t) * y->nnz) &&
          !memcmp(z->value, y->value, sizeof(double) * y->nnz));
    /* memory: the labels present, not rows x tasks */
    CHECK_EQ_INT(mp_labels_dense_bytes(y), 1500 * (size_t)N_TASKS * 8);
    CHECK(mp_labels_bytes(y) * 50 < mp_labels_dense_bytes(y));
    mp_labels_free(z);
    free(back);
    mp_labels_free(y);
    mp_dataset_free(d);
    mp_dataset_free(dense);
    CHECK_EQ_INT(mp_alloc_live(), live);
}

MP_TEST(labels_sparse_reader_errors_and_columns)
{
    const char *path = mp_test_tmpdir();
    char p[1300];
    snprintf(p, sizeof p, "%s/labels_bad.csv", path);
    FILE *fp = fopen(p, "w");
    fputs("smiles,a,id,b\nCCO,1,x1,\nCCN,,x2,0.5\nCCC,abc,x3,1\n", fp);
    fclose(fp);
    mp_dataset *d;
    mp_labels *y;
    /* the same message as the dense reader's */
    CHECK(mp_dataset_load(&d, p, NULL) == MP_ERR_FORMAT);
    char dense_msg[1024];
    snprintf(dense_msg, sizeof dense_msg, "%s", mp_error_message());
    CHECK(mp_labels_load(&d, &y, p, NULL) == MP_ERR_FORMAT && d == NULL && y == NULL);
    CHECK_EQ_STR(mp_error_message(), dense_msg);
    /* columns chosen as for mp_dataset_load */
    fp = fopen(p, "w");
    fputs("smiles,a,id,b\nCCO,1,x1,\nCCN,,x2,0.5\n", fp);
    fclose(fp);
    mp_column_spec spec = { .ignore_columns = "id" };
    CHECK_OK(mp_labels_load(&d, &y, p, &spec));
    CHECK_EQ_INT(d->n_tasks, 2);
    CHECK_EQ_STR(d->task_names[1], "b");
    CHECK_EQ_INT(y->nnz, 2);
    CHECK(y->row_start[1] == 1 && y->task[0] == 0 && y->value[0] == 1.0);
    CHECK(y->task[1] == 1 && y->value[1] == 0.5);
    mp_labels_free(y);
    mp_dataset_free(d);
    fp = fopen(p, "w");
    fputs("smiles,a\n", fp);
    fclose(fp);
    CHECK(mp_labels_load(&d, &y, p, NULL) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "no data rows") != NULL);
    /* allocation failures: an error, nothing leaked */
    fp = fopen(p, "w");
    fputs("smiles,a,b\nCCO,1,\nCCN,,0\nCCC,1,1\n", fp);
    fclose(fp);
    long live = mp_alloc_live();
    for (long k = 0; k < 40; k++) {
        mp_alloc_fail_after(k);
        mp_status st = mp_labels_load(&d, &y, p, NULL);
        mp_alloc_fail_after(-1);
        if (st == MP_OK) {
            mp_labels_free(y);
            mp_dataset_free(d);
        } else {
            CHECK(st == MP_ERR_NOMEM && d == NULL && y == NULL);
        }
        CHECK_EQ_INT(mp_alloc_live(), live);
    }
}

/* A classification run on sparse labels is the run on the dense matrix. */
MP_TEST(labels_sparse_training_equals_dense)
{
    const char *path = chembl_shaped(600, 0.05);
    CHECK(path);
    mp_train_opts t = mp_train_opts_default();
    t.data_path = path;
    t.task = MP_TASK_CLASSIFICATION;
    t.model = MP_MODEL_FFN;
    t.features = MP_FEAT_MORGAN;
    t.epochs = 2;
    t.threads = 1;
    t.quiet = 1;
    mp_train_result dense, sparse;
    CHECK_OK(mp_train(&t, &dense));
    mp_dataset *d;
    mp_labels *y;
    mp_features *f;
    CHECK_OK(mp_labels_load(&d, &y, path, NULL));
    mp_featurize_opts fo = mp_train_featurize_opts(&t);
    CHECK_OK(mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo));
    mp_train_inputs in = { .dataset = d, .features = f, .labels = y };
    t.inputs = &in;
    mp_status st = mp_train(&t, &sparse);
    mp_features_free(f);
    mp_labels_free(y);
    mp_dataset_free(d);
    CHECK_OK(st);
    CHECK_MSG(sparse.test_mean == dense.test_mean && sparse.val_mean == dense.val_mean,
              "sparse %.17g/%.17g, dense %.17g/%.17g", sparse.test_mean, sparse.val_mean,
              dense.test_mean, dense.val_mean);
    CHECK(sparse.n_tasks == N_TASKS && isfinite(sparse.test_mean));
    for (size_t k = 0; k < sparse.n_tasks; k++)
        CHECK(isnan(sparse.test_per_task[k]) ? isnan(dense.test_per_task[k])
                                             : sparse.test_per_task[k] == dense.test_per_task[k]);
    mp_train_result_free(&dense);
    mp_train_result_free(&sparse);
    /* regression is not read sparsely */
    t.task = MP_TASK_REGRESSION;
    CHECK_OK(mp_labels_load(&d, &y, path, NULL));
    CHECK_OK(mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo));
    in = (mp_train_inputs){ .dataset = d, .features = f, .labels = y };
    st = mp_train(&t, &sparse);
    mp_features_free(f);
    mp_labels_free(y);
    mp_dataset_free(d);
    CHECK(st == MP_ERR_ARG && strstr(mp_error_message(), "sparse labels are for a classification"));
}
