"""Sampling with a DFlash drafter draws continuations from exactly the target's own law.

The reference law is computed, not sampled: one batched target forward scores every continuation of length
`NEW` over a vocabulary of `V` tokens, through the same warpers `generate` builds (temperature, top-k, top-p).
Samples from our engine are compared to it with a G-test at significance `ALPHA` (fixed seeds: deterministic).
Exact draws from the law must pass, draws at temperature 2 and our engine with a classic rejection-sampling bug must
both fail the same test: it has power.
"""

from __future__ import annotations

import functools
import itertools
import math
from unittest import mock

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from blockpilot_hf.decoding import acceptance, engine
from blockpilot_hf.testing_utils import random_prompt, tiny_drafter, tiny_target

ALPHA = 1e-3  # probability that a correct sampler fails one test
V = 8  # vocabulary: small enough to enumerate every continuation
NEW = 3  # continuation length tested (its law is exact, below)
GENERATED = NEW + 1  # tokens generated: 1 from prefill, then 3 verified; the engine never verifies past this, so a
# block of 3 drafts tokens 2 and 3 in one step while a block of 2 drafts them in two steps
SAMPLES = 600
MIN_EXPECTED = 5.0  # cells expected less often than this are pooled, so the chi-square approximation holds


@functools.cache
def model_pair():
    """A vocabulary-8 target, sharp enough that ~30-40 continuations are each expected >= 5 times in SAMPLES
    draws (a flat law would pool everything into one cell and test nothing), and its random drafter."""
    target = tiny_target(seed=3, vocab=V, layers=2, scale=12.0)
    return target, tiny_drafter(target, block_size=4, mask_token_id=V - 1)


def warpers(temperature: float, top_k: int | None, top_p: float | None) -> LogitsProcessorList:
    """The warpers `generate(do_sample=True, ...)` applies, in its order: temperature, top-k, top-p."""
    out = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k is not None:
        out.append(TopKLogitsWarper(top_k))
    if top_p is not None:
        out.append(TopPLogitsWarper(top_p))
    return out


def exact_law(target, prompt: torch.Tensor, processors: LogitsProcessorList) -> dict[tuple[int, ...], float]:
    """P(continuation) for every continuation of length NEW: the product of processed next-token probabilities."""
    T = prompt.shape[1]
    prefixes = torch.tensor(list(itertools.product(range(V), repeat=NEW - 1)), dtype=prompt.dtype)  # (V^(NEW-1), NEW-1)
    rows = torch.cat([prompt.expand(len(prefixes), -1), prefixes], dim=1)  # (R, T + NEW - 1)
    with torch.no_grad():
        logits = target(input_ids=rows).logits[:, T - 1 :].double()  # (R, NEW, V): next-token logits per position
    law: dict[tuple[int, ...], float] = {}
    for r, prefix in enumerate(prefixes.tolist()):
        probs = [torch.softmax(processors(rows[r : r + 1, : T + i], logits[r, i][None])[0], -1) for i in range(NEW)]
        for last in range(V):
            seq = (*prefix, last)
            law[seq] = math.prod(float(probs[i][seq[i]]) for i in range(NEW))
    assert abs(sum(law.values()) - 1) < 1e-9
    return law


def g_test_p_value(counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float], min_cells: int = 10) -> float:
    """p-value of the G-test (likelihood ratio) of `counts` against `law`, pooling rare cells into one.
    Refuses to run with fewer than `min_cells` cells: such a test could not tell a wrong sampler apart."""
    n = sum(counts.values())
    if any(law.get(seq, 0.0) == 0.0 for seq in counts):
        return 0.0  # a continuation the target can never produce
    cells, pooled_obs, pooled_exp = [], 0, 0.0
    for seq, p in law.items():
        if n * p >= MIN_EXPECTED:
            cells.append((counts.get(seq, 0), n * p))
        else:
            pooled_obs, pooled_exp = pooled_obs + counts.get(seq, 0), pooled_exp + n * p
    if pooled_exp > 0:
        cells.append((pooled_obs, pooled_exp))
    assert len(cells) >= min_cells, f"only {len(cells)} testable cells: sharpen the law or draw more samples"
    g = 2 * sum(obs * math.log(obs / exp) for obs, exp in cells if obs > 0)
    dof = len(cells) - 1
    return float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(g / 2, dtype=torch.float64))
    )


def sample_counts(sample_one, seed: int) -> dict[tuple[int, ...], int]:
    """Run `sample_one()` SAMPLES times from a fixed global seed; count each continuation."""
    torch.manual_seed(seed)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(SAMPLES):
        seq = tuple(sample_one())
        counts[seq] = counts.get(seq, 0) + 1
    return counts


def ours(prompt, block_size: int, draft_sampling: bool, temperature=1.0, top_k=None, top_p=None, lookup=0, tree=None):
    """A sampler of continuations through the enabled `generate` with our drafter (prompt lookup, a tree)."""
    target, drafter = model_pair()

    def one() -> list[int]:
        out = target.generate(
            prompt_lookup_num_tokens=lookup or None,
            tree_budget=tree,
            input_ids=prompt,
            max_new_tokens=GENERATED,
            do_sample=True,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            assistant_model=drafter,
            block_size=block_size,
            draft_sampling=draft_sampling,
        )
        return out[0, prompt.shape[1] : prompt.shape[1] + NEW].tolist()

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
    target, _ = model_pair()
    prompt = random_prompt(5, 4, vocab=V)
    law = exact_law(target, prompt, warpers(1.0, top_k, top_p))
    counts = sample_counts(
        ours(prompt, block_size, draft_sampling, top_k=top_k, top_p=top_p, lookup=lookup), seed=block_size
    )
    assert g_test_p_value(counts, law) > ALPHA


@pytest.mark.parametrize(("tree", "top_k", "lookup"), [(4, None, 0), (6, 5, 2)])
def test_sampled_continuations_from_draft_trees_follow_the_target_law(tree, top_k, lookup):
    target, _ = model_pair()
    prompt = random_prompt(5, 4, vocab=V)
    law = exact_law(target, prompt, warpers(1.0, top_k, None))
    counts = sample_counts(ours(prompt, 3, False, top_k=top_k, lookup=lookup, tree=tree), seed=tree)
    assert g_test_p_value(counts, law) > ALPHA


def test_prompt_lookup_drafts_are_used_in_the_sampled_cases():
    """The lookup cases above test something: with this prompt, lookup drafts are verified and often accepted."""
    target, drafter = model_pair()
    prompt = random_prompt(5, 4, vocab=V)
    torch.manual_seed(0)
    sources = {"lookup": 0, "drafter": 0}
    for _ in range(20):
        out = target.generate(
            input_ids=prompt,
            max_new_tokens=GENERATED,
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
    target, _ = model_pair()
    prompt = random_prompt(5, 4, vocab=V)
    law, hot = (
        exact_law(target, prompt, warpers(1.0, None, None)),
        exact_law(target, prompt, warpers(2.0, None, None)),
    )
    seqs = list(law)

    def draw_from(table):
        weights = torch.tensor([table[s] for s in seqs])
        return lambda: seqs[int(torch.multinomial(weights, 1))]

    assert g_test_p_value(sample_counts(draw_from(law), seed=0), law) > ALPHA
    assert g_test_p_value(sample_counts(draw_from(hot), seed=0), law) < ALPHA


def test_rejection_sampling_that_resamples_from_p_instead_of_the_residual_is_rejected():
    """A classic bug (after a rejected draft, sample from p rather than norm(max(0, p - q))) over-weights the
    rejected draft; with the same seeds and the same test it must fail."""
    from blockpilot_hf.decoding import acceptance

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

    target, drafter = model_pair()
    prompt = random_prompt(5, 4, vocab=V)
    law = exact_law(target, prompt, warpers(1.0, None, None))
    assert acceptance.accept_rejection is engine.accept_rejection  # the engine calls the rule we replace
    with mock.patch.object(engine, "accept_rejection", buggy):
        counts = sample_counts(ours(prompt, 3, True), seed=0)
    assert g_test_p_value(counts, law) < ALPHA


def test_a_tree_walk_that_favours_drafted_children_is_rejected():
    """Power check for the tree cases: a walk that, when the target's sample matches no child, takes the first
    child anyway (over-weighting drafted tokens) must fail the same test."""
    from blockpilot_hf.decoding import tree as tree_module

    def buggy(tree, score, do_sample, generator=None):
        committed, path, node = [], [], 0
        while True:
            token = acceptance.target_choice(score(node, committed), do_sample, generator)
            children = tree.children(node)
            child = children.get(token, next(iter(children.values()), None))
            if child is None:
                return committed + [token], path
            committed.append(tree.tokens[child - 1])
            path.append(child)
            node = child

    target, _ = model_pair()
    prompt = random_prompt(5, 4, vocab=V)
    law = exact_law(target, prompt, warpers(1.0, None, None))
    assert tree_module.accept_tree is engine.accept_tree  # the engine calls the walk we replace
    with mock.patch.object(engine, "accept_tree", buggy):
        counts = sample_counts(ours(prompt, 3, False, tree=4), seed=0)
    assert g_test_p_value(counts, law) < ALPHA
