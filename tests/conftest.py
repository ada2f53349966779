"""Shared pytest setup: one intra-op thread, because the tiny test models are slower with thread contention."""

import torch


def pytest_configure(config) -> None:
    # The test models are a few thousand parameters: a second thread only adds synchronisation cost, and on a
    # shared 2-core machine it makes each forward ~100x slower.
    torch.set_num_threads(1)
