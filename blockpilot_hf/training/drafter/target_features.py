"""Frozen-target passes for drafter training, computed once per sequence and cached on disk.

Each pass yields the drafter's context features and the target's own greedy prediction at every position
(teacher-forced). Training labels are those predictions, so any text can teach the drafter what the target
would say next; on the target's own greedy answers they equal the text itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import torch


@torch.no_grad()
def target_pass(target, input_ids: torch.Tensor, layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (S, n*H) of `layer_ids` and predictions (S,): entry j is the target's argmax for token j given
    tokens < j (entry 0, which nothing predicts, is the token itself)."""
    out = target(input_ids=input_ids, output_hidden_states=[i + 1 for i in layer_ids], use_cache=False)
    features = torch.cat([out.hidden_states[i + 1][0] for i in layer_ids], dim=-1)  # hidden_states[0] = embeddings
    predictions = torch.cat([input_ids[0, :1], out.logits[0, :-1].argmax(-1)])
    return features, predictions


class FeatureCache:
    """Per-sequence (features float16, predictions) files under `root`; later epochs and restarts reuse them."""

    def __init__(self, root: Path, target, layer_ids: list[int], autocast: Callable = contextlib.nullcontext):
        """`autocast` wraps the target pass (e.g. `accelerator.autocast`: the pass dominates the first epoch)."""
        self.root, self.target, self.layer_ids, self.autocast = Path(root), target, layer_ids, autocast
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, key: str, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        path = self.root / f"{key.replace('/', '_')}.pt"
        if path.exists():
            try:
                return torch.load(path)
            except (RuntimeError, EOFError):  # a file torn by an interrupted write: recompute it
                path.unlink()
        with self.autocast():
            features, predictions = target_pass(self.target, input_ids, self.layer_ids)
        item = (features.to(torch.float16), predictions)
        tmp = path.with_suffix(".tmp")
        torch.save(item, tmp)
        tmp.replace(path)
        return item
