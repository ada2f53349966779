"""`blockpilot bench --batch-size 1,2,4,8`: whole batches of evaluation prompts, one `generate` call per arm.

Each batch is the first turns of consecutive eval prompts of one dataset, left-padded into one tensor. Per batch the
arms run interleaved (rotated between repeats), greedy: plain batched `generate` (the baseline), our engine at each
fixed size of the grid, and BlockPilot (each row at its own size). Speed is the batch's generated tokens (up to
each row's EOS) per second; every row is checked token for token against the baseline's.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..decoding.shape import DraftShape
from ..decoding.stats import device_clock, tokens_per_second
from .config import BASELINE, BLOCKPILOT, BenchConfig
from .harness import Arm, BenchModels, arms_for, generate_kwargs, rotated
from .metrics import geometric_mean

logger = logging.getLogger(__name__)

BATCH_ARMS = (BASELINE, "fixed", BLOCKPILOT)  # the arms that take a batch of several rows
MARKDOWN_NAME, JSON_NAME, PLOT_NAME = "batch.md", "batch.json", "batch_speedup.png"


@dataclass
class BatchRun:
    """One arm on one batch (the median of the repeats by time)."""

    batch_size: int
    dataset: str
    first_prompt: str
    arm: str
    new_tokens: int  # generated tokens of all rows, each up to its EOS
    seconds: float
    identical: bool  # every row equals the baseline's
    block_sizes: list[int]  # per row (BlockPilot's choices; the fixed size otherwise; 1 for the baseline)

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.new_tokens, self.seconds)


def first_turns_padded(tokenizer, prompts) -> dict[str, torch.Tensor | int]:
    """The first turns of `prompts`, chat-formatted and left-padded into one batch (`data.left_padded`)."""
    from ..data import chat_input_ids, left_padded

    return left_padded(tokenizer, [chat_input_ids(tokenizer, p.turns[:1])[0] for p in prompts])


def generated(sequences: torch.Tensor, prompt_width: int, eos: set[int]) -> list[list[int]]:
    """Each row's generated tokens up to and including its first EOS (plain `generate` pads after it)."""
    rows = []
    for row in sequences[:, prompt_width:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in eos), len(row))
        rows.append(row[:end])
    return rows


def run_batch(models: BenchModels, arm: Arm, inputs: dict[str, torch.Tensor], config: BenchConfig, max_new_tokens=None):
    """(seconds, generated rows, block size per row) of one arm on one batch (`first_turns_padded`)."""
    target, ids = models.target, inputs["input_ids"]
    kwargs = generate_kwargs(arm, models, 0.0, config)
    start = device_clock(target.device)
    with torch.inference_mode():
        out = target.generate(
            input_ids=ids.to(target.device),
            attention_mask=inputs["attention_mask"].to(target.device),
            max_new_tokens=max_new_tokens or config.max_new_tokens,
            **kwargs,
        )
    seconds = device_clock(target.device) - start
    eos = target.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    stats = getattr(out, "blockpilot", None)  # one GenerationStats per row; a single one for a batch of one
    if stats is None:  # the baseline
        sizes = [1] * len(ids)
    else:
        sizes = [s.block_size for s in stats] if isinstance(stats, list) else [stats.block_size]
    return seconds, generated(out.sequences, ids.shape[1], eos), sizes


def run_batch_benchmark(models: BenchModels, config: BenchConfig, prompts) -> list[BatchRun]:
    """Every batch size of `config.batch_size` over `prompts` (eval split), arms interleaved per batch."""
    from tqdm.auto import tqdm

    every = arms_for(config, models.policy is not None)
    arms = [a for a in every if a.kind in BATCH_ARMS and (a.shape is None or DraftShape.parse(a.shape).is_chain)]
    skipped = sorted({a.name for a in every} - {a.name for a in arms})
    if skipped:
        logger.warning(
            "Arms %s run one row at a time (batches draft chains): left out of the batch benchmark.", skipped
        )
    by_dataset: dict[str, list] = {}
    for prompt in prompts:
        by_dataset.setdefault(prompt.source, []).append(prompt)
    jobs = [
        (size, group[i : i + size])
        for size in config.batch_size
        for group in by_dataset.values()
        for i in range(0, len(group) - size + 1, size)
    ]
    runs: list[BatchRun] = []
    if jobs:  # untimed warm-up of every arm (first calls pay for allocations and kernel choices)
        inputs = first_turns_padded(models.tokenizer, jobs[-1][1])
        for arm in arms:
            run_batch(models, arm, inputs, config, config.warmup_tokens)
    for size, batch in tqdm(jobs, desc="bench batches", unit="batch"):
        inputs = first_turns_padded(models.tokenizer, batch)
        timed: dict[str, list] = {arm.name: [] for arm in arms}
        for repeat in range(config.repeats):
            for arm in [arms[0], *rotated(arms[1:], repeat)]:  # the baseline first: the reference output
                timed[arm.name].append(run_batch(models, arm, inputs, config))
        reference = timed[BASELINE][0][1]
        for arm in arms:
            seconds, rows, sizes = sorted(timed[arm.name], key=lambda r: r[0])[(config.repeats - 1) // 2]  # median
            tokens, identical = sum(map(len, rows)), rows == reference
            runs.append(BatchRun(size, batch[0].source, batch[0].id, arm.name, tokens, seconds, identical, sizes))
    return runs


@dataclass
class BatchSummary:
    batch_size: int
    arm: str
    batches: int
    tokens_per_second: float  # all tokens / all seconds
    speedup: float  # geometric mean over batches of tokens/s over the baseline's on the same batch
    identical: float  # share of batches whose every row equals the baseline's
    mean_block_size: float


def summarize(runs: list[BatchRun]) -> list[BatchSummary]:
    baseline = {(r.batch_size, r.first_prompt): r for r in runs if r.arm == BASELINE}
    out = []
    for size in sorted({r.batch_size for r in runs}):
        for arm in dict.fromkeys(r.arm for r in runs):
            mine = [r for r in runs if r.batch_size == size and r.arm == arm]
            if not mine:
                continue
            ratios = [r.tokens_per_second / baseline[(size, r.first_prompt)].tokens_per_second for r in mine]
            out.append(
                BatchSummary(
                    size,
                    arm,
                    len(mine),
                    tokens_per_second(sum(r.new_tokens for r in mine), sum(r.seconds for r in mine)),
                    geometric_mean(ratios),
                    sum(r.identical for r in mine) / len(mine),
                    statistics.mean(b for r in mine for b in r.block_sizes),
                )
            )
    return out


def markdown(summaries: list[BatchSummary]) -> str:
    rows = [
        "| batch | arm | batches | tok/s (whole batch) | speed-up over plain batched generate | identical | mean block |",
        "|---|---|---|---|---|---|---|",
    ]
    rows += [
        f"| {s.batch_size} | {s.arm} | {s.batches} | {s.tokens_per_second:.1f} | {s.speedup:.2f}x | "
        f"{s.identical:.0%} | {s.mean_block_size:.1f} |"
        for s in summaries
    ]
    return "\n".join(rows)


def write_batch_report(runs: list[BatchRun], out: Path, command: str = "") -> list[Path]:
    """batch.md (table), batch.json (every run) and batch_speedup.png (speed-up by batch size per arm)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    summaries = summarize(runs)
    header = f"Command: `{command}`\n\n" if command else ""
    (out / MARKDOWN_NAME).write_text(header + markdown(summaries) + "\n", encoding="utf-8")
    (out / JSON_NAME).write_text(json.dumps([asdict(r) for r in runs], indent=1), encoding="utf-8")
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in dict.fromkeys(s.arm for s in summaries if s.arm != BASELINE):
        mine = [s for s in summaries if s.arm == arm]
        ax.plot([s.batch_size for s in mine], [s.speedup for s in mine], marker="o", label=arm)
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.set(xlabel="batch size", ylabel="speed-up over plain batched generate", title="Batched decoding, greedy")
    ax.legend()
    fig.savefig(out / PLOT_NAME, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [out / MARKDOWN_NAME, out / JSON_NAME, out / PLOT_NAME]
