"""The one way a `blockpilot` command is built: config dataclasses -> argparse options -> config dataclasses.

Each command names its config dataclasses; every field becomes one option (`--field-name`, or a positional
argument), with the field's `metadata["help"]` as help text and its default shown once, appended here. A field
without a default is a required option. Values the config's `__post_init__` rejects (ValueError), like values
argparse cannot convert, end as a one-line usage error (exit status 2), never as a traceback.

This module must stay light (no torch, no transformers): `blockpilot --help` builds every parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


class UsageError(Exception):
    """A bad argument a command finds before any heavy work (a missing folder, say): reported as a usage error."""


@dataclass(frozen=True)
class Command:
    """One subcommand: `run(*configs)` is called with one instance of each class in `configs`, in order."""

    name: str
    help: str
    run: Callable[..., None]
    configs: tuple[type, ...]
    positional: tuple[str, ...] = ()  # fields given as positional arguments, in this order


def check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    """Refuse a value outside `choices`, naming the option and what it accepts."""
    if value not in choices:
        raise ValueError(f"{option} must be one of {', '.join(choices)}, got {value!r}.")


def checked(option: str, resolve: Callable[[str], T], value: str) -> T:
    """`resolve(value)`, a failure (a missing folder, a bad Hub id) turned into a usage error naming the option."""
    try:
        return resolve(value)
    except (OSError, ValueError) as err:  # FileNotFoundError is an OSError
        raise UsageError(f"{option} {value}: {err}") from err


def _base_type(annotation) -> tuple[type, bool]:
    """(element type, is_list) of a field annotation such as `int`, `list[int] | None` or `str`."""
    hints = (
        [a for a in typing.get_args(annotation) if a is not type(None)]
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        else [annotation]
    )
    hint = hints[0]
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], True
    return hint, False


def _comma_list(kind: type) -> Callable[[str], list]:
    """Parse "1,2,4" into [1, 2, 4]; named so argparse says "invalid comma-separated int value"."""

    def parse(text: str) -> list:
        return [kind(x) for x in text.split(",") if x]

    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def _shown(default) -> str:
    return ",".join(map(str, default)) if isinstance(default, list | tuple) else str(default)


def field_default(f: dataclasses.Field):
    """The default of a dataclass field (calling its factory), or `dataclasses.MISSING` if it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, positional: tuple[str, ...] = ()) -> None:
    """One option per field of `cls` (lists take comma-separated values; bools are `--x/--no-x`)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    # Positional arguments in the order the command names them, then options in field order.
    for f in [fields[n] for n in positional if n in fields] + [f for f in fields.values() if f.name not in positional]:
        kind, is_list = _base_type(hints[f.name])
        convert = _comma_list(kind) if is_list else kind
        metavar = {"metavar": f"{kind.__name__.upper()},..."} if is_list else {}
        default = field_default(f)
        help_text = f.metadata.get("help") or ""
        if not help_text:
            raise TypeError(f"{cls.__name__}.{f.name} has no help text: add metadata={{'help': ...}}.")
        # Defaults are shown here, once; an empty one (None, "", []) is explained by the help text instead.
        if default is not dataclasses.MISSING and default not in (None, "", []):
            help_text += f" (default: {_shown(default)})"
        help_text = help_text.replace("%", "%%")  # argparse %-formats help strings
        if f.name in positional:
            parser.add_argument(f.name, type=convert, help=help_text, **metavar)
        elif default is dataclasses.MISSING:
            parser.add_argument(
                option_name(f.name), dest=f.name, type=convert, required=True, help=help_text, **metavar
            )
        elif kind is bool and not is_list:
            group = parser.add_mutually_exclusive_group()
            group.add_argument(option_name(f.name), dest=f.name, action="store_true", help=help_text)
            group.add_argument(
                "--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=argparse.SUPPRESS
            )
            parser.set_defaults(**{f.name: default})
        else:
            parser.add_argument(
                option_name(f.name), dest=f.name, type=convert, default=default, help=help_text, **metavar
            )


def dataclass_from_args(cls, args: argparse.Namespace):
    """An instance of `cls` from the parsed options (its `__post_init__` validates them)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def add_command(subparsers, command: Command) -> argparse.ArgumentParser:
    """Register `command` as a subparser whose `func(args)` builds the configs and runs it."""
    parser = subparsers.add_parser(command.name, help=command.help, description=command.help)
    for cls in command.configs:
        add_dataclass_arguments(parser, cls, command.positional)
    parser.set_defaults(func=functools.partial(run_command, parser, command))
    return parser


def configs_from_args(command: Command, args: argparse.Namespace) -> list:
    """One instance of each of the command's config classes, from the parsed options (validated)."""
    return [dataclass_from_args(cls, args) for cls in command.configs]


def run_command(parser: argparse.ArgumentParser, command: Command, args: argparse.Namespace) -> None:
    """Build the configs (a rejected value is a usage error) and run the command."""
    try:
        configs = configs_from_args(command, args)
    except ValueError as err:
        parser.error(" ".join(str(err).split()))
    try:
        command.run(*configs)
    except UsageError as err:
        parser.error(" ".join(str(err).split()))


def command_line(name: str, *configs) -> str:
    """The `blockpilot` command that rebuilds `configs` (options whose value differs from the field's default),
    for records such as a model card's "how it was made"."""
    import shlex

    words = ["blockpilot", name]
    for config in configs:
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if value == field_default(f) or value is None:
                continue
            if isinstance(value, bool):
                words.append(option_name(f.name) if value else "--no-" + f.name.replace("_", "-"))
            else:
                words += [option_name(f.name), _shown(value)]
    return shlex.join(words)
