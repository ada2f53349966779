"""Policy tests: an offline Hugging Face cache built by hand."""

import shutil

import pytest
from huggingface_hub import constants

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
