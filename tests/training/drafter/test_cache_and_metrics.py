"""The drafter recipe's files on disk: the feature cache recomputes damaged files, metrics survive a torn line."""

import io
import json
import os

import pytest
import torch

from blockpilot_hf.testing_utils import random_prompt, tiny_target
from blockpilot_hf.training.drafter.curves import read_metrics
from blockpilot_hf.training.drafter.target_features import FeatureCache


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
    features, predictions = cache.get("t/0", ids)
    path = cache.path("t/0", ids)
    good = path.read_bytes()
    if content == "torn":
        content = good[: len(good) // 2]
    elif content == "code":  # weights_only: never unpickled, so never run
        content = _pickled_object()
    elif content == "wrong-kind":
        buf = io.BytesIO()
        torch.save({"features": features}, buf)
        content = buf.getvalue()
    path.write_bytes(content)
    again = FeatureCache(tmp_path, target, [0, 1]).get("t/0", ids)
    torch.testing.assert_close(again[0], features)
    assert torch.equal(again[1], predictions)
    assert path.read_bytes() != content  # rewritten


def test_the_same_id_with_other_tokens_is_another_cache_entry(tmp_path):
    """A row regenerated under an old id (another answer) must not get the old answer's features."""
    target = tiny_target(dtype=torch.float32)
    cache = FeatureCache(tmp_path, target, [0, 1])
    short, long = random_prompt(0, 8), random_prompt(1, 11)
    assert cache.get("t/0", short)[0].shape[0] == 8
    features, predictions = cache.get("t/0", long)
    assert features.shape[0] == predictions.shape[0] == 11
    assert cache.path("t/0", short) != cache.path("t/0", long) and cache.path("t/0", short).exists()


def test_a_drafter_reading_other_layers_gets_its_own_features(tmp_path):
    """Two runs sharing one feature folder (a 2- and a 3-layer drafter, say) never read each other's layers."""
    target, ids = tiny_target(dtype=torch.float32), random_prompt(0, 8)
    one = FeatureCache(tmp_path, target, [0]).get("t/0", ids)[0]
    two = FeatureCache(tmp_path, target, [0, 1]).get("t/0", ids)[0]
    assert two.shape[-1] == 2 * one.shape[-1] and torch.equal(two[:, : one.shape[-1]], one)


def test_metrics_of_a_resumed_run_keep_the_last_of_each_step_and_skip_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 3, "loss": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "lo')
    assert read_metrics(path) == [rows[0], rows[2], rows[3]]
