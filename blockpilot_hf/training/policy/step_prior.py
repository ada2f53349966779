"""Fit a policy's per-step prior: how often drafted and copied tokens are accepted, measured on its prompts.

    blockpilot fit-step-prior blockpilot_hf/assets/smollm2-135m-blockpilot --prompts gsm8k:policy,humaneval:policy,mt-bench:policy --limit 8

For each temperature the policy has a head for, every prompt is decoded with per-step choice from the default prior;
what its steps observed (whether the target took each drafter candidate, by the drafter's confidence bucket; whether
it took the first copied token, by the order of the n-gram match, and the next ones) is pooled over all requests into a `StepPrior`. The head's
average predicted per-token rates on the same prompts are its reference: a request's own prediction then shifts the
prior up or down (`StepPrior.for_request`). The priors go into the policy folder's config.json.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...constants import POLICY_CONFIG_NAME
from ...decoding.planner import COPY_ORDERS, Q_MIDS, Beta, StepPlanner, StepPrior
from ...policy.step import PerStepPolicy, implied_rates

SMOOTHING = 1.0  # pseudo-observations at the bucket's own q, so a bucket nobody saw keeps an honest drafter's value


@dataclass
class Tally:
    """Observations pooled over requests: accepted and tried, per drafter q bucket and for copied tokens."""

    draft: list[list[float]] = field(default_factory=lambda: [[0.0, 0.0] for _ in Q_MIDS])
    # The first copied token per match order (1, 2, 3+), on track; each next copied token.
    lookup: list[list[float]] = field(default_factory=lambda: [[0.0, 0.0] for _ in range(COPY_ORDERS + 2)])

    def add(self, planner: StepPlanner, prior: StepPrior) -> None:
        """What one request's planner observed: its posteriors less the prior it started from."""
        means = [*prior.draft_calibration, *prior.lookup_first, prior.lookup_on_track, prior.lookup_next]
        starts = [Beta.prior(m, prior.strength) for m in means]
        betas = [*planner.draft, *planner.lookup_first, planner.lookup_on_track, planner.lookup_next]
        pairs = zip([*self.draft, *self.lookup], betas, starts, strict=True)
        for count, beta, start in pairs:
            count[0] += beta.accepted - start.accepted
            count[1] += beta.accepted + beta.rejected - start.accepted - start.rejected

    def rate(self, count: list[float], fallback: float) -> float:
        return (count[0] + SMOOTHING * fallback) / (count[1] + SMOOTHING)


class RecordingPolicy:
    """Per-step choice from the default prior that keeps each request's planner, and the head's implied rates."""

    def __init__(self, inner: PerStepPolicy, head, temperature: float):
        self.inner, self.head, self.temperature = inner, head, temperature
        self.name = "fit-step-prior"
        self.planners: list[StepPlanner] = []
        self.rates: list[tuple[float, float]] = []

    def __call__(self, prefill) -> StepPlanner:
        taus = self.head.predict_tau(prefill, self.temperature)
        self.rates.append(implied_rates(taus, self.head.config.candidates))
        planner = self.inner(prefill)
        self.planners.append(planner)
        return planner


def fit_step_prior(target, drafter, policy, prompts: list[torch.Tensor], temperature: float, costs, **generate):
    """The `StepPrior` of `policy`'s head at `temperature` from decoding `prompts` ((1, T) each) per step."""
    recorder = RecordingPolicy(PerStepPolicy(costs, drafter.config.block_size - 1), policy, temperature)
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else {}
    for i, ids in enumerate(tqdm(prompts, desc=f"fit-step-prior T={temperature:g}", unit="prompt")):
        torch.manual_seed(i)
        target.generate(
            input_ids=ids.to(target.device),
            attention_mask=torch.ones_like(ids).to(target.device),
            assistant_model=drafter,
            block_policy=recorder,
            **sampling,
            **generate,
        )
    tally, start = Tally(), StepPrior()
    for planner in recorder.planners:
        tally.add(planner, start)
    draft_reference = statistics.fmean(r[0] for r in recorder.rates)
    return replace(
        start,
        draft_calibration=[tally.rate(c, q) for c, q in zip(tally.draft, Q_MIDS, strict=True)],
        lookup_first=[tally.rate(c, m) for c, m in zip(tally.lookup, start.lookup_first, strict=False)],
        lookup_on_track=tally.rate(tally.lookup[COPY_ORDERS], start.lookup_on_track),
        lookup_next=tally.rate(tally.lookup[COPY_ORDERS + 1], start.lookup_next),
        drafter_rate=draft_reference,
        reference_draft=draft_reference,
        reference_lookup=statistics.fmean(r[1] for r in recorder.rates),
    )


def write_step_priors(policy, folder: Path, priors: list[StepPrior]) -> None:
    """Store `priors` (one per head temperature) in the policy and its folder's config.json."""
    policy.config = replace(policy.config, step_priors=priors)  # validated: one per head
    policy.config.save(Path(folder) / POLICY_CONFIG_NAME)
