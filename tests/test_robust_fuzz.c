/*
 * test_robust_fuzz.c - the fuzz corpora replayed on every test run: each
 * file of tests/fuzz/corpus/<harness>/ (the seeds and every input a fuzzing
 * campaign found a fault with, named regress-*) goes through the same entry
 * function libFuzzer drives (tests/fuzz/fuzz.h), here compiled without
 * libFuzzer.  A harness that finds a fault aborts, which fails the suite.
 */
#include "test.h"

#include "fuzz/fuzz_cache.c"
#include "fuzz/fuzz_cli.c"
#include "fuzz/fuzz_config.c"
#include "fuzz/fuzz_csv.c"
#include "fuzz/fuzz_modelfile.c"
#include "fuzz/fuzz_smiles.c"

#include <dirent.h>

/* Runs every file of tests/fuzz/corpus/<name> through fn; the count. */
static int replay(const char *name, int (*fn)(const uint8_t *, size_t), int *n_files)
{
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
    DIR *d = opendir(dir);
    *n_files = 0;
    if (!d) {
        fprintf(stdout, "    no corpus at %s (run the tests from the checkout)\n", dir);
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        char *bytes = mp_test_slurp(path, &len);
        if (!bytes) {
            fprintf(stdout, "    cannot read %s\n", path);
            closedir(d);
            return 0;
        }
        fn((const uint8_t *)bytes, len);
        mp_free(bytes);
        mp_error_clear();
        (*n_files)++;
    }
    closedir(d);
    return 1;
}

#define REPLAY_TEST(name, fn)                                                  \
    MP_TEST(robust_fuzz_corpus_##name)                                         \
    {                                                                          \
        int n = 0;                                                             \
        long live = mp_alloc_live();                                           \
        CHECK(replay(#name, fn, &n));                                          \
        CHECK_MSG(n >= 5, "only %d inputs in tests/fuzz/corpus/%s", n, #name); \
        CHECK_EQ_INT(mp_alloc_live(), live);                                   \
    }

REPLAY_TEST(csv, mp_fuzz_csv)
REPLAY_TEST(smiles, mp_fuzz_smiles)
REPLAY_TEST(modelfile, mp_fuzz_modelfile)
REPLAY_TEST(cache, mp_fuzz_cache)
REPLAY_TEST(config, mp_fuzz_config)
REPLAY_TEST(cli, mp_fuzz_cli)
