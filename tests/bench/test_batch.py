"""`blockpilot bench --batch-size`: whole left-padded batches per arm, every row checked against plain batched
`generate`, a table, a JSON file and a plot."""

from __future__ import annotations

import json

import pytest

from blockpilot_hf.bench.batch import BatchRun, run_batch_benchmark, summarize, write_batch_report
from blockpilot_hf.bench.config import BenchConfig
from blockpilot_hf.data import Prompt


def prompts(count: int) -> list[Prompt]:
    words = ["Howmanyapples?", "Addthesenumbers:", "Whatis2+2?", "Countto5.", "Sumit.", "Splitthebill."]
    return [Prompt("gsm8k", f"gsm8k/{i}", (words[i % len(words)] * (1 + i % 3),)) for i in range(count)]


def test_batches_of_every_size_are_identical_to_plain_batched_generate(models, tmp_path):
    config = BenchConfig(batch_size=[1, 2, 4], block_sizes=[2, 4], max_new_tokens=12, repeats=2, out=str(tmp_path))
    runs = run_batch_benchmark(models, config, prompts(4))
    assert {(r.batch_size, r.arm) for r in runs} == {
        (b, arm) for b in (1, 2, 4) for arm in ("baseline", "fixed:2", "fixed:4", "blockpilot")
    }
    assert sum(r.arm == "baseline" for r in runs) == 4 + 2 + 1  # batches: 4 of one, 2 of two, 1 of four
    assert all(r.identical for r in runs)
    assert all(r.block_sizes == [4] * r.batch_size for r in runs if r.arm == "fixed:4")
    assert all(len(r.block_sizes) == r.batch_size for r in runs if r.arm == "blockpilot")
    paths = write_batch_report(runs, tmp_path, command="blockpilot bench --batch-size 1,2,4")
    assert [p.name for p in paths] == ["batch.md", "batch.json", "batch_speedup.png"]
    table = (tmp_path / "batch.md").read_text()
    assert "| 4 | blockpilot | 1 |" in table and "--batch-size 1,2,4" in table
    assert len(json.loads((tmp_path / "batch.json").read_text())) == len(runs)


def test_speedup_is_the_geometric_mean_of_batch_ratios():
    def run(arm, prompt, tokens, seconds):
        return BatchRun(2, "gsm8k", prompt, arm, tokens, seconds, True, [1, 1])

    runs = [run("baseline", "a", 10, 1.0), run("fixed:4", "a", 10, 0.5), run("baseline", "b", 10, 1.0)]
    runs.append(run("fixed:4", "b", 10, 2.0))
    [base, fixed] = summarize(runs)
    assert (base.arm, base.speedup) == ("baseline", pytest.approx(1.0))
    assert fixed.speedup == pytest.approx(1.0) and fixed.tokens_per_second == pytest.approx(20 / 2.5)


def test_batch_size_below_one_is_refused():
    with pytest.raises(ValueError, match="batch sizes must be >= 1"):
        BenchConfig(batch_size=[0, 2])
