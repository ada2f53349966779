"""Checks that turn bad input into a specific error (what is wrong, what to do) instead of a wrong answer."""

from __future__ import annotations

import torch

MAX_BLOCK_FACTOR = 4  # any block size up to 4x the drafter's training block size is accepted


def target_num_layers(target) -> int:
    return target.config.get_text_config().num_hidden_layers


def check_compatible(target, drafter) -> None:
    """Refuse a drafter made for another target: vocabulary, hidden size, depth, mask id."""
    cfg = drafter.config
    rows, hidden = target.get_input_embeddings().weight.shape
    name = getattr(target.config, "name_or_path", "the target")
    if cfg.hidden_size != hidden:
        raise ValueError(
            f"Drafter hidden size {cfg.hidden_size} != target hidden size {hidden} ({name}): this drafter was made for "
            "another target. Use a drafter trained for this target (or train one: `blockpilot train-drafter`)."
        )
    if cfg.vocab_size != rows or target.get_output_embeddings().weight.shape[0] != rows:
        raise ValueError(
            f"Drafter vocabulary size {cfg.vocab_size} != target embedding rows {rows} ({name}): target and drafter "
            "must share a tokenizer and embedding table."
        )
    depth = target_num_layers(target)
    if max(cfg.target_layer_ids) >= depth:
        raise ValueError(
            f"Drafter reads target layers {cfg.target_layer_ids} but the target has only {depth} layers (0..{depth - 1})."
        )
    if cfg.num_target_layers is not None and cfg.num_target_layers != depth:
        raise ValueError(
            f"Drafter was made for a {cfg.num_target_layers}-layer target; this target has {depth} layers."
        )
    if cfg.draft_vocab_ids is not None and not all(0 <= i < rows for i in cfg.draft_vocab_ids):
        raise ValueError(
            f"Drafter draft_vocab_ids reach beyond the target's {rows} embedding rows: made for another target."
        )
    if cfg.mask_token_id is None or not 0 <= cfg.mask_token_id < rows:
        raise ValueError(
            f"Drafter mask_token_id {cfg.mask_token_id} is not a row of the target's embedding table (0..{rows - 1})."
        )


def max_block_size(drafter) -> int:
    return MAX_BLOCK_FACTOR * drafter.config.block_size


def check_block_size(block_size, drafter) -> int:
    """Return `block_size` as an int in 1..4x the training block size, or raise."""
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block size must be an int, got {block_size!r} ({type(block_size).__name__}).")
    upper = max_block_size(drafter)
    if not 1 <= block_size <= upper:
        raise ValueError(
            f"block size {block_size} is out of range: use 1 (plain decoding) to {upper} "
            f"({MAX_BLOCK_FACTOR}x the drafter's training block size {drafter.config.block_size})."
        )
    return block_size


def check_generation_config(generation_config, input_ids: torch.Tensor) -> None:
    """Refuse what block speculative decoding cannot do exactly (beam search, several rows or sequences, ...)."""
    if generation_config.num_beams and generation_config.num_beams > 1:
        raise ValueError(
            "Beam search (num_beams > 1) cannot run with a DFlash drafter; use num_beams=1 or drop assistant_model."
        )
    if generation_config.num_return_sequences and generation_config.num_return_sequences > 1:
        raise ValueError(
            "num_return_sequences > 1 is not supported with a DFlash drafter; call generate once per sample."
        )
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"DFlash speculative decoding runs one request at a time, got a batch of {input_ids.shape[0]}: "
            "call generate per prompt (or drop assistant_model for batched plain generation)."
        )
    for flag in ("output_scores", "output_logits", "output_attentions", "output_hidden_states"):
        if getattr(generation_config, flag, False):
            raise ValueError(
                f"{flag}=True is not supported with a DFlash drafter; drop it (stats are in `out.blockpilot`)."
            )
    if generation_config.use_cache is False:
        raise ValueError("use_cache=False is not supported with a DFlash drafter: verification needs the KV cache.")


def strip_left_padding(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a single row into (left padding, tokens); masked positions elsewhere are refused."""
    if attention_mask is None or bool(attention_mask.all()):
        return input_ids, input_ids[:, :0]
    keep = attention_mask[0].bool()
    first = int(keep.nonzero()[0]) if keep.any() else input_ids.shape[1]
    if not bool(keep[first:].all()):
        raise ValueError("attention_mask has zeros after the first real token; only left padding is supported.")
    return input_ids[:, first:], input_ids[:, :first]
