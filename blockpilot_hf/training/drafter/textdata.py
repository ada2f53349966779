"""Extra drafter data without generation: existing text, labelled later by the target's own predictions.

    blockpilot text-data --out runs/regen/text.jsonl

Regenerating answers costs one target forward per token; labelling text costs one forward per sequence, so
text is the cheap way to more data. Rows carry `kind: text` and are never used to measure validation tau.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tqdm.auto import tqdm

from ...data import chat_input_ids, load_prompts
from ...data.prompts import DATASETS


def _gsm8k_rows(tokenizer):
    for prompt in load_prompts("gsm8k", "drafter"):
        answer = re.sub(r"<<[^>]*>>", "", prompt.meta["answer"])
        answer = re.sub(r"\n#### (.*)$", r"\nThe final answer is \\boxed{\1}.", answer)
        yield prompt.id, chat_input_ids(tokenizer, prompt.turns[:1])[0].tolist(), answer


def _raw_rows(source: str, chunk_chars: int = 900):
    for prompt in DATASETS[source]():
        text = prompt.text.split("```python\n", 1)[-1].rsplit("\n```", 1)[0] if source == "stdlib" else prompt.text
        for i in range(0, len(text), chunk_chars):
            yield f"{prompt.id}/{i}", [], text[i : i + chunk_chars]


def write_text_rows(tokenizer, out: Path, sources: list[str], limit_per_source: int | None = None) -> int:
    """Write {source, id, prompt_ids, response_ids, kind: text} rows; returns how many were written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w", encoding="utf-8") as f:
        for source in sources:
            rows = _gsm8k_rows(tokenizer) if source == "gsm8k" else _raw_rows(source)
            for n, (row_id, prompt_ids, text) in enumerate(tqdm(rows, desc=f"text:{source}")):
                if limit_per_source is not None and n >= limit_per_source:
                    break
                response = tokenizer(text, add_special_tokens=False)["input_ids"]
                if prompt_ids:
                    response = response + [tokenizer.eos_token_id]
                row = {
                    "source": f"text-{source}",
                    "id": f"text/{row_id}",
                    "prompt_ids": prompt_ids,
                    "response_ids": response,
                    "kind": "text",
                }
                f.write(json.dumps(row) + "\n")
                count += 1
    return count
