"""The pure acceptance rules: exact outcomes on constructed choices and logits, and the output law of rejection sampling."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockpilot_hf.decoding.acceptance import accept_greedy, accept_point_mass, accept_rejection


@pytest.mark.parametrize(
    ("drafts", "target", "committed"),
    [
        ([1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4]),  # all accepted, then the bonus
        ([1, 2, 3], [1, 5, 3, 4], [1, 5]),  # first mismatch at 1: the target's token replaces it
        ([1, 2, 3], [0, 2, 3, 4], [0]),  # nothing accepted
        ([], [4], [4]),  # block size 1: plain decoding
    ],
)
def test_accept_greedy_exact_outcomes(drafts, target, committed):
    assert accept_greedy(drafts, target) == committed


@settings(deadline=None, max_examples=50, derandomize=True)
@given(st.integers(0, 10_000), st.integers(0, 7))
def test_point_mass_greedy_equals_accept_greedy_and_sees_the_right_prefix(seed, n_drafts):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n_drafts + 1, 5, generator=g)
    drafts = torch.where(
        torch.rand(n_drafts, generator=g) < 0.7,
        logits[:-1].argmax(-1),
        torch.randint(0, 5, (n_drafts,), generator=g),
    )
    seen: list[tuple[int, list[int]]] = []

    def score(i: int, prefix: list[int]) -> torch.Tensor:
        seen.append((i, list(prefix)))
        return logits[i]

    committed = accept_point_mass(drafts.tolist(), score, do_sample=False)
    assert committed == accept_greedy(drafts.tolist(), logits.argmax(-1).tolist())
    assert seen == [(i, committed[:i]) for i in range(len(committed))]  # position i scored after its own prefix


def test_rejection_accepts_everything_when_q_equals_p():
    p_logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]]))
    q = torch.softmax(p_logits[:2], -1)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        drafts = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
        committed = accept_rejection(drafts, q, lambda i, _: p_logits[i], g)
        assert committed[:2] == drafts and len(committed) == 3


def test_rejection_never_keeps_a_draft_the_target_cannot_produce():
    p_logits = torch.tensor([[0.0, 0.0, -float("inf")]])  # p = (1/2, 1/2, 0)
    q = torch.tensor([[0.0, 0.0, 1.0]])  # the drafter always proposes token 2
    g = torch.Generator().manual_seed(0)
    outcomes = {accept_rejection([2], q, lambda i, _: p_logits[i], g)[0] for _ in range(100)}
    assert outcomes == {0, 1}  # rejected every time; the residual max(0, p - q) is p itself


def law_of_first_token(p: torch.Tensor, q: torch.Tensor, rule, draws: int = 20_000) -> torch.Tensor:
    """Monte Carlo frequencies of the first committed token when the draft is x ~ q and the rule decides."""
    g = torch.Generator().manual_seed(1)
    drafts = torch.multinomial(q, draws, replacement=True, generator=g).tolist()
    counts = torch.zeros_like(p)
    for x in drafts:
        counts[rule([x], q[None], lambda i, _: p.log(), g)[0]] += 1
    return counts / draws


@pytest.mark.parametrize(
    ("p", "q"),
    [
        ([0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]),
        ([0.1, 0.1, 0.1, 0.7], [0.7, 0.1, 0.1, 0.1]),
    ],
)
def test_rejection_sampling_commits_tokens_distributed_as_p(p, q):
    p, q = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
    freq = law_of_first_token(p, q, accept_rejection)
    # 20k draws: the standard error of each frequency is <= 0.0036, so 0.015 is > 4 sigma.
    assert torch.allclose(freq, p, atol=0.015)
    accepted_directly = float((q * torch.minimum(torch.ones_like(p), p / q)).sum())
    assert accepted_directly < 0.9  # the residual branch carries real mass: it is tested too


def test_the_same_check_rejects_resampling_from_p_after_a_rejection():
    """The Monte Carlo check above has power: the textbook bug over-weights q's favourite token."""

    def buggy(drafts, q, score, g):
        p = torch.softmax(score(0, []), -1)
        x = drafts[0]
        return [x] if torch.rand((), generator=g) * q[0, x] < p[x] else [int(torch.multinomial(p, 1, generator=g))]

    p = torch.tensor([0.1, 0.1, 0.1, 0.7], dtype=torch.float64)
    q = torch.tensor([0.7, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert not torch.allclose(law_of_first_token(p, q, buggy), p, atol=0.015)
