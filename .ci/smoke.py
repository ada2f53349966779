"""Smoke test of an installed wheel, run outside the repository by .ci/wheel: the embedded default loads from the
installed package and generates with its drafter and policy, identical to plain greedy generate."""

import torch

import blockpilot_hf
from blockpilot_hf.embedded import load_embedded

assert "site-packages" in blockpilot_hf.__file__, f"imported {blockpilot_hf.__file__}, not the installed wheel"
target, tokenizer, drafter, policy = load_embedded()
assert policy is not None, "the wheel lacks the shipped policy"
messages = [{"role": "user", "content": "What is 12 times 7? Explain briefly."}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
with torch.inference_mode():
    plain = target.generate(**inputs, max_new_tokens=24, do_sample=False)
    for choice in ({"block_policy": policy}, {"block_size": 4}):
        out = target.generate(
            **inputs,
            max_new_tokens=24,
            do_sample=False,
            assistant_model=drafter,
            return_dict_in_generate=True,
            **choice,
        )
        assert torch.equal(out.sequences, plain), f"output with {choice} differs from plain greedy generate"
        print(
            f"blockpilot-hf {blockpilot_hf.__version__} wheel: block size {out.blockpilot.block_size}, tau {out.blockpilot.tau:.2f}"
        )
