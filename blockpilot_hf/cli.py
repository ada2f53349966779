"""The `blockpilot` command line. Each subcommand lives next to the code it runs and registers itself here.

blockpilot demo | bench | collect | train-policy | evaluate-policy | calibrate | regenerate | train-drafter
"""

from __future__ import annotations

import argparse
import importlib
import logging

# Modules that define `add_commands(subparsers)`; each parser sets `func(args)`.
COMMAND_MODULES = (
    "blockpilot_hf.demo",
    "blockpilot_hf.bench.cli",
    "blockpilot_hf.training.policy.cli",
    "blockpilot_hf.training.drafter.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blockpilot", description="Lossless DFlash speculative decoding with BlockPilot."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.add_commands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    args.func(args)


if __name__ == "__main__":
    main()
