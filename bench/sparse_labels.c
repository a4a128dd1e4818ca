/*
 * sparse_labels.c - the ChEMBL-shaped benchmark of the sparse label store
 * (src/data/labels.c): writes a CSV of Yang et al.'s ChEMBL shape (456,331
 * molecules x 1,310 tasks; real SMILES from the shared datasets, cycled;
 * each cell a 0/1 label with probability --density, 1% by default), then
 * reads it with the sparse reader and reports the time, the labels, the
 * bytes sparse and dense, and the process's peak memory.  --dense reads it
 * with the dense reader too (4.8 GB of targets at full scale).  --train
 * MODEL (dmpnn or ffn-morgan) then featurizes it and trains on the sparse
 * labels (random 80/10/10 split, --epochs, --device), reporting the
 * training rate and the peak memory after it.
 *
 *   make build/bench_sparse_labels
 *   build/bench_sparse_labels --out /tmp/chembl_shaped.csv [--rows N] [--dense]
 *   build/bench_sparse_labels --train dmpnn --device gpu:bf16 --epochs 1
 */
#include "internal.h"
#include "data/labels.h"
#include "run/trainer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static long peak_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static int generate(const char *path, long rows, int tasks, double density, const char *shared)
{
    static const char *const sources[] = { "hiv.csv.gz", "muv.csv.gz", "tox21.csv.gz" };
    char *smiles[200000];
    size_t n = 0;
    for (int s = 0; s < 3 && n < 200000; s++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", shared, sources[s]);
        mp_column_spec spec = { .no_targets = 1 };
        mp_dataset *d;
        if (mp_dataset_load(&d, p, &spec) != MP_OK) {
            fprintf(stderr, "%s\n", mp_error_message());
            return 0;
        }
        for (size_t i = 0; i < d->n_rows && n < 200000; i++)
            smiles[n++] = mp_strdup(d->smiles[i]);
        mp_dataset_free(d);
    }
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fputs("smiles", fp);
    for (int t = 0; t < tasks; t++)
        fprintf(fp, ",CHEMBL%d", 100000 + t);
    fputc('\n', fp);
    mp_rng rng;
    mp_rng_seed(&rng, 2019, 1);
    char *line = malloc((size_t)tasks * 2 + 4096);
    for (long i = 0; i < rows; i++) {
        size_t k = (size_t)snprintf(line, 4096, "%s", smiles[(size_t)i % n]);
        for (int t = 0; t < tasks; t++) {
            line[k++] = ',';
            if (mp_rng_uniform(&rng) < density)
                line[k++] = mp_rng_uniform(&rng) < 0.3 ? '1' : '0';
        }
        line[k++] = '\n';
        fwrite(line, 1, k, fp);
    }
    free(line);
    for (size_t i = 0; i < n; i++)
        mp_free(smiles[i]);
    return fclose(fp) == 0;
}

int main(int argc, char **argv)
{
    long rows = 456331;
    int tasks = 1310, dense = 0, epochs = 1;
    const char *train = NULL, *device = "cpu";
    double density = 0.01;
    const char *out = "/tmp/chembl_shaped.csv";
    const char *shared = getenv("MOLPROP_SHARED") ? getenv("MOLPROP_SHARED") : "../shared";
    char sdir[4096];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atol(argv[++i]);
        else if (!strcmp(argv[i], "--tasks") && i + 1 < argc)
            tasks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--density") && i + 1 < argc)
            density = atof(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--dense"))
            dense = 1;
        else if (!strcmp(argv[i], "--train") && i + 1 < argc)
            train = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
            epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--rows N] [--tasks T] [--density P] [--out F] [--dense] "
                    "[--train dmpnn|ffn-morgan [--epochs N] [--device D]]\n",
                    argv[0]);
            return 2;
        }
    }
    snprintf(sdir, sizeof sdir, "%s/datasets", shared);
    struct stat sb;
    double t0 = mp_time_now();
    if (stat(out, &sb) != 0) {
        if (!generate(out, rows, tasks, density, sdir)) {
            fprintf(stderr, "cannot write %s\n", out);
            return 1;
        }
        stat(out, &sb);
        printf("generated %s: %ld rows x %d tasks, density %g, %.1f MB in %.1f s\n", out, rows,
               tasks, density, sb.st_size / 1e6, mp_time_now() - t0);
    }
    long before = peak_kb();
    t0 = mp_time_now();
    mp_dataset *d;
    mp_labels *y;
    if (mp_labels_load(&d, &y, out, NULL) != MP_OK) {
        fprintf(stderr, "%s\n", mp_error_message());
        return 1;
    }
    double ts = mp_time_now() - t0;
    printf("sparse: %zu rows x %zu tasks, %zu labels (%.2f%%), read in %.1f s; labels %.1f MB "
           "sparse vs %.1f MB dense; peak RSS %.1f MB (%.1f MB before reading)\n", d->n_rows,
           d->n_tasks, y->nnz, 100.0 * (double)y->nnz / ((double)d->n_rows * (double)d->n_tasks),
           ts, mp_labels_bytes(y) / 1e6, mp_labels_dense_bytes(y) / 1e6, peak_kb() / 1e3,
           before / 1e3);
    if (train) {
        mp_train_opts t = mp_train_opts_default();
        t.data_path = out;
        t.task = MP_TASK_CLASSIFICATION;
        t.model = !strcmp(train, "dmpnn") ? MP_MODEL_DMPNN : MP_MODEL_FFN;
        t.features = t.model == MP_MODEL_FFN ? MP_FEAT_MORGAN : 0;
        t.epochs = epochs;
        t.backend = device;
        t.quiet = 1;
        mp_featurize_opts fo = mp_train_featurize_opts(&t);
        mp_features *f;
        t0 = mp_time_now();
        if (mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo) != MP_OK) {
            fprintf(stderr, "%s\n", mp_error_message());
            return 1;
        }
        printf("featurized in %.1f s; peak RSS %.1f MB\n", mp_time_now() - t0, peak_kb() / 1e3);
        mp_train_inputs in = { .dataset = d, .features = f, .labels = y };
        t.inputs = &in;
        mp_train_result r;
        if (mp_train(&t, &r) != MP_OK) {
            fprintf(stderr, "%s\n", mp_error_message());
            return 1;
        }
        printf("trained %s on %s, %d epoch%s: %.1f s, %.0f molecules/s; test auc %.4f; peak RSS "
               "%.1f MB\n", train, device, epochs, epochs == 1 ? "" : "s", r.train_seconds,
               r.train_mols_per_second, r.test_mean, peak_kb() / 1e3);
        mp_train_result_free(&r);
        mp_features_free(f);
    }
    mp_labels_free(y);
    mp_dataset_free(d);
    if (dense) {
        t0 = mp_time_now();
        if (mp_dataset_load(&d, out, NULL) != MP_OK) {
            fprintf(stderr, "%s\n", mp_error_message());
            return 1;
        }
        printf("dense: read in %.1f s; peak RSS %.1f MB\n", mp_time_now() - t0, peak_kb() / 1e3);
        mp_dataset_free(d);
    }
    return 0;
}
