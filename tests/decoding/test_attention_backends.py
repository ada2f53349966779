"""Attention implementations: with "eager" and "sdpa" targets and drafters, chains, trees, prompt lookup and
left-padded batches decode token-identical to plain greedy `generate`, and the identity check would catch a
backend that ignored the tree mask or a batch's key mask; any other implementation is refused before a forward."""

from __future__ import annotations

import contextlib
import re

import pytest
import torch

from blockpilot_hf.decoding import engine
from blockpilot_hf.decoding.tree import DraftTree, tree_attention_mask
from blockpilot_hf.testing_utils import drafted_greedy, plain_greedy, random_prompt, tiny_drafter, tiny_target
from tests.decoding.test_batch_lossless import padded_batch

IMPLEMENTATIONS = ("eager", "sdpa")
SHAPES = {
    "chain": dict(block_size=8),
    "tree": dict(block_policy="fixed:8+tree12"),
    "lookup": dict(block_policy="fixed:8+lookup7"),
    "tree+lookup": dict(block_policy="fixed:4+tree4+lookup8"),
}
LOOPING_PROMPT = random_prompt(3, 6)  # the tiny target falls into a loop after it: lookup has copies to verify
NEW_TOKENS = 48


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def pair(request):
    """A float64 tiny target and random drafter, both running the attention implementation `request.param`."""
    target = tiny_target(seed=0)
    drafter = tiny_drafter(target, block_size=8)
    target.set_attn_implementation(request.param)
    drafter.set_attn_implementation(request.param)
    return target, drafter


@pytest.mark.parametrize("shape", SHAPES)
def test_draft_shapes_match_plain_greedy(pair, shape):
    target, drafter = pair
    out = drafted_greedy(target, drafter, LOOPING_PROMPT, NEW_TOKENS, **SHAPES[shape])
    assert torch.equal(out.sequences, plain_greedy(target, LOOPING_PROMPT, NEW_TOKENS))
    if "lookup" in shape:
        assert out.blockpilot.tokens_by_source["lookup"] > 8  # copies were verified and kept


def test_left_padded_batch_matches_plain_batched_generate(pair):
    target, drafter = pair
    ids, mask = padded_batch([3, 9, 6], seed=1)
    common = dict(input_ids=ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    out = target.generate(**common, assistant_model=drafter, block_size=4, return_dict_in_generate=True)
    assert torch.equal(out.sequences, target.generate(**common))
    assert any(s.accepted < s.block_size - 1 for row in out.blockpilot for s in row.steps)  # holes in the cache


def chain_mask(tree: DraftTree, past: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A causal mask over the tree's nodes, as a backend that ignores the tree mask would attend."""
    chain = DraftTree(tokens=tree.tokens, parents=list(range(len(tree))), depths=list(range(1, len(tree) + 1)))
    return tree_attention_mask(chain, past, dtype, device)


def test_identity_catches_a_backend_that_ignores_the_tree_mask(pair, monkeypatch):
    target, drafter = pair
    plain = plain_greedy(target, LOOPING_PROMPT, NEW_TOKENS)
    monkeypatch.setattr(engine, "tree_attention_mask", chain_mask)
    out = drafted_greedy(target, drafter, LOOPING_PROMPT, NEW_TOKENS, **SHAPES["tree+lookup"])
    assert not torch.equal(out.sequences, plain)


@contextlib.contextmanager
def holes_unmasked(model):
    """Within the block, every key after a row's first real one is visible to `model`: the holes a batch's
    rejected drafts leave in the cache are no longer masked, as by a backend that only understands left padding."""

    def fill_holes(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.dim() == 2:
            kwargs["attention_mask"] = mask.cummax(dim=-1).values
        return args, kwargs

    handle = model.register_forward_pre_hook(fill_holes, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def test_identity_catches_a_backend_that_ignores_a_batch_key_mask(pair):
    target, drafter = pair
    ids, mask = padded_batch([3, 9, 6], seed=1)
    common = dict(input_ids=ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    plain = target.generate(**common)
    with holes_unmasked(target):
        out = target.generate(**common, assistant_model=drafter, block_size=4)
    assert not torch.equal(out, plain)


@pytest.mark.parametrize("role", ["target", "drafter"])
@pytest.mark.parametrize("found", ["flash_attention_2", "flash_attention_3", "flex_attention", "paged|sdpa"])
def test_other_implementations_are_refused_before_any_forward(role, found):
    target = tiny_target(seed=0)
    drafter = tiny_drafter(target, block_size=8)
    {"target": target, "drafter": drafter}[role].config._attn_implementation = found  # cannot be loaded here
    forwards = []
    for model in (target, drafter):
        model.register_forward_pre_hook(lambda module, args: forwards.append(module))
    with pytest.raises(
        ValueError, match=rf"{role} runs attn_implementation='{re.escape(found)}'.*{role}\.set_attn_implementation"
    ):
        drafted_greedy(target, drafter, random_prompt(0, 5), 4, block_size=4)
    assert forwards == []
