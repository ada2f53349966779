#!/usr/bin/env bash
# Depth 3 against depth 2 at equal CPU time: two short forks of the committed drafter run, side by side.
#
#   bash benchmarks/depth_pair.sh [MINUTES]   # default 25; prints both forks' last validation record
#
# Both forks continue the committed run (training_data/smollm2-135m/drafter-run, or INIT: its weights, step count,
# learning-rate schedule and data order) with the run's own data and recipe, read from its
# training_config.json; the depth-3 fork grows a third layer whose output projections start at zero, so at its
# first step it drafts exactly what the depth-2 checkpoint does. (The committed depth-pair.json forked the first
# phase's step 1600, the folder of commit 0b7b777, with this script as of d744506.)
# Each fork gets one core to itself (taskset, one torch thread) for the same wall-clock minutes, so each gets the
# same CPU time: the deeper drafter pays for its extra layer in fewer steps. Both end with a validation pass.
# They read the target's features from FEATURES (default: the long run's cache, its config's `out`), so pause
# that run first (`pkill -STOP -f train-drafter`) and let it have computed the features of the steps the forks
# will visit; a missing feature is computed by the fork that needs it, which costs it time. Forks go to
# $OUT/depth-{2,3}.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-25}
INIT=${INIT:-training_data/smollm2-135m/drafter-run}
OUT=${OUT:-$HOME/.cache/blockpilot_hf/depth-pair}
config() {  # config KEY: the committed run's setting (a list joined by commas)
    python3 -c "import json; v = json.load(open('$INIT/training_config.json'))['$1']; print(','.join(v) if isinstance(v, list) else v)"
}
FEATURES=${FEATURES:-$(config out)/features}
# --max-minutes counts the run's whole wall clock, the committed run's included.
BEFORE=$(python3 -c "import json; print(json.load(open('$INIT/progress.json'))['elapsed'] / 60)")
LIMIT=$(python3 -c "print($BEFORE + $MINUTES)")

fork() {  # fork DEPTH CORE
    local out=$OUT/depth-$1
    rm -rf "$out" && mkdir -p "$out"
    [[ -d $FEATURES ]] && ln -s "$FEATURES" "$out/features"
    OMP_NUM_THREADS=1 taskset -c "$2" blockpilot train-drafter --target smollm2 \
        --data "$(config data)" --out "$out" --init-from "$INIT" \
        --num-layers "$1" --num-context-layers "$(config num_context_layers)" --block-size "$(config block_size)" \
        --anchors-per-sequence "$(config anchors_per_sequence)" --gamma "$(config gamma)" \
        --loss-vocab-size "$(config loss_vocab_size)" --distill-weight "$(config distill_weight)" \
        --lr "$(config lr)" --warmup "$(config warmup)" --epochs "$(config epochs)" \
        --sequences-per-step "$(config sequences_per_step)" --save-dtype "$(config save_dtype)" \
        --val-every 100000 --save-every 100000 --max-minutes "$LIMIT" >"$out.log" 2>&1
}
fork 2 0 &
fork 3 1 &
wait
for depth in 2 3; do
    echo "depth $depth: $(tail -n 1 "$OUT/depth-$depth/metrics.jsonl")"
done
