"""Drafter data regeneration: multi-turn chats answered turn by turn, greedy or sampled, resumable; self-instruct
guards."""

from __future__ import annotations

import torch

from blockpilot_hf.data import Prompt, chat_input_ids, load_prompts
from blockpilot_hf.jsonl import read_rows
from blockpilot_hf.testing_utils import tiny_target, tiny_tokenizer
from blockpilot_hf.training.drafter.regenerate import regenerate
from blockpilot_hf.training.drafter.selfinstruct import EvalGuard, clean_request


def test_second_turn_is_asked_after_the_targets_own_first_answer(tmp_path):
    target, tokenizer = tiny_target(enabled=False), tiny_tokenizer()
    prompts = [Prompt("t", "t/0", ("ab",)), Prompt("t", "t/1", ("cd", "ef"))]
    out = tmp_path / "regen.jsonl"
    regenerate(target, tokenizer, prompts, out, batch_size=2, max_new_tokens=5)
    rows = {row["id"]: row for row in read_rows(out)}
    assert sorted(rows) == ["t/0", "t/1", "t/1/turn2"]
    assert all(len(row["response_ids"]) == 5 for row in rows.values())  # the tiny target has no EOS
    first_answer = tokenizer.decode(rows["t/1"]["response_ids"])
    expected = chat_input_ids(tokenizer, ["cd", "ef"], [first_answer])[0].tolist()
    assert rows["t/1/turn2"]["prompt_ids"] == expected
    # Each answer is the target's greedy continuation of exactly its row's prompt.
    for row in rows.values():
        alone = target.generate(input_ids=torch.tensor([row["prompt_ids"]]), max_new_tokens=5, do_sample=False)
        assert alone[0, len(row["prompt_ids"]) :].tolist() == row["response_ids"]
    regenerate(target, tokenizer, prompts, out, batch_size=2, max_new_tokens=5)  # resume: nothing left to do
    assert len(read_rows(out)) == 3


def test_sampled_answers_are_marked_reproducible_and_not_greedy(tmp_path):
    target, tokenizer = tiny_target(enabled=False), tiny_tokenizer()
    prompts = [Prompt("t", f"t/{i}", ("ab" * (i + 1),)) for i in range(4)]
    greedy, sampled, again = (tmp_path / f"{name}.jsonl" for name in ("greedy", "sampled", "again"))
    regenerate(target, tokenizer, prompts, greedy, batch_size=2, max_new_tokens=8)
    regenerate(target, tokenizer, prompts, sampled, batch_size=2, max_new_tokens=8, temperature=1.0, seed=3)
    regenerate(target, tokenizer, prompts[:2], again, batch_size=2, max_new_tokens=8, temperature=1.0, seed=3)
    regenerate(target, tokenizer, prompts, again, batch_size=2, max_new_tokens=8, temperature=1.0, seed=3)  # resumed
    rows = read_rows(sampled)
    assert all(row["kind"] == "sampled" and row["temperature"] == 1.0 for row in rows)
    assert "kind" not in read_rows(greedy)[0]
    assert read_rows(again) == rows  # a job stopped between batches and resumed samples the same answers
    answers = {row["id"]: row["response_ids"] for row in read_rows(greedy)}
    assert any(row["response_ids"] != answers[row["id"]] for row in rows)


def test_eval_guard_drops_near_copies_of_benchmark_prompts_only():
    question = load_prompts("mt-bench", "eval", limit=1)[0].turns[0]
    guard = EvalGuard([Prompt("mt-bench", "q", (question,))])
    assert guard.rejects("Please, " + question)
    assert not guard.rejects("Write a limerick about a lighthouse keeper who loves jazz music on rainy days.")


def test_clean_request_strips_chatter_and_refuses_empty_text():
    assert clean_request('Sure, here is a request: "Write a poem about tea and friendship."') == (
        "Write a poem about tea and friendship."
    )
    assert clean_request("ok") is None
