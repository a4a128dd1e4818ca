#!/bin/sh
# featurize.sh - featurization speed beside the bare RDKit SMILES-parse rate.
#
#   sh bench/featurize.sh [DATA_DIR] [REPEATS]
#   OLD=DIR sh bench/featurize.sh ...   also DIR/featurize_rate (an older
#                   build's bench programs) beside this one, same runs
#   FIELD=molecules_per_cpu_s sh ...    molecules per CPU second (the per-core
#                   rate, which a loaded machine's other jobs leave alone)
#
# Builds the bench programs (make bench), then runs each configuration
# REPEATS times (default 3), alternating with its partner, on hiv and qm9
# from DATA_DIR (default $MOLPROP_DATA_MIRROR, else ../shared/datasets) and
# prints the median molecules/s of each as a markdown table, with the machine
# and the load average before and after (the machine may be shared).
set -e
DATA=${1:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
REP=${2:-3}
make -s CUDA=0 build/bench/featurize_rate build/bench/parse_rate >/dev/null
B=build/bench

FIELD=${FIELD:-molecules_per_s}
# rate CMD...: the $FIELD= field of one run
rate() {
    "$@" | sed -n "s/.* $FIELD=\([0-9]*\).*/\1/p"
}

# median of whitespace-separated numbers
median() {
    echo "$@" | tr ' ' '\n' | sort -n | awk 'NF {v[++n]=$1} END {print v[int((n+1)/2)]}'
}

# pair "CMD A" "CMD B": runs A and B alternately REP times (so both see the
# same load on a shared machine) and prints "medianA medianB" (the commands
# are split at spaces: keep DATA_DIR free of them)
pair() {
    a=""; b=""; i=0
    while [ $i -lt "$REP" ]; do
        a="$a $(rate $1)"
        b="$b $(rate $2)"
        i=$((i + 1))
    done
    echo "$(median $a) $(median $b)"
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rates: $FIELD"
echo
if [ -n "${OLD:-}" ]; then
    # old and new featurize, each beside the parse rate, alternating
    echo "| dataset | threads | RDKit parse only | featurize, old ($OLD) | featurize, new | old / parse | new / parse | new / old |"
    echo "|---|---|---|---|---|---|---|---|"
    for ds in hiv qm9; do
        p=""; a=""; b=""; i=0
        while [ $i -lt "$REP" ]; do
            p="$p $(rate $B/parse_rate $DATA/$ds.csv.gz 1)"
            a="$a $(rate $OLD/featurize_rate $DATA/$ds.csv.gz --threads 1)"
            b="$b $(rate $B/featurize_rate $DATA/$ds.csv.gz --threads 1)"
            i=$((i + 1))
        done
        p=$(median $p); a=$(median $a); b=$(median $b)
        echo "| $ds | 1 | $p | $a | $b | $(awk -v x=$a -v y=$p 'BEGIN{printf "%.1f%%", 100*x/y}') | $(awk -v x=$b -v y=$p 'BEGIN{printf "%.1f%%", 100*x/y}') | $(awk -v x=$b -v y=$a 'BEGIN{printf "%.3f", x/y}') |"
    done
    echo
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi
echo "| dataset | threads | RDKit parse only (mol/s) | molprop featurize (mol/s) | ratio |"
echo "|---|---|---|---|---|"
for ds in hiv qm9; do
    for t in 1 2; do
        set -- $(pair "$B/parse_rate $DATA/$ds.csv.gz $t" "$B/featurize_rate $DATA/$ds.csv.gz --threads $t")
        p=$1; f=$2
        echo "| $ds | $t | $p | $f | $(awk -v f=$f -v p=$p 'BEGIN{printf "%.0f%%", 100*f/p}') |"
    done
done
echo
echo "| dataset | threads | featurize + scaffolds (mol/s) | featurize, no Morgan (mol/s) |"
echo "|---|---|---|---|"
set -- $(pair "$B/featurize_rate $DATA/hiv.csv.gz --threads 1 --scaffolds" "$B/featurize_rate $DATA/hiv.csv.gz --threads 1 --no-morgan")
s=$1; n=$2
echo "| hiv | 1 | $s | $n |"
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
