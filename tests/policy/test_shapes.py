"""BlockPilot over draft shapes: the candidates are block sizes plus tree / prompt-lookup shapes, the cost model
prices each, collect / fit / evaluate carry them end to end, and a policy that picks a shape stays lossless."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from blockpilot_hf import DraftShape
from blockpilot_hf.policy import BlockPolicy
from blockpilot_hf.policy.config import BlockPolicyConfig, CostModel, FeatureSpec
from blockpilot_hf.policy.cost import cost_from_steps
from blockpilot_hf.testing_utils import oracle_factory, plain_greedy, synthetic_items, tiny_pair
from blockpilot_hf.training.policy.collect import CollectConfig, collect
from blockpilot_hf.training.policy.collected import CollectMeta, PromptRecord, SizeRun, read_records
from blockpilot_hf.training.policy.evaluate import evaluate_records
from blockpilot_hf.training.policy.fit import FitConfig, fit_policy

pytestmark = pytest.mark.usefixtures("private_cost_cache")

TREE, LOOKUP = DraftShape.parse("8+tree12"), DraftShape.parse("1+lookup8")
COST = CostModel(
    [1, 4, 8], [1.0e-3, 1.25e-3, 1.45e-3], "synthetic", "synthetic", {str(TREE): 1.6e-3, str(LOOKUP): 1.1e-3}
)


def test_config_lists_sizes_then_shapes_and_refuses_misplaced_ones():
    spec = FeatureSpec(8, 1, 2)
    config = BlockPolicyConfig(spec, 64, [0], candidate_sizes=[1, 4], candidate_shapes=["8+tree12", "1+lookup8"])
    assert config.candidates == [DraftShape(1), DraftShape(4), LOOKUP, TREE]
    assert config.candidate_shapes == ["1+lookup8", "8+tree12"]  # stored in order, in canonical text form
    head = BlockPolicy(config)
    assert head.sizes.tolist() == [1, 4, 9, 8]  # each candidate's bound on tau: lookup8 commits up to 9 tokens
    with pytest.raises(ValueError, match="plain block sizes belong in candidate_sizes"):
        BlockPolicyConfig(spec, 64, [0], candidate_sizes=[1, 4], candidate_shapes=["8"])
    with pytest.raises(ValueError, match="must be distinct"):
        BlockPolicyConfig(spec, 64, [0], candidate_sizes=[1, 4], candidate_shapes=["8+tree4", "8+tree4"])


def test_cost_model_prices_shapes_as_measured():
    assert COST.step_seconds("8+tree12") == 1.6e-3 and COST.step_seconds(LOOKUP) == 1.1e-3
    assert COST.step_seconds(6) == pytest.approx(1.35e-3)  # sizes still interpolate
    assert COST.covers([1, 8, TREE]) and not COST.covers([DraftShape(8, 4)])
    with pytest.raises(KeyError, match="no measurement of draft shape 8\\+tree4"):
        COST.step_seconds("8+tree4")
    built = cost_from_steps({1: [1.0], 4: [2.0, 4.0], TREE: [3.0]}, "cpu", "collected", {5: [2.0, 9.0, 3.0], 2: []})
    assert built.block_sizes == [1, 4] and built.seconds == [1.0, 3.0] and built.shapes == {"8+tree12": 3.0}
    assert built.copy_sizes == [5] and built.copy_seconds == [3.0]  # medians; sizes without times left out


def test_lookup_runs_are_priced_step_by_step():
    """A lookup step verifies its copy (the copy ladder), any other step is the shape's chain; trees and runs
    without copy data keep the shape's mean cost."""
    cost = CostModel(
        [1, 4],
        [1.0, 2.0],
        "cpu",
        "calibrated",
        {"1+lookup8": 1.1, "4+lookup3": 2.0, "4+tree3+lookup3": 3.0},
        [2, 4],
        [1.2, 1.6],
    )
    assert cost.run_seconds(LOOKUP, [0, 0, 0]) == 1.0  # never copied: plain one-token steps
    assert cost.run_seconds(LOOKUP, [3, 3]) == pytest.approx(1.6)  # verified 4 tokens each step
    assert cost.run_seconds(LOOKUP, [1, 0, 2, 0]) == pytest.approx((1.2 + 1.0 + 1.4 + 1.0) / 4)  # 3 interpolates
    assert cost.run_seconds(LOOKUP, [8]) == pytest.approx(2.6)  # beyond the ladder: its last slope
    assert cost.run_seconds("4+lookup3", [0, 3]) == pytest.approx((2.0 + 1.6) / 2)  # no copy: the drafter's chain of 4
    assert cost.run_seconds("4+tree3+lookup3", [0, 3]) == 3.0 and cost.run_seconds(LOOKUP, []) == 1.1
    assert CostModel([1], [1.0], shapes={str(LOOKUP): 1.1}).run_seconds(LOOKUP, [3]) == 1.1  # no ladder
    with pytest.raises(ValueError, match="one `copy_seconds` value per copy size"):
        CostModel([1], [1.0], copy_sizes=[2], copy_seconds=[])


def test_priced_taus_charge_a_prompt_that_copies_every_step():
    """The labels: tau scaled by the candidate's mean step over this run's; chains are unchanged, a lookup run that
    copied every step (each one verified) counts for less than its raw tau, one that never copied for more."""
    cost = CostModel([1, 8], [1.0, 1.4], "cpu", "calibrated", {str(LOOKUP): 1.1}, [4], [1.5])

    def record(copied):
        runs = [SizeRun(1, [1, 1], 2, 0, 0, 0, True), SizeRun(1, [2, 1], 3, 0, 0, 0, True, str(LOOKUP), copied)]
        return PromptRecord("p", "syn", 4, 3, 0.0, [], runs)

    assert record([3, 3]).priced_taus(cost) == {DraftShape(1): 1.0, LOOKUP: pytest.approx(1.5 * 1.1 / 1.5)}
    assert record([0, 0]).priced_taus(cost)[LOOKUP] == pytest.approx(1.5 * 1.1)


# ---- fit / evaluate on hand-made records: the best candidate depends on the prompt's kind -------------------------
KINDS = {  # measured tau per candidate; under COST the best is 8 (math), lookup (code), tree (story), 1 (chat)
    "math": {1: 1.0, 4: 3.2, 8: 5.0, LOOKUP: 1.2, TREE: 5.4},
    "code": {1: 1.0, 4: 1.3, 8: 1.4, LOOKUP: 4.5, TREE: 1.5},
    "story": {1: 1.0, 4: 2.0, 8: 2.2, LOOKUP: 1.1, TREE: 3.6},
    "chat": {1: 1.0, 4: 1.05, 8: 1.05, LOOKUP: 1.0, TREE: 1.1},
}
SPEC = FeatureSpec(8, 1, 2)


def hand_made_records(count: int, seed: int) -> list[PromptRecord]:
    """Prompts whose features carry their kind (plus noise) and whose runs have the kind's taus."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        kind = list(KINDS)[i % len(KINDS)]
        signal = [float(list(KINDS).index(kind) == j % len(KINDS)) * 3 for j in range(SPEC.size)]
        features = [s + rng.gauss(0, 0.3) for s in signal]
        runs = []
        for candidate, tau in KINDS[kind].items():
            shape = DraftShape.parse(candidate)
            steps = [round(tau * 10) - 9] + [1] * 9  # ten steps whose mean is tau
            runs.append(
                SizeRun(shape.block_size, steps, 100, 0.01, 0.1, 0.2, True, "" if shape.is_chain else str(shape))
            )
        records.append(PromptRecord(f"{kind}/{seed}/{i}", kind, 10, 100, 1.0, features, runs))
    return records


def test_fit_and_evaluate_pick_the_right_shape_per_kind():
    meta = CollectMeta("t", "d", [1, 4, 8], 100, 8, [0], 64, 8, 2, "cpu", shapes=[str(LOOKUP), str(TREE)])
    policy = fit_policy(meta, hand_made_records(40, 0), FitConfig(name="shapes"), cost=COST)
    assert policy.config.candidate_shapes == ["1+lookup8", "8+tree12"]
    heldout = hand_made_records(16, 1)
    report = evaluate_records(policy, heldout, cost=COST)
    truth = {"math": DraftShape(8), "code": LOOKUP, "story": TREE, "chat": DraftShape(1)}
    assert report.choices["oracle"] == [truth[r.source] for r in heldout]
    assert report.score("blockpilot").accuracy >= 0.9
    fixed = [s for s in report.scores if s.source == "all" and s.method.startswith(("fixed:", "best-fixed"))]
    assert {s.method for s in fixed} == {"best-fixed:8", "fixed:1+lookup8", "fixed:8+tree12"}
    assert all(report.score("blockpilot").modelled_speed > s.modelled_speed for s in fixed)


# ---- end to end on a tiny target: collect with shapes, fit, generate with the policy ------------------------------
def test_collect_fit_and_generate_with_shapes(tmp_path):
    target, drafter = tiny_pair()
    config = CollectConfig(block_sizes=[4], shapes=["4+tree6", "1+lookup3"], max_new_tokens=10)
    items = synthetic_items(4, seed=3)
    collect(target, oracle_factory(drafter), items, tmp_path / "c", config, meta_drafter=drafter)
    meta, records = read_records(tmp_path / "c")
    assert meta.shapes == ["1+lookup3", "4+tree6"] and len(records) == 4
    for record in records:
        assert {str(c) for c in record.taus()} == {"1", "4", "1+lookup3", "4+tree6"}
        assert all(run.matches_greedy for run in record.runs)
        assert record.run("4+tree6").block_size == 4 and record.run(DraftShape(1, lookup_tokens=3)).shape == "1+lookup3"
    policy = fit_policy(meta, records, FitConfig(epochs=20, name="tiny-shapes"))
    assert set(policy.config.cost.shapes) == {"1+lookup3", "4+tree6"}  # priced from the collected step times
    policy.save_pretrained(tmp_path / "p")
    card = (tmp_path / "p" / "README.md").read_text()
    assert "1, 4, 1+lookup3, 4+tree6" in card and "4+tree6:" in card
    loaded = BlockPolicy.from_pretrained(tmp_path / "p")
    assert loaded.config.candidates == policy.config.candidates
    for item in items:  # per step (the default), and choosing one of its shapes per request
        prompt = torch.tensor([item.input_ids])
        for policy, shapes in (
            (loaded, {"per-step"}),
            (loaded.with_decision("per-request"), {"1", "4", "1+lookup3", "4+tree6"}),
        ):
            out = target.generate(
                input_ids=prompt,
                assistant_model=drafter,
                block_policy=policy,
                max_new_tokens=10,
                return_dict_in_generate=True,
            )
            assert torch.equal(out.sequences, plain_greedy(target, prompt, 10))
            assert out.blockpilot.shape in shapes


def test_a_calibration_of_block_sizes_keeps_the_stored_shape_costs_scaled_to_this_device():
    config = BlockPolicyConfig(SPEC, 64, [0], candidate_sizes=[1, 4, 8], candidate_shapes=[str(TREE)], cost=COST)
    policy = BlockPolicy(config)
    twice_as_slow = CostModel([1, 4, 8], [2.0e-3, 2.5e-3, 2.9e-3], "other-device", "calibrated")
    used = policy.usable_cost_model(twice_as_slow)
    assert used.seconds == twice_as_slow.seconds
    assert used.shapes == {str(TREE): pytest.approx(3.2e-3), str(LOOKUP): pytest.approx(2.2e-3)}
    assert twice_as_slow.shapes == {}  # the caller's calibration is not modified
    with_ladder = BlockPolicy(replace(config, cost=replace(COST, copy_sizes=[2, 9], copy_seconds=[1e-3, 2e-3])))
    used = with_ladder.usable_cost_model(twice_as_slow)
    assert used.copy_sizes == [2, 9] and used.copy_seconds == [pytest.approx(2e-3), pytest.approx(4e-3)]
    too_narrow = CostModel([1, 4], [2.0e-3, 2.5e-3], "other-device", "calibrated")
    assert policy.usable_cost_model(too_narrow) is None  # size 8 unmeasured: stored model used


def test_collect_config_keeps_shapes_apart_from_block_sizes():
    config = CollectConfig(block_sizes=[4], shapes=["8+tree16", "1+lookup10", "8+tree16"])
    assert config.shapes == ["1+lookup10", "8+tree16"] and [str(c) for c in config.candidates] == [
        "1",
        "4",
        "1+lookup10",
        "8+tree16",
    ]
    with pytest.raises(ValueError, match="plain block sizes belong in --block-sizes"):
        CollectConfig(shapes=["8"])
    with pytest.raises(ValueError, match="must start with the block size"):
        CollectConfig(shapes=["tree8"])
