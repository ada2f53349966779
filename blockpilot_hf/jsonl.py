"""Append-only JSONL files that survive a crash: a torn last line is dropped on read and cut before appending."""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def read_rows(path: Path) -> list[dict]:
    """Rows of an append-only JSONL file; a torn last line (interrupted write) is dropped, other damage raises."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1:
                logger.warning("%s: ignoring a truncated last line (an interrupted write)", path)
                break
            raise ValueError(
                f"{path}: line {i + 1} is not valid JSON ({err}); the file is corrupt, delete it or that line."
            ) from err
    return rows


def cut_torn_tail(path: Path) -> None:
    """Cut a half-written last line (a crash mid-write) so that new rows start on a fresh line."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    logger.warning("%s: dropping a torn last line of %d bytes from an interrupted run", path, len(data) - keep)
    with path.open("r+b") as f:
        f.truncate(keep)
