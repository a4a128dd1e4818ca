/*
 * test_fetch.c - `molprop data fetch` over HTTP against a server of the
 * test's own on the loopback interface (127.0.0.1, an ephemeral port; it
 * serves a generated file, honours or ignores Range requests, can break a
 * transfer off after N bytes, and stops itself after a few connections or
 * a few seconds idle).  Checked: a download with progress, a broken one
 * resumed with a Range request (and restarted where the server ignores
 * ranges), a pinned checksum that does not match, a checksum recorded on
 * the first fetch and checked later, a member taken out of a .tar.gz, and
 * the command line's progress lines.  Nothing here contacts another host.
 */
#define _GNU_SOURCE   /* strcasestr */
#include "test.h"
#include "internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ===================================================================== */
/* The server                                                             */
/* ===================================================================== */

typedef struct {
    int                  fd, port;
    const char          *path;         /* the one path served ("/data.csv")  */
    const unsigned char *body;
    size_t               len;
    int                  no_range;     /* 1: Range is ignored (200, whole)    */
    size_t               drop_after;   /* >0: the first transfer stops there */
    int                  max_conns;
    int                  conns;        /* connections served                  */
    long                 last_range;   /* the last Range start asked, -1 none */
    pthread_t            thread;
} server;

static void send_all(int c, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(c, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void serve_one(server *S, int c)
{
    char req[8192];
    size_t got = 0;
    struct timeval tv = { 5, 0 };
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (got + 1 < sizeof req) {
        ssize_t r = recv(c, req + got, sizeof req - 1 - got, 0);
        if (r <= 0)
            return;
        got += (size_t)r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    char method[16], path[1024];
    if (sscanf(req, "%15s %1023s", method, path) != 2)
        return;
    char head[512];
    if (strcmp(path, S->path) || strcmp(method, "GET")) {
        const char *nf = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        send_all(c, nf, strlen(nf));
        return;
    }
    long from = -1;
    const char *range = strcasestr(req, "\r\nRange: bytes=");
    if (range)
        from = strtol(range + 15, NULL, 10);
    S->last_range = from;
    size_t start = 0;
    if (from >= 0 && !S->no_range) {
        if ((size_t)from >= S->len) {
            snprintf(head, sizeof head, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: "
                     "bytes */%zu\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", S->len);
            send_all(c, head, strlen(head));
            return;
        }
        start = (size_t)from;
        snprintf(head, sizeof head, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes "
                 "%zu-%zu/%zu\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", start,
                 S->len - 1, S->len, S->len - start);
    } else {
        snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nAccept-Ranges: "
                 "%s\r\nConnection: close\r\n\r\n", S->len, S->no_range ? "none" : "bytes");
    }
    send_all(c, head, strlen(head));
    size_t end = S->len;
    if (S->drop_after && S->conns == 1 && start + S->drop_after < end)
        end = start + S->drop_after;   /* the first transfer breaks off */
    send_all(c, S->body + start, end - start);
}

static void *server_main(void *arg)
{
    server *S = arg;
    while (S->conns < S->max_conns) {
        struct pollfd p = { S->fd, POLLIN, 0 };
        if (poll(&p, 1, 10000) <= 0)   /* idle for 10 s: stop */
            break;
        int c = accept(S->fd, NULL, NULL);
        if (c < 0)
            break;
        S->conns++;
        serve_one(S, c);
        shutdown(c, SHUT_RDWR);
        close(c);
    }
    close(S->fd);
    return NULL;
}

static int server_start(server *S, const char *path, const void *body, size_t len,
                        int max_conns)
{
    memset(S, 0, sizeof *S);
    S->path = path;
    S->body = body;
    S->len = len;
    S->max_conns = max_conns;
    S->last_range = -1;
    S->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (S->fd < 0 || bind(S->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(S->fd, 4) != 0 ||
        getsockname(S->fd, (struct sockaddr *)&a, &n) != 0)
        return 0;
    S->port = ntohs(a.sin_port);
    return pthread_create(&S->thread, NULL, server_main, S) == 0;
}

/* Stops the server: one connection that asks for nothing wakes it if it
 * is still waiting. */
static void server_stop(server *S)
{
    S->max_conns = 0;
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)S->port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (c >= 0) {
        (void)connect(c, (struct sockaddr *)&a, sizeof a);
        close(c);
    }
    pthread_join(S->thread, NULL);
}

/* ===================================================================== */
/* Helpers                                                                */
/* ===================================================================== */

static const char *tmp(const char *name) { return mp_test_tmp("fetch_", name); }

/* A CSV of n rows: real SMILES, a label each. */
static char *make_csv(int n, size_t *len)
{
    static const char *const smiles[] = { "CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC",
                                          "O=C(O)c1ccccc1", "CC(C)Cc1ccc(cc1)C(C)C(=O)O" };
    mp_buf b = { 0 };
    mp_buf_printf(&b, "smiles,active\n");
    for (int i = 0; i < n; i++)
        mp_buf_printf(&b, "%s,%d\n", smiles[i % 6], (i * 7) % 3 == 0);
    *len = b.len;
    return b.data;
}

static int write_registry(const char *path, const char *name, const char *file, long rows,
                          const char *sha, const char *url)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fprintf(fp, "name\tfile\trows\ttasks\ttask_type\tmetric\tsha256\turl\ttargets\tignore\n"
                "%s\t%s\t%ld\t1\tclassification\tROC-AUC\t%s\t%s\t-\t-\n", name, file, rows,
            sha ? sha : "-", url);
    return fclose(fp) == 0;
}

static int text_sha(const void *p, size_t n, char hex[65])
{
    const char *path = tmp("sha.tmp");
    FILE *fp = fopen(path, "wb");
    fwrite(p, 1, n, fp);
    fclose(fp);
    return mp_sha256_file(path, hex) == MP_OK;
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

typedef struct {
    int     calls;
    int64_t last_done, last_total;
} progress_log;

static void on_progress(void *arg, const char *name, int64_t done, int64_t total)
{
    progress_log *p = arg;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

/* ===================================================================== */
/* Tests                                                                  */
/* ===================================================================== */

MP_TEST(fetch_http_resumes_a_broken_download)
{
    size_t len;
    char *body = make_csv(40000, &len);   /* ~0.6 MB */
    char hex[65];
    CHECK(text_sha(body, len, hex));
    server S;
    CHECK(server_start(&S, "/data.csv", body, len, 3));
    S.drop_after = len / 3;
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.csv", S.port);
    const char *reg_path = tmp("reg.tsv"), *dest = tmp("dest");
    CHECK(write_registry(reg_path, "loop", "loop.csv", 40000, hex, url));
    mp_registry *reg;
    CHECK_OK(mp_registry_load(&reg, reg_path));
    progress_log pl = { 0 };
    mp_fetch_source src = { .progress = on_progress, .progress_arg = &pl };
    mp_fetch_result how;
    char target[1300], part[1300];
    snprintf(target, sizeof target, "%s/loop.csv", dest);
    snprintf(part, sizeof part, "%s/loop.csv.part", dest);

    /* the first transfer breaks off: the part received is kept */
    mp_status st = mp_registry_fetch(reg, "loop", dest, &src, &how);
    CHECK_MSG(st == MP_ERR_IO && strstr(mp_error_message(), "fetch again to resume"), "%s",
              mp_error_message());
    CHECK(access(target, F_OK) != 0);
    long have = file_size(part);
    CHECK_MSG(have > 0 && (size_t)have < len, "part %ld of %zu", have, len);
    /* the second asks for the rest */
    CHECK_OK(mp_registry_fetch(reg, "loop", dest, &src, &how));
    CHECK(how == MP_FETCH_DOWNLOADED);
    CHECK_EQ_INT(S.last_range, have);
    CHECK(access(part, F_OK) != 0);
    char got[65];
    CHECK_OK(mp_sha256_file(target, got));
    CHECK_EQ_STR(got, hex);
    CHECK(pl.calls > 0 && pl.last_done == (int64_t)len && pl.last_total == (int64_t)len);
    /* present and right: left alone, no connection */
    int conns = S.conns;
    CHECK_OK(mp_registry_fetch(reg, "loop", dest, &src, &how));
    CHECK(how == MP_FETCH_PRESENT && S.conns == conns);
    server_stop(&S);
    mp_registry_free(reg);

    /* a server that ignores ranges: the download starts again */
    CHECK(server_start(&S, "/data.csv", body, len, 3));
    S.no_range = 1;
    S.drop_after = len / 2;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.csv", S.port);
    const char *dest2 = tmp("dest2");
    CHECK(write_registry(reg_path, "loop", "loop.csv", 40000, hex, url));
    CHECK_OK(mp_registry_load(&reg, reg_path));
    CHECK(mp_registry_fetch(reg, "loop", dest2, NULL, NULL) == MP_ERR_IO);
    CHECK_OK(mp_registry_fetch(reg, "loop", dest2, NULL, &how));
    snprintf(target, sizeof target, "%s/loop.csv", dest2);
    CHECK_OK(mp_sha256_file(target, got));
    CHECK_EQ_STR(got, hex);
    server_stop(&S);
    mp_registry_free(reg);
    mp_free(body);
}

MP_TEST(fetch_http_checksums_pinned_and_recorded)
{
    size_t len;
    char *body = make_csv(500, &len);
    char hex[65];
    CHECK(text_sha(body, len, hex));
    server S;
    CHECK(server_start(&S, "/d.csv", body, len, 6));
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/d.csv", S.port);
    const char *reg_path = tmp("reg2.tsv"), *dest = tmp("dest3");
    char target[1300], rec[1400];
    snprintf(target, sizeof target, "%s/d.csv", dest);
    snprintf(rec, sizeof rec, "%s.sha256", target);
    mp_registry *reg;

    /* a pinned checksum that does not match: nothing written, no part kept */
    CHECK(write_registry(reg_path, "d", "d.csv", 500,
                         "0000000000000000000000000000000000000000000000000000000000000000", url));
    CHECK_OK(mp_registry_load(&reg, reg_path));
    CHECK(mp_registry_fetch(reg, "d", dest, NULL, NULL) == MP_ERR_CHECKSUM);
    CHECK(strstr(mp_error_message(), hex) != NULL);
    CHECK(access(target, F_OK) != 0);
    char part[1400];
    snprintf(part, sizeof part, "%s.part", target);
    CHECK(access(part, F_OK) != 0);
    mp_registry_free(reg);

    /* none pinned: the first fetch records what it saw */
    CHECK(write_registry(reg_path, "d", "d.csv", 500, NULL, url));
    CHECK_OK(mp_registry_load(&reg, reg_path));
    char want[65];
    CHECK(mp_registry_local_sha256(reg, "d", dest, want) == MP_ERR_ARG);
    mp_fetch_result how;
    CHECK_OK(mp_registry_fetch(reg, "d", dest, NULL, &how));
    CHECK(how == MP_FETCH_DOWNLOADED);
    char *r = mp_test_slurp(rec, NULL);
    CHECK(r && !strncmp(r, hex, 64) && strstr(r, "  d.csv\n"));
    mp_free(r);
    CHECK_OK(mp_registry_local_sha256(reg, "d", dest, want));
    CHECK_EQ_STR(want, hex);
    CHECK_OK(mp_registry_fetch(reg, "d", dest, NULL, &how));
    CHECK(how == MP_FETCH_PRESENT);
    /* a damaged local copy is fetched again and checked against the record */
    FILE *fp = fopen(target, "w");
    fputs("smiles,active\nC,1\n", fp);
    fclose(fp);
    CHECK_OK(mp_registry_fetch(reg, "d", dest, NULL, &how));
    CHECK(how == MP_FETCH_DOWNLOADED);
    char got[65];
    CHECK_OK(mp_sha256_file(target, got));
    CHECK_EQ_STR(got, hex);
    mp_registry_free(reg);

    /* 404: an error, and nothing left */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/elsewhere.csv", S.port);
    CHECK(write_registry(reg_path, "d", "d.csv", 500, NULL, url));
    CHECK_OK(mp_registry_load(&reg, reg_path));
    const char *dest4 = tmp("dest4");
    CHECK(mp_registry_fetch(reg, "d", dest4, NULL, NULL) == MP_ERR_IO);
    CHECK(strstr(mp_error_message(), "404") != NULL);
    char p4[1300];
    snprintf(p4, sizeof p4, "%s/d.csv.part", dest4);
    CHECK(access(p4, F_OK) != 0);
    mp_registry_free(reg);
    server_stop(&S);
    mp_free(body);
}

/* A ustar header for a regular file. */
static void tar_header(unsigned char h[512], const char *name, size_t size)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011zo", size);
    memcpy(h + 136, "00000000000", 12);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* A .tar.gz in memory holding readme.txt and data/chembl.csv. */
static unsigned char *make_archive(const char *member, size_t mlen, size_t *len)
{
    const char *path = tmp("archive.tar.gz");
    gzFile g = gzopen(path, "wb");
    unsigned char h[512], pad[512] = { 0 };
    const char *readme = "an archive of the test's own\n";
    tar_header(h, "readme.txt", strlen(readme));
    gzwrite(g, h, 512);
    gzwrite(g, readme, (unsigned)strlen(readme));
    gzwrite(g, pad, (unsigned)(512 - strlen(readme) % 512));
    tar_header(h, "data/chembl.csv", mlen);
    gzwrite(g, h, 512);
    gzwrite(g, member, (unsigned)mlen);
    if (mlen % 512)
        gzwrite(g, pad, (unsigned)(512 - mlen % 512));
    gzwrite(g, pad, 512);
    gzwrite(g, pad, 512);
    gzclose(g);
    return (unsigned char *)mp_test_slurp(path, len);
}

MP_TEST(fetch_http_takes_a_member_out_of_a_tar_gz)
{
    size_t mlen, alen;
    char *member = make_csv(3000, &mlen);
    unsigned char *archive = make_archive(member, mlen, &alen);
    CHECK(archive);
    char ahex[65];
    CHECK(text_sha(archive, alen, ahex));
    server S;
    CHECK(server_start(&S, "/data.tar.gz", archive, alen, 4));
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.tar.gz#data/chembl.csv", S.port);
    const char *reg_path = tmp("reg3.tsv"), *dest = tmp("dest5");
    /* the pinned checksum is the archive's */
    CHECK(write_registry(reg_path, "chembl", "chembl.csv.gz", 3000, ahex, url));
    mp_registry *reg;
    CHECK_OK(mp_registry_load(&reg, reg_path));
    mp_fetch_result how;
    CHECK_OK(mp_registry_fetch(reg, "chembl", dest, NULL, &how));
    CHECK(how == MP_FETCH_DOWNLOADED);
    char target[1300];
    snprintf(target, sizeof target, "%s/chembl.csv.gz", dest);
    gzFile g = gzopen(target, "rb");
    CHECK(g);
    char *back = malloc(mlen + 16);
    int n = gzread(g, back, (unsigned)mlen + 16);
    gzclose(g);
    int same = n == (int)mlen && !memcmp(back, member, mlen);
    free(back);
    CHECK(same);
    /* the local file's checksum is recorded; a second fetch finds it */
    char want[65], got[65];
    CHECK_OK(mp_registry_local_sha256(reg, "chembl", dest, want));
    CHECK_OK(mp_sha256_file(target, got));
    CHECK_EQ_STR(want, got);
    int conns = S.conns;
    CHECK_OK(mp_registry_fetch(reg, "chembl", dest, NULL, &how));
    CHECK(how == MP_FETCH_PRESENT && S.conns == conns);
    mp_dataset *d;
    CHECK_OK(mp_dataset_load(&d, target, NULL));
    CHECK_EQ_INT(d->n_rows, 3000);
    mp_dataset_free(d);
    mp_registry_free(reg);
    /* a member the archive does not hold */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.tar.gz#data/pcba.csv", S.port);
    CHECK(write_registry(reg_path, "pcba", "pcba.csv", 3000, ahex, url));
    CHECK_OK(mp_registry_load(&reg, reg_path));
    CHECK(mp_registry_fetch(reg, "pcba", dest, NULL, NULL) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "holds no data/pcba.csv") != NULL);
    mp_registry_free(reg);
    server_stop(&S);
    mp_free(archive);
    mp_free(member);
}

MP_TEST(cli_data_fetch_over_http_shows_progress)
{
    if (!getenv("MOLPROP_BIN"))
        MP_SKIP("MOLPROP_BIN is not set (run through make test)");
    size_t len;
    char *body = make_csv(20000, &len);
    server S;
    CHECK(server_start(&S, "/big.csv", body, len, 2));
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/big.csv", S.port);
    const char *reg_path = tmp("reg4.tsv"), *dest = tmp("dest6");
    CHECK(write_registry(reg_path, "big", "big.csv", 20000, NULL, url));
    static char out[16384];
    int rc = mp_test_cli(out, sizeof out, "data fetch big --registry '%s' --dest '%s'", reg_path,
                         dest);
    server_stop(&S);
    mp_free(body);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK(strstr(out, "big: ") && strstr(out, "(100%)"));
    CHECK(strstr(out, "downloaded from http://127.0.0.1:"));
    CHECK(strstr(out, "no checksum pinned: recorded SHA-256"));
    rc = mp_test_cli(out, sizeof out, "data verify big --registry '%s' --dest '%s'", reg_path,
                     dest);
    CHECK_MSG(rc == 0 && strstr(out, ": ok"), "%s", out);
}
