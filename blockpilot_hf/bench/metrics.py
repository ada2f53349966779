"""Benchmark metrics from `RunRecord`s: speed-up per prompt, the derived arms, and per-arm summaries.

Speed-up is the ratio of an arm's tokens/s to the baseline's on the same prompt turn (same temperature
and seed), aggregated with the geometric mean, so a 2x win and a 2x loss cancel and one long prompt does
not dominate.
The derived arms need no extra runs: `best-fixed` is the fixed size or shape with the best geometric-mean speed-up
on the dev prompts, `oracle` the fastest fixed size or shape measured on each prompt turn itself.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ..decoding.shape import DraftShape
from .config import (
    BASELINE,
    BEST_FIXED,
    BLOCKPILOT,
    BLOCKPILOT_ONCE,
    DFLASH_HF,
    FIXED_PREFIX,
    ORACLE,
    PER_STEP,
    PROMPT_LOOKUP,
    fixed_arm,
)
from .runs import RunRecord, UnitKey

ALL = "all"


def geometric_mean(values: Iterable[float]) -> float:
    """exp(mean(log x)); 0.0 for no values (or any non-positive value, which has no log)."""
    values = list(values)
    if not values or any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def by_unit(records: Iterable[RunRecord]) -> dict[UnitKey, dict[str, RunRecord]]:
    """unit key -> arm -> record."""
    units: dict[UnitKey, dict[str, RunRecord]] = defaultdict(dict)
    for r in records:
        units[r.unit][r.arm] = r
    return units


def speedup(record: RunRecord, baseline: RunRecord) -> float:
    """tokens/s of `record` over the baseline's on the same prompt turn."""
    base = baseline.tokens_per_second
    return record.tokens_per_second / base if base > 0 else 0.0


def speedup_range(record: RunRecord, baseline: RunRecord) -> tuple[float, float]:
    """(lowest, highest) speed-up over the repeated runs paired in order (round i of both arms); the median run's
    speed-up when either arm ran once. A wide range means the machine's load changed during the measurement."""
    pairs = list(zip(baseline.repeat_times, record.repeat_times, strict=False))
    if len(pairs) < 2 or not record.new_tokens or not baseline.new_tokens:
        one = speedup(record, baseline)
        return one, one
    tokens = record.new_tokens / baseline.new_tokens
    ratios = [tokens * base / mine for base, mine in pairs]
    return min(ratios), max(ratios)


def fixed_shape(arm: str) -> DraftShape:
    """The draft shape of a fixed arm ("fixed:4" -> 4, "fixed:1+lookup10" -> 1+lookup10)."""
    return DraftShape.parse(arm.removeprefix(FIXED_PREFIX))


def grid_shapes(records: Iterable[RunRecord]) -> list[str]:
    """The fixed sizes and shapes present in `records`, in `DraftShape` order."""
    shapes = {fixed_shape(r.arm) for r in records if r.arm.startswith(FIXED_PREFIX)}
    return [str(s) for s in sorted(shapes)]


def choose_best_fixed(records: Iterable[RunRecord]) -> str | None:
    """The fixed size or shape with the highest geometric-mean speed-up over the prompt turns that ran every one
    (ties go to the earlier shape: the smaller, cheaper one); None without fixed runs."""
    units = [arms for arms in by_unit(records).values() if BASELINE in arms]
    shapes = grid_shapes(r for arms in units for r in arms.values())
    shapes = [s for s in shapes if all(fixed_arm(s) in arms for arms in units)]
    if not shapes or not units:
        return None
    score = {s: geometric_mean(speedup(arms[fixed_arm(s)], arms[BASELINE]) for arms in units) for s in shapes}
    return max(shapes, key=lambda s: (score[s], -shapes.index(s)))


def oracle_record(arms: dict[str, RunRecord]) -> RunRecord | None:
    """The fastest fixed run of one prompt turn (ties to the earlier shape), renamed `oracle`."""
    grid = sorted((r for name, r in arms.items() if name.startswith(FIXED_PREFIX)), key=lambda r: fixed_shape(r.arm))
    if not grid:
        return None
    best = max(grid, key=lambda r: (r.tokens_per_second, -grid.index(r)))
    return best.renamed(ORACLE)


def with_derived_arms(records: list[RunRecord], best_fixed: int | str | None) -> list[RunRecord]:
    """`records` plus, per prompt turn, the oracle and the best fixed size's run (copies, no new runs)."""
    out = list(records)
    for arms in by_unit(records).values():
        oracle = oracle_record(arms)
        if oracle is not None:
            out.append(oracle)
        if best_fixed is not None and fixed_arm(best_fixed) in arms:
            out.append(arms[fixed_arm(best_fixed)].renamed(BEST_FIXED))
    return out


@dataclass
class ArmSummary:
    """One arm on one dataset ("all" = every dataset) at one temperature.

    `speedup` is the geometric mean of per-prompt-turn ratios to the baseline; `identical` the share of greedy
    outputs equal to the baseline's (None when sampling); `policy_share` the mean share of the request's time
    spent choosing the block size; `peak_memory` the largest peak seen (bytes)."""

    dataset: str
    temperature: float
    arm: str
    runs: int
    speedup: float
    tokens_per_second: float
    tau: float | None
    mean_block_size: float | None
    ttft: float
    policy_share: float
    peak_memory: int
    identical: float | None


def summarize_group(dataset: str, temperature: float, arm: str, pairs: list[tuple[RunRecord, RunRecord]]) -> ArmSummary:
    """Summary of (record, its baseline) pairs of one arm."""
    runs = [r for r, _ in pairs]
    sizes = [r.block_size for r in runs if r.block_size is not None]
    return ArmSummary(
        dataset=dataset,
        temperature=temperature,
        arm=arm,
        runs=len(runs),
        speedup=geometric_mean(speedup(r, b) for r, b in pairs),
        tokens_per_second=_mean(r.tokens_per_second for r in runs) or 0.0,
        tau=_mean(r.tau for r in runs if r.tau is not None),
        mean_block_size=_mean(sizes),
        ttft=_mean(r.ttft for r in runs) or 0.0,
        policy_share=_mean(r.policy_time / r.total_time if r.total_time > 0 else 0.0 for r in runs) or 0.0,
        peak_memory=max((r.peak_memory for r in runs), default=0),
        identical=None if temperature > 0 else _mean(float(bool(r.identical)) for r in runs),
    )


def arm_order(names: Iterable[str]) -> list[str]:
    """Baseline first, then the other run arms, the grid by size, then the derived arms."""

    def rank(name: str) -> tuple:
        if name.startswith(FIXED_PREFIX):
            shape = fixed_shape(name)
            return (2, (shape.block_size, shape.tree_budget, shape.lookup_tokens), name)
        fixed = {
            BASELINE: 0,
            PROMPT_LOOKUP: 1,
            DFLASH_HF: 1.5,
            BEST_FIXED: 3,
            BLOCKPILOT_ONCE: 3.8,
            PER_STEP: 3.9,
            BLOCKPILOT: 4,
            ORACLE: 5,
        }
        return (fixed.get(name, 2.5), (0, 0, 0), name)

    return sorted(set(names), key=rank)


def summarize(records: list[RunRecord], split: str = "eval") -> list[ArmSummary]:
    """Per dataset (and "all") x temperature x arm, over the prompt turns of `split` that have a baseline."""
    groups: dict[tuple[str, float, str], list[tuple[RunRecord, RunRecord]]] = defaultdict(list)
    for arms in by_unit(r for r in records if r.split == split).values():
        base = arms.get(BASELINE)
        if base is None:
            continue
        for record in arms.values():
            for dataset in (record.dataset, ALL):
                groups[(dataset, record.temperature, record.arm)].append((record, base))
    datasets = sorted({d for d, _, _ in groups} - {ALL}) + [ALL]
    out = []
    for dataset in datasets:
        for temperature in sorted({t for d, t, _ in groups if d == dataset}):
            for arm in arm_order(a for d, t, a in groups if d == dataset and t == temperature):
                out.append(summarize_group(dataset, temperature, arm, groups[(dataset, temperature, arm)]))
    return out
