"""Acceptance of a draft tree against a chain that verifies the same number of tokens per step, on the embedded
default (tau only, so the numbers do not depend on the machine's load).

    python benchmarks/tree_tau.py                       # 6 GSM8K eval prompts, 7 drafted tokens per step
    python benchmarks/tree_tau.py --datasets gsm8k,humaneval --limit 10 --drafted 7,15

A chain of block size b verifies b tokens (anchor + b - 1 drafts); a tree of budget b - 1 verifies the same b
tokens, spread over the drafter's most likely continuations (depth up to the block size it drafts with).
"""

from __future__ import annotations

import argparse

import torch

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.embedded import load_embedded


def mean_tau(target, drafter, shape: DraftShape, inputs: list[torch.Tensor], max_new_tokens: int) -> float:
    """Mean acceptance length over every step of every prompt (the pooled tau), greedy."""
    committed = steps = 0
    for input_ids in inputs:
        out = target.generate(
            input_ids=input_ids,
            assistant_model=drafter,
            block_policy=f"fixed:{shape}",
            max_new_tokens=max_new_tokens,
            do_sample=False,
            return_dict_in_generate=True,
        )
        committed += sum(out.blockpilot.acceptance_lengths)
        steps += len(out.blockpilot.steps)
    return committed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="gsm8k")
    parser.add_argument("--limit", type=int, default=6, help="eval prompts per dataset (first turns)")
    parser.add_argument("--drafted", default="7", help="drafted tokens per step to compare at (comma-separated)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    target, tokenizer, drafter, _ = load_embedded()
    print("| dataset | tokens verified per step | chain tau | tree tau | tree / chain |")
    print("|---|---|---|---|---|")
    for dataset in args.datasets.split(","):
        inputs = [chat_input_ids(tokenizer, p.turns[:1]) for p in load_prompts(dataset, "eval", args.limit)]
        for drafted in map(int, args.drafted.split(",")):
            chain = mean_tau(target, drafter, DraftShape(drafted + 1), inputs, args.max_new_tokens)
            # The tree drafts from the training block size's positions, as the tree arm of the bench does.
            depth = max(drafter.config.block_size, 2)
            tree = mean_tau(target, drafter, DraftShape(depth, tree_budget=drafted), inputs, args.max_new_tokens)
            print(f"| {dataset} | {drafted + 1} | {chain:.2f} | {tree:.2f} | {tree / chain:.2f}x |")


if __name__ == "__main__":
    main()
