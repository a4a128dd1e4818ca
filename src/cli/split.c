/*
 * split.c - `molprop split`: cut a CSV into train.csv, val.csv and test.csv
 * exactly as Chemprop v1 splits it (random, scaffold_balanced, cv,
 * cv-no-test), so any tool can train and test on the same molecules.
 *
 * Flow: read the table (SMILES only) -> RDKit drops invalid molecules (and
 * computes scaffolds when the split needs them) -> mp_split_make on the valid
 * rows -> stream the file again and copy every row, all columns, into its
 * set's file, in file order.  The three files are written atomically and
 * only published when all three are complete.
 */
#include "cli.h"
#include "data/split.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *VERB = "split";

static void usage(FILE *fp)
{
    fprintf(fp,
        "usage: molprop split --data FILE --out DIR [options]\n"
        "\n"
        "Splits FILE (CSV, optionally gzipped) into DIR/train.csv, DIR/val.csv and\n"
        "DIR/test.csv with the header and every column of the original rows, in file\n"
        "order.  The sets are Chemprop v1's for the same seed and sizes.  Rows whose\n"
        "SMILES RDKit rejects are left out of all three and reported on stderr.\n"
        "\n"
        "  --data FILE           input CSV (.csv or .csv.gz)\n"
        "  --out DIR             output folder (created if absent)\n"
        "  --split TYPE          random (default), scaffold_balanced, cv, cv-no-test\n"
        "  --seed N              Chemprop's --seed (default 0); with cv it picks the\n"
        "                        test fold (N %% k) and the val fold ((N+1) %% k)\n"
        "  --split-sizes A,B,C   train,val,test fractions (default 0.8,0.1,0.1);\n"
        "                        non-negative, summing to 1; ignored by cv\n"
        "  --folds K             number of folds for cv (default 5)\n"
        "  --smiles-column NAME  SMILES column (default: 'smiles', else the first)\n"
        "  --threads N           threads for RDKit parsing (default: all)\n");
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return cli_fail(VERB, "--out: bad folder name '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return cli_fail(VERB, "cannot create folder '%s': %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_fail(VERB, "--out: '%s' is not a folder", path);
    return 0;
}

/* Takes the value of option argv[*i] (either "--opt value" or "--opt=value"). */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *err)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != 0)
        return NULL;
    if (*i + 1 >= argc) {
        cli_fail(VERB, "%s needs a value", name);
        *err = 1;
        return NULL;
    }
    return argv[++*i];
}

/* Copies the rows of `path` into the three set files by set_of_row (-1: none).
 * The files are committed only when all are written. */
static int write_sets(const char *path, const mp_dataset *d, const signed char *set_of_row,
                      const char *out_dir)
{
    static const char *names[3] = { "train.csv", "val.csv", "test.csv" };
    mp_afile f[3];
    memset(f, 0, sizeof f);
    mp_csv_reader *rd = NULL;
    int rc = 1;
    mp_status st;
    for (int k = 0; k < 3; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", out_dir, names[k]);
        if ((st = mp_afile_open(&f[k], p)) != MP_OK) {
            cli_fail_status(VERB, st);
            goto done;
        }
    }
    if ((st = mp_csv_open(&rd, path)) != MP_OK) {
        cli_fail_status(VERB, st);
        goto done;
    }
    char **fields;
    size_t n_fields, line, row = 0;
    int header = 1;
    for (;;) {
        if ((st = mp_csv_next(rd, &fields, &n_fields, &line)) != MP_OK) {
            cli_fail_status(VERB, st);
            goto done;
        }
        if (n_fields == 0)
            break;
        if (header) {
            for (int k = 0; k < 3; k++)
                mp_csv_write_record(f[k].fp, fields, n_fields);
            header = 0;
            continue;
        }
        /* The file must not have changed since it was loaded. */
        if (row >= d->n_rows || line != d->line[row]) {
            cli_fail(VERB, "%s:%zu: the file changed while it was being split", path, line);
            goto done;
        }
        if (set_of_row[row] >= 0)
            mp_csv_write_record(f[(int)set_of_row[row]].fp, fields, n_fields);
        row++;
    }
    if (row != d->n_rows) {
        cli_fail(VERB, "%s: the file changed while it was being split", path);
        goto done;
    }
    for (int k = 0; k < 3; k++)
        if (ferror(f[k].fp)) {
            cli_fail(VERB, "cannot write %s/%s: %s", out_dir, names[k], strerror(errno));
            goto done;
        }
    /* Publish only now; a failure here can leave the earlier files renamed. */
    for (int k = 0; k < 3; k++)
        if ((st = mp_afile_commit(&f[k])) != MP_OK) {
            cli_fail_status(VERB, st);
            goto done;
        }
    rc = 0;
done:
    for (int k = 0; k < 3; k++)   /* no-op for committed or unopened files */
        mp_afile_abort(&f[k]);
    if (rd)
        mp_csv_close(rd);
    return rc;
}

int cli_split(int argc, char **argv)
{
    const char *data = NULL, *out = NULL, *smiles_col = NULL;
    mp_split_opts o = mp_split_opts_default();
    long threads = 0;
    int err = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        long x;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if ((v = opt_value(argc, argv, &i, "--data", &err))) {
            data = v;
        } else if ((v = opt_value(argc, argv, &i, "--out", &err))) {
            out = v;
        } else if ((v = opt_value(argc, argv, &i, "--smiles-column", &err))) {
            smiles_col = v;
        } else if ((v = opt_value(argc, argv, &i, "--split", &err))) {
            if (mp_split_type_parse(v, &o.type) != MP_OK)
                return cli_fail_status(VERB, MP_ERR_ARG);
        } else if ((v = opt_value(argc, argv, &i, "--split-sizes", &err))) {
            if (mp_split_sizes_parse(v, o.sizes) != MP_OK)
                return cli_fail_status(VERB, MP_ERR_ARG);
        } else if ((v = opt_value(argc, argv, &i, "--seed", &err))) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || *v == '-')
                return cli_fail(VERB, "--seed expects a non-negative integer, got '%s'", v);
            o.seed = s;
        } else if ((v = opt_value(argc, argv, &i, "--folds", &err))) {
            if (cli_parse_int(VERB, "--folds", v, 2, 1000000, &x))
                return 1;
            o.n_folds = (int)x;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &err))) {
            if (cli_parse_int(VERB, "--threads", v, 0, 4096, &threads))
                return 1;
        } else if (err) {
            return 1;
        } else {
            cli_fail(VERB, "unknown option '%s'", argv[i]);
            usage(stderr);
            return 1;
        }
        if (err)
            return 1;
    }
    if (!data || !out) {
        cli_fail(VERB, "--data and --out are required");
        usage(stderr);
        return 1;
    }

    mp_column_spec spec = { .smiles_column = smiles_col, .no_targets = 1 };
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    mp_split s;
    memset(&s, 0, sizeof s);
    size_t *rows = NULL;
    signed char *set_of_row = NULL;
    int rc = 1;
    mp_status st;

    if ((st = mp_dataset_load(&d, data, &spec)) != MP_OK)
        return cli_fail_status(VERB, st);
    if (d->n_rows > (size_t)INT32_MAX) {
        cli_fail(VERB, "%s: too many rows (%zu)", data, d->n_rows);
        goto done;
    }
    mp_featurize_opts fo = { .layout = MP_ATOM_V1,
                             .scaffolds = o.type == MP_SPLIT_SCAFFOLD_BALANCED,
                             .n_threads = (int)threads };
    if ((st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo)) != MP_OK) {
        cli_fail_status(VERB, st);
        goto done;
    }
    rows = mp_malloc((d->n_rows ? d->n_rows : 1) * sizeof *rows);
    set_of_row = mp_malloc(d->n_rows ? d->n_rows : 1);
    if (!rows || !set_of_row) {
        cli_fail(VERB, "out of memory");
        goto done;
    }
    size_t n_valid = 0;
    for (size_t i = 0; i < d->n_rows; i++) {
        if (f->g.valid[i])
            rows[n_valid++] = i;
        else
            fprintf(stderr, "molprop split: %s:%zu: invalid SMILES '%s' (%s), left out\n",
                    data, d->line[i], d->smiles[i],
                    f->error && f->error[i] ? f->error[i] : "rejected by RDKit");
    }
    if (n_valid == 0) {
        cli_fail(VERB, "%s: no valid molecule in column '%s' (use --smiles-column?)", data,
                 d->smiles_name);
        goto done;
    }
    if ((st = mp_split_make(&s, rows, n_valid, (const char *const *)f->scaffold, &o)) != MP_OK ||
        (st = mp_split_label_rows(&s, d->n_rows, set_of_row)) != MP_OK) {
        cli_fail_status(VERB, st);
        goto done;
    }
    if (make_dirs(out) || write_sets(data, d, set_of_row, out))
        goto done;
    printf("%s split (seed %llu) of %s: train %zu, val %zu, test %zu",
           mp_split_type_name(o.type), (unsigned long long)o.seed, data, s.n[0], s.n[1], s.n[2]);
    if (n_valid < d->n_rows)
        printf("; %zu invalid row%s left out", d->n_rows - n_valid,
               d->n_rows - n_valid == 1 ? "" : "s");
    printf("\n");
    rc = 0;
done:
    mp_free(rows);
    mp_free(set_of_row);
    mp_split_free(&s);
    mp_features_free(f);
    mp_dataset_free(d);
    return rc;
}
