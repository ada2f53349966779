"""blockpilot-hf: lossless DFlash block speculative decoding for transformers, with learned block sizes.

Importing the package is light: the public names below load (with torch and transformers) on first use, so the
`blockpilot` command line starts fast. Using any of them, or importing `blockpilot_hf.drafter`, also registers
the `dflash` config and model with transformers' Auto classes.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .decoding.kernels import cpu_kernels
    from .decoding.shape import DraftShape
    from .decoding.stats import GenerationStats, StepRecord
    from .drafter import DFlashConfig, DFlashDrafter
    from .generation import BlockPilotGenerateOutput, enable
    from .policy import BlockPolicy, BlockPolicyConfig

# public name -> the submodule that defines it
_LAZY = {
    "BlockPilotGenerateOutput": ".generation",
    "BlockPolicy": ".policy",
    "BlockPolicyConfig": ".policy",
    "DFlashConfig": ".drafter",
    "DFlashDrafter": ".drafter",
    "DraftShape": ".decoding.shape",
    "GenerationStats": ".decoding.stats",
    "StepRecord": ".decoding.stats",
    "cpu_kernels": ".decoding.kernels",
    "enable": ".generation",
}

__all__ = [
    "BlockPilotGenerateOutput",
    "BlockPolicy",
    "BlockPolicyConfig",
    "DFlashConfig",
    "DFlashDrafter",
    "DraftShape",
    "GenerationStats",
    "StepRecord",
    "cpu_kernels",
    "enable",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    """PEP 562: import a public name's module on first access (and submodules such as `blockpilot_hf.embedded`)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
