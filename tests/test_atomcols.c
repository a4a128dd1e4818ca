/*
 * test_atomcols.c - reading user atom / bond columns (Chemprop v1's
 * --atom_descriptors_path / --bond_features_path) into the graph store:
 * .npz archives written by numpy itself (tests/fixtures/atomcols/make.py:
 * np.savez and np.savez_compressed, float64 and Fortran-ordered float32),
 * CSV files, RDKit's bond order mapped onto the store's, and every bad case
 * with the file and molecule named.
 */
#include "test.h"

#include "featurize/atomcols.h"
#include "featurize/featurize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define FIX(f) "tests/fixtures/atomcols/" f

static const char *const SMILES[5] = { "CCO", "c1ccccc1O", "C", "not_a_smiles", "CC(=O)N" };

static mp_features *featurize5(void)
{
    mp_features *f = NULL;
    mp_featurize_opts o = { 0 };
    o.n_threads = 1;
    if (mp_featurize(&f, SMILES, 5, &o) != MP_OK)
        return NULL;
    return f;
}

/* The value make.py put at row r, column c of molecule m. */
static float cell(int m, int r, int c, double frac) { return (float)(1000 * m + 10 * r + c + frac); }

static void check_atoms(mp_test_result *mp__r, const mp_graphs *g, int width)
{
    CHECK_EQ_INT(g->xa_dim, width);
    for (int m = 0; m < 5; m++)
        for (int32_t v = g->mol_atom[m]; v < g->mol_atom[m + 1]; v++)
            for (int c = 0; c < width; c++)
                CHECK_NEAR(g->atom_x[(size_t)v * width + c], cell(m, v - g->mol_atom[m], c, 0.5),
                           0, 0);
}

MP_TEST(atomcols_npz_atoms_from_numpy)
{
    mp_features *f = featurize5();
    CHECK(f);
    CHECK_EQ_INT(f->g.valid[3], 0);
    CHECK_OK(mp_graphs_read_columns(&f->g, FIX("atoms3.npz"), 0, SMILES));
    check_atoms(mp__r, &f->g, 3);
    CHECK_OK(mp_graphs_read_columns(&f->g, FIX("atoms3_compressed.npz"), 0, SMILES));
    check_atoms(mp__r, &f->g, 3);
    CHECK_OK(mp_graphs_read_columns(&f->g, FIX("atoms2_f32_fortran.npz"), 0, SMILES));
    check_atoms(mp__r, &f->g, 2);
    CHECK(f->g.xb_dim == 0 && !f->g.bond_x);
    mp_features_free(f);
}

MP_TEST(atomcols_npz_bonds_in_rdkit_order)
{
    mp_features *f = featurize5();
    CHECK(f);
    const char *files[2] = { FIX("bonds2.npz"), FIX("bonds2_compressed.npz") };
    for (int k = 0; k < 2; k++) {
        CHECK_OK(mp_graphs_read_columns(&f->g, files[k], 1, SMILES));
        const mp_graphs *g = &f->g;
        CHECK_EQ_INT(g->xb_dim, 2);
        for (int m = 0; m < 5; m++)
            for (int32_t b = g->mol_edge[m] / 2; b < g->mol_edge[m + 1] / 2; b++)
                for (int c = 0; c < 2; c++)
                    CHECK_NEAR(g->bond_x[(size_t)b * 2 + c], cell(m, g->bond_rdkit[b], c, 0.25),
                               0, 0);
        /* phenol: RDKit appends ring closures after the chain's bonds, so the
         * closure c1...c1 (atoms 0 and 5) is RDKit's bond 6 (after 5-O), and
         * the store's second bond (Chemprop's order (0,1), (0,5), (1,2) ...) */
        int32_t b = g->mol_edge[1] / 2 + 1, e = 2 * b;
        CHECK_EQ_INT(g->edge_src[e] - g->mol_atom[1], 0);
        CHECK_EQ_INT(g->edge_dst[e] - g->mol_atom[1], 5);
        CHECK_NEAR(g->bond_x[(size_t)b * 2], cell(1, 6, 0, 0.25), 0, 0);
    }
    /* atom and bond blocks side by side */
    CHECK_OK(mp_graphs_read_columns(&f->g, FIX("atoms3.npz"), 0, SMILES));
    CHECK_EQ_INT(f->g.xb_dim, 2);
    CHECK_NEAR(f->g.bond_x[1], cell(0, f->g.bond_rdkit[0], 1, 0.25), 0, 0);
    check_atoms(mp__r, &f->g, 3);
    mp_features_free(f);
}

/* The call fails with `st` and a message holding every one of the needles. */
static void expect_fail(mp_test_result *mp__r, mp_graphs *g, const char *path, int bonds, mp_status st,
                        const char *n1, const char *n2)
{
    mp_status got = mp_graphs_read_columns(g, path, bonds, SMILES);
    const char *msg = mp_error_message();
    CHECK_MSG(got == st, "%s: status %d, expected %d (%s)", path, (int)got, (int)st, msg);
    CHECK_MSG(strstr(msg, path) != NULL, "message does not name the file: %s", msg);
    CHECK_MSG(!n1 || strstr(msg, n1), "message lacks '%s': %s", n1, msg);
    CHECK_MSG(!n2 || strstr(msg, n2), "message lacks '%s': %s", n2, msg);
    CHECK(bonds ? g->xb_dim == 0 && !g->bond_x : g->xa_dim == 0 && !g->atom_x);
}

MP_TEST(atomcols_npz_bad_files_named)
{
    mp_features *f = featurize5();
    CHECK(f);
    mp_graphs *g = &f->g;
    expect_fail(mp__r, g, FIX("bad_rows.npz"), 0, MP_ERR_FORMAT, "molecule 1 (c1ccccc1O)", "6 rows");
    expect_fail(mp__r, g, FIX("bad_width.npz"), 0, MP_ERR_FORMAT, "molecule 4 (CC(=O)N)", "2 columns");
    expect_fail(mp__r, g, FIX("bad_nan.npz"), 0, MP_ERR_FORMAT, "molecule 2 (C)", "nan");
    expect_fail(mp__r, g, FIX("bad_inf.npz"), 0, MP_ERR_FORMAT, "molecule 4", "row 3, column 2");
    expect_fail(mp__r, g, FIX("bad_count.npz"), 0, MP_ERR_FORMAT, "4 arrays for 5 input rows", NULL);
    expect_fail(mp__r, g, FIX("bad_3d.npz"), 0, MP_ERR_FORMAT, "molecule 1", "3-dimensional");
    expect_fail(mp__r, g, FIX("bad_dtype.npz"), 0, MP_ERR_FORMAT, "molecule 1", "dtype");
    expect_fail(mp__r, g, FIX("atoms3.npz"), 1, MP_ERR_FORMAT, "molecule 0 (CCO)", "2 bonds");
    expect_fail(mp__r, g, FIX("missing.npz"), 0, MP_ERR_IO, NULL, NULL);
    expect_fail(mp__r, g, FIX("make.py"), 0, MP_ERR_ARG, "unknown format", NULL);
    /* a file that is not a zip archive, and one cut short */
    char path[1024], cut[1024];
    snprintf(path, sizeof path, "%s/not_zip.npz", mp_test_tmpdir());
    FILE *fp = fopen(path, "w");
    CHECK(fp);
    fputs("this is not a zip archive at all, just text that goes on for a while\n", fp);
    fclose(fp);
    expect_fail(mp__r, g, path, 0, MP_ERR_FORMAT, "not an .npz", NULL);
    FILE *in = fopen(FIX("atoms3.npz"), "rb");
    CHECK(in);
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    snprintf(cut, sizeof cut, "%s/cut.npz", mp_test_tmpdir());
    fp = fopen(cut, "wb");
    CHECK(fp);
    fwrite(buf, 1, n - 40, fp);   /* the end of central directory lost */
    fclose(fp);
    expect_fail(mp__r, g, cut, 0, MP_ERR_FORMAT, NULL, NULL);
    /* a store from a cache file has no RDKit bond order: bonds refused */
    int32_t *keep = g->bond_rdkit;
    g->bond_rdkit = NULL;
    expect_fail(mp__r, g, FIX("bonds2.npz"), 1, MP_ERR_ARG, "cache", NULL);
    g->bond_rdkit = keep;
    mp_features_free(f);
}

/* Writes `text` to a temporary CSV and returns its path (static buffer). */
static const char *csv(const char *name, const char *text)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", mp_test_tmpdir(), name);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return NULL;
    fputs(text, fp);
    fclose(fp);
    return path;
}

MP_TEST(atomcols_csv_atoms_and_bonds)
{
    mp_features *f = featurize5();
    CHECK(f);
    mp_graphs *g = &f->g;
    /* every atom's row: molecule index, then 2 values */
    mp_buf b = { 0 };
    mp_buf_printf(&b, "mol,q,r\n");
    const int natoms[5] = { 3, 7, 1, 0, 4 }, nbonds[5] = { 2, 7, 0, 0, 3 };
    for (int m = 0; m < 5; m++)
        for (int r = 0; r < natoms[m]; r++)
            mp_buf_printf(&b, "%d,%g,%g\n", m, cell(m, r, 0, 0.5), cell(m, r, 1, 0.5));
    mp_buf_append(&b, "", 1);
    const char *p = csv("atoms.csv", b.data);
    CHECK(p);
    CHECK_OK(mp_graphs_read_columns(g, p, 0, SMILES));
    check_atoms(mp__r, g, 2);
    b.len = 0;
    mp_buf_printf(&b, "mol,w\n");
    for (int m = 0; m < 5; m++)
        for (int r = 0; r < nbonds[m]; r++)
            mp_buf_printf(&b, "%d,%g\n", m, cell(m, r, 0, 0.25));
    mp_buf_append(&b, "", 1);
    p = csv("bonds.csv", b.data);
    CHECK_OK(mp_graphs_read_columns(g, p, 1, SMILES));
    CHECK_EQ_INT(g->xb_dim, 1);
    for (int m = 0; m < 5; m++)
        for (int32_t k = g->mol_edge[m] / 2; k < g->mol_edge[m + 1] / 2; k++)
            CHECK_NEAR(g->bond_x[k], cell(m, g->bond_rdkit[k], 0, 0.25), 0, 0);
    mp_buf_free(&b);

    /* bad CSVs: each names the file and line or molecule */
    const char *ok3 = "0,1\n0,1\n0,1\n";
    char text[512];
    snprintf(text, sizeof text, "mol,a\n%s1,1\n", ok3);   /* molecule 1 cut at 1 row */
    expect_fail(mp__r, g, csv("short.csv", text), 0, MP_ERR_FORMAT, "molecule 1 (c1ccccc1O)",
                "7 atoms");
    snprintf(text, sizeof text, "mol,a\n%s0,1\n", ok3);   /* molecule 0 with 4 rows */
    expect_fail(mp__r, g, csv("long.csv", text), 0, MP_ERR_FORMAT, "molecule 0 (CCO)", "4 rows");
    snprintf(text, sizeof text, "mol,a\n0,1\n0,x\n");
    expect_fail(mp__r, g, csv("nonnum.csv", text), 0, MP_ERR_FORMAT, "nonnum.csv:3, column 2",
                "'x' is not a number");
    snprintf(text, sizeof text, "mol,a\n0,1\n0,nan\n0,2\n");
    expect_fail(mp__r, g, csv("nan.csv", text), 0, MP_ERR_FORMAT, "nan.csv:3, column 2", NULL);
    snprintf(text, sizeof text, "mol,a\n0,1,2\n");
    expect_fail(mp__r, g, csv("fields.csv", text), 0, MP_ERR_FORMAT, "fields.csv:2", "3 fields");
    snprintf(text, sizeof text, "mol,a\n%s9,1\n", ok3);
    expect_fail(mp__r, g, csv("index.csv", text), 0, MP_ERR_FORMAT, "index.csv:5, column 1",
                "not a molecule index");
    snprintf(text, sizeof text, "mol\n");
    expect_fail(mp__r, g, csv("header.csv", text), 0, MP_ERR_FORMAT, "header.csv:1", NULL);
    expect_fail(mp__r, g, FIX("nothing_here.csv"), 0, MP_ERR_IO, NULL, NULL);
    mp_features_free(f);
}

MP_TEST(atomcols_chunk_of_the_input)
{
    /* a file read once, applied to a store of input rows 2 .. 4 (a chunk) */
    mp_colfile cf;
    CHECK_OK(mp_colfile_read(&cf, FIX("atoms3.npz"), 5));
    CHECK_EQ_INT(cf.n_mols, 5);
    mp_features *f = NULL;
    mp_featurize_opts o = { 0 };
    o.n_threads = 1;
    CHECK_OK(mp_featurize(&f, SMILES + 2, 3, &o));
    CHECK_OK(mp_colfile_apply(&cf, &f->g, 0, 2, SMILES + 2));
    const mp_graphs *g = &f->g;
    for (int i = 0; i < 3; i++)
        for (int32_t v = g->mol_atom[i]; v < g->mol_atom[i + 1]; v++)
            for (int c = 0; c < 3; c++)
                CHECK_NEAR(g->atom_x[(size_t)v * 3 + c], cell(2 + i, v - g->mol_atom[i], c, 0.5),
                           0, 0);
    /* past the file's end: refused */
    CHECK(mp_colfile_apply(&cf, &f->g, 0, 3, NULL) == MP_ERR_ARG);
    mp_colfile_free(&cf);
    CHECK(mp_colfile_read(&cf, FIX("atoms3.npz"), 6) == MP_ERR_FORMAT);
    CHECK(strstr(mp_error_message(), "5 arrays for 6 input rows") != NULL);
    mp_features_free(f);
}
