/*
 * test_featurize_graph.c - the graph store on whole datasets: identical for
 * any thread count, structural invariants (reverse edges, CSR), batches
 * (mp_graphs_select), the v2 and organic layouts, Morgan against RDKit's own
 * bit vector, and out-of-memory handling.
 */
#include "test.h"
#include "test_featurize_util.h"
#include "featurize/featurize.h"
#include "featurize/rdkit_bridge.h"

#include <stdlib.h>
#include <string.h>

/* A dataset's SMILES with a few invalid ones mixed in (the mirror's files
 * hold none that RDKit 2022.09 rejects). */
#define DATASET_OR_FAIL(smiles, n, name, max)                                          \
    int32_t n;                                                                         \
    char **smiles = tf_dataset_smiles(name, max, &n);                                  \
    CHECK_MSG(smiles && n > 0, "dataset %s not found (MOLPROP_DATA_MIRROR)", name);    \
    smiles = tf_add_invalid(smiles, &n)

MP_TEST(featurize_same_for_1_and_2_threads)
{
    DATASET_OR_FAIL(smiles, n, "bbbp", 0);
    /* all of bbbp with Morgan and scaffolds; descriptors (slow in RDKit) on 300 */
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .scaffolds = 1, .n_threads = 1 };
    mp_features *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    mp_status sa = mp_featurize(&a, (const char *const *)smiles, n, &o);
    o.n_threads = 2;
    mp_status sb = mp_featurize(&b, (const char *const *)smiles, n, &o);
    o.descriptors = 1;
    o.n_threads = 1;
    mp_status sc = mp_featurize(&c, (const char *const *)smiles, 300, &o);
    o.n_threads = 2;
    mp_status sd = mp_featurize(&d, (const char *const *)smiles, 300, &o);
    tf_free_strings(smiles, n);
    int same_ab = !sa && !sb && tf_same_features(a, b);
    int same_cd = !sc && !sd && tf_same_features(c, d);
    int32_t n_atoms = a ? a->g.n_atoms : 0;
    mp_features_free(a);
    mp_features_free(b);
    mp_features_free(c);
    mp_features_free(d);
    CHECK_OK(sa);
    CHECK_OK(sb);
    CHECK_OK(sc);
    CHECK_OK(sd);
    CHECK(n_atoms > 40000);
    CHECK(same_ab);
    CHECK(same_cd);
}

MP_TEST(featurize_graph_invariants_bbbp)
{
    DATASET_OR_FAIL(smiles, n, "bbbp", 0);
    mp_features *f;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 0, .n_threads = 2 };
    mp_status st = mp_featurize(&f, (const char *const *)smiles, n, &o);
    tf_free_strings(smiles, n);
    CHECK_OK(st);
    const mp_graphs *g = &f->g;
    /* Checked here directly, independently of mp_graphs_check. */
    int rev_ok = 1, csr_ok = 1, contiguous = 1;
    for (int32_t e = 0; e < g->n_edges; e++) {
        int32_t r = e ^ 1;
        rev_ok &= (r ^ 1) == e && g->edge_src[r] == g->edge_dst[e] && g->edge_dst[r] == g->edge_src[e];
    }
    int32_t *count = calloc((size_t)g->n_atoms + 1, sizeof *count);
    for (int32_t e = 0; e < g->n_edges; e++)
        count[g->edge_dst[e]]++;
    csr_ok &= g->in_start[0] == 0 && g->in_start[g->n_atoms] == g->n_edges;
    for (int32_t v = 0; v < g->n_atoms; v++) {
        csr_ok &= g->in_start[v + 1] - g->in_start[v] == count[v];
        for (int32_t j = g->in_start[v]; j < g->in_start[v + 1]; j++) {
            csr_ok &= g->edge_dst[g->in_edge[j]] == v;
            if (j > g->in_start[v])
                csr_ok &= g->in_edge[j] > g->in_edge[j - 1];
        }
    }
    free(count);
    for (int32_t m = 0; m < g->n_mols; m++)
        for (int32_t e = g->mol_edge[m]; e < g->mol_edge[m + 1]; e++)
            contiguous &= g->edge_src[e] >= g->mol_atom[m] && g->edge_src[e] < g->mol_atom[m + 1];
    /* bonds in Chemprop's order within every molecule (big ones take the
     * qsort path, small ones the insertion sort) */
    int ordered = 1, n_big = 0;
    for (int32_t m = 0; m < g->n_mols; m++) {
        n_big += g->mol_edge[m + 1] - g->mol_edge[m] > 2 * 64;
        for (int32_t e = g->mol_edge[m] + 2; e < g->mol_edge[m + 1]; e += 2)
            ordered &= g->edge_src[e - 2] < g->edge_src[e] ||
                       (g->edge_src[e - 2] == g->edge_src[e] && g->edge_dst[e - 2] < g->edge_dst[e]);
    }
    mp_status chk = mp_graphs_check(g);
    int32_t n_invalid = 0;
    for (int32_t m = 0; m < g->n_mols; m++)
        n_invalid += !g->valid[m];
    mp_features_free(f);
    CHECK(rev_ok);
    CHECK(csr_ok);
    CHECK(contiguous);
    CHECK(ordered);
    CHECK(n_big >= 1);
    CHECK_OK(chk);
    CHECK_EQ_INT(n_invalid, 12);   /* the ones tf_add_invalid put in */
}

MP_TEST(featurize_graphs_check_catches_damage)
{
    const char *smi[] = { "CCO", "c1ccccc1", "CC(=O)O" };
    mp_features *f;
    CHECK_OK(mp_featurize(&f, smi, 3, NULL));
    mp_graphs *g = &f->g;
    CHECK_OK(mp_graphs_check(g));
    int32_t t = g->edge_dst[3];
    g->edge_dst[3] = g->edge_src[3];        /* a self loop, and no longer the reverse */
    int c1 = mp_graphs_check(g) == MP_ERR_FORMAT;
    g->edge_dst[3] = t;
    t = g->in_edge[0];
    g->in_edge[0] = g->in_edge[1];
    int c2 = mp_graphs_check(g) == MP_ERR_FORMAT;
    g->in_edge[0] = t;
    t = g->mol_atom[1];
    g->mol_atom[1] = g->mol_atom[2] + 1;
    int c3 = mp_graphs_check(g) == MP_ERR_FORMAT;
    g->mol_atom[1] = t;
    g->atom_hot[3] = 200;
    int c4 = mp_graphs_check(g) == MP_ERR_FORMAT;
    mp_features_free(f);
    CHECK(c1);
    CHECK(c2);
    CHECK(c3);
    CHECK(c4);
}

MP_TEST(featurize_select_batch)
{
    const char *smi[] = { "CCO", "xyz", "c1ccccc1O", "C", "CC(=O)[O-].[NH4+]", "C1CC1" };
    mp_features *f;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .n_threads = 2 };
    CHECK_OK(mp_featurize(&f, smi, 6, &o));
    const mp_graphs *g = &f->g;
    const int32_t pick[] = { 2, 0, 1, 2, 5 };
    mp_graphs b = { 0 };
    CHECK_OK(mp_graphs_select(&b, g, pick, 5));
    CHECK_OK(mp_graphs_check(&b));
    CHECK_EQ_INT(b.n_mols, 5);
    CHECK_EQ_INT(b.n_atoms, 7 + 3 + 0 + 7 + 3);
    CHECK_EQ_INT(b.n_edges, 2 * (7 + 2 + 0 + 7 + 3));
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        int32_t m = pick[i];
        int32_t A0 = g->mol_atom[m], A = b.mol_atom[i], na = g->mol_atom[m + 1] - A0;
        int32_t E0 = g->mol_edge[m], E = b.mol_edge[i], ne = g->mol_edge[m + 1] - E0;
        ok &= b.valid[i] == g->valid[m] && b.mol_atom[i + 1] - A == na &&
              b.mol_edge[i + 1] - E == ne;
        ok &= !memcmp(b.atom_hot + (size_t)A * MP_ATOM_MAX_HOT, g->atom_hot + (size_t)A0 * MP_ATOM_MAX_HOT,
                      (size_t)na * MP_ATOM_MAX_HOT * sizeof(int16_t));
        ok &= !memcmp(b.atom_mass + A, g->atom_mass + A0, (size_t)na * sizeof(float));
        ok &= !memcmp(b.bond_hot + (size_t)E / 2 * MP_BOND_MAX_HOT,
                      g->bond_hot + (size_t)E0 / 2 * MP_BOND_MAX_HOT, (size_t)ne / 2 * MP_BOND_MAX_HOT);
        for (int32_t k = 0; k < ne; k++)
            ok &= b.edge_src[E + k] - A == g->edge_src[E0 + k] - A0 &&
                  b.edge_dst[E + k] - A == g->edge_dst[E0 + k] - A0 &&
                  b.in_edge[E + k] - E == g->in_edge[E0 + k] - E0;
        for (int32_t v = 0; v < na; v++)
            ok &= b.in_start[A + v] - E == g->in_start[A0 + v] - E0;
    }
    CHECK(ok);
    /* a smaller batch reuses the buffers */
    int16_t *hot_before = b.atom_hot;
    const int32_t pick2[] = { 3 };
    CHECK_OK(mp_graphs_select(&b, g, pick2, 1));
    CHECK(b.atom_hot == hot_before);
    CHECK_EQ_INT(b.n_atoms, 1);
    CHECK_EQ_INT(b.n_edges, 0);
    CHECK_OK(mp_graphs_check(&b));
    /* a bad index is refused */
    const int32_t bad[] = { 6 };
    CHECK(mp_graphs_select(&b, g, bad, 1) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "out of range") != NULL);
    mp_graphs_free(&b);
    mp_features_free(f);
}

MP_TEST(featurize_layout_widths_and_names)
{
    CHECK_EQ_INT(mp_atom_fdim(MP_ATOM_V1), 133);
    CHECK_EQ_INT(mp_atom_fdim(MP_ATOM_V2), 72);
    CHECK_EQ_INT(mp_atom_fdim(MP_ATOM_ORGANIC), 44);
    CHECK_EQ_STR(mp_atom_layout_name(MP_ATOM_V2), "v2");
    mp_atom_layout l;
    CHECK_OK(mp_atom_layout_parse("organic", &l));
    CHECK_EQ_INT(l, MP_ATOM_ORGANIC);
    CHECK_OK(mp_atom_layout_parse("V1", &l));
    CHECK_EQ_INT(l, MP_ATOM_V1);
    CHECK(mp_atom_layout_parse("v3", &l) == MP_ERR_ARG);
    CHECK(strstr(mp_error_message(), "v3") != NULL);
    mp_featurize_opts o = { .layout = (mp_atom_layout)7 };
    mp_features *f = (mp_features *)1;
    const char *smi[] = { "C" };
    CHECK(mp_featurize(&f, smi, 1, &o) == MP_ERR_ARG);
    CHECK(f == NULL);
}

/* Hot slots of atom a as a string. */
static const char *hot(const mp_features *f, int32_t a)
{
    static char buf[128];
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < MP_ATOM_MAX_HOT && f->g.atom_hot[(size_t)a * MP_ATOM_MAX_HOT + k] >= 0; k++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", k ? "," : "",
                                f->g.atom_hot[(size_t)a * MP_ATOM_MAX_HOT + k]);
    return buf;
}

/*
 * Hand-worked slots.  v2 (72): Z 0-37 (1..36, 53, unk), degree 38-44,
 * charge 45-50 (-1,-2,1,2,0,unk), chiral 51-55, H 56-61, hybridization 62-69
 * (S,SP,SP2,SP2D,SP3,SP3D,SP3D2,unk), aromatic 70, mass 71.
 * organic (44): Z 0-12 (H,B,C,N,O,F,Si,P,S,Cl,Br,I,unk), degree 13-19,
 * charge 20-25, chiral 26-30, H 31-36, hybridization 37-41 (S,SP,SP2,SP3,unk),
 * aromatic 42, mass 43.
 */
MP_TEST(featurize_v2_and_organic_by_hand)
{
    /* atoms: 0 C of methyl (CH3, SP3), 1 c aromatic CH, 7 I, then [Xe] */
    const char *smi[] = { "Cc1ccccc1I", "[Xe]", "[O-]C#N" };
    mp_features *f;
    mp_featurize_opts o = { .layout = MP_ATOM_V2, .n_threads = 1 };
    CHECK_OK(mp_featurize(&f, smi, 3, &o));
    CHECK_EQ_INT(f->g.atom_fdim, 72);
    CHECK_EQ_STR(hot(f, 0), "5,42,49,51,59,66");        /* C: deg 4, H3, SP3 */
    CHECK_EQ_STR(hot(f, 2), "5,41,49,51,57,64,70");     /* aromatic CH: deg 3, H1, SP2 */
    CHECK_EQ_STR(hot(f, 1), "5,41,49,51,56,64,70");     /* aromatic C, no H */
    CHECK_EQ_STR(hot(f, 7), "36,39,49,51,56,66");       /* I: deg 1, SP3 */
    CHECK_EQ_INT(atoi(hot(f, 8)), 37);                  /* Xe: unknown Z */
    CHECK_EQ_STR(hot(f, 9), "7,39,45,51,56,64");        /* O-: charge -1 (slot 45), SP2 (RDKit: conjugated) */
    CHECK_EQ_STR(hot(f, 10), "5,40,49,51,56,63");       /* C of C#N: SP */
    CHECK_NEAR(f->g.atom_mass[7], 1.26904, 1e-4, 0);
    mp_features_free(f);

    o.layout = MP_ATOM_ORGANIC;
    CHECK_OK(mp_featurize(&f, smi, 3, &o));
    CHECK_EQ_INT(f->g.atom_fdim, 44);
    CHECK_EQ_STR(hot(f, 0), "2,17,24,26,34,40");
    CHECK_EQ_STR(hot(f, 2), "2,16,24,26,32,39,42");
    CHECK_EQ_STR(hot(f, 7), "11,14,24,26,31,40");
    CHECK_EQ_INT(atoi(hot(f, 8)), 12);                  /* Xe: unknown */
    CHECK_EQ_STR(hot(f, 9), "4,14,20,26,31,39");
    CHECK_EQ_STR(hot(f, 10), "2,15,24,26,31,38");
    mp_features_free(f);

    /* v1, same molecules: the 133 layout of the fixtures */
    o.layout = MP_ATOM_V1;
    CHECK_OK(mp_featurize(&f, smi, 3, &o));
    CHECK_EQ_STR(hot(f, 0), "5,105,112,114,122,127");
    CHECK_EQ_STR(hot(f, 8), "53,101,112,114,119,127");  /* Xe Z=54, no neighbours; RDKit calls it SP3 */
    mp_features_free(f);
}

MP_TEST(featurize_morgan_bits_match_rdkit_bitvect)
{
    DATASET_OR_FAIL(smiles, n, "bbbp", 400);
    mp_features *f;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .n_threads = 2 };
    mp_status st = mp_featurize(&f, (const char *const *)smiles, n, &o);
    int bad = 0, checked = 0;
    float dense[MP_MORGAN_BITS], counts[MP_MORGAN_BITS];
    uint8_t ref[MP_MORGAN_BITS];
    for (int32_t m = 0; !st && m < n; m++) {
        int v = mp_rdk_morgan_bitvect(smiles[m], ref);
        if (v != f->g.valid[m]) {
            bad++;
            continue;
        }
        if (!v)
            continue;
        checked++;
        mp_features_morgan_dense(f, m, 0, dense);
        mp_features_morgan_dense(f, m, 1, counts);
        for (int j = 0; j < MP_MORGAN_BITS; j++)
            bad += dense[j] != (float)ref[j] || (counts[j] > 0) != (ref[j] != 0);
    }
    tf_free_strings(smiles, n);
    if (!st)
        mp_features_free(f);
    CHECK_OK(st);
    CHECK(checked > 300);
    CHECK_EQ_INT(bad, 0);
}

/* Every allocation of mp_featurize failing in turn: a clean MP_ERR_NOMEM,
 * nothing leaked, and success once allocations are allowed to succeed. */
MP_TEST(featurize_out_of_memory_is_clean)
{
    const char *smi[] = { "CCO", "xyz", "c1ccccc1C(=O)O", "C1CC1N" };
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .descriptors = 1,
                            .scaffolds = 1, .n_threads = 1 };
    /* warm up RDKit's lazily built singletons before counting */
    mp_features *f = NULL;
    CHECK_OK(mp_featurize(&f, smi, 4, &o));
    mp_features_free(f);
    long live = mp_alloc_live();
    int nomem = 0, ok_at = -1;
    for (int k = 0; k < 400; k++) {
        mp_alloc_fail_after(k);
        f = NULL;
        mp_status st = mp_featurize(&f, smi, 4, &o);
        mp_alloc_fail_after(-1);
        if (st == MP_OK) {
            ok_at = k;
            mp_features_free(f);
            break;
        }
        if (st != MP_ERR_NOMEM || f != NULL || mp_alloc_live() != live) {
            mp_test_fail_at(__FILE__, __LINE__, "failing allocation %d: %s, %ld blocks leaked", k,
                            mp_status_name(st), mp_alloc_live() - live);
            nomem = -1000;
            break;
        }
        nomem++;
    }
    CHECK(nomem > 20);
    CHECK(ok_at > 0);
    CHECK_EQ_INT(mp_alloc_live(), live);
}

/* Our Morgan counts against RDKit's GetHashedMorganFingerprint, molecule by
 * molecule, on all of bbbp and the fixture SMILES (edge cases: salts, lone
 * ions, isotopes, dummies, rings, stereo). */
MP_TEST(featurize_morgan_counts_match_rdkit)
{
    DATASET_OR_FAIL(smiles, n, "bbbp", 0);
    int32_t nf;
    char **fix = tf_fixture_smiles(&nf);
    CHECK_MSG(fix, "fixtures missing");
    int32_t total = n + nf;
    char **all = malloc((size_t)total * sizeof *all);
    memcpy(all, smiles, (size_t)n * sizeof *all);
    memcpy(all + n, fix, (size_t)nf * sizeof *all);
    mp_features *f = NULL;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .n_threads = 2 };
    mp_status st = mp_featurize(&f, (const char *const *)all, total, &o);
    int32_t checked = 0, bad = 0;
    static uint32_t ref[MP_MORGAN_BITS];
    float mine[MP_MORGAN_BITS];
    for (int32_t m = 0; !st && m < total; m++) {
        int v = mp_rdk_morgan_reference(all[m], ref);
        if (v != f->g.valid[m]) {
            bad++;
            continue;
        }
        if (!v)
            continue;
        checked++;
        mp_features_morgan_dense(f, m, 1, mine);
        int diff = 0;
        for (int j = 0; j < MP_MORGAN_BITS; j++)
            diff += mine[j] != (float)ref[j];
        if (diff && bad++ < 3)
            printf("    molecule %d '%s': %d bits differ from RDKit\n", m, all[m], diff);
    }
    free(all);
    tf_free_strings(smiles, n);
    tf_free_strings(fix, nf);
    mp_features_free(f);
    CHECK_OK(st);
    CHECK(checked > 2000);
    CHECK_EQ_INT(bad, 0);
}

/* The molecules where morgan_counts decides from the graph alone which
 * environments meet (rdkit_bridge.cpp): two-atom fragments (equal and
 * unequal ends, beside other fragments), atoms whose neighbours are all
 * terminal, lone atoms, atoms of more than 4 bonds, and more than 64 and
 * 128 bonds (environments of 2 and 3 words). */
MP_TEST(featurize_morgan_edge_cases_match_rdkit)
{
    char chain[400];
    int k = 0;
    for (int a = 0; a < 140; a++)
        k += snprintf(chain + k, sizeof chain - (size_t)k, a % 7 == 3 ? "C(O)" : "C");
    const char *smi[] = { "CC", "CO", "C.C", "CC.CC", "CO.OC.C", "[Na+].[Cl-]", "O", "[H][H]",
                          "C#N", "N#N", "O=C=O", "CC(C)(C)C", "CC(C)C", "C(F)(F)(F)F",
                          "FS(F)(F)(F)(F)F", "Cl[Fe](Cl)(Cl)(Cl)(Cl)Cl", "OS(=O)(=O)O",
                          "CCC", "CCCC", "C1CC1", "c1ccccc1", "C1CC1.C1CC1", "CC(=O)[O-].[Na+]",
                          "[13CH3][12CH3]", "[CH3][CH3].[CH3][CH2][CH3]", "C12C3C4C1C5C2C3C45",
                          "CC(C)(C)C(C)(C)C", chain };
    int32_t n = (int32_t)(sizeof smi / sizeof smi[0]);
    mp_features *f = NULL;
    mp_featurize_opts o = { .layout = MP_ATOM_V1, .morgan = 1, .n_threads = 1 };
    CHECK_OK(mp_featurize(&f, smi, n, &o));
    static uint32_t ref[MP_MORGAN_BITS];
    float mine[MP_MORGAN_BITS];
    int32_t bad = 0;
    for (int32_t m = 0; m < n; m++) {
        int v = mp_rdk_morgan_reference(smi[m], ref);
        CHECK_EQ_INT(v, f->g.valid[m]);
        if (!v)
            continue;
        mp_features_morgan_dense(f, m, 1, mine);
        int diff = 0;
        for (int j = 0; j < MP_MORGAN_BITS; j++)
            diff += mine[j] != (float)ref[j];
        if (diff && bad++ < 3)
            printf("    '%s': %d bits differ from RDKit\n", smi[m], diff);
    }
    mp_features_free(f);
    CHECK_EQ_INT(bad, 0);
}
