"""desc_rate_descriptastorus.py - descriptastorus' rate on the same molecules,
the way Chemprop v1.6.1 computes rdkit_2d / rdkit_2d_normalized: make_mol
(parse, clear atom maps), MolToSmiles(isomericSmiles=True), then the
generator's process(smiles) (which parses again), one molecule at a time in
one process.  bench/descriptors.sh runs it beside build/bench/desc_rate.

    python desc_rate_descriptastorus.py FILE.csv[.gz] [--stride K] [--max N] [--normalized]

Needs rdkit, descriptastorus (and its numpy/scipy/pandas-flavor) installed.
Prints the same fields as desc_rate: process CPU seconds (time.process_time)
are the per-core figure on a shared machine.
"""
import csv
import gzip
import sys
import time

from rdkit import Chem, RDLogger
from descriptastorus.descriptors import rdDescriptors, rdNormalizedDescriptors

RDLogger.DisableLog("rdApp.*")


def main():
    path = sys.argv[1]
    args = sys.argv[2:]
    max_n = int(args[args.index("--max") + 1]) if "--max" in args else 0
    stride = int(args[args.index("--stride") + 1]) if "--stride" in args else 1
    normalized = "--normalized" in args
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [r[0] for r in csv.reader(f)][1:][::max(stride, 1)]
    if max_n > 0:
        rows = rows[:max_n]
    gen = rdNormalizedDescriptors.RDKit2DNormalized() if normalized else rdDescriptors.RDKit2D()
    c0, t0 = time.process_time(), time.time()
    valid = 0
    for s in rows:
        mol = Chem.MolFromSmiles(s)
        if mol is None:
            continue
        for atom in mol.GetAtoms():
            atom.SetAtomMapNum(0)
        features = gen.process(Chem.MolToSmiles(mol, isomericSmiles=True))
        valid += features is not None
    cpu, wall = time.process_time() - c0, time.time() - t0
    sets = "rdkit2d-normalized" if normalized else "rdkit2d"
    print(f"desc_rate tool=descriptastorus file={path} sets={sets} threads=1 "
          f"molecules={len(rows)} valid={valid} wall_s={wall:.3f} cpu_s={cpu:.3f} "
          f"molecules_per_s={len(rows) / wall:.1f} molecules_per_cpu_s={len(rows) / cpu:.1f}")


if __name__ == "__main__":
    main()
