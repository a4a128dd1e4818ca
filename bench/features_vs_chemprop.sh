#!/bin/sh
# features_vs_chemprop.sh - molprop's side of the molecule-features table
# (bench/RESULTS.md, "Molecule features against Chemprop v1.6.1"): the FFN
# baselines and the D-MPNN with rdkit2d-normalized, scaffold_balanced seeds,
# on the CPU, one TSV row per run with the split's checksum.
#   bench/features_vs_chemprop.sh OUT.tsv [SPLITS_DIR]
# DATASETS, MODELS, SEEDS (space-separated) and MOLPROP_BIN override the
# defaults; MOLPROP_DATA_MIRROR is where the dataset files are.  With
# SPLITS_DIR (the splits Chemprop was run on: DIR/<dataset>/seed<S>/split.tsv,
# rows 0-based as molprop writes them) each run's split is compared with it
# and the row says same/differs.  bench/features_table.py turns the TSV and
# Chemprop's rows into the table.
set -eu
out=$1
splits=${2:-}
bin=${MOLPROP_BIN:-build/molprop}
data=${MOLPROP_DATA_MIRROR:-../shared/datasets}
datasets=${DATASETS:-esol freesolv bace bbbp clintox}
models=${MODELS:-ffn-morgan ffn-morgan-scaled ffn-morgan-count ffn-morgan-count-scaled ffn-rdkit2d dmpnn-rdkit2d}
seeds=${SEEDS:-0 1 2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags() {
    case $1 in
    ffn-morgan)        echo "--model ffn --features morgan" ;;            # auto: bits unscaled
    ffn-morgan-scaled) echo "--model ffn --features morgan --features-scaling on" ;;  # Chemprop's
    ffn-morgan-count)  echo "--model ffn --features morgan-count" ;;      # auto: unscaled
    ffn-morgan-count-scaled) echo "--model ffn --features morgan-count --features-scaling on" ;;
    ffn-rdkit2d)       echo "--model ffn --features rdkit2d-normalized" ;; # auto: unscaled
    dmpnn-rdkit2d)     echo "--features rdkit2d-normalized" ;;
    *) echo "unknown model $1" >&2; exit 1 ;;
    esac
}
[ -f "$out" ] || printf 'tool\tdataset\tmodel\tseed\tsplit_checksum\tsame_split\tmetric\ttest\tval\tseconds\n' > "$out"
for ds in $datasets; do
    for model in $models; do
        for seed in $seeds; do
            if awk -F'\t' -v d="$ds" -v m="$model" -v s="$seed" \
                '$2==d && $3==m && $4==s {f=1} END {exit !f}' "$out"; then
                continue
            fi
            dir="$tmp/$ds-$model-$seed"
            t0=$(date +%s.%N)
            # shellcheck disable=SC2046
            "$bin" train --quiet --data "$data/$ds.csv.gz" --split scaffold_balanced \
                --seed "$seed" --save-dir "$dir" $(flags "$model") > "$dir.log" 2>&1 ||
                { echo "$ds $model $seed FAILED"; cat "$dir.log"; continue; }
            t1=$(date +%s.%N)
            ck=$(sha256sum "$dir/split.tsv" | cut -c1-16)
            same=-
            if [ -n "$splits" ] && [ -f "$splits/$ds/seed$seed/split.tsv" ]; then
                if cmp -s "$dir/split.tsv" "$splits/$ds/seed$seed/split.tsv"; then same=same
                else same=differs; fi
            fi
            python3 - "$dir/metrics.json" "$ds" "$model" "$seed" "$ck" "$same" \
                "$(echo "$t1 - $t0" | bc)" >> "$out" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
metric = m["metric_names"][0]
print("\t".join(["molprop"] + sys.argv[2:7] + [metric, "%.6g" % m["test"][metric]["mean"],
                 "%.6g" % m["val"][metric]["mean"], "%.1f" % float(sys.argv[7])]))
PY
            tail -1 "$out"
        done
    done
done
