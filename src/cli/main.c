/*
 * main.c - the molprop command: dispatches to one verb per file, and the
 * glue they share (messages; argv, the environment and --config onto the
 * library's option table).
 */
#include "cli.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} verbs[] = {
    { "train",     cli_train,     "train a model (FFN or D-MPNN) on a CSV file" },
    { "predict",   cli_predict,   "predict properties for a CSV of SMILES with a saved model" },
    { "eval",      cli_eval,      "metrics of a saved model on a labelled CSV" },
    { "featurize", cli_featurize, "featurize a CSV into a binary cache and/or reference dump" },
    { "split",     cli_split,     "split a CSV into train/val/test files (random, scaffold_balanced, cv)" },
    { "data",      cli_data,      "list, fetch and verify the benchmark datasets" },
    { "bench",     cli_bench,     "train and compare models on the benchmark datasets" },
    { "hpopt",     cli_hpopt,     "search hyperparameters (random or TPE) over train options" },
    { "fingerprint", cli_fingerprint, "write a saved model's learned molecule vectors (CSV or .npy)" },
};

static void usage(FILE *fp)
{
    fprintf(fp, "molprop %s - molecular property prediction (FFN and D-MPNN)\n\n"
                "usage: molprop <command> [options]   (molprop <command> --help for more)\n\n",
            mp_version());
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(fp, "  %-10s %s\n", verbs[i].name, verbs[i].what);
    fprintf(fp, "  %-10s %s\n", "version", "print versions of molprop and its libraries");
    fprintf(fp, "\nEvery command also reads its options from the [command] section of an INI\n"
                "file: --config FILE (see configs/); flags on the command line override it.\n");
}

int cli_fail(const char *verb, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "molprop %s: ", verb);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

int cli_fail_status(const char *verb, mp_status st)
{
    const char *m = mp_error_message();
    return cli_fail(verb, "%s", m && *m ? m : mp_status_name(st));
}

/* ===================================================================== */
/* argv onto the option table                                             */
/* ===================================================================== */

/* Environment variables that give options their defaults. */
static const struct {
    const char *verb, *key, *env;
} env_defaults[] = {
    { "train", "registry", "MOLPROP_REGISTRY" },
    { "train", "slot-classes", "MOLPROP_SLOT_CLASSES" },
    { "train", "profile", "MOLPROP_GPU_PROFILE" },
    { "bench", "registry", "MOLPROP_REGISTRY" },
    { "data", "registry", "MOLPROP_REGISTRY" },
    { "data", "mirror", "MOLPROP_DATA_MIRROR" },
    { "data", "url", "MOLPROP_DATA_URL" },
};

static void print_help(const char *verb, const char *text, const mp_options *o)
{
    char *list = mp_options_help(o);
    printf("%s\n%s", text, list ? list : "");
    printf("  --config FILE            read the [%s] section of an INI file first;\n"
           "                           the flags given here override it\n", verb);
    mp_free(list);
}

/* Which of the n option sets takes `key`: the first whose table has it, or
 * -1. */
static int owner(mp_options **o, int n, const char *key)
{
    for (int k = 0; k < n; k++)
        if (mp_options_type(o[k], key) != MP_OPT_UNKNOWN)
            return k;
    return -1;
}

static void free_sets(mp_options **o, int n)
{
    for (int k = 0; k < n; k++) {
        mp_options_free(o[k]);
        o[k] = NULL;
    }
}

int cli_options_sets(const char *verb, const char *text, int argc, char **argv,
                     const char *const *tables, int n, mp_options **out, char **pos, int *n_pos)
{
    if (n_pos)
        *n_pos = 0;
    mp_status st = MP_OK;
    for (int k = 0; k < n; k++)
        out[k] = NULL;
    for (int k = 0; k < n && !st; k++)
        st = mp_options_create(&out[k], tables[k]);
    if (st) {
        free_sets(out, n);
        return cli_fail_status(verb, st);
    }
    /* First pass: --help, --config, and the shape of every argument. */
    const char *config[8];
    int n_config = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            print_help(verb, text, out[0]);
            for (int k = 1; k < n; k++) {
                char *list = mp_options_help(out[k]);
                printf("\n%s options:\n%s", tables[k], list ? list : "");
                mp_free(list);
            }
            free_sets(out, n);
            return 2;
        }
        if (strncmp(s, "--", 2) != 0 || !s[2]) {
            if (pos && s[0] != '-') {
                pos[(*n_pos)++] = argv[i];
                continue;
            }
            free_sets(out, n);
            if (s[0] == '-')
                return cli_fail(verb, "unknown option '%s' (see molprop %s --help)", s, verb);
            return cli_fail(verb, "unexpected argument '%s' (see molprop %s --help)", s, verb);
        }
        const char *eq = strchr(s, '=');
        char key[128];
        size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
        snprintf(key, sizeof key, "%.*s", (int)(len < sizeof key ? len : sizeof key - 1), s + 2);
        int is_config = !strcmp(key, "config"), k = owner(out, n, key);
        mp_option_type t = is_config ? MP_OPT_TEXT : k < 0 ? MP_OPT_UNKNOWN
                                                           : mp_options_type(out[k], key);
        if (t == MP_OPT_UNKNOWN) {
            free_sets(out, n);
            return cli_fail(verb, "unknown option '--%s' (see molprop %s --help)", key, verb);
        }
        if (t != MP_OPT_BOOL && !eq) {
            if (i + 1 >= argc) {
                free_sets(out, n);
                return cli_fail(verb, "--%s needs a value", key);
            }
            i++;
        }
        if (is_config && n_config == (int)(sizeof config / sizeof config[0])) {
            free_sets(out, n);
            return cli_fail(verb, "more than %d --config files", n_config);
        }
        if (is_config)
            config[n_config++] = eq ? eq + 1 : argv[i];
    }
    /* Then the layers, each overriding the one before. */
    for (int k = 0; k < n; k++)
        for (size_t e = 0; e < sizeof env_defaults / sizeof env_defaults[0]; e++) {
            const char *v = getenv(env_defaults[e].env);
            if (strcmp(env_defaults[e].verb, tables[k]) != 0 || !v || !*v)
                continue;
            char origin[64];
            snprintf(origin, sizeof origin, "$%s", env_defaults[e].env);
            if ((st = mp_options_set_from(out[k], env_defaults[e].key, v, origin)))
                goto fail;
        }
    for (int c = 0; c < n_config; c++)   /* in order: a later file overrides */
        for (int k = 0; k < n; k++)
            if ((st = mp_options_read_config(out[k], config[c])))
                goto fail;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strncmp(s, "--", 2) != 0)
            continue;   /* a positional argument */
        const char *eq = strchr(s, '=');
        char key[128];
        size_t len = eq ? (size_t)(eq - s - 2) : strlen(s + 2);
        snprintf(key, sizeof key, "%.*s", (int)(len < sizeof key ? len : sizeof key - 1), s + 2);
        int is_config = !strcmp(key, "config"), k = owner(out, n, key);
        const char *value = eq ? eq + 1 : NULL;
        if ((is_config || mp_options_type(out[k], key) != MP_OPT_BOOL) && !eq)
            value = argv[++i];
        if (!is_config && (st = mp_options_set(out[k], key, value)))
            goto fail;
    }
    return 0;
fail:
    free_sets(out, n);
    return cli_fail_status(verb, st);
}

int cli_options(const char *verb, const char *text, int argc, char **argv, mp_options **out,
                char **pos, int *n_pos)
{
    return cli_options_sets(verb, text, argc, argv, &verb, 1, out, pos, n_pos);
}

void cli_report_invalid(const char *verb, const mp_summary *s, const char *file, size_t max,
                        const char *sep, const char *tail)
{
    size_t n = mp_summary_invalid_count(s), shown = 0;
    for (size_t k = 0; k < n && shown < max; k++, shown++) {
        size_t line;
        const char *smiles, *reason;
        if (mp_summary_invalid(s, k, &line, &smiles, &reason) == MP_OK)
            fprintf(stderr, "molprop %s: %s:%zu: invalid SMILES '%s'%s%s%s\n", verb, file, line,
                    smiles, sep, reason, tail);
    }
    if (n > shown)
        fprintf(stderr, "molprop %s: ... and %zu more invalid rows (%zu in all)\n", verb,
                n - shown, n);
}

/* ===================================================================== */
/* Signals                                                                */
/* ===================================================================== */

/*
 * SIGINT and SIGTERM ask the library to stop (mp_interrupt_request): the run
 * unwinds through its error paths, removing its temporary files and the
 * directories it made, and the verb prints the one-line message; main then
 * exits 128 + the signal (130, 143).  A second signal does not wait: it
 * removes what the cleanup list holds and exits at once.  No SA_RESTART, so
 * a read from a pipe or a terminal returns and sees the flag.
 */
static pthread_t main_thread;

static void on_signal(int signo)
{
    /* The kernel hands a process's signal to any of its threads (OpenMP's,
     * curl's); the main thread gets it too, so that a read it is blocked
     * in returns (EINTR) and sees the flag.  pthread_kill is
     * async-signal-safe. */
    if (!pthread_equal(pthread_self(), main_thread)) {
        pthread_kill(main_thread, signo);
        return;
    }
    if (mp_interrupted()) {
        mp_cleanup_run();
        static const char msg[] = "molprop: stopped by a second signal\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + signo);
    }
    mp_interrupt_request(signo);
    alarm(1);   /* on_alarm: the reminders */
}

/*
 * A stop request that lands just before the main thread blocks in a read
 * (a pipe, a terminal, a mirror that is a named pipe) would not wake it: so
 * after the first signal SIGALRM comes every second, each one making that
 * read return (EINTR) and see the flag, until the run has unwound.
 */
static void on_alarm(int signo)
{
    if (!pthread_equal(pthread_self(), main_thread)) {
        pthread_kill(main_thread, signo);
        return;
    }
    alarm(1);
}

static void install_signals(void)
{
    main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
}

/* The exit status of a verb that returned rc: 128 + the signal when a stop
 * was requested (its message printed, or printed here when the run had
 * already finished: then its outputs are complete). */
static int exit_status(const char *verb, int rc)
{
    int sig = mp_interrupted();
    if (!sig)
        return rc;
    if (rc == 0)
        fprintf(stderr, "molprop %s: interrupted by %s after the run had finished (its "
                "outputs are complete)\n", verb, sig == SIGINT ? "SIGINT" : sig == SIGTERM
                ? "SIGTERM" : "a signal");
    return 128 + sig;
}

/* ===================================================================== */
/* Dispatch                                                               */
/* ===================================================================== */

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *v = argv[1];
    if (!strcmp(v, "-h") || !strcmp(v, "--help") || !strcmp(v, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(v, "version") || !strcmp(v, "--version")) {
        printf("molprop %s (RDKit %s)\n", mp_version(), mp_rdkit_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(v, verbs[i].name)) {
            install_signals();
            mp_exit(exit_status(v, verbs[i].fn(argc - 1, argv + 1)));
        }
    fprintf(stderr, "molprop: unknown command '%s'\n\n", v);
    usage(stderr);
    return 1;
}
