"""Sampling with a DFlash drafter draws continuations from exactly the target's own law.

The reference law is computed, not sampled (`testing_utils.exact_law`): one batched target forward scores every
continuation of `LAW_TOKENS` tokens over a vocabulary of `LAW_VOCAB`, through the same warpers `generate` builds
(temperature, top-k, top-p). Samples from our engine are compared to it with a G-test at significance `LAW_ALPHA`
(fixed seeds: deterministic).
Exact draws from the law must pass, draws at temperature 2 and our engine with a classic rejection-sampling bug must
both fail the same test: it has power.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from blockpilot_hf.decoding import acceptance, engine
from blockpilot_hf.testing_utils import (
    LAW_ALPHA,
    LAW_GENERATED,
    LAW_TOKENS,
    LAW_VOCAB,
    exact_law,
    g_test_p_value,
    law_pair,
    random_prompt,
    sample_counts,
    walk_favouring_drafted_children,
    warpers,
)


def ours(prompt, block_size: int, draft_sampling: bool, temperature=1.0, top_k=None, top_p=None, lookup=0, tree=None):
    """A sampler of continuations through the enabled `generate` with our drafter (prompt lookup, a tree)."""
    target, drafter = law_pair()

    def one() -> list[int]:
        out = target.generate(
            prompt_lookup_num_tokens=lookup or None,
            tree_budget=tree,
            input_ids=prompt,
            max_new_tokens=LAW_GENERATED,
            do_sample=True,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            assistant_model=drafter,
            block_size=block_size,
            draft_sampling=draft_sampling,
        )
        return out[0, prompt.shape[1] : prompt.shape[1] + LAW_TOKENS].tolist()

    return one


CASES = [  # (block size, draft_sampling, top_k, top_p, prompt lookup tokens)
    (2, False, 4, None, 0),
    (3, False, None, 0.8, 0),
    (2, True, None, 0.9, 0),
    (3, True, 5, None, 0),
    (3, False, None, None, 2),  # lookup drafts where the text repeats, drafter drafts elsewhere
    (1, False, 4, None, 3),  # lookup only
]


@pytest.mark.parametrize(("block_size", "draft_sampling", "top_k", "top_p", "lookup"), CASES)
def test_sampled_continuations_follow_the_target_law(block_size, draft_sampling, top_k, top_p, lookup):
    target, _ = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law = exact_law(target, prompt, warpers(1.0, top_k, top_p))
    counts = sample_counts(
        ours(prompt, block_size, draft_sampling, top_k=top_k, top_p=top_p, lookup=lookup), seed=block_size
    )
    assert g_test_p_value(counts, law) > LAW_ALPHA


@pytest.mark.parametrize(("tree", "top_k", "lookup"), [(4, None, 0), (6, 5, 2)])
def test_sampled_continuations_from_draft_trees_follow_the_target_law(tree, top_k, lookup):
    target, _ = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law = exact_law(target, prompt, warpers(1.0, top_k, None))
    counts = sample_counts(ours(prompt, 3, False, top_k=top_k, lookup=lookup, tree=tree), seed=tree)
    assert g_test_p_value(counts, law) > LAW_ALPHA


def test_prompt_lookup_drafts_are_used_in_the_sampled_cases():
    """The lookup cases above test something: with this prompt, lookup drafts are verified and often accepted."""
    target, drafter = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    torch.manual_seed(0)
    sources = {"lookup": 0, "drafter": 0}
    for _ in range(20):
        out = target.generate(
            input_ids=prompt,
            max_new_tokens=LAW_GENERATED,
            do_sample=True,
            assistant_model=drafter,
            block_size=3,
            prompt_lookup_num_tokens=2,
            return_dict_in_generate=True,
        )
        for name in sources:
            sources[name] += out.blockpilot.tokens_by_source[name]
    assert sources["lookup"] > 0


def test_g_test_accepts_exact_samples_and_rejects_a_hotter_law():
    """Calibration of the test itself, without the engine: draws from the law pass, draws at T=2 do not."""
    target, _ = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law, hot = (
        exact_law(target, prompt, warpers(1.0, None, None)),
        exact_law(target, prompt, warpers(2.0, None, None)),
    )
    seqs = list(law)

    def draw_from(table):
        weights = torch.tensor([table[s] for s in seqs])
        return lambda: seqs[int(torch.multinomial(weights, 1))]

    assert g_test_p_value(sample_counts(draw_from(law), seed=0), law) > LAW_ALPHA
    assert g_test_p_value(sample_counts(draw_from(hot), seed=0), law) < LAW_ALPHA


def test_rejection_sampling_that_resamples_from_p_instead_of_the_residual_is_rejected():
    """A classic bug (after a rejected draft, sample from p rather than norm(max(0, p - q))) over-weights the
    rejected draft; with the same seeds and the same test it must fail."""

    def buggy(drafts, q, score, generator=None):
        committed = []
        for i, x in enumerate(drafts):
            p = torch.softmax(score(i, committed), dim=-1)
            if torch.rand(()) * q[i, x] < p[x]:
                committed.append(x)
                continue
            committed.append(int(torch.multinomial(p, 1)))
            return committed
        return committed + [int(torch.multinomial(torch.softmax(score(len(drafts), committed), -1), 1))]

    target, drafter = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law = exact_law(target, prompt, warpers(1.0, None, None))
    assert acceptance.accept_rejection is engine.accept_rejection  # the engine calls the rule we replace
    with mock.patch.object(engine, "accept_rejection", buggy):
        counts = sample_counts(ours(prompt, 3, True), seed=0)
    assert g_test_p_value(counts, law) < LAW_ALPHA


def test_a_tree_walk_that_favours_drafted_children_is_rejected():
    """Power check for the tree cases: a walk that, when the target's sample matches no child, takes the first
    child anyway (over-weighting drafted tokens) must fail the same test."""
    from blockpilot_hf.decoding import tree as tree_module

    target, _ = law_pair()
    prompt = random_prompt(5, 4, vocab=LAW_VOCAB)
    law = exact_law(target, prompt, warpers(1.0, None, None))
    assert tree_module.accept_tree is engine.accept_tree  # the engine calls the walk we replace
    with mock.patch.object(engine, "accept_tree", walk_favouring_drafted_children):
        counts = sample_counts(ours(prompt, 3, False, tree=4), seed=0)
    assert g_test_p_value(counts, law) < LAW_ALPHA
