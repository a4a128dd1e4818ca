/*
 * test_descriptors_io.c - Chemprop's molecule vectors around the
 * computation: the same bits for any thread count, the feature cache
 * (version 2 round trip, version 1 still read, damaged matrices refused),
 * rdkit2d.tsv / rdkit2d_normalized.tsv in the fixtures' layout, the vectors
 * by name (NaN read as 0), and a missing FragmentDescriptors.csv reported.
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/desc2d.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>

static mp_features *featurize_all(char **smiles, int32_t n, int threads)
{
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 1,
                            .scaffolds = 1, .n_threads = threads, .sets = MP_SET_ALL };
    mp_features *f = NULL;
    if (mp_featurize(&f, (const char *const *)smiles, n, &o) != MP_OK)
        return NULL;
    return f;
}

MP_TEST(descriptors_same_for_any_thread_count)
{
    int32_t n;
    char **smiles = tf_dataset_smiles("bbbp", 120, &n);
    CHECK_MSG(smiles, "dataset mirror missing bbbp");
    smiles = tf_add_invalid(smiles, &n);
    mp_features *f1 = featurize_all(smiles, n, 1);
    mp_features *f2 = featurize_all(smiles, n, 2);
    mp_features *f3 = featurize_all(smiles, n, 3);
    int ok = f1 && f2 && f3;
    int same12 = ok && tf_same_features(f1, f2), same13 = ok && tf_same_features(f1, f3);
    int have = ok && f1->mat[MP_MAT_RDKIT2D].n_cols == 200 &&
               f1->mat[MP_MAT_RDKIT2D_NORM].n_cols == 200 &&
               f1->mat[MP_MAT_V2_RDKIT2D].n_cols == 208 && f1->mat[MP_MAT_V2_CHARGE].n_cols == 1 &&
               f1->morgan2_start && f1->morgan2_start[n] > 0;
    mp_features_free(f1);
    mp_features_free(f2);
    mp_features_free(f3);
    tf_free_strings(smiles, n);
    CHECK_MSG(ok, "mp_featurize failed: %s", mp_error_message());
    CHECK(have);
    CHECK(same12);
    CHECK(same13);
}

static unsigned char *slurp_file(const char *path, size_t *size)
{
    return (unsigned char *)mp_test_slurp(path, size);
}

static unsigned char *find(unsigned char *d, size_t size, const char *s)
{
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= size; i++)
        if (!memcmp(d + i, s, k))
            return d + i;
    return NULL;
}

static int spit(const char *path, const unsigned char *d, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    int ok = fwrite(d, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

static void fix_crc(unsigned char *d, size_t size)
{
    uint32_t crc = mp_crc32(0, d, size - 4);
    memcpy(d + size - 4, &crc, 4);
}

MP_TEST(descriptors_cache_round_trip)
{
    int32_t n;
    char **smiles = tf_fixture_smiles(&n);
    CHECK_MSG(smiles, "fixtures missing");
    mp_features *f = featurize_all(smiles, n, 2);
    tf_free_strings(smiles, n);
    CHECK_MSG(f, "mp_featurize failed: %s", mp_error_message());
    char path[1200], bad[1200];
    snprintf(path, sizeof path, "%s/sets.mpf", mp_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/sets-bad.mpf", mp_test_tmpdir());
    mp_status st = mp_features_save(f, path);
    mp_features *g = NULL;
    mp_status lt = st ? st : mp_features_load(&g, path);
    int same = !lt && tf_same_features(f, g);
    mp_features_free(f);
    mp_features_free(g);
    CHECK_OK(st);
    CHECK_OK(lt);
    CHECK(same);

    /* behind a valid checksum: a column renamed, a value in an invalid
     * molecule's row, a column count that is not this molprop's */
    size_t size;
    unsigned char *d = slurp_file(path, &size);
    CHECK(d);
    unsigned char *name = find(d, size, "fr_Al_COO");
    int found = name != NULL;
    mp_status s_name = MP_OK, s_cols = MP_OK;
    const char *msg_name = "";
    if (found) {
        name[3] = 'X';
        fix_crc(d, size);
        spit(bad, d, size);
        mp_features *h = NULL;
        s_name = mp_features_load(&h, bad);
        msg_name = strstr(mp_error_message(), "fr_Al_COO") ? "ok" : mp_error_message();
        mp_features_free(h);
        name[3] = 'A';
    }
    int32_t cols;
    memcpy(&cols, d + 68, 4);   /* mat_cols[0], after the 64 bytes of version 1 and n_morgan2 */
    int32_t cols_bad = cols + 1;
    memcpy(d + 68, &cols_bad, 4);
    fix_crc(d, size);
    spit(bad, d, size);
    mp_features *h = NULL;
    s_cols = mp_features_load(&h, bad);
    mp_features_free(h);
    memcpy(d + 68, &cols, 4);
    fix_crc(d, size);
    spit(bad, d, size);
    mp_status s_back = mp_features_load(&h, bad);
    mp_features_free(h);
    mp_free(d);
    CHECK(found);
    CHECK(cols == 200);
    CHECK(s_name == MP_ERR_FORMAT);
    CHECK_EQ_STR(msg_name, "ok");
    CHECK(s_cols == MP_ERR_FORMAT);
    CHECK_OK(s_back);
}

/* A version-1 cache (molprop before these sets: 64-byte header) loads. */
MP_TEST(descriptors_cache_reads_version_1)
{
    int32_t n;
    char **smiles = tf_dataset_smiles("esol", 50, &n);
    CHECK_MSG(smiles, "dataset mirror missing esol");
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 1, .n_threads = 1 };
    mp_features *f = NULL;
    mp_status st = mp_featurize(&f, (const char *const *)smiles, n, &o);
    tf_free_strings(smiles, n);
    CHECK_OK(st);
    char path[1200], old[1200];
    snprintf(path, sizeof path, "%s/v2.mpf", mp_test_tmpdir());
    snprintf(old, sizeof old, "%s/v1.mpf", mp_test_tmpdir());
    st = mp_features_save(f, path);
    size_t size;
    unsigned char *d = st ? NULL : slurp_file(path, &size);
    if (!d) {
        mp_features_free(f);
        MP_FAIL("saving failed: %s", mp_error_message());
    }
    /* version 1 = version 2 without bytes 64..95, version 1 and header 64 */
    uint32_t v1 = 1, h64 = 64;
    unsigned char *o1 = malloc(size - 32);
    memcpy(o1, d, 64);
    memcpy(o1 + 8, &v1, 4);
    memcpy(o1 + 12, &h64, 4);
    memcpy(o1 + 64, d + 96, size - 96);
    fix_crc(o1, size - 32);
    spit(old, o1, size - 32);
    mp_features *g = NULL;
    mp_status lt = mp_features_load(&g, old);
    int same = !lt && tf_same_features(f, g);
    /* a version-1 file cannot claim the new sections */
    uint32_t flags;
    memcpy(&flags, o1 + 44, 4);   /* after magic, version, sizes, layout, 6 counts */
    flags |= 8;
    memcpy(o1 + 44, &flags, 4);
    fix_crc(o1, size - 32);
    spit(old, o1, size - 32);
    mp_features *h = NULL;
    mp_status s_flags = mp_features_load(&h, old);
    mp_features_free(h);
    free(o1);
    mp_free(d);
    mp_features_free(f);
    mp_features_free(g);
    CHECK_OK(lt);
    CHECK(same);
    CHECK(s_flags == MP_ERR_FORMAT);
}

/* rdkit2d.tsv / rdkit2d_normalized.tsv: the fixtures' header and rows, the
 * raw file identical to Chemprop's except Ipc's last digits on one large
 * molecule; plain and gzipped. */
MP_TEST(descriptors_dump_layout)
{
    int32_t n;
    char **smiles = tf_fixture_smiles(&n);
    CHECK_MSG(smiles, "fixtures missing");
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 2,
                            .sets = MP_SET_RDKIT2D | MP_SET_RDKIT2D_NORM };
    mp_features *f = NULL;
    mp_status st = mp_featurize(&f, (const char *const *)smiles, n, &o);
    char dir[1200], gzdir[1200];
    snprintf(dir, sizeof dir, "%s/dump-sets", mp_test_tmpdir());
    snprintf(gzdir, sizeof gzdir, "%s/dump-sets-gz", mp_test_tmpdir());
    mp_status sd = st ? st : mp_features_dump(f, (const char *const *)smiles, dir, 0);
    mp_status sg = st ? st : mp_features_dump(f, (const char *const *)smiles, gzdir, 1);
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_OK(st);
    CHECK_OK(sd);
    CHECK_OK(sg);
    const char *names[2] = { "rdkit2d", "rdkit2d_normalized" };
    for (int k = 0; k < 2; k++)
        for (int z = 0; z < 2; z++) {
            char ours[1400], theirs[256];
            snprintf(ours, sizeof ours, "%s/%s.tsv%s", z ? gzdir : dir, names[k], z ? ".gz" : "");
            snprintf(theirs, sizeof theirs, "%s.tsv.gz", names[k]);
            gzFile a = gzopen(ours, "rb"), b = gzopen(tf_fixture(theirs), "rb");
            CHECK_MSG(a && b, "cannot open %s or the fixture", ours);
            mp_buf la = { 0 }, lb = { 0 };
            long lines = 0, text_diff = 0, bad = 0;
            int ra, rb;
            while ((ra = tf_read_line(a, &la)) & (rb = tf_read_line(b, &lb))) {
                lines++;
                if (lines == 1) {
                    bad += strcmp(la.data, lb.data) != 0;
                    continue;
                }
                char *fa[210], *fb[210];
                int na = tf_split(la.data, fa, 210), nb = tf_split(lb.data, fb, 210);
                if (na != 201 || nb != 201 || strcmp(fa[0], fb[0]) != 0) {
                    bad++;
                    continue;
                }
                for (int j = 1; j < 201; j++) {
                    if (!strcmp(fa[j], fb[j]))
                        continue;
                    text_diff++;
                    double x = strtod(fa[j], NULL), y = strtod(fb[j], NULL);
                    double tol = k ? 1e-5 : (j == 34 ? 1e-2 : 1e-6) * fabs(y);
                    bad += !(fabs(x - y) <= tol);
                }
            }
            gzclose(a);
            gzclose(b);
            mp_buf_free(&la);
            mp_buf_free(&lb);
            if (k == 0)
                CHECK_EQ_INT(text_diff, 1);   /* Ipc of molecule 342 */
            CHECK(ra == 0 && rb == 0);        /* both ended together */
            CHECK_EQ_INT(lines, 420);
            CHECK_EQ_INT(bad, 0);
        }
}

MP_TEST(descriptors_vectors_by_name)
{
    mp_vec v;
    for (int i = 0; i < MP_N_VECS; i++) {
        CHECK_OK(mp_vec_parse(mp_vec_name((mp_vec)i), &v));
        CHECK_EQ_INT(v, i);
    }
    CHECK(mp_vec_parse("rdkit_2d", &v) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "rdkit2d-normalized"));
    CHECK(mp_vec_name(MP_N_VECS) == NULL);

    const char *smi[] = { "CCO", "xyz", "[Na]Cl" };
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 1 };
    for (int i = 0; i < MP_N_VECS; i++)
        mp_vec_request((mp_vec)i, &o);
    CHECK(o.morgan && o.descriptors && o.sets == MP_SET_ALL);
    mp_features *f = NULL;
    CHECK_OK(mp_featurize(&f, smi, 3, &o));
    static const int dims[MP_N_VECS] = { 2048, 2048, 43, 200, 200, 2048, 2048, 208, 1 };
    double row[2048];
    int dims_ok = 1, invalid_nan = 1, no_nan = 1;
    for (int i = 0; i < MP_N_VECS; i++) {
        int d = mp_features_vec_dim(f, (mp_vec)i);
        dims_ok &= d == dims[i];
        mp_features_vec_row(f, (mp_vec)i, 1, row);
        for (int j = 0; j < d; j++)
            invalid_nan &= isnan(row[j]);
        mp_features_vec_row(f, (mp_vec)i, 2, row);
        for (int j = 0; j < d; j++)
            no_nan &= !isnan(row[j]);
    }
    /* [Na]Cl's Gasteiger charges are NaN (RDKit has no parameters for
     * sodium): NaN in the matrix, 0 in the vector */
    int j_min = -1;
    for (int j = 0; j < 200; j++)
        if (!strcmp(f->mat[MP_MAT_RDKIT2D].names[j], "MinPartialCharge"))
            j_min = j;
    double raw = j_min >= 0 ? f->mat[MP_MAT_RDKIT2D].values[2 * 200 + j_min] : 0;
    mp_features_vec_row(f, MP_VEC_RDKIT2D, 2, row);
    double read = j_min >= 0 ? row[j_min] : 1;
    mp_features_vec_row(f, MP_VEC_V2_CHARGE, 2, row);
    double charge = row[0];
    mp_features_vec_row(f, MP_VEC_V2_CHARGE, 0, row);
    double charge0 = row[0];
    mp_features_free(f);
    /* nothing computed: every dimension 0 */
    mp_featurize_opts none = { .layout = MP_ATOM_V1, .n_threads = 1 };
    CHECK_OK(mp_featurize(&f, smi, 1, &none));
    int zero = 1;
    for (int i = 0; i < MP_N_VECS; i++)
        zero &= mp_features_vec_dim(f, (mp_vec)i) == 0;
    mp_features_free(f);
    CHECK(dims_ok);
    CHECK(invalid_nan);
    CHECK(no_nan);
    CHECK(j_min >= 0);
    CHECK(isnan(raw));
    CHECK(read == 0.0);
    CHECK(charge == 0.0 && charge0 == 0.0);
    CHECK(zero);
}

MP_TEST(descriptors_missing_fragment_table)
{
    const char *smi[] = { "CCO" };
    const char *old = getenv("RDDATADIR");
    char *saved = old ? mp_strdup(old) : NULL;
    setenv("RDDATADIR", "/nonexistent-molprop-test", 1);
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 1, .sets = MP_SET_RDKIT2D };
    mp_features *f = (mp_features *)1;
    mp_status st = mp_featurize(&f, smi, 1, &o);
    const char *msg = strstr(mp_error_message(), "FragmentDescriptors.csv") &&
                              strstr(mp_error_message(), "rdkit-data")
                          ? "ok"
                          : mp_error_message();
    char msg_copy[512];
    snprintf(msg_copy, sizeof msg_copy, "%s", msg);
    /* the Morgan/graph path needs no table */
    mp_featurize_opts plain = { .layout = MP_ATOM_V1, .n_threads = 1, .sets = MP_SET_V2_MORGAN };
    mp_features *g = NULL;
    mp_status st_plain = mp_featurize(&g, smi, 1, &plain);
    mp_features_free(g);
    if (saved)
        setenv("RDDATADIR", saved, 1);
    else
        unsetenv("RDDATADIR");
    mp_free(saved);
    mp_features *h = NULL;
    mp_status st_back = mp_featurize(&h, smi, 1, &o);
    mp_features_free(h);
    CHECK(st == MP_ERR_IO);
    CHECK(f == NULL);
    CHECK_EQ_STR(msg_copy, "ok");
    CHECK_OK(st_plain);
    CHECK_OK(st_back);
}
