#!/bin/sh
# accuracy.sh - the CPU accuracy bars of the training issue: Chemprop v1's
# default D-MPNN on scaffold_balanced splits, seeds 0-2, six datasets; prints
# one line per run and the mean test score per dataset beside Chemprop
# v1.6.1's (measured on the same splits on this kind of machine).
#   bench/accuracy.sh [OUTDIR] [extra train options...]
# Runs two trainings at a time, one thread each.  Needs the datasets in data/
# (molprop data fetch esol freesolv lipo bbbp bace clintox).
set -e
cd "$(dirname "$0")/.."
BIN=${MOLPROP_BIN:-build/molprop}
OUT=${1:-/tmp/molprop-accuracy}
[ $# -gt 0 ] && shift
mkdir -p "$OUT"
jobs=""
for ds in esol freesolv lipo bbbp bace clintox; do
    for seed in 0 1 2; do
        echo "$ds $seed"
    done
done | xargs -P 2 -n 2 sh -c '
    '"$BIN"' train --data data/$0.csv.gz --split scaffold_balanced --seed $1 --threads 1 \
        --quiet --save-dir '"$OUT"'/$0-$1 '"$*"' > '"$OUT"'/$0-$1.log 2>&1 || { echo "FAILED $0 $1"; cat '"$OUT"'/$0-$1.log; }'
printf "%-9s %-7s %10s %10s %10s %10s %10s %8s\n" dataset metric seed0 seed1 seed2 mean chemprop ratio
for ds in esol freesolv lipo bbbp bace clintox; do
    case $ds in esol) ref=0.892;; freesolv) ref=2.07;; lipo) ref=0.629;;
                bbbp) ref=0.924;; bace) ref=0.831;; clintox) ref=0.873;; esac
    awk -v ds=$ds -v ref=$ref '
        /^test / { split($0, a, " "); metric = a[2]; v[++n] = a[4] + 0; t += a[4] }
        END { m = t / n;
              printf "%-9s %-7s %10.4f %10.4f %10.4f %10.4f %10.3f %8s\n", ds, metric, v[1], v[2], v[3], m, ref,
                     (metric == "rmse" ? sprintf("%.3f", m / ref) : sprintf("%+.3f", m - ref)) }' \
        "$OUT/$ds-0.log" "$OUT/$ds-1.log" "$OUT/$ds-2.log"
done
