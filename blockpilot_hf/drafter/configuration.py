"""`DFlashConfig`: a Qwen3 layer stack plus the fields that tie a DFlash drafter to its target."""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import Qwen3Config

LEGACY_DRAFT_VOCAB_KEY = "draft_vocab_ids"  # config.json key of folders written before the ids moved to the weights
DFLASH_FIELDS = ("block_size", "mask_token_id", "target_layer_ids", "num_target_layers", "input_embedding_scale")


def default_target_layer_ids(num_target_layers: int, num_ids: int) -> list[int]:
    """Evenly spaced layer ids from 1 to L-3 (DFlash's default); a single id reads the middle layer."""
    if num_ids == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end - start + 1 < num_ids:  # a shallow target: spread over all of its layers instead
        start, end = 0, num_target_layers - 1
    return [round(start + i * (end - start) / (num_ids - 1)) for i in range(num_ids)]


@strict
class DFlashConfig(Qwen3Config):
    r"""
    Configuration of a DFlash block-diffusion drafter.

    The drafter is a short stack of Qwen3 decoder layers with "KV injection": the keys and values of every layer
    see projected hidden states of the target (read from `target_layer_ids`) before the block being drafted.
    It has no embeddings and no LM head of its own; it borrows the target's.

    block_size (`int`): block length the drafter was trained with; the default inference block size.
    mask_token_id (`int`): id of the target embedding row used for the still-unknown block positions.
    target_layer_ids (`list[int]`): target decoder layers (0-based) whose outputs form the context features.
    num_target_layers (`int`): depth of the target the drafter was made for (checked against the target).
    input_embedding_scale (`float`): multiplier applied to the block's input embeddings.
    target_model_id (`str`): Hub id or path of the target, recorded for model cards and mismatch warnings.
    draft_vocab_size (`int`): if set, drafts only come from this many token ids (frequency-ranked at training
        time), stored as the drafter's `draft_vocab_ids` buffer in model.safetensors; the head then reads those
        rows of the target's LM head instead of all of them. Older folders list the ids in config.json as
        `draft_vocab_ids`; they still load (the list moves into the buffer).
    """

    model_type = "dflash"

    block_size: int = 16
    mask_token_id: int | None = None
    target_layer_ids: list[int] | None = None
    num_target_layers: int | None = None
    input_embedding_scale: float = 1.0
    target_model_id: str | None = None
    draft_vocab_size: int | None = None

    def __post_init__(self, **kwargs):
        if self.target_layer_ids is None and self.num_target_layers is not None:
            self.target_layer_ids = default_target_layer_ids(self.num_target_layers, self.num_hidden_layers)
        # The old format: the ids themselves in config.json. Kept aside (never saved) for the drafter to adopt.
        legacy = kwargs.pop(LEGACY_DRAFT_VOCAB_KEY, None)
        if legacy is not None:
            self.draft_vocab_size = len(legacy)
        super().__post_init__(**kwargs)
        self.legacy_draft_vocab_ids: list[int] | None = None if legacy is None else [int(i) for i in legacy]
        self.validate_dflash()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("legacy_draft_vocab_ids", None)
        return out

    def validate_dflash(self) -> None:
        """Reject configurations a drafter cannot run with, naming the field to fix."""
        if self.block_size < 2:
            raise ValueError(
                f"DFlashConfig.block_size must be >= 2 (an anchor plus at least one draft), got {self.block_size}."
            )
        if not self.target_layer_ids:
            raise ValueError("DFlashConfig needs `target_layer_ids` (or `num_target_layers` to derive them).")
        if self.num_target_layers is not None and max(self.target_layer_ids) >= self.num_target_layers:
            raise ValueError(
                f"target_layer_ids {self.target_layer_ids} reach beyond the target's {self.num_target_layers} layers."
            )

    @property
    def num_context_layers(self) -> int:
        return len(self.target_layer_ids)

    @classmethod
    def from_zlab_dict(cls, config: dict[str, Any]) -> DFlashConfig:
        """Build a config from a z-lab checkpoint's config.json (`model_type: qwen3` with a `dflash_config` block)."""
        config = dict(config)
        dflash = dict(config.pop("dflash_config", None) or {})
        _refuse_unsupported(config, dflash)
        for key in ("architectures", "auto_map", "model_type", "transformers_version"):
            config.pop(key, None)
        # Newer files may repeat block_size inside dflash_config; that one wins.
        for key in DFLASH_FIELDS:
            if key in dflash:
                config[key] = dflash[key]
        config.pop("dtype", None)
        config.pop("torch_dtype", None)
        return cls(**config)


def _refuse_unsupported(config: dict[str, Any], dflash: dict[str, Any]) -> None:
    """Refuse z-lab fields this drafter does not implement, naming them, rather than load a drafter that would draft
    differently from the one trained: unknown `dflash_config` keys, causal block attention, sliding windows."""
    unknown = sorted(set(dflash) - set(DFLASH_FIELDS) - {"is_causal", "causal", "layer_types"})
    if unknown:
        raise ValueError(
            f"dflash_config has fields this loader does not know: {unknown}. The checkpoint comes from a newer "
            "DFlash release (or another architecture, such as DFlash2); loading it would draft wrongly. Use a "
            "checkpoint in the published DFlash format."
        )
    if dflash.get("is_causal") or dflash.get("causal") or config.get("is_causal"):
        raise ValueError(
            "The checkpoint sets a causal block attention (dflash_config causal / is_causal = true); this drafter "
            "implements DFlash's bidirectional block attention only, so it would draft wrongly. Use a checkpoint "
            "without it."
        )
    layer_types = dflash.get("layer_types") or config.get("layer_types") or []
    windowed = sorted({t for t in layer_types if t != "full_attention"})
    if windowed:
        raise ValueError(
            f"The checkpoint's layer_types include {windowed}; this drafter's layers attend to the whole context "
            "(full_attention), so it would draft wrongly. Use a checkpoint whose layers all use full attention."
        )
    config.pop("layer_types", None)  # all full attention: what this drafter does


def is_zlab_config(config: dict[str, Any]) -> bool:
    """True for z-lab's format: a Qwen3 config carrying `dflash_config` (written for remote code)."""
    return config.get("model_type") != DFlashConfig.model_type and "dflash_config" in config
