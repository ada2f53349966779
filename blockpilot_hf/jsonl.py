"""Append-only JSONL files that survive a crash, read and appended under one rule.

Every row is written as one JSON object and its newline in a single flushed write, so:

- a last line without a newline is a torn tail (a crash mid-write): dropped on read, cut before appending, with a
  warning;
- any complete line (ending in a newline) that is not a JSON object, or not a valid row for the reader, is damage:
  reading and appending refuse with an error naming the file and line (appending after it would bury it mid-file).
  Blank lines are skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


def read_rows(path: Path, parse: Callable[[dict], T] | None = None) -> list[T]:
    """The rows of an append-only JSONL file ([] when it does not exist), each passed through `parse` if given.

    A torn last line is dropped with a warning; a damaged complete line, or one `parse` rejects (ValueError,
    TypeError or KeyError), raises ValueError naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    rows, torn = _parse(path, parse)
    if torn:
        logger.warning("%s: ignoring a torn last line of %d bytes (an interrupted write)", path, torn)
    return rows


class JsonlWriter:
    """Appends rows (dicts or dataclasses) to a JSONL file, one flushed line each.

    Before the first row the file is checked as `read_rows(path, parse)` checks it (damage raises) and a torn tail
    is cut, so new rows start on a fresh line after only complete, valid ones."""

    def __init__(self, path: Path, parse: Callable[[dict], Any] | None = None):
        self.path, self.parse = Path(path), parse
        self._checked = False

    def append(self, *rows: Any) -> None:
        if not self._checked:
            self._prepare()
        with self.path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(asdict(row) if is_dataclass(row) else row, separators=(",", ":")) + "\n")
                f.flush()

    def _prepare(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            _, torn = _parse(self.path, self.parse)
            if torn:
                logger.warning("%s: cutting a torn last line of %d bytes (an interrupted write)", self.path, torn)
                with self.path.open("r+b") as f:
                    f.truncate(f.seek(0, 2) - torn)
        self._checked = True


def _parse(path: Path, parse: Callable[[dict], T] | None) -> tuple[list[T], int]:
    """Rows of the complete lines and the byte length of the torn tail (0 when the file ends with a newline)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # everything after the last newline is torn
    rows = []
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(
                f"{path}: line {number} is not valid JSON ({err}); the file is corrupt, delete it or that line."
            ) from err
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {number} is not a JSON object; the file is corrupt or of another kind.")
        if parse is not None:
            try:
                row = parse(row)
            except (ValueError, TypeError, KeyError) as err:
                raise ValueError(f"{path}: line {number} is not a valid row: {err}") from err
        rows.append(row)
    return rows, len(data) - end
