"""Greedy decoding on the embedded default with SDPA's batched attention in the verify passes (a GPU's way) and,
where the engine uses it (bfloat16 on a CPU, `decoding/row_attention.py`), row by row: how many outputs stay
identical to plain `generate` in the same dtype, and the speed-up of each over it (arms interleaved per prompt,
repeated, medians).

    python benchmarks/row_attention.py                          # bfloat16, 3 eval prompts per dataset, ~10 minutes
    python benchmarks/row_attention.py --split policy --shapes 4,8+lookup7 --repeats 3
    python benchmarks/row_attention.py --dtypes float32,bfloat16 --limit 8 --batched-only \
        --out benchmarks/results/smollm2-135m-half-precision/identical.json

`--out` keeps the shares of other dtypes already in the file, so dtypes of different costs can be measured by
separate runs (float16 is slow on CPUs without float16 units); each share records its own prompts and command.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from blockpilot_hf.data import Prompt, chat_input_ids, load_prompts
from blockpilot_hf.decoding import row_attention
from blockpilot_hf.embedded import load_embedded
from blockpilot_hf.jsonfile import from_dict, load_json, save_json
from blockpilot_hf.policy.cost import device_name

BATCHED, ROWS = "batched", "row by row"


@dataclass
class Share:
    """How many greedy outputs of one dtype, draft shape and verify attention were identical to plain `generate`."""

    dtype: str
    shape: str
    attention: str
    identical: int
    total: int
    prompts: list[str]
    max_new_tokens: int
    cpu: str
    device: str
    command: str


@dataclass
class Shares:
    """The `--out` file: one `Share` per dtype, draft shape and attention."""

    shares: list[Share]

    def __post_init__(self) -> None:
        self.shares = [s if isinstance(s, Share) else from_dict(Share, s) for s in self.shares]

    def total(self, dtype: str, attention: str = BATCHED) -> tuple[int, int]:
        """(identical, total) over every shape measured in `dtype` with `attention`."""
        rows = [s for s in self.shares if s.dtype == dtype and s.attention == attention]
        return sum(s.identical for s in rows), sum(s.total for s in rows)


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, else `platform.processor()`."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor()


def identical_table(shares: Shares) -> list[str]:
    """Markdown rows: per dtype and attention, identical/total per shape and over all shapes."""
    shapes = list(dict.fromkeys(s.shape for s in shares.shares))
    arms = list(dict.fromkeys((s.dtype, s.attention) for s in shares.shares))
    cells = {(s.dtype, s.attention, s.shape): f"{s.identical}/{s.total}" for s in shares.shares}
    rows = ["| dtype | verify attention | " + " | ".join(shapes) + " | all |", "|---|---|" + "---|" * (len(shapes) + 1)]
    for dtype, attention in arms:
        identical, total = shares.total(dtype, attention)
        per_shape = [cells.get((dtype, attention, shape), "-") for shape in shapes]
        rows.append(f"| {dtype} | {attention} | " + " | ".join(per_shape) + f" | {identical}/{total} |")
    return rows


def attention_modes(target, batched_only: bool) -> dict:
    """The verify attentions to run: batched always, row by row where the engine would use it on `target`."""
    modes = {BATCHED: lambda model: False}
    if not batched_only and row_attention.wants_row_attention(target):
        modes[ROWS] = row_attention.wants_row_attention
    return modes


def compare_prompt(target, tokenizer, drafter, prompt: Prompt, shapes: list[str], modes: dict, args) -> dict:
    """{(shape, attention): (identical to plain generate, speed-up over it)} for one prompt's first turn."""
    input_ids = chat_input_ids(tokenizer, prompt.turns[:1])
    wanted = row_attention.wants_row_attention
    runs = [("plain", wanted, {})] + [
        ((shape, mode), choice, dict(assistant_model=drafter, block_policy=f"fixed:{shape}"))
        for shape in shapes
        for mode, choice in modes.items()
    ]
    times: dict = {}
    outputs = {}
    try:
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
    finally:
        row_attention.wants_row_attention = wanted
    plain = statistics.median(times.pop("plain"))
    return {
        name: (bool(torch.equal(outputs[name], outputs["plain"])), plain / statistics.median(samples))
        for name, samples in times.items()
    }


def measure_dtype(dtype: str, prompts: list[Prompt], args) -> list[Share]:
    """The shares of one dtype, printing each prompt's speed-ups and the table of speed-ups."""
    target, tokenizer, drafter, _ = load_embedded(getattr(torch, dtype))
    shapes = args.shapes.split(",")
    modes = attention_modes(target, args.batched_only)
    results = []
    for prompt in prompts:
        results.append(compare_prompt(target, tokenizer, drafter, prompt, shapes, modes, args))
        print(f"{dtype} {prompt.id}: " + ", ".join(f"{s} {m} {r:.2f}x" for (s, m), (_, r) in results[-1].items()))
    print(
        f"\n| shape | attention | identical to plain {dtype} generate | speed-up (geometric mean) |\n|---|---|---|---|"
    )
    context = dict(
        prompts=[p.id for p in prompts],
        max_new_tokens=args.max_new_tokens,
        cpu=cpu_model(),
        device=device_name(target.device),
        command=shlex.join(["python", *sys.argv]),
    )
    shares = []
    for name in results[0]:
        identical = sum(result[name][0] for result in results)
        speedup = statistics.geometric_mean(result[name][1] for result in results)
        print(f"| {name[0]} | {name[1]} | {identical}/{len(prompts)} | {speedup:.2f}x |", flush=True)
        shares.append(Share(dtype, *name, identical, len(prompts), **context))
    return shares


def merged(out: Path, shares: list[Share]) -> Shares:
    """The shares already in `out` of dtypes not measured now, then `shares`."""
    measured = {s.dtype for s in shares}
    kept = [s for s in load_json(Shares, out).shares if s.dtype not in measured] if out.is_file() else []
    return Shares(kept + shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=3, help="prompts per dataset (first turns)")
    parser.add_argument("--split", default="eval", help="prompt split: eval or policy")
    parser.add_argument("--shapes", default="4,8,8+tree12+lookup7", help="comma-separated draft shapes")
    parser.add_argument("--dtypes", default="bfloat16", help="comma-separated target dtypes")
    parser.add_argument("--batched-only", action="store_true", help="verify with batched attention only (a GPU's)")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per arm, interleaved")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, help="JSON file of the identical shares (kept for other dtypes)")
    args = parser.parse_args()
    prompts = [p for name in ("gsm8k", "humaneval", "mt-bench") for p in load_prompts(name, args.split, args.limit)]
    shares = [share for dtype in args.dtypes.split(",") for share in measure_dtype(dtype, prompts, args)]
    print("\n" + "\n".join(identical_table(Shares(shares))))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        save_json(merged(args.out, shares), args.out)


if __name__ == "__main__":
    main()
