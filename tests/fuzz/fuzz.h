/*
 * fuzz.h - the fuzz harnesses' entry points and what they share.
 *
 * Each harness (fuzz_<name>.c) is one function mp_fuzz_<name>(data, size)
 * that feeds the bytes to a parser or loader and checks what comes back:
 * every input must end in MP_OK or a status with a message, never a crash,
 * a hang, a leak (the allocation hook's live count must come back to where
 * it was) or a broken invariant.  Built two ways:
 *   make fuzz         clang -fsanitize=fuzzer,address,undefined, with
 *                     -DMP_FUZZ_MAIN: LLVMFuzzerTestOneInput calls the entry
 *                     (build-fuzz/fuzz_<name>; tests/fuzz/README.md)
 *   the test suite    tests/test_robust_fuzz.c includes the harnesses and
 *                     replays every file of tests/fuzz/corpus/<name>/
 *                     through the same entry (seconds, in CI, no clang)
 */
#ifndef MP_FUZZ_H
#define MP_FUZZ_H

#include "core/core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mp_fuzz_csv(const uint8_t *data, size_t size);
int mp_fuzz_smiles(const uint8_t *data, size_t size);
int mp_fuzz_modelfile(const uint8_t *data, size_t size);
int mp_fuzz_cache(const uint8_t *data, size_t size);
int mp_fuzz_config(const uint8_t *data, size_t size);
int mp_fuzz_cli(const uint8_t *data, size_t size);

/* A path of this process for scratch file `tag` ("in.csv"), under
 * $TMPDIR (default /tmp); the same path on every call with that tag. */
static inline const char *mp_fuzz_path(const char *tag, char *buf, size_t cap)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/molprop-fuzz-%ld-%s", t && *t ? t : "/tmp", (long)getpid(), tag);
    return buf;
}

/* Writes n bytes to path (replacing it); 0 on failure. */
static inline int mp_fuzz_write(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    int ok = fwrite(data, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* A broken invariant or a leak: print and abort, so libFuzzer records the
 * input (and the replay test dies loudly). */
#define MP_FUZZ_CHECK(c, ...)                                                  \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__,      \
                    __LINE__, #c);                                             \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

#ifdef MP_FUZZ_MAIN
#define MP_FUZZ_ENTRY(fn)                                                      \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);              \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)               \
    {                                                                          \
        return fn(data, size);                                                 \
    }
#else
#define MP_FUZZ_ENTRY(fn)
#endif

#endif /* MP_FUZZ_H */
