"""What bf16 autocast does to the drafter training's target pass on this machine: `train-drafter`'s
`--mixed-precision auto` picks bf16 only where the device computes bfloat16 natively; this checks that choice.

    python benchmarks/autocast_cost.py               # 600 tokens, 6 interleaved pairs, the first dropped

One forward of the embedded target (float32 weights) over random tokens with all hidden states, as the feature
pass runs it, with and without `torch.autocast(bfloat16)`, alternating; medians and their ratio are printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from blockpilot_hf.embedded import load_target
from blockpilot_hf.training.drafter.cli import resolve_mixed_precision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    model, _ = load_target("smollm2", torch.float32, "cpu")
    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens))
    seconds: dict[str, list[float]] = {"float32": [], "bf16 autocast": []}
    with torch.no_grad():
        for _ in range(args.repeats):
            for arm, times in seconds.items():
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm != "float32"):
                    model(ids, output_hidden_states=True)
                times.append(time.perf_counter() - start)
    medians = {arm: statistics.median(times[1:]) for arm, times in seconds.items()}
    for arm, median in medians.items():
        print(f"{arm:>14}: {median:.3f} s per pass over {args.tokens} tokens")
    print(f"bf16 autocast / float32: {medians['bf16 autocast'] / medians['float32']:.2f}x the time")
    print(f"--mixed-precision auto here: {resolve_mixed_precision('auto')}, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
