"""Acceptance rules of speculative decoding, as pure functions on tensors.

Names follow Leviathan et al. (2023): `p` is the target's distribution, `q` the drafter's. Every rule returns
the committed tokens of one step: the accepted drafts followed by one token from the target (the "bonus").
Processed scores come from a `score(i, prefix_tokens)` callback so that history-dependent logits processors
(repetition penalty, min_new_tokens, ...) see exactly the prefix the committed token will have.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ScoreFn = Callable[[int, list[int]], torch.Tensor]  # (position i, drafts before i) -> processed scores (V,)


def accept_greedy(drafts: list[int], choices: list[int]) -> list[int]:
    """Longest prefix of `drafts` (K-1,) equal to `choices` (K,), the target's argmax after each prefix, then the
    target's next token. Lists, not tensors: the caller moves the argmax to the host once per step."""
    n = next((i for i, (d, c) in enumerate(zip(drafts, choices[:-1], strict=True)) if d != c), len(drafts))
    return drafts[:n] + [choices[n]]


def accept_point_mass(
    drafts: list[int], score: ScoreFn, do_sample: bool, generator: torch.Generator | None = None
) -> list[int]:
    """Draw the target's own token at each position (argmax, or a sample of softmax(score)) and accept while it
    equals the draft. With a point-mass proposal q = 1[x = draft], rejection sampling reduces to exactly this,
    so every committed token is distributed as p given its prefix."""
    committed: list[int] = []
    for i in range(len(drafts) + 1):
        token = target_choice(score(i, committed), do_sample, generator)
        committed.append(token)
        if i == len(drafts) or token != drafts[i]:
            return committed
    raise AssertionError("unreachable")


def accept_rejection(
    drafts: list[int], q: torch.Tensor, score: ScoreFn, generator: torch.Generator | None = None
) -> list[int]:
    """Standard speculative sampling for drafts sampled from `q` (K-1, V): accept x with probability
    min(1, p(x)/q(x)); at the first rejection draw from norm(max(0, p - q)); if all pass, draw from p."""
    committed: list[int] = []
    for i, x in enumerate(drafts):
        p = torch.softmax(score(i, committed), dim=-1)
        u = torch.rand((), generator=generator, device=p.device)
        if u * q[i, x] < p[x]:  # u < p/q without dividing by a zero q
            committed.append(x)
            continue
        residual = (p - q[i]).clamp_min(0)
        committed.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        return committed
    p = torch.softmax(score(len(drafts), committed), dim=-1)
    committed.append(int(torch.multinomial(p, 1, generator=generator)))
    return committed


def target_choice(scores: torch.Tensor, do_sample: bool, generator: torch.Generator | None = None) -> int:
    """The target's own token from processed `scores` (V,): the argmax, or a sample of softmax(scores)."""
    return int(_sample(scores, generator)) if do_sample else int(scores.argmax())


def _sample(scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token from softmax(scores), as `generate` samples it."""
    return torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator)[0]
