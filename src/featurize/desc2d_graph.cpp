/*
 * desc2d_graph.cpp - the graph-theoretical descriptors RDKit implements in
 * Python only (rdkit.Chem.GraphDescriptors, rdkit.Chem.EState), written here
 * from their published definitions on RDKit's C++ molecule:
 *
 *   Chi0, Chi1      Kier & Hall, Rev. Comp. Chem. 2, 367-422 (1991), eqs 1, 9-12,
 *                   on the heavy-atom degrees
 *   BalabanJ        Balaban, Chem. Phys. Lett. 89, 399-404 (1982), on the
 *                   bond-order-weighted distance matrix
 *   BertzCT         Bertz, J. Am. Chem. Soc. 103, 3599-3601 (1981), with
 *                   aromatic bonds of order 1.5 and atoms grouped by their
 *                   sorted distance rows
 *   Ipc             Bonchev & Trinajstic, J. Chem. Phys. 67, 4517 (1977): the
 *                   information content of the characteristic polynomial's
 *                   coefficients (Le Verrier-Faddeev-Frame recurrence)
 *   EState          Hall, Mohney & Kier, JCICS 31, 76-81 (1991), and RDKit's
 *                   EState_VSA / VSA_EState bins (boundaries are RDKit data)
 *
 * Where RDKit's Python code fixes a convention the papers leave open (1e8 as
 * the distance between fragments, which sums enter an entropy, the order of
 * accumulation) this file follows it, so that values agree to rounding.
 */
#include "featurize/desc2d.h"

#include <RDGeneral/RDConfig.h>   /* first: the library's layout switches */
#include <GraphMol/GraphMol.h>
#include <GraphMol/MolOps.h>
#include <GraphMol/PeriodicTable.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

using RDKit::Atom;
using RDKit::Bond;
using RDKit::ROMol;

static const ROMol &MOL(const mp_d2_mol *m)
{
    return *reinterpret_cast<const ROMol *>(m);
}

/* RDKit's distance between atoms of different fragments. */
static const double FAR = 1e8;

struct mp_d2_graph_ws {
    std::vector<double> dist;        /* n x n topological distances          */
    std::vector<double> bo_dist;     /* n x n, bond lengths 1 / bond order   */
    std::vector<int> queue;
    std::vector<std::vector<int>> nbr;   /* sorted neighbour lists             */
    std::vector<double> a, b;        /* Ipc: A^k products                     */
    std::vector<double> cpoly;
    std::vector<double> estate, is;
};

extern "C" mp_d2_graph_ws *mp_d2_graph_ws_new(void)
{
    try {
        return new mp_d2_graph_ws();
    } catch (...) {
        return nullptr;
    }
}

extern "C" void mp_d2_graph_ws_free(mp_d2_graph_ws *w)
{
    delete w;
}

/* Sorted, unique neighbour lists (explicit graph neighbours). */
static void neighbours(mp_d2_graph_ws *w, const ROMol &mol)
{
    unsigned n = mol.getNumAtoms();
    w->nbr.resize(n);
    for (unsigned i = 0; i < n; i++)
        w->nbr[i].clear();
    for (const Bond *bd : mol.bonds()) {
        int u = (int)bd->getBeginAtomIdx(), v = (int)bd->getEndAtomIdx();
        w->nbr[u].push_back(v);
        w->nbr[v].push_back(u);
    }
    for (unsigned i = 0; i < n; i++) {
        auto &l = w->nbr[i];
        std::sort(l.begin(), l.end());
        l.erase(std::unique(l.begin(), l.end()), l.end());
    }
}

/* Breadth-first distances from every atom: the same integers as RDKit's
 * Floyd-Warshall getDistanceMat(useBO = false), FAR between fragments. */
static void topo_dist(mp_d2_graph_ws *w, unsigned n)
{
    w->dist.assign((size_t)n * n, FAR);
    w->queue.resize(n);
    for (unsigned s = 0; s < n; s++) {
        double *d = &w->dist[(size_t)s * n];
        d[s] = 0;
        size_t head = 0, tail = 0;
        w->queue[tail++] = (int)s;
        while (head < tail) {
            int u = w->queue[head++];
            for (int v : w->nbr[u])
                if (d[v] == FAR) {
                    d[v] = d[u] + 1;
                    w->queue[tail++] = v;
                }
        }
    }
}

/* The bond-order-weighted distances of RDKit's getDistanceMat(useBO = true):
 * bond lengths 1 / bond order (2/3 for an aromatic bond), 1e8 between
 * fragments, by Floyd-Warshall in RDKit's k, i, j order (in place: row and
 * column k do not change in round k, so this is RDKit's result bit for bit,
 * without its allocations, path matrix and property cache). */
static void bo_dist(mp_d2_graph_ws *w, const ROMol &mol)
{
    unsigned n = mol.getNumAtoms();
    std::vector<double> &d = w->bo_dist;
    d.assign((size_t)n * n, FAR);
    for (unsigned i = 0; i < n; i++)
        d[(size_t)i * n + i] = 0.0;
    for (const Bond *b : mol.bonds()) {
        unsigned i = b->getBeginAtomIdx(), j = b->getEndAtomIdx();
        double c = b->getIsAromatic() ? 2. / 3. : 1. / b->getBondTypeAsDouble();
        d[(size_t)i * n + j] = c;
        d[(size_t)j * n + i] = c;
    }
    for (unsigned k = 0; k < n; k++) {
        const double *dk = &d[(size_t)k * n];
        for (unsigned i = 0; i < n; i++) {
            double *di = &d[(size_t)i * n];
            double dik = di[k];
            if (dik >= FAR)
                continue;   /* every v2 = 1e8 + x > v1: no update (RDKit's too) */
            for (unsigned j = 0; j < n; j++) {
                double v2 = dik + dk[j];
                if (v2 < di[j])
                    di[j] = v2;
            }
        }
    }
}

extern "C" const double *mp_d2_topo_dist(mp_d2_graph_ws *w, const mp_d2_mol *m)
{
    const ROMol &mol = MOL(m);
    neighbours(w, mol);
    topo_dist(w, mol.getNumAtoms());
    return w->dist.data();
}

/* Shannon entropy in bits of the distribution proportional to p[0..n) (the
 * zero entries contribute nothing), as rdkit.ML.InfoTheory's InfoEntropy. */
static double info_entropy(const double *p, size_t n)
{
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += p[i];
    if (total == 0)
        return 0;
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        double q = p[i] / total;
        if (q != 0)
            acc += -q * std::log(q);
    }
    return acc / std::log(2.0);
}

/* ===================================================================== */
/* Chi0, Chi1                                                             */
/* ===================================================================== */

static double chi0(const ROMol &mol)
{
    double s = 0;
    for (const Atom *a : mol.atoms()) {
        unsigned d = a->getDegree();
        if (d)
            s += std::sqrt(1.0 / d);
    }
    return s;
}

static double chi1(const ROMol &mol)
{
    double s = 0;
    for (const Bond *b : mol.bonds()) {
        unsigned c = b->getBeginAtom()->getDegree() * b->getEndAtom()->getDegree();
        if (c)
            s += std::sqrt(1.0 / c);
    }
    return s;
}

/* ===================================================================== */
/* BalabanJ                                                               */
/* ===================================================================== */

/* J = q / (mu + 1) * sum over bonds (i, j) of (s_i s_j)^-1/2, s the row sums
 * of the distance matrix with bond lengths 1 / bond order (aromatic 1/1.5),
 * q bonds, mu = q - n + 1 rings. */
static double balaban_j(mp_d2_graph_ws *w, const ROMol &mol)
{
    unsigned n = mol.getNumAtoms(), q = mol.getNumBonds();
    const double *dm = w->bo_dist.data();
    std::vector<double> &s = w->a;
    s.assign(n, 0.0);
    for (unsigned i = 0; i < n; i++)           /* rows added in order, as numpy's sum */
        for (unsigned j = 0; j < n; j++)
            s[j] += dm[(size_t)i * n + j];
    int mu = (int)q - (int)n + 1;
    if (mu + 1 == 0)
        return 0;
    double sum = 0;
    for (unsigned i = 0; i < n; i++)
        for (int j : w->nbr[i])
            if ((unsigned)j > i)
                sum += 1.0 / std::sqrt(s[i] * s[(unsigned)j]);
    return (double)q / (double)(mu + 1) * sum;
}

/* ===================================================================== */
/* BertzCT                                                                */
/* ===================================================================== */

static double bond_order(const Bond *b)
{
    if (b->getIsAromatic() || b->getBondType() == Bond::AROMATIC)
        return 1.5;
    /* RDKit's Python takes float() of the bond type's enum value */
    return (double)(int)b->getBondType();
}

/*
 * CT = C(eta) + C(E): the first from the "connections" (pairs of adjacent
 * bonds, weighted by the product of their orders, and multiple bonds counted
 * order(order - 1)/2 times), grouped by the symmetry classes of their atoms;
 * the second from the element counts.  C(x) = N log2 N - sum n_i log2 n_i,
 * written as N (H + log2 N) with H the entropy of the class sizes.  Atoms are
 * in one symmetry class when their sorted rows of the bond-order-weighted
 * distance matrix (BalabanJ's) agree on the first 100 entries printed with
 * four decimals, as RDKit compares them.
 */
static long long four_decimals(double x)
{
    double q = x * 1e4, r = std::nearbyint(q);
    if (std::fabs(std::fabs(q - r) - 0.5) > 1e-6)
        return (long long)r;
    char buf[64];   /* near a tie: let printf's exact rounding decide */
    std::snprintf(buf, sizeof buf, "%.4f", x);
    char *dot = std::strchr(buf, '.');
    if (dot)
        std::memmove(dot, dot + 1, std::strlen(dot));
    return std::atoll(buf);
}

static double bertz_ct(mp_d2_graph_ws *w, const ROMol &mol)
{
    unsigned n = mol.getNumAtoms();
    if (n < 2)
        return 0;
    const double *dm = w->bo_dist.data();
    /* symmetry classes, numbered by first appearance */
    std::vector<std::vector<long long>> keys;
    std::vector<int> cls(n);
    std::vector<long long> row;
    const unsigned cutoff = 100;
    for (unsigned i = 0; i < n; i++) {
        row.resize(n);
        for (unsigned j = 0; j < n; j++)
            row[j] = four_decimals(dm[(size_t)i * n + j]);
        std::sort(row.begin(), row.end());
        if (row.size() > cutoff)
            row.resize(cutoff);
        size_t k = 0;
        while (k < keys.size() && keys[k] != row)
            k++;
        if (k == keys.size())
            keys.push_back(row);
        cls[i] = (int)k + 1;
    }
    /* bond orders by atom pair */
    std::map<std::pair<int, int>, double> order;
    for (const Bond *b : mol.bonds()) {
        int u = (int)b->getBeginAtomIdx(), v = (int)b->getEndAtomIdx();
        order[{ std::min(u, v), std::max(u, v) }] = bond_order(b);
    }
    auto bo = [&](int u, int v) { return order[{ std::min(u, v), std::max(u, v) }]; };
    /* connections: keys (a, b) for multiple bonds, (a, hinge, b) for pairs;
     * kept in first-insertion order as Python's dict */
    std::map<std::array<int, 3>, size_t> where;
    std::vector<double> conn;
    auto add = [&](std::array<int, 3> key, double x) {
        auto it = where.find(key);
        if (it == where.end()) {
            where.emplace(key, conn.size());
            conn.push_back(x);
        } else {
            conn[it->second] += x;
        }
    };
    std::map<int, double> types;   /* element -> count */
    std::vector<int> type_order;
    for (unsigned a = 0; a < n; a++) {
        int z = mol.getAtomWithIdx(a)->getAtomicNum();
        if (types.find(z) == types.end())
            type_order.push_back(z);
        types[z] += 1;
        int hinge = cls[a];
        const auto &nb = w->nbr[a];
        for (size_t i = 0; i < nb.size(); i++) {
            int ni = nb[i], ci = cls[(unsigned)ni];
            double oi = bo((int)a, ni);
            if (oi > 1 && (unsigned)ni > a)
                add({ std::min(hinge, ci), std::max(hinge, ci), -1 }, oi * (oi - 1) / 2);
            for (size_t j = i + 1; j < nb.size(); j++) {
                int nj = nb[j], cj = cls[(unsigned)nj];
                add({ std::min(ci, cj), hinge, std::max(ci, cj) }, oi * bo((int)a, nj));
            }
        }
    }
    if (conn.empty())
        conn.push_back(1);
    double tot = 0;
    for (double c : conn)
        tot += c;
    double conn_ie = tot * (info_entropy(conn.data(), conn.size()) + std::log(tot) / std::log(2.0));
    std::vector<double> tc;
    for (int z : type_order)
        tc.push_back(types[z]);
    double type_ie = n * info_entropy(tc.data(), tc.size());
    return type_ie + conn_ie;
}

/* ===================================================================== */
/* Ipc                                                                    */
/* ===================================================================== */

/* numpy's pairwise summation of n values at stride s (what numpy.trace
 * does): the recurrence below amplifies the last bit of a trace, so the
 * order of this sum decides the leading digits of Ipc on large molecules. */
static double pairwise_sum(const double *a, size_t n, size_t s)
{
    if (n < 8) {
        double r = 0.;
        for (size_t i = 0; i < n; i++)
            r += a[i * s];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[(size_t)j * s];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[(i + (size_t)j) * s];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i * s];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2, s) + pairwise_sum(a + n2 * s, n - n2, s);
}

/*
 * Coefficients of the characteristic polynomial of the adjacency matrix A by
 * the Le Verrier-Faddeev-Frame recurrence: A_1 = A, c_k = tr(A_k) / k,
 * A_{k+1} = A (A_k - c_k I); Ipc = (sum |c|) * H(|c|) with c_0 = 1.  The
 * products use A's sparsity (rows of A_{k+1} are sums of rows of B over
 * neighbours, in ascending order, as a dense product adds them).  The
 * recurrence is unstable: on molecules of 100 atoms and more the last bits of
 * a trace move the result by a factor, so the traces are summed in numpy's
 * order (RDKit computes this in numpy); values reach 1e40.
 */
static double ipc(mp_d2_graph_ws *w, const ROMol &mol)
{
    unsigned n = mol.getNumAtoms();
    std::vector<double> &an = w->a, &bn = w->b, &c = w->cpoly;
    an.assign((size_t)n * n, 0.0);
    for (unsigned i = 0; i < n; i++)
        for (int j : w->nbr[i])
            an[(size_t)i * n + (unsigned)j] = 1.0;
    c.assign(n + 1, 0.0);
    c[0] = 1.0;
    for (unsigned k = 1; k <= n; k++) {
        double tr = pairwise_sum(an.data(), n, (size_t)n + 1);
        c[k] = 1.0 / k * tr;
        if (k == n)
            break;
        for (unsigned i = 0; i < n; i++)
            an[(size_t)i * n + i] -= c[k];
        bn.assign((size_t)n * n, 0.0);
        for (unsigned i = 0; i < n; i++) {
            double *out = &bn[(size_t)i * n];
            for (int j : w->nbr[i]) {
                const double *src = &an[(size_t)(unsigned)j * n];
                for (unsigned t = 0; t < n; t++)
                    out[t] += src[t];
            }
        }
        an.swap(bn);
    }
    double sum = 0;
    for (unsigned k = 0; k <= n; k++) {
        c[k] = std::fabs(c[k]);
        sum += c[k];
    }
    return sum * info_entropy(c.data(), c.size());
}

extern "C" void mp_d2_graph(mp_d2_graph_ws *w, const mp_d2_mol *m, double *v)
{
    const ROMol &mol = MOL(m);
    neighbours(w, mol);
    topo_dist(w, mol.getNumAtoms());
    bo_dist(w, mol);
    v[D_Chi0] = chi0(mol);
    v[D_Chi1] = chi1(mol);
    v[D_BalabanJ] = balaban_j(w, mol);
    v[D_BertzCT] = bertz_ct(w, mol);
    v[D_Ipc] = ipc(w, mol);
}

/* ===================================================================== */
/* EState                                                                 */
/* ===================================================================== */

static int principal_quantum_number(int z)
{
    return z <= 2 ? 1 : z <= 10 ? 2 : z <= 18 ? 3 : z <= 36 ? 4 : z <= 54 ? 5 : z <= 86 ? 6 : 7;
}

/* RDKit's bin boundaries (rdkit/Chem/EState/EState_VSA.py, chosen on PP3K). */
static const double vsa_bins[] = { 4.78, 5.00, 5.410, 5.740, 6.00, 6.07, 6.45, 7.00, 11.0 };
static const double estate_bins[] = { -0.390, 0.290, 0.717, 1.165, 1.540,
                                      1.807,  2.05,  4.69,  9.17,  15.0 };

/* bisect.bisect_right: how many boundaries are <= x. */
static int bin_of(const double *bins, int nb, double x)
{
    int k = 0;
    while (k < nb && bins[k] <= x)
        k++;
    return k;
}

/* Needs the topological distances (mp_d2_graph ran first on this molecule). */
extern "C" void mp_d2_estate(mp_d2_graph_ws *w, const mp_d2_mol *m, const double *vsa, double *v)
{
    const ROMol &mol = MOL(m);
    unsigned n = mol.getNumAtoms();
    const RDKit::PeriodicTable *pt = RDKit::PeriodicTable::getTable();
    std::vector<double> &is = w->is, &es = w->estate;
    is.assign(n, 0.0);
    for (unsigned i = 0; i < n; i++) {
        const Atom *a = mol.getAtomWithIdx(i);
        unsigned d = a->getDegree();
        if (d > 0) {
            int z = a->getAtomicNum();
            double dv = pt->getNouterElecs(z) - (double)a->getTotalNumHs();
            int N = principal_quantum_number(z);
            is[i] = (4.0 / (N * N) * dv + 1) / d;
        }
    }
    /* the perturbation: sum over pairs of (I_i - I_j) / (d_ij + 1)^2 */
    es.assign(n, 0.0);
    const double *dm = w->dist.data();
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = i + 1; j < n; j++) {
            double p = dm[(size_t)i * n + j] + 1;
            if (p < 1e6) {
                double t = (is[i] - is[j]) / (p * p);
                es[i] += t;
                es[j] -= t;
            }
        }
    for (unsigned i = 0; i < n; i++)
        es[i] += is[i];

    double mx = es[0], mn = es[0], amx = std::fabs(es[0]), amn = std::fabs(es[0]);
    for (unsigned i = 1; i < n; i++) {
        mx = std::max(mx, es[i]);
        mn = std::min(mn, es[i]);
        amx = std::max(amx, std::fabs(es[i]));
        amn = std::min(amn, std::fabs(es[i]));
    }
    v[D_MaxEStateIndex] = mx;
    v[D_MinEStateIndex] = mn;
    v[D_MaxAbsEStateIndex] = amx;
    v[D_MinAbsEStateIndex] = amn;

    /* EState_VSA k: Labute area of the atoms whose EState falls in bin k;
     * VSA_EState k: EState sum of the atoms whose area falls in bin k.  The
     * names sort as strings (1, 10, 11, 2, ...), so the slots are looked up. */
    static const int esvsa[11] = { D_EState_VSA1, D_EState_VSA2, D_EState_VSA3, D_EState_VSA4,
                                   D_EState_VSA5, D_EState_VSA6, D_EState_VSA7, D_EState_VSA8,
                                   D_EState_VSA9, D_EState_VSA10, D_EState_VSA11 };
    static const int vsaes[10] = { D_VSA_EState1, D_VSA_EState2, D_VSA_EState3, D_VSA_EState4,
                                   D_VSA_EState5, D_VSA_EState6, D_VSA_EState7, D_VSA_EState8,
                                   D_VSA_EState9, D_VSA_EState10 };
    double a1[11] = { 0 }, a2[10] = { 0 };
    for (unsigned i = 0; i < n; i++) {
        a1[bin_of(estate_bins, 10, es[i])] += vsa[i];
        a2[bin_of(vsa_bins, 9, vsa[i])] += es[i];
    }
    for (int k = 0; k < 11; k++)
        v[esvsa[k]] = a1[k];
    for (int k = 0; k < 10; k++)
        v[vsaes[k]] = a2[k];
}
