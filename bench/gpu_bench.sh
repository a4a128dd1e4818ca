#!/bin/sh
# gpu_bench.sh - the GPU issue's measurements, in one run on a GPU machine,
# from the repository root, with the binaries in $BIN (default build/) and the
# datasets in data/:
#   1. the GPU tests (a skip counts as a failure);
#   2. bench/gpu_ops: per-op times of one D-MPNN training step (batch 50 and
#      4096; fp32, tf32, bf16), eager and as a CUDA graph;
#   3. bench/gpu_infer: inference molecules/s of the real model at large
#      batches; bench/gpu_predict: the same through the prediction path on
#      qm9 and hiv (featurized beforehand) at batch 50 and 4096;
#   4. `molprop train` on qm9 and hiv at batch 50 and 4096 in each precision
#      (2 epochs; training molecules/s from metrics.json);
#   5. end to end: `molprop train` on hiv, defaults + bf16, scaffold split seed 0
#      (30 epochs, featurization included): wall time and test ROC-AUC;
#   6. the CPU issue's accuracy bars with --device gpu --precision bf16.
# Output: a log per part under $OUT (default /tmp/molprop-gpu-bench).
# PARTS="1 2 3" runs only those parts (default: all six).
set -u
PARTS=${PARTS:-1 2 3 4 5 6}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
BIN=${BIN:-build}
OUT=${OUT:-/tmp/molprop-gpu-bench}
mkdir -p "$OUT"
export MOLPROP_BIN="$BIN/molprop"
if part 1; then
    echo "== 1. GPU tests"
    MOLPROP_REQUIRE_GPU=1 "$BIN/run_tests" gpu > "$OUT/tests.log" 2>&1
    grep -E "^(FAIL|SKIP)|passed" "$OUT/tests.log"
fi
if part 2; then
    echo "== 2. per-op step benchmark"
    "$BIN/gpu_ops" > "$OUT/gpu_ops.log" 2>&1
    grep -E "^==|STEP, CUDA|molecules/s" "$OUT/gpu_ops.log"
fi
if part 3; then
    echo "== 3. inference"
    "$BIN/gpu_infer" 4096 16384 65536 2>&1 | tee "$OUT/gpu_infer.log"
    for ds in qm9 hiv; do
        "$BIN/gpu_predict" data/$ds.csv.gz 50 4096 2>&1 | tee "$OUT/gpu_predict-$ds.log"
    done
fi
if part 4; then
    echo "== 4. molprop train, 2 epochs (training molecules/s, featurization excluded)"
    printf "%-6s %6s %-5s %10s %12s\n" data batch prec train_s mol_per_s | tee "$OUT/train.log"
    for ds in qm9 hiv; do
        for bs in 50 4096; do
            for p in fp32 tf32 bf16; do
                "$MOLPROP_BIN" train --data data/$ds.csv.gz --device gpu --precision $p --batch-size $bs \
                    --epochs 2 --quiet --save-dir "$OUT/t-$ds-$bs-$p" > "$OUT/t-$ds-$bs-$p.log" 2>&1
                m="$OUT/t-$ds-$bs-$p/metrics.json"
                ts=$(sed -n 's/.*"train_seconds":[[:space:]]*\([0-9.]*\).*/\1/p' "$m")
                mps=$(sed -n 's/.*train_molecules_per_second":[[:space:]]*\([0-9.]*\).*/\1/p' "$m")
                printf "%-6s %6s %-5s %10s %12s\n" $ds $bs $p "$ts" "$mps" | tee -a "$OUT/train.log"
            done
        done
    done
fi
if part 5; then
    echo "== 5. hiv end to end, bf16, scaffold_balanced seed 0"
    t0=$(date +%s.%N)
    "$MOLPROP_BIN" train --data data/hiv.csv.gz --device gpu --precision bf16 \
        --split scaffold_balanced --seed 0 --quiet --save-dir "$OUT/hiv-e2e" > "$OUT/hiv_e2e.log" 2>&1
    t1=$(date +%s.%N)
    cat "$OUT/hiv_e2e.log"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "wall %.1f s\n", b - a }'
fi
if part 6; then
    echo "== 6. accuracy bars, GPU bf16"
    sh bench/accuracy.sh "$OUT/acc" --device gpu --precision bf16 > "$OUT/accuracy.log" 2>&1
    cat "$OUT/accuracy.log"
fi
