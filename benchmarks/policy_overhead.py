r"""Policy overhead and policy-vs-fixed speed, measured in one run: printed ratios, not a timed test.

    python benchmarks/policy_overhead.py --synthetic
    python benchmarks/policy_overhead.py --target smollm2 --drafter DRAFTER_DIR --policy POLICY_DIR \
        --prompts gsm8k:eval,humaneval:eval,mt-bench:eval --limit 20 --max-new-tokens 128 [--collected HELDOUT_DIR]

Live part: each prompt is generated with the policy, with the policy's best fixed size, with the drafter's training
size and with plain `generate`; wall time around each call. Printed per dataset: the policy's choosing time as a
share of its generate time, and tokens/s ratios. With --collected, the per-dataset measured tokens/s of the policy,
best fixed, training size and oracle choices on collected held-out records is printed too (evaluate-policy's view).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class Totals:
    """Summed wall time and tokens of one method on one dataset, plus the policy's own time."""

    seconds: float = 0.0
    tokens: int = 0
    policy_seconds: float = 0.0
    sizes: list[int] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def timed_generate(target, ids: torch.Tensor, max_new_tokens: int, **kwargs):
    start = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(
            input_ids=ids,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            return_dict_in_generate=True,
            **kwargs,
        )
    return out, time.perf_counter() - start


def measure(target, items, drafter_for, policy, max_new_tokens: int) -> dict[str, dict[str, Totals]]:
    """totals[source][method] for blockpilot, best fixed, training size and plain generate."""
    cfg = policy.config
    fixed = {
        f"best-fixed:{cfg.best_fixed_size}": cfg.best_fixed_size,
        f"training-size:{cfg.training_block_size}": cfg.training_block_size,
    }
    totals: dict[str, dict[str, Totals]] = defaultdict(lambda: defaultdict(Totals))
    timed_generate(target, torch.tensor([items[0].input_ids]), 4)  # warm-up
    for item in items:
        ids = torch.tensor([item.input_ids], device=target.device)
        plain, seconds = timed_generate(target, ids, max_new_tokens)
        new = plain.sequences.shape[1] - ids.shape[1]
        drafter = drafter_for(item, plain.sequences)
        runs = {"plain": (None, seconds)}
        runs["blockpilot"] = timed_generate(target, ids, max_new_tokens, assistant_model=drafter, block_policy=policy)
        for name, size in fixed.items():
            runs[name] = timed_generate(target, ids, max_new_tokens, assistant_model=drafter, block_size=size)
        for name, (out, secs) in runs.items():
            for source in (item.source, "all"):
                t = totals[source][name]
                t.seconds += secs
                t.tokens += new
                if out is not None:
                    assert torch.equal(out.sequences, plain.sequences), f"{name} changed the output of {item.prompt_id}"
                    t.policy_seconds += out.blockpilot.policy_time
                    t.sizes.append(out.blockpilot.block_size)
    return totals


def print_live(totals: dict[str, dict[str, Totals]]) -> None:
    print(
        "| dataset | prompts | policy time / generate time | policy vs best fixed | policy vs training size | policy vs plain | sizes chosen |"
    )
    print("|---|---|---|---|---|---|---|")
    for source in sorted(totals, key=lambda s: (s != "all", s)):
        t = totals[source]
        mine = t["blockpilot"]
        best = next(v for k, v in t.items() if k.startswith("best-fixed"))
        train = next(v for k, v in t.items() if k.startswith("training-size"))
        counts = ", ".join(f"{b}x{mine.sizes.count(b)}" for b in sorted(set(mine.sizes)))
        print(
            f"| {source} | {len(mine.sizes)} | {mine.policy_seconds / mine.seconds:.3%} | {mine.tokens_per_second / best.tokens_per_second:.3f} | "
            f"{mine.tokens_per_second / train.tokens_per_second:.3f} | {mine.tokens_per_second / t['plain'].tokens_per_second:.3f} | {counts} |"
        )


def print_collected(policy, collected: Path) -> None:
    """Measured tokens/s per dataset of the policy, best fixed, training size and oracle on collected records."""
    from blockpilot_hf.training.policy.collected import collected_cost, read_records
    from blockpilot_hf.training.policy.evaluate import evaluate_records

    meta, records = read_records(collected)
    report = evaluate_records(policy, records, collected_cost(meta, records))
    print("\n| dataset | method | tok/s (measured, collected) | vs oracle |\n|---|---|---|---|")
    for source in sorted({s.source for s in report.scores}, key=lambda s: (s != "all", s)):
        oracle = report.score("oracle", source).tokens_per_second
        for s in report.scores:
            if s.source == source and (
                s.method in ("blockpilot", "oracle") or s.method.startswith(("best-fixed", "training-size"))
            ):
                print(f"| {source} | {s.method} | {s.tokens_per_second:.1f} | {s.tokens_per_second / oracle:.3f} |")


def synthetic_setup(max_new_tokens: int):
    """Tiny target, per-prompt oracle drafters, and a policy trained on the synthetic task with measured costs."""
    from blockpilot_hf.testing_utils import oracle_factory, synthetic_items, tiny_pair
    from blockpilot_hf.training.policy.collect import CollectConfig, collect
    from blockpilot_hf.training.policy.fit import FitConfig, train_policy

    torch.set_num_threads(1)
    target, drafter = tiny_pair()
    factory = oracle_factory(drafter)
    root = Path(tempfile.mkdtemp(prefix="blockpilot-overhead-"))
    config = CollectConfig(block_sizes=[2, 4, 8], max_new_tokens=max_new_tokens)
    collect(target, factory, synthetic_items(24, seed=0), root / "train", config, meta_drafter=drafter)
    collect(
        target,
        factory,
        synthetic_items(12, seed=1, prefix="held"),
        root / "heldout",
        config,
        meta_drafter=drafter,
    )
    policy = train_policy(root / "train", root / "policy", FitConfig(heldout_fraction=0.0, name="synthetic"))
    return target, synthetic_items(12, seed=2, prefix="bench"), factory, policy, root / "heldout"


def real_setup(args):
    from blockpilot_hf import BlockPolicy, DFlashDrafter, enable
    from blockpilot_hf.embedded import load_target
    from blockpilot_hf.training.policy.collect import items_from_prompts

    target, tokenizer = load_target(args.target)
    drafter = DFlashDrafter.from_pretrained(args.drafter, dtype=target.dtype).to(target.device)
    items = items_from_prompts(tokenizer, args.prompts, args.limit)
    return (
        enable(target),
        items,
        (lambda item, reference: drafter),
        BlockPolicy.from_pretrained(args.policy),
        args.collected,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", action="store_true", help="tiny random models and the synthetic two-kind task")
    parser.add_argument("--target", default="smollm2")
    parser.add_argument("--drafter")
    parser.add_argument("--policy")
    parser.add_argument("--prompts", default="gsm8k:eval,humaneval:eval,mt-bench:eval")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: 12 synthetic, 128 real")
    parser.add_argument(
        "--collected", type=Path, default=None, help="held-out collect folder for the oracle comparison"
    )
    args = parser.parse_args()
    if args.synthetic:
        new = args.max_new_tokens or 12
        target, items, drafter_for, policy, collected = synthetic_setup(new)
    else:
        if not (args.drafter and args.policy):
            parser.error("--drafter and --policy are required without --synthetic")
        new = args.max_new_tokens or 128
        target, items, drafter_for, policy, collected = real_setup(args)
    print(
        f"policy {policy.config.name}: {policy.num_parameters():,} parameters, sizes {policy.config.candidate_sizes}, "
        f"best fixed {policy.config.best_fixed_size}, training size {policy.config.training_block_size}; {len(items)} prompts, {new} new tokens\n"
    )
    print_live(measure(target, items, drafter_for, policy, new))
    if collected is not None:
        print_collected(policy, collected)


if __name__ == "__main__":
    main()
