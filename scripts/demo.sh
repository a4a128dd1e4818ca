#!/bin/sh
# demo.sh - the README's main job: fetch ESOL and featurize it, printing a
# summary.  (Later: train a D-MPNN on it and print the test RMSE.)
set -e
cd "$(dirname "$0")/.."
BIN=${MOLPROP_BIN:-build/molprop}
$BIN data fetch esol
OUT=${TMPDIR:-/tmp}/molprop-demo
mkdir -p "$OUT"
$BIN featurize --data data/esol.csv.gz --out "$OUT/esol.mpf"
