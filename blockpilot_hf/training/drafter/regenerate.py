"""Regenerate drafter training data: the target's own answers to offline prompts, batched and resumable.

    blockpilot regenerate --out runs/regen/smollm2.jsonl --sources gsm8k,humaneval,stdlib
    blockpilot regenerate --out runs/regen/sampled.jsonl --temperature 1   # what the drafter meets when sampling

Each finished prompt appends one JSON line {source, id, prompt_ids, response_ids}; rerunning skips the ids
already written, and a half-written last line (a crash) is ignored, so the job can stop and resume at will.
Greedy answers are what decoding at T=0 produces. Sampled answers (`temperature` > 0, rows with `kind: sampled`)
wander where greedy ones never go, after every unlikely token the target draws; a drafter trained on both
knows the contexts it meets when decoding samples.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...data import chat_input_ids, left_padded, load_prompts, turn_id
from ...generation import sampling_kwargs
from ...jsonl import JsonlWriter, read_rows
from ..answers import sampling_seed


def regenerate(
    model,
    tokenizer,
    prompts,
    out: Path,
    batch_size: int = 16,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int = 0,
) -> None:
    """Generate answers for `prompts` (skipping those already in `out`) and append them to `out`: greedy at
    `temperature` 0, else one sample each at `temperature` (a batch's samples fixed by `seed` and its first id).

    A prompt with several turns gives one row per turn: turn t is asked after the target's own answers to the
    turns before it (as MT-Bench does), and its row id gets a `/turn<t>` suffix from the second turn on.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {row["id"] for row in read_rows(out)}
    writer = JsonlWriter(out)
    todo = [p for p in prompts if p.id not in done]
    tokenizer.padding_side = "left"
    bar = tqdm(total=len(todo), desc="regenerate", unit="prompt")
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        answers: list[list[str]] = [[] for _ in batch]
        rows = []
        torch.manual_seed(seed + sampling_seed(batch[0].id))  # a resumed job samples a batch as a fresh one would
        for turn in range(max(len(p.turns) for p in batch)):
            asked = [i for i, p in enumerate(batch) if turn < len(p.turns)]
            encoded = [chat_input_ids(tokenizer, batch[i].turns[: turn + 1], answers[i])[0] for i in asked]
            for i, ids, response in zip(
                asked, encoded, answer_batch(model, tokenizer, encoded, max_new_tokens, temperature), strict=True
            ):
                answers[i].append(tokenizer.decode(response, skip_special_tokens=True))
                rows.append(
                    {
                        "source": batch[i].source,
                        "id": turn_id(batch[i].id, turn + 1),
                        "prompt_ids": ids.tolist(),
                        "response_ids": response,
                        **({"kind": "sampled", "temperature": temperature} if temperature > 0 else {}),
                    }
                )
        writer.append(*rows)
        bar.update(len(batch))
    bar.close()


@torch.inference_mode()
def answer_batch(
    model, tokenizer, encoded: list[torch.Tensor], max_new_tokens: int, temperature: float = 0.0
) -> list[list[int]]:
    """The target's answers (each cut after its EOS) to token-id prompts, left-padded into one batch: greedy at
    `temperature` 0, else sampled from its full distribution at `temperature`."""
    inputs = left_padded(tokenizer, encoded, model.device)
    generated = model.generate(**inputs, max_new_tokens=max_new_tokens, **sampling_kwargs(temperature))
    eos = tokenizer.eos_token_id
    return [_cut_after_eos(answer, eos) for answer in generated[:, inputs["input_ids"].shape[1] :].tolist()]


def _cut_after_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def drafter_prompts(sources: list[str], per_source: int | None, seed: int = 0):
    """The drafter split of each source (at most `per_source` each), shuffled together so that a job stopped
    at any point has answered every source in proportion."""
    prompts = [p for source in sources for p in load_prompts(source, "drafter", per_source)]
    random.Random(seed).shuffle(prompts)
    return prompts
