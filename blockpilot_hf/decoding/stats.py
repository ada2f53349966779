"""Typed records of what the engine did: one `StepRecord` per draft/verify step, one `GenerationStats` per request."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StepRecord:
    """One decoding step: `block_size` tokens verified, `accepted` drafts kept, then one target token.

    `committed` can be smaller than `accepted + 1` only on the last step, cut by EOS, a stop string or the
    length limit."""

    block_size: int
    accepted: int
    committed: int
    draft_time: float
    verify_time: float

    @property
    def acceptance_length(self) -> int:
        return self.accepted + 1


@dataclass
class GenerationStats:
    """Per-request statistics attached to `generate(..., return_dict_in_generate=True).blockpilot`."""

    block_size: int
    policy: str
    prompt_tokens: int
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
    def tau(self) -> float:
        """Mean acceptance length: the average number of tokens one target forward commits."""
        lengths = self.acceptance_lengths
        return sum(lengths) / len(lengths) if lengths else 0.0

    @property
    def draft_time(self) -> float:
        return sum(s.draft_time for s in self.steps)

    @property
    def verify_time(self) -> float:
        return sum(s.verify_time for s in self.steps)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_time if self.total_time > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(tau=self.tau, acceptance_lengths=self.acceptance_lengths, tokens_per_second=self.tokens_per_second)
        return out
