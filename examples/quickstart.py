"""Quickstart: BlockPilot speculative decoding vs plain `generate` on the embedded default (CPU, offline).

    python examples/quickstart.py

On a GPU, swap in a bigger pair (the README shows Qwen3-4B with z-lab/Qwen3-4B-DFlash-b16).
"""

import time

import torch

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.embedded import load_embedded

target, tokenizer, drafter, policy = load_embedded()  # SmolLM2-135M-Instruct + shipped drafter and policy
prompt = load_prompts("gsm8k", "eval", limit=1)[0]  # a held-out GSM8K question
input_ids = chat_input_ids(tokenizer, prompt.turns)

with torch.inference_mode():
    start = time.perf_counter()
    plain = target.generate(input_ids=input_ids, max_new_tokens=96, do_sample=False)
    plain_seconds = time.perf_counter() - start
    out = target.generate(
        input_ids=input_ids,
        max_new_tokens=96,
        do_sample=False,
        assistant_model=drafter,
        block_policy=policy,  # None -> the drafter's training block size
        prompt_lookup_num_tokens=10,  # also draft by copying text that repeats
        return_dict_in_generate=True,
    )

stats = out.blockpilot
print(tokenizer.decode(out.sequences[0, input_ids.shape[1] :], skip_special_tokens=True))
print(
    f"\nblock size {stats.block_size} ({stats.policy}), tau {stats.tau:.2f}, tokens by source {stats.tokens_by_source}, "
    f"{stats.tokens_per_second:.1f} tok/s "
    f"vs {(plain.shape[1] - input_ids.shape[1]) / plain_seconds:.1f} tok/s plain; "
    f"identical to plain generate: {torch.equal(out.sequences, plain)}"
)
