"""Offline prompt sources (GSM8K, HumanEval, MT-Bench, ...) with fixed, disjoint train / policy / eval splits."""

from .prompts import (
    DATASETS,
    SPLITS,
    Prompt,
    chat_id,
    chat_input_ids,
    is_heldout,
    left_padded,
    load_jsonl_prompts,
    load_prompts,
    turn_id,
)

__all__ = [
    "DATASETS",
    "SPLITS",
    "Prompt",
    "chat_id",
    "chat_input_ids",
    "is_heldout",
    "left_padded",
    "load_jsonl_prompts",
    "load_prompts",
    "turn_id",
]
