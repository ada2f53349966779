"""Draft trees: best-first construction, the tree mask, the cache gather, and lossless greedy and sampled output."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from blockpilot_hf.decoding.tree import DraftTree, add_branch, build_tree, keep_cache_positions, tree_attention_mask
from blockpilot_hf.testing_utils import (
    OracleDrafter,
    greedy_pair,
    plain_greedy,
    random_prompt,
    tiny_drafter,
    tiny_target,
)

FAST = settings(deadline=None, max_examples=25, derandomize=True)


def path_logprob(tree: DraftTree, logp: torch.Tensor, node: int) -> float:
    total = 0.0
    while node:
        total += float(logp[tree.depths[node - 1] - 1, tree.tokens[node - 1]])
        node = tree.parents[node - 1]
    return total


@settings(deadline=None, max_examples=50, derandomize=True)
@given(depth=st.integers(1, 6), vocab=st.integers(2, 9), budget=st.integers(1, 40), seed=st.integers(0, 999))
def test_tree_holds_the_most_probable_continuations(depth, vocab, budget, seed):
    logits = torch.randn(depth, vocab, generator=torch.Generator().manual_seed(seed)) * 3
    logp = torch.log_softmax(logits, -1)
    tree = build_tree(logits, budget, top_k=vocab)
    assert len(tree) == min(budget, sum(vocab**d for d in range(1, depth + 1)))
    assert all(p < i + 1 for i, p in enumerate(tree.parents))  # parents come first: prefix-closed
    paths = {tuple(_tokens_to(tree, n)) for n in range(1, len(tree) + 1)}
    assert len(paths) == len(tree)  # no node twice
    # Best-first: no continuation outside the tree is more probable than the least probable one inside.
    inside = min(path_logprob(tree, logp, n) for n in range(1, len(tree) + 1))
    for n in range(0, len(tree) + 1):  # every one-token extension of a tree node that is not in the tree
        prefix = _tokens_to(tree, n)
        if len(prefix) == depth:
            continue
        for token in range(vocab):
            if tuple(prefix + [token]) not in paths:
                outside = sum(float(logp[i, t]) for i, t in enumerate(prefix + [token]))
                assert outside <= inside + 1e-9


def _tokens_to(tree: DraftTree, node: int) -> list[int]:
    tokens = []
    while node:
        tokens.append(tree.tokens[node - 1])
        node = tree.parents[node - 1]
    return tokens[::-1]


def test_budget_d_with_top_1_is_the_argmax_chain():
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    tree = build_tree(logits, budget=5, top_k=1)
    assert tree.tokens == logits.argmax(-1).tolist() and tree.parents == [0, 1, 2, 3, 4]


def test_a_lookup_branch_shares_the_nodes_it_agrees_with():
    tree = DraftTree(tokens=[5, 6, 7, 9], parents=[0, 1, 2, 0], depths=[1, 2, 3, 1])  # 5-6-7 and 9
    added = add_branch(tree, [5, 6, 8, 4])  # agrees with 5-6, then leaves the drafter's path
    assert added == {5, 6}
    assert (tree.tokens[4:], tree.parents[4:], tree.depths[4:]) == ([8, 4], [2, 5], [3, 4])
    assert add_branch(tree, [9]) == set() and len(tree) == 6  # already there: nothing added
    assert all(parent < node for node, parent in enumerate(tree.parents, start=1))  # parents come first


def test_lookup_joins_the_tree_and_its_accepted_drafts_are_counted_as_lookup():
    """The looping prompt of the lookup tests, with a tree: copies ride along the drafter's tree in one pass."""
    target, drafter = greedy_pair()
    prompt = random_prompt(3, 6)
    common = dict(input_ids=prompt, max_new_tokens=64, do_sample=False, assistant_model=drafter, block_size=4)
    out = target.generate(**common, tree_budget=4, prompt_lookup_num_tokens=8, return_dict_in_generate=True)
    assert torch.equal(out.sequences, plain_greedy(target, prompt, 64))
    stats = out.blockpilot
    assert all(s.source == "drafter" for s in stats.steps)  # the drafter ran on every step; lookup joined it
    assert stats.tokens_by_source["lookup"] > 16 and sum(stats.tokens_by_source.values()) == 64
    assert max(s.block_size for s in stats.steps) > 1 + 4  # a step verified the tree and the lookup branch


def test_mask_lets_a_node_see_the_cache_and_its_ancestors_only():
    tree = DraftTree(tokens=[5, 6, 7, 8], parents=[0, 0, 1, 3], depths=[1, 1, 2, 3])
    mask = tree_attention_mask(tree, past=2, dtype=torch.float32, device="cpu")[0, 0] == 0
    expected = [
        [1, 1, 1, 0, 0, 0, 0],  # anchor
        [1, 1, 1, 1, 0, 0, 0],  # node 1 (5)
        [1, 1, 1, 0, 1, 0, 0],  # node 2 (6), a sibling of node 1
        [1, 1, 1, 1, 0, 1, 0],  # node 3 (7) below node 1
        [1, 1, 1, 1, 0, 1, 1],  # node 4 (8) below node 3
    ]
    assert mask.tolist() == [[bool(x) for x in row] for row in expected]


def test_gather_keeps_the_prefix_anchor_and_accepted_path():
    target, _ = greedy_pair()
    cache = DynamicCache(config=target.config)
    with torch.no_grad():
        target(input_ids=random_prompt(0, 9), cache=cache, use_cache=True)  # 3 past + anchor + 5 nodes
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    keep_cache_positions(cache, past=3, path=[2, 4])
    assert cache.get_seq_length() == 6
    for layer, (keys, values) in zip(cache.layers, before, strict=True):
        assert torch.equal(layer.keys, keys[:, :, [0, 1, 2, 3, 5, 7]])
        assert torch.equal(layer.values, values[:, :, [0, 1, 2, 3, 5, 7]])
    keep_cache_positions(cache, past=4, path=[1])  # nothing to drop: the anchor and its one node stay
    assert cache.get_seq_length() == 6
    keep_cache_positions(cache, past=2, path=[])  # every node rejected: the cache ends at the anchor
    assert cache.get_seq_length() == 3
    assert all(torch.equal(layer.keys, keys[:, :, :3]) for layer, (keys, _) in zip(cache.layers, before, strict=True))


@FAST
@given(
    budget=st.integers(1, 64),
    block_size=st.integers(2, 12),
    prompt_seed=st.integers(0, 10_000),
    prompt_len=st.integers(1, 16),
    max_new_tokens=st.integers(1, 40),
    lookup=st.sampled_from([0, 4]),
    eos_offset=st.one_of(st.none(), st.integers(0, 39)),
)
def test_tree_matches_plain_greedy(budget, block_size, prompt_seed, prompt_len, max_new_tokens, lookup, eos_offset):
    target, drafter = greedy_pair()
    prompt = random_prompt(prompt_seed, prompt_len)
    kwargs = {}
    if eos_offset is not None:
        reference = plain_greedy(target, prompt, max_new_tokens)[0, prompt_len:]
        kwargs["eos_token_id"] = int(reference[min(eos_offset, len(reference) - 1)])
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        assistant_model=drafter,
        block_size=block_size,
        tree_budget=budget,
        prompt_lookup_num_tokens=lookup or None,
        return_dict_in_generate=True,
        **kwargs,
    )
    assert torch.equal(out.sequences, plain_greedy(target, prompt, max_new_tokens, **kwargs))
    assert all(s.block_size <= 1 + budget + lookup for s in out.blockpilot.steps)  # the lookup branch joins


def test_tree_with_repetition_penalty_scores_each_node_with_its_own_prefix():
    target, drafter = greedy_pair()
    prompt = random_prompt(7, 6)
    kwargs = dict(max_new_tokens=30, do_sample=False, repetition_penalty=1.3)
    out = target.generate(input_ids=prompt, assistant_model=drafter, block_size=6, tree_budget=12, **kwargs)
    assert torch.equal(out, target.generate(input_ids=prompt, **kwargs))


def test_an_always_right_drafter_has_its_chain_in_the_tree():
    target, drafter = greedy_pair()
    prompt = random_prompt(3, 6)
    reference = plain_greedy(target, prompt, 20)
    oracle = OracleDrafter.from_drafter(drafter, reference)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=20,
        do_sample=False,
        assistant_model=oracle,
        block_size=8,
        tree_budget=10,
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, reference)
    assert out.blockpilot.acceptance_lengths == [8, 8, 3]  # as the chain: 1 from prefill, then 8, 8, 3
    assert [s.block_size for s in out.blockpilot.steps][:2] == [11, 11]  # 10 nodes + the anchor


def test_a_tree_accepts_at_least_as_much_as_the_chain_of_its_width():
    """The tree of budget k-1 holds more than one continuation; over many prompts it accepts more drafts than
    the argmax chain of the same number of verified tokens."""
    target, drafter = greedy_pair()
    chain = tree = 0
    for seed in range(12):
        prompt = random_prompt(seed, 8)
        common = dict(input_ids=prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter)
        a = target.generate(**common, block_size=5, return_dict_in_generate=True).blockpilot
        b = target.generate(**common, block_size=5, tree_budget=4, return_dict_in_generate=True).blockpilot
        chain += sum(s.accepted for s in a.steps)
        tree += sum(s.accepted for s in b.steps)
    assert tree >= chain


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(tree_budget=0), "tree_budget must be an int >= 1"),
        (dict(tree_budget=4, draft_sampling=True, do_sample=True), "cannot combine with draft_sampling=True"),
        (dict(prompt_lookup_num_tokens=-1), "prompt_lookup_num_tokens must be an int >= 0"),
    ],
)
def test_bad_drafting_options_are_refused(options, message):
    target, drafter = greedy_pair()
    with pytest.raises(ValueError, match=message):
        target.generate(input_ids=random_prompt(0, 4), max_new_tokens=4, assistant_model=drafter, **options)


def test_trees_refuse_sliding_window_targets():
    target = tiny_target(seed=0, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    drafter = tiny_drafter(target)
    with pytest.raises(ValueError, match="tree_budget needs full-attention layers only"):
        target.generate(input_ids=random_prompt(0, 4), max_new_tokens=4, assistant_model=drafter, tree_budget=4)


def test_engine_only_options_are_refused_in_transformers_dflash_loop():
    target, drafter = greedy_pair()
    common = dict(input_ids=random_prompt(0, 4), max_new_tokens=4, assistant_model=drafter, speculation_type="dflash")
    with pytest.raises(ValueError, match="`tree_budget` with a DFlash drafter run on blockpilot's engine only"):
        target.generate(**common, tree_budget=4)
    with pytest.raises(ValueError, match="`prompt_lookup_num_tokens` with a DFlash drafter run on blockpilot"):
        target.generate(**common, prompt_lookup_num_tokens=4)
