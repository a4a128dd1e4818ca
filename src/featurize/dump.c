/*
 * dump.c - the reference dump: features as the tab-separated files of
 * ../shared/fixtures/chemprop_v1/README.md (molecules, atoms, bonds, morgan,
 * descriptors, rdkit2d, rdkit2d_normalized), plain or gzipped, so they can be
 * compared line by line with what Chemprop computes.
 *
 * All files are written to temporary names first and renamed only when every
 * one of them was written: a failed dump leaves no half-written file.
 */
#include "featurize/featurize.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum { F_MOLECULES, F_ATOMS, F_BONDS, F_MORGAN, F_DESC, F_RDKIT2D, F_RDKIT2D_NORM, N_FILES };
static const char *const file_names[N_FILES] = { "molecules", "atoms",   "bonds",
                                                 "morgan",    "descriptors", "rdkit2d",
                                                 "rdkit2d_normalized" };

typedef struct {
    mp_afile af;
    gzFile   gz;      /* NULL for plain text */
    mp_buf   buf;     /* pending output      */
    int      open, bad;
} out_file;

static void flush_out(out_file *o)
{
    if (!o->buf.len || o->bad)
        return;
    if (o->gz)
        o->bad = gzwrite(o->gz, o->buf.data, (unsigned)o->buf.len) != (int)o->buf.len;
    else
        o->bad = fwrite(o->buf.data, 1, o->buf.len, o->af.fp) != o->buf.len;
    o->buf.len = 0;
}

static void emit(out_file *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(out_file *o, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        o->bad = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        if (mp_buf_append(&o->buf, tmp, (size_t)n) != MP_OK)
            o->bad = 1;
    } else {   /* a long field (SMILES): format again into the buffer */
        va_start(ap, fmt);
        if (mp_buf_reserve(&o->buf, (size_t)n) != MP_OK) {
            o->bad = 1;
        } else {
            vsnprintf(o->buf.data + o->buf.len, (size_t)n + 1, fmt, ap);
            o->buf.len += (size_t)n;
        }
        va_end(ap);
    }
    if (o->buf.len > (1u << 16))
        flush_out(o);
}

/* Shortest decimal that reads back as the same double (Python repr style). */
static void fmt_double(char *buf, size_t cap, double v)
{
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (!isfinite(v) || strtod(buf, NULL) == v)
            return;
    }
}

/* Python's repr of a double: the shortest digits that read back as v, in
 * fixed notation for exponents -4..15 (with ".0" when integral), else as
 * d.ddde+XX; "nan", "inf", "-inf". */
static void fmt_pyrepr(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int p;
    for (p = 1; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    /* e: [-]d[.ddd]e[+-]XX -> sign, digits, exponent */
    const char *s = e;
    int neg = *s == '-';
    if (neg)
        s++;
    char dig[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            dig[nd++] = *s;
    dig[nd] = '\0';
    int x = atoi(s + 1);
    size_t n = 0;
    if (neg)
        buf[n++] = '-';
    if (x >= -4 && x < 16) {
        if (x < 0) {
            n += (size_t)snprintf(buf + n, cap - n, "0.");
            for (int i = 0; i < -x - 1; i++)
                buf[n++] = '0';
            snprintf(buf + n, cap - n, "%s", dig);
        } else if (nd <= x + 1) {
            n += (size_t)snprintf(buf + n, cap - n, "%s", dig);
            for (int i = nd; i < x + 1; i++)
                buf[n++] = '0';
            snprintf(buf + n, cap - n, ".0");
        } else {
            snprintf(buf + n, cap - n, "%.*s.%s", x + 1, dig, dig + x + 1);
        }
    } else {
        n += (size_t)snprintf(buf + n, cap - n, "%c", dig[0]);
        if (nd > 1)
            n += (size_t)snprintf(buf + n, cap - n, ".%s", dig + 1);
        snprintf(buf + n, cap - n, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    }
}

/* Shortest decimal that reads back as the same float. */
static void fmt_float(char *buf, size_t cap, float v)
{
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)v);
        if (!isfinite(v) || strtof(buf, NULL) == v)
            return;
    }
}

static mp_status open_out(out_file *o, const char *dir, const char *name, int gz)
{
    size_t n = strlen(dir) + strlen(name) + 16;
    char *path = mp_malloc(n);
    if (!path)
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    snprintf(path, n, "%s/%s.tsv%s", dir, name, gz ? ".gz" : "");
    mp_status st = mp_afile_open(&o->af, path);
    mp_free(path);
    if (st)
        return st;
    o->open = 1;
    if (gz) {
        /* zlib writes through its own descriptor; the FILE stays unused
         * until mp_afile_commit closes it and renames the file. */
        int fd = dup(o->af.fd);
        o->gz = fd >= 0 ? gzdopen(fd, "wb6") : NULL;
        if (!o->gz) {
            if (fd >= 0)
                close(fd);
            return mp_error_set(MP_ERR_IO, "cannot start gzip output in %s", dir);
        }
    }
    return MP_OK;
}

static void hot_list(out_file *o, const void *hot, int width, int is_atom)
{
    for (int k = 0; k < width; k++) {
        int h = is_atom ? ((const int16_t *)hot)[k] : ((const int8_t *)hot)[k];
        if (h < 0)
            break;
        emit(o, k ? ",%d" : "%d", h);
    }
}

static void write_rows(out_file *of, const mp_features *f, const char *const *smiles)
{
    const mp_graphs *g = &f->g;
    char num[64];
    emit(&of[F_MOLECULES], "mol\tvalid\tn_atoms\tn_bonds\tscaffold\tsmiles\n");
    emit(&of[F_ATOMS], "mol\tatom\thot\tmass\n");
    emit(&of[F_BONDS], "mol\tbegin\tend\thot\n");
    if (of[F_MORGAN].open)
        emit(&of[F_MORGAN], "mol\tbits\tcounts\n");
    if (of[F_DESC].open) {
        emit(&of[F_DESC], "mol");
        for (int j = 0; j < f->n_desc; j++)
            emit(&of[F_DESC], "\t%s", f->desc_names[j]);
        emit(&of[F_DESC], "\n");
    }
    for (int k = 0; k < 2; k++) {
        out_file *o = &of[k ? F_RDKIT2D_NORM : F_RDKIT2D];
        const mp_molmat *x = &f->mat[k ? MP_MAT_RDKIT2D_NORM : MP_MAT_RDKIT2D];
        if (!o->open)
            continue;
        emit(o, "mol");
        for (int j = 0; j < x->n_cols; j++)
            emit(o, "\t%s", x->names[j]);
        emit(o, "\n");
    }
    for (int32_t m = 0; m < g->n_mols; m++) {
        const char *smi = smiles && smiles[m] ? smiles[m] : "";
        int32_t A = g->mol_atom[m], na = g->mol_atom[m + 1] - A;
        int32_t E = g->mol_edge[m], nb = (g->mol_edge[m + 1] - E) / 2;
        if (!g->valid[m]) {
            emit(&of[F_MOLECULES], "%d\t0\t\t\t\t%s\n", (int)m, smi);
            continue;
        }
        const char *scaf = f->scaffold && f->scaffold[m] ? f->scaffold[m] : "";
        emit(&of[F_MOLECULES], "%d\t1\t%d\t%d\t%s\t%s\n", (int)m, (int)na, (int)nb, scaf, smi);
        for (int32_t a = 0; a < na; a++) {
            emit(&of[F_ATOMS], "%d\t%d\t", (int)m, (int)a);
            hot_list(&of[F_ATOMS], g->atom_hot + (size_t)(A + a) * MP_ATOM_MAX_HOT, MP_ATOM_MAX_HOT, 1);
            fmt_float(num, sizeof num, g->atom_mass[A + a]);
            emit(&of[F_ATOMS], "\t%s\n", num);
        }
        for (int32_t k = 0; k < nb; k++) {
            int32_t e = E + 2 * k;
            emit(&of[F_BONDS], "%d\t%d\t%d\t", (int)m, (int)(g->edge_src[e] - A),
                 (int)(g->edge_dst[e] - A));
            hot_list(&of[F_BONDS], g->bond_hot + (size_t)(e / 2) * MP_BOND_MAX_HOT, MP_BOND_MAX_HOT, 0);
            emit(&of[F_BONDS], "\n");
        }
        if (of[F_MORGAN].open) {
            out_file *o = &of[F_MORGAN];
            int32_t j0 = f->morgan_start[m], j1 = f->morgan_start[m + 1];
            emit(o, "%d\t", (int)m);
            for (int32_t j = j0; j < j1; j++)
                emit(o, j > j0 ? ",%u" : "%u", (unsigned)f->morgan_bit[j]);
            emit(o, "\t");
            for (int32_t j = j0; j < j1; j++)
                emit(o, j > j0 ? ",%u:%u" : "%u:%u", (unsigned)f->morgan_bit[j],
                     (unsigned)f->morgan_count[j]);
            emit(o, "\n");
        }
        if (of[F_DESC].open) {
            emit(&of[F_DESC], "%d", (int)m);
            for (int j = 0; j < f->n_desc; j++) {
                fmt_double(num, sizeof num, f->desc[(size_t)m * f->n_desc + j]);
                emit(&of[F_DESC], "\t%s", num);
            }
            emit(&of[F_DESC], "\n");
        }
        /* Chemprop's features: NaN read as 0 (MoleculeDatapoint) */
        for (int k = 0; k < 2; k++) {
            out_file *o = &of[k ? F_RDKIT2D_NORM : F_RDKIT2D];
            const mp_molmat *x = &f->mat[k ? MP_MAT_RDKIT2D_NORM : MP_MAT_RDKIT2D];
            if (!o->open)
                continue;
            emit(o, "%d", (int)m);
            for (int j = 0; j < x->n_cols; j++) {
                double v = x->values[(size_t)m * (size_t)x->n_cols + (size_t)j];
                fmt_pyrepr(num, sizeof num, isnan(v) ? 0.0 : v);
                emit(o, "\t%s", num);
            }
            emit(o, "\n");
        }
    }
}

mp_status mp_features_dump(const mp_features *f, const char *const *smiles, const char *dir, int gz)
{
    mp_made_dirs made;   /* the folders this dump made: removed again on failure */
    mp_status st = mp_mkdirs(dir, &made);
    if (st)
        return st;
    out_file of[N_FILES];
    memset(of, 0, sizeof of);
    for (int i = 0; i < N_FILES && !st; i++) {
        if ((i == F_MORGAN && !f->morgan_start) || (i == F_DESC && !f->desc) ||
            (i == F_RDKIT2D && !f->mat[MP_MAT_RDKIT2D].values) ||
            (i == F_RDKIT2D_NORM && !f->mat[MP_MAT_RDKIT2D_NORM].values))
            continue;   /* not computed: no file */
        st = open_out(&of[i], dir, file_names[i], gz);
    }
    if (!st) {
        write_rows(of, f, smiles);
        for (int i = 0; i < N_FILES; i++) {
            if (!of[i].open)
                continue;
            flush_out(&of[i]);
            if (of[i].gz && gzclose(of[i].gz) != Z_OK)
                of[i].bad = 1;
            of[i].gz = NULL;
            if (of[i].bad && !st)
                st = mp_error_set(MP_ERR_IO, "error writing %s.tsv%s in %s (disk full?)",
                                  file_names[i], gz ? ".gz" : "", dir);
        }
    }
    int committed[N_FILES] = { 0 };   /* removed again if a later commit fails */
    for (int i = 0; i < N_FILES; i++) {
        if (!of[i].open)
            continue;
        if (of[i].gz)
            gzclose(of[i].gz);
        if (st)
            mp_afile_abort(&of[i].af);   /* after a failure, no further file appears */
        else
            committed[i] = (st = mp_afile_commit(&of[i].af)) == MP_OK;
        mp_buf_free(&of[i].buf);
    }
    for (int i = 0; st && i < N_FILES; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.tsv%s", dir, file_names[i], gz ? ".gz" : "");
        if (committed[i])
            (void)unlink(path);   /* all the files or none */
    }
    if (st)
        mp_mkdirs_undo(&made);
    else
        mp_mkdirs_keep(&made);
    return st;
}
