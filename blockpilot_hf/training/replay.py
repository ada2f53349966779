"""Speculative decoding replayed on a known answer, without decoding it again.

At T=0 every draft shape produces the same tokens, the target's greedy answer, so how many drafts a step
accepts depends only on the position the step starts from. One teacher-forced target pass over the answer gives
the drafter's context at every position, one batched drafter pass per block size drafts at every position at
once, and prompt lookup needs the text alone. Walking the answer with a shape's rules then yields the acceptance
lengths that decoding with that shape records, for the cost of one target pass instead of one per step.

The same walk holds at T > 0 on a sampled answer. The engine's default drafts are deterministic (argmax, or a
copy), and its point-mass rule draws the target's own token at each position and accepts while it equals the
draft. Decoding with any such shape therefore commits a sample of the target's distribution, and each step's
length is the drafts' leading matches with what it committed. So replaying every shape on one plain sampled
answer gives acceptance lengths distributed exactly as sampled decoding with that shape records them.

Drafter validation replays chains on held-out answers; `blockpilot collect --replay` replays every candidate
shape of a policy on its prompts.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..decoding.lookup import lookup_draft
from ..decoding.shape import DraftShape
from .drafter.blocks import build_blocks

ANCHOR_CHUNK = 32  # blocks per drafter forward: each sees the whole context, so memory grows with the sequence


def block_logits(drafter, embed, head: torch.Tensor, features, tokens, anchors, block_size: int):
    """Draft logits (a, K-1, V') of blocks anchored at `anchors` (a,) on teacher-forced `features` (S, n*H), and
    their batch; `head` (V', H) are the LM-head rows the drafter drafts from."""
    batch = build_blocks(tokens, tokens, anchors, block_size, drafter.config.mask_token_id, response_start=0)
    noise = embed(batch.block_ids).to(drafter.dtype)  # (a, K, H); the drafter runs in its own dtype, as it decodes
    hidden = drafter(
        noise, features[None].to(drafter.dtype), position_ids=batch.position_ids, attention_mask=batch.attention_mask
    ).last_hidden_state
    return hidden[:, 1:].to(head.dtype) @ head.T, batch


@torch.no_grad()
def draft_matches(
    drafter, embed, head: torch.Tensor, vocab_ids: torch.Tensor | None, features, tokens, anchors, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """For blocks of `block_size` anchored at `anchors` (a,) of `tokens` (S,): how many leading argmax drafts equal
    the tokens that follow (a,), and the first draft's logits (a, V'). `vocab_ids` (V',) maps head rows to token
    ids (None: all). Drafts past the end of `tokens` never match."""
    matched, first = [], []
    for chunk in anchors.split(ANCHOR_CHUNK):
        logits, batch = block_logits(drafter, embed, head, features, tokens, chunk, block_size)
        best = logits.argmax(-1)  # (a, K-1)
        drafts = best if vocab_ids is None else vocab_ids[best]
        matched.append((drafts == batch.labels).long().cumprod(dim=1).sum(dim=1))  # labels are -100 past the end
        first.append(logits[:, 0].float())
    return torch.cat(matched), torch.cat(first)


def walk(start: int, end: int, accepted_at: Callable[[int], int]) -> list[int]:
    """Acceptance lengths of decoding up to position `end` (exclusive) from a committed token at `start`: a step
    whose last committed token is at p accepts `accepted_at(p)` drafts and adds the target's own token."""
    lengths, p = [], start
    while p < end - 1:
        accepted = accepted_at(p)
        lengths.append(accepted + 1)
        p += accepted + 1
    return lengths


def leading_matches(drafts: list[int], tokens: torch.Tensor, after: int) -> int:
    """How many of `drafts` equal `tokens` from position `after` + 1 on, before the first difference."""
    n = 0
    for draft, token in zip(drafts, tokens[after + 1 : after + 1 + len(drafts)].tolist(), strict=False):
        if draft != token:
            break
        n += 1
    return n


def replay_shape(
    shape: DraftShape, tokens: torch.Tensor, start: int, max_length: int, chain_matches: Callable[[int, int], int]
) -> list[int]:
    """Acceptance lengths decoding with `shape` records on `tokens` (S,), a plain (greedy or sampled) answer whose
    first generated token is at `start`, under the length limit `max_length` (prompt + max_new_tokens).

    As the engine does: a step copies up to `lookup_tokens` tokens when the text's last n-gram recurred, else
    drafts a chain of min(block size, room) tokens (`chain_matches(p, k)`: matching drafts of a block of k at p).
    Trees are not replayed (their acceptance depends on the drafter's whole distribution: decode them). Drafts
    past the answer's end never match, so a last step cut short by EOS may count fewer accepted drafts than
    decoding, which also counts drafts the target would have accepted after EOS."""
    if shape.tree_budget:
        raise ValueError(f"Draft shape {shape}: trees are not replayed; collect them without --replay.")

    def accepted_at(p: int) -> int:
        room = max_length - p - 1  # tokens the sequence may still grow by
        if shape.lookup_tokens and room > 1:
            copied = lookup_draft(tokens[: p + 1], min(shape.lookup_tokens, room - 1))
            if copied:
                return leading_matches(copied, tokens, p)
        k = min(shape.block_size, room)
        return chain_matches(p, k) if k > 1 else 0

    return walk(start, len(tokens), accepted_at)
