"""`blockpilot make-policy` end to end on a tiny Qwen3-architecture target with the real Qwen3 tokenizer, Qwen3's
generation config (it samples at T=0.6, top-k 20, top-p 0.95) and a z-lab-format drafter (mask id 151669): the
folder it writes has a greedy and a T=0.6 head and loads by path and by Hub id from an offline cache."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import huggingface_hub
import pytest
import torch
from transformers import GenerationConfig

from blockpilot_hf import BlockPolicy, DFlashDrafter
from blockpilot_hf.cli import main
from blockpilot_hf.embedded import load_target
from blockpilot_hf.generation import enable
from blockpilot_hf.testing_utils import QWEN3_MASK_ID, write_tiny_qwen3_pair
from blockpilot_hf.training.policy.collected import CollectMeta
from blockpilot_hf.training.policy.config import MakePolicyJob
from blockpilot_hf.training.policy.make import read_card_template
from tests.policy.conftest import offline_cache, populate  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("private_cost_cache")

PROMPTS = "gsm8k:policy,humaneval:policy"
ROOT = Path(__file__).resolve().parents[3]
QWEN3_SAMPLING = GenerationConfig(do_sample=True, temperature=0.6, top_k=20, top_p=0.95, eos_token_id=151645)


def make_argv(target_dir, drafter_dir) -> list[str]:
    """The make-policy arguments every run here shares: 8 prompts, sizes 1-8, 6 tokens, half held out."""
    argv = ["make-policy", "--target", str(target_dir), "--drafter", str(drafter_dir), "--prompts", PROMPTS]
    argv += ["--limit", "4", "--block-sizes", "1,2,4,8", "--max-new-tokens", "6", "--heldout-fraction", "0.5"]
    return [*argv, "--epochs", "20"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(target_dir, drafter_dir, policy folder) after one make-policy run (8 prompts, sizes 1-8, 6 tokens)."""
    root = tmp_path_factory.mktemp("make")
    target_dir, drafter_dir = write_tiny_qwen3_pair(root)
    QWEN3_SAMPLING.save_pretrained(target_dir)
    out = root / "policies" / "tiny-qwen3"
    main([*make_argv(target_dir, drafter_dir), "--out", str(out)])
    return target_dir, drafter_dir, out


def test_make_policy_writes_a_complete_folder(made):
    target_dir, drafter_dir, out = made
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"config.json", "model.safetensors", "README.md"} <= files
    assert {"plots/best_sizes.png", "plots/tau_vs_size.png", "plots/predicted_vs_actual.png"} <= files
    assert any(f.startswith("collect/rows-") for f in files)
    policy = BlockPolicy.from_pretrained(out)
    assert policy.config.name == "tiny-qwen3" and policy.config.candidate_sizes == [1, 2, 4, 8]
    assert DFlashDrafter.from_pretrained(drafter_dir).config.mask_token_id == QWEN3_MASK_ID

    card = huggingface_hub.ModelCard.load(out / "README.md")
    assert {r.metric_name for r in card.data.eval_results} >= {"blockpilot regret vs oracle at T=0"}
    text = card.text
    for row in ("| blockpilot |", "| oracle |", "| best-fixed:", "| training-size:8", "| prompt lookup (transformers"):
        assert row in text, row
    assert f"--target {target_dir}" in text and "make-policy" in text  # the exact command
    assert "- Hardware: cpu-" in text and "- Time:" in text and "](plots/best_sizes.png)" in text


def test_made_policy_loads_by_folder_and_by_hub_id_offline(made, offline_cache):  # noqa: F811
    target_dir, drafter_dir, out = made
    target, tokenizer = load_target(str(target_dir))
    target = enable(target)
    drafter = DFlashDrafter.from_pretrained(drafter_dir, dtype=target.dtype)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    plain = target.generate(**inputs, max_new_tokens=6, do_sample=False)
    populate(offline_cache, out, repo="blockpilot-test/tiny-qwen3")
    for policy in (str(out), "blockpilot-test/tiny-qwen3"):
        got = target.generate(
            **inputs,
            max_new_tokens=6,
            do_sample=False,
            assistant_model=drafter,
            block_policy=policy,
            return_dict_in_generate=True,
        )
        assert torch.equal(got.sequences, plain)
        assert got.blockpilot.block_size in (1, 2, 4, 8)


def test_a_sampling_target_gets_a_head_at_its_own_temperature(made, offline_cache, caplog):  # noqa: F811
    """Qwen3 samples by default: make-policy adds a T=0.6 head, collected on answers sampled with the target's
    top-k and top-p; a request with the target's default (sampled) settings uses it without a warning."""
    target_dir, drafter_dir, out = made
    policy = BlockPolicy.from_pretrained(out)
    assert policy.config.temperatures == [0.0, 0.6] and len(policy.heads) == 2
    assert policy.head_index(0.6) == 1 and any("at T=0.6" in r.name for r in policy.config.results)
    meta = CollectMeta.load(out / "collect" / "t0.6")
    assert (meta.temperature, meta.sample_top_k, meta.sample_top_p, meta.replayed) == (0.6, 20, 0.95, True)
    assert "- T=0.6 (sampled requests)" in (out / "README.md").read_text()

    target, tokenizer = load_target(str(target_dir))
    drafter = DFlashDrafter.from_pretrained(drafter_dir, dtype=target.dtype)
    inputs = tokenizer("What is 2 + 2?", return_tensors="pt")
    populate(offline_cache, out, repo="blockpilot-test/tiny-qwen3-sampled")
    with caplog.at_level(logging.WARNING):
        got = enable(target).generate(
            **inputs, max_new_tokens=6, assistant_model=drafter, block_policy="blockpilot-test/tiny-qwen3-sampled"
        )
    assert got.shape[1] == inputs["input_ids"].shape[1] + 6 or tokenizer.eos_token_id in got[0].tolist()
    assert not [r for r in caplog.records if "temperature" in r.getMessage()]


def test_temperatures_must_include_greedy(tmp_path):
    assert MakePolicyJob(out=str(tmp_path), temperatures=[0.6, 0]).temperatures == [0.0, 0.6]
    with pytest.raises(ValueError, match="include 0"):
        MakePolicyJob(out=str(tmp_path), temperatures=[0.6])


def test_rerun_resumes_and_push_leaves_collect_behind(made, monkeypatch):
    """A second run collects nothing new; --push-to uploads the folder without collect/."""
    target_dir, drafter_dir, out = made
    calls = {}

    class FakeApi:
        def create_repo(self, repo_id, exist_ok):
            calls["create"] = repo_id
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, **kwargs):
            calls["upload"] = kwargs

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    rows = sorted(p.read_text() for p in (out / "collect").glob("rows-*.jsonl"))
    sampled = sorted(p.read_text() for p in (out / "collect" / "t0.6").glob("rows-*.jsonl"))
    argv = [*make_argv(target_dir, drafter_dir), "--temperatures", "0.6,0", "--out", str(out)]
    main([*argv, "--push-to", "someone/tiny-qwen3"])
    assert sorted(p.read_text() for p in (out / "collect").glob("rows-*.jsonl")) == rows
    assert sorted(p.read_text() for p in (out / "collect" / "t0.6").glob("rows-*.jsonl")) == sampled
    assert calls["create"] == "someone/tiny-qwen3"
    assert calls["upload"]["folder_path"] == str(out) and calls["upload"]["ignore_patterns"] == ["collect/*"]
    assert 'policy = "someone/tiny-qwen3"' in (out / "README.md").read_text()


def test_too_few_prompts_for_a_heldout_share_is_explained(made, tmp_path):
    target_dir, drafter_dir, _ = made
    argv = ["make-policy", "--target", str(target_dir), "--drafter", str(drafter_dir), "--prompts", "gsm8k:policy"]
    argv += ["--limit", "1", "--block-sizes", "1,2", "--max-new-tokens", "2", "--heldout-fraction", "0.01"]
    with pytest.raises(ValueError, match="held-out share"):
        main([*argv, "--out", str(tmp_path / "p")])


def test_card_template_is_filled_with_the_results(made, tmp_path, caplog):
    """hub_cards/qwen3-4b/README.md keeps its prose and metadata; the marker becomes the evaluation."""
    target_dir, drafter_dir, out = made
    template = ROOT / "hub_cards" / "qwen3-4b" / "README.md"
    shutil.copytree(out / "collect", tmp_path / "p" / "collect")  # resume: nothing is collected again
    main([*make_argv(target_dir, drafter_dir), "--out", str(tmp_path / "p"), "--card-template", str(template)])
    card = huggingface_hub.ModelCard.load(tmp_path / "p" / "README.md")
    assert card.data.base_model == "Qwen/Qwen3-4B" and card.data.eval_results
    assert "z-lab/Qwen3-4B-DFlash-b16" in card.text and "| prompt lookup (transformers" in card.text
    assert "<!-- make-policy: results -->" not in card.text and "Not measured yet" not in card.text


@pytest.mark.parametrize("size", ["4b", "8b"])
def test_qwen3_card_templates_parse_and_hold_the_marker(size, caplog):
    path = ROOT / "hub_cards" / f"qwen3-{size}" / "README.md"
    with caplog.at_level("WARNING", logger="huggingface_hub"):
        card = huggingface_hub.ModelCard.load(path)
    assert not caplog.records
    assert card.data.base_model == f"Qwen/Qwen3-{size.upper()}" and card.data.library_name == "blockpilot-hf"
    assert read_card_template(path).count("<!-- make-policy: results -->") == 1


def test_a_template_without_the_marker_is_refused_before_loading(made, tmp_path, capsys):
    target_dir, drafter_dir, _ = made
    (tmp_path / "card.md").write_text("# my card\n")
    with pytest.raises(SystemExit):
        main(
            ["make-policy", "--target", str(target_dir), "--drafter", str(drafter_dir), "--out", str(tmp_path / "p")]
            + ["--card-template", str(tmp_path / "card.md")]
        )
    assert "--card-template" in capsys.readouterr().err and not (tmp_path / "p").exists()
