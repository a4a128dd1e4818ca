/*
 * test_featurize_parse.c - the bridge's shorter ways to RDKit's results
 * (rdkit_bridge.cpp): the parse without stereo perception for SMILES that
 * carry no stereo marks (stereo_free) gives every feature set exactly what
 * RDKit's whole SmilesToMol gives, and the Murcko scaffolds of murcko_core
 * are those of RDKit's MurckoDecompose: molecules of every dataset of the
 * mirror and a list of awkward ones, featurized both ways
 * (mp_rdk_set_reference).
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/featurize.h"
#include "featurize/rdkit_bridge.h"

#include <stdlib.h>
#include <string.h>

static const char *const DATASETS[] = { "bace", "bbbp", "clintox", "esol", "freesolv", "hiv",
                                        "lipo", "muv", "pdbbind_core", "pdbbind_full",
                                        "pdbbind_refined", "qm7", "qm8", "qm9", "sider",
                                        "tox21", "toxcast" };
#define N_DATASETS ((int)(sizeof DATASETS / sizeof DATASETS[0]))

/* Hydrogens kept or removed, charges, isotopes, radicals, dummy atoms,
 * metals, salts, possible (unmarked) stereocentres and double bonds, rings
 * RDKit cannot kekulize, bad valences; with and without stereo marks. */
static const char *const AWKWARD[] = {
    "[H]C([H])([H])[H]", "[2H]C([2H])([2H])[2H]", "[H][H]", "[H]", "[H]O[H]", "[H]/C=C/[H]",
    "C[N+](C)(C)C", "[O-]C(=O)c1ccccc1", "c1ccc2[nH]ccc2c1", "[nH]1cccc1", "[Na+].[Cl-]",
    "CC(F)(Cl)Br", "CC=CC", "C/C=C/C", "C/C=C\\C", "C[C@H](N)O", "C[C@@H](N)C(=O)O",
    "F[C@](Cl)(Br)I", "CC1CCC(C)CC1", "C[C@H]1CC[C@@H](C)CC1", "C1=CC=CC=C1", "c1cc1",
    "c1ccccc1c", "C(C)(C)(C)(C)C", "[CH2]", "[CH3]", "[O]", "*C", "[*]CC[*]", "C.C", "N#N",
    "O=S(=O)(O)O", "B1OC(C)(C)C(C)(C)O1", "[13CH4]", "[Cu-3]", "[Fe+2].[O-]C(=O)C",
    "CC(C)(C)[Si](C)(C)O", "C1CC1 name", "C1CC1\tname", "CCO |$;;$|", "C=C1CCCCC1",
    "C1CCCCCCC=CCCC1", "C1CCCC/C=C/CCC1", "[H]C(=O)N([H])[H]", "[H]N1C=CC=C1",
    "OC1C(O)C(O)C(O)C(O)C1O", "C12C3C4C1C5C2C3C45", "[C-]#[O+]", "[NH4+]", "[se]1cccc1",
    "c1ccc(cc1)P(c1ccccc1)c1ccccc1", "Cl[Pt](Cl)([NH3])[NH3]", "C(=O)=O", "[Xe]", "",
    /* scaffolds: linkers, branches on them, exocyclic double bonds, aromatic
     * N losing a substituent, separate fragments, no ring */
    "c1ccccc1CCc1ccccc1", "c1ccccc1C(C)(CC)Cc1ccncc1", "O=C(c1ccccc1)c1ccccc1",
    "C=C(CC1CC1)CC1CCC1", "Cn1ccc2ccccc21", "CN1C=CC=C1", "C[n+]1ccccc1",
    "O=C1CCC(=O)N1Cc1ccccc1", "C1CC1.C1CC1", "c1ccccc1.CCO", "CCCC(C)C",
    "C1CCC2(CC1)CCC2", "c1ccc2c(c1)CCc1ccccc1-2", "OCC1OC(O)C(O)C(O)C1O",
    "C(c1ccccc1)(c1ccccc1)c1ccccc1", "[O-][n+]1ccccc1CC1=CC=CC1",
};
#define N_AWKWARD ((int)(sizeof AWKWARD / sizeof AWKWARD[0]))

/* every dataset's first `per` rows (and the awkward list) */
static char **sample(int per, int32_t *n, int *n_free, int *n_marked)
{
    int32_t cap = N_DATASETS * per + N_AWKWARD, k = 0;
    char **s = malloc((size_t)cap * sizeof *s);
    if (!s)
        abort();
    for (int d = 0; d < N_DATASETS; d++) {
        int32_t m = 0;
        char **v = tf_dataset_smiles(DATASETS[d], per, &m);
        if (!v) {
            fprintf(stderr, "  %s.csv.gz missing from the data mirror\n", DATASETS[d]);
            tf_free_strings(s, k);
            return NULL;
        }
        for (int32_t i = 0; i < m; i++)
            s[k++] = v[i];
        free(v);
    }
    for (int i = 0; i < N_AWKWARD; i++)
        s[k++] = strdup(AWKWARD[i]);
    *n_free = *n_marked = 0;
    for (int32_t i = 0; i < k; i++)
        if (strpbrk(s[i], "@/\\ \t"))
            ++*n_marked;
        else
            ++*n_free;
    *n = k;
    return s;
}

/* Featurizes s both ways with o; 1 if the results are the same. */
static int same_both_ways(char **s, int32_t n, const mp_featurize_opts *o)
{
    mp_features *fast = NULL, *full = NULL;
    mp_status a = mp_featurize(&fast, (const char *const *)s, n, o);
    mp_rdk_set_reference(1);
    mp_status b = mp_featurize(&full, (const char *const *)s, n, o);
    mp_rdk_set_reference(0);
    int same = a == MP_OK && b == MP_OK && tf_same_features(fast, full);
    if (a == MP_OK && b == MP_OK && !same)
        for (int32_t i = 0; i < n; i++) {   /* name the first molecule that differs */
            mp_features *x = NULL, *y = NULL;
            const char *one[1] = { s[i] };
            mp_status p = mp_featurize(&x, one, 1, o);
            mp_rdk_set_reference(1);
            mp_status q = mp_featurize(&y, one, 1, o);
            mp_rdk_set_reference(0);
            int differs = p != MP_OK || q != MP_OK || !tf_same_features(x, y);
            mp_features_free(x);
            mp_features_free(y);
            if (differs) {
                fprintf(stderr, "  molecule %d, '%s', differs\n", (int)i, s[i]);
                break;
            }
        }
    mp_features_free(fast);
    mp_features_free(full);
    return same;
}

/* Every feature set but the descriptor registry (.descriptors, which takes
 * RDKit's whole parse for every molecule), on the first 120 molecules of
 * every dataset. */
MP_TEST(featurize_stereo_free_parse_equals_full_every_set)
{
    int32_t n;
    int n_free, n_marked;
    char **s = sample(120, &n, &n_free, &n_marked);
    CHECK(s);
    CHECK(n_free > 1000 && n_marked > 100);   /* both paths are exercised */
    CHECK_MSG(mp_rdk_desc2d_ready() == MP_OK, "%s", mp_error_message());
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .scaffolds = 1,
                            .n_threads = 2, .sets = MP_SET_ALL };
    int same = same_both_ways(s, n, &o);
    tf_free_strings(s, n);
    CHECK_MSG(same, "the parse without stereo perception changed a feature");
}

/* Murcko scaffolds alone, on 3,000 molecules of each dataset. */
MP_TEST(featurize_murcko_core_equals_rdkits)
{
    int32_t n;
    int n_free, n_marked;
    char **s = sample(3000, &n, &n_free, &n_marked);
    CHECK(s);
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .scaffolds = 1, .n_threads = 2 };
    int same = same_both_ways(s, n, &o);
    tf_free_strings(s, n);
    CHECK_MSG(same, "a scaffold differs from RDKit's MurckoDecompose");
}

/* Graphs (both atom layouts) and Morgan counts, on 3,000 molecules of each. */
MP_TEST(featurize_stereo_free_parse_equals_full_graphs)
{
    int32_t n;
    int n_free, n_marked;
    char **s = sample(3000, &n, &n_free, &n_marked);
    CHECK(s);
    CHECK(n_free > 30000 && n_marked > 3000);
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .n_threads = 2 };
    int same_v1 = same_both_ways(s, n, &o);
    o.layout = MP_ATOM_V2;
    o.morgan = 0;
    int same_v2 = same_both_ways(s, n, &o);
    tf_free_strings(s, n);
    CHECK_MSG(same_v1, "v1 graphs or Morgan counts differ");
    CHECK_MSG(same_v2, "v2 graphs differ");
}
