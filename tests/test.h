/*
 * test.h - molprop's table-driven test runner.
 *
 * A test file defines tests with MP_TEST(name) { ... }; each registers itself
 * at load time, so adding a file to tests/ is all it takes.  Checks record a
 * failure with file:line and return from the test; MP_SKIP("why") marks a test
 * skipped (e.g. no GPU).  tests/main.c runs them all (or those whose name
 * contains argv[1]) and ends with the line "N passed, N failed, N skipped".
 */
#ifndef MP_TEST_H
#define MP_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { MP_TEST_PASS, MP_TEST_FAIL, MP_TEST_SKIP } mp_test_result;
typedef void (*mp_test_fn)(mp_test_result *result);

void mp_test_register(const char *name, const char *file, mp_test_fn fn);
void mp_test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Path of a file under the shared folder (env MOLPROP_SHARED, default
 * "../shared"), in a static buffer valid until the next call. */
const char *mp_test_shared(const char *rel);
/* A fresh empty scratch directory for this test run (under $TMPDIR). */
const char *mp_test_tmpdir(void);

/*
 * Runs `$MOLPROP_BIN ARGS 2>&1` (ARGS formatted like printf; quote paths
 * yourself), keeps the first cap-1 bytes of its output in out (may be NULL)
 * and returns its exit status, or -1 when it could not run or died from a
 * signal.  MOLPROP_BIN is set by `make test`.
 */
int mp_test_cli(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same for a shell command line (printf-formatted), not the program. */
int mp_test_shell(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reads a whole file into a NUL-terminated mp_malloc'd buffer (NULL if it
 * cannot be read); *len gets its length when len is not NULL. */
char *mp_test_slurp(const char *path, size_t *len);

/* Entries under dir (recursively) whose name holds `part`; -1 without dir. */
int mp_test_count_in(const char *dir, const char *part);

/* "<tmpdir>/<prefix><name>", in one of 8 buffers used in turn (so up to 8
 * such paths can be held at once). */
const char *mp_test_tmp(const char *prefix, const char *name);

/* Sets environment variable name to value (NULL: unsets it) and returns
 * what it was, for mp_test_env_restore (mp_malloc'd; NULL when unset). */
char *mp_test_env_set(const char *name, const char *value);
/* Puts name back as mp_test_env_set found it, and frees old. */
void mp_test_env_restore(const char *name, char *old);

/* 1 when both files can be read and hold the same bytes. */
int mp_test_same_file(const char *a, const char *b);

/* The names in dir, comma-separated, in readdir's order ("(no directory)"
 * without it), into out[0..cap). */
void mp_test_list_dir(const char *dir, char *out, size_t cap);

#define MP_TEST(name)                                                         \
    static void mp_test_##name(mp_test_result *mp__r);                        \
    __attribute__((constructor)) static void mp_test_reg_##name(void)         \
    {                                                                         \
        mp_test_register(#name, __FILE__, mp_test_##name);                    \
    }                                                                         \
    static void mp_test_##name(mp_test_result *mp__r)

#define MP_FAIL(...)                                                          \
    do {                                                                      \
        mp_test_fail_at(__FILE__, __LINE__, __VA_ARGS__);                     \
        *mp__r = MP_TEST_FAIL;                                                \
        return;                                                               \
    } while (0)

#define MP_SKIP(why)                                                          \
    do {                                                                      \
        fprintf(stdout, "    skipped: %s\n", why);                            \
        *mp__r = MP_TEST_SKIP;                                                \
        return;                                                               \
    } while (0)

/* CHECK for a helper that cleans up: on failure records it and jumps to the
 * helper's `fail:` label. */
#define RCHECK(c, ...)                                                          \
    do {                                                                        \
        if (!(c)) {                                                             \
            mp_test_fail_at(__FILE__, __LINE__, __VA_ARGS__);                   \
            goto fail;                                                          \
        }                                                                       \
    } while (0)

#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c))                                                             \
            MP_FAIL("CHECK(%s) failed", #c);                                  \
    } while (0)

#define CHECK_MSG(c, ...)                                                     \
    do {                                                                      \
        if (!(c))                                                             \
            MP_FAIL(__VA_ARGS__);                                             \
    } while (0)

/* A molprop call that must succeed: prints the library's error if not. */
#define CHECK_OK(expr)                                                        \
    do {                                                                      \
        mp_status mp__st = (expr);                                            \
        if (mp__st != MP_OK)                                                  \
            MP_FAIL("%s returned %s: %s", #expr, mp_status_name(mp__st),      \
                    mp_error_message());                                      \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                    \
    do {                                                                      \
        long long mp__a = (long long)(a), mp__b = (long long)(b);             \
        if (mp__a != mp__b)                                                   \
            MP_FAIL("%s == %s failed: %lld != %lld", #a, #b, mp__a, mp__b);   \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                    \
    do {                                                                      \
        const char *mp__a = (a), *mp__b = (b);                                \
        if (!mp__a || !mp__b || strcmp(mp__a, mp__b) != 0)                    \
            MP_FAIL("%s == %s failed: \"%s\" != \"%s\"", #a, #b,              \
                    mp__a ? mp__a : "(null)", mp__b ? mp__b : "(null)");      \
    } while (0)

/* |a-b| <= tol_abs + tol_rel*|b| */
#define CHECK_NEAR(a, b, tol_abs, tol_rel)                                    \
    do {                                                                      \
        double mp__a = (double)(a), mp__b = (double)(b);                      \
        if (!(fabs(mp__a - mp__b) <= (tol_abs) + (tol_rel)*fabs(mp__b)))      \
            MP_FAIL("%s ~= %s failed: %.17g vs %.17g", #a, #b, mp__a, mp__b); \
    } while (0)

#endif /* MP_TEST_H */
