"""Self-instruct chat prompts written by the target itself, for drafter training data that looks like chat.

    blockpilot self-instruct --out runs/regen/self-instruct.jsonl --per-category 200

The target is asked (with sampling, for variety) to write a user request for each MT-Bench category from a
topic and a form picked at random, then a follow-up second turn for it. Evaluation prompts are never shown to
it, and any request that shares too many word trigrams with a benchmark prompt is dropped. The output is a
prompt JSONL (`source`, `id`, `turns`) that `blockpilot regenerate --sources FILE` answers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...data import Prompt, chat_input_ids, load_prompts
from ...jsonl import JsonlWriter, read_rows
from .regenerate import left_padded

TOPICS = (
    "the ocean",
    "coffee",
    "a small town",
    "trains",
    "gardening",
    "the moon",
    "friendship",
    "a bakery",
    "winter",
    "volcanoes",
    "bicycles",
    "a library",
    "honey bees",
    "the internet",
    "a museum",
    "rain forests",
    "chess",
    "electric cars",
    "a birthday party",
    "mountains",
    "recycling",
    "a job interview",
    "dinosaurs",
    "jazz music",
    "a hospital",
    "space travel",
    "a soccer match",
    "climate change",
    "a farmer's market",
    "robots",
    "the desert",
    "a wedding",
    "smartphones",
    "ancient Egypt",
    "a camping trip",
    "vaccines",
    "a city park",
    "photography",
    "a restaurant",
    "earthquakes",
    "a school",
    "the Roman Empire",
    "solar panels",
    "a lost dog",
    "tea",
    "social media",
    "a startup company",
    "the human heart",
    "a rainy day",
    "airports",
    "a river",
    "cheese",
    "a concert",
    "bridges",
    "meditation",
    "a detective",
    "an island",
    "time management",
    "a zoo",
    "bread",
    "the stock market",
    "a haunted house",
    "clouds",
    "a marathon",
    "video games",
    "a castle",
    "a pharmacy",
    "forests",
    "a hotel",
    "the printing press",
    "a lighthouse",
    "penguins",
    "online shopping",
    "a dragon",
    "public transport",
    "a thunderstorm",
    "a science fair",
    "a bookstore",
    "bees and flowers",
    "old letters",
)

# Category -> (instruction to the target, forms it is filled with). "{topic}" and "{form}" are substituted.
CATEGORIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "writing": (
        "Write a request from a user who asks an AI assistant to write {form} about {topic}.",
        (
            "a short story",
            "a poem",
            "a blog post",
            "a persuasive essay",
            "an email",
            "a speech",
            "a letter",
            "a product description",
            "a travel guide",
            "a news article",
        ),
    ),
    "roleplay": (
        "Write a request from a user who asks an AI assistant to pretend to be {form} and talk about {topic}.",
        (
            "a pirate",
            "a famous scientist",
            "a tour guide",
            "a grumpy chef",
            "a detective",
            "a medieval knight",
            "a kind teacher",
            "a sports coach",
            "a talking cat",
            "a time traveler",
        ),
    ),
    "reasoning": (
        "Write {form} about {topic} that a user asks an AI assistant to solve.",
        (
            "a logic puzzle",
            "a riddle",
            "a question that needs careful step-by-step thinking",
            "a puzzle about ordering people in a line",
            "a question about cause and effect",
        ),
    ),
    "math": (
        "Write {form} about {topic} that a user asks an AI assistant to solve step by step.",
        (
            "a math word problem",
            "an algebra question",
            "a probability question",
            "a geometry question",
            "a question about percentages",
            "an arithmetic puzzle",
        ),
    ),
    "coding": (
        "Write a request from a user who asks an AI assistant to {form} related to {topic}.",
        (
            "write a Python function",
            "write a Python class",
            "fix a bug in a short Python program",
            "write a SQL query",
            "explain a piece of code",
            "write a JavaScript function",
            "write a shell script",
        ),
    ),
    "extraction": (
        "Write a short paragraph about {topic}, then a request from a user who asks an AI assistant to {form}.",
        (
            "extract all names and dates from it",
            "summarize it in one sentence",
            "list the key facts as JSON",
            "pull out every number and what it measures",
            "classify its tone",
        ),
    ),
    "stem": (
        "Write a question that a curious student asks an AI assistant about the {form} of {topic}.",
        ("physics", "chemistry", "biology", "engineering", "statistics", "computer science"),
    ),
    "humanities": (
        "Write a question that a curious student asks an AI assistant about the {form} of {topic}.",
        ("history", "philosophy", "economics", "culture", "ethics", "literature"),
    ),
}
FOLLOW_UP = 'A user asked an AI assistant: "{turn}"\nWrite the short follow-up request the user sends next.'
REPLY_ONLY = " Reply with the request only."


def trigrams(text: str) -> set[tuple[str, ...]]:
    """Lower-cased word trigrams: the unit of the near-duplicate check."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return set(zip(words, words[1:], words[2:], strict=False))


class EvalGuard:
    """Rejects texts that share more than `max_overlap` of their trigrams with any benchmark prompt."""

    def __init__(self, prompts: Iterable[Prompt], max_overlap: float = 0.3):
        self.grams = [g for p in prompts for turn in p.turns if (g := trigrams(turn))]
        self.max_overlap = max_overlap

    def rejects(self, text: str) -> bool:
        mine = trigrams(text)
        return bool(mine) and any(len(mine & g) / min(len(mine), len(g)) > self.max_overlap for g in self.grams)


def held_out_prompts() -> list[Prompt]:
    """Every prompt that must never shape the drafter: benchmark eval and policy splits."""
    held = []
    for source in ("gsm8k", "humaneval", "mt-bench"):
        held += load_prompts(source, "eval") + load_prompts(source, "policy")
    return held


def clean_request(text: str) -> str | None:
    """Strip the chatter a small model wraps a request in; None when nothing usable is left."""
    text = re.sub(r"^\s*(sure|here is|here's|request|user|question)[^:\n]*:\s*", "", text, flags=re.IGNORECASE)
    text = text.strip().strip('"').strip()
    return text if 20 <= len(text) <= 1200 else None


@torch.inference_mode()
def sample_replies(model, tokenizer, instructions: list[str], max_new_tokens: int, generator_seed: int) -> list[str]:
    """One sampled reply per instruction (batched, left-padded)."""
    torch.manual_seed(generator_seed)
    inputs = left_padded(tokenizer, [chat_input_ids(tokenizer, [text])[0] for text in instructions], model.device)
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0, top_p=0.95)
    out = out[:, inputs["input_ids"].shape[1] :]
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def write_self_instruct(
    model, tokenizer, out: Path, per_category: int, batch_size: int = 32, two_turn_share: float = 0.5, seed: int = 0
) -> int:
    """Append `per_category` target-written prompts per category to `out` (resumable by id); returns rows added."""
    done = {row["id"] for row in read_rows(out)}
    guard = EvalGuard(held_out_prompts())
    rng = random.Random(seed)
    plan = []  # (id, category, instruction, wants a second turn)
    for category, (template, forms) in CATEGORIES.items():
        for i in range(per_category):
            text = template.format(topic=rng.choice(TOPICS), form=rng.choice(forms)) + REPLY_ONLY
            plan.append((f"self-instruct/{category}/{seed}/{i}", category, text, rng.random() < two_turn_share))
    plan = [p for p in plan if p[0] not in done]
    rng.shuffle(plan)
    writer, added = JsonlWriter(out), 0
    for start in tqdm(range(0, len(plan), batch_size), desc="self-instruct", unit="batch"):
        batch = plan[start : start + batch_size]
        firsts = sample_replies(model, tokenizer, [p[2] for p in batch], 160, seed + start)
        firsts = [clean_request(t) for t in firsts]
        asks = [(p, t) for p, t in zip(batch, firsts, strict=True) if t and not guard.rejects(t)]
        want_second = [(p, t) for p, t in asks if p[3]]
        seconds = (
            sample_replies(
                model, tokenizer, [FOLLOW_UP.format(turn=t[:400]) for _, t in want_second], 64, seed + start + 1
            )
            if want_second
            else []
        )
        second_of = {p[0]: clean_request(s) for (p, _), s in zip(want_second, seconds, strict=True)}
        rows = []
        for p, first in asks:
            second = second_of.get(p[0])
            turns = [first] + ([second] if second and not guard.rejects(second) else [])
            rows.append({"source": f"self-instruct/{p[1]}", "id": p[0], "turns": turns})
        writer.append(*rows)
        added += len(rows)
    return added
