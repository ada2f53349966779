"""`blockpilot demo` logic with tiny models injected (the real run needs the shipped assets)."""

from __future__ import annotations

import json

import pytest
import torch

from blockpilot_hf import demo
from blockpilot_hf.cli import main
from blockpilot_hf.demo import DemoConfig, demo_prompts, run_demo
from tests.bench.tiny import tiny_models, tiny_prompts


@pytest.mark.usefixtures("private_cost_cache")  # no cached calibration: the policy chooses by tau alone
@pytest.mark.parametrize("decision", ["per-step", "per-request"])
def test_demo_reports_every_prompt_next_to_plain_generate(decision):
    models = tiny_models()
    with torch.no_grad():  # tau(2) ~= 2 and every other tau ~= 1, whatever the prompt: a choice once picks 2
        sizes = models.policy.config.candidate_sizes
        models.policy.heads[0].mlp[-1].bias.copy_(torch.tensor([30.0 if b == 2 else -30.0 for b in sizes]))
    models.policy = models.policy.with_decision(decision)
    result = run_demo(models, DemoConfig(limit=3, max_new_tokens=8), prompts=tiny_prompts())
    assert result.arm == "blockpilot"
    assert [r.prompt_id for r in result.rows] == ["gsm8k/1", "HumanEval/1", "mt-bench/1"]  # first turns only
    for row in result.rows:
        assert row.identical and row.new_tokens == 8
        if decision == "per-request":
            assert row.shape == "2" and 1 <= row.tau <= 2  # a size-2 block accepts at most 2 tokens per step
        else:
            assert row.shape == "per-step" and row.tau >= 1
        assert row.speedup == pytest.approx(row.tokens_per_second / row.baseline_tokens_per_second)
    assert result.summary.identical == 1.0 and result.summary.runs == 3 and result.baseline.speedup == 1.0


def test_demo_without_a_policy_uses_the_training_block_size():
    result = run_demo(tiny_models(with_policy=False), DemoConfig(limit=1, max_new_tokens=6), prompts=tiny_prompts()[:1])
    assert result.arm == "fixed:8" and result.rows[0].shape == "8" and result.rows[0].identical


def test_demo_command_prints_a_table_and_writes_json(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(demo, "load_demo_models", lambda dtype: tiny_models())
    monkeypatch.setattr(demo, "demo_prompts", lambda limit: tiny_prompts()[:limit])
    main(["demo", "--limit", "2", "--max-new-tokens", "6", "--json", str(tmp_path / "demo.json")])
    printed = capsys.readouterr().out
    assert "summary" in printed and "gsm8k/1" in printed and "2/2" in printed
    data = json.loads((tmp_path / "demo.json").read_text())
    assert len(data["rows"]) == 2 and data["summary"]["identical"] == 1.0 and data["environment"]["torch"]


@pytest.mark.parametrize("row_exact", [True, False])
def test_a_bfloat16_demo_warns_of_rounding_only_where_verify_passes_are_not_exact(monkeypatch, capsys, row_exact):
    from blockpilot_hf.decoding import row_attention

    monkeypatch.setattr(demo, "load_demo_models", lambda dtype: tiny_models())
    monkeypatch.setattr(demo, "demo_prompts", lambda limit: tiny_prompts()[:limit])
    monkeypatch.setattr(row_attention, "wants_row_attention", lambda model: row_exact)
    main(["demo", "--limit", "1", "--max-new-tokens", "4", "--dtype", "bfloat16"])
    assert ("round differently by row count" in capsys.readouterr().out) is not row_exact


def test_demo_prompts_take_gsm8k_humaneval_gsm8k_mtbench_from_the_eval_split():
    from blockpilot_hf.data import load_prompts

    prompts = demo_prompts(4)
    assert [p.source for p in prompts] == ["gsm8k", "humaneval", "gsm8k", "mt-bench"]
    evals = {p.id for source in ("gsm8k", "humaneval", "mt-bench") for p in load_prompts(source, "eval", 2)}
    assert {p.id for p in prompts} <= evals and len({p.id for p in prompts}) == 4


def test_missing_assets_give_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr("blockpilot_hf.embedded.EMBEDDED_DRAFTER_DIR", tmp_path / "nowhere")
    with pytest.raises(SystemExit, match="the embedded drafter is missing: .*nowhere"):
        demo.load_demo_models()


@pytest.mark.slow
def test_demo_on_the_embedded_default_is_lossless():
    result = run_demo(demo.load_demo_models(), DemoConfig(limit=2, max_new_tokens=24))
    assert [r.dataset for r in result.rows] == ["gsm8k", "humaneval"]
    assert all(r.identical for r in result.rows)


def test_the_table_fits_an_80_column_terminal_with_every_shape_whole():
    import io

    from rich.console import Console

    from blockpilot_hf.bench.metrics import ArmSummary
    from blockpilot_hf.demo import DemoResult, DemoRow, render

    shapes = ["8+tree12+lookup7", "1+lookup15", "4+tree3+lookup3"]
    rows = [
        DemoRow(f"HumanEval/11{i}", "humaneval", shape, 3.26, 120.4, 10.2, 2.0, 1.79, 2.31, i != 2, 128)
        for i, shape in enumerate(shapes)
    ]
    summary = ArmSummary("all", 0.0, "blockpilot", 3, 1.71, 19.9, 3.09, 5.2, 0.4, 0.0, 1, 2 / 3)
    baseline = ArmSummary("all", 0.0, "baseline", 3, 1.0, 11.6, None, None, 0.4, 0.0, 1, 1.0)
    out = io.StringIO()
    render(DemoResult("blockpilot", rows, summary, baseline), Console(file=out, width=80))
    printed = out.getvalue()
    assert max(len(line) for line in printed.splitlines()) <= 80
    assert "…" not in printed  # nothing cut short
    for text in [*shapes, "1.79-2.31", "120.4", "2.00x", "2/3", "mean block 5.2"]:
        assert text in printed


def test_the_line_printed_per_prompt_fits_an_80_column_terminal():
    import io

    from rich.console import Console

    from blockpilot_hf.demo import DemoRow, progress_line

    row = DemoRow("HumanEval/119", "humaneval", "8+tree16+lookup10", 13.26, 120.4, 10.2, 12.0, 9.79, 12.31, False, 128)
    out = io.StringIO()
    Console(file=out, width=80).print(progress_line(row))
    assert out.getvalue() == ("HumanEval/119 8+tree16+lookup10 tau 13.26  12.00x (9.79-12.31) noisy  DIFFERENT\n")
