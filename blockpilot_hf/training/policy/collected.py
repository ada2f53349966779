"""Typed records of a `blockpilot collect` run and their append-only JSONL shards.

A collect folder holds `collect.json` (the settings every row was made with) and one `rows-<process>.jsonl`
shard per process; each line is one finished prompt (`PromptRecord`) with its runs at every block size.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ...jsonl import read_rows
from ...policy.config import CostModel

logger = logging.getLogger(__name__)

META_NAME = "collect.json"
SHARD_GLOB = "rows-*.jsonl"


def shard_path(folder: Path, process_index: int) -> Path:
    return folder / f"rows-{process_index:03d}.jsonl"


@dataclass
class SizeRun:
    """One prompt decoded at one fixed block size."""

    block_size: int
    acceptance_lengths: list[int]  # tokens committed per step (accepted drafts + 1)
    new_tokens: int
    draft_time: float
    verify_time: float
    total_time: float
    matches_greedy: bool  # output token-identical to plain greedy generate

    @property
    def tau(self) -> float:
        n = len(self.acceptance_lengths)
        return sum(self.acceptance_lengths) / n if n else 1.0

    @property
    def step_seconds(self) -> float:
        """Mean seconds per step (draft + verify), the quantity a cost model predicts."""
        n = len(self.acceptance_lengths)
        return (self.draft_time + self.verify_time) / n if n else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_time if self.total_time > 0 else 0.0


@dataclass
class PromptRecord:
    """Everything collected for one prompt: features of its prefill and one `SizeRun` per block size."""

    prompt_id: str
    source: str
    prompt_tokens: int
    plain_new_tokens: int
    plain_time: float
    features: list[float]
    runs: list[SizeRun] = field(default_factory=list)

    def taus(self) -> dict[int, float]:
        return {r.block_size: r.tau for r in self.runs}

    def run(self, block_size: int) -> SizeRun:
        for r in self.runs:
            if r.block_size == block_size:
                return r
        raise KeyError(f"prompt {self.prompt_id} has no run at block size {block_size}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_row(cls, row: dict, where: str) -> PromptRecord:
        try:
            runs = [SizeRun(**r) for r in row["runs"]]
            return cls(**{**row, "runs": runs})
        except (KeyError, TypeError) as err:
            raise ValueError(
                f"{where} is not a collect record ({err}); the file is corrupt or from another tool."
            ) from err


@dataclass
class CollectMeta:
    """The settings a collect folder was made with; a resumed run must match them."""

    target_id: str
    drafter_id: str
    block_sizes: list[int]
    max_new_tokens: int
    hidden_size: int
    target_layer_ids: list[int]
    vocab_size: int
    training_block_size: int
    top_k: int
    device: str
    temperature: float = 0.0

    def save(self, folder: Path) -> None:
        (folder / META_NAME).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> CollectMeta:
        path = folder / META_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} is not a collect folder: it lacks {META_NAME} (run `blockpilot collect --out {folder}`)."
            )
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"{path} is corrupt ({err}); delete the folder and collect again.") from err

    def check_same(self, other: CollectMeta, folder: Path) -> None:
        """Refuse to append rows made with other settings to an existing folder."""
        diff = [f.name for f in fields(self) if f.name != "device" and getattr(self, f.name) != getattr(other, f.name)]
        if diff:
            raise ValueError(
                f"{folder} was collected with other settings ({', '.join(diff)} differ): resume with the same "
                "settings, or collect into a new --out folder."
            )


def read_records(folder: Path) -> tuple[CollectMeta, list[PromptRecord]]:
    """The metadata and every record of a collect folder, all shards, each prompt once."""
    folder = Path(folder)
    meta = CollectMeta.load(folder)
    records: dict[str, PromptRecord] = {}
    for shard in sorted(folder.glob(SHARD_GLOB)):
        for i, row in enumerate(read_rows(shard)):
            record = PromptRecord.from_row(row, f"{shard} line {i + 1}")
            if record.prompt_id in records:
                logger.warning("%s: prompt %s appears twice; keeping the first", shard, record.prompt_id)
                continue
            records[record.prompt_id] = record
    return meta, list(records.values())


def cost_from_records(records: list[PromptRecord], device: str) -> CostModel:
    """A cost model from the collected step times: per size, the median over prompts of seconds per step."""
    by_size: dict[int, list[float]] = {}
    for record in records:
        for run in record.runs:
            if run.acceptance_lengths:
                by_size.setdefault(run.block_size, []).append(run.step_seconds)
    sizes = sorted(by_size)
    if not sizes:
        raise ValueError("The collected records hold no timed steps.")
    return CostModel(sizes, [statistics.median(by_size[b]) for b in sizes], device, "collected")
