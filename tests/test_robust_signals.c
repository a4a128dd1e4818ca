/*
 * test_robust_signals.c - the molprop command stopped by a signal, as a user
 * would do it: the real binary ($MOLPROP_BIN) runs a verb on input big
 * enough (or slow enough: a named pipe that never ends) to be mid-run, the
 * test waits for a sign that it is (a progress line, a temp file, a
 * directory, the pipe drained), sends SIGINT or SIGTERM, and checks the exit
 * status (130, 143), the one-line message, and that neither a temporary
 * file nor a directory the run made is left.  No sleeps: every wait is for
 * an event, with a generous time limit that only a hung run reaches.  Also
 * train --checkpoint-every killed with SIGKILL after its first checkpoint
 * and resumed with --resume D alone: the model file equals, byte for byte,
 * an uninterrupted run's.
 */
#define _GNU_SOURCE
#include "gpu_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define WAIT_LIMIT_S 300.0   /* a run that shows no progress in this long is hung */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *bin(void)
{
    const char *b = getenv("MOLPROP_BIN");
    return b && *b ? b : NULL;
}

/* Starts $MOLPROP_BIN argv[0..] (NULL-terminated) with stdout and stderr
 * into `log`, in directory `cwd`; the child's pid, or -1. */
static pid_t spawn(const char *cwd, const char *log, const char *const *argv)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || chdir(cwd) != 0)
        _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    const char *args[32];
    int n = 0;
    args[n++] = bin();
    for (; argv[n - 1] && n < 31; n++)
        args[n] = argv[n - 1];
    args[n] = NULL;
    execv(bin(), (char *const *)args);
    _exit(127);
}

/* 1 once `ready(arg)` holds while the child still runs; 0 when the child
 * ended first or the limit passed (then the child is killed and reaped). */
static int wait_until(pid_t pid, int (*ready)(const void *), const void *arg)
{
    double t0 = now_s();
    while (now_s() - t0 < WAIT_LIMIT_S) {
        if (ready(arg))
            return 1;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stdout, "    the run ended (status %d) before it was stopped\n",
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            return 0;
        }
        usleep(2000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fprintf(stdout, "    no progress in %.0f s\n", WAIT_LIMIT_S);
    return 0;
}

/* Sends sig, then reaps the child: its exit status, or -signal when it
 * died from one (e.g. -2 had the handler not caught SIGINT). */
static int stop_with(pid_t pid, int sig)
{
    kill(pid, sig);
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1000;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static int exists(const void *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

typedef struct {
    const char *path, *needle;
} file_needle;

static int file_has(const void *arg)
{
    const file_needle *f = arg;
    char *text = mp_test_slurp(f->path, NULL);
    int yes = text && strstr(text, f->needle) != NULL;
    mp_free(text);
    return yes;
}

/* Entries of dir whose name starts with prefix (-1: dir unreadable). */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

typedef struct {
    const char *dir, *prefix;
} dir_prefix;

static int has_prefixed(const void *arg)
{
    const dir_prefix *p = arg;
    return count_prefixed(p->dir, p->prefix) > 0;
}

/* A fresh directory for one test under the run's scratch directory. */
static const char *test_dir(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/sig-%s", mp_test_tmpdir(), name);
    mkdir(buf, 0777);
    return buf;
}

/* Writes `rows` data rows (esol's SMILES over and over) under a header. */
static int write_rows(int fd, const char *header, long rows)
{
    gzFile gz = gzopen(mp_test_shared("datasets/esol.csv.gz"), "rb");
    if (!gz)
        return 0;
    char line[4096], smiles[64][512];
    int n = 0;
    (void)gzgets(gz, line, sizeof line);   /* the header */
    while (n < 64 && gzgets(gz, line, sizeof line)) {
        char *comma = strchr(line, ',');   /* esol: smiles,target */
        if (!comma)
            continue;
        snprintf(smiles[n], sizeof smiles[n], "%.*s", (int)(comma - line), line);
        n++;
    }
    gzclose(gz);
    if (n == 0 || dprintf(fd, "%s\n", header) < 0)
        return 0;
    for (long i = 0; i < rows; i++)
        if (dprintf(fd, "%s,%ld\n", smiles[i % n], i % 7) < 0)
            return 0;
    return 1;
}

static int write_rows_file(const char *path, long rows)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return 0;
    int ok = write_rows(fd, "smiles,y", rows);
    return close(fd) == 0 && ok;
}

/* A model to predict with (one epoch: its quality does not matter). */
static int small_model(const char *dir)
{
    char out[4096];
    return mp_test_cli(out, sizeof out, "train --data '%s' --epochs 1 --hidden 16 --threads 1 "
                       "--quiet --save-dir '%s/model'",
                       mp_test_shared("datasets/esol.csv.gz"), dir) == 0;
}

#define NEED_BIN()                                                             \
    do {                                                                       \
        if (!bin())                                                            \
            MP_SKIP("MOLPROP_BIN is not set (run the tests through make test)"); \
    } while (0)

/* Checks the log holds the one line "molprop VERB: interrupted by SIG". */
#define CHECK_STOP_LINE(log, verb, sig)                                        \
    do {                                                                       \
        char *t_ = mp_test_slurp(log, NULL);                                   \
        char want_[128];                                                       \
        snprintf(want_, sizeof want_, "molprop %s: interrupted by %s", verb, sig); \
        int ok_ = t_ && strstr(t_, want_) != NULL;                             \
        if (!ok_)                                                              \
            fprintf(stdout, "    output:\n%s\n", t_ ? t_ : "(none)");          \
        mp_free(t_);                                                           \
        CHECK_MSG(ok_, "no line '%s'", want_);                                 \
    } while (0)

MP_TEST(robust_signal_train_sigint_removes_save_dir)
{
    NEED_BIN();
    char dir[1024], save[1100], log[1100];
    test_dir("train", dir, sizeof dir);
    snprintf(save, sizeof save, "%s/run", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    const char *argv[] = { "train", "--data", mp_test_shared("datasets/esol.csv.gz"),
                           "--epochs", "100000", "--hidden", "16", "--threads", "1",
                           "--save-dir", save, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    file_needle f = { log, "epoch 1/" };
    CHECK(wait_until(pid, file_has, &f));
    CHECK(exists(save));   /* the run made it */
    CHECK_EQ_INT(stop_with(pid, SIGINT), 130);
    CHECK_STOP_LINE(log, "train", "SIGINT");
    CHECK_MSG(!exists(save), "%s is left behind", save);
}

MP_TEST(robust_signal_train_sigterm_keeps_checkpoint)
{
    NEED_BIN();
    char dir[1024], save[1100], log[1100], ck[1200];
    test_dir("train-ck", dir, sizeof dir);
    snprintf(save, sizeof save, "%s/run", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(ck, sizeof ck, "%s/checkpoint.mpc", save);
    const char *argv[] = { "train", "--data", mp_test_shared("datasets/esol.csv.gz"),
                           "--epochs", "100000", "--hidden", "16", "--threads", "1",
                           "--checkpoint-every", "1", "--save-dir", save, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    CHECK(wait_until(pid, exists, ck));
    CHECK_EQ_INT(stop_with(pid, SIGTERM), 143);
    CHECK_STOP_LINE(log, "train", "SIGTERM");
    /* the checkpoint stays (the message says how to go on), nothing else */
    file_needle f = { log, "--resume" };
    CHECK(file_has(&f));
    CHECK(exists(ck));
    CHECK_EQ_INT(count_prefixed(save, "checkpoint.mpc.tmp"), 0);
    CHECK_EQ_INT(count_prefixed(save, "model.mpm"), 0);
}

MP_TEST(robust_signal_predict_sigterm_leaves_no_temp_file)
{
    NEED_BIN();
    char dir[1024], in[1100], out[1100], log[1100], model[1100];
    test_dir("predict", dir, sizeof dir);
    snprintf(in, sizeof in, "%s/big.csv", dir);
    snprintf(out, sizeof out, "%s/pred.csv", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(model, sizeof model, "%s/model/model.mpm", dir);
    CHECK(small_model(dir));
    CHECK(write_rows_file(in, 400000));   /* minutes of work: it is mid-run when stopped */
    const char *argv[] = { "predict", "--model", model, "--data", in, "--out", out,
                           "--threads", "1", NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    dir_prefix p = { dir, "pred.csv.tmp" };
    CHECK(wait_until(pid, has_prefixed, &p));
    CHECK_EQ_INT(stop_with(pid, SIGTERM), 143);
    CHECK_STOP_LINE(log, "predict", "SIGTERM");
    CHECK_EQ_INT(count_prefixed(dir, "pred.csv"), 0);
}

/* A named pipe the test holds open for writing: the run reading it never
 * sees its end.  feed() writes `rows` rows into it (blocking until the run
 * has read all but what the pipe buffers), so it is mid-read after. */
static int open_fifo(const char *path)
{
    if (mkfifo(path, 0644) != 0)
        return -1;
    return open(path, O_RDWR | O_CLOEXEC);   /* Linux: does not wait for a reader */
}

static void run_fifo_verb(mp_test_result *mp__r, const char *verb, const char *const *argv,
                          const char *dir, const char *fifo, const char *log, long rows, int sig)
{
    int fd = open_fifo(fifo);
    CHECK(fd >= 0);
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    int fed = write_rows(fd, "smiles,y", rows);
    if (!fed) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fd);
        CHECK_MSG(0, "could not feed the pipe");
    }
    int status = stop_with(pid, sig);
    close(fd);
    CHECK_EQ_INT(status, 128 + sig);
    CHECK_STOP_LINE(log, verb, sig == SIGINT ? "SIGINT" : "SIGTERM");
    (void)verb;
}

MP_TEST(robust_signal_featurize_sigint_on_a_pipe)
{
    NEED_BIN();
    char dir[1024], fifo[1100], log[1100], cache[1100], dump[1100];
    test_dir("featurize", dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/in.csv", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(cache, sizeof cache, "%s/f.mpf", dir);
    snprintf(dump, sizeof dump, "%s/dump", dir);
    const char *argv[] = { "featurize", "--data", fifo, "--out", cache, "--dump", dump,
                           "--threads", "1", NULL };
    run_fifo_verb(mp__r, "featurize", argv, dir, fifo, log, 20000, SIGINT);
    if (*mp__r == MP_TEST_FAIL)
        return;
    CHECK(!exists(dump));
    CHECK_EQ_INT(count_prefixed(dir, "f.mpf"), 0);
}

MP_TEST(robust_signal_featurize_sigterm_on_a_pipe)
{
    NEED_BIN();
    char dir[1024], fifo[1100], log[1100], cache[1100];
    test_dir("featurize-term", dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/in.csv", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(cache, sizeof cache, "%s/f.mpf", dir);
    const char *argv[] = { "featurize", "--data", fifo, "--out", cache, NULL };
    run_fifo_verb(mp__r, "featurize", argv, dir, fifo, log, 20000, SIGTERM);
    if (*mp__r == MP_TEST_FAIL)
        return;
    CHECK_EQ_INT(count_prefixed(dir, "f.mpf"), 0);
}

/* 1 once /proc/PID/fd holds `count` descriptors the run opened on the file
 * for reading. */
typedef struct {
    pid_t       pid;
    const char *path;
    int         count;   /* at least this many opens seen at once */
} proc_open;

static int has_open(const void *arg)
{
    const proc_open *p = arg;
    char fds[64];
    snprintf(fds, sizeof fds, "/proc/%ld/fd", (long)p->pid);
    DIR *d = opendir(fds);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char link[512], target[4096];
        snprintf(link, sizeof link, "%s/%s", fds, e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (strcmp(target, p->path) != 0)
            continue;
        /* opened for reading: the run's own, not our O_RDWR one that the
         * forked child holds until its exec closes it */
        char info[512];
        snprintf(info, sizeof info, "/proc/%ld/fdinfo/%s", (long)p->pid, e->d_name);
        char *text = mp_test_slurp(info, NULL);
        const char *fl = text ? strstr(text, "flags:") : NULL;
        unsigned long flags = fl ? strtoul(fl + 6, NULL, 8) : O_RDWR;
        mp_free(text);
        n += (flags & O_ACCMODE) == O_RDONLY;
    }
    closedir(d);
    return n >= p->count;
}

/* split reads its input twice: loaded whole from the pipe, then streamed
 * again into the set files once --out (two levels, made by the run) exists;
 * the second reading never ends, so the stop comes while the files are
 * being written. */
MP_TEST(robust_signal_split_sigint_removes_out_dirs)
{
    NEED_BIN();
    char dir[1024], fifo[1100], log[1100], top[1100], out[1200];
    test_dir("split", dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/in.csv", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(top, sizeof top, "%s/sets", dir);
    snprintf(out, sizeof out, "%s/random", top);
    char real_fifo[4096];
    int fd = open_fifo(fifo);
    CHECK(fd >= 0);
    CHECK(realpath(fifo, real_fifo) != NULL);
    const char *argv[] = { "split", "--data", fifo, "--out", out, "--threads", "1", NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    /* first reading: the whole file, then its end (our descriptor closed
     * once the run has the pipe open, so the pipe lives on) */
    proc_open po = { pid, real_fifo, 1 };
    int ok = write_rows(fd, "smiles,y", 300) && wait_until(pid, has_open, &po);
    close(fd);
    /* second reading: a writer that never finishes */
    ok = ok && wait_until(pid, exists, out);
    int wfd = -1;
    for (double t0 = now_s(); ok && wfd < 0 && now_s() - t0 < WAIT_LIMIT_S; usleep(2000))
        wfd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);   /* ENXIO until the run opens it */
    ok = ok && wfd >= 0 && write_rows(wfd, "smiles,y", 10);
    int status = ok ? stop_with(pid, SIGINT) : (kill(pid, SIGKILL), waitpid(pid, NULL, 0), -1);
    if (wfd >= 0)
        close(wfd);
    CHECK_MSG(ok, "the run did not reach its second reading");
    CHECK_EQ_INT(status, 130);
    CHECK_STOP_LINE(log, "split", "SIGINT");
    CHECK_MSG(!exists(top), "%s is left behind", top);
}

MP_TEST(robust_signal_bench_sigint)
{
    NEED_BIN();
    char dir[1024], log[1100], tsv[1100], reg[4200], cwd[4096];
    test_dir("bench", dir, sizeof dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(tsv, sizeof tsv, "%s/bench.tsv", dir);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(reg, sizeof reg, "%s/data/datasets.tsv", cwd);
    char data_dir[4096];
    snprintf(data_dir, sizeof data_dir, "%s", mp_test_shared("datasets"));
    const char *argv[] = { "bench", "--datasets", "esol", "--data-dir", data_dir, "--registry",
                           reg, "--epochs", "100000", "--seeds", "0", "--threads", "1",
                           "--out", tsv, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    file_needle f = { log, "esol" };   /* the table's first row has begun */
    CHECK(wait_until(pid, file_has, &f));
    CHECK_EQ_INT(stop_with(pid, SIGINT), 130);
    /* the runner's own line: it keeps the finished runs */
    char *t = mp_test_slurp(log, NULL);
    CHECK_MSG(t && strstr(t, "molprop bench: interrupted"), "output:\n%s", t ? t : "(none)");
    mp_free(t);
    /* --out is the grid's directory, kept for the resume (its results file
     * holds whole rows only): no temporary file in it */
    CHECK_EQ_INT(count_prefixed(tsv, "results.tsv.tmp"), 0);
}

/* data fetch from a mirror whose file is a pipe that never ends: the copy
 * is mid-way (its temp file exists) when the signal comes; --dest's two
 * levels, made by the run, go too. */
MP_TEST(robust_signal_data_fetch_sigint_removes_dest)
{
    NEED_BIN();
    char dir[1024], log[1100], mirror[1100], fifo[1200], dest[1200], top[1100], reg[4200],
        cwd[4096];
    test_dir("fetch", dir, sizeof dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(mirror, sizeof mirror, "%s/mirror", dir);
    snprintf(fifo, sizeof fifo, "%s/esol.csv.gz", mirror);
    snprintf(top, sizeof top, "%s/data", dir);
    snprintf(dest, sizeof dest, "%s/sub", top);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(reg, sizeof reg, "%s/data/datasets.tsv", cwd);
    CHECK(mkdir(mirror, 0777) == 0);
    int fd = open_fifo(fifo);
    CHECK(fd >= 0);
    const char *argv[] = { "data", "fetch", "esol", "--mirror", mirror, "--dest", dest,
                           "--registry", reg, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    int ok = write_rows(fd, "smiles,y", 20);   /* some bytes, never the end */
    dir_prefix p = { dest, "esol.csv.gz.part" };
    ok = ok && wait_until(pid, has_prefixed, &p);
    int status = ok ? stop_with(pid, SIGINT) : -1;
    close(fd);
    CHECK(ok);
    CHECK_EQ_INT(status, 130);
    CHECK_STOP_LINE(log, "data: esol", "SIGINT");
    CHECK_MSG(!exists(top), "%s is left behind", top);
}

/* train --checkpoint-every 1 on `device`, SIGKILL (no handler, no
 * unwinding) once the first checkpoint is there, then train --resume D
 * alone: the same model.mpm as a run never interrupted. */
static void killed_resumes_bitwise(mp_test_result *mp__r, const char *name, const char *device)
{
    char dir[1024], ref[1100], cut[1100], log[1100], ck[1200], out[8192];
    test_dir(name, dir, sizeof dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(cut, sizeof cut, "%s/cut", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(ck, sizeof ck, "%s/checkpoint.mpc", cut);
    const char *esol = mp_test_shared("datasets/esol.csv.gz");
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs 12 --hidden 24 "
                             "--dropout 0.1 --ensemble-size 2 --threads 1 --device %s --quiet "
                             "--save-dir '%s'", esol, device, ref), 0);
    const char *argv[] = { "train", "--data", esol, "--epochs", "12", "--hidden", "24",
                           "--dropout", "0.1", "--ensemble-size", "2", "--threads", "1",
                           "--device", device, "--checkpoint-every", "1", "--save-dir", cut,
                           NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    CHECK(wait_until(pid, exists, ck));
    CHECK_EQ_INT(stop_with(pid, SIGKILL), -SIGKILL);
    CHECK(exists(ck));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --resume '%s' --threads 1 --quiet", cut), 0);
    size_t na = 0, nb = 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/model.mpm", ref);
    char *a = mp_test_slurp(path, &na);
    snprintf(path, sizeof path, "%s/model.mpm", cut);
    char *b = mp_test_slurp(path, &nb);
    int same = a && b && na == nb && memcmp(a, b, na) == 0;
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "the resumed model differs from the uninterrupted one");
    CHECK_MSG(!exists(ck), "the checkpoint stays after the run ended well");
    /* the resumed run's metrics.json records the options the checkpoint held */
    snprintf(path, sizeof path, "%s/metrics.json", cut);
    file_needle f = { path, "\"ensemble-size\":\t2" };
    CHECK_MSG(file_has(&f), "metrics.json does not hold the checkpoint's options");
}

MP_TEST(robust_signal_train_killed_resumes_bitwise)
{
    NEED_BIN();
    killed_resumes_bitwise(mp__r, "kill-resume", "cpu");
}

/* The same on the GPU (make test-gpu: the name holds "gpu"; the device-
 * resident source with CUDA graphs, the default there). */
MP_TEST(robust_signal_gpu_train_killed_resumes_bitwise)
{
    MP_NEED_GPU();
    NEED_BIN();
    killed_resumes_bitwise(mp__r, "kill-resume-gpu", "gpu");
}

/* Options that differ from the checkpoint's are refused by name. */
MP_TEST(robust_signal_resume_refuses_other_options)
{
    NEED_BIN();
    char dir[1024], cut[1100], log[1100], ck[1200], out[8192];
    test_dir("resume-other", dir, sizeof dir);
    snprintf(cut, sizeof cut, "%s/cut", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(ck, sizeof ck, "%s/checkpoint.mpc", cut);
    const char *argv[] = { "train", "--data", mp_test_shared("datasets/esol.csv.gz"),
                           "--epochs", "100000", "--hidden", "16", "--threads", "1",
                           "--checkpoint-every", "1", "--save-dir", cut, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    CHECK(wait_until(pid, exists, ck));
    CHECK_EQ_INT(stop_with(pid, SIGINT), 130);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --resume '%s' --hidden 32 --quiet", cut), 1);
    CHECK_MSG(strstr(out, "hidden") != NULL, "the refusal does not name the option: %s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --resume '%s/nowhere' --quiet", dir), 1);
    CHECK_MSG(strstr(out, "nowhere") != NULL, "%s", out);
}
