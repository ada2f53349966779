"""Acceptance of a draft tree against a chain that verifies the same number of tokens per step, on the embedded
default (tau only, so the numbers do not depend on the machine's load).

    python benchmarks/tree_tau.py                       # 6 GSM8K eval prompts, 7 drafted tokens per step
    python benchmarks/tree_tau.py --datasets gsm8k,humaneval --limit 10 --drafted 7,15
    python benchmarks/tree_tau.py --temperature 1 --seeds 3 --drafted 3,7   # sampling: adds sampled-draft chains
    python benchmarks/tree_tau.py --drafter runs/drafter/drafter --split policy   # another drafter, eval unseen

A chain of block size b verifies b tokens (anchor + b - 1 drafts); a tree of budget b - 1 verifies the same b
tokens, spread over the drafter's most likely continuations (depth up to the block size it drafts with). When
sampling, a greedy chain or tree step goes on while the target's own sample equals a drafted token (any child
of a tree node), and a sampled chain (`draft_sampling=True`) accepts by rejection sampling against the drafter's
distribution; all three keep the target's distribution exactly.
"""

from __future__ import annotations

import argparse

import torch

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.drafter import DFlashDrafter
from blockpilot_hf.embedded import load_embedded, resolve_drafter


def mean_tau(
    target,
    drafter,
    shape: DraftShape,
    inputs: list[torch.Tensor],
    args: argparse.Namespace,
    draft_sampling: bool = False,
) -> float:
    """Mean acceptance length over every step of every prompt and seed (the pooled tau)."""
    sample = args.temperature > 0
    sampling = dict(do_sample=True, temperature=args.temperature) if sample else dict(do_sample=False)
    committed = steps = 0
    for input_ids in inputs:
        for seed in range(args.seeds if sample else 1):
            torch.manual_seed(seed)
            out = target.generate(
                input_ids=input_ids,
                assistant_model=drafter,
                block_policy=f"fixed:{shape}",
                max_new_tokens=args.max_new_tokens,
                **sampling,
                draft_sampling=draft_sampling,
                return_dict_in_generate=True,
            )
            committed += sum(out.blockpilot.acceptance_lengths)
            steps += len(out.blockpilot.steps)
    return committed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="gsm8k")
    parser.add_argument("--split", default="eval", help="prompt split (eval, or policy to keep eval unseen)")
    parser.add_argument("--limit", type=int, default=6, help="prompts per dataset (first turns)")
    parser.add_argument("--drafted", default="7", help="drafted tokens per step to compare at (comma-separated)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--seeds", type=int, default=3, help="sampled runs per prompt when temperature > 0")
    parser.add_argument("--drafter", default="embedded", help="drafter folder or Hub id; 'embedded' = shipped")
    args = parser.parse_args()
    target, tokenizer, drafter, _ = load_embedded()
    if args.drafter != "embedded":
        drafter = DFlashDrafter.from_pretrained(resolve_drafter(args.drafter), dtype=target.dtype)
    sample = args.temperature > 0
    columns = ["chain tau", *(["sampled-chain tau"] if sample else []), "tree tau", "tree / chain"]
    print("| dataset | tokens verified per step | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for dataset in args.datasets.split(","):
        prompts = load_prompts(dataset, args.split, args.limit)
        inputs = [chat_input_ids(tokenizer, p.turns[:1]) for p in prompts]
        for drafted in map(int, args.drafted.split(",")):
            chain = DraftShape(drafted + 1)
            # The tree drafts from the training block size's positions, as the tree arm of the bench does.
            tree = DraftShape(max(drafter.config.block_size, 2), tree_budget=drafted)
            taus = [mean_tau(target, drafter, chain, inputs, args)]
            if sample:
                taus.append(mean_tau(target, drafter, chain, inputs, args, draft_sampling=True))
            taus.append(mean_tau(target, drafter, tree, inputs, args))
            cells = [f"{t:.2f}" for t in taus] + [f"{taus[-1] / taus[0]:.2f}x"]
            print(f"| {dataset} | {drafted + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
