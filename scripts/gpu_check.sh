#!/bin/sh
# gpu_check.sh - the restructuring's GPU checks in one device run, old and
# new binaries side by side.  From the repository root on the GPU machine:
#   sh scripts/gpu_check.sh [PARTS]     (default "tests sums bench"; also "small":
#   batch-50 inference, old and new interleaved, per op)
# expects .dev/new/bundle.tgz (scripts/device_bundle.sh: bin, lib, data) and
# .dev/old/bundle.tgz (bin only: the binaries of the commit before), writes
# logs under $OUT (default /tmp/gpu-check).
set -u
PARTS=${1:-tests sums bench}
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT" /tmp/new /tmp/old
tar -C /tmp/new -xzf .dev/new/bundle.tgz
[ -f .dev/old/bundle.tgz ] && tar -C /tmp/old -xzf .dev/old/bundle.tgz
export LD_LIBRARY_PATH=/tmp/new/lib MOLPROP_DATA_MIRROR=/tmp/new/data
export MOLPROP_SHARED=/tmp/new/shared RDDATADIR=/tmp/new/data
mkdir -p /tmp/new/shared && ln -sfn /tmp/new/data /tmp/new/shared/datasets
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if part tests; then
    echo "== GPU tests (new; a skip fails)"
    MOLPROP_BIN=/tmp/new/bin/molprop MOLPROP_REQUIRE_GPU=1 /tmp/new/bin/run_tests gpu \
        > "$OUT/tests.log" 2>&1
    grep -E "^(FAIL|SKIP)|passed" "$OUT/tests.log"
    grep -B3 "^FAIL" "$OUT/tests.log" | head -60
fi
if part sums; then
    echo "== model checksums, old vs new"
    for v in old new; do
        [ -x /tmp/$v/bin/molprop ] || continue
        MOLPROP_BIN=/tmp/$v/bin/molprop sh scripts/model_checksums.sh gpu /tmp/new/data \
            > "$OUT/sums-$v.txt" 2>&1
    done
    if [ -f "$OUT/sums-old.txt" ]; then
        diff "$OUT/sums-old.txt" "$OUT/sums-new.txt" > "$OUT/sums.diff" && echo "checksums IDENTICAL ($(wc -l < "$OUT/sums-new.txt") models)" || { echo "checksums DIFFER:"; cat "$OUT/sums.diff"; }
    else
        cat "$OUT/sums-new.txt"
    fi
fi
if part bench; then
    echo "== step and inference benchmarks, old / new / old / new"
    for round in 1 2; do
        for v in old new; do
            [ -x /tmp/$v/bin/gpu_ops ] || continue
            /tmp/$v/bin/gpu_ops > "$OUT/gpu_ops-$v-$round.log" 2>&1
            echo "-- gpu_ops $v round $round"
            grep -E "^==|STEP, CUDA|molecules/s" "$OUT/gpu_ops-$v-$round.log"
            /tmp/$v/bin/gpu_infer 4096 65536 > "$OUT/gpu_infer-$v-$round.log" 2>&1
            echo "-- gpu_infer $v round $round"; cat "$OUT/gpu_infer-$v-$round.log" | tail -8
        done
    done
    for v in old new; do
        for ds in qm9 hiv; do
            echo "-- gpu_predict $v $ds"
            /tmp/$v/bin/gpu_predict /tmp/new/data/$ds.csv.gz 50 4096 2>&1 | tail -6
        done
    done
fi
if part small; then
    echo "== batch-50 inference, old and new interleaved (qm9, fp32 and bf16)"
    for round in 1 2 3; do
        for v in old new; do
            printf -- "-- gpu_predict qm9 50 %s round %s: " $v $round
            MOLPROP_PREDICT_BACKENDS=cuda:fp32,cuda:bf16 /tmp/$v/bin/gpu_predict \
                /tmp/new/data/qm9.csv.gz 50 2>&1 | tail -2 | tr '\n' ' '; echo
        done
    done
    for v in new old; do
        /tmp/$v/bin/gpu_infer --prec fp32 --n 65536 --ops 1 50 > "$OUT/infer50-$v.log" 2>&1
        echo "-- gpu_infer 50 $v (exit $?)"; tail -30 "$OUT/infer50-$v.log"
    done
fi
