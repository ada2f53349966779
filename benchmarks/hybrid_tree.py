"""Hybrid drafting with a tree (prompt lookup joins it as a branch) against hybrid with chains, lookup alone and
plain `generate`, on the embedded default: arms interleaved per prompt, repeated, medians, ratios printed.

    python benchmarks/hybrid_tree.py                      # 2 eval prompts per dataset, 128 tokens, ~6 minutes
    python benchmarks/hybrid_tree.py --limit 4 --repeats 5 --tree-budget 16
"""

from __future__ import annotations

import argparse
import statistics

import torch

from blockpilot_hf.bench.metrics import geometric_mean
from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.decoding.stats import device_clock
from blockpilot_hf.embedded import load_embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=2, help="eval prompts per dataset (first turns)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per arm, interleaved")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--tree-budget", type=int, default=16)
    parser.add_argument("--lookup-tokens", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, tokenizer, drafter, policy = load_embedded()
    hybrid = dict(assistant_model=drafter, block_policy=policy, prompt_lookup_num_tokens=args.lookup_tokens)
    arms = {
        "plain": {},
        "lookup": dict(assistant_model=drafter, block_size=1, prompt_lookup_num_tokens=args.lookup_tokens),
        "hybrid (chains)": hybrid,
        f"hybrid (tree {args.tree_budget} + lookup branch)": dict(hybrid, tree_budget=args.tree_budget),
    }
    prompts = [p for name in ("gsm8k", "humaneval", "mt-bench") for p in load_prompts(name, "eval", args.limit)]
    ratios: dict[str, list[float]] = {arm: [] for arm in arms}
    names = list(arms)
    for prompt in prompts:
        input_ids = chat_input_ids(tokenizer, prompt.turns[:1])
        seconds: dict[str, list[float]] = {arm: [] for arm in arms}
        outputs = {}
        with torch.inference_mode():
            for kwargs in arms.values():  # warm-up
                target.generate(input_ids=input_ids, max_new_tokens=8, do_sample=False, **kwargs)
            for repeat in range(args.repeats):
                for arm in names[repeat % len(names) :] + names[: repeat % len(names)]:  # rotated order
                    start = device_clock(target.device)
                    outputs[arm] = target.generate(
                        input_ids=input_ids, max_new_tokens=args.max_new_tokens, do_sample=False, **arms[arm]
                    )
                    seconds[arm].append(device_clock(target.device) - start)
        plain = statistics.median(seconds["plain"])
        cells = []
        for arm in arms:
            ratios[arm].append(plain / statistics.median(seconds[arm]))
            same = torch.equal(outputs[arm], outputs["plain"])
            cells.append(f"{arm} {ratios[arm][-1]:.2f}x{'' if same else ' (differs!)'}")
        print(f"{prompt.id:>14}: " + "  ".join(cells), flush=True)
    print("speed-up over plain generate, geometric mean over prompts:")
    for arm, values in ratios.items():
        print(f"  {arm}: {geometric_mean(values):.2f}x")


if __name__ == "__main__":
    main()
