"""Typed benchmark records: one `RunRecord` per (prompt, turn, temperature, seed, arm), one JSON line each.

`raw.jsonl` is appended one finished run at a time, so an interrupted benchmark resumes where it stopped;
`bench.json` (`BenchMeta`) remembers what produced the rows, so a resume with other models is refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..decoding.stats import tokens_per_second
from ..jsonfile import from_dict, load_json, save_json
from ..jsonl import JsonlWriter, read_rows

RAW_NAME = "raw.jsonl"
META_NAME = "bench.json"

RunKey = tuple[str, str, str, int, float, int, str]  # split, dataset, prompt id, turn, temperature, seed, arm
UnitKey = tuple[str, str, str, int, float, int]  # the same without the arm: one prompt turn at one T and seed


@dataclass
class RunRecord:
    """What one arm did on one prompt turn. Times are seconds; `ttft` is the time to the first new token.

    `block_size` is the size used (chosen, for BlockPilot; None for arms without one) and `shape` the whole draft
    shape that ran (e.g. "8+tree16"); `shape`, `tau`, `acceptance_lengths` and `tokens_by_source` exist for our
    engine only. `identical` compares greedy output with the baseline's
    (None when sampling). `peak_memory` is bytes: CUDA peak allocated, or the process's peak RSS on CPU."""

    split: str
    dataset: str
    prompt_id: str
    turn: int
    temperature: float
    seed: int
    arm: str
    prompt_tokens: int
    new_tokens: int
    total_time: float
    ttft: float
    block_size: int | None = None
    tau: float | None = None
    acceptance_lengths: list[int] = field(default_factory=list)
    policy_time: float = 0.0
    draft_time: float = 0.0
    verify_time: float = 0.0
    peak_memory: int = 0
    identical: bool | None = None
    output_ids: list[int] = field(default_factory=list)
    tokens_by_source: dict[str, int] = field(default_factory=dict)  # our engine: drafter / lookup / target
    repeat_times: list[float] = field(default_factory=list)  # total_time of every repeat; this record is the median
    shape: str = ""

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.new_tokens, self.total_time)

    @property
    def key(self) -> RunKey:
        return (*self.unit, self.arm)

    @property
    def unit(self) -> UnitKey:
        return (self.split, self.dataset, self.prompt_id, self.turn, self.temperature, self.seed)

    def renamed(self, arm: str) -> RunRecord:
        """The same measurement under another arm name (derived arms reuse fixed-size runs)."""
        return replace(self, arm=arm)


@dataclass
class BenchMeta:
    """What produced a results folder; a resume must match it (other models or lengths would mix numbers).

    `drafter` and `policy` are names ('embedded' stays the same name when a new drafter ships), so the weights
    are fingerprinted too; a folder written before the fingerprints existed has "" and is not resumed."""

    target: str
    drafter: str
    policy: str
    max_new_tokens: int
    dtype: str
    device: str
    attn_implementation: str
    training_block_size: int
    drafter_weights: str = ""
    policy_weights: str = ""

    def save(self, folder: Path) -> None:
        save_json(self, folder / META_NAME)

    @classmethod
    def load(cls, folder: Path) -> BenchMeta | None:
        """The setup of `folder`, None for a new folder (no bench.json); damage gives the errors of `jsonfile`."""
        path = folder / META_NAME
        return load_json(cls, path) if path.is_file() else None

    def check_same(self, other: BenchMeta, folder: Path) -> None:
        """Refuse to resume `folder` with a different setup, naming what differs."""
        diff = {k: (v, getattr(other, k)) for k, v in asdict(self).items() if getattr(other, k) != v}
        if diff:
            changes = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
            raise ValueError(f"{folder} holds results of another setup ({changes}); use a new --out folder.")


def weights_fingerprint(model: object | None) -> str:
    """A short hash of a module's parameters and buffers (names, shapes, dtypes, values) and of its config if it
    has one (a policy's step costs live there); "none" for no model, the type's name for a chooser without
    weights."""
    if model is None:
        return "none"
    if not isinstance(model, torch.nn.Module):
        return type(model).__name__
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    config = getattr(model, "config", None)
    if hasattr(config, "to_dict"):
        fields = {k: v for k, v in config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
        digest.update(json.dumps(fields, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def _parse_record(row: dict) -> RunRecord:
    return from_dict(RunRecord, row)


def read_raw(folder: Path) -> list[RunRecord]:
    """Every record in `folder/raw.jsonl` (a torn last line from a crash is skipped with a warning)."""
    return read_rows(Path(folder) / RAW_NAME, _parse_record)


def raw_writer(folder: Path) -> JsonlWriter:
    """Appends `RunRecord`s to `folder/raw.jsonl`, one flushed line each (see `jsonl` for the crash rule)."""
    return JsonlWriter(Path(folder) / RAW_NAME, _parse_record)
