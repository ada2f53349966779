"""Greedy bfloat16 decoding on the embedded default with SDPA's batched attention in the verify passes and row by
row (the engine's way on a CPU, `decoding/row_attention.py`): how many outputs stay identical to plain bfloat16
`generate`, and the speed-up of each over it (arms interleaved per prompt, repeated, medians).

    python benchmarks/row_attention.py                          # 3 eval prompts per dataset, ~10 minutes
    python benchmarks/row_attention.py --split policy --shapes 4,8+lookup7 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.decoding import row_attention
from blockpilot_hf.embedded import load_embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=3, help="prompts per dataset (first turns)")
    parser.add_argument("--split", default="eval", help="prompt split: eval or policy")
    parser.add_argument("--shapes", default="4,8,8+tree12+lookup7", help="comma-separated draft shapes")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per arm, interleaved")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    target, tokenizer, drafter, _ = load_embedded(torch.bfloat16)
    shapes = args.shapes.split(",")
    wanted = row_attention.wants_row_attention
    attention = {"batched": lambda model: False, "row by row": wanted}
    ratios: dict[tuple[str, str], list[float]] = {}
    identical: dict[tuple[str, str], int] = {}
    prompts = [p for name in ("gsm8k", "humaneval", "mt-bench") for p in load_prompts(name, args.split, args.limit)]
    for prompt in prompts:
        input_ids = chat_input_ids(tokenizer, prompt.turns[:1])
        runs = [("plain", wanted, {})] + [
            ((shape, mode), choice, dict(assistant_model=drafter, block_policy=f"fixed:{shape}"))
            for shape in shapes
            for mode, choice in attention.items()
        ]
        times: dict = {}
        outputs = {}
        for _ in range(args.repeats):
            for name, choice, kwargs in runs:
                row_attention.wants_row_attention = choice
                start = time.perf_counter()
                outputs[name] = target.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=args.max_new_tokens,
                    do_sample=False,
                    **kwargs,
                )
                times.setdefault(name, []).append(time.perf_counter() - start)
        row_attention.wants_row_attention = wanted
        plain = statistics.median(times.pop("plain"))
        for name, samples in times.items():
            ratios.setdefault(name, []).append(plain / statistics.median(samples))
            identical[name] = identical.get(name, 0) + bool(torch.equal(outputs[name], outputs["plain"]))
        print(f"{prompt.id}: " + ", ".join(f"{s} {m} {ratios[s, m][-1]:.2f}x" for s, m in times), flush=True)
    print("\n| shape | attention | identical to plain bfloat16 generate | speed-up (geometric mean) |")
    print("|---|---|---|---|")
    for (shape, mode), values in ratios.items():
        print(
            f"| {shape} | {mode} | {identical[shape, mode]}/{len(prompts)} | {statistics.geometric_mean(values):.2f}x |"
        )


if __name__ == "__main__":
    main()
