"""Metrics math on hand-made records: per-prompt ratios, geometric means, identity share, the derived arms."""

from __future__ import annotations

import math

import pytest

from blockpilot_hf.bench.metrics import (
    choose_best_fixed,
    geometric_mean,
    oracle_record,
    speedup_range,
    summarize,
    with_derived_arms,
)
from tests.bench.tiny import rec


def test_geometric_mean():
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert geometric_mean([4.0]) == pytest.approx(4.0)
    assert geometric_mean([]) == 0.0


def test_speedup_is_a_per_prompt_ratio_then_a_geometric_mean():
    # Prompt a: baseline 1 s, arm 0.5 s (2x). Prompt b: baseline 1 s, arm 2 s (0.5x).
    # The mean of tokens/s would say 1.25x; the geometric mean of ratios says 1x.
    records = [
        rec("baseline", "a", 1.0),
        rec("fixed:4", "a", 0.5),
        rec("baseline", "b", 1.0),
        rec("fixed:4", "b", 2.0, identical=False),
    ]
    summary = {s.arm: s for s in summarize(records) if s.dataset == "all"}
    assert summary["fixed:4"].speedup == pytest.approx(1.0)
    assert summary["fixed:4"].tokens_per_second == pytest.approx((20 + 5) / 2)
    assert summary["fixed:4"].identical == pytest.approx(0.5)
    assert summary["baseline"].speedup == pytest.approx(1.0)


def test_sampled_runs_have_no_identity_share_and_policy_share_is_a_time_ratio():
    records = [
        rec("baseline", "a", 1.0, temperature=1.0),
        rec("blockpilot", "a", 0.8, temperature=1.0, block=4, policy_time=0.008),
    ]
    (s,) = [s for s in summarize(records) if s.dataset == "gsm8k" and s.arm == "blockpilot"]
    assert s.identical is None and s.policy_share == pytest.approx(0.01) and s.mean_block_size == 4
    assert s.speedup == pytest.approx(1 / 0.8)


def test_oracle_is_the_best_measured_size_per_prompt():
    records = [
        rec("baseline", "a", 1.0),
        rec("fixed:2", "a", 0.5),
        rec("fixed:4", "a", 0.8),
        rec("baseline", "b", 1.0),
        rec("fixed:2", "b", 0.9),
        rec("fixed:4", "b", 0.4),
        rec("baseline", "c", 1.0),
        rec("fixed:2", "c", 0.7),
        rec("fixed:4", "c", 0.7),
    ]  # tie -> smaller
    oracle = {r.prompt_id: r.block_size for r in with_derived_arms(records, None) if r.arm == "oracle"}
    assert oracle == {"a": 2, "b": 4, "c": 2}
    summary = {s.arm: s for s in summarize(with_derived_arms(records, None)) if s.dataset == "all"}
    assert summary["oracle"].speedup == pytest.approx(geometric_mean([2, 2.5, 1 / 0.7]))
    assert all(summary["oracle"].speedup >= summary[a].speedup for a in ("fixed:2", "fixed:4"))
    assert oracle_record({"baseline": records[0]}) is None


def test_best_fixed_comes_from_the_dev_runs_and_reuses_the_eval_runs():
    dev = [
        rec("baseline", "d1", 1.0, split="dev"),
        rec("fixed:2", "d1", 0.9, split="dev"),
        rec("fixed:4", "d1", 0.5, split="dev"),
    ]
    assert choose_best_fixed(dev) == "4"
    evals = [rec("baseline", "a", 1.0), rec("fixed:2", "a", 0.5), rec("fixed:4", "a", 0.8)]
    best = [r for r in with_derived_arms(evals, "4") if r.arm == "best-fixed"]
    assert len(best) == 1 and best[0].block_size == 4 and best[0].total_time == 0.8
    assert choose_best_fixed([rec("baseline", "a", 1.0)]) is None


def test_best_fixed_and_oracle_range_over_shapes_too():
    """Fixed draft shapes are single-shape arms like block sizes: best-fixed and the per-turn oracle include them."""
    dev = [
        rec("baseline", "d1", 1.0, split="dev"),
        rec("fixed:4", "d1", 0.5, split="dev", block=4),
        rec("fixed:1+lookup10", "d1", 0.4, split="dev", block=1),
    ]
    assert choose_best_fixed(dev) == "1+lookup10"
    evals = [rec("baseline", "a", 1.0), rec("fixed:4", "a", 0.5, block=4), rec("fixed:4+tree3", "a", 0.3, block=4)]
    oracle = [r for r in with_derived_arms(evals, None) if r.arm == "oracle"]
    assert len(oracle) == 1 and oracle[0].total_time == 0.3


def test_summaries_cover_each_dataset_and_all():
    records = [
        rec("baseline", "a", 1.0),
        rec("fixed:2", "a", 0.5, tau=1.5),
        rec("baseline", "h", 1.0, dataset="humaneval"),
        rec("fixed:2", "h", 0.25, dataset="humaneval", tau=2.5),
    ]
    summaries = summarize(records)
    assert [(s.dataset, s.arm) for s in summaries] == [
        ("gsm8k", "baseline"),
        ("gsm8k", "fixed:2"),
        ("humaneval", "baseline"),
        ("humaneval", "fixed:2"),
        ("all", "baseline"),
        ("all", "fixed:2"),
    ]
    overall = summaries[-1]
    assert overall.speedup == pytest.approx(math.sqrt(2 * 4)) and overall.tau == pytest.approx(2.0)


def test_speedup_range_pairs_repeats_in_order():
    base = rec("baseline", "p", 2.0)
    mine = rec("fixed:4", "p", 1.0)
    assert speedup_range(mine, base) == (2.0, 2.0)  # one run each: the range is the speed-up itself
    base.repeat_times, mine.repeat_times = [2.0, 3.0, 2.2], [1.0, 1.0, 2.2]
    assert speedup_range(mine, base) == pytest.approx((1.0, 3.0))
