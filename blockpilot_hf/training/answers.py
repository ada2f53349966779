"""The target's plain answers, decoded once and kept: the references drafters are replayed on.

`collect --replay` and `benchmarks/drafter_tau.py` replay every drafter on the target's own answers; those answers
do not depend on the drafter, and decoding them is nearly all of a replay's cost. An `AnswerCache` keeps them in
memory and, given a path, in a JSONL file, so the next drafter is replayed on the same answers in minutes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..constants import portable_id
from ..decoding.stats import device_clock
from ..generation import sampling_kwargs
from ..jsonl import JsonlWriter, read_rows


def sampling_seed(prompt_id: str) -> int:
    """A seed fixed by the prompt's id, so a rerun or another shard samples a prompt's answer the same way."""
    return int(hashlib.sha256(prompt_id.encode()).hexdigest()[:8], 16)


def plain_answer(
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """Plain `generate` (1, T+N) and its seconds: the reference every candidate is checked or replayed on.
    Greedy at temperature 0; else one sample at `temperature` with `top_k` / `top_p` (by default the full
    distribution, as bench samples)."""
    if temperature > 0:
        torch.manual_seed(seed)
    start = device_clock(target.device)
    with torch.inference_mode():
        plain = target.generate(
            input_ids=input_ids, max_new_tokens=max_new_tokens, **sampling_kwargs(temperature, top_k, top_p)
        )
    return plain, device_clock(target.device) - start


class AnswerCache:
    """`plain_answer` of one target, remembered by everything that decides it: the target and its dtype, the input
    ids, the temperature, the seed, top-k and top-p (when sampling) and `max_new_tokens`. Rows of other settings in
    the same file are never returned, so one file may hold several kinds, and a file from another target can only
    miss.

    With `path`, answers are read from and appended to that JSONL file (one row each: key, start, tokens, seconds;
    `jsonl` rules, so a crash loses at most the answer in flight)."""

    def __init__(self, target, max_new_tokens: int, path: str | Path | None = None):
        self.target, self.max_new_tokens = target, max_new_tokens
        self.writer = JsonlWriter(Path(path)) if path else None
        rows = read_rows(Path(path)) if path else []
        self.rows: dict[str, dict] = {row["key"]: row for row in rows}
        self.owner = f"{portable_id(getattr(target.config, 'name_or_path', '') or '')}|{target.dtype}"

    def key(self, input_ids: torch.Tensor, temperature: float, seed: int, top_k: int = 0, top_p: float = 1.0) -> str:
        settings = f"{self.owner}|T={temperature:g}|seed={seed if temperature > 0 else 0}|new={self.max_new_tokens}|"
        if temperature > 0 and (top_k, top_p) != (0, 1.0):  # full-distribution keys stay as they always were
            settings += f"top_k={top_k}|top_p={top_p:g}|"
        return hashlib.sha256(settings.encode() + input_ids.cpu().numpy().tobytes()).hexdigest()

    def answer(
        self, input_ids: torch.Tensor, temperature: float = 0.0, seed: int = 0, top_k: int = 0, top_p: float = 1.0
    ) -> tuple[torch.Tensor, float]:
        """`plain_answer(target, input_ids (1, T), ...)`: (1, T+N) on the target's device and the seconds its
        decoding took (when it was decoded, possibly in an earlier run)."""
        key = self.key(input_ids, temperature, seed, top_k, top_p)
        row = self.rows.get(key)
        if row is None:
            plain, seconds = plain_answer(self.target, input_ids, self.max_new_tokens, temperature, seed, top_k, top_p)
            row = {"key": key, "start": input_ids.shape[1], "tokens": plain[0].tolist(), "seconds": seconds}
            self.rows[key] = row
            if self.writer:
                self.writer.append(row)
        return torch.tensor([row["tokens"]], device=self.target.device), row["seconds"]

    def reply(self, tokenizer):
        """An `Answer` for later turns of a chat: the greedy reply to input ids (1, T), as text. At T=0 it is also
        that turn's answer, so a greedy collect decodes every turn once."""

        def text(input_ids: torch.Tensor) -> str:
            plain, _ = self.answer(input_ids.to(self.target.device))
            return tokenizer.decode(plain[0, input_ids.shape[1] :], skip_special_tokens=True)

        return text
