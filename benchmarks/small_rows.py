"""Our engine with F.linear, with the "columns" kernel alone and with "columns" and "packed" (the default) for its
small-row float32 products (`decoding/small_rows.py`) against plain `generate`, on the embedded default: arms
interleaved per prompt, repeated, medians, speed-ups printed.

    python benchmarks/small_rows.py                 # 2 eval prompts per dataset, 3 repeats, ~35 minutes
    python benchmarks/small_rows.py --limit 4 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.decoding import small_rows
from blockpilot_hf.embedded import load_embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=2, help="eval prompts per dataset (first turns)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per arm, interleaved")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, tokenizer, drafter, _ = load_embedded()
    arms = {
        "fixed:1": dict(assistant_model=drafter, block_size=1),
        "fixed:4": dict(assistant_model=drafter, block_size=4),
        "fixed:8": dict(assistant_model=drafter, block_size=8),
        "lookup": dict(assistant_model=drafter, block_size=1, prompt_lookup_num_tokens=10),
    }
    probe = small_rows.fast_kernels
    layouts = {
        "F.linear": lambda *shape: {},
        "columns": lambda *shape: probe(*shape[:3], allow_packed=False),
        "columns+packed": probe,
    }
    ratios: dict[str, list[float]] = {}
    identical = total = 0
    prompts = [p for name in ("gsm8k", "humaneval", "mt-bench") for p in load_prompts(name, "eval", args.limit)]
    for prompt in prompts:
        input_ids = chat_input_ids(tokenizer, prompt.turns[:1])
        times: dict[str, list[float]] = {}
        outputs = {}
        for _ in range(args.repeats):
            runs = [("plain", {}, probe)] + [
                (f"{arm} / {layout}", kwargs, choice)
                for arm, kwargs in arms.items()
                for layout, choice in layouts.items()
            ]
            for name, kwargs, choice in runs:
                small_rows.fast_kernels = choice
                start = time.perf_counter()
                outputs[name] = target.generate(
                    input_ids=input_ids, max_new_tokens=args.max_new_tokens, do_sample=False, **kwargs
                )
                times.setdefault(name, []).append(time.perf_counter() - start)
        small_rows.fast_kernels = probe
        plain = statistics.median(times["plain"])
        line = []
        for name, runs in times.items():
            if name != "plain":
                ratios.setdefault(name, []).append(plain / statistics.median(runs))
                identical += bool(torch.equal(outputs[name], outputs["plain"]))
                total += 1
                line.append(f"{name} {ratios[name][-1]:.2f}x")
        print(f"{prompt.id}: " + ", ".join(line), flush=True)
    print("\n| arm | layout | speed-up over plain generate (geometric mean) |\n|---|---|---|")
    for name, values in ratios.items():
        arm, layout = name.split(" / ")
        print(f"| {arm} | {layout} | {statistics.geometric_mean(values):.2f}x |")
    print(f"\ngreedy outputs identical to plain generate: {identical}/{total}")


if __name__ == "__main__":
    main()
