"""The drafter commands of `blockpilot`: regenerate, text-data, train-drafter.

    blockpilot self-instruct --out runs/regen/self-instruct.jsonl --per-category 200
    blockpilot regenerate --out runs/regen/answers.jsonl --sources gsm8k,humaneval,runs/regen/self-instruct.jsonl
    blockpilot text-data --out runs/regen/text.jsonl
    accelerate launch -m blockpilot_hf.cli train-drafter --data runs/regen/answers.jsonl --out runs/drafter

Options come from the config dataclasses in `config.py`; torch loads only once a command runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ...cli_args import Command, UsageError
from .config import DrafterTrainingConfig, RegenerateConfig, SelfInstructConfig, TextDataConfig


def run_train(config: DrafterTrainingConfig) -> None:
    if not config.data:
        raise UsageError("--data is required: JSONL files written by `blockpilot regenerate` (or text-data).")
    missing = [path for path in config.data if not Path(path).is_file()]
    if missing:
        raise UsageError(f"--data: no such file: {', '.join(missing)}")
    from accelerate import Accelerator

    from .recipe import train_drafter

    config = dataclasses.replace(config, mixed_precision=resolve_mixed_precision(config.mixed_precision))
    final = train_drafter(config, Accelerator(mixed_precision=config.mixed_precision))
    print(f"drafter saved to {final}")


def resolve_mixed_precision(value: str) -> str:
    """`auto` -> bf16 where the training device computes bfloat16 natively, else no (full float32).

    A CPU without AVX512-BF16 or AMX emulates bfloat16 matrix products: measured on a 2-core AVX2 EPYC, one
    target pass over 600 tokens took 9.5 s under bf16 autocast against 1.7 s in float32; on a 2-core EPYC with
    AVX512-BF16, 0.78 s against 1.27 s (`benchmarks/autocast_cost.py`).
    """
    if value != "auto":
        return value
    import torch

    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported() else "no"


def run_regenerate(config: RegenerateConfig) -> None:
    missing = [source for source in config.sources if source.endswith(".jsonl") and not Path(source).is_file()]
    if missing:
        raise UsageError(f"--sources: no such prompt file: {', '.join(missing)}")
    import torch

    from ...embedded import load_target
    from .regenerate import drafter_prompts, regenerate

    model, tokenizer = load_target(config.target, getattr(torch, config.dtype), config.device)
    prompts = drafter_prompts(config.sources, config.per_source)
    regenerate(
        model,
        tokenizer,
        prompts,
        Path(config.out),
        config.batch_size,
        config.max_new_tokens,
        config.temperature,
        config.seed,
    )


def run_self_instruct(config: SelfInstructConfig) -> None:
    import torch

    from ...embedded import load_target
    from .selfinstruct import write_self_instruct

    model, tokenizer = load_target(config.target, getattr(torch, config.dtype), config.device)
    tokenizer.padding_side = "left"
    added = write_self_instruct(
        model, tokenizer, Path(config.out), config.per_category, config.batch_size, config.two_turn_share, config.seed
    )
    print(added, "prompts added to", config.out)


def run_text_data(config: TextDataConfig) -> None:
    from ...embedded import load_target
    from .textdata import write_text_rows

    _, tokenizer = load_target(config.target)
    rows = write_text_rows(tokenizer, Path(config.out), config.sources, config.limit_per_source)
    print(rows, "rows written to", config.out)


COMMANDS = (
    Command(
        "regenerate",
        "the target's own answers (greedy, or sampled) to offline prompts (resumable)",
        run_regenerate,
        (RegenerateConfig,),
    ),
    Command(
        "self-instruct",
        "chat prompts and follow-up turns written by the target itself (resumable)",
        run_self_instruct,
        (SelfInstructConfig,),
    ),
    Command(
        "text-data",
        "offline text as extra drafter data, labelled by the target",
        run_text_data,
        (TextDataConfig,),
    ),
    Command(
        "train-drafter",
        "train a DFlash drafter for any causal LM target (accelerate)",
        run_train,
        (DrafterTrainingConfig,),
    ),
)
