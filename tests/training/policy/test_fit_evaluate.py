"""The synthetic task is learned; train-policy / evaluate-policy write what they promise."""

import dataclasses
import json

import pytest
import torch

from blockpilot_hf import BlockPolicy
from blockpilot_hf.cli import main
from blockpilot_hf.data import is_heldout, turn_id
from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.testing_utils import SYNTHETIC_COST, best_size, oracle_factory, synthetic_items, tiny_pair
from blockpilot_hf.training.policy.collect import collect
from blockpilot_hf.training.policy.collected import read_records
from blockpilot_hf.training.policy.evaluate import evaluate_policy, evaluate_records
from blockpilot_hf.training.policy.fit import FitConfig, split_records, train_policy
from tests.training.policy.synthetic_data import CONFIG

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def test_head_learns_the_known_best_size_on_heldout_prompts(task):
    report = evaluate_records(task.policy, task.heldout, cost=SYNTHETIC_COST)
    chosen = report.choices["blockpilot"]
    truth = [DraftShape(best_size(r.source, [1, 2, 4, 8])) for r in task.heldout]
    assert report.choices["oracle"] == truth  # the oracle recovers the construction
    accuracy = sum(c == t for c, t in zip(chosen, truth, strict=True)) / len(truth)
    assert accuracy >= 0.75, (chosen, truth)  # chance is 0.25 (4 sizes); the best single size gets 0.5
    mine, fixed = report.score("blockpilot"), report.score("best-fixed:8")
    assert fixed.accuracy == 0.5
    assert mine.regret < fixed.regret  # mean per-prompt loss vs the oracle
    # The paper's rule (argmax tau) cannot see that drafting does not pay on hard prompts:
    assert report.score("blockpilot", "hard").accuracy > report.score("blockpilot-classifier", "hard").accuracy


def test_candidate_table_prices_each_candidate_against_one_token_steps(task):
    report = evaluate_records(task.policy, task.heldout, cost=SYNTHETIC_COST)
    rows = {str(c.candidate): c for c in report.candidates}
    assert list(rows) == ["1", "2", "4", "8"]
    assert (rows["1"].tau, rows["1"].relative_cost) == (1.0, 1.0)
    assert rows["8"].relative_cost == pytest.approx(1.45)
    assert rows["8"].tau == pytest.approx(sum(r.taus()[rows["8"].candidate] for r in task.heldout) / len(task.heldout))
    assert rows["8"].tau > 1.5  # the oracle drafter gets whole blocks of some prompts right
    assert f"| 8 | {rows['8'].tau:.2f} | 1.45 | {rows['8'].tau / 1.45:.2f} |" in report.markdown()


def test_heldout_split_is_deterministic_and_disjoint(task):
    train, heldout = split_records(task.train, 0.25)
    assert train and heldout and not {r.prompt_id for r in train} & {r.prompt_id for r in heldout}
    assert all(is_heldout(r.prompt_id, 0.25) for r in heldout)
    assert split_records(task.train, 0.25) == (train, heldout)


def test_every_turn_of_a_chat_lands_on_the_side_of_its_first_turn():
    """A second turn holds the first in context: scoring one and training on the other would leak."""
    ids = [f"mt-bench/{i}" for i in range(80, 120)]
    assert {is_heldout(i, 0.5) for i in ids} == {True, False}  # both sides occur, so the check below can fail
    assert all(is_heldout(turn_id(i, 2), 0.5) == is_heldout(i, 0.5) for i in ids)
    with pytest.raises(ValueError, match="heldout_fraction"):
        FitConfig(heldout_fraction=1.0)


def test_train_policy_writes_folder_with_results(task, tmp_path):
    policy = train_policy(
        [task.train_dir], tmp_path / "p", FitConfig(heldout_fraction=0.25, epochs=50), cost=SYNTHETIC_COST
    )
    loaded = BlockPolicy.from_pretrained(tmp_path / "p")
    assert loaded.config.candidate_sizes == [1, 2, 4, 8] and loaded.config.training_block_size == 8
    assert loaded.config.cost == SYNTHETIC_COST and loaded.config.best_fixed_size in (1, 8)
    names = [r.name for r in loaded.config.results]
    assert "blockpilot regret vs oracle at T=0" in names and "blockpilot accuracy vs oracle at T=0" in names
    assert "blockpilot regret vs oracle at T=0" in (tmp_path / "p" / "README.md").read_text()
    assert policy.config == loaded.config


def test_train_policy_fits_one_head_per_collect_folder(task, tmp_path):
    """A greedy folder and a T=1 replayed one give a policy with two heads, each scored on its own prompts."""
    target, drafter = tiny_pair()
    sampled = dataclasses.replace(CONFIG, replay=True, temperature=1.0)
    collect(target, oracle_factory(drafter), synthetic_items(24, seed=0), tmp_path / "t1", sampled, drafter)
    assert read_records(tmp_path / "t1")[0].temperature == 1.0
    config = FitConfig(heldout_fraction=0.25, epochs=50)
    policy = train_policy([tmp_path / "t1", task.train_dir], tmp_path / "p", config, cost=SYNTHETIC_COST)
    assert policy.config.temperatures == [0.0, 1.0] and len(policy.heads) == 2
    names = [r.name for r in policy.config.results]
    assert "blockpilot regret vs oracle at T=0" in names and "blockpilot regret vs oracle at T=1" in names
    assert "temperature(s) 0, 1, one head each" in (tmp_path / "p" / "README.md").read_text()
    # Each head is the one a single-folder fit gives.
    alone = train_policy([task.train_dir], tmp_path / "p0", config, cost=SYNTHETIC_COST)
    assert torch.equal(policy.heads[0].mlp[-1].weight, alone.heads[0].mlp[-1].weight)
    with pytest.raises(ValueError, match="share a temperature"):
        train_policy([task.train_dir, task.train_dir], tmp_path / "p2", config, cost=SYNTHETIC_COST)


def test_cli_train_and_evaluate_with_plots(task, tmp_path, capsys):
    main(
        [
            "train-policy",
            str(task.train_dir),
            "--out",
            str(tmp_path / "p"),
            "--epochs",
            "20",
            "--hidden-sizes",
            "16",
        ]
    )
    assert BlockPolicy.from_pretrained(tmp_path / "p").config.hidden_sizes == [16]
    main(["evaluate-policy", str(task.policy_dir), str(task.heldout_dir), "--plots", str(tmp_path / "plots")])
    table = capsys.readouterr().out
    for row in (
        "| all | blockpilot |",
        "| easy | oracle |",
        "| hard | entropy |",
        "| all | training-size:8 |",
    ):
        assert row in table
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "best_sizes.png",
        "predicted_vs_actual.png",
        "tau_vs_size.png",
    ]


def test_evaluate_can_score_only_the_prompts_training_holds_out(task, capsys):
    _, heldout = split_records(task.train, 0.25)
    assert 0 < len(heldout) < len(task.train)
    report = evaluate_policy(task.policy_dir, task.train_dir, heldout_fraction=0.25)
    assert len(report.choices["oracle"]) == len(heldout)
    main(["evaluate-policy", str(task.policy_dir), str(task.train_dir), "--heldout-fraction", "0.25"])
    assert capsys.readouterr().out.strip() == report.markdown().strip()


def test_evaluate_prices_runs_with_the_cost_model_it_is_given(task, tmp_path, capsys):
    """--cost-from replaces the folder's own timings: a model where big blocks are dear makes the oracle pick
    smaller sizes, whatever the policy stored."""
    from blockpilot_hf.policy.config import CostModel

    dear = CostModel([1, 2, 4, 8], [1.0, 4.0, 16.0, 64.0], "cpu", "synthetic")
    (tmp_path / "dear.json").write_text(json.dumps(dataclasses.asdict(dear)))
    own = evaluate_policy(task.policy_dir, task.heldout_dir)
    priced = evaluate_policy(task.policy_dir, task.heldout_dir, cost=dear)
    assert set(priced.choices["oracle"]) == {DraftShape(1)} != set(own.choices["oracle"])
    main(["evaluate-policy", str(task.policy_dir), str(task.heldout_dir), "--cost-from", str(tmp_path / "dear.json")])
    assert capsys.readouterr().out.strip() == priced.markdown().strip()


def test_evaluate_refuses_data_without_the_policy_sizes(task, tmp_path):
    import shutil

    folder = tmp_path / "c"
    shutil.copytree(task.heldout_dir, folder)
    meta = json.loads((folder / "collect.json").read_text())
    (folder / "collect.json").write_text(json.dumps({**meta, "block_sizes": [1, 2, 4]}))
    with pytest.raises(ValueError, match="no runs with 8, which the policy can choose"):
        evaluate_policy(task.policy_dir, folder)


def test_evaluate_takes_the_embedded_policy_by_name(task):
    # 'embedded' is the shipped policy, as in bench and train-policy --cost-from; here it reaches the check that
    # the (synthetic) collection is not of its target, not a Hub lookup of a repo called 'embedded'.
    with pytest.raises(ValueError, match="collected for another target/drafter than policy"):
        evaluate_policy("embedded", task.heldout_dir)
