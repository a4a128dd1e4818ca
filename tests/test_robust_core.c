/*
 * test_robust_core.c - the core's robustness hooks: the stop flag and its
 * poll counter, the cleanup list a fatal-signal handler runs, and the output
 * hook (mp_afile over its own stream, mp_mkdir, mp_mkdirs, mp_io_fail_after).
 */
#include "test.h"
#include "core/core.h"

#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Files in dir whose name contains `part` (a temp file left behind). */
static int count_named(const char *dir, const char *part)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -a '%s' 2>/dev/null | grep -c -- '%s'", dir, part);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

MP_TEST(robust_interrupt_flag_and_poll)
{
    mp_interrupt_clear();
    CHECK_EQ_INT(mp_interrupted(), 0);
    CHECK_OK(mp_interrupt_poll());
    mp_interrupt_request(SIGTERM);
    CHECK_EQ_INT(mp_interrupted(), SIGTERM);
    mp_status st = mp_interrupt_poll();
    CHECK_EQ_INT(st, MP_ERR_INTERRUPTED);
    CHECK(strstr(mp_error_message(), "SIGTERM") != NULL);
    CHECK_EQ_STR(mp_status_name(MP_ERR_INTERRUPTED), "interrupted");
    /* it stays set: every later poll fails too */
    CHECK_EQ_INT(mp_interrupt_poll(), MP_ERR_INTERRUPTED);
    mp_interrupt_clear();
    CHECK_OK(mp_interrupt_poll());

    /* the hook: the poll after the next 3 */
    long p0 = mp_interrupt_polls();
    mp_interrupt_after_polls(3, SIGINT);
    for (int i = 0; i < 3; i++)
        CHECK_OK(mp_interrupt_poll());
    CHECK_EQ_INT(mp_interrupt_poll(), MP_ERR_INTERRUPTED);
    CHECK(strstr(mp_error_message(), "SIGINT") != NULL);
    CHECK_EQ_INT(mp_interrupt_polls() - p0, 4);
    mp_interrupt_clear();
    CHECK_OK(mp_interrupt_poll());
}

MP_TEST(robust_cleanup_list_removes_only_what_it_may)
{
    char dir[4096], sub[4200], file[4300], keep[4096];
    snprintf(dir, sizeof dir, "%s/cleanup", mp_test_tmpdir());
    snprintf(sub, sizeof sub, "%s/inner", dir);
    snprintf(file, sizeof file, "%s/inner/x.tmp", dir);
    snprintf(keep, sizeof keep, "%s/kept", mp_test_tmpdir());
    CHECK(mkdir(dir, 0777) == 0 && mkdir(sub, 0777) == 0 && mkdir(keep, 0777) == 0);
    FILE *fp = fopen(file, "w");
    CHECK(fp != NULL);
    fclose(fp);
    char user[4200];
    snprintf(user, sizeof user, "%s/users-file", keep);
    fp = fopen(user, "w");
    CHECK(fp != NULL);
    fclose(fp);
    int n0 = mp_cleanup_count();
    int a = mp_cleanup_add(dir, 1), b = mp_cleanup_add(sub, 1), c = mp_cleanup_add(file, 0);
    int d = mp_cleanup_add(keep, 1);   /* holds a file of the user's: rmdir must keep it */
    CHECK(a >= 0 && b >= 0 && c >= 0 && d >= 0);
    CHECK_EQ_INT(mp_cleanup_count(), n0 + 4);
    mp_cleanup_run();
    CHECK(!exists(file) && !exists(sub) && !exists(dir));
    CHECK(exists(keep) && exists(user));
    mp_cleanup_remove(a);
    mp_cleanup_remove(b);
    mp_cleanup_remove(c);
    mp_cleanup_remove(d);
    CHECK_EQ_INT(mp_cleanup_count(), n0);
    /* an unregistered path is not touched */
    mp_cleanup_run();
    CHECK(exists(user));
}

MP_TEST(robust_afile_registers_its_temp_and_reports_errno)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/out.txt", mp_test_tmpdir());
    int n0 = mp_cleanup_count();
    mp_afile f;
    CHECK_OK(mp_afile_open(&f, path));
    CHECK(f.fd >= 0 && f.cleanup >= 0);
    CHECK_EQ_INT(mp_cleanup_count(), n0 + 1);
    CHECK(exists(f.tmp_path));
    fprintf(f.fp, "hello\n");
    CHECK_OK(mp_afile_check(&f));
    CHECK_OK(mp_afile_commit(&f));
    CHECK_EQ_INT(mp_cleanup_count(), n0);
    size_t len;
    char *s = mp_test_slurp(path, &len);
    CHECK(s && len == 6 && !strcmp(s, "hello\n"));
    mp_free(s);

    /* a full disk on the third write: the stream goes on, the check and the
     * commit say so, naming the file, and nothing is left but the old file */
    CHECK_OK(mp_afile_open(&f, path));
    mp_io_fail_after(1, ENOSPC);   /* the first write passes, then the disk is full */
    char big[70000];
    memset(big, 'x', sizeof big);
    fwrite(big, 1, sizeof big, f.fp);
    fwrite(big, 1, sizeof big, f.fp);
    mp_status st = mp_afile_check(&f);
    CHECK_EQ_INT(st, MP_ERR_IO);
    CHECK(strstr(mp_error_message(), path) && strstr(mp_error_message(), "No space left"));
    st = mp_afile_commit(&f);
    mp_io_fail_after(-1, 0);
    CHECK_EQ_INT(st, MP_ERR_IO);
    CHECK(strstr(mp_error_message(), path) != NULL);
    CHECK_EQ_INT(count_named(mp_test_tmpdir(), ".tmp."), 0);
    s = mp_test_slurp(path, &len);
    CHECK(s && len == 6);   /* the committed file of before, untouched */
    mp_free(s);
    CHECK_EQ_INT(mp_cleanup_count(), n0);
}

MP_TEST(robust_afile_each_operation_failing)
{
    /* every hooked operation of one write (open, the writes, fsync, close,
     * rename) made to fail in turn: each gives MP_ERR_IO naming the file and
     * leaves neither the target nor a temp file; then it succeeds */
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/each", mp_test_tmpdir());
    CHECK(mkdir(dir, 0777) == 0);
    snprintf(path, sizeof path, "%s/f.bin", dir);
    static char data[300000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 7);
    int ok = 0;
    for (long n = 0; n < 100 && !ok; n++) {
        mp_afile f;
        mp_io_fail_after(n, n % 2 ? EIO : ENOSPC);
        mp_status st = mp_afile_open(&f, path);
        if (st == MP_OK) {
            fwrite(data, 1, sizeof data, f.fp);
            st = mp_afile_commit(&f);
        }
        mp_io_fail_after(-1, 0);
        if (st == MP_OK) {
            ok = 1;
            CHECK_MSG(n >= 5, "succeeded with only %ld operations", n);
            break;
        }
        CHECK_EQ_INT(st, MP_ERR_IO);
        CHECK_MSG(strstr(mp_error_message(), path) != NULL, "message without the path: %s",
                  mp_error_message());
        CHECK_MSG(!exists(path), "a failed write (op %ld) left %s", n, path);
        CHECK_MSG(count_named(dir, ".tmp.") == 0, "a failed write (op %ld) left a temp file", n);
    }
    CHECK(ok);
    size_t len;
    char *s = mp_test_slurp(path, &len);
    CHECK(s && len == sizeof data && !memcmp(s, data, len));
    mp_free(s);
}

MP_TEST(robust_afile_directory_removed_or_readonly)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/gone", mp_test_tmpdir());
    CHECK(mkdir(dir, 0777) == 0);
    snprintf(path, sizeof path, "%s/p.csv", dir);
    mp_afile f;
    CHECK_OK(mp_afile_open(&f, path));
    fprintf(f.fp, "smiles\nC\n");
    /* the user removes the output directory mid-run */
    CHECK(unlink(f.tmp_path) == 0 && rmdir(dir) == 0);
    mp_status st = mp_afile_commit(&f);
    CHECK_EQ_INT(st, MP_ERR_IO);
    CHECK(strstr(mp_error_message(), path) && strstr(mp_error_message(), "directory removed"));
    CHECK(!exists(dir));
    /* a directory that does not exist, and a read-only one (injected: the
     * tests may run as root, whom permissions do not stop) */
    CHECK_EQ_INT(mp_afile_open(&f, path), MP_ERR_IO);
    CHECK(strstr(mp_error_message(), path) != NULL);
    CHECK(mkdir(dir, 0777) == 0);
    mp_io_fail_after(0, EROFS);
    st = mp_afile_open(&f, path);
    mp_io_fail_after(-1, 0);
    CHECK_EQ_INT(st, MP_ERR_IO);
    CHECK(strstr(mp_error_message(), path) && strstr(mp_error_message(), "Read-only"));
    if (geteuid() != 0) {   /* a real read-only directory where it can be had */
        CHECK(chmod(dir, 0555) == 0);
        st = mp_afile_open(&f, path);
        chmod(dir, 0777);
        CHECK_EQ_INT(st, MP_ERR_IO);
        CHECK(strstr(mp_error_message(), path) != NULL);
    }
    CHECK_EQ_INT(count_named(dir, ".tmp."), 0);
}

MP_TEST(robust_mkdir_hook)
{
    char dir[4096], file[4200];
    snprintf(dir, sizeof dir, "%s/made", mp_test_tmpdir());
    int made = -1;
    CHECK_OK(mp_mkdir(dir, &made));
    CHECK_EQ_INT(made, 1);
    CHECK_OK(mp_mkdir(dir, &made));
    CHECK_EQ_INT(made, 0);
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *fp = fopen(file, "w");
    CHECK(fp != NULL);
    fclose(fp);
    CHECK_EQ_INT(mp_mkdir(file, &made), MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "a file of that name") != NULL);
    snprintf(file, sizeof file, "%s/new", dir);
    mp_io_fail_after(0, ENOSPC);
    mp_status st = mp_mkdir(file, &made);
    mp_io_fail_after(-1, 0);
    CHECK_EQ_INT(st, MP_ERR_IO);
    CHECK(strstr(mp_error_message(), file) != NULL && !made && !exists(file));
}

/* mp_mkdirs: makes the missing levels, undoes only those (deepest first,
 * leaving one that holds something else), keep forgets them, a failure
 * undoes its own part; each level made is on the cleanup list meanwhile. */
MP_TEST(robust_mkdirs_undo_and_keep)
{
    char base[1024], deep[1200], mid[1200], file[1200];
    snprintf(base, sizeof base, "%s/mkdirs", mp_test_tmpdir());
    CHECK(mkdir(base, 0777) == 0);
    snprintf(mid, sizeof mid, "%s/a", base);
    snprintf(deep, sizeof deep, "%s/a/b//c/", base);
    int before = mp_cleanup_count();
    mp_made_dirs m;
    CHECK_OK(mp_mkdirs(deep, &m));
    CHECK_EQ_INT(m.n, 3);
    CHECK_EQ_INT(mp_cleanup_count(), before + 3);
    CHECK(exists(deep));
    mp_mkdirs_undo(&m);
    CHECK(!exists(mid) && exists(base));   /* base was there: it stays */
    CHECK_EQ_INT(mp_cleanup_count(), before);

    CHECK_OK(mp_mkdirs(deep, &m));
    snprintf(file, sizeof file, "%s/a/keep.txt", base);
    FILE *fp = fopen(file, "w");
    CHECK(fp != NULL);
    fclose(fp);
    mp_mkdirs_undo(&m);   /* a/b/c go, a holds a file of someone else's: stays */
    CHECK(exists(file));
    CHECK_EQ_INT(mp_cleanup_count(), before);

    CHECK_OK(mp_mkdirs(deep, &m));   /* a there already: b and c made */
    CHECK_EQ_INT(m.n, 2);
    mp_mkdirs_keep(&m);
    CHECK(exists(deep));
    CHECK_EQ_INT(mp_cleanup_count(), before);

    char under_file[1300];   /* a level that is a file: refused, naming it */
    snprintf(under_file, sizeof under_file, "%s/x/y", file);
    mp_status st = mp_mkdirs(under_file, &m);
    CHECK_EQ_INT(st, MP_ERR_IO);
    CHECK_MSG(strstr(mp_error_message(), "keep.txt") != NULL, "%s", mp_error_message());
    CHECK_EQ_INT(m.n, 0);
    mp_mkdirs_undo(&m);   /* a no-op after a failure */

    mp_io_fail_after(1, ENOSPC);   /* the second level fails: the first is undone */
    char two[1300];
    snprintf(two, sizeof two, "%s/p/q", base);
    st = mp_mkdirs(two, &m);
    mp_io_fail_after(-1, 0);
    CHECK_EQ_INT(st, MP_ERR_IO);
    snprintf(two, sizeof two, "%s/p", base);
    CHECK_MSG(!exists(two), "%s stays after the failed mp_mkdirs", two);
    CHECK_EQ_INT(mp_cleanup_count(), before);
}
