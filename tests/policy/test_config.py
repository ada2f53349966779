"""BlockPolicyConfig / CostModel validation, the choice rules and the baselines."""

import json

import pytest

from blockpilot_hf.policy import (
    BlockPolicyConfig,
    CostModel,
    EntropyPolicy,
    FeatureSpec,
    FixedPolicy,
    best_fixed_size,
    choose_size,
    oracle_size,
)

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def make_config(**overrides) -> BlockPolicyConfig:
    kwargs = dict(features=FeatureSpec(32, 2), vocab_size=64, target_layer_ids=[0, 3], candidate_sizes=[1, 2, 4, 8])
    return BlockPolicyConfig(**{**kwargs, **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(candidate_sizes=[2, 4, 8]), "must include 1"),
        (dict(candidate_sizes=[1]), "at least two sizes"),
        (dict(choice="fastest"), "choice must be one of"),
        (dict(target_layer_ids=[0, 1, 3]), "3 ids but the feature spec reads 2"),
        (dict(best_fixed_size=6), "not a candidate size"),
        (dict(projection_dim=0), "must be positive"),
    ],
)
def test_config_rejects_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_config(**overrides)


def test_config_json_round_trip_and_bad_files(tmp_path):
    config = make_config(cost=CostModel([1, 4], [1.0, 2.0]), best_fixed_size=4)
    path = tmp_path / "config.json"
    config.save(path)
    assert BlockPolicyConfig.load(path) == config
    path.write_text(json.dumps({**json.loads(path.read_text()), "surprise": 1}))
    with pytest.raises(ValueError, match="unknown BlockPolicyConfig keys \\['surprise'\\]"):
        BlockPolicyConfig.load(path)
    path.write_text('{"features": ')
    with pytest.raises(ValueError, match="not valid JSON"):
        BlockPolicyConfig.load(path)
    path.write_text(json.dumps({"vocab_size": 64}))
    with pytest.raises(ValueError, match="not a complete BlockPolicyConfig"):
        BlockPolicyConfig.load(path)


def test_cost_model_interpolates_and_validates():
    cost = CostModel([8, 1, 4], [3.0, 1.0, 2.0])  # unsorted input is sorted
    assert cost.block_sizes == [1, 4, 8]
    assert cost.step_seconds(4) == 2.0
    assert cost.step_seconds(6) == pytest.approx(2.5)
    assert cost.step_seconds(16) == pytest.approx(5.0)  # extrapolated with the last slope
    assert cost.covers([1, 8]) and not cost.covers([1, 16])
    with pytest.raises(ValueError, match="positive"):
        CostModel([1, 2], [1.0, 0.0])
    with pytest.raises(ValueError, match="one positive"):
        CostModel([1, 2], [1.0])


def test_throughput_rule_differs_from_classifier_rule():
    sizes, taus = [1, 4, 16], [1.0, 3.5, 4.0]
    cost = CostModel([1, 4, 16], [1.0, 1.2, 2.3])  # verifying 16 costs 2.3x one token (a 135M model on CPU)
    assert choose_size(taus, sizes, "classifier", cost) == 16  # highest tau
    assert choose_size(taus, sizes, "throughput", cost) == 4  # 3.5/1.2 > 4.0/2.3 > 1/1
    assert choose_size([1.0, 1.1, 1.2], sizes, "throughput", cost) == 1  # drafting does not pay: plain decoding


def test_baselines():
    cost = CostModel([1, 4, 8], [1.0, 1.2, 1.5])
    easy, hard = {1: 1.0, 4: 3.8, 8: 7.0}, {1: 1.0, 4: 1.0, 8: 1.0}
    assert oracle_size(easy, cost) == 8 and oracle_size(hard, cost) == 1
    assert oracle_size(easy, cost, "classifier") == 8
    assert best_fixed_size([easy, easy, hard], cost) == 8  # mean (4.67*2 + 0.67)/3 beats 1 and 4
    assert best_fixed_size([easy, *[hard] * 20], cost) == 1  # size 4: (3.17 + 20 * 0.83) / 21 = 0.94 < 1
    assert FixedPolicy(4)(None) == 4 and FixedPolicy(4).name == "fixed:4"
    heuristic = EntropyPolicy([1, 2, 4, 8], low=0.5, high=4.0)
    assert heuristic.size_for_entropy(0.1) == 8
    assert heuristic.size_for_entropy(9.0) == 1
    assert heuristic.size_for_entropy(2.25) in (2, 4)  # half way in log space: sqrt(8)
