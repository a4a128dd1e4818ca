#!/bin/sh
# campaign.sh - a fuzzing campaign on a shared machine: ONE harness at a
# time under nice -n 19, rotating over the harnesses named in $FZ/harnesses
# (re-read every round, so one can be added while it runs), SECS seconds a
# session, until $FZ/stop exists.  Each session works on a copy of its
# corpus under $FZ (libFuzzer grows it; the repository keeps the seeds) and
# appends "harness seconds execs crashes" to $FZ/log.tsv; crashes, hangs
# and leaks land in $FZ/art/ (tests/fuzz/README.md: how to keep one as a
# regression input).
#   tests/fuzz/campaign.sh [SECS] [FZ]     (after make fuzz; from the checkout)
set -u
secs=${1:-600}
fz=${2:-/tmp/fz}
mkdir -p "$fz/art"
[ -s "$fz/harnesses" ] || echo "csv smiles modelfile cache" > "$fz/harnesses"
while [ ! -e "$fz/stop" ]; do
    for h in $(cat "$fz/harnesses"); do
        [ -e "$fz/stop" ] && break
        [ -x "build-fuzz/fuzz_$h" ] || continue
        if [ ! -d "$fz/$h" ]; then
            mkdir -p "$fz/$h" && cp tests/fuzz/corpus/$h/* "$fz/$h/"
        fi
        case $h in   # inputs as large as the seeds need
            modelfile) len=50000 ;; smiles) len=512 ;; *) len=4096 ;;
        esac
        before=$(ls "$fz/art" | wc -l)
        start=$(date +%s)
        OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 \
            LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
            nice -n 19 "build-fuzz/fuzz_$h" -max_total_time="$secs" -timeout=20 \
            -rss_limit_mb=2560 -max_len=$len -print_final_stats=1 \
            -artifact_prefix="$fz/art/$h-" "$fz/$h" > "$fz/$h.last.log" 2>&1
        end=$(date +%s)
        execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$fz/$h.last.log" | tail -1)
        after=$(ls "$fz/art" | wc -l)
        printf '%s\t%s\t%s\t%s\t%s\n' "$h" "$((end - start))" "${execs:-?}" "$((after - before))" \
            "$(date -u +%H:%M)" >> "$fz/log.tsv"
    done
done
