#!/bin/sh
# predict_memory.sh - peak memory of `molprop predict` on a generated file of
# N rows (issue 16: 10 million rows in under 500 MB), measured with
# /usr/bin/time -v.  The rows are the SMILES of the shared datasets, repeated
# in order until there are N of them; the model is a small D-MPNN trained on
# ESOL here (its size does not change what streaming costs).
#   bench/predict_memory.sh [ROWS] [WORKDIR]      (MOLPROP_BIN, DATA_DIR)
# Prints the rows, the seconds, the molecules per second and the peak RSS.
# THREADS (default: all cores) goes to --threads.
set -eu
rows=${1:-10000000}
work=${2:-/tmp/molprop-predict-memory}
bin=${MOLPROP_BIN:-build/molprop}
data=${DATA_DIR:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
mkdir -p "$work"
in="$work/rows-$rows.csv"
if [ ! -s "$in" ]; then
    python3 - "$data" "$rows" "$in" <<'PY'
import csv, gzip, io, os, sys
data, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
smiles = []
for name in sorted(os.listdir(data)):
    if not name.endswith(".csv.gz"):
        continue
    with gzip.open(os.path.join(data, name), "rt", newline="") as f:
        r = csv.reader(f)
        head = next(r)
        col = next((i for i, h in enumerate(head) if h.lower() == "smiles"), 0)
        smiles.extend(row[col] for row in r if row)
with open(out + ".part", "w", newline="") as f:
    f.write("smiles\n")
    for i in range(rows):
        s = smiles[i % len(smiles)]
        f.write('"%s"\n' % s.replace('"', '""') if ("," in s or '"' in s) else s + "\n")
os.rename(out + ".part", out)
print("wrote %d rows (%d distinct SMILES) to %s" % (rows, len(smiles), out), file=sys.stderr)
PY
fi
if [ ! -s "$work/model/model.mpm" ]; then
    "$bin" train --data "$data/esol.csv.gz" --epochs 5 --quiet --save-dir "$work/model" >/dev/null
fi
threads=${THREADS:-auto}
/usr/bin/time -v "$bin" predict --model "$work/model/model.mpm" --data "$in" \
    --out "$work/pred.csv" --threads "$threads" --quiet 2> "$work/time.txt" ||
    { cat "$work/time.txt"; exit 1; }
peak=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time.txt")
lines=$(($(wc -l < "$work/pred.csv") - 1))
secs=$(echo "$wall" | awk -F: '{s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s}')
rate=$(awk -v n="$lines" -v s="$secs" 'BEGIN {printf "%.0f", (s > 0 ? n / s : 0)}')
echo "rows $rows  predicted $lines  wall $wall ($secs s, $rate rows/s)  peak RSS $((peak / 1024)) MiB ($peak KB)"
rm -f "$work/pred.csv"
