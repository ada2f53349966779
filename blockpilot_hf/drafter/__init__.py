"""The DFlash drafter: configuration, modeling and checkpoint loading (ours and z-lab's)."""

from transformers import AutoConfig, AutoModel

from .configuration import DFlashConfig, default_target_layer_ids
from .modeling import DFlashDrafter

AutoConfig.register(DFlashConfig.model_type, DFlashConfig, exist_ok=True)
AutoModel.register(DFlashConfig, DFlashDrafter, exist_ok=True)

__all__ = ["DFlashConfig", "DFlashDrafter", "default_target_layer_ids"]
