"""`generate(block_policy=...)`: every accepted form, the chosen size reported, output identical to plain greedy."""

import copy
import functools

import pytest
import torch

from blockpilot_hf import BlockPolicy
from blockpilot_hf.decoding.engine import BlockChooser
from blockpilot_hf.jsonfile import save_json
from blockpilot_hf.policy import EntropyPolicy, FixedPolicy, calibrate, load_calibration
from blockpilot_hf.policy.config import CostModel
from blockpilot_hf.policy.cost import calibration_path
from blockpilot_hf.policy.resolve import as_chooser, resolve_block_policy
from blockpilot_hf.testing_utils import drafted_greedy, oracle_factory, synthetic_items, tiny_pair
from tests.policy.conftest import REPO, populate

pytestmark = pytest.mark.usefixtures("private_cost_cache")

NEW = 12


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


run = functools.partial(drafted_greedy, max_new_tokens=NEW)


def fresh_prompts(pair):
    """An easy and a hard prompt never seen in training, each with its per-prompt oracle drafter."""
    target, drafter = pair
    out = []
    for item in synthetic_items(2, seed=99, prefix="fresh"):
        ids = torch.tensor([item.input_ids])
        plain = target.generate(input_ids=ids, max_new_tokens=NEW, do_sample=False)
        out.append((item.source, ids, plain, oracle_factory(drafter)(item, plain)))
    return out


@pytest.mark.parametrize("form", ["folder", "hub-id", "instance"])
def test_policy_forms_choose_known_size_and_stay_lossless(task, pair, form, offline_cache):
    target, _ = pair
    if form == "hub-id":
        populate(offline_cache, task.policy_dir)
    block_policy = {
        "folder": str(task.policy_dir),
        "hub-id": REPO,
        "instance": BlockPolicy.from_pretrained(task.policy_dir),
    }[form]
    for kind, ids, plain, drafter in fresh_prompts(pair):
        out = run(target, drafter, ids, block_policy=block_policy)
        assert torch.equal(out.sequences, plain)
        stats = out.blockpilot
        assert stats.block_size == (8 if kind == "easy" else 1), kind  # the known right answers
        assert stats.policy == "blockpilot:synthetic"
        assert 0 < stats.policy_time < stats.total_time


@pytest.mark.parametrize("forced", [1, 2, 3, 5, 8, 32])
def test_any_choice_is_token_identical_to_plain_greedy(pair, forced):
    target, drafter = pair
    ids = torch.tensor([synthetic_items(1, seed=7)[0].input_ids])
    plain = target.generate(input_ids=ids, max_new_tokens=NEW, do_sample=False)
    out = run(target, drafter, ids, block_policy=lambda prefill: forced)
    assert torch.equal(out.sequences, plain)
    assert out.blockpilot.block_size == forced and out.blockpilot.policy == "<lambda>"


# EntropyPolicy's thresholds, as offsets from the prompt's prefill entropy H, and the size it must pick:
# H <= low drafts the longest block, H >= high drafts none, 3/4 of the way from low to high 8 ** (1/4) ~= 1.7 -> 2.
@pytest.mark.parametrize("low, high, expected", [(1, 2, 8), (-2, -1, 1), (-3, 1, 2)])
def test_baseline_chooser_in_generate(pair, low, high, expected):
    target, drafter = pair
    ids = torch.tensor([synthetic_items(1, seed=3)[0].input_ids])
    plain = target.generate(input_ids=ids, max_new_tokens=NEW, do_sample=False)
    with torch.no_grad():
        logp = torch.log_softmax(target(ids).logits[0, -1].double(), -1)
    entropy = -(logp.exp() * logp).sum().item()  # nats, as the policy measures it on the prefill
    policy = EntropyPolicy([1, 2, 4, 8], low=entropy + low, high=entropy + high)
    out = run(target, drafter, ids, block_policy=policy)
    assert torch.equal(out.sequences, plain) and out.blockpilot.policy == "entropy"
    assert out.blockpilot.block_size == expected


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (lambda p: 0, ValueError, "returned an invalid block size or shape: block size 0 is out of range"),
        (lambda p: 33, ValueError, "out of range: use 1 .* to 32"),
        (lambda p: 4.0, TypeError, "must be an int"),
    ],
)
def test_bad_chooser_answers_are_caught(pair, bad, error, message):
    target, drafter = pair
    with pytest.raises(error, match=message):
        run(target, drafter, torch.tensor([[1, 2, 3]]), block_policy=bad)


def test_resolve_errors(task, pair, tmp_path):
    target, drafter = pair
    with pytest.raises(ValueError, match="Unknown block_policy 2.5 \\(float\\)"):
        resolve_block_policy(2.5, None, drafter, target)
    with pytest.raises(ValueError, match="either `block_size` or `block_policy`"):
        resolve_block_policy(str(task.policy_dir), 4, drafter, target)
    with pytest.raises(FileNotFoundError, match="not a BlockPilot policy: it lacks config.json"):
        resolve_block_policy(str(tmp_path), None, drafter, target)
    policy = BlockPolicy.from_pretrained(task.policy_dir)
    drafter.config.block_size = 1 + 1  # now the largest allowed size is 8: exactly fits
    try:
        resolve_block_policy(policy, None, drafter, target)
        policy.config.candidate_sizes = [1, 2, 4, 8, 12]
        with pytest.raises(ValueError, match="can choose 12, which cannot run here: block size 12 is out of range"):
            resolve_block_policy(policy, None, drafter, target)
    finally:
        drafter.config.block_size = 8


def test_calibration_is_cached_and_preferred(task, pair):
    target, drafter = pair
    assert load_calibration(target, drafter) is None
    cost = calibrate(target, drafter, [2, 4, 8, "4+tree6"], new_tokens=6, rounds=2)
    assert cost.block_sizes == [1, 2, 4, 8] and all(s > 0 for s in cost.seconds) and cost.source == "calibrated"
    assert list(cost.shapes) == ["4+tree6"] and cost.shapes["4+tree6"] > 0
    assert load_calibration(target, drafter) == cost
    policy = BlockPolicy.from_pretrained(task.policy_dir)
    chooser = resolve_block_policy(policy, None, drafter, target)
    assert chooser.chooser.cost == cost  # this machine's measurement, not the stored synthetic one
    assert policy.config.cost != cost  # ... used without installing it in the user's policy


def test_calibrating_prompt_lookup_needs_real_prompts(pair):
    """On random tokens lookup never copies: its cost would silently be the drafter's, so it is refused; on a
    text that repeats it runs."""
    target, drafter = pair
    with pytest.raises(ValueError, match="Timing prompt-lookup shapes needs real prompts"):
        calibrate(target, drafter, [2, "1+lookup4"], save=False)
    cost = calibrate(target, drafter, ["1+lookup4"], [torch.arange(2, 6).repeat(1, 4)], 6, 1, save=False)
    assert cost.block_sizes == [1] and cost.shapes["1+lookup4"] > 0


def test_generate_leaves_the_users_policy_untouched(task, pair):
    target, drafter = pair
    # A cached calibration that generate will use; fixed numbers (the shape of a real CPU's), not a timing run,
    # so the choices below do not depend on the machine's load.
    cost = CostModel([1, 2, 4, 8], [1.0e-3, 1.2e-3, 1.3e-3, 1.5e-3], "cpu", "calibrated")
    calibration_path(target, drafter).parent.mkdir(parents=True)
    save_json(cost, calibration_path(target, drafter))
    policy = BlockPolicy.from_pretrained(task.policy_dir).double()
    config, state = copy.deepcopy(policy.config), {k: v.clone() for k, v in policy.state_dict().items()}
    attributes = {k: v for k, v in vars(policy).items() if not k.startswith("_")}
    for kind, ids, plain, oracle in fresh_prompts(pair):
        out = run(target, oracle, ids, block_policy=policy)
        assert torch.equal(out.sequences, plain) and out.blockpilot.block_size == (8 if kind == "easy" else 1)
    assert {k: v for k, v in vars(policy).items() if not k.startswith("_")} == attributes
    assert policy.config == config and config.cost != cost
    after = policy.state_dict()
    assert all(torch.equal(after[k], v) and after[k].dtype == v.dtype == torch.float64 for k, v in state.items())
    assert {t.device for t in after.values()} == {torch.device("cpu")}


def test_every_policy_form_is_a_block_chooser(task):
    assert isinstance(BlockPolicy.from_pretrained(task.policy_dir), BlockChooser)
    assert isinstance(FixedPolicy(4), BlockChooser) and isinstance(EntropyPolicy([1, 2, 4]), BlockChooser)
    named = FixedPolicy(4, name="mine")
    assert as_chooser(named) is named  # a chooser with a name is used as it is

    def by_length(prefill):
        return 4

    wrapped = as_chooser(by_length)  # a plain callable is wrapped once, named after its function
    assert isinstance(wrapped, BlockChooser) and wrapped.name == "by_length" and wrapped(None) == 4
    assert as_chooser(functools.partial(by_length)).name == "partial"
