"""BlockPilot: choose the block size per request from its prefill (head, features, cost model, baselines)."""

from ..decoding.engine import BlockChooser
from .baselines import EntropyPolicy, FixedPolicy, best_fixed_size, oracle_size
from .config import BlockPolicyConfig, CostModel, FeatureSpec, MeasuredResult
from .cost import calibrate, choose_size, load_calibration
from .features import PrefillFeatures, extract_features
from .head import BlockPolicy
from .resolve import resolve_block_policy

__all__ = [
    "BlockChooser",
    "BlockPolicy",
    "BlockPolicyConfig",
    "CostModel",
    "EntropyPolicy",
    "FeatureSpec",
    "FixedPolicy",
    "MeasuredResult",
    "PrefillFeatures",
    "best_fixed_size",
    "calibrate",
    "choose_size",
    "extract_features",
    "load_calibration",
    "oracle_size",
    "resolve_block_policy",
]
