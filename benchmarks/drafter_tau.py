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

What caps tau, per dataset and drafter, in two more tables: the share of the answers' tokens outside the drafter's
draft vocabulary (`draft_vocab_ids`; no such list = the full vocabulary, share 0), which no draft can ever match;
and acceptance by position in the block at the largest block size (8), from the same replayed steps: at position i,
the share of blocks whose i-th draft was accepted given the i-1 before it were (conditional), and the share whose
first i drafts were all accepted (unconditional, about the product of the conditionals). A block counts at position i
only if it had an i-th draft inside the answer and the length limit. `--out` writes every table, with the command
line, the drafters compared and the prompt and turn counts, as one JSON file.

    python benchmarks/drafter_tau.py --drafters embedded,$HOME/.cache/blockpilot_hf/drafter-snapshot \\
        --temperature 1 --answers $HOME/.cache/blockpilot_hf/eval-answers-t1.jsonl --out tau-t1.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from blockpilot_hf.constants import portable_id
from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.decoding.stats import mean_acceptance_length
from blockpilot_hf.drafter import DFlashDrafter
from blockpilot_hf.embedded import load_target, resolve_drafter
from blockpilot_hf.jsonfile import save_json
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


@dataclass
class Replayed:
    """One drafter's chains replayed on every answer: tau per (source, block size), and the chain steps of the
    largest block size as (drafts offered inside the answer and the length limit, drafts accepted)."""

    taus: dict[tuple[str, int], float]
    steps: dict[str, list[tuple[int, int]]]


def recording(matches, end: int, steps: list[tuple[int, int]]):
    """`matches` (p, k) -> accepted drafts, also appending (drafts offered, accepted) to `steps`: of a block's k-1
    drafts, those past the answer's last position `end` never match, so they are not counted as offered."""

    def chain_matches(p: int, k: int) -> int:
        accepted = matches(p, k)
        steps.append((min(k - 1, end - p), accepted))
        return accepted

    return chain_matches


def replay_drafter(target, drafter, rows: list[dict], sizes: list[int], max_new_tokens: int) -> Replayed:
    """`drafter`'s chains replayed on every answer, per source and pooled ("all")."""
    shapes = [DraftShape(size) for size in sizes]
    lengths: dict[tuple[str, int], list[int]] = defaultdict(list)
    steps: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in tqdm(rows, desc="replay", unit="turn", leave=False):
        tokens, start = row["tokens"], row["start"]
        matches, _ = answer_drafts(target, drafter, tokens, start, shapes)
        for shape in shapes:
            recorded: list[tuple[int, int]] = []
            chain_matches = recording(matches, len(tokens) - 1, recorded)
            replayed = replay_shape(shape, tokens, start, start + max_new_tokens, chain_matches).acceptance_lengths
            for source in (row["source"], "all"):
                lengths[(source, shape.block_size)] += replayed
                if shape.block_size == max(sizes):
                    steps[source] += recorded
    return Replayed({key: mean_acceptance_length(steps_k) for key, steps_k in lengths.items()}, steps)


def acceptance_by_position(steps: list[tuple[int, int]], block_size: int) -> dict[str, list]:
    """Per draft position 1..block_size-1 of chain `steps` (offered, accepted): the share of blocks whose draft
    there was accepted given all earlier ones were (conditional), the share whose drafts up to there were all
    accepted (unconditional), and how many blocks had a draft there (the unconditional share's denominator). A
    share without blocks is None."""
    conditional, unconditional, blocks = [], [], []
    for i in range(1, block_size):
        offered = [accepted for n, accepted in steps if n >= i]
        reached = [accepted for accepted in offered if accepted >= i - 1]
        conditional.append(sum(a >= i for a in reached) / len(reached) if reached else None)
        unconditional.append(sum(a >= i for a in offered) / len(offered) if offered else None)
        blocks.append(len(offered))
    return {"conditional": conditional, "unconditional": unconditional, "blocks": blocks}


def out_of_vocab_share(drafter, rows: list[dict]) -> dict[str, float]:
    """{source: share of the answers' tokens outside the drafter's draft vocabulary} (0 without one), and "all"."""
    vocab_ids = drafter.draft_vocab_ids
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        answer = row["tokens"][row["start"] :]
        outside = 0 if vocab_ids is None else int((~torch.isin(answer, vocab_ids.to(answer.device))).sum())
        for source in (row["source"], "all"):
            counts[source][0] += outside
            counts[source][1] += len(answer)
    return {source: outside / n for source, (outside, n) in counts.items()}


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


@dataclass
class TauReport:
    """What `--out` writes: the settings, and per drafter and source ("all": pooled) every table printed. Keys of
    block sizes are strings, as JSON keeps them."""

    command: str
    temperature: float
    split: str
    datasets: list[str]
    prompts_per_dataset: int  # --limit
    turns_per_prompt: int  # --turns (MT-Bench)
    max_new_tokens: int
    block_sizes: list[int]
    drafters: dict[str, dict]  # name -> {"path", "draft_vocab_size" (None: full), "step" (progress.json, or None)}
    prompts: dict[str, int]  # per source
    turns: dict[str, int]  # answered turns per source, and "all"
    answer_tokens: dict[str, int]
    tau: dict[str, dict[str, dict[str, float]]]  # drafter -> source -> block size -> tau
    out_of_vocab: dict[str, dict[str, float]]  # drafter -> source -> share of answer tokens
    position_block_size: int
    by_position: dict[str, dict[str, dict[str, list]]]  # drafter -> source -> acceptance_by_position
    first_draft: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # T > 0: drafter -> source ->
    # {"argmax", "ceiling", "sampled"}


def drafter_entry(folder: Path, drafter) -> dict:
    """How `--out` names a drafter: its folder, draft vocabulary size and training step (progress.json, if kept)."""
    progress = folder / "progress.json"
    step = json.loads(progress.read_text())["step"] if progress.is_file() else None
    vocab_ids = drafter.draft_vocab_ids
    return {
        "path": portable_id(str(folder)),
        "draft_vocab_size": None if vocab_ids is None else len(vocab_ids),
        "step": step,
    }


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(title: str, columns: list[str], rows: list[tuple[str, list[str]]], first: str = "drafter") -> None:
    """Print a markdown table: `first` (label columns, "|"-separated) and `columns`, one row per (label, cells)."""
    print(f"\n{title}")
    print(f"| {first} | " + " | ".join(columns) + " |")
    print("|" + "---|" * (first.count("|") + 1 + len(columns)))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(cells) + " |")


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
    parser.add_argument("--out", type=Path, default=None, help="JSON file of every table and the settings")
    args = parser.parse_args()
    sizes = [int(s) for s in args.block_sizes.split(",")]
    target, tokenizer = load_target("smollm2")
    rows = answers(target, tokenizer, args)
    sources = sorted({row["source"] for row in rows}) + ["all"]
    turns = {source: sum(row["source"] == source for row in rows) for source in sources[:-1]}
    turns["all"] = len(rows)
    folders = {name: resolve_drafter(name) for name in args.drafters.split(",")}
    drafters = {name: DFlashDrafter.from_pretrained(folder, dtype=target.dtype) for name, folder in folders.items()}
    report = TauReport(
        command=shlex.join(["python", *sys.argv]),
        temperature=args.temperature,
        split=args.split,
        datasets=args.datasets.split(","),
        prompts_per_dataset=args.limit,
        turns_per_prompt=args.turns,
        max_new_tokens=args.max_new_tokens,
        block_sizes=sizes,
        drafters={name: drafter_entry(folders[name], drafter) for name, drafter in drafters.items()},
        prompts={s: sum(r["source"] == s and "/turn" not in r["id"] for r in rows) for s in sources[:-1]},  # turn 1
        turns=turns,
        answer_tokens={
            s: sum(len(r["tokens"]) - r["start"] for r in rows if s in (r["source"], "all")) for s in sources
        },
        tau={},
        out_of_vocab={},
        position_block_size=max(sizes),
        by_position={},
    )
    for name, drafter in drafters.items():
        replayed = replay_drafter(target, drafter, rows, sizes, args.max_new_tokens)
        report.tau[name] = {s: {str(size): replayed.taus[(s, size)] for size in sizes} for s in sources}
        report.by_position[name] = {s: acceptance_by_position(replayed.steps[s], max(sizes)) for s in sources}
        report.out_of_vocab[name] = out_of_vocab_share(drafter, rows)
    table(
        f"tau (mean tokens per target pass) of greedy chains, T={args.temperature:g}, {args.max_new_tokens} tokens",
        [f"{s} ({turns[s]} turns)" for s in sources],
        [
            (f"{name} | {size}", [f"{report.tau[name][s][str(size)]:.2f}" for s in sources])
            for name in drafters
            for size in sizes
        ],
        first="drafter | block size",
    )
    table(
        "share of the answers' tokens outside the drafter's draft vocabulary (never draftable)",
        sources,
        [(name, [f"{report.out_of_vocab[name][s]:.3f}" for s in sources]) for name in drafters],
    )
    positions = range(1, max(sizes))
    for kind in ("conditional", "unconditional"):
        table(
            f"acceptance by position in the block at block size {max(sizes)}, {kind}: "
            + ("draft i accepted given drafts 1..i-1 were" if kind == "conditional" else "drafts 1..i all accepted"),
            [f"i={i}" for i in positions],
            [
                (f"{name} | {s}", [share(report.by_position[name][s][kind][i - 1]) for i in positions])
                for name in drafters
                for s in sources
            ],
            first="drafter | dataset",
        )
    if args.temperature > 0:
        for name, drafter in drafters.items():
            accepted = first_draft_acceptance(target, drafter, rows, args.temperature)
            report.first_draft[name] = {
                s: dict(zip(("argmax", "ceiling", "sampled"), accepted[s], strict=True)) for s in sources
            }
        table(
            f"first draft of a block accepted at T={args.temperature:g}: argmax drafts / their ceiling / sampled drafts",
            sources,
            [
                (
                    name,
                    [
                        "{argmax:.2f} / {ceiling:.2f} / {sampled:.2f}".format(**report.first_draft[name][s])
                        for s in sources
                    ],
                )
                for name in drafters
            ],
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        save_json(report, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
