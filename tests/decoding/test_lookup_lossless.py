"""Prompt lookup in our engine (`prompt_lookup_num_tokens`, alone or with the DFlash drafter) is lossless:
greedy output token-identical to plain `generate`, with EOS and max_new_tokens inside copied drafts."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockpilot_hf.testing_utils import greedy_pair, plain_greedy, random_prompt, repetitive_prompt

FAST = settings(deadline=None, max_examples=25, derandomize=True)


@FAST
@given(
    block_size=st.integers(1, 12),
    lookup=st.integers(1, 12),
    prompt_seed=st.integers(0, 10_000),
    chunk=st.integers(1, 8),
    repeats=st.integers(1, 4),
    max_new_tokens=st.integers(1, 40),
    eos_offset=st.one_of(st.none(), st.integers(0, 39)),
)
def test_lookup_matches_plain_greedy(block_size, lookup, prompt_seed, chunk, repeats, max_new_tokens, eos_offset):
    target, drafter = greedy_pair()
    prompt = repetitive_prompt(prompt_seed, chunk, repeats)
    kwargs = {}
    if eos_offset is not None:  # an EOS id the continuation really produces, possibly inside a copied draft
        reference = plain_greedy(target, prompt, max_new_tokens)[0, prompt.shape[1] :]
        kwargs["eos_token_id"] = int(reference[min(eos_offset, len(reference) - 1)])
    expected = plain_greedy(target, prompt, max_new_tokens, **kwargs)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        assistant_model=drafter,
        block_size=block_size,
        prompt_lookup_num_tokens=lookup,
        return_dict_in_generate=True,
        **kwargs,
    )
    assert torch.equal(out.sequences, expected)
    stats = out.blockpilot
    assert all(s.block_size <= 1 + max(lookup, block_size - 1) for s in stats.steps)
    assert all(s.source == "lookup" or block_size > 1 or s.block_size == 1 for s in stats.steps)
    if "eos_token_id" not in kwargs:  # no stop cut a step short: every committed token has one origin
        assert sum(stats.tokens_by_source.values()) == stats.new_tokens == max_new_tokens


def test_lookup_copies_a_loop_and_is_counted_by_source():
    """A random tiny target falls into a loop: lookup accepts long copies there, and the stats say so."""
    target, drafter = greedy_pair()
    prompt = random_prompt(3, 6)
    expected = plain_greedy(target, prompt, 64)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=64,
        do_sample=False,
        assistant_model=drafter,
        block_size=1,
        prompt_lookup_num_tokens=8,
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, expected)
    by_source = out.blockpilot.tokens_by_source
    assert by_source["drafter"] == 0 and by_source["lookup"] > 16
    assert by_source["lookup"] + by_source["target"] == 64
    assert out.blockpilot.tau > 1.5
