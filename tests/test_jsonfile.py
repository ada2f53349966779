"""Every dataclass stored as JSON (settings files and JSONL rows) round-trips and fails the same way when damaged."""

import json
from dataclasses import asdict

import pytest

from blockpilot_hf.bench.runs import BenchMeta, RunRecord
from blockpilot_hf.jsonfile import from_dict, load_json, save_json
from blockpilot_hf.policy.config import BlockPolicyConfig, CostModel, FeatureSpec
from blockpilot_hf.training.policy.collected import CollectMeta

EXAMPLES = {
    "BenchMeta": BenchMeta("tiny", "tiny-drafter", "none", 10, "float32", "cpu", "sdpa", 8),
    "CollectMeta": CollectMeta("t", "d", [1, 2, 4], 16, 32, [0, 3], 64, 8, 8, "cpu"),
    "BlockPolicyConfig": BlockPolicyConfig(
        FeatureSpec(32, 2), 64, [0, 3], candidate_sizes=[1, 2, 4], cost=CostModel([1, 4], [1.0, 2.0])
    ),
    "CostModel": CostModel([1, 4, 8], [1.0, 1.5, 2.5], "cpu", "calibrated"),
    "RunRecord": RunRecord("eval", "gsm8k", "gsm8k/1", 1, 0.0, 0, "fixed:4", 12, 8, 0.5, 0.1, 4, 2.0, [2, 3, 3]),
}
# A key each class requires (no default).
REQUIRED = {
    "BenchMeta": "drafter",
    "CollectMeta": "block_sizes",
    "BlockPolicyConfig": "vocab_size",
    "CostModel": "seconds",
    "RunRecord": "new_tokens",
}
each = pytest.mark.parametrize("name", sorted(EXAMPLES))


@each
def test_round_trip(name, tmp_path):
    obj = EXAMPLES[name]
    save_json(obj, tmp_path / "x.json")
    assert load_json(type(obj), tmp_path / "x.json") == obj
    assert from_dict(type(obj), json.loads(json.dumps(asdict(obj)))) == obj


@each
def test_missing_file_names_the_path(name, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere\.json does not exist"):
        load_json(type(EXAMPLES[name]), tmp_path / "nothere.json")


@each
def test_bad_json_names_path_and_line(name, tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(ValueError, match=r"x\.json is not valid JSON \(line 4, column 1"):
        load_json(type(EXAMPLES[name]), path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"x\.json: not a {name}: a JSON object was expected, got list"):
        load_json(type(EXAMPLES[name]), path)


@each
def test_unknown_keys_are_refused_and_named(name, tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({**asdict(EXAMPLES[name]), "zeta": 1, "alpha": 2}))
    with pytest.raises(ValueError, match=rf"x\.json: unknown {name} keys \['alpha', 'zeta'\]"):
        load_json(type(EXAMPLES[name]), path)


@each
def test_missing_required_keys_are_named(name, tmp_path):
    path = tmp_path / "x.json"
    data = asdict(EXAMPLES[name])
    del data[REQUIRED[name]]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"x\.json: not a complete {name}: missing keys \['{REQUIRED[name]}'\]"):
        load_json(type(EXAMPLES[name]), path)


def test_defaults_fill_missing_keys_and_validation_errors_name_the_file(tmp_path):
    """A file from before a field with a default existed still loads; `__post_init__` errors get the path."""
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"block_sizes": [1, 2], "seconds": [1.0, 2.0]}))
    assert load_json(CostModel, path) == CostModel([1, 2], [1.0, 2.0], "unknown", "collected")
    path.write_text(json.dumps({"block_sizes": [1, 2], "seconds": [1.0, 0.0]}))
    with pytest.raises(ValueError, match=r"cost\.json: not a valid CostModel: CostModel seconds must be positive"):
        load_json(CostModel, path)
