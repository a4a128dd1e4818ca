#!/bin/sh
# screen.sh - screening throughput (issue 14): `molprop predict` on a
# generated file of ROWS rows (the SMILES of the shared datasets, repeated in
# order), one process on all cores, then split K ways for K in RANKS (1 2 4),
# each of the K cores/K threads and its byte range of the input, either
#   mpi:    mpirun -np K molprop predict (rank 0 joins the parts), or
#   shards: K concurrent `molprop predict --shard I/K` processes, then one
#           `predict --merge` (timed with them): no MPI needed,
# and one process on the GPU when there is one.  Per run: wall seconds,
# molecules/s, peak RSS (per rank and summed), and a check that the output
# is byte for byte the one process's.  Ends with molecules per day projected
# for N nodes from the measured per-node rate and the 1 -> 4 scaling.
#
#   bench/screen.sh [ROWS] [WORKDIR]
#   env: MOLPROP_BIN (build/molprop), DATA_DIR (../shared/datasets),
#        MODEL (a model file; default: a default-size D-MPNN, hidden 300,
#        trained 1 epoch on ESOL here), RANKS ("1 2 4"; "": none),
#        LAUNCH (auto: mpi where an mpirun is found, else shards; mpi;
#        shards), MPIRUN (the mpirun to use: default mpirun on PATH; the
#        bundle of scripts/device_mpi_bundle.sh is .dev/mpi/bin/mpirun),
#        CORES (nproc), GPU (auto: when nvidia-smi sees one; 0: never; 1: always)
#
# Peak RSS: /usr/bin/time where it is installed, else VmHWM of
# /proc/PID/status sampled every 0.2 s (marked "sampled").
# Prints a Markdown table (for bench/RESULTS.md) on stdout; logs on stderr.
set -eu
rows=${1:-10000000}
work=${2:-/tmp/molprop-screen}
bin=${MOLPROP_BIN:-build/molprop}
data=${DATA_DIR:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
ranks=${RANKS-1 2 4}
cores=${CORES:-$(nproc)}
gpu=${GPU:-auto}
launch=${LAUNCH:-auto}
mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null || true)}
case "$launch" in
    auto) if [ -n "$mpirun" ]; then launch=mpi; else launch=shards; fi ;;
    mpi) [ -n "$mpirun" ] || { echo "screen: LAUNCH=mpi but no mpirun (set MPIRUN)" >&2; exit 2; } ;;
    shards) ;;
    *) echo "screen: LAUNCH=$launch: expected auto, mpi or shards" >&2; exit 2 ;;
esac
[ "$launch" = mpi ] || echo "screen: no MPI: the K-way runs are K --shard processes + --merge" >&2
case "$bin" in /*) ;; *) bin=$(pwd)/$bin ;; esac
mkdir -p "$work"
in="$work/rows-$rows.csv"

if [ ! -s "$in" ] && command -v python3 >/dev/null 2>&1; then
    python3 - "$data" "$rows" "$in" <<'PY'
import csv, gzip, os, sys
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
print("screen: wrote %d rows (%d distinct SMILES) to %s" % (rows, len(smiles), out),
      file=sys.stderr)
PY
elif [ ! -s "$in" ]; then
    # no python3 (the GPU machine): awk, rows with a quote character skipped
    for f in "$data"/*.csv.gz; do
        gzip -dc "$f" | awk -F, 'NR == 1 { c = 1; for (i = 1; i <= NF; i++)
                                              if (tolower($i) == "smiles") c = i; next }
                                 NF && !/"/ { print $c }'
    done > "$work/smiles.txt"
    awk -v n="$rows" '{ s[k++] = $0 }
        END { if (!k) exit 1; print "smiles"; for (i = 0; i < n; i++) print s[i % k] }' \
        "$work/smiles.txt" > "$in.part"
    mv "$in.part" "$in"
    echo "screen: wrote $rows rows ($(wc -l < "$work/smiles.txt") distinct SMILES, awk) to $in" >&2
    rm -f "$work/smiles.txt"
fi

model=${MODEL:-$work/model/model.mpm}
if [ ! -s "$model" ]; then
    echo "screen: training a default-size D-MPNN (1 epoch on ESOL) into $work/model" >&2
    "$bin" train --data "$data/esol.csv.gz" --epochs 1 --quiet --save-dir "$work/model" >/dev/null
fi

# rss.sh OUT CMD...: runs CMD, then writes "maxrss KB" into OUT
cat > "$work/rss.sh" <<'EOF'
#!/bin/sh
out=$1
shift
if [ -x /usr/bin/time ]; then
    exec /usr/bin/time -f "maxrss %M" -o "$out" "$@"
fi
"$@" &
pid=$!
peak=0
while kill -0 "$pid" 2>/dev/null; do
    v=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$v" ] && [ "$v" -gt "$peak" ] && peak=$v
    sleep 0.2
done
rc=0
wait "$pid" || rc=$?
echo "maxrss $peak" > "$out"
exit $rc
EOF
chmod +x "$work/rss.sh"
rss_how=$([ -x /usr/bin/time ] && echo "" || echo " (sampled)")

now() { date +%s.%N; }
# run NAME CMD...: wall seconds into $secs, the peak RSS lines (KB) into $work/NAME.rss
run() {
    name=$1
    shift
    t0=$(now)
    "$@" 2> "$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
    t1=$(now)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    cat "$work/$name".rss.* 2>/dev/null | awk '/^maxrss / {print $2}' > "$work/$name.rss"
    rm -f "$work/$name".rss.*
}
# timed NAME CMD...: CMD under /usr/bin/time, its peak RSS into NAME.rss.<rank>
# (a file per rank: the ranks' stderr lines interleave)
timed() {
    name=$1
    shift
    "$work/rss.sh" "$work/$name.rss.${OMPI_COMM_WORLD_RANK:-0}" "$@"
}
# shards NAME K TH: K concurrent --shard I/K processes of TH threads, then the merge
shards() {
    name=$1 k=$2 th=$3 i=0 pids=""
    while [ "$i" -lt "$k" ]; do
        "$work/rss.sh" "$work/$name.rss.$i" "$bin" predict --model "$model" --data "$in" \
            --out "$work/$name.csv" --shard "$i/$k" --threads "$th" --quiet &
        pids="$pids $!"
        i=$((i + 1))
    done
    fail=0
    for p in $pids; do wait "$p" || fail=1; done
    [ "$fail" = 0 ] || return 1
    "$bin" predict --merge --out "$work/$name.csv" --remove-parts --quiet
}
rate() { awk -v n="$rows" -v s="$1" 'BEGIN {printf "%.0f", (s > 0 ? n / s : 0)}'; }
mib() { awk '{m = $1 > m ? $1 : m; s += $1} END {printf "%.0f %.0f", m / 1024, s / 1024}' "$1"; }

echo "| run | ranks x threads | wall s | molecules/s | peak RSS per rank (MiB)$rss_how | sum (MiB) | output = 1 process |"
echo "|---|---|---|---|---|---|---|"
run one timed one "$bin" predict --model "$model" --data "$in" --out "$work/one.csv" --threads "$cores" --quiet
one_rate=$(rate "$secs")
set -- $(mib "$work/one.rss")
echo "| cpu, 1 process | 1 x $cores | $secs | $one_rate | $1 | $2 | (reference) |"
rate1=""
best=$one_rate
rate_max=""
r_max=1
for r in $ranks; do
    th=$((cores / r))
    [ "$th" -ge 1 ] || th=1
    if [ "$launch" = mpi ]; then
        run "mpi$r" "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$r" sh -c \
            'work=$1; shift; "$work/rss.sh" "$work/$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' \
            "mpi$r" "$work" "$bin" predict \
            --model "$model" --data "$in" --out "$work/mpi$r.csv" --threads "$th" --quiet
        label="cpu, mpirun -np $r"
    else
        run "mpi$r" shards "mpi$r" "$r" "$th"
        label="cpu, $r --shard processes + --merge (no MPI)"
    fi
    rr=$(rate "$secs")
    same=$(cmp -s "$work/one.csv" "$work/mpi$r.csv" && echo yes || echo NO)
    set -- $(mib "$work/mpi$r.rss")
    echo "| $label | $r x $th | $secs | $rr | $1 | $2 | $same |"
    [ -n "$rate1" ] || { rate1=$rr; r_first=$r; }
    rate_max=$rr
    r_max=$r
    best=$(awk -v a="${best:-0}" -v b="$rr" 'BEGIN {print (b > a ? b : a)}')
    rm -f "$work/mpi$r.csv"
done
node_rate=$best
if [ "$gpu" = 1 ] || { [ "$gpu" = auto ] && command -v nvidia-smi >/dev/null 2>&1 &&
                        nvidia-smi -L >/dev/null 2>&1; }; then
    run gpu timed gpu "$bin" predict --model "$model" --data "$in" --out "$work/gpu.csv" --device gpu \
        --threads "$cores" --quiet
    gr=$(rate "$secs")
    set -- $(mib "$work/gpu.rss")
    echo "| gpu, 1 process | 1 x $cores | $secs | $gr | $1 | $2 | (gpu: fp32 rounding differs) |"
    node_rate=$(awk -v a="$best" -v b="$gr" 'BEGIN {print (b > a ? b : a)}')
    rm -f "$work/gpu.csv"
fi
rm -f "$work/one.csv"

# The projection: shards share nothing but the input file, so N nodes run
# N times one node's rate; the within-node scaling (1 -> r_max ranks) is
# what the measurement says about splitting the work, and the merge is a
# byte copy (rank 0) at the end.
echo
[ -z "$rate1" ] || echo "Scaling $r_first -> $r_max ranks ($launch) on $cores cores: $rate1 -> $rate_max molecules/s."
echo
echo "| nodes | molecules/s | molecules/day |"
echo "|---|---|---|"
for n in 1 2 4 8 16 64; do
    awk -v n="$n" -v r="$node_rate" 'BEGIN {printf "| %d | %.0f | %.3g |\n", n, n * r, n * r * 86400}'
done
echo
echo "(projection: N x the best per-node rate measured above, $node_rate molecules/s; the shards"
echo " share nothing but the input file; the final merge copies the outputs once.)"
