"""A peft LoRA-wrapped target (adapter merged or not) decodes exactly as its own plain greedy `generate`."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

import blockpilot_hf
from blockpilot_hf.testing_utils import OracleDrafter, plain_greedy, random_prompt, tiny_drafter, tiny_target


def lora_target():
    """A tiny Qwen3 target wrapped in a LoRA adapter whose weights are random (so it changes the model)."""
    base = tiny_target(seed=0, enabled=False)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    torch.manual_seed(7)
    return get_peft_model(base, config).to(torch.float64).eval()


def adapter_changes_output(peft_model, prompt) -> bool:
    with torch.no_grad():
        with_adapter = peft_model(input_ids=prompt).logits
        with peft_model.disable_adapter():
            without = peft_model(input_ids=prompt).logits
    return not torch.allclose(with_adapter, without)


@pytest.mark.parametrize("mode", ["unmerged", "merged", "merge_and_unload"])
def test_lora_target_greedy_is_identical_to_its_plain_generate(mode):
    model = lora_target()
    prompt = random_prompt(30, 6)
    assert adapter_changes_output(model, prompt)  # the LoRA weights are non-zero: a real adapter is being tested
    if mode == "merged":
        model.merge_adapter()
    elif mode == "merge_and_unload":
        model = model.merge_and_unload()
    drafter = tiny_drafter(model.get_base_model() if mode != "merge_and_unload" else model)
    reference = plain_greedy(model, prompt, 24)
    model = blockpilot_hf.enable(model)
    for assistant in (drafter, OracleDrafter.from_drafter(drafter, reference)):
        for block_size in (1, 5, 16):
            out = model.generate(
                input_ids=prompt,
                max_new_tokens=24,
                do_sample=False,
                assistant_model=assistant,
                block_size=block_size,
                return_dict_in_generate=True,
            )
            assert torch.equal(out.sequences, reference)
            assert out.blockpilot.block_size == block_size
