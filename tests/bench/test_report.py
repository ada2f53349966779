"""Report outputs: JSON with raw numbers and environment, a markdown table per dataset and temperature, plots;
and the `blockpilot bench` command end to end with tiny models and a JSONL prompt file."""

from __future__ import annotations

import json

from blockpilot_hf.bench.cli import run_bench
from blockpilot_hf.bench.config import BenchConfig
from blockpilot_hf.bench.report import PLOT_NAMES, Environment, build_report, write_report
from blockpilot_hf.bench.runs import BenchMeta
from blockpilot_hf.cli import build_parser
from blockpilot_hf.cli_args import dataclass_from_args
from tests.bench.tiny import rec

META = BenchMeta("tiny", "tiny", "tiny", 10, "float32", "cpu", "", 8)


def test_report_writes_json_markdown_and_plots(tmp_path):
    records = [rec("baseline", "d", 1.0, split="dev"), rec("fixed:2", "d", 0.5, split="dev")]
    for temperature in (0.0, 1.0):
        for dataset in ("gsm8k", "humaneval"):
            records += [
                rec("baseline", "a", 1.0, dataset=dataset, temperature=temperature),
                rec("fixed:2", "a", 0.5, dataset=dataset, temperature=temperature, tau=1.8),
                rec("blockpilot", "a", 0.6, dataset=dataset, temperature=temperature, block=2, tau=1.7),
            ]
    report = build_report(records, META, Environment.capture("cpu"), command="blockpilot bench --limit 1")
    assert report.best_fixed_size == "2"
    paths = write_report(report, tmp_path)
    assert [p.name for p in paths] == ["results.json", "results.md", *PLOT_NAMES]
    assert all(p.stat().st_size > 0 for p in paths)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["environment"]["torch"] and data["environment"]["threads"] >= 1
    assert len(data["records"]) == len(records) + 5 * 2  # + oracle and best-fixed per prompt turn (dev too)
    assert {r["arm"] for r in data["records"]} >= {"oracle", "best-fixed"}
    markdown = (tmp_path / "results.md").read_text()
    for heading in ("## gsm8k, T=0", "## gsm8k, T=1", "## humaneval, T=0", "## all, T=1"):
        assert heading in markdown
    assert "| fixed:2 | 1 | 2.00x |" in markdown and "blockpilot bench --limit 1" in markdown
    assert "Best fixed size or shape (dev prompts): 2." in markdown
    overview = "| arm | gsm8k T=0 | humaneval T=0 | all T=0 | gsm8k T=1 | humaneval T=1 | all T=1 |"
    assert overview in markdown
    assert "| blockpilot | 1.67x | 1.67x | 1.67x | 1.67x | 1.67x | 1.67x |" in markdown
    assert report.summary("blockpilot").speedup == 1 / 0.6


def test_report_says_where_the_best_fixed_size_came_from_without_dev_prompts():
    """Without dev runs the best fixed size is the policy's (chosen on its training runs), and the report says so."""
    records = [rec("baseline", "a", 1.0), rec("fixed:2", "a", 0.5), rec("fixed:4", "a", 0.4)]
    report = build_report(records, META, Environment.capture("cpu"), fallback_best_fixed=2)
    assert (report.best_fixed_size, report.best_fixed_from) == (2, "the policy's training runs")
    assert report.summary("best-fixed").speedup == 2.0  # fixed:2, although fixed:4 was faster on this prompt


def test_bench_command_parses_lists_into_the_config():
    args = build_parser().parse_args(
        [
            "bench",
            "--datasets",
            "gsm8k,humaneval,mt-bench",
            "--limit",
            "20",
            "--temperatures",
            "0,1",
            "--block-sizes",
            "1,2,3,4,6,8",
            "--out",
            "results/",
        ]
    )
    config = dataclass_from_args(BenchConfig, args)
    assert config.datasets == ["gsm8k", "humaneval", "mt-bench"] and config.temperatures == [0.0, 1.0]
    assert config.block_sizes == [1, 2, 3, 4, 6, 8] and config.policy == "embedded" and config.target == "smollm2"


def test_run_bench_end_to_end_on_a_jsonl_file(models, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "p1", "prompt": "Hello"}\n{"id": "p2", "turns": ["One", "Two"]}\n')
    config = BenchConfig(
        datasets=[str(prompts)],
        limit=2,
        temperatures=[0.0],
        block_sizes=[1, 4],
        shapes=[],
        arms=["baseline", "fixed", "blockpilot"],
        max_new_tokens=6,
        warmup_tokens=2,
        out=str(tmp_path / "out"),
        target="tiny",
        drafter="tiny",
        policy="tiny",
    )
    report = run_bench(config, models=models)
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "bench.json",
        "raw.jsonl",
        "results.json",
        "results.md",
        *PLOT_NAMES,
    }
    overall = report.summary("blockpilot", "all", 0.0)
    assert overall.runs == 3 and overall.identical == 1.0
    assert report.best_fixed_size is None  # no dev split in a JSONL file, and the policy has no best size
