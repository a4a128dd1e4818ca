#!/bin/sh
# gpu_grid.sh - the paper grid on one GPU (issue 10, item 7): the 17
# datasets of the shared mirror x 5 models x seeds 0,1,2 in bf16, timed,
# runs side by side (--jobs) while the next dataset is featurized; then the
# check that a run gives the same row alone and beside others.
#
# Two sides.  HERE (with RDKit, after `make`): pack what the GPU machine
# needs - the binary, its shared libraries (RDKit, OpenBLAS, ...), the 17
# dataset files and RDKit's FragmentDescriptors.csv (the fr_* SMARTS of the
# rdkit_2d descriptors) - into .dev/grid/bundle.tgz (about 30 MB; .dev/ is
# ignored by git, so the device call must carry it):
#
#   sh bench/gpu_grid.sh prepare [MIRROR]      # MIRROR: /work/shared/datasets
#
# THERE (run tool, carry [".dev/grid"], from the repository root):
#
#   sh bench/gpu_grid.sh            # the grid, then its summary (last lines)
#   sh bench/gpu_grid.sh same       # --jobs 1 and --jobs N give identical rows
#
# Featurization runs there (16 cores; RDKit from the bundle through
# LD_LIBRARY_PATH, the SMARTS through RDDATADIR), cached under the output
# folder for the second part.  The grid is stopped at GRID_LIMIT seconds
# (default 540, inside the device's 600 s per command) with SIGTERM, which
# keeps every finished row: the same command again (machine still warm)
# resumes.  Results stay in .dev/out (OUT_DIR) between calls; results.tsv,
# grid.log and summary.txt are copied to $OUT when set (the run tool brings
# them back).  Here, `molprop bench report results.tsv --out DIR` draws the
# figures (gnuplot is not there) and `molprop bench compare results.tsv
# /work/bench-run/chemprop_v1.tsv` sets them beside Chemprop.
#
# Environment: JOBS (default 4), GRID_LIMIT (540), OUT_DIR (.dev/out),
# BUNDLE (.dev/grid/bundle.tgz), MOLPROP_BIN (the bundle's, else
# build/molprop), MIRROR (the bundle's data, else data); for a trial of the
# script on a CPU: CONFIG (configs/bench/paper.ini), DEVICE (gpu),
# PRECISION (bf16; empty: none), TOTAL (the grid's run count, 255).
set -u
PART=${1:-grid}
JOBS=${JOBS:-4}
CONFIG=${CONFIG:-configs/bench/paper.ini}
DEVICE=${DEVICE:-gpu}
PRECISION=${PRECISION-bf16}
GRID_LIMIT=${GRID_LIMIT:-540}
OUT_DIR=${OUT_DIR:-.dev/out}
BUNDLE=${BUNDLE:-.dev/grid/bundle.tgz}
DATASETS="esol freesolv lipo qm7 qm8 qm9 pdbbind_full pdbbind_core pdbbind_refined muv hiv bace bbbp tox21 toxcast sider clintox"

if [ "$PART" = prepare ]; then
    set -e
    src=${2:-/work/shared/datasets}
    bin=${MOLPROP_BIN:-build/molprop}
    frag=${RDDATADIR:-/usr/share/RDKit/Data}/FragmentDescriptors.csv
    stage=$(mktemp -d)
    mkdir -p "$stage/bin" "$stage/lib" "$stage/data" "$stage/rdkit"
    cp "$bin" "$stage/bin/molprop"
    strip "$stage/bin/molprop" 2>/dev/null || true
    ldd "$bin" | awk '/=>/ { print $3 }' | while read -r lib; do
        case "$lib" in
            */libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*) ;;
            */libcuda*|*/libcublas*|*/libcudart*) ;;   # the device's own CUDA
            *) cp -L "$lib" "$stage/lib/" ;;
        esac
    done
    for d in $DATASETS; do cp "$src/$d.csv.gz" "$stage/data/"; done
    cp "$frag" "$stage/rdkit/"
    mkdir -p .dev/grid
    tar -C "$stage" -czf .dev/grid/bundle.tgz.part bin lib data rdkit
    mv .dev/grid/bundle.tgz.part .dev/grid/bundle.tgz
    rm -rf "$stage"
    du -h .dev/grid/bundle.tgz
    echo "now, on the GPU machine: run tool, carry [\".dev/grid\"], command: sh bench/gpu_grid.sh"
    exit 0
fi

if [ -f "$BUNDLE" ]; then
    rm -rf /tmp/molprop-grid && mkdir -p /tmp/molprop-grid
    tar -C /tmp/molprop-grid -xzf "$BUNDLE" || exit 1
    export LD_LIBRARY_PATH=/tmp/molprop-grid/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export RDDATADIR=/tmp/molprop-grid/rdkit
    MIRROR=${MIRROR:-/tmp/molprop-grid/data}
    BIN=${MOLPROP_BIN:-/tmp/molprop-grid/bin/molprop}
else
    MIRROR=${MIRROR:-data}
    BIN=${MOLPROP_BIN:-build/molprop}
fi
mkdir -p "$OUT_DIR"
GRID="$OUT_DIR/grid"
total=${TOTAL:-$(( $(echo $DATASETS | wc -w) * 15 ))}

rows() { [ -f "$1" ] && awk 'NR > 1' "$1" | wc -l || echo 0; }
bring_back() {
    [ -n "${OUT:-}" ] || return 0
    for f in "$@"; do [ -f "$f" ] && cp "$f" "$OUT/"; done
}

if [ "$PART" = grid ]; then
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    before=$(rows "$GRID/results.tsv")
    echo "== $CONFIG on $DEVICE ${PRECISION:-}, $JOBS at a time" \
         "($before of $total rows already there)"
    start=$(date +%s)
    timeout -s TERM "$GRID_LIMIT" "$BIN" bench --config "$CONFIG" --data-dir "$MIRROR" \
        --device "$DEVICE" ${PRECISION:+--precision "$PRECISION"} --jobs "$JOBS" --out "$GRID" \
        > "$OUT_DIR/grid.log" 2>&1
    rc=$?
    end=$(date +%s)
    after=$(rows "$GRID/results.tsv")
    # the summary: the bench's own table, then the figures of this call
    {
        echo "dataset          model             metric  runs  test mean ± std (ddof 0)"
        awk -F'\t' 'NR > 1 { k = $2 " " $3; if (!(k in n)) order[++m] = k; n[k]++;
                              s[k] += $11; q[k] += $11 * $11; met[k] = $9 }
                    END { for (i = 1; i <= m; i++) { k = order[i]; split(k, a, " ");
                          mu = s[k] / n[k]; v = q[k] / n[k] - mu * mu;
                          printf "%-16s %-17s %-7s %4d  %.4f ± %.4f\n", a[1], a[2], met[k],
                                 n[k], mu, sqrt(v > 0 ? v : 0) } }' "$GRID/results.tsv" 2>/dev/null
        grep -iE "error|fail" "$OUT_DIR/grid.log" | head -5
        echo "per dataset: featurize s (one per dataset), train s summed over its runs, runs"
        awk -F'\t' 'NR > 1 { f[$2] = $20; t[$2] += $21; n[$2]++ }
                    END { for (d in n) printf "  %-16s %7.1f %8.1f %3d\n", d, f[d], t[d], n[d] }' \
            "$GRID/results.tsv" 2>/dev/null | sort
        echo "exit status $rc$( [ $rc = 124 ] && echo ' (stopped at GRID_LIMIT: run again to resume)')"
        echo "rows: $after of $total ($(( after - before )) this call)"
        echo "grid wall time this call: $(( end - start )) s (goal: all $total rows under 600 s;" \
             "ac9e4f4: 859 s)"
    } > "$OUT_DIR/summary.txt"
    bring_back "$GRID/results.tsv" "$OUT_DIR/grid.log" "$OUT_DIR/summary.txt"
    echo "== summary"
    cat "$OUT_DIR/summary.txt"
    exit $rc
fi

if [ "$PART" = same ]; then
    echo "== alone and side by side: identical rows (esol, bace, tox21, 5 models, 3 seeds)"
    for j in 1 "$JOBS"; do
        rm -rf "$OUT_DIR/jobs$j"
        "$BIN" bench --datasets esol,bace,tox21 --models all --seeds 0,1,2 --data-dir "$MIRROR" \
            --device gpu --precision bf16 --jobs "$j" --cache-dir "$GRID/cache" \
            --out "$OUT_DIR/jobs$j" --quiet | tail -1
        # dataset model seed split_checksum test val test_tasks best_epoch train_loss val_curve
        awk -F'\t' 'NR > 1 { print $2, $3, $4, $6, $11, $12, $13, $16, $25, $26 }' \
            "$OUT_DIR/jobs$j/results.tsv" | sort > "$OUT_DIR/jobs$j.rows"
    done
    echo "== summary"
    if cmp -s "$OUT_DIR/jobs1.rows" "$OUT_DIR/jobs$JOBS.rows"; then
        echo "identical: $(wc -l < "$OUT_DIR/jobs1.rows") runs, --jobs 1 and --jobs $JOBS"
    else
        echo "DIFFERENT rows with --jobs 1 and --jobs $JOBS:"
        diff "$OUT_DIR/jobs1.rows" "$OUT_DIR/jobs$JOBS.rows" | head -20
        exit 1
    fi
    exit 0
fi
echo "usage: sh bench/gpu_grid.sh [prepare [MIRROR] | grid | same]" >&2
exit 2
