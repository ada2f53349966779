"""Build argparse options from a config dataclass (fields and help text defined once) and back."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing


def _base_type(annotation) -> tuple[type, bool]:
    """(element type, is_list) of a field annotation such as `int`, `list[int] | None` or `str`."""
    hints = (
        [a for a in typing.get_args(annotation) if a is not type(None)]
        if isinstance(annotation, types.UnionType)
        else [annotation]
    )
    hint = hints[0]
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], True
    return hint, False


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, positional: tuple[str, ...] = ()) -> None:
    """One `--field-name` option per dataclass field (lists take comma-separated values)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, is_list = _base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        convert = (lambda text, k=kind: [k(x) for x in text.split(",") if x]) if is_list else kind
        help_text = f.metadata.get("help", "") + f" (default: {default})"
        if kind is bool and not is_list:
            parser.add_argument(
                f"--{f.name.replace('_', '-')}",
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=help_text,
            )
        elif f.name in positional:
            parser.add_argument(f.name, type=convert, help=help_text)
        else:
            parser.add_argument(
                f"--{f.name.replace('_', '-')}", dest=f.name, type=convert, default=default, help=help_text
            )


def dataclass_from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
