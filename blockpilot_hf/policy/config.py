"""`BlockPolicyConfig`: what a BlockPilot head looks like, what it reads, and what it was trained for.

Every default of the policy lives here (the CLI is built from these fields); `__post_init__` refuses values the
head cannot run with, naming the field to fix.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..constants import DECISIONS
from ..decoding.planner import StepCosts, StepPrior, interpolate
from ..decoding.shape import DraftShape
from ..jsonfile import from_dict, load_json, save_json

CHOICE_RULES = ("throughput", "classifier")
DEFAULT_SIZES = (1, 2, 4, 6, 8, 12, 16)


@dataclass
class FeatureSpec:
    """The prefill features a head reads; see `policy/features.py`.

    Groups of H values (one row each): the mean over the prompt of each context layer, the last prompt position of
    each context layer, and the target's final hidden state of the last position: `2 * num_context_layers + 1`
    rows. Then `num_stats` scalars computed from the last logits (entropy, top-k log-probabilities, ...)."""

    hidden_size: int = field(metadata={"help": "target hidden size H"})
    num_context_layers: int = field(metadata={"help": "number of target layers the drafter reads"})
    top_k: int = field(default=8, metadata={"help": "top-k log-probabilities of the last logits used as features"})

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_context_layers", "top_k"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"FeatureSpec.{name} must be >= 1, got {getattr(self, name)}.")

    @property
    def num_groups(self) -> int:
        return 2 * self.num_context_layers + 1

    @property
    def num_stats(self) -> int:
        # entropy, top-k log-probs, top-1 minus top-2 logit margin, log prompt length
        return self.top_k + 3

    @property
    def size(self) -> int:
        """Length of the flat feature vector stored in collected records."""
        return self.num_groups * self.hidden_size + self.num_stats


def _sorted_ladder(sizes: list[int], seconds: list[float]) -> tuple[list[int], list[float]]:
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    return [int(sizes[i]) for i in order], [float(seconds[i]) for i in order]


MAX_PRICED_ROWS = 32  # verify costs read off a fitted line are tabulated up to this many rows


def _non_decreasing(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators): noise removed, level kept."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def _line_through(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through (x, y) points."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


@dataclass
class CostModel:
    """Seconds per decoding step (draft + verify) for each block size, measured on some device, and for each tree /
    prompt-lookup `DraftShape` (mean seconds per step of that shape, by its text form).

    Size 1 is one target forward and no drafter pass. Sizes between measured ones are interpolated linearly; a shape
    costs what was measured for it on average. A lookup step skips the drafter and verifies what it copied, so how
    often a lookup shape copies (text that repeats: nearly every step) sets its cost on a given prompt: the copy
    ladder (`copy_sizes`: tokens verified, copied drafts + 1; `copy_seconds`) prices such steps one by one
    (`run_seconds`)."""

    block_sizes: list[int]
    seconds: list[float]
    device: str = "unknown"
    source: str = "collected"  # "collected" (from collect runs), "calibrated" (blockpilot calibrate), "synthetic"
    shapes: dict[str, float] = field(default_factory=dict)
    copy_sizes: list[int] = field(default_factory=list)
    copy_seconds: list[float] = field(default_factory=list)
    verify_rows: list[int] = field(default_factory=list)
    verify_seconds: list[float] = field(default_factory=list)
    draft_seconds: float | None = None
    verify_context: int = 0  # cached tokens the verify ladder was measured after
    long_context: int = 0
    long_seconds: list[float] = field(default_factory=list)  # the verify ladder after `long_context` cached tokens

    def __post_init__(self) -> None:
        if len(self.block_sizes) != len(self.seconds) or not self.block_sizes:
            raise ValueError("CostModel needs one positive `seconds` value per block size.")
        if len(self.copy_sizes) != len(self.copy_seconds):
            raise ValueError("CostModel needs one `copy_seconds` value per copy size.")
        if len(self.verify_rows) != len(self.verify_seconds) or (
            self.long_seconds and len(self.long_seconds) != len(self.verify_rows)
        ):
            raise ValueError("CostModel needs one `verify_seconds` (and `long_seconds`) value per verified row count.")
        if any(s <= 0 for s in [*self.seconds, *self.shapes.values(), *self.copy_seconds, *self.verify_seconds]):
            raise ValueError(
                f"CostModel seconds must be positive, got {self.seconds}, {self.shapes} and {self.copy_seconds}."
            )
        self.block_sizes, self.seconds = _sorted_ladder(self.block_sizes, self.seconds)
        self.copy_sizes, self.copy_seconds = _sorted_ladder(self.copy_sizes, self.copy_seconds)
        if self.long_seconds:
            self.long_seconds = _sorted_ladder(self.verify_rows, self.long_seconds)[1]
        self.verify_rows, self.verify_seconds = _sorted_ladder(self.verify_rows, self.verify_seconds)
        self.shapes = {str(DraftShape.parse(k)): float(v) for k, v in self.shapes.items()}

    def step_seconds(self, candidate: int | DraftShape) -> float:
        """Mean cost of one step of a candidate: a block size (linear interpolation, flat extrapolation by the nearest
        slope) or a tree / lookup shape (as measured; KeyError if it never was)."""
        shape = DraftShape.parse(candidate)
        if not shape.is_chain:
            if str(shape) not in self.shapes:
                raise KeyError(f"The cost model has no measurement of draft shape {shape}; collect runs with it.")
            return self.shapes[str(shape)]
        return interpolate(self.block_sizes, self.seconds, shape.block_size)

    def run_seconds(self, candidate: int | DraftShape, copied: list[int]) -> float:
        """Mean cost of the steps of one run, given the drafts each step copied (`copied`, 0 for none): a step that
        copied m verifies m + 1 tokens (the copy ladder), any other step costs the candidate's chain without lookup.
        Trees, and models or runs without copy data, cost `step_seconds(candidate)`."""
        shape = DraftShape.parse(candidate)
        if not (shape.lookup_tokens and not shape.tree_budget and self.copy_sizes and copied):
            return self.step_seconds(shape)
        plain = self.step_seconds(shape.block_size)
        steps = [interpolate(self.copy_sizes, self.copy_seconds, m + 1) if m else plain for m in copied]
        return sum(steps) / len(steps)

    def step_costs(self) -> StepCosts:
        """What per-step choice prices: seconds to verify n rows and of one drafter pass.

        Measured directly when the calibration has a verify ladder (`blockpilot calibrate` times both, the ladder
        after a short and a long context; each is made non-decreasing, since one more row never saves time and
        single timings are noisy); else read
        off the step ladders: one row is a plain step, n >= 2 rows a lookup step that copied n - 1 (a straight
        line fitted through the copy ladder, which is noisy step by step), and the drafter pass what a chain step
        costs beyond verifying its rows (the median over the chain sizes)."""
        if self.verify_rows and self.draft_seconds is not None:
            seconds, long = _non_decreasing(self.verify_seconds), _non_decreasing(self.long_seconds)
            return StepCosts(
                tuple(self.verify_rows),
                tuple(seconds),
                self.draft_seconds,
                self.verify_context,
                self.long_context if long else 0,
                tuple(long),
            )
        plain = self.step_seconds(1)
        points = [(n, t) for n, t in zip(self.copy_sizes, self.copy_seconds, strict=True) if n >= 2]
        if len(points) >= 2:
            slope, intercept = _line_through(points)
            rows = [1, *range(2, MAX_PRICED_ROWS + 1)]
            seconds = [plain, *(max(intercept + slope * n, plain) for n in rows[1:])]
        else:  # no copy ladder: the chain ladder stands in for verify costs, the drafter taken as free
            rows, seconds = list(self.block_sizes), list(self.seconds)
            return StepCosts(tuple(rows), tuple(seconds), 0.0)
        verify = StepCosts(tuple(rows), tuple(seconds), 0.0).verify
        chains = [b for b in self.block_sizes if b >= 2]
        extra = [self.step_seconds(b) - verify(b) for b in chains]
        return StepCosts(tuple(rows), tuple(seconds), max(statistics.median(extra), 0.0) if extra else 0.0)

    def with_shapes_from(self, stored: CostModel | None) -> CostModel:
        """This model plus the tree / lookup shapes (and the copy ladder) only `stored` prices, scaled by this
        model's plain step over stored's: a calibration times block sizes, and shapes keep their collected cost
        relative to a plain step."""
        if stored is None:
            return self
        missing = {k: v for k, v in stored.shapes.items() if k not in self.shapes}
        take_copies = bool(stored.copy_sizes) and not self.copy_sizes
        if not missing and not take_copies:
            return self
        scale = self.step_seconds(1) / stored.step_seconds(1)
        copies = dict(copy_sizes=stored.copy_sizes, copy_seconds=[t * scale for t in stored.copy_seconds])
        shapes = {**self.shapes, **{k: v * scale for k, v in missing.items()}}
        return replace(self, shapes=shapes, **(copies if take_copies else {}))

    def covers(self, candidates: list[int | DraftShape]) -> bool:
        """Whether every candidate has a cost: block sizes within the measured range, shapes measured."""
        shapes = [DraftShape.parse(c) for c in candidates]
        low, high = min(self.block_sizes), max(self.block_sizes)
        return all(low <= s.block_size <= high if s.is_chain else str(s) in self.shapes for s in shapes)


@dataclass
class MeasuredResult:
    """One number measured on held-out prompts, shown in the model card and its YAML metadata."""

    name: str
    value: float
    note: str = ""


@dataclass
class BlockPolicyConfig:
    """Architecture, choice rule and provenance of a `BlockPolicy` head."""

    features: FeatureSpec = field(metadata={"help": "prefill features the head reads"})
    vocab_size: int = field(metadata={"help": "target vocabulary size (rows of its LM head)"})
    target_layer_ids: list[int] = field(metadata={"help": "target layers the drafter reads (context features)"})
    candidate_sizes: list[int] = field(
        default_factory=lambda: list(DEFAULT_SIZES),
        metadata={"help": "block sizes to choose from (1 = plain decoding)"},
    )
    candidate_shapes: list[str] = field(
        default_factory=list,
        metadata={"help": "tree / prompt-lookup draft shapes to choose from as well, e.g. '8+tree16', '1+lookup10'"},
    )
    projection_dim: int = field(
        default=32, metadata={"help": "width of the shared projection of each H-sized feature row"}
    )
    hidden_sizes: list[int] = field(
        default_factory=lambda: [64, 64], metadata={"help": "MLP widths after the projection"}
    )
    choice: str = field(
        default="throughput", metadata={"help": "'throughput' (argmax tau/cost) or 'classifier' (argmax tau)"}
    )
    target_id: str = field(default="", metadata={"help": "Hub id or path of the target the policy was trained for"})
    drafter_id: str = field(default="", metadata={"help": "Hub id or path of the drafter the policy was trained for"})
    training_block_size: int = field(default=16, metadata={"help": "the drafter's training block size"})
    temperatures: list[float] = field(
        default_factory=lambda: [0.0],
        metadata={"help": "sampling temperatures of the collected runs, one head each (0 = greedy)"},
    )
    best_fixed_size: int | None = field(default=None, metadata={"help": "best fixed size on the training prompts"})
    cost: CostModel | None = field(default=None, metadata={"help": "cost model used when no calibration is cached"})
    results: list[MeasuredResult] = field(default_factory=list, metadata={"help": "held-out measurements for the card"})
    name: str = field(default="blockpilot-policy", metadata={"help": "short name shown in stats and cards"})
    step_priors: list[StepPrior] = field(
        default_factory=list,
        metadata={"help": "per-step choice's prior at each temperature (`fit-step-prior`); empty = the default prior"},
    )
    decision: str = field(
        default="per-step",
        metadata={
            "help": "'per-step': the head's predictions are each request's prior and the engine chooses what to "
            "verify at every step; 'per-request': the head picks one candidate shape for the whole request"
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.features, dict):
            self.features = from_dict(FeatureSpec, self.features)
        if isinstance(self.cost, dict):
            self.cost = from_dict(CostModel, self.cost)
        self.results = [from_dict(MeasuredResult, r) if isinstance(r, dict) else r for r in self.results]
        self.step_priors = [from_dict(StepPrior, p) if isinstance(p, dict) else p for p in self.step_priors]
        self.candidate_sizes = sorted({int(b) for b in self.candidate_sizes})
        if len(self.candidate_sizes) < 2 or self.candidate_sizes[0] < 1:
            raise ValueError(f"candidate_sizes must hold at least two sizes >= 1, got {self.candidate_sizes}.")
        if 1 not in self.candidate_sizes:
            raise ValueError("candidate_sizes must include 1 (plain decoding) so the policy can refuse to draft.")
        shapes = [DraftShape.parse(s) for s in self.candidate_shapes]
        if any(s.is_chain for s in shapes) or len(set(shapes)) != len(shapes):
            raise ValueError(
                f"candidate_shapes {self.candidate_shapes} must be distinct tree / lookup shapes ('8+tree16', "
                "'1+lookup10'); plain block sizes belong in candidate_sizes."
            )
        self.candidate_shapes = [str(s) for s in sorted(shapes)]
        if self.step_priors and len(self.step_priors) != len(self.temperatures):
            raise ValueError(
                f"step_priors has {len(self.step_priors)} entries for {len(self.temperatures)} temperatures: one each "
                "(rerun `blockpilot fit-step-prior`)."
            )
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}, got {self.decision!r}.")
        if self.choice not in CHOICE_RULES:
            raise ValueError(f"choice must be one of {CHOICE_RULES}, got {self.choice!r}.")
        if len(self.target_layer_ids) != self.features.num_context_layers:
            raise ValueError(
                f"target_layer_ids {self.target_layer_ids} has {len(self.target_layer_ids)} ids but the feature spec "
                f"reads {self.features.num_context_layers} context layers."
            )
        if self.projection_dim < 1 or any(h < 1 for h in self.hidden_sizes) or self.vocab_size < 2:
            raise ValueError("projection_dim, hidden_sizes and vocab_size must be positive.")
        self.temperatures = [float(t) for t in self.temperatures]
        if not self.temperatures or min(self.temperatures) < 0 or len(set(self.temperatures)) != len(self.temperatures):
            raise ValueError(f"temperatures must be distinct values >= 0 (one per head), got {self.temperatures}.")
        if self.best_fixed_size is not None and self.best_fixed_size not in self.candidate_sizes:
            raise ValueError(f"best_fixed_size {self.best_fixed_size} is not a candidate size {self.candidate_sizes}.")

    @property
    def hidden_size(self) -> int:
        return self.features.hidden_size

    @property
    def candidates(self) -> list[DraftShape]:
        """Everything the head scores, in output order: the block sizes, then the tree / lookup shapes."""
        return [DraftShape(b) for b in self.candidate_sizes] + [DraftShape.parse(s) for s in self.candidate_shapes]

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: Path) -> None:
        save_json(self, path)

    @classmethod
    def load(cls, path: Path) -> BlockPolicyConfig:
        """Read a config.json written by `save`; damage, unknown or missing keys give the errors of `jsonfile`."""
        return load_json(cls, path)
