#!/bin/sh
# model_checksums.sh - trains a fixed set of small models and prints one
# checksum line per model: the SHA-256 of its parameter tensors (the model
# file minus its text header and CRC) and of its header without the
# molprop_version line.  Run it before and after a change that must not move
# a single bit (a refactor) and diff the two outputs.
#   scripts/model_checksums.sh cpu|gpu [DATA_DIR]   (MOLPROP_BIN: the binary)
# DATA_DIR holds esol.csv.gz and bbbp.csv.gz (default $MOLPROP_DATA_MIRROR).
set -u
dev=${1:-cpu}
data=${2:-${MOLPROP_DATA_MIRROR:-../shared/datasets}}
bin=${MOLPROP_BIN:-build/molprop}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sum() {   # sum NAME DIR
    python3 - "$1" "$2/model.mpm" <<'PY'
import hashlib, struct, sys
name, path = sys.argv[1], sys.argv[2]
b = open(path, "rb").read()
h = struct.unpack_from("<Q", b, 24)[0]
head = b[32:32 + h].decode()
head = "".join(l + "\n" for l in head.splitlines() if not l.startswith("molprop_version"))
print("%-34s params %s header %s" % (name, hashlib.sha256(b[32 + h:-4]).hexdigest()[:16],
                                     hashlib.sha256(head.encode()).hexdigest()[:12]))
PY
}
run() {   # run NAME ARGS...
    name=$1; shift
    if "$bin" train --quiet --save-dir "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1; then
        sum "$name" "$tmp/$name"
    else
        echo "$name FAILED"; cat "$tmp/$name.log"
    fi
}
esol="$data/esol.csv.gz"; bbbp="$data/bbbp.csv.gz"
set_models() {   # set_models PREFIX DEVICE-ARGS...
    p=$1; shift
    run "$p-dmpnn"            --data "$esol" --epochs 4 "$@"
    run "$p-dmpnn-drop-ens2"  --data "$esol" --epochs 3 --dropout 0.1 --ensemble-size 2 "$@"
    run "$p-dmpnn-v2-norm"    --data "$esol" --epochs 3 --atom-layout v2 --aggregation norm \
                              --ffn-layers 3 --depth 4 --hidden 64 "$@"
    run "$p-dmpnn-morgan-cls" --data "$bbbp" --epochs 3 --split scaffold_balanced --seed 1 \
                              --features morgan --aggregation sum "$@"
    run "$p-ffn-morgan"       --data "$esol" --epochs 4 --model ffn --features morgan "$@"
    run "$p-ffn-rdkit2d-drop" --data "$esol" --epochs 4 --model ffn --features rdkit2d \
                              --dropout 0.2 "$@"
    run "$p-ffn-cls"          --data "$bbbp" --epochs 3 --model ffn --features morgan-count "$@"
}
if [ "$dev" = cpu ]; then
    set_models cpu --device cpu
    set_models cpu-t1 --device cpu --threads 1
else
    for prec in fp32 tf32 bf16; do
        set_models "gpu-$prec" --device gpu --precision "$prec"
    done
    set_models gpu-fp32-host --device gpu --precision fp32 --resident off
    set_models gpu-bf16-eager --device gpu --precision bf16 --graph off
fi
