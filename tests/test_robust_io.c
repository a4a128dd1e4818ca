/*
 * test_robust_io.c - write failures: every output operation of a training
 * run (its directory, checkpoint, model.mpm, metrics.json, split.tsv), of a
 * prediction, of a feature cache and of a dump made to fail in turn (a full
 * disk, an I/O error, a read-only place: mp_io_fail_after): each run fails
 * with a message naming the file, leaves no temp file and nothing
 * half-written; and a directory removed under a running train or predict
 * (the real thing, through the command line).
 */
#include "test.h"
#include "data/dataset.h"
#include "featurize/featurize.h"
#include "molprop.h"
#include "run/predict.h"
#include "run/trainer.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* The first n rows of ESOL as a small CSV of our own. */
static const char *small_csv(int n)
{
    static char path[1300];
    static int made;
    if (made)
        return path;
    snprintf(path, sizeof path, "%s", tmp("small.csv"));
    mp_dataset *d = NULL;
    if (mp_dataset_load(&d, mp_test_shared("datasets/esol.csv.gz"), NULL) != MP_OK)
        return NULL;
    FILE *fp = fopen(path, "w");
    if (!fp)
        return NULL;
    fprintf(fp, "smiles,%s\n", d->task_names[0]);
    for (int i = 0; i < n && (size_t)i < d->n_rows; i++)
        fprintf(fp, "%s,%.17g\n", d->smiles[i], d->targets[i]);
    fclose(fp);
    mp_dataset_free(d);
    made = 1;
    return path;
}

MP_TEST(robust_io_train_each_write_failing)
{
    const char *csv = small_csv(120), *dir = tmp("io-train");
    CHECK(csv != NULL);
    mp_train_opts o = mp_train_opts_default();
    o.data_path = csv;
    o.epochs = 2;
    o.hidden = 16;
    o.threads = 1;
    o.quiet = 1;
    o.save_dir = dir;
    o.checkpoint_every = 1;
    char ck[1400];
    snprintf(ck, sizeof ck, "%s/checkpoint.mpc", dir);
    int done = 0, n_fail = 0;
    for (long n = 0; n < 200 && !done; n++) {
        mp_train_result r;
        mp_io_fail_after(n, n % 3 == 0 ? ENOSPC : n % 3 == 1 ? EIO : EROFS);
        mp_status st = mp_train(&o, &r);
        mp_io_fail_after(-1, 0);
        if (st == MP_OK) {
            mp_train_result_free(&r);
            done = 1;
            break;
        }
        n_fail++;
        CHECK_MSG(st == MP_ERR_IO, "op %ld: %s: %s", n, mp_status_name(st), mp_error_message());
        CHECK_MSG(strstr(mp_error_message(), dir) != NULL, "op %ld: no path in: %s", n,
                  mp_error_message());
        CHECK_MSG(mp_test_count_in(mp_test_tmpdir(), ".tmp.") == 0, "op %ld left a temp file", n);
        /* either nothing, or the directory with the last good checkpoint
         * (which a resume continues) */
        if (exists(dir)) {
            CHECK_MSG(exists(ck) && mp_test_count_in(dir, "") == 1, "op %ld left more than a "
                      "checkpoint in %s", n, dir);
            CHECK(unlink(ck) == 0 && rmdir(dir) == 0);
        }
    }
    CHECK(done);
    CHECK_MSG(n_fail >= 10, "only %d operations to fail", n_fail);
    /* the run that went through: its three outputs, no checkpoint */
    CHECK(mp_test_count_in(dir, "") == 3 && !exists(ck));
}

MP_TEST(robust_io_predict_each_write_failing)
{
    const char *csv = small_csv(120), *dir = tmp("io-pred"), *model = tmp("io-pred/m");
    CHECK(csv != NULL);
    CHECK(mkdir(dir, 0777) == 0);
    mp_train_opts o = mp_train_opts_default();
    o.data_path = csv;
    o.epochs = 1;
    o.hidden = 16;
    o.threads = 1;
    o.quiet = 1;
    o.save_dir = model;
    mp_train_result r;
    CHECK_OK(mp_train(&o, &r));
    mp_train_result_free(&r);
    char mpm[1400], out[1400];
    snprintf(mpm, sizeof mpm, "%s/model.mpm", model);
    snprintf(out, sizeof out, "%s/p.csv", dir);
    mp_predict_opts po = { .model_path = mpm, .data_path = csv, .out_path = out, .threads = 1,
                           .quiet = 1, .chunk_rows = 16, .uncertainty = 0 };
    int done = 0;
    for (long n = 0; n < 100 && !done; n++) {
        mp_predict_stats ps;
        mp_io_fail_after(n, n % 2 ? EIO : ENOSPC);
        mp_status st = mp_predict_file(&po, &ps);
        mp_io_fail_after(-1, 0);
        if (st == MP_OK) {
            done = 1;
            break;
        }
        CHECK_MSG(st == MP_ERR_IO, "op %ld: %s", n, mp_error_message());
        CHECK_MSG(strstr(mp_error_message(), out) != NULL, "op %ld: %s", n, mp_error_message());
        CHECK_MSG(!exists(out) && mp_test_count_in(dir, ".tmp.") == 0, "op %ld left output", n);
    }
    CHECK(done && exists(out));
}

MP_TEST(robust_io_cache_and_dump_each_write_failing)
{
    const char *csv = small_csv(120), *dir = tmp("io-feat");
    CHECK(csv != NULL);
    CHECK(mkdir(dir, 0777) == 0);
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    CHECK_OK(mp_dataset_load(&d, csv, NULL));
    mp_featurize_opts fo = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 0,
                             .scaffolds = 1, .n_threads = 1 };
    mp_status st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo);
    if (st != MP_OK) {
        mp_dataset_free(d);
        CHECK_OK(st);
    }
    char cache[1400], dump[1400];
    snprintf(cache, sizeof cache, "%s/f.mpf", dir);
    snprintf(dump, sizeof dump, "%s/dump", dir);
    int ok = 1;
    for (int what = 0; what < 3 && ok; what++) {
        int done = 0;
        for (long n = 0; n < 100 && !done && ok; n++) {
            mp_io_fail_after(n, ENOSPC);
            st = what == 0 ? mp_features_save(f, cache)
                           : mp_features_dump(f, (const char *const *)d->smiles, dump, what == 2);
            mp_io_fail_after(-1, 0);
            if (st == MP_OK) {
                done = 1;
                break;
            }
            const char *name = what == 0 ? cache : dump;
            ok = st == MP_ERR_IO && strstr(mp_error_message(), name) != NULL &&
                 mp_test_count_in(dir, ".tmp.") == 0 && (what > 0 || !exists(cache)) &&
                 (what == 0 || mp_test_count_in(dump, ".tsv") <= 0);
            if (!ok)
                fprintf(stdout, "    %s, op %ld: %s: %s\n", what == 0 ? "cache" : "dump", n,
                        mp_status_name(st), mp_error_message());
        }
        ok = ok && done;
        if (what > 0) {   /* the next dump starts from an empty directory */
            char cmd[1500];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dump);
            ok = ok && system(cmd) == 0;
        }
    }
    mp_features_free(f);
    mp_dataset_free(d);
    CHECK(ok);
    /* the cache that went through reads back */
    CHECK_OK(mp_features_load(&f, cache));
    mp_features_free(f);
}

/* `molprop ARGS` in the background; DIR (a directory or file it makes) is
 * removed as soon as it appears, the exit status and output kept. */
static int cli_remove_when_seen(char *out, size_t cap, const char *watch, const char *rm,
                                const char *args)
{
    const char *bin = getenv("MOLPROP_BIN");
    if (!bin)
        return -1;
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "'%s' %s > '%s/bg.log' 2>&1 & pid=$!; i=0; "
             "while [ ! -e %s ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; "
             "rm -rf '%s'; wait $pid; echo \"status=$?\"; cat '%s/bg.log'",
             bin, args, mp_test_tmpdir(), watch, rm, mp_test_tmpdir());
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    pclose(p);
    return 0;
}

MP_TEST(robust_io_output_directory_removed_mid_run)
{
    static char out[65536];
    const char *dir = tmp("removed-train");
    char args[4096];
    snprintf(args, sizeof args, "train --data '%s' --epochs 8 --hidden 32 --threads 1 --quiet "
             "--save-dir '%s'", mp_test_shared("datasets/esol.csv.gz"), dir);
    CHECK(cli_remove_when_seen(out, sizeof out, dir, dir, args) == 0);
    CHECK_MSG(strstr(out, "status=1") && strstr(out, dir) && strstr(out, "model.mpm"),
              "train with its directory removed: %s", out);
    CHECK(!exists(dir));

    /* predict: the output's directory (and the temp file in it) removed
     * while it runs; the rename at the end names the file */
    const char *csv = tmp("many.csv"), *pdir = tmp("removed-pred"), *mdir = tmp("removed-model");
    FILE *fp = fopen(csv, "w");
    CHECK(fp != NULL);
    fputs("smiles\n", fp);
    for (int i = 0; i < 40000; i++)
        fputs(i % 2 ? "CCOc1ccccc1\n" : "CC(=O)Nc1ccc(O)cc1\n", fp);
    fclose(fp);
    CHECK(mkdir(pdir, 0777) == 0);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 16 "
                             "--quiet --save-dir '%s'", small_csv(120), mdir), 0);
    char pout[1400], watch[1500];
    snprintf(pout, sizeof pout, "%s/p.csv", pdir);
    snprintf(watch, sizeof watch, "'%s'/p.csv.tmp.*", pdir);
    snprintf(args, sizeof args, "predict --model '%s/model.mpm' --data '%s' --out '%s' "
             "--threads 1", mdir, csv, pout);
    CHECK(cli_remove_when_seen(out, sizeof out, watch, pdir, args) == 0);
    CHECK_MSG(strstr(out, "status=1") && strstr(out, pout) &&
              strstr(out, "directory removed"), "predict with its directory removed: %s", out);
    CHECK(!exists(pdir));
}

/* featurize --out F.mpf --dump DIR: the dump waits under its temporary names
 * until the cache is written, so a failure at any write (of the dump or of
 * the cache after it) publishes neither, and the dump's folders (two
 * levels, made by the run) go too. */
MP_TEST(robust_io_featurize_out_and_dump_all_or_none)
{
    const char *csv = small_csv(120), *dir = tmp("io-feat-both");
    CHECK(csv != NULL);
    CHECK(mkdir(dir, 0777) == 0);
    char cache[1400], top[1400], dump[1400];
    snprintf(cache, sizeof cache, "%s/f.mpf", dir);
    snprintf(top, sizeof top, "%s/d", dir);
    snprintf(dump, sizeof dump, "%s/d/sub", dir);
    mp_options *o;
    CHECK_OK(mp_options_create(&o, "featurize"));
    mp_status st = MP_OK;
    (void)((st = mp_options_set(o, "data", csv)) || (st = mp_options_set(o, "out", cache)) ||
           (st = mp_options_set(o, "dump", dump)) || (st = mp_options_set(o, "threads", "1")) ||
           (st = mp_options_set(o, "no-descriptors", NULL)));
    if (st)
        mp_options_free(o);
    CHECK_OK(st);
    int ok = 1, done = 0, failures = 0;
    for (long n = 0; n < 200 && ok && !done; n++) {
        mp_summary *s = NULL;
        mp_io_fail_after(n, ENOSPC);
        st = mp_run_featurize(o, &s);
        mp_io_fail_after(-1, 0);
        mp_summary_free(s);
        if (st == MP_OK) {
            done = 1;
            break;
        }
        failures++;
        ok = st == MP_ERR_IO && !exists(cache) && !exists(top) &&
             mp_test_count_in(dir, ".tmp.") == 0;
        if (!ok)
            fprintf(stdout, "    op %ld: %s: %s (cache %s, dump folder %s)\n", n,
                    mp_status_name(st), mp_error_message(), exists(cache) ? "left" : "gone",
                    exists(top) ? "left" : "gone");
    }
    mp_options_free(o);
    CHECK(ok && done);
    CHECK(failures > 6);   /* the dump's files and the cache each failed in turn */
    CHECK(exists(cache) && mp_test_count_in(dump, ".tsv") == 4);
}
