"""The DFlash training batch: many anchored blocks of one sequence, denoised in a single drafter forward.

Block a starts at anchor position p_a: its first token is the clean token at p_a, the others are the mask.
Its queries see the context (target features) strictly before p_a and every position of their own block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BlockBatch:
    """Blocks form the batch; they share the sequence's context (batch 1 in the drafter's forward)."""

    block_ids: torch.Tensor  # (A, K) anchor token then K-1 mask ids
    position_ids: torch.Tensor  # (A, S + K) context positions 0..S-1, then the block's positions
    attention_mask: torch.Tensor  # (A, 1, K, S + K) bool, True = visible
    labels: torch.Tensor  # (A, K-1) tokens at p+1..p+K-1, -100 beyond the sequence or outside the response
    anchors: torch.Tensor  # (A,)


def sample_anchors(response_start: int, length: int, max_anchors: int, generator: torch.Generator) -> torch.Tensor:
    """Sorted anchor positions p with p and p+1 inside the response (p in [response_start - 1, length - 2])."""
    first, last = max(response_start - 1, 1), length - 2
    candidates = torch.arange(first, last + 1)
    if len(candidates) > max_anchors:
        candidates = candidates[torch.randperm(len(candidates), generator=generator)[:max_anchors]].sort().values
    return candidates


def build_blocks(
    tokens: torch.Tensor,
    targets: torch.Tensor,
    anchors: torch.Tensor,
    block_size: int,
    mask_id: int,
    response_start: int,
) -> BlockBatch:
    """Lay out the blocks of `tokens` (S,) anchored at `anchors` (A,), with the DFlash block attention mask.
    Labels come from `targets` (S,): what the target predicts at each position. Everything is laid out on
    `tokens.device`, so blocks are built where the drafter trains."""
    device = tokens.device
    S, A, K = len(tokens), len(anchors), block_size
    anchors, targets = anchors.to(device), targets.to(device)
    positions = anchors[:, None] + torch.arange(K, device=device)  # (A, K)
    block_ids = torch.full((A, K), mask_id, dtype=tokens.dtype, device=device)
    block_ids[:, 0] = tokens[anchors]
    label_pos = positions[:, 1:]  # (A, K-1)
    labels = torch.where(label_pos < S, targets[label_pos.clamp(max=S - 1)], torch.full_like(label_pos, -100))
    labels[label_pos < response_start] = -100
    sees_context = (torch.arange(S, device=device)[None, :] < anchors[:, None])[:, None, None, :].expand(A, 1, K, S)
    sees_block = torch.ones((A, 1, K, K), dtype=torch.bool, device=device)
    return BlockBatch(
        block_ids=block_ids,
        position_ids=torch.cat([torch.arange(S, device=device).expand(A, S), positions], dim=1),
        attention_mask=torch.cat([sees_context, sees_block], dim=-1),
        labels=labels,
        anchors=anchors,
    )


def decay_weights(block_size: int, gamma: float) -> torch.Tensor:
    """Loss weight of block position k = 1..K-1: exp(-(k-1)/gamma), normalised to sum to 1."""
    w = torch.exp(-torch.arange(block_size - 1, dtype=torch.float32) / gamma)
    return w / w.sum()
