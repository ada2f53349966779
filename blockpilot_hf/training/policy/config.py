"""Configs of the policy pipeline: collect, train-policy, evaluate-policy and calibrate.

Every default lives here once; the `blockpilot` options are built from these fields (`blockpilot_hf.cli_args`).
This module imports no torch, so `blockpilot --help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...cli_args import check_choice
from ...constants import DECISIONS, DEVICE_HELP, DTYPES, EMBEDDED
from ...data import SPLITS
from ...decoding.shape import DraftShape

TARGET_HELP = "target: 'smollm2' (embedded), a causal LM folder or a Hub id"
DRAFTER_HELP = "DFlash drafter folder or Hub id; 'embedded' = the shipped SmolLM2 drafter"


def check_prompts(spec: str, limit: int | None) -> None:
    """Refuse a `--prompts` list naming an unknown source or split, and a `--limit` below 1."""
    for part in spec.split(","):
        source, _, split = part.strip().partition(":")
        split = split or "policy"
        if source in SPLITS and split not in SPLITS[source]:
            raise ValueError(f"--prompts: {source!r} has no {split!r} split; it has {sorted(SPLITS[source])}.")
        if source not in SPLITS and not source.endswith(".jsonl"):
            raise ValueError(f"--prompts: unknown source {source!r}; use one of {sorted(SPLITS)} or a .jsonl file.")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}.")


@dataclass
class CollectConfig:
    """Settings of a collect run (the CLI flags are built from these fields)."""

    block_sizes: list[int] = field(
        default_factory=lambda: [1, 2, 4, 6, 8, 12, 16],
        metadata={"help": "candidate block sizes; 1 is always added"},
    )
    shapes: list[str] = field(
        default_factory=list,
        metadata={"help": "tree / prompt-lookup draft shapes to decode with as well, e.g. 8+tree16,1+lookup10"},
    )
    max_new_tokens: int = field(default=128, metadata={"help": "tokens generated per prompt and block size"})
    top_k: int = field(default=8, metadata={"help": "top-k log-probs among the logit features"})
    replay: bool = field(
        default=False,
        metadata={
            "help": "replay every candidate on the plain answer instead of decoding with it: same acceptance, "
            "several times faster, no timings (train-policy then needs --cost-from)"
        },
    )
    temperature: float = field(
        default=0.0,
        metadata={
            "help": "sampling temperature of the answers (0 = greedy); > 0 needs --replay, which then replays "
            "every candidate on one sampled answer per prompt (the same acceptance, in distribution)"
        },
    )
    sample_top_k: int | None = field(
        default=None,
        metadata={
            "help": "top-k of the sampled answers (--temperature > 0; 0 = off); unset = the target's generation "
            "config's when it samples (Qwen3: 20), else off"
        },
    )
    sample_top_p: float | None = field(
        default=None,
        metadata={
            "help": "top-p of the sampled answers (--temperature > 0; 1 = off); unset = the target's generation "
            "config's when it samples (Qwen3: 0.95), else off"
        },
    )
    answers: str | None = field(
        default=None,
        metadata={
            "help": "JSONL file keeping the plain answers of a --replay collect: a later collect (another drafter, "
            "same target, prompts and settings) replays on them instead of decoding them again; unset = not kept"
        },
    )

    def __post_init__(self) -> None:
        self.block_sizes = sorted({1, *map(int, self.block_sizes)})
        if self.max_new_tokens < 1 or self.block_sizes[0] < 1:
            raise ValueError("max_new_tokens and block sizes must be >= 1.")
        if self.temperature < 0:
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}.")
        if self.temperature > 0 and not self.replay:
            raise ValueError(
                f"--temperature {self.temperature:g} needs --replay: a decoded collect checks every run token for "
                "token against plain greedy output, which sampled runs cannot match."
            )
        if self.sample_top_k is not None and self.sample_top_k < 0:
            raise ValueError(f"--sample-top-k must be >= 0 (0 = off), got {self.sample_top_k}.")
        if self.sample_top_p is not None and not 0 < self.sample_top_p <= 1:
            raise ValueError(f"--sample-top-p must be in (0, 1] (1 = off), got {self.sample_top_p}.")
        if self.answers and not self.replay:
            raise ValueError(
                f"--answers {self.answers} needs --replay: a decoded collect times its own plain answers, so it "
                "decodes them again rather than reusing kept ones."
            )
        shapes = sorted({DraftShape.parse(s) for s in self.shapes})
        if any(s.is_chain for s in shapes):
            raise ValueError(
                f"--shapes {self.shapes}: plain block sizes belong in --block-sizes; a shape adds +treeN and/or +lookupK."
            )
        self.shapes = [str(s) for s in shapes]

    @property
    def candidates(self) -> list[DraftShape]:
        """Every block size and shape a prompt is decoded with."""
        return [DraftShape(b) for b in self.block_sizes] + [DraftShape.parse(s) for s in self.shapes]


@dataclass(kw_only=True)
class CollectJob:
    """What `blockpilot collect` decodes (models, prompts) and where it writes; `CollectConfig` says how."""

    target: str = field(default="smollm2", metadata={"help": TARGET_HELP})
    drafter: str = field(default=EMBEDDED, metadata={"help": DRAFTER_HELP})
    prompts: str = field(
        default="gsm8k:policy,humaneval:policy",
        metadata={"help": "comma-separated source:split list (train on the policy split; split defaults to policy)"},
    )
    limit: int | None = field(default=None, metadata={"help": "at most this many prompts per source; unset = all"})
    turns: int = field(
        default=1,
        metadata={
            "help": "turns collected per multi-turn prompt (MT-Bench has 2): turn t is asked after the target's own "
            "greedy replies to the turns before, as bench asks it"
        },
    )
    out: str = field(metadata={"help": "collect folder (resumable)"})

    def __post_init__(self) -> None:
        check_prompts(self.prompts, self.limit)
        if self.turns < 1:
            raise ValueError(f"--turns must be >= 1, got {self.turns}.")


@dataclass(kw_only=True)
class MakePolicyJob(CollectJob):
    """`blockpilot make-policy`: collect's models, prompts and folder, and where to push the finished policy."""

    prompts: str = field(
        default="gsm8k:policy,humaneval:policy,mt-bench:policy",
        metadata={"help": "comma-separated source:split list (split defaults to policy); a share is held out"},
    )
    out: str = field(metadata={"help": "policy folder to write (its collect/ subfolder makes reruns resume)"})
    temperatures: list[float] | None = field(
        default=None,
        metadata={
            "help": "temperatures to give the policy a head for, e.g. 0,0.6 (0 = greedy; a sampled head is collected "
            "on sampled answers with --replay, priced by the greedy collect's timings); unset = greedy, plus the "
            "target's generation config temperature when it samples (Qwen3: 0,0.6)"
        },
    )
    push_to: str | None = field(default=None, metadata={"help": "Hub repo id to upload the folder to; unset = none"})
    card_template: str | None = field(
        default=None,
        metadata={
            "help": "card to fill instead of the generic one (e.g. hub_cards/qwen3-4b/README.md): the results "
            "replace its '<!-- make-policy: results -->' line and what follows; unset = the generic card"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.temperatures is not None:
            temps = sorted({float(t) for t in self.temperatures})
            if not temps or temps[0] != 0.0:
                raise ValueError(
                    f"--temperatures {self.temperatures}: include 0 (the greedy head: its timed collect prices every "
                    "head), e.g. --temperatures 0,0.6."
                )
            self.temperatures = temps


@dataclass
class FitConfig:
    """Settings of `train-policy` (the CLI flags are built from these fields)."""

    heldout_fraction: float = field(default=0.2, metadata={"help": "share of prompts held out of training"})
    epochs: int = field(default=300, metadata={"help": "full-batch Adam steps"})
    lr: float = field(default=3e-3, metadata={"help": "Adam learning rate"})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay"})
    projection_dim: int = field(default=32, metadata={"help": "shared projection width of each H-sized feature row"})
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata={"help": "MLP widths"})
    choice: str = field(default="throughput", metadata={"help": "'throughput' or 'classifier' choice rule"})
    decision: str = field(
        default="per-step",
        metadata={
            "help": "'per-step': the head primes each request's per-step choice; 'per-request': it picks one shape"
        },
    )
    name: str = field(
        default="blockpilot-policy",
        metadata={"help": "policy name (stats, card); make-policy names it after its folder when left as is"},
    )
    seed: int = field(default=0, metadata={"help": "initialisation seed"})

    def __post_init__(self) -> None:
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}.")
        if self.epochs < 1 or self.lr <= 0:
            raise ValueError("epochs must be >= 1 and lr > 0.")
        check_choice("--decision", self.decision, DECISIONS)


@dataclass(kw_only=True)
class TrainPolicyJob:
    """Where `blockpilot train-policy` reads its records and writes the policy; `FitConfig` says how it fits."""

    collect_dir: str = field(
        metadata={
            "help": "collect folder written by `blockpilot collect`, or several comma-separated, one per temperature "
            "(e.g. a greedy one and one collected with --temperature 1): the policy gets one head per folder"
        }
    )
    out: str = field(metadata={"help": "policy folder to write"})
    cost_from: str | None = field(
        default=None,
        metadata={
            "help": "a calibration file (`blockpilot calibrate` prints it), or a policy folder, Hub id or 'embedded' "
            "whose stored cost model prices the candidates (needed for a folder collected with --replay); unset = "
            "the collect folder's own timings"
        },
    )


@dataclass(kw_only=True)
class EvaluatePolicyConfig:
    """What `blockpilot evaluate-policy` scores, on which held-out records."""

    policy_dir: str = field(metadata={"help": "policy folder, Hub id or 'embedded' (the shipped SmolLM2 policy)"})
    collect_dir: str = field(metadata={"help": "collect folder of held-out prompts (e.g. the eval split)"})
    plots: str | None = field(default=None, metadata={"help": "folder for PNG plots; unset = no plots"})
    heldout_fraction: float = field(
        default=0.0,
        metadata={
            "help": "score only the prompts train-policy holds out at this fraction (it holds out 0.2 unless told), to "
            "compare policies trained on the folder's other prompts; 0 = every prompt"
        },
    )
    cost_from: str | None = field(
        default=None,
        metadata={
            "help": "a calibration file or a policy whose cost model prices the runs, so that several policies are "
            "scored alike; unset = the collect folder's own timings (a replayed folder: the policy's stored model)"
        },
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}.")


@dataclass(kw_only=True)
class CalibrateConfig:
    """What `blockpilot calibrate` times: the step cost of a target + drafter pair per block size and shape."""

    target: str = field(default="smollm2", metadata={"help": TARGET_HELP})
    drafter: str = field(default=EMBEDDED, metadata={"help": DRAFTER_HELP})
    block_sizes: list[int] = field(
        default_factory=lambda: CollectConfig().block_sizes, metadata={"help": "block sizes to time"}
    )
    shapes: list[str] = field(
        default_factory=list, metadata={"help": "tree / prompt-lookup draft shapes to time as well (lookup: --prompts)"}
    )
    prompts: str | None = field(
        default=None,
        metadata={"help": "source:split list to time on, as collect takes it; unset = one random prompt"},
    )
    limit: int = field(default=2, metadata={"help": "prompts per source"})
    new_tokens: int = field(default=48, metadata={"help": "tokens generated per run"})
    rounds: int = field(default=3, metadata={"help": "runs per prompt and candidate, interleaved (median)"})
    dtype: str = field(
        default="float32", metadata={"help": "model dtype to time in (float32, bfloat16, float16); cached per dtype"}
    )
    device: str = field(default="auto", metadata={"help": f"device to time on: {DEVICE_HELP}; cached per device"})

    def __post_init__(self) -> None:
        check_choice("--dtype", self.dtype, DTYPES)
        self.block_sizes = sorted({int(b) for b in self.block_sizes})
        if not self.block_sizes or self.block_sizes[0] < 1:
            raise ValueError(f"--block-sizes must be >= 1, got {self.block_sizes}.")
        self.shapes = [str(DraftShape.parse(s)) for s in self.shapes]
        if self.prompts is not None:
            check_prompts(self.prompts, self.limit)
        elif any(DraftShape.parse(s).lookup_tokens for s in self.shapes):
            raise ValueError(
                f"--shapes {','.join(self.shapes)}: timing prompt lookup needs --prompts (on random tokens it never "
                "copies), e.g. --prompts gsm8k:policy,humaneval:policy,mt-bench:policy."
            )
        for name in ("new_tokens", "rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")

    @property
    def candidates(self) -> list[DraftShape]:
        return [DraftShape(b) for b in self.block_sizes] + [DraftShape.parse(s) for s in self.shapes]


@dataclass(kw_only=True)
class FitStepPriorConfig:
    """What `blockpilot fit-step-prior` measures: per-step choice's prior for each head of a policy folder."""

    policy_dir: str = field(metadata={"help": "policy folder to fit (its config.json gets the priors)"})
    target: str = field(default="smollm2", metadata={"help": TARGET_HELP})
    drafter: str = field(default=EMBEDDED, metadata={"help": DRAFTER_HELP})
    prompts: str = field(
        default="gsm8k:policy,humaneval:policy,mt-bench:policy",
        metadata={"help": "source:split list to decode (never evaluation prompts)"},
    )
    limit: int = field(default=8, metadata={"help": "prompts per source"})
    max_new_tokens: int = field(default=128, metadata={"help": "tokens generated per prompt"})
    dtype: str = field(default="float32", metadata={"help": "model dtype (float32, bfloat16, float16)"})

    def __post_init__(self) -> None:
        check_choice("--dtype", self.dtype, DTYPES)
        check_prompts(self.prompts, self.limit)
