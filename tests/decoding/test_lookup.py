"""Prompt lookup drafts: the vectorised search equals a plain-Python reference on random sequences."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blockpilot_hf.decoding.lookup import lookup_draft


def reference_lookup(ids: list[int], num_tokens: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The definition, written out: longest n first, most recent earlier occurrence, what followed it."""
    for n in range(max_ngram, min_ngram - 1, -1):
        if n > len(ids) - 1:
            continue
        tail = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start : start + n] == tail:
                return ids[start + n : start + n + num_tokens]
    return []


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(st.integers(0, 4), min_size=1, max_size=40),
    num_tokens=st.integers(1, 8),
    max_ngram=st.integers(1, 4),
)
def test_matches_the_reference(ids, num_tokens, max_ngram):
    got = lookup_draft(torch.tensor(ids), num_tokens, max_ngram=max_ngram)
    assert got == reference_lookup(ids, num_tokens, max_ngram, 1)


def test_prefers_the_longest_ngram_then_the_latest_copy():
    #        0  1  2  3  4  5  6  7  8  9
    ids = [1, 2, 3, 8, 9, 2, 3, 7, 1, 2, 3]
    # The 3-gram [1, 2, 3] occurs at 0 only: its continuation wins over the later 2-gram copy at 5.
    assert lookup_draft(torch.tensor(ids), 2) == [8, 9]
    # With 2-grams at most, the latest earlier [2, 3] (at 5) wins over the first one (at 1).
    assert lookup_draft(torch.tensor(ids), 2, max_ngram=2) == [7, 1]


def test_no_repeat_gives_no_draft():
    assert lookup_draft(torch.tensor([5, 6, 7, 8]), 4) == []
    assert lookup_draft(torch.tensor([5]), 4) == []
