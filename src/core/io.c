/*
 * io.c - the one output hook: atomic file output (mp_afile) through a stdio
 * stream of our own over the temp file's descriptor, so every byte any
 * writer puts through it, and the fsync, close and rename that commit it,
 * pass one place where a test can make the Nth operation fail (a full disk,
 * a read-only directory, an I/O error), as mp_alloc_fail_after does for
 * allocations.  Directories are made through mp_mkdir for the same reason.
 */
#define _GNU_SOURCE
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ===================================================================== */
/* Fault injection                                                        */
/* ===================================================================== */

static long io_ops;               /* hooked operations so far            */
static long io_countdown = -1;    /* < 0: nothing fails                  */
static int  io_errno;

void mp_io_fail_after(long n, int err)
{
    __atomic_store_n(&io_errno, err ? err : ENOSPC, __ATOMIC_RELAXED);
    __atomic_store_n(&io_countdown, n < 0 ? -1 : n, __ATOMIC_RELAXED);
}

long mp_io_ops(void) { return __atomic_load_n(&io_ops, __ATOMIC_RELAXED); }

int mp_io_fault(void)
{
    __atomic_add_fetch(&io_ops, 1, __ATOMIC_RELAXED);
    long c = __atomic_load_n(&io_countdown, __ATOMIC_RELAXED);
    if (c < 0)
        return 0;
    if (c > 0) {   /* this one still succeeds; every one after the last does not */
        __atomic_sub_fetch(&io_countdown, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return __atomic_load_n(&io_errno, __ATOMIC_RELAXED);
}

mp_status mp_mkdir(const char *path, int *made)
{
    *made = 0;
    int e = mp_io_fault();
    if (!e) {
        if (mkdir(path, 0777) == 0) {
            *made = 1;
            return MP_OK;
        }
        e = errno;
    }
    struct stat sb;
    if (e == EEXIST) {
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            return MP_OK;
        return mp_error_set(MP_ERR_IO, "cannot create directory %s: a file of that name exists",
                            path);
    }
    return mp_error_set(MP_ERR_IO, "cannot create directory %s: %s", path, strerror(e));
}

static void mkdirs_forget(mp_made_dirs *m, int undo)
{
    for (int i = m->n - 1; i >= 0; i--) {
        mp_cleanup_remove(m->slot[i]);
        if (undo) {
            m->path[m->len[i]] = '\0';
            (void)rmdir(m->path);
        }
    }
    mp_free(m->path);
    memset(m, 0, sizeof *m);
}

void mp_mkdirs_undo(mp_made_dirs *m) { mkdirs_forget(m, 1); }
void mp_mkdirs_keep(mp_made_dirs *m) { mkdirs_forget(m, 0); }

mp_status mp_mkdirs(const char *path, mp_made_dirs *m)
{
    memset(m, 0, sizeof *m);
    size_t n = strlen(path);
    if (n == 0)
        return mp_error_set(MP_ERR_ARG, "an empty directory name");
    if (!(m->path = mp_strdup(path)))
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    char *p = m->path;
    mp_status st = MP_OK;
    for (size_t i = 1; i <= n && st == MP_OK; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        if (p[i - 1] == '/')   /* "a//b", "a/" */
            continue;
        char c = p[i];
        p[i] = '\0';
        int made = 0;
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            ;   /* there already (no hooked operation: nothing to make) */
        else if ((st = mp_mkdir(p, &made)) == MP_OK && made) {
            if (m->n == MP_MKDIRS_MAX) {   /* keep the deepest */
                mp_cleanup_remove(m->slot[0]);
                memmove(m->len, m->len + 1, sizeof m->len[0] * (MP_MKDIRS_MAX - 1));
                memmove(m->slot, m->slot + 1, sizeof m->slot[0] * (MP_MKDIRS_MAX - 1));
                m->n--;
            }
            m->len[m->n] = i;
            m->slot[m->n] = mp_cleanup_add(p, 1);
            m->n++;
        }
        p[i] = c;
    }
    if (st)
        mp_mkdirs_undo(m);
    return st;
}

/* ===================================================================== */
/* The stream over the temp file                                          */
/* ===================================================================== */

struct mp_afile_sink {
    int fd;
    int err;      /* the first error, an errno value (0: none)    */
    int discard;  /* aborting: buffered bytes are dropped, unwritten */
};

static ssize_t sink_write(void *cookie, const char *buf, size_t n)
{
    struct mp_afile_sink *s = cookie;
    size_t done = 0;
    if (s->discard)
        return (ssize_t)n;
    while (done < n) {
        int e = mp_io_fault();
        ssize_t w = e ? -1 : write(s->fd, buf + done, n - done);
        if (w < 0 && !e)
            e = errno;
        if (w < 0 && e == EINTR)
            continue;
        if (w < 0) {
            if (!s->err)
                s->err = e;
            errno = e;
            /* fewer bytes than asked, never -1: glibc's stdio takes a cookie
             * write's -1 as a huge count and then reads past the caller's
             * buffer (ASan caught it); a short count sets the stream's error */
            return (ssize_t)done;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

/* The stream's seek (a writer that goes back to fill in a header: .npy). */
static int sink_seek(void *cookie, off64_t *pos, int whence)
{
    struct mp_afile_sink *s = cookie;
    off64_t at = lseek64(s->fd, *pos, whence);
    if (at < 0)
        return -1;
    *pos = at;
    return 0;
}

static int sink_close(void *cookie)
{
    struct mp_afile_sink *s = cookie;
    int e = mp_io_fault();
    int r = close(s->fd);
    if (r != 0 && !e)
        e = errno;
    if (e && !s->err)
        s->err = e;
    s->fd = -1;
    return e ? -1 : 0;
}

static void afile_release(mp_afile *f)
{
    mp_cleanup_remove(f->cleanup);
    mp_free(f->path);
    mp_free(f->tmp_path);
    mp_free(f->sink);
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->cleanup = -1;
}

mp_status mp_afile_open(mp_afile *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->cleanup = -1;
    size_t n = strlen(path) + 32;
    f->path = mp_strdup(path);
    f->tmp_path = mp_malloc(n);
    f->sink = mp_calloc(1, sizeof *f->sink);
    if (!f->path || !f->tmp_path || !f->sink) {
        afile_release(f);
        return mp_error_set(MP_ERR_NOMEM, "out of memory opening %s", path);
    }
    snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    int e = mp_io_fault();
    int fd = e ? -1 : open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        if (!e)
            e = errno;
        afile_release(f);
        return mp_error_set(MP_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    /* registered before anything can go wrong, so a fatal signal from here
     * on removes the temp file (mp_cleanup_run) */
    f->cleanup = mp_cleanup_add(f->tmp_path, 0);
    f->sink->fd = fd;
    f->fd = fd;
    cookie_io_functions_t io = { .read = NULL, .write = sink_write, .seek = sink_seek,
                                 .close = sink_close };
    f->fp = fopencookie(f->sink, "w", io);
    if (!f->fp) {
        close(fd);
        unlink(f->tmp_path);
        afile_release(f);
        return mp_error_set(MP_ERR_NOMEM, "out of memory opening %s", path);
    }
    setvbuf(f->fp, NULL, _IOFBF, 1u << 16);
    return MP_OK;
}

int mp_afile_error(const mp_afile *f)
{
    if (!f->fp)
        return EBADF;
    if (f->sink->err)
        return f->sink->err;
    return ferror(f->fp) ? EIO : 0;
}

/* "cannot write P: No space left on device" (the first error seen). */
static mp_status write_failed(const mp_afile *f, int e)
{
    return mp_error_set(MP_ERR_IO, "cannot write %s: %s%s", f->path, strerror(e),
                        e == ENOSPC ? " (the disk is full)" : "");
}

mp_status mp_afile_check(mp_afile *f)
{
    int e = mp_afile_error(f);
    return e ? write_failed(f, e) : MP_OK;
}

mp_status mp_afile_commit(mp_afile *f)
{
    mp_status st = MP_OK;
    int e = 0;
    if (fflush(f->fp) != 0 || ferror(f->fp))
        e = f->sink->err ? f->sink->err : EIO;
    if (!e && (e = mp_io_fault()) == 0 && fsync(f->fd) != 0 && errno != EINVAL)
        e = errno;   /* EINVAL: a file that cannot be synced (a pipe, /dev/null) */
    int ce = fclose(f->fp) != 0 ? (f->sink->err ? f->sink->err : EIO) : 0;
    f->fp = NULL;
    if (!e)
        e = ce;
    if (e) {
        st = write_failed(f, e);
    } else if ((e = mp_io_fault()) != 0 || rename(f->tmp_path, f->path) != 0) {
        if (!e)
            e = errno;
        st = mp_error_set(MP_ERR_IO, "cannot write %s: renaming %s into place failed: %s%s",
                          f->path, f->tmp_path, strerror(e),
                          e == ENOENT ? " (was its directory removed?)" : "");
    }
    if (st)
        (void)unlink(f->tmp_path);
    afile_release(f);
    return st;
}

void mp_afile_abort(mp_afile *f)
{
    if (!f->fp)
        return;
    f->sink->discard = 1;   /* what is still buffered is not worth writing */
    fclose(f->fp);
    (void)unlink(f->tmp_path);
    afile_release(f);
}
