"""Speculative decoding replayed on a known answer, without decoding it again.

At T=0 every draft shape produces the same tokens, the target's greedy answer, so how many drafts a step
accepts depends only on the position the step starts from. One teacher-forced target pass over the answer gives
the drafter's context at every position, one batched drafter pass per block size drafts at every position at
once (the argmax chain, and the top tokens a tree grows from), and prompt lookup needs the text alone. Walking
the answer with a shape's rules then yields the acceptance lengths that decoding with that shape records, for
the cost of one target pass instead of one per step.

The same walk holds at T > 0 on a sampled answer. The engine's default drafts are deterministic (argmax chains,
trees of the drafter's best continuations, copies), and its point-mass rule draws the target's own token at
each position and accepts while it equals a draft (a child, in a tree). Decoding with any such shape therefore
commits a sample of the target's distribution, and each step's length is how far its drafts follow what it
committed. So replaying every shape on one plain sampled answer gives acceptance lengths distributed exactly as
sampled decoding with that shape records them.

Drafter validation replays chains on held-out answers; `blockpilot collect --replay` replays every candidate
shape of a policy on its prompts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NamedTuple

import torch

from ..decoding.lookup import lookup_draft
from ..decoding.shape import DraftShape
from ..decoding.tree import DraftTree, add_branch
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


class BlockDrafts(NamedTuple):
    """What a drafter drafts in blocks anchored at `a` positions of a known answer."""

    matched: torch.Tensor  # (a,) leading argmax drafts equal to the answer's next tokens
    first: torch.Tensor  # (a, V') the first draft's logits
    top_logp: torch.Tensor | None  # (a, K-1, top_k) each position's best log-probs, best first (None: not asked)
    top_ids: torch.Tensor | None  # (a, K-1, top_k) their token ids


@torch.no_grad()
def draft_matches(
    drafter,
    embed,
    head: torch.Tensor,
    vocab_ids: torch.Tensor | None,
    features,
    tokens,
    anchors,
    block_size: int,
    top_k: int = 0,
) -> BlockDrafts:
    """For blocks of `block_size` anchored at `anchors` (a,) of `tokens` (S,): how many leading argmax drafts equal
    the tokens that follow, the first draft's logits, and with `top_k` > 0 each position's top-k log-probs and
    token ids (what a draft tree grows from). `vocab_ids` (V',) maps head rows to token ids (None: all). Drafts
    past the end of `tokens` never match."""
    matched, first, top_logp, top_ids = [], [], [], []
    for chunk in anchors.split(ANCHOR_CHUNK):
        logits, batch = block_logits(drafter, embed, head, features, tokens, chunk, block_size)
        best = logits.argmax(-1)  # (a, K-1)
        drafts = best if vocab_ids is None else vocab_ids[best]
        matched.append((drafts == batch.labels).long().cumprod(dim=1).sum(dim=1))  # labels are -100 past the end
        first.append(logits[:, 0].float())
        if top_k:
            logp = torch.log_softmax(logits.float(), dim=-1)
            values, rows = logp.topk(min(top_k, logp.shape[-1]), dim=-1)
            top_logp.append(values)
            top_ids.append(rows if vocab_ids is None else vocab_ids[rows])
    if not top_k:
        return BlockDrafts(torch.cat(matched), torch.cat(first), None, None)
    return BlockDrafts(torch.cat(matched), torch.cat(first), torch.cat(top_logp), torch.cat(top_ids))


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


def tree_matches(tree: DraftTree, tokens: torch.Tensor, after: int) -> int:
    """How deep `tree` follows `tokens` from position `after` + 1 on: the accepted nodes of the point-mass rule
    when the target's own tokens are those."""
    n, node = 0, 0
    for token in tokens[after + 1 :].tolist():
        node = tree.children(node).get(token)
        if node is None:
            break
        n += 1
    return n


class ReplayedSteps(NamedTuple):
    """The steps of one replayed run, as `GenerationStats` records them."""

    acceptance_lengths: list[int]  # tokens committed per step (accepted drafts + 1)
    copied: list[int]  # drafts each step copied by prompt lookup (0: the drafter's drafts, or none)


def replay_shape(
    shape: DraftShape,
    tokens: torch.Tensor,
    start: int,
    max_length: int,
    chain_matches: Callable[[int, int], int],
    tree_at: Callable[[int, int, int], DraftTree] | None = None,
) -> ReplayedSteps:
    """The steps decoding with `shape` records on `tokens` (S,), a plain (greedy or sampled) answer whose first
    generated token is at `start`, under the length limit `max_length` (prompt + max_new_tokens).

    As the engine does: a chain step copies up to `lookup_tokens` tokens when the text's last n-gram recurred,
    else drafts a chain of k = min(block size, room) tokens (`chain_matches(p, k)`: matching drafts of a block of
    k at p); a tree step grows the drafter's tree (`tree_at(p, k, budget)`) with the copy as one more branch.
    Drafts past the answer's end never match, so a last step cut short by EOS may count fewer accepted drafts than
    decoding, which also counts drafts the target would have accepted after EOS."""
    if shape.tree_budget and tree_at is None:
        raise ValueError(f"Draft shape {shape}: replaying a tree needs the drafter's trees (`tree_at`).")

    copies: dict[int, int] = {}  # step position -> drafts it copied (lookup steps only)

    def accepted_at(p: int) -> int:
        room = max_length - p - 1  # tokens the sequence may still grow by
        copied = []
        if shape.lookup_tokens and room > 1:
            copied = lookup_draft(tokens[: p + 1], min(shape.lookup_tokens, room - 1))
        if copied and not shape.tree_budget:
            copies[p] = len(copied)
            return leading_matches(copied, tokens, p)
        k = min(shape.block_size, room)
        if k <= 1:
            return 0
        if not shape.tree_budget:
            return chain_matches(p, k)
        tree = tree_at(p, k, shape.tree_budget)
        add_branch(tree, copied)
        return tree_matches(tree, tokens, p)

    lengths = walk(start, len(tokens), accepted_at)
    positions = list(itertools.accumulate(lengths, initial=start))[: len(lengths)]  # where each step starts
    return ReplayedSteps(lengths, [copies.get(p, 0) for p in positions])
