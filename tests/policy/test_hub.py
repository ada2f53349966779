"""Policy folders: save -> load from a folder -> load by Hub id from a populated HF cache, offline; and errors."""

import dataclasses
import shutil

import huggingface_hub
import pytest
import torch

from blockpilot_hf import BlockPolicy
from blockpilot_hf.policy.features import PrefillFeatures
from blockpilot_hf.testing_utils import tiny_pair
from blockpilot_hf.validation import check_policy_compatible
from tests.policy.conftest import COMMIT, REPO, populate

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def predictions(policy, records):
    spec = policy.config.features
    return torch.tensor([policy.predict_tau(PrefillFeatures.from_list(r.features, spec)) for r in records])


def test_save_load_folder_and_card(task, tmp_path):
    folder = task.policy.save_pretrained(tmp_path / "policy")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    loaded = BlockPolicy.from_pretrained(folder)
    assert loaded.config == task.policy.config
    torch.testing.assert_close(predictions(loaded, task.heldout), predictions(task.policy, task.heldout))
    card = (folder / "README.md").read_text()
    front = card.split("---")[1]
    for key in ("library_name: blockpilot-hf", "license: apache-2.0", "tags:", "- blockpilot"):
        assert key in front
    assert "{" not in card.replace("```", "")  # every template placeholder was filled
    assert f"{loaded.num_parameters():,} parameters" in card


def test_card_lists_base_model_and_results(task, tmp_path):
    from blockpilot_hf.policy import MeasuredResult

    policy = BlockPolicy.from_pretrained(task.policy_dir)
    policy.config.target_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    policy.config.results = [MeasuredResult("blockpilot regret vs oracle", 0.0123, "12 prompts")]
    folder = policy.save_pretrained(tmp_path / "p", repo_id="someone/my-policy")
    card = huggingface_hub.ModelCard.load(folder / "README.md")
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    [result] = card.data.eval_results
    assert (result.metric_name, result.metric_value, result.dataset_name) == (
        "blockpilot regret vs oracle",
        0.0123,
        "12 prompts",
    )
    assert "| blockpilot regret vs oracle | 0.0123 | 12 prompts |" in card.text
    assert 'policy = "someone/my-policy"' in card.text  # the Use snippet loads the Hub repo it is pushed to
    assert "lookup step verifying" not in card.text  # no copy ladder stored, none shown
    policy.config.cost = dataclasses.replace(policy.config.cost, copy_sizes=[2, 8], copy_seconds=[0.05, 0.0525])
    card = huggingface_hub.ModelCard.load(policy.save_pretrained(tmp_path / "q") / "README.md")
    assert "; a lookup step verifying n tokens, in ms: 2: 50.0, 8: 52.5" in card.text


def test_load_by_hub_id_offline_from_cache(task, offline_cache):
    populate(offline_cache, task.policy_dir)
    # huggingface_hub itself sees the snapshot, offline:
    assert huggingface_hub.snapshot_download(REPO, local_files_only=True).endswith(COMMIT)
    loaded = BlockPolicy.from_pretrained(REPO)
    torch.testing.assert_close(predictions(loaded, task.heldout), predictions(task.policy, task.heldout))


def test_uncached_hub_id_offline_says_what_to_do(offline_cache):
    with pytest.raises(OSError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE=1") as info:
        BlockPolicy.from_pretrained("blockpilot-test/never-downloaded")
    assert "If it is published" in str(info.value) and "blockpilot make-policy" in str(info.value)


def test_unpublished_policy_id_online_names_make_policy_and_block_size(monkeypatch):
    """The Hub answers that no such repo exists: the message says how to make a policy, or decode without one."""
    import huggingface_hub.constants
    from huggingface_hub.errors import RepositoryNotFoundError

    import blockpilot_hf.hub

    def absent(repo_id, **kwargs):  # the Hub's 404, built without an HTTP response object
        error = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
        Exception.__init__(error, f"404 Repository Not Found for {repo_id}")
        raise error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(blockpilot_hf.hub, "snapshot_download", absent)
    with pytest.raises(OSError, match=r"'blockpilot/qwen3-4b' does not exist on the Hub") as info:
        BlockPolicy.from_pretrained("blockpilot/qwen3-4b")
    for fix in ("blockpilot make-policy", "block_size=N", 'block_policy="per-step"'):
        assert fix in str(info.value)


def test_damaged_folders_give_clear_errors(task, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(task.policy_dir, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="lacks model.safetensors"):
        BlockPolicy.from_pretrained(broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors at all")
    with pytest.raises(OSError, match="not a readable safetensors file"):
        BlockPolicy.from_pretrained(broken)
    shutil.copy(task.policy_dir / "model.safetensors", broken / "model.safetensors")
    config = (broken / "config.json").read_text().replace('"projection_dim": 32', '"projection_dim": 16')
    (broken / "config.json").write_text(config)
    with pytest.raises(OSError, match="do not fit its config.json"):
        BlockPolicy.from_pretrained(broken)
    with pytest.raises(ValueError, match="is a file"):
        BlockPolicy.from_pretrained(broken / "config.json")


def test_policy_for_another_target_or_drafter_is_refused(task):
    from blockpilot_hf import DFlashConfig, DFlashDrafter

    target, drafter = tiny_pair()
    policy = BlockPolicy.from_pretrained(task.policy_dir)
    check_policy_compatible(policy.config, target, drafter)  # the pair it was trained for: fine

    other_layers = DFlashDrafter(DFlashConfig(**{**drafter.config.to_dict(), "target_layer_ids": [1, 3]}))
    with pytest.raises(ValueError, match=r"reads target layers \[0, 3\], the drafter reads \[1, 3\]"):
        check_policy_compatible(policy.config, target, other_layers)
    policy.config.features.hidden_size = 48
    with pytest.raises(ValueError, match="made for hidden size 48, the target has 32"):
        check_policy_compatible(policy.config, target, drafter)
    policy.config.features.hidden_size = 32
    policy.config.vocab_size = 151936
    with pytest.raises(ValueError, match="vocabulary of 151936, the target has 64"):
        check_policy_compatible(policy.config, target, drafter)


def test_other_model_ids_only_warn(task):
    target, drafter = tiny_pair()
    policy = BlockPolicy.from_pretrained(task.policy_dir)
    policy.config.target_id, target.config.name_or_path = "org/target-a", "org/target-b"
    with pytest.warns(UserWarning, match="trained for target 'org/target-a' but runs with 'org/target-b'"):
        check_policy_compatible(policy.config, target, drafter)
