/*
 * test_members.c - ensemble members side by side on the cpu (run/members.c,
 * `train --member-jobs K`): each member is bit for bit the model it is when
 * the members train one after another (D-MPNN with dropout, the resident
 * source, an FFN); a side-by-side run stopped mid-way holds every member's
 * state in its checkpoint and resumes, with another K, to the straight
 * run's model byte for byte; a failing write ends the run with its own
 * error, not another member's; the CLI's per-member lines.  The same
 * checks on the GPU: test_gpu_members.c.
 */
#include "members_test.h"
#include "run/checkpoint.h"
#include "run/members.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int same_model(const char *dir_a, const char *dir_b)
{
    char a[1300], b[1300];
    snprintf(a, sizeof a, "%s/model.mpm", dir_a);
    snprintf(b, sizeof b, "%s/model.mpm", dir_b);
    return mp_test_same_file(a, b);
}

int mp_test_members_equal(const mp_train_opts *o, int jobs, int threads, const char *seq,
                          const char *par)
{
    mp_train_opts a = *o, b = *o;
    mp_train_result ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    a.member_jobs = 1;
    a.save_dir = seq;
    b.member_jobs = jobs;
    b.save_dir = par;
    if (threads > 0)
        b.threads = threads;
    mp_status st = mp_train(&a, &ra);
    RCHECK(st == MP_OK, "members one after another: %s", mp_error_message());
    st = mp_train(&b, &rb);
    RCHECK(st == MP_OK, "members %d side by side: %s", jobs, mp_error_message());
    RCHECK(ra.val_mean == rb.val_mean && ra.test_mean == rb.test_mean,
           "val %.17g / %.17g, test %.17g / %.17g in turn / side by side", ra.val_mean,
           rb.val_mean, ra.test_mean, rb.test_mean);
    for (int k = 0; k < o->ensemble_size; k++)
        RCHECK(ra.best_epoch[k] == rb.best_epoch[k], "member %d: best epoch %d / %d", k,
               ra.best_epoch[k], rb.best_epoch[k]);
    RCHECK(same_model(seq, par), "the models of %s and %s differ", seq, par);
    mp_train_result_free(&ra);
    mp_train_result_free(&rb);
    return 1;
fail:
    mp_train_result_free(&ra);
    mp_train_result_free(&rb);
    return 0;
}

int mp_test_members_resume(const mp_train_opts *o, int jobs, int resume_jobs, int min_states,
                           const char *ref, const char *cut)
{
    mp_train_result r;
    memset(&r, 0, sizeof r);
    mp_train_opts a = *o, b = *o;
    char names[4096], path[1400];
    a.save_dir = ref;
    a.member_jobs = jobs;
    a.checkpoint_every = 0;
    mp_interrupt_clear();
    long p0 = mp_interrupt_polls();
    mp_status st = mp_train(&a, &r);
    RCHECK(st == MP_OK, "straight run: %s", mp_error_message());
    long polls = mp_interrupt_polls() - p0;
    /* the training's polls: per member epoch its start and each host step
     * (test_robust_resume.c); those before are reading and featurizing */
    int resident = o->resident > 0 ||
                   (o->resident < 0 && o->backend && strncmp(o->backend, "cuda", 4) == 0);
    long S = (long)((r.n_train + (size_t)o->batch_size - 1) / (size_t)o->batch_size);
    long train_polls = (long)o->ensemble_size * o->epochs * (resident ? 1 : 1 + S);
    long pre = polls - train_polls;
    mp_train_result_free(&r);
    RCHECK(pre > 0, "the polls do not add up: %ld in all, %ld training", polls, train_polls);

    b.save_dir = cut;
    b.member_jobs = jobs;
    b.checkpoint_every = 1;
    mp_interrupt_after_polls(pre + train_polls * 3 / 5, SIGINT);
    st = mp_train(&b, &r);
    mp_interrupt_clear();
    RCHECK(st == MP_ERR_INTERRUPTED, "the stopped run returned %s: %s", mp_status_name(st),
           mp_error_message());
    RCHECK(strstr(mp_error_message(), "SIGINT") && strstr(mp_error_message(), "--resume") &&
           strstr(mp_error_message(), "of member"),
           "the message does not say where the run stands: %s", mp_error_message());
    mp_test_list_dir(cut, names, sizeof names);
    RCHECK(!strcmp(names, MP_CHECKPOINT_FILE), "the stopped run left %s in %s", names, cut);
    {
        mp_kv *kv = NULL;
        mp_checkpoint ck;
        snprintf(path, sizeof path, "%s/%s", cut, MP_CHECKPOINT_FILE);
        st = mp_checkpoint_read(path, &kv, &ck);
        RCHECK(st == MP_OK, "%s", mp_error_message());
        int ns = ck.n_states, nd = ck.n_done;
        mp_checkpoint_free(&ck);
        mp_kv_free(kv);
        RCHECK(ns >= min_states && nd + ns <= o->ensemble_size,
               "the checkpoint holds %d members in training and %d done (expected %d in "
               "training at least)", ns, nd, min_states);
    }
    b.resume = cut;
    b.save_dir = NULL;
    b.member_jobs = resume_jobs;
    long p1 = mp_interrupt_polls();
    st = mp_train(&b, &r);
    RCHECK(st == MP_OK, "resuming: %s", mp_error_message());
    mp_train_result_free(&r);
    /* it continued from the states (a member started afresh ends with the
     * same model, so the model alone would not tell) */
    long resumed = mp_interrupt_polls() - p1 - pre;
    RCHECK(resumed <= train_polls * 4 / 5, "the resumed run trained %ld of %ld polls' worth: "
           "it did not continue from the checkpoint", resumed, train_polls);
    RCHECK(same_model(ref, cut), "the resumed model differs from the straight run's");
    mp_test_list_dir(cut, names, sizeof names);
    RCHECK(!strstr(names, MP_CHECKPOINT_FILE) && !strstr(names, ".tmp."),
           "after the resumed run %s holds %s", cut, names);
    return 1;
fail:
    mp_interrupt_clear();
    return 0;
}

static mp_train_opts small_opts(int epochs, int members)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = epochs;
    o.hidden = 32;
    o.threads = 1;
    o.quiet = 1;
    o.ensemble_size = members;
    return o;
}

MP_TEST(members_jobs_auto)
{
    mp_backend *cpu = NULL;
    CHECK_OK(mp_backend_open(&cpu, "cpu"));
    mp_backend dev = *cpu;
    dev.host_memory = 0;
    CHECK_EQ_INT(mp_members_jobs(0, 5, cpu, 2), 2);    /* min(N, threads) */
    CHECK_EQ_INT(mp_members_jobs(0, 3, cpu, 16), 3);
    CHECK_EQ_INT(mp_members_jobs(0, 5, &dev, 1), 5);   /* all on a device */
    CHECK_EQ_INT(mp_members_jobs(4, 5, cpu, 1), 4);    /* as asked ...    */
    CHECK_EQ_INT(mp_members_jobs(9, 5, &dev, 1), 5);   /* ... at most N   */
    CHECK_EQ_INT(mp_members_jobs(0, 0, cpu, 4), 1);
    mp_backend_close(cpu);
}

MP_TEST(members_side_by_side_equal_in_turn)
{
    /* dropout: each member's own keyed stream; 3 members on 2 threads (one
     * each, the third waits for a free worker), then 2 on 3 threads: the
     * worker that runs out of members first gives its threads to the one
     * still training, whose member goes on with more threads mid-run */
    mp_train_opts o = small_opts(3, 3);
    o.dropout = 0.1;
    CHECK(mp_test_members_equal(&o, 3, 2, tmp("m-seq-a"), tmp("m-par-a")));
    long given = mp_members_threads_given();
    CHECK(mp_test_members_equal(&o, 2, 3, tmp("m-seq-b"), tmp("m-par-b")));
    CHECK_MSG(mp_members_threads_given() > given, "no worker gave its threads away");
}

MP_TEST(members_side_by_side_resident_and_ffn)
{
    mp_train_opts o = small_opts(3, 2);
    o.resident = 1;   /* the resident source on the cpu: its own slots per member */
    CHECK(mp_test_members_equal(&o, 2, 2, tmp("m-seq-c"), tmp("m-par-c")));
    mp_train_opts f = small_opts(3, 3);
    f.model = MP_MODEL_FFN;
    f.features = MP_FEAT_MORGAN;
    CHECK(mp_test_members_equal(&f, 3, 2, tmp("m-seq-d"), tmp("m-par-d")));
}

MP_TEST(members_side_by_side_resume_bitwise)
{
    /* 3 members at once, stopped after 3/5 of the run's polls: each has a
     * state of its own in the checkpoint; resumed 2 at a time */
    mp_train_opts o = small_opts(4, 3);
    o.dropout = 0.1;
    o.threads = 2;
    CHECK(mp_test_members_resume(&o, 3, 2, 2, tmp("m-ref-e"), tmp("m-cut-e")));
}

MP_TEST(members_side_by_side_write_failures)
{
    /* every failing checkpoint write ends the run with that write's error
     * (not the "another member failed" of the members it stops), and
     * leaves no temporary file */
    mp_train_opts o = small_opts(2, 2);
    o.hidden = 16;
    o.member_jobs = 2;
    o.threads = 2;
    o.checkpoint_every = 1;
    const char *dir = tmp("io-members");
    o.save_dir = dir;
    char ck[1400];
    snprintf(ck, sizeof ck, "%s/%s", dir, MP_CHECKPOINT_FILE);
    int n_fail = 0;
    for (long n = 0; n < 6; n++) {
        mp_train_result r;
        mp_io_fail_after(n, ENOSPC);
        mp_status st = mp_train(&o, &r);
        mp_io_fail_after(-1, 0);
        if (st == MP_OK) {
            mp_train_result_free(&r);
            break;
        }
        n_fail++;
        CHECK_MSG(st == MP_ERR_IO, "op %ld: %s: %s", n, mp_status_name(st), mp_error_message());
        CHECK_MSG(strstr(mp_error_message(), dir) != NULL, "op %ld: no path in: %s", n,
                  mp_error_message());
        char names[4096];
        mp_test_list_dir(dir, names, sizeof names);
        CHECK_MSG(!strstr(names, ".tmp."), "op %ld left %s", n, names);
        (void)unlink(ck);
        (void)rmdir(dir);
    }
    CHECK_MSG(n_fail >= 4, "only %d writes failed", n_fail);
}

MP_TEST(members_cli_lines_per_member)
{
    char out[16384];
    const char *dir = tmp("cli-members");
    int rc = mp_test_cli(out, sizeof out, "train --data '%s' --epochs 2 --hidden 16 --threads 2 "
                         "--ensemble-size 3 --member-jobs 2 --save-dir '%s'",
                         mp_test_shared("datasets/esol.csv.gz"), dir);
    CHECK_MSG(rc == 0, "train: %s", out);
    CHECK_MSG(strstr(out, "ensemble: 3 members, 2 side by side"), "no start line in: %s", out);
    for (int k = 1; k <= 3; k++) {
        char line[64];
        snprintf(line, sizeof line, "member %d/3 epoch 2/2: loss", k);
        CHECK_MSG(strstr(out, line), "no '%s' in: %s", line, out);
        snprintf(line, sizeof line, "member %d/3 done: best epoch", k);
        CHECK_MSG(strstr(out, line), "no '%s' in: %s", line, out);
    }
    rc = mp_test_cli(out, sizeof out, "train --data '%s' --member-jobs 0",
                     mp_test_shared("datasets/esol.csv.gz"));
    CHECK_MSG(rc != 0 && strstr(out, "member-jobs"), "--member-jobs 0: %s", out);
}
