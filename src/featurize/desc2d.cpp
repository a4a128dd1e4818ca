/*
 * desc2d.cpp - the driver of the RDKit 2D descriptor engine (desc2d.h): the
 * names, the per-thread context, and the descriptors that are one RDKit C++
 * call each or a few lines on top of one.
 *
 * What RDKit's Python functions are, and so what this file computes:
 *   - 75 values come straight from RDKit C++ (rdMolDescriptors forwards
 *     them): molecular weights, Lipinski counts, ring counts, LabuteASA,
 *     TPSA, Crippen logP/MR, Chi0n-4n, Chi0v-4v (calcChi2v/calcChi2n: the C++
 *     Properties registry hands out Chi3v/Chi3n under the names chi2v/chi2n),
 *     HallKierAlpha, Kappa1-3 and the PEOE/SMR/SlogP VSA bins;
 *   - Max/Min(Abs)PartialCharge: a running min/max over the Gasteiger charges
 *     in atom order from 500 / -500, with Python's min/max rule for NaN (a NaN
 *     charge makes the running value NaN; the next number replaces it);
 *   - FpDensityMorgan1-3: distinct identifiers of the unfolded Morgan count
 *     fingerprint of radius 1-3, per heavy atom (one radius-3 fingerprint: an
 *     identifier belongs to radius r when an atom sets it at a layer <= r);
 *   - NumValenceElectrons, NumRadicalElectrons, HeavyAtomCount;
 *   - BCUT2D (descList only): RDKit's C++, NaN when it throws.
 * desc2d_graph.cpp and desc2d_smarts.cpp compute the rest.
 */
#include "featurize/desc2d.h"

#include <RDGeneral/RDConfig.h>   /* first: the library's layout switches */
#include <GraphMol/Descriptors/ConnectivityDescriptors.h>
#include <GraphMol/Descriptors/Crippen.h>
#include <GraphMol/Descriptors/Lipinski.h>
#include <GraphMol/Descriptors/MolDescriptors.h>
#include <GraphMol/Descriptors/MolSurf.h>
#include <GraphMol/Fingerprints/MorganFingerprints.h>
#include <GraphMol/GraphMol.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/PartialCharges/GasteigerCharges.h>
#include <GraphMol/PeriodicTable.h>
#include <DataStructs/SparseIntVect.h>
/* Debian's RDKit is built with Eigen (libRDKitDescriptors has BCUT2D); the
 * header declares it only under this switch, which RDKit's build sets. */
#ifndef RDK_HAS_EIGEN3
#define RDK_HAS_EIGEN3
#define MP_UNDEF_EIGEN3
#endif
#include <GraphMol/Descriptors/BCUT.h>
#ifdef MP_UNDEF_EIGEN3
#undef RDK_HAS_EIGEN3
#endif

#include <RDGeneral/hash/hash.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

using RDKit::Atom;
using RDKit::ROMol;
namespace D = RDKit::Descriptors;

/* ===================================================================== */
/* Names                                                                  */
/* ===================================================================== */

/* The engine's order: descriptastorus' RDKit2D columns (ASCII order), then
 * the BCUT2D values of RDKit's descList. */
static const char *const engine_names[MP_D2_ALL] = {
    "BalabanJ", "BertzCT", "Chi0", "Chi0n", "Chi0v", "Chi1", "Chi1n", "Chi1v", "Chi2n",
    "Chi2v", "Chi3n", "Chi3v", "Chi4n", "Chi4v", "EState_VSA1", "EState_VSA10",
    "EState_VSA11", "EState_VSA2", "EState_VSA3", "EState_VSA4", "EState_VSA5",
    "EState_VSA6", "EState_VSA7", "EState_VSA8", "EState_VSA9", "ExactMolWt",
    "FpDensityMorgan1", "FpDensityMorgan2", "FpDensityMorgan3", "FractionCSP3",
    "HallKierAlpha", "HeavyAtomCount", "HeavyAtomMolWt", "Ipc", "Kappa1", "Kappa2", "Kappa3",
    "LabuteASA", "MaxAbsEStateIndex", "MaxAbsPartialCharge", "MaxEStateIndex",
    "MaxPartialCharge", "MinAbsEStateIndex", "MinAbsPartialCharge", "MinEStateIndex",
    "MinPartialCharge", "MolLogP", "MolMR", "MolWt", "NHOHCount", "NOCount",
    "NumAliphaticCarbocycles", "NumAliphaticHeterocycles", "NumAliphaticRings",
    "NumAromaticCarbocycles", "NumAromaticHeterocycles", "NumAromaticRings", "NumHAcceptors",
    "NumHDonors", "NumHeteroatoms", "NumRadicalElectrons", "NumRotatableBonds",
    "NumSaturatedCarbocycles", "NumSaturatedHeterocycles", "NumSaturatedRings",
    "NumValenceElectrons", "PEOE_VSA1", "PEOE_VSA10", "PEOE_VSA11", "PEOE_VSA12",
    "PEOE_VSA13", "PEOE_VSA14", "PEOE_VSA2", "PEOE_VSA3", "PEOE_VSA4", "PEOE_VSA5",
    "PEOE_VSA6", "PEOE_VSA7", "PEOE_VSA8", "PEOE_VSA9", "RingCount", "SMR_VSA1", "SMR_VSA10",
    "SMR_VSA2", "SMR_VSA3", "SMR_VSA4", "SMR_VSA5", "SMR_VSA6", "SMR_VSA7", "SMR_VSA8",
    "SMR_VSA9", "SlogP_VSA1", "SlogP_VSA10", "SlogP_VSA11", "SlogP_VSA12", "SlogP_VSA2",
    "SlogP_VSA3", "SlogP_VSA4", "SlogP_VSA5", "SlogP_VSA6", "SlogP_VSA7", "SlogP_VSA8",
    "SlogP_VSA9", "TPSA", "VSA_EState1", "VSA_EState10", "VSA_EState2", "VSA_EState3",
    "VSA_EState4", "VSA_EState5", "VSA_EState6", "VSA_EState7", "VSA_EState8", "VSA_EState9",
    "fr_Al_COO", "fr_Al_OH", "fr_Al_OH_noTert", "fr_ArN", "fr_Ar_COO", "fr_Ar_N", "fr_Ar_NH",
    "fr_Ar_OH", "fr_COO", "fr_COO2", "fr_C_O", "fr_C_O_noCOO", "fr_C_S", "fr_HOCCN",
    "fr_Imine", "fr_NH0", "fr_NH1", "fr_NH2", "fr_N_O", "fr_Ndealkylation1",
    "fr_Ndealkylation2", "fr_Nhpyrrole", "fr_SH", "fr_aldehyde", "fr_alkyl_carbamate",
    "fr_alkyl_halide", "fr_allylic_oxid", "fr_amide", "fr_amidine", "fr_aniline",
    "fr_aryl_methyl", "fr_azide", "fr_azo", "fr_barbitur", "fr_benzene", "fr_benzodiazepine",
    "fr_bicyclic", "fr_diazo", "fr_dihydropyridine", "fr_epoxide", "fr_ester", "fr_ether",
    "fr_furan", "fr_guanido", "fr_halogen", "fr_hdrzine", "fr_hdrzone", "fr_imidazole",
    "fr_imide", "fr_isocyan", "fr_isothiocyan", "fr_ketone", "fr_ketone_Topliss", "fr_lactam",
    "fr_lactone", "fr_methoxy", "fr_morpholine", "fr_nitrile", "fr_nitro", "fr_nitro_arom",
    "fr_nitro_arom_nonortho", "fr_nitroso", "fr_oxazole", "fr_oxime", "fr_para_hydroxylation",
    "fr_phenol", "fr_phenol_noOrthoHbond", "fr_phos_acid", "fr_phos_ester", "fr_piperdine",
    "fr_piperzine", "fr_priamide", "fr_prisulfonamd", "fr_pyridine", "fr_quatN", "fr_sulfide",
    "fr_sulfonamd", "fr_sulfone", "fr_term_acetylene", "fr_tetrazole", "fr_thiazole",
    "fr_thiocyan", "fr_thiophene", "fr_unbrch_alkane", "fr_urea", "qed",
    "BCUT2D_MWHI", "BCUT2D_MWLOW", "BCUT2D_CHGHI", "BCUT2D_CHGLO", "BCUT2D_LOGPHI",
    "BCUT2D_LOGPLOW", "BCUT2D_MRHI", "BCUT2D_MRLOW",
};

/* RDKit 2022.09's rdkit.Chem.Descriptors._descList, in its order (Chemprop
 * v2's rdkit_2d): the module-level functions of Descriptors, then those of
 * GraphDescriptors, MolSurf, EState_VSA, Lipinski, Crippen, Fragments. */
static const char *const desclist_names[MP_D2_ALL] = {
    "MaxEStateIndex", "MinEStateIndex", "MaxAbsEStateIndex", "MinAbsEStateIndex", "qed",
    "MolWt", "HeavyAtomMolWt", "ExactMolWt", "NumValenceElectrons", "NumRadicalElectrons",
    "MaxPartialCharge", "MinPartialCharge", "MaxAbsPartialCharge", "MinAbsPartialCharge",
    "FpDensityMorgan1", "FpDensityMorgan2", "FpDensityMorgan3", "BCUT2D_MWHI",
    "BCUT2D_MWLOW", "BCUT2D_CHGHI", "BCUT2D_CHGLO", "BCUT2D_LOGPHI", "BCUT2D_LOGPLOW",
    "BCUT2D_MRHI", "BCUT2D_MRLOW", "BalabanJ", "BertzCT", "Chi0", "Chi0n", "Chi0v", "Chi1",
    "Chi1n", "Chi1v", "Chi2n", "Chi2v", "Chi3n", "Chi3v", "Chi4n", "Chi4v", "HallKierAlpha",
    "Ipc", "Kappa1", "Kappa2", "Kappa3", "LabuteASA", "PEOE_VSA1", "PEOE_VSA10", "PEOE_VSA11",
    "PEOE_VSA12", "PEOE_VSA13", "PEOE_VSA14", "PEOE_VSA2", "PEOE_VSA3", "PEOE_VSA4",
    "PEOE_VSA5", "PEOE_VSA6", "PEOE_VSA7", "PEOE_VSA8", "PEOE_VSA9", "SMR_VSA1", "SMR_VSA10",
    "SMR_VSA2", "SMR_VSA3", "SMR_VSA4", "SMR_VSA5", "SMR_VSA6", "SMR_VSA7", "SMR_VSA8",
    "SMR_VSA9", "SlogP_VSA1", "SlogP_VSA10", "SlogP_VSA11", "SlogP_VSA12", "SlogP_VSA2",
    "SlogP_VSA3", "SlogP_VSA4", "SlogP_VSA5", "SlogP_VSA6", "SlogP_VSA7", "SlogP_VSA8",
    "SlogP_VSA9", "TPSA", "EState_VSA1", "EState_VSA10", "EState_VSA11", "EState_VSA2",
    "EState_VSA3", "EState_VSA4", "EState_VSA5", "EState_VSA6", "EState_VSA7", "EState_VSA8",
    "EState_VSA9", "VSA_EState1", "VSA_EState10", "VSA_EState2", "VSA_EState3", "VSA_EState4",
    "VSA_EState5", "VSA_EState6", "VSA_EState7", "VSA_EState8", "VSA_EState9", "FractionCSP3",
    "HeavyAtomCount", "NHOHCount", "NOCount", "NumAliphaticCarbocycles",
    "NumAliphaticHeterocycles", "NumAliphaticRings", "NumAromaticCarbocycles",
    "NumAromaticHeterocycles", "NumAromaticRings", "NumHAcceptors", "NumHDonors",
    "NumHeteroatoms", "NumRotatableBonds", "NumSaturatedCarbocycles",
    "NumSaturatedHeterocycles", "NumSaturatedRings", "RingCount", "MolLogP", "MolMR",
    /* the 85 fr_* follow, in the engine's (ASCII) order */
};

static std::once_flag g_perm_once;
static int g_v2_perm[MP_D2_ALL];

static void build_perm()
{
    int k = 0;
    for (; k < MP_D2_ALL && desclist_names[k]; k++)
        for (int j = 0; j < MP_D2_ALL; j++)
            if (std::strcmp(desclist_names[k], engine_names[j]) == 0)
                g_v2_perm[k] = j;
    for (int f = 0; f < MP_D2_N_FR; f++)
        g_v2_perm[k + f] = MP_D2_FR_FIRST + f;
}

extern "C" const char *mp_d2_name(int j)
{
    return j >= 0 && j < MP_D2_ALL ? engine_names[j] : nullptr;
}

extern "C" int mp_d2_v2_index(int k)
{
    std::call_once(g_perm_once, build_perm);
    return k >= 0 && k < MP_D2_ALL ? g_v2_perm[k] : -1;
}

/* ===================================================================== */
/* The context                                                            */
/* ===================================================================== */

struct mp_d2_ctx {
    mp_d2_graph_ws *graph = nullptr;
    mp_d2_smarts *smarts = nullptr;
    std::vector<double> vsa;
};

extern "C" mp_status mp_d2_ctx_new(mp_d2_ctx **out)
{
    *out = nullptr;
    mp_d2_ctx *c = new (std::nothrow) mp_d2_ctx();
    if (!c || !(c->graph = mp_d2_graph_ws_new())) {
        mp_d2_ctx_free(c);
        return mp_error_set(MP_ERR_NOMEM, "out of memory");
    }
    mp_status st = mp_d2_smarts_new(&c->smarts);
    if (st) {
        mp_d2_ctx_free(c);
        return st;
    }
    *out = c;
    return MP_OK;
}

extern "C" void mp_d2_ctx_free(mp_d2_ctx *c)
{
    if (!c)
        return;
    mp_d2_graph_ws_free(c->graph);
    mp_d2_smarts_free(c->smarts);
    delete c;
}

/* ===================================================================== */
/* The small Python-only descriptors                                      */
/* ===================================================================== */

/* Python's min(a, b) and max(a, b): the first argument unless the second
 * compares smaller (larger); so NaN in front wins, NaN behind loses. */
static double py_min(double a, double b) { return b < a ? b : a; }
static double py_max(double a, double b) { return b > a ? b : a; }

static void partial_charges(const ROMol &mol, double *v)
{
    RDKit::computeGasteigerCharges(mol, 12, false);
    double mn = 500, mx = -500;
    for (const Atom *a : mol.atoms()) {
        double q = a->getProp<double>(RDKit::common_properties::_GasteigerCharge);
        mn = py_min(q, mn);
        mx = py_max(q, mx);
    }
    v[D_MinPartialCharge] = mn;
    v[D_MaxPartialCharge] = mx;
    v[D_MaxAbsPartialCharge] = py_max(std::fabs(mn), std::fabs(mx));
    v[D_MinAbsPartialCharge] = py_min(std::fabs(mn), std::fabs(mx));
}

/*
 * The identifiers of RDKit's unfolded Morgan count fingerprint (bond types,
 * no chirality: GetMorganFingerprint's defaults), each with the first layer
 * that sets it, as RDKit's ECFP iteration makes them, with reused flat
 * buffers (RDKit's getFingerprint with per-bit atom info was a twentieth of
 * the time; its folded count fingerprint, a quarter of the featurization):
 * every atom sets its connectivity invariant; each layer, each live atom
 * hashes (layer, its invariant, its sorted (bond type, neighbour invariant)
 * pairs) and grows its bond environment by its bonds and its neighbours'
 * environments; an environment already seen (earlier, or earlier in this
 * layer in (environment, invariant, atom) order) sets nothing and its atom
 * drops out, with invariant 0 for its neighbours from then on.  Atoms
 * without bonds drop out at once.  FpDensityMorgan (below) and the bridge's
 * hashed count fingerprint (rdkit_bridge.cpp) both read it.
 */
struct morgan_ids_ws {
    std::vector<std::uint32_t> inv, next;
    std::vector<std::uint64_t> env, env_next;    /* per atom: W words of bond bits */
    std::vector<char> dead;
    std::vector<std::pair<std::int32_t, std::uint32_t>> nbrs;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> cands;   /* (invariant, atom) */
    std::vector<std::uint32_t> order;
    std::vector<std::uint64_t> seen;             /* environments seen, W words each */
    std::vector<std::uint64_t> seen_key;
    std::vector<mp_d2_morgan_id> ids;
};

static std::uint64_t env_key(const std::uint64_t *e, size_t W)
{
    std::uint64_t k = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < W; i++)
        k = (k ^ e[i]) * 0x100000001b3ull;
    return k;
}

static bool env_seen(const morgan_ids_ws &w, const std::uint64_t *e, std::uint64_t key, size_t W)
{
    for (size_t s = 0; s < w.seen_key.size(); s++)
        if (w.seen_key[s] == key && std::memcmp(&w.seen[s * W], e, W * sizeof *e) == 0)
            return true;
    return false;
}

static void morgan_ids(morgan_ids_ws &w, const ROMol &mol, unsigned radius)
{
    const unsigned n = mol.getNumAtoms(), nb = mol.getNumBonds();
    const size_t W = nb ? (nb + 63) / 64 : 1;
    w.inv.resize(n);
    RDKit::MorganFingerprints::getConnectivityInvariants(mol, w.inv, true);
    w.ids.clear();
    for (unsigned i = 0; i < n; i++)
        w.ids.push_back({ w.inv[i], 0u });
    w.env.assign((size_t)n * W, 0);
    w.dead.assign(n, 0);
    for (unsigned i = 0; i < n; i++)
        w.dead[i] = mol.getAtomWithIdx(i)->getDegree() == 0;
    w.seen.clear();
    w.seen_key.clear();
    for (unsigned layer = 0; layer < radius; layer++) {
        w.env_next = w.env;
        w.next.assign(n, 0);
        w.cands.clear();
        for (unsigned i = 0; i < n; i++) {
            if (w.dead[i])
                continue;
            const RDKit::Atom *a = mol.getAtomWithIdx(i);
            std::uint64_t *e = &w.env_next[(size_t)i * W];
            w.nbrs.clear();
            for (const RDKit::Bond *b : mol.atomBonds(a)) {
                unsigned bi = b->getIdx(), j = b->getOtherAtomIdx(i);
                e[bi >> 6] |= std::uint64_t(1) << (bi & 63);
                const std::uint64_t *ej = &w.env[(size_t)j * W];
                for (size_t k = 0; k < W; k++)
                    e[k] |= ej[k];
                w.nbrs.emplace_back(static_cast<std::int32_t>(b->getBondType()), w.inv[j]);
            }
            std::sort(w.nbrs.begin(), w.nbrs.end());
            std::hash_result_t invar = layer;
            gboost::hash_combine(invar, w.inv[i]);
            for (const auto &p : w.nbrs)
                gboost::hash_combine(invar, p);
            w.next[i] = invar;
            w.cands.emplace_back(invar, i);
        }
        /* identical environments meet in a run, smallest (invariant, atom)
         * first; the order between different environments does not matter */
        w.order.resize(w.cands.size());
        for (size_t c = 0; c < w.cands.size(); c++)
            w.order[c] = (std::uint32_t)c;
        const std::uint64_t *envs = w.env_next.data();
        const auto &cands = w.cands;
        std::sort(w.order.begin(), w.order.end(), [&](std::uint32_t x, std::uint32_t y) {
            int c = std::memcmp(envs + (size_t)cands[x].second * W,
                                envs + (size_t)cands[y].second * W, W * sizeof *envs);
            return c != 0 ? c < 0 : cands[x] < cands[y];
        });
        for (std::uint32_t c : w.order) {
            unsigned atom = cands[c].second;
            const std::uint64_t *e = envs + (size_t)atom * W;
            std::uint64_t key = env_key(e, W);
            if (env_seen(w, e, key, W)) {
                w.dead[atom] = 1;
                continue;
            }
            w.ids.push_back({ cands[c].first, layer + 1 });
            w.seen.insert(w.seen.end(), e, e + W);
            w.seen_key.push_back(key);
        }
        w.inv.swap(w.next);
        w.env.swap(w.env_next);
    }
}

extern "C" size_t mp_d2_morgan_ids(const mp_d2_mol *m, unsigned radius,
                                   const mp_d2_morgan_id **ids)
{
    static thread_local morgan_ids_ws w;
    morgan_ids(w, *reinterpret_cast<const ROMol *>(m), radius);
    *ids = w.ids.data();
    return w.ids.size();
}

static void fp_density(const ROMol &mol, double *v)
{
    static thread_local std::vector<mp_d2_morgan_id> ids;
    const mp_d2_morgan_id *from;
    size_t n = mp_d2_morgan_ids(reinterpret_cast<const mp_d2_mol *>(&mol), 3, &from);
    ids.assign(from, from + n);
    /* an identifier counts from the first layer that sets it */
    std::sort(ids.begin(), ids.end(), [](const mp_d2_morgan_id &x, const mp_d2_morgan_id &y) {
        return x.id != y.id ? x.id < y.id : x.layer < y.layer;
    });
    unsigned count[4] = { 0, 0, 0, 0 };
    for (size_t k = 0; k < ids.size(); k++)
        if (k == 0 || ids[k].id != ids[k - 1].id)
            count[ids[k].layer]++;
    double heavy = mol.getNumHeavyAtoms();
    unsigned upto = count[0];
    int slot[3] = { D_FpDensityMorgan1, D_FpDensityMorgan2, D_FpDensityMorgan3 };
    for (int r = 1; r <= 3; r++) {
        upto += count[r];
        v[slot[r - 1]] = heavy == 0 ? 0.0 : (double)upto / heavy;
    }
}

static void electrons(const ROMol &mol, double *v)
{
    const RDKit::PeriodicTable *pt = RDKit::PeriodicTable::getTable();
    long val = 0, rad = 0;
    for (const Atom *a : mol.atoms()) {
        val += pt->getNouterElecs(a->getAtomicNum()) - a->getFormalCharge() +
               (long)a->getTotalNumHs();
        rad += (long)a->getNumRadicalElectrons();
    }
    v[D_NumValenceElectrons] = (double)val;
    v[D_NumRadicalElectrons] = (double)rad;
}

/* ===================================================================== */
/* The driver                                                             */
/* ===================================================================== */

static const int peoe_slot[14] = { D_PEOE_VSA1, D_PEOE_VSA2, D_PEOE_VSA3, D_PEOE_VSA4,
                                   D_PEOE_VSA5, D_PEOE_VSA6, D_PEOE_VSA7, D_PEOE_VSA8,
                                   D_PEOE_VSA9, D_PEOE_VSA10, D_PEOE_VSA11, D_PEOE_VSA12,
                                   D_PEOE_VSA13, D_PEOE_VSA14 };
static const int smr_slot[10] = { D_SMR_VSA1, D_SMR_VSA2, D_SMR_VSA3, D_SMR_VSA4, D_SMR_VSA5,
                                  D_SMR_VSA6, D_SMR_VSA7, D_SMR_VSA8, D_SMR_VSA9, D_SMR_VSA10 };
static const int slogp_slot[12] = { D_SlogP_VSA1, D_SlogP_VSA2, D_SlogP_VSA3, D_SlogP_VSA4,
                                    D_SlogP_VSA5, D_SlogP_VSA6, D_SlogP_VSA7, D_SlogP_VSA8,
                                    D_SlogP_VSA9, D_SlogP_VSA10, D_SlogP_VSA11, D_SlogP_VSA12 };

/*
 * MolLogP and MolMR are the sums of the Wildman-Crippen atom contributions
 * over the molecule with its hydrogens added (calcCrippenDescriptors);
 * SlogP_VSA and SMR_VSA bin each heavy atom's Labute area by its logP / MR
 * contribution (calcSlogP_VSA / calcSMR_VSA, bins by upper bound).  RDKit
 * types the atoms twice for these, with and without hydrogens; a heavy
 * atom's type does not depend on whether its hydrogens are explicit (the
 * patterns exclude #1 neighbours), so this types once, on the molecule with
 * hydrogens, and reads the heavy atoms' contributions off it (tests compare
 * the results with RDKit's functions).
 */
static const double slogp_bins[11] = { -0.4, -0.2, 0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6 };
static const double smr_bins[9] = { 1.29, 1.82, 2.24, 2.45, 2.75, 3.05, 3.63, 3.8, 4.0 };

static void crippen(mp_d2_ctx *c, const ROMol &mol, double *v)
{
    std::unique_ptr<ROMol> h(RDKit::MolOps::addHs(mol, false, false));
    unsigned nh = h->getNumAtoms(), n = mol.getNumAtoms();
    std::vector<double> lp(nh), mr(nh);
    D::getCrippenAtomContribs(*h, lp, mr, true);
    double logp = 0.0, mrs = 0.0;
    for (unsigned i = 0; i < nh; i++) {
        logp += lp[i];
        mrs += mr[i];
    }
    v[D_MolLogP] = logp;
    v[D_MolMR] = mrs;
    c->vsa.assign(n, 0.0);
    double hc;
    D::getLabuteAtomContribs(mol, c->vsa, hc);
    double a[12] = { 0 }, b[10] = { 0 };
    for (unsigned i = 0; i < n; i++) {
        a[std::upper_bound(slogp_bins, slogp_bins + 11, lp[i]) - slogp_bins] += c->vsa[i];
        b[std::upper_bound(smr_bins, smr_bins + 9, mr[i]) - smr_bins] += c->vsa[i];
    }
    for (int i = 0; i < 12; i++)
        v[slogp_slot[i]] = a[i];
    for (int i = 0; i < 10; i++)
        v[smr_slot[i]] = b[i];
}

/* Runs fn; when it throws, the listed slots get 0.0 and are marked failed
 * (bad_alloc is passed on). */
template <typename F>
static void guarded(double *v, uint8_t *failed, std::initializer_list<int> slots, F fn)
{
    try {
        fn();
    } catch (const std::bad_alloc &) {
        throw;
    } catch (...) {
        for (int s : slots) {
            v[s] = 0.0;
            failed[s] = 1;
        }
    }
}

template <typename F>
static void guarded_range(double *v, uint8_t *failed, const int *slots, int n, F fn)
{
    try {
        fn();
    } catch (const std::bad_alloc &) {
        throw;
    } catch (...) {
        for (int i = 0; i < n; i++) {
            v[slots[i]] = 0.0;
            failed[slots[i]] = 1;
        }
    }
}

static void one(double *v, uint8_t *failed, int slot, double (*fn)(const ROMol &),
                const ROMol &mol)
{
    guarded(v, failed, { slot }, [&] { v[slot] = fn(mol); });
}

/* The C++ calls as RDKit's Python makes them (default arguments). */
#define CALL(expr) [](const ROMol &m) -> double { return (double)(expr); }

static void cxx_singles(mp_d2_ctx *c, const ROMol &mol, double *v, uint8_t *failed)
{
    guarded(v, failed, { D_NumHAcceptors, D_NumHDonors, D_NumRotatableBonds },
            [&] { mp_d2_lipinski(c->smarts, reinterpret_cast<const mp_d2_mol *>(&mol), v); });
    one(v, failed, D_ExactMolWt, CALL(D::calcExactMW(m)), mol);
    one(v, failed, D_MolWt, CALL(D::calcAMW(m)), mol);
    one(v, failed, D_HeavyAtomMolWt, CALL(D::calcAMW(m, true)), mol);
    one(v, failed, D_HeavyAtomCount, CALL(m.getNumHeavyAtoms()), mol);
    one(v, failed, D_NOCount, CALL(D::calcLipinskiHBA(m)), mol);
    one(v, failed, D_NHOHCount, CALL(D::calcLipinskiHBD(m)), mol);
    one(v, failed, D_NumHeteroatoms, CALL(D::calcNumHeteroatoms(m)), mol);
    one(v, failed, D_FractionCSP3, CALL(D::calcFractionCSP3(m)), mol);
    one(v, failed, D_RingCount, CALL(D::calcNumRings(m)), mol);
    one(v, failed, D_NumAromaticRings, CALL(D::calcNumAromaticRings(m)), mol);
    one(v, failed, D_NumSaturatedRings, CALL(D::calcNumSaturatedRings(m)), mol);
    one(v, failed, D_NumAliphaticRings, CALL(D::calcNumAliphaticRings(m)), mol);
    one(v, failed, D_NumAromaticHeterocycles, CALL(D::calcNumAromaticHeterocycles(m)), mol);
    one(v, failed, D_NumAromaticCarbocycles, CALL(D::calcNumAromaticCarbocycles(m)), mol);
    one(v, failed, D_NumSaturatedHeterocycles, CALL(D::calcNumSaturatedHeterocycles(m)), mol);
    one(v, failed, D_NumSaturatedCarbocycles, CALL(D::calcNumSaturatedCarbocycles(m)), mol);
    one(v, failed, D_NumAliphaticHeterocycles, CALL(D::calcNumAliphaticHeterocycles(m)), mol);
    one(v, failed, D_NumAliphaticCarbocycles, CALL(D::calcNumAliphaticCarbocycles(m)), mol);
    one(v, failed, D_LabuteASA, CALL(D::calcLabuteASA(m)), mol);
    one(v, failed, D_TPSA, CALL(D::calcTPSA(m)), mol);
    one(v, failed, D_Chi0n, CALL(D::calcChi0n(m)), mol);
    one(v, failed, D_Chi1n, CALL(D::calcChi1n(m)), mol);
    one(v, failed, D_Chi0v, CALL(D::calcChi0v(m)), mol);
    one(v, failed, D_Chi1v, CALL(D::calcChi1v(m)), mol);
    one(v, failed, D_HallKierAlpha, CALL(D::calcHallKierAlpha(m)), mol);
    one(v, failed, D_Kappa1, CALL(D::calcKappa1(m)), mol);
    /* Chi2-4 n/v and Kappa2-3: RDKit's values, from one path enumeration */
    static const int path_slots[8] = { D_Chi2n, D_Chi3n, D_Chi4n, D_Chi2v,
                                       D_Chi3v, D_Chi4v, D_Kappa2, D_Kappa3 };
    guarded_range(v, failed, path_slots, 8,
                  [&] { mp_d2_paths(reinterpret_cast<const mp_d2_mol *>(&mol), v); });
    guarded(v, failed, { D_MolLogP, D_MolMR }, [&] { crippen(c, mol, v); });
    guarded_range(v, failed, peoe_slot, 14, [&] {
        std::vector<double> b = D::calcPEOE_VSA(mol);
        for (int i = 0; i < 14; i++)
            v[peoe_slot[i]] = b.at((size_t)i);
    });
    if (failed[D_MolLogP]) {   /* the VSA bins come from the same typing */
        for (int i = 0; i < 10; i++) {
            v[smr_slot[i]] = 0.0;
            failed[smr_slot[i]] = 1;
        }
        for (int i = 0; i < 12; i++) {
            v[slogp_slot[i]] = 0.0;
            failed[slogp_slot[i]] = 1;
        }
    }
}

static const int graph_slots[] = { D_BalabanJ, D_BertzCT, D_Chi0, D_Chi1, D_Ipc };
static const int estate_slots[] = {
    D_MaxEStateIndex, D_MinEStateIndex, D_MaxAbsEStateIndex, D_MinAbsEStateIndex,
    D_EState_VSA1, D_EState_VSA2, D_EState_VSA3, D_EState_VSA4, D_EState_VSA5, D_EState_VSA6,
    D_EState_VSA7, D_EState_VSA8, D_EState_VSA9, D_EState_VSA10, D_EState_VSA11,
    D_VSA_EState1, D_VSA_EState2, D_VSA_EState3, D_VSA_EState4, D_VSA_EState5, D_VSA_EState6,
    D_VSA_EState7, D_VSA_EState8, D_VSA_EState9, D_VSA_EState10,
};
static const int bcut_slots[8] = { D_BCUT2D_MWHI, D_BCUT2D_MWLOW, D_BCUT2D_CHGHI,
                                   D_BCUT2D_CHGLO, D_BCUT2D_LOGPHI, D_BCUT2D_LOGPLOW,
                                   D_BCUT2D_MRHI, D_BCUT2D_MRLOW };
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

extern "C" void mp_d2_reference(const mp_d2_mol *m, double *v, uint8_t *which)
{
    const ROMol &mol = *reinterpret_cast<const ROMol *>(m);
    std::memset(which, 0, MP_D2_ALL);
    auto set = [&](int j, double x) {
        v[j] = x;
        which[j] = 1;
    };
    double paths[MP_D2_ALL];
    mp_d2_paths_rdkit(m, paths);
    for (int j : { D_Chi2n, D_Chi3n, D_Chi4n, D_Chi2v, D_Chi3v, D_Chi4v, D_Kappa2, D_Kappa3 })
        set(j, paths[j]);
    set(D_NumHAcceptors, D::calcNumHBA(mol));
    set(D_NumHDonors, D::calcNumHBD(mol));
    set(D_NumRotatableBonds, D::calcNumRotatableBonds(mol));
    double logp, mr;
    D::calcCrippenDescriptors(mol, logp, mr, true, true);
    set(D_MolLogP, logp);
    set(D_MolMR, mr);
    std::vector<double> smr = D::calcSMR_VSA(mol, nullptr, true);
    std::vector<double> slogp = D::calcSlogP_VSA(mol, nullptr, true);
    for (int i = 0; i < 10; i++)
        set(smr_slot[i], smr.at((size_t)i));
    for (int i = 0; i < 12; i++)
        set(slogp_slot[i], slogp.at((size_t)i));
    static const int fp_slot[3] = { D_FpDensityMorgan1, D_FpDensityMorgan2, D_FpDensityMorgan3 };
    for (unsigned r = 1; r <= 3; r++) {
        std::unique_ptr<RDKit::SparseIntVect<std::uint32_t>> fp(
            RDKit::MorganFingerprints::getFingerprint(mol, r));
        double heavy = mol.getNumHeavyAtoms();
        set(fp_slot[r - 1], heavy == 0 ? 0.0 : (double)fp->getNonzeroElements().size() / heavy);
    }
}

extern "C" int mp_d2_compute(mp_d2_ctx *c, mp_d2_mol *m, int bcut, double *v, uint8_t *failed)
{
    const ROMol &mol = *reinterpret_cast<const ROMol *>(m);
    std::memset(failed, 0, MP_D2_ALL);
    try {
        cxx_singles(c, mol, v, failed);
        guarded_range(v, failed, graph_slots, N_OF(graph_slots),
                      [&] { mp_d2_graph(c->graph, m, v); });
        guarded_range(v, failed, estate_slots, N_OF(estate_slots), [&] {
            double h;
            c->vsa.assign(mol.getNumAtoms(), 0.0);   /* RDKit wants it sized */
            D::getLabuteAtomContribs(mol, c->vsa, h);
            mp_d2_estate(c->graph, m, c->vsa.data(), v);
        });
        guarded(v, failed,
                { D_MinPartialCharge, D_MaxPartialCharge, D_MinAbsPartialCharge,
                  D_MaxAbsPartialCharge },
                [&] { partial_charges(mol, v); });
        guarded(v, failed, { D_FpDensityMorgan1, D_FpDensityMorgan2, D_FpDensityMorgan3 },
                [&] { fp_density(mol, v); });
        guarded(v, failed, { D_NumValenceElectrons, D_NumRadicalElectrons },
                [&] { electrons(mol, v); });
        int fr_slots[MP_D2_N_FR];
        for (int k = 0; k < MP_D2_N_FR; k++)
            fr_slots[k] = MP_D2_FR_FIRST + k;
        guarded_range(v, failed, fr_slots, MP_D2_N_FR, [&] { mp_d2_fragments(c->smarts, m, v); });
        /* QED reuses MolWt, MolLogP, NumHDonors, TPSA, NumRotatableBonds */
        if (failed[D_MolWt] || failed[D_MolLogP] || failed[D_NumHDonors] || failed[D_TPSA] ||
            failed[D_NumRotatableBonds]) {
            v[D_qed] = 0.0;
            failed[D_qed] = 1;
        } else {
            guarded(v, failed, { D_qed }, [&] { mp_d2_qed(c->smarts, m, v); });
        }
        if (bcut) {
            try {
                std::vector<double> b = D::BCUT2D(mol);
                for (int i = 0; i < 8; i++)
                    v[bcut_slots[i]] = b.at((size_t)i);
            } catch (const std::bad_alloc &) {
                throw;
            } catch (...) {
                for (int i = 0; i < 8; i++)
                    v[bcut_slots[i]] = std::numeric_limits<double>::quiet_NaN();
            }
        }
    } catch (const std::bad_alloc &) {
        return -1;
    }
    return 0;
}
