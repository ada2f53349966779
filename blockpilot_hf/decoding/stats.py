"""Typed records of what the engine did: one `StepRecord` per draft/verify step, one `GenerationStats` per request.

Also the one definition of each derived number every report uses (tau, tokens/s) and the clock they are timed with.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch


def device_clock(device: torch.device) -> float:
    """Wall time (perf_counter) after `device` finished its queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class StepTimer:
    """Marks on the device's timeline, read as seconds once decoding is over: CUDA events on a GPU (recording one
    does not wait for the GPU, so timing every step costs no synchronisation), `perf_counter` on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        """Seconds from mark `start` to mark `end` (on CUDA, call after the device finished both)."""
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


def mean_acceptance_length(acceptance_lengths: Sequence[int]) -> float:
    """tau: the mean number of tokens one verifying target forward commits (accepted drafts + 1 per step).

    No steps gives 1.0: the prefill's one forward committed one token, as plain decoding does (and log tau, a
    policy's regression target, stays finite)."""
    return sum(acceptance_lengths) / len(acceptance_lengths) if acceptance_lengths else 1.0


def tokens_per_second(new_tokens: int, seconds: float) -> float:
    """New tokens over wall seconds; 0.0 when no time was measured."""
    return new_tokens / seconds if seconds > 0 else 0.0


DRAFT_SOURCES = ("drafter", "lookup", "target")


@dataclass
class StepRecord:
    """One decoding step: `block_size` tokens verified, `accepted` drafts kept, then one target token.

    `committed` can be smaller than `accepted + 1` only on the last step, cut by EOS, a stop string or the
    length limit. `source` says where the drafts came from: "drafter" (the DFlash drafter), "lookup" (copied
    from the text so far) or "target" (no drafts: a plain decoding step)."""

    block_size: int
    accepted: int
    committed: int
    draft_time: float
    verify_time: float
    source: str = "drafter"
    lookup_accepted: int = 0  # of `accepted`, drafts on a tree's prompt-lookup branch (not the drafter's nodes)

    @property
    def acceptance_length(self) -> int:
        return self.accepted + 1


@dataclass
class GenerationStats:
    """Per-request statistics attached to `generate(..., return_dict_in_generate=True).blockpilot`."""

    block_size: int
    policy: str
    prompt_tokens: int
    shape: str = ""  # the `DraftShape` that ran, e.g. "8", "8+tree16+lookup10"
    new_tokens: int = 0
    prefill_time: float = 0.0
    policy_time: float = 0.0
    total_time: float = 0.0
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def acceptance_lengths(self) -> list[int]:
        """Tokens committed by each step (accepted drafts + 1); the first token, from prefill, is not a step."""
        return [s.acceptance_length for s in self.steps]

    @property
    def copied(self) -> list[int]:
        """Drafts each step copied by prompt lookup (0 where the drafter drafted, or nothing was): what prices a
        lookup step, which skips the drafter and verifies the copy."""
        return [s.block_size - 1 if s.source == "lookup" else 0 for s in self.steps]

    @property
    def tau(self) -> float:
        """Mean acceptance length (`mean_acceptance_length`; 1.0 without steps)."""
        return mean_acceptance_length(self.acceptance_lengths)

    @property
    def draft_time(self) -> float:
        return sum(s.draft_time for s in self.steps)

    @property
    def verify_time(self) -> float:
        return sum(s.verify_time for s in self.steps)

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.new_tokens, self.total_time)

    @property
    def tokens_by_source(self) -> dict[str, int]:
        """Committed tokens by origin: accepted drafts of the drafter and of prompt lookup, and the target's own
        tokens (the prefill's first token and one per step). Counts before a stop cut the last step short."""
        counts = dict.fromkeys(DRAFT_SOURCES, 0)
        counts["target"] = 1 if self.new_tokens else 0
        for step in self.steps:
            counts[step.source] += step.accepted - step.lookup_accepted
            counts["lookup"] += step.lookup_accepted
            counts["target"] += 1
        return counts

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(
            tau=self.tau,
            acceptance_lengths=self.acceptance_lengths,
            tokens_per_second=self.tokens_per_second,
            tokens_by_source=self.tokens_by_source,
        )
        return out
