"""`BenchConfig`: every default of the benchmark harness in one place (`blockpilot bench` flags come from it).

Arm names are constants here too, so the harness, the metrics and the report agree on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cli_args import check_choice
from ..constants import DEVICE_HELP, DTYPES, EMBEDDED
from ..decoding.shape import DraftShape

# Arms that run generate (in this order within a prompt) ...
BASELINE = "baseline"  # plain `generate`
BASELINE_KERNELS = "baseline+kernels"  # plain `generate` inside `cpu_kernels`: what the CPU kernels alone give
PROMPT_LOOKUP = "prompt-lookup"  # transformers' prompt lookup decoding
DFLASH_HF = "dflash-hf"  # transformers' own DFlash loop with our drafter at its training block size
BLOCKPILOT = "blockpilot"  # our engine with the BlockPilot policy, deciding as it is configured (per step by default)
BLOCKPILOT_ONCE = "blockpilot-once"  # the same policy choosing one draft shape per request from the prefill
PER_STEP = "per-step"  # our engine choosing every step with no policy head (a neutral prior)
FIXED_PREFIX = "fixed:"  # our engine at one fixed block size or draft shape, e.g. "fixed:4", "fixed:1+lookup10"
# ... and arms derived from the fixed runs, without extra runs.
BEST_FIXED = "best-fixed"  # the one fixed size or shape that was fastest on the dev prompts
ORACLE = "oracle"  # per prompt turn, the fastest fixed size or shape

RUN_ARMS = (BASELINE, BASELINE_KERNELS, PROMPT_LOOKUP, DFLASH_HF, "fixed", BLOCKPILOT, BLOCKPILOT_ONCE, PER_STEP)
DERIVED_ARMS = (BEST_FIXED, ORACLE)


def fixed_arm(shape: int | str) -> str:
    """The arm of one fixed block size or draft shape, e.g. "fixed:4", "fixed:4+tree3+lookup4"."""
    return f"{FIXED_PREFIX}{shape}"


@dataclass
class BenchConfig:
    """Settings of one benchmark run; `blockpilot bench --help` shows these fields."""

    datasets: list[str] = field(
        default_factory=lambda: ["gsm8k", "humaneval", "mt-bench"],
        metadata={"help": "prompt sources (gsm8k, humaneval, mt-bench or a .jsonl file of prompts)"},
    )
    limit: int = field(default=20, metadata={"help": "evaluation prompts per dataset (eval split)"})
    temperatures: list[float] = field(
        default_factory=lambda: [0.0, 1.0], metadata={"help": "sampling temperatures; 0 = greedy"}
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "seeds of the sampled (T>0) runs"})
    block_sizes: list[int] = field(
        default_factory=lambda: [1, 2, 3, 4, 6, 8],
        metadata={"help": "fixed block sizes run by our engine (the grid)"},
    )
    shapes: list[str] = field(
        default_factory=lambda: ["1+lookup10", "8+tree16", "8+tree16+lookup10"],
        metadata={
            "help": "fixed draft shapes run beside the grid (e.g. 1+lookup10,4+tree3+lookup4): arms fixed:SHAPE, "
            "which best-fixed and oracle range over too"
        },
    )
    arms: list[str] = field(
        default_factory=lambda: list(RUN_ARMS),
        metadata={
            "help": "arms to run: baseline, baseline+kernels (plain generate with our CPU kernels), prompt-lookup, "
            "dflash-hf, fixed (the grid and --shapes), blockpilot, blockpilot-once, per-step"
        },
    )
    max_new_tokens: int = field(default=128, metadata={"help": "new tokens per prompt and turn"})
    max_turns: int = field(default=2, metadata={"help": "turns per multi-turn prompt (MT-Bench has 2)"})
    dev_limit: int = field(
        default=3,
        metadata={"help": "dev prompts per dataset (policy split, greedy) that choose the best fixed size; 0 = none"},
    )
    prompt_lookup_num_tokens: int = field(
        default=10, metadata={"help": "longest copied draft of transformers' prompt lookup (the prompt-lookup arm)"}
    )
    batch_size: list[int] = field(
        default_factory=list,
        metadata={
            "help": "batch sizes to measure instead (e.g. 1,2,4,8): eval prompts in left-padded batches, greedy, "
            "against plain batched generate (baseline, fixed and blockpilot arms); unset = one prompt at a time"
        },
    )
    repeats: int = field(
        default=1, metadata={"help": "timed runs per arm and prompt turn, interleaved; the median run is kept"}
    )
    warmup_tokens: int = field(default=8, metadata={"help": "tokens of the untimed warm-up run of each arm"})
    target: str = field(default="smollm2", metadata={"help": "target: 'smollm2' (embedded), a folder or a Hub id"})
    drafter: str = field(default=EMBEDDED, metadata={"help": "DFlash drafter folder or Hub id; 'embedded' = shipped"})
    policy: str = field(
        default=EMBEDDED,
        metadata={"help": "BlockPilot policy folder or Hub id; 'embedded' = shipped; 'none' = no arm"},
    )
    device: str = field(default="auto", metadata={"help": DEVICE_HELP})
    dtype: str = field(default="float32", metadata={"help": "model dtype: float32, bfloat16 or float16"})
    attn_implementation: str = field(default="", metadata={"help": "attention kernel (eager, sdpa, ...); '' = default"})
    threads: int = field(default=0, metadata={"help": "torch intra-op threads on CPU; 0 = torch's default"})
    out: str = field(default="results", metadata={"help": "output folder (raw.jsonl is resumed if present)"})

    def __post_init__(self) -> None:
        self.block_sizes = sorted({int(b) for b in self.block_sizes})
        self.shapes = [str(DraftShape.parse(s)) for s in self.shapes]
        self.temperatures = [float(t) for t in self.temperatures]
        unknown = sorted(set(self.arms) - set(RUN_ARMS))
        if unknown:
            raise ValueError(f"Unknown arms {unknown}: choose from {list(RUN_ARMS)}.")
        if BASELINE not in self.arms:
            raise ValueError("The baseline arm is required: every speed-up is measured against it.")
        if not self.block_sizes or self.block_sizes[0] < 1:
            raise ValueError(f"block_sizes must be >= 1, got {self.block_sizes}.")
        if any(t < 0 for t in self.temperatures) or not self.temperatures:
            raise ValueError(f"temperatures must be >= 0, got {self.temperatures}.")
        for name in ("limit", "max_new_tokens", "max_turns", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if any(b < 1 for b in self.batch_size):
            raise ValueError(f"batch sizes must be >= 1, got {self.batch_size}.")
        check_choice("--dtype", self.dtype, DTYPES)

    @property
    def fixed_shapes(self) -> list[str]:
        """Every fixed arm's shape: the grid's block sizes, then the extra shapes."""
        return [str(b) for b in self.block_sizes] + [s for s in self.shapes if s not in map(str, self.block_sizes)]

    def seeds_for(self, temperature: float) -> list[int]:
        """Greedy runs are deterministic: one seed (0); sampled runs use every seed."""
        return list(self.seeds) if temperature > 0 else [0]
