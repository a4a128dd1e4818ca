/*
 * fuzz_smiles.c - the SMILES path through the RDKit bridge: mp_featurize
 * (parse, sanitize, atom and bond features, Morgan, descriptors, Murcko
 * scaffolds, the size limits before RDKit) and mp_rdkit_canonical.
 *
 * Input: up to 8 SMILES, one per line (a NUL ends the input).  The atom
 * layout is the input's length modulo 3; the descriptors (the slowest
 * part, most of a run's time) are computed for one input length in four,
 * the scaffolds for one in two, so the fuzzer runs several times faster
 * and still reaches both.  Checks: the store passes
 * mp_graphs_check, every molecule is valid or has a reason, Morgan bits
 * ascend, nothing leaks.
 */
#include "fuzz.h"
#include "featurize/featurize.h"

int mp_fuzz_smiles(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *smiles[8];
    int n = 0;
    for (char *p = text; n < 8;) {
        smiles[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    long live = mp_alloc_live();
    mp_featurize_opts o = { .layout = (mp_atom_layout)(size % 3), .morgan = 1,
                            .descriptors = size % 4 == 0, .scaffolds = size % 2 == 0,
                            .n_threads = 1 };
    mp_features *f = NULL;
    mp_status st = mp_featurize(&f, smiles, n, &o);
    if (st == MP_OK) {
        MP_FUZZ_CHECK(mp_graphs_check(&f->g) == MP_OK, "%s", mp_error_message());
        for (int i = 0; i < n; i++) {
            MP_FUZZ_CHECK(f->g.valid[i] == (f->error[i] == NULL), "molecule %d: valid %d", i,
                          (int)f->g.valid[i]);
            MP_FUZZ_CHECK(!f->scaffold || !f->g.valid[i] || f->scaffold[i], "molecule %d: no "
                          "scaffold", i);
            for (int32_t j = f->morgan_start[i] + 1; j < f->morgan_start[i + 1]; j++)
                MP_FUZZ_CHECK(f->morgan_bit[j] > f->morgan_bit[j - 1], "Morgan bits unsorted");
        }
        mp_features_free(f);
    } else {
        MP_FUZZ_CHECK(f == NULL && mp_error_message()[0], "a failure without a message");
    }
    if (size % 3 == 1)
        for (int i = 0; i < n; i++)
            mp_free(mp_rdkit_canonical(smiles[i]));
    free(text);
    MP_FUZZ_CHECK(mp_alloc_live() == live, "%ld blocks leaked", mp_alloc_live() - live);
    return 0;
}

MP_FUZZ_ENTRY(mp_fuzz_smiles)
