#!/bin/sh
# demo.sh - the README's main job: fetch ESOL, featurize it (printing a
# summary), train Chemprop's default D-MPNN on a scaffold split and print the
# test RMSE, then predict with the saved model.  The runs read
# configs/esol.ini; the flags here only move the outputs to $OUT.
set -e
cd "$(dirname "$0")/.."
BIN=${MOLPROP_BIN:-build/molprop}
OUT=${MOLPROP_DEMO_DIR:-${TMPDIR:-/tmp}/molprop-demo}
mkdir -p "$OUT"
$BIN data fetch esol
$BIN featurize --data data/esol.csv.gz --out "$OUT/esol.mpf"
$BIN train --config configs/esol.ini --save-dir "$OUT/esol"
$BIN predict --config configs/esol.ini --model "$OUT/esol/model.mpm" --out "$OUT/esol_pred.csv"
echo "demo: model, metrics and predictions are in $OUT"
