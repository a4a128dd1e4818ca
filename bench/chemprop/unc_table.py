#!/usr/bin/env python3
"""bench/chemprop/unc_table.py - molprop's uncertainty metrics beside Chemprop
v2.3.1's on the same splits, as markdown (bench/RESULTS.md, "The heads").

    python3 bench/chemprop/unc_table.py OUT DATASET SEEDS [CHEMPROP_TSV]

OUT holds unc.tsv and molprop_conformal.tsv (bench/unc_bench.sh) and
chemprop_v2.tsv (bench/chemprop/unc_v2.sh; CHEMPROP_TSV: another file of
its rows).  SEEDS: one seed ("1") prints
that seed's values; several ("0,1,2") the mean over them of each cell, and
only where both tools have every one of those seeds (else "missing").
Numbers as they are in the files, to 3 significant digits; nothing else.
"""
import csv
import sys

ROWS = ["ensemble", "ensemble+zscaling", "dropout", "dropout+zscaling", "mve",
        "mve+zscaling", "evidential", "evidential+zscaling", "evidential-epistemic",
        "evidential-aleatoric"]
# (molprop metric, Chemprop metric)
METRICS = [("nll", "nll-regression"), ("miscalibration-area", "miscalibration_area"),
           ("ence", "ence"), ("spearman", "spearman")]


FIELDS = ["dataset", "seed", "method", "metric", "value"]


def read(path):
    # with or without the header line (molprop_conformal.tsv has none)
    with open(path) as f:
        rows = list(csv.DictReader(f, fieldnames=FIELDS, delimiter="\t"))
    return [r for r in rows if r["dataset"] != "dataset"]


def chemprop_method(m):
    # Chemprop's name of molprop's total evidential uncertainty
    return m.replace("evidential", "evidential-total", 1) if m.startswith("evidential") and \
        not m.startswith(("evidential-epistemic", "evidential-aleatoric")) else m


def main():
    out, ds, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    mp, cp = {}, {}
    for r in read(f"{out}/unc.tsv"):
        if r["dataset"] == ds:
            mp[(r["seed"], r["method"], r["metric"])] = float(r["value"])
    for r in read(f"{out}/molprop_conformal.tsv"):
        if r["dataset"] == ds:
            mp[(r["seed"], r["method"], "conformal")] = float(r["value"])
    cp_tsv = sys.argv[4] if len(sys.argv) > 4 else f"{out}/chemprop_v2.tsv"
    for r in read(cp_tsv):
        if r["dataset"] != ds or r["metric"] == "error":
            continue
        metric = "conformal" if r["metric"] == "conformal-coverage-regression" else r["metric"]
        cp[(r["seed"], r["method"], metric)] = float(r["value"])

    def cell(table, method, metric):
        vals = [table.get((s, method, metric)) for s in seeds]
        if any(v is None for v in vals):
            return None
        return sum(vals) / len(vals)

    def fmt(v):
        return "–" if v is None else f"{v:.3g}"

    print("| method | nll (molprop / Chemprop) | miscalibration area | ence | spearman | "
          "conformal coverage (alpha 0.1) |")
    print("|---|---|---|---|---|---|")
    for m in ROWS:
        cm = chemprop_method(m)
        cells = []
        for mk, ck in METRICS:
            a, b = cell(mp, m, mk), cell(cp, cm, ck)
            cells.append("missing" if a is None and b is None else f"{fmt(a)} / {fmt(b)}")
        if "+" in m:
            cells.append("")
        else:
            a, b = cell(mp, m + "+conformal", "conformal"), cell(cp, cm + "+conformal", "conformal")
            cells.append(f"{fmt(a)} / {fmt(b)}")
        print(f"| {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
