#!/bin/sh
# by_atom_ab.sh - the per-atom message kernels (landed 2026-12-07) against
# an older build, on a GPU, in one command: the kernels' own tests, then
# gpu_ops steps, the trainer and inference, old and new alternated.
#
#   OLD=DIR NEW=DIR DATA=DIR sh bench/by_atom_ab.sh
#
# OLD/NEW: folders holding molprop, gpu_ops (and, NEW, run_tests and
# gpu_infer); DATA: hiv.csv.gz and qm9.csv.gz.  "nbw0" is the new build with
# MOLPROP_CUDA_BY_ATOM_BW=0 (message_backward in its two passes).  The model
# files' md5 must agree across old, new and nbw0 (the same bits: the padding
# edges' new spread moves no bit either).  tf32 runs main's fp32 per-atom
# message, which had the same padding straggler.
set -u
: "${OLD:?}" "${NEW:?}" "${DATA:?}"
for t in gpu_fused_equal_unfused gpu_ops_table_bf16 gpu_step_bf16; do
    MOLPROP_REQUIRE_GPU=1 timeout 60 "$NEW/run_tests" "$t" | tail -1
done
step() { grep 'CUDA graph replay' "$1" | awk '{print $5}' | tr '\n' ' '; }
for w in old new nbw0 old new nbw0; do
    X=$NEW; E=""; [ $w = old ] && X=$OLD; [ $w = nbw0 ] && E="MOLPROP_CUDA_BY_ATOM_BW=0"
    env $E "$X/gpu_ops" --batch 50 --batch 250 --batch 4096 --prec bf16 --trials 5 > /tmp/ab_ops.txt 2>&1
    echo "$w gpu_ops bf16 step us (50, 250, 4096): $(step /tmp/ab_ops.txt)"
done
for w in old new nbw0; do
    X=$NEW; E=""; [ $w = old ] && X=$OLD; [ $w = nbw0 ] && E="MOLPROP_CUDA_BY_ATOM_BW=0"
    for d in hiv:50:30:bf16 hiv:50:30:tf32 qm9:4096:20:bf16; do
        f=${d%%:*}; r=${d#*:}; b=${r%%:*}; r=${r#*:}; ep=${r%%:*}; p=${r#*:}
        rm -rf /tmp/ab_t
        env $E "$X/molprop" train --data "$DATA/$f.csv.gz" --epochs "$ep" --batch-size "$b" \
            --device gpu --precision "$p" --quiet --save-dir /tmp/ab_t > /dev/null 2>&1
        echo "$w $f batch $b $p: rc $? $(grep -o '"train_seconds":[^,]*' /tmp/ab_t/metrics.json) md5 $(md5sum < /tmp/ab_t/model.mpm | cut -c1-12)"
    done
done
for mu in 1 0; do
    MOLPROP_CUDA_MESSAGE_UPDATE=$mu "$NEW/gpu_infer" --prec bf16 --n 65536 --ops 0 50 4096 65536 > /tmp/ab_inf.txt 2>&1
    echo "MOLPROP_CUDA_MESSAGE_UPDATE=$mu forward alone: $(grep 'forward alone' /tmp/ab_inf.txt | sed 's/.*forward alone: //' | cut -c1-30 | tr '\n' '|')"
done
