#!/bin/sh
# bench/unc_bench.sh - molprop's uncertainty metrics on the scaffold_balanced
# splits (seeds 0-2) of esol and bbbp: a D-MPNN ensemble of 3 trained with
# dropout 0.1, its test set predicted with --uncertainty ensemble and with
# --uncertainty dropout (10 passes at p 0.1), the uncertainty metrics of each
# (eval --uncertainty-metrics), and for the regression set the coverage of
# conformal intervals (alpha 0.1) calibrated on the validation set.
#
#   MOLPROP_BIN=build/molprop sh bench/unc_bench.sh /work/shared/datasets OUT [EPOCHS] [THREADS] [DEVICE] [HIDDEN]
#
# DATASETS="esol" runs one of them.  Writes OUT/unc.tsv (one line per
# dataset, seed, method and metric).  The heads (issue 11): per seed also an
# ensemble of 3 with --task regression-mve and one with regression-evidential
# (esol; predicted with --uncertainty mve, evidential, evidential-epistemic,
# evidential-aleatoric) or classification-dirichlet (bbbp; --uncertainty
# dirichlet), without dropout; HEADS=0 leaves them out.
set -eu
BIN=${MOLPROP_BIN:-build/molprop}
DATA=$1
OUT=$2
EPOCHS=${3:-30}
THREADS=${4:-2}
DEVICE=${5:-cpu}
HIDDEN=${6:-300}
mkdir -p "$OUT"
TSV=$OUT/unc.tsv
printf 'dataset\tseed\tmethod\tmetric\tvalue\n' > "$TSV"
for ds in ${DATASETS:-esol bbbp}; do
  for seed in 0 1 2; do
    d=$OUT/$ds-$seed
    "$BIN" split --data "$DATA/$ds.csv.gz" --split scaffold_balanced --seed $seed --out "$d/sp" > /dev/null
    "$BIN" train --data "$DATA/$ds.csv.gz" --split scaffold_balanced --seed $seed \
      --ensemble-size 3 --dropout 0.1 --epochs "$EPOCHS" --hidden "$HIDDEN" --threads "$THREADS" --device "$DEVICE" \
      --quiet --save-dir "$d/m" > /dev/null
    if [ $ds = esol ]; then metrics=nll,miscalibration-area,ence,spearman; else metrics=nll; fi
    for u in ensemble dropout; do
      "$BIN" predict --model "$d/m/model.mpm" --data "$d/sp/test.csv" --out "$d/$u.csv" \
        --uncertainty $u --threads "$THREADS" --device "$DEVICE" --quiet
      "$BIN" eval --preds "$d/$u.csv" --data "$d/sp/test.csv" --uncertainty-metrics $metrics \
        | awk -v ds=$ds -v s=$seed -v u=$u 'NF == 2 { printf "%s\t%s\t%s\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
      if [ $ds = esol ]; then
        "$BIN" predict --model "$d/m/model.mpm" --data "$d/sp/test.csv" --out "$d/$u-conf.csv" \
          --uncertainty $u --calibrate conformal-adaptive --calibration-data "$d/sp/val.csv" \
          --alpha 0.1 --threads "$THREADS" --device "$DEVICE" --quiet
        "$BIN" eval --preds "$d/$u-conf.csv" --data "$d/sp/test.csv" --uncertainty-metrics coverage \
          | awk -v ds=$ds -v s=$seed -v u=$u 'NF == 2 { printf "%s\t%s\t%s+conformal-adaptive\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
        "$BIN" predict --model "$d/m/model.mpm" --data "$d/sp/test.csv" --out "$d/$u-zs.csv" \
          --uncertainty $u --calibrate zscaling --calibration-data "$d/sp/val.csv" \
          --threads "$THREADS" --device "$DEVICE" --quiet
        "$BIN" eval --preds "$d/$u-zs.csv" --data "$d/sp/test.csv" --uncertainty-metrics $metrics \
          | awk -v ds=$ds -v s=$seed -v u=$u 'NF == 2 { printf "%s\t%s\t%s+zscaling\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
      fi
    done
    if [ "${HEADS:-1}" = 1 ]; then
      if [ $ds = esol ]; then heads="regression-mve:mve regression-evidential:evidential,evidential-epistemic,evidential-aleatoric"
      else heads="classification-dirichlet:dirichlet"; fi
      for h in $heads; do
        task=${h%%:*}
        "$BIN" train --data "$DATA/$ds.csv.gz" --split scaffold_balanced --seed $seed --task $task \
          --ensemble-size 3 --epochs "$EPOCHS" --hidden "$HIDDEN" --threads "$THREADS" --device "$DEVICE" \
          --quiet --save-dir "$d/$task" > /dev/null
        for u in $(echo "${h#*:}" | tr ',' ' '); do
          "$BIN" predict --model "$d/$task/model.mpm" --data "$d/sp/test.csv" --out "$d/$u.csv" \
            --uncertainty $u --threads "$THREADS" --device "$DEVICE" --quiet
          "$BIN" eval --preds "$d/$u.csv" --data "$d/sp/test.csv" --uncertainty-metrics $metrics \
            | awk -v ds=$ds -v s=$seed -v u=$u 'NF == 2 { printf "%s\t%s\t%s\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
          [ $ds = esol ] || continue
          "$BIN" predict --model "$d/$task/model.mpm" --data "$d/sp/test.csv" --out "$d/$u-conf.csv" \
            --uncertainty $u --calibrate conformal-adaptive --calibration-data "$d/sp/val.csv" \
            --alpha 0.1 --threads "$THREADS" --device "$DEVICE" --quiet
          "$BIN" eval --preds "$d/$u-conf.csv" --data "$d/sp/test.csv" --uncertainty-metrics coverage \
            | awk -v ds=$ds -v s=$seed -v u=$u 'NF == 2 { printf "%s\t%s\t%s+conformal-adaptive\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
          "$BIN" predict --model "$d/$task/model.mpm" --data "$d/sp/test.csv" --out "$d/$u-zs.csv" \
            --uncertainty $u --calibrate zscaling --calibration-data "$d/sp/val.csv" \
            --threads "$THREADS" --device "$DEVICE" --quiet
          "$BIN" eval --preds "$d/$u-zs.csv" --data "$d/sp/test.csv" --uncertainty-metrics $metrics \
            | awk -v ds=$ds -v s=$seed -v u=$u 'NF == 2 { printf "%s\t%s\t%s+zscaling\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
        done
      done
    fi
    echo "$ds seed $seed done" >&2
  done
done
