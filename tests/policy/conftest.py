import shutil

import pytest
import torch
from huggingface_hub import constants


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


REPO = "blockpilot-test/synthetic-policy"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def offline_cache(tmp_path, monkeypatch):
    """An HF cache under a private HF_HOME, offline; huggingface_hub reads its constants at import, so patch both."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home / "hub"


def populate(cache, folder, repo=REPO):
    """Lay out a cached snapshot the way huggingface_hub writes it: snapshots/<commit>/files + refs/main."""
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(folder, root / "snapshots" / COMMIT)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(COMMIT)
