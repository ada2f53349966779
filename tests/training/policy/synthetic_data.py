"""The synthetic BlockPilot task, collected and trained once per test session (shared by tests/policy and
tests/training): 24 training prompts, 12 held-out prompts, sizes 1, 2, 4, 8, 12 new tokens each."""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path

from blockpilot_hf.policy import BlockPolicy
from blockpilot_hf.testing_utils import SYNTHETIC_COST, oracle_factory, synthetic_items, tiny_pair
from blockpilot_hf.training.policy.collect import CollectConfig, collect
from blockpilot_hf.training.policy.collected import CollectMeta, PromptRecord, read_records
from blockpilot_hf.training.policy.fit import FitConfig, fit_policy

CONFIG = CollectConfig(block_sizes=[2, 4, 8], max_new_tokens=12)


@dataclass
class SyntheticTask:
    root: Path
    train_dir: Path
    heldout_dir: Path
    meta: CollectMeta
    train: list[PromptRecord]
    heldout: list[PromptRecord]
    policy: BlockPolicy
    policy_dir: Path


@functools.lru_cache(maxsize=1)
def synthetic_task() -> SyntheticTask:
    root = Path(tempfile.mkdtemp(prefix="blockpilot-synthetic-"))
    target, drafter = tiny_pair()
    factory = oracle_factory(drafter)
    collect(target, factory, synthetic_items(24, seed=0), root / "train", CONFIG, meta_drafter=drafter)
    collect(
        target,
        factory,
        synthetic_items(12, seed=1, prefix="held"),
        root / "heldout",
        CONFIG,
        meta_drafter=drafter,
    )
    meta, train = read_records(root / "train")
    _, heldout = read_records(root / "heldout")
    policy = fit_policy(meta, train, FitConfig(name="synthetic", decision="per-request"), cost=SYNTHETIC_COST)
    policy.save_pretrained(root / "policy")
    return SyntheticTask(root, root / "train", root / "heldout", meta, train, heldout, policy, root / "policy")
