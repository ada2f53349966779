"""Batches of several rows: each row's output equals plain batched `generate` of the same left-padded batch, every
row at its own block size, with EOS per row and max_new_tokens; sampled rows follow the target's law per row."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, TextStreamer

from blockpilot_hf.decoding.stats import GenerationStats
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
    random_prompt,
    sample_counts,
    tiny_drafter,
    tiny_mistral,
    tiny_target,
    tiny_tokenizer,
    warpers,
)

FAST = settings(deadline=None, max_examples=25, derandomize=True)
SIZES = [1, 2, 3, 4, 8, 16]


def padded_batch(lengths: list[int], seed: int = 0, vocab: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded rows (B, T) of distinct random prompts and their attention mask (pad id 0)."""
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, width - n :] = random_prompt(seed * 100 + i, n, vocab=vocab)[0]
        mask[i, width - n :] = 1
    return ids, mask


class PerRowSizes:
    """A block policy that gives each prompt its own size (looked up by the prompt's tokens)."""

    name = "per-row"

    def __init__(self, ids: torch.Tensor, mask: torch.Tensor, sizes: list[int]):
        self.sizes = {tuple(row[m.bool()].tolist()): s for row, m, s in zip(ids, mask, sizes, strict=True)}

    def __call__(self, prefill) -> int:
        return self.sizes[tuple(prefill.input_ids[0].tolist())]


@FAST
@given(
    rows=st.lists(st.tuples(st.integers(2, 12), st.sampled_from(SIZES)), min_size=2, max_size=6),
    processors=st.fixed_dictionaries(
        {},
        optional={
            "repetition_penalty": st.sampled_from([0.7, 1.3, 2.0]),
            "no_repeat_ngram_size": st.integers(1, 3),
            "min_new_tokens": st.integers(1, 10),
        },
    ),
    eos=st.sampled_from([None, 7, 40]),
    seed=st.integers(0, 50),
)
def test_rows_with_logits_processors_equal_plain_batched_generate(rows, processors, eos, seed):
    """Processors with per-row state (the repetition penalty's padding lengths) see each row as plain batched
    `generate` does, also as rows finish at different steps (EOS) and leave the batch."""
    target, drafter = greedy_pair()
    lengths, sizes = [n for n, _ in rows], [s for _, s in rows]
    ids, mask = padded_batch(lengths, seed)
    common = dict(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False, eos_token_id=eos)
    plain = target.generate(**common, **processors)
    out = target.generate(**common, **processors, assistant_model=drafter, block_policy=PerRowSizes(ids, mask, sizes))
    assert torch.equal(out, plain)


def test_a_processor_that_reads_the_row_index_is_refused_in_batches():
    target, drafter = greedy_pair()
    ids, mask = padded_batch([4, 6])
    with pytest.raises(ValueError, match="PrefixConstrainedLogitsProcessor tells rows apart by their index"):
        target.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=4,
            do_sample=False,
            assistant_model=drafter,
            block_size=4,
            prefix_allowed_tokens_fn=lambda batch_id, ids: list(range(10)),
        )


@FAST
@given(
    arch=st.sampled_from(["qwen3", "llama"]),
    rows=st.lists(st.tuples(st.integers(2, 12), st.sampled_from(SIZES)), min_size=2, max_size=8),
    new=st.integers(1, 24),
    eos=st.sampled_from([None, 7, 40]),
    seed=st.integers(0, 50),
)
def test_every_row_equals_plain_batched_generate(arch, rows, new, eos, seed):
    target, drafter = greedy_pair(arch)
    lengths, sizes = [n for n, _ in rows], [s for _, s in rows]
    ids, mask = padded_batch(lengths, seed)
    common = dict(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False, eos_token_id=eos)
    plain = target.generate(**common)
    out = target.generate(
        **common, assistant_model=drafter, block_policy=PerRowSizes(ids, mask, sizes), return_dict_in_generate=True
    )
    assert torch.equal(out.sequences, plain)
    assert [s.block_size for s in out.blockpilot] == sizes
    for row, stats in enumerate(out.blockpilot):
        generated = plain[row, ids.shape[1] :].tolist()
        if eos in generated:
            generated = generated[: generated.index(eos) + 1]
        assert stats.new_tokens == len(generated)


def test_an_oracle_drafter_is_accepted_per_row_and_rows_leave_when_done():
    """Long acceptance (mistakes at chosen positions): rows at different sizes finish at different steps."""
    target, drafter = greedy_pair()
    lengths, sizes = [5, 11, 8, 3], [16, 4, 8, 2]
    ids, mask = padded_batch(lengths, seed=3)
    plain = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=40, do_sample=False)
    width = ids.shape[1]
    reference = [plain[i, width - n :].tolist() for i, n in enumerate(lengths)]
    oracle = OracleDrafter.from_drafter(drafter, reference, mistakes={20, 33})
    out = target.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=40,
        do_sample=False,
        assistant_model=oracle,
        block_policy=PerRowSizes(ids, mask, sizes),
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, plain)
    steps = [len(s.steps) for s in out.blockpilot]
    assert steps[0] < steps[2] < steps[1] < steps[3]  # larger blocks, fewer steps
    for stats, size in zip(out.blockpilot, sizes, strict=True):
        assert isinstance(stats, GenerationStats) and stats.tau > 0.6 * size
        assert all(s.draft_time >= 0 and s.verify_time > 0 for s in stats.steps)


def test_one_row_batch_runs_the_single_row_engine():
    target, drafter = greedy_pair()
    ids, mask = padded_batch([6])
    out = target.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=8,
        assistant_model=drafter,
        block_size=4,
        return_dict_in_generate=True,
    )
    assert isinstance(out.blockpilot, GenerationStats)


def test_sampled_rows_follow_each_rows_target_law():
    """Two rows (one left-padded) at block sizes 2 and 3: each row's continuations pass the G-test against its own
    prompt's exact law, and fail it against the other row's (the test can tell rows apart)."""
    target, drafter = law_pair()
    ids, mask = padded_batch([4, 6], seed=9, vocab=LAW_VOCAB)
    prompts = [ids[i : i + 1, mask[i].bool()] for i in range(2)]
    laws = [exact_law(target, p, warpers(1.0, None, None)) for p in prompts]
    policy = PerRowSizes(ids, mask, [2, 3])
    draws: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def one_batch() -> tuple[int, ...]:
        out = target.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=LAW_GENERATED,
            do_sample=True,
            top_k=0,
            assistant_model=drafter,
            block_policy=policy,
        )
        width = ids.shape[1]
        draws.append(tuple(tuple(out[i, width : width + LAW_TOKENS].tolist()) for i in range(2)))
        return draws[-1][0]

    sample_counts(one_batch, seed=4)
    for row in range(2):
        counts: dict[tuple[int, ...], int] = {}
        for pair_of_rows in draws:
            counts[pair_of_rows[row]] = counts.get(pair_of_rows[row], 0) + 1
        assert g_test_p_value(counts, laws[row]) > LAW_ALPHA, f"row {row} does not follow its law"
        assert g_test_p_value(counts, laws[1 - row]) < LAW_ALPHA, "the test cannot tell the two rows apart"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (dict(tree_budget=4), "`tree_budget`"),
        (dict(prompt_lookup_num_tokens=3), "`prompt_lookup_num_tokens`"),
        (dict(draft_sampling=True, do_sample=True), "`draft_sampling`"),
        (dict(streamer=TextStreamer(tiny_tokenizer())), "`streamer`"),
    ],
)
def test_single_row_options_are_refused_for_a_batch(option, message):
    target, drafter = greedy_pair()
    ids, mask = padded_batch([4, 6])
    with pytest.raises(ValueError, match=f"{message}.*batch of one row"):
        target.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=4, assistant_model=drafter, block_size=4, **option
        )


def test_a_sliding_window_target_is_refused_for_a_batch():
    target = tiny_mistral()
    drafter = tiny_drafter(target)
    ids, mask = padded_batch([4, 6])
    with pytest.raises(ValueError, match="sliding-window"):
        target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, assistant_model=drafter, block_size=4)


def test_batch_of_a_float32_target_with_a_bfloat16_drafter():
    target = tiny_target(dtype=torch.float32)
    drafter = tiny_drafter(target).to(torch.bfloat16)
    ids, mask = padded_batch([3, 9, 5])
    plain = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    out = target.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, assistant_model=drafter, block_size=4
    )
    assert torch.equal(out, plain)


def test_a_batched_draft_is_each_rows_own_draft():
    """The drafter drafts each batch row as it drafts that row alone: holes (padding, another row's longer block)
    are masked out and positions are per row; so a batch costs no acceptance."""
    target, drafter = greedy_pair()
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    width = drafter.config.num_context_layers * target.config.hidden_size
    g = torch.Generator().manual_seed(0)
    contexts = [torch.randn((1, n, width), generator=g, dtype=target.dtype) for n in (5, 8)]
    anchors = torch.tensor([[11], [23]])
    blocks = [4, 3]

    def alone(row: int) -> torch.Tensor:
        cache = DynamicCache(config=drafter.config)
        return drafter.draft(embed, lm_head, anchors[row : row + 1], contexts[row], blocks[row], cache)[0]

    junk = torch.randn((1, 3, width), generator=g, dtype=target.dtype)  # left padding: must not matter
    context = torch.cat([torch.cat([junk, contexts[0]], dim=1), contexts[1]])
    keys = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1], [1] * 8 + [1, 1, 1, 0]], dtype=torch.bool)
    positions = torch.tensor([[1, 1, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8], list(range(12))])
    together = drafter.draft(
        embed,
        lm_head,
        anchors,
        context,
        4,
        DynamicCache(config=drafter.config),
        position_ids=positions,
        attention_mask=keys,
    )
    torch.testing.assert_close(together[0], alone(0))
    torch.testing.assert_close(together[1, :2], alone(1))
