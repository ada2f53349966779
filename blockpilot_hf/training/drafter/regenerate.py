"""Regenerate drafter training data: the target's own greedy answers to offline prompts, batched and resumable.

    blockpilot regenerate --out runs/regen/smollm2.jsonl --sources gsm8k,humaneval,stdlib

Each finished prompt appends one JSON line {source, id, prompt_ids, response_ids}; rerunning skips the ids
already written, and a half-written last line (a crash) is ignored, so the job can stop and resume at will.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...data import chat_input_ids, load_prompts
from ...jsonl import JsonlWriter, read_rows


def regenerate(model, tokenizer, prompts, out: Path, batch_size: int = 16, max_new_tokens: int = 256) -> None:
    """Greedy-generate answers for `prompts` (skipping those already in `out`) and append them to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {row["id"] for row in read_rows(out)}
    writer = JsonlWriter(out)
    todo = [p for p in prompts if p.id not in done]
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    bar = tqdm(total=len(todo), desc="regenerate", unit="prompt")
    # Similar lengths in one batch waste less padding.
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        encoded = [chat_input_ids(tokenizer, p.turns[:1])[0] for p in batch]
        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(batch), width), pad)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, width - len(ids) :] = ids
            attention_mask[row, width - len(ids) :] = 1
        with torch.inference_mode():
            generated = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )[:, width:]
        writer.append(
            *(
                {"source": p.source, "id": p.id, "prompt_ids": ids.tolist(), "response_ids": _cut_after_eos(a, eos)}
                for p, ids, a in zip(batch, encoded, generated.tolist(), strict=True)
            )
        )
        bar.update(len(batch))
    bar.close()


def _cut_after_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def drafter_prompts(sources: list[str], per_source: int | None, seed: int = 0):
    """The drafter split of each source; the first source comes first, the others are shuffled together."""
    first, rest = load_prompts(sources[0], "drafter", per_source), []
    for source in sources[1:]:
        rest += load_prompts(source, "drafter", per_source)
    random.Random(seed).shuffle(rest)
    return first + rest


def main(argv: list[str] | None = None) -> None:
    from ...cli import main as cli_main

    cli_main(["regenerate", *(argv if argv is not None else __import__("sys").argv[1:])])


if __name__ == "__main__":
    main()
