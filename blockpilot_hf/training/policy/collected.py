"""Typed records of a `blockpilot collect` run and their append-only JSONL shards.

A collect folder holds `collect.json` (the settings every row was made with) and one `rows-<process>.jsonl`
shard per process; each line is one finished prompt (`PromptRecord`) with its runs at every block size.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from pathlib import Path

from ...decoding.shape import DraftShape
from ...decoding.stats import mean_acceptance_length, tokens_per_second
from ...jsonfile import from_dict, load_json, save_json
from ...jsonl import JsonlWriter, read_rows
from ...policy.config import CostModel
from ...policy.cost import cost_from_steps

logger = logging.getLogger(__name__)

META_NAME = "collect.json"
SHARD_GLOB = "rows-*.jsonl"


def shard_path(folder: Path, process_index: int) -> Path:
    return folder / f"rows-{process_index:03d}.jsonl"


@dataclass
class SizeRun:
    """One prompt decoded at one fixed block size, or one fixed tree / lookup `shape` (its text form)."""

    block_size: int
    acceptance_lengths: list[int]  # tokens committed per step (accepted drafts + 1)
    new_tokens: int
    draft_time: float
    verify_time: float
    total_time: float
    matches_greedy: bool  # output token-identical to plain greedy generate
    shape: str = ""  # a tree / lookup shape such as "8+tree16"; empty for the chain of `block_size`
    copied: list[int] = field(default_factory=list)  # per step, drafts copied by prompt lookup (0: none)

    @property
    def candidate(self) -> DraftShape:
        """What this run decoded with, as the policy's candidates name it."""
        return DraftShape.parse(self.shape or self.block_size)

    @property
    def tau(self) -> float:
        return mean_acceptance_length(self.acceptance_lengths)

    @property
    def step_seconds(self) -> float:
        """Mean seconds per step (draft + verify), the quantity a cost model predicts."""
        n = len(self.acceptance_lengths)
        return (self.draft_time + self.verify_time) / n if n else 0.0

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.new_tokens, self.total_time)


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

    def taus(self) -> dict[DraftShape, float]:
        """Measured tau per candidate (block sizes as chain shapes)."""
        return {r.candidate: r.tau for r in self.runs}

    def priced_taus(self, cost: CostModel) -> dict[DraftShape, float]:
        """Tau per candidate as if each step cost the candidate's mean step (`cost.step_seconds`): tau scaled by
        that mean over this run's own step cost (`cost.run_seconds`), so tau / step_seconds is this prompt's
        modelled throughput. Differs from `taus` only for lookup shapes on prompts that copy more or less often
        than average; these are the head's labels, so its choice rule stays tau / step_seconds."""
        return {
            r.candidate: r.tau * cost.step_seconds(r.candidate) / cost.run_seconds(r.candidate, r.copied)
            for r in self.runs
        }

    def chain_taus(self) -> dict[int, float]:
        """Measured tau per block size (the chain runs only)."""
        return {c.block_size: t for c, t in self.taus().items() if c.is_chain}

    def run(self, candidate: int | DraftShape) -> SizeRun:
        wanted = DraftShape.parse(candidate)
        for r in self.runs:
            if r.candidate == wanted:
                return r
        raise KeyError(f"prompt {self.prompt_id} has no run with {wanted}")

    @classmethod
    def from_row(cls, row: dict) -> PromptRecord:
        """A record from its JSON row; a row of another kind raises ValueError naming what is wrong."""
        runs = row.get("runs", [])
        if not isinstance(runs, list):
            raise ValueError(f"runs must be a list, got {type(runs).__name__}.")
        return from_dict(cls, {**row, "runs": [from_dict(SizeRun, r) for r in runs]})


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
    shapes: list[str] = field(default_factory=list)  # tree / lookup shapes run besides the block sizes
    replayed: bool = False  # runs replayed on the greedy answer (`collect --replay`): acceptance only, no timings
    sample_top_k: int = 0  # top-k of the sampled answers (temperature > 0; 0 = off)
    sample_top_p: float = 1.0  # top-p of the sampled answers (1 = off)

    @property
    def candidates(self) -> list[DraftShape]:
        """Every block size and shape each prompt was decoded with."""
        return [DraftShape(b) for b in self.block_sizes] + [DraftShape.parse(s) for s in self.shapes]

    def save(self, folder: Path) -> None:
        save_json(self, folder / META_NAME)

    @classmethod
    def load(cls, folder: Path) -> CollectMeta:
        """The settings of a collect folder; damage gives the errors of `jsonfile`."""
        path = folder / META_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} is not a collect folder: it lacks {META_NAME} (run `blockpilot collect --out {folder}`)."
            )
        return load_json(cls, path)

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
        for record in read_rows(shard, PromptRecord.from_row):
            if record.prompt_id in records:
                logger.warning("%s: prompt %s appears twice; keeping the first", shard, record.prompt_id)
                continue
            records[record.prompt_id] = record
    return meta, list(records.values())


def shard_writer(folder: Path, process_index: int) -> JsonlWriter:
    """Appends `PromptRecord`s to this process's shard, one flushed line each (see `jsonl` for the crash rule)."""
    return JsonlWriter(shard_path(folder, process_index), PromptRecord.from_row)


def collected_cost(meta: CollectMeta, records: list[PromptRecord]) -> CostModel:
    """The cost model of a collect folder's own timed runs; a replayed folder has none, so refuse with what to pass."""
    if meta.replayed:
        raise ValueError(
            "This collect folder was made with --replay: its runs carry no timings to price block sizes with. Pass a "
            "cost model: `blockpilot train-policy ... --cost-from POLICY` (a policy folder for this target and "
            "drafter architecture, or 'embedded')."
        )
    return cost_from_steps(step_seconds_by_candidate(records), meta.device, "collected")


def step_seconds_by_candidate(records: list[PromptRecord]) -> dict[DraftShape, list[float]]:
    """Per block size or shape, each prompt's mean seconds per step there (what `policy.cost.cost_from_steps`
    takes)."""
    by_candidate: dict[DraftShape, list[float]] = {}
    for record in records:
        for run in record.runs:
            if run.acceptance_lengths:
                by_candidate.setdefault(run.candidate, []).append(run.step_seconds)
    return by_candidate
