/*
 * fuzz_csv.c - the CSV / gzip reader (data/csv.c) and the dataset loader
 * on top of it (data/dataset.c: header, column choice, target cells).
 *
 * Input: one mode byte, then the file.  Mode bit 0: gzip-compress the file
 * first (so the fuzzer explores CSV text inside valid gzip streams; raw
 * gzip bytes arrive as any file starting 1f 8b); bit 1: small reader limits
 * (256-byte records, 8 fields) so the limit paths are reached; bits 2-4:
 * the column options the dataset loader gets.
 */
#include "fuzz.h"
#include "data/csv.h"
#include "data/dataset.h"

#include <math.h>
#include <zlib.h>

/* data gzip-compressed into a new malloc'd block (*out, *n_out). */
static int gzip_bytes(const uint8_t *data, size_t n, uint8_t **out, size_t *n_out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    *out = malloc(cap);
    if (!*out) {
        deflateEnd(&z);
        return 0;
    }
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)n;
    z.next_out = *out;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    *n_out = cap - z.avail_out;
    deflateEnd(&z);
    return r == Z_STREAM_END;
}

static void read_all(const char *path, int small)
{
    mp_csv_reader *r = NULL;
    if (mp_csv_open(&r, path) != MP_OK)
        return;
    if (small)
        mp_csv_set_limits(r, 256, 8);
    size_t last = 0;
    for (int rec = 0; rec < 1000000; rec++) {
        char **f;
        size_t nf, line;
        if (mp_csv_next(r, &f, &nf, &line) != MP_OK || nf == 0)
            break;
        MP_FUZZ_CHECK(line >= 1 && line >= last, "line %zu after %zu", line, last);
        MP_FUZZ_CHECK(!small || nf <= 8, "%zu fields past the limit", nf);
        size_t bytes = 0;
        for (size_t i = 0; i < nf; i++)
            bytes += strlen(f[i]);   /* every field NUL-terminated, readable */
        MP_FUZZ_CHECK(!small || bytes <= 256, "a record of %zu bytes past the limit", bytes);
        last = line;
    }
    mp_csv_close(r);
}

static void load(const char *path, unsigned mode)
{
    static const char *const smiles_col[4] = { NULL, "smiles", "SMILES", "b" };
    static const char *const targets[4] = { NULL, NULL, "a,b", "y" };
    mp_column_spec spec = { 0 };
    spec.smiles_column = smiles_col[(mode >> 2) & 3];
    spec.target_columns = targets[(mode >> 4) & 3];
    spec.ignore_columns = mode & 0x40 ? "id" : NULL;
    spec.no_targets = (mode & 0x80) != 0;
    mp_dataset *d = NULL;
    if (mp_dataset_load(&d, path, &spec) != MP_OK) {
        MP_FUZZ_CHECK(d == NULL && mp_error_message()[0], "a failure without a message");
        return;
    }
    MP_FUZZ_CHECK(d->n_rows > 0 && d->smiles_name, "an empty dataset loaded");
    for (size_t i = 0; i < d->n_rows; i++) {
        MP_FUZZ_CHECK(d->smiles[i] != NULL, "row %zu without SMILES", i);
        MP_FUZZ_CHECK(i == 0 || d->line[i] > d->line[i - 1], "lines out of order at %zu", i);
        for (size_t t = 0; t < d->n_tasks; t++) {
            double v = d->targets[i * d->n_tasks + t];
            MP_FUZZ_CHECK(isnan(v) || isfinite(v), "a target that is infinite");
        }
    }
    mp_dataset_free(d);
}

int mp_fuzz_csv(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    data++;
    size--;
    char path[512];
    mp_fuzz_path("in.csv", path, sizeof path);
    long live = mp_alloc_live();
    int ok;
    if (mode & 1) {
        uint8_t *gz = NULL;
        size_t n = 0;
        ok = gzip_bytes(data, size, &gz, &n) && mp_fuzz_write(path, gz, n);
        free(gz);
    } else {
        ok = mp_fuzz_write(path, data, size);
    }
    if (!ok)
        return 0;
    read_all(path, (mode & 2) != 0);
    load(path, mode);
    unlink(path);
    MP_FUZZ_CHECK(mp_alloc_live() == live, "%ld blocks leaked", mp_alloc_live() - live);
    return 0;
}

MP_FUZZ_ENTRY(mp_fuzz_csv)
