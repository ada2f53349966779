"""Prefill features for a BlockPilot head: only what prefill already computed, no extra target forward.

The authors' head reads the whole last-position logit vector (V inputs, so a Qwen3 head has hundreds of millions
of weights). Here the head reads H-sized rows (pooled and last-position drafter context, the final hidden state)
through one shared projection, plus a handful of logit statistics: O(H) weights whatever the vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..decoding.engine import Prefill
from .config import FeatureSpec


@dataclass
class PrefillFeatures:
    """Features of one prompt: `groups` (G, H) rows and `stats` (S,) logit statistics, both float32."""

    groups: torch.Tensor  # (G, H), G = 2 * n_context_layers + 1
    stats: torch.Tensor  # (S,)

    def to_list(self) -> list[float]:
        """Flat list (G*H + S floats, 7 significant digits) for JSON records."""
        flat = torch.cat([self.groups.flatten(), self.stats]).tolist()
        return [float(f"{v:.7g}") for v in flat]

    @classmethod
    def from_list(cls, values: list[float], spec: FeatureSpec) -> PrefillFeatures:
        if len(values) != spec.size:
            raise ValueError(
                f"feature vector has {len(values)} values, the spec expects {spec.size} "
                f"({spec.num_groups} rows of {spec.hidden_size} + {spec.num_stats} stats): collected with another setup."
            )
        flat = torch.tensor(values, dtype=torch.float32)
        split = spec.num_groups * spec.hidden_size
        return cls(flat[:split].view(spec.num_groups, spec.hidden_size), flat[split:])


def spec_for(target, drafter, top_k: int = 8) -> FeatureSpec:
    """The feature spec of a target/drafter pair."""
    return FeatureSpec(
        hidden_size=drafter.config.hidden_size,
        num_context_layers=len(drafter.config.target_layer_ids),
        top_k=top_k,
    )


def logit_stats(logits: torch.Tensor, prompt_tokens: int, top_k: int) -> torch.Tensor:
    """(top_k + 3,) statistics of raw last logits (V,): entropy, top-k log-probs, top1-top2 margin, log length.

    A confident next token (low entropy, large margin) tends to mean a predictable continuation, which the
    drafter accepts for longer; these cost one softmax over V and no weights."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (V,)
    entropy = -(logp.exp() * logp).sum()
    k = min(top_k, logits.shape[-1])
    top = torch.topk(logp, k).values
    if k < top_k:  # tiny vocabularies: pad with a very unlikely log-prob
        top = torch.cat([top, top.new_full((top_k - k,), -30.0)])
    margin = top[0] - top[1] if k > 1 else top.new_zeros(())
    return torch.cat([entropy[None], top.clamp(min=-30.0), margin[None], top.new_tensor([math.log(prompt_tokens)])])


@torch.no_grad()
def extract_features(prefill: Prefill, spec: FeatureSpec) -> PrefillFeatures:
    """Features of a `Prefill`: context (1, T, n*H), last_hidden (1, H), logits (1, V) -> `PrefillFeatures`."""
    n, H = spec.num_context_layers, spec.hidden_size
    _, T, width = prefill.context.shape
    if width != n * H or prefill.last_hidden.shape[-1] != H:
        raise ValueError(
            f"prefill context width {width} / hidden {prefill.last_hidden.shape[-1]} do not match the policy's "
            f"{n} context layers of hidden size {H}: the policy was made for another target or drafter."
        )
    context = prefill.context[0].float().view(T, n, H)  # (T, n, H)
    groups = torch.cat([context.mean(dim=0), context[-1], prefill.last_hidden.float().view(1, H)])  # (2n+1, H)
    stats = logit_stats(prefill.logits[0], prefill.input_ids.shape[1], spec.top_k)
    return PrefillFeatures(groups.cpu(), stats.cpu())


def stack_features(items: list[PrefillFeatures]) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch features: groups (N, G, H), stats (N, S)."""
    return torch.stack([f.groups for f in items]), torch.stack([f.stats for f in items])


def entropy_of(features: PrefillFeatures) -> float:
    """The prefill entropy (nats) stored first among the stats; used by the training-free heuristic."""
    return float(features.stats[0])
