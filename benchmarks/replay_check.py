"""Replayed against decoded policy labels on the embedded default: for every candidate shape, does `collect
--replay` record the steps decoding records, and how much faster is it?

    python benchmarks/replay_check.py                         # 3 policy-split prompts per dataset
    python benchmarks/replay_check.py --limit 10 --drafter runs/drafter/drafter

Prints, per candidate, the share of prompts whose replayed acceptance lengths equal the decoded ones and the
pooled tau both ways, then the seconds each method took per prompt (plain greedy `generate` included in both).
"""

from __future__ import annotations

import argparse
import time

from tqdm.auto import tqdm

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.decoding.stats import mean_acceptance_length
from blockpilot_hf.drafter import DFlashDrafter
from blockpilot_hf.embedded import load_embedded, resolve_drafter
from blockpilot_hf.training.policy.collect import CollectItem, collect_prompt, replay_prompt
from blockpilot_hf.training.policy.config import CollectConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="gsm8k,humaneval,mt-bench")
    parser.add_argument("--limit", type=int, default=3, help="policy-split prompts per dataset (first turns)")
    parser.add_argument("--block-sizes", default="2,4,8")
    parser.add_argument("--shapes", default="1+lookup7,4+lookup4,8+lookup7")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--drafter", default="embedded", help="drafter folder or Hub id; 'embedded' = shipped")
    args = parser.parse_args()

    target, tokenizer, drafter, _ = load_embedded()
    if args.drafter != "embedded":
        drafter = DFlashDrafter.from_pretrained(resolve_drafter(args.drafter), dtype=target.dtype)
    config = CollectConfig(
        block_sizes=[int(b) for b in args.block_sizes.split(",")],
        shapes=args.shapes.split(","),
        max_new_tokens=args.max_new_tokens,
    )
    items = [
        CollectItem(p.id, p.source, chat_input_ids(tokenizer, p.turns[:1])[0].tolist())
        for name in args.datasets.split(",")
        for p in load_prompts(name, "policy", args.limit)
    ]
    same = {str(c): 0 for c in config.candidates}
    lengths = {(str(c), how): [] for c in config.candidates for how in ("decoded", "replayed")}
    seconds = {"decoded": 0.0, "replayed": 0.0}
    for item in tqdm(items, desc="decode and replay", unit="prompt"):
        for how, run in (("decoded", collect_prompt), ("replayed", replay_prompt)):
            start = time.perf_counter()
            record = run(target, drafter, item, config)
            seconds[how] += time.perf_counter() - start
            for r in record.runs:
                lengths[str(r.candidate), how].append(r.acceptance_lengths)
        for c in same:
            same[c] += lengths[c, "decoded"][-1] == lengths[c, "replayed"][-1]

    print(f"{len(items)} prompts, {args.max_new_tokens} new tokens, greedy")
    print("| candidate | identical steps | tau decoded | tau replayed |")
    print("|---|---|---|---|")
    for c in same:
        taus = [mean_acceptance_length([n for run in lengths[c, how] for n in run]) for how in ("decoded", "replayed")]
        print(f"| {c} | {same[c]}/{len(items)} | {taus[0]:.3f} | {taus[1]:.3f} |")
    per = {how: s / len(items) for how, s in seconds.items()}
    print(
        f"seconds per prompt: decoded {per['decoded']:.1f}, replayed {per['replayed']:.1f} "
        f"({per['decoded'] / per['replayed']:.1f}x faster)"
    )


if __name__ == "__main__":
    main()
