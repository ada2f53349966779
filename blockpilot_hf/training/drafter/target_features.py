"""Frozen-target passes for drafter training, computed once per sequence and cached on disk.

Each pass yields the drafter's context features, the target's own greedy prediction at every position
(teacher-forced) and the top of its next-token distribution. Hard labels are the predictions, so any text can
teach the drafter what the target would say next (on the target's own greedy answers they equal the text
itself); the distribution is the soft label that teaches the drafter to sample like the target.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

logger = logging.getLogger(__name__)


TOP_K = 32  # soft labels keep the target's 32 likeliest next tokens: most of the mass of a small LM's softmax


class TargetPass(NamedTuple):
    """One sequence's frozen-target outputs. Row j of the last three is about token j given tokens < j; row 0,
    which nothing predicts, holds token 0 itself with log-probability 0."""

    features: torch.Tensor  # (S, n*H) hidden states of the drafter's context layers, concatenated
    predictions: torch.Tensor  # (S,) the target's argmax
    top_logprobs: torch.Tensor  # (S, TOP_K) log-softmax of the target's logits at its TOP_K likeliest tokens
    top_ids: torch.Tensor  # (S, TOP_K) those tokens


@torch.no_grad()
def target_pass(target, input_ids: torch.Tensor, layer_ids: list[int]) -> TargetPass:
    """The frozen target's outputs on `input_ids` (1, S) for a drafter reading `layer_ids`."""
    out = target(input_ids=input_ids, output_hidden_states=[i + 1 for i in layer_ids], use_cache=False)
    features = context_features(out.hidden_states, layer_ids)
    top = torch.log_softmax(out.logits[0, :-1].float(), dim=-1).topk(TOP_K, dim=-1)
    first_ids = torch.full((1, TOP_K), int(input_ids[0, 0]), dtype=top.indices.dtype, device=input_ids.device)
    first_logprobs = torch.full((1, TOP_K), float("-inf"), device=input_ids.device)
    first_logprobs[0, 0] = 0.0
    return TargetPass(
        features,
        torch.cat([input_ids[0, :1], top.indices[:, 0]]),
        torch.cat([first_logprobs, top.values]),
        torch.cat([first_ids, top.indices]),
    )


def context_features(hidden_states: tuple[torch.Tensor, ...], layer_ids: list[int]) -> torch.Tensor:
    """(S, n*H): the hidden states (1, S, H) of the drafter's context layers, concatenated; hidden_states[0] is
    the embeddings, so layer i is hidden_states[i + 1]."""
    return torch.cat([hidden_states[i + 1][0] for i in layer_ids], dim=-1)


class FeatureCache:
    """One `TargetPass` file per sequence under `root` (features in float16); later epochs and restarts reuse
    them."""

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

    def get(self, key: str, input_ids: torch.Tensor) -> TargetPass:
        path = self.path(key, input_ids)
        if path.exists():
            item = _load(path)
            if item is not None:
                return item
            logger.warning("%s: unreadable or outdated feature cache file; recomputing it", path)
            path.unlink()
        with self.autocast():
            item = target_pass(self.target, input_ids.to(self.target.device), self.layer_ids)
        item = item._replace(features=item.features.to(torch.float16), top_logprobs=item.top_logprobs.float())
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # processes sharing the folder never write one tmp file
        torch.save(tuple(item), tmp)
        tmp.replace(path)
        return item


def _load(path: Path) -> TargetPass | None:
    """The `TargetPass` in `path`, or None when the file is damaged, holds anything else, or was written by an
    older version (a pair without the soft labels).

    `weights_only=True`: tensors only, so a cache file can never run code. A damaged file fails in many ways
    (EOFError when empty, RuntimeError when a zip is torn, UnpicklingError or KeyError for other bytes)."""
    try:
        item = torch.load(path, weights_only=True)
    except (RuntimeError, EOFError, KeyError, ValueError, pickle.UnpicklingError):
        return None
    ok = isinstance(item, tuple) and len(item) == len(TargetPass._fields)
    return TargetPass(*item) if ok and all(isinstance(t, torch.Tensor) for t in item) else None
