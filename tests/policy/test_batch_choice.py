"""A BlockPilot policy in a batch picks one size for all rows: the best predicted throughput of the batch, with a
step of B rows x b tokens priced like one row of B * b tokens."""

from __future__ import annotations

import pytest
import torch

from blockpilot_hf.policy.config import CostModel
from blockpilot_hf.testing_utils import synthetic_items, tiny_pair

pytestmark = pytest.mark.usefixtures("private_cost_cache")


def features_of(task, kinds: list[str]):
    """Prefill features of held-out prompts of the given kinds, in order."""
    from blockpilot_hf.policy.features import PrefillFeatures

    pool = {kind: [r for r in task.heldout if r.source == kind] for kind in set(kinds)}
    return [PrefillFeatures.from_list(pool[k].pop().features, task.policy.config.features) for k in kinds]


def test_choose_batch_maximises_the_batch_throughput(task):
    policy = task.policy
    rows = features_of(task, ["easy", "easy", "hard"])
    taus = [policy.predict_tau(f) for f in rows]
    sizes = policy.config.candidate_sizes
    for cost in (
        CostModel([1, 8, 24], [1.0, 1.2, 1.5]),  # wide steps nearly free: the batch drafts long
        CostModel([1, 3, 24], [1.0, 3.0, 24.0]),  # cost grows with every token: drafting never pays
    ):
        scores = [sum(t[i] for t in taus) / cost.step_seconds(3 * b) for i, b in enumerate(sizes)]
        expected = sizes[max(range(len(sizes)), key=lambda i: (scores[i], -i))]
        assert policy.choose_batch(rows, cost=cost) == expected
    assert policy.choose_batch(rows, cost=CostModel([1, 8, 24], [1.0, 1.2, 1.5])) == 8
    assert policy.choose_batch(rows, cost=CostModel([1, 3, 24], [1.0, 3.0, 24.0])) == 1
    assert policy.choose_batch(features_of(task, ["hard", "hard"]), rule="classifier") == 1


def test_choose_batch_never_prices_steps_wider_than_measured(task):
    rows = features_of(task, ["easy", "easy", "easy"])
    narrow = CostModel([1, 2, 8], [1.0, 1.01, 1.02])  # measured up to 8 tokens: 3 rows allow sizes 1 and 2 only
    assert task.policy.choose(rows[0], cost=narrow) == 8  # one row: the long block pays
    assert task.policy.choose_batch(rows, cost=narrow) == 2  # 3 x 4 = 12 tokens was never measured
    assert task.policy.choose_batch(rows, cost=CostModel([1, 24], [1.0, 1.02])) == 8


def test_a_batch_decodes_every_row_at_the_policy_batch_size(task):
    target, drafter = tiny_pair()
    items = synthetic_items(2, seed=7)
    ids = torch.tensor([item.input_ids for item in items])
    out = target.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        assistant_model=drafter,
        block_policy=task.policy_dir,
        max_new_tokens=8,
        do_sample=False,
        return_dict_in_generate=True,
    )
    plain = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    assert torch.equal(out.sequences, plain)
    assert len({s.block_size for s in out.blockpilot}) == 1  # one size for the batch, from choose_batch
    assert all(s.policy == "blockpilot:synthetic" for s in out.blockpilot)
