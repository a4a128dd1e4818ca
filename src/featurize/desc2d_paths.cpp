/*
 * desc2d_paths.cpp - the path-based connectivity descriptors Chi2n-Chi4n,
 * Chi2v-Chi4v, Kappa2 and Kappa3 (Kier & Hall, Rev. Comp. Chem. 2, 367-422
 * (1991)), from one enumeration of the molecule's paths.
 *
 * RDKit computes each of the eight with its own call of
 * findAllPathsOfLengthN, which enumerates every path again and removes
 * duplicates by a quadratic search: together they were a fifth of the
 * descriptor time.  This file enumerates the paths of up to five atoms once
 * and keeps the conventions of RDKit's path finder, so that the sums are the
 * same (tests/test_descriptors.c compares every value with RDKit's own
 * calcChi* / calcKappa* on the fixture molecules):
 *
 *   - a path of L atoms never repeats an atom, except that its last step
 *     may close a ring onto any earlier atom but the one before last (RDKit
 *     allows ring closures at the final step only);
 *   - bonds to hydrogen atoms are not followed;
 *   - paths with the same set of bonds count once;
 *   - ChiN sums, over the paths of N+1 atoms, the product of the atoms'
 *     1/sqrt(delta) (0 where delta is 0), the last atom left out when the
 *     path closes onto its first (RDKit's github #463 rule); delta is
 *     Z_v - H for Chi*n, and Hall-Kier's (Z_v - H) / (Z - Z_v - 1) beyond
 *     neon for Chi*v;
 *   - KappaK uses the number of paths of K bonds, the heavy-atom count and
 *     RDKit's HallKierAlpha in Hall & Kier's formulas.
 *
 * A path's product does not depend on which of its traversals is kept, so
 * only the order of the sums differs from RDKit (the last bits).
 */
#include "featurize/desc2d.h"

#include <RDGeneral/RDConfig.h>   /* first: the library's layout switches */
#include <GraphMol/Descriptors/ConnectivityDescriptors.h>
#include <GraphMol/GraphMol.h>
#include <GraphMol/PeriodicTable.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

using RDKit::Atom;
using RDKit::Bond;
using RDKit::ROMol;

namespace {

/* An open-addressing set of bond sets (at most 4 bond indices < 2^16,
 * sorted and packed into 64 bits; 0 is never a key since a set holds at
 * least two different bonds). */
struct bondset_table {
    std::vector<std::uint64_t> slot;
    size_t used = 0;
    void clear(size_t expect)
    {
        size_t cap = 64;
        while (cap < 2 * expect + 16)
            cap *= 2;
        slot.assign(cap, 0);
        used = 0;
    }
    /* true when key was new */
    bool insert(std::uint64_t key)
    {
        if (2 * (used + 1) > slot.size()) {
            std::vector<std::uint64_t> old;
            old.swap(slot);
            clear(old.size());
            for (std::uint64_t k : old)
                if (k)
                    insert(k);
        }
        size_t mask = slot.size() - 1, h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & mask;
        while (slot[h]) {
            if (slot[h] == key)
                return false;
            h = (h + 1) & mask;
        }
        slot[h] = key;
        used++;
        return true;
    }
};

struct walker {
    const ROMol *mol;
    std::vector<std::vector<std::pair<int, int>>> nbr;   /* (atom, bond), ascending atoms */
    std::vector<double> dn, dv;                          /* 1/sqrt(delta) per atom        */
    std::vector<char> on_path;
    int path[5], bonds[5];
    bondset_table seen[6];    /* by path length in atoms: 3, 4, 5 used */
    double chi_n[6], chi_v[6];
    long n_paths[6];
    bool big = false;         /* a bond index beyond 16 bits: no packing */
};

std::uint64_t pack(const int *b, int k)
{
    int s[4];
    for (int i = 0; i < k; i++)
        s[i] = b[i];
    for (int i = 1; i < k; i++)   /* insertion sort of at most 4 */
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            int t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    std::uint64_t key = 0;
    for (int i = 0; i < k; i++)
        key = key << 16 | (std::uint64_t)(s[i] + 1);
    return key;
}

/* A path of L atoms: path[0..L-1] (closed when path[L-1] is an earlier atom),
 * bonds[0..L-2]. */
void record(walker &w, int L)
{
    if (L < 3)
        return;
    if (!w.seen[L].insert(pack(w.bonds, L - 1)))
        return;
    int n = L - 1;
    double pn = 1, pv = 1;
    for (int i = 0; i < n; i++) {
        pn *= w.dn[(size_t)w.path[i]];
        pv *= w.dv[(size_t)w.path[i]];
    }
    if (w.path[n] != w.path[0]) {
        pn *= w.dn[(size_t)w.path[n]];
        pv *= w.dv[(size_t)w.path[n]];
    }
    w.chi_n[L] += pn;
    w.chi_v[L] += pv;
    w.n_paths[L]++;
}

/* Extends the simple path of s atoms (its last atom path[s-1]). */
void extend(walker &w, int s)
{
    int e = w.path[s - 1];
    for (const auto &nb : w.nbr[(size_t)e]) {
        int o = nb.first;
        w.path[s] = o;
        w.bonds[s - 1] = nb.second;
        if (!w.on_path[(size_t)o]) {
            record(w, s + 1);
            if (s + 1 < 5) {
                w.on_path[(size_t)o] = 1;
                extend(w, s + 1);
                w.on_path[(size_t)o] = 0;
            }
        } else if (s >= 2 && o != w.path[s - 2]) {
            record(w, s + 1);   /* a ring closure: the path ends here */
        }
    }
}

} // namespace

extern "C" void mp_d2_paths_rdkit(const mp_d2_mol *m, double *v)
{
    const ROMol &mol = *reinterpret_cast<const ROMol *>(m);
    namespace D = RDKit::Descriptors;
    v[D_Chi2n] = D::calcChi2n(mol);
    v[D_Chi3n] = D::calcChi3n(mol);
    v[D_Chi4n] = D::calcChi4n(mol);
    v[D_Chi2v] = D::calcChi2v(mol);
    v[D_Chi3v] = D::calcChi3v(mol);
    v[D_Chi4v] = D::calcChi4v(mol);
    v[D_Kappa2] = D::calcKappa2(mol);
    v[D_Kappa3] = D::calcKappa3(mol);
}

extern "C" void mp_d2_paths(const mp_d2_mol *m, double *v)
{
    const ROMol &mol = *reinterpret_cast<const ROMol *>(m);
    static thread_local walker w;
    const RDKit::PeriodicTable *pt = RDKit::PeriodicTable::getTable();
    unsigned na = mol.getNumAtoms();
    w.mol = &mol;
    w.nbr.resize(na);
    w.dn.assign(na, 0.0);
    w.dv.assign(na, 0.0);
    w.on_path.assign(na, 0);
    for (unsigned i = 0; i < na; i++) {
        w.nbr[i].clear();
        const Atom *a = mol.getAtomWithIdx(i);
        int z = a->getAtomicNum();
        double h = (double)a->getTotalNumHs();
        int outer = pt->getNouterElecs(z);
        double n = outer - h;
        w.dn[i] = n != 0.0 ? 1. / std::sqrt(n) : 0.0;
        double d = z <= 1 ? 0.0 : z <= 10 ? outer - h : double(outer - h) / (z - outer - 1);
        w.dv[i] = d != 0.0 ? 1. / std::sqrt(d) : 0.0;
    }
    w.big = mol.getNumBonds() >= 65535;
    for (const Bond *b : mol.bonds()) {
        const Atom *x = b->getBeginAtom(), *y = b->getEndAtom();
        if (x->getAtomicNum() == 1 || y->getAtomicNum() == 1)
            continue;   /* RDKit's path finder skips hydrogens */
        w.nbr[x->getIdx()].emplace_back((int)y->getIdx(), (int)b->getIdx());
        w.nbr[y->getIdx()].emplace_back((int)x->getIdx(), (int)b->getIdx());
    }
    for (unsigned i = 0; i < na; i++)
        std::sort(w.nbr[i].begin(), w.nbr[i].end());
    for (int L = 3; L <= 5; L++) {
        w.seen[L].clear(4 * na);
        w.chi_n[L] = w.chi_v[L] = 0;
        w.n_paths[L] = 0;
    }
    if (w.big) {   /* beyond the packing: RDKit's own functions */
        mp_d2_paths_rdkit(m, v);
        return;
    }
    for (unsigned i = 0; i < na; i++) {
        w.path[0] = (int)i;
        w.on_path[i] = 1;
        extend(w, 1);
        w.on_path[i] = 0;
    }
    v[D_Chi2n] = w.chi_n[3];
    v[D_Chi3n] = w.chi_n[4];
    v[D_Chi4n] = w.chi_n[5];
    v[D_Chi2v] = w.chi_v[3];
    v[D_Chi3v] = w.chi_v[4];
    v[D_Chi4v] = w.chi_v[5];

    double alpha = RDKit::Descriptors::calcHallKierAlpha(mol);
    double A = mol.getNumHeavyAtoms();
    double p2 = (double)w.n_paths[3], p3 = (double)w.n_paths[4];
    double den2 = (p2 + alpha) * (p2 + alpha), den3 = (p3 + alpha) * (p3 + alpha);
    v[D_Kappa2] = den2 ? (A + alpha - 1) * (A + alpha - 2) * (A + alpha - 2) / den2 : 0.0;
    int ai = (int)mol.getNumHeavyAtoms();
    v[D_Kappa3] = !den3 ? 0.0
                  : (ai % 2) ? (ai + alpha - 1) * (ai + alpha - 3) * (ai + alpha - 3) / den3
                             : (ai + alpha - 2) * (ai + alpha - 3) * (ai + alpha - 3) / den3;
}
