/*
 * test_dist.c - data-parallel training over MPI ranks (run/batches_dist.c,
 * core/dist.c): the worker tests/workers/dist_train.c trained alone and
 * under `mpirun -np 2|3` on the same global batch: every rank the same
 * loss curve bit for bit, two runs of K ranks the same model file bit for
 * bit, and each epoch's loss within 1e-5 relative of one process's; the
 * command under mpirun writes its files once (rank 0) and prints one
 * summary; sample weights split too, batch norm and the rmse loss are
 * refused.  A build without MPI refuses to run as K ranks, saying why.
 */
#include "test.h"

#include "core/core.h"
#include "core/dist.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("dist_", name); }

/* A shell command line with its output in out (tests/test.h). */
#define shell(...) mp_test_shell(out, sizeof out, __VA_ARGS__)

/* detect_leaks=0: in a sanitizer build, Open MPI's plugins, unloaded at
 * MPI_Finalize, leave blocks LeakSanitizer can neither name nor suppress
 * (tests/lsan.supp); the one-process runs of the same code keep it on */
#define MPIRUN "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np"

MP_TEST(dist_one_process_collectives_are_identities)
{
    CHECK_OK(mp_dist_init());
    CHECK_EQ_INT(mp_dist_size(), 1);
    CHECK_EQ_INT(mp_dist_rank(), 0);
    float v[3] = { 1.5f, -2.0f, 3.25f };
    CHECK_OK(mp_dist_sum_float(v, 3, NULL, NULL));
    CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.25f);
    const float w = 0.5f;
    CHECK_OK(mp_dist_sum_float(v, 3, &w, NULL));
    CHECK(v[0] == 0.75f && v[1] == -1.0f && v[2] == 1.625f);
    uint64_t u[2] = { 7, 9 };
    CHECK_OK(mp_dist_sum_u64(u, 2));
    CHECK(u[0] == 7 && u[1] == 9);
    CHECK_EQ_INT(mp_dist_all_ok(1), 1);
    CHECK_EQ_INT(mp_dist_all_ok(0), 0);
}

/* The first 300 rows of esol, plain (the workers' data). */
static const char *data300(void)
{
    const char *p = tmp("esol300.csv");
    if (access(p, F_OK) != 0 &&
        shell("zcat '%s' | head -301 > '%s'", mp_test_shared("datasets/esol.csv.gz"), p) != 0)
        return NULL;
    return p;
}

/* A loss log's epoch lines: up to 64 (loss, val) pairs; their count. */
static int read_log(const char *path, double *loss, double *val, char **text)
{
    *text = mp_test_slurp(path, NULL);
    if (!*text)
        return -1;
    int n = 0;
    for (const char *p = *text; p && *p && n < 64; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        int member, epoch;
        if (sscanf(p, "%d %d %lf %lf", &member, &epoch, &loss[n], &val[n]) == 4)
            n++;
    }
    return n;
}

/* K ranks as MPI processes (threads 0) or as K thread ranks of one process
 * (threads 1: what train --devices K runs), against one process. */
static void ranks_match(mp_test_result *mp__r, const char *model, int k, const char *extra,
                        int threads)
{
    const char *bin = getenv("MOLPROP_DIST_TRAIN"), *data = data300();
    CHECK_MSG(bin, "MOLPROP_DIST_TRAIN is not set (run the tests through make test)");
    CHECK(data);
    int have_mpirun = shell("command -v mpirun") == 0;
    if (!threads && !have_mpirun)
        MP_SKIP("no mpirun (Debian: openmpi-bin)");
    char one[1300], a[1300], b[1300], path[1400], launch[1400];
    snprintf(one, sizeof one, "%s", tmp("one"));
    snprintf(a, sizeof a, "%s_%s%d%s", tmp("a"), model, k, threads ? "t" : "");
    snprintf(b, sizeof b, "%s_%s%d%s", tmp("b"), model, k, threads ? "t" : "");
    if (threads)
        snprintf(launch, sizeof launch, "MOLPROP_DIST_THREADS=%d", k);
    else
        snprintf(launch, sizeof launch, MPIRUN " %d", k);
    if (*extra)   /* the weighted file: a sample weight column w */
        CHECK_EQ_INT(shell("awk -F, 'NR == 1 {print $0 \",w\"} NR > 1 {print $0 \",\" "
                           "(NR %% 5) * 0.5}' '%s' > '%s.w'", data, data), 0);
    char dpath[1300];
    snprintf(dpath, sizeof dpath, "%s%s", data, *extra ? ".w" : "");
    data = dpath;
    CHECK_MSG(shell("'%s' '%s' '%s' %s 3 50 %s", bin, data, one, model, extra) == 0, "%s", out);
    if (!threads && !mp_dist_built_with_mpi()) {
        CHECK(shell("%s '%s' '%s' '%s' %s 3 50 %s", launch, bin, data, a, model, extra) != 0);
        CHECK_MSG(strstr(out, "built without MPI"), "%s", out);
        return;
    }
    CHECK_MSG(shell("%s '%s' '%s' '%s' %s 3 50 %s", launch, bin, data, a, model, extra) == 0,
              "%s", out);
    CHECK_MSG(shell("%s '%s' '%s' '%s' %s 3 50 %s", launch, bin, data, b, model, extra) == 0,
              "%s", out);
    double l1[64], v1[64], la[64], va[64];
    char *t1, *ta;
    snprintf(path, sizeof path, "%s.rank0", one);
    int n1 = read_log(path, l1, v1, &t1);
    snprintf(path, sizeof path, "%s.rank0", a);
    int na = read_log(path, la, va, &ta);
    CHECK_EQ_INT(n1, 3);
    CHECK_EQ_INT(na, 3);
    for (int e = 0; e < 3; e++) {
        CHECK_NEAR(la[e], l1[e], 0, 1e-5);
        CHECK_NEAR(va[e], v1[e], 0, 1e-5);
    }
    /* the ranks differ from one process somewhere (a slice's sums), else
     * this would not test the split */
    int differs = 0;
    for (int e = 0; e < 3; e++)
        differs |= la[e] != l1[e];
    CHECK_MSG(differs, "%d ranks gave one process's losses bit for bit", k);
    /* every rank the same curve and validation (the same parameters), and
     * a second run the same again */
    for (int r = 1; r < k; r++) {
        snprintf(path, sizeof path, "%s.rank%d", a, r);
        char *tr = mp_test_slurp(path, NULL);
        CHECK(tr);
        CHECK_MSG(!strcmp(tr, ta), "rank %d's log differs from rank 0's:\n%s\n%s", r, tr, ta);
        mp_free(tr);
    }
    snprintf(path, sizeof path, "%s.rank0", b);
    char *tb = mp_test_slurp(path, NULL);
    CHECK(tb);
    CHECK_MSG(!strcmp(tb, ta), "two runs of %d ranks differ", k);
    size_t ma, mb;
    snprintf(path, sizeof path, "%s.model/model.mpm", a);
    char *fa = mp_test_slurp(path, &ma);
    snprintf(path, sizeof path, "%s.model/model.mpm", b);
    char *fb = mp_test_slurp(path, &mb);
    CHECK(fa && fb);
    CHECK_MSG(ma == mb && !memcmp(fa, fb, ma), "two runs of %d ranks saved other models", k);
    /* thread ranks: the bits of as many MPI ranks (the same slices, the
     * same rank-order sums), where mpirun is here */
    if (threads && have_mpirun && mp_dist_built_with_mpi()) {
        char m[1300];
        snprintf(m, sizeof m, "%s_%s%d", tmp("m"), model, k);
        CHECK_MSG(shell(MPIRUN " %d '%s' '%s' '%s' %s 3 50 %s", k, bin, data, m, model,
                        extra) == 0, "%s", out);
        snprintf(path, sizeof path, "%s.rank0", m);
        char *tm = mp_test_slurp(path, NULL);
        CHECK(tm);
        CHECK_MSG(!strcmp(tm, ta), "%d thread ranks' losses differ from %d MPI ranks':\n%s\n%s",
                  k, k, ta, tm);
        size_t mm;
        snprintf(path, sizeof path, "%s.model/model.mpm", m);
        char *fm = mp_test_slurp(path, &mm);
        CHECK_MSG(fm && mm == ma && !memcmp(fm, fa, ma), "%d thread ranks saved another model "
                  "than %d MPI ranks", k, k);
        mp_free(fm);
        mp_free(tm);
    }
    mp_free(fa);
    mp_free(fb);
    mp_free(tb);
    mp_free(t1);
    mp_free(ta);
}

static void train_ranks_match(mp_test_result *mp__r, const char *model, int k,
                              const char *extra)
{
    ranks_match(mp__r, model, k, extra, 0);
}

/* train --devices K's thread ranks (core/dist.h mp_dist_run_threads) on
 * the cpu: what the GPUs of one machine run, testable here */
MP_TEST(dist_threads_train_dmpnn_2_ranks_match_one_process)
{
    ranks_match(mp__r, "dmpnn", 2, "", 1);
}

MP_TEST(dist_threads_train_dmpnn_3_ranks_match_one_process)
{
    ranks_match(mp__r, "dmpnn", 3, "", 1);
}

MP_TEST(dist_threads_train_weighted_mae_2_ranks_match_one_process)
{
    ranks_match(mp__r, "dmpnn", 2, "mae w", 1);
}

MP_TEST(dist_threads_train_ffn_3_ranks_match_one_process)
{
    ranks_match(mp__r, "ffn", 3, "", 1);
}

MP_TEST(dist_train_dmpnn_2_ranks_match_one_process)
{
    train_ranks_match(mp__r, "dmpnn", 2, "");
}

MP_TEST(dist_train_dmpnn_3_ranks_match_one_process)
{
    train_ranks_match(mp__r, "dmpnn", 3, "");
}

/* sample weights (issue 11) and another loss split over the ranks too */
MP_TEST(dist_train_weighted_mae_2_ranks_match_one_process)
{
    train_ranks_match(mp__r, "dmpnn", 2, "mae w");
}

MP_TEST(dist_train_ffn_2_ranks_match_one_process)
{
    train_ranks_match(mp__r, "ffn", 2, "");
}

MP_TEST(dist_train_cli_rank0_writes_alone)
{
    const char *data = data300(), *bin = getenv("MOLPROP_BIN");
    CHECK(data && bin);
    if (shell("command -v mpirun") != 0)
        MP_SKIP("no mpirun (Debian: openmpi-bin)");
    const char *dir = tmp("cli");
    int rc = shell(MPIRUN " 2 '%s' train --data '%s' --epochs 2 --hidden 32 --threads 1 "
                   "--save-dir '%s'", bin, data, dir);
    if (!mp_dist_built_with_mpi()) {
        CHECK(rc != 0);
        CHECK_MSG(strstr(out, "built without MPI"), "%s", out);
        CHECK(access(dir, F_OK) != 0);
        return;
    }
    CHECK_MSG(rc == 0, "%s", out);
    /* one summary, from rank 0; the epochs' lines once */
    const char *first = strstr(out, "test rmse = ");
    CHECK_MSG(first && !strstr(first + 1, "test rmse = "), "%s", out);
    const char *ep = strstr(out, "epoch 2/2");
    CHECK_MSG(ep && !strstr(ep + 1, "epoch 2/2"), "%s", out);
    CHECK_EQ_INT(shell("ls -A '%s' | tr '\\n' ' '", dir), 0);
    CHECK_MSG(!strcmp(out, "metrics.json model.mpm split.tsv "), "'%s'", out);
    /* batch norm's statistics and the rmse loss are over the whole batch */
    rc = shell(MPIRUN " 2 '%s' train --data '%s' --epochs 1 --save-dir '%s' --batch-norm", bin,
               data, tmp("bn"));
    CHECK(rc != 0);
    CHECK_MSG(strstr(out, "batch norm is taken over the whole batch"), "%s", out);
    CHECK(access(tmp("bn"), F_OK) != 0);
    rc = shell(MPIRUN " 2 '%s' train --data '%s' --epochs 1 --save-dir '%s' --loss rmse", bin,
               data, tmp("rmse"));
    CHECK(rc != 0);
    CHECK_MSG(strstr(out, "does not split"), "%s", out);
}

/* train --checkpoint-every 1 over 2 ranks (MPI processes, or the thread
 * ranks of --devices 2), stopped by SIGTERM (to mpirun, which passes it
 * on) once rank 0's first checkpoint is there; train --resume over 2
 * ranks again: every rank restores the checkpoint, and the model is that
 * of an uninterrupted 2-rank run bit for bit.  With dropout, and batches
 * of 53 of the 902 training molecules: the last batch of every epoch is
 * one molecule, rank 1's slice of it empty (its dropout stream must still
 * move on as rank 0's does, or rank 0's, restored on it, would not be its
 * own).  400 epochs: a 60-epoch run of this small model (0.44 s on 2
 * ranks) could end before the signal came.  Resumed over another number
 * of ranks, it is refused (the slices would differ). */
static void resume_over_ranks(mp_test_result *mp__r, int threads)
{
    const char *bin = getenv("MOLPROP_BIN"), *esol = mp_test_shared("datasets/esol.csv.gz");
    CHECK(bin);
    if (!threads && (shell("command -v mpirun") != 0 || !mp_dist_built_with_mpi()))
        MP_SKIP("no mpirun (Debian: openmpi-bin) or a build without MPI");
    char launch[4000], ref[1300], cut[1300], path[1400], opts[2000];
    if (threads)
        snprintf(launch, sizeof launch, "'%s' train --devices 2 --threads 2", bin);
    else
        snprintf(launch, sizeof launch, MPIRUN " 2 '%s' train --threads 1", bin);
    snprintf(ref, sizeof ref, "%s", tmp(threads ? "ref_t" : "ref_m"));
    snprintf(cut, sizeof cut, "%s", tmp(threads ? "cut_t" : "cut_m"));
    snprintf(opts, sizeof opts, "--data '%s' --epochs 400 --hidden 16 --dropout 0.1 "
             "--batch-size 53 --quiet", esol);
    CHECK_MSG(shell("rm -rf '%s' '%s' && %s %s --save-dir '%s'", ref, cut, launch, opts, ref) ==
              0, "%s", out);
    CHECK_EQ_INT(shell("%s %s --checkpoint-every 1 --save-dir '%s' > '%s.log' 2>&1 & pid=$!; "
                       "n=0; while [ ! -f '%s/checkpoint.mpc' ] && [ $n -lt 6000 ]; do "
                       "sleep 0.01; n=$((n+1)); done; kill -TERM $pid; wait $pid",
                       launch, opts, cut, cut, cut), threads ? 143 : 1);
    snprintf(path, sizeof path, "%s/checkpoint.mpc", cut);
    CHECK_MSG(access(path, F_OK) == 0, "no checkpoint after the stop");
    snprintf(path, sizeof path, "%s/model.mpm", cut);
    CHECK_MSG(access(path, F_OK) != 0, "the run ended before the stop: nothing to resume");
    snprintf(path, sizeof path, "%s.log", cut);
    char *log = mp_test_slurp(path, NULL);
    CHECK_MSG(log && strstr(log, "SIGTERM") && strstr(log, "--resume"), "%s", log);
    mp_free(log);
    /* one process, or 3 ranks, would slice the batches otherwise */
    CHECK(shell("'%s' train --resume '%s' --threads 1 --quiet", bin, cut) != 0);
    CHECK_MSG(strstr(out, "ranks = 2"), "%s", out);
    if (threads) {
        CHECK(shell("'%s' train --resume '%s' --devices 3 --threads 3 --quiet", bin, cut) != 0);
        CHECK_MSG(strstr(out, "ranks = 2, this run has ranks = 3"), "%s", out);
    }
    if (threads)
        snprintf(launch, sizeof launch, "'%s' train --resume '%s' --devices 2 --threads 2", bin,
                 cut);
    else
        snprintf(launch, sizeof launch, MPIRUN " 2 '%s' train --resume '%s' --threads 1", bin,
                 cut);
    CHECK_MSG(shell("%s --quiet", launch) == 0, "%s", out);
    size_t na = 0, nb = 0;
    snprintf(path, sizeof path, "%s/model.mpm", ref);
    char *a = mp_test_slurp(path, &na);
    snprintf(path, sizeof path, "%s/model.mpm", cut);
    char *b = mp_test_slurp(path, &nb);
    int same = a && b && na == nb && memcmp(a, b, na) == 0;
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "the resumed 2-rank model differs from the uninterrupted one");
    snprintf(path, sizeof path, "%s/checkpoint.mpc", cut);
    CHECK_MSG(access(path, F_OK) != 0, "the checkpoint stays after the run ended well");
}

MP_TEST(dist_train_resume_2_mpi_ranks_bitwise)
{
    resume_over_ranks(mp__r, 0);
}

MP_TEST(dist_threads_train_resume_2_ranks_bitwise)
{
    resume_over_ranks(mp__r, 1);
}
