/*
 * test_core.c - errors, allocation hook, generators, atomic files.
 */
#include "test.h"
#include "core/core.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

MP_TEST(pyrandom_matches_cpython)
{
    /* Reference values printed by CPython 3.11:
     *   r = random.Random(0); [r.getrandbits(32) for _ in range(3)]
     *   random.Random(42).random()
     *   x = list(range(10)); random.Random(0).shuffle(x) */
    mp_pyrandom r;
    mp_pyrandom_seed(&r, 0);
    CHECK_EQ_INT(mp_pyrandom_getrandbits(&r, 32), 3626764237u);
    CHECK_EQ_INT(mp_pyrandom_getrandbits(&r, 32), 1654615998u);
    CHECK_EQ_INT(mp_pyrandom_getrandbits(&r, 32), 3255389356u);
    mp_pyrandom_seed(&r, 42);
    CHECK_NEAR(mp_pyrandom_random(&r), 0.6394267984578837, 0, 1e-16);
    size_t x[10];
    for (size_t i = 0; i < 10; i++) x[i] = i;
    mp_pyrandom_seed(&r, 0);
    mp_pyrandom_shuffle(&r, x, 10);
    const size_t want[10] = { 7, 8, 1, 5, 3, 4, 2, 0, 9, 6 };
    for (int i = 0; i < 10; i++)
        CHECK_EQ_INT(x[i], want[i]);
}

MP_TEST(rng_streams_reproducible)
{
    mp_rng a, b, c;
    mp_rng_seed(&a, 7, 1);
    mp_rng_seed(&b, 7, 1);
    mp_rng_seed(&c, 7, 2);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = mp_rng_u64(&a), y = mp_rng_u64(&b), z = mp_rng_u64(&c);
        CHECK(x == y);
        same_c += x == z;
    }
    CHECK(same_c < 5);
    double s = 0, s2 = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        double v = mp_rng_normal(&a);
        s += v;
        s2 += v * v;
    }
    CHECK_NEAR(s / n, 0.0, 0.03, 0);
    CHECK_NEAR(s2 / n, 1.0, 0.05, 0);
}

MP_TEST(alloc_counts_and_fails_on_demand)
{
    long before = mp_alloc_live();
    void *p = mp_malloc(10);
    CHECK(p);
    CHECK_EQ_INT(mp_alloc_live(), before + 1);
    mp_free(p);
    CHECK_EQ_INT(mp_alloc_live(), before);
    mp_alloc_fail_after(1);
    void *q = mp_malloc(8);   /* allowed */
    void *r = mp_malloc(8);   /* fails   */
    void *s = mp_malloc(8);   /* disarmed again */
    mp_alloc_fail_after(-1);
    CHECK(q && !r && s);
    mp_free(q);
    mp_free(s);
}

MP_TEST(afile_commit_and_abort)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/afile.txt", mp_test_tmpdir());
    mp_afile f;
    CHECK_OK(mp_afile_open(&f, path));
    fputs("hello\n", f.fp);
    CHECK(access(path, F_OK) != 0);     /* nothing at the target yet */
    CHECK_OK(mp_afile_commit(&f));
    CHECK(access(path, F_OK) == 0);
    remove(path);
    CHECK_OK(mp_afile_open(&f, path));
    fputs("half", f.fp);
    mp_afile_abort(&f);
    CHECK(access(path, F_OK) != 0);
    CHECK(mp_afile_open(&f, "/nonexistent-dir/x") == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "/nonexistent-dir/x") != NULL);
}

/* mp_exit in a child whose stdout is a pipe: the buffered output arrives
 * and the status is the one given either way; the atexit handler runs only
 * without mp_exit_skip_teardown (what the GPU backend asks for). */
static void exit_handler_marks(void) { fputs("handler", stdout); }

static int exit_child(int skip, char *got, size_t n, int *status)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        atexit(exit_handler_marks);
        fputs("buffered;", stdout);   /* a pipe: fully buffered, not yet written */
        if (skip)
            mp_exit_skip_teardown();
        mp_exit(7);
    }
    close(fd[1]);
    size_t used = 0;
    ssize_t r;
    while (used + 1 < n && (r = read(fd[0], got + used, n - 1 - used)) > 0)
        used += (size_t)r;
    got[used] = '\0';
    close(fd[0]);
    return waitpid(pid, status, 0) == pid ? 0 : -1;
}

MP_TEST(exit_skips_teardown_only_when_asked)
{
    char got[64];
    int status = 0;
    CHECK(exit_child(0, got, sizeof got, &status) == 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECK_EQ_STR(got, "buffered;handler");
    CHECK(exit_child(1, got, sizeof got, &status) == 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECK_EQ_STR(got, "buffered;");
}
