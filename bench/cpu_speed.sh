#!/bin/sh
# cpu_speed.sh - the CPU speed figures of the training issue, on this machine:
#   1. ESOL, D-MPNN defaults, 30 epochs: wall time of the whole `molprop train`
#      (featurization included) and training molecules/s, median of 3 runs;
#   2. prediction on hiv (41,127 molecules): molecules/s and peak memory;
#   3. peak memory of training on hiv (one epoch; memory does not grow with
#      epochs).
# Uses /usr/bin/time for wall time and peak RSS.  Run on a quiet machine.
#   bench/cpu_speed.sh [THREADS]
set -e
cd "$(dirname "$0")/.."
BIN=${MOLPROP_BIN:-build/molprop}
T=${1:-2}
OUT=${TMPDIR:-/tmp}/molprop-cpu-speed
mkdir -p "$OUT"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $T; $(date -u +%Y-%m-%d)"
for i in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$OUT/time$i" $BIN train --data data/esol.csv.gz --threads $T \
        --quiet --save-dir "$OUT/esol$i" > "$OUT/train$i.log"
    wall=$(cut -d' ' -f1 "$OUT/time$i")
    mps=$(sed -n 's/.*train_molecules_per_second":[[:space:]]*\([0-9.]*\).*/\1/p' "$OUT/esol$i/metrics.json")
    fs=$(sed -n 's/.*featurize_seconds":[[:space:]]*\([0-9.]*\).*/\1/p' "$OUT/esol$i/metrics.json")
    ts=$(sed -n 's/.*"train_seconds":[[:space:]]*\([0-9.]*\).*/\1/p' "$OUT/esol$i/metrics.json")
    echo "esol train run $i: wall $wall s (featurize $fs s, train $ts s, $mps training molecules/s)"
done
for i in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$OUT/ptime$i" $BIN predict --model "$OUT/esol1/model.mpm" \
        --data data/hiv.csv.gz --out "$OUT/hiv_pred.csv" --threads $T 2> "$OUT/predict$i.log"
    set -- $(cat "$OUT/ptime$i")
    echo "hiv predict run $i: wall $1 s, $(awk -v w=$1 'BEGIN{printf "%.0f", 41127/w}') molecules/s end to end, peak RSS $(($2/1024)) MB"
done
/usr/bin/time -f "%e %M" -o "$OUT/htime" $BIN train --data data/hiv.csv.gz --epochs 1 --threads $T \
    --quiet --save-dir "$OUT/hiv" > /dev/null
set -- $(cat "$OUT/htime")
echo "hiv train (1 epoch): wall $1 s, peak RSS $(($2/1024)) MB"
