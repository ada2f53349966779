"""The drafter recipe's files on disk: the feature cache recomputes damaged or outdated files and holds the
target's own distribution; metrics survive a torn line."""

import io
import json
import os

import pytest
import torch

from blockpilot_hf.testing_utils import random_prompt, tiny_target
from blockpilot_hf.training.drafter.curves import read_metrics
from blockpilot_hf.training.drafter.target_features import TOP_K, FeatureCache


class _RunsCode:
    def __reduce__(self):
        return (os.getcwd, ())


def _pickled_object() -> bytes:
    buf = io.BytesIO()
    torch.save(_RunsCode(), buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    "content",
    [b"", b"hello, not a tensor file", b"\0" * 64, "torn", "code", "wrong-kind"],
    ids=["empty", "garbage", "zeros", "torn-zip", "pickled-code", "wrong-kind"],
)
def test_a_damaged_feature_cache_file_is_recomputed(tmp_path, content):
    target = tiny_target(dtype=torch.float32)
    cache = FeatureCache(tmp_path, target, [0, 1])
    ids = random_prompt(0, 8)
    first = cache.get("t/0", ids)
    path = cache.path("t/0", ids)
    good = path.read_bytes()
    if content == "torn":
        content = good[: len(good) // 2]
    elif content == "code":  # weights_only: never unpickled, so never run
        content = _pickled_object()
    elif content == "wrong-kind":
        buf = io.BytesIO()
        torch.save({"features": first.features}, buf)
        content = buf.getvalue()
    path.write_bytes(content)
    again = FeatureCache(tmp_path, target, [0, 1]).get("t/0", ids)
    for name, want in first._asdict().items():
        torch.testing.assert_close(getattr(again, name), want)
    assert path.read_bytes() != content  # rewritten


def test_a_cache_file_without_soft_labels_is_recomputed(tmp_path):
    """Files of the older (features, predictions) format lack the target's distribution: rebuilt, not misread."""
    target, ids = tiny_target(dtype=torch.float32), random_prompt(0, 8)
    cache = FeatureCache(tmp_path, target, [0, 1])
    path = cache.path("t/0", ids)
    torch.save((torch.zeros(8, 2 * target.config.hidden_size), torch.zeros(8, dtype=torch.long)), path)
    item = cache.get("t/0", ids)
    assert item.top_ids.shape == item.top_logprobs.shape == (8, TOP_K)
    assert item.features.abs().sum() > 0 and len(torch.load(path, weights_only=True)) == 4


def test_soft_labels_are_the_targets_own_distribution(tmp_path):
    """Row j of the soft labels is the target's log-softmax after tokens < j, sorted, its first id the argmax."""
    target, ids = tiny_target(dtype=torch.float32), random_prompt(0, 8)
    item = FeatureCache(tmp_path, target, [0]).get("t/0", ids)
    logprobs = torch.log_softmax(target(ids).logits[0].float(), dim=-1)  # row j predicts token j + 1
    torch.testing.assert_close(item.top_logprobs[1:], logprobs[:-1].gather(-1, item.top_ids[1:]))
    assert torch.equal(item.top_ids[1:, 0], item.predictions[1:])
    assert (item.top_logprobs[1:].diff(dim=-1) <= 0).all()
    assert item.top_logprobs[0, 0] == 0 and item.top_ids[0, 0] == ids[0, 0]


def test_the_same_id_with_other_tokens_is_another_cache_entry(tmp_path):
    """A row regenerated under an old id (another answer) must not get the old answer's features."""
    target = tiny_target(dtype=torch.float32)
    cache = FeatureCache(tmp_path, target, [0, 1])
    short, long = random_prompt(0, 8), random_prompt(1, 11)
    assert cache.get("t/0", short).features.shape[0] == 8
    features, predictions, *_ = cache.get("t/0", long)
    assert features.shape[0] == predictions.shape[0] == 11
    assert cache.path("t/0", short) != cache.path("t/0", long) and cache.path("t/0", short).exists()


def test_a_drafter_reading_other_layers_gets_its_own_features(tmp_path):
    """Two runs sharing one feature folder (a 2- and a 3-layer drafter, say) never read each other's layers."""
    target, ids = tiny_target(dtype=torch.float32), random_prompt(0, 8)
    one = FeatureCache(tmp_path, target, [0]).get("t/0", ids).features
    two = FeatureCache(tmp_path, target, [0, 1]).get("t/0", ids).features
    assert two.shape[-1] == 2 * one.shape[-1] and torch.equal(two[:, : one.shape[-1]], one)


def test_metrics_of_a_resumed_run_keep_the_last_of_each_step_and_skip_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 3, "loss": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "lo')
    assert read_metrics(path) == [rows[0], rows[2], rows[3]]
