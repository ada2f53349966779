"""Targets and drafters off the happy path stay lossless: sliding-window attention past its window, a drafter in
another dtype than the target, a drafter with non-finite logits. Targets whose cache cannot roll back are refused."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import Qwen3NextConfig

from blockpilot_hf import DFlashDrafter
from blockpilot_hf.testing_utils import (
    LAW_ALPHA,
    LAW_GENERATED,
    LAW_TOKENS,
    OracleDrafter,
    exact_law,
    g_test_p_value,
    law_pair,
    plain_greedy,
    random_prompt,
    sample_counts,
    tiny_drafter,
    tiny_mistral,
    tiny_target,
    warpers,
)
from blockpilot_hf.validation import check_target_cache

WINDOW = 16


@pytest.mark.parametrize("arch", ["qwen3", "mistral"])
@pytest.mark.parametrize("prompt_len", [5, 30])  # shorter and longer than the window
def test_sliding_window_target_past_its_window_matches_plain_greedy(arch, prompt_len):
    if arch == "qwen3":
        target = tiny_target(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0)
        assert set(target.config.layer_types) == {"sliding_attention"}
    else:
        target = tiny_mistral()
    drafter = tiny_drafter(target, block_size=8)
    prompt = random_prompt(3, prompt_len)
    plain = plain_greedy(target, prompt, 3 * WINDOW)
    assert not torch.equal(plain, plain_greedy(tiny_target(), prompt, 3 * WINDOW))  # the window matters
    for block_size in (2, 5, 8, WINDOW + 1):
        out = target.generate(
            input_ids=prompt, max_new_tokens=3 * WINDOW, do_sample=False, assistant_model=drafter, block_size=block_size
        )
        assert torch.equal(out, plain), block_size


def test_target_with_linear_attention_is_refused_up_front():
    class Target:  # only the config is read
        config = Qwen3NextConfig(num_hidden_layers=4)

    with pytest.raises(ValueError, match=r"linear_attention layers.*cannot be rolled back.*without assistant_model"):
        check_target_cache(Target())


@pytest.mark.parametrize(
    ("target_dtype", "drafter_dtype"), [(torch.float64, torch.float32), (torch.float32, torch.bfloat16)]
)
def test_drafter_in_another_dtype_runs_in_its_own_and_stays_lossless(target_dtype, drafter_dtype):
    target = tiny_target(dtype=target_dtype)
    prompt = random_prompt(1, 7)
    plain = plain_greedy(target, prompt, 24)
    for drafter in (tiny_drafter(target), OracleDrafter.from_drafter(tiny_drafter(target), plain)):
        drafter = drafter.to(drafter_dtype)
        out = target.generate(
            input_ids=prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter, return_dict_in_generate=True
        )
        assert torch.equal(out.sequences, plain)
        assert drafter.dtype == drafter_dtype and target.dtype == target_dtype  # nobody was cast in place
    assert out.blockpilot.new_tokens == 24 and len(out.blockpilot.steps) == 3  # the oracle's drafts were all accepted


class NaNDrafter(DFlashDrafter):
    """A broken drafter: finite logits for the first `finite_rows` draft positions, NaN after them."""

    finite_rows = 0

    @classmethod
    def from_drafter(cls, drafter: DFlashDrafter, finite_rows: int) -> NaNDrafter:
        broken = cls(drafter.config).to(drafter.dtype)
        broken.load_state_dict(drafter.state_dict())
        broken.finite_rows = finite_rows
        return broken.eval()

    @torch.no_grad()
    def draft(self, embed, lm_head, anchor, context_hidden_states, block_size, cache):
        logits = super().draft(embed, lm_head, anchor, context_hidden_states, block_size, cache)
        logits[:, self.finite_rows :] = float("nan")
        return logits


@pytest.mark.parametrize("draft_sampling", [False, True])
def test_drafter_with_nan_logits_gives_exactly_the_plain_samples(draft_sampling):
    """All drafts dropped: every step draws the target's token with the same RNG calls as plain `generate`."""
    target = tiny_target(seed=2)
    broken = NaNDrafter.from_drafter(tiny_drafter(target), finite_rows=0)
    prompt = random_prompt(2, 6)
    kwargs = dict(input_ids=prompt, max_new_tokens=20, do_sample=True, top_k=20)
    torch.manual_seed(7)
    plain = target.generate(**kwargs)
    torch.manual_seed(7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = target.generate(**kwargs, assistant_model=broken, block_size=4, draft_sampling=draft_sampling)
    assert torch.equal(ours, plain)
    # Sampled drafts need a distribution, so the broken drafter is reported; greedy drafts are just wrong tokens.
    assert any("non-finite logits" in str(w.message) for w in caught) == draft_sampling
    greedy = target.generate(input_ids=prompt, max_new_tokens=20, do_sample=False, assistant_model=broken)
    assert torch.equal(greedy, plain_greedy(target, prompt, 20))


@pytest.mark.filterwarnings("ignore:The drafter produced non-finite logits")
def test_drafts_before_a_nan_row_still_follow_the_target_law():
    """The first draft is sampled and judged by rejection sampling, the NaN rest dropped: the law is p's."""
    target, drafter = law_pair()
    broken = NaNDrafter.from_drafter(drafter, finite_rows=1)
    prompt = random_prompt(5, 4, vocab=8)

    def one() -> list[int]:
        out = target.generate(
            input_ids=prompt,
            max_new_tokens=LAW_GENERATED,
            do_sample=True,
            top_k=5,
            assistant_model=broken,
            block_size=3,
            draft_sampling=True,
        )
        return out[0, prompt.shape[1] : prompt.shape[1] + LAW_TOKENS].tolist()

    law = exact_law(target, prompt, warpers(1.0, 5, None))
    assert g_test_p_value(sample_counts(one, seed=11), law) > LAW_ALPHA


def test_a_step_reads_the_stopping_criteria_once():
    """Committing a step's tokens reads the criteria's verdicts on the host once (one GPU sync per step, not one
    per token), and still stops exactly after the first token that fires."""
    from transformers import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList

    from blockpilot_hf.decoding.engine import _Sequence

    stopping = StoppingCriteriaList([EosTokenCriteria(7), MaxLengthCriteria(20)])
    seq = _Sequence(torch.zeros((1, 20), dtype=torch.long), 3, stopping, None)
    reads = []
    real = torch.Tensor.tolist
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "tolist", lambda self: (reads.append(1), real(self))[1])
        patch.setattr(torch.Tensor, "__bool__", lambda self: pytest.fail("a per-token host read"))
        assert seq.commit([4, 5, 6]) == 3 and not seq.done and len(reads) == 1
        assert seq.commit([8, 7, 9, 9]) == 2 and seq.done and len(reads) == 2
    assert seq.ids.tolist() == [[0, 0, 0, 4, 5, 6, 8, 7]] and seq.buffer[0, 8:].tolist() == [0] * 12
