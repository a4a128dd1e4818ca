#!/bin/sh
# predict_memory.sh - peak memory of `molprop predict` on a generated file of
# N rows (issue 16: 10 million rows in under 500 MB).  The rows are the
# SMILES of the gzipped datasets in DATA_DIR, repeated in order until there
# are N of them, generated here (the file is ~0.45 GB at 10 M rows: it is made
# on the machine that measures, never carried).  The model is MODEL when
# given (a .mpm file: nothing is trained), else a small D-MPNN trained on
# DATA_DIR/esol.csv.gz (its size does not change what streaming costs).
#
#   bench/predict_memory.sh [ROWS] [WORKDIR]
#
# Environment: MOLPROP_BIN (default build/molprop), DATA_DIR (default
# $MOLPROP_DATA_MIRROR, else ../shared/datasets), MODEL, THREADS (--threads,
# default auto: all cores), DEVICE (--device, default cpu), CHUNK_ROWS
# (--chunk-rows, default auto), RSS_LOG (where
# the RSS samples go, default WORKDIR/rss.log).
#
# Needs no /usr/bin/time: the peak RSS is the kernel's own count, read by a
# python3 wrapper (getrusage(RUSAGE_CHILDREN).ru_maxrss of the finished
# run), or without python3 by polling /proc/PID/status (VmHWM, the kernel's
# high-water mark, last read before the run ends).  Either way VmRSS and
# VmHWM are sampled every second into RSS_LOG with the bytes of predictions
# written so far, so a run cut short still shows how far it got and whether
# its memory stayed flat.  Without python3
# the CSV is generated with awk (rows with a quote character are skipped).
# Prints one line: rows, predicted rows, seconds, rows/s, peak RSS.
set -eu
rows=${1:-10000000}
work=${2:-/tmp/molprop-predict-memory}
bin=${MOLPROP_BIN:-build/molprop}
data=${DATA_DIR:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
threads=${THREADS:-auto}
device=${DEVICE:-cpu}
chunk=${CHUNK_ROWS:-auto}
mkdir -p "$work"
rss_log=${RSS_LOG:-$work/rss.log}
have_python=0
command -v python3 >/dev/null 2>&1 && have_python=1
export LC_ALL=C   # the datasets in byte order, for either generator

# ---- the input: ROWS rows of SMILES -----------------------------------------
in="$work/rows-$rows.csv"
if [ ! -s "$in" ]; then
    if [ $have_python = 1 ]; then
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
if not smiles:
    sys.exit("no SMILES in %s/*.csv.gz" % data)
with open(out + ".part", "w", newline="") as f:
    f.write("smiles\n")
    for i in range(rows):
        s = smiles[i % len(smiles)]
        f.write('"%s"\n' % s.replace('"', '""') if ("," in s or '"' in s) else s + "\n")
os.rename(out + ".part", out)
print("wrote %d rows (%d distinct SMILES) to %s" % (rows, len(smiles), out), file=sys.stderr)
PY
    else
        for f in "$data"/*.csv.gz; do
            gzip -dc "$f" | awk -F, 'NR == 1 { c = 1; for (i = 1; i <= NF; i++)
                                                  if (tolower($i) == "smiles") c = i; next }
                                     NF && !/"/ { print $c }'
        done > "$work/smiles.txt"
        awk -v n="$rows" '{ s[k++] = $0 }
            END { if (!k) exit 1; print "smiles"; for (i = 0; i < n; i++) print s[i % k] }' \
            "$work/smiles.txt" > "$in.part"
        mv "$in.part" "$in"
        echo "wrote $rows rows ($(wc -l < "$work/smiles.txt") distinct SMILES) to $in" >&2
        rm -f "$work/smiles.txt"
    fi
fi

# ---- the model --------------------------------------------------------------
if [ -n "${MODEL:-}" ]; then
    model=$MODEL
    [ -s "$model" ] || { echo "predict_memory.sh: MODEL=$model: no such file" >&2; exit 1; }
else
    model="$work/model/model.mpm"
    if [ ! -s "$model" ]; then
        "$bin" train --data "$data/esol.csv.gz" --epochs 5 --quiet --save-dir "$work/model" \
            >/dev/null
    fi
fi

# ---- the run, measured ------------------------------------------------------
# Writes "PEAK_KB SECONDS EXIT_STATUS" to $work/peak.txt; samples to $rss_log
# ("seconds VmRSS_kB VmHWM_kB bytes_of_predictions_written"), so a run cut
# short shows its rate and its memory so far.
set -- "$bin" predict --model "$model" --data "$in" --out "$work/pred.csv" \
    --threads "$threads" --device "$device" --chunk-rows "$chunk" --quiet
rm -f "$work/peak.txt"
if [ $have_python = 1 ]; then
    python3 - "$work/peak.txt" "$rss_log" "$@" <<'PY' || true
import glob, os, resource, subprocess, sys, time
peak_path, log_path, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
out_glob = cmd[cmd.index("--out") + 1] + ".tmp.*"   # the predictions so far
def written():
    return sum(os.path.getsize(f) for f in glob.glob(out_glob) if os.path.isfile(f))
def status(pid):
    v = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    v[k] = int(rest.split()[0])
    except OSError:
        pass
    return v
t0 = time.monotonic()
p = subprocess.Popen(cmd)
with open(log_path, "w") as log:
    while p.poll() is None:
        v = status(p.pid)
        if v:
            log.write("%.0f %d %d %d\n" % (time.monotonic() - t0, v.get("VmRSS", 0),
                                           v.get("VmHWM", 0), written()))
            log.flush()
        try:
            p.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
secs = time.monotonic() - t0
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss   # KB on Linux
with open(peak_path, "w") as f:
    f.write("%d %.3f %d\n" % (peak, secs, p.returncode))
PY
else
    t0=$(date +%s)
    "$@" &
    pid=$!
    hwm=0
    : > "$rss_log"
    while kill -0 "$pid" 2>/dev/null; do
        v=$(awk '/^VmRSS:/ {r = $2} /^VmHWM:/ {h = $2} END {if (h) print r, h}' \
            "/proc/$pid/status" 2>/dev/null || true)
        if [ -n "$v" ]; then
            hwm=${v#* }
            bytes=$(cat "$work"/pred.csv.tmp.* 2>/dev/null | wc -c)
            echo "$(($(date +%s) - t0)) $v $bytes" >> "$rss_log"
        fi
        sleep 1
    done
    rc=0
    wait "$pid" || rc=$?
    echo "$hwm $(($(date +%s) - t0)) $rc" > "$work/peak.txt"
fi
read -r peak secs rc < "$work/peak.txt"
if [ "$rc" != 0 ]; then
    echo "predict_memory.sh: molprop predict exited with status $rc" >&2
    exit 1
fi
lines=$(($(wc -l < "$work/pred.csv") - 1))
rate=$(awk -v n="$lines" -v s="$secs" 'BEGIN {printf "%.0f", (s > 0 ? n / s : 0)}')
how=$([ $have_python = 1 ] && echo "getrusage" || echo "VmHWM polled")
echo "rows $rows  predicted $lines  wall ${secs} s ($rate rows/s, --threads $threads, --device $device)  peak RSS $((peak / 1024)) MiB ($peak KB, $how)"
rm -f "$work/pred.csv"
