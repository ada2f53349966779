"""Prefill features and head size: O(H) inputs, no vocabulary-sized layer, a few MB at most for Qwen3-8B."""

import pytest
import torch

from blockpilot_hf.decoding.engine import Prefill
from blockpilot_hf.policy import (
    BlockPolicy,
    BlockPolicyConfig,
    CostModel,
    FeatureSpec,
    PrefillFeatures,
    extract_features,
)

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def fake_prefill(T=5, n=2, H=32, V=64, seed=0) -> Prefill:
    g = torch.Generator().manual_seed(seed)
    return Prefill(
        input_ids=torch.randint(0, V, (1, T), generator=g),
        logits=torch.randn(1, V, generator=g),
        last_hidden=torch.randn(1, H, generator=g),
        context=torch.randn(1, T, n * H, generator=g),
    )


def test_features_shapes_and_content():
    prefill, spec = fake_prefill(), FeatureSpec(32, 2, top_k=4)
    feats = extract_features(prefill, spec)
    assert feats.groups.shape == (5, 32) and feats.stats.shape == (spec.num_stats,)
    context = prefill.context[0].view(5, 2, 32)
    torch.testing.assert_close(feats.groups[0], context[:, 0].mean(0))  # pooled layer 0
    torch.testing.assert_close(feats.groups[3], context[-1, 1])  # last position, layer 1
    torch.testing.assert_close(feats.groups[4], prefill.last_hidden[0])
    logp = torch.log_softmax(prefill.logits[0], -1)
    assert feats.stats[0].item() == pytest.approx(-(logp.exp() * logp).sum().item(), rel=1e-5)  # entropy
    assert feats.stats[1].item() == pytest.approx(logp.max().item(), rel=1e-5)  # top-1 log-prob
    again = PrefillFeatures.from_list(feats.to_list(), spec)
    torch.testing.assert_close(again.groups, feats.groups, rtol=1e-6, atol=1e-6)


def test_features_refuse_other_shapes():
    with pytest.raises(ValueError, match="made for another target or drafter"):
        extract_features(fake_prefill(n=3), FeatureSpec(32, 2))
    with pytest.raises(ValueError, match="collected with another setup"):
        PrefillFeatures.from_list([0.0] * 10, FeatureSpec(32, 2))


def head_for(hidden: int, layers: int, vocab: int) -> BlockPolicy:
    config = BlockPolicyConfig(
        features=FeatureSpec(hidden, layers), vocab_size=vocab, target_layer_ids=list(range(layers))
    )
    return BlockPolicy(config)


def test_head_size_does_not_grow_with_vocabulary():
    smol = head_for(576, 4, 49152)  # SmolLM2-135M
    qwen = head_for(4096, 5, 151936)  # Qwen3-8B
    assert smol.num_parameters() == head_for(576, 4, 1000).num_parameters()
    assert smol.num_parameters() < 60_000
    qwen_bytes = sum(t.numel() * 4 for t in [*qwen.parameters(), *qwen.buffers()])
    assert qwen_bytes < 1_000_000, qwen_bytes  # well under "a few MB" in float32
    assert qwen.num_parameters() < 151936 * 2048 // 1000  # over 1000x smaller than a V -> 2048 first layer


def favour(policy: BlockPolicy, size: int) -> BlockPolicy:
    """Bias the head's last layer so tau(size) ~= size and every other tau ~= 1 (whatever the features say)."""
    last = policy.heads[0].mlp[-1]
    with torch.no_grad():
        last.bias.copy_(torch.tensor([30.0 if b == size else -30.0 for b in policy.config.candidate_sizes]))
    return policy


@pytest.mark.parametrize("size", [2, 4, 8])
def test_policy_is_a_chooser_on_prefill(size):
    policy = favour(head_for(32, 2, 64).eval(), size)
    prefill = fake_prefill()
    assert policy(prefill) == size  # the size with the highest predicted tau (no cost model: tau alone)
    taus = policy.predict_tau(prefill)
    expected = [float(b) if b == size else 1.0 for b in policy.config.candidate_sizes]
    assert taus == pytest.approx(expected, abs=1e-6)


def test_policy_choice_weighs_tau_against_cost():
    policy = head_for(32, 2, 64).eval()
    sizes = policy.config.candidate_sizes
    with torch.no_grad():
        policy.heads[0].mlp[-1].bias.fill_(30.0)  # tau(b) ~= b for every size: the longest block has the highest tau
    prefill = fake_prefill()
    assert policy(prefill) == max(sizes)
    # Steps that cost b^2 seconds: tau / cost ~= 1 / b, so plain decoding (size 1) has the best throughput ...
    assert policy.choose(prefill, cost=CostModel(sizes, [float(b * b) for b in sizes])) == 1
    # ... while the paper's rule (highest tau) ignores the cost.
    assert policy.choose(prefill, rule="classifier") == max(sizes)
