#!/bin/sh
# bench/chemprop/unc_v2.sh - Chemprop v2.3.1's uncertainty metrics on the
# splits bench/unc_bench.sh wrote (OUT/<dataset>-<seed>/sp/{train,val,test}.csv),
# the same models: a D-MPNN ensemble of 3 with dropout 0.1 (uncertainty
# ensemble and dropout), and for esol ensembles of 3 with the mve and
# evidential heads, for bbbp one with the dirichlet head; v1-equivalent
# featurization, mean aggregation, batch 50, CPU (ACCEL=gpu: the GPU).
#   CHEMPROP=/tmp/cpv2/bin/chemprop [ACCEL=gpu] sh bench/chemprop/unc_v2.sh OUT DATASET EPOCHS HIDDEN
# Writes OUT/chemprop_v2.tsv (dataset, seed, method, metric, value), parsed
# from the metrics chemprop predict prints; OUT/<dataset>-<seed>/v2/*.log keep
# everything it printed.
set -eu
CP=${CHEMPROP:-/tmp/cpv2/bin/chemprop}
ACCEL=${ACCEL:-cpu}   # lightning accelerator: cpu, gpu
OUT=$1 ds=$2 EPOCHS=$3 HIDDEN=$4
TSV=$OUT/chemprop_v2.tsv
[ -s "$TSV" ] || printf 'dataset\tseed\tmethod\tmetric\tvalue\n' > "$TSV"
common="-s smiles --multi-hot-atom-featurizer-mode V1 --aggregation mean -b 50 --epochs $EPOCHS
  --message-hidden-dim $HIDDEN --ffn-hidden-dim $HIDDEN --ensemble-size 3 -n 0
  --accelerator $ACCEL --devices 1"
# metrics chemprop predict logs as "chemprop.cli.predict - <name>: [v]"; a run
# that failed is recorded as metric "error" (its log says why)
grab() {  # log dataset seed method
    if grep -q "^[A-Za-z]*Error" "$1"; then
        printf '%s\t%s\t%s\terror\t%s\n' $2 $3 $4 "$(grep "^[A-Za-z]*Error" "$1" | tail -1 | tr '\t' ' ')" >> "$TSV"
        return
    fi
    sed -n 's/.*chemprop\.cli\.predict - \([a-z_-]*\): \[\(-\{0,1\}[0-9][0-9.e+-]*\)\].*/\1\t\2/p' "$1" |
        awk -v ds=$2 -v s=$3 -v u=$4 '{ printf "%s\t%s\t%s\t%s\t%s\n", ds, s, u, $1, $2 }' >> "$TSV"
}
for seed in ${SEEDS:-0 1 2}; do
    sp=$OUT/$ds-$seed/sp v=$OUT/$ds-$seed/v2
    mkdir -p "$v"
    T=$(head -1 "$sp/train.csv" | cut -d, -f2)
    if [ $ds = esol ]; then
        kinds="regression:0.1:ensemble,dropout regression-mve:0:mve regression-evidential:0:evidential-total,evidential-epistemic,evidential-aleatoric"
        ev="nll-regression miscalibration_area ence spearman"
    else
        kinds="classification:0.1:ensemble,dropout classification-dirichlet:0:classification-dirichlet"
        ev="nll-classification"
    fi
    for k in $kinds; do
        task=${k%%:*} rest=${k#*:}; drop=${rest%%:*} methods=${rest#*:}
        $CP train -i "$sp/train.csv" "$sp/val.csv" "$sp/test.csv" --target-columns "$T" -t $task \
            --dropout $drop --pytorch-seed $seed $common -o "$v/$task" > "$v/train-$task.log" 2>&1
        for u in $(echo $methods | tr ',' ' '); do
            $CP predict -i "$sp/test.csv" -s smiles --model-paths "$v/$task" -n 0 --accelerator $ACCEL \
                --devices 1 --multi-hot-atom-featurizer-mode V1 --uncertainty-method $u --evaluation-methods $ev -o "$v/$u.csv" \
                > "$v/predict-$u.log" 2>&1 || true
            grab "$v/predict-$u.log" $ds $seed $u
            [ $ds = esol ] || continue
            $CP predict -i "$sp/test.csv" -s smiles --model-paths "$v/$task" -n 0 --accelerator $ACCEL \
                --devices 1 --multi-hot-atom-featurizer-mode V1 --uncertainty-method $u --calibration-method zscaling --cal-path "$sp/val.csv" \
                --evaluation-methods $ev -o "$v/$u-zs.csv" > "$v/predict-$u-zs.log" 2>&1 || true
            grab "$v/predict-$u-zs.log" $ds $seed $u+zscaling
            $CP predict -i "$sp/test.csv" -s smiles --model-paths "$v/$task" -n 0 --accelerator $ACCEL \
                --devices 1 --multi-hot-atom-featurizer-mode V1 --uncertainty-method $u --calibration-method conformal-adaptive \
                --cal-path "$sp/val.csv" --conformal-alpha 0.1 \
                --evaluation-methods conformal-coverage-regression -o "$v/$u-conf.csv" \
                > "$v/predict-$u-conf.log" 2>&1 || true
            grab "$v/predict-$u-conf.log" $ds $seed $u+conformal-adaptive
            $CP predict -i "$sp/test.csv" -s smiles --model-paths "$v/$task" -n 0 --accelerator $ACCEL \
                --devices 1 --multi-hot-atom-featurizer-mode V1 --uncertainty-method $u \
                --calibration-method conformal-regression --cal-path "$sp/val.csv" --conformal-alpha 0.1 \
                --evaluation-methods conformal-coverage-regression -o "$v/$u-confr.csv" \
                > "$v/predict-$u-confr.log" 2>&1 || true
            grab "$v/predict-$u-confr.log" $ds $seed $u+conformal
        done
    done
    echo "$ds seed $seed done (chemprop v2)" >&2
done
