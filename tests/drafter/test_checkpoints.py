"""Checkpoints move both ways: z-lab's format -> `DFlashDrafter` -> `save_pretrained` -> `AutoModel`, weights equal;
config fields, dtype and attention implementation are honored; Hub ids resolve from the local cache offline."""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
import transformers
from safetensors.torch import load_file

import blockpilot_hf  # noqa: F401  (registers the dflash config and model with the Auto classes)
from blockpilot_hf import DFlashConfig, DFlashDrafter
from blockpilot_hf.testing_utils import write_zlab_folder

# write_zlab_folder's default shapes
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 32, 4, 2, 8, 2, 64
TARGET_LAYER_IDS = [1, 3, 5]


def assert_weights_equal(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    state = model.state_dict()
    assert set(tensors) <= set(state)
    for name, tensor in tensors.items():
        assert torch.equal(state[name].float(), tensor.float()), name


def block_output(drafter: DFlashDrafter, seed: int = 3) -> torch.Tensor:
    """Drafter output (1, 5, H) for a fixed block and 7 context positions, run in two calls through a cache."""
    g = torch.Generator().manual_seed(seed)
    n_ctx = drafter.config.num_context_layers
    context = torch.randn(1, 7, n_ctx * HIDDEN, generator=g).to(drafter.dtype)
    block = torch.randn(1, 5, HIDDEN, generator=g).to(drafter.dtype)
    cache = transformers.DynamicCache(config=drafter.config)
    with torch.no_grad():
        drafter(block, context[:, :4], cache=cache)
        cache.crop(-5)  # keep the context K/V only, as decoding does
        return drafter(block, context[:, 4:], cache=cache).last_hidden_state.float()


def test_zlab_folder_round_trips_through_save_pretrained_and_automodel(tmp_path):
    tensors = write_zlab_folder(tmp_path / "zlab")
    drafter = DFlashDrafter.from_pretrained(tmp_path / "zlab", dtype=torch.float32)
    cfg = drafter.config
    assert (cfg.block_size, cfg.mask_token_id, cfg.target_layer_ids, cfg.num_target_layers) == (
        16,
        VOCAB - 1,
        TARGET_LAYER_IDS,
        8,
    )
    assert_weights_equal(drafter, tensors)

    drafter.save_pretrained(tmp_path / "ours")
    saved = load_file(str(tmp_path / "ours" / "model.safetensors"))
    assert set(saved) == set(tensors)  # the same names as z-lab's: the file moves back too
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["model_type"] == "dflash"

    auto = transformers.AutoModel.from_pretrained(tmp_path / "ours")
    assert isinstance(auto, DFlashDrafter) and auto.config.target_layer_ids == TARGET_LAYER_IDS
    assert_weights_equal(auto, tensors)
    assert torch.equal(block_output(auto), block_output(drafter))


def test_block_size_inside_dflash_config_wins(tmp_path):
    write_zlab_folder(tmp_path / "new", dflash_extra={"block_size": 10})
    write_zlab_folder(tmp_path / "old")
    assert DFlashDrafter.from_pretrained(tmp_path / "new").config.block_size == 10
    assert DFlashDrafter.from_pretrained(tmp_path / "old").config.block_size == 16


def test_input_embedding_scale_multiplies_the_block_embeddings(tmp_path):
    write_zlab_folder(tmp_path / "plain")
    write_zlab_folder(tmp_path / "scaled", input_embedding_scale=2.0)
    plain = DFlashDrafter.from_pretrained(tmp_path / "plain", dtype=torch.float64)
    scaled = DFlashDrafter.from_pretrained(tmp_path / "scaled", dtype=torch.float64)
    assert scaled.config.input_embedding_scale == 2.0
    g = torch.Generator().manual_seed(0)
    context = torch.randn(1, 4, 3 * HIDDEN, generator=g, dtype=torch.float64)
    block = torch.randn(1, 5, HIDDEN, generator=g, dtype=torch.float64)
    with torch.no_grad():
        out_scaled = scaled(block, context).last_hidden_state
        assert not torch.allclose(out_scaled, plain(block, context).last_hidden_state)
        assert torch.allclose(out_scaled, plain(2.0 * block, context).last_hidden_state)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loads_in_the_requested_dtype(tmp_path, dtype):
    tensors = write_zlab_folder(tmp_path / "zlab")
    drafter = DFlashDrafter.from_pretrained(tmp_path / "zlab", dtype=dtype)
    assert {p.dtype for p in drafter.parameters()} == {dtype}
    for name, tensor in tensors.items():
        assert torch.equal(drafter.state_dict()[name], tensor.to(dtype)), name
    assert torch.isfinite(block_output(drafter)).all()


def test_sdpa_and_eager_attention_agree(tmp_path):
    write_zlab_folder(tmp_path / "zlab")
    eager = DFlashDrafter.from_pretrained(tmp_path / "zlab", attn_implementation="eager")
    sdpa = DFlashDrafter.from_pretrained(tmp_path / "zlab", attn_implementation="sdpa")
    assert (eager.config._attn_implementation, sdpa.config._attn_implementation) == ("eager", "sdpa")
    assert torch.allclose(block_output(eager), block_output(sdpa), atol=1e-5)


def populate_hub_cache(hub_cache: Path, repo_id: str, source: Path) -> None:
    """The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<sha>/<files>}."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True)
    for file in source.iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)


@pytest.fixture
def offline_hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty HF hub cache in tmp, with HF_HUB_OFFLINE=1: nothing may touch the network."""
    cache = tmp_path / "hf_home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.mark.parametrize(
    "dflash_extra, top_level, message",
    [
        ({"causal": True}, {}, "causal block attention"),
        ({"is_causal": True}, {}, "causal block attention"),
        ({}, {"layer_types": ["full_attention", "sliding_attention"]}, r"layer_types include \['sliding_attention'\]"),
        ({"conv_kernel_size": 4}, {}, r"fields this loader does not know: \['conv_kernel_size'\]"),
    ],
)
def test_zlab_fields_this_drafter_does_not_implement_are_refused_by_name(tmp_path, dflash_extra, top_level, message):
    write_zlab_folder(tmp_path / "zlab", dflash_extra=dflash_extra, **top_level)
    with pytest.raises(ValueError, match=message):
        DFlashDrafter.from_pretrained(tmp_path / "zlab")


def test_full_attention_layer_types_load(tmp_path):
    write_zlab_folder(tmp_path / "zlab", layer_types=["full_attention"] * 2)
    assert DFlashDrafter.from_pretrained(tmp_path / "zlab").config.num_hidden_layers == 2


def test_a_weight_this_architecture_lacks_is_refused_by_name(tmp_path):
    from safetensors.torch import save_file

    tensors = write_zlab_folder(tmp_path / "zlab")
    save_file({**tensors, "layers.0.conv.weight": torch.zeros(4, 4)}, str(tmp_path / "zlab" / "model.safetensors"))
    with pytest.raises(OSError, match=r"holds weights this drafter does not have: \['layers.0.conv.weight'\]"):
        DFlashDrafter.from_pretrained(tmp_path / "zlab")


def test_hub_id_loads_from_the_cache_offline(tmp_path, offline_hub_cache):
    tensors = write_zlab_folder(tmp_path / "zlab")
    populate_hub_cache(offline_hub_cache, "z-lab/Tiny-DFlash-b16", tmp_path / "zlab")
    drafter = DFlashDrafter.from_pretrained("z-lab/Tiny-DFlash-b16")
    assert drafter.config.target_layer_ids == TARGET_LAYER_IDS
    assert_weights_equal(drafter, tensors)


def test_hub_id_not_in_the_cache_offline_says_what_to_do(offline_hub_cache):
    with pytest.raises(
        OSError, match=r"not in the local Hugging Face cache and HF_HUB_OFFLINE=1.*hf download z-lab/Absent"
    ):
        DFlashDrafter.from_pretrained("z-lab/Absent")


def test_config_class_round_trips_our_own_format(tmp_path):
    config = DFlashConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        vocab_size=VOCAB,
        mask_token_id=5,
        num_target_layers=12,
        block_size=6,
    )
    config.save_pretrained(tmp_path)
    loaded = transformers.AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, DFlashConfig)
    assert (loaded.block_size, loaded.mask_token_id, loaded.target_layer_ids) == (
        6,
        5,
        [1, 9],
    )  # default: 2 ids spaced over 1..L-3
