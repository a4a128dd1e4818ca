/*
 * dist_train.c - a training run for tests/test_dist.c, launched once alone
 * and once under `mpirun -np K`: trains a small model on DATA and writes
 * OUT.rank<r>: one line per epoch, "epoch loss val" at full precision (the
 * loss curve, from every rank, so the test sees they agree); rank 0 also
 * saves the model into OUT.model/.  With MOLPROP_DIST_THREADS=K set it runs
 * as K thread ranks of one process instead (core/dist.h's
 * mp_dist_run_threads: what `train --devices K` does), one thread each.
 *
 *   dist_train DATA OUT MODEL(dmpnn|ffn) EPOCHS BATCH [LOSS [WEIGHT_COLUMN]]
 */
#include "core/dist.h"
#include "run/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_epoch(void *arg, int member, int epoch, double loss, double val)
{
    fprintf((FILE *)arg, "%d %d %.17g %.17g\n", member, epoch, loss, val);
}

typedef struct {
    int    argc;
    char **argv;
} job;

/* One rank's training (the process's, or a thread rank's). */
static mp_status train_rank(void *arg, int rank)
{
    const job *j = arg;
    char **argv = j->argv;
    char log[4200], dir[4200];
    snprintf(log, sizeof log, "%s.rank%d", argv[2], rank);
    snprintf(dir, sizeof dir, "%s.model", argv[2]);
    FILE *fp = fopen(log, "w");
    if (!fp)
        return mp_error_set(MP_ERR_IO, "cannot write %s", log);
    mp_train_opts t = mp_train_opts_default();
    t.data_path = argv[1];
    t.model = strcmp(argv[3], "ffn") ? MP_MODEL_DMPNN : MP_MODEL_FFN;
    if (t.model == MP_MODEL_FFN)
        t.features = MP_FEAT_MORGAN;
    t.epochs = atoi(argv[4]);
    t.batch_size = atoi(argv[5]);
    t.hidden = 32;
    t.quiet = 1;
    if (mp_dist_in_threads())
        mp_threads_set_local(1);
    else
        t.threads = 1;
    t.save_dir = rank == 0 ? dir : NULL;
    if (j->argc > 6)
        t.loss = argv[6];
    if (j->argc > 7)
        t.columns.weight_column = argv[7];
    t.on_epoch = on_epoch;
    t.on_epoch_arg = fp;
    mp_train_result r;
    mp_status st = mp_train(&t, &r);
    if (st == MP_OK) {
        fprintf(fp, "test %.17g\n", r.test_mean);
        mp_train_result_free(&r);
    }
    fclose(fp);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "usage: dist_train DATA OUT dmpnn|ffn EPOCHS BATCH [LOSS [WCOL]]\n");
        return 2;
    }
    mp_status st = mp_dist_init();
    if (st) {
        fprintf(stderr, "dist_train: %s\n", mp_error_message());
        return 1;
    }
    job j = { argc, argv };
    const char *k = getenv("MOLPROP_DIST_THREADS");
    st = k ? mp_dist_run_threads(atoi(k), NULL, train_rank, &j) : train_rank(&j, mp_dist_rank());
    if (st) {
        fprintf(stderr, "dist_train rank %d: %s\n", mp_dist_rank(), mp_error_message());
        return 1;
    }
    return 0;
}
