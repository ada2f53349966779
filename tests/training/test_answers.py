"""`AnswerCache`: a kept answer is exactly the one `plain_answer` decodes, is found again from its file only under
the same settings, and lets a second `collect --replay` (another drafter) run without decoding."""

from __future__ import annotations

import copy

import pytest
import torch

from blockpilot_hf.jsonl import read_rows
from blockpilot_hf.testing_utils import greedy_pair, random_prompt, synthetic_items, tiny_drafter
from blockpilot_hf.training.answers import AnswerCache, plain_answer
from blockpilot_hf.training.policy.collect import collect
from blockpilot_hf.training.policy.collected import read_records
from blockpilot_hf.training.policy.config import CollectConfig

pytestmark = pytest.mark.usefixtures("private_cost_cache")


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """Counts the answers `AnswerCache` decodes (rather than finds): one entry per `plain_answer` call."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return plain_answer(*args, **kwargs)

    monkeypatch.setattr("blockpilot_hf.training.answers.plain_answer", counted)
    return calls


@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (1.0, 7)])
def test_kept_answers_are_plain_answers_and_found_again(tmp_path, decodes, temperature, seed):
    target, _ = greedy_pair()
    prompt, path = random_prompt(3, 9), tmp_path / "answers.jsonl"
    expected, _ = plain_answer(target, prompt, 12, temperature, seed)
    first, _ = AnswerCache(target, 12, path).answer(prompt, temperature, seed)
    again, _ = AnswerCache(target, 12, path).answer(prompt, temperature, seed)
    assert torch.equal(first, expected) and torch.equal(again, expected)
    assert len(decodes) == 1 and len(read_rows(path)) == 1


def test_other_settings_miss(tmp_path, decodes):
    """Another length, temperature, seed, prompt or dtype is another answer: each one decodes and is kept apart."""
    target, _ = greedy_pair()
    prompt, path = random_prompt(3, 9), tmp_path / "answers.jsonl"
    AnswerCache(target, 12, path).answer(prompt)
    asks = [
        (AnswerCache(target, 13, path), prompt, 0.0, 0),
        (AnswerCache(target, 12, path), prompt, 1.0, 0),
        (AnswerCache(target, 12, path), prompt, 1.0, 1),
        (AnswerCache(target, 12, path), random_prompt(4, 9), 0.0, 0),
        (AnswerCache(copy.deepcopy(target).float(), 12, path), prompt, 0.0, 0),
    ]
    for cache, input_ids, temperature, seed in asks:
        cache.answer(input_ids, temperature, seed)
    assert len(decodes) == 6 and len(read_rows(path)) == 6
    AnswerCache(target, 12, path).answer(prompt, 1.0, 0)  # kept above
    AnswerCache(target, 12, path).answer(prompt, 0.0, 5)  # greedy: the seed plays no part
    assert len(decodes) == 6


def test_a_second_replayed_collect_reuses_the_answers(tmp_path, decodes):
    """Collecting with another drafter on the kept answers decodes nothing and records what a collect that decodes
    its own answers records."""
    target, drafter = greedy_pair()
    config = CollectConfig(max_new_tokens=10, block_sizes=[2, 4], replay=True, answers=str(tmp_path / "a.jsonl"))
    items = synthetic_items(3, seed=2)
    collect(target, drafter, items, tmp_path / "first", config)
    assert len(decodes) == 3
    other = tiny_drafter(target, seed=5, block_size=8)
    collect(target, other, items, tmp_path / "second", config)
    assert len(decodes) == 3
    fresh = CollectConfig(max_new_tokens=10, block_sizes=[2, 4], replay=True)
    collect(target, other, items, tmp_path / "fresh", fresh)
    second, decoded = read_records(tmp_path / "second")[1], read_records(tmp_path / "fresh")[1]
    assert [r.runs for r in second] == [r.runs for r in decoded]
    assert [r.features for r in second] == [r.features for r in decoded]


def test_answers_need_replay():
    with pytest.raises(ValueError, match="--answers a.jsonl needs --replay"):
        CollectConfig(answers="a.jsonl")
