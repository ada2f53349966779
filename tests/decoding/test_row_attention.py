"""Row-by-row verify attention: a bfloat16 pass over a chain or a tree gives every row the bits of one-token steps."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from blockpilot_hf.decoding import row_attention as rows
from blockpilot_hf.decoding.row_attention import ROW_ATTENTION, row_attention, wants_row_attention
from blockpilot_hf.decoding.tree import grow_tree, tree_attention_mask
from blockpilot_hf.testing_utils import plain_greedy, random_prompt, tiny_drafter, tiny_target

FAST = settings(deadline=None, max_examples=15, derandomize=True)


@functools.cache
def bf16_target():
    """A random Llama in bfloat16 with grouped-query attention (8 heads on 2 key-value heads)."""
    return tiny_target(seed=3, arch="llama", dtype=torch.bfloat16, hidden=64, heads=8, kv_heads=2, intermediate=128)


needs_row_independent_linears = pytest.mark.skipif(
    not wants_row_attention(bf16_target()),
    reason="this CPU's bfloat16 products differ by row count, so no attention makes a pass exact",
)


def prefilled(model, prompt: torch.Tensor) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    model(prompt, cache=cache, use_cache=True)
    return cache


def one_token_logits(model, prompt: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """(len(tokens), V) logits of feeding `tokens` after `prompt` one at a time, as plain decoding does."""
    cache = prefilled(model, prompt)
    rows = [model(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1] for t in tokens]
    return torch.stack(rows)


@needs_row_independent_linears
@FAST
@given(seed=st.integers(0, 999), prompt_len=st.integers(3, 80), k=st.integers(2, 12))
def test_a_verified_chain_gets_the_bits_of_one_token_steps(seed, prompt_len, k):
    model = bf16_target()
    prompt, tokens = random_prompt(seed, prompt_len), random_prompt(seed + 1, k)[0].tolist()
    with torch.inference_mode():
        expected = one_token_logits(model, prompt, tokens)
        cache = prefilled(model, prompt)
        with row_attention(model):
            got = model(torch.tensor([tokens]), cache=cache, use_cache=True).logits[0]
    assert torch.equal(got, expected)


def test_batched_attention_does_not_get_those_bits():
    """What the row-by-row pass fixes: the batched kernel's bfloat16 sums differ from one-token steps."""
    model = bf16_target()
    differs = 0
    with torch.inference_mode():
        for seed in range(5):
            prompt, tokens = random_prompt(seed, 40), random_prompt(seed + 1, 8)[0].tolist()
            expected = one_token_logits(model, prompt, tokens)
            got = model(torch.tensor([tokens]), cache=prefilled(model, prompt), use_cache=True).logits[0]
            differs += not torch.equal(got, expected)
    assert differs


@needs_row_independent_linears
@FAST
@given(seed=st.integers(0, 999), prompt_len=st.integers(3, 60), budget=st.integers(2, 14))
def test_a_verified_tree_gets_for_each_node_the_bits_of_decoding_its_path(seed, prompt_len, budget):
    model = bf16_target()
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(4, 3, generator=g).sort(descending=True).values.tolist()
    tree = grow_tree(values, torch.randint(1, 90, (4, 3), generator=g).tolist(), budget)
    prompt, anchor = random_prompt(seed, prompt_len), 7
    past = prompt_len
    with torch.inference_mode():
        cache = prefilled(model, prompt)
        with row_attention(model):
            got = model(
                torch.tensor([[anchor, *tree.tokens]]),
                cache=cache,
                use_cache=True,
                position_ids=past + torch.tensor([[0, *tree.depths]]),
                attention_mask=tree_attention_mask(tree, past, model.dtype, "cpu"),
            ).logits[0]
        for node in range(len(tree) + 1):
            path = []
            while node:
                path.insert(0, tree.tokens[node - 1])
                node = tree.parents[node - 1]
            expected = one_token_logits(model, prompt, [anchor, *path])[-1]
            assert torch.equal(got[_node_of(tree, path)], expected)


def _node_of(tree, path: list[int]) -> int:
    node = 0
    for token in path:
        node = tree.children(node)[token]
    return node


@needs_row_independent_linears
@settings(deadline=None, max_examples=8, derandomize=True)
@given(seed=st.integers(0, 999), block_size=st.sampled_from([2, 4, 8]), tree_budget=st.sampled_from([None, 6]))
def test_bfloat16_speculative_greedy_is_plain_bfloat16_greedy(seed, block_size, tree_budget):
    model = bf16_target()
    drafter = tiny_drafter(model, seed=seed)
    prompt = random_prompt(seed, 12)
    out = model.generate(
        prompt,
        max_new_tokens=40,
        do_sample=False,
        assistant_model=drafter,
        block_size=block_size,
        tree_budget=tree_budget,
    )
    assert torch.equal(out, plain_greedy(model, prompt, 40))


def test_row_attention_is_for_half_precision_on_a_cpu_and_is_undone_on_exit():
    fp32 = tiny_target(seed=0, dtype=torch.float32)
    with row_attention(fp32):
        assert fp32.config._attn_implementation == "sdpa"
    model = bf16_target()
    with pytest.raises(RuntimeError, match="inside"), row_attention(model):
        assert model.config._attn_implementation == ROW_ATTENTION
        raise RuntimeError("inside")
    assert model.config._attn_implementation == "sdpa"


def test_row_attention_stays_off_where_products_round_by_row_count(monkeypatch):
    monkeypatch.setattr(rows, "rows_independent", lambda *shape: False)
    model = bf16_target()
    with row_attention(model):
        assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("rounds_by_rows", [False, True])
def test_the_probe_tells_products_that_round_by_row_count(monkeypatch, rounds_by_rows):
    def linear(x, weight):  # exact per row; with `rounds_by_rows`, a block of rows comes out one ulp apart
        out = torch.stack([weight @ row for row in x])
        return torch.nextafter(out, out + 1) if rounds_by_rows and x.shape[0] > 1 else out

    monkeypatch.setattr(rows, "F", type("Functional", (), {"linear": staticmethod(linear)}))
    assert rows.rows_independent.__wrapped__(16, 8, torch.float32, 1) is not rounds_by_rows
