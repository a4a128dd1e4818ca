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
#include "featurize/desc2d.h"
#include "featurize/rdkit_bridge.h"

#include <RDGeneral/RDConfig.h>   /* first: the library's layout switches */
#include <GraphMol/GraphMol.h>
#include <GraphMol/ChemTransforms/ChemTransforms.h>
#include <GraphMol/Descriptors/Property.h>
#include <GraphMol/Fingerprints/FingerprintUtil.h>
#include <GraphMol/Fingerprints/MorganFingerprints.h>
#include <GraphMol/Fingerprints/MorganGenerator.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/SmilesParse/SmilesParse.h>
#include <GraphMol/SmilesParse/SmilesWrite.h>
#include <DataStructs/ExplicitBitVect.h>
#include <DataStructs/SparseIntVect.h>
#include <RDGeneral/RDLog.h>
#include <RDGeneral/hash/hash.hpp>
#include <RDGeneral/versions.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
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

/* RDKit's average atomic weights by atomic number (the PeriodicTable
 * singleton costs a lookup per call): Atom::getMass() of an atom without an
 * isotope, and the reference of getConnectivityInvariants' delta mass. */
const int N_WEIGHTS = 119;
double g_weight[N_WEIGHTS];

void init_once()
{
    std::call_once(g_once, [] {
        boost::logging::disable_logs("rdApp.*");
        /* Never freed: RDKit's global logger flushes it at exit. */
        auto *buf = new capture_buf;
        auto *os = new std::ostream(buf);
        rdErrorLog = std::make_shared<boost::logging::rdLogger>(os);
        const RDKit::PeriodicTable *pt = RDKit::PeriodicTable::getTable();
        for (int z = 0; z < N_WEIGHTS; z++)
            g_weight[z] = pt->getAtomicWeight(z);
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

std::atomic<int> g_reference;   /* mp_rdk_set_reference: RDKit's own way throughout */

/*
 * Whether SmilesToMol's last step can be left out.  After sanitizing and
 * removing H, SmilesToMol runs RDKit's stereo perception with "flag possible
 * stereocentres" on, which ranks every atom by CIP (over a quarter of the
 * parse of a hiv or qm9 molecule).  On a SMILES without '@' (atom chirality), '/' or '\'
 * (double-bond directions) and without a CXSMILES part or name after a
 * blank, no atom has a chiral tag and no bond a direction, so that step
 * changes no chiral tag and no bond stereo: it only sets properties
 * (_CIPRank, _ChiralityPossible, _StereochemDone).  Of what we ask of RDKit
 * only the descriptor registry reads them (it refuses to count stereocentres
 * without _StereochemDone), so its molecules keep the whole parse;
 * MolToSmiles and the Morgan generator perceive stereo on their own copy when
 * it is missing.  test_featurize_parse.c checks every feature set against the
 * whole parse, molecule by molecule.
 */
bool stereo_free(const char *smiles)
{
    return !std::strpbrk(smiles, "@/\\ \t") && !g_reference.load(std::memory_order_relaxed);
}

/* Chemprop v1's make_mol: sanitize, remove H, then clear atom maps.  Returns
 * the molecule or nullptr with `err` set.  Unless `stereo` asks for RDKit's
 * whole parse (RDKit's descriptor registry counts stereocentres and refuses
 * a molecule without its stereo perception), a stereo-free SMILES is parsed
 * without sanitizing, then sanitized and stripped of H with the call
 * SmilesToMol makes, less the stereo perception (stereo_free). */
RDKit::RWMol *parse_smiles(const char *smiles, std::string &err, bool stereo)
{
    init_once();
    if (!*smiles) {
        err = "empty SMILES";
        return nullptr;
    }
    const bool skip_stereo = !stereo && stereo_free(smiles);
    RDKit::SmilesParserParams params;
    params.sanitize = !skip_stereo;
    params.removeHs = !skip_stereo;
    std::unique_ptr<RDKit::RWMol> mol;
    tl_log.clear();
    try {
        /* one string per thread, its capacity reused from molecule to molecule */
        static thread_local std::string text;
        text.assign(smiles);
        mol.reset(RDKit::SmilesToMol(text, params));
        if (mol && skip_stereo) {
            bool implicit_only = false, update_explicit_count = true, sanitize = true;
            RDKit::MolOps::removeHs(*mol, implicit_only, update_explicit_count, sanitize);
        }
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

/* A counted layer-1 Morgan environment: its env_key and the candidate
 * (atom, its invariant) holding it (env_claim); the environment itself is
 * the holder's row of env1. */
struct env_entry {
    std::uint64_t key;
    std::uint32_t atom, invariant;
};

/* Scratch of the Morgan fingerprint (see morgan_counts), reused. */
struct morgan_ws {
    /* filled by copy_graph's one pass over RDKit's atoms and bonds: */
    std::vector<std::int32_t> nbr_start;         /* per atom: its slice of nbr_*  */
    std::vector<std::uint32_t> nbr_atom, nbr_bond;
    std::vector<std::int32_t> nbr_type;          /* RDKit's Bond::BondType value  */
    std::vector<std::int32_t> h_nbrs;            /* per atom: hydrogen neighbours */
    std::vector<std::int32_t> bond_rdtype;       /* per bond: Bond::BondType      */
    std::vector<std::uint8_t> in_ring;           /* per atom: in any SSSR ring    */
    std::vector<std::uint32_t> cursor;           /* copy_graph's fill positions   */
    /* per atom, and one all-zero row n past the last (the padding of nbr_step): */
    std::vector<std::uint32_t> inv0, inv1;       /* invariants: initial, after layer 0 */
    std::vector<std::uint64_t> bmask;            /* its own bonds, W words        */
    std::vector<std::uint64_t> env1;             /* layer 1's environment, W words */
    std::vector<std::uint8_t> inner;             /* a neighbour with 2+ bonds     */
    std::vector<std::uint64_t> keys;             /* nbr_key of one atom's neighbours */
    std::vector<env_entry> seen;                 /* layer 1's environments (at most 1 per atom) */
    std::int32_t n_seen;
    std::vector<std::int32_t> seen_slot;         /* open addressing over seen: index + 1 */
    std::uint64_t touched[MP_MORGAN_BITS / 64];  /* bits with a nonzero count */
    std::uint32_t count[MP_MORGAN_BITS];
};

typedef RDKit::FingerprintGenerator<std::uint64_t> morgan2_gen;

struct mp_rdk_ctx {
    mp_rdk_mol mol;
    int32_t cap_atoms, cap_bonds, cap_morgan, cap_morgan2;
    std::string error, scaffold;
    morgan_ws mw;
    /* murcko_core: per atom, kept; neighbours not pruned; the atoms to prune */
    std::vector<std::uint8_t> murcko_keep;
    std::vector<std::uint32_t> murcko_left, murcko_stack;
    mp_d2_ctx *d2;                     /* made on first use */
    std::unique_ptr<morgan2_gen> gen2; /* made on first use */
    double d2v[MP_D2_ALL];
    uint8_t d2failed[MP_D2_ALL];
};

/* Chemprop v2's GetMorganGenerator(radius=2, fpSize=2048,
 * includeChirality=True): Python's generator hashes to 64 bits. */
static morgan2_gen *new_morgan2_gen()
{
    return RDKit::MorganFingerprint::getMorganGenerator<std::uint64_t>(
        2, /*countSimulation=*/false, /*includeChirality=*/true, /*useBondTypes=*/true,
        /*onlyNonzeroInvariants=*/false, nullptr, nullptr, MP_MORGAN_BITS);
}

extern "C" mp_rdk_ctx *mp_rdk_ctx_new(void)
{
    init_once();
    void *p = mp_calloc(1, sizeof(mp_rdk_ctx));
    if (!p)
        return nullptr;
    auto *ctx = new (p) mp_rdk_ctx();
    ctx->mol.desc = static_cast<double *>(mp_calloc((size_t)mp_rdk_n_desc() + 1, sizeof(double)));
    ctx->mol.rdkit2d = static_cast<double *>(mp_calloc(MP_D2_V1, sizeof(double)));
    ctx->mol.rdkit2d_failed = static_cast<uint8_t *>(mp_calloc(MP_D2_V1, 1));
    ctx->mol.v2desc = static_cast<double *>(mp_calloc(MP_D2_ALL, sizeof(double)));
    if (!ctx->mol.desc || !ctx->mol.rdkit2d || !ctx->mol.rdkit2d_failed || !ctx->mol.v2desc) {
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
                       m->bond_stereo, m->morgan_bit, m->morgan_count, m->desc,
                       m->rdkit2d, m->rdkit2d_failed, m->v2desc, m->morgan2_bit,
                       m->morgan2_count };
    for (void *a : arrays)
        mp_free(a);
    mp_d2_ctx_free(ctx->d2);
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

static bool reserve_morgan2(mp_rdk_ctx *ctx, int32_t n)
{
    mp_rdk_mol *m = &ctx->mol;
    if (n <= ctx->cap_morgan2)
        return true;
    int32_t c;
#define GROW(arr) (c = ctx->cap_morgan2, grow(m->arr, c, n))
    bool ok = GROW(morgan2_bit) && GROW(morgan2_count);
#undef GROW
    if (ok)
        ctx->cap_morgan2 = c;
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

/* Atom::getMass() without the PeriodicTable lookup for the common case. */
static double atom_mass(const Atom *a)
{
    int z = a->getAtomicNum();
    if (a->getIsotope() == 0 && z >= 0 && z < N_WEIGHTS)
        return g_weight[z];
    return a->getMass();
}

/*
 * The graph part: plain numbers per atom and bond, in one pass over RDKit's
 * atoms and one over its bonds, which also leave what the Morgan
 * fingerprint needs in flat arrays of the context (the adjacency, bond
 * types, hydrogen neighbours, ring membership: morgan_ws), so that
 * morgan_counts never walks RDKit's graph again.  Every array is the
 * context's, grown when a molecule needs more and otherwise reused: no
 * allocation per molecule.  -1 on OOM.
 */
static int copy_graph(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    mp_rdk_mol *m = &ctx->mol;
    morgan_ws &w = ctx->mw;
    int32_t na = (int32_t)mol.getNumAtoms(), nb = (int32_t)mol.getNumBonds();
    if (!reserve_atoms(ctx, na) || !reserve_bonds(ctx, nb))
        return -1;
    m->n_atoms = na;
    m->n_bonds = nb;
    const RDKit::RingInfo *ri = mol.getRingInfo();
    if (!ri->isInitialized())
        RDKit::MolOps::findSSSR(mol);
    w.nbr_start.assign((size_t)na + 1, 0);
    w.h_nbrs.assign((size_t)na, 0);
    w.in_ring.resize((size_t)na);
    w.bond_rdtype.resize((size_t)nb);
    for (const Bond *b : mol.bonds()) {
        int32_t k = (int32_t)b->getIdx();
        int32_t u = (int32_t)b->getBeginAtomIdx(), v = (int32_t)b->getEndAtomIdx();
        Bond::BondType t = b->getBondType();
        m->bond_begin[k] = u;
        m->bond_end[k] = v;
        m->bond_type[k] = bond_type_code(t);
        m->bond_conjugated[k] = b->getIsConjugated() ? 1 : 0;
        m->bond_in_ring[k] = ri->numBondRings(b->getIdx()) != 0;
        m->bond_stereo[k] = (uint8_t)b->getStereo();
        w.bond_rdtype[k] = static_cast<std::int32_t>(t);
        w.nbr_start[u + 1]++;
        w.nbr_start[v + 1]++;
    }
    for (int32_t i = 0; i < na; i++)
        w.nbr_start[i + 1] += w.nbr_start[i];
    w.nbr_atom.resize((size_t)2 * nb);
    w.nbr_bond.resize((size_t)2 * nb);
    w.nbr_type.resize((size_t)2 * nb);
    w.cursor.assign(w.nbr_start.begin(), w.nbr_start.end() - 1);
    for (int32_t k = 0; k < nb; k++) {
        int32_t u = m->bond_begin[k], v = m->bond_end[k];
        std::uint32_t cu = w.cursor[u]++, cv = w.cursor[v]++;
        w.nbr_atom[cu] = (std::uint32_t)v;
        w.nbr_atom[cv] = (std::uint32_t)u;
        w.nbr_bond[cu] = w.nbr_bond[cv] = (std::uint32_t)k;
        w.nbr_type[cu] = w.nbr_type[cv] = w.bond_rdtype[k];
    }
    for (const Atom *a : mol.atoms()) {
        int32_t i = (int32_t)a->getIdx();
        int z = a->getAtomicNum();
        int32_t hs = (int32_t)a->getTotalNumHs();
        m->atomic_num[i] = z;
        /* Atom::getTotalDegree() is getTotalNumHs(false) + getDegree() */
        m->total_degree[i] = hs + (w.nbr_start[i + 1] - w.nbr_start[i]);
        m->formal_charge[i] = a->getFormalCharge();
        m->chiral_tag[i] = (int32_t)a->getChiralTag();
        m->total_hs[i] = hs;
        m->hybridization[i] = (int32_t)a->getHybridization();
        m->aromatic[i] = a->getIsAromatic() ? 1 : 0;
        m->mass[i] = atom_mass(a);
        w.in_ring[i] = ri->numAtomRings(a->getIdx()) != 0;
    }
    for (int32_t k = 0; k < nb; k++) {   /* hydrogens left as atoms */
        int32_t u = m->bond_begin[k], v = m->bond_end[k];
        w.h_nbrs[u] += m->atomic_num[v] == 1;
        w.h_nbrs[v] += m->atomic_num[u] == 1;
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
 *
 * With two layers, which environments meet is known from the graph alone,
 * and only layer 1 needs a look-up:
 *   - layer 0's environment of atom i is its own bonds, bmask(i).  Another
 *     atom k with the same bonds must lie on i's bond i-j, so k = j, and
 *     then both have that one bond only: a two-atom fragment, of which the
 *     smaller (invariant, atom) counts.
 *   - layer 1's environment of i is bmask(i) and its neighbours' bmask.  It
 *     equals a layer-0 environment bmask(k) when every one of these bonds
 *     touches k: with one bond, k is its neighbour (always so: a terminal
 *     atom never counts in layer 1); with two or more, k = i, which holds
 *     when all its neighbours are terminal.  Those atoms drop out; the
 *     others (with an `inner` neighbour, one of 2+ bonds) meet only each
 *     other's layer-1 environments, found in a hash set (env_claim).
 * No third layer reads who dropped out, so that is not recorded.
 */
static void morgan_add(morgan_ws &w, std::uint32_t invariant)
{
    std::uint32_t bit = invariant % MP_MORGAN_BITS;
    w.count[bit]++;
    w.touched[bit >> 6] |= std::uint64_t(1) << (bit & 63);
}

static std::uint64_t env_key(const std::uint64_t *e, size_t W)
{
    std::uint64_t k = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < W; i++)
        k = (k ^ e[i]) * 0x100000001b3ull;
    return k;
}

static bool env_equal(const std::uint64_t *a, const std::uint64_t *b, size_t W)
{
    std::uint64_t d = 0;
    for (size_t i = 0; i < W; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

/*
 * Layer-1 environment e (key = env_key(e)) of `atom`, with its new
 * invariant, against the layer's environments so far (a hash set:
 * seen_slot, sized per molecule for at most 1 entry per atom, at most a
 * quarter full): a new one is recorded, held by (invariant, atom); a known
 * one is held by the smaller (invariant, atom) of the two.  RDKit sorts the
 * layer's candidates by (environment, invariant, atom) and keeps the first
 * of a run of identical environments; this gives the same holder without
 * the sort.  The holders' counts are added once all atoms are in.
 */
static void env_claim(morgan_ws &w, const std::uint64_t *e, std::uint64_t key, size_t W,
                      std::uint32_t atom, std::uint32_t invariant)
{
    const size_t mask = w.seen_slot.size() - 1;
    size_t h = (size_t)(key ^ (key >> 29)) & mask;
    for (;; h = (h + 1) & mask) {
        std::int32_t s = w.seen_slot[h];
        if (s == 0)
            break;
        env_entry &x = w.seen[(size_t)s - 1];
        if (x.key != key || !env_equal(&w.env1[(size_t)x.atom * W], e, W))
            continue;
        if (invariant < x.invariant || (invariant == x.invariant && atom < x.atom)) {
            x.atom = atom;
            x.invariant = invariant;
        }
        return;
    }
    env_entry &x = w.seen[(size_t)w.n_seen++];
    x.key = key;
    x.atom = atom;
    x.invariant = invariant;
    w.seen_slot[h] = w.n_seen;
}

/* A (bond type, neighbour invariant) pair as one number that sorts as the
 * pair does (the sign bit of the type flipped). */
static std::uint64_t nbr_key(std::int32_t bond_type, std::uint32_t invariant)
{
    return (std::uint64_t)((std::uint32_t)bond_type ^ 0x80000000u) << 32 | invariant;
}

/* gboost::hash_combine(h, std::pair(bond type, invariant)) of a pair as
 * nbr_key packs it: the pair's hash_value is the two combined into 0. */
static void hash_nbr(std::hash_result_t &h, std::uint64_t key)
{
    std::hash_result_t p = 0;
    gboost::hash_combine(p, (std::int32_t)((std::uint32_t)(key >> 32) ^ 0x80000000u));
    gboost::hash_combine(p, (std::uint32_t)key);
    gboost::hash_combine(h, p);
}

static void order2(std::uint64_t &a, std::uint64_t &b)
{
    std::uint64_t lo = a < b ? a : b, hi = a < b ? b : a;
    a = lo;
    b = hi;
}

/*
 * Atom i's step of layer `layer` (0 or 1) from the invariants `cur`: its
 * next invariant (RDKit: the hash of the layer, its invariant and its
 * sorted (bond type, neighbour invariant) pairs), and in layer 1 its
 * environment into env1 (its bonds and its neighbours').  The common case
 * of at most 4 neighbours runs without data-dependent branches: 4 slots,
 * the missing ones pointing at the zero row n and sorting last, a sorting
 * network, and the hashes of the padding discarded.
 */
static std::uint32_t nbr_step(morgan_ws &w, const std::uint32_t *cur, unsigned i, unsigned n,
                              size_t W, std::uint32_t layer)
{
    const std::int32_t s = w.nbr_start[i], deg = w.nbr_start[i + 1] - s;
    std::uint64_t *e = layer ? &w.env1[(size_t)i * W] : nullptr;
    const std::uint64_t *bm = w.bmask.data();
    std::hash_result_t h = layer;
    gboost::hash_combine(h, cur[i]);
    if (layer == 1)
        for (size_t k = 0; k < W; k++)
            e[k] = bm[(size_t)i * W + k];
    if (deg <= 4) {
        std::uint64_t key[4];
        for (std::int32_t k = 0; k < 4; k++) {
            bool in = k < deg;
            std::int32_t q = s + (in ? k : 0);
            std::uint32_t j = w.nbr_atom[q];
            j = in ? j : n;
            std::uint64_t kk = nbr_key(w.nbr_type[q], cur[j]);
            key[k] = in ? kk : ~std::uint64_t(0);
            if (layer == 1)
                for (size_t t = 0; t < W; t++)
                    e[t] |= bm[(size_t)j * W + t];
        }
        order2(key[0], key[1]);
        order2(key[2], key[3]);
        order2(key[0], key[2]);
        order2(key[1], key[3]);
        order2(key[1], key[2]);
        for (std::int32_t k = 0; k < 4; k++) {
            std::hash_result_t hk = h;
            hash_nbr(hk, key[k]);
            h = k < deg ? hk : h;
        }
        return h;
    }
    w.keys.clear();
    for (std::int32_t q = s; q < s + deg; q++) {
        std::uint32_t j = w.nbr_atom[q];
        w.keys.push_back(nbr_key(w.nbr_type[q], cur[j]));
        if (layer == 1)
            for (size_t t = 0; t < W; t++)
                e[t] |= bm[(size_t)j * W + t];
    }
    std::sort(w.keys.begin(), w.keys.end());
    for (std::uint64_t k : w.keys)
        hash_nbr(h, k);
    return h;
}

static int morgan_counts(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    morgan_ws &w = ctx->mw;
    const unsigned n = mol.getNumAtoms(), nb = mol.getNumBonds();
    const size_t W = nb ? (nb + 63) / 64 : 1;
    const std::int32_t *ns = w.nbr_start.data();
    /* RDKit's getConnectivityInvariants(mol, inv, includeRingMembership =
     * true), from copy_graph's numbers: the hash (gboost::hash_range, as its
     * std::vector hasher) of (atomic number, total degree, getTotalNumHs(true)
     * = Hs + hydrogen neighbours, formal charge, (int)(mass - average
     * weight), then 1 when the atom is in a ring). */
    const mp_rdk_mol *cm = &ctx->mol;
    w.inv0.resize((size_t)n + 1);
    w.inv1.resize((size_t)n + 1);
    w.inv0[n] = w.inv1[n] = 0;
    std::memset(w.touched, 0, sizeof w.touched);
    for (unsigned i = 0; i < n; i++) {
        int z = cm->atomic_num[i];
        double avg = z >= 0 && z < N_WEIGHTS ? g_weight[z]
                                             : RDKit::PeriodicTable::getTable()->getAtomicWeight(z);
        std::uint32_t c[5] = { (std::uint32_t)z, (std::uint32_t)cm->total_degree[i],
                               (std::uint32_t)(cm->total_hs[i] + w.h_nbrs[i]),
                               (std::uint32_t)cm->formal_charge[i],
                               (std::uint32_t)static_cast<int>(cm->mass[i] - avg) };
        std::hash_result_t h5 = gboost::hash_range(c, c + 5), h6 = h5;
        gboost::hash_combine(h6, 1u);
        w.inv0[i] = w.in_ring[i] ? h6 : h5;
        morgan_add(w, w.inv0[i]);
    }
    /* each atom's bonds, and whether it has an inner neighbour */
    w.bmask.assign(((size_t)n + 1) * W, 0);
    w.inner.assign(n, 0);
    for (unsigned k = 0; k < nb; k++) {
        std::int32_t u = cm->bond_begin[k], v = cm->bond_end[k];
        std::uint64_t b = std::uint64_t(1) << (k & 63);
        w.bmask[(size_t)u * W + (k >> 6)] |= b;
        w.bmask[(size_t)v * W + (k >> 6)] |= b;
        w.inner[u] |= ns[v + 1] - ns[v] >= 2;
        w.inner[v] |= ns[u + 1] - ns[u] >= 2;
    }
    /* layer 0: every atom with bonds, but one of a two-atom fragment */
    for (unsigned i = 0; i < n; i++)
        if (ns[i + 1] > ns[i])
            w.inv1[i] = nbr_step(w, w.inv0.data(), i, n, W, 0);
    for (unsigned i = 0; i < n; i++) {
        std::int32_t deg = ns[i + 1] - ns[i];
        if (deg == 0)
            continue;
        std::uint32_t j = w.nbr_atom[ns[i]];
        bool lone_pair = deg == 1 && ns[j + 1] - ns[j] == 1;
        if (lone_pair && (w.inv1[j] < w.inv1[i] || (w.inv1[j] == w.inv1[i] && j < i)))
            continue;   /* the other atom holds the fragment's environment */
        morgan_add(w, w.inv1[i]);
    }
    /* layer 1: the atoms of 2+ bonds with an inner neighbour */
    w.env1.resize((size_t)n * W);
    w.seen.resize(n);
    w.n_seen = 0;
    size_t slots = 16;
    while (slots < 4 * (size_t)n)
        slots *= 2;
    w.seen_slot.assign(slots, 0);
    for (unsigned i = 0; i < n; i++) {
        if (ns[i + 1] - ns[i] < 2 || !w.inner[i])
            continue;
        std::uint32_t h = nbr_step(w, w.inv1.data(), i, n, W, 1);
        const std::uint64_t *e = &w.env1[(size_t)i * W];
        env_claim(w, e, env_key(e, W), W, i, h);
    }
    for (std::int32_t c = 0; c < w.n_seen; c++)
        morgan_add(w, w.seen[(size_t)c].invariant);
    mp_rdk_mol *m = &ctx->mol;
    std::int32_t n_touched = 0;
    for (int q = 0; q < MP_MORGAN_BITS / 64; q++)
        n_touched += __builtin_popcountll(w.touched[q]);
    bool ok = reserve_morgan(ctx, n_touched);
    int32_t j = 0;
    for (int q = 0; q < MP_MORGAN_BITS / 64; q++)   /* ascending bits; counts back to 0 */
        for (std::uint64_t x = w.touched[q]; x; x &= x - 1) {
            unsigned bit = (unsigned)q * 64 + (unsigned)__builtin_ctzll(x);
            if (ok) {
                m->morgan_bit[j] = (std::uint16_t)bit;
                m->morgan_count[j] = w.count[bit];
                j++;
            }
            w.count[bit] = 0;
        }
    m->n_morgan = j;
    return ok ? 0 : -1;
}

/*
 * RDKit's MurckoDecompose, with the atoms it keeps found by pruning instead
 * of its all-pairs shortest paths (getDistanceMat with paths, O(n^3): two
 * thirds of MurckoDecompose's time, a seventh of a featurization with
 * scaffolds).  RDKit keeps the ring atoms and the atoms on its shortest path
 * from the first atom of each ring to the first atom of each later ring.
 * An atom in no ring has only bridges for bonds, so it lies on a path
 * between two ring atoms exactly when it separates them, and then it lies on
 * every path between them, the shortest included.  So RDKit keeps the ring
 * atoms and the ring-free atoms with ring atoms in at least two of their
 * branches: what is left after removing, again and again, ring-free atoms
 * with at most one neighbour left.  The rest is RDKit's own steps: the
 * same fixes of the kept neighbours' hydrogens, in the same order (a
 * neighbour visited before a double bond stops the loop is fixed even
 * though the atom stays), the same batch removal.  Molecules with
 * conformers (CXSMILES coordinates), and the reference mode, go to RDKit's
 * function.  test_featurize_parse.c compares the scaffolds.
 */
static RDKit::ROMol *murcko_core(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    const unsigned n = mol.getNumAtoms();
    const RDKit::RingInfo *ri = mol.getRingInfo();
    if (!n || mol.getNumConformers() || !ri->isInitialized() ||
        g_reference.load(std::memory_order_relaxed))
        return RDKit::MurckoDecompose(mol);
    std::vector<std::uint8_t> &keep = ctx->murcko_keep;
    std::vector<std::uint32_t> &left = ctx->murcko_left, &stack = ctx->murcko_stack;
    keep.assign(n, 1);
    left.resize(n);
    stack.clear();
    for (unsigned i = 0; i < n; i++) {
        left[i] = mol.getAtomDegree(mol.getAtomWithIdx(i));
        if (!ri->numAtomRings(i) && left[i] <= 1)
            stack.push_back(i);
    }
    while (!stack.empty()) {   /* ring atoms never enter the stack */
        unsigned i = stack.back();
        stack.pop_back();
        keep[i] = 0;
        for (const Atom *nb : mol.atomNeighbors(mol.getAtomWithIdx(i))) {
            unsigned j = nb->getIdx();
            if (keep[j] && !ri->numAtomRings(j) && --left[j] == 1)
                stack.push_back(j);
        }
    }
    std::unique_ptr<RDKit::RWMol> res(new RDKit::RWMol(mol));
    res->beginBatchEdit();
    for (unsigned i = 0; i < n; i++) {
        if (keep[i])
            continue;
        Atom *atom = res->getAtomWithIdx(i);
        bool remove = true;
        for (Atom *nb : res->atomNeighbors(atom)) {
            if (!keep[nb->getIdx()])
                continue;
            if (res->getBondBetweenAtoms(i, nb->getIdx())->getBondType() == Bond::DOUBLE) {
                remove = false;
                break;
            } else if (nb->getIsAromatic() && nb->getAtomicNum() != 6) {
                nb->setNumExplicitHs(1);   /* aromatic heteroatoms */
            } else if (nb->getIsAromatic() && nb->getAtomicNum() == 6 &&
                       nb->getFormalCharge() == 1) {
                nb->setNumExplicitHs(1);   /* aromatic carbocations */
            } else if (nb->getNoImplicit() || nb->getChiralTag() != Atom::CHI_UNSPECIFIED) {
                nb->setNoImplicit(false);
                nb->setNumExplicitHs(0);
                nb->setChiralTag(Atom::CHI_UNSPECIFIED);
            }
        }
        if (remove)
            res->removeAtom(atom);
    }
    res->commitBatchEdit();
    res->clearComputedProps();
    return res.release();
}

static void copy_scaffold(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    /* REFERENCE 3.2 step 1: RDKit's MurckoScaffoldSmiles(includeChirality=False). */
    std::unique_ptr<RDKit::ROMol> core(murcko_core(ctx, mol));
    ctx->scaffold.clear();
    if (!core || core->getNumAtoms() == 0)
        return;
    core->clearComputedProps();
    core->updatePropertyCache();
    RDKit::MolOps::symmetrizeSSSR(*core);
    ctx->scaffold = RDKit::MolToSmiles(*core, /*doIsomericSmiles=*/false);
}

/* ===================================================================== */
/* Chemprop's molecule vectors: 2D descriptors, v2 Morgan, charge          */
/* ===================================================================== */

static const double NaN = std::numeric_limits<double>::quiet_NaN();

/*
 * descriptastorus' path (Chemprop v1's rdkit_2d): MolToSmiles(isomeric) of
 * the molecule as Chemprop made it, parsed again, the descriptors on that
 * molecule.  The round trip renumbers atoms, which moves Ipc and
 * fr_bicyclic on some molecules.  A failure to read the SMILES back (or an
 * RDKit exception outside a descriptor) leaves the row NaN.  -1 on OOM.
 */
static int rdkit2d_v1(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    mp_rdk_mol *m = &ctx->mol;
    for (int j = 0; j < MP_D2_V1; j++) {
        m->rdkit2d[j] = NaN;
        m->rdkit2d_failed[j] = 0;
    }
    std::unique_ptr<RDKit::RWMol> again;
    try {
        std::string can = RDKit::MolToSmiles(mol);
        RDKit::SmilesParserParams params;   /* MolFromSmiles: sanitize, remove Hs */
        again.reset(RDKit::SmilesToMol(can, params));
    } catch (const std::bad_alloc &) {
        return -1;
    } catch (...) {
        return 0;
    }
    if (!again)
        return 0;
    if (mp_d2_compute(ctx->d2, reinterpret_cast<mp_d2_mol *>(again.get()), 0, ctx->d2v,
                      ctx->d2failed) < 0)
        return -1;
    std::memcpy(m->rdkit2d, ctx->d2v, MP_D2_V1 * sizeof(double));
    std::memcpy(m->rdkit2d_failed, ctx->d2failed, MP_D2_V1);
    return 0;
}

/* Chemprop v2's rdkit_2d: descList on the molecule itself (no round trip).
 * v2 does not catch a failing descriptor; here it reads NaN. */
static int rdkit2d_v2(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    mp_rdk_mol *m = &ctx->mol;
    if (mp_d2_compute(ctx->d2, reinterpret_cast<mp_d2_mol *>(const_cast<RDKit::ROMol *>(&mol)),
                      1, ctx->d2v, ctx->d2failed) < 0)
        return -1;
    for (int k = 0; k < MP_D2_ALL; k++) {
        int j = mp_d2_v2_index(k);
        m->v2desc[k] = ctx->d2failed[j] ? NaN : ctx->d2v[j];
    }
    return 0;
}

static int morgan2_counts(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    mp_rdk_mol *m = &ctx->mol;
    if (!ctx->gen2)
        ctx->gen2.reset(new_morgan2_gen());
    std::unique_ptr<RDKit::SparseIntVect<std::uint32_t>> fp(ctx->gen2->getCountFingerprint(mol));
    const auto &nz = fp->getNonzeroElements();   /* a map: ascending bits */
    if (!reserve_morgan2(ctx, (int32_t)nz.size()))
        return -1;
    int32_t j = 0;
    for (const auto &kv : nz) {
        m->morgan2_bit[j] = (uint16_t)kv.first;
        m->morgan2_count[j] = (uint32_t)kv.second;
        j++;
    }
    m->n_morgan2 = j;
    return 0;
}

extern "C" void mp_rdk_set_reference(int on)
{
    g_reference.store(on ? 1 : 0, std::memory_order_relaxed);
}

extern "C" int mp_rdk_featurize(mp_rdk_ctx *ctx, const char *smiles, int what,
                                const mp_rdk_mol **out)
{
    mp_rdk_mol *m = &ctx->mol;
    m->n_atoms = m->n_bonds = m->n_morgan = m->n_morgan2 = 0;
    m->charge = 0;
    m->scaffold = nullptr;
    m->error = nullptr;
    *out = m;
    ctx->error.clear();
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, ctx->error, (what & MP_RDK_DESC) != 0));
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
        if (what & MP_RDK_V2MORGAN) {
            stage = "computing the Morgan generator fingerprint";
            if (morgan2_counts(ctx, *mol) < 0)
                return -1;
        }
        if (what & MP_RDK_CHARGE)
            m->charge = RDKit::MolOps::getFormalCharge(*mol);
        if ((what & (MP_RDK_RDKIT2D | MP_RDK_V2DESC)) && !ctx->d2 &&
            mp_d2_ctx_new(&ctx->d2) != MP_OK)
            return -1;   /* mp_rdk_desc2d_ready() vouched for everything but memory */
        if (what & MP_RDK_RDKIT2D) {
            stage = "computing the RDKit 2D descriptors";
            if (rdkit2d_v1(ctx, *mol) < 0)
                return -1;
        }
        if (what & MP_RDK_V2DESC) {
            stage = "computing the RDKit 2D descriptors";
            if (rdkit2d_v2(ctx, *mol) < 0)
                return -1;
        }
    } catch (const std::bad_alloc &) {
        return -1;
    } catch (const std::exception &e) {
        ctx->error = std::string("RDKit failed ") + stage + ": " + e.what();
        m->error = ctx->error.c_str();
        m->n_atoms = m->n_bonds = m->n_morgan = m->n_morgan2 = 0;
        return 0;
    }
    return 1;
}

extern "C" mp_status mp_rdk_desc2d_ready(void)
{
    init_once();
    mp_status st = mp_d2_norm_init();
    if (st)
        return st;
    mp_d2_ctx *c;
    if ((st = mp_d2_ctx_new(&c)))
        return st;
    mp_d2_ctx_free(c);
    return MP_OK;
}

extern "C" int mp_rdk_fast_reference(const char *const *smiles, int n, double *fast,
                                     double *rdkit, uint8_t *which, uint8_t *valid)
{
    mp_d2_ctx *c;
    if (mp_d2_ctx_new(&c) != MP_OK)
        return -1;
    uint8_t failed[MP_D2_ALL];
    int r = 0;
    for (int i = 0; i < n && r == 0; i++) {
        std::string err;
        std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles[i], err, true));
        valid[i] = mol != nullptr;
        if (!mol)
            continue;
        auto *m = reinterpret_cast<mp_d2_mol *>(mol.get());
        r = mp_d2_compute(c, m, 0, fast + (size_t)i * MP_D2_ALL, failed);
        mp_d2_reference(m, rdkit + (size_t)i * MP_D2_ALL, which);
    }
    mp_d2_ctx_free(c);
    if (r < 0)
        mp_error_set(MP_ERR_NOMEM, "out of memory");
    return r;
}

extern "C" int mp_rdk_morgan2_reference(const char *smiles, uint8_t *bits, uint32_t *counts)
{
    std::string err;
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, err, true));
    if (!mol)
        return 0;
    std::unique_ptr<morgan2_gen> gen(new_morgan2_gen());
    std::unique_ptr<ExplicitBitVect> bv(gen->getFingerprint(*mol));
    std::unique_ptr<RDKit::SparseIntVect<std::uint32_t>> cv(gen->getCountFingerprint(*mol));
    for (unsigned i = 0; i < MP_MORGAN_BITS; i++) {
        bits[i] = bv->getBit(i) ? 1 : 0;
        counts[i] = (uint32_t)cv->getVal(i);
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
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, err, true));
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
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, err, true));
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
        mol.reset(parse_smiles(smiles, err, true));
        if (!mol)
            return nullptr;
        std::string s = RDKit::MolToSmiles(*mol);
        return mp_strdup(s.c_str());
    } catch (...) {
        return nullptr;
    }
}
