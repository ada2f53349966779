import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run far faster on one thread than on two contended ones (a background job shares the CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def task(one_thread):
    from tests.training.synthetic_data import synthetic_task

    return synthetic_task()


@pytest.fixture()
def private_cost_cache(tmp_path, monkeypatch):
    """Keep calibrations of the user's real cache out of the tests (and the tests' out of it)."""
    monkeypatch.setattr("blockpilot_hf.policy.cost.cache_dir", lambda: tmp_path / "blockpilot-cost")
