"""hub_cards/custom_generate: a Hub repo layout that runs our engine through `generate(custom_generate=...)` on a
target that was never `enable()`d. Tested against a local copy of the folder (no network)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from blockpilot_hf import BlockPilotGenerateOutput
from blockpilot_hf.testing_utils import OracleDrafter, plain_greedy, random_prompt, tiny_drafter, tiny_target

CARD = Path(__file__).resolve().parents[1] / "hub_cards" / "custom_generate"


@pytest.fixture
def repo(tmp_path) -> str:
    return str(shutil.copytree(CARD, tmp_path / "dflash-generate"))


def test_layout_follows_the_custom_generate_contract():
    readme = (CARD / "README.md").read_text()
    header = readme.split("---")[1]
    assert "custom_generate" in header and "library_name: transformers" in header
    assert "blockpilot-hf" in (CARD / "custom_generate" / "requirements.txt").read_text()
    assert "def generate(model, *args, **kwargs)" in (CARD / "custom_generate" / "generate.py").read_text()


@pytest.mark.parametrize("block_size", [1, 4, 12])
def test_custom_generate_runs_our_engine_on_a_plain_target(repo, block_size):
    target = tiny_target(seed=0, enabled=False)
    assert "blockpilot" not in type(target.generate).__name__ and not hasattr(target, "_blockpilot_original_generate")
    drafter = tiny_drafter(target)
    prompt = random_prompt(40, 6)
    reference = plain_greedy(target, prompt, 20)
    for assistant in (drafter, OracleDrafter.from_drafter(drafter, reference)):
        out = target.generate(
            input_ids=prompt,
            max_new_tokens=20,
            do_sample=False,
            assistant_model=assistant,
            block_size=block_size,
            custom_generate=repo,
            trust_remote_code=True,
            return_dict_in_generate=True,
        )
        assert isinstance(out, BlockPilotGenerateOutput)  # our engine ran, not transformers' assisted loop
        assert torch.equal(out.sequences, reference)
        assert out.blockpilot.block_size == block_size
    assert out.blockpilot.acceptance_lengths[0] == block_size  # the oracle run: whole blocks accepted


def test_custom_generate_without_a_drafter_is_plain_generate(repo):
    target = tiny_target(seed=0, enabled=False)
    prompt = random_prompt(41, 5)
    out = target.generate(
        input_ids=prompt, max_new_tokens=10, do_sample=False, custom_generate=repo, trust_remote_code=True
    )
    assert torch.equal(out, plain_greedy(target, prompt, 10))


def test_custom_generate_errors_are_ours(repo):
    target = tiny_target(seed=0, enabled=False)
    with pytest.raises(ValueError, match="block size 0 is out of range"):
        target.generate(
            input_ids=random_prompt(42, 5),
            max_new_tokens=5,
            assistant_model=tiny_drafter(target),
            block_size=0,
            custom_generate=repo,
            trust_remote_code=True,
        )


def test_custom_generate_takes_batches_and_draft_shapes(repo):
    """The card's promise: the same router as `enable()`, so left-padded batches and `fixed:` shapes (a tree with
    prompt lookup) decode identically to plain greedy `generate`."""
    target = tiny_target(seed=0, enabled=False)
    drafter = tiny_drafter(target)
    common = dict(max_new_tokens=12, do_sample=False, custom_generate=repo, trust_remote_code=True)
    ids = torch.cat([random_prompt(43, 6), random_prompt(44, 6)])
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = target.generation_config.pad_token_id or 0, 0  # row 1 left-padded
    batch = target.generate(input_ids=ids, attention_mask=mask, assistant_model=drafter, block_size=4, **common)
    assert torch.equal(batch, target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False))
    prompt = random_prompt(45, 6)
    tree = target.generate(input_ids=prompt, assistant_model=drafter, block_policy="fixed:4+tree6+lookup4", **common)
    assert torch.equal(tree, plain_greedy(target, prompt, 12))
