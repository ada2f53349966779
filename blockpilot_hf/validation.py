"""Checks that turn bad input into a specific error (what is wrong, what to do) instead of a wrong answer.

Every compatibility check lives here: target + drafter (`check_compatible`), target cache (`check_target_cache`),
attention implementations (`check_attention`), policy + target + drafter (`check_policy_compatible`,
`check_policy_sizes`), policy + collected records (`check_policy_fits_collection`), the inputs of one `generate`
call, and what a batch of several rows cannot do (`check_batch_options`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from .decoding.row_attention import ROW_ATTENTION

MAX_BLOCK_FACTOR = 4  # any block size up to 4x the drafter's training block size is accepted


def target_num_layers(target) -> int:
    return target.config.get_text_config().num_hidden_layers


def target_layer_types(target) -> list[str]:
    """The attention type of each of the target's layers ("full_attention", "sliding_attention", ...)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    return get_layer_types_and_kwargs(target.config.get_text_config(decoder=True))[0]


def check_compatible(target, drafter) -> None:
    """Refuse a drafter made for another target (vocabulary, hidden size, depth, mask id) or on another device.
    Another dtype is fine: the drafter runs in its own and its drafts are verified by the target in the target's."""
    cfg = drafter.config
    rows, hidden = target.get_input_embeddings().weight.shape
    name = getattr(target.config, "name_or_path", "the target")
    if drafter.device != target.device:
        raise ValueError(
            f"The drafter is on {drafter.device} but the target is on {target.device}: move it with "
            "`drafter.to(target.device)`."
        )
    if cfg.hidden_size != hidden:
        raise ValueError(
            f"Drafter hidden size {cfg.hidden_size} != target hidden size {hidden} ({name}): this drafter was made for "
            "another target. Use a drafter trained for this target (or train one: `blockpilot train-drafter`)."
        )
    if cfg.vocab_size != rows:
        raise ValueError(
            f"Drafter vocabulary size {cfg.vocab_size} != target embedding rows {rows} ({name}): target and drafter "
            "must share a tokenizer and embedding table."
        )
    head_rows = target.get_output_embeddings().weight.shape[0]
    if head_rows != rows:  # drafts come from the target's head: a wider one drafts ids its embedding lacks
        raise ValueError(
            f"The target's output head has {head_rows} rows but its embedding table {rows} ({name}): drafts would "
            "name tokens the target cannot read back. Speculative decoding needs a head as wide as the embedding."
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
    ids = drafter.draft_vocab_ids  # (D,) or None
    if ids is not None and len(ids) and not (int(ids.min()) >= 0 and int(ids.max()) < rows):
        raise ValueError(
            f"Drafter draft_vocab_ids reach beyond the target's {rows} embedding rows: made for another target."
        )
    if cfg.mask_token_id is None or not 0 <= cfg.mask_token_id < rows:
        raise ValueError(
            f"Drafter mask_token_id {cfg.mask_token_id} is not a row of the target's embedding table (0..{rows - 1})."
        )


def check_target_cache(target) -> None:
    """Refuse a target whose cache cannot be rolled back to the committed prefix after a rejected draft.

    Full and sliding-window attention keep one K/V entry per token, so cropping the rejected tokens is exact
    (sliding-window layers record their past until each crop). Linear-attention / convolution states fold every
    token into one state that cannot be un-applied, so a rejected draft would leak into later tokens."""
    layer_types = target_layer_types(target)
    stateful = sorted({t for t in layer_types if t in ("conv", "linear_attention", "hybrid", "hybrid_sliding")})
    if stateful:
        name = getattr(target.config, "name_or_path", "") or type(target).__name__
        raise ValueError(
            f"The target {name} has {', '.join(stateful)} layers, whose recurrent state cannot be rolled back after a rejected "
            "draft, so DFlash speculative decoding cannot be lossless on it. Call generate without assistant_model."
        )


# Attention implementations the engine is proven with: they take its 4D masks (a tree's additive mask, a batch's
# per-row key masks with holes) as given. ROW_ATTENTION is "sdpa" row by row, switched on inside the engine.
SUPPORTED_ATTENTION = ("eager", "sdpa", ROW_ATTENTION)


def check_attention(target, drafter) -> None:
    """Refuse a target or drafter whose attention implementation is not in SUPPORTED_ATTENTION: flash, flex and
    paged kernels do not take the engine's 4D float / bool masks, and would fail mid-decode or decode wrongly."""
    for role, model in (("target", target), ("drafter", drafter)):
        found = model.config.get_text_config(decoder=True)._attn_implementation
        if found not in SUPPORTED_ATTENTION:
            raise ValueError(
                f"The {role} runs attn_implementation={found!r}, which cannot take the tree and per-row attention "
                "masks of DFlash decoding (only 'eager' and 'sdpa' can). Switch it with "
                f'`{role}.set_attn_implementation("sdpa")`, or load it with attn_implementation="sdpa".'
            )


def check_drafting_options(target, tree_budget: int | None, draft_sampling: bool, lookup_tokens: int) -> None:
    """Refuse drafting options that are out of range or do not combine."""
    if not isinstance(lookup_tokens, int) or lookup_tokens < 0:
        raise ValueError(f"prompt_lookup_num_tokens must be an int >= 0, got {lookup_tokens!r}.")
    if tree_budget is None:
        return
    if not isinstance(tree_budget, int) or tree_budget < 1:
        raise ValueError(f"tree_budget must be an int >= 1 (drafted nodes verified per step), got {tree_budget!r}.")
    if draft_sampling:
        raise ValueError(
            "tree_budget builds its tree from the drafter's most likely tokens and accepts with the exact point-mass "
            "rule; it cannot combine with draft_sampling=True. Drop one of them (sampling with do_sample=True works "
            "with trees)."
        )
    layer_types = target_layer_types(target)
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(
            f"tree_budget needs full-attention layers only (this target has {sorted(set(layer_types))}): a tree's "
            "verified nodes are gathered out of the cache, which sliding windows do not allow. Use a chain "
            "(no tree_budget) on this target."
        )


# ---- policy ------------------------------------------------------------------------------------------------------
def check_policy_compatible(config, target, drafter) -> None:
    """Refuse a target/drafter a policy head (`BlockPolicyConfig`) cannot read (hidden size, layer ids, vocabulary);
    warn when it was trained for other checkpoints of the same shape."""
    rows, hidden = target.get_input_embeddings().weight.shape
    fix = "Use a policy trained for this target and drafter (or train one: `blockpilot collect` + `train-policy`)."
    if hidden != config.hidden_size:
        raise ValueError(
            f"Policy {config.name!r} was made for hidden size {config.hidden_size}, the target has {hidden}. {fix}"
        )
    if list(drafter.config.target_layer_ids) != list(config.target_layer_ids):
        raise ValueError(
            f"Policy {config.name!r} reads target layers {config.target_layer_ids}, the drafter reads "
            f"{list(drafter.config.target_layer_ids)}. {fix}"
        )
    if rows != config.vocab_size:
        raise ValueError(
            f"Policy {config.name!r} was made for a vocabulary of {config.vocab_size}, the target has {rows}. {fix}"
        )
    for what, recorded, actual in (
        ("target", config.target_id, getattr(target.config, "name_or_path", "")),
        ("drafter", config.drafter_id, getattr(drafter.config, "name_or_path", "")),
    ):
        # Compare the last path component: a Hub id "org/name" and a local copy ".../name" are the same model.
        if recorded and actual and Path(str(recorded)).name != Path(str(actual)).name:
            warnings.warn(
                f"Policy {config.name!r} was trained for {what} {recorded!r} but runs with {actual!r}; shapes match, "
                "so it runs, but its choices may be off. Retrain or recalibrate for best results.",
                UserWarning,
                stacklevel=3,
            )


def check_policy_sizes(config, target, drafter, draft_sampling: bool = False) -> None:
    """Refuse a policy that can choose a block size this drafter refuses, or a tree / lookup shape this target or
    these options cannot run (see `check_shape`)."""
    for candidate in config.candidates:
        try:
            check_shape(candidate, target, drafter, draft_sampling)
        except ValueError as err:
            raise ValueError(f"Policy {config.name!r} can choose {candidate}, which cannot run here: {err}") from err


def check_policy_fits_collection(config, meta, collect_dir) -> None:
    """Refuse collected records (`CollectMeta`) of another target/drafter, or without runs at the policy's sizes."""
    if meta.hidden_size != config.hidden_size or list(meta.target_layer_ids) != list(config.target_layer_ids):
        raise ValueError(
            f"{collect_dir} was collected for another target/drafter than policy {config.name!r} (hidden size "
            f"{meta.hidden_size} vs {config.hidden_size}, target layers {meta.target_layer_ids} vs "
            f"{config.target_layer_ids})."
        )
    missing = set(config.candidates) - set(meta.candidates)
    if missing:
        raise ValueError(
            f"{collect_dir} has no runs with {', '.join(map(str, sorted(missing)))}, which the policy can choose; "
            "collect with them (--block-sizes / --shapes)."
        )


# ---- one generate call -------------------------------------------------------------------------------------------
def max_block_size(drafter) -> int:
    return MAX_BLOCK_FACTOR * drafter.config.block_size


def check_shape(shape, target, drafter, draft_sampling: bool = False):
    """Return a chooser's answer (a block size, a `DraftShape` or a `StepPlanner`) once its block size is in range
    and its tree / lookup options can run on this target with these options; raise otherwise."""
    from .decoding.planner import StepPlanner
    from .decoding.shape import DraftShape

    if isinstance(shape, StepPlanner):
        check_block_size(shape.max_depth + 1, drafter)
        check_drafting_options(target, shape.max_nodes, draft_sampling, shape.max_lookup)
        return shape
    if not isinstance(shape, DraftShape):
        return check_block_size(shape, drafter)
    check_block_size(shape.block_size, drafter)
    check_drafting_options(target, shape.tree_budget or None, draft_sampling, shape.lookup_tokens)
    return shape


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
    """Refuse what block speculative decoding cannot do exactly (beam search, several sequences per prompt, ...)."""
    if generation_config.num_beams and generation_config.num_beams > 1:
        raise ValueError(
            "Beam search (num_beams > 1) cannot run with a DFlash drafter; use num_beams=1 or drop assistant_model."
        )
    if generation_config.num_return_sequences and generation_config.num_return_sequences > 1:
        raise ValueError(
            "num_return_sequences > 1 is not supported with a DFlash drafter; call generate once per sample."
        )
    for flag in ("output_scores", "output_logits", "output_attentions", "output_hidden_states"):
        if getattr(generation_config, flag, False):
            raise ValueError(
                f"{flag}=True is not supported with a DFlash drafter; drop it (stats are in `out.blockpilot`)."
            )
    if generation_config.use_cache is False:
        raise ValueError("use_cache=False is not supported with a DFlash drafter: verification needs the KV cache.")


# Logits processors that read a row's index in the batch: refused in batches, which score each row alone.
ROW_INDEX_PROCESSORS = {"PrefixConstrainedLogitsProcessor"}


def check_batch_options(
    target, streamer, tree_budget: int | None, draft_sampling: bool, lookup_tokens: int, logits_processor=()
) -> None:
    """A batch of several rows decodes chains of argmax drafts, scoring each row alone; refuse what only one row
    can do, saying so."""
    by_index = [type(p).__name__ for p in logits_processor if type(p).__name__ in ROW_INDEX_PROCESSORS]
    if by_index:
        raise ValueError(
            f"{', '.join(by_index)} tells rows apart by their index in the batch (prefix_allowed_tokens_fn's "
            "batch_id), which a batch with a DFlash drafter does not keep; call generate per prompt for it."
        )
    asked = {
        "streamer": streamer is not None,
        "tree_budget": bool(tree_budget),
        "draft_sampling": draft_sampling,
        "prompt_lookup_num_tokens": bool(lookup_tokens),
    }
    if any(asked.values()):
        names = ", ".join(f"`{name}`" for name, on in asked.items() if on)
        raise ValueError(f"{names} need a batch of one row with a DFlash drafter; call generate per prompt for them.")
    if any(t != "full_attention" for t in target_layer_types(target)):
        raise ValueError(
            "Batches of several rows need a target without sliding-window attention (rejected drafts stay in its "
            "cache as masked holes); call generate per prompt for this target."
        )


def strip_left_padding(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a single row (1, T) into (left padding (1, P), tokens (1, T - P)); masked positions elsewhere, an
    all-zero mask and an empty prompt are refused."""
    if input_ids.shape[1] == 0:
        raise ValueError(
            "The prompt is empty (input_ids of shape (1, 0)): DFlash decoding needs at least one prompt token to "
            "draft from. Start the prompt with a token, e.g. the tokenizer's BOS token or a chat template."
        )
    if attention_mask is None or bool(attention_mask.all()):
        return input_ids, input_ids[:, :0]
    keep = attention_mask[0].bool()
    if not bool(keep.any()):
        raise ValueError(
            "attention_mask is all zeros: the prompt has no real token. Pass a mask with 1 for every prompt token "
            "(or no attention_mask at all)."
        )
    first = int(keep.nonzero()[0])
    if not bool(keep[first:].all()):
        raise ValueError("attention_mask has zeros after the first real token; only left padding is supported.")
    return input_ids[:, first:], input_ids[:, :first]
