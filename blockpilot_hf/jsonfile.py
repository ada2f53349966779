"""Dataclasses as JSON (small settings files and JSONL rows), with the same errors for every damaged input.

    save_json(meta, folder / "bench.json");  meta = load_json(BenchMeta, folder / "bench.json")

- a missing file: FileNotFoundError naming the path;
- a file that is not JSON: ValueError naming the path, line and column;
- a missing required key (a field without a default): ValueError naming the keys;
- an unknown key: ValueError naming the keys. Unknown keys are refused, never dropped: a key this version does not
  know means the file is of another kind, or was written by a newer blockpilot-hf whose meaning this one would
  silently lose (upgrade to read it). Files written by an older version load when the fields added since have
  defaults, which is the rule for adding a field.

Nested dataclass fields are written by `asdict`; turning them back from dicts is the class's `__post_init__`'s job.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def save_json(obj: Any, path: Path) -> None:
    """Write the dataclass `obj` to `path` as indented JSON."""
    Path(path).write_text(json.dumps(asdict(obj), indent=2) + "\n", encoding="utf-8")


def load_json(cls: type[T], path: Path) -> T:
    """The `cls` instance stored at `path` by `save_json`; errors as in the module docstring."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (expected a {cls.__name__} JSON file).")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); the file is corrupt."
        ) from err
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not valid JSON (not UTF-8: {err}); the file is corrupt.") from err
    try:
        return from_dict(cls, data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err


def from_dict(cls: type[T], data: Any) -> T:
    """`cls(**data)` with the errors of the module docstring (ValueError without a location: callers add it)."""
    name = cls.__name__
    if not isinstance(data, dict):
        raise ValueError(f"not a {name}: a JSON object was expected, got {type(data).__name__}.")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown {name} keys {unknown} (another kind of file, or from a newer blockpilot-hf).")
    required = [n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING and f.init]
    missing = [n for n in required if n not in data]
    if missing:
        raise ValueError(f"not a complete {name}: missing keys {missing}.")
    try:
        return cls(**data)
    except (TypeError, ValueError, KeyError) as err:  # `__post_init__` validation, or nested values of a wrong kind
        raise ValueError(f"not a valid {name}: {err}") from err
