"""The harness with tiny models: every arm runs on every prompt turn, greedy outputs match the baseline,
MT-Bench's second turn follows the baseline's answer, and a rerun resumes instead of repeating work."""

from __future__ import annotations

import pytest
import torch

from blockpilot_hf.bench import harness
from blockpilot_hf.bench.config import BenchConfig
from blockpilot_hf.bench.harness import arms_for, rotated, run_benchmark
from blockpilot_hf.bench.runs import RAW_NAME, read_raw
from tests.bench.tiny import tiny_prompts

RUN_ARMS = {
    "baseline",
    "baseline+kernels",
    "prompt-lookup",
    "dflash-hf",
    "fixed:1",
    "fixed:2",
    "fixed:4",
    "fixed:1+lookup10",
    "fixed:8+tree16",
    "fixed:8+tree16+lookup10",
    "blockpilot",
    "blockpilot-once",
    "per-step",
}


def small_config(**overrides) -> BenchConfig:
    fields = dict(
        datasets=["tiny"],
        temperatures=[0.0, 1.0],
        seeds=[3],
        block_sizes=[1, 2, 4],
        max_new_tokens=8,
        warmup_tokens=2,
        target="tiny",
        drafter="tiny",
        policy="tiny",
    )
    return BenchConfig(**{**fields, **overrides})


def units(records):
    out = {}
    for r in records:
        out.setdefault(r.unit, {})[r.arm] = r
    return out


@pytest.mark.usefixtures("private_cost_cache")  # no cached calibration: the policy chooses by tau alone
def test_every_arm_runs_on_every_turn_and_greedy_is_identical(models):
    sizes = models.policy.config.candidate_sizes
    with torch.no_grad():  # tau(4) ~= 4 and every other tau ~= 1, whatever the prompt: the policy must pick 4
        models.policy.heads[0].mlp[-1].bias.copy_(torch.tensor([30.0 if b == 4 else -30.0 for b in sizes]))
    config = small_config()
    records = run_benchmark(models, config, tiny_prompts(), tiny_prompts()[:1], progress=False)
    by_unit = units(records)
    evals = {k: v for k, v in by_unit.items() if k[0] == "eval"}
    # 3 prompts, MT-Bench has 2 turns -> 4 prompt turns, at T=0 (seed 0) and T=1 (seed 3).
    assert len(evals) == 8
    assert {k[5] for k in evals if k[4] == 1.0} == {3}
    for arms in evals.values():
        assert set(arms) == RUN_ARMS
    dev = [v for k, v in by_unit.items() if k[0] == "dev"]
    assert len(dev) == 1 and set(dev[0]) == {"baseline"} | {a for a in RUN_ARMS if a.startswith("fixed:")}
    greedy = [r for r in records if r.temperature == 0]
    assert all(r.identical is True for r in greedy), [(r.arm, r.prompt_id) for r in greedy if not r.identical]
    assert all(r.identical is None for r in records if r.temperature > 0)
    assert all(r.new_tokens == 8 and r.total_time > 0 and 0 < r.ttft <= r.total_time for r in records)
    ours = ("blockpilot", "blockpilot-once", "per-step")
    engine = [r for r in records if r.arm.startswith("fixed:") or r.arm in ours]
    assert all(r.tau is not None and r.tau >= 1 for r in engine)
    once = [r for r in records if r.arm == "blockpilot-once"]
    assert len(once) == 8 and all(r.block_size == 4 for r in once)
    for key, arms in evals.items():  # greedy at size 4 takes exactly the steps of the fixed:4 arm
        if key[4] == 0.0:
            assert arms["blockpilot-once"].tau == arms["fixed:4"].tau, key
    per_step = [r for r in records if r.arm in ("blockpilot", "per-step")]
    assert all(r.shape == "per-step" and r.policy_time > 0 for r in per_step)
    for r in records:  # where each committed token came from, for our engine's arms
        if r.arm == "fixed:1+lookup10":
            assert r.tokens_by_source["drafter"] == 0 and r.block_size == 1
        if r in engine:
            assert sum(r.tokens_by_source.values()) == r.new_tokens, (r.arm, r.tokens_by_source)


def test_second_turn_follows_the_baselines_first_answer(models, monkeypatch):
    seen = []
    original = harness.chat_input_ids

    def spy(tokenizer, turns, answers=()):
        seen.append((tuple(turns), list(answers)))
        return original(tokenizer, turns, answers)

    monkeypatch.setattr(harness, "chat_input_ids", spy)
    mt = tiny_prompts()[2]
    records = run_benchmark(models, small_config(temperatures=[0.0], arms=["baseline", "fixed"]), [mt], progress=False)
    first = next(r for r in records if r.arm == "baseline" and r.turn == 1)
    second_turn_calls = [answers for turns, answers in seen if len(turns) == 2]
    assert second_turn_calls == [[models.tokenizer.decode(first.output_ids, skip_special_tokens=True)]]


def test_resume_skips_finished_runs(models, tmp_path, monkeypatch):
    config = small_config(temperatures=[0.0], arms=["baseline", "fixed"], block_sizes=[1, 2], shapes=[])
    prompts = tiny_prompts()[:2]
    first = run_benchmark(models, config, prompts, out=tmp_path, progress=False)
    lines = (tmp_path / RAW_NAME).read_text().splitlines()
    assert len(lines) == len(first) == 6

    def fail(*args, **kwargs):
        raise AssertionError("a finished run was measured again")

    monkeypatch.setattr(harness, "measure", fail)
    again = run_benchmark(models, config, prompts, out=tmp_path, progress=False)
    assert [r.key for r in again] == [r.key for r in first]
    monkeypatch.undo()

    # Lose the last prompt's runs, with a torn half line as a crash would leave: only those run again.
    (tmp_path / RAW_NAME).write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    measured = []
    real = harness.measure
    monkeypatch.setattr(harness, "measure", lambda *a, **k: measured.append((a[3].split, a[1].name)) or real(*a, **k))
    run_benchmark(models, config, prompts, out=tmp_path, progress=False)
    arms = ["baseline", "fixed:1", "fixed:2"]
    assert sorted(measured) == sorted([("warmup", a) for a in arms] + [("eval", a) for a in arms])
    assert len(read_raw(tmp_path)) == 6


def test_resume_refuses_another_setup(models, tmp_path):
    config = small_config(temperatures=[0.0], arms=["baseline"])
    run_benchmark(models, config, tiny_prompts()[:1], out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="another setup.*max_new_tokens"):
        run_benchmark(
            models,
            small_config(temperatures=[0.0], arms=["baseline"], max_new_tokens=4),
            tiny_prompts()[:1],
            out=tmp_path,
            progress=False,
        )


def test_resume_refuses_other_weights_under_the_same_name(models, tmp_path):
    """'embedded' names every drafter that ships: a folder measured with other weights is not resumed."""
    config = small_config(temperatures=[0.0], arms=["baseline"])
    run_benchmark(models, config, tiny_prompts()[:1], out=tmp_path, progress=False)
    with torch.no_grad():
        next(models.drafter.parameters()).add_(1e-3)
    with pytest.raises(ValueError, match="another setup.*drafter_weights"):
        run_benchmark(models, config, tiny_prompts()[:1], out=tmp_path, progress=False)


def test_arms_and_rotation(models):
    arms = arms_for(small_config(), has_policy=False)
    assert [a.name for a in arms] == [
        "baseline",
        "baseline+kernels",
        "prompt-lookup",
        "dflash-hf",
        "fixed:1",
        "fixed:2",
        "fixed:4",
        "fixed:1+lookup10",
        "fixed:8+tree16",
        "fixed:8+tree16+lookup10",
        "per-step",  # blockpilot and blockpilot-once need a policy
    ]
    assert [a.name for a in rotated(arms, 3)][:2] == ["dflash-hf", "fixed:1"]
    with pytest.raises(ValueError, match="baseline arm is required"):
        BenchConfig(arms=["fixed"])
    with pytest.raises(ValueError, match="Unknown arms"):
        BenchConfig(arms=["baseline", "medusa"])


def test_repeats_interleave_the_arms_and_keep_the_median_run(models, monkeypatch):
    from blockpilot_hf.bench import harness

    order, clock = [], iter(range(1, 1000))
    real = harness.measure

    def timed(models, arm, *args, **kwargs):
        order.append(arm.name)
        record = real(models, arm, *args, **kwargs)
        record.total_time = float(next(clock))  # a known, distinct time per run
        return record

    monkeypatch.setattr(harness, "measure", timed)
    config = small_config(arms=["baseline", "fixed"], block_sizes=[2], shapes=[], temperatures=[0.0], repeats=3)
    records = run_benchmark(models, config, tiny_prompts()[:1], [], progress=False)
    # round r starts at arm r (mod 2): baseline, fixed:2 | fixed:2, baseline | baseline, fixed:2
    assert order[-6:] == ["baseline", "fixed:2", "fixed:2", "baseline", "baseline", "fixed:2"]
    base = next(r for r in records if r.arm == "baseline")
    assert len(base.repeat_times) == 3 and base.total_time == sorted(base.repeat_times)[1]
