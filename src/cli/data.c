/*
 * data.c - `molprop data list|fetch|verify`: the benchmark dataset registry
 * (data/datasets.tsv) seen from the command line.  Thin glue over
 * src/data/registry.h.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VERB "data"

static const char usage_main[] =
    "usage: molprop data <command> [options]\n"
    "\n"
    "The benchmark datasets of Yang et al. 2019, listed in data/datasets.tsv.\n"
    "\n"
    "  list              show every dataset: rows, tasks, task type, metric, present locally\n"
    "  fetch NAME...|all copy (from $MOLPROP_DATA_MIRROR) or download (from $MOLPROP_DATA_URL)\n"
    "                    datasets into data/, checking their SHA-256\n"
    "  verify [NAME...]  check the SHA-256 of local dataset files\n"
    "\n"
    "molprop data <command> --help for its options.\n";

static const char usage_list[] =
    "usage: molprop data list [--dest DIR] [--registry FILE]\n"
    "\n"
    "Prints a table of the registry's datasets: name, rows, tasks, task type, the\n"
    "paper's metric, and whether the file is present in DIR (default data/).\n"
    "\n"
    "  --dest DIR       where fetched files live (default: data)\n"
    "  --registry FILE  the registry (default: $MOLPROP_REGISTRY or data/datasets.tsv)\n";

static const char usage_fetch[] =
    "usage: molprop data fetch NAME...|all [--dest DIR] [--registry FILE]\n"
    "\n"
    "Puts each named dataset's file into DIR (default data/).  The source is the\n"
    "directory $MOLPROP_DATA_MIRROR, or else $MOLPROP_DATA_URL + \"/\" + file\n"
    "(http, https, file://).  The bytes are checked against the registry's SHA-256\n"
    "before they are renamed into place, so a mismatch leaves nothing behind.  A\n"
    "file already present with the right checksum is left alone.  'all' fetches\n"
    "every dataset that has a file (pcba and chembl have none).\n"
    "\n"
    "  --dest DIR       target directory (default: data; created if missing)\n"
    "  --registry FILE  the registry (default: $MOLPROP_REGISTRY or data/datasets.tsv)\n";

static const char usage_verify[] =
    "usage: molprop data verify [NAME...] [--dest DIR] [--registry FILE]\n"
    "\n"
    "Checks the SHA-256 of local dataset files against the registry.  With names,\n"
    "each must be present and correct; without, every dataset file present in DIR\n"
    "is checked (absent ones are listed, not counted as failures).\n"
    "\n"
    "  --dest DIR       where the files are (default: data)\n"
    "  --registry FILE  the registry (default: $MOLPROP_REGISTRY or data/datasets.tsv)\n";

typedef struct {
    const char *dest;
    const char *registry;
    char      **names;
    int         n_names;
} data_args;

/* Splits options from names.  Returns 0 to go on, 1 on error, 2 after --help. */
static int parse_args(int argc, char **argv, const char *usage, data_args *a)
{
    a->dest = "data";
    a->registry = NULL;
    a->names = argv + 1;   /* names are compacted in place at the front */
    a->n_names = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            fputs(usage, stdout);
            return 2;
        }
        if (!strcmp(s, "--dest") || !strcmp(s, "--registry")) {
            if (i + 1 >= argc)
                return cli_fail(VERB, "%s needs a value", s);
            if (!strcmp(s, "--dest"))
                a->dest = argv[++i];
            else
                a->registry = argv[++i];
            continue;
        }
        if (s[0] == '-' && s[1]) {
            cli_fail(VERB, "unknown option '%s'", s);
            fputs(usage, stderr);
            return 1;
        }
        a->names[a->n_names++] = argv[i];
    }
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
    char *p = mp_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dest, file);
    return p;
}

/* ===================================================================== */
/* list                                                                   */
/* ===================================================================== */

static int data_list(int argc, char **argv)
{
    data_args a;
    int rc = parse_args(argc, argv, usage_list, &a);
    if (rc)
        return rc == 2 ? 0 : 1;
    if (a.n_names)
        return cli_fail(VERB, "list takes no dataset names (got '%s')", a.names[0]);
    mp_registry *reg;
    if (load_registry(&a, &reg))
        return 1;
    printf("%-16s %7s %6s  %-14s %-8s %s\n", "name", "rows", "tasks", "type", "metric", "local");
    for (size_t i = 0; i < reg->n; i++) {
        const mp_dataset_info *d = &reg->items[i];
        char rows[32] = "-", tasks[32] = "-";
        const char *local = "no (no file)";
        if (d->file) {
            snprintf(rows, sizeof rows, "%ld", d->rows);
            snprintf(tasks, sizeof tasks, "%d", d->tasks);
            char *p = local_path(a.dest, d->file);
            local = p && access(p, F_OK) == 0 ? "yes" : "no";
            mp_free(p);
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

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

/* 1 if names hold "all". */
static int wants_all(const data_args *a)
{
    for (int i = 0; i < a->n_names; i++)
        if (!strcmp(a->names[i], "all"))
            return 1;
    return 0;
}

static int fetch_one(const mp_registry *reg, const mp_dataset_info *d, const char *dest)
{
    mp_fetch_result how;
    mp_status st = mp_registry_fetch(reg, d->name, dest, &how);
    if (st)
        return cli_fail(VERB, "%s: %s", d->name, mp_error_message());
    const char *src = how == MP_FETCH_MIRROR ? "copied from MOLPROP_DATA_MIRROR"
                    : how == MP_FETCH_DOWNLOADED ? "downloaded from MOLPROP_DATA_URL"
                    : "already present, checksum ok";
    printf("%-16s %s/%s: %s\n", d->name, dest, d->file, src);
    return 0;
}

static int data_fetch(int argc, char **argv)
{
    data_args a;
    int rc = parse_args(argc, argv, usage_fetch, &a);
    if (rc)
        return rc == 2 ? 0 : 1;
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
        for (size_t i = 0; i < reg->n; i++) {
            if (reg->items[i].file) {
                if (fetch_one(reg, &reg->items[i], a.dest)) {
                    failed = 1;
                    if (!env_set("MOLPROP_DATA_MIRROR") && !env_set("MOLPROP_DATA_URL"))
                        break;   /* no source: the rest would fail alike */
                }
            }
            else
                fprintf(stderr, "molprop data: note: %s has no file available; skipped\n",
                        reg->items[i].name);
        }
    } else {
        for (int i = 0; i < a.n_names; i++)
            failed |= fetch_one(reg, mp_registry_find(reg, a.names[i]), a.dest);
    }
    mp_registry_free(reg);
    return failed;
}

/* ===================================================================== */
/* verify                                                                 */
/* ===================================================================== */

/* Checks one dataset; `named` makes absence a failure. */
static int verify_one(const mp_dataset_info *d, const char *dest, int named, int *checked)
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
    char hex[65];
    if (access(p, F_OK) != 0) {
        if (named)
            rc = cli_fail(VERB, "%s: %s is missing (molprop data fetch %s)", d->name, p, d->name);
        else
            printf("%-16s %s: not present\n", d->name, p);
    } else if (mp_sha256_file(p, hex) != MP_OK) {
        rc = cli_fail(VERB, "%s: %s", d->name, mp_error_message());
    } else if (strcmp(hex, d->sha256)) {
        rc = cli_fail(VERB, "%s: %s has SHA-256 %s, expected %s", d->name, p, hex, d->sha256);
        ++*checked;
    } else {
        printf("%-16s %s: ok\n", d->name, p);
        ++*checked;
    }
    mp_free(p);
    return rc;
}

static int data_verify(int argc, char **argv)
{
    data_args a;
    int rc = parse_args(argc, argv, usage_verify, &a);
    if (rc)
        return rc == 2 ? 0 : 1;
    mp_registry *reg;
    if (load_registry(&a, &reg))
        return 1;
    int failed = 0, checked = 0;
    if (a.n_names == 0 || wants_all(&a)) {
        for (size_t i = 0; i < reg->n; i++)
            failed |= verify_one(&reg->items[i], a.dest, 0, &checked);
        if (checked == 0)
            printf("no dataset files in %s (molprop data fetch NAME...|all)\n", a.dest);
    } else {
        for (int i = 0; i < a.n_names; i++)
            failed |= verify_one(mp_registry_find(reg, a.names[i]), a.dest, 1, &checked);
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
    if (!strcmp(cmd, "list"))
        return data_list(argc - 1, argv + 1);
    if (!strcmp(cmd, "fetch"))
        return data_fetch(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify"))
        return data_verify(argc - 1, argv + 1);
    cli_fail(VERB, "unknown command '%s' (list, fetch or verify)", cmd);
    fputs(usage_main, stderr);
    return 1;
}
