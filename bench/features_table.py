#!/usr/bin/env python3
"""features_table.py - the molecule-features table of bench/RESULTS.md:
molprop's runs (bench/features_vs_chemprop.sh's TSV) beside Chemprop v1.6.1's
(the bench runner's chemprop_v1.tsv: tool dataset model seed split
split_checksum ... test ...), per dataset and model: the seeds' test scores,
their mean, Chemprop's mean on the same splits, the bar (Chemprop's mean +5%
for RMSE, -0.02 for AUC) and the verdict.

    python3 bench/features_table.py MOLPROP.tsv CHEMPROP.tsv > table.md

A molprop variant ending in -scaled is compared with Chemprop's row of the
same name without it (Chemprop's configuration: features scaled)."""
import csv
import statistics
import sys

DATASETS = ["esol", "freesolv", "bace", "bbbp", "clintox"]
MODELS = ["ffn-morgan", "ffn-morgan-scaled", "ffn-morgan-count", "ffn-morgan-count-scaled",
          "ffn-rdkit2d", "dmpnn-rdkit2d"]
SEEDS = ["0", "1", "2"]


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def main():
    mine, theirs = rows(sys.argv[1]), rows(sys.argv[2])
    m = {(r["dataset"], r["model"], r["seed"]): r for r in mine}
    c = {(r["dataset"], r["model"], r["seed"]): r for r in theirs if r["tool"] == "chemprop"}
    print("| dataset | model | metric | molprop seeds 0, 1, 2 | mean | Chemprop seeds 0, 1, 2 "
          "| mean | bar | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ds in DATASETS:
        for model in MODELS:
            cp_model = model[:-len("-scaled")] if model.endswith("-scaled") else model
            ours = [m.get((ds, model, s)) for s in SEEDS]
            if not all(ours):
                continue
            metric = ours[0]["metric"]
            vals = [float(r["test"]) for r in ours]
            mean = statistics.mean(vals)
            cps = [c.get((ds, cp_model, s)) for s in SEEDS]
            same = all(r["same_split"] in ("same", "-") for r in ours)
            for r, cp in zip(ours, cps):
                if cp and cp["split_checksum"] != r["split_checksum"]:
                    same = False
            note = "" if same else " (splits differ!)"
            if all(cps):
                cv = [float(r["test"]) for r in cps]
                cmean = statistics.mean(cv)
                if metric == "rmse":
                    bar = cmean * 1.05
                    ok = mean <= bar
                    rel = "%+.1f%%" % (100 * (mean / cmean - 1))
                else:
                    bar = cmean - 0.02
                    ok = mean >= bar
                    rel = "%+.3f" % (mean - cmean)
                barcol = barcol_fmt(metric, bar)
                cps_s = ", ".join("%.3f" % x for x in cv)
                verdict = ("pass" if ok else "FAIL") + " (" + rel + ")" + note
                cm = "%.3f" % cmean
            else:
                cps_s, cm, barcol, verdict = "not run yet", "-", "-", "-" + note
            print("| %s | %s | %s | %s | %.3f | %s | %s | %s | %s |" % (
                ds, model, metric.upper() if metric == "rmse" else "ROC-AUC",
                ", ".join("%.3f" % x for x in vals), mean, cps_s, cm, barcol, verdict))


def barcol_fmt(metric, bar):
    return ("≤ %.3f" if metric == "rmse" else "≥ %.3f") % bar


if __name__ == "__main__":
    main()
