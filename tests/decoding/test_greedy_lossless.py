"""Greedy DFlash decoding is token-identical to `target.generate(do_sample=False)`.

Random drafters exercise rejection (almost every draft is wrong); `OracleDrafter` exercises long acceptance, with
mistakes at chosen positions so the recorded acceptance lengths can be predicted exactly and checked.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import TextStreamer
from transformers.generation.streamers import BaseStreamer

from blockpilot_hf.testing_utils import (
    MASK_ID,
    OracleDrafter,
    drafted_greedy,
    greedy_pair,
    plain_greedy,
    random_prompt,
    tiny_drafter,
    tiny_target,
    tiny_tokenizer,
    token_text,
)

FAST = settings(deadline=None, max_examples=20, derandomize=True)


def ours(target, drafter, input_ids, max_new_tokens: int, block_size: int, **kwargs):
    """Our engine through the enabled `generate`, greedy, with the stats object attached."""
    return drafted_greedy(target, drafter, input_ids, max_new_tokens, block_size=block_size, **kwargs)


def expected_steps(prompt_len: int, total_len: int, block_size: int, mistakes: set[int]) -> list[tuple[int, int]]:
    """(verified block length, accepted drafts) per step for an oracle wrong exactly at `mistakes` (positions in
    the full sequence), computed from first principles: the prefill commits one token; a step anchored at the last
    committed position drafts the next k-1 positions and keeps them up to the first mistake, plus one bonus."""
    length, steps = prompt_len + 1, []
    while length < total_len:
        k = min(block_size, total_len - length)
        drafted = range(length, length + k - 1)
        accepted = next((j for j, pos in enumerate(drafted) if pos in mistakes), k - 1)
        steps.append((k, accepted))
        length += accepted + 1
    return steps


@FAST
@given(
    arch=st.sampled_from(["qwen3", "llama"]),
    block_size=st.integers(1, 32),
    prompt_seed=st.integers(0, 10_000),
    prompt_len=st.integers(1, 24),
    max_new_tokens=st.integers(1, 40),
)
def test_random_drafter_matches_plain_greedy(arch, block_size, prompt_seed, prompt_len, max_new_tokens):
    target, drafter = greedy_pair(arch)
    prompt = random_prompt(prompt_seed, prompt_len)
    out = ours(target, drafter, prompt, max_new_tokens, block_size)
    assert torch.equal(out.sequences, plain_greedy(target, prompt, max_new_tokens))
    assert out.sequences.shape[1] == prompt_len + max_new_tokens
    assert out.blockpilot.block_size == block_size


@FAST
@given(
    arch=st.sampled_from(["qwen3", "llama"]),
    block_size=st.integers(2, 32),
    prompt_seed=st.integers(0, 10_000),
    prompt_len=st.integers(1, 16),
    max_new_tokens=st.integers(1, 48),
    mistake_offsets=st.sets(st.integers(1, 47), max_size=4),
)
def test_oracle_acceptance_is_recorded_exactly(
    arch, block_size, prompt_seed, prompt_len, max_new_tokens, mistake_offsets
):
    """Long acceptance: the output is still plain greedy, and each step's record matches the prediction."""
    target, drafter = greedy_pair(arch)
    prompt = random_prompt(prompt_seed, prompt_len)
    reference = plain_greedy(target, prompt, max_new_tokens)
    mistakes = {prompt_len + offset for offset in mistake_offsets}
    oracle = OracleDrafter.from_drafter(drafter, reference, mistakes)
    out = ours(target, oracle, prompt, max_new_tokens, block_size)

    assert torch.equal(out.sequences, reference)
    steps = expected_steps(prompt_len, reference.shape[1], block_size, mistakes)
    stats = out.blockpilot
    assert [(s.block_size, s.accepted) for s in stats.steps] == steps
    assert stats.acceptance_lengths == [accepted + 1 for _, accepted in steps]
    assert [s.committed for s in stats.steps] == [accepted + 1 for _, accepted in steps]
    assert stats.new_tokens == max_new_tokens == 1 + sum(stats.acceptance_lengths)
    if steps:
        assert stats.tau == pytest.approx(sum(stats.acceptance_lengths) / len(steps))


def test_oracle_without_mistakes_accepts_whole_blocks_and_cuts_the_last_one_at_max_new_tokens():
    target, drafter = greedy_pair()
    prompt = random_prompt(3, 6)
    reference = plain_greedy(target, prompt, 20)  # 1 token from prefill, then blocks of 8 commit 8, 8, then 3
    out = ours(target, OracleDrafter.from_drafter(drafter, reference), prompt, 20, 8)
    assert torch.equal(out.sequences, reference)
    assert out.blockpilot.acceptance_lengths == [8, 8, 3]
    assert [s.block_size for s in out.blockpilot.steps] == [8, 8, 3]  # never verifies past max_new_tokens


def first_new_token_at(reference: torch.Tensor, prompt_len: int, lo: int, hi: int) -> tuple[int, int]:
    """(token, offset) of a continuation token whose first occurrence after the prompt lies in [lo, hi)."""
    new = reference[0, prompt_len:].tolist()
    for offset in range(lo, hi):
        if new.index(new[offset]) == offset:
            return new[offset], offset
    raise AssertionError(f"no first occurrence in [{lo}, {hi}) of {new}")


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("block_size", [1, 3, 8, 32])
@pytest.mark.parametrize("use_oracle", [False, True])
def test_eos_inside_a_block_stops_at_the_same_token(arch, block_size, use_oracle):
    target, drafter = greedy_pair(arch)
    prompt = random_prompt(11, 5)
    free = plain_greedy(target, prompt, 30)
    eos, offset = first_new_token_at(free, 5, 4, 20)
    reference = plain_greedy(target, prompt, 30, eos_token_id=eos)
    assert reference.shape[1] == 5 + offset + 1 and reference[0, -1] == eos  # EOS really cut the text short
    assistant = OracleDrafter.from_drafter(drafter, free) if use_oracle else drafter
    out = ours(target, assistant, prompt, 30, block_size, eos_token_id=eos)
    assert torch.equal(out.sequences, reference)
    if use_oracle and block_size > 1:
        last = out.blockpilot.steps[-1]
        assert last.committed <= last.accepted + 1  # tokens after EOS in the accepted block are dropped
        assert out.blockpilot.new_tokens == offset + 1


def test_several_eos_ids_stop_at_whichever_comes_first():
    target, drafter = greedy_pair()
    prompt = random_prompt(12, 7)
    free = plain_greedy(target, prompt, 30)
    late, _ = first_new_token_at(free, 7, 15, 28)
    early, offset = first_new_token_at(free, 7, 5, 12)
    reference = plain_greedy(target, prompt, 30, eos_token_id=[late, early])
    assert reference.shape[1] == 7 + offset + 1
    for assistant in (drafter, OracleDrafter.from_drafter(drafter, free)):
        out = ours(target, assistant, prompt, 30, 16, eos_token_id=[late, early])
        assert torch.equal(out.sequences, reference)


def test_min_new_tokens_holds_eos_back_exactly_like_generate():
    target, drafter = greedy_pair()
    prompt = random_prompt(13, 6)
    free = plain_greedy(target, prompt, 30)
    eos, offset = first_new_token_at(free, 6, 1, 6)
    reference = plain_greedy(target, prompt, 30, eos_token_id=eos, min_new_tokens=offset + 6)
    assert reference.shape[1] > 6 + offset + 1  # min_new_tokens changed the text: EOS was suppressed at `offset`
    for assistant in (drafter, OracleDrafter.from_drafter(drafter, reference)):
        for block_size in (2, 8, 24):
            out = ours(target, assistant, prompt, 30, block_size, eos_token_id=eos, min_new_tokens=offset + 6)
            assert torch.equal(out.sequences, reference)


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_stop_strings_cut_where_generate_cuts(block_size):
    target, drafter = greedy_pair()
    tokenizer = tiny_tokenizer()
    prompt = random_prompt(14, 6)
    free = plain_greedy(target, prompt, 30)
    token, offset = first_new_token_at(free, 6, 8, 20)
    stop = token_text(int(free[0, 6 + offset - 1])) + token_text(token)  # spans two tokens
    reference = plain_greedy(target, prompt, 30, stop_strings=[stop, "never-produced"], tokenizer=tokenizer)
    assert reference.shape[1] < free.shape[1] and tokenizer.decode(reference[0]).endswith(stop)
    for assistant in (drafter, OracleDrafter.from_drafter(drafter, free)):
        out = ours(
            target,
            assistant,
            prompt,
            30,
            block_size,
            stop_strings=[stop, "never-produced"],
            tokenizer=tokenizer,
        )
        assert torch.equal(out.sequences, reference)


class RecordingStreamer(BaseStreamer):
    """Records every `put` with how many target forwards had run by then, and counts `end` calls."""

    def __init__(self, target):
        self.puts: list[tuple[list[int], int]] = []
        self.ends = 0
        self.forwards = 0
        target.register_forward_hook(self._count)

    def _count(self, *_):
        self.forwards += 1

    def put(self, value):
        self.puts.append((value.reshape(-1).tolist(), self.forwards))

    def end(self):
        self.ends += 1


def test_custom_streamer_gets_each_committed_token_once_in_order_as_it_is_committed():
    target, drafter = tiny_target(seed=0), None
    drafter = tiny_drafter(target)
    prompt = random_prompt(15, 5)
    free = plain_greedy(target, prompt, 40)
    eos, offset = first_new_token_at(free, 5, 25, 35)
    streamer = RecordingStreamer(target)
    oracle = OracleDrafter.from_drafter(drafter, free, mistakes={5 + 12})
    out = ours(target, oracle, prompt, 40, 8, streamer=streamer, eos_token_id=eos)

    assert out.sequences.shape[1] == 5 + offset + 1
    assert streamer.puts[0][0] == prompt[0].tolist() and streamer.ends == 1
    new_puts = streamer.puts[1:]
    assert all(len(tokens) == 1 for tokens, _ in new_puts)  # one token per put, never a whole block at once
    assert [tokens[0] for tokens, _ in new_puts] == out.sequences[0, 5:].tolist()  # nothing after EOS
    forwards_at_put = [count for _, count in new_puts]
    assert forwards_at_put == sorted(forwards_at_put) and forwards_at_put[0] < streamer.forwards  # streamed live


def test_text_streamer_prints_what_generate_prints(capsys):
    target, drafter = greedy_pair()
    tokenizer = tiny_tokenizer()
    prompt = random_prompt(16, 5)
    plain_greedy(target, prompt, 25, streamer=TextStreamer(tokenizer, skip_prompt=True))
    expected = capsys.readouterr().out
    ours(target, drafter, prompt, 25, 6, streamer=TextStreamer(tokenizer, skip_prompt=True))
    assert capsys.readouterr().out == expected and len(expected.strip()) == 25


def test_return_dict_carries_stats_of_the_request():
    target, drafter = greedy_pair()
    prompt = random_prompt(17, 9)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=12,
        do_sample=False,
        assistant_model=drafter,
        block_policy="fixed:5",
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, plain_greedy(target, prompt, 12))
    stats = out.blockpilot
    assert (stats.block_size, stats.policy, stats.prompt_tokens, stats.new_tokens) == (5, "fixed:5", 9, 12)
    assert len(stats.acceptance_lengths) == len(stats.steps) >= 3 and all(1 <= a <= 5 for a in stats.acceptance_lengths)
    default = ours(target, drafter, prompt, 12, None)
    assert default.blockpilot.block_size == drafter.config.block_size == 8
    plain = target.generate(input_ids=prompt, max_new_tokens=12, do_sample=False, assistant_model=drafter)
    assert torch.equal(plain, out.sequences)  # without return_dict_in_generate: a bare tensor


@pytest.mark.parametrize("block_size", [1, 5, 16])
def test_left_padded_row_equals_plain_generate_on_the_same_padded_input(block_size):
    target, drafter = greedy_pair()
    prompt = random_prompt(18, 7)
    padded = torch.cat([torch.zeros((1, 4), dtype=prompt.dtype), prompt], dim=1)
    mask = torch.cat([torch.zeros((1, 4), dtype=torch.long), torch.ones_like(prompt)], dim=1)
    reference = plain_greedy(target, padded, 20, attention_mask=mask)
    assert torch.equal(reference[:, 4:], plain_greedy(target, prompt, 20))  # the padding is invisible to the model
    out = ours(target, drafter, padded, 20, block_size, attention_mask=mask)
    assert torch.equal(out.sequences, reference)


@pytest.mark.parametrize("block_size", [1, 6])
def test_left_padding_counts_in_history_dependent_processors_as_in_generate(block_size):
    """Plain generate keeps the padding in the ids its processors see: `min_new_tokens` counts from the padded
    prompt length and the repetition penalty sees the pad id; the padding still never reaches the model."""
    target, drafter = greedy_pair()
    prompt = random_prompt(21, 6)
    padded = torch.cat([torch.zeros((1, 5), dtype=prompt.dtype), prompt], dim=1)
    mask = torch.cat([torch.zeros((1, 5), dtype=torch.long), torch.ones_like(prompt)], dim=1)
    eos, offset = first_new_token_at(plain_greedy(target, prompt, 30), 6, 1, 6)
    kwargs = dict(attention_mask=mask, eos_token_id=eos, min_new_tokens=offset + 4, repetition_penalty=1.5)
    reference = plain_greedy(target, padded, 30, **kwargs)
    out = ours(target, OracleDrafter.from_drafter(drafter, reference[:, 5:]), padded, 30, block_size, **kwargs)
    assert torch.equal(out.sequences, reference)


def with_token_relabelled(target, old: int, new: int):
    """Swap two token ids in the embedding and the LM head: the same model, with `old` renamed `new`."""
    for weight in (target.get_input_embeddings().weight, target.get_output_embeddings().weight):
        with torch.no_grad():
            weight[[old, new]] = weight[[new, old]]
    return target


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_committed_mask_token_is_kept(block_size):
    """A target whose own continuation contains the mask id: committing it (as a draft or a bonus) must not drop it."""
    target = tiny_target(seed=0)
    drafter = tiny_drafter(target)
    prompt = random_prompt(19, 6)
    free = plain_greedy(target, prompt, 30)
    token, _ = first_new_token_at(free, 6, 3, 20)
    with_token_relabelled(target, token, MASK_ID)
    reference = plain_greedy(target, prompt, 30)
    assert int((reference[0, 6:] == MASK_ID).sum()) >= 1
    for assistant in (drafter, OracleDrafter.from_drafter(drafter, reference)):
        out = ours(target, assistant, prompt, 30, block_size)
        assert torch.equal(out.sequences, reference)
