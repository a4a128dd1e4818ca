/*
 * main.c - runs every registered test (or those whose name contains argv[1])
 * and ends with "N passed, N failed, N skipped".  Exit status 1 if any failed.
 */
#include "test.h"
#include "core/core.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name, *file;
    mp_test_fn fn;
} test_entry;

static test_entry *tests;
static int n_tests, cap_tests;

void mp_test_register(const char *name, const char *file, mp_test_fn fn)
{
    if (n_tests == cap_tests) {
        cap_tests = cap_tests ? 2 * cap_tests : 64;
        tests = realloc(tests, (size_t)cap_tests * sizeof *tests);
        if (!tests) {
            fprintf(stderr, "test runner: out of memory\n");
            exit(2);
        }
    }
    tests[n_tests++] = (test_entry){ name, file, fn };
}

void mp_test_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stdout, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

const char *mp_test_shared(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("MOLPROP_SHARED");
    snprintf(buf, sizeof buf, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

/* Runs cmd (its stderr joined to stdout), keeping the first cap-1 bytes of
 * the output in out (may be NULL); the exit status, -1 if it did not run
 * or died from a signal. */
static int run_command(char *out, size_t cap, const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        if (out && n + 1 < cap) {
            size_t take = got < cap - 1 - n ? got : cap - 1 - n;
            memcpy(out + n, buf, take);
            n += take;
        }
    }
    if (out && cap)
        out[n] = '\0';
    int status = pclose(p);
    if (status == -1 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

int mp_test_cli(char *out, size_t cap, const char *fmt, ...)
{
    const char *bin = getenv("MOLPROP_BIN");
    if (!bin || !*bin) {
        fprintf(stdout, "    MOLPROP_BIN is not set (run the tests through make test)\n");
        return -1;
    }
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin, args);
    return run_command(out, cap, cmd);
}

int mp_test_shell(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[8200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd - 8, fmt, ap);
    va_end(ap);
    strcat(cmd, " 2>&1");
    return run_command(out, cap, cmd);
}

char *mp_test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    mp_buf b = { 0 };
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (mp_buf_append(&b, chunk, got)) {
            fclose(f);
            mp_buf_free(&b);
            return NULL;
        }
    fclose(f);
    if (!b.data && mp_buf_append(&b, "", 0))
        return NULL;
    if (len)
        *len = b.len;
    return b.data;
}

const char *mp_test_tmp(const char *prefix, const char *name)
{
    static char buf[8][1200];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s%s", mp_test_tmpdir(), prefix, name);
    return b;
}

char *mp_test_env_set(const char *name, const char *value)
{
    const char *was = getenv(name);
    char *old = was ? mp_strdup(was) : NULL;
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    return old;
}

void mp_test_env_restore(const char *name, char *old)
{
    if (old)
        setenv(name, old, 1);
    else
        unsetenv(name);
    mp_free(old);
}

int mp_test_same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = mp_test_slurp(a, &na), *y = mp_test_slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    mp_free(x);
    mp_free(y);
    return same;
}

void mp_test_list_dir(const char *dir, char *out, size_t cap)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(out, cap, "(no directory)");
        return;
    }
    struct dirent *e;
    size_t n = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int w = snprintf(out + n, cap - n, "%s%s", n ? "," : "", e->d_name);
        if (w > 0 && (size_t)w < cap - n)
            n += (size_t)w;
    }
    closedir(d);
}

int mp_test_count_in(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (strstr(e->d_name, part))
            n++;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            int k = mp_test_count_in(sub, part);
            n += k > 0 ? k : 0;
        }
    }
    closedir(d);
    return n;
}

static char tmpdir_path[1024];

const char *mp_test_tmpdir(void)
{
    if (!tmpdir_path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir_path, sizeof tmpdir_path, "%s/molprop-test-XXXXXX",
                 t && *t ? t : "/tmp");
        if (!mkdtemp(tmpdir_path)) {
            fprintf(stderr, "test runner: cannot create a scratch directory\n");
            exit(2);
        }
    }
    return tmpdir_path;
}

static int by_file_then_name(const void *a, const void *b)
{
    const test_entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    qsort(tests, (size_t)n_tests, sizeof *tests, by_file_then_name);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n_tests; i++) {
        if (filter && !strstr(tests[i].name, filter) && !strstr(tests[i].file, filter))
            continue;
        mp_test_result r = MP_TEST_PASS;
        mp_error_clear();
        double t0 = mp_time_now();
        tests[i].fn(&r);
        double dt = mp_time_now() - t0;
        const char *tag = r == MP_TEST_PASS ? "PASS" : r == MP_TEST_FAIL ? "FAIL" : "SKIP";
        fprintf(stdout, "%s  %-48s %7.2fs  (%s)\n", tag, tests[i].name, dt, tests[i].file);
        if (r == MP_TEST_PASS) passed++;
        else if (r == MP_TEST_FAIL) failed++;
        else skipped++;
    }
    if (tmpdir_path[0] && !getenv("MOLPROP_KEEP_TMP")) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_path);
        if (system(cmd) != 0)
            fprintf(stderr, "test runner: could not remove %s\n", tmpdir_path);
    }
    free(tests);
    fprintf(stdout, "%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
