/*
 * fuzz_cache.c - the feature cache loader (featurize/cache.c): magic,
 * version, header sizes, the exact file size they imply, the CRC, then
 * every invariant of the store; a cache that loads must save and load
 * again.  As for model files, a first byte 'R' recomputes the CRC (the
 * file's last 4 bytes) over the rest, so mutations reach the checks behind it.
 */
#include "fuzz.h"
#include "featurize/featurize.h"

int mp_fuzz_cache(const uint8_t *data, size_t size)
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
    if (fix && size >= 4) {
        uint32_t crc = mp_crc32(0, b, size - 4);
        memcpy(b + size - 4, &crc, 4);   /* the format is little-endian */
    }
    char path[512], again[512];
    mp_fuzz_path("in.mpf", path, sizeof path);
    mp_fuzz_path("again.mpf", again, sizeof again);
    long live = mp_alloc_live();
    if (mp_fuzz_write(path, b, size)) {
        mp_features *f = NULL;
        if (mp_features_load(&f, path) == MP_OK) {
            MP_FUZZ_CHECK(mp_graphs_check(&f->g) == MP_OK, "%s", mp_error_message());
            MP_FUZZ_CHECK(mp_features_save(f, again) == MP_OK, "%s", mp_error_message());
            mp_features *g = NULL;
            MP_FUZZ_CHECK(mp_features_load(&g, again) == MP_OK, "%s", mp_error_message());
            mp_features_free(g);
            mp_features_free(f);
            unlink(again);
        } else {
            MP_FUZZ_CHECK(f == NULL && mp_error_message()[0], "a failure without a message");
        }
        unlink(path);
    }
    free(b);
    MP_FUZZ_CHECK(mp_alloc_live() == live, "%ld blocks leaked", mp_alloc_live() - live);
    return 0;
}

MP_FUZZ_ENTRY(mp_fuzz_cache)
