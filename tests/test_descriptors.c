/*
 * test_descriptors.c - Chemprop's molecule vectors against the reference
 * tools' own output: v1's rdkit_2d and rdkit_2d_normalized against
 * ../shared/fixtures/chemprop_v1/rdkit2d*.tsv.gz (every molecule, every
 * descriptor), the normalization against descriptastorus at chosen points of
 * every distribution (tests/fixtures/rdkit2d_cdf_cases.tsv.gz), v2's
 * rdkit_2d, morgan_binary, morgan_count and charge against Chemprop 2.3.1
 * (tests/fixtures/chemprop_v2_features.tsv.gz; both made by
 * tests/fixtures/make_descriptor_fixtures.py), and molprop's faster routes
 * (one path enumeration, the SMARTS screen) against RDKit's own.
 *
 * Tolerances are the issue's: raw values within 1e-6 relative (Ipc, whose
 * recurrence is numerically fragile, 1e-2), normalized within 1e-6 absolute
 * (1e-5 for the gausshyper, tukeylambda, ncf, nct and ncx2 families).
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/desc2d.h"
#include "featurize/featurize.h"
#include "featurize/rdkit_bridge.h"

#include <stdlib.h>
#include <string.h>

#define LOCAL_FIXTURE(f) "tests/fixtures/" f

/* The fixture molecules featurized with the given sets (n_threads 2). */
static mp_features *fixture_sets(unsigned sets, char ***smiles, int32_t *n)
{
    *smiles = tf_fixture_smiles(n);
    if (!*smiles)
        return NULL;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 2, .sets = sets };
    mp_features *f = NULL;
    if (mp_featurize(&f, (const char *const *)*smiles, *n, &o) != MP_OK)
        return NULL;
    return f;
}

/* The descriptor families the report groups errors by. */
static const char *family_of(const char *name)
{
    static const char *const prefix[] = { "fr_", "Chi", "Kappa", "PEOE_VSA", "SMR_VSA",
                                          "SlogP_VSA", "EState_VSA", "VSA_EState", "FpDensity",
                                          "Num", "BCUT2D" };
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (!strncmp(name, prefix[i], strlen(prefix[i])))
            return prefix[i];
    if (strstr(name, "PartialCharge"))
        return "PartialCharge";
    if (strstr(name, "EStateIndex"))
        return "EStateIndex";
    return name;
}

typedef struct {
    const char *family;
    double worst;
    int worst_mol;
    const char *worst_name;
} family_err;

static void note_err(family_err *fe, int *n_fe, const char *name, double err, int mol)
{
    const char *fam = family_of(name);
    int i;
    for (i = 0; i < *n_fe; i++)
        if (!strcmp(fe[i].family, fam))
            break;
    if (i == *n_fe) {
        fe[i] = (family_err){ fam, 0, -1, name };
        (*n_fe)++;
    }
    if (err > fe[i].worst) {
        fe[i].worst = err;
        fe[i].worst_mol = mol;
        fe[i].worst_name = name;
    }
}

static void print_errs(const char *what, const family_err *fe, int n_fe)
{
    printf("    %s, worst error per family:", what);
    for (int i = 0; i < n_fe; i++)
        printf("%s %s %.2g", i % 4 ? "," : "\n     ", fe[i].family, fe[i].worst);
    printf("\n");
}

static int is_special_family(int j)
{
    const char *fam = mp_d2_norm_family(j, NULL);
    return fam && (!strcmp(fam, "gausshyper") || !strcmp(fam, "tukeylambda") ||
                   !strcmp(fam, "ncf") || !strcmp(fam, "nct") || !strcmp(fam, "ncx2"));
}

/*
 * Compares matrix k of f with a fixture file of layout "mol, names...":
 * header, one row per valid molecule, every cell (NaN of ours read as 0, as
 * Chemprop writes them).  normalized selects the absolute tolerances.
 */
static int compare_matrix(const mp_features *f, int k, const char *path, int normalized,
                          char **smiles)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        printf("    cannot open %s\n", path);
        return 0;
    }
    const mp_molmat *x = &f->mat[k];
    mp_buf b = { 0 };
    char *c[260];
    int ok = 1;
    tf_read_line(gz, &b);
    int nh = tf_split(b.data, c, 260);
    if (nh != x->n_cols + 1 || strcmp(c[0], "mol") != 0) {
        printf("    %s: %d columns, ours %d + mol\n", path, nh, x->n_cols);
        ok = 0;
    }
    for (int j = 0; ok && j < x->n_cols; j++)
        if (strcmp(c[j + 1], x->names[j]) != 0) {
            printf("    %s: column %d is %s, ours %s\n", path, j + 1, c[j + 1], x->names[j]);
            ok = 0;
        }
    family_err fe[64] = { { 0 } };
    int n_fe = 0;
    int32_t rows = 0, n_valid = 0, bad = 0;
    for (int32_t m = 0; m < f->g.n_mols; m++)
        n_valid += f->g.valid[m];
    while (ok && tf_read_line(gz, &b)) {
        if (tf_split(b.data, c, 260) != x->n_cols + 1) {
            ok = 0;
            break;
        }
        int32_t m = atoi(c[0]);
        rows++;
        if (m < 0 || m >= f->g.n_mols || !f->g.valid[m]) {
            printf("    %s: molecule %d is not valid here\n", path, (int)m);
            ok = 0;
            break;
        }
        for (int j = 0; j < x->n_cols; j++) {
            double want = strtod(c[j + 1], NULL);
            double got = x->values[(size_t)m * (size_t)x->n_cols + (size_t)j];
            if (isnan(got))
                got = 0.0;
            double err, tol;
            if (normalized) {
                err = fabs(got - want);
                tol = is_special_family(j) ? 1e-5 : 1e-6;
            } else {
                err = want == 0 ? fabs(got) : fabs(got - want) / fabs(want);
                tol = !strcmp(x->names[j], "Ipc") ? 1e-2 : 1e-6;
            }
            note_err(fe, &n_fe, x->names[j], err, (int)m);
            if (!(err <= tol) && bad++ < 8)
                printf("    molecule %d '%s' %s: %.17g, Chemprop %s\n", (int)m, smiles[m],
                       x->names[j], got, c[j + 1]);
        }
    }
    gzclose(gz);
    mp_buf_free(&b);
    print_errs(normalized ? "normalized" : "raw", fe, n_fe);
    if (rows != n_valid) {
        printf("    %s: %d rows, %d valid molecules\n", path, (int)rows, (int)n_valid);
        ok = 0;
    }
    return ok && bad == 0;
}

MP_TEST(descriptors_rdkit2d_fixture)
{
    char **smiles;
    int32_t n;
    mp_features *f = fixture_sets(MP_SET_RDKIT2D | MP_SET_RDKIT2D_NORM, &smiles, &n);
    CHECK_MSG(smiles, "fixtures missing: %s", tf_fixture("molecules.tsv"));
    CHECK_MSG(f, "mp_featurize failed: %s", mp_error_message());
    int raw = compare_matrix(f, MP_MAT_RDKIT2D, tf_fixture("rdkit2d.tsv.gz"), 0, smiles);
    int norm = compare_matrix(f, MP_MAT_RDKIT2D_NORM, tf_fixture("rdkit2d_normalized.tsv.gz"), 1,
                              smiles);
    /* NaN exactly where descriptastorus has it: the partial-charge extremes
     * of molecules 15, 25, 26, 29, 32, 35, 304 (README), nowhere else */
    static const int nan_mols[] = { 15, 25, 26, 29, 32, 35, 304 };
    int nan_ok = 1, n_nan = 0;
    const mp_molmat *x = &f->mat[MP_MAT_RDKIT2D];
    for (int32_t m = 0; m < n; m++) {
        if (!f->g.valid[m])
            continue;
        int expect = 0;
        for (size_t i = 0; i < sizeof nan_mols / sizeof *nan_mols; i++)
            expect |= nan_mols[i] == m;
        for (int j = 0; j < x->n_cols; j++) {
            int charge = strstr(x->names[j], "PartialCharge") != NULL;
            int is = isnan(x->values[(size_t)m * 200 + (size_t)j]);
            n_nan += is;
            nan_ok &= is == (expect && charge);
        }
    }
    /* an invalid molecule's row is NaN */
    int invalid_nan = 1;
    for (int32_t m = 0; m < n; m++)
        if (!f->g.valid[m])
            for (int j = 0; j < 200; j++)
                invalid_nan &= isnan(f->mat[MP_MAT_RDKIT2D_NORM].values[(size_t)m * 200 + j]);
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK(raw);
    CHECK(norm);
    CHECK(nan_ok);
    CHECK_EQ_INT(n_nan, 7 * 4);
    CHECK(invalid_nan);
}

MP_TEST(descriptors_cdf_every_family)
{
    CHECK_OK(mp_d2_norm_init());
    gzFile gz = gzopen(LOCAL_FIXTURE("rdkit2d_cdf_cases.tsv.gz"), "rb");
    CHECK_MSG(gz, "missing %s", LOCAL_FIXTURE("rdkit2d_cdf_cases.tsv.gz"));
    mp_buf b = { 0 };
    char *c[4];
    tf_read_line(gz, &b);
    int seen[MP_D2_V1] = { 0 }, bad = 0, lines = 0;
    const char *fams[64];
    int n_fams = 0;
    double worst_special = 0, worst_other = 0;
    while (tf_read_line(gz, &b)) {
        if (tf_split(b.data, c, 4) != 3) {
            bad++;
            break;
        }
        int j;
        for (j = 0; j < MP_D2_V1; j++)
            if (!strcmp(mp_d2_name(j), c[0]))
                break;
        if (j == MP_D2_V1) {
            printf("    unknown descriptor %s\n", c[0]);
            bad++;
            continue;
        }
        lines++;
        seen[j]++;
        const char *fam = mp_d2_norm_family(j, NULL);
        int k;
        for (k = 0; k < n_fams; k++)
            if (!strcmp(fams[k], fam))
                break;
        if (k == n_fams)
            fams[n_fams++] = fam;
        double x = strtod(c[1], NULL), want = strtod(c[2], NULL), got = mp_d2_norm_cdf(j, x);
        int special = is_special_family(j);
        if (isnan(want) || isnan(got)) {
            if (isnan(want) != isnan(got) && bad++ < 8)
                printf("    %s(%s): %.17g, descriptastorus %s\n", c[0], c[1], got, c[2]);
            continue;
        }
        double err = fabs(got - want);
        if (special)
            worst_special = err > worst_special ? err : worst_special;
        else
            worst_other = err > worst_other ? err : worst_other;
        if (!(err <= (special ? 1e-5 : 1e-6)) && bad++ < 8)
            printf("    %s (%s) at %s: %.17g, descriptastorus %s\n", c[0], fam, c[1], got, c[2]);
    }
    gzclose(gz);
    mp_buf_free(&b);
    printf("    %d points, %d families; worst %.2g (special families %.2g)\n", lines, n_fams,
           worst_other, worst_special);
    int all = 1;
    for (int j = 0; j < MP_D2_V1; j++)
        all &= seen[j] >= 5;
    CHECK_EQ_INT(bad, 0);
    CHECK(all);
    CHECK_EQ_INT(n_fams, 47);
    /* the rules around F: NaN stays NaN, clipping to [min, max] */
    CHECK(isnan(mp_d2_norm_cdf(0, NAN)));
    CHECK(mp_d2_norm_cdf(0, -1e300) == mp_d2_norm_cdf(0, 0.0));   /* BalabanJ's min is 0 */
    CHECK(isnan(mp_d2_norm_cdf(-1, 1.0)) && isnan(mp_d2_norm_cdf(MP_D2_V1, 1.0)));
}

/* The v2 fixture: mol, charge, morgan_binary, morgan_count, 208 rdkit_2d. */
MP_TEST(descriptors_chemprop_v2_fixture)
{
    char **smiles;
    int32_t n;
    mp_features *f = fixture_sets(MP_SET_V2_RDKIT2D | MP_SET_V2_MORGAN | MP_SET_V2_CHARGE,
                                  &smiles, &n);
    CHECK_MSG(smiles, "fixtures missing: %s", tf_fixture("molecules.tsv"));
    CHECK_MSG(f, "mp_featurize failed: %s", mp_error_message());
    gzFile gz = gzopen(LOCAL_FIXTURE("chemprop_v2_features.tsv.gz"), "rb");
    CHECK_MSG(gz, "missing %s", LOCAL_FIXTURE("chemprop_v2_features.tsv.gz"));
    mp_buf b = { 0 }, mine = { 0 };
    char *c[260];
    tf_read_line(gz, &b);
    int nh = tf_split(b.data, c, 260), names_ok = nh == 4 + MP_D2_ALL;
    CHECK_EQ_INT(mp_features_vec_dim(f, MP_VEC_V2_RDKIT2D), MP_D2_ALL);
    for (int j = 0; names_ok && j < MP_D2_ALL; j++)
        names_ok = !strcmp(c[4 + j], f->mat[MP_MAT_V2_RDKIT2D].names[j]);
    double row[MP_D2_ALL], fp[MP_MORGAN_BITS], q;
    family_err fe[64] = { { 0 } };
    int n_fe = 0, bad = 0, rows = 0;
    char tmp[32];
    while (names_ok && tf_read_line(gz, &b)) {
        if (tf_split(b.data, c, 260) != 4 + MP_D2_ALL) {
            bad++;
            break;
        }
        int32_t m = atoi(c[0]);
        rows++;
        if (m < 0 || m >= n || !f->g.valid[m]) {
            printf("    v2 fixture molecule %d is invalid here\n", (int)m);
            bad++;
            continue;
        }
        mp_features_vec_row(f, MP_VEC_V2_CHARGE, m, &q);
        if (q != strtod(c[1], NULL) && bad++ < 8)
            printf("    molecule %d charge %g, Chemprop %s\n", (int)m, q, c[1]);
        for (int counts = 0; counts < 2; counts++) {
            mp_features_vec_row(f, counts ? MP_VEC_V2_MORGAN_COUNT : MP_VEC_V2_MORGAN, m, fp);
            mine.len = 0;
            for (int k = 0; k < MP_MORGAN_BITS; k++)
                if (fp[k] != 0) {
                    int w = counts ? snprintf(tmp, sizeof tmp, "%s%d:%d", mine.len ? "," : "", k,
                                              (int)fp[k])
                                   : snprintf(tmp, sizeof tmp, "%s%d", mine.len ? "," : "", k);
                    mp_buf_append(&mine, tmp, (size_t)w);
                }
            mp_buf_append(&mine, "", 1);
            mine.len--;
            if (strcmp(mine.data ? mine.data : "", c[2 + counts]) != 0 && bad++ < 8)
                printf("    molecule %d '%s' morgan_%s differs\n", (int)m, smiles[m],
                       counts ? "count" : "binary");
        }
        mp_features_vec_row(f, MP_VEC_V2_RDKIT2D, m, row);
        for (int j = 0; j < MP_D2_ALL; j++) {
            const char *name = f->mat[MP_MAT_V2_RDKIT2D].names[j];
            double want = strtod(c[4 + j], NULL), got = row[j];
            double err = want == 0 ? fabs(got) : fabs(got - want) / fabs(want);
            double tol = !strcmp(name, "Ipc") ? 1e-2 : 1e-6;
            note_err(fe, &n_fe, name, err, (int)m);
            if (!(err <= tol) && bad++ < 8)
                printf("    molecule %d '%s' %s: %.17g, Chemprop v2 %s\n", (int)m, smiles[m],
                       name, got, c[4 + j]);
        }
    }
    gzclose(gz);
    mp_buf_free(&b);
    mp_buf_free(&mine);
    print_errs("v2 rdkit_2d", fe, n_fe);
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_MSG(names_ok, "v2 rdkit_2d names differ from Chemprop's header");
    CHECK(rows > 150);
    CHECK_EQ_INT(bad, 0);
}

/* v2 Morgan against RDKit's own generator (bits from getFingerprint, counts
 * from getCountFingerprint) on hiv molecules. */
MP_TEST(descriptors_v2_morgan_is_rdkits)
{
    int32_t n;
    char **smiles = tf_dataset_smiles("hiv", 600, &n);
    CHECK_MSG(smiles, "dataset mirror missing hiv");
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 2, .sets = MP_SET_V2_MORGAN };
    mp_features *f;
    CHECK_OK(mp_featurize(&f, (const char *const *)smiles, n, &o));
    static uint8_t bits[MP_MORGAN_BITS];
    static uint32_t counts[MP_MORGAN_BITS];
    static double b2[MP_MORGAN_BITS], c2[MP_MORGAN_BITS];
    int differ = 0, checked = 0;
    for (int32_t m = 0; m < n; m++) {
        int v = mp_rdk_morgan2_reference(smiles[m], bits, counts);
        if (v != f->g.valid[m]) {
            differ++;
            continue;
        }
        if (!v)
            continue;
        checked++;
        mp_features_vec_row(f, MP_VEC_V2_MORGAN, m, b2);
        mp_features_vec_row(f, MP_VEC_V2_MORGAN_COUNT, m, c2);
        for (int k = 0; k < MP_MORGAN_BITS; k++)
            if (b2[k] != bits[k] || c2[k] != counts[k] || (counts[k] > 0) != bits[k]) {
                if (differ++ < 3)
                    printf("    molecule %d '%s' bit %d: ours %g/%g, RDKit %d/%u\n", (int)m,
                           smiles[m], k, b2[k], c2[k], bits[k], counts[k]);
                break;
            }
    }
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK(checked > 500);
    CHECK_EQ_INT(differ, 0);
}

/* molprop's faster routes (one path enumeration for Chi2-4 n/v and
 * Kappa2-3; its own query molecules for HBA, HBD, rotatable bonds; one
 * fingerprint for FpDensityMorgan1-3; one Crippen typing for MolLogP, MolMR,
 * SlogP_VSA, SMR_VSA) against RDKit's own functions, on the fixture
 * molecules and hiv. */
MP_TEST(descriptors_fast_routes_are_rdkits)
{
    int32_t n1, n2;
    char **a = tf_fixture_smiles(&n1), **b = tf_dataset_smiles("hiv", 500, &n2);
    CHECK_MSG(a && b, "fixtures or dataset mirror missing");
    int32_t nmax = n1 > n2 ? n1 : n2;
    double *fast = mp_malloc((size_t)nmax * MP_D2_ALL * sizeof(double));
    double *ref = mp_malloc((size_t)nmax * MP_D2_ALL * sizeof(double));
    uint8_t *valid = mp_malloc((size_t)nmax), which[MP_D2_ALL];
    double worst = 0;
    int checked = 0, bad = 0, n_slots = 0, engine_failed = 0;
    for (int pass = 0; fast && ref && valid && pass < 2; pass++) {
        char **s = pass ? b : a;
        int32_t n = pass ? n2 : n1;
        if (mp_rdk_fast_reference((const char *const *)s, n, fast, ref, which, valid) != 0) {
            engine_failed++;
            break;
        }
        n_slots = 0;
        for (int j = 0; j < MP_D2_ALL; j++)
            n_slots += which[j];
        for (int32_t m = 0; m < n; m++) {
            if (!valid[m])
                continue;
            checked++;
            for (int j = 0; j < MP_D2_ALL; j++) {
                if (!which[j])
                    continue;
                double x = fast[(size_t)m * MP_D2_ALL + j], y = ref[(size_t)m * MP_D2_ALL + j];
                double err = y == 0 ? fabs(x) : fabs(x - y) / fabs(y);
                worst = err > worst ? err : worst;
                if (!(err <= 1e-12) && bad++ < 5)
                    printf("    '%s' %s: %.17g, RDKit %.17g\n", s[m], mp_d2_name(j), x, y);
            }
        }
    }
    printf("    %d molecules x %d descriptors, worst relative difference %.2g\n", checked,
           n_slots, worst);
    mp_free(fast);
    mp_free(ref);
    mp_free(valid);
    tf_free_strings(a, n1);
    tf_free_strings(b, n2);
    CHECK_EQ_INT(engine_failed, 0);
    CHECK(checked > 900);
    CHECK_EQ_INT(n_slots, 8 + 3 + 2 + 22 + 3);
    CHECK_EQ_INT(bad, 0);
}

/* The SMARTS screen skips only matches that cannot happen: the fr_* counts
 * and QED are the same bit for bit with it off. */
MP_TEST(descriptors_smarts_screen_is_exact)
{
    int32_t n1, n2;
    char **a = tf_fixture_smiles(&n1), **b = tf_dataset_smiles("hiv", 400, &n2);
    CHECK_MSG(a && b, "fixtures or dataset mirror missing");
    int differ = 0, compared = 0;
    for (int pass = 0; pass < 2; pass++) {
        char **s = pass ? b : a;
        int32_t n = pass ? n2 : n1;
        mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 2, .sets = MP_SET_RDKIT2D };
        mp_features *on = NULL, *off = NULL;
        mp_status s1 = mp_featurize(&on, (const char *const *)s, n, &o);
        mp_d2_set_screen(0);
        mp_status s2 = mp_featurize(&off, (const char *const *)s, n, &o);
        mp_d2_set_screen(1);
        if (s1 || s2) {
            mp_features_free(on);
            mp_features_free(off);
            tf_free_strings(a, n1);
            tf_free_strings(b, n2);
            MP_FAIL("mp_featurize failed: %s", mp_error_message());
        }
        for (int32_t m = 0; m < n; m++) {
            if (!on->g.valid[m])
                continue;
            compared++;
            for (int j = MP_D2_FR_FIRST; j <= D_qed; j++) {
                double x = on->mat[0].values[(size_t)m * 200 + j];
                double y = off->mat[0].values[(size_t)m * 200 + j];
                if (memcmp(&x, &y, sizeof x) != 0 && differ++ < 5)
                    printf("    '%s' %s: %.17g screened, %.17g not\n", s[m], mp_d2_name(j), x, y);
            }
        }
        mp_features_free(on);
        mp_features_free(off);
    }
    tf_free_strings(a, n1);
    tf_free_strings(b, n2);
    CHECK(compared > 750);
    CHECK_EQ_INT(differ, 0);
}
