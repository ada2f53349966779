"""File names and locations shared across the package (one place, as in transformers' `utils/constants`)."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
POLICY_CONFIG_NAME = "config.json"
POLICY_WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"

CACHE_HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "blockpilot_hf"

ASSETS_DIR = Path(__file__).parent / "assets"
EMBEDDED_DRAFTER_DIR = ASSETS_DIR / "smollm2-135m-dflash"
EMBEDDED_POLICY_DIR = ASSETS_DIR / "smollm2-135m-blockpilot"
# The name that selects a shipped asset wherever a drafter or policy is named (`--drafter embedded`).
EMBEDDED = "embedded"


def portable_id(name_or_path: str) -> str:
    """A model id fit to store in a shipped file: a shipped asset as `blockpilot_hf/assets/<name>` (the same on
    every machine, not this checkout's absolute path); anything else unchanged."""
    path = Path(name_or_path)
    if path.is_absolute() and path.resolve().parent == ASSETS_DIR.resolve():
        return f"blockpilot_hf/assets/{path.name}"
    return name_or_path


DTYPES = ("float32", "bfloat16", "float16")  # model dtypes a command accepts by name

DEVICE_HELP = "'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ..."
DECISIONS = ("per-step", "per-request")  # how a BlockPilot policy decides: every step from a prior, or once
