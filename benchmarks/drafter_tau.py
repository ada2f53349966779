"""Drafters compared on the same answers: tau per dataset and block size, replayed on the target's own answers to
held-out prompts (no timings, so the numbers do not depend on the machine's load).

    python benchmarks/drafter_tau.py                                     # the shipped drafter, 20 prompts per dataset
    python benchmarks/drafter_tau.py --drafters embedded,runs/drafter-v7/drafter --answers runs/eval-answers.jsonl

Each prompt turn (MT-Bench: both turns, the second asked after the target's own greedy reply, as `blockpilot bench`
asks it) is answered once by plain `generate` (greedy, or one sample per turn at --temperature); every drafter's
chains are then replayed on that answer (`training/replay.py`). At T=0 these are the acceptance lengths greedy
decoding with a fixed block size records, so tau here is the bench's fixed:N tau on the same turns. `--answers`
keeps the answers in a JSONL file: a later run with other drafters replays on them without decoding again.

At T > 0 a second table shows why sampled decoding gains less: the chance that a block's first draft is accepted.
Argmax drafts (the default) are accepted with the target's probability of the draft, at most the target's probability
of its own likeliest token (the ceiling of any argmax drafter; 1 at T=0). Drafts sampled from the drafter
(`draft_sampling=True`) are accepted with sum_x min(p(x), q(x)) (Leviathan et al., 2023), up to 1 for q = p.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from tqdm.auto import tqdm

from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.decoding.stats import mean_acceptance_length
from blockpilot_hf.drafter import DFlashDrafter
from blockpilot_hf.embedded import load_target, resolve_drafter
from blockpilot_hf.training.answers import AnswerCache, sampling_seed
from blockpilot_hf.training.drafter.target_features import context_features
from blockpilot_hf.training.policy.collect import answer_drafts, items_from_prompts
from blockpilot_hf.training.replay import draft_matches, replay_shape


def answers(target, tokenizer, args: argparse.Namespace) -> list[dict]:
    """Rows {id, source, start, tokens (S,)}: each prompt turn and the target's plain answer. With `--answers`,
    answers already in that file are read instead of decoded, and new ones appended."""
    cache = AnswerCache(target, args.max_new_tokens, args.answers)
    spec = ",".join(f"{name}:{args.split}" for name in args.datasets.split(","))
    rows = []
    for item in tqdm(items_from_prompts(tokenizer, spec, args.limit, cache.reply(tokenizer), args.turns), "answers"):
        input_ids = torch.tensor([item.input_ids])
        plain, _ = cache.answer(input_ids, args.temperature, sampling_seed(item.prompt_id))
        rows.append({"id": item.prompt_id, "source": item.source, "start": len(item.input_ids), "tokens": plain[0]})
    return rows


def drafter_taus(target, drafter, rows: list[dict], sizes: list[int], max_new_tokens: int) -> dict:
    """{(source, size): pooled tau} and {("all", size): ...} of `drafter`'s chains replayed on every answer."""
    shapes = [DraftShape(size) for size in sizes]
    lengths: dict[tuple[str, int], list[int]] = defaultdict(list)
    for row in tqdm(rows, desc="replay", unit="turn", leave=False):
        tokens = row["tokens"]
        matches, _ = answer_drafts(target, drafter, tokens, row["start"], shapes)
        for shape in shapes:
            steps = replay_shape(shape, tokens, row["start"], row["start"] + max_new_tokens, matches).acceptance_lengths
            lengths[(row["source"], shape.block_size)] += steps
            lengths[("all", shape.block_size)] += steps
    return {key: mean_acceptance_length(steps) for key, steps in lengths.items()}


@torch.inference_mode()
def first_draft_acceptance(target, drafter, rows: list[dict], temperature: float) -> dict[str, list[float]]:
    """{source: [argmax drafts, their ceiling, sampled drafts]}, chances that the first draft is accepted, averaged
    over every response position of `rows`: p(d) for the drafter's argmax d, max p, and sum min(p, q), with p the
    target's and q the drafter's next-token distribution at `temperature`."""
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    vocab_ids = drafter.draft_vocab_ids
    if vocab_ids is not None:
        head = head[vocab_ids.to(head.device)]
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for row in tqdm(rows, desc="first drafts", unit="turn", leave=False):
        tokens, start = row["tokens"], row["start"]
        anchors = torch.arange(start - 1, len(tokens) - 1, device=tokens.device)
        layer_ids = drafter.config.target_layer_ids
        out = target(tokens[None], output_hidden_states=[i + 1 for i in layer_ids], use_cache=False)  # one pass
        p = torch.softmax(out.logits[0, anchors].float() / temperature, dim=-1)  # (a, V)
        features = context_features(out.hidden_states, layer_ids)
        first = draft_matches(drafter, embed, head, vocab_ids, features, tokens, anchors, 2).first.float()
        q = torch.softmax(first / temperature, dim=-1)  # (a, V'), over the drafter's vocabulary
        if vocab_ids is not None:
            q = torch.zeros_like(p).index_copy_(1, vocab_ids.to(q.device), q)
        chances = (p.gather(1, q.argmax(-1, keepdim=True)), p.max(-1).values, torch.minimum(p, q).sum(-1))
        for source in (row["source"], "all"):
            for i, chance in enumerate(chances):
                sums[source][i] += chance.sum().item()
            sums[source][3] += len(anchors)
    return {source: [total / n for total in totals[:3]] for source, (*totals, n) in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafters", default="embedded", help="comma-separated drafter folders; 'embedded' = shipped")
    parser.add_argument("--datasets", default="gsm8k,humaneval,mt-bench")
    parser.add_argument("--split", default="eval", help="prompt split (eval, or policy)")
    parser.add_argument("--limit", type=int, default=20, help="prompts per dataset")
    parser.add_argument("--turns", type=int, default=2, help="turns per multi-turn prompt (MT-Bench)")
    parser.add_argument("--block-sizes", default="2,4,8")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy answers")
    parser.add_argument("--answers", default=None, help="JSONL file keeping the answers between runs")
    args = parser.parse_args()
    sizes = [int(s) for s in args.block_sizes.split(",")]
    target, tokenizer = load_target("smollm2")
    rows = answers(target, tokenizer, args)
    sources = sorted({row["source"] for row in rows}) + ["all"]
    turns = {source: sum(row["source"] == source for row in rows) for source in sources[:-1]}
    turns["all"] = len(rows)
    print(f"\ntau (mean tokens per target pass) of greedy chains, T={args.temperature:g}, {args.max_new_tokens} tokens")
    print("| drafter | block size | " + " | ".join(f"{s} ({turns[s]} turns)" for s in sources) + " |")
    print("|---|---|" + "---|" * len(sources))
    drafters = {
        name: DFlashDrafter.from_pretrained(resolve_drafter(name), dtype=target.dtype)
        for name in args.drafters.split(",")
    }
    for name, drafter in drafters.items():
        taus = drafter_taus(target, drafter, rows, sizes, args.max_new_tokens)
        for size in sizes:
            print(f"| {name} | {size} | " + " | ".join(f"{taus[(s, size)]:.2f}" for s in sources) + " |")
    if args.temperature > 0:
        print(
            f"\nfirst draft of a block accepted at T={args.temperature:g}: argmax drafts / their ceiling / sampled drafts"
        )
        print("| drafter | " + " | ".join(sources) + " |")
        print("|---|" + "---|" * len(sources))
        for name, drafter in drafters.items():
            accepted = first_draft_acceptance(target, drafter, rows, args.temperature)
            print(f"| {name} | " + " | ".join("{:.2f} / {:.2f} / {:.2f}".format(*accepted[s]) for s in sources) + " |")


if __name__ == "__main__":
    main()
