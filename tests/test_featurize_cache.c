/*
 * test_featurize_cache.c - the feature cache (.mpf): round trips, and every
 * kind of damage (truncation, flipped bytes, sizes that do not add up behind
 * a valid checksum) refused with MP_ERR_FORMAT / MP_ERR_CHECKSUM, no crash.
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *slurp(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)n + 1);
    if (d && fread(d, 1, (size_t)n, fp) != (size_t)n) {
        free(d);
        d = NULL;
    }
    fclose(fp);
    *size = (size_t)n;
    return d;
}

static int spit(const char *path, const unsigned char *d, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    int ok = fwrite(d, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* Loads a file expected to be refused; returns the status (features freed). */
static mp_status load_status(const char *path)
{
    mp_features *f = (mp_features *)1;
    mp_status st = mp_features_load(&f, path);
    if (st == MP_OK)
        mp_features_free(f);
    else if (f != NULL)
        return MP_ERR_INTERNAL;   /* must be NULL on failure */
    return st;
}

static mp_features *fixture(int all)
{
    int32_t n;
    char **smiles = tf_fixture_smiles(&n);
    if (!smiles)
        return NULL;
    mp_featurize_opts o = { .layout = all ? MP_ATOM_V1 : MP_ATOM_V2, .morgan = all,
                            .descriptors = all, .scaffolds = all, .n_threads = 2 };
    mp_features *f = NULL;
    if (mp_featurize(&f, (const char *const *)smiles, n, &o) != MP_OK)
        f = NULL;
    tf_free_strings(smiles, n);
    return f;
}

MP_TEST(cache_round_trip)
{
    char path[1200];
    for (int all = 1; all >= 0; all--) {
        mp_features *f = fixture(all);
        CHECK_MSG(f, "featurizing the fixtures failed: %s", mp_error_message());
        snprintf(path, sizeof path, "%s/round%d.mpf", mp_test_tmpdir(), all);
        mp_status st = mp_features_save(f, path);
        mp_features *g = NULL;
        mp_status lt = st ? st : mp_features_load(&g, path);
        int same = !lt && tf_same_features(f, g);
        int shape = !lt && (all ? g->morgan_start && g->desc && g->scaffold && g->n_desc == 43
                                : !g->morgan_start && !g->desc && !g->scaffold && g->n_desc == 0 &&
                                      g->g.layout == MP_ATOM_V2 && g->g.atom_fdim == 72);
        mp_features_free(f);
        mp_features_free(g);
        CHECK_OK(st);
        CHECK_OK(lt);
        CHECK(same);
        CHECK(shape);
    }
    /* an empty store round-trips too */
    mp_features *e = NULL, *e2 = NULL;
    CHECK_OK(mp_featurize(&e, NULL, 0, NULL));
    snprintf(path, sizeof path, "%s/empty.mpf", mp_test_tmpdir());
    CHECK_OK(mp_features_save(e, path));
    CHECK_OK(mp_features_load(&e2, path));
    int same = tf_same_features(e, e2);
    mp_features_free(e);
    mp_features_free(e2);
    CHECK(same);
}

MP_TEST(cache_refuses_damage)
{
    mp_features *f = fixture(1);
    CHECK_MSG(f, "featurizing the fixtures failed: %s", mp_error_message());
    char path[1200], bad[1200];
    snprintf(path, sizeof path, "%s/good.mpf", mp_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.mpf", mp_test_tmpdir());
    mp_status st = mp_features_save(f, path);
    int32_t n_mols = f->g.n_mols;
    mp_features_free(f);
    CHECK_OK(st);
    size_t size;
    unsigned char *d = slurp(path, &size);
    CHECK(d && size > 10000);

    /* truncated anywhere: a format error */
    size_t cuts[] = { 0, 3, 8, 12, 40, 63, 64, 65, 200, size / 3, size / 2, size - 5, size - 4,
                      size - 1 };
    int n_trunc_ok = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(bad, d, cuts[i]);
        mp_status s = load_status(bad);
        if (s == MP_ERR_FORMAT)
            n_trunc_ok++;
        else
            printf("    truncated at %zu: %s\n", cuts[i], mp_status_name(s));
    }
    /* a byte appended */
    unsigned char *longer = malloc(size + 1);
    memcpy(longer, d, size);
    longer[size] = 0;
    spit(bad, longer, size + 1);
    free(longer);
    mp_status s_append = load_status(bad);

    /* one byte flipped: magic and version are format errors, the rest at
     * least a checksum mismatch */
    int n_flip = 0, n_flip_ok = 0;
    for (size_t off = 0; off < size; off += size / 97 + 1) {
        d[off] ^= 0x5a;
        spit(bad, d, size);
        d[off] ^= 0x5a;
        mp_status s = load_status(bad);
        n_flip++;
        if (s == MP_ERR_FORMAT || s == MP_ERR_CHECKSUM)
            n_flip_ok++;
        else
            printf("    flipped byte %zu: %s\n", off, mp_status_name(s));
    }
    d[0] ^= 1;
    spit(bad, d, size);
    d[0] ^= 1;
    mp_status s_magic = load_status(bad);
    d[8] ^= 1;
    spit(bad, d, size);
    d[8] ^= 1;
    mp_status s_version = load_status(bad);
    const char *msg_version = strstr(mp_error_message(), "version") ? "ok" : mp_error_message();
    d[size / 2] ^= 1;
    spit(bad, d, size);
    d[size / 2] ^= 1;
    mp_status s_mid = load_status(bad);
    d[size - 1] ^= 1;   /* the checksum itself */
    spit(bad, d, size);
    d[size - 1] ^= 1;
    mp_status s_crc = load_status(bad);

    /* damage behind a valid checksum: the structural checks catch it */
    uint32_t header_size;
    memcpy(&header_size, d + 12, 4);   /* after magic and version */
    size_t mol_atom_off = header_size + (((size_t)n_mols + 7) & ~(size_t)7);
    int32_t v, big = 1 << 30;
    memcpy(&v, d + mol_atom_off + 4, 4);
    memcpy(d + mol_atom_off + 4, &big, 4);   /* mol_atom[1]: offsets no longer monotone */
    uint32_t crc = mp_crc32(0, d, size - 4);
    unsigned char old_crc[4];
    memcpy(old_crc, d + size - 4, 4);
    memcpy(d + size - 4, &crc, 4);
    spit(bad, d, size);
    mp_status s_offsets = load_status(bad);
    const char *msg_offsets = strstr(mp_error_message(), "monotone") ? "ok" : mp_error_message();
    memcpy(d + mol_atom_off + 4, &v, 4);
    /* header: one atom more, checksum fixed: the size no longer adds up */
    int32_t na;
    memcpy(&na, d + 24, 4);   /* n_atoms after magic, version, header size, layout, fdim, n_mols */
    na++;
    memcpy(d + 24, &na, 4);
    crc = mp_crc32(0, d, size - 4);
    memcpy(d + size - 4, &crc, 4);
    spit(bad, d, size);
    mp_status s_sizes = load_status(bad);
    na--;
    memcpy(d + 24, &na, 4);
    memcpy(d + size - 4, old_crc, 4);
    /* the restored bytes load again: the damage above was the only fault */
    spit(bad, d, size);
    mp_status s_restored = load_status(bad);
    free(d);

    CHECK_EQ_INT(n_trunc_ok, (int)(sizeof cuts / sizeof cuts[0]));
    CHECK(s_append == MP_ERR_FORMAT);
    CHECK(n_flip > 90);
    CHECK_EQ_INT(n_flip_ok, n_flip);
    CHECK(s_magic == MP_ERR_FORMAT);
    CHECK(s_version == MP_ERR_FORMAT);
    CHECK_EQ_STR(msg_version, "ok");
    CHECK(s_mid == MP_ERR_CHECKSUM);
    CHECK(s_crc == MP_ERR_CHECKSUM);
    CHECK(s_offsets == MP_ERR_FORMAT);
    CHECK_EQ_STR(msg_offsets, "ok");
    CHECK(s_sizes == MP_ERR_FORMAT);
    CHECK_OK(s_restored);
}

MP_TEST(cache_io_errors)
{
    mp_features *f = NULL;
    CHECK(mp_features_load(&f, "/nonexistent/x.mpf") == MP_ERR_IO);
    CHECK(f == NULL);
    CHECK(strstr(mp_error_message(), "/nonexistent/x.mpf") != NULL);
    const char *smi[] = { "CCO" };
    CHECK_OK(mp_featurize(&f, smi, 1, NULL));
    mp_status st = mp_features_save(f, "/nonexistent/dir/x.mpf");
    mp_features_free(f);
    CHECK(st == MP_ERR_IO);
    /* a file that is not a cache at all */
    char path[1200];
    snprintf(path, sizeof path, "%s/text.mpf", mp_test_tmpdir());
    FILE *fp = fopen(path, "w");
    for (int i = 0; i < 100; i++)
        fputs("smiles,y\nCCO,1\n", fp);
    fclose(fp);
    CHECK(load_status(path) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "not a molprop feature cache") != NULL);
}
