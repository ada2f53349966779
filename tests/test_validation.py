"""Every refusal of issue 2 part 5: it raises, and the message says what is wrong and what to do."""

from __future__ import annotations

import json

import pytest
import torch

from blockpilot_hf import DFlashDrafter
from blockpilot_hf.testing_utils import random_prompt, tiny_drafter, tiny_target, write_zlab_folder
from blockpilot_hf.validation import check_block_size, strip_left_padding
from tests.drafter.test_checkpoints import offline_hub_cache  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0)


@pytest.fixture(scope="module")
def drafter(target):
    return tiny_drafter(target, block_size=8)


def generate(target, assistant, **kwargs):
    kwargs = {"input_ids": random_prompt(0, 5), "max_new_tokens": 4, "do_sample": False, **kwargs}
    return target.generate(assistant_model=assistant, **kwargs)


def test_drafter_with_another_vocabulary(target):
    with pytest.raises(ValueError, match=r"vocabulary size 200 != target embedding rows 96.*share a tokenizer"):
        generate(target, tiny_drafter(target, vocab_size=200))


def test_drafter_with_another_hidden_size(target):
    other = tiny_drafter(target, hidden_size=16)
    with pytest.raises(ValueError, match=r"hidden size 16 != target hidden size 32.*drafter trained for this target"):
        generate(target, other)


def test_target_layer_ids_beyond_the_target_depth(target):
    deep = tiny_drafter(target, num_target_layers=None, target_layer_ids=[0, 6])
    with pytest.raises(ValueError, match=r"reads target layers \[0, 6\] but the target has only 4 layers \(0..3\)"):
        generate(target, deep)


def test_drafter_made_for_a_deeper_target(target):
    with pytest.raises(ValueError, match=r"made for a 12-layer target; this target has 4 layers"):
        generate(target, tiny_drafter(target, num_target_layers=12, target_layer_ids=[0, 3]))


def test_config_refuses_layer_ids_beyond_its_own_target_depth(target):
    with pytest.raises(ValueError, match=r"target_layer_ids \[0, 9\] reach beyond the target's 4 layers"):
        tiny_drafter(target, target_layer_ids=[0, 9])


def test_mask_token_outside_the_embedding_table(target):
    with pytest.raises(ValueError, match=r"mask_token_id 500 is not a row of the target's embedding table \(0..95\)"):
        generate(target, tiny_drafter(target, mask_token_id=500))


@pytest.mark.parametrize(
    ("size", "error", "message"),
    [
        (
            0,
            ValueError,
            r"block size 0 is out of range: use 1 \(plain decoding\) to 32 \(4x .* training block size 8\)",
        ),
        (-3, ValueError, r"block size -3 is out of range"),
        (33, ValueError, r"block size 33 is out of range: use 1 \(plain decoding\) to 32"),
        (2.5, TypeError, r"block size must be an int, got 2.5 \(float\)"),
        ("8", TypeError, r"block size must be an int, got '8' \(str\)"),
        (True, TypeError, r"block size must be an int, got True \(bool\)"),
    ],
)
def test_block_size_out_of_range_or_not_an_int(target, drafter, size, error, message):
    with pytest.raises(error, match=message):
        generate(target, drafter, block_size=size)
    with pytest.raises(error, match=message):
        check_block_size(size, drafter)


def test_block_sizes_at_both_ends_of_the_range_run(target, drafter):
    for size in (1, 32):
        assert generate(target, drafter, block_size=size).shape == (1, 9)


def test_block_policy_errors(target, drafter):
    with pytest.raises(ValueError, match=r"expected 'fixed:N' with an integer N"):
        generate(target, drafter, block_policy="fixed:eight")
    with pytest.raises(ValueError, match=r"Pass either `block_size` or `block_policy`, not both"):
        generate(target, drafter, block_size=4, block_policy="fixed:4")


def test_beam_search(target, drafter):
    with pytest.raises(ValueError, match=r"Beam search \(num_beams > 1\) cannot run with a DFlash drafter"):
        generate(target, drafter, num_beams=2)


def test_several_return_sequences(target, drafter):
    with pytest.raises(ValueError, match=r"num_return_sequences > 1 is not supported with a DFlash drafter"):
        generate(target, drafter, do_sample=True, num_return_sequences=2)


def test_stop_strings_without_a_tokenizer(target, drafter):
    with pytest.raises(ValueError, match=r"`stop_strings` needs the tokenizer: pass `tokenizer=tokenizer`"):
        generate(target, drafter, stop_strings=["x"])


def test_block_size_without_a_dflash_drafter(target):
    with pytest.raises(
        ValueError, match=r"`block_size` / `block_policy` / `tree_budget` need a DFlashDrafter as `assistant_model`"
    ):
        target.generate(input_ids=random_prompt(0, 5), max_new_tokens=3, block_size=4)
    with pytest.raises(ValueError, match=r"need a DFlashDrafter"):
        target.generate(input_ids=random_prompt(0, 5), max_new_tokens=3, block_policy="fixed:4")


def test_padding_inside_the_prompt_is_refused():
    ids = random_prompt(0, 5)
    with pytest.raises(ValueError, match=r"zeros after the first real token; only left padding is supported"):
        strip_left_padding(ids, torch.tensor([[0, 1, 0, 1, 1]]))


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"neither an existing folder nor a valid Hub repo id"):
        DFlashDrafter.from_pretrained(str(tmp_path / "no" / "such" / "folder"))


def test_folder_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"is not a DFlash drafter: it lacks config.json"):
        DFlashDrafter.from_pretrained(tmp_path)


def test_corrupt_config(tmp_path):
    write_zlab_folder(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "dflash_config": ')
    with pytest.raises(ValueError, match=r"config.json is not valid JSON .*the checkpoint is corrupt"):
        DFlashDrafter.from_pretrained(tmp_path)


def test_target_folder_instead_of_a_drafter(tmp_path):
    write_zlab_folder(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["dflash_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"holds a 'qwen3' model, not a DFlash drafter.*Did you pass the target instead"
    ):
        DFlashDrafter.from_pretrained(tmp_path)


def test_missing_weights_file(tmp_path):
    write_zlab_folder(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(OSError, match=r"Could not load DFlash drafter weights from .*model.safetensors"):
        DFlashDrafter.from_pretrained(tmp_path)


def test_truncated_weights_file(tmp_path):
    write_zlab_folder(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(OSError, match=r"Could not load DFlash drafter weights from .*incomplete metadata"):
        DFlashDrafter.from_pretrained(tmp_path)


def test_weights_missing_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    write_zlab_folder(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["fc.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(OSError, match=r"lacks drafter weights \['fc.weight'\]: the checkpoint is incomplete"):
        DFlashDrafter.from_pretrained(tmp_path)


def test_hub_id_not_cached_while_offline(offline_hub_cache):  # noqa: F811
    with pytest.raises(
        OSError, match=r"'org/never-downloaded' is not in the local Hugging Face cache.*pass a local folder"
    ):
        DFlashDrafter.from_pretrained("org/never-downloaded")


def test_empty_prompt(target, drafter):
    with pytest.raises(ValueError, match=r"prompt is empty \(input_ids of shape \(1, 0\)\).*BOS token"):
        generate(target, drafter, input_ids=torch.zeros((1, 0), dtype=torch.long))


def test_all_zero_attention_mask(target, drafter):
    with pytest.raises(ValueError, match=r"attention_mask is all zeros: the prompt has no real token"):
        generate(target, drafter, attention_mask=torch.zeros((1, 5), dtype=torch.long))


def test_hub_unreachable_while_online_names_the_connection_error(monkeypatch):
    import huggingface_hub.constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    import blockpilot_hf.hub

    def unreachable(repo_id, **kwargs):  # what snapshot_download raises when the Hub cannot be reached
        try:
            raise ConnectionError("[Errno -3] Temporary failure in name resolution")
        except ConnectionError as err:
            raise LocalEntryNotFoundError("An error happened while trying to locate the files on the Hub") from err

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(blockpilot_hf.hub, "snapshot_download", unreachable)
    with pytest.raises(
        OSError, match=r"'org/drafter' could not be downloaded: the Hugging Face Hub could not be reached"
    ) as info:
        DFlashDrafter.from_pretrained("org/drafter")
    assert "Temporary failure in name resolution" in str(info.value) and "HF_HUB_OFFLINE" not in str(info.value)


def test_draft_vocabulary_beyond_the_target(target):
    drafter = tiny_drafter(target)
    drafter.set_draft_vocab([3, 500])
    with pytest.raises(ValueError, match=r"draft_vocab_ids reach beyond the target's 96 embedding rows"):
        generate(target, drafter)


def test_target_head_wider_than_its_embedding():
    """Drafts come from the target's head: ids past the embedding table would crash the verify pass, so refuse."""
    wide = tiny_target()
    wide.lm_head = torch.nn.Linear(wide.config.hidden_size, 100, bias=False, dtype=wide.dtype)
    with pytest.raises(ValueError, match=r"output head has 100 rows but its embedding table 96"):
        generate(wide, tiny_drafter(wide))


def test_policy_against_records_of_another_setup():
    from types import SimpleNamespace

    from blockpilot_hf.decoding.shape import DraftShape
    from blockpilot_hf.validation import check_policy_fits_collection

    shapes = [DraftShape.parse(c) for c in (1, 2, 4, "8+tree16")]
    config = SimpleNamespace(name="p", hidden_size=32, target_layer_ids=[0, 3], candidates=shapes)
    meta = SimpleNamespace(hidden_size=32, target_layer_ids=[0, 3], candidates=[*shapes, DraftShape(8)])
    check_policy_fits_collection(config, meta, "runs/heldout")
    with pytest.raises(ValueError, match=r"runs/heldout was collected for another target/drafter .*hidden size 64"):
        check_policy_fits_collection(config, SimpleNamespace(**{**vars(meta), "hidden_size": 64}), "runs/heldout")
    with pytest.raises(ValueError, match=r"no runs with 4, 8\+tree16, which the policy can choose"):
        check_policy_fits_collection(
            config, SimpleNamespace(**{**vars(meta), "candidates": shapes[:2]}), "runs/heldout"
        )


def test_a_drafter_on_another_device_is_refused_with_the_fix():
    target = tiny_target(dtype=torch.float32)
    drafter = tiny_drafter(target).to("meta")  # any device but the target's
    with pytest.raises(ValueError, match=r"drafter is on meta but the target is on cpu.*drafter\.to\(target\.device\)"):
        target.generate(input_ids=random_prompt(0, 6), assistant_model=drafter, block_size=4, max_new_tokens=4)
