"""Cost of a decoding step per block size, measured on the user's hardware, and the throughput-aware choice.

    blockpilot calibrate --target smollm2 --drafter DRAFTER_DIR

Verifying a longer block costs more (about 2.3x one token for 16 tokens with a 135M model on 2 CPU cores), so the
size with the highest acceptance length is not the fastest one. Expected tokens per second at size b is
tau(b) / cost(b); a calibration measures cost(b) with a short real run and caches it per device, models and
dtype under the blockpilot cache; a policy falls back to the cost model stored with it.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import torch

from ..constants import CACHE_HOME
from ..decoding.shape import DraftShape
from ..jsonfile import load_json, save_json
from .config import CostModel

logger = logging.getLogger(__name__)

C = TypeVar("C")  # a candidate: a block size (int) or a DraftShape


def choose_size(taus: Sequence[float], candidates: Sequence[C], rule: str, cost: CostModel | None) -> C:
    """The candidate (block size or `DraftShape`) a rule picks from predicted taus (one per candidate).

    "throughput": argmax tau(c) / cost(c) (tokens per second); "classifier": argmax tau(c), the paper's rule.
    Ties go to the earlier candidate (pass them sorted: the smaller size, cheaper when equally good). Without a
    cost model throughput falls back to tau."""
    if rule == "throughput" and cost is not None:
        scores = [t / cost.step_seconds(c) for t, c in zip(taus, candidates, strict=True)]
    else:
        scores = list(taus)
    best = max(range(len(candidates)), key=lambda i: (scores[i], -i))
    return candidates[best]


def cost_from_steps(steps: dict[int | DraftShape, list[float]], device: str, source: str) -> CostModel:
    """A cost model from measured per-step seconds (draft + verify) per block size or draft shape, the median of
    each (robust to noise).

    The one builder: calibration passes each step's time, collected records each prompt's mean step time
    (`training.policy.collected.step_seconds_by_candidate`). Candidates without times are left out."""
    medians = {DraftShape.parse(c): statistics.median(secs) for c, secs in steps.items() if secs}
    chains = sorted(c for c in medians if c.is_chain)
    if not chains:
        raise ValueError("No timed steps at any block size to build a cost model from.")
    shapes = {str(c): t for c, t in sorted(medians.items()) if not c.is_chain}
    return CostModel([c.block_size for c in chains], [medians[c] for c in chains], device, source, shapes)


def device_name(device: torch.device | str) -> str:
    """A stable description of the hardware a measurement ran on (GPU model, or CPU arch and threads)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type}-{platform.machine()}-{torch.get_num_threads()}threads"


def cache_dir() -> Path:
    return Path(os.environ.get("BLOCKPILOT_CACHE", CACHE_HOME)) / "cost"


def calibration_path(target, drafter) -> Path:
    """Where the calibration of this device / target / drafter / dtype lives."""
    parts = [
        device_name(target.device),
        getattr(target.config, "name_or_path", "") or "target",
        getattr(drafter.config, "name_or_path", "") or "drafter",
        str(target.dtype).removeprefix("torch."),
    ]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", "--".join(parts))
    return cache_dir() / f"{slug}.json"


def load_calibration(target, drafter) -> CostModel | None:
    """The cached calibration for this setup, or None (a damaged cache file is ignored with a warning)."""
    path = calibration_path(target, drafter)
    if not path.is_file():
        return None
    try:
        return load_json(CostModel, path)
    except ValueError as err:
        logger.warning("Ignoring damaged calibration %s (%s); rerun `blockpilot calibrate`.", path, err)
        return None


@torch.no_grad()
def calibrate(
    target, drafter, sizes: Sequence[int], prompt_tokens: int = 64, steps: int = 6, save: bool = True
) -> CostModel:
    """Measure seconds per step at each block size with short real engine runs (median over steps).

    Runs the engine itself, so the measured step is exactly what decoding pays: one drafter pass (none for
    size 1) plus one target forward over the block, at a realistic cache length."""
    from transformers import LogitsProcessorList, StoppingCriteriaList
    from transformers.generation.stopping_criteria import MaxLengthCriteria

    from ..decoding.engine import speculative_generate

    vocab = target.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (1, prompt_tokens), generator=g).to(target.device)
    measured: dict[int, list[float]] = {}
    for size in [min(sizes)] + list(sizes):  # the first run warms up kernels and allocators; it is overwritten
        max_length = prompt_tokens + 1 + steps * size
        _, stats = speculative_generate(
            target,
            drafter,
            input_ids,
            block_size=size,
            logits_processor=LogitsProcessorList(),
            stopping_criteria=StoppingCriteriaList([MaxLengthCriteria(max_length)]),
            max_length=max_length,
            do_sample=False,
        )
        measured[size] = [s.draft_time + s.verify_time for s in stats.steps if s.block_size == size]
    cost = cost_from_steps(measured, device_name(target.device), "calibrated")
    if save:
        path = calibration_path(target, drafter)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_json(cost, path)
        logger.info("Saved calibration to %s", path)
    return cost
