"""blockpilot-hf: lossless DFlash block speculative decoding for transformers, with learned block sizes."""

from .decoding.stats import GenerationStats, StepRecord
from .drafter import DFlashConfig, DFlashDrafter
from .generation import BlockPilotGenerateOutput, enable
from .policy import BlockPolicy, BlockPolicyConfig

__all__ = [
    "BlockPilotGenerateOutput",
    "BlockPolicy",
    "BlockPolicyConfig",
    "DFlashConfig",
    "DFlashDrafter",
    "GenerationStats",
    "StepRecord",
    "enable",
]
__version__ = "0.1.0"
