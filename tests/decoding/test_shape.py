"""`DraftShape`: its text form round-trips, bad text is refused with what to write, and a chooser that returns a
shape runs exactly that shape, token-identical to plain greedy `generate`."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockpilot_hf import DraftShape
from blockpilot_hf.testing_utils import greedy_pair, plain_greedy, repetitive_prompt

shapes = st.builds(
    lambda b, tree, lookup: DraftShape(b, tree if b > 1 else 0, lookup),
    st.integers(1, 64),
    st.integers(0, 64),
    st.integers(0, 64),
)


@settings(deadline=None, max_examples=200, derandomize=True)
@given(shapes)
def test_text_form_round_trips(shape):
    assert DraftShape.parse(str(shape)) == shape
    assert shape.max_tokens >= shape.block_size and shape.max_tokens > shape.lookup_tokens


def test_parse_reads_every_form():
    assert DraftShape.parse(8) == DraftShape.parse("8") == DraftShape(8)
    assert DraftShape.parse("8+tree16") == DraftShape(8, tree_budget=16)
    assert DraftShape.parse("1+lookup10") == DraftShape(1, lookup_tokens=10)
    assert DraftShape.parse(" 4+lookup3+tree6 ") == DraftShape(4, 6, 3)
    assert str(DraftShape(4, 6, 3)) == "4+tree6+lookup3"
    assert DraftShape(8).is_chain and not DraftShape(1, lookup_tokens=2).is_chain
    assert DraftShape(4, lookup_tokens=10).max_tokens == 11 and DraftShape(8, 3).max_tokens == 8
    assert sorted([DraftShape(8, 16), DraftShape(1), DraftShape(8)]) == [
        DraftShape(1),
        DraftShape(8),
        DraftShape(8, 16),
    ]


@pytest.mark.parametrize(
    "text, error, message",
    [
        ("tree16", ValueError, "must start with the block size"),
        ("8+tree", ValueError, r"optional '\+treeN' and '\+lookupK' parts"),
        ("8+tree4+tree8", ValueError, "each at most once"),
        ("8+beam4", ValueError, "each at most once"),
        ("0", ValueError, "block_size must be an int >= 1"),
        ("1+tree8", ValueError, "A draft tree needs a block size >= 2"),
        (2.5, TypeError, "an int or a string like '8\\+tree16'"),
    ],
)
def test_bad_shapes_are_refused_with_what_to_write(text, error, message):
    with pytest.raises(error, match=message):
        DraftShape.parse(text)


@pytest.mark.parametrize("text", ["8", "6+tree12", "1+lookup4", "4+lookup6", "8+tree10+lookup5"])
def test_a_chosen_shape_runs_and_matches_plain_greedy(text):
    target, drafter = greedy_pair()
    prompt = repetitive_prompt(3, 5, 3)
    expected = plain_greedy(target, prompt, 40)
    shape = DraftShape.parse(text)

    def choose(prefill):
        return shape

    out = target.generate(
        input_ids=prompt,
        assistant_model=drafter,
        block_policy=choose,
        max_new_tokens=40,
        do_sample=False,
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, expected)
    stats = out.blockpilot
    assert stats.shape == text and stats.block_size == shape.block_size and stats.policy == "choose"
    sources = {step.source for step in stats.steps}
    if shape.block_size == 1:
        assert "drafter" not in sources  # lookup alone never runs the drafter
    if shape.lookup_tokens and not shape.tree_budget:
        assert "lookup" in sources  # the repeated prompt gives lookup something to copy
    if not shape.lookup_tokens:
        assert "lookup" not in sources and stats.tokens_by_source["lookup"] == 0
    if shape.tree_budget:  # a tree verifies up to its budget of drafted nodes (+ the lookup branch) per step
        assert max(s.block_size for s in stats.steps) <= 1 + shape.tree_budget + shape.lookup_tokens


def test_fixed_shape_strings_and_their_errors():
    target, drafter = greedy_pair()
    prompt = repetitive_prompt(4, 4, 3)
    out = target.generate(
        input_ids=prompt,
        assistant_model=drafter,
        block_policy="fixed:4+tree8",
        max_new_tokens=24,
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, plain_greedy(target, prompt, 24)) and out.blockpilot.shape == "4+tree8"
    with pytest.raises(ValueError, match="expected 'fixed:N' with an integer N, or a draft shape"):
        target.generate(input_ids=prompt, assistant_model=drafter, block_policy="fixed:4+beam8", max_new_tokens=4)
    with pytest.raises(ValueError, match="tree_budget .* cannot combine with draft_sampling"):
        target.generate(
            input_ids=prompt,
            assistant_model=drafter,
            block_policy="fixed:4+tree8",
            draft_sampling=True,
            do_sample=True,
            max_new_tokens=4,
        )


def test_a_batch_refuses_a_chosen_tree_with_what_to_do():
    target, drafter = greedy_pair()
    prompts = repetitive_prompt(5, 4, 2).repeat(2, 1)
    with pytest.raises(ValueError, match="chose draft shape 4\\+tree8 for row 0: a batch drafts chains only"):
        target.generate(input_ids=prompts, assistant_model=drafter, block_policy="fixed:4+tree8", max_new_tokens=4)
