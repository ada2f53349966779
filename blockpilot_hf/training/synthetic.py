"""A synthetic BlockPilot task whose right answer is known, built from tiny random models in seconds.

Two kinds of prompts: "easy" prompts draw their tokens from one small range of the vocabulary and get a drafter
that always drafts the target's own continuation (acceptance grows with the block, so the largest size wins);
"hard" prompts draw from another range and get a drafter that is always wrong (tau = 1 at every size, so plain
decoding, size 1, wins). A policy must read the kind off the prefill features. Used by tests and benchmarks.
"""

from __future__ import annotations

import random

import torch

from ..bench.oracle import OracleDrafter
from ..drafter import DFlashConfig, DFlashDrafter
from ..generation import enable
from ..policy.config import CostModel
from .collect import CollectItem

VOCAB = 64
HIDDEN = 32
MASK_ID = VOCAB - 1
KIND_TOKENS = {
    "easy": (1, 12),
    "hard": (40, 51),
}  # token id ranges (inclusive): the kind is in the prompt itself
# A cost model with the shape measured on a real CPU (verifying 8 tokens ~1.4x one) without timing noise.
SYNTHETIC_COST = CostModel([1, 2, 4, 8], [1.0e-3, 1.15e-3, 1.25e-3, 1.45e-3], "synthetic", "synthetic")


def tiny_pair(seed: int = 0, block_size: int = 8):
    """(target, drafter): a 4-layer random Qwen3 target (enabled) and a 1-layer drafter reading 2 of its layers."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
    )
    target = Qwen3ForCausalLM(config)
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)  # sharper distributions: fewer greedy ties
    target.generation_config.eos_token_id = None
    target.generation_config.pad_token_id = 0
    target = enable(target.eval())
    drafter_config = DFlashConfig(
        hidden_size=HIDDEN,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=VOCAB,
        block_size=block_size,
        mask_token_id=MASK_ID,
        num_target_layers=4,
        target_layer_ids=[0, 3],
    )
    return target, DFlashDrafter(drafter_config).eval()


def synthetic_items(count: int, seed: int, length: int = 12, prefix: str = "syn") -> list[CollectItem]:
    """`count` prompts alternating easy / hard; the kind is also the item's `source`."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        kind = "easy" if i % 2 == 0 else "hard"
        low, high = KIND_TOKENS[kind]
        items.append(
            CollectItem(f"{prefix}/{seed}/{i}", kind, [rng.randint(low, high) for _ in range(length)])
        )
    return items


def best_size(kind: str, sizes: list[int]) -> int:
    """The known right answer: the largest size for easy prompts, plain decoding for hard ones."""
    return max(sizes) if kind == "easy" else 1


def oracle_factory(drafter: DFlashDrafter):
    """A per-prompt drafter factory for `collect`: perfect drafts on easy prompts, always wrong on hard ones."""

    def make(item: CollectItem, reference: torch.Tensor) -> OracleDrafter:
        mistakes = range(reference.shape[1] + 64) if item.source == "hard" else ()
        return OracleDrafter.from_drafter(drafter, reference, mistakes)

    return make
