"""Per-step choice (`StepPlanner`): lossless whatever it picks step by step, and its choices follow costs and
evidence the way they should."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockpilot_hf.decoding import engine
from blockpilot_hf.decoding.lookup import Copy
from blockpilot_hf.decoding.planner import Q_MIDS, Beta, StepCosts, StepPlanner, StepPrior, interpolate
from blockpilot_hf.testing_utils import (
    LAW_ALPHA,
    LAW_GENERATED,
    LAW_TOKENS,
    LAW_VOCAB,
    OracleDrafter,
    exact_law,
    g_test_p_value,
    greedy_pair,
    law_pair,
    plain_greedy,
    random_prompt,
    repetitive_prompt,
    sample_counts,
    walk_favouring_drafted_children,
    warpers,
)

FAST = settings(deadline=None, max_examples=25, derandomize=True)
FLAT = StepCosts((1, 32), (1.0, 1.1), 0.05)  # a GPU-like pass: rows are nearly free, the drafter too
STEEP = StepCosts((1, 2, 32), (1.0, 1.8, 20.0), 0.6)  # every extra row costs most of a step, the drafter a lot


def planner_policy(costs: StepCosts, prior: StepPrior | None = None, max_depth: int = 7, **options):
    """A `block_policy` callable that starts every request with a fresh planner."""

    def choose(prefill):
        return StepPlanner(costs, prior, max_depth=max_depth, **options)

    choose.name = "planner-under-test"
    return choose


@st.composite
def cost_ladders(draw) -> StepCosts:
    """Random but sane cost ladders: positive, non-decreasing in rows; their choices vary from plain decoding to
    wide trees, and switch within a request as the planner learns."""
    steps = draw(st.lists(st.floats(0.0, 2.0), min_size=3, max_size=3))
    seconds = [1.0, 1.0 + steps[0], 1.0 + steps[0] + steps[1], 1.0 + sum(steps)]
    return StepCosts((1, 2, 8, 32), tuple(seconds), draw(st.floats(0.0, 1.0)))


@FAST
@given(
    costs=cost_ladders(),
    accept=st.floats(0.05, 0.95),
    lookup_first=st.floats(0.05, 0.95),
    prompt_seed=st.integers(0, 10_000),
    chunk=st.integers(1, 6),
    repeats=st.integers(1, 4),
    max_new_tokens=st.integers(1, 40),
    max_lookup=st.integers(0, 12),
    eos_offset=st.one_of(st.none(), st.integers(0, 39)),
)
def test_per_step_choice_matches_plain_greedy(
    costs, accept, lookup_first, prompt_seed, chunk, repeats, max_new_tokens, max_lookup, eos_offset
):
    target, drafter = greedy_pair()
    prompt = repetitive_prompt(prompt_seed, chunk, repeats)
    kwargs = {}
    if eos_offset is not None:  # an EOS the continuation really produces, maybe inside a drafted or copied step
        reference = plain_greedy(target, prompt, max_new_tokens)[0, prompt.shape[1] :]
        kwargs["eos_token_id"] = int(reference[min(eos_offset, len(reference) - 1)])
    expected = plain_greedy(target, prompt, max_new_tokens, **kwargs)
    prior = StepPrior(draft_calibration=[min(q * accept * 2, 1.0) for q in Q_MIDS], lookup_first=[lookup_first] * 3)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        assistant_model=drafter,
        block_policy=planner_policy(costs, prior, max_lookup=max_lookup),
        return_dict_in_generate=True,
        **kwargs,
    )
    assert torch.equal(out.sequences, expected)
    stats = out.blockpilot
    assert stats.shape == "per-step" and stats.new_tokens == expected.shape[1] - prompt.shape[1]
    assert all(s.block_size <= costs.max_rows for s in stats.steps)


def test_per_step_choice_switches_shapes_within_a_request_and_stays_exact():
    """With a perfect drafter on part of the text and a wrong one elsewhere, one request verifies plain steps,
    chains or trees and copies: what it verifies changes step by step, and the output is plain greedy."""
    target, drafter = greedy_pair()
    prompt = repetitive_prompt(7, 5, 3)
    expected = plain_greedy(target, prompt, 60)
    length = prompt.shape[1]
    oracle = OracleDrafter.from_drafter(drafter, expected, mistakes=range(length + 20, length + 40))
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=60,
        do_sample=False,
        assistant_model=oracle,
        block_policy=planner_policy(StepCosts((1, 8, 32), (1.0, 1.2, 2.5), 0.1)),
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, expected)
    rows = {s.block_size for s in out.blockpilot.steps}
    sources = {s.source for s in out.blockpilot.steps}
    assert len(rows) >= 3 and "drafter" in sources


def test_per_step_decisions_are_timed_as_policy_time():
    target, drafter = greedy_pair()
    prompt = random_prompt(1, 12)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=24,
        do_sample=False,
        assistant_model=drafter,
        block_policy=planner_policy(FLAT),
        return_dict_in_generate=True,
    )
    stats = out.blockpilot
    assert 0 < stats.policy_time < stats.total_time


def _sampled(planner_costs: StepCosts, prompt: torch.Tensor):
    target, drafter = law_pair()

    def one() -> list[int]:
        out = target.generate(
            input_ids=prompt,
            max_new_tokens=LAW_GENERATED,
            do_sample=True,
            assistant_model=drafter,
            block_policy=planner_policy(planner_costs, max_depth=3, max_lookup=2),
        )
        return out[0, prompt.shape[1] : prompt.shape[1] + LAW_TOKENS].tolist()

    return one


@pytest.mark.parametrize("costs", [FLAT, STEEP], ids=["wide-trees", "small-steps"])
def test_sampled_per_step_choice_follows_the_target_law(costs):
    target, _ = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law = exact_law(target, prompt, warpers(1.0, None, None))
    assert g_test_p_value(sample_counts(_sampled(costs, prompt), seed=1), law) > LAW_ALPHA


def test_a_per_step_walk_that_favours_drafted_children_is_rejected():
    """Power check: the same test fails when the tree walk takes a drafted child the target did not sample."""
    target, _ = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law = exact_law(target, prompt, warpers(1.0, None, None))
    with mock.patch.object(engine, "accept_tree", walk_favouring_drafted_children):
        counts = sample_counts(_sampled(FLAT, prompt), seed=1)
    assert g_test_p_value(counts, law) < LAW_ALPHA


# ---- the decision itself ----------------------------------------------------------------------------------------


def confident_logits(depth: int = 7, vocab: int = 50, confidence: float = 0.9) -> torch.Tensor:
    """(depth, vocab) drafter logits whose argmax at each position has probability `confidence`."""
    logits = torch.full((depth, vocab), 0.0)
    rest = (1 - confidence) / (vocab - 1)
    logits[:, 3] = torch.log(torch.tensor(confidence / rest))
    return logits


def test_cheap_rows_buy_wide_trees_and_dear_rows_buy_small_steps():
    """The same drafter output under two cost profiles: flat costs verify many nodes, steep costs few or none."""
    logits = confident_logits(confidence=0.6)
    wide = StepPlanner(FLAT, max_depth=7).plan(Copy(), logits, 64)
    small = StepPlanner(STEEP, max_depth=7).plan(Copy(), logits, 64)
    assert len(wide.tree) > len(small.tree)
    assert len(wide.tree) > 7  # more than the chain: it branches


def test_the_drafter_is_skipped_when_it_cannot_pay_for_itself():
    pessimist = StepPrior(drafter_rate=0.05, lookup_first=[0.9] * 3, lookup_next=0.95)
    planner = StepPlanner(STEEP, pessimist, max_depth=7)
    assert not planner.wants_drafter(Copy(), 64)  # plain decoding beats paying for a pass that drafts nothing
    assert StepPlanner(FLAT, StepPrior(drafter_rate=0.8), max_depth=7).wants_drafter(Copy(), 64)


def test_copies_are_verified_as_far_as_they_pay_and_learnt_from():
    likely = StepPrior(lookup_first=[0.9] * 3, lookup_next=0.9)
    copy = Copy(list(range(20)), 3)
    planner = StepPlanner(FLAT, likely, max_depth=7, max_lookup=10)
    plan = planner.plan(copy, None, 64)
    assert plan.tree.tokens == list(range(10)) and plan.is_chain and not plan.ran_drafter
    before = planner.lookup_first[2].mean
    planner.observe(plan, [99])  # the first copied token was wrong
    assert planner.lookup_first[2].mean < before
    dear = StepPlanner(STEEP, likely, max_depth=7, max_lookup=10)
    assert dear.plan(copy, None, 64).tree.tokens  # a likely copy pays even for a dear row
    for _ in range(30):
        dear.observe(plan, [99])
    assert dear.plan(copy, None, 64).tree.tokens == []  # copies stopped paying: plain decoding


def test_a_copy_from_a_longer_match_is_trusted_by_its_own_record():
    """Fresh copies are learnt per n-gram match order: 1-gram copies failing leaves 3-gram copies trusted."""
    planner = StepPlanner(STEEP, StepPrior(lookup_first=[0.9] * 3), max_depth=7, max_lookup=6)
    for _ in range(30):
        planner.observe(planner.plan(Copy([5, 6], 1), None, 64), [9])
    assert planner.copy_chances(1, 1)[0] < 0.3 and planner.copy_chances(1, 3)[0] == pytest.approx(0.9)
    assert planner.copy_chances(1, 7) == planner.copy_chances(1, 3)  # longer matches share the 3+ record
    assert (
        planner.plan(Copy([5, 6], 1), None, 64).tree.tokens == []
        and planner.plan(Copy([5, 6], 3), None, 64).tree.tokens
    )


def test_a_copy_the_target_follows_is_on_track_and_trusted_more():
    planner = StepPlanner(FLAT, StepPrior(lookup_first=[0.2] * 3, lookup_on_track=0.9), max_depth=7, max_lookup=6)
    fresh = planner.copy_chances(1, 2)[0]
    plan = planner.plan(Copy([5, 6, 7], 2), None, 64)
    planner.observe(plan, [5, 6, 7, 8])  # the target followed the whole copy
    assert planner.on_track and planner.copy_chances(1, 2)[0] > fresh
    planner.observe(planner.plan(Copy([1, 2], 3), None, 64), [1, 9])  # ... and then left it
    assert not planner.on_track


def test_observing_accepted_drafts_raises_their_bucket_and_rejections_lower_it():
    planner = StepPlanner(FLAT, max_depth=3)
    plan = planner.plan(Copy(), confident_logits(depth=3, confidence=0.6), 64)
    bucket = 4  # q = 0.6
    start = planner.draft[bucket].mean
    planner.observe(plan, [3, 3, 3, 7])  # the target chose every argmax draft
    assert planner.draft[bucket].mean > start
    planner.observe(plan, [5])
    assert planner.draft_chances() == sorted(planner.draft_chances())  # monotone in q


def test_rows_cost_more_in_a_long_text_and_the_planner_verifies_fewer_there():
    """With a second ladder measured after a long context, a pass is priced linearly in the context."""
    costs = StepCosts((1, 16), (1.0, 1.2), 0.05, verify_context=100, long_context=500, long_seconds=(1.2, 3.0))
    assert costs.verify(16, 50) == costs.verify(16, 100) == pytest.approx(1.2)  # short texts: the short ladder
    assert costs.verify(16, 300) == pytest.approx(2.1) and costs.verify(16, 900) == pytest.approx(4.8)
    logits = confident_logits(confidence=0.6)
    short, long = StepPlanner(costs, max_depth=7), StepPlanner(costs, max_depth=7)
    assert len(long.plan(Copy(), logits, 2000).tree) < len(short.plan(Copy(), logits, 100).tree)
    with pytest.raises(ValueError, match="longer context"):
        StepCosts((1, 16), (1.0, 1.2), 0.0, verify_context=100, long_context=100, long_seconds=(1.2, 3.0))


def test_cost_ladders_interpolate_and_refuse_bad_input():
    assert interpolate([1, 3], [1.0, 2.0], 2) == pytest.approx(1.5)
    assert interpolate([1, 3], [1.0, 2.0], 5) == pytest.approx(3.0)
    assert StepCosts((1, 32), (1.0, 2.0), 0.0).max_rows == 32
    with pytest.raises(ValueError, match="starting at 1 row"):
        StepCosts((2, 4), (1.0, 2.0), 0.1)
    with pytest.raises(ValueError, match="positive"):
        StepCosts((1, 4), (0.0, 2.0), 0.1)
    with pytest.raises(ValueError, match="probabilities"):
        StepPrior(lookup_next=1.5)
    with pytest.raises(ValueError, match="one per q bucket"):
        StepPrior(draft_calibration=[0.5])
    with pytest.raises(ValueError, match="max_depth"):
        StepPlanner(FLAT, max_depth=0)
    assert Beta.prior(1.0, 4).mean < 1  # a certain prior still learns
