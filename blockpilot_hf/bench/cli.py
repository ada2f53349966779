"""`blockpilot bench`: every arm side by side on held-out prompts -> raw.jsonl, results.json/.md, plots.

    blockpilot bench --datasets gsm8k,humaneval,mt-bench --limit 20 --temperatures 0,1 \
        --block-sizes 1,2,3,4,6,8 --out results/
    blockpilot bench --target Qwen/Qwen3-4B --drafter z-lab/Qwen3-4B-DFlash-b16 --policy POLICY \
        --device cuda --dtype bfloat16 --attn-implementation sdpa --out results-gpu/   # the same on a GPU

Rerunning with the same --out resumes: finished runs in raw.jsonl are kept, only missing ones run.
"""

from __future__ import annotations

from pathlib import Path

from ..cli_args import Command, checked, command_line
from .config import BenchConfig


def load_models(config: BenchConfig):
    """Target, tokenizer, drafter and policy named by `config`, on its device, dtype and attention kernel."""
    import torch

    from ..drafter import DFlashDrafter
    from ..embedded import load_policy, load_target, resolve_device, resolve_drafter
    from ..generation import enable
    from .harness import BenchModels

    drafter_path = resolve_drafter(config.drafter)  # a wrong path fails before the target loads
    dtype = getattr(torch, config.dtype)
    device = resolve_device(config.device)
    target, tokenizer = load_target(config.target, dtype)
    if config.attn_implementation:
        target.set_attn_implementation(config.attn_implementation)
    drafter = DFlashDrafter.from_pretrained(drafter_path, dtype=target.dtype)
    policy = None if config.policy.lower() == "none" else load_policy(config.policy, str(device))
    return BenchModels(enable(target.to(device)), tokenizer, drafter.to(device).eval(), policy)


def load_bench_prompts(config: BenchConfig):
    """(eval prompts, dev prompts): the eval split of each dataset, and the first `dev_limit` prompts of its
    policy split (never evaluation prompts); a .jsonl file has no dev part."""
    from ..data import DATASETS, load_prompts

    eval_prompts, dev_prompts = [], []
    for name in config.datasets:
        eval_prompts += load_prompts(name, "eval", config.limit)
        if config.dev_limit > 0 and name in DATASETS:
            dev_prompts += load_prompts(name, "policy", config.dev_limit)
    return eval_prompts, dev_prompts


def run_bench(config: BenchConfig, models=None, command: str = ""):
    """Load (unless `models` is given), run, and write every output into `config.out`; returns the report."""
    import torch

    from .harness import bench_meta, run_benchmark
    from .report import Environment, build_report, write_report

    if config.threads > 0:
        torch.set_num_threads(config.threads)
    models = models or load_models(config)
    eval_prompts, dev_prompts = load_bench_prompts(config)
    out = Path(config.out)
    records = run_benchmark(models, config, eval_prompts, dev_prompts, out=out)
    fallback = getattr(getattr(models.policy, "config", None), "best_fixed_size", None)
    report = build_report(
        records, bench_meta(models, config), Environment.capture(models.target.device), fallback, command
    )
    write_report(report, out)
    return report


def run_batch_bench(config: BenchConfig, models=None, command: str = "") -> list:
    """The batch benchmark (`--batch-size`): load, run every batch size, write batch.md/json/png into `config.out`."""
    import torch

    from .batch import run_batch_benchmark, write_batch_report

    if config.threads > 0:
        torch.set_num_threads(config.threads)
    models = models or load_models(config)
    eval_prompts, _ = load_bench_prompts(config)
    runs = run_batch_benchmark(models, config, eval_prompts)
    write_batch_report(runs, Path(config.out), command)
    return runs


def _run(config: BenchConfig) -> None:
    from ..embedded import resolve_drafter
    from .batch import MARKDOWN_NAME as BATCH_MARKDOWN
    from .report import MARKDOWN_NAME

    checked("--drafter", resolve_drafter, config.drafter)
    command = command_line("bench", config)
    if config.batch_size:
        run_batch_bench(config, command=command)
        print((Path(config.out) / BATCH_MARKDOWN).read_text(encoding="utf-8"))
        print(f"wrote {config.out}/: batch.md, batch.json, batch_speedup.png")
        return
    run_bench(config, command=command)
    print((Path(config.out) / MARKDOWN_NAME).read_text(encoding="utf-8"))
    print(f"wrote {config.out}/: raw.jsonl, results.json, results.md, *.png")


COMMANDS = (Command("bench", "benchmark every arm side by side: JSON, markdown tables, plots", _run, (BenchConfig,)),)
