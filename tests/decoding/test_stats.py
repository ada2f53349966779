"""The one definition of tau and tokens/s, and every record that reports them agreeing, the empty case included."""

import pytest

from blockpilot_hf.bench.runs import RunRecord
from blockpilot_hf.decoding.stats import GenerationStats, StepRecord, mean_acceptance_length, tokens_per_second
from blockpilot_hf.training.policy.collected import SizeRun


def test_tau_and_tokens_per_second():
    assert mean_acceptance_length([3, 1, 2]) == 2.0
    assert tokens_per_second(30, 2.0) == 15.0


def test_empty_cases():
    """No steps (the prefill's token was the last): tau is 1.0, one token per target forward, as plain decoding.
    No measured time: 0.0 tokens/s (not a division error, not infinity)."""
    assert mean_acceptance_length([]) == 1.0
    assert tokens_per_second(5, 0.0) == 0.0 and tokens_per_second(0, 0.0) == 0.0
    stats = GenerationStats(block_size=4, policy="fixed:4", prompt_tokens=3, new_tokens=1)
    run = SizeRun(4, [], 1, 0.0, 0.0, 0.0, True)
    record = RunRecord("eval", "d", "p", 1, 0.0, 0, "fixed:4", 3, 1, 0.0, 0.0)
    assert stats.tau == run.tau == 1.0
    assert stats.tokens_per_second == run.tokens_per_second == record.tokens_per_second == 0.0


def test_records_agree_with_the_definitions():
    steps = [StepRecord(4, 3, 4, 0.1, 0.2), StepRecord(4, 0, 1, 0.1, 0.2)]
    stats = GenerationStats(4, "fixed:4", 3, new_tokens=6, total_time=0.75, steps=steps)
    run = SizeRun(4, stats.acceptance_lengths, stats.new_tokens, stats.draft_time, stats.verify_time, 0.75, True)
    record = RunRecord("eval", "d", "p", 1, 0.0, 0, "fixed:4", 3, 6, 0.75, 0.1)
    assert stats.tau == run.tau == pytest.approx(2.5)  # (3 + 1 accepted drafts + 2 target tokens) / 2 passes
    assert stats.tokens_per_second == run.tokens_per_second == record.tokens_per_second == pytest.approx(8.0)
