"""`collect`: what a row holds, resuming after a crash without duplicates or losses, damaged files."""

import json

import pytest

from blockpilot_hf.data import chat_input_ids, load_prompts
from blockpilot_hf.testing_utils import oracle_factory, synthetic_items, tiny_pair, tiny_tokenizer
from blockpilot_hf.training.policy.collect import CollectConfig, collect, items_from_prompts
from blockpilot_hf.training.policy.collected import read_records, shard_path

pytestmark = pytest.mark.usefixtures("private_cost_cache")

CONFIG = CollectConfig(block_sizes=[4], max_new_tokens=6)


def test_collected_rows_hold_the_known_answers(task):
    assert task.meta.block_sizes == [1, 2, 4, 8]  # size 1 is always added
    assert len(task.train) == 24 and len({r.prompt_id for r in task.train}) == 24
    for record in task.train:
        assert all(run.matches_greedy for run in record.runs)
        assert len(record.features) == task.policy.config.features.size
        taus = record.chain_taus()
        assert taus[1] == 1.0
        if record.source == "easy":  # perfect drafts: 11 tokens after the first one, committed 8 + 3 at size 8
            assert taus[8] == pytest.approx(5.5) and record.run(8).acceptance_lengths == [8, 3]
        else:  # always-wrong drafts: one token per step at every size
            assert set(taus.values()) == {1.0}
        for run in record.runs:
            assert run.step_seconds > 0 and run.tokens_per_second > 0 and run.new_tokens == 12


class Crash(RuntimeError):
    pass


def crashing_factory(drafter, after: int):
    """A drafter factory that raises (like a killed job) when asked for prompt number `after`."""
    make, calls = oracle_factory(drafter), []

    def factory(item, reference):
        calls.append(item.prompt_id)
        if len(calls) > after:
            raise Crash("simulated interruption")
        return make(item, reference)

    return factory


def test_collect_resumes_without_duplicates_or_losses(tmp_path):
    target, drafter = tiny_pair()
    items = synthetic_items(5, seed=3)
    with pytest.raises(Crash):
        collect(target, crashing_factory(drafter, after=2), items, tmp_path, CONFIG, meta_drafter=drafter)
    _, first = read_records(tmp_path)
    assert [r.prompt_id for r in first] == [i.prompt_id for i in items[:2]]
    # A torn half-line, as a kill in the middle of a write leaves it:
    with shard_path(tmp_path, 0).open("a") as f:
        f.write('{"prompt_id": "syn/3/2", "sour')
    _, still = read_records(tmp_path)
    assert len(still) == 2  # the torn line is tolerated
    new = collect(target, oracle_factory(drafter), items, tmp_path, CONFIG, meta_drafter=drafter)
    assert [r.prompt_id for r in new] == [i.prompt_id for i in items[2:]]  # only the missing ones ran
    _, rows = read_records(tmp_path)
    assert [r.prompt_id for r in rows] == [i.prompt_id for i in items]  # nothing lost, nothing twice
    assert rows[:2] == first  # earlier rows untouched
    lines = shard_path(tmp_path, 0).read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line) for line in lines)  # the torn tail was cut, not kept
    assert collect(target, oracle_factory(drafter), items, tmp_path, CONFIG, meta_drafter=drafter) == []


def test_damaged_collect_folders_give_clear_errors(task, tmp_path):
    import shutil

    folder = tmp_path / "c"
    shutil.copytree(task.heldout_dir, folder)
    shard = shard_path(folder, 0)
    lines = shard.read_text().splitlines()
    shard.write_text("\n".join([lines[0], lines[1][:50], *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"line 2 is not valid JSON .* the file is corrupt"):
        read_records(folder)
    shard.write_text(json.dumps({"prompt_id": "x", "runs": []}) + "\n")
    with pytest.raises(ValueError, match=r"line 1 is not a valid row: not a complete PromptRecord: missing keys"):
        read_records(folder)
    shard.write_text(json.dumps({**json.loads(lines[0]), "runs": [{"block_size": 1}]}) + "\n")
    with pytest.raises(ValueError, match=r"line 1 .* not a complete SizeRun: missing keys \['acceptance_lengths'"):
        read_records(folder)
    (folder / "collect.json").unlink()
    with pytest.raises(FileNotFoundError, match="lacks collect.json"):
        read_records(folder)
    (folder / "collect.json").write_text("{ nope")
    with pytest.raises(ValueError, match=r"collect.json is not valid JSON \(line 1, column 3"):
        read_records(folder)


@pytest.mark.parametrize(
    "last_line",
    ['{"prompt_id": "syn/3/2", "sour\n', '{"prompt_id": "syn/3/2"}\n'],
    ids=["not-json", "not-a-record"],
)
def test_resume_refuses_a_complete_but_damaged_last_line(tmp_path, last_line):
    """A last line that ends in a newline is not a torn write: resuming must not append after it (which would bury
    it mid-file and make the folder unreadable by train-policy), but refuse, naming the file and line."""
    target, drafter = tiny_pair()
    items = synthetic_items(2, seed=4)
    collect(target, oracle_factory(drafter), items[:1], tmp_path, CONFIG, meta_drafter=drafter)
    shard = shard_path(tmp_path, 0)
    with shard.open("a") as f:
        f.write(last_line)
    before = shard.read_bytes()
    with pytest.raises(ValueError, match=rf"{shard.name}: line 2 "):
        read_records(tmp_path)
    with pytest.raises(ValueError, match=rf"{shard.name}: line 2 "):
        collect(target, oracle_factory(drafter), items, tmp_path, CONFIG, meta_drafter=drafter)
    assert shard.read_bytes() == before  # nothing appended, nothing cut


def test_resume_with_other_settings_is_refused(tmp_path):
    target, drafter = tiny_pair()
    items = synthetic_items(1, seed=5)
    collect(target, oracle_factory(drafter), items, tmp_path, CONFIG, meta_drafter=drafter)
    other = CollectConfig(block_sizes=[2], max_new_tokens=6)
    with pytest.raises(ValueError, match="collected with other settings \\(block_sizes differ\\)"):
        collect(target, oracle_factory(drafter), items, tmp_path, other, meta_drafter=drafter)
    with pytest.raises(ValueError, match="Pass `meta_drafter`"):
        collect(target, oracle_factory(drafter), items, tmp_path, CONFIG)


def test_later_turns_are_asked_after_the_targets_own_replies_and_skipped_when_collected():
    tokenizer, asked = tiny_tokenizer(), []

    def answer(input_ids):
        asked.append(input_ids[0].tolist())
        return f"reply {len(asked)}"

    items = items_from_prompts(tokenizer, "mt-bench:policy", limit=2, answer=answer, turns=2)
    prompts = load_prompts("mt-bench", "policy", 2)
    assert [i.prompt_id for i in items] == [
        prompts[0].id,
        f"{prompts[0].id}/turn2",
        prompts[1].id,
        f"{prompts[1].id}/turn2",
    ]
    assert items[1].input_ids == chat_input_ids(tokenizer, prompts[0].turns, ["reply 1"])[0].tolist()
    assert asked == [items[0].input_ids, items[2].input_ids]  # each reply is to exactly the turn before
    # Resuming: collected ids are left out, and a reply is generated only for a later turn still to collect.
    again = items_from_prompts(
        tokenizer, "mt-bench:policy", 2, answer, 2, skip={prompts[0].id, f"{prompts[0].id}/turn2", prompts[1].id}
    )
    assert [i.prompt_id for i in again] == [f"{prompts[1].id}/turn2"] and len(asked) == 3
    assert [i.prompt_id for i in items_from_prompts(tokenizer, "mt-bench:policy", 2)] == [p.id for p in prompts]
    with pytest.raises(ValueError, match="needs `answer`"):
        items_from_prompts(tokenizer, "mt-bench:policy", 2, turns=2)
