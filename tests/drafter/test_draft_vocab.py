"""A drafter restricted to a frequency-ranked vocabulary drafts only from it, and output stays lossless. The ids
are an int64 tensor in model.safetensors (config.json holds only their count); older folders that list them in
config.json still load, and save in the new format."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, DynamicCache

from blockpilot_hf import DFlashDrafter
from blockpilot_hf.constants import EMBEDDED_DRAFTER_DIR
from blockpilot_hf.testing_utils import plain_greedy, random_prompt, tiny_drafter, tiny_target

ALLOWED = list(range(0, 96, 3))


def draft_logits(drafter, target, seed: int = 0) -> torch.Tensor:
    """Draft logits (1, 5, V) for a fixed anchor and random context features."""
    features = torch.randn(
        1, 5, drafter.config.hidden_size * 2, dtype=target.dtype, generator=torch.Generator().manual_seed(seed)
    )
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    return drafter.draft(embed, head, torch.tensor([[7]]), features, 6, DynamicCache(config=drafter.config))


def test_draft_vocabulary_restricts_drafts_and_keeps_greedy_identical():
    target = tiny_target()
    drafter = tiny_drafter(target)
    drafter.set_draft_vocab(ALLOWED)
    logits = draft_logits(drafter, target)
    assert set(logits.argmax(-1)[0].tolist()) <= set(ALLOWED)
    assert torch.isinf(logits[0, :, 1]).all()  # id 1 is outside the vocabulary
    full = tiny_drafter(target)
    torch.testing.assert_close(logits[0][:, ALLOWED], draft_logits(full, target)[0][:, ALLOWED])  # same weights
    prompt = random_prompt(4, 9)
    out = target.generate(input_ids=prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter, block_size=4)
    assert torch.equal(out, plain_greedy(target, prompt, 24))
    drafter.set_draft_vocab(None)  # back to the full vocabulary
    assert drafter.config.draft_vocab_size is None and torch.equal(
        draft_logits(drafter, target), draft_logits(full, target)
    )


def test_draft_vocabulary_is_a_tensor_in_the_weights_not_a_list_in_the_config(tmp_path):
    target = tiny_target()
    drafter = tiny_drafter(target).to(torch.bfloat16)
    drafter.set_draft_vocab(ALLOWED)
    drafter.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["draft_vocab_size"] == len(ALLOWED) and "draft_vocab_ids" not in config
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert saved["draft_vocab_ids"].dtype == torch.int64 and saved["draft_vocab_ids"].tolist() == ALLOWED
    for loaded in (DFlashDrafter.from_pretrained(tmp_path), AutoModel.from_pretrained(tmp_path)):
        assert loaded.dtype == torch.bfloat16 and loaded.draft_vocab_ids.dtype == torch.int64
        assert loaded.draft_vocab_ids.tolist() == ALLOWED
        state = drafter.state_dict()
        assert (
            all(torch.equal(v, state[k]) for k, v in loaded.state_dict().items())
            and state.keys() == loaded.state_dict().keys()
        )


def write_old_format(folder, ids: list[int]) -> None:
    """Rewrite a saved folder the way it was written before: the ids listed in config.json, no tensor."""
    config = json.loads((folder / "config.json").read_text())
    config.pop("draft_vocab_size")
    config["draft_vocab_ids"] = ids
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["draft_vocab_ids"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_older_folders_with_the_list_in_config_json_still_load_and_resave_in_the_new_format(tmp_path, caplog):
    target = tiny_target()
    drafter = tiny_drafter(target)
    drafter.set_draft_vocab(ALLOWED)
    drafter.save_pretrained(tmp_path / "old")
    write_old_format(tmp_path / "old", ALLOWED)
    old, info = DFlashDrafter.from_pretrained(tmp_path / "old", output_loading_info=True)
    assert not info["missing_keys"] and "MISSING" not in caplog.text  # nothing is reported as newly initialised
    assert old.draft_vocab_ids.tolist() == ALLOWED and old.config.draft_vocab_size == len(ALLOWED)
    assert torch.equal(draft_logits(old, target), draft_logits(drafter, target))
    old.save_pretrained(tmp_path / "new")
    assert "draft_vocab_ids" not in json.loads((tmp_path / "new" / "config.json").read_text())
    assert load_file(str(tmp_path / "new" / "model.safetensors"))["draft_vocab_ids"].tolist() == ALLOWED


def test_a_list_set_on_the_config_by_older_code_is_saved_as_the_tensor(tmp_path):
    drafter = tiny_drafter(tiny_target())
    drafter.config.draft_vocab_ids = ALLOWED  # what the drafter recipe does before saving
    drafter.save_pretrained(tmp_path)
    loaded = DFlashDrafter.from_pretrained(tmp_path)
    assert loaded.draft_vocab_ids.tolist() == ALLOWED
    assert "draft_vocab_ids" not in json.loads((tmp_path / "config.json").read_text())


def test_a_new_folder_without_the_tensor_is_refused(tmp_path):
    drafter = tiny_drafter(tiny_target())
    drafter.set_draft_vocab(ALLOWED)
    drafter.save_pretrained(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["draft_vocab_ids"]
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(OSError, match=r"lacks drafter weights \['draft_vocab_ids'\]"):
        DFlashDrafter.from_pretrained(tmp_path)


def test_shipped_drafter_is_in_the_new_format():
    config = json.loads((EMBEDDED_DRAFTER_DIR / "config.json").read_text())
    assert config["draft_vocab_size"] == 8192 and "draft_vocab_ids" not in config
    ids = load_file(str(EMBEDDED_DRAFTER_DIR / "model.safetensors"))["draft_vocab_ids"]
    assert ids.dtype == torch.int64 and ids.shape == (8192,) and len(set(ids.tolist())) == 8192
