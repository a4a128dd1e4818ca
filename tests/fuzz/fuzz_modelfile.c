/*
 * fuzz_modelfile.c - the model file loader: mp_modelfile_parse (magic,
 * version, sizes, CRC, header text, tensor records), then, for a file that
 * parses, mp_ensemble_load (every header key, the model it describes
 * checked against the tensors before anything is allocated) on the cpu
 * backend, a prediction with the loaded model, and a save and reload that
 * must succeed.
 *
 * The CRC makes most mutations fail early; the input's first byte (when it
 * is 'R') asks the harness to recompute the CRC over the rest, so the
 * fuzzer also reaches everything behind it.
 */
#include "fuzz.h"
#include "run/ensemble.h"
#include "run/modelfile.h"

static void fix_crc(uint8_t *b, size_t n)
{
    if (n < 36)
        return;
    uint64_t size = n;
    for (int i = 0; i < 8; i++)
        b[16 + i] = (uint8_t)(size >> (8 * i));   /* the stated size, so it adds up */
    uint32_t crc = mp_crc32(0, b, n - 4);
    for (int i = 0; i < 4; i++)
        b[n - 4 + i] = (uint8_t)(crc >> (8 * i));
}

static void use_model(mp_ensemble *e, const char *again)
{
    static const char *const smiles[2] = { "CCO", "c1ccccc1N" };
    mp_featurize_opts fo = mp_ensemble_featurize_opts(e);
    fo.n_threads = 1;
    mp_features *f = NULL;
    if (mp_featurize(&f, smiles, 2, &fo) == MP_OK) {
        int32_t idx[2] = { 0, 1 };
        double *mean = malloc(sizeof(double) * 2 * e->n_tasks);
        double *sd = malloc(sizeof(double) * 2 * e->n_tasks);
        if (mean && sd)
            (void)mp_ensemble_predict(e, f, idx, 2, 0, 0, 16, mean, sd);
        free(mean);
        free(sd);
        mp_features_free(f);
    }
    /* what loaded must save and load again */
    MP_FUZZ_CHECK(mp_ensemble_save(e, again) == MP_OK, "%s", mp_error_message());
    mp_ensemble *e2 = NULL;
    MP_FUZZ_CHECK(mp_ensemble_load(&e2, again, "cpu") == MP_OK, "%s", mp_error_message());
    mp_ensemble_free(e2);
    unlink(again);
}

int mp_fuzz_modelfile(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int fix = data[0] == 'R';
    data++;
    size--;
    uint8_t *b = malloc(size ? size : 1);
    if (!b)
        return 0;
    memcpy(b, data, size);
    if (fix)
        fix_crc(b, size);
    long live = mp_alloc_live();
    mp_modelfile *mf = NULL;
    if (mp_modelfile_parse(&mf, b, size, "fuzz.mpm") == MP_OK) {
        for (size_t i = 0; i < mf->n_tensors; i++) {
            const mp_tensor *t = &mf->tensors[i];
            MP_FUZZ_CHECK(t->name && t->ndim >= 1 && t->ndim <= MP_TENSOR_MAX_DIMS &&
                          t->block < mf->n_blocks, "tensor %zu", i);
            MP_FUZZ_CHECK(mp_modelfile_find(mf, t->block, t->name) != NULL, "tensor %s", t->name);
        }
        for (size_t i = 0; i < mp_kv_count(mf->header); i++)
            MP_FUZZ_CHECK(mp_kv_get(mf->header, mp_kv_key(mf->header, i)) != NULL, "key %zu", i);
        mp_modelfile_free(mf);
        char path[512], again[512];
        mp_fuzz_path("in.mpm", path, sizeof path);
        mp_fuzz_path("again.mpm", again, sizeof again);
        if (mp_fuzz_write(path, b, size)) {
            mp_ensemble *e = NULL;
            if (mp_ensemble_load(&e, path, "cpu") == MP_OK) {
                use_model(e, again);
                mp_ensemble_free(e);
            }
            unlink(path);
        }
    } else {
        MP_FUZZ_CHECK(mf == NULL && mp_error_message()[0], "a failure without a message");
    }
    free(b);
    MP_FUZZ_CHECK(mp_alloc_live() == live, "%ld blocks leaked", mp_alloc_live() - live);
    return 0;
}

MP_FUZZ_ENTRY(mp_fuzz_modelfile)
