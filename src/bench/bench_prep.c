/*
 * bench_prep.c - one dataset of the grid made ready for all its runs
 * (bench.h): the CSV read once, its features taken from the feature cache
 * or computed once (every molecule vector any variant of the grid reads,
 * and scaffolds for a scaffold split) and stored in the cache, keyed by a
 * hash of the file's content and of everything featurization depends on;
 * then one split per seed, made as mp_train makes it, with its checksum.
 * And the export of those splits for other tools (--export-splits).
 */
#include "bench/bench.h"

#include "data/csv.h"
#include "run/trainer.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ===================================================================== */
/* Hashes and split text                                                  */
/* ===================================================================== */

mp_status mp_bench_text_sha256(const char *text, size_t n, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_Digest(text, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32)
        return mp_error_set(MP_ERR_INTERNAL, "libcrypto could not compute a SHA-256 digest");
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < len; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
    return MP_OK;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

mp_status mp_bench_split_text(const mp_split *sp, mp_buf *out)
{
    static const char *names[3] = { "train", "val", "test" };
    mp_status st = mp_buf_append(out, "set\trows\n", 9);
    for (int s = 0; s < 3 && !st; s++) {
        size_t *rows = mp_malloc(sizeof(size_t) * (sp->n[s] ? sp->n[s] : 1));
        if (!rows)
            return mp_error_set(MP_ERR_NOMEM, "out of memory");
        memcpy(rows, sp->rows[s], sizeof(size_t) * sp->n[s]);
        qsort(rows, sp->n[s], sizeof(size_t), cmp_size);
        st = mp_buf_printf(out, "%s\t", names[s]);
        for (size_t i = 0; i < sp->n[s] && !st; i++)
            st = mp_buf_printf(out, i ? ",%zu" : "%zu", rows[i]);
        if (!st)
            st = mp_buf_append(out, "\n", 1);
        mp_free(rows);
    }
    return st;
}

/* ===================================================================== */
/* The feature cache                                                      */
/* ===================================================================== */

/* The cache file of dataset ds: <dir>/<name>-<16 hex>.mpf. */
static mp_status cache_path(const mp_bench_dataset *ds, const char *sha,
                            const mp_featurize_opts *fo, const char *dir, char *path, size_t n)
{
    char text[2048], hex[65];
    int len = snprintf(text, sizeof text,
                       "molprop feature cache\nmolprop=%s\nrdkit=%s\ndata=%s\nlayout=%s\n"
                       "morgan=%d\ndescriptors=%d\nscaffolds=%d\n", mp_version(),
                       mp_rdkit_version(), sha, mp_atom_layout_name(fo->layout), fo->morgan != 0,
                       fo->descriptors != 0, fo->scaffolds != 0);
    if (fo->sets && len > 0 && (size_t)len < sizeof text)   /* keys without sets unchanged */
        len += snprintf(text + len, sizeof text - (size_t)len, "sets=%u\n", fo->sets);
    mp_status st = mp_bench_text_sha256(text, (size_t)len, hex);
    if (st)
        return st;
    int k = snprintf(path, n, "%s/%s-%.16s.mpf", dir, ds->name, hex);
    if (k < 0 || (size_t)k >= n)
        return mp_error_set(MP_ERR_ARG, "cache path too long under %s", dir);
    return MP_OK;
}

mp_status mp_bench_mkdirs(const char *path, const char *option)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return mp_error_set(MP_ERR_ARG, "%s%sbad folder name '%s'", option ? option : "",
                            option ? ": " : "", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return mp_error_set(MP_ERR_IO, "cannot create folder '%s': %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mp_error_set(MP_ERR_IO, "'%s' is not a folder", path);
    return MP_OK;
}

/*
 * Stores f at path atomically: written to "<path>.part" (by
 * mp_features_save, itself atomic), then renamed.  Both names are on the
 * signal handler's list meanwhile, so an interruption leaves neither.
 */
static mp_status cache_store(const mp_features *f, const char *path)
{
    char part[4200], inner[4300];
    snprintf(part, sizeof part, "%s.part", path);
    snprintf(inner, sizeof inner, "%s.tmp.%ld", part, (long)getpid());
    int s1 = mp_bench_temp_register(part), s2 = mp_bench_temp_register(inner);
    mp_status st = mp_features_save(f, part);
    if (!st && rename(part, path) != 0)
        st = mp_error_set(MP_ERR_IO, "cannot rename %s to %s: %s", part, path, strerror(errno));
    if (st)
        (void)unlink(part);
    mp_bench_temp_unregister(s1);
    mp_bench_temp_unregister(s2);
    return st;
}

/* The features of p->d: from the cache when it holds them (a damaged or
 * mismatched file is featurized again and replaced), else computed. */
static mp_status features(mp_bench_prepared *p, const mp_bench_grid *g, const char *cache_dir)
{
    mp_train_opts t = mp_train_opts_default();
    t.features = g->features;
    t.split.type = g->a.split;
    t.threads = g->prep_threads > 0 ? g->prep_threads : g->a.threads;
    mp_featurize_opts fo = mp_train_featurize_opts(&t);
    char path[4096] = "";
    mp_status st;
    int cols = p->spec->atom_path || p->spec->bond_path;
    if (cache_dir && *cache_dir && !cols) {
        if ((st = mp_bench_mkdirs(cache_dir, NULL)) ||
            (st = cache_path(p->spec, p->sha256, &fo, cache_dir, path, sizeof path)))
            return st;
        if (access(path, R_OK) == 0) {
            if (mp_features_load(&p->f, path) == MP_OK && p->f->g.n_mols == (int32_t)p->d->n_rows) {
                p->cache_hit = 1;
                return MP_OK;
            }
            mp_features_free(p->f);   /* not ours after all: made again below */
            p->f = NULL;
            mp_error_clear();
        }
    }
    if (p->d->n_rows > INT32_MAX)
        return mp_error_set(MP_ERR_ARG, "%s: too many rows", p->spec->path);
    if ((st = mp_featurize(&p->f, (const char *const *)p->d->smiles, (int32_t)p->d->n_rows, &fo)))
        return st;
    if (cols) {   /* the user columns, unscaled: each run fits its scaler */
        mp_columns_opts co = { .atom_path = p->spec->atom_path, .bond_path = p->spec->bond_path };
        return mp_columns_read(&p->f->g, &co, (const char *const *)p->d->smiles);
    }
    return path[0] ? cache_store(p->f, path) : MP_OK;
}

/* ===================================================================== */
/* Preparing                                                              */
/* ===================================================================== */

void mp_bench_prepared_free(mp_bench_prepared *p)
{
    for (int i = 0; i < MP_BENCH_MAX_LIST; i++)
        mp_split_free(&p->split[i]);
    mp_labels_free(p->y);
    mp_features_free(p->f);
    mp_dataset_free(p->d);
    memset(p, 0, sizeof *p);
}

mp_status mp_bench_prepare(mp_bench_prepared *p, const mp_bench_grid *g,
                           const mp_bench_dataset *ds, const char *cache_dir)
{
    memset(p, 0, sizeof *p);
    p->spec = ds;
    double t0 = mp_time_now();
    mp_column_spec cols = { .target_columns = ds->targets, .ignore_columns = ds->ignore };
    mp_status st;
    int sparse = ds->task == MP_TASK_CLASSIFICATION && ds->rows_hint > 0 && ds->tasks_hint > 0 &&
                 (double)ds->rows_hint * ds->tasks_hint > MP_BENCH_SPARSE_CELLS;
    if ((st = mp_sha256_file(ds->path, p->sha256)) ||
        (st = sparse ? mp_labels_load(&p->d, &p->y, ds->path, &cols)
                     : mp_dataset_load(&p->d, ds->path, &cols)) ||
        (st = features(p, g, cache_dir)))
        goto fail;
    size_t *valid = mp_malloc(sizeof(size_t) * (p->d->n_rows ? p->d->n_rows : 1));
    if (!valid) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < p->d->n_rows; i++)
        if (p->f->g.valid[i])
            valid[p->n_valid++] = i;
    for (int k = 0; k < g->n_seeds && !st; k++) {
        /* as mp_train splits (trainer.c, split_rows) */
        mp_split_opts so = mp_split_opts_default();
        so.type = g->a.split;
        memcpy(so.sizes, g->a.split_sizes, sizeof so.sizes);
        so.seed = (uint64_t)g->seeds[k];
        mp_buf text = { 0 };
        char hex[65];
        if (p->n_valid == 0)
            st = mp_error_set(MP_ERR_FORMAT, "%s: no valid molecule", ds->path);
        if (!st)
            st = mp_split_make(&p->split[k], valid, p->n_valid,
                               (const char *const *)p->f->scaffold, &so);
        if (!st)
            st = mp_bench_split_text(&p->split[k], &text);
        if (!st)
            st = mp_bench_text_sha256(text.data, text.len, hex);
        if (!st)
            snprintf(p->split_sum[k], sizeof p->split_sum[k], "%.16s", hex);
        mp_buf_free(&text);
    }
    mp_free(valid);
    if (st)
        goto fail;
    p->seconds = mp_time_now() - t0;
    return MP_OK;
fail:
    mp_bench_prepared_free(p);
    return st;
}

/* ===================================================================== */
/* Exporting the splits                                                   */
/* ===================================================================== */

/* Every data record of the CSV, as CSV text (header in *header). */
static mp_status read_records(const mp_bench_prepared *p, char **header, char **rec)
{
    mp_csv_reader *rd = NULL;
    mp_status st = mp_csv_open(&rd, p->spec->path);
    if (st)
        return st;
    char **fields;
    size_t n_fields, line, row = 0;
    int first = 1;
    for (;;) {
        if ((st = mp_csv_next(rd, &fields, &n_fields, &line)) || n_fields == 0)
            break;
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (!mem) {
            st = mp_error_set(MP_ERR_NOMEM, "out of memory");
            break;
        }
        mp_csv_write_record(mem, fields, n_fields);
        fclose(mem);
        if (first) {
            *header = text;
            first = 0;
            continue;
        }
        if (row >= p->d->n_rows || line != p->d->line[row]) {
            free(text);
            st = mp_error_set(MP_ERR_IO, "%s:%zu: the file changed while it was exported",
                              p->spec->path, line);
            break;
        }
        rec[row++] = text;
    }
    mp_csv_close(rd);
    if (!st && row != p->d->n_rows)
        st = mp_error_set(MP_ERR_IO, "%s: the file changed while it was exported", p->spec->path);
    return st;
}

/* One file of text written atomically (its temporary name on the signal
 * handler's list meanwhile). */
typedef struct {
    mp_afile f;
    int      slot;
} out_file;

static mp_status out_open(out_file *o, const char *dir, const char *name)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    o->slot = mp_bench_temp_register(tmp);
    mp_status st = mp_afile_open(&o->f, path);
    if (st) {
        mp_bench_temp_unregister(o->slot);
        o->slot = -1;
    }
    return st;
}

static mp_status out_close(out_file *o, mp_status st)
{
    if (!o->f.fp)
        return st;
    if (!st && ferror(o->f.fp))
        st = mp_error_set(MP_ERR_IO, "cannot write %s: %s", o->f.path, strerror(errno));
    if (st)
        mp_afile_abort(&o->f);
    else
        st = mp_afile_commit(&o->f);
    mp_bench_temp_unregister(o->slot);
    o->f.fp = NULL;
    return st;
}

static mp_status write_text_file(const char *dir, const char *name, const char *text, size_t n)
{
    out_file o = { { 0 }, -1 };
    mp_status st = out_open(&o, dir, name);
    if (!st && fwrite(text, 1, n, o.f.fp) != n)
        st = mp_error_set(MP_ERR_IO, "cannot write %s/%s", dir, name);
    return out_close(&o, st);
}

static mp_status export_seed(const mp_bench_prepared *p, int k, long seed, const char *dir,
                             const char *header, char *const *rec, const size_t *index_of_row)
{
    static const char *names[3] = { "train", "val", "test" };
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/seed%ld", dir, seed);
    mp_status st = mp_bench_mkdirs(sub, NULL);
    const mp_split *sp = &p->split[k];
    for (int s = 0; s < 3 && !st; s++) {
        char file[32];
        snprintf(file, sizeof file, "%s.csv", names[s]);
        out_file o = { { 0 }, -1 };
        if (!(st = out_open(&o, sub, file))) {
            fputs(header, o.f.fp);
            for (size_t i = 0; i < sp->n[s]; i++)
                fputs(rec[sp->rows[s][i]], o.f.fp);
        }
        st = out_close(&o, st);
    }
    /* splits.json: rows of data.csv, in the split's order */
    mp_buf b = { 0 };
    if (!st)
        st = mp_buf_append(&b, "[{", 2);
    for (int s = 0; s < 3 && !st; s++) {
        st = mp_buf_printf(&b, "%s\"%s\": [", s ? ", " : "", names[s]);
        for (size_t i = 0; i < sp->n[s] && !st; i++)
            st = mp_buf_printf(&b, i ? ", %zu" : "%zu", index_of_row[sp->rows[s][i]]);
        if (!st)
            st = mp_buf_append(&b, "]", 1);
    }
    if (!st)
        st = mp_buf_append(&b, "}]\n", 3);
    if (!st)
        st = write_text_file(sub, "splits.json", b.data, b.len);
    mp_buf_free(&b);
    mp_buf t = { 0 };
    if (!st)
        st = mp_bench_split_text(sp, &t);
    if (!st)
        st = write_text_file(sub, "split.tsv", t.data, t.len);
    mp_buf_free(&t);
    return st;
}

static mp_status dataset_info(const mp_bench_prepared *p, const char *dir)
{
    const mp_bench_dataset *ds = p->spec;
    mp_buf b = { 0 };
    mp_status st = mp_buf_printf(&b, "name\t%s\nsource\t%s\nsha256\t%s\ntask_type\t%s\n"
                                 "metric\t%s\nsmiles_column\t%s\nrows\t%zu\nvalid_rows\t%zu\n",
                                 ds->name, ds->path, p->sha256, mp_task_type_name(ds->task),
                                 ds->metric, p->d->smiles_name, p->d->n_rows, p->n_valid);
    for (size_t t = 0; t < p->d->n_tasks && !st; t++)
        st = mp_buf_printf(&b, "target\t%s\n", p->d->task_names[t]);
    if (!st)
        st = write_text_file(dir, "dataset.tsv", b.data, b.len);
    mp_buf_free(&b);
    return st;
}

mp_status mp_bench_export_splits(const mp_bench_prepared *p, const mp_bench_grid *g,
                                 const char *dir)
{
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", dir, p->spec->name);
    size_t n = p->d->n_rows;
    char *header = NULL;
    char **rec = mp_calloc(n ? n : 1, sizeof *rec);
    size_t *index_of_row = mp_malloc(sizeof(size_t) * (n ? n : 1));
    mp_status st = rec && index_of_row ? MP_OK : mp_error_set(MP_ERR_NOMEM, "out of memory");
    if (!st)
        st = mp_bench_mkdirs(sub, NULL);
    if (!st)
        st = read_records(p, &header, rec);
    /* data.csv: the valid rows, in file order */
    out_file o = { { 0 }, -1 };
    if (!st && !(st = out_open(&o, sub, "data.csv"))) {
        fputs(header, o.f.fp);
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (p->f->g.valid[i]) {
                index_of_row[i] = k++;
                fputs(rec[i], o.f.fp);
            }
    }
    st = out_close(&o, st);
    if (!st)
        st = dataset_info(p, sub);
    for (int k = 0; k < g->n_seeds && !st; k++)
        st = export_seed(p, k, g->seeds[k], sub, header, rec, index_of_row);
    for (size_t i = 0; rec && i < n; i++)
        free(rec[i]);   /* open_memstream's buffers */
    free(header);
    mp_free(rec);
    mp_free(index_of_row);
    return st;
}
