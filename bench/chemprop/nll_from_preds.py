#!/usr/bin/env python3
"""nll_from_preds.py - the NLL of the predicted probability, from the
prediction files Chemprop v2 writes (smiles, <task>, <task>_unc), against the
labels of the test file, row by row:

    python3 bench/chemprop/nll_from_preds.py TEST.csv PREDS.csv [PREDS.csv ...]

Prints "<file>\\t<nll>" per file: mean over labelled molecules of
-log(p y + (1 - p)(1 - y)), p the predicted probability of class 1 (the
<task> column), as molprop's `eval --uncertainty-metrics nll` scores a binary
task.  Chemprop v2.3.1's own `nll-classification` applies the formula to the
<task>_unc column instead (for --uncertainty-method ensemble or dropout that
is the members' variance, not a probability), so its printed figure is not
this one.  Standard library only.
"""
import csv
import math
import sys


def read(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        return head, [row for row in r if row]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    head, test = read(sys.argv[1])
    task = head[1]
    for path in sys.argv[2:]:
        phead, preds = read(path)
        if len(preds) != len(test):
            sys.exit("%s: %d rows, %s has %d" % (path, len(preds), sys.argv[1], len(test)))
        col = phead.index(task)
        total, n = 0.0, 0
        for i, (t, p) in enumerate(zip(test, preds)):
            if t[0] != p[0]:
                sys.exit("%s: row %d is %s, the test file's is %s" % (path, i + 2, p[0], t[0]))
            if t[1] == "":
                continue
            y, q = float(t[1]), float(p[col])
            total += -math.log(q * y + (1 - q) * (1 - y))
            n += 1
        print("%s\t%.6g" % (path, total / n))


if __name__ == "__main__":
    main()
