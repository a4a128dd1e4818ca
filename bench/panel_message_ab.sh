#!/bin/sh
# panel_message_ab.sh - the message step on the wgmma panels (fused_cuda.cu
# k_panel_message, MOLPROP_CUDA_MESSAGE_UPDATE=2) against message +
# gemm_res_relu (MOLPROP_CUDA_MESSAGE_UPDATE=0), one binary, on a GPU:
# the kernels' tests, the forward alone (synthetic), the prediction path on
# hiv and qm9, per-op times, and molprop predict's output files both ways;
# then training (the message written out for the backward): gpu_ops steps
# and molprop train on qm9 at batch 4,096 (and hiv at 50, where the panels
# do not run), whose model files must be the same bytes both ways.
#
#   BIN=DIR DATA=DIR sh bench/panel_message_ab.sh
#
# BIN: run_tests, gpu_infer, gpu_predict, gpu_ops, molprop; DATA:
# hiv.csv.gz, qm9.csv.gz.  The output files of the two ways must be the
# same bytes.  "ov0" is the panels with MOLPROP_CUDA_PANEL_OVERLAP=0 (a
# stage's messages, then its products, not beside the previous stage's
# products): the experiment's switch.
set -u
: "${BIN:?}" "${DATA:?}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in gpu_fused gpu_tiles gpu_infer_forward_fused_equals_plain gpu_train ov0:gpu_fused; do
    E=""; case $t in ov0:*) E="MOLPROP_CUDA_PANEL_OVERLAP=0 MOLPROP_CUDA_MESSAGE_UPDATE=2"; t=${t#ov0:} ;; esac
    env $E MOLPROP_REQUIRE_GPU=1 timeout 120 "$BIN/run_tests" "$t" > /tmp/pm_t.txt 2>&1
    echo "tests $E $t: $(tail -1 /tmp/pm_t.txt)"
    grep -A3 "^FAIL" /tmp/pm_t.txt | head -12
    tail -1 /tmp/pm_t.txt | grep -q " 0 failed" || { echo "stopping: $t failed"; exit 1; }
done
fwd() { grep 'forward alone' "$1" | sed 's/.*forward alone: //' | cut -c1-40 | tr '\n' '|'; }
for round in 1 2; do
    for v in 2 0 ov0; do
        E="MOLPROP_CUDA_MESSAGE_UPDATE=$v"; [ $v = ov0 ] && E="MOLPROP_CUDA_PANEL_OVERLAP=0 MOLPROP_CUDA_MESSAGE_UPDATE=2"
        env $E "$BIN/gpu_infer" --prec bf16 --n 65536 --ops 0 4096 65536 > /tmp/pm_inf.txt 2>&1
        echo "round $round $E forward alone (4096 | 65536): $(fwd /tmp/pm_inf.txt)"
    done
done
for mu in 2 0; do
    for d in hiv; do
        MOLPROP_CUDA_MESSAGE_UPDATE=$mu MOLPROP_PREDICT_BACKENDS=cuda:bf16 \
            "$BIN/gpu_predict" "$DATA/$d.csv.gz" 4096 > /tmp/pm_pred.txt 2>&1
        echo "MESSAGE_UPDATE=$mu gpu_predict $d: $(grep "^cuda" /tmp/pm_pred.txt | tr "\n" "|")"
    done
done
for mu in 2 0; do
    MOLPROP_CUDA_MESSAGE_UPDATE=$mu "$BIN/gpu_infer" --prec bf16 --n 16384 --ops 1 4096 \
        > /tmp/pm_ops$mu.txt 2>&1
    echo "== per-op, MESSAGE_UPDATE=$mu, batch 4096"
    tail -28 /tmp/pm_ops$mu.txt
done
rm -rf /tmp/pm_m
"$BIN/molprop" train --data "$DATA/hiv.csv.gz" --epochs 2 --device gpu --precision bf16 \
    --quiet --save-dir /tmp/pm_m > /dev/null 2>&1
echo "train rc $?"
for mu in 2 0; do
    s=$(date +%s.%N)
    MOLPROP_CUDA_MESSAGE_UPDATE=$mu "$BIN/molprop" predict --model /tmp/pm_m/model.mpm \
        --data "$DATA/hiv.csv.gz" --device gpu --precision bf16 --out /tmp/pm_p$mu.csv > /dev/null 2>&1
    echo "predict MESSAGE_UPDATE=$mu rc $? $(echo "$(date +%s.%N) $s" | awk '{printf "%.2f s", $1 - $2}') md5 $(md5sum < /tmp/pm_p$mu.csv | cut -c1-12)"
done
step() { grep 'CUDA graph replay' "$1" | awk '{print $5}' | tr '\n' ' '; }
for round in 1 2; do
    for mu in 2 0; do
        MOLPROP_CUDA_MESSAGE_UPDATE=$mu "$BIN/gpu_ops" --batch 1024 --batch 4096 --prec bf16 \
            --trials 5 > /tmp/pm_ops.txt 2>&1
        echo "round $round MESSAGE_UPDATE=$mu gpu_ops bf16 step us (1024, 4096): $(step /tmp/pm_ops.txt)"
    done
done
for mu in 2 0; do
    for d in qm9:4096:20 hiv:50:3; do
        f=${d%%:*}; r=${d#*:}; b=${r%%:*}; ep=${r#*:}
        rm -rf /tmp/pm_t
        MOLPROP_CUDA_MESSAGE_UPDATE=$mu "$BIN/molprop" train --data "$DATA/$f.csv.gz" \
            --epochs "$ep" --batch-size "$b" --device gpu --precision bf16 --quiet \
            --save-dir /tmp/pm_t > /dev/null 2>&1
        echo "MESSAGE_UPDATE=$mu train $f batch $b: rc $? $(grep -o '"train_seconds":[^,]*' /tmp/pm_t/metrics.json) md5 $(md5sum < /tmp/pm_t/model.mpm | cut -c1-12)"
    done
done
