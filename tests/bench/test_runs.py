"""The weights fingerprint a results folder remembers: equal for equal weights, different for any change."""

from __future__ import annotations

import copy
import dataclasses

import torch

from blockpilot_hf.bench.runs import weights_fingerprint
from blockpilot_hf.constants import EMBEDDED_POLICY_DIR
from blockpilot_hf.policy import BlockPolicy


def test_fingerprint_follows_values_dtype_and_names():
    model = torch.nn.Linear(4, 3)
    same = copy.deepcopy(model)
    assert weights_fingerprint(model) == weights_fingerprint(same)
    with torch.no_grad():
        same.bias[0] += 1e-6
    assert weights_fingerprint(model) != weights_fingerprint(same)
    assert weights_fingerprint(model) != weights_fingerprint(copy.deepcopy(model).to(torch.bfloat16))
    renamed = torch.nn.Sequential(copy.deepcopy(model))  # the same tensors under other names
    assert weights_fingerprint(model) != weights_fingerprint(renamed)


def test_fingerprint_follows_the_config_of_a_policy():
    """Two policies with the same head but other step costs choose differently: a results folder must tell them
    apart."""
    policy = BlockPolicy.from_pretrained(EMBEDDED_POLICY_DIR)
    repriced = copy.deepcopy(policy)
    assert weights_fingerprint(policy) == weights_fingerprint(repriced)
    cost = repriced.config.cost
    repriced.config.cost = dataclasses.replace(cost, seconds=[2 * s for s in cost.seconds])
    assert weights_fingerprint(policy) != weights_fingerprint(repriced)


def test_fingerprint_of_no_model_and_of_a_chooser_without_weights():
    assert weights_fingerprint(None) == "none"
    assert weights_fingerprint(lambda prefill: 4) == "function"
