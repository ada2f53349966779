"""Replayed acceptance equals decoded acceptance: `collect --replay` labels policy prompts with exactly the steps
decoding with each candidate records, and a replayed folder is never priced with timings it does not have."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from blockpilot_hf import BlockPolicy
from blockpilot_hf.cli import main
from blockpilot_hf.decoding.shape import DraftShape
from blockpilot_hf.decoding.tree import DraftTree
from blockpilot_hf.jsonfile import save_json
from blockpilot_hf.testing_utils import greedy_pair, plain_greedy, random_prompt, repetitive_prompt, synthetic_items
from blockpilot_hf.training.answers import plain_answer, sampling_seed
from blockpilot_hf.training.drafter.target_features import target_pass
from blockpilot_hf.training.policy.collect import CollectItem, collect, collect_prompt, replay_prompt
from blockpilot_hf.training.policy.collected import read_records
from blockpilot_hf.training.policy.config import CollectConfig, FitConfig
from blockpilot_hf.training.policy.fit import fit_policy
from blockpilot_hf.training.replay import block_logits, replay_shape, tree_matches, walk

pytestmark = pytest.mark.usefixtures("private_cost_cache")

CANDIDATES = dict(
    block_sizes=[2, 4, 8], shapes=["1+lookup7", "4+lookup4", "8+lookup7", "4+tree6", "8+tree12", "8+tree10+lookup7"]
)


def taught_drafter(target, drafter, tokens: torch.Tensor, start: int, steps: int = 40):
    """A copy of the random drafter fitted for a few steps to the answer in `tokens` (S,), generated from position
    `start`: it then drafts 1-7 tokens right per block, depending on the context it reads (so a replay with
    misaligned context would show)."""
    features = target_pass(target, tokens[None], drafter.config.target_layer_ids).features
    anchors = torch.arange(start, len(tokens) - 1)
    taught = copy.deepcopy(drafter).train()
    optimizer = torch.optim.Adam(taught.parameters(), lr=3e-3)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    for _ in range(steps):
        logits, batch = block_logits(taught, embed, head, features, tokens, anchors, 8)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return taught.eval()


@pytest.mark.parametrize(
    "prompt, max_new_tokens",
    [(random_prompt(5, 12), 40), (repetitive_prompt(2, chunk=5, repeats=3), 37)],
    ids=["random", "repetitive"],
)
def test_replayed_steps_equal_decoded_steps(prompt, max_new_tokens):
    """Every chain, tree and lookup shape, up to the length limit (where blocks shrink): same steps, same
    features."""
    target, drafter = greedy_pair()
    answer = plain_greedy(target, prompt, max_new_tokens)[0]
    drafter = taught_drafter(target, drafter, answer, prompt.shape[1])
    config = CollectConfig(max_new_tokens=max_new_tokens, **CANDIDATES)
    item = CollectItem("p", "syn", prompt[0].tolist())
    decoded = collect_prompt(target, drafter, item, config)
    replayed = replay_prompt(target, drafter, item, config)
    assert all(run.matches_greedy for run in decoded.runs)
    assert replayed.features == decoded.features
    assert replayed.plain_new_tokens == decoded.plain_new_tokens == max_new_tokens
    for want, got in zip(decoded.runs, replayed.runs, strict=True):
        assert got.candidate == want.candidate
        assert got.acceptance_lengths == want.acceptance_lengths, str(want.candidate)
        assert got.copied == want.copied, str(want.candidate)  # what prices each step
        assert got.new_tokens == want.new_tokens and got.total_time == 0.0
    # Not vacuous: the drafter's chains, its trees and the copies all get drafts accepted.
    assert decoded.run(8).tau > 2.0 and decoded.run(DraftShape.parse("1+lookup7")).tau > 1.2
    assert any(decoded.run(DraftShape.parse("1+lookup7")).copied)
    assert decoded.run(DraftShape.parse("8+tree12")).tau > 2.0


@pytest.mark.parametrize(
    "prompt, max_new_tokens",
    [(random_prompt(5, 12), 40), (repetitive_prompt(2, chunk=5, repeats=3), 37)],
    ids=["random", "repetitive"],
)
def test_sampled_replay_equals_sampled_decoding(prompt, max_new_tokens):
    """At T=1 the replay walks one sampled answer. Decoding with the seed that answer was sampled with commits the
    same tokens (one draw per committed token, as plain sampling makes), so each candidate's steps must be
    exactly the replayed ones; a greedy replay would not be."""
    target, drafter = greedy_pair()
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(20)  # a sharper target: copies get accepted under sampling too
    item = CollectItem("p", "syn", prompt[0].tolist())
    seed = sampling_seed(item.prompt_id)
    answer = plain_answer(target, prompt, max_new_tokens, 1.0, seed)[0][0]
    assert not torch.equal(answer, plain_greedy(target, prompt, max_new_tokens)[0])  # it really is sampled
    drafter = taught_drafter(target, drafter, answer, prompt.shape[1])
    config = CollectConfig(max_new_tokens=max_new_tokens, replay=True, temperature=1.0, **CANDIDATES)
    replayed = replay_prompt(target, drafter, item, config)
    greedy = replay_prompt(target, drafter, item, dataclasses.replace(config, temperature=0.0))
    assert not any(run.matches_greedy for run in replayed.runs)
    for run in replayed.runs:
        torch.manual_seed(seed)
        out = target.generate(
            input_ids=prompt,
            assistant_model=drafter,
            block_policy=f"fixed:{run.candidate}",
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            return_dict_in_generate=True,
        )
        assert torch.equal(out.sequences[0], answer)
        assert out.blockpilot.acceptance_lengths == run.acceptance_lengths, str(run.candidate)
        assert out.blockpilot.copied == run.copied, str(run.candidate)
    accepted = [replayed.run(DraftShape.parse(c)).tau for c in ("8", "4+lookup4", "8+tree12")]
    assert min(accepted) > 1.1  # drafts accepted
    assert [r.acceptance_lengths for r in greedy.runs] != [r.acceptance_lengths for r in replayed.runs]


def test_walk_and_lookup_rules():
    """Hand-checked walks: a step at p commits its accepted drafts + 1; a copy wins over the chain; no drafts
    once one token of room is left."""
    assert walk(0, 7, lambda p: 2) == [3, 3]
    assert walk(3, 4, lambda p: 5) == []  # the first generated token is the last one: no step
    tokens = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2, 9])
    lookup = DraftShape.parse("1+lookup3")
    # From the second '1' (start=3): '1' occurred before, copy what followed it, [2, 3, 1]: all right -> 4; at p=7
    # one token of room is left (max_length 9): no drafts -> 1.
    assert replay_shape(lookup, tokens, 3, 9, lambda p, k: 0) == ([4, 1], [3, 0])  # lengths, copies per step
    chain = DraftShape.parse("4")
    asked = []
    lengths = replay_shape(chain, tokens, 0, 9, lambda p, k: asked.append((p, k)) or k - 1)
    assert lengths == ([4, 4], [0, 0]) and asked == [(0, 4), (4, 4)]  # then p = 8 is the end
    asked.clear()
    assert replay_shape(chain, tokens, 2, 9, lambda p, k: asked.append((p, k)) or 0).acceptance_lengths == [1] * 6
    assert asked == [(2, 4), (3, 4), (4, 4), (5, 3), (6, 2)]  # blocks shrink to the room; none at room 1
    # A tree of the drafter's best continuations, with the copy as one more branch: the walk follows whichever
    # branch holds the answer's tokens.
    tree = DraftTree([2, 7, 3], [0, 0, 1], [1, 1, 2])  # anchor -> 2 -> 3, anchor -> 7
    assert tree_matches(tree, tokens, 0) == 2 and tree_matches(tree, tokens, 1) == 0
    trees = []
    shape = DraftShape.parse("4+tree3+lookup3")
    lengths = replay_shape(shape, tokens, 3, 9, lambda p, k: 0, lambda p, k, b: trees.append((p, k, b)) or tree)
    assert lengths == ([4, 1], [0, 0]) and trees == [
        (3, 4, 3)
    ]  # a tree's copy is not a lookup step  # the copy's branch [2, 3, 1] is right; then no room
    with pytest.raises(ValueError, match=r"replaying a tree needs the drafter's trees"):
        replay_shape(DraftShape.parse("4+tree8"), tokens, 0, 9, lambda p, k: 0)


def test_a_replayed_folder_needs_a_cost_model(tmp_path):
    """Replayed runs have no timings: fitting asks for a cost model by name, refuses one that cannot price every
    shape, and uses one that can."""
    from blockpilot_hf.testing_utils import SYNTHETIC_COST

    target, drafter = greedy_pair()
    config = CollectConfig(max_new_tokens=8, block_sizes=[2, 4], shapes=["4+lookup4"], replay=True)
    collect(target, drafter, synthetic_items(3, seed=1), tmp_path, config)
    meta, records = read_records(tmp_path)
    assert meta.replayed and len(records) == 3
    assert all(run.total_time == 0.0 for r in records for run in r.runs)
    with pytest.raises(ValueError, match=r"made with --replay.*--cost-from"):
        fit_policy(meta, records, FitConfig(epochs=2))
    with pytest.raises(ValueError, match=r"no step cost for 4\+lookup4: take it from a policy"):
        fit_policy(meta, records, FitConfig(epochs=2), SYNTHETIC_COST)
    cost = dataclasses.replace(SYNTHETIC_COST, shapes={"4+lookup4": 1.2e-3})
    assert fit_policy(meta, records, FitConfig(epochs=2), cost).config.cost == cost
    # A calibration file (what `blockpilot calibrate` caches) prices them too.
    save_json(cost, tmp_path / "calibration.json")
    main(
        [
            "train-policy",
            str(tmp_path),
            "--out",
            str(tmp_path / "policy"),
            "--cost-from",
            str(tmp_path / "calibration.json"),
            "--epochs",
            "2",
        ]
    )
    assert BlockPolicy.from_pretrained(tmp_path / "policy").config.cost == cost


def test_sampled_collect_needs_replay():
    with pytest.raises(ValueError, match=r"--temperature 1 needs --replay"):
        CollectConfig(temperature=1.0)
    with pytest.raises(ValueError, match=r"--temperature must be >= 0"):
        CollectConfig(temperature=-0.5, replay=True)
