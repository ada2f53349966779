"""Benchmark outputs: `results.json` (every raw number and the environment), `results.md` (a table per
dataset and temperature) and PNG plots (speed-up per dataset and arm, chosen vs oracle block sizes, tau vs
block size).
"""

from __future__ import annotations

import json
import platform
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..decoding.stats import DRAFT_SOURCES
from .config import BASELINE, BLOCKPILOT, FIXED_PREFIX, ORACLE
from .metrics import ALL, ArmSummary, arm_order
from .runs import BenchMeta, RunRecord

JSON_NAME = "results.json"
MARKDOWN_NAME = "results.md"
PLOT_NAMES = ("speedup.png", "block_sizes.png", "tau_vs_block_size.png", "token_sources.png")


@dataclass
class Environment:
    """Where the numbers were measured: versions, device and threads."""

    python: str
    platform: str
    torch: str
    transformers: str
    blockpilot_hf: str
    device: str
    threads: int
    cuda: str | None

    @classmethod
    def capture(cls, device: torch.device | str) -> Environment:
        import transformers

        from .. import __version__
        from ..policy.cost import device_name

        return cls(
            python=sys.version.split()[0],
            platform=platform.platform(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            blockpilot_hf=__version__,
            device=device_name(device),
            threads=torch.get_num_threads(),
            cuda=torch.version.cuda if torch.cuda.is_available() else None,
        )


@dataclass
class BenchReport:
    """Everything a benchmark measured and how; `records` include the derived arms (oracle, best-fixed)."""

    meta: BenchMeta
    environment: Environment
    best_fixed_size: int | str | None
    summaries: list[ArmSummary]
    records: list[RunRecord] = field(default_factory=list)
    command: str = ""
    best_fixed_from: str = "dev prompts"  # or "the policy's training runs" (the fallback without dev prompts)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self, arm: str, dataset: str = ALL, temperature: float = 0.0) -> ArmSummary | None:
        return next(
            (s for s in self.summaries if (s.arm, s.dataset, s.temperature) == (arm, dataset, temperature)),
            None,
        )


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def markdown_table(summaries: list[ArmSummary]) -> str:
    """One markdown table of arm summaries (one dataset and temperature)."""
    rows = [
        "| arm | runs | speed-up | tok/s | tau | block size | TTFT (ms) | policy share | identical | peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        rows.append(
            f"| {s.arm} | {s.runs} | {s.speedup:.2f}x | {s.tokens_per_second:.1f} | {_fmt(s.tau)} | "
            f"{_fmt(s.mean_block_size, '{:.1f}')} | {s.ttft * 1000:.0f} | {s.policy_share:.1%} | "
            f"{_fmt(s.identical, '{:.0%}')} | {s.peak_memory / 2**20:.0f} |"
        )
    return "\n".join(rows)


def speedup_overview(summaries: list[ArmSummary]) -> str:
    """One markdown table of every arm's speed-up: a column per dataset and temperature ("all" last)."""
    columns = list(dict.fromkeys((s.dataset, s.temperature) for s in summaries))
    columns.sort(key=lambda c: (c[1], c[0] == ALL))  # per temperature: the datasets in order, "all" last
    speedups = {(s.arm, s.dataset, s.temperature): s.speedup for s in summaries}
    rows = [
        "| arm | " + " | ".join(f"{d} T={t:g}" for d, t in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for arm in arm_order(s.arm for s in summaries):
        cells = [_fmt(speedups.get((arm, d, t)), "{:.2f}x") for d, t in columns]
        rows.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def markdown_report(report: BenchReport) -> str:
    """Headline, environment, the speed-up overview and a table per dataset and temperature."""
    env, meta = report.environment, report.meta
    lines = [
        "# blockpilot bench",
        "",
        f"target `{meta.target}`, drafter `{meta.drafter}` "
        f"(trained at block size {meta.training_block_size}), "
        f"policy `{meta.policy}`; {meta.max_new_tokens} new tokens, {meta.dtype} on {env.device}; "
        f"torch {env.torch}, transformers {env.transformers}, blockpilot-hf {env.blockpilot_hf}.",
        f"Best fixed size or shape ({report.best_fixed_from}): {_fmt(report.best_fixed_size, '{}')}. "
        "Speed-up: geometric mean over prompt turns of tokens/s relative to plain `generate` "
        "in the same run.",
    ]
    if report.command:
        lines += ["", f"Command: `{report.command}`"]
    lines += ["", "## Speed-up over plain `generate`", "", speedup_overview(report.summaries)]
    groups: dict[tuple[str, float], list[ArmSummary]] = defaultdict(list)
    for s in report.summaries:
        groups[(s.dataset, s.temperature)].append(s)
    for (dataset, temperature), summaries in groups.items():
        lines += ["", f"## {dataset}, T={temperature:g}", "", markdown_table(summaries)]
    return "\n".join(lines) + "\n"


def write_report(report: BenchReport, out: Path, plots: bool = True) -> list[Path]:
    """Write results.json, results.md and (optionally) the plots into `out`; return the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / JSON_NAME, out / MARKDOWN_NAME]
    paths[0].write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(markdown_report(report), encoding="utf-8")
    if plots:
        paths += make_plots(report, out)
    return paths


def make_plots(report: BenchReport, out: Path) -> list[Path]:
    """The three PNG plots (matplotlib is imported here: it is an optional dependency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [out / name for name in PLOT_NAMES]
    eval_records = [r for r in report.records if r.split == "eval"]
    for path, draw in zip(paths, (_plot_speedup, _plot_block_sizes, _plot_tau, _plot_token_sources), strict=True):
        fig = draw(plt, report.summaries, eval_records)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
    return paths


def _plot_speedup(plt, summaries: list[ArmSummary], records: list[RunRecord]):
    """Grouped bars: speed-up over plain generate per dataset, one bar per arm, one panel per temperature."""
    temperatures = sorted({s.temperature for s in summaries})
    fig, axes = plt.subplots(1, len(temperatures), figsize=(7 * len(temperatures), 4), squeeze=False)
    for ax, temperature in zip(axes[0], temperatures, strict=True):
        subset = [s for s in summaries if s.temperature == temperature]
        datasets = list(dict.fromkeys(s.dataset for s in subset))
        arms = [a for a in arm_order(s.arm for s in subset) if a != BASELINE]
        width = 0.8 / max(len(arms), 1)
        for i, arm in enumerate(arms):
            values = [next((s.speedup for s in subset if s.dataset == d and s.arm == arm), 0.0) for d in datasets]
            ax.bar([j + i * width - 0.4 + width / 2 for j in range(len(datasets))], values, width, label=arm)
        ax.axhline(1.0, color="gray", linewidth=1)
        ax.set(
            xticks=range(len(datasets)),
            xticklabels=datasets,
            ylabel="speed-up over plain generate",
            title=f"Speed-up, T={temperature:g}",
        )
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def block_size_chart(plt, oracle: list[int], chosen: list[int], unit: str, sizes: list[int] | None = None):
    """Bars: how often each block size was the per-prompt oracle's vs BlockPilot's choice, counted in `unit`s
    (prompt turns, prompts). `sizes` on the axis default to those that occur. Returns the figure."""
    counts = {ORACLE: Counter(oracle), BLOCKPILOT: Counter(chosen)}
    sizes = sorted(sizes if sizes is not None else {b for c in counts.values() for b in c})
    fig, ax = plt.subplots(figsize=(6, 4))
    for offset, arm in ((-0.2, ORACLE), (0.2, BLOCKPILOT)):
        ax.bar([i + offset for i in range(len(sizes))], [counts[arm][b] for b in sizes], width=0.4, label=arm)
    ax.set(
        xticks=range(len(sizes)),
        xticklabels=[str(b) for b in sizes],  # block sizes, or draft shapes such as 8+tree16
        xlabel="block size",
        ylabel=unit,
        title="Chosen (BlockPilot) vs oracle block sizes",
    )
    ax.legend()
    return fig


def _plot_block_sizes(plt, summaries: list[ArmSummary], records: list[RunRecord]):
    """How often BlockPilot chose each block size vs how often each size was the per-prompt oracle."""
    sizes_of = {
        arm: [r.block_size for r in records if r.arm == arm and r.block_size is not None]
        for arm in (ORACLE, BLOCKPILOT)
    }
    return block_size_chart(plt, sizes_of[ORACLE], sizes_of[BLOCKPILOT], "prompt turns")


def _plot_tau(plt, summaries: list[ArmSummary], records: list[RunRecord]):
    """Mean acceptance length of the fixed-size runs against block size, per dataset and temperature."""
    fig, ax = plt.subplots(figsize=(6, 4))
    series: dict[tuple[str, float], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.arm.startswith(FIXED_PREFIX) and r.tau is not None:
            series[(r.dataset, r.temperature)][r.block_size].append(r.tau)
    for (dataset, temperature), by_size in sorted(series.items()):
        sizes = sorted(by_size)
        ax.plot(
            sizes,
            [sum(by_size[b]) / len(by_size[b]) for b in sizes],
            marker="o",
            linestyle="-" if temperature == 0 else "--",
            label=f"{dataset}, T={temperature:g}",
        )
    ax.set(xlabel="block size", ylabel="tau (tokens per target forward)", title="tau vs block size")
    if series:
        ax.legend(fontsize=8)
    return fig


def _plot_token_sources(plt, summaries: list[ArmSummary], records: list[RunRecord]):
    """Stacked bars per arm of our engine (greedy runs, all datasets): the share of committed tokens that were
    the drafter's accepted drafts, prompt lookup's accepted copies, and the target's own tokens."""
    totals: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        if r.tokens_by_source and r.temperature == 0:
            totals[r.arm].update(r.tokens_by_source)
    arms = arm_order(totals)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(arms) + 2), 4))
    bottom = [0.0] * len(arms)
    for source in DRAFT_SOURCES:
        shares = [totals[a][source] / max(sum(totals[a].values()), 1) for a in arms]
        ax.bar(range(len(arms)), shares, bottom=bottom, label=source)
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    ax.set(
        xticks=range(len(arms)),
        xticklabels=arms,
        ylabel="share of committed tokens",
        title="Where committed tokens came from (greedy)",
    )
    ax.tick_params(axis="x", labelrotation=45)
    if arms:
        ax.legend(fontsize=8)
    return fig


def build_report(
    records: list[RunRecord],
    meta: BenchMeta,
    environment: Environment,
    fallback_best_fixed: int | None = None,
    command: str = "",
) -> BenchReport:
    """Best fixed size from the dev runs (else `fallback_best_fixed`), plus the derived arms, summarised."""
    from .metrics import choose_best_fixed, summarize, with_derived_arms

    best, source = choose_best_fixed(r for r in records if r.split == "dev"), "dev prompts"
    if best is None and fallback_best_fixed is not None:
        best, source = fallback_best_fixed, "the policy's training runs"
    full = with_derived_arms(records, best)
    return BenchReport(meta, environment, best, summarize(full), full, command, best_fixed_from=source)
