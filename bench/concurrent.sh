#!/bin/sh
# concurrent.sh - issue 12's measurements, side by side in one run, from the
# repository root with the binary in $BIN (default build/) and the datasets
# in $DATA (default data/, or /work/shared/datasets where that holds them):
#   cpu    esol, D-MPNN at Chemprop's defaults (30 epochs, batch 50):
#          one model (all threads, and one thread), an ensemble of 5 with its
#          members side by side (--member-jobs auto: min(5, --threads)), and
#          the same ensemble one member after another (--member-jobs 1);
#          goal: the ensemble of 5 in at most 3.5x one model's time;
#   gpu    hiv at batch 50 on the GPU in bf16: one model, an ensemble of 5
#          side by side (auto: all 5, one stream each) and one after another;
#          goal: at most 1.5x one model's time;
#   hpopt  20 hpopt trials on hiv (30 epochs each, configs/hpopt/chemprop.ini),
#          $HPOPT_JOBS (default 10) side by side on the GPU in bf16, and the
#          same search with --halving (successive halving, eta 3: every trial
#          to 3 epochs, a third of them on to 10, a third of those to 30),
#          and (variant "alone", not run by default) the same trials one
#          after another (--jobs 1): what side by side buys over them;
#          goal: under 3 min; the wall time of each, and what its trials
#          file holds (trials to the full epochs, stopped, failed).
# The times are training seconds from each run's metrics.json (featurization
# excluded; the same features read once per run) and the wall time of the
# command.  The three ensembles' model files are compared: side by side and
# one after another must be byte for byte the same.
# PARTS="cpu" runs only that part (default: cpu gpu hpopt); EPOCHS overrides
# the 30 epochs (a quick look), THREADS the cpu threads (default: all cores);
# IN_TURN=0 leaves out the ensembles one member after another (5 models' time
# each).  The cpu part also trains the one model on one thread: on a loaded
# machine two-thread OpenMP regions wait for descheduled threads, which the
# members side by side (one thread each there) do not.
set -u
PARTS=${PARTS:-cpu gpu hpopt}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
BIN=${BIN:-build}
M="$BIN/molprop"
OUT=${OUT:-/tmp/molprop-concurrent}
EPOCHS=${EPOCHS:-30}
THREADS=${THREADS:-$(nproc)}
HPOPT_JOBS=${HPOPT_JOBS:-10}
IN_TURN=${IN_TURN:-1}
if [ -z "${DATA:-}" ]; then
    DATA=data
    [ -f "$DATA/esol.csv.gz" ] || DATA=/work/shared/datasets
fi
mkdir -p "$OUT"
fail=0

now() { date +%s.%N; }
train_s() { sed -n 's/.*"train_seconds":[[:space:]]*\([0-9.e+-]*\).*/\1/p' "$1/metrics.json"; }
# run NAME ARGS...: molprop train into $OUT/NAME; prints "NAME train_s wall_s"
run() {
    name=$1
    shift
    rm -rf "$OUT/$name"
    t0=$(now)
    if ! "$M" train "$@" --quiet --save-dir "$OUT/$name" > "$OUT/$name.log" 2>&1; then
        echo "$name: failed (see $OUT/$name.log)"
        fail=1
        return
    fi
    t1=$(now)
    printf "%-28s %10.2f %10.2f\n" "$name" "$(train_s "$OUT/$name")" \
        "$(awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }')" | tee -a "$OUT/times.tsv"
}
ratio() {   # ratio A B: train seconds of A over B
    awk -v a="$(train_s "$OUT/$1")" -v b="$(train_s "$OUT/$2")" 'BEGIN { printf "%.2f", a / b }'
}
same() {    # same A B: the two model files byte for byte
    if cmp -s "$OUT/$1/model.mpm" "$OUT/$2/model.mpm"; then
        echo "$1 and $2: the same model, byte for byte"
    else
        echo "$1 and $2: THE MODELS DIFFER"
        fail=1
    fi
}

echo "molprop concurrent members: $(git rev-parse --short HEAD 2>/dev/null) $(date -u +%F) \
$(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee "$OUT/header.txt"
: > "$OUT/times.tsv"
printf "%-28s %10s %10s\n" run train_s wall_s

if part cpu; then
    echo "== cpu: esol, D-MPNN defaults, $EPOCHS epochs, --threads $THREADS"
    common="--data $DATA/esol.csv.gz --epochs $EPOCHS --threads $THREADS"
    run cpu-esol-1 $common
    run cpu-esol-1-one-thread $common --threads 1
    run cpu-esol-5-side-by-side $common --ensemble-size 5
    echo "cpu: ensemble of 5 side by side / one model: $(ratio cpu-esol-5-side-by-side cpu-esol-1)x" \
         "(/ one model on one thread: $(ratio cpu-esol-5-side-by-side cpu-esol-1-one-thread)x;" \
         "goal <= 3.5x)"
    if [ "$IN_TURN" = 1 ]; then
        run cpu-esol-5-in-turn $common --ensemble-size 5 --member-jobs 1
        echo "cpu: one after another / one model: $(ratio cpu-esol-5-in-turn cpu-esol-1)x"
        same cpu-esol-5-side-by-side cpu-esol-5-in-turn
    fi
fi

if part gpu; then
    echo "== gpu: hiv, batch 50, bf16, $EPOCHS epochs"
    common="--data $DATA/hiv.csv.gz --epochs $EPOCHS --batch-size 50 --device gpu --precision bf16"
    run gpu-hiv-1 $common
    run gpu-hiv-5-side-by-side $common --ensemble-size 5
    echo "gpu: ensemble of 5 side by side / one model: $(ratio gpu-hiv-5-side-by-side gpu-hiv-1)x" \
         "(goal <= 1.5x)"
    if [ "$IN_TURN" = 1 ]; then
        run gpu-hiv-5-in-turn $common --ensemble-size 5 --member-jobs 1
        echo "gpu: one after another / one model: $(ratio gpu-hiv-5-in-turn gpu-hiv-1)x"
        same gpu-hiv-5-side-by-side gpu-hiv-5-in-turn
    fi
fi

# hp_run NAME ARGS...: molprop hpopt into $OUT/NAME with the hpopt part's
# settings and ARGS; prints "NAME - wall_s" and what the trials file holds
hp_run() {
    name=$1
    shift
    rm -rf "$OUT/$name"
    t0=$(now)
    # $HPOPT_DEVICE unquoted: several words
    if ! "${HP_BIN:-$M}" hpopt --trials "$HPOPT_TRIALS" --space "$HPOPT_SPACE" --jobs "$HPOPT_JOBS" \
           --keep none --out "$OUT/$name" --data "$HPOPT_DATA" --epochs "$EPOCHS" \
           $HPOPT_DEVICE --quiet "$@" > "$OUT/$name.log" 2>&1; then
        echo "$name: failed (see $OUT/$name.log)"
        fail=1
        return
    fi
    t1=$(now)
    printf "%-28s %10s %10.2f\n" "$name" - "$(awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }')" \
        | tee -a "$OUT/times.tsv"
    f="$OUT/$name/trials.jsonl"
    echo "$name: $(grep -c '"status":"ok"' "$f") trials to $EPOCHS epochs," \
         "$(grep -c '"status":"stopped"' "$f") stopped, $(grep -c '"status":"failed"' "$f")" \
         "failed; $(sed -n 1p "$OUT/$name.log")"
}

if part hpopt; then
    # HPOPT_TRIALS (20), HPOPT_DATA ($DATA/hiv.csv.gz), HPOPT_DEVICE ("--device
    # gpu --precision bf16"), HPOPT_SPACE (Chemprop's), HPOPT_VARIANTS ("plain
    # halving": the search as it is and with --halving, eta 3, rungs
    # epochs/9 and epochs/3; "alone": the same trials with --jobs 1; "old":
    # the plain search with the binary $HPOPT_OLD, e.g. HPOPT_VARIANTS="old
    # plain old plain" to alternate an older build with this one) for a
    # small run: see bench/RESULTS.md
    HPOPT_TRIALS=${HPOPT_TRIALS:-20}
    HPOPT_DATA=${HPOPT_DATA:-$DATA/hiv.csv.gz}
    HPOPT_DEVICE=${HPOPT_DEVICE:---device gpu --precision bf16}
    HPOPT_SPACE=${HPOPT_SPACE:-configs/hpopt/chemprop.ini}
    HPOPT_VARIANTS=${HPOPT_VARIANTS:-plain halving}
    echo "== hpopt: $HPOPT_TRIALS trials on $(basename "$HPOPT_DATA"), $EPOCHS epochs each," \
         "$HPOPT_JOBS side by side, $HPOPT_DEVICE"
    for v in $HPOPT_VARIANTS; do
        case $v in
            plain) hp_run "hpopt-$HPOPT_TRIALS" ;;
            halving) hp_run "hpopt-$HPOPT_TRIALS-halving" --halving ;;
            alone) hp_run "hpopt-$HPOPT_TRIALS-alone" --jobs 1 ;;
            old) if [ -x "${HPOPT_OLD:-}" ]; then
                     HP_BIN=$HPOPT_OLD
                     hp_run "hpopt-$HPOPT_TRIALS-old"
                     HP_BIN=
                 else
                     echo "hpopt: variant old needs HPOPT_OLD, an older molprop binary"; fail=1
                 fi ;;
            *) echo "hpopt: unknown variant $v (plain, halving, alone, old)"; fail=1 ;;
        esac
    done
    echo "hpopt: goal < 180 s for 20 trials on hiv, 30 epochs, bf16"
fi
exit $fail
