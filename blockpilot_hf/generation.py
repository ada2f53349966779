"""`enable(model)`: `model.generate` gains `block_size` / `block_policy` and runs our engine for a DFlash drafter.

Integration goes through transformers' own `generate` with a callable `custom_generate`, so input preparation,
generation-config merging, logits processors and stopping criteria are exactly those of plain `generate`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch
from transformers import StoppingCriteriaList, StopStringCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .decoding.batch import batched_speculative_generate
from .decoding.engine import speculative_generate
from .decoding.stats import GenerationStats
from .drafter import DFlashDrafter
from .policy.resolve import resolve_block_policy
from .validation import (
    check_attention,
    check_batch_options,
    check_compatible,
    check_drafting_options,
    check_generation_config,
    check_target_cache,
    strip_left_padding,
)

logger = logging.getLogger(__name__)

_ENABLED = "_blockpilot_original_generate"
_CPU_KERNELS = "_blockpilot_cpu_kernels"


@dataclass
class BlockPilotGenerateOutput(GenerateDecoderOnlyOutput):
    """`GenerateDecoderOnlyOutput` plus `blockpilot`: the request's `GenerationStats`, or for a batch of several
    rows a list with one `GenerationStats` per row (in row order)."""

    blockpilot: GenerationStats | list[GenerationStats] | None = None


def enable(model, cpu_kernels: bool = True):
    """Return `model` (the same object) with a `generate` that accepts a `DFlashDrafter` as `assistant_model`,
    plus `block_size`, `block_policy`, `draft_sampling`, `prompt_lookup_num_tokens` (drafts copied from the
    text so far where it repeats, tried before the drafter at each step) and `tree_budget` (verify a tree of up
    to that many drafted nodes per step instead of one chain). Without a DFlash assistant it is plain
    `generate`. `cpu_kernels=False` runs our engine without its CPU kernels (`decoding/kernels.py`), to see what
    they add; calling `enable` again changes only this switch."""
    setattr(model, _CPU_KERNELS, cpu_kernels)
    if hasattr(model, _ENABLED):
        return model
    original = model.generate
    setattr(model, _ENABLED, original)

    @functools.wraps(original)
    def generate(*args, **kwargs):
        return generate_with_drafter(original, *args, **kwargs)

    model.generate = generate
    return model


def generate_with_drafter(
    generate,
    *args,
    assistant_model=None,
    block_size=None,
    block_policy=None,
    draft_sampling=False,
    tree_budget=None,
    streamer=None,
    **kwargs,
):
    """Call `generate` (transformers' own, bound to the target), routing a `DFlashDrafter` assistant to our engine.

    Shared by `enable()`'s wrapper and the Hub `custom_generate` entry point (hub_cards/custom_generate), so both
    accept the same arguments. Any other assistant, or none, goes to `generate` untouched.
    """
    if not isinstance(assistant_model, DFlashDrafter):
        if block_size is not None or block_policy is not None or tree_budget is not None:
            raise ValueError("`block_size` / `block_policy` / `tree_budget` need a DFlashDrafter as `assistant_model`.")
        return generate(*args, assistant_model=assistant_model, streamer=streamer, **kwargs)
    if kwargs.get("speculation_type") == "dflash":
        ours = {"prompt_lookup_num_tokens": kwargs.get("prompt_lookup_num_tokens"), "tree_budget": tree_budget}
        if any(ours.values()):
            names = " / ".join(f"`{name}`" for name, value in ours.items() if value)
            raise ValueError(f"{names} with a DFlash drafter run on blockpilot's engine only; drop `speculation_type`.")
        return _generate_in_transformers(generate, args, assistant_model, block_size, block_policy, streamer, kwargs)
    return generate(
        *args,
        custom_generate=dflash_decoding,
        blockpilot_drafter=assistant_model,
        blockpilot_block_size=block_size,
        blockpilot_block_policy=block_policy,
        blockpilot_draft_sampling=draft_sampling,
        blockpilot_tree_budget=tree_budget,
        blockpilot_streamer=streamer,
        blockpilot_tokenizer=kwargs.pop("tokenizer", None),
        blockpilot_stop_strings=kwargs.pop("stop_strings", None),
        blockpilot_lookup_tokens=kwargs.pop("prompt_lookup_num_tokens", None) or 0,
        **kwargs,
    )


def _generate_in_transformers(original, args, drafter, block_size, block_policy, streamer, kwargs):
    """transformers' own DFlash loop (`speculation_type="dflash"`), optionally at a given fixed block size."""
    if block_policy is not None:
        raise ValueError("`block_policy` runs on blockpilot's engine only; drop `speculation_type='dflash'` to use it.")
    trained = drafter.config.block_size
    drafter.config.block_size = block_size or trained
    try:
        return original(*args, assistant_model=drafter, streamer=streamer, **kwargs)
    finally:
        drafter.config.block_size = trained


def dflash_decoding(
    model,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria: StoppingCriteriaList,
    generation_config,
    blockpilot_drafter: DFlashDrafter,
    blockpilot_block_size=None,
    blockpilot_block_policy=None,
    blockpilot_draft_sampling: bool = False,
    blockpilot_tree_budget: int | None = None,
    blockpilot_streamer=None,
    blockpilot_tokenizer=None,
    blockpilot_stop_strings=None,
    blockpilot_lookup_tokens: int = 0,
    **model_kwargs,
):
    """The decoding method transformers calls after preparing inputs (`custom_generate` callable contract)."""
    drafter = blockpilot_drafter
    check_generation_config(generation_config, input_ids)
    check_compatible(model, drafter)
    check_target_cache(model)
    check_attention(model, drafter)
    if drafter.dtype != model.dtype:
        logger.info(
            "Drafter in %s, target in %s: the drafter runs in its own dtype (inputs and outputs cast).",
            drafter.dtype,
            model.dtype,
        )
    if blockpilot_stop_strings:
        if blockpilot_tokenizer is None:
            raise ValueError("`stop_strings` needs the tokenizer: pass `tokenizer=tokenizer` to generate.")
        stopping_criteria.append(StopStringCriteria(blockpilot_tokenizer, blockpilot_stop_strings))
    check_drafting_options(model, blockpilot_tree_budget, blockpilot_draft_sampling, blockpilot_lookup_tokens)
    temperature = float(generation_config.temperature or 1.0) if generation_config.do_sample else 0.0
    draft = resolve_block_policy(
        blockpilot_block_policy,
        blockpilot_block_size,
        drafter,
        model,
        blockpilot_draft_sampling,
        temperature,
        blockpilot_tree_budget,
        blockpilot_lookup_tokens,
    )
    common = dict(
        draft=draft,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
        max_length=generation_config.max_length,
        do_sample=bool(generation_config.do_sample),
        cpu_kernels=getattr(model, _CPU_KERNELS, True),
    )
    attention_mask = model_kwargs.get("attention_mask")
    if input_ids.shape[0] > 1:  # several rows: one batch, `stats` a list with one entry per row
        check_batch_options(
            model,
            blockpilot_streamer,
            blockpilot_tree_budget,
            blockpilot_draft_sampling,
            blockpilot_lookup_tokens,
            logits_processor,
        )
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        sequences, stats = batched_speculative_generate(
            model, drafter, input_ids, mask, pad_token_id=_pad_token_id(generation_config), **common
        )
    else:
        input_ids, padding = strip_left_padding(input_ids, attention_mask)
        sequences, stats = speculative_generate(
            model,
            drafter,
            input_ids,
            draft_sampling=blockpilot_draft_sampling,
            streamer=blockpilot_streamer,
            padding=padding,
            **common,
        )
    if generation_config.return_dict_in_generate:
        return BlockPilotGenerateOutput(sequences=sequences, blockpilot=stats)
    return sequences


def sampling_kwargs(temperature: float, top_k: int = 0, top_p: float = 1.0) -> dict:
    """`generate` arguments that decode greedily at temperature 0 and otherwise sample at `temperature` with these
    top-k and top-p (by default the full distribution, whatever the model's generation config sets)."""
    if temperature > 0:
        return dict(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
    return dict(do_sample=False)


def default_sampling(generation_config) -> tuple[float, int, float] | None:
    """(temperature, top_k, top_p) a model samples with when `generate` gets no sampling arguments (Qwen3's
    generation config: 0.6, 20, 0.95; an unset top-k or top-p is off), or None when it decodes greedily."""
    if not generation_config.do_sample:
        return None
    temperature = generation_config.temperature
    return (
        (1.0 if temperature is None else float(temperature)),
        generation_config.top_k or 0,
        generation_config.top_p or 1.0,
    )


def _pad_token_id(generation_config) -> int:
    """The id plain `generate` writes after a row's end: the pad token, else the first EOS id."""
    if generation_config.pad_token_id is not None:
        return int(generation_config.pad_token_id)
    eos = generation_config.eos_token_id
    return int((eos[0] if isinstance(eos, list) else eos) if eos is not None else 0)
