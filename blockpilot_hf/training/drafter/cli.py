"""`blockpilot regenerate` and `blockpilot train-drafter`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...cli_args import add_dataclass_arguments, dataclass_from_args
from .recipe import DrafterTrainingConfig


def add_commands(subparsers) -> None:
    train = subparsers.add_parser("train-drafter", help="train a DFlash drafter for any causal LM target (accelerate)")
    add_dataclass_arguments(train, DrafterTrainingConfig)
    train.set_defaults(func=_train)

    regen = subparsers.add_parser("regenerate", help="the target's own greedy answers to offline prompts (resumable)")
    regen.add_argument("--target", default="smollm2")
    regen.add_argument("--out", type=Path, required=True)
    regen.add_argument("--sources", default="gsm8k,humaneval,aime,gpqa,stdlib,pydocs,fortunes")
    regen.add_argument("--per-source", type=int, default=None)
    regen.add_argument("--batch-size", type=int, default=16)
    regen.add_argument("--max-new-tokens", type=int, default=256)
    regen.add_argument("--dtype", default="float32", help="target dtype (bfloat16 is ~2x faster on AVX512-BF16 CPUs)")
    regen.set_defaults(func=_regenerate)

    text = subparsers.add_parser("text-data", help="offline text as extra drafter data, labelled by the target")
    text.add_argument("--target", default="smollm2")
    text.add_argument("--out", type=Path, required=True)
    text.add_argument("--sources", default="gsm8k,stdlib,pydocs")
    text.add_argument("--limit-per-source", type=int, default=None)
    text.set_defaults(func=_text_data)


def _train(args: argparse.Namespace) -> None:
    from accelerate import Accelerator

    from .recipe import train_drafter

    cfg = dataclass_from_args(DrafterTrainingConfig, args)
    if not cfg.data:
        raise SystemExit("train-drafter needs --data: JSONL files written by `blockpilot regenerate`.")
    final = train_drafter(cfg, Accelerator(mixed_precision=cfg.mixed_precision))
    print(f"drafter saved to {final}")


def _regenerate(args: argparse.Namespace) -> None:
    import torch

    from ...embedded import load_target
    from .regenerate import drafter_prompts, regenerate

    model, tokenizer = load_target(args.target, getattr(torch, args.dtype))
    regenerate(
        model,
        tokenizer,
        drafter_prompts(args.sources.split(","), args.per_source),
        args.out,
        args.batch_size,
        args.max_new_tokens,
    )


def _text_data(args: argparse.Namespace) -> None:
    from ...embedded import load_target
    from .textdata import write_text_rows

    _, tokenizer = load_target(args.target)
    print(
        write_text_rows(tokenizer, args.out, args.sources.split(","), args.limit_per_source),
        "rows written to",
        args.out,
    )
