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
#include <RDGeneral/versions.h>

#include <algorithm>
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
    std::vector<std::uint16_t> touched;          /* bits with a count, unordered */
    std::uint32_t count[MP_MORGAN_BITS];
};

typedef RDKit::FingerprintGenerator<std::uint64_t> morgan2_gen;

struct mp_rdk_ctx {
    mp_rdk_mol mol;
    int32_t cap_atoms, cap_bonds, cap_morgan, cap_morgan2;
    std::string error, scaffold;
    morgan_ws mw;
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
 * 2, 2048 bits, bond types on, no chirality): the identifiers of the
 * unfolded one (mp_d2_morgan_ids: RDKit's own atom invariants and hash, the
 * ECFP iteration with reused flat buffers instead of RDKit's per-call
 * bitsets, tuples and map, which were a quarter of the featurization time),
 * each counted in bit id % 2048.  The tests compare it with RDKit's function
 * molecule by molecule.
 */
static int morgan_counts(mp_rdk_ctx *ctx, const RDKit::ROMol &mol)
{
    morgan_ws &w = ctx->mw;
    const mp_d2_morgan_id *ids;
    size_t n = mp_d2_morgan_ids(reinterpret_cast<const mp_d2_mol *>(&mol), 2, &ids);
    w.touched.clear();
    for (size_t k = 0; k < n; k++) {
        std::uint32_t bit = ids[k].id % MP_MORGAN_BITS;
        if (w.count[bit]++ == 0)
            w.touched.push_back((std::uint16_t)bit);
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
        std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles[i], err));
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
    std::unique_ptr<RDKit::RWMol> mol(parse_smiles(smiles, err));
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
