/*
 * test_robust_resume.c - checkpoints and resume on the CPU: a run stopped
 * after an epoch or in the middle of one (the stop flag's poll counter
 * standing in for SIGINT) and resumed ends with the model of the run never
 * stopped, byte for byte; a resume with other options or data is refused
 * naming what differs; a stopped run without a checkpoint leaves nothing.
 */
#include "robust_test.h"
#include "run/checkpoint.h"
#include "run/modelfile.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

mp_train_opts mp_test_robust_opts(const char *backend, int epochs, const char *dir)
{
    mp_train_opts o = mp_train_opts_default();
    o.data_path = mp_test_shared("datasets/esol.csv.gz");
    o.epochs = epochs;
    o.hidden = 32;
    o.threads = 1;
    o.quiet = 1;
    o.backend = backend;
    o.save_dir = dir;
    o.member_jobs = 1;   /* one after another: the stop lands in a known member */
    return o;
}

int mp_test_robust_resume(const mp_train_opts *o, int every, int stop_member, int stop_epoch,
                          int steps_in, const char *ref, const char *cut)
{
    mp_train_result r;
    mp_train_opts a = *o, b = *o;
    char path[1400], path2[1400], names[4096];
    a.save_dir = ref;
    a.checkpoint_every = 0;
    mp_interrupt_clear();
    long p0 = mp_interrupt_polls();
    mp_status st = mp_train(&a, &r);
    RCHECK(st == MP_OK, "straight run: %s", mp_error_message());
    long polls = mp_interrupt_polls() - p0;
    int E = o->epochs, M = o->ensemble_size;
    int resident = o->resident > 0 ||
                   (o->resident < 0 && o->backend && strncmp(o->backend, "cuda", 4) == 0);
    long S = (long)((r.n_train + (size_t)o->batch_size - 1) / (size_t)o->batch_size);
    long q = resident ? 1 : 1 + S;   /* polls per epoch: its start (and each host step) */
    long pre = polls - (long)M * E * q;
    mp_train_result_free(&r);
    RCHECK(pre > 0, "the polls do not add up: %ld in all, %ld per epoch", polls, q);

    /* the last checkpoint before the stop */
    int ck_member = stop_member, ck_epoch = (stop_epoch - 1) / every * every;
    if (ck_epoch == 0) {
        ck_member--;
        ck_epoch = E / every * every;
    }
    RCHECK(ck_member >= 0 && ck_epoch > 0, "the test stops before the first checkpoint");

    b.save_dir = cut;
    b.checkpoint_every = every;
    mp_interrupt_after_polls(pre + ((long)stop_member * E + stop_epoch - 1) * q + steps_in,
                             SIGINT);
    st = mp_train(&b, &r);
    mp_interrupt_clear();
    RCHECK(st == MP_ERR_INTERRUPTED, "the stopped run returned %s: %s", mp_status_name(st),
           mp_error_message());
    RCHECK(strstr(mp_error_message(), "SIGINT") && strstr(mp_error_message(), "--resume"),
           "the message does not say how to go on: %s", mp_error_message());
    mp_test_list_dir(cut, names, sizeof names);
    RCHECK(!strcmp(names, MP_CHECKPOINT_FILE), "the stopped run left %s in %s", names, cut);
    {
        mp_kv *kv = NULL;
        mp_checkpoint ck;
        snprintf(path, sizeof path, "%s/%s", cut, MP_CHECKPOINT_FILE);
        st = mp_checkpoint_read(path, &kv, &ck);
        RCHECK(st == MP_OK, "%s", mp_error_message());
        int km = ck.n_states ? ck.states[ck.n_states - 1].k : -1,
            ke = ck.n_states ? ck.states[ck.n_states - 1].epoch : -1;
        mp_checkpoint_free(&ck);
        mp_kv_free(kv);
        RCHECK(km == ck_member && ke == ck_epoch, "the checkpoint is of member %d epoch %d, "
               "expected member %d epoch %d", km, ke, ck_member, ck_epoch);
    }

    b.resume = cut;
    b.save_dir = NULL;   /* resuming saves where it resumes */
    st = mp_train(&b, &r);
    RCHECK(st == MP_OK, "resuming: %s", mp_error_message());
    mp_train_result_free(&r);
    snprintf(path, sizeof path, "%s/model.mpm", ref);
    snprintf(path2, sizeof path2, "%s/model.mpm", cut);
    RCHECK(mp_test_same_file(path, path2), "the resumed model differs from the straight run's");
    mp_test_list_dir(cut, names, sizeof names);
    RCHECK(!strstr(names, MP_CHECKPOINT_FILE) && !strstr(names, ".tmp."),
           "after the resumed run %s holds %s", cut, names);
    return 1;
fail:
    mp_interrupt_clear();
    return 0;
}

MP_TEST(robust_resume_after_an_epoch_is_bitwise)
{
    mp_train_opts o = mp_test_robust_opts("cpu", 5, NULL);
    CHECK(mp_test_robust_resume(&o, 2, 0, 4, 0, tmp("ref-a"), tmp("cut-a")));
}

MP_TEST(robust_resume_mid_epoch_is_bitwise)
{
    /* stopped 7 steps into epoch 4: the resumed run redoes epoch 3's
     * checkpoint onwards */
    mp_train_opts o = mp_test_robust_opts("cpu", 5, NULL);
    CHECK(mp_test_robust_resume(&o, 3, 0, 4, 7, tmp("ref-b"), tmp("cut-b")));
}

MP_TEST(robust_resume_ensemble_with_dropout)
{
    /* member 1 of 2 stopped in its epoch 2: member 0 comes from the
     * checkpoint, member 1 from its epoch-1 state, dropout stream included */
    mp_train_opts o = mp_test_robust_opts("cpu", 3, NULL);
    o.ensemble_size = 2;
    o.dropout = 0.1;
    CHECK(mp_test_robust_resume(&o, 1, 1, 2, 3, tmp("ref-c"), tmp("cut-c")));
}

MP_TEST(robust_resume_resident_source_and_ffn)
{
    /* the resident source on the cpu (its slot classes are part of the
     * checkpoint) and an FFN on Morgan bits */
    mp_train_opts o = mp_test_robust_opts("cpu", 4, NULL);
    o.resident = 1;
    o.slot_classes = 4;
    CHECK(mp_test_robust_resume(&o, 2, 0, 4, 0, tmp("ref-d"), tmp("cut-d")));
    mp_train_opts f = mp_test_robust_opts("cpu", 4, NULL);
    f.model = MP_MODEL_FFN;
    f.features = MP_FEAT_MORGAN;
    CHECK(mp_test_robust_resume(&f, 1, 0, 3, 2, tmp("ref-e"), tmp("cut-e")));
}

/* A checkpointed run of 4 epochs stopped in epoch 3, for the refusals
 * (--gpu-share `share`: a key of its identity past 1, even on the cpu). */
static int stopped_run(const char *dir, mp_train_opts *o, int share)
{
    *o = mp_test_robust_opts("cpu", 4, dir);
    o->checkpoint_every = 1;
    o->gpu_share = share;
    mp_train_result r;
    long p0 = mp_interrupt_polls();
    mp_interrupt_clear();
    mp_train_opts probe = *o;
    probe.epochs = 1;
    probe.save_dir = tmp("probe");
    probe.checkpoint_every = 0;
    if (mp_train(&probe, &r) != MP_OK)
        return 0;
    /* one epoch's run: the polls before training and one epoch's */
    long one = mp_interrupt_polls() - p0;
    long S = (long)((r.n_train + 49) / 50);
    mp_train_result_free(&r);
    mp_interrupt_after_polls(one + 2 * (1 + S), SIGTERM);   /* epoch 3's start */
    mp_status st = mp_train(o, &r);
    mp_interrupt_clear();
    return st == MP_ERR_INTERRUPTED;
}

MP_TEST(robust_resume_refuses_what_differs)
{
    const char *dir = tmp("refuse");
    mp_train_opts o, x;
    mp_train_result r;
    CHECK(stopped_run(dir, &o, 0));
    CHECK(strstr(mp_error_message(), "SIGTERM") != NULL);

    x = o;
    x.resume = dir;
    x.epochs = 6;
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "epochs = 4") && strstr(mp_error_message(), "epochs = 6"));
    x = o;
    x.resume = dir;
    x.hidden = 48;
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "hidden") != NULL);
    x = o;
    x.resume = dir;
    x.backend = "ref";
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "backend") != NULL);
    x = o;
    x.resume = dir;
    x.gpu_share = 4;
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "gpu-share = (none)") != NULL);
    x = o;
    x.resume = dir;
    x.save_dir = tmp("elsewhere");
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);

    /* other data under the same options: refused once read */
    const char *other = tmp("other.csv");
    FILE *fp = fopen(other, "w");
    CHECK(fp != NULL);
    fputs("smiles,y\nCCO,1\nCCN,2\nCCC,3\nc1ccccc1,4\nCCCl,5\nCOC,6\nCC=O,7\nC#N,8\n"
          "CCOC,9\nOCCO,1\n", fp);
    fclose(fp);
    x = o;
    x.resume = dir;
    x.data_path = other;
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "rows = 1128") != NULL);

    /* the refused tries left the checkpoint; `train --resume D` alone: the
     * options come back from it (threads and quiet may differ) */
    x = mp_train_opts_default();
    x.threads = 2;
    x.quiet = 1;
    mp_kv *keep = NULL;
    CHECK_OK(mp_train_opts_from_checkpoint(dir, &x, &keep));
    int same = x.hidden == 32 && x.epochs == 4 && x.threads == 2 && x.task == -1 &&
               !strcmp(x.data_path, o.data_path) && !strcmp(x.backend, "cpu") &&
               x.resume == dir && !x.columns.smiles_column && x.split.sizes[0] == 0.8;
    mp_status st = same ? mp_train(&x, &r) : MP_ERR_INTERNAL;
    mp_kv_free(keep);
    CHECK(same);
    CHECK_OK(st);
    mp_train_result_free(&r);
    /* finished: nothing left to resume (x's strings went with keep) */
    x = o;
    x.resume = dir;
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "the run finished") != NULL);
}

/* A run under --gpu-share 3 (hpopt's trials side by side) resumes under
 * it: `train --resume D` alone restores it, another share is refused. */
MP_TEST(robust_resume_keeps_the_gpu_share)
{
    const char *dir = tmp("share");
    mp_train_opts o, x;
    mp_train_result r;
    CHECK(stopped_run(dir, &o, 3));
    x = o;
    x.resume = dir;
    x.gpu_share = 0;
    CHECK_EQ_INT(mp_train(&x, &r), MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "gpu-share") != NULL);
    x = mp_train_opts_default();
    x.quiet = 1;
    mp_kv *keep = NULL;
    CHECK_OK(mp_train_opts_from_checkpoint(dir, &x, &keep));
    int share = x.gpu_share;
    x.resume = dir;
    mp_status st = share == 3 ? mp_train(&x, &r) : MP_ERR_INTERNAL;
    mp_kv_free(keep);
    CHECK_EQ_INT(share, 3);
    CHECK_OK(st);
    mp_train_result_free(&r);
}

MP_TEST(robust_interrupt_without_checkpoint_leaves_nothing)
{
    /* stopped in featurization, and in training without checkpoints: the
     * save directory this run made is gone, no temp file anywhere */
    const char *dir = tmp("vanish");
    struct stat sb;
    mp_train_opts o = mp_test_robust_opts("cpu", 3, dir);
    mp_train_result r;
    /* ESOL's 1128 molecules poll once each in featurization, then 3 epochs
     * of 1 + 19 polls: these stop in featurization and in epochs 1 and 3 */
    static const long stops[] = { 50, 600, 1140, 1180 };
    for (int i = 0; i < 4; i++) {
        long at = stops[i];
        mp_interrupt_after_polls(at, SIGINT);
        mp_status st = mp_train(&o, &r);
        mp_interrupt_clear();
        CHECK_EQ_INT(st, MP_ERR_INTERRUPTED);
        CHECK_MSG(stat(dir, &sb) != 0, "poll %ld: the save directory was left", at);
    }
    /* a directory that was there before stays (and holds nothing new) */
    CHECK(mkdir(dir, 0777) == 0);
    mp_interrupt_after_polls(1160, SIGINT);
    mp_status st = mp_train(&o, &r);
    mp_interrupt_clear();
    CHECK_EQ_INT(st, MP_ERR_INTERRUPTED);
    char names[4096];
    mp_test_list_dir(dir, names, sizeof names);
    CHECK_MSG(!strcmp(names, ""), "left %s", names);
}

MP_TEST(robust_resume_refuses_damaged_checkpoint)
{
    const char *dir = tmp("damaged");
    mp_train_opts o, x;
    mp_train_result r;
    CHECK(stopped_run(dir, &o, 0));
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, MP_CHECKPOINT_FILE);
    size_t n;
    char *good = mp_test_slurp(path, &n);
    CHECK(good != NULL && n > 100);

    /* one byte flipped: the CRC says so, naming the file */
    good[n / 2] ^= 0x40;
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    fwrite(good, 1, n, fp);
    fclose(fp);
    good[n / 2] ^= 0x40;
    x = o;
    x.resume = dir;
    mp_status st = mp_train(&x, &r);
    CHECK_EQ_INT(st, MP_ERR_CHECKSUM);
    CHECK(strstr(mp_error_message(), path) != NULL);

    /* a checkpoint that adds up but whose epoch order indexes rows outside
     * the training set: refused before any step reads them */
    mp_modelfile *mf = NULL;
    st = mp_modelfile_parse(&mf, good, n, path);
    mp_free(good);
    CHECK_OK(st);
    for (size_t i = 0; i < mf->n_tensors; i++)
        if (!strcmp(mf->tensors[i].name, "order")) {
            uint32_t *w = (uint32_t *)mf->tensors[i].data;
            w[0] = 1000000;
        }
    st = mp_modelfile_write(path, mf->header, mf->tensors, mf->n_tensors);
    mp_modelfile_free(mf);
    CHECK_OK(st);
    st = mp_train(&x, &r);
    CHECK_EQ_INT(st, MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "epoch order") != NULL, "%s", mp_error_message());
}
