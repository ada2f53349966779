"""Shared pytest setup: one intra-op thread, because the tiny test models are slower with thread contention."""

import pytest
import torch


def pytest_configure(config) -> None:
    # The test models are a few thousand parameters: a second thread only adds synchronisation cost, and on a
    # shared 2-core machine it makes each forward ~100x slower.
    torch.set_num_threads(1)


@pytest.fixture()
def task():
    """The synthetic BlockPilot task (two prompt kinds with known best block sizes), for policy and training tests."""
    from tests.training.policy.synthetic_data import synthetic_task

    return synthetic_task()


@pytest.fixture()
def private_cost_cache(tmp_path, monkeypatch):
    """Keep calibrations of the user's real cache out of the tests (and the tests' out of it)."""
    monkeypatch.setattr("blockpilot_hf.policy.cost.cache_dir", lambda: tmp_path / "blockpilot-cost")
