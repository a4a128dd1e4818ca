#!/bin/sh
# demo.sh - the README's main job: fetch ESOL, featurize it (printing a
# summary), train Chemprop's default D-MPNN on a scaffold split and print the
# test RMSE, then predict with the saved model.
set -e
cd "$(dirname "$0")/.."
BIN=${MOLPROP_BIN:-build/molprop}
OUT=${MOLPROP_DEMO_DIR:-${TMPDIR:-/tmp}/molprop-demo}
mkdir -p "$OUT"
$BIN data fetch esol
$BIN featurize --data data/esol.csv.gz --out "$OUT/esol.mpf"
$BIN train --data data/esol.csv.gz --split scaffold_balanced --seed 0 --save-dir "$OUT/esol"
$BIN predict --model "$OUT/esol/model.mpm" --data data/esol.csv.gz --out "$OUT/esol_pred.csv"
echo "demo: model, metrics and predictions are in $OUT"
