"""Where README, docs and cards promise exactness in half precision, their figures ("N/M in bfloat16") are the
committed measurement of `benchmarks/row_attention.py`, and the file they cite is that measurement."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/results/smollm2-135m-half-precision/identical.json"
PLACES = [
    "README.md",
    "docs/gpu-qwen3.md",
    "docs/cpu-kernels.md",
    "hub_cards/qwen3-4b/README.md",
    "hub_cards/qwen3-8b/README.md",
    "hub_cards/custom_generate/README.md",
]
FIGURE = re.compile(r"(\d+/\d+)\s+in\s+(bfloat16|float16|float32)\b")

spec = importlib.util.spec_from_file_location("row_attention_benchmark", ROOT / "benchmarks" / "row_attention.py")
benchmark = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(benchmark)


def committed():
    """The committed measurement, a `benchmarks/row_attention.py` `Shares`."""
    return benchmark.load_json(benchmark.Shares, ROOT / RESULTS)


def measured() -> dict[str, str]:
    """{dtype: "identical/total"} over every shape verified with batched attention (a GPU's way)."""
    shares = committed()
    return {s.dtype: "{}/{}".format(*shares.total(s.dtype)) for s in shares.shares}


def claim_problems(text: str, figures: dict[str, str]) -> list[str]:
    """What is wrong with one place's exactness claim: a figure that is not the measurement, no bfloat16
    figure, or no mention of the results file."""
    found = FIGURE.findall(text)
    problems = [
        f"{share} in {dtype}: measured {figures.get(dtype)}" for share, dtype in found if figures.get(dtype) != share
    ]
    if "bfloat16" not in {dtype for _, dtype in found}:
        problems.append("no measured bfloat16 share")
    if RESULTS.removeprefix("benchmarks/results/") not in text:
        problems.append(f"does not cite {RESULTS}")
    return problems


@pytest.mark.parametrize("place", PLACES)
def test_each_exactness_claim_states_the_committed_measurement(place):
    assert claim_problems((ROOT / place).read_text(encoding="utf-8"), measured()) == []


def test_a_changed_figure_or_a_missing_citation_is_caught():
    figures = measured()
    good = f"{figures['bfloat16']} in bfloat16 ({RESULTS})"
    assert claim_problems(good, figures) == []
    assert claim_problems(good.replace(figures["bfloat16"], "999/999"), figures)
    assert claim_problems(good.replace(RESULTS, "elsewhere.json"), figures)


def test_the_cpu_kernels_table_is_the_measurement():
    rows = benchmark.identical_table(committed())
    page = (ROOT / "docs" / "cpu-kernels.md").read_text(encoding="utf-8").splitlines()
    assert [row for row in rows if row not in page] == []
