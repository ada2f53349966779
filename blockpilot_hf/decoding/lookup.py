"""Prompt lookup: drafts copied from the text so far, with no model (Saxena, "Prompt Lookup Decoding", 2023).

If the last n tokens already occurred earlier in the sequence (prompt or generated text), the tokens that
followed that earlier occurrence are a guess for what comes next. Small models repeat themselves and answers
restate their prompts (code signatures, names, earlier turns), so such guesses are often right, and they cost
nothing but one vectorised compare over the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Copy:
    """A continuation on offer: the `tokens` that followed an earlier occurrence of the text's last `order` tokens.
    The longer the matched n-gram, the likelier the copy is right (a 1-gram match is mostly chance)."""

    tokens: list[int] = field(default_factory=list)
    order: int = 0  # n of the matched n-gram; 0 when nothing recurs


def find_copy(ids: torch.Tensor, num_tokens: int, max_ngram: int = 3, min_ngram: int = 1) -> Copy:
    """Up to `num_tokens` tokens that followed the most recent earlier occurrence of the sequence's last n-gram.

    `ids` (L,): the committed sequence. The longest n in [min_ngram, max_ngram] with a match wins; among
    matches of that n the most recent one is taken (repetition loops continue the latest copy). An empty
    `Copy` when no n-gram recurs.
    """
    length = ids.shape[0]
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        # windows[i] = ids[i : i + n] for every start i whose window ends before the last position.
        windows = ids[: length - 1].unfold(0, n, 1)  # (L - n, n)
        hits = (windows == ids[length - n :]).all(dim=1).nonzero()
        if hits.numel():
            start = int(hits[-1]) + n  # the token after the most recent earlier copy
            return Copy(ids[start : start + num_tokens].tolist(), n)
    return Copy()


def lookup_draft(ids: torch.Tensor, num_tokens: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """The tokens of `find_copy` alone: what a fixed draft shape copies."""
    return find_copy(ids, num_tokens, max_ngram, min_ngram).tokens
