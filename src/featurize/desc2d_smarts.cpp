/*
 * desc2d_smarts.cpp - the descriptors that count SMARTS matches, which RDKit
 * implements in Python only:
 *
 *   fr_*   rdkit.Chem.Fragments: the number of unique matches (at most 1000,
 *          RDKit's default) of each SMARTS of RDKit's FragmentDescriptors.csv,
 *          read at run time from the packaged file (Debian: rdkit-data).
 *   qed    Bickerton et al., Nature Chem. 4, 90-98 (2012): the weighted
 *          geometric mean of eight asymmetric double sigmoids ("ADS") of
 *          molecular properties, with the mean weights; the acceptor patterns,
 *          the structural alerts and the ADS parameters are RDKit's
 *          (rdkit/Chem/QED.py), kept here as data.
 *
 * Every context parses its own query molecules: RDKit guards a recursive
 * SMARTS query with a lock during a match, which threads sharing one query
 * would contend for.
 *
 * Most of these 212 patterns cannot match a given molecule, and RDKit's
 * matcher costs microseconds even to find that out.  So each query atom gets
 * the set of atom classes (element, aromatic, charge sign) it can possibly
 * match, read off its query tree (a superset: anything not understood
 * counts as "any atom"); a pattern one of whose atoms has no candidate in
 * the molecule has no match, and RDKit is not asked.  This only skips calls
 * whose answer is known; tests/test_descriptors.c checks that counts with
 * and without the screen agree on thousands of molecules.
 */
#include "featurize/desc2d.h"

/* First: RDKit's headers declare some members (the mutex of a recursive
 * query) only under RDConfig.h's switches, which they do not include
 * themselves; without it this file would see another layout than the
 * library's (getQueryMol() read a null pointer). */
#include <RDGeneral/RDConfig.h>
#include <GraphMol/ChemTransforms/ChemTransforms.h>
#include <GraphMol/GraphMol.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/QueryAtom.h>
#include <GraphMol/QueryOps.h>
#include <GraphMol/SmilesParse/SmilesParse.h>
#include <GraphMol/Substruct/SubstructMatch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using RDKit::ROMol;

static const ROMol &MOL(const mp_d2_mol *m)
{
    return *reinterpret_cast<const ROMol *>(m);
}

/* ===================================================================== */
/* QED data (RDKit's rdkit/Chem/QED.py, after Bickerton et al. 2012)      */
/* ===================================================================== */

static const char *const qed_acceptors[] = {
    "[oH0;X2]", "[OH1;X2;v2]", "[OH0;X2;v2]", "[OH0;X1;v2]", "[O-;X1]", "[SH0;X2;v2]",
    "[SH0;X1;v2]", "[S-;X1]", "[nH0;X2]", "[NH0;X1;v3]", "[$([N;+0;X3;v3]);!$(N[C,S]=O)]",
};

static const char *const qed_alerts[] = {
    "*1[O,S,N]*1", "[S,C](=[O,S])[F,Br,Cl,I]", "[CX4][Cl,Br,I]", "[#6]S(=O)(=O)O[#6]",
    "[$([CH]),$(CC)]#CC(=O)[#6]", "[$([CH]),$(CC)]#CC(=O)O[#6]", "n[OH]",
    "[$([CH]),$(CC)]#CS(=O)(=O)[#6]", "C=C(C=O)C=O", "n1c([F,Cl,Br,I])cccc1", "[CH1](=O)",
    "[#8][#8]", "[C;!R]=[N;!R]", "[N!R]=[N!R]", "[#6](=O)[#6](=O)", "[#16][#16]", "[#7][NH2]",
    "C(=O)N[NH2]", "[#6]=S",
    "[$([CH2]),$([CH][CX4]),$(C([CX4])[CX4])]=[$([CH2]),$([CH][CX4]),$(C([CX4])[CX4])]",
    "C1(=[O,N])C=CC(=[O,N])C=C1", "C1(=[O,N])C(=[O,N])C=CC=C1", "a21aa3a(aa1aaaa2)aaaa3",
    "a31a(a2a(aa1)aaaa2)aaaa3", "a1aa2a3a(a1)A=AA=A3=AA=A2", "c1cc([NH2])ccc1",
    "[Hg,Fe,As,Sb,Zn,Se,se,Te,B,Si,Na,Ca,Ge,Ag,Mg,K,Ba,Sr,Be,Ti,Mo,Mn,Ru,Pd,Ni,Cu,Au,Cd,"
    "Al,Ga,Sn,Rh,Tl,Bi,Nb,Li,Pb,Hf,Ho]",
    "I", "OS(=O)(=O)[O-]", "[N+](=O)[O-]", "C(=O)N[OH]", "C1NC(=O)NC(=O)1", "[SH]", "[S-]",
    "c1ccc([Cl,Br,I,F])c([Cl,Br,I,F])c1[Cl,Br,I,F]",
    "c1cc([Cl,Br,I,F])cc([Cl,Br,I,F])c1[Cl,Br,I,F]", "[CR1]1[CR1][CR1][CR1][CR1][CR1][CR1]1",
    "[CR1]1[CR1][CR1]cc[CR1][CR1]1", "[CR2]1[CR2][CR2][CR2][CR2][CR2][CR2][CR2]1",
    "[CR2]1[CR2][CR2]cc[CR2][CR2][CR2]1", "[CH2R2]1N[CH2R2][CH2R2][CH2R2][CH2R2][CH2R2]1",
    "[CH2R2]1N[CH2R2][CH2R2][CH2R2][CH2R2][CH2R2][CH2R2]1", "C#C",
    "[OR2,NR2]@[CR2]@[CR2]@[OR2,NR2]@[CR2]@[CR2]@[OR2,NR2]", "[$([N+R]),$([n+R]),$([N+]=C)][O-]",
    "[#6]=N[OH]", "[#6]=NOC=O", "[#6](=O)[CX4,CR0X3,O][#6](=O)", "c1ccc2c(c1)ccc(=O)o2",
    "[O+,o+,S+,s+]", "N=C=O", "[NX3,NX4][F,Cl,Br,I]", "c1ccccc1OC(=O)[#6]",
    "[CR0]=[CR0][CR0]=[CR0]", "[C+,c+,C-,c-]", "N=[N+]=[N-]", "C12C(NC(N1)=O)CSC2",
    "c1c([OH])c([OH,NH2,NH])ccc1", "P", "[N,O,S]C#N", "C=C=O", "[Si][F,Cl,Br,I]", "[SX2]O",
    "[SiR0,CR0](c1ccccc1)(c2ccccc2)(c3ccccc3)", "O1CCCCC1OC2CCC3CCCCC3C2", "N=[CR0][N,n,O,S]",
    "[cR2]1[cR2][cR2]([Nv3X3,Nv4X4])[cR2][cR2][cR2]1[cR2]2[cR2][cR2][cR2]([Nv3X3,Nv4X4])"
    "[cR2][cR2]2",
    "C=[C!r]C#N", "[cR2]1[cR2]c([N+0X3R0,nX3R0])c([N+0X3R0,nX3R0])[cR2][cR2]1",
    "[cR2]1[cR2]c([N+0X3R0,nX3R0])[cR2]c([N+0X3R0,nX3R0])[cR2]1",
    "[cR2]1[cR2]c([N+0X3R0,nX3R0])[cR2][cR2]c1([N+0X3R0,nX3R0])", "[OH]c1ccc([OH,NH2,NH])cc1",
    "c1ccccc1OC(=O)O", "[SX2H0][N]", "c12ccccc1(SC(S)=N2)", "c12ccccc1(SC(=S)N2)", "c1nnnn1C=O",
    "s1c(S)nnc1NC=O", "S1C=CSC1=S", "C(=O)Onnn", "OS(=O)(=O)C(F)(F)F", "N#CC[OH]", "N#CC(=O)",
    "S(=O)(=O)C#N", "N[CH2]C#N", "C1(=O)NCC1", "S(=O)(=O)[O-,OH]", "NC[F,Cl,Br,I]", "C=[C!r]O",
    "[NX2+0]=[O+0]", "[OR0,NR0][OR0,NR0]", "C(=O)O[C,H1].C(=O)O[C,H1].C(=O)O[C,H1]",
    "[CX2R0][NX3R0]", "c1ccccc1[C;!R]=[C;!R]c2ccccc2",
    "[NX3R0,NX4R0,OR0,SX2R0][CX4][NX3R0,NX4R0,OR0,SX2R0]",
    "[s,S,c,C,n,N,o,O]~[n+,N+](~[s,S,c,C,n,N,o,O])(~[s,S,c,C,n,N,o,O])~[s,S,c,C,n,N,o,O]",
    "[s,S,c,C,n,N,o,O]~[nX3+,NX3+](~[s,S,c,C,n,N])~[s,S,c,C,n,N]", "[*]=[N+]=[*]",
    "[SX3](=O)[O-,OH]", "N#N", "F.F.F.F", "[R0;D2][R0;D2][R0;D2][R0;D2]",
    "[cR,CR]~C(=O)NC(=O)~[cR,CR]", "C=!@CC=[O,S]", "[#6,#8,#16][#6](=O)O[#6]",
    "c[C;R0](=[O,S])[#6]", "c[SX2][C;!R]", "C=C=C", "c1nc([F,Cl,Br,I,S])ncc1",
    "c1ncnc([F,Cl,Br,I,S])c1", "c1nc(c2c(n1)nc(n2)[F,Cl,Br,I])", "[#6]S(=O)(=O)c1ccc(cc1)F",
    "[15N]", "[13C]", "[18O]", "[34S]",
};

/* Aliphatic ring atoms bonded to a non-aromatic atom: deleted before the
 * aromatic rings are counted. */
static const char qed_aliphatic_rings[] = "[$([A;R][!a])]";

/* RDKit 2022.09's own patterns (libRDKitDescriptors' Lipinski.cpp) for
 * calcNumHBA, calcNumHBD and calcNumRotatableBonds (Strict, Debian's default
 * definition): RDKit copies a recursive query before every match to stay
 * thread-safe, which made these three a tenth of the time; here each context
 * owns its copy.  tests/test_descriptors.c compares the counts with RDKit's
 * functions. */
static const char *const lipinski_smarts[3] = {
    "[$([O,S;H1;v2]-[!$(*=[O,N,P,S])]),$([O,S;H0;v2]),$([O,S;-]),$([N;v3;!$(N-*=!@[O,N,P,S])]),"
    "$([nH0,o,s;+0])]",
    "[N&!H0&v3,N&!H0&+1&v4,O&H1&+0,S&H1&+0,n&H1&+0]",
    "[!$(*#*)&!D1&!$(C(F)(F)F)&!$(C(Cl)(Cl)Cl)&!$(C(Br)(Br)Br)&!$(C([CH3])([CH3])[CH3])&!$([CD3]"
    "(=[N,O,S])-!@[#7,O,S!D1])&!$([#7,O,S!D1]-!@[CD3]=[N,O,S])&!$([CD3](=[N+])-!@[#7!D1])&!$("
    "[#7!D1]-!@[CD3]=[N+])]-,:;!@[!$(*#*)&!D1&!$(C(F)(F)F)&!$(C(Cl)(Cl)Cl)&!$(C(Br)(Br)Br)&!$(C("
    "[CH3])([CH3])[CH3])]",
};

#define N_ACC ((int)(sizeof qed_acceptors / sizeof *qed_acceptors))
#define N_ALERT ((int)(sizeof qed_alerts / sizeof *qed_alerts))

/* ADS parameters A..F and DMAX, and the mean weights, in the order MW, ALOGP,
 * HBA, HBD, PSA, ROTB, AROM, ALERTS. */
static const double ads_param[8][7] = {
    { 2.817065973, 392.5754953, 290.7489764, 2.419764353, 49.22325677, 65.37051707, 104.9805561 },
    { 3.172690585, 137.8624751, 2.534937431, 4.581497897, 0.822739154, 0.576295591, 131.3186604 },
    { 2.948620388, 160.4605972, 3.615294657, 4.435986202, 0.290141953, 1.300669958, 148.7763046 },
    { 1.618662227, 1010.051101, 0.985094388, 0.000000001, 0.713820843, 0.920922555, 258.1632616 },
    { 1.876861559, 125.2232657, 62.90773554, 87.83366614, 12.01999824, 28.51324732, 104.5686167 },
    { 0.010000000, 272.4121427, 2.558379970, 1.565547684, 1.271567166, 2.758063707, 105.4420403 },
    { 3.217788970, 957.7374108, 2.274627939, 0.000000001, 1.317690384, 0.375760881, 312.3372610 },
    { 0.010000000, 1199.094025, -0.09002883, 0.000000001, 0.185904477, 0.875193782, 417.7253140 },
};
static const double qed_weight[8] = { 0.66, 0.46, 0.05, 0.61, 0.06, 0.65, 0.48, 0.95 };

/* ===================================================================== */
/* The fragment table                                                     */
/* ===================================================================== */

namespace {

/* The table as read from g_frag_path (read again when the data directory
 * changes, so a missing file is reported whenever it is missing). */
std::mutex g_frag_mutex;
std::string *g_frag_path;
std::vector<std::string> *g_frag_smarts;   /* MP_D2_N_FR, descriptastorus order */
std::string *g_frag_error;

std::string data_dir()
{
    if (const char *d = std::getenv("RDDATADIR"); d && *d)
        return d;
    if (const char *b = std::getenv("RDBASE"); b && *b)
        return std::string(b) + "/Data";
    return "/usr/share/RDKit/Data";
}

/* rdkit.Chem.Fragments' reading: lines not starting with '#', split at tabs,
 * name (with '=' and '-' made '_') and SMARTS in fields 1 and 3; a later
 * line of the same name wins. */
void load_fragments(const std::string &path)
{
    if (!g_frag_smarts) {   /* process lifetime */
        g_frag_smarts = new std::vector<std::string>();
        g_frag_error = new std::string;
        g_frag_path = new std::string;
    }
    *g_frag_path = path;
    g_frag_smarts->assign(MP_D2_N_FR, std::string());
    g_frag_error->clear();
    std::ifstream in(path);
    if (!in) {
        *g_frag_error = "cannot read " + path + " (the fr_* descriptors need RDKit's "
                        "FragmentDescriptors.csv: Debian package rdkit-data)";
        return;
    }
    std::vector<bool> seen(MP_D2_N_FR, false);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        std::vector<std::string> f;
        size_t s = 0;
        for (;;) {
            size_t t = line.find('\t', s);
            f.push_back(line.substr(s, t == std::string::npos ? std::string::npos : t - s));
            if (t == std::string::npos)
                break;
            s = t + 1;
        }
        if (f.size() < 3)
            continue;
        std::string name = f[0], sma = f[2];
        for (char &c : name)
            if (c == '=' || c == '-')
                c = '_';
        while (!sma.empty() && (sma.back() == '\r' || sma.back() == '\n' || sma.back() == ' '))
            sma.pop_back();
        for (int k = 0; k < MP_D2_N_FR; k++)
            if (name == mp_d2_name(MP_D2_FR_FIRST + k)) {
                (*g_frag_smarts)[(size_t)k] = sma;
                seen[(size_t)k] = true;
            }
    }
    for (int k = 0; k < MP_D2_N_FR; k++)
        if (!seen[(size_t)k]) {
            *g_frag_error = path + " has no line for " + mp_d2_name(MP_D2_FR_FIRST + k) +
                            " (not RDKit 2022.09's fragment table?)";
            return;
        }
}

} // namespace

/* ===================================================================== */
/* The screen                                                             */
/* ===================================================================== */

/* Atom classes: (element 0..127, aromatic, charge sign -/0/+), 768 bits. */
#define N_CLASS_WORDS 12
typedef std::array<std::uint64_t, N_CLASS_WORDS> classes;

static int class_of(int z, bool arom, int charge)
{
    if (z < 0 || z > 127)
        z = 127;
    return (z * 2 + (arom ? 1 : 0)) * 3 + (charge < 0 ? 0 : charge == 0 ? 1 : 2);
}

namespace {

struct cset {
    classes bits;
    bool exact;   /* bits are exactly the classes that match (not a superset) */
};

cset any(bool exact)
{
    cset c;
    c.bits.fill(~0ull);
    c.exact = exact;
    return c;
}

template <typename P>
cset where(P pred)
{
    cset c;
    c.bits.fill(0);
    c.exact = true;
    for (int z = 0; z < 128; z++)
        for (int a = 0; a < 2; a++)
            for (int q = -1; q <= 1; q++)
                if (pred(z, a != 0, q)) {
                    int k = class_of(z, a != 0, q);
                    c.bits[(size_t)k / 64] |= 1ull << (k % 64);
                }
    return c;
}

typedef Queries::Query<int, const RDKit::Atom *, true> atom_query;

bool eq_value(const atom_query *q, int &v)
{
    auto *e = dynamic_cast<const Queries::EqualityQuery<int, const RDKit::Atom *, true> *>(q);
    if (!e || e->getTol() != 0)
        return false;
    v = e->getVal();
    return true;
}

/* The classes an atom matching q can have. */
cset possible(const atom_query *q)
{
    const std::string &d = q->getDescription();
    cset c = any(false);
    int v;
    if (d == "AtomAnd") {
        c = any(true);
        for (auto it = q->beginChildren(); it != q->endChildren(); ++it) {
            cset k = possible(it->get());
            for (int w = 0; w < N_CLASS_WORDS; w++)
                c.bits[(size_t)w] &= k.bits[(size_t)w];
            c.exact = c.exact && k.exact;
        }
    } else if (d == "AtomOr") {
        c.bits.fill(0);
        c.exact = true;
        for (auto it = q->beginChildren(); it != q->endChildren(); ++it) {
            cset k = possible(it->get());
            for (int w = 0; w < N_CLASS_WORDS; w++)
                c.bits[(size_t)w] |= k.bits[(size_t)w];
            c.exact = c.exact && k.exact;
        }
    } else if (d == "AtomNull") {
        c = any(true);
    } else if (d == "AtomAtomicNum" && eq_value(q, v)) {
        c = where([v](int z, bool, int) { return z == v; });
    } else if (d == "AtomType" && eq_value(q, v)) {
        int z0 = v > 1000 ? v - 1000 : v;
        bool a0 = v > 1000;
        c = where([z0, a0](int z, bool a, int) { return z == z0 && a == a0; });
    } else if ((d == "AtomIsAromatic" || d == "AtomIsAliphatic") && eq_value(q, v) && v == 1) {
        bool a0 = d == "AtomIsAromatic";
        c = where([a0](int, bool a, int) { return a == a0; });
    } else if ((d == "AtomFormalCharge" || d == "AtomNegativeFormalCharge") && eq_value(q, v)) {
        int ch = d == "AtomFormalCharge" ? v : -v;
        int sign = ch < 0 ? -1 : ch > 0 ? 1 : 0;
        c = where([sign](int, bool, int s) { return s == sign; });
        c.exact = ch == 0;   /* "-" stands for -1 only, the class for every negative */
    } else if (d == "RecursiveStructure" && !q->getNegation()) {
        /* the atom must match the first atom of the recursive pattern */
        auto *r = dynamic_cast<const RDKit::RecursiveStructureQuery *>(q);
        const ROMol *sub = r ? r->getQueryMol() : nullptr;
        if (sub && sub->getNumAtoms() && sub->getAtomWithIdx(0)->hasQuery())
            c = possible(sub->getAtomWithIdx(0)->getQuery());
        c.exact = false;
        return c;   /* negation handled: none */
    }
    if (q->getNegation()) {
        if (!c.exact)
            return any(false);
        for (int w = 0; w < N_CLASS_WORDS; w++)
            c.bits[(size_t)w] = ~c.bits[(size_t)w];
    }
    return c;
}

} // namespace

/* Bond classes: single, double, triple, aromatic (by bond type), other. */
static int bond_class(int type)
{
    switch (type) {
    case RDKit::Bond::SINGLE: return 0;
    case RDKit::Bond::DOUBLE: return 1;
    case RDKit::Bond::TRIPLE: return 2;
    case RDKit::Bond::AROMATIC: return 3;
    default: return 4;
    }
}

typedef Queries::Query<int, const RDKit::Bond *, true> bond_query;

/* The bond classes a bond matching q can have (bit k: class k), and whether
 * that set is exact. */
static unsigned possible_bond(const bond_query *q, bool &exact)
{
    const std::string &d = q->getDescription();
    unsigned c = 31;
    exact = false;
    if (d == "BondAnd" || d == "BondOr") {
        bool is_and = d == "BondAnd";
        c = is_and ? 31 : 0;
        exact = true;
        for (auto it = q->beginChildren(); it != q->endChildren(); ++it) {
            bool e;
            unsigned k = possible_bond(it->get(), e);
            c = is_and ? (c & k) : (c | k);
            exact = exact && e;
        }
    } else if (d == "BondNull") {
        exact = true;
    } else if (d == "SingleOrAromaticBond") {
        c = 1u << 0 | 1u << 3;
        exact = true;
    } else if (d == "BondOrder") {
        auto *e = dynamic_cast<const Queries::EqualityQuery<int, const RDKit::Bond *, true> *>(q);
        if (e && e->getTol() == 0) {
            c = 1u << bond_class(e->getVal());
            exact = bond_class(e->getVal()) != 4;
        }
    }
    if (q->getNegation()) {
        if (!exact)
            return 31;
        c = ~c & 31;
    }
    return c;
}

/*
 * What a molecule must hold for a query molecule to match it: each query
 * atom's classes, each query bond's (bond classes, atom classes at both
 * ends), and, for the recursive SMARTS inside an atom's query (through
 * and/or, not negated), what the recursive pattern itself must find, and
 * the isotopes asked for.
 */
struct screen;
struct need {
    enum { ALWAYS, ALL, ANY, SUB, ISOTOPE } kind = ALWAYS;
    std::vector<need> part;
    std::shared_ptr<screen> sub;
    int isotope = 0;
};
struct screen {
    std::vector<classes> atom;
    std::vector<need> atom_need;
    std::vector<int> bond_a, bond_b;
    std::vector<unsigned> bond_types;
};

static std::shared_ptr<screen> screen_of(const ROMol &q, int depth);

static need need_of(const atom_query *q, int depth)
{
    need n;
    if (q->getNegation() || depth > 8)
        return n;
    const std::string &d = q->getDescription();
    if (d == "AtomAnd" || d == "AtomOr") {
        bool is_and = d == "AtomAnd";
        n.kind = is_and ? need::ALL : need::ANY;
        for (auto it = q->beginChildren(); it != q->endChildren(); ++it) {
            need k = need_of(it->get(), depth);
            if (k.kind == need::ALWAYS) {
                if (!is_and)
                    return need();   /* one branch needs nothing: the or needs nothing */
                continue;
            }
            n.part.push_back(std::move(k));
        }
        if (n.part.empty())
            return need();
    } else if (d == "RecursiveStructure") {
        auto *r = dynamic_cast<const RDKit::RecursiveStructureQuery *>(q);
        if (r && r->getQueryMol()) {
            n.kind = need::SUB;
            n.sub = screen_of(*r->getQueryMol(), depth + 1);
        }
    } else if (d == "AtomIsotope") {
        int v;
        if (eq_value(q, v)) {
            n.kind = need::ISOTOPE;
            n.isotope = v;
        }
    }
    return n;
}

static std::shared_ptr<screen> screen_of(const ROMol &q, int depth)
{
    auto s = std::make_shared<screen>();
    for (const RDKit::Atom *a : q.atoms()) {
        s->atom.push_back(a->hasQuery() ? possible(a->getQuery()).bits : any(false).bits);
        s->atom_need.push_back(a->hasQuery() ? need_of(a->getQuery(), depth) : need());
    }
    for (const RDKit::Bond *b : q.bonds()) {
        bool e;
        s->bond_a.push_back((int)b->getBeginAtomIdx());
        s->bond_b.push_back((int)b->getEndAtomIdx());
        s->bond_types.push_back(b->hasQuery() ? possible_bond(b->getQuery(), e) : 31u);
    }
    return s;
}

/* A query molecule and what a molecule needs for it to match. */
struct query {
    std::unique_ptr<ROMol> mol;
    std::shared_ptr<screen> need;
};

/* The molecule as the screen sees it: its atom classes, and its bonds as
 * (bond class, class of each end). */
struct summary {
    classes present;
    std::vector<int> bclass, bu, bv;
    std::vector<int> isotopes;   /* the nonzero isotopes present */
};

static void summarize(const ROMol &mol, summary &m)
{
    m.present.fill(0);
    m.isotopes.clear();
    std::vector<int> cls(mol.getNumAtoms());
    for (const RDKit::Atom *a : mol.atoms()) {
        if (a->getIsotope())
            m.isotopes.push_back((int)a->getIsotope());
        int k = class_of(a->getAtomicNum(), a->getIsAromatic(), a->getFormalCharge());
        cls[a->getIdx()] = k;
        m.present[(size_t)k / 64] |= 1ull << (k % 64);
    }
    m.bclass.clear();
    m.bu.clear();
    m.bv.clear();
    for (const RDKit::Bond *b : mol.bonds()) {
        m.bclass.push_back(bond_class((int)b->getBondType()));
        m.bu.push_back(cls[b->getBeginAtomIdx()]);
        m.bv.push_back(cls[b->getEndAtomIdx()]);
    }
}

static bool has_class(const classes &c, int k)
{
    return (c[(size_t)k / 64] >> (k % 64)) & 1;
}

static bool may_match(const screen &q, const summary &m);

static bool satisfied(const need &n, const summary &m)
{
    switch (n.kind) {
    case need::ALL:
        for (const need &p : n.part)
            if (!satisfied(p, m))
                return false;
        return true;
    case need::ANY:
        for (const need &p : n.part)
            if (satisfied(p, m))
                return true;
        return false;
    case need::SUB:
        return may_match(*n.sub, m);
    case need::ISOTOPE:
        return std::find(m.isotopes.begin(), m.isotopes.end(), n.isotope) != m.isotopes.end();
    default:
        return true;
    }
}

/* false only when the molecule cannot hold a match. */
static bool may_match(const screen &q, const summary &m)
{
    for (const classes &c : q.atom) {
        std::uint64_t hit = 0;
        for (int w = 0; w < N_CLASS_WORDS; w++)
            hit |= c[(size_t)w] & m.present[(size_t)w];
        if (!hit)
            return false;
    }
    for (size_t k = 0; k < q.bond_a.size(); k++) {
        const classes &ca = q.atom[(size_t)q.bond_a[k]], &cb = q.atom[(size_t)q.bond_b[k]];
        unsigned types = q.bond_types[k];
        bool found = false;
        for (size_t j = 0; j < m.bclass.size() && !found; j++)
            found = ((types >> m.bclass[j]) & 1) &&
                    ((has_class(ca, m.bu[j]) && has_class(cb, m.bv[j])) ||
                     (has_class(ca, m.bv[j]) && has_class(cb, m.bu[j])));
        if (!found)
            return false;
    }
    for (const need &n : q.atom_need)
        if (!satisfied(n, m))
            return false;
    return true;
}

/* ===================================================================== */
/* The context's query molecules                                          */
/* ===================================================================== */

static std::atomic<bool> g_screen{ true };

struct mp_d2_smarts {
    std::vector<query> frag, acc, alert, lipinski;
    std::unique_ptr<ROMol> aliphatic_rings;
    bool screen = true;
    summary mol;   /* of the molecule being described */
};

static ROMol *smarts(const std::string &s, std::string &err)
{
    ROMol *q = nullptr;
    try {
        q = RDKit::SmartsToMol(s);
    } catch (...) {
        q = nullptr;
    }
    if (!q && err.empty())
        err = "RDKit cannot parse the SMARTS '" + s + "'";
    return q;
}

extern "C" mp_status mp_d2_smarts_new(mp_d2_smarts **out)
{
    *out = nullptr;
    std::vector<std::string> frag;
    try {
        std::lock_guard<std::mutex> lock(g_frag_mutex);
        std::string path = data_dir() + "/FragmentDescriptors.csv";
        if (!g_frag_path || *g_frag_path != path)
            load_fragments(path);
        if (!g_frag_error->empty())
            return mp_error_set(MP_ERR_IO, "%s", g_frag_error->c_str());
        frag = *g_frag_smarts;
    } catch (const std::bad_alloc &) {
        return mp_error_set(MP_ERR_NOMEM, "out of memory reading the fragment table");
    }
    std::unique_ptr<mp_d2_smarts> s;
    std::string err;
    try {
        s.reset(new mp_d2_smarts());
        auto add = [&](std::vector<query> &to, const std::string &x) {
            to.emplace_back();
            to.back().mol.reset(smarts(x, err));
            if (to.back().mol)
                to.back().need = screen_of(*to.back().mol, 0);
        };
        for (const std::string &x : frag)
            add(s->frag, x);
        for (const char *x : qed_acceptors)
            add(s->acc, x);
        for (const char *x : qed_alerts)
            add(s->alert, x);
        for (const char *x : lipinski_smarts)
            add(s->lipinski, x);
        s->aliphatic_rings.reset(smarts(qed_aliphatic_rings, err));
    } catch (const std::bad_alloc &) {
        return mp_error_set(MP_ERR_NOMEM, "out of memory parsing the descriptor SMARTS");
    }
    if (!err.empty())
        return mp_error_set(MP_ERR_FORMAT, "%s", err.c_str());
    s->screen = g_screen;
    *out = s.release();
    return MP_OK;
}

extern "C" void mp_d2_smarts_free(mp_d2_smarts *s)
{
    delete s;
}

/* ===================================================================== */
/* Counting                                                               */
/* ===================================================================== */

static unsigned n_matches(const mp_d2_smarts *s, const ROMol &mol, const query &q)
{
    if (s->screen && !may_match(*q.need, s->mol))
        return 0;
    RDKit::SubstructMatchParameters p;   /* uniquify, at most 1000: RDKit's defaults */
    return (unsigned)RDKit::SubstructMatch(mol, *q.mol, p).size();
}

static bool has_match(const mp_d2_smarts *s, const ROMol &mol, const query &q)
{
    if (s->screen && !may_match(*q.need, s->mol))
        return false;
    RDKit::SubstructMatchParameters p;
    p.maxMatches = 1;
    return !RDKit::SubstructMatch(mol, *q.mol, p).empty();
}

extern "C" void mp_d2_set_screen(int on)
{
    g_screen = on != 0;
}

extern "C" void mp_d2_fragments(mp_d2_smarts *s, const mp_d2_mol *m, double *v)
{
    const ROMol &mol = MOL(m);
    summarize(mol, s->mol);
    for (int k = 0; k < MP_D2_N_FR; k++)
        v[MP_D2_FR_FIRST + k] = n_matches(s, mol, s->frag[(size_t)k]);
}

extern "C" void mp_d2_lipinski(mp_d2_smarts *s, const mp_d2_mol *m, double *v)
{
    const ROMol &mol = MOL(m);
    summarize(mol, s->mol);
    v[D_NumHAcceptors] = n_matches(s, mol, s->lipinski[0]);
    v[D_NumHDonors] = n_matches(s, mol, s->lipinski[1]);
    v[D_NumRotatableBonds] = n_matches(s, mol, s->lipinski[2]);
}

/* The asymmetric double sigmoid of property x, divided by its maximum. */
static double ads(double x, const double *p)
{
    double e1 = 1 + std::exp(-1 * (x - p[2] + p[3] / 2) / p[4]);
    double e2 = 1 + std::exp(-1 * (x - p[2] - p[3] / 2) / p[5]);
    double dx = p[0] + p[1] / e1 * (1 - 1 / e2);
    return dx / p[6];
}

extern "C" void mp_d2_qed(mp_d2_smarts *s, const mp_d2_mol *m, double *v)
{
    const ROMol &mol = MOL(m);
    summarize(mol, s->mol);
    double hba = 0;
    for (const auto &q : s->acc)
        hba += n_matches(s, mol, q);
    double alerts = 0;
    for (const auto &q : s->alert)
        alerts += has_match(s, mol, q);
    std::unique_ptr<ROMol> rest(RDKit::deleteSubstructs(mol, *s->aliphatic_rings));
    double arom = RDKit::MolOps::findSSSR(*rest);
    const double prop[8] = { v[D_MolWt], v[D_MolLogP], hba, v[D_NumHDonors],
                             v[D_TPSA],  v[D_NumRotatableBonds], arom, alerts };
    double t = 0, wsum = 0;
    for (int i = 0; i < 8; i++) {
        t += qed_weight[i] * std::log(ads(prop[i], ads_param[i]));
        wsum += qed_weight[i];
    }
    v[D_qed] = std::exp(t / wsum);
}
