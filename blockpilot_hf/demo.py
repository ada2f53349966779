"""`blockpilot demo`: the embedded default (SmolLM2-135M-Instruct + our drafter and policy) on real prompts.

    blockpilot demo                       # 2 GSM8K, 1 HumanEval, 1 MT-Bench prompt; minutes on 2 CPU cores
    blockpilot demo --limit 6 --max-new-tokens 96 --repeats 5 --json demo.json
    blockpilot demo --dtype bfloat16      # faster on AVX512-BF16 CPUs, but not token-identical (see README)

Nothing is downloaded. Per prompt it prints the block size BlockPilot chose, tau (tokens per target forward),
tokens/s, the speed-up over plain `generate` (the median of `--repeats` interleaved pairs, with their range,
flagged when the machine's load made it too wide to trust), and whether the output is token-for-token
identical to plain greedy `generate`; then a summary. The runs are the benchmark harness's
(`blockpilot_hf.bench`), with two arms: the baseline and BlockPilot.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .bench.config import BASELINE, BLOCKPILOT, BenchConfig, fixed_arm
from .cli_args import Command, check_choice
from .constants import DTYPES

if TYPE_CHECKING:  # the bench modules import torch; `blockpilot --help` must not
    from .bench.harness import BenchModels
    from .bench.metrics import ArmSummary
    from .bench.runs import RunRecord

DEMO_SOURCES = ("gsm8k", "humaneval", "mt-bench")
NOISY_SPREAD = 0.15  # a prompt's repeated speed-ups further apart than this are flagged as not trustworthy


@dataclass
class DemoConfig:
    """Options of `blockpilot demo`."""

    limit: int = field(default=4, metadata={"help": "prompts, taken in turn from GSM8K, HumanEval, GSM8K, MT-Bench"})
    max_new_tokens: int = field(default=128, metadata={"help": "new tokens per prompt"})
    repeats: int = field(default=3, metadata={"help": "interleaved timed pairs (plain, BlockPilot) per prompt"})
    dtype: str = field(
        default="float32",
        metadata={"help": "float32 (exact: identical to plain generate) or bfloat16 (faster on AVX512-BF16 CPUs)"},
    )
    json: str = field(default="", metadata={"help": "also write the numbers to this JSON file; unset = no file"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})

    def __post_init__(self) -> None:
        if self.limit < 1 or self.max_new_tokens < 1 or self.repeats < 1:
            raise ValueError("--limit, --max-new-tokens and --repeats must be >= 1.")
        check_choice("--dtype", self.dtype, DTYPES[:2])


@dataclass
class DemoRow:
    """One prompt: what the speculative arm did next to plain `generate` on the same prompt."""

    prompt_id: str
    dataset: str
    shape: str  # the draft shape that ran: a block size ("4") or e.g. "8+lookup10"
    tau: float
    tokens_per_second: float
    baseline_tokens_per_second: float
    speedup: float
    speedup_low: float  # the range of the speed-up over the repeated pairs
    speedup_high: float
    identical: bool
    new_tokens: int

    @property
    def noisy(self) -> bool:
        """The repeated pairs disagree by more than NOISY_SPREAD: the machine's load changed while measuring."""
        return self.speedup_high > self.speedup_low * (1 + NOISY_SPREAD)


@dataclass
class DemoResult:
    """Per-prompt rows and the summary (geometric-mean speed-up, identical share) of the speculative arm."""

    arm: str
    rows: list[DemoRow]
    summary: ArmSummary
    baseline: ArmSummary


def demo_prompts(limit: int):
    """`limit` eval-split prompts: GSM8K, HumanEval, GSM8K, MT-Bench, then round-robin over the sources."""
    from .data import load_prompts

    order = ["gsm8k", "humaneval", "gsm8k", "mt-bench"]
    order += [DEMO_SOURCES[i % 3] for i in range(max(limit - len(order), 0))]
    counts = {s: order[:limit].count(s) for s in DEMO_SOURCES}
    pools = {s: load_prompts(s, "eval", n) for s, n in counts.items() if n}
    taken = {s: 0 for s in DEMO_SOURCES}
    prompts = []
    for source in order[:limit]:
        prompts.append(pools[source][taken[source]])
        taken[source] += 1
    return prompts


def demo_bench_config(models: BenchModels, config: DemoConfig) -> tuple[BenchConfig, str]:
    """The harness settings of the demo: greedy, first turns only, baseline + BlockPilot (or, without a
    policy, the drafter's training block size). Returns the config and the speculative arm's name."""
    size = int(models.drafter.config.block_size)
    arms = [BASELINE, BLOCKPILOT] if models.policy is not None else [BASELINE, "fixed"]
    bench = BenchConfig(
        datasets=list(DEMO_SOURCES),
        limit=config.limit,
        temperatures=[0.0],
        block_sizes=[size],
        arms=arms,
        max_new_tokens=config.max_new_tokens,
        max_turns=1,
        dev_limit=0,
        repeats=config.repeats,
        dtype=config.dtype,
        policy="embedded",
        drafter="embedded",
    )
    return bench, BLOCKPILOT if models.policy is not None else fixed_arm(size)


def demo_row(records: list[RunRecord], arm: str) -> DemoRow:
    """The row of one prompt from its baseline and speculative records."""
    from .bench.metrics import by_unit, speedup, speedup_range

    arms = next(iter(by_unit(records).values()))
    run, base = arms[arm], arms[BASELINE]
    low, high = speedup_range(run, base)
    return DemoRow(
        prompt_id=run.prompt_id,
        dataset=run.dataset,
        shape=run.shape or str(run.block_size or 1),
        tau=run.tau or 1.0,
        tokens_per_second=run.tokens_per_second,
        baseline_tokens_per_second=base.tokens_per_second,
        speedup=speedup(run, base),
        speedup_low=low,
        speedup_high=high,
        identical=bool(run.identical),
        new_tokens=run.new_tokens,
    )


def progress_line(r: DemoRow) -> str:
    """The line printed as a prompt finishes (rich markup), within 80 columns; tokens/s wait for the table."""
    return (
        f"{r.prompt_id:<13} {r.shape:<17} tau {r.tau:4.2f}  {r.speedup:4.2f}x ({r.speedup_low:.2f}-{r.speedup_high:.2f})"
        f"{' [yellow]noisy[/yellow]' if r.noisy else ''}  {'identical' if r.identical else '[red]DIFFERENT[/red]'}"
    )


def run_demo(models: BenchModels, config: DemoConfig, prompts=None, console=None) -> DemoResult:
    """Run the demo prompts through the harness, print a line per prompt as it finishes; return the rows."""
    from .bench.harness import run_benchmark
    from .bench.metrics import ALL, summarize

    bench, arm = demo_bench_config(models, config)
    prompts = prompts if prompts is not None else demo_prompts(config.limit)
    rows: list[DemoRow] = []

    def report(records: list[RunRecord]) -> None:
        rows.append(demo_row(records, arm))
        if console is not None:
            console.print(progress_line(rows[-1]))

    records = run_benchmark(models, bench, prompts, progress=console is not None, on_unit=report)
    summaries = {s.arm: s for s in summarize(records) if s.dataset == ALL}
    return DemoResult(arm, rows, summaries[arm], summaries[BASELINE])


def render(result: DemoResult, console) -> None:
    """A rich table: one row per prompt, then the summary row."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=f"{result.arm} vs plain generate (greedy, same run)",
        caption="speed-up: tokens/s over plain generate's on the same prompt; summary: geometric mean",
        # no column rules and one space of padding: the table fits an 80-column terminal
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )
    for name in ("prompt", "draft shape", "tau", "tok/s", "plain tok/s", "speed up", "range", "same as plain"):
        # the prompt and the shape (8+tree12+lookup7) stay whole; numbers take their width, headers wrap to it
        whole = name in ("prompt", "draft shape")
        table.add_column(
            name,
            justify="left" if name == "prompt" else "right",
            no_wrap=whole,
            max_width=None if whole else {"range": 9, "tok/s": 6, "plain tok/s": 6}.get(name, 5),
        )
    for r in result.rows:
        table.add_row(
            r.prompt_id,
            r.shape,
            f"{r.tau:.2f}",
            f"{r.tokens_per_second:.1f}",
            f"{r.baseline_tokens_per_second:.1f}",
            f"{r.speedup:.2f}x",
            f"{r.speedup_low:.2f}-{r.speedup_high:.2f}" + (" [yellow]noisy[/yellow]" if r.noisy else ""),
            "yes" if r.identical else "[red]NO[/red]",
        )
    s, b = result.summary, result.baseline
    identical = sum(r.identical for r in result.rows)
    table.add_section()
    table.add_row(
        "summary",
        f"mean block {s.mean_block_size or 1:.1f}",
        f"{s.tau or 1.0:.2f}",
        f"{s.tokens_per_second:.1f}",
        f"{b.tokens_per_second:.1f}",
        f"{s.speedup:.2f}x",
        "",
        f"{identical}/{len(result.rows)}",
    )
    console.print(table)
    noisy = sum(r.noisy for r in result.rows)
    if noisy:
        console.print(
            f"[yellow]{noisy} of {len(result.rows)} prompts had repeated speed-ups more than "
            f"{NOISY_SPREAD:.0%} apart: the machine's speed changed while measuring (other processes, or neighbours "
            "on a shared host); trust the medians less, or rerun with more --repeats.[/yellow]"
        )


def write_json(result: DemoResult, path: Path, device) -> None:
    """The demo's numbers plus the environment, as JSON."""
    from .bench.report import Environment

    data = {"environment": asdict(Environment.capture(device)), **asdict(result)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def load_demo_models(dtype: str = "float32") -> BenchModels:
    """The embedded default; a missing asset becomes a one-line error instead of a traceback."""
    import torch

    from .embedded import load_embedded

    try:
        target, tokenizer, drafter, policy = load_embedded(getattr(torch, dtype))
    except (FileNotFoundError, ImportError, OSError) as err:
        raise SystemExit(f"blockpilot demo: {err}") from err
    from .bench.harness import BenchModels

    return BenchModels(target, tokenizer, drafter, policy)


def _run(config: DemoConfig) -> None:
    import torch
    from rich.console import Console

    from .decoding.row_attention import wants_row_attention

    if config.threads > 0:
        torch.set_num_threads(config.threads)
    console = Console()
    with console.status(f"Loading the embedded default (SmolLM2-135M-Instruct + drafter and policy, {config.dtype})"):
        models = load_demo_models(config.dtype)
    if models.policy is None:
        console.print("[yellow]The embedded policy is missing: using the drafter's training block size.[/yellow]")
    result = run_demo(models, config, console=console)
    render(result, console)
    if config.dtype != "float32" and not wants_row_attention(models.target):
        console.print(
            f"This CPU's {config.dtype} products round differently by row count, so a verify pass rounds "
            "differently from one-token steps and outputs can differ from plain generate in the same dtype (both "
            "are the model's greedy text up to rounding). float32, the default, is token-identical."
        )
    if config.json:
        write_json(result, Path(config.json), models.target.device)
        console.print(f"wrote {config.json}")


COMMANDS = (Command("demo", "the embedded default on a few real prompts, next to plain generate", _run, (DemoConfig,)),)
