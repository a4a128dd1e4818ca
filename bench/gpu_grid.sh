#!/bin/sh
# gpu_grid.sh - the paper grid on one GPU (issue 10, item 7): the 17
# datasets of the shared mirror x 5 models x seeds 0,1,2 in bf16, timed,
# with the runs side by side (--jobs) and the next dataset featurized while
# this one trains; then the check that a run gives the same row alone and
# beside others.
#
#   sh bench/gpu_grid.sh [MIRROR] [OUT] [JOBS]
#
# MIRROR: the dataset files (default ../shared/datasets); OUT: the results
# folder (default /tmp/paper-gpu); JOBS: runs at once (default 4).  Needs a
# CUDA build (make).  The figures are drawn where gnuplot is (molprop bench
# report OUT/grid, here or after copying OUT back).
set -e
MIRROR=${1:-../shared/datasets}
OUT=${2:-/tmp/paper-gpu}
JOBS=${3:-4}
BIN=${MOLPROP_BIN:-build/molprop}
mkdir -p "$OUT"

echo "== the paper grid: 17 datasets x 5 models x 3 seeds, bf16, $JOBS at a time"
rm -rf "$OUT/grid"
start=$(date +%s.%N)
"$BIN" bench --config configs/bench/paper.ini --data-dir "$MIRROR" --device gpu \
    --precision bf16 --jobs "$JOBS" --out "$OUT/grid" | tee "$OUT/grid.log"
end=$(date +%s.%N)
echo "grid wall time: $(echo "$end - $start" | bc) s (goal: under 600 s; ac9e4f4: 859 s)"

echo "== the same grid again: every run is skipped (resume)"
"$BIN" bench --config configs/bench/paper.ini --data-dir "$MIRROR" --device gpu \
    --precision bf16 --jobs "$JOBS" --out "$OUT/grid" | tail -1

echo "== alone and side by side: identical rows (esol, bace, tox21, 5 models, 3 seeds)"
for j in 1 "$JOBS"; do
    rm -rf "$OUT/jobs$j"
    "$BIN" bench --datasets esol,bace,tox21 --models all --seeds 0,1,2 --data-dir "$MIRROR" \
        --device gpu --precision bf16 --jobs "$j" --cache-dir "$OUT/grid/cache" \
        --out "$OUT/jobs$j" --quiet | tail -1
    # dataset model seed split_checksum test val test_tasks best_epoch train_loss val_curve
    awk -F'\t' 'NR > 1 { print $2, $3, $4, $6, $11, $12, $13, $16, $25, $26 }' \
        "$OUT/jobs$j/results.tsv" | sort > "$OUT/jobs$j.rows"
done
if cmp -s "$OUT/jobs1.rows" "$OUT/jobs$JOBS.rows"; then
    echo "identical: $(wc -l < "$OUT/jobs1.rows") runs, --jobs 1 and --jobs $JOBS"
else
    echo "DIFFERENT rows with --jobs 1 and --jobs $JOBS:"
    diff "$OUT/jobs1.rows" "$OUT/jobs$JOBS.rows" | head -20
    exit 1
fi
