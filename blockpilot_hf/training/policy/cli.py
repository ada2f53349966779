"""The policy commands of `blockpilot`: collect, train-policy, evaluate-policy, calibrate.

    blockpilot collect --target smollm2 --drafter DIR --prompts gsm8k:policy,humaneval:policy --out runs/collect
    blockpilot train-policy runs/collect --out policies/my-policy
    blockpilot evaluate-policy policies/my-policy runs/collect-heldout --plots runs/plots
    blockpilot calibrate --target smollm2 --drafter DIR

Flags with defaults come from the config dataclasses (`CollectConfig`, `FitConfig`), so defaults live in one place.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from .collect import CollectConfig
from .fit import FitConfig

_PARSERS = {
    "int": int,
    "float": float,
    "str": str,
    "list[int]": lambda s: [int(x) for x in s.split(",") if x],
}


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls) -> None:
    """One `--flag` per field of `cls` (int, float, str or comma-separated list[int]), help and default from the field."""
    for f in dataclasses.fields(cls):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        shown = ",".join(map(str, default)) if isinstance(default, list) else default
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=_PARSERS[kind],
            default=default,
            help=f"{f.metadata.get('help', '')} (default: {shown})",
        )


def dataclass_from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def _load_pair(args):
    """(target, drafter) from --target (embedded name, folder or Hub id) and --drafter (folder or Hub id)."""
    from ...drafter import DFlashDrafter
    from ...embedded import load_target
    from ...generation import enable

    target, tokenizer = load_target(args.target)
    drafter = DFlashDrafter.from_pretrained(args.drafter, dtype=target.dtype).to(target.device)
    return enable(target), tokenizer, drafter


def run_collect(args: argparse.Namespace) -> None:
    from .collect import collect, items_from_prompts, process_state

    state = process_state()
    target, tokenizer, drafter = _load_pair(args)
    target.to(state.device)
    drafter.to(state.device)
    items = items_from_prompts(tokenizer, args.prompts, args.limit)
    new = collect(target, drafter, items, Path(args.out), dataclass_from_args(CollectConfig, args))
    print(f"process {state.process_index}: collected {len(new)} new prompts into {args.out}")


def run_train(args: argparse.Namespace) -> None:
    from .fit import train_policy

    policy = train_policy(Path(args.collect_dir), Path(args.out), dataclass_from_args(FitConfig, args))
    print(f"wrote {args.out} ({policy.num_parameters():,} parameters)")
    for r in policy.config.results:
        print(f"  {r.name}: {r.value:.4g}")


def run_evaluate(args: argparse.Namespace) -> None:
    from .evaluate import evaluate_policy

    report = evaluate_policy(args.policy_dir, Path(args.collect_dir), Path(args.plots) if args.plots else None)
    print(report.markdown())


def run_calibrate(args: argparse.Namespace) -> None:
    from ...policy.cost import calibrate, calibration_path

    target, _, drafter = _load_pair(args)
    cost = calibrate(target, drafter, args.block_sizes, steps=args.steps)
    print(json.dumps(dataclasses.asdict(cost), indent=2))
    print(f"cached at {calibration_path(target, drafter)}")


def add_commands(subparsers) -> None:
    """Register collect, train-policy, evaluate-policy and calibrate."""
    p = subparsers.add_parser(
        "collect", help="decode prompts at every block size and record acceptance, timing, features"
    )
    p.add_argument("--target", default="smollm2", help="embedded name, folder or Hub id of the target")
    p.add_argument("--drafter", required=True, help="folder or Hub id of the DFlash drafter")
    p.add_argument(
        "--prompts",
        default="gsm8k:policy,humaneval:policy",
        help="source:split list (train on the policy split)",
    )
    p.add_argument("--limit", type=int, default=None, help="at most this many prompts per source")
    p.add_argument("--out", required=True, help="collect folder (resumable)")
    add_dataclass_arguments(p, CollectConfig)
    p.set_defaults(func=run_collect)

    p = subparsers.add_parser("train-policy", help="fit a BlockPilot head on a collect folder")
    p.add_argument("collect_dir")
    p.add_argument("--out", required=True, help="policy folder to write")
    add_dataclass_arguments(p, FitConfig)
    p.set_defaults(func=run_train)

    p = subparsers.add_parser("evaluate-policy", help="score a policy against oracle and fixed sizes on held-out data")
    p.add_argument("policy_dir", help="policy folder or Hub id")
    p.add_argument("collect_dir", help="collect folder of held-out prompts (e.g. the eval split)")
    p.add_argument("--plots", default=None, help="folder for PNG plots")
    p.set_defaults(func=run_evaluate)

    p = subparsers.add_parser("calibrate", help="measure step cost per block size on this machine (cached)")
    p.add_argument("--target", default="smollm2")
    p.add_argument("--drafter", required=True)
    p.add_argument("--block-sizes", type=_PARSERS["list[int]"], default=CollectConfig().block_sizes)
    p.add_argument("--steps", type=int, default=6, help="timed steps per size")
    p.set_defaults(func=run_calibrate)
