"""Baselines in the same interface as `BlockPolicy`: `BlockChooser`s (a `name`, callable on a `Prefill`) for
`generate(block_policy=...)`, and `choose(features)` offline.

- `FixedPolicy`: one size (or shape) for every request (the drafter's training size, the best fixed size on a dev
  set, a tree / lookup shape).
- `best_fixed_size`: the size with the highest mean modelled throughput over dev prompts.
- `oracle_size`: the per-prompt best size given measured taus (the labels, and the ceiling of any policy).
- `EntropyPolicy`: training-free: a confident next token (low prefill entropy) suggests a predictable answer,
  so draft long; a flat distribution suggests drafts will miss, so draft short or not at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..decoding.engine import Prefill
from ..decoding.shape import DraftShape
from .config import CostModel
from .cost import choose_size
from .features import PrefillFeatures, entropy_of, logit_stats

K = TypeVar("K", int, DraftShape)  # a candidate: a block size or a draft shape


@dataclass
class FixedPolicy:
    """Always `size`: a block size, or a tree / lookup `DraftShape`."""

    size: int | DraftShape
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"fixed:{self.size}"

    def choose(self, features: Prefill | PrefillFeatures) -> int | DraftShape:
        return self.size

    def __call__(self, prefill: Prefill) -> int | DraftShape:
        return self.size


def oracle_size(taus: dict[K, float], cost: CostModel | None, rule: str = "throughput") -> K:
    """The best candidate (block size or `DraftShape`) of one prompt from its measured tau per candidate (argmax
    tau/cost, or argmax tau)."""
    candidates = sorted(taus)
    return choose_size([taus[c] for c in candidates], candidates, rule, cost)


def modelled_throughput(tau: float, candidate: int | DraftShape, cost: CostModel | None) -> float:
    """Tokens per second implied by tau and the cost model (tau per step if there is no cost model)."""
    return tau / cost.step_seconds(candidate) if cost is not None else tau


def best_fixed_size(taus_per_prompt: Sequence[dict[K, float]], cost: CostModel | None, rule: str = "throughput") -> K:
    """The one candidate with the highest mean modelled throughput (or mean tau) over dev prompts."""
    candidates = sorted(set.intersection(*(set(t) for t in taus_per_prompt)))
    if not candidates:
        raise ValueError("No block size was measured on every dev prompt.")
    use_cost = cost if rule == "throughput" else None
    n = len(taus_per_prompt)
    means = [sum(modelled_throughput(t[c], c, use_cost) for t in taus_per_prompt) / n for c in candidates]
    return candidates[max(range(len(candidates)), key=lambda i: (means[i], -i))]


@dataclass
class EntropyPolicy:
    """Training-free: size interpolated (in log space) from `max_size` at entropy <= `low` down to 1 at >= `high`.

    Entropies are in nats of the last prompt position's next-token distribution. The result is rounded to the
    nearest candidate size."""

    candidate_sizes: list[int]
    low: float = 0.5
    high: float = 4.0
    name: str = "entropy"

    def size_for_entropy(self, entropy: float) -> int:
        top = max(self.candidate_sizes)
        frac = min(max((entropy - self.low) / (self.high - self.low), 0.0), 1.0)
        target = math.exp((1 - frac) * math.log(top))  # top at low entropy, 1 at high entropy
        return min(self.candidate_sizes, key=lambda b: (abs(math.log(b) - math.log(target)), b))

    def choose(self, features: Prefill | PrefillFeatures) -> int:
        if isinstance(features, Prefill):
            entropy = float(logit_stats(features.logits[0], features.input_ids.shape[1], 1)[0])
        else:
            entropy = entropy_of(features)
        return self.size_for_entropy(entropy)

    def __call__(self, prefill: Prefill) -> int:
        return self.choose(prefill)
