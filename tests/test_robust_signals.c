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
 * an uninterrupted run's.  featurize stopped mid-dump; hpopt stopped
 * mid-search keeps its finished trials and resumes to the search it would
 * have been.
 */
#define _GNU_SOURCE
#include "gpu_test.h"
#include "models/heads.h"
#include "run/modelfile.h"
#include "run/trainer.h"

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

/* The runs of an endless checkpointing ESOL training (hidden 16, one
 * thread, every epoch checkpointed, `extra` options added) in
 * test_dir(tag): save = dir/run, its log and checkpoint file. */
typedef struct {
    char dir[1024], save[1100], log[1100], ck[1200];
} ck_run;

/* Starts it and stops it with sig once its first checkpoint exists: the
 * exit status, -1 when it never got that far. */
static int checkpointed_train_stopped(ck_run *r, const char *tag, const char *const *extra,
                                      int sig)
{
    test_dir(tag, r->dir, sizeof r->dir);
    snprintf(r->save, sizeof r->save, "%s/run", r->dir);
    snprintf(r->log, sizeof r->log, "%s/log", r->dir);
    snprintf(r->ck, sizeof r->ck, "%s/checkpoint.mpc", r->save);
    const char *argv[40] = { "train", "--data", mp_test_shared("datasets/esol.csv.gz"),
                             "--epochs", "100000", "--hidden", "16", "--threads", "1",
                             "--checkpoint-every", "1", "--save-dir", r->save };
    int n = 13;
    for (int i = 0; extra && extra[i] && n < 39; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = spawn(r->dir, r->log, argv);
    if (pid <= 0 || !wait_until(pid, exists, r->ck))
        return -1;
    return stop_with(pid, sig);
}

MP_TEST(robust_signal_train_sigterm_keeps_checkpoint)
{
    NEED_BIN();
    ck_run r;
    CHECK_EQ_INT(checkpointed_train_stopped(&r, "train-ck", NULL, SIGTERM), 143);
    const char *save = r.save, *log = r.log, *ck = r.ck;
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

/* fingerprint --out F.npy (its header is written last, into the temp file)
 * stopped mid-run: no .npy, no temporary file. */
MP_TEST(robust_signal_fingerprint_sigint_leaves_no_npy)
{
    NEED_BIN();
    char dir[1024], in[1100], out[1100], log[1100], model[1100];
    test_dir("fingerprint", dir, sizeof dir);
    snprintf(in, sizeof in, "%s/big.csv", dir);
    snprintf(out, sizeof out, "%s/fp.npy", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(model, sizeof model, "%s/model/model.mpm", dir);
    CHECK(small_model(dir));
    CHECK(write_rows_file(in, 100000));
    const char *argv[] = { "fingerprint", "--model", model, "--data", in, "--out", out,
                           "--threads", "1", NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    dir_prefix p = { dir, "fp.npy.tmp" };
    CHECK(wait_until(pid, has_prefixed, &p));
    CHECK_EQ_INT(stop_with(pid, SIGINT), 130);
    CHECK_STOP_LINE(log, "fingerprint", "SIGINT");
    CHECK_EQ_INT(count_prefixed(dir, "fp.npy"), 0);
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

/* featurize --dump stopped while it writes its files: the run is frozen
 * (SIGSTOP) as soon as the dump's first temporary file appears, the signal
 * queued and the run continued (SIGCONT), so the stop always lands mid-dump
 * however fast the machine.  Neither a .tsv file, nor a temporary file, nor
 * the cache, nor the dump's folder (made by the run) is left; the folder
 * above it, the user's, stays. */
MP_TEST(robust_signal_featurize_sigterm_during_dump)
{
    NEED_BIN();
    char dir[1024], in[1100], log[1100], cache[1100], user[1100], dump[1200];
    test_dir("featurize-dump", dir, sizeof dir);
    snprintf(in, sizeof in, "%s/in.csv", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(cache, sizeof cache, "%s/f.mpf", dir);
    snprintf(user, sizeof user, "%s/mine", dir);
    snprintf(dump, sizeof dump, "%s/dump", user);
    CHECK(mkdir(user, 0777) == 0);
    CHECK(write_rows_file(in, 20000));   /* the dump: tens of MB of text */
    const char *argv[] = { "featurize", "--data", in, "--out", cache, "--dump", dump, "--gz",
                           "--no-descriptors", "--threads", "1", NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    dir_prefix p = { dump, "molecules.tsv.gz.tmp" };
    CHECK(wait_until(pid, has_prefixed, &p));
    kill(pid, SIGSTOP);
    kill(pid, SIGTERM);   /* pending until the run goes on */
    CHECK_EQ_INT(stop_with(pid, SIGCONT), 143);
    CHECK_STOP_LINE(log, "featurize", "SIGTERM");
    CHECK_MSG(!exists(dump), "%s is left behind", dump);
    CHECK_MSG(mp_test_count_in(user, "") == 0, "%s holds something", user);
    CHECK_EQ_INT(count_prefixed(dir, "f.mpf"), 0);
}

/* ---- hpopt ---------------------------------------------------------- */

/* A two-dimensional space of small models: trials of a fraction of a
 * second on freesolv. */
static int hp_space(const char *dir, char *path, size_t cap)
{
    snprintf(path, cap, "%s/space.ini", dir);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 0;
    fputs("[space]\nhidden = int 8 32 8\ndepth = int 2 3\n", fp);
    return fclose(fp) == 0;
}

/* Lines of a file, each ended by its newline; -1 if it cannot be read or
 * its last line is cut. */
static int whole_lines(const char *path)
{
    size_t n = 0;
    char *t = mp_test_slurp(path, &n);
    if (!t)
        return -1;
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += t[i] == '\n';
    int cut = n > 0 && t[n - 1] != '\n';
    mp_free(t);
    return cut ? -1 : lines;
}

/* Occurrences of needle in file path (0 when unreadable). */
static int count_in_file(const char *path, const char *needle)
{
    char *t = mp_test_slurp(path, NULL);
    int n = 0;
    for (const char *s = t; s && (s = strstr(s, needle)); s += strlen(needle))
        n++;
    mp_free(t);
    return n;
}

/* trials.jsonl with the timings cut out (each line up to ',"seconds"'): what
 * a search must reproduce whether or not it was stopped and resumed. */
static char *trials_sans_seconds(const char *path)
{
    char *t = mp_test_slurp(path, NULL);
    if (!t)
        return NULL;
    char *w = t;
    for (const char *r = t; *r;) {
        const char *cut = strstr(r, ",\"seconds\"");
        const char *nl = strchr(r, '\n');
        if (!nl)
            nl = r + strlen(r);
        const char *end = cut && cut < nl ? cut : nl;
        memmove(w, r, (size_t)(end - r));
        w += end - r;
        *w++ = '\n';
        r = *nl ? nl + 1 : nl;
    }
    *w = '\0';
    return t;
}

#define HP_TRAIN "--epochs", "60", "--threads", "1", "--method", "random"

/* SIGINT mid-search: exit 130 with the message, every trial that had
 * finished is in trials.jsonl (whole lines), the trial that was running has
 * left nothing (its model folder, a temporary file); the same command with
 * --trials one more resumes, and the file then equals an uninterrupted
 * search's (but for the timings). */
MP_TEST(robust_signal_hpopt_sigint_keeps_trials_and_resumes)
{
    NEED_BIN();
    char dir[1024], log[1100], space[1100], out[1100], ref[1100], trials[1200], sub[1200];
    char cli[8192];
    test_dir("hpopt", dir, sizeof dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(trials, sizeof trials, "%s/trials.jsonl", out);
    snprintf(sub, sizeof sub, "%s/trials", out);
    CHECK(hp_space(dir, space, sizeof space));
    const char *data = mp_test_shared("datasets/freesolv.csv.gz");
    const char *argv[] = { "hpopt", "--data", data, HP_TRAIN, "--space", space, "--trials",
                           "1000", "--out", out, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    file_needle f = { log, "hpopt: trial 1/" };   /* two trials finished */
    CHECK(wait_until(pid, file_has, &f));
    CHECK_EQ_INT(stop_with(pid, SIGINT), 130);
    CHECK_STOP_LINE(log, "hpopt", "SIGINT");
    f.needle = "run the same command to resume";
    CHECK_MSG(file_has(&f), "the message does not say how to go on");
    int k = whole_lines(trials);
    CHECK_MSG(k >= 2, "trials.jsonl: %d whole lines", k);
    CHECK_EQ_INT(count_in_file(log, "hpopt: trial "), k);   /* each one announced is kept */
    CHECK_EQ_INT(mp_test_count_in(out, ".tmp"), 0);
    CHECK_EQ_INT(mp_test_count_in(sub, ""), 4);   /* the best trial's folder (--keep best) */
    CHECK(!exists(ref));

    /* the rerun goes on at trial k, and ends as a search never stopped */
    char n[16];
    snprintf(n, sizeof n, "%d", k + 1);
    CHECK_EQ_INT(mp_test_cli(cli, sizeof cli, "hpopt --data '%s' --epochs 60 --threads 1 "
                             "--method random --space '%s' --trials %s --out '%s'", data, space,
                             n, out), 0);
    char want[32];
    snprintf(want, sizeof want, "trial %d/%d", k, k + 1);
    CHECK_MSG(strstr(cli, want) && !strstr(cli, "trial 0/"), "not a resume:\n%s", cli);
    CHECK_EQ_INT(whole_lines(trials), k + 1);
    CHECK_EQ_INT(mp_test_cli(cli, sizeof cli, "hpopt --data '%s' --epochs 60 --threads 1 "
                             "--method random --space '%s' --trials %s --out '%s' --quiet",
                             data, space, n, ref), 0);
    snprintf(trials, sizeof trials, "%s/trials.jsonl", ref);
    char *a = trials_sans_seconds(trials);
    snprintf(trials, sizeof trials, "%s/trials.jsonl", out);
    char *b = trials_sans_seconds(trials);
    int same = a && b && strcmp(a, b) == 0;
    if (!same)
        fprintf(stdout, "    uninterrupted:\n%s    stopped and resumed:\n%s", a ? a : "-",
                b ? b : "-");
    mp_free(a);
    mp_free(b);
    CHECK_MSG(same, "the resumed search differs from the uninterrupted one");
}

/* SIGTERM with --jobs 2 (two trials at a time, on threads): 143, the
 * finished trials kept, no temporary file, no folder of a stopped trial. */
/* Three trials' lines in the log (whichever: not in index order). */
static int three_trials_done(const void *log) { return count_in_file(log, "hpopt: trial ") >= 3; }

MP_TEST(robust_signal_hpopt_sigterm_with_jobs)
{
    NEED_BIN();
    char dir[1024], log[1100], space[1100], out[1100], trials[1200], sub[1200];
    test_dir("hpopt-jobs", dir, sizeof dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(trials, sizeof trials, "%s/trials.jsonl", out);
    snprintf(sub, sizeof sub, "%s/trials", out);
    CHECK(hp_space(dir, space, sizeof space));
    const char *argv[] = { "hpopt", "--data", mp_test_shared("datasets/freesolv.csv.gz"),
                           HP_TRAIN, "--space", space, "--trials", "1000", "--jobs", "2",
                           "--keep", "all", "--out", out, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    CHECK(wait_until(pid, three_trials_done, log));   /* the queue hands out the costliest first */
    CHECK_EQ_INT(stop_with(pid, SIGTERM), 143);
    CHECK_STOP_LINE(log, "hpopt", "SIGTERM");
    int k = whole_lines(trials);
    CHECK_MSG(k >= 3, "trials.jsonl: %d whole lines", k);
    CHECK_EQ_INT(count_in_file(log, "hpopt: trial "), k);
    CHECK_EQ_INT(mp_test_count_in(out, ".tmp"), 0);
    /* --keep all: a model folder for each finished trial, none for the
     * stopped ones (each holds model.mpm, metrics.json, split.tsv) */
    CHECK_EQ_INT(mp_test_count_in(sub, "model.mpm"), k);
    CHECK_EQ_INT(mp_test_count_in(sub, ""), 4 * k);
}

/* Stopped before any trial finished: nothing to resume, so nothing is left
 * (the --out folder the run made, its hpopt.json). */
MP_TEST(robust_signal_hpopt_sigint_before_a_trial_leaves_nothing)
{
    NEED_BIN();
    char dir[1024], log[1100], space[1100], out[1100], first[1200];
    test_dir("hpopt-first", dir, sizeof dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(first, sizeof first, "%s/trials/000", out);
    CHECK(hp_space(dir, space, sizeof space));
    const char *argv[] = { "hpopt", "--data", mp_test_shared("datasets/freesolv.csv.gz"),
                           "--epochs", "100000", "--threads", "1", "--space", space,
                           "--trials", "10", "--out", out, NULL };
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    CHECK(wait_until(pid, exists, first));   /* trial 0 is training */
    CHECK_EQ_INT(stop_with(pid, SIGINT), 130);
    CHECK_STOP_LINE(log, "hpopt", "SIGINT");
    CHECK_MSG(!exists(out), "%s is left behind", out);
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

/* train --checkpoint-every 1 on `device` (data `data`, `epochs` epochs,
 * `extra` options added; NULL: none), SIGKILL (no handler, no unwinding)
 * once the first checkpoint is there, then train --resume D alone: the
 * same model.mpm as a run never interrupted. */
static void killed_resumes_bitwise_with(mp_test_result *mp__r, const char *name,
                                        const char *device, const char *data,
                                        const char *epochs, const char *const *extra)
{
    char dir[1024], ref[1100], cut[1100], log[1100], ck[1200], out[8192], more[512] = "";
    test_dir(name, dir, sizeof dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(cut, sizeof cut, "%s/cut", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(ck, sizeof ck, "%s/checkpoint.mpc", cut);
    for (int i = 0; extra && extra[i]; i++) {
        size_t at = strlen(more);
        snprintf(more + at, sizeof more - at, " %s", extra[i]);
    }
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --epochs %s --hidden 24 "
                             "--dropout 0.1 --ensemble-size 2 --threads 1 --device %s --quiet "
                             "--save-dir '%s'%s", data, epochs, device, ref, more), 0);
    const char *argv[48] = { "train", "--data", data, "--epochs", epochs, "--hidden", "24",
                             "--dropout", "0.1", "--ensemble-size", "2", "--threads", "1",
                             "--device", device, "--checkpoint-every", "1", "--save-dir", cut };
    int n = 19;
    for (int i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = spawn(dir, log, argv);
    CHECK(pid > 0);
    int started = wait_until(pid, exists, ck);
    if (!started) {
        char *t = mp_test_slurp(log, NULL);
        fprintf(stdout, "    its output:\n%s\n", t ? t : "(none)");
        mp_free(t);
    }
    CHECK(started);
    CHECK_EQ_INT(stop_with(pid, SIGKILL), -SIGKILL);
    CHECK(exists(ck));
    int rc = mp_test_cli(out, sizeof out, "train --resume '%s' --threads 1 --quiet", cut);
    CHECK_MSG(rc == 0, "train --resume: exit %d: %s", rc, out);
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

static void killed_resumes_bitwise(mp_test_result *mp__r, const char *name, const char *device)
{
    killed_resumes_bitwise_with(mp__r, name, device, mp_test_shared("datasets/esol.csv.gz"),
                                "12", NULL);
}

/* A class-balanced run (bbbp) resumes bit for bit too: each epoch draws
 * its order by shuffling the positive and negative lists in place, so the
 * lists as the last epoch left them are part of the state. */
MP_TEST(robust_signal_class_balance_killed_resumes_bitwise)
{
    NEED_BIN();
    static const char *const cb[] = { "--task", "classification", "--class-balance", NULL };
    killed_resumes_bitwise_with(mp__r, "kill-resume-cb", "cpu",
                                mp_test_shared("datasets/bbbp.csv.gz"), "40", cb);
}

/* The same on the GPU (make test-gpu). */
MP_TEST(robust_signal_gpu_class_balance_killed_resumes_bitwise)
{
    MP_NEED_GPU();
    NEED_BIN();
    static const char *const cb[] = { "--task", "classification", "--class-balance", NULL };
    killed_resumes_bitwise_with(mp__r, "kill-resume-cb-gpu", "gpu",
                                mp_test_shared("datasets/bbbp.csv.gz"), "40", cb);
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
    char out[8192];
    ck_run r;
    CHECK_EQ_INT(checkpointed_train_stopped(&r, "resume-other", NULL, SIGINT), 130);
    const char *cut = r.save, *dir = r.dir;
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --resume '%s' --hidden 32 --quiet", cut), 1);
    CHECK_MSG(strstr(out, "hidden") != NULL, "the refusal does not name the option: %s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --resume '%s/nowhere' --quiet", dir), 1);
    CHECK_MSG(strstr(out, "nowhere") != NULL, "%s", out);
}

/* The options added after the first checkpoints (issue 11's heads and
 * layers, the user columns ...) travel in the checkpoint too: a gelu,
 * attentive, mve run stopped mid-way resumes as itself, not as a default
 * relu / mean / regression run of the same shapes. */
MP_TEST(robust_signal_resume_restores_the_later_options)
{
    NEED_BIN();
    static const char *const later[] = { "--activation", "gelu", "--aggregation", "attentive",
                                         "--task", "regression-mve", "--patience", "7",
                                         "--grad-clip", "2.5", NULL };
    ck_run r;
    CHECK_EQ_INT(checkpointed_train_stopped(&r, "resume-later", later, SIGINT), 130);
    const char *cut = r.save;
    mp_train_opts o = mp_train_opts_default();
    struct mp_kv *keep = NULL;
    CHECK_OK(mp_train_opts_from_checkpoint(cut, &o, &keep));
    CHECK_EQ_INT(o.activation, MP_ACT_GELU);
    CHECK_EQ_INT(o.aggregation, MP_AGG_ATTENTIVE);
    CHECK_EQ_INT(o.task, MP_TASK_REGRESSION_MVE);
    CHECK_EQ_INT(o.patience, 7);
    CHECK(o.grad_clip == 2.5);
    CHECK(o.loss == NULL && o.batch_norm == 0);
    mp_kv_free(keep);
}
