/*
 * test_featurize.c - featurization against Chemprop v1.6.1's own output
 * (../shared/fixtures/chemprop_v1): validity, atom and bond hot slots,
 * masses, Morgan bits and counts, descriptors, scaffolds, row by row.
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/featurize.h"

#include <stdlib.h>
#include <string.h>

/* Featurizes the fixture SMILES with everything on (v1 layout). */
static mp_features *fixture_features(char ***smiles_out, int32_t *n)
{
    char **smiles = tf_fixture_smiles(n);
    if (!smiles)
        return NULL;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 1,
                            .scaffolds = 1, .n_threads = 2 };
    mp_features *f = NULL;
    if (mp_featurize(&f, (const char *const *)smiles, *n, &o) != MP_OK)
        f = NULL;
    *smiles_out = smiles;
    return f;
}

#define FIXTURE_OR_FAIL(f, smiles, n)                                                  \
    char **smiles;                                                                     \
    int32_t n;                                                                         \
    mp_features *f = fixture_features(&smiles, &n);                                    \
    CHECK_MSG(smiles, "fixtures missing: %s", tf_fixture("molecules.tsv"));            \
    CHECK_MSG(f, "mp_featurize failed: %s", mp_error_message())

/* "a,b,c" of an atom's hot slots. */
static void atom_hot_str(const mp_features *f, int32_t a, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < MP_ATOM_MAX_HOT; k++) {
        int16_t h = f->g.atom_hot[(size_t)a * MP_ATOM_MAX_HOT + k];
        if (h < 0)
            break;
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", k ? "," : "", h);
    }
}

static void bond_hot_str(const mp_features *f, int32_t b, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < MP_BOND_MAX_HOT; k++) {
        int8_t h = f->g.bond_hot[(size_t)b * MP_BOND_MAX_HOT + k];
        if (h < 0)
            break;
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", k ? "," : "", h);
    }
}

MP_TEST(featurize_fixture_molecules)
{
    FIXTURE_OR_FAIL(f, smiles, n);
    gzFile gz = gzopen(tf_fixture("molecules.tsv"), "rb");
    mp_buf b = { 0 };
    int32_t row = 0, n_invalid = 0;
    tf_read_line(gz, &b);   /* header */
    while (tf_read_line(gz, &b)) {
        char *c[8];
        int k = tf_split(b.data, c, 8);
        if (k != 6)
            break;
        int32_t m = atoi(c[0]);
        if (m != row || m >= n)
            break;
        row++;
        int valid = atoi(c[1]);
        if (f->g.valid[m] != valid) {
            mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s': valid %d, Chemprop %d (%s)",
                            m, smiles[m], f->g.valid[m], valid, f->error[m] ? f->error[m] : "");
            break;
        }
        if (!valid) {
            n_invalid++;
            if (!f->error[m] || !*f->error[m] || f->scaffold[m])
                break;
            continue;
        }
        if (f->error[m])
            break;
        if (f->g.mol_atom[m + 1] - f->g.mol_atom[m] != atoi(c[2]) ||
            f->g.mol_edge[m + 1] - f->g.mol_edge[m] != 2 * atoi(c[3])) {
            mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s': %d atoms %d edges, Chemprop "
                            "%s atoms %s bonds", m, smiles[m], f->g.mol_atom[m + 1] - f->g.mol_atom[m],
                            f->g.mol_edge[m + 1] - f->g.mol_edge[m], c[2], c[3]);
            break;
        }
        if (!f->scaffold[m] || strcmp(f->scaffold[m], c[4]) != 0) {
            mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s': scaffold '%s', Chemprop '%s'",
                            m, smiles[m], f->scaffold[m] ? f->scaffold[m] : "(null)", c[4]);
            break;
        }
    }
    gzclose(gz);
    mp_buf_free(&b);
    int32_t rows = row;   /* rows read and matched */
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_EQ_INT(rows, n);      /* every row was read and matched */
    CHECK_EQ_INT(n, 429);
    CHECK(n_invalid >= 5);
}

MP_TEST(featurize_fixture_atoms)
{
    FIXTURE_OR_FAIL(f, smiles, n);
    gzFile gz = gzopen(tf_fixture("atoms.tsv.gz"), "rb");
    CHECK(gz);
    mp_buf b = { 0 };
    int64_t rows = 0, bad = 0;
    int32_t *seen = calloc((size_t)n, sizeof *seen);
    char mine[256];
    tf_read_line(gz, &b);   /* header */
    while (tf_read_line(gz, &b)) {
        char *c[5];
        if (tf_split(b.data, c, 5) != 4) {
            bad++;
            break;
        }
        int32_t m = atoi(c[0]), a = atoi(c[1]);
        rows++;
        if (m < 0 || m >= n || !f->g.valid[m] || a != seen[m] ||
            a >= f->g.mol_atom[m + 1] - f->g.mol_atom[m]) {
            mp_test_fail_at(__FILE__, __LINE__, "atoms.tsv row %lld: molecule %d atom %d unexpected",
                            (long long)rows, m, a);
            bad++;
            break;
        }
        seen[m]++;
        int32_t ga = f->g.mol_atom[m] + a;
        atom_hot_str(f, ga, mine, sizeof mine);
        double mass = strtod(c[3], NULL);
        if (strcmp(mine, c[2]) != 0 || !(fabs(f->g.atom_mass[ga] - mass) <= 1e-6)) {
            if (bad++ < 5)
                mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s' atom %d: hot %s mass %.9g, "
                                "Chemprop hot %s mass %s", m, smiles[m], a, mine,
                                (double)f->g.atom_mass[ga], c[2], c[3]);
        }
    }
    gzclose(gz);
    mp_buf_free(&b);
    int32_t missing = 0;
    for (int32_t m = 0; m < n; m++)
        missing += seen[m] != f->g.mol_atom[m + 1] - f->g.mol_atom[m];
    free(seen);
    int32_t total = f->g.n_atoms;
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(rows, total);
    CHECK(rows > 5000);
}

/* The fixture lists bonds in RDKit's bond order; ours are in Chemprop v1's
 * (ascending (begin, end)), so each row is looked up by its atom pair. */
MP_TEST(featurize_fixture_bonds)
{
    FIXTURE_OR_FAIL(f, smiles, n);
    gzFile gz = gzopen(tf_fixture("bonds.tsv.gz"), "rb");
    CHECK(gz);
    mp_buf b = { 0 };
    int64_t rows = 0, bad = 0;
    int32_t *seen = calloc((size_t)n, sizeof *seen);
    uint8_t *matched = calloc((size_t)f->g.n_edges / 2 + 1, 1);
    char mine[64];
    tf_read_line(gz, &b);
    while (tf_read_line(gz, &b)) {
        char *c[5];
        if (tf_split(b.data, c, 5) != 4) {
            bad++;
            break;
        }
        int32_t m = atoi(c[0]), u = atoi(c[1]), v = atoi(c[2]);
        rows++;
        if (m < 0 || m >= n || !f->g.valid[m]) {
            bad++;
            break;
        }
        int32_t A = f->g.mol_atom[m], e = -1;
        for (int32_t x = f->g.mol_edge[m]; x < f->g.mol_edge[m + 1]; x += 2)
            if (f->g.edge_src[x] - A == u && f->g.edge_dst[x] - A == v)
                e = x;
        seen[m]++;
        if (e < 0 || matched[e / 2]) {
            if (bad++ < 5)
                mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s': no bond %d-%d", m,
                                smiles[m], u, v);
            continue;
        }
        matched[e / 2] = 1;
        bond_hot_str(f, e / 2, mine, sizeof mine);
        if (strcmp(mine, c[3]) != 0 && bad++ < 5)
            mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s' bond %d-%d: hot %s, Chemprop %s",
                            m, smiles[m], u, v, mine, c[3]);
    }
    gzclose(gz);
    mp_buf_free(&b);
    int32_t missing = 0, unordered = 0;
    for (int32_t m = 0; m < n; m++) {
        missing += 2 * seen[m] != f->g.mol_edge[m + 1] - f->g.mol_edge[m];
        /* Chemprop v1's order: (a1, a2) pairs ascending, a1 < a2 */
        for (int32_t e = f->g.mol_edge[m] + 2; e < f->g.mol_edge[m + 1]; e += 2) {
            int32_t pu = f->g.edge_src[e - 2], pv = f->g.edge_dst[e - 2];
            int32_t cu = f->g.edge_src[e], cv = f->g.edge_dst[e];
            unordered += !(pu < cu || (pu == cu && pv < cv));
        }
    }
    free(seen);
    free(matched);
    int32_t total = f->g.n_edges / 2;
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(unordered, 0);
    CHECK_EQ_INT(rows, total);
    CHECK(rows > 5000);
}

/* Benzene written as a ring: RDKit numbers the ring closure 0-5 last,
 * Chemprop v1 (and we) put it second. */
MP_TEST(featurize_bond_order_is_chemprops)
{
    const char *smi[] = { "c1ccccc1" };
    mp_features *f;
    CHECK_OK(mp_featurize(&f, smi, 1, NULL));
    const int want[6][2] = { { 0, 1 }, { 0, 5 }, { 1, 2 }, { 2, 3 }, { 3, 4 }, { 4, 5 } };
    int ok = f->g.n_edges == 12;
    for (int k = 0; ok && k < 6; k++)
        ok = f->g.edge_src[2 * k] == want[k][0] && f->g.edge_dst[2 * k] == want[k][1] &&
             f->g.edge_src[2 * k + 1] == want[k][1] && f->g.edge_dst[2 * k + 1] == want[k][0];
    /* atom 0's incoming edges: 1->0 (edge 1) and 5->0 (edge 3) */
    int csr = f->g.in_start[0] == 0 && f->g.in_start[1] == 2 && f->g.in_edge[0] == 1 &&
              f->g.in_edge[1] == 3;
    mp_features_free(f);
    CHECK(ok);
    CHECK(csr);
}

MP_TEST(featurize_fixture_morgan)
{
    FIXTURE_OR_FAIL(f, smiles, n);
    gzFile gz = gzopen(tf_fixture("morgan.tsv.gz"), "rb");
    CHECK(gz);
    mp_buf b = { 0 }, mine_bits = { 0 }, mine_counts = { 0 };
    int32_t rows = 0, bad = 0, n_valid = 0;
    for (int32_t m = 0; m < n; m++)
        n_valid += f->g.valid[m];
    tf_read_line(gz, &b);
    while (tf_read_line(gz, &b)) {
        char *c[4];
        if (tf_split(b.data, c, 4) != 3) {
            bad++;
            break;
        }
        int32_t m = atoi(c[0]);
        rows++;
        if (m < 0 || m >= n || !f->g.valid[m]) {
            bad++;
            break;
        }
        mine_bits.len = mine_counts.len = 0;
        mp_buf_append(&mine_bits, "", 0);
        mp_buf_append(&mine_counts, "", 0);
        for (int32_t j = f->morgan_start[m]; j < f->morgan_start[m + 1]; j++) {
            const char *sep = j > f->morgan_start[m] ? "," : "";
            mp_buf_printf(&mine_bits, "%s%u", sep, (unsigned)f->morgan_bit[j]);
            mp_buf_printf(&mine_counts, "%s%u:%u", sep, (unsigned)f->morgan_bit[j],
                          (unsigned)f->morgan_count[j]);
        }
        if (strcmp(mine_bits.data, c[1]) != 0 || strcmp(mine_counts.data, c[2]) != 0) {
            if (bad++ < 3)
                mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s': bits %s counts %s, "
                                "Chemprop bits %s counts %s", m, smiles[m], mine_bits.data,
                                mine_counts.data, c[1], c[2]);
        }
    }
    gzclose(gz);
    mp_buf_free(&b);
    mp_buf_free(&mine_bits);
    mp_buf_free(&mine_counts);
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(rows, n_valid);
}

MP_TEST(featurize_fixture_descriptors)
{
    FIXTURE_OR_FAIL(f, smiles, n);
    gzFile gz = gzopen(tf_fixture("descriptors.tsv.gz"), "rb");
    CHECK(gz);
    mp_buf b = { 0 };
    char *c[128];
    tf_read_line(gz, &b);
    int k = tf_split(b.data, c, 128);
    int names_ok = k == f->n_desc + 1 && !strcmp(c[0], "mol");
    for (int j = 0; names_ok && j < f->n_desc; j++)
        names_ok = !strcmp(c[j + 1], f->desc_names[j]);
    int32_t rows = 0, bad = 0, n_valid = 0, n_desc = f->n_desc;
    for (int32_t m = 0; m < n; m++)
        n_valid += f->g.valid[m];
    while (names_ok && tf_read_line(gz, &b)) {
        if (tf_split(b.data, c, 128) != n_desc + 1) {
            bad++;
            break;
        }
        int32_t m = atoi(c[0]);
        rows++;
        if (m < 0 || m >= n || !f->g.valid[m]) {
            bad++;
            break;
        }
        for (int j = 0; j < n_desc; j++) {
            double want = strtod(c[j + 1], NULL), got = f->desc[(size_t)m * n_desc + j];
            int same = (isnan(want) && isnan(got)) ||
                       fabs(got - want) <= 1e-9 * fabs(want) + 1e-12;
            if (!same && bad++ < 5)
                mp_test_fail_at(__FILE__, __LINE__, "molecule %d '%s' %s: %.17g, Chemprop %s",
                                m, smiles[m], f->desc_names[j], got, c[j + 1]);
        }
    }
    /* an invalid molecule's descriptors are NaN */
    int32_t nan_ok = 1;
    for (int32_t m = 0; m < n; m++)
        if (!f->g.valid[m])
            for (int j = 0; j < n_desc; j++)
                nan_ok &= isnan(f->desc[(size_t)m * n_desc + j]);
    gzclose(gz);
    mp_buf_free(&b);
    mp_features_free(f);
    tf_free_strings(smiles, n);
    CHECK_MSG(names_ok, "descriptor names differ from the fixture header");
    CHECK_EQ_INT(n_desc, 43);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(rows, n_valid);
    CHECK(nan_ok);
}

MP_TEST(featurize_invalid_reasons)
{
    const char *smi[] = { "xyz", "CN(C)(C)(C)C", "", "[H]", "C1CC", "CCO", "[*]" };
    mp_features *f;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 1 };
    CHECK_OK(mp_featurize(&f, smi, 7, &o));
    int ok = 1;
    for (int i = 0; i < 7; i++)
        ok &= (f->g.valid[i] == 0) == (f->error[i] != NULL) &&
              (!f->error[i] || strlen(f->error[i]) > 0);
    int parse = f->error[0] && strstr(f->error[0], "SMILES Parse Error") &&
                strstr(f->error[0], "xyz");
    int valence = f->error[1] && strstr(f->error[1], "Explicit valence for atom # 1 N");
    int empty = f->error[2] && strstr(f->error[2], "empty");
    int heavy = f->error[3] && strstr(f->error[3], "heavy");
    int ring = f->error[4] && strstr(f->error[4], "unclosed ring");
    int good = f->g.valid[5] && !f->error[5];
    int dummy = !f->g.valid[6];   /* a lone dummy atom has no heavy atom */
    if (!parse || !valence)
        printf("    reasons: '%s' / '%s'\n", f->error[0] ? f->error[0] : "",
               f->error[1] ? f->error[1] : "");
    mp_features_free(f);
    CHECK(ok);
    CHECK(parse);
    CHECK(valence);
    CHECK(empty);
    CHECK(heavy);
    CHECK(ring);
    CHECK(good);
    CHECK(dummy);
}

MP_TEST(featurize_rdkit_canonical)
{
    char *a = mp_rdkit_canonical("C1=CC=CC=C1");
    char *b = mp_rdkit_canonical("[CH3:1][OH:2]");
    char *c = mp_rdkit_canonical("xyz");
    CHECK_EQ_STR(a, "c1ccccc1");
    CHECK_EQ_STR(b, "CO");     /* atom maps cleared */
    CHECK(c == NULL);
    mp_free(a);
    mp_free(b);
    CHECK(strncmp(mp_rdkit_version(), "20", 2) == 0);
}
