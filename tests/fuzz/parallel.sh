#!/bin/sh
# parallel.sh - a fuzzing campaign on a many-core machine: each named
# harness runs as K libFuzzer workers at once (-jobs=K -workers=K, K
# processes of SECS seconds each sharing one growing corpus), every harness
# at the same time.  For a machine without clang or RDKit: BIN holds the
# build-fuzz/fuzz_* binaries, LD_LIBRARY_PATH their libraries.
#   tests/fuzz/parallel.sh SECS WORK BIN CORPORA harness:K [harness:K ...]
# CORPORA/harness is the starting corpus (copied into WORK).  Prints one row
# per harness: harness, workers, seconds, executions (summed over workers),
# artifacts (crashes, hangs, leaks: WORK/art/).
set -u
secs=$1 work=$2 bin=$(cd "$3" && pwd) corpora=$4; shift 4
mkdir -p "$work/art"
for spec in "$@"; do
    h=${spec%%:*} k=${spec##*:}
    mkdir -p "$work/$h/corpus" && cp -r "$corpora/$h/." "$work/$h/corpus/"
    case $h in modelfile) len=50000 ;; smiles) len=512 ;; *) len=4096 ;; esac
    ( cd "$work/$h" && OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 \
        LSAN_OPTIONS=suppressions=${LSAN_SUPP:-/dev/null} \
        "$bin/fuzz_$h" -jobs="$k" -workers="$k" -max_total_time="$secs" -timeout=20 \
        -rss_limit_mb=2560 -max_len=$len -print_final_stats=1 -close_fd_mask=3 \
        -artifact_prefix="$work/art/$h-" corpus > run.log 2>&1 ) &
done
wait
printf 'harness\tworkers\tseconds\texecs\tartifacts\n'
for spec in "$@"; do
    h=${spec%%:*} k=${spec##*:}
    execs=$(cat "$work/$h"/fuzz-*.log 2>/dev/null | awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
    arts=$(ls "$work/art" | grep -c "^$h-")
    printf '%s\t%s\t%s\t%s\t%s\n' "$h" "$k" "$secs" "$execs" "$arts"
done
