"""Cost of a decoding step per block size, measured on the user's hardware, and the throughput-aware choice.

    blockpilot calibrate --target smollm2 --drafter DRAFTER_DIR --shapes 8+tree12,1+lookup7 --prompts gsm8k:policy

Verifying a longer block costs more (about 2.3x one token for 16 tokens with a 135M model on 2 CPU cores), so the
size with the highest acceptance length is not the fastest one. Expected tokens per second at size b is
tau(b) / cost(b); a calibration measures cost(b), and the cost of tree and lookup shapes, with short real runs
and caches it per device, models and dtype under the blockpilot cache; a policy falls back to the cost model
stored with it.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import torch
from tqdm.auto import tqdm

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


def cost_from_steps(
    steps: dict[int | DraftShape, list[float]],
    device: str,
    source: str,
    copy_steps: dict[int, list[float]] | None = None,
) -> CostModel:
    """A cost model from measured per-step seconds (draft + verify) per block size or draft shape, the median of
    each (robust to noise), and of prompt-lookup steps per tokens verified (`copy_steps`, the copy ladder).

    The one builder: calibration passes each run's mean step time and each lookup step's time, collected records
    each prompt's mean step time (`training.policy.collected.step_seconds_by_candidate`). Candidates without times
    are left out."""
    medians = {DraftShape.parse(c): statistics.median(secs) for c, secs in steps.items() if secs}
    chains = sorted(c for c in medians if c.is_chain)
    if not chains:
        raise ValueError("No timed steps at any block size to build a cost model from.")
    shapes = {str(c): t for c, t in sorted(medians.items()) if not c.is_chain}
    copies = {n: statistics.median(secs) for n, secs in sorted((copy_steps or {}).items()) if secs}
    return CostModel(
        [c.block_size for c in chains],
        [medians[c] for c in chains],
        device,
        source,
        shapes,
        list(copies),
        list(copies.values()),
    )


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
    target,
    drafter,
    candidates: Sequence[int | str | DraftShape],
    prompts: Sequence[torch.Tensor] | None = None,
    new_tokens: int = 48,
    rounds: int = 3,
    save: bool = True,
) -> CostModel:
    """Measure seconds per step of each candidate (block size or draft shape) with real engine runs.

    Each round decodes every prompt (1, T) with every candidate, in an order that rotates so that load on a
    shared machine falls on all alike. A run's cost is its mean seconds per step (draft + verify, what decoding
    pays), and a candidate's the median over runs; each lookup step's time also goes to the copy ladder, by the
    tokens it verified. Prompt lookup copies only where the text repeats, so lookup
    shapes need real `prompts`; the default is one random prompt of 192 tokens. Size 1 is always timed."""
    from transformers import LogitsProcessorList, StoppingCriteriaList
    from transformers.generation.stopping_criteria import MaxLengthCriteria

    from ..decoding.engine import speculative_generate

    shapes = sorted({DraftShape(1), *(DraftShape.parse(c) for c in candidates)})
    if prompts is None:
        if any(shape.lookup_tokens for shape in shapes):
            raise ValueError(
                "Timing prompt-lookup shapes needs real prompts (`prompts=`, `blockpilot calibrate --prompts`): "
                "on random tokens lookup never copies, so its cost would be the drafter's."
            )
        vocab = target.get_input_embeddings().weight.shape[0]
        prompts = [torch.randint(0, vocab, (1, 192), generator=torch.Generator().manual_seed(0))]

    copy_steps: dict[int, list[float]] = {}  # tokens verified by a lookup step -> its seconds

    def mean_step_seconds(shape: DraftShape, prompt: torch.Tensor) -> float:
        prompt = prompt.to(target.device)
        max_length = prompt.shape[1] + new_tokens
        _, stats = speculative_generate(
            target,
            drafter,
            prompt,
            draft=shape,
            logits_processor=LogitsProcessorList(),
            stopping_criteria=StoppingCriteriaList([MaxLengthCriteria(max_length)]),
            max_length=max_length,
            do_sample=False,
        )
        for step in stats.steps:
            if step.source == "lookup":
                copy_steps.setdefault(step.block_size, []).append(step.draft_time + step.verify_time)
        return statistics.fmean(s.draft_time + s.verify_time for s in stats.steps)

    mean_step_seconds(shapes[-1], prompts[0])  # warms up kernels and allocators; not counted
    copy_steps.clear()
    measured: dict[DraftShape, list[float]] = {shape: [] for shape in shapes}
    runs = [(r, prompt) for r in range(rounds) for prompt in prompts]
    for i, (r, prompt) in enumerate(tqdm(runs, desc="calibrate", unit="prompt", disable=len(runs) < 2)):
        turn = (i + r) % len(shapes)
        for shape in shapes[turn:] + shapes[:turn]:
            measured[shape].append(mean_step_seconds(shape, prompt))
    cost = cost_from_steps(measured, device_name(target.device), "calibrated", copy_steps)
    short, long = VERIFY_CONTEXTS
    rows, seconds, draft = measure_step_parts(target, drafter, context=short, rounds=rounds)
    _, long_seconds, long_draft = measure_step_parts(target, drafter, context=long, rounds=rounds)
    cost = replace(
        cost,
        verify_rows=rows,
        verify_seconds=seconds,
        draft_seconds=(draft + long_draft) / 2,
        verify_context=short,
        long_context=long,
        long_seconds=long_seconds,
    )
    if save:
        path = calibration_path(target, drafter)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_json(cost, path)
        logger.info("Saved calibration to %s", path)
    return cost


VERIFY_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # verified row counts per-step choice prices directly
VERIFY_CONTEXTS = (128, 768)  # cached tokens the verify ladder is timed after: a short text and a long one


@torch.no_grad()
def measure_step_parts(
    target, drafter, rows: Sequence[int] = VERIFY_ROWS, context: int = 128, rounds: int = 3
) -> tuple[list[int], list[float], float]:
    """(rows, seconds of a target pass verifying each many rows, seconds of one drafter pass): what per-step
    choice prices, timed as the engine runs them (its kernels on) after `context` cached tokens of a random prompt.
    Rows go in as a tree's do (positions and a 4D mask), which costs more than a causal chain of as many rows:
    per-step choice mostly verifies trees.

    Each round times every row count once, in a rotating order, then one drafter pass of the drafter's block
    size; a value is the median over rounds (5 passes each)."""
    from transformers import DynamicCache

    from ..decoding.row_attention import row_attention
    from ..decoding.small_rows import small_row_linears
    from ..decoding.stats import device_clock
    from ..decoding.tree import DraftTree, tree_attention_mask

    device = target.device
    vocab = target.get_input_embeddings().weight.shape[0]
    prompt = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(0)).to(device)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    rows = sorted(set(rows))
    times: dict[int, list[float]] = {n: [] for n in rows}
    draft_times: list[float] = []
    block = drafter.config.block_size
    with small_row_linears(target, drafter), row_attention(target):
        cache = DynamicCache(config=target.config)
        out = target(input_ids=prompt, cache=cache, use_cache=True, output_hidden_states=True)
        features = drafter.context_features(out.hidden_states)[:, -1:]  # (1, 1, n*H)

        def timed(run) -> float:
            run()  # warm
            start = device_clock(device)
            for _ in range(5):
                run()
            return (device_clock(device) - start) / 5

        def verify(n: int) -> None:  # n rows as the engine verifies a tree: explicit positions and a 4D mask
            chain = DraftTree(prompt[0, : n - 1].tolist(), list(range(n - 1)), list(range(1, n)))
            mask = tree_attention_mask(chain, context, target.dtype, device)
            positions = torch.arange(context, context + n, device=device)[None]
            target(
                input_ids=prompt[:, :n],
                cache=cache,
                use_cache=True,
                logits_to_keep=0,
                position_ids=positions,
                attention_mask=mask,
            )
            cache.crop(-n)

        for r in tqdm(range(rounds), desc="calibrate: verify ladder", unit="round"):
            for n in rows[r % len(rows) :] + rows[: r % len(rows)]:
                times[n].append(timed(lambda n=n: verify(n)))
            draft_cache = DynamicCache(config=drafter.config)
            draft_times.append(
                timed(lambda c=draft_cache: drafter.draft(embed, lm_head, prompt[:, -1:], features, block, c))
            )
    return rows, [statistics.median(times[n]) for n in rows], statistics.median(draft_times)
