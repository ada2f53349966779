#!/usr/bin/env bash
# The GPU checks as one prepared script: the gpu-marked tests, then the engine-overhead benchmark on a random-weight
# Qwen3-4B-shaped target in bfloat16 with z-lab's drafter shape (overhead vs bare forwards with an always-right
# drafter; our loop vs transformers' speculation_type="dflash"). About 5 minutes on one H100-class GPU.
#
#   bash benchmarks/gpu_check.sh prepare   # here, with network: the wheels a bare GPU image lacks, into .whl/
#   bash benchmarks/gpu_check.sh run       # on the GPU machine, from the repository root, .whl/ beside it
#
# The GPU image's own torch is used; blockpilot_hf runs from the source tree (PYTHONPATH), so nothing is built there.
set -euo pipefail
cd "$(dirname "$0")/.."
# transformers' floor and what it needs beyond a typical CUDA image (the versions CI tests with)
WHEELS=(transformers==5.24.0 huggingface-hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5)

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
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py
    python3 benchmarks/engine_overhead.py --shape qwen3-4b --device cuda --dtype bfloat16 --new-tokens 128 \
        --prompt-tokens 256 --repeats 5 --block-sizes 4,8,16
    ;;
*)
    echo "usage: bash benchmarks/gpu_check.sh prepare|run" >&2
    exit 2
    ;;
esac
