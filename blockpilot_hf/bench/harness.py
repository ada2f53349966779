"""Run every arm on the same prompts, interleaved per prompt, and record one `RunRecord` per run.

    records = run_benchmark(models, BenchConfig(datasets=["gsm8k"], limit=2), out=Path("results"))

For each prompt turn (at one temperature and seed) all arms run back to back, in an order that rotates from
prompt to prompt, so machine drift (thermal throttling, a busy neighbour) hits every arm alike. Each arm is
warmed up once before anything is timed. Sampled runs reseed torch with the same seed before every arm.
MT-Bench's second turn is asked after the baseline's own answer to the first, the same text for every arm.
Finished runs are appended to `raw.jsonl` per prompt turn; a rerun skips what is there.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..data import Prompt, chat_input_ids
from ..decoding.kernels import cpu_kernels
from ..decoding.shape import DraftShape
from ..decoding.stats import device_clock
from ..generation import sampling_kwargs
from ..jsonl import JsonlWriter
from .config import (
    BASELINE,
    BASELINE_KERNELS,
    BLOCKPILOT,
    BLOCKPILOT_ONCE,
    DFLASH_HF,
    PER_STEP,
    PROMPT_LOOKUP,
    BenchConfig,
    fixed_arm,
)
from .runs import BenchMeta, RunRecord, UnitKey, raw_writer, read_raw, weights_fingerprint

logger = logging.getLogger(__name__)


@dataclass
class BenchModels:
    """What the arms run on: an `enable`d target, its tokenizer, a DFlash drafter and an optional policy."""

    target: object
    tokenizer: object
    drafter: object
    policy: object | None = None


@dataclass(frozen=True)
class Arm:
    """One way of generating: `kind` is one of the run arms; `shape` is set for a fixed arm ("4", "1+lookup10")."""

    name: str
    kind: str
    shape: str | None = None

    @property
    def block_size(self) -> int | None:
        return DraftShape.parse(self.shape).block_size if self.shape else None


@dataclass
class BenchUnit:
    """One prompt at one temperature and seed; its turns run in order."""

    split: str
    prompt: Prompt
    temperature: float
    seed: int

    def key(self, turn: int) -> UnitKey:
        return (self.split, self.prompt.source, self.prompt.id, turn, self.temperature, self.seed)


def arms_for(config: BenchConfig, has_policy: bool) -> list[Arm]:
    """The run arms of `config` in their base order (the baseline first); BlockPilot only with a policy."""
    arms = []
    for kind in config.arms:
        if kind == "fixed":
            arms += [Arm(fixed_arm(shape), "fixed", shape) for shape in config.fixed_shapes]
        elif kind in (BLOCKPILOT, BLOCKPILOT_ONCE) and not has_policy:
            logger.warning("No policy given: the %s arm is skipped.", kind)
        else:
            arms.append(Arm(kind, kind))
    return arms


def rotated(arms: list[Arm], shift: int) -> list[Arm]:
    """`arms` started at position `shift` (cyclically), so no arm always runs first or last."""
    if not arms:
        return []
    shift %= len(arms)
    return arms[shift:] + arms[:shift]


class FirstTokenTimer:
    """A `generate` streamer that notes when the first new token arrives (the first `put` is the prompt)."""

    def __init__(self, device: torch.device):
        self.device, self.calls, self.first_token_at = device, 0, None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:
            self.first_token_at = device_clock(self.device)

    def end(self) -> None:
        pass


def _reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_memory(device: torch.device) -> int:
    """Bytes: CUDA peak allocated since the last reset, or on CPU the process's peak resident set (Linux)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return 0


def generate_kwargs(arm: Arm, models: BenchModels, temperature: float, config: BenchConfig) -> dict:
    """Arguments of `target.generate` for one arm. Sampling reads the full distribution at `temperature`
    (top-k and top-p off), so every arm samples the same law."""
    kwargs: dict = dict(return_dict_in_generate=True, **sampling_kwargs(temperature))
    pad = models.target.generation_config.pad_token_id
    if pad is None:
        kwargs["pad_token_id"] = getattr(models.tokenizer, "pad_token_id", None) or models.tokenizer.eos_token_id
    if arm.kind == PROMPT_LOOKUP:
        kwargs["prompt_lookup_num_tokens"] = config.prompt_lookup_num_tokens
    elif arm.kind == DFLASH_HF:
        kwargs.update(assistant_model=models.drafter, speculation_type="dflash")
    elif arm.kind == "fixed":
        kwargs.update(assistant_model=models.drafter, block_policy=fixed_arm(arm.shape))
    elif arm.kind == BLOCKPILOT:
        kwargs.update(assistant_model=models.drafter, block_policy=models.policy)
    elif arm.kind == BLOCKPILOT_ONCE:
        kwargs.update(assistant_model=models.drafter, block_policy=models.policy.with_decision("per-request"))
    elif arm.kind == PER_STEP:
        kwargs.update(assistant_model=models.drafter, block_policy="per-step")
    return kwargs


def measure(
    models: BenchModels,
    arm: Arm,
    input_ids: torch.Tensor,
    unit: BenchUnit,
    turn: int,
    config: BenchConfig,
    max_new_tokens: int | None = None,
) -> RunRecord:
    """Run one arm once on `input_ids` (1, T) and time it (synchronised on CUDA)."""
    target = models.target
    device = target.device
    input_ids = input_ids.to(device)
    timer = FirstTokenTimer(device)
    kwargs = generate_kwargs(arm, models, unit.temperature, config)
    torch.manual_seed(unit.seed)
    _reset_peak_memory(device)
    start = device_clock(device)
    kernels = cpu_kernels(target) if arm.kind == BASELINE_KERNELS else contextlib.nullcontext()
    with torch.inference_mode(), kernels:
        out = target.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens or config.max_new_tokens,
            streamer=timer,
            **kwargs,
        )
    total = device_clock(device) - start
    new = out.sequences[0, input_ids.shape[1] :].tolist()
    stats = getattr(out, "blockpilot", None)
    record = RunRecord(
        split=unit.split,
        dataset=unit.prompt.source,
        prompt_id=unit.prompt.id,
        turn=turn,
        temperature=unit.temperature,
        seed=unit.seed,
        arm=arm.name,
        prompt_tokens=input_ids.shape[1],
        new_tokens=len(new),
        total_time=total,
        ttft=(timer.first_token_at or start + total) - start,
        block_size=arm.block_size,
        peak_memory=_peak_memory(device),
        output_ids=new,
    )
    if stats is not None:
        record.block_size, record.shape = stats.block_size, stats.shape
        record.tau = stats.tau
        record.acceptance_lengths = stats.acceptance_lengths
        record.tokens_by_source = stats.tokens_by_source
        record.policy_time, record.draft_time, record.verify_time = (
            stats.policy_time,
            stats.draft_time,
            stats.verify_time,
        )
    if arm.kind == DFLASH_HF:
        record.block_size = models.drafter.config.block_size
    return record


def median_run(runs: list[RunRecord]) -> RunRecord:
    """The run with the median total time (the lower one of the middle two), carrying every run's time."""
    chosen = sorted(runs, key=lambda r: r.total_time)[(len(runs) - 1) // 2]
    chosen.repeat_times = [r.total_time for r in runs]
    return chosen


def mark_identical(records: list[RunRecord]) -> None:
    """For greedy runs, flag whether each arm's output equals the baseline's, token for token."""
    base = next((r for r in records if r.arm == BASELINE), None)
    for r in records:
        r.identical = (r.output_ids == base.output_ids) if base is not None and r.temperature == 0 else None


def run_unit(
    models: BenchModels,
    unit: BenchUnit,
    arms: list[Arm],
    config: BenchConfig,
    done: dict,
    writer: JsonlWriter | None,
    shift: int = 0,
) -> list[RunRecord]:
    """Every arm on every turn of `unit`; runs in `done` (key -> record) are reused, new ones written.

    Each missing arm runs `config.repeats` times, the arms interleaved in a rotating order per round so that a
    change of machine load hits all of them alike; the run with the median time is kept (all times are in
    `repeat_times`)."""
    records: list[RunRecord] = []
    answers: list[str] = []
    for turn in range(1, min(len(unit.prompt.turns), config.max_turns) + 1):
        input_ids = chat_input_ids(models.tokenizer, unit.prompt.turns[:turn], answers)
        missing = [arm for arm in rotated(arms, shift) if (*unit.key(turn), arm.name) not in done]
        runs: dict[str, list[RunRecord]] = {arm.name: [] for arm in missing}
        for round_ in range(config.repeats):
            for arm in rotated(missing, round_):
                runs[arm.name].append(measure(models, arm, input_ids, unit, turn, config))
        fresh = [median_run(runs[arm.name]) for arm in missing]
        measured = {record.arm: record for record in fresh}
        turn_records = [done.get((*unit.key(turn), arm.name)) or measured[arm.name] for arm in rotated(arms, shift)]
        mark_identical(turn_records)
        for record in fresh:
            if writer is not None:
                writer.append(record)
            done[record.key] = record
        records += turn_records
        base = next(r for r in turn_records if r.arm == BASELINE)
        answers.append(models.tokenizer.decode(base.output_ids, skip_special_tokens=True))
    return records


def warm_up(models: BenchModels, arms: list[Arm], prompt: Prompt, config: BenchConfig) -> None:
    """One short untimed run per arm: the first call of each code path pays for allocations and lazy setup."""
    input_ids = chat_input_ids(models.tokenizer, prompt.turns[:1])
    unit = BenchUnit("warmup", prompt, 0.0, 0)
    for arm in arms:
        measure(models, arm, input_ids, unit, 1, config, max_new_tokens=config.warmup_tokens)


@dataclass
class BenchPlan:
    """The units to run: dev units (greedy, baseline + grid: they choose the best fixed size), eval units."""

    dev: list[BenchUnit] = field(default_factory=list)
    eval: list[BenchUnit] = field(default_factory=list)


def plan_units(config: BenchConfig, eval_prompts: list[Prompt], dev_prompts: Iterable[Prompt] = ()) -> BenchPlan:
    """Units in run order: each prompt at each temperature and seed."""
    dev = [BenchUnit("dev", p, 0.0, 0) for p in dev_prompts]
    runs = [BenchUnit("eval", p, t, s) for p in eval_prompts for t in config.temperatures for s in config.seeds_for(t)]
    return BenchPlan(dev, runs)


def bench_meta(models: BenchModels, config: BenchConfig) -> BenchMeta:
    """The setup that results in `config.out` belong to."""
    return BenchMeta(
        target=config.target,
        drafter=config.drafter,
        policy=config.policy if models.policy is not None else "none",
        max_new_tokens=config.max_new_tokens,
        dtype=str(models.target.dtype).removeprefix("torch."),
        device=str(models.target.device),
        attn_implementation=config.attn_implementation,
        training_block_size=int(models.drafter.config.block_size),
        drafter_weights=weights_fingerprint(models.drafter),
        policy_weights=weights_fingerprint(models.policy),
    )


def run_benchmark(
    models: BenchModels,
    config: BenchConfig,
    eval_prompts: list[Prompt],
    dev_prompts: list[Prompt] = (),
    out: Path | None = None,
    progress: bool = True,
    on_unit: Callable[[list[RunRecord]], None] | None = None,
) -> list[RunRecord]:
    """Run the plan; with `out`, resume from and append to `out/raw.jsonl`. Returns every record of the plan.

    `on_unit` is called with each unit's records as they finish (the demo prints per prompt from it)."""
    from tqdm.auto import tqdm

    writer = None
    done: dict = {}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        meta, saved = bench_meta(models, config), BenchMeta.load(out)
        if saved is not None:
            saved.check_same(meta, out)
        meta.save(out)
        done = {r.key: r for r in read_raw(out)}
        writer = raw_writer(out)
    arms = arms_for(config, models.policy is not None)
    dev_arms = [a for a in arms if a.kind in (BASELINE, "fixed")]
    plan = plan_units(config, eval_prompts, dev_prompts if dev_arms[1:] else ())
    work = [(u, dev_arms) for u in plan.dev] + [(u, arms) for u in plan.eval]
    todo = [i for i, (u, a) in enumerate(work) if not _unit_done(u, a, config, done)]
    if todo:
        warm_up(models, arms, work[todo[0]][0].prompt, config)
    records: list[RunRecord] = []
    bar = tqdm(work, desc="bench", unit="prompt", disable=not progress)
    for index, (unit, unit_arms) in enumerate(bar):
        bar.set_postfix_str(f"{unit.prompt.id} T={unit.temperature:g} seed={unit.seed}")
        unit_records = run_unit(models, unit, unit_arms, config, done, writer, shift=index)
        records += unit_records
        if on_unit is not None:
            on_unit(unit_records)
    return records


def _unit_done(unit: BenchUnit, arms: list[Arm], config: BenchConfig, done: dict) -> bool:
    turns = min(len(unit.prompt.turns), config.max_turns)
    return all((*unit.key(t), a.name) in done for t in range(1, turns + 1) for a in arms)
