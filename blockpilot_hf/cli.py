"""The `blockpilot` command line: every subcommand is a `Command` (config dataclasses + a run function) listed here.

    blockpilot demo | bench | make-policy | collect | train-policy | evaluate-policy | calibrate | regenerate |
        self-instruct | text-data | train-drafter
    accelerate launch -m blockpilot_hf.cli collect ...   # the same commands under a launcher

Building the parser imports no torch: the command modules import it inside their run functions, so
`blockpilot --help` answers at once.
"""

from __future__ import annotations

import argparse
import logging

from . import demo
from .bench import cli as bench_cli
from .cli_args import Command, add_command
from .training.drafter import cli as drafter_cli
from .training.policy import cli as policy_cli

COMMANDS: tuple[Command, ...] = (*demo.COMMANDS, *bench_cli.COMMANDS, *policy_cli.COMMANDS, *drafter_cli.COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blockpilot", description="Lossless DFlash speculative decoding with BlockPilot."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        add_command(subparsers, command)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    args.func(args)


if __name__ == "__main__":
    main()
