#!/bin/sh
# descriptors.sh - Chemprop's RDKit 2D descriptors: molprop beside
# descriptastorus (what Chemprop v1 calls), on hiv, side by side in one run.
#
#   DESC_PYTHON=/path/to/venv/bin/python sh bench/descriptors.sh [DATA_DIR] [STRIDE] [REPEATS]
#
# DESC_PYTHON is a Python with rdkit and descriptastorus (the versions of
# ../shared/fixtures/chemprop_v1/README.md).  Runs, REPEATS times (default 3)
# alternating so both see the same load, on every STRIDE-th molecule of hiv
# (default 10: 4,113 molecules from the whole file; 1 = all 41,127):
# descriptastorus' rdkit_2d and rdkit_2d_normalized, and molprop's rdkit2d
# and rdkit2d,rdkit2d-normalized on one thread; then molprop on 2 threads
# (wall rate).  Prints the medians as a
# markdown table.  The per-core figure is molecules per CPU second (process
# CPU time): on a shared machine a process that gets half a core is charged
# half the seconds, so the figure does not depend on the machine's load.
set -e
DATA=${1:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
S=${2:-10}
REP=${3:-3}
PY=${DESC_PYTHON:-python3}
make -s CUDA=0 BUILD=build-nocuda build-nocuda/bench/desc_rate >/dev/null
B=build-nocuda/bench
F=$DATA/hiv.csv.gz

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
median() {
    echo "$@" | tr ' ' '\n' | sort -n | awk 'NF {v[++n]=$1} END {print v[int((n+1)/2)]}'
}

dr=""; dn=""; mr=""; mn=""; m2=""
i=0
while [ $i -lt "$REP" ]; do
    dr="$dr $($PY bench/desc_rate_descriptastorus.py $F --stride $S | field molecules_per_cpu_s)"
    mr="$mr $($B/desc_rate $F --stride $S --sets rdkit2d | field molecules_per_cpu_s)"
    dn="$dn $($PY bench/desc_rate_descriptastorus.py $F --stride $S --normalized | field molecules_per_cpu_s)"
    mn="$mn $($B/desc_rate $F --stride $S --sets rdkit2d,rdkit2d-normalized | field molecules_per_cpu_s)"
    m2="$m2 $($B/desc_rate $F --stride $S --threads 2 --sets rdkit2d,rdkit2d-normalized | field molecules_per_s)"
    i=$((i + 1))
done
dr=$(median $dr); dn=$(median $dn); mr=$(median $mr); mn=$(median $mn); m2=$(median $m2)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1fx", a/b}'; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "molecules: every $S-th of hiv ($(build-nocuda/bench/desc_rate $F --stride $S --sets v2-charge | field molecules)), $REP runs each (medians)"
echo
echo "| set | descriptastorus (mol/CPU-s) | molprop 1 thread (mol/CPU-s) | ratio |"
echo "|---|---|---|---|"
echo "| rdkit_2d | $dr | $mr | $(ratio $mr $dr) |"
echo "| rdkit_2d_normalized | $dn | $mn | $(ratio $mn $dn) |"
echo
echo "molprop, 2 threads, rdkit2d + rdkit2d-normalized: $m2 molecules per wall second"
