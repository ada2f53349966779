"""Frozen-target passes for drafter training, computed once per sequence and cached on disk.

Each pass yields the drafter's context features and the target's own greedy prediction at every position
(teacher-forced). Training labels are those predictions, so any text can teach the drafter what the target
would say next; on the target's own greedy answers they equal the text itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


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

    def path(self, key: str, input_ids: torch.Tensor) -> Path:
        """The file of sequence `key` with exactly these tokens and target layers: a row regenerated under the
        same id (another answer, another length), or a drafter reading other layers, gets its own file."""
        layers = ",".join(map(str, self.layer_ids)).encode()
        digest = hashlib.sha256(input_ids.cpu().numpy().tobytes() + layers).hexdigest()[:16]
        return self.root / f"{key.replace('/', '_')}-{digest}.pt"

    def get(self, key: str, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        path = self.path(key, input_ids)
        if path.exists():
            item = _load(path)
            if item is not None:
                return item
            logger.warning("%s: unreadable feature cache file (an interrupted write?); recomputing it", path)
            path.unlink()
        with self.autocast():
            features, predictions = target_pass(self.target, input_ids.to(self.target.device), self.layer_ids)
        item = (features.to(torch.float16), predictions)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # processes sharing the folder never write one tmp file
        torch.save(item, tmp)
        tmp.replace(path)
        return item


def _load(path: Path) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (features, predictions) pair in `path`, or None when the file is damaged or holds anything else.

    `weights_only=True`: tensors only, so a cache file can never run code. A damaged file fails in many ways
    (EOFError when empty, RuntimeError when a zip is torn, UnpicklingError or KeyError for other bytes)."""
    try:
        item = torch.load(path, weights_only=True)
    except (RuntimeError, EOFError, KeyError, ValueError, pickle.UnpicklingError):
        return None
    ok = isinstance(item, tuple) and len(item) == 2 and all(isinstance(t, torch.Tensor) for t in item)
    return item if ok else None
