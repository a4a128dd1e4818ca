#!/bin/sh
# featurize.sh - featurization speed beside the bare RDKit SMILES-parse rate.
#
#   sh bench/featurize.sh [DATA_DIR] [REPEATS]
#
# Builds the bench programs (make bench), then runs each configuration
# REPEATS times (default 3) on hiv and qm9 from DATA_DIR (default
# $MOLPROP_DATA_MIRROR, else ../shared/datasets) and prints the median
# molecules/s of each as a markdown table, with the machine and load.
set -e
DATA=${1:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
REP=${2:-3}
make -s CUDA=0 bench >/dev/null
B=build/bench

# median of the molecules_per_s= field over REP runs of a command
median() {
    i=0
    : > /tmp/featurize_bench.$$
    while [ $i -lt "$REP" ]; do
        "$@" | sed -n 's/.*molecules_per_s=\([0-9]*\).*/\1/p' >> /tmp/featurize_bench.$$
        i=$((i + 1))
    done
    sort -n /tmp/featurize_bench.$$ | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
    rm -f /tmp/featurize_bench.$$
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| dataset | threads | RDKit parse only (mol/s) | molprop featurize (mol/s) | ratio |"
echo "|---|---|---|---|---|"
for ds in hiv qm9; do
    for t in 1 2; do
        p=$(median $B/parse_rate "$DATA/$ds.csv.gz" $t)
        f=$(median $B/featurize_rate "$DATA/$ds.csv.gz" --threads $t)
        echo "| $ds | $t | $p | $f | $(awk -v f=$f -v p=$p 'BEGIN{printf "%.0f%%", 100*f/p}') |"
    done
done
echo
echo "| dataset | threads | featurize + scaffolds (mol/s) | featurize, no Morgan (mol/s) |"
echo "|---|---|---|---|"
s=$(median $B/featurize_rate "$DATA/hiv.csv.gz" --threads 1 --scaffolds)
n=$(median $B/featurize_rate "$DATA/hiv.csv.gz" --threads 1 --no-morgan)
echo "| hiv | 1 | $s | $n |"
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
