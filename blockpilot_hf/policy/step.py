"""Per-step choice for `generate(block_policy=...)`: a fresh `StepPlanner` per request, primed by a BlockPilot head.

    out = target.generate(**inputs, assistant_model=drafter, block_policy="per-step")   # no head: neutral prior
    out = target.generate(**inputs, assistant_model=drafter, block_policy=policy)       # the head sets the prior

The head reads the prefill once and predicts each candidate shape's acceptance length; the prior a request starts
from is what those predictions imply per token (`prior_from_taus`). The planner then chooses every step from the
copy on offer, the drafter's confidence and this device's costs, and learns from what the target accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..decoding.engine import Prefill
from ..decoding.planner import StepCosts, StepPlanner, StepPrior
from ..decoding.shape import DraftShape


def geometric_rate(tau: float, terms: int) -> float:
    """The rate a with 1 + a + ... + a^(terms - 1) = tau: the chance per token, each given the one before, that a
    chain of `terms` verified tokens with acceptance length `tau` implies (bisection; 0 <= a <= 1)."""
    tau = min(max(tau, 1.0), float(terms))
    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        if sum(mid**j for j in range(terms)) < tau:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def prior_from_taus(taus: list[float], candidates: list[DraftShape]) -> StepPrior:
    """A request's `StepPrior` from a head's predicted tau per candidate: the drafter's rate from its longest
    chain, the copy's from its longest lookup-only shape. A lookup shape's tau averages in steps that found no
    copy, so its rate is a floor for the first copied token; once a copy is on track it tends to stay (the next
    tokens' prior is the square root of the first's)."""
    by_shape = dict(zip(candidates, taus, strict=True))
    chains = [c for c in candidates if c.is_chain and c.block_size > 1]
    lookups = [c for c in candidates if c.lookup_tokens and c.block_size == 1 and not c.tree_budget]
    prior = StepPrior()
    if chains:
        longest = max(chains, key=lambda c: c.block_size)
        prior.draft_accept = geometric_rate(by_shape[longest], longest.block_size)
    if lookups:
        longest = max(lookups, key=lambda c: c.lookup_tokens)
        rate = geometric_rate(by_shape[longest], longest.lookup_tokens + 1)
        prior.lookup_first, prior.lookup_next = rate, rate**0.5
    return prior


@dataclass
class PerStepPolicy:
    """A `BlockChooser` that answers each request with a new `StepPlanner`: priced by `costs`, drafting up to
    `max_depth` positions per drafter pass, its prior from `head` (a `BlockPolicy`, at the request's
    `temperature`) or neutral without one."""

    costs: StepCosts
    max_depth: int
    head: object | None = None  # BlockPolicy
    temperature: float = 0.0
    name: str = "per-step"

    def prior(self, prefill: Prefill) -> StepPrior:
        if self.head is None:
            return StepPrior()
        taus = self.head.predict_tau(prefill, self.temperature)
        return prior_from_taus(taus, self.head.config.candidates)

    def __call__(self, prefill: Prefill) -> StepPlanner:
        return StepPlanner(self.costs, self.prior(prefill), max_depth=self.max_depth, name=self.name)

    def choose_batch(self, prefills: list[Prefill]) -> int:
        """A batch drafts one chain size for all rows: the head's batch rule, else the longest chain."""
        if self.head is None:
            return self.max_depth + 1
        return self.head.choose_batch(prefills, temperature=self.temperature)
