"""Configs of the drafter pipeline: regenerate, text-data and train-drafter.

Every default lives here once; the `blockpilot` options are built from these fields (`blockpilot_hf.cli_args`).
This module imports no torch, so `blockpilot --help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...cli_args import check_choice
from ...constants import DEVICE_HELP, DTYPES
from ...data import DATASETS, SPLITS

TARGET_HELP = "target: 'smollm2' (embedded), a causal LM folder or a Hub id"


def _check_sources(sources: list[str], allowed, what: str) -> None:
    if not sources:
        raise ValueError("--sources is empty: name at least one source.")
    unknown = [s for s in sources if s not in allowed and not s.endswith(".jsonl")]
    if unknown:
        raise ValueError(
            f"--sources: {', '.join(unknown)} cannot be used for {what}; choose from {sorted(allowed)} "
            "or give a prompt .jsonl file."
        )


@dataclass(kw_only=True)
class RegenerateConfig:
    """`blockpilot regenerate`: the target's own answers (greedy or sampled) to the drafter split of offline prompts."""

    target: str = field(default="smollm2", metadata={"help": TARGET_HELP})
    out: str = field(metadata={"help": "JSONL file to append to (resumable: ids already in it are skipped)"})
    sources: list[str] = field(
        default_factory=lambda: ["gsm8k", "humaneval", "aime", "gpqa", "stdlib", "pydocs", "fortunes"],
        metadata={
            "help": "prompt sources, each with a drafter split, or prompt .jsonl files (e.g. from self-instruct)"
        },
    )
    per_source: int | None = field(default=None, metadata={"help": "at most this many prompts per source; unset = all"})
    batch_size: int = field(default=16, metadata={"help": "prompts generated together"})
    max_new_tokens: int = field(default=256, metadata={"help": "longest answer, in tokens"})
    temperature: float = field(
        default=0.0,
        metadata={"help": "0: greedy answers; > 0: one sampled answer per prompt (rows with kind 'sampled')"},
    )
    seed: int = field(default=0, metadata={"help": "random seed of sampled answers"})
    dtype: str = field(
        default="float32",
        metadata={"help": "target dtype: float32, bfloat16 (~2x faster on AVX512-BF16 CPUs), float16"},
    )
    device: str = field(default="auto", metadata={"help": DEVICE_HELP})

    def __post_init__(self) -> None:
        _check_sources(self.sources, [s for s, splits in SPLITS.items() if "drafter" in splits], "regenerate")
        for name in ("batch_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if self.per_source is not None and self.per_source < 1:
            raise ValueError(f"--per-source must be >= 1, got {self.per_source}.")
        if self.temperature < 0:
            raise ValueError(f"--temperature must be >= 0 (0 = greedy), got {self.temperature}.")
        check_choice("--dtype", self.dtype, DTYPES)


@dataclass(kw_only=True)
class SelfInstructConfig:
    """`blockpilot self-instruct`: chat prompts (and follow-up turns) written by the target itself."""

    target: str = field(default="smollm2", metadata={"help": TARGET_HELP})
    out: str = field(metadata={"help": "prompt JSONL file to append to (resumable by id); answer it with regenerate"})
    per_category: int = field(default=200, metadata={"help": "requests asked for per MT-Bench category"})
    two_turn_share: float = field(default=0.5, metadata={"help": "share of requests that get a follow-up turn"})
    batch_size: int = field(default=32, metadata={"help": "requests written together"})
    seed: int = field(default=0, metadata={"help": "random seed (topics, forms, sampling)"})
    dtype: str = field(default="bfloat16", metadata={"help": "target dtype: float32, bfloat16, float16"})
    device: str = field(default="auto", metadata={"help": DEVICE_HELP})

    def __post_init__(self) -> None:
        for name in ("per_category", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if not 0.0 <= self.two_turn_share <= 1.0:
            raise ValueError(f"--two-turn-share must be in [0, 1], got {self.two_turn_share}.")
        check_choice("--dtype", self.dtype, DTYPES)


@dataclass(kw_only=True)
class TextDataConfig:
    """`blockpilot text-data`: existing offline text as extra drafter data, labelled later by the target."""

    target: str = field(default="smollm2", metadata={"help": TARGET_HELP + " (its tokenizer is used)"})
    out: str = field(metadata={"help": "JSONL file to write (overwritten)"})
    sources: list[str] = field(default_factory=lambda: ["gsm8k", "stdlib", "pydocs"], metadata={"help": "text sources"})
    limit_per_source: int | None = field(
        default=None, metadata={"help": "at most this many rows per source; unset = all"}
    )

    def __post_init__(self) -> None:
        _check_sources(self.sources, DATASETS, "text-data")
        if self.limit_per_source is not None and self.limit_per_source < 1:
            raise ValueError(f"--limit-per-source must be >= 1, got {self.limit_per_source}.")


@dataclass
class DrafterTrainingConfig:
    """Every knob of the recipe; the CLI is generated from these fields and their help text."""

    target: str = field(default="smollm2", metadata={"help": TARGET_HELP})
    data: list[str] = field(
        default_factory=list,
        metadata={"help": "regenerated JSONL files (prompt_ids, response_ids), e.g. from `blockpilot regenerate`"},
    )
    out: str = field(default="runs/drafter", metadata={"help": "output folder: checkpoints, metrics, final drafter"})
    init_from: str | None = field(
        default=None,
        metadata={
            "help": "warm start: a drafter folder (or 'embedded') whose weights and architecture training starts "
            "from; its block size must match --block-size, and one shallower than --num-layers gets new layers that "
            "start out adding nothing (so training starts from its drafts). Unset = random init"
        },
    )
    num_layers: int = field(default=2, metadata={"help": "drafter decoder layers"})
    target_layer_ids: list[int] | None = field(
        default=None, metadata={"help": "target layers read; unset = --num-context-layers evenly spaced ones"}
    )
    num_context_layers: int = field(
        default=4, metadata={"help": "how many target layers to read when ids are not given"}
    )
    block_size: int = field(default=16, metadata={"help": "training block size"})
    mask_token_id: int | None = field(
        default=None, metadata={"help": "embedding row used as mask; unset = an unused id"}
    )
    anchors_per_sequence: int = field(default=64, metadata={"help": "anchored blocks sampled per sequence"})
    gamma: float = field(default=7.0, metadata={"help": "loss decay over block positions"})
    loss_vocab_size: int = field(
        default=0, metadata={"help": "if > 0, softmax over the N most frequent response tokens only"}
    )
    distill_weight: float = field(
        default=0.0,
        metadata={
            "help": "weight of the soft-label loss (cross-entropy to the target's own next-token distribution) against "
            "the hard-label one; > 0 teaches the drafter to sample like the target, for draft_sampling at T > 0"
        },
    )
    lr: float = field(default=6e-4, metadata={"help": "AdamW peak learning rate"})
    warmup: float = field(default=0.04, metadata={"help": "warmup fraction"})
    epochs: float = field(default=6.0, metadata={"help": "passes over the training sequences"})
    sequences_per_step: int = field(
        default=4, metadata={"help": "sequences per optimizer step (gradient accumulation)"}
    )
    max_minutes: float = field(
        default=0.0, metadata={"help": "stop (with a checkpoint) after this many minutes; 0 = no limit"}
    )
    val_percent: int = field(default=3, metadata={"help": "percent of sequences (by id hash) held out for validation"})
    val_every: int = field(default=200, metadata={"help": "steps between validation tau measurements"})
    val_sequences: int = field(
        default=8, metadata={"help": "validation sequences per data source (gsm8k, self-instruct, ...) per measurement"}
    )
    save_every: int = field(default=100, metadata={"help": "steps between checkpoints"})
    seed: int = field(default=0, metadata={"help": "random seed"})
    save_dtype: str = field(default="bfloat16", metadata={"help": "dtype of the saved drafter weights"})
    mixed_precision: str = field(
        default="auto",
        metadata={
            "help": "accelerate mixed precision: no | bf16 | fp16 | auto (bf16 where the device computes it natively: "
            "a bf16 GPU, or a CPU with AVX512-BF16 or AMX; else no, since emulated bf16 is several times slower)"
        },
    )

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_context_layers", "anchors_per_sequence", "sequences_per_step", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.lr <= 0 or self.epochs <= 0:
            raise ValueError(f"lr and epochs must be > 0, got lr={self.lr}, epochs={self.epochs}.")
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (position 0 is the anchor), got {self.block_size}.")
        if not 0 <= self.distill_weight <= 1:
            raise ValueError(f"distill_weight must be in [0, 1], got {self.distill_weight}.")
        if not 0 <= self.val_percent < 100:
            raise ValueError(f"val_percent must be in [0, 100), got {self.val_percent}.")
        check_choice("--save-dtype", self.save_dtype, DTYPES)
        if self.mixed_precision not in ("no", "bf16", "fp16", "auto"):
            raise ValueError(f"mixed_precision must be no, bf16, fp16 or auto, got {self.mixed_precision!r}.")
