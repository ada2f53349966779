"""The GPU check's dry run: `benchmarks/gpu_check.py --device cpu --tiny` is the code a lent GPU runs
(`benchmarks/gpu_check.sh run`), end to end on toy sizes; its one JSON has every part, with sane values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = {"float32", "make_policy", "bfloat16", "overhead", "versus_transformers", "calibrate"}


def dry_run(out: Path) -> dict:
    """Run the dry run in a fresh process (one thread, no GPU, the JSON path from GPU_CHECK_JSON); its JSON."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "GPU_CHECK_JSON": str(out)}
    script = ROOT / "benchmarks" / "gpu_check.py"
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--tiny"],
        env=env,
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_dry_run_writes_every_part_with_sane_values(tmp_path):
    check = dry_run(tmp_path / "gpu_check.json")
    assert check["errors"] == {} and set(check["seconds"]) == PARTS
    assert check["environment"]["tiny"] is True and check["environment"]["hardware"].startswith("cpu")
    shapes = check["sizes"]["shapes"]

    float32 = check["float32"]  # lossless: every shape identical to plain generate
    assert float32["identical"] == dict.fromkeys(shapes, float32["prompts"]) and float32["prompts"] >= 2
    bfloat16 = check["bfloat16"]
    assert set(bfloat16["share"]) == set(shapes) and all(0 <= s <= 1 for s in bfloat16["share"].values())
    assert bfloat16["prompts"] == check["sizes"]["bfloat16_prompts"]

    chains = [int(s) for s in shapes if s.isdigit()]
    assert [o["block_size"] for o in check["overhead"]] == chains
    assert all(
        o["steps"] >= 1 and o["engine_ms_per_token"] > 0 and o["bare_ms_per_token"] > 0 for o in check["overhead"]
    )
    assert [v["block_size"] for v in check["versus_transformers"]] == chains
    assert all(v["ratio"] > 0 and math.isfinite(v["ratio"]) for v in check["versus_transformers"])

    cost = check["calibrate"]
    assert cost["source"] == "calibrated" and cost["device"].startswith("cpu")
    assert cost["block_sizes"] == [1, *chains] and all(s > 0 for s in cost["seconds"])
    assert set(cost["shapes"]) == {s for s in shapes if not s.isdigit()}

    policy = check["make_policy"]
    assert policy["temperatures"] == [0.0, 0.6] and policy["candidate_sizes"] == [1, 2, 4, 8]
    assert policy["cost_device"].startswith("cpu")
    assert "blockpilot regret vs oracle at T=0.6" in policy["results"]
    assert all(math.isfinite(v) for v in policy["results"].values())
