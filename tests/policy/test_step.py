"""Per-step choice through `generate`: `block_policy="per-step"`, a BlockPilot head as the prior, the costs it
prices with, and what it refuses."""

from __future__ import annotations

import functools
import logging

import pytest
import torch

from blockpilot_hf import BlockPolicy
from blockpilot_hf.decoding.planner import StepPlanner, StepPrior
from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.jsonfile import save_json
from blockpilot_hf.policy.config import BlockPolicyConfig, CostModel
from blockpilot_hf.policy.cost import calibration_path
from blockpilot_hf.policy.resolve import GENERIC_STEP_COSTS, CalibratedPolicy, resolve_block_policy
from blockpilot_hf.policy.step import PerStepPolicy, geometric_rate, implied_rates
from blockpilot_hf.testing_utils import drafted_greedy, greedy_pair, plain_greedy, random_prompt, tiny_pair

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def test_geometric_rate_inverts_a_chains_acceptance_length():
    assert geometric_rate(1.0, 8) == pytest.approx(0.0, abs=1e-9)
    assert geometric_rate(8.0, 8) == pytest.approx(1.0, abs=1e-9)
    rate = geometric_rate(2.5, 8)
    assert sum(rate**j for j in range(8)) == pytest.approx(2.5)


def test_rates_come_from_the_longest_chain_and_lookup_predictions():
    candidates = [DraftShape(1), DraftShape(4), DraftShape(8), DraftShape.parse("1+lookup7")]
    draft, lookup = implied_rates([1.0, 2.0, 3.0, 1.5], candidates)
    assert sum(draft**j for j in range(8)) == pytest.approx(3.0)
    assert sum(lookup**j for j in range(8)) == pytest.approx(1.5)
    assert implied_rates([1.0, 2.0], [DraftShape(1), DraftShape(2)])[1] == 0.5  # no lookup candidate: neutral


def test_a_requests_prediction_shifts_the_fitted_prior_by_its_odds():
    fitted = StepPrior(reference_draft=0.5, reference_lookup=0.4)
    assert fitted.for_request(0.5, 0.4) == fitted  # an average request keeps the fitted prior
    better = fitted.for_request(0.8, 0.4)
    assert all(b > a for a, b in zip(fitted.draft_calibration, better.draft_calibration, strict=True))
    assert better.lookup_first == fitted.lookup_first and better.drafter_rate > fitted.drafter_rate
    odds = lambda p: p / (1 - p)  # noqa: E731
    assert odds(better.draft_calibration[3]) / odds(fitted.draft_calibration[3]) == pytest.approx(4.0)
    assert StepPrior().for_request(0.9, 0.9) == StepPrior()  # no reference: nothing to compare with


def test_step_costs_from_a_calibration_and_from_step_ladders():
    measured = CostModel([1, 8], [1.0, 1.5], verify_rows=[1, 2, 4], verify_seconds=[1.0, 1.3, 1.2], draft_seconds=0.1)
    costs = measured.step_costs()
    assert costs.verify_seconds == pytest.approx((1.0, 1.25, 1.25))  # noise pooled: never cheaper with more rows
    assert costs.draft_seconds == 0.1 and not costs.long_seconds
    long = CostModel(
        [1, 8],
        [1.0, 1.5],
        verify_rows=[1, 2],
        verify_seconds=[1.0, 1.1],
        draft_seconds=0.1,
        verify_context=128,
        long_context=768,
        long_seconds=[1.4, 1.3],
    ).step_costs()
    assert long.long_seconds == pytest.approx((1.35, 1.35)) and long.verify(2, 768) == pytest.approx(1.35)
    stepped = CostModel([1, 4, 8], [1.0, 1.5, 1.7], copy_sizes=[2, 4, 8], copy_seconds=[1.1, 1.2, 1.4])
    costs = stepped.step_costs()
    assert costs.verify(1) == 1.0 and costs.verify(4) == pytest.approx(1.2)
    assert costs.draft_seconds == pytest.approx(0.3)  # the median of what chain steps cost beyond their rows
    assert CostModel([1, 8], [1.0, 1.5]).step_costs().verify(8) == 1.5  # no copy ladder: chains stand in
    with pytest.raises(ValueError, match="verify_seconds"):
        CostModel([1], [1.0], verify_rows=[1, 2], verify_seconds=[1.0])


run = functools.partial(drafted_greedy, max_new_tokens=16)


def test_per_step_without_a_policy_is_exact_and_says_it_is_uncalibrated(caplog):
    target, drafter = greedy_pair()
    ids = random_prompt(4, 10)
    with caplog.at_level(logging.WARNING, logger="blockpilot_hf.policy.resolve"):
        chooser = resolve_block_policy("per-step", None, drafter, target)
    assert chooser.chooser.costs == GENERIC_STEP_COSTS and "blockpilot calibrate" in caplog.text
    out = run(target, drafter, ids, block_policy="per-step")
    assert torch.equal(out.sequences, plain_greedy(target, ids, 16))
    assert out.blockpilot.policy == "per-step" and out.blockpilot.shape == "per-step"


def test_a_cached_calibration_prices_per_step_choice(pair_with_calibration):
    target, drafter, cost = pair_with_calibration
    chooser = resolve_block_policy("per-step", None, drafter, target)
    assert chooser.chooser.costs == cost.step_costs()


@pytest.fixture()
def pair_with_calibration():
    target, drafter = greedy_pair()
    cost = CostModel([1, 8], [1.0, 1.4], verify_rows=[1, 8, 32], verify_seconds=[1.0, 1.2, 2.0], draft_seconds=0.1)
    calibration_path(target, drafter).parent.mkdir(parents=True, exist_ok=True)
    save_json(cost, calibration_path(target, drafter))
    return target, drafter, cost


def test_a_policy_decides_per_step_by_default_and_per_request_on_demand(task):
    target, drafter = tiny_pair()
    policy = BlockPolicy.from_pretrained(task.policy_dir).with_decision("per-step")  # the task's decides once
    assert BlockPolicyConfig.__dataclass_fields__["decision"].default == "per-step"
    chooser = resolve_block_policy(policy, None, drafter, target).chooser
    assert isinstance(chooser, PerStepPolicy) and chooser.head is policy
    once = policy.with_decision("per-request")
    assert isinstance(resolve_block_policy(once, None, drafter, target).chooser, CalibratedPolicy)
    assert once.heads is policy.heads and policy.config.decision == "per-step"  # same weights, user's untouched
    with pytest.raises(ValueError, match="decision must be one of"):
        policy.with_decision("sometimes")


def test_the_heads_prediction_primes_each_requests_planner(task):
    target, drafter = tiny_pair()
    policy = BlockPolicy.from_pretrained(task.policy_dir).with_decision("per-step")
    chooser = resolve_block_policy(policy, None, drafter, target)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    out = run(target, drafter, ids, block_policy=policy)
    assert torch.equal(out.sequences, plain_greedy(target, ids, 16))
    assert out.blockpilot.policy == policy.name and out.blockpilot.shape == "per-step"
    prefill = _prefill(target, drafter, ids)
    planner = chooser(prefill)
    assert isinstance(planner, StepPlanner) and planner.max_depth == drafter.config.block_size - 1
    expected = policy.step_prior(0.0).for_request(*implied_rates(policy.predict_tau(prefill), policy.config.candidates))
    assert planner.prior == expected


def _prefill(target, drafter, ids):
    from blockpilot_hf.decoding.engine import Prefill

    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
    final = target.config.num_hidden_layers
    return Prefill(ids, out.logits[:, -1], out.hidden_states[final][:, -1], drafter.context_features(out.hidden_states))


def test_per_step_refuses_sampled_drafts_and_batches_draft_one_chain():
    target, drafter = greedy_pair()
    ids = random_prompt(2, 8)
    with pytest.raises(ValueError, match="draft_sampling"):
        target.generate(
            input_ids=ids,
            max_new_tokens=4,
            do_sample=True,
            assistant_model=drafter,
            block_policy="per-step",
            draft_sampling=True,
        )
    batch = torch.cat([random_prompt(2, 8), random_prompt(3, 8)])
    out = target.generate(
        input_ids=batch,
        attention_mask=torch.ones_like(batch),
        max_new_tokens=6,
        do_sample=False,
        assistant_model=drafter,
        block_policy="per-step",
        return_dict_in_generate=True,
    )
    assert [s.block_size for s in out.blockpilot] == [drafter.config.block_size] * 2
    assert torch.equal(out.sequences, plain_greedy(target, batch, 6, attention_mask=torch.ones_like(batch)))

    def planner_only(prefill):
        return StepPlanner(GENERIC_STEP_COSTS, max_depth=3)

    planner_only.name = "mine"
    with pytest.raises(ValueError, match="chooses per step"):
        target.generate(
            input_ids=batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=4,
            do_sample=False,
            assistant_model=drafter,
            block_policy=planner_only,
        )
