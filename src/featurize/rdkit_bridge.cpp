/*
 * rdkit_bridge.cpp - the one C++ file: everything molprop asks of RDKit,
 * behind plain C functions (featurize.h, rdkit_bridge.h).
 *
 * RDKit's own logging is silenced.  Its C++ SMILES parser reports syntax
 * errors only through the error log, so that log is pointed at a stream
 * whose buffer appends to a thread-local string: each thread reads back
 * exactly the messages its own parse produced, and they reach the user
 * through our error strings.  Sanitization failures arrive as exceptions.
 */
#include "featurize/featurize.h"
#include "featurize/rdkit_bridge.h"

#include <GraphMol/GraphMol.h>
#include <GraphMol/ChemTransforms/ChemTransforms.h>
#include <GraphMol/Descriptors/Property.h>
#include <GraphMol/Fingerprints/FingerprintUtil.h>
#include <GraphMol/Fingerprints/MorganFingerprints.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/SmilesParse/SmilesParse.h>
#include <GraphMol/SmilesParse/SmilesWrite.h>
#include <DataStructs/ExplicitBitVect.h>
#include <DataStructs/SparseIntVect.h>
#include <RDGeneral/RDLog.h>
#include <RDGeneral/hash/hash.hpp>
#include <RDGeneral/versions.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <streambuf>
#include <string>
#include <vector>

using RDKit::Atom;
using RDKit::Bond;

#define SAME(ours, theirs) ((int)(ours) == (int)(theirs))
static_assert(SAME(MP_HYB_S, Atom::S) && SAME(MP_HYB_SP, Atom::SP) && SAME(MP_HYB_SP2, Atom::SP2) &&
                  SAME(MP_HYB_SP3, Atom::SP3) && SAME(MP_HYB_SP2D, Atom::SP2D) &&
                  SAME(MP_HYB_SP3D, Atom::SP3D) && SAME(MP_HYB_SP3D2, Atom::SP3D2) &&
                  SAME(MP_HYB_OTHER, Atom::OTHER),
              "RDKit's hybridization numbering changed");
#undef SAME

/* ===================================================================== */
/* Logging: silence RDKit, capture its error log per thread               */
/* ===================================================================== */

namespace {

thread_local std::string tl_log;

/* Unbuffered: every write goes straight to the calling thread's string. */
class capture_buf : public std::streambuf {
  protected:
    int_type overflow(int_type c) override
    {
        if (!traits_type::eq_int_type(c, traits_type::eof()))
            tl_log.push_back(traits_type::to_char_type(c));
        return traits_type::not_eof(c);
    }
    std::streamsize xsputn(const char *s, std::streamsize n) override
    {
        tl_log.append(s, (size_t)n);
        return n;
    }
};

std::once_flag g_once;
RDKit::Descriptors::Properties *g_props;      /* process lifetime */
std::vector<std::string> *g_desc_names;

void init_once()
{
    std::call_once(g_once, [] {
        boost::logging::disable_logs("rdApp.*");
        /* Never freed: RDKit's global logger flushes it at exit. */
        auto *buf = new capture_buf;
        auto *os = new std::ostream(buf);
        rdErrorLog = std::make_shared<boost::logging::rdLogger>(os);
        g_props = new RDKit::Descriptors::Properties();
        g_desc_names = new std::vector<std::string>(g_props->getPropertyNames());
    });
}

/* RDKit's log lines, without their "[hh:mm:ss] " stamps, joined by "; ". */
std::string log_reason()
{
    std::string out;
    size_t i = 0, n = tl_log.size();
    while (i < n) {
        size_t e = tl_log.find('\n', i);
        if (e == std::string::npos)
            e = n;
        size_t s = i;
        if (s < e && tl_log[s] == '[') {
            size_t r = tl_log.find("] ", s);
            if (r != std::string::npos && r < e)
                s = r + 2;
        }
        if (e > s) {
            if (!out.empty())
                out += "; ";
            out.append(tl_log, s, e - s);
        }
        i = e + 1;
    }
    return out;
}

/* Chemprop v1's make_mol: sanitize, remove H, then clear atom maps.  Returns
 * the molecule or nullptr with `err` set. */
RDKit::RWMol *parse_smiles(const char *smiles, std::string &err)
{
    init_once();
    if (!*smiles) {
        err = "empty SMILES";
        return nullptr;
    }
    RDKit::SmilesParserParams params;
    params.sanitize = true;
    params.removeHs = true;
    std::unique_ptr<RDKit::RWMol> mol;
    tl_log.clear();
    try {
        mol.reset(RDKit::SmilesToMol(std::string(smiles), params));
    } catch (const std::exception &e) {
        err = e.what();
        if (err.empty())
            err = "RDKit rejected the molecule";
        return nullptr;
    } catch (...) {
        err = "RDKit rejected the molecule";
        return nullptr;
    }
    if (!mol) {
        err = log_reason();
        if (err.empty())
            err = "SMILES Parse Error";
        return nullptr;
    }
    if (mol->getNumHeavyAtoms() == 0) {
        err = "no heavy atoms";
        return nullptr;
    }
    /* Atom maps can only come from ":n]" or a CXSMILES atom property, both of
     * which need a ':'; skip the per-atom property lookups otherwise. */
    if (std::strchr(smiles, ':'))
        for (auto *a : mol->atoms())
            a->setAtomMapNum(0);
    return mol.release();
}

/* Grows a context array to hold n items (never shrinks). */
template <typename T>
bool grow(T *&p, int32_t &cap, int32_t n)
{
    if (n <= cap)
        return true;
    int32_t c = cap ? cap : 64;
    while (c < n)
        c *= 2;
    void *q = mp_realloc(p, (size_t)c * sizeof(T));
    if (!q)
        return false;
    p = static_cast<T *>(q);
    cap = c;
    return true;
}

} // namespace

/* ===================================================================== */
/* Per-thread featurization                                               */
/* ===================================================================== */

/* Scratch of the Morgan fingerprint (see morgan_counts), reused. */
struct morgan_ws {
    std::vector<std::uint32_t> inv, next;        /* per atom: this / next layer   */
    std::vector<std::uint64_t> env, env_next;    /* per atom: bonds of its environment, W words */
    std::vector<std::uint8_t> dead;
    std::vector<std::pair<std::int32_t, std::uint32_t>> nbrs;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> cands;   /* (invariant, atom) */
    std::vector<std::uint32_t> order;
    std::vector<std::uint64_t> seen;             /* environments counted so far, W words each */
    std::vector<std::uint64_t> seen_key;
    std::vector<std::uint16_t> touched;
    std::uint32_t count[MP_MORGAN_BITS];
};

struct mp_rdk_ctx {
    mp_rdk_mol mol;
    int32_t cap_atoms, cap_bonds, cap_morgan;
    std::string error, scaffold;
    morgan_ws mw;
};

extern "C" mp_rdk_ctx *mp_rdk_ctx_new(void)
{
    init_once();
    void *p = mp_calloc(1, sizeof(mp_rdk_ctx));
    if (!p)
        return nullptr;
    auto *ctx = new (p) mp_rdk_ctx();
    ctx->mol.desc = static_cast<double *>(mp_calloc((size_t)mp_rdk_n_desc() + 1, sizeof(double)));
    if (!ctx->mol.desc) {
        mp_rdk_ctx_free(ctx);
        return nullptr;
    }
    return ctx;
}

extern "C" void mp_rdk_ctx_free(mp_rdk_ctx *ctx)
{
    if (!ctx)
        return;
    mp_rdk_mol *m = &ctx->mol;
    void *arrays[] = { m->atomic_num, m->total_degree, m->formal_charge, m->chiral_tag,
                       m->total_hs, m->hybridization, m->aromatic, m->mass, m->bond_begin,
                       m->bond_end, m->bond_type, m->bond_conjugated, m->bond_in_ring,
                       m->bond_stereo, m->morgan_bit, m->morgan_count, m->desc };
    for (void *a : arrays)
        mp_free(a);
    ctx->~mp_rdk_ctx();
    mp_free(ctx);
}

static bool reserve_atoms(mp_rdk_ctx *ctx, int32_t n)
{
    mp_rdk_mol *m = &ctx->mol;
    if (n <= ctx->cap_atoms)
        return true;
    int32_t c;
    /* grow() updates the capacity it is given, so each array gets a copy. */
#define GROW(arr) (c = ctx->cap_atoms, grow(m->arr, c, n))
    bool ok = GROW(atomic_num) && GROW(total_degree) && GROW(formal_charge) &&
              GROW(chiral_tag) && GROW(total_hs) && GROW(hybridization) && GROW(aromatic) &&
              GROW(mass);
#undef GROW
    if (ok)
        ctx->cap_atoms = c;
    return ok;
}

static bool reserve_bonds(mp_rdk_ctx *ctx, int32_t n)
{
    mp_rdk_mol *m = &ctx->mol;
    if (n <= ctx->cap_bonds)
        return true;
    int32_t c;
#define GROW(arr) (c = ctx->cap_bonds, grow(m->arr, c, n))
    bool ok = GROW(bond_begin) && GROW(bond_end) && GROW(bond_type) &&
              GROW(bond_conjugated) && GROW(bond_in_ring) && GROW(bond_stereo);
#undef GROW
    if (ok)
        ctx->cap_bonds = c;
    return ok;
}

static bool reserve_morgan(mp_rdk_ctx *ctx, int32_t n)
{
    mp_rdk_mol *m = &ctx->mol;
    if (n <= ctx->cap_morgan)
        return true;
    int32_t c;
#define GROW(arr) (c = ctx->cap_morgan, grow(m->arr, c, n))
    bool ok = GROW(morgan_bit) && GROW(morgan_count);
#undef GROW
    if (ok)
        ctx->cap_morgan = c;
    return ok;
}

static uint8_t bond_type_code(Bond::BondType t)
{
    switch (t) {
    case Bond::SINGLE: return MP_BT_SINGLE;
    case Bond::DOUBLE: return MP_BT_DOUBLE;
    case Bond::TRIPLE: return MP_BT_TRIPLE;
    case Bond::AROMATIC: return MP_BT_AROMATIC;
    default: return MP_BT_OTHER;
    }
}

/* The graph part: plain numbers per atom and bond.  -1 on OOM. */
static int copy_graph(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    mp_rdk_mol *m = &ctx->mol;
    int32_t na = (int32_t)mol.getNumAtoms(), nb = (int32_t)mol.getNumBonds();
    if (!reserve_atoms(ctx, na) || !reserve_bonds(ctx, nb))
        return -1;
    m->n_atoms = na;
    m->n_bonds = nb;
    for (const Atom *a : mol.atoms()) {
        int32_t i = (int32_t)a->getIdx();
        m->atomic_num[i] = a->getAtomicNum();
        m->total_degree[i] = (int32_t)a->getTotalDegree();
        m->formal_charge[i] = a->getFormalCharge();
        m->chiral_tag[i] = (int32_t)a->getChiralTag();
        m->total_hs[i] = (int32_t)a->getTotalNumHs();
        m->hybridization[i] = (int32_t)a->getHybridization();
        m->aromatic[i] = a->getIsAromatic() ? 1 : 0;
        m->mass[i] = a->getMass();
    }
    const RDKit::RingInfo *ri = mol.getRingInfo();
    if (!ri->isInitialized())
        RDKit::MolOps::findSSSR(mol);
    for (const Bond *b : mol.bonds()) {
        int32_t k = (int32_t)b->getIdx();
        m->bond_begin[k] = (int32_t)b->getBeginAtomIdx();
        m->bond_end[k] = (int32_t)b->getEndAtomIdx();
        m->bond_type[k] = bond_type_code(b->getBondType());
        m->bond_conjugated[k] = b->getIsConjugated() ? 1 : 0;
        m->bond_in_ring[k] = ri->numBondRings(b->getIdx()) != 0;
        m->bond_stereo[k] = (uint8_t)b->getStereo();
    }
    return 0;
}

/* ===================================================================== */
/* Morgan count fingerprint                                               */
/* ===================================================================== */

/*
 * RDKit's hashed Morgan count fingerprint (GetHashedMorganFingerprint, radius
 * 2, 2048 bits, bond types on, no chirality), computed here with reused flat
 * buffers instead of RDKit's per-call bitsets, tuples and map: it was a
 * quarter of the featurization time.  Same atom invariants (RDKit's own
 * getConnectivityInvariants) and the same hash (RDKit's gboost::hash_combine);
 * the tests compare it with RDKit's function molecule by molecule.
 *
 * The ECFP iteration as RDKit runs it: every atom counts its invariant; then,
 * for each layer, each live atom hashes (layer, its invariant, its sorted
 * (bond type, neighbour invariant) pairs) and grows its environment (the set
 * of bonds within reach) by its bonds and its neighbours' environments.  An
 * environment already counted (in an earlier layer, or earlier in this one
 * in the order (environment, invariant, atom)) is not counted again, and its
 * atom drops out of later layers.  Atoms without bonds drop out at once.
 */
static void morgan_add(morgan_ws &w, std::uint32_t invariant)
{
    std::uint32_t bit = invariant % MP_MORGAN_BITS;
    if (w.count[bit]++ == 0)
        w.touched.push_back((std::uint16_t)bit);
}

static std::uint64_t env_key(const std::uint64_t *e, size_t W)
{
    std::uint64_t k = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < W; i++)
        k = (k ^ e[i]) * 0x100000001b3ull;
    return k;
}

static bool env_seen(const morgan_ws &w, const std::uint64_t *e, std::uint64_t key, size_t W)
{
    for (size_t s = 0; s < w.seen_key.size(); s++)
        if (w.seen_key[s] == key && std::memcmp(&w.seen[s * W], e, W * sizeof *e) == 0)
            return true;
    return false;
}

static int morgan_counts(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    morgan_ws &w = ctx->mw;
    const unsigned n = mol.getNumAtoms(), nb = mol.getNumBonds();
    const size_t W = nb ? (nb + 63) / 64 : 1;
    w.inv.resize(n);
    RDKit::MorganFingerprints::getConnectivityInvariants(mol, w.inv, true);
    w.touched.clear();
    for (unsigned i = 0; i < n; i++)
        morgan_add(w, w.inv[i]);
    w.env.assign((size_t)n * W, 0);
    w.dead.assign(n, 0);
    for (unsigned i = 0; i < n; i++)
        w.dead[i] = mol.getAtomWithIdx(i)->getDegree() == 0;
    w.seen.clear();
    w.seen_key.clear();
    for (unsigned layer = 0; layer < 2; layer++) {
        w.env_next = w.env;
        w.next.assign(n, 0);
        w.cands.clear();
        for (unsigned i = 0; i < n; i++) {
            if (w.dead[i])
                continue;
            const Atom *a = mol.getAtomWithIdx(i);
            std::uint64_t *e = &w.env_next[(size_t)i * W];
            w.nbrs.clear();
            for (const Bond *b : mol.atomBonds(a)) {
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
        /* Identical environments meet in a run, smallest (invariant, atom)
         * first; the order between different environments does not matter. */
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
            morgan_add(w, cands[c].first);
            w.seen.insert(w.seen.end(), e, e + W);
            w.seen_key.push_back(key);
        }
        w.inv.swap(w.next);
        w.env.swap(w.env_next);
    }
    mp_rdk_mol *m = &ctx->mol;
    if (!reserve_morgan(ctx, (int32_t)w.touched.size()))
        return -1;
    std::sort(w.touched.begin(), w.touched.end());
    int32_t j = 0;
    for (std::uint16_t bit : w.touched) {
        m->morgan_bit[j] = bit;
        m->morgan_count[j] = w.count[bit];
        w.count[bit] = 0;
        j++;
    }
    m->n_morgan = j;
    return 0;
}

static void copy_scaffold(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    /* REFERENCE 3.2 step 1: RDKit's MurckoScaffoldSmiles(includeChirality=False). */
    std::unique_ptr<RDKit::ROMol> core(RDKit::MurckoDecompose(mol));
    ctx->scaffold.clear();
    if (!core || core->getNumAtoms() == 0)
        return;
    core->clearComputedProps();
    core->updatePropertyCache();
    RDKit::MolOps::symmetrizeSSSR(*core);
    ctx->scaffold = RDKit::MolToSmiles(*core, /*doIsomericSmiles=*/false);
}

extern "C" int mp_rdk_featurize(mp_rdk_ctx *ctx, const char *smiles, int what,
                                const mp_rdk_mol **out)
{
    mp_rdk_mol *m = &ctx->mol;
    m->n_atoms = m->n_bonds = m->n_morgan = 0;
    m->scaffold = nullptr;
    m->error = nullptr;
    *out = m;
    ctx->error.clear();
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, ctx->error));
    if (!mol) {
        m->error = ctx->error.c_str();
        return 0;
    }
    const char *stage = "reading the molecule";
    try {
        if (copy_graph(ctx, *mol) < 0)
            return -1;
        if (what & MP_RDK_MORGAN) {
            stage = "computing the Morgan fingerprint";
            if (morgan_counts(ctx, *mol) < 0)
                return -1;
        }
        if (what & MP_RDK_DESC) {
            stage = "computing descriptors";
            std::vector<double> d = g_props->computeProperties(*mol);
            for (size_t i = 0; i < d.size() && i < g_desc_names->size(); i++)
                m->desc[i] = d[i];
        }
        if (what & MP_RDK_SCAFFOLD) {
            stage = "computing the Murcko scaffold";
            copy_scaffold(ctx, *mol);
            m->scaffold = ctx->scaffold.c_str();
        }
    } catch (const std::bad_alloc &) {
        return -1;
    } catch (const std::exception &e) {
        ctx->error = std::string("RDKit failed ") + stage + ": " + e.what();
        m->error = ctx->error.c_str();
        m->n_atoms = m->n_bonds = m->n_morgan = 0;
        return 0;
    }
    return 1;
}

extern "C" int mp_rdk_n_desc(void)
{
    init_once();
    return (int)g_desc_names->size();
}

extern "C" const char *mp_rdk_desc_name(int i)
{
    init_once();
    if (i < 0 || (size_t)i >= g_desc_names->size())
        return nullptr;
    return (*g_desc_names)[(size_t)i].c_str();
}

extern "C" int mp_rdk_morgan_reference(const char *smiles, uint32_t *counts)
{
    std::string err;
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, err));
    if (!mol)
        return 0;
    std::unique_ptr<RDKit::SparseIntVect<std::uint32_t>> fp(
        RDKit::MorganFingerprints::getHashedFingerprint(*mol, 2, MP_MORGAN_BITS));
    std::memset(counts, 0, MP_MORGAN_BITS * sizeof *counts);
    for (const auto &kv : fp->getNonzeroElements())
        counts[kv.first] = (uint32_t)kv.second;
    return 1;
}

extern "C" int mp_rdk_morgan_bitvect(const char *smiles, uint8_t *bits)
{
    std::string err;
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, err));
    if (!mol)
        return 0;
    std::unique_ptr<ExplicitBitVect> fp(
        RDKit::MorganFingerprints::getFingerprintAsBitVect(*mol, 2, MP_MORGAN_BITS));
    for (unsigned i = 0; i < MP_MORGAN_BITS; i++)
        bits[i] = fp->getBit(i) ? 1 : 0;
    return 1;
}

/* ===================================================================== */
/* Small services for the rest of molprop (featurize.h)                   */
/* ===================================================================== */

extern "C" const char *mp_rdkit_version(void)
{
    return RDKit::rdkitVersion;
}

extern "C" char *mp_rdkit_canonical(const char *smiles)
{
    std::string err;
    std::unique_ptr<RDKit::RWMol> mol;
    try {
        mol.reset(parse_smiles(smiles, err));
        if (!mol)
            return nullptr;
        std::string s = RDKit::MolToSmiles(*mol);
        return mp_strdup(s.c_str());
    } catch (...) {
        return nullptr;
    }
}
