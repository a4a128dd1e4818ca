/*
 * fetch.c - a registry dataset's file into data/ (molprop.h,
 * mp_registry_fetch): copied from a mirror directory, or downloaded over
 * HTTP(S) with libcurl from a base URL or the registry's own url, with
 * progress, resumed after a broken transfer (the partial file stays as
 * <file>.part; the next fetch asks for the rest with a Range request), and
 * checked: against the registry's pinned SHA-256, or, for an entry without
 * one, recorded in <file>.sha256 on the first fetch and checked from then
 * on.  A url "ARCHIVE#MEMBER" names a file inside a .tar.gz (Chemprop's
 * data.tar.gz holds the paper's chembl.csv): the archive is fetched that
 * way, then the member taken out.  Nothing is renamed into place before it
 * is checked, so a failure leaves the target as it was.
 */
#include "data/registry.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IO_CHUNK (64u << 10)

/* ===================================================================== */
/* Paths and small files                                                  */
/* ===================================================================== */

static char *join(const char *a, const char *sep, const char *b)
{
    size_t na = strlen(a);
    while (na > 1 && a[na - 1] == '/')   /* "dir/" + "/" + "f" -> "dir/f" */
        na--;
    size_t n = na + strlen(sep) + strlen(b) + 1;
    char *s = mp_malloc(n);
    if (s)
        snprintf(s, n, "%.*s%s%s", (int)na, a, sep, b);
    return s;
}

/* The checksum recorded in <target>.sha256 ("" when none). */
static void read_recorded(const char *target, char hex[65])
{
    char path[4200];
    hex[0] = '\0';
    snprintf(path, sizeof path, "%s.sha256", target);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    char line[256];
    if (fgets(line, sizeof line, fp) && strlen(line) >= 64) {
        memcpy(hex, line, 64);
        hex[64] = '\0';
        for (int i = 0; i < 64; i++)
            if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
                hex[0] = '\0';
    }
    fclose(fp);
}

/* Writes "<hex>  <file>\n" (sha256sum's format) to <target>.sha256. */
static mp_status write_recorded(const char *target, const char *file, const char *hex)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.sha256", target);
    mp_afile f;
    mp_status st = mp_afile_open(&f, path);
    if (st)
        return st;
    fprintf(f.fp, "%s  %s\n", hex, file);
    return mp_afile_commit(&f);
}

/* The url's member after '#' (NULL: a plain file); *url_len the length of
 * the archive's url before it. */
static const char *archive_member(const char *url, size_t *url_len)
{
    const char *hash = url ? strchr(url, '#') : NULL;
    if (url_len)
        *url_len = hash ? (size_t)(hash - url) : (url ? strlen(url) : 0);
    return hash && hash[1] ? hash + 1 : NULL;
}

/* ===================================================================== */
/* Copy and download                                                      */
/* ===================================================================== */

static mp_status copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return mp_error_set(MP_ERR_IO, "cannot open %s: %s", src, strerror(errno));
    FILE *out = fopen(dst, "wb");
    if (!out) {
        fclose(in);
        return mp_error_set(MP_ERR_IO, "cannot write %s: %s", dst, strerror(errno));
    }
    unsigned char *buf = mp_malloc(IO_CHUNK);
    mp_status st = buf ? MP_OK : mp_error_set(MP_ERR_NOMEM, "out of memory copying %s", src);
    size_t n;
    while (!st && !(st = mp_interrupt_poll()) && (n = fread(buf, 1, IO_CHUNK, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            st = mp_error_set(MP_ERR_IO, "cannot write %s (disk full?)", dst);
    if (!st && ferror(in))
        st = mp_error_set(MP_ERR_IO, "cannot read %s", src);
    fclose(in);
    if (fclose(out) != 0 && !st)
        st = mp_error_set(MP_ERR_IO, "cannot write %s (disk full?)", dst);
    mp_free(buf);
    return st;
}

typedef struct {
    FILE                  *fp;
    int                    failed;    /* a write failed                  */
    long                   http;      /* the response's status           */
    curl_off_t             offset;    /* bytes in hand before this try   */
    const mp_fetch_source *src;
    const char            *name;
} dl;

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
    dl *d = arg;
    size_t n = size * nmemb;
    if (fwrite(p, 1, n, d->fp) != n) {
        d->failed = 1;
        return 0;
    }
    return n;
}

static int on_progress(void *arg, curl_off_t total, curl_off_t now, curl_off_t ut, curl_off_t un)
{
    dl *d = arg;
    if (mp_interrupt_check())   /* a stop request: the transfer ends (reported below) */
        return 1;
    if (d->src && d->src->progress)
        d->src->progress(d->src->progress_arg, d->name, (int64_t)(d->offset + now),
                         total > 0 ? (int64_t)(d->offset + total) : -1);
    return 0;
}

/*
 * Downloads url into `part`, resuming from its current size.  MP_OK with
 * the whole file there; MP_ERR_IO (the partial file kept) otherwise.  A
 * server that ignores the Range request sends the whole file: it replaces
 * the partial one.
 */
static mp_status download(const char *url, const char *part, const mp_fetch_source *src,
                          const char *name)
{
    struct stat sb;
    curl_off_t have = stat(part, &sb) == 0 ? (curl_off_t)sb.st_size : 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return mp_error_set(MP_ERR_INTERNAL, "libcurl could not start");
    mp_status st = MP_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        CURL *c = curl_easy_init();
        if (!c) {
            st = mp_error_set(MP_ERR_INTERNAL, "libcurl could not start");
            break;
        }
        dl d = { .fp = fopen(part, have > 0 ? "ab" : "wb"), .offset = have, .src = src,
                 .name = name };
        if (!d.fp) {
            curl_easy_cleanup(c);
            st = mp_error_set(MP_ERR_IO, "cannot write %s: %s", part, strerror(errno));
            break;
        }
        char err[CURL_ERROR_SIZE] = "";
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &d);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &d);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
        curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);     /* a stalled transfer ends */
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 120L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "molprop");
        if (have > 0)
            curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, have);
        CURLcode rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &d.http);
        curl_easy_cleanup(c);
        int closed = fclose(d.fp) == 0;
        if (mp_interrupted()) {
            st = mp_interrupt_poll();
            break;
        }
        if (d.failed || !closed) {
            st = mp_error_set(MP_ERR_IO, "cannot write %s (disk full?)", part);
            break;
        }
        if (rc == CURLE_OK) {
            st = MP_OK;
            break;
        }
        if (have > 0 && (rc == CURLE_RANGE_ERROR || d.http == 416 || d.http == 200)) {
            /* the server cannot resume (or we had it all, wrongly): start again */
            have = 0;
            continue;
        }
        st = mp_error_set(MP_ERR_IO, "download of %s failed: %s%s", url,
                          err[0] ? err : curl_easy_strerror(rc),
                          rc == CURLE_PARTIAL_FILE || rc == CURLE_OPERATION_TIMEDOUT ||
                                  rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING
                              ? " (the part received is kept: fetch again to resume)" : "");
        break;
    }
    curl_global_cleanup();
    return st;
}

/* ===================================================================== */
/* A member of a .tar.gz                                                  */
/* ===================================================================== */

static unsigned long long octal(const unsigned char *p, size_t n)
{
    unsigned long long v = 0;
    for (size_t i = 0; i < n && p[i]; i++)
        if (p[i] >= '0' && p[i] <= '7')
            v = v * 8 + (unsigned)(p[i] - '0');
    return v;
}

static int read_full(gzFile g, void *buf, unsigned n)
{
    return gzread(g, buf, n) == (int)n;
}

/*
 * Writes member `member` of the gzipped tar `archive` to `out` (gzipped
 * when gz).  Ustar names (prefix/name) and GNU long names are understood.
 * MP_ERR_FORMAT when the archive is damaged or lacks the member.
 */
static mp_status extract_member(const char *archive, const char *member, const char *out, int gz)
{
    gzFile in = gzopen(archive, "rb");
    if (!in)
        return mp_error_set(MP_ERR_IO, "cannot open %s", archive);
    unsigned char h[512];
    char name[4096], longname[4096] = "";
    unsigned char *buf = mp_malloc(IO_CHUNK);
    mp_status st = buf ? MP_OK : mp_error_set(MP_ERR_NOMEM, "out of memory");
    int found = 0;
    while (!st && !found) {
        if (!read_full(in, h, 512)) {
            st = mp_error_set(MP_ERR_FORMAT, "%s: the archive ends before %s", archive, member);
            break;
        }
        int zero = 1;
        for (int i = 0; i < 512; i++)
            zero &= h[i] == 0;
        if (zero) {
            st = mp_error_set(MP_ERR_FORMAT, "%s holds no %s", archive, member);
            break;
        }
        unsigned long long size = octal(h + 124, 12), padded = (size + 511) / 512 * 512;
        char type = (char)h[156];
        if (type == 'L') {   /* GNU: the next entry's name, in the data that follows */
            if (padded > sizeof longname || size == 0) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: a file name too long", archive);
                break;
            }
            if (!read_full(in, longname, (unsigned)padded)) {
                st = mp_error_set(MP_ERR_FORMAT, "%s: the archive is cut short", archive);
                break;
            }
            longname[size < sizeof longname ? size : sizeof longname - 1] = '\0';
            continue;
        }
        if (longname[0]) {
            snprintf(name, sizeof name, "%s", longname);
            longname[0] = '\0';
        } else if (h[345]) {
            snprintf(name, sizeof name, "%.155s/%.100s", (const char *)h + 345, (const char *)h);
        } else {
            snprintf(name, sizeof name, "%.100s", (const char *)h);
        }
        const char *bare = !strncmp(name, "./", 2) ? name + 2 : name;
        int regular = type == '0' || type == '\0';
        if (regular && !strcmp(bare, member)) {
            found = 1;
            FILE *plain = NULL;
            gzFile packed = NULL;
            if (gz)
                packed = gzopen(out, "wb6");
            else
                plain = fopen(out, "wb");
            if (!plain && !packed) {
                st = mp_error_set(MP_ERR_IO, "cannot write %s", out);
                break;
            }
            unsigned long long left = size;
            while (!st && left > 0) {
                unsigned n = left < IO_CHUNK ? (unsigned)left : IO_CHUNK;
                if (!read_full(in, buf, n))
                    st = mp_error_set(MP_ERR_FORMAT, "%s: %s is cut short", archive, member);
                else if (gz ? gzwrite(packed, buf, n) != (int)n : fwrite(buf, 1, n, plain) != n)
                    st = mp_error_set(MP_ERR_IO, "cannot write %s (disk full?)", out);
                left -= n;
            }
            int closed = gz ? gzclose(packed) == Z_OK : fclose(plain) == 0;
            if (!st && !closed)
                st = mp_error_set(MP_ERR_IO, "cannot write %s (disk full?)", out);
            break;
        }
        for (unsigned long long left = padded; !st && left > 0;) {   /* skip it */
            unsigned n = left < IO_CHUNK ? (unsigned)left : IO_CHUNK;
            if (!read_full(in, buf, n))
                st = mp_error_set(MP_ERR_FORMAT, "%s: the archive is cut short", archive);
            left -= n;
        }
    }
    gzclose(in);
    mp_free(buf);
    return st;
}

/* ===================================================================== */
/* Fetching                                                               */
/* ===================================================================== */

mp_status mp_registry_local_sha256(const mp_registry *reg, const char *name,
                                   const char *dest_dir, char hex[65])
{
    hex[0] = '\0';
    const mp_dataset_info *d = mp_registry_find(reg, name);
    if (!d || !d->file)
        return mp_error_set(MP_ERR_ARG, "dataset '%s' has no file in the registry", name);
    if (d->sha256 && !archive_member(d->url, NULL)) {
        memcpy(hex, d->sha256, 65);
        return MP_OK;
    }
    char *target = join(dest_dir ? dest_dir : "data", "/", d->file);
    if (!target)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    read_recorded(target, hex);
    mp_free(target);
    if (!hex[0])
        return mp_error_set(MP_ERR_ARG, "%s: no checksum known yet (the registry pins none and "
                            "no fetch has recorded one)", d->name);
    return MP_OK;
}

static int file_exists(const char *p)
{
    return access(p, F_OK) == 0;
}

mp_status mp_registry_fetch(const mp_registry *reg, const char *name, const char *dest_dir,
                            const mp_fetch_source *source, mp_fetch_result *result)
{
    const mp_dataset_info *d = mp_registry_find(reg, name);
    if (!d) {
        char *names = mp_registry_names(reg);
        mp_status st = mp_error_set(MP_ERR_ARG, "unknown dataset '%s'; known datasets: %s",
                                    name, names ? names : "(out of memory)");
        mp_free(names);
        return st;
    }
    if (!d->file)
        return mp_error_set(MP_ERR_ARG, "dataset '%s' is not available: the registry has no file for it",
                            d->name);
    const char *mirror = source && source->mirror && *source->mirror ? source->mirror : NULL;
    const char *base = source && source->url && *source->url ? source->url : NULL;
    if (!dest_dir)
        dest_dir = "data";
    mp_made_dirs made;   /* undone when the fetch is stopped by a signal */
    mp_status st = mp_mkdirs(dest_dir, &made);
    if (st)
        return st;
    char *target = join(dest_dir, "/", d->file), *src = NULL, *part = NULL, *archive = NULL,
         *member_tmp = NULL;
    char hex[65], want[65] = "";
    if (!target) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t url_len;
    const char *member = archive_member(d->url, &url_len);
    /* What the local file must hash to: pinned, else recorded. */
    if (d->sha256 && !member)
        memcpy(want, d->sha256, 65);
    else
        read_recorded(target, want);
    if (file_exists(target) && want[0]) {
        if ((st = mp_sha256_file(target, hex)))
            goto done;
        if (!strcmp(hex, want)) {
            if (result)
                *result = MP_FETCH_PRESENT;
            goto done;
        }
        /* a wrong file: replaced below by the rename, once a good one is in hand */
    }

    /* The source: the mirror's file, the base URL's, the entry's own url. */
    int from_mirror = 0;
    if (mirror) {
        if (!(src = join(mirror, "/", d->file))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
        from_mirror = file_exists(src);
        if (!from_mirror) {
            mp_free(src);
            src = NULL;
        }
    }
    if (!src && base && !(src = join(base, "/", d->file))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    int via_archive = 0;
    if (!src && d->url) {
        if (!(src = mp_malloc(url_len + 1))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(src, d->url, url_len);
        src[url_len] = '\0';
        via_archive = member != NULL;
    }
    if (!src) {
        if (mirror)
            st = mp_error_set(MP_ERR_IO, "%s not found in the mirror %s (and no base URL)",
                              d->file, mirror);
        else
            st = mp_error_set(MP_ERR_ARG, "no source for %s: give a mirror (a directory holding "
                              "the dataset files) or a base URL", d->file);
        goto done;
    }

    /* The bytes into <target>.part (or the archive's <target>.archive.part). */
    char suffix[32];
    snprintf(suffix, sizeof suffix, "%s", via_archive ? ".archive.part" : ".part");
    if (!(part = join(target, "", suffix))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (from_mirror) {
        (void)unlink(part);
        st = copy_file(src, part);
    } else {
        st = download(src, part, source, d->name);
    }
    if (st) {
        struct stat sb;
        /* a partial download is kept for the next fetch to resume; nothing else */
        if (from_mirror || stat(part, &sb) != 0 || sb.st_size == 0)
            (void)unlink(part);
        goto done;
    }
    if ((st = mp_sha256_file(part, hex)))
        goto done;
    /* the bytes fetched: the registry's checksum is of them (file or archive) */
    const char *pinned = d->sha256;
    if (pinned && strcmp(hex, pinned)) {
        (void)unlink(part);   /* wrong bytes: resuming them would not help */
        st = mp_error_set(MP_ERR_CHECKSUM, "%s from %s has SHA-256 %s, expected %s; nothing was written",
                          via_archive ? "the archive" : d->file, src, hex, pinned);
        goto done;
    }
    if (via_archive) {
        size_t n = strlen(d->file);
        int gz = n > 3 && !strcmp(d->file + n - 3, ".gz");
        if (!(member_tmp = join(target, "", ".member.part"))) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            goto done;
        }
        if ((st = extract_member(part, member, member_tmp, gz))) {
            (void)unlink(member_tmp);
            goto done;
        }
        (void)unlink(part);
        archive = part;
        part = member_tmp;
        member_tmp = NULL;
        if ((st = mp_sha256_file(part, hex)))
            goto done;
    }
    if (!pinned || via_archive) {
        if (want[0] && strcmp(hex, want) && !via_archive) {
            (void)unlink(part);
            st = mp_error_set(MP_ERR_CHECKSUM, "%s from %s has SHA-256 %s, but the first fetch "
                              "recorded %s (in %s.sha256); nothing was written", d->file, src,
                              hex, want, target);
            goto done;
        }
        if ((st = write_recorded(target, d->file, hex)))
            goto done;
    }
    if (rename(part, target) != 0) {
        st = mp_error_set(MP_ERR_IO, "cannot rename %s to %s: %s", part, target, strerror(errno));
        (void)unlink(part);
        goto done;
    }
    if (result)
        *result = from_mirror ? MP_FETCH_MIRROR : MP_FETCH_DOWNLOADED;
done:
    if (st == MP_ERR_INTERRUPTED)
        mp_mkdirs_undo(&made);
    else
        mp_mkdirs_keep(&made);
    mp_free(target);
    mp_free(src);
    mp_free(part);
    mp_free(archive);
    mp_free(member_tmp);
    return st;
}
