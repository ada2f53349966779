"""Per-step choice for `generate(block_policy=...)`: a fresh `StepPlanner` per request, primed by a BlockPilot head.

    out = target.generate(**inputs, assistant_model=drafter, block_policy="per-step")   # no head: neutral prior
    out = target.generate(**inputs, assistant_model=drafter, block_policy=policy)       # the head sets the prior

The head reads the prefill once and predicts each candidate shape's acceptance length; what those predictions imply
per token (`implied_rates`), against the head's average prediction, shifts the policy's fitted prior (`StepPrior`,
measured by `blockpilot fit-step-prior`) for this request. The planner then chooses every step from the copy on
offer, the drafter's confidence and this device's costs, and learns from what the target accepts.
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


def implied_rates(taus: list[float], candidates: list[DraftShape]) -> tuple[float, float]:
    """(drafter, copy) per-token rates a head's predicted taus imply: from its longest chain, and from its longest
    lookup-only shape (0.5 for a kind it has no candidate of). A lookup shape's tau averages in steps that found no
    copy, so its rate is a floor; it serves as a relative signal (`StepPrior.for_request`), not an absolute one."""
    by_shape = dict(zip(candidates, taus, strict=True))
    chains = [c for c in candidates if c.is_chain and c.block_size > 1]
    lookups = [c for c in candidates if c.lookup_tokens and c.block_size == 1 and not c.tree_budget]
    draft = lookup = 0.5
    if chains:
        longest = max(chains, key=lambda c: c.block_size)
        draft = geometric_rate(by_shape[longest], longest.block_size)
    if lookups:
        longest = max(lookups, key=lambda c: c.lookup_tokens)
        lookup = geometric_rate(by_shape[longest], longest.lookup_tokens + 1)
    return draft, lookup


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
        """The head's fitted prior for the request's temperature, shifted by what it predicts for this prefill;
        the default prior without a head."""
        if self.head is None:
            return StepPrior()
        base = self.head.step_prior(self.temperature)
        taus = self.head.predict_tau(prefill, self.temperature)
        return base.for_request(*implied_rates(taus, self.head.config.candidates))

    def __call__(self, prefill: Prefill) -> StepPlanner:
        return StepPlanner(self.costs, self.prior(prefill), max_depth=self.max_depth, name=self.name)

    def choose_batch(self, prefills: list[Prefill]) -> int:
        """A batch drafts one chain size for all rows: the head's batch rule, else the longest chain."""
        if self.head is None:
            return self.max_depth + 1
        return self.head.choose_batch(prefills, temperature=self.temperature)
