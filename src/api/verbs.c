/*
 * verbs.c - the file pipelines of `molprop featurize` and `molprop split`:
 * read a CSV, featurize it (RDKit), and write a feature cache and/or a
 * reference dump, or the three set files of a Chemprop v1 split.  Invalid
 * rows are recorded in the summary (the caller reports them).
 */
#include "api/api.h"

#include "api/options.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "data/split.h"
#include "featurize/featurize.h"

#include <errno.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Records every invalid molecule of f (rows of d) in s. */
static mp_status record_invalid(mp_summary *s, const mp_dataset *d, const mp_features *f)
{
    mp_status st = MP_OK;
    for (size_t i = 0; i < d->n_rows && !st; i++)
        if (!f->g.valid[i])
            st = mp_summary_add_invalid(s, d->line[i], d->smiles[i], f->error ? f->error[i] : NULL);
    return st;
}

/* ===================================================================== */
/* featurize                                                              */
/* ===================================================================== */

/* Fails early (before the long part) when out's directory is not writable. */
static mp_status check_out_dir(const char *out)
{
    char *copy = mp_strdup(out);
    if (!copy)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    const char *dir = dirname(copy);
    struct stat sb;
    const char *why = stat(dir, &sb) != 0    ? "does not exist"
                      : !S_ISDIR(sb.st_mode) ? "is not a directory"
                      : access(dir, W_OK)    ? "is not writable"
                                             : NULL;
    mp_status st = why ? mp_error_set(MP_ERR_IO, "cannot write %s: %s %s", out, dir, why) : MP_OK;
    mp_free(copy);
    return st;
}

mp_status mp_run_featurize(const mp_options *o, mp_summary **out)
{
    if (out)
        *out = NULL;
    mp_status st = mp_run_check(o, "featurize");
    if (st)
        return st;
    mp_featurize_args a;
    memset(&a, 0, sizeof a);
    if ((st = mp_options_apply(o, &a)))
        return st;
    if (!a.out_path && !a.dump_dir)
        return mp_error_set(MP_ERR_ARG, "nothing to write: give --out FILE.mpf and/or --dump DIR");
    if (a.gz && !a.dump_dir)
        return mp_error_set(MP_ERR_ARG, "--gz applies to --dump, which is not given");
    if (a.out_path && (st = check_out_dir(a.out_path)))
        return st;

    mp_column_spec spec = { .smiles_column = a.smiles_column, .no_targets = 1 };
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    mp_summary *s = NULL;
    if ((st = mp_dataset_load(&d, a.data_path, &spec)))
        return st;
    if (d->n_rows > INT32_MAX) {
        st = mp_error_set(MP_ERR_ARG, "%s: too many rows for one feature store", a.data_path);
        goto done;
    }
    mp_featurize_opts fo = { .layout = a.layout, .morgan = !a.no_morgan,
                             .descriptors = !a.no_descriptors, .scaffolds = a.scaffolds,
                             .n_threads = a.threads };
    for (int v = 0; v < MP_N_VECS; v++)
        if (a.features & (1u << v))
            mp_vec_request((mp_vec)v, &fo);
    int32_t n = (int32_t)d->n_rows;
    double t0 = mp_time_now();
    if ((st = mp_featurize(&f, (const char *const *)d->smiles, n, &fo)))
        goto done;
    double secs = mp_time_now() - t0;
    int32_t n_valid = 0;
    for (int32_t i = 0; i < n; i++)
        n_valid += f->g.valid[i];
    if (a.dump_dir && (st = mp_features_dump(f, (const char *const *)d->smiles, a.dump_dir, a.gz)))
        goto done;
    if (a.out_path && (st = mp_features_save(f, a.out_path)))
        goto done;
    if ((st = mp_summary_new(&s)) || (st = record_invalid(s, d, f)) ||
        (st = mp_summary_put_number(s, "n_mols", n)) ||
        (st = mp_summary_put_number(s, "n_valid", n_valid)) ||
        (st = mp_summary_put_number(s, "n_invalid", n - n_valid)) ||
        (st = mp_summary_put_number(s, "n_atoms", f->g.n_atoms)) ||
        (st = mp_summary_put_number(s, "n_bonds", f->g.n_edges / 2)) ||
        (st = mp_summary_put_number(s, "seconds", secs)) ||
        (st = mp_summary_put_number(s, "threads", a.threads > 0 ? a.threads : mp_threads_get())) ||
        (st = mp_summary_put_number(s, "gz", a.gz)) ||
        (st = mp_summary_put_text(s, "data", d->path)) ||
        (st = mp_summary_put_text(s, "layout", mp_atom_layout_name(a.layout))) ||
        (a.out_path && (st = mp_summary_put_text(s, "out", a.out_path))) ||
        (a.dump_dir && (st = mp_summary_put_text(s, "dump", a.dump_dir))))
        goto done;
done:
    mp_features_free(f);
    mp_dataset_free(d);
    if (st)
        mp_summary_free(s);
    else
        mp_summary_hand_over(s, out);
    return st;
}

/* ===================================================================== */
/* split                                                                  */
/* ===================================================================== */

/* Copies the rows of `path` into the three set files by set_of_row (-1: none),
 * streaming the file again, every column, in file order.  The files are
 * published only when all three are written. */
static mp_status write_sets(const char *path, const mp_dataset *d, const signed char *set_of_row,
                            const char *out_dir)
{
    static const char *names[3] = { "train.csv", "val.csv", "test.csv" };
    mp_afile f[3];
    memset(f, 0, sizeof f);
    mp_csv_reader *rd = NULL;
    mp_status st = MP_OK;
    for (int k = 0; k < 3 && !st; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", out_dir, names[k]);
        st = mp_afile_open(&f[k], p);
    }
    if (st || (st = mp_csv_open(&rd, path)))
        goto done;
    char **fields;
    size_t n_fields, line, row = 0;
    int header = 1;
    for (;;) {
        if ((st = mp_csv_next(rd, &fields, &n_fields, &line)))
            goto done;
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
            st = mp_error_set(MP_ERR_IO, "%s:%zu: the file changed while it was being split",
                              path, line);
            goto done;
        }
        if (set_of_row[row] >= 0)
            mp_csv_write_record(f[(int)set_of_row[row]].fp, fields, n_fields);
        row++;
    }
    if (row != d->n_rows) {
        st = mp_error_set(MP_ERR_IO, "%s: the file changed while it was being split", path);
        goto done;
    }
    for (int k = 0; k < 3; k++)
        if (ferror(f[k].fp)) {
            st = mp_error_set(MP_ERR_IO, "cannot write %s/%s: %s", out_dir, names[k],
                              strerror(errno));
            goto done;
        }
    /* Publish only now; a failure here can leave the earlier files renamed. */
    for (int k = 0; k < 3 && !st; k++)
        st = mp_afile_commit(&f[k]);
done:
    for (int k = 0; k < 3; k++)   /* no-op for committed or unopened files */
        mp_afile_abort(&f[k]);
    if (rd)
        mp_csv_close(rd);
    return st;
}

mp_status mp_run_split(const mp_options *o, mp_summary **out)
{
    if (out)
        *out = NULL;
    mp_status st = mp_run_check(o, "split");
    if (st)
        return st;
    mp_split_args a;
    memset(&a, 0, sizeof a);
    a.split = mp_split_opts_default();
    if ((st = mp_options_apply(o, &a)))
        return st;

    mp_column_spec spec = { .smiles_column = a.smiles_column, .no_targets = 1 };
    mp_dataset *d = NULL;
    mp_features *f = NULL;
    mp_summary *s = NULL;
    mp_split sp;
    memset(&sp, 0, sizeof sp);
    size_t *rows = NULL;
    signed char *set_of_row = NULL;
    mp_made_dirs made = { 0 };   /* --out's folders this run made: removed on failure */

    if ((st = mp_dataset_load(&d, a.data_path, &spec)))
        return st;
    if (d->n_rows > (size_t)INT32_MAX) {
        st = mp_error_set(MP_ERR_ARG, "%s: too many rows (%zu)", a.data_path, d->n_rows);
        goto done;
    }
    mp_featurize_opts fo = { .layout = MP_ATOM_V1,
                             .scaffolds = a.split.type == MP_SPLIT_SCAFFOLD_BALANCED,
                             .n_threads = a.threads };
    if ((st = mp_featurize(&f, (const char *const *)d->smiles, (int32_t)d->n_rows, &fo)) ||
        (st = mp_summary_new(&s)) || (st = record_invalid(s, d, f)))
        goto done;
    rows = mp_malloc((d->n_rows ? d->n_rows : 1) * sizeof *rows);
    set_of_row = mp_malloc(d->n_rows ? d->n_rows : 1);
    if (!rows || !set_of_row) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n_valid = 0;
    for (size_t i = 0; i < d->n_rows; i++)
        if (f->g.valid[i])
            rows[n_valid++] = i;
    if (n_valid == 0) {
        st = mp_error_set(MP_ERR_ARG, "%s: no valid molecule in column '%s' (use --smiles-column?)",
                          a.data_path, d->smiles_name);
        goto done;
    }
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a.split.seed);
    if ((st = mp_split_make(&sp, rows, n_valid, (const char *const *)f->scaffold, &a.split)) ||
        (st = mp_split_label_rows(&sp, d->n_rows, set_of_row)) || (st = mp_mkdirs(a.out_dir, &made)) ||
        (st = write_sets(a.data_path, d, set_of_row, a.out_dir)) ||
        (st = mp_summary_put_number(s, "n_rows", (double)d->n_rows)) ||
        (st = mp_summary_put_number(s, "n_train", (double)sp.n[MP_SET_TRAIN])) ||
        (st = mp_summary_put_number(s, "n_val", (double)sp.n[MP_SET_VAL])) ||
        (st = mp_summary_put_number(s, "n_test", (double)sp.n[MP_SET_TEST])) ||
        (st = mp_summary_put_number(s, "n_invalid", (double)(d->n_rows - n_valid))) ||
        (st = mp_summary_put_text(s, "data", a.data_path)) ||
        (st = mp_summary_put_text(s, "split", mp_split_type_name(a.split.type))) ||
        (st = mp_summary_put_text(s, "seed", seed)))
        goto done;
done:
    if (st)
        mp_mkdirs_undo(&made);
    else
        mp_mkdirs_keep(&made);
    mp_free(rows);
    mp_free(set_of_row);
    mp_split_free(&sp);
    mp_features_free(f);
    mp_dataset_free(d);
    if (st)
        mp_summary_free(s);
    else
        mp_summary_hand_over(s, out);
    return st;
}
