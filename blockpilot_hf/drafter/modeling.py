"""`DFlashDrafter`: one forward pass drafts a whole block from the target's hidden states ("KV injection").

Weight names match z-lab's checkpoints (`fc`, `hidden_norm`, `norm`, `layers.{i}...`) so files move both ways.
Shapes: B batch, C new context positions, K block length, H hidden size, n number of target layers read.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    eager_attention_forward,
    rotate_half,
)

from ..constants import CONFIG_NAME
from ..decoding.small_rows import small_row_forward
from ..hub import resolve_folder
from .configuration import LEGACY_DRAFT_VOCAB_KEY, DFlashConfig, is_zlab_config


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x (B, heads, T, d) with cos/sin (B, T, d) for the same T positions."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class DFlashAttention(nn.Module):
    """Block queries attend, without a causal mask, to [target context ; block] keys and values."""

    def __init__(self, config: DFlashConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        self.attention_dropout = 0.0
        H, d = config.hidden_size, self.head_dim
        self.q_proj = nn.Linear(H, config.num_attention_heads * d, bias=config.attention_bias)
        self.k_proj = nn.Linear(H, config.num_key_value_heads * d, bias=config.attention_bias)
        self.v_proj = nn.Linear(H, config.num_key_value_heads * d, bias=config.attention_bias)
        self.o_proj = nn.Linear(config.num_attention_heads * d, H, bias=config.attention_bias)
        self.q_norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        context: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        cache: Cache | None,
    ) -> torch.Tensor:
        """hidden_states (B, K, H) normed block; context (Bc, C, H) projected target features (not normed here).

        Bc is B, or 1 when many blocks of one sequence share its context (training packs blocks this way).
        """
        B, K, _ = hidden_states.shape
        Bc, C, _ = context.shape
        cos, sin = position_embeddings  # (B, C+K, d): positions of the new context, then of the block
        q = self.q_norm(self.q_proj(hidden_states).view(B, K, -1, self.head_dim)).transpose(1, 2)  # (B, nh, K, d)
        q = _rotate(q, cos[:, C:], sin[:, C:])
        k_block, v_block = self._kv(hidden_states, cos[:, C:], sin[:, C:])  # (B, nkv, K, d)
        k_ctx, v_ctx = self._kv(context, cos[:Bc, :C], sin[:Bc, :C])  # (Bc, nkv, C, d)
        k = torch.cat([k_ctx.expand(B, -1, -1, -1), k_block], dim=2)  # (B, nkv, C+K, d)
        v = torch.cat([v_ctx.expand(B, -1, -1, -1), v_block], dim=2)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        attend: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        out, _ = attend(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling, is_causal=False)
        return self.o_proj(out.reshape(B, K, -1))

    def _kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated, normed keys and values of x (B, T, H): two (B, nkv, T, d) tensors."""
        B, T, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, T, -1, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        return _rotate(k, cos, sin), v


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config: DFlashConfig, layer_idx: int):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, context, position_embeddings, attention_mask, cache) -> torch.Tensor:
        # The context skips input_layernorm: it was normalised once by `hidden_norm`.
        hidden_states = hidden_states + self.self_attn(
            self.input_layernorm(hidden_states), context, position_embeddings, attention_mask, cache
        )
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


def _load_config(folder: Path) -> DFlashConfig:
    """Read config.json in either our format (`model_type: dflash`) or z-lab's (`qwen3` + `dflash_config`)."""
    try:
        raw = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{folder / CONFIG_NAME} is not valid JSON ({err}); the checkpoint is corrupt.") from err
    if is_zlab_config(raw):
        return DFlashConfig.from_zlab_dict(raw)
    if raw.get("model_type") != DFlashConfig.model_type:
        raise ValueError(
            f"{folder} holds a {raw.get('model_type')!r} model, not a DFlash drafter (expected model_type 'dflash' or a "
            "z-lab config with 'dflash_config'). Did you pass the target instead of the drafter?"
        )
    return DFlashConfig.from_dict(raw)


class DFlashPreTrainedModel(PreTrainedModel):
    config_class = DFlashConfig
    config: DFlashConfig
    base_model_prefix = "dflash"
    main_input_name = "noise_embeds"
    supports_gradient_checkpointing = False
    _supports_sdpa = True
    _supports_attention_backend = True
    _no_split_modules = ["DFlashDecoderLayer"]


class DFlashDrafter(DFlashPreTrainedModel):
    """A DFlash block-diffusion drafter; see `DFlashConfig`. Borrows the target's embeddings and LM head."""

    def __init__(self, config: DFlashConfig):
        super().__init__(config)
        n, H = config.num_context_layers, config.hidden_size
        self.fc = nn.Linear(n * H, H, bias=False)
        self.hidden_norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList([DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        # (D,) int64 token ids the drafter may draft, frequency-ranked; saved in model.safetensors (like EAGLE-3's
        # d2t map). None: the full vocabulary (z-lab checkpoints).
        size = config.draft_vocab_size
        self.register_buffer("draft_vocab_ids", torch.zeros(size, dtype=torch.long) if size else None)
        if config.legacy_draft_vocab_ids is not None:
            self.set_draft_vocab(config.legacy_draft_vocab_ids)
        self.post_init()

    def set_draft_vocab(self, ids: torch.Tensor | list[int] | None) -> None:
        """Draft only from token `ids` (D,) from now on (None: the full vocabulary); saved with the weights."""
        device = self.fc.weight.device
        ids = None if ids is None else torch.as_tensor(ids, dtype=torch.long, device=device).flatten().clone()
        self.draft_vocab_ids = ids
        self.config.draft_vocab_size = None if ids is None else len(ids)
        self.config.legacy_draft_vocab_ids = None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Load our checkpoints and z-lab's (no remote code) from a folder or a Hub id; refuse partial weights."""
        folder = resolve_folder(
            pretrained_model_name_or_path, "DFlash drafter", (CONFIG_NAME,), kwargs.pop("revision", None)
        )
        config = kwargs.pop("config", None)
        config = copy.deepcopy(config) if isinstance(config, DFlashConfig) else _load_config(folder)
        kwargs.pop("trust_remote_code", None)
        want_info = kwargs.pop("output_loading_info", False)
        # An older folder lists the draft vocabulary in config.json: load the weights without the buffer (it is
        # not in the file), then adopt the list.
        legacy, config.legacy_draft_vocab_ids = config.legacy_draft_vocab_ids, None
        if legacy is not None:
            config.draft_vocab_size = None
        try:
            model, info = super().from_pretrained(
                folder, *model_args, config=config, output_loading_info=True, **kwargs
            )
        except (OSError, RuntimeError, ValueError, SafetensorError) as err:  # a truncated file raises the last
            raise OSError(f"Could not load DFlash drafter weights from {folder}: {err}") from err
        if legacy is not None:
            model.set_draft_vocab(legacy)
        if info["unexpected_keys"]:
            unexpected = sorted(info["unexpected_keys"])
            raise OSError(
                f"{folder} holds weights this drafter does not have: {unexpected[:5]}"
                f"{' ...' if len(unexpected) > 5 else ''}. It is another architecture (DFlash2's convolution, say) "
                "or another configuration; loading it without them would draft wrongly."
            )
        if info["missing_keys"]:
            missing = sorted(info["missing_keys"])
            raise OSError(
                f"{folder} lacks drafter weights {missing[:5]}{' ...' if len(missing) > 5 else ''}: the checkpoint is "
                "incomplete or was made for a different drafter configuration."
            )
        return (model, info) if want_info else model

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Hugging Face `save_pretrained`; a `config.draft_vocab_ids` list set by older code moves into the weights."""
        legacy = getattr(self.config, LEGACY_DRAFT_VOCAB_KEY, None)
        if legacy is not None:
            delattr(self.config, LEGACY_DRAFT_VOCAB_KEY)
            self.set_draft_vocab(legacy)
        return super().save_pretrained(save_directory, *args, **kwargs)

    def forward(
        self,
        noise_embeds: torch.Tensor,
        context_hidden_states: torch.Tensor,
        position_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """Denoise one block per row.

        noise_embeds (B, K, H): target embeddings of [anchor, mask, ..., mask].
        context_hidden_states (B or 1, C, n*H): target features (selected layers, concatenated) not in `cache`.
        position_ids (B, C+K): positions of the new context then the block; default continues after `cache`.
        attention_mask: None (everything visible), a (B, past+C+K) padding mask, or a (B, 1, K, past+C+K)
            boolean / additive mask (training packs many blocks into one pass this way).
        cache: a transformers `Cache` holding earlier context K/V; the caller crops the block K/V afterwards.
        Returns `last_hidden_state` (B, K, H) after the final norm; position i predicts the token at position i.
        """
        context = self.hidden_norm(self.fc(context_hidden_states))  # (B, C, H)
        B, K, _ = noise_embeds.shape
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + context.shape[1] + K, device=noise_embeds.device).expand(B, -1)
        hidden = noise_embeds * self.config.input_embedding_scale
        position_embeddings = self.rotary_emb(hidden, position_ids)
        mask = self._attention_bias(attention_mask, K, past + context.shape[1] + K, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, context, position_embeddings, mask, cache)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden), cache=cache)

    @staticmethod
    def _attention_bias(mask: torch.Tensor | None, q_len: int, kv_len: int, dtype: torch.dtype) -> torch.Tensor | None:
        """An additive (B, 1, K, KV) mask, or None when every key is visible (the decoding case)."""
        if mask is None:
            return None
        if mask.dim() == 2:
            if mask.shape[-1] != kv_len:
                raise ValueError(
                    f"attention_mask covers {mask.shape[-1]} keys but the drafter sees {kv_len} (cache + context + block)."
                )
            if bool(mask.all()):
                return None
            mask = mask[:, None, None, :].bool().expand(-1, 1, q_len, -1)
        if mask.dtype == torch.bool:
            return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
        return mask.to(dtype)

    def context_features(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Concatenate the target layers this drafter reads: (B, T, n*H) from a `hidden_states` tuple."""
        # hidden_states[0] is the embedding output, so decoder layer i is entry i + 1.
        return torch.cat([hidden_states[i + 1] for i in self.config.target_layer_ids], dim=-1)

    @property
    def hidden_state_indices(self) -> list[int]:
        """Entries of `hidden_states` the target must return (for `output_hidden_states=[...]`)."""
        return [i + 1 for i in self.config.target_layer_ids]

    @torch.no_grad()
    def draft(
        self,
        embed: nn.Module,
        lm_head: nn.Module,
        anchor: torch.LongTensor,
        context_hidden_states: torch.Tensor,
        block_size: int,
        cache: Cache,
        position_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Draft logits (B, block_size-1, V) for the positions after `anchor` (B, 1), given new context (B, C, n*H).

        Appends the new context K/V to `cache` and drops the block's K/V again, so the cache holds context only.
        A batch passes per-row `position_ids` (B, C+K) and a key mask `attention_mask` (B, past+C+K) (holes of
        rejected slots and of blocks shorter than K); one row needs neither.
        """
        mask_ids = torch.full(
            (anchor.shape[0], block_size - 1), self.config.mask_token_id, dtype=anchor.dtype, device=anchor.device
        )
        noise_embeds = embed(torch.cat([anchor, mask_ids], dim=1))  # (1, K, H)
        # The drafter runs in its own dtype whatever the target's (a bf16 drafter for a float32 target): drafts
        # only decide how many target tokens one verify pass confirms, never which.
        hidden = self(
            noise_embeds.to(self.dtype),
            context_hidden_states.to(self.dtype),
            position_ids=position_ids,
            attention_mask=attention_mask,
            cache=cache,
        ).last_hidden_state
        cache.crop(-block_size)
        hidden = hidden[:, 1:].to(lm_head.weight.dtype)  # (B, K-1, H)
        if self.draft_vocab_ids is None:
            return lm_head(hidden)
        # Only the drafter's vocabulary: reading the full head costs as much as a small target's forward on a CPU.
        ids, head = self.draft_head(lm_head)
        logits = torch.full(
            (*hidden.shape[:2], lm_head.weight.shape[0]), float("-inf"), dtype=hidden.dtype, device=hidden.device
        )
        # A verify-sized product (K-1 rows): on a CPU the small-row kernels make it several times cheaper.
        return logits.index_copy_(-1, ids, small_row_forward(head, hidden))

    def draft_head(self, lm_head: nn.Module) -> tuple[torch.Tensor, nn.Linear]:
        """(ids, head): the target head's rows for `draft_vocab_ids` (set) as a linear layer of their own, sliced once
        per head (a view would be re-read anyway). Kept in a tuple, so that it is no submodule and never saved."""
        vocab = self.draft_vocab_ids
        weight = lm_head.weight
        # `_version` counts in-place writes: `load_state_dict` refills the same ids tensor.
        key = (weight.data_ptr(), weight.dtype, weight.device, vocab.data_ptr(), vocab._version)
        if getattr(self, "_draft_head_key", None) != key:
            ids = vocab.to(weight.device)
            head = nn.Linear(weight.shape[1], len(ids), bias=False, device="meta")
            head.weight = nn.Parameter(weight.detach()[ids].contiguous(), requires_grad=False)
            self._draft_head_cache = (ids, head)
            self._draft_head_key = key
        return self._draft_head_cache
