/*
 * data.c - `molprop data list|fetch|verify`: the benchmark dataset registry
 * (data/datasets.tsv) seen from the command line.  Thin glue over the
 * registry functions of molprop.h; the sources (mirror directory, base URL)
 * and the registry file come from the [data] options, whose defaults are
 * $MOLPROP_DATA_MIRROR, $MOLPROP_DATA_URL and $MOLPROP_REGISTRY.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VERB "data"

static const char usage_main[] =
    "usage: molprop data <command> [options]\n"
    "\n"
    "The benchmark datasets of Yang et al. 2019, listed in data/datasets.tsv.\n"
    "\n"
    "  list              show every dataset: rows, tasks, task type, metric, present locally\n"
    "  fetch NAME...|all copy (from --mirror, default $MOLPROP_DATA_MIRROR) or download\n"
    "                    (from --url, default $MOLPROP_DATA_URL) datasets into data/,\n"
    "                    checking their SHA-256\n"
    "  verify [NAME...]  check the SHA-256 of local dataset files\n"
    "\n"
    "molprop data <command> --help for its options.\n";

static const char usage_list[] =
    "usage: molprop data list [options]\n"
    "\n"
    "Prints a table of the registry's datasets: name, rows, tasks, task type, the\n"
    "paper's metric, and whether the file is present in --dest.\n";

static const char usage_fetch[] =
    "usage: molprop data fetch NAME...|all [options]\n"
    "\n"
    "Puts each named dataset's file into --dest.  The source is the directory\n"
    "--mirror, or else --url + \"/\" + file (http, https, file://).  The bytes are\n"
    "checked against the registry's SHA-256 before they are renamed into place, so\n"
    "a mismatch leaves nothing behind.  Without a mirror or --url, a dataset comes\n"
    "from the registry's own url (over HTTPS, with progress; a broken download is\n"
    "resumed by the next fetch).  A dataset without a pinned checksum (pcba,\n"
    "chembl, qm9_full) records the one it sees in DEST/FILE.sha256.  A file\n"
    "already present with the right checksum is left alone.  'all' fetches every\n"
    "dataset that has a pinned checksum; the others are fetched by name.\n";

static const char usage_verify[] =
    "usage: molprop data verify [NAME...] [options]\n"
    "\n"
    "Checks the SHA-256 of local dataset files against the registry.  With names,\n"
    "each must be present and correct; without, every dataset file present in\n"
    "--dest is checked (absent ones are listed, not counted as failures).\n";

typedef struct {
    const char     *dest;
    const char     *registry;
    mp_fetch_source source;
    const char     *mirror_label, *url_label;   /* how messages name the sources */
    mp_options     *o;
    char          **names;
    int             n_names;
} data_args;

/* The [data] options (the environment's, --config's, the flags) and the
 * dataset names.  Returns 0 to go on, 1 on error, 2 after --help. */
static int parse_args(int argc, char **argv, const char *usage, data_args *a)
{
    memset(a, 0, sizeof *a);
    a->names = argv + 1;   /* names are compacted in place at the front */
    int rc = cli_options(VERB, usage, argc, argv, &a->o, a->names, &a->n_names);
    if (rc)
        return rc;
    a->dest = mp_options_get(a->o, "dest");
    a->registry = mp_options_get(a->o, "registry");
    a->source.mirror = mp_options_get(a->o, "mirror");
    a->source.url = mp_options_get(a->o, "url");
    const char *env = getenv("MOLPROP_DATA_MIRROR");
    a->mirror_label = env && a->source.mirror && !strcmp(env, a->source.mirror)
                          ? "MOLPROP_DATA_MIRROR" : "--mirror";
    env = getenv("MOLPROP_DATA_URL");
    a->url_label = env && a->source.url && !strcmp(env, a->source.url) ? "MOLPROP_DATA_URL"
                                                                         : "--url";
    return 0;
}

/* Loads the registry and checks that every name is in it. */
static int load_registry(const data_args *a, mp_registry **reg)
{
    mp_status st = mp_registry_load(reg, a->registry);
    if (st)
        return cli_fail_status(VERB, st);
    for (int i = 0; i < a->n_names; i++) {
        if (!strcmp(a->names[i], "all") || mp_registry_find(*reg, a->names[i]))
            continue;
        char *names = mp_registry_names(*reg);
        cli_fail(VERB, "unknown dataset '%s'; known datasets: %s, or all", a->names[i],
                 names ? names : "?");
        mp_free(names);
        mp_registry_free(*reg);
        *reg = NULL;
        return 1;
    }
    return 0;
}

static char *local_path(const char *dest, const char *file)
{
    size_t n = strlen(dest) + strlen(file) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dest, file);
    return p;
}

/* ===================================================================== */
/* list                                                                   */
/* ===================================================================== */

static int data_list(data_args *ap)
{
    data_args a = *ap;
    if (a.n_names)
        return cli_fail(VERB, "list takes no dataset names (got '%s')", a.names[0]);
    mp_registry *reg;
    if (load_registry(&a, &reg))
        return 1;
    printf("%-16s %7s %6s  %-14s %-8s %s\n", "name", "rows", "tasks", "type", "metric", "local");
    for (size_t i = 0; i < mp_registry_count(reg); i++) {
        const mp_dataset_info *d = mp_registry_at(reg, i);
        char rows[32] = "-", tasks[32] = "-";
        const char *local = "no (no file)";
        if (d->file) {
            snprintf(rows, sizeof rows, "%ld", d->rows);
            snprintf(tasks, sizeof tasks, "%d", d->tasks);
            char *p = local_path(a.dest, d->file);
            local = p && access(p, F_OK) == 0 ? "yes" : "no";
            free(p);
        }
        printf("%-16s %7s %6s  %-14s %-8s %s\n", d->name, rows, tasks,
               mp_task_type_name(d->task_type), d->metric, local);
    }
    mp_registry_free(reg);
    return 0;
}

/* ===================================================================== */
/* fetch                                                                  */
/* ===================================================================== */

/* 1 if names hold "all". */
static int wants_all(const data_args *a)
{
    for (int i = 0; i < a->n_names; i++)
        if (!strcmp(a->names[i], "all"))
            return 1;
    return 0;
}

static int have_source(const data_args *a)
{
    return (a->source.mirror && *a->source.mirror) || (a->source.url && *a->source.url);
}

/* Download progress on stderr: redrawn on a terminal, else a line per 10%. */
typedef struct {
    int    tty, last_step;
    double last;
} progress_state;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_progress(void *arg, const char *name, int64_t done, int64_t total)
{
    progress_state *p = arg;
    double t = now_seconds();
    int step = total > 0 ? (int)(10 * done / total) : -1;
    if (p->tty) {
        if (t - p->last < 0.2 && done != total)
            return;
        p->last = t;
        if (total > 0)
            fprintf(stderr, "\r%s: %.1f of %.1f MB (%.0f%%)   ", name, done / 1e6, total / 1e6,
                    100.0 * (double)done / (double)total);
        else
            fprintf(stderr, "\r%s: %.1f MB   ", name, done / 1e6);
    } else if (step > p->last_step) {
        p->last_step = step;
        fprintf(stderr, "%s: %.1f of %.1f MB (%d%%)\n", name, done / 1e6, total / 1e6,
                10 * step);
    }
}

static int fetch_one(const mp_registry *reg, const mp_dataset_info *d, const data_args *a)
{
    mp_fetch_result how;
    progress_state ps = { .tty = isatty(2), .last_step = -1 };
    mp_fetch_source src = a->source;
    src.progress = on_progress;
    src.progress_arg = &ps;
    mp_status st = mp_registry_fetch(reg, d->name, a->dest, &src, &how);
    if (ps.tty && ps.last > 0)
        fputc('\n', stderr);
    if (st && d->file && !have_source(a))
        return cli_fail(VERB, "%s: %s (set MOLPROP_DATA_MIRROR to a directory holding the "
                        "dataset files, or MOLPROP_DATA_URL to a base URL; or pass --mirror "
                        "DIR or --url URL)", d->name, mp_error_message());
    if (st)
        return cli_fail(VERB, "%s: %s", d->name, mp_error_message());
    printf("%-16s %s/%s: ", d->name, a->dest, d->file);
    if (how == MP_FETCH_MIRROR)
        printf("copied from %s\n", a->mirror_label);
    else if (how == MP_FETCH_DOWNLOADED)
        printf("downloaded from %s\n", a->source.url && *a->source.url ? a->url_label : d->url);
    else
        printf("already present, checksum ok\n");
    char hex[65];
    if (!d->sha256 && how != MP_FETCH_PRESENT &&
        mp_registry_local_sha256(reg, d->name, a->dest, hex) == MP_OK)
        printf("%-16s no checksum pinned: recorded SHA-256 %s in %s/%s.sha256 (pin it in the "
               "registry)\n", d->name, hex, a->dest, d->file);
    return 0;
}

static int data_fetch(data_args *ap)
{
    data_args a = *ap;
    if (a.n_names == 0) {
        cli_fail(VERB, "fetch needs dataset names or 'all'");
        fputs(usage_fetch, stderr);
        return 1;
    }
    mp_registry *reg;
    if (load_registry(&a, &reg))
        return 1;
    int failed = 0;
    if (wants_all(&a)) {
        for (size_t i = 0; i < mp_registry_count(reg); i++) {
            const mp_dataset_info *d = mp_registry_at(reg, i);
            if (d->file && !d->sha256) {
                fprintf(stderr, "molprop data: note: %s (%ld molecules, no pinned checksum) is "
                        "fetched by name only: molprop data fetch %s\n", d->name, d->rows, d->name);
            } else if (d->file) {
                if (fetch_one(reg, d, &a)) {
                    failed = 1;
                    if (!have_source(&a) || mp_interrupted())
                        break;   /* no source: the rest would fail alike */
                }
            }
            else
                fprintf(stderr, "molprop data: note: %s has no file available; skipped\n",
                        d->name);
        }
    } else {
        for (int i = 0; i < a.n_names && !mp_interrupted(); i++)   /* a stop ends the list */
            failed |= fetch_one(reg, mp_registry_find(reg, a.names[i]), &a);
    }
    mp_registry_free(reg);
    return failed;
}

/* ===================================================================== */
/* verify                                                                 */
/* ===================================================================== */

/* Checks one dataset; `named` makes absence a failure. */
static int verify_one(const mp_registry *reg, const mp_dataset_info *d, const char *dest,
                      int named, int *checked)
{
    if (!d->file) {
        if (named)
            return cli_fail(VERB, "%s: not available: the registry has no file for it", d->name);
        return 0;
    }
    char *p = local_path(dest, d->file);
    if (!p)
        return cli_fail(VERB, "out of memory");
    int rc = 0;
    char hex[65], want[65];
    if (access(p, F_OK) != 0) {
        if (named)
            rc = cli_fail(VERB, "%s: %s is missing (molprop data fetch %s)", d->name, p, d->name);
        else
            printf("%-16s %s: not present\n", d->name, p);
    } else if (mp_registry_local_sha256(reg, d->name, dest, want) != MP_OK) {
        rc = cli_fail(VERB, "%s: %s", d->name, mp_error_message());
    } else if (mp_sha256_file(p, hex) != MP_OK) {
        rc = cli_fail(VERB, "%s: %s", d->name, mp_error_message());
    } else if (strcmp(hex, want)) {
        rc = cli_fail(VERB, "%s: %s has SHA-256 %s, expected %s", d->name, p, hex, want);
        ++*checked;
    } else {
        printf("%-16s %s: ok\n", d->name, p);
        ++*checked;
    }
    free(p);
    return rc;
}

static int data_verify(data_args *ap)
{
    data_args a = *ap;
    mp_registry *reg;
    if (load_registry(&a, &reg))
        return 1;
    int failed = 0, checked = 0;
    if (a.n_names == 0 || wants_all(&a)) {
        for (size_t i = 0; i < mp_registry_count(reg); i++)
            failed |= verify_one(reg, mp_registry_at(reg, i), a.dest, 0, &checked);
        if (checked == 0)
            printf("no dataset files in %s (molprop data fetch NAME...|all)\n", a.dest);
    } else {
        for (int i = 0; i < a.n_names; i++)
            failed |= verify_one(reg, mp_registry_find(reg, a.names[i]), a.dest, 1, &checked);
    }
    mp_registry_free(reg);
    return failed;
}

/* ===================================================================== */
/* Dispatch                                                               */
/* ===================================================================== */

int cli_data(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage_main, stdout);
        return 0;
    }
    static const struct {
        const char *name, *usage;
        int (*fn)(data_args *);
    } cmds[] = {
        { "list", usage_list, data_list },
        { "fetch", usage_fetch, data_fetch },
        { "verify", usage_verify, data_verify },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(cmd, cmds[i].name) != 0)
            continue;
        data_args a;
        int rc = parse_args(argc - 1, argv + 1, cmds[i].usage, &a);
        if (rc)
            return rc == 2 ? 0 : 1;
        rc = cmds[i].fn(&a);
        mp_options_free(a.o);
        return rc;
    }
    cli_fail(VERB, "unknown command '%s' (list, fetch or verify)", cmd);
    fputs(usage_main, stderr);
    return 1;
}
