"""A policy holds one head per temperature it was trained at, and each request is answered by the head nearest
to the temperature it decodes at: greedy requests by the greedy head, sampled ones by the sampled head."""

from __future__ import annotations

import copy
import dataclasses
import logging

import pytest
import torch

from blockpilot_hf.policy import BlockPolicy
from blockpilot_hf.testing_utils import random_prompt, tiny_pair
from blockpilot_hf.training.policy.fit import combine_temperatures

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def pinned(task, temperature: float, size: int) -> BlockPolicy:
    """The synthetic policy as if trained at `temperature`, biased so that tau(size) ~= size and every other tau
    ~= 1: it picks `size` whatever the prompt."""
    policy = copy.deepcopy(task.policy)
    policy.config = dataclasses.replace(policy.config, temperatures=[temperature])
    with torch.no_grad():
        policy.heads[0].mlp[-1].bias.copy_(
            torch.tensor([30.0 if b == size else -30.0 for b in policy.config.candidate_sizes])
        )
    return policy


def chosen_size(policy, **sampling) -> int:
    target, drafter = tiny_pair()
    torch.manual_seed(0)
    out = target.generate(
        input_ids=random_prompt(3, 12, vocab=target.config.vocab_size),
        assistant_model=drafter,
        block_policy=policy,
        max_new_tokens=6,
        return_dict_in_generate=True,
        **sampling,
    )
    return out.blockpilot.block_size


def test_each_request_uses_the_head_nearest_its_temperature(task, tmp_path):
    policy = combine_temperatures([pinned(task, 1.0, 2), pinned(task, 0.0, 8)])
    assert policy.config.temperatures == [0.0, 1.0] and len(policy.heads) == 2
    assert [policy.head_index(t) for t in (0.0, 0.4, 0.5, 0.6, 1.0, 3.0)] == [0, 0, 0, 1, 1, 1]
    assert chosen_size(policy) == 8
    assert chosen_size(policy, do_sample=True, temperature=1.0) == 2
    assert chosen_size(policy, do_sample=True, temperature=0.7) == 2
    assert chosen_size(policy, do_sample=True, temperature=0.2) == 8
    policy.save_pretrained(tmp_path / "p")
    loaded = BlockPolicy.from_pretrained(tmp_path / "p")
    assert loaded.config == policy.config
    assert chosen_size(loaded, do_sample=True, temperature=1.0) == 2 and chosen_size(loaded) == 8


def test_a_request_far_from_every_head_is_warned_about(task, caplog):
    with caplog.at_level(logging.WARNING, logger="blockpilot_hf.policy.resolve"):
        chosen_size(pinned(task, 0.0, 4))
        assert not caplog.records
        policy = pinned(task, 0.0, 4)
        for _ in range(2):
            chosen_size(policy, do_sample=True, temperature=1.0)
    assert len(caplog.records) == 1  # once per policy and temperature, not on every call
    assert "trained at temperature(s) 0 but this request decodes at 1" in caplog.text
    assert "blockpilot make-policy --temperatures 0,1" in caplog.text


def test_combining_refuses_repeated_temperatures_and_other_settings(task):
    with pytest.raises(ValueError, match="share a temperature"):
        combine_temperatures([pinned(task, 0.0, 2), pinned(task, 0.0, 8)])
    other = pinned(task, 1.0, 2)
    other.config = dataclasses.replace(other.config, drafter_id="another-drafter")
    with pytest.raises(ValueError, match="differ in more than their temperature: drafter_id. Collect"):
        combine_temperatures([pinned(task, 0.0, 8), other])
    with pytest.raises(ValueError, match=r"temperatures must be distinct values >= 0"):
        dataclasses.replace(task.policy.config, temperatures=[0.0, 0.0])
